"""kvik.read_split: one file cut across devices, or a list of files spread over them.

On the host: NumPy arrays on "cpu", byte for byte against the file, for sizes around the 4 KiB
boundaries, odd sizes and more devices than pages; dtypes and record-sized parts; placement of
a list of files (balanced, or by device_map) through a host adapter that stands for devices; every
bad argument; a file that shrinks while it is read.

On the fake CUDA driver with three devices (in a subprocess, as test_safetensors' device_map
test): each part in the memory of its own device (the driver says which), bytes equal, no copy
through another device's buffers. With PyTorch or CuPy and GPUs: split over every GPU they see.
"""
import os

import numpy
import pytest

import kvik
import kvik._split
from test_nvcomp import needs_fakes, run_python

TESTS = os.path.dirname(os.path.abspath(__file__))  # fake_devices.py, for the scripts

PAGE = 4096
SIZES = [0, 1, 100, 4095, 4096, 4097, 8191, 8192, 3 * PAGE + 17, 12345, 1 << 20, (1 << 20) + 7]


def write(path, nbytes, seed=0):
    data = numpy.random.default_rng(seed).integers(0, 256, nbytes, dtype=numpy.uint8).tobytes()
    path.write_bytes(data)
    return data


def expected_sizes(size, parts, unit):
    """The part sizes read_split promises: whole units, as equal as they allow, the first parts
    larger, the last non-empty part ending at the end of the file."""
    units = [unit] * (size // unit) + ([size % unit] if size % unit else [])
    counts = [len(units) // parts + (1 if i < len(units) % parts else 0) for i in range(parts)]
    sizes = []
    for count in counts:
        sizes.append(sum(units[:count]))
        units = units[count:]
    return sizes


class HostDevices:
    """A framework adapter (as kvik.safetensors takes one) that holds host memory for any device
    and tags each array with its device, so that placement shows on the host."""

    def __init__(self, device=None, allocations=None):
        self.device = device
        self.allocations = [] if allocations is None else allocations

    def for_device(self, kind, ordinal):
        return HostDevices(kind if ordinal is None else f"{kind}:{ordinal}", self.allocations)

    def dtype(self, code):
        return {"U8": numpy.uint8, "F32": numpy.float32, "I64": numpy.int64}[code]

    def empty(self, nbytes):
        self.allocations.append((self.device, nbytes))
        return numpy.empty(nbytes, numpy.uint8)

    def region(self, buf, start, stop):
        return buf[start:stop]

    def view(self, buf, start, stop, dtype, shape):
        return self.device, buf[start:stop].view(dtype).reshape(shape)


# ---- one file --------------------------------------------------------------------------------


@pytest.mark.parametrize("size", SIZES)
def test_one_file(tmp_path, size):
    data = write(tmp_path / "a.bin", size, seed=size)
    for parts in (1, 2, 3, 5):
        got = kvik.read_split(tmp_path / "a.bin", ["cpu"] * parts, "numpy")
        assert len(got) == parts
        assert all(a.dtype == numpy.uint8 and a.ndim == 1 for a in got)
        assert [a.nbytes for a in got] == expected_sizes(size, parts, PAGE)
        assert b"".join(a.tobytes() for a in got) == data


def test_more_devices_than_pages(tmp_path):
    data = write(tmp_path / "a.bin", 5000)
    got = kvik.read_split(str(tmp_path / "a.bin"), ["cpu"] * 4, "np")
    assert [a.nbytes for a in got] == [4096, 904, 0, 0]
    assert got[0].tobytes() + got[1].tobytes() == data
    got = kvik.read_split(os.fsencode(tmp_path / "a.bin"), ["cpu"] * 3, "numpy", align=1000)
    assert [a.nbytes for a in got] == [2000, 2000, 1000]
    assert b"".join(a.tobytes() for a in got) == data


def test_expected_sizes():
    """The test's own rule, by hand."""
    assert expected_sizes(5000, 3, PAGE) == [4096, 904, 0]
    assert expected_sizes(5 * PAGE + 1, 3, PAGE) == [2 * PAGE, 2 * PAGE, PAGE + 1]
    assert expected_sizes(0, 2, PAGE) == [0, 0]


@pytest.mark.parametrize("dtype", ["float32", numpy.int64, numpy.dtype("<u2"), "f8", "complex64"])
def test_dtype(tmp_path, dtype):
    item = numpy.dtype(dtype).itemsize
    data = write(tmp_path / "a.bin", 3 * PAGE + 10 * item)
    got = kvik.read_split(tmp_path / "a.bin", ["cpu"] * 3, "numpy", dtype=dtype)
    assert all(a.dtype == numpy.dtype(dtype) for a in got)
    assert [a.nbytes for a in got] == expected_sizes(len(data), 3, PAGE)
    assert numpy.array_equal(numpy.concatenate(got).view(numpy.uint8),
                             numpy.frombuffer(data, numpy.uint8))


def test_records(tmp_path):
    """align= a record size keeps records whole; with a dtype, parts end on both."""
    data = write(tmp_path / "a.bin", 100 * 24)
    got = kvik.read_split(tmp_path / "a.bin", ["cpu"] * 3, "numpy", align=100)
    assert [a.nbytes for a in got] == [800, 800, 800]
    got = kvik.read_split(tmp_path / "a.bin", ["cpu"] * 7, "numpy", align=100, dtype="int64")
    assert [a.nbytes for a in got] == expected_sizes(2400, 7, 200) == [400] * 5 + [200] * 2
    assert numpy.concatenate(got).tobytes() == data


def test_bfloat16(tmp_path):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    data = write(tmp_path / "a.bin", 10002)
    got = kvik.read_split(tmp_path / "a.bin", ["cpu"] * 2, "numpy", dtype="bfloat16")
    assert got[0].dtype == ml_dtypes.bfloat16 and [a.size for a in got] == [4096, 905]
    assert numpy.concatenate(got).tobytes() == data


def test_places_parts_on_devices(tmp_path):
    data = write(tmp_path / "a.bin", 3 * PAGE)
    fw = HostDevices()
    got = kvik.read_split(tmp_path / "a.bin", [2, "cuda:0", "cpu"], fw, dtype="float32")
    assert [device for device, _ in got] == ["cuda:2", "cuda:0", "cpu"]
    assert fw.allocations == [("cuda:2", PAGE), ("cuda:0", PAGE), ("cpu", PAGE)]
    assert numpy.concatenate([a for _, a in got]).tobytes() == data


# ---- a list of files -------------------------------------------------------------------------


def test_files_balanced(tmp_path):
    sizes = [10, 7000, 3000, 3000, 1, 0, 9000]
    paths = [tmp_path / f"f{i}" for i in range(len(sizes))]
    data = [write(p, n, seed=i) for i, (p, n) in enumerate(zip(paths, sizes))]
    got = kvik.read_split(paths, ["cuda:0", "cuda:1", "cuda:2"], HostDevices())
    # Largest first to the least loaded: 9000 -> 0, 7000 -> 1, then 2 takes the rest (3000,
    # 3000: 6000 < 7000, then 10, 1, 0).
    assert [device for device, _ in got] == ["cuda:2", "cuda:1", "cuda:2", "cuda:2", "cuda:2",
                                             "cuda:2", "cuda:0"]
    assert [a.tobytes() for _, a in got] == data
    got = kvik.read_split([str(p) for p in paths], ["cpu"] * 2, "numpy")
    assert [a.tobytes() for a in got] == data
    assert kvik._split._balance([5, 5, 5, 5], 2) == [0, 1, 0, 1]


def test_files_one_device_and_none(tmp_path):
    paths = [tmp_path / "a", tmp_path / "b", tmp_path / "a"]
    a, b = write(paths[0], 5), write(paths[1], 7000, seed=1)
    got = kvik.read_split(paths, ["cpu"], "numpy")
    assert [x.tobytes() for x in got] == [a, b, a]
    assert kvik.read_split([], ["cpu"], "numpy") == []
    assert kvik.read_split([], device_map={}, framework="numpy") == []


def test_files_device_map(tmp_path):
    paths = [tmp_path / f"f{i}" for i in range(4)]
    data = [write(p, 1000 * (i + 1), seed=i) for i, p in enumerate(paths)]
    device_map = {str(paths[0]): 1, paths[1]: "cuda:1", paths[2]: "cpu", str(paths[3]): 0}
    fw = HostDevices()
    got = kvik.read_split(paths, framework=fw, device_map=device_map, dtype="int64")
    assert [device for device, _ in got] == ["cuda:1", "cuda:1", "cpu", "cuda:0"]
    assert [a.tobytes() for _, a in got] == data
    assert [a.dtype for _, a in got] == [numpy.int64] * 4


def test_bad_device_map(tmp_path):
    paths = [tmp_path / "a", tmp_path / "b"]
    for p in paths:
        write(p, 8)
    with pytest.raises(ValueError, match=f"{paths[1]} is not in device_map"):
        kvik.read_split(paths, device_map={paths[0]: "cpu"}, framework="numpy")
    with pytest.raises(ValueError, match="device_map names .*c, which is not in paths"):
        kvik.read_split(paths, device_map={paths[0]: "cpu", paths[1]: "cpu",
                                           tmp_path / "c": "cpu"}, framework="numpy")
    with pytest.raises(ValueError, match="device_map places whole files"):
        kvik.read_split(paths[0], device_map={paths[0]: "cpu"}, framework="numpy")
    with pytest.raises(ValueError, match="give devices or device_map, not both"):
        kvik.read_split(paths, ["cpu"], "numpy", device_map={p: "cpu" for p in paths})
    with pytest.raises(TypeError, match="device_map must be a dict"):
        kvik.read_split(paths, device_map=["cpu", "cpu"], framework="numpy")
    with pytest.raises(ValueError, match="device 'gpu' is neither"):
        kvik.read_split(paths, device_map={paths[0]: "cpu", paths[1]: "gpu"}, framework="numpy")


# ---- errors ----------------------------------------------------------------------------------


def test_bad_arguments(tmp_path):
    path = tmp_path / "a.bin"
    write(path, 10004)
    for devices, error, message in (
            ("cpu", TypeError, "devices must be a list of devices, not str"),
            (0, TypeError, "devices must be a list of devices, not int"),
            ([], ValueError, "no devices to read into"),
            (["cpu", "gpu"], ValueError, "device 'gpu' is neither 'cpu' nor 'cuda'"),
            (["cuda:x"], ValueError, "neither 'cpu' nor 'cuda'"),
            ([-1], ValueError, "device -1 is not a CUDA device ordinal"),
            ([None], TypeError, "device must be a str, an int or a torch.device"),
            (["cpu", "cuda:1"], ValueError, "framework 'numpy' holds host memory")):
        with pytest.raises(error, match=message):
            kvik.read_split(path, devices, "numpy")
    with pytest.raises(ValueError, match="give devices, or device_map"):
        kvik.read_split(path, framework="numpy")
    with pytest.raises(ValueError, match="framework 'jax' is not one of"):
        kvik.read_split(path, ["cpu"], "jax")
    for align in (0, -4096, True, 1.5, "4096"):
        with pytest.raises(ValueError, match="align must be an int of at least 1"):
            kvik.read_split(path, ["cpu"], "numpy", align=align)
    for dtype, message in (("nope", "'nope' is not a dtype"), (">f4", "not in this machine's"),
                           ("float128" if hasattr(numpy, "float128") else "complex128",
                            "no dtype (float128|complex128); it reads into those of safetensors"),
                           (object, "no dtype object")):
        with pytest.raises(TypeError, match=message):
            kvik.read_split(path, ["cpu"], "numpy", dtype=dtype)
    with pytest.raises(ValueError, match=f"{path}: 10004 bytes are not a whole number of 8-byte"):
        kvik.read_split(path, ["cpu"], "numpy", dtype="float64")


def test_bad_device_reads_nothing(tmp_path, monkeypatch):
    """Devices and dtype are checked before any file is opened or memory taken."""
    opened = []
    monkeypatch.setattr(kvik._split, "CuFile", lambda *args: opened.append(args))
    with pytest.raises(ValueError):
        kvik.read_split(tmp_path / "none", ["cpu", "gpu"], "numpy")
    with pytest.raises(TypeError):
        kvik.read_split(tmp_path / "none", ["cpu"], "numpy", dtype="nope")
    assert opened == []


def test_missing_file(tmp_path):
    write(tmp_path / "a", 5000)
    fw = HostDevices()
    for paths in (tmp_path / "none", [tmp_path / "a", tmp_path / "none"]):
        with pytest.raises(FileNotFoundError, match="none") as e:
            kvik.read_split(paths, [0, 1], fw)
        assert isinstance(e.value, kvik.FileNotFound)
    assert fw.allocations == []  # opened before anything is allocated


class Shrinking:
    """A CuFile whose file loses its last `by` bytes once its size is taken."""

    def __init__(self, by):
        self.by = by

    def __call__(self, path, mode):
        self.path, self.file = path, kvik.CuFile(path, mode)
        return self

    def nbytes(self):
        size = self.file.nbytes()
        os.truncate(self.path, size - self.by)
        return size

    def pread(self, *args):
        return self.file.pread(*args)

    def close(self):
        self.file.close()


def test_file_shrinks(tmp_path, monkeypatch):
    path = tmp_path / "a.bin"
    write(path, 3 * PAGE)
    monkeypatch.setattr(kvik._split, "CuFile", Shrinking(1000))
    with pytest.raises(ValueError) as e:
        kvik.read_split(path, ["cpu"] * 3, "numpy")
    assert str(e.value) == (f"{path}: short read, 3096 of 4096 bytes at 8192: the file shrank "
                            "while it was read")
    write(path, 3 * PAGE)
    with pytest.raises(ValueError, match=f"{path}: short read, 11288 of 12288 bytes at 0"):
        kvik.read_split([path], ["cpu"] * 2, "numpy")


def test_import_stays_light():
    """read_split is on kvik; kvik.safetensors, whose adapters it uses, loads on its first call."""
    from test_kvikio_compat_names import run_fresh

    run_fresh("import sys, kvik\n"
              "assert kvik.read_split.__module__ == 'kvik._split'\n"
              "assert 'kvik.safetensors' not in sys.modules and 'numpy' not in sys.modules\n")


# ---- three devices of the fake CUDA driver ---------------------------------------------------


FAKE_SPLIT = """
import json, os, tempfile
import numpy
import kvik, kvik._split
from fake_devices import FakeFramework, contexts, cu, download


def placed(got, devices):
    '''Each array on the device it was meant for, in that device's memory.'''
    return all(g["device"] == d and g["on"] == d for g, d in zip(got, devices))


rng = numpy.random.default_rng(3)
tmp = tempfile.mkdtemp()
result = {}
sizes = [0, 1, 4095, 4096, 4097, 8193, 3 * 4096, 5 * 4096 + 3] + [
    int(n) for n in rng.integers(1, 1 << 21, 6)]
ok, parts = [], []
for size in sizes:
    path = os.path.join(tmp, f"one{size}")
    data = rng.integers(0, 256, size, dtype=numpy.uint8).tobytes()
    with open(path, "wb") as f:
        f.write(data)
    for devices in ([0, 1, 2], [2, 0], [0, 1, 2, 1, 0, 2, 1]):
        got = kvik.read_split(path, devices, FakeFramework())
        ok.append(len(got) == len(devices) and placed(got, devices)
                  and b"".join(g["bytes"] for g in got) == data)
        parts.append([size, len(devices), [g["shape"][0] for g in got]])
result["one file"] = all(ok)
result["parts"] = parts

# Typed, on record boundaries: 24-byte records of three int64.
path = os.path.join(tmp, "records")
data = rng.integers(0, 256, 24 * 1001, dtype=numpy.uint8).tobytes()
with open(path, "wb") as f:
    f.write(data)
got = kvik.read_split(path, ["cuda:1", "cuda:2", "cuda:0"], FakeFramework(), dtype="int64",
                      align=24)
result["records"] = [placed(got, [1, 2, 0]), [g["shape"] for g in got], {g["dtype"] for g in got}
                     == {"I64"}, b"".join(g["bytes"] for g in got) == data]

# A list of files: balanced, then by device_map.
sizes = [70000, 3, 65536, 4096, 0, 200000, 12345, 99999]
paths, datas = [], []
for i, size in enumerate(sizes):
    paths.append(os.path.join(tmp, f"file{i}"))
    datas.append(rng.integers(0, 256, size, dtype=numpy.uint8).tobytes())
    with open(paths[-1], "wb") as f:
        f.write(datas[-1])
got = kvik.read_split(paths, [0, 1, 2], FakeFramework())
result["balanced"] = [[g["device"] for g in got], all(g["device"] == g["on"] for g in got),
                      [g["bytes"] for g in got] == datas]
device_map = {p: i % 3 for i, p in enumerate(paths)}
got = kvik.read_split(paths, framework=FakeFramework(), device_map=device_map)
result["mapped"] = [placed(got, [i % 3 for i in range(len(paths))]),
                    [g["bytes"] for g in got] == datas]

# Errors: nothing allocated for a bad device or a missing file.
errors, before = [], len(FakeFramework.allocations)
for paths_, devices in ((path, [0, 3]), (path, ["cpu"]), ([path, path + ".none"], [0, 1])):
    try:
        kvik.read_split(paths_, devices, FakeFramework())
    except (ValueError, FileNotFoundError) as e:
        errors.append(type(e).__name__ + ": " + str(e).replace(tmp, "TMP"))
result["errors"] = errors
result["allocated on errors"] = len(FakeFramework.allocations) - before

# Every read started before any is waited for: with device 0's copies held, part 1 lands in
# device 1 while read_split still waits for part 0.
import threading, time
hold = cu.fake_cuda_hold_copies
path = os.path.join(tmp, "held")
data = rng.integers(0, 256, 1 << 21, dtype=numpy.uint8).tobytes()
with open(path, "wb") as f:
    f.write(data)
before, done = len(FakeFramework.allocations), []
hold(0, 1)
try:
    reader = threading.Thread(target=lambda: done.append(
        kvik.read_split(path, [0, 1], FakeFramework())))
    reader.start()
    deadline, landed = time.monotonic() + 20, False
    while not landed and time.monotonic() < deadline:
        time.sleep(0.01)
        if len(FakeFramework.allocations) == before + 2:
            assert cu.cuCtxSetCurrent(contexts[1]) == 0
            landed = download(FakeFramework.allocations[-1][1], 1 << 20) == data[1 << 20:]
            assert cu.cuCtxSetCurrent(contexts[0]) == 0
    result["part 1 while part 0 held"] = [landed, reader.is_alive()]
finally:
    hold(0, 0)
reader.join()
result["held"] = b"".join(g["bytes"] for g in done[0]) == data


class Shrinking:
    def __init__(self, path, mode):
        self.file = kvik.CuFile(path, mode)
        self.path = path

    def nbytes(self):
        size = self.file.nbytes()
        os.truncate(self.path, size - 5000)
        return size

    def pread(self, *args):
        return self.file.pread(*args)

    def close(self):
        self.file.close()


kvik._split.CuFile = Shrinking
try:
    kvik.read_split(path, [0, 1, 2], FakeFramework())
except ValueError as e:
    result["shrank"] = str(e).replace(tmp, "TMP")
result["cross-device copies"] = cu.fake_cuda_cross_device_copies()
print(json.dumps(result))
"""


@needs_fakes
def test_fake_devices():
    result = run_python(FAKE_SPLIT, nvcomp=False, pythonpath=(TESTS,), FAKE_CUDA_DEVICES="3")
    assert result["one file"]
    for size, devices, parts in result["parts"]:
        assert parts == expected_sizes(size, devices, PAGE), (size, devices)
    # 1001 records of 24 bytes: unit 24 (align, and a multiple of 8), 334 + 334 + 333 records.
    assert result["records"] == [True, [[1002], [1002], [999]], True, True]
    # Largest first to the least loaded: 200000 -> 0, 99999 -> 1, 70000 -> 2, 65536 -> 2 (70000 <
    # 99999), then 1 (99999 < 135536) takes the rest.
    assert result["balanced"] == [[2, 1, 2, 1, 1, 0, 1, 1], True, True]
    assert result["mapped"] == [True, True]
    assert result["part 1 while part 0 held"] == [True, True]
    assert result["held"]
    assert result["errors"] == [
        "ValueError: the fake driver has no device cuda:3",
        "ValueError: the fake driver has no device cpu",
        "FileNotFound: [Errno 2] Unable to open file: kvik_file_open(\"TMP/records.none\", "
        "\"r\"): No such file or directory"]
    assert result["allocated on errors"] == 0
    # 2 MiB in three: 171 + 171 + 170 pages, the last one 5000 bytes short.
    assert result["shrank"] == ("TMP/held: short read, 691320 of 696320 bytes at 1400832: the "
                                "file shrank while it was read")
    assert result["cross-device copies"] == 0


# ---- GPUs: PyTorch and CuPy ------------------------------------------------------------------


def _torch():
    try:
        import torch
    except ImportError as e:
        return None, f"PyTorch is not installed ({e})"
    return torch, None if torch.cuda.is_available() else "PyTorch sees no CUDA device"


torch, TORCH_MISSING = _torch()
needs_torch = pytest.mark.skipif(TORCH_MISSING is not None, reason=str(TORCH_MISSING))
needs_torch_cpu = pytest.mark.skipif(torch is None, reason=str(TORCH_MISSING))


@needs_torch_cpu
def test_torch_cpu(tmp_path):
    data = write(tmp_path / "a.bin", 3 * PAGE + 6)
    got = kvik.read_split(tmp_path / "a.bin", ["cpu", torch.device("cpu")], dtype=torch.int16)
    assert all(isinstance(t, torch.Tensor) and t.dtype == torch.int16 for t in got)
    assert torch.cat(got).numpy().tobytes() == data


@needs_torch
def test_torch_every_gpu(tmp_path):
    """One file split over every GPU PyTorch sees, each part on its own GPU; a list of files
    spread over them."""
    gpus = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    data = write(tmp_path / "a.bin", (64 << 20) + 4097)
    got = kvik.read_split(tmp_path / "a.bin", gpus)
    assert [t.device for t in got] == gpus
    assert b"".join(t.cpu().numpy().tobytes() for t in got) == data
    paths = [tmp_path / f"f{i}" for i in range(2 * len(gpus) + 1)]
    datas = [write(p, (i + 1) << 20, seed=i) for i, p in enumerate(paths)]
    got = kvik.read_split(paths, list(range(len(gpus))), dtype=torch.bfloat16)
    assert {t.device for t in got} == set(gpus)
    assert [t.cpu().view(torch.uint8).numpy().tobytes() for t in got] == datas


def test_cupy_every_gpu(tmp_path):
    from conftest import CUPY_MISSING, cupy

    if cupy is None:
        pytest.skip(CUPY_MISSING)
    count = cupy.cuda.runtime.getDeviceCount()
    data = write(tmp_path / "a.bin", (16 << 20) + 12)
    got = kvik.read_split(tmp_path / "a.bin", [f"cuda:{i}" for i in range(count)], "cupy",
                          dtype="float32")
    assert [a.device.id for a in got] == list(range(count))
    assert b"".join(cupy.asnumpy(a).tobytes() for a in got) == data
