"""kvikio's former ``kvikio.nvcomp_codec.NvCompBatchCodec``: a Numcodecs codec (codec_id
"nvcomp_batch") on one of nvCOMP's batched formats, by `algorithm` name as kvikio took them:
"lz4", "zstd", "snappy", "deflate", "gdeflate" (case-insensitive).

The bytes are kvikio's: "lz4" writes numcodecs' LZ4 (a 4-byte decoded size, then a raw block;
``options={"has_header": False}`` writes the raw block alone), "zstd" zstd frames, "snappy" raw
Snappy, "deflate" raw Deflate, "gdeflate" GDeflate. As in kvikio, `encode` and `encode_batch`
return bytes; `decode` and `decode_batch` return host data for host input and CuPy arrays for
device input, or write into `out`, of the decoded size exactly. Raw Deflate, GDeflate and LZ4
without its header do not state their decoded size: decoding them needs `out`. Other `options`
(`data_type`, `algo`) are kept in the configuration; kvik runs nvCOMP's defaults. Without nvCOMP
"lz4" (with its header) and "zstd" run numcodecs' CPU codecs; the others raise kvik.KvikError.

Importing this module registers "nvcomp_batch" with numcodecs (an id of kvik's own, which
numcodecs has none of). ``import kvik as kvikio`` makes ``kvikio.nvcomp_codec`` this module.
"""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence

import numcodecs
import numcodecs.registry

from . import _frames, nvcomp
from .numcodecs import LZ4, BufferLike, _NvcompCodec

__all__ = ["NvCompBatchCodec"]

# kvikio's algorithm names: kvik.nvcomp's codec, how a chunk states its size, numcodecs' codec.
_ALGORITHMS = {
    "lz4": (nvcomp.LZ4Codec, _frames.lz4_header_size, numcodecs.LZ4),
    "gdeflate": (nvcomp.GDeflateCodec, None, None),
    "zstd": (nvcomp.ZstdCodec, _frames.zstd_size, numcodecs.Zstd),
    "snappy": (nvcomp.SnappyCodec, _frames.snappy_size, None),
    "deflate": (nvcomp.DeflateCodec, None, None),
}


class NvCompBatchCodec(_NvcompCodec):
    """Codec that uses batch algorithms from nvCOMP: `algorithm` one of "lz4", "zstd",
    "snappy", "deflate", "gdeflate"; `options` that algorithm's (kept in the configuration);
    `stream` is accepted, as kvikio took it, and unused (kvik's calls wait for their work)."""

    codec_id = "nvcomp_batch"
    # kvikio's: the bytes of the decoded size ahead of an LZ4 block.
    HEADER_SIZE_BYTES: int = _frames.LZ4_HEADER

    def __init__(self, algorithm: str, options: Optional[Mapping[str, Any]] = None,
                 stream: Any = None) -> None:
        algo_id = algorithm.lower()
        if algo_id not in _ALGORITHMS:
            raise ValueError(f"{algorithm} is not supported. Must be one of: "
                             f"{list(_ALGORITHMS.keys())}")
        self.algorithm = algo_id
        self.options = dict(options) if options is not None else {}
        self._stream = stream
        codec, self._sizer, self._numcodec = _ALGORITHMS[algo_id]
        self._nvcomp = codec()
        self._header = algo_id == "lz4" and self.options.get("has_header", True)
        if algo_id == "lz4" and not self._header:
            self._sizer, self._numcodec = None, None

    def _cpu(self):
        return self._numcodec()

    def _gpu(self) -> bool:
        # Without a CPU codec, nvCOMP's own error (KVIK_ENVCOMP_UNAVAILABLE) says what is missing.
        return self._numcodec is None or super()._gpu()

    def _decoded_size(self, buf: Any) -> Optional[int]:
        return self._sizer(buf) if self._sizer else None

    def _body(self, buf: Any) -> Any:
        return LZ4._body(self, buf) if self._header else buf

    def _frame(self, bufs: List[Any], encoded: List[Any]) -> List[Any]:
        return LZ4._frame(self, bufs, encoded) if self._header else encoded

    def encode_batch(self, bufs: Sequence[BufferLike]) -> List[bytes]:
        """Encode each buffer (host or device) in one nvCOMP call; returns bytes, as kvikio."""
        return [e.get().tobytes() if hasattr(e, "__cuda_array_interface__") else bytes(e)
                for e in super().encode_batch(bufs)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(algorithm={self.algorithm!r}, options={self.options!r})"


numcodecs.registry.register_codec(NvCompBatchCodec)
