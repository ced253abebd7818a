"""kvik.zarr's codec pipeline: compressed Zarr chunks read and decoded on the GPU in one call.

Zarr's own pipeline reads every chunk into a buffer, then decodes each. Where a read fills GPU
memory (``zarr.config.enable_gpu()``) from a ``GDSStore``, and a chunk's codecs are the plain
``bytes`` codec (little-endian) followed by exactly one of zstd (without checksum), gzip or
numcodecs' LZ4, this pipeline hands all such chunks of a selection, by path, to kvik's fused read
(``kvik.nvcomp.read_decompress``), which opens their files on its thread pool, reads the
compressed bytes into device memory and decodes them with nvCOMP while it reads the next ones.
A chunk that fills its place in the output array whole, contiguously, is decoded straight into
the output; others are decoded into staging memory (at most STAGING_BYTES at a time) and copied.
A chunk without a file (never written) gets its fill value.

Other reads and writes of GPU buffers go through Zarr's BatchedCodecPipeline in batches of
GPU_BATCH_BYTES of chunks, not Zarr's default of one chunk a batch, so that the GPU codecs
(kvik.zarr_codecs) get many chunks per nvCOMP call. Host buffers take Zarr's pipeline unchanged.
``import kvik.zarr`` selects this pipeline in ``zarr.config`` ("codec_pipeline.path").
"""
from __future__ import annotations

import asyncio
import errno
import math
import os
import sys
from typing import Any, Iterable, List, Optional, Set, Tuple

import zarr
from zarr.codecs import BytesCodec, GzipCodec, ZstdCodec
from zarr.core.codec_pipeline import BatchedCodecPipeline, batched, fill_value_or_default
from zarr.core.common import concurrent_map

try:  # zarr >= 3.1
    from zarr.codecs.numcodecs import LZ4 as NumcodecsLZ4
except ImportError:  # pragma: no cover
    NumcodecsLZ4 = None

import kvik
import kvik.nvcomp

# Decoded bytes staged in device memory at once, for chunks that cannot decode in place.
STAGING_BYTES = 1 << 30
# Decoded bytes of the chunks of one batch of GPU buffers in Zarr's own pipeline.
GPU_BATCH_BYTES = 256 << 20


def _stream_format(codec: Any) -> Optional[Tuple[str, int]]:
    """(kvik.nvcomp's codec name, bytes before the compressed stream) for a bytes-to-bytes codec
    nvCOMP decodes exactly as the CPU would, or None. A zstd checksum nvCOMP would not verify."""
    if isinstance(codec, ZstdCodec):
        return None if codec.checksum else ("zstd", 0)
    if isinstance(codec, GzipCodec):
        return ("gzip", 0)
    if NumcodecsLZ4 is not None and isinstance(codec, NumcodecsLZ4):
        return ("lz4", 4)  # numcodecs' LZ4: the decoded size, 4 bytes little-endian, first
    return None


def _on_gpu(prototype: Any) -> bool:
    return prototype.buffer.__module__.startswith("zarr.core.buffer.gpu")


class _Layout:
    """Where an output array's elements lie in device memory: its address, shape and strides,
    read once from its ``__cuda_array_interface__``."""

    def __init__(self, array: Any) -> None:
        iface = array.__cuda_array_interface__
        self.address, self.shape = iface["data"][0], tuple(iface["shape"])
        self.dtype = array.dtype
        strides, step = [], self.dtype.itemsize
        for extent in reversed(self.shape):
            strides.append(step)
            step *= extent
        self.strides = tuple(iface["strides"] or reversed(strides))

    def address_of(self, selection: Any, shape: tuple) -> Optional[int]:
        """The address of ``array[selection]`` where that is `shape`, in C order, one block of
        memory (a selection of unit-step slices); else None. Integer arithmetic: a CuPy view a
        chunk would cost microseconds each."""
        selection = selection if isinstance(selection, tuple) else (selection,)
        if len(selection) != len(self.shape) or len(shape) != len(self.shape):
            return None
        address, contiguous = self.address, self.dtype.itemsize
        for axis in range(len(shape) - 1, -1, -1):
            sel, extent, stride = selection[axis], shape[axis], self.strides[axis]
            if not isinstance(sel, slice):
                return None
            start, stop, step = sel.indices(self.shape[axis])
            if step != 1 or stop - start != extent or (extent > 1 and stride != contiguous):
                return None
            address += start * stride
            contiguous *= extent
        return address


