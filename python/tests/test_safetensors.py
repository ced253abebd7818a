"""kvik.safetensors against the safetensors package (0.8.0 on the GPU machine).

On the host: files written by safetensors.numpy.save_file, loaded with framework "numpy" and
compared byte for byte and element for element, for every dtype NumPy can hold (bf16 and fp8
through ml_dtypes), random shapes and sizes, scalars and empty tensors; sharded checkpoints with an
index written as transformers writes it; subsets; a tensor at an offset its item size does not
divide; every bad input with its message; save_file's bytes against safetensors' own.

To "device": the same files into memory of the fake CUDA driver (tests/fake_cuda.c), through an
adapter the loader takes in place of a framework, in a subprocess (libcuda loads once per process,
as test_nvcomp.py says).

With PyTorch or CuPy and a GPU (they skip elsewhere): torch.equal against
safetensors.torch.load_file on "cuda:0" for every dtype, sharded checkpoints, save_file of CUDA
tensors byte for byte as safetensors.torch.save_file, and CuPy arrays.
"""
import json
import os
import struct
import subprocess
import sys

import numpy
import pytest

import kvik
import kvik.defaults
import kvik.safetensors as kst
from test_nvcomp import needs_fakes, run_python

TESTS = os.path.dirname(os.path.abspath(__file__))  # fake_devices.py, for the scripts

safetensors_numpy = pytest.importorskip("safetensors.numpy")
ml_dtypes = pytest.importorskip("ml_dtypes")

# Every dtype of safetensors 0.8.0 that a NumPy array can hold: safetensors' code -> NumPy's.
NUMPY_DTYPES = {
    "BOOL": numpy.dtype(bool),
    "U8": numpy.dtype(numpy.uint8),
    "I8": numpy.dtype(numpy.int8),
    "F8_E5M2": numpy.dtype(ml_dtypes.float8_e5m2),
    "F8_E4M3": numpy.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E8M0": numpy.dtype(ml_dtypes.float8_e8m0fnu),
    "F8_E4M3FNUZ": numpy.dtype(ml_dtypes.float8_e4m3fnuz),
    "F8_E5M2FNUZ": numpy.dtype(ml_dtypes.float8_e5m2fnuz),
    "I16": numpy.dtype(numpy.int16),
    "U16": numpy.dtype(numpy.uint16),
    "F16": numpy.dtype(numpy.float16),
    "BF16": numpy.dtype(ml_dtypes.bfloat16),
    "I32": numpy.dtype(numpy.int32),
    "U32": numpy.dtype(numpy.uint32),
    "F32": numpy.dtype(numpy.float32),
    "C64": numpy.dtype(numpy.complex64),
    "F64": numpy.dtype(numpy.float64),
    "I64": numpy.dtype(numpy.int64),
    "U64": numpy.dtype(numpy.uint64),
}


def random_array(rng, dtype, shape):
    """Random values of `dtype`: random bits, except bool (0 or 1)."""
    n = int(numpy.prod(shape, dtype=numpy.int64))
    if dtype == bool:
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    return rng.integers(0, 256, n * dtype.itemsize, dtype=numpy.uint8).view(dtype).reshape(shape)


def random_shape(rng):
    ndim = int(rng.integers(0, 4))
    return tuple(int(rng.integers(1, 9)) for _ in range(ndim))


def same(got, want):
    """Equal dtype, shape and bytes, and element for element (NaN bit patterns compare as bytes,
    so a NaN does not make equal arrays differ)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
    if want.dtype.kind in "biu":
        assert numpy.array_equal(got, want)


def same_dicts(got, want):
    assert sorted(got) == sorted(want)
    for name in want:
        same(got[name], want[name])


def root(array):
    """The array that owns `array`'s memory."""
    while isinstance(array.base, numpy.ndarray):
        array = array.base
    return array


