/* kvik bench: throughput of kvik_file_read/kvik_file_write next to what a user would otherwise
 * write, measured side by side. Host memory (here): plain pread/pwrite loops on one and on T
 * threads, so that the numbers say what kvik's thread pool buys (or costs) on this machine.
 * Device memory (--device, bench_device.c): the baselines and ceilings of a GPU transfer; every
 * GPU at once (--device all, bench_all.c). */
#define _POSIX_C_SOURCE 200809L

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

#define PARSE_HELP (-1) /* parse_args() printed the help: exit 0 */

static const char bench_usage[] =
    "usage: kvik bench [options]\n"
    "       kvik bench URL [options]   a remote object instead: see 'kvik bench URL --help'\n"
    "\n"
    "Measure kvik_file_read/kvik_file_write of a whole file next to what one would otherwise\n"
    "write, side by side in one run. Every kvik transfer is verified. GB/s means 1e9 bytes/s;\n"
    "each number is the best of --repeat runs, the methods taking turns within each repetition.\n"
    "\n"
    "Host memory (default): plain pread/pwrite loops (4 MiB per call) on 1 and on T threads.\n"
    "Device memory (--device, needs a CUDA GPU): (a) pread on 1 thread into pageable memory,\n"
    "then one cuMemcpyHtoD; (b) preads on T threads into pinned memory, with no GPU copy, the\n"
    "ceiling the page cache allows; (c) one pinned cuMemcpyHtoD of the file's size, the PCIe\n"
    "ceiling; kvik reported as a fraction of min(b, c) and as a multiple of (a); 'kvik zero-copy'\n"
    "is kvik with zero-copy reads on (KVIK_ZERO_COPY_READ=auto), a first read: open, read, close;\n"
    "'zero-copy again' reads on one handle that read the file before, on one thread, and kept\n"
    "its registrations (not in cold runs, as those pages cannot leave the page cache); 'cuFile'\n"
    "is kvik on the file opened with compat mode OFF, so that cuFile (GPUDirect Storage) serves\n"
    "it, or n/a with the reason where it cannot. Writes mirror this from device memory.\n"
    "Needs SIZE bytes free in DIR and about twice SIZE of memory (three times with --device).\n"
    "\n"
    "Every GPU at once (--device all): each of the N GPUs reads a file of its own (N files of\n"
    "SIZE bytes) with kvik_file_read, one host thread per GPU, all at the same time, sharing\n"
    "kvik's pool of T threads (default: kvik's num_threads only). Per GPU: 'copy alone', one\n"
    "pinned cuMemcpyHtoD of SIZE with no other GPU busy, its own ceiling; 'copy all', the same\n"
    "on every GPU at once; 'kvik all', and its ratios to both. For the node: the totals, and\n"
    "the pread ceiling, all the files read at once into pinned memory by T threads in all.\n"
    "Then the targets of issue 30: each GPU at least 0.90x its copy alone, where the pread\n"
    "ceiling allows; else the node's total at least 0.85x the pread ceiling. Reads only.\n"
    "Needs N * SIZE bytes free in DIR and about (2N + 1) * SIZE of host memory.\n"
    "\n"
    "options:\n"
    "  --dir DIR       directory for the test file (default: $TMPDIR or /tmp)\n"
    "  --size BYTES    test file size; suffixes K, M, G mean KiB, MiB, GiB (default: 1G)\n"
    "  --threads LIST  comma-separated thread counts (default: 1,2,4 and kvik's num_threads)\n"
    "  --repeat N      runs per measurement (default: 5)\n"
    "  --no-write      skip the write table\n"
    "  --device [N]    measure device memory instead of host memory, of GPU N (default: 0)\n"
    "  --device all    every GPU at once, each reading its own file (see above)\n"
    "  --cold          with --device, also a read table with the file dropped from the page\n"
    "                  cache before every run (reads from storage)\n"
    "  -h, --help      show this help\n";

char test_path[4096];
static volatile sig_atomic_t test_path_set;
/* bench_add_file()'s files: their paths, descriptors, and how many there are (for on_signal). */
static char more_paths[BENCH_MAX_GPUS - 1][4096];
static int more_fds[BENCH_MAX_GPUS - 1];
static volatile sig_atomic_t more_files;
static int show_progress; /* stderr is a terminal: logs get no progress lines */

enum host_method { LOOP_1, LOOP_T, KVIK };

/* ---- pattern ----------------------------------------------------------------------------- */

