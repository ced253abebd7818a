/* Futures: completion, waiting, cancellation at fork(). */
#define _GNU_SOURCE
#include "future.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "init.h"
#include "sys.h"

struct kvik_future {
  size_t tasks;
  _Atomic size_t tasks_left;
  _Atomic size_t bytes_done;
  _Atomic size_t read_end; /* the first end of file a task of a read met; SIZE_MAX: none */
  atomic_int failed;       /* set with first_error: tasks that start after it do nothing */
  size_t requested;
  kvik__stats_op stats; /* ended as the future completes; a zero start: not counted */
  kvik__owner *owner;
  /* Guarded by completion_lock. */
  int done;
  unsigned holds; /* users besides the owner; see kvik__future_hold */
  int first_error;
  ssize_t result;
  struct kvik_future *prev, *next; /* the in-flight list, for fork() */
  char message[KVIK_MESSAGE_MAX];
  max_align_t extra[];
};

/* The completion lock and its condition: every completion broadcasts, every waiter (a thread in
 * kvik_future_wait* or in kvik__owner_close) rechecks its own predicate. */
static pthread_mutex_t completion_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t completion_cond;
static pthread_once_t cond_once = PTHREAD_ONCE_INIT;
static kvik_future *in_flight; /* futures not yet done, newest first; guarded */

/* The condition uses CLOCK_MONOTONIC so that timeouts survive changes of the wall clock. */
static void init_completion_cond(void) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&completion_cond, &attr);
  pthread_condattr_destroy(&attr);
}

static void lock(void) {
  pthread_once(&cond_once, init_completion_cond);
  pthread_mutex_lock(&completion_lock);
}

static void unlock(void) { pthread_mutex_unlock(&completion_lock); }

/* The last release after a close wakes the closing thread: under the lock, which that thread
 * holds from its look at `pending` until it waits, so that the wake-up cannot come in between. */
static void owner_release_locked(kvik__owner *owner) {
  if (atomic_fetch_sub(&owner->pending, 1) == 1 && atomic_load(&owner->closed))
    pthread_cond_broadcast(&completion_cond);
}

void kvik__owner_wake(void) {
  lock();
  pthread_cond_broadcast(&completion_cond);
  unlock();
}

int kvik__owner_close(kvik__owner *owner) {
  lock();
  int was_closed = atomic_exchange(&owner->closed, 1);
  while (atomic_load(&owner->pending) > 0) pthread_cond_wait(&completion_cond, &completion_lock);
  unlock();
  return was_closed ? -EBADF : 0;
}

int kvik__owner_is_closed(const kvik__owner *owner) { return atomic_load(&owner->closed); }

kvik_future *kvik__future_new(kvik__owner *owner, size_t ntasks, size_t requested, size_t extra) {
  kvik_future *future = kvik__calloc(1, sizeof *future + extra);
  if (!future) return NULL;
  future->tasks = ntasks;
  atomic_init(&future->tasks_left, ntasks);
  atomic_init(&future->bytes_done, 0);
  atomic_init(&future->read_end, SIZE_MAX);
  atomic_init(&future->failed, 0);
  future->requested = requested;
  future->owner = owner;
  lock();
  future->next = in_flight;
  if (in_flight) in_flight->prev = future;
  in_flight = future;
  unlock();
  return future;
}

void *kvik__future_extra(kvik_future *future) { return future->extra; }

void kvik__future_observe(kvik_future *future, const kvik__stats_op *op) { future->stats = *op; }

/* Relaxed: the flag only tells a task to skip its IO; what it reports is ordered by the lock. */
int kvik__future_failed(kvik_future *future) {
  return atomic_load_explicit(&future->failed, memory_order_relaxed);
}

const atomic_int *kvik__future_failed_flag(kvik_future *future) { return &future->failed; }

size_t kvik__future_tasks(const kvik_future *future) { return future->tasks; }

void kvik__future_hold(kvik_future *future) {
  lock();
  future->holds++;
  unlock();
}

void kvik__future_await_release(kvik_future *future) {
  lock();
  while (!future->done) pthread_cond_wait(&completion_cond, &completion_lock);
  if (--future->holds == 0) pthread_cond_broadcast(&completion_cond);
  unlock();
}

/* Called with the lock held. */
static void complete_locked(kvik_future *future, ssize_t result) {
  /* Counted before anyone can see the future done, so that a reading after a wait includes it. */
  kvik__stats_end(&future->stats, result >= 0 ? (size_t)result : atomic_load(&future->bytes_done),
                  result < 0);
  future->result = result;
  future->done = 1;
  if (future->prev) future->prev->next = future->next;
  else in_flight = future->next;
  if (future->next) future->next->prev = future->prev;
  future->prev = future->next = NULL;
  if (future->owner) owner_release_locked(future->owner);
  future->owner = NULL;
  pthread_cond_broadcast(&completion_cond);
}

/* Append to a failed request's message how much of it was done: for writes that is the only
 * account of what reached the file. */
static void note_progress(kvik_future *future) {
  size_t len = strlen(future->message);
  snprintf(future->message + len, sizeof future->message - len, " (%zu of %zu bytes transferred)",
           atomic_load(&future->bytes_done), future->requested);
}

