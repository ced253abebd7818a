/* nvCOMP 6 (GPU compression), loaded at run time from libnvcomp.so.6 on first need.
 *
 * kvik is built without nvcomp.h. The subset of nvCOMP's batched C API that it uses is declared
 * here under names of our own (so that tests/test_nvcomp_abi.c can include both headers and
 * compare every size, offset, value and function type against the real nvcomp.h), with the
 * layout of nvCOMP 6's C ABI on x86-64 and aarch64 Linux. tests/fake_nvcomp.c implements the same
 * declarations on the CPU, for tests on machines without a GPU.
 *
 * nvCOMP 6 only: nvCOMP 5 and earlier differ in the batched functions' parameters (decompression
 * options, alignment queries), so libnvcomp.so.5 is never loaded in its place.
 *
 * Every format offers the same eight batched functions, which differ only in the type of their
 * options argument (a 64-byte struct passed by value); see KVIK__NVCOMP_FORMATS. */
#ifndef KVIK_SRC_NVCOMP_ABI_H
#define KVIK_SRC_NVCOMP_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../include/kvik.h"

/* nvCOMP's cudaStream_t, the driver's CUstream: the same type as src/cuda.h's CUstream, spelled
 * without including it, so that the ABI test can include this header beside nvcomp.h. */
typedef struct CUstream_st *kvik__nvcomp_stream;

/* Every nvcompStatus_t: X(name, value, description). nvCOMP's descriptions, rephrased. */
#define KVIK__NVCOMP_STATUSES(X)                                                                   \
  X(nvcompSuccess, 0, "nvCOMP: success")                                                           \
  X(nvcompErrorInvalidValue, 10, "nvCOMP: invalid argument")                                       \
  X(nvcompErrorNotSupported, 11, "nvCOMP: not supported")                                          \
  X(nvcompErrorCannotDecompress, 12, "nvCOMP: corrupt or truncated compressed data")               \
  X(nvcompErrorBadChecksum, 13, "nvCOMP: checksum mismatch")                                       \
  X(nvcompErrorCannotVerifyChecksums, 14, "nvCOMP: checksums cannot be verified")                  \
  X(nvcompErrorOutputBufferTooSmall, 15, "nvCOMP: output buffer too small")                        \
  X(nvcompErrorWrongHeaderLength, 16, "nvCOMP: wrong header length")                               \
  X(nvcompErrorAlignment, 17, "nvCOMP: misaligned buffer")                                         \
  X(nvcompErrorChunkSizeTooLarge, 18, "nvCOMP: chunk too large for the format")                    \
  X(nvcompErrorCannotCompress, 19, "nvCOMP: cannot compress")                                      \
  X(nvcompErrorWrongInputLength, 20, "nvCOMP: wrong input length")                                 \
  X(nvcompErrorBatchSizeTooLarge, 21, "nvCOMP: batch too large")                                   \
  X(nvcompErrorSubChunkCountTooLarge, 22, "nvCOMP: too many sub-chunks")                           \
  X(nvcompErrorSubChunkCountTooSmall, 23, "nvCOMP: too few sub-chunks")                            \
  X(nvcompErrorOutputBufferAlignmentTooSmall, 24, "nvCOMP: output buffer alignment too small")     \
  X(nvcompErrorCudaError, 1000, "nvCOMP: CUDA error")                                              \
  X(nvcompErrorInternal, 10000, "nvCOMP: internal error")

/* KVIK__nvcompSuccess and so on. nvcompStatus_t is a C enum: int-sized on both ABIs. */
typedef enum kvik__nvcomp_status {
#define KVIK__NVCOMP_ENUM_(name, value, text) KVIK__##name = value,
  KVIK__NVCOMP_STATUSES(KVIK__NVCOMP_ENUM_)
#undef KVIK__NVCOMP_ENUM_
} kvik__nvcomp_status;

/* nvcompType_t values kvik's default options use. */
#define KVIK__NVCOMP_TYPE_CHAR 0
#define KVIK__NVCOMP_TYPE_UCHAR 1
#define KVIK__NVCOMP_TYPE_UINT 5
#define KVIK__NVCOMP_TYPE_BITS 0xff

/* nvcompProperties_t. `version` is major * 1000 + minor * 100 + patch. */
typedef struct kvik__nvcomp_properties {
  uint32_t version;
  uint32_t cudart_version;
} kvik__nvcomp_properties;

/* nvcompAlignmentRequirements_t: the minimum alignment of each input, each output, and the
 * temporary buffer. */
typedef struct kvik__nvcomp_alignments {
  size_t input;
  size_t output;
  size_t temp;
} kvik__nvcomp_alignments;

/* The per-format options (nvcompBatched<Format>CompressOpts_t, ...DecompressOpts_t): each of
 * nvCOMP 6's is a 64-byte struct, aligned to 4 or 8, whose unused bytes must be zero. kvik passes
 * all of them as this one union, 64 bytes aligned to 8: on both ABIs a struct of more than 16
 * bytes goes by value in memory (x86-64: copied to an 8-byte-aligned stack slot; aarch64: copied,
 * and its address passed), so the callee sees the same 64 bytes. The named members are the real
 * layouts of the options whose defaults are not all zero (the ABI test checks their offsets);
 * every other format's default is 64 zero bytes. */
