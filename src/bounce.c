/* Caches of bounce buffers, one per kind of memory. */
#define _GNU_SOURCE
#include "bounce.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "cuda.h"
#include "error.h"
#include "init.h"
#include "memory.h"
#include "settings.h"
#include "sys.h"

#define BOUNCE_ALIGNMENT 4096
#define HUGE_PAGE ((size_t)2 << 20) /* a transparent huge page: x86-64, arm64 with 4 KiB pages */

/* An idle buffer stores its own list link in its first bytes. */
typedef struct idle_buffer {
  struct idle_buffer *next;
  size_t size;
} idle_buffer;

_Static_assert(sizeof(idle_buffer) <= KVIK__BOUNCE_GRAIN, "an idle buffer holds its link");

typedef struct buffer_cache {
  pthread_mutex_t lock;
  idle_buffer *idle; /* guarded by lock */
  size_t idle_bytes; /* guarded by lock */
  int64_t made_for;  /* guarded by lock: the bounce buffer size setting that the idle ones had */
  size_t max_idle_bytes;
  int device; /* pinned memory: the CUDA device it is for; -1 for any (and aligned memory) */
  /* pinned memory: what no buffer took yet of the last reserve (carve()); guarded by lock */
  char *reserve;
  size_t reserve_left;
  /* 0, or a code with a message */
  int (*allocate)(struct buffer_cache *cache, const char *fn, size_t size, void **buf);
  void (*release)(void *buf, size_t size);
} buffer_cache;

/* Free the buffers of `list`; returns their bytes. */
static size_t release_all(buffer_cache *cache, idle_buffer *list) {
  size_t bytes = 0;
  while (list) {
    idle_buffer *next = list->next;
    bytes += list->size;
    cache->release(list, list->size);
    list = next;
  }
  return bytes;
}

/* Take the cache's idle buffers out of it, to be freed outside its lock. */
static idle_buffer *detach_idle(buffer_cache *cache) {
  idle_buffer *list = cache->idle;
  cache->idle = NULL;
  cache->idle_bytes = 0;
  return list;
}

/* An idle buffer of `size` bytes, or NULL. Once the bounce buffer size setting changed, the idle
 * buffers are freed: their sizes followed the old setting, so no IO would take them again (as
 * kvikio drops its pool when the size changes). */
static void *take_idle(buffer_cache *cache, size_t size) {
  int64_t setting = kvik__setting(KVIK_SETTING_BOUNCE_BUFFER_SIZE);
  idle_buffer *stale = NULL;
  pthread_mutex_lock(&cache->lock);
  if (cache->made_for != setting) {
    stale = detach_idle(cache);
    cache->made_for = setting;
  }
  idle_buffer **link = &cache->idle;
  while (*link && (*link)->size != size) link = &(*link)->next;
  idle_buffer *found = *link;
  if (found) {
    *link = found->next;
    cache->idle_bytes -= size;
  }
  pthread_mutex_unlock(&cache->lock);
  release_all(cache, stale);
  return found;
}

/* Unmap what no buffer took of the cache's reserve. Called with the lock held. */
static void drop_reserve(buffer_cache *cache) {
  if (cache->reserve_left) munmap(cache->reserve, cache->reserve_left);
  cache->reserve = NULL;
  cache->reserve_left = 0;
}

/* Free the cache's idle buffers, and unmap what no buffer took of its reserve (which held no
 * memory, so counts no bytes). */
static size_t cache_free_idle(buffer_cache *cache) {
  pthread_mutex_lock(&cache->lock);
  idle_buffer *list = detach_idle(cache);
  drop_reserve(cache);
  pthread_mutex_unlock(&cache->lock);
  return release_all(cache, list);
}

static int cache_get(buffer_cache *cache, const char *fn, size_t size, void **buf) {
  *buf = take_idle(cache, size);
  return *buf ? 0 : cache->allocate(cache, fn, size, buf);
}

