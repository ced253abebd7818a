/* Error codes, names, descriptions, detail messages, and the version. */
#include "test.h"

#include <pthread.h>

#include "../src/cufile.h"

static void test_codes_are_beyond_errno(void) {
  ASSERT(KVIK_ECONFIG < -4000);
  ASSERT(KVIK_ECANCELED_BY_FORK < KVIK_ECONFIG);
  ASSERT(KVIK_EINTERNAL < KVIK_ECANCELED_BY_FORK);
  ASSERT(KVIK_ECUDA_UNAVAILABLE < KVIK_EINTERNAL);
  ASSERT(KVIK_ECUFILE_UNAVAILABLE < KVIK_ECUDA_UNAVAILABLE);
  /* The library's own codes stay above the ranges of cuFile and CUDA codes. */
  ASSERT(KVIK_ECUFILE_UNAVAILABLE > KVIK_ECUFILE_BASE);
  ASSERT(!KVIK_IS_CUFILE_ERROR(KVIK_ECUFILE_UNAVAILABLE) && !KVIK_IS_CUDA_ERROR(KVIK_ECUFILE_UNAVAILABLE));
}

static void test_ranges(void) {
  ASSERT(!KVIK_IS_CUFILE_ERROR(KVIK_ECUFILE_BASE));
  ASSERT(KVIK_IS_CUFILE_ERROR(-5001) && KVIK_IS_CUFILE_ERROR(-5999));
  ASSERT(!KVIK_IS_CUFILE_ERROR(-6000) && !KVIK_IS_CUFILE_ERROR(-4999) && !KVIK_IS_CUFILE_ERROR(5001));
  ASSERT_EQ(KVIK_CUFILE_STATUS(-5027), 5027);
  ASSERT(!KVIK_IS_CUDA_ERROR(KVIK_ECUDA_BASE));
  ASSERT(KVIK_IS_CUDA_ERROR(KVIK_ECUDA_BASE - 1) && KVIK_IS_CUDA_ERROR(KVIK_ECUDA_BASE - 999));
  ASSERT(!KVIK_IS_CUDA_ERROR(KVIK_ECUDA_BASE - 1000) && !KVIK_IS_CUDA_ERROR(-5999) && !KVIK_IS_CUDA_ERROR(6001));
  ASSERT_EQ(KVIK_CUDA_RESULT(KVIK_ECUDA_BASE - 2), 2);
  ASSERT_EQ(KVIK_CUDA_RESULT(-6999), 999);
  for (int code = -7000; code < 0; code++) { /* the predicates and errno never overlap */
    int kinds = KVIK_IS_CUFILE_ERROR(code) + KVIK_IS_CUDA_ERROR(code) + (code > KVIK_ERRNO_BASE);
    if (kinds > 1) FAIL_AT("code %d is in %d ranges", code, kinds);
  }
}

static const int cufile_statuses[] = {
#define STATUS_VALUE_(name, value, text) value,
    KVIK__CUFILE_STATUSES(STATUS_VALUE_)
#undef STATUS_VALUE_
};

static int is_listed_cufile_status(int status) {
  for (size_t i = 0; i < sizeof cufile_statuses / sizeof cufile_statuses[0]; i++)
    if (cufile_statuses[i] == status) return 1;
  return 0;
}

static void check_cufile_status(const char *name, int status, const char *text) {
  int code = -status;
  if (!KVIK_IS_CUFILE_ERROR(code) || KVIK_CUFILE_STATUS(code) != status)
    FAIL_AT("%s (%d): code %d is not in the cuFile range", name, status, code);
  if (strcmp(kvik_err_name(code), name) != 0)
    FAIL_AT("kvik_err_name(%d) is \"%s\", expected \"%s\"", code, kvik_err_name(code), name);
  const char *got = kvik_strerror(code);
  if (!got[0] || strcmp(got, "unknown error") == 0 || strcmp(got, text) != 0)
    FAIL_AT("kvik_strerror(%d) is \"%s\", expected \"%s\"", code, got, text);
}

