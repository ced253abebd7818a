/* Small random reads from the page cache into host memory: what kvik adds per call.
 *
 * Reads of SIZE bytes (default 4 KiB) at random aligned offsets of a 64 MiB file kept in the page
 * cache, one at a time on one thread, three ways taking turns: a plain pread(2), kvik_file_read,
 * and kvik_file_pread + kvik_future_wait + kvik_future_free. Prints the best of --repeat runs as
 * nanoseconds per read and reads per second, and the ratio to pread. Every read is checked.
 * Then, where the CUDA driver loads, the first two again with CUDA initialised and a context
 * current, as in a PyTorch or CuPy process, where kvik could ask the driver what the buffer is.
 *
 * usage: bench_small_reads [DIR] [SIZE] [READS] [REPEAT]   (defaults: /tmp 4096 200000 3) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvik.h"
#include "clock.h"


#define FILE_BYTES ((size_t)64 << 20)

enum { PREAD, KVIK_READ, KVIK_FUTURE, METHODS };
/* Issue 29's target for kvik_file_read, in reads per second over pread(2)'s. */
#define TARGET 0.97
static const char *const names[METHODS] = {"pread(2)", "kvik_file_read", "kvik_file_pread+wait"};

static unsigned char byte_at(size_t offset) { return (unsigned char)(offset * 2654435761u >> 13); }

static int make_file(const char *path) {
  unsigned char *data = malloc(FILE_BYTES);
  if (!data) return -1;
  for (size_t i = 0; i < FILE_BYTES; i++) data[i] = byte_at(i);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ssize_t written = fd < 0 ? -1 : write(fd, data, FILE_BYTES);
  free(data);
  if (fd >= 0) close(fd);
  return written == (ssize_t)FILE_BYTES ? 0 : -1;
}

/* One read by `method`; the number of bytes read, or a negative code. */
static ssize_t read_once(int method, int fd, kvik_file *f, unsigned char *buf, size_t size, int64_t offset) {
  if (method == PREAD) return pread(fd, buf, size, (off_t)offset);
  if (method == KVIK_READ) return kvik_file_read(f, buf, size, offset);
  kvik_future *future;
  int rc = kvik_file_pread(f, buf, size, offset, 0, &future);
  if (rc < 0) return rc;
  ssize_t n = kvik_future_wait(future);
  kvik_future_free(future);
  return n;
}

static int check(const unsigned char *buf, size_t size, int64_t offset) {
  for (size_t i = 0; i < size; i++)
    if (buf[i] != byte_at((size_t)offset + i)) return -1;
  return 0;
}

/* Seconds for `reads` reads by `method`; the offsets come from the same seed for every method. */
static double run(int method, int fd, kvik_file *f, unsigned char *buf, size_t size, long reads) {
  uint64_t state = 0x9E3779B97F4A7C15u;
  size_t slots = (FILE_BYTES - size) / size + 1;
  double start = now();
  for (long i = 0; i < reads; i++) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    int64_t offset = (int64_t)((state >> 33) % slots * size);
    ssize_t n = read_once(method, fd, f, buf, size, offset);
    if (n != (ssize_t)size || (i % 1024 == 0 && check(buf, size, offset) != 0)) {
      fprintf(stderr, "%s: read %ld at %lld: %zd bytes or wrong data (%s)\n", names[method], i, (long long)offset, n,
              n < 0 ? kvik_last_error() : "");
      exit(1);
    }
  }
  return now() - start;
}

/* The best of `repeat` runs of methods 0 to `methods` - 1, taking turns, into best[]. */
static void best_of(int methods, double *best, int fd, kvik_file *f, unsigned char *buf, size_t size,
                    long reads, int repeat) {
  for (int m = 0; m < methods; m++) best[m] = 0;
  for (int rep = 0; rep < repeat; rep++)
    for (int m = 0; m < methods; m++) {
      double s = run(m, fd, f, buf, size, reads);
      if (best[m] == 0 || s < best[m]) best[m] = s;
    }
}

/* Load and initialise the CUDA driver, with device 0's primary context current on this thread,
 * as a PyTorch or CuPy process has; 0 where there is none. */
static int load_cuda(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) return 0;
  int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
  int (*retain)(void **, int) = (int (*)(void **, int))dlsym(h, "cuDevicePrimaryCtxRetain");
  int (*set_current)(void *) = (int (*)(void *))dlsym(h, "cuCtxSetCurrent");
  void *ctx;
  return init && retain && set_current && init(0) == 0 && retain(&ctx, 0) == 0 &&
         set_current(ctx) == 0;
}

/* pread(2) and kvik_file_read again, taking turns, with CUDA in the process. */
static void with_cuda(int fd, kvik_file *f, unsigned char *buf, size_t size, long reads, int repeat) {
  if (!load_cuda()) {
    printf("with CUDA loaded: skipped (no CUDA driver)\n");
    return;
  }
  double best[KVIK_READ + 1];
  best_of(KVIK_READ + 1, best, fd, f, buf, size, reads, repeat);
  printf("with CUDA loaded, a context current: pread(2) %.0f ns, kvik_file_read %.0f ns a read: %.2fx\n",
         best[PREAD] / (double)reads * 1e9, best[KVIK_READ] / (double)reads * 1e9, best[PREAD] / best[KVIK_READ]);
}

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "/tmp";
  size_t size = argc > 2 ? strtoul(argv[2], NULL, 10) : 4096;
  long reads = argc > 3 ? atol(argv[3]) : 200000;
  int repeat = argc > 4 ? atoi(argv[4]) : 3;
  if (size == 0 || size > FILE_BYTES || reads <= 0 || repeat <= 0) {
    fprintf(stderr, "usage: %s [DIR] [SIZE] [READS] [REPEAT]\n", argv[0]);
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/kvik-small-reads-%d", dir, (int)getpid());
  if (make_file(path) != 0) return fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno)), 1;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  kvik_file *f = NULL;
  unsigned char *buf = malloc(size);
  if (fd < 0 || !buf || kvik_file_open(path, "r", 0, &f) < 0) {
    fprintf(stderr, "cannot open %s: %s\n", path, kvik_last_error());
    return 1;
  }
  double best[METHODS];
  best_of(METHODS, best, fd, f, buf, size, reads, repeat);
  printf("%ld reads of %zu bytes at random offsets of a 64 MiB page-cached file in %s, one thread, best of %d\n",
         reads, size, dir, repeat);
  printf("%-22s %10s %12s %10s\n", "method", "ns/read", "reads/s", "vs pread");
  for (int m = 0; m < METHODS; m++)
    printf("%-22s %10.0f %12.0f %9.2fx\n", names[m], best[m] / (double)reads * 1e9, (double)reads / best[m],
           best[PREAD] / best[m]);
  double ratio = best[PREAD] / best[KVIK_READ];
  printf("kvik_file_read / pread(2): %.2fx (target: at least %.2fx): %s\n", ratio, TARGET,
         ratio >= TARGET ? "met" : "missed");
  with_cuda(fd, f, buf, size, reads, repeat);
  kvik_file_free(f);
  close(fd);
  free(buf);
  unlink(path);
  return 0;
}
