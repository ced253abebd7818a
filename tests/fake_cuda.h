/* A fake CUDA driver for machines without a GPU: tests/fake_cuda.c, built as
 * <build>/tests/fake_cuda/libcuda.so.1. Tests that put that folder on LD_LIBRARY_PATH make kvik's
 * dlopen("libcuda.so.1") load the fake instead of a real driver.
 *
 * What it models (the details are in fake_cuda.c):
 *  - FAKE_CUDA_DEVICES (default 1) devices; 0 makes cuInit fail with CUDA_ERROR_NO_DEVICE.
 *  - Device memory the CPU cannot touch: device pointers lie in a PROT_NONE mapping, so a CPU
 *    access crashes and pread()/pwrite() into one fails with EFAULT, as with a real GPU.
 *  - Streams that really are asynchronous: one worker thread each, running the stream's work in
 *    order, holding at most FAKE_CUDA_QUEUE_DEPTH operations (default 1024; 0: no bound) before a
 *    call that queues another waits, as the real driver's streams do. Every asynchronous copy
 *    waits FAKE_CUDA_COPY_DELAY_US microseconds (default 200) before it copies, so that a host
 *    buffer reused before its copy finished shows up as corrupted data.
 *  - A thread-local context stack, pointer attributes, pinned and registered host memory, events,
 *    stream memory operations (cuStreamWaitValue32_v2/WriteValue32_v2) on device or pinned memory.
 *  - The driver's rules that hang real programs: a host function may make no driver call
 *    (CUDA_ERROR_NOT_PERMITTED), and a call that waits for the device (cuMemFree, cuCtxSynchronize,
 *    cuModuleLoadData, cuModuleUnload) waits for all queued work while other driver calls wait for it.
 *
 *  - A PCI bus id per device (FAKE_CUDA_PCI_BUS_IDS, comma-separated, else ids no machine has),
 *    so that what kvik reads of /sys/bus/pci/devices can be tested.
 *
 * This header declares the control API the fake exports in addition to the driver API. Tests
 * look the functions up with dlsym() on the handle of "libcuda.so.1", so that the same test can
 * run against a real driver too, where they are absent:
 *
 *   void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
 *   fake_cuda_fail_fn fail = (fake_cuda_fail_fn)dlsym(cuda, "fake_cuda_fail");
 *   if (!fail) return TEST_SKIP;   // a real driver: fault injection is not available
 *
 * Each dlopen() of the same name returns the same loaded library, so the test and kvik see one
 * fake with one state. Every control function is thread-safe and may be called before cuInit. */
#ifndef KVIK_TESTS_FAKE_CUDA_H
#define KVIK_TESTS_FAKE_CUDA_H

#include "../src/cuda.h"

/* Arm a one-shot failure: the nth next call (1 = the very next) of the driver function exported
 * as `symbol` ("cuMemHostAlloc", "cuMemcpyHtoDAsync_v2", ...) returns `error` without doing
 * anything. Calls by any thread count. Several failures may be armed at once, also for the same
 * function. An unknown symbol or nth < 1 is a bug in the test: the fake prints it and aborts. */
void fake_cuda_fail(const char *symbol, int nth, int error);

/* How many times the driver function exported as `symbol` was called since the library was
 * loaded or fake_cuda_reset() was last called, failed calls included; -1 for an unknown symbol. */
long fake_cuda_calls(const char *symbol);

/* Live counts, for leak checks; -1 for an unknown name:
 *   "device"     allocations of cuMemAlloc, cuMemAllocAsync and cuMemAllocManaged not yet freed
 *   "pinned"     cuMemHostAlloc allocations not yet freed with cuMemFreeHost
 *   "registered" cuMemHostRegister ranges not yet unregistered (kvik's pinned bounce buffers
 *                among them)
 *   "read-only"  those of them registered with CU_MEMHOSTREGISTER_READ_ONLY: kvik's zero-copy
 *                registrations of the page cache
 *   "streams"    streams made with cuStreamCreate and not destroyed (the default streams the fake
 *                makes on demand are not counted)
 *   "events"     events made with cuEventCreate and not destroyed
 *   "contexts"   contexts made with cuCtxCreate and not destroyed
 *   "primary"    cuDevicePrimaryCtxRetain calls not yet matched by a release, over all devices
 *   "pools"      memory pools made with cuMemPoolCreate and not destroyed */
long fake_cuda_live(const char *what);

/* The release threshold most recently set on any memory pool (cuMemPoolSetAttribute), 0 if none
 * was. */
unsigned long long fake_cuda_pool_threshold(void);

