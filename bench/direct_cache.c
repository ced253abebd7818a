/* Reads with KVIK_SETTING_AUTO_DIRECT_IO_READ on and off, side by side, from a file in the page
 * cache ("warm"), out of it ("cold", dropped before each read after a sync) and half in it ("half
 * warm": its first half read into the cache, the rest dropped), and `fio --direct=1` with as many
 * jobs as kvik has threads on the cold file, where fio is installed (issue 29, item 4).
 *
 * A file of SIZE MiB (default 1024) in DIR, read whole by kvik_file_read on THREADS threads
 * (default 2) into a page-aligned buffer, each read checked. The ways take turns within each of
 * REPEAT rounds (default 5), in reverse order every other round; the best and the median of each
 * are printed as GB/s, with the CPU seconds per GB of the best (user + system, all threads) and
 * the share of the file it read from storage (/proc/self/io's read_bytes, O_DIRECT included), then
 * the two targets of the issue and whether this run's medians meet them: direct on at least 0.9x
 * direct off on the warm file, and at least 0.95x fio on the cold one. fio reads
 * with 4 MiB psync calls, job j a contiguous 1/THREADS of the file (kvik's tasks are 4 MiB, dealt
 * to its threads in turn); its rate is its own count of bytes over its run time.
 *
 * Then what kvik's question to the page cache costs per task of 4 MiB, warm and cold, asked as
 * kvik asks it (src/page_cache.c): one cachestat(2) call; mincore(2) on a mapping of the task,
 * about all its pages, and about the sample kvik takes (4 runs of 64 pages, first to last page).
 *
 * With KVIK_BENCH_NO_CACHESTAT=1, cachestat(2) is refused (a seccomp filter), as on kernels
 * before 6.5: kvik then asks mincore(2), as it also does on overlayfs.
 *
 * usage: bench_direct_cache DIR [SIZE_MIB] [THREADS] [REPEAT] */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kvik.h"
#include "clock.h"


enum { WARM_OFF, WARM_ON, HALF_OFF, HALF_ON, COLD_OFF, COLD_ON, COLD_FIO, WAYS };
static const char *const way_names[WAYS] = {
    "warm, direct off", "warm, direct on", "half warm, direct off", "half warm, direct on",
    "cold, direct off", "cold, direct on", "cold, fio --direct=1"};

typedef struct bench {
  const char *path;
  size_t size;
  int threads;
  unsigned char *buf, *data;
} bench;

/* The bytes this process has had read from storage (/proc/self/io), or -1. */
static long long storage_bytes(void) {
  FILE *f = fopen("/proc/self/io", "r");
  char line[256];
  long long bytes = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "read_bytes:", 11) == 0) bytes = atoll(line + 11);
  if (f) fclose(f);
  return bytes;
}

static int fail(const char *what) {
  fprintf(stderr, "%s: %s\n", what, kvik_last_error());
  return -1;
}

/* cachestat(2) fails with ENOSYS from here on, in this thread and those it starts. */
static int refuse_cachestat(void) {
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 451 /* cachestat */, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog program = {(unsigned short)(sizeof code / sizeof code[0]), code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0)
    return 0;
  perror("seccomp filter");
  return -1;
}

/* The first `cached` bytes of the file in the page cache, the rest out of it. */
static int prepare(const bench *b, size_t cached) {
  if (kvik_page_cache_drop(b->path) < 0) return fail("kvik_page_cache_drop");
  kvik_file *f;
  if (kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 0) < 0) return fail("kvik_setting_set");
  if (kvik_file_open(b->path, "r", 0, &f) < 0) return fail("kvik_file_open");
  ssize_t n = cached ? kvik_file_read(f, b->buf, cached, 0) : 0;
  kvik_file_free(f);
  return n == (ssize_t)cached ? 0 : fail("kvik_file_read");
}

/* One timed read of the whole file by kvik: seconds, CPU seconds and bytes read from storage, or
 * -1. */
static int read_kvik(const bench *b, int direct, double *seconds, double *cpu, double *storage) {
  kvik_file *f;
  if (kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, direct) < 0)
    return fail("kvik_setting_set");
  if (kvik_file_open(b->path, "r", 0, &f) < 0) return fail("kvik_file_open");
  memset(b->buf, 0, b->size);
  long long s0 = storage_bytes();
  double t0 = now(), c0 = cpu_seconds(RUSAGE_SELF);
  ssize_t n = kvik_file_read(f, b->buf, b->size, 0);
  *seconds = now() - t0;
  *cpu = cpu_seconds(RUSAGE_SELF) - c0;
  *storage = (double)(storage_bytes() - s0);
  kvik_file_free(f);
  if (n != (ssize_t)b->size) return fail("kvik_file_read");
  if (memcmp(b->buf, b->data, b->size) != 0) {
    fprintf(stderr, "kvik_file_read returned wrong bytes\n");
    return -1;
  }
  return 0;
}

