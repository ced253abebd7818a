/* The zero-copy read path: a file range mapped and registered read-only with CUDA, so that the
 * GPU copies straight out of the page cache (see KVIK_SETTING_ZERO_COPY_READ). */
#ifndef KVIK_SRC_ZERO_COPY_H
#define KVIK_SRC_ZERO_COPY_H

#include <stddef.h>
#include <stdint.h>

typedef struct kvik__mapped {
  void *addr;       /* the mapping, from a page boundary */
  size_t len;       /* its length, whole pages */
  const char *host; /* the byte at the requested offset */
} kvik__mapped;

/* Map [offset, offset + size) of `fd` and register it, if the setting allows, no other thread of
 * the process is on this path, and the range lies inside the file (and, for KVIK_AUTO, is
 * resident in the page cache). Returns 1 when done, 0 when the caller should take another path;
 * never fails otherwise and sets no message. A CUDA context must be current. */
int kvik__map_for_device(int fd, int64_t offset, size_t size, kvik__mapped *mapped);

/* Unregister and unmap, once no copy from the mapping can still be running. */
void kvik__unmap_for_device(kvik__mapped *mapped);

#endif
