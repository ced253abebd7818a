/* libcurl, loaded at run time on the first remote call (KVIK_SETTING_CURL_LIBRARY, else
 * libcurl.so.4), never linked: a process that reads no remote file never maps it.
 *
 * kvik is built without curl/curl.h. The part of libcurl's stable ABI that src/http.c uses is
 * declared here under names of our own, so that tests/test_curl_abi.c can include both headers
 * and compare every value and layout with the real curl.h. An option's number is its type's base
 * plus its own number, as curl.h builds it; each setter below takes the options of one argument
 * type only, so that libcurl's va_arg() reads what was passed (-Wenum-conversion catches an
 * option given to the wrong setter). */
#ifndef KVIK_SRC_CURL_H
#define KVIK_SRC_CURL_H

#include <stddef.h>
#include <stdint.h>

#define KVIK__CURL_SONAME "libcurl.so.4"
/* CURLOPT_PROTOCOLS_STR came with 7.85.0. */
#define KVIK__CURL_MIN_VERSION 0x075500
#define KVIK__CURL_MIN_VERSION_TEXT "7.85.0"

typedef struct kvik__curl kvik__curl; /* CURL */
typedef int kvik__curl_code;          /* CURLcode, an enum */
typedef int64_t kvik__curl_off_t;     /* curl_off_t on 64-bit Linux */

struct kvik__curl_slist {
  char *data;
  struct kvik__curl_slist *next;
};

/* The start of curl_version_info_data, which every version of the struct begins with. */
typedef struct kvik__curl_version_info {
  int age;
  const char *version;
  unsigned int version_num;
} kvik__curl_version_info;

/* X(name, value): the CURLcodes kvik tells apart. */
#define KVIK__CURL_CODES(X)                                                                        \
  X(CURLE_OK, 0)                                                                                   \
  X(CURLE_UNSUPPORTED_PROTOCOL, 1)                                                                 \
  X(CURLE_URL_MALFORMAT, 3)                                                                        \
  X(CURLE_COULDNT_CONNECT, 7)                                                                      \
  X(CURLE_PARTIAL_FILE, 18)                                                                        \
  X(CURLE_OUT_OF_MEMORY, 27)                                                                       \
  X(CURLE_OPERATION_TIMEDOUT, 28)                                                                  \
  X(CURLE_SSL_CONNECT_ERROR, 35)                                                                   \
  X(CURLE_GOT_NOTHING, 52)                                                                         \
  X(CURLE_SEND_ERROR, 55)                                                                          \
  X(CURLE_RECV_ERROR, 56)                                                                          \
  X(CURLE_SSL_CERTPROBLEM, 58)                                                                     \
  X(CURLE_SSL_CIPHER, 59)                                                                          \
  X(CURLE_PEER_FAILED_VERIFICATION, 60)                                                            \
  X(CURLE_SSL_CACERT_BADFILE, 77)                                                                  \
  X(CURLE_SSL_CRL_BADFILE, 82)                                                                     \
  X(CURLE_SSL_ISSUER_ERROR, 83)                                                                    \
  X(CURLE_SSL_PINNEDPUBKEYNOTMATCH, 90)                                                            \
  X(CURLE_SSL_INVALIDCERTSTATUS, 91)

enum {
#define KVIK__CURL_CODE_(name, value) KVIK__##name = value,
  KVIK__CURL_CODES(KVIK__CURL_CODE_)
#undef KVIK__CURL_CODE_
};

/* curl.h's option types: CURLOPTTYPE_LONG, _OBJECTPOINT (also _STRINGPOINT, _SLISTPOINT and
 * _CBPOINT), _FUNCTIONPOINT. */
#define KVIK__CURLOPTTYPE_LONG 0
#define KVIK__CURLOPTTYPE_OBJECTPOINT 10000
#define KVIK__CURLOPTTYPE_FUNCTIONPOINT 20000

/* X(name, number) per argument type: a long; a NUL-terminated string that libcurl copies; a
 * pointer libcurl keeps (a callback's argument, the error buffer); a header list. */
