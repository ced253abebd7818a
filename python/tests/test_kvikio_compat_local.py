"""kvikio 26.10's behaviour for local files and buffers, as kvikio code sees it through kvik.

Each test states one behaviour that kvikio's own tests rely on (issue 26):
- bounce_buffer_free() frees the idle bounce buffers and returns their bytes, then 0;
- the bounce buffers follow bounce_buffer_size: after a change, the old size's are freed;
- kvik.numpy.fromfile refuses a negative count other than -1, as NumPy does;
- messages carry kvikio's words, which kvikio code matches: "Unable to open file" (CuFile, Mmap,
  get_page_cache_info), "Operation not permitted" (IO that the handle's mode forbids), "Non-CUDA
  buffers not supported" (raw IO of host memory);
- memory_register, memory_deregister, stream_register and stream_deregister take kvikio's
  parameter names as keywords;
- get_page_cache_info takes kvikio's offset and length.
"""
import errno
import os

import numpy
import pytest
from conftest import CUPY_MISSING, cupy

import kvik
import kvik.buffer
import kvik.cufile
import kvik.numpy
import kvik.stream

needs_cupy = pytest.mark.skipif(cupy is None, reason=str(CUPY_MISSING))


@pytest.fixture
def direct_dir(tmp_path):
    """tmp_path, where its file system takes O_DIRECT (tmpfs does not)."""
    probe = tmp_path / "probe"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644))
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        pytest.skip("the file system of tmp_path refuses O_DIRECT")
    return tmp_path


def write_unaligned(path, nbytes):
    """Write `nbytes` from a buffer one byte past an aligned one: O_DIRECT takes them through an
    aligned (pageable) bounce buffer."""
    data = numpy.empty(nbytes + 1, dtype="u1")[1:]
    data[:] = numpy.arange(nbytes, dtype="u1")
    with kvik.CuFile(path, "w") as f:
        assert f.write(data) == nbytes
    assert numpy.array_equal(numpy.fromfile(path, dtype="u1"), data)


def test_bounce_buffer_free_is_kvikio_buffer_bounce_buffer_free():
    assert kvik.buffer.bounce_buffer_free is kvik.bounce_buffer_free


def test_bounce_buffer_free_returns_bytes_freed(direct_dir):
    kvik.bounce_buffer_free()
    settings = {"auto_direct_io_write": True, "bounce_buffer_size": 8192, "num_threads": 1}
    with kvik.defaults.set(settings):
        write_unaligned(direct_dir / "f", 100_000)
        assert kvik.bounce_buffer_free() == 8192
        assert kvik.bounce_buffer_free() == 0
        write_unaligned(direct_dir / "f", 100_000)  # IO allocates again what it needs
        assert kvik.bounce_buffer_free() == 8192


def test_bounce_buffers_follow_the_setting(direct_dir):
    kvik.bounce_buffer_free()
    with kvik.defaults.set({"auto_direct_io_write": True, "num_threads": 1}):
        with kvik.defaults.set("bounce_buffer_size", 8192):
            write_unaligned(direct_dir / "f", 100_000)
        with kvik.defaults.set("bounce_buffer_size", 16384):
            write_unaligned(direct_dir / "f", 100_000)
            # The 8192-byte buffer was freed when the first IO saw the new size.
            assert kvik.bounce_buffer_free() == 16384


@needs_cupy
def test_bounce_buffer_free_device(tmp_path):
    """kvikio's own sequence: pinned buffers of the size set, below a page too."""
    kvik.bounce_buffer_free()
    with kvik.defaults.set({"compat_mode": kvik.CompatMode.ON, "num_threads": 1}):
        with kvik.CuFile(tmp_path / "f", "w") as f:
            with kvik.defaults.set("bounce_buffer_size", 1024):
                f.write(cupy.arange(10))
                assert kvik.bounce_buffer_free() == 1024
                assert kvik.bounce_buffer_free() == 0
                f.write(cupy.arange(10))
            with kvik.defaults.set("bounce_buffer_size", 2048):
                f.write(cupy.arange(10))
                assert kvik.bounce_buffer_free() == 2048
                assert kvik.bounce_buffer_free() == 0


