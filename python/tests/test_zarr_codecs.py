"""kvik.zarr_codecs: Zarr 3 GPU codecs for zstd, gzip and numcodecs.lz4. Without CuPy: the
registration, the config, the JSON and the host path against stock zarr, and the batch functions
on the fakes (host chunks staged through the fake driver). With CuPy and a GPU (the H100): stock
CPU-written arrays read under enable_gpu(), and GPU-written arrays read back by stock zarr."""
import warnings

import numpy
import pytest
from conftest import cupy, CUPY_MISSING
from test_nvcomp import needs_fakes, run_python

zarr = pytest.importorskip("zarr")
import zarr.codecs  # noqa: E402
import zarr.codecs.numcodecs  # noqa: E402

import kvik.zarr  # noqa: E402,F401  (registers the codecs)
import kvik.zarr_codecs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

STOCK = {"zstd": "zarr.codecs.zstd.ZstdCodec", "gzip": "zarr.codecs.gzip.GzipCodec",
         "numcodecs.lz4": "zarr.codecs.numcodecs.LZ4"}
OURS = {"zstd": kvik.zarr_codecs.ZstdCodec, "gzip": kvik.zarr_codecs.GzipCodec,
        "numcodecs.lz4": kvik.zarr_codecs.LZ4}


def compressors():
    return {"zstd": zarr.codecs.ZstdCodec(level=3), "gzip": zarr.codecs.GzipCodec(level=5),
            "numcodecs.lz4": zarr.codecs.numcodecs.LZ4(acceleration=2)}


def stock_config():
    """zarr.config with zarr's own classes selected again."""
    selected = dict(zarr.config.get("codecs"))
    selected.update(STOCK)
    return zarr.config.set({"codecs": selected})


def write(path, compressor, data, chunks=(30, 30)):
    a = zarr.create_array(str(path), shape=data.shape, chunks=chunks, dtype=data.dtype,
                          compressors=[compressor], overwrite=True)
    a[:] = data
    return a


