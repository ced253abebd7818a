/* The machinery the fakes share (fake_cuda.c, fake_cufile.c, fake_nvcomp.c): call counting and
 * failure injection by exported symbol name, settings from the environment, fatal messages, the
 * CUDA driver once loaded, and small helpers.
 *
 * fake_common.c is compiled into each fake, and each fake keeps its own fake_api, so no two
 * share counters or armed failures. Everything declared here is hidden: with several fakes loaded
 * in one process, an exported name would bind them to one copy of it. */
#ifndef KVIK_TESTS_FAKE_COMMON_H
#define KVIK_TESTS_FAKE_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

/* For a fake's list of the functions it exports, X(member, exported symbol, return type,
 * parameters) as src/cuda.h and src/cufile.h write theirs: declare each under its symbol, so that
 * a definition that strays from kvik's signature does not compile; number them (FN_member) and
 * name them (the fake_api's symbols). */
#define FAKE_DECLARE(member, symbol, ret, params) ret member params __asm__(symbol);
#define FAKE_FN_ID(member, symbol, ret, params) FN_##member,
#define FAKE_FN_SYMBOL(member, symbol, ret, params) symbol,

#pragma GCC visibility push(hidden)

/* How the fake names itself in its messages ("fake_cuda", "fake_cufile"); each fake defines it. */
extern const char fake_name[];

#define FAKE_MAX_FUNCTIONS 128 /* fake_nvcomp exports 74 */
#define FAKE_MAX_ARMED 64

typedef struct fake_armed {
  int fn;
  int every;     /* armed with nth 0: every call fails until fake_api_reset() */
  int countdown; /* otherwise: calls still to come before the one that fails, that one included */
  int code;
} fake_armed;

/* The functions a fake exports, by index (the fake's own enum), each with a call counter and the
 * failures armed for it. */
typedef struct fake_api {
  const char *const *symbols; /* the exported names, by index */
  int count;
  atomic_long calls[FAKE_MAX_FUNCTIONS];
  pthread_mutex_t lock; /* guards armed and narmed */
  fake_armed armed[FAKE_MAX_ARMED];
  int narmed;
  atomic_int any_armed; /* lets the common case skip the lock */
} fake_api;

#define FAKE_API_INIT(symbols_, count_)                                                          \
  {.symbols = (symbols_), .count = (count_), .lock = PTHREAD_MUTEX_INITIALIZER}

/* The index of `name` in names[0..count), or -1 (also for NULL). */
int fake_name_index(const char *const *names, int count, const char *name);

/* Count a call of function fn and return the code of a failure armed for this call, or 0. A
 * one-shot failure is spent; when several fire at once, the first armed wins. */
int fake_api_call(fake_api *api, int fn);

/* Arm a failure of fn with `code`: of its nth next call (1 = the very next), or of every call
 * while nth is 0. Checking nth and code is the fake's business; more than FAKE_MAX_ARMED at once
 * is a bug in the test and dies. */
void fake_api_arm(fake_api *api, int fn, int nth, int code);

/* Calls of the function exported as `symbol`, or -1 if there is none. */
long fake_api_calls(const fake_api *api, const char *symbol);

/* Disarm every failure and zero the call counters. */
void fake_api_reset(fake_api *api);

/* A bug of the caller (kvik or a test): print "<fake_name>: <message>" and abort, so that no test
 * passes over it. */
__attribute__((format(printf, 1, 2), noreturn)) void fake_die(const char *format, ...);

/* A non-negative integer from the environment, or `fallback` when unset. A malformed value is a
 * broken test setup, which must not pass as the default: it dies. */
long fake_env_long(const char *name, long fallback, long max);

void fake_sleep_us(long us);

size_t fake_round_up(size_t n, size_t to);

/* A growable array of pointers, in no particular order. */
typedef struct fake_list {
  void **items;
  size_t n, cap;
} fake_list;

/* 0, or -1 out of memory. */
int fake_list_add(fake_list *l, void *item);

/* The index of item, or -1. */
long fake_list_find(const fake_list *l, const void *item);

/* Removes the item at i, moving the last one there. */
void fake_list_remove_at(fake_list *l, size_t i);

/* Removes item; 1 if it was there, else 0. */
int fake_list_remove(fake_list *l, const void *item);

/* A library a fake uses only once the process itself loaded it (the fake never loads it: a
 * process without CUDA stays one), resolved once. */
typedef struct fake_loaded {
  atomic_int ready;
  pthread_mutex_t lock;
} fake_loaded;
#define FAKE_LOADED_INIT {0, PTHREAD_MUTEX_INITIALIZER}

/* 1 once `soname` is loaded and `resolve` took what it needs from it (now or before); else 0. */
int fake_once_loaded(fake_loaded *once, const char *soname, int (*resolve)(void *lib));

#pragma GCC visibility pop

#endif
