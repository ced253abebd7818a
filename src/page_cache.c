/* Page-cache tools: how much of a file is resident, and dropping it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "posix_io.h"
#include "sys.h"

/* mincore() needs a mapping and one byte per page; a window bounds both for huge files. */
#define WINDOW_BYTES ((size_t)1 << 30)

static size_t count_resident(int fd, size_t offset, size_t len, size_t page, unsigned char *vec, int *err) {
  void *map = kvik__mmap(len, PROT_READ, MAP_SHARED, fd, (off_t)offset);
  if (map == MAP_FAILED) return *err = errno, 0;
  size_t resident = 0, pages = (len + page - 1) / page;
  if (mincore(map, len, vec) != 0) *err = errno;
  else
    for (size_t i = 0; i < pages; i++) resident += vec[i] & 1;
  munmap(map, len);
  return resident;
}

int kvik_page_cache_info(const char *path, size_t *resident_pages, size_t *total_pages) {
  if (!path) return kvik__fail(-EINVAL, "kvik_page_cache_info: NULL path");
  int fd = kvik__open_for_io(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return kvik__fail_errno(errno, "kvik_page_cache_info(\"%s\")", path);
  struct stat st;
  int err = fstat(fd, &st) != 0 ? errno : 0;
  size_t page = (size_t)sysconf(_SC_PAGESIZE), size = err ? 0 : (size_t)st.st_size;
  unsigned char *vec = kvik__malloc(WINDOW_BYTES / page);
  if (!vec) err = ENOMEM;
  size_t resident = 0;
  for (size_t off = 0; !err && off < size; off += WINDOW_BYTES)
    resident += count_resident(fd, off, size - off < WINDOW_BYTES ? size - off : WINDOW_BYTES, page, vec, &err);
  free(vec);
  close(fd);
  if (err) return kvik__fail_errno(err, "kvik_page_cache_info(\"%s\")", path);
  if (resident_pages) *resident_pages = resident;
  if (total_pages) *total_pages = (size + page - 1) / page;
  return 0;
}

int kvik_page_cache_drop(const char *path) {
  if (!path) return kvik__fail(-EINVAL, "kvik_page_cache_drop: NULL path");
  int fd = kvik__open_for_io(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return kvik__fail_errno(errno, "kvik_page_cache_drop(\"%s\")", path);
  /* Dirty pages cannot be dropped: write them back first. */
  int rc = 0;
  if (kvik__fdatasync(fd) != 0 && errno != EINVAL) rc = kvik__fail_errno(errno, "kvik_page_cache_drop(\"%s\"): fdatasync", path);
  int err = rc ? 0 : posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  if (err) rc = kvik__fail_errno(err, "kvik_page_cache_drop(\"%s\"): posix_fadvise", path);
  close(fd);
  return rc;
}
