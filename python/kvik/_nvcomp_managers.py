"""kvikio's former nvCOMP managers (``kvikio.nvcomp.LZ4Manager`` and the others), on kvik.nvcomp.

A manager compresses one buffer: it cuts it into chunks of `chunk_size` bytes, compresses them in
one batched call, and writes them into a container of kvik's own, which `decompress` (and
`ManagedDecompressionManager`, which finds the format in it) reads back. The container is NOT
nvCOMP's high-level format, which kvikio's managers wrote and which nvCOMP 6 offers no C API for:
buffers compressed by kvikio's managers do not decompress here, nor the other way round. Options
of nvCOMP's own (`data_type`, `algo`, `bitcomp_algo`, Cascaded's `num_RLEs` ...) are kept as
attributes but not passed on: kvik runs each format with nvCOMP's default options.

The container, little-endian: b"KVNC", a version byte (1), the kvik.nvcomp codec number, 2 bytes
0, the chunk size, the decompressed size and the number of chunks (8 bytes each), each chunk's
compressed size (8 bytes each), then the chunks, each starting at a multiple of 16 bytes.
"""
from __future__ import annotations

import enum
import struct
from typing import Any, Dict

import numpy

from . import _frames, nvcomp

_MAGIC = b"KVNC"
_VERSION = 1
_HEAD = struct.Struct("<4sBBHQQQ")
_ALIGN = 16
_NAMES = {cls.name: cls for cls in (nvcomp.ZstdCodec, nvcomp.LZ4Codec, nvcomp.SnappyCodec,
                                     nvcomp.DeflateCodec, nvcomp.GzipCodec, nvcomp.GDeflateCodec,
                                     nvcomp.CascadedCodec, nvcomp.BitcompCodec, nvcomp.ANSCodec)}


class nvcompType_t(enum.IntEnum):
    """nvCOMP's data types (nvcompType_t), as kvikio's pyNvcompType_t named them."""

    pyNVCOMP_TYPE_CHAR = 0
    pyNVCOMP_TYPE_UCHAR = 1
    pyNVCOMP_TYPE_SHORT = 2
    pyNVCOMP_TYPE_USHORT = 3
    pyNVCOMP_TYPE_INT = 4
    pyNVCOMP_TYPE_UINT = 5
    pyNVCOMP_TYPE_LONGLONG = 6
    pyNVCOMP_TYPE_ULONGLONG = 7
    pyNVCOMP_TYPE_BITS = 0xFF


