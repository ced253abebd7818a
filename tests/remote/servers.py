#!/usr/bin/env python3
"""Loopback servers for kvik's remote-read tests: nginx, a fault-injecting HTTP server with a
WebHDFS responder, and S3 (moto) that really checks signatures.

    python3 tests/remote/servers.py [--require] -- CMD [ARGS...]   # run CMD with the servers up
    python3 tests/remote/servers.py --selftest                     # check every behaviour

    with RemoteServers() as servers:                               # from pytest
        servers.env["KVIK_TEST_NGINX_URL"], servers.data_dir

README.md (next to this file) lists the environment variables and what each server does.
A server that cannot start is reported on stderr and its variables are left unset, so the tests
for it skip; with --require (or KVIK_TEST_REQUIRE_REMOTE=1) that is an error instead.

nginx runs as its own process. The fault server and moto run in one child process (this file
again, with --python-servers): a test process that calls into C holding the GIL cannot starve
them, and moto's process-wide settings (authentication on) stay out of the caller.
"""
import argparse
import datetime
import hmac
import http.client
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit

MIB = 1 << 20
DATA_FILES = {"empty": 0, "small": 1000, "medium": 5 * MIB + 123, "large": 64 * MIB}
BIG_FILE = "big"  # only with KVIK_TEST_REMOTE_BIG=<bytes>; served by nginx and the fault server
S3_BUCKET = "kvik-test"
S3_PUBLIC_BUCKET = "kvik-public"
S3_REGION = "us-east-1"
ENV_NAMES = (
    "KVIK_TEST_REMOTE_DATA",
    "KVIK_TEST_NGINX_URL",
    "KVIK_TEST_NGINX_HTTPS_URL",
    "KVIK_TEST_TLS_CA",
    "KVIK_TEST_FAULT_URL",
    "KVIK_TEST_WEBHDFS_URL",
    "KVIK_TEST_S3_ENDPOINT",
    "KVIK_TEST_S3_BUCKET",
    "KVIK_TEST_S3_REGION",
    "KVIK_TEST_S3_ACCESS_KEY_ID",
    "KVIK_TEST_S3_SECRET_ACCESS_KEY",
    "KVIK_TEST_S3_PRESIGNED_URL",
    "KVIK_TEST_S3_PUBLIC_ENDPOINT",
    "KVIK_TEST_S3_PUBLIC_BUCKET",
)
STARTUP_TIMEOUT_S = 20


class ServerUnavailable(RuntimeError):
    """A server could not start and the caller required all of them."""


# ---- Data files ---------------------------------------------------------------------------------


def write_data_files(data_dir):
    """The files every server serves; the tests compare what they read with these, byte for byte."""
    rng = random.Random(1234)
    for name, size in DATA_FILES.items():
        with open(os.path.join(data_dir, name), "wb") as f:
            f.write(rng.randbytes(size))
    big = int(os.environ.get("KVIK_TEST_REMOTE_BIG", "0"))
    if big:
        _write_urandom(os.path.join(data_dir, BIG_FILE), big)
    # Readable by whichever user the nginx workers end up as.
    os.chmod(data_dir, 0o755)
    for name in os.listdir(data_dir):
        os.chmod(os.path.join(data_dir, name), 0o644)


def _write_urandom(path, size):
    """A file of `size` random bytes, written in chunks so a GiB does not sit in memory."""
    with open(path, "wb") as f:
        for offset in range(0, size, 16 * MIB):
            f.write(os.urandom(min(16 * MIB, size - offset)))


# ---- nginx --------------------------------------------------------------------------------------


