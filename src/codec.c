/* Batched compression and decompression of device memory through nvCOMP (kvik.h,
 * "Compression").
 *
 * One call makes one pass on the caller's stream: the host arrays go to a pinned block, from
 * there in one copy to a device block from kvik's pool (device_pool.h: the pointer and size
 * arrays nvCOMP reads, the sizes and statuses it writes, its temporary space), nvCOMP runs, the
 * sizes and statuses come back to the pinned block in one copy, the device block is freed in
 * stream order, and a host function of
 * the stream turns the statuses into kvik codes in the caller's arrays. A host function may make
 * no CUDA call, so it cannot free the pinned block: it puts it on a list that later calls take
 * their blocks from. The fused read lends its decodings a device block it zeroed earlier
 * (codec.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "codec.h"
#include "cuda.h"
#include "device_pool.h"
#include "error.h"
#include "memory.h"
#include "nvcomp.h"
#include "sys.h"

#define DEVICE_ALIGN 256

static const unsigned char gpu_only[KVIK_CODEC_COUNT] = {
#define KVIK__CODEC_GPU_ONLY_(codec, infix, only) [codec] = only,
    KVIK__NVCOMP_FORMATS(KVIK__CODEC_GPU_ONLY_)
#undef KVIK__CODEC_GPU_ONLY_
};

static const char *const names[KVIK_CODEC_COUNT] = {
    [KVIK_CODEC_ZSTD] = "zstd",         [KVIK_CODEC_LZ4] = "lz4",
    [KVIK_CODEC_SNAPPY] = "snappy",     [KVIK_CODEC_DEFLATE] = "deflate",
    [KVIK_CODEC_GZIP] = "gzip",         [KVIK_CODEC_GDEFLATE] = "gdeflate",
    [KVIK_CODEC_CASCADED] = "cascaded", [KVIK_CODEC_BITCOMP] = "bitcomp",
    [KVIK_CODEC_ANS] = "ans",
};

static int valid_codec(kvik_codec codec) { return (unsigned)codec < KVIK_CODEC_COUNT; }

static int unknown_codec(const char *fn, kvik_codec codec) {
  return kvik__fail(-EINVAL, "%s: unknown codec %d", fn, (int)codec);
}

/* ---- queries ---------------------------------------------------------------------------- */

const char *kvik_codec_name(kvik_codec codec) { return valid_codec(codec) ? names[codec] : NULL; }

int kvik_codec_lookup(const char *name) {
  if (!name) return kvik__fail(-EINVAL, "kvik_codec_lookup: NULL name");
  for (int c = 0; c < KVIK_CODEC_COUNT; c++)
    if (strcasecmp(names[c], name) == 0) return c;
  return kvik__fail(-EINVAL, "kvik_codec_lookup: unknown codec name '%s'", name);
}

int kvik_codec_gpu_only(kvik_codec codec) {
  if (!valid_codec(codec)) return unknown_codec("kvik_codec_gpu_only", codec);
  return gpu_only[codec];
}

int kvik_codec_supported(kvik_codec codec) {
  if (!valid_codec(codec)) return unknown_codec("kvik_codec_supported", codec);
  const kvik__nvcomp_api *nv;
  int rc = kvik__nvcomp("kvik_codec_supported", &nv);
  if (rc == KVIK_ENVCOMP_UNAVAILABLE) return 0;
  return rc < 0 ? rc : nv->present[codec];
}

int kvik_nvcomp_version(void) {
  const kvik__nvcomp_api *nv;
  int rc = kvik__nvcomp("kvik_nvcomp_version", &nv);
  return rc < 0 ? rc : (int)nv->version;
}

int kvik_nvcomp_path(char *buf, size_t len) {
  if (!buf && len > 0)
    return kvik__fail(-EINVAL, "kvik_nvcomp_path: NULL buffer for %zu bytes", len);
  const kvik__nvcomp_api *nv;
  int rc = kvik__nvcomp("kvik_nvcomp_path", &nv);
  return rc < 0 ? rc : snprintf(buf, len, "%s", nv->path);
}

