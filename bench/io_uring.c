/* What kvik's io_uring batch backend gives, next to pread(2) and kvik's thread pool.
 *
 * Creates a test file of --size bytes in DIR, then prints three tables:
 *
 *  0. Issue 29's targets for a batch of 4 KiB reads from the page cache, at kvik's default
 *     settings: at each queue depth (1, 2, 4, 8, 32, 128) the batch's reads per second and CPU
 *     microseconds per read next to a pread(2) loop on one thread that reads the same offsets
 *     into the same buffers (one per operation in flight), the ratio, and whether it meets
 *     0.9x (the ratio of CPU time per read beside it, steadier where other work shares the
 *     machine; the target is the first); a preadv2(RWF_NOWAIT) loop on the depth-1 offsets next
 *     to the pread loop, the system call of kvik's tries until the batch trusts the page
 *     cache: the best such a batch can do on this kernel; then at depth 32 against fio
 *     --ioengine=io_uring --iodepth=32 (its own IOPS and CPU,
 *     from its terse report; "n/a" where fio cannot run), whether it meets 1.2x. Each row is the
 *     best of --repeat measurements, batch and pread taking turns. A target missed says
 *     "missed". --targets prints this table alone.
 *     --only-batch DEPTH and --only-pread DEPTH time one of its rows alone, --repeat times, each
 *     on fresh offsets, and print nothing else: a process to profile (perf record, valgrind
 *     --tool=callgrind --toggle-collect=batch_list or pread_list: instructions per read).
 *
 *  1. 4 KiB random reads into host memory, reads per second and CPU microseconds per read:
 *     plain pread on 1 and on CPU-count threads, a kvik batch served by the thread pool
 *     (KVIK_SETTING_IO_URING off) and one served by io_uring (on), at several queue depths. Once
 *     from the page cache, once with O_DIRECT (from the device, --reads / 10 reads per row).
 *     With --device, the same reads into GPU memory (the CUDA driver loaded with dlopen): the
 *     pool's bounce buffers against io_uring through the batch's staging arena; and what the
 *     first device operation of a new batch costs (setting up and registering the arena).
 *  2. A sequential read of the whole file into one host buffer, GB/s and CPU seconds per GB,
 *     best of --repeat, the rows taking turns: pread, kvik_file_read, kvik batches of 4 MiB
 *     operations through io_uring, and dd iflag=direct. Once cold (page cache dropped before
 *     each measurement), once from the page cache.
 *
 * CPU is user + system time of the whole process (all threads; for dd, of the child) from
 * getrusage around each measurement. Every read's byte count is checked; the file is removed at
 * the end.
 *
 * usage: bench_io_uring DIR [--size BYTES] [--reads N] [--repeat R] [--device] [--targets]
 *                       [--only-batch DEPTH | --only-pread DEPTH]
 *        (defaults: 4G, 200000, 3; sizes take a K, M or G suffix) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvik.h"
#include "clock.h"


extern char **environ;

#define MiB ((size_t)1 << 20)
#define PAGE ((size_t)4096)       /* random read size, and O_DIRECT's alignment */
#define SEQ_OP (4 * MiB)          /* operation size of the sequential reads */
#define WRITE_CHUNK (64 * MiB)    /* the test file is written in pieces of this size */
#define NAME_LEN 64
#define WHY_LEN 200

/* ---- failing ------------------------------------------------------------------------------- */

static char file_path[4096]; /* the test file, once created: removed at exit, also after errors */

static void remove_file(void) {
  if (file_path[0]) unlink(file_path);
}

static void die_kvik(const char *what, long long code) {
  fprintf(stderr, "bench_io_uring: %s failed (%lld, %s): %s\n", what, code, kvik_err_name((int)code),
          kvik_last_error());
  exit(1);
}

static void die_errno(const char *what) {
  fprintf(stderr, "bench_io_uring: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void *aligned_or_die(size_t size) {
  void *p;
  if (posix_memalign(&p, PAGE, size) != 0) {
    fprintf(stderr, "bench_io_uring: cannot allocate %zu bytes\n", size);
    exit(1);
  }
  return p;
}

/* GPU memory for --device: the first call loads the driver and makes device 0's primary context
 * current on this thread, which is the one that submits every batch. */
static char *device_alloc_or_die(size_t size) {
  static int (*mem_alloc)(unsigned long long *, size_t);
  if (!mem_alloc) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    int (*init)(unsigned) = h ? (int (*)(unsigned))dlsym(h, "cuInit") : NULL;
    int (*device_get)(int *, int) = h ? (int (*)(int *, int))dlsym(h, "cuDeviceGet") : NULL;
    int (*retain)(void **, int) = h ? (int (*)(void **, int))dlsym(h, "cuDevicePrimaryCtxRetain") : NULL;
    int (*set_current)(void *) = h ? (int (*)(void *))dlsym(h, "cuCtxSetCurrent") : NULL;
    mem_alloc = h ? (int (*)(unsigned long long *, size_t))dlsym(h, "cuMemAlloc_v2") : NULL;
    int device;
    void *ctx;
    if (!init || !device_get || !retain || !set_current || !mem_alloc || init(0) != 0 || device_get(&device, 0) != 0 ||
        retain(&ctx, device) != 0 || set_current(ctx) != 0) {
      fprintf(stderr, "bench_io_uring: --device needs a CUDA driver and a GPU\n");
      exit(1);
    }
  }
  unsigned long long ptr;
  if (mem_alloc(&ptr, size) != 0) {
    fprintf(stderr, "bench_io_uring: cuMemAlloc of %zu bytes failed\n", size);
    exit(1);
  }
  return (char *)(uintptr_t)ptr; /* never freed: the process ends soon after */
}

/* ---- measuring ----------------------------------------------------------------------------- */

struct cost {
  double seconds, cpu;
};

struct meter {
  int who;
  double t0, cpu0;
};

static struct meter meter_start(int who) { return (struct meter){who, now(), cpu_seconds(who)}; }

static struct cost meter_stop(struct meter m) { return (struct cost){now() - m.t0, cpu_seconds(m.who) - m.cpu0}; }

/* ---- random offsets ------------------------------------------------------------------------ */

static uint64_t splitmix(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15u);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