static void test_cufile_codes(void) {
  size_t count = 0;
#define CHECK_STATUS_(name, value, text) \
  check_cufile_status(#name, value, text); \
  count++;
  KVIK__CUFILE_STATUSES(CHECK_STATUS_)
#undef CHECK_STATUS_
  ASSERT(count > 40);
  ASSERT(strcmp(kvik_err_name(-5027), "CU_FILE_HANDLE_NOT_REGISTERED") == 0);
  ASSERT(strcmp(kvik_err_name(KVIK_ECUFILE_UNAVAILABLE), "KVIK_ECUFILE_UNAVAILABLE") == 0);
  ASSERT(strstr(kvik_strerror(KVIK_ECUFILE_UNAVAILABLE), "cuFile") != NULL);
  /* Statuses in the range that cuFile does not define. */
  for (int status = 5001; status <= 5999; status++) {
    if (is_listed_cufile_status(status)) continue;
    if (strcmp(kvik_err_name(-status), "UNKNOWN") != 0 || strcmp(kvik_strerror(-status), "unknown cuFile status") != 0)
      FAIL_AT("unlisted cuFile status %d: \"%s\" / \"%s\"", status, kvik_err_name(-status), kvik_strerror(-status));
  }
  ASSERT(!is_listed_cufile_status(5999));
}

/* Every CUresult the built-in table must know: this test never loads a CUDA driver. */
#define REQUIRED_CUDA_RESULTS(X)                                                              \
  X(1, CUDA_ERROR_INVALID_VALUE)                                                              \
  X(2, CUDA_ERROR_OUT_OF_MEMORY)                                                              \
  X(3, CUDA_ERROR_NOT_INITIALIZED)                                                            \
  X(4, CUDA_ERROR_DEINITIALIZED)                                                              \
  X(100, CUDA_ERROR_NO_DEVICE)                                                                \
  X(101, CUDA_ERROR_INVALID_DEVICE)                                                           \
  X(200, CUDA_ERROR_INVALID_IMAGE)                                                            \
  X(201, CUDA_ERROR_INVALID_CONTEXT)                                                          \
  X(400, CUDA_ERROR_INVALID_HANDLE)                                                           \
  X(500, CUDA_ERROR_NOT_FOUND)                                                                \
  X(600, CUDA_ERROR_NOT_READY)                                                                \
  X(700, CUDA_ERROR_ILLEGAL_ADDRESS)                                                          \
  X(709, CUDA_ERROR_CONTEXT_IS_DESTROYED)                                                     \
  X(712, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)                                           \
  X(713, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)                                               \
  X(719, CUDA_ERROR_LAUNCH_FAILED)                                                            \
  X(801, CUDA_ERROR_NOT_SUPPORTED)                                                            \
  X(999, CUDA_ERROR_UNKNOWN)

static void check_cuda_result(int result, const char *name) {
  int code = KVIK_ECUDA_BASE - result;
  if (!KVIK_IS_CUDA_ERROR(code) || KVIK_CUDA_RESULT(code) != result)
    FAIL_AT("%s (%d): code %d is not in the CUDA range", name, result, code);
  if (strcmp(kvik_err_name(code), name) != 0)
    FAIL_AT("kvik_err_name(%d) is \"%s\", expected \"%s\"", code, kvik_err_name(code), name);
  const char *text = kvik_strerror(code);
  if (!text[0] || strcmp(text, "unknown CUDA error") == 0)
    FAIL_AT("kvik_strerror(%d) is \"%s\"", code, text);
}

static void test_cuda_codes(void) {
#define CHECK_RESULT_(value, name) check_cuda_result(value, #name);
  REQUIRED_CUDA_RESULTS(CHECK_RESULT_)
#undef CHECK_RESULT_
  ASSERT(strcmp(kvik_strerror(KVIK_ECUDA_BASE - 2), "out of memory") == 0);
  ASSERT(strcmp(kvik_strerror(KVIK_ECUDA_BASE - 1), "invalid argument") == 0);
  /* A result in the range that the table does not know. */
  ASSERT(strcmp(kvik_err_name(KVIK_ECUDA_BASE - 998), "CUDA_ERROR_UNKNOWN_CODE") == 0);
  ASSERT(strcmp(kvik_strerror(KVIK_ECUDA_BASE - 998), "unknown CUDA error") == 0);
}

static void test_http_codes(void) {
  ASSERT(KVIK_IS_HTTP_ERROR(KVIK_EHTTP_BASE - 404) && KVIK_HTTP_STATUS(KVIK_EHTTP_BASE - 404) == 404);
  ASSERT(strcmp(kvik_err_name(KVIK_EHTTP_BASE - 404), "HTTP_404") == 0);
  ASSERT(strcmp(kvik_strerror(KVIK_EHTTP_BASE - 404), "Not Found") == 0);
  ASSERT(strcmp(kvik_err_name(KVIK_EHTTP_BASE - 503), "HTTP_503") == 0);
  ASSERT(strcmp(kvik_strerror(KVIK_EHTTP_BASE - 403), "Forbidden") == 0);
  /* A status no standard names. */
  ASSERT(strcmp(kvik_err_name(KVIK_EHTTP_BASE - 599), "HTTP_ERROR") == 0);
  ASSERT(strcmp(kvik_strerror(KVIK_EHTTP_BASE - 599), "HTTP error status") == 0);
  ASSERT(!KVIK_IS_HTTP_ERROR(KVIK_EHTTP_BASE - 99) && !KVIK_IS_CUDA_ERROR(KVIK_EHTTP_BASE - 404));
}

static void test_nvcomp_codes(void) {
  int corrupt = KVIK_ENVCOMP_BASE - 12;
  ASSERT(KVIK_IS_NVCOMP_ERROR(corrupt) && KVIK_NVCOMP_STATUS(corrupt) == 12);
  ASSERT(strcmp(kvik_err_name(corrupt), "nvcompErrorCannotDecompress") == 0);
  ASSERT(strstr(kvik_strerror(corrupt), "corrupt") != NULL);
  /* nvCOMP's two statuses beyond 999 */
  ASSERT(KVIK_NVCOMP_STATUS(KVIK_ENVCOMP_BASE - 998) == 1000);
  ASSERT(strcmp(kvik_err_name(KVIK_ENVCOMP_BASE - 998), "nvcompErrorCudaError") == 0);
  ASSERT(KVIK_NVCOMP_STATUS(KVIK_ENVCOMP_BASE - 999) == 10000);
  ASSERT(strcmp(kvik_err_name(KVIK_ENVCOMP_BASE - 999), "nvcompErrorInternal") == 0);
  ASSERT(strcmp(kvik_err_name(KVIK_ENVCOMP_BASE - 500), "UNKNOWN") == 0);
  ASSERT(!KVIK_IS_NVCOMP_ERROR(KVIK_EHTTP_BASE - 404) && !KVIK_IS_HTTP_ERROR(corrupt));
  ASSERT(strcmp(kvik_err_name(KVIK_ENVCOMP_UNAVAILABLE), "KVIK_ENVCOMP_UNAVAILABLE") == 0);
  ASSERT(KVIK_EDECODED_SIZE == KVIK_ERRNO_BASE - 14 && !KVIK_IS_NVCOMP_ERROR(KVIK_EDECODED_SIZE));
  ASSERT(strcmp(kvik_err_name(KVIK_EDECODED_SIZE), "KVIK_EDECODED_SIZE") == 0);
  ASSERT(strstr(kvik_strerror(KVIK_EDECODED_SIZE), "size other than expected") != NULL);
  ASSERT(KVIK_ENOJSON == KVIK_ERRNO_BASE - 15);
  ASSERT(strcmp(kvik_err_name(KVIK_ENOJSON), "KVIK_ENOJSON") == 0);
}

static void test_codes_beyond_every_range(void) {
  const int codes[] = {KVIK_ERRNO_BASE, KVIK_ERRNO_BASE - 16, -4999, KVIK_ENVCOMP_BASE,
                       KVIK_ENVCOMP_BASE - 1000, KVIK_ECUFILE_BASE, KVIK_ECUDA_BASE,
                       KVIK_ECUDA_BASE - 1000, KVIK_EHTTP_BASE, KVIK_EHTTP_BASE - 99, KVIK_EHTTP_BASE - 1000,
                       -999999, -2147483647 - 1};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
    if (strcmp(kvik_err_name(codes[i]), "UNKNOWN") != 0 || strcmp(kvik_strerror(codes[i]), "unknown error") != 0)
      FAIL_AT("code %d: \"%s\" / \"%s\"", codes[i], kvik_err_name(codes[i]), kvik_strerror(codes[i]));
  }
}