/* The codec's functions, nvCOMP loaded. Returns 0 or a negative code naming `fn`. */
static int format_api(const char *fn, kvik_codec codec, const kvik__nvcomp_format_api **f) {
  *f = NULL;
  if (!valid_codec(codec)) return unknown_codec(fn, codec);
  const kvik__nvcomp_api *nv;
  int rc = kvik__nvcomp(fn, &nv);
  if (rc < 0) return rc;
  if (!nv->present[codec])
    return kvik__fail(KVIK_ENVCOMP_UNAVAILABLE, "%s(%s): %s lacks the codec's functions", fn,
                      names[codec], nv->path);
  *f = &nv->formats[codec];
  return 0;
}

static int alignments(const char *fn, kvik_codec codec, const kvik__nvcomp_format_api *f,
                      int compress, kvik__nvcomp_alignments *out) {
  kvik__nvcomp_opts opts = kvik__nvcomp_default_opts(codec, compress);
  kvik__nvcomp_status status =
      compress ? f->compress_alignments(opts, out) : f->decompress_alignments(opts, out);
  return kvik__nvcomp_check(status, fn,
                            compress ? "nvcompBatched*CompressGetRequiredAlignments"
                                     : "nvcompBatched*DecompressGetRequiredAlignments");
}

int kvik_codec_alignment(kvik_codec codec, int compress, size_t *input, size_t *output) {
  static const char fn[] = "kvik_codec_alignment";
  if (!input || !output) return kvik__fail(-EINVAL, "%s: NULL result pointer", fn);
  const kvik__nvcomp_format_api *f;
  int rc = format_api(fn, codec, &f);
  kvik__nvcomp_alignments a;
  if (rc == 0) rc = alignments(fn, codec, f, compress != 0, &a);
  if (rc < 0) return rc;
  *input = a.input;
  *output = a.output;
  return 0;
}

static int max_output(const char *fn, kvik_codec codec, const kvik__nvcomp_format_api *f,
                      size_t max_chunk, size_t *size) {
  kvik__nvcomp_status status =
      f->compress_max_output(max_chunk, kvik__nvcomp_default_opts(codec, 1), size);
  return kvik__nvcomp_check(status, fn, "nvcompBatched*CompressGetMaxOutputChunkSize");
}

int kvik_codec_max_compressed_size(kvik_codec codec, size_t max_chunk_size, size_t *size) {
  static const char fn[] = "kvik_codec_max_compressed_size";
  if (!size) return kvik__fail(-EINVAL, "%s: NULL size", fn);
  const kvik__nvcomp_format_api *f;
  int rc = format_api(fn, codec, &f);
  return rc < 0 ? rc : max_output(fn, codec, f, max_chunk_size, size);
}

/* ---- pinned blocks ---------------------------------------------------------------------- */

/* A pinned host block and what the host function writes from it. */
typedef struct block {
  struct block *next;
  void *pinned;
  size_t capacity;
  /* set per call: */
  size_t n;
  const uint64_t *result_sizes; /* in `pinned` */
  const int32_t *result_statuses;
  const uint64_t *capacities; /* in `pinned`: each output's capacity */
  size_t *sizes;              /* the caller's, may be NULL */
  int *statuses;
  int write; /* 0 after a failure: the block only goes back to the list */
} block;

static pthread_mutex_t free_lock = PTHREAD_MUTEX_INITIALIZER;
static block *free_blocks;

/* A block of at least `bytes` pinned bytes (portable: any context's copies may use it). */
static int block_take(const char *fn, const kvik__cuda_api *cu, size_t bytes, block **out) {
  pthread_mutex_lock(&free_lock);
  block *b = free_blocks;
  if (b) free_blocks = b->next;
  pthread_mutex_unlock(&free_lock);
  if (b && b->capacity < bytes) {
    cu->cuMemFreeHost(b->pinned);
    b->pinned = NULL;
  }
  if (!b && !(b = kvik__calloc(1, sizeof *b)))
    return kvik__fail(-ENOMEM, "%s: no memory for a result block", fn);
  if (!b->pinned) {
    size_t capacity = (bytes + 4095) / 4096 * 4096;
    int rc = kvik__cuda_check(cu->cuMemHostAlloc(&b->pinned, capacity, CU_MEMHOSTALLOC_PORTABLE),
                              fn, "cuMemHostAlloc");
    if (rc < 0) {
      free(b);
      return rc;
    }
    b->capacity = capacity;
  }
  *out = b;
  return 0;
}

static void block_give_back(block *b) {
  pthread_mutex_lock(&free_lock);
  b->next = free_blocks;
  free_blocks = b;
  pthread_mutex_unlock(&free_lock);
}