def hand_made(path, header, data=b"", length=None):
    """A file with `header` (an object, turned to JSON, or bytes as they are) and `data`."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


def header_of(path):
    """The JSON header of a safetensors file, parsed."""
    raw = open(path, "rb").read()
    return json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])


def write_sharded(tmp_path, shards, metadata=None):
    """Shards written by safetensors and the index beside them, as transformers writes it."""
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        safetensors_numpy.save_file(tensors, tmp_path / name)
        weight_map.update({key: name for key in tensors})
        total += sum(t.nbytes for t in tensors.values())
    index = {"metadata": metadata or {"total_size": total}, "weight_map": weight_map}
    (tmp_path / kst.INDEX_NAME).write_text(json.dumps(index, indent=2))
    return tmp_path / kst.INDEX_NAME


def test_submodule_on_first_use():
    code = ("import sys, kvik\n"
            "assert 'kvik.safetensors' not in sys.modules and 'safetensors' in dir(kvik)\n"
            "assert kvik.safetensors.load_file.__module__ == 'kvik.safetensors'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# ---- host: every dtype, shapes, files of safetensors --------------------------------------------


@pytest.mark.parametrize("code", NUMPY_DTYPES)
def test_every_dtype(tmp_path, rng, code):
    dtype = NUMPY_DTYPES[code]
    tensors = {"scalar": random_array(rng, dtype, ()), "empty": random_array(rng, dtype, (0, 3)),
               "one": random_array(rng, dtype, (1,)), "matrix": random_array(rng, dtype, (17, 5)),
               "cube": random_array(rng, dtype, (3, 4, 5))}
    safetensors_numpy.save_file(tensors, tmp_path / "a.safetensors")
    assert header_of(tmp_path / "a.safetensors")["matrix"]["dtype"] == code
    got = kst.load_file(tmp_path / "a.safetensors", framework="numpy")
    same_dicts(got, tensors)
    same_dicts(kst.load_file(str(tmp_path / "a.safetensors"), device="cpu", framework="np"),
               tensors)


def test_random_mix(tmp_path, rng):
    """Many tensors of random dtypes and shapes in one file written by safetensors."""
    codes = list(NUMPY_DTYPES)
    tensors = {f"layer.{i}.w": random_array(rng, NUMPY_DTYPES[codes[rng.integers(len(codes))]],
                                            random_shape(rng)) for i in range(120)}
    tensors["big"] = random_array(rng, NUMPY_DTYPES["BF16"], (1024, 300))
    path = tmp_path / "mix.safetensors"
    safetensors_numpy.save_file(tensors, path, metadata={"format": "np"})
    got = kst.load_file(path, framework="numpy")
    same_dicts(got, tensors)
    # In the order of their data, as safetensors' load_file returns them; in one allocation.
    offsets = header_of(path)
    offsets.pop("__metadata__")
    assert list(got) == sorted(offsets, key=lambda n: offsets[n]["data_offsets"])
    assert len({id(root(a)) for a in got.values() if a.nbytes}) == 1


def test_one_allocation_aligned(tmp_path, rng):
    tensors = {f"t{i}": random_array(rng, NUMPY_DTYPES["F32"], (i + 1, 3)) for i in range(10)}
    path = tmp_path / "a.safetensors"
    safetensors_numpy.save_file(tensors, path)
    got = kst.load_file(path, framework="numpy")
    base = root(got["t0"])
    assert all(root(a) is base for a in got.values())
    data = sum(t.nbytes for t in tensors.values())
    assert base.nbytes - data < 2 * 256  # the data, and its alignment
    first = min(a.ctypes.data for a in got.values())
    assert first % 256 == 0


def test_unaligned_tensor_is_copied(tmp_path):
    """safetensors does not promise aligned offsets: an F32 at byte 1 of the data (and the I16 and
    F64 after it) cannot be a view, and each comes in memory of its own; the rest stay views."""
    header = {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
              "b": {"dtype": "F32", "shape": [3], "data_offsets": [1, 13]},
              "c": {"dtype": "I16", "shape": [2], "data_offsets": [13, 17]},
              "d": {"dtype": "F64", "shape": [1], "data_offsets": [17, 25]},
              "e": {"dtype": "U8", "shape": [3], "data_offsets": [25, 28]},
              "f": {"dtype": "F32", "shape": [1], "data_offsets": [28, 32]}}
    b = numpy.array([1.5, -2.25, 3e30], dtype="<f4")
    c = numpy.array([-7, 300], dtype="<i2")
    d = numpy.array([2.0 ** 0.5])
    f = numpy.array([-0.5], dtype="<f4")
    path = hand_made(tmp_path / "odd.safetensors", header,
                     b"\x05" + b.tobytes() + c.tobytes() + d.tobytes() + b"xyz" + f.tobytes())
    got = kst.load_file(path, framework="numpy")
    same(got["a"], numpy.array([5], numpy.uint8))
    same(got["b"], b)
    same(got["c"], c)
    same(got["d"], d)
    same(got["f"], f)
    for name in "bcd":
        assert got[name].ctypes.data % got[name].itemsize == 0
        assert root(got[name]) is not root(got["a"])
    assert root(got["e"]) is root(got["f"]) is root(got["a"])  # F32 at 28: a view
    # The same file through safetensors, which copies every tensor.
    same_dicts(got, safetensors_numpy.load_file(path))


def test_scalar_and_empty_only(tmp_path):
    tensors = {"s": numpy.array(7, numpy.int64), "e": numpy.zeros((4, 0), numpy.float32)}
    safetensors_numpy.save_file(tensors, tmp_path / "a.safetensors")
    same_dicts(kst.load_file(tmp_path / "a.safetensors", framework="np"), tensors)
    safetensors_numpy.save_file({}, tmp_path / "none.safetensors")
    assert kst.load_file(tmp_path / "none.safetensors", framework="np") == {}


# ---- sharded checkpoints, subsets, safe_open ----------------------------------------------------


def test_sharded(tmp_path, rng):
    shards = [{f"s{s}.t{i}": random_array(rng, NUMPY_DTYPES[code], random_shape(rng))
               for i, code in enumerate(NUMPY_DTYPES)} for s in range(4)]
    index = write_sharded(tmp_path, shards)
    want = {k: v for shard in shards for k, v in shard.items()}
    for where in (tmp_path, index, str(index)):
        got = kst.load_file(where, framework="numpy")
        same_dicts(got, want)
    # In the order of their data, shard after shard.
    order = []
    for s in range(4):
        header = header_of(tmp_path / f"model-{s + 1:05d}-of-00004.safetensors")
        order += sorted(header, key=lambda n: header[n]["data_offsets"])
    assert list(got) == order
    assert len({id(root(a)) for a in got.values() if a.nbytes}) == 1
    with kst.safe_open(tmp_path, framework="np") as f:
        assert f.metadata() == {"total_size": sum(a.nbytes for a in want.values())}
        assert f.keys() == sorted(want)
        same(f.get_tensor("s2.t3"), want["s2.t3"])


def test_sharded_index_names_part_of_a_shard(tmp_path, rng):
    """A tensor in a shard but not in the index is not loaded (transformers loads by the index)."""
    shards = [{"a": random_array(rng, NUMPY_DTYPES["F32"], (4, 4)),
               "b": random_array(rng, NUMPY_DTYPES["I8"], (3,))},
              {"c": random_array(rng, NUMPY_DTYPES["U16"], (5,))}]
    index = write_sharded(tmp_path, shards)
    body = json.loads(index.read_text())
    del body["weight_map"]["b"]
    index.write_text(json.dumps(body))
    got = kst.load_file(tmp_path, framework="numpy")
    same_dicts(got, {"a": shards[0]["a"], "c": shards[1]["c"]})


def test_sharded_index_names_a_shard_two_ways(tmp_path, rng):
    """"./shard" and "shard" in the index are one shard: read once, into one allocation."""
    shards = [{"a": random_array(rng, NUMPY_DTYPES["F32"], (64, 4)),
               "b": random_array(rng, NUMPY_DTYPES["F32"], (64, 4))},
              {"c": random_array(rng, NUMPY_DTYPES["U16"], (5,))}]
    index = write_sharded(tmp_path, shards)
    body = json.loads(index.read_text())
    body["weight_map"]["b"] = "./" + body["weight_map"]["b"]
    index.write_text(json.dumps(body))
    got = kst.load_file(tmp_path, framework="numpy")
    same_dicts(got, {**shards[0], **shards[1]})
    assert root(got["a"]).nbytes <= 2 * (64 * 4 * 4) + 256 + 10  # shard 1, its alignment, shard 2


def test_subset(tmp_path, rng):
    tensors = {f"t{i:02d}": random_array(rng, NUMPY_DTYPES["F32"], (64, 16)) for i in range(20)}
    tensors["odd"] = random_array(rng, NUMPY_DTYPES["U8"], (3,))
    path = tmp_path / "a.safetensors"
    safetensors_numpy.save_file(tensors, path)
    names = ["t03", "t04", "t05", "t11", "odd"]  # t03..t05 adjacent: one read
    got = kst.load_file(path, framework="numpy", names=names)
    same_dicts(got, {n: tensors[n] for n in names})
    # A compact allocation: the five tensors and the alignment of their two or three spans.
    assert root(got["t03"]).nbytes < sum(tensors[n].nbytes for n in names) + 3 * 256
    with pytest.raises(KeyError, match="no tensor 'nope'"):
        kst.load_file(path, framework="numpy", names=["t01", "nope"])
    assert kst.load_file(path, framework="numpy", names=[]) == {}


def test_subset_sharded(tmp_path, rng):
    shards = [{f"s{s}.t{i}": random_array(rng, NUMPY_DTYPES["BF16"], (8, i + 1)) for i in range(5)}
              for s in range(3)]
    write_sharded(tmp_path, shards)
    names = ["s0.t1", "s2.t4", "s2.t0"]
    got = kst.load_file(tmp_path, framework="numpy", names=iter(names))
    same_dicts(got, {n: shards[int(n[1])][n] for n in names})


def direct_io_works(directory):
    try:
        os.close(os.open(directory / "probe", os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600))
    except OSError:
        return False
    return True


def test_direct_io(tmp_path, rng):
    """direct_io=True reads a file the page cache lacks with O_DIRECT, so that it stays out of the
    cache; False reads it through the cache; None follows defaults' auto_direct_io_read. The
    tensors are the file's either way."""
    if not direct_io_works(tmp_path):
        pytest.skip(f"no O_DIRECT in {tmp_path}")
    tensors = {f"t{i}": random_array(rng, NUMPY_DTYPES["F32"], (256, 1024)) for i in range(8)}
    path = tmp_path / "a.safetensors"
    safetensors_numpy.save_file(tensors, path)
    kvik.drop_file_page_cache(path)
    if kvik.get_page_cache_info(path)[0] != 0:
        pytest.skip("this file system keeps its pages")  # as test_misc's page-cache tests do
    for direct_io, setting in ((True, False), (False, True), (None, True), (None, False)):
        kvik.drop_file_page_cache(path)
        with kvik.defaults.set("auto_direct_io_read", setting):
            same_dicts(kst.load_file(path, framework="numpy", direct_io=direct_io), tensors)
        resident, total = kvik.get_page_cache_info(path)
        direct = setting if direct_io is None else direct_io
        assert (resident < total // 4) if direct else (resident > total * 3 // 4), \
            (direct_io, setting, resident, total)


def test_safe_open(tmp_path, rng):
    tensors = {"w": random_array(rng, NUMPY_DTYPES["F32"], (6, 5)),
               "b": random_array(rng, NUMPY_DTYPES["BF16"], (5,))}
    path = tmp_path / "a.safetensors"
    safetensors_numpy.save_file(tensors, path, metadata={"format": "np"})
    from safetensors import safe_open as reference

    with kst.safe_open(path, framework="numpy") as f, reference(path, framework="numpy") as r:
        assert f.keys() == list(r.keys()) == ["b", "w"]
        assert f.metadata() == r.metadata() == {"format": "np"}
        assert f.offset_keys() == list(r.offset_keys())
        for name in f.keys():
            same(f.get_tensor(name), tensors[name])
        s = f.get_slice("w")
        assert s.get_shape() == r.get_slice("w").get_shape() == [6, 5]
        assert s.get_dtype() == r.get_slice("w").get_dtype() == "F32"
        w = tensors["w"]
        for index in (numpy.s_[1:4, ::2], numpy.s_[2], numpy.s_[-1], numpy.s_[-2, 1:],
                      numpy.s_[2:2], numpy.s_[::2], numpy.s_[..., 1], numpy.s_[1:4]):
            same(numpy.asarray(s[index]), numpy.asarray(w[index]))
            same(numpy.asarray(s[index]), numpy.asarray(r.get_slice("w")[index]))
        # Where safetensors refuses (a slice past the end, a list), NumPy's rules.
        same(s[4:100], w[4:100])
        same(s[[0, 3]], w[[0, 3]])
        same_dicts(f.get_tensors(), tensors)
        with pytest.raises(KeyError):
            f.get_tensor("nope")
    safetensors_numpy.save_file(tensors, tmp_path / "plain.safetensors")
    with kst.safe_open(tmp_path / "plain.safetensors", "np") as f:
        assert f.metadata() is None


def test_get_slice_reads_rows(tmp_path, rng):
    """The rows of a first index of step 1 are all get_slice reads, into memory of their own."""
    w = random_array(rng, NUMPY_DTYPES["F32"], (1000, 64))
    safetensors_numpy.save_file({"w": w, "b": numpy.arange(3)}, tmp_path / "a.safetensors")
    with kst.safe_open(tmp_path / "a.safetensors", "np") as f:
        s = f.get_slice("w")
        for index, rows in ((numpy.s_[10:20], 10), (numpy.s_[-3], 1), (numpy.s_[5:7, ::8], 2)):
            part = s[index]
            same(part, w[index])
            assert root(part).nbytes < rows * 64 * 4 + 2 * 256
        same(s[::2], w[::2])  # step 2: the whole tensor read, the rows copied


def test_devices_and_frameworks(tmp_path):
    path = tmp_path / "a.safetensors"
    safetensors_numpy.save_file({"a": numpy.arange(3)}, path)
    for device in ("cuda", "cuda:1", 0):
        with pytest.raises(ValueError, match="framework 'numpy' holds host memory"):
            kst.load_file(path, device=device, framework="numpy")
    for device in ("gpu", "cuda:x", "cpu:0"):
        with pytest.raises(ValueError, match="neither 'cpu' nor 'cuda'"):
            kst.load_file(path, device=device, framework="numpy")
    with pytest.raises(ValueError, match="framework 'jax' is not one of"):
        kst.load_file(path, framework="jax")
    with pytest.raises(TypeError, match="device must be"):
        kst.load_file(path, device=1.0, framework="np")
    assert kst._parse_device("cuda:3") == ("cuda", 3)
    assert kst._parse_device(2) == ("cuda", 2)
    assert kst._parse_device("cpu") == ("cpu", None)


def test_numpy_without_ml_dtypes(tmp_path, monkeypatch, rng):
    path = tmp_path / "a.safetensors"
    safetensors_numpy.save_file({"a": random_array(rng, NUMPY_DTYPES["BF16"], (3,)),
                                 "b": numpy.arange(3)}, path)
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(TypeError, match="NumPy needs the ml_dtypes package for safetensors' BF16"):
        kst.load_file(path, framework="numpy")
    same(kst.load_file(path, framework="numpy", names=["b"])["b"], numpy.arange(3))


def test_packed_dtypes_have_no_numpy_dtype(tmp_path):
    header = {"f4": {"dtype": "F4", "shape": [2, 4], "data_offsets": [0, 4]},
              "f6": {"dtype": "F6_E2M3", "shape": [4], "data_offsets": [4, 7]}}
    path = hand_made(tmp_path / "a.safetensors", header, bytes(7))
    with pytest.raises(TypeError, match="NumPy has no dtype for safetensors' F4"):
        kst.load_file(path, framework="numpy", names=["f4"])
    with pytest.raises(TypeError, match="NumPy has no dtype for safetensors' F6_E2M3"):
        kst.load_file(path, framework="numpy", names=["f6"])
    with kst.safe_open(path, "np") as f:  # the header itself is good
        assert f.get_slice("f4").get_shape() == [2, 4]


# ---- bad input ---------------------------------------------------------------------------------

GOOD = {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "U8", "shape": [4], "data_offsets": [8, 12]}}


def entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


BAD_HEADERS = {
    "not JSON": (b'{"a": {"dtype": "F32",', "the header is not JSON: "),
    "not UTF-8": (b'{"\xff": 1}', "the header is not UTF-8"),
    "an array": (b"[1, 2]", "the header is an array, not a JSON object"),
    "NaN": (b'{"__metadata__": {"x": NaN}}', "the header holds NaN, which is not JSON"),
    "twice": (b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
              b'"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}',
              "the header names 'a' twice"),
    "entry not an object": ({"a": [0, 8]}, "tensor 'a': its entry is an array, not an object"),
    "no offsets": ({"a": {"dtype": "F32", "shape": [2]}}, "tensor 'a': its entry lacks "
                   "data_offsets"),
    "no fields": ({"a": {}}, "tensor 'a': its entry lacks dtype, shape, data_offsets"),
    "float offsets": ({"a": entry(offsets=(0.0, 8))}, "tensor 'a': data_offsets [0.0, 8] are not "
                      "two ints 0 <= begin <= end"),
    "bool offsets": ({"a": entry(offsets=(False, 8))}, "are not two ints"),
    "three offsets": ({"a": entry(offsets=(0, 4, 8))}, "are not two ints"),
    "reversed offsets": ({"a": entry(offsets=(8, 0))}, "are not two ints"),
    "negative offsets": ({"a": entry(offsets=(-8, 0))}, "are not two ints"),
    "shape not ints": ({"a": entry(shape=("2",))}, "tensor 'a': shape ['2'] is not a list of "
                       "non-negative ints"),
    "negative shape": ({"a": entry(shape=(-2,))}, "is not a list of non-negative ints"),
    "unknown dtype": ({"a": entry(dtype="F128")}, "tensor 'a': unknown dtype 'F128'"),
    "dtype not a string": ({"a": entry(dtype=4)}, "tensor 'a': unknown dtype 4"),
    "shape too big": ({"a": entry(shape=(2, 2))}, "tensor 'a': shape [2, 2] of F32 is 16 bytes, "
                      "but its data_offsets [0, 8] hold 8"),
    "shape too small": ({"a": entry(shape=(1,))}, "is 4 bytes, but its data_offsets [0, 8] hold 8"),
    "odd F4": ({"a": entry(dtype="F4", shape=(3,), offsets=(0, 8))},
               "tensor 'a': shape [3] of F4 is not a whole number of bytes"),
    "overlap": ({"a": entry(), "b": entry("U8", (4,), (6, 10)), "c": entry("U8", (2,), (10, 12))},
                "tensor 'b': data_offsets [6, 10] overlap tensor 'a' at [0, 8]"),
    "same range": ({"a": entry(), "b": entry()}, "overlap tensor"),
    "gap": ({"a": entry(), "b": entry("U8", (2,), (10, 12))},
            "a gap in the data: bytes [8, 10) belong to no tensor"),
    "gap first": ({"b": entry("U8", (4,), (8, 12))}, "a gap in the data: bytes [0, 8) belong"),
    "past the data": ({"a": entry(), "b": entry("U8", (8,), (8, 16))},
                      "tensor 'b': data_offsets [8, 16] run past the data (12 bytes)"),
    "trailing bytes": ({"a": entry(), "b": entry("U8", (2,), (8, 10))},
                       "a gap in the data: bytes [10, 12) belong to no tensor"),
    "metadata not strings": ({"__metadata__": {"n": 1}, **GOOD},
                             "__metadata__ is not an object of strings"),
    "metadata an array": ({"__metadata__": ["x"], **GOOD},
                          "__metadata__ is not an object of strings"),
}


