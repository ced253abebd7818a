"""Read a Zarr array through kvik.zarr.GDSStore with Dask, on one machine and then on a cluster.

The same Dask computation runs twice over one Zarr array: with Dask's threaded scheduler in this
process, then on dask.distributed workers, which receive the store by pickling and read their own
chunks through kvik. The two results must agree. With --gpu, Zarr's GPU buffer prototype is
switched on in this process and in every worker, so chunks are read from the files straight into
CuPy arrays in GPU memory.

Needs: kvik (python/ of this repository, built), zarr>=3, dask[array], distributed; CuPy and a
GPU for --gpu. Run from the repository root, for example:

    cd python && python setup.py build_ext --inplace && cd ..
    PYTHONPATH=python python examples/zarr_dask.py                 # 2 local worker processes
    PYTHONPATH=python python examples/zarr_dask.py --gpu           # chunks in GPU memory
    PYTHONPATH=python python examples/zarr_dask.py --path /shared/a.zarr \
        --scheduler tcp://head-node:8786                           # workers on other machines

Scaling out: start `dask scheduler` on one machine and `dask worker tcp://head-node:8786` on each
of the others (with kvik installed), and put the array on a file system that every worker mounts
at the same path (NFS, Lustre, GPFS, ...): a GDSStore is a local path, and each worker opens the
files of the chunks it is given. docs/zarr-dask.md says more.
"""
import argparse
import os
import tempfile
import time

import dask
import dask.array as da
import numpy
import zarr

from kvik.zarr import GDSStore

GPU_CONFIG = {"buffer": "zarr.buffer.gpu.Buffer", "ndbuffer": "zarr.buffer.gpu.NDBuffer"}


def use_gpu_buffers():
    """Make Zarr hand out GPU buffers in this process from now on (zarr.config.enable_gpu(),
    kept rather than scoped to a with-block, so worker threads see it too)."""
    zarr.config.set(GPU_CONFIG)


def write(path, shape, chunks):
    """Write random numbers to a new Zarr array at `path`, chunk by chunk in parallel."""
    z = zarr.create_array(GDSStore(path), shape=shape, chunks=chunks, dtype="f8", overwrite=True)
    data = da.random.default_rng(42).standard_normal(shape, chunks=chunks)
    da.store(data, z, lock=False, scheduler="threads")


def statistics(x):
    """A few reductions over every chunk: the overall mean and spread, and per-column maxima."""
    return x.mean(), x.std(), x.max(axis=0)


def to_host(values):
    return [v.get() if hasattr(v, "get") else numpy.asarray(v) for v in values]


def timed(what, compute):
    start = time.perf_counter()
    result = to_host(compute())
    print(f"{what:<46} {time.perf_counter() - start:8.3f} s   mean {result[0]:+.6f}  std {result[1]:.6f}")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", help="where the array lives (default: a temporary directory)")
    parser.add_argument("--shape", type=int, nargs=2, default=(4096, 4096))
    parser.add_argument("--chunks", type=int, nargs=2, default=(1024, 1024))
    parser.add_argument("--gpu", action="store_true", help="read chunks into GPU memory (CuPy)")
    parser.add_argument("--scheduler", help="address of a running dask scheduler (default: a LocalCluster)")
    parser.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        path = args.path or os.path.join(tmp, "example.zarr")
        if not os.path.exists(os.path.join(path, "zarr.json")):
            write(path, tuple(args.shape), tuple(args.chunks))
        if args.gpu:
            use_gpu_buffers()

        # A lazy Dask array with one task per Zarr chunk. Made after use_gpu_buffers(), its
        # meta (the kind of array its chunks are) is a CuPy array with --gpu.
        x = da.from_zarr(GDSStore(path, read_only=True))
        print(f"{path}: {x.shape} {x.dtype}, {x.npartitions} chunks of {x.chunksize}, "
              f"{type(x._meta).__module__.split('.')[0]} chunks")

        # Warm up on one chunk first, so that the timings leave out starting CUDA and compiling
        # CuPy's reduction kernels (with --gpu), which the workers do again in their processes.
        dask.compute(*statistics(x.blocks[0, 0]), scheduler="threads")
        local = timed("threaded scheduler", lambda: dask.compute(*statistics(x), scheduler="threads"))

        from distributed import Client, LocalCluster

        if args.scheduler:
            client, cluster = Client(args.scheduler), None
        else:
            cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)
        try:
            if args.gpu:
                client.run(use_gpu_buffers)  # each worker process has its own zarr.config
            client.run(lambda: dask.compute(*statistics(x.blocks[0, 0]), scheduler="sync"))
            where = args.scheduler or f"LocalCluster, {args.workers} processes"
            spread = timed(f"dask.distributed ({where})", lambda: client.compute(statistics(x), sync=True))
        finally:
            client.close()
            if cluster is not None:
                cluster.close()

    for a, b in zip(local, spread):
        numpy.testing.assert_allclose(a, b, rtol=1e-12)
    print("same result on both schedulers")


if __name__ == "__main__":
    main()
