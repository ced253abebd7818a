"""Shared fixtures: `xp` runs a test once with NumPy and once with CuPy (skipped, and counted as
skipped, where CuPy or a GPU is missing); `serve` runs an HTTP handler of a test's own."""
import contextlib
import http.server
import threading

import numpy
import pytest


@contextlib.contextmanager
def serve(handler):
    """Serve `handler` (a BaseHTTPRequestHandler class) on a free port of 127.0.0.1 from a
    thread; gives the server's URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _cupy_or_reason():
    try:
        import cupy
    except ImportError as e:
        return None, f"CuPy is not installed ({e})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "no CUDA device"
    except Exception as e:  # CuPy raises its own runtime errors without a driver
        return None, f"no usable CUDA device ({e})"
    return cupy, None


cupy, CUPY_MISSING = _cupy_or_reason()


@pytest.fixture(params=["numpy", "cupy"])
def xp(request):
    """The array module a test allocates its buffers with."""
    if request.param == "numpy":
        return numpy
    if cupy is None:
        pytest.skip(CUPY_MISSING)
    return cupy


def to_host(array):
    """A NumPy copy of a NumPy or CuPy array."""
    return array.get() if hasattr(array, "get") and not isinstance(array, numpy.ndarray) else numpy.asarray(array)


@pytest.fixture
def rng():
    return numpy.random.default_rng(12345)


@pytest.fixture
def data(rng, request):
    """Random bytes, as many as the test module's FILE_SIZE."""
    return rng.integers(0, 256, request.module.FILE_SIZE, dtype=numpy.uint8)


@pytest.fixture
def path(tmp_path, data):
    """A file holding `data`."""
    p = tmp_path / "data.bin"
    data.tofile(p)
    return p
