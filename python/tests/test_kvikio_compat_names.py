"""kvikio 26.10's names and modules, under `import kvik as kvikio` (issue 26, "Names and modules
that are missing"). Each test states the behaviour it checks in its name and first line."""
import os
import subprocess
import sys
import urllib.error
import urllib.request
import warnings
from http.server import SimpleHTTPRequestHandler

import numpy
import pytest

import kvik
import kvik.benchmarks
import kvik.buffer
import kvik.cufile
import kvik.numpy
import kvik.remote_file
import kvik.stream
import kvik.utils
from kvik import RemoteEndpointType
from kvik.utils import LocalHttpServer

needs_curl = pytest.mark.skipif(not kvik.is_remote_file_available(),
                                reason="kvik built without remote files (libcurl)")


def run_fresh(code):
    """Run `code` in a new interpreter, where no other test has imported anything yet."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# ---- top level ------------------------------------------------------------------------------


def test_top_level_has_kvikio_names():
    """Every name of kvikio 26.10's top level is there, and is the submodules' object."""
    assert kvik.bounce_buffer_free is kvik.buffer.bounce_buffer_free
    assert kvik.memory_register is kvik.buffer.memory_register
    assert kvik.memory_deregister is kvik.buffer.memory_deregister
    assert kvik.stream_register is kvik.stream.stream_register
    assert kvik.stream_deregister is kvik.stream.stream_deregister
    assert kvik.clear_page_cache is kvik.cufile.clear_page_cache
    assert kvik.drop_system_page_cache is kvik.cufile.drop_system_page_cache
    assert kvik.drop_file_page_cache is kvik.cufile.drop_file_page_cache
    assert kvik.get_page_cache_info is kvik.cufile.get_page_cache_info
    assert kvik.infer_remote_endpoint_type is kvik.remote_file.infer_remote_endpoint_type
    assert kvik.RemoteEndpointType is kvik.remote_file.RemoteEndpointType
    assert kvik.kvikio_deprecation_notice is kvik.utils.kvikio_deprecation_notice
    for name in kvik.__all__:
        assert hasattr(kvik, name), name


def test_git_commit_is_a_string():
    """__git_commit__ is a str, as in a kvikio built from source."""
    assert isinstance(kvik.__git_commit__, str)


def test_submodules_after_bare_import():
    """buffer, stream, utils, numcodecs and benchmarks are attributes after `import kvik`; the
    ones with heavy imports (numcodecs, and the HTTP server of utils) load only when used."""
    run_fresh(
        "import sys, kvik\n"
        "assert callable(kvik.buffer.bounce_buffer_free)\n"
        "assert callable(kvik.stream.stream_register)\n"
        "assert callable(kvik.utils.call_once)\n"
        "assert kvik.benchmarks.__name__ == 'kvik.benchmarks'\n"
        "heavy = {'numcodecs', 'http.server', 'multiprocessing'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
        "assert {'buffer', 'stream', 'utils', 'numcodecs', 'benchmarks'} <= set(dir(kvik))\n"
    )


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


def test_local_http_server_starts_under_warnings_as_errors(served):
    """A suite that turns warnings into errors (kvikio's does) can start the server in a process
    that has threads: the warning of Python 3.12 and later about fork() in such a process is not
    raised."""
    root, data = served
    import threading

    ready, done = threading.Event(), threading.Event()
    thread = threading.Thread(target=lambda: (ready.set(), done.wait()))
    thread.start()
    ready.wait()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with LocalHttpServer(root, max_lifetime=30) as server:
                assert get(f"{server.url}/a.bin", "bytes=0-9")[:2] == (206, data[:10])
    finally:
        done.set()
        thread.join()


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


# ---- kvik.buffer and kvik.stream ------------------------------------------------------------


def test_buffer_module(tmp_path):
    """kvik.buffer: host memory registers as a no-op; bounce_buffer_free returns the bytes it
    freed (an int >= 0), and IO goes on working after it."""
    a = numpy.arange(1000, dtype="u1")
    kvik.buffer.memory_register(a)
    kvik.buffer.memory_deregister(a)
    assert isinstance(kvik.buffer.bounce_buffer_free(), int)
    assert kvik.bounce_buffer_free() >= 0
    with kvik.CuFile(tmp_path / "f", "w+") as f:
        assert f.write(a) == a.nbytes
        b = numpy.empty_like(a)
        assert f.read(b) == a.nbytes
    assert (a == b).all()


def test_stream_register_without_cufile():
    """kvik.stream: stream_register(stream, flags) and stream_deregister(stream) do nothing in
    compat mode, for an int stream and None (the default stream)."""
    with kvik.defaults.set("compat_mode", kvik.CompatMode.ON):
        for stream in (0, None):
            assert kvik.stream.stream_register(stream, 0) is None
            assert kvik.stream.stream_deregister(stream) is None


def test_stream_register_bad_arguments():
    """A stream that is no stream raises TypeError; flags are required, as in kvikio."""
    with pytest.raises(TypeError, match="stream must be"):
        kvik.stream_register("not a stream", 0)
    with pytest.raises(TypeError):
        kvik.stream_register(0)


# ---- kvik.numcodecs, kvik.benchmarks --------------------------------------------------------


def test_numcodecs_cuda_codec():
    """kvik.numcodecs.CudaCodec is an abstract numcodecs Codec with encode and decode."""
    numcodecs_abc = pytest.importorskip("numcodecs.abc")
    import kvik.numcodecs

    assert issubclass(kvik.numcodecs.CudaCodec, numcodecs_abc.Codec)
    assert {"encode", "decode"} <= kvik.numcodecs.CudaCodec.__abstractmethods__
    with pytest.raises(TypeError):
        kvik.numcodecs.CudaCodec()


def test_benchmarks_module():
    """kvik.benchmarks imports, and says where kvik's benchmarks are."""
    assert "kvik bench" in kvik.benchmarks.__doc__


# ---- remote endpoint types ------------------------------------------------------------------


@pytest.mark.parametrize("url, expected", [
    ("s3://bucket-name/object-key-name", RemoteEndpointType.S3),
    ("https://host:1234/webhdfs/v1/data.bin", RemoteEndpointType.WEBHDFS),
    ("https://example.com/path/file.bin", RemoteEndpointType.HTTP),
    ("http://example.com/a", RemoteEndpointType.HTTP),
    ("https://bucket-name.s3.region-code.amazonaws.com/object-key-name", RemoteEndpointType.S3),
    ("https://bucket-name.s3.region-code.amazonaws.com/object-key-name?X-Amz-Algorithm="
     "AWS4-HMAC-SHA256&X-Amz-Signature=sig&X-Amz-Credential=cred&X-Amz-SignedHeaders=host",
     RemoteEndpointType.S3_PRESIGNED_URL),
])
def test_infer_remote_endpoint_type(url, expected):
    """infer_remote_endpoint_type gives the type AUTO opens the URL as."""
    assert kvik.infer_remote_endpoint_type(url) == expected


def test_infer_remote_endpoint_type_errors():
    """A URL without a scheme raises RuntimeError 'Bad scheme'; an unknown scheme raises
    RuntimeError 'Unsupported endpoint URL'."""
    with pytest.raises(RuntimeError, match="Bad scheme"):
        kvik.infer_remote_endpoint_type("example.com/path")
    with pytest.raises(RuntimeError, match="Unsupported endpoint URL"):
        kvik.infer_remote_endpoint_type("unsupported://example.com/path")


# ---- kvik.cufile ----------------------------------------------------------------------------


def test_cufile_page_cache_names(tmp_path):
    """kvik.cufile has get_page_cache_info and drop_file_page_cache, which work on a file."""
    path = tmp_path / "f"
    path.write_bytes(bytes(3 * 4096))
    kvik.cufile.drop_file_page_cache(path)
    resident, total = kvik.cufile.get_page_cache_info(path)
    assert total == 3 and 0 <= resident <= total


@pytest.fixture
def no_system_drop(monkeypatch):
    """drop_system_page_cache's ways in, recorded instead of run: sync, the /proc file (refused,
    as to a user) and sudo (exit status `sudo_status`)."""
    calls = []
    monkeypatch.setattr(kvik.cufile.os, "sync", lambda: calls.append("sync"))

    def refuse(path, mode="r"):
        calls.append(("open", path))
        raise PermissionError(13, "Permission denied", path)

    class Run:
        sudo_status = 1

        def __call__(self, argv, **kwargs):
            calls.append(tuple(argv))
            return subprocess.CompletedProcess(argv, self.sudo_status)

    run = Run()
    monkeypatch.setattr(kvik.cufile, "open", refuse, raising=False)
    monkeypatch.setattr(kvik.cufile.subprocess, "run", run)
    return calls, run


def test_drop_system_page_cache_levels(no_system_drop):
    """drop_system_page_cache syncs first, tries /proc/sys/vm/drop_caches, then sudo -n sysctl
    with level 3 (or 1 without dentries and inodes), and returns whether one worked."""
    calls, run = no_system_drop
    assert kvik.drop_system_page_cache() is False
    assert calls == ["sync", ("open", "/proc/sys/vm/drop_caches"),
                     ("sudo", "-n", "/sbin/sysctl", "vm.drop_caches=3")]
    calls.clear()
    run.sudo_status = 0
    assert kvik.drop_system_page_cache(reclaim_dentries_and_inodes=False, sync_first=False) is True
    assert calls == [("open", "/proc/sys/vm/drop_caches"),
                     ("sudo", "-n", "/sbin/sysctl", "vm.drop_caches=1")]


def test_clear_page_cache_is_deprecated(no_system_drop):
    """clear_page_cache warns FutureWarning (since 26.04) and does drop_system_page_cache."""
    calls, run = no_system_drop
    run.sudo_status = 0
    with pytest.warns(FutureWarning, match="drop_system_page_cache"):
        assert kvik.clear_page_cache(reclaim_dentries_and_inodes=False, clear_dirty_pages=False)
    assert calls[-1] == ("sudo", "-n", "/sbin/sysctl", "vm.drop_caches=1")
    assert ".. deprecated:: 26.04" in kvik.clear_page_cache.__doc__


def o_direct_opens(path):
    """Whether Python can open `path` with O_DIRECT (what the file system says)."""
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except OSError:
        return False
    return True


def test_is_direct_io_supported(tmp_path):
    """CuFile.is_direct_io_supported() says whether the file's file system takes O_DIRECT; a
    closed file raises ValueError."""
    path = tmp_path / "f"
    path.write_bytes(bytes(4096))
    f = kvik.CuFile(path, "r")
    assert f.is_direct_io_supported() is o_direct_opens(path)
    f.close()
    with pytest.raises(ValueError, match="closed file"):
        f.is_direct_io_supported()


# ---- kvik.numpy -----------------------------------------------------------------------------


def test_numpy_file_like(tmp_path):
    """kvik.numpy.FileLike: open files are FileLike, paths are not; fromfile and tofile take
    either."""
    path = tmp_path / "a.bin"
    kvik.numpy.tofile(numpy.arange(10), str(path))
    with open(path, "rb") as f:
        assert isinstance(f, kvik.numpy.FileLike)
        assert kvik.numpy.fromfile(f, dtype=int).tolist() == list(range(10))
    assert not isinstance(str(path), kvik.numpy.FileLike)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not isinstance(path, kvik.numpy.FileLike)
