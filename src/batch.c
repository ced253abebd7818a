/* Batch IO: many independent reads and writes submitted at once, their completions collected
 * through one queue. Operations into device memory on files that cuFile serves go to cuFile's
 * batch API (batch_cufile.c); other operations go to the batch's io_uring where
 * KVIK_SETTING_IO_URING says so (batch_uring.c); all others run on the thread pool as ordinary
 * futures (batch_pool.c). Small reads are first tried here, from the page cache alone, before
 * their memory is classified. Here: the API, the checks and routing, the reads within submit, and
 * the waiting.
 * batch_state.h says how slots and the done queue work. */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "batch.h"
#include "error.h"
#include "file.h"
#include "init.h"
#include "memory.h"
#include "settings.h"
#include "sys.h"

#define MAX_OPS 65536

/* While several kinds are in flight no single call can sleep on all: cuFile's and the ring's
 * completions are only seen by asking them. A wait then alternates polls with a wait of at most
 * this long on one kind, so a completion of another is noticed within about this much. */
#define MIXED_SLICE_NS ((int64_t)1000000)

/* ---- the done queue ------------------------------------------------------------------------ */

/* Move up to `max` events, oldest first, from the done queue to `events`: their operations are
 * no longer in flight. Returns how many. The queue's counters are kept in locals: `events` may
 * alias nothing of the batch, but the compiler cannot know it and would reload them at every
 * event. Inlined: the common wait, which only hands out, then makes no call (9 instructions of a
 * depth-1 read, callgrind). */
__attribute__((always_inline)) static inline unsigned
hand_out(kvik_batch *b, kvik_batch_event *events, unsigned max) {
  unsigned n = b->ndone < max ? b->ndone : max, head = b->done_head;
  assert(n <= b->in_flight);
  for (unsigned k = 0; k < n; k++) {
    events[k] = b->done[head];
    if (++head == b->max_ops) head = 0; /* no division: a small batch's cost */
  }
  b->done_head = head;
  b->ndone -= n;
  b->in_flight -= n;
  return n;
}

/* ---- checking and routing ------------------------------------------------------------------- */

/* Whether CUDA can tell device memory from host memory in this process, asked once per
 * kvik_batch_submit() (at its first operation routed): where it cannot, all memory is host
 * memory, and no operation needs to ask it again. */
typedef struct pointer_kinds {
  int asked;
  const kvik__cuda_api *cu;
} pointer_kinds;

/* Which backends may take the operation: cuFile's batch, the ring (for host or device memory),
 * the pool always. Writes to append handles go to the pool. What is left of a read made in part
 * within kvik_batch_submit() goes to the ring or the pool: cuFile's batch would read it all. */
static int route_op(const char *fn, const kvik_batch_op *op, pointer_kinds *kinds, CUcontext *ctx,
                    kvik__batch_route *r) {
  int rc = kinds->asked ? 0 : kvik__cuda_for_pointers(fn, &kinds->cu);
  if (rc < 0) return rc;
  kinds->asked = 1;
  kvik__memory mem = {KVIK_MEMORY_HOST, NULL};
  rc = kinds->cu ? kvik__memory_classify(fn, op->buf, &mem) : 0;
  if (rc < 0) return rc;
  r->host = (mem.kind == KVIK_MEMORY_HOST || mem.kind == KVIK_MEMORY_PINNED) && !r->appends;
  r->device = kvik__memory_on_device(&mem) && op->size > 0 && !r->appends;
  r->ctx = mem.ctx;
  if (mem.kind != KVIK_MEMORY_DEVICE || op->size == 0 || r->appends || r->slotted) return 0;
  return kvik__batch_cufile_route(fn, op, ctx, r);
}

/* "kvik_batch_submit: operation 3", in `who` (WHO_LEN bytes): made for messages only, as an
 * snprintf per operation would cost a small batch more than its checks. */
#define WHO_LEN 64
static const char *who_of(char *who, const char *fn, unsigned i) {
  snprintf(who, WHO_LEN, "%s: operation %u", fn, i);
  return who;
}

