/* KVIK_SETTING_NUMA_AFFINITY (src/numa.c): the sysfs cpulists it parses, good and bad; and reads
 * and writes of device memory with the setting on, byte for byte, on the fake driver, whose
 * devices have no NUMA node here, so that no thread may have moved: the test thread's CPUs are
 * the same after. The test links the static library. */
#define _GNU_SOURCE
#include "../src/numa.h"
#include "test.h"
#include "test_cuda.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define BYTES (24 * MiB + 4097)

static void cpulists(void) {
  cpu_set_t set;
  ASSERT_EQ(kvik__parse_cpulist("0-3,8,10-11\n", &set), 0);
  ASSERT_EQ(CPU_COUNT(&set), 7);
  ASSERT(CPU_ISSET(0, &set) && CPU_ISSET(3, &set) && CPU_ISSET(8, &set) && CPU_ISSET(11, &set));
  ASSERT(!CPU_ISSET(4, &set) && !CPU_ISSET(9, &set));
  ASSERT_EQ(kvik__parse_cpulist("5", &set), 0);
  ASSERT_EQ(CPU_COUNT(&set), 1);
  static const char *const bad[] = {"", "\n", "a", "3-1", "1-", "-1", "1,,2", "1 2", "0-3;4"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    if (kvik__parse_cpulist(bad[i], &set) != -1) FAIL_AT("cpulist \"%s\" was taken", bad[i]);
}

static void reads_and_writes(void) {
  char *dir = test_mkdtemp(), *path = test_path(dir, "numa");
  unsigned char *content = malloc(BYTES), *back = malloc(BYTES);
  ASSERT(content && back);
  test_fill(content, BYTES, 7);
  test_write_file(path, content, BYTES);
  cpu_set_t before, after;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  int64_t was;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_NUMA_AFFINITY, &was));
  ASSERT_EQ(was, 0); /* off by default */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUMA_AFFINITY, 1));
  char *dev = device_alloc(BYTES);
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r+", 0, &f));
  ASSERT_EQ(kvik_file_read(f, dev, BYTES, 0), (ssize_t)BYTES);
  CU_OK(cu.cuMemcpyDtoH_v2(back, (CUdeviceptr)(uintptr_t)dev, BYTES));
  ASSERT_SAME_BYTES(back, content, BYTES);
  ASSERT_EQ(kvik_file_write(f, dev, BYTES - 4097, 4097), (ssize_t)(BYTES - 4097));
  kvik_file_free(f);
  size_t n;
  unsigned char *written = test_read_file(path, &n);
  ASSERT_EQ(n, BYTES);
  ASSERT_SAME_BYTES(written + 4097, content, BYTES - 4097);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUMA_AFFINITY, 0));
  ASSERT_EQ(sched_getaffinity(0, sizeof after, &after), 0);
  ASSERT(CPU_EQUAL(&before, &after));
  device_free(dev);
  free(written);
  free(content);
  free(back);
  unlink(path);
  free(path);
  test_rmdir(dir);
}

int main(void) {
  cpulists();
  printf("ok: cpulists\n");
  if (!load_cuda()) {
    printf("no CUDA driver: reads skipped\n");
    return 77;
  }
  reads_and_writes();
  printf("ok: device reads and writes with numa_affinity on\n");
  return 0;
}
