"""kvikio.defaults: the process-wide settings of kvik.

Read a setting with :func:`get` and change it with :func:`set`, which applies at once and, used in
a ``with`` statement, puts the old value back at the end of the block::

    kvik.defaults.set("task_size", 1 << 20)           # from now on
    with kvik.defaults.set({"num_threads": 4, "compat_mode": "on"}):
        ...                                            # only in here

Each setting starts from its environment variable (KvikIO's names: ``KVIKIO_NTHREADS``,
``KVIKIO_COMPAT_MODE``, ...), read when kvik first needs settings. The names:

- ``"compat_mode"``: a :class:`CompatMode`: ON never uses cuFile (POSIX IO only), OFF requires
  it, AUTO uses it where it can work.
- ``"num_threads"``: threads of the IO thread pool.
- ``"task_size"``: bytes per task that one IO is split into.
- ``"gds_threshold"``: device IO smaller than this many bytes skips cuFile and the pool.
- ``"bounce_buffer_size"``: bytes of each host buffer that IO is staged through (pinned for
  device memory, aligned for O_DIRECT): any positive size, which kvik rounds up to whole pages
  for the buffers it allocates; it reads back as set.
- ``"auto_direct_io_read"``, ``"auto_direct_io_write"``: bools, use O_DIRECT where it works.
- ``"zero_copy_read"``: kvik's own, 0 OFF, 1 ON, 2 AUTO: reads into device memory copy straight
  out of the page cache (see kvik.h, KVIK_SETTING_ZERO_COPY_READ).
- ``"io_uring"``: kvik's own, 0 OFF, 1 ON, 2 AUTO (the default): which host-memory operations of
  a batch the kernel's io_uring serves instead of the thread pool (see kvik.h,
  KVIK_SETTING_IO_URING).
- ``"nvcomp_memory"``: kvik's own, the device memory per GPU (bytes, 16 GiB) that kvik keeps
  between calls for its nvCOMP work (nvCOMP's temporary space, the fused read's staging); 0
  keeps none (see kvik.h, KVIK_SETTING_NVCOMP_MEMORY).
- ``"numa_affinity"``: kvik's own, a bool (False): a pool thread that moves data for a GPU runs
  on the CPUs of the GPU's NUMA node, where sysfs names one (see kvik.h,
  KVIK_SETTING_NUMA_AFFINITY).
- ``"write_behind"``: kvik's own, a bool (True): a buffered write call of 1 MiB or more starts
  writing its range to storage at once, so that a later fsync finds little left; paused while the
  storage is behind (see kvik.h, KVIK_SETTING_WRITE_BEHIND).

Remote files (kvik.RemoteFile) follow these; a failed request is tried again, after a pause that
doubles each time from 0.5 s (at most 4 s), as kvikio's:

- ``"http_max_attempts"``: attempts per request in all, the first included (3).
- ``"http_timeout"``: seconds each attempt may take (60).
- ``"http_status_codes"``: a list of the HTTP statuses that are tried again ([429, 500, 502, 503,
  504]); set it with any iterable of ints, or text such as ``"500,503"``.
- ``"remote_verbose"``: a bool, trace every request on stderr, credentials removed.
- ``"remote_connections"``: kvik's own, the most requests in flight at once (64).
- ``"curl_library"``: kvik's own, the file libcurl is loaded from, ``""`` for ``libcurl.so.4``;
  read at the process's first remote call, which loads libcurl (see kvik.h, "Remote files").
- ``"remote_io_backend"``: a :class:`RemoteIOBackend`, kvikio's choice of remote engine, read
  back as set. kvik has one engine, requests on the thread pool (kvikio's EASY_THREADPOOL):
  reads work the same under either.
- ``"remote_io_num_reactors"`` (1) and ``"remote_io_reactor_dispatch"`` (a
  :class:`RemoteReactorDispatch`, PER_CHUNK): settings of kvikio's MULTI_POLL reactors, which kvik
  has not; accepted with kvikio's checks (0 reactors raises ValueError) and read back, they change
  nothing.
- ``"remote_io_max_concurrent_requests"``: the most remote requests in flight at once, 0 for no
  limit (256); kvik applies the smaller of it and ``"remote_connections"``.

The last three are kvikio's process-lifetime settings: as there, they are set with
``set(name, value)``, which returns None (no ``with`` block can put them back), and a dict
naming them raises ValueError. kvikio refuses changes once its reactors have started; kvik, which
has none, takes them at any time, for the requests that start after.

Counts and sizes take what kvikio's C types take: 0 where a count or size must be at least 1
(all but ``gds_threshold``) raises ValueError ("must be a positive integer"), a negative value
or one too large for kvikio's C type (``size_t``, ``unsigned int``) raises OverflowError. kvik
adds only the HTTP timeout's bound, curl's: 2147483 seconds.

Besides these, the older functions of kvikio (``compat_mode()``, ``num_threads_reset()``,
``set_task_size()``, ...) work as they did there.
"""
import enum
import functools
import operator
import os

