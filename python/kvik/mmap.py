"""kvikio.mmap's names: a read-only mapping of a file, read into host or device memory."""
from ._lib import Mmap

__all__ = ["Mmap"]