static uint64_t seed_source; /* set from the clock: a new run reads other offsets too */
static uint64_t pages;       /* aligned places a random read may start at */

/* Each measurement (each thread of one) reads offsets of its own, so that no cache below kvik
 * (a disk's, a virtual machine host's) serves one row with what an earlier row read. */
static uint64_t fresh_seed(void) { return splitmix(&seed_source); }

static int64_t random_offset(uint64_t *state) { return (int64_t)(splitmix(state) % pages * PAGE); }

/* ---- kvik settings ------------------------------------------------------------------------- */

/* What a row changes: KVIK_SETTING_IO_URING, KVIK_SETTING_GDS_THRESHOLD, AUTO_DIRECT_IO_READ. */
struct mode {
  int64_t uring, threshold, direct;
};

static struct mode defaults; /* as found at start (environment variables count) */

static void set_or_die(kvik_setting s, int64_t value) {
  int rc = kvik_setting_set(s, value);
  if (rc < 0) die_kvik("kvik_setting_set", rc);
}

static void apply(struct mode m) {
  set_or_die(KVIK_SETTING_IO_URING, m.uring);
  set_or_die(KVIK_SETTING_GDS_THRESHOLD, m.threshold);
  set_or_die(KVIK_SETTING_AUTO_DIRECT_IO_READ, m.direct);
}

static int64_t get_or_die(kvik_setting s) {
  int64_t v;
  int rc = kvik_setting_get(s, &v);
  if (rc < 0) die_kvik("kvik_setting_get", rc);
  return v;
}

/* ---- the test file ------------------------------------------------------------------------- */

static void write_all(int fd, const char *buf, size_t size, off_t offset) {
  while (size > 0) {
    ssize_t n = pwrite(fd, buf, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) die_errno("writing the test file");
    buf += n, size -= (size_t)n, offset += n;
  }
}

/* Random-ish bytes, so that no file system or device can compress or skip them. */
static void create_file(const char *path, uint64_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) die_errno(path);
  snprintf(file_path, sizeof file_path, "%s", path);
  uint64_t *chunk = aligned_or_die(WRITE_CHUNK), state = 42;
  for (uint64_t offset = 0; offset < size; offset += WRITE_CHUNK) {
    size_t n = size - offset < WRITE_CHUNK ? (size_t)(size - offset) : WRITE_CHUNK;
    for (size_t i = 0; i < n / sizeof *chunk; i++) chunk[i] = splitmix(&state);
    write_all(fd, (const char *)chunk, n, (off_t)offset);
  }
  if (fsync(fd) != 0) die_errno("fsync of the test file");
  close(fd);
  free(chunk);
}

static void check_read(ssize_t got, size_t want, int64_t offset, const char *how) {
  if (got == (ssize_t)want) return;
  if (got < 0) fprintf(stderr, "bench_io_uring: %s at %" PRId64 ": %s\n", how, offset, strerror(errno));
  else fprintf(stderr, "bench_io_uring: %s at %" PRId64 ": %zd bytes, not %zu\n", how, offset, got, want);
  exit(1);
}

/* Read the whole file with buffered preads of 4 MiB into `buf` (NULL: a scratch buffer). Used to
 * bring it into the page cache, and as the pread row of the sequential table. */
static void pread_whole(const char *path, char *buf, uint64_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die_errno(path);
  char *scratch = buf ? NULL : aligned_or_die(SEQ_OP);
  for (uint64_t offset = 0; offset < size; offset += SEQ_OP) {
    size_t n = size - offset < SEQ_OP ? (size_t)(size - offset) : SEQ_OP;
    check_read(pread(fd, buf ? buf + offset : scratch, n, (off_t)offset), n, (int64_t)offset, "pread");
  }
  free(scratch);
  close(fd);
}

/* NULL when the file opens and reads with O_DIRECT; else why not, in `why`. kvik itself falls
 * back to buffered IO where O_DIRECT is refused, so its O_DIRECT rows would then measure the page
 * cache under a wrong name: they are left out instead. */
static const char *direct_refusal(const char *path, char *why, size_t len) {
  int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return snprintf(why, len, "open: %s", strerror(errno)), why;
  void *buf = aligned_or_die(PAGE);
  ssize_t n = pread(fd, buf, PAGE, 0);
  int err = errno;
  free(buf);
  close(fd);
  if (n == (ssize_t)PAGE) return NULL;
  if (n < 0) snprintf(why, len, "pread: %s", strerror(err));
  else snprintf(why, len, "pread read %zd bytes", n);
  return why;
}

static kvik_file *open_kvik(const char *path) {
  kvik_file *f;
  int rc = kvik_file_open(path, "r", 0, &f);
  if (rc < 0) die_kvik("kvik_file_open", rc);
  return f;
}

/* ---- rows and their results ---------------------------------------------------------------- */

struct row {
  char name[NAME_LEN];
  int kind;      /* which measurement: an enum of the table */
  unsigned arg;  /* threads or queue depth */
  struct mode m; /* kvik settings during the row */
  char na[WHY_LEN]; /* not measured: why ("" when measured) */
  double amount;    /* reads (table 1) or bytes (table 2) */
  struct cost cost;
};

static double rate(const struct row *r) { return r->amount / r->cost.seconds; }

static void not_available(struct row *r, const char *why, const char *detail) {
  snprintf(r->na, sizeof r->na, "n/a (%s%s)", why, detail);
}

/* ---- kvik batches: keep `depth` operations in flight ---------------------------------------- */

/* Fills in operation number `index` for buffer slot `slot` (each slot has a buffer of its own). */
typedef void make_op_fn(void *ctx, uint64_t index, unsigned slot, kvik_batch_op *op);

struct pipeline {
  kvik_batch *batch;
  unsigned depth;
  kvik_batch_op *ops, *in_slot; /* ops being submitted; the op in flight in each slot */
  kvik_batch_event *events;
};

static struct pipeline pipeline_create(unsigned depth) {
  struct pipeline p = {NULL, depth, calloc(depth, sizeof(kvik_batch_op)), calloc(depth, sizeof(kvik_batch_op)),
                       calloc(depth, sizeof(kvik_batch_event))};
  if (!p.ops || !p.in_slot || !p.events) die_errno("calloc");
  int rc = kvik_batch_create(depth, &p.batch);
  if (rc < 0) die_kvik("kvik_batch_create", rc);
  return p;
}

