/* Tests of the fake nvCOMP (fake_nvcomp.c) itself. It is reached as kvik reaches it, through
 * dlopen("libnvcomp.so.6") and dlsym, on the fake CUDA driver's device memory and streams
 * (ctest's LD_LIBRARY_PATH decides which libraries load). Skips (77) when the libraries that load
 * are not the fakes. Each format's data is checked against its CPU library directly, both ways,
 * where the build found that library (the same FAKE_NVCOMP_HAVE_* as the fake's). */
#include <dlfcn.h>
#include <pthread.h>

#include "../src/nvcomp_abi.h"
#include "fake_cuda.h"
#include "fake_nvcomp.h"
#include "test.h"

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

/* test.h prints kvik's last error when an assertion fails; this program does not link kvik. */
const char *kvik_last_error(void) { return "(none: the fake nvCOMP's selftest does not use kvik)"; }

enum { ZSTD, LZ4, SNAPPY, DEFLATE, GZIP, GDEFLATE, CASCADED, BITCOMP, ANS, FORMAT_COUNT };
static const char *const infixes[FORMAT_COUNT] = {
#define INFIX_(codec, infix, gpu_only) infix,
    KVIK__NVCOMP_FORMATS(INFIX_)
#undef INFIX_
};
static const int gpu_only[FORMAT_COUNT] = {
#define GPU_ONLY_(codec, infix, gpu_only) gpu_only,
    KVIK__NVCOMP_FORMATS(GPU_ONLY_)
#undef GPU_ONLY_
};

typedef kvik__nvcomp_status status_t;
typedef kvik__nvcomp_opts opts_t;
#define S(name) KVIK__##name

static kvik__cuda_api cu;
static kvik__nvcomp_format_api nv[FORMAT_COUNT];
static int have[FORMAT_COUNT]; /* the fake exports the format */
static status_t (*get_properties)(kvik__nvcomp_properties *properties);
static const char *(*get_status_string)(status_t status);
static fake_nvcomp_fail_fn fake_fail;
static fake_nvcomp_fail_chunk_fn fake_fail_chunk;
static fake_nvcomp_calls_fn fake_calls;
static fake_nvcomp_live_fn fake_live;
static fake_nvcomp_reset_fn fake_reset;
static CUcontext ctx;

#define CU_OK(call) ASSERT_EQ((call), CUDA_SUCCESS)
#define NV_OK(call) ASSERT_EQ((call), S(nvcompSuccess))

static void *must_find(void *lib, const char *symbol) {
  void *fn = dlsym(lib, symbol);
  if (!fn) FAIL_AT("no %s in the library loaded", symbol);
  return fn;
}

static void load(void *cuda, void *nvcomp) {
#define LOAD_CU_(member, symbol, ret, params) cu.member = (ret(*) params)must_find(cuda, symbol);
  KVIK__CUDA_FUNCTIONS(LOAD_CU_)
#undef LOAD_CU_
  for (int f = 0; f < FORMAT_COUNT; f++) {
    char name[96];
    snprintf(name, sizeof name, "nvcompBatched%sCompressAsync", infixes[f]);
    have[f] = dlsym(nvcomp, name) != NULL;
    if (!have[f]) {
      printf("the fake was built without %s\n", infixes[f]);
      continue;
    }
#define LOAD_NV_(member, suffix, decl)                                                           \
  snprintf(name, sizeof name, "nvcompBatched%s%s", infixes[f], suffix);                         \
  *(void **)&nv[f].member = must_find(nvcomp, name);
    KVIK__NVCOMP_FORMAT_FUNCTIONS(LOAD_NV_)
#undef LOAD_NV_
  }
  *(void **)&get_properties = must_find(nvcomp, "nvcompGetProperties");
  *(void **)&get_status_string = must_find(nvcomp, "nvcompGetStatusString");
  fake_fail = (fake_nvcomp_fail_fn)must_find(nvcomp, "fake_nvcomp_fail");
  fake_fail_chunk = (fake_nvcomp_fail_chunk_fn)must_find(nvcomp, "fake_nvcomp_fail_chunk");
  fake_calls = (fake_nvcomp_calls_fn)must_find(nvcomp, "fake_nvcomp_calls");
  fake_live = (fake_nvcomp_live_fn)must_find(nvcomp, "fake_nvcomp_live");
  fake_reset = (fake_nvcomp_reset_fn)must_find(nvcomp, "fake_nvcomp_reset");
}

/* ---- Device memory helpers ---------------------------------------------------------------- */

static CUdeviceptr dev_alloc(size_t size) {
  CUdeviceptr p;
  CU_OK(cu.cuMemAlloc(&p, size ? size : 1));
  return p;
}

static void to_dev(CUdeviceptr d, const void *host, size_t size) {
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, 0));
  if (size) CU_OK(cu.cuMemcpyHtoDAsync(d, host, size, s));
  CU_OK(cu.cuStreamSynchronize(s));
  CU_OK(cu.cuStreamDestroy(s));
}

