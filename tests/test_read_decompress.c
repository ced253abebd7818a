/* The fused read (kvik.h, kvik_file_read_decompress): chunks compressed on the CPU by the
 * standard libraries, written at random offsets of several files, read and decoded into device
 * memory, in one batch and in many (a small budget, kvik__read_decompress_sizes: the test links
 * the static library), and compared with the originals. Per-chunk failures stay with their chunk:
 * a wrong uncompressed size (KVIK_EDECODED_SIZE), corrupt and truncated data, a chunk past the end
 * of its file, a failed pread (tests/fault_shim.c), nvCOMP failures (the fake's injection); and
 * the argument checks. Runs against the fakes in CI, against the real nvCOMP and driver on a GPU
 * machine (the injections are then skipped). Without nvCOMP or CUDA, exit 77 after the checks
 * that need neither. */
#include "../src/frame_check.h"
#include "../src/read_decompress.h"
#include "fake_nvcomp.h"
#include "fault_shim.h"
#include "test.h"
#include "test_cuda.h"

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string.h>

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

#define MAX_CHUNKS 64
#define FILES 3

/* Compressed by the CPU library: malloc'd, its size in *out_size; NULL where this build has no
 * library for the codec. */
static char *cpu_compress(kvik_codec codec, const char *in, size_t n, size_t *out_size) {
  size_t cap = n * 2 + 1024;
  char *out = malloc(cap);
  ASSERT(out);
  *out_size = 0;
  switch (codec) {
#ifdef FAKE_NVCOMP_HAVE_ZSTD
  case KVIK_CODEC_ZSTD: *out_size = ZSTD_compress(out, cap, in, n, 3); break;
#endif
#ifdef FAKE_NVCOMP_HAVE_LZ4
  case KVIK_CODEC_LZ4: *out_size = (size_t)LZ4_compress_default(in, out, (int)n, (int)cap); break;
#endif
#ifdef FAKE_NVCOMP_HAVE_SNAPPY
  case KVIK_CODEC_SNAPPY:
    *out_size = cap;
    ASSERT_EQ(snappy_compress(in, n, out, out_size), SNAPPY_OK);
    break;
#endif
#ifdef FAKE_NVCOMP_HAVE_ZLIB
  case KVIK_CODEC_DEFLATE:
  case KVIK_CODEC_GZIP: {
    z_stream z = {0};
    int bits = codec == KVIK_CODEC_GZIP ? 31 : -15;
    ASSERT_EQ(deflateInit2(&z, 6, Z_DEFLATED, bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)out;
    z.avail_out = (uInt)cap;
    ASSERT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
    *out_size = z.total_out;
    deflateEnd(&z);
    break;
  }
#endif
  default: free(out); return NULL;
  }
  ASSERT(*out_size > 0);
  return out;
}

/* A set of chunks in FILES files, each file the chunks' compressed bytes at random offsets
 * with random bytes between them. */
typedef struct set {
  kvik_codec codec;
  char *dir, *paths[FILES];
  kvik_file *files[FILES];
  size_t n;
  char *original[MAX_CHUNKS], *dst[MAX_CHUNKS];
  kvik_compressed_chunk chunks[MAX_CHUNKS];
  int statuses[MAX_CHUNKS];
} set;

static void fill_chunk(char *p, size_t n, uint64_t *seed) {
  uint64_t s = test_rand(seed);
  for (size_t i = 0; i < n; i++)
    p[i] = (char)((i / 64 + s) % 5 ? 'a' + (int)((i + s) % 11) : (int)test_rand(seed));
}

/* Where the chunks go: the last file, which tests/fault_shim.c acts on, holds none of them
 * (SHIM_NONE), the last one alone (SHIM_LAST) or all (SHIM_ALL). */
enum { SHIM_NONE, SHIM_LAST, SHIM_ALL };

/* The chunks in their files as `shim_file` says. The codec needs its CPU library
 * (have_cpu_library). */
static void set_make(set *s, kvik_codec codec, size_t n, uint64_t seed, int shim_file) {
  memset(s, 0, sizeof *s);
  s->codec = codec;
  s->n = n;
  s->dir = test_mkdtemp();
  size_t fill[FILES] = {0};
  int file_of[MAX_CHUNKS];
  char *content[FILES];
  for (int f = 0; f < FILES; f++) ASSERT((content[f] = malloc(1 << 22)) != NULL);
  for (size_t i = 0; i < n; i++) {
    size_t size = 1 + test_below(&seed, 48 << 10);
    ASSERT((s->original[i] = malloc(size)) != NULL);
    fill_chunk(s->original[i], size, &seed);
    size_t packed_size;
    char *packed = cpu_compress(codec, s->original[i], size, &packed_size);
    int f = shim_file == SHIM_ALL    ? FILES - 1
            : shim_file == SHIM_LAST ? (i == n - 1 ? FILES - 1 : (int)(i % (FILES - 1)))
                                     : (int)(i % FILES);
    size_t gap = test_below(&seed, 5000);
    test_fill(content[f] + fill[f], gap, seed);
    fill[f] += gap;
    ASSERT(fill[f] + packed_size < (1 << 22));
    memcpy(content[f] + fill[f], packed, packed_size);
    s->dst[i] = device_alloc(size);
    s->chunks[i] = (kvik_compressed_chunk){.file_offset = (int64_t)fill[f],
                                           .compressed_size = packed_size,
                                           .dst = s->dst[i],
                                           .uncompressed_size = size};
    file_of[i] = f;
    fill[f] += packed_size;
    free(packed);
  }
  for (int f = 0; f < FILES; f++) {
    char name[32];
    snprintf(name, sizeof name, "%s-%d", f == FILES - 1 && shim_file ? SHIM_TARGET_MARK : "c", f);
    s->paths[f] = test_path(s->dir, name);
    test_write_file(s->paths[f], content[f], fill[f]);
    free(content[f]);
    ASSERT_OK(kvik_file_open(s->paths[f], "r", 0, &s->files[f]));
  }
  for (size_t i = 0; i < n; i++) s->chunks[i].file = s->files[file_of[i]];
}

static int have_cpu_library(kvik_codec codec) {
  size_t size;
  char *packed = cpu_compress(codec, "abc", 3, &size);
  free(packed);
  return packed != NULL;
}

static void set_free(set *s) {
  for (size_t i = 0; i < s->n; i++) {
    free(s->original[i]);
    if (s->dst[i]) device_free(s->dst[i]);
  }
  for (int f = 0; f < FILES; f++) {
    kvik_file_free(s->files[f]);
    if (s->paths[f]) unlink(s->paths[f]);
    free(s->paths[f]);
  }
  test_rmdir(s->dir);
}

/* Chunk i decoded to its original bytes. */
static void check_chunk(const set *s, size_t i) {
  size_t size = s->chunks[i].uncompressed_size;
  char *back = malloc(size);
  from_device(back, s->dst[i], size);
  ASSERT_SAME_BYTES(back, s->original[i], size);
  free(back);
}

static int run(set *s) {
  for (size_t i = 0; i < s->n; i++) s->statuses[i] = 12345;
  return kvik_file_read_decompress(s->codec, s->chunks, s->n, s->statuses);
}

/* The fake nvCOMP's control API, NULL against a real nvCOMP. */
static void *fake_symbol(const char *name) {
  char path[4096];
  ASSERT(kvik_nvcomp_path(path, sizeof path) > 0);
  void *lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return NULL;
  void *sym = dlsym(lib, name);
  dlclose(lib); /* the library stays: kvik holds it */
  return sym;
}

static const char *const DECOMPRESS[] = {
    [KVIK_CODEC_ZSTD] = "nvcompBatchedZstdDecompressAsync",
    [KVIK_CODEC_LZ4] = "nvcompBatchedLZ4DecompressAsync",
    [KVIK_CODEC_SNAPPY] = "nvcompBatchedSnappyDecompressAsync",
    [KVIK_CODEC_DEFLATE] = "nvcompBatchedDeflateDecompressAsync",
    [KVIK_CODEC_GZIP] = "nvcompBatchedGzipDecompressAsync",
};

/* Every chunk back, in one batch and in many. */
static void test_round_trip(kvik_codec codec) {
  set s;
  set_make(&s, codec, 40, 11 + (uint64_t)codec, SHIM_NONE);
  static const char zeros[48 << 10] = {0};
  fake_nvcomp_calls_fn calls = (fake_nvcomp_calls_fn)fake_symbol("fake_nvcomp_calls");
  /* Batch budgets in bytes and in chunks, read steps and steps read ahead: several steps a batch,
   * a step a chunk, more steps than pinned buffers, one step ahead (two buffers), the most there
   * may be. */
  size_t budgets[] = {0, 1, 64 << 10, 16 << 10, 64 << 10, 0, 0, 16 << 10, 0};
  size_t counts[] = {0, 0, 0, 0, 0, 0, 7, 0, 0};
  size_t steps[] = {0, 0, 0, 0, 8 << 10, 1, 4 << 10, 1, 2 << 10};
  size_t ahead[] = {0, 0, 0, 0, 0, 0, 0, 1, 99};
  for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++) {
    kvik__read_decompress_sizes(budgets[b], counts[b], steps[b], ahead[b]);
    for (size_t i = 0; i < s.n; i++) to_device(s.dst[i], zeros, s.chunks[i].uncompressed_size);
    long before = calls ? calls(DECOMPRESS[codec]) : 0;
    ASSERT_OK(run(&s));
    long batches = calls ? calls(DECOMPRESS[codec]) - before : -1;
    printf("%s: budget %zu, %zu chunks, step %zu, %zu ahead: %ld batches\n",
           kvik_codec_name(codec), budgets[b], counts[b], steps[b], ahead[b], batches);
    if (calls && budgets[b] == 0) ASSERT_EQ(batches, counts[b] ? 6 : 1); /* 40 chunks by 7 */
    if (calls && budgets[b] == 1) ASSERT_EQ(batches, (long)s.n); /* a chunk each */
    if (calls && budgets[b] == 64 << 10) ASSERT(batches > 3 && batches < (long)s.n);
    for (size_t i = 0; i < s.n; i++) {
      ASSERT_EQ(s.statuses[i], 0);
      check_chunk(&s, i);
    }
  }
  ASSERT_OK(kvik_file_read_decompress(codec, s.chunks, s.n, NULL)); /* statuses may be NULL */
  kvik__read_decompress_sizes(0, 0, 0, 0);
  set_free(&s);
}

