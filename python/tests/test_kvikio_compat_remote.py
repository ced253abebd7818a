"""kvikio 26.10's behaviour for remote files (issue 26): a read past the end of the object is the
caller's error (ValueError), a server that ignores Range gives an OverflowError that says so, and
a WebHDFS reply without a file length says the length could not be read from the JSON."""
import http.server
import re

import numpy
import pytest
from conftest import serve

import kvik
from kvik import RemoteFile

pytestmark = pytest.mark.skipif(not kvik.is_remote_file_available(), reason="kvik built without libcurl")

DATA = bytes(range(100))


@pytest.fixture
def tiny_server():
    """A local HTTP server of DATA: /ranged answers Range with 206; /range200 answers it with 200
    and exactly the range; /norange ignores Range and answers 200 with the whole object;
    /webhdfs/v1/nolength answers GETFILESTATUS without a length."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(DATA)))
            self.end_headers()

        def do_GET(self):
            if self.path.startswith("/webhdfs/v1/nolength"):
                body = b'{"FileStatus":{"type":"FILE","owner":"me"}}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
            else:
                match = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
                if self.path == "/range200" and match:  # the range, in a 200
                    body = DATA[int(match[1]):int(match[2]) + 1]
                    self.send_response(200)
                elif self.path == "/ranged" and match:
                    first, last = int(match[1]), int(match[2])
                    body = DATA[first:last + 1]
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {first}-{last}/{len(DATA)}")
                else:
                    body = DATA
                    self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    with serve(Handler) as url:
        yield url


def test_a_read_past_the_end_of_a_remote_object_raises_value_error(tiny_server):
    with RemoteFile.open_http(f"{tiny_server}/ranged") as f:
        buf = numpy.zeros(200, dtype=numpy.uint8)
        with pytest.raises(ValueError, match=r"cannot read 0\+200 bytes into a 100 bytes file"):
            f.read(buf)
        with pytest.raises(ValueError, match=r"cannot read 100\+5 bytes into a 100 bytes file"):
            f.read(buf, size=5, file_offset=100)
        with pytest.raises(ValueError, match=r"cannot read 95\+10 bytes into a 100 bytes file"):
            f.pread(buf, size=10, file_offset=95)
        assert f.read(buf, size=5, file_offset=95) == 5
        assert buf[:5].tobytes() == DATA[95:]


def test_a_server_that_ignores_range_raises_overflow_error(tiny_server):
    with RemoteFile.open_http(f"{tiny_server}/norange") as f:
        buf = numpy.zeros(100, dtype=numpy.uint8)
        for offset in (0, 10):
            with pytest.raises(OverflowError, match="maybe the server doesn't support file ranges?") as info:
                f.read(buf, size=10, file_offset=offset)
            assert isinstance(info.value, kvik.RangeNotSupported)
            assert isinstance(info.value, kvik.KvikError) and isinstance(info.value, RuntimeError)
            assert info.value.name == "KVIK_ERANGE_IGNORED"
        with pytest.raises(OverflowError, match="maybe the server doesn't support file ranges?"):
            f.pread(buf, size=10, file_offset=10).get()


def test_a_200_with_exactly_the_range_asked_for_is_accepted(tiny_server):
    with RemoteFile.open_http(f"{tiny_server}/norange") as f:
        buf = numpy.zeros(100, dtype=numpy.uint8)
        assert f.read(buf) == 100
        assert buf.tobytes() == DATA
    with RemoteFile.open_http(f"{tiny_server}/range200") as f:
        buf = numpy.zeros(10, dtype=numpy.uint8)
        assert f.read(buf, file_offset=20) == 10
        assert buf.tobytes() == DATA[20:30]
        assert f.pread(buf, size=6, file_offset=90, task_size=2).get() == 6
        assert buf[:6].tobytes() == DATA[90:96]


def test_a_webhdfs_reply_without_a_file_length_says_so(tiny_server):
    with pytest.raises(RuntimeError, match="Cannot extract file length from the JSON response."):
        RemoteFile.open_webhdfs(f"{tiny_server}/webhdfs/v1/nolength")
