/* What the GPUDirect Storage tests load themselves: the CUDA driver (to make and check device
 * memory; the fake of fake_cuda.c in CI, a real one on a GPU machine) and the fake cuFile's
 * control API (absent from a real cuFile). One definition per test program that includes it. */
#ifndef KVIK_TEST_CUDA_H
#define KVIK_TEST_CUDA_H

#include <dlfcn.h>

#include "test.h"
#include "../src/cuda.h"
#include "fake_cufile.h"

static struct {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree_v2)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH_v2)(void *, CUdeviceptr, size_t);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy_v2)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
} cu;

static struct {
  fake_cufile_fail_fn fail;
  fake_cufile_calls_fn calls;
  fake_cufile_live_fn live;
  fake_cufile_reset_fn reset;
} fake;

#define CU_OK(call)                                                                            \
  do {                                                                                         \
    CUresult r_ = (call);                                                                      \
    if (r_ != CUDA_SUCCESS) FAIL_AT("%s failed: CUDA error %d", #call, r_);                    \
  } while (0)

/* The fake CUDA driver's control function `name` (tests/fake_cuda.h), NULL for a real driver or
 * before one is loaded. */
static inline void *fake_cuda_symbol(const char *name) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return NULL;
  void *sym = dlsym(lib, name);
  dlclose(lib);
  return sym;
}

/* Loads the CUDA driver and makes device 0's primary context current; 0 when there is none. */
static inline int load_cuda(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) return 0;
#define RESOLVE_(name) *(void **)&cu.name = dlsym(h, #name);
  RESOLVE_(cuInit) RESOLVE_(cuDeviceGet) RESOLVE_(cuDevicePrimaryCtxRetain) RESOLVE_(cuCtxSetCurrent)
  RESOLVE_(cuMemAlloc_v2) RESOLVE_(cuMemFree_v2) RESOLVE_(cuMemcpyHtoD_v2) RESOLVE_(cuMemcpyDtoH_v2)
  RESOLVE_(cuStreamCreate) RESOLVE_(cuStreamDestroy_v2) RESOLVE_(cuStreamSynchronize)
#undef RESOLVE_
  if (!cu.cuInit || cu.cuInit(0) != CUDA_SUCCESS) return 0;
  CUdevice dev;
  CUcontext ctx;
  CU_OK(cu.cuDeviceGet(&dev, 0));
  CU_OK(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
  CU_OK(cu.cuCtxSetCurrent(ctx));
  return 1;
}

/* Device memory through the driver loaded above; every call must succeed. */
static inline char *device_alloc(size_t n) {
  CUdeviceptr p;
  CU_OK(cu.cuMemAlloc_v2(&p, n));
  return (char *)(uintptr_t)p;
}

static inline void device_free(char *p) { CU_OK(cu.cuMemFree_v2((CUdeviceptr)(uintptr_t)p)); }

static inline void to_device(char *dev, const void *host, size_t n) {
  CU_OK(cu.cuMemcpyHtoD_v2((CUdeviceptr)(uintptr_t)dev, host, n));
}

static inline void from_device(void *host, const char *dev, size_t n) {
  CU_OK(cu.cuMemcpyDtoH_v2(host, (CUdeviceptr)(uintptr_t)dev, n));
}

/* -1 when the loader finds no libcufile.so.0, 1 for the fake (its control API is then in
 * `fake`), 0 for a real cuFile. */
static inline int load_fake_cufile(void) {
  void *h = dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
  *(void **)&fake.fail = dlsym(h, "fake_cufile_fail");
  *(void **)&fake.calls = dlsym(h, "fake_cufile_calls");
  *(void **)&fake.live = dlsym(h, "fake_cufile_live");
  *(void **)&fake.reset = dlsym(h, "fake_cufile_reset");
  return fake.fail && fake.calls && fake.live && fake.reset;
}

#endif
