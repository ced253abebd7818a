/* kvik bench: page-cache (host memory) throughput of kvik_file_read/kvik_file_write next to the
 * plain pread/pwrite loops a user would otherwise write, on one and on T threads, so that the
 * numbers say what kvik's thread pool buys (or costs) on this machine. */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "kvik.h"

#define CHUNK ((size_t)4 << 20) /* bytes per call of the hand-written loops: kvik's task size */
#define MAX_COUNTS 32           /* thread counts --threads may list */
#define PARSE_HELP (-1)         /* parse_args() printed the help: exit 0 */

static const char bench_usage[] =
    "usage: kvik bench [options]\n"
    "\n"
    "Measure page-cache (host memory) throughput: kvik_file_read/kvik_file_write of a whole\n"
    "file next to plain pread/pwrite loops (4 MiB per call) on 1 and on T threads. Every kvik\n"
    "transfer is verified. GB/s means 1e9 bytes/s; each number is the best of --repeat runs,\n"
    "the three methods taking turns within each repetition.\n"
    "Needs SIZE bytes free in DIR and about twice SIZE of memory.\n"
    "\n"
    "options:\n"
    "  --dir DIR       directory for the test file (default: $TMPDIR or /tmp)\n"
    "  --size BYTES    test file size; suffixes K, M, G mean KiB, MiB, GiB (default: 1G)\n"
    "  --threads LIST  comma-separated thread counts (default: 1,2,4 and kvik's num_threads)\n"
    "  --repeat N      runs per measurement (default: 5)\n"
    "  --no-write      skip the write table\n"
    "  -h, --help      show this help\n";

struct options {
  const char *dir;
  size_t size;
  int counts[MAX_COUNTS];
  int ncounts; /* 0: the default list */
  int repeat;
  int write;
};

/* Everything a run holds, so that one cleanup path undoes it on success and on error alike. */
struct bench {
  struct options opt;
  int64_t default_threads; /* kvik's num_threads before the bench changed it */
  unsigned char *buf;      /* the whole file's content */
  unsigned char *scratch;  /* CHUNK bytes to read the file back into */
  int fd;
};

/* Global so that the signal handler can remove the test file. */
static char test_path[4096];
static volatile sig_atomic_t test_path_set;
static int show_progress; /* stderr is a terminal: logs get no progress lines */

enum method { LOOP_1, LOOP_T, KVIK };
static const char *const method_names[] = {"1 thread", "T threads", "kvik"};

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

