#!/usr/bin/env python3
r"""Compressed Zarr arrays into decoded GPU arrays: stock zarr, kvik's store with CPU decoding,
nvCOMP's own Python package fed by a hand-written loop, and kvik's fused read, in one run.

For each codec and chunk size, stock zarr-python writes a float32 array on the CPU (zstd level 3,
or numcodecs' LZ4), then each contender turns the array on disk into one CuPy array:

  (a) zarr:         stock zarr ``arr[:]`` (LocalStore, CPU decoding), then ``cupy.asarray``
  (b) GDSStore+CPU: ``kvik.zarr.GDSStore``, stock codecs decoding on the CPU, then ``cupy.asarray``
  (c) nvcomp loop:  ``nvidia.nvcomp`` fed by the best hand-written loop: every chunk read in
                    parallel (``readinto``, one thread per chunk, ``--threads`` at once) into one
                    pinned buffer, one copy to the GPU, one batched decode
  (d) kvik fused:   ``kvik.nvcomp.read_decompress`` of the chunk files by path into the output
                    (``out=``): kvik opens them on its pool, reads the chunks into device memory
                    and decodes each batch on the GPU while it reads the next
  (e) kvik zarr:    ``zarr.config.enable_gpu()`` with ``kvik.zarr.GDSStore`` and kvik's GPU codecs
  (z) decode only:  the ceiling: ``kvik.nvcomp`` decoding the chunks already in device memory

Every result is compared with the array written (not timed). Warm: the chunk files are in the
page cache, one untimed pass first, then the median of ``--repeat`` passes. Cold: each chunk
file's pages are dropped (``kvik.drop_file_page_cache``) before one timed pass. The reference for
cold reads is the same array stored uncompressed in one file, read cold by ``kvik.CuFile.read``.
Rates are GB/s of decoded data (1e9 bytes); CPU is the process's user plus system seconds per
decoded GB. Needs zarr 3, numcodecs, CuPy, kvik with nvCOMP, and for (c) nvidia-nvcomp.

    python3 bench/zarr_nvcomp.py --dir /var/tmp/zarr-bench --size 4G --chunks 1M,4M,16M \
        --codecs zstd,lz4 --repeat 3
"""
import argparse
import warnings
import concurrent.futures
import os
import resource
import shutil
import statistics
import sys
import time

import numpy as np

SLAB = 256 << 20  # bytes generated and written per step; a multiple of every chunk size
ALIGN = 256  # where (c) places each chunk in its pinned buffer; nvCOMP asks for at most 16


def log(*args):
    print(*args, flush=True)


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("IB")
    return int(float(t[:-1]) * units[t[-1]]) if t[-1] in units else int(t)


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def slab_values(index, count):
    """A random walk of small integer steps as float32: zstd level 3 makes about 3.2:1 of it,
    near what the issue measured on real data (3.17)."""
    rng = np.random.default_rng(1000 + index)
    return np.cumsum(rng.integers(-8, 9, count, dtype=np.int32), dtype=np.int32).astype(np.float32)


