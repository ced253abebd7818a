/* Error reporting inside the library: the thread-local detail message behind kvik_last_error(). */
#ifndef KVIK_SRC_ERROR_H
#define KVIK_SRC_ERROR_H

#include "kvik.h"

#define KVIK_MESSAGE_MAX 1024

/* Store a formatted detail message for this thread and return `code`, so that a failing path
 * reads `return kvik__fail(-EINVAL, "...", ...);`. */
int kvik__fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like kvik__fail() for a system error: `err` is a positive errno, the message gets
 * ": <strerror>" appended, and -err is returned. */
int kvik__fail_errno(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The code of failure n in another library's numbering (kvik.h: KVIK_E<L>_BASE - n), where
 * `base` is KVIK_ECUFILE_BASE, KVIK_ECUDA_BASE or KVIK_EHTTP_BASE; an n outside 1..999 is
 * reported as `unknown`. */
static inline int kvik__foreign_code(int base, long n, int unknown) {
  return KVIK_FOREIGN_CODE_(base, n > 0 && n < 1000 ? (int)n : unknown);
}

/* Names and descriptions of another library's codes (KVIK_E<L>_BASE - n above): the module that
 * loads the library registers them while kvik loads (KVIK__ON_LOAD, init.h), and kvik_err_name()
 * and kvik_strerror() give name(n) and text(n) for the codes of that range, n in 1..999, whether
 * the library was ever loaded or not. Each returns a static string. */
typedef const char *kvik__foreign_text(int n);
void kvik__error_register(int base, kvik__foreign_text *name, kvik__foreign_text *text);

/* Replace this thread's detail message with a copy of `message`. */
void kvik__set_message(const char *message);

/* This thread's message as a call found it, for a call that succeeds to leave it as it was even
 * where something it tried on the way failed (and wrote a message of its own). The text is
 * copied only when the message is first written after the save: most calls write none, and a
 * save costs them a few stores. */
typedef struct kvik__saved_message {
  struct kvik__saved_message *outer; /* the save in effect when this one was made, or NULL */
  int kept;                          /* text holds the message as this save found it */
  char text[KVIK_MESSAGE_MAX];
} kvik__saved_message;

/* Save this thread's message into *m, which must live until kvik__message_restore(m). Saves
 * nest: each is restored on every way out of the call that made it, innermost first. */
void kvik__message_save(kvik__saved_message *m);

/* End the save *m, the innermost: where rc is not an error, put back the message it found if it
 * was written since; return rc. */
int kvik__message_restore(kvik__saved_message *m, int rc);

#endif
