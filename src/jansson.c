/* Loading Jansson (see jansson.h). */
#define _GNU_SOURCE
#include "jansson.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "dl.h"
#include "error.h"
#include "init.h"

typedef enum { NOT_TRIED, LOADED, FAILED } load_state;

/* The lock is held while loading only; LOADED is published after `api` is complete, and `api`
 * never changes after. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic load_state state = NOT_TRIED;
static kvik__jansson_api api;
static char why_unavailable[KVIK_MESSAGE_MAX];

/* Every function, or the reason one is missing (jansson_version_str came with 2.13). */
static int resolve(void *handle) {
#define KVIK__JANSSON_RESOLVE_(member, symbol, ret, params)                                        \
  *(void **)&api.member = dlsym(handle, symbol);                                                   \
  if (!api.member) {                                                                               \
    snprintf(why_unavailable, sizeof why_unavailable,                                              \
             KVIK__JANSSON_SONAME " lacks %s: Jansson older than 2.13", symbol);                   \
    return -1;                                                                                     \
  }
  KVIK__JANSSON_FUNCTIONS(KVIK__JANSSON_RESOLVE_)
#undef KVIK__JANSSON_RESOLVE_
  return 0;
}

/* Called with the lock held, in state NOT_TRIED; leaves LOADED or FAILED. The handle stays open
 * for the life of the process. */
static void load_locked(void) {
  state = FAILED;
  void *handle = kvik__dl_open(KVIK__JANSSON_SONAME, why_unavailable, sizeof why_unavailable);
  if (!handle || resolve(handle) < 0) return;
  kvik__dl_path(handle, KVIK__JANSSON_SONAME, api.path, sizeof api.path);
  atomic_store(&state, LOADED);
}

const kvik__jansson_api *kvik__jansson_load(char *why, size_t len) {
  if (atomic_load(&state) == LOADED) return &api;
  pthread_mutex_lock(&lock);
  if (state == NOT_TRIED) load_locked();
  load_state s = state;
  if (s != LOADED && why && len) snprintf(why, len, "%s", why_unavailable);
  pthread_mutex_unlock(&lock);
  return s == LOADED ? &api : NULL;
}

/* ---- fork ------------------------------------------------------------------------------- */

static void fork_prepare(void) { pthread_mutex_lock(&lock); }
static void fork_parent(void) { pthread_mutex_unlock(&lock); }
static void fork_child(void) { pthread_mutex_init(&lock, NULL); }

KVIK__ON_LOAD(install_fork_handlers) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_JANSSON, &handlers);
}