static void pipeline_free(struct pipeline *p) {
  kvik_batch_free(p->batch);
  free(p->ops);
  free(p->in_slot);
  free(p->events);
}

static void submit(struct pipeline *p, unsigned count) {
  int rc = kvik_batch_submit(p->batch, p->ops, count);
  if (rc < 0) die_kvik("kvik_batch_submit", rc);
}

/* Queue operation `index` into slot `slot` of the next submission, as the count-th there. */
static void queue(struct pipeline *p, make_op_fn *make, void *ctx, uint64_t index, unsigned slot, unsigned count) {
  kvik_batch_op *op = &p->ops[count];
  make(ctx, index, slot, op);
  op->cookie = (void *)(uintptr_t)slot;
  p->in_slot[slot] = *op;
}

/* A completion must be the whole operation. Returns its slot. */
static unsigned check_event(const struct pipeline *p, const kvik_batch_event *ev) {
  unsigned slot = (unsigned)(uintptr_t)ev->cookie;
  const kvik_batch_op *op = &p->in_slot[slot];
  if (ev->status == KVIK_BATCH_COMPLETE && ev->result == (ssize_t)op->size) return slot;
  fprintf(stderr, "bench_io_uring: batch read of %zu bytes at %" PRId64 ": status %d, result %zd (%s)\n", op->size,
          op->file_offset, (int)ev->status, ev->result, ev->result < 0 ? kvik_strerror((int)ev->result) : "short");
  exit(1);
}

/* Run `total` operations with `depth` in flight: submit `depth`, then one new operation for each
 * completion, submitted together after each wait. */
static void pipeline_run(struct pipeline *p, make_op_fn *make, void *ctx, uint64_t total) {
  uint64_t issued = 0, done = 0;
  unsigned count = 0;
  for (; issued < p->depth && issued < total; issued++) queue(p, make, ctx, issued, (unsigned)issued, count++);
  submit(p, count);
  while (done < total) {
    int got = kvik_batch_wait(p->batch, 1, p->events, p->depth, -1);
    if (got < 0) die_kvik("kvik_batch_wait", got);
    count = 0;
    for (int i = 0; i < got; i++) {
      unsigned slot = check_event(p, &p->events[i]);
      done++;
      if (issued < total) queue(p, make, ctx, issued++, slot, count++);
    }
    if (count > 0) submit(p, count);
  }
}

/* One read of the first page into `page` before the clock starts, so that the ring's setup, the
 * opening of the O_DIRECT descriptor and the waking of the pool are not timed. */
static void pipeline_warm_up(struct pipeline *p, kvik_file *f, char *page) {
  p->ops[0] = (kvik_batch_op){f, KVIK_BATCH_READ, page, PAGE, 0, (void *)(uintptr_t)0};
  p->in_slot[0] = p->ops[0];
  submit(p, 1);
  int got = kvik_batch_wait(p->batch, 1, p->events, 1, -1);
  if (got != 1) die_kvik("kvik_batch_wait", got);
  check_event(p, &p->events[0]);
}

/* ---- table 1: 4 KiB random reads ----------------------------------------------------------- */

enum { PREAD_THREADS, BATCH };

struct random_ctx {
  kvik_file *file;
  char *bufs; /* one posix_memalign block: each slot its own aligned PAGE of it */
  uint64_t seed;
};

static void random_op(void *ctx, uint64_t index, unsigned slot, kvik_batch_op *op) {
  struct random_ctx *c = ctx;
  (void)index;
  *op = (kvik_batch_op){c->file, KVIK_BATCH_READ, c->bufs + (size_t)slot * PAGE, PAGE, random_offset(&c->seed), NULL};
}

static struct cost batch_random(kvik_file *f, unsigned depth, uint64_t reads, int device) {
  struct pipeline p = pipeline_create(depth);
  struct random_ctx c = {f, device ? device_alloc_or_die(depth * PAGE) : aligned_or_die(depth * PAGE), fresh_seed()};
  pipeline_warm_up(&p, f, c.bufs);
  struct meter m = meter_start(RUSAGE_SELF);
  pipeline_run(&p, random_op, &c, reads);
  struct cost cost = meter_stop(m);
  pipeline_free(&p);
  if (!device) free(c.bufs);
  return cost;
}

struct preader {
  int fd;
  uint64_t reads, seed;
  pthread_t thread;
};

static void *preader_main(void *arg) {
  struct preader *p = arg;
  char *buf = aligned_or_die(PAGE); /* aligned: the same loop serves O_DIRECT descriptors */
  for (uint64_t i = 0; i < p->reads; i++) {
    int64_t offset = random_offset(&p->seed);
    check_read(pread(p->fd, buf, PAGE, (off_t)offset), PAGE, offset, "pread");
  }
  free(buf);
  return NULL;
}

/* Each of `threads` threads does reads / threads reads; *done says how many that makes. */
static struct cost pread_random(int fd, unsigned threads, uint64_t reads, uint64_t *done) {
  struct preader *p = calloc(threads, sizeof *p);
  if (!p) die_errno("calloc");
  for (unsigned t = 0; t < threads; t++) p[t] = (struct preader){fd, reads / threads, fresh_seed(), 0};
  struct meter m = meter_start(RUSAGE_SELF);
  for (unsigned t = 0; t < threads; t++) {
    errno = pthread_create(&p[t].thread, NULL, preader_main, &p[t]);
    if (errno != 0) die_errno("pthread_create");
  }
  for (unsigned t = 0; t < threads; t++) pthread_join(p[t].thread, NULL);
  struct cost cost = meter_stop(m);
  *done = reads / threads * threads;
  free(p);
  return cost;
}

