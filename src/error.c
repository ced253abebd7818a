/* Error codes, their names and descriptions, and the per-thread detail message. */
#define _GNU_SOURCE
#include "error.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_message[KVIK_MESSAGE_MAX];
/* The innermost save of the message in effect on this thread (kvik__message_save), or NULL. */
static _Thread_local kvik__saved_message *innermost_save;

const char *kvik_last_error(void) { return last_message; }

/* Called before the message is written: the saves that have not kept it yet keep it now. They
 * are the innermost ones, as a write keeps every save made before it. */
static void keep_saved_message(void) {
  for (kvik__saved_message *m = innermost_save; m && !m->kept; m = m->outer) {
    memcpy(m->text, last_message, sizeof m->text);
    m->kept = 1;
  }
}

void kvik__set_message(const char *message) {
  keep_saved_message();
  snprintf(last_message, sizeof last_message, "%s", message);
}

void kvik__message_save(kvik__saved_message *m) {
  m->outer = innermost_save;
  m->kept = 0;
  innermost_save = m;
}

int kvik__message_restore(kvik__saved_message *m, int rc) {
  assert(innermost_save == m);
  innermost_save = m->outer;
  /* The outer saves kept the message when this one did, if not before: no need to keep it. */
  if (rc >= 0 && m->kept) memcpy(last_message, m->text, sizeof last_message);
  return rc;
}

int kvik__fail(int code, const char *fmt, ...) {
  keep_saved_message();
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_message, sizeof last_message, fmt, ap);
  va_end(ap);
  return code;
}

int kvik__fail_errno(int err, const char *fmt, ...) {
  keep_saved_message();
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

/* The other libraries' codes: registered while the library loads, read-only after. */
#define MAX_FOREIGN 4
static struct foreign {
  int base;
  kvik__foreign_text *name, *text;
} foreign[MAX_FOREIGN];
static size_t nforeign;

void kvik__error_register(int base, kvik__foreign_text *name, kvik__foreign_text *text) {
  assert(nforeign < MAX_FOREIGN && base <= KVIK_ERRNO_BASE - 1000);
  foreign[nforeign++] = (struct foreign){base, name, text};
}

/* The registered library whose code this is, or NULL. */
static const struct foreign *foreign_of(int code) {
  for (size_t i = 0; i < nforeign; i++)
    if (KVIK_IS_FOREIGN_CODE_(foreign[i].base, code)) return &foreign[i];
  return NULL;
}

/* The standard HTTP error statuses: X(status, reason phrase). */
#define KVIK__HTTP_STATUSES(X)                                                                     \
  X(300, "Multiple Choices")                                                                       \
  X(301, "Moved Permanently")                                                                      \
  X(302, "Found")                                                                                  \
  X(303, "See Other")                                                                              \
  X(304, "Not Modified")                                                                           \
  X(307, "Temporary Redirect")                                                                     \
  X(308, "Permanent Redirect")                                                                     \
  X(400, "Bad Request")                                                                            \
  X(401, "Unauthorized")                                                                           \
  X(402, "Payment Required")                                                                       \
  X(403, "Forbidden")                                                                              \
  X(404, "Not Found")                                                                              \
  X(405, "Method Not Allowed")                                                                     \
  X(406, "Not Acceptable")                                                                         \
  X(407, "Proxy Authentication Required")                                                          \
  X(408, "Request Timeout")                                                                        \
  X(409, "Conflict")                                                                               \
  X(410, "Gone")                                                                                   \
  X(411, "Length Required")                                                                        \
  X(412, "Precondition Failed")                                                                    \
  X(413, "Content Too Large")                                                                      \
  X(414, "URI Too Long")                                                                           \
  X(415, "Unsupported Media Type")                                                                 \
  X(416, "Range Not Satisfiable")                                                                  \
  X(417, "Expectation Failed")                                                                     \
  X(421, "Misdirected Request")                                                                    \
  X(422, "Unprocessable Content")                                                                  \
  X(425, "Too Early")                                                                              \
  X(426, "Upgrade Required")                                                                       \
  X(428, "Precondition Required")                                                                  \
  X(429, "Too Many Requests")                                                                      \
  X(431, "Request Header Fields Too Large")                                                        \
  X(451, "Unavailable For Legal Reasons")                                                          \
  X(500, "Internal Server Error")                                                                  \
  X(501, "Not Implemented")                                                                        \
  X(502, "Bad Gateway")                                                                            \
  X(503, "Service Unavailable")                                                                    \
  X(504, "Gateway Timeout")                                                                        \
  X(505, "HTTP Version Not Supported")                                                             \
  X(507, "Insufficient Storage")                                                                   \
  X(508, "Loop Detected")                                                                          \
  X(511, "Network Authentication Required")

static const char *http_name(int status) {
  switch (status) {
#define KVIK_HTTP_NAME_(status, text)                                                              \
  case status: return "HTTP_" #status;
    KVIK__HTTP_STATUSES(KVIK_HTTP_NAME_)
#undef KVIK_HTTP_NAME_
  default: return "HTTP_ERROR";
  }
}

static const char *http_text(int status) {
  switch (status) {
#define KVIK_HTTP_TEXT_(status, text)                                                              \
  case status: return text;
    KVIK__HTTP_STATUSES(KVIK_HTTP_TEXT_)
#undef KVIK_HTTP_TEXT_
  default: return "HTTP error status";
  }
}

const char *kvik_strerror(int code) {
  switch (code) {
#define KVIK_ERROR_TEXT_(name, value, text)                                                        \
  case value: return text;
    KVIK_ERROR_MAP(KVIK_ERROR_TEXT_)
#undef KVIK_ERROR_TEXT_
  default: break;
  }
  if (code >= 0) return "success";
  const struct foreign *f = foreign_of(code);
  if (f) return f->text(KVIK_FOREIGN_CODE_(f->base, code));
  if (KVIK_IS_HTTP_ERROR(code)) return http_text(KVIK_HTTP_STATUS(code));
  const char *text = is_errno_code(code) ? strerrordesc_np(-code) : NULL;
  return text ? text : "unknown error";
}

const char *kvik_err_name(int code) {
  switch (code) {
#define KVIK_ERROR_NAME_(name, value, text)                                                        \
  case value: return #name;
    KVIK_ERROR_MAP(KVIK_ERROR_NAME_)
#undef KVIK_ERROR_NAME_
  default: break;
  }
  if (code >= 0) return "OK";
  const struct foreign *f = foreign_of(code);
  if (f) return f->name(KVIK_FOREIGN_CODE_(f->base, code));
  if (KVIK_IS_HTTP_ERROR(code)) return http_name(KVIK_HTTP_STATUS(code));
  const char *name = is_errno_code(code) ? strerrorname_np(-code) : NULL;
  return name ? name : "UNKNOWN";
}
