"""kvikio 26.10's remote IO as kvik gives it: the retry notices kvikio prints on stderr, its words
in messages, RemoteFile.open's errors for bad URLs, and the remote_io_* settings."""
import http.server
import re
import time

import pytest
from conftest import serve

import kvik
from kvik import RemoteEndpointType, RemoteFile, defaults

needs_curl = pytest.mark.skipif(not kvik.is_remote_file_available(), reason="kvik built without libcurl")


@pytest.fixture
def server():
    """GET and HEAD under /503 answer 503; GET under /slow answers after 3 s; / has 100 bytes."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, body):
            if self.path.startswith("/503"):
                self.send_error(503)
                return
            if self.path.startswith("/slow") and body:
                time.sleep(3)
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            if body:
                self.wfile.write(bytes(100))

        def do_HEAD(self):
            self._answer(False)

        def do_GET(self):
            self._answer(True)

        def log_message(self, *args):
            pass

    with serve(Handler) as url:
        yield url


@needs_curl
def test_each_retry_prints_kvikios_notice_on_stderr(server, capfd):
    with defaults.set({"http_max_attempts": 3, "http_timeout": 1}):
        with pytest.raises(RuntimeError) as info:
            RemoteFile.open_http(f"{server}/503/a")
    err = capfd.readouterr().err
    assert re.findall(r"KvikIO: Got HTTP code 503\. Retrying after (\d+)ms \(attempt (\d) of 3\)\.",
                      err) == [("500", "1"), ("1000", "2")], err
    assert info.match(r"KvikIO: HTTP request reached maximum number of attempts \(3\)\. Reason: Got "
                      r"HTTP code 503\.")
    assert info.match("URL returned error: 503")


@needs_curl
def test_a_timeout_retry_prints_kvikios_timeout_notice(server, capfd):
    with defaults.set({"http_max_attempts": 2, "http_timeout": 1}):
        f = RemoteFile.open_http(f"{server}/slow")
        with pytest.raises(RuntimeError) as info:
            f.read(bytearray(100))
    err = capfd.readouterr().err
    assert err.count("KvikIO: Timeout error. Retrying after 500ms (attempt 1 of 2).") == 1, err
    assert info.match(r"maximum number of attempts \(2\)\. Reason: Operation timed out\.")


@needs_curl
def test_a_request_that_succeeds_at_once_prints_nothing(server, capfd):
    assert RemoteFile.open_http(f"{server}/a").read(bytearray(100)) == 100
    assert capfd.readouterr().err == ""


@needs_curl
@pytest.mark.parametrize("url,match", [
    ("://bucket/key", "Bad scheme"),
    ("unsupported://bucket/key", "Unsupported endpoint URL"),
    ("s3://bucket", "Unsupported endpoint URL"),
])
def test_open_with_auto_raises_kvikios_errors(url, match):
    with pytest.raises(RuntimeError, match=match):
        RemoteFile.open(url)


@needs_curl
def test_open_of_s3_without_a_key_is_an_invalid_url():
    with pytest.raises(RuntimeError, match="Invalid URL"):
        RemoteFile.open("s3://bucket", RemoteEndpointType.S3)


@needs_curl
def test_a_type_outside_the_allow_list_is_not_in_the_allowlist():
    with pytest.raises(RuntimeError, match="not in the allowlist"):
        RemoteFile.open("http://h/b/k", RemoteEndpointType.S3, [RemoteEndpointType.WEBHDFS])
