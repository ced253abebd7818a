/* Device IO against whichever libcuda.so.1 the loader finds: the fake driver of tests/fake_cuda.c
 * (CI puts build/tests/fake_cuda on LD_LIBRARY_PATH) or a real NVIDIA driver. The test loads the
 * driver itself (dlopen + dlsym) to make and check CUDA memory, and kvik loads the same library.
 *
 * Modes, chosen by what it finds:
 *  - no libcuda.so.1: host IO works, every pointer is host memory, and what needs the driver fails
 *    with KVIK_ECUDA_UNAVAILABLE and a message naming libcuda.so.1;
 *  - cuInit fails (the fake with FAKE_CUDA_DEVICES=0): the same, with a message naming cuInit;
 *  - otherwise the full suite: pointer classification; random reads and writes into device,
 *    stream-ordered pool, managed, pinned and registered memory compared byte for byte with the
 *    file, guard bytes around the destination included; threads with and without a current
 *    context; a second context; stream-ordered reads and writes (ordering proven by holding the
 *    stream with a host function, and on a real driver by a kernel run after the read);
 *    kvik_file_read_to_device; mapped files; zero-copy reads on, off and auto; fault injection
 *    and leak checks (fake only: they need its control API, absent from a real driver); a file
 *    over 4 GiB when KVIK_TEST_LARGE=1. ctest runs it once more with KVIK_ZERO_COPY_READ=auto,
 *    so that every read case also goes through the zero-copy path where it applies, and on the
 *    fake once more with KVIK_TEST_NO_CACHESTAT=1, where the page cache is asked with mincore(2).
 *
 * The random choices come from one seed, printed at the start and on failure; KVIK_TEST_SEED=N
 * repeats a run. Exit codes as in test.h: 0 pass, 1 fail. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

#include "test.h"
#include "../src/cuda.h"
#include "fake_cuda.h"
#include "fault_shim.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define PAGE ((size_t)4096)

#define FILE_BYTES (40 * MiB + 1234) /* the reference file that reads are checked against */
#define MAX_READ (20 * MiB)
#define AREA_BYTES (MAX_READ + MiB + 333) /* a read buffer: the largest read at an offset */
#define GUARD ((size_t)512)               /* bytes checked on each side of a destination */
#define READS_PER_KIND 25

/* ---- The driver, loaded by the test itself ------------------------------------------------ */

typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;

#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6

#define REQUIRED_FUNCTIONS(X)                                                                  \
  X(cuGetErrorName, CUresult, (CUresult, const char **))                                       \
  X(cuDeviceGet, CUresult, (CUdevice *, int))                                                  \
  X(cuDevicePrimaryCtxRetain, CUresult, (CUcontext *, CUdevice))                               \
  X(cuCtxPushCurrent_v2, CUresult, (CUcontext))                                                \
  X(cuCtxPopCurrent_v2, CUresult, (CUcontext *))                                               \
  X(cuCtxSetCurrent, CUresult, (CUcontext))                                                    \
  X(cuCtxGetCurrent, CUresult, (CUcontext *))                                                  \
  X(cuCtxCreate_v2, CUresult, (CUcontext *, unsigned, CUdevice))                               \
  X(cuCtxDestroy_v2, CUresult, (CUcontext))                                                    \
  X(cuMemAlloc_v2, CUresult, (CUdeviceptr *, size_t))                                          \
  X(cuMemFree_v2, CUresult, (CUdeviceptr))                                                     \
  X(cuMemAllocManaged, CUresult, (CUdeviceptr *, size_t, unsigned))                            \
  X(cuMemAllocAsync, CUresult, (CUdeviceptr *, size_t, CUstream))                              \
  X(cuMemFreeAsync, CUresult, (CUdeviceptr, CUstream))                                         \
  X(cuMemHostAlloc, CUresult, (void **, size_t, unsigned))                                     \
  X(cuMemFreeHost, CUresult, (void *))                                                         \
  X(cuMemcpyHtoD_v2, CUresult, (CUdeviceptr, const void *, size_t))                            \
  X(cuMemcpyDtoH_v2, CUresult, (void *, CUdeviceptr, size_t))                                  \
  X(cuMemcpyHtoDAsync_v2, CUresult, (CUdeviceptr, const void *, size_t, CUstream))             \
  X(cuMemcpyDtoHAsync_v2, CUresult, (void *, CUdeviceptr, size_t, CUstream))                   \
  X(cuStreamCreate, CUresult, (CUstream *, unsigned))                                          \
  X(cuStreamDestroy_v2, CUresult, (CUstream))                                                  \
  X(cuStreamSynchronize, CUresult, (CUstream))                                                 \
  X(cuLaunchHostFunc, CUresult, (CUstream, CUhostFn, void *))

/* Only a real driver has all of these; the fake has the module loads, which load nothing. */
#define KERNEL_FUNCTIONS(X)                                                                    \
  X(cuModuleLoadData, CUresult, (CUmodule *, const void *))                                    \
  X(cuModuleLoadDataEx, CUresult, (CUmodule *, const void *, unsigned, int *, void **))        \
  X(cuModuleGetFunction, CUresult, (CUfunction *, CUmodule, const char *))                     \
  X(cuLaunchKernel, CUresult,                                                                  \
    (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, \
     void **, void **))                                                                        \
  X(cuModuleUnload, CUresult, (CUmodule))

static struct {
  CUresult (*cuInit)(unsigned);
#define MEMBER_(name, ret, params) ret(*name) params;
  REQUIRED_FUNCTIONS(MEMBER_)
  KERNEL_FUNCTIONS(MEMBER_)
#undef MEMBER_
} cu;

/* The fake's control API; all NULL on a real driver. */
static struct {
  fake_cuda_fail_fn fail;
  fake_cuda_calls_fn calls;
  fake_cuda_live_fn live;
  fake_cuda_reset_fn reset;
  fake_cuda_slow_registration_fn slow_registration;
  fake_cuda_copies_beside_registration_fn copies_beside_registration;
  fake_cuda_spinning_waits_fn spinning_waits;
  fake_cuda_read_only_registrations_fn read_only_registrations;
} fake;

static const char *cu_error_name(CUresult r) {
  const char *name = NULL;
  if (!cu.cuGetErrorName || cu.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name) return "?";
  return name;
}

