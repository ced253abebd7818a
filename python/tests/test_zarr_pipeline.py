"""kvik.zarr_pipeline: a GDSStore's compressed chunks read into decoded GPU memory by one
kvik.nvcomp.read_decompress call per selection, against stock zarr on the CPU. The fused reads
need CuPy and nvCOMP (the H100); without them, the selection and the host path."""
import asyncio
import sys
import types

import numpy
import pytest
from conftest import cupy, CUPY_MISSING

zarr = pytest.importorskip("zarr")
import zarr.codecs  # noqa: E402
import zarr.codecs.numcodecs  # noqa: E402

import kvik  # noqa: E402
import kvik.nvcomp  # noqa: E402
import kvik.zarr  # noqa: E402
import kvik.zarr_codecs  # noqa: E402
import kvik.zarr_pipeline  # noqa: E402
from kvik.zarr import GDSStore  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

DATA = (numpy.arange(100 * 70, dtype="f4") // 3).reshape(100, 70)


def compressor(key):
    return {"zstd": zarr.codecs.ZstdCodec(level=3), "gzip": zarr.codecs.GzipCodec(level=5),
            "lz4": zarr.codecs.numcodecs.LZ4(),
            "zstd-checksum": zarr.codecs.ZstdCodec(level=3, checksum=True)}[key]


def write(path, key, data=DATA, chunks=(30, 20)):
    a = zarr.create_array(GDSStore(str(path)), shape=data.shape, chunks=chunks, dtype=data.dtype,
                          compressors=[compressor(key)], fill_value=-1, overwrite=True)
    a[:] = data
    return a


def test_selected_after_import():
    assert zarr.config.get("codec_pipeline.path") == "kvik.zarr_pipeline.FusedCodecPipeline"
    assert zarr.registry.get_pipeline_class() is kvik.zarr_pipeline.FusedCodecPipeline


def test_host_reads_and_writes_are_zarrs(tmp_path):
    a = write(tmp_path / "a", "zstd")
    assert isinstance(a._async_array.codec_pipeline, kvik.zarr_pipeline.FusedCodecPipeline)
    assert numpy.array_equal(a[:], DATA)
    assert numpy.array_equal(a[7:93, 3], DATA[7:93, 3])


def test_fused_format_takes_either_form_of_endian():
    """BytesCodec.endian is an Endian enum in zarr 3.1 and a plain str in zarr 3.4: both forms
    give the same answer, and big-endian data is never fused."""
    pipeline = kvik.zarr_pipeline.FusedCodecPipeline.from_codecs(
        [zarr.codecs.BytesCodec(), zarr.codecs.ZstdCodec(level=3)])
    codec = pipeline.array_bytes_codec
    native = pipeline._fused_format()
    for endian in ("little", "big"):
        object.__setattr__(codec, "endian", endian)
        assert pipeline._fused_format() == (native if endian == sys.byteorder else None)


def test_gpu_buffers_decode_and_encode_in_batches(monkeypatch):
    """decode() and encode() keep the chunks of GPU buffers together, GPU_BATCH_BYTES of them a
    call: zarr 3.4's read_batch and write_batch go through them, and Zarr's own cut their batches
    again by batch_size (1), one nvCOMP call per chunk. Host buffers keep batch_size."""
    pipeline = kvik.zarr_pipeline.FusedCodecPipeline.from_codecs(
        [zarr.codecs.BytesCodec(), zarr.codecs.ZstdCodec(level=3)])
    spec = types.SimpleNamespace(shape=(16, 16), prototype=None,
                                 dtype=types.SimpleNamespace(to_native_dtype=lambda: DATA.dtype))
    calls = []

    async def counting(self, batch):
        calls.append(len(batch))
        return [None] * len(batch)

    monkeypatch.setattr(kvik.zarr_pipeline.FusedCodecPipeline, "decode_batch", counting)
    monkeypatch.setattr(kvik.zarr_pipeline.FusedCodecPipeline, "encode_batch", counting)
    monkeypatch.setattr(kvik.zarr_pipeline, "GPU_BATCH_BYTES", 4 * 16 * 16 * DATA.itemsize)
    for on_gpu, expected in ((True, [4, 4, 1]), (False, [pipeline.batch_size] * 9)):
        monkeypatch.setattr(kvik.zarr_pipeline, "_on_gpu", lambda prototype: on_gpu)
        for run in (pipeline.decode, pipeline.encode):
            calls.clear()
            assert asyncio.run(run([(None, spec)] * 9)) == [None] * 9
            assert calls == expected, (on_gpu, run)


class HostArray:
    """A NumPy array behind ``__cuda_array_interface__``, as _Layout reads a CuPy array."""

    def __init__(self, array):
        self.dtype = array.dtype
        self.__cuda_array_interface__ = array.__array_interface__


@pytest.mark.parametrize("order", ["C", "F", "view"])
def test_layout_addresses_equal_the_views(order):
    """_Layout.address_of, the address of a chunk's place in the output without a view of it,
    gives a view's own address where that view is one C-ordered block of the chunk's shape, and
    None everywhere else: random unit-step, strided and integer selections of C-ordered,
    Fortran-ordered and strided arrays."""
    rng = numpy.random.default_rng(7)
    base = numpy.zeros((6, 5, 8), dtype="f8", order="F" if order == "F" else "C")
    array = base[::2, 1:, 2:] if order == "view" else base
    layout = kvik.zarr_pipeline._Layout(HostArray(array))
    found = 0
    for _ in range(3000):
        selection = []
        for dim in array.shape:
            start = int(rng.integers(0, dim))
            stop = int(rng.integers(start, dim + 1))
            kind = rng.integers(0, 8)
            selection.append(start if kind == 0 else slice(start, stop, 2) if kind == 1 else
                             slice(0, dim) if kind < 5 else slice(start, stop))
        selection = tuple(selection)
        view = array[selection]
        shape = view.shape if view.ndim == array.ndim else tuple(
            1 if isinstance(s, int) else 0 for s in selection)
        got = layout.address_of(selection, shape)
        whole = (view.ndim == array.ndim and view.flags.c_contiguous and view.size > 0
                 and all(isinstance(s, slice) and s.step is None for s in selection))
        if whole:
            found += 1
            assert got == view.__array_interface__["data"][0], selection
        elif view.size > 1 or view.ndim != array.ndim:
            assert got is None, selection
    assert found > (200 if order == "C" else 10), found  # rarer in F order and the view


# ---- on the GPU -----------------------------------------------------------------------------

needs_gpu = pytest.mark.skipif(cupy is None, reason=str(CUPY_MISSING))


@pytest.fixture
def counted(monkeypatch):
    """The number of chunks of each fused read the pipeline makes."""
    calls = []
    real = kvik.nvcomp._read_decompress_at

    def counting(codec, chunks):
        calls.append(len(chunks))
        return real(codec, chunks)

    monkeypatch.setattr(kvik.nvcomp, "_read_decompress_at", counting)
    return calls


def gpu_read(path, selection):
    with zarr.config.enable_gpu():
        got = zarr.open_array(GDSStore(str(path)), mode="r")[selection]
    assert isinstance(got, cupy.ndarray)
    return got.get()


@needs_gpu
@pytest.mark.parametrize("key", ["zstd", "gzip", "lz4"])
def test_fused_read_equals_the_cpu(tmp_path, key, counted):
    if not kvik.nvcomp.available():
        pytest.skip("no nvCOMP")
    write(tmp_path / "a", key)
    selections = [slice(None), (slice(7, 93), slice(3, 61)), (5, slice(None)),
                  (slice(None), 44), (slice(30, 60), slice(20, 40))]
    for selection in selections:
        counted.clear()
        assert numpy.array_equal(gpu_read(tmp_path / "a", selection), DATA[selection])
        assert len(counted) == 1, selection  # one fused call for every chunk of the selection
    assert counted == [1]  # the last selection is exactly one chunk


@needs_gpu
def test_missing_chunks_read_as_the_fill_value(tmp_path, counted):
    if not kvik.nvcomp.available():
        pytest.skip("no nvCOMP")
    write(tmp_path / "a", "zstd")
    (tmp_path / "a" / "c" / "1" / "1").unlink()
    want = DATA.copy()
    want[30:60, 20:40] = -1
    assert numpy.array_equal(gpu_read(tmp_path / "a", slice(None)), want)


@needs_gpu
def test_checksummed_zstd_is_not_fused(tmp_path, counted):
    write(tmp_path / "a", "zstd-checksum")
    assert numpy.array_equal(gpu_read(tmp_path / "a", slice(None)), DATA)
    assert counted == []


@needs_gpu
@pytest.mark.parametrize("key", ["zstd", "gzip", "lz4"])
def test_truncated_chunk_raises(tmp_path, key):
    """A chunk file cut short (a partial write) fails kvik's check of its framing, before nvCOMP
    sees it: the real nvCOMP's zstd decoder faulted the CUDA context on such a chunk."""
    if not kvik.nvcomp.available():
        pytest.skip("no nvCOMP")
    write(tmp_path / "a", key)
    chunk = tmp_path / "a" / "c" / "1" / "2"
    chunk.write_bytes(chunk.read_bytes()[:-7])
    with pytest.raises(kvik.KvikError) as raised:
        gpu_read(tmp_path / "a", slice(None))
    assert raised.value.name in ("EBADMSG", "KVIK_EDECODED_SIZE")
    assert "c/1/2" in str(raised.value)
    assert numpy.array_equal(gpu_read(tmp_path / "a", (slice(0, 30), slice(None))),
                             DATA[0:30])  # the context lives on


@needs_gpu
def test_gpu_writes_read_back_on_the_cpu(tmp_path):
    if not kvik.nvcomp.available():
        pytest.skip("no nvCOMP")
    with zarr.config.enable_gpu():
        a = zarr.create_array(GDSStore(str(tmp_path / "a")), shape=DATA.shape, chunks=(30, 20),
                              dtype="f4", compressors=[kvik.zarr_codecs.ZstdCodec(level=3)],
                              overwrite=True)
        a[:] = cupy.asarray(DATA)
    assert numpy.array_equal(zarr.open_array(str(tmp_path / "a"), mode="r")[:], DATA)
