"""kvik.cufile_driver: without cuFile (every call says why), against the fake cuFile of the C tests
(in fresh processes that load it: build/tests/fake_cufile, or $KVIK_BUILD_DIR/tests/fake_cufile;
skipped where it is not built), and against the system's cuFile where there is one."""
import json
import os
import subprocess
import sys

import pytest

import kvik
from kvik import _lib, cufile_driver

# Where the kvik under test was imported from, first on the path of the processes tests start.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(kvik.__file__)))
PYTHONPATH = os.pathsep.join(filter(None, [PACKAGE_DIR, os.environ.get("PYTHONPATH")]))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.environ.get("KVIK_BUILD_DIR", os.path.join(ROOT, "build"))
FAKE_CUFILE = os.path.join(BUILD_DIR, "tests", "fake_cufile")
FAKE_CUDA = os.path.join(BUILD_DIR, "tests", "fake_cuda")

SYSTEM_CUFILE, _ = _lib.runtime_lib_probe("cufile")
no_cufile = pytest.mark.skipif(SYSTEM_CUFILE, reason="this machine has cuFile")
with_fake = pytest.mark.skipif(not os.path.exists(os.path.join(FAKE_CUFILE, "libcufile.so.0")),
                               reason=f"the fake cuFile is not built in {FAKE_CUFILE} (cmake --build build)")

SETTABLE = ("poll_mode", "poll_thresh_size", "max_device_cache_size", "max_pinned_memory_size", "max_direct_io_size")
READ_ONLY = ("is_gds_available", "major_version", "minor_version", "allow_compat_mode", "per_buffer_cache_size",
             "max_batch_io_size", "max_batch_io_timeout_msecs")


