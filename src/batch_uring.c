/* The io_uring part of a batch: operations handed from the submitting thread to the kernel,
 * device memory through a pinned staging arena (staging.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/resource.h>

#include "batch.h"
#include "file.h"
#include "settings.h"

/* io_uring's read and write take 32-bit lengths, and Linux moves at most this much per call:
 * larger operations go to the pool, which splits them anyway. */
#define RING_MAX_OP ((size_t)0x7ffff000)

/* Staged reads are copied to the device where their completions are collected; a failed copy's
 * message names this. */
#define COLLECT_FN "kvik_batch_wait"

static kvik_batch_status status_of(ssize_t result, int canceled) {
  return canceled ? KVIK_BATCH_CANCELED : result < 0 ? KVIK_BATCH_FAILED : KVIK_BATCH_COMPLETE;
}

static void unstage(kvik_batch *b, kvik__batch_slot *s) {
  if (!s->piece) return;
  kvik__staging_put(b->uring.staging, s->piece, s->size);
  s->piece = NULL;
}

/* An operation the ring ended. A staged read that moved bytes is not done before they reach the
 * device: its copy is queued here, and finish_copies() waits for all of them at once. */
static void ring_done(void *self, unsigned id, ssize_t result, int canceled) {
  kvik_batch *b = self;
  kvik__batch_slot *s = &b->slots[id];
  if (s->piece && !s->write && result > 0) {
    int rc = kvik__staging_copy(COLLECT_FN, b->uring.staging, KVIK__READ, s->dev, s->piece,
                                (size_t)result);
    if (rc == 0) {
      s->copied = (size_t)result;
      b->uring.copying_ids[b->uring.ncopying++] = id;
      return;
    }
    result = rc;
  }
  unstage(b, s);
  kvik__batch_finish(b, id, status_of(result, canceled), result);
}

static void finish_copies(kvik_batch *b) {
  if (b->uring.ncopying == 0) return;
  int rc = kvik__staging_sync(COLLECT_FN, b->uring.staging);
  for (unsigned k = 0; k < b->uring.ncopying; k++) {
    unsigned id = b->uring.copying_ids[k];
    kvik__batch_slot *s = &b->slots[id];
    unstage(b, s);
    kvik__batch_finish(b, id, rc < 0 ? KVIK_BATCH_FAILED : KVIK_BATCH_COMPLETE,
                       rc < 0 ? rc : (ssize_t)s->copied);
  }
  b->uring.ncopying = 0;
}

unsigned kvik__batch_uring_in_flight(const kvik_batch *b) {
  return b->uring.ring ? kvik__uring_in_flight(b->uring.ring) : 0;
}

int kvik__batch_uring_collect(kvik_batch *b, unsigned min_nr, int64_t timeout_ns) {
  int rc = kvik__uring_reap(b->uring.ring, min_nr, timeout_ns, ring_done, b);
  finish_copies(b);
  return rc;
}

/* In a child after fork() the ring and the staging arena are the parent's: the ring's
 * operations are reported canceled by the fork, and the child sets up its own when it needs
 * them. */
static void drop_forked_ring(kvik_batch *b) {
  if (!b->uring.ring || !kvik__uring_forked(b->uring.ring)) return;
  kvik__batch_uring_collect(b, 0, 0);
  kvik__uring_free(b->uring.ring);
  kvik__staging_free(b->uring.staging);
  b->uring.ring = NULL;
  b->uring.staging = NULL;
}

/* The largest part of the arena to try once io_uring refused all of it: half of it, halved
 * again while above RLIMIT_MEMLOCK, since io_uring pins the pages before it checks the limit and
 * so each refusal costs as much as a registration. */
static size_t largest_part_allowed(void) {
  struct rlimit limit;
  size_t len = KVIK__STAGING_BYTES / 2;
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0)
    while (len >= KVIK__STAGING_UNIT && limit.rlim_cur != RLIM_INFINITY && len > limit.rlim_cur)
      len /= 2;
  return len;
}

/* The arena registered as the ring's fixed buffer, where both exist: all of it, else the largest
 * part from its start, halving down to one unit, that RLIMIT_MEMLOCK lets io_uring pin (8 MiB is
 * a common limit for users without CAP_IPC_LOCK). The arena hands out its lowest free units
 * first, so that part serves most operations; the others, or all of them where nothing could be
 * registered, make the kernel pin their pages per operation. */
static void register_staging(kvik_batch *b) {
  if (!b->uring.ring || !b->uring.staging) return;
  char *base = kvik__staging_base(b->uring.staging);
  if (kvik__uring_register_buffer(b->uring.ring, base, KVIK__STAGING_BYTES) != -ENOMEM) return;
  for (size_t len = largest_part_allowed(); len >= KVIK__STAGING_UNIT; len /= 2)
    if (kvik__uring_register_buffer(b->uring.ring, base, len) != -ENOMEM) return;
}

/* The ring, set up on first use; NULL where it cannot be. */
static kvik__uring *ring_of(kvik_batch *b) {
  if (b->uring.ring || b->uring.refused) return b->uring.ring;
  if (kvik__uring_create("kvik_batch_submit", b->max_ops, kvik__file_transfer, &b->uring.ring) < 0)
    b->uring.refused = 1;
  register_staging(b);
  return b->uring.ring;
}

