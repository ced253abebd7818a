/* A cache of aligned host buffers. */
#define _GNU_SOURCE
#include "bounce.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "error.h"

#define BOUNCE_ALIGNMENT 4096

/* An idle buffer stores its own list link in its first bytes. */
typedef struct idle_buffer {
  struct idle_buffer *next;
  size_t size;
} idle_buffer;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static idle_buffer *idle;  /* guarded by lock */
static size_t idle_bytes;  /* guarded by lock */

void *kvik__bounce_get(size_t size) {
  pthread_mutex_lock(&lock);
  idle_buffer **link = &idle;
  while (*link && (*link)->size != size) link = &(*link)->next;
  idle_buffer *found = *link;
  if (found) {
    *link = found->next;
    idle_bytes -= size;
  }
  pthread_mutex_unlock(&lock);
  if (found) return found;
  void *buf = NULL;
  int err = posix_memalign(&buf, BOUNCE_ALIGNMENT, size);
  if (err) {
    kvik__fail_errno(err, "bounce buffer of %zu bytes", size);
    return NULL;
  }
  return buf;
}

void kvik__bounce_put(void *buf, size_t size) {
  if (!buf) return;
  pthread_mutex_lock(&lock);
  int keep = idle_bytes + size <= KVIK__BOUNCE_CACHE_BYTES;
  if (keep) {
    idle_buffer *b = buf;
    b->next = idle;
    b->size = size;
    idle = b;
    idle_bytes += size;
  }
  pthread_mutex_unlock(&lock);
  if (!keep) free(buf);
}

void kvik__bounce_atfork_prepare(void) { pthread_mutex_lock(&lock); }
void kvik__bounce_atfork_parent(void) { pthread_mutex_unlock(&lock); }
void kvik__bounce_atfork_child(void) { pthread_mutex_init(&lock, NULL); }
