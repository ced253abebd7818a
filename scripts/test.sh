#!/usr/bin/env bash
# The whole test suite: the C tests in a plain build, under AddressSanitizer and
# UndefinedBehaviorSanitizer, and under ThreadSanitizer; then the Python package's tests in a
# fresh virtual environment (scripts/test_python.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

run_suite() { # name, build dir, extra cmake arguments...
  local name=$1 dir=$2
  shift 2
  echo "== $name"
  "$root/scripts/build.sh" "$dir" "$@" >/dev/null
  (cd "$dir" && ctest --output-on-failure -j2)
}

run_suite "C tests" "$root/build"
run_suite "C tests, ASan+UBSan" "$root/build-asan" -DKVIK_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug
run_suite "C tests, TSan" "$root/build-tsan" -DKVIK_SANITIZE=thread -DCMAKE_BUILD_TYPE=Debug
echo "== Python package"
"$root/scripts/test_python.sh" -q