#define CU_OK(call)                                                                            \
  do {                                                                                         \
    CUresult r_ = (call);                                                                      \
    if (r_ != CUDA_SUCCESS) FAIL_AT("%s failed: CUDA error %d (%s)", #call, r_, cu_error_name(r_)); \
  } while (0)

static void resolve_driver(void *handle) {
#define RESOLVE_(name, ret, params)                                                            \
  *(void **)&cu.name = dlsym(handle, #name);                                                   \
  if (!cu.name) FAIL_AT("libcuda.so.1 lacks %s", #name);
  REQUIRED_FUNCTIONS(RESOLVE_)
#undef RESOLVE_
#define RESOLVE_OPTIONAL_(name, ret, params) *(void **)&cu.name = dlsym(handle, #name);
  KERNEL_FUNCTIONS(RESOLVE_OPTIONAL_)
#undef RESOLVE_OPTIONAL_
  *(void **)&fake.fail = dlsym(handle, "fake_cuda_fail");
  *(void **)&fake.calls = dlsym(handle, "fake_cuda_calls");
  *(void **)&fake.live = dlsym(handle, "fake_cuda_live");
  *(void **)&fake.reset = dlsym(handle, "fake_cuda_reset");
  *(void **)&fake.slow_registration = dlsym(handle, "fake_cuda_slow_registration");
  *(void **)&fake.copies_beside_registration = dlsym(handle, "fake_cuda_copies_beside_registration");
  *(void **)&fake.spinning_waits = dlsym(handle, "fake_cuda_spinning_waits");
  *(void **)&fake.read_only_registrations = dlsym(handle, "fake_cuda_read_only_registrations");
}

/* ---- Run state ---------------------------------------------------------------------------- */

static char *g_dir, *g_ref_path;
static unsigned char *g_ref; /* the reference file's bytes */
static unsigned char *g_scratch; /* AREA_BYTES of host memory for checks */
static uint64_t g_seed, g_rng;
static const char *g_case = "setup";
static int g_finished;
static CUdevice g_dev;
static CUcontext g_primary;
static CUstream g_alloc_stream; /* for cuMemAllocAsync */
static long g_own_device, g_own_pinned; /* allocations the test itself holds, for leak checks */

static void report_context(void) {
  if (!g_finished)
    fprintf(stderr, "  failed in case \"%s\"; seed %" PRIu64 " (KVIK_TEST_SEED=%" PRIu64 " repeats the run)\n",
            g_case, g_seed, g_seed);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

static CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }
static void *hptr(CUdeviceptr d) { return (void *)(uintptr_t)d; }

static size_t expected_count(size_t file_bytes, int64_t offset, size_t size) {
  if ((uint64_t)offset >= file_bytes) return 0;
  return size < file_bytes - (size_t)offset ? size : file_bytes - (size_t)offset;
}

static kvik_file *open_file(const char *path, const char *flags) {
  kvik_file *f = NULL;
  ASSERT_OK(kvik_file_open(path, flags, 0644, &f));
  return f;
}

/* ---- Test memory of every kind ------------------------------------------------------------ */

typedef enum buf_kind { BUF_DEVICE, BUF_POOL, BUF_MANAGED, BUF_PINNED, BUF_REGISTERED, BUF_HOST } buf_kind;
#define BUF_CUDA_KINDS 5 /* the kinds above BUF_HOST */

static const char *const buf_kind_names[] = {"device (cuMemAlloc)", "device (cuMemAllocAsync)", "managed",
                                             "pinned", "registered host", "pageable host"};

typedef struct tbuf {
  buf_kind kind;
  unsigned char *ptr;
  size_t size;
} tbuf;

/* Kinds the CPU must not touch here: read and written through the driver's copies. */
static int through_driver(buf_kind kind) { return kind == BUF_DEVICE || kind == BUF_POOL || kind == BUF_MANAGED; }

static unsigned char *dev_alloc(size_t size) {
  CUdeviceptr d = 0;
  CU_OK(cu.cuMemAlloc_v2(&d, size));
  g_own_device++;
  return hptr(d);
}

static void dev_free(void *p) {
  CU_OK(cu.cuMemFree_v2(dptr(p)));
  g_own_device--;
}

static unsigned char *pinned_alloc(size_t size) {
  void *h = NULL;
  CU_OK(cu.cuMemHostAlloc(&h, size, 0));
  g_own_pinned++;
  return h;
}

static void pinned_free(void *p) {
  CU_OK(cu.cuMemFreeHost(p));
  g_own_pinned--;
}

static tbuf tbuf_new(buf_kind kind, size_t size) {
  tbuf b = {kind, NULL, size};
  CUdeviceptr d = 0;
  void *h = NULL;
  if (kind == BUF_DEVICE) {
    b.ptr = dev_alloc(size);
  } else if (kind == BUF_POOL) {
    CU_OK(cu.cuMemAllocAsync(&d, size, g_alloc_stream));
    CU_OK(cu.cuStreamSynchronize(g_alloc_stream));
    g_own_device++;
    b.ptr = hptr(d);
  } else if (kind == BUF_MANAGED) {
    CU_OK(cu.cuMemAllocManaged(&d, size, CU_MEM_ATTACH_GLOBAL));
    g_own_device++;
    b.ptr = hptr(d);
  } else if (kind == BUF_PINNED) {
    b.ptr = pinned_alloc(size);
  } else {
    ASSERT_EQ(posix_memalign(&h, PAGE, size), 0);
    if (kind == BUF_REGISTERED) ASSERT_OK(kvik_host_pin(h, size));
    b.ptr = h;
  }
  return b;
}

static void tbuf_free(tbuf *b) {
  if (b->kind == BUF_POOL) {
    CU_OK(cu.cuMemFreeAsync(dptr(b->ptr), g_alloc_stream));
    CU_OK(cu.cuStreamSynchronize(g_alloc_stream));
    g_own_device--;
  } else if (through_driver(b->kind)) {
    dev_free(b->ptr);
  } else if (b->kind == BUF_PINNED) {
    pinned_free(b->ptr);
  } else {
    if (b->kind == BUF_REGISTERED) ASSERT_OK(kvik_host_unpin(b->ptr));
    free(b->ptr);
  }
  b->ptr = NULL;
}

/* cuMemcpyHtoD from pageable memory returns once its source is staged, before the DMA to the
 * device ends; kvik's streams do not wait for the legacy default stream, so the test does. */
static void copy_to_device(void *dev, const void *src, size_t n) {
  CU_OK(cu.cuMemcpyHtoD_v2(dptr(dev), src, n));
  CU_OK(cu.cuStreamSynchronize(NULL));
}

static void tbuf_put(const tbuf *b, size_t at, const void *src, size_t n) {
  if (through_driver(b->kind)) copy_to_device(b->ptr + at, src, n);
  else memcpy(b->ptr + at, src, n);
}

static void tbuf_get(const tbuf *b, size_t at, void *dst, size_t n) {
  if (through_driver(b->kind)) CU_OK(cu.cuMemcpyDtoH_v2(dst, dptr(b->ptr + at), n));
  else memcpy(dst, b->ptr + at, n);
}

/* A buffer with a host mirror of what it must hold: random bytes at first, then what each
 * read put there. Comparing a window with the mirror checks the bytes read and the guard bytes
 * around them at once. */
typedef struct area {
  tbuf buf;
  unsigned char *mirror;
} area;

static area area_new(buf_kind kind, size_t size) {
  area a = {tbuf_new(kind, size), malloc(size)};
  test_fill(a.mirror, size, test_rand(&g_rng));
  tbuf_put(&a.buf, 0, a.mirror, size);
  return a;
}

static void area_free(area *a) {
  tbuf_free(&a->buf);
  free(a->mirror);
}

/* The read of `want` bytes of `source` into [at, at + want) happened: check [at - GUARD,
 * at + size + GUARD) against the mirror. */
static void area_expect(area *a, size_t at, size_t size, const unsigned char *source, size_t want, const char *what) {
  memcpy(a->mirror + at, source, want);
  size_t lo = at > GUARD ? at - GUARD : 0;
  size_t hi = at + size + GUARD < a->buf.size ? at + size + GUARD : a->buf.size;
  tbuf_get(&a->buf, lo, g_scratch, hi - lo);
  long long diff = test_first_diff(g_scratch, a->mirror + lo, hi - lo);
  if (diff < 0) return;
  size_t pos = lo + (size_t)diff;
  FAIL_AT("%s into %s memory at +%zu (%zu bytes, %zu expected): byte %zu %s differs", what,
          buf_kind_names[a->buf.kind], at, size, want, pos,
          pos < at ? "before the destination" : pos < at + want ? "of the data read" : "past the bytes read");
}

/* ---- Modes without a usable driver --------------------------------------------------------- */

/* Host IO works, and whatever needs the driver fails cleanly with a message containing `why`. */
static void check_without_cuda(const char *why) {
  g_case = "without CUDA";
  char *path = test_path(g_dir, "host");
  size_t n = MiB + 77;
  unsigned char *data = malloc(n), *buf = malloc(n);
  test_fill(data, n, test_rand(&g_rng));
  test_write_file(path, data, n);
  kvik_file *f = open_file(path, "r");
  ASSERT_EQ(kvik_file_read(f, buf, n, 0), n);
  ASSERT_SAME_BYTES(buf, data, n);
  ASSERT_EQ(kvik_memory_kind_of(buf), KVIK_MEMORY_HOST);
  ASSERT_FAILS(kvik_cuda_device_count(), KVIK_ECUDA_UNAVAILABLE, why);
  ASSERT_FAILS(kvik_cuda_driver_version(), KVIK_ECUDA_UNAVAILABLE, why);
  ASSERT_FAILS(kvik_cuda_stream_synchronize(NULL, NULL), KVIK_ECUDA_UNAVAILABLE, why);
  ASSERT_FAILS(kvik_host_pin(buf, n), KVIK_ECUDA_UNAVAILABLE, why);
  kvik_future *fut = (kvik_future *)&fut;
  ASSERT_FAILS(kvik_file_read_async(f, buf, n, 0, NULL, &fut), KVIK_ECUDA_UNAVAILABLE, why);
  ASSERT(fut == NULL);
  void *dev = &dev;
  ASSERT_FAILS(kvik_file_read_to_device(f, 0, &dev), KVIK_ECUDA_UNAVAILABLE, why);
  ASSERT(dev == NULL);
  /* Host IO still works after all those failures. */
  memset(buf, 0, n);
  ASSERT_EQ(kvik_file_read(f, buf, n, 0), n);
  ASSERT_SAME_BYTES(buf, data, n);
  kvik_file_free(f);
  free(data);
  free(buf);
  free(path);
  printf("ok: without CUDA (%s): host IO works, CUDA calls fail with KVIK_ECUDA_UNAVAILABLE\n", why);
}

/* ---- 1. Classification ----------------------------------------------------------------------- */

static void test_classification(void) {
  g_case = "classification";
  size_t n = 3 * MiB + 5;
  void *host = malloc(n);
  test_fill(host, n, test_rand(&g_rng));
  ASSERT_EQ(kvik_memory_kind_of(host), KVIK_MEMORY_HOST);
  const int expected[BUF_CUDA_KINDS] = {KVIK_MEMORY_DEVICE, KVIK_MEMORY_DEVICE, KVIK_MEMORY_MANAGED,
                                        KVIK_MEMORY_PINNED, KVIK_MEMORY_PINNED};
  for (int k = 0; k < BUF_CUDA_KINDS; k++) {
    tbuf b = tbuf_new((buf_kind)k, n);
    if (kvik_memory_kind_of(b.ptr) != expected[k] || kvik_memory_kind_of(b.ptr + 12345) != expected[k])
      FAIL_AT("%s memory: kvik_memory_kind_of gives %d (+12345: %d), expected %d", buf_kind_names[k],
              kvik_memory_kind_of(b.ptr), kvik_memory_kind_of(b.ptr + 12345), expected[k]);
    tbuf_free(&b);
  }
  ASSERT_OK(kvik_host_pin(host, n));
  ASSERT_EQ(kvik_memory_kind_of(host), KVIK_MEMORY_PINNED);
  ASSERT_FAILS(kvik_host_pin(host, n), KVIK_ECUDA_BASE - CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
               "kvik_host_pin");
  ASSERT(strcmp(kvik_err_name(KVIK_ECUDA_BASE - CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED),
                "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED") == 0); /* the driver's name: it is loaded */
  ASSERT_OK(kvik_host_unpin(host));
  ASSERT_EQ(kvik_memory_kind_of(host), KVIK_MEMORY_HOST);
  ASSERT_FAILS(kvik_host_unpin(host), KVIK_ECUDA_BASE - CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
               "kvik_host_unpin");
  ASSERT_FAILS(kvik_host_pin(NULL, n), -EINVAL, "kvik_host_pin");
  ASSERT_FAILS(kvik_host_pin(host, 0), -EINVAL, "kvik_host_pin");
  free(host);
  printf("ok: classification of host, pinned, device, pool, managed and registered memory\n");
}

/* ---- 2. Reads ------------------------------------------------------------------------------- */

static const size_t task_sizes[] = {0, 64 * KiB, MiB + 4096, 8 * MiB};

/* Read [offset, offset + size) into the area at `at`: how 0 is kvik_file_read, how 1..4
 * kvik_file_pread with task_sizes[how - 1]. */
static void read_into(kvik_file *f, area *a, size_t at, int64_t offset, size_t size, int how) {
  unsigned char *dst = a->buf.ptr + at;
  ssize_t got;
  if (how == 0) {
    got = kvik_file_read(f, dst, size, offset);
  } else {
    kvik_future *fut = NULL;
    ASSERT_OK(kvik_file_pread(f, dst, size, offset, task_sizes[how - 1], &fut));
    got = kvik_future_wait(fut);
    ASSERT_EQ(kvik_future_done(fut), 1);
    if (got >= 0) ASSERT_EQ(kvik_future_bytes_done(fut), got);
    kvik_future_free(fut);
  }
  size_t want = expected_count(FILE_BYTES, offset, size);
  char what[160];
  snprintf(what, sizeof what, "%s of %zu bytes at %lld (task size %zu)", how ? "kvik_file_pread" : "kvik_file_read",
           size, (long long)offset, how ? task_sizes[how - 1] : 0);
  if (got != (ssize_t)want)
    FAIL_AT("%s into %s memory returned %zd (%s), expected %zu", what, buf_kind_names[a->buf.kind], got,
            got < 0 ? kvik_err_name((int)got) : "count", want);
  area_expect(a, at, size, g_ref + offset, want, what);
}

static size_t random_read_size(int i) {
  static const size_t edges[] = {0, 1, PAGE - 1, PAGE, PAGE + 1, MiB - 1, MiB, MiB + 1, 8 * MiB};
  switch (i % 6) {
  case 0: return test_below(&g_rng, MiB); /* below the GDS threshold: runs inline */
  case 1: return (1 + test_below(&g_rng, MAX_READ / PAGE)) * PAGE;
  case 2: return test_below(&g_rng, MAX_READ + 1);
  case 3: return 1 + test_below(&g_rng, 4 * MiB); /* placed across the end of the file */
  case 4: return edges[test_below(&g_rng, sizeof edges / sizeof edges[0])];
  default: return test_below(&g_rng, 64 * KiB);
  }
}

static void random_read(kvik_file *f, area *a, int i) {
  size_t size = random_read_size(i);
  int64_t offset;
  if (i % 6 == 3) offset = (int64_t)(FILE_BYTES - test_below(&g_rng, size));
  else if (i % 4 == 0) offset = (int64_t)(test_below(&g_rng, FILE_BYTES / PAGE) * PAGE);
  else offset = (int64_t)test_below(&g_rng, FILE_BYTES + 1000);
  size_t at = test_below(&g_rng, a->buf.size - size + 1);
  if (i % 3 == 0) at &= ~(PAGE - 1);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, i % 4 == 1));
  read_into(f, a, at, offset, size, i % 5);
}

static void test_reads(void) {
  g_case = "reads";
  if (fake.reset) fake.reset();
  kvik_file *f = open_file(g_ref_path, "r");
  for (int k = 0; k < BUF_CUDA_KINDS; k++) {
    area a = area_new((buf_kind)k, AREA_BYTES);
    for (int i = 0; i < READS_PER_KIND; i++) random_read(f, &a, i);
    area_free(&a);
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 0));
  kvik_file_free(f);
  /* Its threads sleep while copies run: a spinning waiter burns a core per thread. */
  if (fake.spinning_waits) ASSERT_EQ(fake.spinning_waits(), 0);
  printf("ok: %d random reads into each of %d kinds of memory\n", READS_PER_KIND, BUF_CUDA_KINDS);
}

/* A small blocking read or write is tried as host memory before its buffer is classified. Host
 * memory then asks the driver nothing. Device memory fails the first system call with EFAULT and
 * goes the device's way: the right bytes, this thread's message as it was, and one operation in a
 * monitor, not two. Before, every request of host memory asked cuPointerGetAttributes. */
static void small_device_request(kvik_file *f, kvik_file *w, unsigned char *dev, size_t n,
                                 int64_t at, const char *before) {
  ASSERT_EQ(kvik_file_read(f, dev, n, at), (ssize_t)n);
  ASSERT(strcmp(kvik_last_error(), before) == 0);
  CU_OK(cu.cuMemcpyDtoH_v2(g_scratch, dptr(dev), n));
  ASSERT_SAME_BYTES(g_scratch, g_ref + at, n);
  ASSERT_EQ(kvik_file_write(w, dev, n, at), (ssize_t)n);
  ASSERT(strcmp(kvik_last_error(), before) == 0);
}

static void test_small_requests(void) {
  g_case = "small requests";
  kvik_file *f = open_file(g_ref_path, "r");
  char *path = test_path(g_dir, "small");
  kvik_file *w = open_file(path, "w+");
  unsigned char host[2 * PAGE];
  if (fake.reset) fake.reset();
  ASSERT_EQ(kvik_file_read(f, host, sizeof host, 3 * PAGE + 5), (ssize_t)sizeof host);
  ASSERT_SAME_BYTES(host, g_ref + 3 * PAGE + 5, sizeof host);
  if (fake.calls) ASSERT_EQ(fake.calls("cuPointerGetAttributes"), 0);
  kvik_file *none;
  ASSERT(kvik_file_open("/nonexistent/kvik-small", "r", 0, &none) < 0);
  char before[1024];
  snprintf(before, sizeof before, "%s", kvik_last_error());
  kvik_monitor *m;
  ASSERT_OK(kvik_monitor_create(&m));
  enum { N = 4 };
  static const size_t sizes[N] = {1, PAGE, 3 * PAGE + 17, 256 * KiB};
  int64_t at[N] = {0, 7, 3 * PAGE + 1, MiB + 99};
  unsigned char *dev = dev_alloc(256 * KiB);
  for (int i = 0; i < N; i++) small_device_request(f, w, dev, sizes[i], at[i], before);
  kvik_summary sum = {.struct_size = sizeof sum};
  ASSERT_OK(kvik_monitor_read(m, &sum));
  kvik_monitor_free(m);
  ASSERT_EQ(sum.num_reads, N);
  ASSERT_EQ(sum.num_writes, N);
  ASSERT_EQ(sum.num_errors, 0);
  dev_free(dev);
  kvik_file_free(w);
  size_t n;
  unsigned char *back = test_read_file(path, &n);
  for (int i = 0; i < N; i++) ASSERT_SAME_BYTES(back + at[i], g_ref + at[i], sizes[i]);
  free(back);
  kvik_file_free(f);
  free(path);
  printf("ok: small reads and writes: of host memory without asking the driver, of device memory "
         "the right bytes\n");
}

