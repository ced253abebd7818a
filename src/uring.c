/* io_uring through its system calls. liburing is not used: most of its API is inline functions,
 * which a library loaded at run time cannot provide, and linking it would make a kernel or
 * container without io_uring a build or load problem rather than a run-time answer.
 *
 * The ring does the common case, one system call for many operations; everything else an
 * operation may need (the rest after a short count, an interrupted call, O_DIRECT refused) is
 * done by the file's own path on the collecting thread, which already handles it. */
#define _GNU_SOURCE
#include "uring.h"

#include <assert.h>
#include <errno.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "error.h"
#include "init.h"
#include "sys.h"

/* Kernel ABI values newer than some distributions' headers. */
#ifndef IORING_SETUP_SUBMIT_ALL
#define IORING_SETUP_SUBMIT_ALL (1U << 7) /* Linux 5.18 */
#endif
#ifndef IORING_SETUP_COOP_TASKRUN
#define IORING_SETUP_COOP_TASKRUN (1U << 8) /* Linux 5.19 */
#endif
#ifndef IORING_ASYNC_CANCEL_ANY
#define IORING_ASYNC_CANCEL_ANY (1U << 2) /* Linux 5.19 */
#endif

/* The most entries in the submission queue: a batch larger than this is submitted in parts. */
#define SQ_MAX 256U
/* The user_data of the cancel request, which is no operation. */
#define CANCEL_TAG UINT64_MAX

typedef struct ring_op {
  kvik__uring_op op;
  int in_flight; /* from kvik__uring_start() until reported */
  int ended;     /* done on this thread, `result` waits to be reported */
  ssize_t result;
} ring_op;

struct kvik__uring {
  int fd;
  pid_t pid; /* of the process that set it up: a forked child must not touch it */
  void *map;
  size_t map_len;
  struct io_uring_sqe *sqes;
  size_t sqes_len;
  _Atomic unsigned *sq_head, *sq_tail, *cq_head, *cq_tail;
  unsigned sq_mask, sq_entries, cq_mask, *sq_array;
  struct io_uring_cqe *cqes;
  unsigned queued;    /* in the submission queue, not yet handed to the kernel */
  unsigned in_flight; /* queued or handed over, not yet reported */
  unsigned ended;     /* in flight, but done on this thread (ring_op.ended) */
  int canceling;      /* a cancel request is out: -ECANCELED and -EINTR mean canceled */
  char *fixed;        /* the registered buffer, or NULL */
  size_t fixed_len;
  kvik__uring_rest *rest;
  unsigned max_ops;
  ring_op ops[];
};

static unsigned round_up_pow2(unsigned n) {
  unsigned p = 1;
  while (p < n) p <<= 1;
  return p;
}

static int enter(int fd, unsigned to_submit, unsigned min_complete, unsigned flags, void *arg,
                 size_t arg_len) {
  int r = kvik__io_uring_enter(fd, to_submit, min_complete, flags, arg, arg_len);
  return r < 0 ? -errno : r;
}

/* ---- setting up ---------------------------------------------------------------------------- */

/* io_uring_setup with the flags that make it cheaper where the kernel knows them. */
static int setup_fd(unsigned entries, unsigned cq_entries, struct io_uring_params *p) {
  const unsigned optional = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN;
  for (int attempt = 0; attempt < 2; attempt++) {
    memset(p, 0, sizeof *p);
    p->flags = IORING_SETUP_CQSIZE | (attempt == 0 ? optional : 0);
    p->cq_entries = cq_entries;
    int fd = kvik__io_uring_setup(entries, p);
    if (fd >= 0) return fd;
    if (errno != EINVAL) return -errno;
  }
  return -EINVAL;
}

/* A field of the shared queues, at the offset the kernel gave (aligned for its type). */
static void *at(void *map, unsigned offset) { return (char *)map + offset; }

