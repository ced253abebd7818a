#!/usr/bin/env bash
# The GPU suite, on a machine with an NVIDIA driver and GPU:
#   1. build kvik into build-gpu/ and run every C test; there the `device_system` test runs the
#      device tests against the real driver, with files larger than 4 GiB;
#   2. reads into CuPy and PyTorch memory (tests/test_frameworks.py); the Python package's tests
#      with CuPy and PyTorch (stream-ordered IO beside their frees and module loads among them),
#      bench/python_read.py into NumPy and CuPy arrays, bench/stream_read.py; then `kvik info`;
#   3. GPUDirect Storage: `kvik info FILE` says how compat mode AUTO and OFF serve a file on the
#      test directory's file system and on /dev/shm; then `kvik bench --device`: reads of a SIZE
#      file in the page cache into device memory, then writes from device memory (a smaller file),
#      with a cuFile column wherever cuFile can serve the file;
#   4. remote files: `kvik bench URL --device` of a 1 GiB object from nginx on loopback
#      (tests/remote/servers.py), into host and device memory, next to curl;
#   5. where KvikIO is importable (installed, or carried as wheels in .whl/: Python packages missing
#      there, zarr and pytest-asyncio for instance, are carried the same way), kvik and KvikIO
#      reading the same file into the same GPU buffer, side by side (bench/kvikio_compare.py),
#      with kvik's zero-copy reads off (its default: bounce buffers only), then on auto, then on
#      auto with a fresh handle for each read (--fresh: first reads, open and close timed).
# usage: scripts/gpu_check.sh [SIZE]   (default 8G; the test file goes to $TMPDIR or /tmp)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
size=${1:-8G}
tmp=${TMPDIR:-/tmp}
build=$root/build-gpu

# The nvidia-libnvcomp wheel goes to a folder of its own: the Python tests on the fake nvCOMP drop
# the folders that hold it from their children's PYTHONPATH, and keep the others (zarr, numcodecs).
# kvikio needs rapids-logger's wheel beside libkvikio's.
if [ -d "$root/.whl" ] && ls "$root"/.whl/*.whl >/dev/null 2>&1; then
  install=(python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade)
  wheels=() nvcomp=()
  for w in "$root"/.whl/*.whl; do
    case $w in */nvidia_libnvcomp*) nvcomp+=("$w") ;; *) wheels+=("$w") ;; esac
  done
  ((${#wheels[@]} == 0)) || "${install[@]}" --target /tmp/kvik-site "${wheels[@]}"
  ((${#nvcomp[@]} == 0)) || "${install[@]}" --target /tmp/kvik-nvcomp "${nvcomp[@]}"
  export PYTHONPATH=/tmp/kvik-site:/tmp/kvik-nvcomp${PYTHONPATH:+:$PYTHONPATH}
  # The C tests of the real nvCOMP (test_nvcomp, test_read_decompress) find it by this setting;
  # the ones of the fake ignore it.
  nvcomp_lib=/tmp/kvik-nvcomp/nvidia/libnvcomp/lib64/libnvcomp.so.6
  if [ -e "$nvcomp_lib" ]; then export KVIK_NVCOMP_LIBRARY=$nvcomp_lib; fi
fi

# nginx, for the remote tests, in build-deps/bin (ignored by git). libcurl needs nothing at build
# time: kvik loads the machine's libcurl.so.4 at run time.
if [ -x "$root/build-deps/bin/nginx" ]; then export PATH=$PATH:$root/build-deps/bin; fi

echo "== build and C tests (real driver)"
"$root/scripts/build.sh" "$build" >/dev/null
(cd "$build" && KVIK_TEST_LARGE=1 ctest --output-on-failure -j4)

echo "== CuPy and PyTorch memory"
status=0
python3 "$root/tests/test_frameworks.py" "$build/libkvik.so" || status=$?
[ "$status" = 0 ] || [ "$status" = 77 ] || exit "$status"

echo "== Python package with CuPy (and Zarr's GPU buffers where zarr is importable)"
KVIK_BUILD_DIR=$build "$root/scripts/test_python.sh" --offline -q -rs
PYTHONPATH=$root/build-python/site:$PYTHONPATH python3 "$root/bench/python_read.py" --dir "$tmp" --size 1G
PYTHONPATH=$root/build-python/site:$PYTHONPATH python3 "$root/bench/python_read.py" --dir "$tmp" --size 1G --device
PYTHONPATH=$root/build-python/site:$PYTHONPATH python3 "$root/bench/stream_read.py" --dir "$tmp" --size 2G

echo "== kvik info"
"$build/kvik" info "$tmp"

echo "== GPUDirect Storage: how each compat mode serves a file"
for where in "$tmp" /dev/shm; do
  probe=$where/kvik-gds-probe.bin
  head -c 1048576 /dev/zero >"$probe"
  "$build/kvik" info "$probe"
  KVIKIO_COMPAT_MODE=off "$build/kvik" info "$probe" || true
  rm -f "$probe"
done
echo "== kvik bench --device on /dev/shm (1G; tmpfs takes O_DIRECT since Linux 6.6)"
df -h /dev/shm | tail -1
"$build/kvik" bench --device --dir /dev/shm --size 1G --threads 1,4,16 --repeat 3 || echo "(not possible here)"

echo "== kvik bench --device (reads, $size)"
"$build/kvik" bench --device --dir "$tmp" --size "$size" --threads 1,4,8,16 --repeat 3 --no-write
echo "== kvik bench --device (writes, 2G)"
"$build/kvik" bench --device --dir "$tmp" --size 2G --threads 1,4,16 --repeat 3

echo "== remote files: a 1 GiB object from nginx on loopback into host and device memory"
KVIK_TEST_REMOTE_BIG=1073741824 python3 "$root/tests/remote/servers.py" -- sh -c \
  '"$0" bench "${KVIK_TEST_NGINX_URL:-$KVIK_TEST_FAULT_URL/ok}/big" --threads 1,4,8,16 --repeat 5 --curl --device' \
  "$build/kvik"

echo "== kvik next to KvikIO ($size)"
status=0
for zero_copy in off auto "auto --fresh"; do
  [ "$status" = 0 ] || break
  # shellcheck disable=SC2086 # "auto --fresh" is two arguments
  PYTHONUNBUFFERED=1 python3 "$root/bench/kvikio_compare.py" --lib "$build/libkvik.so" --file "$tmp/kvik-compare.bin" \
    --size "$size" --threads 1,4,8,16 --repeat 3 --zero-copy $zero_copy || status=$?
done
rm -f "$tmp/kvik-compare.bin"
[ "$status" = 77 ] && echo "(KvikIO not importable here: comparison skipped)" && status=0
exit "$status"