def _free_port():
    """A loopback port nobody holds right now (a server that loses the race retries)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _self_signed_certificate(work_dir):
    """(certificate, key) for 127.0.0.1, made with openssl; None when openssl is missing. The
    certificate is its own CA: a client trusts it only when told to."""
    openssl = shutil.which("openssl")
    if openssl is None:
        return None
    cert, key = os.path.join(work_dir, "tls.crt"), os.path.join(work_dir, "tls.key")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return cert, key


def _nginx_config(work_dir, data_dir, port, tls_port, tls):
    temp_paths = "".join(
        f"    {kind}_temp_path {work_dir}/{kind}_temp;\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    # As root without a `user` line the workers would run as nobody.
    user = "user root;\n" if os.geteuid() == 0 else ""
    tls_lines = (
        f"        listen 127.0.0.1:{tls_port} ssl;\n"
        f"        ssl_certificate {tls[0]};\n        ssl_certificate_key {tls[1]};\n"
        if tls
        else ""
    )
    return (
        f"daemon off;\nmaster_process on;\nworker_processes 2;\n{user}"
        f"pid {work_dir}/nginx.pid;\nerror_log {work_dir}/error.log warn;\n"
        "events { worker_connections 1024; }\n"
        "http {\n"
        "    access_log off;\n    sendfile on;\n    tcp_nopush on;\n"
        "    keepalive_requests 100000;\n    default_type application/octet-stream;\n"
        f"{temp_paths}"
        # reuseport: each worker accepts its own share of the connections, so parallel
        # readers are not all served by one worker.
        f"    server {{\n        listen 127.0.0.1:{port} reuseport;\n        root {data_dir};\n"
        f"{tls_lines}    }}\n"
        "}\n"
    )


def _wait_for_nginx(process, pid_file, url):
    """True once nginx answers at `url`, False if it exits first. It writes its pid file only
    after binding the port, so until then whoever answers there is not nginx."""
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        if os.path.exists(pid_file):
            try:
                urllib.request.urlopen(url, timeout=1).close()
                return True
            except OSError:
                pass
        time.sleep(0.02)
    return False


def start_nginx(work_dir, data_dir):
    """(process, env) of nginx serving `data_dir` over http, and over https where openssl can
    make a certificate; raises ServerUnavailable when it cannot start."""
    binary = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    if binary is None:
        raise ServerUnavailable("nginx is not installed")
    os.makedirs(work_dir)
    tls = _self_signed_certificate(work_dir)
    config = os.path.join(work_dir, "nginx.conf")
    error_log = os.path.join(work_dir, "error.log")
    for _ in range(3):  # another process may take the port between _free_port and nginx's bind
        port, tls_port = _free_port(), _free_port()
        with open(config, "w") as f:
            f.write(_nginx_config(work_dir, data_dir, port, tls_port, tls))
        # -e: the log nginx writes before it has read the config would otherwise be /var/log's.
        process = subprocess.Popen(
            [binary, "-e", error_log, "-p", work_dir, "-c", config], stdin=subprocess.DEVNULL
        )
        url = f"http://127.0.0.1:{port}"
        try:
            answered = _wait_for_nginx(process, os.path.join(work_dir, "nginx.pid"), f"{url}/small")
        except BaseException:  # Ctrl-C or SIGTERM while waiting: only we know this process yet
            stop_process(process, signal.SIGTERM)
            raise
        if answered:
            env = {"KVIK_TEST_NGINX_URL": url}
            if tls:
                env.update(KVIK_TEST_NGINX_HTTPS_URL=f"https://127.0.0.1:{tls_port}", KVIK_TEST_TLS_CA=tls[0])
            return process, env
        stop_process(process, signal.SIGTERM)
        with open(error_log, errors="replace") as f:
            errors = f.read().strip().splitlines() or ["nothing in its error log"]
        if not any("Address already in use" in line for line in errors):
            break
    raise ServerUnavailable(f"nginx did not start: {errors[-1]}")


def stop_process(process, sig):
    """Send `sig` (nginx: SIGTERM is its fast shutdown) and wait; SIGKILL if it lingers."""
    if process.poll() is None:
        process.send_signal(sig)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# ---- Fault server -------------------------------------------------------------------------------


class FaultState:
    """What the tests can ask the fault server about; shared by its handler threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self.reset()

    def reset(self):
        with self._lock:
            self.requests = 0
            self._flaky_seen = {}
            self.webhdfs_users = set()

    def count_request(self):
        with self._lock:
            self.requests += 1

    def flaky_hit(self, key):
        """How many times `key` has been asked for, this request included."""
        with self._lock:
            self._flaky_seen[key] = self._flaky_seen.get(key, 0) + 1
            return self._flaky_seen[key]

    def saw_webhdfs_user(self, name):
        with self._lock:
            self.webhdfs_users.add(name)


class FaultServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, data_dir):
        super().__init__(("127.0.0.1", 0), FaultHandler)
        self.files = {name: os.path.join(data_dir, name) for name in os.listdir(data_dir)}
        self.state = FaultState()
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def handle_error(self, request, client_address):
        # Clients hang up on purpose (timeouts, aborted transfers); anything else is a bug to show.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


# The fault modes, each with the type of the number after its dash, if it takes one.
FAULT_KINDS = {
    "ok": None, "flaky": int, "status": int, "slow": float, "truncate": None, "short": None,
    "oversize": None, "norange": None, "drop": None, "shifted": None, "badtotal": None,
    "nocontentrange": None, "garbledrange": None, "badlength": str, "stall": float,
    "range200": None,
}
OVERSIZE_FILLER = b"\xa5" * 100


def _remote_exception(exception, java_package, message):
    """The JSON body a WebHDFS NameNode sends with an error."""
    return {
        "RemoteException": {
            "exception": exception,
            "javaClassName": f"{java_package}.{exception}",
            "message": message,
        }
    }


def _file_status(size):
    return {
        "FileStatus": {
            "length": size, "type": "FILE", "blockSize": 134217728, "replication": 1,
            "permission": "644", "owner": "kvik", "group": "kvik", "modificationTime": 0,
            "accessTime": 0, "pathSuffix": "", "childrenNum": 0, "fileId": 1, "storagePolicy": 0,
        }
    }


