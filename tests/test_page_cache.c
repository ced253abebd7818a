/* Page-cache tools: resident page counts follow reads and drops. ctest runs it once more with
 * KVIK_TEST_NO_CACHESTAT=1, where pages are counted with mincore(2) (test.h). */
#include "test.h"

#define FILE_BYTES ((size_t)(8 << 20) + 1)

/* kvik_page_cache_info_range's page counts, which do not depend on what is cached: whole pages,
 * from the one holding the offset to the one holding the last byte, cut at the end of the file. */
static void check_range_totals(const char *path, size_t page, size_t pages) {
  struct {
    int64_t offset, length;
    size_t total;
  } cases[] = {
      {0, 0, pages},                                /* length 0: to the end */
      {1, 1, 1},                                    /* inside a page */
      {(int64_t)page - 1, 2, 2},                    /* across a page boundary */
      {(int64_t)page, (int64_t)page, 1},            /* exactly one page */
      {(int64_t)FILE_BYTES - 1, 100, 1},            /* past the end: cut there */
      {(int64_t)page, INT64_MAX, pages - 1},        /* no overflow of offset + length */
      {(int64_t)FILE_BYTES, 0, 0},                  /* at the end: nothing */
      {(int64_t)FILE_BYTES + 5, 10, 0},             /* past it */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t resident = 1234, total = 1234;
    int64_t offset = cases[i].offset, length = cases[i].length;
    ASSERT_OK(kvik_page_cache_info_range(path, offset, length, &resident, &total));
    ASSERT_EQ(total, cases[i].total);
    ASSERT(resident <= total);
  }
  size_t resident, total;
  ASSERT_FAILS(kvik_page_cache_info_range(NULL, 0, 0, &resident, &total), -EINVAL, "NULL path");
  ASSERT_FAILS(kvik_page_cache_info_range(path, -1, 0, &resident, &total), -EINVAL,
               "negative offset -1");
  ASSERT_FAILS(kvik_page_cache_info_range(path, 0, -2, &resident, &total), -EINVAL,
               "negative length -2");
  ASSERT_FAILS(kvik_page_cache_info_range("/nonexistent/kvik", 0, 0, &resident, &total), -ENOENT,
               "kvik_page_cache_info_range(\"/nonexistent/kvik\")");
}

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
  check_range_totals(path, page, pages);

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
    /* A range counts its own pages: the part read, and one far past what readahead reached. */
    ASSERT_OK(kvik_page_cache_info_range(path, 0, (int64_t)part, &resident, &total));
    ASSERT_EQ(total, part / page);
    ASSERT(resident >= total - total / 16);
    ASSERT_OK(kvik_page_cache_info_range(path, 6 << 20, 1 << 20, &resident, &total));
    ASSERT_EQ(total, ((size_t)1 << 20) / page);
    ASSERT(resident < total / 2);
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
