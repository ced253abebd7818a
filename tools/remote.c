/* kvik cat and kvik bench URL: remote objects (HTTP, S3, WebHDFS) through kvik_remote_*. `cat`
 * copies an object, or a byte range of it, to stdout or a file in bounded memory; `bench URL`
 * measures reading one into host and device memory, next to curl if asked. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

#define PARSE_HELP (-1)              /* parse_args() printed the help: exit 0 */
#define CAT_CHUNK ((size_t)64 << 20) /* bytes per read of `kvik cat`; two are held */

extern char **environ;

static const char cat_usage[] =
    "usage: kvik cat URL|PATH [options]\n"
    "\n"
    "Write a remote object or a local file, or a byte range of it, to stdout or a file. It is "
    "read\n"
    "with kvik_remote_pread (parallel range requests) or kvik_file_pread, 64 MiB at a time: the\n"
    "next 64 MiB are read while the last are written, so at most 128 MiB of memory are held\n"
    "whatever the size.\n"
    "\n"
    "PATH: a local file, as a path or a file:// URL (file:///data/x.bin; no %-escapes).\n"
    "URL: http(s)://..., s3://BUCKET/KEY or a WebHDFS URL (.../webhdfs/v1/PATH). S3 credentials,\n"
    "region and endpoint come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,\n"
    "AWS_DEFAULT_REGION and AWS_ENDPOINT_URL. Messages never show credentials.\n"
    "\n"
    "options:\n"
    "  -o FILE         write to FILE (created, or truncated) instead of stdout\n"
    "  --offset BYTES  start at this byte (default: 0); suffixes K, M, G mean KiB, MiB, GiB\n"
    "  --size BYTES    write at most BYTES (default: up to the end of the object)\n"
    "  --kind KIND     auto (default: from the URL), http, s3, s3-public, s3-presigned or webhdfs\n"
    "  -h, --help      show this help\n";

static const char bench_usage[] =
    "usage: kvik bench URL [options]\n"
    "\n"
    "Measure kvik_remote_pread of a remote object (the whole of it, or its first --size bytes)\n"
    "into host memory, and into device memory with --device, for each thread count (kvik's\n"
    "num_threads). GB/s means 1e9 bytes/s; each number is the median of --repeat runs, taken in\n"
    "turns: per repetition the curl run (with --curl), then every row. Every read is checked to\n"
    "return all its bytes (there is no copy of the content to compare it with). The host buffer\n"
    "is allocated and written once before the runs, so that no run pays for page faults: it\n"
    "takes as much memory as is read, and --device as much device memory again.\n"
    "\n"
    "URL: as for 'kvik cat' (see 'kvik cat --help').\n"
    "\n"
    "options:\n"
    "  --size BYTES       read the first BYTES only; suffixes K, M, G mean KiB, MiB, GiB\n"
    "  --threads LIST     comma-separated thread counts (default: 1,2,4 and kvik's num_threads)\n"
    "  --repeat N         runs per measurement (default: 5)\n"
    "  --task-size BYTES  bytes per range request (default: kvik's task_size)\n"
    "  --kind KIND        auto (default: from the URL), http, s3, s3-public, s3-presigned or\n"
    "                     webhdfs\n"
    "  --device           also read into device memory (needs a CUDA GPU)\n"
    "  --curl             also time 'curl -o /dev/null' of the same bytes (one connection, from\n"
    "                     its start to its exit) and show kvik's host reads as a multiple of it\n"
    "  -h, --help         show this help\n";

/* ---- options ----------------------------------------------------------------------------- */

struct remote_options {
  const char *url, *output;
  kvik_remote_kind kind;
  size_t offset, size;
  int has_size;
  size_t task_size; /* 0: kvik's task_size */
  int curl;
  struct options bench; /* --threads, --repeat and --device, kept as `kvik bench` keeps them */
};

