"""kvik.numcodecs: Numcodecs (https://numcodecs.readthedocs.io) codecs that run on the GPU through
nvCOMP (kvik.nvcomp), and the base class of CUDA codecs, `CudaCodec`, as kvikio had it.

`Zstd`, `LZ4` and `GZip` write and read the bytes numcodecs' own codecs of those names do, so that
either reads what the other wrote: a zstd frame; numcodecs' LZ4 (the decoded size, 4 bytes
little-endian, then one raw LZ4 block); a gzip member. They have numcodecs' ``codec_id`` and
configuration keys, so ``get_config()`` and ``numcodecs.get_codec()`` round trip; a level or an
acceleration is kept for the configuration, and for the CPU fallback, but nvCOMP compresses at its
own. Host memory in gives ``bytes`` out (staged through the GPU), device memory (CuPy,
``__cuda_array_interface__``, DLPack) gives a CuPy array; ``decode(buf, out=...)`` decodes into
`out`, which must be the decoded size exactly. Without nvCOMP (or where it lacks the format) each
codec runs numcodecs' CPU codec instead, copying device memory to the host and the result back.

Importing this module registers nothing: ``register_codecs()`` makes ``numcodecs.get_codec()``
give these classes for the ids "zstd", "lz4" and "gzip" (in place of numcodecs' own, which it
returns, for putting back). Needs the numcodecs package; ``import kvik`` loads this module on
first use only.
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Any, Dict, List, Optional, Sequence

import numcodecs
import numcodecs.registry
from numcodecs.abc import Codec

from . import _frames, nvcomp

__all__ = ["BufferLike", "CudaCodec", "GZip", "LZ4", "Zstd", "register_codecs"]

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


def _on_device(buf: Any) -> bool:
    return hasattr(buf, "__cuda_array_interface__")


def _flat(buf: Any) -> Any:
    """`buf` (DLPack objects included) as a 1-d view of its bytes: CuPy for device memory, a
    memoryview for host memory."""
    buf = nvcomp._as_buffer(buf)
    return _frames.as_bytes_device(buf) if _on_device(buf) else memoryview(buf).cast("B")


def _empty_like(buf: Any, size: int) -> Any:
    if not _on_device(buf):
        return bytearray(size)
    import cupy

    return cupy.empty(size, dtype=cupy.uint8)


class _NvcompCodec(CudaCodec):
    """A numcodecs codec on one kvik.nvcomp codec, `_nvcomp`, falling back to `_cpu()`."""

    _nvcomp: nvcomp.Codec

    @abstractmethod
    def _cpu(self) -> Codec:
        """numcodecs' own codec of this configuration."""

    def _gpu(self) -> bool:
        return nvcomp.available() and self._nvcomp.supported()

    def _decoded_size(self, buf: Any) -> Optional[int]:
        """The decoded size the chunk states, or None."""
        return None

    # -- batches: one nvCOMP call for many chunks

    def encode_batch(self, bufs: Sequence[BufferLike]) -> List[Any]:
        """Encode each buffer, in one nvCOMP call."""
        bufs = [_flat(b) for b in bufs]
        if not self._gpu():
            return [self._on_cpu(b, lambda h: self._cpu().encode(h)) for b in bufs]
        return self._frame(bufs, self._nvcomp.encode(bufs))

    def decode_batch(self, bufs: Sequence[BufferLike],
                     out: Optional[Sequence[Optional[BufferLike]]] = None) -> List[Any]:
        """Decode each buffer, in one nvCOMP call; `out[i]`, where given and not None, is chunk
        i's output, of its decoded size exactly."""
        bufs = [_flat(b) for b in bufs]
        outs = list(out) if out is not None else [None] * len(bufs)
        if len(outs) != len(bufs):
            raise ValueError(f"{len(bufs)} chunks but {len(outs)} outputs")
        if not self._gpu():
            return [self._decode_cpu(b, o) for b, o in zip(bufs, outs)]
        targets, sizes = [], []
        for b, o in zip(bufs, outs):
            size = _frames.nbytes(_flat(o)) if o is not None else self._decoded_size(b)
            if size is None:
                raise ValueError(f"{type(self).__name__}.decode(): the chunk does not state its "
                                 "decoded size; pass out=")
            targets.append(_flat(o) if o is not None else _empty_like(b, size))
            sizes.append(size)
        got = self._nvcomp.decode_into([self._body(b) for b in bufs], targets)
        for i, (size, want) in enumerate(zip(got, sizes)):
            if size != want:
                raise ValueError(f"{type(self).__name__}.decode(): chunk {i} decoded to {size} "
                                 f"bytes, not the {want} it states or out holds")
        return [o if o is not None else (bytes(t) if isinstance(t, bytearray) else t)
                for o, t in zip(outs, targets)]

    # -- one chunk

    def encode(self, buf: BufferLike) -> Any:
        return self.encode_batch([buf])[0]

    def decode(self, buf: BufferLike, out: Optional[BufferLike] = None) -> Any:
        return self.decode_batch([buf], [out])[0]

    # -- the format's framing around nvCOMP's raw stream

    def _frame(self, bufs: List[Any], encoded: List[Any]) -> List[Any]:
        """The encoded chunks as numcodecs writes them."""
        return encoded

    def _body(self, buf: Any) -> Any:
        """The part of an encoded chunk that nvCOMP decodes."""
        return buf

    # -- the CPU fallback

    @staticmethod
    def _on_cpu(buf: Any, call) -> Any:
        """`call` on host memory: device memory goes to the host, and the result comes back."""
        if not _on_device(buf):
            return call(buf)
        import cupy

        result = call(_frames.as_bytes_device(buf).get())
        return cupy.asarray(numcodecs.compat.ensure_ndarray(result).view("u1").reshape(-1))

    def _decode_cpu(self, buf: Any, out: Any) -> Any:
        if out is None:
            return self._on_cpu(buf, lambda h: self._cpu().decode(h))
        if not _on_device(out):
            return self._cpu().decode(buf if not _on_device(buf) else
                                      _frames.as_bytes_device(buf).get(), out=out)
        decoded = self._on_cpu(buf, lambda h: self._cpu().decode(h))
        target = _frames.as_bytes_device(nvcomp._as_buffer(out))
        if target.size != decoded.size:
            raise ValueError(f"out holds {target.size} bytes but the chunk decodes to "
                             f"{decoded.size}")
        target[...] = decoded
        return out