from . import _lib


class CompatMode(enum.IntEnum):
    """The values of the ``"compat_mode"`` setting."""

    OFF = 0
    ON = 1
    AUTO = 2


class RemoteIOBackend(enum.IntEnum):
    """The values of the ``"remote_io_backend"`` setting, kvikio's numbers."""

    EASY_THREADPOOL = 0
    MULTI_POLL = 1


class RemoteReactorDispatch(enum.IntEnum):
    """The values of the ``"remote_io_reactor_dispatch"`` setting, kvikio's numbers."""

    PER_CHUNK = 0
    PER_PREAD = 1


# Settings whose values are enums, and those enums.
_ENUMS = {
    "compat_mode": CompatMode,
    "remote_io_backend": RemoteIOBackend,
    "remote_io_reactor_dispatch": RemoteReactorDispatch,
}

# kvikio's process-lifetime settings: set(name, value) sets them and returns None; a dict of
# settings may not name them, as no context manager could put them back.
_PROCESS_LIFETIME = frozenset({
    "remote_io_num_reactors",
    "remote_io_reactor_dispatch",
    "remote_io_max_concurrent_requests",
})


# The Python type of each setting's value; the others are ints.
_BOOLS = ("auto_direct_io_read", "auto_direct_io_write", "remote_verbose", "numa_affinity",
          "write_behind")
# Lists of ints, which libkvik reads and writes as text only ("429,500,503").
_LISTS = ("http_status_codes",)
# Text, read and written as it is (a path).
_TEXTS = ("nvcomp_library", "curl_library")


def _check_name(name):
    if name not in _lib.setting_names():
        raise KeyError(f"unknown setting {name!r}; the settings are: {', '.join(_lib.setting_names())}")


def get(config_name):
    """The current value of the setting `config_name` (see the module's documentation).

    Raises KeyError for an unknown name, and kvik.KvikError (code KVIK_ECONFIG) when the setting's
    environment variable holds a value that is not valid.
    """
    _check_name(config_name)
    if config_name in _LISTS:
        text = _lib.setting_format(config_name)
        return [int(item) for item in text.split(",")] if text else []
    if config_name in _TEXTS:
        return _lib.setting_format(config_name)
    value = _lib.setting_get(config_name)
    if config_name in _ENUMS:
        return _ENUMS[config_name](value)
    return bool(value) if config_name in _BOOLS else value


def _list_text(name, value):
    """An iterable of ints as the comma-separated text libkvik takes for a list setting."""
    if isinstance(value, str):
        return value
    try:
        items = [operator.index(item) for item in value]
    except TypeError:
        raise TypeError(f"{name} takes a list of integers (HTTP statuses) or text such as '500,503', "
                        f"not {value!r}") from None
    return ",".join(str(item) for item in items)


