#!/usr/bin/env python3
"""Device memory of the Python frameworks, read through libkvik's C API (ctypes).

kvik finds the kind and context of a buffer from the pointer alone; this checks that it does for
memory that CuPy's and PyTorch's caching allocators hand out (pointers inside larger blocks, on
their own streams) and for PyTorch's pinned host memory. Each framework that is not importable is
skipped; with neither, the script exits 77. Run by scripts/gpu_check.sh:

    python3 tests/test_frameworks.py build-gpu/libkvik.so
"""
import ctypes
import os
import random
import sys
import tempfile

KVIK_MEMORY_HOST, KVIK_MEMORY_PINNED, KVIK_MEMORY_DEVICE = 0, 1, 2
FILE_SIZE = (48 << 20) + 4321


def load_kvik(path):
    lib = ctypes.CDLL(path)
    lib.kvik_file_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
    lib.kvik_file_read.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64]
    lib.kvik_file_read.restype = ctypes.c_ssize_t
    lib.kvik_file_free.argtypes = [ctypes.c_void_p]
    lib.kvik_memory_kind_of.argtypes = [ctypes.c_void_p]
    lib.kvik_last_error.restype = ctypes.c_char_p
    return lib


class Checker:
    def __init__(self, lib, path, data):
        self.lib, self.data = lib, data
        self.file = ctypes.c_void_p()
        if lib.kvik_file_open(path.encode(), b"r", 0, ctypes.byref(self.file)) < 0:
            raise RuntimeError(lib.kvik_last_error().decode())

    def read(self, ptr, size, offset):
        n = self.lib.kvik_file_read(self.file, ptr, size, offset)
        if n < 0:
            raise RuntimeError(self.lib.kvik_last_error().decode())
        return n

    def kind(self, ptr):
        return self.lib.kvik_memory_kind_of(ptr)

    def random_reads(self, name, alloc, data_ptr, to_bytes, expected_kind, rounds=20):
        """Reads of random ranges into random places of a fresh allocation, checked byte for byte."""
        rng = random.Random(1234)
        for _ in range(rounds):
            offset = rng.randrange(0, FILE_SIZE)
            size = rng.choice([rng.randrange(1, 4096), rng.randrange(1, 1 << 20), rng.randrange(1, 24 << 20)])
            want = min(size, FILE_SIZE - offset)
            pad = rng.randrange(0, 8192)
            buf = alloc(pad + size)
            ptr = data_ptr(buf) + pad
            kind = self.kind(ptr)
            assert kind == expected_kind, f"{name}: kind {kind}, expected {expected_kind}"
            got = self.read(ptr, size, offset)
            assert got == want, f"{name}: read {got} of {want} bytes at {offset}"
            back = to_bytes(buf)[pad : pad + want]
            assert back == self.data[offset : offset + want], f"{name}: wrong bytes at offset {offset}, size {want}"
        print(f"ok: {rounds} random reads into {name}", flush=True)


def check_cupy(c):
    import cupy

    c.random_reads("CuPy device memory", lambda n: cupy.empty(n, dtype=cupy.uint8), lambda a: a.data.ptr,
                   lambda a: cupy.asnumpy(a).tobytes(), KVIK_MEMORY_DEVICE)
    with cupy.cuda.Stream(non_blocking=True):  # allocations ordered on another stream
        c.random_reads("CuPy memory from a non-blocking stream", lambda n: cupy.empty(n, dtype=cupy.uint8),
                       lambda a: a.data.ptr, lambda a: cupy.asnumpy(a).tobytes(), KVIK_MEMORY_DEVICE, rounds=5)


def check_torch(c):
    import torch

    if not torch.cuda.is_available():
        print("skip: PyTorch sees no GPU", flush=True)
        return
    c.random_reads("PyTorch device memory", lambda n: torch.empty(n, dtype=torch.uint8, device="cuda"),
                   lambda t: t.data_ptr(), lambda t: t.cpu().numpy().tobytes(), KVIK_MEMORY_DEVICE)
    c.random_reads("PyTorch pinned memory", lambda n: torch.empty(n, dtype=torch.uint8, pin_memory=True),
                   lambda t: t.data_ptr(), lambda t: t.numpy().tobytes(), KVIK_MEMORY_PINNED, rounds=5)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    lib = load_kvik(sys.argv[1])
    data = random.Random(99).randbytes(FILE_SIZE)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.bin")
        with open(path, "wb") as f:
            f.write(data)
        c = Checker(lib, path, data)
        ran = 0
        for name, check in (("cupy", check_cupy), ("torch", check_torch)):
            try:
                __import__(name)
            except ImportError:
                print(f"skip: {name} is not importable", flush=True)
                continue
            check(c)
            ran += 1
        lib.kvik_file_free(c.file)
    sys.exit(0 if ran else 77)


if __name__ == "__main__":
    main()
