"""kvikio.numcodecs: the base class of CUDA codecs for Numcodecs
(https://numcodecs.readthedocs.io). Needs the numcodecs package; ``import kvik`` loads this
module on first use only."""
from __future__ import annotations

from abc import abstractmethod
from typing import Any, Optional

from numcodecs.abc import Codec

__all__ = ["BufferLike", "CudaCodec"]

# A NumPy or CuPy array, or anything with the buffer protocol or __cuda_array_interface__.
BufferLike = Any


class CudaCodec(Codec):
    """A Numcodecs codec that encodes and decodes with CUDA, from and into host or device
    memory."""

    @abstractmethod
    def encode(self, buf: BufferLike) -> Any:
        """Encode `buf` (host or device memory); return the encoded bytes as a CuPy array."""

    @abstractmethod
    def decode(self, buf: BufferLike, out: Optional[BufferLike] = None) -> BufferLike:
        """Decode `buf` (host or device memory) into `out`, which must be exactly the decoded
        size, or, without `out`, into new memory of the kind `buf` is; return the decoded data."""
