/* POSIX IO of one range, and the O_DIRECT probe behind kvik_direct_io_supported(). */
#define _GNU_SOURCE
#include "posix_io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bounce.h"
#include "error.h"
#include "settings.h"

static const char *op_name(kvik__op op) { return op == KVIK__READ ? "pread" : "pwrite"; }

/* One system call, retried while interrupted. */
static ssize_t sys_once(kvik__op op, int fd, char *buf, size_t n, int64_t offset) {
  ssize_t r;
  do {
    r = op == KVIK__READ ? pread(fd, buf, n, (off_t)offset) : pwrite(fd, buf, n, (off_t)offset);
  } while (r < 0 && errno == EINTR);
  return r < 0 ? -errno : r;
}

static int fail_at(kvik__op op, int err, const kvik__posix_target *t, size_t n, int64_t offset) {
  return kvik__fail_errno(err, "%s(\"%s\", %zu bytes at offset %lld)", op_name(op), t->path, n, (long long)offset);
}

/* Transfer through `fd` until n bytes are done or (reads) the file ends. */
static int transfer_all(kvik__op op, const kvik__posix_target *t, int fd, char *buf, size_t n, int64_t offset,
                        size_t *done) {
  *done = 0;
  while (*done < n) {
    ssize_t r = sys_once(op, fd, buf + *done, n - *done, offset + (int64_t)*done);
    if (r < 0) return fail_at(op, (int)-r, t, n - *done, offset + (int64_t)*done);
    if (r == 0) {
      if (op == KVIK__READ) return 0;
      return kvik__fail(-EIO, "pwrite(\"%s\", %zu bytes at offset %lld) wrote nothing", t->path, n - *done,
                        (long long)(offset + (int64_t)*done));
    }
    *done += (size_t)r;
  }
  return 0;
}

/* How the direct part of a range ended. */
typedef enum { DIRECT_ALL, DIRECT_STOPPED, DIRECT_REFUSED } direct_outcome;

/* Aligned O_DIRECT calls from an aligned buffer while they stay aligned. A call that returns
 * less than asked (end of file, or a partial write) stops it: the buffered descriptor, which has
 * no alignment rules, finishes the range. */
static int direct_aligned(kvik__op op, const kvik__posix_target *t, char *buf, size_t n, int64_t offset, size_t *done,
                          direct_outcome *outcome) {
  *done = 0;
  while (*done < n) {
    ssize_t r = sys_once(op, t->direct_fd, buf + *done, n - *done, offset + (int64_t)*done);
    if (r == -EINVAL) {
      *outcome = *done == 0 ? DIRECT_REFUSED : DIRECT_STOPPED;
      return 0;
    }
    if (r < 0) return fail_at(op, (int)-r, t, n - *done, offset + (int64_t)*done);
    *done += (size_t)r;
    if (r == 0 || r % KVIK__DIRECT_ALIGNMENT) {
      *outcome = DIRECT_STOPPED;
      return 0;
    }
  }
  *outcome = DIRECT_ALL;
  return 0;
}

/* O_DIRECT for an unaligned user buffer: through an aligned bounce buffer, chunk by chunk. */
static int direct_bounced(kvik__op op, const kvik__posix_target *t, char *buf, size_t n, int64_t offset, size_t *done,
                          direct_outcome *outcome) {
  size_t chunk_size = (size_t)kvik__setting(KVIK_SETTING_BOUNCE_BUFFER_SIZE) & ~(size_t)(KVIK__DIRECT_ALIGNMENT - 1);
  char *bounce = kvik__bounce_get(chunk_size);
  if (!bounce) return -ENOMEM;
  int rc = 0;
  *done = 0;
  *outcome = DIRECT_ALL;
  while (*done < n && *outcome == DIRECT_ALL) {
    size_t chunk = n - *done < chunk_size ? n - *done : chunk_size, moved;
    if (op == KVIK__WRITE) memcpy(bounce, buf + *done, chunk);
    rc = direct_aligned(op, t, bounce, chunk, offset + (int64_t)*done, &moved, outcome);
    if (op == KVIK__READ) memcpy(buf + *done, bounce, moved);
    *done += moved;
    if (*outcome == DIRECT_ALL && moved < chunk) *outcome = DIRECT_STOPPED;
    if (rc < 0) break;
  }
  if (*outcome == DIRECT_REFUSED && *done > 0) *outcome = DIRECT_STOPPED;
  kvik__bounce_put(bounce, chunk_size);
  return rc;
}