class FaultHandler(BaseHTTPRequestHandler):
    """/<mode>/<name>, /webhdfs/v1/<name>, /webhdfs-datanode/<name> and the /_ control paths."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):
        """Silent: a test run makes thousands of requests."""

    def do_HEAD(self):
        self._route()

    def do_GET(self):
        self._route()

    def do_POST(self):
        if urlsplit(self.path).path == "/_reset":
            self._route()
        else:
            self._send_text(405, "only /_reset takes POST\n")

    # -- routing --

    def _route(self):
        url = urlsplit(self.path)
        state = self.server.state
        if url.path == "/_reset":
            state.reset()
            return self._send_text(200, "reset\n")
        state.count_request()  # every request since the reset, a /_requests one included
        if url.path == "/_requests":
            return self._send_text(200, str(state.requests))
        if url.path == "/_webhdfs_users":
            return self._send_text(200, ",".join(sorted(state.webhdfs_users)))
        query = dict(parse_qsl(url.query))
        prefix, _, name = url.path[1:].partition("/")
        if url.path.startswith("/webhdfs/v1/"):
            return self._webhdfs_namenode(url.path[len("/webhdfs/v1/"):], query)
        if prefix == "webhdfs-datanode":
            return self._webhdfs_datanode(name, query)
        return self._fault(prefix, name)

    def _fault(self, mode, name):
        parsed = _parse_fault_mode(mode)
        path = self.server.files.get(name)
        if path is None or parsed is None:
            return self._send_text(404, f"no {mode}/{name} here\n")
        kind, number = parsed
        if kind == "status":
            return self._send_text(number, f"status {number} as asked\n")
        if kind == "flaky":
            key = (self.command, self.path, self.headers.get("Range"))
            if self.server.state.flaky_hit(key) <= number:
                return self._send_text(503, "flaky: try again\n")
        size = os.path.getsize(path)
        if kind == "badlength" and self.command == "HEAD":
            self.send_response(200)
            self.send_header("Content-Length", number)
            return self.end_headers()
        if self.command == "HEAD":  # other modes answer HEAD correctly: the faults are in bodies
            return self._start(200, size, [("Accept-Ranges", "bytes")])
        if kind == "slow":
            time.sleep(number)
        if kind == "norange":
            return self._send_file(path, 200, 0, size, [])
        if kind == "drop":
            return self._hang_up()
        span = self._requested_span(size)
        if span is None:
            return self._send_text(416, "not satisfiable\n", [("Content-Range", f"bytes */{size}")])
        if kind == "range200":
            return self._send_file(path, 200, span[0], span[1], [])
        return self._send_span(kind, path, size, *span, number)

    def _send_span(self, kind, path, size, start, end, partial, number):
        """Bytes [start, end) of the file (partial: as a 206), as `kind` spoils them."""
        status = 206 if partial else 200
        if kind in ("truncate", "stall"):
            self._start(status, end - start, _content_range(start, end, size, partial))
            self._send_bytes(path, start, (end - start) // 2)
            if kind == "stall" and start > 0:
                time.sleep(number)
            return self._hang_up()
        if kind == "short":
            end = start + (end - start) // 2
            # An empty body has no honest Content-Range; leave it out.
            headers = _content_range(start, end, size, partial and end > start)
            return self._send_file(path, status, start, end, headers)
        if kind == "oversize":
            length = end - start + len(OVERSIZE_FILLER)
            self._start(status, length, _content_range(start, end, size, partial))
            self._send_bytes(path, start, end - start)
            return self.wfile.write(OVERSIZE_FILLER)
        if partial and kind in ("shifted", "badtotal", "nocontentrange", "garbledrange"):
            return self._send_wrong_range(kind, path, size, start, end)
        headers = [("Accept-Ranges", "bytes"), *_content_range(start, end, size, partial)]
        return self._send_file(path, status, start, end, headers)

    def _send_wrong_range(self, kind, path, size, start, end):
        """A 206 of the right length whose Content-Range is wrong: `shifted` sends the bytes one
        further on (one back where the range ends the file; the whole file cannot move) and says
        so; `badtotal` names a size one larger; `nocontentrange` has none; `garbledrange` has
        "bytes=a-b/N"."""
        if kind == "shifted":
            shift = 1 if end < size else -1 if start > 0 else 0
            start, end = start + shift, end + shift
        headers = _content_range(start, end, size + (kind == "badtotal"), True)
        if kind == "nocontentrange":
            headers = []
        elif kind == "garbledrange":
            headers = [("Content-Range", headers[0][1].replace(" ", "=", 1))]
        return self._send_file(path, 206, start, end, headers)

    def _requested_span(self, size):
        """(start, end, partial) for the Range header, or None where it cannot be satisfied.

        A missing or malformed header (or a multi-range one) means the whole file, as RFC 9110
        says a server may answer."""
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "").strip())
        if match is None or match.group(1) == match.group(2) == "":
            return 0, size, False
        first, last = match.group(1), match.group(2)
        if first == "":  # suffix range: the last N bytes
            suffix = int(last)
            return (max(size - suffix, 0), size, True) if suffix and size else None
        start = int(first)
        end = size if last == "" else int(last) + 1
        if end <= start:
            return 0, size, False
        return (start, min(end, size), True) if start < size else None

    # -- WebHDFS --

    def _webhdfs_namenode(self, name, query):
        if "user.name" in query:
            self.server.state.saw_webhdfs_user(query["user.name"])
        path = self.server.files.get(name)
        if path is None:
            return self._webhdfs_not_found(name)
        op = query.get("op", "").upper()
        if op == "GETFILESTATUS":
            return self._send_json(200, _file_status(os.path.getsize(path)))
        if op == "OPEN":
            # As a real NameNode does: the bytes come from a DataNode, here a path on this server.
            redirect = {"op": "OPEN", "offset": query.get("offset", "0")}
            if "length" in query:
                redirect["length"] = query["length"]
            location = f"{self.server.url}/webhdfs-datanode/{name}?{urlencode(redirect)}"
            return self._start(307, 0, [("Location", location)])
        message = f'Invalid value for webhdfs parameter "op": {op}'
        return self._send_json(400, _remote_exception("IllegalArgumentException", "java.lang", message))

    def _webhdfs_datanode(self, name, query):
        path = self.server.files.get(name)
        if path is None:
            return self._webhdfs_not_found(name)
        size = os.path.getsize(path)
        offset = int(query.get("offset", "0"))
        if offset > size:
            # WebHDFS answers an IOException with 403.
            message = f"Offset={offset} out of the range [0, {size}]"
            return self._send_json(403, _remote_exception("IOException", "java.io", message))
        end = min(offset + int(query.get("length", size)), size)
        return self._send_file(path, 200, offset, end, [])

    def _webhdfs_not_found(self, name):
        message = f"File does not exist: /{name}"
        return self._send_json(404, _remote_exception("FileNotFoundException", "java.io", message))

    # -- writing responses --

    def _start(self, status, length, headers):
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()

    def _send_text(self, status, text, headers=()):
        body = text.encode()
        self._start(status, len(body), [("Content-Type", "text/plain"), *headers])
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_json(self, status, document):
        body = json.dumps(document).encode()
        self._start(status, len(body), [("Content-Type", "application/json")])
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_file(self, path, status, start, end, headers):
        self._start(status, end - start, [("Content-Type", "application/octet-stream"), *headers])
        self._send_bytes(path, start, end - start)

    def _send_bytes(self, path, offset, count):
        # socket.sendfile reads to the end of the file for a count of 0.
        if count:
            with open(path, "rb") as f:
                self.connection.sendfile(f, offset, count)

    def _hang_up(self):
        """Close the connection mid-exchange; socketserver then closes the socket. The client
        may have closed it first (`stall`)."""
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _parse_fault_mode(mode):
    """(kind, number) of a mode such as "ok" or "flaky-2"; None where there is no such mode."""
    kind, _, arg = mode.partition("-")
    if kind not in FAULT_KINDS:
        return None
    number_type = FAULT_KINDS[kind]
    if number_type is None:
        return None if arg else (kind, None)
    try:
        return kind, number_type(arg)
    except ValueError:
        return None


def _content_range(start, end, size, partial):
    return [("Content-Range", f"bytes {start}-{end - 1}/{size}")] if partial else []


def start_fault_server(data_dir):
    server = FaultServer(data_dir)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return {"KVIK_TEST_FAULT_URL": server.url, "KVIK_TEST_WEBHDFS_URL": f"{server.url}/webhdfs/v1"}


# ---- S3 (moto) ----------------------------------------------------------------------------------

PRESIGN_PARAMS = (
    "X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders",
    "X-Amz-Signature",
)


class S3Gateway:
    """WSGI middleware in front of moto, which, with authentication on, checks SigV4 Authorization
    headers (key id, signature, IAM policy) but fails with a 500 on a request without one: a
    presigned URL or an anonymous read.

    Here a presigned URL's signature and expiry are checked against the secrets in `keys`, and an
    unsigned request is signed as the `anonymous` key id when there is one (the public endpoint),
    refused with 403 otherwise. Either way moto then checks the signature we made and the key's
    IAM policy, which is what decides what anonymous users may read."""

    def __init__(self, moto_app, keys, anonymous=None):
        self.moto_app = moto_app
        self.keys = keys
        self.anonymous = anonymous

    def __call__(self, environ, start_response):
        if "HTTP_AUTHORIZATION" in environ:
            return self.moto_app(environ, start_response)
        query = environ.get("QUERY_STRING", "")
        params = dict(parse_qsl(query, keep_blank_values=True))
        if "X-Amz-Signature" in params:
            error = self._presigned_error(environ, query, params)
            if error:
                return _s3_error(start_response, *error)
            key_id = params["X-Amz-Credential"].split("/")[0]
            query = "&".join(p for p in query.split("&") if p.split("=")[0] not in PRESIGN_PARAMS)
        elif self.anonymous:
            key_id = self.anonymous
        else:
            return _s3_error(start_response, "AccessDenied", "Anonymous access is not allowed here")
        self._sign(environ, key_id, query)
        return self.moto_app(environ, start_response)

    def _presigned_error(self, environ, query, params):
        """(code, message) of what is wrong with a presigned URL, None if it is good."""
        from botocore.auth import S3SigV4QueryAuth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        try:
            key_id, _, region, service, _ = params["X-Amz-Credential"].split("/")
            signed_at = datetime.datetime.strptime(params["X-Amz-Date"], "%Y%m%dT%H%M%SZ")
            expires = int(params["X-Amz-Expires"])
            signed_headers = params["X-Amz-SignedHeaders"].split(";")
        except (KeyError, ValueError):
            return "AuthorizationQueryParametersError", "Malformed presigned URL"
        if key_id not in self.keys:
            return "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist."
        unsigned_query = "&".join(p for p in query.split("&") if not p.startswith("X-Amz-Signature="))
        request = AWSRequest(
            method=environ["REQUEST_METHOD"],
            url=f"http://{environ['HTTP_HOST']}{_raw_path(environ)}?{unsigned_query}",
            headers={name: environ.get(_environ_key(name), "") for name in signed_headers},
        )
        request.context["timestamp"] = params["X-Amz-Date"]
        auth = S3SigV4QueryAuth(Credentials(key_id, self.keys[key_id]), service, region, expires)
        string_to_sign = auth.string_to_sign(request, auth.canonical_request(request))
        if not hmac.compare_digest(auth.signature(string_to_sign, request), params["X-Amz-Signature"]):
            return "SignatureDoesNotMatch", "The presigned URL's signature does not match."
        if datetime.datetime.utcnow() > signed_at + datetime.timedelta(seconds=expires):
            return "AccessDenied", "Request has expired"
        return None

    def _sign(self, environ, key_id, query):
        """Turn the request into one signed in the Authorization header as `key_id`."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        host = environ["HTTP_HOST"]
        target = _raw_path(environ) + (f"?{query}" if query else "")
        request = AWSRequest(
            method=environ["REQUEST_METHOD"],
            url=f"http://{host}{target}",
            # Without this header moto hashes the wrong payload and refuses the signature.
            headers={"host": host, "x-amz-content-sha256": "UNSIGNED-PAYLOAD"},
        )
        S3SigV4Auth(Credentials(key_id, self.keys[key_id]), "s3", S3_REGION).add_auth(request)
        environ["QUERY_STRING"] = query
        environ["RAW_URI"] = target
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Content-SHA256"):
            environ[_environ_key(name)] = request.headers[name]


