/* POSIX IO of one range, and the O_DIRECT probe behind kvik_direct_io_supported(). */
#define _GNU_SOURCE
#include "posix_io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bounce.h"
#include "error.h"
#include "settings.h"
#include "sys.h"

static const char *op_name(kvik__op op) { return op == KVIK__READ ? "pread" : "pwrite"; }

/* One system call (retried while interrupted, by sys.h): a byte count or -errno. */
static ssize_t sys_once(kvik__op op, int fd, char *buf, size_t n, int64_t offset) {
  ssize_t r;
  if (op == KVIK__READ) r = kvik__pread(fd, buf, n, (off_t)offset);
  else r = kvik__pwrite(fd, buf, n, (off_t)offset);
  return r < 0 ? -errno : r;
}

static int fail_at(kvik__op op, int err, const kvik__posix_target *t, size_t n, int64_t offset) {
  return kvik__fail_errno(err, "%s(\"%s\", %zu bytes at offset %lld)", op_name(op), t->path, n,
                          (long long)offset);
}

/* The `n` bytes of `range` from its byte `from` on. */
static kvik__posix_range part_of(kvik__posix_range range, size_t from, size_t n) {
  return (kvik__posix_range){range.op, range.buf + from, n, range.offset + (int64_t)from};
}

int kvik__posix_move(int fd, const kvik__posix_range *range, size_t *done) {
  *done = 0;
  while (*done < range->size) {
    ssize_t r = sys_once(range->op, fd, range->buf + *done, range->size - *done,
                         range->offset + (int64_t)*done);
    if (r <= 0) return (int)r;
    *done += (size_t)r;
  }
  return 0;
}

int kvik__posix_report(const kvik__posix_target *t, const kvik__posix_range *range, size_t done,
                       int rc) {
  size_t left = range->size - done;
  int64_t at = range->offset + (int64_t)done;
  if (rc < 0) return fail_at(range->op, -rc, t, left, at);
  if (left && range->op == KVIK__WRITE)
    return kvik__fail(-EIO, "pwrite(\"%s\", %zu bytes at offset %lld) wrote nothing", t->path, left,
                      (long long)at);
  return 0;
}

/* Transfer `part` through `fd` until it is done or (reads) the file ends. */
static int transfer_all(const kvik__posix_target *t, int fd, kvik__posix_range part, size_t *done) {
  int rc = kvik__posix_move(fd, &part, done);
  return kvik__posix_report(t, &part, *done, rc);
}

int kvik__posix_append(const kvik__posix_target *t, const char *buf, size_t size, size_t *done) {
  for (*done = 0; *done < size;) {
    size_t left = size - *done;
    ssize_t r = kvik__write(t->fd, buf + *done, left);
    if (r < 0) return kvik__fail_errno(errno, "write(\"%s\", %zu bytes at the end)", t->path, left);
    if (r == 0)
      return kvik__fail(-EIO, "write(\"%s\", %zu bytes at the end) wrote nothing", t->path, left);
    *done += (size_t)r;
  }
  return 0;
}

/* How the direct part of a range ended. */
typedef enum { DIRECT_ALL, DIRECT_STOPPED, DIRECT_REFUSED } direct_outcome;

/* Aligned O_DIRECT calls from an aligned buffer while they stay aligned. A call that returns
 * less than asked (end of file, or a partial write) stops it: the buffered descriptor, which has
 * no alignment rules, finishes the range. So does EFAULT, which an O_DIRECT call returns for a
 * buffer with a bad page after it moved the bytes before that page, without counting them: the
 * buffered descriptor moves them again and stops at the bad page with an exact count. */
static int direct_aligned(const kvik__posix_target *t, kvik__posix_range part, size_t *done,
                          direct_outcome *outcome) {
  *done = 0;
  while (*done < part.size) {
    size_t left = part.size - *done;
    int64_t at = part.offset + (int64_t)*done;
    ssize_t r = sys_once(part.op, t->direct_fd, part.buf + *done, left, at);
    if (r == -EFAULT) {
      *outcome = DIRECT_STOPPED;
      return 0;
    }
    if (r == -EINVAL) {
      *outcome = *done == 0 ? DIRECT_REFUSED : DIRECT_STOPPED;
      return 0;
    }
    if (r < 0) return fail_at(part.op, (int)-r, t, left, at);
    *done += (size_t)r;
    if (r == 0 || r % KVIK__DIRECT_ALIGNMENT) {
      *outcome = DIRECT_STOPPED;
      return 0;
    }
  }
  *outcome = DIRECT_ALL;
  return 0;
}

