"""HTTP read benchmark, kvikio's benchmarks/http_io.py on kvik, with its command line:

    python -m kvik.benchmarks.http_io -n 1000 --api cupy numpy

Each API reads --nelem elements of --dtype from an HTTP server with kvik.RemoteFile into an
array of its module (CuPy: GPU memory; NumPy: host memory), --nruns times, checks the bytes and
prints the throughput. The server is kvik.utils.LocalHttpServer on a temporary directory unless
--server names one, whose files lie in --server-root-path.
"""
from __future__ import annotations

import argparse
import contextlib
import pathlib
import tempfile
from time import perf_counter as clock

import numpy

import kvik
import kvik.defaults
from kvik.benchmarks.utils import _report, format_bytes
from kvik.utils import LocalHttpServer


def run(args, xp):
    """The seconds of each of --nruns reads of the file into an `xp` array."""
    src = numpy.arange(args.nelem, dtype=args.dtype)
    src.tofile(args.server_root_path / "data")
    dst = xp.empty_like(src)
    url = f"{args.server_url}/data"
    seconds = []
    for _ in range(args.nruns):
        t0 = clock()
        with kvik.RemoteFile.open_http(url, nbytes=src.nbytes) as f:
            got = f.read(dst)
        seconds.append(clock() - t0)
        if got != args.nbytes:
            raise SystemExit(f"IO mismatch, expected {args.nbytes} got {got}")
        host = dst.get() if xp.__name__ == "cupy" else dst
        numpy.testing.assert_array_equal(src, host)
    return seconds


def array_module(name):
    """The module of --api `name`; CuPy must be there for "cupy"."""
    if name == "cupy":
        import cupy

        return cupy
    return numpy


def main(args):
    kvik.defaults.set("num_threads", args.nthreads)
    print("Roundtrip benchmark")
    print("--------------------------------------")
    print(f"nelem       | {args.nelem} ({format_bytes(args.nbytes)})")
    print(f"dtype       | {args.dtype}")
    print(f"nthreads    | {args.nthreads}")
    print(f"nruns       | {args.nruns}")
    print(f"server      | {args.server}")
    if args.server is None:
        print("--------------------------------------")
        print("WARNING: the bundled server is slow, ")
        print("consider using --server.")
    print("======================================")
    for api in args.api:
        print(_report(f"{api}-read", args.nbytes, run(args, array_module(api))))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="HTTP benchmark")
    parser.add_argument("-n", "--nelem", metavar="NELEM", default="1024", type=int,
                        help="Number of elements (default: %(default)s).")
    parser.add_argument("--dtype", metavar="DATATYPE", default="float32", type=numpy.dtype,
                        help="The data type of each element (default: %(default)s).")
    parser.add_argument("--nruns", metavar="RUNS", default=1, type=int,
                        help="Number of runs per API (default: %(default)s).")
    parser.add_argument("-t", "--nthreads", metavar="THREADS", default=1, type=int,
                        help="Number of threads to use (default: %(default)s).")
    parser.add_argument("--server", default=None,
                        help="Connect to an external http server as opposed to the bundled (very "
                             "slow) HTTP server. Remember to also set --server-root-path.")
    parser.add_argument("--server-root-path", default=None,
                        help="Path to the root directory that `--server` serves (local path).")
    parser.add_argument("--bundled-server-lifetime", metavar="SECONDS", default=3600, type=int,
                        help="Maximum lifetime of the bundled server (default: %(default)s).")
    parser.add_argument("--api", metavar="API", default=["cupy"], nargs="+",
                        choices=("cupy", "numpy", "all"),
                        help="List of APIs to use {%(choices)s} (default: %(default)s).")
    args = parser.parse_args(argv)
    args.nbytes = args.nelem * args.dtype.itemsize
    if "all" in args.api:
        args.api = ("cupy", "numpy")
    if args.server is not None and args.server_root_path is None:
        parser.error("please set --server-root-path")
    return args


if __name__ == "__main__":
    args = parse_args()
    with contextlib.ExitStack() as stack:
        if args.server is None:
            args.server_root_path = pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
            server = LocalHttpServer(root_path=args.server_root_path, range_support=True,
                                     max_lifetime=args.bundled_server_lifetime)
            args.server_url = stack.enter_context(server).url
        else:
            args.server_url = args.server
            args.server_root_path = pathlib.Path(args.server_root_path)
        main(args)
