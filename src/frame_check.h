/* Structural checks of compressed chunks on the host, before nvCOMP sees them: nvCOMP 6 calls
 * corrupt input undefined behaviour, and on an H100 its zstd decoder read past a truncated
 * chunk's end and faulted the CUDA context (CUDA_ERROR_ILLEGAL_ADDRESS), which no later call in
 * the process survives. The checks walk a format's framing, never its compressed payload:
 *  - zstd: every frame's header, each block's header and size (at most 128 KiB), the checksum's
 *    place; the frames end exactly at the chunk's end; the content sizes, where the frames state
 *    them, add up to the size expected, and the blocks can make it otherwise;
 *  - Snappy: the stated length is the size expected;
 *  - gzip: the header's magic, method and flags; the trailer's size (modulo 2^32) is the size
 *    expected;
 *  - LZ4 (raw block): every sequence's lengths and match offset, within the input and the output
 *    made so far; the output is exactly the size expected. The real nvCOMP decoded an LZ4 chunk
 *    cut short by 7 bytes to its full size, garbage at its end, as a success. This walk costs
 *    about a nanosecond a compressed byte: the fused read runs the checks on the pool;
 *  - Deflate and the GPU-only formats: none (nvCOMP failed all the broken Deflate seen).
 * Corruption inside the payload that keeps the framing intact still reaches nvCOMP: a checksum of
 * the container (Zarr's crc32c) is what finds it. */
#ifndef KVIK_SRC_FRAME_CHECK_H
#define KVIK_SRC_FRAME_CHECK_H

#include <stddef.h>

#include "kvik.h"

/* Whether kvik__frame_check() checks anything of the codec's chunks. */
int kvik__frame_checked(kvik_codec codec);

/* Whether its check walks every byte of a chunk (LZ4), rather than headers a few bytes each. */
int kvik__frame_check_walks_bytes(kvik_codec codec);

/* Check the chunk of `size` bytes at `p`, which must decode to `expected` bytes. Returns 0;
 * KVIK_EDECODED_SIZE where its framing states another size; -EBADMSG where its framing is broken.
 * `why` (cut to `len` bytes) then says what was found. */
int kvik__frame_check(kvik_codec codec, const unsigned char *p, size_t size, size_t expected,
                      char *why, size_t len);

#endif