/* Flags come after the options that take a value. */
enum remote_option {
  OPT_OUTPUT,
  OPT_OFFSET,
  OPT_SIZE,
  OPT_KIND,
  OPT_THREADS,
  OPT_REPEAT,
  OPT_TASK_SIZE,
  OPT_DEVICE,
  OPT_CURL,
  OPT_COUNT
};
#define FIRST_FLAG OPT_DEVICE
static const char *const option_names[OPT_COUNT] = {"-o",          "--offset",  "--size",
                                                    "--kind",      "--threads", "--repeat",
                                                    "--task-size", "--device",  "--curl"};
#define BIT(opt) (1u << (opt))
#define CAT_OPTIONS (BIT(OPT_OUTPUT) | BIT(OPT_OFFSET) | BIT(OPT_SIZE) | BIT(OPT_KIND))
#define BENCH_OPTIONS                                                                              \
  (BIT(OPT_SIZE) | BIT(OPT_KIND) | BIT(OPT_THREADS) | BIT(OPT_REPEAT) | BIT(OPT_TASK_SIZE) |       \
   BIT(OPT_DEVICE) | BIT(OPT_CURL))

/* By kvik_remote_kind. */
static const char *const kind_names[] = {"auto",         "s3",      "s3-public",
                                         "s3-presigned", "webhdfs", "http"};

static int parse_kind(const char *text, kvik_remote_kind *kind) {
  for (size_t k = 0; k < sizeof kind_names / sizeof kind_names[0]; k++)
    if (strcmp(text, kind_names[k]) == 0) return *kind = (kvik_remote_kind)k, 0;
  return -1;
}

/* A byte count or offset as --size takes it, 0 included: an empty range is a valid request. */
static int parse_bytes(const char *text, size_t *v) {
  if (strcmp(text, "0") == 0) return *v = 0, 0;
  return cli_parse_size(text, v);
}

static int set_option(enum remote_option opt, const char *v, struct remote_options *o) {
  char *end;
  switch (opt) {
  case OPT_OUTPUT: return o->output = v, 0;
  case OPT_OFFSET: return parse_bytes(v, &o->offset);
  case OPT_SIZE: return o->has_size = 1, parse_bytes(v, &o->size);
  case OPT_KIND: return parse_kind(v, &o->kind);
  case OPT_THREADS: return bench_parse_counts(v, &o->bench);
  case OPT_REPEAT:
    return (o->bench.repeat = cli_parse_positive(v, &end)) > 0 && *end == '\0' ? 0 : -1;
  case OPT_TASK_SIZE: return cli_parse_size(v, &o->task_size);
  case OPT_DEVICE: return o->bench.device = 1, 0;
  default: return o->curl = 1, 0;
  }
}

/* The argument at argv[*i]: one of the `accepted` options (a bit per remote_option), or the URL. */
static int parse_option(const char *command, unsigned accepted, int argc, char **argv, int *i,
                        struct remote_options *o) {
  const char *arg = argv[*i];
  for (int opt = 0; opt < OPT_COUNT; opt++) {
    if (!(accepted & BIT(opt))) continue;
    if (opt >= FIRST_FLAG) {
      if (strcmp(arg, option_names[opt]) == 0)
        return set_option((enum remote_option)opt, NULL, o), CLI_OK;
      continue;
    }
    const char *v = cli_option_value(option_names[opt], argc, argv, i);
    if (!v) continue;
    if (!*v) return cli_usage_error(command, "missing value for", option_names[opt]);
    if (set_option((enum remote_option)opt, v, o) == 0) return CLI_OK;
    char message[32];
    snprintf(message, sizeof message, "invalid %s", option_names[opt]);
    return cli_usage_error(command, message, v);
  }
  if (arg[0] == '-') return cli_usage_error(command, "unknown option", arg);
  if (o->url) return cli_usage_error(command, "unexpected argument", arg);
  o->url = arg;
  return CLI_OK;
}

static int parse_args(const char *command, const char *usage, unsigned accepted, int argc,
                      char **argv, struct remote_options *o) {
  *o = (struct remote_options){.kind = KVIK_REMOTE_AUTO, .bench = {.repeat = 5}};
  for (int i = 1; i < argc; i++) {
    if (cli_is_help(argv[i])) return fputs(usage, stdout), PARSE_HELP;
    int rc = parse_option(command, accepted, argc, argv, &i, o);
    if (rc != CLI_OK) return rc;
  }
  if (o->url) return CLI_OK;
  fprintf(stderr, "kvik %s: no URL given (try 'kvik %s --help')\n", command, command);
  return CLI_USAGE;
}

