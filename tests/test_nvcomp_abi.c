/* kvik declares nvCOMP's ABI itself (src/nvcomp_abi.h), since it is built without nvcomp.h. This
 * test, built only where the real nvcomp.h of nvCOMP 6 is found (tests/CMakeLists.txt,
 * KVIK_NVCOMP_INCLUDE_DIR), compares the two: every status value, the properties and alignment
 * structs member by member, each format's options (64 bytes, at most 8-aligned, so that kvik's
 * one union passes the same bytes; the members kvik sets at their real offsets; kvik's defaults
 * equal to nvCOMP's *DefaultOpts byte for byte), and every function's type, with the format's
 * real options type put in kvik's declarator. It prints each mismatch and exits 1 if there is
 * any, so that one run lists all that is wrong. */
#include <stdio.h>
#include <string.h>

#include <nvcomp.h>

#include "../src/nvcomp_abi.h"

static int checks, mismatches;

static void expect_equal(const char *what, long long kvik, long long real) {
  checks++;
  if (kvik == real) return;
  mismatches++;
  printf("MISMATCH %s: kvik %lld, nvcomp.h %lld\n", what, kvik, real);
}

static void expect_true(const char *what, int ok) {
  checks++;
  if (ok) return;
  mismatches++;
  printf("MISMATCH %s\n", what);
}

#define SAME_TYPE(a, b) __builtin_types_compatible_p(__typeof__(a), __typeof__(b))

static void check_statuses(void) {
#define CHECK_STATUS_(name, value, text) expect_equal(#name, KVIK__##name, name);
  KVIK__NVCOMP_STATUSES(CHECK_STATUS_)
#undef CHECK_STATUS_
  expect_equal("sizeof nvcompStatus_t", sizeof(kvik__nvcomp_status), sizeof(nvcompStatus_t));
  expect_equal("NVCOMP_TYPE_CHAR", KVIK__NVCOMP_TYPE_CHAR, NVCOMP_TYPE_CHAR);
  expect_equal("NVCOMP_TYPE_UCHAR", KVIK__NVCOMP_TYPE_UCHAR, NVCOMP_TYPE_UCHAR);
  expect_equal("NVCOMP_TYPE_UINT", KVIK__NVCOMP_TYPE_UINT, NVCOMP_TYPE_UINT);
  expect_equal("NVCOMP_TYPE_BITS", KVIK__NVCOMP_TYPE_BITS, NVCOMP_TYPE_BITS);
  expect_equal("KVIK__NVCOMP_SONAME major",
               KVIK__NVCOMP_SONAME[sizeof KVIK__NVCOMP_SONAME - 2] - '0', NVCOMP_VER_MAJOR);
}

