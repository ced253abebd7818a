/* Batch IO (kvik_batch_*), in three runs that ctest sets up:
 *  - plain: host memory on the thread pool: scattered reads (some past the end of the file)
 *    checked byte for byte with guard bytes, writes read back, min_events and timeouts, cookies,
 *    each completion reported once, every validation error, -EAGAIN beyond max_ops, cancel and
 *    free with operations in flight, closed files. The fault shim's gate holds reads of files
 *    named "shim-target" in flight, so that "still running" is a fact, not a race;
 *  - the fake CUDA driver with compat mode ON: the same, and device memory on the pool;
 *  - the fake cuFile with compat mode OFF: device memory through cuFileBatchIO* (the fake counts
 *    the calls), batches that mix host and device operations, failures of cuFileBatchIOSubmit,
 *    cuFileBatchIOGetStatus and of single operations, cancel and free with cuFile operations in
 *    flight, more operations than cuFile's batch takes, and no batch left behind.
 * A run that sets KVIKIO_COMPAT_MODE is about device memory: it skips (77) without CUDA, and the
 * OFF run also without the fake cuFile or O_DIRECT in the working directory, where it works.
 * The random choices come from one seed, printed at the start; KVIK_TEST_SEED=N repeats a run. */
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <stdatomic.h>
#include <time.h>

#include "fake_cuda.h"
#include "fault_shim.h"
#include "test_cuda.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define FILE_BYTES (8 * MiB + 123)
#define GUARD ((size_t)256)
#define NOPS 64
#define FOREVER ((int64_t)-1)
#define MS ((int64_t)1000000)

static uint64_t rng;
static char *dir;
static unsigned char *ref; /* the reference file's bytes */
static char *ref_path, *held_path; /* the same bytes; reads of held_path wait at the shim's gate */

/* ---- Memory of either kind ----------------------------------------------------------------- */

typedef struct mem {
  int device;
  unsigned char *ptr;
  size_t size;
} mem;

static mem mem_new(int device, size_t size) {
  mem m = {device, NULL, size};
  if (device) {
    CUdeviceptr d = 0;
    CU_OK(cu.cuMemAlloc_v2(&d, size));
    m.ptr = (unsigned char *)(uintptr_t)d;
  } else {
    ASSERT_EQ(posix_memalign((void **)&m.ptr, 4096, size), 0); /* as device memory is: O_DIRECT may take it */
  }
  return m;
}

static void mem_free(mem *m) {
  if (m->device) CU_OK(cu.cuMemFree_v2((CUdeviceptr)(uintptr_t)m->ptr));
  else free(m->ptr);
}

/* cuMemcpyHtoD from pageable memory may return before its DMA ends, and kvik's streams do not
 * wait for the legacy default stream: the test does. */
static void mem_put(const mem *m, size_t at, const void *src, size_t n) {
  if (!m->device) {
    memcpy(m->ptr + at, src, n);
    return;
  }
  CU_OK(cu.cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)(m->ptr + at), src, n));
  CU_OK(cu.cuStreamSynchronize(NULL));
}

static void mem_get(const mem *m, size_t at, void *dst, size_t n) {
  if (m->device) CU_OK(cu.cuMemcpyDtoH_v2(dst, (CUdeviceptr)(uintptr_t)(m->ptr + at), n));
  else memcpy(dst, m->ptr + at, n);
}

/* ---- Helpers ------------------------------------------------------------------------------- */

static kvik_file *open_file(const char *path, const char *flags) {
  kvik_file *f = NULL;
  ASSERT_OK(kvik_file_open(path, flags, 0644, &f));
  return f;
}

static kvik_batch *batch_new(unsigned max_ops) {
  kvik_batch *b = NULL;
  ASSERT_OK(kvik_batch_create(max_ops, &b));
  return b;
}

static void *cookie_of(unsigned i) { return (void *)(uintptr_t)(i + 1); }

static unsigned index_of(const kvik_batch_event *ev, unsigned n) {
  uintptr_t c = (uintptr_t)ev->cookie;
  if (c < 1 || c > n) FAIL_AT("event with cookie %p, not one of the %u submitted", ev->cookie, n);
  return (unsigned)(c - 1);
}

/* Collect events until `n` came in, each cookie of the n operations exactly once; ev[i] is then
 * operation i's event. Waits in rounds of at most `per_wait` events. */
static void collect(kvik_batch *b, kvik_batch_event *ev, unsigned n, unsigned per_wait) {
  kvik_batch_event got[NOPS * 4];
  unsigned char seen[NOPS * 4] = {0};
  ASSERT(n <= NOPS * 4 && per_wait <= NOPS * 4);
  for (unsigned have = 0; have < n;) {
    unsigned want = n - have < per_wait ? n - have : per_wait;
    int r = kvik_batch_wait(b, want, got, want, FOREVER);
    ASSERT_EQ(r, want);
    for (int k = 0; k < r; k++) {
      unsigned i = index_of(&got[k], n);
      if (seen[i]++) FAIL_AT("operation %u reported twice", i);
      ev[i] = got[k];
    }
    have += (unsigned)r;
  }
  /* Nothing more: each completion was reported once. */
  ASSERT_EQ(kvik_batch_wait(b, 0, got, NOPS, 0), 0);
}

static size_t expected_read(int64_t offset, size_t size) {
  if ((uint64_t)offset >= FILE_BYTES) return 0;
  return size < FILE_BYTES - (size_t)offset ? size : FILE_BYTES - (size_t)offset;
}

static void expect_complete(const kvik_batch_event *ev, unsigned i, size_t bytes) {
  if (ev->status != KVIK_BATCH_COMPLETE || ev->result != (ssize_t)bytes)
    FAIL_AT("operation %u: status %d, result %zd (%s); expected %zu bytes", i, ev->status, ev->result,
            ev->result < 0 ? kvik_err_name((int)ev->result) : "-", bytes);
}

/* ---- Scattered reads and writes -------------------------------------------------------------- */

typedef struct plan {
  kvik_batch_op op[NOPS * 4];
  size_t at[NOPS * 4]; /* where each operation's bytes lie in the memory */
  size_t bytes;        /* the memory needed, guards included */
} plan;

/* n reads of random sizes at random offsets of f, some reaching past the end of the file or
 * starting beyond it, each into its own place of memory with guard bytes around it. */
static void plan_reads(plan *p, kvik_file *f, unsigned n, size_t max_size) {
  p->bytes = GUARD;
  for (unsigned i = 0; i < n; i++) {
    size_t size = i % 8 == 0 ? 0 : 1 + test_below(&rng, max_size);
    if (i % 8 == 1) size = max_size;
    int64_t offset = (int64_t)test_below(&rng, FILE_BYTES);
    if (i % 5 == 2) offset = (int64_t)(FILE_BYTES - test_below(&rng, size + 1)); /* past the end */
    if (i % 16 == 3) offset = FILE_BYTES + (int64_t)test_below(&rng, 5000);      /* beyond it */
    p->op[i] = (kvik_batch_op){f, KVIK_BATCH_READ, NULL, size, offset, cookie_of(i)};
    p->at[i] = p->bytes;
    p->bytes += size + GUARD;
  }
}

static void point_into(plan *p, unsigned n, const mem *m) {
  for (unsigned i = 0; i < n; i++) p->op[i].buf = m->ptr + p->at[i];
}

/* Run the reads of the plan (memory filled with `fill` first) and check every byte of the memory:
 * what each read, and the guards and the rest untouched. */
static void check_reads(kvik_batch *b, plan *p, unsigned n, const mem *m, unsigned per_wait) {
  unsigned char *expect = malloc(p->bytes), *got = malloc(p->bytes);
  memset(expect, 0xAB, p->bytes);
  mem_put(m, 0, expect, p->bytes);
  ASSERT_OK(kvik_batch_submit(b, p->op, n));
  kvik_batch_event ev[NOPS * 4];
  collect(b, ev, n, per_wait);
  for (unsigned i = 0; i < n; i++) {
    size_t want = expected_read(p->op[i].file_offset, p->op[i].size);
    expect_complete(&ev[i], i, want);
    memcpy(expect + p->at[i], ref + (want ? p->op[i].file_offset : 0), want);
  }
  mem_get(m, 0, got, p->bytes);
  long long diff = test_first_diff(got, expect, p->bytes);
  if (diff >= 0) FAIL_AT("%s memory differs at byte %lld of %zu", m->device ? "device" : "host", diff, p->bytes);
  free(expect);
  free(got);
}

static void test_scattered_reads(int device, unsigned n, size_t max_size) {
  kvik_file *f = open_file(ref_path, "r");
  plan *p = malloc(sizeof *p);
  plan_reads(p, f, n, max_size);
  mem m = mem_new(device, p->bytes);
  point_into(p, n, &m);
  kvik_batch *b = batch_new(n);
  check_reads(b, p, n, &m, n);
  check_reads(b, p, n, &m, 7); /* the batch again, collected a few at a time */
  kvik_batch_free(b);
  mem_free(&m);
  free(p);
  kvik_file_free(f);
  printf("ok: %u scattered reads into %s memory\n", n, device ? "device" : "host");
}

/* n writes to disjoint random ranges of a new file, from memory of the kind asked, compared with
 * a model; then the same ranges read back through a batch. */
