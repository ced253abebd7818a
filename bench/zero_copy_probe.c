/* What the zero-copy path's parts cost on this GPU, to design its pipeline (issue 8): a page-cached
 * file is mapped, ranges of it registered read-only with CUDA, copied to the device, unregistered.
 *  1. serial: register, copy, unregister, chunk after chunk, for several chunk sizes;
 *  2. pipelined: chunk k+1 registered while chunk k's copy runs: does registration overlap copies?
 *  3. parallel: N threads registering disjoint chunks at once: does registration scale?
 *  4. populate, then register: is registration slow because it faults in the page tables of a fresh
 *     mapping? (a) MADV_POPULATE_READ alone on 1-16 threads; (b) 64 MiB registrations on one thread
 *     after populating on 8, next to (c) the same on an unpopulated mapping; (d) a pipeline: 4 threads
 *     populate ahead while one registers and copies. Each on a fresh mapping: no page tables left over.
 *  5. a hybrid first read: 1, 2 or 4 threads read the second half through pinned buffers (pread,
 *     then cuMemcpyHtoDAsync, as kvik's bounce path does), alone, then while one more thread reads
 *     the first half by registering and copying it. Do registrations hold up the other copies, or
 *     do the two add up?
 *  6. copy calls beside a registration: one thread queues 4 MiB copies from registered memory
 *     while another registers granules. Does a copy call wait for the other thread's registration?
 *     If it does, a pipeline must queue a granule's copies before it registers the next one.
 *  7. kvik's front, part by part: on a fresh mapping, 64 MiB granules in order, each
 *     asked about (mincore of all its pages, as KVIK_ZERO_COPY_READ=auto did; cachestat(2); mincore
 *     of 16 windows) or not, registered read-only with or without CU_MEMHOSTREGISTER_PORTABLE, its
 *     copy queued; all unregistered at the end. What do the residency check and the flag cost?
 *  8. huge mappings: the page cache may hold large folios (ext4 and xfs in recent kernels, tmpfs with
 *     huge=), and a mapping whose address is 2 MiB aligned, as its file offset is, can map a 2 MiB
 *     folio with one page-table entry (PMD). How large are the file's folios, does kvik's kind of
 *     mapping (address as mmap gives it) or an aligned one get PMD entries, and do registration and
 *     unregistration, which take every page, get faster with them? Each on a fresh mapping. Beside
 *     them, as a control, anonymous memory of the same size in 4 KiB pages and in transparent huge
 *     pages: does the driver's cost follow the page size at all? And does unregistration scale
 *     with threads, as registration does not?
 *  9. unregistration beside a copy: is a granule unregistered as fast while a large copy from
 *     another registered range runs as with the GPU idle, or does the call wait for that copy? If
 *     it waits, a read cannot unregister the granules it is done with while its later ones copy.
 * Uses the CUDA driver only (loaded with dlopen), no kvik.
 *
 * usage: bench_zero_copy_probe FILE [STEP]   (the file should be in the page cache: read it once
 * first; STEP 1-9 runs that step alone, steps 1-3 being one) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "clock.h"


typedef int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
#define READ_ONLY 8 /* CU_MEMHOSTREGISTER_READ_ONLY */
#define PORTABLE 1  /* CU_MEMHOSTREGISTER_PORTABLE */

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14+; older headers lack it */
#endif
#define GRANULE ((size_t)64 << 20) /* step 4 registers as the library does: 64 MiB granules */

static struct {
  CUresult (*init)(unsigned);
  CUresult (*device_get)(int *, int);
  CUresult (*primary_retain)(CUcontext *, int);
  CUresult (*set_current)(CUcontext);
  CUresult (*mem_alloc)(CUdeviceptr *, size_t);
  CUresult (*host_register)(void *, size_t, unsigned);
  CUresult (*host_unregister)(void *);
  CUresult (*copy_async)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*stream_create)(CUstream *, unsigned);
  CUresult (*stream_sync)(CUstream);
  CUresult (*host_alloc)(void **, size_t, unsigned);
} cu;

static CUcontext ctx;

