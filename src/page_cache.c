/* Page-cache tools: how much of a file is resident, and dropping it. */
#define _GNU_SOURCE
#include "page_cache.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "posix_io.h"
#include "sys.h"

/* cachestat(2) (Linux 6.5+) counts a range's cached pages in the kernel; mincore(2) needs a
 * mapping and reports every page to the caller: for 8 GiB cached on an H100 machine 0.5-0.7 ms
 * against 64-122 ms (bench_zero_copy_probe step 7), a third of what registering the range costs. */

/* mincore() needs a mapping and one byte per page; a window bounds both for huge files. */
#define WINDOW_BYTES ((size_t)1 << 30)
#define VEC_PAGES 4096

/* Set once cachestat(2) was refused as unknown: by an older kernel (ENOSYS), or by a seccomp filter
 * that predates it (ENOSYS or EPERM, as containers' default filters answer). */
static _Atomic int no_cachestat;

/* The range's pages that cachestat(2) counts, or -1 when it cannot count them. */
static int64_t cachestat_pages(int fd, int64_t offset, size_t len) {
  if (atomic_load_explicit(&no_cachestat, memory_order_relaxed)) return -1;
  kvik__cachestat_range range = {(uint64_t)offset, len};
  kvik__cachestat_counts counts;
  if (kvik__cachestat(fd, &range, &counts) == 0) return (int64_t)counts.cached;
  if (errno == ENOSYS || errno == EPERM)
    atomic_store_explicit(&no_cachestat, 1, memory_order_relaxed);
  return -1;
}

/* The mapped range's pages that mincore(2) finds resident, or -errno. */
static int64_t mincore_pages(const char *map, size_t len, size_t page) {
  unsigned char vec[VEC_PAGES];
  int64_t resident = 0;
  for (size_t pos = 0; pos < len; pos += VEC_PAGES * page) {
    size_t n = len - pos < VEC_PAGES * page ? len - pos : VEC_PAGES * page;
    if (mincore((void *)(map + pos), n, vec) != 0) return -errno;
    for (size_t i = 0; i < (n + page - 1) / page; i++) resident += vec[i] & 1;
  }
  return resident;
}

int64_t kvik__page_cache_pages(int fd, const char *map, int64_t offset, size_t len) {
  assert(offset >= 0 && offset % sysconf(_SC_PAGESIZE) == 0);
  if (len == 0) return 0;
  /* None counted is asked again with mincore: on overlayfs, cachestat sees the overlay's own page
   * cache, which stays empty, while a mapping reaches the pages of the file below. */
  int64_t cached = cachestat_pages(fd, offset, len);
  if (cached > 0) return cached;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if (map) return mincore_pages(map, len, page);
  void *own = kvik__mmap(len, PROT_READ, MAP_SHARED, fd, (off_t)offset);
  if (own == MAP_FAILED) return -errno;
  int64_t resident = mincore_pages(own, len, page);
  munmap(own, len);
  return resident;
}

/* A read's share of pages in the page cache from which kvik__page_cache_mostly() says yes (see
 * page_cache.h for why), as the fraction MOSTLY_NUM / MOSTLY_DEN. */
#define MOSTLY_NUM 9
#define MOSTLY_DEN 10
/* What mincore(2) asks about a range when cachestat(2) cannot tell: runs of SAMPLE_PAGES pages,
 * SAMPLE_RUNS of them spread from its first page to its last (all its pages when fewer). Mapping a
 * range costs about 1 us at any length, but mincore costs 6-18 ns a page and 0.3 us a call: 7 to
 * 20 us for all of a 4 MiB task, against 0.2-0.6 us for cachestat; this sample bounds it to 4-8
 * us at any task size (docs/benchmarks.md, "Direct reads and the page cache"). */
#define SAMPLE_RUNS 4
#define SAMPLE_PAGES 64

/* The resident pages among `*asked` pages of the range of `pages` pages that `map` maps, sampled
 * as above, or -errno. */
static int64_t mincore_sample(const char *map, size_t pages, size_t page, size_t *asked) {
  size_t runs = pages <= SAMPLE_RUNS * SAMPLE_PAGES ? 1 : SAMPLE_RUNS;
  size_t run = runs == 1 ? pages : SAMPLE_PAGES;
  int64_t resident = 0;
  for (size_t r = 0; r < runs; r++) {
    size_t first = runs == 1 ? 0 : r * (pages - run) / (runs - 1);
    int64_t n = mincore_pages(map + first * page, run * page, page);
    if (n < 0) return n;
    resident += n;
  }
  *asked = runs * run;
  return resident;
}

