"""kvik.nvcomp.read_decompress (kvik_file_read_decompress) against the fake nvCOMP on the fake CUDA
driver: chunks compressed on the CPU (zlib, and zstd/lz4 where their Python packages are here),
written at odd offsets of two files, read and decoded into device memory of the fake driver
(through ctypes, behind __cuda_array_interface__), and compared, the files given as CuFiles and
as paths (with None for the rest of a file), into a buffer each and into one buffer (out=); a
chunk of the wrong size, a chunk past the end of its file, a missing path and the argument
errors. Each case runs in a subprocess, since
libcuda and libnvcomp load once per process (test_nvcomp.py says more).
"""
import pytest

import kvik.nvcomp
from test_nvcomp import needs_fakes, run_python

FUSED = """
import ctypes, json, os, tempfile, zlib, kvik, kvik.nvcomp
cu = ctypes.CDLL("libcuda.so.1")
ctx = ctypes.c_void_p()
assert cu.cuInit(0) == 0 and cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0


class Device:
    def __init__(self, size):
        ptr = ctypes.c_uint64()
        assert cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)) == 0
        self.ptr, self.size = ptr, size
        self.__cuda_array_interface__ = {
            "data": (ptr.value, False), "shape": (size,), "typestr": "|u1", "version": 3}

    def download(self):
        out = ctypes.create_string_buffer(self.size)
        assert cu.cuMemcpyDtoH_v2(out, self.ptr, ctypes.c_size_t(self.size)) == 0
        return out.raw


def deflate(data):
    pack = zlib.compressobj(6, zlib.DEFLATED, -15)
    return pack.compress(data) + pack.flush()


raw = [b"fused chunk %d " % i * (50 + 700 * i) for i in range(8)]
packed = [deflate(r) for r in raw]
tmp = tempfile.mkdtemp()
paths = [os.path.join(tmp, "a"), os.path.join(tmp, "b")]
places, contents = [], [bytearray(b"x" * 17), bytearray(b"y" * 3)]
for i, p in enumerate(packed):
    places.append((i % 2, len(contents[i % 2])))
    contents[i % 2] += p + b"z" * (i * 7)
for path, content in zip(paths, contents):
    with open(path, "wb") as f:
        f.write(content)
files = [kvik.CuFile(path, "r") for path in paths]
outs = [Device(len(r)) for r in raw]
chunks = [(files[f], at, len(p), out) for (f, at), p, out in zip(places, packed, outs)]
result = {}
got = kvik.nvcomp.read_decompress(kvik.nvcomp.DeflateCodec(), chunks)
result["round trip"] = [g is o and o.download() == r for g, o, r in zip(got, outs, raw)]
kvik.nvcomp.read_decompress("deflate", chunks[:0])

# The same by path, the last chunk of each file as the rest of it (None), a pathlib.Path too.
import pathlib
outs2 = [Device(len(r)) for r in raw]
last = {f: i for i, (f, _) in enumerate(places)}
by_path = [(pathlib.Path(paths[f]) if i % 3 == 0 else paths[f], at,
            None if last[f] == i else len(p), out)
           for i, ((f, at), p, out) in enumerate(zip(places, packed, outs2))]
kvik.nvcomp.read_decompress("deflate", by_path)
result["by path"] = [o.download() == r for o, r in zip(outs2, raw)]
try:
    kvik.nvcomp.read_decompress("deflate", [(os.path.join(tmp, "missing"), 0, 4, outs2[0])])
except FileNotFoundError as e:
    result["missing"] = str(e)
try:
    kvik.nvcomp.read_decompress("deflate", [(paths[1], len(contents[1]), None, outs2[0])])
except kvik.KvikError as e:
    result["offset at the end"] = [e.code, e.statuses, str(e)]
try:
    kvik.nvcomp.read_decompress("deflate", [(paths[1], 0, 0, outs2[0])])
except ValueError as e:
    result["size 0"] = str(e)

# Into one buffer, the chunks one after the other, by path and by CuFile.
whole = Device(sum(len(r) for r in raw))
into = [(paths[f] if i % 2 else files[f], at, len(p), len(r))
        for i, ((f, at), p, r) in enumerate(zip(places, packed, raw))]
result["into out"] = [kvik.nvcomp.read_decompress("deflate", into, out=whole) is whole,
                      whole.download() == b"".join(raw)]
try:
    kvik.nvcomp.read_decompress("deflate", into[1:], out=whole)
except ValueError as e:
    result["out too large"] = str(e)
try:
    kvik.nvcomp.read_decompress("deflate", into, out=bytearray(whole.size))
except TypeError as e:
    result["host out="] = str(e)

# Chunk 2 given 5 bytes more than it decodes to, chunk 5 past the end of its file.
bad = list(chunks)
bad[2] = (files[0], places[2][1], len(packed[2]), Device(len(raw[2]) + 5))
bad[5] = (files[1], len(contents[1]) - 3, len(packed[5]), outs[5])
try:
    kvik.nvcomp.read_decompress("DEFLATE", bad)
except kvik.KvikError as e:
    result["error"] = [e.chunk, e.statuses, e.code, str(e)]
result["others"] = [outs[i].download() == raw[i] for i in (0, 1, 3, 4, 6, 7)]

for name, args in {
        "host out": ("deflate", [(files[0], 0, 4, bytearray(4))]),
        "not a CuFile": ("deflate", [(42, 0, 4, outs[0])]),
        "unknown codec": ("brotli", chunks),
        "not a tuple": ("deflate", [[files[0], 0, 4, outs[0]]]),
}.items():
    try:
        if name == "not a tuple":
            kvik._lib.read_decompress(3, args[1])
        else:
            kvik.nvcomp.read_decompress(*args)
    except (TypeError, ValueError) as e:
        result[name] = type(e).__name__ + ": " + str(e)
files[1].close()
try:
    kvik.nvcomp.read_decompress("deflate", chunks)
except ValueError as e:
    result["closed"] = str(e)
print(json.dumps(result))
"""


