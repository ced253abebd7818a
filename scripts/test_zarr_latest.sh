#!/usr/bin/env bash
# The Python tests that touch Zarr and numcodecs, against their newest releases. Those need a newer
# Python than Debian 12's 3.11, which pip serves zarr 3.1 alone: zarr 3.4 changed what kvik.zarr
# relies on in three ways that zarr 3.1 could not show (CHANGELOG, "Reliability"). So this takes
# the newest Python 3.12 or later it finds (on PATH, or installed by pyenv), makes a virtual
# environment of it in build-python/venv-latest, installs the package with pytest and the newest
# zarr, and runs those tests; with no such Python it says so and succeeds.
# Extra arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/build-python

# Prints the newest interpreter of Python 3.12 or later that runs, or nothing.
newest_python() {
  local candidates=()
  for minor in 14 13 12; do candidates+=("python3.$minor"); done
  if command -v pyenv >/dev/null; then
    while IFS= read -r python; do candidates+=("$python"); done < <(
      ls -d "$(pyenv root)"/versions/3.*/bin/python3 2>/dev/null | sort -rV)
  fi
  for python in "${candidates[@]}"; do
    if "$python" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      echo "$python"
      return
    fi
  done
}

python=$(newest_python)
if [ -z "$python" ]; then
  echo "skipped: no Python 3.12 or later here, so no newer zarr than Python 3.11's"
  exit 0
fi
export KVIK_WERROR=1
export KVIK_BUILD_DIR=$(cd "${KVIK_BUILD_DIR:-$root/build}" 2>/dev/null && pwd || echo "$root/build")
mkdir -p "$out"
"$python" -m venv --clear "$out/venv-latest"
venv=$out/venv-latest/bin/python
"$venv" -m pip install -q --upgrade pip
"$venv" -m pip install -q "$root/python" pytest pytest-asyncio zarr numcodecs
"$venv" -c 'import sys, zarr, numcodecs
print(f"Python {sys.version.split()[0]}, zarr {zarr.__version__}, numcodecs {numcodecs.__version__}")'
cd "$out"
"$venv" -m pytest -p no:cacheprovider "$@" \
  "$root"/python/tests/test_zarr*.py "$root"/python/tests/test_kvikio_compat_zarr.py \
  "$root"/python/tests/test_nvcomp*.py "$root"/python/tests/test_kvikio_compat_nvcomp.py