#define CHECK_MEMBER(kt, rt, km, rm)                                                               \
  do {                                                                                             \
    expect_equal(#rt "." #rm " offset", offsetof(kt, km), offsetof(rt, rm));                       \
    expect_equal(#rt "." #rm " size", sizeof(((kt *)0)->km), sizeof(((rt *)0)->rm));               \
  } while (0)

static void check_structs(void) {
  expect_equal("sizeof nvcompProperties_t", sizeof(kvik__nvcomp_properties),
               sizeof(nvcompProperties_t));
  CHECK_MEMBER(kvik__nvcomp_properties, nvcompProperties_t, version, version);
  CHECK_MEMBER(kvik__nvcomp_properties, nvcompProperties_t, cudart_version, cudart_version);
  expect_equal("sizeof nvcompAlignmentRequirements_t", sizeof(kvik__nvcomp_alignments),
               sizeof(nvcompAlignmentRequirements_t));
  CHECK_MEMBER(kvik__nvcomp_alignments, nvcompAlignmentRequirements_t, input, input);
  CHECK_MEMBER(kvik__nvcomp_alignments, nvcompAlignmentRequirements_t, output, output);
  CHECK_MEMBER(kvik__nvcomp_alignments, nvcompAlignmentRequirements_t, temp, temp);
  expect_true("cudaStream_t is kvik's stream type", SAME_TYPE(cudaStream_t, kvik__nvcomp_stream));
  expect_equal("sizeof kvik__nvcomp_opts", sizeof(kvik__nvcomp_opts), 64);

  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedDeflateCompressOpts_t, deflate.algorithm, algorithm);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedGzipCompressOpts_t, deflate.algorithm, algorithm);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedGdeflateCompressOpts_t, deflate.algorithm,
               algorithm);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedCascadedCompressOpts_t, cascaded_compress.data_type,
               common_opts.data_type);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedCascadedCompressOpts_t, cascaded_compress.mode,
               common_opts.mode);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedCascadedCompressOpts_t,
               cascaded_compress.terminal_codec_flags, common_opts.terminal_codec_flags);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedCascadedCompressOpts_t,
               cascaded_compress.coarse_grained_encoding_flags,
               common_opts.coarse_grained_encoding_flags);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedCascadedCompressOpts_t,
               cascaded_compress.fine_grained_encoding_flags, fine_grained_encoding_flags);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedCascadedCompressOpts_t,
               cascaded_compress.compression_level, compression_level);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedCascadedDecompressOpts_t,
               cascaded_decompress.backend, backend);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedCascadedDecompressOpts_t,
               cascaded_decompress.common.data_type, common_opts.data_type);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedCascadedDecompressOpts_t,
               cascaded_decompress.common.mode, common_opts.mode);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedBitcompCompressOpts_t, bitcomp_compress.algorithm,
               algorithm);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedBitcompCompressOpts_t, bitcomp_compress.data_type,
               data_type);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedBitcompCompressOpts_t, bitcomp_compress.delta,
               delta);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedBitcompCompressOpts_t, bitcomp_compress.mode, mode);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedANSDecompressOpts_t, ans_decompress.backend,
               backend);
  CHECK_MEMBER(kvik__nvcomp_opts, nvcompBatchedANSDecompressOpts_t, ans_decompress.data_type,
               data_type);
}

static void check_defaults(kvik_codec codec, const char *name, const void *c, const void *d) {
  char what[128];
  kvik__nvcomp_opts k = kvik__nvcomp_default_opts(codec, 1);
  snprintf(what, sizeof what, "%s compression defaults", name);
  expect_true(what, memcmp(&k, c, 64) == 0);
  k = kvik__nvcomp_default_opts(codec, 0);
  snprintf(what, sizeof what, "%s decompression defaults", name);
  expect_true(what, memcmp(&k, d, 64) == 0);
}

