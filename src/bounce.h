/* Bounce buffers: page-aligned host memory for O_DIRECT transfers whose user buffer is not
 * aligned. Buffers are reused across calls; at most KVIK__BOUNCE_CACHE_BYTES of idle buffers
 * are kept, the rest are freed when returned. */
#ifndef KVIK_SRC_BOUNCE_H
#define KVIK_SRC_BOUNCE_H

#include <stddef.h>

#define KVIK__BOUNCE_CACHE_BYTES ((size_t)64 << 20)

/* A buffer of `size` bytes (a multiple of the page size), or NULL with a detail message. */
void *kvik__bounce_get(size_t size);

/* Give back a buffer from kvik__bounce_get(size). */
void kvik__bounce_put(void *buf, size_t size);

void kvik__bounce_atfork_prepare(void);
void kvik__bounce_atfork_parent(void);
void kvik__bounce_atfork_child(void);

#endif