def _raw_path(environ):
    """The path as the client sent it, still percent-encoded (what the client signed)."""
    return environ.get("RAW_URI", environ["PATH_INFO"]).split("?", 1)[0]


def _environ_key(header):
    return "HTTP_" + header.upper().replace("-", "_")


def _s3_error(start_response, code, message):
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    ).encode()
    headers = [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))]
    start_response("403 Forbidden", headers)
    return [body]


def _iam_user(iam, name, policy):
    """(key id, secret) of a new IAM user allowed what `policy` allows."""
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName=name, PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def _allow(actions, resources):
    statement = {"Effect": "Allow", "Action": actions, "Resource": resources}
    return {"Version": "2012-10-17", "Statement": [statement]}


def start_s3(data_dir):
    """Authenticated moto with bucket kvik-test, and a public endpoint (the same moto state behind
    another port) where anyone may read bucket kvik-public."""
    import boto3
    from botocore.config import Config
    from moto import settings as moto_settings
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise

    def serve(app):
        server = make_server("127.0.0.1", 0, app, threaded=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.port}"

    def client(service, key_id, secret, **kwargs):
        return boto3.client(
            service, endpoint_url=endpoint, region_name=S3_REGION,
            aws_access_key_id=key_id, aws_secret_access_key=secret, **kwargs,
        )

    # Set up through bare moto while it still takes any credentials, then switch checking on.
    moto_app = DomainDispatcherApplication(create_backend_app)
    server, endpoint = serve(moto_app)
    iam = client("iam", "setup", "setup")
    key_id, secret = _iam_user(iam, "kvik", _allow("s3:*", "*"))
    anonymous_id, anonymous_secret = _iam_user(
        iam, "anonymous", _allow("s3:GetObject", f"arn:aws:s3:::{S3_PUBLIC_BUCKET}/*")
    )
    s3 = client("s3", "setup", "setup")
    for bucket in (S3_BUCKET, S3_PUBLIC_BUCKET):
        s3.create_bucket(Bucket=bucket)
        for name in DATA_FILES:
            with open(os.path.join(data_dir, name), "rb") as f:
                s3.put_object(Bucket=bucket, Key=name, Body=f)
    keys = {key_id: secret, anonymous_id: anonymous_secret}
    server.app = S3Gateway(moto_app, keys)
    moto_settings.INITIAL_NO_AUTH_ACTION_COUNT = 0
    _, public_endpoint = serve(S3Gateway(moto_app, keys, anonymous=anonymous_id))
    signer = client("s3", key_id, secret, config=Config(signature_version="s3v4"))
    return {
        "KVIK_TEST_S3_ENDPOINT": endpoint,
        "KVIK_TEST_S3_BUCKET": S3_BUCKET,
        "KVIK_TEST_S3_REGION": S3_REGION,
        "KVIK_TEST_S3_ACCESS_KEY_ID": key_id,
        "KVIK_TEST_S3_SECRET_ACCESS_KEY": secret,
        "KVIK_TEST_S3_PRESIGNED_URL": signer.generate_presigned_url(
            "get_object", Params={"Bucket": S3_BUCKET, "Key": "medium"}, ExpiresIn=3600
        ),
        "KVIK_TEST_S3_PUBLIC_ENDPOINT": public_endpoint,
        "KVIK_TEST_S3_PUBLIC_BUCKET": S3_PUBLIC_BUCKET,
    }


