"""What kvik's Python readers share about devices, frameworks and dtypes: device names, the dtypes
of safetensors (which name them), and an adapter per framework that allocates memory on a device
and views it as arrays (kvik.safetensors, kvik.read_split). NumPy, CuPy and PyTorch are imported
when an adapter is made, not before."""

# Allocations start on a multiple of this. kvik.safetensors lands each read at an offset congruent
# to its offset in the file's data section modulo this, so that a tensor aligned in the file is
# aligned in memory, and a view.
ALIGN = 256

# Every dtype of safetensors 0.8.0, in the order of its Rust enum (the order save_file sorts by,
# the largest first): code -> (bits per element, the framework's name for it). A packed dtype
# (F4, two per byte) has its name on the storage type, whose last dimension is half the header's.
DTYPES = {
    "BOOL": (8, "bool"),
    "F4": (4, "float4_e2m1fn_x2"),
    "F6_E2M3": (6, None),
    "F6_E3M2": (6, None),
    "U8": (8, "uint8"),
    "I8": (8, "int8"),
    "F8_E5M2": (8, "float8_e5m2"),
    "F8_E4M3": (8, "float8_e4m3fn"),
    "F8_E8M0": (8, "float8_e8m0fnu"),
    "F8_E4M3FNUZ": (8, "float8_e4m3fnuz"),
    "F8_E5M2FNUZ": (8, "float8_e5m2fnuz"),
    "I16": (16, "int16"),
    "U16": (16, "uint16"),
    "F16": (16, "float16"),
    "BF16": (16, "bfloat16"),
    "I32": (32, "int32"),
    "U32": (32, "uint32"),
    "F32": (32, "float32"),
    "C64": (64, "complex64"),
    "F64": (64, "float64"),
    "I64": (64, "int64"),
    "U64": (64, "uint64"),
}
CODE_OF_NAME = {name: code for code, (_, name) in DTYPES.items() if name}
PACKED = {"F4": 2}  # elements per storage item


def parse_device(device):
    """("cpu", None) or ("cuda", ordinal) from "cpu", "cuda", "cuda:N", N or a torch.device."""
    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise ValueError(f"device {device} is not a CUDA device ordinal")
        return "cuda", device
    if type(device).__name__ == "device" and hasattr(device, "type"):  # torch.device
        device = str(device)
    if not isinstance(device, str):
        raise TypeError("device must be a str, an int or a torch.device, not "
                        f"{type(device).__name__}")
    kind, _, ordinal = device.partition(":")
    if kind == "cpu" and not ordinal:
        return "cpu", None
    if kind == "cuda" and (not ordinal or ordinal.isdigit()):
        return "cuda", int(ordinal) if ordinal else 0
    raise ValueError(f"device {device!r} is neither 'cpu' nor 'cuda', 'cuda:N'")


def numpy_dtype(code, who):
    """The NumPy dtype of a safetensors dtype: bf16 and fp8 through ml_dtypes where installed."""
    import numpy

    name = DTYPES[code][1]
    if code in PACKED or name is None:
        raise TypeError(f"{who} has no dtype for safetensors' {code}")
    if code != "BF16" and not code.startswith("F8"):
        return numpy.dtype(name)
    try:
        import ml_dtypes
    except ImportError as e:
        raise TypeError(f"{who} needs the ml_dtypes package for safetensors' {code}: {e}") from e
    if not hasattr(ml_dtypes, name):
        raise TypeError(f"this ml_dtypes ({ml_dtypes.__version__}) has no {name} for {code}")
    return numpy.dtype(getattr(ml_dtypes, name))


class NumPy:
    """Host memory from numpy.empty."""

    name = "NumPy"

    def __init__(self, kind, ordinal):
        if kind != "cpu":
            raise ValueError("framework 'numpy' holds host memory: device must be 'cpu'")
        import numpy

        self.np = numpy

    def dtype(self, code):
        return numpy_dtype(code, "NumPy")

    def empty(self, nbytes):
        raw = self.np.empty(nbytes + ALIGN, dtype=self.np.uint8)
        skip = -raw.ctypes.data % ALIGN
        return raw[skip:skip + nbytes]

    def region(self, buf, start, stop):
        return buf[start:stop]

    def view(self, buf, start, stop, dtype, shape):
        return buf[start:stop].view(dtype).reshape(shape)

    def copy(self, buf, start, stop):
        out = self.empty(stop - start)
        out[:] = buf[start:stop]
        return out


