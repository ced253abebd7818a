/* Settings: defaults, environment variables (KvikIO's names and values), run-time changes. */
#define _GNU_SOURCE
#include "settings.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "error.h"
#include "init.h"

typedef enum {
  KIND_TRISTATE,
  KIND_BOOL,
  KIND_COUNT,
  KIND_BYTES,
  KIND_STATUS_LIST,
  KIND_TEXT,  /* free text, read and changed as text only (a path) */
  KIND_CHOICE /* one of `choices`, its value the index */
} value_kind;

typedef struct {
  const char *name;      /* KvikIO's Python defaults name */
  const char *env;       /* environment variable */
  const char *env_alias; /* a second accepted variable, or NULL */
  value_kind kind;
  int64_t min, max;
  const char *const *choices; /* KIND_CHOICE: the names of values min to max, KvikIO's */
} setting_desc;

static const char *const backend_names[] = {"EASY_THREADPOOL", "MULTI_POLL"};
static const char *const dispatch_names[] = {"PER_CHUNK", "PER_PREAD"};

#define MiB (INT64_C(1) << 20)
#define GiB (INT64_C(1) << 30)
/* kvikio bounds its counts and sizes only by their C types. kvik's bounds, and why:
 *  - sizes: INT64_MAX, the most an int64_t setting holds (kvikio's size_t goes further);
 *  - threads, connections and attempts: UINT_MAX, as kvikio's unsigned int thread count; the
 *    pool, the connection cap and the retry loop count in an unsigned;
 *  - the HTTP timeout: curl refuses (CURLOPT_TIMEOUT) more than INT_MAX milliseconds, and would
 *    keep the handle's previous timeout instead. */
#define MAX_BYTES INT64_MAX
#define MAX_COUNT ((int64_t)UINT_MAX)
#define MAX_HTTP_TIMEOUT ((int64_t)(INT_MAX / 1000))
#define DEFAULT_MAX_THREADS 64
#define MIN_STATUS 100
#define MAX_STATUS 999