static int open_remote(const char *command, const struct remote_options *o, kvik_remote **remote) {
  kvik_remote_options options;
  kvik_remote_options_init(&options);
  options.kind = o->kind;
  return kvik_remote_open(o->url, &options, remote) < 0 ? cli_fail(command) : CLI_OK;
}

/* ---- cat --------------------------------------------------------------------------------- */

struct cat {
  kvik_remote *remote; /* the source: a remote object, */
  kvik_file *file;     /* or a local file */
  const char *name;    /* the source, for messages */
  int fd;
  const char *output; /* for messages: the file's name, or "stdout" */
  unsigned char *buf[2];
  kvik_future *future[2];
};

static int cat_sys_fail(const char *what, int err) {
  fprintf(stderr, "kvik cat: %s: %s\n", what, strerror(err));
  return CLI_ERROR;
}

/* write(2) all of buf, retrying interrupted and short writes. 0 or an errno. */
static int write_all(int fd, const unsigned char *buf, size_t len) {
  while (len > 0) {
    ssize_t n = write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    buf += n, len -= (size_t)n;
  }
  return 0;
}

static int cat_start(struct cat *c, int slot, size_t len, uint64_t offset) {
  int rc =
      c->file
          ? kvik_file_pread(c->file, c->buf[slot], len, (int64_t)offset, 0, &c->future[slot])
          : kvik_remote_pread(c->remote, c->buf[slot], len, (int64_t)offset, 0, &c->future[slot]);
  return rc < 0 ? cli_fail("cat") : CLI_OK;
}

/* Wait for the chunk in `slot`, which must hold all `len` bytes: reads stop short only at the
 * end of the object, and the range was clipped to the size the object had at open. */
static int cat_wait(struct cat *c, int slot, size_t len, uint64_t offset) {
  ssize_t n = kvik_future_wait(c->future[slot]);
  if (n < 0) return cli_fail("cat");
  kvik_future_free(c->future[slot]);
  c->future[slot] = NULL;
  if ((size_t)n == len) return CLI_OK;
  fprintf(stderr, "kvik cat: %s: %zd of %zu bytes at offset %llu: did the %s shrink?\n", c->name, n,
          len, (unsigned long long)offset, c->file ? "file" : "object");
  return CLI_ERROR;
}

static size_t min_size(uint64_t a, uint64_t b) { return (size_t)(a < b ? a : b); }

/* Bytes [begin, end) in chunks, double-buffered: chunk i+1 is read into one buffer while chunk i
 * is written from the other, so the network and the output work at the same time. */
static int cat_copy(struct cat *c, uint64_t begin, uint64_t end) {
  size_t len = min_size(CAT_CHUNK, end - begin);
  if (len > 0 && cat_start(c, 0, len, begin) != CLI_OK) return CLI_ERROR;
  for (int slot = 0; begin < end; slot ^= 1) {
    if (cat_wait(c, slot, len, begin) != CLI_OK) return CLI_ERROR;
    size_t next = min_size(CAT_CHUNK, end - begin - len);
    if (next > 0 && cat_start(c, slot ^ 1, next, begin + len) != CLI_OK) return CLI_ERROR;
    int err = write_all(c->fd, c->buf[slot], len);
    if (err) return cat_sys_fail(c->output, err);
    begin += len;
    len = next;
  }
  return CLI_OK;
}

/* The output is opened only once the object is: a URL that fails leaves an existing FILE alone. */
static int cat_open_output(struct cat *c, const char *path) {
  if (!path) return CLI_OK;
  c->output = path;
  c->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  return c->fd < 0 ? cat_sys_fail(path, errno) : CLI_OK;
}

/* The range: [offset, offset + size) within the object, empty where it starts past the end. */
static void cat_range(const struct remote_options *o, int64_t object_size, uint64_t *begin,
                      uint64_t *end) {
  uint64_t total = (uint64_t)object_size;
  *begin = o->offset < total ? o->offset : total;
  *end = o->has_size && o->size < total - *begin ? *begin + o->size : total;
}