/* Where the system refuses process_vm_readv/writev (see kvik__copy_user), unaligned buffers are
 * left to the buffered descriptor, for good: a memcpy to or from the caller's buffer would crash
 * on a bad address instead of failing with EFAULT as pread(2) and pwrite(2) do. */
static _Atomic int copy_refused;

/* How a copy between the caller's buffer and the bounce buffer ended. */
typedef enum { COPY_ALL, COPY_REFUSED, COPY_FAILED } copy_outcome;

/* Copy the bytes of `part`, in the caller's buffer, between it and `bounce` (into the caller's
 * buffer for a read), with *copied the bytes copied. On COPY_FAILED, returns the failure's code
 * with a message that names the part of the transfer that was not copied. */
static int copy_user(const kvik__posix_target *t, kvik__posix_range part, char *bounce,
                     size_t *copied, copy_outcome *outcome) {
  kvik__op op = part.op;
  size_t n = part.size;
  *copied = 0;
  *outcome = COPY_ALL;
  while (*copied < n) {
    char *user = part.buf + *copied;
    ssize_t r = kvik__copy_user(op == KVIK__READ, user, bounce + *copied, n - *copied);
    if (r < 0 && (errno == ENOSYS || errno == EPERM)) {
      atomic_store(&copy_refused, 1);
      *outcome = COPY_REFUSED;
      return 0;
    }
    if (r < 0) {
      *outcome = COPY_FAILED;
      const char *way = op == KVIK__READ ? "into" : "out of";
      long long at = (long long)(part.offset + (int64_t)*copied);
      return kvik__fail_errno(errno, "%s(\"%s\", %zu bytes at offset %lld): copying %s the buffer",
                              op_name(op), t->path, n - *copied, at, way);
    }
    *copied += (size_t)r;
  }
  return 0;
}

/* One chunk of a bounced write: copied out of the caller's buffer, then written; nothing of it is
 * written where the caller's buffer cannot be read. */
static int bounced_write(const kvik__posix_target *t, kvik__posix_range part, char *bounce,
                         size_t *moved, direct_outcome *outcome) {
  size_t copied;
  copy_outcome copy;
  *moved = 0;
  int rc = copy_user(t, part, bounce, &copied, &copy);
  if (copy == COPY_REFUSED) *outcome = DIRECT_STOPPED;
  if (copy != COPY_ALL) return rc;
  kvik__posix_range from_bounce = {KVIK__WRITE, bounce, part.size, part.offset};
  return direct_aligned(t, from_bounce, moved, outcome);
}

/* One chunk of a bounced read: read, then copied into the caller's buffer as far as it can be
 * written; *moved counts the bytes that reached the caller's buffer. */
static int bounced_read(const kvik__posix_target *t, kvik__posix_range part, char *bounce,
                        size_t *moved, direct_outcome *outcome) {
  kvik__posix_range into_bounce = {KVIK__READ, bounce, part.size, part.offset};
  int rc = direct_aligned(t, into_bounce, moved, outcome);
  size_t read = *moved;
  if (read == 0) return rc;
  copy_outcome copy;
  int copy_rc = copy_user(t, part_of(part, 0, read), bounce, moved, &copy);
  if (copy == COPY_REFUSED) *outcome = DIRECT_STOPPED;
  return copy == COPY_FAILED ? copy_rc : rc;
}

/* O_DIRECT for an unaligned user buffer: through an aligned bounce buffer, chunk by chunk.
 * Without a bounce buffer (out of memory) or a way to copy (copy_refused), the buffered
 * descriptor does the whole range. The buffer is the setting rounded up to the alignment that
 * O_DIRECT needs: any positive setting works, a small one costs more system calls. */