static unsigned random_rows(struct row *rows, unsigned cpus, int direct) {
  const unsigned depths[] = {1, 32, 128};
  unsigned n = 0;
  rows[n++] = (struct row){"pread, 1 thread", PREAD_THREADS, 1, defaults, "", 0, {0, 0}};
  rows[n] = (struct row){"", PREAD_THREADS, cpus, defaults, "", 0, {0, 0}};
  snprintf(rows[n++].name, NAME_LEN, "pread, %u threads", cpus);
  /* A threshold of 0 sends the pool's operations to its threads, which run them side by side;
   * at the default (1 MiB) they run one after another within kvik_batch_submit. */
  for (size_t i = 0; i < sizeof depths / sizeof *depths; i++) {
    rows[n] = (struct row){"", BATCH, depths[i], {KVIK_OFF, 0, direct}, "", 0, {0, 0}};
    snprintf(rows[n++].name, NAME_LEN, "kvik batch, pool threads, depth %u", depths[i]);
  }
  rows[n++] = (struct row){"kvik batch, pool inline, depth 32", BATCH, 32, {KVIK_OFF, defaults.threshold, direct},
                           "", 0, {0, 0}};
  for (size_t i = 0; i < sizeof depths / sizeof *depths; i++) {
    rows[n] = (struct row){"", BATCH, depths[i], {KVIK_ON, defaults.threshold, direct}, "", 0, {0, 0}};
    snprintf(rows[n++].name, NAME_LEN, "kvik batch, io_uring, depth %u", depths[i]);
  }
  return n;
}

static int is_pool(const struct row *r) { return r->kind == BATCH && r->m.uring == KVIK_OFF; }
static int is_uring(const struct row *r) { return r->kind == BATCH && r->m.uring == KVIK_ON; }

static double best_rate(const struct row *rows, unsigned n, int (*which)(const struct row *)) {
  double best = 0;
  for (unsigned i = 0; i < n; i++)
    if (!rows[i].na[0] && which(&rows[i]) && rate(&rows[i]) > best) best = rate(&rows[i]);
  return best;
}

static int is_pread(const struct row *r) { return r->kind == PREAD_THREADS; }

static void print_ratio(double mine, double best) {
  if (best > 0) printf("  %12.2fx", mine / best);
  else printf("  %13s", "-");
}

static void print_random(const char *title, struct row *rows, unsigned n, uint64_t reads) {
  printf("\n4 KiB random reads, %s: %" PRIu64 " reads per row, each row at fresh offsets\n", title, reads);
  printf("  %-38s %12s %12s %14s %14s\n", "method", "reads/s", "CPU us/read", "vs best pread", "vs best pool");
  double pread_best = best_rate(rows, n, is_pread), pool_best = best_rate(rows, n, is_pool);
  for (unsigned i = 0; i < n; i++) {
    const struct row *r = &rows[i];
    if (r->na[0]) {
      printf("  %-38s %s\n", r->name, r->na);
      continue;
    }
    printf("  %-38s %12.0f %12.2f", r->name, rate(r), r->cost.cpu / r->amount * 1e6);
    if (is_uring(r)) print_ratio(rate(r), pread_best), print_ratio(rate(r), pool_best);
    printf("\n");
  }
}

/* Table 1 for one state of the file: `direct` says whether the reads use O_DIRECT, `device`
 * whether they go to GPU memory (where pread has no row: it cannot read into it). */
static void table_random(const char *path, const char *title, int direct, int device, const char *refused,
                         int uring_ok, unsigned cpus, uint64_t reads) {
  struct row rows[16];
  unsigned n = random_rows(rows, cpus, direct);
  int fd = open(path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0 && !refused) die_errno(path);
  kvik_file *f = open_kvik(path);
  for (unsigned i = 0; i < n; i++) {
    struct row *r = &rows[i];
    if (refused) not_available(r, "O_DIRECT refused: ", refused);
    else if (is_uring(r) && !uring_ok) not_available(r, "io_uring unavailable", "");
    else if (device && is_pread(r)) not_available(r, "pread cannot read into GPU memory", "");
    if (r->na[0]) continue;
    apply(r->m);
    r->amount = (double)reads;
    if (r->kind == PREAD_THREADS) {
      uint64_t done;
      r->cost = pread_random(fd, r->arg, reads, &done);
      r->amount = (double)done;
    } else {
      r->cost = batch_random(f, r->arg, reads, device);
    }
  }
  apply(defaults);
  kvik_file_free(f);
  if (fd >= 0) close(fd);
  print_random(title, rows, n, reads);
}

/* ---- table 0: issue 29's targets ---------------------------------------------------------- */

#define TARGET_VS_PREAD 0.9 /* a batch at any depth against a pread loop on one thread */
#define TARGET_VS_FIO 1.2   /* a batch at depth 32 against fio's io_uring at depth 32 */
#define FIO_DEPTH 32

struct list_ctx {
  kvik_file *file;
  char *bufs; /* one PAGE per slot */
  const int64_t *offsets;
};

static void list_op(void *ctx, uint64_t index, unsigned slot, kvik_batch_op *op) {
  struct list_ctx *c = ctx;
  *op = (kvik_batch_op){c->file, KVIK_BATCH_READ,   c->bufs + (size_t)slot * PAGE,
                        PAGE,    c->offsets[index], NULL};
}

static struct cost batch_list(kvik_file *f, unsigned depth, const int64_t *offsets,
                              uint64_t reads, char *bufs) {
  struct pipeline p = pipeline_create(depth);
  struct list_ctx c = {f, bufs, offsets};
  pipeline_warm_up(&p, f, c.bufs);
  struct meter m = meter_start(RUSAGE_SELF);
  pipeline_run(&p, list_op, &c, reads);
  struct cost cost = meter_stop(m);
  pipeline_free(&p);
  return cost;
}

/* Read i into buffer i % depth, as the batch at that depth rotates through its buffers (each
 * operation in flight has its own): the same copies, into memory as warm. */
static struct cost pread_list(int fd, const int64_t *offsets, uint64_t reads, unsigned depth,
                              char *bufs) {
  struct meter m = meter_start(RUSAGE_SELF);
  for (uint64_t i = 0; i < reads; i++)
    check_read(pread(fd, bufs + i % depth * PAGE, PAGE, (off_t)offsets[i]), PAGE, offsets[i],
               "pread");
  return meter_stop(m);
}

/* The same reads as pread_list() at depth 1, with the system call that kvik's batch makes its tries
 * with (preadv2 and RWF_NOWAIT): what a batch of tries can be at best against pread. A read the
 * page cache does not hold (EAGAIN) is read with pread. */