def make_reference(size):
    data = np.empty(size // 4, dtype=np.float32)
    per_slab = SLAB // 4
    for i, start in enumerate(range(0, data.size, per_slab)):
        stop = min(start + per_slab, data.size)
        data[start:stop] = slab_values(i, stop - start)
    return data


def stock_codecs():
    """zarr's own codec classes, selected explicitly (importing kvik.zarr selects kvik's), as a
    setting for zarr.config.set, and the zarr module."""
    import zarr

    codecs = dict(zarr.config.get("codecs"))
    codecs.update({"zstd": "zarr.codecs.zstd.ZstdCodec", "gzip": "zarr.codecs.gzip.GzipCodec",
                   "numcodecs.lz4": "zarr.codecs.numcodecs.LZ4"})
    return {"codecs": codecs}, zarr


def write_array(path, data, chunk_bytes, codec):
    config, zarr = stock_codecs()
    from zarr.codecs import ZstdCodec
    from zarr.codecs.numcodecs import LZ4

    compressor = ZstdCodec(level=3) if codec == "zstd" else LZ4()
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    with zarr.config.set(config):
        arr = zarr.create_array(store=path, shape=data.shape, chunks=(chunk_bytes // 4,),
                                dtype="float32", compressors=[compressor])
        step = SLAB // 4
        for start in range(0, data.size, step):
            arr[start:start + step] = data[start:start + step]
    os.sync()
    files = chunk_files(path, data.size, chunk_bytes // 4)
    stored = sum(os.path.getsize(f) for f in files)
    log(f"wrote {path}: {codec}, {chunk_bytes >> 20} MiB chunks, {len(files)} chunks, "
        f"ratio {data.nbytes / stored:.2f}, in {time.perf_counter() - t0:.1f} s")
    return files


def chunk_files(path, n, chunk_elems):
    """The chunk files of a 1-d Zarr 3 array, in order (default key encoding: c/<i>)."""
    return [os.path.join(path, "c", str(i)) for i in range((n + chunk_elems - 1) // chunk_elems)]


class Contenders:
    def __init__(self, args, codec, chunk_bytes, path, files):
        import cupy

        self.cupy, self.args, self.codec = cupy, args, codec
        self.chunk_bytes, self.path, self.files = chunk_bytes, path, files
        self.header = 4 if codec == "lz4" else 0  # numcodecs' LZ4 puts the decoded size first
        self.out = cupy.empty(args.size // 4, dtype=cupy.float32)

    def zarr_stock(self):
        config, zarr = stock_codecs()
        with zarr.config.set(config):
            return self.cupy.asarray(zarr.open_array(self.path, mode="r")[:])

    def gdsstore_cpu(self):
        config, zarr = stock_codecs()
        from kvik.zarr import GDSStore

        with zarr.config.set(config):
            return self.cupy.asarray(zarr.open_array(GDSStore(self.path), mode="r")[:])

    def nvcomp_loop(self):
        from nvidia import nvcomp

        cupy = self.cupy
        sizes = [os.path.getsize(f) - self.header for f in self.files]
        offsets, total = [], 0
        for s in sizes:
            offsets.append(total)
            total += -(-s // ALIGN) * ALIGN
        pinned = cupy.cuda.alloc_pinned_memory(total)
        host = np.frombuffer(pinned, dtype=np.uint8, count=total)

        def read(i):
            with open(self.files[i], "rb", buffering=0) as f:
                f.seek(self.header)
                view = memoryview(host[offsets[i]:offsets[i] + sizes[i]])
                while view:
                    got = f.readinto(view)
                    if not got:
                        raise EOFError(self.files[i])
                    view = view[got:]

        with concurrent.futures.ThreadPoolExecutor(self.args.threads) as pool:
            list(pool.map(read, range(len(self.files))))
        device = cupy.asarray(host)
        codec = nvcomp.Codec(algorithm="Zstd" if self.codec == "zstd" else "LZ4",
                             bitstream_kind=nvcomp.BitstreamKind.RAW)
        out_bytes = self.out.view(cupy.uint8)
        out_offsets = [i * self.chunk_bytes for i in range(len(self.files))]
        out_sizes = [min(self.chunk_bytes, out_bytes.size - o) for o in out_offsets]
        codec.decode(nvcomp.as_arrays(device, offsets, sizes),
                     out=nvcomp.as_arrays(out_bytes, out_offsets, out_sizes))
        cupy.cuda.runtime.deviceSynchronize()
        return self.out

    def kvik_fused(self):
        import kvik.nvcomp

        # By path, each to the end of its file (None), one after the other into the output: no
        # kvik.CuFile and no array object a chunk.
        last = self.out.nbytes - (len(self.files) - 1) * self.chunk_bytes
        chunks = [(f, self.header, None, self.chunk_bytes) for f in self.files[:-1]]
        chunks.append((self.files[-1], self.header, None, last))
        kvik.nvcomp.read_decompress(self.codec, chunks, out=self.out)
        return self.out

    def kvik_zarr(self):
        import zarr
        from kvik.zarr import GDSStore

        with zarr.config.enable_gpu():
            return zarr.open_array(GDSStore(self.path), mode="r")[:]

    def decode_only(self):
        import kvik.nvcomp

        if not hasattr(self, "_device_chunks"):  # loaded once, untimed
            self._device_chunks = []
            for f in self.files:
                with open(f, "rb") as fh:
                    fh.seek(self.header)
                    self._device_chunks.append(self.cupy.asarray(np.frombuffer(fh.read(), np.uint8)))
        out_bytes = self.out.view(self.cupy.uint8)
        outs = [out_bytes[i * self.chunk_bytes:(i + 1) * self.chunk_bytes]
                for i in range(len(self.files))]
        codec = kvik.nvcomp.ZstdCodec() if self.codec == "zstd" else kvik.nvcomp.LZ4Codec()
        codec.decode(self._device_chunks, outs)
        return self.out

    def available(self):
        names = {"a zarr": self.zarr_stock, "b GDSStore+CPU": self.gdsstore_cpu,
                 "c nvcomp loop": self.nvcomp_loop, "d kvik fused": self.kvik_fused,
                 "e kvik zarr GPU": self.kvik_zarr, "z decode only": self.decode_only}
        chosen = self.args.contenders.split(",")
        return {k: v for k, v in names.items() if k[0] in chosen}


def timed(fn, cupy):
    cupy.cuda.runtime.deviceSynchronize()
    c0, t0 = cpu_seconds(), time.perf_counter()
    result = fn()
    cupy.cuda.runtime.deviceSynchronize()
    return result, time.perf_counter() - t0, cpu_seconds() - c0


def drop(files):
    import kvik

    for f in files:
        kvik.drop_file_page_cache(f)


def measure(contenders, reference, files, args):
    cupy = contenders.cupy
    nbytes = args.size
    rows = {}
    for name, fn in contenders.available().items():
        row = rows[name] = {}
        try:
            result, _, _ = timed(fn, cupy)  # warm-up: page cache, pools, nvCOMP's state
            if not bool(cupy.array_equal(result, reference)):
                row["error"] = "WRONG RESULT"
                log(f"  {name}: result differs from the array written")
                continue
            del result
            passes = [timed(fn, cupy)[1:] for _ in range(args.repeat if name[0] > "b" else 2)]
            secs = statistics.median(p[0] for p in passes)
            row["warm"] = nbytes / secs / 1e9
            row["cpu"] = statistics.median(p[1] for p in passes) / (nbytes / 1e9)
            if args.cold and name[0] != "z":  # (z) reads no file
                drop(files)
                result, secs, _ = timed(fn, cupy)
                row["cold"] = nbytes / secs / 1e9
                if not bool(cupy.array_equal(result, reference)):
                    row["error"] = "WRONG RESULT (cold)"
                del result
            log(f"  {name:16s} warm {row['warm']:6.2f} GB/s  cpu {row['cpu']:.3f} s/GB"
                + (f"  cold {row['cold']:6.2f} GB/s" if "cold" in row else ""))
        except Exception as e:  # a contender that cannot run here is reported, not fatal
            row["error"] = f"{type(e).__name__}: {e}"
            log(f"  {name}: {row['error']}")
        cupy.get_default_memory_pool().free_all_blocks()
    return rows


def uncompressed_rates(args, data):
    """The same array uncompressed in one file into one CuPy array by kvik.CuFile.read: warm
    and cold GB/s, the reference the issue sets the cold target against."""
    import cupy
    import kvik

    path = os.path.join(args.dir, "uncompressed.bin")
    data.tofile(path)
    os.sync()
    out = cupy.empty(data.size, dtype=cupy.float32)
    rates = {}
    with kvik.CuFile(path, "r") as f:
        f.read(out)
        t0 = time.perf_counter()
        f.read(out)
        rates["warm"] = data.nbytes / (time.perf_counter() - t0) / 1e9
    kvik.drop_file_page_cache(path)
    t0 = time.perf_counter()
    with kvik.CuFile(path, "r") as f:
        f.read(out)
    rates["cold"] = data.nbytes / (time.perf_counter() - t0) / 1e9
    os.unlink(path)
    log(f"uncompressed, kvik.CuFile.read: warm {rates['warm']:.2f} GB/s, cold {rates['cold']:.2f} GB/s")
    return rates


def report(results, plain, args):
    log("\n| codec | chunk | contender | warm GB/s | CPU s/GB | cold GB/s |")
    log("|---|---|---|---|---|---|")
    for (codec, chunk), rows in results.items():
        for name, row in rows.items():
            if "error" in row and "warm" not in row:
                log(f"| {codec} | {chunk >> 20} MiB | {name} | {row['error']} | | |")
                continue
            cold = f"{row['cold']:.2f}" if "cold" in row else "-"
            log(f"| {codec} | {chunk >> 20} MiB | {name} | {row['warm']:.2f} | {row['cpu']:.3f} | {cold} |")
    log(f"\nuncompressed file, kvik.CuFile.read: warm {plain['warm']:.2f} GB/s, cold {plain['cold']:.2f} GB/s")
    log("\ntargets (issue 27): warm (d) >= 35 GB/s and >= 2x (c); cold (d) >= 2.5x uncompressed cold")
    for (codec, chunk), rows in results.items():
        d, c = rows.get("d kvik fused", {}), rows.get("c nvcomp loop", {})
        if "warm" not in d:
            log(f"  {codec} {chunk >> 20} MiB: (d) did not run")
            continue
        line = f"  {codec} {chunk >> 20} MiB: (d) warm {d['warm']:.2f} GB/s " + \
            ("MET" if d["warm"] >= 35 else "MISSED")
        if "warm" in c:
            ratio = d["warm"] / c["warm"]
            line += f"; (d)/(c) {ratio:.2f}x " + ("MET" if ratio >= 2 else "MISSED")
        if "cold" in d and plain.get("cold"):
            ratio = d["cold"] / plain["cold"]
            line += f"; cold (d)/uncompressed {ratio:.2f}x " + ("MET" if ratio >= 2.5 else "MISSED")
        log(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default="/var/tmp/kvik-zarr-bench")
    parser.add_argument("--size", type=parse_size, default=4 << 30, help="array bytes (4G)")
    parser.add_argument("--chunks", default="1M,4M,16M", help="chunk sizes in bytes")
    parser.add_argument("--codecs", default="zstd,lz4")
    parser.add_argument("--contenders", default="a,b,c,d,e,z", help="letters of the contenders")
    parser.add_argument("--repeat", type=int, default=3, help="timed warm passes (a, b: 2)")
    parser.add_argument("--threads", type=int, default=16, help="(c)'s reader threads")
    parser.add_argument("--no-cold", dest="cold", action="store_false")
    args = parser.parse_args()
    chunks = [parse_size(c) for c in args.chunks.split(",")]
    if any(SLAB % c or args.size % c for c in chunks):
        sys.exit("every chunk size must divide the array size and 256 MiB")
    import cupy

    # Stock zarr warns that numcodecs' LZ4 is not in the Zarr 3 specification, on every open.
    warnings.filterwarnings("ignore", message="Numcodecs codecs are not in the Zarr version 3")
    os.makedirs(args.dir, exist_ok=True)
    data = make_reference(args.size)
    reference = cupy.asarray(data)
    plain = uncompressed_rates(args, data) if args.cold else {"warm": 0.0, "cold": 0.0}
    results = {}
    for codec in args.codecs.split(","):
        for chunk in chunks:
            path = os.path.join(args.dir, f"{codec}-{chunk >> 20}M.zarr")
            files = write_array(path, data, chunk, codec)
            contenders = Contenders(args, codec, chunk, path, files)
            results[(codec, chunk)] = measure(contenders, reference, files, args)
            del contenders
            shutil.rmtree(path)
    report(results, plain, args)


if __name__ == "__main__":
    main()
