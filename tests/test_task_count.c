/* Requests asked to run in tiny tasks (issue 24, item 6): task_size 1 over 64 MiB reads and
 * writes the right bytes, from and to host and device memory, and the memory the request takes
 * stays bounded, since a request is cut into at most 16384 tasks (kvik_file_pread). Device memory
 * comes from the fake CUDA driver in CI, from the GPU on a GPU machine; without a driver those
 * cases skip. */
#include <fcntl.h>
#include <sys/resource.h>

#include "test.h"
#include "test_cuda.h"

#define MiB ((size_t)1 << 20)
#define SIZE (64 * MiB)
#define WARM_UP MiB
/* Peak resident memory one request may add, in KiB: its tasks' structs (a few MiB), with room for
 * what the allocator and the threads' stacks take. Allocating every task of 1 byte takes 17 GB. */
#define GROWTH_MAX_KIB (64L << 10)

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#else
#define UNDER_SANITIZER 0
#endif

static char *dir, *ref_path;
static unsigned char *ref, *host;
static int limit_address_space; /* see limit_growth() */

/* Start counting the peak resident memory again from what is resident now: 1, or 0 where the
 * kernel does not let this process (Linux before 4.0, some sandboxes). */
static int reset_peak_rss(void) {
  int fd = open("/proc/self/clear_refs", O_WRONLY);
  int ok = fd >= 0 && write(fd, "5", 1) == 1;
  if (fd >= 0) close(fd);
  return ok;
}

/* The field `name` of /proc/self/status, in KiB. */
static long status_kib(const char *name) {
  char line[256];
  long kib = -1;
  size_t n = strlen(name);
  FILE *f = fopen("/proc/self/status", "r");
  ASSERT(f);
  while (kib < 0 && fgets(line, sizeof line, f))
    if (strncmp(line, name, n) == 0 && line[n] == ':') kib = atol(line + n + 1);
  fclose(f);
  ASSERT(kib >= 0);
  return kib;
}

static long address_space_bytes(void) {
  long pages = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  ASSERT(f && fscanf(f, "%ld", &pages) == 1);
  fclose(f);
  return pages * sysconf(_SC_PAGESIZE);
}

/* Where it is safe, the address space may grow by at most 4 GiB from now on, so that a library
 * that allocates every task fails with ENOMEM instead of filling the machine's memory. Not under
 * the sanitizers, which map memory of their own, nor with a real CUDA driver, which may reserve
 * address space as it pleases. Returns the limit to restore. */
static struct rlimit limit_growth(void) {
  struct rlimit old;
  ASSERT(getrlimit(RLIMIT_AS, &old) == 0);
  if (limit_address_space) {
    struct rlimit lim = {(rlim_t)address_space_bytes() + ((rlim_t)4 << 30), old.rlim_max};
    if (old.rlim_cur == RLIM_INFINITY || lim.rlim_cur < old.rlim_cur)
      ASSERT(setrlimit(RLIMIT_AS, &lim) == 0);
  }
  return old;
}

/* Run the request of `size` bytes at offset 0 that `start` starts with task_size 1, wait, and
 * check its count and how much peak resident memory it added. */
typedef int (*start_fn)(kvik_file *f, void *buf, size_t size, int64_t offset, size_t task_size,
                        kvik_future **future);

static void run_tiny_tasks(const char *what, start_fn start, kvik_file *f, void *buf, size_t size) {
  int measured = reset_peak_rss();
  long before = status_kib("VmRSS");
  struct rlimit old = limit_growth();
  kvik_future *fut;
  int rc = start(f, buf, size, 0, 1, &fut);
  ssize_t got = rc < 0 ? rc : kvik_future_wait(fut);
  if (rc == 0) kvik_future_free(fut);
  ASSERT(setrlimit(RLIMIT_AS, &old) == 0);
  if (got != (ssize_t)size)
    FAIL_AT("%s of %zu bytes in tasks of 1 byte returned %zd (%s)", what, size, got,
            kvik_err_name((int)got));
  long growth = status_kib("VmHWM") - before;
  if (size < SIZE) return;
  if (!measured) {
    printf("ok: %s of 64 MiB in tasks of 1 byte (memory not measured: no /proc/self/clear_refs)\n",
           what);
    return;
  }
  if (growth > GROWTH_MAX_KIB)
    FAIL_AT("%s of 64 MiB in tasks of 1 byte added %ld KiB of peak resident memory", what, growth);
  printf("ok: %s of 64 MiB in tasks of 1 byte: %ld KiB more peak resident memory\n", what, growth);
}