static struct cost preadv2_list(int fd, const int64_t *offsets, uint64_t reads, char *buf) {
  struct meter m = meter_start(RUSAGE_SELF);
  for (uint64_t i = 0; i < reads; i++) {
    struct iovec one = {buf, PAGE};
    ssize_t r = preadv2(fd, &one, 1, (off_t)offsets[i], RWF_NOWAIT);
    if (r < 0 && errno == EAGAIN) r = pread(fd, buf, PAGE, (off_t)offsets[i]);
    check_read(r, PAGE, offsets[i], "preadv2");
  }
  return meter_stop(m);
}

static void keep_best(struct cost *best, struct cost c, int first) {
  if (first || c.seconds < best->seconds) *best = c;
}

/* The terse (version 3) report's fields: 8 read IOPS, 9 read run time in ms, 88 and 89 the
 * user and system CPU percentages. Returns 0, or -1 where the report has none of them. */
static int fio_terse(const char *text, double *iops, double *runtime_ms, double *usr, double *sys) {
  double field[90] = {0}; /* field[i] is the i-th, counted from 1 */
  int n = 1;
  for (const char *p = text; *p && n < 89; p++)
    if (*p == ';') field[++n] = strtod(p + 1, NULL);
  if (n < 89) return -1;
  *iops = field[8], *runtime_ms = field[9], *usr = field[88], *sys = field[89];
  return *iops > 0 ? 0 : -1;
}

/* fio --ioengine=io_uring --iodepth=32 reading `reads` random pages of the cached file. Sets
 * r->na where fio cannot run; else r->amount to the reads and r->cost from fio's own figures. */
static void fio_uring(const char *path, uint64_t size, uint64_t reads, struct row *r) {
  char report[4200], file[4200], sz[64], io[64], depth[32], out[4300];
  snprintf(report, sizeof report, "%s.fio", path);
  snprintf(file, sizeof file, "--filename=%s", path);
  snprintf(sz, sizeof sz, "--size=%" PRIu64, size);
  snprintf(io, sizeof io, "--io_size=%" PRIu64, reads * PAGE);
  snprintf(depth, sizeof depth, "--iodepth=%d", FIO_DEPTH);
  snprintf(out, sizeof out, "--output=%s", report);
  char fixed[][24] = {"fio",
                      "--name=kvik-bench",
                      "--ioengine=io_uring",
                      "--rw=randread",
                      "--bs=4k",
                      "--invalidate=0",
                      "--norandommap",
                      "--randrepeat=0",
                      "--output-format=terse",
                      "--terse-version=3"};
  char *argv[16];
  size_t argc = 0;
  for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) argv[argc++] = fixed[i];
  char *mine[] = {file, sz, io, depth, out, NULL};
  for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++) argv[argc++] = mine[i];
  pid_t pid;
  int rc = posix_spawnp(&pid, "fio", NULL, NULL, argv, environ), status = 0;
  if (rc != 0) return not_available(r, "cannot run fio: ", strerror(rc));
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) die_errno("waitpid");
  char text[1 << 14];
  FILE *f = fopen(report, "r");
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  unlink(report);
  text[n] = '\0';
  double iops, ms, usr, sys;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      fio_terse(text, &iops, &ms, &usr, &sys) < 0) {
    snprintf(r->na, sizeof r->na, "n/a (fio failed: status %d, or no terse report)", status);
    return;
  }
  r->amount = (double)reads;
  r->cost = (struct cost){(double)reads / iops, (usr + sys) / 100 * ms / 1000};
}

static const char *verdict(double ratio, double target) {
  return ratio >= target ? "ok" : "missed";
}

/* Table 0: the batch at each depth against a pread loop reading the same offsets, rows taking
 * turns `repeat` times; then depth 32 against fio. Both read the cached file at defaults. */
static void table_targets(const char *path, uint64_t size, uint64_t reads, int repeat) {
  const unsigned depths[] = {1, 2, 4, 8, 32, 128};
  enum { NDEPTHS = sizeof depths / sizeof depths[0] };
  struct cost batch[NDEPTHS], plain[NDEPTHS], nowait = {0, 0};
  int64_t *offsets = malloc(reads * sizeof *offsets);
  if (!offsets) die_errno("malloc");
  char *bufs = aligned_or_die(depths[NDEPTHS - 1] * PAGE);
  memset(bufs, 0, depths[NDEPTHS - 1] * PAGE);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die_errno(path);
  kvik_file *f = open_kvik(path);
  apply(defaults);
  for (int k = 0; k < repeat; k++) {
    for (unsigned d = 0; d < NDEPTHS; d++) {
      uint64_t seed = fresh_seed();
      for (uint64_t i = 0; i < reads; i++) offsets[i] = random_offset(&seed);
      /* Which goes first alternates, so that neither always finds the caches the other left. */
      if ((k + d) % 2)
        keep_best(&plain[d], pread_list(fd, offsets, reads, depths[d], bufs), k == 0);
      keep_best(&batch[d], batch_list(f, depths[d], offsets, reads, bufs), k == 0);
      if ((k + d) % 2 == 0)
        keep_best(&plain[d], pread_list(fd, offsets, reads, depths[d], bufs), k == 0);
      if (d == 0) keep_best(&nowait, preadv2_list(fd, offsets, reads, bufs), k == 0);
    }
  }
  struct row fio = {"fio io_uring", 0, FIO_DEPTH, defaults, "", 0, {0, 0}};
  for (int k = 0; k < repeat && !fio.na[0]; k++) {
    struct row run = fio;
    fio_uring(path, size, reads, &run);
    if (run.na[0]) snprintf(fio.na, sizeof fio.na, "%s", run.na);
    else if (k == 0 || run.cost.seconds < fio.cost.seconds)
      fio.amount = run.amount, fio.cost = run.cost;
  }
  kvik_file_free(f);
  close(fd);
  free(offsets);
  free(bufs);

  printf("\nissue 29 targets: 4 KiB random reads from the page cache at kvik's defaults, %" PRIu64
         " reads per row, best of %d, batch and pread loop taking turns on the same offsets\n",
         reads, repeat);
  printf("  %-6s %12s %12s %12s %12s %8s %10s  %s\n", "depth", "batch r/s", "CPU us/read",
         "pread r/s", "CPU us/read", "ratio", "CPU ratio", "target 0.9x pread");
  double batch32 = 0;
  for (unsigned d = 0; d < NDEPTHS; d++) {
    double b = (double)reads / batch[d].seconds, p = (double)reads / plain[d].seconds;
    if (depths[d] == FIO_DEPTH) batch32 = b;
    printf("  %-6u %12.0f %12.2f %12.0f %12.2f %7.2fx %9.2fx  %s\n", depths[d], b,
           batch[d].cpu / (double)reads * 1e6, p, plain[d].cpu / (double)reads * 1e6, b / p,
           plain[d].cpu / batch[d].cpu, verdict(b / p, TARGET_VS_PREAD));
  }
  /* kvik tries each read with preadv2(RWF_NOWAIT) until the page cache served 64 in a row, then
   * with pread and one in 16 with RWF_NOWAIT (src/batch.c). */
  double v = (double)reads / nowait.seconds, p1 = (double)reads / plain[0].seconds;
  printf("  the tries' asking call alone, a preadv2(RWF_NOWAIT) loop at depth 1: %.0f r/s, %.2fx "
         "pread (the tries once the batch trusts the page cache: pread, and 1 in 16 of these)\n",
         v, v / p1);
  if (fio.na[0]) {
    printf("  depth %d against fio --ioengine=io_uring --iodepth=%d: %s\n", FIO_DEPTH, FIO_DEPTH,
           fio.na);
  } else {
    double io = rate(&fio);
    printf("  depth %d against fio --ioengine=io_uring --iodepth=%d: %.0f r/s, %.2f CPU us/read; "
           "batch %.2fx  %s "
           "(target %.1fx)\n",
           FIO_DEPTH, FIO_DEPTH, io, fio.cost.cpu / fio.amount * 1e6, batch32 / io,
           verdict(batch32 / io, TARGET_VS_FIO), TARGET_VS_FIO);
  }
  fflush(stdout);
}

