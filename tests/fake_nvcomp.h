/* A fake nvCOMP 6 (batched GPU compression) for machines without a GPU: tests/fake_nvcomp.c,
 * built as <build>/tests/fake_nvcomp/libnvcomp.so.6. Tests that put that folder on
 * LD_LIBRARY_PATH, beside the fake CUDA driver's (fake_cuda.h), make kvik's
 * dlopen("libnvcomp.so.6") load it (tests/CMakeLists.txt: KVIK_FAKE_NVCOMP_ENV).
 *
 * It exports every function of src/nvcomp_abi.h under its real symbol and does the work on the
 * CPU with the standard libraries, so that its output is the real formats' and data from any
 * other implementation decodes:
 *   Zstd      zstd frames (libzstd), with the content size in the frame header
 *   LZ4       raw LZ4 blocks (liblz4: LZ4_compress_default, LZ4_decompress_safe)
 *   Snappy    raw Snappy (libsnappy's C API)
 *   Deflate   raw deflate (zlib, windowBits -15)
 *   Gzip      gzip members (zlib, windowBits 31), compression and decompression, as nvCOMP 6
 *             offers both
 * A format whose library was missing when the fake was configured is left out: its symbols are
 * absent, which kvik's loader takes as the format not being offered (CMake says which at
 * configure time). GDeflate, Cascaded, Bitcomp and ANS have no standard CPU counterpart: their
 * symbols exist and every call returns nvcompErrorNotSupported.
 *
 * What it models, on nvCOMP 6's contract (nvcomp/<format>.h):
 *  - The batched functions run in stream order on the fake CUDA driver's stream, as that
 *    driver's own work (fake_cuda_launch_driver_work): they read the pointer and size arrays,
 *    the chunks and write the outputs, sizes and statuses only when the stream reaches them,
 *    after FAKE_NVCOMP_DELAY_US microseconds (default 200), so that a caller who reads results
 *    before synchronizing, or frees or reuses an input too early, sees wrong data. Device,
 *    managed, pinned and registered memory all work (through fake_cuda_host_view, which also
 *    covers memory freed by cuMemFreeAsync after the call, on the same stream). Any other pointer
 *    (pageable host memory, a range past the end of its allocation, an output smaller than
 *    ...CompressGetMaxOutputChunkSize for compression, temp_bytes beyond the temp allocation) is
 *    a bug the real GPU would fault on: the fake prints "fake_nvcomp: <symbol>: ..." and aborts.
 *  - Per-chunk results: each chunk gets its status and size; one bad chunk leaves the others
 *    alone. Corrupt or truncated input, or an output buffer too small for the chunk, gives
 *    nvcompErrorCannotDecompress with actual size 0 (the real library's status for both). A
 *    chunk pointer not aligned to the format's requirement gives nvcompErrorAlignment and size 0
 *    (the real library's behaviour there is undefined). A compression input larger than
 *    max_uncompressed_chunk_bytes gives nvcompErrorInvalidValue. GetDecompressSizeAsync writes
 *    0 for a chunk it cannot parse (and for a zstd frame without its content size).
 *  - Host-side checks, returned at once with nothing queued: a NULL required array
 *    (device_statuses and device_uncompressed_chunk_bytes of decompression may be NULL),
 *    num_chunks 0 with non-NULL arrays is accepted and queues nothing; option bytes beyond the
 *    format's fields not zero, or a field out of range -> nvcompErrorInvalidValue; LZ4
 *    bitshuffle -> nvcompErrorNotSupported; max_uncompressed_chunk_bytes above the format's
 *    maximum -> nvcompErrorChunkSizeTooLarge; temp_bytes below the temp-size query's answer, or
 *    a NULL temp pointer where it is not 0 -> nvcompErrorInvalidValue; a temp pointer not
 *    aligned -> nvcompErrorAlignment; the fake CUDA driver not loaded, or a stream it refuses
 *    (unknown, or a default stream without a current context) -> nvcompErrorCudaError.
 *  - Temp sizes: 0 for Snappy (so callers meet a zero-byte temp), else 1 KiB + 64 bytes per
 *    chunk. Alignments: the format's nvcomp<Format>Required(De)CompressionAlignment for input,
 *    output and temp. Max output: the CPU library's bound (ZSTD_compressBound, LZ4_compressBound,
 *    snappy_max_compressed_length, zlib's compressBound, + 18 for gzip's header and trailer).
 *  - nvcompGetProperties: version 6000 (6.0.0) unless FAKE_NVCOMP_VERSION says otherwise (read
 *    at each call), cudart_version 13000. nvcompGetStatusString: a text for every status.
 *
 * The control API below is exported too. Tests find it with dlsym() on the handle of
 * "libnvcomp.so.6", so that the same test can run against the real library, where it is absent.
 * Every control function is thread-safe and may be called at any time. */
#ifndef KVIK_TESTS_FAKE_NVCOMP_H
#define KVIK_TESTS_FAKE_NVCOMP_H

#include <stddef.h>

/* Arm a failure of the function exported as `symbol` ("nvcompBatchedZstdDecompressAsync", ...):
 * its nth next call (1 = the very next; calls by any thread count) returns `status` at once,
 * queuing nothing; nth 0 fails every call until fake_nvcomp_reset(). nvcompGetStatusString
 * cannot fail. An unknown symbol, nth < 0 or status 0 is a bug in the test: the fake prints it
 * and aborts. */
void fake_nvcomp_fail(const char *symbol, int nth, int status);

/* Arm a chunk failure of the batched function exported as `symbol` (one of the ...Async ones):
 * its nth next call (1 = the very next) runs, but chunk number `chunk` of that batch reports
 * `status` and size 0, leaving its output untouched, while every other chunk runs as usual
 * (GetDecompressSizeAsync, which has no statuses, writes size 0). A chunk past the end of the
 * batch fails nothing. Bugs in the test die as with fake_nvcomp_fail. */
void fake_nvcomp_fail_chunk(const char *symbol, int nth, size_t chunk, int status);

/* A `status` for fake_nvcomp_fail_chunk: the chunk reports success with a size one past its
 * output's capacity, output untouched. The real nvCOMP 6 did so on an H100 for zstd, LZ4 and
 * Snappy chunks whose output was too small (its headers call bad input undefined behaviour). */
#define FAKE_NVCOMP_OVERSIZE (-1)

/* Calls of the function exported as `symbol` since the library was loaded or last reset, failed
 * ones included; "chunks" counts the chunks the batched functions processed. -1 for an unknown
 * name. */
long fake_nvcomp_calls(const char *symbol);

/* Live counts; -1 for an unknown name:
 *   "in_flight"  batches queued on a stream and not yet finished */
long fake_nvcomp_live(const char *what);

/* Disarm every armed failure (of calls and of chunks) and zero the call counters. */
void fake_nvcomp_reset(void);

typedef void (*fake_nvcomp_fail_fn)(const char *symbol, int nth, int status);
typedef void (*fake_nvcomp_fail_chunk_fn)(const char *symbol, int nth, size_t chunk, int status);
typedef long (*fake_nvcomp_calls_fn)(const char *symbol);
typedef long (*fake_nvcomp_live_fn)(const char *what);
typedef void (*fake_nvcomp_reset_fn)(void);

#endif