# ---- The child process that runs the Python servers ---------------------------------------------


def python_servers_main(data_dir):
    """Start the fault server and moto, write {"env", "problems"} as one JSON line, and serve until
    stdin closes (the parent stops us that way, and a parent that dies closes it too)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which then stops us
    env = start_fault_server(data_dir)
    problems = []
    try:
        env.update(start_s3(data_dir))
    except Exception as e:  # moto missing or failing: S3 tests skip, the rest still run
        problems.append(f"S3 (moto) not started, KVIK_TEST_S3_* unset: {type(e).__name__}: {e}")
    print(json.dumps({"env": env, "problems": problems}), flush=True)
    sys.stdin.read()


def start_python_servers(data_dir):
    """The child running the fault server and moto; python_servers_handshake says what started."""
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--python-servers", data_dir],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )


def python_servers_handshake(process):
    """(env, problems) the child reports once its servers are up."""
    line = process.stdout.readline()
    if not line:
        process.wait()
        return {}, [f"fault server and S3 not started: their process exited with {process.returncode}"]
    handshake = json.loads(line)
    return handshake["env"], handshake["problems"]


def stop_python_servers(process):
    process.stdin.close()
    stop_process(process, signal.SIGTERM)


# ---- The API ------------------------------------------------------------------------------------


class RemoteServers:
    """All the servers, up for the duration of a `with` block; `env` holds the variables of those
    that started and `data_dir` the files they serve.

    require: raise ServerUnavailable if any server cannot start; None reads
    KVIK_TEST_REQUIRE_REMOTE=1 from the environment."""

    def __init__(self, require=None):
        if require is None:
            require = os.environ.get("KVIK_TEST_REQUIRE_REMOTE") == "1"
        self.require = require
        self.env = {}
        self.problems = []
        self._work_dir = None
        self._nginx = None
        self._python = None

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc):
        self._stop()

    @property
    def data_dir(self):
        return os.path.join(self._work_dir, "data")

    def _start(self):
        self._work_dir = tempfile.mkdtemp(prefix="kvik-remote-")
        os.chmod(self._work_dir, 0o755)
        os.mkdir(self.data_dir)
        write_data_files(self.data_dir)
        self.env["KVIK_TEST_REMOTE_DATA"] = self.data_dir
        self._python = start_python_servers(self.data_dir)  # sets up moto while nginx starts
        try:
            self._nginx, nginx_env = start_nginx(os.path.join(self._work_dir, "nginx"), self.data_dir)
            self.env.update(nginx_env)
        except ServerUnavailable as e:
            self.problems.append(f"{e} (KVIK_TEST_NGINX_URL unset)")
        env, problems = python_servers_handshake(self._python)
        self.env.update(env)
        self.problems += problems
        if self.require and self.problems:
            raise ServerUnavailable("; ".join(self.problems))
        for problem in self.problems:
            print(f"remote test servers: {problem}", file=sys.stderr)

    def _stop(self):
        if self._python:
            stop_python_servers(self._python)
        if self._nginx:
            stop_process(self._nginx, signal.SIGTERM)
        if self._work_dir:
            shutil.rmtree(self._work_dir, ignore_errors=True)


# ---- Self-test ----------------------------------------------------------------------------------


def _http(method, url, headers=None, timeout=10):
    """(status, headers, body), without following redirects or raising on 4xx and 5xx."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=timeout)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, target, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def _curl(*args):
    """(status, body) of a curl command line."""
    command = ["curl", "-s", "-w", "\n%{http_code}", *args]
    body, _, status = subprocess.run(command, capture_output=True, check=True).stdout.rpartition(b"\n")
    return int(status), body