/* One run of fio on the cold file: its seconds for the whole file, or -1. */
static int read_fio(const bench *b, double *seconds) {
  char cmd[8192];
  size_t part = b->size / (size_t)b->threads;
  snprintf(cmd, sizeof cmd,
           "fio --name=cold --filename='%s' --readonly --rw=read --bs=4M --direct=1 "
           "--ioengine=psync --numjobs=%d --size=%zu --offset_increment=%zu --group_reporting "
           "--output-format=terse --terse-version=3",
           b->path, b->threads, part, part);
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  char line[8192] = "";
  char *got = fgets(line, sizeof line, p);
  int status = pclose(p);
  /* Terse version 3: ...;error;read KiB;read KiB/s;read IOPS;read run time in ms;... */
  double kib = 0, ms = 0;
  if (got && status == 0 &&
      sscanf(line, "3;%*[^;];%*[^;];%*[^;];%*[^;];%lf;%*[^;];%*[^;];%lf", &kib, &ms) == 2 &&
      kib * 1024 == (double)(part * (size_t)b->threads) && ms > 0) {
    *seconds = ms / 1e3;
    return 0;
  }
  fprintf(stderr, "fio failed (status %d): %s\n", status, line);
  return -1;
}

/* The seconds and CPU seconds of each way, round by round. */
typedef struct results {
  double *seconds[WAYS], *cpu[WAYS], *storage[WAYS];
} results;

/* Round r: each way once, in turn, backwards when r is odd. */
static int round_of(const bench *b, int fio, int r, results *res) {
  for (int i = 0; i < WAYS; i++) {
    int w = r % 2 ? WAYS - 1 - i : i;
    if (w == COLD_FIO && !fio) continue;
    size_t cached = w <= WARM_ON ? b->size : w <= HALF_ON ? b->size / 2 : 0;
    if (prepare(b, cached) != 0) return -1;
    double s, c = 0, storage = 0;
    int rc = w == COLD_FIO ? read_fio(b, &s) : read_kvik(b, w % 2, &s, &c, &storage);
    if (rc != 0) return -1;
    res->seconds[w][r] = s;
    res->cpu[w][r] = c;
    res->storage[w][r] = storage;
  }
  return 0;
}