@needs_fakes
def test_read_decompress():
    result = run_python(FUSED)
    assert result["round trip"] == [True] * 8
    chunk, statuses, code, text = result["error"]
    assert chunk == 2
    assert code == statuses[2] == -4014  # KVIK_EDECODED_SIZE
    assert statuses[5] == -61  # ENODATA: the file ends inside the chunk
    assert [s for i, s in enumerate(statuses) if i not in (2, 5)] == [0] * 6
    assert "kvik_file_read_decompress(deflate): chunk 2 of 8" in text
    assert result["others"] == [True] * 6
    assert result["host out"].startswith("TypeError: chunk 0: out must be device memory")
    assert result["not a CuFile"].startswith(
        "TypeError: read_decompress(): chunk 0: expected a kvik.CuFile or a path, not int")
    assert result["by path"] == [True] * 8
    assert "kvik_file_open" in result["missing"] and "missing" in result["missing"]
    code, statuses, text = result["offset at the end"]
    assert code == -61 and statuses == [-61]  # ENODATA
    assert "at or before the chunk's offset" in text
    assert result["size 0"] == (
        "read_decompress(): chunk 0: compressed_size 0 (None: the rest of the file)")
    assert result["into out"] == [True, True]
    assert result["out too large"].startswith("the chunks decode to ")
    assert result["host out="].startswith("out must be device memory")
    assert result["unknown codec"].startswith("ValueError: unknown codec 'brotli'")
    assert result["not a tuple"].startswith("TypeError: read_decompress(): chunk 0 is not a tuple")
    assert result["closed"] == "I/O operation on closed file"


def test_exported():
    assert "read_decompress" in kvik.nvcomp.__all__
    with pytest.raises(ValueError, match="unknown codec"):
        kvik.nvcomp.read_decompress("brotli", [])