def _expect(condition, detail):
    if not condition:
        raise AssertionError(detail)


class SelfTest:
    """One check_ method per behaviour the tests rely on; its docstring is the line printed."""

    def __init__(self, env, data):
        self.env = env
        self.data = data
        self.medium = data["medium"]
        self.nginx = env["KVIK_TEST_NGINX_URL"]
        self.fault = env["KVIK_TEST_FAULT_URL"]
        self.webhdfs = env["KVIK_TEST_WEBHDFS_URL"]
        self.s3 = env["KVIK_TEST_S3_ENDPOINT"]
        self.bucket = env["KVIK_TEST_S3_BUCKET"]
        self.key_id = env["KVIK_TEST_S3_ACCESS_KEY_ID"]
        self.secret = env["KVIK_TEST_S3_SECRET_ACCESS_KEY"]

    def run(self):
        """The number of checks that failed."""
        failures = 0
        for name, check in vars(SelfTest).items():
            if name.startswith("check_"):
                try:
                    check(self)
                    print(f"PASS {check.__doc__}", flush=True)
                except Exception as e:
                    failures += 1
                    print(f"FAIL {check.__doc__}: {type(e).__name__}: {e}", flush=True)
        return failures

    # -- helpers --

    def range_read(self, base, name, first, last):
        """Headers of a 206 for bytes first..last of `name`, checked byte for byte."""
        status, headers, body = _http("GET", f"{base}/{name}", {"Range": f"bytes={first}-{last}"})
        _expect(status == 206, f"status {status}")
        _expect(body == self.data[name][first:last + 1], "wrong bytes")
        return headers

    def head(self, base, name):
        """Headers of a 200 HEAD whose Content-Length is the size of `name`."""
        status, headers, _ = _http("HEAD", f"{base}/{name}")
        _expect(status == 200, f"status {status}")
        length = int(headers["Content-Length"])
        _expect(length == len(self.data[name]), f"Content-Length {length}")
        return headers

    def s3_client(self, key_id, secret):
        import boto3

        return boto3.client("s3", endpoint_url=self.s3, region_name=S3_REGION,
                            aws_access_key_id=key_id, aws_secret_access_key=secret)

    def curl_sigv4(self, secret, *args):
        """curl signing as libcurl's CURLOPT_AWS_SIGV4 does, with the header S3 wants."""
        return _curl("--aws-sigv4", f"aws:amz:{S3_REGION}:s3", "--user", f"{self.key_id}:{secret}",
                     "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", *args)

    # -- checks --

    def check_nginx(self):
        """nginx: HEAD, ranges, whole file, empty file"""
        _expect(self.head(self.nginx, "medium")["Accept-Ranges"] == "bytes", "no Accept-Ranges")
        self.range_read(self.nginx, "medium", 100, 5 * MIB)
        _expect(_http("GET", f"{self.nginx}/large")[2] == self.data["large"], "whole file differs")
        _expect(_http("GET", f"{self.nginx}/empty")[2] == b"", "empty is not empty")

    def check_fault_ok(self):
        """fault ok: HEAD, whole GET, ranges, clipping, 416, 404"""
        ok = f"{self.fault}/ok"
        _expect(self.head(ok, "medium")["Accept-Ranges"] == "bytes", "no Accept-Ranges")
        _expect(_http("GET", f"{ok}/medium")[2] == self.medium, "whole body differs")
        content_range = self.range_read(ok, "medium", 10, 1009)["Content-Range"]
        _expect(content_range == f"bytes 10-1009/{len(self.medium)}", content_range)
        content_range = self.range_read(ok, "small", 900, 5000)["Content-Range"]
        _expect(content_range == "bytes 900-999/1000", content_range)
        status, headers, _ = _http("GET", f"{ok}/small", {"Range": "bytes=1000-1100"})
        _expect(status == 416 and headers["Content-Range"] == "bytes */1000", f"past the end: {status}")
        _expect(_http("GET", f"{ok}/nothere")[0] == 404, "missing name not 404")

    def check_fault_flaky(self):
        """fault flaky-2: two 503s per range; /_requests counts, /_reset zeroes"""
        def get(first):
            headers = {"Range": f"bytes={first}-{first + 9}"}
            return _http("GET", f"{self.fault}/flaky-2/small", headers)[0]

        _http("POST", f"{self.fault}/_reset")
        statuses = [get(0), get(0), get(0), get(10)]
        _expect(statuses == [503, 503, 206, 503], f"statuses {statuses}")
        _expect(_http("GET", f"{self.fault}/_requests")[2] == b"5", "count: 4 and its own request")
        _http("GET", f"{self.fault}/_reset")
        _expect(_http("GET", f"{self.fault}/_requests")[2] == b"1", "count not reset")
        _expect(get(0) == 503, "flaky state not reset")

    def check_fault_status(self):
        """fault status-403/404/500 on HEAD and GET"""
        for code in (403, 404, 500):
            for method in ("HEAD", "GET"):
                status = _http(method, f"{self.fault}/status-{code}/small")[0]
                _expect(status == code, f"{method} status-{code}: {status}")

    def check_fault_slow(self):
        """fault slow-2: HEAD at once, GET past a 0.3 s client timeout"""
        start = time.monotonic()
        self.head(f"{self.fault}/slow-2", "small")
        _expect(time.monotonic() - start < 1, "HEAD was slow")
        try:
            _http("GET", f"{self.fault}/slow-2/small", timeout=0.3)
        except TimeoutError:
            return
        raise AssertionError("GET answered before the client timeout")

    def check_fault_truncate(self):
        """fault truncate: half the body, then the connection closes"""
        try:
            _http("GET", f"{self.fault}/truncate/medium", {"Range": "bytes=0-9999"})
        except http.client.IncompleteRead as e:
            _expect(e.partial == self.medium[:5000], f"{len(e.partial)} bytes before the cut")
            return
        raise AssertionError("the body was complete")

    def check_fault_stall(self):
        """fault stall-2: a range from 0 cut at once, another stalled after half its body"""
        try:
            _http("GET", f"{self.fault}/stall-2/medium", {"Range": "bytes=0-9999"}, timeout=1)
        except http.client.IncompleteRead as e:
            _expect(e.partial == self.medium[:5000], f"{len(e.partial)} bytes before the cut")
        else:
            raise AssertionError("the body from 0 was complete")
        start = time.monotonic()
        try:
            _http("GET", f"{self.fault}/stall-2/medium", {"Range": "bytes=100-1099"}, timeout=0.3)
        except TimeoutError:
            _expect(time.monotonic() - start < 1, "the headers were slow")
            return
        raise AssertionError("the body from 100 did not stall")

    def check_fault_short(self):
        """fault short: a well-formed 206 of half the range"""
        status, headers, body = _http("GET", f"{self.fault}/short/medium", {"Range": "bytes=100-1099"})
        _expect(status == 206 and body == self.medium[100:600], f"status {status}, {len(body)} bytes")
        content_range = headers["Content-Range"]
        _expect(content_range == f"bytes 100-599/{len(self.medium)}", content_range)

    def check_fault_oversize(self):
        """fault oversize: 100 bytes past the range"""
        url = f"{self.fault}/oversize/medium"
        status, headers, body = _http("GET", url, {"Range": "bytes=100-199"})
        _expect(status == 206 and len(body) == 200, f"status {status}, {len(body)} bytes")
        _expect(body[:100] == self.medium[100:200], "wrong bytes")
        content_range = headers["Content-Range"]
        _expect(content_range == f"bytes 100-199/{len(self.medium)}", content_range)

    def check_fault_norange(self):
        """fault norange: 200 with the whole file"""
        status, _, body = _http("GET", f"{self.fault}/norange/medium", {"Range": "bytes=100-1099"})
        _expect(status == 200 and body == self.medium, f"status {status}, {len(body)} bytes")

    def check_fault_wrong_ranges(self):
        """fault shifted, badtotal, nocontentrange, garbledrange: 206s of the right length"""
        size = len(self.medium)
        expected = {
            "shifted": (f"bytes 101-1100/{size}", self.medium[101:1101]),
            "badtotal": (f"bytes 100-1099/{size + 1}", self.medium[100:1100]),
            "nocontentrange": (None, self.medium[100:1100]),
            "garbledrange": (f"bytes=100-1099/{size}", self.medium[100:1100]),
        }
        for mode, (content_range, data) in expected.items():
            url = f"{self.fault}/{mode}/medium"
            status, headers, body = _http("GET", url, {"Range": "bytes=100-1099"})
            _expect(status == 206 and body == data, f"{mode}: status {status}, {len(body)} bytes")
            got = headers["Content-Range"]
            _expect(got == content_range, f"{mode}: {got}")
        _, headers, body = _http("GET", f"{self.fault}/shifted/small", {"Range": "bytes=900-999"})
        got = headers["Content-Range"]
        at_end = got == "bytes 899-998/1000" and body == self.data["small"][899:999]
        _expect(at_end, f"at the end: {got}")

    def check_fault_badlength(self):
        """fault badlength-TEXT: HEAD with Content-Length TEXT; GET as ok"""
        status, headers, _ = _http("HEAD", f"{self.fault}/badlength-abc/small")
        length = headers["Content-Length"]
        _expect(status == 200 and length == "abc", f"{status} {length}")
        self.range_read(f"{self.fault}/badlength-abc", "small", 0, 99)

    def check_fault_drop(self):
        """fault drop: HEAD answers, GET closes without an answer"""
        self.head(f"{self.fault}/drop", "small")
        try:
            _http("GET", f"{self.fault}/drop/small")
        except http.client.RemoteDisconnected:
            return
        raise AssertionError("got an answer")

    def check_webhdfs_status(self):
        """webhdfs GETFILESTATUS; a missing file is a 404 RemoteException"""
        status, _, body = _http("GET", f"{self.webhdfs}/medium?op=GETFILESTATUS&user.name=alice")
        _expect(status == 200, f"status {status}")
        _expect(json.loads(body)["FileStatus"]["length"] == len(self.medium), "length")
        status, _, body = _http("GET", f"{self.webhdfs}/nothere?op=GETFILESTATUS")
        exception = json.loads(body)["RemoteException"]["exception"]
        _expect(status == 404 and exception == "FileNotFoundException", f"{status} {exception}")

    def check_webhdfs_open(self):
        """webhdfs OPEN: 307 to the datanode, exact bytes, user.name recorded"""
        url = f"{self.webhdfs}/medium?op=OPEN&offset=1000&length=5000&user.name=bob"
        status, headers, body = _http("GET", url)
        _expect(status == 307 and body == b"", f"status {status}")
        location = headers["Location"]
        _expect(location.endswith("/webhdfs-datanode/medium?op=OPEN&offset=1000&length=5000"), location)
        _expect(urllib.request.urlopen(url).read() == self.medium[1000:6000], "redirected read differs")
        tail = urllib.request.urlopen(f"{self.webhdfs}/small?op=OPEN&offset=990").read()
        _expect(tail == self.data["small"][990:], "read to the end differs")
        users = _http("GET", f"{self.fault}/_webhdfs_users")[2].decode()
        _expect({"alice", "bob"} <= set(users.split(",")), f"users {users!r}")

    def check_s3_boto3(self):
        """s3 boto3: HEAD, ranged GET (206), empty object"""
        client = self.s3_client(self.key_id, self.secret)
        length = client.head_object(Bucket=self.bucket, Key="medium")["ContentLength"]
        _expect(length == len(self.medium), f"HEAD length {length}")
        got = client.get_object(Bucket=self.bucket, Key="medium", Range="bytes=5-104")
        _expect(got["ResponseMetadata"]["HTTPStatusCode"] == 206, "not a 206")
        _expect(got["Body"].read() == self.medium[5:105], "wrong bytes")
        empty = client.get_object(Bucket=self.bucket, Key="empty")["Body"].read()
        _expect(empty == b"", f"{len(empty)} bytes in the empty object")

    def check_s3_boto3_refused(self):
        """s3 boto3: a wrong secret and an unknown key id get 403"""
        from botocore.exceptions import ClientError

        wrong = ((self.key_id, self.secret[:-1] + "x"), ("AKIAUNKNOWNKEY000000", self.secret))
        for key_id, secret in wrong:
            try:
                self.s3_client(key_id, secret).get_object(Bucket=self.bucket, Key="small")
            except ClientError as e:
                status = e.response["ResponseMetadata"]["HTTPStatusCode"]
                _expect(status == 403, f"{e.response['Error']['Code']}: {status}")
                continue
            raise AssertionError(f"key id {key_id} with a wrong secret was accepted")

    def check_s3_curl_sigv4(self):
        """s3 curl --aws-sigv4: a 206 with the right bytes; wrong secret, anonymous 403"""
        url = f"{self.s3}/{self.bucket}/medium"
        status, body = self.curl_sigv4(self.secret, "-r", "0-99", url)
        _expect(status == 206 and body == self.medium[:100], f"status {status}")
        _expect(self.curl_sigv4(f"wrong{self.secret}", "-r", "0-99", url)[0] == 403, "wrong secret")
        _expect(_curl("-r", "0-99", url)[0] == 403, "anonymous read of the private bucket")

    def check_s3_presigned(self):
        """s3 presigned URL: curl -r 0-99 gets a 206; one signature character changed, 403"""
        url = self.env["KVIK_TEST_S3_PRESIGNED_URL"]
        status, body = _curl("-r", "0-99", url)
        _expect(status == 206 and body == self.medium[:100], f"status {status}")
        at = url.index("X-Amz-Signature=") + len("X-Amz-Signature=")
        tampered = url[:at] + ("0" if url[at] != "0" else "1") + url[at + 1:]
        _expect(_curl("-r", "0-99", tampered)[0] == 403, "tampered signature accepted")

    def check_s3_public(self):
        """s3 public endpoint: anonymous HEAD and ranged GET; other bucket, PUT 403"""
        public = self.env["KVIK_TEST_S3_PUBLIC_ENDPOINT"]
        base = f"{public}/{self.env['KVIK_TEST_S3_PUBLIC_BUCKET']}"
        self.head(base, "large")
        self.range_read(base, "large", 3 * MIB, 4 * MIB)
        _expect(_http("GET", f"{base}/small")[2] == self.data["small"], "whole object differs")
        _expect(_http("GET", f"{public}/{self.bucket}/small")[0] == 403, "private bucket readable")
        _expect(_http("PUT", f"{base}/new", {"Content-Length": "0"})[0] == 403, "anonymous write")


