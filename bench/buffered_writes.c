/* Buffered writes of one file on T threads, then fsync: kvik next to fio, in one run.
 *
 * kvik: kvik_file_open("w"), one kvik_file_write of SIZE bytes at KVIK_SETTING_NUM_THREADS = T,
 * fsync, close. fio: T jobs write the same new file at disjoint offsets (--filename shared,
 * --size SIZE/T and --offset_increment SIZE/T each, --ioengine=psync, --bs BS), and each job
 * fsyncs it on close (--fsync_on_close=1). Both start from a removed file, after sync(2), and
 * take turns (the order alternates from pair to pair). Each run is timed from the outside, open
 * to the last fsync, fio's start-up included; its CPU seconds are the user + system time of
 * every thread (getrusage: RUSAGE_SELF for kvik, RUSAGE_CHILDREN for fio). The kernel's flusher
 * threads are counted for neither. kvik's file is read back and checked after its first run.
 * Before each kvik run, untimed, every page of its buffer is read, as an application's freshly
 * made data would be: fio writes from one reused buffer of BS bytes, which stays in the caches,
 * and on a VM whose host takes back memory left untouched for a while, the first touch of such a
 * page costs a fault on the host, counted here as the guest's CPU time.
 *
 * Prints every pair, then for each T the median GB/s (1e9 bytes/s) and CPU s/GB of each, the
 * ratio of the medians, and how many pairs kvik won; a ratio below --target (0.95) says so.
 *
 * usage: bench_buffered_writes [--dir DIR] [--size BYTES] [--threads 1,2,4] [--pairs N]
 *                              [--bs BYTES] [--target R]
 *        (defaults: $TMPDIR or /tmp, 1G, 1,2,4, 5, 1M, 0.95; K, M, G suffixes are binary) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvik.h"
#include "clock.h"


#define MAX_PAIRS 64
#define MAX_THREAD_COUNTS 16

enum { KVIK, FIO, WAYS };

struct options {
  const char *dir;
  size_t size, bs;
  int threads[MAX_THREAD_COUNTS], nthreads, pairs;
  double target;
};

struct run {
  double seconds, cpu, write_seconds, write_cpu; /* the last two: kvik's write, before fsync */
};

static unsigned char byte_at(size_t offset) { return (unsigned char)(offset * 2654435761u >> 13); }

static int parse_size(const char *text, size_t *out) {
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
  if (shift) end++;
  if (end == text || *end || v == 0) return -1;
  *out = (size_t)v << shift;
  return 0;
}

static int parse_threads(const char *text, struct options *o) {
  o->nthreads = 0;
  for (const char *p = text; *p && o->nthreads < MAX_THREAD_COUNTS;) {
    char *end;
    long t = strtol(p, &end, 10);
    if (end == p || t < 1 || t > 1024 || (*end && *end != ',')) return -1;
    o->threads[o->nthreads++] = (int)t;
    p = *end ? end + 1 : end;
  }
  return o->nthreads ? 0 : -1;
}

static int parse_args(int argc, char **argv, struct options *o) {
  const char *tmp = getenv("TMPDIR");
  *o = (struct options){
      tmp && *tmp ? tmp : "/tmp", (size_t)1 << 30, (size_t)1 << 20, {1, 2, 4}, 3, 5, 0.95};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = !v;
    if (bad) {
    } else if (!strcmp(a, "--dir")) o->dir = v;
    else if (!strcmp(a, "--size")) bad = parse_size(v, &o->size);
    else if (!strcmp(a, "--bs")) bad = parse_size(v, &o->bs);
    else if (!strcmp(a, "--threads")) bad = parse_threads(v, o);
    else if (!strcmp(a, "--pairs")) bad = (o->pairs = atoi(v)) < 1 || o->pairs > MAX_PAIRS;
    else if (!strcmp(a, "--target")) bad = (o->target = atof(v)) <= 0;
    else bad = 1;
    if (bad) return fprintf(stderr, "bench_buffered_writes: bad option %s\n", a), -1;
    i++;
  }
  return 0;
}

/* A fresh start for each run: no file, and no dirty page left by anyone's previous run. */
static void fresh(const char *path) {
  unlink(path);
  sync();
}

