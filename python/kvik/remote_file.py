"""kvikio.remote_file: objects on web servers, S3 and WebHDFS, read like files.

    with kvik.RemoteFile.open_s3("my-bucket", "data.bin") as f:
        buf = cupy.empty(f.nbytes(), dtype="u1")
        f.read(buf)                       # parallel range requests, into host or device memory

Reads run on libkvik's thread pool as range requests through libcurl (see "Remote files" in
kvik.h): failed requests are tried again as the settings ``http_max_attempts``, ``http_timeout``
and ``http_status_codes`` say, and an error status raises kvik.KvikError with ``http_status``.
"""
from __future__ import annotations

import enum
import functools
import re
import urllib.parse
from typing import Iterable, Optional

from . import _lib

__all__ = [
    "RemoteEndpointType",
    "RemoteFile",
    "infer_remote_endpoint_type",
    "is_remote_file_available",
]


class RemoteEndpointType(enum.IntEnum):
    """The kinds of server a RemoteFile reads from; the numbers are kvik_remote_kind's.

    - AUTO: find out from the URL (see RemoteFile.open).
    - S3: S3 with credentials; requests are signed (AWS Signature Version 4).
    - S3_PUBLIC: S3 objects anyone may read; requests are not signed.
    - S3_PRESIGNED_URL: an S3 URL that carries its own signature.
    - WEBHDFS: Hadoop's WebHDFS.
    - HTTP: any HTTP(S) server that answers range requests.
    """

    AUTO = 0
    S3 = 1
    S3_PUBLIC = 2
    S3_PRESIGNED_URL = 3
    WEBHDFS = 4
    HTTP = 5


@functools.lru_cache(maxsize=None)
def is_remote_file_available() -> bool:
    """Whether remote files work in this process: whether libcurl could be loaded (once per
    process, on the first remote call). Without it, opening a RemoteFile raises kvik.KvikError
    (KVIK_ENOREMOTE)."""
    supported, _ = _lib.remote_supported()
    return supported


# ---- which kinds can serve a URL, for RemoteFile.open's allow_list --------------------------


def _is_http(url):
    return url.lower().startswith(("http://", "https://"))


def _is_s3_object_url(url):
    """s3://BUCKET/KEY, both named: an s3:// URL without a key names no object."""
    return re.match(r"(?i)s3://[^/]+/.", url) is not None


def _is_presigned(url):
    query = urllib.parse.urlsplit(url).query
    return _is_http(url) and any(name.lower() == "x-amz-signature" for name, _ in urllib.parse.parse_qsl(query))


def _is_s3_host(url):
    """BUCKET.s3.REGION.amazonaws.com and the other forms of AWS's S3 hosts, as libkvik knows them."""
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    if not host.endswith(".amazonaws.com"):
        return False
    name = host[: -len(".amazonaws.com")]
    return name.startswith(("s3.", "s3-")) or ".s3." in name or ".s3-" in name


def _serves(kind, url):
    """Whether an endpoint of `kind` can serve `url`: the test kvikio applies to each type of an
    allow_list in turn."""
    if kind in (RemoteEndpointType.S3, RemoteEndpointType.S3_PUBLIC):
        return _is_s3_object_url(url) or (_is_http(url) and _is_s3_host(url)
                                          and not _is_presigned(url))
    if kind == RemoteEndpointType.S3_PRESIGNED_URL:
        return _is_presigned(url)
    if kind == RemoteEndpointType.WEBHDFS:
        return _is_http(url) and "/webhdfs/v1/" in urllib.parse.urlsplit(url).path
    return _is_http(url)  # HTTP: any http(s) URL


def infer_remote_endpoint_type(url: str) -> RemoteEndpointType:
    """The type that RemoteFile.open(url) with AUTO opens `url` as (see its list), as kvikio's
    infer_remote_endpoint_type: S3, S3_PRESIGNED_URL, WEBHDFS or HTTP. Raises kvik.InvalidArgument
    (a RuntimeError, as kvikio's error, and a ValueError) for a URL without a scheme ("Bad
    scheme") and for one that no type serves ("Unsupported endpoint URL"), s3://BUCKET without a
    key among them."""
    if not re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", url):
        shown = _without_secrets(url)
        raise _lib.InvalidArgument(f"Bad scheme: {shown!r} does not start with SCHEME://")
    kinds = (RemoteEndpointType.S3_PRESIGNED_URL, RemoteEndpointType.WEBHDFS,
             RemoteEndpointType.S3, RemoteEndpointType.HTTP)
    for kind in kinds:
        if _serves(kind, url):
            return kind
    raise _lib.InvalidArgument(f"Unsupported endpoint URL {_without_secrets(url)!r}: the schemes "
                               "are s3, http and https")


