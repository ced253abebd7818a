"""kvikio 26.10's remote IO as kvik gives it: the retry notices kvikio prints on stderr, its words
in messages, RemoteFile.open's errors for bad URLs, and the remote_io_* settings."""
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest
from conftest import serve

import kvik
from kvik import RemoteEndpointType, RemoteFile, defaults

needs_curl = pytest.mark.skipif(not kvik.is_remote_file_available(),
                                reason="kvik built without libcurl")


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
    assert info.match(r"KvikIO: HTTP request reached maximum number of attempts \(3\)\. "
                      r"Reason: Got HTTP code 503\.")
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


# ---- kvikio 26.10's remote_io_* settings -----------------------------------------------------

REMOTE_IO = ("remote_io_backend", "remote_io_num_reactors", "remote_io_reactor_dispatch",
             "remote_io_max_concurrent_requests")


@pytest.fixture
def restore_remote_io():
    saved = {name: kvik._lib.setting_format(name) for name in REMOTE_IO}
    yield
    for name, value in saved.items():
        kvik._lib.setting_parse(name, value)


def test_remote_io_enums_are_at_the_top_level_with_kvikios_numbers():
    assert (kvik.RemoteIOBackend.EASY_THREADPOOL, kvik.RemoteIOBackend.MULTI_POLL) == (0, 1)
    assert (kvik.RemoteReactorDispatch.PER_CHUNK, kvik.RemoteReactorDispatch.PER_PREAD) == (0, 1)
    assert kvik.RemoteIOBackend is defaults.RemoteIOBackend


def test_remote_io_defaults_are_kvikios(restore_remote_io):
    assert defaults.get("remote_io_backend") is kvik.RemoteIOBackend.EASY_THREADPOOL
    assert defaults.get("remote_io_num_reactors") == 1
    assert defaults.get("remote_io_reactor_dispatch") is kvik.RemoteReactorDispatch.PER_CHUNK
    assert defaults.get("remote_io_max_concurrent_requests") == 256


def test_remote_io_backend_sets_in_a_with_block(restore_remote_io):
    with defaults.set("remote_io_backend", kvik.RemoteIOBackend.MULTI_POLL):
        assert defaults.get("remote_io_backend") is kvik.RemoteIOBackend.MULTI_POLL
    assert defaults.get("remote_io_backend") is kvik.RemoteIOBackend.EASY_THREADPOOL


def test_process_lifetime_settings_set_with_key_and_value_only(restore_remote_io):
    assert defaults.set("remote_io_num_reactors", 4) is None
    assert defaults.get("remote_io_num_reactors") == 4
    assert defaults.set("remote_io_reactor_dispatch", kvik.RemoteReactorDispatch.PER_PREAD) is None
    assert defaults.get("remote_io_reactor_dispatch") is kvik.RemoteReactorDispatch.PER_PREAD
    assert defaults.set("remote_io_max_concurrent_requests", 0) is None  # 0: no limit
    assert defaults.get("remote_io_max_concurrent_requests") == 0
    with pytest.raises(ValueError, match="process-lifetime"):
        defaults.set({"remote_io_num_reactors": 2, "task_size": 4096})
    assert defaults.get("remote_io_num_reactors") == 4


def test_remote_io_counts_refuse_as_kvikios_conversions_do(restore_remote_io):
    with pytest.raises(ValueError, match="positive integer"):
        defaults.set("remote_io_num_reactors", 0)
    with pytest.raises(OverflowError, match="negative value"):
        defaults.set("remote_io_num_reactors", -1)
    with pytest.raises(OverflowError, match="negative value"):
        defaults.set("remote_io_max_concurrent_requests", -1)
    assert defaults.get("remote_io_num_reactors") == 1


def test_remote_io_environment_variables_are_kvikios():
    code = ("import json, kvik\n"
            "print(json.dumps([int(kvik.defaults.get(n)) for n in "
            f"{list(REMOTE_IO)!r}]))")
    env = dict(os.environ, KVIKIO_REMOTE_IO_BACKEND="multi_poll", KVIKIO_REMOTE_IO_NUM_REACTORS="8",
               KVIKIO_REMOTE_IO_REACTOR_DISPATCH="PER_PREAD",
               KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS="32")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [1, 8, 1, 32]


@needs_curl
def test_max_concurrent_requests_caps_the_requests_in_flight(restore_remote_io):
    """Four tasks from a server that takes 0.3 s a GET: one after another at a cap of 1."""
    in_flight = []
    most = [0]
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200)
            self.send_header("Content-Length", str(4 << 20))
            self.end_headers()

        def do_GET(self):
            with lock:
                in_flight.append(1)
                most[0] = max(most[0], len(in_flight))
            time.sleep(0.3)
            with lock:
                in_flight.pop()
            first, last = map(int, self.headers["Range"].split("=")[1].split("-"))
            self.send_response(206)
            self.send_header("Content-Length", str(last - first + 1))
            self.send_header("Content-Range", f"bytes {first}-{last}/{4 << 20}")
            self.end_headers()
            self.wfile.write(bytes(last - first + 1))

        def log_message(self, *args):
            pass

    with serve(Handler) as url, defaults.set({"num_threads": 4, "task_size": 1 << 20}):
        defaults.set("remote_io_max_concurrent_requests", 1)
        assert RemoteFile.open_http(f"{url}/x").read(bytearray(4 << 20)) == 4 << 20
        assert most[0] == 1
        defaults.set("remote_io_max_concurrent_requests", 0)
        most[0] = 0
        assert RemoteFile.open_http(f"{url}/x").read(bytearray(4 << 20)) == 4 << 20
        assert most[0] > 1
