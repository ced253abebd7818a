/* The machinery both fakes share: fake_common.h says what; each fake has its own copy. */
#include "fake_common.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int fake_name_index(const char *const *names, int count, const char *name) {
  for (int i = 0; name && i < count; i++)
    if (strcmp(names[i], name) == 0) return i;
  return -1;
}

int fake_api_call(fake_api *api, int fn) {
  atomic_fetch_add(&api->calls[fn], 1);
  if (!atomic_load(&api->any_armed)) return 0;
  int code = 0;
  pthread_mutex_lock(&api->lock);
  for (int i = 0; i < api->narmed;) {
    fake_armed *a = &api->armed[i];
    int fires = a->fn == fn && (a->every || --a->countdown == 0);
    if (fires && !code) code = a->code;
    if (fires && !a->every) *a = api->armed[--api->narmed];
    else i++;
  }
  atomic_store(&api->any_armed, api->narmed > 0);
  pthread_mutex_unlock(&api->lock);
  return code;
}

void fake_api_arm(fake_api *api, int fn, int nth, int code) {
  pthread_mutex_lock(&api->lock);
  if (api->narmed == FAKE_MAX_ARMED)
    fake_die("more than %d failures armed at once", FAKE_MAX_ARMED);
  api->armed[api->narmed++] = (fake_armed){fn, nth == 0, nth, code};
  atomic_store(&api->any_armed, 1);
  pthread_mutex_unlock(&api->lock);
}

long fake_api_calls(const fake_api *api, const char *symbol) {
  int fn = fake_name_index(api->symbols, api->count, symbol);
  return fn < 0 ? -1 : atomic_load(&api->calls[fn]);
}

void fake_api_reset(fake_api *api) {
  pthread_mutex_lock(&api->lock);
  api->narmed = 0;
  atomic_store(&api->any_armed, 0);
  pthread_mutex_unlock(&api->lock);
  for (int i = 0; i < api->count; i++) atomic_store(&api->calls[i], 0);
}

void fake_die(const char *format, ...) {
  va_list args;
  va_start(args, format);
  fprintf(stderr, "%s: ", fake_name);
  vfprintf(stderr, format, args);
  fputc('\n', stderr);
  va_end(args);
  abort();
}

long fake_env_long(const char *name, long fallback, long max) {
  const char *text = getenv(name);
  if (!text || !*text) return fallback;
  char *end;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno || *end || value < 0 || value > max)
    fake_die("%s='%s' is not a number in [0, %ld]", name, text, max);
  return value;
}

void fake_sleep_us(long us) {
  struct timespec t = {us / 1000000, us % 1000000 * 1000};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

size_t fake_round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

int fake_list_add(fake_list *l, void *item) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16;
    void **grown = realloc(l->items, cap * sizeof *grown);
    if (!grown) return -1;
    l->items = grown;
    l->cap = cap;
  }
  l->items[l->n++] = item;
  return 0;
}

long fake_list_find(const fake_list *l, const void *item) {
  for (size_t i = 0; i < l->n; i++)
    if (l->items[i] == item) return (long)i;
  return -1;
}

void fake_list_remove_at(fake_list *l, size_t i) { l->items[i] = l->items[--l->n]; }

int fake_list_remove(fake_list *l, const void *item) {
  long i = fake_list_find(l, item);
  if (i >= 0) fake_list_remove_at(l, (size_t)i);
  return i >= 0;
}

int fake_once_loaded(fake_loaded *once, const char *soname, int (*resolve)(void *lib)) {
  if (atomic_load(&once->ready)) return 1;
  pthread_mutex_lock(&once->lock);
  if (!atomic_load(&once->ready)) {
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (lib && resolve(lib)) atomic_store(&once->ready, 1);
    else if (lib) dlclose(lib);
  }
  pthread_mutex_unlock(&once->lock);
  return atomic_load(&once->ready);
}