def _kind_from_allow_list(url, remote_endpoint_type, allow_list):
    """The kind to open `url` as, given kvikio's allow_list: an explicit type must be in it; AUTO
    takes the first type of the list, in its order, that can serve the URL."""
    if allow_list is None:
        return remote_endpoint_type
    allowed = [RemoteEndpointType(kind) for kind in allow_list]
    if RemoteEndpointType.AUTO in allowed:
        raise _lib.InvalidArgument("allow_list holds the endpoint types to choose from; AUTO is none")
    names = ", ".join(kind.name for kind in allowed) or "nothing"
    if remote_endpoint_type != RemoteEndpointType.AUTO:
        if remote_endpoint_type not in allowed:
            raise _lib.InvalidArgument(f"remote_endpoint_type {remote_endpoint_type.name} is not "
                                       f"in the allowlist (allow_list: {names})")
        return remote_endpoint_type
    for kind in allowed:
        if _serves(kind, url):
            return kind
    raise _lib.InvalidArgument(f"{_without_secrets(url)!r} is not a URL for any type in the allow_list ({names})")


def _without_secrets(url):
    """The URL as messages may show it: no user name, password or query string."""
    parts = urllib.parse.urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


# ---- the file -------------------------------------------------------------------------------


class RemoteFile(_lib.RemoteHandle):
    """A remote object, read like a file into host or device memory.

    Open it with one of the class methods (``open_http``, ``open_s3``, ``open``, ...); they learn
    the object's size from the server unless ``nbytes`` gives it. ``read`` and ``pread`` take what
    CuFile's do: NumPy, CuPy, anything with the buffer protocol or ``__cuda_array_interface__``.
    ``close()`` waits for the reads in flight; a closed file raises ValueError. ``str()`` and
    ``repr()`` name the URL without user name, password or query string (so no credential shows).

    ``RemoteFile(url, remote_endpoint_type, nbytes, **options)`` opens directly, the options
    being the keyword arguments of the class methods (``webhdfs_user`` for ``user``).

    The S3 constructors take credentials, region and endpoint as keyword arguments; those not given
    come from the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
    AWS_DEFAULT_REGION (else us-east-1, or the region an https URL names) and AWS_ENDPOINT_URL
    (for s3:// URLs: requests go to ENDPOINT/BUCKET/KEY).
    """

    @classmethod
    def open_http(cls, url: str, nbytes: Optional[int] = None) -> RemoteFile:
        """Open `url` on any HTTP(S) server that answers range requests."""
        return cls(url, RemoteEndpointType.HTTP, nbytes)

    @classmethod
    def open_s3(cls, bucket_name: str, object_name: str, nbytes: Optional[int] = None, *,
                aws_access_key_id: Optional[str] = None, aws_secret_access_key: Optional[str] = None,
                aws_session_token: Optional[str] = None, aws_region: Optional[str] = None,
                aws_endpoint_url: Optional[str] = None) -> RemoteFile:
        """Open object `object_name` of S3 bucket `bucket_name`, with signed requests."""
        return cls.open_s3_url(f"s3://{bucket_name}/{object_name}", nbytes, aws_access_key_id=aws_access_key_id,
                               aws_secret_access_key=aws_secret_access_key, aws_session_token=aws_session_token,
                               aws_region=aws_region, aws_endpoint_url=aws_endpoint_url)

    @classmethod
    def open_s3_url(cls, url: str, nbytes: Optional[int] = None, *, aws_access_key_id: Optional[str] = None,
                    aws_secret_access_key: Optional[str] = None, aws_session_token: Optional[str] = None,
                    aws_region: Optional[str] = None, aws_endpoint_url: Optional[str] = None) -> RemoteFile:
        """Open an S3 object, with signed requests, from "s3://BUCKET/KEY" or an http(s) URL such as
        "https://BUCKET.s3.REGION.amazonaws.com/KEY"."""
        if not (url.lower().startswith("s3://") or _is_http(url)):
            raise _lib.InvalidArgument(f"Unsupported protocol: {_without_secrets(url)!r} (expected s3://, http:// or https://)")
        return cls(url, RemoteEndpointType.S3, nbytes, aws_access_key_id=aws_access_key_id,
                   aws_secret_access_key=aws_secret_access_key, aws_session_token=aws_session_token,
                   aws_region=aws_region, aws_endpoint_url=aws_endpoint_url)

    @classmethod
    def open_s3_public(cls, url: str, nbytes: Optional[int] = None, *, aws_region: Optional[str] = None,
                       aws_endpoint_url: Optional[str] = None) -> RemoteFile:
        """Open an S3 object anyone may read (s3:// or http(s) URL), without signing requests."""
        return cls(url, RemoteEndpointType.S3_PUBLIC, nbytes, aws_region=aws_region,
                   aws_endpoint_url=aws_endpoint_url)

    @classmethod
    def open_s3_presigned_url(cls, presigned_url: str, nbytes: Optional[int] = None) -> RemoteFile:
        """Open an S3 object through a presigned URL, which carries its own signature."""
        return cls(presigned_url, RemoteEndpointType.S3_PRESIGNED_URL, nbytes)

    @classmethod
    def open_webhdfs(cls, url: str, nbytes: Optional[int] = None, *, user: Optional[str] = None) -> RemoteFile:
        """Open a file through WebHDFS: "http://NAMENODE:PORT/webhdfs/v1/PATH". `user` is the
        user.name requests carry (else the URL's own user.name, if any)."""
        return cls(url, RemoteEndpointType.WEBHDFS, nbytes, webhdfs_user=user)

    @classmethod
    def open(cls, url: str, remote_endpoint_type: RemoteEndpointType = RemoteEndpointType.AUTO,
             allow_list: Optional[Iterable[RemoteEndpointType]] = None, nbytes: Optional[int] = None, *,
             aws_access_key_id: Optional[str] = None, aws_secret_access_key: Optional[str] = None,
             aws_session_token: Optional[str] = None, aws_region: Optional[str] = None,
             aws_endpoint_url: Optional[str] = None, user: Optional[str] = None) -> RemoteFile:
        """Open `url` as `remote_endpoint_type`; AUTO finds the type from the URL:

        - s3://BUCKET/KEY: S3;
        - an http(s) URL with X-Amz-Signature in its query: S3_PRESIGNED_URL;
        - an http(s) URL whose path has /webhdfs/v1/: WEBHDFS;
        - an http(s) URL on an AWS S3 host (BUCKET.s3.REGION.amazonaws.com): S3;
        - any other http(s) URL: HTTP.

        `allow_list`, as in kvikio: the types that may be used. An explicit type must be in it
        (else kvik.InvalidArgument, a ValueError and a RuntimeError); with AUTO, the first type of
        the list, in its order, whose URLs look like `url` is used (InvalidArgument if none does).
        AUTO without a list raises infer_remote_endpoint_type's errors ("Bad scheme",
        "Unsupported endpoint URL").
        An s3:// URL without a key opened as S3 raises InvalidArgument "Invalid URL".
        """
        kind = RemoteEndpointType(remote_endpoint_type)
        if kind == RemoteEndpointType.AUTO and allow_list is None:
            kind = infer_remote_endpoint_type(url)  # kvikio's "Bad scheme" and "Unsupported" errors
        kind = _kind_from_allow_list(url, kind, allow_list)
        s3_kinds = (RemoteEndpointType.S3, RemoteEndpointType.S3_PUBLIC)
        if kind in s3_kinds and url.lower().startswith("s3://") and not _is_s3_object_url(url):
            shown = _without_secrets(url)
            raise _lib.InvalidArgument(f"Invalid URL {shown!r}: expected s3://BUCKET/KEY")
        return cls(url, kind, nbytes, aws_access_key_id=aws_access_key_id,
                   aws_secret_access_key=aws_secret_access_key, aws_session_token=aws_session_token,
                   aws_region=aws_region, aws_endpoint_url=aws_endpoint_url, webhdfs_user=user)

    def remote_endpoint_type(self) -> RemoteEndpointType:
        """The type this file was opened as, AUTO resolved."""
        return RemoteEndpointType(self._kind())

    def __reduce__(self):
        # Pickling would otherwise make an object that was never opened; reopening elsewhere would
        # need the credentials, which the handle does not give back.
        raise TypeError("a RemoteFile cannot be pickled or copied: open the URL again where it is needed")
