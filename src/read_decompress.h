/* The fused read's one internal: its public call is kvik_file_read_decompress() (kvik.h). */
#ifndef KVIK_SRC_READ_DECOMPRESS_H
#define KVIK_SRC_READ_DECOMPRESS_H

#include <stddef.h>

/* For tests (linked with the static library): the batch budget in compressed bytes, so that a
 * few small chunks make many batches; 0 restores the default (128 MiB). Calls that start after
 * it read the new value. */
void kvik__read_decompress_budget(size_t bytes);

#endif