/* A message of route_op(), which names `fn` alone, with the operation's index put after it. */
static int name_operation(const char *fn, unsigned i, int rc) {
  char who[WHO_LEN], text[KVIK_MESSAGE_MAX];
  size_t len = strlen(fn);
  const char *message = kvik_last_error();
  int named = strncmp(message, fn, len) == 0;
  snprintf(text, sizeof text, "%s%s", named ? "" : ": ", named ? message + len : message);
  return kvik__fail(rc, "%s%s", who_of(who, fn, i), text);
}

/* The file of the operation checked or tried before, held: the operations after it on the same
 * file (a run of them is the common batch) hold it once, which also tells whether it is closed,
 * and the tries use its descriptor while it is held. */
typedef struct held_file {
  kvik_file *file;
  int fd;    /* negative: the file could not be held (it is closed) */
  int flags; /* kvik__file_access(), once checked */
} held_file;

static void held_let_go(held_file *h) {
  if (h->file && h->fd >= 0) kvik__file_let_go(h->file);
}

/* Hold `file` in *h, letting go of the one held before. Returns its descriptor, or -EBADF. */
static int held_fd(held_file *h, kvik_file *file) {
  if (h->file == file) return h->fd;
  held_let_go(h);
  h->file = file;
  h->fd = kvik__file_hold_access(file, &h->flags);
  return h->fd;
}

/* Check operation i as kvik_file_pread/pwrite would: every flag of `r` that kvik_batch_submit()
 * reads before a backend sets it is set here. Its memory is not classified yet (route_ops()). */
static int check_op(const char *fn, unsigned i, const kvik_batch_op *op, held_file *last,
                    kvik__batch_route *r) {
  char who[WHO_LEN];
  if (!op->file) return kvik__fail(-EINVAL, "%s: NULL file", who_of(who, fn, i));
  int is_write = (int)op->opcode == KVIK_BATCH_WRITE;
  if (!is_write && (int)op->opcode != KVIK_BATCH_READ)
    return kvik__fail(-EINVAL, "%s(\"%s\"): unknown opcode %d", who_of(who, fn, i),
                      kvik__file_path(op->file), (int)op->opcode);
  if (!op->buf && op->size > 0)
    return kvik__fail(-EINVAL, "%s(\"%s\"): NULL buffer for %zu bytes", who_of(who, fn, i),
                      kvik__file_path(op->file), op->size);
  if (op->file_offset < 0)
    return kvik__fail(-EINVAL, "%s(\"%s\"): negative offset %lld", who_of(who, fn, i),
                      kvik__file_path(op->file), (long long)op->file_offset);
  if (op->size > (size_t)SSIZE_MAX || (uint64_t)op->file_offset + op->size > (uint64_t)INT64_MAX)
    return kvik__fail(
        -EINVAL, "%s(\"%s\"): %zu bytes at offset %lld overflow the largest file offset",
        who_of(who, fn, i), kvik__file_path(op->file), op->size, (long long)op->file_offset);
  if (held_fd(last, op->file) < 0)
    return kvik__fail(-EBADF, "%s(\"%s\"): file is closed", who_of(who, fn, i),
                      kvik__file_path(op->file));
  if ((last->flags & O_ACCMODE) == (is_write ? O_RDONLY : O_WRONLY))
    return kvik__fail(-EBADF, "%s(\"%s\"): file not opened for %s", who_of(who, fn, i),
                      kvik__file_path(op->file), is_write ? "writing" : "reading");
  r->cufile = r->host = r->device = r->done = r->slotted = r->held = r->ring = r->failed = 0;
  r->appends = (last->flags & O_APPEND) && is_write;
  return 0;
}

/* Route the operations not done within kvik_batch_submit(), in their order (the first that
 * cuFile's batch takes picks its context). Returns 0 or the first error, whose message names the
 * operation; *ncufile counts those cuFile's batch takes. */
