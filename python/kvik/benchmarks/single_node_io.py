"""Round-trip benchmark, kvikio's benchmarks/single_node_io.py on kvik, with its command line:

    python -m kvik.benchmarks.single_node_io -n 1MiB -d DIR --api cufile posix

Each API writes --nbytes to files in --dir (a temporary directory by default) and reads them
back, --nruns times, and prints the throughput; in GPU memory where CuPy finds a GPU, else in
host memory. APIs: cufile (one file, one array), cufile-mfma (a file and an array per thread),
cufile-mf (one array, a file per thread), cufile-ma (one file, an array per thread), posix
(Python's files, no kvik) and zarr (a kvik.zarr.GDSStore array of one chunk).
"""
from __future__ import annotations

import argparse
import contextlib
import pathlib
import tempfile
from time import perf_counter as clock

import kvik
import kvik.buffer
import kvik.defaults
from kvik.benchmarks.utils import (
    _array_module,
    _report,
    format_bytes,
    parse_bytes,
    parse_directory,
    pprint_sys_info,
)


def _timed(nbytes, step):
    """The seconds step() takes; it must move `nbytes` bytes, as it returns."""
    t0 = clock()
    moved = step()
    seconds = clock() - t0
    if moved != nbytes:
        raise SystemExit(f"IO mismatch, expected {nbytes} got {moved}")
    return seconds


@contextlib.contextmanager
def _registered(args, arrays):
    """--pre-register-buffer: the arrays registered with cuFile for the run."""
    if args.pre_register_buffer:
        for a in arrays:
            kvik.buffer.memory_register(a)
    try:
        yield
    finally:
        if args.pre_register_buffer:
            for a in arrays:
                kvik.buffer.memory_deregister(a)


def _run_parts(args, xp, nfiles, narrays):
    """(read, write) seconds of --nbytes split over --nthreads parts, each a pwrite then a pread
    of its own (file, offset, array), all parts in flight at once: with `nfiles` > 1 each part
    has a file, else all share one; with `narrays` > 1 each has an array, else all are slices of
    one."""
    nparts = max(nfiles, narrays)
    if args.nbytes % nparts:
        raise SystemExit("--nbytes must be divisible by --nthreads")
    chunk = args.nbytes // nparts
    arrays = [xp.arange(args.nbytes // narrays, dtype="uint8") for _ in range(narrays)]
    paths = [args.dir / f"kvik-{i:03d}" for i in range(nfiles)]
    parts = [(paths[i] if nfiles > 1 else paths[0],
              arrays[i] if narrays > 1 else arrays[0][i * chunk : (i + 1) * chunk],
              0 if nfiles > 1 else i * chunk) for i in range(nparts)]

    def move(flags, method):
        files = {path: kvik.CuFile(path, flags) for path in paths}
        try:
            futures = [getattr(files[p], method)(a, file_offset=o) for p, a, o in parts]
            return sum(f.get() for f in futures)
        finally:
            for f in files.values():
                f.close()

    with _registered(args, arrays):
        write = _timed(args.nbytes, lambda: move("w", "pwrite"))
        read = _timed(args.nbytes, lambda: move("r", "pread"))
    return read, write


def run_posix(args, xp):
    """Python's files and the array module's fromfile, no kvik."""
    data = xp.arange(args.nbytes, dtype="uint8")
    path = args.dir / "posix-single-file"

    def write():
        with open(path, "wb") as f:
            return f.write(data.tobytes())

    def read():
        with open(path, "rb") as f:
            return xp.fromfile(f, dtype="uint8", count=args.nbytes).nbytes

    write_time = _timed(args.nbytes, write)
    return _timed(args.nbytes, read), write_time


def run_zarr(args, xp):
    """A one-chunk Zarr array in a kvik.zarr.GDSStore, in GPU memory where xp is CuPy."""
    import zarr

    import kvik.zarr

    data = xp.arange(args.nbytes, dtype="uint8")
    gpu = zarr.config.enable_gpu() if xp.__name__ == "cupy" else contextlib.nullcontext()
    with gpu:
        store = kvik.zarr.GDSStore(args.dir / "zarr")
        z = zarr.create_array(store, shape=data.shape, dtype=data.dtype, chunks=data.shape,
                              compressors=None, overwrite=True)

        def write():
            z[:] = data
            return data.nbytes

        write_time = _timed(args.nbytes, write)
        return _timed(args.nbytes, lambda: z[:].nbytes), write_time


API = {
    "cufile": lambda args, xp: _run_parts(args, xp, 1, 1),
    "posix": run_posix,
    "cufile-mfma": lambda args, xp: _run_parts(args, xp, args.nthreads, args.nthreads),
    "cufile-mf": lambda args, xp: _run_parts(args, xp, args.nthreads, 1),
    "cufile-ma": lambda args, xp: _run_parts(args, xp, 1, args.nthreads),
    "zarr": run_zarr,
}


def main(args):
    xp = _array_module()
    kvik.defaults.set("num_threads", args.nthreads)
    print("Roundtrip benchmark")
    print("----------------------------------")
    pprint_sys_info()
    print("----------------------------------")
    print(f"nbytes            | {args.nbytes} bytes ({format_bytes(args.nbytes)})")
    print(f"4K aligned        | {args.nbytes % 4096 == 0}")
    print(f"pre-reg-buf       | {args.pre_register_buffer}")
    print(f"directory         | {args.dir}")
    print(f"nthreads          | {args.nthreads}")
    print(f"nruns             | {args.nruns}")
    print(f"memory            | {'GPU (CuPy)' if xp.__name__ == 'cupy' else 'host (NumPy)'}")
    print("==================================")
    for api in args.api:
        runs = [API[api](args, xp) for _ in range(args.nruns)]
        print(_report(f"{api} read", args.nbytes, [r for r, _ in runs]))
        print(_report(f"{api} write", args.nbytes, [w for _, w in runs]))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Roundtrip benchmark")
    parser.add_argument("-n", "--nbytes", metavar="BYTES", default="10 MiB", type=parse_bytes,
                        help="Message size, which must be a multiple of 8 (default: %(default)s).")
    parser.add_argument("-d", "--dir", metavar="PATH", default=None, type=parse_directory,
                        help="Path to the directory to r/w from (default: a temporary one)")
    parser.add_argument("--nruns", metavar="RUNS", default=1, type=int,
                        help="Number of runs per API (default: %(default)s).")
    parser.add_argument("--pre-register-buffer", action="store_true", default=False,
                        help="Enable pre-register of device buffer")
    parser.add_argument("-t", "--nthreads", metavar="THREADS", default=1, type=int,
                        help="Number of threads to use (default: %(default)s).")
    parser.add_argument("--api", metavar="API", default=("cufile", "posix"), nargs="+",
                        choices=tuple(API) + ("all",), help="List of APIs to use {%(choices)s}")
    args = parser.parse_args(argv)
    if "all" in args.api:
        args.api = tuple(API)
    return args


if __name__ == "__main__":
    args = parse_args()
    with contextlib.ExitStack() as stack:
        if args.dir is None:
            args.dir = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
        main(args)
