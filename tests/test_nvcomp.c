/* Compression through nvCOMP (kvik.h, "Compression"): the codec table, the loader's order and
 * failures (KVIK_SETTING_NVCOMP_LIBRARY, the soname), the argument checks that hold without
 * nvCOMP, and, where a libnvcomp.so.6 and a CUDA driver load (the fakes of tests/fake_nvcomp.c and
 * tests/fake_cuda.c in CI, the real ones on a GPU machine), round trips of every codec offered,
 * corrupt and truncated input, alignment and capacity checks, and the stream-ordered form.
 * Without nvCOMP or CUDA, the data tests are skipped (exit 77 once the rest passed). */
#include "fake_nvcomp.h"
#include "test.h"
#include "test_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>

static const char *const NAMES[] = {"zstd",     "lz4",      "snappy",  "deflate", "gzip",
                                    "gdeflate", "cascaded", "bitcomp", "ans"};

static void test_codec_table(void) {
  ASSERT_EQ(sizeof NAMES / sizeof NAMES[0], KVIK_CODEC_COUNT);
  for (int c = 0; c < KVIK_CODEC_COUNT; c++) {
    ASSERT(strcmp(kvik_codec_name((kvik_codec)c), NAMES[c]) == 0);
    ASSERT_EQ(kvik_codec_lookup(NAMES[c]), c);
    ASSERT_EQ(kvik_codec_gpu_only((kvik_codec)c), c >= KVIK_CODEC_GDEFLATE);
  }
  ASSERT_EQ(kvik_codec_lookup("ZSTD"), KVIK_CODEC_ZSTD);
  ASSERT(kvik_codec_name(KVIK_CODEC_COUNT) == NULL);
  ASSERT(kvik_codec_name((kvik_codec)-1) == NULL);
  ASSERT_FAILS(kvik_codec_lookup("brotli"), -EINVAL, "brotli");
  ASSERT_FAILS(kvik_codec_lookup(NULL), -EINVAL, "NULL");
  ASSERT_FAILS(kvik_codec_gpu_only(KVIK_CODEC_COUNT), -EINVAL, "unknown codec");
  ASSERT_FAILS(kvik_codec_supported(KVIK_CODEC_COUNT), -EINVAL, "unknown codec");
  size_t size, in, out;
  ASSERT_FAILS(kvik_codec_max_compressed_size(KVIK_CODEC_COUNT, 100, &size), -EINVAL, "unknown");
  ASSERT_FAILS(kvik_codec_max_compressed_size(KVIK_CODEC_ZSTD, 100, NULL), -EINVAL, "NULL");
  ASSERT_FAILS(kvik_codec_alignment(KVIK_CODEC_ZSTD, 0, NULL, &out), -EINVAL, "NULL");
  ASSERT_FAILS(kvik_codec_alignment(KVIK_CODEC_COUNT, 0, &in, &out), -EINVAL, "unknown");
  ASSERT_FAILS(kvik_nvcomp_path(NULL, 8), -EINVAL, "NULL");
}

/* Rules that hold whether nvCOMP loads or not: they are checked before it is needed. */
static void test_argument_checks(void) {
  char chunk[64] = {0};
  const void *src[2] = {chunk, chunk};
  void *dst[2] = {chunk, NULL};
  size_t sizes[2] = {8, 8}, caps[2] = {64, 64}, out[2];
  int st[2];
  ASSERT_FAILS(kvik_decompress_async(KVIK_CODEC_COUNT, 1, src, sizes, dst, caps, out, st, NULL),
               -EINVAL, "unknown codec");
  ASSERT_FAILS(kvik_decompress_async(KVIK_CODEC_LZ4, 1, src, sizes, dst, caps, out, NULL, NULL),
               -EINVAL, "NULL array");
  ASSERT_FAILS(kvik_compress_async(KVIK_CODEC_LZ4, 1, NULL, sizes, dst, caps, out, st, NULL),
               -EINVAL, "NULL array");
  ASSERT_FAILS(kvik_decompress(KVIK_CODEC_LZ4, 1, src, sizes, dst, NULL, out, st), -EINVAL,
               "NULL array");
  ASSERT_FAILS(kvik_compress(KVIK_CODEC_SNAPPY, 2, src, sizes, dst, caps, NULL, NULL), -EINVAL,
               "chunk 1 of 2: NULL output");
  const void *null_src[1] = {NULL};
  ASSERT_FAILS(kvik_decompress(KVIK_CODEC_ZSTD, 1, null_src, sizes, dst, caps, NULL, NULL),
               -EINVAL, "chunk 0 of 1: NULL input");
}

