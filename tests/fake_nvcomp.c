/* A fake nvCOMP 6, built as libnvcomp.so.6, for testing kvik's nvCOMP paths on machines without
 * a GPU. fake_nvcomp.h says what it models; this file says how.
 *
 * Each batched call checks its host arguments, then queues a job on the caller's stream as the
 * fake CUDA driver's own work (fake_cuda_launch_driver_work). When the stream reaches it, the job
 * copies the pointer and size arrays and each chunk to the host through the driver's CPU view of
 * device and pinned memory (fake_cuda_host_view), runs the CPU library, and copies the results
 * back the same way. Jobs of different streams run concurrently on their streams' workers; every
 * CPU library call uses state of its own.
 *
 * Locks: g_api.lock (fake_common.h) guards armed call failures, g_chunk_lock armed chunk
 * failures; neither is held during a job or a call into CUDA. */
#include "fake_nvcomp.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/nvcomp_abi.h"
#include "fake_common.h"
#include "fake_cuda.h" /* src/cuda.h, and fake_cuda_launch_driver_work */

#ifdef FAKE_NVCOMP_HAVE_ZSTD
#include <zstd.h>
#endif
#ifdef FAKE_NVCOMP_HAVE_LZ4
#include <lz4.h>
#endif
#ifdef FAKE_NVCOMP_HAVE_SNAPPY
#include <snappy-c.h>
#endif
#ifdef FAKE_NVCOMP_HAVE_ZLIB
#include <zlib.h>
#endif

typedef kvik__nvcomp_status status_t;
typedef kvik__nvcomp_opts opts_t;

#define OK KVIK__nvcompSuccess
#define KiB ((size_t)1024)

/* ---- Formats ------------------------------------------------------------------------------ */

enum { ZSTD, LZ4, SNAPPY, DEFLATE, GZIP, GDEFLATE, CASCADED, BITCOMP, ANS, FORMAT_COUNT };

/* The limits of nvcomp/<format>.h, and how many leading option bytes are fields (the rest must
 * be zero): compression's, decompression's. */
typedef struct format {
  const char *infix;
  int available; /* built with its CPU library; GPU-only formats never are */
  size_t max_compress_chunk, max_decompress_chunk;
  size_t compress_align, decompress_align;
  size_t compress_fields, decompress_fields;
} format;

#ifndef FAKE_NVCOMP_HAVE_ZSTD
#define FAKE_NVCOMP_HAVE_ZSTD 0
#endif
#ifndef FAKE_NVCOMP_HAVE_LZ4
#define FAKE_NVCOMP_HAVE_LZ4 0
#endif
#ifndef FAKE_NVCOMP_HAVE_SNAPPY
#define FAKE_NVCOMP_HAVE_SNAPPY 0
#endif
#ifndef FAKE_NVCOMP_HAVE_ZLIB
#define FAKE_NVCOMP_HAVE_ZLIB 0
#endif

static const format g_formats[FORMAT_COUNT] = {
    [ZSTD] = {"Zstd", FAKE_NVCOMP_HAVE_ZSTD, (1ull << 31) - 1, (1ull << 31) - 1, 4, 8, 0, 4},
    [LZ4] = {"LZ4", FAKE_NVCOMP_HAVE_LZ4, 1ull << 24, (1ull << 32) - 1, 4, 4, 8, 16},
    [SNAPPY] = {"Snappy", FAKE_NVCOMP_HAVE_SNAPPY, 1ull << 24, (1ull << 31) - 1, 1, 1, 0, 8},
    [DEFLATE] = {"Deflate", FAKE_NVCOMP_HAVE_ZLIB, 1ull << 31, (1ull << 32) - 1, 8, 4, 4, 8},
    [GZIP] = {"Gzip", FAKE_NVCOMP_HAVE_ZLIB, 0x7FFFFFFFull << 15, (1ull << 32) - 1, 8, 8, 4, 12},
    [GDEFLATE] = {"Gdeflate", 0, 1ull << 31, (1ull << 32) + 288, 8, 4, 64, 64},
    [CASCADED] = {"Cascaded", 0, 1ull << 24, (1ull << 24) + 8, 8, 8, 64, 64},
    [BITCOMP] = {"Bitcomp", 0, 1ull << 24, 1ull << 25, 8, 8, 64, 64},
    [ANS] = {"ANS", 0, 1ull << 24, 1ull << 25, 16, 16, 64, 64},
};

/* ---- The API this file exports, counted and failed by symbol (fake_common.h) ---------------- */

/* Per format, the functions of src/nvcomp_abi.h in its order; then the library-wide ones. */
enum {
#define KIND_ID_(member, suffix, decl) K_##member,
  KVIK__NVCOMP_FORMAT_FUNCTIONS(KIND_ID_)
#undef KIND_ID_
      KINDS_PER_FORMAT
};
#define FN_GET_PROPERTIES (FORMAT_COUNT * KINDS_PER_FORMAT)
#define FN_GET_STATUS_STRING (FN_GET_PROPERTIES + 1)
#define FN_COUNT (FN_GET_STATUS_STRING + 1)
_Static_assert(FN_COUNT <= FAKE_MAX_FUNCTIONS, "raise FAKE_MAX_FUNCTIONS");

