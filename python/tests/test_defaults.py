"""kvik.defaults: get/set and the context manager, the older kvikio functions, the environment
variables (in fresh processes, since settings are read from the environment once)."""
import enum
import json
import os
import subprocess
import sys
import threading

import numpy
import pytest

import kvik
from kvik import _lib, defaults

NAMES = ("compat_mode", "num_threads", "task_size", "gds_threshold", "bounce_buffer_size", "auto_direct_io_read",
         "auto_direct_io_write", "zero_copy_read", "http_max_attempts", "http_timeout", "http_status_codes",
         "remote_verbose", "remote_connections", "io_uring", "remote_io_backend", "remote_io_num_reactors",
         "remote_io_reactor_dispatch", "remote_io_max_concurrent_requests", "nvcomp_library", "nvcomp_memory",
         "curl_library", "numa_affinity", "write_behind")
ENV_VARS = ("KVIKIO_COMPAT_MODE", "KVIKIO_NTHREADS", "KVIKIO_NUM_THREADS", "KVIKIO_TASK_SIZE", "KVIKIO_GDS_THRESHOLD",
            "KVIKIO_BOUNCE_BUFFER_SIZE", "KVIKIO_AUTO_DIRECT_IO_READ", "KVIKIO_AUTO_DIRECT_IO_WRITE",
            "KVIK_ZERO_COPY_READ", "KVIKIO_HTTP_MAX_ATTEMPTS", "KVIKIO_HTTP_TIMEOUT", "KVIKIO_HTTP_STATUS_CODES",
            "KVIKIO_REMOTE_VERBOSE", "KVIK_REMOTE_CONNECTIONS", "KVIK_IO_URING", "KVIKIO_REMOTE_IO_BACKEND",
            "KVIKIO_REMOTE_IO_NUM_REACTORS", "KVIKIO_REMOTE_IO_REACTOR_DISPATCH",
            "KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS", "KVIK_NVCOMP_LIBRARY", "KVIK_NVCOMP_MEMORY",
            "KVIK_CURL_LIBRARY", "KVIK_NUMA_AFFINITY", "KVIK_WRITE_BEHIND")
DEFAULT_STATUS_CODES = [429, 500, 502, 503, 504]
# Where the kvik under test was imported from, first on the path of the processes tests start.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(kvik.__file__)))
PYTHONPATH = os.pathsep.join(filter(None, [PACKAGE_DIR, os.environ.get("PYTHONPATH")]))