void kvik__future_task_done(kvik_future *future, size_t bytes, int code) {
  atomic_fetch_add(&future->bytes_done, bytes);
  if (code < 0) {
    lock();
    if (!future->first_error) {
      future->first_error = code;
      snprintf(future->message, sizeof future->message, "%s", kvik_last_error());
      atomic_store(&future->failed, 1);
    }
    unlock();
  }
  if (atomic_fetch_sub(&future->tasks_left, 1) != 1) return;
  lock();
  size_t end = atomic_load(&future->read_end);
  if (end < atomic_load(&future->bytes_done)) atomic_store(&future->bytes_done, end);
  if (future->first_error) note_progress(future);
  complete_locked(future, future->first_error ? future->first_error
                                              : (ssize_t)atomic_load(&future->bytes_done));
  unlock();
}

void kvik__future_read_ended(kvik_future *future, size_t end) {
  size_t seen = atomic_load(&future->read_end);
  while (end < seen && !atomic_compare_exchange_weak(&future->read_end, &seen, end)) {
  }
}

/* Called with the lock held, once the future is done: the result, with its message moved to
 * the calling thread. */
static ssize_t result_locked(const kvik_future *future) {
  if (future->result < 0) kvik__set_message(future->message);
  return future->result;
}

ssize_t kvik_future_wait(kvik_future *future) {
  if (!future) return kvik__fail(-EINVAL, "kvik_future_wait: NULL future");
  lock();
  while (!future->done) pthread_cond_wait(&completion_cond, &completion_lock);
  ssize_t result = result_locked(future);
  unlock();
  return result;
}

static struct timespec deadline_after(int64_t timeout_ns) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  int64_t ns = t.tv_nsec + timeout_ns % 1000000000;
  t.tv_sec += (time_t)(timeout_ns / 1000000000 + ns / 1000000000);
  t.tv_nsec = (long)(ns % 1000000000);
  return t;
}

ssize_t kvik_future_wait_for(kvik_future *future, int64_t timeout_ns) {
  if (!future) return kvik__fail(-EINVAL, "kvik_future_wait_for: NULL future");
  if (timeout_ns < 0)
    return kvik__fail(-EINVAL, "kvik_future_wait_for: negative timeout %lld",
                      (long long)timeout_ns);
  struct timespec deadline = deadline_after(timeout_ns);
  lock();
  int rc = 0;
  while (!future->done && rc != ETIMEDOUT)
    rc = pthread_cond_timedwait(&completion_cond, &completion_lock, &deadline);
  ssize_t result = future->done ? result_locked(future) : -ETIMEDOUT;
  unlock();
  if (result == -ETIMEDOUT)
    kvik__fail(-ETIMEDOUT, "kvik_future_wait_for: request still running after %lld ns",
               (long long)timeout_ns);
  return result;
}

/* Called with the lock held. */
static size_t count_done_locked(kvik_future *const *futures, size_t n) {
  size_t done = 0;
  for (size_t i = 0; i < n; i++) done += futures[i]->done != 0;
  return done;
}

size_t kvik__futures_wait_some(kvik_future *const *futures, size_t n, size_t min_done,
                               int64_t timeout_ns) {
  struct timespec deadline = {0, 0};
  if (timeout_ns > 0) deadline = deadline_after(timeout_ns);
  lock();
  size_t done = count_done_locked(futures, n);
  int rc = 0;
  while (done < min_done && timeout_ns != 0 && rc != ETIMEDOUT) {
    rc = timeout_ns < 0 ? pthread_cond_wait(&completion_cond, &completion_lock)
                        : pthread_cond_timedwait(&completion_cond, &completion_lock, &deadline);
    done = count_done_locked(futures, n);
  }
  unlock();
  return done;
}

int kvik_future_done(kvik_future *future) {
  if (!future) return 0;
  lock();
  int done = future->done;
  unlock();
  return done;
}

size_t kvik_future_bytes_done(kvik_future *future) {
  return future ? atomic_load(&future->bytes_done) : 0;
}

void kvik_future_free(kvik_future *future) {
  if (!future) return;
  lock();
  while (!future->done || future->holds) pthread_cond_wait(&completion_cond, &completion_lock);
  unlock();
  free(future);
}

static void fork_prepare(void) { lock(); }

static void fork_parent(void) { unlock(); }

/* In the child only the forking thread exists: the tasks of futures in flight will never run
 * here, so each such future completes now with KVIK_ECANCELED_BY_FORK instead of hanging its
 * waiters. The parent's copies are untouched. */
static void fork_child(void) {
  pthread_mutex_init(&completion_lock, NULL);
  init_completion_cond();
  lock();
  while (in_flight) {
    kvik_future *future = in_flight;
    future->first_error = KVIK_ECANCELED_BY_FORK;
    atomic_store(&future->failed, 1);
    future->holds = 0; /* a stream callback holding it does not run in the child either */
    snprintf(future->message, sizeof future->message,
             "IO request of %zu bytes was in flight in the parent process at fork(); "
             "it does not run in the child",
             future->requested);
    complete_locked(future, KVIK_ECANCELED_BY_FORK);
  }
  unlock();
}

KVIK__ON_LOAD(register_fork_handlers) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_FUTURE, &handlers);
}
