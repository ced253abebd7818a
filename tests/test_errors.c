/* Error codes, names, descriptions, detail messages, and the version. */
#include "test.h"

#include <pthread.h>

static void test_codes_are_beyond_errno(void) {
  ASSERT(KVIK_ECONFIG < -4000);
  ASSERT(KVIK_ECANCELED_BY_FORK < KVIK_ECONFIG);
  ASSERT(KVIK_EINTERNAL < KVIK_ECANCELED_BY_FORK);
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
  test_names_and_texts();
  test_message_is_thread_local();
  test_detail_message_names_call_and_path();
  test_version();
  return 0;
}
