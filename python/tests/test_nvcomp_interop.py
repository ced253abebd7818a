"""kvik.nvcomp's bytes against the standard CPU libraries, both ways, for every standard format:
what kvik encodes, the CPU library decodes, and what the CPU library encodes, kvik decodes.

CPU side: zlib (raw Deflate), gzip, numcodecs' Zstd (plain zstd frames) and LZ4 (a 4-byte size,
then one raw LZ4 block: the block alone is nvCOMP's format), and libsnappy through ctypes, or
cramjam, for raw Snappy. The nvCOMP side is the fake (tests/fake_nvcomp.c) here; on a GPU machine, with
KVIK_TEST_REAL_NVCOMP=1, it is also the real nvCOMP, found as kvik.nvcomp finds it (the
nvidia-libnvcomp wheel on sys.path, or the soname).
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from test_nvcomp import FAKES_BUILT, run_python

INTEROP = """
import ctypes, ctypes.util, gzip, json, zlib
import numpy, kvik.nvcomp

def snappy_library():
    try:
        return ctypes.CDLL(ctypes.util.find_library("snappy") or "libsnappy.so.1")
    except OSError:
        return None

SNAPPY = snappy_library()

def snappy_compress(raw):
    room = SNAPPY.snappy_max_compressed_length(ctypes.c_size_t(len(raw)))
    out, size = ctypes.create_string_buffer(room), ctypes.c_size_t(room)
    assert SNAPPY.snappy_compress(raw, ctypes.c_size_t(len(raw)), out, ctypes.byref(size)) == 0
    return out.raw[:size.value]

def snappy_uncompress(data, length):
    out, size = ctypes.create_string_buffer(length), ctypes.c_size_t(length)
    assert SNAPPY.snappy_uncompress(data, ctypes.c_size_t(len(data)), out, ctypes.byref(size)) == 0
    return out.raw[:size.value]

# libsnappy through ctypes, else cramjam's raw Snappy (a wheel, where no libsnappy is).
def snappy_pair():
    if SNAPPY:
        return snappy_compress, snappy_uncompress
    try:
        import cramjam
    except ImportError:
        return None
    return (lambda raw: bytes(cramjam.snappy.compress_raw(raw)),
            lambda data, n: bytes(cramjam.snappy.decompress_raw(bytes(data))))

def numcodecs_pair(name):
    try:
        import numcodecs
    except ImportError:
        return None
    if name == "zstd":
        codec = numcodecs.Zstd(level=3)
        return (lambda raw: bytes(codec.encode(raw)),
                lambda data, n: bytes(codec.decode(data)))
    codec = numcodecs.LZ4()
    return (lambda raw: bytes(codec.encode(raw))[4:],
            lambda data, n: bytes(codec.decode(n.to_bytes(4, "little") + bytes(data))))

CLASSES = {"zstd": kvik.nvcomp.ZstdCodec, "lz4": kvik.nvcomp.LZ4Codec,
           "snappy": kvik.nvcomp.SnappyCodec, "deflate": kvik.nvcomp.DeflateCodec,
           "gzip": kvik.nvcomp.GzipCodec}
CPU = {
    "deflate": (lambda raw: (lambda c: c.compress(raw) + c.flush())(
                    zlib.compressobj(6, zlib.DEFLATED, -15)),
                lambda data, n: zlib.decompress(bytes(data), -15)),
    "gzip": (gzip.compress, lambda data, n: gzip.decompress(bytes(data))),
    "zstd": numcodecs_pair("zstd"),
    "lz4": numcodecs_pair("lz4"),
    "snappy": snappy_pair(),
}

rng = numpy.random.default_rng(27)
walk = numpy.cumsum(rng.integers(-8, 9, 300000), dtype=numpy.int32).astype(numpy.float32)
raw = [b"k", (b"kvik reads compressed chunks " * 3000)[:65536 + 3],
       walk.tobytes(), rng.integers(0, 256, 100000, dtype=numpy.uint8).tobytes()]
sizes = [len(r) for r in raw]
result = {}
for name, pair in CPU.items():
    if pair is None or name not in kvik.nvcomp.codecs():
        result[name] = "skipped"
        continue
    cpu_encode, cpu_decode = pair
    codec = CLASSES[name]()
    ours = codec.encode(raw)
    theirs_decoded = [cpu_decode(e, n) for e, n in zip(ours, sizes)]
    ours_decoded = codec.decode([cpu_encode(r) for r in raw], sizes)
    result[name] = {"cpu decodes kvik": [d == r for d, r in zip(theirs_decoded, raw)],
                    "kvik decodes cpu": [bytes(d) == r for d, r in zip(ours_decoded, raw)]}
print(json.dumps(result))
"""

FORMATS = ["zstd", "lz4", "snappy", "deflate", "gzip"]


def run_real(code):
    """`code` in a fresh interpreter on the machine's own CUDA driver and nvCOMP."""
    environ = dict(os.environ)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


BACKENDS = [pytest.param("fake", marks=pytest.mark.skipif(
    not FAKES_BUILT, reason="the fake CUDA driver and nvCOMP are not built"))]
if os.environ.get("KVIK_TEST_REAL_NVCOMP"):
    BACKENDS.append("real")


@pytest.mark.parametrize("backend", BACKENDS)
def test_cpu_libraries_both_ways(backend):
    result = run_python(INTEROP) if backend == "fake" else run_real(INTEROP)
    assert set(result) == set(FORMATS)
    # zlib and gzip ship with Python; the others need numcodecs and libsnappy (or cramjam), which
    # CI has; against the real nvCOMP every format must run.
    assert result["deflate"] != "skipped" and result["gzip"] != "skipped"
    if backend == "real":
        assert "skipped" not in result.values(), result
    for name, outcome in result.items():
        if outcome == "skipped":
            continue
        for direction, equal in outcome.items():
            assert equal == [True] * 4, f"{name}: {direction}"