# The counts and sizes that kvikio takes as unsigned C types, and those types' names and largest
# values: kvikio's conversion refuses a negative value or a larger one with OverflowError, before
# the setting sees it, and kvik does the same. (0 passes the conversion; the settings that need
# at least 1 refuse it with ValueError, "must be a positive integer".) http_timeout is a C long
# there: a negative timeout is a ValueError like 0.
_UNSIGNED = {
    "num_threads": ("unsigned int", 2**32 - 1),
    "task_size": ("size_t", 2**64 - 1),
    "gds_threshold": ("size_t", 2**64 - 1),
    "bounce_buffer_size": ("size_t", 2**64 - 1),
    "http_max_attempts": ("size_t", 2**64 - 1),
    "remote_connections": ("unsigned int", 2**32 - 1),
    "remote_io_num_reactors": ("unsigned int", 2**32 - 1),
    "remote_io_max_concurrent_requests": ("size_t", 2**64 - 1),
}


def _unsigned(name, value):
    """`value` as an int, OverflowError if the C type kvikio takes `name` in cannot hold it."""
    value = operator.index(value)
    c_type, largest = _UNSIGNED[name]
    if value < 0:
        raise OverflowError(f"{name}: can't convert negative value {value} to {c_type}")
    if value > largest:
        raise OverflowError(f"{name}: value {value} too large to convert to {c_type}")
    return value


def _set_one(name, value):
    """Change one setting. Text is read as the environment variable would be ("auto", "on",
    "false", "1048576"); anything else must be an integer (bools and CompatMode included), or for
    a list setting an iterable of integers."""
    _check_name(name)
    if name in _LISTS:
        _lib.setting_parse(name, _list_text(name, value))
    elif isinstance(value, str):
        _lib.setting_parse(name, value)
    elif name in _UNSIGNED:
        _lib.setting_set(name, _unsigned(name, value))
    else:
        _lib.setting_set(name, operator.index(value))


class ConfigContextManager:
    """Applies settings when made, and puts their old values back when a ``with`` block that it
    manages ends. :func:`set` makes these."""

    def __init__(self, config):
        self._old = {}
        try:
            for key, value in config.items():
                old = self._get(key)
                self._set(key, value)
                self._old[key] = old
        except BaseException:
            # All or nothing: a bad entry undoes the ones before it.
            self._restore()
            raise

    def _get(self, key):
        return get(key)

    def _set(self, key, value):
        _set_one(key, value)

    def _restore(self):
        for key, value in reversed(self._old.items()):
            self._set(key, value)
        self._old = {}

    def __enter__(self):
        return None

    def __exit__(self, exc_type, exc_value, traceback):
        self._restore()


def _config_dict(config, usage):
    """The dict that set(config) or set(key, value) means; ValueError naming `usage` otherwise."""
    if len(config) == 1 and isinstance(config[0], dict):
        return config[0]
    if len(config) == 2 and isinstance(config[0], str):
        return {config[0]: config[1]}
    raise ValueError(f"expected {usage}(config: dict) or {usage}(key: str, value)")


def set(*config):
    """Change settings: ``set({name: value, ...})`` or ``set(name, value)``.

    The values apply at once and stay; in a ``with`` statement they last until the end of the
    block, which puts the old values back. If one value is refused (ValueError, OverflowError or
    TypeError, with the accepted range), none of them applies. Text values are read as the
    environment variables are ("on", "auto", "false", "4194304").

    Returns a :class:`ConfigContextManager`; None for ``set(name, value)`` of one of kvikio's
    process-lifetime settings (see the module's documentation), which a dict may not name.
    """
    settings = _config_dict(config, "kvik.defaults.set")
    if len(config) == 2 and config[0] in _PROCESS_LIFETIME:
        _set_one(config[0], config[1])
        return None
    lifetime = sorted(_PROCESS_LIFETIME.intersection(settings))
    if lifetime:
        raise ValueError(f"{lifetime} are kvikio's process-lifetime settings, which cannot be put "
                         "back: set each with kvik.defaults.set(key, value), not as part of a dict")
    return ConfigContextManager(settings)


# ---- where cuFile can work ------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _cufile_can_work():
    """Whether cuFile can serve IO here, as AUTO decides it up front: libcufile.so.0 loads,
    /run/udev is readable (cuFile finds file systems through udev), and this is not WSL. The
    driver is not opened. Cached: none of these changes while the process runs."""
    found, _ = _lib.runtime_lib_probe("cufile")
    return found and os.access("/run/udev", os.R_OK) and not _is_wsl()


