/* Run-time loading of optional libraries (CUDA driver, cuFile): the one place that calls
 * dlopen(), so the loader's reason for a failure is kept with the error. */
#ifndef KVIK_SRC_DL_H
#define KVIK_SRC_DL_H

#include <stddef.h>

/* dlopen(soname). Returns the handle, or NULL with the loader's reason in `why` (may be NULL). */
void *kvik__dl_open(const char *soname, char *why, size_t len);

#endif