@pytest.mark.parametrize("case", BAD_HEADERS)
def test_bad_header(tmp_path, case):
    header, message = BAD_HEADERS[case]
    path = hand_made(tmp_path / "bad.safetensors", header, bytes(12))
    with pytest.raises(ValueError) as e:
        kst.load_file(path, framework="numpy")
    assert str(e.value).startswith(f"{path}: ")
    assert message in str(e.value)
    with pytest.raises(ValueError, match="^" + str(path)):
        kst.safe_open(path, "np")


def test_good_header_passes(tmp_path):
    """The file BAD_HEADERS breaks, whole: what they report is theirs."""
    data = numpy.array([1, 2], "<f4").tobytes() + b"abcd"
    path = hand_made(tmp_path / "good.safetensors", GOOD, data)
    got = kst.load_file(path, framework="numpy")
    same(got["a"], numpy.array([1, 2], numpy.float32))
    same(got["b"], numpy.frombuffer(b"abcd", numpy.uint8))


@pytest.mark.parametrize("size", [0, 5])
def test_truncated_length(tmp_path, size):
    path = tmp_path / "short.safetensors"
    path.write_bytes(b"\x10" * size)
    with pytest.raises(ValueError, match=f"truncated: {size} bytes, less than the 8-byte header "
                                         "length"):
        kst.load_file(path, framework="numpy")


def test_header_length_past_the_end(tmp_path):
    path = hand_made(tmp_path / "long.safetensors", GOOD, bytes(12), length=5000)
    size = path.stat().st_size
    with pytest.raises(ValueError, match=f"header length 5000 is past the end of the file "
                                         f"\\({size} bytes\\)"):
        kst.load_file(path, framework="numpy")


def test_truncated_data(tmp_path, rng):
    """A file cut short in its data: its last tensor runs past the data."""
    path = tmp_path / "a.safetensors"
    safetensors_numpy.save_file({"a": random_array(rng, NUMPY_DTYPES["F32"], (100,))}, path)
    os.truncate(path, path.stat().st_size - 1)
    with pytest.raises(ValueError, match="tensor 'a': data_offsets \\[0, 400\\] run past the "
                                         "data \\(399 bytes\\)"):
        kst.load_file(path, framework="numpy")


def test_header_over_the_limit(tmp_path):
    path = hand_made(tmp_path / "huge.safetensors", b"{}", length=100_000_001)
    os.truncate(path, 100_000_100)  # sparse
    with pytest.raises(ValueError, match="header length 100000001 is over safetensors' limit"):
        kst.load_file(path, framework="numpy")


def test_file_shrinks_while_read(tmp_path, rng):
    """The header was good when read; the data is gone when the tensor is: no tensor on partial
    data."""
    path = tmp_path / "a.safetensors"
    safetensors_numpy.save_file({"a": random_array(rng, NUMPY_DTYPES["U8"], (3000,))}, path)
    with kst.safe_open(path, "np") as f:
        os.truncate(path, path.stat().st_size - 1000)
        with pytest.raises(ValueError) as e:
            f.get_tensor("a")
    assert str(e.value).startswith(f"{path}: short read, 2000 of 3000 bytes at ")


def test_bad_index(tmp_path, rng):
    shards = [{"a": random_array(rng, NUMPY_DTYPES["F32"], (4,))},
              {"b": random_array(rng, NUMPY_DTYPES["I8"], (4,))}]
    index = write_sharded(tmp_path, shards)
    body = json.loads(index.read_text())

    def broken(change):
        copy = json.loads(json.dumps(body))
        change(copy)
        index.write_text(json.dumps(copy))
        with pytest.raises(ValueError) as e:
            kst.load_file(tmp_path, framework="numpy")
        assert str(e.value).startswith(f"{index}: ")
        return str(e.value)

    assert "shard 'gone.safetensors' (of tensor 'b') does not exist" in broken(
        lambda b: b["weight_map"].update(b="gone.safetensors"))
    assert "tensor 'q' is not in its shard " in broken(
        lambda b: b["weight_map"].update(q=b["weight_map"]["a"]))
    assert "the index has no weight_map" in broken(lambda b: b.pop("weight_map"))
    assert "the index has no weight_map" in broken(lambda b: b.update(weight_map={"a": 1}))
    index.write_text("{")
    with pytest.raises(ValueError, match=f"^{index}: the index is not JSON"):
        kst.load_file(index, framework="numpy")
    os.remove(index)
    with pytest.raises(ValueError, match=f"^{tmp_path}: a directory without "
                                         "model.safetensors.index.json"):
        kst.load_file(tmp_path, framework="numpy")


