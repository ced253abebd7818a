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

/* The child of test_cuda_searched_once(): CUDA asked for four times. */
static int ask_cuda_often(void) {
  for (int i = 0; i < 2; i++)
    if (kvik_cuda_driver_version() != KVIK_ECUDA_UNAVAILABLE ||
        kvik_cuda_device_count() != KVIK_ECUDA_UNAVAILABLE)
      return 1;
  return 0;
}

/* A process without the CUDA driver looks for it once, not at every call that needs it: the
 * dynamic loader's trace (LD_DEBUG=libs, on stderr) of a child that asks four times names
 * libcuda.so.1 once. */
static void test_cuda_searched_once(void) {
  if (kvik_runtime_lib_supported(KVIK_LIB_CUDA, NULL, 0) != 0) {
    printf("a CUDA driver is here: test_cuda_searched_once skipped\n");
    return;
  }
  char self[4096], command[4200];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT(len > 0);
  self[len] = '\0';
  snprintf(command, sizeof command, "KVIK_TEST_ASK_CUDA=1 LD_DEBUG=libs '%s' 2>&1", self);
  FILE *out = popen(command, "r");
  ASSERT(out != NULL);
  char line[1024];
  int searches = 0;
  while (fgets(line, sizeof line, out)) searches += strstr(line, "find library=libcuda.so.1") != NULL;
  ASSERT_EQ(pclose(out), 0);
  ASSERT_EQ(searches, 1);
}

int main(void) {
  if (getenv("KVIK_TEST_ASK_CUDA")) return ask_cuda_often();
  test_runtime_lib_probe();
  test_direct_io_probe();
  test_cuda_searched_once();
  return 0;
}
