"""kvik.RemoteFile against real servers on loopback (tests/remote/servers.py): nginx, S3 (moto,
signatures checked), WebHDFS and a server that injects faults. Every read is compared byte for
byte with the file the servers serve.

A server that cannot start skips its tests; with KVIK_TEST_REQUIRE_REMOTE=1 that fails them."""
import errno
import os
import socket
import subprocess
import sys
import threading
import urllib.request
import weakref
from pathlib import Path

import numpy
import pytest

import kvik
from conftest import cupy, to_host
from kvik import RemoteEndpointType, RemoteFile, defaults
from kvik.remote_file import _kind_from_allow_list

REPO = Path(__file__).resolve().parents[2]
REQUIRE = os.environ.get("KVIK_TEST_REQUIRE_REMOTE") == "1"
NAMES = ("empty", "small", "medium", "large")
AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION",
            "AWS_ENDPOINT_URL")
CA_VARS = ("CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR")
# Faults are told apart within a second: short attempts, few of them.
FAST = {"http_timeout": 1, "http_max_attempts": 1}
# Tests that open files, without servers: they need a kvik built with libcurl.
needs_curl = pytest.mark.skipif(not kvik.is_remote_file_available(),
                                reason=f"kvik built without remote files: {kvik._lib.remote_supported()[1]}")