def run_python(code, **env):
    """Run `code` in a fresh interpreter with only `env` of kvik's variables set; return what it
    printed as JSON."""
    environ = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    environ.update(env, PYTHONPATH=PYTHONPATH)
    done = subprocess.run([sys.executable, "-c", "import json, kvik\n" + code], env=environ, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(autouse=True)
def restore_settings():
    """Every test leaves the settings as it found them (as text: the status list has no other form)."""
    saved = {name: _lib.setting_format(name) for name in NAMES}
    yield
    for name, value in saved.items():
        _lib.setting_parse(name, value)


# ---- get and set ------------------------------------------------------------------------------


def test_names():
    assert _lib.setting_names() == NAMES


def test_defaults_in_a_clean_environment():
    got = run_python("print(json.dumps({n: kvik.defaults.get(n) for n in kvik._lib.setting_names()}))")
    cpus = min(len(os.sched_getaffinity(0)), 64)
    assert got == {"compat_mode": 2, "num_threads": cpus, "task_size": 4 << 20, "gds_threshold": 1 << 20,
                   "bounce_buffer_size": 16 << 20, "auto_direct_io_read": False, "auto_direct_io_write": False,
                   "zero_copy_read": 0, "http_max_attempts": 3, "http_timeout": 60,
                   "http_status_codes": DEFAULT_STATUS_CODES, "remote_verbose": False, "remote_connections": 64,
                   "io_uring": 2, "remote_io_backend": 0, "remote_io_num_reactors": 1,
                   "remote_io_reactor_dispatch": 0, "remote_io_max_concurrent_requests": 256,
                   "nvcomp_library": "", "nvcomp_memory": 16 << 30, "curl_library": "",
                   "numa_affinity": False, "write_behind": True}


def test_types():
    assert type(defaults.get("compat_mode")) is defaults.CompatMode
    for name in ("auto_direct_io_read", "auto_direct_io_write", "remote_verbose"):
        assert type(defaults.get(name)) is bool
    for name in ("num_threads", "task_size", "gds_threshold", "bounce_buffer_size", "zero_copy_read",
                 "http_max_attempts", "http_timeout", "remote_connections", "io_uring"):
        assert type(defaults.get(name)) is int
    codes = defaults.get("http_status_codes")
    assert type(codes) is list and all(type(code) is int for code in codes)


def test_compat_mode_enum():
    assert kvik.CompatMode is defaults.CompatMode
    assert issubclass(kvik.CompatMode, enum.IntEnum)
    assert (kvik.CompatMode.OFF, kvik.CompatMode.ON, kvik.CompatMode.AUTO) == (0, 1, 2)


def test_set_applies_at_once():
    defaults.set("task_size", 1 << 20)
    assert defaults.get("task_size") == 1 << 20
    defaults.set({"gds_threshold": 12345, "auto_direct_io_read": True})
    assert defaults.get("gds_threshold") == 12345 and defaults.get("auto_direct_io_read") is True


def test_context_manager_restores():
    before = {name: defaults.get(name) for name in NAMES}
    with defaults.set({"num_threads": 3, "task_size": 65536, "compat_mode": "on", "zero_copy_read": "auto",
                       "http_status_codes": [500], "http_timeout": 7}) as entered:
        assert entered is None
        assert defaults.get("http_status_codes") == [500] and defaults.get("http_timeout") == 7
        assert defaults.get("num_threads") == 3
        assert defaults.get("task_size") == 65536
        assert defaults.get("compat_mode") is defaults.CompatMode.ON
        assert defaults.get("zero_copy_read") == 2
    assert {name: defaults.get(name) for name in NAMES} == before
    with defaults.set("bounce_buffer_size", 1 << 20):
        assert defaults.get("bounce_buffer_size") == 1 << 20
    assert defaults.get("bounce_buffer_size") == before["bounce_buffer_size"]


def test_context_manager_restores_on_exception():
    before = defaults.get("task_size")
    with pytest.raises(ZeroDivisionError):
        with defaults.set("task_size", 8192):
            1 / 0
    assert defaults.get("task_size") == before


def test_nested_context_managers():
    before = defaults.get("task_size")
    with defaults.set("task_size", 8192):
        with defaults.set("task_size", 4096):
            assert defaults.get("task_size") == 4096
        assert defaults.get("task_size") == 8192
    assert defaults.get("task_size") == before


@pytest.mark.parametrize("value, expected", [
    (kvik.CompatMode.ON, 1), (kvik.CompatMode.OFF, 0), (kvik.CompatMode.AUTO, 2), (True, 1), (False, 0), (2, 2),
    ("on", 1), ("OFF", 0), (" Auto ", 2), ("yes", 1), ("false", 0),
])
def test_compat_mode_values(value, expected):
    defaults.set("compat_mode", value)
    assert defaults.get("compat_mode") == expected
    assert defaults.get("compat_mode") is defaults.CompatMode(expected)


def test_text_values():
    defaults.set({"task_size": "65536", "auto_direct_io_write": "on", "num_threads": "2"})
    assert (defaults.get("task_size"), defaults.get("auto_direct_io_write"), defaults.get("num_threads")) == \
        (65536, True, 2)


def test_numpy_integers():
    defaults.set("task_size", numpy.int64(1 << 16))
    assert defaults.get("task_size") == 1 << 16


@pytest.mark.parametrize("name, value, error, match", [
    ("task_size", 0, ValueError, "must be a positive integer"),
    ("task_size", -1, OverflowError, "negative value"),
    ("num_threads", 0, ValueError, "must be a positive integer"),
    ("bounce_buffer_size", 0, ValueError, "must be a positive integer"),
    ("compat_mode", 3, ValueError, "between 0 and 2"),
    ("auto_direct_io_read", 2, ValueError, "between 0 and 1"),
    ("compat_mode", "maybe", ValueError, "expected ON, OFF or AUTO"),
    ("task_size", "4 MiB", ValueError, "expected a decimal integer"),
    ("task_size", 1.5, TypeError, "integer"),
    ("task_size", None, TypeError, "integer"),
    ("task_size", 1 << 70, OverflowError, "too large"),
    ("http_max_attempts", 0, ValueError, "must be a positive integer"),
    ("http_timeout", 0, ValueError, "must be a positive integer"),
    ("remote_connections", 0, ValueError, "must be a positive integer"),
    ("remote_verbose", 2, ValueError, "between 0 and 1"),
    ("http_status_codes", [99], ValueError, "expected HTTP statuses \\(100 to 999\\)"),
    ("http_status_codes", [503, 1000], ValueError, "expected HTTP statuses"),
    ("http_status_codes", "503;504", ValueError, "expected a comma"),
    ("http_status_codes", 503, TypeError, "list of integers"),
    ("http_status_codes", [503.0], TypeError, "list of integers"),
])
def test_bad_values(name, value, error, match):
    before = defaults.get(name)
    with pytest.raises(error, match=match):
        defaults.set(name, value)
    assert defaults.get(name) == before


def test_all_or_nothing():
    before = {name: defaults.get(name) for name in NAMES}
    with pytest.raises(ValueError, match="num_threads"):
        defaults.set({"task_size": 8192, "gds_threshold": 0, "num_threads": 0})
    assert {name: defaults.get(name) for name in NAMES} == before


def test_unknown_name():
    with pytest.raises(KeyError, match="unknown setting 'nthreads'.*num_threads"):
        defaults.get("nthreads")
    with pytest.raises(KeyError, match="unknown setting"):
        defaults.set("nthreads", 4)
    with pytest.raises(KeyError, match="unknown setting"):
        defaults.set({"task_size": 8192, "http_timeout_s": 5})


@pytest.mark.parametrize("args", [(), ("task_size",), (1, 2), ({"task_size": 4096}, 1), ("a", "b", "c")])
def test_bad_call(args):
    with pytest.raises(ValueError, match=r"kvik.defaults.set\(config: dict\)"):
        defaults.set(*args)


# ---- kvikio's older functions -------------------------------------------------------------------


@pytest.mark.parametrize("name, value", [
    ("num_threads", 3), ("task_size", 65536), ("gds_threshold", 4096), ("bounce_buffer_size", 1 << 20),
    ("http_max_attempts", 7), ("http_timeout", 11), ("http_status_codes", [404, 503]),
])
def test_old_functions(name, value):
    getter = getattr(defaults, name)
    reset = getattr(defaults, f"{name}_reset")
    setter = getattr(defaults, f"set_{name}")
    before = getter()
    assert before == defaults.get(name)
    assert reset(value) is None
    assert getter() == value
    reset(before)
    with setter(value):
        assert getter() == value
    assert getter() == before
    setter(value)  # without `with`: for good
    assert getter() == value


@pytest.mark.parametrize("value, expected", [
    ([503, 429, 503], [429, 503]), ((500,), [500]), (range(500, 503), [500, 501, 502]), ([], []),
    ("", []), (" 502 , 500", [500, 502]), ([numpy.int32(504)], [504]),
])
def test_status_codes_values(value, expected):
    """Any iterable of ints, or text as the environment variable takes it; kept sorted, once each."""
    defaults.set("http_status_codes", value)
    assert defaults.get("http_status_codes") == expected
    assert _lib.setting_source("http_status_codes") == "api"


def test_status_codes_long_list():
    defaults.set("http_status_codes", range(100, 1000))
    assert defaults.http_status_codes() == list(range(100, 1000))


def test_status_codes_refused_by_get_and_set():
    """libkvik keeps the list as text only: the int interface refuses it."""
    with pytest.raises(ValueError):
        _lib.setting_get("http_status_codes")
    with pytest.raises(ValueError):
        _lib.setting_set("http_status_codes", 503)
    assert _lib.setting_format("http_status_codes") == ",".join(map(str, defaults.get("http_status_codes")))


def test_num_threads_aliases():
    assert defaults.get_num_threads() == defaults.num_threads() == defaults.get("num_threads")
    defaults.reset_num_threads(2)
    assert defaults.get_num_threads() == 2


def test_compat_mode_functions():
    defaults.compat_mode_reset(True)
    assert defaults.get("compat_mode") is kvik.CompatMode.ON
    assert defaults.compat_mode() is True and defaults.is_compat_mode_preferred() is True
    with defaults.set_compat_mode(kvik.CompatMode.OFF):
        assert defaults.compat_mode() is False
    assert defaults.get("compat_mode") is kvik.CompatMode.ON
    defaults.compat_mode_reset("auto")
    found, _ = _lib.runtime_lib_probe("cufile")
    cufile_can_work = found and os.access("/run/udev", os.R_OK) and "microsoft" not in os.uname().release.lower()
    assert defaults.compat_mode() is (not cufile_can_work)


# ---- the environment ----------------------------------------------------------------------------

PRINT_ALL = "print(json.dumps({n: [kvik.defaults.get(n), kvik._lib.setting_source(n)] for n in kvik._lib.setting_names()}))"


def test_environment_variables():
    got = run_python(PRINT_ALL, KVIKIO_COMPAT_MODE="on", KVIKIO_NTHREADS="3", KVIKIO_TASK_SIZE="12345",
                     KVIKIO_GDS_THRESHOLD="0", KVIKIO_BOUNCE_BUFFER_SIZE="65536", KVIKIO_AUTO_DIRECT_IO_READ="true",
                     KVIKIO_AUTO_DIRECT_IO_WRITE="no", KVIK_ZERO_COPY_READ="AUTO", KVIKIO_HTTP_MAX_ATTEMPTS="5",
                     KVIKIO_HTTP_TIMEOUT="9", KVIKIO_HTTP_STATUS_CODES=" 503, 429", KVIKIO_REMOTE_VERBOSE="yes",
                     KVIK_REMOTE_CONNECTIONS="8", KVIK_IO_URING="off", KVIKIO_REMOTE_IO_BACKEND="multi_poll",
                     KVIKIO_REMOTE_IO_NUM_REACTORS="4", KVIKIO_REMOTE_IO_REACTOR_DISPATCH="per_pread",
                     KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS="0", KVIK_NVCOMP_LIBRARY="/x/libnvcomp.so.6",
                     KVIK_NVCOMP_MEMORY="0", KVIK_CURL_LIBRARY="/x/libcurl.so.4", KVIK_NUMA_AFFINITY="1",
                     KVIK_WRITE_BEHIND="off")
    assert got == {"compat_mode": [1, "env"], "num_threads": [3, "env"], "task_size": [12345, "env"],
                   "gds_threshold": [0, "env"], "bounce_buffer_size": [65536, "env"],
                   "auto_direct_io_read": [True, "env"], "auto_direct_io_write": [False, "env"],
                   "zero_copy_read": [2, "env"], "http_max_attempts": [5, "env"], "http_timeout": [9, "env"],
                   "http_status_codes": [[429, 503], "env"], "remote_verbose": [True, "env"],
                   "remote_connections": [8, "env"], "io_uring": [0, "env"], "remote_io_backend": [1, "env"],
                   "remote_io_num_reactors": [4, "env"], "remote_io_reactor_dispatch": [1, "env"],
                   "remote_io_max_concurrent_requests": [0, "env"], "nvcomp_library": ["/x/libnvcomp.so.6", "env"],
                   "nvcomp_memory": [0, "env"], "curl_library": ["/x/libcurl.so.4", "env"],
                   "numa_affinity": [True, "env"], "write_behind": [False, "env"]}


def test_environment_then_api():
    code = "kvik.defaults.set('num_threads', 2)\n" + PRINT_ALL
    got = run_python(code, KVIKIO_NUM_THREADS="5")
    assert got["num_threads"] == [2, "api"]
    assert got["task_size"] == [4 << 20, "default"]


def test_thread_alias_variable():
    assert run_python(PRINT_ALL, KVIKIO_NUM_THREADS="5")["num_threads"] == [5, "env"]


def test_env_names():
    assert [_lib.setting_env_name(n) for n in NAMES] == [
        "KVIKIO_COMPAT_MODE", "KVIKIO_NTHREADS", "KVIKIO_TASK_SIZE", "KVIKIO_GDS_THRESHOLD",
        "KVIKIO_BOUNCE_BUFFER_SIZE", "KVIKIO_AUTO_DIRECT_IO_READ", "KVIKIO_AUTO_DIRECT_IO_WRITE",
        "KVIK_ZERO_COPY_READ", "KVIKIO_HTTP_MAX_ATTEMPTS", "KVIKIO_HTTP_TIMEOUT", "KVIKIO_HTTP_STATUS_CODES",
        "KVIKIO_REMOTE_VERBOSE", "KVIK_REMOTE_CONNECTIONS", "KVIK_IO_URING", "KVIKIO_REMOTE_IO_BACKEND",
        "KVIKIO_REMOTE_IO_NUM_REACTORS", "KVIKIO_REMOTE_IO_REACTOR_DISPATCH",
        "KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS", "KVIK_NVCOMP_LIBRARY", "KVIK_NVCOMP_MEMORY",
        "KVIK_CURL_LIBRARY", "KVIK_NUMA_AFFINITY", "KVIK_WRITE_BEHIND"]


@pytest.mark.parametrize("env, match", [
    ({"KVIKIO_NTHREADS": "abc"}, "KVIKIO_NTHREADS='abc': expected a decimal integer"),
    ({"KVIKIO_COMPAT_MODE": "sometimes"}, "KVIKIO_COMPAT_MODE='sometimes'"),
    ({"KVIKIO_NTHREADS": "2", "KVIKIO_NUM_THREADS": "3"}, "disagree"),
])
def test_invalid_environment(env, match):
    code = """
try:
    kvik.defaults.get("task_size")
except kvik.KvikError as e:
    print(json.dumps([e.code, e.name, str(e)]))
"""
    code_, name, message = run_python(code, **env)
    assert (code_, name) == (-4001, "KVIK_ECONFIG")
    assert match in message


# ---- the low level, kvik._lib -------------------------------------------------------------------


def test_lib_errors():
    with pytest.raises(ValueError, match="unknown setting name 'bogus'"):
        _lib.setting_get("bogus")
    with pytest.raises(TypeError, match="setting name is a str"):
        _lib.setting_get(3)
    with pytest.raises(TypeError):
        _lib.setting_set("task_size", "8192")
    with pytest.raises(TypeError):
        _lib.setting_parse("task_size", 8192)
    with pytest.raises(ValueError, match="unknown setting name"):
        _lib.setting_source("bogus")
    with pytest.raises(ValueError, match="unknown setting name"):
        _lib.setting_env_name("bogus")
    assert _lib.setting_get("task_size") > 0


def test_resize_pool_during_io(tmp_path, rng):
    """Resizing the pool waits for running tasks, without the GIL: IO of other Python threads goes
    on, and its data is right."""
    data = rng.integers(0, 256, 8 << 20, dtype=numpy.uint8)
    path = tmp_path / "data"
    data.tofile(path)
    errors, stop = [], threading.Event()

    def reader():
        try:
            with kvik.CuFile(path, "r") as f:
                while not stop.is_set():
                    out = numpy.empty_like(data)
                    assert f.read(out, task_size=1 << 16) == data.nbytes
                    assert numpy.array_equal(out, data)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for n in (1, 4, 2, 8, 3) * 4:
            defaults.set("num_threads", n)
            assert defaults.get("num_threads") == n
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
