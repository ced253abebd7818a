/* The header values a remote server sends that kvik parses itself (src/http.c): Content-Range,
 * which every 206 is checked against, and Content-Length, which gives the size at open. Input:
 * one byte choosing the header (even: Content-Range, odd: Content-Length), then its value as it
 * follows the colon, unterminated (ASan sees a read past it).
 *
 * Checks: never a crash. Content-Length: the value a reference parser gives (digits between
 * blanks, at most INT64_MAX), else -1. Content-Range: a failure leaves -1 everywhere; a success
 * names bytes (first <= last, last inside the size where known) or only a size ("*\/N"), and its
 * canonical form ("bytes A-B/N", "*" where unknown) parses again to the same three numbers. */
#include <stdint.h>

#include "../../src/http.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int blank(uint8_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Content-Length the plain way: trim, all digits, accumulate with an overflow check. */
static int64_t reference_length(const uint8_t *p, size_t n) {
  while (n > 0 && blank(*p)) p++, n--;
  while (n > 0 && blank(p[n - 1])) n--;
  if (n == 0) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return -1;
    if (v > ((uint64_t)INT64_MAX - (uint64_t)(p[i] - '0')) / 10) return -1;
    v = v * 10 + (uint64_t)(p[i] - '0');
  }
  return (int64_t)v;
}

static void check_content_range(const char *value, size_t n) {
  int64_t first = 0, last = 0, total = 0;
  int rc = kvik__http_parse_content_range(value, n, &first, &last, &total);
  FUZZ_CHECK(rc == 0 || rc == -1, "returned %d", rc);
  if (rc < 0) {
    FUZZ_CHECK(first == -1 && last == -1 && total == -1, "failed with %lld %lld %lld",
               (long long)first, (long long)last, (long long)total);
    return;
  }
  int only_size = first < 0 && last < 0 && total >= 0;
  int bytes = first >= 0 && last >= first && (total < 0 || last < total);
  FUZZ_CHECK(only_size || bytes, "parsed to %lld-%lld/%lld", (long long)first, (long long)last,
             (long long)total);
  char canonical[96], size_text[24] = "*";
  if (total >= 0) snprintf(size_text, sizeof size_text, "%lld", (long long)total);
  if (only_size) snprintf(canonical, sizeof canonical, "bytes */%s", size_text);
  else
    snprintf(canonical, sizeof canonical, "bytes %lld-%lld/%s", (long long)first, (long long)last,
             size_text);
  int64_t f2, l2, t2;
  int again = kvik__http_parse_content_range(canonical, strlen(canonical), &f2, &l2, &t2);
  FUZZ_CHECK(again == 0 && f2 == first && l2 == last && t2 == total, "\"%s\" does not parse back",
             canonical);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  /* A copy of exactly the value's size, so that ASan sees any read past it. */
  size_t n = size - 1;
  char *value = malloc(n ? n : 1);
  if (!value) abort();
  memcpy(value, data + 1, n);
  if (data[0] % 2 == 0) {
    check_content_range(value, n);
  } else {
    int64_t got = kvik__http_parse_length(value, n), want = reference_length(data + 1, n);
    FUZZ_CHECK(got == want, "%lld, the reference says %lld", (long long)got, (long long)want);
  }
  free(value);
  return 0;
}