/* The local file that `url` names, or NULL for a remote object: a path without a scheme, or a
 * file:// URL (file:///PATH, file://localhost/PATH). */
static const char *local_path(const char *url) {
  static const char scheme[] = "file://";
  if (strncmp(url, scheme, sizeof scheme - 1) == 0) {
    const char *path = url + sizeof scheme - 1;
    return strncmp(path, "localhost/", 10) == 0 ? path + 9 : path;
  }
  return strstr(url, "://") ? NULL : url;
}

/* Open the source and learn its size. */
static int cat_open_source(struct cat *c, const struct remote_options *o, int64_t *size) {
  const char *path = local_path(o->url);
  c->name = path ? path : o->url;
  if (!path) {
    if (open_remote("cat", o, &c->remote) != CLI_OK) return CLI_ERROR;
    c->name = kvik_remote_url(c->remote);
    *size = kvik_remote_size(c->remote);
    return CLI_OK;
  }
  if (o->kind != KVIK_REMOTE_AUTO) {
    fprintf(stderr, "kvik cat: %s: --kind is for remote objects, and this is a local file\n", path);
    return CLI_USAGE;
  }
  if (kvik_file_open(path, "r", 0, &c->file) < 0 || (*size = kvik_file_size(c->file)) < 0)
    return cli_fail("cat");
  return CLI_OK;
}

static int cat_run(struct cat *c, const struct remote_options *o) {
  int64_t size = 0;
  int rc = cat_open_source(c, o, &size);
  if (rc != CLI_OK) return rc;
  uint64_t begin, end;
  cat_range(o, size, &begin, &end);
  if (cat_open_output(c, o->output) != CLI_OK) return CLI_ERROR;
  size_t chunk = min_size(CAT_CHUNK, end - begin);
  for (int i = 0; i < 2 && chunk > 0; i++)
    if (!(c->buf[i] = malloc(chunk))) return cat_sys_fail("buffer", ENOMEM);
  return cat_copy(c, begin, end);
}

/* Freeing a future waits for its read, so the buffers are free to go after. A close that fails
 * may mean data never reached the file. */
static int cat_cleanup(struct cat *c, int rc) {
  for (int i = 0; i < 2; i++) kvik_future_free(c->future[i]);
  for (int i = 0; i < 2; i++) free(c->buf[i]);
  kvik_remote_free(c->remote);
  kvik_file_free(c->file);
  if (c->fd != STDOUT_FILENO && close(c->fd) < 0 && rc == CLI_OK)
    rc = cat_sys_fail(c->output, errno);
  return rc;
}

int cli_cat(int argc, char **argv) {
  struct remote_options o;
  int rc = parse_args("cat", cat_usage, CAT_OPTIONS, argc, argv, &o);
  if (rc != CLI_OK) return rc == PARSE_HELP ? CLI_OK : rc;
  struct cat c = {.fd = STDOUT_FILENO, .output = "stdout"};
  return cat_cleanup(&c, cat_run(&c, &o));
}

/* ---- bench URL --------------------------------------------------------------------------- */

enum memory { HOST, DEVICE, MEMORIES };
static const char *const memory_names[MEMORIES] = {"host", "device"};

enum curl_state { CURL_OFF, CURL_ON, CURL_MISSING, CURL_CANNOT };

struct remote_bench {
  struct bench
      b; /* opt.size: the bytes each run reads; buf: the host buffer; for bench.c's helpers */
  const struct remote_options *o;
  kvik_remote *remote;
  size_t task_size;
  void *device;
  const char *curl_url; /* what curl fetches: the same bytes as kvik */
  enum curl_state curl;
  const char *curl_why; /* CURL_CANNOT: why not */
  double *rates;        /* GB/s by [row][memory][repetition] */
  double *cpus;         /* CPU seconds (user + system) per GB, the same way */
  double *curl_rates;   /* GB/s by repetition */
  double *curl_cpus;    /* curl's CPU seconds per GB by repetition */
};

static int memories(const struct remote_bench *rb) { return rb->b.opt.device ? MEMORIES : 1; }

