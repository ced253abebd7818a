/* KVIK_AUTO's zero-copy cost model (src/zero_copy.c, kvik__zc_pays), in processes of its own, as
 * the model keeps the best rates it measured for the life of the process.
 *
 * Without arguments: its priors first, then reads of a file of three granules on the fake driver
 * with registrations made slow (500 ms per granule, 0.13 GB/s: slower than a pread into pinned
 * memory even under ThreadSanitizer, where one ran at 0.5 GB/s), after which registering no longer
 * pays: a first read registers its first granule and no more, a later read on the handle copies
 * that granule from the mapping, a new handle registers nothing under KVIK_AUTO and everything
 * under KVIK_ON.
 *
 * With `again`: rates set where registering pays on one thread but not on two (above anything
 * measured here, which only raises them), and reads on two threads: a handle's first read of a
 * range registers nothing, a read of it again registers, until every granule is; reads smaller
 * than half a granule, and reads past the end of the file, are not counted.
 *
 * Every read's bytes are compared with the file's. The test links the static library. */
#include "../src/zero_copy.h"
#include "fake_cuda.h"
#include "test.h"
#include "test_cuda.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define MiB ((size_t)1 << 20)
#define FILE_BYTES (3 * KVIK__ZC_GRANULE - 5 * MiB - 123)

static fake_cuda_read_only_registrations_fn read_only_registrations;
static fake_cuda_live_fn live;
static fake_cuda_slow_registration_fn slow_registration;

static long registrations(void) { return read_only_registrations(); }

/* Read the whole file through `f` into `dev` and compare. */
static void read_all(kvik_file *f, char *dev, const unsigned char *content, unsigned char *back) {
  memset(back, 0, FILE_BYTES);
  ASSERT_EQ(kvik_file_read(f, dev, FILE_BYTES, 0), (ssize_t)FILE_BYTES);
  CU_OK(cu.cuMemcpyDtoH_v2(back, (CUdeviceptr)(uintptr_t)dev, FILE_BYTES));
  ASSERT_SAME_BYTES(back, content, FILE_BYTES);
}

static kvik_file *open_read(const char *path) {
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r", 0, &f));
  return f;
}

/* Before any measurement: one thread's pread at 6 GB/s against registration at 22, so registering
 * pays up to 3 threads. */
static void priors(void) {
  ASSERT(kvik__zc_pays(1));
  ASSERT(kvik__zc_pays(3));
  ASSERT(!kvik__zc_pays(4));
  ASSERT(!kvik__zc_pays(16));
}

static void slow_registrations(const char *path, const unsigned char *content) {
  unsigned char *back = malloc(FILE_BYTES);
  char *dev = device_alloc(FILE_BYTES);
  ASSERT(back);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_AUTO));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 1));
  slow_registration(500000);
  kvik_file *f = open_read(path);
  long before = registrations();
  read_all(f, dev, content, back);
  ASSERT_EQ(registrations() - before, 1); /* the first granule, which measured the rate */
  ASSERT(!kvik__zc_pays(1));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  read_all(f, dev, content, back); /* the registered granule still serves */
  ASSERT_EQ(registrations() - before, 1);
  ASSERT_EQ(live("read-only"), 1);
  kvik_file *g = open_read(path);
  read_all(g, dev, content, back);
  ASSERT_EQ(registrations() - before, 1);
  kvik_file_free(g);
  kvik_file_free(f);
  ASSERT_EQ(live("read-only"), 0);
  slow_registration(0);
  /* No model: every granule, on one thread (the others of a first read would take the far end
   * through the bounce buffers). */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_ON));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 1));
  g = open_read(path);
  read_all(g, dev, content, back);
  ASSERT_EQ(registrations() - before, 4);
  kvik_file_free(g);
  device_free(dev);
  free(back);
}

/* Read the file in requests of `piece` bytes, twice: none is registered, being smaller than half
 * a granule. */
