"""Whole files into GPU memory in one call."""
import os

from ._lib import CuFile


def read_file_to_device(path, device=None):
    """Read the whole file at `path` into new GPU memory: a CuPy uint8 array of the file's size.

    `device` is the CUDA device ordinal to allocate on; None means CuPy's current device. The read
    runs in parallel on kvik's thread pool, through cuFile where it serves the file. Raises
    ImportError without CuPy, OSError (FileNotFoundError, ...) when the file cannot be read.
    """
    try:
        import cupy
    except ImportError as e:
        raise ImportError(f"kvik.read_file_to_device returns a CuPy array and needs CuPy: {e}") from e
    with CuFile(os.fspath(path), "r") as f:
        size = f.nbytes()
        with cupy.cuda.Device(device):
            out = cupy.empty(size, dtype=cupy.uint8)
        nread = f.read(out)
    if nread != size:
        raise OSError(f"{os.fspath(path)!r} shrank while it was read: {nread} of {size} bytes")
    return out