def test_bad_shard(tmp_path, rng):
    """A shard's own defect names the shard."""
    shards = [{"a": random_array(rng, NUMPY_DTYPES["F32"], (4,))},
              {"b": random_array(rng, NUMPY_DTYPES["I8"], (4,))}]
    write_sharded(tmp_path, shards)
    shard = tmp_path / "model-00002-of-00002.safetensors"
    os.truncate(shard, shard.stat().st_size - 2)
    with pytest.raises(ValueError, match=f"^{shard}: tensor 'b': data_offsets"):
        kst.load_file(tmp_path, framework="numpy")


def refuse_memory(monkeypatch):
    """Make NumPy's allocations for the loader fail, as an allocation larger than the memory
    would; returns the list of sizes asked for."""
    asked = []

    def empty(self, nbytes):
        asked.append(nbytes)
        raise MemoryError(f"no {nbytes} bytes")

    monkeypatch.setattr(kvik._frameworks.NumPy, "empty", empty)
    return asked


def test_whole_load_allocation_fails_on_bad_header(tmp_path, monkeypatch):
    """A whole load allocates before it parses the header; when the allocation fails, a bad
    header is the error, as it is where the allocation succeeds."""
    path = hand_made(tmp_path / "gap.safetensors", BAD_HEADERS["gap"][0], bytes(12))
    asked = refuse_memory(monkeypatch)
    with pytest.raises(ValueError, match="a gap in the data: bytes \\[8, 10\\)"):
        kst.load_file(path, framework="numpy")
    assert asked == [12]  # the whole data section, before parsing
    good = hand_made(tmp_path / "good.safetensors", GOOD, bytes(12))
    with pytest.raises(MemoryError):
        kst.load_file(good, framework="numpy")


def test_not_an_object_is_parsed_first(tmp_path, monkeypatch):
    """A header that is not braces around something (a file that is not safetensors) is parsed
    before any memory is taken for its data."""
    asked = refuse_memory(monkeypatch)
    for header in (b"[1, 2]", b"  {\"a\": 1", b"\x00\x01garbage"):
        path = hand_made(tmp_path / "x.safetensors", header, bytes(1 << 20))
        with pytest.raises(ValueError, match="^" + str(path)):
            kst.load_file(path, framework="numpy")
    assert asked == []


# ---- save_file ---------------------------------------------------------------------------------


@pytest.mark.parametrize("metadata", [None, {}, {"format": "pt"}, {"é": "ü\"\\\n\t<\x01"}])
def test_save_bytes_equal(tmp_path, rng, metadata):
    tensors = {f"{code.lower()}.{i}": random_array(rng, dtype, random_shape(rng))
               for i, (code, dtype) in enumerate(NUMPY_DTYPES.items())}
    tensors.update({"z.scalar": numpy.array(3.5, numpy.float32),
                    "a.empty": numpy.zeros((0, 4), numpy.int16),
                    "ünïcode": numpy.arange(5, dtype=numpy.uint8)})
    safetensors_numpy.save_file(tensors, tmp_path / "theirs.safetensors", metadata=metadata)
    kst.save_file(tensors, tmp_path / "ours.safetensors", metadata=metadata)
    assert (tmp_path / "ours.safetensors").read_bytes() == \
        (tmp_path / "theirs.safetensors").read_bytes()


def test_save_metadata_of_many_keys(tmp_path, rng):
    """safetensors writes __metadata__ in the order of a Rust HashMap, which changes from run to
    run; kvik in the dict's order. The rest is byte for byte the same."""
    tensors = {"a": random_array(rng, NUMPY_DTYPES["F16"], (3, 3))}
    metadata = {"z": "1", "a": "2", "m": "3"}
    safetensors_numpy.save_file(tensors, tmp_path / "theirs.safetensors", metadata=metadata)
    kst.save_file(tensors, tmp_path / "ours.safetensors", metadata=metadata)
    ours, theirs = ((tmp_path / n).read_bytes() for n in ("ours.safetensors", "theirs.safetensors"))
    assert len(ours) == len(theirs) and ours[:8] == theirs[:8]
    n = struct.unpack("<Q", ours[:8])[0]
    assert json.loads(ours[8:8 + n]) == json.loads(theirs[8:8 + n])
    assert list(json.loads(ours[8:8 + n])["__metadata__"]) == ["z", "a", "m"]
    assert ours[8 + n:] == theirs[8 + n:]


def test_save_non_contiguous_and_big_endian(tmp_path, rng):
    a = random_array(rng, NUMPY_DTYPES["F32"], (8, 6))
    tensors = {"t": a.T, "s": a[::2, 1:4], "be": a.astype(">f4")}
    kst.save_file(tensors, tmp_path / "ours.safetensors")
    safetensors_numpy.save_file({"t": numpy.ascontiguousarray(a.T), "s": a[::2, 1:4].copy(),
                                 "be": a.astype(">f4")}, tmp_path / "theirs.safetensors")
    assert (tmp_path / "ours.safetensors").read_bytes() == \
        (tmp_path / "theirs.safetensors").read_bytes()
    got = kst.load_file(tmp_path / "ours.safetensors", framework="numpy")
    same(got["t"], numpy.ascontiguousarray(a.T))
    assert numpy.array_equal(got["be"], a)


def test_round_trip(tmp_path, rng):
    tensors = {f"w{i}": random_array(rng, NUMPY_DTYPES[code], random_shape(rng))
               for i, code in enumerate(list(NUMPY_DTYPES) * 3)}
    path = tmp_path / "a.safetensors"
    kst.save_file(tensors, path, metadata={"k": "v"})
    same_dicts(kst.load_file(path, framework="numpy"), tensors)
    with kst.safe_open(path, "np") as f:
        assert f.metadata() == {"k": "v"}
    # safetensors.numpy reads back what it has dtypes for (no fp8 nor bf16 of its own).
    plain = {k: v for k, v in tensors.items() if v.dtype.type.__module__ == "numpy"}
    kst.save_file(plain, path)
    same_dicts(safetensors_numpy.load_file(path), plain)


def test_save_bad_arguments(tmp_path):
    path = tmp_path / "a.safetensors"
    with pytest.raises(ValueError, match="metadata must be a dict of str to str"):
        kst.save_file({"a": numpy.arange(2)}, path, metadata={"n": 1})
    with pytest.raises(ValueError, match="tensors must be a dict of names to tensors"):
        kst.save_file([numpy.arange(2)], path)
    with pytest.raises(ValueError, match="tensor 'a' is a list, not an array"):
        kst.save_file({"a": [1, 2]}, path)
    with pytest.raises(ValueError, match="tensor 'a': safetensors has no dtype for str32"):
        kst.save_file({"a": numpy.array(["x"])}, path)


# ---- "device": the fake CUDA driver -----------------------------------------------------------

