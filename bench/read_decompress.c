/* What the fused read's parts cost, next to it (issue 27), on a GPU machine with nvCOMP.
 *
 * The chunk files of a 1-d Zarr 3 array (DIR/c/0, DIR/c/1, ...: zarr's default keys), each of
 * which decodes to CHUNK_BYTES, are
 *   - read: every chunk into one pinned buffer, all at once on kvik's pool (as the fused read
 *     reads a step);
 *   - copied: that buffer to device memory, one copy;
 *   - decoded: from that device memory, one kvik_decompress() of every chunk (the ceiling);
 *   - read to the device by kvik's bounce lanes: a pooled kvik_file_pread of each chunk into its
 *     place in device memory, as a plain read of device memory goes (the design the fused read
 *     did not take, since its checks need each chunk whole in host memory), then decoded;
 *   - read and decoded by kvik_file_read_decompress() at its default sizes and others: chunks a
 *     batch, the read step, the steps read ahead (kvik__read_decompress_sizes); and at the
 *     default sizes with the chunks given by path, to the end of their files (the call opens
 *     them), as kvik.zarr does.
 * Each is timed REPEAT times after an untimed pass; the median is printed as GB/s (decoded bytes,
 * or compressed bytes for the read and the copy) with CPU seconds per decoded GB. Every fused
 * result is compared with the decoded ceiling's. The files should be in the page cache.
 *
 * usage: bench_read_decompress DIR CODEC CHUNK_BYTES [HEADER] [REPEAT]
 *        HEADER: bytes before each chunk's compressed data (numcodecs' LZ4: 4; default 0);
 *        REPEAT: default 5. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cuda.h"
#include "file.h"
#include "kvik.h"
#include "memory.h"
#include "read_decompress.h"
#include "clock.h"


#define MAX_REPEAT 31
#define ALIGN 256 /* of each chunk in the pinned and device buffers */

static const kvik__cuda_api *cu;

typedef struct chunks {
  size_t n, chunk_bytes, header;
  kvik_codec codec;
  kvik_file **files;
  char **paths;
  size_t *sizes, *offsets, *capacities; /* compressed sizes, places in `packed`, CHUNK_BYTES */
  size_t packed;                        /* bytes of the aligned compressed chunks */
  void *pinned;
  CUdeviceptr staged, out;
  const void **src; /* in `staged` */
  void **dst;       /* in `out` */
  kvik_compressed_chunk *fused, *by_path;
} chunks;

static void die(const char *what, int rc) {
  fprintf(stderr, "bench_read_decompress: %s: %s\n", what, rc < 0 ? kvik_last_error() : "");
  exit(1);
}

static void cuda_ok(CUresult r, const char *what) {
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "bench_read_decompress: %s: CUDA error %d\n", what, r);
    exit(1);
  }
}

static void *must_calloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (!p) die("out of memory", 0);
  return p;
}

/* Open DIR/c/0, DIR/c/1, ... until one is missing; lay the chunks out in the buffers. */
static void chunks_open(chunks *c, const char *dir) {
  size_t cap = 0;
  for (;;) {
    char path[4096];
    snprintf(path, sizeof path, "%s/c/%zu", dir, c->n);
    kvik_file *f;
    if (kvik_file_open(path, "r", 0, &f) < 0) break;
    if (c->n == cap) {
      cap = cap ? 2 * cap : 1024;
      c->files = realloc(c->files, cap * sizeof *c->files);
      c->paths = realloc(c->paths, cap * sizeof *c->paths);
      c->sizes = realloc(c->sizes, cap * sizeof *c->sizes);
      if (!c->files || !c->paths || !c->sizes) die("out of memory", 0);
    }
    c->files[c->n] = f;
    if (!(c->paths[c->n] = strdup(path))) die("out of memory", 0);
    c->sizes[c->n++] = (size_t)kvik_file_size(f) - c->header;
  }
  if (c->n == 0) die("no chunk files (DIR/c/0 ...)", 0);
  c->offsets = must_calloc(c->n, sizeof *c->offsets);
  c->capacities = must_calloc(c->n, sizeof *c->capacities);
  c->src = must_calloc(c->n, sizeof *c->src);
  c->dst = must_calloc(c->n, sizeof *c->dst);
  c->fused = must_calloc(c->n, sizeof *c->fused);
  c->by_path = must_calloc(c->n, sizeof *c->by_path);
  for (size_t i = 0; i < c->n; i++) {
    c->offsets[i] = c->packed;
    c->packed += (c->sizes[i] + ALIGN - 1) / ALIGN * ALIGN;
    c->capacities[i] = c->chunk_bytes;
  }
  cuda_ok(cu->cuMemHostAlloc(&c->pinned, c->packed, 0), "cuMemHostAlloc");
  cuda_ok(cu->cuMemAlloc(&c->staged, c->packed), "cuMemAlloc");
  cuda_ok(cu->cuMemAlloc(&c->out, c->n * c->chunk_bytes), "cuMemAlloc");
  for (size_t i = 0; i < c->n; i++) {
    c->src[i] = (const void *)(uintptr_t)(c->staged + c->offsets[i]);
    c->dst[i] = (void *)(uintptr_t)(c->out + i * c->chunk_bytes);
    c->fused[i] = (kvik_compressed_chunk){.file = c->files[i],
                                          .file_offset = (int64_t)c->header,
                                          .compressed_size = c->sizes[i],
                                          .dst = c->dst[i],
                                          .uncompressed_size = c->chunk_bytes};
    c->by_path[i] = (kvik_compressed_chunk){.path = c->paths[i],
                                            .file_offset = (int64_t)c->header,
                                            .dst = c->dst[i],
                                            .uncompressed_size = c->chunk_bytes};
  }
}