static void test_names_and_texts(void) {
  ASSERT(strcmp(kvik_err_name(KVIK_ECONFIG), "KVIK_ECONFIG") == 0);
  ASSERT(strcmp(kvik_err_name(-ENOENT), "ENOENT") == 0);
  ASSERT(strcmp(kvik_err_name(-ENOSPC), "ENOSPC") == 0);
  ASSERT(strcmp(kvik_err_name(0), "OK") == 0);
  ASSERT(strcmp(kvik_err_name(-999999), "UNKNOWN") == 0);
  ASSERT(strcmp(kvik_strerror(-ENOENT), "No such file or directory") == 0);
  ASSERT(strstr(kvik_strerror(KVIK_ECONFIG), "setting") != NULL);
  ASSERT(strstr(kvik_strerror(KVIK_ECANCELED_BY_FORK), "fork") != NULL);
  /* The last code appended, and its place: codes keep their values. */
  ASSERT(KVIK_ERANGE_MISMATCH == KVIK_ERRNO_BASE - 12);
  ASSERT(strcmp(kvik_err_name(KVIK_ERANGE_MISMATCH), "KVIK_ERANGE_MISMATCH") == 0);
  ASSERT(strstr(kvik_strerror(KVIK_ERANGE_MISMATCH), "Content-Range") != NULL);
  ASSERT(strcmp(kvik_strerror(-999999), "unknown error") == 0);
  ASSERT(strcmp(kvik_strerror(12345), "success") == 0);
}