/* Bounce buffers of any positive size work: the IO paths round them up to whole pages. */
static const setting_desc descs[KVIK_SETTING_COUNT] = {
    [KVIK_SETTING_COMPAT_MODE] = {"compat_mode", "KVIKIO_COMPAT_MODE", NULL, KIND_TRISTATE, 0, 2,
                                  NULL},
    [KVIK_SETTING_NUM_THREADS] = {"num_threads", "KVIKIO_NTHREADS", "KVIKIO_NUM_THREADS",
                                  KIND_COUNT, 1, MAX_COUNT, NULL},
    [KVIK_SETTING_TASK_SIZE] = {"task_size", "KVIKIO_TASK_SIZE", NULL, KIND_BYTES, 1, MAX_BYTES,
                                NULL},
    [KVIK_SETTING_GDS_THRESHOLD] = {"gds_threshold", "KVIKIO_GDS_THRESHOLD", NULL, KIND_BYTES, 0,
                                    MAX_BYTES, NULL},
    [KVIK_SETTING_BOUNCE_BUFFER_SIZE] = {"bounce_buffer_size", "KVIKIO_BOUNCE_BUFFER_SIZE", NULL,
                                         KIND_BYTES, 1, MAX_BYTES, NULL},
    [KVIK_SETTING_AUTO_DIRECT_IO_READ] = {"auto_direct_io_read", "KVIKIO_AUTO_DIRECT_IO_READ", NULL,
                                          KIND_BOOL, 0, 1, NULL},
    [KVIK_SETTING_AUTO_DIRECT_IO_WRITE] = {"auto_direct_io_write", "KVIKIO_AUTO_DIRECT_IO_WRITE",
                                           NULL, KIND_BOOL, 0, 1, NULL},
    [KVIK_SETTING_ZERO_COPY_READ] = {"zero_copy_read", "KVIK_ZERO_COPY_READ", NULL, KIND_TRISTATE,
                                     0, 2, NULL},
    [KVIK_SETTING_HTTP_MAX_ATTEMPTS] = {"http_max_attempts", "KVIKIO_HTTP_MAX_ATTEMPTS", NULL,
                                        KIND_COUNT, 1, MAX_COUNT, NULL},
    [KVIK_SETTING_HTTP_TIMEOUT] = {"http_timeout", "KVIKIO_HTTP_TIMEOUT", NULL, KIND_COUNT, 1,
                                   MAX_HTTP_TIMEOUT, NULL},
    [KVIK_SETTING_HTTP_STATUS_CODES] = {"http_status_codes", "KVIKIO_HTTP_STATUS_CODES", NULL,
                                        KIND_STATUS_LIST, MIN_STATUS, MAX_STATUS, NULL},
    [KVIK_SETTING_REMOTE_VERBOSE] = {"remote_verbose", "KVIKIO_REMOTE_VERBOSE", NULL, KIND_BOOL, 0,
                                     1, NULL},
    [KVIK_SETTING_REMOTE_CONNECTIONS] = {"remote_connections", "KVIK_REMOTE_CONNECTIONS", NULL,
                                         KIND_COUNT, 1, MAX_COUNT, NULL},
    [KVIK_SETTING_IO_URING] = {"io_uring", "KVIK_IO_URING", NULL, KIND_TRISTATE, 0, 2, NULL},
    [KVIK_SETTING_REMOTE_IO_BACKEND] = {"remote_io_backend", "KVIKIO_REMOTE_IO_BACKEND", NULL,
                                        KIND_CHOICE, 0, 1, backend_names},
    [KVIK_SETTING_REMOTE_IO_NUM_REACTORS] = {"remote_io_num_reactors",
                                             "KVIKIO_REMOTE_IO_NUM_REACTORS", NULL, KIND_COUNT, 1,
                                             MAX_COUNT, NULL},
    [KVIK_SETTING_REMOTE_IO_REACTOR_DISPATCH] = {"remote_io_reactor_dispatch",
                                                 "KVIKIO_REMOTE_IO_REACTOR_DISPATCH", NULL,
                                                 KIND_CHOICE, 0, 1, dispatch_names},
    /* A count of requests, 0 for no limit: kvikio's size_t, as big as a size here. */
    [KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS] = {"remote_io_max_concurrent_requests",
                                                        "KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS",
                                                        NULL, KIND_COUNT, 0, MAX_BYTES, NULL},
    [KVIK_SETTING_NVCOMP_LIBRARY] = {"nvcomp_library", "KVIK_NVCOMP_LIBRARY", NULL, KIND_TEXT, 0, 0,
                                     NULL},
    [KVIK_SETTING_NVCOMP_MEMORY] = {"nvcomp_memory", "KVIK_NVCOMP_MEMORY", NULL, KIND_BYTES, 0,
                                    MAX_BYTES, NULL},
    [KVIK_SETTING_CURL_LIBRARY] = {"curl_library", "KVIK_CURL_LIBRARY", NULL, KIND_TEXT, 0, 0,
                                   NULL},
    [KVIK_SETTING_NUMA_AFFINITY] = {"numa_affinity", "KVIK_NUMA_AFFINITY", NULL, KIND_BOOL, 0, 1,
                                    NULL},
    [KVIK_SETTING_WRITE_BEHIND] = {"write_behind", "KVIK_WRITE_BEHIND", NULL, KIND_BOOL, 0, 1,
                                   NULL},
};

_Atomic int64_t kvik__setting_values[KVIK_SETTING_COUNT];
static _Atomic int sources[KVIK_SETTING_COUNT];
/* Written while the library loads, before any thread can change a setting; read-only after. */
static kvik__setting_watcher *watchers[KVIK_SETTING_COUNT];

/* KVIK_SETTING_HTTP_STATUS_CODES, one bit per status; its value entry is unused. A change
 * stores word by word: a request that reads the set meanwhile may see part of the change. */