/* A path that names no file: that one failure, nothing else tried; the setting's next value is
 * tried at the next need (a failed dlopen is not final). */
static void test_missing_library(void) {
  char text[256];
  ASSERT_OK(kvik_setting_format(KVIK_SETTING_NVCOMP_LIBRARY, text, sizeof text));
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_NVCOMP_LIBRARY, "/nonexistent/libnvcomp.so.6"));
  ASSERT_FAILS(kvik_nvcomp_version(), KVIK_ENVCOMP_UNAVAILABLE, "/nonexistent/libnvcomp.so.6");
  ASSERT(strstr(kvik_last_error(), "kvik_nvcomp_version: nvCOMP unavailable") != NULL);
  ASSERT_EQ(kvik_codec_supported(KVIK_CODEC_ZSTD), 0);
  char path[64];
  ASSERT_FAILS(kvik_nvcomp_path(path, sizeof path), KVIK_ENVCOMP_UNAVAILABLE, "nonexistent");
  size_t size;
  ASSERT_FAILS(kvik_codec_max_compressed_size(KVIK_CODEC_LZ4, 100, &size),
               KVIK_ENVCOMP_UNAVAILABLE, "kvik_codec_max_compressed_size");
  char chunk[8];
  const void *src[1] = {chunk};
  void *dst[1] = {chunk};
  size_t sizes[1] = {8};
  ASSERT_FAILS(kvik_decompress(KVIK_CODEC_LZ4, 1, src, sizes, dst, sizes, NULL, NULL),
               KVIK_ENVCOMP_UNAVAILABLE, "nvCOMP unavailable");
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_NVCOMP_LIBRARY, text));
}

/* A library that loads but is no nvCOMP 6 is refused for good: checked in a child, since that
 * failure is final for its process. */
static void test_not_nvcomp(void) {
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    if (kvik_setting_parse(KVIK_SETTING_NVCOMP_LIBRARY, "libc.so.6") < 0) _exit(2);
    if (kvik_nvcomp_version() != KVIK_ENVCOMP_UNAVAILABLE) _exit(3);
    if (!strstr(kvik_last_error(), "lacks nvcompGetProperties")) _exit(4);
    if (kvik_setting_parse(KVIK_SETTING_NVCOMP_LIBRARY, "") < 0) _exit(5);
    /* final: the soname is not tried now */
    if (kvik_nvcomp_version() != KVIK_ENVCOMP_UNAVAILABLE) _exit(6);
    _exit(kvik_codec_supported(KVIK_CODEC_ZSTD) == 0 ? 0 : 7);
  }
  int status;
  ASSERT(waitpid(pid, &status, 0) == pid);
  ASSERT(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
}

/* A library with zstd's functions only (tests/nvcomp_stub.c, argv[1]): zstd is offered, the
 * other codecs not, and their calls fail with KVIK_ENVCOMP_UNAVAILABLE naming the codec; the stub
 * refuses zstd's calls, which kvik reports as nvCOMP's code. In a child: loading is once. */
static void test_one_format(const char *stub) {
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    ASSERT_OK(kvik_setting_parse(KVIK_SETTING_NVCOMP_LIBRARY, stub));
    ASSERT_EQ(kvik_nvcomp_version(), 6000);
    for (int c = 0; c < KVIK_CODEC_COUNT; c++)
      ASSERT_EQ(kvik_codec_supported((kvik_codec)c), c == KVIK_CODEC_ZSTD);
    size_t size;
    ASSERT_FAILS(kvik_codec_max_compressed_size(KVIK_CODEC_LZ4, 100, &size),
                 KVIK_ENVCOMP_UNAVAILABLE, "kvik_codec_max_compressed_size(lz4): ");
    ASSERT(strstr(kvik_last_error(), "lacks the codec's functions") != NULL);
    ASSERT_FAILS(kvik_codec_max_compressed_size(KVIK_CODEC_ZSTD, 100, &size),
                 KVIK_ENVCOMP_BASE - 11, "CompressGetMaxOutputChunkSize");
    ASSERT_EQ(kvik_err_name(KVIK_ENVCOMP_BASE - 11)[0], 'n'); /* "nvcompErrorNotSupported" */
    _exit(0);
  }
  int status;
  ASSERT(waitpid(pid, &status, 0) == pid);
  ASSERT(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
}