static const char *const g_suffixes[KINDS_PER_FORMAT] = {
#define KIND_SUFFIX_(member, suffix, decl) suffix,
    KVIK__NVCOMP_FORMAT_FUNCTIONS(KIND_SUFFIX_)
#undef KIND_SUFFIX_
};

static char g_name_text[FN_COUNT][64];
static const char *g_names[FN_COUNT];

const char fake_name[] = "fake_nvcomp";
static fake_api g_api = FAKE_API_INIT(g_names, FN_COUNT);
static atomic_long g_chunks;    /* chunks processed, for fake_nvcomp_calls("chunks") */
static atomic_long g_in_flight; /* jobs queued and not finished */

/* The symbols, once, before anything can look one up. */
__attribute__((constructor)) static void names_init(void) {
  for (int f = 0; f < FORMAT_COUNT; f++)
    for (int k = 0; k < KINDS_PER_FORMAT; k++) {
      char *name = g_name_text[f * KINDS_PER_FORMAT + k];
      snprintf(name, sizeof g_name_text[0], "nvcompBatched%s%s", g_formats[f].infix,
               g_suffixes[k]);
    }
  snprintf(g_name_text[FN_GET_PROPERTIES], sizeof g_name_text[0], "nvcompGetProperties");
  snprintf(g_name_text[FN_GET_STATUS_STRING], sizeof g_name_text[0], "nvcompGetStatusString");
  for (int i = 0; i < FN_COUNT; i++) g_names[i] = g_name_text[i];
}

/* Chunk failures armed with fake_nvcomp_fail_chunk. */
typedef struct chunk_armed {
  int fn, countdown, status;
  size_t chunk;
} chunk_armed;

static pthread_mutex_t g_chunk_lock = PTHREAD_MUTEX_INITIALIZER;
static chunk_armed g_chunk_armed[FAKE_MAX_ARMED];
static int g_nchunk_armed;

static int symbol_fn(const char *what, const char *symbol) {
  int fn = fake_name_index(g_names, FN_COUNT, symbol);
  if (fn < 0) fake_die("%s: unknown symbol '%s'", what, symbol ? symbol : "(null)");
  return fn;
}

void fake_nvcomp_fail(const char *symbol, int nth, int status) {
  int fn = symbol_fn("fake_nvcomp_fail", symbol);
  if (fn == FN_GET_STATUS_STRING || nth < 0 || status == 0)
    fake_die("fake_nvcomp_fail(%s, %d, %d): cannot be armed", symbol, nth, status);
  fake_api_arm(&g_api, fn, nth, status);
}

static int is_batched(int fn) {
  int k = fn % KINDS_PER_FORMAT;
  return fn < FN_GET_PROPERTIES &&
         (k == K_compress_async || k == K_decompress_async || k == K_decompress_size_async);
}

void fake_nvcomp_fail_chunk(const char *symbol, int nth, size_t chunk, int status) {
  int fn = symbol_fn("fake_nvcomp_fail_chunk", symbol);
  if (!is_batched(fn) || nth < 1 || status == 0)
    fake_die("fake_nvcomp_fail_chunk(%s, %d, %zu, %d): cannot be armed", symbol, nth, chunk,
             status);
  pthread_mutex_lock(&g_chunk_lock);
  if (g_nchunk_armed == FAKE_MAX_ARMED)
    fake_die("more than %d chunk failures armed at once", FAKE_MAX_ARMED);
  g_chunk_armed[g_nchunk_armed++] = (chunk_armed){fn, nth, status, chunk};
  pthread_mutex_unlock(&g_chunk_lock);
}

long fake_nvcomp_calls(const char *symbol) {
  if (symbol && strcmp(symbol, "chunks") == 0) return atomic_load(&g_chunks);
  return fake_api_calls(&g_api, symbol);
}

long fake_nvcomp_live(const char *what) {
  if (what && strcmp(what, "in_flight") == 0) return atomic_load(&g_in_flight);
  return -1;
}

void fake_nvcomp_reset(void) {
  fake_api_reset(&g_api);
  pthread_mutex_lock(&g_chunk_lock);
  g_nchunk_armed = 0;
  pthread_mutex_unlock(&g_chunk_lock);
  atomic_store(&g_chunks, 0);
}

/* ---- The CUDA driver ---------------------------------------------------------------------- */

typedef struct cuda_fns {
  CUresult (*launch)(CUstream stream, CUhostFn fn, void *user_data);
  void *(*host_view)(CUdeviceptr ptr, size_t size);
} cuda_fns;

static cuda_fns g_cuda;
static fake_loaded g_cuda_loaded = FAKE_LOADED_INIT;

/* Only the fake CUDA driver's control API (fake_cuda.h): its stream work, and its view of device
 * memory, which also covers memory freed by cuMemFreeAsync after the batch was queued. */
static int cuda_resolve(void *lib) {
  *(void **)&g_cuda.launch = dlsym(lib, "fake_cuda_launch_driver_work");
  *(void **)&g_cuda.host_view = dlsym(lib, "fake_cuda_host_view");
  return g_cuda.launch && g_cuda.host_view;
}

/* The fake CUDA driver once the process has loaded it, else NULL: as the real nvCOMP, the fake
 * works only in a process that uses CUDA, and it needs the fake driver's stream work. */