/* The first of a row's runs into memory m, in `samples` (rates or cpus). */
static double *sample_at(const struct remote_bench *rb, double *samples, int row, int m) {
  return samples + ((size_t)row * MEMORIES + (size_t)m) * (size_t)rb->b.opt.repeat;
}

/* One read of the bytes into buf, timed from the start of the request to the end of the wait,
 * with the CPU time every thread of the process spent meanwhile. */
static int timed_read(struct remote_bench *rb, void *buf, double *rate, double *cpu) {
  kvik_future *f;
  double gb = (double)rb->b.opt.size / 1e9, cpu_start = bench_cpu_seconds(0), start = bench_now();
  if (kvik_remote_pread(rb->remote, buf, rb->b.opt.size, 0, rb->task_size, &f) < 0)
    return bench_kvik_fail();
  ssize_t n = kvik_future_wait(f);
  *rate = gb / (bench_now() - start);
  *cpu = (bench_cpu_seconds(0) - cpu_start) / gb;
  int rc = bench_check_count(&rb->b, n, "kvik_remote_pread"); /* before the next kvik call */
  kvik_future_free(f);
  return rc;
}

/* One row's runs of one repetition, with kvik's num_threads = T. */
static int measure_row(struct remote_bench *rb, int row, int rep) {
  int nthreads = rb->b.opt.counts[row];
  if (kvik_setting_set(KVIK_SETTING_NUM_THREADS, nthreads) < 0) return bench_kvik_fail();
  void *bufs[MEMORIES] = {rb->b.buf, rb->device};
  for (int m = 0; m < memories(rb); m++) {
    bench_progress(0, memory_names[m], nthreads, rep + 1, rb->b.opt.repeat);
    double *rate = &sample_at(rb, rb->rates, row, m)[rep],
           *cpu = &sample_at(rb, rb->cpus, row, m)[rep];
    if (timed_read(rb, bufs[m], rate, cpu) != CLI_OK) return CLI_ERROR;
  }
  return CLI_OK;
}

/* posix_spawn, not fork: no copy of the page tables of the buffers, nor kvik's fork handlers,
 * inside the timed region. */
static int curl_spawn(struct remote_bench *rb, const char *range, pid_t *pid) {
  const char *argv[] = {"curl", "-sSf", "-o", "/dev/null", "-r", range, rb->curl_url, NULL};
  int err = posix_spawnp(pid, "curl", NULL, NULL, (char *const *)argv, environ);
  if (err == ENOENT) rb->curl = CURL_MISSING;
  return err == ENOENT ? CLI_OK : err ? bench_sys_fail("curl", -err) : CLI_OK;
}

