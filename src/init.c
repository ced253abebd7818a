/* One-time initialisation and the fork() handlers of every module that holds locks. */
#define _GNU_SOURCE
#include "init.h"

#include <pthread.h>
#include <stdio.h>

#include "append.h"
#include "bounce.h"
#include "cuda.h"
#include "cufile.h"
#include "error.h"
#include "future.h"
#include "http.h"
#include "pool.h"
#include "registry.h"
#include "settings.h"
#include "stream_io.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int init_result;
static char init_message[KVIK_MESSAGE_MAX];

/* Lock order at fork: appends in progress and remote connections (neither held with another
 * lock), buffer registry (which opens cuFile under its lock), cuFile loader (which loads CUDA
 * under its lock), CUDA loader, bounce buffers, pool, completions; released in reverse. */
static void prepare(void) {
  kvik__append_atfork_prepare();
  kvik__http_atfork_prepare();
  kvik__registry_atfork_prepare();
  kvik__cufile_atfork_prepare();
  kvik__cuda_atfork_prepare();
  kvik__bounce_atfork_prepare();
  kvik__pool_atfork_prepare();
  kvik__future_atfork_prepare();
}

static void parent(void) {
  kvik__future_atfork_parent();
  kvik__pool_atfork_parent();
  kvik__bounce_atfork_parent();
  kvik__cuda_atfork_parent();
  kvik__cufile_atfork_parent();
  kvik__registry_atfork_parent();
  kvik__http_atfork_parent();
  kvik__append_atfork_parent();
}

static void child(void) {
  kvik__future_atfork_child();
  kvik__pool_atfork_child();
  kvik__stream_atfork_child();
  kvik__bounce_atfork_child();
  kvik__cuda_atfork_child();
  kvik__cufile_atfork_child();
  kvik__registry_atfork_child();
  kvik__http_atfork_child();
  kvik__append_atfork_child();
}

static void initialise(void) {
  pthread_atfork(prepare, parent, child);
  init_result = kvik__settings_load_env();
  if (init_result < 0) snprintf(init_message, sizeof init_message, "%s", kvik_last_error());
}

int kvik__init(void) {
  pthread_once(&once, initialise);
  if (init_result < 0) kvik__set_message(init_message);
  return init_result;
}
