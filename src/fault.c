/* Fault injection (sys.h), compiled into test builds only (-DKVIK_FAULT_INJECTION=ON).
 * Every access is a relaxed atomic: the hook runs on every system call of every thread, and must
 * neither serialise them nor add the ordering that would hide a race from ThreadSanitizer. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

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

int kvik__fault(kvik__fault_call call, const char *site) {
  site_slot *slot = slot_of(call, site);
  if (slot) atomic_fetch_add_explicit(&slot->hits, 1, relaxed);
  if (atomic_load_explicit(&armed.call, relaxed) != (int)call) return 0;
  const char *only = atomic_load_explicit(&armed.site, relaxed);
  if (only && strcmp(only, site) != 0) return 0;
  if (atomic_fetch_sub_explicit(&armed.countdown, 1, relaxed) != 1) return 0;
  atomic_fetch_add_explicit(&armed.injected, 1, relaxed);
  return atomic_load_explicit(&armed.err, relaxed);
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
