"""kvik.nvcomp against the fake nvCOMP (tests/fake_nvcomp.c) on the fake CUDA driver.

libcuda and libnvcomp load once per process, so each test that needs them runs its code in a
subprocess with the fakes on LD_LIBRARY_PATH, as test_misc.test_with_fake_cuda does. Host chunks
are staged through the fake driver's device memory, which is the path these tests take; the
device path (CuPy arrays) runs on the GPU machine.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import kvik
import kvik.nvcomp
from kvik import _lib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_DIR = os.environ.get("KVIK_BUILD_DIR", os.path.join(ROOT, "build"))
FAKE_CUDA = os.path.join(BUILD_DIR, "tests", "fake_cuda")
FAKE_NVCOMP = os.path.join(BUILD_DIR, "tests", "fake_nvcomp")
FAKE_NVCOMP_LIB = os.path.join(FAKE_NVCOMP, "libnvcomp.so.6")
# The directory kvik is imported from in this process, for the subprocesses.
PYTHONPATH = os.path.dirname(os.path.dirname(os.path.abspath(kvik.__file__)))
STANDARD = ["zstd", "lz4", "snappy", "deflate", "gzip"]
GPU_ONLY = ["gdeflate", "cascaded", "bitcomp", "ans"]

FAKES_BUILT = os.path.exists(os.path.join(FAKE_CUDA, "libcuda.so.1")) and os.path.exists(
    FAKE_NVCOMP_LIB)
needs_fakes = pytest.mark.skipif(
    not FAKES_BUILT,
    reason=f"the fake CUDA driver and nvCOMP are not built in {BUILD_DIR}/tests")


def _caller_path():
    """The caller's PYTHONPATH (packages carried to a GPU machine: zarr, numcodecs), less the
    directories that hold the nvidia-libnvcomp wheel: kvik.nvcomp would load its real nvCOMP in
    place of the fake."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and not os.path.isdir(os.path.join(p, "nvidia", "libnvcomp"))]


def run_python(code, nvcomp=True, pythonpath=(), **env):
    """Run `code` in a fresh interpreter on the fake CUDA driver (and the fake nvCOMP, found
    through the soname, if `nvcomp`) and return the JSON its last line of output prints."""
    libs = [FAKE_NVCOMP, FAKE_CUDA] if nvcomp else [FAKE_CUDA]
    environ = {k: v for k, v in os.environ.items() if k != "KVIK_NVCOMP_LIBRARY"}
    path = [*pythonpath, PYTHONPATH, *_caller_path()]
    environ.update(env, PYTHONPATH=os.pathsep.join(filter(None, path)),
                   LD_LIBRARY_PATH=os.pathsep.join(libs))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


# ---- without nvCOMP: the names -------------------------------------------------------------------


def test_codec_classes():
    classes = {cls.name: cls for cls in vars(kvik.nvcomp).values()
               if isinstance(cls, type) and issubclass(cls, kvik.nvcomp.Codec) and cls.name}
    assert sorted(classes) == sorted(STANDARD + GPU_ONLY)
    assert list(_lib.codec_names()) == STANDARD + GPU_ONLY
    for number, name in enumerate(_lib.codec_names()):
        assert classes[name].gpu_only == (name in GPU_ONLY) == _lib.codec_gpu_only(number)
    assert {"ZstdCodec", "LZ4Codec", "SnappyCodec", "DeflateCodec", "GzipCodec"} <= set(
        kvik.nvcomp.__all__)
    assert repr(kvik.nvcomp.ZstdCodec()) == "kvik.nvcomp.ZstdCodec()"


def test_decode_needs_an_output_per_chunk():
    with pytest.raises(ValueError, match="2 chunks but 1 outputs"):
        kvik.nvcomp.DeflateCodec().decode([b"a", b"b"], [1])


# ---- round trips on the fakes --------------------------------------------------------------------

