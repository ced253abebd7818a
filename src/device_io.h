/* Transfers between a file (or mapping) and device or managed memory, through pinned bounce
 * buffers, pipelined: while one buffer's bytes are copied to (from) the device, the next
 * buffer is filled from (written to) the file. */
#ifndef KVIK_SRC_DEVICE_IO_H
#define KVIK_SRC_DEVICE_IO_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "memory.h"
#include "posix_io.h"

/* Moves `size` bytes between host memory `host` and the source at `offset` (a file, a mapping);
 * the contract of kvik__posix_io(): 0 or a negative code, *done bytes moved, reads short only at
 * the end of the source. */
typedef int (*kvik__host_transfer)(void *source, kvik__op op, char *host, size_t size,
                                   int64_t offset, size_t *done);

/* A transfer between device (or managed) memory and a source, through the bounce buffers. */
typedef struct kvik__device_io {
  const char *fn;          /* the public function called, for messages */
  const kvik__memory *mem; /* the device memory, classified */
  char *dev;               /* its first byte */
  size_t size;
  int64_t offset;               /* of the first byte in the source */
  size_t task_size;             /* the request's task size, which sizes the bounce buffers */
  kvik__host_transfer transfer; /* moves bytes between a bounce buffer and the source */
  void *source;                 /* transfer's first argument */
} kvik__device_io;

struct kvik__lane;

/* A bounce copy to the device that a read hands to another thread to queue for it
 * (kvik__handoff). The copy runs on the reading thread's stream and records its event there, as
 * if that thread had queued it, so whatever waits for it waits as it would. */
typedef struct kvik__handed_copy {
  CUdeviceptr dst;
  const char *src; /* a pinned bounce buffer */
  size_t bytes;
  CUstream stream;
  CUevent event; /* recorded on `stream` after the copy */
  /* The taker's, set before kvik__handoff.wait() returns: */
  struct kvik__handed_copy *next;
  _Atomic uint32_t queued; /* 1 once the calls below were made */
  CUresult result;         /* of the first of them that failed, or CUDA_SUCCESS */
  const char *call;        /* its name */
} kvik__handed_copy;

/* A thread that queues the bounce copies of other threads' reads for them, through hooks, so
 * that reads need not know who it is (zero-copy reads hand theirs to their front task, which
 * queues them between its registrations: zero_copy_read.c says why). */
typedef struct kvik__handoff {
  /* Take the copy to queue it soon; or 0: it takes no copies now, and the read queues it. */
  int (*take)(struct kvik__handoff *handoff, kvik__handed_copy *copy);
  /* Return once a copy it took was queued. */
  void (*wait)(struct kvik__handoff *handoff, kvik__handed_copy *copy);
} kvik__handoff;

/* A read from a source into device memory, made of pieces: through the bounce buffers, or
 * straight from host memory that needs none (kvik__device_read_direct; zero-copy reads copy so
 * from a file's registered mapping). On a pool thread its last bounce copies may still run when
 * kvik__device_read_end() returns: the thread goes on with its next task, whose first chunk is
 * read from the file while they run, and finishes the read when it needs their buffers again, or
 * once their copies are done when it runs out of work (the pool's idle hook). */
typedef struct kvik__device_read {
  /* Called exactly once, on the reading thread, with the bytes that reached the device and 0 or
   * the first error (then this thread's detail message describes it). The read may be freed from
   * then on. */
  void (*finish)(struct kvik__device_read *read, size_t bytes, int rc);
  const char *fn;               /* the public function called, for messages */
  kvik__handoff *handoff;       /* takes its bounce copies where it will, or NULL */
  kvik__host_transfer transfer; /* what its bounce pieces read from (kvik__device_io) */
  void *source;
  size_t bytes;        /* bytes whose copies are known to be complete */
  size_t issued_bytes; /* bytes whose bounce copies were queued */
  size_t direct_bytes; /* bytes of the direct copies queued since they were last waited for */
  unsigned in_flight;  /* bounce copies queued and not yet known to be complete */
  int rc;
  int issued; /* all pieces are queued */
  int pushed; /* the memory's context was made current */
  struct kvik__lane *lane;
} kvik__device_read;

/* Start a read of io's range on this thread's stream for the memory's context, with bounce
 * buffers sized for tasks of io->task_size bytes; its pieces read from io's source. Set
 * read->finish (and read->handoff, if any) first. 0, or a negative code, which the read then
 * finishes with: its pieces do nothing. */
int kvik__device_read_begin(kvik__device_read *read, const kvik__device_io *io);

/* Queue the read of `size` bytes at `offset` of the source into `dev` through the bounce buffers.
 * Returns the bytes queued: fewer than `size` where the source ended, or on an error (read->rc). */
size_t kvik__device_read_bounced(kvik__device_read *read, char *dev, size_t size, int64_t offset);

/* Queue the copy of `size` bytes of host memory `host` into `dev`, with no bounce buffer: the
 * memory must stay as it is until kvik__device_read_direct_wait(). Returns whether it was queued;
 * if not, the read keeps the error (read->rc). */
int kvik__device_read_direct(kvik__device_read *read, char *dev, const char *host, size_t size);

/* Wait for the direct copies queued so far and count their bytes as read, or keep their error:
 * their host memory may go from then on. Called before kvik__device_read_end(). */
void kvik__device_read_direct_wait(kvik__device_read *read);

/* All pieces are queued: finish the read now, or, with `may_defer` (pool threads only) once its
 * last bounce copies are done. */
void kvik__device_read_end(kvik__device_read *read, int may_defer);

/* A read of io's range through the bounce buffers: begin, one piece, end. */
void kvik__read_to_device(const kvik__device_io *io, int may_defer, kvik__device_read *read);

/* Finish the reads this thread deferred, waiting for their copies. */
void kvik__device_settle(void);

/* Write io's range from device memory to the source: the copy of chunk i+1 to host is queued
 * before chunk i is written. Returns 0 or a negative code with a message naming io->fn; *done
 * counts bytes that reached the file. */
int kvik__device_write(const kvik__device_io *io, size_t *done);

/* Allocate `size` bytes of device memory in the primary context of `device`. */
int kvik__device_alloc(const char *fn, int device, size_t size, void **devptr);

#endif