/* ---- 3. Writes ------------------------------------------------------------------------------ */

#define WFILE_BYTES (12 * MiB + 999)
#define WSRC_BYTES (8 * MiB + 777)
#define WMODEL_BYTES (3 * WFILE_BYTES)

static size_t random_write_size(int i) {
  static const size_t edges[] = {0, 1, PAGE - 1, PAGE, PAGE + 1, MiB + 1};
  switch (i % 4) {
  case 0: return test_below(&g_rng, MiB);
  case 1: return test_below(&g_rng, WSRC_BYTES / PAGE + 1) * PAGE;
  case 2: return test_below(&g_rng, WSRC_BYTES + 1);
  default: return edges[test_below(&g_rng, sizeof edges / sizeof edges[0])];
  }
}

/* One write of `size` bytes of the buffer at `from` to `offset`: how 0 is kvik_file_write,
 * 1..4 kvik_file_pwrite with task_sizes[how - 1]. */
static void write_from(kvik_file *f, const tbuf *b, size_t from, int64_t offset, size_t size, int how) {
  ssize_t put;
  if (how == 0) {
    put = kvik_file_write(f, b->ptr + from, size, offset);
  } else {
    kvik_future *fut = NULL;
    ASSERT_OK(kvik_file_pwrite(f, b->ptr + from, size, offset, task_sizes[how - 1], &fut));
    put = kvik_future_wait(fut);
    kvik_future_free(fut);
  }
  if (put != (ssize_t)size)
    FAIL_AT("write %d of %zu bytes from %s memory +%zu at %lld returned %zd (%s)", how, size, buf_kind_names[b->kind],
            from, (long long)offset, put, put < 0 ? kvik_err_name((int)put) : "count");
}

static void writes_from(buf_kind kind) {
  char *path = test_path(g_dir, "written");
  unsigned char *model = calloc(1, WMODEL_BYTES), *src = malloc(WSRC_BYTES);
  size_t model_len = WFILE_BYTES;
  test_fill(model, model_len, test_rand(&g_rng));
  test_write_file(path, model, model_len);
  test_fill(src, WSRC_BYTES, test_rand(&g_rng));
  tbuf b = tbuf_new(kind, WSRC_BYTES);
  tbuf_put(&b, 0, src, WSRC_BYTES);
  kvik_file *f = open_file(path, "r+");
  for (int i = 0; i < 14; i++) {
    size_t size = random_write_size(i);
    size_t from = test_below(&g_rng, WSRC_BYTES - size + 1);
    int extend = i % 5 == 4 && model_len + 100000 + size <= WMODEL_BYTES; /* past the end, leaving a hole */
    int64_t offset = (int64_t)(extend ? model_len + test_below(&g_rng, 100000) : test_below(&g_rng, model_len));
    /* Writes that grow the file can follow each other, so the model's end bounds them all; a write
     * moved to end there may start past the file's end, leaving a hole, as the model's zeros do. */
    if ((size_t)offset + size > WMODEL_BYTES) offset = (int64_t)(WMODEL_BYTES - size);
    ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, i % 6 == 5));
    write_from(f, &b, from, offset, size, i % 5);
    memcpy(model + offset, src + from, size);
    if (size && (size_t)offset + size > model_len) model_len = (size_t)offset + size;
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, 0));
  ASSERT_EQ(kvik_file_size(f), model_len);
  kvik_file_free(f);
  size_t n;
  unsigned char *content = test_read_file(path, &n);
  ASSERT_EQ(n, model_len);
  long long diff = test_first_diff(content, model, n);
  if (diff >= 0) FAIL_AT("after writes from %s memory the file differs at byte %lld", buf_kind_names[kind], diff);
  free(content);
  tbuf_free(&b);
  free(src);
  free(model);
  free(path);
}

static void test_writes(void) {
  g_case = "writes";
  const buf_kind kinds[] = {BUF_DEVICE, BUF_POOL, BUF_MANAGED, BUF_PINNED};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) writes_from(kinds[k]);
  printf("ok: random writes from device, pool, managed and pinned memory\n");
}

/* ---- 4. Threads ----------------------------------------------------------------------------- */

#define READERS 4
#define SLOTS 4
#define SLOT_BYTES (3 * MiB + 517)

typedef struct reader {
  int index;
  int with_context; /* else the thread never has a current context: kvik must find one */
  kvik_file *file;
  tbuf buf;
  int64_t offsets[SLOTS];
  pthread_t thread;
} reader;

static void *reader_main(void *arg) {
  reader *r = arg;
  if (r->with_context) CU_OK(cu.cuCtxSetCurrent(g_primary));
  for (int j = 0; j < SLOTS; j++) {
    unsigned char *dst = r->buf.ptr + (size_t)j * SLOT_BYTES;
    ssize_t got;
    if (j % 2 == 0) {
      got = kvik_file_read(r->file, dst, SLOT_BYTES, r->offsets[j]);
    } else {
      kvik_future *fut = NULL;
      ASSERT_OK(kvik_file_pread(r->file, dst, SLOT_BYTES, r->offsets[j], 256 * KiB + 4096, &fut));
      got = kvik_future_wait(fut);
      kvik_future_free(fut);
    }
    if (got != (ssize_t)SLOT_BYTES)
      FAIL_AT("thread %d (%s) read into %s memory returned %zd", r->index,
              r->with_context ? "context current" : "no context", buf_kind_names[r->buf.kind], got);
    CUcontext current = NULL;
    CU_OK(cu.cuCtxGetCurrent(&current));
    if (current != (r->with_context ? g_primary : NULL))
      FAIL_AT("thread %d: kvik left context %p current, expected %p", r->index, (void *)current,
              (void *)(r->with_context ? g_primary : NULL));
  }
  return NULL;
}

static void check_reader(const reader *r, unsigned char *host) {
  tbuf_get(&r->buf, 0, host, SLOTS * SLOT_BYTES);
  for (int j = 0; j < SLOTS; j++) {
    long long diff = test_first_diff(host + (size_t)j * SLOT_BYTES, g_ref + r->offsets[j], SLOT_BYTES);
    if (diff >= 0) FAIL_AT("thread %d, slot %d (file offset %lld): byte %lld differs", r->index, j,
                           (long long)r->offsets[j], diff);
  }
}

static void test_threads(void) {
  g_case = "threads";
  kvik_file *f = open_file(g_ref_path, "r");
  reader readers[READERS];
  unsigned char *host = malloc(SLOTS * SLOT_BYTES);
  for (int i = 0; i < READERS; i++)
    readers[i] = (reader){i, i % 2 == 0, f, tbuf_new(i == 3 ? BUF_POOL : BUF_DEVICE, SLOTS * SLOT_BYTES), {0}, 0};
  const int pool_threads[] = {1, 3, 8};
  for (int t = 0; t < 3; t++) {
    ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, pool_threads[t]));
    for (int i = 0; i < READERS; i++) {
      for (int j = 0; j < SLOTS; j++) readers[i].offsets[j] = (int64_t)test_below(&g_rng, FILE_BYTES - SLOT_BYTES);
      ASSERT_EQ(pthread_create(&readers[i].thread, NULL, reader_main, &readers[i]), 0);
    }
    for (int i = 0; i < READERS; i++) ASSERT_EQ(pthread_join(readers[i].thread, NULL), 0);
    for (int i = 0; i < READERS; i++) check_reader(&readers[i], host);
  }
  for (int i = 0; i < READERS; i++) tbuf_free(&readers[i].buf);
  free(host);
  kvik_file_free(f);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  printf("ok: %d threads at once, with and without a current context, pool of 1, 3 and 8 threads\n", READERS);
}

/* ---- 5. Another context ----------------------------------------------------------------------- */

/* Read into memory of context `ctx` while `current` (maybe NULL) is current, then check. */
static void read_in_other_context(kvik_file *f, CUcontext ctx, unsigned char *dev, size_t n, CUcontext current) {
  int64_t offset = (int64_t)test_below(&g_rng, FILE_BYTES - n);
  CU_OK(cu.cuCtxSetCurrent(current));
  ssize_t got = kvik_file_read(f, dev, n, offset);
  CUcontext after = NULL;
  CU_OK(cu.cuCtxGetCurrent(&after));
  CU_OK(cu.cuCtxSetCurrent(g_primary));
  if (got != (ssize_t)n) FAIL_AT("read into another context's memory (current %p) returned %zd", (void *)current, got);
  ASSERT(after == current);
  CU_OK(cu.cuCtxPushCurrent_v2(ctx));
  CU_OK(cu.cuMemcpyDtoH_v2(g_scratch, dptr(dev), n));
  CU_OK(cu.cuCtxPopCurrent_v2(NULL));
  long long diff = test_first_diff(g_scratch, g_ref + offset, n);
  if (diff >= 0) FAIL_AT("read into another context's memory: byte %lld differs", diff);
}

static void test_other_context(void) {
  g_case = "another context";
  kvik_file *f = open_file(g_ref_path, "r");
  size_t n = 6 * MiB + 4321;
  CUcontext destroyed = NULL;
  /* Three times: a context made after one was destroyed may get the same handle, and kvik must
   * not take it for the old one. */
  for (int round = 0; round < 3; round++) {
    CUcontext ctx = NULL, popped = NULL;
    CU_OK(cu.cuCtxCreate_v2(&ctx, 0, g_dev));
    if (ctx == destroyed) printf("note: the new context got the handle of the destroyed one\n");
    unsigned char *dev = dev_alloc(n);
    CU_OK(cu.cuCtxPopCurrent_v2(&popped));
    ASSERT(popped == ctx);
    ASSERT_EQ(kvik_memory_kind_of(dev), KVIK_MEMORY_DEVICE);
    read_in_other_context(f, ctx, dev, n, g_primary);
    read_in_other_context(f, ctx, dev, n, NULL);
    CU_OK(cu.cuCtxPushCurrent_v2(ctx));
    dev_free(dev);
    CU_OK(cu.cuCtxPopCurrent_v2(NULL));
    CU_OK(cu.cuCtxDestroy_v2(ctx));
    CU_OK(cu.cuCtxSetCurrent(g_primary));
    destroyed = ctx;
  }
  kvik_file_free(f);
  printf("ok: reads into memory of a second context, with the primary or no context current\n");
}

/* ---- 6. Stream-ordered IO ------------------------------------------------------------------- */

/* A host function that holds its stream until *gate is set. */
static void hold_stream(void *arg) {
  atomic_int *gate = arg;
  while (!atomic_load(gate)) sleep_ms(1);
}

/* A thread that sets *gate to `value` after delay_ms, unless it was set before. */
typedef struct releaser {
  atomic_int *gate;
  int delay_ms, value;
  pthread_t thread;
} releaser;

static void *release_main(void *arg) {
  releaser *r = arg;
  for (int waited = 0; waited < r->delay_ms && !atomic_load(r->gate); waited++) sleep_ms(1);
  int expected = 0;
  atomic_compare_exchange_strong(r->gate, &expected, r->value);
  return NULL;
}

static void releaser_start(releaser *r, atomic_int *gate, int delay_ms, int value) {
  *r = (releaser){gate, delay_ms, value, 0};
  ASSERT_EQ(pthread_create(&r->thread, NULL, release_main, r), 0);
}

#define GATE_BY_TEST 1
#define GATE_BY_WATCHDOG 2

/* (a) The call returns while the stream is held, and a copy queued after it sees its data. */
static void stream_read_is_ordered(kvik_file *f, unsigned flags, unsigned char *dev, unsigned char *pinned) {
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, flags));
  size_t n = 6 * MiB + 123;
  int64_t offset = 777;
  copy_to_device(dev, g_ref + 5 * MiB, n); /* other bytes than the read's */
  atomic_int gate = 0;
  releaser watchdog;
  releaser_start(&watchdog, &gate, 10000, GATE_BY_WATCHDOG);
  CU_OK(cu.cuLaunchHostFunc(s, hold_stream, &gate));
  kvik_future *fut = NULL;
  ASSERT_OK(kvik_file_read_async(f, dev, n, offset, s, &fut));
  if (atomic_load(&gate) == GATE_BY_WATCHDOG) FAIL_AT("kvik_file_read_async blocked until its stream moved on");
  ASSERT(fut != NULL);
  sleep_ms(20);
  ASSERT_EQ(kvik_future_done(fut), 0);
  CU_OK(cu.cuMemcpyDtoHAsync_v2(pinned, dptr(dev), n, s));
  int expected = 0;
  atomic_compare_exchange_strong(&gate, &expected, GATE_BY_TEST);
  CU_OK(cu.cuStreamSynchronize(s));
  ASSERT_EQ(kvik_future_done(fut), 1);
  ASSERT_EQ(kvik_future_wait(fut), n);
  kvik_future_free(fut);
  ASSERT_EQ(pthread_join(watchdog.thread, NULL), 0);
  long long diff = test_first_diff(pinned, g_ref + offset, n);
  if (diff >= 0) FAIL_AT("stream (flags %u): the copy after the read saw byte %lld differ", flags, diff);
  CU_OK(cu.cuStreamDestroy_v2(s));
}

