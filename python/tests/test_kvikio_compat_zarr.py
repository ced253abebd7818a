"""kvikio 26.10's kvikio.zarr, kvikio.benchmarks, kvikio.nsys and version names, under
`import kvik as kvikio` (issue 26). Each test states the behaviour it checks in its docstring."""
import subprocess
import sys

import pytest


def run_fresh(code):
    """Run `code` in a new interpreter, where no other test has imported anything yet."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# ---- kvik.zarr ------------------------------------------------------------------------------


def test_zarr_names_of_kvikio():
    """kvik.zarr has kvikio's GDSStore, and the `supported` and MINIMUM_ZARR_VERSION that kvikio's
    benchmark scripts check: a kvik.zarr that imports is supported, from Zarr 3.0.0."""
    pytest.importorskip("zarr", minversion="3")
    import kvik.zarr

    assert kvik.zarr.supported is True
    assert kvik.zarr.MINIMUM_ZARR_VERSION == "3.0.0"
    assert kvik.zarr.__all__ == ["GDSStore"]


# A program with kvik standing in for kvikio, that imports kvikio.zarr once, then takes every
# kvikio module out of sys.modules and imports kvikio.zarr again, as kvikio's own test does.
_PURGE_AND_REIMPORT = """
import sys, kvik
sys.modules["kvikio"] = kvik
import kvikio.zarr
first = kvikio.zarr
for name in [m for m in sys.modules if m.split(".")[0] == "kvikio"]:
    del sys.modules[name]
sys.modules["kvikio"] = kvik
{break_zarr}
try:
    import kvikio.zarr
except ImportError as e:
    print("ImportError:", e)
else:
    raise SystemExit("kvikio.zarr imported again")
assert sys.modules["kvik.zarr"] is first  # kvik's own module stays as it was
"""


def test_purged_kvikio_zarr_without_zarr_raises_again():
    """kvikio.zarr taken out of sys.modules and imported again with Zarr gone raises ImportError,
    as kvikio's module does, although kvik.zarr had imported before."""
    pytest.importorskip("zarr", minversion="3")
    hide = "for m in [m for m in sys.modules if m.split('.')[0] == 'zarr']: sys.modules[m] = None"
    assert "ImportError" in run_fresh(_PURGE_AND_REIMPORT.format(break_zarr=hide))


def test_purged_kvikio_zarr_beside_zarr_2_raises_again():
    """kvikio.zarr imported again beside a Zarr whose version says 2 raises ImportError that
    names it."""
    pytest.importorskip("zarr", minversion="3")
    zarr_2 = "sys.modules['zarr'].__version__ = '2.0.0'"
    out = run_fresh(_PURGE_AND_REIMPORT.format(break_zarr=zarr_2))
    assert "zarr==2.0.0" in out


def test_purged_kvikio_module_is_a_new_module():
    """A kvikio.X taken out of sys.modules imports afresh, a new module, as kvikio's would; one
    left in place stays kvik's own module."""
    run_fresh(
        "import sys, kvik\n"
        "sys.modules['kvikio'] = kvik\n"
        "import kvikio.defaults, kvikio.cufile\n"
        "first = kvikio.defaults\n"
        "del sys.modules['kvikio.defaults']\n"
        "import kvikio.defaults\n"
        "assert sys.modules['kvikio.defaults'] is not first\n"
        "assert sys.modules['kvikio.defaults'] is sys.modules['kvik.defaults']\n"
        "assert sys.modules['kvikio.cufile'] is kvik.cufile\n"
    )
