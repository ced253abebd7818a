"""kvik.nvcomp: batched GPU compression and decompression by NVIDIA's nvCOMP 6.

nvCOMP is loaded at run time, on first need (kvik.h, "Compression"): from the path in the setting
``nvcomp_library`` (environment ``KVIK_NVCOMP_LIBRARY``) where set, else the soname
``libnvcomp.so.6``. Before its first use here, where that setting was left at its default, this
module looks for the ``nvidia-libnvcomp`` wheel (``nvidia-libnvcomp-cu13``, ``-cu12``) and sets
``nvcomp_library`` to the wheel's ``lib64/libnvcomp.so.6``.

A codec encodes and decodes batches: lists of chunks, each its own compressed stream in the
format's raw form (zstd frames, LZ4 raw blocks, raw Snappy, raw Deflate, gzip members). A chunk
is device memory (CuPy, or anything with ``__cuda_array_interface__``), whose outputs are CuPy
arrays, or host memory (bytes, NumPy, anything with the buffer protocol), whose outputs are
bytes; host chunks are staged through device memory, as nvCOMP works on device memory only.
Objects with ``__dlpack__`` and ``__dlpack_device__`` (PyTorch tensors, JAX arrays) are taken
too: those in device memory as CuPy views (CuPy is needed for them), those in host memory as
NumPy views. Outputs given as buffers to decode into may be any of these kinds, and are written
in place and returned as they were given.

A chunk that fails raises kvik.KvikError (the code of the first failed chunk, and a message naming
it) with ``chunk``, the index of that chunk, and ``statuses``, every chunk's code (0: done).
Without nvCOMP the calls raise KvikError with code KVIK_ENVCOMP_UNAVAILABLE, saying where kvik
looked. nvCOMP 6 validates little of what it decodes: decode only data whose integrity is known
(see kvik.h).
"""
from __future__ import annotations

import importlib.util
import numbers
import os
from typing import Any, List, Optional, Sequence, Union

from . import _lib, defaults

__all__ = [
    "ANSCodec", "BitcompCodec", "CascadedCodec", "Codec", "DeflateCodec", "GDeflateCodec",
    "GzipCodec", "LZ4Codec", "SnappyCodec", "ZstdCodec", "available", "codecs", "library_path",
    "read_decompress", "version",
]

# kvikio's former managers (kvik._nvcomp_managers: a container of kvik's own), loaded on first use.
_MANAGERS = ("ANSManager", "BitcompManager", "CascadedManager", "GdeflateManager", "LZ4Manager",
             "ManagedDecompressionManager", "SnappyManager", "cp_to_nvcomp_dtype", "nvCompManager",
             "nvcompType_t")


