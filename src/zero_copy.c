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

#include "init.h"
#include "memory.h"
#include "page_cache.h"
#include "settings.h"
#include "sys.h"

#define CUDA_ERROR_NOT_SUPPORTED 801

/* Set once the driver said it cannot register read-only memory: no use asking again, until the
 * setting is set again. */
static _Atomic int unsupported;

/* Held by the one thread of the process that registers (see zero_copy.h). */
static atomic_flag registering = ATOMIC_FLAG_INIT;

/* The cost model's rates, in MB/s (bytes per microsecond): the best measured so far in the
 * process, so that a pread from storage or a registration that waited for a kernel does not lower
 * them; 0 before the first, when the priors stand in, measured on an H100 host: one thread's
 * pread from the page cache into pinned memory, and registration. */
#define PRIOR_PREAD_MBPS 6000
#define PRIOR_REGISTER_MBPS 22000
static _Atomic uint64_t pread_mbps, register_mbps;

static void raise_rate(_Atomic uint64_t *best, size_t bytes, uint64_t ns) {
  if (ns == 0) return;
  uint64_t rate = (uint64_t)bytes * 1000 / ns;
  uint64_t seen = atomic_load_explicit(best, memory_order_relaxed);
  while (rate > seen && !atomic_compare_exchange_weak_explicit(
                            best, &seen, rate, memory_order_relaxed, memory_order_relaxed)) {
  }
}

static uint64_t rate_or(_Atomic uint64_t *best, uint64_t prior) {
  uint64_t rate = atomic_load_explicit(best, memory_order_relaxed);
  return rate ? rate : prior;
}

void kvik__zc_note_pread(size_t bytes, uint64_t ns) { raise_rate(&pread_mbps, bytes, ns); }

void kvik__zc_note_registration(size_t bytes, uint64_t ns) {
  raise_rate(&register_mbps, bytes, ns);
}

/* On T threads the bounce buffers move about T preads' worth, T * p. A first zero-copy read moves
 * what its first thread registers, R (it queues a granule's copy, then registers the next while
 * that copy runs), and what its other threads add through the bounce buffers from the far end.
 * That share depends on how long the driver holds their copies back while it registers, and
 * varies between hosts: on two H100 hosts a first read of 8 GiB on 4 threads ran at 40 and at 20
 * GB/s, where the bounce buffers gave 25.8 and 21. So the model counts the registration alone, and
 * registers while T * p < R: on 1 to 2 threads there (p 7.7-8.8 GB/s measured, R 22), where the
 * first read ran at 10.6-28 GB/s against 5.9 through the bounce buffers on one thread, and at
 * 14-36 against 11-14 on two (bench_zero_copy_first). */
int kvik__zc_pays(size_t tasks) {
  uint64_t p = rate_or(&pread_mbps, PRIOR_PREAD_MBPS);
  uint64_t r = rate_or(&register_mbps, PRIOR_REGISTER_MBPS);
  return (uint64_t)tasks * p < r;
}

/* A granule that a handle reads again is taken to be read more: a loop over a dataset, a
 * benchmark, weights loaded again. Registering it costs the one thread that registers no more
 * than reading it through the bounce buffers would where registering pays on one thread, and makes
 * every later read of it a DMA copy at next to no CPU, against 0.15-0.2 CPU s/GB and the host's
 * memory bandwidth for each read through the bounce buffers. The read that registers pays for it:
 * its other threads take the far end through the bounce buffers meanwhile. */
static int register_again(const kvik__zc_file *zc, size_t g) {
  return g < zc->counted && zc->reads[g] >= 2 && kvik__zc_pays(1);
}

/* The setting was set again: try the driver once more even if it refused read-only
 * registration before. */
static int retry(int64_t mode) {
  (void)mode;
  atomic_store(&unsupported, 0);
  return 0;
}

KVIK__ON_LOAD(watch_setting) { kvik__setting_watch(KVIK_SETTING_ZERO_COPY_READ, retry); }