/* ---- with nvCOMP and CUDA ---------------------------------------------------------------- */

#define CHUNKS 5
#define CHUNK_MAX 70000

/* Sizes of whole 16-byte words, as the GPU-only formats' default data types want. */
static size_t chunk_size(int i) {
  return i == 0 ? 16 : (size_t)(CHUNK_MAX - 977 * i) & ~(size_t)15;
}

/* Compressible data: runs of words with noise. */
static void fill_chunk(char *p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (char)((i / 64 + seed) % 7 ? 'a' + (int)(i % 13) : (int)(i * seed));
}

typedef struct round_trip {
  char *host_in[CHUNKS], *dev_in[CHUNKS], *dev_comp[CHUNKS], *dev_out[CHUNKS];
  size_t in_sizes[CHUNKS], comp_caps[CHUNKS], comp_sizes[CHUNKS], out_caps[CHUNKS],
      out_sizes[CHUNKS];
  int statuses[CHUNKS];
} round_trip;

static void round_trip_setup(round_trip *r, kvik_codec codec) {
  size_t bound;
  ASSERT_OK(kvik_codec_max_compressed_size(codec, CHUNK_MAX, &bound));
  ASSERT(bound >= CHUNK_MAX);
  for (int i = 0; i < CHUNKS; i++) {
    r->in_sizes[i] = chunk_size(i);
    r->host_in[i] = malloc(CHUNK_MAX);
    ASSERT(r->host_in[i]);
    fill_chunk(r->host_in[i], r->in_sizes[i], (uint64_t)i + 3);
    r->dev_in[i] = device_alloc(CHUNK_MAX);
    to_device(r->dev_in[i], r->host_in[i], CHUNK_MAX);
    r->dev_comp[i] = device_alloc(bound);
    r->comp_caps[i] = bound;
    r->dev_out[i] = device_alloc(CHUNK_MAX);
    r->out_caps[i] = CHUNK_MAX;
  }
}

static void round_trip_free(round_trip *r) {
  for (int i = 0; i < CHUNKS; i++) {
    free(r->host_in[i]);
    device_free(r->dev_in[i]);
    device_free(r->dev_comp[i]);
    device_free(r->dev_out[i]);
  }
}

static void check_output(const round_trip *r) {
  char *back = malloc(CHUNK_MAX);
  ASSERT(back);
  for (int i = 0; i < CHUNKS; i++) {
    ASSERT_EQ(r->statuses[i], 0);
    ASSERT_EQ(r->out_sizes[i], r->in_sizes[i]);
    from_device(back, r->dev_out[i], r->in_sizes[i]);
    ASSERT(memcmp(back, r->host_in[i], r->in_sizes[i]) == 0);
  }
  free(back);
}

/* The loaded libnvcomp's fake_nvcomp_fail_chunk: tests/fake_nvcomp.c's, NULL for a real nvCOMP. */
static fake_nvcomp_fail_chunk_fn fake_nvcomp(void) {
  char path[4096];
  ASSERT(kvik_nvcomp_path(path, sizeof path) > 0);
  void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return NULL;
  fake_nvcomp_fail_chunk_fn arm = (fake_nvcomp_fail_chunk_fn)dlsym(lib, "fake_nvcomp_fail_chunk");
  dlclose(lib); /* the library stays: kvik holds it */
  return arm;
}

#define NOT_SUPPORTED (KVIK_ENVCOMP_BASE - 11) /* nvcompErrorNotSupported */

/* On the fake driver, a device that refuses memory pools (before kvik made its own): nvCOMP's
 * space then comes from the device's default pool, for good. Returns the fake's call counter,
 * NULL for a real driver. */
