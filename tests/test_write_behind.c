/* Write-behind (KVIK_SETTING_WRITE_BEHIND, src/posix_io.c): a buffered write of 1 MiB or more
 * starts its own writeback, so that the pages it leaves are under writeback or clean, not dirty;
 * smaller writes, and every write with the setting off, leave their pages dirty. In builds with
 * fault injection: a slow start pauses the handle's write-behind, a file that refuses it stops it,
 * and a failure of it fails no write. Pages are counted with cachestat(2); the program skips
 * where it is missing, or where the file system keeps no dirty pages to count (tmpfs, overlayfs). */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kvik.h"
#include "test.h"

#ifdef KVIK_FAULT_INJECTION
#include "../src/sys.h"
#endif

#ifndef SYS_cachestat
#define SYS_cachestat 451
#endif

#define PAGE 4096
#define SIZE ((size_t)32 << 20) /* 8 pieces of the default task size */
#define PAGES (SIZE / PAGE)
#define PIECE_PAGES (((size_t)4 << 20) / PAGE)

static unsigned char *data;

/* The dirty pages of the file's first SIZE bytes. */
static uint64_t dirty_pages(const char *path) {
  struct {
    uint64_t off, len;
  } range = {0, SIZE};
  struct {
    uint64_t cache, dirty, writeback, evicted, recently_evicted;
  } counts;
  int fd = open(path, O_RDONLY);
  if (fd < 0) FAIL_AT("open(%s): %s", path, strerror(errno));
  long rc = syscall(SYS_cachestat, fd, &range, &counts, 0);
  int err = errno;
  close(fd);
  if (rc != 0) {
    printf("skip: cachestat(2): %s\n", strerror(err));
    exit(TEST_SKIP);
  }
  return counts.dirty;
}

/* A new file of SIZE bytes written by kvik_file_write calls of `call` bytes each; the dirty
 * pages it leaves. The bytes are read back and compared. New, not truncated: ext4 starts the
 * writeback of a file truncated to 0 and written again when it closes. */
static uint64_t write_file(const char *path, size_t call) {
  kvik_file *f;
  unlink(path);
  ASSERT_OK(kvik_file_open(path, "w", 0644, &f));
  for (size_t at = 0; at < SIZE; at += call)
    ASSERT_EQ(kvik_file_write(f, data + at, call, (int64_t)at), (ssize_t)call);
  ASSERT_OK(kvik_file_close(f));
  kvik_file_free(f);
  uint64_t dirty = dirty_pages(path);
  size_t n;
  unsigned char *back = test_read_file(path, &n);
  ASSERT_EQ(n, SIZE);
  ASSERT_SAME_BYTES(back, data, SIZE);
  free(back);
  return dirty;
}

/* The dirty pages write_file(path, call) leaves, the fewest (`fewest`) or the most of up to three
 * tries, each a new handle, stopping at the first that is on the expected side of half the
 * pages. A busy machine (the tests run side by side) tips single tries both ways: a slow start
 * pauses a handle's write-behind for a second, as designed, and the kernel's own writeback, woken
 * by the other tests' dirty pages, may take a plain write's pages early. */
static uint64_t dirty_after(const char *path, size_t call, int fewest, const char *what) {
  uint64_t best = fewest ? UINT64_MAX : 0;
  for (int attempt = 1; attempt <= 3; attempt++) {
    uint64_t dirty = write_file(path, call);
    printf("%s, try %d: %llu of %zu pages dirty\n", what, attempt, (unsigned long long)dirty,
           PAGES);
    if (fewest ? dirty < best : dirty > best) best = dirty;
    if (fewest ? best <= PAGES / 2 : best >= PAGES / 2) break;
  }
  return best;
}

static void set_write_behind(int on) { ASSERT_OK(kvik_setting_set(KVIK_SETTING_WRITE_BEHIND, on)); }

/* Whether this file system keeps a plain write's pages dirty until they are written back, which
 * fsync does: else there is nothing to tell write-behind by. */
