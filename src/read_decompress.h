/* The fused read's one internal: its public call is kvik_file_read_decompress() (kvik.h). */
#ifndef KVIK_SRC_READ_DECOMPRESS_H
#define KVIK_SRC_READ_DECOMPRESS_H

#include <stddef.h>

/* For tests and bench/read_decompress.c (linked with the static library): the batch budget in
 * compressed bytes and in chunks, the read step in compressed bytes, and the steps read ahead
 * (at most 8; the pinned buffers are twice as many), so that a few small chunks make many batches
 * and steps; 0 restores a default (2 GiB, 1024 chunks, 8 MiB, 4; LZ4: 512 MiB, 1024, 64 MiB, 2).
 * Calls that start after it read the new values. */
void kvik__read_decompress_sizes(size_t budget, size_t chunks, size_t step, size_t ahead);

#endif