#define CHECK(call)                                                                            \
  do {                                                                                         \
    CUresult r_ = (call);                                                                      \
    if (r_ != 0) {                                                                             \
      fprintf(stderr, "%s:%d: %s: CUDA error %d\n", __FILE__, __LINE__, #call, r_);            \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

static void load_driver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) fprintf(stderr, "no CUDA driver: %s\n", dlerror()), exit(77);
  *(void **)&cu.init = dlsym(h, "cuInit");
  *(void **)&cu.device_get = dlsym(h, "cuDeviceGet");
  *(void **)&cu.primary_retain = dlsym(h, "cuDevicePrimaryCtxRetain");
  *(void **)&cu.set_current = dlsym(h, "cuCtxSetCurrent");
  *(void **)&cu.mem_alloc = dlsym(h, "cuMemAlloc_v2");
  *(void **)&cu.host_register = dlsym(h, "cuMemHostRegister_v2");
  *(void **)&cu.host_unregister = dlsym(h, "cuMemHostUnregister");
  *(void **)&cu.copy_async = dlsym(h, "cuMemcpyHtoDAsync_v2");
  *(void **)&cu.stream_create = dlsym(h, "cuStreamCreate");
  *(void **)&cu.stream_sync = dlsym(h, "cuStreamSynchronize");
  *(void **)&cu.host_alloc = dlsym(h, "cuMemHostAlloc");
  int dev;
  CHECK(cu.init(0));
  CHECK(cu.device_get(&dev, 0));
  CHECK(cu.primary_retain(&ctx, dev));
  CHECK(cu.set_current(ctx));
}

struct times {
  double reg, copy, unreg, total;
};

static void print(const char *what, size_t chunk, size_t bytes, struct times t) {
  printf("%-34s chunk %5zu MiB: %6.2f GB/s; register %6.1f ms, copy %6.1f ms, unregister %6.1f ms (totals)\n", what,
         chunk >> 20, (double)bytes / t.total / 1e9, t.reg * 1e3, t.copy * 1e3, t.unreg * 1e3);
}

static struct times serial(const char *map, size_t bytes, size_t chunk, CUdeviceptr dev, CUstream s) {
  struct times t = {0, 0, 0, 0};
  double start = now();
  for (size_t off = 0; off < bytes; off += chunk) {
    void *p = (void *)(map + off);
    double a = now();
    CHECK(cu.host_register(p, chunk, READ_ONLY));
    double b = now();
    CHECK(cu.copy_async(dev + off, p, chunk, s));
    CHECK(cu.stream_sync(s));
    double c = now();
    CHECK(cu.host_unregister(p));
    t.reg += b - a, t.copy += c - b, t.unreg += now() - c;
  }
  t.total = now() - start;
  return t;
}

/* Register chunk k+1 while chunk k copies; `copy` times the waits for copies. */
static struct times pipelined(const char *map, size_t bytes, size_t chunk, CUdeviceptr dev, CUstream s) {
  struct times t = {0, 0, 0, 0};
  double start = now(), a = now();
  CHECK(cu.host_register((void *)map, chunk, READ_ONLY));
  t.reg += now() - a;
  for (size_t off = 0; off < bytes; off += chunk) {
    void *p = (void *)(map + off);
    CHECK(cu.copy_async(dev + off, p, chunk, s));
    a = now();
    if (off + chunk < bytes) CHECK(cu.host_register((void *)(map + off + chunk), chunk, READ_ONLY));
    double b = now();
    CHECK(cu.stream_sync(s));
    double c = now();
    CHECK(cu.host_unregister(p));
    t.reg += b - a, t.copy += c - b, t.unreg += now() - c;
  }
  t.total = now() - start;
  return t;
}

struct worker {
  char *p;
  size_t len;
  pthread_t thread;
};

static void *register_range(void *arg) {
  struct worker *w = arg;
  CHECK(cu.set_current(ctx));
  CHECK(cu.host_register(w->p, w->len, READ_ONLY));
  return NULL;
}

/* N threads (up to 16) each run `work` on 1/N of the range, contiguous parts, at once; returns
 * the wall time. w[] says which part each had. */
static double fan_out(char *map, size_t bytes, int n, void *(*work)(void *), struct worker *w) {
  double start = now();
  for (int i = 0; i < n; i++) {
    w[i] = (struct worker){map + bytes / (size_t)n * (size_t)i, bytes / (size_t)n, 0};
    pthread_create(&w[i].thread, NULL, work, &w[i]);
  }
  for (int i = 0; i < n; i++) pthread_join(w[i].thread, NULL);
  return now() - start;
}

/* N threads each register 1/N of the range at once; then all is unregistered (not timed). */
static double parallel_register(char *map, size_t bytes, int n) {
  struct worker w[16];
  double seconds = fan_out(map, bytes, n, register_range, w);
  for (int i = 0; i < n; i++) CHECK(cu.host_unregister(w[i].p));
  return seconds;
}

/* Step 4: how page tables get populated: madvise, or one volatile read per page where the kernel
 * lacks MADV_POPULATE_READ. */
static int touch_pages;

static char *map_file(int fd, size_t bytes) {
  char *p = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) perror("mmap"), exit(1);
  return p;
}

