/* Bounce buffers: page-aligned host memory that IO goes through when the user's buffer cannot
 * take it directly. Two kinds, each with a cache of idle buffers reused across calls:
 *  - aligned pageable memory, for O_DIRECT transfers whose user buffer is not aligned; at most
 *    KVIK__BOUNCE_CACHE_BYTES idle;
 *  - pinned (page-locked, CUDA-registered for every context) memory, for copies to and from the
 *    device: a cache per device, whose buffers lie on the device's NUMA node, and one for memory
 *    of no device in particular; at most KVIK_PINNED_CACHE_BYTES idle in each.
 * Buffers returned beyond the bound are freed. */
#ifndef KVIK_SRC_BOUNCE_H
#define KVIK_SRC_BOUNCE_H

#include <stddef.h>

#define KVIK__BOUNCE_CACHE_BYTES ((size_t)64 << 20)

/* Buffers are asked for in multiples of this (a power of two): an idle buffer holds the cache's
 * link to the next in its first bytes. */
#define KVIK__BOUNCE_GRAIN ((size_t)64)

/* An aligned host buffer of `size` bytes (a multiple of the page size), or NULL with a detail
 * message. */
void *kvik__bounce_get(size_t size);

/* Give back a buffer from kvik__bounce_get(size). */
void kvik__bounce_put(void *buf, size_t size);

/* Store in *buf a pinned buffer of `size` bytes (a multiple of the page size) and return 0; or
 * return the failure's code (KVIK_ECUDA_UNAVAILABLE, a CUDA error code) with a detail message
 * naming `fn`, leaving *buf NULL. A CUDA context must be current on the calling thread. */
int kvik__pinned_get(const char *fn, size_t size, void **buf);

/* Give back a buffer from kvik__pinned_get(size). A CUDA context must be current. */
void kvik__pinned_put(void *buf, size_t size);

/* Devices with a pinned cache of their own; a device beyond shares kvik__pinned_get()'s. */
#define KVIK__PINNED_DEVICES 64

/* As kvik__pinned_get(), for copies to and from CUDA device `device` (its ordinal) only: from
 * the device's own cache, allocated on the NUMA node closest to the device where sysfs names
 * one (kvik__device_numa_node). A buffer of one device is never given for another. */
int kvik__device_pinned_get(const char *fn, int device, size_t size, void **buf);

/* Give back a buffer from kvik__device_pinned_get(device, size). A CUDA context must be
 * current. */
void kvik__device_pinned_put(int device, void *buf, size_t size);

#endif
