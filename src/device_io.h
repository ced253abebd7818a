/* Transfers between a file (or mapping) and device or managed memory, through pinned bounce
 * buffers, pipelined: while one buffer's bytes are copied to (from) the device, the next
 * buffer is filled from (written to) the file. */
#ifndef KVIK_SRC_DEVICE_IO_H
#define KVIK_SRC_DEVICE_IO_H

#include <stddef.h>
#include <stdint.h>

#include "memory.h"
#include "posix_io.h"

/* Moves `size` bytes between host memory `host` and the source at `offset` (a file, a mapping);
 * the contract of kvik__posix_io(): 0 or a negative code, *done bytes moved, reads short only at
 * the end of the source. */
typedef int (*kvik__host_transfer)(void *source, kvik__op op, char *host, size_t size, int64_t offset, size_t *done);

/* Transfer `size` bytes between device memory `dev` (classified as `mem`) and `source` at
 * `offset`, in chunks of bounce buffers sized for tasks of `task_size` bytes, on this thread's
 * stream for the memory's context. Returns 0 or a negative code with a message naming `fn`;
 * *done counts bytes that reached their destination. */
int kvik__device_io(const char *fn, const kvik__memory *mem, kvik__op op, char *dev, size_t size, int64_t offset,
                    size_t task_size, kvik__host_transfer transfer, void *source, size_t *done);

/* Allocate `size` bytes of device memory in the primary context of `device`. */
int kvik__device_alloc(const char *fn, int device, size_t size, void **devptr);

#endif
