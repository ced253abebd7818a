/* First zero-copy reads into GPU memory: what each part of open, read, close costs.
 *
 * For each setting of KVIK_ZERO_COPY_READ (off: the bounce buffers; auto: as its cost model
 * chooses; on: every granule registered during the read) and each thread count, in rounds that
 * take turns: a fresh kvik handle on FILE, one kvik_file_read of the whole file into device
 * memory, then kvik_file_free, which unregisters. Prints the read's
 * GB/s and CPU seconds per GB (user + system, whole process, from getrusage; then the user part
 * alone, where threads that spin show), the close's time,
 * and open + read + close together; then the median of the rounds. A 4 KiB sample at each 64 MiB
 * boundary is compared with pread(2). The file should be in the page cache (read it once first).
 *
 * usage: bench_zero_copy_first FILE [THREADS,...] [ROUNDS] [MODES]
 *        (defaults: 1,4,8,16, 3 and off,auto,on) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvik.h"
#include "clock.h"


#define MAX_COUNTS 16
#define MODES 3
#define MAX_ROUNDS 32
#define SAMPLE 4096
#define SAMPLE_STRIDE ((size_t)64 << 20)

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_retain_fn)(void **, int);
typedef int (*cu_set_current_fn)(void *);
typedef int (*cu_alloc_fn)(unsigned long long *, size_t);
typedef int (*cu_dtoh_fn)(void *, unsigned long long, size_t);

static cu_dtoh_fn cu_dtoh;

/* What one first read measured: seconds, and CPU seconds of the whole process. */
enum { READ_S, READ_CPU, READ_USER, CLOSE_S, TOTAL_S, TOTAL_CPU, FIELDS };
typedef double result[FIELDS];

static double seconds_of(struct timeval t) { return (double)t.tv_sec + (double)t.tv_usec * 1e-6; }

/* CPU seconds of the whole process so far, user + system; the user part in *user (may be NULL). */
static double process_cpu(double *user) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  if (user) *user = seconds_of(u.ru_utime);
  return seconds_of(u.ru_utime) + seconds_of(u.ru_stime);
}

/* Device memory of `size` bytes in device 0's primary context, made current. */
static void *device_buffer(size_t size) {
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) return NULL;
  cu_init_fn init = (cu_init_fn)dlsym(cuda, "cuInit");
  cu_retain_fn retain = (cu_retain_fn)dlsym(cuda, "cuDevicePrimaryCtxRetain");
  cu_set_current_fn set_current = (cu_set_current_fn)dlsym(cuda, "cuCtxSetCurrent");
  cu_alloc_fn alloc = (cu_alloc_fn)dlsym(cuda, "cuMemAlloc_v2");
  cu_dtoh = (cu_dtoh_fn)dlsym(cuda, "cuMemcpyDtoH_v2");
  void *ctx;
  unsigned long long ptr = 0;
  if (!init || !retain || !set_current || !alloc || !cu_dtoh || init(0) != 0 ||
      retain(&ctx, 0) != 0 || set_current(ctx) != 0 || alloc(&ptr, size) != 0)
    return NULL;
  return (void *)(uintptr_t)ptr;
}

/* The samples of the device copy equal the file's bytes. */
static int samples_match(int fd, const void *dev, size_t size) {
  unsigned char want[SAMPLE], got[SAMPLE];
  for (size_t at = 0; at < size; at += SAMPLE_STRIDE) {
    size_t n = size - at < SAMPLE ? size - at : SAMPLE;
    if (pread(fd, want, n, (off_t)at) != (ssize_t)n || cu_dtoh(got, (uintptr_t)dev + at, n) != 0 ||
        memcmp(want, got, n) != 0)
      return 0;
  }
  return 1;
}

