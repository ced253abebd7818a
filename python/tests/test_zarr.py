"""kvik.zarr.GDSStore: Zarr's own store test-suite (host buffers), byte ranges, whole arrays, and,
where CuPy and a GPU exist, reads into and writes from device memory."""
import pickle

import numpy
import pytest

zarr = pytest.importorskip("zarr", minversion="3")

from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest  # noqa: E402
from zarr.core.buffer import cpu, default_buffer_prototype  # noqa: E402
from zarr.testing.store import StoreTests  # noqa: E402

import kvik  # noqa: E402
from conftest import CUPY_MISSING, cupy  # noqa: E402
from kvik.zarr import GDSStore  # noqa: E402

needs_gpu = pytest.mark.skipif(cupy is None, reason=str(CUPY_MISSING))


class TestGDSStore(StoreTests[GDSStore, cpu.Buffer]):
    """zarr.testing.store.StoreTests, with the files written and read behind the store's back."""

    store_cls = GDSStore
    buffer_cls = cpu.Buffer

    async def get(self, store, key):
        return self.buffer_cls.from_bytes((store.root / key).read_bytes())

    async def set(self, store, key, value):
        (store.root / key).parent.mkdir(parents=True, exist_ok=True)
        (store.root / key).write_bytes(value.to_bytes())

    @pytest.fixture
    def store_kwargs(self, tmp_path):
        return {"root": str(tmp_path)}

    def test_store_repr(self, store):
        assert str(store) == f"file://{store.root.as_posix()}"
        assert repr(store) == f"GDSStore('file://{store.root.as_posix()}')"

    def test_store_supports_writes(self, store):
        assert store.supports_writes

    def test_store_supports_listing(self, store):
        assert store.supports_listing


# ---- beyond the suite ---------------------------------------------------------------------

DATA = bytes(range(256)) * 40 + b"tail"  # 10244 bytes, not a multiple of any page or block


@pytest.fixture
def store(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "0").write_bytes(DATA)
    return GDSStore(tmp_path)


RANGES = [
    (None, slice(None)),
    (RangeByteRequest(0, 0), slice(0, 0)),
    (RangeByteRequest(1, 4097), slice(1, 4097)),
    (RangeByteRequest(10000, 20000), slice(10000, 20000)),  # runs past the end
    (RangeByteRequest(20000, 30000), slice(20000, 30000)),  # starts past the end
    (OffsetByteRequest(0), slice(0, None)),
    (OffsetByteRequest(4096), slice(4096, None)),
    (OffsetByteRequest(99999), slice(99999, None)),
    (SuffixByteRequest(1), slice(-1, None)),
    (SuffixByteRequest(5000), slice(-5000, None)),
    (SuffixByteRequest(99999), slice(-99999, None)),
]


@pytest.mark.parametrize(("byte_range", "expected"), RANGES, ids=repr)
async def test_byte_ranges(store, byte_range, expected):
    got = await store.get("c/0", default_buffer_prototype(), byte_range)
    assert isinstance(got, cpu.Buffer)
    assert got.to_bytes() == DATA[expected]
    assert store.get_sync("c/0", byte_range=byte_range).to_bytes() == DATA[expected]


async def test_partial_values_keep_order_and_missing_keys(store):
    ranges = [("c/0", SuffixByteRequest(3)), ("nope", None), ("c", None), ("c/0", RangeByteRequest(2, 5))]
    got = await store.get_partial_values(default_buffer_prototype(), ranges)
    assert [None if g is None else g.to_bytes() for g in got] == [DATA[-3:], None, None, DATA[2:5]]


async def test_missing_keys_read_as_none(store):
    proto = default_buffer_prototype()
    assert await store.get("nope", proto) is None
    assert await store.get("c", proto) is None  # a directory
    assert await store.get("c/0/below-a-file", proto) is None
    assert store.get_sync("nope") is None


async def test_bad_byte_range_raises(store):
    with pytest.raises(TypeError, match="Unexpected byte_range"):
        await store.get("c/0", default_buffer_prototype(), (0, 2))