void kvik__zc_init(kvik__zc_file *zc, int fd) {
  memset(zc, 0, sizeof *zc);
  pthread_mutex_init(&zc->lock, NULL);
  pthread_cond_init(&zc->settled, NULL);
  zc->fd = fd;
}

static int identity_of(int fd, kvik__zc_identity *id) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  *id = (kvik__zc_identity){st.st_dev, st.st_ino, st.st_size, st.st_mtim, st.st_ctim};
  return 1;
}

static int same_time(struct timespec a, struct timespec b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static int unchanged(const kvik__zc_identity *a, const kvik__zc_identity *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
         same_time(a->mtime, b->mtime) && same_time(a->ctime, b->ctime);
}

static size_t granule_len(const kvik__zc_file *zc, size_t g) {
  size_t start = g * KVIK__ZC_GRANULE;
  return zc->map_len - start < KVIK__ZC_GRANULE ? zc->map_len - start : KVIK__ZC_GRANULE;
}

/* Whether the context granule g was registered in still exists. */
static int owner_alive(const kvik__zc_file *zc, size_t g) {
  return kvik__context_id(zc->owner[g].ctx) == zc->owner[g].id;
}

/* Undo granule g's registration in its context, unless that context, and the registration with
 * it, is gone. */
static void unregister_granule(const kvik__cuda_api *cu, kvik__zc_file *zc, size_t g) {
  if (!owner_alive(zc, g) || cu->cuCtxPushCurrent(zc->owner[g].ctx) != CUDA_SUCCESS) return;
  cu->cuMemHostUnregister(zc->map + g * KVIK__ZC_GRANULE);
  CUcontext popped;
  cu->cuCtxPopCurrent(&popped);
}

/* Undo the registrations and the mapping. A forked child has neither (the driver keeps
 * registered pages out of children), and may have something else at the mapping's address: it
 * only forgets them. */
static void drop(kvik__zc_file *zc) {
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  int ours = zc->pid == getpid();
  for (size_t g = 0; ours && cu && g < zc->granules; g++)
    if (zc->state[g] == KVIK__ZC_REGISTERED) unregister_granule(cu, zc, g);
  if (ours && zc->map) munmap(zc->map, zc->map_len);
  free(zc->state);
  free(zc->owner);
  zc->map = NULL;
  zc->map_len = zc->granules = 0;
  zc->state = NULL;
  zc->owner = NULL;
}

void kvik__zc_close(kvik__zc_file *zc) {
  drop(zc);
  free(zc->reads);
  pthread_cond_destroy(&zc->settled);
  pthread_mutex_destroy(&zc->lock);
}

static int map_file(kvik__zc_file *zc, const kvik__zc_identity *now) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t len = ((size_t)now->size + page - 1) / page * page;
  size_t granules = (len + KVIK__ZC_GRANULE - 1) / KVIK__ZC_GRANULE;
  unsigned char *state = kvik__calloc(granules, 1); /* all KVIK__ZC_NONE */
  kvik__zc_owner *owner = state ? kvik__calloc(granules, sizeof *owner) : NULL;
  void *map = owner ? kvik__mmap(len, PROT_READ, MAP_SHARED, zc->fd, 0) : MAP_FAILED;
  if (map == MAP_FAILED) {
    free(state);
    free(owner);
    return 0;
  }
  zc->owner = owner;
  zc->seen = *now;
  zc->pid = getpid();
  zc->map = map;
  zc->map_len = len;
  zc->state = state;
  zc->granules = granules;
  return 1;
}

/* Whether a registration went with its context. */
static int lost_registration(const kvik__zc_file *zc) {
  for (size_t g = 0; g < zc->granules; g++)
    if (zc->state[g] == KVIK__ZC_REGISTERED && !owner_alive(zc, g)) return 1;
  return 0;
}

/* Whether the state can serve a read of the file as it is `now`: mapped, and still the file
 * that was mapped, with every registration's context still there. Called with the lock held. */