/* The stream's host function: no CUDA call allowed. */
static void block_done(void *arg) {
  block *b = arg;
  for (size_t i = 0; b->write && i < b->n; i++) {
    b->statuses[i] = kvik__nvcomp_code(b->result_statuses[i]);
    /* nvCOMP 6 validates little (its headers call corrupt input undefined behaviour): on an H100
     * its zstd, LZ4 and Snappy reported success for outputs too small to hold the chunk, with the
     * chunk's whole size. A size past the output is no success. */
    if (b->statuses[i] == 0 && b->result_sizes[i] > b->capacities[i])
      b->statuses[i] = kvik__nvcomp_code(KVIK__nvcompErrorOutputBufferTooSmall);
    if (b->sizes) b->sizes[i] = b->statuses[i] == 0 ? (size_t)b->result_sizes[i] : 0;
  }
  block_give_back(b);
}

/* ---- a batch ---------------------------------------------------------------------------- */

typedef struct batch {
  const char *fn;
  kvik_codec codec;
  int compress;
  size_t n;
  const void *const *src;
  const size_t *src_sizes;
  void *const *dst;
  const size_t *dst_capacities;
  size_t *sizes;
  int *statuses;
  /* found by check_batch(): */
  size_t max_in, total_in; /* for nvCOMP's temporary size: uncompressed bytes */
  /* device memory lent by the caller, zeroed (kvik__decompress_async_in), or 0 */
  CUdeviceptr space;
  size_t space_bytes;
} batch;

static int chunk_fail(const batch *b, size_t i, const char *what) {
  return kvik__fail(-EINVAL, "%s(%s): chunk %zu of %zu: %s", b->fn, names[b->codec], i, b->n, what);
}

static int misaligned(const batch *b, size_t i, const char *which, const void *p, size_t align) {
  if (align <= 1 || (uintptr_t)p % align == 0) return 0;
  return kvik__fail(-EINVAL, "%s(%s): chunk %zu of %zu: %s %p not aligned to %zu bytes", b->fn,
                    names[b->codec], i, b->n, which, p, align);
}

/* The argument rules that need no nvCOMP: checked first, so that they hold without it. The
 * blocking forms make their own statuses where the caller gives none. */
static int check_arguments(const batch *b, int need_statuses) {
  if (!valid_codec(b->codec)) return unknown_codec(b->fn, b->codec);
  int missing =
      (need_statuses && !b->statuses) || !b->src || !b->src_sizes || !b->dst || !b->dst_capacities;
  if (b->n > 0 && missing)
    return kvik__fail(-EINVAL, "%s(%s): NULL array for %zu chunks", b->fn, names[b->codec], b->n);
  for (size_t i = 0; i < b->n; i++) {
    if (!b->src[i] && b->src_sizes[i] > 0) return chunk_fail(b, i, "NULL input");
    if (!b->dst[i]) return chunk_fail(b, i, "NULL output");
  }
  return 0;
}

/* The rules of the codec: alignment, and for compression the output capacities. */
static int check_batch(batch *b, const kvik__nvcomp_format_api *f) {
  kvik__nvcomp_alignments a;
  int rc = alignments(b->fn, b->codec, f, b->compress, &a);
  if (rc < 0) return rc;
  b->max_in = b->total_in = 0;
  for (size_t i = 0; i < b->n; i++) {
    if ((rc = misaligned(b, i, "input", b->src[i], a.input)) < 0) return rc;
    if ((rc = misaligned(b, i, "output", b->dst[i], a.output)) < 0) return rc;
    size_t in = b->compress ? b->src_sizes[i] : b->dst_capacities[i];
    if (in > b->max_in) b->max_in = in;
    b->total_in = b->total_in + in < b->total_in ? SIZE_MAX : b->total_in + in;
  }
  if (!b->compress) return 0;
  size_t need;
  if ((rc = max_output(b->fn, b->codec, f, b->max_in, &need)) < 0) return rc;
  for (size_t i = 0; i < b->n; i++)
    if (b->dst_capacities[i] < need)
      return kvik__fail(-EINVAL,
                        "%s(%s): chunk %zu of %zu: output capacity %zu below %zu, the most that "
                        "compressing the batch's largest chunk (%zu bytes) can give",
                        b->fn, names[b->codec], i, b->n, b->dst_capacities[i], need, b->max_in);
  return 0;
}

