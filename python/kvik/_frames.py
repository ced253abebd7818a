"""The decoded sizes that compressed chunks state in their own bytes, for decoding without being
told the size: a zstd frame's content size, a gzip member's ISIZE, the 4-byte header of
numcodecs' LZ4, raw Snappy's leading length. Each reads a few bytes from the start or the end of
a chunk, host or device memory (a device chunk costs one small copy)."""
from __future__ import annotations

import struct
from typing import Any, List, Optional

_ZSTD_MAGIC = 0xFD2FB528
ZSTD_HEADER_MAX = 18  # magic 4, descriptor 1, window 1, dictionary id 4, content size 8


def nbytes(buf: Any) -> int:
    """The bytes of a host or device buffer."""
    iface = getattr(buf, "__cuda_array_interface__", None)
    if iface is None:
        with memoryview(buf) as view:
            return view.nbytes
    count = 1
    for extent in iface["shape"]:
        count *= extent
    return count * int(iface["typestr"][2:])


def as_bytes_device(buf: Any) -> Any:
    """A 1-d uint8 CuPy view of device memory `buf`."""
    import cupy

    array = cupy.asarray(buf)
    return array.reshape(-1).view(cupy.uint8) if array.flags.c_contiguous else \
        cupy.ascontiguousarray(array).reshape(-1).view(cupy.uint8)


def head(buf: Any, count: int) -> bytes:
    """The first `count` bytes of `buf` (fewer where it is shorter)."""
    if hasattr(buf, "__cuda_array_interface__"):
        return as_bytes_device(buf)[:count].get().tobytes()
    with memoryview(buf) as view:
        return view.cast("B")[:count].tobytes()


def tail(buf: Any, count: int) -> bytes:
    """The last `count` bytes of `buf` (fewer where it is shorter)."""
    size = nbytes(buf)
    start = max(size - count, 0)
    if hasattr(buf, "__cuda_array_interface__"):
        return as_bytes_device(buf)[start:].get().tobytes()
    with memoryview(buf) as view:
        return view.cast("B")[start:].tobytes()


def ends(bufs: List[Any], count: int, at_end: bool = False) -> List[bytes]:
    """The first (`at_end`: last) `count` bytes of each buffer. Device buffers come to the host
    in one copy for all, not one a buffer."""
    device = [i for i, b in enumerate(bufs) if hasattr(b, "__cuda_array_interface__")]
    out = [b"" if i in set(device) else (tail(b, count) if at_end else head(b, count))
           for i, b in enumerate(bufs)]
    if device:
        import cupy

        flat = [as_bytes_device(bufs[i]) for i in device]
        pieces = [f[max(f.size - count, 0):] if at_end else f[:count] for f in flat]
        joined = cupy.concatenate(pieces).get().tobytes() if pieces else b""
        start = 0
        for i, piece in zip(device, pieces):
            out[i] = joined[start:start + piece.size]
            start += piece.size
    return out


def zstd_content_size(header: bytes) -> Optional[int]:
    """The content size of the zstd frame that `header` starts (RFC 8878, 3.1.1.1), or None where
    the frame does not state it (or `header` is no zstd frame)."""
    if len(header) < 5 or struct.unpack_from("<I", header)[0] != _ZSTD_MAGIC:
        return None
    descriptor = header[4]
    single_segment = (descriptor >> 5) & 1
    size_bytes = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    if size_bytes == 0:
        return None
    at = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    if len(header) < at + size_bytes:
        return None
    size = int.from_bytes(header[at:at + size_bytes], "little")
    return size + 256 if size_bytes == 2 else size


def zstd_size(buf: Any) -> Optional[int]:
    return zstd_content_size(head(buf, ZSTD_HEADER_MAX))


def gzip_isize(trailer: bytes) -> Optional[int]:
    """ISIZE, the last 4 bytes of a gzip member: the decoded size modulo 2^32 (exact for the
    single members below 4 GiB that numcodecs and Zarr write)."""
    return struct.unpack("<I", trailer)[0] if len(trailer) == 4 else None


def gzip_size(buf: Any) -> Optional[int]:
    return gzip_isize(tail(buf, 4))


def snappy_size(buf: Any) -> Optional[int]:
    """The varint that raw Snappy starts with: the decoded size."""
    size = shift = 0
    for byte in head(buf, 5):
        size |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return size
        shift += 7
    return None


LZ4_HEADER = 4  # numcodecs' LZ4: the decoded size, 4 bytes little-endian, then a raw block


def lz4_size(header: bytes) -> Optional[int]:
    """The decoded size in numcodecs LZ4's header (the chunk's first 4 bytes)."""
    return struct.unpack("<I", header[:LZ4_HEADER])[0] if len(header) >= LZ4_HEADER else None


def lz4_header_size(buf: Any) -> Optional[int]:
    return lz4_size(head(buf, LZ4_HEADER))
