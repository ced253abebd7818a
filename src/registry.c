/* Registration of device buffers and streams with cuFile (kvik_cufile_buffer_register and friends).
 *
 * kvik keeps its own record of registered buffers: it finds the allocation from any pointer
 * inside it, reports double registration and unknown buffers the same way whether cuFile is in
 * use or not, and knows which context to make current when the buffer is deregistered. */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "cufile.h"
#include "error.h"
#include "init.h"
#include "memory.h"
#include "settings.h"
#include "sys.h"

typedef struct record {
  char *base;
  CUcontext ctx;
  int with_cufile; /* registered with cuFile, not only recorded */
  int pending;     /* cuFile's registration is still under way */
} record;

/* Not held while cuFile runs (see cufile.c: fork handlers); a record marked pending reserves the
 * allocation meanwhile. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static record *records; /* guarded by lock */
static size_t count, capacity;

static record *find_locked(const char *base) {
  for (size_t i = 0; i < count; i++)
    if (records[i].base == base) return &records[i];
  return NULL;
}

static int add_locked(record r) {
  if (count == capacity) {
    size_t grown = capacity ? capacity * 2 : 16;
    record *more = kvik__realloc(records, grown * sizeof *more);
    if (!more) return -ENOMEM;
    records = more;
    capacity = grown;
  }
  records[count++] = r;
  return 0;
}

/* The cuFile API if registrations should go to cuFile, NULL if they are only recorded (compat
 * mode ON, or AUTO where cuFile cannot be had); *rc < 0 when OFF and cuFile is missing. */
static const kvik__cufile_api *cufile_for(const char *fn, int *rc) {
  *rc = 0;
  int64_t mode = kvik__setting(KVIK_SETTING_COMPAT_MODE);
  if (mode == KVIK_COMPAT_ON) return NULL;
  int code;
  const kvik__cufile_api *cf = kvik__cufile(fn, &code);
  if (!cf && mode == KVIK_COMPAT_OFF) *rc = code;
  return cf;
}

/* Run a cuFile buffer call with the buffer's context current, past the exit gate. */
static int buffer_call(const char *fn, const kvik__cufile_api *cf, CUcontext ctx, char *base,
                       size_t size, int flags, int registering) {
  int rc = kvik__context_push(fn, ctx);
  if (rc < 0) return rc;
  rc = kvik__cufile_enter(fn);
  if (rc == 0) {
    rc = registering
             ? kvik__cufile_check(cf->cuFileBufRegister(base, size, flags), fn, "cuFileBufRegister")
             : kvik__cufile_check(cf->cuFileBufDeregister(base), fn, "cuFileBufDeregister");
    kvik__cufile_leave();
  }
  kvik__context_pop();
  return rc;
}

/* The allocation `ptr` points into, which must be device memory. */
static int device_allocation(const char *fn, const void *ptr, kvik__memory *mem, char **base,
                             size_t *size) {
  int rc = kvik__memory_classify(fn, ptr, mem);
  if (rc < 0) return rc;
  if (mem->kind != KVIK_MEMORY_DEVICE)
    return kvik__fail(-EINVAL, "%s(%p): not device memory", fn, ptr);
  return kvik__allocation_range(fn, ptr, base, size);
}

static void remove_locked(record *r) { *r = records[--count]; }

int kvik_cufile_buffer_register(const void *ptr, int flags) {
  static const char fn[] = "kvik_cufile_buffer_register";
  if (!ptr) return kvik__fail(-EINVAL, "%s: NULL pointer", fn);
  kvik__memory mem;
  char *base;
  size_t size;
  int rc = kvik__init();
  if (rc == 0) rc = device_allocation(fn, ptr, &mem, &base, &size);
  if (rc < 0) return rc;
  pthread_mutex_lock(&lock);
  if (find_locked(base))
    rc = kvik__fail(-KVIK__CU_FILE_MEMORY_ALREADY_REGISTERED,
                    "%s(%p): the allocation at %p (%zu bytes) is registered already", fn, ptr,
                    (void *)base, size);
  else if (add_locked((record){base, mem.ctx, 0, 1}) < 0)
    rc = kvik__fail(-ENOMEM, "%s(%p): out of memory", fn, ptr);
  pthread_mutex_unlock(&lock);
  if (rc < 0) return rc;
  const kvik__cufile_api *cf = cufile_for(fn, &rc);
  if (rc == 0 && cf) rc = buffer_call(fn, cf, mem.ctx, base, size, flags, 1);
  pthread_mutex_lock(&lock);
  record *r = find_locked(base);
  assert(r && r->pending); /* reserved above: no other call takes or removes a pending record */
  if (rc < 0) {
    remove_locked(r);
  } else {
    r->pending = 0;
    r->with_cufile = cf != NULL;
  }
  pthread_mutex_unlock(&lock);
  return rc;
}

int kvik_cufile_buffer_deregister(const void *ptr) {
  static const char fn[] = "kvik_cufile_buffer_deregister";
  if (!ptr) return kvik__fail(-EINVAL, "%s: NULL pointer", fn);
  kvik__memory mem;
  char *base;
  size_t size;
  int rc = kvik__init();
  if (rc == 0) rc = device_allocation(fn, ptr, &mem, &base, &size);
  if (rc < 0) return rc;
  pthread_mutex_lock(&lock);
  record *r = find_locked(base), taken = {0};
  if (!r || r->pending)
    rc = kvik__fail(-KVIK__CU_FILE_MEMORY_NOT_REGISTERED,
                    "%s(%p): the allocation at %p is not registered", fn, ptr, (void *)base);
  else {
    taken = *r;
    remove_locked(r);
  }
  pthread_mutex_unlock(&lock);
  const kvik__cufile_api *cf = taken.with_cufile ? kvik__cufile_if_open() : NULL;
  if (rc == 0 && cf) rc = buffer_call(fn, cf, taken.ctx, base, size, 0, 0);
  return rc;
}

/* ---- streams --------------------------------------------------------------------------------- */

static int stream_call(const char *fn, void *stream, unsigned flags, int registering) {
  int rc;
  const kvik__cufile_api *cf = cufile_for(fn, &rc);
  if (!cf || !cf->cuFileStreamRegister) return rc;
  rc = kvik__cufile_enter(fn);
  if (rc < 0) return rc;
  rc = registering ? kvik__cufile_check(cf->cuFileStreamRegister((CUstream)stream, flags), fn,
                                        "cuFileStreamRegister")
                   : kvik__cufile_check(cf->cuFileStreamDeregister((CUstream)stream), fn,
                                        "cuFileStreamDeregister");
  kvik__cufile_leave();
  return rc;
}

int kvik_cufile_stream_register(void *stream, unsigned flags) {
  int rc = kvik__init();
  return rc < 0 ? rc : stream_call("kvik_cufile_stream_register", stream, flags, 1);
}

int kvik_cufile_stream_deregister(void *stream) {
  int rc = kvik__init();
  return rc < 0 ? rc : stream_call("kvik_cufile_stream_deregister", stream, 0, 0);
}

/* ---- fork ------------------------------------------------------------------------------------ */

static void fork_prepare(void) { pthread_mutex_lock(&lock); }

static void fork_parent(void) { pthread_mutex_unlock(&lock); }

/* Registrations belong to the parent's cuFile driver, which the child does not have. */
static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  count = 0;
}

KVIK__ON_LOAD(register_fork_handlers) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_REGISTRY, &handlers);
}
