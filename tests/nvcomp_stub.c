/* A libnvcomp.so.6 with the library-wide functions and zstd's batched functions only, every one
 * of which refuses (nvcompErrorNotSupported): test_nvcomp loads it to see that a library lacking
 * a format's functions disables that format only. */
#include "../src/nvcomp_abi.h"

#define STUB_EXPORT __attribute__((visibility("default")))

STUB_EXPORT kvik__nvcomp_status nvcompGetProperties(kvik__nvcomp_properties *properties);
STUB_EXPORT const char *nvcompGetStatusString(kvik__nvcomp_status status);

STUB_EXPORT kvik__nvcomp_status nvcompGetProperties(kvik__nvcomp_properties *properties) {
  properties->version = 6000;
  properties->cudart_version = 13000;
  return KVIK__nvcompSuccess;
}

STUB_EXPORT const char *nvcompGetStatusString(kvik__nvcomp_status status) {
  return status == KVIK__nvcompSuccess ? "success" : "error";
}

/* nvcompBatchedZstd<suffix>, refusing whatever it is given. */
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define STUB_(member, suffix, decl)                                                                \
  STUB_EXPORT decl(stub_##member, kvik__nvcomp_status, kvik__nvcomp_opts)                          \
      __asm__("nvcompBatchedZstd" suffix);                                                         \
  STUB_EXPORT decl(stub_##member, kvik__nvcomp_status, kvik__nvcomp_opts) {                        \
    return KVIK__nvcompErrorNotSupported;                                                          \
  }
KVIK__NVCOMP_FORMAT_FUNCTIONS(STUB_)
