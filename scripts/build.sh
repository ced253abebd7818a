#!/usr/bin/env bash
# Build kvik into build/ (or $1): installs the build tools and libcurl from Debian's packages if
# missing.
# Nothing GPU-related is needed: CUDA and cuFile are loaded at run time, when present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true

missing=()
for tool in cmake cc make pkg-config; do command -v "$tool" >/dev/null || missing+=("$tool"); done
# libcurl, for remote files: without it kvik builds, and remote files fail with KVIK_ENOREMOTE.
pkg-config --exists libcurl 2>/dev/null || missing+=(libcurl)
if ((${#missing[@]})); then
  echo "installing build tools (missing: ${missing[*]})" >&2
  sudo=$([ "$(id -u)" = 0 ] || echo sudo)
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq cmake gcc make pkg-config libcurl4-openssl-dev >/dev/null
fi

cmake -S "$root" -B "$build" "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