ROUND_TRIP = """
import json, zlib, gzip, numpy, kvik.nvcomp
codec = kvik.nvcomp.{cls}()
rng = numpy.random.default_rng(7)
# Compressible chunks of several sizes, as bytes, a NumPy array and a bytearray.
text = (b"kvik reads files into GPU memory " * 4000)
chunks = [text[:1], bytearray(text[:5000]), numpy.frombuffer(text[:131072], dtype=numpy.uint8),
          rng.integers(0, 256, 70000, dtype=numpy.uint8).tobytes()]
raw = [bytes(memoryview(c)) for c in chunks]
encoded = codec.encode(chunks)
decoded = codec.decode(encoded, [len(r) for r in raw])
outs = [bytearray(len(r) + 10) for r in raw]
into = codec.decode(encoded, outs)
cpu = {{}}
if codec.name == "deflate":
    cpu["ours on the cpu"] = [zlib.decompress(e, -15) for e in encoded]
    packs = [zlib.compressobj(6, zlib.DEFLATED, -15) for _ in raw]
    theirs = [p.compress(r) + p.flush() for p, r in zip(packs, raw)]
    cpu["theirs on the fake"] = codec.decode(theirs, [len(r) for r in raw])
elif codec.name == "gzip":
    cpu["ours on the cpu"] = [gzip.decompress(e) for e in encoded]
    cpu["theirs on the fake"] = codec.decode([gzip.compress(r) for r in raw], [len(r) for r in raw])
elif codec.name == "zstd":
    try:
        import zstandard
    except ImportError:
        zstandard = None
    if zstandard:
        cpu["ours on the cpu"] = [zstandard.ZstdDecompressor().decompress(e) for e in encoded]
        theirs = [zstandard.ZstdCompressor().compress(r) for r in raw]
        cpu["theirs on the fake"] = codec.decode(theirs, [len(r) for r in raw])
elif codec.name == "lz4":
    try:
        import lz4.block
    except ImportError:
        lz4 = None
    if lz4:
        cpu["ours on the cpu"] = [lz4.block.decompress(e, uncompressed_size=len(r))
                                  for e, r in zip(encoded, raw)]
        theirs = [lz4.block.compress(r, store_size=False) for r in raw]
        cpu["theirs on the fake"] = codec.decode(theirs, [len(r) for r in raw])
print(json.dumps({{
    "types": [type(e).__name__ for e in encoded] + [type(d).__name__ for d in decoded],
    "smaller": len(encoded[2]) < len(raw[2]),
    "decoded": [d == r for d, r in zip(decoded, raw)],
    "into": [o is i and bytes(o[:len(r)]) == r for o, i, r in zip(outs, into, raw)],
    "cpu": {{k: [bytes(d) == r for d, r in zip(v, raw)] for k, v in cpu.items()}},
}}))
"""


@needs_fakes
@pytest.mark.parametrize("cls", ["ZstdCodec", "LZ4Codec", "SnappyCodec", "DeflateCodec",
                                 "GzipCodec"])
def test_round_trip(cls):
    if getattr(kvik.nvcomp, cls).name not in run_python(
            "import json, kvik.nvcomp; print(json.dumps(kvik.nvcomp.codecs()))"):
        pytest.skip(f"the fake nvCOMP was built without {cls}'s library")
    result = run_python(ROUND_TRIP.format(cls=cls))
    assert result["types"] == ["bytes"] * 8
    assert result["smaller"]
    assert result["decoded"] == [True] * 4
    assert result["into"] == [True] * 4
    if cls in ("DeflateCodec", "GzipCodec"):
        assert sorted(result["cpu"]) == ["ours on the cpu", "theirs on the fake"]
    for name, equal in result["cpu"].items():
        assert equal == [True] * 4, name


@needs_fakes
def test_queries():
    result = run_python("""
        import json, kvik, kvik.nvcomp
        print(json.dumps([kvik.nvcomp.available(), kvik.nvcomp.version(),
                          kvik.nvcomp.library_path(), kvik.nvcomp.codecs(),
                          kvik.nvcomp.DeflateCodec().supported(),
                          kvik.nvcomp.DeflateCodec().max_compressed_size(1000),
                          kvik.defaults.get("nvcomp_library")]))
    """)
    available, version, path, codecs, supported, bound, setting = result
    assert available and version == 6000 and supported
    assert os.path.realpath(path) == os.path.realpath(FAKE_NVCOMP_LIB)
    assert {"deflate", "gzip"} <= set(codecs) <= set(STANDARD + GPU_ONLY)
    assert bound >= 1000
    assert setting == ""  # found through the soname; no wheel to point the setting at