def test_fromfile_negative_count(tmp_path):
    path = tmp_path / "f"
    numpy.arange(10, dtype="u1").tofile(path)
    assert kvik.numpy.fromfile(path, dtype="u1", count=-1).tolist() == list(range(10))
    with pytest.raises(ValueError, match="negative dimensions are not allowed"):
        kvik.numpy.fromfile(path, dtype="u1", count=-42)


# ---- kvikio's words in the messages, which kvikio code matches --------------------------------


@pytest.mark.parametrize(
    "open_",
    [lambda p: kvik.CuFile(p, "r"), kvik.Mmap, kvik.get_page_cache_info],
    ids=["CuFile", "Mmap", "get_page_cache_info"],
)
def test_missing_file_unable_to_open(tmp_path, open_):
    with pytest.raises(RuntimeError, match="Unable to open file.*No such file or directory") as e:
        open_(tmp_path / "missing")
    assert isinstance(e.value, FileNotFoundError)
    assert str(tmp_path / "missing") in str(e.value)  # kvik's message follows kvikio's words


def test_bad_flags_are_no_open_failure(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(ValueError) as e:
        kvik.CuFile(tmp_path / "f", "z")
    assert "Unable to open file" not in str(e.value)


def test_io_the_mode_forbids_operation_not_permitted(tmp_path):
    path = tmp_path / "f"
    numpy.arange(10).tofile(path)
    with kvik.CuFile(path, "r") as f:
        forbidden = "Operation not permitted: .*not opened for writing"
        with pytest.raises(RuntimeError, match=forbidden) as e:
            f.write(numpy.arange(10))
        assert e.value.errno == errno.EBADF
        with pytest.raises(RuntimeError, match="Operation not permitted"):
            f.pwrite(numpy.arange(10))
    with kvik.CuFile(path, "w") as f:
        with pytest.raises(RuntimeError, match="Operation not permitted: .*not opened for reading"):
            f.read(numpy.empty(10, dtype="i8"))
        with pytest.raises(RuntimeError, match="Operation not permitted"):
            f.pread(numpy.empty(10, dtype="i8"))


def test_raw_io_of_host_memory_non_cuda(tmp_path):
    a = numpy.arange(1024)
    with kvik.CuFile(tmp_path / "f", "w") as f:
        with pytest.raises(ValueError, match="Non-CUDA buffers not supported.*not device memory"):
            f.raw_write(a)
    with kvik.CuFile(tmp_path / "f", "r") as f:
        with pytest.raises(ValueError, match="Non-CUDA buffers not supported"):
            f.raw_read(a)


def test_parameter_names_as_kvikio():
    """kvikio's wrappers take keywords: buf, raw_stream and flags."""
    kvik.memory_register(buf=numpy.zeros(10))  # host memory: nothing to do
    kvik.buffer.memory_deregister(buf=numpy.zeros(10))
    with kvik.defaults.set("compat_mode", kvik.CompatMode.ON):  # no cuFile: nothing to do
        kvik.stream_register(raw_stream=0, flags=0)
        kvik.stream.stream_deregister(raw_stream=0)


def test_get_page_cache_info_range(tmp_path):
    """kvikio's get_page_cache_info(file, offset=0, length=0): whole pages of the range."""
    path = tmp_path / "f"
    page = os.sysconf("SC_PAGESIZE")
    path.write_bytes(b"x" * (10 * page + 1))
    assert kvik.get_page_cache_info(path)[1] == 11
    assert kvik.get_page_cache_info(path, page - 1, 2)[1] == 2
    assert kvik.get_page_cache_info(path, offset=page, length=page)[1] == 1
    assert kvik.get_page_cache_info(str(path), 10 * page, 100)[1] == 1  # cut at the end
    assert kvik.get_page_cache_info(path, 10 * page + 1) == (0, 0)  # at the end: nothing
    assert kvik.cufile.get_page_cache_info(path, 3 * page)[1] == 8
