/* Batch IO: many independent reads and writes submitted at once, their completions collected
 * through one queue. Operations into device memory on files that cuFile serves go to cuFile's
 * batch API; other operations go to the batch's io_uring where KVIK_SETTING_IO_URING says so,
 * device memory through a pinned staging arena (staging.h); all others run on the thread pool as
 * ordinary futures (kvik_file_pread/pwrite).
 *
 * Each operation holds a slot from its submission until its completion is collected: that is
 * what max_ops bounds. A slot in flight is on the pool (its future in pool[]), in cuFile's batch
 * (its index is cuFile's cookie) or in the ring (its index is the ring's id for it); once done,
 * its event waits in the done queue,
 * in the order of completion, until kvik_batch_wait() hands it out. The batch is used by one
 * thread at a time, so none of this needs a lock. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "cufile.h"
#include "error.h"
#include "file.h"
#include "future.h"
#include "gds.h"
#include "init.h"
#include "memory.h"
#include "settings.h"
#include "staging.h"
#include "sys.h"
#include "uring.h"

#define MAX_OPS 65536

/* While several kinds are in flight no single call can sleep on all: cuFile's and the ring's
 * completions are only seen by asking them. A wait then alternates polls with a wait of at most
 * this long on one kind, so a completion of another is noticed within about this much. */
#define MIXED_SLICE_NS ((int64_t)1000000)

/* io_uring's read and write take 32-bit lengths, and Linux moves at most this much per call:
 * larger operations go to the pool, which splits them anyway. */
#define RING_MAX_OP ((size_t)0x7ffff000)

/* The longest one cuFileBatchIOGetStatus call may wait. cuFile is never given a NULL timeout,
 * whose meaning its documentation leaves open; an unlimited wait is a loop of these. */
#define CUFILE_WAIT_MAX_NS ((int64_t)1000000000)

typedef struct slot {
  void *cookie;
  int in_cufile;          /* in flight in cuFile's batch, which may report it */
  size_t size;            /* of a cuFile operation (to tell a short write) or a staged one */
  int write;
  char *dev;              /* a staged operation's device memory ... */
  char *piece;            /* ... and its piece of the staging arena; NULL for others */
  size_t copied;          /* a staged read's bytes, while their copy to the device runs */
  kvik_batch_event event; /* once done */
} slot;

struct kvik_batch {
  unsigned max_ops;
  slot *slots;
  unsigned *free_ids, nfree;                /* a stack of free slots */
  unsigned *done_ids, done_head, ndone;     /* a ring of slots done, oldest first */
  unsigned *pool_ids, npool;                /* pool operations in flight ... */
  kvik_future **pool;                       /* ... and their futures, at the same index */
  unsigned ncufile;                         /* cuFile operations in flight */
  kvik__uring *ring;                        /* set up on the first operation that goes there */
  int ring_refused;                         /* setting it up failed: the pool serves all */
  kvik__staging *staging;                   /* set up on the first device operation for the ring */
  int staging_refused;                      /* setting it up failed: the pool serves device memory */
  unsigned *copying_ids, ncopying;          /* staged reads whose copies to the device run */
  /* cuFile's batch, set up on the first operation that goes there. */
  kvik__cufile_batch_handle handle;
  unsigned capacity;   /* the entries it was set up with */
  CUcontext ctx;       /* current during every call on it */
  unsigned generation; /* kvik__cufile_generation() at set-up */
  kvik__cufile_io_params *params;
  kvik__cufile_io_event *events;
};

/* Where kvik_batch_submit() sends one operation. */
typedef struct route {
  int cufile;
  int host;   /* host memory, not an append write: the ring may take it */
  int device; /* device or managed memory, not an append write: the ring may take it, staged */
  CUcontext ctx;
  kvik__cufile_handle handle;
  char *base; /* the start of the buffer's allocation */
  /* Set while the ring's part is submitted: */
  int held;   /* the file is held */
  int ring;   /* the ring takes it, as uop says, in slot id */
  int failed; /* it failed before the ring took it, and is done */
  kvik__uring_op uop;
  unsigned id;
} route;

/* ---- messages ------------------------------------------------------------------------------ */

/* A call that succeeds leaves this thread's message as it was, even when operations it started
 * or collected failed: their events carry the codes, and the futures behind them would
 * otherwise leave their messages here. */
typedef struct saved_message {
  char text[KVIK_MESSAGE_MAX];
} saved_message;

static void save_message(saved_message *m) { snprintf(m->text, sizeof m->text, "%s", kvik_last_error()); }

