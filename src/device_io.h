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
#include "zero_copy.h"

/* Moves `size` bytes between host memory `host` and the source at `offset` (a file, a mapping);
 * the contract of kvik__posix_io(): 0 or a negative code, *done bytes moved, reads short only at
 * the end of the source. */
typedef int (*kvik__host_transfer)(void *source, kvik__op op, char *host, size_t size, int64_t offset, size_t *done);

/* A transfer between device (or managed) memory and a source, through the bounce buffers. */
typedef struct kvik__device_io {
  const char *fn;               /* the public function called, for messages */
  const kvik__memory *mem;      /* the device memory, classified */
  char *dev;                    /* its first byte */
  size_t size;
  int64_t offset;               /* of the first byte in the source */
  size_t task_size;             /* the request's task size, which sizes the bounce buffers */
  kvik__host_transfer transfer; /* moves bytes between a bounce buffer and the source */
  void *source;                 /* transfer's first argument */
} kvik__device_io;

struct kvik__lane;
struct kvik__slot;

/* Copies to the device that reading threads hand to one thread to queue for them. A call that
 * queues a copy waits while another thread of the process registers memory with the driver
 * (bench_zero_copy_probe step 6), and the front of a split first read (request.c) registers all
 * the time: on an H100 its back tasks spent 45% of their time in such calls. So while the front
 * runs, the back posts its copies here and reads on, and the front queues them between its
 * registrations. A posted copy runs on the stream of the thread that posted it and records that
 * thread's event, so whatever waits for them waits as it did. Posting and taking move a few
 * pointers, under a spin lock. */
typedef struct kvik__relay {
  atomic_flag lock;
  int open;                        /* the relaying thread queues what is posted */
  struct kvik__slot *first, *last; /* posted, not queued yet */
} kvik__relay;

/* A closed relay. */
void kvik__relay_init(kvik__relay *relay);

/* From now on, the reads that name this relay (kvik__device_read.relay) post their bounce
 * copies to it, and the calling thread queues them, with kvik__relay_pass(), until it closes it. */
void kvik__relay_open(kvik__relay *relay);

/* Queue the copies posted so far. Called by the thread that opened the relay, with the reads'
 * context current. */
void kvik__relay_pass(kvik__relay *relay);

/* Queue the copies posted so far and take no more: from now on each thread queues its own. */
void kvik__relay_close(kvik__relay *relay);

/* A read from a source into device memory, made of pieces: through the bounce buffers, or
 * straight from the file's registered mapping (zero_copy.h). On a pool thread its last bounce
 * copies may still run when kvik__device_read_end() returns: the thread goes on with its next
 * task, whose first chunk is read from the file while they run, and finishes the read when it
 * needs their buffers again or before it sleeps (kvik__device_settle). */
typedef struct kvik__device_read {
  /* Called exactly once, on the reading thread, with the bytes that reached the device and 0 or
   * the first error (then this thread's detail message describes it). The read may be freed from
   * then on. */
  void (*finish)(struct kvik__device_read *read, size_t bytes, int rc);
  const char *fn;      /* the public function called, for messages */
  kvik__relay *relay;  /* where its bounce copies are posted while it is open, or NULL */
  kvik__host_transfer transfer; /* what its bounce pieces read from (kvik__device_io) */
  void *source;
  size_t bytes;        /* bytes whose copies are known to be complete */
  size_t issued_bytes; /* bytes whose bounce copies were queued */
  unsigned in_flight;  /* bounce copies queued and not yet known to be complete */
  int rc;
  int issued; /* all pieces are queued */
  int pushed; /* the memory's context was made current */
  struct kvik__lane *lane;
  struct {
    int asked;            /* kvik__zc_begin() was asked, once for the whole request */
    kvik__zc_file *file;  /* whose mapping the copies read, held until they are done; NULL if none */
    const char *host;     /* the request's first byte in the mapping */
    int64_t offset;       /* the request's offset */
    size_t bytes;         /* bytes of the queued copies from the mapping */
  } map;
} kvik__device_read;

/* Start a read of io's range on this thread's stream for the memory's context, with bounce
 * buffers sized for tasks of io->task_size bytes; its pieces read from io's source. Set
 * read->finish (and read->relay, if any) first. 0, or a negative code, which the read then
 * finishes with: its pieces do nothing. */
int kvik__device_read_begin(kvik__device_read *read, const kvik__device_io *io);

/* Queue the read of `size` bytes at `offset` of the source into `dev` through the bounce buffers.
 * Returns the bytes queued: fewer than `size` where the source ended, or on an error (read->rc). */
size_t kvik__device_read_bounced(kvik__device_read *read, char *dev, size_t size, int64_t offset);

/* Queue the copy of what it can of `size` bytes at `offset` (within the request `zc` describes)
 * straight from the file's registered mapping: those up to the end of offset's granule, once it
 * is registered (kvik__zc_ready). Returns the bytes queued, 0 when the mapping cannot serve them:
 * they are for the bounce buffers. */
size_t kvik__device_read_mapped(kvik__device_read *read, const kvik__zc_read *zc, char *dev, size_t size,
                                int64_t offset);

/* All pieces are queued: wait for the copies from the mapping, and finish the read now, or, with
 * `may_defer` (pool threads only) once its last bounce copies are done. */
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
