/* Loading cuFile, opening and closing its driver, and the public driver controls. */
#define _GNU_SOURCE
#include "cufile.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "dl.h"
#include "error.h"
#include "init.h"

#define CUFILE_SONAME "libcufile.so.0"

/* How long exit waits for cuFile calls still running before it leaves the driver open: closing
 * it under them is what crashes, and a process that is exiting loses nothing by not closing. */
#define EXIT_WAIT_NS (5 * 1000000000LL)

typedef enum { NOT_TRIED, OPENING, OPEN, FAILED, CLOSED } driver_state;

/* The lock is never held while cuFile runs: a library's fork handlers take its own locks before
 * kvik's (they were registered later), so holding kvik's around a cuFile call could deadlock a
 * fork. One thread opens the driver (OPENING) while the others wait on `settled`. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t settled = PTHREAD_COND_INITIALIZER;
static _Atomic driver_state state = NOT_TRIED; /* written under lock; OPEN is read without it */
static void *library;                          /* dlopen handle, kept for the process's life */
static kvik__cufile_api api;                   /* resolved once, before state first becomes OPEN */
static int failure_code;                       /* the code of a FAILED open */
static char why_unavailable[KVIK_MESSAGE_MAX];
static _Atomic unsigned generation;
static _Atomic long calls_in_flight;
static _Atomic int closing;
static int exit_handler_registered;

/* ---- loading ------------------------------------------------------------------------------ */

static int resolve(void *handle) {
#define KVIK__CUFILE_REQUIRED_(member, symbol, ret, params)                                          \
  *(void **)&api.member = dlsym(handle, symbol);                                                   \
  if (!api.member) {                                                                               \
    snprintf(why_unavailable, sizeof why_unavailable, CUFILE_SONAME " lacks %s (cuFile too old?)", symbol); \
    return -1;                                                                                     \
  }
  KVIK__CUFILE_FUNCTIONS(KVIK__CUFILE_REQUIRED_)
#undef KVIK__CUFILE_REQUIRED_
#define KVIK__CUFILE_OPTIONAL_(member, symbol, ret, params) *(void **)&api.member = dlsym(handle, symbol);
  KVIK__CUFILE_OPTIONAL_FUNCTIONS(KVIK__CUFILE_OPTIONAL_)
#undef KVIK__CUFILE_OPTIONAL_
  return 0;
}

/* cuFile's name of a status, or NULL for one it does not define. */
static const char *known_status_name(int status) {
  switch (status) {
#define KVIK__CUFILE_NAME_(name, value, text) \
  case value:                                 \
    return #name;
    KVIK__CUFILE_STATUSES(KVIK__CUFILE_NAME_)
#undef KVIK__CUFILE_NAME_
  default:
    return NULL;
  }
}

static const char *status_name(int status) {
  const char *name = known_status_name(status);
  return name ? name : "unknown cuFile status";
}

/* For kvik_err_name() and kvik_strerror(): code n of cuFile's range is status 5000 + n. */
static const char *code_name(int n) {
  const char *name = known_status_name(KVIK__CUFILE_STATUS_BASE + n);
  return name ? name : "UNKNOWN";
}

static const char *code_text(int n) {
  switch (KVIK__CUFILE_STATUS_BASE + n) {
#define KVIK__CUFILE_TEXT_(name, value, text) \
  case value:                                 \
    return text;
    KVIK__CUFILE_STATUSES(KVIK__CUFILE_TEXT_)
#undef KVIK__CUFILE_TEXT_
  default:
    return "unknown cuFile status";
  }
}

/* cuFile's status as a kvik code; a CUDA driver error inside cuFile as that CUDA error's code. */
static int status_code(kvik__cufile_error status) {
  if (status.err != KVIK__CU_FILE_CUDA_DRIVER_ERROR || status.cu_err == CUDA_SUCCESS)
    return KVIK_FOREIGN_CODE_(KVIK_ECUFILE_BASE, status.err - KVIK__CUFILE_STATUS_BASE);
  return kvik__foreign_code(KVIK_ECUDA_BASE, status.cu_err, CUDA_ERROR_UNKNOWN);
}

