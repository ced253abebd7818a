/* Whole files mapped and registered read-only, granule by granule, for copies straight from the
 * page cache; the registrations live as long as the file's handle. */
#define _GNU_SOURCE
#include "zero_copy.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "memory.h"
#include "settings.h"
#include "sys.h"

#define CUDA_ERROR_NOT_SUPPORTED 801
#define CU_MEMHOSTREGISTER_READ_ONLY 8

/* Set once the driver said it cannot register read-only memory: no use asking again, until the
 * setting is set again. */
static _Atomic int unsupported;

/* Held by the one thread of the process that registers (see zero_copy.h). */
static atomic_flag registering = ATOMIC_FLAG_INIT;

void kvik__zc_retry(void) { atomic_store(&unsupported, 0); }

void kvik__zc_init(kvik__zc_file *zc, int fd) {
  memset(zc, 0, sizeof *zc);
  pthread_mutex_init(&zc->lock, NULL);
  zc->fd = fd;
}

static int identity_of(int fd, kvik__zc_identity *id) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  *id = (kvik__zc_identity){st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
  return 1;
}

static int same_time(struct timespec a, struct timespec b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; }

static int unchanged(const kvik__zc_identity *a, const kvik__zc_identity *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size && same_time(a->mtime, b->mtime) &&
         same_time(a->ctime, b->ctime);
}

static size_t granule_len(const kvik__zc_file *zc, size_t g) {
  size_t start = g * KVIK__ZC_GRANULE;
  return zc->map_len - start < KVIK__ZC_GRANULE ? zc->map_len - start : KVIK__ZC_GRANULE;
}

/* Undo the registrations (unless their context, and they with it, are gone) and the mapping. A
 * forked child has neither (the driver keeps registered pages out of children), and may have
 * something else at the mapping's address: it only forgets them. */
static void drop(kvik__zc_file *zc) {
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  int ours = zc->pid == getpid();
  if (ours && cu && zc->ctx && kvik__context_id(zc->ctx) == zc->ctx_id &&
      cu->cuCtxPushCurrent(zc->ctx) == CUDA_SUCCESS) {
    for (size_t g = 0; g < zc->granules; g++)
      if (zc->registered[g]) cu->cuMemHostUnregister(zc->map + g * KVIK__ZC_GRANULE);
    CUcontext popped;
    cu->cuCtxPopCurrent(&popped);
  }
  if (ours && zc->map) munmap(zc->map, zc->map_len);
  free(zc->registered);
  zc->map = NULL;
  zc->map_len = zc->granules = 0;
  zc->registered = NULL;
  zc->ctx = NULL;
}

void kvik__zc_close(kvik__zc_file *zc) {
  drop(zc);
  pthread_mutex_destroy(&zc->lock);
}

static int map_file(kvik__zc_file *zc, const kvik__zc_identity *now) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t len = ((size_t)now->size + page - 1) / page * page;
  size_t granules = (len + KVIK__ZC_GRANULE - 1) / KVIK__ZC_GRANULE;
  unsigned char *registered = kvik__calloc(granules, 1);
  void *map = registered ? kvik__mmap(len, PROT_READ, MAP_SHARED, zc->fd, 0) : MAP_FAILED;
  if (map == MAP_FAILED) {
    free(registered);
    return 0;
  }
  zc->seen = *now;
  zc->pid = getpid();
  zc->map = map;
  zc->map_len = len;
  zc->registered = registered;
  zc->granules = granules;
  return 1;
}

/* Whether the state can serve a read of the file as it is `now`: mapped, and still the file
 * that was mapped, in a context that still exists. Called with the lock held. */
static int usable(kvik__zc_file *zc, const kvik__zc_identity *now) {
  if (zc->map && zc->pid != getpid()) return 0;
  int stale = zc->map && (!unchanged(&zc->seen, now) || (zc->ctx && kvik__context_id(zc->ctx) != zc->ctx_id));
  if (stale && zc->readers > 0) return 0;
  if (stale) drop(zc);
  return zc->map || map_file(zc, now);
}

