/* Host IO round trips at random offsets and sizes, compared byte for byte with a POSIX
 * reference, over thread counts, task sizes, buffer alignments and direct IO on and off; and
 * reads racing truncations of their file. */
#include "test.h"

#define FILE_BYTES ((size_t)(3 << 20) + 12345)
#define PAGE 4096

static char *dir;
static uint64_t rng = 0x9e3779b97f4a7c15ULL;

/* Sizes at the edges: empty, single byte, around pages and tasks, the file and beyond. */
static size_t edge_size(size_t i, size_t task_size) {
  const size_t sizes[] = {0, 1, PAGE - 1, PAGE, PAGE + 1, task_size - 1, task_size, task_size + 1,
                          3 * task_size + 17, FILE_BYTES, FILE_BYTES + 5000};
  return sizes[i % (sizeof sizes / sizeof sizes[0])];
}

static size_t expected_read(int64_t offset, size_t size) {
  if ((size_t)offset >= FILE_BYTES) return 0;
  return size < FILE_BYTES - (size_t)offset ? size : FILE_BYTES - (size_t)offset;
}

/* Read [offset, offset+size) in one of three ways, into buf at a given misalignment; check
 * the bytes read and that nothing past them was touched. */
static void check_read(kvik_file *f, const unsigned char *ref, unsigned char *area, size_t misalign, int64_t offset,
                       size_t size, size_t task_size, int how) {
  unsigned char *buf = area + misalign;
  memset(buf, 0xAB, size + 64);
  ssize_t got;
  if (how == 0) {
    got = kvik_file_read(f, buf, size, offset);
  } else {
    kvik_future *fut = NULL;
    ASSERT_OK(kvik_file_pread(f, buf, size, offset, how == 1 ? 0 : task_size, &fut));
    got = kvik_future_wait(fut);
    ASSERT_EQ(kvik_future_done(fut), 1);
    ASSERT_EQ(kvik_future_bytes_done(fut), got);
    kvik_future_free(fut);
  }
  size_t want = expected_read(offset, size);
  if (got != (ssize_t)want)
    FAIL_AT("read of %zu at %lld (how %d, misalign %zu) returned %zd, expected %zu", size, (long long)offset, how,
            misalign, got, want);
  ASSERT_SAME_BYTES(buf, ref + offset, want);
  for (size_t i = want; i < size + 64; i++)
    if (buf[i] != 0xAB) FAIL_AT("byte %zu past the %zu read was overwritten", i, want);
}

static void read_round(kvik_file *f, const unsigned char *ref, unsigned char *area, size_t task_size) {
  for (size_t i = 0; i < 33; i++) {
    size_t size = i < 11 ? edge_size(i, task_size) : test_below(&rng, FILE_BYTES / 2);
    int64_t offset = (int64_t)(i % 3 == 0 ? test_below(&rng, 4) * PAGE : test_below(&rng, FILE_BYTES + 100));
    check_read(f, ref, area, test_below(&rng, 3) == 0 ? 0 : test_below(&rng, PAGE), offset, size, task_size,
               (int)(i % 3));
  }
  /* At and past the end of the file: zero bytes, no error. */
  check_read(f, ref, area, 0, FILE_BYTES, 100, task_size, 0);
  check_read(f, ref, area, 0, FILE_BYTES + 1000000, 100, task_size, 1);
}