static int restore_message(const saved_message *m, int rc) {
  if (rc >= 0) kvik__set_message(m->text);
  return rc;
}

/* ---- slots --------------------------------------------------------------------------------- */

static unsigned take_slot(kvik_batch *b, void *cookie) {
  unsigned id = b->free_ids[--b->nfree];
  b->slots[id].cookie = cookie;
  return id;
}

static void put_slot(kvik_batch *b, unsigned id) { b->free_ids[b->nfree++] = id; }

static void finish(kvik_batch *b, unsigned id, kvik_batch_status status, ssize_t result) {
  slot *s = &b->slots[id];
  s->in_cufile = 0;
  s->event = (kvik_batch_event){s->cookie, status, result};
  b->done_ids[(b->done_head + b->ndone++) % b->max_ops] = id;
}

static kvik_batch_event pop_done(kvik_batch *b) {
  unsigned id = b->done_ids[b->done_head];
  b->done_head = (b->done_head + 1) % b->max_ops;
  b->ndone--;
  put_slot(b, id);
  return b->slots[id].event;
}

/* ---- the pool ------------------------------------------------------------------------------ */

static void start_on_pool(kvik_batch *b, const kvik_batch_op *op) {
  unsigned id = take_slot(b, op->cookie);
  kvik_future *future = NULL;
  int rc = op->opcode == KVIK_BATCH_READ ? kvik_file_pread(op->file, op->buf, op->size, op->file_offset, 0, &future)
                                         : kvik_file_pwrite(op->file, op->buf, op->size, op->file_offset, 0, &future);
  /* Everything kvik_file_pread checks was checked already: what fails here (out of memory, a
   * file closed meanwhile) fails this operation alone, as it would have in flight. */
  if (rc < 0) {
    finish(b, id, KVIK_BATCH_FAILED, rc);
    return;
  }
  b->pool_ids[b->npool] = id;
  b->pool[b->npool++] = future;
}

/* Move the pool operations that are done to the done queue. */
static void collect_pool(kvik_batch *b) {
  for (unsigned k = 0; k < b->npool;) {
    kvik_future *future = b->pool[k];
    if (!kvik_future_done(future)) {
      k++;
      continue;
    }
    unsigned id = b->pool_ids[k];
    ssize_t result = kvik_future_wait(future);
    kvik_future_free(future);
    b->npool--;
    b->pool[k] = b->pool[b->npool];
    b->pool_ids[k] = b->pool_ids[b->npool];
    finish(b, id, result < 0 ? KVIK_BATCH_FAILED : KVIK_BATCH_COMPLETE, result);
  }
}

/* ---- io_uring ------------------------------------------------------------------------------ */

/* Staged reads are copied to the device where their completions are collected; a failed copy's
 * message names this. */
#define COLLECT_FN "kvik_batch_wait"

static kvik_batch_status status_of(ssize_t result, int canceled) {
  return canceled ? KVIK_BATCH_CANCELED : result < 0 ? KVIK_BATCH_FAILED : KVIK_BATCH_COMPLETE;
}

static void unstage(kvik_batch *b, slot *s) {
  if (!s->piece) return;
  kvik__staging_put(b->staging, s->piece, s->size);
  s->piece = NULL;
}

/* An operation the ring ended. A staged read that moved bytes is not done before they reach the
 * device: its copy is queued here, and finish_copies() waits for all of them at once. */
static void ring_done(void *self, unsigned id, ssize_t result, int canceled) {
  kvik_batch *b = self;
  slot *s = &b->slots[id];
  if (s->piece && !s->write && result > 0) {
    int rc = kvik__staging_copy(COLLECT_FN, b->staging, KVIK__READ, s->dev, s->piece, (size_t)result);
    if (rc == 0) {
      s->copied = (size_t)result;
      b->copying_ids[b->ncopying++] = id;
      return;
    }
    result = rc;
  }
  unstage(b, s);
  finish(b, id, status_of(result, canceled), result);
}

static void finish_copies(kvik_batch *b) {
  if (b->ncopying == 0) return;
  int rc = kvik__staging_sync(COLLECT_FN, b->staging);
  for (unsigned k = 0; k < b->ncopying; k++) {
    unsigned id = b->copying_ids[k];
    slot *s = &b->slots[id];
    unstage(b, s);
    finish(b, id, rc < 0 ? KVIK_BATCH_FAILED : KVIK_BATCH_COMPLETE, rc < 0 ? rc : (ssize_t)s->copied);
  }
  b->ncopying = 0;
}

