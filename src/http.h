/* HTTP requests through libcurl: a process-wide pool of connected handles, requests with
 * retries, and the mapping of every failure to a kvik code (see "Remote files" in kvik.h).
 * libcurl is loaded on the first request (curl.h); where it cannot be, every request fails with
 * KVIK_ENOREMOTE. */
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
  const char *label; /* what the request is, for messages: "GET", "OPEN" ... */
  int head;          /* HEAD instead of GET */
  int64_t offset;    /* the bytes it reads, [offset, offset + length), for messages; */
  size_t length;     /* length 0 names none */
  int range_header;  /* ask for those bytes with a Range header (and a 206) */
  int64_t total;     /* the object's size, which a Content-Range must name; or -1 */
  char *dest;        /* where the body goes, at most `capacity` bytes: a longer body fails */
  size_t capacity;
  size_t expect; /* the body's exact size, or KVIK__HTTP_ANY_SIZE */
} kvik__http_request;

/* Header values are kept as text (printable, cut short) for messages about them. */
#define KVIK__HTTP_HEADER_TEXT 64

typedef struct kvik__http_response {
  long status;            /* the last response's status, 0 if none came */
  size_t received;        /* body bytes stored in dest */
  int64_t content_length; /* the Content-Length header, or -1 (none, or not a byte count) */
  int64_t range_first;    /* the bytes a Content-Range header names ("bytes a-b/N"): a and b, */
  int64_t range_last;     /* or -1 (none, "bytes *\/N", or one that does not parse) */
  int64_t range_total;    /* the object size it names (N in both), or -1 (none, or "*") */
  char content_length_text[KVIK__HTTP_HEADER_TEXT]; /* the headers' values as sent, or "" */
  char content_range_text[KVIK__HTTP_HEADER_TEXT];
} kvik__http_response;

/* Perform the request, tried again on the failures KVIK_SETTING_HTTP_STATUS_CODES and kvik.h
 * name, up to KVIK_SETTING_HTTP_MAX_ATTEMPTS. Success is a 2xx status and a body of the expected
 * size; with a Range header, a 206 whose Content-Range names the bytes of the body, from the
 * offset asked for and within the range, of `total` bytes where that is known; or a 200 where
 * the range is the whole object (offset 0, length `total`). Returns 0, or a negative code with a
 * message "FN: LABEL bytes A-B of "URL": WHY"; *resp describes the last attempt either way. */
int kvik__http_perform(const kvik__http_request *req, kvik__http_response *resp);

/* The byte count of a Content-Length value (what follows the colon): digits, blanks around them
 * allowed; or -1. */
int64_t kvik__http_parse_length(const char *value, size_t len);

/* A Content-Range value, "bytes A-B/N" or "bytes *\/N", N a number or "*" (unknown), into *first,
 * *last and *total, -1 for each "*". Returns 0, or -1 (all three -1) where it does not parse or
 * names no bytes: B before A, B not inside N, or stars for both. */
int kvik__http_parse_content_range(const char *value, size_t len, int64_t *first, int64_t *last,
                                   int64_t *total);

/* 1 and libcurl's version in detail, or 0 and why not; see kvik_remote_supported(). Loads
 * libcurl. */
int kvik__http_supported(char *detail, size_t len);

#endif
