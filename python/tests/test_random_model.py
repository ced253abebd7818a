"""Random IO against a model: a CuFile opened "w+" takes writes and reads of random sizes at random
offsets (past the end too), blocking and through futures, several in flight at once, from buffers
that start at odd addresses, while the settings that choose its paths change between operations
and its pages are dropped from the page cache. After each operation the file's size is the
model's; each read returns the model's bytes, as many as the model has there, and writes nothing
past its buffer. NumPy buffers, CuPy's where there is a GPU, and the fake CUDA driver's memory
(zero-copy reads too on the last two)."""
import ctypes
import os
import random

import numpy
import pytest

import kvik
import kvik.defaults
from conftest import to_host
from test_nvcomp import needs_fakes, run_python

TESTS = os.path.dirname(os.path.abspath(__file__))  # fake_devices.py, for the script

GUARD = 0xAB  # the byte after each buffer, and what a read buffer holds before the read

# Each setting, and the values it takes at random.
SETTINGS = {
    "task_size": [4096, 65536, 1 << 20, 4 << 20, 12345 * 4096],
    "num_threads": [1, 2, 3, 8],
    "bounce_buffer_size": [4096, 1 << 16, 1 << 20, 16 << 20],
    "auto_direct_io_read": [True, False],
    "auto_direct_io_write": [True, False],
    "write_behind": [True, False],
    "io_uring": [0, 1, 2],
    "gds_threshold": [0, 4096, 1 << 20],
}