static int kvik_run(const char *path, const unsigned char *buf, size_t size, struct run *r) {
  volatile unsigned char sum = 0;
  for (size_t i = 0; i < size; i += 4096) sum += buf[i];
  double cpu = cpu_seconds(RUSAGE_SELF), start = now();
  kvik_file *f = NULL;
  int rc = kvik_file_open(path, "w", 0644, &f);
  ssize_t n = rc < 0 ? rc : kvik_file_write(f, buf, size, 0);
  r->write_seconds = now() - start;
  r->write_cpu = cpu_seconds(RUSAGE_SELF) - cpu;
  if (n == (ssize_t)size && fsync(kvik_file_fd(f)) != 0) {
    fprintf(stderr, "fsync(%s): %s\n", path, strerror(errno));
    n = -1;
  }
  if (f && kvik_file_close(f) < 0) n = -1;
  kvik_file_free(f);
  r->seconds = now() - start;
  r->cpu = cpu_seconds(RUSAGE_SELF) - cpu;
  if (n == (ssize_t)size) return 0;
  fprintf(stderr, "kvik: %zd of %zu bytes: %s\n", n, size, kvik_last_error());
  return -1;
}

static int kvik_check(const char *path, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  unsigned char *chunk = malloc((size_t)1 << 20);
  size_t off = 0;
  while (fd >= 0 && chunk && off < size) {
    ssize_t n = pread(fd, chunk, (size_t)1 << 20, (off_t)off);
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; i++)
      if (chunk[i] != byte_at(off + (size_t)i)) n = -1;
    if (n < 0) break;
    off += (size_t)n;
  }
  free(chunk);
  if (fd >= 0) close(fd);
  if (off == size) return 0;
  fprintf(stderr, "kvik's file %s differs from what was written at byte %zu\n", path, off);
  return -1;
}

/* The fio command line of one run, in `store` (argument texts) and `argv`. */
static void fio_args(const struct options *o, const char *path, const char *report, int t,
                     char store[][4200], char **argv) {
  size_t each = o->size / (size_t)t;
  snprintf(store[0], sizeof store[0], "--size=%zu", each);
  snprintf(store[1], sizeof store[0], "--offset_increment=%zu", each);
  snprintf(store[2], sizeof store[0], "--numjobs=%d", t);
  snprintf(store[3], sizeof store[0], "--bs=%zu", o->bs);
  snprintf(store[4], sizeof store[0], "--filename=%s", path);
  snprintf(store[5], sizeof store[0], "--output=%s", report);
  const char *fixed[] = {"fio",
                         "--name=w",
                         "--rw=write",
                         "--ioengine=psync",
                         "--fsync_on_close=1",
                         "--fallocate=none",
                         "--group_reporting",
                         "--output-format=json"};
  int n = 0;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[n++] = (char *)fixed[i];
  for (int i = 0; i < 6; i++) argv[n++] = store[i];
  argv[n] = NULL;
}

/* The number after `"key" :` that follows `after` (or the start) in fio's JSON report, or -1. */
static double json_number(const char *text, const char *after, const char *key) {
  const char *p = after ? strstr(text, after) : text;
  char quoted[64];
  snprintf(quoted, sizeof quoted, "\"%s\"", key);
  p = p ? strstr(p, quoted) : NULL;
  p = p ? strchr(p, ':') : NULL;
  return p ? strtod(p + 1, NULL) : -1;
}

/* fio's own figures for its group of jobs: the bytes written over the longest job's run time
 * (each job's time runs from its first write to the end of its fsync, after fio started), and
 * the CPU time of the jobs (their user and system percentages of the jobs' summed run time). */
static int fio_report(const char *report, size_t size, struct run *r) {
  FILE *f = fopen(report, "r");
  char text[1 << 16];
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  text[n] = '\0';
  double bw = json_number(text, "\"write\" : {", "bw_bytes");
  double ms = json_number(text, NULL, "job_runtime");
  double usr = json_number(text, NULL, "usr_cpu"), sys = json_number(text, NULL, "sys_cpu");
  if (bw <= 0 || ms < 0 || usr < 0 || sys < 0)
    return fprintf(stderr, "cannot read fio's report %s\n", report), -1;
  r->seconds = (double)size / bw;
  r->cpu = (usr + sys) / 100 * ms / 1000;
  return 0;
}

