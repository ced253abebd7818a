/* The default thread pool.
 *
 * Two locks: resize_lock serialises starting and stopping threads; queue_lock guards the queue
 * and the stop flag. resize_lock may be taken before queue_lock, never after it, and no thread
 * holds queue_lock while it runs a task or joins a thread. */
#define _GNU_SOURCE
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "device_io.h"
#include "error.h"
#include "sys.h"

static pthread_mutex_t resize_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_available = PTHREAD_COND_INITIALIZER;

static kvik__task *queue_head, *queue_tail; /* guarded by queue_lock */
static int stopping;                        /* guarded by queue_lock */

static pthread_t *threads;                  /* guarded by resize_lock */
static unsigned configured = 1;             /* guarded by resize_lock */
static _Atomic unsigned running;            /* written under resize_lock */

static _Thread_local int is_pool_thread;

/* Take the next task; with `wait`, wait for one. NULL when there is none or the pool is
 * stopping. */
static kvik__task *next_task(int wait) {
  pthread_mutex_lock(&queue_lock);
  while (wait && !stopping && !queue_head) pthread_cond_wait(&work_available, &queue_lock);
  kvik__task *task = stopping ? NULL : queue_head;
  if (task) {
    queue_head = task->next;
    if (!queue_head) queue_tail = NULL;
  }
  pthread_mutex_unlock(&queue_lock);
  return task;
}

/* Before it sleeps or exits, a worker finishes the device reads it deferred (device_io.h). */
static void *worker_main(void *unused) {
  (void)unused;
  is_pool_thread = 1;
  for (;;) {
    kvik__task *task = next_task(0);
    if (!task) {
      kvik__device_settle();
      task = next_task(1);
    }
    if (!task) break;
    task->run(task);
  }
  kvik__device_settle();
  return NULL;
}

int kvik__pool_in_worker(void) { return is_pool_thread; }

/* Start up to n threads. Called with resize_lock held and no threads running. */
static int start_threads(unsigned n) {
  threads = kvik__calloc(n, sizeof *threads);
  if (!threads) return kvik__fail(-ENOMEM, "thread pool: out of memory for %u threads", n);
  unsigned started = 0;
  int err = 0;
  for (; started < n; started++) {
    err = kvik__pthread_create(&threads[started], worker_main, NULL);
    if (err) break;
  }
  atomic_store(&running, started);
  if (started > 0) return 0;
  free(threads);
  threads = NULL;
  return kvik__fail_errno(err, "thread pool: could not start any of %u threads", n);
}

/* Let running tasks finish and join all threads. Called with resize_lock held. */
static void stop_threads(void) {
  unsigned n = atomic_load(&running);
  pthread_mutex_lock(&queue_lock);
  stopping = 1;
  pthread_cond_broadcast(&work_available);
  pthread_mutex_unlock(&queue_lock);
  for (unsigned i = 0; i < n; i++) pthread_join(threads[i], NULL);
  pthread_mutex_lock(&queue_lock);
  stopping = 0;
  pthread_mutex_unlock(&queue_lock);
  free(threads);
  threads = NULL;
  atomic_store(&running, 0);
}

/* The last resort when no thread can be started: queued work must not be stranded. */
static void run_queue_here(void) {
  for (;;) {
    pthread_mutex_lock(&queue_lock);
    kvik__task *task = queue_head;
    if (task) {
      queue_head = task->next;
      if (!queue_head) queue_tail = NULL;
    }
    pthread_mutex_unlock(&queue_lock);
    if (!task) return;
    task->run(task);
  }
}

static int ensure_started(void) {
  if (atomic_load(&running) > 0) return 0;
  pthread_mutex_lock(&resize_lock);
  int rc = atomic_load(&running) > 0 ? 0 : start_threads(configured);
  pthread_mutex_unlock(&resize_lock);
  return rc;
}

int kvik__pool_submit(kvik__task *first, kvik__task *last) {
  last->next = NULL;
  /* `running` is checked under queue_lock so that a resize that fails to start threads, and
   * then drains the queue on its own thread, cannot miss tasks appended here. */
  for (;;) {
    pthread_mutex_lock(&queue_lock);
    if (atomic_load(&running) > 0) {
      if (queue_tail) queue_tail->next = first;
      else queue_head = first;
      queue_tail = last;
      if (first == last) pthread_cond_signal(&work_available);
      else pthread_cond_broadcast(&work_available);
      pthread_mutex_unlock(&queue_lock);
      return 0;
    }
    pthread_mutex_unlock(&queue_lock);
    int rc = ensure_started();
    if (rc < 0) return rc;
  }
}

int kvik__pool_resize(unsigned nthreads) {
  if (is_pool_thread)
    return kvik__fail(-EDEADLK, "thread pool: cannot resize from one of its own threads");
  pthread_mutex_lock(&resize_lock);
  configured = nthreads;
  int rc = 0;
  if (atomic_load(&running) > 0) {
    stop_threads();
    rc = start_threads(nthreads);
  }
  pthread_mutex_unlock(&resize_lock);
  if (rc < 0) run_queue_here();
  return rc;
}

unsigned kvik__pool_running(void) { return atomic_load(&running); }

void kvik__pool_atfork_prepare(void) {
  pthread_mutex_lock(&resize_lock);
  pthread_mutex_lock(&queue_lock);
}

void kvik__pool_atfork_parent(void) {
  pthread_mutex_unlock(&queue_lock);
  pthread_mutex_unlock(&resize_lock);
}

/* The child has none of the parent's threads. Forget them and the queue (its tasks belong to
 * futures that kvik__future_atfork_child cancels); threads start again on the next submit. */
void kvik__pool_atfork_child(void) {
  pthread_mutex_init(&resize_lock, NULL);
  pthread_mutex_init(&queue_lock, NULL);
  pthread_cond_init(&work_available, NULL);
  queue_head = queue_tail = NULL;
  stopping = 0;
  free(threads);
  threads = NULL;
  atomic_store(&running, 0);
}
