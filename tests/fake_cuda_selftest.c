/* Tests of the fake CUDA driver (fake_cuda.c) itself. The driver is reached as kvik reaches it,
 * through dlopen("libcuda.so.1") and dlsym, so ctest's LD_LIBRARY_PATH decides which one loads.
 * Skips (77) when no driver loads or the one that loads is not the fake. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "fake_cuda.h"
#include "test.h"

/* test.h prints kvik's last error when an assertion fails; this program does not link kvik. */
const char *kvik_last_error(void) { return "(none: the fake driver's selftest does not use kvik)"; }

/* The fake driver's functions that kvik does not call (fake_cuda.h). */
typedef struct extra_api {
#define EXTRA_MEMBER_(member, symbol, ret, params) ret(*member) params;
  FAKE_CUDA_EXTRA_FUNCTIONS(EXTRA_MEMBER_)
#undef EXTRA_MEMBER_
} extra_api;

static kvik__cuda_api cu;
static extra_api cx;
static fake_cuda_fail_fn fake_fail;
static fake_cuda_calls_fn fake_calls;
static fake_cuda_live_fn fake_live;
static fake_cuda_reset_fn fake_reset;

#define CU_OK(call) ASSERT_EQ((call), CUDA_SUCCESS)

static void *must_find(void *lib, const char *symbol) {
  void *fn = dlsym(lib, symbol);
  if (!fn) FAIL_AT("the fake driver does not export %s", symbol);
  return fn;
}

/* Every function kvik calls must be there: the dlsym loop over src/cuda.h checks the names. */
static void load(void *lib) {
#define LOAD_(member, symbol, ret, params) cu.member = (ret(*) params)must_find(lib, symbol);
  KVIK__CUDA_FUNCTIONS(LOAD_)
#undef LOAD_
#define LOAD_EXTRA_(member, symbol, ret, params) cx.member = (ret(*) params)must_find(lib, symbol);
  FAKE_CUDA_EXTRA_FUNCTIONS(LOAD_EXTRA_)
#undef LOAD_EXTRA_
  fake_fail = (fake_cuda_fail_fn)must_find(lib, "fake_cuda_fail");
  fake_calls = (fake_cuda_calls_fn)must_find(lib, "fake_cuda_calls");
  fake_live = (fake_cuda_live_fn)must_find(lib, "fake_cuda_live");
  fake_reset = (fake_cuda_reset_fn)must_find(lib, "fake_cuda_reset");
}

/* ---- Helpers ------------------------------------------------------------------------------ */

/* A host function that blocks its stream until the test opens the gate, so that tests can see
 * work pending without depending on timing. */
typedef struct gate {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int open;
} gate;

static void gate_init(gate *g) {
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->cond, NULL);
  g->open = 0;
}

static void gate_wait(void *arg) {
  gate *g = arg;
  pthread_mutex_lock(&g->lock);
  while (!g->open) pthread_cond_wait(&g->cond, &g->lock);
  pthread_mutex_unlock(&g->lock);
}

static void gate_open(gate *g) {
  pthread_mutex_lock(&g->lock);
  g->open = 1;
  pthread_cond_broadcast(&g->cond);
  pthread_mutex_unlock(&g->lock);
}

static void gate_destroy(gate *g) {
  pthread_mutex_destroy(&g->lock);
  pthread_cond_destroy(&g->cond);
}

/* Host functions that log the order they ran in. Only the stream's worker writes the log; the
 * test reads it after synchronising. */
typedef struct order_log {
  int n;
  int items[256];
} order_log;

typedef struct log_entry {
  order_log *log;
  int value;
} log_entry;

static void log_append(void *arg) {
  log_entry *e = arg;
  e->log->items[e->log->n++] = e->value;
}

typedef struct attrs {
  CUcontext ctx;
  unsigned type;
  unsigned managed;
  int ordinal;
  CUdeviceptr start;
  size_t size;
} attrs;

static attrs attrs_of(CUdeviceptr ptr) {
  attrs a;
  memset(&a, 0x5a, sizeof a); /* not 0: every field must be written */
  int which[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                 CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void *data[] = {&a.ctx, &a.type, &a.managed, &a.ordinal, &a.start, &a.size};
  CU_OK(cu.cuPointerGetAttributes(6, which, data, ptr));
  return a;
}

static void expect_attrs(CUdeviceptr ptr, CUcontext ctx, unsigned type, unsigned managed,
                         int ordinal) {
  attrs a = attrs_of(ptr);
  ASSERT(a.ctx == ctx);
  ASSERT_EQ(a.type, type);
  ASSERT_EQ(a.managed, managed);
  ASSERT_EQ(a.ordinal, ordinal);
}

static CUdeviceptr dptr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

static void expect_no_leaks(void) {
  static const char *const kinds[] = {"device", "pinned", "registered", "streams", "events",
                                      "contexts"};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    if (fake_live(kinds[i]) != 0) FAIL_AT("%ld live %s", fake_live(kinds[i]), kinds[i]);
  }
}