@needs_fakes
def test_corrupt_chunk_names_it():
    result = run_python("""
        import json, kvik, kvik.nvcomp
        codec = kvik.nvcomp.DeflateCodec()
        raw = [b"first chunk " * 100, b"second chunk " * 100, b"third chunk " * 100]
        encoded = codec.encode(raw)
        encoded[1] = b"\\xff" * len(encoded[1])
        try:
            codec.decode(encoded, [len(r) for r in raw])
        except kvik.KvikError as e:
            print(json.dumps([type(e).__name__, e.chunk, e.statuses, e.code, e.name, str(e)]))
    """)
    kind, chunk, statuses, code, name, message = result
    assert kind == "KvikError" and chunk == 1
    assert statuses[0] == 0 and statuses[2] == 0 and statuses[1] == code < 0
    assert name == "nvcompErrorCannotDecompress"
    assert "chunk 1 of 3" in message


@needs_fakes
def test_gpu_only_codec_on_the_fake():
    result = run_python("""
        import json, kvik, kvik.nvcomp
        try:
            kvik.nvcomp.GDeflateCodec().encode([b"x" * 100])
        except kvik.KvikError as e:
            print(json.dumps([e.name, str(e)]))
    """)
    assert result[0].startswith("nvcompError"), result


@needs_fakes
def test_empty_batch():
    assert run_python("""
        import json, kvik.nvcomp
        codec = kvik.nvcomp.ZstdCodec()
        print(json.dumps([codec.encode([]), codec.decode([], [])]))
    """) == [[], []]


# ---- without nvCOMP ------------------------------------------------------------------------------


@needs_fakes
def test_not_available(tmp_path):
    missing = str(tmp_path / "libnvcomp.so.6")
    result = run_python("""
        import json, kvik, kvik.nvcomp
        out = [kvik.nvcomp.available(), kvik.nvcomp.codecs()]
        for call in (kvik.nvcomp.version, lambda: kvik.nvcomp.ZstdCodec().encode([b"abc"])):
            try:
                call()
            except kvik.KvikError as e:
                out.append([e.name, str(e)])
        print(json.dumps(out))
    """, nvcomp=False, KVIK_NVCOMP_LIBRARY=missing)
    available, codecs, version_error, encode_error = result
    assert available is False and codecs == []
    for name, message in (version_error, encode_error):
        assert name == "KVIK_ENVCOMP_UNAVAILABLE"
        assert "nvCOMP unavailable" in message and missing in message


# ---- the wheel -----------------------------------------------------------------------------------

LOCATE = """
    import json, kvik, kvik.nvcomp
    out = [kvik.nvcomp._wheel_library(), kvik.nvcomp.available()]
    out += [kvik.defaults.get("nvcomp_library"), kvik.nvcomp.library_path()]
    print(json.dumps(out))
"""


def fake_wheel(root):
    """A site directory holding nvidia/libnvcomp/lib64/libnvcomp.so.6 (the fake), laid out as the
    nvidia-libnvcomp wheel installs it: `nvidia` a namespace package."""
    lib64 = root / "nvidia" / "libnvcomp" / "lib64"
    lib64.mkdir(parents=True)
    (root / "nvidia" / "libnvcomp" / "__init__.py").write_text("")
    (lib64 / "libnvcomp.so.6").symlink_to(FAKE_NVCOMP_LIB)
    return str(lib64 / "libnvcomp.so.6")


@needs_fakes
def test_wheel_is_located(tmp_path):
    path = fake_wheel(tmp_path)
    located, available, setting, loaded = run_python(LOCATE, nvcomp=False,
                                                     pythonpath=[str(tmp_path)])
    assert located == setting == loaded == path and available


