/* kvik_bounce_buffer_free against the fake CUDA driver: it frees the idle pinned bounce buffers
 * that device IO left in the cache and returns their bytes, then 0; buffers follow the bounce
 * buffer size setting (below a page too), and a change of the setting frees the idle ones of the
 * old size; IO in other threads while the cache is emptied still moves the right bytes. The fake's
 * live count of registrations (kvik's pinned buffers are registered pages) proves that the memory
 * is freed, not only forgotten, and that a read of many chunks registers its two buffers once,
 * while a read of one takes one buffer. Buffers of huge pages come from a reserve mapped for all
 * the pool's threads, which counts only what buffers took and goes with the idle buffers. Skips
 * (77) where no libcuda.so.1 loads. */
#include "test_cuda.h"

#define THREADS 4
#define ROUNDS 50

static long (*live)(const char *what);
static void (*fail)(const char *symbol, int nth, int error);

static char *dir;

/* Write `n` bytes from device memory to a new file, through the pinned bounce buffers. */
static void device_write(const char *name, size_t n) {
  char *path = test_path(dir, name);
  unsigned char *host = malloc(n);
  test_fill(host, n, n);
  char *dev = device_alloc(n);
  to_device(dev, host, n);
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "w", 0644, &f));
  ASSERT_EQ(kvik_file_write(f, dev, n, 0), (ssize_t)n);
  ASSERT_OK(kvik_file_close(f));
  kvik_file_free(f);
  size_t got_n;
  unsigned char *got = test_read_file(path, &got_n);
  ASSERT_EQ(got_n, n);
  ASSERT_SAME_BYTES(got, host, n);
  free(got);
  device_free(dev);
  free(host);
  free(path);
}

static void test_frees_idle_buffers(void) {
  kvik_bounce_buffer_free();
  long before = live("registered");
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 8192));
  device_write("a", 100);
  ASSERT_EQ(live("registered"), before + 1);
  ASSERT_EQ(kvik_bounce_buffer_free(), (size_t)8192);
  ASSERT_EQ(live("registered"), before);
  ASSERT_EQ(kvik_bounce_buffer_free(), (size_t)0);
  device_write("a", 100); /* IO allocates again what it needs */
  ASSERT_EQ(kvik_bounce_buffer_free(), (size_t)8192);
}

/* kvikio's own test sets 1024 and 2048 and counts exactly those bytes. */
static void test_sizes_below_a_page(void) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 1024));
  device_write("b", 80);
  ASSERT_EQ(kvik_bounce_buffer_free(), (size_t)1024);
  ASSERT_EQ(kvik_bounce_buffer_free(), (size_t)0);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 10)); /* in grains of 64 bytes */
  device_write("b", 1000);
  ASSERT_EQ(kvik_bounce_buffer_free(), (size_t)128); /* two chunks of 64 bytes in flight */
}

static void test_setting_change_frees_old_size(void) {
  long before = live("registered");
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 1024));
  device_write("c", 80);
  ASSERT_EQ(live("registered"), before + 1);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 2048));
  device_write("c", 80);
  ASSERT_EQ(live("registered"), before + 1); /* the 1024-byte buffer went */
  ASSERT_EQ(kvik_bounce_buffer_free(), (size_t)2048);
  ASSERT_EQ(live("registered"), before);
}

/* Read `n` bytes of the file `name` into device memory, and check them against test_fill's. */
static void device_read(const char *name, size_t n) {
  char *path = test_path(dir, name);
  char *dev = device_alloc(n);
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r", 0, &f));
  ASSERT_EQ(kvik_file_read(f, dev, n, 0), (ssize_t)n);
  kvik_file_free(f);
  unsigned char *got = malloc(n), *want = malloc(n);
  from_device(got, dev, n);
  test_fill(want, n, n);
  ASSERT_SAME_BYTES(got, want, n);
  free(got);
  free(want);
  device_free(dev);
  free(path);
}

/* A read of one chunk takes one bounce buffer, as kvikio's does: kvik_bounce_buffer_free counts
 * the size set. (The read runs on the calling thread, which gives its buffers back at its end.) */
static void test_small_read_takes_one_buffer(void) {
  kvik_bounce_buffer_free();
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 8192));
  device_write("s", 80);
  kvik_bounce_buffer_free();
  device_read("s", 80);
  ASSERT_EQ(kvik_bounce_buffer_free(), (size_t)8192);
}

/* The process's virtual memory, in bytes (VmSize). */
static size_t virtual_bytes(void) {
  FILE *f = fopen("/proc/self/status", "r");
  ASSERT(f != NULL);
  char line[256];
  size_t kib = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %zu kB", &kib) == 1) break;
  fclose(f);
  ASSERT(kib > 0);
  return kib << 10;
}