/* One xorshift64 word per 8 bytes, seeded by its offset: a byte that came from the wrong
 * offset shows, and so does one never read, since reads go to a zeroed buffer and the odd seed
 * constant keeps every word nonzero (xorshift maps only 0 to 0). */
static uint64_t pattern_word(uint64_t offset) {
  uint64_t x = offset ^ UINT64_C(0x9E3779B97F4A7C15);
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

void bench_pattern_fill(unsigned char *buf, uint64_t offset, size_t len) {
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w = pattern_word(offset + i);
    memcpy(buf + i, &w, 8);
  }
  uint64_t w = pattern_word(offset + i);
  memcpy(buf + i, &w, len - i);
}

/* The pattern's byte at any file offset. */
static unsigned char pattern_byte(uint64_t offset) {
  unsigned char word[8];
  uint64_t w = pattern_word(offset & ~(uint64_t)7);
  memcpy(word, &w, 8);
  return word[offset & 7];
}

/* The index of the first byte of buf that differs from the pattern, or len. Whole words are
 * compared first because this runs over the whole file after every kvik transfer. */
static size_t pattern_mismatch(const unsigned char *buf, uint64_t offset, size_t len) {
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t have;
    memcpy(&have, buf + i, 8);
    if (have != pattern_word(offset + i)) break;
  }
  for (; i < len; i++)
    if (buf[i] != pattern_byte(offset + i)) return i;
  return len;
}

/* ---- messages ---------------------------------------------------------------------------- */

void bench_progress(int write, const char *method, int nthreads, int rep, int repeat) {
  if (show_progress)
    fprintf(stderr, "\rbench: %s %-20s T=%d rep %d/%d ", write ? "write" : "read", method, nthreads,
            rep, repeat);
}

void bench_progress_init(void) { show_progress = isatty(STDERR_FILENO); }

void bench_progress_clear(void) {
  if (show_progress) fprintf(stderr, "\r%50s\r", "");
}

int bench_sys_fail(const char *what, int err) {
  bench_progress_clear();
  fprintf(stderr, "kvik bench: %s: %s\n", what, strerror(-err));
  return CLI_ERROR;
}

/* For a failed kvik call: bench_progress_clear() makes no kvik call, so the message survives. */
int bench_kvik_fail(void) {
  bench_progress_clear();
  return cli_fail("bench");
}

int bench_check_pattern(const unsigned char *buf, uint64_t origin, uint64_t offset, size_t len,
                        const char *what) {
  size_t bad = pattern_mismatch(buf, origin + offset, len);
  if (bad == len) return CLI_OK;
  bench_progress_clear();
  fprintf(stderr, "kvik bench: %s: wrong data at file offset %llu: 0x%02x, expected 0x%02x\n", what,
          (unsigned long long)(offset + bad), buf[bad], pattern_byte(origin + offset + bad));
  return CLI_ERROR;
}

int bench_check_range(const unsigned char *buf, uint64_t offset, size_t len, const char *what) {
  return bench_check_pattern(buf, 0, offset, len, what);
}

/* ---- IO ---------------------------------------------------------------------------------- */

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double seconds_of(struct timeval t) { return (double)t.tv_sec + (double)t.tv_usec * 1e-6; }

double bench_cpu_seconds(int children) {
  struct rusage u;
  getrusage(children ? RUSAGE_CHILDREN : RUSAGE_SELF, &u);
  return seconds_of(u.ru_utime) + seconds_of(u.ru_stime);
}

/* pread or pwrite len bytes at offset in CHUNK-sized calls, retrying interrupted and short
 * calls. Returns 0, -errno, or -EIO when the file ends early. */
int bench_io_loop(int fd, unsigned char *buf, size_t len, uint64_t offset, int write) {
  size_t done = 0;
  while (done < len) {
    size_t n = len - done < CHUNK ? len - done : CHUNK;
    off_t at = (off_t)(offset + done);
    ssize_t r = write ? pwrite(fd, buf + done, n, at) : pread(fd, buf + done, n, at);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -errno;
    if (r == 0) return -EIO;
    done += (size_t)r;
  }
  return 0;
}

struct slice {
  pthread_t thread;
  int fd, write, err;
  unsigned char *buf;
  size_t len;
  uint64_t offset;
};

static void *slice_main(void *arg) {
  struct slice *s = arg;
  s->err = bench_io_loop(s->fd, s->buf, s->len, s->offset, s->write);
  return NULL;
}