static int resident(const char *start, size_t len) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  unsigned char vec[4096];
  for (size_t pos = 0; pos < len; pos += sizeof vec * page) {
    size_t n = len - pos < sizeof vec * page ? len - pos : sizeof vec * page;
    if (mincore((void *)(start + pos), n, vec) != 0) return 0;
    for (size_t i = 0; i < (n + page - 1) / page; i++)
      if (!(vec[i] & 1)) return 0;
  }
  return 1;
}

static int register_read_only(char *start, size_t len) {
  CUresult result = kvik__cuda_if_present()->cuMemHostRegister(
      start, len, CU_MEMHOSTREGISTER_READ_ONLY | CU_MEMHOSTREGISTER_PORTABLE);
  if (result == CUDA_ERROR_NOT_SUPPORTED) atomic_store(&unsupported, 1);
  return result == CUDA_SUCCESS;
}

static size_t missing_bytes(const kvik__zc_file *zc, size_t g0, size_t g1) {
  size_t bytes = 0;
  for (size_t g = g0; g <= g1; g++)
    if (!zc->registered[g]) bytes += granule_len(zc, g);
  return bytes;
}

/* Register granules g0..g1 that are not yet, outside the lock, so that reads of registered
 * granules go on meanwhile; the reader count keeps the state from being dropped. Returns
 * whether all are registered; called and returns with the lock held. */
static int register_granules(kvik__zc_file *zc, CUcontext ctx, int64_t mode, size_t g0, size_t g1) {
  if ((zc->ctx && zc->ctx != ctx) || atomic_flag_test_and_set(&registering)) return 0;
  zc->readers++;
  pthread_mutex_unlock(&zc->lock);
  /* registered[] only changes under both the lock and `registering`, so this thread may read it. */
  size_t g = g0;
  for (; g <= g1; g++) {
    char *start = zc->map + g * KVIK__ZC_GRANULE;
    if (zc->registered[g]) continue;
    if ((mode == KVIK_AUTO && !resident(start, granule_len(zc, g))) || !register_read_only(start, granule_len(zc, g)))
      break;
  }
  pthread_mutex_lock(&zc->lock);
  for (size_t done = g0; done < g; done++) zc->registered[done] = 1;
  if (g > g0 && !zc->ctx) {
    zc->ctx = ctx;
    zc->ctx_id = kvik__context_id(ctx);
  }
  zc->readers--;
  atomic_flag_clear(&registering);
  return g > g1;
}

int kvik__zc_begin(kvik__zc_file *zc, CUcontext ctx, int64_t offset, size_t size, size_t request_size,
                   const char **host) {
  int64_t mode = kvik__setting(KVIK_SETTING_ZERO_COPY_READ);
  if (!zc || mode == KVIK_OFF || atomic_load(&unsupported) || size == 0) return 0;
  /* Only a range inside the file: a page past its end would fault, and a read that reaches the
   * end needs the bounce path's short count anyway. */
  kvik__zc_identity now;
  if (!identity_of(zc->fd, &now) || (uint64_t)offset + size > (uint64_t)now.size) return 0;
  pthread_mutex_lock(&zc->lock);
  int ok = usable(zc, &now);
  if (ok) {
    size_t g0 = (size_t)offset / KVIK__ZC_GRANULE, g1 = ((size_t)offset + size - 1) / KVIK__ZC_GRANULE;
    size_t missing = missing_bytes(zc, g0, g1);
    ok = missing == 0 || ((mode == KVIK_ON || request_size >= missing / 2) &&
                          register_granules(zc, ctx, mode, g0, g1));
  }
  if (ok) {
    zc->readers++;
    *host = zc->map + offset;
  }
  pthread_mutex_unlock(&zc->lock);
  return ok;
}

void kvik__zc_done(kvik__zc_file *zc) {
  pthread_mutex_lock(&zc->lock);
  zc->readers--;
  pthread_mutex_unlock(&zc->lock);
}
