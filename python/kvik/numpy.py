"""kvikio.numpy: numpy.fromfile and ndarray.tofile through kvik, into and out of NumPy or CuPy arrays.

    a = kvik.numpy.fromfile("data.bin", dtype="f4", like=cupy.empty(()))   # a CuPy array

Only binary files (``sep=""``) are supported, as in kvikio.
"""
import os
from typing import Protocol, runtime_checkable

import numpy

from ._lib import CuFile

__all__ = ["FileLike", "LikeWrapper", "fromfile", "tofile"]


@runtime_checkable
class FileLike(Protocol):
    """An open file of the operating system: it has ``fileno()`` and ``name``, as io's files do.
    ``isinstance(f, FileLike)`` tells whether fromfile and tofile take `f` by its name."""

    def fileno(self) -> int: ...

    @property
    def name(self) -> str: ...


def _path(file):
    """The path of `file`: a path, or an open file (FileLike: its ``name``)."""
    if isinstance(file, FileLike):
        return os.fspath(file.name)
    return os.fspath(file)


def _binary_only(sep):
    if sep != "":
        raise NotImplementedError(
            f"Non-default value of the `sep` argument is not supported (sep={sep!r}): kvik.numpy "
            "reads and writes binary files only (sep=''), not text with a separator"
        )


def fromfile(file, dtype=float, count=-1, sep="", offset=0, *, like=None):
    """An array of the items in a binary file, read with kvik.

    Parameters
    ----------
    file : str, os.PathLike or an open file object
        The file; an open file object is reopened by its name.
    dtype : data-type
        The type of the items, as stored in the file.
    count : int
        How many items to read; -1 (the default) reads to the end of the file. Like NumPy, fewer
        are read, silently, where the file ends first; another negative count raises ValueError
        ("negative dimensions are not allowed"), as in NumPy and kvikio.
    sep : str
        Must be "" (binary); any other value raises NotImplementedError.
    offset : int
        Where the items start: a byte offset from the start of the file.
    like : array_like, optional
        Make the result the same kind of array as this one, e.g. a CuPy array, which the file is
        read straight into (through cuFile where available).
    """
    _binary_only(sep)
    if offset < 0:
        raise ValueError(f"offset must not be negative (got {offset})")
    path = _path(file)
    itemsize = numpy.dtype(dtype).itemsize
    if itemsize == 0:
        raise ValueError(f"cannot read items of {numpy.dtype(dtype)}, which have no size")
    available = max(os.path.getsize(path) - offset, 0) // itemsize
    count = available if count == -1 else min(count, available)
    out = numpy.empty(count, dtype=dtype, like=like)
    with CuFile(path, "r") as f:
        nread = f.read(out, file_offset=offset)
    if nread != out.nbytes:
        raise OSError(f"{path!r} shrank while it was read: {nread} of {out.nbytes} bytes")
    return out


def tofile(ary, file, sep="", format="%s"):
    """Write the items of `ary` (NumPy, CuPy or anything numpy.asarray takes) to a binary file, in
    C order, as ndarray.tofile does. The file is created or truncated. `sep` must be "" (binary);
    `format` applies to text output only and is ignored."""
    _binary_only(sep)
    # like=ary keeps a CuPy array on its device (CuPy makes the copy, if one is needed).
    data = numpy.ascontiguousarray(ary, like=ary if hasattr(ary, "__array_function__") else None)
    with CuFile(_path(file), "w") as f:
        f.write(data)


class LikeWrapper:
    """Makes ``numpy.fromfile(..., like=LikeWrapper(arr))`` read with kvik into arrays like `arr`.

    NumPy hands calls with ``like=`` to the ``__array_function__`` of that object: this one sends
    numpy.fromfile to :func:`fromfile` and every other function on to NumPy's own.
    """

    def __init__(self, like):
        self._like = like

    def __array_function__(self, func, types, args, kwargs):
        if func is numpy.fromfile:
            return fromfile(*args, like=self._like, **kwargs)
        return func(*args, **kwargs)