static void close_at_exit(void);

/* Load cuFile and open its driver; called without the lock by the one thread that set OPENING,
 * which alone writes what this writes until it publishes the resulting state. cuFile needs the
 * CUDA driver, which is loaded first so that its absence is reported as such. */
static driver_state open_driver(void) {
  char why[512];
  failure_code = KVIK_ECUFILE_UNAVAILABLE;
  if (!library && !(library = kvik__dl_open(CUFILE_SONAME, why, sizeof why))) {
    snprintf(why_unavailable, sizeof why_unavailable, "%s", why);
    return FAILED;
  }
  if (resolve(library) < 0) return FAILED;
  if (!kvik__cuda("cuFile")) {
    snprintf(why_unavailable, sizeof why_unavailable, "needs the CUDA driver: %s", kvik_last_error());
    return FAILED;
  }
  kvik__cufile_error status = api.cuFileDriverOpen();
  if (status.err != KVIK__CUFILE_SUCCESS) {
    snprintf(why_unavailable, sizeof why_unavailable, "cuFileDriverOpen: %s (%d)", status_name(status.err), status.err);
    failure_code = status_code(status);
    return FAILED;
  }
  /* atexit handlers run before the ELF destructors of libcufile, and this one is registered
   * after every handler libcufile registered while it loaded, so it runs while cuFile is whole. */
  if (!exit_handler_registered && atexit(close_at_exit) == 0) exit_handler_registered = 1;
  return OPEN;
}

/* Wait until no thread is opening the driver; called and returns with the lock held. */
static void wait_settled_locked(void) {
  while (state == OPENING) pthread_cond_wait(&settled, &lock);
}

const kvik__cufile_api *kvik__cufile(const char *fn, int *code) {
  if (atomic_load(&state) != OPEN) {
    pthread_mutex_lock(&lock);
    wait_settled_locked();
    if (state == NOT_TRIED) {
      state = OPENING;
      pthread_mutex_unlock(&lock);
      driver_state result = open_driver();
      pthread_mutex_lock(&lock);
      state = result;
      pthread_cond_broadcast(&settled);
    }
    pthread_mutex_unlock(&lock);
  }
  driver_state s = atomic_load(&state);
  if (s == OPEN) return &api;
  if (s == CLOSED) {
    *code = kvik__fail(-KVIK__CU_FILE_DRIVER_CLOSING, "%s: the cuFile driver was closed at process exit",
                       fn ? fn : "cuFile");
    return NULL;
  }
  if (!fn) *code = kvik__fail(failure_code, "cuFile unavailable: %s", why_unavailable);
  else *code = kvik__fail(failure_code, "%s: cuFile unavailable: %s", fn, why_unavailable);
  return NULL;
}

const kvik__cufile_api *kvik__cufile_if_open(void) { return atomic_load(&state) == OPEN ? &api : NULL; }

int kvik__cufile_check(kvik__cufile_error status, const char *fn, const char *call) {
  if (status.err == KVIK__CUFILE_SUCCESS) return 0;
  int code = status_code(status);
  return kvik__fail(code, "%s: %s: %s (%s)", fn, call, status_name(status.err), kvik_strerror(code));
}

int kvik__cufile_io_error(ssize_t ret, int saved_errno, const char *fn, const char *call, const char *path) {
  if (ret == -1) return kvik__fail_errno(saved_errno ? saved_errno : EIO, "%s(\"%s\"): %s", fn, path, call);
  if (-ret > KVIK__CUFILE_STATUS_BASE) {
    kvik__cufile_error status = {(int)-ret, CUDA_SUCCESS};
    return kvik__fail((int)ret, "%s(\"%s\"): %s: %s (%s)", fn, path, call, status_name(status.err),
                      kvik_strerror((int)ret));
  }
  return kvik__fail_errno((int)-ret, "%s(\"%s\"): %s", fn, path, call);
}