static int route_ops(const char *fn, const kvik_batch_op *ops, kvik__batch_route *r, unsigned count,
                     CUcontext *ctx, unsigned *ncufile) {
  pointer_kinds kinds = {0, NULL};
  *ncufile = 0;
  for (unsigned i = 0; i < count; i++) {
    if (r[i].done) continue;
    int rc = route_op(fn, &ops[i], &kinds, ctx, &r[i]);
    if (rc < 0) return name_operation(fn, i, rc);
    *ncufile += (unsigned)r[i].cufile;
  }
  return 0;
}

/* ---- reads within kvik_batch_submit() ------------------------------------------------------ */

/* A read into host memory below KVIK_SETTING_GDS_THRESHOLD is made on the submitting thread by
 * either backend (the pool runs it within kvik_file_pread(); io_uring reads what the page cache
 * holds within io_uring_enter()). It is first tried here with preadv2(RWF_NOWAIT), which reads
 * only what the page cache holds: one system call and no backend's bookkeeping, nor a second call
 * to collect it. Where the page cache holds nothing of it (EAGAIN), or any other error, the
 * backend gets it as before and gives its own result; where it holds part, the backend gets the
 * rest, in the slot taken here, and the event counts both parts.
 *
 * Such reads are tried before their memory is classified, as small file requests are
 * (file.c, QUICK_MAX): classifying costs more than the rest of a small read (a walk of the
 * loaded objects for libcuda, and with CUDA in the process a driver call per operation). Device
 * memory that the CPU cannot touch fails the call with EFAULT before a byte moves; the page cache
 * holding none of the range fails it with EAGAIN before the buffer is touched. Either way the
 * operation is then classified and routed as it would have been (route_ops()), cuFile's batch
 * included, which is why the tries come before anything is handed to a backend. Managed memory,
 * which the CPU may touch, is read here, as small requests read it. Only a system call touches the
 * buffer (preadv2(), or pread() once the batch trusts the page cache: TRUST_STREAK): it fails on
 * device memory, where a memcpy would crash. */

/* After this many reads in a row that the page cache did not serve, only one in NOWAIT_PROBE is
 * tried, so that reads from storage pay for a failed call rarely. */
#define NOWAIT_STREAK 16U
#define NOWAIT_PROBE 16U

/* After this many tries in a row that the page cache served whole, the batch trusts it: its tries
 * read with pread(2), and only one in NOWAIT_PROBE asks with RWF_NOWAIT, whose miss ends the
 * trust. preadv2(2) costs 10-12% more than pread, which held the tries at 0.86-0.89x a pread loop
 * at depths 1 to 8 on the 2-core VM. While the batch trusts the page cache, a read of pages it
 * does not hold is made here from storage, as the pool backend makes every read below the
 * threshold: a file whose pages were dropped is found within NOWAIT_PROBE reads, a stray miss
 * among cached reads perhaps never. */
#define TRUST_STREAK 64U

/* Whether the next try reads with pread(2) rather than asking with RWF_NOWAIT; a trusted try is
 * counted, so that every NOWAIT_PROBE-th asks. */
static int page_cache_trusted(kvik_batch *b) {
  return b->nowait.served >= TRUST_STREAK && ++b->nowait.trusted % NOWAIT_PROBE != 0;
}

static int nowait_worth_trying(kvik_batch *b) {
  if (b->nowait.refused) return 0;
  return b->nowait.misses < NOWAIT_STREAK || ++b->nowait.skipped % NOWAIT_PROBE == 0;
}

/* The rest of read_now() where the page cache held not all of `op`: `done` bytes, the last call
 * returning `n` (negative: failed, errno set; by pread(2) where `trusted`). None read, it is a
 * miss; read in part, it takes its slot (r->slotted, r->id) and *rest is what is left of it. */
