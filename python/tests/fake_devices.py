"""Device memory of the fake CUDA driver (tests/fake_cuda.c) behind the framework adapter that
kvik.safetensors and kvik.read_split take in place of a framework. Imported by the scripts that
tests run in a fresh interpreter over the fake driver (test_nvcomp.run_python, with this
directory on the path): importing it initialises the driver, retains every device's primary
context and makes device 0's current."""
import ctypes

cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
_count = ctypes.c_int()
assert cu.cuDeviceGetCount(ctypes.byref(_count)) == 0
contexts = []
for _ordinal in range(_count.value):
    _ctx = ctypes.c_void_p()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(_ctx), _ordinal) == 0
    contexts.append(_ctx)
assert cu.cuCtxSetCurrent(contexts[0]) == 0
DEVICE_ORDINAL = 9  # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL


def download(ptr, size):
    """`size` bytes of device memory at `ptr`."""
    out = ctypes.create_string_buffer(size)
    if size:
        assert cu.cuMemcpyDtoH_v2(out, ctypes.c_uint64(ptr), ctypes.c_size_t(size)) == 0
    return out.raw


def ordinal_of(ptr):
    """The device whose memory `ptr` is, as the driver says."""
    ordinal = ctypes.c_int(-1)
    data = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(ordinal), ctypes.c_void_p))
    attributes = (ctypes.c_int * 1)(DEVICE_ORDINAL)
    assert cu.cuPointerGetAttributes(1, attributes, data, ctypes.c_uint64(ptr)) == 0
    return ordinal.value


class Device:
    """Bytes of device memory behind __cuda_array_interface__."""

    def __init__(self, size, ptr):
        self.ptr, self.size = ptr, size
        self.__cuda_array_interface__ = {
            "data": (ptr, False), "shape": (size,), "typestr": "|u1", "version": 3}


class FakeFramework:
    """Device memory of the fake driver on one device; for_device() gives another's. Every
    allocation is recorded, (ordinal, pointer), in `allocations`; views are dicts of what the
    tests check."""

    allocations = []

    def __init__(self, ordinal=0):
        self.ordinal = ordinal

    def for_device(self, kind, ordinal):
        if kind != "cuda" or ordinal >= len(contexts):
            name = kind if ordinal is None else f"{kind}:{ordinal}"
            raise ValueError(f"the fake driver has no device {name}")
        return FakeFramework(ordinal)

    def dtype(self, code):
        return code

    def empty(self, nbytes):
        p = ctypes.c_uint64()
        assert cu.cuCtxSetCurrent(contexts[self.ordinal]) == 0
        assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(max(nbytes, 1))) == 0
        assert cu.cuCtxSetCurrent(contexts[0]) == 0
        self.allocations.append((self.ordinal, p.value))
        return Device(nbytes, p.value)

    def region(self, buf, start, stop):
        return Device(stop - start, buf.ptr + start)

    def view(self, buf, start, stop, dtype, shape):
        return {"device": self.ordinal, "on": ordinal_of(buf.ptr), "base": buf.ptr,
                "dtype": dtype, "shape": shape, "bytes": download(buf.ptr + start, stop - start)}

    def copy(self, buf, start, stop):
        raise AssertionError("the tests' tensors are all aligned")
