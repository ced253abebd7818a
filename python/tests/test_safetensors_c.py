"""The C API's safetensors (kvik.h, "Model weights") on files the real `safetensors` package
writes: every dtype NumPy holds, random shapes, metadata, each tensor's dtype, shape, offset and
bytes as the file's header says, read back byte for byte; and every malformed header that
kvik.safetensors refuses (test_safetensors.BAD_HEADERS) refused by the C API too, with -EBADMSG.
Through ctypes on the C build's libkvik.so ($KVIK_BUILD_DIR, else build/); skips where it or
Jansson is missing."""
import ctypes
import os

import numpy
import pytest

from test_safetensors import BAD_HEADERS, GOOD, NUMPY_DTYPES, hand_made, header_of, random_array

safetensors_numpy = pytest.importorskip("safetensors.numpy")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIBRARY = os.path.join(os.environ.get("KVIK_BUILD_DIR", os.path.join(ROOT, "build")), "libkvik.so")
EBADMSG = 74
KVIK_LIB_JANSSON = 3


class TensorInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("name", ctypes.c_char_p),
                ("dtype", ctypes.c_char_p), ("dtype_bits", ctypes.c_uint),
                ("ndim", ctypes.c_uint), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("file_offset", ctypes.c_int64), ("nbytes", ctypes.c_uint64)]


@pytest.fixture(scope="module")
def lib():
    if not os.path.exists(LIBRARY):
        pytest.skip(f"no C build at {LIBRARY}")
    lib = ctypes.CDLL(LIBRARY)
    if lib.kvik_runtime_lib_supported(KVIK_LIB_JANSSON, None, ctypes.c_size_t(0)) != 1:
        pytest.skip("no Jansson (libjansson.so.4)")
    lib.kvik_safetensors_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.kvik_safetensors_free.argtypes = [ctypes.c_void_p]
    lib.kvik_safetensors_count.argtypes = [ctypes.c_void_p]
    lib.kvik_safetensors_count.restype = ctypes.c_size_t
    lib.kvik_safetensors_tensor.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                            ctypes.POINTER(TensorInfo)]
    lib.kvik_safetensors_metadata.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.kvik_safetensors_metadata.restype = ctypes.c_char_p
    lib.kvik_safetensors_read.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                          ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.kvik_last_error.restype = ctypes.c_char_p
    return lib


def open_checkpoint(lib, path):
    """(0, handle) or (the error code, its message)."""
    st = ctypes.c_void_p()
    rc = lib.kvik_safetensors_open(os.fsencode(path), ctypes.byref(st))
    return (rc, lib.kvik_last_error().decode()) if rc < 0 else (0, st)


def test_files_of_safetensors(lib, tmp_path, rng):
    codes = list(NUMPY_DTYPES)
    for round in range(4):
        tensors = {}
        for i, code in enumerate(codes[round::2] if round < 2 else codes):
            shape = tuple(int(rng.integers(0 if i % 5 == 0 else 1, 7))
                          for _ in range(int(rng.integers(0, 4))))
            tensors[f"layer{i}.{code.lower()}"] = random_array(rng, NUMPY_DTYPES[code], shape)
        metadata = {"format": "np", "round": str(round)}
        path = tmp_path / f"r{round}.safetensors"
        safetensors_numpy.save_file(tensors, path, metadata=metadata)
        header = header_of(path)
        data_start = os.path.getsize(path) - max(e["data_offsets"][1] for k, e in header.items()
                                                 if k != "__metadata__")
        rc, st = open_checkpoint(lib, path)
        assert rc == 0, st
        try:
            n = lib.kvik_safetensors_count(st)
            assert n == len(tensors)
            assert lib.kvik_safetensors_metadata(st, b"round") == str(round).encode()
            outs, dsts = [], (ctypes.c_void_p * n)()
            last = -1
            for i in range(n):
                info = TensorInfo(struct_size=ctypes.sizeof(TensorInfo))
                assert lib.kvik_safetensors_tensor(st, i, ctypes.byref(info)) == 0
                name = info.name.decode()
                want = header[name]
                assert info.dtype.decode() == want["dtype"]
                assert [info.shape[d] for d in range(info.ndim)] == want["shape"]
                begin, end = want["data_offsets"]
                assert (info.file_offset, info.nbytes) == (data_start + begin, end - begin)
                assert info.file_offset >= last  # the order of their data
                last = info.file_offset
                outs.append((name, numpy.empty(end - begin + 1, numpy.uint8)))
                dsts[i] = outs[-1][1].ctypes.data + 1  # never aligned
            indices = (ctypes.c_size_t * n)(*reversed(range(n)))
            reversed_dsts = (ctypes.c_void_p * n)(*reversed(list(dsts)))
            assert lib.kvik_safetensors_read(st, indices, reversed_dsts, n) == 0, \
                lib.kvik_last_error()
            for name, out in outs:
                assert out[1:].tobytes() == tensors[name].tobytes(), name
        finally:
            lib.kvik_safetensors_free(st)


@pytest.mark.parametrize("case", BAD_HEADERS)
def test_bad_header(lib, tmp_path, case):
    header, _ = BAD_HEADERS[case]
    path = hand_made(tmp_path / "bad.safetensors", header, bytes(12))
    rc, message = open_checkpoint(lib, path)
    assert rc == -EBADMSG, message
    assert str(path) in message


def test_good_header_passes(lib, tmp_path):
    path = hand_made(tmp_path / "good.safetensors", GOOD, bytes(12))
    rc, st = open_checkpoint(lib, path)
    assert rc == 0, st
    lib.kvik_safetensors_free(st)
