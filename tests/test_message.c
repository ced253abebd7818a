/* The thread's message kept across a call that succeeds (src/error.h, kvik__message_save): the
 * message a save found is back after its restore whatever was written in between, saves nest,
 * an error that ends the call stays, and other threads' messages are theirs. */
#include "test.h"
#include "../src/error.h"

#include <pthread.h>

static void assert_message(const char *want) {
  if (strcmp(kvik_last_error(), want) != 0)
    FAIL_AT("message \"%s\", expected \"%s\"", kvik_last_error(), want);
}

static void test_single(void) {
  kvik__set_message("A");
  kvik__saved_message m;
  kvik__message_save(&m);
  ASSERT_EQ(kvik__message_restore(&m, 7), 7);
  assert_message("A");
  kvik__message_save(&m);
  kvik__fail(-EIO, "B %d", 1);
  ASSERT_EQ(kvik__message_restore(&m, 0), 0);
  assert_message("A");
  kvik__message_save(&m);
  kvik__fail_errno(EIO, "C");
  ASSERT_EQ(kvik__message_restore(&m, -EIO), -EIO); /* an error ends the call: its message stays */
  ASSERT(strncmp(kvik_last_error(), "C: ", 3) == 0);
  printf("ok: one save\n");
}

static void test_nested(void) {
  kvik__saved_message outer, inner;
  /* Written between the saves: each gets back what it found. */
  kvik__set_message("A");
  kvik__message_save(&outer);
  kvik__fail(-EIO, "B");
  kvik__message_save(&inner);
  kvik__fail(-EIO, "C");
  kvik__message_restore(&inner, 0);
  assert_message("B");
  kvik__fail(-EIO, "D");
  kvik__message_restore(&outer, 0);
  assert_message("A");
  /* Written only inside the inner one, then after it: both found "A". */
  kvik__message_save(&outer);
  kvik__message_save(&inner);
  kvik__set_message("C");
  kvik__message_restore(&inner, 0);
  assert_message("A");
  kvik__fail(-EIO, "D");
  kvik__message_restore(&outer, 0);
  assert_message("A");
  /* The inner call failed, the outer one succeeds. */
  kvik__message_save(&outer);
  kvik__message_save(&inner);
  kvik__fail(-EIO, "C");
  kvik__message_restore(&inner, -EIO);
  assert_message("C");
  kvik__message_restore(&outer, 0);
  assert_message("A");
  printf("ok: nested saves\n");
}

static void *write_elsewhere(void *arg) {
  (void)arg;
  kvik__fail(-EIO, "other thread");
  return NULL;
}

static void test_threads(void) {
  kvik__set_message("A");
  kvik__saved_message m;
  kvik__message_save(&m);
  pthread_t t;
  ASSERT(pthread_create(&t, NULL, write_elsewhere, NULL) == 0);
  ASSERT(pthread_join(t, NULL) == 0);
  assert_message("A");
  ASSERT(!m.kept); /* another thread's write keeps nothing here */
  kvik__message_restore(&m, 0);
  assert_message("A");
  printf("ok: saves are the thread's own\n");
}

int main(void) {
  test_single();
  test_nested();
  test_threads();
  return 0;
}
