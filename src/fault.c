/* Fault injection (sys.h), compiled into test builds only (-DKVIK_FAULT_INJECTION=ON).
 * Every access is a relaxed atomic: the hook runs on every system call of every thread, and must
 * neither serialise them nor add the ordering that would hide a race from ThreadSanitizer. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "sys.h"

#define SITES_MAX 512 /* a power of two, well above the number of call sites in src/ */
#define relaxed memory_order_relaxed

typedef struct {
  _Atomic(const char *) site;
  _Atomic int call;
  _Atomic long hits;
} site_slot;

static site_slot sites[SITES_MAX];

static struct {
  _Atomic int call; /* KVIK__FAULT_CALLS: disarmed */
  _Atomic(const char *) site;
  _Atomic long countdown;
  _Atomic int err;
  _Atomic long injected;
} armed = {.call = KVIK__FAULT_CALLS};

/* A second knob, independent of `armed`: a call that is made late, to widen a window between
 * threads that a race needs (a test makes one thread slow while another fails). */
static struct {
  _Atomic int call; /* KVIK__FAULT_CALLS: disarmed */
  _Atomic(const char *) site;
  _Atomic long countdown;
  _Atomic long us;
} delayed = {.call = KVIK__FAULT_CALLS};

/* The slot of a site, claimed on its first call. Sites are string literals, one per expansion
 * of a sys.h macro: the pointer is the key. */
static site_slot *slot_of(kvik__fault_call call, const char *site) {
  size_t i = ((uintptr_t)site >> 3) & (SITES_MAX - 1);
  for (size_t probes = 0; probes < SITES_MAX; probes++, i = (i + 1) & (SITES_MAX - 1)) {
    const char *seen = atomic_load_explicit(&sites[i].site, relaxed);
    if (!seen) {
      if (atomic_compare_exchange_strong_explicit(&sites[i].site, &seen, site, relaxed, relaxed)) {
        atomic_store_explicit(&sites[i].call, (int)call, relaxed);
        return &sites[i];
      }
    }
    if (seen == site) return &sites[i];
  }
  return NULL;
}

/* Whether `call` at `site` is the nth call that a knob (`armed` or `delayed`) names. */
static int is_nth(_Atomic int *call_of, _Atomic(const char *) *only, _Atomic long *countdown,
                  kvik__fault_call call, const char *site) {
  if (atomic_load_explicit(call_of, relaxed) != (int)call) return 0;
  const char *one = atomic_load_explicit(only, relaxed);
  if (one && strcmp(one, site) != 0) return 0;
  return atomic_fetch_sub_explicit(countdown, 1, relaxed) == 1;
}

/* Sleep the whole delay: nanosleep() ends early where a signal interrupts it. */
static void sleep_us(long us) {
  struct timespec left = {us / 1000000, us % 1000000 * 1000};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

int kvik__fault(kvik__fault_call call, const char *site) {
  site_slot *slot = slot_of(call, site);
  if (slot) atomic_fetch_add_explicit(&slot->hits, 1, relaxed);
  int late = is_nth(&delayed.call, &delayed.site, &delayed.countdown, call, site), err = 0;
  if (is_nth(&armed.call, &armed.site, &armed.countdown, call, site)) {
    atomic_fetch_add_explicit(&armed.injected, 1, relaxed);
    err = atomic_load_explicit(&armed.err, relaxed);
  }
  /* After counting: the calls that come while this one sleeps are the next ones. */
  if (late) sleep_us(atomic_load_explicit(&delayed.us, relaxed));
  return err;
}

void kvik__fault_arm(kvik__fault_call call, const char *site, long nth, int err) {
  kvik__fault_disarm();
  atomic_store_explicit(&armed.site, site, relaxed);
  atomic_store_explicit(&armed.countdown, nth, relaxed);
  atomic_store_explicit(&armed.err, err, relaxed);
  atomic_store_explicit(&armed.injected, 0, relaxed);
  atomic_store_explicit(&armed.call, (int)call, relaxed);
}

void kvik__fault_disarm(void) { atomic_store_explicit(&armed.call, KVIK__FAULT_CALLS, relaxed); }

void kvik__fault_delay(kvik__fault_call call, const char *site, long nth, long us) {
  atomic_store_explicit(&delayed.call, KVIK__FAULT_CALLS, relaxed);
  atomic_store_explicit(&delayed.site, site, relaxed);
  atomic_store_explicit(&delayed.countdown, nth, relaxed);
  atomic_store_explicit(&delayed.us, us, relaxed);
  atomic_store_explicit(&delayed.call, (int)call, relaxed);
}

long kvik__fault_injected(void) { return atomic_load_explicit(&armed.injected, relaxed); }

size_t kvik__fault_sites(const char **out, kvik__fault_call *calls, long *hits, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < SITES_MAX && n < max; i++) {
    const char *site = atomic_load_explicit(&sites[i].site, relaxed);
    if (!site) continue;
    out[n] = site;
    calls[n] = (kvik__fault_call)atomic_load_explicit(&sites[i].call, relaxed);
    hits[n++] = atomic_load_explicit(&sites[i].hits, relaxed);
  }
  return n;
}
