#!/usr/bin/env bash
# Build kvik into build/ (or $1): installs the build tools from Debian's packages if missing.
# No library is needed: CUDA, cuFile, nvCOMP and libcurl are loaded at run time, when present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true

sudo=$([ "$(id -u)" = 0 ] || echo sudo)
missing=()
for tool in cmake cc make pkg-config; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if ((${#missing[@]})); then
  echo "installing build tools (missing: ${missing[*]})" >&2
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq cmake gcc make pkg-config >/dev/null
fi
# libcurl's headers, for the tests only: test_curl_abi compares src/curl.h with them, and the
# remote tests need libcurl itself at run time. Optional: without them, those tests skip or test
# a process without libcurl. Found as the compiler finds them (C_INCLUDE_PATH counts).
if ! echo '#include <curl/curl.h>' | cc -E -x c - >/dev/null 2>&1; then
  echo "installing libcurl4-openssl-dev (the remote tests)" >&2
  { $sudo apt-get update -qq && $sudo apt-get install -y -qq libcurl4-openssl-dev >/dev/null; } ||
    echo "could not install libcurl: remote tests see a process without it" >&2
fi

# Jansson, which kvik loads at run time to parse safetensors headers, and its header for the
# tests (test_jansson_abi). Optional: without the library, the safetensors tests skip.
if ! echo '#include <jansson.h>' | cc -E -x c - >/dev/null 2>&1; then
  echo "installing libjansson-dev (safetensors headers; its ABI test)" >&2
  { $sudo apt-get update -qq && $sudo apt-get install -y -qq libjansson-dev >/dev/null; } ||
    echo "could not install Jansson: the safetensors tests skip" >&2
fi

# The compression libraries of the fake nvCOMP that the tests use (tests/fake_nvcomp.h). Optional:
# without one, the fake lacks that library's formats.
for header in zstd.h lz4.h snappy-c.h zlib.h; do
  if ! echo "#include <$header>" | cc -E -x c - >/dev/null 2>&1; then
    echo "installing the compression libraries (tests' fake nvCOMP; missing: $header)" >&2
    { $sudo apt-get update -qq &&
      $sudo apt-get install -y -qq libzstd-dev liblz4-dev libsnappy-dev zlib1g-dev >/dev/null; } ||
      echo "could not install them: the fake nvCOMP lacks some formats" >&2
    break
  fi
done

cmake -S "$root" -B "$build" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