int kvik__page_cache_mostly(int fd, int64_t offset, size_t len, int sample) {
  assert(offset >= 0 && len > 0);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  int64_t start = offset & ~(int64_t)(page - 1);
  size_t pages = (size_t)(offset + (int64_t)len - start + (int64_t)page - 1) / page;
  int64_t cached = cachestat_pages(fd, offset, len);
  if (cached > 0) return (size_t)cached * MOSTLY_DEN >= pages * MOSTLY_NUM;
  /* None counted is asked again, as in kvik__page_cache_pages(). */
  if (!sample) return 0;
  void *map = kvik__mmap(pages * page, PROT_READ, MAP_SHARED, fd, (off_t)start);
  if (map == MAP_FAILED) return 0;
  size_t asked = 0;
  int64_t resident = mincore_sample(map, pages, page, &asked);
  munmap(map, pages * page);
  return resident > 0 && (size_t)resident * MOSTLY_DEN >= asked * MOSTLY_NUM;
}

/* The pages of [offset, offset + length) (length 0: to the end), cut at the end of the file, from
 * the page that holds `offset` on. `fn` is the public function. */
static int count_pages(const char *fn, const char *path, int64_t offset, int64_t length,
                       size_t *resident_pages, size_t *total_pages) {
  int fd = kvik__open_for_io(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return kvik__fail_errno(errno, "%s(\"%s\")", fn, path);
  struct stat st;
  int err = fstat(fd, &st) != 0 ? errno : 0;
  size_t page = (size_t)sysconf(_SC_PAGESIZE), size = err ? 0 : (size_t)st.st_size;
  size_t start = 0, end = 0; /* nothing where the range starts at or past the end */
  if ((size_t)offset < size) {
    start = (size_t)offset & ~(page - 1);
    end = length == 0 || (size_t)length > size - (size_t)offset ? size
                                                                : (size_t)offset + (size_t)length;
  }
  size_t resident = 0;
  for (size_t off = start; !err && off < end; off += WINDOW_BYTES) {
    size_t len = end - off < WINDOW_BYTES ? end - off : WINDOW_BYTES;
    int64_t pages = kvik__page_cache_pages(fd, NULL, (int64_t)off, len);
    if (pages < 0) err = (int)-pages;
    else resident += (size_t)pages;
  }
  close(fd);
  if (err) return kvik__fail_errno(err, "%s(\"%s\")", fn, path);
  if (resident_pages) *resident_pages = resident;
  if (total_pages) *total_pages = (end - start + page - 1) / page;
  return 0;
}

int kvik_page_cache_info(const char *path, size_t *resident_pages, size_t *total_pages) {
  if (!path) return kvik__fail(-EINVAL, "kvik_page_cache_info: NULL path");
  return count_pages("kvik_page_cache_info", path, 0, 0, resident_pages, total_pages);
}

int kvik_page_cache_info_range(const char *path, int64_t offset, int64_t length,
                               size_t *resident_pages, size_t *total_pages) {
  static const char fn[] = "kvik_page_cache_info_range";
  if (!path) return kvik__fail(-EINVAL, "%s: NULL path", fn);
  if (offset < 0 || length < 0)
    return kvik__fail(-EINVAL, "%s(\"%s\"): negative %s %" PRId64, fn, path,
                      offset < 0 ? "offset" : "length", offset < 0 ? offset : length);
  return count_pages(fn, path, offset, length, resident_pages, total_pages);
}

int kvik_page_cache_drop(const char *path) {
  if (!path) return kvik__fail(-EINVAL, "kvik_page_cache_drop: NULL path");
  int fd = kvik__open_for_io(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return kvik__fail_errno(errno, "kvik_page_cache_drop(\"%s\")", path);
  /* Dirty pages cannot be dropped: write them back first. */
  int rc = 0;
  if (kvik__fdatasync(fd) != 0 && errno != EINVAL)
    rc = kvik__fail_errno(errno, "kvik_page_cache_drop(\"%s\"): fdatasync", path);
  int err = rc ? 0 : posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  if (err) rc = kvik__fail_errno(err, "kvik_page_cache_drop(\"%s\"): posix_fadvise", path);
  close(fd);
  return rc;
}