/* The parallel loop one would write by hand: T threads, each one contiguous, page-aligned 1/T
 * of the file. Thread start-up is timed too, as it would be in such a program. */
int bench_io_parallel(int fd, unsigned char *buf, size_t size, int nthreads, int write) {
  struct slice *s = calloc((size_t)nthreads, sizeof *s);
  if (!s) return -ENOMEM;
  size_t step = size / (size_t)nthreads / 4096 * 4096;
  int started = 0, err = 0;
  for (; started < nthreads; started++) {
    size_t begin = step * (size_t)started, end = started == nthreads - 1 ? size : begin + step;
    s[started] = (struct slice){
        .fd = fd, .write = write, .buf = buf + begin, .len = end - begin, .offset = begin};
    int rc = pthread_create(&s[started].thread, NULL, slice_main, &s[started]);
    if (rc != 0) {
      err = -rc;
      break;
    }
  }
  for (int i = 0; i < started; i++) {
    pthread_join(s[i].thread, NULL);
    if (!err) err = s[i].err;
  }
  free(s);
  return err;
}

int bench_check_count(struct bench *b, ssize_t n, const char *call) {
  if (n < 0) return bench_kvik_fail();
  if ((size_t)n == b->opt.size) return CLI_OK;
  bench_progress_clear();
  fprintf(stderr, "kvik bench: %s: %zd of %zu bytes\n", call, n, b->opt.size);
  return CLI_ERROR;
}

int bench_verify_file(struct bench *b, const char *what) {
  for (size_t off = 0; off < b->opt.size; off += CHUNK) {
    size_t n = b->opt.size - off < CHUNK ? b->opt.size - off : CHUNK;
    int err = bench_io_loop(b->fd, b->scratch, n, off, 0);
    if (err) return bench_sys_fail("pread", err);
    if (bench_check_range(b->scratch, off, n, what) != CLI_OK) return CLI_ERROR;
  }
  return CLI_OK;
}

/* ---- the engine -------------------------------------------------------------------------- */

#define NOT_AVAILABLE (-1.0) /* the best rate of a method that cannot run here */

/* Each method's best rate in GB/s, and the CPU seconds per GB of that same run: the time every
 * thread of the process spent, user and system, from getrusage. */
static int measure_row(struct bench *b, const struct suite *s, kvik_file *f, int nthreads,
                       int write, double *best, double *cpu) {
  for (int m = 0; m < s->nmethods; m++)
    best[m] = s->available && !s->available(b, m, write) ? NOT_AVAILABLE : 0;
  double gb = (double)b->opt.size / 1e9;
  for (int rep = 1; rep <= b->opt.repeat; rep++) {
    for (int m = 0; m < s->nmethods; m++) {
      if (best[m] == NOT_AVAILABLE) continue;
      bench_progress(write, s->names[m], nthreads, rep, b->opt.repeat);
      if (s->prepare(b, m, write) != CLI_OK) return CLI_ERROR;
      double cpu_start = bench_cpu_seconds(0), start = bench_now();
      if (s->run(b, f, m, nthreads, write) != CLI_OK) return CLI_ERROR;
      double rate = gb / (bench_now() - start),
             cpu_per_gb = (bench_cpu_seconds(0) - cpu_start) / gb;
      if (s->verify(b, m, write) != CLI_OK) return CLI_ERROR;
      if (rate > best[m]) {
        best[m] = rate;
        cpu[m] = cpu_per_gb;
      }
    }
  }
  return CLI_OK;
}

/* Columns are as wide as their headers, at least 7. */
static int width(const char *header) { return strlen(header) > 7 ? (int)strlen(header) : 7; }

static void print_header(const struct bench *b, const struct suite *s) {
  bench_progress_clear();
  printf("\n%s (GB/s, best of %d; then the CPU seconds per GB of those runs, user + system)\n%-12s",
         s->title, b->opt.repeat, "threads T");
  for (int m = 0; m < s->nmethods; m++) printf("  %*s", width(s->names[m]), s->names[m]);
  for (int r = 0; r < s->nratios; r++) printf("  %*s", width(s->ratio_names[r]), s->ratio_names[r]);
  printf("  | CPU s/GB:");
  for (int m = 0; m < s->nmethods; m++) printf("  %*s", width(s->names[m]), s->names[m]);
  printf("\n");
}