static int by_value(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

#define TASK ((size_t)4 << 20)
#define PAGE ((size_t)4096)
#define PROBES 256

/* The resident pages among `runs` runs of `run` pages spread over a task, by mincore(2) on a new
 * mapping of it. */
static long mincore_task(int fd, size_t at, size_t runs, size_t run) {
  static unsigned char vec[TASK / PAGE];
  char *map = mmap(NULL, TASK, PROT_READ, MAP_SHARED, fd, (off_t)at);
  if (map == MAP_FAILED) return -1;
  long resident = 0;
  for (size_t r = 0; r < runs; r++) {
    size_t first = runs == 1 ? 0 : r * (TASK / PAGE - run) / (runs - 1);
    if (mincore(map + first * PAGE, run * PAGE, vec) != 0) resident = -1;
    for (size_t i = 0; resident >= 0 && i < run; i++) resident += vec[i] & 1;
  }
  munmap(map, TASK);
  return resident;
}

/* One way to ask about a task (0: cachestat, 1: mincore of all, 2: mincore of the sample), over
 * PROBES tasks of the file: microseconds per task, or -1 where the system refuses it. */
static double probe(int fd, size_t size, int how) {
  double t0 = now();
  for (size_t i = 0; i < PROBES; i++) {
    size_t at = i * TASK % (size - size % TASK);
    struct {
      uint64_t off, len;
    } range = {at, TASK};
    uint64_t counts[5];
    long r = how == 0   ? syscall(451 /* cachestat */, fd, &range, counts, 0)
             : how == 1 ? mincore_task(fd, at, 1, TASK / PAGE)
                        : mincore_task(fd, at, 4, 64);
    if (r < 0) return -1;
  }
  return (now() - t0) / PROBES * 1e6;
}

/* The cost of each way to ask, warm and cold. */
static int report_probes(const bench *b) {
  static const char *const hows[] = {"cachestat", "mincore, all 1024 pages",
                                     "mincore, 4 runs of 64 pages"};
  double us[2][3];
  for (int cold = 0; cold < 2; cold++) {
    if (prepare(b, cold ? 0 : b->size) != 0) return -1;
    FILE *f = fopen(b->path, "r");
    if (!f) {
      perror(b->path);
      return -1;
    }
    for (int how = 0; how < 3; how++) us[cold][how] = probe(fileno(f), b->size, how);
    fclose(f);
  }
  printf("%-34s %8s %8s\n", "asking about a 4 MiB task, us", "warm", "cold");
  for (int how = 0; how < 3; how++) {
    if (us[0][how] < 0 || us[1][how] < 0) printf("%-34s refused\n", hows[how]);
    else printf("%-34s %8.2f %8.2f\n", hows[how], us[0][how], us[1][how]);
  }
  return 0;
}

static int write_file(const bench *b) {
  kvik_file *f;
  if (kvik_file_open(b->path, "w", 0644, &f) < 0) return fail("kvik_file_open");
  ssize_t n = kvik_file_write(f, b->data, b->size, 0);
  kvik_file_free(f);
  return n == (ssize_t)b->size ? 0 : fail("kvik_file_write");
}

static void report(const bench *b, int repeat, int fio, const results *res) {
  double gb = (double)b->size / 1e9, best[WAYS], median[WAYS];
  printf("%s, %zu MiB, %d thread(s), %d rounds%s\n", b->path, b->size >> 20, b->threads, repeat,
         getenv("KVIK_BENCH_NO_CACHESTAT") ? ", cachestat refused (mincore)" : "");
  printf("%-24s %10s %12s %15s %13s\n", "", "best GB/s", "median GB/s", "CPU s/GB (best)",
         "from storage");
  for (int w = 0; w < WAYS; w++) {
    if (w == COLD_FIO && !fio) continue;
    int fastest = 0;
    for (int r = 1; r < repeat; r++)
      fastest = res->seconds[w][r] < res->seconds[w][fastest] ? r : fastest;
    double cpu = res->cpu[w][fastest], storage = res->storage[w][fastest];
    best[w] = res->seconds[w][fastest];
    qsort(res->seconds[w], (size_t)repeat, sizeof(double), by_value);
    median[w] = (res->seconds[w][(repeat - 1) / 2] + res->seconds[w][repeat / 2]) / 2;
    printf("%-24s %10.2f %12.2f", way_names[w], gb / best[w], gb / median[w]);
    if (w == COLD_FIO) printf("\n");
    else printf(" %15.3f %13.2f\n", cpu / gb, storage / (double)b->size);
  }
  double warm = median[WARM_OFF] / median[WARM_ON];
  printf("warm: direct on / off = %.2fx, best %.2fx (target >= 0.90x: %s)\n", warm,
         best[WARM_OFF] / best[WARM_ON], warm >= 0.9 ? "met" : "NOT MET");
  if (fio) {
    double cold = median[COLD_FIO] / median[COLD_ON];
    printf("cold: direct on / fio = %.2fx, best %.2fx (target >= 0.95x: %s)\n", cold,
           best[COLD_FIO] / best[COLD_ON], cold >= 0.95 ? "met" : "NOT MET");
  } else {
    printf("cold: no fio in PATH, the cold target is not measured\n");
  }
  printf("half warm: direct on / off = %.2fx, best %.2fx\n", median[HALF_OFF] / median[HALF_ON],
         best[HALF_OFF] / best[HALF_ON]);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [SIZE_MIB] [THREADS] [REPEAT]\n", argv[0]);
    return 2;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/kvik-direct-cache.bin", argv[1]);
  bench b = {path, (argc > 2 ? strtoull(argv[2], NULL, 10) : 1024) << 20,
             argc > 3 ? atoi(argv[3]) : 2, NULL, NULL};
  int repeat = argc > 4 ? atoi(argv[4]) : 5;
  if (b.size == 0 || b.threads < 1 || repeat < 1) {
    fprintf(stderr, "SIZE_MIB, THREADS and REPEAT must be positive\n");
    return 2;
  }
  if (getenv("KVIK_BENCH_NO_CACHESTAT") && refuse_cachestat() != 0) return 1;
  if (kvik_direct_io_supported(argv[1]) != 1) {
    fprintf(stderr, "no O_DIRECT in %s\n", argv[1]);
    return 1;
  }
  int fio = system("fio --version >/dev/null 2>&1") == 0;
  if (kvik_setting_set(KVIK_SETTING_NUM_THREADS, b.threads) < 0) return fail("kvik_setting_set");
  b.data = malloc(b.size);
  if (!b.data || posix_memalign((void **)&b.buf, 4096, b.size) != 0) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  for (size_t i = 0; i < b.size; i++) b.data[i] = (unsigned char)(i * 2654435761u >> 13);
  results res;
  for (int w = 0; w < WAYS; w++) {
    res.seconds[w] = calloc((size_t)repeat, sizeof(double));
    res.cpu[w] = calloc((size_t)repeat, sizeof(double));
    res.storage[w] = calloc((size_t)repeat, sizeof(double));
    if (!res.seconds[w] || !res.cpu[w] || !res.storage[w]) return fail("allocation");
  }
  int rc = write_file(&b);
  for (int r = 0; r < repeat && rc == 0; r++) rc = round_of(&b, fio, r, &res);
  if (rc == 0) report(&b, repeat, fio, &res);
  if (rc == 0 && b.size >= TASK) rc = report_probes(&b);
  unlink(path);
  free(b.data);
  free(b.buf);
  for (int w = 0; w < WAYS; w++) {
    free(res.seconds[w]);
    free(res.cpu[w]);
    free(res.storage[w]);
  }
  return rc == 0 ? 0 : 1;
}
