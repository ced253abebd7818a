"""kvikio.cufile_driver: the cuFile (GPUDirect Storage) driver.

cuFile is loaded, and its driver opened, when first needed, and closed when the process exits,
after the cuFile calls still running have returned. Its properties are read and changed with
:func:`get` and :func:`set`, like kvik.defaults' settings; sizes are in KiB, as in kvikio, and a
property set through kvik reads back as set (cuFile without nvidia-fs accepts the setters and
goes on reporting its configured values):

- read only: ``is_gds_available`` (nvidia-fs is loaded: true GPUDirect transfers),
  ``major_version`` and ``minor_version`` (of nvidia-fs; 0 without it), ``allow_compat_mode``
  (cuFile's own POSIX fallback), ``per_buffer_cache_size``, and kvik's ``max_batch_io_size``
  and ``max_batch_io_timeout_msecs``;
- settable: ``poll_mode`` (bool), ``poll_thresh_size``, ``max_device_cache_size``,
  ``max_pinned_memory_size``, and kvik's ``max_direct_io_size``. A negative size raises
  OverflowError, as kvikio's conversion to size_t does.

:func:`get` and :func:`set` also take the names of cuFile's parameters (cuFile 1.14 or later:
``"properties_allow_compat_mode"``, ``"logging_level"``, ...; ``_lib.cufile_parameter_names()``
lists them), which cuFile accepts only before its driver opens.

Without cuFile, everything here except :func:`libcufile_version` and ``is_gds_available``
raises kvik.KvikError, whose ``name`` is KVIK_ECUFILE_UNAVAILABLE, with the reason.
"""
import errno
import operator

from . import _lib
from . import defaults as _defaults

_KiB = 1024


def _value(key, unit=1):
    """The driver's property `key` (a name of _lib.cufile_properties()), in units of `unit` bytes."""
    value = _lib.cufile_properties()[key]
    return value if unit == 1 else value // unit


def _kib(size_in_kb):
    """Bytes of a size in KiB; OverflowError for a negative one, as kvikio's size_t conversion."""
    size_in_kb = operator.index(size_in_kb)
    if size_in_kb < 0:
        raise OverflowError(f"can't convert negative value to size_t: a size in KiB must not be "
                            f"negative (got {size_in_kb})")
    return size_in_kb * _KiB


# What was set through this module, by property, as set. cuFile without nvidia-fs accepts the
# setters and goes on reporting the values of its configuration; kvikio remembers what it set
# and reads that back, and so does kvik: a property reads back as set, in its unit.
_assigned = {}


def _driver_property(name, key, doc, unit=1, setter=None, kind=operator.index):
    """A property that reads the driver's `key` in units of `unit` bytes, or what was last set
    through it; if settable, it calls setter with the value as `kind` makes it, and remembers
    that value once the driver took it."""
    def get(self):
        return _assigned[name] if name in _assigned else _value(key, unit)

    def put(self, value):
        value = kind(value)
        setter(value)
        _assigned[name] = value

    return property(get, setter and put, doc=doc)


def _gds_available(self):
    try:
        return _value("gds_available")
    except _lib.KvikError:
        return False


class DriverProperties:
    """The cuFile driver's properties, read from the driver at each access but for those set
    through kvik, which read back as set; sizes in KiB."""

    is_gds_available = property(_gds_available, doc="True where nvidia-fs is loaded; False where it is not, "
                                                     "or cuFile is not available.")
    major_version = _driver_property("major_version", "nvfs_major_version",
                                     "The major version of nvidia-fs; 0 without it.")
    minor_version = _driver_property("minor_version", "nvfs_minor_version",
                                     "The minor version of nvidia-fs.")
    allow_compat_mode = _driver_property("allow_compat_mode", "allow_compat_mode",
                                         "Whether cuFile may fall back to its own POSIX IO.")
    per_buffer_cache_size = _driver_property("per_buffer_cache_size", "per_buffer_cache_size",
                                             "KiB of cuFile's bounce buffer per IO.", _KiB)
    max_batch_io_size = _driver_property("max_batch_io_size", "max_batch_io_size",
                                         "The most operations one cuFile batch holds.")
    max_batch_io_timeout_msecs = _driver_property(
        "max_batch_io_timeout_msecs", "max_batch_io_timeout_ms", "cuFile's batch timeout in ms.")
    # cuFile sets poll mode and its threshold together: each setter keeps the other's value.
    poll_mode = _driver_property(
        "poll_mode", "poll_mode",
        "Whether cuFile polls for the completion of IO up to poll_thresh_size.", kind=bool,
        setter=lambda enable: _lib.cufile_set_poll_mode(enable, _kib(properties.poll_thresh_size)))
    poll_thresh_size = _driver_property(
        "poll_thresh_size", "poll_threshold_size",
        "KiB up to which IO is polled for in poll mode.", _KiB,
        setter=lambda size_in_kb: _lib.cufile_set_poll_mode(properties.poll_mode, _kib(size_in_kb)))
    max_device_cache_size = _driver_property(
        "max_device_cache_size", "max_device_cache_size",
        "KiB of device memory cuFile keeps for its own bounce buffers.", _KiB,
        setter=lambda size_in_kb: _lib.cufile_set_max_cache_size(_kib(size_in_kb)))
    max_pinned_memory_size = _driver_property(
        "max_pinned_memory_size", "max_device_pinned_mem_size",
        "KiB of device memory cuFile may pin (register) at most.", _KiB,
        setter=lambda size_in_kb: _lib.cufile_set_max_pinned_memory(_kib(size_in_kb)))
    max_direct_io_size = _driver_property(
        "max_direct_io_size", "max_direct_io_size",
        "KiB of the largest single IO cuFile issues to the file system.", _KiB,
        setter=lambda size_in_kb: _lib.cufile_set_max_direct_io_size(_kib(size_in_kb)))


