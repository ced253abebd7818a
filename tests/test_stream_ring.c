/* The ring of a stream-ordered request from or into device memory (src/stream_io.c) after a
 * failure: the host threads pass the chunks that they do not move, and a chunk passed must not let
 * the stream use a slot that another host thread still moves an earlier chunk through.
 *
 * Two host threads, four slots, eight chunks. The first pwrite (pread) waits 200 ms before it is
 * made, the second fails with EIO; the thread that failed passes the other six chunks meanwhile.
 *  - write: the slot of the slow chunk must not get chunk k + 4's bytes before it is written out:
 *    each byte of the file is then old or new, never another chunk's;
 *  - read: the stream must not copy the slow chunk's slot to the device before the pread filled
 *    it: one of chunks 0 and 1 (the slow one) holds the file's bytes. (kvik.h leaves the bytes of
 *    a failed read unspecified; this checks the ring's order, not the contract.)
 * Needs a build with -DKVIK_FAULT_INJECTION=ON and the fake CUDA driver (tests/CMakeLists.txt). */
#include "test_cuda.h"
#include "../src/sys.h"

#define CHUNK ((size_t)64 << 10) /* the task size: a chunk of the ring */
#define CHUNKS 8
#define BYTES (CHUNK * CHUNKS)
#define SLOW_US (200 * 1000)

static char *path;
static unsigned char *old_bytes, *new_bytes, *file_bytes, *got; /* file_bytes: the read's file */
static char *dev;

static kvik_file *open_file(void) {
  kvik_file *f;
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_COMPAT_MODE, KVIK_COMPAT_ON));
  ASSERT_OK(kvik_file_open(path, "r+", 0644, &f));
  return f;
}

/* The request in the order of the default stream, its first `call` slow and its second failed;
 * returns the future's result once the stream passed it. */
static ssize_t slow_then_failed(kvik__fault_call call, int write) {
  kvik_file *f = open_file();
  kvik__fault_delay(call, NULL, 1, SLOW_US);
  kvik__fault_arm(call, NULL, 2, EIO);
  kvik_future *future;
  int rc = write ? kvik_file_write_async(f, dev, BYTES, 0, NULL, &future)
                 : kvik_file_read_async(f, dev, BYTES, 0, NULL, &future);
  ASSERT_OK(rc);
  CU_OK(cu.cuStreamSynchronize(NULL));
  ssize_t n = kvik_future_wait(future);
  kvik_future_free(future);
  ASSERT_EQ(kvik__fault_injected(), 1);
  kvik__fault_disarm();
  kvik_file_free(f);
  return n;
}

static void test_write(void) {
  test_write_file(path, old_bytes, BYTES);
  to_device(dev, new_bytes, BYTES);
  ASSERT_EQ(slow_then_failed(KVIK__FAULT_WRITE, 1), -EIO);
  size_t n;
  unsigned char *content = test_read_file(path, &n);
  ASSERT_EQ(n, BYTES);
  for (size_t i = 0; i < BYTES; i++)
    if (content[i] != old_bytes[i] && content[i] != new_bytes[i])
      FAIL_AT("byte %zu (chunk %zu) is %#x, neither old %#x nor new %#x", i, i / CHUNK,
              content[i], old_bytes[i], new_bytes[i]);
  free(content);
}

static void test_read(void) {
  test_write_file(path, file_bytes, BYTES); /* unlike what the write left in the slots */
  to_device(dev, old_bytes, BYTES);
  ASSERT_EQ(slow_then_failed(KVIK__FAULT_READ, 0), -EIO);
  from_device(got, dev, BYTES);
  if (memcmp(got, file_bytes, CHUNK) != 0 && memcmp(got + CHUNK, file_bytes + CHUNK, CHUNK) != 0)
    FAIL_AT("neither chunk 0 nor chunk 1 holds the file's bytes: the stream copied the slow "
            "chunk's slot before its pread filled it");
}

int main(void) {
  if (!load_cuda()) return TEST_SKIP;
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 2));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, (int64_t)CHUNK));
  char *dir = test_mkdtemp();
  path = test_path(dir, "ring");
  old_bytes = malloc(BYTES);
  new_bytes = malloc(BYTES);
  file_bytes = malloc(BYTES);
  got = malloc(BYTES);
  ASSERT(old_bytes && new_bytes && file_bytes && got);
  test_fill(old_bytes, BYTES, 1);
  test_fill(new_bytes, BYTES, 2);
  test_fill(file_bytes, BYTES, 3);
  dev = device_alloc(BYTES);
  test_write();
  test_read();
  device_free(dev);
  free(old_bytes);
  free(new_bytes);
  free(file_bytes);
  free(got);
  free(path);
  test_rmdir(dir);
  return 0;
}