static void read_now_short(kvik_batch *b, const kvik_batch_op *op, kvik_batch_op *rest,
                           kvik__batch_route *r, size_t done, ssize_t n, int trusted) {
  if (!trusted && n < 0 && (errno == EOPNOTSUPP || errno == EINVAL)) b->nowait.refused = 1;
  b->nowait.served = 0;
  if (done == 0) {
    b->nowait.misses++;
    return;
  }
  b->nowait.misses = 0;
  r->id = kvik__batch_take_slot(b, op->cookie);
  b->slots[r->id].ahead = done;
  r->slotted = 1;
  *rest = *op;
  rest->buf = (char *)rest->buf + done;
  rest->size -= done;
  rest->file_offset += (int64_t)done;
}

/* Try operation `op` here, on descriptor `fd` of its file (held): read what the page cache holds
 * of it on this thread (all of it, where the batch trusts the page cache). Returns 1 where it is
 * complete (r->done): all read (the common try, in one call), or the end of the file. Inlined in
 * both loops that call it (each system call site stays one line of sys.h's wrappers): a depth-1
 * read spends 10 instructions less on the call. */
__attribute__((always_inline)) static inline int read_now(kvik_batch *b, const kvik_batch_op *op,
                                                          kvik_batch_op *rest, kvik__batch_route *r,
                                                          int fd) {
  int trusted = page_cache_trusted(b);
  size_t done = 0;
  ssize_t n;
  do {
    char *at = (char *)op->buf + done;
    off_t offset = (off_t)(op->file_offset + (int64_t)done);
    n = trusted ? kvik__pread(fd, at, op->size - done, offset)
                : kvik__preadv2(fd, at, op->size - done, offset, RWF_NOWAIT);
  } while (n > 0 && (done += (size_t)n) < op->size);
  if (done < op->size && n != 0) {
    read_now_short(b, op, rest, r, done, n, trusted);
    return 0;
  }
  b->nowait.misses = 0;
  if (b->nowait.served < TRUST_STREAK) b->nowait.served++;
  kvik__batch_queue(b, op->cookie, KVIK_BATCH_COMPLETE, (ssize_t)done);
  r->done = 1;
  return 1;
}

/* Whether to try operation `op` here: a read, of at least a byte, below `threshold`, under which
 * the backends read host memory on this thread too. */
static int read_now_fits(const kvik_batch_op *op, uint64_t threshold) {
  return op->opcode == KVIK_BATCH_READ && op->size > 0 && op->size < threshold;
}

/* A kvik_batch_submit() that fails after its reads here forgets them, so that none of its
 * operations was submitted: the slots of those read in part are freed and the events of those
 * done, the last queued (`ndone` were before), dropped. Their bytes are in their buffers. */
static void forget_reads(kvik_batch *b, const kvik__batch_route *r, unsigned count,
                         unsigned ndone) {
  for (unsigned i = 0; i < count; i++)
    if (r[i].slotted) kvik__batch_put_slot(b, r[i].id);
  b->ndone = ndone;
}

/* Set rest[i] to what is left for the pool or the ring of each operation not done here and not
 * cuFile's. Returns how many such operations there are: often none, and then no backend is
 * asked. */
static unsigned rest_for_backends(const kvik_batch_op *ops, kvik_batch_op *rest,
                                  const kvik__batch_route *r, unsigned count) {
  unsigned left = 0;
  for (unsigned i = 0; i < count; i++) {
    if (r[i].done || r[i].cufile) continue;
    if (!r[i].slotted) rest[i] = ops[i];
    left++;
  }
  return left;
}

/* ---- waiting ------------------------------------------------------------------------------- */

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The monotonic time a wait ends, or -1 for none. */
static int64_t deadline_after(int64_t timeout_ns) {
  if (timeout_ns < 0) return -1;
  int64_t now = now_ns();
  return timeout_ns > INT64_MAX - now ? -1 : now + timeout_ns;
}

/* Nanoseconds left until `deadline` (-1: no limit), at most `slice`. */
static int64_t left_until(int64_t deadline, int64_t slice) {
  if (deadline < 0) return slice;
  int64_t left = deadline - now_ns();
  if (left < 0) left = 0;
  return slice >= 0 && slice < left ? slice : left;
}

