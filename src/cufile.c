/* Loading cuFile, opening and closing its driver (the exit gate), and mending it after fork().
 * The public controls of the driver are cufile_driver.c's. */
#define _GNU_SOURCE
#include "cufile.h"

#include <dlfcn.h>
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
#define KVIK__CUFILE_REQUIRED_(member, symbol, ret, params)                                        \
  *(void **)&api.member = dlsym(handle, symbol);                                                   \
  if (!api.member) {                                                                               \
    snprintf(why_unavailable, sizeof why_unavailable, CUFILE_SONAME " lacks %s (cuFile too old?)", \
             symbol);                                                                              \
    return -1;                                                                                     \
  }
  KVIK__CUFILE_FUNCTIONS(KVIK__CUFILE_REQUIRED_)
#undef KVIK__CUFILE_REQUIRED_
#define KVIK__CUFILE_OPTIONAL_(member, symbol, ret, params)                                        \
  *(void **)&api.member = dlsym(handle, symbol);
  KVIK__CUFILE_OPTIONAL_FUNCTIONS(KVIK__CUFILE_OPTIONAL_)
#undef KVIK__CUFILE_OPTIONAL_
  return 0;
}

/* cuFile's name of a status, or NULL for one it does not define. */
static const char *known_status_name(int status) {
  switch (status) {
#define KVIK__CUFILE_NAME_(name, value, text)                                                      \
  case value: return #name;
    KVIK__CUFILE_STATUSES(KVIK__CUFILE_NAME_)
#undef KVIK__CUFILE_NAME_
  default: return NULL;
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
#define KVIK__CUFILE_TEXT_(name, value, text)                                                      \
  case value: return text;
    KVIK__CUFILE_STATUSES(KVIK__CUFILE_TEXT_)
#undef KVIK__CUFILE_TEXT_
  default: return "unknown cuFile status";
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
    snprintf(why_unavailable, sizeof why_unavailable, "needs the CUDA driver: %s",
             kvik_last_error());
    return FAILED;
  }
  kvik__cufile_error status = api.cuFileDriverOpen();
  if (status.err != KVIK__CUFILE_SUCCESS) {
    snprintf(why_unavailable, sizeof why_unavailable, "cuFileDriverOpen: %s (%d)",
             status_name(status.err), status.err);
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
    *code = kvik__fail(-KVIK__CU_FILE_DRIVER_CLOSING,
                       "%s: the cuFile driver was closed at process exit", fn ? fn : "cuFile");
    return NULL;
  }
  if (!fn) *code = kvik__fail(failure_code, "cuFile unavailable: %s", why_unavailable);
  else *code = kvik__fail(failure_code, "%s: cuFile unavailable: %s", fn, why_unavailable);
  return NULL;
}

const kvik__cufile_api *kvik__cufile_if_open(void) {
  return atomic_load(&state) == OPEN ? &api : NULL;
}

const kvik__cufile_api *kvik__cufile_loaded(const char *fn, int *code) {
  pthread_mutex_lock(&lock);
  wait_settled_locked();
  char why[512] = "";
  if (!library && !(library = kvik__dl_open(CUFILE_SONAME, why, sizeof why))) {
    pthread_mutex_unlock(&lock);
    *code = kvik__fail(KVIK_ECUFILE_UNAVAILABLE, "%s: cuFile unavailable: %s", fn, why);
    return NULL;
  }
  int resolved = state == OPEN || resolve(library) == 0;
  pthread_mutex_unlock(&lock);
  if (!resolved) {
    *code = kvik__fail(KVIK_ECUFILE_UNAVAILABLE, "%s: cuFile unavailable: %s", fn, why_unavailable);
    return NULL;
  }
  return &api;
}

int kvik__cufile_check(kvik__cufile_error status, const char *fn, const char *call) {
  if (status.err == KVIK__CUFILE_SUCCESS) return 0;
  int code = status_code(status);
  return kvik__fail(code, "%s: %s: %s (%s)", fn, call, status_name(status.err),
                    kvik_strerror(code));
}

int kvik__cufile_io_error(ssize_t ret, int saved_errno, const char *fn, const char *call,
                          const char *path) {
  if (ret == -1)
    return kvik__fail_errno(saved_errno ? saved_errno : EIO, "%s(\"%s\"): %s", fn, path, call);
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
  return kvik__fail(-KVIK__CU_FILE_DRIVER_CLOSING,
                    "%s: cuFile driver closed: the process is exiting", fn);
}

void kvik__cufile_leave(void) {
  long before = atomic_fetch_sub(&calls_in_flight, 1);
  assert(before > 0); /* a leave for each enter that returned 0 */
  (void)before;
}

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
