"""kvikio.stream: registering CUDA streams with cuFile, for CuFile.raw_read_async and
raw_write_async. Where cuFile is not in use (compat mode, or no GDS), both do nothing."""
from . import _lib

__all__ = ["stream_deregister", "stream_register"]


def stream_register(raw_stream, flags: int) -> None:
    """Register CUDA stream `raw_stream` (an int, or a CuPy, PyTorch or cuda.core stream) with
    cuFile; `flags` are cuFile's CU_FILE_STREAM_* bits. Parameter names as in kvikio."""
    _lib.stream_register(raw_stream, flags)


def stream_deregister(raw_stream) -> None:
    """Undo stream_register(raw_stream)."""
    _lib.stream_deregister(raw_stream)
