"""kvikio's former nvCOMP names: kvikio.nvcomp's managers and kvikio.nvcomp_codec.NvCompBatchCodec,
after kvikio's tests test_nvcomp.py and test_nvcomp_codec.py (their Zarr 2 cases dropped: kvik
supports Zarr 3). Host buffers run on the fakes; CuPy ones on a GPU."""
import numcodecs
import numpy
import pytest
from conftest import cupy, CUPY_MISSING
from test_nvcomp import needs_fakes, run_python

import kvik.nvcomp
import kvik.nvcomp_codec
from kvik.nvcomp_codec import NvCompBatchCodec

ALGOS = ["LZ4", "Gdeflate", "snappy", "zstd", "deflate"]  # as kvikio's tests spell them
MANAGERS = ["ANSManager", "BitcompManager", "CascadedManager", "GdeflateManager", "LZ4Manager",
            "ManagedDecompressionManager", "SnappyManager", "nvCompManager"]


def test_kvikio_names():
    assert run_python("""
        import json, sys, kvik
        sys.modules["kvikio"] = kvik
        import kvikio.nvcomp, kvikio.nvcomp_codec
        from kvikio.nvcomp import LZ4Manager, cp_to_nvcomp_dtype
        from kvikio.nvcomp_codec import NvCompBatchCodec
        print(json.dumps([kvikio.nvcomp is kvik.nvcomp, kvikio.nvcomp_codec is kvik.nvcomp_codec,
                          LZ4Manager is kvik.nvcomp.LZ4Manager, int(cp_to_nvcomp_dtype("int32")),
                          NvCompBatchCodec.codec_id]))
    """, nvcomp=False) == [True, True, True, 4, "nvcomp_batch"]
    for name in MANAGERS:
        assert isinstance(getattr(kvik.nvcomp, name), type)
    with pytest.raises(AttributeError):
        kvik.nvcomp.NoSuchManager


@pytest.mark.parametrize("algo", ALGOS)
def test_codec_registry(algo):
    codec = numcodecs.registry.get_codec({"id": "nvcomp_batch", "algorithm": algo, "options": {}})
    assert isinstance(codec, NvCompBatchCodec) and isinstance(codec, numcodecs.abc.Codec)
    assert codec.get_config() == {"id": "nvcomp_batch", "algorithm": algo.lower(), "options": {}}
    assert repr(codec) == f"NvCompBatchCodec(algorithm={algo.lower()!r}, options={{}})"


def test_unknown_algorithm():
    with pytest.raises(ValueError, match="is not supported. Must be one of"):
        NvCompBatchCodec("brotli")


def test_stream_refused_by_managers():
    with pytest.raises(NotImplementedError):
        kvik.nvcomp.LZ4Manager(stream=object())
    with pytest.raises(ValueError, match="multiple of 16"):
        kvik.nvcomp.LZ4Manager(chunk_size=1000)


CODEC = """
import json, numcodecs, numpy, kvik.nvcomp
from kvik.nvcomp_codec import NvCompBatchCodec
out = {}
for algo in ("LZ4", "snappy", "zstd", "deflate"):
    if algo.lower() not in kvik.nvcomp.codecs():  # a fake built without the CPU library
        continue
    codec = numcodecs.registry.get_codec({"id": "nvcomp_batch", "algorithm": algo, "options": {}})
    r = {}
    sized = algo != "deflate"  # raw Deflate states no size: decoding it needs out
    for shape in ((32,), (8, 16), (16, 16)):
        data = numpy.ones(shape, dtype="f4")
        comp = codec.encode(data)
        outs = None if sized else numpy.empty_like(data)
        r.setdefault("basic", []).append(type(comp).__name__ == "bytes" and numpy.array_equal(
            numpy.frombuffer(bytes(codec.decode(comp, outs)), "f4").reshape(shape), data))
    rng = numpy.random.default_rng(1)
    for sizes in ((100, 100), (100, 150)):
        chunks = [rng.standard_normal(s).astype("f4") for s in sizes]
        comp = codec.encode_batch([c.tobytes() for c in chunks])
        for kind in ("none", "cpu"):
            if kind == "none" and not sized:
                continue
            bufs = [numpy.empty_like(c) for c in chunks] if kind == "cpu" else None
            got = codec.decode_batch(comp, out=bufs)
            r.setdefault("batch", []).append(
                [numpy.array_equal(numpy.frombuffer(bytes(memoryview(g).cast("B")), "f4"), c)
                 for g, c in zip(got, chunks)])
            if bufs is not None:
                r["into"] = [b is g for b, g in zip(bufs, got)]
    r["empty"] = [codec.encode_batch([]), codec.decode_batch([])]
    out[algo] = r
# numcodecs writes, NvCompBatchCodec reads, and back (kvikio's test_cpu_comp_gpu_decomp).
data = (numpy.arange(4096, dtype="f4") // 5)
cross = {}
for cpu, gpu in (("lz4", "LZ4"), ("zstd", "zstd")):
    cpu_codec = numcodecs.get_codec({"id": cpu})
    gpu_codec = NvCompBatchCodec(gpu)
    cross[cpu] = [bytes(gpu_codec.decode(cpu_codec.encode(data))) == data.tobytes(),
                  bytes(cpu_codec.decode(gpu_codec.encode(data))) == data.tobytes()]
# LZ4 with and without the header decode to the same.
no_header = NvCompBatchCodec("lz4", {"has_header": False})
comp = no_header.encode(data)
plain = bytes(no_header.decode(comp, out=numpy.empty_like(data))) == data.tobytes()
try:
    no_header.decode(comp)
except ValueError as e:
    plain = [plain, str(e)]
print(json.dumps({"codecs": out, "cross": cross, "no header": plain}))
"""