static const cuda_fns *cuda(void) {
  return fake_once_loaded(&g_cuda_loaded, "libcuda.so.1", cuda_resolve) ? &g_cuda : NULL;
}

/* ---- The CPU libraries -------------------------------------------------------------------- */

/* What a chunk of n bytes compresses to at most. */
static size_t max_output(int f, size_t n) {
  (void)n;
  switch (f) {
#if FAKE_NVCOMP_HAVE_ZSTD
  case ZSTD: return ZSTD_compressBound(n);
#endif
#if FAKE_NVCOMP_HAVE_LZ4
  case LZ4: return (size_t)LZ4_compressBound((int)n);
#endif
#if FAKE_NVCOMP_HAVE_SNAPPY
  case SNAPPY: return snappy_max_compressed_length(n);
#endif
#if FAKE_NVCOMP_HAVE_ZLIB
  case DEFLATE: return compressBound((uLong)n);
  case GZIP: return compressBound((uLong)n) + 18;
#endif
  default: return 0;
  }
}

#if FAKE_NVCOMP_HAVE_ZLIB
/* zlib's level and strategy for nvCOMP's deflate/gzip `algorithm` 0..5 (0: entropy only). */
static void zlib_level(int algorithm, int *level, int *strategy) {
  static const int levels[] = {1, 1, 3, 3, 6, 9};
  *level = levels[algorithm];
  *strategy = algorithm == 0 ? Z_HUFFMAN_ONLY : Z_DEFAULT_STRATEGY;
}

static status_t zlib_compress(int window_bits, int algorithm, const void *in, size_t n, void *out,
                              size_t cap, size_t *written) {
  if (n > UINT_MAX || cap > UINT_MAX) return KVIK__nvcompErrorCannotCompress;
  int level, strategy;
  zlib_level(algorithm, &level, &strategy);
  z_stream z = {0};
  if (deflateInit2(&z, level, Z_DEFLATED, window_bits, 8, strategy) != Z_OK)
    return KVIK__nvcompErrorInternal;
  z.next_in = (Bytef *)(uintptr_t)in;
  z.avail_in = (uInt)n;
  z.next_out = out;
  z.avail_out = (uInt)cap;
  int rc = deflate(&z, Z_FINISH);
  *written = z.total_out;
  deflateEnd(&z);
  return rc == Z_STREAM_END ? OK : KVIK__nvcompErrorCannotCompress;
}

/* Inflates into out (cap bytes); with out NULL, only counts, through a scratch buffer. */
static status_t zlib_decompress(int window_bits, const void *in, size_t n, void *out, size_t cap,
                                size_t *written) {
  if (n > UINT_MAX) return KVIK__nvcompErrorCannotDecompress;
  unsigned char scratch[16 * 1024];
  z_stream z = {0};
  if (inflateInit2(&z, window_bits) != Z_OK) return KVIK__nvcompErrorInternal;
  z.next_in = (Bytef *)(uintptr_t)in;
  z.avail_in = (uInt)n;
  int rc;
  size_t total = 0;
  do {
    size_t room = out ? cap - total : sizeof scratch;
    z.next_out = out ? (Bytef *)out + total : scratch;
    z.avail_out = (uInt)(room > UINT_MAX ? UINT_MAX : room);
    uInt before = z.avail_out;
    rc = inflate(&z, Z_FINISH);
    total += before - z.avail_out;
  } while ((rc == Z_BUF_ERROR || rc == Z_OK) && z.avail_in > 0 && (!out || total < cap) &&
           z.avail_out == 0);
  inflateEnd(&z);
  *written = total;
  return rc == Z_STREAM_END ? OK : KVIK__nvcompErrorCannotDecompress;
}
#endif

#if FAKE_NVCOMP_HAVE_LZ4
/* Adds the extension bytes of an LZ4 length that starts at 15; 0 if the block ends first. */
static int lz4_length(const unsigned char *p, size_t n, size_t *i, size_t *length) {
  if (*length != 15) return 1;
  unsigned b;
  do {
    if (*i >= n) return 0;
    b = p[(*i)++];
    *length += b;
  } while (b == 255);
  return 1;
}

/* The decompressed size of a raw LZ4 block, by walking its sequences; 0 if it is malformed. */
static size_t lz4_block_size(const unsigned char *p, size_t n) {
  size_t i = 0, out = 0;
  for (;;) {
    if (i >= n) return 0;
    unsigned token = p[i++];
    size_t literals = token >> 4;
    if (!lz4_length(p, n, &i, &literals) || literals > n - i) return 0;
    i += literals;
    out += literals;
    if (i == n) return out; /* the last sequence has literals only */
    if (n - i < 2) return 0;
    size_t offset = p[i] | (size_t)p[i + 1] << 8;
    i += 2;
    size_t match = token & 15;
    if (offset == 0 || offset > out || !lz4_length(p, n, &i, &match)) return 0;
    out += match + 4;
  }
}
#endif

