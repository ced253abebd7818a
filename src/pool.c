/* The thread pools.
 *
 * Each pool has two locks: resize_lock serialises starting and stopping its threads; queue_lock
 * guards its queue and stop flag. resize_lock may be taken before queue_lock, never after it, and
 * no thread holds queue_lock while it runs a task or joins a thread. Resizing takes the pools'
 * resize locks in the order of their ids. */
#define _GNU_SOURCE
#include "pool.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "error.h"
#include "init.h"
#include "settings.h"
#include "sys.h"

typedef struct pool {
  const char *name;          /* for messages */
  int (*idle)(int may_wait); /* see kvik__pool_set_idle(), or NULL; set at load */
  pthread_mutex_t resize_lock, queue_lock;
  pthread_cond_t work_available;
  kvik__task *queue_head, *queue_tail; /* guarded by queue_lock */
  int stopping;                        /* guarded by queue_lock */
  pthread_t *threads;                  /* guarded by resize_lock */
  unsigned configured;                 /* guarded by resize_lock */
  _Atomic unsigned running;            /* written under resize_lock */
} pool;

#define POOL_INIT(pool_name)                                                                       \
  {                                                                                                \
    .name = pool_name, .resize_lock = PTHREAD_MUTEX_INITIALIZER,                                   \
    .queue_lock = PTHREAD_MUTEX_INITIALIZER, .work_available = PTHREAD_COND_INITIALIZER,           \
    .configured = 1                                                                                \
  }

static pool pools[KVIK__POOLS] = {POOL_INIT("thread pool"), POOL_INIT("host thread pool")};

static _Thread_local pool *worker_of; /* the pool whose thread this is, or NULL */

/* How long a worker with deferred work left sleeps before it looks at that work again. */
#define IDLE_POLL_NS 1000000L

/* Take the next task; with `wait`, wait for one (with `poll`, at most IDLE_POLL_NS). NULL when
 * there is none or the pool is stopping; *stopping says which. */
static kvik__task *next_task(pool *p, int wait, int poll, int *stopping) {
  struct timespec until;
  if (poll) {
    clock_gettime(CLOCK_REALTIME, &until); /* the condition variable's clock */
    until.tv_nsec += IDLE_POLL_NS;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&p->queue_lock);
  int timed_out = 0;
  while (wait && !timed_out && !p->stopping && !p->queue_head)
    timed_out = poll ? pthread_cond_timedwait(&p->work_available, &p->queue_lock, &until) != 0
                     : pthread_cond_wait(&p->work_available, &p->queue_lock) != 0;
  *stopping = p->stopping;
  kvik__task *task = p->stopping ? NULL : p->queue_head;
  if (task) {
    p->queue_head = task->next;
    if (!p->queue_head) p->queue_tail = NULL;
  }
  pthread_mutex_unlock(&p->queue_lock);
  return task;
}

/* The next task, waiting for one; NULL when the pool stops. Out of work, the worker first
 * finishes what it deferred as far as it can without waiting; while some is left, it waits for a
 * task in short turns and finishes more between them (kvik__pool_set_idle). */
static kvik__task *next_task_or_stop(pool *p) {
  int stopping;
  kvik__task *task = next_task(p, 0, 0, &stopping);
  while (!task && !stopping) {
    int left = p->idle && p->idle(0);
    task = next_task(p, 1, left, &stopping);
  }
  return task;
}

static void *worker_main(void *arg) {
  pool *p = arg;
  worker_of = p;
  for (kvik__task *task; (task = next_task_or_stop(p));) task->run(task);
  if (p->idle) p->idle(1);
  return NULL;
}

int kvik__pool_in_worker(void) { return worker_of == &pools[KVIK__POOL_IO]; }

void kvik__pool_set_idle(kvik__pool_id id, int (*idle)(int may_wait)) {
  assert(id < KVIK__POOLS && !pools[id].idle && atomic_load(&pools[id].running) == 0);
  pools[id].idle = idle;
}

/* Start up to n threads. Called with resize_lock held and no threads running. */
static int start_threads(pool *p, unsigned n) {
  assert(n > 0 && !p->threads && atomic_load(&p->running) == 0);
  p->threads = kvik__calloc(n, sizeof *p->threads);
  if (!p->threads) return kvik__fail(-ENOMEM, "%s: out of memory for %u threads", p->name, n);
  unsigned started = 0;
  int err = 0;
  for (; started < n; started++) {
    err = kvik__pthread_create(&p->threads[started], worker_main, p);
    if (err) break;
  }
  atomic_store(&p->running, started);
  if (started > 0) return 0;
  free(p->threads);
  p->threads = NULL;
  return kvik__fail_errno(err, "%s: could not start any of %u threads", p->name, n);
}