static int map_rings(kvik__uring *r, const struct io_uring_params *p) {
  size_t sq_len = p->sq_off.array + p->sq_entries * sizeof(unsigned);
  size_t cq_len = p->cq_off.cqes + p->cq_entries * sizeof(struct io_uring_cqe);
  r->map_len = sq_len > cq_len ? sq_len : cq_len; /* one mapping: IORING_FEAT_SINGLE_MMAP */
  r->map = kvik__mmap(r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                      IORING_OFF_SQ_RING);
  if (r->map == MAP_FAILED) return -errno;
  r->sqes_len = p->sq_entries * sizeof(struct io_uring_sqe);
  r->sqes = kvik__mmap(r->sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                       IORING_OFF_SQES);
  if (r->sqes == MAP_FAILED) {
    int err = errno;
    munmap(r->map, r->map_len);
    return -err;
  }
  r->sq_head = at(r->map, p->sq_off.head);
  r->sq_tail = at(r->map, p->sq_off.tail);
  r->sq_mask = *(unsigned *)at(r->map, p->sq_off.ring_mask);
  r->sq_entries = p->sq_entries;
  r->sq_array = at(r->map, p->sq_off.array);
  r->cq_head = at(r->map, p->cq_off.head);
  r->cq_tail = at(r->map, p->cq_off.tail);
  r->cq_mask = *(unsigned *)at(r->map, p->cq_off.ring_mask);
  r->cqes = at(r->map, p->cq_off.cqes);
  return 0;
}

/* The features kvik needs: completions never dropped (5.5), and waits with a timeout (5.11). */
static const unsigned needed_features =
    IORING_FEAT_SINGLE_MMAP | IORING_FEAT_NODROP | IORING_FEAT_EXT_ARG;

int kvik__uring_create(const char *fn, unsigned max_ops, kvik__uring_rest *rest,
                       kvik__uring **ring) {
  *ring = NULL;
  kvik__uring *r = kvik__calloc(1, sizeof *r + max_ops * sizeof r->ops[0]);
  if (!r)
    return kvik__fail(-ENOMEM, "%s: out of memory for an io_uring of %u operations", fn, max_ops);
  r->max_ops = max_ops;
  r->rest = rest;
  r->pid = getpid();
  struct io_uring_params p;
  unsigned cq_entries = round_up_pow2(max_ops < 2 ? 2 : max_ops);
  r->fd = setup_fd(cq_entries < SQ_MAX ? cq_entries : SQ_MAX, cq_entries, &p);
  int rc = r->fd < 0 ? kvik__fail_errno(-r->fd, "%s: io_uring_setup", fn) : 0;
  if (rc == 0 && (p.features & needed_features) != needed_features)
    rc = kvik__fail(-EOPNOTSUPP,
                    "%s: io_uring lacks features kvik needs (Linux 5.11 or later has them)", fn);
  int err = rc == 0 ? map_rings(r, &p) : 0;
  if (err < 0) rc = kvik__fail_errno(-err, "%s: mapping io_uring's queues", fn);
  if (rc < 0) {
    if (r->fd >= 0) close(r->fd);
    free(r);
    return rc;
  }
  *ring = r;
  return 0;
}

int kvik__uring_forked(const kvik__uring *r) { return r->pid != getpid(); }

int kvik__uring_register_buffer(kvik__uring *r, char *base, size_t len) {
  struct iovec iov = {base, len};
  if (kvik__io_uring_register(r->fd, IORING_REGISTER_BUFFERS, &iov, 1) < 0) return -errno;
  r->fixed = base;
  r->fixed_len = len;
  return 0;
}

/* Whether the operation's buffer lies in the registered one (buf_index 0). */
static int in_fixed(const kvik__uring *r, const kvik__uring_op *op) {
  uintptr_t start = (uintptr_t)r->fixed, buf = (uintptr_t)op->buf;
  return r->fixed && buf >= start && buf - start <= r->fixed_len &&
         op->size <= r->fixed_len - (buf - start);
}

void kvik__uring_free(kvik__uring *r) {
  if (!r) return;
  if (!kvik__uring_forked(r)) {
    kvik__uring_cancel(r);
    while (r->in_flight > 0 && kvik__uring_reap(r, r->in_flight, -1, NULL, NULL) == 0) continue;
    if (r->in_flight > 0) return; /* the kernel may still write into the queues: leak them */
  }
  munmap(r->sqes, r->sqes_len);
  munmap(r->map, r->map_len);
  close(r->fd);
  free(r);
}

unsigned kvik__uring_in_flight(const kvik__uring *r) { return r->in_flight; }

/* ---- submitting ---------------------------------------------------------------------------- */

/* The next free entry of the submission queue, zeroed; push_sqe() queues it once filled. */
static struct io_uring_sqe *next_sqe(kvik__uring *r) {
  unsigned index = atomic_load_explicit(r->sq_tail, memory_order_relaxed) & r->sq_mask;
  memset(&r->sqes[index], 0, sizeof r->sqes[index]);
  return &r->sqes[index];
}