static void small_reads_not_counted(const char *path, const unsigned char *content) {
  size_t piece = KVIK__ZC_GRANULE / 2 - 4096;
  unsigned char *back = malloc(FILE_BYTES);
  char *dev = device_alloc(FILE_BYTES);
  ASSERT(back);
  kvik_file *f = open_read(path);
  long before = registrations();
  for (int round = 0; round < 2; round++) {
    memset(back, 0, FILE_BYTES);
    for (size_t at = 0; at < FILE_BYTES; at += piece) {
      size_t n = FILE_BYTES - at < piece ? FILE_BYTES - at : piece;
      ASSERT_EQ(kvik_file_read(f, dev + at, n, (int64_t)at), (ssize_t)n);
    }
    CU_OK(cu.cuMemcpyDtoH_v2(back, (CUdeviceptr)(uintptr_t)dev, FILE_BYTES));
    ASSERT_SAME_BYTES(back, content, FILE_BYTES);
  }
  ASSERT_EQ(registrations() - before, 0);
  kvik_file_free(f);
  device_free(dev);
  free(back);
}

static long max_rss_kib(void) {
  struct rusage usage;
  ASSERT_OK(getrusage(RUSAGE_SELF, &usage));
  return usage.ru_maxrss;
}

/* Reads far past the end of the file, twice: nothing to read, and nothing counted (a count per
 * granule up to such an offset would take 2 GiB). */
static void past_the_end_not_counted(kvik_file *f, char *dev) {
  long before = max_rss_kib();
  for (int i = 0; i < 2; i++)
    ASSERT_EQ(kvik_file_read(f, dev, KVIK__ZC_GRANULE / 2, (int64_t)1 << 57), 0);
  ASSERT(max_rss_kib() - before < 256 * 1024);
}

static void registered_when_read_again(const char *path, const unsigned char *content) {
  /* One thread's pread at 100 GB/s, registration at 150: pays on one thread, not on two. The
   * fake's registrations, 2 ms per granule (34 GB/s), leave the rate as set. */
  kvik__zc_note_pread((size_t)100 << 20, 1000000);
  kvik__zc_note_registration((size_t)150 << 20, 1000000);
  slow_registration(2000);
  ASSERT(kvik__zc_pays(1));
  ASSERT(!kvik__zc_pays(2));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_AUTO));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 2));
  small_reads_not_counted(path, content);
  unsigned char *back = malloc(FILE_BYTES);
  char *dev = device_alloc(FILE_BYTES);
  ASSERT(back);
  kvik_file *f = open_read(path);
  long before = registrations();
  read_all(f, dev, content, back);
  ASSERT_EQ(registrations() - before, 0); /* a first read on two threads */
  read_all(f, dev, content, back);
  ASSERT(registrations() - before >= 1); /* at least the granule the front took first */
  for (int reads = 2; reads < 10 && registrations() - before < 3; reads++)
    read_all(f, dev, content, back);
  ASSERT_EQ(registrations() - before, 3);
  read_all(f, dev, content, back); /* all from the mapping */
  ASSERT_EQ(registrations() - before, 3);
  past_the_end_not_counted(f, dev);
  kvik_file *g = open_read(path); /* counts are the handle's */
  read_all(g, dev, content, back);
  ASSERT_EQ(registrations() - before, 3);
  kvik_file_free(g);
  kvik_file_free(f);
  ASSERT_EQ(live("read-only"), 0);
  device_free(dev);
  free(back);
}

int main(int argc, char **argv) {
  int again = argc > 1 && strcmp(argv[1], "again") == 0;
  if (!again) {
    priors();
    printf("ok: the model's priors\n");
  }
  if (!load_cuda()) {
    printf("no CUDA driver: reads skipped\n");
    return 77;
  }
  *(void **)&read_only_registrations = fake_cuda_symbol("fake_cuda_read_only_registrations");
  *(void **)&live = fake_cuda_symbol("fake_cuda_live");
  *(void **)&slow_registration = fake_cuda_symbol("fake_cuda_slow_registration");
  if (!read_only_registrations || !live || !slow_registration) {
    printf("not the fake driver: reads skipped\n");
    return 77;
  }
  char *dir = test_mkdtemp(), *path = test_path(dir, "model");
  unsigned char *content = malloc(FILE_BYTES);
  ASSERT(content);
  test_fill(content, FILE_BYTES, 42);
  test_write_file(path, content, FILE_BYTES);
  if (again) {
    registered_when_read_again(path, content);
    printf("ok: granules read again are registered, on threads where a first read does not\n");
  } else {
    slow_registrations(path, content);
    printf("ok: slow registrations stop a first read registering after its first granule\n");
  }
  unlink(path);
  free(path);
  free(content);
  test_rmdir(dir);
  return 0;
}