/* Compresses n bytes into out (cap bytes, at least max_output(f, n)). */
static status_t compress_chunk(int f, const opts_t *o, const void *in, size_t n, void *out,
                               size_t cap, size_t *written) {
  (void)o;
  (void)in;
  (void)n;
  (void)out;
  (void)cap;
  *written = 0;
  switch (f) {
#if FAKE_NVCOMP_HAVE_ZSTD
  case ZSTD: {
    size_t rc = ZSTD_compress(out, cap, in, n, 3);
    if (ZSTD_isError(rc)) return KVIK__nvcompErrorCannotCompress;
    *written = rc;
    return OK;
  }
#endif
#if FAKE_NVCOMP_HAVE_LZ4
  case LZ4: {
    int rc = LZ4_compress_default(in, out, (int)n, (int)cap);
    if (rc <= 0 && n > 0) return KVIK__nvcompErrorCannotCompress;
    *written = (size_t)rc;
    return OK;
  }
#endif
#if FAKE_NVCOMP_HAVE_SNAPPY
  case SNAPPY:
    *written = cap;
    return snappy_compress(in, n, out, written) == SNAPPY_OK ? OK
                                                             : KVIK__nvcompErrorCannotCompress;
#endif
#if FAKE_NVCOMP_HAVE_ZLIB
  case DEFLATE: return zlib_compress(-15, o->deflate.algorithm, in, n, out, cap, written);
  case GZIP: return zlib_compress(31, o->deflate.algorithm, in, n, out, cap, written);
#endif
  default: return KVIK__nvcompErrorNotSupported;
  }
}

/* Decompresses n bytes into out (cap bytes); any failure, a too small output included, is
 * nvcompErrorCannotDecompress, as nvCOMP reports both. */
static status_t decompress_chunk(int f, const void *in, size_t n, void *out, size_t cap,
                                 size_t *written) {
  (void)in;
  (void)n;
  (void)out;
  (void)cap;
  *written = 0;
  status_t bad = KVIK__nvcompErrorCannotDecompress;
  if (n == 0) return bad; /* no format encodes anything, not even nothing, in zero bytes */
  switch (f) {
#if FAKE_NVCOMP_HAVE_ZSTD
  case ZSTD: {
    size_t rc = ZSTD_decompress(out, cap, in, n);
    if (ZSTD_isError(rc)) return bad;
    *written = rc;
    return OK;
  }
#endif
#if FAKE_NVCOMP_HAVE_LZ4
  case LZ4: {
    if (n > INT_MAX) return bad;
    int rc = LZ4_decompress_safe(in, out, (int)n, cap > INT_MAX ? INT_MAX : (int)cap);
    if (rc < 0) return bad;
    *written = (size_t)rc;
    return OK;
  }
#endif
#if FAKE_NVCOMP_HAVE_SNAPPY
  case SNAPPY:
    *written = cap;
    if (snappy_uncompress(in, n, out, written) == SNAPPY_OK) return OK;
    *written = 0;
    return bad;
#endif
#if FAKE_NVCOMP_HAVE_ZLIB
  case DEFLATE:
  case GZIP: {
    status_t st = zlib_decompress(f == GZIP ? 31 : -15, in, n, out, cap, written);
    if (st != OK) *written = 0;
    return st;
  }
#endif
  default: return KVIK__nvcompErrorNotSupported;
  }
}

/* The decompressed size of a chunk, from its header where the format has one; 0 if unknown. */
static size_t decompressed_size(int f, const void *in, size_t n) {
  (void)in;
  (void)n;
  switch (f) {
#if FAKE_NVCOMP_HAVE_ZSTD
  case ZSTD: {
    unsigned long long size = ZSTD_getFrameContentSize(in, n);
    return size >= ZSTD_CONTENTSIZE_ERROR ? 0 : (size_t)size;
  }
#endif
#if FAKE_NVCOMP_HAVE_LZ4
  case LZ4: return lz4_block_size(in, n);
#endif
#if FAKE_NVCOMP_HAVE_SNAPPY
  case SNAPPY: {
    size_t size;
    return snappy_uncompressed_length(in, n, &size) == SNAPPY_OK ? size : 0;
  }
#endif
#if FAKE_NVCOMP_HAVE_ZLIB
  case DEFLATE:
  case GZIP: {
    size_t size;
    return zlib_decompress(f == GZIP ? 31 : -15, in, n, NULL, 0, &size) == OK ? size : 0;
  }
#endif
  default: return 0;
  }
}

/* ---- Jobs: one batched call, run in stream order ------------------------------------------ */

typedef struct job {
  int f, kind, fn;
  size_t n;
  const void *const *in_ptrs;
  const size_t *in_sizes;
  const size_t *capacities; /* decompression: each output buffer's size */
  size_t *sizes;            /* compressed, decompressed or actual sizes; may be NULL */
  void *const *out_ptrs;
  status_t *statuses; /* may be NULL */
  void *temp;
  size_t temp_bytes;
  size_t max_chunk; /* compression */
  opts_t opts;
  int nfails;
  chunk_armed fails[FAKE_MAX_ARMED];
} job;

/* The CPU's view of [p, p + size): device, managed, pinned or registered memory. Anything else
 * (pageable host memory, a range past the end of its allocation) the real GPU would fault on,
 * so the fake dies naming `what`. */
