/* Pointer classification, contexts, and host memory registration. */
#define _GNU_SOURCE
#include "memory.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "error.h"
#include "init.h"

#define CUDA_ERROR_INVALID_VALUE 1
#define MAX_DEVICES 64

static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primary[MAX_DEVICES]; /* guarded by primary_lock */

int kvik__allocation_range(const char *fn, const void *ptr, char **base, size_t *size) {
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  if (!cu) return kvik__fail(-EINVAL, "%s: %p is not device memory", fn, ptr);
  CUdeviceptr start = 0;
  size_t bytes = 0;
  int attributes[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void *values[] = {&start, &bytes};
  CUdeviceptr at = (CUdeviceptr)(uintptr_t)ptr;
  int rc = kvik__cuda_check(cu->cuPointerGetAttributes(2, attributes, values, at), fn,
                            "cuPointerGetAttributes");
  *base = (char *)(uintptr_t)start;
  *size = bytes;
  return rc;
}

int kvik__primary_context(const char *fn, int ordinal, CUcontext *ctx) {
  const kvik__cuda_api *cu = kvik__cuda(fn);
  if (!cu) return KVIK_ECUDA_UNAVAILABLE;
  if (ordinal < 0 || ordinal >= MAX_DEVICES)
    return kvik__fail(-EINVAL, "%s: no CUDA device %d", fn, ordinal);
  int count = 0;
  int rc = kvik__cuda_check(cu->cuDeviceGetCount(&count), fn, "cuDeviceGetCount");
  if (rc < 0) return rc;
  if (ordinal >= count)
    return kvik__fail(-EINVAL, "%s: no CUDA device %d (%d present)", fn, ordinal, count);
  pthread_mutex_lock(&primary_lock);
  if (!primary[ordinal]) {
    CUdevice device;
    rc = kvik__cuda_check(cu->cuDeviceGet(&device, ordinal), fn, "cuDeviceGet");
    if (rc == 0)
      rc = kvik__cuda_check(cu->cuDevicePrimaryCtxRetain(&primary[ordinal], device), fn,
                            "cuDevicePrimaryCtxRetain");
  }
  *ctx = primary[ordinal];
  pthread_mutex_unlock(&primary_lock);
  return rc;
}

static int copy_context(const char *fn, CUcontext own, int ordinal, CUcontext *ctx) {
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  *ctx = own;
  if (*ctx) return 0;
  int rc = kvik__cuda_check(cu->cuCtxGetCurrent(ctx), fn, "cuCtxGetCurrent");
  if (rc < 0 || *ctx) return rc;
  return kvik__primary_context(fn, ordinal, ctx);
}

/* What the driver says of ptr: its memory type alone (count 1), or that and, in `more`, its
 * context, whether it is managed and its device (count 4); type 0 for a pointer it does not know.
 * 0 or a negative code. The type comes first and alone: a host read checks its buffer on every
 * call, and pageable memory, type 0, needs no more (managed memory has type host or device, never
 * 0). */
static int pointer_attributes(const char *fn, const kvik__cuda_api *cu, const void *ptr,
                              unsigned count, unsigned *type, void **more) {
  int attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT,
                      CU_POINTER_ATTRIBUTE_IS_MANAGED, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void *values[] = {type, more ? more[0] : NULL, more ? more[1] : NULL, more ? more[2] : NULL};
  CUresult result =
      cu->cuPointerGetAttributes(count, attributes, values, (CUdeviceptr)(uintptr_t)ptr);
  if (result != CUDA_ERROR_INVALID_VALUE)
    return kvik__cuda_check(result, fn, "cuPointerGetAttributes");
  *type = 0; /* not a pointer CUDA knows */
  return 0;
}

int kvik__memory_classify(const char *fn, const void *ptr, kvik__memory *mem) {
  mem->kind = KVIK_MEMORY_HOST;
  mem->ctx = NULL;
  const kvik__cuda_api *cu;
  int rc = kvik__cuda_for_pointers(fn, &cu);
  if (rc < 0 || !cu || !ptr) return rc;
  unsigned type = 0;
  rc = pointer_attributes(fn, cu, ptr, 1, &type, NULL);
  if (rc < 0 || type == 0) return rc;
  CUcontext own = NULL;
  unsigned managed = 0;
  int ordinal = 0;
  void *more[] = {&own, &managed, &ordinal};
  rc = pointer_attributes(fn, cu, ptr, 4, &type, more);
  if (rc < 0) return rc;
  if (managed) mem->kind = KVIK_MEMORY_MANAGED;
  else if (type == CU_MEMORYTYPE_DEVICE) mem->kind = KVIK_MEMORY_DEVICE;
  else if (type == CU_MEMORYTYPE_HOST) mem->kind = KVIK_MEMORY_PINNED;
  if (!kvik__memory_on_device(mem)) return 0;
  return copy_context(fn, own, ordinal, &mem->ctx);
}

int kvik__context_push(const char *fn, CUcontext ctx) {
  return kvik__cuda_check(kvik__cuda_if_present()->cuCtxPushCurrent(ctx), fn, "cuCtxPushCurrent");
}

void kvik__context_pop(void) {
  CUcontext popped;
  kvik__cuda_if_present()->cuCtxPopCurrent(&popped);
}

unsigned long long kvik__context_id(CUcontext ctx) {
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  unsigned long long id = 0;
  if (cu->cuCtxGetId && cu->cuCtxGetId(ctx, &id) != CUDA_SUCCESS) id = 0;
  return id;
}

int kvik_memory_kind_of(const void *ptr) {
  kvik__memory mem;
  int rc = kvik__memory_classify("kvik_memory_kind_of", ptr, &mem);
  return rc < 0 ? rc : (int)mem.kind;
}

int kvik_cuda_stream_synchronize(void *stream, const void *ptr) {
  static const char fn[] = "kvik_cuda_stream_synchronize";
  const kvik__cuda_api *cu = kvik__cuda(fn);
  if (!cu) return KVIK_ECUDA_UNAVAILABLE;
  kvik__memory mem = {KVIK_MEMORY_HOST, NULL};
  int rc = ptr ? kvik__memory_classify(fn, ptr, &mem) : 0;
  if (rc < 0) return rc;
  /* The default-stream handles mean the default stream of the current context: make it the
   * memory's, whose producer the caller waits for. */
  CUcontext ctx = kvik__memory_on_device(&mem) ? mem.ctx : NULL;
  if (ctx && (rc = kvik__context_push(fn, ctx)) < 0) return rc;
  rc = kvik__cuda_check(cu->cuStreamSynchronize((CUstream)stream), fn, "cuStreamSynchronize");
  if (ctx) kvik__context_pop();
  return rc;
}

int kvik__context_push_any(const char *fn, const kvik__cuda_api *cu) {
  CUcontext ctx = NULL;
  int rc = kvik__cuda_check(cu->cuCtxGetCurrent(&ctx), fn, "cuCtxGetCurrent");
  if (rc == 0 && !ctx) rc = kvik__primary_context(fn, 0, &ctx);
  return rc < 0 ? rc : kvik__context_push(fn, ctx);
}

int kvik_host_pin(void *buf, size_t size) {
  static const char fn[] = "kvik_host_pin";
  if (!buf || size == 0) return kvik__fail(-EINVAL, "%s(%p, %zu): empty range", fn, buf, size);
  const kvik__cuda_api *cu = kvik__cuda(fn);
  if (!cu) return KVIK_ECUDA_UNAVAILABLE;
  int rc = kvik__context_push_any(fn, cu);
  if (rc < 0) return rc;
  rc = kvik__cuda_check(cu->cuMemHostRegister(buf, size, CU_MEMHOSTREGISTER_PORTABLE), fn,
                        "cuMemHostRegister");
  kvik__context_pop();
  return rc;
}

int kvik_host_unpin(void *buf) {
  static const char fn[] = "kvik_host_unpin";
  if (!buf) return kvik__fail(-EINVAL, "%s: NULL buffer", fn);
  const kvik__cuda_api *cu = kvik__cuda(fn);
  if (!cu) return KVIK_ECUDA_UNAVAILABLE;
  int rc = kvik__context_push_any(fn, cu);
  if (rc < 0) return rc;
  rc = kvik__cuda_check(cu->cuMemHostUnregister(buf), fn, "cuMemHostUnregister");
  kvik__context_pop();
  return rc;
}
