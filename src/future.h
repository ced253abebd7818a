/* Futures, and the bookkeeping that lets a file close only once its IO is done.
 *
 * All state below that is "guarded" is guarded by one library-wide lock, the completion lock in
 * future.c. Completions are rare (one per request, not one per task), so one lock costs little,
 * and one lock is what makes fork() safe: the child re-initialises it and cancels what the
 * parent had in flight. */
#ifndef KVIK_SRC_FUTURE_H
#define KVIK_SRC_FUTURE_H

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>

#include "kvik.h"
#include "stats.h"

/* Something that IO runs against and that must not go away while IO is in flight. Acquiring
 * and releasing take no lock, so that a small read on the calling thread costs its system call
 * and little else; closing waits under the completion lock. Zero bytes: open, nothing pending. */
typedef struct kvik__owner {
  _Atomic unsigned pending; /* requests in flight */
  _Atomic int closed;
} kvik__owner;

/* Wake the threads that close handles: the last request of one of them just ended. */
void kvik__owner_wake(void);

/* Undo kvik__owner_acquire(), for a request that was never started or a query of the handle that
 * is done. Inline, as its twin: a small read pays the two atomic operations, not calls. */
static inline void kvik__owner_release(kvik__owner *owner) {
  if (atomic_fetch_sub(&owner->pending, 1) == 1 && atomic_load(&owner->closed)) kvik__owner_wake();
}

/* Count one more request against `owner`. Returns 0, or -EBADF if it is closed. Counted first,
 * then the close looked at, while a close marks first, then looks at the count (both
 * sequentially consistent): either this sees the close, or the close sees this count. */
static inline int kvik__owner_acquire(kvik__owner *owner) {
  atomic_fetch_add(&owner->pending, 1);
  if (!atomic_load(&owner->closed)) return 0;
  kvik__owner_release(owner);
  return -EBADF;
}

/* Mark `owner` closed and wait until no request is in flight. Returns 0, or -EBADF if it was
 * already closed. */
int kvik__owner_close(kvik__owner *owner);

int kvik__owner_is_closed(const kvik__owner *owner);

/* A new future for a request of `requested` bytes made of `ntasks` tasks, with `extra` bytes of
 * zeroed, max-aligned storage for the caller's tasks (kvik__future_extra). The future takes over
 * the caller's acquisition of `owner` and releases it when the last task is done.
 * Returns NULL when out of memory. */
kvik_future *kvik__future_new(kvik__owner *owner, size_t ntasks, size_t requested, size_t extra);

void *kvik__future_extra(kvik_future *future);

/* Have the future end `op` for the monitors when it is done (stats.h), with the bytes it moved,
 * failed when its result is an error. Call it before any of its tasks runs. */
void kvik__future_observe(kvik_future *future, const kvik__stats_op *op);

/* Whether a task of the future failed: from the first failure on, its result is that failure
 * whatever its other tasks do, so those that have not started skip their IO (request.c).
 * One atomic load; thread-safe. */
int kvik__future_failed(kvik_future *future);

/* The flag behind kvik__future_failed(), nonzero once a task failed, for layers below the
 * future that may only read a flag (cancel.h). Valid until the future is done. */
const atomic_int *kvik__future_failed_flag(kvik_future *future);

/* The number of tasks the future was created with. */
size_t kvik__future_tasks(const kvik_future *future);

/* Declare one more user of the future besides its owner, such as the stream callback that
 * waits for it: kvik_future_free() then also waits until that user called
 * kvik__future_await_release(). */
void kvik__future_hold(kvik_future *future);

/* Wait until the future is done, then drop a hold taken with kvik__future_hold(). */
void kvik__future_await_release(kvik_future *future);

/* Report one task as finished with `bytes` transferred and `code` (0, or negative: then this
 * thread's detail message describes the failure). The last task completes the future. */
void kvik__future_task_done(kvik_future *future, size_t bytes, int code);

/* A task of a read met the end of the file `end` bytes into the request (call it before its
 * kvik__future_task_done). The read's result is the first such end, even where later tasks read
 * more: a file that shrank and grew again during the read leaves a hole there, and bytes past
 * a hole are not a read's. */
void kvik__future_read_ended(kvik_future *future, size_t end);

/* Wait until at least `min_done` of the `n` futures are done or `timeout_ns` nanoseconds passed
 * (0: do not wait; negative: no limit), on the completion condition every completion
 * broadcasts. Returns how many of them are done. */
size_t kvik__futures_wait_some(kvik_future *const *futures, size_t n, size_t min_done,
                               int64_t timeout_ns);

#endif