/* Chunk `bad` alone fails: the others decode; the call returns its code, naming it. */
static void expect_only(set *s, int rc, size_t bad, int code) {
  printf("%s: chunk %zu: %d (%s): %s\n", kvik_codec_name(s->codec), bad, s->statuses[bad],
         kvik_err_name(s->statuses[bad]), kvik_last_error());
  if (code) ASSERT_EQ(s->statuses[bad], code);
  ASSERT(s->statuses[bad] < 0);
  ASSERT_EQ(rc, s->statuses[bad]);
  char where[64];
  snprintf(where, sizeof where, "chunk %zu of %zu (", bad, s->n);
  ASSERT(strstr(kvik_last_error(), where) != NULL);
  ASSERT(strstr(kvik_last_error(), "kvik_file_read_decompress") != NULL);
  for (size_t i = 0; i < s->n; i++) {
    if (i == bad) continue;
    ASSERT_EQ(s->statuses[i], 0);
    check_chunk(s, i);
  }
}

/* A chunk said to decode to more than it does: kvik's check of its framing fails it before
 * nvCOMP sees it (zstd, LZ4, Snappy, gzip); nvCOMP reports a Deflate chunk whose output has room
 * to spare as a success of the real size, which kvik's check of the size decoded fails. */
static void test_wrong_size(kvik_codec codec, size_t budget) {
  set s;
  set_make(&s, codec, 12, 5, SHIM_NONE);
  kvik__read_decompress_sizes(budget, 0, 0, 0);
  size_t bad = 7, size = s.chunks[bad].uncompressed_size;
  device_free(s.dst[bad]);
  s.dst[bad] = device_alloc(size + 100);
  s.chunks[bad].dst = s.dst[bad];
  s.chunks[bad].uncompressed_size = size + 100;
  int rc = run(&s);
  s.chunks[bad].uncompressed_size = size;
  expect_only(&s, rc, bad, KVIK_EDECODED_SIZE);
  char decoded[64];
  snprintf(decoded, sizeof decoded, "%zu bytes, not %zu", size, size + 100);
  ASSERT(strstr(kvik_last_error(), decoded) != NULL);
  ASSERT(strstr(kvik_last_error(), s.paths[bad % FILES]) != NULL);
  kvik__read_decompress_sizes(0, 0, 0, 0);
  set_free(&s);
}