static unsigned char *mem_view(const job *j, const char *what, const void *p, size_t size) {
  unsigned char *cpu = g_cuda.host_view((CUdeviceptr)(uintptr_t)p, size ? size : 1);
  if (!cpu)
    fake_die("%s: %s: %zu bytes at %p are not in one device-accessible allocation",
             g_names[j->fn], what, size, p);
  return cpu;
}

static void mem_read(const job *j, const char *what, const void *src, void *host, size_t size) {
  if (size) memcpy(host, mem_view(j, what, src, size), size);
}

static void mem_write(const job *j, const char *what, void *dst, const void *host, size_t size) {
  if (size) memcpy(mem_view(j, what, dst, size), host, size);
}

/* Zeroed, so that an array the call does not have (capacities of compression) reads as 0. */
static void *must_alloc(const job *j, size_t size) {
  void *p = calloc(1, size ? size : 1);
  if (!p) fake_die("%s: out of memory for %zu bytes", g_names[j->fn], size);
  return p;
}

/* One chunk: its status, and its size in *size. */
static status_t chunk_run(const job *j, const void *in, size_t n, size_t capacity, void *out,
                          size_t *size) {
  const format *fmt = &g_formats[j->f];
  *size = 0;
  size_t align = j->kind == K_compress_async ? fmt->compress_align : fmt->decompress_align;
  if ((uintptr_t)in % align || (out && (uintptr_t)out % align)) return KVIK__nvcompErrorAlignment;
  if (j->kind == K_compress_async) {
    if (n > j->max_chunk) return KVIK__nvcompErrorInvalidValue;
    capacity = max_output(j->f, j->max_chunk);
  }
  unsigned char *host_in = must_alloc(j, n);
  mem_read(j, "a chunk's input", in, host_in, n);
  status_t st = OK;
  if (j->kind == K_decompress_size_async) {
    *size = decompressed_size(j->f, host_in, n);
  } else {
    if (capacity) mem_view(j, "a chunk's output buffer", out, capacity);
    unsigned char *host_out = must_alloc(j, capacity);
    st = j->kind == K_compress_async
             ? compress_chunk(j->f, &j->opts, host_in, n, host_out, capacity, size)
             : decompress_chunk(j->f, host_in, n, host_out, capacity, size);
    if (st == OK) mem_write(j, "a chunk's output", out, host_out, *size);
    else *size = 0;
    free(host_out);
  }
  free(host_in);
  return st;
}

/* The status armed for chunk i of this job, or 0. */
static int chunk_failure(const job *j, size_t i) {
  for (int k = 0; k < j->nfails; k++)
    if (j->fails[k].chunk == i) return j->fails[k].status;
  return 0;
}

static void job_run(void *arg) {
  job *j = arg;
  fake_sleep_us(fake_env_long("FAKE_NVCOMP_DELAY_US", 200, 60L * 1000 * 1000));
  size_t n = j->n;
  const void **in = must_alloc(j, n * sizeof *in);
  void **out = must_alloc(j, n * sizeof *out);
  size_t *in_sizes = must_alloc(j, n * sizeof *in_sizes);
  size_t *capacities = must_alloc(j, n * sizeof *capacities);
  size_t *sizes = must_alloc(j, n * sizeof *sizes);
  status_t *statuses = must_alloc(j, n * sizeof *statuses);
  mem_read(j, "the chunk pointers", j->in_ptrs, in, n * sizeof *in);
  mem_read(j, "the chunk sizes", j->in_sizes, in_sizes, n * sizeof *in_sizes);
  if (j->capacities)
    mem_read(j, "the output buffer sizes", j->capacities, capacities, n * sizeof *capacities);
  if (j->out_ptrs) mem_read(j, "the output pointers", j->out_ptrs, out, n * sizeof *out);
  /* Decoding needs its temporary space zeroed, as kvik gives it: the real nvCOMP 6's zstd decoder
   * never finished a corrupt chunk in space an earlier call had used. Every call leaves its space
   * used, so that space given again without zeroing shows. */
  unsigned char *temp = j->temp_bytes ? mem_view(j, "device_temp_ptr", j->temp, j->temp_bytes) : 0;
  for (size_t i = 0; temp && j->kind == K_decompress_async && i < j->temp_bytes; i++)
    if (temp[i]) fake_die("%s: temporary space not zeroed (byte %zu)", g_names[j->fn], i);
  if (temp) memset(temp, 0xa5, j->temp_bytes);
  for (size_t i = 0; i < n; i++) {
    int failure = chunk_failure(j, i);
    sizes[i] = failure == FAKE_NVCOMP_OVERSIZE ? capacities[i] + 1 : 0;
    statuses[i] = failure == FAKE_NVCOMP_OVERSIZE ? 0
                  : failure                       ? (status_t)failure
                                                  : chunk_run(j, in[i], in_sizes[i], capacities[i],
                                                              j->out_ptrs ? out[i] : NULL, &sizes[i]);
  }
  atomic_fetch_add(&g_chunks, (long)n);
  if (j->sizes) mem_write(j, "the sizes", j->sizes, sizes, n * sizeof *sizes);
  if (j->statuses) mem_write(j, "device_statuses", j->statuses, statuses, n * sizeof *statuses);
  free(in);
  free(out);
  free(in_sizes);
  free(capacities);
  free(sizes);
  free(statuses);
  free(j);
  atomic_fetch_sub(&g_in_flight, 1);
}