static void from_dev(void *host, CUdeviceptr d, size_t size) {
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, 0));
  if (size) CU_OK(cu.cuMemcpyDtoHAsync(host, d, size, s));
  CU_OK(cu.cuStreamSynchronize(s));
  CU_OK(cu.cuStreamDestroy(s));
}

static CUdeviceptr dev_copy(const void *host, size_t size) {
  CUdeviceptr d = dev_alloc(size);
  to_dev(d, host, size);
  return d;
}

static void *p_(CUdeviceptr d) { return (void *)(uintptr_t)d; }

/* Compressible test data: runs of a few letters with random lengths. */
static void fill(unsigned char *buf, size_t size, unsigned seed) {
  for (size_t i = 0; i < size;) {
    seed = seed * 1103515245u + 12345u;
    size_t run = 1 + (seed >> 16) % 40;
    for (size_t k = 0; k < run && i < size; k++) buf[i++] = (unsigned char)('a' + (seed >> 8) % 6);
  }
}

/* ---- One batch through the fake -------------------------------------------------------------- */

#define MAX_CHUNKS 8

typedef struct batch {
  size_t n;
  unsigned char *data[MAX_CHUNKS]; /* host: the chunks in, then the results out */
  size_t size[MAX_CHUNKS];         /* in: input sizes; out: the sizes the fake wrote */
  size_t capacity[MAX_CHUNKS];     /* decompression: output buffer sizes */
  size_t misalign[MAX_CHUNKS];     /* bytes added to the input pointer */
  status_t status[MAX_CHUNKS];
  size_t header_size[MAX_CHUNKS]; /* decompression: what GetDecompressSizeAsync said */
} batch;

static void batch_free(batch *b) {
  for (size_t i = 0; i < b->n; i++) free(b->data[i]);
}

/* A batched call's arrays in device memory. */
typedef struct dev_arrays {
  CUdeviceptr in[MAX_CHUNKS], out[MAX_CHUNKS];
  CUdeviceptr in_ptrs, in_sizes, out_ptrs, sizes, capacities, statuses, temp;
} dev_arrays;

static void arrays_free(dev_arrays *a, size_t n) {
  for (size_t i = 0; i < n; i++) {
    CU_OK(cu.cuMemFree(a->in[i]));
    if (a->out[i]) CU_OK(cu.cuMemFree(a->out[i]));
  }
  CUdeviceptr all[] = {a->in_ptrs, a->in_sizes, a->out_ptrs, a->sizes, a->capacities, a->statuses,
                       a->temp};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) CU_OK(cu.cuMemFree(all[i]));
}

/* Uploads the inputs; out_size(i) bytes of output per chunk (0: none). */
static void arrays_make(dev_arrays *a, const batch *b, const size_t *out_sizes) {
  memset(a, 0, sizeof *a);
  void *in_ptrs[MAX_CHUNKS], *out_ptrs[MAX_CHUNKS];
  status_t sentinel[MAX_CHUNKS];
  size_t sizes_sentinel[MAX_CHUNKS];
  for (size_t i = 0; i < b->n; i++) {
    a->in[i] = dev_alloc(b->size[i] + 16);
    to_dev(a->in[i] + b->misalign[i], b->data[i], b->size[i]);
    in_ptrs[i] = p_(a->in[i] + b->misalign[i]);
    if (out_sizes) a->out[i] = dev_alloc(out_sizes[i]);
    out_ptrs[i] = p_(a->out[i]);
    sentinel[i] = (status_t)-1;
    sizes_sentinel[i] = (size_t)-1;
  }
  size_t n = b->n;
  a->in_ptrs = dev_copy(in_ptrs, n * sizeof(void *));
  a->in_sizes = dev_copy(b->size, n * sizeof(size_t));
  a->out_ptrs = dev_copy(out_ptrs, n * sizeof(void *));
  a->capacities = dev_copy(b->capacity, n * sizeof(size_t));
  a->statuses = dev_copy(sentinel, n * sizeof(status_t));
  a->sizes = dev_copy(sizes_sentinel, n * sizeof(size_t));
}

/* Temporary space, zeroed: the fake's decoders, as kvik's calls of the real nvCOMP, want it so. */
static size_t temp_alloc(dev_arrays *a, size_t temp_bytes) {
  a->temp = temp_bytes ? dev_alloc(temp_bytes) : 0;
  if (a->temp) {
    CU_OK(cu.cuMemsetD8Async(a->temp, 0, temp_bytes, NULL));
    CU_OK(cu.cuStreamSynchronize(NULL));
  }
  return temp_bytes;
}

static void results(batch *b, const dev_arrays *a) {
  from_dev(b->status, a->statuses, b->n * sizeof(status_t));
  from_dev(b->size, a->sizes, b->n * sizeof(size_t));
}