/* Disarm every armed failure and zero the call counters. Live counts are left as they are. */
void fake_cuda_reset(void);

/* Make every later read-only cuMemHostRegister (kvik's zero-copy registrations of the page cache)
 * sleep `us` microseconds first (0, the default: no sleep), as a real driver takes milliseconds
 * to register tens of MiB: other threads then run while one registers. Other registrations (kvik's
 * pinned bounce buffers, made once and kept) take no time. */
void fake_cuda_slow_registration(long us);

/* Host-to-device copy calls made while a thread was in a read-only cuMemHostRegister, since the
 * library was loaded or fake_cuda_reset() was last called. On a real driver such a call can wait
 * for the registration to end (bench_zero_copy_probe step 6). */
long fake_cuda_copies_beside_registration(void);

/* cuMemHostRegister calls with CU_MEMHOSTREGISTER_READ_ONLY (kvik's zero-copy registrations),
 * failed ones included, since the library was loaded or fake_cuda_reset() was last called. */
long fake_cuda_read_only_registrations(void);

/* cuEventSynchronize calls on events made without CU_EVENT_BLOCKING_SYNC, since the library was
 * loaded or fake_cuda_reset() was last called: on a real driver such a waiter spins on its core
 * until the event is reached. */
long fake_cuda_spinning_waits(void);

/* Asynchronous copies and fills on streams of device `device`'s contexts (0 to 63) wait, from
 * the next one a stream runs, until the device's hold is lifted (hold 0): a device that stalls,
 * to show that work for other devices goes on meanwhile. Calls that wait for the device
 * (cuMemFree ...) wait for the held copies too. */
void fake_cuda_hold_copies(int device, int hold);

/* Asynchronous copies queued, since the library was loaded or fake_cuda_reset() was last called,
 * between a device and page-locked host memory (pinned or registered) that was allocated or
 * registered while a context of another device was current: a bounce buffer of one device used
 * for another. Copies of pageable memory are not counted. */
long fake_cuda_cross_device_copies(void);

/* Queue `fn` on `stream` as work of the driver's own, such as cuFile's transfers: unlike a host
 * function of cuLaunchHostFunc, it may call the driver, and its calls never wait for a call that
 * waits for the device (which waits for it). */
CUresult fake_cuda_launch_driver_work(CUstream stream, CUhostFn fn, void *user_data);

/* For another fake library's work on a stream (such as fake_nvcomp's batches, queued with
 * fake_cuda_launch_driver_work): the address at which the CPU may read and write
 * [ptr, ptr + size), if that range lies inside one device, pool or managed allocation or one
 * pinned or registered host range; NULL otherwise (pageable host memory, a range past the end
 * of its allocation). An allocation freed by cuMemFreeAsync still has its view until its stream
 * reaches the free, so that work queued before the free may use it, as on a real GPU. The view
 * stays valid while the memory does: a driver work function may use it until it returns. */
void *fake_cuda_host_view(CUdeviceptr ptr, size_t size);

typedef void (*fake_cuda_fail_fn)(const char *symbol, int nth, int error);
typedef long (*fake_cuda_calls_fn)(const char *symbol);
typedef long (*fake_cuda_live_fn)(const char *what);
typedef void (*fake_cuda_reset_fn)(void);
typedef void (*fake_cuda_slow_registration_fn)(long us);
typedef long (*fake_cuda_copies_beside_registration_fn)(void);
typedef long (*fake_cuda_spinning_waits_fn)(void);
typedef long (*fake_cuda_read_only_registrations_fn)(void);
typedef void *(*fake_cuda_host_view_fn)(CUdeviceptr ptr, size_t size);
typedef void (*fake_cuda_hold_copies_fn)(int device, int hold);
typedef long (*fake_cuda_cross_device_copies_fn)(void);

/* Driver API constants beyond those kvik itself uses (src/cuda.h), with the values of the real
 * cuda.h. Guarded so that src/cuda.h may define any of them later. */
typedef struct CUmod_st *CUmodule;

/* The driver functions the fake exports beyond those kvik calls (src/cuda.h), in the same form:
 * X(member, exported symbol, return type, parameters). */