/* Asked on a throwaway one-page mapping, so that no mapping that is measured starts populated. */
static void choose_populate(int fd) {
  char *p = map_file(fd, 4096);
  if (madvise(p, 4096, MADV_POPULATE_READ) != 0) {
    if (errno != EINVAL) perror("madvise(MADV_POPULATE_READ)"), exit(1);
    touch_pages = 1;
  }
  munmap(p, 4096);
  printf("4  populating with %s\n", touch_pages ? "volatile reads, one per 4096-byte page (madvise: EINVAL, "
                                                  "no MADV_POPULATE_READ in this kernel)"
                                                : "madvise(MADV_POPULATE_READ)");
}

/* Fills in the page-table entries of [p, p + len), pinning nothing. */
static void populate(char *p, size_t len) {
  if (touch_pages) {
    const volatile char *q = p;
    for (size_t off = 0; off < len; off += 4096) (void)q[off];
  } else if (madvise(p, len, MADV_POPULATE_READ) != 0) {
    perror("madvise(MADV_POPULATE_READ)"), exit(1);
  }
}

static void *populate_range(void *arg) {
  struct worker *w = arg;
  populate(w->p, w->len);
  return NULL;
}

/* N threads each populate 1/N of the mapping at once; returns the wall time. */
static double parallel_populate(char *map, size_t bytes, int n) {
  struct worker w[16];
  return fan_out(map, bytes, n, populate_range, w);
}

/* Each 64 MiB granule its own registration, one after another on this thread. */
static double register_granules(char *map, size_t bytes) {
  double start = now();
  for (size_t off = 0; off < bytes; off += GRANULE) CHECK(cu.host_register(map + off, GRANULE, READ_ONLY));
  return now() - start;
}

static double unregister_granules(char *map, size_t bytes) {
  double start = now();
  for (size_t off = 0; off < bytes; off += GRANULE) CHECK(cu.host_unregister(map + off));
  return now() - start;
}

/* 4a: what populating alone costs, and whether it scales with threads (registration does not). */
static void populate_only(int fd, size_t bytes) {
  for (int n = 1; n <= 16; n *= 2) {
    char *map = map_file(fd, bytes);
    double seconds = parallel_populate(map, bytes, n);
    munmap(map, bytes);
    printf("4a populate %2d threads: %6.2f GB/s (%.1f ms)\n", n, (double)bytes / seconds / 1e9, seconds * 1e3);
  }
}

/* 4b and 4c: registration of a fresh mapping populated first on 8 threads, or not at all. */
static void register_fresh(int fd, size_t bytes, int populated) {
  char *map = map_file(fd, bytes);
  double pop = populated ? parallel_populate(map, bytes, 8) : 0;
  double reg = register_granules(map, bytes);
  double unreg = unregister_granules(map, bytes);
  munmap(map, bytes);
  printf("%s register 64 MiB granules, 1 thread, %-22s %6.2f GB/s (%.1f ms); unregister %.1f ms",
         populated ? "4b" : "4c",
         populated ? "after populate:" : "unpopulated (baseline):", (double)bytes / reg / 1e9, reg * 1e3, unreg * 1e3);
  if (populated)
    printf("; the populate before it, 8 threads: %.2f GB/s (%.1f ms)", (double)bytes / pop / 1e9, pop * 1e3);
  printf("\n");
}

/* 4d: populate threads take granules in turn and flag each one done for the registering thread. */
struct ahead {
  char *map;
  size_t granules;
  atomic_size_t next;
  atomic_int *ready;
};

static void *populate_ahead(void *arg) {
  struct ahead *a = arg;
  for (size_t k; (k = atomic_fetch_add(&a->next, 1)) < a->granules;) {
    populate(a->map + k * GRANULE, GRANULE);
    atomic_store_explicit(&a->ready[k], 1, memory_order_release);
  }
  return NULL;
}

/* 4d: can "populate ahead on 4 threads, register on one" reach the copy rate on a first read? The
 * CPU time is the whole process's (the driver's threads too) from the populate threads' start to the
 * last copy done. */
