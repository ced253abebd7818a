/* See cancel.h. */
#include "cancel.h"

#include <stddef.h>

static _Thread_local const atomic_int *watched;

const atomic_int *kvik__cancel_watch(const atomic_int *flag) {
  const atomic_int *before = watched;
  watched = flag;
  return before;
}

int kvik__cancelled(void) { return watched && atomic_load_explicit(watched, memory_order_relaxed); }