/* ---- the exit gate ------------------------------------------------------------------------ */

int kvik__cufile_enter(const char *fn) {
  atomic_fetch_add(&calls_in_flight, 1);
  if (!atomic_load(&closing)) return 0;
  atomic_fetch_sub(&calls_in_flight, 1);
  return kvik__fail(-KVIK__CU_FILE_DRIVER_CLOSING, "%s: cuFile driver closed: the process is exiting", fn);
}

void kvik__cufile_leave(void) { atomic_fetch_sub(&calls_in_flight, 1); }

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* New cuFile calls stop at the gate from here on; the driver closes once the running ones have
 * returned, or stays open if they do not return in time. Handles still registered go with it. */
static void close_at_exit(void) {
  atomic_store(&closing, 1);
  int64_t deadline = now_ns() + EXIT_WAIT_NS;
  while (atomic_load(&calls_in_flight) > 0 && now_ns() < deadline) {
    struct timespec pause = {0, 1000000};
    nanosleep(&pause, NULL);
  }
  pthread_mutex_lock(&lock);
  wait_settled_locked();
  int close = state == OPEN && atomic_load(&calls_in_flight) == 0;
  pthread_mutex_unlock(&lock);
  /* cuFile refuses (CU_FILE_DRIVER_CLOSING) while stream-ordered IO it accepted is pending; then
   * it stays open, and the gate keeps kvik from calling it again. */
  if (close && api.cuFileDriverClose().err == KVIK__CUFILE_SUCCESS) {
    pthread_mutex_lock(&lock);
    state = CLOSED;
    pthread_mutex_unlock(&lock);
  }
}

/* ---- fork ----------------------------------------------------------------------------------- */

unsigned kvik__cufile_generation(void) { return atomic_load(&generation); }

static void fork_prepare(void) { pthread_mutex_lock(&lock); }

static void fork_parent(void) { pthread_mutex_unlock(&lock); }

/* The parent's driver state and handles do not carry over: the child opens the driver again on
 * first need (which needs CUDA, and so fails if the parent had it: see cuda.c), and files opened
 * before the fork fall back to POSIX IO because their generation differs. */
static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  pthread_cond_init(&settled, NULL);
  atomic_fetch_add(&generation, 1);
  atomic_store(&calls_in_flight, 0);
  if (library || state == OPENING) state = NOT_TRIED;
}

KVIK__ON_LOAD(install_hooks) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_CUFILE, &handlers);
  kvik__error_register(KVIK_ECUFILE_BASE, code_name, code_text);
}

/* ---- public driver controls ----------------------------------------------------------------- */

/* The open driver for a public call, or NULL with *rc set. */
static const kvik__cufile_api *driver(const char *fn, int *rc) {
  *rc = kvik__init();
  if (*rc < 0) return NULL;
  return kvik__cufile(fn, rc);
}

int kvik_cufile_open(void) {
  int rc;
  return driver("kvik_cufile_open", &rc) ? 0 : rc;
}

static int missing(const char *fn, const char *symbol, const char *since) {
  return kvik__fail(-ENOTSUP, "%s: the loaded cuFile lacks %s (cuFile %s or later)", fn, symbol, since);
}

int kvik_cufile_version(void) {
  static const char fn[] = "kvik_cufile_version";
  int rc;
  const kvik__cufile_api *cf = driver(fn, &rc);
  if (!cf) return rc;
  if (!cf->cuFileGetVersion) return missing(fn, "cuFileGetVersion", "1.9");
  int version = 0;
  rc = kvik__cufile_check(cf->cuFileGetVersion(&version), fn, "cuFileGetVersion");
  return rc < 0 ? rc : version;
}

#define KiB ((size_t)1024)