static void pipeline(int fd, size_t bytes, CUdeviceptr dev, CUstream s) {
  enum { POPULATORS = 4 };
  struct ahead a = {map_file(fd, bytes), bytes / GRANULE, 0, malloc(bytes / GRANULE * sizeof(atomic_int))};
  if (!a.ready) perror("malloc"), exit(1);
  for (size_t k = 0; k < a.granules; k++) atomic_init(&a.ready[k], 0);
  pthread_t threads[POPULATORS];
  double cpu = cpu_seconds(RUSAGE_SELF), start = now(), first = 0, reg = 0, waited = 0;
  for (int i = 0; i < POPULATORS; i++) pthread_create(&threads[i], NULL, populate_ahead, &a);
  for (size_t k = 0; k < a.granules; k++) {
    char *p = a.map + k * GRANULE;
    double w0 = now();
    while (!atomic_load_explicit(&a.ready[k], memory_order_acquire)) sched_yield();
    double r0 = now();
    if (k == 0) first = r0;
    CHECK(cu.host_register(p, GRANULE, READ_ONLY));
    double r1 = now();
    CHECK(cu.copy_async(dev + k * GRANULE, p, GRANULE, s));
    waited += r0 - w0, reg += r1 - r0;
  }
  double queued = now();
  CHECK(cu.stream_sync(s));
  double end = now();
  for (int i = 0; i < POPULATORS; i++) pthread_join(threads[i], NULL);
  cpu = cpu_seconds(RUSAGE_SELF) - cpu;
  double unreg = unregister_granules(a.map, bytes);
  munmap(a.map, bytes);
  free(a.ready);
  double gb = (double)bytes / 1e9;
  printf("4d pipeline, populate ahead on %d threads, register + copy on 1: %6.2f GB/s end to end (%.1f ms from the "
         "first registration to the last copy done; %.2f GB/s, %.1f ms, from the start of populating)\n",
         POPULATORS, gb / (end - first), (end - first) * 1e3, gb / (end - start), (end - start) * 1e3);
  printf("4d   register %.1f ms, waiting for populate %.1f ms, waiting for the last copies %.1f ms, "
         "unregister %.1f ms; "
         "CPU %.3f s per GB (user + system, whole process)\n",
         reg * 1e3, waited * 1e3, (end - queued) * 1e3, unreg * 1e3, cpu / gb);
}

static void populate_then_register(int fd, size_t bytes, CUdeviceptr dev, CUstream s) {
  choose_populate(fd);
  populate_only(fd, bytes);
  register_fresh(fd, bytes, 1);
  register_fresh(fd, bytes, 0);
  pipeline(fd, bytes, dev, s);
}

/* Step 5: threads that pread the second half of the file into pinned buffers of 8 MiB and copy
 * each to the device, waiting for it, as kvik's bounce buffers do. */
#define BOUNCE ((size_t)8 << 20)

struct bouncer {
  int fd;
  off_t start;
  size_t len;
  CUdeviceptr dev;
  pthread_t thread;
  double seconds;
};

static void *bounce_range(void *arg) {
  struct bouncer *b = arg;
  CHECK(cu.set_current(ctx));
  void *buf;
  CUstream s;
  CHECK(cu.host_alloc(&buf, BOUNCE, 0));
  CHECK(cu.stream_create(&s, 1));
  double start = now();
  for (size_t off = 0; off < b->len; off += BOUNCE) {
    if (pread(b->fd, buf, BOUNCE, b->start + (off_t)off) != (ssize_t)BOUNCE) perror("pread"), exit(1);
    CHECK(cu.copy_async(b->dev + off, buf, BOUNCE, s));
    CHECK(cu.stream_sync(s));
  }
  b->seconds = now() - start;
  return NULL; /* the buffer and stream are left to the process's end */
}

/* The zero-copy half of a hybrid read: each 64 MiB granule registered, then its copy queued;
 * returns the time until the last copy is done. */
static double register_and_copy(char *map, size_t bytes, CUdeviceptr dev, CUstream s) {
  double start = now();
  for (size_t off = 0; off < bytes; off += GRANULE) {
    CHECK(cu.host_register(map + off, GRANULE, READ_ONLY));
    CHECK(cu.copy_async(dev + off, map + off, GRANULE, s));
  }
  CHECK(cu.stream_sync(s));
  return now() - start;
}

/* `n` bouncers over the second half of the file, and with `with_register` this thread reads the
 * first half meanwhile through registration (register_and_copy), as a hybrid first read would. */