static void test_writes(int device, unsigned n) {
  char *path = test_path(dir, "written");
  kvik_file *f = open_file(path, "w+");
  size_t span = FILE_BYTES / n, model_len = 0;
  unsigned char *model = calloc(1, FILE_BYTES), *data = malloc(FILE_BYTES);
  test_fill(data, FILE_BYTES, test_rand(&rng));
  mem src = mem_new(device, FILE_BYTES);
  mem_put(&src, 0, data, FILE_BYTES);
  kvik_batch_op ops[NOPS * 4];
  for (unsigned i = 0; i < n; i++) {
    size_t start = i * span + test_below(&rng, 100), size = test_below(&rng, span - 100);
    ops[i] = (kvik_batch_op){f, KVIK_BATCH_WRITE, src.ptr + start, size, (int64_t)start, cookie_of(i)};
    memcpy(model + start, data + start, size);
    if (size && start + size > model_len) model_len = start + size;
  }
  kvik_batch *b = batch_new(n);
  ASSERT_OK(kvik_batch_submit(b, ops, n));
  kvik_batch_event ev[NOPS * 4];
  collect(b, ev, n, n);
  for (unsigned i = 0; i < n; i++) expect_complete(&ev[i], i, ops[i].size);
  ASSERT_EQ(kvik_file_size(f), model_len);
  size_t len;
  unsigned char *content = test_read_file(path, &len);
  ASSERT_EQ(len, model_len);
  ASSERT_SAME_BYTES(content, model, len);
  /* Read back into zeroed memory, through a batch. */
  memset(data, 0, FILE_BYTES);
  mem_put(&src, 0, data, FILE_BYTES);
  for (unsigned i = 0; i < n; i++) ops[i].opcode = KVIK_BATCH_READ;
  ASSERT_OK(kvik_batch_submit(b, ops, n));
  collect(b, ev, n, n);
  for (unsigned i = 0; i < n; i++) expect_complete(&ev[i], i, ops[i].size);
  mem_get(&src, 0, data, FILE_BYTES);
  ASSERT_SAME_BYTES(data, model, model_len);
  kvik_batch_free(b);
  mem_free(&src);
  kvik_file_free(f);
  free(content);
  free(model);
  free(data);
  free(path);
  printf("ok: %u writes from %s memory, read back\n", n, device ? "device" : "host");
}

/* ---- Waiting: min_events, timeouts, each completion once ------------------------------------ */

static void *open_gate_later(void *arg) {
  (void)arg;
  usleep(50 * 1000);
  shim_open_gate();
  return NULL;
}

/* `n` reads of 64 KiB from `path` into buf, cookies from `first`. */
static void read_ops(kvik_batch_op *ops, kvik_file *f, unsigned char *buf, unsigned n, unsigned first) {
  for (unsigned i = 0; i < n; i++)
    ops[i] = (kvik_batch_op){f, KVIK_BATCH_READ, buf + (first + i) * 64 * KiB, 64 * KiB,
                             (int64_t)((first + i) * 64 * KiB), cookie_of(first + i)};
}

static void test_waiting(void) {
  kvik_file *free_f = open_file(ref_path, "r"), *held_f = open_file(held_path, "r");
  unsigned char *buf = calloc(8, 64 * KiB);
  kvik_batch_op ops[8];
  kvik_batch_event ev[8];
  kvik_batch *b = batch_new(8);
  ASSERT_EQ(kvik_batch_wait(b, 0, ev, 8, FOREVER), 0); /* nothing submitted: returns at once */
  ASSERT_EQ(kvik_batch_wait(b, 3, ev, 8, FOREVER), 0); /* nor is there anything to wait for */

  /* Two reads held at the gate: a wait returns fewer than min_events at its timeout, and no
   * -ETIMEDOUT; min_events 0 returns what is done without waiting. */
  atomic_store(&shim.gate_closed, 1);
  read_ops(ops, held_f, buf, 2, 0);
  ASSERT_OK(kvik_batch_submit(b, ops, 2));
  ASSERT_EQ(kvik_batch_wait(b, 2, ev, 8, 0), 0);
  ASSERT_EQ(kvik_batch_wait(b, 1, ev, 8, 20 * MS), 0);
  ASSERT_EQ(kvik_batch_wait(b, 0, ev, 8, FOREVER), 0);
  /* A third, not held, completes while they wait: the timeout returns it alone. */
  read_ops(ops, free_f, buf, 1, 2);
  ASSERT_OK(kvik_batch_submit(b, ops, 1));
  ASSERT_EQ(kvik_batch_wait(b, 3, ev, 8, 500 * MS), 1);
  ASSERT(ev[0].cookie == cookie_of(2));
  expect_complete(&ev[0], 2, 64 * KiB);
  ASSERT_EQ(kvik_batch_wait(b, 0, ev, 8, 0), 0); /* reported once */
  shim_open_gate();
  ASSERT_EQ(kvik_batch_wait(b, 2, ev, 8, FOREVER), 2);
  ASSERT(ev[0].cookie != ev[1].cookie && (ev[0].cookie == cookie_of(0) || ev[0].cookie == cookie_of(1)));
  ASSERT_SAME_BYTES(buf, ref, 3 * 64 * KiB);

  /* max_events below what is done: the rest waits for the next call, none is lost. */
  read_ops(ops, free_f, buf, 8, 0);
  ASSERT_OK(kvik_batch_submit(b, ops, 8));
  ASSERT_OK(kvik_batch_cancel(b)); /* waits until all are done; pool operations are not stopped */
  collect(b, ev, 8, 3);
  for (unsigned i = 0; i < 8; i++) expect_complete(&ev[i], i, 64 * KiB);
  kvik_batch_free(b);
  kvik_file_free(free_f);
  kvik_file_free(held_f);
  free(buf);
  printf("ok: min_events, timeouts and max_events\n");
}

/* Reads done within kvik_batch_submit() beside a pool read held at the gate: a wait for no more
 * events than are done returns them at once, whatever its timeout; the held read comes later,
 * each completion once. Small reads on the submitting thread only here (threshold 8 KiB). */
static void test_waiting_beside_done(void) {
  kvik_file *free_f = open_file(ref_path, "r"), *held_f = open_file(held_path, "r");
  unsigned char *buf = calloc(4, 64 * KiB);
  kvik_batch_op ops[4];
  kvik_batch_event ev[4];
  kvik_batch *b = batch_new(4);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 8 * KiB));
  atomic_store(&shim.gate_closed, 1);
  read_ops(ops, held_f, buf, 1, 0);
  for (unsigned i = 1; i < 4; i++)
    ops[i] = (kvik_batch_op){free_f, KVIK_BATCH_READ, buf + i * 64 * KiB, 4 * KiB,
                             (int64_t)(i * 64 * KiB), cookie_of(i)};
  ASSERT_OK(kvik_batch_submit(b, ops, 4));
  unsigned char seen[4] = {0};
  ASSERT_EQ(kvik_batch_wait(b, 2, ev, 2, FOREVER), 2);
  ASSERT_EQ(kvik_batch_wait(b, 1, ev + 2, 1, FOREVER), 1);
  for (unsigned k = 0; k < 3; k++) {
    unsigned i = index_of(&ev[k], 4);
    ASSERT(i > 0 && !seen[i]++);
    expect_complete(&ev[k], i, 4 * KiB);
  }
  ASSERT_EQ(kvik_batch_wait(b, 1, ev, 1, 20 * MS), 0); /* the held read is still held */
  shim_open_gate();
  ASSERT_EQ(kvik_batch_wait(b, 1, ev, 4, FOREVER), 1);
  ASSERT(ev[0].cookie == cookie_of(0));
  expect_complete(&ev[0], 0, 64 * KiB);
  ASSERT_EQ(kvik_batch_wait(b, 0, ev, 4, 0), 0);
  for (unsigned i = 0; i < 4; i++)
    ASSERT_SAME_BYTES(buf + i * 64 * KiB, ref + i * 64 * KiB, i == 0 ? 64 * KiB : 4 * KiB);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
  kvik_batch_free(b);
  kvik_file_free(free_f);
  kvik_file_free(held_f);
  free(buf);
  printf("ok: waits for reads done within submit while another is held\n");
}

/* ---- Validation and limits ------------------------------------------------------------------ */