static unsigned ring_in_flight(const kvik_batch *b) { return b->ring ? kvik__uring_in_flight(b->ring) : 0; }

static int collect_ring(kvik_batch *b, unsigned min_nr, int64_t timeout_ns) {
  int rc = kvik__uring_reap(b->ring, min_nr, timeout_ns, ring_done, b);
  finish_copies(b);
  return rc;
}

/* In a child after fork() the ring and the staging arena are the parent's: the ring's
 * operations are reported canceled by the fork, and the child sets up its own when it needs
 * them. */
static void drop_forked_ring(kvik_batch *b) {
  if (!b->ring || !kvik__uring_forked(b->ring)) return;
  collect_ring(b, 0, 0);
  kvik__uring_free(b->ring);
  kvik__staging_free(b->staging);
  b->ring = NULL;
  b->staging = NULL;
}

/* The largest part of the arena to try once io_uring refused all of it: half of it, halved
 * again while above RLIMIT_MEMLOCK, since io_uring pins the pages before it checks the limit and
 * so each refusal costs as much as a registration. */
static size_t largest_part_allowed(void) {
  struct rlimit limit;
  size_t len = KVIK__STAGING_BYTES / 2;
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0)
    while (len >= KVIK__STAGING_UNIT && limit.rlim_cur != RLIM_INFINITY && len > limit.rlim_cur) len /= 2;
  return len;
}

/* The arena registered as the ring's fixed buffer, where both exist: all of it, else the largest
 * part from its start, halving down to one unit, that RLIMIT_MEMLOCK lets io_uring pin (8 MiB is
 * a common limit for users without CAP_IPC_LOCK). The arena hands out its lowest free units
 * first, so that part serves most operations; the others, or all of them where nothing could be
 * registered, make the kernel pin their pages per operation. */
static void register_staging(kvik_batch *b) {
  if (!b->ring || !b->staging) return;
  char *base = kvik__staging_base(b->staging);
  if (kvik__uring_register_buffer(b->ring, base, KVIK__STAGING_BYTES) != -ENOMEM) return;
  for (size_t len = largest_part_allowed(); len >= KVIK__STAGING_UNIT; len /= 2)
    if (kvik__uring_register_buffer(b->ring, base, len) != -ENOMEM) return;
}

/* The ring, set up on first use; NULL where it cannot be. */
static kvik__uring *ring_of(kvik_batch *b) {
  if (b->ring || b->ring_refused) return b->ring;
  if (kvik__uring_create("kvik_batch_submit", b->max_ops, kvik__file_transfer, &b->ring) < 0)
    b->ring_refused = 1;
  register_staging(b);
  return b->ring;
}

/* A piece of `size` bytes of the arena for device memory of `ctx`, which is set up on first use;
 * NULL where there is no room, the arena serves another context, or it cannot be set up. */
static char *stage(kvik_batch *b, CUcontext ctx, size_t size) {
  if (!b->staging && !b->staging_refused) {
    if (kvik__staging_create("kvik_batch_submit", ctx, &b->staging) < 0) b->staging_refused = 1;
    register_staging(b);
  }
  if (!b->staging || kvik__staging_context(b->staging) != ctx) return NULL;
  return kvik__staging_take(b->staging, size);
}

/* Whether the ring serves this operation, and how, in *uop: through the file's O_DIRECT
 * descriptor where it may, and for device memory through a piece of the staging arena, which
 * is then the operation's buffer. */
static int ring_takes(kvik_batch *b, const kvik_batch_op *op, const route *r, kvik__uring_op *uop) {
  int64_t mode = kvik__setting(KVIK_SETTING_IO_URING);
  if (mode == KVIK_OFF || b->ring_refused || op->size > (r->device ? KVIK__STAGING_MAX_OP : RING_MAX_OP)) return 0;
  kvik__op kind = op->opcode == KVIK_BATCH_READ ? KVIK__READ : KVIK__WRITE;
  int direct, buf_aligned = r->device || kvik__direct_aligned((uintptr_t)op->buf);
  int fd = kvik__file_ring_fd(op->file, kind, buf_aligned, op->size, op->file_offset, &direct);
  int small = op->size < (size_t)kvik__setting(KVIK_SETTING_GDS_THRESHOLD);
  if ((mode == KVIK_AUTO && !small && !direct) || !ring_of(b)) return 0;
  char *buf = r->device ? stage(b, r->ctx, op->size) : op->buf;
  if (!buf) return 0;
  *uop = (kvik__uring_op){op->file, kind, fd, direct, buf, op->size, op->file_offset};
  return 1;
}

