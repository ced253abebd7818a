#!/usr/bin/env python3
r"""Compare kvik with KvikIO: read one page-cached file into one GPU buffer, in one process.

For each thread count the two libraries take turns (KvikIO, kvik, KvikIO, kvik, ...), so
both see the same page cache, GPU clocks and pinned-memory state. Everything but the thread
count stays at each library's defaults. Needs cupy, numpy and kvikio; `--help` and the test
file's creation need only numpy.

    python3 bench/kvikio_compare.py --lib build/libkvik.so --file /tmp/kvik-bench.bin \
        --size 8G --threads 1,4,8,16 --repeat 5 --out results.csv

With --fresh each timed read opens the file and closes it again, timed with it (kvikio.CuFile, and
kvik_file_open/kvik_file_free): a first read, as a program that loads a file once makes it. Without
it one handle per library serves all reads of a thread count, as an epoch loop does (kvik's
zero-copy reads then keep their registrations from one read to the next).
"""
import argparse
import csv
import ctypes
import os
import resource
import statistics
import sys
import time

KVIK_SETTING_COMPAT_MODE = 0
KVIK_SETTING_NUM_THREADS = 1
KVIK_SETTING_TASK_SIZE = 2
KVIK_SETTING_BOUNCE_BUFFER_SIZE = 4
KVIK_SETTING_ZERO_COPY_READ = 7
ZERO_COPY_MODES = {"off": 0, "on": 1, "auto": 2}
BLOCK = 64 << 20  # file creation, page-cache warming
MIB = 1 << 20


def log(*args):
    print(*args, flush=True)


