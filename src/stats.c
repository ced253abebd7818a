/* I/O statistics: the monitors, and the starts and ends of operations that they count.
 *
 * One lock guards every monitor. The stamps of starts and ends are read under it, so the monitors
 * receive them in the order of their times, and each monitor's busy time is the exact union of
 * the operations' spans: a stretch opens when its count of operations in flight rises from zero
 * and closes when it returns there. The lock is taken only while a monitor exists. */
#define _GNU_SOURCE
#include "stats.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "init.h"
#include "sys.h"

struct kvik_monitor {
  struct kvik_monitor *prev, *next; /* the monitors counting; guarded */
  int stopped;
  int64_t registered_ns; /* operations that started before this are not the monitor's */
  int64_t stopped_ns;    /* the span's end once stopped */
  kvik_summary totals;   /* all but end_ns and busy_ns, which a reading fills in */
  /* Busy time: the stretches closed so far, and the one open while operations are in flight. */
  uint64_t in_flight;
  int64_t busy_since;
  uint64_t closed_busy;
};

static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static kvik_monitor *counting; /* the monitors that count, newest first; guarded */
static uint64_t last_span;     /* guarded */
static int64_t last_stamp;     /* guarded */
atomic_uint kvik__stats_monitors;

static void lock(void) { pthread_mutex_lock(&stats_lock); }

static void unlock(void) { pthread_mutex_unlock(&stats_lock); }