#define STATUS_WORDS ((MAX_STATUS + 64) / 64)
typedef struct status_set {
  uint64_t bits[STATUS_WORDS];
} status_set;
static _Atomic uint64_t retry_statuses[STATUS_WORDS];
static const int default_retry_statuses[] = {429, 500, 502, 503, 504};

/* The text settings' values (KIND_TEXT), "" by default; their value entries are unused. */
#define TEXT_MAX 4096
static pthread_mutex_t text_lock = PTHREAD_MUTEX_INITIALIZER;
static char texts[KVIK_SETTING_COUNT][TEXT_MAX];

/* Page-cache reads are bound by memory copies, which scale with cores: one thread per CPU this
 * process may run on serves well out of the box (docs/benchmarks.md, host memory). The cap keeps a
 * huge machine from spawning hundreds of mostly idle threads. */
static int64_t default_num_threads(void) {
  cpu_set_t set;
  long n =
      sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
  if (n < 1) n = 1;
  return n > DEFAULT_MAX_THREADS ? DEFAULT_MAX_THREADS : n;
}

static int64_t default_value(kvik_setting s) {
  switch (s) {
  case KVIK_SETTING_COMPAT_MODE: return KVIK_COMPAT_AUTO;
  case KVIK_SETTING_NUM_THREADS: return default_num_threads();
  case KVIK_SETTING_TASK_SIZE: return 4 * MiB;
  case KVIK_SETTING_GDS_THRESHOLD: return 1 * MiB;
  case KVIK_SETTING_BOUNCE_BUFFER_SIZE: return 16 * MiB;
  case KVIK_SETTING_HTTP_MAX_ATTEMPTS: return 3;
  case KVIK_SETTING_HTTP_TIMEOUT: return 60;
  /* Requests run on pool threads, which bound them anyway: this only caps a big pool. */
  case KVIK_SETTING_REMOTE_CONNECTIONS: return 64;
  case KVIK_SETTING_IO_URING: return KVIK_AUTO;
  case KVIK_SETTING_REMOTE_IO_NUM_REACTORS: return 1;
  case KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS: return 256;
  /* Enough for nvCOMP's zstd to decode 4 GiB at once and keep its temporary space (about 12.5
   * GiB), a fifth of an 80 GB GPU's memory. */
  case KVIK_SETTING_NVCOMP_MEMORY: return 16 * GiB;
  case KVIK_SETTING_WRITE_BEHIND: return 1;
  default: return 0;
  }
}

static int valid_setting(kvik_setting s) { return (unsigned)s < KVIK_SETTING_COUNT; }

/* Lists and text have no int64_t value. */
static int text_only(kvik_setting s) {
  return descs[s].kind == KIND_STATUS_LIST || descs[s].kind == KIND_TEXT;
}

/* ---- parsing ---------------------------------------------------------------------------- */

/* Copy `text` without surrounding white space into buf; 0 if it does not fit. */
static int trim(const char *text, char *buf, size_t len) {
  while (isspace((unsigned char)*text)) text++;
  size_t n = strlen(text);
  while (n > 0 && isspace((unsigned char)text[n - 1])) n--;
  if (n >= len) return 0;
  memcpy(buf, text, n);
  buf[n] = '\0';
  return 1;
}

static int parse_bool(const char *t, int64_t *out) {
  static const char *const yes[] = {"on", "true", "yes", "1"};
  static const char *const no[] = {"off", "false", "no", "0"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(t, yes[i]) == 0) return *out = 1, 1;
    if (strcasecmp(t, no[i]) == 0) return *out = 0, 1;
  }
  return 0;
}

static int parse_tristate(const char *t, int64_t *out) {
  if (strcasecmp(t, "auto") == 0) return *out = KVIK_COMPAT_AUTO, 1;
  int64_t on;
  if (!parse_bool(t, &on)) return 0;
  *out = on ? KVIK_COMPAT_ON : KVIK_COMPAT_OFF;
  return 1;
}

static int parse_choice(const setting_desc *d, const char *t, int64_t *out) {
  for (int64_t v = d->min; v <= d->max; v++)
    if (strcasecmp(t, d->choices[v]) == 0) return *out = v, 1;
  return 0;
}

