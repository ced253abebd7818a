/* Requests in the order of a CUDA stream: kvik_file_read_async and kvik_file_write_async. */
#ifndef KVIK_SRC_STREAM_IO_H
#define KVIK_SRC_STREAM_IO_H

#include <stdint.h>

#include "request.h"

/* Queue `req` on CUDA stream `stream` (a CUstream; NULL, 1 and 2 name the default streams): it
 * starts when the stream reaches it, and the stream goes on once it is done. `source_size` is
 * the source's size now, or negative where unknown: a read's bytes past it keep the buffer's own
 * bytes should the source still end there when the stream reaches the read. Returns 0 with the
 * future in *out, or a negative code with a message (then nothing was queued, and *out is NULL). */
int kvik__stream_request_start(kvik__request *req, void *stream, int64_t source_size,
                               kvik_future **out);

/* Give back the pinned memory of requests the streams have passed. Thread-safe; makes CUDA
 * calls. */
void kvik__stream_release_retired(void);

#endif
