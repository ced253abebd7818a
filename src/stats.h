/* I/O statistics: the monitors (kvik_monitor_*) and what the IO entry points tell them.
 *
 * A logical operation is observed in two steps: kvik__stats_begin() when the public call starts,
 * kvik__stats_end() when it completes, on whichever thread completes it. With no monitor in the
 * process, kvik__stats_begin() is one relaxed atomic load and returns 0, and an operation begun
 * with 0 is never counted, whatever monitors appear before it ends. */
#ifndef KVIK_SRC_STATS_H
#define KVIK_SRC_STATS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kvik.h"
#include "op.h"

/* One operation as the monitors see it. */
typedef struct kvik__stats_op {
  int64_t start_ns;        /* CLOCK_MONOTONIC, from kvik__stats_begin(); 0: not observed */
  kvik_io_backend backend; /* which path carried it */
  kvik__op op;
  size_t requested; /* the bytes the call asked for */
} kvik__stats_op;

/* How many monitors count (stats.c's). Read inline by the two calls below, so that an operation
 * with no monitor in the process pays one load each, not a call. Relaxed, as an operation that
 * starts while a monitor is created is one that started before it. */
extern atomic_uint kvik__stats_monitors;

int64_t kvik__stats_begin_counted(void);
void kvik__stats_end_counted(const kvik__stats_op *op, size_t transferred, int failed);

/* The start of an operation: now on CLOCK_MONOTONIC, told to every monitor, or 0 when there is
 * none (then nothing else happens). Thread-safe. */
static inline int64_t kvik__stats_begin(void) {
  if (atomic_load_explicit(&kvik__stats_monitors, memory_order_relaxed) == 0) return 0;
  return kvik__stats_begin_counted();
}

/* The end of `op`, which moved `transferred` bytes and failed when `failed`: counted by every
 * monitor that saw its start. Nothing for an operation begun with 0. Thread-safe; takes only the
 * monitors' own lock, so it may be called with any other lock of kvik held. */
static inline void kvik__stats_end(const kvik__stats_op *op, size_t transferred, int failed) {
  if (op->start_ns != 0) kvik__stats_end_counted(op, transferred, failed);
}

/* An operation of `requested` bytes on `backend` starting now: what an entry point begins with. */
static inline kvik__stats_op kvik__stats_observe(kvik_io_backend backend, kvik__op op,
                                                 size_t requested) {
  return (kvik__stats_op){kvik__stats_begin(), backend, op, requested};
}

/* End `op` as refused before it moved a byte, a failed operation, and return `rc`: every call
 * that began an operation ends it, or the monitors would count it in flight for ever. */
static inline int kvik__stats_refuse(const kvik__stats_op *op, int rc) {
  kvik__stats_end(op, 0, 1);
  return rc;
}

#endif
