"""kvikio 26.10's kvikio.zarr, kvikio.benchmarks, kvikio.nsys and version names, under
`import kvik as kvikio` (issue 26). Each test states the behaviour it checks in its docstring."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

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


# ---- top-level names: nsys_plugin_search_dir, __git_commit__ ---------------------------------


def test_nsys_plugin_search_dir_is_kvikios_conda_path():
    """nsys_plugin_search_dir() is kvikio's conda path, share/kvikio/nsys-plugins under
    sys.prefix, from the top level and from kvik.nsys; kvik ships no plugin there."""
    import kvik
    import kvik.nsys

    assert kvik.nsys_plugin_search_dir is kvik.nsys.nsys_plugin_search_dir
    assert "nsys_plugin_search_dir" in kvik.__all__
    expected = os.path.join(sys.prefix, "share", "kvikio", "nsys-plugins")
    assert kvik.nsys_plugin_search_dir() == expected


def test_version_module_of_kvikio():
    """kvik._version has __version__ and __git_commit__, the top level's, as kvikio._version."""
    import kvik
    import kvik._version

    assert kvik._version.__version__ == kvik.__version__
    assert kvik._version.__git_commit__ is kvik.__git_commit__
    assert kvik.__git_commit__ == "" or re.fullmatch(r"[0-9a-f]{40}", kvik.__git_commit__)


def test_git_commit_is_empty_without_the_stamp(monkeypatch, tmp_path):
    """A package without the GIT_COMMIT file (an editable install) reads __git_commit__ as ""."""
    import kvik._version

    monkeypatch.setattr(kvik._version.resources, "files", lambda package: tmp_path)
    assert kvik._version._built_from() == ""
    (tmp_path / "GIT_COMMIT").write_text("0123abcd\n")
    assert kvik._version._built_from() == "0123abcd"


CHECKOUT = Path(__file__).resolve().parents[2]
# What python/setup.py reads from the library's tree, besides python/ itself.
LIBRARY_LISTS = ["include/kvik.h", "src/sources.txt", "tools/sources.txt", "cmake/warnings.txt"]


def git(*args, cwd=CHECKOUT):
    """git's output, or None where git is missing or fails."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def build_py(python_dir, tmp_path):
    """Run setup.py's build_py for the package in `python_dir`; the GIT_COMMIT it stamped."""
    pytest.importorskip("setuptools")
    out = tmp_path / "lib"
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(out)],
                   cwd=python_dir, check=True, capture_output=True)
    return (out / "kvik" / "GIT_COMMIT").read_text().strip()


needs_checkout = pytest.mark.skipif(
    git("rev-parse", "--show-toplevel") != str(CHECKOUT), reason="not run from a git checkout")


@needs_checkout
def test_build_in_a_checkout_stamps_head(tmp_path):
    """Built from a git checkout, the package carries the checkout's HEAD."""
    assert build_py(CHECKOUT / "python", tmp_path) == git("rev-parse", "HEAD")


@needs_checkout
def test_installed_package_carries_a_commit_of_the_checkout():
    """The package the tests run against, installed from this checkout, names one of its
    commits. (An editable install, the checkout's own python/kvik, has no stamp.)"""
    import kvik

    if Path(kvik.__file__).resolve().is_relative_to(CHECKOUT / "python"):
        pytest.skip("kvik is the checkout's own python/kvik: an editable install carries no commit")
    assert git("cat-file", "-t", kvik.__git_commit__) == "commit"


def sdist_like_tree(tmp_path, commit=None):
    """python/ with the library's lists in python/libkvik/, as an sdist lays them out, inside a
    git repository of its own (setup.py must not take that repository's HEAD); with `commit`,
    the GIT_COMMIT that an sdist made in a checkout carries."""
    outer = tmp_path / "outer"
    shutil.copytree(CHECKOUT / "python", outer / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "tests", "__pycache__"))
    for name in LIBRARY_LISTS:
        (outer / "python" / "libkvik" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CHECKOUT / name, outer / "python" / "libkvik" / name)
    if commit is not None:
        (outer / "python" / "libkvik" / "GIT_COMMIT").write_text(commit + "\n")
    if git("init", "-q", cwd=outer) is None:
        pytest.skip("no git")
    return outer / "python"


def test_build_outside_a_checkout_stamps_nothing(tmp_path):
    """Built from a tree that is not the top of a checkout, the package's commit is "", not the
    HEAD of a repository the tree happens to lie in."""
    assert build_py(sdist_like_tree(tmp_path), tmp_path) == ""


def test_build_from_an_sdist_stamps_its_commit(tmp_path):
    """Built from an sdist made in a checkout, the package carries the commit the sdist names."""
    commit = "5530d767aeb55f63db59a7bb64f2745e8061eee5"
    assert build_py(sdist_like_tree(tmp_path, commit), tmp_path) == commit


# ---- kvik.benchmarks ------------------------------------------------------------------------


def test_benchmark_utils_has_kvikios_names():
    """kvik.benchmarks is a package whose utils module has the names kvikio's scripts import."""
    from kvik.benchmarks import utils

    for name in ("drop_vm_cache", "parse_directory", "pprint_sys_info"):
        assert callable(getattr(utils, name)), name