static void bounce_beside_registration(int fd, size_t bytes, CUdeviceptr dev, CUstream s, int n, int with_register) {
  struct bouncer b[16];
  size_t half = bytes / 2, share = half / (size_t)n / BOUNCE * BOUNCE;
  char *map = map_file(fd, half);
  double start = now(), reg = 0;
  for (int i = 0; i < n; i++) {
    b[i] = (struct bouncer){fd, (off_t)(half + share * (size_t)i), share, dev + half + share * (size_t)i, 0, 0};
    pthread_create(&b[i].thread, NULL, bounce_range, &b[i]);
  }
  if (with_register) reg = register_and_copy(map, half, dev, s);
  double slowest = 0;
  for (int i = 0; i < n; i++) {
    pthread_join(b[i].thread, NULL);
    if (b[i].seconds > slowest) slowest = b[i].seconds;
  }
  double wall = now() - start;
  if (with_register) unregister_granules(map, half);
  munmap(map, half);
  printf("5  %d bounce threads%s: bounce %6.2f GB/s", n, with_register ? " + 1 zero-copy" : ", alone      ",
         (double)share * (size_t)n / slowest / 1e9);
  if (with_register)
    printf(", register + copy %6.2f GB/s; all to the device %6.2f GB/s (%.2f GB in %.1f ms)", (double)half / reg / 1e9,
           (double)(half + share * (size_t)n) / wall / 1e9, (double)(half + share * (size_t)n) / 1e9, wall * 1e3);
  printf("\n");
}

/* Step 6: 4 MiB copies from a registered range, each call timed, on this thread; meanwhile, with
 * `beside`, another thread registers 64 MiB granules of another range. */
#define COPY ((size_t)4 << 20)

