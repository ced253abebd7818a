"""Zarr 3 codecs that decode and encode chunks in GPU memory with nvCOMP (kvik.nvcomp).

`ZstdCodec`, `GzipCodec` and `LZ4` subclass zarr's own ``zarr.codecs.ZstdCodec``,
``zarr.codecs.GzipCodec`` and ``zarr.codecs.numcodecs.LZ4`` and change nothing of their metadata:
the same names ("zstd", "gzip", "numcodecs.lz4"), configurations and JSON, and the same bytes, so
an array written by stock zarr on a CPU reads with these on a GPU, and the other way round, with no
re-encoding. Of a batch of chunks, those in GPU memory (``zarr.buffer.gpu.Buffer``, what zarr
hands codecs under ``zarr.config.enable_gpu()``) are decoded (encoded) by one batched nvCOMP call;
host chunks go to zarr's own implementation unchanged. Without nvCOMP (or where it lacks the
format, as nvCOMP 6 compresses gzip only on GPUs of compute capability 9.0 and later) GPU chunks
take zarr's own path too: copied to the host, decoded by numcodecs, copied back. Slower, and
correct.

Decoded sizes come from the chunks themselves: a zstd frame's content size (zarr and numcodecs
write it), a gzip member's ISIZE (the size modulo 2^32), numcodecs LZ4's 4-byte header; where a
chunk states none, the chunk's size by its spec (shape times item size). A chunk that decodes to
another size than it states raises ValueError.

``import kvik.zarr`` calls `register()`, which registers the three with zarr's codec registry and
selects them in ``zarr.config`` ("codecs.zstd", "codecs.gzip", "codecs.numcodecs.lz4"). nvCOMP 6
validates little of what it decodes (kvik.h): Zarr's crc32c codec, where an array has one, checks
a chunk before it is decoded.
"""
from __future__ import annotations

import asyncio
from typing import Any, Iterable, List, Optional, Tuple

import zarr
import zarr.registry
from zarr.codecs import GzipCodec as _StockGzip
from zarr.codecs import ZstdCodec as _StockZstd
from zarr.codecs.numcodecs import LZ4 as _StockLZ4
from zarr.core.buffer import gpu as _zarr_gpu

from . import _frames, nvcomp

__all__ = ["GzipCodec", "LZ4", "ZstdCodec", "register"]


def _spec_nbytes(spec: Any) -> Optional[int]:
    """The bytes of a chunk of `spec` in a fixed-size data type, or None."""
    try:
        itemsize = spec.dtype.to_native_dtype().itemsize
    except (AttributeError, TypeError):
        return None
    if itemsize == 0:
        return None
    count = 1
    for extent in spec.shape:
        count *= extent
    return count * itemsize