/* --only-batch / --only-pread: one row of table 0 at `depth`, `repeat` times. */
static void only_row(const char *path, int batch, unsigned depth, uint64_t reads, int repeat) {
  int64_t *offsets = malloc(reads * sizeof *offsets);
  if (!offsets) die_errno("malloc");
  char *bufs = aligned_or_die(depth * PAGE);
  memset(bufs, 0, depth * PAGE);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) die_errno(path);
  kvik_file *f = open_kvik(path);
  apply(defaults);
  for (int k = 0; k < repeat; k++) {
    uint64_t seed = fresh_seed();
    for (uint64_t i = 0; i < reads; i++) offsets[i] = random_offset(&seed);
    struct cost c = batch ? batch_list(f, depth, offsets, reads, bufs)
                          : pread_list(fd, offsets, reads, depth, bufs);
    printf("%s, depth %u: %.0f r/s, %.3f CPU us/read\n", batch ? "batch" : "pread loop", depth,
           (double)reads / c.seconds, c.cpu / (double)reads * 1e6);
  }
  kvik_file_free(f);
  close(fd);
  free(offsets);
  free(bufs);
}

/* What a new batch's first device operation through io_uring costs, and a batch's end: the
 * staging arena is taken (from kvik's pinned cache after the first time) and registered with the
 * ring. Printed for a few batches in turn. */
static void first_device_op(const char *path) {
  kvik_file *f = open_kvik(path);
  char *dev = device_alloc_or_die(PAGE);
  apply((struct mode){KVIK_ON, defaults.threshold, 0});
  printf("\nA new batch's first 4 KiB read into GPU memory through io_uring (create, submit, wait, free; ms):");
  for (int i = 0; i < 4; i++) {
    double t0 = now();
    struct pipeline p = pipeline_create(32);
    pipeline_warm_up(&p, f, dev);
    double t1 = now();
    pipeline_free(&p);
    printf(" %.2f + %.2f", (t1 - t0) * 1e3, (now() - t1) * 1e3);
  }
  printf("\n");
  apply(defaults);
  kvik_file_free(f);
}

/* ---- table 2: the whole file, sequentially ------------------------------------------------- */

enum { SEQ_PREAD, SEQ_KVIK_READ, SEQ_BATCH, SEQ_DD };

struct seq_ctx {
  kvik_file *file;
  char *buf;
  uint64_t size;
};

static void seq_op(void *ctx, uint64_t index, unsigned slot, kvik_batch_op *op) {
  struct seq_ctx *c = ctx;
  (void)slot; /* each operation reads into its own part of the one buffer */
  uint64_t offset = index * SEQ_OP;
  size_t n = c->size - offset < SEQ_OP ? (size_t)(c->size - offset) : SEQ_OP;
  *op = (kvik_batch_op){c->file, KVIK_BATCH_READ, c->buf + offset, n, (int64_t)offset, NULL};
}

static struct cost seq_batch(kvik_file *f, char *buf, uint64_t size, unsigned depth) {
  struct pipeline p = pipeline_create(depth);
  struct seq_ctx c = {f, buf, size};
  pipeline_warm_up(&p, f, buf);
  struct meter m = meter_start(RUSAGE_SELF);
  pipeline_run(&p, seq_op, &c, (size + SEQ_OP - 1) / SEQ_OP);
  struct cost cost = meter_stop(m);
  pipeline_free(&p);
  return cost;
}

static struct cost seq_kvik_read(kvik_file *f, char *buf, uint64_t size) {
  struct meter m = meter_start(RUSAGE_SELF);
  ssize_t n = kvik_file_read(f, buf, size, 0);
  struct cost cost = meter_stop(m);
  if (n < 0) die_kvik("kvik_file_read", n);
  if ((uint64_t)n != size) check_read(n, size, 0, "kvik_file_read");
  return cost;
}

static struct cost seq_pread(const char *path, char *buf, uint64_t size) {
  struct meter m = meter_start(RUSAGE_SELF);
  pread_whole(path, buf, size);
  return meter_stop(m);
}

