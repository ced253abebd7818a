/* What the library found: run-time library probes and the O_DIRECT probe. */
#include "test.h"

static void test_runtime_lib_probe(void) {
  char detail[512];
  for (int lib = KVIK_LIB_CUDA; lib <= KVIK_LIB_CUFILE; lib++) {
    detail[0] = '\0';
    int found = kvik_runtime_lib_supported((kvik_runtime_lib)lib, detail, sizeof detail);
    ASSERT(found == 0 || found == 1);
    ASSERT(detail[0] != '\0'); /* a path when found, the loader's reason when not */
    if (found) ASSERT(strstr(detail, lib == KVIK_LIB_CUDA ? "libcuda" : "libcufile"));
    ASSERT_EQ(kvik_runtime_lib_supported((kvik_runtime_lib)lib, NULL, 0), found);
  }
  ASSERT_FAILS(kvik_runtime_lib_supported((kvik_runtime_lib)7, detail, sizeof detail), -EINVAL, "unknown library");
}

/* The probe must agree with what open(O_DIRECT) and an aligned transfer really do in that
 * directory, and must leave nothing behind. */
static void test_direct_io_probe(void) {
  char *dir = test_mkdtemp();
  int supported = kvik_direct_io_supported(dir);
  ASSERT(supported == 0 || supported == 1);
  char *path = test_path(dir, "direct");
  int fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  int works = 0;
  void *block = NULL;
  if (fd >= 0 && posix_memalign(&block, 4096, 4096) == 0) {
    memset(block, 1, 4096);
    works = pwrite(fd, block, 4096, 0) == 4096;
  }
  free(block);
  if (fd >= 0) close(fd);
  unlink(path);
  ASSERT_EQ(supported, works);
  char cmd[512];
  snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", dir);
  ASSERT(system(cmd) == 0); /* the probe's temporary file is gone */
  ASSERT_FAILS(kvik_direct_io_supported("/nonexistent/kvik"), -ENOENT, "/nonexistent/kvik");
  ASSERT_FAILS(kvik_direct_io_supported(NULL), -EINVAL, "NULL");
  free(path);
  test_rmdir(dir);
}

int main(void) {
  test_runtime_lib_probe();
  test_direct_io_probe();
  return 0;
}
