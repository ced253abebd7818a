/* POSIX transfers of one contiguous range: retries, end of file, opportunistic O_DIRECT. */
#ifndef KVIK_SRC_POSIX_IO_H
#define KVIK_SRC_POSIX_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "op.h"
#include "sys.h"

/* O_DIRECT needs buffer, offset and size aligned; a page satisfies every device we meet. */
#define KVIK__DIRECT_ALIGNMENT 4096

static inline int kvik__direct_aligned(uintptr_t x) { return x % KVIK__DIRECT_ALIGNMENT == 0; }

/* A handle's write-behind (KVIK_SETTING_WRITE_BEHIND, posix_io.c): the time its writes took and
 * the time starting their writeback took, since the last check; and when it may start writeback
 * again, after that took too long. Zero-initialised. */
typedef struct kvik__write_behind {
  _Atomic uint64_t write_ns, start_ns;
  _Atomic uint64_t paused_until_ns; /* kvik__now_ns(); UINT64_MAX: never (the file refuses) */
} kvik__write_behind;

typedef struct kvik__posix_target {
  int fd;           /* buffered descriptor */
  int direct_fd;    /* O_DIRECT descriptor on the same file, or -1 to use none */
  const char *path; /* for messages */
  /* NULL, or whether the page cache holds (nearly) all of the `len` bytes at `offset` of `fd`:
   * a read's aligned middle that it holds goes through fd instead of direct_fd. A hook, as the
   * page-cache tools (page_cache.c) open files through this file. */
  int (*cached)(int fd, int64_t offset, size_t len);
  /* NULL, or the handle's write-behind: buffered writes of 1 MiB or more start their writeback
   * (see KVIK_SETTING_WRITE_BEHIND). */
  kvik__write_behind *behind;
} kvik__posix_target;

/* A transfer of `size` bytes between `buf` and the file at `offset`. */
typedef struct kvik__posix_range {
  kvik__op op;
  char *buf;
  size_t size;
  int64_t offset;
} kvik__posix_range;

/* Transfer the range. Interrupted and short system calls are retried. With a direct_fd, the
 * page-aligned middle of the range goes through it (through a bounce buffer when the buffer is
 * not aligned) and the unaligned head and tail through the buffered descriptor; nothing outside
 * the range is written. A read's middle that target->cached finds in the page cache goes through
 * the buffered descriptor too, with the same result.
 *
 * Returns 0, or a negative code with a detail message. *done is the number of bytes transferred,
 * also on failure; for a read, *done < size without error means the file ended. Sets
 * *direct_refused when the file system refused O_DIRECT IO (the range was then done buffered). */
int kvik__posix_io(const kvik__posix_target *target, const kvik__posix_range *range, size_t *done,
                   int *direct_refused);

/* Ask the kernel to read `size` bytes at `offset` of target->fd into the page cache now, where
 * they are 1 MiB or more and target->cached finds them missing (posix_io.c says why); as
 * kvik__posix_io() does before a buffered read. Advice only: returns nothing. Thread-safe. */
void kvik__posix_announce(const kvik__posix_target *target, int64_t offset, size_t size);

/* The range through the descriptor `fd` alone, in system calls retried while interrupted or
 * short, until it is done, or (reads) the file ends, or a call fails or (writes) writes nothing.
 * Returns 0, or the failed call's -errno with no message set; *done is the number of bytes
 * transferred either way. kvik__posix_report() reports what it did as kvik__posix_io() would;
 * the caller decides first whether a failure is one (see file.c, quick()). */
int kvik__posix_move(int fd, const kvik__posix_range *range, size_t *done);

/* What kvik__posix_move() of `range` through target->fd did, moving `done` bytes and returning
 * rc: 0, or a negative code with a detail message naming the call, the path and the part of the
 * range that was left. */
int kvik__posix_report(const kvik__posix_target *target, const kvik__posix_range *range,
                       size_t done, int rc);

/* Append `size` bytes from `buf` through target->fd, which was opened with O_APPEND, in write(2)
 * calls, retried while interrupted or short. The kernel places each call at the end of the file
 * as it is at that moment: no offset is computed here, so nothing is ever overwritten, and bytes
 * a failed call did not write take no room. Returns 0, or a negative code with a detail message;
 * *done counts the bytes written, also on failure. */
int kvik__posix_append(const kvik__posix_target *target, const char *buf, size_t size,
                       size_t *done);

/* The part of [offset, offset+size) that O_DIRECT may read, from its start: a direct read of the
 * block that holds the end of file fills the whole block in the caller's buffer, bytes past the
 * end included, so direct reads stop at the last whole block (0 where target->fd is no regular
 * file). */
size_t kvik__direct_readable(const kvik__posix_target *target, int64_t offset, size_t size);

/* open(2) of a file for positional IO, as kvik__open(). A FIFO has no positions, and opening
 * one waits for its other end, maybe for ever: the open does not wait, and fails with ESPIPE; a
 * directory fails with EISDIR. Returns the descriptor, or -1 with errno set. */
#define kvik__open_for_io(path, flags, mode) kvik__open_for_io_at(KVIK__SITE, path, flags, mode)
int kvik__open_for_io_at(const char *site, const char *path, int flags, mode_t mode);

#endif