/* A buffer of huge pages is a piece of a reserve mapped for as many as the pool has threads: the
 * reserve's untaken pieces are not counted as buffers, and kvik_bounce_buffer_free unmaps them. */
static void test_reserve(void) {
  const size_t huge = (size_t)2 << 20;
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, (int64_t)huge));
  device_write("v", 80);
  kvik_bounce_buffer_free();
  size_t before = virtual_bytes();
  device_read("v", 80);
  ASSERT(virtual_bytes() >= before + 3 * huge); /* the reserve is mapped, 4 pieces */
  ASSERT_EQ(kvik_bounce_buffer_free(), huge);   /* one taken */
  ASSERT(virtual_bytes() < before + huge);      /* and the rest unmapped */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 1));
}

/* A reserve is unmapped also when no buffer is idle: here the one taken from it went with the
 * size it was made for, and the next IO's buffer with its failed registration. */
static void test_reserve_without_idle_buffers(void) {
  const size_t huge = (size_t)2 << 20;
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, (int64_t)huge));
  kvik_bounce_buffer_free();
  size_t before = virtual_bytes();
  device_read("v", 80); /* a reserve of 4 pieces, one taken, then idle */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 8192));
  fail("cuMemHostRegister_v2", 1, 2 /* CUDA_ERROR_OUT_OF_MEMORY */);
  char *path = test_path(dir, "v");
  char *dev = device_alloc(80);
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r", 0, &f));
  ASSERT(kvik_file_read(f, dev, 80, 0) < 0); /* the idle piece freed, the new buffer refused */
  kvik_file_free(f);
  device_free(dev);
  free(path);
  ASSERT_EQ(kvik_bounce_buffer_free(), (size_t)0);
  ASSERT(virtual_bytes() < before + huge);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 1));
}

/* A read of more chunks takes its two bounce buffers as one pinned allocation, so one
 * registration: a new process's first read registers once per thread, not twice. */
static void test_read_registers_once(void) {
  kvik_bounce_buffer_free();
  int64_t task_size;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_TASK_SIZE, &task_size));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 8192));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, 1 << 20)); /* one task of many chunks */
  size_t n = 100000;
  device_write("r", n); /* through buffers of its own, freed here */
  kvik_bounce_buffer_free();
  long before = live("registered");
  device_read("r", n);
  ASSERT_EQ(live("registered"), before + 1);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, task_size));
}

static atomic_int writers_done;

static void *writer(void *arg) {
  char name[32];
  snprintf(name, sizeof name, "t%d", (int)(intptr_t)arg);
  CUdevice dev;
  CUcontext ctx;
  CU_OK(cu.cuDeviceGet(&dev, 0)); /* for the test's own allocations */
  CU_OK(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_OK(cu.cuCtxSetCurrent(ctx));
  for (int i = 0; i < ROUNDS; i++) device_write(name, 100000 + (size_t)i * 333);
  atomic_fetch_add(&writers_done, 1);
  return NULL;
}

static void free_beside_io(int64_t buffer_size) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, buffer_size));
  atomic_store(&writers_done, 0);
  long before = live("registered");
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    ASSERT_EQ(pthread_create(&t[i], NULL, writer, (void *)(intptr_t)i), 0);
  while (atomic_load(&writers_done) < THREADS) kvik_bounce_buffer_free();
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  kvik_bounce_buffer_free();
  ASSERT_EQ(live("registered"), before);
}

static void test_free_beside_io(void) {
  free_beside_io(16384);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, THREADS));
  free_beside_io((int64_t)2 << 20); /* buffers from reserves */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 1));
}

int main(void) {
  if (!load_cuda()) {
    fprintf(stderr, "skip: no libcuda.so.1\n");
    return TEST_SKIP;
  }
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver) *(void **)&live = dlsym(driver, "fake_cuda_live");
  if (driver) *(void **)&fail = dlsym(driver, "fake_cuda_fail");
  if (!live || !fail) {
    fprintf(stderr, "skip: not the fake driver (its live counts prove the frees)\n");
    return TEST_SKIP;
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_COMPAT_MODE, KVIK_COMPAT_ON));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 1));
  dir = test_mkdtemp();
  test_frees_idle_buffers();
  test_sizes_below_a_page();
  test_setting_change_frees_old_size();
  test_small_read_takes_one_buffer();
  test_reserve();
  test_reserve_without_idle_buffers();
  test_free_beside_io();
  test_read_registers_once(); /* last: the pool thread gives its buffers back when idle */
  test_rmdir(dir);
  return 0;
}
