/* nvCOMP, loaded at run time (kvik.h, "Compression"): the loader, and nvCOMP's statuses as kvik
 * codes. The batched calls themselves are codec.c's. */
#ifndef KVIK_SRC_NVCOMP_H
#define KVIK_SRC_NVCOMP_H

#include <stddef.h>
#include <stdint.h>

#include "kvik.h"
#include "nvcomp_abi.h"

#define KVIK__NVCOMP_PATH_MAX 4096

typedef struct kvik__nvcomp_api {
#define KVIK__NVCOMP_LIB_MEMBER_(member, symbol, ret, params) ret(*member) params;
  KVIK__NVCOMP_FUNCTIONS(KVIK__NVCOMP_LIB_MEMBER_)
#undef KVIK__NVCOMP_LIB_MEMBER_
  kvik__nvcomp_format_api formats[KVIK_CODEC_COUNT];
  unsigned char present[KVIK_CODEC_COUNT]; /* 1 where every function of the format resolved */
  uint32_t version;                        /* nvcompGetProperties()'s */
  char path[KVIK__NVCOMP_PATH_MAX];        /* the file it was loaded from */
} kvik__nvcomp_api;

/* nvCOMP, loading it on the first call (KVIK_SETTING_NVCOMP_LIBRARY, else libnvcomp.so.6).
 * Returns 0 with the API in *api, or KVIK_ENVCOMP_UNAVAILABLE with a message "<fn>: nvCOMP
 * unavailable: <why>", or KVIK_ECONFIG. A failed dlopen() is tried again at the next call; any
 * other failure is final. `fn` names the public function called. Thread-safe. */
int kvik__nvcomp(const char *fn, const kvik__nvcomp_api **api);

/* nvCOMP's status as a kvik code (kvik.h, KVIK_ENVCOMP_BASE): 0 for nvcompSuccess. */
int kvik__nvcomp_code(int status);

/* A failed nvCOMP call as its kvik code, with a message "<fn>: <call>: <status text>". Returns 0
 * for nvcompSuccess. */
int kvik__nvcomp_check(kvik__nvcomp_status status, const char *fn, const char *call);

#endif