/* Whether kvik checks the codec's framing before nvCOMP sees a chunk (frame_check.h). */
static int framed(kvik_codec codec) { return kvik__frame_checked(codec); }

/* A bad chunk's code: the framing check's for a framed codec (on the real nvCOMP too: its zstd
 * decoder faulted the context on a truncated chunk), else an nvCOMP code from the fake; the
 * real nvCOMP 6 reports some such chunks as successes of another size, which kvik's size check
 * fails. */
static void expect_bad(kvik_codec codec, int rc, int faked) {
  if (framed(codec)) ASSERT(rc == -EBADMSG || rc == KVIK_EDECODED_SIZE);
  else if (faked) ASSERT(KVIK_IS_NVCOMP_ERROR(rc));
}

/* Corrupt and truncated data. */
static void test_bad_data(kvik_codec codec, int faked) {
  set s;
  set_make(&s, codec, 10, 9, SHIM_NONE);
  size_t bad = 4;
  char junk[64];
  memset(junk, 0xff, sizeof junk);
  int fd = open(s.paths[bad % FILES], O_WRONLY);
  ASSERT(fd >= 0);
  ASSERT(pwrite(fd, junk, sizeof junk, s.chunks[bad].file_offset) == (ssize_t)sizeof junk);
  close(fd);
  int rc = run(&s);
  expect_only(&s, rc, bad, 0);
  expect_bad(codec, rc, faked);
  set_free(&s);

  set_make(&s, codec, 10, 10, SHIM_NONE);
  s.chunks[bad].compressed_size /= 2;
  rc = run(&s);
  expect_only(&s, rc, bad, 0);
  if (codec != KVIK_CODEC_SNAPPY) expect_bad(codec, rc, faked); /* Snappy: its length only */
  set_free(&s);
}

