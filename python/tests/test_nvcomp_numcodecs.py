"""kvik.numcodecs' GPU codecs against numcodecs' CPU ones, on the fakes (host memory, staged
through the fake driver) and, where CuPy and a GPU are present, on device memory; DLPack inputs
to kvik.nvcomp."""
import numcodecs
import numpy
import pytest
from conftest import cupy, CUPY_MISSING
from test_nvcomp import needs_fakes, run_python

import kvik.numcodecs


def test_configs_round_trip():
    for cls, theirs in ((kvik.numcodecs.Zstd, numcodecs.Zstd(level=5, checksum=True)),
                        (kvik.numcodecs.LZ4, numcodecs.LZ4(acceleration=3)),
                        (kvik.numcodecs.GZip, numcodecs.GZip(level=7))):
        config = theirs.get_config()
        ours = cls.from_config(
            {k: v for k, v in config.items() if k != "id"})
        assert ours.get_config() == config
        assert isinstance(ours, kvik.numcodecs.CudaCodec)


def test_registration_only_when_asked():
    assert numcodecs.get_codec({"id": "zstd"}).__class__ is numcodecs.Zstd
    before = kvik.numcodecs.register_codecs()
    try:
        assert before["zstd"] is numcodecs.Zstd and before["gzip"] is numcodecs.GZip
        assert type(numcodecs.get_codec({"id": "zstd", "level": 3})) is kvik.numcodecs.Zstd
        assert type(numcodecs.get_codec({"id": "lz4"})) is kvik.numcodecs.LZ4
        assert type(numcodecs.get_codec({"id": "gzip"})) is kvik.numcodecs.GZip
    finally:
        for cls in before.values():
            numcodecs.register_codec(cls)
    assert numcodecs.get_codec({"id": "lz4"}).__class__ is numcodecs.LZ4


# Both directions on the fakes: ours encode, numcodecs decodes; numcodecs encodes, ours decode
# (without out, into out, and in one batch of mixed sizes).
CROSS = """
import json, numcodecs, numpy, kvik.numcodecs
x = numpy.arange(50000, dtype="f4") // 7
small = numpy.frombuffer(b"kvik " * 100, dtype="u1")
out = {}
for name in ("Zstd", "LZ4", "GZip"):
    ours, theirs = getattr(kvik.numcodecs, name)(), getattr(numcodecs, name)()
    r = {}
    e = ours.encode(x)
    r["type"] = type(e).__name__
    r["theirs reads ours"] = numpy.array_equal(numpy.frombuffer(theirs.decode(e), "f4"), x)
    t = theirs.encode(x)
    r["ours reads theirs"] = numpy.array_equal(numpy.frombuffer(ours.decode(t), "f4"), x)
    into = numpy.empty_like(x)
    r["into"] = ours.decode(t, out=into) is into and numpy.array_equal(into, x)
    batch = ours.decode_batch([theirs.encode(small), t])
    r["batch"] = [bytes(batch[0]) == small.tobytes(), bytes(batch[1]) == x.tobytes()]
    try:
        ours.decode(t, out=numpy.empty(x.size + 1, dtype="f4"))
    except ValueError as e:
        r["wrong out"] = str(e)
    out[name] = r
print(json.dumps(out))
"""


@needs_fakes
def test_cross_with_numcodecs():
    result = run_python(CROSS)
    for name, r in result.items():
        assert r["type"] == "bytes", name
        assert r["theirs reads ours"] and r["ours reads theirs"] and r["into"], (name, r)
        assert r["batch"] == [True, True], name
        assert "out holds" in r["wrong out"] or "decoded to" in r["wrong out"], name


FALLBACK = """
import json, numcodecs, numpy, kvik.numcodecs
x = numpy.arange(1000, dtype="i8")
out = {}
for name in ("Zstd", "LZ4", "GZip"):
    ours, theirs = getattr(kvik.numcodecs, name)(), getattr(numcodecs, name)()
    e = ours.encode(x)
    out[name] = [bytes(e) == bytes(theirs.encode(x)),
                 bytes(ours.decode(theirs.encode(x))) == x.tobytes()]
print(json.dumps(out))
"""


@needs_fakes
def test_without_nvcomp_numcodecs_runs(tmp_path):
    """Without nvCOMP the codecs are numcodecs' own: the same bytes."""
    result = run_python(FALLBACK, nvcomp=False, KVIK_NVCOMP_LIBRARY=str(tmp_path / "none.so"))
    assert result == {"Zstd": [True, True], "LZ4": [True, True], "GZip": [True, True]}


DLPACK = """
import json, numpy, kvik.nvcomp


class HostTensor:
    '''Only DLPack, as a PyTorch CPU tensor is (no buffer protocol).'''
    def __init__(self, array):
        self.array = array
    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)
    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class Elsewhere(HostTensor):
    def __dlpack_device__(self):
        return (4, 0)  # OpenCL


codec = kvik.nvcomp.ZstdCodec()
x = numpy.arange(4096, dtype="u2")
encoded = codec.encode([HostTensor(x)])
out = HostTensor(numpy.zeros_like(x))
got = codec.decode([HostTensor(numpy.frombuffer(encoded[0], dtype="u1"))], [out])
result = [type(encoded[0]).__name__, got[0] is out, numpy.array_equal(out.array, x)]
try:
    codec.encode([Elsewhere(x)])
except TypeError as e:
    result.append(str(e))
print(json.dumps(result))
"""


@needs_fakes
def test_dlpack_host_objects():
    kind, same, equal, error = run_python(DLPACK)
    assert kind == "bytes" and same and equal
    assert "DLPack device type 4" in error


# ---- device memory (CuPy and a GPU) ---------------------------------------------------------

needs_cupy = pytest.mark.skipif(cupy is None, reason=str(CUPY_MISSING))


@needs_cupy
@pytest.mark.parametrize("name", ["Zstd", "LZ4", "GZip"])
def test_device_buffers(name):
    ours, theirs = getattr(kvik.numcodecs, name)(), getattr(numcodecs, name)()
    if not kvik.nvcomp.available():
        pytest.skip("no nvCOMP")
    x = cupy.arange(300000, dtype="f4") // 11
    e = ours.encode(x)
    assert isinstance(e, cupy.ndarray)
    assert numpy.array_equal(numpy.frombuffer(theirs.decode(e.get()), "f4"), x.get())
    t = cupy.asarray(numpy.frombuffer(theirs.encode(x.get()), dtype="u1"))
    d = ours.decode(t)
    assert isinstance(d, cupy.ndarray) and bool((d.view("f4") == x).all())
    into = cupy.empty_like(x)
    assert ours.decode(t, out=into) is into and bool((into == x).all())


@needs_cupy
def test_dlpack_device_torch():
    torch = pytest.importorskip("torch")
    if not kvik.nvcomp.available():
        pytest.skip("no nvCOMP")
    codec = kvik.nvcomp.ZstdCodec()
    x = torch.arange(10000, dtype=torch.int32, device="cuda")
    encoded = codec.encode([x])
    assert isinstance(encoded[0], cupy.ndarray)
    out = torch.empty_like(x)
    assert codec.decode(encoded, [out])[0] is out
    assert bool((out == x).all())