DATA = (numpy.arange(100 * 100, dtype="f4") // 3).reshape(100, 100)


def test_selected_after_import():
    codecs = zarr.config.get("codecs")
    for key, cls in OURS.items():
        assert codecs[key] == f"kvik.zarr_codecs.{cls.__name__}"
        assert zarr.registry.get_codec_class(key) is cls
    assert codecs["blosc"] == "zarr.codecs.blosc.BloscCodec"  # the others kept
    assert issubclass(kvik.zarr_codecs.ZstdCodec, zarr.codecs.ZstdCodec)
    assert issubclass(kvik.zarr_codecs.GzipCodec, zarr.codecs.GzipCodec)
    assert issubclass(kvik.zarr_codecs.LZ4, zarr.codecs.numcodecs.LZ4)


def without_mtime(key, chunk):
    """A chunk's bytes, a gzip member's MTIME (bytes 4-7, the second it was written) zeroed."""
    return chunk[:4] + bytes(4) + chunk[8:] if key == "gzip" else chunk


@pytest.mark.parametrize("key", sorted(STOCK))
def test_same_json_and_host_path(tmp_path, key):
    """Stock-written arrays open with our classes, whose JSON is stock's; host reads and writes
    give stock's bytes; what ours wrote stock reads."""
    with stock_config():
        write(tmp_path / "stock", compressors()[key], DATA)
        stock_meta = (tmp_path / "stock" / "zarr.json").read_text()
    a = zarr.open_array(str(tmp_path / "stock"))
    assert type(a.metadata.codecs[-1]) is OURS[key]
    assert numpy.array_equal(a[:], DATA)
    ours = OURS[key].from_dict(compressors()[key].to_dict())
    assert ours.to_dict() == compressors()[key].to_dict()
    write(tmp_path / "ours", ours, DATA)
    assert (tmp_path / "ours" / "zarr.json").read_text() == stock_meta
    for chunk in ("c/0/0", "c/3/3"):
        assert without_mtime(key, (tmp_path / "ours" / chunk).read_bytes()) == \
            without_mtime(key, (tmp_path / "stock" / chunk).read_bytes())
    with stock_config():
        assert numpy.array_equal(zarr.open_array(str(tmp_path / "ours"))[:], DATA)


BATCH = """
import json, gzip, warnings, numpy, zarr, zarr.codecs, zarr.codecs.numcodecs
warnings.simplefilter("ignore")
import kvik.zarr_codecs as kz
data = (numpy.arange(100 * 100, dtype="f4") // 3).reshape(100, 100)
out = {}
for key, stock, ours in (("zstd", zarr.codecs.ZstdCodec(level=3), kz.ZstdCodec),
                         ("gzip", zarr.codecs.GzipCodec(level=5), kz.GzipCodec),
                         ("numcodecs.lz4", zarr.codecs.numcodecs.LZ4(), kz.LZ4)):
    path = ROOT + "/" + key
    a = zarr.create_array(path, shape=data.shape, chunks=(30, 30), dtype="f4",
                          compressors=[stock], overwrite=True)
    a[:] = data
    names = ["c/0/0", "c/3/3", "c/1/2"]
    files = [open(path + "/" + n, "rb").read() for n in names]
    edge = numpy.zeros((30, 30), dtype="f4")  # an edge chunk is stored whole, filled with 0
    edge[:10, :10] = data[90:, 90:]
    want = [data[0:30, 0:30], edge, data[30:60, 60:90]]
    r = {}
    got = ours.decode_chunks(files, [None] * 3)
    r["decode"] = [bytes(g) == numpy.ascontiguousarray(w).tobytes() for g, w in zip(got, want)]
    raw = [numpy.ascontiguousarray(w).tobytes() for w in want]
    enc = ours.encode_chunks(raw)
    if key == "zstd":
        back = [stock._zstd_codec.decode(e) for e in enc]
    elif key == "gzip":
        back = [gzip.decompress(e) for e in enc]
    else:
        back = [stock._codec.decode(e) for e in enc]
    r["stock reads ours"] = [bytes(b) == w for b, w in zip(back, raw)]
    bad = bytearray(files[0])
    if key == "numcodecs.lz4":
        bad[0] ^= 1  # the header states another size
    elif key == "gzip":
        bad[-4] ^= 1
    else:
        bad = None
    if bad is not None:
        try:
            ours.decode_chunks([bytes(bad)], [None])
        except Exception as e:
            r["wrong size"] = type(e).__name__
    out[key] = r
print(json.dumps(out))
"""


@needs_fakes
def test_batch_functions_on_the_fakes(tmp_path):
    result = run_python(f"ROOT = {str(tmp_path)!r}\n" + BATCH)
    for key, r in result.items():
        assert r["decode"] == [True] * 3, key
        assert r["stock reads ours"] == [True] * 3, key
        if key != "zstd":
            assert r["wrong size"] in ("ValueError", "KvikError"), key


# ---- on the GPU -----------------------------------------------------------------------------

needs_cupy = pytest.mark.skipif(cupy is None, reason=str(CUPY_MISSING))


@needs_cupy
@pytest.mark.parametrize("key", sorted(STOCK))
def test_gpu_reads_stock_and_stock_reads_gpu(tmp_path, key):
    if not kvik.nvcomp.available():
        pytest.skip("no nvCOMP")
    with stock_config():
        write(tmp_path / "stock", compressors()[key], DATA)
    with zarr.config.enable_gpu():
        a = zarr.open_array(str(tmp_path / "stock"))
        got = a[:]
        assert isinstance(got, cupy.ndarray)
        assert numpy.array_equal(got.get(), DATA)
        ours = OURS[key].from_dict(compressors()[key].to_dict())
        b = zarr.create_array(str(tmp_path / "gpu"), shape=DATA.shape, chunks=(30, 30),
                              dtype="f4", compressors=[ours], overwrite=True)
        b[:] = cupy.asarray(DATA)
    assert (tmp_path / "gpu" / "zarr.json").read_text() == \
        (tmp_path / "stock" / "zarr.json").read_text()
    with stock_config():
        assert numpy.array_equal(zarr.open_array(str(tmp_path / "gpu"))[:], DATA)


@needs_cupy
def test_gpu_batch_is_one_nvcomp_call(tmp_path, monkeypatch):
    if not kvik.nvcomp.available():
        pytest.skip("no nvCOMP")
    with stock_config():
        write(tmp_path / "stock", compressors()["zstd"], DATA, chunks=(10, 10))
    calls = []
    real = kvik.nvcomp.ZstdCodec.decode

    def counting(self, chunks, out):
        calls.append(len(chunks))
        return real(self, chunks, out)

    monkeypatch.setattr(kvik.nvcomp.ZstdCodec, "decode", counting)
    with zarr.config.enable_gpu():
        assert numpy.array_equal(zarr.open_array(str(tmp_path / "stock"))[:].get(), DATA)
    assert sum(calls) == 100 and len(calls) < 100


@needs_cupy
def test_gpu_without_nvcomp_falls_back(tmp_path, monkeypatch):
    with stock_config():
        write(tmp_path / "stock", compressors()["gzip"], DATA)
    monkeypatch.setattr(kvik.zarr_codecs.nvcomp, "available", lambda: False)
    with zarr.config.enable_gpu():
        got = zarr.open_array(str(tmp_path / "stock"))[:]
    assert isinstance(got, cupy.ndarray) and numpy.array_equal(got.get(), DATA)


def test_no_warning_noise():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kvik.zarr_codecs.ZstdCodec(level=1)
        kvik.zarr_codecs.GzipCodec(level=1)