/* The device block: four arrays in (source pointers, output pointers, source sizes, output
 * capacities), nvCOMP's sizes and statuses out, then its temporary space. The pinned block has
 * the same first part. */
typedef struct layout {
  size_t in_bytes, out_offset, out_bytes, temp_offset, total;
} layout;

static layout plan(size_t n, size_t temp) {
  layout l;
  l.in_bytes = 4 * n * sizeof(uint64_t);
  l.out_offset = l.in_bytes;
  l.out_bytes = n * sizeof(uint64_t) + n * sizeof(int32_t);
  l.temp_offset = (l.out_offset + l.out_bytes + DEVICE_ALIGN - 1) / DEVICE_ALIGN * DEVICE_ALIGN;
  l.total = l.temp_offset + temp;
  return l;
}

static void fill_inputs(const batch *b, block *blk, const layout *l) {
  uint64_t *in = blk->pinned;
  size_t n = b->n;
  for (size_t i = 0; i < n; i++) {
    in[i] = (uint64_t)(uintptr_t)b->src[i];
    in[n + i] = (uint64_t)(uintptr_t)b->dst[i];
    in[2 * n + i] = b->src_sizes[i];
    in[3 * n + i] = b->dst_capacities[i];
  }
  blk->n = n;
  blk->capacities = in + 3 * n;
  blk->result_sizes = in + l->out_offset / sizeof(uint64_t); /* plan(): whole words in */
  blk->result_statuses = (const int32_t *)(blk->result_sizes + n);
  blk->sizes = b->sizes;
  blk->statuses = b->statuses;
  blk->write = 0;
}

static int temp_size(const batch *b, const kvik__nvcomp_format_api *f, CUstream stream,
                     size_t *temp) {
  kvik__nvcomp_opts opts = kvik__nvcomp_default_opts(b->codec, b->compress);
  kvik__nvcomp_status status =
      b->compress ? f->compress_temp_size(b->n, b->max_in, opts, temp, b->total_in, stream)
                  : f->decompress_temp_size(b->n, b->max_in, opts, temp, b->total_in, stream);
  return kvik__nvcomp_check(status, b->fn,
                            b->compress ? "nvcompBatched*CompressGetTempSize"
                                        : "nvcompBatched*DecompressGetTempSize");
}

/* Enqueue nvCOMP's work on the device block at `d`. */
static int enqueue_codec(const batch *b, const kvik__nvcomp_format_api *f, CUdeviceptr d,
                         const layout *l, size_t temp, CUstream stream) {
  size_t n = b->n;
  const void *const *src = (const void *const *)(uintptr_t)d;
  void *const *dst = (void *const *)(uintptr_t)(d + n * sizeof(uint64_t));
  const size_t *src_sizes = (const size_t *)(uintptr_t)(d + 2 * n * sizeof(uint64_t));
  const size_t *dst_capacities = (const size_t *)(uintptr_t)(d + 3 * n * sizeof(uint64_t));
  size_t *sizes = (size_t *)(uintptr_t)(d + l->out_offset);
  kvik__nvcomp_status *statuses =
      (kvik__nvcomp_status *)(uintptr_t)(d + l->out_offset + n * sizeof(uint64_t));
  void *tmp = temp ? (void *)(uintptr_t)(d + l->temp_offset) : NULL;
  kvik__nvcomp_opts opts = kvik__nvcomp_default_opts(b->codec, b->compress);
  kvik__nvcomp_status status = b->compress
                                   ? f->compress_async(src, src_sizes, b->max_in, n, tmp, temp, dst,
                                                       sizes, opts, statuses, stream)
                                   : f->decompress_async(src, src_sizes, dst_capacities, sizes, n,
                                                         tmp, temp, dst, opts, statuses, stream);
  return kvik__nvcomp_check(
      status, b->fn, b->compress ? "nvcompBatched*CompressAsync" : "nvcompBatched*DecompressAsync");
}

/* Hand the block to the stream's host function; where that cannot be enqueued, wait for the
 * stream and run it here. A stream that cannot be waited for may still use the block: it is
 * left allocated. */
static int finish(const batch *b, const kvik__cuda_api *cu, CUstream stream, block *blk, int rc) {
  blk->write = rc == 0;
  int launch =
      kvik__cuda_check(cu->cuLaunchHostFunc(stream, block_done, blk), b->fn, "cuLaunchHostFunc");
  if (launch == 0) return rc;
  blk->write = 0;
  if (cu->cuStreamSynchronize(stream) == CUDA_SUCCESS) block_done(blk);
  return rc < 0 ? rc : launch;
}

