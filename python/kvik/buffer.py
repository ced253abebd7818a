"""kvikio.buffer: registering device memory with cuFile, and the bounce buffers."""
from . import _lib
from ._lib import bounce_buffer_free

__all__ = ["bounce_buffer_free", "memory_deregister", "memory_register"]


def memory_register(buf) -> None:
    """Register the device allocation that `buf` lies in with cuFile, as kvikio's does. Host memory
    needs no registration (kvik reads and writes it directly): nothing is done for it."""
    _lib.memory_register(buf)


def memory_deregister(buf) -> None:
    """Undo memory_register(buf). Nothing is done for host memory."""
    _lib.memory_deregister(buf)