/* (b) A write of device memory that a copy queued just before it fills. */
static void stream_write_is_ordered(CUstream s, unsigned char *dev, unsigned char *pinned) {
  char *path = test_path(g_dir, "stream_written");
  size_t file_bytes = 9 * MiB + 31, n = 5 * MiB + 999;
  int64_t offset = 4096 + 13;
  test_write_file(path, g_ref, file_bytes);
  kvik_file *f = open_file(path, "r+");
  test_fill(pinned, n, test_rand(&g_rng));
  copy_to_device(dev, g_ref, n); /* what a write that ran too early would see */
  atomic_int gate = 0;
  CU_OK(cu.cuLaunchHostFunc(s, hold_stream, &gate));
  CU_OK(cu.cuMemcpyHtoDAsync_v2(dptr(dev), pinned, n, s));
  kvik_future *fut = NULL;
  ASSERT_OK(kvik_file_write_async(f, dev, n, offset, s, &fut));
  sleep_ms(10);
  ASSERT_EQ(kvik_future_done(fut), 0);
  atomic_store(&gate, GATE_BY_TEST);
  CU_OK(cu.cuStreamSynchronize(s));
  ASSERT_EQ(kvik_future_done(fut), 1);
  ASSERT_EQ(kvik_future_wait(fut), n);
  kvik_future_free(fut);
  kvik_file_free(f);
  size_t got_n;
  unsigned char *content = test_read_file(path, &got_n);
  ASSERT_EQ(got_n, file_bytes);
  ASSERT_SAME_BYTES(content, g_ref, (size_t)offset);
  ASSERT_SAME_BYTES(content + offset, pinned, n);
  ASSERT_SAME_BYTES(content + offset + n, g_ref + offset + n, file_bytes - (size_t)offset - n);
  free(content);
  free(path);
}

/* Read on `stream`, synchronise it, check the future and the bytes. */
static void stream_read_checked(kvik_file *f, CUstream s, unsigned char *dev, size_t n, int64_t offset) {
  size_t want = expected_count(FILE_BYTES, offset, n);
  test_fill(g_scratch, n, test_rand(&g_rng));
  copy_to_device(dev, g_scratch, n);
  kvik_future *fut = NULL;
  ASSERT_OK(kvik_file_read_async(f, dev, n, offset, s, &fut));
  CU_OK(cu.cuStreamSynchronize(s));
  ASSERT_EQ(kvik_future_done(fut), 1);
  ssize_t got = kvik_future_wait(fut);
  if (got != (ssize_t)want)
    FAIL_AT("read_async of %zu at %lld on stream %p returned %zd, expected %zu", n, (long long)offset, (void *)s,
            got, want);
  kvik_future_free(fut);
  unsigned char *back = malloc(n);
  CU_OK(cu.cuMemcpyDtoH_v2(back, dptr(dev), n));
  ASSERT_SAME_BYTES(back, g_ref + offset, want);
  ASSERT_SAME_BYTES(back + want, g_scratch + want, n - want); /* past the end of file: untouched */
  free(back);
}

/* (e) Freeing a future the stream has not reached waits for the stream. */
static void stream_free_waits(kvik_file *f, CUstream s, unsigned char *dev) {
  atomic_int gate = 0;
  CU_OK(cu.cuLaunchHostFunc(s, hold_stream, &gate));
  kvik_future *fut = NULL;
  ASSERT_OK(kvik_file_read_async(f, dev, 2 * MiB + 1, 0, s, &fut));
  releaser r;
  releaser_start(&r, &gate, 50, GATE_BY_TEST);
  double start = now_s();
  kvik_future_free(fut);
  double waited = now_s() - start;
  if (!atomic_load(&gate)) FAIL_AT("kvik_future_free returned after %.3f s, before its stream reached the read", waited);
  ASSERT_EQ(pthread_join(r.thread, NULL), 0);
  CU_OK(cu.cuStreamSynchronize(s));
}

/* Adds 1 (mod 256) to each of n bytes at data. */
static const char add_one_ptx[] =
    ".version 7.0\n"
    ".target sm_52\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry add_one(\n"
    "  .param .u64 add_one_param_0,\n"
    "  .param .u64 add_one_param_1\n"
    ")\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b16 %rs<3>;\n"
    "  .reg .b32 %r<4>;\n"
    "  .reg .b64 %rd<7>;\n"
    "\n"
    "  ld.param.u64 %rd1, [add_one_param_0];\n"
    "  ld.param.u64 %rd2, [add_one_param_1];\n"
    "  mov.u32 %r1, %ctaid.x;\n"
    "  mov.u32 %r2, %ntid.x;\n"
    "  mov.u32 %r3, %tid.x;\n"
    "  cvt.u64.u32 %rd3, %r3;\n"
    "  mad.wide.u32 %rd4, %r1, %r2, %rd3;\n"
    "  setp.ge.u64 %p1, %rd4, %rd2;\n"
    "  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd5, %rd1;\n"
    "  add.s64 %rd6, %rd5, %rd4;\n"
    "  ld.global.u8 %rs1, [%rd6];\n"
    "  add.s16 %rs2, %rs1, 1;\n"
    "  st.global.u8 [%rd6], %rs2;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

static int load_add_one(CUmodule *module) {
  char log[4096] = "";
  CUresult r;
  if (cu.cuModuleLoadDataEx) {
    int options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[] = {log, (void *)(uintptr_t)sizeof log};
    r = cu.cuModuleLoadDataEx(module, add_one_ptx, 2, options, values);
  } else {
    r = cu.cuModuleLoadData(module, add_one_ptx);
  }
  if (r != CUDA_SUCCESS) printf("note: the PTX kernel did not load (%s): %s\n", cu_error_name(r), log);
  return r == CUDA_SUCCESS;
}

/* (f) A kernel queued after the read sees the read's bytes. */
static void stream_read_then_kernel(kvik_file *f, CUstream s, unsigned char *dev, unsigned char *pinned) {
  CUmodule module;
  CUfunction fn;
  if (!(cu.cuModuleLoadData || cu.cuModuleLoadDataEx) || !cu.cuLaunchKernel || !load_add_one(&module)) {
    printf("skipped: read_async followed by a kernel (the driver cannot load PTX: a fake?)\n");
    return;
  }
  CU_OK(cu.cuModuleGetFunction(&fn, module, "add_one"));
  unsigned long long n = 7 * MiB + 11;
  int64_t offset = 12345;
  atomic_int gate = 0;
  CU_OK(cu.cuLaunchHostFunc(s, hold_stream, &gate));
  kvik_future *fut = NULL;
  ASSERT_OK(kvik_file_read_async(f, dev, n, offset, s, &fut));
  CUdeviceptr data = dptr(dev);
  void *args[] = {&data, &n};
  CU_OK(cu.cuLaunchKernel(fn, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, s, args, NULL));
  CU_OK(cu.cuMemcpyDtoHAsync_v2(pinned, data, n, s));
  atomic_store(&gate, GATE_BY_TEST);
  CU_OK(cu.cuStreamSynchronize(s));
  ASSERT_EQ(kvik_future_wait(fut), n);
  kvik_future_free(fut);
  for (size_t i = 0; i < n; i++)
    if (pinned[i] != (unsigned char)(g_ref[offset + (int64_t)i] + 1))
      FAIL_AT("after read_async and the kernel, byte %zu is %d, expected %d", i, pinned[i],
              (unsigned char)(g_ref[offset + (int64_t)i] + 1));
  CU_OK(cu.cuModuleUnload(module));
  printf("ok: a kernel queued after read_async sees the bytes read\n");
}

/* Ends the process with a failure unless stopped within `seconds`: a hang must fail the test. */
typedef struct watchdog {
  atomic_int stop;
  int seconds;
  const char *what;
  pthread_t thread;
} watchdog;

static void *watchdog_main(void *arg) {
  watchdog *w = arg;
  for (int ms = 0; ms < w->seconds * 1000; ms += 10) {
    if (atomic_load(&w->stop)) return NULL;
    sleep_ms(10);
  }
  fprintf(stderr, "FAIL: %s hung for %d s (case \"%s\")\n", w->what, w->seconds, g_case);
  _exit(1);
}

static void watchdog_start(watchdog *w, int seconds, const char *what) {
  atomic_init(&w->stop, 0);
  w->seconds = seconds;
  w->what = what;
  ASSERT_EQ(pthread_create(&w->thread, NULL, watchdog_main, w), 0);
}

static void watchdog_stop(watchdog *w) {
  atomic_store(&w->stop, 1);
  ASSERT_EQ(pthread_join(w->thread, NULL), 0);
}

/* What frameworks do while IO is queued on a stream: a call that waits for the device. */
static void wait_for_device_as_frameworks_do(int i) {
  if (i % 2 == 0 && cu.cuModuleLoadData && cu.cuModuleUnload) {
    CUmodule module;
    if (load_add_one(&module)) CU_OK(cu.cuModuleUnload(module));
  } else {
    CUdeviceptr scratch;
    CU_OK(cu.cuMemAlloc_v2(&scratch, MiB));
    CU_OK(cu.cuMemFree_v2(scratch));
  }
}

/* (g) Stream-ordered reads and writes, each followed before it completes by a call that waits for
 * the device (a module load, cuMemFree): nothing hangs, and the bytes are right. kvik 0.1 held the
 * stream in a host function until pool threads had made their copies, which waited for the module
 * load, which waited for the stream (issue 24). The fake driver hangs the same way. */
static void stream_io_beside_device_waits(kvik_file *f, unsigned char *dev) {
  char *path = test_path(g_dir, "stream_beside");
  test_write_file(path, g_ref, 0);
  kvik_file *w = open_file(path, "r+");
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  watchdog dog;
  watchdog_start(&dog, 120, "stream-ordered IO beside calls that wait for the device");
  size_t written = 0;
  for (int i = 0; i < 40; i++) {
    size_t n = 1 + test_rand(&g_rng) % (6 * MiB);
    int64_t offset = (int64_t)(test_rand(&g_rng) % (FILE_BYTES - n));
    kvik_future *r = NULL, *wr = NULL;
    ASSERT_OK(kvik_file_read_async(f, dev, n, offset, s, &r));
    wait_for_device_as_frameworks_do(i);
    ASSERT_OK(kvik_file_write_async(w, dev, n, (int64_t)written, s, &wr));
    wait_for_device_as_frameworks_do(i + 1);
    CU_OK(cu.cuStreamSynchronize(s));
    ASSERT_EQ(kvik_future_wait(r), n);
    ASSERT_EQ(kvik_future_wait(wr), n);
    kvik_future_free(r);
    kvik_future_free(wr);
    int fd = open(path, O_RDONLY);
    ASSERT(fd >= 0);
    ASSERT_EQ(lseek(fd, 0, SEEK_END), (off_t)(written + n));
    ASSERT_EQ(pread(fd, g_scratch, n, (off_t)written), (ssize_t)n);
    close(fd);
    ASSERT_SAME_BYTES(g_scratch, g_ref + offset, n);
    written += n;
  }
  watchdog_stop(&dog);
  CU_OK(cu.cuStreamDestroy_v2(s));
  kvik_file_free(w);
  unlink(path);
  free(path);
  printf("ok: stream-ordered reads and writes beside module loads and cuMemFree\n");
}

/* (h) Requests of many chunks, whose slots are reused: a read of 40 MiB in tasks of 64 KiB (which
 * makes 256 chunks of 160 KiB) on a stream held while it is queued, then a write of what it read.
 * The call must return while the stream is held: a stream holds about a thousand operations, and a
 * design that held its operations back until all were queued (a wait for a flag set at the end)
 * made a call of more chunks wait for a stream that waited for it. */