class _GpuBatch:
    """The batch methods of a stock bytes-to-bytes codec, GPU chunks on nvCOMP. A subclass names
    its kvik.nvcomp codec, how a chunk states its size, and its framing around nvCOMP's stream."""

    _nvcomp: nvcomp.Codec
    # Where a chunk states its decoded size: its first (or, `_AT_END`, last) `_END` bytes, which
    # `_stated` reads.
    _END = 0
    _AT_END = False

    @staticmethod
    def _stated(end: bytes) -> Optional[int]:
        return None

    @staticmethod
    def _body(chunk: Any) -> Any:
        return chunk

    @staticmethod
    def _frame(raw: Any, encoded: Any) -> Any:
        return encoded

    def _ready(self) -> bool:
        return nvcomp.available() and self._nvcomp.supported()

    # -- the batch functions, on flat byte arrays (CuPy; host memory works too, staged)

    @classmethod
    def decode_chunks(cls, chunks: List[Any], spec_sizes: List[Optional[int]]) -> List[Any]:
        """Decode the chunks in one nvCOMP call. `spec_sizes[i]` is chunk i's decoded size by its
        spec, where known, for chunks that do not state theirs."""
        sizes = []
        ends = _frames.ends(chunks, cls._END, cls._AT_END)  # one copy for all device chunks
        for i, (end, by_spec) in enumerate(zip(ends, spec_sizes)):
            size = cls._stated(end)
            size = by_spec if size is None else size
            if size is None:
                raise ValueError(f"chunk {i} states no decoded size and its spec gives none")
            sizes.append(size)
        decoded = cls._nvcomp.decode([cls._body(c) for c in chunks], sizes)
        for i, (d, size) in enumerate(zip(decoded, sizes)):
            if _frames.nbytes(d) != size:
                raise ValueError(f"chunk {i} decoded to {_frames.nbytes(d)} bytes, not {size}")
        return decoded

    @classmethod
    def encode_chunks(cls, chunks: List[Any]) -> List[Any]:
        """Encode the chunks in one nvCOMP call, framed as the stock codec frames them."""
        encoded = cls._nvcomp.encode(chunks)
        return [cls._frame(c, e) for c, e in zip(chunks, encoded)]

    # -- zarr's batch methods

    async def decode(self, chunks_and_specs: Iterable[Tuple[Any, Any]]) -> List[Any]:
        return await self._batch(list(chunks_and_specs), decode=True)

    async def encode(self, chunks_and_specs: Iterable[Tuple[Any, Any]]) -> List[Any]:
        return await self._batch(list(chunks_and_specs), decode=False)

    async def _batch(self, items: List[Tuple[Any, Any]], decode: bool) -> List[Any]:
        stock = super().decode if decode else super().encode  # type: ignore[misc]
        on_gpu = [i for i, (chunk, _) in enumerate(items) if isinstance(chunk, _zarr_gpu.Buffer)]
        if not on_gpu or not self._ready():
            return list(await stock(items))
        results: List[Any] = [None] * len(items)
        rest = [i for i in range(len(items)) if i not in set(on_gpu)]
        if rest:
            for i, r in zip(rest, await stock([items[i] for i in rest])):
                results[i] = r
        chunks = [items[i][0].as_array_like() for i in on_gpu]
        if decode:
            sizes = [_spec_nbytes(items[i][1]) for i in on_gpu]
            done = await asyncio.to_thread(self.decode_chunks, chunks, sizes)
        else:
            done = await asyncio.to_thread(self.encode_chunks, chunks)
        for i, array in zip(on_gpu, done):
            results[i] = items[i][1].prototype.buffer.from_array_like(array)
        return results


class ZstdCodec(_GpuBatch, _StockZstd):
    """zarr's ``zstd`` codec, GPU chunks on nvCOMP (zstd frames; nvCOMP compresses at its own
    level). With ``checksum=True`` chunks take zarr's own path: nvCOMP neither writes nor
    verifies zstd's checksum, and an array that asks for one gets it checked."""

    _nvcomp = nvcomp.ZstdCodec()
    _END = _frames.ZSTD_HEADER_MAX
    _stated = staticmethod(_frames.zstd_content_size)

    def _ready(self) -> bool:
        return not self.checksum and super()._ready()


class GzipCodec(_GpuBatch, _StockGzip):
    """zarr's ``gzip`` codec, GPU chunks on nvCOMP (one gzip member a chunk)."""

    _nvcomp = nvcomp.GzipCodec()
    _END, _AT_END = 4, True
    _stated = staticmethod(_frames.gzip_isize)


def _lz4_frame(raw: Any, block: Any) -> Any:
    from .numcodecs import _lz4_framed

    return _lz4_framed(raw, block)


class LZ4(_GpuBatch, _StockLZ4):
    """numcodecs' ``lz4`` in Zarr 3 ("numcodecs.lz4"), GPU chunks on nvCOMP: the decoded size
    in 4 bytes, little-endian, then a raw LZ4 block."""

    _nvcomp = nvcomp.LZ4Codec()
    _END = _frames.LZ4_HEADER
    _stated = staticmethod(_frames.lz4_size)
    _frame = staticmethod(_lz4_frame)

    @staticmethod
    def _body(chunk: Any) -> Any:
        return chunk[_frames.LZ4_HEADER:]


_SELECTED = {"zstd": ZstdCodec, "gzip": GzipCodec, "numcodecs.lz4": LZ4}


def register() -> None:
    """Register the codecs with zarr and select them in zarr.config, for every array opened
    after: host chunks still take zarr's own code."""
    for key, cls in _SELECTED.items():
        zarr.registry.register_codec(key, cls)
    # The whole "codecs" dict, set again with ours in it: the key "numcodecs.lz4" holds a dot,
    # which a dotted path ("codecs.numcodecs.lz4") would split, and a dict set replaces the old.
    selected = dict(zarr.config.get("codecs", {}))
    selected.update({key: zarr.registry.fully_qualified_name(cls)
                     for key, cls in _SELECTED.items()})
    zarr.config.set({"codecs": selected})