static void cache_put(buffer_cache *cache, void *buf, size_t size) {
  if (!buf) return;
  pthread_mutex_lock(&cache->lock);
  int keep = cache->idle_bytes + size <= cache->max_idle_bytes;
  if (keep) {
    idle_buffer *b = buf;
    b->next = cache->idle;
    b->size = size;
    cache->idle = b;
    cache->idle_bytes += size;
  }
  pthread_mutex_unlock(&cache->lock);
  if (!keep) cache->release(buf, size);
}

/* ---- aligned pageable memory ------------------------------------------------------------ */

/* Buffers of a huge page or more are asked for in transparent huge pages, where the system has
 * them for the asking (THP "madvise" or "always"): pinning 512 small pages costs about a fifth of
 * a copy of them, one huge page almost nothing, whether the kernel pins them for a copy between a
 * bounce buffer and the caller's buffer (kvik__copy_user) or CUDA for a registration. Without huge
 * pages the buffer works all the same. */
static int allocate_aligned(buffer_cache *cache, const char *fn, size_t size, void **buf) {
  (void)cache;
  int huge = size >= HUGE_PAGE;
  int err = kvik__posix_memalign(buf, huge ? HUGE_PAGE : BOUNCE_ALIGNMENT, size);
  if (err) {
    *buf = NULL;
    return kvik__fail_errno(err, "%s: bounce buffer of %zu bytes", fn, size);
  }
  if (huge) kvik__madvise(*buf, size, MADV_HUGEPAGE);
  return 0;
}

static void release_aligned(void *buf, size_t size) {
  (void)size;
  free(buf);
}

static buffer_cache aligned = {.lock = PTHREAD_MUTEX_INITIALIZER,
                               .max_idle_bytes = KVIK__BOUNCE_CACHE_BYTES,
                               .device = -1,
                               .allocate = allocate_aligned,
                               .release = release_aligned};

void *kvik__bounce_get(size_t size) {
  void *buf;
  cache_get(&aligned, "O_DIRECT", size, &buf);
  return buf;
}

void kvik__bounce_put(void *buf, size_t size) { cache_put(&aligned, buf, size); }

/* ---- pinned memory ---------------------------------------------------------------------- */

/* Pinned buffers are anonymous pages that the allocating thread faults in and then registers with
 * CUDA, rather than cuMemHostAlloc's: the driver serialises cuMemHostAlloc and pins small pages,
 * so that on an H100 the 32 buffers of 2 MiB of a first read on 16 threads took 39 ms, where
 * huge pages touched by those threads at once and then registered took 8-9 ms; a new process's
 * first 8 GiB read went from 219-431 ms to 197-199 (bench/first_read.py, docs/benchmarks.md).
 *
 * Each buffer is whole pages of its own: the driver pins whole pages, so a page shared with other
 * memory would make the caller's own registration of that memory fail, and it may mark what it
 * pins not to be inherited by a child process (MADV_DONTFORK), which must not take heap pages
 * from under the child's malloc. A buffer of a huge page or more is whole huge pages. */
static size_t piece_bytes(size_t size) {
  size_t unit = size >= HUGE_PAGE ? HUGE_PAGE : BOUNCE_ALIGNMENT;
  return (size + unit - 1) & ~(unit - 1);
}

/* A mapping of `bytes` (piece_bytes()), starting on a huge page where it holds one or more. */
static int map_pages(const char *fn, size_t bytes, char **buf) {
  size_t slack = bytes >= HUGE_PAGE ? HUGE_PAGE : 0;
  char *raw = kvik__mmap(bytes + slack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    *buf = NULL;
    return kvik__fail_errno(errno, "%s: pinned bounce buffer of %zu bytes", fn, bytes);
  }
  char *start = raw;
  if (slack) {
    start = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (start > raw) munmap(raw, (size_t)(start - raw));
    if (raw + slack > start) munmap(start + bytes, (size_t)(raw + slack - start));
    kvik__madvise(start, bytes, MADV_HUGEPAGE);
  }
  *buf = start;
  return 0;
}

