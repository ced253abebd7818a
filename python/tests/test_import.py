"""`import kvik` alone gives the submodules that kvikio code reaches as attributes, and stays cheap.

Each check runs in a fresh interpreter: in pytest's own, other tests have imported the submodules
already, which would hide a missing import.
"""
import subprocess
import sys

import pytest


def run_fresh(code):
    """Run `code` in a new Python process; fail the test with its stderr if it fails."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_submodules_after_import_kvik(tmp_path):
    path = tmp_path / "a.bin"
    run_fresh(
        "import kvik\n"
        f"kvik.numpy.tofile([0, 1, 2, 3], {str(path)!r})\n"
        f"assert kvik.numpy.fromfile({str(path)!r}, dtype='i8').tolist() == [0, 1, 2, 3]\n"
        "assert kvik.cufile.CuFile is kvik.CuFile\n"
        "assert kvik.mmap.Mmap is kvik.Mmap\n"
        "assert kvik.defaults.get('task_size') > 0\n"
        "assert callable(kvik.cufile_driver.libcufile_version)\n"
        "assert kvik.remote_file.RemoteFile is kvik.RemoteFile\n"
        "assert {'numpy', 'zarr', 'cufile', 'mmap'} <= set(dir(kvik))\n"
    )


def test_import_kvik_does_not_import_numpy_or_zarr():
    out = run_fresh("import sys, kvik\nprint(sorted({'numpy', 'zarr'} & set(sys.modules)))")
    assert out.strip() == "[]"


def test_zarr_submodule_on_first_use():
    pytest.importorskip("zarr", minversion="3")
    run_fresh("import kvik\nassert kvik.zarr.GDSStore.__module__ == 'kvik.zarr'")


def test_unknown_attribute_is_attribute_error():
    run_fresh(
        "import kvik\n"
        "try:\n"
        "    kvik.no_such_name\n"
        "except AttributeError as e:\n"
        "    assert \"no attribute 'no_such_name'\" in str(e), e\n"
        "else:\n"
        "    raise SystemExit('kvik.no_such_name did not raise')\n"
        "assert not hasattr(kvik, 'no_such_name')\n"
    )


def test_kvik_standing_in_for_kvikio_gives_its_own_submodules():
    # A program-wide `import kvik as kvikio`: kvikio.X must be kvik.X, not a copy whose classes
    # kvik never raises or returns.
    run_fresh(
        "import sys, kvik\n"
        "sys.modules['kvikio'] = kvik\n"
        "import kvikio.defaults, kvikio.cufile, kvikio.numpy\n"
        "from kvikio.utils import LocalHttpServer\n"
        "import kvik.defaults, kvik.cufile, kvik.numpy, kvik.utils\n"
        "assert kvikio.defaults is kvik.defaults\n"
        "assert sys.modules['kvikio.cufile'] is kvik.cufile\n"
        "assert sys.modules['kvikio.numpy'] is kvik.numpy\n"
        "assert LocalHttpServer is kvik.utils.LocalHttpServer\n"
        "assert kvik.defaults.__spec__.name == 'kvik.defaults'\n"
        "try:\n"
        "    import kvikio.no_such_module\n"
        "except ModuleNotFoundError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit('kvikio.no_such_module imported')\n"
    )


def test_kvikio_alias_is_inert_without_the_stand_in():
    run_fresh(
        "import kvik\n"
        "try:\n"
        "    import kvikio.defaults\n"
        "except ModuleNotFoundError:\n"
        "    pass\n"
        "else:\n"
        "    import kvikio, os\n"
        "    assert kvikio is not kvik and kvikio.defaults is not kvik.defaults\n"
        "    assert os.path.samefile(os.path.dirname(kvikio.defaults.__file__),\n"
        "                            os.path.dirname(kvikio.__file__))\n"
    )