/* One format: its options' size and alignment, its defaults, and the type of each function. */
#define CHECK_FORMAT(codec, Fmt)                                                                   \
  do {                                                                                             \
    expect_equal("sizeof " #Fmt "CompressOpts", sizeof(nvcompBatched##Fmt##CompressOpts_t), 64);  \
    expect_equal("sizeof " #Fmt "DecompressOpts", sizeof(nvcompBatched##Fmt##DecompressOpts_t),   \
                 64);                                                                              \
    expect_true("alignof " #Fmt "CompressOpts <= 8",                                               \
                _Alignof(nvcompBatched##Fmt##CompressOpts_t) <= 8);                                \
    expect_true("alignof " #Fmt "DecompressOpts <= 8",                                             \
                _Alignof(nvcompBatched##Fmt##DecompressOpts_t) <= 8);                              \
    check_defaults(codec, #Fmt, &nvcompBatched##Fmt##CompressDefaultOpts,                          \
                   &nvcompBatched##Fmt##DecompressDefaultOpts);                                    \
    KVIK__NVCOMP_COMPRESS_TEMP_SIZE((*cts), nvcompStatus_t, nvcompBatched##Fmt##CompressOpts_t);   \
    expect_true(#Fmt "CompressGetTempSize type",                                                   \
                SAME_TYPE(cts, &nvcompBatched##Fmt##CompressGetTempSize));                         \
    KVIK__NVCOMP_COMPRESS_MAX_OUTPUT((*cmo), nvcompStatus_t, nvcompBatched##Fmt##CompressOpts_t);  \
    expect_true(#Fmt "CompressGetMaxOutputChunkSize type",                                         \
                SAME_TYPE(cmo, &nvcompBatched##Fmt##CompressGetMaxOutputChunkSize));               \
    KVIK__NVCOMP_COMPRESS_ASYNC((*ca), nvcompStatus_t, nvcompBatched##Fmt##CompressOpts_t);        \
    expect_true(#Fmt "CompressAsync type", SAME_TYPE(ca, &nvcompBatched##Fmt##CompressAsync));     \
    KVIK__NVCOMP_DECOMPRESS_TEMP_SIZE((*dts), nvcompStatus_t,                                      \
                                      nvcompBatched##Fmt##DecompressOpts_t);                       \
    expect_true(#Fmt "DecompressGetTempSize type",                                                 \
                SAME_TYPE(dts, &nvcompBatched##Fmt##DecompressGetTempSize));                       \
    KVIK__NVCOMP_DECOMPRESS_SIZE_ASYNC((*dsa), nvcompStatus_t,                                     \
                                       nvcompBatched##Fmt##DecompressOpts_t);                      \
    expect_true(#Fmt "GetDecompressSizeAsync type",                                                \
                SAME_TYPE(dsa, &nvcompBatched##Fmt##GetDecompressSizeAsync));                      \
    KVIK__NVCOMP_DECOMPRESS_ASYNC((*da), nvcompStatus_t, nvcompBatched##Fmt##DecompressOpts_t);    \
    expect_true(#Fmt "DecompressAsync type",                                                       \
                SAME_TYPE(da, &nvcompBatched##Fmt##DecompressAsync));                              \
    /* kvik's alignment struct stands for nvCOMP's (compared above): the rest must match. */      \
    typedef nvcompStatus_t (*real_ca_t)(nvcompBatched##Fmt##CompressOpts_t,                        \
                                        nvcompAlignmentRequirements_t *);                          \
    typedef nvcompStatus_t (*real_da_t)(nvcompBatched##Fmt##DecompressOpts_t,                      \
                                        nvcompAlignmentRequirements_t *);                          \
    expect_true(#Fmt "CompressGetRequiredAlignments type",                                         \
                SAME_TYPE(real_ca_t, &nvcompBatched##Fmt##CompressGetRequiredAlignments));         \
    expect_true(#Fmt "DecompressGetRequiredAlignments type",                                       \
                SAME_TYPE(real_da_t, &nvcompBatched##Fmt##DecompressGetRequiredAlignments));       \
  } while (0)

static void check_library_functions(void) {
  typedef nvcompStatus_t (*props_t)(nvcompProperties_t *);
  expect_true("nvcompGetProperties type", SAME_TYPE(props_t, &nvcompGetProperties));
  typedef const char *(*string_t)(nvcompStatus_t);
  expect_true("nvcompGetStatusString type", SAME_TYPE(string_t, &nvcompGetStatusString));
}

int main(void) {
  check_statuses();
  check_structs();
  check_library_functions();
  CHECK_FORMAT(KVIK_CODEC_ZSTD, Zstd);
  CHECK_FORMAT(KVIK_CODEC_LZ4, LZ4);
  CHECK_FORMAT(KVIK_CODEC_SNAPPY, Snappy);
  CHECK_FORMAT(KVIK_CODEC_DEFLATE, Deflate);
  CHECK_FORMAT(KVIK_CODEC_GZIP, Gzip);
  CHECK_FORMAT(KVIK_CODEC_GDEFLATE, Gdeflate);
  CHECK_FORMAT(KVIK_CODEC_CASCADED, Cascaded);
  CHECK_FORMAT(KVIK_CODEC_BITCOMP, Bitcomp);
  CHECK_FORMAT(KVIK_CODEC_ANS, ANS);
  printf("%d checks, %d mismatches\n", checks, mismatches);
  return mismatches ? 1 : 0;
}