/* Let running tasks finish and join all threads. Called with resize_lock held. */
static void stop_threads(pool *p) {
  unsigned n = atomic_load(&p->running);
  pthread_mutex_lock(&p->queue_lock);
  p->stopping = 1;
  pthread_cond_broadcast(&p->work_available);
  pthread_mutex_unlock(&p->queue_lock);
  for (unsigned i = 0; i < n; i++) pthread_join(p->threads[i], NULL);
  pthread_mutex_lock(&p->queue_lock);
  p->stopping = 0;
  pthread_mutex_unlock(&p->queue_lock);
  free(p->threads);
  p->threads = NULL;
  atomic_store(&p->running, 0);
}

/* The last resort when no thread can be started: queued work must not be stranded. */
static void run_queue_here(pool *p) {
  for (;;) {
    pthread_mutex_lock(&p->queue_lock);
    kvik__task *task = p->queue_head;
    if (task) {
      p->queue_head = task->next;
      if (!p->queue_head) p->queue_tail = NULL;
    }
    pthread_mutex_unlock(&p->queue_lock);
    if (!task) return;
    task->run(task);
  }
}

static int ensure_started(pool *p) {
  if (atomic_load(&p->running) > 0) return 0;
  pthread_mutex_lock(&p->resize_lock);
  int rc = atomic_load(&p->running) > 0 ? 0 : start_threads(p, p->configured);
  pthread_mutex_unlock(&p->resize_lock);
  return rc;
}

int kvik__pool_submit(kvik__pool_id id, kvik__task *first, kvik__task *last) {
  assert(id < KVIK__POOLS && first && last);
  pool *p = &pools[id];
  last->next = NULL;
  /* `running` is checked under queue_lock so that a resize that fails to start threads, and
   * then drains the queue on its own thread, cannot miss tasks appended here. */
  for (;;) {
    pthread_mutex_lock(&p->queue_lock);
    if (atomic_load(&p->running) > 0) {
      if (p->queue_tail) p->queue_tail->next = first;
      else p->queue_head = first;
      p->queue_tail = last;
      if (first == last) pthread_cond_signal(&p->work_available);
      else pthread_cond_broadcast(&p->work_available);
      pthread_mutex_unlock(&p->queue_lock);
      return 0;
    }
    pthread_mutex_unlock(&p->queue_lock);
    int rc = ensure_started(p);
    if (rc < 0) return rc;
  }
}

/* Resize one pool; its queue runs here if no thread could start. */
static int resize(pool *p, unsigned nthreads) {
  pthread_mutex_lock(&p->resize_lock);
  p->configured = nthreads;
  int rc = 0;
  if (atomic_load(&p->running) > 0) {
    stop_threads(p);
    rc = start_threads(p, nthreads);
  }
  pthread_mutex_unlock(&p->resize_lock);
  if (rc < 0) run_queue_here(p);
  return rc;
}

/* Both pools take KVIK_SETTING_NUM_THREADS: a running pool is resized at once, running tasks
 * finish, queued tasks wait for the new threads. Returns 0; -EDEADLK when called from a pool
 * thread; a negative errno when no thread could be started (queued tasks then run on the calling
 * thread, so none is lost). */
static int resize_all(int64_t setting) {
  assert(setting >= 1 && setting <= UINT_MAX); /* the setting's range */
  unsigned nthreads = (unsigned)setting;
  if (worker_of)
    return kvik__fail(-EDEADLK, "%s: cannot resize from one of its own threads", worker_of->name);
  int rc = 0;
  for (int i = 0; i < KVIK__POOLS; i++) {
    int one = resize(&pools[i], nthreads);
    if (rc == 0) rc = one;
  }
  return rc;
}

static void fork_prepare(void) {
  for (int i = 0; i < KVIK__POOLS; i++) {
    pthread_mutex_lock(&pools[i].resize_lock);
    pthread_mutex_lock(&pools[i].queue_lock);
  }
}

static void fork_parent(void) {
  for (int i = KVIK__POOLS - 1; i >= 0; i--) {
    pthread_mutex_unlock(&pools[i].queue_lock);
    pthread_mutex_unlock(&pools[i].resize_lock);
  }
}

/* The child has none of the parent's threads. Forget them and the queues (their tasks belong to
 * futures that future.c's fork handler cancels); threads start again on the next submit. */
static void fork_child(void) {
  for (int i = 0; i < KVIK__POOLS; i++) {
    pool *p = &pools[i];
    pthread_mutex_init(&p->resize_lock, NULL);
    pthread_mutex_init(&p->queue_lock, NULL);
    pthread_cond_init(&p->work_available, NULL);
    p->queue_head = p->queue_tail = NULL;
    p->stopping = 0;
    free(p->threads);
    p->threads = NULL;
    atomic_store(&p->running, 0);
  }
}

KVIK__ON_LOAD(install_hooks) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_POOL, &handlers);
  kvik__setting_watch(KVIK_SETTING_NUM_THREADS, resize_all);
}
