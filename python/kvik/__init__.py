"""kvik: fast file IO between storage and host or GPU memory, with the kvikio Python API.

kvikio code moves over by changing its import::

    import kvik as kvikio

    with kvikio.CuFile("data.bin", "r") as f:
        f.read(cupy_array)          # or a NumPy array, or anything with the buffer protocol

Remote objects (HTTP, S3, WebHDFS) read the same way through kvik.RemoteFile.

The submodules kvikio code reaches as attributes are there after ``import kvik``: kvik.buffer,
kvik.cufile, kvik.cufile_driver, kvik.defaults, kvik.mmap, kvik.nsys, kvik.remote_file,
kvik.statistics, kvik.stream and kvik.utils; and kvik.numpy, kvik.zarr, kvik.numcodecs,
kvik.nvcomp, kvik.safetensors and kvik.benchmarks, which load on first use (the first three import
NumPy, Zarr and Numcodecs).

Everything runs on libkvik, compiled into the extension module kvik._lib: a machine without a GPU
runs the same package, with host memory.
"""
import importlib as _importlib

from . import _alias
from . import buffer, cufile, cufile_driver, defaults, mmap, remote_file, statistics, stream, utils
from ._device import read_file_to_device
# kvik's exceptions besides KvikError are each a KvikError, so a RuntimeError as kvikio raises for
# failed IO, and the built-in class of its cause (kvik.FileNotFound is a FileNotFoundError,
# kvik.InvalidArgument a ValueError).
from ._lib import (
    BrokenPipe,
    ChildProcessFailure,
    ConnectionAborted,
    ConnectionRefused,
    ConnectionReset,
    CuFile,
    FileExists,
    FileNotFound,
    IOFuture,
    IOFutureStream,
    Interrupted,
    InvalidArgument,
    IsADirectory,
    KvikError,
    Mmap,
    NoSuchProcess,
    NotADirectory,
    OSFailure,
    PermissionDenied,
    RangeNotSupported,
    TimedOut,
    WouldBlock,
)
from ._split import read_split
from ._version import __git_commit__, __version__
from .buffer import bounce_buffer_free, memory_deregister, memory_register
from .cufile import (
    clear_page_cache,
    drop_file_page_cache,
    drop_system_page_cache,
    get_page_cache_info,
)
from .defaults import CompatMode, RemoteIOBackend, RemoteReactorDispatch
from .nsys import nsys_plugin_search_dir
from .remote_file import (
    RemoteEndpointType,
    RemoteFile,
    infer_remote_endpoint_type,
    is_remote_file_available,
)
from .statistics import Summary, SummaryMonitor
from .stream import stream_deregister, stream_register
from .utils import kvikio_deprecation_notice

# A program that puts kvik in sys.modules as "kvikio" imports kvikio.defaults and the other
# submodules as kvik's own modules, not second copies.
_alias.install()

__all__ = [
    "BrokenPipe",
    "ChildProcessFailure",
    "CompatMode",
    "ConnectionAborted",
    "ConnectionRefused",
    "ConnectionReset",
    "CuFile",
    "FileExists",
    "FileNotFound",
    "IOFuture",
    "IOFutureStream",
    "Interrupted",
    "InvalidArgument",
    "IsADirectory",
    "KvikError",
    "Mmap",
    "NoSuchProcess",
    "NotADirectory",
    "OSFailure",
    "PermissionDenied",
    "RangeNotSupported",
    "RemoteEndpointType",
    "RemoteFile",
    "RemoteIOBackend",
    "RemoteReactorDispatch",
    "Summary",
    "SummaryMonitor",
    "TimedOut",
    "WouldBlock",
    "__git_commit__",
    "__version__",
    "bounce_buffer_free",
    "clear_page_cache",
    "cufile_driver",
    "defaults",
    "drop_file_page_cache",
    "drop_system_page_cache",
    "get_page_cache_info",
    "infer_remote_endpoint_type",
    "is_remote_file_available",
    "kvikio_deprecation_notice",
    "memory_deregister",
    "memory_register",
    "nsys_plugin_search_dir",
    "read_file_to_device",
    "read_split",
    "remote_file",
    "stream_deregister",
    "stream_register",
]


# Submodules that import a third-party package load on first use, so that `import kvik` stays
# cheap (NumPy alone takes longer to import than kvik) and works without Zarr or Numcodecs; the
# benchmarks package, which nothing at run time needs, and safetensors, too.
_LAZY_SUBMODULES = ("benchmarks", "numcodecs", "numpy", "nvcomp", "safetensors", "zarr")


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        return _importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY_SUBMODULES))