/* The chunk failures armed for this call of fn, spent into j. */
static void take_chunk_failures(job *j) {
  pthread_mutex_lock(&g_chunk_lock);
  for (int i = 0; i < g_nchunk_armed;) {
    chunk_armed *a = &g_chunk_armed[i];
    if (a->fn == j->fn && --a->countdown == 0) {
      j->fails[j->nfails++] = *a;
      *a = g_chunk_armed[--g_nchunk_armed];
    } else {
      i++;
    }
  }
  pthread_mutex_unlock(&g_chunk_lock);
}

/* Queue j (a heap copy of model) on stream. */
static status_t job_queue(const job *model, CUstream stream) {
  const cuda_fns *cu = cuda();
  if (!cu) return KVIK__nvcompErrorCudaError;
  job *j = malloc(sizeof *j);
  if (!j) return KVIK__nvcompErrorInternal;
  *j = *model;
  take_chunk_failures(j);
  atomic_fetch_add(&g_in_flight, 1);
  if (cu->launch(stream, job_run, j) != CUDA_SUCCESS) {
    atomic_fetch_sub(&g_in_flight, 1);
    free(j);
    return KVIK__nvcompErrorCudaError;
  }
  return OK;
}

/* ---- Host-side checks ----------------------------------------------------------------------- */

/* Counts the call; the status armed for it, else nvcompErrorNotSupported for a format the fake
 * cannot run, else 0. */
static status_t enter(int f, int kind) {
  int armed = fake_api_call(&g_api, f * KINDS_PER_FORMAT + kind);
  if (armed) return (status_t)armed;
  return g_formats[f].available ? OK : KVIK__nvcompErrorNotSupported;
}

static int lz4_type_valid(int type) {
  return (type >= 0 && type <= 7) || (type >= 9 && type <= 12) || type == 0xff;
}

/* The options' fields in range and their unused bytes zero. */
static status_t check_opts(int f, int compress, const opts_t *o) {
  const format *fmt = &g_formats[f];
  for (size_t i = compress ? fmt->compress_fields : fmt->decompress_fields; i < sizeof o->bytes;
       i++)
    if (o->bytes[i]) return KVIK__nvcompErrorInvalidValue;
  int field[4];
  memcpy(field, o->bytes, sizeof field);
  if (compress && (f == DEFLATE || f == GZIP) && (field[0] < 0 || field[0] > 5))
    return KVIK__nvcompErrorInvalidValue;
  if (compress && f == LZ4 && !lz4_type_valid(field[0])) return KVIK__nvcompErrorInvalidValue;
  if (compress && f == LZ4 && field[1] != 0) return KVIK__nvcompErrorNotSupported;
  if (compress) return OK;
  if (field[0] < 0 || field[0] > 2) return KVIK__nvcompErrorInvalidValue; /* the backend */
  if (f == GZIP && (field[1] < 0 || field[1] > 1)) return KVIK__nvcompErrorInvalidValue;
  if (f == LZ4 && !lz4_type_valid(field[2])) return KVIK__nvcompErrorInvalidValue;
  if (f == LZ4 && field[3] != 0) return KVIK__nvcompErrorNotSupported;
  return OK;
}

static size_t temp_needed(int f, size_t num_chunks) {
  return f == SNAPPY ? 0 : KiB + 64 * num_chunks;
}

static status_t check_temp(int f, size_t align, size_t num_chunks, const void *temp,
                           size_t temp_bytes) {
  size_t needed = temp_needed(f, num_chunks);
  if (temp_bytes < needed || (needed && !temp)) return KVIK__nvcompErrorInvalidValue;
  return (uintptr_t)temp % align ? KVIK__nvcompErrorAlignment : OK;
}

/* ---- The exported functions ----------------------------------------------------------------- */

static status_t alignments(int f, int kind, const opts_t *o, kvik__nvcomp_alignments *out) {
  status_t st = enter(f, kind);
  if (st) return st;
  if (!out) return KVIK__nvcompErrorInvalidValue;
  int compress = kind == K_compress_alignments;
  if ((st = check_opts(f, compress, o))) return st;
  size_t align = compress ? g_formats[f].compress_align : g_formats[f].decompress_align;
  *out = (kvik__nvcomp_alignments){align, align, temp_needed(f, 1) ? align : 1};
  return OK;
}

static status_t temp_size(int f, int kind, size_t num_chunks, size_t max_chunk, const opts_t *o,
                          size_t *temp_bytes) {
  status_t st = enter(f, kind);
  if (st) return st;
  if (!temp_bytes) return KVIK__nvcompErrorInvalidValue;
  int compress = kind == K_compress_temp_size;
  if ((st = check_opts(f, compress, o))) return st;
  const format *fmt = &g_formats[f];
  if (max_chunk > (compress ? fmt->max_compress_chunk : fmt->max_decompress_chunk))
    return KVIK__nvcompErrorChunkSizeTooLarge;
  *temp_bytes = temp_needed(f, num_chunks);
  return OK;
}