static int usable(kvik__zc_file *zc, const kvik__zc_identity *now) {
  if (zc->map && zc->pid != getpid()) return 0;
  int stale = zc->map && (!unchanged(&zc->seen, now) || lost_registration(zc));
  if (stale && zc->readers > 0) return 0;
  if (stale) drop(zc);
  return zc->map || map_file(zc, now);
}

/* Whether all of granule g is in the page cache. */
static int resident(const kvik__zc_file *zc, size_t g) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), len = granule_len(zc, g);
  return kvik__page_cache_pages(zc->fd, zc->map + g * KVIK__ZC_GRANULE,
                                (int64_t)(g * KVIK__ZC_GRANULE),
                                len) == (int64_t)((len + page - 1) / page);
}

static int register_read_only(char *start, size_t len) {
  uint64_t start_ns = kvik__now_ns();
  CUresult result = kvik__cuda_if_present()->cuMemHostRegister(
      start, len, CU_MEMHOSTREGISTER_READ_ONLY | CU_MEMHOSTREGISTER_PORTABLE);
  if (result == CUDA_ERROR_NOT_SUPPORTED) atomic_store(&unsupported, 1);
  if (result == CUDA_SUCCESS) kvik__zc_note_registration(len, kvik__now_ns() - start_ns);
  return result == CUDA_SUCCESS;
}

/* Whether the read may register granule g: KVIK_AUTO registers only for requests that read at
 * least half of what they register, where the cost model says it pays. Called with the lock
 * held. */
static int may_register(const kvik__zc_read *zc, int64_t mode, size_t g) {
  const kvik__zc_file *f = zc->file;
  return !atomic_load(&unsupported) &&
         (mode == KVIK_ON || (mode == KVIK_AUTO && zc->request_size >= granule_len(f, g) / 2 &&
                              (kvik__zc_pays(zc->tasks) || register_again(f, g))));
}

/* Register granule g, outside the lock so that copies from registered granules go on meanwhile;
 * the caller is a reader, so the state is not dropped under it. Returns whether g is registered;
 * called and returns with the lock held. */
static int register_granule(kvik__zc_file *zc, CUcontext ctx, int64_t mode, size_t g) {
  if (atomic_flag_test_and_set(&registering)) return 0;
  zc->state[g] = KVIK__ZC_PENDING;
  zc->registering = 1;
  pthread_mutex_unlock(&zc->lock);
  char *start = zc->map + g * KVIK__ZC_GRANULE;
  size_t len = granule_len(zc, g);
  int ok = (mode != KVIK_AUTO || resident(zc, g)) && register_read_only(start, len);
  pthread_mutex_lock(&zc->lock);
  zc->state[g] = ok ? KVIK__ZC_REGISTERED : KVIK__ZC_NONE;
  if (ok) zc->owner[g] = (kvik__zc_owner){ctx, kvik__context_id(ctx)};
  zc->registering = 0;
  atomic_flag_clear(&registering);
  pthread_cond_broadcast(&zc->settled);
  return ok;
}

/* Make `reads` cover the first `granules` granules; 0 where memory ran out. */
static int cover(kvik__zc_file *zc, size_t granules) {
  if (granules <= zc->counted) return 1;
  unsigned char *reads = kvik__realloc(zc->reads, granules);
  if (!reads) return 0;
  memset(reads + zc->counted, 0, granules - zc->counted);
  zc->reads = reads;
  zc->counted = granules;
  return 1;
}

/* Whether any granule of the mapping is registered. Called with the lock held. */
static int any_registered(const kvik__zc_file *zc) {
  return zc->map && zc->pid == getpid() &&
         memchr(zc->state, KVIK__ZC_REGISTERED, zc->granules) != NULL;
}