class Model:
    """What the file at `path` should hold, and a run's random choices, buffers from `xp`."""

    def __init__(self, xp, seed, path):
        self.xp, self.rnd, self.path = xp, random.Random(seed), path
        self.bytes = bytearray()
        self.settings = dict(SETTINGS)
        if xp is not numpy:
            self.settings["zero_copy_read"] = [0, 1, 2]

    def size(self):
        r = self.rnd
        return r.choice([0, 1, 7, 4095, 4096, 4097, r.randrange(1, 1 << 16),
                         r.randrange(1, 3 << 20), r.randrange(1, 9 << 20)])

    def offset(self):
        r, n = self.rnd, len(self.bytes)
        return r.choice([0, n, max(0, n - 1), r.randrange(0, n + 1), r.randrange(0, n + (1 << 20)),
                         r.randrange(0, n + 1) // 4096 * 4096])

    def buffer(self, size):
        """(a view of `size` bytes at an odd or aligned address, the whole allocation), filled
        with GUARD."""
        pad = self.rnd.choice([0, 0, 1, 3, 4096])
        whole = self.xp.full(size + pad + 1, GUARD, dtype=numpy.uint8)
        return whole[pad:pad + size], whole

    def filled(self, size):
        """A buffer of `size` random bytes, and the bytes."""
        data = self.rnd.randbytes(size)
        view, whole = self.buffer(size)
        view[:] = self.xp.asarray(numpy.frombuffer(data, dtype=numpy.uint8))
        return view, whole, data

    def wrote(self, offset, data):
        if not data:
            return  # a write of nothing leaves the file as it is, even past its end
        end = offset + len(data)
        self.bytes.extend(bytes(max(0, end - len(self.bytes))))
        self.bytes[offset:end] = data

    def check_read(self, what, view, whole, offset, got):
        want = bytes(self.bytes[offset:offset + view.size])
        assert got == len(want), f"{what}: read {got} bytes, the model has {len(want)}"
        assert to_host(view[:got]).tobytes() == want, f"{what}: the bytes differ from the model's"
        assert int(to_host(whole[-1:])[0]) == GUARD, f"{what}: wrote past the buffer"


def step(m, f):
    r = m.rnd
    op = r.choice(["pwrite", "write", "pread", "read", "in flight", "setting", "drop"])
    if op == "setting":
        name = r.choice(sorted(m.settings))
        kvik.defaults.set(name, r.choice(m.settings[name]))
    elif op == "drop":
        kvik.cufile.drop_file_page_cache(m.path)
    elif op in ("pwrite", "write"):
        size, offset = m.size(), m.offset()
        view, _, data = m.filled(size)
        got = f.pwrite(view, size, offset).get() if op == "pwrite" else f.write(view, size, offset)
        assert got == size
        m.wrote(offset, data)
    elif op in ("pread", "read"):
        size, offset = m.size(), m.offset()
        view, whole = m.buffer(size)
        got = f.pread(view, size, offset).get() if op == "pread" else f.read(view, size, offset)
        m.check_read(f"{op} of {size} at {offset}", view, whole, offset, got)
    else:  # disjoint writes in flight together, then reads in flight together
        count, at, writes = r.randrange(2, 6), m.offset(), []
        for _ in range(count):
            size = m.size()
            view, _, data = m.filled(size)
            writes.append((f.pwrite(view, size, at), view, at, data))
            at += size + r.choice([0, 100, 4096])
        for future, view, offset, data in writes:
            assert future.get() == len(data)
            m.wrote(offset, data)
        reads = []
        for _ in range(count):
            size, offset = m.size(), m.offset()
            view, whole = m.buffer(size)
            reads.append((f.pread(view, size, offset), view, whole, offset))
        for future, view, whole, offset in reads:
            m.check_read(f"read in flight of {view.size} at {offset}", view, whole, offset,
                         future.get())
    assert os.path.getsize(m.path) == len(m.bytes), f"after {op}: the file's size"


def run_model(xp, seed, path, steps=200):
    m = Model(xp, seed, path)
    # Setting them to what they are now puts them back after.
    with kvik.defaults.set({name: kvik.defaults.get(name) for name in m.settings}):
        with kvik.CuFile(path, "w+") as f:
            for _ in range(steps):
                step(m, f)
    with open(path, "rb") as f:
        assert f.read() == bytes(m.bytes)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_io_against_a_model(xp, tmp_path, seed):
    run_model(xp, seed, tmp_path / "model.bin")


class FakeDeviceArray:
    """Bytes of the fake driver's device memory, with the little of CuPy's array API the model
    uses: slices (views), assignment from NumPy, .size and .get()."""

    def __init__(self, fake, ptr, size, owner=None):
        self.fake, self.cu, self.ptr, self.size, self.owner = fake, fake.cu, ptr, size, owner
        self.__cuda_array_interface__ = {
            "data": (ptr, False), "shape": (size,), "typestr": "|u1", "version": 3}

    def __del__(self):
        if self.owner is None:
            self.cu.cuMemFree_v2(ctypes.c_uint64(self.ptr))

    def __getitem__(self, index):
        start, stop, _ = index.indices(self.size)
        owner = self.owner or self
        return FakeDeviceArray(self.fake, self.ptr + start, max(0, stop - start), owner)

    def __setitem__(self, index, host):
        assert index == slice(None) and host.size == self.size
        if self.size:
            assert self.cu.cuMemcpyHtoD_v2(ctypes.c_uint64(self.ptr), ctypes.c_void_p(
                host.ctypes.data), ctypes.c_size_t(self.size)) == 0

    def get(self):
        return numpy.frombuffer(self.fake.download(self.ptr, self.size), dtype=numpy.uint8)


class FakeDevice:
    """An array module over the fake driver (run_python's interpreter, fake_devices imported)."""

    def __init__(self):
        import fake_devices

        self.fake, self.cu = fake_devices, fake_devices.cu

    def full(self, size, byte, dtype):
        ptr = ctypes.c_uint64()
        assert self.cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)) == 0
        assert self.cu.cuMemsetD8_v2(ptr, ctypes.c_ubyte(byte), ctypes.c_size_t(size)) == 0
        return FakeDeviceArray(self.fake, ptr.value, size)

    def asarray(self, host):
        return host  # assignment copies it in


@needs_fakes
def test_random_io_against_a_model_in_fake_device_memory(tmp_path):
    result = run_python(f"""
        import json
        import test_random_model as t
        for seed in (1, 2):
            t.run_model(t.FakeDevice(), seed, {str(tmp_path / "model.bin")!r})
        print(json.dumps("ok"))
        """, nvcomp=False, pythonpath=(TESTS,))
    assert result == "ok"