static int keeps_dirty_pages(const char *path) {
  set_write_behind(0);
  uint64_t dirty = write_file(path, SIZE);
  int fd = open(path, O_RDONLY);
  if (fd < 0 || fdatasync(fd) != 0) FAIL_AT("fdatasync(%s): %s", path, strerror(errno));
  close(fd);
  uint64_t after = dirty_pages(path);
  printf("write-behind off: %llu of %zu pages dirty after the write, %llu after fdatasync\n",
         (unsigned long long)dirty, PAGES, (unsigned long long)after);
  set_write_behind(1);
  return dirty >= PAGES / 2 && after == 0;
}

static void test_default_is_on(void) {
  int64_t value;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_WRITE_BEHIND, &value));
  ASSERT_EQ(value, 1);
}

/* Fewer dirty pages than a handle paused at its first start leaves (test_slow_start_pauses):
 * pieces after the first started their writeback. */
#define STARTED_BEYOND_FIRST (PAGES - 2 * PIECE_PAGES)

/* Large writes start the writeback of what they wrote. Where the starts cost more than a quarter
 * of the writes' time the handle pauses, as designed, and the rest stays dirty: on the 2-core VM
 * after about half of the pieces (4096 of 8192 pages dirty), on the H200 machine once after 17 of
 * 32 writes of 1 MiB, and on the H100 under ctest -j12 past half in three tries once. So the test
 * asks that write-behind started beyond the first pieces, not how far it went. */
static void test_large_writes_start_writeback(const char *path) {
  ASSERT(dirty_after(path, SIZE, 1, "one write of 32 MiB (pieces of 4 MiB)") <
         STARTED_BEYOND_FIRST);
  ASSERT(dirty_after(path, (size_t)1 << 20, 1, "32 writes of 1 MiB") < STARTED_BEYOND_FIRST);
}

/* Writes below 1 MiB are left to the kernel. */
static void test_small_writes_stay_dirty(const char *path) {
  ASSERT(dirty_after(path, (size_t)512 << 10, 0, "64 writes of 512 KiB") >= PAGES / 2);
}

#ifdef KVIK_FAULT_INJECTION
/* A start of writeback that takes long (the storage is behind) pauses the handle's write-behind:
 * the pieces after the first stay dirty; a new handle starts again. */
static void test_slow_start_pauses(const char *path) {
  kvik__fault_delay(KVIK__FAULT_SYNC, NULL, 1, 300 * 1000);
  uint64_t dirty = write_file(path, SIZE);
  printf("first start slow: %llu pages dirty\n", (unsigned long long)dirty);
  ASSERT(dirty >= STARTED_BEYOND_FIRST);
  ASSERT(write_file(path, SIZE) < STARTED_BEYOND_FIRST);
}

/* A file that refuses sync_file_range(2) (EINVAL) is not asked again; a failed writeback (EIO)
 * fails no write, and the next piece asks again. */
static void test_refusal_and_failure(const char *path) {
  kvik__fault_arm(KVIK__FAULT_SYNC, NULL, 1, EINVAL);
  uint64_t dirty = write_file(path, SIZE);
  ASSERT_EQ(kvik__fault_injected(), 1);
  printf("refused: %llu pages dirty\n", (unsigned long long)dirty);
  ASSERT(dirty >= STARTED_BEYOND_FIRST);
  kvik__fault_arm(KVIK__FAULT_SYNC, NULL, 1, EIO);
  dirty = write_file(path, SIZE);
  ASSERT_EQ(kvik__fault_injected(), 1);
  printf("first start failed with EIO: %llu pages dirty\n", (unsigned long long)dirty);
  ASSERT(dirty < STARTED_BEYOND_FIRST);
  kvik__fault_disarm();
}
#endif

int main(void) {
  data = malloc(SIZE);
  test_fill(data, SIZE, 29);
  test_default_is_on();
  char *dir = test_mkdtemp(), *path = test_path(dir, "behind");
  if (!keeps_dirty_pages(path)) {
    printf("skip: %s keeps no dirty pages for write-behind to start on\n", dir);
    test_rmdir(dir);
    return TEST_SKIP;
  }
  test_large_writes_start_writeback(path);
  test_small_writes_stay_dirty(path);
#ifdef KVIK_FAULT_INJECTION
  test_slow_start_pauses(path);
  test_refusal_and_failure(path);
#endif
  free(path);
  test_rmdir(dir);
  free(data);
  printf("ok\n");
  return 0;
}
