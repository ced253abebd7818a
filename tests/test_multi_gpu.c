/* Several GPUs in one process, against the fake CUDA driver with three devices: reads into one
 * device go on while another device's copies are held (no lock, queue or wait of kvik makes one
 * device wait for another); reads and writes into three devices from several threads at once
 * move the right bytes; one process per device (fork before CUDA, as torchrun's workers are
 * separate processes) works; no pinned buffer of one device serves another (the fake counts
 * copies between a device and page-locked memory made in another device's context); several
 * devices register granules of one file for zero-copy reads between them; and
 * kvik_cuda_device_get_properties() reports what sysfs says of the device's PCI function. Skips
 * (77) where the driver is not the fake or has fewer than 3 devices. */
#include <sys/wait.h>

#include "fake_cuda.h"
#include "test_cuda.h"

#define DEVICES 3
#define MiB ((size_t)1 << 20)

static char *dir;
static CUcontext ctx[DEVICES];
static fake_cuda_hold_copies_fn hold;
static fake_cuda_cross_device_copies_fn cross_device_copies;

static void use_device(int d) { CU_OK(cu.cuCtxSetCurrent(ctx[d])); }

/* Device memory of device d, in its primary context. */
static char *device_alloc_on(int d, size_t n) {
  use_device(d);
  return device_alloc(n);
}

/* Whether device memory [dev, dev + n) holds `want`. */
static void assert_device_holds(int d, const char *dev, const unsigned char *want, size_t n) {
  unsigned char *got = malloc(n);
  use_device(d);
  from_device(got, dev, n);
  ASSERT_SAME_BYTES(got, want, n);
  free(got);
}

/* Device 0 stalls with reads into it in flight on the pool's threads; a read into device 1
 * queued behind them completes. Before, a pool thread that had deferred the end of a read into
 * device 0 waited for its copies before it took a task for device 1, so every thread ended up
 * waiting for device 0. With `gap_ms`, the read into device 1 starts after the threads ran out of
 * work: before, an idle thread waited for its deferred copies before it looked for work again. */
static void stalled_device_leaves_others(int gap_ms) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 2));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, (int64_t)MiB)); /* two chunks a task */
  size_t n0 = 2 * MiB, n1 = 8 * MiB;
  unsigned char *data = malloc(n0 + n1);
  test_fill(data, n0 + n1, 30);
  char *path = test_path(dir, "stall");
  test_write_file(path, data, n0 + n1);
  char *dev0 = device_alloc_on(0, n0), *dev1 = device_alloc_on(1, n1);
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r", 0, &f));
  hold(0, 1);
  kvik_future *f0, *f1;
  ASSERT_OK(kvik_file_pread(f, dev0, n0, 0, 0, &f0));
  usleep((useconds_t)gap_ms * 1000);
  ASSERT_OK(kvik_file_pread(f, dev1, n1, (int64_t)n0, 0, &f1));
  ssize_t got1 = kvik_future_wait_for(f1, 20 * (int64_t)1000000000);
  int done0 = kvik_future_done(f0);
  hold(0, 0); /* before any assertion: a failed one must not leave the pool stuck */
  ASSERT_EQ(got1, (ssize_t)n1);
  ASSERT_EQ(done0, 0);
  ASSERT_EQ(kvik_future_wait(f0), (ssize_t)n0);
  kvik_future_free(f0);
  kvik_future_free(f1);
  assert_device_holds(0, dev0, data, n0);
  assert_device_holds(1, dev1, data + n0, n1);
  kvik_file_free(f);
  device_free(dev0);
  device_free(dev1);
  free(path);
  free(data);
}

/* ---- reads and writes into every device from several threads ------------------------------ */

#define THREADS_PER_DEVICE 2
#define ROUNDS 4

typedef struct worker {
  int device, index;
  size_t size;
} worker;

/* Write device memory of its device to a file of its own, read the file back into other device
 * memory of the same device and into a host buffer, round after round, each byte checked. */