def __getattr__(name: str) -> Any:
    if name in _MANAGERS:
        from . import _nvcomp_managers

        return getattr(_nvcomp_managers, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_NAMES = _lib.codec_names()
_SETTING = "nvcomp_library"
_WHEEL_LIBRARY = os.path.join("lib64", "libnvcomp.so.6")
_located = False


def _wheel_library() -> Optional[str]:
    """The libnvcomp.so.6 of the nvidia-libnvcomp wheel importable here, or None."""
    try:
        spec = importlib.util.find_spec("nvidia.libnvcomp")
    except (ImportError, ValueError):
        return None
    for directory in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(directory, _WHEEL_LIBRARY)
        if os.path.isfile(path):
            return path
    return None


def _locate() -> None:
    """Point the setting at the wheel's library, once, where nobody set it (neither the
    environment nor kvik.defaults): the soname alone would miss a wheel's library, which is not
    on the loader's path."""
    global _located
    if _located:
        return
    _located = True
    if _lib.setting_source(_SETTING) == "default":
        path = _wheel_library()
        if path is not None:
            defaults.set(_SETTING, path)


def available() -> bool:
    """Whether nvCOMP 6 can be loaded (it is, if not tried yet). Needs no GPU."""
    _locate()
    try:
        _lib.nvcomp_version()
    except _lib.KvikError:
        return False
    return True


def version() -> int:
    """nvCOMP's version as nvCOMP numbers it: major * 1000 + minor * 100 + patch (6000 for 6.0.0).
    Raises KvikError (KVIK_ENVCOMP_UNAVAILABLE) without nvCOMP."""
    _locate()
    return _lib.nvcomp_version()


def library_path() -> str:
    """The file nvCOMP was loaded from. Raises as version() does."""
    _locate()
    return _lib.nvcomp_path()


def codecs() -> List[str]:
    """The names of the formats the loaded nvCOMP offers ([] without nvCOMP)."""
    _locate()
    return [name for number, name in enumerate(_NAMES) if _lib.codec_supported(number)]


def _is_device(chunk: Any) -> bool:
    return hasattr(chunk, "__cuda_array_interface__")


# DLPack's device types (dlpack.h, DLDeviceType) of memory the CPU reads: kDLCPU,
# kDLCUDAHost (pinned) and kDLCUDAManaged.
_DLPACK_HOST = (1, 3, 13)
_DLPACK_CUDA = 2


def _cupy(what: str) -> Any:
    try:
        import cupy
    except ImportError as e:
        raise ImportError(f"kvik.nvcomp {what} and needs CuPy") from e
    return cupy


def _as_buffer(obj: Any) -> Any:
    """`obj` as kvik._lib takes it: as it is where it has ``__cuda_array_interface__`` or the
    buffer protocol, else (a DLPack object: a PyTorch CPU tensor, a JAX array) a NumPy view of
    its host memory or a CuPy view of its device memory."""
    if _is_device(obj) or isinstance(obj, (bytes, bytearray, memoryview)):
        return obj
    if not hasattr(obj, "__dlpack_device__"):
        return obj  # the buffer protocol, or kvik._lib's TypeError naming what it takes
    try:
        memoryview(obj).release()
        return obj
    except TypeError:
        pass
    kind = obj.__dlpack_device__()[0]
    if kind in _DLPACK_HOST:
        import numpy

        return numpy.from_dlpack(obj)
    if kind == _DLPACK_CUDA:
        return _cupy("takes DLPack device memory as CuPy arrays").from_dlpack(obj)
    raise TypeError(f"kvik.nvcomp takes host or CUDA memory, not DLPack device type {kind}")


def _interface_nbytes(iface: dict) -> int:
    """The bytes a ``__cuda_array_interface__`` describes."""
    count = 1
    for extent in iface["shape"]:
        count *= extent
    return count * int(iface["typestr"][2:])


def _nbytes(chunk: Any) -> int:
    """The bytes of a chunk, device or host."""
    if _is_device(chunk):
        return _interface_nbytes(chunk.__cuda_array_interface__)
    with memoryview(chunk) as view:
        return view.nbytes


def _empty_like(chunk: Any, size: int) -> Any:
    """New memory of `size` bytes of the kind `chunk` is."""
    if _is_device(chunk):
        cupy = _cupy("returns device outputs as CuPy arrays")
        return cupy.empty(size, dtype=cupy.uint8)
    return bytearray(size)


def _trimmed(out: Any, size: int) -> Any:
    """The first `size` bytes of an output kvik.nvcomp allocated: a CuPy view, or bytes."""
    return bytes(memoryview(out)[:size]) if isinstance(out, bytearray) else out[:size]


class Codec:
    """A format of nvCOMP. `name` is kvik's name of it; `gpu_only` says that only nvCOMP reads and
    writes it (no standard CPU implementation)."""

    name = ""
    gpu_only = False

    def __init__(self) -> None:
        self._number = _NAMES.index(self.name)

    def __repr__(self) -> str:
        return f"kvik.nvcomp.{type(self).__name__}()"

    def supported(self) -> bool:
        """Whether the loaded nvCOMP offers this format (False without nvCOMP)."""
        _locate()
        return _lib.codec_supported(self._number)

    def max_compressed_size(self, size: int) -> int:
        """The most bytes that encoding a chunk of up to `size` bytes can give."""
        _locate()
        return _lib.codec_max_compressed_size(self._number, size)

    def encode(self, chunks: Sequence[Any]) -> List[Any]:
        """Compress each chunk; returns the compressed chunks, each a CuPy array for a device
        chunk (a view of a buffer of max_compressed_size()) and bytes for a host chunk."""
        chunks = [_as_buffer(chunk) for chunk in chunks]
        _locate()
        if not chunks:
            return []
        capacity = self.max_compressed_size(max(_nbytes(chunk) for chunk in chunks))
        outs = [_empty_like(chunk, capacity) for chunk in chunks]
        sizes = _lib.nvcomp_run(self._number, True, chunks, outs)
        return [_trimmed(out, size) for out, size in zip(outs, sizes)]

    def decode(self, chunks: Sequence[Any], out: Sequence[Union[int, Any]]) -> List[Any]:
        """Decompress each chunk. `out[i]` is chunk i's decompressed size in bytes (the output is
        allocated: a CuPy array for a device chunk, bytes for a host chunk, cut to the size
        decoded) or a buffer to decode into (device or host, its size the capacity), which is
        returned as it is."""
        out = list(out)
        allocated = [isinstance(o, numbers.Integral) for o in out]
        outs, sizes = self._decode(chunks, out, allocated)
        return [_trimmed(o, size) if new else given
                for o, given, size, new in zip(outs, out, sizes, allocated)]

    def decode_into(self, chunks: Sequence[Any], out: Sequence[Any]) -> List[int]:
        """Decompress chunk i into the buffer `out[i]` (device or host, its size the capacity);
        returns the sizes decoded, for a caller that knows what size to expect to check."""
        out = list(out)
        return self._decode(chunks, out, [False] * len(out))[1]

    def _decode(self, chunks: Sequence[Any], out: List[Any], allocated: List[bool]):
        """The outputs decode() and decode_into() wrote (`out[i]`'s own buffer, or new memory
        of `out[i]` bytes where `allocated[i]`) and the sizes decoded into them."""
        chunks = [_as_buffer(chunk) for chunk in chunks]
        if len(chunks) != len(out):
            raise ValueError(f"{len(chunks)} chunks but {len(out)} outputs")
        _locate()
        outs = [_empty_like(chunk, o) if new else _as_buffer(o)
                for chunk, o, new in zip(chunks, out, allocated)]
        return outs, _lib.nvcomp_run(self._number, False, chunks, outs)


class ZstdCodec(Codec):
    """zstd frames."""
    name = "zstd"


class LZ4Codec(Codec):
    """LZ4 raw blocks (no frame)."""
    name = "lz4"


class SnappyCodec(Codec):
    """Raw Snappy (no framing format)."""
    name = "snappy"


class DeflateCodec(Codec):
    """Raw Deflate (RFC 1951): zlib's windowBits -15."""
    name = "deflate"


class GzipCodec(Codec):
    """gzip members (RFC 1952). Compressing gzip needs a GPU of compute capability 9.0 or later
    and may be refused."""
    name = "gzip"


class GDeflateCodec(Codec):
    """GDeflate: GPU-only."""
    name = "gdeflate"
    gpu_only = True


class CascadedCodec(Codec):
    """Cascaded: GPU-only."""
    name = "cascaded"
    gpu_only = True


class BitcompCodec(Codec):
    """Bitcomp: GPU-only."""
    name = "bitcomp"
    gpu_only = True


class ANSCodec(Codec):
    """ANS: GPU-only."""
    name = "ans"
    gpu_only = True


def read_decompress(codec: Union[str, Codec], chunks: Sequence[Any], out: Any = None) -> Any:
    """Read compressed chunks from files and decode them on the GPU: kvik's fused read
    (kvik_file_read_decompress in kvik.h). `codec` is a Codec or a codec's name ("zstd", ...).

    Each chunk is ``(file, file_offset, compressed_size, out)``:

    - ``file``: a kvik.CuFile open for reading, or a path (str, bytes or os.PathLike), which kvik
      opens for reading during the call, with the other paths at once on its thread pool, and
      closes: for thousands of chunk files, this costs far less than a CuFile each;
    - ``file_offset``, ``compressed_size``: where the chunk's compressed bytes lie in it
      (``compressed_size`` None: the rest of the file);
    - ``out``: contiguous device memory (``__cuda_array_interface__``, a CuPy array) whose nbytes
      is exactly the size the chunk decodes to.

    With ``out=`` (contiguous device memory), each chunk's last element is instead the number of
    bytes it decodes to, and the chunks decode one after the other into ``out``, whose nbytes
    must be their sum (each chunk's place aligned as the codec requires): no array object a
    chunk. Returns ``out`` then, else the chunks' outputs.

    The reads of the next chunks overlap the decoding of the ones read, in batches; the GIL is
    released meanwhile. A chunk that fails raises KvikError with ``chunk`` and ``statuses``, as
    decode() does (a missing file: kvik.FileNotFound, a FileNotFoundError; a file that ends
    before the chunk, or at its offset for None: code ENODATA); the other chunks are decoded all
    the same. kvik checks each chunk's framing before nvCOMP sees it (zstd, LZ4, Snappy, gzip):
    a broken one fails with EBADMSG, one that states or decodes to another size than its
    output's with KVIK_EDECODED_SIZE. Corruption that keeps the framing needs a checksum to be
    found (kvik.h, "Compression")."""
    number = _codec_number(codec)
    if out is not None:
        iface = _device_interface(out, "out")
        at = base = iface["data"][0]
        items = []
        for file, file_offset, compressed_size, nbytes in chunks:
            items.append((file, file_offset, compressed_size, at, nbytes))
            at += nbytes
        if at - base != _interface_nbytes(iface):
            raise ValueError(f"the chunks decode to {at - base} bytes, and out has "
                             f"{_interface_nbytes(iface)}")
        _read_decompress_at(number, items)
        return out
    items, outs = [], []
    for i, (file, file_offset, compressed_size, dst) in enumerate(chunks):
        iface = _device_interface(dst, "out", i)
        items.append((file, file_offset, compressed_size, iface["data"][0],
                      _interface_nbytes(iface)))
        outs.append(dst)
    _read_decompress_at(number, items)
    return outs


def _codec_number(codec: Union[str, Codec]) -> int:
    if not isinstance(codec, str):
        return codec._number
    if codec.lower() not in _NAMES:
        raise ValueError(f"unknown codec {codec!r}: one of {', '.join(_NAMES)}")
    return _NAMES.index(codec.lower())


def _device_interface(buffer: Any, what: str, chunk: Optional[int] = None) -> dict:
    """`buffer`'s ``__cuda_array_interface__``, read once (CuPy builds it anew on every access,
    a few microseconds each), which must describe contiguous memory; `what` (of `chunk`) names
    it in errors."""
    iface = getattr(buffer, "__cuda_array_interface__", None)
    if iface is not None and iface.get("strides") is None:
        return iface
    where = what if chunk is None else f"chunk {chunk}: {what}"
    if iface is None:
        raise TypeError(f"{where} must be device memory (__cuda_array_interface__)")
    raise ValueError(f"{where} must be contiguous")


def _read_decompress_at(number: int, items: List[Any]) -> None:
    """The fused read of chunks ``(file, file_offset, compressed_size or None, device address,
    nbytes)``: read_decompress() without the array objects, for kvik.zarr_pipeline."""
    _locate()
    _lib.read_decompress(number, items)