_DTYPES = {numpy.dtype(n): t for n, t in zip(
    ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"), nvcompType_t)}


def cp_to_nvcomp_dtype(in_type: Any) -> nvcompType_t:
    """The nvCOMP data type of a NumPy or CuPy integer dtype (KeyError for others)."""
    return _DTYPES[numpy.dtype(in_type)]


def _round(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


def _zeros(device: bool, size: int) -> Any:
    if device:
        return nvcomp._cupy("returns device outputs as CuPy arrays").zeros(size, dtype="uint8")
    return numpy.zeros(size, dtype="uint8")


def _put(dst: Any, offset: int, src: Any) -> None:
    """Copy bytes `src` (host bytes, or a CuPy array) into `dst` at `offset`."""
    size = _frames.nbytes(src)
    if isinstance(dst, numpy.ndarray):
        dst[offset:offset + size] = numpy.frombuffer(src, dtype="uint8")
    elif isinstance(src, (bytes, bytearray)):
        dst[offset:offset + size].set(numpy.frombuffer(src, dtype="uint8"))
    else:
        dst[offset:offset + size] = src


def _read_header(data: Any) -> Dict[str, Any]:
    head = _frames.head(data, _HEAD.size)
    if len(head) < _HEAD.size:
        raise ValueError("not a buffer that a kvik nvCOMP manager compressed (too short)")
    magic, version, codec, _, chunk_size, size, count = _HEAD.unpack(head)
    if magic != _MAGIC or version != _VERSION or codec >= len(nvcomp._NAMES):
        raise ValueError("not a buffer that a kvik nvCOMP manager compressed (its header: "
                         f"{head[:8]!r})")
    table = _frames.head(data, _HEAD.size + 8 * count)[_HEAD.size:]
    if len(table) < 8 * count:
        raise ValueError("a kvik nvCOMP manager's buffer cut short (its chunk table)")
    return {"codec": nvcomp._NAMES[codec], "chunk_size": chunk_size, "size": size,
            "sizes": list(struct.unpack(f"<{count}Q", table))}


class nvCompManager:
    """The base of the managers: compress() and decompress() of one buffer (CuPy in, CuPy out;
    host memory in, NumPy out), and kvikio's configure_* queries."""

    _codec: nvcomp.Codec
    chunk_size: int = 1 << 16
    data_type = nvcompType_t.pyNVCOMP_TYPE_UCHAR
    device_id: int = 0

    def __init__(self, kwargs: Dict[str, Any]) -> None:
        if kwargs.get("stream") is not None:
            raise NotImplementedError("stream argument not yet supported: Use the default argument")
        self.input_type = numpy.dtype("int8")
        for key in ("data_type", "type"):
            if kwargs.get(key) is not None and not isinstance(kwargs[key], nvcompType_t):
                self.input_type = numpy.dtype(kwargs[key])
                kwargs[key] = cp_to_nvcomp_dtype(kwargs[key])
        for key, value in kwargs.items():
            setattr(self, key, value)
        if self.chunk_size <= 0 or self.chunk_size % _ALIGN:
            raise ValueError(f"chunk_size must be a positive multiple of {_ALIGN}, not "
                             f"{self.chunk_size}")
        self.config: Dict[str, int] = {}
        self.decompression_config: Dict[str, int] = {}

    def configure_compression(self, data_size: int) -> Dict[str, int]:
        """{"uncompressed_buffer_size", "max_compressed_buffer_size", "num_chunks"} of
        compressing `data_size` bytes."""
        count = -(-data_size // self.chunk_size)
        bound = _round(self._codec.max_compressed_size(min(self.chunk_size, max(data_size, 1))))
        return {"uncompressed_buffer_size": data_size, "num_chunks": count,
                "max_compressed_buffer_size": _round(_HEAD.size + 8 * count) + count * bound}

    def configure_decompression_with_compressed_buffer(self, data: Any) -> Dict[str, int]:
        """{"decomp_data_size", "num_chunks"} of a compressed buffer."""
        header = _read_header(data)
        return {"decomp_data_size": header["size"], "num_chunks": len(header["sizes"])}

    def get_compressed_output_size(self, comp_buffer: Any) -> int:
        """The bytes of the compressed data at the start of `comp_buffer`."""
        header = _read_header(comp_buffer)
        end = _round(_HEAD.size + 8 * len(header["sizes"]))
        for size in header["sizes"][:-1]:
            end += _round(size)
        return end + (header["sizes"][-1] if header["sizes"] else 0)

    def compress(self, data: Any) -> Any:
        """Compress `data` (all of its bytes) into a new buffer: a CuPy array for device
        memory, NumPy for host memory."""
        data = nvcomp._as_buffer(data)
        device = nvcomp._is_device(data)
        flat = _frames.as_bytes_device(data) if device else memoryview(data).cast("B")
        size = _frames.nbytes(flat)
        self.config = self.configure_compression(size)
        step = self.chunk_size
        encoded = self._codec.encode([flat[at:at + step] for at in range(0, size, step)])
        sizes = [_frames.nbytes(e) for e in encoded]
        head = _HEAD.pack(_MAGIC, _VERSION, self._codec._number, 0, step, size, len(sizes))
        head += struct.pack(f"<{len(sizes)}Q", *sizes)
        offset = _round(len(head))
        total = offset + sum(_round(s) for s in sizes[:-1]) + (sizes[-1] if sizes else 0)
        out = _zeros(device, total)
        _put(out, 0, head + bytes(offset - len(head)))
        for chunk, csize in zip(encoded, sizes):
            _put(out, offset, chunk if device else bytes(chunk))
            offset += _round(csize)
        return out

    def decompress(self, data: Any) -> Any:
        """Decompress a buffer compress() wrote; the result is viewed as the manager's data type
        (`data_type`, int8 by default, as in kvikio)."""
        data = nvcomp._as_buffer(data)
        device = nvcomp._is_device(data)
        header = _read_header(data)
        if nvcomp._NAMES.index(header["codec"]) != self._codec._number:
            raise ValueError(f"the buffer holds {header['codec']}, not {self._codec.name}")
        self.decompression_config = {"decomp_data_size": header["size"],
                                     "num_chunks": len(header["sizes"])}
        flat = _frames.as_bytes_device(data) if device else memoryview(data).cast("B")
        offset, chunks = _round(_HEAD.size + 8 * len(header["sizes"])), []
        for csize in header["sizes"]:
            chunks.append(flat[offset:offset + csize])
            offset += _round(csize)
        size, step = header["size"], header["chunk_size"]
        out = _zeros(device, size)
        outs = [out[at:at + step] for at in range(0, size, step)]
        got = self._codec.decode_into(chunks, outs)
        if got != [_frames.nbytes(o) for o in outs]:
            raise ValueError(f"the chunks decoded to {got} bytes, not their chunks' sizes")
        return out.view(self.input_type) if size % self.input_type.itemsize == 0 else out


class ANSManager(nvCompManager):
    """ANS (GPU-only)."""

    def __init__(self, **kwargs: Any) -> None:
        self._codec = nvcomp.ANSCodec()
        super().__init__(kwargs)


class BitcompManager(nvCompManager):
    """Bitcomp (GPU-only); `data_type` and `bitcomp_algo` are kept, nvCOMP's defaults used."""

    bitcomp_algo: int = 0

    def __init__(self, **kwargs: Any) -> None:
        self._codec = nvcomp.BitcompCodec()
        super().__init__(kwargs)


class CascadedManager(nvCompManager):
    """Cascaded (GPU-only); `type`, `num_RLEs`, `num_deltas`, `use_bp` are kept, nvCOMP's
    defaults used."""

    num_RLEs: int = 2
    num_deltas: int = 1
    use_bp: bool = True

    def __init__(self, **kwargs: Any) -> None:
        self._codec = nvcomp.CascadedCodec()
        super().__init__(kwargs)
        self.options = {"chunk_size": self.chunk_size, "type": getattr(self, "type", None),
                        "num_RLEs": self.num_RLEs, "num_deltas": self.num_deltas,
                        "use_bp": self.use_bp}


class GdeflateManager(nvCompManager):
    """GDeflate (GPU-only); `algo` is kept, nvCOMP's default used."""

    algo: int = 0

    def __init__(self, **kwargs: Any) -> None:
        self._codec = nvcomp.GDeflateCodec()
        super().__init__(kwargs)


class LZ4Manager(nvCompManager):
    """LZ4 (each chunk a raw LZ4 block)."""

    def __init__(self, **kwargs: Any) -> None:
        self._codec = nvcomp.LZ4Codec()
        super().__init__(kwargs)


class SnappyManager(nvCompManager):
    """Snappy (each chunk raw Snappy)."""

    def __init__(self, **kwargs: Any) -> None:
        self._codec = nvcomp.SnappyCodec()
        super().__init__(kwargs)


class ManagedDecompressionManager(nvCompManager):
    """The manager of the format a compressed buffer of kvik's container holds."""

    def __init__(self, compressed_buffer: Any) -> None:
        header = _read_header(nvcomp._as_buffer(compressed_buffer))
        self._codec = _NAMES[header["codec"]]()
        super().__init__({"chunk_size": header["chunk_size"]})