static long (*refuse_pools(void))(const char *) {
  void (*fail)(const char *, int, int) =
      (void (*)(const char *, int, int))fake_cuda_symbol("fake_cuda_fail");
  if (!fail) return NULL;
  fail("cuMemPoolCreate", 1, 801 /* CUDA_ERROR_NOT_SUPPORTED */);
  return (long (*)(const char *))fake_cuda_symbol("fake_cuda_calls");
}

/* Returns 0 where nvCOMP does not compress the codec here (gzip on some GPUs, the fake's
 * GPU-only formats). */
static int test_round_trip(kvik_codec codec) {
  round_trip r;
  round_trip_setup(&r, codec);
  int rc = kvik_compress(codec, CHUNKS, (const void *const *)r.dev_in, r.in_sizes,
                         (void *const *)r.dev_comp, r.comp_caps, r.comp_sizes, r.statuses);
  if (rc == NOT_SUPPORTED) {
    printf("%s: compression not supported here: %s\n", NAMES[codec], kvik_last_error());
    round_trip_free(&r);
    return 0;
  }
  ASSERT_OK(rc);
  for (int i = 0; i < CHUNKS; i++) {
    ASSERT_EQ(r.statuses[i], 0);
    ASSERT(r.comp_sizes[i] > 0 && r.comp_sizes[i] <= r.comp_caps[i]);
  }
  ASSERT(r.comp_sizes[2] < r.in_sizes[2]);
  ASSERT_OK(kvik_decompress(codec, CHUNKS, (const void *const *)r.dev_comp, r.comp_sizes,
                            (void *const *)r.dev_out, r.out_caps, r.out_sizes, r.statuses));
  check_output(&r);
  /* Whether nvCOMP's GPU-only formats detect corruption is theirs to say. */
  if (kvik_codec_gpu_only(codec)) {
    round_trip_free(&r);
    return 1;
  }

  /* Corrupt chunk 2, truncate chunk 3, leave room for too little in chunk 4: those chunks fail
   * with an nvCOMP code and size 0, the others decompress, and the blocking form returns the
   * first failed chunk's code. The real nvCOMP 6 validates too little for chunks 2 and 3 (kvik.h):
   * against it, only chunk 4's failure, which kvik checks itself, is asserted. */
  char junk[256];
  memset(junk, 0xff, sizeof junk); /* invalid at the start of every format's stream */
  to_device(r.dev_comp[2], junk, sizeof junk);
  r.comp_sizes[3] /= 2;
  r.out_caps[4] = r.in_sizes[4] / 2;
  rc = kvik_decompress(codec, CHUNKS, (const void *const *)r.dev_comp, r.comp_sizes,
                       (void *const *)r.dev_out, r.out_caps, r.out_sizes, r.statuses);
  printf("%s: bad chunks 2-4: returned %d; statuses %d %d %d %d %d; sizes %zu %zu %zu %zu %zu\n",
         NAMES[codec], rc, r.statuses[0], r.statuses[1], r.statuses[2], r.statuses[3],
         r.statuses[4], r.out_sizes[0], r.out_sizes[1], r.out_sizes[2], r.out_sizes[3],
         r.out_sizes[4]);
  int first_bad = fake_nvcomp() ? 2 : 4;
  ASSERT(KVIK_IS_NVCOMP_ERROR(rc));
  for (int i = 0; i < CHUNKS; i++) {
    if (i < 2) {
      ASSERT_EQ(r.statuses[i], 0);
      ASSERT_EQ(r.out_sizes[i], r.in_sizes[i]);
    } else if (i >= first_bad) {
      ASSERT(KVIK_IS_NVCOMP_ERROR(r.statuses[i]));
      ASSERT_EQ(r.out_sizes[i], 0);
    }
  }
  if (first_bad == 2) {
    ASSERT(strstr(kvik_last_error(), "chunk 2 of 5") != NULL);
    ASSERT_EQ(rc, r.statuses[2]);
  }
  round_trip_free(&r);
  return 1;
}