static void stream_many_chunks(kvik_file *f) {
  size_t n = 40 * MiB;
  int64_t offset = 1000;
  unsigned char *dev = dev_alloc(n);
  char *path = test_path(g_dir, "stream_many");
  test_write_file(path, g_ref, 0);
  kvik_file *w = open_file(path, "r+");
  int64_t task_size;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_TASK_SIZE, &task_size));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, 64 * (int64_t)KiB));
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  watchdog dog;
  watchdog_start(&dog, 120, "a stream-ordered read of 256 chunks on a held stream");
  atomic_int gate = 0;
  CU_OK(cu.cuLaunchHostFunc(s, hold_stream, &gate));
  kvik_future *r = NULL, *wr = NULL;
  ASSERT_OK(kvik_file_read_async(f, dev, n, offset, s, &r));
  atomic_store(&gate, GATE_BY_TEST);
  ASSERT_OK(kvik_file_write_async(w, dev, n, 0, s, &wr));
  CU_OK(cu.cuStreamSynchronize(s));
  watchdog_stop(&dog);
  ASSERT_EQ(kvik_future_wait(r), n);
  ASSERT_EQ(kvik_future_wait(wr), n);
  kvik_future_free(r);
  kvik_future_free(wr);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, task_size));
  unsigned char *back = malloc(n);
  CU_OK(cu.cuMemcpyDtoH_v2(back, dptr(dev), n));
  ASSERT_SAME_BYTES(back, g_ref + offset, n);
  free(back);
  size_t got_n;
  unsigned char *content = test_read_file(path, &got_n);
  ASSERT_EQ(got_n, n);
  ASSERT_SAME_BYTES(content, g_ref + offset, n);
  free(content);
  CU_OK(cu.cuStreamDestroy_v2(s));
  kvik_file_free(w);
  unlink(path);
  free(path);
  dev_free(dev);
  printf("ok: stream-ordered reads and writes of 256 chunks, queued on a held stream\n");
}

/* (e) kvik_cuda_stream_synchronize() returns only once the work queued on the stream has run; the
 * default-stream handles name the default stream of the memory's context, also on a thread where no
 * context is current (a worker thread of the caller's, say). */
static void *synchronize_legacy_stream(void *dev) {
  intptr_t rc = kvik_cuda_stream_synchronize((void *)(uintptr_t)1, dev);
  return (void *)rc;
}

static void stream_synchronize_waits(CUstream s, unsigned char *dev) {
  atomic_int gate = 0;
  releaser late;
  releaser_start(&late, &gate, 50, GATE_BY_TEST);
  CU_OK(cu.cuLaunchHostFunc(s, hold_stream, &gate));
  ASSERT_OK(kvik_cuda_stream_synchronize(s, NULL));
  ASSERT_EQ(atomic_load(&gate), GATE_BY_TEST);
  ASSERT_EQ(pthread_join(late.thread, NULL), 0);
  ASSERT_OK(kvik_cuda_stream_synchronize(NULL, dev));
  pthread_t worker;
  void *rc;
  ASSERT_EQ(pthread_create(&worker, NULL, synchronize_legacy_stream, dev), 0);
  ASSERT_EQ(pthread_join(worker, &rc), 0);
  ASSERT_EQ((intptr_t)rc, 0);
}

static void test_streams(void) {
  g_case = "stream-ordered IO";
  kvik_file *f = open_file(g_ref_path, "r");
  unsigned char *dev = dev_alloc(8 * MiB), *pinned = pinned_alloc(8 * MiB);
  stream_read_is_ordered(f, 0, dev, pinned);
  stream_read_is_ordered(f, CU_STREAM_NON_BLOCKING, dev, pinned);
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  stream_write_is_ordered(s, dev, pinned);
  stream_read_checked(f, NULL, dev, 3 * MiB + 3, 4 * MiB + 1); /* (c) the default stream */
  stream_read_checked(f, s, dev, 5000, (int64_t)FILE_BYTES - 1000); /* (d) across the end of file */
  stream_read_checked(f, s, dev, 5000, (int64_t)FILE_BYTES + 1);
  stream_read_checked(f, s, dev, 300 * KiB, 99); /* below the GDS threshold */
  stream_free_waits(f, s, dev);
  stream_read_then_kernel(f, s, dev, pinned);
  stream_synchronize_waits(s, dev);
  stream_io_beside_device_waits(f, dev);
  stream_many_chunks(f);
  CU_OK(cu.cuStreamDestroy_v2(s));
  dev_free(dev);
  pinned_free(pinned);
  kvik_file_free(f);
  printf("ok: stream-ordered reads and writes (held streams, default stream, end of file, free waits), "
         "stream synchronisation\n");
}

/* ---- 7. kvik_file_read_to_device --------------------------------------------------------------- */

static void test_read_to_device(void) {
  g_case = "read_to_device";
  long live_before = fake.live ? fake.live("device") : 0;
  kvik_file *f = open_file(g_ref_path, "r");
  void *dev = NULL;
  ASSERT_EQ(kvik_file_read_to_device(f, 0, &dev), FILE_BYTES);
  ASSERT(dev != NULL);
  ASSERT_EQ(kvik_memory_kind_of(dev), KVIK_MEMORY_DEVICE);
  unsigned char *back = malloc(FILE_BYTES);
  CU_OK(cu.cuMemcpyDtoH_v2(back, dptr(dev), FILE_BYTES));
  ASSERT_SAME_BYTES(back, g_ref, FILE_BYTES);
  ASSERT_EQ(kvik_device_free(dev), 0);
  ASSERT_EQ(kvik_device_free(NULL), 0);
  if (fake.live) ASSERT_EQ(fake.live("device"), live_before);
  dev = &dev;
  ASSERT_FAILS(kvik_file_read_to_device(f, 99, &dev), -EINVAL, "99");
  ASSERT(dev == NULL);
  kvik_file_free(f);
  char *empty = test_path(g_dir, "empty");
  test_write_file(empty, "", 0);
  f = open_file(empty, "r");
  dev = &dev;
  ASSERT_EQ(kvik_file_read_to_device(f, 0, &dev), 0);
  ASSERT(dev == NULL);
  kvik_file_free(f);
  free(empty);
  free(back);
  printf("ok: kvik_file_read_to_device (whole file, empty file, bad device)\n");
}

/* ---- 8. Mapped files ------------------------------------------------------------------------ */

static void mmap_read_into(kvik_mmap *m, area *a, size_t at, int64_t offset, size_t size, int how) {
  ssize_t got;
  unsigned char *dst = a->buf.ptr + at;
  if (how == 0) {
    got = kvik_mmap_read(m, dst, size, offset);
  } else {
    kvik_future *fut = NULL;
    ASSERT_OK(kvik_mmap_pread(m, dst, size, offset, task_sizes[how - 1], &fut));
    got = kvik_future_wait(fut);
    kvik_future_free(fut);
  }
  char what[128];
  snprintf(what, sizeof what, "kvik_mmap_%s of %zu bytes at %lld", how ? "pread" : "read", size, (long long)offset);
  if (got != (ssize_t)size) FAIL_AT("%s returned %zd", what, got);
  area_expect(a, at, size, g_ref + offset, size, what);
}

static void test_mmap(void) {
  g_case = "mapped files";
  area areas[2] = {area_new(BUF_DEVICE, AREA_BYTES), area_new(BUF_HOST, AREA_BYTES)};
  kvik_mmap *m = NULL;
  ASSERT_OK(kvik_mmap_open(g_ref_path, "r", 0, 0, &m));
  ASSERT_EQ(kvik_mmap_map_size(m), FILE_BYTES);
  for (int i = 0; i < 16; i++) {
    size_t size = i % 3 == 0 ? test_below(&g_rng, MiB) : test_below(&g_rng, 8 * MiB);
    int64_t offset = (int64_t)test_below(&g_rng, FILE_BYTES - size + 1);
    area *a = &areas[i % 2];
    mmap_read_into(m, a, test_below(&g_rng, AREA_BYTES - size + 1), offset, size, i % 5);
  }
  kvik_future *fut = (kvik_future *)&fut;
  ASSERT_FAILS(kvik_mmap_read(m, areas[0].buf.ptr, 20, (int64_t)FILE_BYTES - 10), -EINVAL, "outside");
  ASSERT_FAILS(kvik_mmap_pread(m, areas[0].buf.ptr, 20, (int64_t)FILE_BYTES - 10, 0, &fut), -EINVAL, "outside");
  ASSERT(fut == NULL);
  kvik_mmap_free(m);
  /* A mapping of part of the file, starting off a page boundary. */
  int64_t map_offset = 4096 + 7;
  size_t map_size = 100000;
  ASSERT_OK(kvik_mmap_open(g_ref_path, "r", map_size, map_offset, &m));
  ASSERT_EQ(kvik_mmap_map_offset(m), map_offset);
  ASSERT_EQ(kvik_mmap_map_size(m), map_size);
  mmap_read_into(m, &areas[0], 1000, map_offset, map_size, 0);
  mmap_read_into(m, &areas[1], 3, map_offset + 5, map_size - 5, 2);
  mmap_read_into(m, &areas[0], 77, map_offset + 50000, 1234, 1);
  ASSERT_FAILS(kvik_mmap_read(m, areas[0].buf.ptr, 10, map_offset - 1), -EINVAL, "outside");
  ASSERT_FAILS(kvik_mmap_read(m, areas[0].buf.ptr, 11, map_offset + (int64_t)map_size - 10), -EINVAL, "outside");
  kvik_mmap_free(m);
  area_free(&areas[0]);
  area_free(&areas[1]);
  printf("ok: mapped files read into device and host memory\n");
}

/* ---- Zero-copy reads from the page cache ----------------------------------------------------- */

#define ZC_GRANULE (64 * MiB) /* KVIK__ZC_GRANULE: the unit of registration */
#define ZC_BIG_BYTES (2 * ZC_GRANULE + 3 * MiB + 777) /* three granules, the last one short */
#define ZC_READERS 4
#define ZC_RACING_READS 400 /* one in ten large, the others at most 64 KiB */

/* A file of ZC_BIG_BYTES random bytes at `path`; returns them, for the caller to free. */
static unsigned char *zc_big_file(const char *path) {
  unsigned char *content = malloc(ZC_BIG_BYTES);
  test_fill(content, ZC_BIG_BYTES, test_rand(&g_rng));
  test_write_file(path, content, ZC_BIG_BYTES);
  return content;
}

/* Zero-copy (read-only) registrations asked for so far and live, and asynchronous copies to the
 * device so far; 0 on a real driver (not counted). kvik's pinned bounce buffers are registered
 * too, but not read-only. */
static long registrations(void) { return fake.read_only_registrations ? fake.read_only_registrations() : 0; }
static long registered_live(void) { return fake.live ? fake.live("read-only") : 0; }
static long h2d_copies(void) { return fake.calls ? fake.calls("cuMemcpyHtoDAsync_v2") : 0; }

static int file_resident(const char *path) {
  size_t resident = 0, total = 0;
  ASSERT_OK(kvik_page_cache_info(path, &resident, &total));
  return resident == total;
}

static int file_range_resident(const char *path, size_t offset, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ASSERT(fd >= 0);
  void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, (off_t)offset);
  ASSERT(map != MAP_FAILED);
  unsigned char *vec = malloc(size / PAGE);
  ASSERT_EQ(mincore(map, size, vec), 0);
  int resident = 1;
  for (size_t i = 0; i < size / PAGE; i++) resident &= vec[i] & 1;
  free(vec);
  munmap(map, size);
  close(fd);
  return resident;
}

/* kvik_file_read of [offset, offset + size) into `dev`, checked against `content`, the file's
 * `file_bytes` bytes; `tag` names the case in a failure. */
static void zc_read_check(kvik_file *f, unsigned char *dev, const unsigned char *content, size_t file_bytes,
                          int64_t offset, size_t size, const char *tag) {
  ssize_t got = kvik_file_read(f, dev, size, offset);
  size_t want = expected_count(file_bytes, offset, size);
  if (got != (ssize_t)want)
    FAIL_AT("%s: read of %zu bytes at %lld returned %zd (%s), expected %zu", tag, size, (long long)offset, got,
            got < 0 ? kvik_err_name((int)got) : "count", want);
  unsigned char *host = malloc(want ? want : 1);
  CU_OK(cu.cuMemcpyDtoH_v2(host, dptr(dev), want));
  long long diff = test_first_diff(host, content + offset, want);
  free(host);
  if (diff >= 0) FAIL_AT("%s: read of %zu bytes at %lld: byte %lld differs", tag, size, (long long)offset, diff);
}

/* zc_read_check in one task, so that the read's front takes all of it (in more tasks, the back
 * may take any part, a whole granule too): for counting the registrations of one read. */
static void zc_read_in_one_task(kvik_file *f, unsigned char *dev, const unsigned char *content, size_t file_bytes,
                                int64_t offset, size_t size, const char *tag) {
  int64_t task_size;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_TASK_SIZE, &task_size));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, (int64_t)size));
  zc_read_check(f, dev, content, file_bytes, offset, size, tag);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, task_size));
}