int kvik_cufile_get_properties(kvik_cufile_properties *props) {
  static const char fn[] = "kvik_cufile_get_properties";
  if (!props || props->struct_size < sizeof(size_t))
    return kvik__fail(-EINVAL, "%s: NULL, or struct_size not set", fn);
  int rc;
  const kvik__cufile_api *cf = driver(fn, &rc);
  if (!cf) return rc;
  kvik__cufile_props p;
  memset(&p, 0, sizeof p);
  rc = kvik__cufile_check(cf->cuFileDriverGetProperties(&p), fn, "cuFileDriverGetProperties");
  if (rc < 0) return rc;
  kvik_cufile_properties out = {
      .struct_size = props->struct_size,
      .nvfs_major_version = p.nvfs.major_version,
      .nvfs_minor_version = p.nvfs.minor_version,
      .gds_available = p.nvfs.major_version > 0,
      .allow_compat_mode = (p.nvfs.dcontrolflags >> KVIK__CUFILE_ALLOW_COMPAT_MODE) & 1,
      .poll_mode = (p.nvfs.dcontrolflags >> KVIK__CUFILE_USE_POLL_MODE) & 1,
      .poll_threshold_size = p.nvfs.poll_thresh_size * KiB,
      .max_direct_io_size = p.nvfs.max_direct_io_size * KiB,
      .max_device_cache_size = p.max_device_cache_size * KiB,
      .per_buffer_cache_size = p.per_buffer_cache_size * KiB,
      .max_device_pinned_mem_size = p.max_device_pinned_mem_size * KiB,
      .max_batch_io_size = p.max_batch_io_size,
      .max_batch_io_timeout_ms = p.max_batch_io_timeout_msecs,
      .file_system_flags = p.nvfs.dstatusflags,
      .feature_flags = p.fflags,
  };
  size_t n = props->struct_size < sizeof out ? props->struct_size : sizeof out;
  memcpy(props, &out, n);
  return 0;
}

int kvik_cufile_set_poll_mode(int enable, size_t threshold_size) {
  static const char fn[] = "kvik_cufile_set_poll_mode";
  int rc;
  const kvik__cufile_api *cf = driver(fn, &rc);
  if (!cf) return rc;
  return kvik__cufile_check(cf->cuFileDriverSetPollMode(enable != 0, threshold_size / KiB), fn,
                            "cuFileDriverSetPollMode");
}