/* Collect completions until `need` are queued or `timeout_ns` passed (negative: no limit). `need`
 * is at most what is queued and in flight, so each branch below has enough operations to wait
 * for. The clock is read only once a wait is needed: most calls find what they need at once. */
static int gather(kvik_batch *b, const char *fn, unsigned need, int64_t timeout_ns) {
  int64_t deadline = -1;
  for (int first = 1;; first = 0) {
    kvik__batch_pool_collect(b);
    int rc = b->cufile.n ? kvik__batch_cufile_collect(b, fn, 0, 0) : 0;
    if (rc == 0 && kvik__batch_uring_in_flight(b)) rc = kvik__batch_uring_collect(b, 0, 0);
    if (rc < 0 || b->ndone >= need || timeout_ns == 0) return rc;
    if (first) deadline = deadline_after(timeout_ns);
    if (left_until(deadline, -1) == 0) return rc;
    unsigned want = need - b->ndone, npool = b->pool.n, nring = kvik__batch_uring_in_flight(b);
    int kinds = (npool > 0) + (b->cufile.n > 0) + (nring > 0);
    int64_t slice = kinds > 1 ? MIXED_SLICE_NS : -1;
    if (npool > 0) {
      kvik__batch_pool_wait(b, want < npool ? want : npool, left_until(deadline, slice));
    } else if (nring > 0) {
      rc = kvik__batch_uring_collect(b, want < nring ? want : nring, left_until(deadline, slice));
    } else {
      int64_t timeout = left_until(deadline, KVIK__BATCH_CUFILE_WAIT_MAX_NS);
      rc = kvik__batch_cufile_collect(b, fn, want, timeout);
    }
    if (rc < 0) return rc;
  }
}

/* ---- the API ------------------------------------------------------------------------------- */

/* A call that succeeds leaves this thread's message as it was (kvik__message_save and _restore),
 * even when operations it started or collected failed: their events carry the codes, and the
 * futures behind them would otherwise leave their messages here. A submission that its tries
 * complete, and a wait that finds its events queued, write no message: they skip the save, which
 * costs a small batch as much as its checks (two calls and thread-local storage). */

static void batch_release(kvik_batch *b) {
  kvik__batch_uring_free(b);
  free(b->routes);
  free(b->rest);
  free(b->uring.copying_ids);
  free(b->slots);
  free(b->free_ids);
  free(b->done);
  free(b->pool.ids);
  free(b->pool.futures);
  free(b);
}

int kvik_batch_create(unsigned max_ops, kvik_batch **batch) {
  static const char fn[] = "kvik_batch_create";
  if (batch) *batch = NULL;
  if (!batch) return kvik__fail(-EINVAL, "%s: NULL output handle", fn);
  if (max_ops < 1 || max_ops > MAX_OPS)
    return kvik__fail(-EINVAL, "%s(%u): max_ops must be 1 to %d", fn, max_ops, MAX_OPS);
  int rc = kvik__init();
  if (rc < 0) return rc;
  kvik_batch *b = kvik__calloc(1, sizeof *b);
  if (!b) return kvik__fail(-ENOMEM, "%s(%u): out of memory", fn, max_ops);
  b->max_ops = max_ops;
  b->slots = kvik__calloc(max_ops, sizeof *b->slots);
  b->free_ids = kvik__calloc(max_ops, sizeof *b->free_ids);
  b->done = kvik__calloc(max_ops, sizeof *b->done);
  b->pool.ids = kvik__calloc(max_ops, sizeof *b->pool.ids);
  b->pool.futures = kvik__calloc(max_ops, sizeof *b->pool.futures);
  b->uring.copying_ids = kvik__calloc(max_ops, sizeof *b->uring.copying_ids);
  b->routes = kvik__calloc(max_ops, sizeof *b->routes);
  b->rest = kvik__calloc(max_ops, sizeof *b->rest);
  if (!b->slots || !b->free_ids || !b->done || !b->pool.ids || !b->pool.futures ||
      !b->uring.copying_ids || !b->routes || !b->rest) {
    batch_release(b);
    return kvik__fail(-ENOMEM, "%s(%u): out of memory", fn, max_ops);
  }
  /* Slot 0 on top of the stack, so that operations take slots in submission order. */
  for (unsigned id = 0; id < max_ops; id++) b->free_ids[id] = max_ops - 1 - id;
  b->nfree = max_ops;
  *batch = b;
  return 0;
}