properties = DriverProperties()
"""The driver's properties as attributes; get() and set() reach the same."""

_PROPERTIES = tuple(name for name, value in vars(DriverProperties).items() if isinstance(value, property))


def _parameter_value(text):
    """A cuFile parameter's text as a Python value: a bool, an int, or the text itself."""
    if text in ("true", "false"):
        return text == "true"
    return int(text) if text.isdigit() else text


def _parameter_text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(operator.index(value))


def _unknown(name):
    return KeyError(f"unknown cuFile driver property {name!r}; the properties are: {', '.join(_PROPERTIES)}")


def get(config_name):
    """The value of a driver property or cuFile parameter (see the module's documentation).

    Raises KeyError for an unknown name, kvik.KvikError without cuFile.
    """
    if config_name in _PROPERTIES:
        return getattr(properties, config_name)
    if config_name in _lib.cufile_parameter_names():
        return _parameter_value(_lib.cufile_parameter_get(config_name))
    raise _unknown(config_name)


def _check_settable(name):
    """KeyError unless `name` is a settable property or a parameter; needs no cuFile, so that a
    wrong name is reported as such everywhere."""
    if name in _PROPERTIES:
        if getattr(DriverProperties, name).fset is None:
            raise KeyError(f"the cuFile driver property {name!r} is read-only")
    elif name not in _lib.cufile_parameter_names():
        raise _unknown(name)


def _set_one(name, value):
    _check_settable(name)
    if name in _PROPERTIES:
        setattr(properties, name, value)
    else:
        _lib.cufile_parameter_set(name, _parameter_text(value))


class ConfigContextManager(_defaults.ConfigContextManager):
    """Applies driver properties when made, and puts their old values back when a ``with`` block
    that it manages ends. :func:`set` makes these."""

    def _get(self, key):
        _check_settable(key)
        return get(key)

    def _set(self, key, value):
        _set_one(key, value)


def set(*config):
    """Change driver properties: ``set({name: value, ...})`` or ``set(name, value)``.

    They apply at once and stay; in a ``with`` statement they last until the end of the block.
    KeyError for an unknown or read-only name; if one value is refused, none applies.

    Returns a :class:`ConfigContextManager`.
    """
    return ConfigContextManager(_defaults._config_dict(config, "kvik.cufile_driver.set"))


def libcufile_version():
    """cuFile's version as (major, minor), e.g. (1, 15); (0, 0) where cuFile is not available or
    is older than 1.8 (it cannot tell its version), as in kvikio. This is cuFile's own version,
    not that of the CUDA toolkit it came with."""
    try:
        version = _lib.libcufile_version()
    except _lib.KvikError:
        return (0, 0)
    except OSError as e:
        if e.errno != errno.ENOTSUP:
            raise
        return (0, 0)
    major, rest = divmod(version, 1000)
    return (major, rest // 10)


def driver_open():
    """Load cuFile and open its driver now, rather than on first need. Raises kvik.KvikError saying
    why cuFile is not available. Calling it again does nothing."""
    _lib.cufile_open()


def driver_close():
    """Does nothing: kvik keeps the driver open while the process runs, since files opened
    meanwhile may rely on it, and closes it at exit, after the cuFile calls still running. It is
    here so that kvikio code pairing driver_open() with driver_close() runs unchanged."""


def initialize():
    """Open the cuFile driver now (driver_open()); kvik closes it at exit."""
    driver_open()