/* ---- Tests -------------------------------------------------------------------------------- */

static void test_before_init(void) {
  CUdeviceptr p;
  ASSERT_EQ(cu.cuMemAlloc(&p, 4096), CUDA_ERROR_NOT_INITIALIZED);
  int count;
  ASSERT_EQ(cu.cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
  /* These work before cuInit in the real driver too. */
  int version = 0;
  CU_OK(cu.cuDriverGetVersion(&version));
  ASSERT_EQ(version, 13000);
  const char *name = NULL, *text = NULL;
  CU_OK(cu.cuGetErrorName(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, &name));
  ASSERT(strcmp(name, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED") == 0);
  CU_OK(cu.cuGetErrorString(CUDA_ERROR_NOT_READY, &text));
  ASSERT(strcmp(text, "device not ready") == 0);
  static const int known[] = {0, 1, 2, 3, 100, 101, 201, 400, 600, 709, 712, 713, 999};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    CU_OK(cu.cuGetErrorName(known[i], &name));
    CU_OK(cu.cuGetErrorString(known[i], &text));
    ASSERT(name && text);
  }
  name = text = "stale";
  ASSERT_EQ(cu.cuGetErrorName(12345, &name), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuGetErrorString(12345, &text), CUDA_ERROR_INVALID_VALUE);
  ASSERT(name == NULL && text == NULL);
}

static void test_init(void) {
  setenv("FAKE_CUDA_DEVICES", "0", 1);
  ASSERT_EQ(cu.cuInit(0), CUDA_ERROR_NO_DEVICE);
  CUdeviceptr p;
  ASSERT_EQ(cu.cuMemAlloc(&p, 4096), CUDA_ERROR_NOT_INITIALIZED);
  setenv("FAKE_CUDA_DEVICES", "2", 1);
  ASSERT_EQ(cu.cuInit(1), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cu.cuInit(0));
  CU_OK(cu.cuInit(0));
  int count = 0;
  CU_OK(cu.cuDeviceGetCount(&count));
  ASSERT_EQ(count, 2);
  CUdevice dev = -1;
  CU_OK(cu.cuDeviceGet(&dev, 1));
  ASSERT_EQ(dev, 1);
  ASSERT_EQ(cu.cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_EQ(cu.cuDeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
  char name[64];
  CU_OK(cu.cuDeviceGetName(name, sizeof name, 1));
  ASSERT(strcmp(name, "Fake CUDA Device 1") == 0);
  ASSERT_EQ(cu.cuDeviceGetName(name, sizeof name, 7), CUDA_ERROR_INVALID_DEVICE);
}

/* What needs a context fails with CUDA_ERROR_INVALID_CONTEXT without one. */
static void expect_no_context(void) {
  CUcontext ctx = (CUcontext)&ctx;
  CU_OK(cu.cuCtxGetCurrent(&ctx));
  ASSERT(ctx == NULL);
  CUdeviceptr p;
  void *host;
  CUstream s;
  CUevent e;
  CUdevice dev;
  char buf[16];
  ASSERT_EQ(cu.cuMemAlloc(&p, 4096), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cx.cuMemAllocManaged(&p, 4096, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cx.cuMemAllocAsync(&p, 4096, NULL), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cu.cuMemHostAlloc(&host, 4096, 0), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cu.cuMemHostRegister(buf, sizeof buf, 0), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cu.cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cu.cuEventCreate(&e, 0), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cu.cuMemcpyHtoDAsync(0x1000, buf, sizeof buf, NULL), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cu.cuMemcpyDtoHAsync(buf, 0x1000, sizeof buf, CU_STREAM_LEGACY), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cu.cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cx.cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cu.cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cu.cuCtxPopCurrent(&ctx), CUDA_ERROR_INVALID_CONTEXT);
}

static void *no_context_thread(void *arg) {
  (void)arg;
  expect_no_context();
  return NULL;
}

static void test_context_stack(CUcontext p0) {
  expect_no_context();
  CU_OK(cu.cuCtxPushCurrent(p0));
  CUcontext cur, popped;
  CU_OK(cu.cuCtxGetCurrent(&cur));
  ASSERT(cur == p0);

  /* A new thread starts with no current context. */
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, NULL, no_context_thread, NULL), 0);
  pthread_join(t, NULL);

  /* cuCtxCreate pushes the new context; popping returns to the one below. */
  CUcontext c1;
  CU_OK(cx.cuCtxCreate(&c1, 0, 1));
  ASSERT(c1 != p0);
  ASSERT_EQ(fake_live("contexts"), 1);
  CUdevice dev = -1;
  CU_OK(cu.cuCtxGetDevice(&dev));
  ASSERT_EQ(dev, 1);
  CU_OK(cu.cuCtxPopCurrent(&popped));
  ASSERT(popped == c1);
  CU_OK(cu.cuCtxGetCurrent(&cur));
  ASSERT(cur == p0);

  /* cuCtxSetCurrent replaces the top; NULL pops it. */
  CU_OK(cu.cuCtxPushCurrent(p0));
  CU_OK(cx.cuCtxSetCurrent(c1));
  CU_OK(cu.cuCtxGetCurrent(&cur));
  ASSERT(cur == c1);
  CU_OK(cx.cuCtxSetCurrent(NULL));
  CU_OK(cu.cuCtxGetCurrent(&cur));
  ASSERT(cur == p0);
  CU_OK(cu.cuCtxGetDevice(&dev));
  ASSERT_EQ(dev, 0);

  /* Destroying pops it when current; a destroyed or primary context cannot be destroyed. */
  CU_OK(cu.cuCtxPushCurrent(c1));
  CU_OK(cx.cuCtxDestroy(c1));
  CU_OK(cu.cuCtxGetCurrent(&cur));
  ASSERT(cur == p0);
  ASSERT_EQ(cu.cuCtxPushCurrent(c1), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  ASSERT_EQ(cx.cuCtxDestroy(c1), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  ASSERT_EQ(cx.cuCtxDestroy(p0), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cu.cuCtxPushCurrent((CUcontext)&cur), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(fake_live("contexts"), 0);
  CU_OK(cu.cuCtxPopCurrent(NULL));
  expect_no_context();
}

static void test_allocations(CUcontext p0) {
  CU_OK(cu.cuCtxPushCurrent(p0));
  CUdeviceptr dev, pool, managed;
  CU_OK(cu.cuMemAlloc(&dev, 10000));
  CU_OK(cx.cuMemAllocAsync(&pool, 5000, NULL));
  CU_OK(cx.cuMemAllocManaged(&managed, 3000, CU_MEM_ATTACH_GLOBAL));
  ASSERT_EQ(dev % 256, 0);
  ASSERT_EQ(pool % 256, 0);
  ASSERT_EQ(cu.cuMemAlloc(&dev, 0), CUDA_ERROR_INVALID_VALUE);
  void *pinned;
  CU_OK(cu.cuMemHostAlloc(&pinned, 6000, CU_MEMHOSTALLOC_PORTABLE));
  ASSERT_EQ((uintptr_t)pinned % 4096, 0);
  memset(pinned, 1, 6000); /* host memory the CPU can use */
  memset((void *)(uintptr_t)managed, 2, 3000);
  char *user = malloc(8192);
  CU_OK(cu.cuMemHostRegister(user + 100, 4000, CU_MEMHOSTREGISTER_PORTABLE));
  ASSERT_EQ(fake_live("device"), 3);
  ASSERT_EQ(fake_live("pinned"), 1);
  ASSERT_EQ(fake_live("registered"), 1);

  /* Each kind, at its start and inside (interior pointers resolve to the allocation). */
  expect_attrs(dev, p0, CU_MEMORYTYPE_DEVICE, 0, 0);
  expect_attrs(dev + 9999, p0, CU_MEMORYTYPE_DEVICE, 0, 0);
  expect_attrs(pool + 4000, NULL, CU_MEMORYTYPE_DEVICE, 0, 0); /* pools have no context */
  expect_attrs(managed + 1, p0, CU_MEMORYTYPE_DEVICE, 1, 0);
  expect_attrs(dptr(pinned) + 5999, p0, CU_MEMORYTYPE_HOST, 0, 0);
  expect_attrs(dptr(user + 100), p0, CU_MEMORYTYPE_HOST, 0, 0);
  expect_attrs(dptr(user + 4099), p0, CU_MEMORYTYPE_HOST, 0, 0);
  attrs a = attrs_of(dev + 1234);
  ASSERT(a.start == dev && a.size == 10000);
  /* Unknown pointers: success, with the "NULL" values of the real driver. */
  expect_attrs(dptr(user + 99), NULL, 0, 0, -2);
  expect_attrs(dptr(user + 4100), NULL, 0, 0, -2);
  expect_attrs(dev + 10000, NULL, 0, 0, -2);
  expect_attrs(dptr(&a), NULL, 0, 0, -2);
  expect_attrs(0, NULL, 0, 0, -2);

  /* Registration: overlaps are refused, only the start unregisters. */
  ASSERT_EQ(cu.cuMemHostRegister(user, 101, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  ASSERT_EQ(cu.cuMemHostRegister(user + 4099, 10, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  ASSERT_EQ(cu.cuMemHostRegister(NULL, 10, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuMemHostRegister(user, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cu.cuMemHostRegister(user + 4100, 10, 0)); /* adjacent is fine */
  ASSERT_EQ(cu.cuMemHostUnregister(user + 101), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  CU_OK(cu.cuMemHostUnregister(user + 100));
  CU_OK(cu.cuMemHostUnregister(user + 4100));
  ASSERT_EQ(cu.cuMemHostUnregister(user + 100), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);

  /* Allocations on the other device report its ordinal. */
  CUcontext p1;
  CU_OK(cu.cuDevicePrimaryCtxRetain(&p1, 1));
  CU_OK(cu.cuCtxPushCurrent(p1));
  CUdeviceptr dev1;
  CU_OK(cu.cuMemAlloc(&dev1, 100));
  expect_attrs(dev1 + 50, p1, CU_MEMORYTYPE_DEVICE, 0, 1);
  CU_OK(cu.cuMemFree(dev1));
  CU_OK(cu.cuCtxPopCurrent(NULL));
  CU_OK(cx.cuDevicePrimaryCtxRelease(1));

  /* Frees: only the start of an allocation of the right kind. */
  ASSERT_EQ(cu.cuMemFree(dev + 1), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuMemFree(dptr(pinned)), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuMemFreeHost((void *)(uintptr_t)dev), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cu.cuMemFree(dev));
  ASSERT_EQ(cu.cuMemFree(dev), CUDA_ERROR_INVALID_VALUE);
  expect_attrs(dev, NULL, 0, 0, -2);
  CU_OK(cu.cuMemFree(managed));
  CU_OK(cu.cuMemFreeHost(pinned));
  CU_OK(cx.cuMemFreeAsync(pool, NULL));
  CU_OK(cu.cuStreamSynchronize(NULL));
  free(user);
  CU_OK(cu.cuCtxPopCurrent(NULL));
  expect_no_leaks();
}

/* Device memory is not CPU memory: the kernel refuses to read into it or write from it, and a
 * CPU access kills the process. */
static void test_device_memory_is_not_host_memory(CUcontext p0, const char *dir) {
  CU_OK(cu.cuCtxPushCurrent(p0));
  CUdeviceptr dev;
  CU_OK(cu.cuMemAlloc(&dev, 1 << 16));
  char *path = test_path(dir, "data");
  unsigned char data[4096];
  test_fill(data, sizeof data, 7);
  test_write_file(path, data, sizeof data);
  int fd = open(path, O_RDWR);
  ASSERT(fd >= 0);
  errno = 0;
  ASSERT_EQ(pread(fd, (void *)(uintptr_t)dev, sizeof data, 0), -1);
  ASSERT_EQ(errno, EFAULT);
  errno = 0;
  ASSERT_EQ(pwrite(fd, (const void *)(uintptr_t)dev, sizeof data, 0), -1);
  ASSERT_EQ(errno, EFAULT);
  close(fd);
  free(path);

  fflush(NULL);
  pid_t child = fork();
  ASSERT(child >= 0);
  if (child == 0) {
    /* Die quietly of the signal, without a core file or a sanitizer's report. */
    setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
    signal(SIGSEGV, SIG_DFL);
    volatile unsigned char *p = (volatile unsigned char *)(uintptr_t)dev;
    p[0] = 1; /* must crash */
    _exit(0);
  }
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));

  CU_OK(cu.cuMemFree(dev));
  CU_OK(cu.cuCtxPopCurrent(NULL));
}

static long rss_shmem_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long kib = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "RssShmem: %ld kB", &kib) == 1) break;
  if (f) fclose(f);
  return kib;
}

/* Freed device memory goes back to the system. */
static void test_free_returns_memory(CUcontext p0) {
  CU_OK(cu.cuCtxPushCurrent(p0));
  const size_t size = (size_t)64 << 20;
  CUdeviceptr dev;
  CU_OK(cu.cuMemAlloc(&dev, size));
  long before = rss_shmem_kib();
  CU_OK(cx.cuMemsetD8(dev, 0xab, size));
  long filled = rss_shmem_kib();
  CU_OK(cu.cuMemFree(dev));
  long after = rss_shmem_kib();
  if (before >= 0) {
    ASSERT(filled - before >= 48 << 10);
    ASSERT(filled - after >= 48 << 10);
  }
  CU_OK(cu.cuCtxPopCurrent(NULL));
}

static void test_round_trip(CUcontext p0) {
  CU_OK(cu.cuCtxPushCurrent(p0));
  const size_t n = 1 << 20;
  unsigned char *src = malloc(n), *back = malloc(n), *expect = malloc(n);
  test_fill(src, n, 1);
  memcpy(expect, src, n);
  CUdeviceptr dev;
  CU_OK(cu.cuMemAlloc(&dev, n + 1000));
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ASSERT_EQ(fake_live("streams"), 1);
  CUcontext ctx;
  CU_OK(cu.cuStreamGetCtx(s, &ctx));
  ASSERT(ctx == p0);

  /* Copies are queued, not done: while the stream is held the work is pending, and the
   * source is read when the copy runs, so overwriting it first changes what arrives. */
  gate g;
  gate_init(&g);
  CU_OK(cu.cuLaunchHostFunc(s, gate_wait, &g));
  CU_OK(cu.cuMemcpyHtoDAsync(dev + 1000, src, n, s));
  memset(back, 0, n);
  CU_OK(cu.cuMemcpyDtoHAsync(back, dev + 1000, n, s));
  ASSERT_EQ(cx.cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  src[12345] ^= 0xff;
  expect[12345] ^= 0xff;
  gate_open(&g);
  CU_OK(cu.cuStreamSynchronize(s));
  CU_OK(cx.cuStreamQuery(s));
  ASSERT_SAME_BYTES(back, expect, n);
  gate_destroy(&g);

  /* The synchronous copies and memset see the same bytes. */
  memset(back, 0, n);
  CU_OK(cx.cuMemcpyDtoH(back, dev + 1000, n));
  ASSERT_SAME_BYTES(back, expect, n);
  CU_OK(cx.cuMemsetD8(dev, 0x11, 1000));
  CU_OK(cx.cuMemcpyDtoH(back, dev + 990, 20));
  ASSERT_EQ(back[9], 0x11);
  ASSERT_EQ(back[10], expect[0]);
  CU_OK(cx.cuMemcpyHtoD(dev, src, 16));

  /* Ranges must lie inside one allocation; the host side must not be device memory. */
  ASSERT_EQ(cu.cuMemcpyHtoDAsync(dev + 1001, src, n, s), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuMemcpyDtoHAsync(back, dev - 1, 16, s), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuMemcpyDtoHAsync(back, 0x1000, 16, s), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuMemcpyDtoHAsync((void *)(uintptr_t)dev, dev, 16, s), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cx.cuMemcpyHtoD(dev + n + 1000, src, 1), CUDA_ERROR_INVALID_VALUE);
  /* Managed memory is device memory to the copies, and CPU memory to the CPU. */
  CUdeviceptr managed;
  CU_OK(cx.cuMemAllocManaged(&managed, 64, CU_MEM_ATTACH_GLOBAL));
  CU_OK(cu.cuMemcpyHtoDAsync(managed, src, 64, NULL));
  CU_OK(cu.cuStreamSynchronize(NULL));
  ASSERT_SAME_BYTES((void *)(uintptr_t)managed, src, 64);
  CU_OK(cu.cuMemFree(managed));

  /* A stream of another context cannot be used while this one is current. */
  CUcontext c1;
  CU_OK(cx.cuCtxCreate(&c1, 0, 1));
  CUstream s1;
  CU_OK(cu.cuStreamCreate(&s1, 0));
  CU_OK(cu.cuCtxPopCurrent(NULL));
  ASSERT_EQ(cu.cuMemcpyHtoDAsync(dev, src, 16, s1), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(cu.cuMemcpyDtoHAsync(back, dev, 16, s1), CUDA_ERROR_INVALID_CONTEXT);
  CU_OK(cu.cuStreamDestroy(s1));
  CU_OK(cx.cuCtxDestroy(c1));

  /* Destroyed and bogus streams are invalid handles. */
  CU_OK(cu.cuStreamDestroy(s));
  ASSERT_EQ(cu.cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cu.cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cu.cuMemcpyHtoDAsync(dev, src, 16, (CUstream)&g), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cu.cuStreamDestroy(NULL), CUDA_ERROR_INVALID_HANDLE);

  CU_OK(cu.cuMemFree(dev));
  free(src);
  free(back);
  free(expect);
  CU_OK(cu.cuCtxPopCurrent(NULL));
  expect_no_leaks();
}

/* Host functions run in order, after the copies queued before them, on every stream handle. */
static void test_host_func_order(CUcontext p0) {
  CU_OK(cu.cuCtxPushCurrent(p0));
  static order_log log;
  static log_entry entries[200];
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, 0));
  for (int i = 0; i < 100; i++) {
    entries[i] = (log_entry){&log, i};
    CU_OK(cu.cuLaunchHostFunc(s, log_append, &entries[i]));
  }
  CU_OK(cu.cuStreamSynchronize(s));
  ASSERT_EQ(log.n, 100);
  for (int i = 0; i < 100; i++) ASSERT_EQ(log.items[i], i);

  /* NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are one stream of the context. */
  static const CUstream defaults[] = {NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD};
  gate g;
  gate_init(&g);
  CU_OK(cu.cuLaunchHostFunc(NULL, gate_wait, &g));
  log.n = 0;
  for (int i = 0; i < 99; i++) {
    entries[100 + i] = (log_entry){&log, i};
    CU_OK(cu.cuLaunchHostFunc(defaults[i % 3], log_append, &entries[100 + i]));
  }
  ASSERT_EQ(cx.cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  gate_open(&g);
  CU_OK(cu.cuStreamSynchronize(CU_STREAM_LEGACY));
  ASSERT_EQ(log.n, 99);
  for (int i = 0; i < 99; i++) ASSERT_EQ(log.items[i], i);
  for (int i = 0; i < 3; i++) {
    CUcontext ctx = NULL;
    CU_OK(cu.cuStreamGetCtx(defaults[i], &ctx));
    ASSERT(ctx == p0);
  }
  gate_destroy(&g);
  ASSERT_EQ(cu.cuLaunchHostFunc(s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cu.cuStreamDestroy(s));
  CU_OK(cu.cuCtxPopCurrent(NULL));
}

static void test_events(CUcontext p0) {
  CU_OK(cu.cuCtxPushCurrent(p0));
  CUevent e;
  CU_OK(cu.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  ASSERT_EQ(fake_live("events"), 1);
  /* Never recorded: complete. */
  CU_OK(cx.cuEventQuery(e));
  CU_OK(cu.cuEventSynchronize(e));

  /* An event completes after the work queued before it: here a copy. */
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, 0));
  CUdeviceptr dev;
  CU_OK(cu.cuMemAlloc(&dev, 4096));
  unsigned char src[4096], back[4096];
  test_fill(src, sizeof src, 3);
  gate g;
  gate_init(&g);
  CU_OK(cu.cuLaunchHostFunc(s, gate_wait, &g));
  CU_OK(cu.cuMemcpyHtoDAsync(dev, src, sizeof src, s));
  CU_OK(cu.cuEventRecord(e, s));
  ASSERT_EQ(cx.cuEventQuery(e), CUDA_ERROR_NOT_READY);
  gate_open(&g);
  CU_OK(cu.cuEventSynchronize(e));
  CU_OK(cx.cuEventQuery(e));
  CU_OK(cx.cuMemcpyDtoH(back, dev, sizeof back));
  ASSERT_SAME_BYTES(back, src, sizeof src);
  gate_destroy(&g);

  /* Recording again makes it pending until the new marker runs. */
  gate_init(&g);
  CU_OK(cu.cuLaunchHostFunc(NULL, gate_wait, &g));
  CU_OK(cu.cuEventRecord(e, NULL));
  ASSERT_EQ(cx.cuEventQuery(e), CUDA_ERROR_NOT_READY);
  /* Destroying an event whose marker is still queued is allowed. */
  CUevent pending;
  CU_OK(cu.cuEventCreate(&pending, 0));
  CU_OK(cu.cuEventRecord(pending, NULL));
  CU_OK(cu.cuEventDestroy(pending));
  ASSERT_EQ(cx.cuEventQuery(pending), CUDA_ERROR_INVALID_HANDLE);
  gate_open(&g);
  CU_OK(cu.cuEventSynchronize(e));
  CU_OK(cx.cuEventQuery(e));
  gate_destroy(&g);

  /* An event and a stream of different contexts do not mix. */
  CUcontext c1;
  CU_OK(cx.cuCtxCreate(&c1, 0, 0));
  ASSERT_EQ(cu.cuEventRecord(e, NULL), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(cx.cuCtxDestroy(c1));

  CU_OK(cu.cuEventDestroy(e));
  ASSERT_EQ(cu.cuEventDestroy(e), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(cu.cuEventSynchronize(e), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(cu.cuStreamDestroy(s));
  CU_OK(cu.cuMemFree(dev));
  CU_OK(cu.cuCtxPopCurrent(NULL));
  expect_no_leaks();
}

/* cuMemFreeAsync: the memory stays for the stream's earlier work (driver work such as nvCOMP's
 * finds it by its pointer), and is gone once the stream reached the free; a second free fails
 * at once. */
static void test_free_async(CUcontext p0) {
  CU_OK(cu.cuCtxPushCurrent(p0));
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, 0));
  CUdeviceptr pool;
  CU_OK(cx.cuMemAllocAsync(&pool, 1 << 16, s));
  unsigned char src[256], back[256];
  test_fill(src, sizeof src, 5);
  gate g;
  gate_init(&g);
  CU_OK(cu.cuLaunchHostFunc(s, gate_wait, &g));
  CU_OK(cu.cuMemcpyHtoDAsync(pool, src, sizeof src, s));
  CU_OK(cu.cuMemcpyDtoHAsync(back, pool, sizeof back, s));
  CU_OK(cx.cuMemFreeAsync(pool, s));
  ASSERT_EQ(fake_live("device"), 0);
  expect_attrs(pool, NULL, CU_MEMORYTYPE_DEVICE, 0, 0);
  ASSERT_EQ(cx.cuMemFreeAsync(pool, s), CUDA_ERROR_INVALID_VALUE);
  gate_open(&g);
  CU_OK(cu.cuStreamSynchronize(s));
  expect_attrs(pool, NULL, 0, 0, -2);
  ASSERT_SAME_BYTES(back, src, sizeof src);
  gate_destroy(&g);
  CU_OK(cu.cuStreamDestroy(s));
  CU_OK(cu.cuCtxPopCurrent(NULL));
}

/* fake_cuda_host_view: another fake library's CPU view of device and pinned memory, which lasts
 * for memory freed by cuMemFreeAsync until its stream reaches the free. */
static void test_host_view(CUcontext p0, fake_cuda_host_view_fn view) {
  CU_OK(cu.cuCtxPushCurrent(p0));
  CUdeviceptr d;
  CU_OK(cu.cuMemAlloc(&d, 4096));
  unsigned char *cpu = view(d + 100, 3996);
  ASSERT(cpu != NULL);
  ASSERT(view(d + 100, 3997) == NULL); /* past the end of the allocation */
  memset(cpu, 0x5a, 16);
  unsigned char back[16], want[16];
  memset(want, 0x5a, sizeof want);
  CU_OK(cx.cuMemcpyDtoH(back, d + 100, sizeof back));
  ASSERT_SAME_BYTES(back, want, sizeof back);
  ASSERT(view((CUdeviceptr)(uintptr_t)back, sizeof back) == NULL); /* pageable host memory */
  void *pinned;
  CU_OK(cu.cuMemHostAlloc(&pinned, 64, 0));
  ASSERT(view((CUdeviceptr)(uintptr_t)pinned + 8, 56) == (unsigned char *)pinned + 8);
  CU_OK(cu.cuMemFreeHost(pinned));
  ASSERT(view((CUdeviceptr)(uintptr_t)pinned, 1) == NULL);
  CU_OK(cu.cuMemFree(d));
  ASSERT(view(d, 1) == NULL);
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, 0));
  CUdeviceptr pool;
  CU_OK(cx.cuMemAllocAsync(&pool, 1 << 16, s));
  gate g;
  gate_init(&g);
  CU_OK(cu.cuLaunchHostFunc(s, gate_wait, &g));
  CU_OK(cx.cuMemFreeAsync(pool, s));
  ASSERT(view(pool, 1 << 16) != NULL); /* the stream has not reached the free */
  gate_open(&g);
  CU_OK(cu.cuStreamSynchronize(s));
  ASSERT(view(pool, 1) == NULL);
  gate_destroy(&g);
  CU_OK(cu.cuStreamDestroy(s));
  CU_OK(cu.cuCtxPopCurrent(NULL));
}

static void test_fault_injection(CUcontext p0) {
  CU_OK(cu.cuCtxPushCurrent(p0));
  fake_reset();
  ASSERT_EQ(fake_calls("cuMemHostAlloc"), 0);
  ASSERT_EQ(fake_calls("cuNoSuchFunction"), -1);
  ASSERT_EQ(fake_live("no such thing"), -1);

  /* The 2nd next call fails, once, doing nothing. */
  fake_fail("cuMemHostAlloc", 2, CUDA_ERROR_OUT_OF_MEMORY);
  void *a = NULL, *b = NULL, *c = NULL;
  CU_OK(cu.cuMemHostAlloc(&a, 100, 0));
  ASSERT_EQ(cu.cuMemHostAlloc(&b, 100, 0), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT(b == NULL);
  ASSERT_EQ(fake_live("pinned"), 1);
  CU_OK(cu.cuMemHostAlloc(&c, 100, 0));
  ASSERT_EQ(fake_calls("cuMemHostAlloc"), 3);
  CU_OK(cu.cuMemFreeHost(a));
  CU_OK(cu.cuMemFreeHost(c));

  /* Several at once, for different functions; a failed copy queues nothing. */
  CUdeviceptr dev;
  CU_OK(cu.cuMemAlloc(&dev, 4096));
  char buf[64] = {0};
  fake_fail("cuMemcpyHtoDAsync_v2", 1, CUDA_ERROR_UNKNOWN);
  fake_fail("cuStreamSynchronize", 2, CUDA_ERROR_INVALID_HANDLE);
  fake_fail("cuMemcpyHtoDAsync_v2", 3, CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cu.cuMemcpyHtoDAsync(dev, buf, sizeof buf, NULL), CUDA_ERROR_UNKNOWN);
  CU_OK(cx.cuStreamQuery(NULL));
  CU_OK(cu.cuStreamSynchronize(NULL));
  ASSERT_EQ(cu.cuStreamSynchronize(NULL), CUDA_ERROR_INVALID_HANDLE);
  CU_OK(cu.cuMemcpyHtoDAsync(dev, buf, sizeof buf, NULL));
  ASSERT_EQ(cu.cuMemcpyHtoDAsync(dev, buf, sizeof buf, NULL), CUDA_ERROR_INVALID_VALUE);
  CU_OK(cu.cuStreamSynchronize(NULL));
  ASSERT_EQ(fake_calls("cuMemcpyHtoDAsync_v2"), 3);

  /* Injected failures come before the NOT_INITIALIZED and argument checks too. */
  fake_fail("cuInit", 1, CUDA_ERROR_NO_DEVICE);
  ASSERT_EQ(cu.cuInit(0), CUDA_ERROR_NO_DEVICE);
  CU_OK(cu.cuInit(0));

  /* Reset disarms. */
  fake_fail("cuMemAlloc_v2", 1, CUDA_ERROR_OUT_OF_MEMORY);
  fake_reset();
  CU_OK(cu.cuMemFree(dev));
  CU_OK(cu.cuMemAlloc(&dev, 4096));
  ASSERT_EQ(fake_calls("cuMemAlloc_v2"), 1);
  CU_OK(cu.cuMemFree(dev));
  CU_OK(cu.cuCtxPopCurrent(NULL));
  expect_no_leaks();
}

/* Many threads at once, each with its own stream and buffers: for the sanitizers. */
typedef struct worker_arg {
  CUcontext ctx;
  int seed;
} worker_arg;

static void *worker(void *p) {
  const worker_arg *arg = p;
  CU_OK(cu.cuCtxPushCurrent(arg->ctx));
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, 0));
  CUevent e;
  CU_OK(cu.cuEventCreate(&e, 0));
  enum { N = 3 * 4096 + 17 };
  unsigned char *src, *back;
  CU_OK(cu.cuMemHostAlloc((void **)&src, N, 0));
  back = malloc(N);
  CU_OK(cu.cuMemHostRegister(back, N, 0));
  for (int round = 0; round < 8; round++) {
    CUdeviceptr dev;
    if (round % 2) CU_OK(cu.cuMemAlloc(&dev, N));
    else CU_OK(cx.cuMemAllocAsync(&dev, N, s));
    test_fill(src, N, (uint64_t)(arg->seed * 100 + round));
    CU_OK(cu.cuMemcpyHtoDAsync(dev, src, N, s));
    CU_OK(cu.cuMemcpyDtoHAsync(back, dev, N, s));
    CU_OK(cu.cuEventRecord(e, s));
    CU_OK(cu.cuEventSynchronize(e));
    ASSERT_SAME_BYTES(back, src, N);
    if (round % 2) CU_OK(cu.cuMemFree(dev));
    else CU_OK(cx.cuMemFreeAsync(dev, s));
  }
  CU_OK(cu.cuStreamSynchronize(s));
  CU_OK(cu.cuMemHostUnregister(back));
  free(back);
  CU_OK(cu.cuMemFreeHost(src));
  CU_OK(cu.cuEventDestroy(e));
  CU_OK(cu.cuStreamDestroy(s));
  CU_OK(cu.cuCtxPopCurrent(NULL));
  return NULL;
}

static void test_threads(CUcontext p0) {
  enum { THREADS = 8 };
  pthread_t threads[THREADS];
  worker_arg args[THREADS];
  for (int i = 0; i < THREADS; i++) {
    args[i] = (worker_arg){p0, i};
    ASSERT_EQ(pthread_create(&threads[i], NULL, worker, &args[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  CU_OK(cu.cuCtxPushCurrent(p0));
  CU_OK(cx.cuCtxSynchronize());
  CU_OK(cu.cuCtxPopCurrent(NULL));
  expect_no_leaks();
}

int main(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    printf("skip: no libcuda.so.1: %s\n", dlerror());
    return TEST_SKIP;
  }
  if (!dlsym(lib, "fake_cuda_reset")) {
    printf("skip: the libcuda.so.1 found is not the fake driver\n");
    return TEST_SKIP;
  }
  load(lib);
  char *dir = test_mkdtemp();

  test_before_init();
  test_init();
  CUcontext p0;
  CU_OK(cu.cuDevicePrimaryCtxRetain(&p0, 0));
  ASSERT_EQ(fake_live("primary"), 1);
  test_context_stack(p0);
  test_allocations(p0);
  test_device_memory_is_not_host_memory(p0, dir);
  test_free_returns_memory(p0);
  test_round_trip(p0);
  test_host_func_order(p0);
  test_events(p0);
  test_free_async(p0);
  test_host_view(p0, (fake_cuda_host_view_fn)must_find(lib, "fake_cuda_host_view"));
  test_fault_injection(p0);
  test_threads(p0);

  CU_OK(cx.cuDevicePrimaryCtxRelease(0));
  ASSERT_EQ(cx.cuDevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(fake_live("primary"), 0);
  expect_no_leaks();
  test_rmdir(dir);
  printf("fake CUDA driver: all checks passed\n");
  return 0;
}
