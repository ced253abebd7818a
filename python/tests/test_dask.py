"""Dask over kvik.zarr.GDSStore: one computation on a Zarr array read with dask.array.from_zarr
gives the same result under the threaded scheduler and on a dask.distributed LocalCluster of two
worker processes, which get the store by pickling."""
import numpy
import pytest

zarr = pytest.importorskip("zarr", minversion="3")
da = pytest.importorskip("dask.array")

from kvik.zarr import GDSStore  # noqa: E402

SHAPE, CHUNKS = (96, 70), (32, 25)  # 3 x 3 chunks, the last column of chunks short


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """The path of a Zarr array written through GDSStore, and its data."""
    path = tmp_path_factory.mktemp("zarr") / "source.zarr"
    data = numpy.random.default_rng(7).standard_normal(SHAPE)
    z = zarr.create_array(GDSStore(path), shape=SHAPE, chunks=CHUNKS, dtype=data.dtype)
    z[:] = data
    return path, data


def reduction(x):
    """A computation that mixes chunks: per-column sums of a transformed array."""
    return (2 * x + 1).sum(axis=0) - x.T.dot(x).trace()


def test_threaded(source):
    path, data = source
    x = da.from_zarr(zarr.open_array(GDSStore(path, read_only=True), mode="r"))
    assert x.chunks == ((32, 32, 32), (25, 25, 20))
    numpy.testing.assert_array_equal(x.compute(scheduler="threads"), data)
    numpy.testing.assert_allclose(reduction(x).compute(scheduler="threads"), reduction(data))


def test_distributed(source, tmp_path):
    distributed = pytest.importorskip("distributed")
    path, data = source
    x = da.from_zarr(zarr.open_array(GDSStore(path, read_only=True), mode="r"))
    expected = reduction(x).compute(scheduler="threads")

    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:
        got = reduction(x).compute()  # the client is now dask's default scheduler
        # equal up to rounding: BLAS may sum in another order with the workers' thread count
        numpy.testing.assert_allclose(got, expected, rtol=1e-12)
        numpy.testing.assert_array_equal(x.compute(), data)
        # the workers also write through GDSStore: store a result, then read it back here
        target = zarr.create_array(GDSStore(tmp_path / "out.zarr"), shape=SHAPE, chunks=CHUNKS,
                                   dtype=data.dtype)
        da.store(2 * x, target, lock=False)
        workers = client.run(lambda: "ok")  # both worker processes answered
    assert len(workers) == 2
    numpy.testing.assert_array_equal(zarr.open_array(GDSStore(tmp_path / "out.zarr"), mode="r")[:], 2 * data)
