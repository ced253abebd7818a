"""kvik.Mmap: reads of a mapped file into host and device memory, and its errors."""
import numpy
import pytest

import kvik
from conftest import to_host

FILE_SIZE = (2 << 20) + 777


def test_whole_mapping(xp, path, data):
    with kvik.Mmap(path) as m:
        assert m.file_size() == m.nbytes() == m.initial_map_size() == FILE_SIZE
        assert m.initial_map_offset() == 0
        out = xp.empty(FILE_SIZE, dtype=xp.uint8)
        assert m.read(out) == FILE_SIZE
    assert numpy.array_equal(to_host(out), data)


def test_random_ranges_of_a_partial_mapping(xp, path, data, rng):
    start, length = 12345, FILE_SIZE // 2
    with kvik.Mmap(path, "r", length, start) as m:
        assert (m.initial_map_size(), m.initial_map_offset()) == (length, start)
        for _ in range(10):
            offset = int(rng.integers(start, start + length))
            size = int(rng.integers(0, start + length - offset + 1))
            out = xp.zeros(size, dtype=xp.uint8)
            assert m.pread(out, size, offset, task_size=65536).get() == size
            assert numpy.array_equal(to_host(out), data[offset : offset + size])


def test_size_defaults_to_the_rest_of_the_mapping(path, data):
    with kvik.Mmap(path) as m:
        out = numpy.empty(100, dtype=numpy.uint8)
        assert m.read(out, offset=FILE_SIZE - 100) == 100
        assert numpy.array_equal(out, data[-100:])


def test_errors(path, tmp_path):
    with pytest.raises(FileNotFoundError):
        kvik.Mmap(tmp_path / "missing")
    with pytest.raises(ValueError):
        kvik.Mmap(path, "w")
    with pytest.raises(NotImplementedError, match="map_flags"):
        kvik.Mmap(path, map_flags=1)
    m = kvik.Mmap(path, initial_map_size=4096)
    with pytest.raises(IndexError, match="out of bound"):
        m.read(bytearray(10), 10, 8192)  # outside the mapped range, as kvikio raises
    with pytest.raises(ValueError, match="larger than the buffer"):
        m.read(bytearray(10))
    with pytest.raises(TypeError, match="read-only"):
        m.read(b"0123456789", 10)
    m.close()
    assert m.closed()
    with pytest.raises(RuntimeError, match="closed MmapHandle"):
        m.read(bytearray(10), 10)
    m.close()