/* ---- the parts, and the fused read ------------------------------------------------------- */

typedef struct config {
  size_t chunks, step, ahead; /* 0: the default */
} config;

/* Every chunk read into its place from `base`, all at once on kvik's pool: host or device memory,
 * which kvik reads through its bounce lanes. */
static void read_chunks(chunks *c, char *base) {
  kvik_future **futures = must_calloc(c->n, sizeof *futures);
  for (size_t i = 0; i < c->n; i++) {
    int rc = kvik__file_pread_pooled(c->files[i], base + c->offsets[i], c->sizes[i],
                                     (int64_t)c->header, &futures[i]);
    if (rc < 0) die("kvik__file_pread_pooled", rc);
  }
  for (size_t i = 0; i < c->n; i++) {
    ssize_t got = kvik_future_wait(futures[i]);
    if (got != (ssize_t)c->sizes[i]) die("a chunk's read", got < 0 ? (int)got : 0);
    kvik_future_free(futures[i]);
  }
  free(futures);
}

static void read_all(chunks *c) { read_chunks(c, c->pinned); }

static void decode_all(chunks *c) {
  int rc = kvik_decompress(c->codec, c->n, c->src, c->sizes, c->dst, c->capacities, NULL, NULL);
  if (rc < 0) die("kvik_decompress", rc);
}

/* Every chunk read straight into its place in device memory by kvik's bounce lanes. */
static void lanes_all(chunks *c) { read_chunks(c, (char *)(uintptr_t)c->staged); }

static void lanes_then_decode(chunks *c) {
  lanes_all(c);
  decode_all(c);
}

static void copy_all(chunks *c) {
  cuda_ok(cu->cuMemcpyHtoDAsync(c->staged, c->pinned, c->packed, NULL), "cuMemcpyHtoDAsync");
  cuda_ok(cu->cuStreamSynchronize(NULL), "cuStreamSynchronize");
}

static void fused(chunks *c) {
  int rc = kvik_file_read_decompress(c->codec, c->fused, c->n, NULL);
  if (rc < 0) die("kvik_file_read_decompress", rc);
}