static status_t max_output_size(int f, size_t max_chunk, const opts_t *o, size_t *out) {
  status_t st = enter(f, K_compress_max_output);
  if (st) return st;
  if (!out) return KVIK__nvcompErrorInvalidValue;
  if ((st = check_opts(f, 1, o))) return st;
  if (max_chunk > g_formats[f].max_compress_chunk) return KVIK__nvcompErrorChunkSizeTooLarge;
  *out = max_output(f, max_chunk);
  return OK;
}

static status_t compress_async(int f, const void *const *in, const size_t *in_sizes,
                               size_t max_chunk, size_t n, void *temp, size_t temp_bytes,
                               void *const *out, size_t *out_sizes, const opts_t *o,
                               status_t *statuses, CUstream stream) {
  status_t st = enter(f, K_compress_async);
  if (st) return st;
  if (!in || !in_sizes || !out || !out_sizes) return KVIK__nvcompErrorInvalidValue;
  if ((st = check_opts(f, 1, o))) return st;
  if (max_chunk > g_formats[f].max_compress_chunk) return KVIK__nvcompErrorChunkSizeTooLarge;
  if ((st = check_temp(f, g_formats[f].compress_align, n, temp, temp_bytes))) return st;
  if (n == 0) return OK;
  job j = {.f = f, .kind = K_compress_async, .fn = f * KINDS_PER_FORMAT + K_compress_async,
           .n = n, .in_ptrs = in, .in_sizes = in_sizes, .sizes = out_sizes, .out_ptrs = out,
           .statuses = statuses, .temp = temp, .temp_bytes = temp_bytes,
           .max_chunk = max_chunk, .opts = *o};
  return job_queue(&j, stream);
}

static status_t decompress_size_async(int f, const void *const *in, const size_t *in_sizes,
                                      size_t *sizes, size_t n, CUstream stream) {
  status_t st = enter(f, K_decompress_size_async);
  if (st) return st;
  if (!in || !in_sizes || !sizes) return KVIK__nvcompErrorInvalidValue;
  if (n == 0) return OK;
  job j = {.f = f, .kind = K_decompress_size_async,
           .fn = f * KINDS_PER_FORMAT + K_decompress_size_async, .n = n, .in_ptrs = in,
           .in_sizes = in_sizes, .sizes = sizes};
  return job_queue(&j, stream);
}

static status_t decompress_async(int f, const void *const *in, const size_t *in_sizes,
                                 const size_t *capacities, size_t *sizes, size_t n, void *temp,
                                 size_t temp_bytes, void *const *out, const opts_t *o,
                                 status_t *statuses, CUstream stream) {
  status_t st = enter(f, K_decompress_async);
  if (st) return st;
  if (!in || !in_sizes || !capacities || !out) return KVIK__nvcompErrorInvalidValue;
  if ((st = check_opts(f, 0, o))) return st;
  if ((st = check_temp(f, g_formats[f].decompress_align, n, temp, temp_bytes))) return st;
  if (n == 0) return OK;
  job j = {.f = f, .kind = K_decompress_async, .fn = f * KINDS_PER_FORMAT + K_decompress_async,
           .n = n, .in_ptrs = in, .in_sizes = in_sizes, .capacities = capacities,
           .sizes = sizes, .out_ptrs = out, .statuses = statuses, .temp = temp,
           .temp_bytes = temp_bytes, .opts = *o};
  return job_queue(&j, stream);
}

/* Each format's eight functions, under their real symbols, declared with src/nvcomp_abi.h's
 * declarators first so that a definition that strays from them does not compile. */