/* A staged operation's slot notes its device memory and piece; a write gets its bytes copied
 * from the device, queued. Returns 0 or the copy's code. */
static int stage_op(kvik_batch *b, const kvik_batch_op *op, const route *r) {
  slot *s = &b->slots[r->id];
  s->dev = op->buf;
  s->piece = r->uop.buf;
  s->size = op->size;
  s->write = op->opcode == KVIK_BATCH_WRITE;
  return s->write ? kvik__staging_copy("kvik_batch_submit", b->staging, KVIK__WRITE, s->dev, s->piece, op->size) : 0;
}

/* Fail a staged operation with `code` before the ring got it. */
static void fail_staged(kvik_batch *b, route *r, int code) {
  unstage(b, &b->slots[r->id]);
  finish(b, r->id, KVIK_BATCH_FAILED, code);
  r->ring = 0;
  r->failed = 1;
}

/* Route to the ring the operations it takes, hold their files, and take their slots; queue the
 * copies of staged writes from the device. Returns how many staged writes there are. */
static unsigned plan_ring(kvik_batch *b, const kvik_batch_op *ops, route *r, unsigned count) {
  unsigned staged_writes = 0;
  for (unsigned i = 0; i < count; i++) {
    if ((!r[i].host && !r[i].device) || r[i].cufile) continue;
    if (kvik__file_hold(ops[i].file) < 0) continue; /* closed meanwhile: the pool reports it */
    r[i].held = 1;
    if (!ring_takes(b, &ops[i], &r[i], &r[i].uop)) continue;
    r[i].ring = 1;
    r[i].id = take_slot(b, ops[i].cookie);
    if (!r[i].device) continue;
    int rc = stage_op(b, &ops[i], &r[i]);
    staged_writes += b->slots[r[i].id].write;
    if (rc < 0) fail_staged(b, &r[i], rc);
  }
  return staged_writes;
}

/* Hand the operations the ring takes to the kernel while their files are held: from then on the
 * kernel holds the files itself. The others are left to the pool. */
static void submit_ring(kvik_batch *b, const kvik_batch_op *ops, route *r, unsigned count) {
  drop_forked_ring(b);
  unsigned staged_writes = plan_ring(b, ops, r, count), started = 0;
  /* The kernel may take an operation as soon as it is queued: the copies come first. */
  int copy_rc = staged_writes > 0 ? kvik__staging_sync("kvik_batch_submit", b->staging) : 0;
  for (unsigned i = 0; i < count; i++) {
    if (!r[i].ring) continue;
    if (copy_rc < 0 && r[i].device && r[i].uop.op == KVIK__WRITE) {
      fail_staged(b, &r[i], copy_rc);
      continue;
    }
    kvik__uring_start(b->ring, r[i].id, &r[i].uop);
    started++;
  }
  if (started > 0) kvik__uring_submit(b->ring);
  for (unsigned i = 0; i < count; i++)
    if (r[i].held) kvik__file_let_go(ops[i].file);
}

/* ---- cuFile -------------------------------------------------------------------------------- */

/* Enter a call on cuFile's batch: the exit gate passed and the batch's context current. It fails
 * for good in a child after fork() (the batch belongs to the parent's cuFile) and once the
 * driver closes at exit. */
static int cufile_begin(kvik_batch *b, const char *fn, const kvik__cufile_api **cf) {
  if (b->generation != kvik__cufile_generation())
    return kvik__fail(KVIK_ECANCELED_BY_FORK, "%s: the batch's cuFile operations belong to the parent process", fn);
  *cf = kvik__cufile_if_open();
  if (!*cf) return kvik__fail(-KVIK__CU_FILE_DRIVER_CLOSING, "%s: the cuFile driver is closed", fn);
  int rc = kvik__cufile_enter(fn);
  if (rc < 0) return rc;
  rc = kvik__context_push(fn, b->ctx);
  if (rc < 0) kvik__cufile_leave();
  return rc;
}

static void cufile_end(void) {
  kvik__context_pop();
  kvik__cufile_leave();
}

/* Report every cuFile operation in flight as failed with `code`: used when cuFile cannot be asked
 * about them any more, so that waits and kvik_batch_free() end. */