def test_parse_directory(tmp_path):
    """parse_directory: None passes through, a directory comes back as a Path, anything else
    raises argparse.ArgumentTypeError("Must be a directory")."""
    import argparse

    from kvik.benchmarks.utils import parse_directory

    assert parse_directory(None) is None
    assert parse_directory(str(tmp_path)) == tmp_path
    (tmp_path / "f").write_bytes(b"x")
    for bad in (tmp_path / "f", tmp_path / "missing"):
        with pytest.raises(argparse.ArgumentTypeError, match="Must be a directory"):
            parse_directory(str(bad))


SIZES = {"1MiB": 2**20, "10 MiB": 10 * 2**20, "5.4 kB": 5400, "1e6": 10**6, "100": 100,
         "MB": 10**6, "1k": 1000, "1 Ki": 1024, "3 b": 3, "2GiB": 2 * 2**30}
FORMATTED = {0: "0 B", 921: "921 B", 922: "0.90 kiB", 1024: "1.00 kiB", 2**20: "1.00 MiB",
             10**9: "0.93 GiB", 5 * 2**40: "5.00 TiB"}


def test_parse_and_format_bytes_as_dask():
    """parse_bytes and format_bytes read and write sizes as Dask's (which kvikio's scripts use)
    do, without Dask; a unit or number they cannot read raises ValueError."""
    from kvik.benchmarks.utils import format_bytes, parse_bytes

    assert {text: parse_bytes(text) for text in SIZES} == SIZES
    assert {n: format_bytes(n) for n in FORMATTED} == FORMATTED
    for bad in ("5 foos", "1.2.3 MB"):
        with pytest.raises(ValueError):
            parse_bytes(bad)
    try:
        import dask.utils
    except ImportError:
        return
    assert all(parse_bytes(t) == dask.utils.parse_bytes(t) for t in SIZES)
    assert all(format_bytes(n) == dask.utils.format_bytes(n) for n in FORMATTED)


def test_drop_vm_cache_raises_where_it_cannot(monkeypatch):
    """drop_vm_cache drops the system's caches through kvik.drop_system_page_cache, and raises
    subprocess.CalledProcessError, as kvikio's does, where that fails."""
    import kvik
    from kvik.benchmarks.utils import drop_vm_cache

    monkeypatch.setattr(kvik, "drop_system_page_cache", lambda: False)
    with pytest.raises(subprocess.CalledProcessError):
        drop_vm_cache()
    monkeypatch.setattr(kvik, "drop_system_page_cache", lambda: True)
    assert drop_vm_cache() is None


def test_pprint_sys_info_prints_kvikios_table(capsys):
    """pprint_sys_info prints kvikio's rows, under the compat-mode banner when compat mode is on."""
    import kvik
    from kvik.benchmarks.utils import pprint_sys_info

    with kvik.defaults.set("compat_mode", kvik.CompatMode.ON):
        pprint_sys_info()
    out = capsys.readouterr().out
    assert "WARNING - KvikIO compat mode" in out
    rows = [line.split("|")[0].strip() for line in out.splitlines() if "|" in line]
    assert rows == ["GPU", "GPU Memory Total", "BAR1 Memory Total", "libcufile version",
                    "GDS driver", "GDS config.json"]


def run_benchmark(script, *args):
    """Run `python -m kvik.benchmarks.SCRIPT ARGS` as kvikio's test runs its script; its output."""
    proc = subprocess.run([sys.executable, "-m", f"kvik.benchmarks.{script}", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


SINGLE_NODE_APIS = ["cufile", "posix", "cufile-mfma", "cufile-mf", "cufile-ma", "zarr"]


@pytest.mark.parametrize("api", SINGLE_NODE_APIS)
def test_single_node_io_runs(tmp_path, api):
    """single_node_io takes kvikio's command line and, for each API, writes and reads the bytes,
    printing a read and a write throughput."""
    if api == "zarr":
        pytest.importorskip("zarr", minversion="3")
    out = run_benchmark("single_node_io", "-n", "1MiB", "-d", str(tmp_path), "-t", "4",
                        "--nruns", "2", "--api", api)
    assert f"{api} read " in out and f"{api} write " in out
    assert "1048576 bytes (1.00 MiB)" in out


def test_single_node_io_refuses_a_file_for_dir(tmp_path):
    """-d that is not a directory is refused by the command line, exit status 2."""
    (tmp_path / "f").write_bytes(b"")
    proc = subprocess.run([sys.executable, "-m", "kvik.benchmarks.single_node_io",
                           "-d", str(tmp_path / "f")], capture_output=True, text=True)
    assert proc.returncode == 2 and "Must be a directory" in proc.stderr


@pytest.mark.skipif(not __import__("kvik").is_remote_file_available(),
                    reason="kvik built without remote files (libcurl)")
def test_http_io_runs():
    """http_io takes kvikio's command line, and reads the served file into NumPy and checks it."""
    out = run_benchmark("http_io", "-n", "1000", "--api", "numpy", "--nruns", "2")
    assert "numpy-read " in out and "nelem       | 1000 (3.91 kiB)" in out