static int fio_run(const struct options *o, const char *path, int t, struct run *r) {
  char store[6][4200], *argv[20], report[4104];
  snprintf(report, sizeof report, "%s.json", path);
  fio_args(o, path, report, t, store, argv);
  pid_t pid = fork();
  if (pid == 0) {
    execvp("fio", argv);
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return perror("fio"), -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fprintf(stderr, "fio failed (status %d): is it installed?\n", status), -1;
  int rc = fio_report(report, o->size, r);
  unlink(report);
  return rc;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, int n) {
  double s[MAX_PAIRS];
  memcpy(s, v, (size_t)n * sizeof *v);
  qsort(s, (size_t)n, sizeof *s, cmp_double);
  return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

struct summary {
  double kvik_gbps, fio_gbps, kvik_cpu, fio_cpu;
  int won;
};

/* The pairs at `t` threads, each printed as it ends, and their medians in *s. */
static int measure(const struct options *o, const char *path, const unsigned char *buf, int t,
                   struct summary *s) {
  double gbps[WAYS][MAX_PAIRS], cpu[WAYS][MAX_PAIRS], gb = (double)o->size / 1e9;
  double write_s = 0, write_cpu = 0; /* kvik's, before fsync */
  int won = 0;
  if (kvik_setting_set(KVIK_SETTING_NUM_THREADS, t) < 0)
    return fprintf(stderr, "%s\n", kvik_last_error()), -1;
  for (int p = 0; p < o->pairs; p++) {
    for (int k = 0; k < WAYS; k++) {
      int way = (k + p) % WAYS; /* kvik first in even pairs, fio first in odd ones */
      struct run r;
      fresh(path);
      if ((way == KVIK ? kvik_run(path, buf, o->size, &r) : fio_run(o, path, t, &r)) < 0) return -1;
      if (way == KVIK && p == 0 && kvik_check(path, o->size) < 0) return -1;
      gbps[way][p] = gb / r.seconds;
      cpu[way][p] = r.cpu / gb;
      if (way == KVIK) write_s = r.write_seconds, write_cpu = r.write_cpu;
    }
    won += gbps[KVIK][p] > gbps[FIO][p];
    printf("  T=%d pair %d: kvik %5.2f GB/s %5.2f CPU s/GB (write %.3f s %.3f CPU s, then fsync)"
           "   fio %5.2f GB/s %5.2f CPU s/GB\n",
           t, p + 1, gbps[KVIK][p], cpu[KVIK][p], write_s, write_cpu, gbps[FIO][p], cpu[FIO][p]);
  }
  fflush(stdout);
  *s = (struct summary){median(gbps[KVIK], o->pairs), median(gbps[FIO], o->pairs),
                        median(cpu[KVIK], o->pairs), median(cpu[FIO], o->pairs), won};
  return 0;
}

int main(int argc, char **argv) {
  struct options o;
  if (parse_args(argc, argv, &o) < 0) return 2;
  char path[4096];
  snprintf(path, sizeof path, "%s/kvik-buffered-writes-%d", o.dir, (int)getpid());
  unsigned char *buf = malloc(o.size);
  if (!buf) return fprintf(stderr, "out of memory for %zu bytes\n", o.size), 1;
  for (size_t i = 0; i < o.size; i++) buf[i] = byte_at(i);
  printf("%zu bytes to a new file in %s, buffered, fsync at the end; fio --ioengine=psync "
         "--bs=%zu --fsync_on_close=1; median of %d pairs\n",
         o.size, o.dir, o.bs, o.pairs);
  struct summary s[MAX_THREAD_COUNTS];
  int rc = 0, missed = 0;
  for (int i = 0; i < o.nthreads && rc == 0; i++) rc = measure(&o, path, buf, o.threads[i], &s[i]);
  unlink(path);
  free(buf);
  if (rc != 0) return 1;
  printf("%-4s %10s %10s %9s %14s %13s %9s\n", "T", "kvik GB/s", "fio GB/s", "kvik/fio",
         "kvik CPU s/GB", "fio CPU s/GB", "kvik won");
  for (int i = 0; i < o.nthreads; i++) {
    double ratio = s[i].kvik_gbps / s[i].fio_gbps;
    printf("%-4d %10.2f %10.2f %8.2fx %14.3f %13.3f %5d/%-3d%s\n", o.threads[i], s[i].kvik_gbps,
           s[i].fio_gbps, ratio, s[i].kvik_cpu, s[i].fio_cpu, s[i].won, o.pairs,
           ratio < o.target ? "  below target" : "");
    missed += ratio < o.target;
  }
  if (missed)
    printf("kvik is below %.2fx fio at %d of %d thread counts here\n", o.target, missed,
           o.nthreads);
  return 0;
}
