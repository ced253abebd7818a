/* The CUDA driver API, loaded at run time from libcuda.so.1 on first use.
 *
 * kvik is built without CUDA headers: the few types and constants it needs are declared here
 * with the values of the driver API (cuda.h), which are part of the driver's stable ABI. */
#ifndef KVIK_SRC_CUDA_H
#define KVIK_SRC_CUDA_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef void (*CUhostFn)(void *user_data);
typedef struct CUmemPoolHandle_st *CUmemoryPool;

/* cuda.h's CUmemPoolProps, 88 bytes: the members kvik sets, then those it leaves 0 (maxSize 0:
 * the pool may grow to the device's memory; usage; reserved). */
typedef struct CUmemPoolProps {
  int allocType;   /* CU_MEM_ALLOCATION_TYPE_PINNED */
  int handleTypes; /* 0: no shareable handles */
  struct {
    int type; /* CU_MEM_LOCATION_TYPE_DEVICE */
    int id;   /* the device's ordinal */
  } location;
  void *win32SecurityAttributes;
  unsigned char unset[64];
} CUmemPoolProps;

#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED 713
#define CUDA_ERROR_UNKNOWN 999

#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE 12

#define CU_MEMORYTYPE_HOST 1
#define CU_MEMORYTYPE_DEVICE 2
#define CU_MEMORYTYPE_UNIFIED 4

#define CU_STREAM_NON_BLOCKING 1
#define CU_EVENT_BLOCKING_SYNC 1
#define CU_EVENT_DISABLE_TIMING 2

/* The flags of kvik's events: a thread that waits for one sleeps. Under the driver's default
 * scheduling it would spin on its core until the event is reached; on an H100, threads spinning
 * on their copies cost 0.12 CPU s/GB of user time in first zero-copy reads on 16 threads (0.004
 * asleep, bench_zero_copy_first), for no gain in GB/s the runs could tell from their noise. */
#define KVIK__EVENT_FLAGS (CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING)

#define CU_MEMHOSTALLOC_PORTABLE 1
#define CU_MEMHOSTREGISTER_PORTABLE 1
#define CU_MEMHOSTREGISTER_READ_ONLY 8
#define CU_STREAM_WAIT_VALUE_GEQ 0
#define CU_STREAM_WRITE_VALUE_DEFAULT 0
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEMPOOL_ATTR_RELEASE_THRESHOLD 4 /* its value: a cuuint64_t */

/* Every driver function kvik calls: X(member, exported symbol, return type, parameters).
 * Versioned symbols (_v2) are the ones cuda.h maps the plain names to. */
#define KVIK__CUDA_FUNCTIONS(X)                                                                    \
  X(cuInit, "cuInit", CUresult, (unsigned flags))                                                  \
  X(cuDriverGetVersion, "cuDriverGetVersion", CUresult, (int *version))                            \
  X(cuGetErrorName, "cuGetErrorName", CUresult, (CUresult error, const char **name))               \
  X(cuGetErrorString, "cuGetErrorString", CUresult, (CUresult error, const char **text))           \
  X(cuDeviceGetCount, "cuDeviceGetCount", CUresult, (int *count))                                  \
  X(cuDeviceGet, "cuDeviceGet", CUresult, (CUdevice * device, int ordinal))                        \
  X(cuDeviceGetName, "cuDeviceGetName", CUresult, (char *name, int len, CUdevice device))          \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult,                                \
    (CUcontext * ctx, CUdevice device))                                                            \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", CUresult, (CUcontext * ctx))                               \
  X(cuCtxPushCurrent, "cuCtxPushCurrent_v2", CUresult, (CUcontext ctx))                            \
  X(cuCtxPopCurrent, "cuCtxPopCurrent_v2", CUresult, (CUcontext * ctx))                            \
  X(cuCtxGetDevice, "cuCtxGetDevice", CUresult, (CUdevice * device))                               \
  X(cuPointerGetAttributes, "cuPointerGetAttributes", CUresult,                                    \
    (unsigned count, int *attributes, void **data, CUdeviceptr ptr))                               \
  X(cuMemAlloc, "cuMemAlloc_v2", CUresult, (CUdeviceptr * ptr, size_t size))                       \
  X(cuMemFree, "cuMemFree_v2", CUresult, (CUdeviceptr ptr))                                        \
  X(cuMemHostAlloc, "cuMemHostAlloc", CUresult, (void **ptr, size_t size, unsigned flags))         \
  X(cuMemFreeHost, "cuMemFreeHost", CUresult, (void *ptr))                                         \
  X(cuMemHostRegister, "cuMemHostRegister_v2", CUresult, (void *ptr, size_t size, unsigned flags)) \
  X(cuMemHostUnregister, "cuMemHostUnregister", CUresult, (void *ptr))                             \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", CUresult,                                           \
    (CUdeviceptr dst, const void *src, size_t size, CUstream stream))                              \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", CUresult,                                           \
    (void *dst, CUdeviceptr src, size_t size, CUstream stream))                                    \
  X(cuMemsetD8Async, "cuMemsetD8Async", CUresult,                                                  \
    (CUdeviceptr dst, unsigned char value, size_t size, CUstream stream))                          \
  X(cuStreamCreate, "cuStreamCreate", CUresult, (CUstream * stream, unsigned flags))               \
  X(cuStreamDestroy, "cuStreamDestroy_v2", CUresult, (CUstream stream))                            \
  X(cuStreamSynchronize, "cuStreamSynchronize", CUresult, (CUstream stream))                       \
  X(cuStreamGetCtx, "cuStreamGetCtx", CUresult, (CUstream stream, CUcontext * ctx))                \
  X(cuLaunchHostFunc, "cuLaunchHostFunc", CUresult,                                                \
    (CUstream stream, CUhostFn fn, void *user_data))                                               \
  X(cuEventCreate, "cuEventCreate", CUresult, (CUevent * event, unsigned flags))                   \
  X(cuEventDestroy, "cuEventDestroy_v2", CUresult, (CUevent event))                                \
  X(cuEventRecord, "cuEventRecord", CUresult, (CUevent event, CUstream stream))                    \
  X(cuEventSynchronize, "cuEventSynchronize", CUresult, (CUevent event))

