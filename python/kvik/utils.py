"""kvikio.utils: a local HTTP server for tests, and the decorators kvikio marks its API with.

Importing this module stays cheap: the HTTP server's modules load when a server starts.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, Callable, Optional

__all__ = ["LocalHttpServer", "call_once", "kvikio_deprecate_module", "kvikio_deprecation_notice"]


class LocalHttpServer:
    """A local HTTP server for tests, serving a directory, in a process of its own.

    ::

        with LocalHttpServer(root_path=tmp_path) as server:
            with kvik.RemoteFile.open_http(f"{server.url}/data.bin") as f:
                f.read(buf)

    Parameters
    ----------
    root_path
        The directory to serve.
    range_support
        Whether GET requests with a ``Range`` header get that range (206 Partial Content), as
        RemoteFile's range requests need. Built in: no third-party package is needed. False
        serves the whole file for every GET, as a server that ignores ranges does.
    max_lifetime
        Seconds after which the server stops on its own, should the context never exit.
    handler, handler_options
        A request handler class to use instead (a subclass of SimpleHTTPRequestHandler, say), and
        keyword arguments for it; ``directory=root_path`` is added to them. Both are sent to the
        server's process, so they must pickle where the start method is not fork.

    After ``__enter__``: ``process`` (the server's multiprocessing.Process), ``ip``, ``port`` and
    ``url`` (``http://ip:port``).
    """

    def __init__(self, root_path, range_support: bool = True, max_lifetime: int = 120,
                 handler: Optional[type] = None,
                 handler_options: Optional[dict[str, Any]] = None) -> None:
        self.root_path = root_path
        self.range_support = range_support
        self.max_lifetime = max_lifetime
        self.handler = handler
        self.handler_options = handler_options or {}

    def __enter__(self) -> LocalHttpServer:
        import multiprocessing

        from . import _http_server

        if self.handler is not None:
            handler = self.handler
        elif self.range_support:
            handler = _http_server.RangeRequestHandler
        else:
            handler = _http_server.SimpleHTTPRequestHandler
        options = {**self.handler_options, "directory": str(self.root_path)}
        queue = multiprocessing.Queue()
        self.process = multiprocessing.Process(
            target=_http_server.serve, args=(queue, handler, options, self.max_lifetime),
            daemon=True)
        with warnings.catch_warnings():
            # Python 3.12 warns of fork() in a process with threads (kvik's pool is one). The
            # child only serves HTTP and makes no kvik call, so the fork is safe; the warning
            # would fail a test suite that turns warnings into errors, as kvikio's does.
            warnings.filterwarnings("ignore", "This process .* is multi-threaded, use of fork",
                                    DeprecationWarning)
            self.process.start()
        self.ip, self.port = queue.get()
        self.url = f"http://{self.ip}:{self.port}"
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        self.process.kill()
        self.process.join()


def call_once(func: Callable) -> Callable:
    """Decorate `func` so that only its first call runs it; every later call returns the first
    call's result, whatever its arguments."""
    done = False
    result = None

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nonlocal done, result
        if not done:
            done = True
            result = func(*args, **kwargs)
        return result

    return wrapper


def kvikio_deprecation_notice(msg: str = "This function is deprecated.", *, since: str) -> Callable:
    """Decorate a function to warn (FutureWarning, `msg`) on each call, and to start its
    docstring with ``.. deprecated:: <since> <msg>`` for Sphinx."""

    def decorator(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            warnings.warn(msg, category=FutureWarning, stacklevel=2)
            return func(*args, **kwargs)

        wrapper.__doc__ = f".. deprecated:: {since} {msg}\n\n{func.__doc__ or ''}"
        return wrapper

    return decorator


def kvikio_deprecate_module(msg: str = "", *, since: str) -> None:
    """Warn (FutureWarning) that the calling module is deprecated since version `since`; call it
    at the top of the module."""
    warnings.warn(f"This module is deprecated since {since}. {msg}", category=FutureWarning,
                  stacklevel=2)
