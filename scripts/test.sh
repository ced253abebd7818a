#!/usr/bin/env bash
# The whole test suite: the format check (scripts/check_format.sh); the C tests in a plain build,
# under AddressSanitizer and UndefinedBehaviorSanitizer, and under ThreadSanitizer (these two with
# fault injection), with the remote tests' servers (scripts/test_servers.sh); the remote and
# bad-input tests of a process without libcurl at run time; 5 s of each fuzz target
# (scripts/fuzz.sh); then the Python package's tests in a fresh virtual environment
# (scripts/test_python.sh), and its Zarr and nvCOMP tests against the newest zarr, where a Python
# new enough for it is found (scripts/test_zarr_latest.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

run_suite() { # name, build dir, extra cmake arguments...
  local name=$1 dir=$2
  shift 2
  echo "== $name"
  "$root/scripts/build.sh" "$dir" "$@" >/dev/null
  (cd "$dir" && ctest --output-on-failure -j2)
  # What the fault sweep, the stress test and the bad-input catalogue checked: the figures of
  # docs/reliability.md.
  grep -ahE '^(fault sweep|stress: [0-9]|[0-9]+ cases run)' "$dir/Testing/Temporary/LastTest.log" | sed 's/^/  /' || true
}

echo "== Format (scripts/check_format.sh)"
"$root/scripts/check_format.sh"

# The remote tests' servers must start here: a missing one fails its tests instead of skipping them.
export KVIK_TEST_REQUIRE_REMOTE=1
servers=-DKVIK_TEST_PYTHON=$("$root/scripts/test_servers.sh")
# Release, as packagers build it: -O3 warns of more than the default's -O2, and -Werror fails on it.
run_suite "C tests" "$root/build" "$servers" -DCMAKE_BUILD_TYPE=Release
# The sanitizer builds also sweep injected faults over every system call site (the fault_sweep_*
# tests): LeakSanitizer checks their error paths for leaks, ThreadSanitizer for races.
run_suite "C tests, ASan+UBSan" "$root/build-asan" "$servers" -DKVIK_SANITIZE=address,undefined \
  -DCMAKE_BUILD_TYPE=Debug -DKVIK_FAULT_INJECTION=ON
# ThreadSanitizer sleeps a second at the exit of a process whose other threads still run, to catch
# races with the exit; each child of the fault sweep and of the bad-buffer test paid it, half of
# their time.
TSAN_OPTIONS="atexit_sleep_ms=0 ${TSAN_OPTIONS:-}" \
  run_suite "C tests, TSan" "$root/build-tsan" "$servers" -DKVIK_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug \
  -DKVIK_FAULT_INJECTION=ON
# libcurl is loaded at run time (src/curl.h): KVIK_CURL_LIBRARY naming a missing file stands for a
# machine without it.
echo "== C library without libcurl at run time: remote files fail cleanly, the rest works"
(cd "$root/build" && KVIK_CURL_LIBRARY=/nonexistent/libcurl.so.4 \
  ctest --output-on-failure -R '^(remote|bad_input|info|io)$')
echo "== Fuzzing, a short run of each target (scripts/fuzz.sh; tests/fuzz/README.md)"
"$root/scripts/fuzz.sh" 5
echo "== Python package"
"$root/scripts/test_python.sh" -q
echo "== Python package with the newest zarr and numcodecs (scripts/test_zarr_latest.sh)"
"$root/scripts/test_zarr_latest.sh" -q