def unavailable(reason):
    """Skip, or fail where the remote tests are required."""
    if REQUIRE:
        pytest.fail(f"{reason} (KVIK_TEST_REQUIRE_REMOTE=1)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def servers():
    if not kvik.is_remote_file_available():
        unavailable(f"kvik built without remote files: {kvik._lib.remote_supported()[1]}")
    if not (REPO / "tests" / "remote" / "servers.py").exists():
        unavailable("tests/remote/servers.py is missing")
    sys.path.insert(0, str(REPO / "tests" / "remote"))
    try:
        import servers as module
    finally:
        sys.path.remove(str(REPO / "tests" / "remote"))
    with module.RemoteServers(require=REQUIRE) as running:
        yield running


@pytest.fixture(scope="session")
def data(servers):
    """name -> the bytes the servers serve under that name."""
    return {name: (Path(servers.data_dir) / name).read_bytes() for name in NAMES}


def need(servers, *names):
    """The values of the servers' variables `names`; skips where a server did not start."""
    missing = [name for name in names if name not in servers.env]
    if missing:
        unavailable(f"{', '.join(missing)} unset: that server did not start ({'; '.join(servers.problems)})")
    values = [servers.env[name] for name in names]
    return values[0] if len(values) == 1 else values


@pytest.fixture
def web(servers):
    """A web server with the data files at $URL/<name>: nginx, else the fault server's `ok` mode."""
    if "KVIK_TEST_NGINX_URL" not in servers.env and "KVIK_TEST_FAULT_URL" in servers.env:
        return f"{servers.env['KVIK_TEST_FAULT_URL']}/ok"
    return need(servers, "KVIK_TEST_NGINX_URL")


@pytest.fixture
def fault(servers):
    url = need(servers, "KVIK_TEST_FAULT_URL")
    control(url, "_reset")
    return url


@pytest.fixture
def s3(servers):
    """Keyword arguments that open objects of the test bucket: credentials, region, endpoint."""
    endpoint, region, key_id, secret = need(servers, "KVIK_TEST_S3_ENDPOINT", "KVIK_TEST_S3_REGION",
                                            "KVIK_TEST_S3_ACCESS_KEY_ID", "KVIK_TEST_S3_SECRET_ACCESS_KEY")
    return {"aws_access_key_id": key_id, "aws_secret_access_key": secret, "aws_region": region,
            "aws_endpoint_url": endpoint}


@pytest.fixture
def bucket(servers):
    return need(servers, "KVIK_TEST_S3_BUCKET")


@pytest.fixture(autouse=True, scope="module")
def cuda_context():
    """CuPy's context exists before the first read into device memory, whatever ran before: an
    empty CuPy array read first in a process meets a known issue, which
    test_empty_device_buffer_first covers on its own."""
    if cupy is not None:
        cupy.zeros(1, dtype=cupy.uint8)


@pytest.fixture(autouse=True)
def no_aws_environment(monkeypatch):
    """Tests start without AWS and CA variables of the machine's, so only what a test sets counts."""
    for name in AWS_VARS + CA_VARS:
        monkeypatch.delenv(name, raising=False)


def control(fault_url, path):
    """GET a control path of the fault server (_reset, _requests, _webhdfs_users) as text."""
    with urllib.request.urlopen(f"{fault_url}/{path}", timeout=10) as response:
        return response.read().decode()


def take_requests(fault_url):
    """The requests the fault server had since the last reset, then reset: each count starts anew.
    /_requests counts itself; that one is left out."""
    count = int(control(fault_url, "_requests")) - 1
    control(fault_url, "_reset")
    return count


def check_read(f, expected, xp, offset=0, size=None):
    """Read `size` bytes (default: to the end) at `offset` and compare them with `expected`."""
    size = len(expected) - offset if size is None else size
    buf = xp.zeros(size, dtype=xp.uint8)
    got = f.read(buf, file_offset=offset)
    want = expected[offset:offset + size]
    assert got == len(want)
    assert to_host(buf[:got]).tobytes() == want


def check_random_ranges(f, expected, xp, rng, count=8):
    """Reads at random offsets of random sizes, some reaching the end."""
    for _ in range(count):
        offset = int(rng.integers(0, len(expected) + 1))
        size = min(int(rng.integers(0, min(len(expected), 3 << 20) + 2)), len(expected) - offset)
        check_read(f, expected, xp, offset, size)


def free_port():
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- without servers ----------------------------------------------------------------------------


def test_endpoint_types():
    assert [(t.name, int(t)) for t in RemoteEndpointType] == [
        ("AUTO", 0), ("S3", 1), ("S3_PUBLIC", 2), ("S3_PRESIGNED_URL", 3), ("WEBHDFS", 4), ("HTTP", 5)]
    assert kvik.RemoteEndpointType is kvik.remote_file.RemoteEndpointType


def test_is_remote_file_available():
    supported, detail = kvik._lib.remote_supported()
    assert kvik.is_remote_file_available() is supported
    assert ("libcurl" in detail) if supported else detail


def test_without_libcurl():
    """A process without libcurl (KVIK_CURL_LIBRARY naming a file that is not there) opens
    nothing, with its own error, which names the file and the loader's reason."""
    code = ("import kvik\n"
            "try:\n"
            "    kvik.RemoteFile.open_http('http://127.0.0.1:1/x', nbytes=10)\n"
            "except kvik.KvikError as e:\n"
            "    print(e.name, e.http_status, kvik.is_remote_file_available(), e)\n")
    env = dict(os.environ, KVIK_CURL_LIBRARY="/nonexistent/libcurl.so.4",
               PYTHONPATH=os.pathsep.join([str(Path(kvik.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("KVIK_ENOREMOTE None False "), done.stdout
    assert "libcurl unavailable: /nonexistent/libcurl.so.4: cannot open shared object file" in done.stdout


def test_kvik_error_attributes():
    assert kvik.KvikError.http_status is None and kvik.KvikError.code is None
    assert issubclass(kvik.KvikError, RuntimeError)


@pytest.mark.parametrize("url, kind, allow_list, expected", [
    ("http://h/x", RemoteEndpointType.AUTO, None, RemoteEndpointType.AUTO),
    ("http://h/x", RemoteEndpointType.AUTO, [RemoteEndpointType.WEBHDFS, RemoteEndpointType.HTTP],
     RemoteEndpointType.HTTP),
    ("http://h/webhdfs/v1/x", RemoteEndpointType.AUTO, [RemoteEndpointType.WEBHDFS, RemoteEndpointType.HTTP],
     RemoteEndpointType.WEBHDFS),
    ("http://h/webhdfs/v1/x", RemoteEndpointType.AUTO, [RemoteEndpointType.HTTP, RemoteEndpointType.WEBHDFS],
     RemoteEndpointType.HTTP),  # kvikio: the list's order decides
    ("s3://b/k", RemoteEndpointType.AUTO, [RemoteEndpointType.HTTP, RemoteEndpointType.S3_PUBLIC],
     RemoteEndpointType.S3_PUBLIC),
    ("https://b.s3.us-west-2.amazonaws.com/k", RemoteEndpointType.AUTO, [RemoteEndpointType.S3],
     RemoteEndpointType.S3),
    ("https://b.s3.amazonaws.com/k?X-Amz-Signature=ab", RemoteEndpointType.AUTO,
     [RemoteEndpointType.S3, RemoteEndpointType.S3_PRESIGNED_URL], RemoteEndpointType.S3_PRESIGNED_URL),
    ("http://h/x", RemoteEndpointType.HTTP, [RemoteEndpointType.HTTP], RemoteEndpointType.HTTP),
])
def test_allow_list_choice(url, kind, allow_list, expected):
    assert _kind_from_allow_list(url, kind, allow_list) is expected


@pytest.mark.parametrize("url, kind, allow_list, match", [
    ("http://h/x", RemoteEndpointType.AUTO, [RemoteEndpointType.S3, RemoteEndpointType.WEBHDFS],
     "not a URL for any type in the allow_list"),
    ("s3://b/k", RemoteEndpointType.AUTO, [RemoteEndpointType.HTTP], "not a URL for any type"),
    ("http://h/x", RemoteEndpointType.HTTP, [RemoteEndpointType.S3], "HTTP is not in the allowlist"),
    ("http://h/x", RemoteEndpointType.AUTO, [], "allow_list \\(nothing\\)"),
    ("http://h/x", RemoteEndpointType.AUTO, [RemoteEndpointType.AUTO], "AUTO is none"),
    ("http://h/x", RemoteEndpointType.AUTO, [9], "is not a valid RemoteEndpointType"),
])
def test_allow_list_refuses(url, kind, allow_list, match):
    with pytest.raises(ValueError, match=match):
        RemoteFile.open(url, kind, allow_list=allow_list)


def test_allow_list_message_has_no_secrets():
    with pytest.raises(ValueError) as info:
        RemoteFile.open("http://user:hunter2@h/x?X-Amz-Credential=AKIDSECRET", allow_list=[RemoteEndpointType.S3])
    assert "hunter2" not in str(info.value) and "AKIDSECRET" not in str(info.value)


@needs_curl
@pytest.mark.parametrize("url", ["ftp://h/x", "file:///etc/passwd", "no-scheme", "s3://bucket-without-key"])
def test_bad_urls(url):
    with pytest.raises(ValueError):
        RemoteFile.open(url, nbytes=10)


def test_s3_url_needs_a_known_scheme():
    with pytest.raises(ValueError, match="Unsupported protocol"):
        RemoteFile.open_s3_url("ftp://h/x")


@needs_curl
@pytest.mark.parametrize("url, kind", [
    ("https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIDSECRET&X-Amz-Signature=hunter2", RemoteEndpointType.S3),
    ("http://user:hunter2@127.0.0.1:1/x", RemoteEndpointType.S3),
    ("ftp://user:hunter2@h/x?AKIDSECRET", RemoteEndpointType.AUTO),
])
def test_open_errors_have_no_secrets(url, kind):
    with pytest.raises(ValueError) as info:
        RemoteFile(url, kind, 10)
    assert "hunter2" not in str(info.value) and "AKIDSECRET" not in str(info.value)


@needs_curl
def test_s3_without_credentials():
    with pytest.raises(ValueError, match="AWS_ACCESS_KEY_ID"):
        RemoteFile.open_s3("bucket", "key", nbytes=10)


@pytest.mark.parametrize("kwargs, error", [
    ({"nbytes": -1}, ValueError), ({"nbytes": "10"}, TypeError), ({"remote_endpoint_type": 6}, ValueError),
    ({"aws_region": 5}, TypeError), ({"url": None}, TypeError), ({"url": "http://h/\0x"}, ValueError),
])
def test_bad_arguments(kwargs, error):
    args = {"url": "http://127.0.0.1:1/x", **kwargs}
    with pytest.raises(error):
        RemoteFile(args.pop("url"), **args)


@needs_curl
def test_opening_with_nbytes_sends_nothing():
    """With the size given, open needs no server: nothing listens on the port."""
    with RemoteFile.open_http(f"http://127.0.0.1:{free_port()}/x", nbytes=12345) as f:
        assert f.nbytes() == 12345
        assert f.remote_endpoint_type() is RemoteEndpointType.HTTP
        assert f.read(bytearray(0)) == 0
        assert f.read(bytearray(10), size=0, file_offset=12345) == 0  # at the end: no request


@needs_curl
def test_closed_file():
    f = RemoteFile.open_http("http://127.0.0.1:1/x", nbytes=100)
    assert not f.closed
    f.close()
    f.close()  # twice: nothing
    assert f.closed
    assert "closed" in repr(f)
    for call in (f.nbytes, f.url, f.remote_endpoint_type, lambda: f.read(bytearray(10)),
                 lambda: f.pread(bytearray(10)), f.__enter__):
        with pytest.raises(ValueError, match="closed file"):
            call()


@needs_curl
def test_not_picklable():
    import copy
    import pickle

    f = RemoteFile.open_http("http://127.0.0.1:1/x", nbytes=100)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(f)
    with pytest.raises(TypeError, match="cannot be pickled"):
        copy.copy(f)


@needs_curl
def test_context_manager_closes():
    with RemoteFile.open_http("http://127.0.0.1:1/x", nbytes=100) as f:
        assert not f.closed
    assert f.closed


@needs_curl
def test_buffer_checks():
    f = RemoteFile.open_http("http://127.0.0.1:1/x", nbytes=100)
    with pytest.raises(TypeError, match="read-only"):
        f.read(b"0123456789")
    with pytest.raises(ValueError, match="larger than the buffer"):
        f.read(bytearray(10), size=11)
    with pytest.raises(ValueError, match="must not be negative"):
        f.read(bytearray(10), file_offset=-1)
    with pytest.raises(ValueError, match="task_size must be positive"):
        f.pread(bytearray(10), task_size=0)
    with pytest.raises(TypeError, match="not a buffer"):
        f.read(object())


@needs_curl
def test_repr_names_the_url_without_secrets():
    f = RemoteFile.open_http("http://someone:hunter2@127.0.0.1:1/dir/x?token=abc", nbytes=7)
    assert f.url() == "http://127.0.0.1:1/dir/x"
    assert repr(f) == "<kvik.RemoteFile HTTP 'http://127.0.0.1:1/dir/x' nbytes=7>"
    assert str(f) == repr(f)


@needs_curl
def test_connection_refused():
    with defaults.set(FAST), pytest.raises(ConnectionRefusedError) as info:
        RemoteFile.open_http(f"http://127.0.0.1:{free_port()}/x")
    assert info.value.errno == errno.ECONNREFUSED


@needs_curl
def test_connection_refused_on_read():
    f = RemoteFile.open_http(f"http://127.0.0.1:{free_port()}/x", nbytes=100)
    with defaults.set(FAST), pytest.raises(ConnectionRefusedError):
        f.read(bytearray(100))
    with defaults.set(FAST), pytest.raises(ConnectionRefusedError):
        f.pread(bytearray(100)).get()


@needs_curl
@pytest.mark.skipif(cupy is None, reason="needs CuPy and a GPU")
def test_empty_device_buffer_first():
    """Reading into an empty CuPy array before CuPy has made a context: nothing to read, 0."""
    code = ("import cupy, kvik\n"
            "f = kvik.RemoteFile.open_http('http://127.0.0.1:1/x', nbytes=10)\n"
            "print(f.read(cupy.zeros(0, dtype=cupy.uint8)))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(kvik.__file__).parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stderr


# ---- HTTP (nginx) -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_http_whole(web, data, xp, name):
    with RemoteFile.open_http(f"{web}/{name}") as f:
        assert f.nbytes() == len(data[name])
        assert f.remote_endpoint_type() is RemoteEndpointType.HTTP
        assert f.url() == f"{web}/{name}"
        check_read(f, data[name], xp)


def test_http_random_ranges(web, data, xp, rng):
    with RemoteFile.open(f"{web}/medium") as f:  # AUTO
        assert f.remote_endpoint_type() is RemoteEndpointType.HTTP
        check_random_ranges(f, data["medium"], xp, rng, count=12)


def test_http_small_tasks(web, data, rng):
    """Many requests in flight on the pool, on connections kept alive."""
    with RemoteFile.open_http(f"{web}/medium") as f:
        buf = numpy.empty(f.nbytes(), dtype=numpy.uint8)
        assert f.read(buf, task_size=65536) == len(data["medium"])
        assert buf.tobytes() == data["medium"]
        assert f.pread(buf, size=1000, file_offset=77, task_size=100).get() == 1000
        assert buf[:1000].tobytes() == data["medium"][77:1077]


def test_http_preads_at_once(web, data, xp, rng):
    expected = data["large"]
    with RemoteFile.open_http(f"{web}/large") as f:
        offsets = [int(rng.integers(0, len(expected))) for _ in range(6)]
        spans = [(o, min(int(rng.integers(1, 6 << 20)), len(expected) - o)) for o in offsets]
        bufs = [xp.empty(size, dtype=xp.uint8) for _, size in spans]
        futures = [f.pread(buf, file_offset=offset) for buf, (offset, _) in zip(bufs, spans)]
        for future, buf, (offset, size) in zip(futures, bufs, spans):
            want = expected[offset:offset + size]
            assert future.get() == len(want)
            assert future.done()
            assert to_host(buf[:len(want)]).tobytes() == want


def test_http_past_the_end(web, data, xp):
    expected = data["small"]
    with RemoteFile.open_http(f"{web}/small") as f:
        buf = xp.zeros(100, dtype=xp.uint8)
        assert f.read(buf, size=10, file_offset=len(expected) - 10) == 10
        assert to_host(buf[:10]).tobytes() == expected[-10:]
        assert f.read(buf, size=0, file_offset=len(expected)) == 0
        for offset in (len(expected) - 10, len(expected), len(expected) + 1000):
            with pytest.raises(ValueError, match="cannot read"):
                f.read(buf, file_offset=offset)
        with pytest.raises(ValueError, match="cannot read"):
            f.pread(buf, file_offset=len(expected) - 1)


def test_http_size_argument(web, data, xp):
    with RemoteFile.open_http(f"{web}/medium") as f:
        buf = xp.zeros(1000, dtype=xp.uint8)
        assert f.read(buf, 300, 5000) == 300
        assert to_host(buf[:300]).tobytes() == data["medium"][5000:5300]
        assert not to_host(buf[300:]).any()


def test_nbytes_given_skips_the_size_request(fault, data):
    with RemoteFile.open_http(f"{fault}/ok/small", nbytes=len(data["small"])) as f:
        assert take_requests(fault) == 0
        check_read(f, data["small"], numpy)
        assert take_requests(fault) == 1
    with RemoteFile.open(f"{fault}/ok/small"):
        assert take_requests(fault) == 1  # HEAD


def test_allow_list_on_a_server(web, data):
    url = f"{web}/small"
    with pytest.raises(ValueError, match="allow_list"):
        RemoteFile.open(url, allow_list=[RemoteEndpointType.S3, RemoteEndpointType.WEBHDFS])
    with pytest.raises(ValueError, match="allow_list"):
        RemoteFile.open(url, RemoteEndpointType.HTTP, allow_list=[RemoteEndpointType.S3_PRESIGNED_URL])
    with RemoteFile.open(url, allow_list=[RemoteEndpointType.WEBHDFS, RemoteEndpointType.HTTP]) as f:
        assert f.remote_endpoint_type() is RemoteEndpointType.HTTP
        check_read(f, data["small"], numpy)


def test_missing_file(web):
    with pytest.raises(kvik.KvikError) as info:
        RemoteFile.open_http(f"{web}/nothere")
    assert (info.value.http_status, info.value.name, info.value.code) == (404, "HTTP_404", -7404)
    assert f"{web}/nothere" in str(info.value)


def test_future_keeps_file_and_buffer(web, data):
    """Dropping the file and the buffer (a view of `out`) while the read runs: the future holds
    both until it is done."""
    f = RemoteFile.open_http(f"{web}/large")
    out = numpy.empty(f.nbytes(), dtype=numpy.uint8)
    view = out[:]
    future = f.pread(view)
    file_ref, view_ref = weakref.ref(f), weakref.ref(view)
    del f, view
    assert file_ref() is not None and view_ref() is not None
    assert future.get() == len(data["large"])
    assert view_ref() is None  # released once the read is done
    assert out.tobytes() == data["large"]
    del future
    assert file_ref() is None


def test_reads_from_threads(web, data):
    """The GIL is released while reads run: threads read at once, each its own range."""
    expected = data["large"]
    errors = []
    with RemoteFile.open_http(f"{web}/large") as f:
        def reader(k):
            try:
                offset = k * (3 << 20) + k
                buf = numpy.empty(3 << 20, dtype=numpy.uint8)
                for _ in range(3):
                    assert f.read(buf, file_offset=offset) == len(buf)
                    assert buf.tobytes() == expected[offset:offset + len(buf)]
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=reader, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors, errors


def test_close_waits_for_reads(web, data):
    f = RemoteFile.open_http(f"{web}/large")
    buf = numpy.empty(f.nbytes(), dtype=numpy.uint8)
    future = f.pread(buf)
    f.close()
    assert future.done()
    assert future.get() == len(data["large"]) and buf.tobytes() == data["large"]


# ---- TLS ----------------------------------------------------------------------------------------


def test_https(servers, data, xp, rng, monkeypatch):
    """nginx over TLS, its self-signed certificate trusted through CURL_CA_BUNDLE, read at open."""
    url, ca = need(servers, "KVIK_TEST_NGINX_HTTPS_URL", "KVIK_TEST_TLS_CA")
    monkeypatch.setenv("CURL_CA_BUNDLE", ca)
    with RemoteFile.open(f"{url}/medium") as f:
        assert f.remote_endpoint_type() is RemoteEndpointType.HTTP
        check_read(f, data["medium"], xp)
        check_random_ranges(f, data["medium"], xp, rng, count=4)
    monkeypatch.delenv("CURL_CA_BUNDLE")
    monkeypatch.setenv("SSL_CERT_FILE", ca)
    with RemoteFile.open_http(f"{url}/small") as f:
        check_read(f, data["small"], numpy)


def test_https_untrusted(servers):
    """Without its certificate trusted, the self-signed server is refused: KVIK_ETLS, not retried."""
    url = need(servers, "KVIK_TEST_NGINX_HTTPS_URL")
    with pytest.raises(kvik.KvikError) as info:
        RemoteFile.open_http(f"{url}/small")
    assert info.value.name == "KVIK_ETLS" and info.value.http_status is None
    assert "gave up" not in str(info.value)


# ---- S3 -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_s3_objects(s3, bucket, data, name):
    with RemoteFile.open_s3(bucket, name, **s3) as f:
        assert f.nbytes() == len(data[name])
        assert f.remote_endpoint_type() is RemoteEndpointType.S3
        assert f.url() == f"{s3['aws_endpoint_url']}/{bucket}/{name}"
        check_read(f, data[name], numpy)


def test_s3_ranges(s3, bucket, data, xp, rng):
    with RemoteFile.open_s3_url(f"s3://{bucket}/medium", **s3) as f:
        check_random_ranges(f, data["medium"], xp, rng)
        futures = [(f.pread(buf, file_offset=o), buf, o) for buf, o in
                   ((xp.empty(1 << 20, dtype=xp.uint8), int(rng.integers(0, 4 << 20))) for _ in range(4))]
        for future, buf, offset in futures:
            assert future.get() == len(buf)
            assert to_host(buf).tobytes() == data["medium"][offset:offset + len(buf)]


def test_s3_credentials_from_environment(s3, bucket, data, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3["aws_access_key_id"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3["aws_secret_access_key"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", s3["aws_region"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3["aws_endpoint_url"])
    with RemoteFile.open_s3_url(f"s3://{bucket}/small") as f:
        check_read(f, data["small"], numpy)
    with RemoteFile.open_s3(bucket, "medium") as f:
        check_read(f, data["medium"], numpy, 12345, 100000)
    with RemoteFile.open(f"s3://{bucket}/small") as f:  # AUTO: s3:// is S3
        assert f.remote_endpoint_type() is RemoteEndpointType.S3
        check_read(f, data["small"], numpy)


def test_s3_keyword_arguments_beat_environment(s3, bucket, data, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAWRONGWRONGWRONG0")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    with RemoteFile.open_s3(bucket, "small", **s3) as f:
        check_read(f, data["small"], numpy)


def test_s3_http_url(s3, bucket, data):
    """An http(s) URL of the object, opened as S3: the requests are signed."""
    url = f"{s3['aws_endpoint_url']}/{bucket}/small"
    with RemoteFile.open_s3_url(url, **s3) as f:
        assert f.remote_endpoint_type() is RemoteEndpointType.S3
        check_read(f, data["small"], numpy)
    with pytest.raises(kvik.KvikError) as info:  # the same URL unsigned
        RemoteFile.open_http(url)
    assert info.value.http_status == 403


def test_s3_wrong_secret(s3, bucket):
    secret = s3["aws_secret_access_key"]
    wrong = dict(s3, aws_secret_access_key=secret[:-4] + "XXXX")
    with pytest.raises(kvik.KvikError) as info:
        RemoteFile.open_s3(bucket, "small", **wrong)
    assert (info.value.http_status, info.value.name) == (403, "HTTP_403")
    with RemoteFile.open_s3(bucket, "small", nbytes=1000, **wrong) as f:
        with pytest.raises(kvik.KvikError) as read_info:
            f.read(bytearray(1000))
    for error in (info.value, read_info.value):
        assert error.http_status == 403
        for text in (str(error), repr(error), repr(error.args)):
            assert secret[:-4] not in text and s3["aws_access_key_id"] not in text


def test_s3_missing_object(s3, bucket):
    with pytest.raises(kvik.KvikError) as info:
        RemoteFile.open_s3(bucket, "nothere", **s3)
    assert (info.value.http_status, info.value.name) == (404, "HTTP_404")
    assert s3["aws_secret_access_key"] not in str(info.value)


def test_s3_session_token_is_sent(s3, bucket):
    """A token the server does not know is refused: it reached the server, signed."""
    with pytest.raises(kvik.KvikError) as info:
        RemoteFile.open_s3(bucket, "small", aws_session_token="FwoGZXIvYXdzEXAMPLETOKEN", **s3)
    assert info.value.http_status in (400, 403)
    assert "EXAMPLETOKEN" not in str(info.value)


def test_s3_public(servers, data, xp, rng):
    endpoint, public_bucket = need(servers, "KVIK_TEST_S3_PUBLIC_ENDPOINT", "KVIK_TEST_S3_PUBLIC_BUCKET")
    with RemoteFile.open_s3_public(f"s3://{public_bucket}/large", aws_endpoint_url=endpoint) as f:
        assert f.remote_endpoint_type() is RemoteEndpointType.S3_PUBLIC
        assert f.nbytes() == len(data["large"])
        check_read(f, data["large"], numpy)
        check_random_ranges(f, data["large"], xp, rng, count=4)
    with RemoteFile.open_s3_public(f"{endpoint}/{public_bucket}/small") as f:  # an http URL
        check_read(f, data["small"], numpy)
    with RemoteFile.open(f"s3://{public_bucket}/small", RemoteEndpointType.S3_PUBLIC,
                         aws_endpoint_url=endpoint) as f:
        check_read(f, data["small"], numpy)


def test_s3_public_refused(servers, bucket):
    endpoint = need(servers, "KVIK_TEST_S3_PUBLIC_ENDPOINT")
    with pytest.raises(kvik.KvikError) as info:  # the private bucket, anonymously
        RemoteFile.open_s3_public(f"s3://{bucket}/small", aws_endpoint_url=endpoint)
    assert info.value.http_status == 403


def test_s3_presigned(servers, data, xp, rng):
    url = need(servers, "KVIK_TEST_S3_PRESIGNED_URL")
    with RemoteFile.open_s3_presigned_url(url) as f:
        assert f.remote_endpoint_type() is RemoteEndpointType.S3_PRESIGNED_URL
        assert f.nbytes() == len(data["medium"])
        assert "?" not in f.url() and "Signature" not in repr(f)
        check_read(f, data["medium"], xp)
        check_random_ranges(f, data["medium"], xp, rng, count=4)
    with RemoteFile.open(url) as f:  # AUTO
        assert f.remote_endpoint_type() is RemoteEndpointType.S3_PRESIGNED_URL
        check_read(f, data["medium"], numpy, 100, 1000)


def test_s3_presigned_tampered(servers):
    url = need(servers, "KVIK_TEST_S3_PRESIGNED_URL")
    at = url.index("X-Amz-Signature=") + len("X-Amz-Signature=")
    signature = url[at:at + 64]
    tampered = url[:at] + ("0" if url[at] != "0" else "1") + url[at + 1:]
    with pytest.raises(kvik.KvikError) as info:
        RemoteFile.open_s3_presigned_url(tampered)
    assert info.value.http_status == 403
    assert "X-Amz" not in str(info.value) and signature[1:] not in str(info.value)


def test_verbose_trace_has_no_credentials(s3, bucket):
    """remote_verbose traces every request on stderr, without what could carry a secret."""
    code = ("import kvik, sys\n"
            "kvik.defaults.set('remote_verbose', True)\n"
            f"f = kvik.RemoteFile.open_s3({bucket!r}, 'small', **{s3!r})\n"
            "f.read(bytearray(1000))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(kvik.__file__).parents[1]),
                                                       os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "kvik remote: > HEAD" in done.stderr and "kvik remote: > GET" in done.stderr
    assert s3["aws_secret_access_key"] not in done.stderr and s3["aws_access_key_id"] not in done.stderr


# ---- WebHDFS ------------------------------------------------------------------------------------


def test_webhdfs(servers, data, xp, rng):
    url = need(servers, "KVIK_TEST_WEBHDFS_URL")
    fault = need(servers, "KVIK_TEST_FAULT_URL")
    control(fault, "_reset")
    with RemoteFile.open_webhdfs(f"{url}/medium", user="alice") as f:
        assert f.remote_endpoint_type() is RemoteEndpointType.WEBHDFS
        assert f.nbytes() == len(data["medium"])
        check_read(f, data["medium"], xp)
        check_random_ranges(f, data["medium"], xp, rng, count=6)
    assert control(fault, "_webhdfs_users") == "alice"


def test_webhdfs_user_from_url_and_auto(servers, data):
    url = need(servers, "KVIK_TEST_WEBHDFS_URL")
    fault = need(servers, "KVIK_TEST_FAULT_URL")
    control(fault, "_reset")
    with RemoteFile.open(f"{url}/small?user.name=bob") as f:  # AUTO
        assert f.remote_endpoint_type() is RemoteEndpointType.WEBHDFS
        assert "bob" not in f.url()
        check_read(f, data["small"], numpy)
    with RemoteFile.open(f"{url}/empty", user="carol") as f:
        assert f.nbytes() == 0
        check_read(f, data["empty"], numpy)
    assert control(fault, "_webhdfs_users") == "bob,carol"


def test_webhdfs_missing(servers):
    url = need(servers, "KVIK_TEST_WEBHDFS_URL")
    with pytest.raises(kvik.KvikError) as info:
        RemoteFile.open_webhdfs(f"{url}/nothere")
    assert info.value.http_status == 404


# ---- faults -------------------------------------------------------------------------------------


def test_flaky_server_is_retried(fault, data):
    with defaults.set({"http_max_attempts": 3, "http_timeout": 1}):
        with RemoteFile.open_http(f"{fault}/flaky-2/small") as f:  # HEAD: 503, 503, 200
            check_read(f, data["small"], numpy)  # GET: 503, 503, 206
    assert take_requests(fault) == 6


def test_flaky_server_gives_up(fault):
    with defaults.set({"http_max_attempts": 2, "http_timeout": 1}):
        with pytest.raises(kvik.KvikError, match=r"maximum number of attempts \(2\)") as info:
            RemoteFile.open_http(f"{fault}/flaky-2/small")
        assert take_requests(fault) == 2
        f = RemoteFile.open_http(f"{fault}/flaky-2/small", nbytes=1000)
        with pytest.raises(kvik.KvikError) as read_info:
            f.read(bytearray(1000))
    for error in (info.value, read_info.value):
        assert (error.http_status, error.name) == (503, "HTTP_503")


def test_status_codes_setting(fault):
    """Only the statuses of http_status_codes are tried again."""
    with defaults.set({"http_max_attempts": 3, "http_timeout": 1, "http_status_codes": [404]}):
        with pytest.raises(kvik.KvikError):
            RemoteFile.open_http(f"{fault}/status-404/small")
        assert take_requests(fault) == 3
        with pytest.raises(kvik.KvikError) as info:
            RemoteFile.open_http(f"{fault}/flaky-1/small")  # 503 is not in the list now
        assert info.value.http_status == 503
        assert take_requests(fault) == 1


@pytest.mark.parametrize("status", [403, 404, 500, 416])
def test_error_statuses(fault, status):
    with defaults.set(FAST):
        with pytest.raises(kvik.KvikError) as info:
            RemoteFile.open_http(f"{fault}/status-{status}/small")
        f = RemoteFile.open_http(f"{fault}/status-{status}/small", nbytes=1000)
        with pytest.raises(kvik.KvikError) as read_info:
            f.pread(bytearray(1000)).get()
    for error in (info.value, read_info.value):
        assert (error.http_status, error.name, error.code) == (status, f"HTTP_{status}", -7000 - status)
        assert f"HTTP {status}" in str(error)


def test_slow_server_times_out(fault):
    with defaults.set(FAST):
        f = RemoteFile.open_http(f"{fault}/slow-3/small")  # HEAD answers at once
        with pytest.raises(TimeoutError) as info:
            f.read(bytearray(1000))
    assert info.value.errno == errno.ETIMEDOUT
    assert "slow-3/small" in str(info.value)


@pytest.mark.parametrize("mode, name", [
    ("truncate", "KVIK_EREMOTE_SHORT"), ("short", "KVIK_EREMOTE_SHORT"), ("oversize", "KVIK_EREMOTE_LONG"),
    ("norange", "KVIK_ERANGE_IGNORED"), ("shifted", "KVIK_ERANGE_MISMATCH"),
    ("badtotal", "KVIK_ERANGE_MISMATCH"), ("nocontentrange", "KVIK_ERANGE_MISMATCH"),
    ("garbledrange", "KVIK_ERANGE_MISMATCH"),
])
def test_bad_bodies(fault, data, mode, name):
    with defaults.set(FAST):
        with RemoteFile.open_http(f"{fault}/{mode}/medium") as f:
            assert f.nbytes() == len(data["medium"])
            with pytest.raises(kvik.KvikError) as info:
                f.read(numpy.empty(100000, dtype=numpy.uint8), file_offset=1000)
    assert info.value.name == name and info.value.http_status is None


def test_dropped_connection(fault):
    with defaults.set(FAST):
        with RemoteFile.open_http(f"{fault}/drop/small") as f:
            with pytest.raises(ConnectionResetError) as info:
                f.read(bytearray(1000))
    assert info.value.errno == errno.ECONNRESET


def test_fault_server_ok(fault, data, xp, rng):
    with RemoteFile.open_http(f"{fault}/ok/medium") as f:
        check_random_ranges(f, data["medium"], xp, rng, count=4)
