"""kvikio.buffer: registering device memory with cuFile, and the bounce buffers."""
from ._lib import bounce_buffer_free, memory_deregister, memory_register

__all__ = ["bounce_buffer_free", "memory_deregister", "memory_register"]