static int direct_bounced(const kvik__posix_target *t, kvik__posix_range part, size_t *done,
                          direct_outcome *outcome) {
  size_t chunk_size =
      ((size_t)kvik__setting(KVIK_SETTING_BOUNCE_BUFFER_SIZE) + KVIK__DIRECT_ALIGNMENT - 1) &
      ~(size_t)(KVIK__DIRECT_ALIGNMENT - 1);
  char *bounce = atomic_load(&copy_refused) ? NULL : kvik__bounce_get(chunk_size);
  *done = 0;
  *outcome = bounce ? DIRECT_ALL : DIRECT_STOPPED;
  if (!bounce) return 0;
  int rc = 0;
  while (*done < part.size && *outcome == DIRECT_ALL) {
    size_t chunk = part.size - *done < chunk_size ? part.size - *done : chunk_size, moved;
    rc = (part.op == KVIK__READ ? bounced_read : bounced_write)(t, part_of(part, *done, chunk),
                                                                bounce, &moved, outcome);
    *done += moved;
    if (*outcome == DIRECT_ALL && moved < chunk) *outcome = DIRECT_STOPPED;
    if (rc < 0) break;
  }
  if (*outcome == DIRECT_REFUSED && *done > 0) *outcome = DIRECT_STOPPED;
  kvik__bounce_put(bounce, chunk_size);
  return rc;
}

