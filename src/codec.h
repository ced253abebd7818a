/* codec.c's internals for the fused read (read_decompress.c): device space for nvCOMP's
 * decodings that the caller takes and zeroes ahead of them, while the GPU is idle, instead of
 * each decoding zeroing its own on the critical path (docs/design.md, "The fused read"). */
#ifndef KVIK_SRC_CODEC_H
#define KVIK_SRC_CODEC_H

#include <stddef.h>

#include "cuda.h"
#include "kvik.h"

/* Store in *bytes the device memory that decoding `n` chunks of at most `max_out` decoded bytes
 * each, `total_out` in all, needs: nvCOMP's arguments, results and temporary space. nvCOMP is
 * asked on `stream`. 0, or a negative code with a message naming `fn`. */
int kvik__decompress_space(const char *fn, kvik_codec codec, size_t n, size_t max_out,
                           size_t total_out, CUstream stream, size_t *bytes);

/* kvik_decompress_async() in `space_bytes` of device memory at `space`, zeroed on `stream` before
 * this call and used by nothing else until the decoding's end in stream order, where that is as
 * much as kvik__decompress_space() gives for these chunks; else, as kvik_decompress_async(), in
 * memory of its own. */
int kvik__decompress_async_in(kvik_codec codec, size_t num_chunks, const void *const *src,
                              const size_t *src_sizes, void *const *dst,
                              const size_t *dst_capacities, size_t *sizes, int *statuses,
                              CUstream stream, CUdeviceptr space, size_t space_bytes);

#endif