/* The part of [offset, offset+size) that O_DIRECT may read. A direct read of the block that holds
 * the end of file fills the whole block in the caller's buffer, bytes past the end included, so
 * direct reads stop at the last whole block: the buffered tail leaves bytes past the end
 * untouched, as pread(2) does. */
static size_t direct_readable(const kvik__posix_target *t, int64_t offset, size_t size) {
  struct stat st;
  if (fstat(t->fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  int64_t end = st.st_size & ~(int64_t)(KVIK__DIRECT_ALIGNMENT - 1);
  if (end <= offset) return 0;
  return (uint64_t)(end - offset) < size ? (size_t)(end - offset) : size;
}

int kvik__posix_io(kvik__op op, const kvik__posix_target *t, char *buf, size_t size, int64_t offset, size_t *done,
                   int *direct_refused) {
  *done = 0;
  const size_t a = KVIK__DIRECT_ALIGNMENT;
  size_t head = (a - (size_t)offset % a) % a;
  size_t direct_span = t->direct_fd < 0 ? 0 : op == KVIK__READ ? direct_readable(t, offset, size) : size;
  if (direct_span >= head + a) {
    size_t middle = (direct_span - head) & ~(a - 1);
    int rc = transfer_all(op, t, t->fd, buf, head, offset, done);
    if (rc < 0 || *done < head) return rc;
    size_t moved;
    direct_outcome outcome;
    char *mid = buf + head;
    rc = ((uintptr_t)mid % a == 0 ? direct_aligned : direct_bounced)(op, t, mid, middle, offset + (int64_t)head,
                                                                      &moved, &outcome);
    *done += moved;
    if (rc < 0) return rc;
    if (outcome == DIRECT_REFUSED) *direct_refused = 1;
  }
  size_t rest;
  int rc = transfer_all(op, t, t->fd, buf + *done, size - *done, offset + (int64_t)*done, &rest);
  *done += rest;
  return rc;
}

/* A temporary file in `dir`, written and read back through O_DIRECT. */
int kvik_direct_io_supported(const char *dir) {
  if (!dir) return kvik__fail(-EINVAL, "kvik_direct_io_supported: NULL directory");
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/.kvik-direct-io-XXXXXX", dir) >= (int)sizeof path)
    return kvik__fail(-ENAMETOOLONG, "kvik_direct_io_supported(\"%s\"): path too long", dir);
  int fd = mkostemp(path, O_CLOEXEC);
  if (fd < 0) return kvik__fail_errno(errno, "kvik_direct_io_supported(\"%s\"): cannot create a test file", dir);
  int direct = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
  unlink(path);
  close(fd);
  if (direct < 0) return 0;
  void *block = NULL;
  int supported = 0;
  if (posix_memalign(&block, KVIK__DIRECT_ALIGNMENT, KVIK__DIRECT_ALIGNMENT) == 0) {
    memset(block, 0x6b, KVIK__DIRECT_ALIGNMENT);
    supported = pwrite(direct, block, KVIK__DIRECT_ALIGNMENT, 0) == KVIK__DIRECT_ALIGNMENT &&
                pread(direct, block, KVIK__DIRECT_ALIGNMENT, 0) == KVIK__DIRECT_ALIGNMENT;
  }
  free(block);
  close(direct);
  return supported;
}
