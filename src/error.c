/* Error codes, their names and descriptions, and the per-thread detail message. */
#define _GNU_SOURCE
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_message[KVIK_MESSAGE_MAX];

const char *kvik_last_error(void) { return last_message; }

void kvik__set_message(const char *message) {
  snprintf(last_message, sizeof last_message, "%s", message);
}

int kvik__fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_message, sizeof last_message, fmt, ap);
  va_end(ap);
  return code;
}

int kvik__fail_errno(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(last_message, sizeof last_message, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof last_message)
    snprintf(last_message + n, sizeof last_message - (size_t)n, ": %s", kvik_strerror(-err));
  return -err;
}

/* errno values are small positive numbers; anything between KVIK_ERRNO_BASE and 0 is one. */
static int is_errno_code(int code) { return code < 0 && code > KVIK_ERRNO_BASE; }

const char *kvik_strerror(int code) {
  switch (code) {
#define KVIK_ERROR_TEXT_(name, value, text) \
  case value:                               \
    return text;
    KVIK_ERROR_MAP(KVIK_ERROR_TEXT_)
#undef KVIK_ERROR_TEXT_
  default:
    break;
  }
  if (code >= 0) return "success";
  const char *text = is_errno_code(code) ? strerrordesc_np(-code) : NULL;
  return text ? text : "unknown error";
}

const char *kvik_err_name(int code) {
  switch (code) {
#define KVIK_ERROR_NAME_(name, value, text) \
  case value:                               \
    return #name;
    KVIK_ERROR_MAP(KVIK_ERROR_NAME_)
#undef KVIK_ERROR_NAME_
  default:
    break;
  }
  if (code >= 0) return "OK";
  const char *name = is_errno_code(code) ? strerrorname_np(-code) : NULL;
  return name ? name : "UNKNOWN";
}
