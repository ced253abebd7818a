/* Loading nvCOMP (kvik.h, "Compression") and naming its statuses. */
#define _GNU_SOURCE
#include "nvcomp.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "dl.h"
#include "error.h"
#include "init.h"
#include "settings.h"

typedef enum { NOT_TRIED, LOADED, FAILED } load_state;

/* The lock is held while loading only; LOADED is published after `api` is complete, and `api`
 * never changes after. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic load_state state = NOT_TRIED;
static kvik__nvcomp_api api;
static void *library; /* dlopen handle, kept for the process's life */
static char why_unavailable[KVIK_MESSAGE_MAX];

static const char *const infixes[KVIK_CODEC_COUNT] = {
#define KVIK__NVCOMP_INFIX_(codec, infix, gpu_only) [codec] = infix,
    KVIK__NVCOMP_FORMATS(KVIK__NVCOMP_INFIX_)
#undef KVIK__NVCOMP_INFIX_
};

/* Resolve one format's functions: all of them, or the format is left out. */
static void resolve_format(void *handle, kvik_codec codec) {
  kvik__nvcomp_format_api *f = &api.formats[codec];
  char symbol[128];
  int all = 1;
#define KVIK__NVCOMP_RESOLVE_(member, suffix, decl)                                                \
  snprintf(symbol, sizeof symbol, "nvcompBatched%s%s", infixes[codec], suffix);                    \
  *(void **)&f->member = dlsym(handle, symbol);                                                    \
  all = all && f->member;
  KVIK__NVCOMP_FORMAT_FUNCTIONS(KVIK__NVCOMP_RESOLVE_)
#undef KVIK__NVCOMP_RESOLVE_
  api.present[codec] = (unsigned char)all;
}

/* The library-wide functions and the formats; -1 with the reason where a library-wide one is
 * missing (not nvCOMP 6). */
static int resolve(void *handle, const char *file) {
#define KVIK__NVCOMP_REQUIRED_(member, symbol, ret, params)                                        \
  *(void **)&api.member = dlsym(handle, symbol);                                                   \
  if (!api.member) {                                                                               \
    snprintf(why_unavailable, sizeof why_unavailable, "%.600s lacks %s (not nvCOMP 6?)", file,     \
             symbol);                                                                              \
    return -1;                                                                                     \
  }
  KVIK__NVCOMP_FUNCTIONS(KVIK__NVCOMP_REQUIRED_)
#undef KVIK__NVCOMP_REQUIRED_
  for (int c = 0; c < KVIK_CODEC_COUNT; c++) resolve_format(handle, (kvik_codec)c);
  return 0;
}

/* Called with the lock held, in state NOT_TRIED. `file` is the setting's path or the soname. */
static void load_locked(const char *file) {
  char why[512];
  if (!library && !(library = kvik__dl_open(file, why, sizeof why))) {
    snprintf(why_unavailable, sizeof why_unavailable, "%s", why);
    return;
  }
  if (resolve(library, file) < 0) {
    state = FAILED;
    return;
  }
  kvik__nvcomp_properties props = {0};
  kvik__nvcomp_status status = api.get_properties(&props);
  if (status != KVIK__nvcompSuccess) {
    snprintf(why_unavailable, sizeof why_unavailable,
             "%.600s: nvcompGetProperties failed (status %d)", file, (int)status);
    state = FAILED;
    return;
  }
  if (props.version / 1000 != 6) {
    snprintf(why_unavailable, sizeof why_unavailable, "%.600s is nvCOMP %u.%u, not 6", file,
             props.version / 1000, props.version % 1000 / 100);
    state = FAILED;
    return;
  }
  api.version = props.version;
  kvik__dl_path(library, file, api.path, sizeof api.path);
  atomic_store(&state, LOADED);
}

int kvik__nvcomp(const char *fn, const kvik__nvcomp_api **out) {
  *out = NULL;
  if (atomic_load(&state) == LOADED) return *out = &api, 0;
  int rc = kvik__init();
  if (rc < 0) return rc;
  char file[KVIK__NVCOMP_PATH_MAX];
  if (kvik__setting_text(KVIK_SETTING_NVCOMP_LIBRARY, file, sizeof file) == 0)
    snprintf(file, sizeof file, "%s", KVIK__NVCOMP_SONAME);
  pthread_mutex_lock(&lock);
  if (state == NOT_TRIED) load_locked(file);
  load_state s = state;
  char why[sizeof why_unavailable];
  snprintf(why, sizeof why, "%s", why_unavailable);
  pthread_mutex_unlock(&lock);
  if (s == LOADED) return *out = &api, 0;
  return kvik__fail(KVIK_ENVCOMP_UNAVAILABLE, "%s: nvCOMP unavailable: %s", fn, why);
}

/* ---- statuses --------------------------------------------------------------------------- */

/* n of kvik's nvCOMP range (kvik.h) for a status; 999 for one nvCOMP does not define. */
static int status_n(int status) {
  switch (status) {
#define KVIK__NVCOMP_N_(name, value, text)                                                         \
  case value: return value == 1000 ? 998 : value == 10000 ? 999 : value;
    KVIK__NVCOMP_STATUSES(KVIK__NVCOMP_N_)
#undef KVIK__NVCOMP_N_
  default: return 999;
  }
}

int kvik__nvcomp_code(int status) {
  if (status == KVIK__nvcompSuccess) return 0;
  return KVIK_FOREIGN_CODE_(KVIK_ENVCOMP_BASE, status_n(status));
}

static int n_status(int n) { return n == 998 ? 1000 : n == 999 ? 10000 : n; }

static const char *code_name(int n) {
  switch (n_status(n)) {
#define KVIK__NVCOMP_NAME_(name, value, text)                                                      \
  case value: return #name;
    KVIK__NVCOMP_STATUSES(KVIK__NVCOMP_NAME_)
#undef KVIK__NVCOMP_NAME_
  default: return "UNKNOWN";
  }
}

static const char *code_text(int n) {
  switch (n_status(n)) {
#define KVIK__NVCOMP_TEXT_(name, value, text)                                                      \
  case value: return text;
    KVIK__NVCOMP_STATUSES(KVIK__NVCOMP_TEXT_)
#undef KVIK__NVCOMP_TEXT_
  default: return "unknown nvCOMP status";
  }
}

int kvik__nvcomp_check(kvik__nvcomp_status status, const char *fn, const char *call) {
  if (status == KVIK__nvcompSuccess) return 0;
  int code = kvik__nvcomp_code(status);
  return kvik__fail(code, "%s: %s: %s (%d)", fn, call, code_text(KVIK_NVCOMP_N_(code)),
                    (int)status);
}

/* ---- fork and error names --------------------------------------------------------------- */

static void fork_prepare(void) { pthread_mutex_lock(&lock); }
static void fork_parent(void) { pthread_mutex_unlock(&lock); }
static void fork_child(void) { pthread_mutex_init(&lock, NULL); }

KVIK__ON_LOAD(install_hooks) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_NVCOMP, &handlers);
  kvik__error_register(KVIK_ENVCOMP_BASE, code_name, code_text);
}
