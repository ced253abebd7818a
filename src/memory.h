/* What kind of memory a buffer is, and the CUDA context that copies to it run in. */
#ifndef KVIK_SRC_MEMORY_H
#define KVIK_SRC_MEMORY_H

#include "cuda.h"
#include "kvik.h"

typedef struct kvik__memory {
  kvik_memory_kind kind;
  CUcontext ctx; /* for device and managed memory: where copies run */
} kvik__memory;

/* Classify `ptr` (see kvik_memory_kind_of) and, for device and managed memory, pick the context:
 * the allocation's own, else the calling thread's current one, else the primary context of the
 * allocation's device. Returns 0, or a negative code with a message naming `fn`: a CUDA error
 * code (KVIK_IS_CUDA_ERROR) when a driver call fails. */
int kvik__memory_classify(const char *fn, const void *ptr, kvik__memory *mem);

/* Whether transfers to this memory go through pinned bounce buffers and a device copy. */
static inline int kvik__memory_on_device(const kvik__memory *mem) {
  return mem->kind == KVIK_MEMORY_DEVICE || mem->kind == KVIK_MEMORY_MANAGED;
}

/* The allocation `ptr` points into: its start and size. Returns 0 or a CUDA code. */
int kvik__allocation_range(const char *fn, const void *ptr, char **base, size_t *size);

/* Make `ctx` current on this thread until kvik__context_pop(). Returns 0 or a CUDA error code. */
int kvik__context_push(const char *fn, CUcontext ctx);
void kvik__context_pop(void);

/* Make the calling thread's current context current again, or device 0's primary context where
 * none is, until kvik__context_pop(): for calls that need some context, not a particular one
 * (registration and pinned allocations are portable to all). Returns 0 or a negative code. */
int kvik__context_push_any(const char *fn, const kvik__cuda_api *cu);

/* The ID that tells `ctx` from a later context with the same handle (cuCtxGetId); 0 where the
 * driver has no IDs or the context is gone. */
unsigned long long kvik__context_id(CUcontext ctx);

/* The primary context of device `ordinal`, retained once for the life of the process. Returns
 * 0 or a negative code. */
int kvik__primary_context(const char *fn, int ordinal, CUcontext *ctx);

#endif
