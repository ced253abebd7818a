/* Page-cache tools: resident page counts follow reads and drops. ctest runs it once more with
 * KVIK_TEST_NO_CACHESTAT=1, where pages are counted with mincore(2) (test.h). */
#include "test.h"

#define FILE_BYTES ((size_t)(8 << 20) + 1)

int main(void) {
  test_without_cachestat_if_asked();
  char *dir = test_mkdtemp();
  char *path = test_path(dir, "cached");
  unsigned char *data = malloc(FILE_BYTES);
  test_fill(data, FILE_BYTES, 9);
  test_write_file(path, data, FILE_BYTES);
  size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = (FILE_BYTES + page - 1) / page;

  size_t resident = 0, total = 0;
  ASSERT_OK(kvik_page_cache_info(path, &resident, &total));
  ASSERT_EQ(total, pages);
  ASSERT(resident <= total);

  ASSERT_OK(kvik_page_cache_drop(path));
  ASSERT_OK(kvik_page_cache_info(path, &resident, NULL));
  /* Some file systems (tmpfs) cannot drop pages: their memory is the file. */
  int droppable = resident < pages / 2;
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r", 0, &f));
  ASSERT_EQ(kvik_file_read(f, data, FILE_BYTES, 0), FILE_BYTES);
  kvik_file_free(f);
  ASSERT_OK(kvik_page_cache_info(path, &resident, &total));
  /* All read, so all resident, but for what memory pressure evicts at once: a page was, once,
   * in CI under ThreadSanitizer, with the remote tests' servers running beside. */
  ASSERT(resident <= total && resident >= total - total / 16);

  if (droppable) {
    ASSERT_OK(kvik_page_cache_drop(path));
    ASSERT_OK(kvik_page_cache_info(path, &resident, NULL));
    ASSERT(resident < pages / 2);
    /* Part of it read again: its first MiB at least, with what readahead adds, far from all. */
    size_t part = (size_t)1 << 20;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ASSERT(fd >= 0);
    ASSERT_EQ(pread(fd, data, part, 0), part);
    close(fd);
    ASSERT_OK(kvik_page_cache_info(path, &resident, NULL));
    ASSERT(resident >= part / page - part / page / 16 && resident <= pages / 2);
  }

  char *empty = test_path(dir, "empty");
  test_write_file(empty, data, 0);
  ASSERT_OK(kvik_page_cache_info(empty, &resident, &total));
  ASSERT_EQ(resident, 0);
  ASSERT_EQ(total, 0);
  ASSERT_OK(kvik_page_cache_drop(empty));

  ASSERT_FAILS(kvik_page_cache_info(NULL, &resident, &total), -EINVAL, "NULL path");
  ASSERT_FAILS(kvik_page_cache_info("/nonexistent/kvik", &resident, &total), -ENOENT, "/nonexistent/kvik");
  ASSERT_FAILS(kvik_page_cache_drop("/nonexistent/kvik"), -ENOENT, "/nonexistent/kvik");
  free(empty);
  free(data);
  free(path);
  test_rmdir(dir);
  printf("drop %s on this file system\n", droppable ? "works" : "has no effect");
  return 0;
}