/* A chunk that the file ends inside of: -ENODATA, before nvCOMP sees it. */
static void test_past_end(kvik_codec codec) {
  set s;
  set_make(&s, codec, 9, 12, SHIM_NONE);
  size_t bad = 3;
  int64_t end = kvik_file_size(s.chunks[bad].file);
  s.chunks[bad].file_offset = end - 2;
  expect_only(&s, run(&s), bad, -ENODATA);
  ASSERT(strstr(kvik_last_error(), "ends 2 bytes into") != NULL);
  s.chunks[bad].file_offset = end + 100;
  expect_only(&s, run(&s), bad, -ENODATA);
  set_free(&s);
}

/* Chunks by path, the last of two files' to the end of the file (size 0; one by handle), opened
 * by the call on the pool (more than one task's worth), decode as by handle. A missing path, a
 * directory, and a size 0 at the end of the file fail their chunk alone. */
static void test_by_path(kvik_codec codec) {
  set s;
  set_make(&s, codec, MAX_CHUNKS, 17, SHIM_NONE);
  const char *path_of[MAX_CHUNKS];
  size_t last_in[FILES] = {0};
  for (size_t i = 0; i < s.n; i++)
    for (int f = 0; f < FILES; f++)
      if (s.chunks[i].file == s.files[f]) {
        path_of[i] = s.paths[f];
        last_in[f] = i;
      }
  for (size_t i = 0; i < s.n; i++)
    if (i % 3 || i == last_in[1]) {
      s.chunks[i].file = NULL;
      s.chunks[i].path = path_of[i];
    }
  s.chunks[last_in[0]].file = s.files[0];
  s.chunks[last_in[0]].path = NULL;
  s.chunks[last_in[0]].compressed_size = 0;
  s.chunks[last_in[1]].compressed_size = 0;
  ASSERT_OK(run(&s));
  for (size_t i = 0; i < s.n; i++) {
    ASSERT_EQ(s.statuses[i], 0);
    check_chunk(&s, i);
  }
  size_t bad = 5; /* by path */
  kvik_compressed_chunk keep = s.chunks[bad];
  char *missing = test_path(s.dir, "missing");
  s.chunks[bad].path = missing;
  expect_only(&s, run(&s), bad, -ENOENT);
  ASSERT(strstr(kvik_last_error(), missing) != NULL);
  ASSERT(strstr(kvik_last_error(), "kvik_file_open") != NULL);
  ASSERT_FAILS(kvik_file_read_decompress(codec, &s.chunks[bad], 1, NULL), -ENOENT,
               "chunk 0 of 1"); /* nothing left to read */
  s.chunks[bad] = keep;
  kvik__read_decompress_sizes(0, 4, 0, 0); /* batches of 4: the second one's chunks all fail */
  kvik_compressed_chunk second[4];
  memcpy(second, &s.chunks[4], sizeof second);
  for (size_t i = 4; i < 8; i++) {
    s.chunks[i].file = NULL;
    s.chunks[i].path = missing;
  }
  ASSERT_EQ(run(&s), -ENOENT);
  for (size_t i = 0; i < s.n; i++) {
    ASSERT_EQ(s.statuses[i], i >= 4 && i < 8 ? -ENOENT : 0);
    if (!s.statuses[i]) check_chunk(&s, i);
  }
  kvik__read_decompress_sizes(0, 0, 0, 0);
  memcpy(&s.chunks[4], second, sizeof second);
  s.chunks[bad].path = s.dir;
  expect_only(&s, run(&s), bad, 0);
  s.chunks[bad] = keep;
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path_of[bad], "r", 0, &f));
  s.chunks[bad].file_offset = kvik_file_size(f);
  kvik_file_free(f);
  s.chunks[bad].compressed_size = 0;
  expect_only(&s, run(&s), bad, -ENODATA);
  ASSERT(strstr(kvik_last_error(), "at or before the chunk's offset") != NULL);
  free(missing);
  set_free(&s);
}

