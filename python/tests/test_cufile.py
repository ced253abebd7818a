"""kvik.CuFile and its futures: data read back equals data written, byte for byte, at random
offsets and sizes, in host memory (NumPy) and device memory (CuPy); and the errors of bad input."""
import errno
import os

import numpy
import pytest

import kvik
from conftest import to_host

FILE_SIZE = (3 << 20) + 4321  # several tasks at a 1 MiB task size, and an unaligned end


def test_version():
    assert kvik.__version__.count(".") == 2
    assert kvik.__version__ == kvik._lib.__version__


def test_kvikio_names():
    """The names kvikio code uses, under `import kvik as kvikio`."""
    import kvik.cufile
    import kvik.mmap

    assert kvik.cufile.CuFile is kvik.CuFile
    assert kvik.cufile.IOFuture is kvik.IOFuture
    assert kvik.cufile.IOFutureStream is kvik.IOFutureStream
    assert kvik.mmap.Mmap is kvik.Mmap


def test_read_whole_file(xp, path, data):
    out = xp.empty(FILE_SIZE, dtype=xp.uint8)
    with kvik.CuFile(path, "r") as f:
        assert f.read(out) == FILE_SIZE
    assert numpy.array_equal(to_host(out), data)


@pytest.mark.parametrize("task_size", [None, 4096, 1 << 20])
def test_pread_random_ranges(xp, path, data, rng, task_size):
    with kvik.CuFile(str(path)) as f:
        for _ in range(12):
            offset = int(rng.integers(0, FILE_SIZE))
            size = int(rng.integers(0, FILE_SIZE - offset + 1))
            out = xp.zeros(size, dtype=xp.uint8)
            future = f.pread(out, size, offset, task_size=task_size)
            assert isinstance(future, kvik.IOFuture)
            assert future.get() == size
            assert future.done()
            assert future.get() == size  # a result can be read again
            assert numpy.array_equal(to_host(out), data[offset : offset + size])


def test_pwrite_random_ranges_then_read(xp, tmp_path, rng):
    expected = numpy.zeros(FILE_SIZE, dtype=numpy.uint8)
    path = tmp_path / "written.bin"
    with kvik.CuFile(path, "w+") as f:
        f.write(xp.asarray(expected))
        for _ in range(12):
            offset = int(rng.integers(0, FILE_SIZE))
            size = int(rng.integers(0, FILE_SIZE - offset + 1))
            chunk = rng.integers(0, 256, size, dtype=numpy.uint8)
            assert f.pwrite(xp.asarray(chunk), file_offset=offset, task_size=65536).get() == size
            expected[offset : offset + size] = chunk
        assert f.nbytes() == FILE_SIZE
    assert numpy.array_equal(numpy.fromfile(path, dtype=numpy.uint8), expected)


def test_read_stops_at_end_of_file(xp, path, data):
    out = xp.full(FILE_SIZE, 7, dtype=xp.uint8)
    with kvik.CuFile(path) as f:
        assert f.read(out, file_offset=FILE_SIZE - 100) == 100
        assert f.read(out, size=10, file_offset=FILE_SIZE + 5) == 0
    host = to_host(out)
    assert numpy.array_equal(host[:100], data[-100:])
    assert (host[100:] == 7).all(), "bytes past the end of the file stay untouched"


def test_typed_and_multidimensional_buffers(xp, tmp_path, rng):
    array = xp.asarray(rng.standard_normal((64, 33)).astype(numpy.float32))
    for order in "CF":
        src = xp.asarray(array, order=order)
        with kvik.CuFile(tmp_path / "a.bin", "w") as f:
            assert f.write(src) == src.nbytes
        dst = xp.empty_like(src)
        with kvik.CuFile(tmp_path / "a.bin") as f:
            assert f.read(dst) == src.nbytes
        assert (dst == src).all()


def test_append_mode(xp, tmp_path):
    path = tmp_path / "log.bin"
    with kvik.CuFile(path, "a") as f:
        f.write(xp.asarray(numpy.frombuffer(b"hello ", dtype=numpy.uint8)))
        f.write(xp.asarray(numpy.frombuffer(b"world", dtype=numpy.uint8)), file_offset=0)
        assert f.open_flags() & os.O_APPEND
    assert path.read_bytes() == b"hello world"