size_t kvik__direct_readable(const kvik__posix_target *t, int64_t offset, size_t size) {
  struct stat st;
  if (fstat(t->fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  int64_t end = st.st_size & ~(int64_t)(KVIK__DIRECT_ALIGNMENT - 1);
  if (end <= offset) return 0;
  return (uint64_t)(end - offset) < size ? (size_t)(end - offset) : size;
}

/* The bytes of `range`, from its start, that may go through the O_DIRECT descriptor, whose
 * unaligned `head` goes buffered: none without the descriptor; for a read, up to the last whole
 * block of the file, and none where the page cache holds the aligned middle (t->cached), which
 * copies it many times faster than the device reads it. */
static size_t direct_span_of(const kvik__posix_target *t, const kvik__posix_range *range,
                             size_t head) {
  if (t->direct_fd < 0) return 0;
  if (range->op == KVIK__WRITE) return range->size;
  size_t span = kvik__direct_readable(t, range->offset, range->size);
  if (span < head + KVIK__DIRECT_ALIGNMENT || !t->cached) return span;
  size_t middle = (span - head) & ~(size_t)(KVIK__DIRECT_ALIGNMENT - 1);
  return t->cached(t->fd, range->offset + (int64_t)head, middle) ? 0 : span;
}

/* The smallest buffered read announced to the kernel before it is made (kvik__posix_announce()),
 * and the step it is announced in. */
#define ANNOUNCED_MIN ((size_t)1 << 20)

/* A buffered read of ANNOUNCED_MIN bytes or more whose range the page cache lacks is announced
 * first (POSIX_FADV_WILLNEED): the kernel then reads the whole range from the device at once, in
 * requests as large as it makes, where the read alone would go at the pace of the descriptor's
 * readahead window, which the reads of many threads at scattered offsets keep small. The kernel
 * reads no more than the larger of the device's largest request and the readahead window for one
 * advice, from its start (8 MiB on the 2-core VM and the H100 machines, often 1.25 MiB
 * elsewhere), so the range is announced in steps of ANNOUNCED_MIN: one advice of a 16 MiB task
 * read 8 MiB of it there. The pages land in the page cache as the read's would. cachestat(2)
 * counts them as cached from then on, so that the read of a range announced before
 * (kvik__source.announce) is not announced again; mincore(2) only once read, and a second
 * announcement of pages on their way walks them without reading them again. Advice only: its
 * failure changes nothing, and stops the announcement. */
void kvik__posix_announce(const kvik__posix_target *t, int64_t offset, size_t size) {
  if (size < ANNOUNCED_MIN || !t->cached || t->cached(t->fd, offset, size)) return;
  for (size_t at = 0; at < size; at += ANNOUNCED_MIN) {
    size_t n = size - at < ANNOUNCED_MIN ? size - at : ANNOUNCED_MIN;
    if (kvik__fadvise(t->fd, (off_t)(offset + (int64_t)at), (off_t)n, POSIX_FADV_WILLNEED) != 0)
      return;
  }
}

/* Write-behind (KVIK_SETTING_WRITE_BEHIND). Writing a range back as soon as it is written lets
 * the storage work while the rest is written, where the kernel would start only once a tenth of
 * the memory is dirty, or at fsync: on the 2-core VM, 1 GiB in 4 MiB pwrites then fsync took
 * 0.28-0.36 s this way against 0.62-2.9 s without (the fsync alone 0.31 s). Smaller writes are
 * left to the kernel, which may merge them. Starting the writeback waits for room in the device's
 * queue when the storage is behind. So a handle sums the time of its writes and of their starts:
 * where the starts took more than a quarter of the writes' time (and a little more, for the
 * stray slow start of a busy system), the handle leaves its writes in the page cache for a
 * second, as write(2) alone would. The sums start again after each WRITE_BEHIND_WINDOW_NS of
 * writes, so that a long cheap past does not hide a slow present. */
#define WRITE_BEHIND_MIN ((size_t)1 << 20)
#define WRITE_BEHIND_SLACK_NS UINT64_C(2000000)
#define WRITE_BEHIND_WINDOW_NS UINT64_C(100000000)
#define WRITE_BEHIND_PAUSE_NS UINT64_C(1000000000)

/* Add a write's time and its start's to the handle's sums; pause it where the starts cost too
 * much. Concurrent writers may each miss the other's part of a sum for a moment: the check is
 * coarse by design. */
static void write_behind_account(kvik__write_behind *wb, uint64_t write_ns, uint64_t start_ns,
                                 uint64_t now) {
  const memory_order relaxed = memory_order_relaxed;
  uint64_t writing = atomic_fetch_add_explicit(&wb->write_ns, write_ns, relaxed) + write_ns;
  uint64_t starting = atomic_fetch_add_explicit(&wb->start_ns, start_ns, relaxed) + start_ns;
  int slow = starting > writing / 4 + WRITE_BEHIND_SLACK_NS;
  if (slow) atomic_store_explicit(&wb->paused_until_ns, now + WRITE_BEHIND_PAUSE_NS, relaxed);
  if (slow || writing > WRITE_BEHIND_WINDOW_NS) {
    atomic_store_explicit(&wb->write_ns, 0, relaxed);
    atomic_store_explicit(&wb->start_ns, 0, relaxed);
  }
}

static void write_behind(kvik__write_behind *wb, int fd, int64_t offset, size_t len,
                         uint64_t write_ns) {
  uint64_t start = kvik__now_ns();
  if (start < atomic_load_explicit(&wb->paused_until_ns, memory_order_relaxed)) return;
  int rc = kvik__sync_file_range(fd, (off_t)offset, (off_t)len, SYNC_FILE_RANGE_WRITE);
  /* A file that cannot be written back this way (a pipe, ESPIPE; a file system without it): no
   * use asking again. Other failures are the writeback's, which fsync reports as ever. */
  if (rc < 0 && (errno == ESPIPE || errno == EINVAL || errno == ENOSYS)) {
    atomic_store_explicit(&wb->paused_until_ns, UINT64_MAX, memory_order_relaxed);
    return;
  }
  uint64_t end = kvik__now_ns();
  write_behind_account(wb, write_ns, end - start, end);
}

/* The buffered part of a transfer, through t->fd: a write's started on its way to storage (see
 * write_behind()). */
static int buffered(const kvik__posix_target *t, kvik__posix_range part, size_t *done) {
  int behind = t->behind && part.op == KVIK__WRITE && part.size >= WRITE_BEHIND_MIN &&
               kvik__setting(KVIK_SETTING_WRITE_BEHIND);
  uint64_t start = behind ? kvik__now_ns() : 0;
  int rc = transfer_all(t, t->fd, part, done);
  if (behind && *done >= WRITE_BEHIND_MIN)
    write_behind(t->behind, t->fd, part.offset, *done, kvik__now_ns() - start);
  return rc;
}

int kvik__posix_io(const kvik__posix_target *t, const kvik__posix_range *range, size_t *done,
                   int *direct_refused) {
  *done = 0;
  size_t size = range->size;
  int64_t offset = range->offset;
  const size_t a = KVIK__DIRECT_ALIGNMENT;
  size_t head = (a - (size_t)offset % a) % a;
  size_t direct_span = direct_span_of(t, range, head);
  if (direct_span >= head + a) {
    size_t middle = (direct_span - head) & ~(a - 1);
    int rc = transfer_all(t, t->fd, part_of(*range, 0, head), done);
    if (rc < 0 || *done < head) return rc;
    size_t moved;
    direct_outcome outcome;
    kvik__posix_range mid = part_of(*range, head, middle);
    rc = ((uintptr_t)mid.buf % a == 0 ? direct_aligned : direct_bounced)(t, mid, &moved, &outcome);
    *done += moved;
    if (rc < 0) return rc;
    if (outcome == DIRECT_REFUSED) *direct_refused = 1;
  }
  if (range->op == KVIK__READ) kvik__posix_announce(t, offset + (int64_t)*done, size - *done);
  size_t rest;
  int rc = buffered(t, part_of(*range, *done, size - *done), &rest);
  *done += rest;
  return rc;
}

/* The errno that refuses a file opened for positional IO, or 0. */
static int refusal(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return errno;
  if (S_ISDIR(st.st_mode)) return EISDIR;
  return S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) ? ESPIPE : 0;
}

/* The FIFO is refused before opening, since opening it would wait for its other end. (A FIFO put
 * in the file's place between the two calls still makes open() wait; O_NONBLOCK would not, but
 * would also make open() fail on a file under a lease instead of waiting for the lease.) */
int kvik__open_for_io_at(const char *site, const char *path, int flags, mode_t mode) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISFIFO(st.st_mode)) {
    errno = ESPIPE;
    return -1;
  }
  int fd = kvik__open_at(site, path, flags, mode);
  int err = fd < 0 ? 0 : refusal(fd);
  if (err) {
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

/* One aligned block through the O_DIRECT descriptor at offset 0: 0, or -errno. A short count
 * (which leaves the rest unaligned) repeats the whole block; a few in a row are an error. */
static int probe_block(kvik__op op, int fd, char *block) {
  for (int attempt = 0; attempt < 3; attempt++) {
    ssize_t r = sys_once(op, fd, block, KVIK__DIRECT_ALIGNMENT, 0);
    if (r < 0 || r == KVIK__DIRECT_ALIGNMENT) return r < 0 ? (int)r : 0;
  }
  return -EIO;
}

/* Writes and reads back one block; 1 when both work, 0 when the file system refuses O_DIRECT IO
 * (EINVAL), or a negative code. */
static int probe_direct_io(int fd, const char *dir) {
  void *block = NULL;
  int err = kvik__posix_memalign(&block, KVIK__DIRECT_ALIGNMENT, KVIK__DIRECT_ALIGNMENT);
  if (err) return kvik__fail_errno(err, "kvik_direct_io_supported(\"%s\"): aligned buffer", dir);
  memset(block, 0x6b, KVIK__DIRECT_ALIGNMENT);
  int rc = probe_block(KVIK__WRITE, fd, block);
  if (rc == 0) rc = probe_block(KVIK__READ, fd, block);
  free(block);
  if (rc == -EINVAL) return 0;
  return rc < 0 ? kvik__fail_errno(
                      -rc, "kvik_direct_io_supported(\"%s\"): O_DIRECT IO on a test file", dir)
                : 1;
}

/* A temporary file in `dir`, written and read back through O_DIRECT. */
int kvik_direct_io_supported(const char *dir) {
  if (!dir) return kvik__fail(-EINVAL, "kvik_direct_io_supported: NULL directory");
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s/.kvik-direct-io-XXXXXX", dir) >= (int)sizeof path)
    return kvik__fail(-ENAMETOOLONG, "kvik_direct_io_supported(\"%s\"): path too long", dir);
  int fd = mkostemp(path, O_CLOEXEC);
  if (fd < 0)
    return kvik__fail_errno(errno, "kvik_direct_io_supported(\"%s\"): cannot create a test file",
                            dir);
  int direct = kvik__open(path, O_RDWR | O_DIRECT | O_CLOEXEC, 0);
  int open_err = errno;
  unlink(path);
  close(fd);
  if (direct < 0 && open_err == EINVAL) return 0;
  if (direct < 0)
    return kvik__fail_errno(
        open_err, "kvik_direct_io_supported(\"%s\"): opening a test file with O_DIRECT", dir);
  int rc = probe_direct_io(direct, dir);
  close(direct);
  return rc;
}
