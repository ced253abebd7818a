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

#endif
