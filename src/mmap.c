/* Mapped files: reads copy from a read-only shared mapping, in parallel like file reads. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "init.h"
#include "posix_io.h"
#include "request.h"
#include "sys.h"

struct kvik_mmap {
  kvik__source source; /* reads run against it; close waits for them */
  int fd;
  void *mapping; /* from mmap(), starting at a page boundary; NULL when nothing is mapped */
  size_t mapping_len;
  const char *first; /* the byte at map_offset */
  size_t map_size;
  int64_t map_offset;
  int64_t file_size;
  char path[];
};

static int copy_out(void *self, kvik__op op, char *host, size_t size, int64_t offset,
                    size_t *done) {
  const kvik_mmap *map = self;
  (void)op; /* mappings are read only: requests are reads */
  if (size > 0)
    memcpy(host, map->first + (offset - map->map_offset), size); /* host may be NULL then */
  *done = size;
  return 0;
}

/* Map [offset, offset + size) of the open file; mmap() wants a page-aligned file offset. */
static int map_range(kvik_mmap *map, size_t size, int64_t offset) {
  long page = sysconf(_SC_PAGESIZE);
  int64_t aligned = offset - offset % page;
  map->map_size = size;
  map->map_offset = offset;
  if (size == 0) return 0;
  map->mapping_len = size + (size_t)(offset - aligned);
  map->mapping = kvik__mmap(map->mapping_len, PROT_READ, MAP_SHARED, map->fd, (off_t)aligned);
  if (map->mapping == MAP_FAILED) {
    map->mapping = NULL;
    return kvik__fail_errno(errno, "kvik_mmap_open(\"%s\"): mmap of %zu bytes at %lld", map->path,
                            size, (long long)offset);
  }
  map->first = (const char *)map->mapping + (offset - aligned);
  return 0;
}

/* Open the file and check that the range lies in it. */
static int open_file(kvik_mmap *map, size_t *size, int64_t offset) {
  map->fd = kvik__open_for_io(map->path, O_RDONLY | O_CLOEXEC, 0);
  if (map->fd < 0) return kvik__fail_errno(errno, "kvik_mmap_open(\"%s\")", map->path);
  struct stat st;
  if (fstat(map->fd, &st) != 0)
    return kvik__fail_errno(errno, "kvik_mmap_open(\"%s\"): fstat", map->path);
  map->file_size = st.st_size;
  if (offset < 0 || offset > map->file_size)
    return kvik__fail(-EINVAL,
                      "kvik_mmap_open(\"%s\"): map offset %lld outside the file of %lld bytes",
                      map->path, (long long)offset, (long long)map->file_size);
  if (*size == 0) *size = (size_t)(map->file_size - offset);
  if ((uint64_t)*size > (uint64_t)(map->file_size - offset))
    return kvik__fail(
        -EINVAL,
        "kvik_mmap_open(\"%s\"): %zu bytes at %lld reach past the end of the file (%lld bytes)",
        map->path, *size, (long long)offset, (long long)map->file_size);
  return 0;
}

int kvik_mmap_open(const char *path, const char *flags, size_t map_size, int64_t map_offset,
                   kvik_mmap **out) {
  if (out) *out = NULL;
  if (!path || !flags || !out)
    return kvik__fail(-EINVAL, "kvik_mmap_open: NULL %s",
                      !path    ? "path"
                      : !flags ? "flags"
                               : "output handle");
  if (strcmp(flags, "r") != 0)
    return kvik__fail(-EINVAL,
                      "kvik_mmap_open(\"%s\", \"%s\"): mappings are read only; flags must be \"r\"",
                      path, flags);
  int rc = kvik__init();
  if (rc < 0) return rc;
  size_t path_len = strlen(path);
  kvik_mmap *map = kvik__calloc(1, sizeof *map + path_len + 1);
  if (!map) return kvik__fail(-ENOMEM, "kvik_mmap_open(\"%s\"): out of memory", path);
  memcpy(map->path, path, path_len + 1);
  rc = open_file(map, &map_size, map_offset);
  if (rc == 0) rc = map_range(map, map_size, map_offset);
  if (rc < 0) {
    if (map->fd >= 0) close(map->fd);
    free(map);
    return rc;
  }
  map->source =
      (kvik__source){.transfer = copy_out, .self = map, .name = map->path, .backend = KVIK_IO_MMAP};
  *out = map;
  return 0;
}

int kvik_mmap_close(kvik_mmap *map) {
  if (!map) return kvik__fail(-EINVAL, "kvik_mmap_close: NULL handle");
  if (kvik__owner_close(&map->source.owner) < 0)
    return kvik__fail(-EBADF, "kvik_mmap_close(\"%s\"): already closed", map->path);
  if (map->mapping) munmap(map->mapping, map->mapping_len);
  map->mapping = NULL;
  close(map->fd);
  return 0;
}

void kvik_mmap_free(kvik_mmap *map) {
  if (!map) return;
  if (!kvik__owner_is_closed(&map->source.owner)) kvik_mmap_close(map);
  free(map);
}

int kvik_mmap_closed(const kvik_mmap *map) {
  return map ? kvik__owner_is_closed(&map->source.owner) : 1;
}

int64_t kvik_mmap_file_size(const kvik_mmap *map) {
  return map ? map->file_size : kvik__fail(-EINVAL, "kvik_mmap_file_size: NULL handle");
}

size_t kvik_mmap_map_size(const kvik_mmap *map) { return map ? map->map_size : 0; }

int64_t kvik_mmap_map_offset(const kvik_mmap *map) { return map ? map->map_offset : 0; }

/* The range must be mapped; reads are never clipped, since the mapping has no end-of-file. */
static int check_range(const char *fn, const kvik_mmap *map, size_t size, int64_t offset) {
  if (!map) return kvik__fail(-EINVAL, "%s: NULL handle", fn);
  int64_t end = map->map_offset + (int64_t)map->map_size;
  if (offset < map->map_offset || offset > end || size > (uint64_t)(end - offset))
    return kvik__fail(
        -EINVAL, "%s(\"%s\"): %zu bytes at %lld lie outside the mapped range [%lld, %lld)", fn,
        map->path, size, (long long)offset, (long long)map->map_offset, (long long)end);
  return 0;
}

ssize_t kvik_mmap_read(kvik_mmap *map, void *buf, size_t size, int64_t offset) {
  static const char fn[] = "kvik_mmap_read";
  kvik__stats_op stats = kvik__stats_observe(KVIK_IO_MMAP, KVIK__READ, size);
  int rc = check_range(fn, map, size, offset);
  if (rc < 0) return kvik__stats_refuse(&stats, rc);
  kvik__request req = {.fn = fn,
                       .source = &map->source,
                       .op = KVIK__READ,
                       .buf = buf,
                       .size = size,
                       .offset = offset,
                       .stats = stats};
  return kvik__request_run(&req);
}

int kvik_mmap_pread(kvik_mmap *map, void *buf, size_t size, int64_t offset, size_t task_size,
                    kvik_future **future) {
  static const char fn[] = "kvik_mmap_pread";
  if (future) *future = NULL;
  kvik__stats_op stats = kvik__stats_observe(KVIK_IO_MMAP, KVIK__READ, size);
  int rc = check_range(fn, map, size, offset);
  if (rc < 0) return kvik__stats_refuse(&stats, rc);
  kvik__request req = {.fn = fn,
                       .source = &map->source,
                       .op = KVIK__READ,
                       .buf = buf,
                       .size = size,
                       .offset = offset,
                       .task_size = task_size,
                       .stats = stats};
  return kvik__request_start(&req, 0, future);
}
