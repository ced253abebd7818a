/* Pinned host memory through which a batch's io_uring moves device memory: a read lands in a
 * piece of the arena and is then copied to the device; a write is copied from the device first.
 * The arena is one allocation, so the ring can register it once as a fixed buffer and the kernel
 * need not pin its pages for every operation.
 *
 * Pieces are whole units of KVIK__STAGING_UNIT bytes (page-aligned, so O_DIRECT can fill them),
 * taken first-fit. An operation that finds no room, or is larger than KVIK__STAGING_MAX_OP, is
 * not staged: the batch runs it on the thread pool, which has bounce buffers of its own. Used by
 * one thread at a time, like its batch. */
#ifndef KVIK_SRC_STAGING_H
#define KVIK_SRC_STAGING_H

#include <stddef.h>

#include "cuda.h"
#include "op.h"

#define KVIK__STAGING_BYTES ((size_t)64 << 20)
#define KVIK__STAGING_UNIT ((size_t)64 << 10)
/* A quarter of the arena: one large operation never keeps the others out. */
#define KVIK__STAGING_MAX_OP (KVIK__STAGING_BYTES / 4)

typedef struct kvik__staging kvik__staging;

/* An arena for copies in `ctx`. Returns 0, or a negative code with a message naming `fn`. */
int kvik__staging_create(const char *fn, CUcontext ctx, kvik__staging **staging);

/* Wait for the copies queued, and give the arena back. In a child after fork() it only forgets
 * it: the memory and the stream are the parent's CUDA state. NULL is ignored. */
void kvik__staging_free(kvik__staging *staging);

CUcontext kvik__staging_context(const kvik__staging *staging);

/* The arena, for registering it with a ring. */
char *kvik__staging_base(const kvik__staging *staging);

/* A piece of at least `size` bytes (1 to KVIK__STAGING_MAX_OP), or NULL when there is no room. */
char *kvik__staging_take(kvik__staging *staging, size_t size);

/* Give back a piece of kvik__staging_take(size). */
void kvik__staging_put(kvik__staging *staging, char *piece, size_t size);

/* Queue the copy of `size` bytes between device (or managed) memory `dev` and `piece`, on the
 * arena's stream: for KVIK__READ from the piece to the device, for KVIK__WRITE from the device
 * to the piece. Returns 0 or a CUDA error code with a message naming `fn`. */
int kvik__staging_copy(const char *fn, kvik__staging *staging, kvik__op op, char *dev, char *piece,
                       size_t size);

/* Wait until every copy queued is done. Returns 0 or a CUDA error code with a message. */
int kvik__staging_sync(const char *fn, kvik__staging *staging);

#endif