FAKE_DEVICE = """
import ctypes, json, os, sys, tempfile
import numpy, ml_dtypes
import kvik.safetensors as kst
from safetensors.numpy import save_file, load_file
cu = ctypes.CDLL("libcuda.so.1")
ctx = ctypes.c_void_p()
assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0


class Device:
    '''Bytes of fake device memory, behind __cuda_array_interface__; `dtype` and `shape` when it
    stands for an array to save.'''
    def __init__(self, size, ptr=None, dtype=None, shape=None):
        if ptr is None:
            p = ctypes.c_uint64()
            assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(max(size, 1))) == 0
            ptr = p.value
        self.ptr, self.size, self.dtype, self.shape = ptr, size, dtype, shape
        self.__cuda_array_interface__ = {
            "data": (ptr, False), "shape": (size,), "typestr": "|u1", "version": 3}

    def download(self):
        out = ctypes.create_string_buffer(self.size)
        if self.size:
            size = ctypes.c_size_t(self.size)
            assert cu.cuMemcpyDtoH_v2(out, ctypes.c_uint64(self.ptr), size) == 0
        return out.raw

    @classmethod
    def upload(cls, array):
        raw = array.tobytes()
        d = cls(len(raw), dtype=array.dtype, shape=array.shape)
        if raw:
            assert cu.cuMemcpyHtoD_v2(ctypes.c_uint64(d.ptr), raw, ctypes.c_size_t(len(raw))) == 0
        return d


class FakeFramework:
    '''What kvik.safetensors asks of a framework, over the fake driver.'''
    def __init__(self):
        self.allocations = []

    def dtype(self, code):
        return code

    def empty(self, nbytes):
        self.allocations.append(Device(nbytes))
        return self.allocations[-1]

    def region(self, buf, start, stop):
        return Device(stop - start, buf.ptr + start)

    def view(self, buf, start, stop, dtype, shape):
        return {"at": buf.ptr + start, "dtype": dtype, "shape": shape,
                "bytes": Device(stop - start, buf.ptr + start).download().hex(),
                "base": buf.ptr}

    def copy(self, buf, start, stop):
        out = self.empty(stop - start)
        raw = Device(stop - start, buf.ptr + start).download()
        assert cu.cuMemcpyHtoD_v2(ctypes.c_uint64(out.ptr), raw, ctypes.c_size_t(len(raw))) == 0
        return out


def check(got, want):
    assert sorted(got) == sorted(want), (sorted(got), sorted(want))
    for name, array in want.items():
        g = got[name]
        assert bytes.fromhex(g["bytes"]) == array.tobytes(), name
        assert list(g["shape"]) == list(array.shape), name


rng = numpy.random.default_rng(7)
tmp = tempfile.mkdtemp()
result = {}
dtypes = [bool, numpy.uint8, numpy.int8, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn,
          numpy.int16, numpy.float16, ml_dtypes.bfloat16, numpy.int32, numpy.float32,
          numpy.complex64, numpy.float64, numpy.int64, numpy.uint64]
tensors = {}
for i, dtype in enumerate(dtypes * 3):
    shape = tuple(int(n) for n in rng.integers(1, 40, int(rng.integers(0, 4))))
    raw = rng.integers(0, 2 if dtype is bool else 256, int(numpy.prod(shape)) *
                       numpy.dtype(dtype).itemsize, dtype=numpy.uint8)
    tensors[f"t{i}"] = raw.view(dtype).reshape(shape)
tensors["empty"] = numpy.zeros((0, 2), numpy.float32)
path = os.path.join(tmp, "a.safetensors")
save_file(tensors, path)
fw = FakeFramework()
got = kst.load_file(path, framework=fw)
check(got, tensors)
result["one allocation"] = len(fw.allocations) == 1 and len({g["base"] for g in got.values()}) == 1
result["aligned"] = fw.allocations[0].ptr % 256 == 0

# Sharded, and a subset of it.
index = {"metadata": {"total_size": "0"}, "weight_map": {}}
names = list(tensors)
for s in range(3):
    part = {n: tensors[n] for n in names[s::3]}
    save_file(part, os.path.join(tmp, f"shard{s}.safetensors"))
    index["weight_map"].update({n: f"shard{s}.safetensors" for n in part})
with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
    json.dump(index, f)
fw = FakeFramework()
check(kst.load_file(tmp, framework=fw), tensors)
result["sharded allocations"] = len(fw.allocations)
fw = FakeFramework()
subset = ["t1", "t5", "t6", "t30"]
got = kst.load_file(os.path.join(tmp, "model.safetensors.index.json"), framework=fw, names=subset)
check(got, {n: tensors[n] for n in subset})
result["subset size"] = [fw.allocations[0].size, sum(tensors[n].nbytes for n in subset)]

# An F32 at byte 1: copied to memory of its own.
header = json.dumps({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                     "b": {"dtype": "F32", "shape": [2], "data_offsets": [1, 9]}}).encode()
odd = os.path.join(tmp, "odd.safetensors")
with open(odd, "wb") as f:
    data = b"\\x07" + numpy.array([1.5, 2], "<f4").tobytes()
    f.write(len(header).to_bytes(8, "little") + header + data)
fw = FakeFramework()
got = kst.load_file(odd, framework=fw)
check(got, {"a": numpy.array([7], numpy.uint8), "b": numpy.array([1.5, 2], numpy.float32)})
result["odd"] = [len(fw.allocations), got["b"]["at"] % 4, got["b"]["base"] != got["a"]["base"]]

# save_file from device memory: the bytes of safetensors.numpy.save_file.
device = {name: Device.upload(array) for name, array in tensors.items()}
ours = os.path.join(tmp, "ours.safetensors")
kst.save_file(device, ours, metadata={"format": "np"})
save_file(tensors, os.path.join(tmp, "theirs.safetensors"), metadata={"format": "np"})
with open(ours, "rb") as f, open(os.path.join(tmp, "theirs.safetensors"), "rb") as g:
    result["save"] = f.read() == g.read()
print(json.dumps(result))
"""


@needs_fakes
def test_fake_device():
    result = run_python(FAKE_DEVICE, nvcomp=False)
    assert result["one allocation"] and result["aligned"]
    assert result["sharded allocations"] == 1
    size, data = result["subset size"]
    assert data <= size < data + 4 * 256
    assert result["odd"] == [2, 0, True]
    assert result["save"]


def test_placement():
    names = ["model.embed.w", "model.layers.1.w", "model.layers.10.w", "model.layers.1",
             "lm_head.weight", "other"]
    device_map = {"model.layers.1": 1, "model.layers.10": "cuda:2", "model": "cuda",
                  "lm_head": torch_device_or("cuda:3")}
    assert kst._placement(names[:-1], device_map, None) == {
        "cuda:0": ["model.embed.w"], "cuda:1": ["model.layers.1.w", "model.layers.1"],
        "cuda:2": ["model.layers.10.w"], "cuda:3": ["lm_head.weight"]}
    with pytest.raises(ValueError, match="'other' is not covered by device_map"):
        kst._placement(names, device_map, None)
    assert kst._placement(names, device_map, "cpu")["cpu"] == ["other"]
    assert kst._placement(names, {"": "cpu", "lm_head": 0}, None) == {
        "cpu": ["model.embed.w", "model.layers.1.w", "model.layers.10.w", "model.layers.1",
                "other"], "cuda:0": ["lm_head.weight"]}
    with pytest.raises(ValueError, match="'disk': kvik.safetensors loads into memory"):
        kst._placement(names, {"": "disk"}, None)
    with pytest.raises(TypeError, match="device_map must be a dict"):
        kst._placement(names, ["cpu"], None)
    with pytest.raises(ValueError, match="neither 'cpu' nor 'cuda'"):
        kst._placement(names, {"": "mps"}, None)