int kvik__zc_count_read(kvik__zc_file *zc, int64_t offset, size_t size) {
  if (!zc) return 0;
  /* Only a range inside the file, as kvik__zc_begin() maps: the counts then take a byte per
   * granule of the file, whatever offset a read asks for. */
  kvik__zc_identity now;
  int inside = size >= KVIK__ZC_GRANULE / 2 && identity_of(zc->fd, &now) &&
               (uint64_t)offset + size <= (uint64_t)now.size;
  size_t end = inside ? ((size_t)offset + size - 1) / KVIK__ZC_GRANULE + 1 : 0;
  pthread_mutex_lock(&zc->lock);
  int again = 0;
  if (inside && cover(zc, end)) {
    for (size_t g = (size_t)offset / KVIK__ZC_GRANULE; g < end; g++) {
      if (zc->reads[g] < 2) zc->reads[g]++;
      again |= zc->reads[g] >= 2;
    }
  }
  int worth = any_registered(zc) || (again && kvik__zc_pays(1));
  pthread_mutex_unlock(&zc->lock);
  return worth;
}

int kvik__zc_wanted(const kvik__zc_file *zc, size_t size) {
  return zc && kvik__setting(KVIK_SETTING_ZERO_COPY_READ) != KVIK_OFF &&
         !atomic_load(&unsupported) && size >= KVIK__ZC_MIN_COPY;
}

int kvik__zc_begin(const kvik__zc_read *zc, int64_t offset, size_t size, const char **host) {
  kvik__zc_file *f = zc->file;
  if (!kvik__zc_wanted(f, size)) return 0;
  /* Only a range inside the file: a page past its end would fault, and a read that reaches the
   * end needs the bounce path's short count anyway. */
  kvik__zc_identity now;
  if (!identity_of(f->fd, &now) || (uint64_t)offset + size > (uint64_t)now.size) return 0;
  pthread_mutex_lock(&f->lock);
  int ok = usable(f, &now);
  if (ok) {
    f->readers++;
    *host = f->map + offset;
  }
  pthread_mutex_unlock(&f->lock);
  return ok;
}

size_t kvik__zc_ready(const kvik__zc_read *zc, CUcontext ctx, int64_t offset, size_t size) {
  int64_t mode = kvik__setting(KVIK_SETTING_ZERO_COPY_READ);
  kvik__zc_file *f = zc->file;
  size_t g = (size_t)offset / KVIK__ZC_GRANULE;
  size_t to_boundary = KVIK__ZC_GRANULE - (size_t)offset % KVIK__ZC_GRANULE;
  size_t piece = size < to_boundary ? size : to_boundary;
  if (piece < KVIK__ZC_MIN_COPY) return 0;
  pthread_mutex_lock(&f->lock);
  int may = may_register(zc, mode, g);
  /* Another granule of this file registering will be done soon, and then this one can be:
   * waiting costs no CPU, where the bounce buffers would cost a core per few GB/s and slow the
   * registration down. */
  int saw_pending = 0;
  while (f->state[g] == KVIK__ZC_PENDING ||
         (may && f->state[g] == KVIK__ZC_NONE && f->registering)) {
    saw_pending |= f->state[g] == KVIK__ZC_PENDING;
    pthread_cond_wait(&f->settled, &f->lock);
  }
  /* A granule its registering thread gave up on is not tried again by the threads that waited. */
  int ok = f->state[g] == KVIK__ZC_REGISTERED ||
           (!saw_pending && may && register_granule(f, ctx, mode, g));
  pthread_mutex_unlock(&f->lock);
  return ok ? piece : 0;
}

int kvik__zc_registered(kvik__zc_file *zc, int64_t offset) {
  if (!zc) return 0;
  size_t g = (size_t)offset / KVIK__ZC_GRANULE;
  pthread_mutex_lock(&zc->lock);
  int registered =
      zc->map && zc->pid == getpid() && g < zc->granules && zc->state[g] == KVIK__ZC_REGISTERED;
  pthread_mutex_unlock(&zc->lock);
  return registered;
}

void kvik__zc_done(kvik__zc_file *zc) {
  pthread_mutex_lock(&zc->lock);
  zc->readers--;
  pthread_mutex_unlock(&zc->lock);
}
