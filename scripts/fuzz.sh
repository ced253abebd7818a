#!/usr/bin/env bash
# Fuzz kvik with libFuzzer (tests/fuzz/README.md): builds the fuzz targets with clang under
# ASan+UBSan into build-fuzz/ and runs each for SECONDS (default 10), printing how many inputs
# each ran. Installs clang, libFuzzer's runtime and the build tools from Debian's packages if
# missing. Exits non-zero if any target finds a crash; its input stays in
# build-fuzz/crashes/<target>/. Corpora grow in build-fuzz/corpus/<target>/ (seeded from
# tests/fuzz/corpus/) and are kept between runs, so later runs start where earlier ones ended.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#     targets: flags settings remote_url http_headers api_model
#
# Environment: KVIK_FUZZ_JOBS (parallel fuzzing processes per target, default 1).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz
seconds=${1:-10}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(flags settings remote_url http_headers api_model frame_check)
jobs=${KVIK_FUZZ_JOBS:-1}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS] [TARGET...]" >&2; exit 2; }

sudo=$([ "$(id -u)" = 0 ] || echo sudo)
apt_install() {
  echo "installing $*" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}
missing=()
for tool in cmake make pkg-config; do command -v "$tool" >/dev/null || missing+=("$tool"); done
command -v clang >/dev/null || missing+=(clang)
((${#missing[@]})) && apt_install "${missing[@]}"
# libFuzzer's runtime comes in its own package (Debian 12: libclang-rt-14-dev for clang 14).
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' >"$probe/p.c"
if ! clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>/dev/null; then
  major=$(clang -dumpversion | cut -d. -f1)
  apt_install "libclang-rt-$major-dev"
  clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p"
fi
# libcurl is loaded at run time: without libcurl.so.4, fuzz_remote_url only sees KVIK_ENOREMOTE.

CC=clang cmake -S "$root" -B "$build" -DKVIK_FUZZ=ON -DKVIK_SANITIZE=address,undefined \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/#/fuzz_}" >/dev/null

status=0
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t crashes=$build/crashes/$t log=$build/fuzz_$t.log
  mkdir -p "$corpus" "$crashes"
  cp -n "$root/tests/fuzz/corpus/$t"/* "$corpus"/ 2>/dev/null || true
  args=(-max_total_time="$seconds" -timeout=25 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$crashes/")
  ((jobs > 1)) && args+=(-fork="$jobs")
  rc=0
  "$build/tests/fuzz/fuzz_$t" "${args[@]}" "$corpus" >"$log" 2>&1 || rc=$?
  runs=$(grep -a -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  [ -n "$runs" ] || runs=$(grep -a -o '^Done [0-9]* runs' "$log" | tail -1 | grep -o '[0-9]\+' || true)
  if ((rc == 0)); then
    printf '%-12s ok     %10s runs in %ss, corpus %s inputs\n' "$t" "${runs:-?}" "$seconds" "$(ls "$corpus" | wc -l)"
  else
    status=1
    printf '%-12s FAILED %10s runs (exit %d): %s\n' "$t" "${runs:-?}" "$rc" "$(ls -t "$crashes" | head -1 | sed "s|^|$crashes/|")"
    grep -a -m1 -E 'check failed|ERROR: (AddressSanitizer|libFuzzer)|runtime error' "$log" | cut -c1-300 | sed 's/^/    /' || true
    echo "    log: $log" >&2
  fi
done
exit $status