static void test_validation(void) {
  kvik_batch *b = NULL;
  ASSERT_FAILS(kvik_batch_create(0, &b), -EINVAL, "max_ops");
  ASSERT_FAILS(kvik_batch_create(65537, &b), -EINVAL, "max_ops");
  ASSERT_FAILS(kvik_batch_create(4, NULL), -EINVAL, "NULL");
  ASSERT(b == NULL);
  kvik_batch_free(batch_new(65536));
  kvik_batch_free(NULL);

  char *wpath = test_path(dir, "write-only");
  kvik_file *r = open_file(ref_path, "r"), *w = open_file(wpath, "w"), *closed = open_file(ref_path, "r");
  ASSERT_OK(kvik_file_close(closed));
  unsigned char buf[4 * 100];
  memset(buf, 0xAB, sizeof buf);
  kvik_batch_op good[4];
  for (unsigned i = 0; i < 4; i++) good[i] = (kvik_batch_op){r, KVIK_BATCH_READ, buf + 100 * i, 100, 0, cookie_of(i)};
  b = batch_new(8);
  struct {
    kvik_batch_op op;
    int code;
    const char *needle;
  } bad[] = {
      {{NULL, KVIK_BATCH_READ, buf, 100, 0, NULL}, -EINVAL, "NULL file"},
      {{r, (kvik_batch_opcode)7, buf, 100, 0, NULL}, -EINVAL, "opcode 7"},
      {{r, KVIK_BATCH_READ, NULL, 100, 0, NULL}, -EINVAL, "NULL buffer"},
      {{r, KVIK_BATCH_READ, buf, 100, -1, NULL}, -EINVAL, "negative offset"},
      {{r, KVIK_BATCH_READ, buf, 100, INT64_MAX - 50, NULL}, -EINVAL, "overflow"},
      {{r, KVIK_BATCH_READ, buf, (size_t)SSIZE_MAX + 1, 0, NULL}, -EINVAL, "overflow"},
      {{closed, KVIK_BATCH_READ, buf, 100, 0, NULL}, -EBADF, "closed"},
      {{r, KVIK_BATCH_WRITE, buf, 100, 0, NULL}, -EBADF, "not opened for writing"},
      {{w, KVIK_BATCH_READ, buf, 100, 0, NULL}, -EBADF, "not opened for reading"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    kvik_batch_op ops[4];
    memcpy(ops, good, sizeof ops);
    ops[2] = bad[k].op;
    ASSERT_FAILS(kvik_batch_submit(b, ops, 4), bad[k].code, bad[k].needle);
    ASSERT(strstr(kvik_last_error(), "operation 2"));
    /* Nothing was submitted: no events, and the good reads did not run. */
    kvik_batch_event ev[8];
    ASSERT_EQ(kvik_batch_wait(b, 0, ev, 8, 10 * MS), 0);
    for (size_t i = 0; i < sizeof buf; i++)
      if (buf[i] != 0xAB) FAIL_AT("case %zu: byte %zu was read although the submission failed", k, i);
  }
  /* A NULL buffer of no bytes is fine, as in kvik_file_pread. */
  kvik_batch_op empty = {r, KVIK_BATCH_READ, NULL, 0, 0, cookie_of(0)};
  ASSERT_OK(kvik_batch_submit(b, &empty, 1));
  kvik_batch_event ev[8];
  collect(b, ev, 1, 1);
  expect_complete(&ev[0], 0, 0);

  ASSERT_FAILS(kvik_batch_submit(NULL, good, 1), -EINVAL, "NULL batch");
  ASSERT_FAILS(kvik_batch_submit(b, NULL, 1), -EINVAL, "NULL operations");
  ASSERT_OK(kvik_batch_submit(b, NULL, 0));
  ASSERT_FAILS(kvik_batch_wait(NULL, 0, ev, 8, 0), -EINVAL, "NULL batch");
  ASSERT_FAILS(kvik_batch_wait(b, 0, NULL, 8, 0), -EINVAL, "NULL events");
  ASSERT_FAILS(kvik_batch_wait(b, 9, ev, 8, 0), -EINVAL, "min_events 9 above max_events 8");
  ASSERT_FAILS(kvik_batch_cancel(NULL), -EINVAL, "NULL batch");
  kvik_batch_free(b);
  kvik_file_free(r);
  kvik_file_free(w);
  kvik_file_free(closed);
  free(wpath);
  printf("ok: validation\n");
}

/* An operation holds its place from submission until its completion is collected. */
static void test_max_ops(void) {
  kvik_file *f = open_file(ref_path, "r");
  unsigned char *buf = calloc(8, 64 * KiB);
  kvik_batch_op ops[8];
  kvik_batch_event ev[8];
  read_ops(ops, f, buf, 5, 0);
  kvik_batch *b = batch_new(4);
  ASSERT_FAILS(kvik_batch_submit(b, ops, 5), -EAGAIN, "operation 4");
  ASSERT_OK(kvik_batch_submit(b, ops, 4));
  ASSERT_FAILS(kvik_batch_submit(b, ops + 4, 1), -EAGAIN, "operation 0");
  ASSERT_EQ(kvik_batch_wait(b, 4, ev, 4, FOREVER), 4); /* done, but not yet collected ... */
  ASSERT_OK(kvik_batch_submit(b, ops + 4, 1));        /* ... now they are */
  ASSERT_EQ(kvik_batch_wait(b, 1, ev, 4, FOREVER), 1);
  ASSERT(ev[0].cookie == cookie_of(4));
  ASSERT_SAME_BYTES(buf, ref, 5 * 64 * KiB);
  kvik_batch_free(b);
  kvik_file_free(f);
  free(buf);
  printf("ok: -EAGAIN beyond max_ops\n");
}

static void test_closed_file(void) {
  kvik_file *f = open_file(ref_path, "r");
  unsigned char buf[1000];
  kvik_batch_op op = {f, KVIK_BATCH_READ, buf, sizeof buf, 0, cookie_of(0)};
  kvik_batch *b = batch_new(2);
  ASSERT_OK(kvik_batch_submit(b, &op, 1));
  kvik_batch_event ev[2];
  collect(b, ev, 1, 1);
  expect_complete(&ev[0], 0, sizeof buf);
  ASSERT_OK(kvik_file_close(f));
  ASSERT_FAILS(kvik_batch_submit(b, &op, 1), -EBADF, "operation 0");
  ASSERT(strstr(kvik_last_error(), "closed"));
  ASSERT_EQ(kvik_batch_wait(b, 0, ev, 2, 0), 0);
  kvik_batch_free(b);
  kvik_file_free(f);
  printf("ok: closed files\n");
}

/* Pool operations cannot be stopped: cancel waits for them and they report their own results.
 * Freeing a batch with operations in flight waits for them too. */
static void test_cancel_and_free_in_flight(void) {
  kvik_file *f = open_file(held_path, "r");
  unsigned char *buf = calloc(8, 64 * KiB);
  kvik_batch_op ops[8];
  kvik_batch_event ev[8];
  read_ops(ops, f, buf, 3, 0);
  kvik_batch *b = batch_new(8);
  atomic_store(&shim.gate_closed, 1);
  ASSERT_OK(kvik_batch_submit(b, ops, 3));
  pthread_t opener;
  ASSERT_EQ(pthread_create(&opener, NULL, open_gate_later, NULL), 0);
  ASSERT_OK(kvik_batch_cancel(b));
  ASSERT_EQ(kvik_batch_wait(b, 0, ev, 8, 0), 3); /* all done already */
  for (unsigned i = 0; i < 3; i++) expect_complete(&ev[i], index_of(&ev[i], 3), 64 * KiB);
  ASSERT_SAME_BYTES(buf, ref, 3 * 64 * KiB);
  ASSERT_OK(kvik_batch_cancel(b)); /* nothing in flight */
  pthread_join(opener, NULL);

  atomic_store(&shim.gate_closed, 1);
  read_ops(ops, f, buf, 8, 0);
  ASSERT_OK(kvik_batch_submit(b, ops, 8));
  ASSERT_EQ(pthread_create(&opener, NULL, open_gate_later, NULL), 0);
  kvik_batch_free(b);
  pthread_join(opener, NULL);
  ASSERT_SAME_BYTES(buf, ref, 8 * 64 * KiB);
  kvik_file_free(f);
  free(buf);
  printf("ok: cancel and free with pool operations in flight\n");
}

/* A batch and the thread's message: a successful wait leaves it, although an operation failed. */
static void test_failed_operation(void) {
  kvik_file *f = open_file(held_path, "r");
  unsigned char buf[100];
  atomic_store(&shim.read_errno, EIO);
  atomic_store(&shim.read_fail_at, 1);
  kvik_batch_op op = {f, KVIK_BATCH_READ, buf, sizeof buf, 0, cookie_of(0)};
  kvik_batch *b = batch_new(1);
  ASSERT_OK(kvik_batch_submit(b, &op, 1));
  kvik_file_close(NULL); /* leaves a message to keep */
  char before[256];
  snprintf(before, sizeof before, "%s", kvik_last_error());
  kvik_batch_event ev;
  ASSERT_EQ(kvik_batch_wait(b, 1, &ev, 1, FOREVER), 1);
  ASSERT_EQ(ev.status, KVIK_BATCH_FAILED);
  ASSERT_EQ(ev.result, -EIO);
  ASSERT(strcmp(kvik_last_error(), before) == 0);
  shim_reset();
  kvik_batch_free(b);
  kvik_file_free(f);
  printf("ok: a failed pool operation\n");
}

static void test_host(void) {
  test_validation();
  test_max_ops();
  test_closed_file();
  test_scattered_reads(0, NOPS, 300 * KiB);
  test_writes(0, NOPS);
  test_waiting();
  test_waiting_beside_done();
  test_cancel_and_free_in_flight();
  test_failed_operation();
}

/* ---- io_uring ------------------------------------------------------------------------------- */

static int ring_available; /* kvik_io_uring_supported(): else the pool serves all, as checked */

/* io_uring instances this process holds. */
static int rings_open(void) {
  DIR *d = opendir("/proc/self/fd");
  ASSERT(d != NULL);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    char link[300], target[64];
    snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(link, target, sizeof target - 1);
    if (len > 0) target[len] = '\0';
    n += len > 0 && strcmp(target, "anon_inode:[io_uring]") == 0;
  }
  closedir(d);
  return n;
}

static void set_io_uring(int64_t mode) { ASSERT_OK(kvik_setting_set(KVIK_SETTING_IO_URING, mode)); }

/* One read of `size` bytes at offset 0 through a new batch: whether it set up a ring. */
static int read_sets_up_ring(kvik_file *f, unsigned char *buf, size_t size) {
  int before = rings_open();
  kvik_batch *b = batch_new(2);
  kvik_batch_op op = {f, KVIK_BATCH_READ, buf, size, 0, cookie_of(0)};
  ASSERT_OK(kvik_batch_submit(b, &op, 1));
  int during = rings_open() - before;
  kvik_batch_event ev;
  collect(b, &ev, 1, 1);
  expect_complete(&ev, 0, size);
  ASSERT_SAME_BYTES(buf, ref, size);
  kvik_batch_free(b);
  ASSERT_EQ(rings_open(), before);
  return during;
}

/* Whether the page cache of `path` can be emptied here (not where the file system keeps its
 * files in memory, as tmpfs does): empties it if so. Pages that the kernel is still reading ahead
 * for an earlier read are locked, and a drop leaves them: under load that readahead took tens of
 * milliseconds, so the drop is asked again for up to a second. */
static int drop_cache(const char *path) {
  size_t resident = 0, total = 0;
  for (int tries = 0; tries < 100; tries++) {
    ASSERT_OK(kvik_page_cache_drop(path));
    ASSERT_OK(kvik_page_cache_info(path, &resident, &total));
    if (resident == 0) return 1;
    usleep(10000);
  }
  return 0;
}

/* Whether preadv2(RWF_NOWAIT) reads `path` (not on kernels before 4.14, nor on file systems
 * without it, such as tmpfs before Linux 6.6). */
static int nowait_reads(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  unsigned char byte;
  struct iovec one = {&byte, 1};
  ssize_t n = preadv2(fd, &one, 1, 0, RWF_NOWAIT);
  close(fd);
  return n == 1 || (n < 0 && errno == EAGAIN);
}

/* Which operations OFF, AUTO and ON give io_uring (GDS threshold 1 MiB, direct IO off). Small
 * reads the page cache holds are read within kvik_batch_submit() under AUTO where RWF_NOWAIT
 * works: no ring is set up for them; those it does not hold go to the ring. */