def with_fake_cufile(code, **env):
    """Run `code` in a fresh interpreter that loads the fake cuFile and CUDA driver; return what it
    printed as JSON."""
    environ = dict(os.environ, PYTHONPATH=PYTHONPATH, LD_LIBRARY_PATH=f"{FAKE_CUFILE}:{FAKE_CUDA}", **env)
    environ.pop("KVIKIO_COMPAT_MODE", None)
    prologue = "import json, kvik\nfrom kvik import cufile_driver as d\n"
    done = subprocess.run([sys.executable, "-c", prologue + code], env=environ, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# ---- names, needing no cuFile -------------------------------------------------------------------


def test_property_names():
    assert set(cufile_driver._PROPERTIES) == set(SETTABLE + READ_ONLY)


@pytest.mark.parametrize("name", READ_ONLY)
def test_read_only(name):
    with pytest.raises(KeyError, match=f"'{name}' is read-only"):
        cufile_driver.set(name, 1)
    with pytest.raises(KeyError, match="read-only"):
        cufile_driver.set({name: 1})


def test_unknown_name():
    with pytest.raises(KeyError, match="unknown cuFile driver property 'poll'.*poll_mode"):
        cufile_driver.get("poll")
    with pytest.raises(KeyError, match="unknown cuFile driver property"):
        cufile_driver.set("poll", True)


@pytest.mark.parametrize("args", [(), ("poll_mode",), (1, 2), ({"poll_mode": True}, 1)])
def test_bad_call(args):
    with pytest.raises(ValueError, match=r"kvik.cufile_driver.set\(config: dict\)"):
        cufile_driver.set(*args)


def test_driver_close_does_nothing():
    assert cufile_driver.driver_close() is None


# ---- without cuFile -----------------------------------------------------------------------------


def assert_unavailable(excinfo):
    assert excinfo.value.code == -4005
    assert excinfo.value.name == "KVIK_ECUFILE_UNAVAILABLE"
    assert "libcufile.so.0" in str(excinfo.value)


@no_cufile
@pytest.mark.parametrize("call", [
    lambda: cufile_driver.driver_open(),
    lambda: cufile_driver.initialize(),
    lambda: cufile_driver.properties.major_version,
    lambda: cufile_driver.get("poll_thresh_size"),
    lambda: cufile_driver.set("poll_mode", True),
    lambda: cufile_driver.set({"max_device_cache_size": 1024}),
    lambda: cufile_driver.get("logging_level"),
    lambda: cufile_driver.set("logging_level", "DEBUG"),
    lambda: _lib.libcufile_version(),
])
def test_unavailable(call):
    with pytest.raises(kvik.KvikError) as excinfo:
        call()
    assert_unavailable(excinfo)


@no_cufile
def test_unavailable_answers():
    assert cufile_driver.properties.is_gds_available is False
    assert cufile_driver.get("is_gds_available") is False
    assert cufile_driver.libcufile_version() == (0, 0)


# ---- the fake cuFile ----------------------------------------------------------------------------

PRINT_ALL = "print(json.dumps({n: d.get(n) for n in d._PROPERTIES}))"


@with_fake
def test_fake_properties():
    got = with_fake_cufile(PRINT_ALL)
    assert got == {"is_gds_available": False, "major_version": 0, "minor_version": 0, "allow_compat_mode": True,
                   "per_buffer_cache_size": 1024, "max_batch_io_size": 128, "max_batch_io_timeout_msecs": 5,
                   "poll_mode": False, "poll_thresh_size": 4, "max_device_cache_size": 131072,
                   "max_pinned_memory_size": 33554432, "max_direct_io_size": 16384}


@with_fake
def test_fake_with_nvidia_fs():
    got = with_fake_cufile(PRINT_ALL, FAKE_CUFILE_NVFS="2.26")
    assert (got["is_gds_available"], got["major_version"], got["minor_version"]) == (True, 2, 26)


@with_fake
@pytest.mark.parametrize("env, expected", [({}, [1, 15]), ({"FAKE_CUFILE_VERSION": "1160"}, [1, 16]),
                                           ({"FAKE_CUFILE_VERSION": "1080"}, [1, 8])])
def test_fake_version(env, expected):
    assert with_fake_cufile("print(json.dumps(d.libcufile_version()))", **env) == expected


@with_fake
def test_fake_set_and_restore():
    code = """
before = {n: d.get(n) for n in d._PROPERTIES}
new = {"poll_mode": True, "poll_thresh_size": 64, "max_device_cache_size": 4096,
       "max_pinned_memory_size": 1 << 20, "max_direct_io_size": 2048}
with d.set(new):
    inside = {n: d.get(n) for n in d._PROPERTIES}
after = {n: d.get(n) for n in d._PROPERTIES}
d.set("poll_thresh_size", 16)  # alone: poll mode stays as it is
d.properties.poll_mode = True
d.properties.max_direct_io_size = 1024
print(json.dumps([before, inside, after, d.get("poll_thresh_size"), d.get("poll_mode"), d.get("max_direct_io_size")]))
"""
    before, inside, after, thresh, poll, direct = with_fake_cufile(code)
    expected = dict(before, poll_mode=True, poll_thresh_size=64, max_device_cache_size=4096,
                    max_pinned_memory_size=1 << 20, max_direct_io_size=2048)
    assert inside == expected
    assert after == before
    assert (thresh, poll, direct) == (16, True, 1024)


@with_fake
def test_fake_parameters_before_the_driver_opens():
    code = """
names = ["logging_level", "properties_allow_compat_mode", "properties_max_direct_io_size_kb"]
before = [d.get(n) for n in names]
with d.set({"logging_level": "DEBUG", "properties_allow_compat_mode": False,
            "properties_max_direct_io_size_kb": 4096}):
    inside = [d.get(n) for n in names]
after = [d.get(n) for n in names]
d.set("properties_max_direct_io_size_kb", 8192)
print(json.dumps([before, inside, after, d.get("max_direct_io_size")]))
"""
    before, inside, after, direct = with_fake_cufile(code)
    assert before == ["ERROR", True, 16384]
    assert inside == ["DEBUG", False, 4096]
    assert after == before
    assert direct == 8192  # the parameter is the property, once the driver opened with it


@with_fake
def test_fake_parameters_after_the_driver_opened():
    code = """
d.driver_open()
try:
    d.set("logging_level", "DEBUG")
except kvik.KvikError as e:
    print(json.dumps([e.name, d.get("logging_level")]))
"""
    assert with_fake_cufile(code) == ["CU_FILE_DRIVER_ALREADY_OPEN", "ERROR"]


@with_fake
def test_fake_driver_refuses_to_open():
    """Without nvidia-fs and with cuFile's compatibility mode off, the driver does not open: the
    error carries cuFile's status."""
    code = """
d.set("properties_allow_compat_mode", False)
try:
    d.driver_open()
except kvik.KvikError as e:
    print(json.dumps([e.name, str(e), d.properties.is_gds_available]))
"""
    name, message, gds = with_fake_cufile(code)
    assert name == "CU_FILE_DRIVER_NOT_INITIALIZED"
    assert "cuFileDriverOpen" in message
    assert gds is False


@with_fake
def test_fake_bad_values():
    code = """
out = []
for name, value in [("poll_thresh_size", -1), ("max_device_cache_size", 1.5),
                    ("properties_max_direct_io_size_kb", "lots"), ("properties_max_direct_io_size_kb", -4)]:
    try:
        d.set(name, value)
    except (ValueError, TypeError, OverflowError) as e:
        out.append([type(e).__name__, str(e)])
print(json.dumps(out))
"""
    got = with_fake_cufile(code)
    # libkvik refuses the last two: kvik.InvalidArgument, a ValueError (and a RuntimeError)
    assert [kind for kind, _ in got] == [
        "OverflowError", "TypeError", "InvalidArgument", "InvalidArgument"]
    assert "a size in KiB must not be negative (got -1)" in got[0][1]
    assert "is not a decimal number" in got[2][1]


@with_fake
def test_fake_compat_mode_auto():
    """compat_mode() decides AUTO without opening the driver: libcufile loads here."""
    code = "print(json.dumps([kvik.defaults.compat_mode(), kvik._lib.runtime_lib_probe('cufile')]))"
    preferred, (found, path) = with_fake_cufile(code)
    assert found and path.startswith(FAKE_CUFILE)
    if not os.access("/run/udev", os.R_OK) or "microsoft" in os.uname().release.lower():
        pytest.skip("cuFile cannot work on this machine either way")
    assert preferred is False


# ---- the system's cuFile ------------------------------------------------------------------------


@pytest.mark.skipif(not SYSTEM_CUFILE, reason="no cuFile on this machine")
def test_system_cufile():
    """What any cuFile answers. Not that a set value is read back: without nvidia-fs, cuFile 1.15
    accepts the setters and goes on reporting its configured values."""
    try:
        cufile_driver.driver_open()
    except kvik.KvikError as e:
        pytest.skip(f"the cuFile driver does not open here: {e}")
    major, minor = cufile_driver.libcufile_version()
    assert major >= 1 and 0 <= minor < 100
    values = {name: cufile_driver.get(name) for name in cufile_driver._PROPERTIES}
    assert all(type(values[n]) is bool for n in ("is_gds_available", "allow_compat_mode", "poll_mode"))
    assert all(type(values[n]) is int and values[n] >= 0 for n in SETTABLE + READ_ONLY if type(values[n]) is not bool)
    with cufile_driver.set({"poll_thresh_size": values["poll_thresh_size"] + 4, "poll_mode": True}):
        pass
    assert {name: cufile_driver.get(name) for name in cufile_driver._PROPERTIES} == values
    if (major, minor) < (1, 14):
        return  # no parameters
    assert cufile_driver.get("logging_level")  # parameters are read at any time ...
    with pytest.raises(kvik.KvikError) as excinfo:  # ... and are set before the driver opens only
        cufile_driver.set("logging_level", "DEBUG")
    assert excinfo.value.name == "CU_FILE_DRIVER_ALREADY_OPEN"
