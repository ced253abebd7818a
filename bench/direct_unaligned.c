/* O_DIRECT reads and writes of host memory that is not page-aligned, which go through a bounce
 * buffer, next to page-aligned ones, which do not: what the bounce buffer's copy costs.
 *
 * A file of SIZE MiB (default 256) in DIR, read and written whole with
 * KVIK_SETTING_AUTO_DIRECT_IO_READ/WRITE on, by kvik_file_read/kvik_file_write on THREADS threads
 * (default 1), into and out of a buffer at a page boundary + 1 ("unaligned") and at a page boundary
 * ("aligned"), taking turns. Reads start with the file's pages either dropped from the page cache
 * ("cold") or read into it ("cached"). Prints the best of REPEAT runs (default 5) of each as GB/s
 * and CPU seconds per GB (user + system, all threads). Every read is checked.
 *
 * usage: bench_direct_unaligned DIR [SIZE_MIB] [THREADS] [REPEAT] */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kvik.h"
#include "clock.h"


enum { READ_COLD, READ_CACHED, WRITE, KINDS };
static const char *const kind_names[KINDS] = {"read, cold", "read, cached", "write"};

static int fail(const char *what) {
  fprintf(stderr, "%s: %s\n", what, kvik_last_error());
  return 1;
}

/* Puts the file's pages in the page cache, or drops them. */
static int prepare(kvik_file *f, const char *path, int kind, unsigned char *scratch, size_t size) {
  if (kind == READ_COLD) return kvik_page_cache_drop(path) < 0 ? fail("kvik_page_cache_drop") : 0;
  if (kind != READ_CACHED) return 0;
  ssize_t n = pread(kvik_file_fd(f), scratch, size, 0);
  return n == (ssize_t)size ? 0 : fail("pread");
}

/* One timed run: seconds and CPU seconds, or -1 on failure. */
static int run(kvik_file *f, const char *path, int kind, unsigned char *buf,
               const unsigned char *data, unsigned char *scratch, size_t size, double *seconds,
               double *cpu) {
  if (prepare(f, path, kind, scratch, size) != 0) return -1;
  if (kind != WRITE) memset(buf, 0, size);
  double t0 = now(), c0 = cpu_seconds(RUSAGE_SELF);
  ssize_t n = kind == WRITE ? kvik_file_write(f, buf, size, 0) : kvik_file_read(f, buf, size, 0);
  *seconds = now() - t0;
  *cpu = cpu_seconds(RUSAGE_SELF) - c0;
  if (n != (ssize_t)size) return fail(kind == WRITE ? "kvik_file_write" : "kvik_file_read");
  if (kind != WRITE && memcmp(buf, data, size) != 0) {
    fprintf(stderr, "read returned wrong bytes\n");
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [SIZE_MIB] [THREADS] [REPEAT]\n", argv[0]);
    return 2;
  }
  size_t size = (argc > 2 ? strtoull(argv[2], NULL, 10) : 256) << 20;
  int threads = argc > 3 ? atoi(argv[3]) : 1, repeat = argc > 4 ? atoi(argv[4]) : 5;
  char path[4096];
  snprintf(path, sizeof path, "%s/kvik-direct-unaligned.bin", argv[1]);
  if (kvik_direct_io_supported(argv[1]) != 1) {
    fprintf(stderr, "no O_DIRECT in %s\n", argv[1]);
    return 1;
  }
  if (kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 1) < 0 ||
      kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, 1) < 0 ||
      kvik_setting_set(KVIK_SETTING_NUM_THREADS, threads) < 0)
    return fail("kvik_setting_set");
  unsigned char *data = malloc(size), *scratch = malloc(size), *mem = NULL;
  if (!data || !scratch || posix_memalign((void **)&mem, 4096, size + 4096) != 0)
    return fail("allocation");
  for (size_t i = 0; i < size; i++) data[i] = (unsigned char)(i * 2654435761u >> 13);
  kvik_file *f;
  if (kvik_file_open(path, "w+", 0644, &f) < 0) return fail("kvik_file_open");
  memcpy(mem, data, size);
  if (kvik_file_write(f, mem, size, 0) != (ssize_t)size) return fail("kvik_file_write");
  unsigned char *bufs[2] = {mem + 1, mem}; /* unaligned, aligned */
  double best[KINDS][2], best_cpu[KINDS][2];
  for (int k = 0; k < KINDS; k++) best[k][0] = best[k][1] = best_cpu[k][0] = best_cpu[k][1] = 1e30;
  for (int r = 0; r < repeat; r++)
    for (int k = 0; k < KINDS; k++)
      for (int a = 0; a < 2; a++) {
        if (k == WRITE) memcpy(bufs[a], data, size);
        double s, c;
        if (run(f, path, k, bufs[a], data, scratch, size, &s, &c) != 0) return 1;
        if (s < best[k][a]) best[k][a] = s;
        if (c < best_cpu[k][a]) best_cpu[k][a] = c;
      }
  printf("%s, %zu MiB, %d thread(s), best of %d\n", argv[1], size >> 20, threads, repeat);
  printf("%-14s %22s %22s\n", "", "unaligned GB/s (CPU s/GB)", "aligned GB/s (CPU s/GB)");
  double gb = (double)size / 1e9;
  for (int k = 0; k < KINDS; k++)
    printf("%-14s %15.2f (%5.3f) %15.2f (%5.3f)\n", kind_names[k], gb / best[k][0],
           best_cpu[k][0] / gb, gb / best[k][1], best_cpu[k][1] / gb);
  kvik_file_free(f);
  unlink(path);
  free(data);
  free(scratch);
  free(mem);
  return 0;
}