/* One row: every method, with kvik's num_threads = T. */
static int run_row(struct bench *b, const struct suite *s, kvik_file *f, int write, int nthreads) {
  double best[MAX_METHODS], cpu[MAX_METHODS];
  if (kvik_setting_set(KVIK_SETTING_NUM_THREADS, nthreads) < 0) return bench_kvik_fail();
  if (measure_row(b, s, f, nthreads, write, best, cpu) != CLI_OK) return CLI_ERROR;
  char label[32];
  snprintf(label, sizeof label, "%d%s", nthreads,
           nthreads == b->default_threads ? " (default)" : "");
  bench_progress_clear();
  printf("%-12s", label);
  for (int m = 0; m < s->nmethods; m++) {
    if (best[m] == NOT_AVAILABLE) printf("  %*s", width(s->names[m]), "n/a");
    else printf("  %*.2f", width(s->names[m]), best[m]);
  }
  for (int r = 0; r < s->nratios; r++)
    printf("  %*.2fx", width(s->ratio_names[r]) - 1, s->ratio(best, r));
  printf("  | %9s", "");
  for (int m = 0; m < s->nmethods; m++) {
    if (best[m] == NOT_AVAILABLE) printf("  %*s", width(s->names[m]), "n/a");
    else printf("  %*.3f", width(s->names[m]), cpu[m]);
  }
  printf("\n");
  fflush(stdout); /* a row per few seconds: show it as it comes */
  return CLI_OK;
}

/* Writes put the pattern back in place, so the file stays in the page cache and keeps its
 * content. */
int bench_table(struct bench *b, const struct suite *s, int write) {
  kvik_file *f;
  if (kvik_file_open(test_path, write ? "r+" : "r", 0, &f) < 0) return bench_kvik_fail();
  print_header(b, s);
  int rc = CLI_OK;
  for (int i = 0; rc == CLI_OK && i < b->opt.ncounts; i++)
    rc = run_row(b, s, f, write, b->opt.counts[i]);
  kvik_file_free(f);
  return rc;
}

/* ---- host memory ------------------------------------------------------------------------- */

static int host_prepare(struct bench *b, int m, int write) {
  /* A read target is zeroed so that bytes kvik did not read cannot pass. */
  if (m == KVIK && !write) memset(b->buf, 0, b->opt.size);
  return CLI_OK;
}

static int host_run(struct bench *b, kvik_file *f, int m, int nthreads, int write) {
  size_t size = b->opt.size;
  int err = 0;
  if (m == LOOP_1) err = bench_io_loop(b->fd, b->buf, size, 0, write);
  if (m == LOOP_T) err = bench_io_parallel(b->fd, b->buf, size, nthreads, write);
  if (err) return bench_sys_fail(write ? "pwrite" : "pread", err);
  if (m != KVIK) return CLI_OK;
  if (write) return bench_check_count(b, kvik_file_write(f, b->buf, size, 0), "kvik_file_write");
  return bench_check_count(b, kvik_file_read(f, b->buf, size, 0), "kvik_file_read");
}

/* After a kvik read the buffer must hold the pattern; after a kvik write the file must. */
static int host_verify(struct bench *b, int m, int write) {
  if (m != KVIK) return CLI_OK;
  if (write) return bench_verify_file(b, "kvik_file_write");
  return bench_check_range(b->buf, 0, b->opt.size, "kvik_file_read");
}

static double host_ratio(const double *best, int i) {
  return best[KVIK] / best[i == 0 ? LOOP_1 : LOOP_T];
}

static int host_tables(struct bench *b) {
  struct suite s = {"READ: page cache -> host memory",
                    3,
                    {"pread 1 thread", "pread T threads", "kvik"},
                    host_prepare,
                    host_run,
                    host_verify,
                    2,
                    {"kvik/pread1", "kvik/preadT"},
                    host_ratio,
                    NULL};
  int rc = bench_table(b, &s, 0);
  if (rc != CLI_OK || !b->opt.write) return rc;
  s = (struct suite){"WRITE: host memory -> page cache",
                     3,
                     {"pwrite 1 thread", "pwrite T threads", "kvik"},
                     host_prepare,
                     host_run,
                     host_verify,
                     2,
                     {"kvik/pwrite1", "kvik/pwriteT"},
                     host_ratio,
                     NULL};
  return bench_table(b, &s, 1);
}

/* ---- setup and cleanup ------------------------------------------------------------------- */