typedef union kvik__nvcomp_opts {
  unsigned char bytes[64];
  uint64_t align_;
  /* Deflate, gzip and GDeflate compression: algorithm 1 (high throughput) by default. */
  struct {
    int algorithm;
    char reserved[60];
  } deflate;
  /* nvcompCascadedCommonOpts_t, at the start of Cascaded compression's options. */
  struct {
    int data_type;
    int mode;
    uint64_t terminal_codec_flags;
    uint64_t coarse_grained_encoding_flags;
    uint64_t fine_grained_encoding_flags;
    uint8_t compression_level;
    char reserved[31];
  } cascaded_compress;
  /* Cascaded decompression: the backend, then the common options (8-aligned: at offset 8). */
  struct {
    int backend;
    struct {
      int data_type;
      int mode;
      uint64_t terminal_codec_flags;
      uint64_t coarse_grained_encoding_flags;
    } common;
    char reserved[32];
  } cascaded_decompress;
  struct {
    int algorithm;
    int data_type;
    double delta;
    int mode;
    char reserved[44];
  } bitcomp_compress;
  /* ANS decompression: the data type is NVCOMP_TYPE_BITS by default. */
  struct {
    int backend;
    int data_type;
    uint8_t max_sub_chunk_count;
    uint8_t states_per_lane;
    uint8_t skip_validate;
    char reserved[53];
  } ans_decompress;
} kvik__nvcomp_opts;

/* The batched functions of one format, as declarators: KVIK__NVCOMP_<F>(name, status, opts) is
 * `status name(...)`, with the format's options type `opts` (the ABI test instantiates them
 * with nvcompStatus_t and each real options type and compares with the real functions). All
 * pointers named device_* are device memory; everything else is host memory. */
#define KVIK__NVCOMP_COMPRESS_ALIGNMENTS(name, status, opts)                                       \
  status name(opts compress_opts, kvik__nvcomp_alignments *alignment_requirements)
#define KVIK__NVCOMP_COMPRESS_TEMP_SIZE(name, status, opts)                                        \
  status name(size_t num_chunks, size_t max_uncompressed_chunk_bytes, opts compress_opts,          \
              size_t *temp_bytes, size_t max_total_uncompressed_bytes, kvik__nvcomp_stream stream)
#define KVIK__NVCOMP_COMPRESS_MAX_OUTPUT(name, status, opts)                                       \
  status name(size_t max_uncompressed_chunk_bytes, opts compress_opts,                             \
              size_t *max_compressed_chunk_bytes)
#define KVIK__NVCOMP_COMPRESS_ASYNC(name, status, opts)                                            \
  status name(const void *const *device_uncompressed_chunk_ptrs,                                   \
              const size_t *device_uncompressed_chunk_bytes, size_t max_uncompressed_chunk_bytes,  \
              size_t num_chunks, void *device_temp_ptr, size_t temp_bytes,                         \
              void *const *device_compressed_chunk_ptrs, size_t *device_compressed_chunk_bytes,    \
              opts compress_opts, status *device_statuses, kvik__nvcomp_stream stream)
#define KVIK__NVCOMP_DECOMPRESS_ALIGNMENTS(name, status, opts)                                     \
  status name(opts decompress_opts, kvik__nvcomp_alignments *alignment_requirements)
#define KVIK__NVCOMP_DECOMPRESS_TEMP_SIZE(name, status, opts)                                      \
  status name(size_t num_chunks, size_t max_uncompressed_chunk_bytes, opts decompress_opts,        \
              size_t *temp_bytes, size_t max_total_uncompressed_bytes, kvik__nvcomp_stream stream)
/* Writes each chunk's decompressed size, read from its header, or 0 where it cannot. */
#define KVIK__NVCOMP_DECOMPRESS_SIZE_ASYNC(name, status, opts)                                     \
  status name(const void *const *device_compressed_chunk_ptrs,                                     \
              const size_t *device_compressed_chunk_bytes,                                         \
              size_t *device_uncompressed_chunk_bytes, size_t num_chunks,                          \
              kvik__nvcomp_stream stream)
/* device_uncompressed_buffer_bytes: each output buffer's capacity; device_uncompressed_chunk_bytes
 * (may be NULL): each chunk's actual decompressed size; device_statuses (may be NULL for a
 * faster path that skips validation: kvik always passes it). */
#define KVIK__NVCOMP_DECOMPRESS_ASYNC(name, status, opts)                                          \
  status name(                                                                                     \
      const void *const *device_compressed_chunk_ptrs,                                             \
      const size_t *device_compressed_chunk_bytes, const size_t *device_uncompressed_buffer_bytes, \
      size_t *device_uncompressed_chunk_bytes, size_t num_chunks, void *const device_temp_ptr,     \
      size_t temp_bytes, void *const *device_uncompressed_chunk_ptrs, opts decompress_opts,        \
      status *device_statuses, kvik__nvcomp_stream stream)

