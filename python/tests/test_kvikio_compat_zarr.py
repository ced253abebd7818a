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
    commits."""
    import kvik

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