/* A chunk that nvCOMP reports as a success with a size past its output (nvCOMP 6 on an H100 did,
 * for outputs too small) fails with nvcompErrorOutputBufferTooSmall and size 0. Against the fake
 * only, which reports so on demand. */
static void test_oversize_is_no_success(void) {
  fake_nvcomp_fail_chunk_fn arm = fake_nvcomp();
  if (!arm || !kvik_codec_supported(KVIK_CODEC_ZSTD)) return; /* a real nvCOMP */
  round_trip r;
  round_trip_setup(&r, KVIK_CODEC_ZSTD);
  ASSERT_OK(kvik_compress(KVIK_CODEC_ZSTD, CHUNKS, (const void *const *)r.dev_in, r.in_sizes,
                          (void *const *)r.dev_comp, r.comp_caps, r.comp_sizes, r.statuses));
  arm("nvcompBatchedZstdDecompressAsync", 1, 1, FAKE_NVCOMP_OVERSIZE);
  int rc = kvik_decompress(KVIK_CODEC_ZSTD, CHUNKS, (const void *const *)r.dev_comp, r.comp_sizes,
                           (void *const *)r.dev_out, r.out_caps, r.out_sizes, r.statuses);
  ASSERT_EQ(rc, KVIK_ENVCOMP_BASE - 15); /* nvcompErrorOutputBufferTooSmall */
  for (int i = 0; i < CHUNKS; i++) {
    ASSERT_EQ(r.statuses[i], i == 1 ? KVIK_ENVCOMP_BASE - 15 : 0);
    ASSERT_EQ(r.out_sizes[i], i == 1 ? 0 : r.in_sizes[i]);
  }
  round_trip_free(&r);
}

/* The stream-ordered form: results land once the stream reaches them. */
static void test_stream_ordered(kvik_codec codec) {
  round_trip r;
  round_trip_setup(&r, codec);
  CUstream stream;
  CU_OK(cu.cuStreamCreate(&stream, 0));
  for (int i = 0; i < CHUNKS; i++) r.statuses[i] = 12345;
  ASSERT_OK(kvik_compress_async(codec, CHUNKS, (const void *const *)r.dev_in, r.in_sizes,
                                (void *const *)r.dev_comp, r.comp_caps, r.comp_sizes, r.statuses,
                                stream));
  /* The sizes are host memory that the next call reads when it is made: wait for them. */
  CU_OK(cu.cuStreamSynchronize(stream));
  for (int i = 0; i < CHUNKS; i++) ASSERT_EQ(r.statuses[i], 0);
  ASSERT(r.comp_sizes[2] > 0 && r.comp_sizes[2] < r.in_sizes[2]);
  for (int i = 0; i < CHUNKS; i++) r.statuses[i] = 12345;
  ASSERT_OK(kvik_decompress_async(codec, CHUNKS, (const void *const *)r.dev_comp, r.comp_sizes,
                                  (void *const *)r.dev_out, r.out_caps, r.out_sizes, r.statuses,
                                  stream));
  CU_OK(cu.cuStreamSynchronize(stream));
  check_output(&r);
  CU_OK(cu.cuStreamDestroy_v2(stream));
  round_trip_free(&r);
}

static void test_alignment_and_capacity(kvik_codec codec) {
  size_t in_align, out_align;
  ASSERT_OK(kvik_codec_alignment(codec, 0, &in_align, &out_align));
  ASSERT(in_align >= 1 && out_align >= 1);
  round_trip r;
  round_trip_setup(&r, codec);
  if (in_align > 1) {
    const void *src[1] = {r.dev_comp[1] + 1};
    ASSERT_FAILS(kvik_decompress(codec, 1, src, r.comp_caps, (void *const *)r.dev_out,
                                 r.out_caps, NULL, NULL),
                 -EINVAL, "chunk 0 of 1: input");
  }
  size_t small[CHUNKS];
  memcpy(small, r.comp_caps, sizeof small);
  small[3] = r.in_sizes[3];
  ASSERT_FAILS(kvik_compress(codec, CHUNKS, (const void *const *)r.dev_in, r.in_sizes,
                             (void *const *)r.dev_comp, small, NULL, NULL),
               -EINVAL, "chunk 3 of 5: output capacity");
  ASSERT_OK(kvik_compress(codec, 0, NULL, NULL, NULL, NULL, NULL, NULL));
  round_trip_free(&r);
}