static void fused_by_path(chunks *c) {
  int rc = kvik_file_read_decompress(c->codec, c->by_path, c->n, NULL);
  if (rc < 0) die("kvik_file_read_decompress", rc);
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median seconds and CPU seconds of `repeat` timed passes after an untimed one. */
static void timed(void (*part)(chunks *), chunks *c, int repeat, double *secs, double *cpu) {
  double s[MAX_REPEAT], u[MAX_REPEAT];
  part(c);
  for (int r = 0; r < repeat; r++) {
    double c0 = cpu_seconds(RUSAGE_SELF), t0 = now();
    part(c);
    s[r] = now() - t0;
    u[r] = cpu_seconds(RUSAGE_SELF) - c0;
  }
  qsort(s, (size_t)repeat, sizeof *s, compare_doubles);
  qsort(u, (size_t)repeat, sizeof *u, compare_doubles);
  *secs = s[repeat / 2];
  *cpu = u[repeat / 2];
}

static void report(const char *name, double bytes, double decoded, double secs, double cpu) {
  printf("%-48s %8.2f ms %7.2f GB/s  %.3f CPU s/GB\n", name, secs * 1e3, bytes / secs / 1e9,
         cpu / (decoded / 1e9));
}

/* The device output on the host. */
static unsigned char *output(const chunks *c) {
  size_t bytes = c->n * c->chunk_bytes;
  unsigned char *host = malloc(bytes);
  if (!host) die("out of memory", 0);
  cuda_ok(cu->cuMemcpyDtoHAsync(host, c->out, bytes, NULL), "cuMemcpyDtoHAsync");
  cuda_ok(cu->cuStreamSynchronize(NULL), "cuStreamSynchronize");
  return host;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s DIR CODEC CHUNK_BYTES [HEADER] [REPEAT]\n", argv[0]);
    return 2;
  }
  chunks c = {.chunk_bytes = strtoull(argv[3], NULL, 0),
              .header = argc > 4 ? strtoull(argv[4], NULL, 0) : 0};
  int repeat = argc > 5 ? atoi(argv[5]) : 5, codec = kvik_codec_lookup(argv[2]);
  if (codec < 0) die("unknown codec", codec);
  if (repeat < 1 || repeat > MAX_REPEAT) repeat = 5;
  c.codec = (kvik_codec)codec;
  if (!(cu = kvik__cuda("bench_read_decompress"))) die("CUDA", -1);
  int rc = kvik__context_push_any("bench_read_decompress", cu);
  if (rc < 0) die("a CUDA context", rc);
  chunks_open(&c, argv[1]);
  double decoded = (double)c.n * (double)c.chunk_bytes, compressed = 0, secs, cpu;
  for (size_t i = 0; i < c.n; i++) compressed += (double)c.sizes[i];
  printf("%zu chunks of %zu bytes, %s, %.3f GB compressed (%.2f:1), %d passes, the median\n", c.n,
         c.chunk_bytes, argv[2], compressed / 1e9, decoded / compressed, repeat);

  timed(read_all, &c, repeat, &secs, &cpu);
  report("read into pinned memory (compressed GB/s)", compressed, decoded, secs, cpu);
  timed(copy_all, &c, repeat, &secs, &cpu);
  report("copy to the device (compressed GB/s)", compressed, decoded, secs, cpu);
  timed(decode_all, &c, repeat, &secs, &cpu);
  report("decode from device memory", decoded, decoded, secs, cpu);
  unsigned char *want = output(&c);
  timed(lanes_all, &c, repeat, &secs, &cpu);
  report("read to device by lanes (compressed GB/s)", compressed, decoded, secs, cpu);
  timed(lanes_then_decode, &c, repeat, &secs, &cpu);
  report("lanes, then decode", decoded, decoded, secs, cpu);

  /* Pinned memory of a step times twice the steps ahead stays within kvik's pinned cache (256
   * MiB), which is emptied between them: a buffer that it cannot keep is made again on every
   * call. */
  static const config configs[] = {
      {0, 0, 0},        {512, 0, 0},      {0, 4 << 20, 0},  {0, 16 << 20, 0}, {0, 32 << 20, 0},
      {0, 64 << 20, 2}, {0, 32 << 20, 2}, {0, 8 << 20, 2}, {0, 8 << 20, 8},
  };
  size_t configs_count = sizeof configs / sizeof configs[0];

  for (size_t k = 0; k <= configs_count; k++) { /* the last: by path, at the defaults */
    const config *cfg = k < configs_count ? &configs[k] : &configs[0];
    kvik__read_decompress_sizes(0, cfg->chunks, cfg->step, cfg->ahead);
    kvik_bounce_buffer_free();
    cuda_ok(cu->cuMemsetD8Async(c.out, 0, c.n * c.chunk_bytes, NULL), "cuMemsetD8Async");
    timed(k < configs_count ? fused : fused_by_path, &c, repeat, &secs, &cpu);
    char name[128], batch[24] = "default", step[32] = "default", ahead[24] = "default";
    if (cfg->chunks) snprintf(batch, sizeof batch, "%zu", cfg->chunks);
    if (cfg->step) snprintf(step, sizeof step, "%zu MiB", cfg->step >> 20);
    if (cfg->ahead) snprintf(ahead, sizeof ahead, "%zu", cfg->ahead);
    snprintf(name, sizeof name, "fused%s: batch %s, step %s, ahead %s",
             k < configs_count ? "" : " by path", batch, step, ahead);
    report(name, decoded, decoded, secs, cpu);
    unsigned char *got = output(&c);
    if (memcmp(got, want, c.n * c.chunk_bytes) != 0) printf("  WRONG RESULT\n");
    free(got);
  }
  free(want);
  return 0;
}