/* dd as a child: wall time around it, CPU from RUSAGE_CHILDREN. Sets r->na when it cannot run. */
static struct cost seq_dd(const char *path, struct row *r) {
  char input[4200], prog[] = "dd", out[] = "of=/dev/null", bs[] = "bs=4M", flag[] = "iflag=direct",
                    quiet[] = "status=none";
  snprintf(input, sizeof input, "if=%s", path);
  char *argv[] = {prog, input, out, bs, flag, quiet, NULL};
  struct meter m = meter_start(RUSAGE_CHILDREN);
  pid_t pid;
  int rc = posix_spawnp(&pid, prog, NULL, NULL, argv, environ), status = 0;
  if (rc != 0) {
    not_available(r, "cannot run dd: ", strerror(rc));
    return (struct cost){0, 0};
  }
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) die_errno("waitpid");
  struct cost cost = meter_stop(m);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    snprintf(r->na, sizeof r->na, "n/a (dd failed: status %d)", status);
  return cost;
}

static unsigned seq_rows(struct row *rows) {
  const struct mode pool = defaults, pool_direct = {defaults.uring, defaults.threshold, 1};
  const struct mode uring_direct = {KVIK_ON, defaults.threshold, 1}, uring = {KVIK_ON, defaults.threshold, 0};
  unsigned n = 0;
  rows[n++] = (struct row){"pread, 1 thread", SEQ_PREAD, 0, pool, "", 0, {0, 0}};
  rows[n++] = (struct row){"kvik_file_read (pool, defaults)", SEQ_KVIK_READ, 0, pool, "", 0, {0, 0}};
  rows[n++] = (struct row){"kvik_file_read, O_DIRECT (pool)", SEQ_KVIK_READ, 0, pool_direct, "", 0, {0, 0}};
  rows[n++] = (struct row){"kvik batch, io_uring, O_DIRECT, depth 8", SEQ_BATCH, 8, uring_direct, "", 0, {0, 0}};
  rows[n++] = (struct row){"kvik batch, io_uring, O_DIRECT, depth 32", SEQ_BATCH, 32, uring_direct, "", 0, {0, 0}};
  rows[n++] = (struct row){"kvik batch, io_uring, buffered, depth 32", SEQ_BATCH, 32, uring, "", 0, {0, 0}};
  rows[n++] = (struct row){"dd iflag=direct bs=4M", SEQ_DD, 0, pool, "", 0, {0, 0}};
  return n;
}

static int is_kvik(const struct row *r) { return r->kind == SEQ_KVIK_READ || r->kind == SEQ_BATCH; }
static int is_not_kvik(const struct row *r) { return !is_kvik(r); }
static int is_any(const struct row *r) { return r != NULL; }

static int needs_direct(const struct row *r) { return r->m.direct || r->kind == SEQ_DD; }

static struct cost seq_measure(struct row *r, const char *path, kvik_file *f, char *buf, uint64_t size) {
  switch (r->kind) {
  case SEQ_PREAD: return seq_pread(path, buf, size);
  case SEQ_KVIK_READ: return seq_kvik_read(f, buf, size);
  case SEQ_BATCH: return seq_batch(f, buf, size, r->arg);
  default: return seq_dd(path, r);
  }
}

static int is_dd_or_pool(const struct row *r) { return r->kind == SEQ_DD || r->kind == SEQ_KVIK_READ; }

static void print_seq(const char *title, struct row *rows, unsigned n, uint64_t size, int repeat) {
  printf("\nsequential read of the whole file (%.2f GB) into host memory, %s, best of %d, rows taking turns\n",
         (double)size / 1e9, title, repeat);
  printf("  %-42s %8s %10s %14s %14s\n", "method", "GB/s", "CPU s/GB", "vs pread/dd", "vs dd/pool");
  double other_best = best_rate(rows, n, is_not_kvik), best = best_rate(rows, n, is_any);
  double dd_or_pool_best = best_rate(rows, n, is_dd_or_pool);
  for (unsigned i = 0; i < n; i++) {
    const struct row *r = &rows[i];
    if (r->na[0]) {
      printf("  %-42s %s\n", r->name, r->na);
      continue;
    }
    printf("  %-42s %8.2f %10.3f", r->name, rate(r) / 1e9, r->cost.cpu / (r->amount / 1e9));
    if (is_kvik(r)) print_ratio(rate(r), other_best);
    else printf("  %13s", "");
    if (r->kind == SEQ_BATCH) print_ratio(rate(r), dd_or_pool_best);
    else printf("  %13s", "");
    printf("%s\n", rate(r) == best ? "  <- best" : "");
  }
}

/* Table 2 for one state of the file: `cold` drops it from the page cache before each
 * measurement, else it is read once first. `buf` holds the whole file. The rows take turns, one
 * measurement each per repeat, so that a disk whose rate drifts over the run favours none. */
static void table_seq(const char *path, const char *title, int cold, const char *refused, int uring_ok, char *buf,
                      uint64_t size, int repeat) {
  struct row rows[8];
  unsigned n = seq_rows(rows);
  kvik_file *f = open_kvik(path);
  if (!cold) pread_whole(path, NULL, size);
  for (unsigned i = 0; i < n; i++) {
    struct row *r = &rows[i];
    if (needs_direct(r) && refused) not_available(r, "O_DIRECT refused: ", refused);
    else if (r->kind == SEQ_BATCH && r->m.uring == KVIK_ON && !uring_ok) not_available(r, "io_uring unavailable", "");
    r->amount = (double)size;
  }
  for (int k = 0; k < repeat; k++) {
    for (unsigned i = 0; i < n; i++) {
      struct row *r = &rows[i];
      if (r->na[0]) continue;
      apply(r->m);
      int rc = cold ? kvik_page_cache_drop(path) : 0;
      if (rc < 0) die_kvik("kvik_page_cache_drop", rc);
      struct cost c = seq_measure(r, path, f, buf, size);
      if (k == 0 || c.seconds < r->cost.seconds) r->cost = c; /* CPU of the fastest repeat */
    }
  }
  apply(defaults);
  kvik_file_free(f);
  print_seq(title, rows, n, size, repeat);
}

