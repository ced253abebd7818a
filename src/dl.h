/* Run-time loading of optional libraries (CUDA driver, cuFile, nvCOMP, libcurl, Jansson): the one
 * place that calls dlopen(), so the loader's reason for a failure is kept with the error.
 *
 * Each library is looked for by its soname (or the path its setting names), and so in the
 * dynamic loader's order: LD_LIBRARY_PATH, the cache of ldconfig (/etc/ld.so.cache), then the
 * default directories (/lib, /usr/lib and their multiarch and hardware-capability
 * subdirectories). A library absent from the cache costs one look in each of about 40
 * directories: each loader does it once per process, and on the first need only (see its
 * header), never when libkvik itself loads. */
#ifndef KVIK_SRC_DL_H
#define KVIK_SRC_DL_H

#include <stddef.h>

/* dlopen(soname). Returns the handle, or NULL with the loader's reason in `why` (may be NULL). */
void *kvik__dl_open(const char *soname, char *why, size_t len);

/* The path the loader found `handle` at (a dlopen() handle), else `file`, in `path` (cut to `len`
 * bytes with the NUL). */
void kvik__dl_path(void *handle, const char *file, char *path, size_t len);

#endif
