/* Library initialisation, done once on first use rather than at load time, so that merely
 * linking libkvik costs nothing and reads no environment.
 *
 * init.c sits in the lowest layer (docs/architecture.md) and calls no module by name: modules
 * register here, when the library is loaded, what initialisation and fork() must do for them. */
#ifndef KVIK_SRC_INIT_H
#define KVIK_SRC_INIT_H

/* Initialise on first call: install the fork() handlers, then run the registered steps (the
 * settings read the environment). Returns 0, or the code of the first step that failed
 * (KVIK_ECONFIG for an invalid environment value) every time, with this thread's detail message
 * saying why. Public entry points call it; those that take a handle need not, as the handle's
 * open succeeded in it. */
int kvik__init(void);

/* A step of kvik__init(): returns 0, or a negative code with a detail message. Steps run in the
 * order they were registered, so none may depend on another. */
typedef int kvik__init_step(void);
void kvik__init_register(kvik__init_step *step);

/* The modules whose state fork() must mend, in their lock order: a module that may take the
 * lock of one listed before it while holding its own comes after it. prepare handlers run from
 * the last to the first, parent and child handlers from the first to the last. */
typedef enum kvik__fork_slot {
  KVIK__FORK_STATS,       /* the monitors, whose lock futures take as they complete */
  KVIK__FORK_FUTURE,      /* completions */
  KVIK__FORK_POOL,        /* the thread pools */
  KVIK__FORK_STREAM,      /* stream-ordered requests (child only) */
  KVIK__FORK_BOUNCE,      /* bounce buffers */
  KVIK__FORK_CUDA,        /* the CUDA loader */
  KVIK__FORK_CUFILE,      /* the cuFile loader, which loads CUDA under its lock */
  KVIK__FORK_REGISTRY,    /* registered buffers, which open cuFile under their lock */
  KVIK__FORK_HTTP,        /* remote connections (held with no other lock) */
  KVIK__FORK_CURL,        /* the libcurl loader (held with no other lock) */
  KVIK__FORK_APPEND,      /* appends in progress (held with no other lock) */
  KVIK__FORK_NVCOMP,      /* the nvCOMP loader (held with no other lock) */
  KVIK__FORK_DEVICE_POOL, /* kvik's device memory pools (held with no other lock) */
  KVIK__FORK_JANSSON,     /* the Jansson loader (held with no other lock) */
  KVIK__FORK_SLOTS
} kvik__fork_slot;

/* A module's fork() handlers, as pthread_atfork() takes them; any may be NULL. */
typedef struct kvik__fork_handlers {
  void (*prepare)(void);
  void (*parent)(void);
  void (*child)(void);
} kvik__fork_handlers;

/* Fill `slot` with the handlers, which must live as long as the library. */
void kvik__atfork_register(kvik__fork_slot slot, const kvik__fork_handlers *handlers);

/* Define `fn` to run when the library is loaded, before any public call can: the way a module
 * hands a lower layer its hooks (fork handlers, steps of kvik__init, setting watchers, error
 * names) without the lower layer naming it. Such a function only stores pointers: it may not
 * fail, allocate, or read the environment. */
#define KVIK__ON_LOAD(fn) __attribute__((constructor)) static void fn(void)

#endif