typedef struct kvik__cuda_api {
#define KVIK__CUDA_MEMBER_(member, symbol, ret, params) ret(*member) params;
  KVIK__CUDA_FUNCTIONS(KVIK__CUDA_MEMBER_)
#undef KVIK__CUDA_MEMBER_
  /* Optional (CUDA 12.0 and later; NULL before): a context's ID, never reused, unlike its
   * handle, which a context created after another was destroyed may get again. */
  CUresult (*cuCtxGetId)(CUcontext ctx, unsigned long long *id);
  /* Optional (CUDA 11.7 and later; NULL before): stream memory operations, by which a stream
   * waits for a value that a host thread writes, and writes one that a host thread waits for.
   * Under unified addressing (every 64-bit platform) pinned host memory has the same address on
   * the device, so a host pointer is their CUdeviceptr. */
  CUresult (*cuStreamWaitValue32)(CUstream stream, CUdeviceptr addr, unsigned value,
                                  unsigned flags);
  CUresult (*cuStreamWriteValue32)(CUstream stream, CUdeviceptr addr, unsigned value,
                                   unsigned flags);
  /* Optional (CUDA 11.2 and later; NULL before): the stream-ordered allocator. */
  CUresult (*cuMemAllocAsync)(CUdeviceptr *ptr, size_t size, CUstream stream);
  CUresult (*cuMemFreeAsync)(CUdeviceptr ptr, CUstream stream);
  /* Optional (CUDA 11.2 and later; NULL before): memory pools of one's own. */
  CUresult (*cuMemPoolCreate)(CUmemoryPool *pool, const CUmemPoolProps *props);
  CUresult (*cuMemPoolSetAttribute)(CUmemoryPool pool, int attribute, void *value);
  CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *ptr, size_t size, CUmemoryPool pool,
                                      CUstream stream);
  CUresult (*cuMemPoolTrimTo)(CUmemoryPool pool, size_t keep);
  /* Optional (NULL where the driver lacks them): where a device sits, for placing its pinned
   * memory and for kvik_cuda_device_get_properties(). */
  CUresult (*cuDeviceGetPCIBusId)(char *bus_id, int len, CUdevice device);
  CUresult (*cuDeviceTotalMem)(size_t *bytes, CUdevice device);
  /* Optional only for kvik's sake (every driver has it): whether an event was reached, without
   * waiting (CUDA_ERROR_NOT_READY while not). */
  CUresult (*cuEventQuery)(CUevent event);
} kvik__cuda_api;

/* The driver API, loading libcuda.so.1 and calling cuInit(0) on the first call. Returns NULL
 * with a detail message "<fn>: CUDA driver unavailable: <why>" (callers return
 * KVIK_ECUDA_UNAVAILABLE) when there is no driver or no device, or when this is a child process
 * forked while the parent had CUDA loaded (CUDA does not survive fork()). `fn` names the public
 * function called. Thread-safe. */
const kvik__cuda_api *kvik__cuda(const char *fn);

/* The driver API if CUDA memory can exist in this process, else NULL, without a message. CUDA
 * memory can only exist once someone (kvik, CuPy, PyTorch ...) loaded libcuda.so.1; until then
 * every pointer is host memory and the driver is not loaded just to find that out. */
const kvik__cuda_api *kvik__cuda_if_present(void);

/* For telling device from host memory: stores kvik__cuda_if_present() in *api and returns 0, or
 * returns KVIK_ECUDA_UNAVAILABLE with a message when libcuda.so.1 is in the process but could not
 * be loaded (then a pointer may be device memory that kvik cannot recognise). Thread-safe. */
int kvik__cuda_for_pointers(const char *fn, const kvik__cuda_api **api);

/* The NUMA node closest to CUDA device `device` (its PCI function's numa_node in sysfs), or -1
 * where it has none, the driver gives no bus id, or sysfs does not say. Looked up once per
 * device and process. Sets no message. Thread-safe. */
int kvik__device_numa_node(const kvik__cuda_api *cu, CUdevice device);

/* Turn a failed driver call into its kvik code (kvik__foreign_code(): that of
 * CUDA_ERROR_UNKNOWN for a result outside 1..999), with a message "<fn>: <call>: <error name>
 * (<error text>)". Returns 0 for CUDA_SUCCESS. */
int kvik__cuda_check(CUresult result, const char *fn, const char *call);

#endif