def test_host_buffer_kinds(path, data):
    """Every kind of host memory Python has: bytearray, memoryview (also a slice), array.array."""
    import array

    with kvik.CuFile(path) as f:
        buf = bytearray(1000)
        assert f.read(buf, file_offset=10) == 1000 and bytes(buf) == data[10:1010].tobytes()
        view = memoryview(bytearray(2000))[500:1500]
        assert f.read(view, file_offset=3) == 1000 and bytes(view) == data[3:1003].tobytes()
        words = array.array("I", bytes(400))
        assert f.read(words) == 400 and words.tobytes() == data[:400].tobytes()


class HostArrayInterface:
    """Host memory offered through __array_interface__ or __cuda_array_interface__ only, as a GPU
    library would offer its memory: kvik must read the interface, then classify the pointer."""

    def __init__(self, array, name, readonly=False, strides=None):
        self.array = array
        setattr(self, name, {
            "data": (array.ctypes.data, readonly),
            "shape": array.shape,
            "typestr": array.dtype.str,
            "strides": strides,
            "version": 3,
        })


@pytest.mark.parametrize("interface", ["__array_interface__", "__cuda_array_interface__"])
def test_array_interfaces(path, data, interface):
    target = numpy.zeros((10, 100), dtype=numpy.uint16)
    with kvik.CuFile(path) as f:
        assert f.read(HostArrayInterface(target, interface)) == 2000
        assert target.tobytes() == data[:2000].tobytes()
        with pytest.raises(TypeError, match="read-only"):
            f.read(HostArrayInterface(target, interface, readonly=True))
        with pytest.raises(ValueError, match="not contiguous"):
            f.read(HostArrayInterface(target, interface, strides=(400, 4)))


def test_cuda_array_interface_stream(path):
    """A stream in __cuda_array_interface__ is waited for; 0 is not a valid stream there."""
    from conftest import cupy

    target = HostArrayInterface(numpy.zeros(10, dtype=numpy.uint8), "__cuda_array_interface__")
    with kvik.CuFile(path) as f:
        target.__cuda_array_interface__["stream"] = 0
        with pytest.raises(ValueError, match="stream must be a non-zero int"):
            f.read(target)
        if cupy is None:  # no CUDA driver: the stream cannot be waited for
            target.__cuda_array_interface__["stream"] = 1
            with pytest.raises(kvik.KvikError) as info:
                f.read(target)
            assert info.value.name == "KVIK_ECUDA_UNAVAILABLE"


def test_readonly_buffer_can_be_written_from(tmp_path):
    with kvik.CuFile(tmp_path / "b.bin", "w") as f:
        assert f.write(b"read-only source") == 16
    assert (tmp_path / "b.bin").read_bytes() == b"read-only source"


def test_open_flags_and_fileno(path):
    with kvik.CuFile(path, "r+") as f:
        assert f.open_flags() & os.O_ACCMODE == os.O_RDWR
        assert os.fstat(f.fileno()).st_size == FILE_SIZE
        assert not f.closed
    assert f.closed
    f.close()  # closing twice does nothing


def test_repr(path):
    f = kvik.CuFile(path)
    assert repr(f) == f"<kvik.CuFile {str(path)!r} mode='r'>"
    f.close()
    assert repr(f).endswith(" closed>")


def test_future_outlives_its_file_and_buffer(path, data):
    """The future keeps the file and the buffer alive until the IO is done."""
    future = kvik.CuFile(path).pread(numpy.empty(FILE_SIZE, dtype=numpy.uint8), task_size=65536)
    assert future.get() == FILE_SIZE


def test_dropping_a_future_waits_for_its_io(path, data):
    out = numpy.zeros(FILE_SIZE, dtype=numpy.uint8)
    with kvik.CuFile(path) as f:
        f.pread(out, task_size=4096)  # the future is dropped at once
    assert numpy.array_equal(out, data)


# ---- bad input: the exception's type and message -------------------------------------------


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        kvik.CuFile(tmp_path / "missing.bin")
    assert info.value.errno == errno.ENOENT
    assert "missing.bin" in str(info.value)


def test_directory_raises_is_a_directory(tmp_path):
    with pytest.raises(IsADirectoryError):
        kvik.CuFile(tmp_path)


def test_wrong_flags(path):
    with pytest.raises(ValueError, match="unknown flags"):
        kvik.CuFile(path, "rw")


def test_closed_file(path):
    f = kvik.CuFile(path)
    f.close()
    for call in (lambda: f.read(bytearray(10)), lambda: f.pwrite(b"x"), f.fileno, f.nbytes, f.open_flags):
        with pytest.raises(ValueError, match="closed file"):
            call()
    with pytest.raises(ValueError, match="closed file"):
        with f:
            pass


