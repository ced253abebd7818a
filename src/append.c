/* Appends in progress, per file: a list of them under one lock, which is held only to look
 * through the list (never while a write runs, and never with another lock). */
#define _GNU_SOURCE
#include "append.h"

#include <pthread.h>
#include <stddef.h>

#include "init.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ended = PTHREAD_COND_INITIALIZER; /* an append left the list */
static kvik__append *in_progress;                       /* guarded by lock */

static int in_progress_locked(const kvik__append_file *file) {
  for (const kvik__append *a = in_progress; a; a = a->next)
    if (a->file.dev == file->dev && a->file.ino == file->ino) return 1;
  return 0;
}

void kvik__append_enter(kvik__append *a, const kvik__append_file *file) {
  a->file = *file;
  pthread_mutex_lock(&lock);
  while (in_progress_locked(file)) pthread_cond_wait(&ended, &lock);
  a->next = in_progress;
  in_progress = a;
  pthread_mutex_unlock(&lock);
}

void kvik__append_leave(kvik__append *a) {
  pthread_mutex_lock(&lock);
  kvik__append **link = &in_progress;
  while (*link != a) link = &(*link)->next;
  *link = a->next;
  /* Waiters for other files wake too, and wait again: appends that overlap in time are few. */
  pthread_cond_broadcast(&ended);
  pthread_mutex_unlock(&lock);
}

static void fork_prepare(void) { pthread_mutex_lock(&lock); }

static void fork_parent(void) { pthread_mutex_unlock(&lock); }

/* The appends in progress belong to threads that do not exist in the child. */
static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  pthread_cond_init(&ended, NULL);
  in_progress = NULL;
}

KVIK__ON_LOAD(register_fork_handlers) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_APPEND, &handlers);
}