/* Fill buf with the pattern of the file's bytes from `offset` (a multiple of 8) on. */
static void pattern_fill(unsigned char *buf, uint64_t offset, size_t len) {
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

static void progress(int write, enum method m, int nthreads, int rep, int repeat) {
  if (show_progress)
    fprintf(stderr, "\rbench: %s %-9s T=%d rep %d/%d ", write ? "write" : "read", method_names[m],
            nthreads, rep, repeat);
}

static void progress_clear(void) {
  if (show_progress) fprintf(stderr, "\r%50s\r", "");
}

static int sys_fail(const char *what, int err) {
  progress_clear();
  fprintf(stderr, "kvik bench: %s: %s\n", what, strerror(-err));
  return CLI_ERROR;
}

/* For a failed kvik call: progress_clear() makes no kvik call, so the message survives. */
static int kvik_fail(void) {
  progress_clear();
  return cli_fail("bench");
}

static int check_range(const unsigned char *buf, uint64_t offset, size_t len, const char *what) {
  size_t bad = pattern_mismatch(buf, offset, len);
  if (bad == len) return CLI_OK;
  progress_clear();
  fprintf(stderr, "kvik bench: %s: wrong data at file offset %llu: 0x%02x, expected 0x%02x\n", what,
          (unsigned long long)(offset + bad), buf[bad], pattern_byte(offset + bad));
  return CLI_ERROR;
}

/* ---- IO ---------------------------------------------------------------------------------- */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* pread or pwrite len bytes at offset in CHUNK-sized calls, retrying interrupted and short
 * calls. Returns 0, -errno, or -EIO when the file ends early. */
static int io_loop(int fd, unsigned char *buf, size_t len, uint64_t offset, int write) {
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
  s->err = io_loop(s->fd, s->buf, s->len, s->offset, s->write);
  return NULL;
}

/* The parallel loop one would write by hand: T threads, each one contiguous, page-aligned 1/T
 * of the file. Thread start-up is timed too, as it would be in such a program. */
static int io_parallel(int fd, unsigned char *buf, size_t size, int nthreads, int write) {
  struct slice *s = calloc((size_t)nthreads, sizeof *s);
  if (!s) return -ENOMEM;
  size_t step = size / (size_t)nthreads / 4096 * 4096;
  int started = 0, err = 0;
  for (; started < nthreads; started++) {
    size_t begin = step * (size_t)started, end = started == nthreads - 1 ? size : begin + step;
    s[started] = (struct slice){.fd = fd, .write = write, .buf = buf + begin, .len = end - begin,
                                .offset = begin};
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

/* One transfer of the whole file. Returns CLI_OK, or prints why not. */
static int run_once(struct bench *b, kvik_file *f, enum method m, int nthreads, int write) {
  size_t size = b->opt.size;
  int err = 0;
  if (m == LOOP_1) err = io_loop(b->fd, b->buf, size, 0, write);
  if (m == LOOP_T) err = io_parallel(b->fd, b->buf, size, nthreads, write);
  if (err) return sys_fail(write ? "pwrite" : "pread", err);
  if (m != KVIK) return CLI_OK;
  ssize_t n = write ? kvik_file_write(f, b->buf, size, 0) : kvik_file_read(f, b->buf, size, 0);
  if (n < 0) return kvik_fail();
  if ((size_t)n == size) return CLI_OK;
  progress_clear();
  fprintf(stderr, "kvik bench: %s: %zd of %zu bytes\n", write ? "kvik_file_write" : "kvik_file_read", n, size);
  return CLI_ERROR;
}

/* After a kvik read the buffer must hold the pattern; after a kvik write the file must, read
 * back with plain preads. */
static int verify(struct bench *b, int write) {
  if (!write) return check_range(b->buf, 0, b->opt.size, "kvik_file_read");
  for (size_t off = 0; off < b->opt.size; off += CHUNK) {
    size_t n = b->opt.size - off < CHUNK ? b->opt.size - off : CHUNK;
    int err = io_loop(b->fd, b->scratch, n, off, 0);
    if (err) return sys_fail("pread", err);
    if (check_range(b->scratch, off, n, "kvik_file_write") != CLI_OK) return CLI_ERROR;
  }
  return CLI_OK;
}

/* The best of --repeat runs of each method, in GB/s. The methods take turns within each
 * repetition, so that a noisy neighbour or a drifting clock speed hits all three alike. kvik runs
 * are verified after each run, outside the timed region; a read target is zeroed first so that
 * bytes kvik did not read cannot pass. */
static int measure_row(struct bench *b, kvik_file *f, int nthreads, int write, double best[3]) {
  best[LOOP_1] = best[LOOP_T] = best[KVIK] = 0;
  for (int rep = 1; rep <= b->opt.repeat; rep++) {
    for (enum method m = LOOP_1; m <= KVIK; m++) {
      progress(write, m, nthreads, rep, b->opt.repeat);
      if (m == KVIK && !write) memset(b->buf, 0, b->opt.size);
      double start = now();
      if (run_once(b, f, m, nthreads, write) != CLI_OK) return CLI_ERROR;
      double rate = (double)b->opt.size / (now() - start) / 1e9;
      if (m == KVIK && verify(b, write) != CLI_OK) return CLI_ERROR;
      if (rate > best[m]) best[m] = rate;
    }
  }
  return CLI_OK;
}

/* ---- tables ------------------------------------------------------------------------------ */

static void print_header(const struct bench *b, int write) {
  const char *op = write ? "pwrite" : "pread";
  char one[32], many[32], ratio_one[32], ratio_many[32];
  snprintf(one, sizeof one, "%s 1 thread", op);
  snprintf(many, sizeof many, "%s T threads", op);
  snprintf(ratio_one, sizeof ratio_one, "kvik/%s1", op);
  snprintf(ratio_many, sizeof ratio_many, "kvik/%sT", op);
  progress_clear();
  printf("\n%s (GB/s, best of %d)\n", write ? "WRITE: host memory -> page cache" : "READ: page cache -> host memory",
         b->opt.repeat);
  printf("%-12s  %15s  %16s  %7s  %12s  %12s\n", "threads T", one, many, "kvik", ratio_one, ratio_many);
}

/* One row: the 1-thread loop, the T-thread loop and kvik with num_threads = T. */
static int run_row(struct bench *b, kvik_file *f, int write, int nthreads) {
  double best[3];
  if (kvik_setting_set(KVIK_SETTING_NUM_THREADS, nthreads) < 0) return kvik_fail();
  if (measure_row(b, f, nthreads, write, best) != CLI_OK) return CLI_ERROR;
  char label[32];
  snprintf(label, sizeof label, "%d%s", nthreads, nthreads == b->default_threads ? " (default)" : "");
  progress_clear();
  printf("%-12s  %15.2f  %16.2f  %7.2f  %11.2fx  %11.2fx\n", label, best[LOOP_1], best[LOOP_T], best[KVIK],
         best[KVIK] / best[LOOP_1], best[KVIK] / best[LOOP_T]);
  fflush(stdout); /* a row per few seconds: show it as it comes */
  return CLI_OK;
}

/* Writes put the pattern back in place, so the file stays in the page cache and keeps its
 * content. */
static int run_table(struct bench *b, int write) {
  kvik_file *f;
  if (kvik_file_open(test_path, write ? "r+" : "r", 0, &f) < 0) return kvik_fail();
  print_header(b, write);
  int rc = CLI_OK;
  for (int i = 0; rc == CLI_OK && i < b->opt.ncounts; i++) rc = run_row(b, f, write, b->opt.counts[i]);
  kvik_file_free(f);
  return rc;
}

/* ---- setup and cleanup ------------------------------------------------------------------- */

/* Ctrl-C must not leave a GiB behind: remove the test file, then die of the signal as usual. */
static void on_signal(int sig) {
  if (test_path_set) unlink(test_path);
  signal(sig, SIG_DFL);
  raise(sig);
}

/* Signals ignored at start stay ignored, as nohup and background jobs expect. */
static void catch_signals(void) {
  static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction sa = {.sa_handler = on_signal}, old;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler != SIG_IGN) sigaction(sigs[i], &sa, NULL);
}

/* Write the test file, flush it (so that writeback does not run during the read table) and
 * read it once, so that the whole file is in the page cache before the first timed read. */
static int create_file(struct bench *b) {
  if (snprintf(test_path, sizeof test_path, "%s/kvik-bench-XXXXXX", b->opt.dir) >= (int)sizeof test_path)
    return sys_fail(b->opt.dir, -ENAMETOOLONG);
  catch_signals();
  b->fd = mkstemp(test_path);
  if (b->fd < 0) return sys_fail(b->opt.dir, -errno);
  test_path_set = 1;
  int err = io_loop(b->fd, b->buf, b->opt.size, 0, 1);
  if (!err && fdatasync(b->fd) < 0) err = -errno;
  if (!err) err = io_loop(b->fd, b->buf, b->opt.size, 0, 0);
  return err ? sys_fail(test_path, err) : CLI_OK;
}

/* Filling the buffer with the pattern also faults in all its pages, so that no timed run
 * pays for page faults. */
static int setup(struct bench *b) {
  void *buf;
  int err = posix_memalign(&buf, 4096, b->opt.size);
  if (err) return sys_fail("buffer", -err);
  b->buf = buf;
  b->scratch = malloc(CHUNK);
  if (!b->scratch) return sys_fail("buffer", -ENOMEM);
  pattern_fill(b->buf, 0, b->opt.size);
  if (create_file(b) != CLI_OK) return CLI_ERROR;
  printf("kvik bench: %ld online CPUs, file %zu bytes (%.2f GiB) in %s, kvik default num_threads %lld\n",
         sysconf(_SC_NPROCESSORS_ONLN), b->opt.size, (double)b->opt.size / (1 << 30), b->opt.dir,
         (long long)b->default_threads);
  return CLI_OK;
}

static int cleanup(struct bench *b, int rc) {
  progress_clear();
  if (test_path_set) unlink(test_path);
  test_path_set = 0;
  if (b->fd >= 0) close(b->fd);
  free(b->buf);
  free(b->scratch);
  if (kvik_setting_set(KVIK_SETTING_NUM_THREADS, b->default_threads) < 0) return cli_fail("bench");
  return rc;
}

/* ---- options ----------------------------------------------------------------------------- */

/* A decimal integer in [1, INT_MAX] at text; *end gets what follows it. -1 if there is none. */
static int parse_positive(const char *text, char **end) {
  if (!isdigit((unsigned char)*text)) return -1;
  errno = 0;
  long v = strtol(text, end, 10);
  return errno || v < 1 || v > INT_MAX ? -1 : (int)v;
}

/* BYTES with an optional K, M or G suffix (binary units). */
static int parse_size(const char *text, size_t *size) {
  if (!isdigit((unsigned char)*text)) return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  int shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : *end == 'G' || *end == 'g' ? 30 : 0;
  if (shift) end++;
  /* Offsets are int64_t and transfer sizes come back as ssize_t. */
  if (errno || *end || v == 0 || v > ((unsigned long long)INT64_MAX >> shift)) return -1;
  *size = (size_t)(v << shift);
  return 0;
}

static int parse_counts(const char *text, struct options *o) {
  for (o->ncounts = 0;;) {
    char *end;
    int v = parse_positive(text, &end);
    if (v < 0 || o->ncounts == MAX_COUNTS || (*end != ',' && *end != '\0')) return -1;
    o->counts[o->ncounts++] = v;
    if (*end == '\0') return 0;
    text = end + 1;
  }
}

/* 1, 2, 4 and kvik's default thread count, ascending. */
static void default_counts(struct options *o, int def) {
  static const int base[] = {1, 2, 4};
  o->ncounts = 0;
  for (int i = 0; i < 3; i++) {
    if (def < base[i] && (i == 0 || def > base[i - 1])) o->counts[o->ncounts++] = def;
    o->counts[o->ncounts++] = base[i];
  }
  if (def > 4) o->counts[o->ncounts++] = def;
}

/* The value of option `name` given as "NAME VALUE" or "NAME=VALUE" at argv[*i], else NULL. */
static const char *value_of(const char *name, int argc, char **argv, int *i) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] != '\0') return NULL;
  return *i + 1 < argc ? argv[++*i] : "";
}