/* The pass of the file comment, in the stream's context. */
static int run_in_context(const batch *b, const kvik__nvcomp_format_api *f,
                          const kvik__cuda_api *cu, CUstream stream) {
  size_t temp = 0;
  int rc = temp_size(b, f, stream, &temp);
  if (rc < 0) return rc;
  layout l = plan(b->n, temp);
  block *blk = NULL;
  if ((rc = block_take(b->fn, cu, l.in_bytes + l.out_bytes, &blk)) < 0) return rc;
  fill_inputs(b, blk, &l);
  int lent = b->space && l.total <= b->space_bytes;
  CUdeviceptr d = b->space;
  if (!lent && (rc = kvik__device_pool_alloc(b->fn, cu, l.total, stream, &d)) < 0) {
    block_give_back(blk);
    return rc;
  }
  rc = kvik__cuda_check(cu->cuMemcpyHtoDAsync(d, blk->pinned, l.in_bytes, stream), b->fn,
                        "cuMemcpyHtoDAsync");
  /* nvCOMP gets its results' place and temporary space zeroed, as newly mapped memory is: on an
   * H100 its zstd decoder, given a corrupt chunk and temporary space that an earlier call had
   * used (kept by kvik's pool), never finished; given zeroed space, it failed the chunk. Lent
   * space was zeroed by its lender. */
  if (rc == 0 && !lent)
    rc = kvik__cuda_check(cu->cuMemsetD8Async(d + l.out_offset, 0, l.total - l.out_offset, stream),
                          b->fn, "cuMemsetD8Async");
  if (rc == 0) rc = enqueue_codec(b, f, d, &l, temp, stream);
  if (rc == 0)
    rc = kvik__cuda_check(cu->cuMemcpyDtoHAsync((char *)blk->pinned + l.out_offset,
                                                d + l.out_offset, l.out_bytes, stream),
                          b->fn, "cuMemcpyDtoHAsync");
  rc = finish(b, cu, stream, blk, rc);
  int freed = lent ? 0 : kvik__device_pool_free(b->fn, cu, d, stream);
  return rc < 0 ? rc : freed;
}

/* The context a stream belongs to: its own, or for the default streams (handles 0, 1, 2) the
 * calling thread's current one, else device 0's primary context. Made current until
 * kvik__context_pop(). */
static int push_stream_context(const char *fn, const kvik__cuda_api *cu, void *stream) {
  if ((uintptr_t)stream <= 2) return kvik__context_push_any(fn, cu);
  CUcontext ctx;
  int rc = kvik__cuda_check(cu->cuStreamGetCtx((CUstream)stream, &ctx), fn, "cuStreamGetCtx");
  return rc < 0 ? rc : kvik__context_push(fn, ctx);
}

static int run_async(batch *b, void *stream) {
  const kvik__nvcomp_format_api *f;
  int rc = check_arguments(b, 1);
  if (rc == 0) rc = format_api(b->fn, b->codec, &f);
  if (rc < 0 || (rc = check_batch(b, f)) < 0 || b->n == 0) return rc;
  const kvik__cuda_api *cu = kvik__cuda(b->fn);
  if (!cu) return KVIK_ECUDA_UNAVAILABLE;
  if ((rc = push_stream_context(b->fn, cu, stream)) < 0) return rc;
  rc = run_in_context(b, f, cu, (CUstream)stream);
  kvik__context_pop();
  return rc;
}

