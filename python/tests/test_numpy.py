"""kvik.numpy: fromfile/tofile against NumPy's own, byte for byte, into NumPy and CuPy arrays."""
import numpy
import pytest
from conftest import to_host

import kvik.numpy as kn


@pytest.fixture
def data_file(tmp_path, rng):
    """A file of 1 MiB + 13 random bytes, and the bytes."""
    data = rng.integers(0, 256, (1 << 20) + 13, dtype=numpy.uint8)
    path = tmp_path / "data.bin"
    data.tofile(path)
    return path, data


@pytest.mark.parametrize("dtype", ["u1", "<i4", ">f8", "c8", "i2"])
def test_fromfile_whole(xp, data_file, dtype):
    if xp is not numpy and not numpy.dtype(dtype).isnative:
        pytest.skip("CuPy has no arrays of non-native byte order")
    path, _ = data_file
    got = kn.fromfile(path, dtype=dtype, like=xp.empty(()))
    assert isinstance(got, xp.ndarray)
    assert got.dtype == numpy.dtype(dtype)
    # numpy.fromfile reads whole items only, as kvik does.
    assert to_host(got).tobytes() == numpy.fromfile(path, dtype=dtype).tobytes()


def test_fromfile_default_dtype_is_float(data_file):
    path, _ = data_file
    got = kn.fromfile(str(path))
    assert got.dtype == numpy.float64
    assert got.tobytes() == numpy.fromfile(path).tobytes()


def test_fromfile_random_ranges(xp, data_file, rng):
    path, data = data_file
    for _ in range(20):
        offset = int(rng.integers(0, data.size + 1))
        count = int(rng.integers(-1, data.size - offset + 1))
        got = to_host(kn.fromfile(path, dtype="u1", count=count, offset=offset, like=xp.empty(())))
        expected = data[offset:] if count == -1 else data[offset:offset + count]
        assert got.tobytes() == expected.tobytes(), (offset, count)
        assert got.tobytes() == numpy.fromfile(path, dtype="u1", count=count, offset=offset).tobytes()


def test_fromfile_count_past_the_end(data_file):
    path, data = data_file
    got = kn.fromfile(path, dtype="u2", count=10**9, offset=3)
    assert got.tobytes() == data[3:3 + (data.size - 3) // 2 * 2].tobytes()
    assert kn.fromfile(path, dtype="u1", offset=data.size + 100).size == 0


def test_fromfile_file_object(data_file):
    path, data = data_file
    with open(path, "rb") as f:
        assert kn.fromfile(f, dtype="u1", count=100).tobytes() == data[:100].tobytes()


def test_fromfile_empty_file(tmp_path):
    (tmp_path / "empty").touch()
    assert kn.fromfile(tmp_path / "empty", dtype="f4").shape == (0,)


def test_fromfile_errors(tmp_path, data_file):
    path, _ = data_file
    with pytest.raises(NotImplementedError, match="binary files only"):
        kn.fromfile(path, sep=",")
    with pytest.raises(ValueError, match="offset must not be negative"):
        kn.fromfile(path, offset=-1)
    with pytest.raises(FileNotFoundError):
        kn.fromfile(tmp_path / "missing")
    with pytest.raises(ValueError, match="no size"):
        kn.fromfile(path, dtype="V0")
    with pytest.raises(TypeError):
        kn.fromfile(12.5)


@pytest.mark.parametrize("order", ["C", "F"])
def test_tofile(xp, tmp_path, rng, order):
    host = numpy.asarray(rng.standard_normal((123, 77)), order=order)
    path = tmp_path / "out.bin"
    kn.tofile(xp.asarray(host, order=order), path)
    assert path.read_bytes() == host.tobytes(order="C")


def test_tofile_strided(xp, tmp_path, rng):
    host = rng.integers(0, 1 << 30, 1000, dtype=numpy.int32)
    path = tmp_path / "out.bin"
    kn.tofile(xp.asarray(host)[::3], path)
    assert path.read_bytes() == host[::3].tobytes()


def test_tofile_truncates_and_roundtrips(xp, tmp_path, rng):
    path = tmp_path / "out.bin"
    path.write_bytes(b"x" * 100000)
    host = rng.integers(0, 256, 4097, dtype=numpy.uint8)
    kn.tofile(xp.asarray(host), str(path))
    assert path.read_bytes() == host.tobytes()
    assert to_host(kn.fromfile(path, dtype="u1", like=xp.empty(()))).tobytes() == host.tobytes()


def test_tofile_other_inputs(tmp_path):
    path = tmp_path / "out.bin"
    kn.tofile([1.0, 2.0, 3.0], path)
    assert path.read_bytes() == numpy.array([1.0, 2.0, 3.0]).tobytes()
    kn.tofile(numpy.float32(7), path)
    assert path.read_bytes() == numpy.float32(7).tobytes()
    with open(path, "wb") as f:
        kn.tofile(numpy.arange(5, dtype="u1"), f)
    assert path.read_bytes() == bytes(range(5))


def test_tofile_text_is_not_supported(tmp_path):
    with pytest.raises(NotImplementedError, match="binary files only"):
        kn.tofile(numpy.arange(3), tmp_path / "out.txt", sep=" ")
    assert not (tmp_path / "out.txt").exists()


def test_like_wrapper(xp, data_file, monkeypatch):
    """numpy.fromfile(..., like=LikeWrapper(a)) is kvik's fromfile; other functions stay NumPy's."""
    path, _ = data_file
    calls = []
    real = kn.fromfile

    def spy(*args, **kwargs):
        calls.append(kwargs.get("like"))
        return real(*args, **kwargs)

    monkeypatch.setattr(kn, "fromfile", spy)
    like = xp.empty(())
    got = numpy.fromfile(path, dtype="i4", count=1000, offset=4, like=kn.LikeWrapper(like))
    assert calls == [like]
    assert isinstance(got, xp.ndarray)
    assert to_host(got).tobytes() == numpy.fromfile(path, dtype="i4", count=1000, offset=4).tobytes()
    assert type(numpy.zeros(3, like=kn.LikeWrapper(like))) is numpy.ndarray