def test_read_from_write_only_file(path):
    with kvik.CuFile(path, "w") as f:
        with pytest.raises(OSError) as info:
            f.read(bytearray(10))
    assert info.value.errno == errno.EBADF


def test_write_to_read_only_file(path):
    with kvik.CuFile(path, "r") as f:
        with pytest.raises(OSError) as info:
            f.write(b"abc")
    assert info.value.errno == errno.EBADF


def test_size_larger_than_buffer(path):
    with kvik.CuFile(path) as f:
        with pytest.raises(ValueError, match="larger than the buffer"):
            f.read(bytearray(10), size=11)
        with pytest.raises(ValueError, match="larger than the buffer"):
            f.pwrite(b"abc", 4)


@pytest.mark.parametrize("argument", ["size", "file_offset", "task_size"])
def test_negative_arguments(path, argument):
    with kvik.CuFile(path) as f:
        with pytest.raises(ValueError, match=f"{argument} must not be negative"):
            f.read(bytearray(10), **{argument: -1})


def test_zero_task_size(path):
    with kvik.CuFile(path) as f:
        with pytest.raises(ValueError, match="task_size must be positive"):
            f.pread(bytearray(10), task_size=0)


def test_read_only_target(path):
    with kvik.CuFile(path) as f:
        with pytest.raises(TypeError, match="read-only"):
            f.read(b"immutable")
        with pytest.raises(TypeError, match="read-only"):
            f.read(memoryview(bytearray(4)).toreadonly())


def test_non_contiguous_buffer(path):
    with kvik.CuFile(path) as f:
        with pytest.raises(ValueError, match="not contiguous"):
            f.read(numpy.zeros((10, 10), dtype=numpy.uint8)[:, ::2])


def test_not_a_buffer(path):
    with kvik.CuFile(path) as f:
        with pytest.raises(TypeError, match="not a buffer"):
            f.read([1, 2, 3])


def test_array_interface_that_raises(path):
    """A CUDA array interface that raises (a PyTorch tensor that requires grad) raises its own
    error, not "not a buffer"."""
    class RequiresGrad:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")

    with kvik.CuFile(path) as f:
        with pytest.raises(RuntimeError, match="requires grad"):
            f.read(RequiresGrad())


def test_read_and_write_with_and_without_task_size(tmp_path, rng):
    """read and write wait on this thread without a task size, and on a future with one: the same
    bytes either way, from and into host buffers of any size."""
    path = tmp_path / "both.bin"
    data = rng.integers(0, 256, 3 << 20, dtype=numpy.uint8)
    with kvik.CuFile(path, "w+") as f:
        assert f.write(data[:1000]) == 1000
        assert f.write(data[1000:], task_size=4096, file_offset=1000) == data.size - 1000
        for size, offset, task_size in [(4096, 5, None), (300 << 10, 4096, None), (3 << 20, 0, 65536),
                                        (100, data.size - 40, None), (100, data.size - 40, 8192)]:
            got = numpy.zeros(size, numpy.uint8)
            n = f.read(got, file_offset=offset, task_size=task_size)
            assert n == min(size, data.size - offset)
            assert (got[:n] == data[offset:offset + n]).all()


def test_raw_io_refuses_host_memory(path):
    with kvik.CuFile(path, "r+") as f:
        with pytest.raises(ValueError, match="not device memory"):
            f.raw_read(bytearray(4096))
        with pytest.raises(ValueError, match="not device memory"):
            f.raw_write(b"abc")


def test_errors_carry_the_library_message(path):
    with kvik.CuFile(path, "w") as f:
        with pytest.raises(OSError, match=r"kvik_file_read\(.*data.bin"):
            f.read(bytearray(10))
        with pytest.raises(OSError, match=r"kvik_file_pread\(.*data.bin"):
            f.pread(bytearray(10))


# ---- device memory only ----------------------------------------------------------------------


@pytest.fixture
def cupy():
    from conftest import CUPY_MISSING, cupy

    if cupy is None:
        pytest.skip(CUPY_MISSING)
    return cupy


def test_raw_read_and_write(cupy, path, data, tmp_path, rng):
    dev = cupy.zeros(FILE_SIZE, dtype=cupy.uint8)
    with kvik.CuFile(path) as f:
        for _ in range(6):
            dev_offset = int(rng.integers(0, FILE_SIZE))
            offset = int(rng.integers(0, FILE_SIZE))
            size = int(rng.integers(0, min(FILE_SIZE - offset, FILE_SIZE - dev_offset) + 1))
            assert f.raw_read(dev, size, offset, dev_offset) == size
            assert numpy.array_equal(dev[dev_offset : dev_offset + size].get(), data[offset : offset + size])
    with kvik.CuFile(tmp_path / "raw.bin", "w") as f:
        src = cupy.asarray(data)
        assert f.raw_write(src, 1000, 0, 5) == 1000
    assert (tmp_path / "raw.bin").read_bytes() == data[5:1005].tobytes()