async def test_io_goes_through_kvik(store, monkeypatch):
    """Reads and writes open the files with kvik.CuFile."""
    opened = []
    real = kvik.CuFile

    def spy(path, flags="r"):
        opened.append(flags)
        return real(path, flags)

    monkeypatch.setattr(kvik, "CuFile", spy)
    await store.set("k", cpu.Buffer.from_bytes(b"abc"))
    assert (await store.get("k", default_buffer_prototype())).to_bytes() == b"abc"
    assert opened == ["w", "r"]


async def test_set_replaces_and_leaves_no_temporaries(store):
    await store.set("a/b", cpu.Buffer.from_bytes(DATA))
    await store.set("a/b", cpu.Buffer.from_bytes(b"short"))
    assert (store.root / "a" / "b").read_bytes() == b"short"
    assert sorted(p.name for p in (store.root / "a").iterdir()) == ["b"]


async def test_unpickled_store_checks_its_root(tmp_path):
    """A store unpickled where its root is missing (a Dask worker without the file system)
    raises rather than reading every chunk as missing."""
    (tmp_path / "gone").mkdir()
    ro = GDSStore(tmp_path / "gone", read_only=True)
    assert await ro.get("c/0", default_buffer_prototype()) is None
    assert ro._is_open
    (tmp_path / "gone").rmdir()
    with pytest.raises(FileNotFoundError):
        await pickle.loads(pickle.dumps(ro)).get("c/0", default_buffer_prototype())
    with pytest.raises(FileNotFoundError):
        pickle.loads(pickle.dumps(ro)).get_sync("c/0")


def test_pickle_and_read_only(store):
    again = pickle.loads(pickle.dumps(store))
    assert again == store and again.root == store.root
    ro = store.with_read_only(True)
    assert isinstance(ro, GDSStore) and ro.read_only and ro == store
    with pytest.raises(ValueError, match="read-only"):
        ro.set_sync("x", cpu.Buffer.from_bytes(b"1"))


@pytest.mark.parametrize("compressors", [None, "auto"])
def test_array_roundtrip(tmp_path, rng, compressors):
    data = rng.standard_normal((50, 37))
    z = zarr.create_array(GDSStore(tmp_path), shape=data.shape, chunks=(16, 10), dtype=data.dtype,
                          compressors=compressors)
    z[:] = data
    z = zarr.open_array(GDSStore(tmp_path, read_only=True), mode="r")
    numpy.testing.assert_array_equal(z[:], data)
    numpy.testing.assert_array_equal(z[3:41, 5:6], data[3:41, 5:6])


# ---- GPU: Zarr's GPU buffer prototype -----------------------------------------------------


@needs_gpu
@pytest.mark.parametrize(("byte_range", "expected"), RANGES, ids=repr)
async def test_gpu_byte_ranges(store, byte_range, expected):
    with zarr.config.enable_gpu():
        got = await store.get("c/0", default_buffer_prototype(), byte_range)
    assert isinstance(got, zarr.core.buffer.gpu.Buffer)
    assert isinstance(got.as_array_like(), cupy.ndarray)
    assert got.to_bytes() == DATA[expected]


@needs_gpu
async def test_gpu_write_from_device(store):
    from zarr.core.buffer import gpu

    data = cupy.arange(1000, dtype=cupy.uint8)
    await store.set("dev", gpu.Buffer.from_array_like(data))
    assert (store.root / "dev").read_bytes() == data.get().tobytes()


@needs_gpu
@pytest.mark.parametrize("compressors", [None, "auto"])
def test_gpu_array_roundtrip(tmp_path, rng, compressors):
    data = rng.standard_normal((50, 37))
    with zarr.config.enable_gpu():
        z = zarr.create_array(GDSStore(tmp_path), shape=data.shape, chunks=(16, 10), dtype=data.dtype,
                              compressors=compressors)
        z[:] = cupy.asarray(data)
        got = zarr.open_array(GDSStore(tmp_path), mode="r")[:]
    assert isinstance(got, cupy.ndarray)
    numpy.testing.assert_array_equal(got.get(), data)
    # and the same files read back into host memory without the GPU prototype
    numpy.testing.assert_array_equal(zarr.open_array(GDSStore(tmp_path), mode="r")[:], data)