/* run() on a thread of its own. */
typedef struct decode_job {
  set *s;
  int rc;
} decode_job;

static void *decode_thread(void *arg) {
  decode_job *job = arg;
  job->rc = run(job->s);
  return NULL;
}

/* Small chunks, below the GDS threshold at which kvik_file_pread() reads on the calling thread,
 * are read on the pool, several at once: with the shim's gate closed, more than one pread(2)
 * reaches it (on the calling thread, the first would hold up the others). */
static void test_small_chunks_in_parallel(kvik_codec codec) {
  set s;
  set_make(&s, codec, 8, 17, SHIM_ALL);
  int64_t threads, zero_copy;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_NUM_THREADS, &threads));
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_ZERO_COPY_READ, &zero_copy));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_OFF)); /* reads by pread(2) */
  shim_reset();
  atomic_store(&shim.gate_closed, 1);
  decode_job job = {&s, 1};
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, NULL, decode_thread, &job), 0);
  for (int ms = 0; ms < 10000 && atomic_load(&shim_io_calls) < 2; ms++) usleep(1000);
  long at_gate = atomic_load(&shim_io_calls);
  shim_open_gate();
  ASSERT_EQ(pthread_join(thread, NULL), 0);
  shim_reset();
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, threads));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, zero_copy));
  ASSERT_OK(job.rc);
  ASSERT(at_gate >= 2);
  for (size_t i = 0; i < s.n; i++) check_chunk(&s, i);
  set_free(&s);
}

/* A failed pread(2) of the last chunk, alone in the shim's file, in many batches. */
static void test_read_error(kvik_codec codec) {
  set s;
  set_make(&s, codec, 20, 13, SHIM_LAST);
  kvik__read_decompress_sizes(32 << 10, 0, 0, 0);
  shim_reset();
  shim.read_errno = EIO;
  shim.read_fail_at = 1;
  int rc = run(&s);
  shim_reset();
  expect_only(&s, rc, s.n - 1, -EIO);
  ASSERT(strstr(kvik_last_error(), SHIM_TARGET_MARK) != NULL);
  kvik__read_decompress_sizes(0, 0, 0, 0);
  set_free(&s);
}