#define DRIVER_SIZE_SETTER(public_name, member)                                                     \
  int public_name(size_t size) {                                                                   \
    int rc;                                                                                        \
    const kvik__cufile_api *cf = driver(#public_name, &rc);                                        \
    if (!cf) return rc;                                                                            \
    return kvik__cufile_check(cf->member(size / KiB), #public_name, #member);                      \
  }
DRIVER_SIZE_SETTER(kvik_cufile_set_max_direct_io_size, cuFileDriverSetMaxDirectIOSize)
DRIVER_SIZE_SETTER(kvik_cufile_set_max_cache_size, cuFileDriverSetMaxCacheSize)
DRIVER_SIZE_SETTER(kvik_cufile_set_max_pinned_memory, cuFileDriverSetMaxPinnedMemSize)
#undef DRIVER_SIZE_SETTER

/* ---- parameters --------------------------------------------------------------------------- */

typedef enum { PARAM_SIZE, PARAM_BOOL, PARAM_STRING } param_type;

typedef struct {
  const char *name;
  param_type type;
  int value; /* cuFile's enum value */
} param_desc;

static const param_desc params[] = {
#define KVIK__PARAM_SIZE_(name, value) {#name, PARAM_SIZE, value},
#define KVIK__PARAM_BOOL_(name, value) {#name, PARAM_BOOL, value},
#define KVIK__PARAM_STRING_(name, value) {#name, PARAM_STRING, value},
    KVIK__CUFILE_SIZE_PARAMS(KVIK__PARAM_SIZE_) KVIK__CUFILE_BOOL_PARAMS(KVIK__PARAM_BOOL_)
        KVIK__CUFILE_STRING_PARAMS(KVIK__PARAM_STRING_)
#undef KVIK__PARAM_SIZE_
#undef KVIK__PARAM_BOOL_
#undef KVIK__PARAM_STRING_
};

#define PARAM_COUNT (sizeof params / sizeof params[0])

const char *kvik_cufile_parameter_name(unsigned index) { return index < PARAM_COUNT ? params[index].name : NULL; }

static const param_desc *find_param(const char *fn, const char *name) {
  for (size_t i = 0; name && i < PARAM_COUNT; i++)
    if (strcmp(params[i].name, name) == 0) return &params[i];
  kvik__fail(-EINVAL, "%s(\"%s\"): no such cuFile parameter (kvik_cufile_parameter_name lists them)", fn,
             name ? name : "(null)");
  return NULL;
}

/* The library for a parameter call: loaded, with the 1.14 parameter API. Parameters are set
 * before the driver opens, so this loads without opening. */
static const kvik__cufile_api *param_library(const char *fn, int *rc) {
  *rc = kvik__init();
  if (*rc < 0) return NULL;
  pthread_mutex_lock(&lock);
  wait_settled_locked();
  char why[512] = "";
  if (!library && !(library = kvik__dl_open(CUFILE_SONAME, why, sizeof why))) {
    pthread_mutex_unlock(&lock);
    *rc = kvik__fail(KVIK_ECUFILE_UNAVAILABLE, "%s: cuFile unavailable: %s", fn, why);
    return NULL;
  }
  int resolved = state == OPEN || resolve(library) == 0;
  pthread_mutex_unlock(&lock);
  if (!resolved) {
    *rc = kvik__fail(KVIK_ECUFILE_UNAVAILABLE, "%s: cuFile unavailable: %s", fn, why_unavailable);
    return NULL;
  }
  if (!api.cuFileGetParameterSizeT) {
    *rc = missing(fn, "cuFileGetParameterSizeT", "1.14");
    return NULL;
  }
  return &api;
}

int kvik_cufile_parameter_get(const char *name, char *value, size_t len) {
  static const char fn[] = "kvik_cufile_parameter_get";
  if (!value || len == 0) return kvik__fail(-EINVAL, "%s: no room for the value", fn);
  value[0] = '\0';
  const param_desc *p = find_param(fn, name);
  int rc;
  const kvik__cufile_api *cf = p ? param_library(fn, &rc) : NULL;
  if (!p) return -EINVAL;
  if (!cf) return rc;
  if (p->type == PARAM_SIZE) {
    size_t v = 0;
    rc = kvik__cufile_check(cf->cuFileGetParameterSizeT(p->value, &v), fn, "cuFileGetParameterSizeT");
    if (rc == 0) snprintf(value, len, "%zu", v);
  } else if (p->type == PARAM_BOOL) {
    bool v = false;
    rc = kvik__cufile_check(cf->cuFileGetParameterBool(p->value, &v), fn, "cuFileGetParameterBool");
    if (rc == 0) snprintf(value, len, "%s", v ? "true" : "false");
  } else {
    rc = kvik__cufile_check(cf->cuFileGetParameterString(p->value, value, len > 4096 ? 4096 : (int)len), fn,
                            "cuFileGetParameterString");
  }
  return rc;
}

static int parse_bool(const char *text, bool *out) {
  static const char *const yes[] = {"true", "on", "yes", "1"}, *const no[] = {"false", "off", "no", "0"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(text, yes[i]) == 0) return *out = true, 0;
    if (strcasecmp(text, no[i]) == 0) return *out = false, 0;
  }
  return -1;
}

int kvik_cufile_parameter_set(const char *name, const char *value) {
  static const char fn[] = "kvik_cufile_parameter_set";
  const param_desc *p = find_param(fn, name);
  if (!p) return -EINVAL;
  if (!value) return kvik__fail(-EINVAL, "%s(\"%s\"): NULL value", fn, name);
  int rc;
  const kvik__cufile_api *cf = param_library(fn, &rc);
  if (!cf) return rc;
  if (p->type == PARAM_SIZE) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (errno || end == value || *end || value[0] == '-')
      return kvik__fail(-EINVAL, "%s(\"%s\"): \"%s\" is not a decimal number", fn, name, value);
    return kvik__cufile_check(cf->cuFileSetParameterSizeT(p->value, (size_t)v), fn, "cuFileSetParameterSizeT");
  }
  if (p->type == PARAM_BOOL) {
    bool v;
    if (parse_bool(value, &v) < 0) return kvik__fail(-EINVAL, "%s(\"%s\"): \"%s\" is not true or false", fn, name, value);
    return kvik__cufile_check(cf->cuFileSetParameterBool(p->value, v), fn, "cuFileSetParameterBool");
  }
  return kvik__cufile_check(cf->cuFileSetParameterString(p->value, value), fn, "cuFileSetParameterString");
}