/* Compresses b's chunks with the fake on stream s; b then holds the compressed chunks. */
static void fake_compress(int f, batch *b, CUstream s, const opts_t *opts) {
  size_t max_chunk = 0, max_out, temp_bytes;
  for (size_t i = 0; i < b->n; i++)
    if (b->size[i] > max_chunk) max_chunk = b->size[i];
  NV_OK(nv[f].compress_max_output(max_chunk, *opts, &max_out));
  NV_OK(nv[f].compress_temp_size(b->n, max_chunk, *opts, &temp_bytes, max_chunk * b->n, s));
  size_t outs[MAX_CHUNKS];
  for (size_t i = 0; i < b->n; i++) outs[i] = max_out;
  dev_arrays a;
  arrays_make(&a, b, outs);
  temp_alloc(&a, temp_bytes);
  NV_OK(nv[f].compress_async(p_(a.in_ptrs), p_(a.in_sizes), max_chunk, b->n, p_(a.temp),
                             temp_bytes, p_(a.out_ptrs), p_(a.sizes), *opts, p_(a.statuses), s));
  CU_OK(cu.cuStreamSynchronize(s));
  results(b, &a);
  for (size_t i = 0; i < b->n; i++) {
    free(b->data[i]);
    b->data[i] = malloc(b->size[i] + 1);
    from_dev(b->data[i], a.out[i], b->status[i] == S(nvcompSuccess) ? b->size[i] : 0);
  }
  arrays_free(&a, b->n);
}

/* Decompresses b's chunks with the fake into buffers of b->capacity; b then holds the results
 * (b->size the actual sizes). Also checks GetDecompressSizeAsync against them where they
 * succeeded. */
static void fake_decompress(int f, batch *b, CUstream s, const opts_t *opts) {
  size_t max_cap = 0, temp_bytes;
  for (size_t i = 0; i < b->n; i++)
    if (b->capacity[i] > max_cap) max_cap = b->capacity[i];
  NV_OK(nv[f].decompress_temp_size(b->n, max_cap, *opts, &temp_bytes, max_cap * b->n, s));
  dev_arrays a;
  arrays_make(&a, b, b->capacity);
  temp_alloc(&a, temp_bytes);
  CUdeviceptr header_sizes = dev_alloc(b->n * sizeof(size_t));
  NV_OK(nv[f].decompress_size_async(p_(a.in_ptrs), p_(a.in_sizes), p_(header_sizes), b->n, s));
  NV_OK(nv[f].decompress_async(p_(a.in_ptrs), p_(a.in_sizes), p_(a.capacities), p_(a.sizes),
                               b->n, p_(a.temp), temp_bytes, p_(a.out_ptrs), *opts,
                               p_(a.statuses), s));
  CU_OK(cu.cuStreamSynchronize(s));
  results(b, &a);
  from_dev(b->header_size, header_sizes, b->n * sizeof(size_t));
  CU_OK(cu.cuMemFree(header_sizes));
  for (size_t i = 0; i < b->n; i++) {
    free(b->data[i]);
    b->data[i] = malloc(b->capacity[i] + 1);
    from_dev(b->data[i], a.out[i], b->size[i]);
    if (b->status[i] == S(nvcompSuccess)) ASSERT_EQ(b->header_size[i], b->size[i]);
  }
  arrays_free(&a, b->n);
}

/* ---- The CPU libraries, for interoperation ------------------------------------------------- */