static void test_detail_message_names_call_and_path(void) {
  kvik_file *f = (kvik_file *)0x1;
  ASSERT_FAILS(kvik_file_open("/nonexistent/kvik/file", "r", 0, &f), -ENOENT, "/nonexistent/kvik/file");
  ASSERT(f == NULL);
  ASSERT(strstr(kvik_last_error(), "kvik_file_open") != NULL);
  ASSERT(strstr(kvik_last_error(), "No such file or directory") != NULL);
}

static void *other_thread(void *arg) {
  (void)arg;
  ASSERT(strcmp(kvik_last_error(), "") == 0); /* messages are per thread */
  return NULL;
}

static void test_message_is_thread_local(void) {
  kvik_file *f;
  ASSERT(kvik_file_open(NULL, "r", 0, &f) == -EINVAL);
  pthread_t t;
  pthread_create(&t, NULL, other_thread, NULL);
  pthread_join(t, NULL);
}

static void test_version(void) {
  ASSERT_EQ(kvik_version(), KVIK_VERSION_NUM);
  ASSERT(strcmp(kvik_version_string(), KVIK_VERSION_STRING) == 0);
  char expect[32];
  snprintf(expect, sizeof expect, "%d.%d.%d", KVIK_VERSION_MAJOR, KVIK_VERSION_MINOR, KVIK_VERSION_PATCH);
  ASSERT(strcmp(expect, KVIK_VERSION_STRING) == 0);
}

int main(void) {
  test_codes_are_beyond_errno();
  test_ranges();
  test_names_and_texts();
  test_cufile_codes();
  test_cuda_codes();
  test_http_codes();
  test_nvcomp_codes();
  test_codes_beyond_every_range();
  test_message_is_thread_local();
  test_detail_message_names_call_and_path();
  test_version();
  return 0;
}
