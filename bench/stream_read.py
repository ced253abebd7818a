#!/usr/bin/env python3
"""Stream-ordered reads next to blocking ones: a page-cached file into one CuPy array, through
CuFile.raw_read_async on a stream (then stream.synchronize()) and through CuFile.read, taking turns
in one process. Prints GB/s per repeat and the medians.

    python3 bench/stream_read.py [--dir /tmp] [--size 1G] [--repeat 5]
"""
import argparse
import os
import statistics
import tempfile
import time

import cupy
import kvik


def size_arg(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--size", type=size_arg, default=1 << 30)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    path = os.path.join(args.dir, "kvik-stream-read.bin")
    with open(path, "wb") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(args.size >> 20):
            f.write(chunk)
    dev = cupy.empty(args.size, dtype=cupy.uint8)
    stream = cupy.cuda.Stream(non_blocking=True)
    rates = {"raw_read_async": [], "read": []}
    with kvik.CuFile(path) as f:
        f.read(dev)  # the page cache, pinned buffers and threads warm
        for _ in range(args.repeat):
            start = time.perf_counter()
            future = f.raw_read_async(dev, stream)
            stream.synchronize()
            assert future.check_bytes_done() == args.size
            rates["raw_read_async"].append(args.size / (time.perf_counter() - start) / 1e9)
            start = time.perf_counter()
            assert f.read(dev) == args.size
            rates["read"].append(args.size / (time.perf_counter() - start) / 1e9)
    os.unlink(path)
    for name, values in rates.items():
        print(f"{name:15s} GB/s: " + " ".join(f"{v:.2f}" for v in values) + f"  median {statistics.median(values):.2f}")
    ratio = statistics.median(rates["raw_read_async"]) / statistics.median(rates["read"])
    print(f"raw_read_async / read (medians): {ratio:.2f}x")


if __name__ == "__main__":
    main()
