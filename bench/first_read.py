#!/usr/bin/env python3
r"""A new process's first reads of a page-cached file into one GPU buffer, through each libkvik.so
given, the libraries taking turns, each run in a process of its own.

Each process allocates the buffer (PyTorch, or CuPy where PyTorch is missing), then opens, reads
and frees the file READS times (kvik_file_open, kvik_file_read, kvik_file_free), all timed. The
first read pays for what a program that loads one file once pays: the pool's threads and the
pinned bounce buffers; the later ones show the steady rate. Compare two builds of kvik:

    python3 bench/first_read.py --file /var/tmp/zc8g --libs old/libkvik.so,build/libkvik.so \
        --rounds 3
"""
import argparse
import ctypes as c
import os
import subprocess
import sys
import time


def device_buffer(size):
    """A device buffer of `size` bytes: (pointer, keep-alive object)."""
    try:
        import torch

        buf = torch.empty(size, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        return buf.data_ptr(), buf
    except ImportError:
        import cupy

        buf = cupy.empty(size, dtype=cupy.uint8)
        cupy.cuda.Device().synchronize()
        return buf.data.ptr, buf


def child(lib_path, path, reads):
    ptr, keep = device_buffer(os.path.getsize(path))
    lib = c.CDLL(lib_path)
    lib.kvik_file_open.argtypes = [c.c_char_p, c.c_char_p, c.c_uint, c.POINTER(c.c_void_p)]
    lib.kvik_file_read.restype = c.c_ssize_t
    lib.kvik_file_read.argtypes = [c.c_void_p, c.c_void_p, c.c_size_t, c.c_int64]
    lib.kvik_file_free.argtypes = [c.c_void_p]
    size = os.path.getsize(path)
    cells = []
    for _ in range(reads):
        start = time.perf_counter()
        handle = c.c_void_p()
        rc = lib.kvik_file_open(path.encode(), b"r", 0, c.byref(handle))
        if rc != 0:
            sys.exit(f"kvik_file_open({path}) failed: {rc}")
        got = lib.kvik_file_read(handle, c.c_void_p(ptr), size, 0)
        lib.kvik_file_free(handle)
        seconds = time.perf_counter() - start
        if got != size:
            sys.exit(f"kvik_file_read returned {got}, expected {size}")
        cells.append(f"{size / seconds / 1e9:6.2f} GB/s ({seconds * 1e3:6.1f} ms)")
    del keep
    print(f"{lib_path}: " + "  ".join(cells), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", required=True, help="a file in the page cache (read it first)")
    parser.add_argument("--libs", required=True, help="comma-separated paths of libkvik.so")
    parser.add_argument("--rounds", type=int, default=3, help="processes per library (3)")
    parser.add_argument("--reads", type=int, default=3, help="reads per process (3)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.file, args.reads)
    print(f"first reads of {args.file} in new processes, read 1 first; "
          f"KVIKIO_NTHREADS={os.environ.get('KVIKIO_NTHREADS', 'default')}")
    for _ in range(args.rounds):
        for lib in args.libs.split(","):
            subprocess.run([sys.executable, __file__, "--file", args.file, "--libs", lib,
                            "--reads", str(args.reads), "--child", lib], check=False)


if __name__ == "__main__":
    main()