#define KVIK__CURL_LONG_OPTIONS(X)                                                                 \
  X(CURLOPT_TIMEOUT, 13)                                                                           \
  X(CURLOPT_VERBOSE, 41)                                                                           \
  X(CURLOPT_NOPROGRESS, 43)                                                                        \
  X(CURLOPT_NOBODY, 44)                                                                            \
  X(CURLOPT_FOLLOWLOCATION, 52)                                                                    \
  X(CURLOPT_MAXREDIRS, 68)                                                                         \
  X(CURLOPT_BUFFERSIZE, 98)                                                                        \
  X(CURLOPT_NOSIGNAL, 99)                                                                          \
  X(CURLOPT_IGNORE_CONTENT_LENGTH, 136)
#define KVIK__CURL_TEXT_OPTIONS(X)                                                                 \
  X(CURLOPT_URL, 2)                                                                                \
  X(CURLOPT_USERPWD, 5)                                                                            \
  X(CURLOPT_RANGE, 7)                                                                              \
  X(CURLOPT_CAINFO, 65)                                                                            \
  X(CURLOPT_CAPATH, 97)                                                                            \
  X(CURLOPT_AWS_SIGV4, 305)                                                                        \
  X(CURLOPT_PROTOCOLS_STR, 318)                                                                    \
  X(CURLOPT_REDIR_PROTOCOLS_STR, 319)
#define KVIK__CURL_DATA_OPTIONS(X)                                                                 \
  X(CURLOPT_WRITEDATA, 1)                                                                          \
  X(CURLOPT_ERRORBUFFER, 10)                                                                       \
  X(CURLOPT_HEADERDATA, 29)                                                                        \
  X(CURLOPT_XFERINFODATA, 57)
#define KVIK__CURL_LIST_OPTIONS(X) X(CURLOPT_HTTPHEADER, 23)
/* The callbacks, each of its own type (below). */
#define KVIK__CURL_FUNCTION_OPTIONS(X)                                                             \
  X(CURLOPT_WRITEFUNCTION, 11)                                                                     \
  X(CURLOPT_HEADERFUNCTION, 79)                                                                    \
  X(CURLOPT_DEBUGFUNCTION, 94)                                                                     \
  X(CURLOPT_XFERINFOFUNCTION, 219)

#define KVIK__CURL_LONG_(name, n) KVIK__##name = KVIK__CURLOPTTYPE_LONG + n,
#define KVIK__CURL_POINTER_(name, n) KVIK__##name = KVIK__CURLOPTTYPE_OBJECTPOINT + n,
typedef enum { KVIK__CURL_LONG_OPTIONS(KVIK__CURL_LONG_) } kvik__curl_long_option;
typedef enum { KVIK__CURL_TEXT_OPTIONS(KVIK__CURL_POINTER_) } kvik__curl_text_option;
typedef enum { KVIK__CURL_DATA_OPTIONS(KVIK__CURL_POINTER_) } kvik__curl_data_option;
typedef enum { KVIK__CURL_LIST_OPTIONS(KVIK__CURL_POINTER_) } kvik__curl_list_option;
#undef KVIK__CURL_LONG_
#undef KVIK__CURL_POINTER_
enum {
#define KVIK__CURL_FUNCTION_(name, n) KVIK__##name = KVIK__CURLOPTTYPE_FUNCTIONPOINT + n,
  KVIK__CURL_FUNCTION_OPTIONS(KVIK__CURL_FUNCTION_)
#undef KVIK__CURL_FUNCTION_
};

/* CURLINFO_RESPONSE_CODE: CURLINFO_LONG + 2. */
#define KVIK__CURLINFO_LONG 0x200000
#define KVIK__CURLINFO_RESPONSE_CODE (KVIK__CURLINFO_LONG + 2)

/* curl_infotype, a debug callback's kind of data: the ones kvik traces. */
#define KVIK__CURLINFO_TEXT 0
#define KVIK__CURLINFO_HEADER_IN 1
#define KVIK__CURLINFO_HEADER_OUT 2