static int parse_digits(const char *t, int64_t *out) {
  if (!*t) return 0;
  int64_t v = 0;
  for (; *t; t++) {
    if (!isdigit((unsigned char)*t)) return 0;
    if (v > (INT64_MAX - (*t - '0')) / 10) return 0;
    v = v * 10 + (*t - '0');
  }
  *out = v;
  return 1;
}

/* A leading '-' parses too, so that "-1" is reported against the setting's range (every decimal
 * setting's minimum is 0 or more) instead of as text that is no number. */
static int parse_decimal(const char *t, int64_t *out) {
  int negative = *t == '-';
  if (!parse_digits(t + negative, out)) return 0;
  if (negative) *out = -*out;
  return 1;
}

static void status_add(status_set *set, int64_t status) {
  set->bits[status / 64] |= UINT64_C(1) << (status % 64);
}

static int status_has(const status_set *set, int64_t status) {
  return (set->bits[status / 64] >> (status % 64)) & 1;
}

/* "429, 500,503" into a set; "" is the empty set. Returns 0 or -EINVAL with a message naming
 * `what`. */
static int parse_status_list(const char *text, const char *what, status_set *set) {
  *set = (status_set){{0}};
  const char *p = text;
  while (isspace((unsigned char)*p)) p++;
  while (*p) {
    char *end;
    errno = 0;
    long status = strtol(p, &end, 10);
    if (end == p || errno || status < MIN_STATUS || status > MAX_STATUS)
      return kvik__fail(-EINVAL, "%s='%s': expected HTTP statuses (%d to %d) separated by commas",
                        what, text, MIN_STATUS, MAX_STATUS);
    status_add(set, status);
    for (p = end; isspace((unsigned char)*p); p++) {
    }
    if (*p == ',') p++;
    else if (*p)
      return kvik__fail(-EINVAL, "%s='%s': expected a comma after %ld", what, text, status);
    while (isspace((unsigned char)*p)) p++;
  }
  return 0;
}

static void store_statuses(const status_set *set) {
  for (int i = 0; i < STATUS_WORDS; i++) atomic_store(&retry_statuses[i], set->bits[i]);
}

int kvik__http_status_retryable(long status) {
  return status >= MIN_STATUS && status <= MAX_STATUS &&
         ((atomic_load(&retry_statuses[status / 64]) >> (status % 64)) & 1);
}

static int format_statuses(char *buf, size_t len) {
  status_set set;
  for (int i = 0; i < STATUS_WORDS; i++) set.bits[i] = atomic_load(&retry_statuses[i]);
  int n = 0;
  if (len > 0) buf[0] = '\0';
  for (int64_t status = MIN_STATUS; status <= MAX_STATUS; status++) {
    if (!status_has(&set, status)) continue;
    size_t used = (size_t)n;
    n += snprintf(used < len ? buf + used : NULL, used < len ? len - used : 0, "%s%d", n ? "," : "",
                  (int)status);
  }
  return n;
}

/* What text `d` takes, into buf. */
static void expected_text(const setting_desc *d, char *buf, size_t len) {
  switch (d->kind) {
  case KIND_TRISTATE: snprintf(buf, len, "ON, OFF or AUTO (or true/false/yes/no/1/0)"); break;
  case KIND_BOOL: snprintf(buf, len, "on/off, true/false, yes/no or 1/0"); break;
  case KIND_CHOICE: snprintf(buf, len, "%s or %s", d->choices[0], d->choices[1]); break;
  default: snprintf(buf, len, "a decimal integer"); break;
  }
}

/* Why `value` is out of d's range; a count or size below 1 in kvikio's words. */
static void range_text(const setting_desc *d, int64_t value, char *buf, size_t len) {
  int number = d->kind == KIND_COUNT || d->kind == KIND_BYTES;
  if (number && value < d->min)
    snprintf(buf, len, "%s", d->min == 1 ? "must be a positive integer" : "must not be negative");
  else if (number) snprintf(buf, len, "must be at most %" PRId64, d->max);
  else snprintf(buf, len, "must be between %" PRId64 " and %" PRId64, d->min, d->max);
}