static void *worker_main(void *arg) {
  const worker *w = arg;
  use_device(w->device);
  size_t n = w->size;
  unsigned char *data = malloc(n), *back = malloc(n);
  char name[32];
  snprintf(name, sizeof name, "w%d", w->index);
  char *path = test_path(dir, name);
  char *src = device_alloc(n), *dst = device_alloc(n);
  for (int round = 0; round < ROUNDS; round++) {
    test_fill(data, n, (uint64_t)(w->index * 100 + round));
    to_device(src, data, n);
    kvik_file *f;
    ASSERT_OK(kvik_file_open(path, "w+", 0644, &f));
    ASSERT_EQ(kvik_file_write(f, src, n, 0), (ssize_t)n);
    kvik_future *fut;
    ASSERT_OK(kvik_file_pread(f, dst, n, 0, 0, &fut));
    ASSERT_EQ(kvik_file_read(f, back, n, 0), (ssize_t)n);
    ASSERT_EQ(kvik_future_wait(fut), (ssize_t)n);
    kvik_future_free(fut);
    ASSERT_OK(kvik_file_close(f));
    kvik_file_free(f);
    ASSERT_SAME_BYTES(back, data, n);
    assert_device_holds(w->device, dst, data, n);
  }
  device_free(src);
  device_free(dst);
  free(path);
  free(data);
  free(back);
  return NULL;
}

static void test_every_device_at_once(void) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, (int64_t)MiB));
  pthread_t threads[DEVICES * THREADS_PER_DEVICE];
  worker workers[DEVICES * THREADS_PER_DEVICE];
  for (int i = 0; i < DEVICES * THREADS_PER_DEVICE; i++) {
    /* Sizes that end mid-chunk and mid-page, as well as whole tasks. */
    workers[i] = (worker){i % DEVICES, i, (size_t)(i + 1) * 3 * MiB / 2 + (size_t)i * 777};
    ASSERT_EQ(pthread_create(&threads[i], NULL, worker_main, &workers[i]), 0);
  }
  for (int i = 0; i < DEVICES * THREADS_PER_DEVICE; i++) pthread_join(threads[i], NULL);
}

/* One file read into every device at once, by one thread per device. */
typedef struct shared_read {
  int device;
  kvik_file *file;
  const unsigned char *want;
  size_t size;
} shared_read;

static void *shared_read_main(void *arg) {
  const shared_read *r = arg;
  char *dev = device_alloc_on(r->device, r->size);
  ASSERT_EQ(kvik_file_read(r->file, dev, r->size, 0), (ssize_t)r->size);
  assert_device_holds(r->device, dev, r->want, r->size);
  device_free(dev);
  return NULL;
}

static void test_one_file_into_every_device(void) {
  size_t n = 24 * MiB + 123;
  unsigned char *data = malloc(n);
  test_fill(data, n, 31);
  char *path = test_path(dir, "shared");
  test_write_file(path, data, n);
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r", 0, &f));
  pthread_t threads[DEVICES];
  shared_read reads[DEVICES];
  for (int d = 0; d < DEVICES; d++) {
    reads[d] = (shared_read){d, f, data, n};
    ASSERT_EQ(pthread_create(&threads[d], NULL, shared_read_main, &reads[d]), 0);
  }
  for (int d = 0; d < DEVICES; d++) pthread_join(threads[d], NULL);
  kvik_file_free(f);
  free(path);
  free(data);
}

/* ---- zero-copy reads ------------------------------------------------------------------------ */

#define GRANULE ((size_t)64 << 20) /* KVIK__ZC_GRANULE */

static long fake_count(const char *what) {
  return ((fake_cuda_live_fn)fake_cuda_symbol("fake_cuda_live"))(what);
}

static long registrations(void) {
  return ((fake_cuda_read_only_registrations_fn)fake_cuda_symbol(
      "fake_cuda_read_only_registrations"))();
}

/* Read [offset, offset + n) of the file into new memory of device d and check it. */
static void read_check(kvik_file *f, int d, const unsigned char *data, size_t offset, size_t n) {
  char *dev = device_alloc_on(d, n);
  ASSERT_EQ(kvik_file_read(f, dev, n, (int64_t)offset), (ssize_t)n);
  assert_device_holds(d, dev, data + offset, n);
  device_free(dev);
}

