"""A Zarr v3 store that moves chunk bytes with kvik: `kvik.zarr.GDSStore`.

GDSStore is a `zarr.storage.LocalStore` (a directory on a local file system, one file a key)
whose reads and writes go through `kvik.CuFile` instead of Python's file objects. What a read
returns follows the buffer prototype that Zarr asks for:

* with Zarr's default (host) prototype, chunks are read into NumPy memory;
* with Zarr's GPU prototype active (``zarr.config.enable_gpu()``, so that ``prototype.buffer`` is
  ``zarr.core.buffer.gpu.Buffer``), chunks are read straight into CuPy device memory, through
  GPUDirect Storage where the system has it and through kvik's bounce buffers where not.

Writes take host and device buffers alike, so a GPU array can be stored without a copy through
Python bytes. Everything else (listing, deleting, opening, equality, pickling) is LocalStore's,
so a GDSStore travels to dask.distributed workers like any store: what is pickled is its root
and its read-only flag, and the copy opens (checks its root) again where it is unpickled.

    import zarr
    from kvik.zarr import GDSStore

    z = zarr.open_array(GDSStore("/data/a.zarr"), mode="r")
    host = z[:]                      # NumPy
    with zarr.config.enable_gpu():
        device = z[:]                # CuPy, read from the file into GPU memory

Needs zarr 3 (the Zarr v3 store API). This mirrors kvikio's ``kvikio.zarr.GDSStore``.
"""
from __future__ import annotations

import asyncio
import os
import stat
import uuid
from pathlib import Path

import numpy

try:
    import zarr
except ImportError as e:
    raise ImportError(f"kvik.zarr needs zarr>=3 ({e})") from e


def _major(version: str) -> int:
    """The major number of a version string such as "3.1.2" or "2.18.0"; 0 where unreadable."""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


# The oldest Zarr the store works with. kvikio's zarr 2 module named it, with `supported`, and
# kvikio's benchmark scripts still ask for both; since 3 is checked at import, a kvik.zarr that
# imports at all is supported.
MINIMUM_ZARR_VERSION = "3.0.0"

# Checked by version, as kvikio does, and not only by what imports: zarr 2 installed, or a zarr
# whose version says 2, is refused at import rather than failing later in a store call.
_zarr_version = getattr(zarr, "__version__", "")
if _major(_zarr_version) < _major(MINIMUM_ZARR_VERSION):
    raise ImportError(f"kvik.zarr needs zarr>=3, but zarr=={_zarr_version or '?'} is installed")

supported = True

try:
    import zarr.storage
    from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
    from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
    from zarr.core.buffer import gpu as _zarr_gpu
except ImportError as e:  # a zarr 3 that lacks a module the store needs
    raise ImportError(f"kvik.zarr needs zarr>=3 ({e})") from e

import kvik

__all__ = ["GDSStore"]


# ---- byte ranges --------------------------------------------------------------------------


def _span(byte_range: ByteRequest | None, size: int) -> tuple[int, int]:
    """The [start, stop) byte span of a file of `size` bytes that `byte_range` asks for.

    Like slicing bytes, a span that reaches past the end of the file is cut at the end (so it
    may be empty); it never raises for that."""
    if byte_range is None:
        start, stop = 0, size
    elif isinstance(byte_range, RangeByteRequest):
        start, stop = byte_range.start, byte_range.end
    elif isinstance(byte_range, OffsetByteRequest):
        start, stop = byte_range.offset, size
    elif isinstance(byte_range, SuffixByteRequest):
        start, stop = size - byte_range.suffix, size
    else:
        raise TypeError(f"Unexpected byte_range, got {byte_range}.")
    start = min(max(start, 0), size)
    return start, min(max(stop, start), size)


# ---- buffers ------------------------------------------------------------------------------


def _wants_device(prototype: BufferPrototype) -> bool:
    """Whether `prototype` holds its bytes in GPU memory (Zarr's GPU buffer, or a subclass)."""
    return issubclass(prototype.buffer, _zarr_gpu.Buffer)


def _empty(prototype: BufferPrototype, nbytes: int):
    """An uninitialised 1-d uint8 array of `nbytes` in the memory that `prototype` uses: CuPy for
    the GPU prototype, NumPy otherwise."""
    if _wants_device(prototype):
        import cupy  # zarr's GPU buffer cannot exist without it

        return cupy.empty(nbytes, dtype=numpy.uint8)
    return numpy.empty(nbytes, dtype=numpy.uint8)


# ---- blocking file IO, run in worker threads ----------------------------------------------


