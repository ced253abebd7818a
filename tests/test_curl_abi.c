/* kvik declares the part of libcurl's ABI it uses itself (src/curl.h), since it is built without
 * curl/curl.h and loads libcurl at run time. This test, built only where the real curl.h is found
 * (tests/CMakeLists.txt), compares the two: every CURLcode, option, info and flag number, the
 * layout of struct curl_slist and of the start of curl_version_info_data, and the callbacks'
 * types. It prints each mismatch and exits 1 if there is any, so that one run lists all that is
 * wrong.
 *
 * argv[1], optional: the path of src/curl.h, to check that every constant it defines outside
 * its X-macro lists is compared here (one added there later must be added to CONSTANTS below). */
#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

#include "../src/curl.h"

static int checks, mismatches;

static void expect_equal(const char *what, long long kvik, long long real) {
  checks++;
  if (kvik == real) return;
  mismatches++;
  printf("MISMATCH %s: kvik %lld, curl.h %lld\n", what, kvik, real);
}

static void expect_true(const char *what, int ok) {
  checks++;
  if (ok) return;
  mismatches++;
  printf("MISMATCH %s\n", what);
}

/* ---- numbers ---------------------------------------------------------------------------------- */

static void check_lists(void) {
#define CHECK_(name, value) expect_equal(#name, KVIK__##name, name);
  KVIK__CURL_CODES(CHECK_)
  KVIK__CURL_LONG_OPTIONS(CHECK_)
  KVIK__CURL_TEXT_OPTIONS(CHECK_)
  KVIK__CURL_DATA_OPTIONS(CHECK_)
  KVIK__CURL_LIST_OPTIONS(CHECK_)
  KVIK__CURL_FUNCTION_OPTIONS(CHECK_)
#undef CHECK_
}

/* The constants of src/curl.h outside its lists, each compared with curl.h's of the same name. */
#define CONSTANTS(X)                                                                                \
  X(CURLOPTTYPE_LONG) X(CURLOPTTYPE_OBJECTPOINT) X(CURLOPTTYPE_FUNCTIONPOINT) X(CURLINFO_LONG)     \
  X(CURLINFO_RESPONSE_CODE) X(CURLINFO_TEXT) X(CURLINFO_HEADER_IN) X(CURLINFO_HEADER_OUT)          \
  X(CURL_GLOBAL_DEFAULT) X(CURL_ERROR_SIZE)

/* Constants of src/curl.h that are kvik's own, not curl.h's. */
static const char *const own_constants[] = {"KVIK__CURL_SONAME", "KVIK__CURL_MIN_VERSION",
                                            "KVIK__CURL_MIN_VERSION_TEXT"};

static void check_constants(void) {
#define CHECK_CONSTANT_(name) expect_equal(#name, KVIK__##name, name);
  CONSTANTS(CHECK_CONSTANT_)
#undef CHECK_CONSTANT_
}

static int compared(const char *name) {
  static const char *const names[] = {
#define CONSTANT_NAME_(name) "KVIK__" #name,
      CONSTANTS(CONSTANT_NAME_)
#undef CONSTANT_NAME_
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(names[i], name) == 0) return 1;
  for (size_t i = 0; i < sizeof own_constants / sizeof own_constants[0]; i++)
    if (strcmp(own_constants[i], name) == 0) return 1;
  return 0;
}

/* Every "#define KVIK__CURL..." of src/curl.h that is not function-like (X-macro lists and their
 * helpers have a '(' right after the name, and are compared through the lists). */
static void check_constant_coverage(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    expect_true("src/curl.h given as argv[1] can be read", 0);
    return;
  }
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "#define KVIK__CURL", 18) != 0) continue;
    char *name = line + 8, *end = name;
    while (isalnum((unsigned char)*end) || *end == '_') end++;
    if (*end == '(') continue;
    *end = '\0';
    char what[600];
    snprintf(what, sizeof what, "%s (src/curl.h) is not compared: add it to CONSTANTS", name);
    expect_true(what, compared(name));
  }
  fclose(f);
}

/* ---- types and layouts ---------------------------------------------------------------------- */

#define CHECK_MEMBER_(k, r, member)                                                                 \
  expect_equal(#r "." #member " offset", offsetof(k, member), offsetof(r, member));                 \
  expect_equal(#r "." #member " size", sizeof(((k *)0)->member), sizeof(((r *)0)->member));

static void check_types(void) {
  expect_equal("sizeof(CURLcode)", sizeof(kvik__curl_code), sizeof(CURLcode));
  expect_equal("sizeof(CURLoption) (an int parameter in src/curl.h)", sizeof(int),
               sizeof(CURLoption));
  expect_equal("sizeof(CURLINFO) (an int parameter in src/curl.h)", sizeof(int), sizeof(CURLINFO));
  expect_equal("sizeof(curl_infotype) (an int parameter in src/curl.h)", sizeof(int),
               sizeof(curl_infotype));
  expect_equal("sizeof(CURLversion) (an int parameter in src/curl.h)", sizeof(int),
               sizeof(CURLversion));
  expect_true("curl_off_t is int64_t",
              _Generic((curl_off_t)0, kvik__curl_off_t: 1, default: 0) &&
                  sizeof(curl_off_t) == sizeof(kvik__curl_off_t));
  expect_equal("sizeof(struct curl_slist)", sizeof(struct kvik__curl_slist),
               sizeof(struct curl_slist));
  CHECK_MEMBER_(struct kvik__curl_slist, struct curl_slist, data)
  CHECK_MEMBER_(struct kvik__curl_slist, struct curl_slist, next)
  CHECK_MEMBER_(kvik__curl_version_info, curl_version_info_data, age)
  CHECK_MEMBER_(kvik__curl_version_info, curl_version_info_data, version)
  CHECK_MEMBER_(kvik__curl_version_info, curl_version_info_data, version_num)
  /* The callbacks whose types name no handle are curl.h's own types. */
  expect_true("kvik__curl_write_callback is curl_write_callback",
              _Generic((kvik__curl_write_callback *)0, curl_write_callback: 1, default: 0));
  expect_true("kvik__curl_xferinfo_callback is curl_xferinfo_callback",
              _Generic((kvik__curl_xferinfo_callback *)0, curl_xferinfo_callback: 1, default: 0));
  /* curl_debug_callback takes CURL * (void *) and a curl_infotype where kvik has kvik__curl * and
   * int, the same in the ABI (above); the rest must match. */
  expect_true("curl_debug_callback's type, but for the handle and the infotype",
              _Generic((curl_debug_callback)0,
                  int (*)(CURL *, curl_infotype, char *, size_t, void *): 1, default: 0));
}

/* A libcurl that kvik loads must be at least KVIK__CURL_MIN_VERSION; so must the headers that
 * these numbers are checked against, or the newer options are missing from them. */
static void check_version(void) {
  expect_true("curl.h is libcurl " KVIK__CURL_MIN_VERSION_TEXT " or newer",
              LIBCURL_VERSION_NUM >= KVIK__CURL_MIN_VERSION);
}

int main(int argc, char **argv) {
  check_version();
  check_lists();
  check_constants();
  check_types();
  if (argc > 1) check_constant_coverage(argv[1]);
  printf("%d checks, %d mismatches (curl.h of libcurl %s)\n", checks, mismatches,
         LIBCURL_VERSION);
  return mismatches ? 1 : 0;
}