static int curl_wait(const struct remote_bench *rb, pid_t pid, const char *range) {
  int status;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return bench_sys_fail("waitpid", -errno);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return CLI_OK;
  bench_progress_clear();
  fprintf(stderr, "kvik bench: curl -sSf -o /dev/null -r %s %s: %s %d\n", range,
          kvik_remote_url(rb->remote), WIFEXITED(status) ? "exit status" : "killed by signal",
          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  return CLI_ERROR;
}

/* One curl run of the repetition, timed from its start to its exit as a user would see it; its
 * CPU time is counted once it has been waited for. */
static int measure_curl(struct remote_bench *rb, int rep) {
  if (rb->curl != CURL_ON) return CLI_OK;
  char range[48];
  snprintf(range, sizeof range, "0-%zu", rb->b.opt.size - 1);
  bench_progress(0, "curl", 1, rep + 1, rb->b.opt.repeat);
  pid_t pid;
  double gb = (double)rb->b.opt.size / 1e9, cpu_start = bench_cpu_seconds(1), start = bench_now();
  if (curl_spawn(rb, range, &pid) != CLI_OK) return CLI_ERROR;
  if (rb->curl != CURL_ON) return CLI_OK;
  int rc = curl_wait(rb, pid, range);
  rb->curl_rates[rep] = gb / (bench_now() - start);
  rb->curl_cpus[rep] = (bench_cpu_seconds(1) - cpu_start) / gb;
  return rc;
}

/* Repetitions outermost, so that a drifting link or a noisy neighbour hits every row alike. */
static int measure(struct remote_bench *rb) {
  for (int rep = 0; rep < rb->b.opt.repeat; rep++) {
    if (measure_curl(rb, rep) != CLI_OK) return CLI_ERROR;
    for (int row = 0; row < rb->b.opt.ncounts; row++)
      if (measure_row(rb, row, rep) != CLI_OK) return CLI_ERROR;
  }
  return CLI_OK;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts v. */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, compare_doubles);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Columns are as wide as their headers, at least 7, as in `kvik bench`. */
static int width(const char *header) { return strlen(header) > 7 ? (int)strlen(header) : 7; }

static void print_row(struct remote_bench *rb, int row, double curl) {
  char label[32];
  int nthreads = rb->b.opt.counts[row];
  snprintf(label, sizeof label, "%d%s", nthreads,
           nthreads == rb->b.default_threads ? " (default)" : "");
  printf("%-12s", label);
  double rates[MEMORIES];
  for (int m = 0; m < memories(rb); m++) {
    rates[m] = median(sample_at(rb, rb->rates, row, m), rb->b.opt.repeat);
    printf("  %*.2f", width(memory_names[m]), rates[m]);
  }
  if (rb->curl == CURL_ON) printf("  %*.2fx", width("vs curl") - 1, rates[HOST] / curl);
  printf("  | %9s", "");
  for (int m = 0; m < memories(rb); m++)
    printf("  %*.3f", width(memory_names[m]),
           median(sample_at(rb, rb->cpus, row, m), rb->b.opt.repeat));
  printf("\n");
}

static void print_results(struct remote_bench *rb) {
  int repeat = rb->b.opt.repeat;
  double curl = rb->curl == CURL_ON ? median(rb->curl_rates, repeat) : 0;
  bench_progress_clear();
  if (rb->curl == CURL_ON)
    printf("curl -o /dev/null (one connection): %.2f GB/s, %.3f CPU s/GB (medians of %d)\n", curl,
           median(rb->curl_cpus, repeat), repeat);
  if (rb->curl == CURL_MISSING) printf("curl: not found on PATH: no 'vs curl' column\n");
  if (rb->curl == CURL_CANNOT) printf("curl: not measured: %s\n", rb->curl_why);
  printf("\nREAD: remote object -> memory (GB/s, median of %d; then the CPU seconds per GB, user + "
         "system, "
         "median)\n%-12s",
         repeat, "threads T");
  for (int m = 0; m < memories(rb); m++) printf("  %*s", width(memory_names[m]), memory_names[m]);
  if (rb->curl == CURL_ON) printf("  %*s", width("vs curl"), "vs curl");
  printf("  | CPU s/GB:");
  for (int m = 0; m < memories(rb); m++) printf("  %*s", width(memory_names[m]), memory_names[m]);
  printf("\n");
  for (int row = 0; row < rb->b.opt.ncounts; row++) print_row(rb, row, curl);
}

/* curl fetches the URL as given (a presigned URL needs its query), or for public S3 the URL kvik
 * resolved from s3://; it cannot sign S3 requests nor speak WebHDFS's protocol. */
static void choose_curl(struct remote_bench *rb) {
  int kind = kvik_remote_kind_of(rb->remote);
  rb->curl = rb->o->curl ? CURL_ON : CURL_OFF;
  if (kind == KVIK_REMOTE_HTTP || kind == KVIK_REMOTE_S3_PRESIGNED) rb->curl_url = rb->o->url;
  else if (kind == KVIK_REMOTE_S3_PUBLIC) rb->curl_url = kvik_remote_url(rb->remote);
  if (rb->curl == CURL_ON && !rb->curl_url) rb->curl = CURL_CANNOT;
  rb->curl_why =
      kind == KVIK_REMOTE_WEBHDFS ? "it does not speak WebHDFS" : "it cannot sign S3 requests";
}

/* The bytes to read, the task size and the thread counts; a line that says what is measured. */
static int describe(struct remote_bench *rb) {
  struct options *opt = &rb->b.opt;
  int64_t total = kvik_remote_size(rb->remote), task = (int64_t)rb->o->task_size, conns;
  opt->size = rb->o->has_size && rb->o->size < (uint64_t)total ? rb->o->size : (size_t)total;
  if (opt->size == 0)
    return fprintf(stderr, "kvik bench: %s: no bytes to read\n", kvik_remote_url(rb->remote)),
           CLI_ERROR;
  if ((!task && kvik_setting_get(KVIK_SETTING_TASK_SIZE, &task) < 0) ||
      kvik_setting_get(KVIK_SETTING_NUM_THREADS, &rb->b.default_threads) < 0 ||
      kvik_setting_get(KVIK_SETTING_REMOTE_CONNECTIONS, &conns) < 0)
    return cli_fail("bench");
  rb->task_size = (size_t)task;
  if (opt->ncounts == 0) bench_default_counts(opt, (int)rb->b.default_threads);
  printf("kvik bench: %s (%s), %zu of %lld bytes (%.2f GiB) in requests of %zu bytes\n",
         kvik_remote_url(rb->remote), kind_names[kvik_remote_kind_of(rb->remote)], opt->size,
         (long long)total, (double)opt->size / (1 << 30), rb->task_size);
  printf("kvik bench: %ld online CPUs, kvik default num_threads %lld, remote_connections %lld\n",
         sysconf(_SC_NPROCESSORS_ONLN), (long long)rb->b.default_threads, (long long)conns);
  return CLI_OK;
}

/* The buffers, allocated once; writing the host buffer faults in its pages before any run. */
static int allocate(struct remote_bench *rb) {
  void *buf;
  int err = posix_memalign(&buf, 4096, rb->b.opt.size);
  if (err) return bench_sys_fail("host buffer", -err);
  rb->b.buf = buf;
  memset(rb->b.buf, 0, rb->b.opt.size);
  size_t repeat = (size_t)rb->b.opt.repeat;
  size_t samples = (size_t)rb->b.opt.ncounts * MEMORIES * repeat;
  rb->rates = calloc(samples, sizeof *rb->rates);
  rb->cpus = calloc(samples, sizeof *rb->cpus);
  rb->curl_rates = calloc(repeat, sizeof *rb->curl_rates);
  rb->curl_cpus = calloc(repeat, sizeof *rb->curl_cpus);
  if (!rb->rates || !rb->cpus || !rb->curl_rates || !rb->curl_cpus)
    return bench_sys_fail("buffer", -ENOMEM);
  if (!rb->b.opt.device) return CLI_OK;
  if (bench_cuda_init() != CLI_OK) return CLI_ERROR;
  return bench_cuda_alloc(rb->b.opt.size, &rb->device);
}

static int bench_run(struct remote_bench *rb) {
  if (open_remote("bench", rb->o, &rb->remote) != CLI_OK || describe(rb) != CLI_OK)
    return CLI_ERROR;
  choose_curl(rb);
  fflush(stdout); /* the measurement takes a while: show what it measures first */
  if (allocate(rb) != CLI_OK || measure(rb) != CLI_OK) return CLI_ERROR;
  print_results(rb);
  return CLI_OK;
}

static int bench_cleanup(struct remote_bench *rb, int rc) {
  bench_progress_clear();
  bench_cuda_free(rb->device);
  free(rb->b.buf);
  free(rb->rates);
  free(rb->cpus);
  free(rb->curl_rates);
  free(rb->curl_cpus);
  kvik_remote_free(rb->remote);
  if (rb->b.default_threads > 0 &&
      kvik_setting_set(KVIK_SETTING_NUM_THREADS, rb->b.default_threads) < 0)
    return cli_fail("bench");
  return rc;
}

int cli_bench_remote(int argc, char **argv) {
  struct remote_options o;
  int rc = parse_args("bench", bench_usage, BENCH_OPTIONS, argc, argv, &o);
  if (rc != CLI_OK) return rc == PARSE_HELP ? CLI_OK : rc;
  struct remote_bench rb = {.b = {.opt = o.bench, .fd = -1}, .o = &o};
  bench_progress_init();
  return bench_cleanup(&rb, bench_run(&rb));
}
