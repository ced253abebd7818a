/* What the zero-copy path's parts cost on this GPU, to design its pipeline (issue 8): a page-cached
 * file is mapped, ranges of it registered read-only with CUDA, copied to the device, unregistered.
 *  1. serial: register, copy, unregister, chunk after chunk, for several chunk sizes;
 *  2. pipelined: chunk k+1 registered while chunk k's copy runs: does registration overlap copies?
 *  3. parallel: N threads registering disjoint chunks at once: does registration scale?
 * Uses the CUDA driver only (loaded with dlopen), no kvik.
 *
 * usage: bench_zero_copy_probe FILE   (the file should be in the page cache: read it once first) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef void *CUcontext;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
#define READ_ONLY 8 /* CU_MEMHOSTREGISTER_READ_ONLY */

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

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

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

/* N threads each register 1/N of the range at once; then all is unregistered (not timed). */
static double parallel_register(char *map, size_t bytes, int n) {
  struct worker w[16];
  double start = now();
  for (int i = 0; i < n; i++) {
    w[i] = (struct worker){map + bytes / (size_t)n * (size_t)i, bytes / (size_t)n, 0};
    pthread_create(&w[i].thread, NULL, register_range, &w[i]);
  }
  for (int i = 0; i < n; i++) pthread_join(w[i].thread, NULL);
  double seconds = now() - start;
  for (int i = 0; i < n; i++) CHECK(cu.host_unregister(w[i].p));
  return seconds;
}

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: %s FILE\n", argv[0]), 2;
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
  return 0;
}