class Zstd(_NvcompCodec):
    """numcodecs.Zstd on the GPU: zstd frames. `level` and `checksum` are numcodecs'; nvCOMP
    writes frames at its own level and without a checksum."""

    codec_id = "zstd"
    _nvcomp = nvcomp.ZstdCodec()

    def __init__(self, level: int = 0, checksum: bool = False) -> None:
        self.level = level
        self.checksum = checksum

    def _cpu(self) -> Codec:
        return numcodecs.Zstd(level=self.level, checksum=self.checksum)

    def _decoded_size(self, buf: Any) -> Optional[int]:
        return _frames.zstd_size(buf)


class GZip(_NvcompCodec):
    """numcodecs.GZip on the GPU: one gzip member. Encoding needs a GPU of compute capability 9.0
    or later in nvCOMP 6."""

    codec_id = "gzip"
    _nvcomp = nvcomp.GzipCodec()

    def __init__(self, level: int = 1) -> None:
        self.level = level

    def _cpu(self) -> Codec:
        return numcodecs.GZip(level=self.level)

    def _decoded_size(self, buf: Any) -> Optional[int]:
        return _frames.gzip_size(buf)


class LZ4(_NvcompCodec):
    """numcodecs.LZ4 on the GPU: a 4-byte little-endian decoded size, then one raw LZ4 block."""

    codec_id = "lz4"
    _nvcomp = nvcomp.LZ4Codec()

    def __init__(self, acceleration: int = 1) -> None:
        self.acceleration = acceleration

    def _cpu(self) -> Codec:
        return numcodecs.LZ4(acceleration=self.acceleration)

    def _decoded_size(self, buf: Any) -> Optional[int]:
        return _frames.lz4_header_size(buf)

    def _body(self, buf: Any) -> Any:
        return buf[_frames.LZ4_HEADER:]

    def _frame(self, bufs: List[Any], encoded: List[Any]) -> List[Any]:
        return [_lz4_framed(b, e) for b, e in zip(bufs, encoded)]


def _lz4_framed(raw: Any, block: Any) -> Any:
    header = _frames.nbytes(raw).to_bytes(_frames.LZ4_HEADER, "little")
    if not _on_device(block):
        return header + bytes(block)
    import cupy

    out = cupy.empty(_frames.LZ4_HEADER + block.size, dtype=cupy.uint8)
    out[:_frames.LZ4_HEADER] = cupy.asarray(bytearray(header), dtype=cupy.uint8)
    out[_frames.LZ4_HEADER:] = block
    return out


_CODECS = (Zstd, LZ4, GZip)


def register_codecs() -> Dict[str, type]:
    """Make numcodecs.get_codec() give kvik's GPU codecs for "zstd", "lz4" and "gzip"; returns
    the classes registered for those ids before, which ``numcodecs.register_codec(cls)`` puts
    back."""
    before = {cls.codec_id: numcodecs.registry.codec_registry.get(cls.codec_id)
              for cls in _CODECS}
    for cls in _CODECS:
        numcodecs.registry.register_codec(cls)
    return before