static void abandon_cufile(kvik_batch *b, int code) {
  for (unsigned id = 0; id < b->max_ops && b->ncufile > 0; id++) {
    if (!b->slots[id].in_cufile) continue;
    b->ncufile--;
    finish(b, id, KVIK_BATCH_FAILED, code);
  }
}

/* The code of a failed cuFile operation: its "negated error" is -errno or -(cuFile status), which
 * are kvik's codes for them too. Anything else is no code cuFile documents: an IO error. */
static ssize_t failure_code(size_t ret) {
  ssize_t code = (ssize_t)ret;
  if ((code < 0 && code > KVIK_ERRNO_BASE) || KVIK_IS_CUFILE_ERROR(code)) return code;
  return -EIO;
}

/* Queue the completion cuFile reported. Entries still waiting or pending are not completions. */
static void take_cufile_event(kvik_batch *b, const kvik__cufile_io_event *ev) {
  uintptr_t id = (uintptr_t)ev->cookie;
  if (id >= b->max_ops || !b->slots[id].in_cufile) return; /* reported before */
  const slot *s = &b->slots[id];
  kvik_batch_status status = KVIK_BATCH_FAILED;
  ssize_t result;
  if (ev->status == KVIK__CUFILE_COMPLETE && s->write && ev->ret < s->size) {
    result = -EIO; /* a short write is an error, as kvik_file_write has it */
  } else if (ev->status == KVIK__CUFILE_COMPLETE) {
    status = KVIK_BATCH_COMPLETE;
    result = (ssize_t)ev->ret;
  } else if (ev->status == KVIK__CUFILE_CANCELED) {
    status = KVIK_BATCH_CANCELED;
    result = -ECANCELED;
  } else if (ev->status == KVIK__CUFILE_FAILED) {
    result = failure_code(ev->ret);
  } else if (ev->status == KVIK__CUFILE_TIMEOUT) {
    result = -ETIMEDOUT;
  } else if (ev->status == KVIK__CUFILE_INVALID) {
    result = -EINVAL;
  } else {
    return;
  }
  b->ncufile--;
  finish(b, (unsigned)id, status, result);
}

/* Collect what cuFile reports, waiting up to timeout_ns until min_nr operations completed. If
 * cuFile can no longer be called for the batch, its operations fail with that code. */
static int collect_cufile(kvik_batch *b, const char *fn, unsigned min_nr, int64_t timeout_ns) {
  const kvik__cufile_api *cf;
  int rc = cufile_begin(b, fn, &cf);
  if (rc < 0) {
    abandon_cufile(b, rc);
    return 0;
  }
  unsigned nr = b->capacity;
  struct timespec timeout = {(time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000)};
  rc = kvik__cufile_check(cf->cuFileBatchIOGetStatus(b->handle, min_nr, &nr, b->events, &timeout), fn,
                          "cuFileBatchIOGetStatus");
  cufile_end();
  for (unsigned k = 0; rc == 0 && k < nr && k < b->capacity; k++) take_cufile_event(b, &b->events[k]);
  return rc;
}

/* How many entries cuFile's batch gets: max_ops, or cuFile's own limit (its io_batchsize, 128 by
 * default) where that is lower, as cuFileBatchIOSetUp refuses more. Operations beyond it run on
 * the pool. */
static unsigned cufile_capacity(const kvik__cufile_api *cf, unsigned max_ops) {
  kvik__cufile_props props = {0};
  if (cf->cuFileDriverGetProperties(&props).err != KVIK__CUFILE_SUCCESS || props.max_batch_io_size == 0) return max_ops;
  return props.max_batch_io_size < max_ops ? props.max_batch_io_size : max_ops;
}

static int setup_cufile(kvik_batch *b, const char *fn, CUcontext ctx) {
  b->ctx = ctx;
  b->generation = kvik__cufile_generation();
  const kvik__cufile_api *cf;
  int rc = cufile_begin(b, fn, &cf);
  if (rc < 0) return rc;
  b->capacity = cufile_capacity(cf, b->max_ops);
  free(b->params);
  free(b->events);
  b->params = kvik__calloc(b->capacity, sizeof *b->params);
  b->events = kvik__calloc(b->capacity, sizeof *b->events);
  if (!b->params || !b->events) rc = kvik__fail(-ENOMEM, "%s: out of memory for cuFile's batch", fn);
  kvik__cufile_batch_handle handle = NULL;
  if (rc == 0) rc = kvik__cufile_check(cf->cuFileBatchIOSetUp(&handle, b->capacity), fn, "cuFileBatchIOSetUp");
  cufile_end();
  b->handle = rc == 0 ? handle : NULL;
  return rc;
}