/* Ctrl-C must not leave a GiB behind: remove the test files, then die of the signal as usual. */
static void on_signal(int sig) {
  if (test_path_set) unlink(test_path);
  for (int i = 0; i < more_files; i++) unlink(more_paths[i]);
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Signals ignored at start stay ignored, as nohup and background jobs expect. */
static void catch_signals(void) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction sa = {.sa_handler = on_signal}, old;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN)
      sigaction(sigs[i], &sa, NULL);
}

/* A new empty test file in --dir: its path into `path` (4096 bytes), its descriptor or -1. */
static int open_file(const struct options *o, char *path, int *fd) {
  if (snprintf(path, 4096, "%s/kvik-bench-XXXXXX", o->dir) >= 4096)
    return bench_sys_fail(o->dir, -ENAMETOOLONG);
  *fd = mkstemp(path);
  return *fd < 0 ? bench_sys_fail(o->dir, -errno) : CLI_OK;
}

/* Write the test file, flush it (so that writeback does not run during the read table) and
 * read it once, so that the whole file is in the page cache before the first timed read. */
static int fill_file(const struct options *o, const char *path, int fd, unsigned char *content) {
  int err = bench_io_loop(fd, content, o->size, 0, 1);
  if (!err && fdatasync(fd) < 0) err = -errno;
  if (!err) err = bench_io_loop(fd, content, o->size, 0, 0);
  return err ? bench_sys_fail(path, err) : CLI_OK;
}

static int create_file(struct bench *b) {
  catch_signals();
  if (open_file(&b->opt, test_path, &b->fd) != CLI_OK) return CLI_ERROR;
  test_path_set = 1;
  return fill_file(&b->opt, test_path, b->fd, b->buf);
}

int bench_add_file(struct bench *b, unsigned char *content, const char **path, int *fd) {
  int i = more_files;
  assert(i < BENCH_MAX_GPUS - 1);
  if (open_file(&b->opt, more_paths[i], &more_fds[i]) != CLI_OK) return CLI_ERROR;
  more_files = i + 1;
  *path = more_paths[i];
  *fd = more_fds[i];
  return fill_file(&b->opt, more_paths[i], more_fds[i], content);
}

/* Filling the buffer with the pattern also faults in all its pages, so that no timed run
 * pays for page faults. */
static int setup(struct bench *b) {
  void *buf;
  int err = posix_memalign(&buf, 4096, b->opt.size);
  if (err) return bench_sys_fail("buffer", -err);
  b->buf = buf;
  b->scratch = malloc(CHUNK);
  if (!b->scratch) return bench_sys_fail("buffer", -ENOMEM);
  bench_pattern_fill(b->buf, 0, b->opt.size);
  if (create_file(b) != CLI_OK) return CLI_ERROR;
  printf("kvik bench: %ld online CPUs, file %zu bytes (%.2f GiB) in %s, kvik default num_threads "
         "%lld\n",
         sysconf(_SC_NPROCESSORS_ONLN), b->opt.size, (double)b->opt.size / (1 << 30), b->opt.dir,
         (long long)b->default_threads);
  return CLI_OK;
}

static int cleanup(struct bench *b, int rc) {
  bench_progress_clear();
  if (test_path_set) unlink(test_path);
  test_path_set = 0;
  if (b->fd >= 0) close(b->fd);
  for (; more_files > 0; more_files--) {
    unlink(more_paths[more_files - 1]);
    close(more_fds[more_files - 1]);
  }
  free(b->buf);
  free(b->scratch);
  if (kvik_setting_set(KVIK_SETTING_NUM_THREADS, b->default_threads) < 0) return cli_fail("bench");
  return rc;
}

/* ---- options ----------------------------------------------------------------------------- */

int bench_parse_counts(const char *text, struct options *o) {
  for (o->ncounts = 0;;) {
    char *end;
    int v = cli_parse_positive(text, &end);
    if (v < 0 || o->ncounts == MAX_COUNTS || (*end != ',' && *end != '\0')) return -1;
    o->counts[o->ncounts++] = v;
    if (*end == '\0') return 0;
    text = end + 1;
  }
}

/* 1, 2, 4 and kvik's default thread count, ascending. */
void bench_default_counts(struct options *o, int def) {
  static const int base[] = {1, 2, 4};
  o->ncounts = 0;
  for (int i = 0; i < 3; i++) {
    if (def < base[i] && (i == 0 || def > base[i - 1])) o->counts[o->ncounts++] = def;
    o->counts[o->ncounts++] = base[i];
  }
  if (def > 4) o->counts[o->ncounts++] = def;
}

