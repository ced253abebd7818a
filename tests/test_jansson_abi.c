/* kvik declares the part of Jansson's ABI it uses itself (src/jansson.h), since it is built
 * without jansson.h and loads libjansson.so.4 at run time. This test, built only where the real
 * jansson.h is found (tests/CMakeLists.txt), compares the two: json_type's values, json_t's and
 * json_error_t's layout, the flag, json_int_t, and that each function kvik loads is Jansson's. It
 * prints each mismatch and exits 1 if there is any. */
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "../src/jansson.h"

static int checks, mismatches;

static void expect_equal(const char *what, long long kvik, long long real) {
  checks++;
  if (kvik == real) return;
  mismatches++;
  printf("MISMATCH %s: kvik %lld, jansson.h %lld\n", what, kvik, real);
}

#define SAME_MEMBER(kvik_type, real_type, kvik_member, real_member)                                \
  expect_equal("offset of " #real_type "." #real_member, offsetof(kvik_type, kvik_member),         \
               offsetof(real_type, real_member));                                                  \
  expect_equal("size of " #real_type "." #real_member, sizeof(((kvik_type *)0)->kvik_member),      \
               sizeof(((real_type *)0)->real_member))

int main(void) {
  expect_equal("JSON_OBJECT", KVIK__JSON_OBJECT, JSON_OBJECT);
  expect_equal("JSON_ARRAY", KVIK__JSON_ARRAY, JSON_ARRAY);
  expect_equal("JSON_STRING", KVIK__JSON_STRING, JSON_STRING);
  expect_equal("JSON_INTEGER", KVIK__JSON_INTEGER, JSON_INTEGER);
  expect_equal("JSON_REAL", KVIK__JSON_REAL, JSON_REAL);
  expect_equal("JSON_TRUE", KVIK__JSON_TRUE, JSON_TRUE);
  expect_equal("JSON_FALSE", KVIK__JSON_FALSE, JSON_FALSE);
  expect_equal("JSON_NULL", KVIK__JSON_NULL, JSON_NULL);
  expect_equal("JSON_REJECT_DUPLICATES", KVIK__JSON_REJECT_DUPLICATES, JSON_REJECT_DUPLICATES);
  expect_equal("JSON_ERROR_SOURCE_LENGTH", KVIK__JSON_ERROR_SOURCE_LENGTH,
               JSON_ERROR_SOURCE_LENGTH);
  expect_equal("JSON_ERROR_TEXT_LENGTH", KVIK__JSON_ERROR_TEXT_LENGTH, JSON_ERROR_TEXT_LENGTH);
  expect_equal("sizeof(json_int_t)", sizeof(kvik__json_int), sizeof(json_int_t));
  expect_equal("json_int_t is signed", (kvik__json_int)-1 < 0, (json_int_t)-1 < 0);
  SAME_MEMBER(kvik__json, json_t, type, type);
  SAME_MEMBER(kvik__json, json_t, refcount, refcount);
  expect_equal("sizeof(json_error_t)", sizeof(kvik__json_error), sizeof(json_error_t));
  SAME_MEMBER(kvik__json_error, json_error_t, line, line);
  SAME_MEMBER(kvik__json_error, json_error_t, column, column);
  SAME_MEMBER(kvik__json_error, json_error_t, position, position);
  SAME_MEMBER(kvik__json_error, json_error_t, source, source);
  SAME_MEMBER(kvik__json_error, json_error_t, text, text);
  /* Each function kvik loads is one jansson.h declares (this does not compile otherwise), and
   * the list is as long as kvik's. */
  const void *declared[] = {(const void *)json_loadb,
                            (const void *)json_delete,
                            (const void *)json_object_get,
                            (const void *)json_object_iter,
                            (const void *)json_object_iter_next,
                            (const void *)json_object_iter_key,
                            (const void *)json_object_iter_value,
                            (const void *)json_array_size,
                            (const void *)json_array_get,
                            (const void *)json_string_value,
                            (const void *)json_integer_value,
                            (const void *)jansson_version_str};
#define COUNT_(member, symbol, ret, params) +1
  expect_equal("functions", sizeof declared / sizeof declared[0],
               0 KVIK__JANSSON_FUNCTIONS(COUNT_));
#undef COUNT_
  printf("%d checks, %d mismatches\n", checks, mismatches);
  return mismatches ? 1 : 0;
}
