"""The page cache, memory registration, what kvik finds (CUDA, cuFile), and read_file_to_device."""
import errno
import json
import os
import subprocess
import sys

import numpy
import pytest
from conftest import CUPY_MISSING, cupy, to_host

import kvik
from kvik import _lib

PAGE = os.sysconf("SC_PAGE_SIZE")
# Where the kvik under test was imported from, first on the path of the processes tests start.
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(kvik.__file__)))
PYTHONPATH = os.pathsep.join(filter(None, [PACKAGE_DIR, os.environ.get("PYTHONPATH")]))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.environ.get("KVIK_BUILD_DIR", os.path.join(ROOT, "build"))
FAKE_CUDA = os.path.join(BUILD_DIR, "tests", "fake_cuda")
SYSTEM_CUDA, _ = _lib.runtime_lib_probe("cuda")
needs_cupy = pytest.mark.skipif(cupy is None, reason=str(CUPY_MISSING))


@pytest.fixture
def data_file(tmp_path, rng):
    data = rng.integers(0, 256, 5 * PAGE + 123, dtype=numpy.uint8)
    path = tmp_path / "data.bin"
    data.tofile(path)
    return path, data


# ---- page cache -------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["str", "bytes", "pathlib", "fd", "file object", "CuFile"])
def test_get_page_cache_info(data_file, form):
    path, data = data_file
    path.read_bytes()  # in the page cache now, where the file system has one
    opened = None
    if form == "str":
        arg = str(path)
    elif form == "bytes":
        arg = os.fsencode(path)
    elif form == "pathlib":
        arg = path
    elif form == "fd":
        arg = opened = os.open(path, os.O_RDONLY)
    elif form == "file object":
        arg = opened = open(path, "rb")
    else:
        arg = opened = kvik.CuFile(path, "r")
    try:
        resident, total = kvik.get_page_cache_info(arg)
    finally:
        if isinstance(opened, int):
            os.close(opened)
        elif opened is not None:
            opened.close()
    assert total == -(-data.size // PAGE)
    assert 0 <= resident <= total
    assert type(resident) is int and type(total) is int


def test_get_page_cache_info_empty_file(tmp_path):
    (tmp_path / "empty").touch()
    assert kvik.get_page_cache_info(tmp_path / "empty") == (0, 0)


def test_get_page_cache_info_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        kvik.get_page_cache_info(tmp_path / "missing")
    with pytest.raises(ValueError, match="expected a path .*, a file descriptor or an open file, not float"):
        kvik.get_page_cache_info(1.5)
    fd = os.open(tmp_path, os.O_RDONLY)
    os.close(fd)  # a descriptor that is not open now
    for bad in (fd, -1):
        with pytest.raises(OSError) as excinfo:
            kvik.get_page_cache_info(bad)
        assert excinfo.value.errno == errno.EBADF


@pytest.mark.parametrize("kwargs", [{}, {"sync_first": False}, {"offset": PAGE}, {"offset": 1, "length": 2 * PAGE},
                                    {"length": 10**12}])
def test_drop_file_page_cache(data_file, kwargs):
    path, data = data_file
    path.read_bytes()
    resident_before, total = kvik.get_page_cache_info(path)
    assert kvik.drop_file_page_cache(path, **kwargs) is None
    resident_after, _ = kvik.get_page_cache_info(path)
    assert resident_after <= resident_before <= total
    assert path.read_bytes() == data.tobytes()  # dropping loses nothing


def test_drop_file_page_cache_range(tmp_path):
    """Only the range is dropped. The kernel drops whole folios (up to some MiB) inside it only,
    so the range is 4 MiB at 4 MiB; file systems without a droppable page cache (tmpfs) skip."""
    path = tmp_path / "big.bin"
    path.write_bytes(bytes(8 << 20))
    path.read_bytes()
    kvik.drop_file_page_cache(path)
    if kvik.get_page_cache_info(path)[0] != 0:
        pytest.skip("this file system keeps its pages")
    path.read_bytes()
    kvik.drop_file_page_cache(path, offset=4 << 20, length=4 << 20)
    resident, total = kvik.get_page_cache_info(path)
    assert total // 2 <= resident < total


def test_drop_file_page_cache_writes_back_first(tmp_path, rng):
    data = rng.integers(0, 256, 3 * PAGE, dtype=numpy.uint8)
    path = tmp_path / "dirty.bin"
    with kvik.CuFile(path, "w") as f:
        f.write(data)
        kvik.drop_file_page_cache(f)
    assert path.read_bytes() == data.tobytes()


def test_drop_file_page_cache_errors(tmp_path, data_file):
    path, _ = data_file
    for kwargs in ({}, {"offset": 4096}):  # the whole file (kvik_page_cache_drop) and a range
        with pytest.raises(FileNotFoundError, match="missing"):
            kvik.drop_file_page_cache(tmp_path / "missing", **kwargs)
    with pytest.raises(ValueError, match="offset must not be negative"):
        kvik.drop_file_page_cache(path, offset=-1)
    with pytest.raises(ValueError, match="length must not be negative"):
        kvik.drop_file_page_cache(path, length=-5)
    with pytest.raises(ValueError):  # kvikio's type for a `file` of another type
        kvik.drop_file_page_cache(None)


# ---- memory registration ----------------------------------------------------------------------


def test_memory_register_host_does_nothing():
    buf = numpy.zeros(1 << 20, dtype=numpy.uint8)
    assert kvik.memory_register(buf) is None
    assert kvik.memory_register(buf) is None  # nothing was registered, so no "already registered"
    assert kvik.memory_deregister(buf) is None
    assert kvik.memory_register(bytearray(100)) is None
    assert kvik.memory_register(b"read-only memory is fine") is None


def test_memory_register_errors():
    with pytest.raises(TypeError, match="not a buffer"):
        kvik.memory_register(3)
    with pytest.raises(TypeError, match="not a buffer"):
        kvik.memory_deregister(None)
    with pytest.raises(ValueError, match="not contiguous"):
        kvik.memory_register(numpy.zeros((10, 10))[:, 1])


@needs_cupy
def test_memory_register_device(tmp_path, rng):
    buf = cupy.zeros(1 << 20, dtype=cupy.uint8)
    kvik.memory_register(buf)
    try:
        with pytest.raises(kvik.KvikError) as excinfo:
            kvik.memory_register(buf[1000:])  # the same allocation
        assert excinfo.value.name == "CU_FILE_MEMORY_ALREADY_REGISTERED"
        # IO into registered memory works as into any other.
        data = rng.integers(0, 256, buf.size, dtype=numpy.uint8)
        data.tofile(tmp_path / "data")
        with kvik.CuFile(tmp_path / "data", "r") as f:
            assert f.read(buf) == buf.size
        assert numpy.array_equal(to_host(buf), data)
    finally:
        kvik.memory_deregister(buf)
    with pytest.raises(kvik.KvikError) as excinfo:
        kvik.memory_deregister(buf)
    assert excinfo.value.name == "CU_FILE_MEMORY_NOT_REGISTERED"


# ---- what kvik finds ----------------------------------------------------------------------------


@pytest.mark.parametrize("name, soname", [("cuda", "libcuda.so.1"), ("cufile", "libcufile.so.0")])
def test_runtime_lib_probe(name, soname):
    found, detail = _lib.runtime_lib_probe(name)
    assert type(found) is bool and isinstance(detail, str) and detail
    if not found:
        assert soname in detail  # the loader's reason names the library


def test_runtime_lib_probe_unknown():
    with pytest.raises(ValueError, match="unknown library 'nvml'.*'cuda' or 'cufile'"):
        _lib.runtime_lib_probe("nvml")


@pytest.mark.skipif(SYSTEM_CUDA, reason="this machine has a CUDA driver")
def test_cuda_driver_version_without_cuda():
    with pytest.raises(kvik.KvikError) as excinfo:
        _lib.cuda_driver_version()
    assert (excinfo.value.code, excinfo.value.name) == (-4004, "KVIK_ECUDA_UNAVAILABLE")
    assert "libcuda.so.1" in str(excinfo.value)


@pytest.mark.skipif(not SYSTEM_CUDA, reason="no CUDA driver on this machine")
def test_cuda_driver_version():
    try:
        version = _lib.cuda_driver_version()
    except kvik.KvikError as e:  # a driver without a device
        assert e.name == "KVIK_ECUDA_UNAVAILABLE"
    else:
        assert version >= 10000


@pytest.mark.skipif(not os.path.exists(os.path.join(FAKE_CUDA, "libcuda.so.1")),
                    reason=f"the fake CUDA driver is not built in {FAKE_CUDA}")
def test_with_fake_cuda():
    code = "import json, kvik\nprint(json.dumps([kvik._lib.cuda_driver_version(), kvik._lib.runtime_lib_probe('cuda')]))"
    env = dict(os.environ, PYTHONPATH=PYTHONPATH, LD_LIBRARY_PATH=FAKE_CUDA)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    version, (found, path) = json.loads(done.stdout)
    assert version == 13000
    assert found and path.startswith(FAKE_CUDA)


# ---- read_file_to_device ----------------------------------------------------------------------


def test_read_file_to_device_without_cupy(monkeypatch, data_file):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` fail
    with pytest.raises(ImportError, match="read_file_to_device returns a CuPy array and needs CuPy"):
        kvik.read_file_to_device(data_file[0])


@needs_cupy
@pytest.mark.parametrize("size", [0, 1, 4095, 4096, (8 << 20) + 7])
def test_read_file_to_device(tmp_path, rng, size):
    data = rng.integers(0, 256, size, dtype=numpy.uint8)
    path = tmp_path / "data"
    data.tofile(path)
    out = kvik.read_file_to_device(path)
    assert isinstance(out, cupy.ndarray) and out.dtype == cupy.uint8 and out.shape == (size,)
    assert out.device.id == cupy.cuda.Device().id
    assert to_host(out).tobytes() == data.tobytes()


@needs_cupy
def test_read_file_to_device_on_a_device(data_file):
    path, data = data_file
    last = cupy.cuda.runtime.getDeviceCount() - 1
    out = kvik.read_file_to_device(str(path), device=last)
    assert out.device.id == last
    assert to_host(out).tobytes() == data.tobytes()


@needs_cupy
def test_read_file_to_device_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        kvik.read_file_to_device(tmp_path / "missing")
    with pytest.raises(IsADirectoryError):
        kvik.read_file_to_device(tmp_path)
