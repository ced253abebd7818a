#!/usr/bin/env python3
r"""Read one page-cached file into a new array from Python: kvik against the usual NumPy/CuPy way.

Host (always):   kvik.numpy.fromfile(path, uint8)      vs  numpy.fromfile(path, uint8)
Device (--device, needs CuPy and a GPU):
                 kvik.read_file_to_device(path)        vs  cupy.asarray(numpy.fromfile(path, uint8))
                 and, where kvikio is importable, kvikio.CuFile(path).read(cupy.empty(size)) too

Small reads (--small N): N reads of 4 KiB at random offsets of the file into one NumPy buffer,
os.preadv against kvik.CuFile.read (and kvikio's, where it imports), microseconds a read.

Each run allocates its array, as real loaders do, so page faults and allocation count for both.
The methods take turns (baseline, kvik, baseline, kvik, ...) so they see the same page cache and
clocks; the best and median of --repeat runs are printed, and the ratio kvik/baseline of the
medians. Every result is checked against the file's first and last MiB.

    python3 bench/python_read.py --size 1G --repeat 5 [--device] [--file PATH] [--threads N]
    python3 bench/python_read.py --size 64M --repeat 5 --small 100000
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
CHECK = 1 << 20


def parse_size(text):
    text = text.strip().upper()
    if text[-1:] in UNITS:
        return int(float(text[:-1]) * UNITS[text[-1]])
    return int(text)


def make_file(path, size):
    """Write `size` pseudo-random bytes, flush them, and read them once into the page cache."""
    rng = numpy.random.default_rng(7)
    block = rng.integers(0, 256, 64 << 20, dtype=numpy.uint8)
    with open(path, "wb") as f:
        for start in range(0, size, len(block)):
            f.write(block[: min(len(block), size - start)])
        f.flush()
        os.fdatasync(f.fileno())
    numpy.fromfile(path, dtype=numpy.uint8)


def check(array, head, tail):
    on_host = isinstance(array, numpy.ndarray)
    host_head = array[:CHECK] if on_host else array[:CHECK].get()
    host_tail = array[-CHECK:] if on_host else array[-CHECK:].get()
    if not (numpy.array_equal(host_head, head) and numpy.array_equal(host_tail, tail)):
        sys.exit("wrong data read")


def methods(path, device):
    import kvik
    import kvik.numpy

    if not device:
        return [
            ("numpy.fromfile", lambda: numpy.fromfile(path, dtype=numpy.uint8), None),
            ("kvik.numpy.fromfile", lambda: kvik.numpy.fromfile(path, dtype=numpy.uint8), None),
        ]
    import cupy

    sync = cupy.cuda.Device().synchronize
    table = [
        ("cupy.asarray(numpy.fromfile)", lambda: cupy.asarray(numpy.fromfile(path, dtype=numpy.uint8)), sync),
        ("kvik.read_file_to_device", lambda: kvik.read_file_to_device(path), sync),
    ]
    try:
        import kvikio
    except ImportError:
        return table

    def kvikio_read():
        out = cupy.empty(os.path.getsize(path), dtype=numpy.uint8)
        with kvikio.CuFile(path, "r") as f:
            f.read(out)
        return out

    return table + [("kvikio CuFile.read (its defaults)", kvikio_read, sync)]


def small_reads(path, size, reads, repeat):
    """Best microseconds a 4 KiB read of each way, taking turns on the same offsets."""
    import kvik

    offsets = (numpy.random.default_rng(3).integers(0, size // 4096, reads) * 4096).tolist()
    buf = numpy.empty(4096, dtype=numpy.uint8)
    fd = os.open(path, os.O_RDONLY)
    ways = [("os.preadv", lambda o: os.preadv(fd, [buf], o)),
            ("kvik.CuFile.read", kvik.CuFile(path, "r").read)]
    try:
        import kvikio

        ways.append(("kvikio.CuFile.read", kvikio.CuFile(path, "r").read))
    except ImportError:
        pass
    best = {}
    for _ in range(repeat):
        for name, read in ways:
            if name == "os.preadv":
                start = time.perf_counter()
                for o in offsets:
                    read(o)
            else:
                start = time.perf_counter()
                for o in offsets:
                    read(buf, 4096, o)
            elapsed = time.perf_counter() - start
            best[name] = min(best.get(name, elapsed), elapsed)
    os.close(fd)
    return best


def run(path, size, repeat, device):
    with open(path, "rb") as f:
        head = numpy.frombuffer(f.read(CHECK), dtype=numpy.uint8)
        f.seek(size - CHECK)
        tail = numpy.frombuffer(f.read(CHECK), dtype=numpy.uint8)
    table = methods(path, device)
    times = {name: [] for name, _, _ in table}
    for _ in range(repeat):
        for name, read, sync in table:
            start = time.perf_counter()
            array = read()
            if sync:
                sync()
            times[name].append(time.perf_counter() - start)
            check(array, head, tail)
            del array
    return table, times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", help="file to read (default: a new file in --dir, removed after)")
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="where to create the file")
    parser.add_argument("--size", default="1G", help="file size to create, e.g. 1G (default)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, help="kvik's thread count (default: kvik's default)")
    parser.add_argument("--device", action="store_true", help="read into CuPy arrays on the GPU")
    parser.add_argument("--small", type=int, metavar="N", help="N random 4 KiB reads instead")
    args = parser.parse_args()

    import kvik

    if args.threads:
        kvik.defaults.set("num_threads", args.threads)
    path = args.file
    created = None
    if not path:
        fd, created = tempfile.mkstemp(prefix="kvik-pybench-", dir=args.dir)
        os.close(fd)
        path = created
        make_file(path, parse_size(args.size))
    try:
        size = os.path.getsize(path)
        if args.small:
            best = small_reads(path, size, args.small, args.repeat)
        else:
            table, times = run(path, size, args.repeat, args.device)
    finally:
        if created:
            os.unlink(created)
    if args.small:
        print(f"{args.small} reads of 4 KiB at random offsets of {path} ({size / 1e9:.2f} GB, "
              f"page-cached), one thread, best of {args.repeat}")
        for name, seconds in best.items():
            print(f"  {name:20s} {seconds / args.small * 1e6:6.2f} us a read   "
                  f"{best['os.preadv'] / seconds:.2f}x os.preadv")
        return
    print(f"file {path}: {size / 1e9:.2f} GB, page-cached; kvik {kvik.__version__}, "
          f"{kvik.defaults.get('num_threads')} threads; {os.cpu_count()} CPUs; best and median of {args.repeat}")
    medians = {}
    for name, _, _ in table:
        best, median = min(times[name]), statistics.median(times[name])
        medians[name] = median
        print(f"  {name:32s} best {size / best / 1e9:7.2f} GB/s   median {size / median / 1e9:7.2f} GB/s")
    baseline, ours, *others = (name for name, _, _ in table)
    for other in [baseline, *others]:
        print(f"ratio {ours} / {other} (medians): {medians[other] / medians[ours]:.2f}x")


if __name__ == "__main__":
    main()