/* ---- statistics ------------------------------------------------------------------------------ */

static const kvik__cufile_api *stats_driver(const char *fn, int *rc) {
  const kvik__cufile_api *cf = driver(fn, rc);
  if (cf && !cf->cuFileGetStatsL1) {
    *rc = missing(fn, "cuFileGetStatsL1", "1.15");
    return NULL;
  }
  return cf;
}

int kvik_cufile_stats_start(int level) {
  static const char fn[] = "kvik_cufile_stats_start";
  if (level < 1 || level > 3) return kvik__fail(-EINVAL, "%s(%d): the level is 1, 2 or 3", fn, level);
  int rc;
  const kvik__cufile_api *cf = stats_driver(fn, &rc);
  if (!cf) return rc;
  rc = kvik__cufile_check(cf->cuFileSetStatsLevel(level), fn, "cuFileSetStatsLevel");
  return rc < 0 ? rc : kvik__cufile_check(cf->cuFileStatsStart(), fn, "cuFileStatsStart");
}

int kvik_cufile_stats_stop(void) {
  static const char fn[] = "kvik_cufile_stats_stop";
  int rc;
  const kvik__cufile_api *cf = stats_driver(fn, &rc);
  return cf ? kvik__cufile_check(cf->cuFileStatsStop(), fn, "cuFileStatsStop") : rc;
}

int kvik_cufile_stats_reset(void) {
  static const char fn[] = "kvik_cufile_stats_reset";
  int rc;
  const kvik__cufile_api *cf = stats_driver(fn, &rc);
  return cf ? kvik__cufile_check(cf->cuFileStatsReset(), fn, "cuFileStatsReset") : rc;
}

int kvik_cufile_stats_get(kvik_cufile_stats *stats) {
  static const char fn[] = "kvik_cufile_stats_get";
  if (!stats || stats->struct_size < sizeof(size_t))
    return kvik__fail(-EINVAL, "%s: NULL, or struct_size not set", fn);
  int rc;
  const kvik__cufile_api *cf = stats_driver(fn, &rc);
  if (!cf) return rc;
  kvik__cufile_stats1 s;
  memset(&s, 0, sizeof s);
  rc = kvik__cufile_check(cf->cuFileGetStatsL1(&s), fn, "cuFileGetStatsL1");
  if (rc < 0) return rc;
  kvik_cufile_stats out = {
      .struct_size = stats->struct_size,
      .read_ops = s.read_ops.ok,
      .read_errors = s.read_ops.err,
      .write_ops = s.write_ops.ok,
      .write_errors = s.write_ops.err,
      .read_bytes = s.read_bytes,
      .write_bytes = s.write_bytes,
      .read_bw_bytes_per_sec = s.read_bw_bytes_per_sec,
      .write_bw_bytes_per_sec = s.write_bw_bytes_per_sec,
      .read_lat_avg_us = s.read_lat_avg_us,
      .write_lat_avg_us = s.write_lat_avg_us,
      .batch_submit_ops = s.batch_submit_ops.ok,
      .batch_complete_ops = s.batch_complete_ops.ok,
      .batch_read_bytes = s.batch_read_bytes,
      .batch_write_bytes = s.batch_write_bytes,
  };
  size_t n = stats->struct_size < sizeof out ? stats->struct_size : sizeof out;
  memcpy(stats, &out, n);
  return 0;
}