/* Parse text for setting s, range check included. Returns 0 or -EINVAL with the message
 * "<what>: <why>", where `what` names the source of the text. */
static int parse_value(kvik_setting s, const char *text, const char *what, int64_t *out) {
  const setting_desc *d = &descs[s];
  char t[64];
  int ok = trim(text, t, sizeof t);
  switch (d->kind) {
  case KIND_TRISTATE: ok = ok && parse_tristate(t, out); break;
  case KIND_BOOL: ok = ok && parse_bool(t, out); break;
  case KIND_CHOICE: ok = ok && parse_choice(d, t, out); break;
  default: ok = ok && parse_decimal(t, out); break;
  }
  if (!ok) {
    char expected[64];
    expected_text(d, expected, sizeof expected);
    return kvik__fail(-EINVAL, "%s='%s': expected %s", what, text, expected);
  }
  if (*out < d->min || *out > d->max) {
    char why[64];
    range_text(d, *out, why, sizeof why);
    return kvik__fail(-EINVAL, "%s='%s': %s", what, text, why);
  }
  return 0;
}

/* ---- environment ------------------------------------------------------------------------ */

/* Read one variable if set. Returns 1 if it was set (value in *out), 0 if not, <0 if invalid. */
static int read_env(kvik_setting s, const char *var, int64_t *out) {
  const char *text = getenv(var);
  if (!text) return 0;
  int rc = parse_value(s, text, var, out);
  return rc < 0 ? KVIK_ECONFIG : 1;
}

/* The retry statuses, from KVIKIO_HTTP_STATUS_CODES or the default. */
static int load_statuses(void) {
  const char *var = descs[KVIK_SETTING_HTTP_STATUS_CODES].env, *text = getenv(var);
  status_set set = {{0}};
  if (text && parse_status_list(text, var, &set) < 0) return KVIK_ECONFIG;
  for (size_t i = 0; !text && i < sizeof default_retry_statuses / sizeof *default_retry_statuses;
       i++)
    status_add(&set, default_retry_statuses[i]);
  store_statuses(&set);
  atomic_store(&sources[KVIK_SETTING_HTTP_STATUS_CODES],
               text ? KVIK_SOURCE_ENV : KVIK_SOURCE_DEFAULT);
  return 0;
}

/* Store a text setting's value. Returns 0, or -EINVAL with a message naming `what` when the
 * text does not fit. */
static int store_text(kvik_setting s, const char *text, const char *what, int source) {
  size_t n = strlen(text);
  if (n >= TEXT_MAX)
    return kvik__fail(-EINVAL, "%s: %zu bytes, longer than the %d that fit", what, n, TEXT_MAX - 1);
  pthread_mutex_lock(&text_lock);
  memcpy(texts[s], text, n + 1);
  atomic_store(&sources[s], source);
  pthread_mutex_unlock(&text_lock);
  return 0;
}

int kvik__setting_text(kvik_setting setting, char *buf, size_t len) {
  pthread_mutex_lock(&text_lock);
  int n = snprintf(buf, len, "%s", texts[setting]);
  pthread_mutex_unlock(&text_lock);
  return n;
}

