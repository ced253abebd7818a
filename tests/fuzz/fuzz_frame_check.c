/* kvik__frame_check, the host check of compressed chunks before nvCOMP sees them (a file's
 * bytes, so outside input): any bytes, for every codec and several expected sizes, give 0,
 * -EBADMSG or KVIK_EDECODED_SIZE with a reason; it never reads outside the chunk (ASan). The
 * first byte picks the codec, the next four the expected size. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/frame_check.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 5) return 0;
  kvik_codec codec = (kvik_codec)(data[0] % KVIK_CODEC_COUNT);
  size_t expected = (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 |
                    (size_t)data[4] << 24;
  size -= 5;
  /* A copy of exactly the chunk's size, so that ASan sees any read past it. */
  unsigned char *chunk = malloc(size ? size : 1);
  if (!chunk) abort();
  memcpy(chunk, data + 5, size);
  char why[128];
  int rc = kvik__frame_check(codec, chunk, size, expected, why, sizeof why);
  FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == KVIK_EDECODED_SIZE, "%s: unexpected %d",
             kvik_codec_name(codec), rc);
  FUZZ_CHECK(rc == 0 || why[0] != '\0', "%s: %d without a reason", kvik_codec_name(codec), rc);
  free(chunk);
  return 0;
}