enum value_option { OPT_DIR, OPT_SIZE, OPT_THREADS, OPT_REPEAT, OPT_COUNT };
static const char *const value_options[OPT_COUNT] = {"--dir", "--size", "--threads", "--repeat"};

static int set_option(enum value_option opt, const char *v, struct options *o) {
  char *end;
  switch (opt) {
  case OPT_DIR: return o->dir = v, 0;
  case OPT_SIZE: return parse_size(v, &o->size);
  case OPT_THREADS: return parse_counts(v, o);
  default: return (o->repeat = parse_positive(v, &end)) > 0 && *end == '\0' ? 0 : -1;
  }
}

static int parse_option(int argc, char **argv, int *i, struct options *o) {
  const char *arg = argv[*i];
  if (cli_is_help(arg)) return fputs(bench_usage, stdout), PARSE_HELP;
  if (strcmp(arg, "--no-write") == 0) return o->write = 0, CLI_OK;
  for (int opt = 0; opt < OPT_COUNT; opt++) {
    const char *v = value_of(value_options[opt], argc, argv, i);
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
  *o = (struct options){.dir = tmpdir && *tmpdir ? tmpdir : "/tmp", .size = (size_t)1 << 30, .repeat = 5, .write = 1};
  for (int i = 1; i < argc; i++) {
    int rc = parse_option(argc, argv, &i, o);
    if (rc != CLI_OK) return rc;
  }
  return CLI_OK;
}

int cli_bench(int argc, char **argv) {
  struct bench b = {.fd = -1};
  int rc = parse_args(argc, argv, &b.opt);
  if (rc != CLI_OK) return rc == PARSE_HELP ? CLI_OK : rc;
  if (kvik_setting_get(KVIK_SETTING_NUM_THREADS, &b.default_threads) < 0) return cli_fail("bench");
  if (b.opt.ncounts == 0) default_counts(&b.opt, (int)b.default_threads);
  show_progress = isatty(STDERR_FILENO);
  rc = setup(&b);
  if (rc == CLI_OK) rc = run_table(&b, 0);
  /* The last verified kvik read left the pattern in the buffer: the writes write it back. */
  if (rc == CLI_OK && b.opt.write) rc = run_table(&b, 1);
  return cleanup(&b, rc);
}