#define KVIK__CURL_GLOBAL_DEFAULT 3 /* CURL_GLOBAL_ALL: SSL | WIN32 */
#define KVIK__CURL_ERROR_SIZE 256

/* curl_write_callback (CURLOPT_WRITEFUNCTION, CURLOPT_HEADERFUNCTION), curl_xferinfo_callback,
 * curl_debug_callback (its second parameter a curl_infotype, an enum). */
typedef size_t kvik__curl_write_callback(char *data, size_t size, size_t nmemb, void *arg);
typedef int kvik__curl_xferinfo_callback(void *arg, kvik__curl_off_t dltotal,
                                         kvik__curl_off_t dlnow, kvik__curl_off_t ultotal,
                                         kvik__curl_off_t ulnow);
typedef int kvik__curl_debug_callback(kvik__curl *curl, int type, char *data, size_t size,
                                      void *arg);

/* X(member, symbol, ret, params): the functions kvik calls, all present since 7.85. */
#define KVIK__CURL_FUNCTIONS(X)                                                                    \
  X(global_init, "curl_global_init", kvik__curl_code, (long flags))                                \
  X(easy_init, "curl_easy_init", kvik__curl *, (void))                                             \
  X(easy_reset, "curl_easy_reset", void, (kvik__curl * curl))                                      \
  X(easy_setopt, "curl_easy_setopt", kvik__curl_code, (kvik__curl * curl, int option, ...))        \
  X(easy_perform, "curl_easy_perform", kvik__curl_code, (kvik__curl * curl))                       \
  X(easy_getinfo, "curl_easy_getinfo", kvik__curl_code, (kvik__curl * curl, int info, ...))        \
  X(easy_strerror, "curl_easy_strerror", const char *, (kvik__curl_code code))                     \
  X(slist_append, "curl_slist_append", struct kvik__curl_slist *,                                  \
    (struct kvik__curl_slist * list, const char *text))                                            \
  X(slist_free_all, "curl_slist_free_all", void, (struct kvik__curl_slist * list))                 \
  X(version, "curl_version", char *, (void))                                                       \
  X(version_info, "curl_version_info", kvik__curl_version_info *, (int stamp))

typedef struct kvik__curl_api {
#define KVIK__CURL_MEMBER_(member, symbol, ret, params) ret(*member) params;
  KVIK__CURL_FUNCTIONS(KVIK__CURL_MEMBER_)
#undef KVIK__CURL_MEMBER_
  char path[512]; /* the file it was loaded from, as the loader found it */
} kvik__curl_api;

/* libcurl, loaded and initialised (curl_global_init) on the first call, once per process: a
 * failure is final too, so a process without libcurl searches for it once. Returns the API, or
 * NULL with the reason ("libcurl.so.4: cannot open shared object file: ...") in `why`. */
const kvik__curl_api *kvik__curl_load(char *why, size_t len);

/* curl_easy_setopt() for each type of argument; only once kvik__curl_load() has succeeded. */
kvik__curl_code kvik__curl_set_long(kvik__curl *curl, kvik__curl_long_option option, long value);
kvik__curl_code kvik__curl_set_text(kvik__curl *curl, kvik__curl_text_option option,
                                    const char *text);
kvik__curl_code kvik__curl_set_data(kvik__curl *curl, kvik__curl_data_option option, void *data);
kvik__curl_code kvik__curl_set_list(kvik__curl *curl, kvik__curl_list_option option,
                                    struct kvik__curl_slist *list);
/* CURLOPT_WRITEFUNCTION or CURLOPT_HEADERFUNCTION (header != 0). */
kvik__curl_code kvik__curl_set_write(kvik__curl *curl, int header, kvik__curl_write_callback *fn);
kvik__curl_code kvik__curl_set_xferinfo(kvik__curl *curl, kvik__curl_xferinfo_callback *fn);
kvik__curl_code kvik__curl_set_debug(kvik__curl *curl, kvik__curl_debug_callback *fn);

/* curl_easy_getinfo(CURLINFO_RESPONSE_CODE). */
kvik__curl_code kvik__curl_response_code(kvik__curl *curl, long *status);

#endif