static void test_ring_routing(void) {
  kvik_file *f = open_file(ref_path, "r");
  unsigned char *buf = malloc(2 * MiB);
  const struct {
    int64_t mode;
    size_t size;
    int cold, ring;
  } cases[] = {{KVIK_OFF, 4 * KiB, 0, 0},  {KVIK_AUTO, 2 * MiB, 0, 0}, {KVIK_AUTO, 4 * KiB, 0, 0},
               {KVIK_AUTO, 4 * KiB, 1, 1}, {KVIK_ON, 2 * MiB, 0, 1},   {KVIK_ON, 4 * KiB, 0, 1}};
  int can_drop = drop_cache(ref_path), nowait = nowait_reads(ref_path);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (cases[i].cold && !can_drop) {
      printf("skip: a small read the page cache does not hold (it cannot be emptied here)\n");
      continue;
    }
    set_io_uring(cases[i].mode);
    if (cases[i].cold) ASSERT(drop_cache(ref_path));
    else ASSERT_EQ(kvik_file_read(f, buf, cases[i].size, 0), cases[i].size); /* cached */
    int ring = cases[i].ring || (cases[i].mode == KVIK_AUTO && cases[i].size < MiB && !nowait);
    if (read_sets_up_ring(f, buf, cases[i].size) != (ring && ring_available))
      FAIL_AT("mode %lld, %zu bytes%s: io_uring %s", (long long)cases[i].mode, cases[i].size,
              cases[i].cold ? " (not cached)" : "",
              ring && ring_available ? "not used" : "used");
  }
  free(buf);
  kvik_file_free(f);
  printf("ok: io_uring takes what KVIK_SETTING_IO_URING says (%s)\n", ring_available ? "available" : "unavailable");
}

/* O_DIRECT through the ring: aligned reads at random block offsets, some reaching past the end
 * of the file, which must leave the bytes past it untouched; AUTO takes them although large.
 * Device memory gets them through the staging arena, whose pieces are aligned. */
static void test_ring_direct(int device) {
  const char *tmpdir = getenv("TMPDIR");
  char *saved = tmpdir ? strdup(tmpdir) : NULL;
  setenv("TMPDIR", ".", 1); /* the build tree, where O_DIRECT works when /tmp lacks it */
  char *ddir = test_mkdtemp();
  if (saved) setenv("TMPDIR", saved, 1);
  else unsetenv("TMPDIR");
  free(saved);
  if (kvik_direct_io_supported(ddir) != 1) {
    printf("skip: O_DIRECT through io_uring (not supported in the working directory)\n");
    test_rmdir(ddir);
    return;
  }
  char *path = test_path(ddir, "direct");
  test_write_file(path, ref, FILE_BYTES);
  kvik_file *f = open_file(path, "r");
  const size_t block = 4096, area = 20 * block;
  unsigned char *got = malloc(NOPS * area), *expect = malloc(NOPS * area);
  mem m = mem_new(device, NOPS * area);
  ASSERT_EQ((uintptr_t)m.ptr % block, 0);
  memset(expect, 0xAB, NOPS * area);
  mem_put(&m, 0, expect, NOPS * area);
  kvik_batch_op ops[NOPS];
  for (unsigned i = 0; i < NOPS; i++) {
    size_t size = block * (1 + test_below(&rng, 16));
    size_t offset = block * test_below(&rng, FILE_BYTES / block + 1);
    if (i % 4 == 0) offset = (FILE_BYTES / block - test_below(&rng, 4)) * block; /* past the end */
    ops[i] = (kvik_batch_op){f, KVIK_BATCH_READ, m.ptr + i * area, size, (int64_t)offset, cookie_of(i)};
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 1));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
  set_io_uring(KVIK_AUTO);
  /* Out of the page cache, O_DIRECT through the ring; in it, through the pool and the cache
   * (issue 29): no ring then. */
  for (int cached = 0; cached < 2; cached++) {
    size_t n;
    if (cached) free(test_read_file(path, &n));
    else ASSERT_OK(kvik_page_cache_drop(path));
    memset(expect, 0xAB, NOPS * area);
    mem_put(&m, 0, expect, NOPS * area);
    int before = rings_open();
    kvik_batch *b = batch_new(NOPS);
    ASSERT_OK(kvik_batch_submit(b, ops, NOPS));
    ASSERT_EQ(rings_open() - before, cached ? 0 : ring_available);
    kvik_batch_event ev[NOPS];
    collect(b, ev, NOPS, 9);
    for (unsigned i = 0; i < NOPS; i++) {
      size_t want = expected_read(ops[i].file_offset, ops[i].size);
      expect_complete(&ev[i], i, want);
      memcpy(expect + i * area, ref + ops[i].file_offset, want);
    }
    mem_get(&m, 0, got, NOPS * area);
    long long diff = test_first_diff(got, expect, NOPS * area);
    if (diff >= 0) FAIL_AT("memory differs at byte %lld (operation %lld)", diff, diff / (long long)area);
    kvik_batch_free(b);
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 0));
  kvik_file_free(f);
  mem_free(&m);
  free(got);
  free(expect);
  free(path);
  test_rmdir(ddir);
  printf("ok: %u O_DIRECT reads into %s memory through io_uring, some past the end of the file\n", NOPS,
         device ? "device" : "host");
}

/* Errors the kernel reports come back as the operation's code: a buffer that is not mapped, a
 * device that is full. */
static void test_ring_failures(void) {
  set_io_uring(KVIK_ON);
  kvik_file *f = open_file(ref_path, "r"), *full = open_file("/dev/full", "w");
  void *nowhere = mmap(NULL, 4 * KiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT(nowhere != MAP_FAILED);
  unsigned char data[1000] = {1};
  kvik_batch_op ops[2] = {{f, KVIK_BATCH_READ, nowhere, 4 * KiB, 0, cookie_of(0)},
                          {full, KVIK_BATCH_WRITE, data, sizeof data, 0, cookie_of(1)}};
  kvik_batch *b = batch_new(2);
  ASSERT_OK(kvik_batch_submit(b, ops, 2));
  kvik_batch_event ev[2];
  collect(b, ev, 2, 2);
  const int codes[2] = {-EFAULT, -ENOSPC};
  for (unsigned i = 0; i < 2; i++)
    if (ev[i].status != KVIK_BATCH_FAILED || ev[i].result != codes[i])
      FAIL_AT("operation %u: status %d, result %zd; expected %s", i, ev[i].status, ev[i].result,
              kvik_err_name(codes[i]));
  kvik_batch_free(b);
  munmap(nowhere, 4 * KiB);
  kvik_file_free(full);
  kvik_file_free(f);
  printf("ok: io_uring operations that fail report their code\n");
}

/* Cancel with reads in flight: each reports its bytes, or CANCELED having moved none (the buffer
 * as it was). Then a batch freed with reads in flight. */
static void test_ring_cancel(void) {
  set_io_uring(KVIK_ON);
  kvik_file *f = open_file(ref_path, "r");
  unsigned char *buf = malloc(NOPS * 64 * KiB);
  memset(buf, 0xAB, NOPS * 64 * KiB);
  kvik_batch_op ops[NOPS];
  for (unsigned i = 0; i < NOPS; i++)
    ops[i] = (kvik_batch_op){f, KVIK_BATCH_READ, buf + i * 64 * KiB, 64 * KiB, (int64_t)(i * 64 * KiB), cookie_of(i)};
  ASSERT_OK(kvik_page_cache_drop(ref_path));
  kvik_batch *b = batch_new(NOPS);
  ASSERT_OK(kvik_batch_submit(b, ops, NOPS));
  ASSERT_OK(kvik_batch_cancel(b));
  kvik_batch_event ev[NOPS];
  ASSERT_EQ(kvik_batch_wait(b, 0, ev, NOPS, 0), NOPS); /* nothing left in flight */
  unsigned canceled = 0, untouched[64 * KiB / sizeof(unsigned)];
  memset(untouched, 0xAB, sizeof untouched);
  for (unsigned k = 0; k < NOPS; k++) {
    unsigned i = index_of(&ev[k], NOPS);
    if (ev[k].status == KVIK_BATCH_CANCELED) {
      ASSERT_EQ(ev[k].result, -ECANCELED);
      ASSERT_SAME_BYTES(buf + i * 64 * KiB, untouched, 64 * KiB);
      canceled++;
    } else {
      expect_complete(&ev[k], i, 64 * KiB);
      ASSERT_SAME_BYTES(buf + i * 64 * KiB, ref + i * 64 * KiB, 64 * KiB);
    }
  }
  ASSERT_OK(kvik_page_cache_drop(ref_path));
  ASSERT_OK(kvik_batch_submit(b, ops, NOPS));
  kvik_batch_free(b);
  free(buf);
  kvik_file_free(f);
  printf("ok: cancel and free with io_uring reads in flight (%u of %u canceled)\n", canceled, NOPS);
}

static void test_ring(void) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 1 << 20));
  test_ring_routing();
  set_io_uring(KVIK_ON);
  test_scattered_reads(0, NOPS, 300 * KiB);
  test_writes(0, NOPS);
  test_ring_failures();
  test_ring_cancel();
  test_ring_direct(0);
  set_io_uring(KVIK_AUTO);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
}

/* ---- io_uring with device memory ------------------------------------------------------------ */

/* A small device read sets up a ring: the staging arena serves device memory. Host memory in the
 * same batch is read into where it is, here on the stack, above the arena in the address space. */
static void test_ring_device_routing(void) {
  kvik_file *f = open_file(ref_path, "r");
  mem m = mem_new(1, 4 * KiB);
  unsigned char host[4 * KiB], got[4 * KiB];
  int before = rings_open();
  kvik_batch *b = batch_new(2);
  kvik_batch_op ops[2] = {{f, KVIK_BATCH_READ, m.ptr, 4 * KiB, 0, cookie_of(0)},
                          {f, KVIK_BATCH_READ, host, sizeof host, 4 * KiB, cookie_of(1)}};
  ASSERT_OK(kvik_batch_submit(b, ops, 2));
  ASSERT_EQ(rings_open() - before, ring_available);
  kvik_batch_event ev[2];
  collect(b, ev, 2, 2);
  expect_complete(&ev[0], 0, 4 * KiB);
  expect_complete(&ev[1], 1, sizeof host);
  mem_get(&m, 0, got, sizeof got);
  ASSERT_SAME_BYTES(got, ref, sizeof got);
  ASSERT_SAME_BYTES(host, ref + 4 * KiB, sizeof host);
  kvik_batch_free(b);
  mem_free(&m);
  kvik_file_free(f);
}

