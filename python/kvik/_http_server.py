"""The server process of kvik.utils.LocalHttpServer, and its handler of range requests."""
import functools
import os
import re
import threading
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


class RangeRequestHandler(SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler that answers a single-range ``Range: bytes=first-last`` (also
    ``first-`` and ``-suffix``) with 206 Partial Content, and a range that starts past the end with
    416. Requests without Range get the whole file, as before."""

    def send_head(self):
        self._remaining = None
        header = self.headers.get("Range")
        path = self.translate_path(self.path)
        if header is None or os.path.isdir(path):
            return super().send_head()
        match = _RANGE.match(header.strip())
        if not match or match.groups() == ("", ""):
            self.send_error(HTTPStatus.BAD_REQUEST, "unsupported Range header")
            return None
        try:
            f = open(path, "rb")
        except OSError:
            self.send_error(HTTPStatus.NOT_FOUND, "File not found")
            return None
        size = os.fstat(f.fileno()).st_size
        first, last = match.groups()
        if first == "":  # the last `last` bytes
            start, end = max(size - int(last), 0), size - 1
        else:
            start, end = int(first), min(int(last), size - 1) if last else size - 1
        if start >= size or start > end:
            f.close()
            self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        f.seek(start)
        self._remaining = end - start + 1
        self.send_response(HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(self._remaining))
        self.end_headers()
        return f

    def end_headers(self):
        if getattr(self, "_remaining", None) is None:  # a whole file: ranges may be asked for
            self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def copyfile(self, source, outputfile):
        if getattr(self, "_remaining", None) is None:
            return super().copyfile(source, outputfile)
        while self._remaining > 0:
            chunk = source.read(min(self._remaining, 1 << 20))
            if not chunk:
                break
            outputfile.write(chunk)
            self._remaining -= len(chunk)


def serve(queue, handler, handler_options, max_lifetime):
    """The server process: serve on a free port of 127.0.0.1, send (ip, port) through `queue`,
    and stop after `max_lifetime` seconds."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, **handler_options))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    queue.put(httpd.server_address[:2])
    threading.Event().wait(max_lifetime)
    httpd.shutdown()
    print(f"LocalHttpServer shutting down after its max_lifetime ({max_lifetime} s)")