/* The pages of a new buffer of `bytes` (piece_bytes()). One of huge pages is the next piece of
 * the cache's reserve: a mapping made for as many such buffers as the pool has threads (at most
 * the cache's bound on idle bytes), each of whose takers faults in and registers its own piece.
 * A first read on 16 threads then maps memory once, where a mapping for each buffer cost 16
 * mappings, 32 trims and 16 advices, each waiting for the process's address-space lock behind the
 * other threads' registrations, which pin pages under it. A piece is unmapped alone when its
 * buffer is freed; what no buffer took holds no memory, and is unmapped when the next reserve
 * replaces it or by kvik_bounce_buffer_free(). Pieces are whole huge pages, so that each starts
 * on one. A smaller buffer, or one whose reserve cannot be mapped, is mapped alone. */
static int carve(buffer_cache *cache, const char *fn, size_t bytes, char **pages) {
  size_t threads = (size_t)kvik__setting(KVIK_SETTING_NUM_THREADS);
  size_t fit = cache->max_idle_bytes / bytes;
  size_t pieces = bytes < HUGE_PAGE ? 1 : fit < threads ? fit : threads;
  *pages = NULL;
  if (pieces > 1) {
    pthread_mutex_lock(&cache->lock);
    if (cache->reserve_left < bytes) {
      drop_reserve(cache);
      if (map_pages(fn, pieces * bytes, &cache->reserve) == 0) cache->reserve_left = pieces * bytes;
    }
    if (cache->reserve_left >= bytes) {
      *pages = cache->reserve;
      cache->reserve += bytes;
      cache->reserve_left -= bytes;
    }
    pthread_mutex_unlock(&cache->lock);
  }
  return *pages ? 0 : map_pages(fn, bytes, pages);
}

/* Write a byte of each page of `buf`, so that the kernel gives it its pages now, on this thread,
 * while the thread prefers NUMA node `node` (-1: no preference): they land on that node without
 * a thread of kvik's own running there. The thread's own policy is put back after. Where the
 * policy cannot be read or set (seccomp, a kernel without NUMA), the pages land where the kernel
 * puts them. */
static void fault_in_on(int node, char *buf, size_t size) {
  int mode;
  kvik__nodemask old;
  int placed = node >= 0 && kvik__get_mempolicy(&mode, &old) == 0 && kvik__prefer_node(node) == 0;
  for (size_t at = 0; at < size; at += BOUNCE_ALIGNMENT) ((volatile char *)buf)[at] = 0;
  if (placed) kvik__restore_mempolicy(mode, &old);
}

/* Portable: the buffer serves copies in every context of its device (and of every other device,
 * for the cache of no device), whichever was current here. */
static int allocate_pinned(buffer_cache *cache, const char *fn, size_t size, void **buf) {
  *buf = NULL;
  const kvik__cuda_api *cu = kvik__cuda(fn);
  if (!cu) return KVIK_ECUDA_UNAVAILABLE;
  size_t bytes = piece_bytes(size);
  char *pages;
  int rc = carve(cache, fn, bytes, &pages);
  if (rc < 0) return rc;
  fault_in_on(cache->device < 0 ? -1 : kvik__device_numa_node(cu, cache->device), pages, bytes);
  rc = kvik__cuda_check(cu->cuMemHostRegister(pages, bytes, CU_MEMHOSTREGISTER_PORTABLE), fn,
                        "cuMemHostRegister");
  if (rc < 0) {
    munmap(pages, bytes);
    return rc;
  }
  *buf = pages;
  return 0;
}

static void release_pinned(void *buf, size_t size) {
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  if (cu) cu->cuMemHostUnregister(buf);
  munmap(buf, piece_bytes(size));
}

/* Of no device in particular: stream-ordered IO's and fused reads' buffers. */
static buffer_cache pinned = {.lock = PTHREAD_MUTEX_INITIALIZER,
                              .max_idle_bytes = KVIK_PINNED_CACHE_BYTES,
                              .device = -1,
                              .allocate = allocate_pinned,
                              .release = release_pinned};