/* Open `path` afresh (no registrations), read it with zero-copy at `mode`; returns the
 * registrations made. Whole: one read of the whole file first, in one task so that its front
 * registers the file, then random ones. */
static long zc_reads(const char *path, const unsigned char *content, size_t file_bytes, int mode, int whole,
                     size_t max_read, int nreads, unsigned char *dev) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, mode));
  kvik_file *f = open_file(path, "r");
  long before = registrations();
  if (whole) zc_read_in_one_task(f, dev, content, file_bytes, 0, file_bytes, "whole file");
  for (int i = 0; i < nreads; i++) {
    size_t size = 1 + test_below(&g_rng, max_read);
    int64_t offset = (int64_t)test_below(&g_rng, file_bytes + 1000);
    zc_read_check(f, dev, content, file_bytes, offset, size, "random read");
  }
  long made = registrations() - before;
  ASSERT(registered_live() <= made); /* the handle holds what it registered, failed calls aside */
  kvik_file_free(f);
  ASSERT_EQ(registered_live(), 0);
  return made;
}

/* The chooser, against the fake's counts: ON registers the file's one granule once, whatever the
 * reads; OFF never; AUTO a resident file when a read is large enough to pay for it, never for
 * small reads alone, never a file out of the page cache. */
static void zc_modes(unsigned char *dev) {
  long on = zc_reads(g_ref_path, g_ref, FILE_BYTES, KVIK_ON, 0, MAX_READ, 12, dev);
  long off = zc_reads(g_ref_path, g_ref, FILE_BYTES, KVIK_OFF, 1, MAX_READ, 12, dev);
  int resident = file_resident(g_ref_path);
  long autom = zc_reads(g_ref_path, g_ref, FILE_BYTES, KVIK_AUTO, 1, MAX_READ, 12, dev);
  long small = zc_reads(g_ref_path, g_ref, FILE_BYTES, KVIK_AUTO, 0, MiB, 12, dev);
  if (!fake.calls) return;
  ASSERT_EQ(on, 1);
  ASSERT_EQ(off, 0);
  if (resident) ASSERT_EQ(autom, 1);
  ASSERT_EQ(small, 0);
  ASSERT_OK(kvik_page_cache_drop(g_ref_path));
  size_t cached = 0;
  ASSERT_OK(kvik_page_cache_info(g_ref_path, &cached, NULL));
  /* One read in one task: its check comes before its reading brings the file back. */
  int64_t task_size;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_TASK_SIZE, &task_size));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, (int64_t)FILE_BYTES));
  if (cached == 0) ASSERT_EQ(zc_reads(g_ref_path, g_ref, FILE_BYTES, KVIK_AUTO, 1, MAX_READ, 0, dev), 0);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, task_size));
}

/* A refused registration sends that read to the bounce buffers and the next one tries again;
 * "not supported" stops all tries until the setting is set again. */
static void zc_refusals(unsigned char *dev) {
  if (!fake.fail) return;
  fake.reset();
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_ON));
  kvik_file *f = open_file(g_ref_path, "r");
  fake.fail("cuMemHostRegister_v2", 1, CUDA_ERROR_OUT_OF_MEMORY);
  long before = registrations();
  for (int i = 0; i < 2; i++) zc_read_check(f, dev, g_ref, FILE_BYTES, (int64_t)i * MiB, 2 * MiB, "refused once");
  ASSERT_EQ(registrations() - before, 2);
  kvik_file_free(f);
  f = open_file(g_ref_path, "r");
  fake.fail("cuMemHostRegister_v2", 1, CUDA_ERROR_NOT_SUPPORTED);
  before = registrations();
  for (int i = 0; i < 4; i++) zc_read_check(f, dev, g_ref, FILE_BYTES, (int64_t)i * MiB, 2 * MiB, "not supported");
  ASSERT_EQ(registrations() - before, 1);
  kvik_file_free(f);
  ASSERT_EQ(zc_reads(g_ref_path, g_ref, FILE_BYTES, KVIK_ON, 1, MAX_READ, 0, dev), 1);
}

/* A file changed under a handle with registrations: rewritten (truncated and written again,
 * same size), then truncated. Each read returns what pread(2) would: the registrations of the
 * old file are dropped, never read from. */
static void zc_changes(unsigned char *dev) {
  char *path = test_path(g_dir, "zc-changing");
  unsigned char *content = malloc(FILE_BYTES);
  memcpy(content, g_ref, FILE_BYTES);
  test_write_file(path, content, FILE_BYTES);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_ON));
  kvik_file *f = open_file(path, "r");
  zc_read_check(f, dev, content, FILE_BYTES, 0, FILE_BYTES, "before the change");
  long before = registrations();
  sleep_ms(10); /* a later mtime, also where time stamps are coarse */
  test_fill(content, FILE_BYTES, test_rand(&g_rng));
  test_write_file(path, content, FILE_BYTES);
  zc_read_in_one_task(f, dev, content, FILE_BYTES, 12345, 20 * MiB, "after a rewrite");
  if (fake.calls) ASSERT_EQ(registrations() - before, 1);
  size_t shorter = FILE_BYTES / 3 + 77;
  ASSERT_EQ(truncate(path, (off_t)shorter), 0);
  zc_read_check(f, dev, content, shorter, 0, FILE_BYTES, "after a truncation");
  zc_read_check(f, dev, content, shorter, (int64_t)shorter - 5000, 4096, "after a truncation");
  kvik_file_free(f);
  ASSERT_EQ(registered_live(), 0);
  unlink(path);
  free(path);
  free(content);
}

typedef struct zc_writer {
  int fd;
  const unsigned char *a, *b; /* the two versions written in turn */
  size_t bytes;
  atomic_int stop;
  pthread_t thread;
} zc_writer;

static void *zc_write_main(void *arg) {
  zc_writer *w = arg;
  for (int turn = 0; !atomic_load(&w->stop); turn++) {
    const unsigned char *src = turn % 2 ? w->b : w->a;
    size_t chunk = 256 * KiB;
    for (size_t at = 0; at < w->bytes; at += chunk) {
      size_t n = w->bytes - at < chunk ? w->bytes - at : chunk;
      if (pwrite(w->fd, src + at, n, (off_t)at) != (ssize_t)n) FAIL_AT("pwrite: %s", strerror(errno));
    }
  }
  return NULL;
}

/* Reads racing writes of the same bytes: every byte read is the old or the new one. */
static void zc_concurrent_writes(unsigned char *dev) {
  const size_t bytes = 24 * MiB;
  char *path = test_path(g_dir, "zc-written");
  unsigned char *b = malloc(bytes), *host = malloc(bytes);
  test_fill(b, bytes, test_rand(&g_rng));
  test_write_file(path, g_ref, bytes);
  zc_writer w = {open(path, O_WRONLY | O_CLOEXEC), g_ref, b, bytes, 0, 0};
  ASSERT(w.fd >= 0);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_ON));
  kvik_file *f = open_file(path, "r");
  ASSERT_EQ(pthread_create(&w.thread, NULL, zc_write_main, &w), 0);
  for (int i = 0; i < 8; i++) {
    size_t size = 1 + test_below(&g_rng, bytes), offset = test_below(&g_rng, bytes - size + 1);
    ASSERT_EQ(kvik_file_read(f, dev, size, (int64_t)offset), (ssize_t)size);
    CU_OK(cu.cuMemcpyDtoH_v2(host, dptr(dev), size));
    for (size_t j = 0; j < size; j++)
      if (host[j] != g_ref[offset + j] && host[j] != b[offset + j])
        FAIL_AT("read of %zu bytes at %zu during writes: byte %zu is neither old nor new", size, offset, j);
  }
  atomic_store(&w.stop, 1);
  ASSERT_EQ(pthread_join(w.thread, NULL), 0);
  close(w.fd);
  kvik_file_free(f);
  unlink(path);
  free(path);
  free(b);
  free(host);
}

/* Reads while the file is truncated and restored under them. The GPU copies registered pages,
 * which a truncation takes out of the file but not out of memory, so no SIGBUS can reach the
 * process: each read returns a count (short where it met the end of the shortened file), and
 * each byte is the file's, or zero where the file was read between its extension and its
 * rewrite. Most reads are small, since the driver reads a small copy's source with the CPU,
 * which a truncated page faults (those take the bounce buffers). Only on a real driver: the
 * fake's CPU copy out of a truncated mapping would fault. */
static void zc_truncation_race(unsigned char *dev) {
  if (fake.calls) {
    printf("skipped: reads racing truncations (the fake driver copies with the CPU)\n");
    return;
  }
  char *path = test_path(g_dir, "zc-truncated");
  test_write_file(path, g_ref, FILE_BYTES);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_ON));
  kvik_file *f = open_file(path, "r");
  zc_read_check(f, dev, g_ref, FILE_BYTES, 0, FILE_BYTES, "before the truncations");
  test_truncator t;
  test_truncator_start(&t, path, g_ref, FILE_BYTES);
  unsigned char *host = malloc(FILE_BYTES);
  int short_reads = 0;
  for (int i = 0; i < ZC_RACING_READS; i++) {
    size_t size = 1 + test_below(&g_rng, i % 10 ? 64 * KiB : FILE_BYTES);
    size_t offset = test_below(&g_rng, FILE_BYTES - size + 1);
    ssize_t got = kvik_file_read(f, dev, size, (int64_t)offset);
    if (got < 0 || (size_t)got > size)
      FAIL_AT("read of %zu bytes at %zu during truncations returned %zd (%s)", size, offset, got,
              got < 0 ? kvik_err_name((int)got) : "count");
    short_reads += (size_t)got < size;
    CU_OK(cu.cuMemcpyDtoH_v2(host, dptr(dev), (size_t)got));
    long long foreign = test_first_foreign(host, g_ref + offset, (size_t)got);
    if (foreign >= 0)
      FAIL_AT("read of %zu bytes at %zu during truncations: byte %lld is neither the file's nor zero", size, offset,
              foreign);
  }
  test_truncator_stop(&t);
  zc_read_check(f, dev, g_ref, FILE_BYTES, 0, FILE_BYTES, "after the truncations");
  kvik_file_free(f);
  unlink(path);
  free(path);
  free(host);
  printf("ok: %d reads racing truncations (%d short)\n", ZC_RACING_READS, short_reads);
}

typedef struct zc_reader {
  kvik_file *file;
  const unsigned char *content;
  unsigned char *dev;
  uint64_t rng;
  pthread_t thread;
} zc_reader;

static void *zc_reader_main(void *arg) {
  zc_reader *r = arg;
  CU_OK(cu.cuCtxSetCurrent(g_primary));
  for (int i = 0; i < 6; i++) {
    size_t size = 1 + test_below(&r->rng, MAX_READ);
    int64_t offset = (int64_t)test_below(&r->rng, ZC_BIG_BYTES + 1000);
    zc_read_check(r->file, r->dev, r->content, ZC_BIG_BYTES, offset, size, "concurrent reader");
  }
  return NULL;
}

/* A file of three granules, partly in the page cache: AUTO registers only resident granules;
 * then readers on several threads read across granule boundaries while registrations happen. */
static void zc_granules(unsigned char *dev) {
  char *path = test_path(g_dir, "zc-big");
  unsigned char *content = zc_big_file(path);
  ASSERT_OK(kvik_page_cache_drop(path));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_AUTO));
  kvik_file *f = open_file(path, "r");
  size_t cached = 0;
  ASSERT_OK(kvik_page_cache_info(path, &cached, NULL));
  long before = registrations();
  zc_read_check(f, dev, content, ZC_BIG_BYTES, (int64_t)ZC_GRANULE, ZC_GRANULE, "second granule");
  /* The front finds the granule out of the page cache and reads it through the bounce buffers, as
   * the back does: it does not ask again for a granule it gave up. */
  if (fake.calls && cached == 0) ASSERT_EQ(registrations() - before, 0);
  int now_resident = file_range_resident(path, ZC_GRANULE, ZC_GRANULE);
  zc_read_in_one_task(f, dev, content, ZC_BIG_BYTES, (int64_t)ZC_GRANULE, ZC_GRANULE, "second granule, resident");
  if (fake.calls && cached == 0 && now_resident) ASSERT_EQ(registrations() - before, 1);
  zc_read_check(f, dev, content, ZC_BIG_BYTES, (int64_t)ZC_GRANULE - 333, 2 * MiB, "across granules");
  zc_reader readers[ZC_READERS];
  for (int i = 0; i < ZC_READERS; i++) {
    readers[i] = (zc_reader){f, content, dev_alloc(MAX_READ), test_rand(&g_rng), 0};
    ASSERT_EQ(pthread_create(&readers[i].thread, NULL, zc_reader_main, &readers[i]), 0);
  }
  for (int i = 0; i < ZC_READERS; i++) ASSERT_EQ(pthread_join(readers[i].thread, NULL), 0);
  for (int i = 0; i < ZC_READERS; i++) dev_free(readers[i].dev);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_ON));
  zc_read_check(f, dev, content, ZC_BIG_BYTES, 0, MAX_READ, "first granule");
  zc_read_check(f, dev, content, ZC_BIG_BYTES, (int64_t)(ZC_BIG_BYTES - MAX_READ / 2), MAX_READ, "to the end");
  kvik_file_free(f);
  ASSERT_EQ(registered_live(), 0);
  unlink(path);
  free(path);
  free(content);
}