/* More staged bytes than the arena holds (64 MiB: five reads of 12 MiB fit), and one read larger
 * than a piece may be: the pool takes what the arena cannot, with the same results. */
static void test_ring_device_overflow(void) {
  enum { N = 8 };
  const size_t area = 20 * MiB;
  kvik_file *f = open_file(ref_path, "r");
  mem m = mem_new(1, N * area);
  unsigned char *got = malloc(FILE_BYTES);
  kvik_batch_op ops[N];
  for (unsigned i = 0; i < N; i++)
    ops[i] = (kvik_batch_op){f, KVIK_BATCH_READ, m.ptr + i * area, i == 0 ? area : 12 * MiB, (int64_t)(i * MiB),
                             cookie_of(i)};
  kvik_batch *b = batch_new(N);
  ASSERT_OK(kvik_batch_submit(b, ops, N));
  kvik_batch_event ev[N];
  collect(b, ev, N, 3);
  for (unsigned i = 0; i < N; i++) {
    size_t want = expected_read(ops[i].file_offset, ops[i].size);
    expect_complete(&ev[i], i, want);
    mem_get(&m, i * area, got, want);
    ASSERT_SAME_BYTES(got, ref + ops[i].file_offset, want);
  }
  kvik_batch_free(b);
  free(got);
  mem_free(&m);
  kvik_file_free(f);
  printf("ok: device reads beyond the staging arena's room run on the pool\n");
}

/* A copy between the arena and the device that fails fails its operation alone, with the
 * driver's code; the fake CUDA driver fails it on request. */
static void test_ring_device_copy_failures(void) {
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  fake_cuda_fail_fn fail = cuda ? (fake_cuda_fail_fn)dlsym(cuda, "fake_cuda_fail") : NULL;
  if (!fail) {
    printf("skip: failed staging copies (the CUDA driver is not the fake)\n");
    if (cuda) dlclose(cuda);
    return;
  }
  kvik_file *f = open_file(ref_path, "r+");
  mem m = mem_new(1, 2 * 64 * KiB);
  kvik_batch *b = batch_new(2);
  const char *copies[2] = {"cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2"};
  const kvik_batch_opcode opcodes[2] = {KVIK_BATCH_READ, KVIK_BATCH_WRITE};
  /* What the writes would write: the file's own bytes for the first, others for the second. */
  unsigned char other[64 * KiB];
  memset(other, 0x5A, sizeof other);
  for (unsigned k = 0; k < 2; k++) {
    fail(copies[k], 2, CUDA_ERROR_OUT_OF_MEMORY);
    kvik_batch_op ops[2];
    for (unsigned i = 0; i < 2; i++)
      ops[i] = (kvik_batch_op){f, opcodes[k], m.ptr + i * 64 * KiB, 64 * KiB, (int64_t)(i * 64 * KiB), cookie_of(i)};
    if (opcodes[k] == KVIK_BATCH_WRITE) {
      mem_put(&m, 0, ref, 64 * KiB);
      mem_put(&m, 64 * KiB, other, sizeof other);
    }
    ASSERT_OK(kvik_batch_submit(b, ops, 2));
    kvik_batch_event ev[2];
    collect(b, ev, 2, 2);
    /* Reads are copied in the order they end, so either may be the one whose copy fails; the
     * copies of writes are queued in the order of the operations. */
    unsigned failed = opcodes[k] == KVIK_BATCH_WRITE || ev[0].status != KVIK_BATCH_FAILED;
    expect_complete(&ev[!failed], !failed, 64 * KiB);
    if (ev[failed].status != KVIK_BATCH_FAILED || ev[failed].result != KVIK_ECUDA_BASE - CUDA_ERROR_OUT_OF_MEMORY)
      FAIL_AT("%s failed: status %d, result %zd", copies[k], ev[failed].status, ev[failed].result);
  }
  /* The file is as it was: the write whose copy failed wrote nothing, the other its own bytes. */
  size_t len;
  unsigned char *content = test_read_file(ref_path, &len);
  ASSERT_EQ(len, FILE_BYTES);
  ASSERT_SAME_BYTES(content, ref, len);
  free(content);
  kvik_batch_free(b);
  mem_free(&m);
  kvik_file_free(f);
  dlclose(cuda);
  printf("ok: a failed staging copy fails its operation alone\n");
}

/* Device memory through the ring's staging arena: everything host memory gets, checked the same
 * way. */
static void test_ring_device(void) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 1 << 20));
  set_io_uring(KVIK_AUTO);
  test_ring_device_routing();
  set_io_uring(KVIK_ON);
  test_scattered_reads(1, NOPS, 300 * KiB);
  test_writes(1, NOPS);
  test_ring_device_overflow();
  test_ring_device_copy_failures();
  test_ring_direct(1);
  set_io_uring(KVIK_AUTO);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
  printf("ok: device memory through io_uring's staging arena (io_uring %s)\n",
         ring_available ? "available" : "unavailable");
}

/* Whether a ring of this thread may register a buffer of `len` bytes now (it is unregistered at
 * once). */
static int ring_registers(size_t len) {
  struct io_uring_params params;
  memset(&params, 0, sizeof params);
  int fd = (int)syscall(__NR_io_uring_setup, 4, &params);
  if (fd < 0) return 0;
  struct iovec iov = {mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), len};
  ASSERT(iov.iov_base != MAP_FAILED);
  int registered = syscall(__NR_io_uring_register, fd, IORING_REGISTER_BUFFERS, &iov, 1) == 0;
  close(fd);
  munmap(iov.iov_base, len);
  return registered;
}

/* Take from this thread the right to pin memory past RLIMIT_MEMLOCK (CAP_IPC_LOCK, which root
 * has), and lower that limit to PIN_LIMIT, as an unprivileged user may find it (8 MiB is
 * common): enough for a ring, whose memory counts too, and for a part of the 64 MiB staging
 * arena. The arena lies in transparent huge pages where the system gives them, and io_uring counts
 * a huge page whole against the limit, so the limit is above one. Returns whether io_uring then
 * refuses to register a buffer of 16 MiB. */
#define PIN_LIMIT (4 * MiB)

static int forbid_pinning(void) {
  struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct caps[2];
  if (syscall(SYS_capget, &head, caps) == 0) {
    caps[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    ASSERT(syscall(SYS_capset, &head, caps) == 0);
  }
  struct rlimit limit;
  ASSERT(getrlimit(RLIMIT_MEMLOCK, &limit) == 0);
  if (limit.rlim_cur > PIN_LIMIT) limit.rlim_cur = PIN_LIMIT;
  ASSERT(setrlimit(RLIMIT_MEMLOCK, &limit) == 0);
  return !ring_registers(16 * MiB);
}

/* VmPin of /proc/self/status, in KiB: among others, what io_uring pinned for registered buffers. */
static long pinned_kib(void) {
  FILE *status = fopen("/proc/self/status", "r");
  ASSERT(status != NULL);
  char line[256];
  long kib = -1;
  while (kib < 0 && fgets(line, sizeof line, status))
    if (sscanf(line, "VmPin: %ld kB", &kib) != 1) kib = -1;
  fclose(status);
  return kib;
}

/* Whether VmPin reaches 0 within 5 s: the rings of batches freed before release their
 * registrations after the close, from a kernel worker. */
static int earlier_pins_released(void) {
  for (int i = 0; i < 500; i++) {
    if (pinned_kib() == 0) return 1;
    usleep(10000);
  }
  return 0;
}

/* A new batch's first device read, of 64 KiB: VmPin in KiB right after it, the batch then freed;
 * -1 where the rings of earlier batches kept their registrations. */
static long pinned_by_first_read(kvik_file *f, mem *dev) {
  if (!earlier_pins_released()) return -1;
  kvik_batch *b = batch_new(1);
  kvik_batch_op op = {f, KVIK_BATCH_READ, dev->ptr, 64 * KiB, 0, cookie_of(0)};
  ASSERT_OK(kvik_batch_submit(b, &op, 1));
  kvik_batch_event ev;
  ASSERT_EQ(kvik_batch_wait(b, 1, &ev, 1, FOREVER), 1);
  expect_complete(&ev, 0, 64 * KiB);
  long pinned = pinned_kib();
  kvik_batch_free(b);
  return pinned;
}

/* Under the limit, the ring registers the part of the arena that fits: a batch's first device
 * operation makes io_uring pin some of it, and no more than the limit. The limit counts what all
 * processes of the user registered, the other test programs' too: where it leaves no room even
 * for one 64 KiB unit, nothing can be registered, and a unit of the arena counts as the huge page
 * it lies in, where it lies in one: so the room is probed with 2 MiB. Their registrations come
 * and go meanwhile (a ring's are released by a kernel worker after its close), so a read that
 * pinned nothing where 2 MiB fit just after is tried again, a few times, before it fails. */
static void check_arena_partly_registered(void) {
  kvik_file *f = open_file(ref_path, "r");
  mem dev = mem_new(1, 64 * KiB);
  long pinned = 0;
  int no_room = 0;
  for (int attempt = 0; attempt < 5 && pinned == 0 && !no_room; attempt++) {
    pinned = pinned_by_first_read(f, &dev);
    no_room = pinned == 0 && !ring_registers(2 * MiB);
  }
  mem_free(&dev);
  kvik_file_free(f);
  if (pinned < 0) {
    printf("skip: how much of the arena is registered (VmPin stays at %ld KiB)\n", pinned_kib());
    return;
  }
  if ((pinned == 0 && !no_room) || pinned > (long)(PIN_LIMIT / KiB))
    FAIL_AT("the ring pinned %ld KiB of the arena under a limit of %zu KiB", pinned, PIN_LIMIT / KiB);
  if (no_room) printf("skip: how much of the arena is registered (the limit has no room left)\n");
  else printf("ok: the first %ld KiB of the staging arena registered under a %zu KiB RLIMIT_MEMLOCK\n", pinned,
              PIN_LIMIT / KiB);
}

/* Where io_uring may not pin all of the staging arena, the batch's device operations go through
 * the part it registered and the rest unregistered: the same results. Last of the device cases:
 * the process keeps the limit. */
static void test_ring_device_unpinned(void) {
  if (!ring_available || !forbid_pinning()) {
    printf("skip: device memory through a staging arena registered in part (%s)\n",
           ring_available ? "io_uring registers buffers all the same" : "no io_uring");
    return;
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 1 << 20));
  set_io_uring(KVIK_ON);
  check_arena_partly_registered();
  test_scattered_reads(1, NOPS, 300 * KiB);
  test_writes(1, NOPS);
  set_io_uring(KVIK_AUTO);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
  printf("ok: device memory through a staging arena registered in part\n");
}