static void check_file(const char *path) {
  size_t n;
  unsigned char *content = test_read_file(path, &n);
  ASSERT_EQ(n, SIZE);
  ASSERT_SAME_BYTES(content, ref, SIZE);
  free(content);
}

static int pread_fn(kvik_file *f, void *buf, size_t size, int64_t offset, size_t task_size,
                    kvik_future **fut) {
  return kvik_file_pread(f, buf, size, offset, task_size, fut);
}

static int pwrite_fn(kvik_file *f, void *buf, size_t size, int64_t offset, size_t task_size,
                     kvik_future **fut) {
  return kvik_file_pwrite(f, buf, size, offset, task_size, fut);
}

/* A read into `buf` and a write from it, each warmed up first with a small request of the same
 * task size, so that what the library keeps between requests (threads, bounce buffers) is
 * there before the measured one. `get`/`put` move bytes between `buf` and host memory. */
static void read_and_write(const char *kind, void *buf, void (*put)(void *, const void *, size_t),
                           void (*get)(void *, const void *, size_t)) {
  char what[64], *out = test_path(dir, "written");
  kvik_file *f;
  ASSERT_OK(kvik_file_open(ref_path, "r", 0, &f));
  put(buf, host, SIZE); /* zeroes: every page resident before the measurement */
  snprintf(what, sizeof what, "read into %s memory", kind);
  run_tiny_tasks(what, pread_fn, f, buf, WARM_UP);
  run_tiny_tasks(what, pread_fn, f, buf, SIZE);
  kvik_file_free(f);
  get(host, buf, SIZE);
  ASSERT_SAME_BYTES(host, ref, SIZE);

  ASSERT_OK(kvik_file_open(out, "w", 0644, &f));
  put(buf, ref, SIZE);
  snprintf(what, sizeof what, "write from %s memory", kind);
  run_tiny_tasks(what, pwrite_fn, f, buf, WARM_UP);
  run_tiny_tasks(what, pwrite_fn, f, buf, SIZE);
  kvik_file_free(f);
  check_file(out);
  unlink(out);
  free(out);
  memset(host, 0, SIZE);
}

static void host_put(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }
static void device_put(void *dst, const void *src, size_t n) { to_device(dst, src, n); }
static void device_get(void *dst, const void *src, size_t n) { from_device(dst, src, n); }

/* Whether the CUDA driver loaded is the fake of fake_cuda.c. */
static int fake_driver(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  int fake_one = h && dlsym(h, "fake_cuda_calls");
  if (h) dlclose(h);
  return fake_one;
}

int main(void) {
  dir = test_mkdtemp();
  ref_path = test_path(dir, "reference");
  ref = malloc(SIZE);
  host = calloc(1, SIZE);
  test_fill(ref, SIZE, 24);
  test_write_file(ref_path, ref, SIZE);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  limit_address_space = !UNDER_SANITIZER;
  unsigned char *buf = calloc(1, SIZE);
  read_and_write("host", buf, host_put, host_put);
  free(buf);
  if (load_cuda()) {
    limit_address_space = !UNDER_SANITIZER && fake_driver();
    char *dev = device_alloc(SIZE);
    read_and_write("device", dev, device_put, device_get);
    device_free(dev);
  } else {
    printf("skipped device memory: no CUDA driver\n");
  }
  free(host);
  free(ref);
  free(ref_path);
  test_rmdir(dir);
  return 0;
}