/* A first read of [offset, offset + size) of `path` on a fresh handle, checked; adds the
 * registrations and host-to-device copies it made to the counts (on the fake only). */
static void zc_first_read(const char *path, const unsigned char *content, int64_t offset, size_t size,
                          unsigned char *dev, const char *tag, long *registered, long *copies) {
  kvik_file *f = open_file(path, "r");
  long registered_before = registrations(), copies_before = h2d_copies();
  zc_read_check(f, dev, content, ZC_BIG_BYTES, offset, size, tag);
  *registered = registrations() - registered_before;
  *copies = h2d_copies() - copies_before;
  kvik_file_free(f);
}

/* A first read takes its granules in order on one thread, one registration and one copy each;
 * with one pool thread, or in one task, that is all of it. With more threads the other tasks
 * read from the far end through the bounce buffers meanwhile: with registration made slow, a read
 * of three granules on 4 threads makes more copies than granules, and registers no granule that
 * the back took whole. The back's copies are queued by the front between its registrations (a
 * back task may queue one itself, if it found the relay closed just before the front opened it).
 * Once a handle registered every granule, later reads copy each from the mapping, with no bounce
 * buffers and no registration. */
static void zc_first_read_split(unsigned char *dev) {
  char *path = test_path(g_dir, "zc-split");
  unsigned char *content = zc_big_file(path);
  int64_t threads, task_size;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_NUM_THREADS, &threads));
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_TASK_SIZE, &task_size));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_ON));
  long registered, copies;
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 1));
  zc_first_read(path, content, 0, ZC_BIG_BYTES, dev, "one thread", &registered, &copies);
  if (fake.calls) {
    ASSERT_EQ(registered, 3);
    ASSERT_EQ(copies, 3);
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, (int64_t)ZC_BIG_BYTES));
  zc_first_read(path, content, 0, ZC_BIG_BYTES, dev, "one task", &registered, &copies);
  if (fake.calls) {
    ASSERT_EQ(registered, 3);
    ASSERT_EQ(copies, 3);
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, task_size));
  if (fake.slow_registration) fake.slow_registration(20000);
  long beside = fake.copies_beside_registration ? fake.copies_beside_registration() : 0;
  zc_first_read(path, content, 0, ZC_BIG_BYTES, dev, "4 threads, slow registration", &registered, &copies);
  if (fake.slow_registration) fake.slow_registration(0);
  if (fake.calls) {
    ASSERT(registered >= 1 && registered <= 2);
    ASSERT(copies > registered);
    ASSERT(fake.copies_beside_registration() - beside <= 3);
  }
  kvik_file *f = open_file(path, "r");
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 1));
  zc_read_check(f, dev, content, ZC_BIG_BYTES, 0, ZC_BIG_BYTES, "first read");
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  long before = registrations(), copies_before = h2d_copies();
  zc_read_check(f, dev, content, ZC_BIG_BYTES, 0, ZC_BIG_BYTES, "read again");
  if (fake.calls) ASSERT_EQ(h2d_copies() - copies_before, 3); /* the back leaves registered granules alone */
  for (int i = 0; i < 8; i++) {
    size_t size = 1 + test_below(&g_rng, ZC_BIG_BYTES);
    zc_read_check(f, dev, content, ZC_BIG_BYTES, (int64_t)test_below(&g_rng, ZC_BIG_BYTES - size + 1), size,
                  "read again");
  }
  ASSERT_EQ(registrations() - before, 0);
  kvik_file_free(f);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, threads));
  ASSERT_EQ(registered_live(), 0);
  unlink(path);
  free(path);
  free(content);
}

static void test_zero_copy(void) {
  g_case = "zero-copy reads";
  int64_t mode_before;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_ZERO_COPY_READ, &mode_before));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 0));
  unsigned char *dev = dev_alloc(ZC_BIG_BYTES);
  zc_modes(dev);
  zc_refusals(dev);
  zc_changes(dev);
  zc_concurrent_writes(dev);
  zc_truncation_race(dev);
  zc_granules(dev);
  zc_first_read_split(dev);
  dev_free(dev);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, mode_before));
  printf("ok: zero-copy reads on, off and auto%s; files rewritten, truncated and written during reads; %d "
         "readers on a file of 3 granules; first reads split between the mapping and bounce buffers\n",
         fake.calls ? ", registrations counted" : "", ZC_READERS);
}

/* ---- 9. Fault injection (fake driver only) ---------------------------------------------------- */

/* After a failure kvik must still work: a normal read into the same memory. */
static void normal_read_works(kvik_file *f, unsigned char *dev) {
  fake.reset();
  size_t n = 5 * MiB + 3;
  int64_t offset = (int64_t)test_below(&g_rng, FILE_BYTES - n);
  ssize_t got = kvik_file_read(f, dev, n, offset);
  if (got != (ssize_t)n) FAIL_AT("the read after an injected failure returned %zd (%s)", got, kvik_err_name((int)got));
  CU_OK(cu.cuMemcpyDtoH_v2(g_scratch, dptr(dev), n));
  ASSERT_SAME_BYTES(g_scratch, g_ref + offset, n);
}

static void fault_pinned_alloc(kvik_file *f, unsigned char *dev) {
  /* kvik caches pinned buffers by size: a bounce size never used before forces an allocation. */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, 16 * MiB));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 3 * MiB + 5 * 4096));
  fake.reset();
  fake.fail("cuMemHostRegister_v2", 1, CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_FAILS(kvik_file_read(f, dev, 8 * MiB, 0), KVIK_ECUDA_BASE - CUDA_ERROR_OUT_OF_MEMORY, "cuMemHostRegister");
  ASSERT_EQ(fake.calls("cuMemHostRegister_v2"), 1);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, 4 * MiB));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 16 * MiB));
  normal_read_works(f, dev);
}

static void fault_copy_to_device(kvik_file *f, unsigned char *dev) {
  size_t n = 8 * MiB;
  fake.reset();
  fake.fail("cuMemcpyHtoDAsync_v2", 2, CUDA_ERROR_UNKNOWN);
  kvik_future *fut = NULL;
  ASSERT_OK(kvik_file_pread(f, dev, n, 0, n, &fut)); /* one task of four 2 MiB chunks */
  ASSERT_FAILS(kvik_future_wait(fut), KVIK_ECUDA_BASE - CUDA_ERROR_UNKNOWN, "cuMemcpyHtoDAsync");
  size_t done = kvik_future_bytes_done(fut);
  if (done >= n) FAIL_AT("a read whose second copy failed reports %zu of %zu bytes done", done, n);
  kvik_future_free(fut);
  normal_read_works(f, dev);
}

/* A copy failing in a split first read, with registration slowed so that most of the back's
 * copies are queued by the front for it (the relay, zero_copy_read.c): the read fails with the
 * copy's error and reports fewer bytes than asked, nothing is left registered, and the handle
 * reads again. */
static void fault_copy_in_split(void) {
  char *path = test_path(g_dir, "fault_split");
  unsigned char *content = zc_big_file(path), *dev = dev_alloc(ZC_BIG_BYTES);
  int64_t mode, threads;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_ZERO_COPY_READ, &mode));
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_NUM_THREADS, &threads));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_ON));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  kvik_file *f = open_file(path, "r");
  fake.reset();
  fake.slow_registration(20000);
  fake.fail("cuMemcpyHtoDAsync_v2", 3, CUDA_ERROR_UNKNOWN);
  kvik_future *fut = NULL;
  ASSERT_OK(kvik_file_pread(f, dev, ZC_BIG_BYTES, 0, 0, &fut));
  ASSERT_FAILS(kvik_future_wait(fut), KVIK_ECUDA_BASE - CUDA_ERROR_UNKNOWN, "cuMemcpyHtoDAsync");
  ASSERT(kvik_future_bytes_done(fut) < ZC_BIG_BYTES);
  kvik_future_free(fut);
  fake.slow_registration(0);
  fake.reset();
  zc_read_check(f, dev, content, ZC_BIG_BYTES, 0, ZC_BIG_BYTES, "after a failed copy in a split read");
  kvik_file_free(f);
  ASSERT_EQ(registered_live(), 0);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, threads));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, mode));
  dev_free(dev);
  unlink(path);
  free(path);
  free(content);
}

static void fault_copy_from_device(unsigned char *dev) {
  char *path = test_path(g_dir, "fault_written");
  kvik_file *w = open_file(path, "w");
  fake.reset();
  fake.fail("cuMemcpyDtoHAsync_v2", 1, CUDA_ERROR_UNKNOWN);
  ASSERT_FAILS(kvik_file_write(w, dev, 3 * MiB + 5, 0), KVIK_ECUDA_BASE - CUDA_ERROR_UNKNOWN, "cuMemcpyDtoHAsync");
  fake.reset();
  ASSERT_EQ(kvik_file_write(w, dev, 3 * MiB + 5, 0), 3 * MiB + 5);
  kvik_file_free(w);
  free(path);
}

static void fault_stream(kvik_file *f, unsigned char *dev) {
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  fake.reset();
  fake.fail("cuLaunchHostFunc", 1, CUDA_ERROR_UNKNOWN);
  kvik_future *fut = (kvik_future *)&fut;
  ASSERT_FAILS(kvik_file_read_async(f, dev, 4 * MiB, 0, s, &fut), KVIK_ECUDA_BASE - CUDA_ERROR_UNKNOWN,
               "cuLaunchHostFunc");
  ASSERT(fut == NULL);
  /* Every copy of a stream-ordered read is queued during the call: one that cannot be fails the
   * call, and what was queued before it still passes, so the stream goes on. Four chunks: */
  int64_t task_size;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_TASK_SIZE, &task_size));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, (int64_t)MiB));
  for (int nth = 1; nth <= 4; nth++) {
    fake.reset();
    fake.fail("cuMemcpyHtoDAsync_v2", nth, CUDA_ERROR_UNKNOWN);
    fut = (kvik_future *)&fut;
    ASSERT_FAILS(kvik_file_read_async(f, dev, 4 * MiB, 0, s, &fut), KVIK_ECUDA_BASE - CUDA_ERROR_UNKNOWN,
                 "cuMemcpyHtoDAsync");
    ASSERT(fut == NULL);
    CU_OK(cu.cuStreamSynchronize(s));
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, task_size));
  /* A driver without stream memory operations: the call waits for the stream, then reads. */
  fake.reset();
  fake.fail("cuStreamWriteValue32_v2", 1, CUDA_ERROR_NOT_SUPPORTED);
  stream_read_checked(f, s, dev, 4 * MiB, 3);
  ASSERT_EQ(fake.calls("cuStreamWriteValue32_v2"), 1);
  ASSERT_EQ(fake.calls("cuStreamWaitValue32_v2"), 0);
  fake.reset();
  stream_read_checked(f, s, dev, 4 * MiB, 1);
  CU_OK(cu.cuStreamDestroy_v2(s));
}

static void fault_device_alloc(kvik_file *f) {
  long live_before = fake.live("device");
  fake.reset();
  fake.fail("cuMemAlloc_v2", 1, CUDA_ERROR_OUT_OF_MEMORY);
  void *out = &out;
  ASSERT_FAILS(kvik_file_read_to_device(f, 0, &out), KVIK_ECUDA_BASE - CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc");
  ASSERT(out == NULL);
  ASSERT_EQ(fake.live("device"), live_before);
}

static void check_no_leaks(void) {
  ASSERT_EQ(fake.live("read-only"), 0);
  ASSERT_EQ(fake.live("device"), g_own_device);
  ASSERT_EQ(fake.live("pinned"), g_own_pinned);
  long bounce = fake.live("registered"); /* kvik's idle pinned buffers, and nothing else */
  if (bounce > (long)(KVIK_PINNED_CACHE_BYTES / PAGE))
    FAIL_AT("%ld registrations live, more than kvik's pinned caches keep", bounce);
}

static void test_faults(void) {
  g_case = "fault injection";
  if (!fake.fail || !fake.calls || !fake.live || !fake.reset) {
    printf("skipped: fault injection and leak checks (the driver has no fake_cuda_* control API)\n");
    return;
  }
  /* These failures are on the bounce-buffer path. */
  int64_t mode_before;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_ZERO_COPY_READ, &mode_before));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_OFF));
  kvik_file *f = open_file(g_ref_path, "r");
  unsigned char *dev = dev_alloc(8 * MiB);
  fault_pinned_alloc(f, dev);
  fault_copy_to_device(f, dev);
  fault_copy_from_device(dev);
  fault_stream(f, dev);
  fault_device_alloc(f);
  normal_read_works(f, dev);
  if (fake.slow_registration) fault_copy_in_split();
  check_no_leaks();
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, mode_before));
  dev_free(dev);
  kvik_file_free(f);
  printf("ok: injected failures of cuMemHostRegister, copies (in a split zero-copy read too), cuLaunchHostFunc and "
         "cuMemAlloc; no leaks\n");
}