@needs_fakes
def test_batch_codec_on_the_fakes():
    result = run_python(CODEC)
    assert {"LZ4", "zstd", "deflate"} <= set(result["codecs"])
    for algo, r in result["codecs"].items():
        assert r["basic"] == [True] * 3, algo
        assert all(b == [True, True] for b in r["batch"]), algo
        assert r["into"] == [True, True], algo
        assert r["empty"] == [[], []], algo
    assert result["cross"] == {"lz4": [True, True], "zstd": [True, True]}
    assert result["no header"][0] is True and "pass out=" in result["no header"][1]


MANAGER = """
import json, numpy, kvik, kvik.nvcomp as nvcomp
data = numpy.arange(100000, dtype="i4") // 7
out = {}
for name in ("LZ4Manager", "SnappyManager"):
    m = getattr(nvcomp, name)(data_type=numpy.int32, chunk_size=1 << 14)
    comp = m.compress(data)
    r = {"type": type(comp).__name__, "config": sorted(m.config),
         "chunks": m.config["num_chunks"],
         "fits": comp.size <= m.config["max_compressed_buffer_size"],
         "output size": m.get_compressed_output_size(comp) == comp.size,
         "decomp config": m.configure_decompression_with_compressed_buffer(comp)}
    back = m.decompress(comp)
    r["round trip"] = [str(back.dtype), numpy.array_equal(back, data)]
    managed = nvcomp.ManagedDecompressionManager(comp)
    r["managed"] = [type(managed._codec).__name__,
                    numpy.array_equal(managed.decompress(comp).view("i4"), data)]
    out[name] = r
try:
    nvcomp.SnappyManager().decompress(nvcomp.LZ4Manager().compress(data))
except ValueError as e:
    out["wrong manager"] = str(e)
try:
    nvcomp.ManagedDecompressionManager(numpy.zeros(100, dtype="u1"))
except ValueError as e:
    out["not ours"] = str(e)
try:
    nvcomp.GdeflateManager().compress(data)
except kvik.KvikError as e:
    out["gpu only on the fake"] = e.name
out["empty"] = nvcomp.LZ4Manager().decompress(nvcomp.LZ4Manager().compress(b"")).size
print(json.dumps(out))
"""


@needs_fakes
def test_managers_on_the_fakes():
    codecs = run_python("import json, kvik.nvcomp; print(json.dumps(kvik.nvcomp.codecs()))")
    if not {"lz4", "snappy"} <= set(codecs):
        pytest.skip("the fake nvCOMP was built without LZ4's or Snappy's library")
    result = run_python(MANAGER)
    for name in ("LZ4Manager", "SnappyManager"):
        r = result[name]
        assert r["type"] == "ndarray"
        assert r["config"] == ["max_compressed_buffer_size", "num_chunks",
                               "uncompressed_buffer_size"]
        assert r["chunks"] == 25 and r["fits"] and r["output size"]
        assert r["decomp config"] == {"decomp_data_size": 400000, "num_chunks": 25}
        assert r["round trip"] == ["int32", True]
        assert r["managed"] == [name.replace("Manager", "Codec"), True]
    assert "holds lz4, not snappy" in result["wrong manager"]
    assert "not a buffer that a kvik nvCOMP manager compressed" in result["not ours"]
    assert result["gpu only on the fake"].startswith("nvcompError")
    assert result["empty"] == 0


# ---- on the GPU (kvikio's own cases: CuPy in, CuPy out) ---------------------------------------

needs_cupy = pytest.mark.skipif(cupy is None, reason=str(CUPY_MISSING))


@needs_cupy
@pytest.mark.parametrize("name", ["ANSManager", "BitcompManager", "CascadedManager",
                                  "GdeflateManager", "LZ4Manager", "SnappyManager"])
@pytest.mark.parametrize("dtype", ["uint8", "int32", "int64"])
def test_manager_round_trip_device(name, dtype):
    if not kvik.nvcomp.available():
        pytest.skip("no nvCOMP")
    data = cupy.arange(10000, dtype=dtype) % 97
    manager = getattr(kvik.nvcomp, name)(data_type=dtype)
    comp = manager.compress(data)
    assert isinstance(comp, cupy.ndarray) and comp.size < data.nbytes
    assert bool((manager.decompress(comp) == data).all())
    managed = kvik.nvcomp.ManagedDecompressionManager(comp)
    assert bool((managed.decompress(comp).view(dtype) == data).all())


@needs_cupy
@pytest.mark.parametrize("algo", ALGOS)
def test_batch_codec_device(algo):
    if not kvik.nvcomp.available():
        pytest.skip("no nvCOMP")
    codec = NvCompBatchCodec(algo)
    chunks = [cupy.random.standard_normal(s).astype("f4") for s in (100, 150)]
    comp = codec.encode_batch(chunks)
    assert all(type(c) is bytes for c in comp)
    outs = [cupy.empty_like(c) for c in chunks]
    got = codec.decode_batch([cupy.asarray(numpy.frombuffer(c, "u1")) for c in comp], out=outs)
    for g, o, c in zip(got, outs, chunks):
        assert g is o and bool((o == c).all())