/* Two devices read two granules of one file: each registers the granule it reads first, in its
 * own context. Before, only the context of a file's first registration could register more: the
 * second device's reads took the bounce buffers for good. A third device copies from both
 * registrations without registering, and closing the file undoes each in its own context. */
static void test_zero_copy_from_two_devices(void) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_ON));
  /* Each read in one task, whose front takes all of it: in more, the back may read a whole granule
   * through the bounce buffers before the front registers it, as fast threads do. */
  int64_t task_size;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_TASK_SIZE, &task_size));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, (int64_t)(2 * GRANULE)));
  size_t n = 2 * GRANULE;
  unsigned char *data = malloc(n);
  test_fill(data, n, 32);
  char *path = test_path(dir, "zero_copy");
  test_write_file(path, data, n);
  long live_before = fake_count("read-only"), calls_before = registrations();
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r", 0, &f));
  read_check(f, 0, data, 0, GRANULE);
  read_check(f, 1, data, GRANULE, GRANULE);
  ASSERT_EQ(fake_count("read-only") - live_before, 2);
  read_check(f, 2, data, 0, n);
  ASSERT_EQ(registrations() - calls_before, 2);
  kvik_file_free(f);
  ASSERT_EQ(fake_count("read-only"), live_before);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, task_size));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_OFF));
  free(path);
  free(data);
}

/* kvik_bounce_buffer_free() frees the idle pinned buffers of every device. Pool threads give
 * theirs back once they run out of work, just after the reads they served completed: the test
 * gives them a few seconds. */
static void test_free_every_device(void) {
  for (int i = 0; i < 500 && fake_count("registered") > 0; i++) {
    kvik_bounce_buffer_free();
    usleep(10000);
  }
  ASSERT_EQ(fake_count("registered"), 0);
  ASSERT_EQ(kvik_bounce_buffer_free(), 0);
}

/* ---- one process per device ----------------------------------------------------------------- */

/* Before this process loads CUDA: each child takes one device, as a torchrun worker does, writes
 * a file from it and reads the file back. A child reports through its exit status: 77 where the
 * driver is not the fake with enough devices. Returns whether the children ran. */
static int test_process_per_device(void) {
  pid_t pids[DEVICES];
  for (int d = 0; d < DEVICES; d++) {
    pids[d] = fork();
    ASSERT(pids[d] >= 0);
    if (pids[d] > 0) continue;
    if (!load_cuda() || !fake_cuda_symbol("fake_cuda_hold_copies") ||
        kvik_cuda_device_count() < DEVICES)
      _exit(TEST_SKIP);
    CUdevice dev;
    CU_OK(cu.cuDeviceGet(&dev, d));
    CU_OK(cu.cuDevicePrimaryCtxRetain(&ctx[d], dev));
    worker w = {d, 100 + d, 5 * MiB + (size_t)d};
    worker_main(&w);
    _exit(0);
  }
  int ran = 1;
  for (int d = 0; d < DEVICES; d++) {
    int status;
    ASSERT_EQ(waitpid(pids[d], &status, 0), pids[d]);
    ASSERT(WIFEXITED(status));
    if (WEXITSTATUS(status) == TEST_SKIP) ran = 0;
    else ASSERT_EQ(WEXITSTATUS(status), 0);
  }
  return ran;
}

/* ---- where each device sits ----------------------------------------------------------------- */

/* What the test itself reads of a sysfs attribute: its first line, or "" where there is none. */
static void read_attribute(const char *id, const char *name, char *text, size_t len) {
  char path[256];
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/%s", id, name);
  text[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f) return;
  if (!fgets(text, (int)len, f)) text[0] = '\0';
  fclose(f);
  text[strcspn(text, "\n")] = '\0';
}

static int generation_of(const char *speed) {
  static const double rates[] = {2.5, 5, 8, 16, 32, 64};
  char *end;
  double rate = strtod(speed, &end);
  for (int g = 0; end != speed && g < 6; g++)
    if (rate == rates[g]) return g + 1;
  return 0;
}

/* Device 0 is given the first PCI function this machine has (main sets it), devices 1 and 2 ids
 * that no machine has. */