/* ---- Small reads tried as host memory ------------------------------------------------------- */

/* Small reads are tried within kvik_batch_submit() before their memory is classified (GDS
 * threshold 1 MiB, io_uring AUTO): this thread's message, which a failed call set, and a monitor,
 * which counts no failure. */
typedef struct small_run {
  kvik_file *f;
  kvik_monitor *monitor;
  char before[1024];
  fake_cuda_calls_fn calls; /* the fake driver's counters; NULL without it */
  long kinds_asked;         /* cuPointerGetAttributes calls when the run began */
} small_run;

static void small_run_begin(small_run *r) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 1 << 20));
  set_io_uring(KVIK_AUTO);
  free(test_read_file(ref_path, &(size_t){0})); /* in the page cache: the tries find it there */
  r->f = open_file(ref_path, "r");
  kvik_file *none;
  ASSERT(kvik_file_open("/nonexistent/kvik-batch-small", "r", 0, &none) < 0);
  snprintf(r->before, sizeof r->before, "%s", kvik_last_error());
  ASSERT_OK(kvik_monitor_create(&r->monitor));
  r->calls = (fake_cuda_calls_fn)fake_cuda_symbol("fake_cuda_calls");
  r->kinds_asked = r->calls ? r->calls("cuPointerGetAttributes") : 0;
}

/* Ends the run: no operation counted twice (`most` at most of each direction) nor as failed.
 * Returns how many times the driver was asked about pointers; -1 without the fake driver. */
static long small_run_end(small_run *r, uint64_t most) {
  ASSERT(strcmp(kvik_last_error(), r->before) == 0);
  kvik_summary sum = {.struct_size = sizeof sum};
  ASSERT_OK(kvik_monitor_read(r->monitor, &sum));
  kvik_monitor_free(r->monitor);
  ASSERT_EQ(sum.num_errors, 0);
  ASSERT(sum.num_reads <= most && sum.num_writes <= most);
  kvik_file_free(r->f);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
  return r->calls ? r->calls("cuPointerGetAttributes") - r->kinds_asked : -1;
}

/* Batches of small reads into host memory at depths 1 to 8 and 32, checked byte for byte: all
 * read within kvik_batch_submit(), none asking the driver what their memory is. Before, every
 * operation asked cuPointerGetAttributes where CUDA was loaded. */
static void test_small_host_depths(void) {
  enum { MAX_DEPTH = 32, SLOT = 3 * 4096 + 100 };
  small_run run;
  small_run_begin(&run);
  unsigned char *buf = malloc(MAX_DEPTH * SLOT);
  kvik_batch *b = batch_new(MAX_DEPTH);
  static const unsigned depths[] = {1, 2, 3, 4, 5, 6, 7, 8, 32};
  for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++) {
    unsigned n = depths[d];
    for (int round = 0; round < 4; round++) {
      kvik_batch_op ops[MAX_DEPTH];
      for (unsigned i = 0; i < n; i++) {
        size_t size = i % 3 ? 4096 : 1 + test_below(&rng, SLOT);
        int64_t at = (int64_t)test_below(&rng, FILE_BYTES);
        if (i % 4 == 1) at = (int64_t)(FILE_BYTES - test_below(&rng, size)); /* past the end */
        ops[i] = (kvik_batch_op){run.f, KVIK_BATCH_READ, buf + i * SLOT, size, at, cookie_of(i)};
      }
      memset(buf, 0xAB, MAX_DEPTH * SLOT);
      ASSERT_OK(kvik_batch_submit(b, ops, n));
      kvik_batch_event ev[NOPS * 4];
      collect(b, ev, n, n);
      for (unsigned i = 0; i < n; i++) {
        size_t want = expected_read(ops[i].file_offset, ops[i].size);
        expect_complete(&ev[i], i, want);
        ASSERT_SAME_BYTES(buf + i * SLOT, ref + ops[i].file_offset, want);
        if (want < SLOT) ASSERT_EQ(buf[i * SLOT + want], 0xAB);
      }
    }
  }
  kvik_batch_free(b);
  free(buf);
  long asked = small_run_end(&run, 0);
  if (nowait_reads(ref_path) && asked >= 0) ASSERT_EQ(asked, 0);
  printf("ok: small host reads at depths 1 to 32%s\n",
         asked < 0 ? "" : ", asking the driver nothing about their memory");
}

/* Random submissions and waits against a model of the batch: reads of 0 bytes to 2 MiB (the
 * small ones done within kvik_batch_submit, the large ones on the pool), some past the end of the
 * file, up to 10 at a time into a batch of 32, and one submission in 8 of 16 to 24 small reads;
 * now and then the file's pages are dropped, so that reads the batch tries, trusting the page
 * cache or not, meet storage. A submission fails with -EAGAIN exactly where it would put more than
 * 32 operations in flight (done but not collected counts), and nothing of it starts; a wait
 * returns no more than its maximum and than are in flight, at least its minimum unless it may not
 * wait, each operation's event once, with its bytes. */
static void test_random_against_model(void) {
  enum { MAX_OPS = 32, MOST = 24, SLOT = 2 * MiB + GUARD, STEPS = 3000 };
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 1 << 20)); /* the small ones tried */
  set_io_uring(KVIK_AUTO);
  free(test_read_file(ref_path, &(size_t){0})); /* in the page cache: the tries find it there */
  kvik_file *f = open_file(ref_path, "r");
  unsigned char *buf = malloc((size_t)MAX_OPS * SLOT);
  kvik_batch *b = batch_new(MAX_OPS);
  /* Every operation submitted, by cookie - 1; its cookie NULL once its event came. */
  kvik_batch_op *sent = calloc((size_t)STEPS * MOST, sizeof *sent);
  unsigned *slot_of = calloc((size_t)STEPS * MOST, sizeof *slot_of);
  unsigned free_slots[MAX_OPS], nfree = MAX_OPS, in_flight = 0, next_cookie = 0;
  ASSERT(sent && slot_of);
  for (unsigned i = 0; i < MAX_OPS; i++) free_slots[i] = i;
  for (int step = 0; step < STEPS; step++) {
    if (test_below(&rng, 200) == 0) /* the tries, trusting the page cache or not, meet storage */
      ASSERT_OK(kvik_page_cache_drop(ref_path));
    if (test_below(&rng, 2) == 0) { /* a submission: one in 8 of many small reads */
      int many = test_below(&rng, 8) == 0;
      unsigned n = many ? 16 + (unsigned)test_below(&rng, MOST - 15)
                        : 1 + (unsigned)test_below(&rng, 10);
      kvik_batch_op ops[MOST];
      for (unsigned i = 0; i < n; i++) {
        size_t size = many ? test_below(&rng, 16 * KiB)
                      : test_below(&rng, 4) ? test_below(&rng, 64 * KiB)
                                            : test_below(&rng, 2 * MiB);
        int64_t at = (int64_t)test_below(&rng, FILE_BYTES + 100);
        unsigned slot = i < nfree ? free_slots[nfree - 1 - i] : 0;
        ops[i] = (kvik_batch_op){f,  KVIK_BATCH_READ, buf + (size_t)slot * SLOT, size,
                                 at, (void *)(uintptr_t)(next_cookie + i + 1)};
      }
      int rc = kvik_batch_submit(b, ops, n);
      if (in_flight + n > MAX_OPS) {
        ASSERT_EQ(rc, -EAGAIN);
        continue;
      }
      ASSERT_OK(rc);
      for (unsigned i = 0; i < n; i++) {
        unsigned cookie = next_cookie + i, slot = free_slots[--nfree];
        sent[cookie] = ops[i];
        slot_of[cookie] = slot;
        ASSERT(ops[i].buf == buf + (size_t)slot * SLOT);
      }
      next_cookie += n;
      in_flight += n;
    } else { /* a wait */
      unsigned most = 1 + (unsigned)test_below(&rng, MAX_OPS);
      unsigned least = (unsigned)test_below(&rng, (in_flight < most ? in_flight : most) + 1);
      kvik_batch_event ev[MAX_OPS];
      int64_t timeout = test_below(&rng, 4) ? FOREVER : 0; /* 0: fewer than `least` may come */
      int got = kvik_batch_wait(b, least, ev, most, timeout);
      ASSERT(got >= (timeout ? (int)least : 0) && got <= (int)most && got <= (int)in_flight);
      for (int k = 0; k < got; k++) {
        uintptr_t cookie = (uintptr_t)ev[k].cookie - 1;
        ASSERT(cookie < next_cookie);
        kvik_batch_op *op = &sent[cookie];
        ASSERT(op->cookie == ev[k].cookie); /* in flight: not reported before */
        size_t want = expected_read(op->file_offset, op->size);
        expect_complete(&ev[k], (unsigned)cookie, want);
        ASSERT_SAME_BYTES(op->buf, ref + op->file_offset, want);
        op->cookie = NULL;
        free_slots[nfree++] = slot_of[cookie];
      }
      in_flight -= (unsigned)got;
    }
  }
  kvik_batch_event ev[MAX_OPS];
  while (in_flight) {
    int got = kvik_batch_wait(b, 1, ev, MAX_OPS, FOREVER);
    ASSERT(got >= 1 && got <= (int)in_flight);
    in_flight -= (unsigned)got;
  }
  ASSERT_EQ(kvik_batch_wait(b, 0, ev, MAX_OPS, 0), 0);
  kvik_batch_free(b);
  free(buf);
  free(sent);
  free(slot_of);
  kvik_file_free(f);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
  printf("ok: %u reads in random submissions and waits, as the model says\n", next_cookie);
}

