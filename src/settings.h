/* Process-wide settings (see kvik.h for the table of settings and variables). */
#ifndef KVIK_SRC_SETTINGS_H
#define KVIK_SRC_SETTINGS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kvik.h"

/* Each setting's value, indexed by kvik_setting: read through kvik__setting(), inline so that a
 * small read pays a load for a setting rather than a call; written by settings.c alone. */
extern _Atomic int64_t kvik__setting_values[KVIK_SETTING_COUNT];

/* The current value of a setting. Only meaningful after kvik__init() succeeded: its step here
 * reads every setting's environment variable (an invalid value makes it fail with KVIK_ECONFIG,
 * the detail message naming the first bad variable and its value). */
static inline int64_t kvik__setting(kvik_setting setting) {
  return atomic_load(&kvik__setting_values[setting]);
}

/* A text setting's current value (KVIK_SETTING_NVCOMP_LIBRARY), as snprintf() writes it into buf:
 * returns its full length. Only meaningful after kvik__init() succeeded. Thread-safe. */
int kvik__setting_text(kvik_setting setting, char *buf, size_t len);

/* Whether a response with this HTTP status is tried again (KVIK_SETTING_HTTP_STATUS_CODES). */
int kvik__http_status_retryable(long status);

/* Told each value a setting takes: the environment's (or the default) in kvik__init(), then each
 * value set through the API, before it applies; calls are serialised. Returns 0, or a negative
 * code that the call making the change returns: the value applies all the same, except after
 * -EDEADLK (it cannot be applied from this thread), which leaves the setting as it was. */
typedef int kvik__setting_watcher(int64_t value);

/* Make `watcher` the one of `setting` (a setting with an int64_t value). Call it while the library
 * loads (KVIK__ON_LOAD, init.h), so that no change can come before it. */
void kvik__setting_watch(kvik_setting setting, kvik__setting_watcher *watcher);

#endif