/* Every batched function of a format: X(member, symbol suffix, declarator macro). The symbol is
 * "nvcompBatched" <Format> <suffix>, e.g. nvcompBatchedZstdCompressAsync. */
#define KVIK__NVCOMP_FORMAT_FUNCTIONS(X)                                                           \
  X(compress_alignments, "CompressGetRequiredAlignments", KVIK__NVCOMP_COMPRESS_ALIGNMENTS)        \
  X(compress_temp_size, "CompressGetTempSize", KVIK__NVCOMP_COMPRESS_TEMP_SIZE)                    \
  X(compress_max_output, "CompressGetMaxOutputChunkSize", KVIK__NVCOMP_COMPRESS_MAX_OUTPUT)        \
  X(compress_async, "CompressAsync", KVIK__NVCOMP_COMPRESS_ASYNC)                                  \
  X(decompress_alignments, "DecompressGetRequiredAlignments", KVIK__NVCOMP_DECOMPRESS_ALIGNMENTS)  \
  X(decompress_temp_size, "DecompressGetTempSize", KVIK__NVCOMP_DECOMPRESS_TEMP_SIZE)              \
  X(decompress_size_async, "GetDecompressSizeAsync", KVIK__NVCOMP_DECOMPRESS_SIZE_ASYNC)           \
  X(decompress_async, "DecompressAsync", KVIK__NVCOMP_DECOMPRESS_ASYNC)

/* One format's functions, all present or the format is unavailable. */
typedef struct kvik__nvcomp_format_api {
#define KVIK__NVCOMP_MEMBER_(member, suffix, decl)                                                 \
  decl((*member), kvik__nvcomp_status, kvik__nvcomp_opts);
  KVIK__NVCOMP_FORMAT_FUNCTIONS(KVIK__NVCOMP_MEMBER_)
#undef KVIK__NVCOMP_MEMBER_
} kvik__nvcomp_format_api;

/* The formats, in the order of kvik.h's enum kvik_codec: X(codec, symbol infix, gpu_only).
 * gpu_only: no standard CPU implementation reads or writes the format (the fake library returns
 * nvcompErrorNotSupported for those). */
#define KVIK__NVCOMP_FORMATS(X)                                                                    \
  X(KVIK_CODEC_ZSTD, "Zstd", 0)                                                                    \
  X(KVIK_CODEC_LZ4, "LZ4", 0)                                                                      \
  X(KVIK_CODEC_SNAPPY, "Snappy", 0)                                                                \
  X(KVIK_CODEC_DEFLATE, "Deflate", 0)                                                              \
  X(KVIK_CODEC_GZIP, "Gzip", 0)                                                                    \
  X(KVIK_CODEC_GDEFLATE, "Gdeflate", 1)                                                            \
  X(KVIK_CODEC_CASCADED, "Cascaded", 1)                                                            \
  X(KVIK_CODEC_BITCOMP, "Bitcomp", 1)                                                              \
  X(KVIK_CODEC_ANS, "ANS", 1)

/* Library-wide functions: X(member, symbol, return type, parameters). */
#define KVIK__NVCOMP_FUNCTIONS(X)                                                                  \
  X(get_properties, "nvcompGetProperties", kvik__nvcomp_status,                                    \
    (kvik__nvcomp_properties * properties))                                                        \
  X(get_status_string, "nvcompGetStatusString", const char *, (kvik__nvcomp_status status))

#define KVIK__NVCOMP_SONAME "libnvcomp.so.6"

/* The default options of a codec for compression (`compress` 1) or decompression: the bytes of
 * nvCOMP's nvcompBatched<Format>{Compress,Decompress}DefaultOpts (the ABI test compares them). */
static inline kvik__nvcomp_opts kvik__nvcomp_default_opts(kvik_codec codec, int compress) {
  kvik__nvcomp_opts o;
  memset(&o, 0, sizeof o);
  if (compress) {
    switch (codec) {
    case KVIK_CODEC_DEFLATE:
    case KVIK_CODEC_GZIP:
    case KVIK_CODEC_GDEFLATE: o.deflate.algorithm = 1; break;
    case KVIK_CODEC_CASCADED:
      o.cascaded_compress.data_type = KVIK__NVCOMP_TYPE_UINT;
      o.cascaded_compress.mode = 1;                        /* NVCOMP_CASCADED_MODE_ASYMMETRIC */
      o.cascaded_compress.terminal_codec_flags = 1;        /* ..._CASCADED_BITPACK */
      o.cascaded_compress.fine_grained_encoding_flags = 7; /* delta, RLE and FOR */
      o.cascaded_compress.compression_level = 3;
      break;
    case KVIK_CODEC_BITCOMP: o.bitcomp_compress.data_type = KVIK__NVCOMP_TYPE_UCHAR; break;
    default: break;
    }
    return o;
  }
  if (codec == KVIK_CODEC_CASCADED) o.cascaded_decompress.common.data_type = KVIK__NVCOMP_TYPE_BITS;
  if (codec == KVIK_CODEC_ANS) o.ans_decompress.data_type = KVIK__NVCOMP_TYPE_BITS;
  return o;
}

#endif