static int64_t clock_ns(clockid_t clock) {
  struct timespec t;
  clock_gettime(clock, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Called with the lock held: now on CLOCK_MONOTONIC, later than every stamp before it. Strictly
 * later, so that an operation's start is never the instant a monitor was created: it is either
 * before (not the monitor's) or after (counted from start to end). */
static int64_t stamp(void) {
  int64_t now = clock_ns(CLOCK_MONOTONIC);
  last_stamp = now > last_stamp ? now : last_stamp + 1;
  return last_stamp;
}

const char *kvik_io_backend_name(int backend) {
  static const char *const names[KVIK_IO_BACKENDS] = {"Posix", "Gds", "Mmap", "RemoteHttp",
                                                      "RemoteHdfs"};
  return backend >= 0 && backend < KVIK_IO_BACKENDS ? names[backend] : NULL;
}

/* ---- the IO path ------------------------------------------------------------------------- */

int64_t kvik__stats_begin_counted(void) {
  lock();
  int64_t now = stamp();
  for (kvik_monitor *m = counting; m; m = m->next)
    if (m->in_flight++ == 0) m->busy_since = now;
  unlock();
  return now;
}

/* Called with the lock held: close the operation's part of the busy time, and count it where it
 * started in the current span (not before a reset). */
static void count(kvik_monitor *m, const kvik__stats_op *op, int64_t now, size_t bytes,
                  int failed) {
  if (--m->in_flight == 0) m->closed_busy += (uint64_t)(now - m->busy_since);
  kvik_summary *t = &m->totals;
  if (op->start_ns < t->start_ns) return;
  uint64_t duration = (uint64_t)(now - op->start_ns);
  t->num_ops++;
  t->bytes_requested += op->requested;
  t->bytes_transferred += bytes;
  t->total_duration_ns += duration;
  t->num_errors += failed != 0;
  if (op->op == KVIK__READ) {
    t->num_reads++;
    t->bytes_read += bytes;
  } else {
    t->num_writes++;
    t->bytes_written += bytes;
  }
  kvik_backend_totals *b = &t->by_backend[op->backend];
  b->num_ops++;
  b->bytes_transferred += bytes;
  b->total_duration_ns += duration;
  b->num_errors += failed != 0;
}

void kvik__stats_end_counted(const kvik__stats_op *op, size_t transferred, int failed) {
  lock();
  int64_t now = stamp();
  for (kvik_monitor *m = counting; m; m = m->next)
    if (op->start_ns > m->registered_ns) count(m, op, now, transferred, failed);
  unlock();
}

/* ---- the monitors ------------------------------------------------------------------------ */

/* Called with the lock held: a new, empty span from `now`. Operations in flight stay in flight;
 * their busy time counts from the new start. */
static void start_span(kvik_monitor *m, int64_t now) {
  kvik_summary *t = &m->totals;
  int64_t unix_ns = t->anchor_unix_ns, mono_ns = t->anchor_mono_ns;
  memset(t, 0, sizeof *t);
  t->struct_size = sizeof *t;
  t->span = ++last_span;
  t->start_ns = now;
  t->anchor_unix_ns = unix_ns;
  t->anchor_mono_ns = mono_ns;
  m->busy_since = now;
  m->closed_busy = 0;
}

int kvik_monitor_create(kvik_monitor **out) {
  if (!out) return kvik__fail(-EINVAL, "kvik_monitor_create: NULL monitor");
  *out = NULL;
  kvik_monitor *m = kvik__calloc(1, sizeof *m);
  if (!m) return kvik__fail(-ENOMEM, "kvik_monitor_create: out of memory");
  lock();
  int64_t now = stamp();
  m->totals.anchor_unix_ns = clock_ns(CLOCK_REALTIME);
  m->totals.anchor_mono_ns = now;
  m->registered_ns = now;
  start_span(m, now);
  m->next = counting;
  if (counting) counting->prev = m;
  counting = m;
  atomic_fetch_add_explicit(&kvik__stats_monitors, 1, memory_order_relaxed);
  unlock();
  *out = m;
  return 0;
}

/* Called with the lock held. */
static void stop_locked(kvik_monitor *m) {
  if (m->stopped) return;
  m->stopped = 1;
  m->stopped_ns = stamp();
  if (m->in_flight > 0 && m->stopped_ns > m->busy_since)
    m->closed_busy += (uint64_t)(m->stopped_ns - m->busy_since);
  m->in_flight = 0;
  if (m->prev) m->prev->next = m->next;
  else counting = m->next;
  if (m->next) m->next->prev = m->prev;
  m->prev = m->next = NULL;
  atomic_fetch_sub_explicit(&kvik__stats_monitors, 1, memory_order_relaxed);
}

int kvik_monitor_stop(kvik_monitor *m) {
  if (!m) return kvik__fail(-EINVAL, "kvik_monitor_stop: NULL monitor");
  lock();
  stop_locked(m);
  unlock();
  return 0;
}

void kvik_monitor_free(kvik_monitor *m) {
  if (!m) return;
  lock();
  stop_locked(m);
  unlock();
  free(m);
}

int kvik_monitor_reset(kvik_monitor *m) {
  if (!m) return kvik__fail(-EINVAL, "kvik_monitor_reset: NULL monitor");
  lock();
  start_span(m, stamp());
  unlock();
  return 0;
}

int kvik_monitor_read(kvik_monitor *m, kvik_summary *summary) {
  if (!m || !summary || summary->struct_size < sizeof(size_t))
    return kvik__fail(-EINVAL, "kvik_monitor_read: NULL, or struct_size not set");
  size_t size = summary->struct_size < sizeof *summary ? summary->struct_size : sizeof *summary;
  lock();
  kvik_summary reading = m->totals;
  /* A stopped span ends where it stopped; one reset after that is empty. */
  reading.end_ns = m->stopped ? m->stopped_ns : stamp();
  if (reading.end_ns < reading.start_ns) reading.end_ns = reading.start_ns;
  reading.busy_ns = m->closed_busy;
  if (m->in_flight > 0 && reading.end_ns > m->busy_since)
    reading.busy_ns += (uint64_t)(reading.end_ns - m->busy_since);
  unlock();
  reading.struct_size = summary->struct_size;
  memcpy(summary, &reading, size);
  return 0;
}

/* ---- fork() ------------------------------------------------------------------------------ */

/* The monitors live on in the child, which has only the forking thread. */
static void fork_prepare(void) { lock(); }

static void fork_parent(void) { unlock(); }

static void fork_child(void) { pthread_mutex_init(&stats_lock, NULL); }

KVIK__ON_LOAD(register_fork_handlers) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_STATS, &handlers);
}
