#!/usr/bin/env bash
# The Python package's tests: `pip install ./python[test]` into a fresh virtual environment
# (build-python/venv: the extension is compiled with warnings as errors), then pytest on
# python/tests against the installed package.
#
# --offline: for machines that reach no package registry (the GPU machine). Installs the package
# into build-python/site with this Python's own build tools and packages (NumPy, pytest, CuPy,
# and whatever PYTHONPATH adds, such as carried wheels), instead of a venv filled from PyPI.
# Extra arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build-python
offline=0
if [ "${1:-}" = --offline ]; then offline=1; shift; fi
mkdir -p "$out"

export KVIK_WERROR=1
# The tests find the C build (the kvik command, the fake CUDA and cuFile) here; made absolute, as
# they run from build-python/.
export KVIK_BUILD_DIR=$(cd "${KVIK_BUILD_DIR:-$root/build}" 2>/dev/null && pwd || echo "$root/build")
if ((offline)); then
  python=python3
  rm -rf "$out/site"
  "$python" -m pip install -q --no-build-isolation --no-deps --target "$out/site" "$root/python"
  export PYTHONPATH=$out/site${PYTHONPATH:+:$PYTHONPATH}
else
  if ! python3 -m venv --clear "$out/venv" 2>/dev/null; then
    echo "installing python3-venv" >&2
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo apt-get update -qq && $sudo apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv --clear "$out/venv"
  fi
  python=$out/venv/bin/python
  "$python" -m pip install -q --upgrade pip
  "$python" -m pip install -q "$root/python[test]"
fi
# From build-python/, so that `import kvik` finds the installed package, not python/kvik/.
cd "$out"
"$python" -m pytest -p no:cacheprovider "$root/python/tests" "$@"