/* Compresses with the CPU library; returns malloc'd data and its size in *out_size. */
static unsigned char *cpu_compress(int f, const unsigned char *in, size_t n, size_t *out_size) {
  size_t cap = n * 2 + 1024;
  unsigned char *out = malloc(cap);
  *out_size = 0;
  (void)in; /* unused where the build found no CPU library */
  switch (f) {
#ifdef FAKE_NVCOMP_HAVE_ZSTD
  case ZSTD: *out_size = ZSTD_compress(out, cap, in, n, 5); break;
#endif
#ifdef FAKE_NVCOMP_HAVE_LZ4
  case LZ4:
    *out_size = (size_t)LZ4_compress_default((const char *)in, (char *)out, (int)n, (int)cap);
    break;
#endif
#ifdef FAKE_NVCOMP_HAVE_SNAPPY
  case SNAPPY:
    *out_size = cap;
    ASSERT_EQ(snappy_compress((const char *)in, n, (char *)out, out_size), SNAPPY_OK);
    break;
#endif
#ifdef FAKE_NVCOMP_HAVE_ZLIB
  case DEFLATE:
  case GZIP: {
    z_stream z = {0};
    ASSERT_EQ(deflateInit2(&z, 6, Z_DEFLATED, f == GZIP ? 31 : -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    ASSERT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
    *out_size = z.total_out;
    deflateEnd(&z);
    break;
  }
#endif
  default: FAIL_AT("no CPU library for %s", infixes[f]);
  }
  return out;
}

/* Decompresses with the CPU library into out (cap bytes); returns the size, or -1. */
static long cpu_decompress(int f, const unsigned char *in, size_t n, unsigned char *out,
                           size_t cap) {
  (void)in, (void)n, (void)out, (void)cap; /* unused where the build found no CPU library */
  switch (f) {
#ifdef FAKE_NVCOMP_HAVE_ZSTD
  case ZSTD: {
    size_t rc = ZSTD_decompress(out, cap, in, n);
    return ZSTD_isError(rc) ? -1 : (long)rc;
  }
#endif
#ifdef FAKE_NVCOMP_HAVE_LZ4
  case LZ4: return LZ4_decompress_safe((const char *)in, (char *)out, (int)n, (int)cap);
#endif
#ifdef FAKE_NVCOMP_HAVE_SNAPPY
  case SNAPPY: {
    size_t size = cap;
    return snappy_uncompress((const char *)in, n, (char *)out, &size) == SNAPPY_OK ? (long)size
                                                                                  : -1;
  }
#endif
#ifdef FAKE_NVCOMP_HAVE_ZLIB
  case DEFLATE:
  case GZIP: {
    z_stream z = {0};
    ASSERT_EQ(inflateInit2(&z, f == GZIP ? 31 : -15), Z_OK);
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    int rc = inflate(&z, Z_FINISH);
    long size = (long)z.total_out;
    inflateEnd(&z);
    return rc == Z_STREAM_END ? size : -1;
  }
#endif
  default: FAIL_AT("no CPU library for %s", infixes[f]);
  }
}

/* ---- Tests --------------------------------------------------------------------------------- */

static const size_t test_sizes[] = {1, 1000, 65536, 200001, 3, 0};
#define NSIZES (sizeof test_sizes / sizeof test_sizes[0])

static opts_t default_opts(int f, int compress) {
  opts_t o;
  memset(&o, 0, sizeof o);
  if (compress && (f == DEFLATE || f == GZIP)) o.deflate.algorithm = 1;
  return o;
}

static void originals(batch *b) {
  memset(b, 0, sizeof *b);
  b->n = NSIZES;
  for (size_t i = 0; i < b->n; i++) {
    b->size[i] = test_sizes[i];
    b->data[i] = malloc(test_sizes[i] + 1);
    fill(b->data[i], test_sizes[i], (unsigned)i + 7);
  }
}

/* Fake compression, CPU decompression, fake decompression; and CPU compression, fake
 * decompression. */
static void test_round_trips(int f, CUstream s) {
  opts_t c = default_opts(f, 1), d = default_opts(f, 0);
  batch orig, b;
  originals(&orig);
  originals(&b);
  fake_compress(f, &b, s, &c);
  for (size_t i = 0; i < b.n; i++) {
    ASSERT_EQ(b.status[i], S(nvcompSuccess));
    unsigned char *check = malloc(orig.size[i] + 1);
    ASSERT_EQ(cpu_decompress(f, b.data[i], b.size[i], check, orig.size[i] + 1), orig.size[i]);
    ASSERT(memcmp(check, orig.data[i], orig.size[i]) == 0);
    free(check);
    b.capacity[i] = orig.size[i];
  }
  fake_decompress(f, &b, s, &d);
  for (size_t i = 0; i < b.n; i++) {
    ASSERT_EQ(b.status[i], S(nvcompSuccess));
    ASSERT_EQ(b.size[i], orig.size[i]);
    ASSERT(memcmp(b.data[i], orig.data[i], orig.size[i]) == 0);
  }
  batch_free(&b);
  /* From the CPU library, into bigger buffers than needed. */
  memset(&b, 0, sizeof b);
  b.n = orig.n;
  for (size_t i = 0; i < b.n; i++) {
    b.data[i] = cpu_compress(f, orig.data[i], orig.size[i], &b.size[i]);
    b.capacity[i] = orig.size[i] + 100;
  }
  fake_decompress(f, &b, s, &d);
  for (size_t i = 0; i < b.n; i++) {
    ASSERT_EQ(b.status[i], S(nvcompSuccess));
    ASSERT_EQ(b.size[i], orig.size[i]);
    ASSERT(memcmp(b.data[i], orig.data[i], orig.size[i]) == 0);
  }
  batch_free(&b);
  batch_free(&orig);
}

/* Corrupt, truncated and too-small chunks fail alone, each with size 0. */
static void test_bad_chunks(int f, CUstream s) {
  enum { GOOD, CORRUPT, TRUNCATED, TOO_SMALL, EMPTY, GOOD2, N };
  size_t n = 50000;
  unsigned char *orig = malloc(n);
  fill(orig, n, 99);
  batch b;
  memset(&b, 0, sizeof b);
  b.n = N;
  for (size_t i = 0; i < N; i++) {
    b.data[i] = cpu_compress(f, orig, n, &b.size[i]);
    b.capacity[i] = n;
  }
  memset(b.data[CORRUPT], 0xff, b.size[CORRUPT]);
  b.size[TRUNCATED] /= 2;
  b.capacity[TOO_SMALL] = n - 1;
  b.size[EMPTY] = 0;
  fake_decompress(f, &b, s, &(opts_t){.bytes = {0}});
  status_t want[N] = {S(nvcompSuccess), S(nvcompErrorCannotDecompress),
                      S(nvcompErrorCannotDecompress), S(nvcompErrorCannotDecompress),
                      S(nvcompErrorCannotDecompress), S(nvcompSuccess)};
  for (size_t i = 0; i < N; i++) {
    if (b.status[i] != want[i]) FAIL_AT("%s chunk %zu: status %d", infixes[f], i, b.status[i]);
    ASSERT_EQ(b.size[i], want[i] == S(nvcompSuccess) ? n : 0);
  }
  ASSERT(memcmp(b.data[GOOD], orig, n) == 0 && memcmp(b.data[GOOD2], orig, n) == 0);
  ASSERT_EQ(b.header_size[CORRUPT], 0);
  ASSERT_EQ(b.header_size[EMPTY], 0);
  batch_free(&b);
  free(orig);
}

/* Host-side argument checks, returned at once. */
static void test_arguments(int f, CUstream s) {
  opts_t c = default_opts(f, 1), d = default_opts(f, 0), bad = c;
  bad.bytes[63] = 1;
  kvik__nvcomp_alignments al;
  size_t v, temp;
  ASSERT_EQ(nv[f].compress_alignments(c, NULL), S(nvcompErrorInvalidValue));
  ASSERT_EQ(nv[f].compress_alignments(bad, &al), S(nvcompErrorInvalidValue));
  NV_OK(nv[f].compress_alignments(c, &al));
  ASSERT(al.input >= 1 && al.output >= 1 && al.temp >= 1);
  NV_OK(nv[f].decompress_alignments(d, &al));
  ASSERT_EQ(nv[f].compress_max_output(1 << 16, c, NULL), S(nvcompErrorInvalidValue));
  ASSERT_EQ(nv[f].compress_max_output((size_t)1 << 50, c, &v), S(nvcompErrorChunkSizeTooLarge));
  NV_OK(nv[f].compress_max_output(1 << 16, c, &v));
  ASSERT(v > 1 << 16);
  /* Fields out of range; LZ4's bitshuffle, which is not plain LZ4. */
  opts_t field = d;
  field.bytes[0] = 3; /* the decompression backend */
  ASSERT_EQ(nv[f].decompress_alignments(field, &al), S(nvcompErrorInvalidValue));
  if (f == DEFLATE || f == GZIP) {
    field = c;
    field.deflate.algorithm = 6;
    ASSERT_EQ(nv[f].compress_max_output(16, field, &v), S(nvcompErrorInvalidValue));
  }
  if (f == LZ4) {
    field = c;
    field.bytes[4] = 1; /* bitshuffle_mode */
    ASSERT_EQ(nv[f].compress_max_output(16, field, &v), S(nvcompErrorNotSupported));
  }
  ASSERT_EQ(nv[f].compress_temp_size(4, 1 << 16, c, NULL, 1 << 18, s), S(nvcompErrorInvalidValue));
  NV_OK(nv[f].compress_temp_size(4, 1 << 16, c, &temp, 1 << 18, s));
  NV_OK(nv[f].decompress_temp_size(4, 1 << 16, d, &temp, 1 << 18, s));
  /* NULL arrays; temp too small or misaligned (only where some is needed). */
  CUdeviceptr arr = dev_alloc(4096);
  void *p = p_(arr);
  status_t *st = p;
  ASSERT_EQ(nv[f].decompress_async(NULL, p, p, p, 1, p, 4096, p, d, st, s),
            S(nvcompErrorInvalidValue));
  ASSERT_EQ(nv[f].decompress_async(p, p, NULL, p, 1, p, 4096, p, d, st, s),
            S(nvcompErrorInvalidValue));
  ASSERT_EQ(nv[f].compress_async(p, p, 16, 1, p, 4096, p, NULL, c, st, s),
            S(nvcompErrorInvalidValue));
  ASSERT_EQ(nv[f].decompress_size_async(p, p, NULL, 1, s), S(nvcompErrorInvalidValue));
  ASSERT_EQ(nv[f].compress_async(p, p, 16, 1, p, 4096, p, p, bad, st, s),
            S(nvcompErrorInvalidValue));
  NV_OK(nv[f].decompress_temp_size(1, 16, d, &temp, 16, s));
  if (temp > 0) {
    ASSERT_EQ(nv[f].decompress_async(p, p, p, p, 1, p, temp - 1, p, d, st, s),
              S(nvcompErrorInvalidValue));
    ASSERT_EQ(nv[f].decompress_async(p, p, p, p, 1, NULL, temp, p, d, st, s),
              S(nvcompErrorInvalidValue));
    NV_OK(nv[f].decompress_alignments(d, &al));
    if (al.temp > 1)
      ASSERT_EQ(nv[f].decompress_async(p, p, p, p, 1, (char *)p + 1, temp + 16, p, d, st, s),
                S(nvcompErrorAlignment));
  }
  /* Zero chunks: nothing queued. */
  NV_OK(nv[f].decompress_async(p, p, p, p, 0, p, 4096, p, d, st, s));
  CU_OK(cu.cuStreamSynchronize(s));
  CU_OK(cu.cuMemFree(arr));
}

/* A chunk not aligned to the format's requirement fails alone with nvcompErrorAlignment. */
static void test_misaligned_chunk(int f, CUstream s) {
  kvik__nvcomp_alignments al;
  NV_OK(nv[f].decompress_alignments(default_opts(f, 0), &al));
  if (al.input == 1) return;
  size_t n = 1000;
  unsigned char orig[1000];
  fill(orig, n, 5);
  batch b;
  memset(&b, 0, sizeof b);
  b.n = 2;
  for (size_t i = 0; i < 2; i++) {
    b.data[i] = cpu_compress(f, orig, n, &b.size[i]);
    b.capacity[i] = n;
  }
  b.misalign[1] = 1;
  fake_decompress(f, &b, s, &(opts_t){.bytes = {0}});
  ASSERT_EQ(b.status[0], S(nvcompSuccess));
  ASSERT_EQ(b.status[1], S(nvcompErrorAlignment));
  ASSERT_EQ(b.size[1], 0);
  batch_free(&b);
}

/* GPU-only formats: every function answers nvcompErrorNotSupported. */
static void test_gpu_only(int f, CUstream s) {
  opts_t o = {.bytes = {0}};
  kvik__nvcomp_alignments al;
  size_t v;
  void *p = (void *)&v;
  ASSERT_EQ(nv[f].compress_alignments(o, &al), S(nvcompErrorNotSupported));
  ASSERT_EQ(nv[f].compress_temp_size(1, 16, o, &v, 16, s), S(nvcompErrorNotSupported));
  ASSERT_EQ(nv[f].compress_max_output(16, o, &v), S(nvcompErrorNotSupported));
  ASSERT_EQ(nv[f].compress_async(p, p, 16, 1, p, 16, p, p, o, p, s), S(nvcompErrorNotSupported));
  ASSERT_EQ(nv[f].decompress_alignments(o, &al), S(nvcompErrorNotSupported));
  ASSERT_EQ(nv[f].decompress_temp_size(1, 16, o, &v, 16, s), S(nvcompErrorNotSupported));
  ASSERT_EQ(nv[f].decompress_size_async(p, p, p, 1, s), S(nvcompErrorNotSupported));
  ASSERT_EQ(nv[f].decompress_async(p, p, p, p, 1, p, 16, p, o, p, s),
            S(nvcompErrorNotSupported));
}

static void test_properties(void) {
  kvik__nvcomp_properties props;
  NV_OK(get_properties(&props));
  ASSERT_EQ(props.version, 6000);
  ASSERT_EQ(props.cudart_version, 13000);
  ASSERT_EQ(get_properties(NULL), S(nvcompErrorInvalidValue));
  setenv("FAKE_NVCOMP_VERSION", "6100", 1);
  NV_OK(get_properties(&props));
  ASSERT_EQ(props.version, 6100);
  unsetenv("FAKE_NVCOMP_VERSION");
  ASSERT(strstr(get_status_string(S(nvcompErrorCannotDecompress)), "corrupt"));
  ASSERT(get_status_string((status_t)12345) != NULL);
}

/* The batch runs when the stream reaches it: results appear only after a synchronize, and a
 * stream blocked behind a host function holds the batch back. */
static void test_stream_order(CUstream s) {
  int f = have[ZSTD] ? ZSTD : DEFLATE;
  size_t n = 4096;
  unsigned char orig[4096];
  fill(orig, n, 3);
  size_t csize;
  unsigned char *comp = cpu_compress(f, orig, n, &csize);
  batch b;
  memset(&b, 0, sizeof b);
  b.n = 1;
  b.data[0] = comp;
  b.size[0] = csize;
  b.capacity[0] = n;
  dev_arrays a;
  arrays_make(&a, &b, b.capacity);
  size_t temp = temp_alloc(&a, 1 << 16);
  setenv("FAKE_NVCOMP_DELAY_US", "200000", 1);
  opts_t d = default_opts(f, 0);
  NV_OK(nv[f].decompress_async(p_(a.in_ptrs), p_(a.in_sizes), p_(a.capacities), p_(a.sizes), 1,
                               p_(a.temp), temp, p_(a.out_ptrs), d, p_(a.statuses), s));
  ASSERT_EQ(fake_live("in_flight"), 1);
  status_t early;
  CU_OK(cu.cuMemcpyDtoHAsync(&early, a.statuses, sizeof early, NULL)); /* another stream */
  CU_OK(cu.cuStreamSynchronize(NULL));
  ASSERT_EQ(early, (status_t)-1);
  CU_OK(cu.cuStreamSynchronize(s));
  unsetenv("FAKE_NVCOMP_DELAY_US");
  ASSERT_EQ(fake_live("in_flight"), 0);
  results(&b, &a);
  ASSERT_EQ(b.status[0], S(nvcompSuccess));
  ASSERT_EQ(b.size[0], n);
  arrays_free(&a, 1);
  batch_free(&b);
}

/* The arrays and the chunks may be pinned host memory, which the GPU reaches too. */
static void test_pinned(int f, CUstream s) {
  size_t n = 20000, csize;
  unsigned char *orig = malloc(n);
  fill(orig, n, 21);
  unsigned char *comp = cpu_compress(f, orig, n, &csize);
  void *in, *out, **in_ptrs, **out_ptrs, *temp;
  size_t *in_sizes, *capacities, *sizes, temp_bytes;
  status_t *statuses;
  opts_t d = default_opts(f, 0);
  NV_OK(nv[f].decompress_temp_size(1, n, d, &temp_bytes, n, s));
  CU_OK(cu.cuMemHostAlloc(&in, csize, 0));
  CU_OK(cu.cuMemHostAlloc(&out, n, 0));
  CU_OK(cu.cuMemHostAlloc((void **)&in_ptrs, sizeof(void *), 0));
  CU_OK(cu.cuMemHostAlloc((void **)&out_ptrs, sizeof(void *), 0));
  CU_OK(cu.cuMemHostAlloc((void **)&in_sizes, 3 * sizeof(size_t), 0));
  CU_OK(cu.cuMemHostAlloc((void **)&statuses, sizeof(status_t), 0));
  CU_OK(cu.cuMemHostAlloc(&temp, temp_bytes + 1, 0));
  memset(temp, 0, temp_bytes + 1);
  capacities = in_sizes + 1;
  sizes = in_sizes + 2;
  memcpy(in, comp, csize);
  in_ptrs[0] = in;
  out_ptrs[0] = out;
  in_sizes[0] = csize;
  capacities[0] = n;
  *sizes = 0;
  *statuses = (status_t)-1;
  NV_OK(nv[f].decompress_async((const void *const *)in_ptrs, in_sizes, capacities, sizes, 1,
                               temp, temp_bytes, out_ptrs, d, statuses, s));
  CU_OK(cu.cuStreamSynchronize(s));
  ASSERT_EQ(*statuses, S(nvcompSuccess));
  ASSERT_EQ(*sizes, n);
  ASSERT(memcmp(out, orig, n) == 0);
  void *all[] = {in, out, in_ptrs, out_ptrs, in_sizes, statuses, temp};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) CU_OK(cu.cuMemFreeHost(all[i]));
  free(comp);
  free(orig);
}

/* Stream-ordered memory freed right after the call, on the same stream, is still there when the
 * batch runs, as on a real GPU: kvik frees its pooled arrays so. */
static void test_freed_after_call(int f, CUstream s) {
  CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
  CUresult (*free_async)(CUdeviceptr, CUstream);
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  *(void **)&alloc_async = must_find(cuda, "cuMemAllocAsync");
  *(void **)&free_async = must_find(cuda, "cuMemFreeAsync");
  dlclose(cuda);
  size_t n = 5000, csize;
  unsigned char orig[5000], back[5000];
  fill(orig, n, 8);
  unsigned char *comp = cpu_compress(f, orig, n, &csize);
  CUdeviceptr out = dev_alloc(n), block;
  opts_t d = default_opts(f, 0);
  size_t temp;
  NV_OK(nv[f].decompress_temp_size(1, n, d, &temp, n, s));
  size_t arrays = 256, total = arrays + temp + csize;
  CU_OK(alloc_async(&block, total, s));
  struct {
    void *in_ptr, *out_ptr;
    size_t in_size, capacity, size;
    status_t status;
  } host = {p_(block + arrays + temp), p_(out), csize, n, 0, (status_t)-1}, result;
  CU_OK(cu.cuMemcpyHtoDAsync(block, &host, sizeof host, s));
  CU_OK(cu.cuMemcpyHtoDAsync(block + arrays + temp, comp, csize, s));
  if (temp) CU_OK(cu.cuMemsetD8Async(block + arrays, 0, temp, s));
  CU_OK(cu.cuStreamSynchronize(s));
  setenv("FAKE_NVCOMP_DELAY_US", "50000", 1);
  unsigned char *base = p_(block);
  NV_OK(nv[f].decompress_async(p_(block), (size_t *)(base + 16), (size_t *)(base + 24),
                               (size_t *)(base + 32), 1, temp ? base + arrays : NULL, temp,
                               (void *const *)(base + 8), d, (status_t *)(base + 40), s));
  CU_OK(cu.cuMemcpyDtoHAsync(&result, block, sizeof result, s));
  CU_OK(free_async(block, s));
  CU_OK(cu.cuStreamSynchronize(s));
  unsetenv("FAKE_NVCOMP_DELAY_US");
  ASSERT_EQ(result.status, S(nvcompSuccess));
  ASSERT_EQ(result.size, n);
  from_dev(back, out, n);
  ASSERT(memcmp(back, orig, n) == 0);
  CU_OK(cu.cuMemFree(out));
  free(comp);
}

/* fake_nvcomp_fail, fake_nvcomp_fail_chunk and the counters. */
static void test_injection(CUstream s) {
  int f = have[ZSTD] ? ZSTD : DEFLATE;
  char sym[96];
  snprintf(sym, sizeof sym, "nvcompBatched%sDecompressAsync", infixes[f]);
  fake_reset();
  ASSERT_EQ(fake_calls(sym), 0);
  ASSERT_EQ(fake_calls("no_such_symbol"), -1);
  ASSERT_EQ(fake_live("no_such_thing"), -1);
  fake_fail(sym, 2, S(nvcompErrorCudaError));
  size_t n = 3000;
  unsigned char orig[3000];
  fill(orig, n, 11);
  batch b;
  memset(&b, 0, sizeof b);
  b.n = 3;
  for (size_t i = 0; i < 3; i++) {
    b.data[i] = cpu_compress(f, orig, n, &b.size[i]);
    b.capacity[i] = n;
  }
  dev_arrays a;
  arrays_make(&a, &b, b.capacity);
  size_t temp = temp_alloc(&a, 1 << 16);
  opts_t d = default_opts(f, 0);
  /* Each call gets its temporary space zeroed, in stream order. */
#define CALL()                                                                                   \
  (cu.cuMemsetD8Async(a.temp, 0, temp, s),                                                       \
   nv[f].decompress_async(p_(a.in_ptrs), p_(a.in_sizes), p_(a.capacities), p_(a.sizes), 3,      \
                          p_(a.temp), temp, p_(a.out_ptrs), d, p_(a.statuses), s))
  NV_OK(CALL());
  ASSERT_EQ(CALL(), S(nvcompErrorCudaError));
  ASSERT_EQ(fake_calls(sym), 2);
  CU_OK(cu.cuStreamSynchronize(s));
  ASSERT_EQ(fake_calls("chunks"), 3); /* the failed call queued nothing */
  fake_fail_chunk(sym, 1, 1, S(nvcompErrorBadChecksum));
  NV_OK(CALL());
  CU_OK(cu.cuStreamSynchronize(s));
  results(&b, &a);
  ASSERT_EQ(b.status[0], S(nvcompSuccess));
  ASSERT_EQ(b.status[1], S(nvcompErrorBadChecksum));
  ASSERT_EQ(b.size[1], 0);
  ASSERT_EQ(b.status[2], S(nvcompSuccess));
  ASSERT_EQ(b.size[2], n);
  /* Every call fails while armed with nth 0, until a reset. */
  fake_fail(sym, 0, S(nvcompErrorInternal));
  ASSERT_EQ(CALL(), S(nvcompErrorInternal));
  ASSERT_EQ(CALL(), S(nvcompErrorInternal));
  fake_reset();
  NV_OK(CALL());
  CU_OK(cu.cuStreamSynchronize(s));
  ASSERT_EQ(fake_calls(sym), 1);
  fake_fail("nvcompGetProperties", 1, S(nvcompErrorInternal));
  kvik__nvcomp_properties props;
  ASSERT_EQ(get_properties(&props), S(nvcompErrorInternal));
#undef CALL
  arrays_free(&a, 3);
  batch_free(&b);
}

/* Two threads, each with its own stream, round-trip batches at once. */
typedef struct worker_arg {
  int f;
  int rounds;
} worker_arg;

static void *worker(void *arg) {
  worker_arg *w = arg;
  CU_OK(cu.cuCtxPushCurrent(ctx));
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, 0));
  for (int r = 0; r < w->rounds; r++) test_round_trips(w->f, s);
  CU_OK(cu.cuStreamDestroy(s));
  CUcontext popped;
  CU_OK(cu.cuCtxPopCurrent(&popped));
  return NULL;
}

