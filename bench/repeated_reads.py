#!/usr/bin/env python3
r"""Reads of one page-cached file into one GPU buffer, again and again through one kvik handle, as
an epoch loop makes them, for each zero-copy mode given, the modes taking turns in processes of
their own.

Each process opens the file once (kvik_file_open), reads it whole READS times (kvik_file_read),
each read timed with the process's CPU time, checks slices of the buffer against the file, and
frees the handle. Read 1 is a first read; reads 2 and later are what issue 29 calls repeated
reads (target: 52 GB/s at kvik's defaults on an H100). Under `auto` a handle registers the
granules it reads again (kvik.h, KVIK_SETTING_ZERO_COPY_READ), so read 2 pays for registering
and the later ones copy straight from the page cache.

    python3 bench/repeated_reads.py --lib build/libkvik.so --file /var/tmp/zc8g \
        --modes off,auto --reads 8 --rounds 2
"""
import argparse
import ctypes as c
import os
import statistics
import subprocess
import sys
import time

MODES = {"off": 0, "on": 1, "auto": 2}
KVIK_SETTING_ZERO_COPY_READ = 7


def device_buffer(size):
    """A device buffer of `size` bytes: (pointer, function(offset, n) -> bytes on the host)."""
    try:
        import torch

        buf = torch.empty(size, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        return buf.data_ptr(), lambda off, n: bytes(buf[off:off + n].cpu().numpy())
    except ImportError:
        import cupy

        buf = cupy.empty(size, dtype=cupy.uint8)
        cupy.cuda.Device().synchronize()
        return buf.data.ptr, lambda off, n: bytes(cupy.asnumpy(buf[off:off + n]))


def check(path, size, to_host):
    """Slices of the buffer, at offsets that are not multiples of a granule, against the file."""
    n = 4 << 20
    with open(path, "rb") as f:
        for off in sorted({0, (64 << 20) + 4096, size // 3 + 12345, max(size - n, 0)}):
            want = os.pread(f.fileno(), n, off)
            if to_host(off, len(want)) != want:
                sys.exit(f"bytes differ from the file's in [{off}, {off + len(want)})")


def child(lib_path, path, mode, reads):
    size = os.path.getsize(path)
    ptr, to_host = device_buffer(size)
    lib = c.CDLL(lib_path)
    lib.kvik_setting_set.argtypes = [c.c_int, c.c_int64]
    lib.kvik_file_open.argtypes = [c.c_char_p, c.c_char_p, c.c_uint, c.POINTER(c.c_void_p)]
    lib.kvik_file_read.restype = c.c_ssize_t
    lib.kvik_file_read.argtypes = [c.c_void_p, c.c_void_p, c.c_size_t, c.c_int64]
    lib.kvik_file_free.argtypes = [c.c_void_p]
    if lib.kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, MODES[mode]) != 0:
        sys.exit("kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ) failed")
    handle = c.c_void_p()
    if lib.kvik_file_open(path.encode(), b"r", 0, c.byref(handle)) != 0:
        sys.exit(f"kvik_file_open({path}) failed")
    rates, cpus = [], []
    for _ in range(reads):
        cpu, start = time.process_time(), time.perf_counter()
        got = lib.kvik_file_read(handle, c.c_void_p(ptr), size, 0)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        if got != size:
            sys.exit(f"kvik_file_read returned {got}, expected {size}")
        rates.append(size / seconds / 1e9)
        cpus.append(cpu / (size / 1e9))
    lib.kvik_file_free(handle)
    check(path, size, to_host)
    print(f"{mode:5s} " + " ".join(f"{r:6.2f}" for r in rates) + "   CPU s/GB " +
          " ".join(f"{x:.3f}" for x in cpus), flush=True)
    print(f"RESULT {mode} {rates[0]} {statistics.median(rates[1:])} {statistics.median(cpus[1:])}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lib", required=True, help="path of libkvik.so")
    parser.add_argument("--file", required=True, help="a file in the page cache (read it first)")
    parser.add_argument("--modes", default="off,auto", help="zero-copy modes (off,auto)")
    parser.add_argument("--reads", type=int, default=8, help="reads per process, at least 2 (8)")
    parser.add_argument("--rounds", type=int, default=2, help="processes per mode (2)")
    parser.add_argument("--target", type=float, default=52.0,
                        help="GB/s that reads 2.. should reach (52: issue 29's, on an H100)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reads < 2:
        parser.error("--reads must be at least 2")
    if args.child:
        return child(args.lib, args.file, args.child, args.reads)
    modes = args.modes.split(",")
    print(f"reads of {args.file} through one handle, GB/s (1e9 B/s), read 1 first; "
          f"KVIKIO_NTHREADS={os.environ.get('KVIKIO_NTHREADS', 'default')}", flush=True)
    results = {m: [] for m in modes}
    for _ in range(args.rounds):
        for mode in modes:
            out = subprocess.run([sys.executable, __file__, "--lib", args.lib, "--file", args.file,
                                  "--reads", str(args.reads), "--child", mode],
                                 capture_output=True, text=True)
            lines = out.stdout.splitlines()
            print("\n".join(l for l in lines if not l.startswith("RESULT")) or out.stderr.strip(),
                  flush=True)
            results[mode] += [tuple(map(float, l.split()[2:])) for l in lines
                              if l.startswith("RESULT")]
    print(f"\n{'mode':5s} {'read 1':>8s} {'reads 2..' + str(args.reads):>10s} {'CPU s/GB':>9s}"
          "   (medians over the processes)")
    for mode, rows in results.items():
        if rows:
            first, again, cpu = (statistics.median(col) for col in zip(*rows))
            verdict = "met" if again >= args.target else "missed"
            print(f"{mode:5s} {first:8.2f} {again:10.2f} {cpu:9.3f}   target {args.target:g} "
                  f"GB/s: {verdict}")


if __name__ == "__main__":
    main()