def test_raw_io_of_empty_arrays(cupy, path, tmp_path):
    """An empty CuPy array has no pointer: its raw reads and writes move nothing and return 0, as
    every other read and write does (issue 24)."""
    empty = cupy.empty(0, dtype=cupy.uint8)
    stream = cupy.cuda.Stream(non_blocking=True)
    with kvik.CuFile(path) as f:
        assert f.raw_read(empty) == 0
        assert f.raw_read_async(empty, stream).check_bytes_done() == 0
    with kvik.CuFile(tmp_path / "empty.bin", "w") as f:
        assert f.raw_write(empty) == 0
        assert f.raw_write_async(empty, stream).check_bytes_done() == 0
    assert (tmp_path / "empty.bin").read_bytes() == b""


def test_raw_async_on_a_stream(cupy, path, data, tmp_path):
    stream = cupy.cuda.Stream(non_blocking=True)
    dev = cupy.zeros(FILE_SIZE, dtype=cupy.uint8)
    with kvik.CuFile(path) as f:
        for handle in (stream, stream.ptr):
            future = f.raw_read_async(dev, handle, FILE_SIZE - 10, 10, 0)
            assert isinstance(future, kvik.IOFutureStream)
            stream.synchronize()
            assert future.check_bytes_done() == FILE_SIZE - 10
            assert numpy.array_equal(dev[: FILE_SIZE - 10].get(), data[10:])
    with kvik.CuFile(tmp_path / "async.bin", "w") as f:
        future = f.raw_write_async(cupy.asarray(data), None, 4096, 0, 100)
        assert future.check_bytes_done() == 4096
    assert (tmp_path / "async.bin").read_bytes() == data[100:4196].tobytes()


def test_waits_for_the_stream_that_writes_the_array(cupy, tmp_path):
    """CuPy names its current stream in __cuda_array_interface__: a write of an array that a kernel
    still queued on that stream fills must wait for the kernel."""
    import threading

    stream = cupy.cuda.Stream(non_blocking=True)
    released = threading.Event()
    stream.launch_host_func(lambda _: released.wait(10), None)  # holds the stream
    threading.Timer(0.2, released.set).start()
    with stream:
        array = cupy.arange(1 << 20, dtype=cupy.int32)  # queued behind the hold
        with kvik.CuFile(tmp_path / "arange.bin", "w") as f:
            f.write(array)
        assert released.is_set()
    written = numpy.fromfile(tmp_path / "arange.bin", dtype=numpy.int32)
    assert numpy.array_equal(written, numpy.arange(1 << 20, dtype=numpy.int32))


def test_device_io_from_a_fresh_thread(cupy, path, data):
    """A thread that never called CUDA has no current context, yet the CuPy array's stream (the
    legacy default stream of the array's context) is waited for and the read lands."""
    import concurrent.futures

    out = cupy.zeros(FILE_SIZE, dtype=cupy.uint8)
    with kvik.CuFile(path) as f, concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert pool.submit(f.read, out).result() == FILE_SIZE
    assert numpy.array_equal(out.get(), data)


def test_bad_stream_argument(path):
    with kvik.CuFile(path) as f:
        with pytest.raises(TypeError, match="stream must be"):
            f.raw_read_async(bytearray(10), "not a stream")


class _BadBool:
    def __bool__(self):
        raise ZeroDivisionError


def test_set_direct_io(tmp_path):
    """CuFile.set_direct_io takes True, False and None for each direction, on an open file, and
    the bytes read stay the file's; a value without a truth raises its error, a closed file
    ValueError."""
    data = bytes(range(256)) * 64
    path = tmp_path / "f"
    path.write_bytes(data)
    f = kvik.CuFile(path, "r+")
    for reads, writes in ((True, None), (False, True), (None, False), (None, None)):
        f.set_direct_io(reads=reads, writes=writes)
        buf = bytearray(8192)
        assert f.read(buf, 8192, 4096) == 8192 and bytes(buf) == data[4096:12288]
    with pytest.raises(ZeroDivisionError):
        f.set_direct_io(reads=_BadBool())
    f.close()
    with pytest.raises(ValueError):
        f.set_direct_io(reads=True)