/* Small reads into device memory, tried first, fail with EFAULT and are classified then: they
 * reach the route device memory takes (with the fake cuFile, its batch), beside host reads in the
 * same submission, with the right bytes; small writes from both kinds of memory too. */
static void test_small_mixed(int cufile) {
  enum { N = 24, SLOT = 64 * KiB + GUARD };
  static const size_t sizes[] = {1, 4096, 3 * 4096 + 17, 64 * KiB, 4096, 300};
  small_run run;
  small_run_begin(&run);
  mem dev = mem_new(1, N * SLOT);
  unsigned char *host = malloc(N * SLOT), *got = malloc(N * SLOT), *fill = malloc(N * SLOT);
  memset(fill, 0xAB, N * SLOT);
  mem_put(&dev, 0, fill, N * SLOT);
  memcpy(host, fill, N * SLOT);
  kvik_batch_op ops[N];
  for (unsigned i = 0; i < N; i++) {
    int on_device = i % 3 != 0;
    size_t size = sizes[i % 6];
    int64_t at = i == N - 1 ? (int64_t)(FILE_BYTES - 10) : (int64_t)test_below(&rng, FILE_BYTES);
    unsigned char *buf = (on_device ? dev.ptr : host) + i * SLOT;
    ops[i] = (kvik_batch_op){run.f, KVIK_BATCH_READ, buf, size, at, cookie_of(i)};
  }
  kvik_batch *b = batch_new(N);
  if (cufile) fake.reset();
  ASSERT_OK(kvik_batch_submit(b, ops, N));
  if (cufile) ASSERT_EQ(fake.calls("cuFileBatchIOSubmit"), 1); /* the device reads, found late */
  kvik_batch_event ev[NOPS * 4];
  collect(b, ev, N, N);
  mem_get(&dev, 0, got, N * SLOT);
  for (unsigned i = 0; i < N; i++) {
    size_t want = expected_read(ops[i].file_offset, ops[i].size);
    expect_complete(&ev[i], i, want);
    const unsigned char *bytes = (i % 3 != 0 ? got : host) + i * SLOT;
    ASSERT_SAME_BYTES(bytes, ref + ops[i].file_offset, want);
    ASSERT_EQ(bytes[want], 0xAB);
  }
  /* The same ranges written from the memory just read, to a new file at the slots' offsets. */
  char *path = test_path(dir, "small-written");
  kvik_file *w = open_file(path, "w+");
  for (unsigned i = 0; i < N; i++) {
    ops[i].file = w;
    ops[i].opcode = KVIK_BATCH_WRITE;
    ops[i].size = expected_read(ops[i].file_offset, ops[i].size);
    ops[i].file_offset = (int64_t)(i * SLOT);
  }
  ASSERT_OK(kvik_batch_submit(b, ops, N));
  collect(b, ev, N, N);
  for (unsigned i = 0; i < N; i++) expect_complete(&ev[i], i, ops[i].size);
  kvik_file_free(w);
  size_t len;
  unsigned char *back = test_read_file(path, &len);
  for (unsigned i = 0; i < N; i++) {
    const unsigned char *bytes = (i % 3 != 0 ? got : host) + i * SLOT;
    ASSERT(len >= i * SLOT + ops[i].size);
    ASSERT_SAME_BYTES(back + i * SLOT, bytes, ops[i].size);
  }
  kvik_batch_free(b);
  small_run_end(&run, N);
  free(back);
  free(path);
  free(host);
  free(got);
  free(fill);
  mem_free(&dev);
  printf("ok: small device and host reads and writes in one batch\n");
}

/* A submission whose cuFile part fails after reads made within it: the call fails, and none of
 * its operations is in flight (their events are dropped, their slots free). */
static void test_small_then_cufile_fails(void) {
  enum { N = 8 };
  small_run run;
  small_run_begin(&run);
  mem dev = mem_new(1, N * 4096);
  unsigned char *host = malloc(N * 4096);
  kvik_batch_op ops[N];
  for (unsigned i = 0; i < N; i++)
    ops[i] = (kvik_batch_op){run.f, KVIK_BATCH_READ, (i % 2 ? dev.ptr : host) + i * 4096, 4096,
                             (int64_t)(i * 4096), cookie_of(i)};
  kvik_batch *b = batch_new(N);
  kvik_batch_event ev[NOPS * 4];
  fake.reset();
  fake.fail("cuFileBatchIOSubmit", 1, CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR);
  ASSERT_FAILS(kvik_batch_submit(b, ops, N), -CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR,
               "cuFileBatchIOSubmit");
  ASSERT_EQ(kvik_batch_wait(b, 0, ev, N, 10 * MS), 0);
  snprintf(run.before, sizeof run.before, "%s", kvik_last_error());
  ASSERT_OK(kvik_batch_submit(b, ops, N)); /* all N slots are free again */
  collect(b, ev, N, N);
  unsigned char *got = malloc(N * 4096);
  mem_get(&dev, 0, got, N * 4096);
  for (unsigned i = 0; i < N; i++) {
    expect_complete(&ev[i], i, 4096);
    ASSERT_SAME_BYTES((i % 2 ? got : host) + i * 4096, ref + i * 4096, 4096);
  }
  kvik_batch_free(b);
  small_run_end(&run, 0);
  free(got);
  free(host);
  mem_free(&dev);
  printf("ok: a failed cuFile submission forgets the reads made before it\n");
}

/* ---- cuFile ---------------------------------------------------------------------------------- */

static void set_io_delay_us(long us) {
  char text[32];
  snprintf(text, sizeof text, "%ld", us);
  setenv("FAKE_CUFILE_IO_DELAY_US", text, 1);
}

static void test_cufile_reads_and_writes(void) {
  fake.reset();
  test_scattered_reads(1, NOPS, 300 * KiB);
  test_writes(1, NOPS);
  ASSERT(fake.calls("cuFileBatchIOSubmit") > 0);
  ASSERT(fake.calls("unaligned_io") > 0); /* scattered: cuFile saw unaligned offsets */
  ASSERT_EQ(fake.calls("cuFileRead") + fake.calls("cuFileWrite"), 0); /* none went to the pool */
  ASSERT_EQ(fake.live("batches"), 0);
  printf("ok: device memory through cuFileBatchIO*\n");
}

/* Host and device operations in one batch; while host reads are held at the gate, the cuFile
 * operations still complete and are reported. */
static void test_cufile_mixed(void) {
  kvik_file *f = open_file(ref_path, "r"), *held = open_file(held_path, "r");
  mem dev = mem_new(1, 16 * 64 * KiB);
  unsigned char *host = calloc(16, 64 * KiB), *got = malloc(16 * 64 * KiB);
  /* Odd operations into device memory (cuFile), even ones into host memory (the pool); the
   * host reads 0 and 2 are of the held file. */
  kvik_batch_op ops[16];
  for (unsigned i = 0; i < 16; i++) {
    int on_device = i % 2;
    unsigned char *buf = (on_device ? dev.ptr : host) + i * 64 * KiB;
    ops[i] = (kvik_batch_op){!on_device && i < 4 ? held : f, KVIK_BATCH_READ, buf, 64 * KiB, (int64_t)(i * 64 * KiB),
                             cookie_of(i)};
  }
  kvik_batch *b = batch_new(16);
  fake.reset();
  atomic_store(&shim.gate_closed, 1);
  ASSERT_OK(kvik_batch_submit(b, ops, 16));
  ASSERT_EQ(fake.calls("cuFileBatchIOSubmit"), 1);
  kvik_batch_event ev[16];
  ASSERT_EQ(kvik_batch_wait(b, 14, ev, 16, FOREVER), 14);
  unsigned char seen[16] = {0};
  for (unsigned k = 0; k < 14; k++) seen[index_of(&ev[k], 16)] = 1;
  ASSERT(!seen[0] && !seen[2]);
  shim_open_gate();
  ASSERT_EQ(kvik_batch_wait(b, 2, ev, 16, FOREVER), 2);
  ASSERT(ev[0].cookie != ev[1].cookie && !seen[index_of(&ev[0], 16)] && !seen[index_of(&ev[1], 16)]);
  mem_get(&dev, 0, got, 16 * 64 * KiB);
  for (unsigned i = 0; i < 16; i++) {
    const unsigned char *bytes = (i % 2 ? got : host) + i * 64 * KiB;
    ASSERT_SAME_BYTES(bytes, ref + i * 64 * KiB, 64 * KiB);
  }
  kvik_batch_free(b);
  mem_free(&dev);
  free(host);
  free(got);
  kvik_file_free(f);
  kvik_file_free(held);
  printf("ok: host and device operations in one batch\n");
}