/* The blocking form: a stream of kvik's own, waited for; the first failed chunk's code. */
static int run_blocking(batch *b) {
  const kvik__nvcomp_format_api *f;
  int *own = NULL;
  int rc = check_arguments(b, 0);
  if (rc == 0) rc = format_api(b->fn, b->codec, &f);
  if (rc == 0 && !b->statuses && b->n > 0) {
    if (!(own = kvik__calloc(b->n, sizeof *own)))
      return kvik__fail(-ENOMEM, "%s(%s): no memory for %zu statuses", b->fn, names[b->codec],
                        b->n);
    b->statuses = own;
  }
  if (rc < 0 || (rc = check_batch(b, f)) < 0 || b->n == 0) goto out;
  const kvik__cuda_api *cu = kvik__cuda(b->fn);
  if (!cu) {
    rc = KVIK_ECUDA_UNAVAILABLE;
    goto out;
  }
  if ((rc = kvik__context_push_any(b->fn, cu)) < 0) goto out;
  CUstream stream;
  rc = kvik__cuda_check(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), b->fn,
                        "cuStreamCreate");
  if (rc == 0) {
    rc = run_in_context(b, f, cu, stream);
    int synced = kvik__cuda_check(cu->cuStreamSynchronize(stream), b->fn, "cuStreamSynchronize");
    if (rc == 0) rc = synced;
    cu->cuStreamDestroy(stream);
  }
  kvik__context_pop();
  for (size_t i = 0; rc == 0 && i < b->n; i++)
    if (b->statuses[i] < 0)
      rc = kvik__fail(b->statuses[i], "%s(%s): chunk %zu of %zu: %s", b->fn, names[b->codec], i,
                      b->n, kvik_strerror(b->statuses[i]));
out:
  free(own);
  return rc;
}

static batch make_batch(const char *fn, kvik_codec codec, int compress, size_t n,
                        const void *const *src, const size_t *src_sizes, void *const *dst,
                        const size_t *dst_capacities, size_t *sizes, int *statuses) {
  return (batch){.fn = fn,
                 .codec = codec,
                 .compress = compress,
                 .n = n,
                 .src = src,
                 .src_sizes = src_sizes,
                 .dst = dst,
                 .dst_capacities = dst_capacities,
                 .sizes = sizes,
                 .statuses = statuses};
}

int kvik_decompress_async(kvik_codec codec, size_t num_chunks, const void *const *src,
                          const size_t *src_sizes, void *const *dst, const size_t *dst_capacities,
                          size_t *sizes, int *statuses, void *stream) {
  batch b = make_batch("kvik_decompress_async", codec, 0, num_chunks, src, src_sizes, dst,
                       dst_capacities, sizes, statuses);
  return run_async(&b, stream);
}

int kvik_compress_async(kvik_codec codec, size_t num_chunks, const void *const *src,
                        const size_t *src_sizes, void *const *dst, const size_t *dst_capacities,
                        size_t *sizes, int *statuses, void *stream) {
  batch b = make_batch("kvik_compress_async", codec, 1, num_chunks, src, src_sizes, dst,
                       dst_capacities, sizes, statuses);
  return run_async(&b, stream);
}

int kvik_decompress(kvik_codec codec, size_t num_chunks, const void *const *src,
                    const size_t *src_sizes, void *const *dst, const size_t *dst_capacities,
                    size_t *sizes, int *statuses) {
  batch b = make_batch("kvik_decompress", codec, 0, num_chunks, src, src_sizes, dst, dst_capacities,
                       sizes, statuses);
  return run_blocking(&b);
}

int kvik_compress(kvik_codec codec, size_t num_chunks, const void *const *src,
                  const size_t *src_sizes, void *const *dst, const size_t *dst_capacities,
                  size_t *sizes, int *statuses) {
  batch b = make_batch("kvik_compress", codec, 1, num_chunks, src, src_sizes, dst, dst_capacities,
                       sizes, statuses);
  return run_blocking(&b);
}

int kvik__decompress_space(const char *fn, kvik_codec codec, size_t n, size_t max_out,
                           size_t total_out, CUstream stream, size_t *bytes) {
  const kvik__nvcomp_format_api *f;
  int rc = format_api(fn, codec, &f);
  batch b = {.fn = fn, .codec = codec, .n = n, .max_in = max_out, .total_in = total_out};
  size_t temp = 0;
  if (rc == 0) rc = temp_size(&b, f, stream, &temp);
  if (rc == 0) *bytes = plan(n, temp).total;
  return rc;
}

int kvik__decompress_async_in(kvik_codec codec, size_t num_chunks, const void *const *src,
                              const size_t *src_sizes, void *const *dst,
                              const size_t *dst_capacities, size_t *sizes, int *statuses,
                              CUstream stream, CUdeviceptr space, size_t space_bytes) {
  batch b = make_batch("kvik_decompress_async", codec, 0, num_chunks, src, src_sizes, dst,
                       dst_capacities, sizes, statuses);
  b.space = space;
  b.space_bytes = space_bytes;
  return run_async(&b, stream);
}