/* Several threads at once, each round-tripping its own batch on its own stream (stream-ordered)
 * and on kvik's (blocking): the pinned result blocks go back and forth between them. */
typedef struct worker {
  kvik_codec codec;
  CUcontext ctx;
  int ok;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  CU_OK(cu.cuCtxSetCurrent(w->ctx));
  round_trip r;
  round_trip_setup(&r, w->codec);
  CUstream stream;
  CU_OK(cu.cuStreamCreate(&stream, 0));
  for (int round = 0; round < 4; round++) {
    ASSERT_OK(kvik_compress_async(w->codec, CHUNKS, (const void *const *)r.dev_in, r.in_sizes,
                                  (void *const *)r.dev_comp, r.comp_caps, r.comp_sizes,
                                  r.statuses, stream));
    CU_OK(cu.cuStreamSynchronize(stream));
    ASSERT_OK(kvik_decompress(w->codec, CHUNKS, (const void *const *)r.dev_comp, r.comp_sizes,
                              (void *const *)r.dev_out, r.out_caps, r.out_sizes, r.statuses));
    check_output(&r);
  }
  CU_OK(cu.cuStreamDestroy_v2(stream));
  round_trip_free(&r);
  w->ok = 1;
  return NULL;
}

static void test_threads(kvik_codec codec) {
  enum { THREADS = 4 };
  pthread_t threads[THREADS];
  worker workers[THREADS];
  CUdevice device;
  CUcontext ctx; /* device 0's primary context, as load_cuda() made current here */
  CU_OK(cu.cuDeviceGet(&device, 0));
  CU_OK(cu.cuDevicePrimaryCtxRetain(&ctx, device));
  for (int i = 0; i < THREADS; i++) {
    workers[i] = (worker){codec, ctx, 0};
    ASSERT(pthread_create(&threads[i], NULL, work, &workers[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) {
    ASSERT(pthread_join(threads[i], NULL) == 0);
    ASSERT(workers[i].ok);
  }
}

/* argv[1], optional: the path of tests/nvcomp_stub.c's library. */
int main(int argc, char **argv) {
  test_codec_table();
  test_argument_checks();
  test_missing_library();
  test_not_nvcomp();
  if (argc > 1) test_one_format(argv[1]);
  int version = kvik_nvcomp_version();
  if (version < 0) {
    printf("no nvCOMP (%s): data tests skipped\n", kvik_last_error());
    return TEST_SKIP;
  }
  char path[4096];
  ASSERT(kvik_nvcomp_path(path, sizeof path) > 0);
  printf("nvCOMP %d.%d.%d from %s\n", version / 1000, version % 1000 / 100, version % 100, path);
  if (!load_cuda()) {
    printf("no CUDA driver: data tests skipped\n");
    return TEST_SKIP;
  }
  long (*cuda_calls)(const char *) = refuse_pools();
  int tested = 0;
  for (int c = 0; c < KVIK_CODEC_COUNT; c++) {
    int supported = kvik_codec_supported((kvik_codec)c);
    ASSERT(supported == 0 || supported == 1);
    printf("%s: %s\n", NAMES[c], supported ? "supported" : "not offered");
    if (!supported) continue;
    size_t bound;
    if (kvik_codec_max_compressed_size((kvik_codec)c, CHUNK_MAX, &bound) == NOT_SUPPORTED ||
        !test_round_trip((kvik_codec)c))
      continue;
    test_stream_ordered((kvik_codec)c);
    test_alignment_and_capacity((kvik_codec)c);
    tested++;
  }
  ASSERT(tested > 0);
  if (cuda_calls) {
    ASSERT_EQ(cuda_calls("cuMemPoolCreate"), 1);
    ASSERT_EQ(cuda_calls("cuMemAllocFromPoolAsync"), 0);
    ASSERT(cuda_calls("cuMemAllocAsync") >= tested);
    printf("without memory pools: tested\n");
  }
  test_oversize_is_no_success();
  test_threads(KVIK_CODEC_LZ4);
  return 0;
}