static void test_cufile_failures(void) {
  kvik_file *f = open_file(ref_path, "r");
  mem dev = mem_new(1, 8 * 64 * KiB);
  unsigned char *host = malloc(8 * 64 * KiB);
  memset(host, 0xAB, 8 * 64 * KiB);
  kvik_batch_op ops[8];
  for (unsigned i = 0; i < 8; i++)
    ops[i] = (kvik_batch_op){f, KVIK_BATCH_READ, (i % 2 ? dev.ptr : host) + i * 64 * KiB, 64 * KiB,
                             (int64_t)(i * 64 * KiB), cookie_of(i)};
  kvik_batch *b = batch_new(8);
  kvik_batch_event ev[8];

  /* cuFileBatchIOSubmit fails: nothing was submitted, the host reads included. */
  fake.reset();
  fake.fail("cuFileBatchIOSubmit", 1, CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR);
  ASSERT_FAILS(kvik_batch_submit(b, ops, 8), -CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR, "cuFileBatchIOSubmit");
  ASSERT_EQ(kvik_batch_wait(b, 0, ev, 8, 10 * MS), 0);
  for (size_t i = 0; i < 8 * 64 * KiB; i++)
    if (host[i] != 0xAB) FAIL_AT("host byte %zu was read although the submission failed", i);
  ASSERT_OK(kvik_batch_submit(b, ops, 8)); /* and the batch goes on */
  collect(b, ev, 8, 8);
  for (unsigned i = 0; i < 8; i++) expect_complete(&ev[i], i, 64 * KiB);

  /* cuFileBatchIOGetStatus fails: the wait says so, and the completions come with the next. */
  ASSERT_OK(kvik_batch_submit(b, ops + 1, 1));
  fake.fail("cuFileBatchIOGetStatus", 1, CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR);
  ASSERT_FAILS(kvik_batch_wait(b, 1, ev, 8, FOREVER), -CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR,
               "cuFileBatchIOGetStatus");
  ASSERT_EQ(kvik_batch_wait(b, 1, ev, 8, FOREVER), 1);
  expect_complete(&ev[0], 1, 64 * KiB);

  /* One operation fails in cuFile (a range past the end of its allocation): its event carries
   * cuFile's code, the others complete. */
  kvik_batch_op two[2] = {ops[1], ops[3]};
  two[1].size = 2 * 8 * 64 * KiB;
  ASSERT_OK(kvik_batch_submit(b, two, 2));
  ASSERT_EQ(kvik_batch_wait(b, 2, ev, 8, FOREVER), 2);
  const kvik_batch_event *bad = ev[0].cookie == two[1].cookie ? &ev[0] : &ev[1];
  const kvik_batch_event *good = bad == &ev[0] ? &ev[1] : &ev[0];
  expect_complete(good, 1, 64 * KiB);
  ASSERT_EQ(bad->status, KVIK_BATCH_FAILED);
  ASSERT_EQ(bad->result, -CU_FILE_CUDA_POINTER_RANGE_ERROR);
  ASSERT(KVIK_IS_CUFILE_ERROR((int)bad->result));
  kvik_batch_free(b);
  ASSERT_EQ(fake.live("batches"), 0);
  mem_free(&dev);
  free(host);
  kvik_file_free(f);
  printf("ok: cuFile failures\n");
}

/* cuFile's operations are canceled by cuFile: those not yet started report CANCELED, the one
 * running its result. Freeing with cuFile operations in flight leaves no batch behind. */
static void test_cufile_cancel_and_free(void) {
  kvik_file *f = open_file(ref_path, "r");
  mem dev = mem_new(1, 16 * 64 * KiB);
  unsigned char *got = malloc(16 * 64 * KiB);
  kvik_batch_op ops[16];
  for (unsigned i = 0; i < 16; i++)
    ops[i] = (kvik_batch_op){f, KVIK_BATCH_READ, dev.ptr + i * 64 * KiB, 64 * KiB, (int64_t)(i * 64 * KiB),
                             cookie_of(i)};
  kvik_batch *b = batch_new(16);
  kvik_batch_event ev[16];
  set_io_delay_us(50000); /* each cuFile operation takes 50 ms: most are still queued at the cancel */
  ASSERT_OK(kvik_batch_submit(b, ops, 16));
  ASSERT_EQ(kvik_batch_wait(b, 16, ev, 16, 5 * MS), 0); /* a timeout with cuFile alone */
  fake.reset();
  ASSERT_OK(kvik_batch_cancel(b));
  ASSERT_EQ(fake.calls("cuFileBatchIOCancel"), 1);
  ASSERT_EQ(fake.live("in_flight"), 0);
  ASSERT_EQ(kvik_batch_wait(b, 0, ev, 16, 0), 16); /* every one is done */
  unsigned canceled = 0;
  mem_get(&dev, 0, got, 16 * 64 * KiB);
  for (unsigned k = 0; k < 16; k++) {
    unsigned i = index_of(&ev[k], 16);
    if (ev[k].status == KVIK_BATCH_CANCELED) {
      canceled++;
      ASSERT_EQ(ev[k].result, -ECANCELED);
      continue;
    }
    expect_complete(&ev[k], i, 64 * KiB);
    ASSERT_SAME_BYTES(got + i * 64 * KiB, ref + i * 64 * KiB, 64 * KiB);
  }
  ASSERT(canceled >= 8);
  ASSERT_EQ(kvik_batch_wait(b, 0, ev, 16, 0), 0);

  ASSERT_OK(kvik_batch_submit(b, ops, 16));
  kvik_batch_free(b);
  set_io_delay_us(0);
  ASSERT_EQ(fake.live("batches"), 0);
  ASSERT_EQ(fake.live("in_flight"), 0);
  mem_free(&dev);
  free(got);
  kvik_file_free(f);
  printf("ok: cancel and free with cuFile operations in flight (%u of 16 canceled)\n", canceled);
}

/* More device operations than cuFile's batch takes (128 by default): the rest run on the pool,
 * in the same submission or in a later one while cuFile's entries are all taken (they are until
 * their completions are collected). */
static void test_cufile_overflow(void) {
  fake.reset();
  test_scattered_reads(1, NOPS * 3, 64 * KiB);
  ASSERT(fake.calls("cuFileBatchIOSubmit") > 0);
  ASSERT(fake.calls("cuFileRead") > 0);

  enum { N = 130, SIZE = 4096 };
  kvik_file *f = open_file(ref_path, "r");
  mem dev = mem_new(1, N * SIZE);
  kvik_batch_op ops[N];
  for (unsigned i = 0; i < N; i++)
    ops[i] = (kvik_batch_op){f, KVIK_BATCH_READ, dev.ptr + i * SIZE, SIZE, (int64_t)i * SIZE, cookie_of(i)};
  kvik_batch *b = batch_new(N);
  fake.reset();
  ASSERT_OK(kvik_batch_submit(b, ops, 128));
  ASSERT_OK(kvik_batch_submit(b, ops + 128, 2));
  ASSERT_EQ(fake.calls("cuFileBatchIOSubmit"), 1);
  kvik_batch_event ev[N];
  ASSERT_EQ(kvik_batch_wait(b, N, ev, N, FOREVER), N);
  unsigned char *got = malloc(N * SIZE);
  mem_get(&dev, 0, got, N * SIZE);
  ASSERT_SAME_BYTES(got, ref, N * SIZE);
  for (unsigned k = 0; k < N; k++) expect_complete(&ev[k], index_of(&ev[k], N), SIZE);
  kvik_batch_free(b);
  ASSERT_EQ(fake.live("batches"), 0);
  mem_free(&dev);
  free(got);
  kvik_file_free(f);
  printf("ok: beyond cuFile's batch size\n");
}

static void test_cufile(void) {
  kvik_file *f = open_file(ref_path, "r");
  ASSERT_EQ(kvik_file_backend(f, NULL, 0), KVIK_BACKEND_CUFILE);
  kvik_file_free(f);
  test_cufile_reads_and_writes();
  test_cufile_mixed();
  test_cufile_failures();
  test_cufile_cancel_and_free();
  test_cufile_overflow();
  ASSERT_EQ(fake.live("batches"), 0);
  ASSERT_EQ(fake.live("in_flight"), 0);
}

/* ---- main ------------------------------------------------------------------------------------ */

static int skip(const char *why) {
  printf("skip: %s\n", why);
  test_rmdir(dir);
  return TEST_SKIP;
}

int main(void) {
  const char *seed_env = getenv("KVIK_TEST_SEED");
  uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL);
  printf("seed %llu (KVIK_TEST_SEED to repeat)\n", (unsigned long long)seed);
  rng = seed | 1;
  int64_t compat = KVIK_COMPAT_AUTO;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_COMPAT_MODE, &compat));
  int device_run = getenv("KVIKIO_COMPAT_MODE") != NULL;
  /* cuFile needs O_DIRECT, which the working directory (the build tree) has where /tmp may not. */
  if (compat == KVIK_COMPAT_OFF) setenv("TMPDIR", ".", 1);
  dir = test_mkdtemp();
  int have_cuda = load_cuda();
  if (device_run && !have_cuda) return skip("no CUDA driver or device");
  if (compat == KVIK_COMPAT_OFF && load_fake_cufile() != 1) return skip("cuFile is not the fake of tests/fake_cufile.c");
  if (compat == KVIK_COMPAT_OFF && kvik_direct_io_supported(dir) != 1)
    return skip("the working directory does not support O_DIRECT, which cuFile needs");

  ref_path = test_path(dir, "reference");
  held_path = test_path(dir, SHIM_TARGET_MARK);
  ref = malloc(FILE_BYTES);
  test_fill(ref, FILE_BYTES, test_rand(&rng));
  test_write_file(ref_path, ref, FILE_BYTES);
  test_write_file(held_path, ref, FILE_BYTES);
  /* Every pool operation on the pool's threads, so that reads held at the gate never hold the
   * submitting thread; and threads to spare beside the held ones. */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 8));

  char why[256];
  ring_available = kvik_io_uring_supported(why, sizeof why);
  printf("%s\n", why);
  test_host();
  test_small_host_depths();
  test_random_against_model();
  if (!device_run) test_ring(); /* the plain run: io_uring serves host memory alone */
  if (!have_cuda) {
    printf("skip: device memory (no CUDA driver)\n");
  } else if (compat == KVIK_COMPAT_OFF) {
    test_cufile();
    test_small_mixed(1);
    test_small_then_cufile_fails();
  } else {
    test_scattered_reads(1, NOPS, 300 * KiB);
    test_writes(1, NOPS);
    test_ring_device();
    test_ring_device_unpinned();
    test_small_mixed(0);
  }
  /* Small operations run on the submitting thread (below the GDS threshold): the same results. */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 1 << 20));
  test_scattered_reads(0, NOPS, 300 * KiB);
  free(ref);
  free(ref_path);
  free(held_path);
  test_rmdir(dir);
  printf("ok\n");
  return 0;
}