/* Writes at random places, mirrored in a model; the file must equal the model afterwards. */
static void write_round(const char *path, size_t task_size) {
  unsigned char *model = calloc(1, 2 * FILE_BYTES), *data;
  ASSERT_EQ(posix_memalign((void **)&data, PAGE, FILE_BYTES + 2 * PAGE), 0);
  size_t model_len = 0;
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "w+", 0644, &f));
  for (size_t i = 0; i < 24; i++) {
    size_t size = i < 11 ? edge_size(i, task_size) % FILE_BYTES : test_below(&rng, FILE_BYTES / 3);
    int64_t offset = (int64_t)(i % 4 == 0 ? test_below(&rng, 8) * PAGE : test_below(&rng, FILE_BYTES));
    unsigned char *src = data + test_below(&rng, 2) * test_below(&rng, PAGE);
    test_fill(src, size, i + 77);
    ssize_t put;
    if (i % 2) {
      put = kvik_file_write(f, src, size, offset);
    } else {
      kvik_future *fut;
      ASSERT_OK(kvik_file_pwrite(f, src, size, offset, task_size, &fut));
      put = kvik_future_wait(fut);
      kvik_future_free(fut);
    }
    ASSERT_EQ(put, size);
    memcpy(model + offset, src, size);
    if (size && (size_t)offset + size > model_len) model_len = (size_t)offset + size;
  }
  ASSERT_EQ(kvik_file_size(f), model_len);
  kvik_file_free(f);
  size_t n;
  unsigned char *content = test_read_file(path, &n);
  ASSERT_EQ(n, model_len);
  ASSERT_SAME_BYTES(content, model, n);
  free(content);
  free(model);
  free(data);
}

static void run_config(const char *path, const unsigned char *ref, unsigned char *area, int threads, size_t task_size,
                       int direct) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, threads));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, (int64_t)task_size));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, direct));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, direct));
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r", 0, &f));
  read_round(f, ref, area, task_size);
  kvik_file_free(f);
  char *wpath = test_path(dir, "written");
  write_round(wpath, task_size);
  free(wpath);
}

/* Reads of many tasks while the file shrinks and grows under them: a task may meet the end of
 * file while a later one reads bytes written after it. The count a read returns covers only bytes
 * it read, each the file's or zero (read between an extension and its rewrite); never a hole. */
static void test_truncation_race(const unsigned char *ref, unsigned char *area) {
  char *path = test_path(dir, "truncated");
  test_write_file(path, ref, FILE_BYTES);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, 64 << 10));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 0));
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r", 0, &f));
  test_truncator t;
  test_truncator_start(&t, path, ref, FILE_BYTES);
  for (int i = 0; i < 300; i++) {
    size_t size = 1 + test_below(&rng, FILE_BYTES), offset = test_below(&rng, FILE_BYTES - size + 1);
    memset(area, 0xAB, size);
    ssize_t got = kvik_file_read(f, area, size, (int64_t)offset);
    if (got < 0 || (size_t)got > size) FAIL_AT("read of %zu bytes at %zu returned %zd", size, offset, got);
    long long foreign = test_first_foreign(area, ref + offset, (size_t)got);
    if (foreign >= 0)
      FAIL_AT("read of %zu bytes at %zu returned %zd: byte %lld is neither the file's nor zero", size, offset, got,
              foreign);
  }
  test_truncator_stop(&t);
  kvik_file_free(f);
  unlink(path);
  free(path);
}

int main(void) {
  dir = test_mkdtemp();
  char *path = test_path(dir, "reference");
  unsigned char *ref = malloc(FILE_BYTES);
  test_fill(ref, FILE_BYTES, 42);
  test_write_file(path, ref, FILE_BYTES);
  /* Page-aligned, so that misalignment 0 takes the direct path without a bounce buffer. */
  unsigned char *area;
  ASSERT_EQ(posix_memalign((void **)&area, PAGE, 2 * FILE_BYTES + 2 * PAGE), 0);
  /* Send small requests through the pool too, so splitting is exercised at every size. */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
  const int threads[] = {1, 2, 4};
  const size_t task_sizes[] = {64 << 10, 100003, 1 << 20};
  for (int t = 0; t < 3; t++)
    for (int s = 0; s < 3; s++)
      for (int direct = 0; direct < 2; direct++) run_config(path, ref, area, threads[t], task_sizes[s], direct);
  /* And with the default threshold, where small requests run on the calling thread. */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 1 << 20));
  run_config(path, ref, area, 2, 64 << 10, 0);
  test_truncation_race(ref, area);
  free(area);
  free(ref);
  free(path);
  test_rmdir(dir);
  return 0;
}
