"""kvikio 26.10's behaviour for kvik.Mmap, kvik.numpy.fromfile(sep=...) and importing kvik.zarr
beside a zarr older than 3: code written for kvikio catches the same exception types."""
import importlib
import sys
import types

import numpy
import pytest

import kvik
import kvik.numpy

FILE_SIZE = 8192


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "data"
    numpy.arange(FILE_SIZE, dtype=numpy.uint8).tofile(p)
    return p


@pytest.mark.parametrize("flags", ["", "z"])
def test_mmap_unknown_flag_raises_value_error(path, flags):
    with pytest.raises(ValueError, match="Unknown file open flag"):
        kvik.Mmap(path, flags)


def test_mmap_offset_at_or_past_the_end_raises_index_error(path):
    for offset in (FILE_SIZE, 2 * FILE_SIZE):
        with pytest.raises(IndexError, match="Offset must be less than the file size"):
            kvik.Mmap(path, "r", None, offset)


def test_mmap_size_past_the_end_raises_index_error(path):
    with pytest.raises(IndexError, match="Mapped region is past the end of file"):
        kvik.Mmap(path, "r", 2 * FILE_SIZE)
    with pytest.raises(IndexError, match="Mapped region is past the end of file"):
        kvik.Mmap(path, "r", FILE_SIZE, 1)


def test_mmap_zero_size_raises_value_error(path):
    with pytest.raises(ValueError, match="Mapped region should not be zero byte"):
        kvik.Mmap(path, "r", 0)


def test_mmap_read_offset_past_the_end_of_file_raises_index_error(path):
    m = kvik.Mmap(path, "r", 1024, 512)
    with pytest.raises(IndexError, match="Offset is past the end of file"):
        m.read(bytearray(FILE_SIZE), 1024, FILE_SIZE + 1)


@pytest.mark.parametrize("size, offset", [(1024, 513), (1024, 512 - 128), (1024 + 128, 512)])
def test_mmap_read_outside_the_mapped_range_raises_index_error(path, size, offset):
    m = kvik.Mmap(path, "r", 1024, 512)
    with pytest.raises(IndexError, match="Read is out of bound"):
        m.read(bytearray(FILE_SIZE), size, offset)
    with pytest.raises(IndexError, match="Read is out of bound"):
        m.pread(bytearray(FILE_SIZE), size, offset)


def test_mmap_read_of_zero_bytes_in_the_mapped_range_returns_0(path):
    assert kvik.Mmap(path, "r", 1024, 512).read(bytearray(16), 0, 512) == 0


def test_mmap_closed_file_size_is_0(path):
    m = kvik.Mmap(path, "r", 1024, 512)
    m.close()
    assert m.closed()
    assert m.file_size() == m.nbytes() == 0
    assert m.initial_map_size() == m.initial_map_offset() == 0


def test_mmap_closed_read_and_pread_raise_runtime_error(path):
    m = kvik.Mmap(path)
    m.close()
    with pytest.raises(RuntimeError, match="Cannot read from a closed MmapHandle"):
        m.read(bytearray(FILE_SIZE))
    with pytest.raises(RuntimeError, match="Cannot read from a closed MmapHandle"):
        m.pread(bytearray(FILE_SIZE))


def test_numpy_fromfile_with_a_separator_raises_not_implemented_naming_sep(path):
    with pytest.raises(NotImplementedError, match="`sep`"):
        kvik.numpy.fromfile(path, sep=",")


def _import_kvik_zarr_beside(monkeypatch, zarr_module):
    monkeypatch.setitem(sys.modules, "zarr", zarr_module)
    monkeypatch.delitem(sys.modules, "kvik.zarr", raising=False)
    return importlib.import_module("kvik.zarr")


def test_zarr_older_than_3_raises_import_error(monkeypatch):
    fake = types.ModuleType("zarr")
    fake.__version__ = "2.18.0"
    with pytest.raises(ImportError, match=r"zarr>=3.*zarr==2\.18\.0"):
        _import_kvik_zarr_beside(monkeypatch, fake)


def test_zarr_3_whose_version_reads_2_raises_import_error(monkeypatch):
    """kvikio's own check: the installed zarr, its version patched to 2, is refused at import."""
    zarr = pytest.importorskip("zarr", minversion="3")
    monkeypatch.setattr(zarr, "__version__", "2.0.0")
    with pytest.raises(ImportError, match="zarr>=3"):
        _import_kvik_zarr_beside(monkeypatch, zarr)