def selftest():
    started = time.monotonic()
    with RemoteServers(require=True) as servers:
        print(f"servers up in {time.monotonic() - started:.1f} s", flush=True)
        data = {}
        for name in DATA_FILES:
            with open(os.path.join(servers.data_dir, name), "rb") as f:
                data[name] = f.read()
        failures = SelfTest(servers.env, data).run()
    outcome = f"{failures} checks failed" if failures else "all checks passed"
    print(f"{outcome} in {time.monotonic() - started:.1f} s")
    return 1 if failures else 0


# ---- Command line -------------------------------------------------------------------------------


def run_command(command, require):
    """CMD's exit status, run with the servers' variables (and without stale ones of ours)."""
    with RemoteServers(require) as servers:
        env = {k: v for k, v in os.environ.items() if k not in ENV_NAMES}
        status = subprocess.run(command, env={**env, **servers.env}).returncode
    return 128 - status if status < 0 else status  # killed by a signal: the shell's convention


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--require", action="store_true", default=None,
                        help="fail (exit 1) if a server cannot start; also KVIK_TEST_REQUIRE_REMOTE=1")
    parser.add_argument("--selftest", action="store_true",
                        help="start everything and check every behaviour")
    parser.add_argument("--python-servers", metavar="DATA_DIR", help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.python_servers:
        return python_servers_main(args.python_servers)
    # SIGTERM (a CI timeout) unwinds like Ctrl-C, so the servers stop and the temp dir goes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        if args.selftest:
            return selftest()
        if not command:
            parser.error("no command to run (servers.py [--require] -- CMD [ARGS...])")
        return run_command(command, args.require)
    except ServerUnavailable as e:
        print(f"remote test servers: required but unavailable: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
