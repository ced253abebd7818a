"""kvikio.cufile's names: the file handle and its futures."""
from ._lib import CuFile, IOFuture, IOFutureStream

__all__ = ["CuFile", "IOFuture", "IOFutureStream"]