static void test_properties(const char *first_function) {
  for (int d = 0; d < DEVICES; d++) {
    kvik_cuda_device_properties p = {.struct_size = sizeof p};
    ASSERT_OK(kvik_cuda_device_get_properties(d, &p));
    char want[64];
    snprintf(want, sizeof want, "Fake CUDA Device %d", d);
    ASSERT(strcmp(p.name, want) == 0);
    ASSERT(p.total_memory > 0);
    if (d > 0 || !*first_function) {
      snprintf(want, sizeof want, "0000:%02x:00.0", 0x80 + d);
      ASSERT(strcmp(p.pci_bus_id, want) == 0);
      ASSERT_EQ(p.numa_node, -1);
      ASSERT_EQ(p.link_width, 0);
      ASSERT_EQ(p.link_generation, 0);
      ASSERT_EQ(p.max_link_width, 0);
      ASSERT_EQ(p.max_link_generation, 0);
      continue;
    }
    ASSERT(strcmp(p.pci_bus_id, first_function) == 0);
    char text[64];
    read_attribute(first_function, "numa_node", text, sizeof text);
    ASSERT_EQ(p.numa_node, *text && atoi(text) >= 0 ? atoi(text) : -1);
    read_attribute(first_function, "current_link_width", text, sizeof text);
    ASSERT_EQ(p.link_width, atoi(text) > 0 ? atoi(text) : 0);
    read_attribute(first_function, "max_link_width", text, sizeof text);
    ASSERT_EQ(p.max_link_width, atoi(text) > 0 ? atoi(text) : 0);
    read_attribute(first_function, "current_link_speed", text, sizeof text);
    ASSERT_EQ(p.link_generation, generation_of(text));
    read_attribute(first_function, "max_link_speed", text, sizeof text);
    ASSERT_EQ(p.max_link_generation, generation_of(text));
  }
  kvik_cuda_device_properties p = {.struct_size = sizeof p};
  ASSERT_FAILS(kvik_cuda_device_get_properties(DEVICES, &p), -EINVAL, "no such device");
  ASSERT_FAILS(kvik_cuda_device_get_properties(0, NULL), -EINVAL, "struct_size");
}

/* The first PCI function of this machine, "" where it has none (a container without sysfs). */
static void first_pci_function(char *id, size_t len) {
  id[0] = '\0';
  FILE *ls = popen("ls /sys/bus/pci/devices 2>/dev/null | head -n 1", "r");
  if (!ls) return;
  if (!fgets(id, (int)len, ls)) id[0] = '\0';
  pclose(ls);
  id[strcspn(id, "\n")] = '\0';
}

int main(void) {
  char first_function[64];
  first_pci_function(first_function, sizeof first_function);
  if (*first_function) setenv("FAKE_CUDA_PCI_BUS_IDS", first_function, 1);
  dir = test_mkdtemp();
  /* First: the children load CUDA, which this process must not have done. */
  if (!test_process_per_device() || !load_cuda()) {
    fprintf(stderr, "skip: not the fake driver with %d devices (FAKE_CUDA_DEVICES)\n", DEVICES);
    test_rmdir(dir);
    return TEST_SKIP;
  }
  hold = (fake_cuda_hold_copies_fn)fake_cuda_symbol("fake_cuda_hold_copies");
  cross_device_copies =
      (fake_cuda_cross_device_copies_fn)fake_cuda_symbol("fake_cuda_cross_device_copies");
  for (int d = 0; d < DEVICES; d++) {
    CUdevice dev;
    CU_OK(cu.cuDeviceGet(&dev, d));
    CU_OK(cu.cuDevicePrimaryCtxRetain(&ctx[d], dev));
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_OFF));
  test_properties(first_function);
  stalled_device_leaves_others(0);
  stalled_device_leaves_others(200);
  test_every_device_at_once();
  test_one_file_into_every_device();
  /* Every copy above went through a pinned buffer of its own device (no test copy is counted:
   * the test's own copies are synchronous ones of pageable memory). */
  ASSERT_EQ(cross_device_copies(), 0);
  test_free_every_device();
  test_zero_copy_from_two_devices(); /* its registrations serve every device, as they should */
  test_rmdir(dir);
  return 0;
}
