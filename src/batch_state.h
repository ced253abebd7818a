/* Batch IO (kvik_batch_*): the state that the batch (batch.c: the API, routing, waiting) shares
 * with its three backends (batch.h), and the slots and done queue that all of them use. A header
 * of its own, so that the backends use it without depending on batch.c, which calls them.
 *
 * An operation is in flight (in_flight, what max_ops bounds) from its submission until its
 * completion is collected. While a backend has it, it holds a slot: on the pool (its future in
 * pool.futures), in cuFile's batch (its index is cuFile's cookie) or in the ring (its index is
 * the ring's id for it). Once done, its event waits in the done queue, in the order of
 * completion, until kvik_batch_wait() hands it out, and its slot is free again. A read completed
 * within kvik_batch_submit() goes to the done queue at once and never holds a slot: the common
 * small read pays for no slot. The batch is used by one thread at a time, so none of this needs
 * a lock. */
#ifndef KVIK_SRC_BATCH_STATE_H
#define KVIK_SRC_BATCH_STATE_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cufile.h"
#include "kvik.h"
#include "staging.h"
#include "uring.h"

/* What every operation touches comes first: its take and finish touch one cache line of its
 * slot more often than two. */
typedef struct kvik__batch_slot {
  void *cookie;  /* the operation's, for its event */
  size_t ahead;  /* bytes read within kvik_batch_submit() before a backend took the rest */
  int in_cufile; /* in flight in cuFile's batch, which may report it */
  int write;
  size_t size;   /* of a cuFile operation (to tell a short write) or a staged one */
  char *dev;     /* a staged operation's device memory ... */
  char *piece;   /* ... and its piece of the staging arena; NULL for others */
  size_t copied; /* a staged read's bytes, while their copy to the device runs */
} kvik__batch_slot;

struct kvik_batch {
  unsigned max_ops;
  unsigned in_flight; /* operations submitted and not collected: at most max_ops */
  kvik__batch_slot *slots;
  unsigned *free_ids, nfree; /* a stack of free slots */
  kvik_batch_event *done;    /* a ring of the events of operations done, oldest first ... */
  unsigned done_head, ndone; /* ... from done[done_head], ndone of them */
  struct {                   /* batch_pool.c's */
    unsigned *ids, n;        /* operations in flight ... */
    kvik_future **futures;   /* ... and their futures, at the same index */
  } pool;
  struct {                           /* batch_uring.c's */
    kvik__uring *ring;               /* set up on the first operation that goes there */
    int refused;                     /* setting it up failed: the pool serves all */
    kvik__staging *staging;          /* set up on the first device operation for the ring */
    int staging_refused;             /* setting it up failed: the pool serves device memory */
    unsigned *copying_ids, ncopying; /* staged reads whose copies to the device run */
  } uring;
  struct { /* batch_cufile.c's: cuFile's batch, set up on the first operation that goes there */
    kvik__cufile_batch_handle handle;
    unsigned capacity;   /* the entries it was set up with */
    unsigned n;          /* operations in flight */
    CUcontext ctx;       /* current during every call on it */
    unsigned generation; /* kvik__cufile_generation() at set-up */
    kvik__cufile_io_params *params;
    kvik__cufile_io_event *events;
  } cufile;
  struct {                    /* batch.c's reads within kvik_batch_submit() */
    int refused;              /* the kernel or a file refused RWF_NOWAIT: not tried again */
    unsigned misses, skipped; /* tries in a row the page cache did not serve; tries left out */
    unsigned served;          /* tries in a row it served whole, up to TRUST_STREAK */
    unsigned trusted;         /* tries made while it was trusted, to pick the probes */
  } nowait;
  struct kvik__batch_route *routes; /* kvik_batch_submit()'s, for up to max_ops operations */
  kvik_batch_op *rest;              /* ... and what is left of each operation for a backend */
};

/* Where kvik_batch_submit() sends one operation. Its flags (appends to failed) are cleared as the
 * operation is checked, not by clearing the whole struct, and set as it goes; the others are set,
 * and read, only where a flag says so. */
typedef struct kvik__batch_route {
  int appends; /* a write to an append handle: the pool's */
  /* Set as it is routed, unless done within kvik_batch_submit() first: */
  int cufile; /* cuFile's batch takes it (handle, base) */
  int host;   /* host memory, not an append write: the ring may take it */
  int device; /* device or managed memory, not an append write: the ring may take it, staged */
  /* Set by the read within kvik_batch_submit(): */
  int done;    /* it completed there */
  int slotted; /* it holds slot id already, with the bytes read (kvik__batch_slot.ahead) */
  /* Set while the ring's part is submitted: */
  int held;   /* the file is held */
  int ring;   /* the ring takes it, as uop says, in slot id */
  int failed; /* it failed before the ring took it, and is done */
  CUcontext ctx;
  unsigned id;
  kvik__cufile_handle handle;
  char *base; /* the start of the buffer's allocation */
  kvik__uring_op uop;
} kvik__batch_route;

/* The longest one cuFileBatchIOGetStatus call may wait. cuFile is never given a NULL timeout,
 * whose meaning its documentation leaves open; an unlimited wait is a loop of these. */
#define KVIK__BATCH_CUFILE_WAIT_MAX_NS ((int64_t)1000000000)

/* ---- slots and the done queue --------------------------------------------------------------- */

static inline unsigned kvik__batch_take_slot(kvik_batch *b, void *cookie) {
  assert(b->nfree > 0); /* kvik_batch_submit() checked that max_ops allow it */
  unsigned id = b->free_ids[--b->nfree];
  b->slots[id].cookie = cookie;
  b->slots[id].ahead = 0;
  return id;
}

static inline void kvik__batch_put_slot(kvik_batch *b, unsigned id) {
  assert(b->nfree < b->max_ops && id < b->max_ops);
  b->free_ids[b->nfree++] = id;
}

/* Queue the event of an operation done: the done queue holds at most what is in flight, so it
 * has room. */
static inline void kvik__batch_queue(kvik_batch *b, void *cookie, kvik_batch_status status,
                                     ssize_t result) {
  assert(b->ndone < b->max_ops);
  unsigned at = b->done_head + b->ndone++; /* below 2 * max_ops: no division */
  kvik_batch_event *ev = &b->done[at >= b->max_ops ? at - b->max_ops : at];
  ev->cookie = cookie;
  ev->status = status;
  ev->result = result;
}

/* The operation in slot `id` is done: its event goes to the done queue, and the slot is free.
 * `result` is what its backend did; a completion counts the bytes read before the backend took
 * it too. */
static inline void kvik__batch_finish(kvik_batch *b, unsigned id, kvik_batch_status status,
                                      ssize_t result) {
  assert(id < b->max_ops);
  kvik__batch_slot *s = &b->slots[id];
  s->in_cufile = 0;
  if (status == KVIK_BATCH_COMPLETE) result += (ssize_t)s->ahead;
  kvik__batch_queue(b, s->cookie, status, result);
  kvik__batch_put_slot(b, id);
}

#endif
