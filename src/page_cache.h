/* How much of a file range is in the page cache, for the page-cache tools and the zero-copy
 * path's choice (KVIK_SETTING_ZERO_COPY_READ=auto). */
#ifndef KVIK_SRC_PAGE_CACHE_H
#define KVIK_SRC_PAGE_CACHE_H

#include <stddef.h>
#include <stdint.h>

/* Pages of [offset, offset + len) of the file `fd` in the page cache, or a negative errno.
 * `offset` is a multiple of the page size. `map`, if not NULL, maps that range read-only;
 * otherwise the range is mapped here when mincore(2) has to answer. Thread-safe. */
int64_t kvik__page_cache_pages(int fd, const char *map, int64_t offset, size_t len);

/* Whether nearly all (9 in 10) of the pages of [offset, offset + len) of the file `fd` are in
 * the page cache, for an AUTO_DIRECT_IO_READ read that chooses between O_DIRECT and the cache:
 * copying a page out of the cache is several times faster than reading it from the device (3-6x
 * on a 2-core VM, 14-20x on an H100 machine), so the read goes to the cache even where a tenth is
 * missing, and the pages it misses, which the read then brings into the cache, stay a tenth of
 * what O_DIRECT was asked to keep out. One
 * cachestat(2) call; where it counts none (or is refused) and `sample` is set, mincore(2) on a
 * mapping of the range, asked about a bounded sample of its pages (a few microseconds: worth it
 * for a task of megabytes, not for a read of a few pages). 0 also where neither can tell.
 * `len` > 0; thread-safe. */
int kvik__page_cache_mostly(int fd, int64_t offset, size_t len, int sample);

#endif
