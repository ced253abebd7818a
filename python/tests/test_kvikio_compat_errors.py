"""kvikio 26.10's exception types (issue 26): kvikio raises RuntimeError for failed IO, so each of
kvik's exceptions is also a RuntimeError, and keeps its precise class (FileNotFoundError,
ValueError, ...) and kvik's message, with kvikio's phrase added where kvikio code looks for one."""
import http.server
import time

import numpy
import pytest
from conftest import serve

import kvik
from kvik import RemoteEndpointType, RemoteFile, defaults

needs_curl = pytest.mark.skipif(not kvik.is_remote_file_available(), reason="kvik built without libcurl")


@pytest.fixture
def tiny_server():
    """A local HTTP server: GET /slow answers after 3 s; HEAD, and GET under /503, answer 503."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.startswith("/503"):
                self.send_error(503)
                return
            time.sleep(3)
            self.send_response(206)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_HEAD(self):
            self.send_error(503)

        def log_message(self, *args):
            pass

    with serve(Handler) as url:
        yield url


def test_every_kvik_exception_is_a_runtime_error():
    # vars(), not dir(): dir() also names the submodules loaded on first use, whose optional
    # dependencies (numcodecs, zarr) may be absent.
    classes = [value for value in vars(kvik).values()
               if isinstance(value, type) and issubclass(value, BaseException)]
    assert kvik.FileNotFound in classes and kvik.InvalidArgument in classes
    for cls in classes:
        assert issubclass(cls, kvik.KvikError) and issubclass(cls, RuntimeError), cls
    assert issubclass(kvik.FileNotFound, FileNotFoundError)
    assert issubclass(kvik.TimedOut, TimeoutError)
    assert issubclass(kvik.InvalidArgument, ValueError)


def test_opening_a_missing_file_raises_file_not_found_and_runtime_error(tmp_path):
    missing = tmp_path / "missing"
    for open_missing in (lambda: kvik.CuFile(missing, "r"), lambda: kvik.Mmap(missing, "r"),
                         lambda: kvik.get_page_cache_info(missing)):
        with pytest.raises(RuntimeError) as info:
            open_missing()
        assert isinstance(info.value, FileNotFoundError) and info.value.errno == 2
        assert "missing" in str(info.value)


def test_writing_a_file_opened_for_reading_raises_runtime_error(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 10)
    with kvik.CuFile(tmp_path / "f", "r") as f, pytest.raises(RuntimeError) as info:
        f.write(bytearray(10))
    assert isinstance(info.value, OSError)


def test_reading_a_file_opened_for_writing_raises_runtime_error(tmp_path):
    with kvik.CuFile(tmp_path / "f", "w") as f:
        f.write(bytearray(10))
        with pytest.raises(RuntimeError) as info:
            f.read(bytearray(10))
    assert isinstance(info.value, OSError)


def test_a_path_of_another_type_raises_value_error():
    with pytest.raises(ValueError):
        kvik.get_page_cache_info(123.456)


@pytest.mark.parametrize("method", ["raw_read", "raw_write"])
def test_raw_io_on_host_memory_raises_value_error(tmp_path, method):
    (tmp_path / "f").write_bytes(b"x" * 10)
    with kvik.CuFile(tmp_path / "f", "r+") as f, pytest.raises(ValueError):
        getattr(f, method)(numpy.zeros(10, dtype="u1"))


@needs_curl
def test_a_remote_timeout_raises_runtime_error_saying_operation_timed_out(tiny_server):
    with defaults.set({"http_timeout": 1, "http_max_attempts": 1}):
        f = RemoteFile.open_http(f"{tiny_server}/slow", nbytes=10)
        with pytest.raises(RuntimeError, match="Operation timed out.") as info:
            f.read(bytearray(10))
    assert isinstance(info.value, TimeoutError)
    assert "Operation timed out." in str(info.value)


@needs_curl
def test_exhausted_retries_name_the_maximum_number_of_attempts_and_the_http_code(tiny_server):
    with defaults.set({"http_timeout": 1, "http_max_attempts": 2}):
        with pytest.raises(RuntimeError) as info:
            RemoteFile.open_http(f"{tiny_server}/503/a")
    assert info.match(r"maximum number of attempts \(2\)") and info.match("503")
    with defaults.set({"http_timeout": 1, "http_max_attempts": 2}):
        f = RemoteFile.open_http(f"{tiny_server}/slow", nbytes=10)
        with pytest.raises(RuntimeError) as info:
            f.read(bytearray(10))
    assert info.match("maximum number of attempts") and info.match("Operation timed out.")


@needs_curl
@pytest.mark.parametrize("url", ["ftp://h/x", "file:///etc/passwd", "no-scheme", "http://", "s3://bucket-only"])
def test_a_bad_url_raises_runtime_error(url):
    with pytest.raises(RuntimeError):
        RemoteFile.open(url, nbytes=10)


@pytest.mark.parametrize("url, kind, allow_list", [
    ("http://h/x", RemoteEndpointType.AUTO, [RemoteEndpointType.S3]),
    ("http://h/x", RemoteEndpointType.HTTP, [RemoteEndpointType.WEBHDFS]),
])
def test_a_url_not_in_the_allow_list_raises_runtime_error(url, kind, allow_list):
    with pytest.raises(RuntimeError, match="allow_list"):
        RemoteFile.open(url, kind, allow_list=allow_list, nbytes=10)


def test_an_unsupported_endpoint_type_raises_runtime_error():
    with pytest.raises(RuntimeError):
        RemoteFile("http://h/x", 99, 10)


def test_an_unknown_scheme_for_s3_raises_unsupported_protocol():
    with pytest.raises(RuntimeError, match="Unsupported protocol"):
        RemoteFile.open_s3_url("unknown://bucket/key")
