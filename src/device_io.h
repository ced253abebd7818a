/* Transfers between a file (or mapping) and device or managed memory, through pinned bounce
 * buffers, pipelined: while one buffer's bytes are copied to (from) the device, the next
 * buffer is filled from (written to) the file. */
#ifndef KVIK_SRC_DEVICE_IO_H
#define KVIK_SRC_DEVICE_IO_H

#include <stddef.h>
#include <stdint.h>

#include "memory.h"
#include "posix_io.h"
#include "zero_copy.h"

/* Moves `size` bytes between host memory `host` and the source at `offset` (a file, a mapping);
 * the contract of kvik__posix_io(): 0 or a negative code, *done bytes moved, reads short only at
 * the end of the source. */
typedef int (*kvik__host_transfer)(void *source, kvik__op op, char *host, size_t size, int64_t offset, size_t *done);

/* A read from a source into device memory. On a pool thread its last copies may still run
 * when kvik__read_to_device() returns: the thread goes on with its next task, whose first chunk is
 * read from the file while they run, and finishes the read when it needs their buffers again or
 * before it sleeps (kvik__device_settle). */
typedef struct kvik__device_read {
  /* Called exactly once, on the reading thread, with the bytes that reached the device and 0 or
   * the first error (then this thread's detail message describes it). The read may be freed from
   * then on. */
  void (*finish)(struct kvik__device_read *read, size_t bytes, int rc);
  const char *fn;     /* the public function called, for messages */
  size_t bytes;       /* bytes whose copies are known to be complete */
  unsigned in_flight; /* copies queued and not yet known to be complete */
  int rc;
  int issued; /* all chunks are queued */
} kvik__device_read;

/* Read `size` bytes at `offset` of `source` into device memory `dev` (classified as `mem`), on
 * this thread's stream for the memory's context: straight from the page cache where `zc` allows
 * it (zero_copy.h), else in chunks of bounce buffers sized for tasks of `task_size` bytes. With
 * `may_defer` (pool threads only) the last copies may finish later; otherwise `read->finish` has
 * been called when this returns. Set read->finish first. */
void kvik__read_to_device(const char *fn, const kvik__memory *mem, char *dev, size_t size, int64_t offset,
                          size_t task_size, kvik__host_transfer transfer, void *source, const kvik__zc_read *zc,
                          int may_defer, kvik__device_read *read);

/* Finish the reads this thread deferred, waiting for their copies. */
void kvik__device_settle(void);

/* Write `size` bytes from device memory `dev` (classified as `mem`) to `source` at `offset`:
 * the copy of chunk i+1 to host is queued before chunk i is written. Returns 0 or a negative code
 * with a message naming `fn`; *done counts bytes that reached the file. */
int kvik__device_write(const char *fn, const kvik__memory *mem, char *dev, size_t size, int64_t offset,
                       size_t task_size, kvik__host_transfer transfer, void *source, size_t *done);

/* Allocate `size` bytes of device memory in the primary context of `device`. */
int kvik__device_alloc(const char *fn, int device, size_t size, void **devptr);

#endif