/* ---- 10. Over 4 GiB (KVIK_TEST_LARGE=1) --------------------------------------------------- */

#define LARGE_BYTES (((size_t)9 << 29) + 777) /* 4.5 GiB + 777 */
#define LARGE_PIECE (256 * MiB)
#define LARGE_KEY 0x9E3779B97F4A7C15ULL

/* Bytes [pos, pos + n) of the large file: each 8-byte word is its offset ^ LARGE_KEY. */
static void large_pattern(unsigned char *buf, size_t n, size_t pos) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t word = (uint64_t)(pos + i) ^ LARGE_KEY;
    memcpy(buf + i, &word, n - i < 8 ? n - i : 8);
  }
}

static void large_write(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) FAIL_AT("open(%s): %s", path, strerror(errno));
  unsigned char *piece = malloc(LARGE_PIECE);
  for (size_t pos = 0; pos < LARGE_BYTES;) {
    size_t n = LARGE_BYTES - pos < LARGE_PIECE ? LARGE_BYTES - pos : LARGE_PIECE;
    large_pattern(piece, n, pos);
    for (size_t done = 0; done < n;) {
      ssize_t r = pwrite(fd, piece + done, n - done, (off_t)(pos + done));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) FAIL_AT("pwrite(%s): %s", path, strerror(errno));
      done += (size_t)r;
    }
    pos += n;
  }
  free(piece);
  close(fd);
}

static void large_check(const void *dev, const char *what) {
  unsigned char *got = malloc(LARGE_PIECE), *want = malloc(LARGE_PIECE);
  for (size_t pos = 0; pos < LARGE_BYTES; pos += LARGE_PIECE) {
    size_t n = LARGE_BYTES - pos < LARGE_PIECE ? LARGE_BYTES - pos : LARGE_PIECE;
    CU_OK(cu.cuMemcpyDtoH_v2(got, dptr(dev) + pos, n));
    large_pattern(want, n, pos);
    if (memcmp(got, want, n) != 0)
      FAIL_AT("%s of the large file: byte %lld differs", what, (long long)pos + test_first_diff(got, want, n));
  }
  free(got);
  free(want);
}

static void test_large(void) {
  g_case = "large file";
  const char *large = getenv("KVIK_TEST_LARGE");
  if (!large || strcmp(large, "1") != 0) {
    printf("skipped: the file over 4 GiB (set KVIK_TEST_LARGE=1 to run it)\n");
    return;
  }
  char *path = test_path(g_dir, "large");
  double start = now_s();
  large_write(path);
  kvik_file *f = open_file(path, "r");
  unsigned char *dev = dev_alloc(LARGE_BYTES);
  double read_start = now_s();
  ASSERT_EQ(kvik_file_read(f, dev, LARGE_BYTES, 0), LARGE_BYTES);
  double read_s = now_s() - read_start;
  large_check(dev, "kvik_file_read");
  dev_free(dev);
  void *whole = NULL;
  ASSERT_EQ(kvik_file_read_to_device(f, 0, &whole), LARGE_BYTES);
  large_check(whole, "kvik_file_read_to_device");
  ASSERT_EQ(kvik_device_free(whole), 0);
  kvik_file_free(f);
  unlink(path);
  free(path);
  printf("ok: a file of %zu bytes read into one allocation (read %.2f s, case %.1f s)\n", LARGE_BYTES, read_s,
         now_s() - start);
}

/* A read of 256 MiB or more into device memory runs in tasks of at least 8 MiB (src/request.c,
 * DEVICE_TASK), so in chunks of 4 MiB, where a smaller one keeps the setting's 4 MiB tasks and
 * 2 MiB chunks: counted by the fake driver's copies (a chunk is one copy). */
static void test_large_read_chunks(void) {
  g_case = "large read chunks";
  if (!fake.calls) {
    printf("skipped: chunk sizes (counted by the fake driver only)\n");
    return;
  }
  const size_t size = 256 * MiB, piece = 16 * MiB;
  char *path = test_path(g_dir, "chunks");
  unsigned char *part = malloc(piece), *got = malloc(piece);
  FILE *out = fopen(path, "wb");
  ASSERT(out);
  for (size_t at = 0; at < size; at += piece) {
    test_fill(part, piece, at + 1);
    ASSERT_EQ(fwrite(part, 1, piece, out), piece);
  }
  ASSERT_OK(fclose(out));
  int64_t task_size, zero_copy;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_TASK_SIZE, &task_size));
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_ZERO_COPY_READ, &zero_copy));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, 4 * (int64_t)MiB));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_OFF)); /* the bounce buffers */
  kvik_file *f = open_file(path, "r");
  unsigned char *dev = dev_alloc(size);
  const size_t sizes[] = {size, size - piece};
  const long copies[] = {64, 120}; /* 4 MiB chunks; 2 MiB ones */
  for (int i = 0; i < 2; i++) {
    size_t resident, total;
    ASSERT_OK(kvik_page_cache_info(path, &resident, &total));
    long before = h2d_copies();
    ASSERT_EQ(kvik_file_read(f, dev, sizes[i], 0), (ssize_t)sizes[i]);
    long made = h2d_copies() - before;
    /* A file the page cache lacks is read in larger tasks still (cold_read): judged only
     * where it was all cached, as it is after being written unless reclaim took pages. */
    if (resident < total) printf("note: %zu of %zu pages cached: copies not counted\n", resident, total);
    else if (made != copies[i])
      FAIL_AT("a read of %zu MiB into device memory made %ld copies, not %ld", sizes[i] / MiB,
              made, copies[i]);
    for (size_t at = 0; at < sizes[i]; at += piece) {
      test_fill(part, piece, at + 1);
      CU_OK(cu.cuMemcpyDtoH_v2(got, dptr(dev + at), piece));
      ASSERT_SAME_BYTES(got, part, piece);
    }
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, task_size));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, zero_copy));
  dev_free(dev);
  kvik_file_free(f);
  unlink(path);
  free(path);
  free(part);
  free(got);
  printf("ok: a read of 256 MiB into device memory copies 4 MiB chunks, a smaller one 2 MiB\n");
}

/* A read into device memory of a file the page cache lacks announces each task's whole range to
 * the kernel (POSIX_FADV_WILLNEED, counted by fault_shim.c) before its first chunk, so that the
 * disk reads a task's second chunk while its first is copied: 64 MiB on one thread runs in 4
 * tasks of 16 MiB (cold_read), each of two chunks of 8 MiB; the first task's 16 MiB are announced
 * before the first pread, not 8. Pages announced but not yet read count as cached for
 * cachestat(2), not for mincore(2): with the latter, chunks are announced again (no IO: the pages
 * are on their way). Judged only where the drop left (nearly) nothing cached. */
static void test_cold_read_announced(void) {
  g_case = "cold read announced";
  const size_t size = 64 * MiB;
  char *path = test_path(g_dir, SHIM_TARGET_MARK "-cold");
  unsigned char *data = malloc(size), *got = malloc(size);
  test_fill(data, size, 17);
  test_write_file(path, data, size);
  int64_t threads, zero_copy;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_NUM_THREADS, &threads));
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_ZERO_COPY_READ, &zero_copy));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 1));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_OFF)); /* the bounce buffers */
  kvik_file *f = open_file(path, "r");
  unsigned char *dev = dev_alloc(size);
  ASSERT_OK(kvik_page_cache_drop(path));
  size_t resident, total;
  ASSERT_OK(kvik_page_cache_info(path, &resident, &total));
  shim_reset();
  ASSERT_EQ(kvik_file_read(f, dev, size, 0), (ssize_t)size);
  long calls = atomic_load(&shim_willneed_calls), bytes = atomic_load(&shim_willneed_bytes);
  long first = atomic_load(&shim_willneed_bytes_at_first_read);
  CU_OK(cu.cuMemcpyDtoH_v2(got, dptr(dev), size));
  ASSERT_SAME_BYTES(got, data, size);
  if (resident > total / 16)
    printf("note: the drop left %zu of %zu pages: announcements not counted\n", resident, total);
  else if (first < 32 * (long)MiB || bytes < (long)size)
    FAIL_AT("a cold read of 64 MiB into device memory announced %ld bytes before its first pread "
            "(not 32 MiB: its first task's and the next one's on its thread), and %ld in %ld "
            "WILLNEED calls in all (not 64 MiB)",
            first, bytes, calls);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, threads));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, zero_copy));
  shim_reset();
  dev_free(dev);
  kvik_file_free(f);
  unlink(path);
  free(path);
  free(data);
  free(got);
  printf("ok: a cold read into device memory announces each task whole, and the next\n");
}

/* ---- main ---------------------------------------------------------------------------------- */

static void setup_cuda(void) {
  CU_OK(cu.cuDeviceGet(&g_dev, 0));
  CU_OK(cu.cuDevicePrimaryCtxRetain(&g_primary, g_dev));
  CU_OK(cu.cuCtxSetCurrent(g_primary));
  CU_OK(cu.cuStreamCreate(&g_alloc_stream, CU_STREAM_NON_BLOCKING));
  /* Before any kvik call loads the driver itself: it must notice that this process did. */
  CUdeviceptr probe;
  CU_OK(cu.cuMemAlloc_v2(&probe, 4096));
  ASSERT_EQ(kvik_memory_kind_of((void *)(uintptr_t)probe), KVIK_MEMORY_DEVICE);
  CU_OK(cu.cuMemFree_v2(probe));
  int count = kvik_cuda_device_count(), version = kvik_cuda_driver_version();
  ASSERT_OK(count);
  ASSERT_OK(version);
  char name[256];
  ASSERT_OK(kvik_cuda_device_name(0, name, sizeof name));
  printf("driver %d, %d device(s), device 0: %s, %s\n", version, count, name,
         fake.fail ? "fake driver: fault injection on" : "real driver: fault injection skipped");
}

static void run_suite(void) {
  setup_cuda();
  g_ref_path = test_path(g_dir, "reference");
  g_ref = malloc(FILE_BYTES);
  g_scratch = malloc(AREA_BYTES);
  test_fill(g_ref, FILE_BYTES, test_rand(&g_rng));
  test_write_file(g_ref_path, g_ref, FILE_BYTES);
  test_classification();
  test_reads();
  test_small_requests();
  test_writes();
  test_threads();
  test_other_context();
  test_streams();
  test_read_to_device();
  test_mmap();
  test_zero_copy();
  test_faults();
  test_large_read_chunks();
  test_cold_read_announced();
  test_large();
  g_case = "teardown";
  CU_OK(cu.cuStreamDestroy_v2(g_alloc_stream));
  if (fake.live) check_no_leaks();
  free(g_scratch);
  free(g_ref);
  free(g_ref_path);
}

int main(void) {
  test_without_cachestat_if_asked();
  const char *seed_text = getenv("KVIK_TEST_SEED");
  g_seed = seed_text ? strtoull(seed_text, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
  g_rng = g_seed | 1;
  atexit(report_context);
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("seed %" PRIu64 "\n", g_seed);
  g_dir = test_mkdtemp();
  /* kvik finds libcuda absent, and keeps that answer until another object is loaded: setup_cuda
   * checks that the driver loaded next is seen all the same. */
  ASSERT_EQ(kvik_memory_kind_of(&g_seed), KVIK_MEMORY_HOST);
  void *handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    printf("no CUDA driver: %s\n", dlerror());
    check_without_cuda("libcuda.so.1");
  } else {
    *(void **)&cu.cuInit = dlsym(handle, "cuInit");
    if (!cu.cuInit) FAIL_AT("libcuda.so.1 lacks cuInit");
    *(void **)&cu.cuGetErrorName = dlsym(handle, "cuGetErrorName");
    CUresult r = cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
      printf("cuInit failed: %d (%s)\n", r, cu_error_name(r));
      check_without_cuda("cuInit");
    } else {
      resolve_driver(handle);
      run_suite();
    }
  }
  test_rmdir(g_dir);
  g_finished = 1;
  return 0;
}