static int first_read(const char *path, void *dev, size_t size, result *r) {
  double user0, user2;
  double cpu0 = process_cpu(&user0), t0 = now();
  kvik_file *f;
  int rc = kvik_file_open(path, "r", 0, &f);
  if (rc < 0) return rc;
  double t1 = now();
  ssize_t got = kvik_file_read(f, dev, size, 0);
  double t2 = now(), cpu2 = process_cpu(&user2);
  kvik_file_free(f);
  double t3 = now(), cpu3 = process_cpu(NULL);
  if (got < 0) return (int)got;
  if ((size_t)got != size) return -EIO;
  (*r)[READ_S] = t2 - t1;
  (*r)[READ_CPU] = cpu2 - cpu0;
  (*r)[READ_USER] = user2 - user0;
  (*r)[CLOSE_S] = t3 - t2;
  (*r)[TOTAL_S] = t3 - t0;
  (*r)[TOTAL_CPU] = cpu3 - cpu0;
  return 0;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, by_value);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char *const mode_names[MODES] = {"off", "auto", "on"};

static void print_row(const char *label, int mode, int threads, double gb, const result r) {
  printf("%-7s %-5s %7d %8.2f %12.3f %10.3f %9.1f %14.2f %12.3f\n", label, mode_names[mode],
         threads, gb / r[READ_S], r[READ_CPU] / gb, r[READ_USER] / gb, r[CLOSE_S] * 1e3,
         gb / r[TOTAL_S], r[TOTAL_CPU] / gb);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE [THREADS,...] [ROUNDS] [MODES]\n", argv[0]);
    return 2;
  }
  const char *path = argv[1];
  int counts[MAX_COUNTS], ncounts = 0;
  const char *list = argc > 2 ? argv[2] : "1,4,8,16";
  for (char *end; *list && ncounts < MAX_COUNTS; list = *end ? end + 1 : end)
    counts[ncounts++] = (int)strtol(list, &end, 10);
  int rounds = argc > 3 ? atoi(argv[3]) : 3;
  if (rounds < 1 || rounds > MAX_ROUNDS) rounds = 3;
  int modes[MODES], nmodes = 0;
  for (int m = 0; m < MODES; m++)
    if (strstr(argc > 4 ? argv[4] : "off,auto,on", mode_names[m])) modes[nmodes++] = m;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
    fprintf(stderr, "%s: cannot open %s, or it is empty\n", argv[0], path);
    return 1;
  }
  size_t size = (size_t)st.st_size;
  double gb = (double)size / 1e9;
  void *dev = device_buffer(size);
  if (!dev) {
    fprintf(stderr, "%s: no CUDA device, or no room for %zu bytes on it\n", argv[0], size);
    return 1;
  }
  static const int64_t mode_values[MODES] = {KVIK_OFF, KVIK_AUTO, KVIK_ON};
  static result results[MODES][MAX_COUNTS][MAX_ROUNDS];
  printf("first zero-copy reads of %s (%.2f GB) into device memory\n", path, gb);
  printf("%-7s %-5s %7s %8s %12s %10s %9s %14s %12s\n", "round", "mode", "threads", "GB/s",
         "CPU s/GB", "user s/GB", "close ms", "with open+close", "CPU s/GB");
  for (int round = 0; round < rounds; round++) {
    for (int i = 0; i < nmodes; i++) {
      int m = modes[i];
      for (int c = 0; c < ncounts; c++) {
        int rc = kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, mode_values[m]);
        if (rc == 0) rc = kvik_setting_set(KVIK_SETTING_NUM_THREADS, counts[c]);
        if (rc == 0) rc = first_read(path, dev, size, &results[m][c][round]);
        if (rc < 0 || !samples_match(fd, dev, size)) {
          fprintf(stderr, "%s: read on %d threads, %s, failed: %s\n", argv[0], counts[c],
                  mode_names[m], rc < 0 ? kvik_strerror(rc) : "bytes differ");
          return 1;
        }
        char label[16];
        snprintf(label, sizeof label, "%d", round + 1);
        print_row(label, m, counts[c], gb, results[m][c][round]);
      }
    }
  }
  for (int i = 0; i < nmodes; i++) {
    for (int c = 0; c < ncounts; c++) {
      int m = modes[i];
      result med;
      for (int k = 0; k < FIELDS; k++) {
        double v[MAX_ROUNDS];
        for (int round = 0; round < rounds; round++) v[round] = results[m][c][round][k];
        med[k] = median(v, rounds);
      }
      print_row("median", m, counts[c], gb, med);
    }
  }
  close(fd);
  return 0;
}