#define CANNOT_DECOMPRESS 12 /* nvcompErrorCannotDecompress */
#define INTERNAL 10000       /* nvcompErrorInternal */

/* A chunk that nvCOMP fails; then a batch it refuses whole: the batches before it decode, that
 * one and those after it fail with nvCOMP's code. */
static void test_nvcomp_failures(kvik_codec codec) {
  fake_nvcomp_fail_chunk_fn fail_chunk = (fake_nvcomp_fail_chunk_fn)fake_symbol(
      "fake_nvcomp_fail_chunk");
  fake_nvcomp_fail_fn fail = (fake_nvcomp_fail_fn)fake_symbol("fake_nvcomp_fail");
  fake_nvcomp_reset_fn reset = (fake_nvcomp_reset_fn)fake_symbol("fake_nvcomp_reset");
  ASSERT(fail_chunk && fail && reset);
  set s;
  set_make(&s, codec, 12, 14, SHIM_NONE);
  fail_chunk(DECOMPRESS[codec], 1, 5, CANNOT_DECOMPRESS);
  expect_only(&s, run(&s), 5, KVIK_ENVCOMP_BASE - CANNOT_DECOMPRESS);
  reset();

  kvik__read_decompress_sizes(1, 0, 0, 0); /* a batch a chunk */
  fail(DECOMPRESS[codec], 4, INTERNAL);
  int rc = run(&s);
  reset();
  ASSERT_EQ(rc, KVIK_ENVCOMP_BASE - 999); /* nvcompErrorInternal's code */
  ASSERT(strstr(kvik_last_error(), "chunk 3 of 12") != NULL);
  for (size_t i = 0; i < s.n; i++) {
    ASSERT_EQ(s.statuses[i], i < 3 ? 0 : rc);
    if (i < 3) check_chunk(&s, i);
  }
  kvik__read_decompress_sizes(0, 0, 0, 0);
  set_free(&s);
}

/* The staging and nvCOMP's space come from kvik's own pool, made once, whose release threshold
 * follows KVIK_SETTING_NVCOMP_MEMORY; a failed allocation fails the chunks it was for. */