/* kvik_batch_submit() after its checks and tries (`ndone` events were queued before them:
 * forget_reads()): what may write a message, under a save of it. What the tries left is routed,
 * and cuFile's part, which may still fail the call, handed to cuFile before any other backend gets
 * a thing. Not inlined: the common submission, done by its tries, needs none of it, nor its 1 KiB
 * save on the stack. */
__attribute__((noinline)) static int submit_rest(kvik_batch *b, const char *fn,
                                                 const kvik_batch_op *ops, unsigned count,
                                                 unsigned ndone) {
  kvik__batch_route *routes = b->routes; /* count <= max_ops */
  kvik_batch_op *rest = b->rest;
  kvik__saved_message m;
  kvik__message_save(&m);
  CUcontext ctx = b->cufile.handle ? b->cufile.ctx : NULL;
  unsigned ncufile;
  int rc = route_ops(fn, ops, routes, count, &ctx, &ncufile);
  if (rc == 0 && ncufile > 0) rc = kvik__batch_cufile_submit(b, fn, ops, routes, count, ctx);
  if (rc < 0) {
    forget_reads(b, routes, count, ndone);
    return kvik__message_restore(&m, rc);
  }
  /* From here on nothing fails the call: operations that fail report it in their events. */
  if (rest_for_backends(ops, rest, routes, count) == 0) return kvik__message_restore(&m, 0);
  kvik__batch_uring_submit(b, rest, routes, count);
  for (unsigned i = 0; i < count; i++) {
    const kvik__batch_route *r = &routes[i];
    if (r->cufile || r->ring || r->failed || r->done) continue;
    unsigned id = r->slotted ? r->id : kvik__batch_take_slot(b, rest[i].cookie);
    kvik__batch_pool_start(b, &rest[i], id);
  }
  return kvik__message_restore(&m, 0);
}

int kvik_batch_submit(kvik_batch *batch, const kvik_batch_op *ops, unsigned count) {
  static const char fn[] = "kvik_batch_submit";
  if (!batch || (!ops && count > 0))
    return kvik__fail(-EINVAL, "%s: NULL %s", fn, !batch ? "batch" : "operations");
  unsigned room = batch->max_ops - batch->in_flight;
  if (count > room)
    return kvik__fail(-EAGAIN,
                      "%s: operation %u: more than max_ops (%u) would be in flight (%u are: an "
                      "operation is until its completion is collected)",
                      fn, room, batch->max_ops, batch->in_flight);
  if (count == 0) return 0;
  /* Reads are tried as they are checked (a threshold of 0 tries none), where the tries write no
   * message: the common submission is then done without a save, in one pass, each try on the file
   * its check holds. A failed check writes the call's own message, and forgets the reads made
   * before it. */
  uint64_t threshold = kvik__setting(KVIK_SETTING_IO_URING) == KVIK_ON
                           ? 0
                           : (uint64_t)kvik__setting(KVIK_SETTING_GDS_THRESHOLD);
  kvik__batch_route *routes = batch->routes;
  held_file h = {NULL, -1, 0};
  unsigned ndone = batch->ndone, done = 0, i;
  int rc = 0;
  for (i = 0; i < count; i++) {
    rc = check_op(fn, i, &ops[i], &h, &routes[i]);
    if (rc < 0) break;
    if (read_now_fits(&ops[i], threshold) && nowait_worth_trying(batch))
      done += (unsigned)read_now(batch, &ops[i], &batch->rest[i], &routes[i], h.fd);
  }
  if (rc < 0) forget_reads(batch, routes, i, ndone);
  held_let_go(&h);
  if (rc == 0 && done < count) rc = submit_rest(batch, fn, ops, count, ndone);
  if (rc == 0) batch->in_flight += count;
  return rc;
}