static void push_sqe(kvik__uring *r) {
  assert(r->queued < r->sq_entries); /* a full queue is submitted before an entry is taken */
  unsigned tail = atomic_load_explicit(r->sq_tail, memory_order_relaxed);
  r->sq_array[tail & r->sq_mask] = tail & r->sq_mask;
  atomic_store_explicit(r->sq_tail, tail + 1, memory_order_release);
  r->queued++;
}

/* The byte count of an operation once the ring took it as far as it would: the rest, if any,
 * goes through the file's own path, which also tells the end of the file from a short count. */
static ssize_t finish_op(const kvik__uring *r, const kvik__uring_op *op, ssize_t res) {
  if (res >= 0 && (size_t)res == op->size) return res;
  if (res == 0 && op->op == KVIK__READ) return 0;
  int again = res == -EINTR || res == -EAGAIN || (res == -EINVAL && op->direct);
  if (res < 0 && !again) return res;
  size_t moved = res > 0 ? (size_t)res : 0, rest = 0;
  assert(r->rest); /* a ring that takes operations was given one */
  int rc = r->rest(op->file, op->op, op->buf + moved, op->size - moved, op->offset + (int64_t)moved,
                   &rest);
  return rc < 0 ? rc : (ssize_t)(moved + rest);
}

/* What the kernel would not take is taken back and done on this thread, to be reported by the
 * next reap. */
static void take_back_queued(kvik__uring *r) {
  unsigned head = atomic_load_explicit(r->sq_head, memory_order_acquire);
  unsigned tail = atomic_load_explicit(r->sq_tail, memory_order_relaxed);
  for (; head != tail; head++) {
    uint64_t tag = r->sqes[r->sq_array[head & r->sq_mask]].user_data;
    if (tag == CANCEL_TAG) continue;
    assert(tag < r->max_ops && r->ops[tag].in_flight);
    ring_op *o = &r->ops[tag];
    o->result = finish_op(r, &o->op, -EAGAIN);
    o->ended = 1;
    r->ended++;
  }
  atomic_store_explicit(r->sq_tail, atomic_load_explicit(r->sq_head, memory_order_acquire),
                        memory_order_release);
  r->queued = 0;
}

/* A kernel short of resources (EAGAIN, EBUSY) gets no second try: the operations it would not
 * take are done on this thread, which is slower but bounded. */
void kvik__uring_submit(kvik__uring *r) {
  while (r->queued > 0) {
    int n = enter(r->fd, r->queued, 0, 0, NULL, 0);
    if (n == -EINTR) continue;
    if (n <= 0) {
      take_back_queued(r);
      return;
    }
    r->queued -= (unsigned)n;
  }
}

void kvik__uring_start(kvik__uring *r, unsigned id, const kvik__uring_op *op) {
  assert(id < r->max_ops && !r->ops[id].in_flight);
  if (r->queued == r->sq_entries) kvik__uring_submit(r);
  r->ops[id] = (ring_op){*op, 1, 0, 0};
  r->in_flight++;
  struct io_uring_sqe *sqe = next_sqe(r);
  if (in_fixed(r, op))
    sqe->opcode = op->op == KVIK__READ ? IORING_OP_READ_FIXED : IORING_OP_WRITE_FIXED;
  else sqe->opcode = op->op == KVIK__READ ? IORING_OP_READ : IORING_OP_WRITE;
  sqe->fd = op->fd;
  sqe->addr = (uint64_t)(uintptr_t)op->buf;
  sqe->len = (unsigned)op->size;
  sqe->off = (uint64_t)op->offset;
  sqe->user_data = id;
  push_sqe(r);
}

void kvik__uring_cancel(kvik__uring *r) {
  if (kvik__uring_forked(r) || r->in_flight == r->ended) return;
  if (r->queued == r->sq_entries) kvik__uring_submit(r);
  struct io_uring_sqe *sqe = next_sqe(r);
  sqe->opcode = IORING_OP_ASYNC_CANCEL;
  sqe->fd = -1;
  sqe->cancel_flags = IORING_ASYNC_CANCEL_ANY;
  sqe->user_data = CANCEL_TAG;
  push_sqe(r);
  r->canceling = 1;
  kvik__uring_submit(r);
}

/* ---- reaping ------------------------------------------------------------------------------- */

