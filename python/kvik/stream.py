"""kvikio.stream: registering CUDA streams with cuFile, for CuFile.raw_read_async and
raw_write_async. Where cuFile is not in use (compat mode, or no GDS), both do nothing."""
from ._lib import stream_deregister, stream_register

__all__ = ["stream_deregister", "stream_register"]