def torch_device_or(name):
    """A torch.device where PyTorch is installed (accelerate's maps hold them), else the name."""
    try:
        import torch
    except ImportError:
        return name
    return torch.device(name)


def test_device_map_host(tmp_path, rng):
    tensors = {f"m.{i}.w": random_array(rng, NUMPY_DTYPES["F32"], (4, i + 1)) for i in range(4)}
    path = tmp_path / "a.safetensors"
    safetensors_numpy.save_file(tensors, path)
    got = kst.load_file(path, framework="numpy", device_map={"m.1": "cpu", "": "cpu"})
    assert list(got) == list(kst.safe_open(path, "np").offset_keys())
    same_dicts(got, tensors)
    with pytest.raises(ValueError, match="device must be 'cpu'"):
        kst.load_file(path, framework="numpy", device_map={"m.1": 0, "": "cpu"})


FAKE_DEVICE_MAP = """
import json, os, tempfile
import numpy
import kvik.safetensors as kst
from safetensors.numpy import save_file
from fake_devices import FakeFramework


rng = numpy.random.default_rng(11)
tmp = tempfile.mkdtemp()
tensors = {}
for layer in range(12):
    for part in ("q", "k"):
        tensors[f"model.layers.{layer}.{part}"] = rng.standard_normal((16, layer + 3), "float32")
tensors["model.embed.w"] = rng.standard_normal((40, 8), "float32")
tensors["lm_head.weight"] = rng.standard_normal((8, 40), "float32")
names = list(tensors)
index = {"metadata": {}, "weight_map": {}}
for s in range(3):
    part = {n: tensors[n] for n in names[s::3]}
    save_file(part, os.path.join(tmp, f"shard{s}.safetensors"))
    index["weight_map"].update({n: f"shard{s}.safetensors" for n in part})
with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
    json.dump(index, f)
device_map = {"model.layers.1": 1, "model.embed": 0, "lm_head": "cuda:1", "model": 0}
got = kst.load_file(tmp, framework=FakeFramework(), device_map=device_map)


def expected_device(name):
    return 1 if name.startswith(("model.layers.1.", "lm_head.")) else 0


result = {
    "names": sorted(got) == sorted(tensors),
    "bytes": all(got[n]["bytes"] == a.tobytes() for n, a in tensors.items()),
    "devices": all(got[n]["device"] == expected_device(n) for n in tensors),
    "allocations": sorted(o for o, _ in FakeFramework.allocations),
    "bases": all(got[n]["base"] == dict(FakeFramework.allocations)[got[n]["device"]]
                 for n in tensors),
}
print(json.dumps(result))
"""


@needs_fakes
def test_fake_device_map():
    """A sharded checkpoint split over two devices of the fake driver by an accelerate-style
    device_map: one allocation per device, each tensor's bytes on its own device ("model.layers.1"
    does not cover "model.layers.10" or "model.layers.11")."""
    result = run_python(FAKE_DEVICE_MAP, nvcomp=False, pythonpath=(TESTS,), FAKE_CUDA_DEVICES="2")
    assert result == {"names": True, "bytes": True, "devices": True, "allocations": [0, 1],
                      "bases": True}


# ---- PyTorch and CuPy on a GPU -----------------------------------------------------------------


try:
    import torch
except ImportError as e:
    torch, TORCH_MISSING = None, f"PyTorch is not installed ({e})"
else:
    TORCH_MISSING = None if torch.cuda.is_available() else "PyTorch sees no CUDA device"
needs_torch_cpu = pytest.mark.skipif(torch is None, reason=str(TORCH_MISSING))
needs_torch = pytest.mark.skipif(TORCH_MISSING is not None, reason=str(TORCH_MISSING))

TORCH_DTYPES = ["float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
                "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "int64", "int32",
                "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool", "complex64"]