static kvik__cufile_io_params cufile_params(const kvik_batch_op *op, const route *r, unsigned id) {
  kvik__cufile_io_params p = {0};
  p.mode = KVIK__CUFILE_BATCH;
  p.u.batch.devPtr_base = r->base;
  p.u.batch.file_offset = (off_t)op->file_offset;
  p.u.batch.devPtr_offset = (off_t)((char *)op->buf - r->base);
  p.u.batch.size = op->size;
  p.fh = r->handle;
  p.opcode = op->opcode == KVIK_BATCH_READ ? KVIK__CUFILE_READ : KVIK__CUFILE_WRITE;
  p.cookie = (void *)(uintptr_t)id;
  return p;
}

/* Hand the operations routed to cuFile to its batch in one cuFileBatchIOSubmit. Those beyond its
 * free entries are routed to the pool instead. On failure nothing was submitted. */
static int submit_cufile(kvik_batch *b, const char *fn, const kvik_batch_op *ops, route *r, unsigned count,
                         CUcontext ctx) {
  unsigned n = 0;
  for (unsigned i = 0; i < count; i++) n += r[i].cufile;
  if (n == 0) return 0;
  int rc = b->handle ? 0 : setup_cufile(b, fn, ctx);
  if (rc < 0) return rc;
  unsigned k = 0;
  for (unsigned i = 0; i < count; i++) {
    if (!r[i].cufile) continue;
    if (b->ncufile + k == b->capacity) {
      r[i].cufile = 0;
      continue;
    }
    unsigned id = take_slot(b, ops[i].cookie);
    b->slots[id].size = ops[i].size;
    b->slots[id].write = ops[i].opcode == KVIK_BATCH_WRITE;
    b->params[k++] = cufile_params(&ops[i], &r[i], id);
  }
  if (k == 0) return 0;
  const kvik__cufile_api *cf;
  rc = cufile_begin(b, fn, &cf);
  if (rc == 0) {
    rc = kvik__cufile_check(cf->cuFileBatchIOSubmit(b->handle, k, b->params, 0), fn, "cuFileBatchIOSubmit");
    cufile_end();
  }
  for (unsigned j = 0; j < k; j++) {
    unsigned id = (unsigned)(uintptr_t)b->params[j].cookie;
    if (rc < 0) put_slot(b, id);
    else b->slots[id].in_cufile = 1;
  }
  if (rc == 0) b->ncufile += k;
  return rc;
}

/* ---- checking and routing ------------------------------------------------------------------- */

/* Whether cuFile's batch takes the operation: device memory on a file that cuFile serves, with a
 * cuFile that has the batch API. The batch runs in one context (*ctx, once known): memory of
 * another, and writes to append handles (the kernel places those, one append of the file at a
 * time: see request.c), go to the pool. */
static int route_op(const char *who, const kvik_batch_op *op, int flags, CUcontext *ctx, route *r) {
  kvik__memory mem;
  int rc = kvik__memory_classify(who, op->buf, &mem);
  if (rc < 0) return rc;
  int append_write = (flags & O_APPEND) && op->opcode == KVIK_BATCH_WRITE;
  r->host = (mem.kind == KVIK_MEMORY_HOST || mem.kind == KVIK_MEMORY_PINNED) && !append_write;
  r->device = kvik__memory_on_device(&mem) && op->size > 0 && !append_write;
  r->ctx = mem.ctx;
  if (mem.kind != KVIK_MEMORY_DEVICE || op->size == 0 || append_write) return 0;
  r->handle = kvik__gds_handle(kvik__file_gds(op->file));
  const kvik__cufile_api *cf = kvik__cufile_if_open();
  if (!r->handle || !cf || !cf->cuFileBatchIOSetUp || !cf->cuFileBatchIOSubmit || !cf->cuFileBatchIOGetStatus ||
      !cf->cuFileBatchIOCancel || !cf->cuFileBatchIODestroy)
    return 0;
  if (*ctx && *ctx != mem.ctx) return 0;
  size_t alloc_size;
  rc = kvik__allocation_range(who, op->buf, &r->base, &alloc_size);
  if (rc < 0) return rc;
  *ctx = mem.ctx;
  r->cufile = 1;
  return 0;
}

