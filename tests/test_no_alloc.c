/* A blocking read or write of host memory that one task on the calling thread serves (up to
 * KVIK_SETTING_TASK_SIZE) allocates nothing (issue 29: small reads at the speed of pread(2)): with
 * the next allocation armed to fail, kvik_file_read and kvik_file_write move their bytes and none
 * fails, and their errors still say how much moved. Needs a build with -DKVIK_FAULT_INJECTION=ON
 * (tests/CMakeLists.txt). */
#include "test.h"
#include "../src/sys.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define FILE_BYTES ((size_t)8 << 20)

static unsigned char *ref;

/* The next allocation anywhere fails: none must come (kvik__fault_injected() stays 0). */
static void fail_allocations(void) { kvik__fault_arm(KVIK__FAULT_ALLOC, NULL, 1, ENOMEM); }

static void test_reads_and_writes(kvik_file *f) {
  static unsigned char got[4 << 20], data[64 << 10];
  unsigned seed = 29;
  for (int i = 0; i < 200; i++) {
    seed = seed * 1103515245u + 12345u;
    size_t size = 1 + (seed >> 8) % (i % 2 ? sizeof got : 8192);
    int64_t at = (int64_t)((seed >> 4) % (FILE_BYTES - size));
    ASSERT_EQ(kvik_file_read(f, got, size, at), (ssize_t)size);
    ASSERT(memcmp(got, ref + at, size) == 0);
  }
  for (size_t i = 0; i < sizeof data; i++) data[i] = (unsigned char)(i * 7 + 3);
  ASSERT_EQ(kvik_file_write(f, data, sizeof data, 12345), (ssize_t)sizeof data);
  memcpy(ref + 12345, data, sizeof data);
  ASSERT_EQ(kvik_file_read(f, got, 100, (int64_t)FILE_BYTES - 40), 40); /* the end of the file */
  ASSERT(memcmp(got, ref + FILE_BYTES - 40, 40) == 0);
}

int main(void) {
  char *dir = test_mkdtemp();
  char *path = test_path(dir, "no-alloc");
  ref = malloc(FILE_BYTES);
  ASSERT(ref);
  for (size_t i = 0; i < FILE_BYTES; i++) ref[i] = (unsigned char)(i * 2654435761u >> 13);
  test_write_file(path, ref, FILE_BYTES);
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r+", 0644, &f));
  unsigned char warm[64];
  ASSERT_EQ(kvik_file_read(f, warm, sizeof warm, 0), (ssize_t)sizeof warm); /* settings read */

  fail_allocations();
  test_reads_and_writes(f);
  ASSERT_EQ(kvik__fault_injected(), 0);
  /* An error still says how much of the request moved. */
  kvik__fault_arm(KVIK__FAULT_READ, NULL, 1, EIO);
  ASSERT_FAILS(kvik_file_read(f, warm, sizeof warm, 0), -EIO, "(0 of 64 bytes transferred)");
  kvik__fault_disarm();

  ASSERT_OK(kvik_file_close(f));
  ASSERT_FAILS(kvik_file_read(f, warm, sizeof warm, 0), -EBADF, "closed");
  kvik_file_free(f);
  unlink(path);
  free(path);
  test_rmdir(dir);
  free(ref);
  printf("no allocation: tested\n");
  return 0;
}