def parse_size(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    t = text.strip().upper().rstrip("IB") or "0"  # "8G", "8GiB", "8GB" all mean 8 GiB
    return int(float(t[:-1]) * units[t[-1]]) if t[-1] in units else int(t)


def make_file(path, size):
    """Write `size` random non-zero bytes (non-zero so a zeroed buffer never passes the check)."""
    import numpy as np

    rng = np.random.default_rng(12345)
    tmp = path + ".partial"  # renamed only when complete, so a killed run never leaves a short file
    t0 = time.perf_counter()
    with open(tmp, "wb") as f:
        for off in range(0, size, BLOCK):
            n = min(BLOCK, size - off)
            block = rng.bit_generator.random_raw((n + 7) // 8).view(np.uint8)[:n]
            np.maximum(block, 1, out=block)
            f.write(memoryview(block))
    os.replace(tmp, path)
    log(f"created {path}: {size} bytes in {time.perf_counter() - t0:.1f} s")


def warm_page_cache(path):
    buf = bytearray(BLOCK)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass


class Kvik:
    """The few kvik C API calls the benchmark needs, through ctypes."""

    def __init__(self, path):
        c = ctypes
        lib = self.lib = c.CDLL(path)
        for name, res, args in [
            ("kvik_file_open", c.c_int, [c.c_char_p, c.c_char_p, c.c_uint, c.POINTER(c.c_void_p)]),
            ("kvik_file_free", None, [c.c_void_p]),
            ("kvik_file_read", c.c_ssize_t, [c.c_void_p, c.c_void_p, c.c_size_t, c.c_int64]),
            ("kvik_setting_set", c.c_int, [c.c_int, c.c_int64]),
            ("kvik_setting_get", c.c_int, [c.c_int, c.POINTER(c.c_int64)]),
            ("kvik_last_error", c.c_char_p, []),
            ("kvik_strerror", c.c_char_p, [c.c_int]),
            ("kvik_version_string", c.c_char_p, []),
        ]:
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args

    def check(self, rc, what):
        if rc < 0:
            detail = self.lib.kvik_last_error().decode()  # first: the next kvik call may clear it
            raise RuntimeError(f"{what} failed: {self.lib.kvik_strerror(rc).decode()} ({rc}): {detail}")
        return rc

    def version(self):
        return self.lib.kvik_version_string().decode()

    def get(self, setting):
        v = ctypes.c_int64()
        self.check(self.lib.kvik_setting_get(setting, ctypes.byref(v)), f"kvik_setting_get({setting})")
        return v.value

    def set(self, setting, value):
        self.check(self.lib.kvik_setting_set(setting, value), f"kvik_setting_set({setting}, {value})")

    def open(self, path):
        h = ctypes.c_void_p()
        self.check(self.lib.kvik_file_open(path.encode(), b"r", 0, ctypes.byref(h)), f"kvik_file_open({path})")
        return h

    def free(self, h):
        self.lib.kvik_file_free(h)

    def read(self, h, ptr, size):
        return self.check(self.lib.kvik_file_read(h, ptr, size, 0), "kvik_file_read")


def mapped_libs(*stems):
    """Paths of the loaded shared objects whose file name starts with one of `stems`."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "/" in line}
    return sorted(p for p in paths if os.path.basename(p).startswith(stems))


def cpu_seconds():
    """User + system CPU time of every thread of this process so far."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def timed(cupy, fn):
    """Wall seconds, CPU seconds and the byte count of one read."""
    cupy.cuda.runtime.deviceSynchronize()
    c0, t0 = cpu_seconds(), time.perf_counter()
    n = fn()
    cupy.cuda.runtime.deviceSynchronize()
    return time.perf_counter() - t0, cpu_seconds() - c0, n


def verify(name, cupy, np, buf, path, size, nread):
    """Check the byte count and a few 1 MiB slices (first, last, random) against the file."""
    if nread != size:
        raise RuntimeError(f"{name}: read returned {nread}, expected {size}")
    rng = np.random.default_rng()
    offsets = {0, max(0, size - MIB)} | {int(o) for o in rng.integers(0, max(1, size - MIB), 6)}
    for off in sorted(offsets):
        n = min(MIB, size - off)
        want = np.fromfile(path, dtype=np.uint8, count=n, offset=off)
        got = cupy.asnumpy(buf[off:off + n])
        if not np.array_equal(got, want):
            bad = int(np.argmax(got != want))
            raise RuntimeError(f"{name}: data mismatch at file offset {off + bad}")
    log(f"{name}: verified {nread} bytes, slices at {sorted(offsets)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path to kvik's libkvik.so")
    ap.add_argument("--file", required=True, help="file to read; created if missing")
    ap.add_argument("--size", default="8G", help="size of a newly created file (ignored if it exists)")
    ap.add_argument("--threads", default="1,4,8,16", help="comma-separated thread counts")
    ap.add_argument("--repeat", type=int, default=5, help="timed reads per library and thread count")
    ap.add_argument("--warmup", type=int, default=1, help="untimed reads per library after each thread change")
    ap.add_argument("--zero-copy", choices=sorted(ZERO_COPY_MODES),
                    help="kvik's zero_copy_read setting (default: kvik's own default, off)")
    ap.add_argument("--fresh", action="store_true", help="open and close the file around each timed read")
    ap.add_argument("--out", help="also write the table as CSV here")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",") if t.strip()]

    if not os.path.exists(args.file):
        make_file(args.file, parse_size(args.size))
    size = os.path.getsize(args.file)

    try:
        import cupy
        import numpy as np
        import kvikio
        import kvikio.cufile_driver
        import kvikio.defaults
    except Exception as e:  # ImportError, or cuda.pathfinder not finding libcufile for libkvikio
        log(f"kvikio_compare runs only where kvikio is importable (and cupy): {type(e).__name__}: {e}")
        sys.exit(77)

    kvik = Kvik(args.lib)  # after kvikio, so both share the libcufile already loaded
    if args.zero_copy:
        kvik.set(KVIK_SETTING_ZERO_COPY_READ, ZERO_COPY_MODES[args.zero_copy])
    kvik_default_threads = kvik.get(KVIK_SETTING_NUM_THREADS)

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())
    log(f"GPU {props['name'].decode()}; CPUs {os.cpu_count()} (usable {len(os.sched_getaffinity(0))})")
    log(f"file {args.file}: {size} bytes ({size / 1e9:.2f} GB), kept in the page cache")
    log(f"kvikio {kvikio.__version__}, kvik {kvik.version()}, cupy {cupy.__version__}, numpy {np.__version__}")
    mode = kvikio.defaults.get("compat_mode")
    log(f"kvikio: compat_mode={getattr(mode, 'name', mode)} "
        f"is_compat_mode_preferred={kvikio.defaults.is_compat_mode_preferred()} "
        f"task_size={kvikio.defaults.get('task_size')} "
        f"bounce_buffer_size={kvikio.defaults.get('bounce_buffer_size')} "
        f"num_threads={kvikio.defaults.get('num_threads')}")
    try:
        log(f"kvikio: libcufile {kvikio.cufile_driver.libcufile_version()}, "
            f"is_gds_available={kvikio.cufile_driver.get('is_gds_available')}")
    except Exception as e:  # no cuFile driver: KvikIO then runs in compat mode
        log(f"kvikio: cufile_driver not usable: {e}")
    log(f"kvik: compat_mode={kvik.get(KVIK_SETTING_COMPAT_MODE)} (0 off, 1 on, 2 auto) "
        f"task_size={kvik.get(KVIK_SETTING_TASK_SIZE)} "
        f"bounce_buffer_size={kvik.get(KVIK_SETTING_BOUNCE_BUFFER_SIZE)} num_threads={kvik_default_threads} "
        f"zero_copy_read={kvik.get(KVIK_SETTING_ZERO_COPY_READ)} (0 off, 1 on, 2 auto)")

    warm_page_cache(args.file)
    buf = cupy.empty(size, dtype=cupy.uint8)
    ptr = buf.data.ptr

    def kvikio_read(f):
        return lambda: f.read(buf)

    def kvik_read(h):
        return lambda: kvik.read(h, ptr, size)

    def kvikio_fresh_read():
        with kvikio.CuFile(args.file, "r") as f:
            return f.read(buf)

    def kvik_fresh_read():
        h = kvik.open(args.file)
        try:
            return kvik.read(h, ptr, size)
        finally:
            kvik.free(h)

    # Correctness, once per library, into a zeroed buffer. KvikIO's statistics say which
    # backend (POSIX or cuFile) really carried the bytes; counting is off while no monitor exists.
    kvikio.defaults.set({"num_threads": max(threads)})
    kvik.set(KVIK_SETTING_NUM_THREADS, max(threads))
    buf.fill(0)
    monitor = kvikio.SummaryMonitor() if hasattr(kvikio, "SummaryMonitor") else None
    with kvikio.CuFile(args.file, "r") as f:
        _, _, n = timed(cupy, kvikio_read(f))
    if monitor is not None:
        backends = {k: v["bytes_transferred"] for k, v in monitor.get().by_backend.items() if v["num_ops"]}
        monitor.stop()
        del monitor
        log(f"kvikio: bytes by backend in the check read: {backends}")
    verify("kvikio", cupy, np, buf, args.file, size, n)
    buf.fill(0)
    h = kvik.open(args.file)
    try:
        _, _, n = timed(cupy, kvik_read(h))
    finally:
        kvik.free(h)
    verify("kvik", cupy, np, buf, args.file, size, n)
    log(f"loaded: {mapped_libs('libcufile.', 'libkvikio', 'libkvik.')}")

    def run(pairs):
        """pairs: [(name, fn)], taken in turn; returns {name: [GB/s, ...]}, {name: [CPU s/GB, ...]}."""
        for _ in range(args.warmup):
            for _name, fn in pairs:
                timed(cupy, fn)
        rates = {name: [] for name, _ in pairs}
        cpus = {name: [] for name, _ in pairs}
        for _ in range(args.repeat):
            for name, fn in pairs:
                dt, cpu, n = timed(cupy, fn)
                if n != size:
                    raise RuntimeError(f"{name}: short read {n} of {size}")
                rates[name].append(size / dt / 1e9)
                cpus[name].append(cpu / (size / 1e9))
        return rates, cpus

    rows = []  # (label, kvikio rates or None, kvik rates or None, kvikio CPU s/GB or None, kvik's)
    for t in threads:
        kvikio.defaults.set({"num_threads": t})
        kvik.set(KVIK_SETTING_NUM_THREADS, t)
        if args.fresh:
            r, c = run([("kvikio", kvikio_fresh_read), ("kvik", kvik_fresh_read)])
        else:
            h = kvik.open(args.file)
            try:
                with kvikio.CuFile(args.file, "r") as f:
                    r, c = run([("kvikio", kvikio_read(f)), ("kvik", kvik_read(h))])
            finally:
                kvik.free(h)
        rows.append((str(t), r["kvikio"], r["kvik"], c["kvikio"], c["kvik"]))
        log(f"threads {t}: kvikio best {max(r['kvikio']):.2f} GB/s, kvik best {max(r['kvik']):.2f} GB/s")

    kvik.set(KVIK_SETTING_NUM_THREADS, kvik_default_threads)
    if args.fresh:
        r, c = run([("kvik", kvik_fresh_read)])
    else:
        h = kvik.open(args.file)
        try:
            r, c = run([("kvik", kvik_read(h))])
        finally:
            kvik.free(h)
    best = max(rows, key=lambda row: max(row[1]))
    rows.append((f"kvik default ({kvik_default_threads})", None, r["kvik"], None, c["kvik"]))
    rows.append((f"kvikio best ({best[0]})", best[1], None, best[3], None))

    # The table, last: the remote shell shows only the tail.
    def stats(rates):
        return (max(rates), statistics.median(rates)) if rates else (None, None)

    def median_or_none(values):
        return statistics.median(values) if values else None

    table = []
    for label, kio, kv, kio_cpu, kv_cpu in rows:
        kio_b, kio_m = stats(kio)
        kv_b, kv_m = stats(kv)
        ref = kio_b if kio_b is not None else max(best[1])  # kvik default vs kvikio best
        table.append((label, kio_b, kio_m, kv_b, kv_m, kv_b / ref if kv_b is not None else None,
                      median_or_none(kio_cpu), median_or_none(kv_cpu)))
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["threads", "kvikio_best_gbs", "kvikio_median_gbs", "kvik_best_gbs",
                        "kvik_median_gbs", "ratio_kvik_kvikio_best", "kvikio_cpu_s_per_gb",
                        "kvik_cpu_s_per_gb"])
            w.writerows([[c if c is not None else "" for c in row] for row in table])

    def fmt(v, width, digits=2):
        return f"{v:{width}.{digits}f}" if v is not None else f"{'-':>{width}}"

    handles = "a fresh handle for each read, open and close timed" if args.fresh else "one handle per library " \
        "and thread count"
    log(f"\nread {size / 1e9:.2f} GB from page cache into GPU memory, GB/s (1e9 B/s), best and "
        f"median of {args.repeat}; kvik default's ratio is against kvikio best; CPU s/GB: user + system "
        f"seconds per GB, median; kvik zero_copy_read={kvik.get(KVIK_SETTING_ZERO_COPY_READ)} "
        f"(0 off, 1 on, 2 auto); {handles}")
    log(f"{'threads':<20} {'kvikio best':>11} {'median':>8} {'kvik best':>10} {'median':>8} {'kvik/kvikio':>12}"
        f" {'kvikio s/GB':>12} {'kvik s/GB':>10}")
    for label, kio_b, kio_m, kv_b, kv_m, ratio, kio_cpu, kv_cpu in table:
        log(f"{label:<20} {fmt(kio_b, 11)} {fmt(kio_m, 8)} {fmt(kv_b, 10)} {fmt(kv_m, 8)} {fmt(ratio, 12, 3)}"
            f" {fmt(kio_cpu, 12, 3)} {fmt(kv_cpu, 10, 3)}")


if __name__ == "__main__":
    main()