static void test_memory_pool(kvik_codec codec) {
  long (*calls)(const char *) = (long (*)(const char *))fake_cuda_symbol("fake_cuda_calls");
  long (*live)(const char *) = (long (*)(const char *))fake_cuda_symbol("fake_cuda_live");
  unsigned long long (*threshold)(void) =
      (unsigned long long (*)(void))fake_cuda_symbol("fake_cuda_pool_threshold");
  void (*fail)(const char *, int, int) =
      (void (*)(const char *, int, int))fake_cuda_symbol("fake_cuda_fail");
  ASSERT(calls && live && threshold && fail);
  set s;
  set_make(&s, codec, 6, 15, SHIM_NONE);
  long made = calls("cuMemPoolCreate"), taken = calls("cuMemAllocFromPoolAsync");
  ASSERT_OK(run(&s));
  ASSERT_EQ(live("pools"), 1);
  ASSERT_EQ(calls("cuMemPoolCreate"), made); /* made by the first call of the process */
  ASSERT_EQ(calls("cuMemAllocFromPoolAsync"), taken + 1); /* staging, with nvCOMP's space */
  ASSERT_EQ(threshold(), 16ull << 30);

  /* Where nvCOMP cannot size the space ahead, the decoding takes and zeroes its own. */
  fake_nvcomp_fail_fn nv_fail = (fake_nvcomp_fail_fn)fake_symbol("fake_nvcomp_fail");
  fake_nvcomp_reset_fn nv_reset = (fake_nvcomp_reset_fn)fake_symbol("fake_nvcomp_reset");
  ASSERT(nv_fail && nv_reset);
  char temp_size[96];
  snprintf(temp_size, sizeof temp_size, "%.*sGetTempSize",
           (int)(strlen(DECOMPRESS[codec]) - strlen("Async")), DECOMPRESS[codec]);
  taken = calls("cuMemAllocFromPoolAsync");
  nv_fail(temp_size, 1, INTERNAL);
  ASSERT_OK(run(&s));
  nv_reset();
  ASSERT_EQ(calls("cuMemAllocFromPoolAsync"), taken + 2); /* staging, then nvCOMP's block */
  for (size_t i = 0; i < s.n; i++) check_chunk(&s, i);

  int64_t keep;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_NVCOMP_MEMORY, &keep));
  long trims = calls("cuMemPoolTrimTo");
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NVCOMP_MEMORY, 12345)); /* applies at once */
  ASSERT_EQ(threshold(), 12345);
  ASSERT_EQ(calls("cuMemPoolTrimTo"), trims + 1);
  ASSERT_OK(run(&s));
  ASSERT_EQ(threshold(), 12345);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NVCOMP_MEMORY, keep));
  ASSERT_EQ(threshold(), (unsigned long long)keep);

  fail("cuMemAllocFromPoolAsync", 1, 2 /* CUDA_ERROR_OUT_OF_MEMORY */);
  int rc = run(&s);
  ASSERT(rc < 0);
  ASSERT(strstr(kvik_last_error(), "cuMemAllocFromPoolAsync") != NULL);
  for (size_t i = 0; i < s.n; i++) ASSERT_EQ(s.statuses[i], rc);
  ASSERT_OK(run(&s));
  for (size_t i = 0; i < s.n; i++) check_chunk(&s, i);

  /* A child after fork() has no CUDA: the setting still changes (the parent's pools untouched),
   * and the fused read says why it cannot run. */
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    ASSERT_OK(kvik_setting_set(KVIK_SETTING_NVCOMP_MEMORY, 0));
    ASSERT_EQ(run(&s), KVIK_ECUDA_UNAVAILABLE);
    _exit(0);
  }
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(threshold(), (unsigned long long)keep);
  set_free(&s);
  printf("%s: kvik's memory pool tested\n", kvik_codec_name(codec));
}

/* Checked before anything starts, nvCOMP or not where they need none. */
static void test_argument_checks(void) {
  ASSERT_FAILS(kvik_file_read_decompress(KVIK_CODEC_COUNT, NULL, 0, NULL), -EINVAL,
               "unknown codec");
  ASSERT_FAILS(kvik_file_read_decompress(KVIK_CODEC_ZSTD, NULL, 2, NULL), -EINVAL, "NULL chunks");
}

static void test_chunk_checks(kvik_codec codec) {
  set s;
  set_make(&s, codec, 3, 15, SHIM_NONE);
  ASSERT_OK(kvik_file_read_decompress(codec, NULL, 0, NULL)); /* no chunks */
  kvik_compressed_chunk keep = s.chunks[1];
  s.chunks[1].file = NULL;
  ASSERT_FAILS(run(&s), -EINVAL, "chunk 1 of 3: NULL file and path");
  s.chunks[1] = keep;
  s.chunks[1].path = s.paths[0];
  ASSERT_FAILS(run(&s), -EINVAL, "chunk 1 of 3: both a file and a path");
  s.chunks[1] = keep;
  s.chunks[1].dst = NULL;
  ASSERT_FAILS(run(&s), -EINVAL, "chunk 1 of 3: NULL output");
  s.chunks[1] = keep;
  s.chunks[1].file_offset = -1;
  ASSERT_FAILS(run(&s), -EINVAL, "negative");
  s.chunks[1] = keep;
  s.chunks[1].file_offset = INT64_MAX - 5;
  ASSERT_FAILS(run(&s), -EINVAL, "above INT64_MAX");
  s.chunks[1] = keep;
  s.chunks[1].uncompressed_size = 0;
  ASSERT_FAILS(run(&s), -EINVAL, "chunk 1 of 3: uncompressed size 0");
  s.chunks[1] = keep;
  kvik_file *w;
  ASSERT_OK(kvik_file_open(s.paths[1], "r+", 0, &w)); /* readable: fine */
  s.chunks[1].file = w;
  ASSERT_OK(run(&s));
  kvik_file_free(w);
  ASSERT_OK(kvik_file_open(s.paths[1], "w", 0644, &w)); /* truncates: no matter */
  s.chunks[1].file = w;
  ASSERT_FAILS(run(&s), -EBADF, "chunk 1 of 3: file not open for reading");
  ASSERT_OK(kvik_file_close(w));
  ASSERT_FAILS(run(&s), -EBADF, "chunk 1 of 3: file closed");
  kvik_file_free(w);
  for (size_t i = 0; i < s.n; i++) ASSERT_EQ(s.statuses[i], 12345); /* nothing written */
  s.chunks[1] = keep;
  set_free(&s);
}