static int load_one(kvik_setting s) {
  const setting_desc *d = &descs[s];
  if (d->kind == KIND_STATUS_LIST) return load_statuses();
  if (d->kind == KIND_TEXT) {
    const char *text = getenv(d->env);
    int rc = store_text(s, text ? text : "", d->env, text ? KVIK_SOURCE_ENV : KVIK_SOURCE_DEFAULT);
    return rc < 0 ? KVIK_ECONFIG : 0;
  }
  int64_t value = default_value(s), alias_value;
  int rc = read_env(s, d->env, &value);
  if (rc < 0) return rc;
  int from_env = rc;
  if (d->env_alias) {
    rc = read_env(s, d->env_alias, &alias_value);
    if (rc < 0) return rc;
    if (rc && from_env && alias_value != value)
      return kvik__fail(KVIK_ECONFIG, "%s='%s' and %s='%s' disagree: set one of them", d->env,
                        getenv(d->env), d->env_alias, getenv(d->env_alias));
    if (rc) value = alias_value, from_env = 1;
  }
  atomic_store(&kvik__setting_values[s], value);
  atomic_store(&sources[s], from_env ? KVIK_SOURCE_ENV : KVIK_SOURCE_DEFAULT);
  return 0;
}

void kvik__setting_watch(kvik_setting setting, kvik__setting_watcher *watcher) {
  assert(valid_setting(setting) && !text_only(setting) && !watchers[setting]);
  watchers[setting] = watcher;
}

static int notify(kvik_setting s, int64_t value) { return watchers[s] ? watchers[s](value) : 0; }

static int load_env(void) {
  for (int s = 0; s < KVIK_SETTING_COUNT; s++) {
    int rc = load_one((kvik_setting)s);
    if (rc < 0) return rc;
  }
  for (int s = 0; s < KVIK_SETTING_COUNT; s++) {
    int rc = notify((kvik_setting)s, atomic_load(&kvik__setting_values[s]));
    if (rc < 0) return rc;
  }
  return 0;
}

KVIK__ON_LOAD(register_init_step) { kvik__init_register(load_env); }

/* ---- public API ------------------------------------------------------------------------- */

static int refuse_list(const char *fn, kvik_setting s) {
  return kvik__fail(-EINVAL,
                    "%s(%s): a %s, read and changed as text: use "
                    "kvik_setting_format/kvik_setting_parse",
                    fn, descs[s].name, descs[s].kind == KIND_TEXT ? "text" : "list");
}

int kvik_setting_get(kvik_setting setting, int64_t *value) {
  if (!valid_setting(setting))
    return kvik__fail(-EINVAL, "kvik_setting_get: unknown setting %d", (int)setting);
  if (!value) return kvik__fail(-EINVAL, "kvik_setting_get(%s): NULL value", descs[setting].name);
  if (text_only(setting)) return refuse_list("kvik_setting_get", setting);
  int rc = kvik__init();
  if (rc < 0) return rc;
  *value = kvik__setting(setting);
  return 0;
}

/* Serialises changes, so that a value and what its watcher made of it (the pool's size) always
 * agree. */
static pthread_mutex_t set_lock = PTHREAD_MUTEX_INITIALIZER;

/* A thread count applies even when its threads cannot start now: the pool tries again on its
 * next use, so the setting and the pool agree either way. */
static int set_checked(kvik_setting s, int64_t value) {
  assert(valid_setting(s) && !text_only(s));
  assert(value >= descs[s].min && value <= descs[s].max);
  pthread_mutex_lock(&set_lock);
  int rc = notify(s, value);
  if (rc != -EDEADLK) {
    atomic_store(&kvik__setting_values[s], value);
    atomic_store(&sources[s], KVIK_SOURCE_API);
  }
  pthread_mutex_unlock(&set_lock);
  return rc;
}

int kvik_setting_set(kvik_setting setting, int64_t value) {
  if (!valid_setting(setting))
    return kvik__fail(-EINVAL, "kvik_setting_set: unknown setting %d", (int)setting);
  if (text_only(setting)) return refuse_list("kvik_setting_set", setting);
  int rc = kvik__init();
  if (rc < 0) return rc;
  const setting_desc *d = &descs[setting];
  if (value < d->min || value > d->max) {
    char why[64];
    range_text(d, value, why, sizeof why);
    return kvik__fail(-EINVAL, "kvik_setting_set(%s, %" PRId64 "): %s", d->name, value, why);
  }
  return set_checked(setting, value);
}

/* What parse messages of the API name: the function, then the setting. (The environment's
 * messages name the variable instead, as KvikIO's do.) */