def _read(path: Path, prototype: BufferPrototype, byte_range: ByteRequest | None) -> Buffer:
    """Read the bytes of `path` that `byte_range` names into a new buffer of `prototype`.

    Raises FileNotFoundError, NotADirectoryError or IsADirectoryError where there is no file."""
    with kvik.CuFile(path, "r") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise IsADirectoryError(f"not a regular file: {path}")
        start, stop = _span(byte_range, f.nbytes())
        out = _empty(prototype, stop - start)
        if stop > start:
            got = f.read(out, size=stop - start, file_offset=start)
            if got != stop - start:  # the file shrank between nbytes() and read()
                raise OSError(f"short read from {path}: {got} of {stop - start} bytes")
    return prototype.buffer.from_array_like(out)


def _write(path: Path, value: Buffer, exclusive: bool = False) -> int:
    """Write all of `value` to `path`, replacing what was there, and return the bytes written.

    Like LocalStore, the bytes go to a temporary file beside `path` first, which then takes its
    place in one step, so that readers never see half a chunk. With `exclusive`, a `path` that
    exists already raises FileExistsError and is left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = value.as_array_like()  # NumPy for host buffers, CuPy for device ones
    nbytes = len(value)
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    try:
        with kvik.CuFile(tmp, "w") as f:
            if nbytes:
                written = f.write(data, size=nbytes)
                if written != nbytes:
                    raise OSError(f"short write to {tmp}: {written} of {nbytes} bytes")
        if exclusive:
            os.link(tmp, path)  # raises FileExistsError rather than replacing
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return nbytes


_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)


def _read_or_none(path: Path, prototype: BufferPrototype | None, byte_range: ByteRequest | None) -> Buffer | None:
    """_read, with Zarr's default prototype for None, and None for a key without a file."""
    try:
        return _read(path, prototype or default_buffer_prototype(), byte_range)
    except _MISSING:
        return None


class GDSStore(zarr.storage.LocalStore):
    """A Zarr v3 store for a local directory, read and written through `kvik.CuFile`.

    Parameters
    ----------
    root : str or Path
        The directory that holds the store.
    read_only : bool
        Whether the store refuses writes.

    Reads fill buffers of the prototype Zarr passes (host NumPy memory by default, CuPy device
    memory under ``zarr.config.enable_gpu()``); a key without a file reads as None. Blocking
    kvik calls run in worker threads (``asyncio.to_thread``) with the GIL released, so many
    chunks are in flight at once.
    """

    def __repr__(self) -> str:
        return f"{type(self).__name__}('{self}')"

    def __setstate__(self, state: dict) -> None:
        # An unpickled store (on a Dask worker, say) opens again on first use, so that its root is
        # checked where it landed: read-only, a root that is not there raises FileNotFoundError
        # rather than reading every chunk as missing.
        self.__dict__.update(state)
        self._is_open = False

    # -- reads

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        # docstring inherited
        await self._ensure_open()  # safe when concurrent gets open it lazily (zarr 3.4)
        assert isinstance(key, str)
        return await asyncio.to_thread(_read_or_none, self.root / key, prototype, byte_range)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges,
    ) -> list[Buffer | None]:
        # docstring inherited
        return list(
            await asyncio.gather(*(self.get(key, prototype, rng) for key, rng in key_ranges))
        )

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        # docstring inherited
        self._ensure_open_sync()
        assert isinstance(key, str)
        return _read_or_none(self.root / key, prototype, byte_range)

    # -- writes

    async def set(self, key: str, value: Buffer) -> None:
        # docstring inherited
        await self._set(key, value)

    async def _set(self, key: str, value: Buffer, exclusive: bool = False) -> None:
        await self._ensure_open()
        self._check_set(key, value)
        await asyncio.to_thread(_write, self.root / key, value, exclusive)

    def set_sync(self, key: str, value: Buffer) -> None:
        # docstring inherited
        self._ensure_open_sync()
        self._check_set(key, value)
        _write(self.root / key, value)

    def _check_set(self, key: str, value: Buffer) -> None:
        self._check_writable()
        assert isinstance(key, str)
        if not isinstance(value, Buffer):
            raise TypeError(
                f"{type(self).__name__}.set(): `value` must be a Buffer instance. "
                f"Got an instance of {type(value)} instead."
            )


# The GPU codecs for zarr's zstd and gzip and numcodecs' lz4 (kvik.zarr_codecs), and the codec
# pipeline that reads a GDSStore's compressed chunks into decoded GPU memory in one call
# (kvik.zarr_pipeline), selected in zarr.config from here on: GPU chunks decode on nvCOMP, host
# chunks as before.
from . import zarr_codecs as _zarr_codecs  # noqa: E402
from . import zarr_pipeline as _zarr_pipeline  # noqa: E402

_zarr_codecs.register()
_zarr_pipeline.register()