class CuPy(NumPy):
    """Device memory from cupy.empty, on the device asked for."""

    name = "CuPy"

    def __init__(self, kind, ordinal):
        if kind != "cuda":
            raise ValueError("framework 'cupy' holds device memory: device must be 'cuda[:N]'")
        import cupy

        self.cp, self.ordinal = cupy, ordinal

    def dtype(self, code):
        dtype = numpy_dtype(code, "CuPy")
        try:  # what view() will do
            with self.cp.cuda.Device(self.ordinal):
                self.cp.empty(dtype.itemsize, dtype=self.cp.uint8).view(dtype)
        except Exception as e:  # CuPy's own error types for a dtype it cannot hold
            raise TypeError(f"CuPy cannot hold {dtype} (safetensors' {code}): {e}") from e
        return dtype

    def empty(self, nbytes):
        with self.cp.cuda.Device(self.ordinal):  # CuPy's pool aligns to 512 bytes
            return self.cp.empty(nbytes, dtype=self.cp.uint8)

    def copy(self, buf, start, stop):
        with self.cp.cuda.Device(self.ordinal):
            return buf[start:stop].copy()


class Torch:
    """Memory from torch.empty (PyTorch's caching allocator on CUDA), viewed as each dtype."""

    name = "PyTorch"

    def __init__(self, kind, ordinal):
        import torch

        self.torch = torch
        self.device = torch.device("cpu" if kind == "cpu" else f"cuda:{ordinal}")

    def dtype(self, code):
        name = DTYPES[code][1]
        dtype = getattr(self.torch, name, None) if name else None
        if not isinstance(dtype, self.torch.dtype):
            raise TypeError(f"this PyTorch ({self.torch.__version__}) has no dtype for {code}")
        return dtype

    def empty(self, nbytes):
        # The caching allocator aligns to 512 bytes; on the host, torch.empty to 64.
        cuda = self.device.type == "cuda"
        out = self.torch.empty(nbytes + (0 if cuda else ALIGN), dtype=self.torch.uint8,
                               device=self.device)
        if cuda:
            # The block may be one freed while kernels queued on PyTorch's stream still use it;
            # kvik writes it from streams of its own.
            self.torch.cuda.current_stream(self.device).synchronize()
        skip = -out.data_ptr() % ALIGN
        return out[skip:skip + nbytes]

    def region(self, buf, start, stop):
        # A host tensor reaches kvik as the NumPy array that shares its memory.
        part = buf[start:stop]
        return part if self.device.type == "cuda" else part.numpy()

    def view(self, buf, start, stop, dtype, shape):
        if start == stop:  # view(dtype) needs an offset its item size divides; nothing to keep
            return self.torch.empty(shape, dtype=dtype, device=self.device)
        return buf[start:stop].view(dtype).view(shape)

    def copy(self, buf, start, stop):
        out = self.empty(stop - start)
        out.copy_(buf[start:stop])
        return out


FRAMEWORKS = {"pt": Torch, "torch": Torch, "pytorch": Torch, "np": NumPy, "numpy": NumPy,
               "cupy": CuPy}


def adapter(framework, device, default_device):
    if not isinstance(framework, str):
        # The tests' own adapter, with the methods of NumPy; for_device(kind, ordinal) gives one
        # for another device.
        return framework if device is None else framework.for_device(*parse_device(device))
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework {framework!r} is not one of {', '.join(FRAMEWORKS)}")
    kind, ordinal = parse_device(default_device if device is None else device)
    return FRAMEWORKS[framework](kind, ordinal)


def device_name(device):
    """The canonical name of a device: "cpu" or "cuda:N"."""
    kind, ordinal = parse_device(device)
    return kind if ordinal is None else f"{kind}:{ordinal}"