/* One cache per device, set up at load: a device's buffers lie on its NUMA node and serve its
 * copies only, and a thread taking one for one device never waits for another device's lock. */
static buffer_cache per_device[KVIK__PINNED_DEVICES];

KVIK__ON_LOAD(set_up_device_caches) {
  for (int d = 0; d < KVIK__PINNED_DEVICES; d++)
    per_device[d] = (buffer_cache){.max_idle_bytes = KVIK_PINNED_CACHE_BYTES,
                                   .device = d,
                                   .allocate = allocate_pinned,
                                   .release = release_pinned};
  for (int d = 0; d < KVIK__PINNED_DEVICES; d++) pthread_mutex_init(&per_device[d].lock, NULL);
}

static buffer_cache *cache_of(int device) {
  return device >= 0 && device < KVIK__PINNED_DEVICES ? &per_device[device] : &pinned;
}

int kvik__pinned_get(const char *fn, size_t size, void **buf) {
  return cache_get(&pinned, fn, size, buf);
}

void kvik__pinned_put(void *buf, size_t size) { cache_put(&pinned, buf, size); }

int kvik__device_pinned_get(const char *fn, int device, size_t size, void **buf) {
  return cache_get(cache_of(device), fn, size, buf);
}

void kvik__device_pinned_put(int device, void *buf, size_t size) {
  cache_put(cache_of(device), buf, size);
}

/* ---- freeing the idle buffers ----------------------------------------------------------- */

/* Whether the cache has idle buffers, or a reserve to unmap. */
static int holds_any(buffer_cache *cache) {
  pthread_mutex_lock(&cache->lock);
  int any = cache->idle != NULL || cache->reserve_left > 0;
  pthread_mutex_unlock(&cache->lock);
  return any;
}

/* Unregistering pinned buffers needs a current context: the caller's, else device 0's primary
 * one, which is active already where pinned buffers were made in it (the buffers are portable:
 * any context frees them). Without one the buffers are still freed as far as the driver lets
 * them. The reserves go too. */
size_t kvik_bounce_buffer_free(void) {
  static const char fn[] = "kvik_bounce_buffer_free";
  size_t bytes = cache_free_idle(&aligned);
  int any_pinned = holds_any(&pinned);
  for (int d = 0; d < KVIK__PINNED_DEVICES && !any_pinned; d++)
    any_pinned = holds_any(&per_device[d]);
  if (!any_pinned) return bytes;
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  int pushed = cu && kvik__context_push_any(fn, cu) == 0;
  bytes += cache_free_idle(&pinned);
  for (int d = 0; d < KVIK__PINNED_DEVICES; d++) bytes += cache_free_idle(&per_device[d]);
  if (pushed) kvik__context_pop();
  return bytes;
}

/* ---- fork ------------------------------------------------------------------------------- */

/* The per-device caches are not locked across fork(): the child forgets them whole, a list that
 * another thread was changing included, so it needs no consistent view of them (and 64 more
 * locks held at once would pass ThreadSanitizer's bound of 64 per thread). */
static void fork_prepare(void) {
  pthread_mutex_lock(&aligned.lock);
  pthread_mutex_lock(&pinned.lock);
}

static void fork_parent(void) {
  pthread_mutex_unlock(&pinned.lock);
  pthread_mutex_unlock(&aligned.lock);
}

/* Pinned memory belongs to the parent's CUDA state, which the child cannot use: forget it. The
 * reserve is forgotten, not unmapped: a parent's thread may have been carving it. */
static void forget(buffer_cache *cache) {
  pthread_mutex_init(&cache->lock, NULL);
  cache->idle = NULL;
  cache->idle_bytes = 0;
  cache->reserve = NULL;
  cache->reserve_left = 0;
}

static void fork_child(void) {
  pthread_mutex_init(&aligned.lock, NULL);
  forget(&pinned);
  for (int d = 0; d < KVIK__PINNED_DEVICES; d++) forget(&per_device[d]);
}

KVIK__ON_LOAD(register_fork_handlers) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_BOUNCE, &handlers);
}
