"""Stream-ordered IO (CuFile.raw_read_async and raw_write_async) beside what CuPy and PyTorch do all
the time while it is queued: free memory, load kernels' modules, empty their caches, allocate, and
use a second stream.

kvik 0.1 hung here (issue 24): a host function held the stream until pool threads had made their
copies, and those waited for a module load, which waited for the stream. A watchdog turns a hang
into a failure: faulthandler prints every thread's stack and ends the process."""
import faulthandler

import numpy
import pytest

import kvik
from conftest import CUPY_MISSING, cupy

ITERATIONS = 200
WATCHDOG_S = 300
FILE_SIZE = (8 << 20) + 12345
MAX_IO = 3 << 20


@pytest.fixture
def watchdog():
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def source(tmp_path):
    data = numpy.random.default_rng(24).integers(0, 256, FILE_SIZE, dtype=numpy.uint8)
    path = tmp_path / "source.bin"
    data.tofile(path)
    return path, data


def _torch():
    try:
        import torch
    except ImportError as e:
        pytest.skip(f"PyTorch is not installed ({e})")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch


def _add_kernel(i):
    """A CuPy kernel of its own for iteration i: its module loads when it first runs."""
    code = (
        f'extern "C" __global__ void add_{i}(unsigned char *p, unsigned long long n) {{\n'
        "  unsigned long long j = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
        f"  if (j < n) p[j] += {i % 7 + 1};\n"
        "}\n"
    )
    return cupy.RawKernel(code, f"add_{i}"), i % 7 + 1


def _expect_written(out_path, written):
    content = numpy.fromfile(out_path, dtype=numpy.uint8)
    assert content.size == sum(len(chunk) for _, chunk in written)
    for at, chunk in written:
        assert numpy.array_equal(content[at : at + len(chunk)], chunk)


def test_cupy_frees_loads_and_allocates_while_io_is_queued(source, tmp_path, watchdog):
    if cupy is None:
        pytest.skip(CUPY_MISSING)
    path, data = source
    rng = numpy.random.default_rng(1)
    stream, other = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    dev, dev2 = cupy.zeros(MAX_IO, dtype=cupy.uint8), cupy.zeros(MAX_IO, dtype=cupy.uint8)
    cupy.cuda.Device().synchronize()  # the zeros are written on another stream than the reads'
    out_path, written, at = tmp_path / "out.bin", [], 0
    kernel, delta = _add_kernel(0)
    with kvik.CuFile(path) as f, kvik.CuFile(out_path, "w") as w:
        for i in range(ITERATIONS):
            size, size2 = (int(x) for x in rng.integers(1, MAX_IO + 1, 2))
            offset, offset2 = (int(x) for x in rng.integers(0, FILE_SIZE - MAX_IO, 2))
            read = f.raw_read_async(dev, stream, size, offset, 0)
            if i % 10 == 0:  # a module CuPy has not loaded yet
                kernel, delta = _add_kernel(i)
            with stream:
                kernel(((size + 255) // 256,), (256,), (dev, numpy.uint64(size)))
            cupy.cuda.runtime.free(cupy.cuda.runtime.malloc(1 << 20))  # cudaMalloc, cudaFree
            read2 = f.raw_read_async(dev2, other, size2, offset2, 0)
            scratch = cupy.empty(int(rng.integers(1, 64 << 20)), dtype=cupy.uint8)
            write = w.raw_write_async(dev, stream, size, at, 0)
            del scratch
            cupy.get_default_memory_pool().free_all_blocks()
            stream.synchronize()
            other.synchronize()
            assert read.check_bytes_done() == size
            assert read2.check_bytes_done() == size2
            assert write.check_bytes_done() == size
            expected = (data[offset : offset + size].astype(numpy.uint16) + delta).astype(numpy.uint8)
            assert numpy.array_equal(dev[:size].get(), expected), f"iteration {i}"
            assert numpy.array_equal(dev2[:size2].get(), data[offset2 : offset2 + size2]), f"iteration {i}"
            written.append((at, expected))
            at += size
    _expect_written(out_path, written)


def test_torch_empties_its_cache_and_allocates_while_io_is_queued(source, tmp_path, watchdog):
    torch = _torch()
    path, data = source
    rng = numpy.random.default_rng(2)
    stream, other = torch.cuda.Stream(), torch.cuda.Stream()
    dev = torch.zeros(MAX_IO, dtype=torch.uint8, device="cuda")
    dev2 = torch.zeros(MAX_IO, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()  # the zeros are written on another stream than the reads'
    out_path, written, at = tmp_path / "out.bin", [], 0
    with kvik.CuFile(path) as f, kvik.CuFile(out_path, "w") as w:
        for i in range(ITERATIONS):
            size, size2 = (int(x) for x in rng.integers(1, MAX_IO + 1, 2))
            offset, offset2 = (int(x) for x in rng.integers(0, FILE_SIZE - MAX_IO, 2))
            read = f.raw_read_async(dev, stream, size, offset, 0)
            with torch.cuda.stream(stream):
                dev[:size].add_(1)
                torch.cumsum(dev[:64].to(torch.int64), 0)  # another kernel, loaded lazily once
            torch.cuda.empty_cache()
            scratch = torch.empty(int(rng.integers(1, 64 << 20)), dtype=torch.uint8, device="cuda")
            read2 = f.raw_read_async(dev2, other, size2, offset2, 0)
            write = w.raw_write_async(dev, stream, size, at, 0)
            del scratch
            torch.cuda.empty_cache()
            stream.synchronize()
            other.synchronize()
            assert read.check_bytes_done() == size
            assert read2.check_bytes_done() == size2
            assert write.check_bytes_done() == size
            expected = (data[offset : offset + size].astype(numpy.uint16) + 1).astype(numpy.uint8)
            assert numpy.array_equal(dev[:size].cpu().numpy(), expected), f"iteration {i}"
            assert numpy.array_equal(dev2[:size2].cpu().numpy(), data[offset2 : offset2 + size2]), f"iteration {i}"
            written.append((at, expected))
            at += size
    _expect_written(out_path, written)
