/* kvik_setting_parse: any text, for every setting, is accepted or refused with -EINVAL; what is
 * accepted formats to text that parses back to the same value and formats the same again.
 * Environment variables go through the same parser (parse_value, parse_status_list in
 * src/settings.c), so this covers them too (README.md). */
#include <errno.h>
#include <stdint.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int started;
  if (!started) {
    started = 1;
    if (kvik_setting_set(KVIK_SETTING_NUM_THREADS, 2) != 0) abort();
  }
  char *text = fuzz_string(data, size);
  for (int s = 0; s < KVIK_SETTING_COUNT; s++) {
    kvik_setting setting = (kvik_setting)s;
    char before[4096], first[4096], second[4096];
    int n0 = kvik_setting_format(setting, before, sizeof before);
    FUZZ_CHECK(n0 >= 0 && (size_t)n0 < sizeof before, "format(%s) = %d", kvik_setting_name(setting), n0);
    int rc = kvik_setting_parse(setting, text);
    if (rc != 0) {
      FUZZ_CHECK(rc == -EINVAL, "parse(%s, \"%s\") = %d", kvik_setting_name(setting), text, rc);
      char after[4096];
      int n = kvik_setting_format(setting, after, sizeof after);
      FUZZ_CHECK(n == n0 && strcmp(before, after) == 0, "refused parse(%s, \"%s\") changed the value: %s -> %s",
                 kvik_setting_name(setting), text, before, after);
      continue;
    }
    FUZZ_CHECK(kvik_setting_source_of(setting) == KVIK_SOURCE_API, "source of %s", kvik_setting_name(setting));
    int n1 = kvik_setting_format(setting, first, sizeof first);
    FUZZ_CHECK(n1 >= 0 && (size_t)n1 < sizeof first, "format(%s) = %d", kvik_setting_name(setting), n1);
    rc = kvik_setting_parse(setting, first);
    FUZZ_CHECK(rc == 0, "parse(%s, \"%s\") of formatted \"%s\" = %d", kvik_setting_name(setting), first, text, rc);
    int n2 = kvik_setting_format(setting, second, sizeof second);
    FUZZ_CHECK(n2 == n1 && strcmp(first, second) == 0, "round trip of %s: \"%s\" -> \"%s\" -> \"%s\"",
               kvik_setting_name(setting), text, first, second);
    /* The list and the path are read as text only; every other setting as a number too. */
    int text_only = setting == KVIK_SETTING_HTTP_STATUS_CODES || setting == KVIK_SETTING_NVCOMP_LIBRARY ||
                    setting == KVIK_SETTING_CURL_LIBRARY;
    int64_t v;
    FUZZ_CHECK(kvik_setting_get(setting, &v) == (text_only ? -EINVAL : 0), "get(%s)", kvik_setting_name(setting));
    /* A pool of up to 1024 threads per input would be slow: back to 2. */
    if (setting == KVIK_SETTING_NUM_THREADS) FUZZ_CHECK(kvik_setting_set(setting, 2) == 0, "num_threads back to 2");
  }
  free(text);
  return 0;
}