/* A piece of `size` bytes of the arena for device memory of `ctx`, which is set up on first use;
 * NULL where there is no room, the arena serves another context, or it cannot be set up. */
static char *stage(kvik_batch *b, CUcontext ctx, size_t size) {
  if (!b->uring.staging && !b->uring.staging_refused) {
    if (kvik__staging_create("kvik_batch_submit", ctx, &b->uring.staging) < 0)
      b->uring.staging_refused = 1;
    register_staging(b);
  }
  if (!b->uring.staging || kvik__staging_context(b->uring.staging) != ctx) return NULL;
  return kvik__staging_take(b->uring.staging, size);
}

/* Whether the ring serves this operation, and how, in *uop: through the file's O_DIRECT
 * descriptor where it may, and for device memory through a piece of the staging arena, which
 * is then the operation's buffer. */
static int ring_takes(kvik_batch *b, const kvik_batch_op *op, const kvik__batch_route *r,
                      kvik__uring_op *uop) {
  int64_t mode = kvik__setting(KVIK_SETTING_IO_URING);
  if (mode == KVIK_OFF || b->uring.refused ||
      op->size > (r->device ? KVIK__STAGING_MAX_OP : RING_MAX_OP))
    return 0;
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
static int stage_op(kvik_batch *b, const kvik_batch_op *op, const kvik__batch_route *r) {
  kvik__batch_slot *s = &b->slots[r->id];
  s->dev = op->buf;
  s->piece = r->uop.buf;
  s->size = op->size;
  s->write = op->opcode == KVIK_BATCH_WRITE;
  return s->write ? kvik__staging_copy("kvik_batch_submit", b->uring.staging, KVIK__WRITE, s->dev,
                                       s->piece, op->size)
                  : 0;
}

/* Fail a staged operation with `code` before the ring got it. */
static void fail_staged(kvik_batch *b, kvik__batch_route *r, int code) {
  unstage(b, &b->slots[r->id]);
  kvik__batch_finish(b, r->id, KVIK_BATCH_FAILED, code);
  r->ring = 0;
  r->failed = 1;
}

/* Whether the ring may take the operation: memory it can serve, not cuFile's, not done. */
static int ring_may_take(const kvik__batch_route *r) {
  return (r->host || r->device) && !r->cufile && !r->done;
}

/* Route to the ring the operations it takes, hold their files, and take their slots; queue the
 * copies of staged writes from the device. Returns how many staged writes there are. */
static unsigned plan_ring(kvik_batch *b, const kvik_batch_op *ops, kvik__batch_route *r,
                          unsigned count) {
  unsigned staged_writes = 0;
  for (unsigned i = 0; i < count; i++) {
    if (!ring_may_take(&r[i])) continue;
    if (kvik__file_hold(ops[i].file) < 0) continue; /* closed meanwhile: the pool reports it */
    r[i].held = 1;
    if (!ring_takes(b, &ops[i], &r[i], &r[i].uop)) continue;
    r[i].ring = 1;
    if (!r[i].slotted) r[i].id = kvik__batch_take_slot(b, ops[i].cookie);
    if (!r[i].device) continue;
    int rc = stage_op(b, &ops[i], &r[i]);
    staged_writes += b->slots[r[i].id].write;
    if (rc < 0) fail_staged(b, &r[i], rc);
  }
  return staged_writes;
}

/* Hand the operations the ring takes to the kernel while their files are held: from then on the
 * kernel holds the files itself. The others are left to the pool. */
void kvik__batch_uring_submit(kvik_batch *b, const kvik_batch_op *ops, kvik__batch_route *r,
                              unsigned count) {
  unsigned candidates = 0;
  for (unsigned i = 0; i < count; i++) candidates += (unsigned)ring_may_take(&r[i]);
  if (candidates == 0) return; /* nor is asking whether the process forked (getpid) worth it */
  drop_forked_ring(b);
  unsigned staged_writes = plan_ring(b, ops, r, count), started = 0;
  /* The kernel may take an operation as soon as it is queued: the copies come first. */
  int copy_rc = staged_writes > 0 ? kvik__staging_sync("kvik_batch_submit", b->uring.staging) : 0;
  for (unsigned i = 0; i < count; i++) {
    if (!r[i].ring) continue;
    if (copy_rc < 0 && r[i].device && r[i].uop.op == KVIK__WRITE) {
      fail_staged(b, &r[i], copy_rc);
      continue;
    }
    kvik__uring_start(b->uring.ring, r[i].id, &r[i].uop);
    started++;
  }
  if (started > 0) kvik__uring_submit(b->uring.ring);
  for (unsigned i = 0; i < count; i++)
    if (r[i].held) kvik__file_let_go(ops[i].file);
}

void kvik__batch_uring_cancel(kvik_batch *b) {
  if (kvik__batch_uring_in_flight(b)) kvik__uring_cancel(b->uring.ring);
  while (kvik__batch_uring_in_flight(b) &&
         kvik__batch_uring_collect(b, kvik__batch_uring_in_flight(b), -1) == 0)
    continue;
}

void kvik__batch_uring_free(kvik_batch *b) {
  kvik__uring_free(b->uring.ring);
  kvik__staging_free(b->uring.staging);
}
