/* A pinned arena for a batch's device-memory operations on io_uring, with its own stream. */
#define _GNU_SOURCE
#include "staging.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bounce.h"
#include "error.h"
#include "memory.h"
#include "sys.h"

#define UNITS (KVIK__STAGING_BYTES / KVIK__STAGING_UNIT)

struct kvik__staging {
  pid_t pid; /* of the process that made it: a forked child has none of its CUDA state */
  CUcontext ctx;
  CUdevice device; /* ctx's: the arena comes from the device's pinned cache */
  CUstream stream;
  char *base;
  unsigned char used[UNITS]; /* per unit: 1 while a piece holds it */
};

int kvik__staging_create(const char *fn, CUcontext ctx, kvik__staging **staging) {
  *staging = NULL;
  kvik__staging *s = kvik__calloc(1, sizeof *s);
  if (!s) return kvik__fail(-ENOMEM, "%s: out of memory for a staging arena", fn);
  s->pid = getpid();
  s->ctx = ctx;
  int rc = kvik__context_push(fn, ctx);
  if (rc == 0) {
    void *base = NULL;
    rc =
        kvik__cuda_check(kvik__cuda_if_present()->cuCtxGetDevice(&s->device), fn, "cuCtxGetDevice");
    if (rc == 0) rc = kvik__device_pinned_get(fn, s->device, KVIK__STAGING_BYTES, &base);
    s->base = base;
    if (rc == 0)
      rc = kvik__cuda_check(
          kvik__cuda_if_present()->cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING), fn,
          "cuStreamCreate");
    if (rc < 0) kvik__device_pinned_put(s->device, s->base, KVIK__STAGING_BYTES);
    kvik__context_pop();
  }
  if (rc < 0) {
    free(s);
    return rc;
  }
  *staging = s;
  return 0;
}

void kvik__staging_free(kvik__staging *s) {
  if (!s) return;
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  if (s->pid == getpid() && cu && cu->cuCtxPushCurrent(s->ctx) == CUDA_SUCCESS) {
    cu->cuStreamSynchronize(s->stream);
    cu->cuStreamDestroy(s->stream);
    kvik__device_pinned_put(s->device, s->base, KVIK__STAGING_BYTES);
    kvik__context_pop();
  }
  free(s);
}

CUcontext kvik__staging_context(const kvik__staging *s) { return s->ctx; }

char *kvik__staging_base(const kvik__staging *s) { return s->base; }

static size_t units_of(size_t size) { return (size + KVIK__STAGING_UNIT - 1) / KVIK__STAGING_UNIT; }

char *kvik__staging_take(kvik__staging *s, size_t size) {
  size_t need = units_of(size), run = 0;
  for (size_t u = 0; u < UNITS; u++) {
    run = s->used[u] ? 0 : run + 1;
    if (run < need) continue;
    size_t first = u + 1 - need;
    memset(&s->used[first], 1, need);
    return s->base + first * KVIK__STAGING_UNIT;
  }
  return NULL;
}

void kvik__staging_put(kvik__staging *s, char *piece, size_t size) {
  size_t first = (size_t)(piece - s->base) / KVIK__STAGING_UNIT;
  memset(&s->used[first], 0, units_of(size));
}

int kvik__staging_copy(const char *fn, kvik__staging *s, kvik__op op, char *dev, char *piece,
                       size_t size) {
  int rc = kvik__context_push(fn, s->ctx);
  if (rc < 0) return rc;
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  CUdeviceptr ptr = (CUdeviceptr)(uintptr_t)dev;
  if (op == KVIK__READ)
    rc = kvik__cuda_check(cu->cuMemcpyHtoDAsync(ptr, piece, size, s->stream), fn,
                          "cuMemcpyHtoDAsync");
  else
    rc = kvik__cuda_check(cu->cuMemcpyDtoHAsync(piece, ptr, size, s->stream), fn,
                          "cuMemcpyDtoHAsync");
  kvik__context_pop();
  return rc;
}

int kvik__staging_sync(const char *fn, kvik__staging *s) {
  int rc = kvik__context_push(fn, s->ctx);
  if (rc < 0) return rc;
  rc = kvik__cuda_check(kvik__cuda_if_present()->cuStreamSynchronize(s->stream), fn,
                        "cuStreamSynchronize");
  kvik__context_pop();
  return rc;
}
