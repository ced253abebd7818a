/* kvik's device memory pools (device_pool.h): one a device, made on first use, whose release
 * threshold follows KVIK_SETTING_NVCOMP_MEMORY; a change of the setting trims them at once. */
#define _GNU_SOURCE
#include "device_pool.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "init.h"
#include "settings.h"

#define MAX_DEVICES 64

typedef enum pool_state { UNTRIED, MADE, REFUSED } pool_state;

/* Stream-ordered allocation, in which pools exist too: CUDA 11.2 and later. */
static int stream_ordered(const kvik__cuda_api *cu) {
  return cu->cuMemAllocAsync && cu->cuMemFreeAsync;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  pool_state state;
  CUmemoryPool pool;
  int64_t threshold; /* the release threshold last set */
} pools[MAX_DEVICES];

/* The pool of `device`, made if need be, its threshold brought to the setting; NULL where the
 * driver makes none (then the caller takes the fallback; the refusal is final). */
static CUmemoryPool pool_of(const kvik__cuda_api *cu, CUdevice device) {
  if (!stream_ordered(cu) || !cu->cuMemPoolCreate || !cu->cuMemPoolSetAttribute ||
      !cu->cuMemAllocFromPoolAsync || device < 0 || device >= MAX_DEVICES)
    return NULL;
  int64_t keep = kvik__setting(KVIK_SETTING_NVCOMP_MEMORY);
  pthread_mutex_lock(&lock);
  if (pools[device].state == UNTRIED) {
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = device;
    int made = cu->cuMemPoolCreate(&pools[device].pool, &props) == CUDA_SUCCESS;
    pools[device].state = made ? MADE : REFUSED;
    pools[device].threshold = -1;
  }
  CUmemoryPool pool = pools[device].state == MADE ? pools[device].pool : NULL;
  if (pool && pools[device].threshold != keep) {
    uint64_t value = (uint64_t)keep;
    if (cu->cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value) == CUDA_SUCCESS)
      pools[device].threshold = keep;
  }
  pthread_mutex_unlock(&lock);
  return pool;
}

/* The setting's watcher: each pool keeps `keep` bytes from now on, and gives back at once what it
 * holds above that and no work uses. A pool was made with CUDA loaded, so the driver is only
 * asked for where there is one (in a child after fork() it answers NULL: the pools are the
 * parent's). */
static int keep_changed(int64_t keep) {
  pthread_mutex_lock(&lock);
  for (int d = 0; d < MAX_DEVICES; d++) {
    const kvik__cuda_api *cu = pools[d].state == MADE ? kvik__cuda_if_present() : NULL;
    if (!cu) continue;
    uint64_t value = (uint64_t)keep;
    if (cu->cuMemPoolSetAttribute(pools[d].pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &value) ==
        CUDA_SUCCESS)
      pools[d].threshold = keep;
    if (cu->cuMemPoolTrimTo) cu->cuMemPoolTrimTo(pools[d].pool, (size_t)keep);
  }
  pthread_mutex_unlock(&lock);
  return 0;
}

static void fork_prepare(void) { pthread_mutex_lock(&lock); }

static void fork_parent(void) { pthread_mutex_unlock(&lock); }

/* The child has no CUDA (cuda.h): the pools stay the parent's, and no call reaches them. */
static void fork_child(void) { pthread_mutex_init(&lock, NULL); }

KVIK__ON_LOAD(install_hooks) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_DEVICE_POOL, &handlers);
  kvik__setting_watch(KVIK_SETTING_NVCOMP_MEMORY, keep_changed);
}

int kvik__device_pool_alloc(const char *fn, const kvik__cuda_api *cu, size_t bytes, CUstream stream,
                            CUdeviceptr *d) {
  CUdevice device;
  int rc = kvik__cuda_check(cu->cuCtxGetDevice(&device), fn, "cuCtxGetDevice");
  if (rc < 0) return rc;
  CUmemoryPool pool = pool_of(cu, device);
  if (pool)
    return kvik__cuda_check(cu->cuMemAllocFromPoolAsync(d, bytes, pool, stream), fn,
                            "cuMemAllocFromPoolAsync");
  if (stream_ordered(cu))
    return kvik__cuda_check(cu->cuMemAllocAsync(d, bytes, stream), fn, "cuMemAllocAsync");
  return kvik__cuda_check(cu->cuMemAlloc(d, bytes), fn, "cuMemAlloc");
}

int kvik__device_pool_free(const char *fn, const kvik__cuda_api *cu, CUdeviceptr d,
                           CUstream stream) {
  if (stream_ordered(cu))
    return kvik__cuda_check(cu->cuMemFreeAsync(d, stream), fn, "cuMemFreeAsync");
  int rc = kvik__cuda_check(cu->cuStreamSynchronize(stream), fn, "cuStreamSynchronize");
  return rc < 0 ? rc : kvik__cuda_check(cu->cuMemFree(d), fn, "cuMemFree");
}