static void test_threads(void) {
  int formats[2], nf = 0;
  for (int f = 0; f < FORMAT_COUNT && nf < 2; f++)
    if (have[f] && !gpu_only[f]) formats[nf++] = f;
  if (nf == 0) return;
  setenv("FAKE_NVCOMP_DELAY_US", "0", 1);
  pthread_t t[2];
  worker_arg args[2] = {{formats[0], 5}, {formats[nf - 1], 5}};
  for (int i = 0; i < 2; i++) ASSERT_EQ(pthread_create(&t[i], NULL, worker, &args[i]), 0);
  for (int i = 0; i < 2; i++) ASSERT_EQ(pthread_join(t[i], NULL), 0);
  unsetenv("FAKE_NVCOMP_DELAY_US");
}

int main(void) {
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda || !dlsym(cuda, "fake_cuda_fail")) {
    printf("SKIP: libcuda.so.1 is not the fake CUDA driver\n");
    return TEST_SKIP;
  }
  void *nvcomp = dlopen("libnvcomp.so.6", RTLD_NOW | RTLD_LOCAL);
  if (!nvcomp || !dlsym(nvcomp, "fake_nvcomp_fail")) {
    printf("SKIP: libnvcomp.so.6 is not the fake nvCOMP\n");
    return TEST_SKIP;
  }
  load(cuda, nvcomp);
  CU_OK(cu.cuInit(0));
  CU_OK(cu.cuDevicePrimaryCtxRetain(&ctx, 0));
  CU_OK(cu.cuCtxPushCurrent(ctx));
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, 0));
  test_properties();
  int standard = 0;
  for (int f = 0; f < FORMAT_COUNT; f++) {
    if (!have[f]) continue;
    if (gpu_only[f]) {
      test_gpu_only(f, s);
      continue;
    }
    standard++;
    test_round_trips(f, s);
    test_bad_chunks(f, s);
    test_arguments(f, s);
    test_misaligned_chunk(f, s);
    test_pinned(f, s);
    printf("%s: ok\n", infixes[f]);
  }
  if (standard && (have[ZSTD] || have[DEFLATE])) {
    test_stream_order(s);
    test_injection(s);
    test_freed_after_call(have[ZSTD] ? ZSTD : DEFLATE, s);
  }
  test_threads();
  CU_OK(cu.cuStreamDestroy(s));
  printf("fake nvCOMP selftest passed\n");
  return 0;
}
