/* HTTP requests through libcurl: a process-wide pool of connected handles, requests with
 * retries, and the mapping of every failure to a kvik code (see "Remote files" in kvik.h). Built
 * without libcurl (no KVIK_HAVE_CURL), every request fails with KVIK_ENOREMOTE. */
#ifndef KVIK_SRC_HTTP_H
#define KVIK_SRC_HTTP_H

#include <stddef.h>
#include <stdint.h>

/* AWS Signature Version 4 credentials, as libcurl takes them. */
typedef struct kvik__http_auth {
  char *sigv4;        /* "aws:amz:REGION:s3" */
  char *userpwd;      /* "KEY_ID:SECRET" */
  char *token_header; /* "x-amz-security-token: TOKEN", or NULL */
} kvik__http_auth;

/* No expected body size: any up to the capacity. */
#define KVIK__HTTP_ANY_SIZE SIZE_MAX

typedef struct kvik__http_request {
  const char *fn;              /* the public function called, for messages */
  const char *display;         /* the URL as messages name it (no credentials) */
  const char *url;             /* the URL to request */
  const kvik__http_auth *auth; /* sign with these, or NULL */
  const char *ca_file;         /* CA certificates to trust instead of libcurl's, or NULL */
  const char *ca_dir;
  const char *label;           /* what the request is, for messages: "GET", "OPEN" ... */
  int head;                    /* HEAD instead of GET */
  int64_t offset;              /* the bytes it reads, [offset, offset + length), for messages; */
  size_t length;               /* length 0 names none */
  int range_header;            /* ask for those bytes with a Range header (and a 206) */
  char *dest;      /* where the body goes, at most `capacity` bytes: a longer body fails */
  size_t capacity;
  size_t expect;   /* the body's exact size, or KVIK__HTTP_ANY_SIZE */
} kvik__http_request;

typedef struct kvik__http_response {
  long status;            /* the last response's status, 0 if none came */
  size_t received;        /* body bytes stored in dest */
  int64_t content_length; /* the Content-Length header, or -1 */
  int64_t range_total;    /* the object size a Content-Range header names ("bytes a-b/N", "*\/N"), or -1 */
} kvik__http_response;

/* Perform the request, tried again on the failures KVIK_SETTING_HTTP_STATUS_CODES and kvik.h
 * name, up to KVIK_SETTING_HTTP_MAX_ATTEMPTS. Success is a 2xx status, 206 with a Range header,
 * and a body of the expected size. Returns 0, or a negative code with a message
 * "FN: LABEL bytes A-B of "URL": WHY"; *resp describes the last attempt either way. */
int kvik__http_perform(const kvik__http_request *req, kvik__http_response *resp);

/* 1 and libcurl's version in detail, or 0 and why not; see kvik_remote_supported(). */
int kvik__http_supported(char *detail, size_t len);

/* fork() handlers; see init.c. */
void kvik__http_atfork_prepare(void);
void kvik__http_atfork_parent(void);
void kvik__http_atfork_child(void);

#endif