enum value_option { OPT_DIR, OPT_SIZE, OPT_THREADS, OPT_REPEAT, OPT_COUNT };
static const char *const value_options[OPT_COUNT] = {"--dir", "--size", "--threads", "--repeat"};

static int set_option(enum value_option opt, const char *v, struct options *o) {
  char *end;
  switch (opt) {
  case OPT_DIR: return o->dir = v, 0;
  case OPT_SIZE: return cli_parse_size(v, &o->size);
  case OPT_THREADS: return bench_parse_counts(v, o);
  default: return (o->repeat = cli_parse_positive(v, &end)) > 0 && *end == '\0' ? 0 : -1;
  }
}

#define NO_GPU (-2) /* device_value() of anything else */

/* What a value of --device names: a GPU's number, or "all" (BENCH_ALL_GPUS). */
static int device_value(const char *v) {
  char *end;
  if (strcmp(v, "all") == 0) return BENCH_ALL_GPUS;
  if (strcmp(v, "0") == 0) return 0;
  int n = cli_parse_positive(v, &end);
  return n > 0 && *end == '\0' ? n : NO_GPU;
}

/* --device, --device N|all, --device=N|all: the next argument is the option's value only where
 * it names GPUs, so that `--device --cold` means what it did before. */
static int parse_device(int argc, char **argv, int *i, struct options *o) {
  const char *arg = argv[*i], *v = NULL;
  o->device = 1;
  if (arg[8] == '=') v = arg + 9;
  else if (*i + 1 < argc && device_value(argv[*i + 1]) != NO_GPU) v = argv[++*i];
  if (v && (o->gpu = device_value(v)) == NO_GPU)
    return cli_usage_error("bench", "invalid --device", v);
  return CLI_OK;
}

static int parse_option(int argc, char **argv, int *i, struct options *o) {
  const char *arg = argv[*i];
  if (cli_is_help(arg)) return fputs(bench_usage, stdout), PARSE_HELP;
  if (strcmp(arg, "--no-write") == 0) return o->write = 0, CLI_OK;
  if (strncmp(arg, "--device", 8) == 0 && (!arg[8] || arg[8] == '='))
    return parse_device(argc, argv, i, o);
  if (strcmp(arg, "--cold") == 0) return o->cold = 1, CLI_OK;
  for (int opt = 0; opt < OPT_COUNT; opt++) {
    const char *v = cli_option_value(value_options[opt], argc, argv, i);
    if (!v) continue;
    if (!*v) return cli_usage_error("bench", "missing value for", value_options[opt]);
    if (set_option((enum value_option)opt, v, o) == 0) return CLI_OK;
    char message[32];
    snprintf(message, sizeof message, "invalid %s", value_options[opt]);
    return cli_usage_error("bench", message, v);
  }
  return cli_usage_error("bench", arg[0] == '-' ? "unknown option" : "unexpected argument", arg);
}

static int parse_args(int argc, char **argv, struct options *o) {
  const char *tmpdir = getenv("TMPDIR");
  *o = (struct options){
      .dir = tmpdir && *tmpdir ? tmpdir : "/tmp", .size = (size_t)1 << 30, .repeat = 5, .write = 1};
  for (int i = 1; i < argc; i++) {
    int rc = parse_option(argc, argv, &i, o);
    if (rc != CLI_OK) return rc;
  }
  if (o->device && o->gpu == BENCH_ALL_GPUS && o->cold)
    return cli_usage_error("bench", "--device all takes no", "--cold");
  return CLI_OK;
}

int cli_bench(int argc, char **argv) {
  struct bench b = {.fd = -1};
  int rc = parse_args(argc, argv, &b.opt);
  if (rc != CLI_OK) return rc == PARSE_HELP ? CLI_OK : rc;
  if (kvik_setting_get(KVIK_SETTING_NUM_THREADS, &b.default_threads) < 0) return cli_fail("bench");
  int all = b.opt.device && b.opt.gpu == BENCH_ALL_GPUS;
  if (b.opt.ncounts == 0 && all) b.opt.counts[b.opt.ncounts++] = (int)b.default_threads;
  if (b.opt.ncounts == 0) bench_default_counts(&b.opt, (int)b.default_threads);
  bench_progress_init();
  rc = setup(&b);
  /* The last verified kvik read leaves the pattern in its buffer: the writes write it back. */
  if (rc == CLI_OK) rc = all ? bench_all(&b) : b.opt.device ? bench_device(&b) : host_tables(&b);
  return cleanup(&b, rc);
}