def _is_wsl():
    try:
        with open("/proc/sys/kernel/osrelease") as release:
            return "microsoft" in release.read().lower()
    except OSError:
        return False


def is_compat_mode_preferred():
    """Whether IO runs in compatibility mode, that is POSIX only: compat_mode is ON, or AUTO on a
    machine where cuFile cannot work (no libcufile, /run/udev not readable, WSL). Opening a file
    may still fall back to POSIX under AUTO, where cuFile refuses that file."""
    mode = get("compat_mode")
    return mode == CompatMode.ON or (mode == CompatMode.AUTO and not _cufile_can_work())


# ---- kvikio's older functions ----------------------------------------------------------------


def compat_mode():
    """Whether kvik runs in compatibility mode (POSIX IO only); see is_compat_mode_preferred()."""
    return is_compat_mode_preferred()


def compat_mode_reset(compatmode):
    """Set compat_mode: a CompatMode, a bool (True is ON) or "on"/"off"/"auto"."""
    set("compat_mode", compatmode)


def set_compat_mode(compatmode):
    """Set compat_mode, for good or, in a ``with`` statement, for the block."""
    return set("compat_mode", compatmode)


def num_threads():
    """The number of threads of the IO thread pool."""
    return get("num_threads")


get_num_threads = num_threads


def num_threads_reset(nthreads):
    """Resize the IO thread pool: running tasks finish first, queued ones run on the new threads."""
    set("num_threads", nthreads)


reset_num_threads = num_threads_reset


def set_num_threads(nthreads):
    """Resize the IO thread pool, for good or, in a ``with`` statement, for the block."""
    return set("num_threads", nthreads)


def task_size():
    """The bytes per task that parallel IO is split into."""
    return get("task_size")


def task_size_reset(nbytes):
    """Set the task size in bytes."""
    set("task_size", nbytes)


def set_task_size(nbytes):
    """Set the task size, for good or, in a ``with`` statement, for the block."""
    return set("task_size", nbytes)


def gds_threshold():
    """Device IO below this many bytes runs on the calling thread with POSIX IO."""
    return get("gds_threshold")


def gds_threshold_reset(nbytes):
    """Set the GDS threshold in bytes."""
    set("gds_threshold", nbytes)


def set_gds_threshold(nbytes):
    """Set the GDS threshold, for good or, in a ``with`` statement, for the block."""
    return set("gds_threshold", nbytes)


def bounce_buffer_size():
    """The size in bytes of the pinned host buffers that device IO is staged through."""
    return get("bounce_buffer_size")


def bounce_buffer_size_reset(nbytes):
    """Set the bounce buffer size in bytes."""
    set("bounce_buffer_size", nbytes)


def set_bounce_buffer_size(nbytes):
    """Set the bounce buffer size, for good or, in a ``with`` statement, for the block."""
    return set("bounce_buffer_size", nbytes)


def http_max_attempts():
    """The attempts a remote request gets in all before it fails, the first included."""
    return get("http_max_attempts")


def http_max_attempts_reset(attempts):
    """Set the attempts per remote request."""
    set("http_max_attempts", attempts)


def set_http_max_attempts(attempts):
    """Set the attempts per remote request, for good or, in a ``with`` statement, for the block."""
    return set("http_max_attempts", attempts)


def http_timeout():
    """The seconds each attempt of a remote request may take."""
    return get("http_timeout")


def http_timeout_reset(seconds):
    """Set the timeout of each attempt of a remote request, in seconds."""
    set("http_timeout", seconds)


def set_http_timeout(seconds):
    """Set the timeout of remote requests, for good or, in a ``with`` statement, for the block."""
    return set("http_timeout", seconds)


def http_status_codes():
    """The HTTP statuses after which a remote request is tried again, a list of ints."""
    return get("http_status_codes")


def http_status_codes_reset(status_codes):
    """Set the HTTP statuses that are tried again: a list of ints."""
    set("http_status_codes", status_codes)


def set_http_status_codes(status_codes):
    """Set the statuses tried again, for good or, in a ``with`` statement, for the block."""
    return set("http_status_codes", status_codes)
