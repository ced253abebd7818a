/* Device memory for kvik's own work on the GPU (nvCOMP's arguments and temporary space, the
 * fused read's staging), taken and given back in stream order from a memory pool of kvik's own
 * on each device. The pool keeps up to KVIK_SETTING_NVCOMP_MEMORY bytes between calls, so that a
 * call does not map again what the last one freed: for nvCOMP's zstd, whose temporary space is
 * about three times the bytes it decodes, that mapping was a third of a call's time on an H100
 * (docs/design.md, "The fused read"). Memory in the pool serves only kvik: the setting bounds
 * what it holds from the rest of the process, and a change of it gives back at once what the
 * pools hold above the new value.
 *
 * Where the driver has no pools (before CUDA 11.2, or a device without them) the memory comes
 * from the device's default pool (cuMemAllocAsync), else from cuMemAlloc. */
#ifndef KVIK_SRC_DEVICE_POOL_H
#define KVIK_SRC_DEVICE_POOL_H

#include <stddef.h>

#include "cuda.h"

/* Store in *d `bytes` of device memory of the current context's device, usable by work queued on
 * `stream` from now on, and return 0; or return a code with a message naming `fn`. */
int kvik__device_pool_alloc(const char *fn, const kvik__cuda_api *cu, size_t bytes, CUstream stream,
                            CUdeviceptr *d);

/* Give back memory from kvik__device_pool_alloc() once the work queued on `stream` so far has
 * run. Returns 0 or a code with a message naming `fn`; the memory is then left allocated, as a
 * stream that failed may still use it. */
int kvik__device_pool_free(const char *fn, const kvik__cuda_api *cu, CUdeviceptr d,
                           CUstream stream);

#endif