/* Check operation i as kvik_file_pread/pwrite would, and route it. */
static int check_op(const char *fn, unsigned i, const kvik_batch_op *op, CUcontext *ctx, route *r) {
  char who[64];
  snprintf(who, sizeof who, "%s: operation %u", fn, i);
  if (!op->file) return kvik__fail(-EINVAL, "%s: NULL file", who);
  const char *path = kvik__file_path(op->file);
  int is_write = (int)op->opcode == KVIK_BATCH_WRITE;
  if (!is_write && (int)op->opcode != KVIK_BATCH_READ)
    return kvik__fail(-EINVAL, "%s(\"%s\"): unknown opcode %d", who, path, (int)op->opcode);
  if (!op->buf && op->size > 0)
    return kvik__fail(-EINVAL, "%s(\"%s\"): NULL buffer for %zu bytes", who, path, op->size);
  if (op->file_offset < 0)
    return kvik__fail(-EINVAL, "%s(\"%s\"): negative offset %lld", who, path, (long long)op->file_offset);
  if (op->size > (size_t)SSIZE_MAX || (uint64_t)op->file_offset + op->size > (uint64_t)INT64_MAX)
    return kvik__fail(-EINVAL, "%s(\"%s\"): %zu bytes at offset %lld overflow the largest file offset", who, path,
                      op->size, (long long)op->file_offset);
  if (kvik_file_closed(op->file)) return kvik__fail(-EBADF, "%s(\"%s\"): file is closed", who, path);
  int flags = kvik__file_access(op->file);
  if ((flags & O_ACCMODE) == (is_write ? O_RDONLY : O_WRONLY))
    return kvik__fail(-EBADF, "%s(\"%s\"): file not opened for %s", who, path, is_write ? "writing" : "reading");
  return route_op(who, op, flags, ctx, r);
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

/* Collect completions until `need` are queued or the deadline passes. `need` is at most what is
 * queued and in flight, so each branch below has enough operations to wait for. */
static int gather(kvik_batch *b, const char *fn, unsigned need, int64_t deadline) {
  for (;;) {
    collect_pool(b);
    int rc = b->ncufile ? collect_cufile(b, fn, 0, 0) : 0;
    if (rc == 0 && ring_in_flight(b)) rc = collect_ring(b, 0, 0);
    if (rc < 0 || b->ndone >= need || left_until(deadline, -1) == 0) return rc;
    unsigned want = need - b->ndone, nring = ring_in_flight(b);
    int kinds = (b->npool > 0) + (b->ncufile > 0) + (nring > 0);
    int64_t slice = kinds > 1 ? MIXED_SLICE_NS : -1;
    if (b->npool > 0) {
      kvik__futures_wait_some(b->pool, b->npool, want < b->npool ? want : b->npool, left_until(deadline, slice));
    } else if (nring > 0) {
      rc = collect_ring(b, want < nring ? want : nring, left_until(deadline, slice));
    } else {
      rc = collect_cufile(b, fn, want, left_until(deadline, CUFILE_WAIT_MAX_NS));
    }
    if (rc < 0) return rc;
  }
}

/* cuFileBatchIOCancel, then every status cuFile gives, so that nothing of cuFile's is in flight on
 * return: canceled operations report CANCELED, those that finished first their result. If cuFile
 * stops answering, the operations left fail with its code. */
static int cancel_cufile(kvik_batch *b, const char *fn) {
  const kvik__cufile_api *cf;
  int rc = cufile_begin(b, fn, &cf);
  if (rc < 0) {
    abandon_cufile(b, rc);
    return rc;
  }
  rc = kvik__cufile_check(cf->cuFileBatchIOCancel(b->handle), fn, "cuFileBatchIOCancel");
  cufile_end();
  int wait_rc = 0;
  while (b->ncufile > 0 && wait_rc == 0) wait_rc = collect_cufile(b, fn, b->ncufile, CUFILE_WAIT_MAX_NS);
  if (wait_rc < 0) abandon_cufile(b, wait_rc);
  return rc < 0 ? rc : wait_rc;
}

/* ---- the API ------------------------------------------------------------------------------- */

static void batch_release(kvik_batch *b) {
  kvik__uring_free(b->ring);
  kvik__staging_free(b->staging);
  free(b->copying_ids);
  free(b->slots);
  free(b->free_ids);
  free(b->done_ids);
  free(b->pool_ids);
  free(b->pool);
  free(b->params);
  free(b->events);
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
  b->done_ids = kvik__calloc(max_ops, sizeof *b->done_ids);
  b->pool_ids = kvik__calloc(max_ops, sizeof *b->pool_ids);
  b->pool = kvik__calloc(max_ops, sizeof *b->pool);
  b->copying_ids = kvik__calloc(max_ops, sizeof *b->copying_ids);
  if (!b->slots || !b->free_ids || !b->done_ids || !b->pool_ids || !b->pool || !b->copying_ids) {
    batch_release(b);
    return kvik__fail(-ENOMEM, "%s(%u): out of memory", fn, max_ops);
  }
  /* Slot 0 on top of the stack, so that operations take slots in submission order. */
  for (unsigned id = 0; id < max_ops; id++) b->free_ids[id] = max_ops - 1 - id;
  b->nfree = max_ops;
  *batch = b;
  return 0;
}

int kvik_batch_submit(kvik_batch *batch, const kvik_batch_op *ops, unsigned count) {
  static const char fn[] = "kvik_batch_submit";
  if (!batch || (!ops && count > 0)) return kvik__fail(-EINVAL, "%s: NULL %s", fn, !batch ? "batch" : "operations");
  if (count > batch->nfree)
    return kvik__fail(-EAGAIN,
                      "%s: operation %u: more than max_ops (%u) would be in flight (%u are: an operation is until "
                      "its completion is collected)",
                      fn, batch->nfree, batch->max_ops, batch->max_ops - batch->nfree);
  if (count == 0) return 0;
  route *routes = kvik__calloc(count, sizeof *routes);
  if (!routes) return kvik__fail(-ENOMEM, "%s: out of memory for %u operations", fn, count);
  saved_message m;
  save_message(&m);
  CUcontext ctx = batch->handle ? batch->ctx : NULL;
  int rc = 0;
  for (unsigned i = 0; i < count && rc == 0; i++) rc = check_op(fn, i, &ops[i], &ctx, &routes[i]);
  if (rc == 0) rc = submit_cufile(batch, fn, ops, routes, count, ctx);
  if (rc == 0) submit_ring(batch, ops, routes, count);
  for (unsigned i = 0; i < count && rc == 0; i++)
    if (!routes[i].cufile && !routes[i].ring && !routes[i].failed) start_on_pool(batch, &ops[i]);
  free(routes);
  return restore_message(&m, rc);
}

int kvik_batch_wait(kvik_batch *batch, unsigned min_events, kvik_batch_event *events, unsigned max_events,
                    int64_t timeout_ns) {
  static const char fn[] = "kvik_batch_wait";
  if (!batch || (!events && max_events > 0))
    return kvik__fail(-EINVAL, "%s: NULL %s", fn, !batch ? "batch" : "events");
  if (min_events > max_events)
    return kvik__fail(-EINVAL, "%s: min_events %u above max_events %u", fn, min_events, max_events);
  saved_message m;
  save_message(&m);
  unsigned outstanding = batch->ndone + batch->npool + batch->ncufile + ring_in_flight(batch);
  int rc = gather(batch, fn, min_events < outstanding ? min_events : outstanding, deadline_after(timeout_ns));
  if (rc < 0) return rc;
  unsigned n = 0;
  while (n < max_events && batch->ndone > 0) events[n++] = pop_done(batch);
  return restore_message(&m, (int)n);
}

int kvik_batch_cancel(kvik_batch *batch) {
  static const char fn[] = "kvik_batch_cancel";
  if (!batch) return kvik__fail(-EINVAL, "%s: NULL batch", fn);
  saved_message m;
  save_message(&m);
  /* Operations on the pool cannot be stopped: their tasks may have moved bytes already, so they
   * are waited for and report what they did rather than a cancellation that did not happen. The
   * kernel cancels only ring operations that have not started. */
  int rc = batch->ncufile > 0 ? cancel_cufile(batch, fn) : 0;
  if (ring_in_flight(batch)) kvik__uring_cancel(batch->ring);
  while (ring_in_flight(batch) && collect_ring(batch, ring_in_flight(batch), -1) == 0) continue;
  kvik__futures_wait_some(batch->pool, batch->npool, batch->npool, -1);
  collect_pool(batch);
  return restore_message(&m, rc);
}

void kvik_batch_free(kvik_batch *batch) {
  if (!batch) return;
  saved_message m;
  save_message(&m);
  kvik_batch_cancel(batch);
  const kvik__cufile_api *cf = NULL;
  if (batch->handle && cufile_begin(batch, "kvik_batch_free", &cf) == 0) {
    cf->cuFileBatchIODestroy(batch->handle);
    cufile_end();
  }
  batch_release(batch);
  restore_message(&m, 0);
}