/* kvik__frame_check() on chunks of the CPU libraries: whole ones pass, with exactly their size;
 * every truncation of a zstd or LZ4 chunk fails (the real nvCOMP decoded an LZ4 chunk cut short
 * to its full size, as a success); random damage never makes it read outside the
 * chunk (the sanitizer build) and gives 0 or one of its two codes. No GPU needed. */
static void test_frame_checks(void) {
  uint64_t seed = 99;
  size_t size = 40000;
  char *raw = malloc(size), why[256];
  ASSERT(raw != NULL);
  fill_chunk(raw, size, &seed);
  for (int c = 0; c <= KVIK_CODEC_GZIP; c++) {
    kvik_codec codec = (kvik_codec)c;
    size_t n;
    unsigned char *packed = (unsigned char *)cpu_compress(codec, raw, size, &n);
    if (!packed) continue;
    ASSERT_OK(kvik__frame_check(codec, packed, n, size, why, sizeof why));
    if (framed(codec))
      ASSERT_EQ(kvik__frame_check(codec, packed, n, size + 1, why, sizeof why), KVIK_EDECODED_SIZE);
    if (codec == KVIK_CODEC_ZSTD || codec == KVIK_CODEC_LZ4)
      for (size_t cut = 0; cut < n; cut++)
        ASSERT(kvik__frame_check(codec, packed, cut, size, why, sizeof why) < 0);
    unsigned char *copy = malloc(n);
    ASSERT(copy != NULL);
    for (int round = 0; round < 3000; round++) {
      memcpy(copy, packed, n);
      for (int flips = 1 + (int)test_below(&seed, 4); flips > 0; flips--)
        copy[test_below(&seed, n)] = (unsigned char)test_rand(&seed);
      size_t cut = n - test_below(&seed, n < 64 ? n : 64);
      int rc = kvik__frame_check(codec, copy, cut, size, why, sizeof why);
      ASSERT(rc == 0 || rc == -EBADMSG || rc == KVIK_EDECODED_SIZE);
    }
    free(copy);
    free(packed);
  }
  free(raw);
}

int main(void) {
  test_argument_checks();
  test_frame_checks();
  int version = kvik_nvcomp_version();
  if (version < 0) {
    printf("no nvCOMP (%s): data tests skipped\n", kvik_last_error());
    return TEST_SKIP;
  }
  if (!load_cuda()) {
    printf("no CUDA driver: data tests skipped\n");
    return TEST_SKIP;
  }
  int faked = fake_symbol("fake_nvcomp_fail") != NULL;
  int tested = 0;
  for (int c = 0; c <= KVIK_CODEC_GZIP; c++) {
    kvik_codec codec = (kvik_codec)c;
    if (kvik_codec_supported(codec) != 1 || !have_cpu_library(codec)) {
      printf("%s: not tested (no nvCOMP codec or no CPU library)\n", kvik_codec_name(codec));
      continue;
    }
    test_round_trip(codec);
    test_wrong_size(codec, 0);
    test_wrong_size(codec, 16 << 10);
    test_bad_data(codec, faked);
    test_past_end(codec);
    test_by_path(codec);
    test_read_error(codec);
    test_small_chunks_in_parallel(codec);
    if (faked) test_nvcomp_failures(codec);
    if (fake_cuda_symbol("fake_cuda_pool_threshold")) test_memory_pool(codec);
    test_chunk_checks(codec);
    printf("%s: tested\n", kvik_codec_name(codec));
    tested++;
  }
  ASSERT(tested > 0);
  return 0;
}