def torch_tensors(seed=0, n=3):
    """Random tensors of every dtype this PyTorch has, on the host (random bits, bool 0/1)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for i, name in enumerate(TORCH_DTYPES * n):
        dtype = getattr(torch, name, None)
        if dtype is None:
            continue
        shape = [int(x) for x in torch.randint(1, 30, (i % 4,), generator=g)]
        count = int(torch.tensor(shape).prod()) if shape else 1
        item = torch.empty((), dtype=dtype).element_size()
        raw = torch.randint(0, 2 if dtype == torch.bool else 256, (count * item,),
                            dtype=torch.uint8, generator=g)
        out[f"{name}.{i}"] = raw.view(dtype).reshape(shape) if dtype != torch.bool else \
            raw.bool().reshape(shape)
    out["empty"] = torch.zeros((0, 7), dtype=torch.bfloat16)
    return out


def torch_same(got, want):
    assert sorted(got) == sorted(want)
    for name in want:
        g, w = got[name], want[name]
        assert g.dtype == w.dtype and g.shape == w.shape and g.device == w.device, name
        # Bits, not values: fp8 has no equality kernels everywhere, and NaN != NaN.
        assert torch.equal(g.reshape(-1).view(torch.uint8), w.reshape(-1).view(torch.uint8)), name


@needs_torch_cpu
def test_torch_cpu(tmp_path):
    """Host tensors: every dtype against safetensors.torch, both ways, and F4 (packed)."""
    from safetensors.torch import load_file, save_file

    tensors = torch_tensors(seed=3)
    path = tmp_path / "a.safetensors"
    save_file(tensors, path, metadata={"format": "pt"})
    got = kst.load_file(path, device="cpu")
    torch_same(got, load_file(path))
    assert len({t.untyped_storage().data_ptr() for t in got.values() if t.numel()}) == 1
    kst.save_file(tensors, tmp_path / "ours.safetensors", metadata={"format": "pt"})
    assert (tmp_path / "ours.safetensors").read_bytes() == path.read_bytes()
    with kst.safe_open(path, framework="pt") as f:
        torch_same({"int16.11": f.get_tensor("int16.11")}, {"int16.11": tensors["int16.11"]})
        assert torch.equal(f.get_slice("float32.1")[1:], tensors["float32.1"][1:])
    f4 = getattr(torch, "float4_e2m1fn_x2", None)
    if f4 is not None:
        packed = {"p": torch.arange(12, dtype=torch.uint8).view(f4).reshape(3, 4)}
        save_file(packed, tmp_path / "f4.safetensors")
        assert header_of(tmp_path / "f4.safetensors")["p"]["shape"] == [3, 8]
        kst.save_file(packed, tmp_path / "f4_ours.safetensors")
        assert (tmp_path / "f4_ours.safetensors").read_bytes() == \
            (tmp_path / "f4.safetensors").read_bytes()
        got = kst.load_file(tmp_path / "f4.safetensors", device="cpu")["p"]
        assert got.dtype == f4 and got.shape == (3, 4)
        assert torch.equal(got.view(torch.uint8), packed["p"].view(torch.uint8))
    with pytest.raises(ValueError, match="non contiguous tensor: `t`"):
        kst.save_file({"t": torch.zeros(4, 4).t()}, tmp_path / "x.safetensors")


@needs_torch_cpu
def test_torch_save_shared(tmp_path):
    """Tensors overlapping in one storage are refused, as safetensors.torch does; parts of one
    storage that do not overlap are written."""
    from safetensors.torch import save_file

    base = torch.arange(12, dtype=torch.float32)
    for tensors, refused in (({"a": base, "b": base}, True),
                             ({"a": base, "b": base[2:5]}, True),
                             ({"a": base[:6], "b": base[6:]}, False),
                             ({"a": base[:6], "b": base[5:7], "c": base[8:]}, True)):
        ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
        if refused:
            with pytest.raises(RuntimeError, match="Some tensors share memory"):
                save_file(tensors, theirs)
            with pytest.raises(RuntimeError, match=r"Some tensors share memory.*\['a', 'b'\]"):
                kst.save_file(tensors, ours)
        else:
            save_file(tensors, theirs)
            kst.save_file(tensors, ours)
            assert ours.read_bytes() == theirs.read_bytes()


@needs_torch
def test_torch_every_dtype_cuda(tmp_path):
    from safetensors.torch import load_file, save_file

    tensors = torch_tensors()
    path = tmp_path / "a.safetensors"
    save_file(tensors, path, metadata={"format": "pt"})
    want = load_file(path, device="cuda:0")
    got = kst.load_file(path, device="cuda:0")
    torch_same(got, want)
    torch_same(kst.load_file(path, device=torch.device("cuda", 0)), want)
    torch_same(kst.load_file(path, device=0, framework="torch"), want)
    torch_same(kst.load_file(path, device="cpu"), load_file(path))
    # Views of one torch.empty allocation (the empty tensor is an allocation of nothing).
    storages = {t.untyped_storage().data_ptr() for t in got.values() if t.numel()}
    assert len(storages) == 1
    with kst.safe_open(path, framework="pt", device="cuda:0") as f:
        assert f.metadata() == {"format": "pt"}
        torch_same({"bfloat16.3": f.get_tensor("bfloat16.3")}, {"bfloat16.3": want["bfloat16.3"]})
        assert torch.equal(f.get_slice("float32.1")[1:], want["float32.1"][1:])


@needs_torch
def test_torch_sharded_and_subset(tmp_path):
    from safetensors.torch import load_file, save_file

    tensors = torch_tensors(seed=1)
    names = sorted(tensors)
    index = {"metadata": {"total_size": 0}, "weight_map": {}}
    for s in range(4):
        part = {n: tensors[n] for n in names[s::4]}
        save_file(part, tmp_path / f"model-{s}.safetensors")
        index["weight_map"].update({n: f"model-{s}.safetensors" for n in part})
    (tmp_path / kst.INDEX_NAME).write_text(json.dumps(index))
    want = {}
    for s in range(4):
        want.update(load_file(tmp_path / f"model-{s}.safetensors", device="cuda:0"))
    torch_same(kst.load_file(tmp_path, device="cuda:0"), want)
    subset = names[::5]
    torch_same(kst.load_file(tmp_path / kst.INDEX_NAME, names=subset),
               {n: want[n] for n in subset})
    # Every GPU PyTorch sees and the host, by an accelerate-style device_map.
    gpus = torch.cuda.device_count()
    device_map = {name: ("cpu" if i % (gpus + 1) == gpus else i % (gpus + 1))
                  for i, name in enumerate(names)}
    torch_same(kst.load_file(tmp_path, device_map=device_map),
               {n: w.to("cpu" if device_map[n] == "cpu" else f"cuda:{device_map[n]}")
                for n, w in want.items()})


@needs_torch
def test_torch_save_cuda_bytes_equal(tmp_path):
    from safetensors.torch import save_file

    host = torch_tensors(seed=2)
    save_file(host, tmp_path / "theirs.safetensors", metadata={"format": "pt"})
    kst.save_file({k: v.cuda() for k, v in host.items()}, tmp_path / "ours.safetensors",
                  metadata={"format": "pt"})
    kst.save_file(host, tmp_path / "ours_host.safetensors", metadata={"format": "pt"})
    theirs = (tmp_path / "theirs.safetensors").read_bytes()
    assert (tmp_path / "ours.safetensors").read_bytes() == theirs
    assert (tmp_path / "ours_host.safetensors").read_bytes() == theirs
    with pytest.raises(ValueError, match="non contiguous tensor: `t`"):
        kst.save_file({"t": torch.zeros(4, 4, device="cuda").t()}, tmp_path / "x.safetensors")


@needs_torch
def test_torch_memory_returns_to_the_allocator(tmp_path):
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(64 << 20, dtype=torch.uint8)}, tmp_path / "a.safetensors")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    got = kst.load_file(tmp_path / "a.safetensors")
    assert torch.cuda.memory_allocated() - before >= 64 << 20
    del got
    assert torch.cuda.memory_allocated() == before


@needs_torch_cpu
def test_torch_transformers_flow(tmp_path):
    """A small Llama saved by save_pretrained, then model.load_state_dict(load_file(...)): on
    "cuda:0" where PyTorch has a GPU, else on the host."""
    transformers = pytest.importorskip("transformers")
    device = "cpu" if TORCH_MISSING else "cuda:0"
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      vocab_size=256)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(tmp_path)
    fresh = transformers.LlamaForCausalLM(config).to(torch.bfloat16).to(device)
    fresh.load_state_dict(kst.load_file(tmp_path / "model.safetensors", device=device))
    for name, p in model.state_dict().items():
        assert torch.equal(p.to(device), fresh.state_dict()[name]), name


def _cupy():
    from conftest import CUPY_MISSING, cupy

    return cupy, CUPY_MISSING


cupy, CUPY_MISSING = _cupy()
needs_cupy = pytest.mark.skipif(cupy is None, reason=str(CUPY_MISSING))


@needs_cupy
def test_cupy(tmp_path, rng):
    tensors = {f"{code}.{i}": random_array(rng, NUMPY_DTYPES[code], random_shape(rng))
               for i, code in enumerate(["F64", "F32", "F16", "I64", "U32", "I16", "U8", "BOOL",
                                         "C64"] * 2)}
    path = tmp_path / "a.safetensors"
    safetensors_numpy.save_file(tensors, path)
    got = kst.load_file(path, framework="cupy")
    assert all(isinstance(a, cupy.ndarray) for a in got.values())
    same_dicts({k: cupy.asnumpy(v) for k, v in got.items()}, tensors)
    kst.save_file(got, tmp_path / "ours.safetensors")
    assert (tmp_path / "ours.safetensors").read_bytes() == path.read_bytes()
    # bf16: CuPy holds it where it takes ml_dtypes' dtype, else a TypeError says so.
    safetensors_numpy.save_file({"b": random_array(rng, NUMPY_DTYPES["BF16"], (4,))},
                                tmp_path / "b.safetensors")
    try:
        b = kst.load_file(tmp_path / "b.safetensors", framework="cupy")["b"]
    except TypeError as e:
        assert "CuPy cannot hold bfloat16" in str(e)
    else:
        assert b.dtype == NUMPY_DTYPES["BF16"]