#define DEFINE_FORMAT(F, Infix)                                                                  \
  KVIK__NVCOMP_COMPRESS_ALIGNMENTS(nvcompBatched##Infix##CompressGetRequiredAlignments,         \
                                   status_t, opts_t);                                           \
  KVIK__NVCOMP_COMPRESS_TEMP_SIZE(nvcompBatched##Infix##CompressGetTempSize, status_t, opts_t); \
  KVIK__NVCOMP_COMPRESS_MAX_OUTPUT(nvcompBatched##Infix##CompressGetMaxOutputChunkSize,         \
                                   status_t, opts_t);                                           \
  KVIK__NVCOMP_COMPRESS_ASYNC(nvcompBatched##Infix##CompressAsync, status_t, opts_t);           \
  KVIK__NVCOMP_DECOMPRESS_ALIGNMENTS(nvcompBatched##Infix##DecompressGetRequiredAlignments,     \
                                     status_t, opts_t);                                         \
  KVIK__NVCOMP_DECOMPRESS_TEMP_SIZE(nvcompBatched##Infix##DecompressGetTempSize, status_t,      \
                                    opts_t);                                                    \
  KVIK__NVCOMP_DECOMPRESS_SIZE_ASYNC(nvcompBatched##Infix##GetDecompressSizeAsync, status_t,    \
                                     opts_t);                                                   \
  KVIK__NVCOMP_DECOMPRESS_ASYNC(nvcompBatched##Infix##DecompressAsync, status_t, opts_t);       \
  KVIK__NVCOMP_COMPRESS_ALIGNMENTS(nvcompBatched##Infix##CompressGetRequiredAlignments,         \
                                   status_t, opts_t) {                                          \
    return alignments(F, K_compress_alignments, &compress_opts, alignment_requirements);        \
  }                                                                                              \
  KVIK__NVCOMP_COMPRESS_TEMP_SIZE(nvcompBatched##Infix##CompressGetTempSize, status_t, opts_t) { \
    (void)max_total_uncompressed_bytes;                                                          \
    (void)stream;                                                                                \
    return temp_size(F, K_compress_temp_size, num_chunks, max_uncompressed_chunk_bytes,         \
                     &compress_opts, temp_bytes);                                               \
  }                                                                                              \
  KVIK__NVCOMP_COMPRESS_MAX_OUTPUT(nvcompBatched##Infix##CompressGetMaxOutputChunkSize,         \
                                   status_t, opts_t) {                                          \
    return max_output_size(F, max_uncompressed_chunk_bytes, &compress_opts,                     \
                           max_compressed_chunk_bytes);                                         \
  }                                                                                              \
  KVIK__NVCOMP_COMPRESS_ASYNC(nvcompBatched##Infix##CompressAsync, status_t, opts_t) {          \
    return compress_async(F, device_uncompressed_chunk_ptrs, device_uncompressed_chunk_bytes,   \
                          max_uncompressed_chunk_bytes, num_chunks, device_temp_ptr,            \
                          temp_bytes, device_compressed_chunk_ptrs,                             \
                          device_compressed_chunk_bytes, &compress_opts, device_statuses,       \
                          stream);                                                              \
  }                                                                                              \
  KVIK__NVCOMP_DECOMPRESS_ALIGNMENTS(nvcompBatched##Infix##DecompressGetRequiredAlignments,     \
                                     status_t, opts_t) {                                        \
    return alignments(F, K_decompress_alignments, &decompress_opts, alignment_requirements);    \
  }                                                                                              \
  KVIK__NVCOMP_DECOMPRESS_TEMP_SIZE(nvcompBatched##Infix##DecompressGetTempSize, status_t,      \
                                    opts_t) {                                                   \
    (void)max_total_uncompressed_bytes;                                                          \
    (void)stream;                                                                                \
    return temp_size(F, K_decompress_temp_size, num_chunks, max_uncompressed_chunk_bytes,       \
                     &decompress_opts, temp_bytes);                                             \
  }                                                                                              \
  KVIK__NVCOMP_DECOMPRESS_SIZE_ASYNC(nvcompBatched##Infix##GetDecompressSizeAsync, status_t,    \
                                     opts_t) {                                                  \
    return decompress_size_async(F, device_compressed_chunk_ptrs,                               \
                                 device_compressed_chunk_bytes,                                 \
                                 device_uncompressed_chunk_bytes, num_chunks, stream);          \
  }                                                                                              \
  KVIK__NVCOMP_DECOMPRESS_ASYNC(nvcompBatched##Infix##DecompressAsync, status_t, opts_t) {      \
    return decompress_async(F, device_compressed_chunk_ptrs, device_compressed_chunk_bytes,     \
                            device_uncompressed_buffer_bytes, device_uncompressed_chunk_bytes,  \
                            num_chunks, device_temp_ptr, temp_bytes,                            \
                            device_uncompressed_chunk_ptrs, &decompress_opts, device_statuses,  \
                            stream);                                                            \
  }

/* A format whose CPU library is missing is left out, so that kvik sees it as not offered; the
 * GPU-only ones are there, and answer nvcompErrorNotSupported. */
#if FAKE_NVCOMP_HAVE_ZSTD
DEFINE_FORMAT(ZSTD, Zstd)
#endif
#if FAKE_NVCOMP_HAVE_LZ4
DEFINE_FORMAT(LZ4, LZ4)
#endif
#if FAKE_NVCOMP_HAVE_SNAPPY
DEFINE_FORMAT(SNAPPY, Snappy)
#endif
#if FAKE_NVCOMP_HAVE_ZLIB
DEFINE_FORMAT(DEFLATE, Deflate)
DEFINE_FORMAT(GZIP, Gzip)
#endif
DEFINE_FORMAT(GDEFLATE, Gdeflate)
DEFINE_FORMAT(CASCADED, Cascaded)
DEFINE_FORMAT(BITCOMP, Bitcomp)
DEFINE_FORMAT(ANS, ANS)

/* Declared under src/nvcomp_abi.h's types, so that a definition that strays does not compile. */
#define DECLARE_GLOBAL_(member, symbol, ret, params) ret member params __asm__(symbol);
KVIK__NVCOMP_FUNCTIONS(DECLARE_GLOBAL_)

status_t get_properties(kvik__nvcomp_properties *properties) {
  int armed = fake_api_call(&g_api, FN_GET_PROPERTIES);
  if (armed) return (status_t)armed;
  if (!properties) return KVIK__nvcompErrorInvalidValue;
  long version = fake_env_long("FAKE_NVCOMP_VERSION", 6000, 99999);
  *properties = (kvik__nvcomp_properties){(uint32_t)version, 13000};
  return OK;
}

const char *get_status_string(status_t status) {
  fake_api_call(&g_api, FN_GET_STATUS_STRING);
  switch (status) {
#define STATUS_TEXT_(name, value, text)                                                          \
  case KVIK__##name: return text;
    KVIK__NVCOMP_STATUSES(STATUS_TEXT_)
#undef STATUS_TEXT_
  default: return "nvCOMP: unknown status";
  }
}