#define PARSE_WHAT_LEN 64
static void parse_what(kvik_setting s, char *buf) {
  snprintf(buf, PARSE_WHAT_LEN, "kvik_setting_parse: %s", descs[s].name);
}

static int parse_statuses_checked(const char *text) {
  status_set set;
  char what[PARSE_WHAT_LEN];
  parse_what(KVIK_SETTING_HTTP_STATUS_CODES, what);
  int rc = parse_status_list(text, what, &set);
  if (rc < 0) return rc;
  pthread_mutex_lock(&set_lock);
  store_statuses(&set);
  atomic_store(&sources[KVIK_SETTING_HTTP_STATUS_CODES], KVIK_SOURCE_API);
  pthread_mutex_unlock(&set_lock);
  return 0;
}

int kvik_setting_parse(kvik_setting setting, const char *text) {
  if (!valid_setting(setting))
    return kvik__fail(-EINVAL, "kvik_setting_parse: unknown setting %d", (int)setting);
  if (!text) return kvik__fail(-EINVAL, "kvik_setting_parse(%s): NULL text", descs[setting].name);
  int rc = kvik__init();
  if (rc < 0) return rc;
  if (descs[setting].kind == KIND_STATUS_LIST) return parse_statuses_checked(text);
  int64_t value;
  char what[PARSE_WHAT_LEN];
  parse_what(setting, what);
  if (descs[setting].kind == KIND_TEXT) return store_text(setting, text, what, KVIK_SOURCE_API);
  rc = parse_value(setting, text, what, &value);
  return rc < 0 ? rc : set_checked(setting, value);
}

int kvik_setting_source_of(kvik_setting setting) {
  if (!valid_setting(setting))
    return kvik__fail(-EINVAL, "kvik_setting_source_of: unknown setting %d", (int)setting);
  int rc = kvik__init();
  return rc < 0 ? rc : atomic_load(&sources[setting]);
}

/* The text of value v of a setting with an int64_t value. */
static int format_value(kvik_setting setting, int64_t v, char *buf, size_t len) {
  static const char *const tristate_names[] = {"OFF", "ON", "AUTO"};
  switch (descs[setting].kind) {
  case KIND_TRISTATE: return snprintf(buf, len, "%s", tristate_names[v]);
  case KIND_BOOL: return snprintf(buf, len, "%s", v ? "on" : "off");
  case KIND_CHOICE: return snprintf(buf, len, "%s", descs[setting].choices[v]);
  default: return snprintf(buf, len, "%" PRId64, v);
  }
}

/* A NULL buffer is fine with len 0 (snprintf's way to measure the text), not otherwise. */
int kvik_setting_format(kvik_setting setting, char *buf, size_t len) {
  if (!valid_setting(setting))
    return kvik__fail(-EINVAL, "kvik_setting_format: unknown setting %d", (int)setting);
  if (!buf && len > 0)
    return kvik__fail(-EINVAL, "kvik_setting_format(%s): NULL buffer for %zu bytes",
                      descs[setting].name, len);
  int rc = kvik__init();
  if (rc < 0) return rc;
  if (descs[setting].kind == KIND_STATUS_LIST) return format_statuses(buf, len);
  if (descs[setting].kind == KIND_TEXT) return kvik__setting_text(setting, buf, len);
  return format_value(setting, kvik__setting(setting), buf, len);
}

const char *kvik_setting_name(kvik_setting setting) {
  return valid_setting(setting) ? descs[setting].name : NULL;
}

const char *kvik_setting_env_name(kvik_setting setting) {
  return valid_setting(setting) ? descs[setting].env : NULL;
}

int kvik_setting_lookup(const char *name) {
  if (!name) return kvik__fail(-EINVAL, "kvik_setting_lookup: NULL name");
  for (int s = 0; s < KVIK_SETTING_COUNT; s++)
    if (strcmp(descs[s].name, name) == 0) return s;
  return kvik__fail(-EINVAL, "kvik_setting_lookup: unknown setting name '%s'", name);
}
