/* Loading libcurl (see curl.h), and curl_easy_setopt() with the argument type of each option. */
#define _GNU_SOURCE
#include "curl.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "dl.h"
#include "error.h"
#include "init.h"
#include "settings.h"

typedef enum { NOT_TRIED, LOADED, FAILED } load_state;

/* The lock is held while loading only; LOADED is published after `api` is complete, and `api`
 * never changes after. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic load_state state = NOT_TRIED;
static kvik__curl_api api;
static char why_unavailable[KVIK_MESSAGE_MAX];

/* Every function, or the reason one is missing. */
static int resolve(void *handle, const char *file) {
#define KVIK__CURL_RESOLVE_(member, symbol, ret, params)                                           \
  *(void **)&api.member = dlsym(handle, symbol);                                                   \
  if (!api.member) {                                                                               \
    snprintf(why_unavailable, sizeof why_unavailable, "%.600s lacks %s", file, symbol);            \
    return -1;                                                                                     \
  }
  KVIK__CURL_FUNCTIONS(KVIK__CURL_RESOLVE_)
#undef KVIK__CURL_RESOLVE_
  return 0;
}

/* Called with the lock held, in state NOT_TRIED; leaves LOADED or FAILED. The handle stays open
 * for the life of the process, as libcurl cannot be unloaded once initialised. */
static void load_locked(const char *file) {
  char why[512];
  state = FAILED;
  void *handle = kvik__dl_open(file, why, sizeof why);
  if (!handle) {
    snprintf(why_unavailable, sizeof why_unavailable, "%s", why);
    return;
  }
  if (resolve(handle, file) < 0) return;
  const kvik__curl_version_info *info = api.version_info(0);
  if (!info || info->version_num < KVIK__CURL_MIN_VERSION) {
    snprintf(why_unavailable, sizeof why_unavailable,
             "%.600s is libcurl %s, older than " KVIK__CURL_MIN_VERSION_TEXT, file,
             info && info->version ? info->version : "of an unknown version");
    return;
  }
  kvik__curl_code cc = api.global_init(KVIK__CURL_GLOBAL_DEFAULT);
  if (cc != KVIK__CURLE_OK) {
    snprintf(why_unavailable, sizeof why_unavailable, "%.600s: curl_global_init: %s", file,
             api.easy_strerror(cc));
    return;
  }
  kvik__dl_path(handle, file, api.path, sizeof api.path);
  atomic_store(&state, LOADED);
}

const kvik__curl_api *kvik__curl_load(char *why, size_t len) {
  if (atomic_load(&state) == LOADED) return &api;
  if (kvik__init() < 0) {
    if (why && len) snprintf(why, len, "%s", kvik_last_error());
    return NULL;
  }
  char file[sizeof api.path];
  if (kvik__setting_text(KVIK_SETTING_CURL_LIBRARY, file, sizeof file) == 0)
    snprintf(file, sizeof file, "%s", KVIK__CURL_SONAME);
  pthread_mutex_lock(&lock);
  if (state == NOT_TRIED) load_locked(file);
  load_state s = state;
  if (s != LOADED && why && len) snprintf(why, len, "%s", why_unavailable);
  pthread_mutex_unlock(&lock);
  return s == LOADED ? &api : NULL;
}

/* ---- options ---------------------------------------------------------------------------- */

kvik__curl_code kvik__curl_set_long(kvik__curl *curl, kvik__curl_long_option option, long value) {
  return api.easy_setopt(curl, option, value);
}

kvik__curl_code kvik__curl_set_text(kvik__curl *curl, kvik__curl_text_option option,
                                    const char *text) {
  return api.easy_setopt(curl, option, text);
}

kvik__curl_code kvik__curl_set_data(kvik__curl *curl, kvik__curl_data_option option, void *data) {
  return api.easy_setopt(curl, option, data);
}

kvik__curl_code kvik__curl_set_list(kvik__curl *curl, kvik__curl_list_option option,
                                    struct kvik__curl_slist *list) {
  return api.easy_setopt(curl, option, list);
}

kvik__curl_code kvik__curl_set_write(kvik__curl *curl, int header, kvik__curl_write_callback *fn) {
  return api.easy_setopt(curl, header ? KVIK__CURLOPT_HEADERFUNCTION : KVIK__CURLOPT_WRITEFUNCTION,
                         fn);
}

kvik__curl_code kvik__curl_set_xferinfo(kvik__curl *curl, kvik__curl_xferinfo_callback *fn) {
  return api.easy_setopt(curl, KVIK__CURLOPT_XFERINFOFUNCTION, fn);
}

kvik__curl_code kvik__curl_set_debug(kvik__curl *curl, kvik__curl_debug_callback *fn) {
  return api.easy_setopt(curl, KVIK__CURLOPT_DEBUGFUNCTION, fn);
}

kvik__curl_code kvik__curl_response_code(kvik__curl *curl, long *status) {
  return api.easy_getinfo(curl, KVIK__CURLINFO_RESPONSE_CODE, status);
}

/* ---- fork ------------------------------------------------------------------------------- */

static void fork_prepare(void) { pthread_mutex_lock(&lock); }
static void fork_parent(void) { pthread_mutex_unlock(&lock); }
static void fork_child(void) { pthread_mutex_init(&lock, NULL); }

KVIK__ON_LOAD(install_fork_handlers) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_CURL, &handlers);
}