/* Whether kvik_page_cache_drop empties the page cache of the file; else why not, in `why`. A
 * file system that keeps its files in memory (tmpfs) accepts the call and drops nothing. */
static int cold_possible(const char *path, char *why, size_t len) {
  size_t resident, total;
  int rc = kvik_page_cache_drop(path);
  if (rc >= 0) rc = kvik_page_cache_info(path, &resident, &total);
  if (rc < 0) return snprintf(why, len, "%s", kvik_last_error()), 0;
  if (resident <= total / 100) return 1;
  snprintf(why, len, "after kvik_page_cache_drop %zu of the file's %zu pages are still cached", resident, total);
  return 0;
}

/* ---- main ---------------------------------------------------------------------------------- */

struct options {
  const char *dir;
  uint64_t size, reads;
  int repeat, device, targets_only;
  int only; /* ONLY_BATCH or ONLY_PREAD: one row of table 0 alone, at only_depth */
  unsigned only_depth;
};

enum { ONLY_NONE, ONLY_BATCH, ONLY_PREAD };

/* "4G", "256M", "4096": bytes, or 0 when the text is no size. */
static uint64_t parse_size(const char *text) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno || end == text || text[0] == '-') return 0;
  int shift = 0;
  switch (*end) {
  case 'k': case 'K': shift = 10, end++; break;
  case 'm': case 'M': shift = 20, end++; break;
  case 'g': case 'G': shift = 30, end++; break;
  default: break;
  }
  if (*end != '\0' || v > UINT64_MAX >> shift) return 0;
  return (uint64_t)v << shift;
}

static void usage(const char *prog) {
  fprintf(stderr,
          "usage: %s DIR [--size BYTES] [--reads N] [--repeat R] [--device] [--targets] "
          "[--only-batch DEPTH | --only-pread DEPTH]   (defaults: 4G 200000 3)\n",
          prog);
  exit(2);
}

static struct options parse_args(int argc, char **argv) {
  struct options o = {NULL, (uint64_t)4 << 30, 200000, 3, 0, 0, ONLY_NONE, 0};
  for (int i = 1; i < argc; i++) {
    const char *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(argv[i], "--size") && value) o.size = parse_size(value), i++;
    else if (!strcmp(argv[i], "--reads") && value) o.reads = strtoull(value, NULL, 10), i++;
    else if (!strcmp(argv[i], "--repeat") && value) o.repeat = atoi(value), i++;
    else if (!strcmp(argv[i], "--device")) o.device = 1;
    else if (!strcmp(argv[i], "--targets")) o.targets_only = 1;
    else if (!strcmp(argv[i], "--only-batch") && value)
      o.only = ONLY_BATCH, o.only_depth = (unsigned)strtoul(value, NULL, 10), i++;
    else if (!strcmp(argv[i], "--only-pread") && value)
      o.only = ONLY_PREAD, o.only_depth = (unsigned)strtoul(value, NULL, 10), i++;
    else if (argv[i][0] != '-' && !o.dir) o.dir = argv[i];
    else usage(argv[0]);
  }
  o.size -= o.size % PAGE; /* whole pages, which every O_DIRECT read needs */
  if (!o.dir || o.size == 0 || o.reads == 0 || o.repeat <= 0) usage(argv[0]);
  if (o.only != ONLY_NONE && (o.only_depth < 1 || o.only_depth > 65536)) usage(argv[0]);
  return o;
}

int main(int argc, char **argv) {
  struct options o = parse_args(argc, argv);
  seed_source = (uint64_t)(now() * 1e9);
  pages = o.size / PAGE;
  long cpus_found = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned cpus = cpus_found > 0 ? (unsigned)cpus_found : 1;
  defaults = (struct mode){get_or_die(KVIK_SETTING_IO_URING), get_or_die(KVIK_SETTING_GDS_THRESHOLD),
                           get_or_die(KVIK_SETTING_AUTO_DIRECT_IO_READ)};
  char uring_why[WHY_LEN], direct_why[WHY_LEN], path[4096];
  int uring_ok = kvik_io_uring_supported(uring_why, sizeof uring_why);

  snprintf(path, sizeof path, "%s/kvik-bench-io-uring-%d", o.dir, (int)getpid());
  atexit(remove_file);
  create_file(path, o.size);
  const char *refused = direct_refusal(path, direct_why, sizeof direct_why);
  printf("%s: %" PRIu64 " bytes (%.2f GiB), %u CPUs, kvik %s (0x%06x) with %" PRId64 " pool threads, %s\n", path,
         o.size, (double)o.size / (1 << 30), cpus, kvik_version_string(), kvik_version(),
         get_or_die(KVIK_SETTING_NUM_THREADS), uring_why);
  fflush(stdout);

  pread_whole(path, NULL, o.size); /* the page cache tables read a fully cached file */
  if (o.only != ONLY_NONE) {
    only_row(path, o.only == ONLY_BATCH, o.only_depth, o.reads, o.repeat);
    return 0;
  }
  table_targets(path, o.size, o.reads, o.repeat);
  if (o.targets_only) return 0;
  uint64_t direct_reads = o.reads / 10 ? o.reads / 10 : 1;
  table_random(path, "page cache", 0, 0, NULL, uring_ok, cpus, o.reads);
  table_random(path, "O_DIRECT (from the device)", 1, 0, refused, uring_ok, cpus, direct_reads);
  if (o.device) {
    table_random(path, "page cache into GPU memory", 0, 1, NULL, uring_ok, cpus, o.reads);
    table_random(path, "O_DIRECT into GPU memory", 1, 1, refused, uring_ok, cpus, direct_reads);
    if (uring_ok) first_device_op(path);
  }
  fflush(stdout);

  char *buf = aligned_or_die(o.size);
  memset(buf, 1, o.size); /* its pages exist before any measurement: page faults are not timed */
  char cold_why[WHY_LEN];
  if (!cold_possible(path, cold_why, sizeof cold_why)) printf("\ncold reads are not possible here: %s\n", cold_why);
  else
    table_seq(path, "cold (page cache dropped before each measurement)", 1, refused, uring_ok, buf, o.size, o.repeat);
  table_seq(path, "page cache", 0, refused, uring_ok, buf, o.size, o.repeat);
  free(buf);
  return 0;
}