/* kvik_batch_wait() where completions are to be collected (`in_flight` operations are in flight),
 * under a save of the message. Not inlined: the common wait, which hands out queued events, needs
 * none of it, nor its 1 KiB save on the stack. */
__attribute__((noinline)) static int
collect_and_hand_out(kvik_batch *b, const char *fn, unsigned min_events, kvik_batch_event *events,
                     unsigned max_events, int64_t timeout_ns, unsigned in_flight) {
  kvik__saved_message m;
  kvik__message_save(&m);
  unsigned outstanding = b->ndone + in_flight;
  int rc = gather(b, fn, min_events < outstanding ? min_events : outstanding, timeout_ns);
  if (rc < 0) return kvik__message_restore(&m, rc);
  return kvik__message_restore(&m, (int)hand_out(b, events, max_events));
}

/* kvik_batch_wait() where its common case (below) does not apply: the checks that fail it, and
 * completions to collect. */
__attribute__((noinline)) static int wait_checked(kvik_batch *batch, unsigned min_events,
                                                  kvik_batch_event *events, unsigned max_events,
                                                  int64_t timeout_ns) {
  static const char fn[] = "kvik_batch_wait";
  if (!batch || (!events && max_events > 0))
    return kvik__fail(-EINVAL, "%s: NULL %s", fn, !batch ? "batch" : "events");
  if (min_events > max_events)
    return kvik__fail(-EINVAL, "%s: min_events %u above max_events %u", fn, min_events, max_events);
  /* All done (within submit, say): nothing to wait for or collect now, nor to fail. */
  unsigned in_flight = batch->pool.n + batch->cufile.n + kvik__batch_uring_in_flight(batch);
  if (in_flight == 0) return (int)hand_out(batch, events, max_events);
  return collect_and_hand_out(batch, fn, min_events, events, max_events, timeout_ns, in_flight);
}

int kvik_batch_wait(kvik_batch *batch, unsigned min_events, kvik_batch_event *events,
                    unsigned max_events, int64_t timeout_ns) {
  /* More done than fit in `events`, with valid arguments (the common wait after reads within
   * kvik_batch_submit()): nothing to wait for or collect now, nor to fail. What is in flight stays
   * there for a later call. Tested first, apart from the rest, so that this wait saves no
   * registers. */
  if (batch && (events || max_events == 0) && min_events <= max_events &&
      batch->ndone >= max_events)
    return (int)hand_out(batch, events, max_events);
  return wait_checked(batch, min_events, events, max_events, timeout_ns);
}

int kvik_batch_cancel(kvik_batch *batch) {
  static const char fn[] = "kvik_batch_cancel";
  if (!batch) return kvik__fail(-EINVAL, "%s: NULL batch", fn);
  kvik__saved_message m;
  kvik__message_save(&m);
  /* Operations on the pool cannot be stopped: their tasks may have moved bytes already, so they
   * are waited for and report what they did rather than a cancellation that did not happen. The
   * kernel cancels only ring operations that have not started. */
  int rc = batch->cufile.n > 0 ? kvik__batch_cufile_cancel(batch, fn) : 0;
  kvik__batch_uring_cancel(batch);
  kvik__batch_pool_wait(batch, batch->pool.n, -1);
  kvik__batch_pool_collect(batch);
  return kvik__message_restore(&m, rc);
}

void kvik_batch_free(kvik_batch *batch) {
  if (!batch) return;
  kvik__saved_message m;
  kvik__message_save(&m);
  kvik_batch_cancel(batch);
  kvik__batch_cufile_free(batch);
  batch_release(batch);
  kvik__message_restore(&m, 0);
}
