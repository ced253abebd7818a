/* Jansson, the JSON library that parses safetensors headers (safetensors.c), loaded at run time on
 * the first kvik_safetensors_open() (libjansson.so.4, in the loader's order: dl.h), never linked.
 *
 * kvik is built without jansson.h. The part of Jansson's stable ABI (2.13 and later) that kvik
 * uses is declared here under names of our own, so that tests/test_jansson_abi.c can include
 * both headers and compare every value and layout with the real jansson.h. jansson.h's inline
 * accessors (json_typeof, json_decref) read json_t's first fields: kvik reads `type` alone, and
 * frees what it parsed, which it owns alone, with json_delete(). */
#ifndef KVIK_SRC_JANSSON_H
#define KVIK_SRC_JANSSON_H

#include <stddef.h>

#define KVIK__JANSSON_SONAME "libjansson.so.4"

/* json_type */
typedef enum {
  KVIK__JSON_OBJECT,
  KVIK__JSON_ARRAY,
  KVIK__JSON_STRING,
  KVIK__JSON_INTEGER,
  KVIK__JSON_REAL,
  KVIK__JSON_TRUE,
  KVIK__JSON_FALSE,
  KVIK__JSON_NULL
} kvik__json_type;

/* json_t: its public head. */
typedef struct kvik__json {
  kvik__json_type type;
  volatile size_t refcount;
} kvik__json;

typedef long long kvik__json_int; /* json_int_t where long long exists */

/* json_error_t */
#define KVIK__JSON_ERROR_SOURCE_LENGTH 80
#define KVIK__JSON_ERROR_TEXT_LENGTH 160
typedef struct kvik__json_error {
  int line, column, position;
  char source[KVIK__JSON_ERROR_SOURCE_LENGTH];
  char text[KVIK__JSON_ERROR_TEXT_LENGTH];
} kvik__json_error;

/* json_loadb's flags: a key twice in an object is an error (the default keeps the last). */
#define KVIK__JSON_REJECT_DUPLICATES 0x1

/* X(member, symbol, ret, params): the functions kvik calls, all present since 2.13. */
#define KVIK__JANSSON_FUNCTIONS(X)                                                                 \
  X(loadb, "json_loadb", kvik__json *,                                                             \
    (const char *buffer, size_t buflen, size_t flags, kvik__json_error *error))                    \
  X(delete_, "json_delete", void, (kvik__json * json))                                             \
  X(object_get, "json_object_get", kvik__json *, (const kvik__json *object, const char *key))      \
  X(object_iter, "json_object_iter", void *, (kvik__json * object))                                \
  X(object_iter_next, "json_object_iter_next", void *, (kvik__json * object, void *iter))          \
  X(object_iter_key, "json_object_iter_key", const char *, (void *iter))                           \
  X(object_iter_value, "json_object_iter_value", kvik__json *, (void *iter))                       \
  X(array_size, "json_array_size", size_t, (const kvik__json *array))                              \
  X(array_get, "json_array_get", kvik__json *, (const kvik__json *array, size_t index))            \
  X(string_value, "json_string_value", const char *, (const kvik__json *string))                   \
  X(integer_value, "json_integer_value", kvik__json_int, (const kvik__json *integer))              \
  X(version_str, "jansson_version_str", const char *, (void))

typedef struct kvik__jansson_api {
#define KVIK__JANSSON_MEMBER_(member, symbol, ret, params) ret(*member) params;
  KVIK__JANSSON_FUNCTIONS(KVIK__JANSSON_MEMBER_)
#undef KVIK__JANSSON_MEMBER_
  char path[512]; /* the file it was loaded from, as the loader found it */
} kvik__jansson_api;

/* Jansson, loaded on the first call, once per process: a failure is final too, so a process
 * without it searches for it once. Returns the API, or NULL with the reason
 * ("libjansson.so.4: cannot open shared object file: ...") in `why`. */
const kvik__jansson_api *kvik__jansson_load(char *why, size_t len);

#endif