class _Chunk:
    """One chunk of a fused read: its file, where it decodes to, and where that goes."""

    def __init__(self, path: str, spec: Any, chunk_selection: Any, out_selection: Any) -> None:
        self.path, self.spec = path, spec
        self.chunk_selection, self.out_selection = chunk_selection, out_selection
        self.dtype = spec.dtype.to_native_dtype()
        self.nbytes = math.prod(spec.shape) * self.dtype.itemsize
        self.target: Optional[int] = None  # the output's address, where it decodes in place

    def place_in(self, out: _Layout, complete: bool, drop_axes: tuple) -> None:
        """Decode straight into the output where the chunk fills its selection of it
        contiguously."""
        if drop_axes or not complete or self.spec.order != "C" or out.dtype != self.dtype:
            return
        self.target = out.address_of(self.out_selection, tuple(self.spec.shape))


class FusedCodecPipeline(BatchedCodecPipeline):
    """Zarr's BatchedCodecPipeline, with chunks read from a GDSStore into GPU memory and decoded
    there by kvik's fused read (see the module's text)."""

    def _fused_format(self) -> Optional[Tuple[str, int]]:
        if self.array_array_codecs or len(self.bytes_bytes_codecs) != 1:
            return None
        codec = self.array_bytes_codec
        if not isinstance(codec, BytesCodec):
            return None
        # An Endian enum in zarr 3.1, a plain "little" or "big" in 3.4.
        endian = getattr(codec.endian, "value", codec.endian)
        if endian is not None and endian != sys.byteorder:
            return None
        fmt = _stream_format(self.bytes_bytes_codecs[0])
        if fmt is None or fmt[0] not in kvik.nvcomp.codecs():
            return None
        return fmt

    async def read(self, batch_info: Iterable[Tuple[Any, ...]], out: Any,
                   drop_axes: tuple = ()) -> None:
        from .zarr import GDSStore

        batch_info = list(batch_info)
        fmt = self._fused_format() if batch_info else None
        fused, rest = [], []
        for info in batch_info:
            byte_getter, spec = info[0], info[1]
            store = getattr(byte_getter, "store", None)
            if fmt and isinstance(store, GDSStore) and _on_gpu(spec.prototype):
                fused.append(info)
            else:
                rest.append(info)
        if fused:
            await asyncio.to_thread(self._read_fused, fmt, fused, out, drop_axes)
        if rest:
            await self._batched(self.read_batch, rest, out, drop_axes)

    async def write(self, batch_info: Iterable[Tuple[Any, ...]], value: Any,
                    drop_axes: tuple = ()) -> None:
        await self._batched(self.write_batch, list(batch_info), value, drop_axes)

    def _batch_len(self, spec: Any) -> int:
        """Chunks of `spec` per batch: Zarr's batch_size, or GPU_BATCH_BYTES of chunks for GPU
        buffers."""
        if not _on_gpu(spec.prototype):
            return self.batch_size
        chunk = math.prod(spec.shape) * max(1, spec.dtype.to_native_dtype().itemsize)
        return max(self.batch_size, GPU_BATCH_BYTES // max(1, chunk))

    async def _batched(self, run: Any, batch_info: List[Tuple[Any, ...]], array: Any,
                       drop_axes: tuple) -> None:
        """Zarr's read or write, in batches of _batch_len() chunks."""
        size = self._batch_len(batch_info[0][1]) if batch_info else 1
        await concurrent_map([(batch, array, drop_axes) for batch in batched(batch_info, size)],
                             run, zarr.config.get("async.concurrency"))

    # Zarr 3.4's read_batch and write_batch (de)code through decode() and encode(), which cut a
    # batch again by batch_size: one nvCOMP call per chunk at Zarr's default of 1. These keep
    # _batch_len() chunks together, as Zarr 3.1's read_batch, which calls decode_batch(), does.
    async def decode(self, chunk_bytes_and_specs: Iterable[Tuple[Any, Any]]) -> List[Any]:
        items = list(chunk_bytes_and_specs)
        size = self._batch_len(items[0][1]) if items else 1
        return [out for batch in batched(items, size) for out in await self.decode_batch(batch)]

    async def encode(self, chunk_arrays_and_specs: Iterable[Tuple[Any, Any]]) -> List[Any]:
        items = list(chunk_arrays_and_specs)
        size = self._batch_len(items[0][1]) if items else 1
        return [out for batch in batched(items, size) for out in await self.encode_batch(batch)]

    def _read_fused(self, fmt: Tuple[str, int], batch_info: List[Tuple[Any, ...]], out: Any,
                    drop_axes: tuple) -> None:
        array = out.as_ndarray_like()
        layout = _Layout(array)
        roots: dict = {}  # each store's root as a str: a pathlib join a chunk costs microseconds
        chunks = []
        for byte_getter, spec, chunk_selection, out_selection, complete in batch_info:
            store = byte_getter.store
            root = roots.get(id(store)) or roots.setdefault(id(store), str(store.root))
            chunk = _Chunk(os.path.join(root, byte_getter.path), spec, chunk_selection,
                           out_selection)
            chunk.place_in(layout, complete, drop_axes)
            chunks.append(chunk)
        group: List[_Chunk] = []
        staged = 0
        for chunk in chunks:
            staged += 0 if chunk.target is not None else chunk.nbytes
            group.append(chunk)
            if staged >= STAGING_BYTES:
                _decode_group(fmt, group, array, drop_axes)
                group, staged = [], 0
        if group:
            _decode_group(fmt, group, array, drop_axes)


def _decode_group(fmt: Tuple[str, int], group: List[_Chunk], array: Any, drop_axes: tuple) -> None:
    """Read and decode `group` in one fused read, by path, then put the staged chunks, and the
    fill value of chunks without a file, in place."""
    import cupy

    name, header = fmt
    staging = cupy.empty(sum(c.nbytes for c in group if c.target is None), dtype=cupy.uint8)
    base = staging.data.ptr
    requests, staged, offset = [], [], 0
    for i, chunk in enumerate(group):
        at = chunk.target
        if at is None:
            at = base + offset
            staged.append((i, offset))
            offset += chunk.nbytes
        requests.append((chunk.path, header, None, at, chunk.nbytes))
    missing = _read_missing(name, requests)
    for i in missing:
        array[group[i].out_selection] = fill_value_or_default(group[i].spec)
    for i, offset in staged:
        if i in missing:
            continue
        chunk = group[i]
        raw = staging[offset:offset + chunk.nbytes]
        decoded = raw.view(chunk.dtype).reshape(chunk.spec.shape, order=chunk.spec.order)
        part = decoded[chunk.chunk_selection]
        if drop_axes:
            part = part.squeeze(axis=drop_axes)
        array[chunk.out_selection] = part


def _read_missing(name: str, requests: List[Tuple[Any, ...]]) -> Set[int]:
    """The fused read of `requests`; the chunks whose file does not exist (never written: their
    fill value), where every other chunk decoded."""
    try:
        kvik.nvcomp._read_decompress_at(kvik.nvcomp._codec_number(name), requests)
    except kvik.KvikError as e:
        statuses = getattr(e, "statuses", None) or []
        missing = {i for i, status in enumerate(statuses) if status == -errno.ENOENT}
        if not missing or any(status not in (0, -errno.ENOENT) for status in statuses):
            raise
        return missing
    return set()


def register() -> None:
    """Register the pipeline with zarr and select it in zarr.config, for every array opened
    after."""
    zarr.registry.register_pipeline(FusedCodecPipeline)
    zarr.config.set({"codec_pipeline.path": zarr.registry.fully_qualified_name(FusedCodecPipeline)})