@needs_fakes
def test_wheel_yields_to_the_environment(tmp_path):
    fake_wheel(tmp_path / "site")
    missing = str(tmp_path / "elsewhere" / "libnvcomp.so.6")
    run = run_python("""
        import json, kvik, kvik.nvcomp
        print(json.dumps([kvik.nvcomp.available(), kvik.defaults.get("nvcomp_library")]))
    """, nvcomp=False, pythonpath=[str(tmp_path / "site")], KVIK_NVCOMP_LIBRARY=missing)
    assert run == [False, missing]


@needs_fakes
def test_wheel_yields_to_defaults(tmp_path):
    fake_wheel(tmp_path / "site")
    run = run_python(f"""
        import json, kvik, kvik.nvcomp
        kvik.defaults.set("nvcomp_library", {FAKE_NVCOMP_LIB!r})
        print(json.dumps([kvik.nvcomp.available(), kvik.nvcomp.library_path()]))
    """, nvcomp=False, pythonpath=[str(tmp_path / "site")])
    assert run == [True, FAKE_NVCOMP_LIB]


@needs_fakes
def test_no_wheel(tmp_path):
    """A package nvidia.libnvcomp without the library (or none at all) points at nothing."""
    (tmp_path / "nvidia" / "libnvcomp").mkdir(parents=True)
    (tmp_path / "nvidia" / "libnvcomp" / "__init__.py").write_text("")
    code = """
        import json, kvik, kvik.nvcomp
        print(json.dumps([kvik.nvcomp._wheel_library(), kvik.nvcomp.available(),
                          kvik.defaults.get("nvcomp_library")]))
    """
    assert run_python(code, nvcomp=False, pythonpath=[str(tmp_path)]) == [None, False, ""]
    assert run_python(code, nvcomp=False) == [None, False, ""]


# ---- device memory -------------------------------------------------------------------------------

# Device buffers without CuPy: the fake driver's memory, through ctypes, behind
# __cuda_array_interface__ (the same libcuda.so.1 kvik loads).
DEVICE = """
import ctypes, json, sys, zlib, kvik, kvik.nvcomp
cu = ctypes.CDLL("libcuda.so.1")
ctx = ctypes.c_void_p()
assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0


class Device:
    def __init__(self, size, data=b""):
        ptr = ctypes.c_uint64()
        assert cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)) == 0
        self.ptr, self.size = ptr, size
        self.__cuda_array_interface__ = {
            "data": (ptr.value, False), "shape": (size,), "typestr": "|u1", "version": 3}
        if data:
            assert cu.cuMemcpyHtoD_v2(ptr, data, ctypes.c_size_t(len(data))) == 0

    def download(self, size):
        out = ctypes.create_string_buffer(size)
        assert cu.cuMemcpyDtoH_v2(out, self.ptr, ctypes.c_size_t(size)) == 0
        return out.raw


raw = [b"device chunk %d " % i * 300 for i in range(3)]
packed = []
for r in raw:
    pack = zlib.compressobj(6, zlib.DEFLATED, -15)
    packed.append(pack.compress(r) + pack.flush())
codec = kvik.nvcomp.DeflateCodec()
chunks = [Device(len(p), p) for p in packed]
outs = [Device(len(r)) for r in raw]
got = codec.decode(chunks, outs)
result = {"device": [g is o and o.download(len(r)) == r for g, o, r in zip(got, outs, raw)]}
mixed = codec.decode([chunks[0], packed[1]], [bytearray(len(raw[0])), outs[1]])
result["mixed"] = [bytes(mixed[0]) == raw[0], outs[1].download(len(raw[1])) == raw[1]]
sys.modules["cupy"] = None  # makes `import cupy` fail
try:
    codec.encode(chunks)
except ImportError as e:
    result["encode without cupy"] = str(e)
print(json.dumps(result))
"""


@needs_fakes
def test_device_buffers():
    """Device chunks and outputs go to nvCOMP as they are; host ones beside them are staged."""
    result = run_python(DEVICE)
    assert result["device"] == [True] * 3
    assert result["mixed"] == [True, True]
    assert "needs CuPy" in result["encode without cupy"]