static void *register_all(void *arg) {
  struct worker *w = arg;
  CHECK(cu.set_current(ctx));
  for (size_t off = 0; off < w->len; off += GRANULE) CHECK(cu.host_register(w->p + off, GRANULE, READ_ONLY));
  return NULL;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void copy_calls(char *map, size_t bytes, CUdeviceptr dev, CUstream s, int beside) {
  enum { CALLS = 1024, DEPTH = 16 };
  static double call[CALLS];
  size_t half = bytes / 2;
  CHECK(cu.host_register(map, half, READ_ONLY));
  struct worker w = {map + half, half, 0};
  double start = now();
  if (beside) pthread_create(&w.thread, NULL, register_all, &w);
  for (int i = 0; i < CALLS; i++) {
    size_t off = (size_t)i * COPY % half;
    double a = now();
    CHECK(cu.copy_async(dev + off, map + off, COPY, s));
    call[i] = now() - a;
    if (i % DEPTH == DEPTH - 1) CHECK(cu.stream_sync(s)); /* at most DEPTH copies queued */
  }
  CHECK(cu.stream_sync(s));
  double copies = now() - start;
  if (beside) pthread_join(w.thread, NULL);
  double wall = now() - start;
  qsort(call, CALLS, sizeof call[0], by_value);
  printf("6  copy calls%s: median %7.1f us, 99th %7.1f us, max %7.1f us; copies %6.2f GB/s",
         beside ? " beside a registering thread" : ", alone                     ", call[CALLS / 2] * 1e6,
         call[CALLS * 99 / 100] * 1e6, call[CALLS - 1] * 1e6, (double)CALLS * COPY / copies / 1e9);
  if (beside) printf("; registered %.2f GB in %.1f ms", (double)half / 1e9, wall * 1e3);
  printf("\n");
  CHECK(cu.host_unregister(map));
  if (beside) unregister_granules(map + half, half);
}

/* Step 7: ways to ask whether all of a granule is in the page cache. */
enum ask { ASK_NONE, ASK_MINCORE, ASK_CACHESTAT, ASK_SAMPLED, ASKS };
static const char *ask_name[ASKS] = {"", "mincore", "cachestat", "sampled"};

static int mincore_all(const char *p, size_t len) {
  static unsigned char vec[GRANULE / 4096];
  if (mincore((void *)p, len, vec) != 0) perror("mincore"), exit(1);
  for (size_t i = 0; i < len / 4096; i++)
    if (!(vec[i] & 1)) return 0;
  return 1;
}

/* cachestat(2), Linux 6.5+: pages of the file range in the page cache, counted by the kernel. */
static int cachestat_all(int fd, size_t off, size_t len) {
  struct { uint64_t off, len; } range = {off, len};
  struct { uint64_t cache, dirty, writeback, evicted, recently_evicted; } cs;
  if (syscall(451, fd, &range, &cs, 0) != 0) return -1;
  return cs.cache == len / 4096;
}

/* 16 windows of 16 pages spread over the range. */
static int sampled(const char *p, size_t len) {
  size_t window = 16 * 4096, stride = len / 16;
  for (size_t at = 0; at + window <= len; at += stride)
    if (!mincore_all(p + at, window)) return 0;
  return 1;
}

static int resident(enum ask ask, int fd, const char *map, size_t off, size_t len) {
  switch (ask) {
  case ASK_MINCORE: return mincore_all(map + off, len);
  case ASK_CACHESTAT: return cachestat_all(fd, off, len);
  case ASK_SAMPLED: return sampled(map + off, len);
  default: return 1;
  }
}

static void front_like(int fd, size_t bytes, CUdeviceptr dev, CUstream s, unsigned flags, enum ask ask) {
  char *map = map_file(fd, bytes);
  double asking = 0, reg = 0, calls = 0, start = now();
  for (size_t off = 0; off < bytes; off += GRANULE) {
    double a = now();
    int answer = resident(ask, fd, map, off, GRANULE);
    if (answer < 0) {
      printf("7  %s: %s\n", ask_name[ask], strerror(errno));
      munmap(map, bytes);
      return;
    }
    if (!answer) fprintf(stderr, "granule at %zu not resident\n", off), exit(1);
    double b = now();
    CHECK(cu.host_register(map + off, GRANULE, flags));
    double c = now();
    CHECK(cu.copy_async(dev + off, map + off, GRANULE, s));
    calls += now() - c, reg += c - b, asking += b - a;
  }
  CHECK(cu.stream_sync(s));
  double total = now() - start;
  for (size_t off = 0; off < bytes; off += GRANULE) CHECK(cu.host_unregister(map + off));
  double unreg = now() - start - total;
  munmap(map, bytes);
  printf("7  %-9s%-10s %6.2f GB/s: asking %6.1f ms, register %6.1f ms, copy calls %5.1f ms; unregister %5.1f ms\n",
         flags & PORTABLE ? "portable" : "", ask_name[ask], (double)bytes / total / 1e9, asking * 1e3, reg * 1e3,
         calls * 1e3, unreg * 1e3);
}

/* Step 8: huge mappings. */
#define HUGE_PAGE ((size_t)2 << 20)

/* The file mapped at a 2 MiB-aligned address: a larger reservation, the file mapped over it with
 * MAP_FIXED, the slack on both sides given back. */
static char *map_file_aligned(int fd, size_t bytes) {
  char *area = mmap(NULL, bytes + HUGE_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (area == MAP_FAILED) perror("mmap"), exit(1);
  char *aligned = (char *)(((uintptr_t)area + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  if (mmap(aligned, bytes, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) perror("mmap"), exit(1);
  if (aligned > area) munmap(area, (size_t)(aligned - area));
  munmap(aligned + bytes, (size_t)(area + HUGE_PAGE - aligned));
  return aligned;
}

/* A field of /proc/self/smaps (FilePmdMapped, AnonHugePages) for the mapping that starts at p, in
 * MiB (-1: not found). */
static long smaps_mib(const char *p, const char *field) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512], name[64];
  int in = 0;
  long kb = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) in = lo == (uintptr_t)p;
    else if (in && sscanf(line, "%63[^:]: %ld kB", name, &kb) == 2 && strcmp(name, field) == 0) break;
    else kb = -1;
  }
  fclose(f);
  return kb < 0 ? -1 : kb / 1024;
}

/* The folios behind a populated mapping, from /proc/self/pagemap and /proc/kpageflags (root only):
 * in a 64 MiB window of each GiB, the pages in compound pages (large folios) and the mean size of
 * those folios. */
static void folio_census(const char *map, size_t bytes) {
  enum { WINDOW = 16384, COMPOUND_HEAD = 15, COMPOUND_TAIL = 16 };
  int pagemap = open("/proc/self/pagemap", O_RDONLY), flags = open("/proc/kpageflags", O_RDONLY);
  static uint64_t entries[WINDOW];
  size_t pages = 0, heads = 0, tails = 0;
  for (size_t off = 0; pagemap >= 0 && flags >= 0 && off < bytes; off += (size_t)1 << 30) {
    off_t at = (off_t)((uintptr_t)(map + off) / 4096 * 8);
    if (pread(pagemap, entries, sizeof entries, at) != (ssize_t)sizeof entries) break;
    for (size_t i = 0; i < WINDOW; i++) {
      uint64_t pfn = entries[i] & (((uint64_t)1 << 55) - 1), kflags;
      if (!(entries[i] >> 63) || pfn == 0 || pread(flags, &kflags, 8, (off_t)(pfn * 8)) != 8) continue;
      pages++;
      heads += (kflags >> COMPOUND_HEAD) & 1;
      tails += (kflags >> COMPOUND_TAIL) & 1;
    }
  }
  if (pages == 0)
    printf("8  folios: not known (pagemap or kpageflags unreadable: %s)\n", strerror(errno));
  else
    printf("8  folios: %zu pages seen, %.1f%% in large folios, those of %.0f KiB on average\n", pages,
           100.0 * (double)(heads + tails) / (double)pages, heads ? 4.0 * (double)(heads + tails) / (double)heads : 0);
  if (pagemap >= 0) close(pagemap);
  if (flags >= 0) close(flags);
}

static void huge_mapping(int fd, size_t bytes, int aligned, int hugepage_advice, int populated, int census) {
  char *map = aligned ? map_file_aligned(fd, bytes) : map_file(fd, bytes);
  if (hugepage_advice && madvise(map, bytes, MADV_HUGEPAGE) != 0) perror("madvise(MADV_HUGEPAGE)");
  double pop = populated ? parallel_populate(map, bytes, 8) : 0;
  long pmd_before = smaps_mib(map, "FilePmdMapped");
  if (census) folio_census(map, bytes);
  double reg = register_granules(map, bytes);
  long pmd_after = smaps_mib(map, "FilePmdMapped");
  double unreg = unregister_granules(map, bytes);
  munmap(map, bytes);
  printf("8  %-9s %-13s %-11s address %% 2 MiB = %7zu: PMD-mapped %7ld MiB before registering, %7ld after; "
         "register %6.2f GB/s (%6.1f ms), unregister %6.1f ms",
         aligned ? "aligned" : "as given", hugepage_advice ? "MADV_HUGEPAGE" : "",
         populated ? "populated" : "unpopulated", (size_t)((uintptr_t)map % HUGE_PAGE), pmd_before,
         pmd_after, (double)bytes / reg / 1e9, reg * 1e3, unreg * 1e3);
  if (populated) printf(", populate (8 threads) %.1f ms", pop * 1e3);
  printf("\n");
}

static void *unregister_part(void *arg) {
  struct worker *w = arg;
  CHECK(cu.set_current(ctx));
  for (size_t off = 0; off < w->len; off += GRANULE) CHECK(cu.host_unregister(w->p + off));
  return NULL;
}

/* 8: does unregistration, which a close does, scale with threads where registration does not? A
 * fresh populated mapping is registered in granules, then unregistered on n threads at once. */
static void parallel_unregister(int fd, size_t bytes, int n) {
  char *map = map_file(fd, bytes);
  parallel_populate(map, bytes, 8);
  register_granules(map, bytes);
  struct worker w[16];
  double seconds = fan_out(map, bytes, n, unregister_part, w);
  munmap(map, bytes);
  printf("8  unregister 64 MiB granules on %d thread(s) at once: %6.1f ms\n", n, seconds * 1e3);
}

/* 8: anonymous memory, written (so that it has its pages), registered for reading and writing. */
static void huge_anonymous(size_t bytes, int huge) {
  char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) perror("mmap"), exit(1);
  if (madvise(p, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) perror("madvise");
  memset(p, 1, bytes);
  long huge_mib = smaps_mib(p, "AnonHugePages");
  double start = now();
  for (size_t off = 0; off < bytes; off += GRANULE) CHECK(cu.host_register(p + off, GRANULE, 0));
  double reg = now() - start;
  double unreg = unregister_granules(p, bytes);
  munmap(p, bytes);
  printf("8  anonymous, %-20s huge pages %7ld MiB: register %6.2f GB/s (%6.1f ms), unregister %6.1f ms\n",
         huge ? "MADV_HUGEPAGE:" : "MADV_NOHUGEPAGE:", huge_mib, (double)bytes / reg / 1e9, reg * 1e3, unreg * 1e3);
}

/* Step 9: GRANULES granules of the second half unregistered one by one, with the GPU idle, then
 * again while the first half (registered whole) copies to the device. */
static void unregister_beside_copy(int fd, size_t bytes, CUdeviceptr dev, CUstream s) {
  enum { GRANULES = 8 };
  size_t half = bytes / 2;
  char *map = map_file(fd, bytes), *second = map + half;
  parallel_populate(map, bytes, 8);
  CHECK(cu.host_register(map, half, READ_ONLY));
  for (int busy = 0; busy <= 1; busy++) {
    register_granules(second, GRANULES * GRANULE);
    double start = now(), calls[GRANULES];
    if (busy) CHECK(cu.copy_async(dev, map, half, s));
    for (int k = 0; k < GRANULES; k++) {
      double a = now();
      CHECK(cu.host_unregister(second + (size_t)k * GRANULE));
      calls[k] = now() - a;
    }
    double unregistered = now();
    CHECK(cu.stream_sync(s));
    double copied = now();
    printf("9  unregister %d granules, %s: first call %6.2f ms, later ones %6.2f ms on average", GRANULES,
           busy ? "while a copy runs" : "GPU idle         ", calls[0] * 1e3,
           (unregistered - start - calls[0]) / (GRANULES - 1) * 1e3);
    if (busy)
      printf("; the copy (%.2f GB) took %.1f ms from its call, %.1f after the last unregistration", (double)half / 1e9,
             (copied - start) * 1e3, (copied - unregistered) * 1e3);
    printf("\n");
  }
  CHECK(cu.host_unregister(map));
  munmap(map, bytes);
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) return fprintf(stderr, "usage: %s FILE [STEP]\n", argv[0]), 2;
  int step = argc == 3 ? atoi(argv[2]) : 0;
  int fd = open(argv[1], O_RDONLY);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) return perror(argv[1]), 1;
  size_t bytes = (size_t)st.st_size & ~(((size_t)1 << 30) - 1); /* whole GiBs */
  if (bytes == 0) return fprintf(stderr, "%s: less than 1 GiB\n", argv[1]), 2;
  char *map = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return perror("mmap"), 1;
  load_driver();
  CUdeviceptr dev;
  CUstream s;
  CHECK(cu.mem_alloc(&dev, bytes));
  CHECK(cu.stream_create(&s, 1));
  printf("%s: %zu GiB mapped\n", argv[1], bytes >> 30);
  serial(map, bytes, (size_t)1 << 30, dev, s); /* warm-up: page tables of the mapping */
  if (step <= 3) {
    const size_t chunks[] = {(size_t)16 << 20, (size_t)64 << 20, (size_t)256 << 20, (size_t)1 << 30};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
      print("serial", chunks[i], bytes, serial(map, bytes, chunks[i], dev, s));
      print("pipelined (register during copy)", chunks[i], bytes, pipelined(map, bytes, chunks[i], dev, s));
    }
    for (int n = 1; n <= 8; n *= 2) {
      double seconds = parallel_register(map, bytes, n);
      printf("register %zu GiB on %d thread(s) at once: %.1f ms, %.1f GB/s\n", bytes >> 30, n, seconds * 1e3,
             (double)bytes / seconds / 1e9);
    }
  }
  if (step == 0 || step == 6) {
    copy_calls(map, bytes, dev, s, 0);
    copy_calls(map, bytes, dev, s, 1);
  }
  munmap(map, bytes); /* step 4 maps the file afresh for each measurement */
  if (step == 0 || step == 4) populate_then_register(fd, bytes, dev, s);
  for (int round = 0; round < 2 && (step == 0 || step == 7); round++)
    for (int v = 0; v <= ASKS; v++)
      front_like(fd, bytes, dev, s, READ_ONLY | (v == ASKS ? PORTABLE : 0), v == ASKS ? ASK_NONE : (enum ask)v);
  for (int round = 0; round < 2 && (step == 0 || step == 8); round++) {
    huge_mapping(fd, bytes, 0, 0, 1, round == 0);
    huge_mapping(fd, bytes, 1, 0, 1, round == 0);
    huge_mapping(fd, bytes, 1, 1, 1, 0);
    huge_mapping(fd, bytes, 0, 0, 0, 0);
    huge_mapping(fd, bytes, 1, 0, 0, 0);
    huge_anonymous(bytes, 0);
    huge_anonymous(bytes, 1);
    for (int n = 1; n <= 8; n *= 2) parallel_unregister(fd, bytes, n);
  }
  for (int round = 0; round < 2 && (step == 0 || step == 9); round++) unregister_beside_copy(fd, bytes, dev, s);
  for (int n = 1; n <= 4 && (step == 0 || step == 5); n *= 2) {
    bounce_beside_registration(fd, bytes, dev, s, n, 0);
    bounce_beside_registration(fd, bytes, dev, s, n, 1);
  }
  return 0;
}
