"""kvikio 26.10's names and modules, under `import kvik as kvikio` (issue 26, "Names and modules
that are missing"). Each test states the behaviour it checks in its name and first line."""
import urllib.error
import urllib.request
from http.server import SimpleHTTPRequestHandler

import pytest

import kvik
import kvik.utils
from kvik.utils import LocalHttpServer

needs_curl = pytest.mark.skipif(not kvik.is_remote_file_available(),
                                reason="kvik built without remote files (libcurl)")


# ---- kvik.utils -----------------------------------------------------------------------------


def test_call_once_runs_the_first_call_only():
    """call_once: the first call runs the function; later calls return its result."""
    calls = []

    @kvik.utils.call_once
    def f(x):
        calls.append(x)
        return x * 2

    assert f(3) == 6
    assert f(5) == 6
    assert calls == [3]


def test_deprecation_notice_warns_and_documents():
    """kvikio_deprecation_notice: each call warns FutureWarning with the message, the result
    passes through, and the docstring starts with '.. deprecated:: SINCE MSG'."""

    @kvik.utils.kvikio_deprecation_notice("use g instead", since="1.2")
    def f(x):
        """Doubles."""
        return 2 * x

    with pytest.warns(FutureWarning, match="use g instead"):
        assert f(4) == 8
    assert f.__doc__.startswith(".. deprecated:: 1.2 use g instead")
    assert "Doubles." in f.__doc__


def test_deprecate_module_warns():
    """kvikio_deprecate_module warns FutureWarning naming the version and the message."""
    with pytest.warns(FutureWarning, match="deprecated since 9.9. gone soon"):
        kvik.utils.kvikio_deprecate_module("gone soon", since="9.9")


@pytest.fixture
def served(tmp_path):
    data = bytes(range(256)) * 40  # 10240 bytes
    (tmp_path / "a.bin").write_bytes(data)
    return tmp_path, data


def get(url, range_header=None):
    """(status, body, headers) of a GET, with a Range header if given."""
    request = urllib.request.Request(url, headers={"Range": range_header} if range_header else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read(), reply.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def test_local_http_server_attributes(served):
    """LocalHttpServer keeps kvikio's constructor arguments as attributes, and gives ip, port,
    url and process once entered."""
    root, _ = served
    server = LocalHttpServer(root, range_support=False, max_lifetime=30)
    assert (server.root_path, server.range_support, server.max_lifetime) == (root, False, 30)
    assert (server.handler, server.handler_options) == (None, {})
    with server:
        assert server.ip == "127.0.0.1" and server.port > 0
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert server.process.is_alive()
    assert not server.process.is_alive()


def test_local_http_server_serves_ranges(served):
    """With range support (the default, built in), a Range request gets 206 and those bytes;
    a suffix range gets the last bytes; a range past the end gets 416."""
    root, data = served
    with LocalHttpServer(root, max_lifetime=30) as server:
        url = f"{server.url}/a.bin"
        status, body, headers = get(url, "bytes=100-4195")
        assert status == 206 and body == data[100:4196]
        assert headers["Content-Range"] == f"bytes 100-4195/{len(data)}"
        assert get(url, "bytes=10000-")[:2] == (206, data[10000:])
        assert get(url, "bytes=-7")[:2] == (206, data[-7:])
        assert get(url, f"bytes={len(data)}-")[0] == 416
        status, body, headers = get(url)
        assert (status, body, headers["Accept-Ranges"]) == (200, data, "bytes")


def test_local_http_server_without_range_support(served):
    """range_support=False: every GET gets the whole file (200), Range or not."""
    root, data = served
    with LocalHttpServer(root, range_support=False, max_lifetime=30) as server:
        assert get(f"{server.url}/a.bin", "bytes=0-9")[:2] == (200, data)


class TeapotHandler(SimpleHTTPRequestHandler):
    def __init__(self, *args, status=200, **kwargs):
        self.status = status
        super().__init__(*args, **kwargs)

    def do_GET(self):
        self.send_error(self.status)


def test_local_http_server_custom_handler(served):
    """handler and handler_options: the server uses that handler with those options."""
    root, _ = served
    with LocalHttpServer(root, max_lifetime=30, handler=TeapotHandler,
                         handler_options={"status": 418}) as server:
        assert get(f"{server.url}/a.bin")[0] == 418


@needs_curl
def test_local_http_server_reads_with_remote_file(served):
    """RemoteFile.open_http reads a file of the LocalHttpServer byte for byte, at an offset."""
    root, data = served
    with LocalHttpServer(root, max_lifetime=30) as server:
        with kvik.RemoteFile.open_http(f"{server.url}/a.bin") as f:
            assert f.nbytes() == len(data)
            buf = bytearray(5000)
            assert f.read(buf, file_offset=1000) == 5000
            assert bytes(buf) == data[1000:6000]