/* The result the kernel gave, as the library takes it (sys.h: where tests inject faults). */
static ssize_t ring_result(const kvik__uring_op *op, ssize_t res) {
  if (op->op == KVIK__READ) return kvik__ring_read_result(res);
  return kvik__ring_write_result(res);
}

static void report(kvik__uring *r, unsigned id, ssize_t result, int canceled,
                   kvik__uring_done *done, void *ctx) {
  assert(r->ops[id].in_flight && r->in_flight > 0);
  r->ops[id].in_flight = 0;
  r->in_flight--;
  if (done) done(ctx, id, result, canceled);
}

static void report_ended(kvik__uring *r, kvik__uring_done *done, void *ctx) {
  for (unsigned id = 0; id < r->max_ops && r->ended > 0; id++) {
    ring_op *o = &r->ops[id];
    if (!o->in_flight || !o->ended) continue;
    o->ended = 0;
    r->ended--;
    report(r, id, o->result, 0, done, ctx);
  }
}

/* Report what the completion queue holds. */
static void drain(kvik__uring *r, kvik__uring_done *done, void *ctx) {
  unsigned head = atomic_load_explicit(r->cq_head, memory_order_relaxed);
  unsigned tail = atomic_load_explicit(r->cq_tail, memory_order_acquire);
  for (; head != tail; head++) {
    const struct io_uring_cqe *cqe = &r->cqes[head & r->cq_mask];
    uint64_t tag = cqe->user_data;
    ssize_t res = cqe->res;
    /* Released before the report, which may move the rest of the bytes. */
    atomic_store_explicit(r->cq_head, head + 1, memory_order_release);
    if (tag >= r->max_ops || !r->ops[tag].in_flight) continue; /* the cancel request's own */
    const kvik__uring_op *op = &r->ops[tag].op;
    int canceled = r->canceling && (res == -ECANCELED || res == -EINTR);
    ssize_t result = canceled ? -ECANCELED : !done ? res : finish_op(r, op, ring_result(op, res));
    report(r, (unsigned)tag, result, canceled, done, ctx);
  }
  if (r->in_flight == 0) r->canceling = 0;
}

static void abandon_all(kvik__uring *r, kvik__uring_done *done, void *ctx) {
  for (unsigned id = 0; id < r->max_ops && r->in_flight > 0; id++)
    if (r->ops[id].in_flight) report(r, id, KVIK_ECANCELED_BY_FORK, 0, done, ctx);
}

int kvik__uring_reap(kvik__uring *r, unsigned min_nr, int64_t timeout_ns, kvik__uring_done *done,
                     void *ctx) {
  if (kvik__uring_forked(r)) {
    abandon_all(r, done, ctx);
    return 0;
  }
  kvik__uring_submit(r);
  unsigned before = r->in_flight;
  if (min_nr > before) min_nr = before;
  report_ended(r, done, ctx);
  drain(r, done, ctx);
  unsigned reported = before - r->in_flight;
  if (reported >= min_nr || timeout_ns == 0) return 0;
  struct __kernel_timespec ts = {timeout_ns / 1000000000, timeout_ns % 1000000000};
  struct io_uring_getevents_arg arg = {0};
  if (timeout_ns > 0) arg.ts = (uint64_t)(uintptr_t)&ts;
  int n = enter(r->fd, 0, min_nr - reported, IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &arg,
                sizeof arg);
  drain(r, done, ctx);
  return n < 0 && n != -ETIME && n != -EINTR
             ? kvik__fail_errno(-n, "io_uring_enter (waiting for completions)")
             : 0;
}

/* ---- availability -------------------------------------------------------------------------- */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int probe_result;
static char probe_why[KVIK_MESSAGE_MAX];

static void probe(void) {
  kvik__uring *r;
  struct utsname u;
  const char *release = uname(&u) == 0 ? u.release : "unknown";
  kvik__saved_message m;
  kvik__message_save(&m);
  if (kvik__uring_create("kvik_io_uring_supported", 2, NULL, &r) == 0) {
    kvik__uring_free(r);
    probe_result = 1;
    snprintf(probe_why, sizeof probe_why, "available (Linux %s)", release);
  } else {
    snprintf(probe_why, sizeof probe_why, "not available: %s (Linux %s)", kvik_last_error(),
             release);
  }
  kvik__message_restore(&m, 0);
}

int kvik_io_uring_supported(char *why, size_t len) {
  pthread_once(&probe_once, probe);
  if (why && len) snprintf(why, len, "%s", probe_why);
  return probe_result;
}