#define FAKE_CUDA_EXTRA_FUNCTIONS(X)                                                             \
  X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", CUresult, (char *bus_id, int len, CUdevice dev)) \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", CUresult, (size_t * bytes, CUdevice device))        \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", CUresult, (CUdevice device))     \
  X(cuCtxCreate, "cuCtxCreate_v2", CUresult, (CUcontext * ctx, unsigned flags, CUdevice device)) \
  X(cuCtxDestroy, "cuCtxDestroy_v2", CUresult, (CUcontext ctx))                                 \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult, (CUcontext ctx))                              \
  X(cuCtxSynchronize, "cuCtxSynchronize", CUresult, (void))                                     \
  X(cuCtxGetId, "cuCtxGetId", CUresult, (CUcontext ctx, unsigned long long *id))                \
  X(cuMemAllocAsync, "cuMemAllocAsync", CUresult, (CUdeviceptr * ptr, size_t size, CUstream s)) \
  X(cuMemFreeAsync, "cuMemFreeAsync", CUresult, (CUdeviceptr ptr, CUstream stream))             \
  X(cuMemPoolCreate, "cuMemPoolCreate", CUresult,                                               \
    (CUmemoryPool * pool, const CUmemPoolProps *props))                                         \
  X(cuMemPoolDestroy, "cuMemPoolDestroy", CUresult, (CUmemoryPool pool))                        \
  X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", CUresult,                                   \
    (CUmemoryPool pool, int attribute, void *value))                                            \
  X(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", CUresult,                                   \
    (CUmemoryPool pool, int attribute, void *value))                                            \
  X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", CUresult,                               \
    (CUdeviceptr * ptr, size_t size, CUmemoryPool pool, CUstream stream))                       \
  X(cuMemPoolTrimTo, "cuMemPoolTrimTo", CUresult, (CUmemoryPool pool, size_t keep))             \
  X(cuMemAllocManaged, "cuMemAllocManaged", CUresult,                                           \
    (CUdeviceptr * ptr, size_t size, unsigned flags))                                           \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", CUresult, (CUdeviceptr dst, const void *src, size_t size)) \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", CUresult, (void *dst, CUdeviceptr src, size_t size))       \
  X(cuMemsetD8, "cuMemsetD8_v2", CUresult, (CUdeviceptr dst, unsigned char value, size_t size)) \
  X(cuStreamQuery, "cuStreamQuery", CUresult, (CUstream stream))                                \
  X(cuEventQuery, "cuEventQuery", CUresult, (CUevent event))                                    \
  X(cuStreamWaitValue32, "cuStreamWaitValue32_v2", CUresult,                                    \
    (CUstream stream, CUdeviceptr addr, unsigned value, unsigned flags))                        \
  X(cuStreamWriteValue32, "cuStreamWriteValue32_v2", CUresult,                                  \
    (CUstream stream, CUdeviceptr addr, unsigned value, unsigned flags))                        \
  X(cuModuleLoadData, "cuModuleLoadData", CUresult, (CUmodule * module, const void *image))     \
  X(cuModuleUnload, "cuModuleUnload", CUresult, (CUmodule module))

#ifndef CUDA_ERROR_INVALID_VALUE
#define CUDA_ERROR_INVALID_VALUE 1
#endif
#ifndef CUDA_ERROR_OUT_OF_MEMORY
#define CUDA_ERROR_OUT_OF_MEMORY 2
#endif
#ifndef CUDA_ERROR_NOT_INITIALIZED
#define CUDA_ERROR_NOT_INITIALIZED 3
#endif
#ifndef CUDA_ERROR_NO_DEVICE
#define CUDA_ERROR_NO_DEVICE 100
#endif
#ifndef CUDA_ERROR_INVALID_DEVICE
#define CUDA_ERROR_INVALID_DEVICE 101
#endif
#ifndef CUDA_ERROR_INVALID_CONTEXT
#define CUDA_ERROR_INVALID_CONTEXT 201
#endif
#ifndef CUDA_ERROR_INVALID_HANDLE
#define CUDA_ERROR_INVALID_HANDLE 400
#endif
#ifndef CUDA_ERROR_CONTEXT_IS_DESTROYED
#define CUDA_ERROR_CONTEXT_IS_DESTROYED 709
#endif
#ifndef CUDA_ERROR_NOT_PERMITTED
#define CUDA_ERROR_NOT_PERMITTED 800
#endif
#ifndef CUDA_ERROR_NOT_SUPPORTED
#define CUDA_ERROR_NOT_SUPPORTED 801
#endif
#ifndef CUDA_ERROR_UNKNOWN
#define CUDA_ERROR_UNKNOWN 999
#endif
#ifndef CU_STREAM_LEGACY
#define CU_STREAM_LEGACY ((CUstream)0x1)
#endif
#ifndef CU_STREAM_PER_THREAD
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#endif
#ifndef CU_MEM_ATTACH_GLOBAL
#define CU_MEM_ATTACH_GLOBAL 1
#endif
#ifndef CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#endif
#ifndef CU_POINTER_ATTRIBUTE_RANGE_SIZE
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE 12
#endif

#endif
