/* HTTP requests through libcurl: connected handles kept for reuse, retries with backoff, and
 * failures told apart (see http.h). */
#define _GNU_SOURCE
#include "http.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cancel.h"
#include "curl.h"
#include "error.h"
#include "init.h"
#include "kvik.h"
#include "settings.h"
#include "sys.h"

/* ---- the retry hook ----------------------------------------------------------------------- */

/* The hook and its argument change together under hook_lock; a retry copies both, then calls the
 * hook without the lock, so that a slow hook holds up no other request. */
static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
static kvik_retry_hook *retry_hook;
static void *retry_hook_arg;

int kvik_remote_set_retry_hook(kvik_retry_hook *hook, void *arg) {
  pthread_mutex_lock(&hook_lock);
  retry_hook = hook;
  retry_hook_arg = hook ? arg : NULL;
  pthread_mutex_unlock(&hook_lock);
  return 0;
}

/* ---- header values ------------------------------------------------------------------------ */

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* [*p, *end) without the blanks around it. */
static void trim(const char **p, const char **end) {
  while (*p < *end && is_blank(**p)) (*p)++;
  while (*end > *p && is_blank((*end)[-1])) (*end)--;
}

/* The digits at *p as a number, *p moved past them; -1 (and *p unmoved) where there are none, or
 * more than an int64_t holds. */
static int64_t parse_digits(const char **p, const char *end) {
  const char *s = *p;
  int64_t v = 0;
  for (; s < end && isdigit((unsigned char)*s); s++) {
    if (v > (INT64_MAX - (*s - '0')) / 10) return -1;
    v = v * 10 + (*s - '0');
  }
  if (s == *p) return -1;
  *p = s;
  return v;
}

int64_t kvik__http_parse_length(const char *value, size_t len) {
  const char *p = value, *end = value + len;
  trim(&p, &end);
  int64_t v = parse_digits(&p, end);
  return p == end ? v : -1;
}

/* A number, or "*" for -1, at *p. Returns 0, or -1 where neither is there. */
static int parse_number_or_star(const char **p, const char *end, int64_t *v) {
  if (*p < end && **p == '*') {
    (*p)++;
    *v = -1;
    return 0;
  }
  *v = parse_digits(p, end);
  return *v < 0 ? -1 : 0;
}

int kvik__http_parse_content_range(const char *value, size_t len, int64_t *first, int64_t *last,
                                   int64_t *total) {
  const char *p = value, *end = value + len;
  trim(&p, &end);
  *first = *last = *total = -1;
  if (end - p < 6 || strncasecmp(p, "bytes", 5) != 0 || p[5] != ' ') return -1;
  for (p += 5; p < end && *p == ' ';) p++;
  int64_t a, b = -1, n;
  if (parse_number_or_star(&p, end, &a) < 0) return -1;
  if (a >= 0 && (p == end || *p++ != '-' || (b = parse_digits(&p, end)) < 0)) return -1;
  if (p == end || *p++ != '/' || parse_number_or_star(&p, end, &n) < 0 || p != end) return -1;
  /* Stars for both bytes and size name nothing; a range runs forwards, inside the object. */
  if ((a < 0 && n < 0) || (a >= 0 && (b < a || (n >= 0 && b >= n)))) return -1;
  *first = a, *last = b, *total = n;
  return 0;
}

/* No response yet: no status, no body, none of the headers read. */
static void reset_response(kvik__http_response *r) {
  *r = (kvik__http_response){
      .content_length = -1, .range_first = -1, .range_last = -1, .range_total = -1};
}

/* ---- libcurl, once ------------------------------------------------------------------------ */

/* libcurl's functions, once loaded (curl.h): set before any handle exists, and never changed
 * after, though every request that starts stores it again. */
static const kvik__curl_api *_Atomic cu;

/* Load libcurl, once per process; 0, or KVIK_ENOREMOTE with why not in `why`. */
static int load_curl(char *why, size_t len) {
  const kvik__curl_api *api = kvik__curl_load(why, len);
  if (!api) return KVIK_ENOREMOTE;
  cu = api;
  return 0;
}

int kvik__http_supported(char *detail, size_t len) {
  char why[KVIK_MESSAGE_MAX];
  if (load_curl(why, sizeof why) < 0) {
    if (detail && len) snprintf(detail, len, "libcurl unavailable: %s", why);
    return 0;
  }
  if (detail && len) snprintf(detail, len, "%s", cu->version());
  return 1;
}

/* ---- the handle pool ---------------------------------------------------------------------- */

/* Idle handles keep their connections open, so the next request to the same server skips the
 * TCP and TLS handshakes. At most KVIK_SETTING_REMOTE_CONNECTIONS handles are in use at once;
 * requests beyond wait for one. A handle and its list node are made together, once. */
typedef struct pooled_handle {
  kvik__curl *curl;
  struct pooled_handle *next;
} pooled_handle;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_cond = PTHREAD_COND_INITIALIZER;
static pooled_handle *idle_list;
static unsigned in_use;

static pooled_handle *new_handle(void) {
  pooled_handle *h = kvik__malloc(sizeof *h);
  if (h && !(h->curl = cu->easy_init())) {
    free(h);
    h = NULL;
  }
  return h;
}

/* Give back a slot taken by acquire_handle(), with `h` idle in it, or NULL when none was made. */
static void release_handle(pooled_handle *h) {
  pthread_mutex_lock(&pool_lock);
  in_use--;
  if (h) {
    h->next = idle_list;
    idle_list = h;
  }
  pthread_cond_signal(&pool_cond);
  pthread_mutex_unlock(&pool_lock);
}

/* The most requests in flight: REMOTE_CONNECTIONS, or kvikio's cap where that is smaller. */
static unsigned request_cap(void) {
  int64_t cap = kvik__setting(KVIK_SETTING_REMOTE_CONNECTIONS);
  int64_t most = kvik__setting(KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS);
  return (unsigned)(most > 0 && most < cap ? most : cap);
}

static pooled_handle *acquire_handle(void) {
  unsigned cap = request_cap();
  pthread_mutex_lock(&pool_lock);
  while (in_use >= cap) pthread_cond_wait(&pool_cond, &pool_lock);
  in_use++;
  pooled_handle *h = idle_list;
  if (h) idle_list = h->next;
  pthread_mutex_unlock(&pool_lock);
  if (!h && !(h = new_handle())) release_handle(NULL);
  return h;
}

static void fork_prepare(void) {
  pthread_mutex_lock(&pool_lock);
  pthread_mutex_lock(&hook_lock);
}

static void fork_parent(void) {
  pthread_mutex_unlock(&hook_lock);
  pthread_mutex_unlock(&pool_lock);
}

/* The idle handles' connections are the parent's too: a TLS stream used from two processes is
 * corrupted, and cleaning a handle up may send on it. The child leaves them alone (a small
 * leak) and connects afresh. */
static void fork_child(void) {
  pthread_mutex_init(&hook_lock, NULL);
  pthread_mutex_init(&pool_lock, NULL);
  pthread_cond_init(&pool_cond, NULL);
  idle_list = NULL;
  in_use = 0;
}

KVIK__ON_LOAD(register_fork_handlers) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_HTTP, &handlers);
}

/* ---- tracing, without credentials -------------------------------------------------------- */

static int starts_with_nocase(const char *s, size_t n, const char *prefix) {
  size_t p = strlen(prefix);
  return n >= p && strncasecmp(s, prefix, p) == 0;
}

/* One line of libcurl's trace with what could carry a secret cut out: credential headers, query
 * strings (presigned signatures, delegation tokens) and the user libcurl says it authenticates. */
static void trace_line(char mark, const char *line, size_t n) {
  static const char *const secret_headers[] = {
      "authorization:", "proxy-authorization:", "x-amz-security-token:", "cookie:", "set-cookie:"};
  for (size_t i = 0; i < sizeof secret_headers / sizeof *secret_headers; i++)
    if (starts_with_nocase(line, n, secret_headers[i])) {
      fprintf(stderr, "kvik remote: %c %s <redacted>\n", mark, secret_headers[i]);
      return;
    }
  const char *query = memchr(line, '?', n), *user = memmem(line, n, "user '", 6);
  const char *cut = query && (!user || query < user) ? query : user;
  if (!cut) {
    fprintf(stderr, "kvik remote: %c %.*s\n", mark, (int)n, line);
    return;
  }
  const char *rest = cut == query ? memmem(cut, n - (size_t)(cut - line), " HTTP/", 6) : NULL;
  fprintf(stderr, "kvik remote: %c %.*s%s<redacted>%.*s\n", mark, (int)(cut - line), line,
          cut == query ? "?" : "user '", rest ? (int)(n - (size_t)(rest - line)) : 0,
          rest ? rest : "");
}

static int trace(kvik__curl *curl, int type, char *data, size_t size, void *user) {
  (void)curl, (void)user;
  char mark = type == KVIK__CURLINFO_TEXT         ? '*'
              : type == KVIK__CURLINFO_HEADER_IN  ? '<'
              : type == KVIK__CURLINFO_HEADER_OUT ? '>'
                                                  : 0;
  if (!mark) return 0; /* bodies and TLS records */
  while (size > 0) {
    const char *nl = memchr(data, '\n', size);
    size_t n = nl ? (size_t)(nl - data) + 1 : size, line = n;
    while (line > 0 && (data[line - 1] == '\n' || data[line - 1] == '\r')) line--;
    if (line > 0) trace_line(mark, data, line);
    data += n;
    size -= n;
  }
  return 0;
}

/* ---- one attempt -------------------------------------------------------------------------- */

/* Each handle has a receive buffer of this size: large enough for few system calls, small
 * enough to stay in the core's L2 cache, from where on_body() copies it out. */
#define RECEIVE_BUFFER (256L << 10)

/* What the callbacks see of the response being received. */
typedef struct transfer {
  const kvik__http_request *req;
  kvik__curl *curl;
  kvik__http_response resp;
  int status_seen;      /* the write callback has looked at the status */
  int range_ignored;    /* a range request answered with 200 and more than the range: aborted */
  int overflow;         /* more body than capacity: aborted */
  int cancelled;        /* the work it is part of was cancelled (cancel.h): aborted */
  char error_body[512]; /* the start of an error response's body, for the S3 error code */
  size_t error_len;
} transfer;

/* Whether the range asked for is the whole object: a server that ignores Range answers it with
 * exactly those bytes, in a 200. Another range in a 200 is taken only where the body is exactly
 * that range (range_ignored: a longer one is the whole object). */
static int whole_object(const kvik__http_request *req) {
  return req->offset == 0 && req->total >= 0 && (uint64_t)req->total == req->length;
}

static int range_ignored(const kvik__http_request *req, long status) {
  return req->range_header && status == 200 && !whole_object(req);
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg) {
  transfer *t = arg;
  size_t n = size * nmemb;
  if (!t->status_seen) {
    kvik__curl_response_code(t->curl, &t->resp.status);
    t->status_seen = 1;
  }
  if (t->resp.status < 200 || t->resp.status >= 300) {
    size_t room = sizeof t->error_body - 1 - t->error_len, keep = n < room ? n : room;
    memcpy(t->error_body + t->error_len, data, keep);
    t->error_len += keep;
    t->error_body[t->error_len] = '\0';
    return n;
  }
  if (range_ignored(t->req, t->resp.status) && n > t->req->length - t->resp.received)
    return t->range_ignored = 1, 0;
  if (n > t->req->capacity - t->resp.received) return t->overflow = 1, 0;
  memcpy(t->req->dest + t->resp.received, data, n);
  t->resp.received += n;
  return n;
}

/* libcurl calls this often while a transfer runs, about once a second when nothing moves; a
 * nonzero answer aborts it. So a transfer stalled on its server stops soon after the work it is
 * part of is cancelled. */
static int on_progress(void *arg, kvik__curl_off_t dltotal, kvik__curl_off_t dlnow,
                       kvik__curl_off_t ultotal, kvik__curl_off_t ulnow) {
  transfer *t = arg;
  (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
  t->cancelled = kvik__cancelled();
  return t->cancelled;
}

/* A header's value as messages show it: printable characters only, cut to the buffer. */
static void keep_text(char *text, const char *p, const char *end) {
  size_t n = 0;
  trim(&p, &end);
  for (; p < end && n < KVIK__HTTP_HEADER_TEXT - 1; p++)
    text[n++] = isprint((unsigned char)*p) ? *p : '?';
  text[n] = '\0';
}

/* Headers of every response, redirects included: a status line starts a new response. */
static size_t on_header(char *data, size_t size, size_t nmemb, void *arg) {
  transfer *t = arg;
  kvik__http_response *r = &t->resp;
  size_t n = size * nmemb;
  size_t range_name = strlen("content-range:"), length_name = strlen("content-length:");
  if (starts_with_nocase(data, n, "HTTP/")) {
    long status = r->status;
    size_t received = r->received;
    reset_response(r);
    r->status = status, r->received = received;
  } else if (starts_with_nocase(data, n, "content-range:")) {
    kvik__http_parse_content_range(data + range_name, n - range_name, &r->range_first,
                                   &r->range_last, &r->range_total);
    keep_text(r->content_range_text, data + range_name, data + n);
  } else if (starts_with_nocase(data, n, "content-length:")) {
    r->content_length = kvik__http_parse_length(data + length_name, n - length_name);
    keep_text(r->content_length_text, data + length_name, data + n);
  }
  return n;
}

static void set_request_options(kvik__curl *curl, transfer *t, char *range,
                                struct kvik__curl_slist *headers, char *errbuf) {
  const kvik__http_request *req = t->req;
  kvik__curl_set_text(curl, KVIK__CURLOPT_URL, req->url);
  kvik__curl_set_long(curl, KVIK__CURLOPT_NOSIGNAL,
                      1L); /* no SIGALRM for timeouts: other threads run */
  kvik__curl_set_text(curl, KVIK__CURLOPT_PROTOCOLS_STR, "http,https");
  kvik__curl_set_text(curl, KVIK__CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  kvik__curl_set_long(curl, KVIK__CURLOPT_FOLLOWLOCATION,
                      1L); /* WebHDFS answers with its data node's URL */
  kvik__curl_set_long(curl, KVIK__CURLOPT_MAXREDIRS, 10L);
  kvik__curl_set_long(curl, KVIK__CURLOPT_TIMEOUT, (long)kvik__setting(KVIK_SETTING_HTTP_TIMEOUT));
  kvik__curl_set_data(curl, KVIK__CURLOPT_ERRORBUFFER, errbuf);
  kvik__curl_set_write(curl, 0, on_body);
  kvik__curl_set_data(curl, KVIK__CURLOPT_WRITEDATA, t);
  kvik__curl_set_write(curl, 1, on_header);
  kvik__curl_set_data(curl, KVIK__CURLOPT_HEADERDATA, t);
  kvik__curl_set_xferinfo(curl, on_progress);
  kvik__curl_set_data(curl, KVIK__CURLOPT_XFERINFODATA, t);
  kvik__curl_set_long(curl, KVIK__CURLOPT_NOPROGRESS, 0L);
  /* Fewer reads from the socket than with libcurl's 16 KiB (see RECEIVE_BUFFER). */
  kvik__curl_set_long(curl, KVIK__CURLOPT_BUFFERSIZE, RECEIVE_BUFFER);
  if (req->ca_file) kvik__curl_set_text(curl, KVIK__CURLOPT_CAINFO, req->ca_file);
  if (req->ca_dir) kvik__curl_set_text(curl, KVIK__CURLOPT_CAPATH, req->ca_dir);
  if (req->head) {
    kvik__curl_set_long(curl, KVIK__CURLOPT_NOBODY, 1L);
    /* libcurl fails on a Content-Length it cannot parse, before on_header() sees the value a
     * message should name, and drops one too large in silence. A HEAD has no body to delimit:
     * kvik reads the header itself. */
    kvik__curl_set_long(curl, KVIK__CURLOPT_IGNORE_CONTENT_LENGTH, 1L);
  }
  if (range) kvik__curl_set_text(curl, KVIK__CURLOPT_RANGE, range);
  if (req->auth) {
    kvik__curl_set_text(curl, KVIK__CURLOPT_AWS_SIGV4, req->auth->sigv4);
    kvik__curl_set_text(curl, KVIK__CURLOPT_USERPWD, req->auth->userpwd);
  }
  if (headers) kvik__curl_set_list(curl, KVIK__CURLOPT_HTTPHEADER, headers);
  if (kvik__setting(KVIK_SETTING_REMOTE_VERBOSE)) {
    kvik__curl_set_debug(curl, trace);
    kvik__curl_set_long(curl, KVIK__CURLOPT_VERBOSE, 1L);
  }
}

/* ---- failures ----------------------------------------------------------------------------- */

static int curl_code(kvik__curl_code cc) {
  switch (cc) {
  case KVIK__CURLE_OPERATION_TIMEDOUT: return -ETIMEDOUT;
  case KVIK__CURLE_COULDNT_CONNECT: return -ECONNREFUSED;
  case KVIK__CURLE_RECV_ERROR:
  case KVIK__CURLE_SEND_ERROR:
  case KVIK__CURLE_GOT_NOTHING: return -ECONNRESET;
  case KVIK__CURLE_PARTIAL_FILE: return KVIK_EREMOTE_SHORT;
  case KVIK__CURLE_OUT_OF_MEMORY: return -ENOMEM;
  case KVIK__CURLE_URL_MALFORMAT:
  case KVIK__CURLE_UNSUPPORTED_PROTOCOL: return -EINVAL;
  case KVIK__CURLE_SSL_CONNECT_ERROR:
  case KVIK__CURLE_PEER_FAILED_VERIFICATION:
  case KVIK__CURLE_SSL_CERTPROBLEM:
  case KVIK__CURLE_SSL_CIPHER:
  case KVIK__CURLE_SSL_CACERT_BADFILE:
  case KVIK__CURLE_SSL_ISSUER_ERROR:
  case KVIK__CURLE_SSL_CRL_BADFILE:
  case KVIK__CURLE_SSL_PINNEDPUBKEYNOTMATCH:
  case KVIK__CURLE_SSL_INVALIDCERTSTATUS: return KVIK_ETLS;
  default: return KVIK_EREMOTE;
  }
}

/* S3 names its errors in <Code>...</Code>; the rest of its body may quote the request, key id
 * included, so only the code is kept. */
static void s3_error_code(const char *body, char *code, size_t len) {
  const char *start = strstr(body, "<Code>"), *end = start ? strstr(start, "</Code>") : NULL;
  code[0] = '\0';
  if (start && end) snprintf(code, len, " (S3: %.*s)", (int)(end - start - 6), start + 6);
}

/* A 206 names in its Content-Range the bytes its body holds: from the offset asked for, within
 * the range, of the object's size where both know it. One that ends before the range with a body
 * to match is a short answer, told apart by the body's size as a body cut off is. */
static int check_content_range(const transfer *t, char *why, size_t len) {
  const kvik__http_request *req = t->req;
  const kvik__http_response *r = &t->resp;
  if (r->range_first < 0) {
    if (r->content_range_text[0])
      snprintf(why, len, "the server answered 206 with a Content-Range that does not parse: \"%s\"",
               r->content_range_text);
    else snprintf(why, len, "the server answered 206 without a Content-Range");
    return KVIK_ERANGE_MISMATCH;
  }
  int64_t last = req->offset + (int64_t)req->length - 1;
  if (r->range_first != req->offset || r->range_last > last ||
      (req->total >= 0 && r->range_total >= 0 && r->range_total != req->total)) {
    char total[24] = "*";
    if (req->total >= 0) snprintf(total, sizeof total, "%lld", (long long)req->total);
    snprintf(why, len, "the server answered 206 with Content-Range \"%s\" for bytes %lld-%lld/%s",
             r->content_range_text, (long long)req->offset, (long long)last, total);
    return KVIK_ERANGE_MISMATCH;
  }
  if (r->range_last != req->offset + (int64_t)r->received - 1) {
    snprintf(why, len, "the server answered 206 with Content-Range \"%s\" and a body of %zu bytes",
             r->content_range_text, r->received);
    return KVIK_ERANGE_MISMATCH;
  }
  return 0;
}

/* The attempt's outcome as a code, with its description in `why`. */
static int classify(const transfer *t, kvik__curl_code cc, const char *errbuf, char *why,
                    size_t len) {
  const kvik__http_request *req = t->req;
  long status = t->resp.status;
  if (t->cancelled) {
    snprintf(why, len, "cancelled");
    return -ECANCELED;
  }
  /* An empty body never reaches on_body(): look at the status here too. */
  if (t->range_ignored ||
      (cc == KVIK__CURLE_OK && range_ignored(req, status) && t->resp.received != req->length)) {
    snprintf(why, len, "the server answered 200 with the whole object instead of the range");
    return KVIK_ERANGE_IGNORED;
  }
  if (t->overflow) {
    snprintf(why, len, "the response body is longer than the %zu bytes asked for", req->capacity);
    return KVIK_EREMOTE_LONG;
  }
  /* kvikio's phrase first, which code written for it looks for. */
  if (cc == KVIK__CURLE_OPERATION_TIMEDOUT) {
    snprintf(why, len, "Operation timed out. (%s)", errbuf[0] ? errbuf : cu->easy_strerror(cc));
    return curl_code(cc);
  }
  if (cc != KVIK__CURLE_OK) {
    snprintf(why, len, "%s",
             errbuf[0] ? errbuf : cu->easy_strerror(cc)); /* errbuf says more, when set */
    return curl_code(cc);
  }
  /* With a Range header, a 200 that got here holds the whole object, as asked. */
  if (status < 200 || status >= 300 || (req->range_header && status != 206 && status != 200)) {
    char s3_code[96];
    s3_error_code(t->error_body, s3_code, sizeof s3_code);
    int code = status >= 100 && status <= 999 ? KVIK_FOREIGN_CODE_(KVIK_EHTTP_BASE, (int)status)
                                              : KVIK_EREMOTE;
    /* "URL returned error: N": libcurl's words, which kvikio's messages carry. */
    snprintf(why, len, "HTTP %ld %s (the requested URL returned error: %ld)%s", status,
             kvik_strerror(code), status, s3_code);
    return code;
  }
  int rc = req->range_header && status == 206 ? check_content_range(t, why, len) : 0;
  if (rc < 0) return rc;
  if (req->expect != KVIK__HTTP_ANY_SIZE && t->resp.received != req->expect) {
    snprintf(why, len, "the response body has %zu bytes, %zu were asked for", t->resp.received,
             req->expect);
    return t->resp.received < req->expect ? KVIK_EREMOTE_SHORT : KVIK_EREMOTE_LONG;
  }
  return 0;
}

static int retryable(int code) {
  if (KVIK_IS_HTTP_ERROR(code)) return kvik__http_status_retryable(KVIK_HTTP_STATUS(code));
  return code == -ETIMEDOUT || code == -ECONNREFUSED || code == -ECONNRESET ||
         code == KVIK_EREMOTE_SHORT;
}

/* S3 wants the payload's SHA-256 in a header, which libcurl signs but does not add: that of the
 * empty body, since requests carry none. */
#define EMPTY_PAYLOAD_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

static int sign_headers(const kvik__http_auth *auth, struct kvik__curl_slist **headers) {
  *headers = cu->slist_append(NULL, "x-amz-content-sha256: " EMPTY_PAYLOAD_SHA256);
  if (*headers && auth->token_header) {
    struct kvik__curl_slist *more = cu->slist_append(*headers, auth->token_header);
    if (!more) cu->slist_free_all(*headers);
    *headers = more;
  }
  return *headers ? 0 : -ENOMEM;
}

static int attempt(kvik__curl *curl, const kvik__http_request *req, kvik__http_response *resp,
                   char *why, size_t len) {
  transfer t = {.req = req, .curl = curl};
  reset_response(&t.resp);
  char range[48], errbuf[KVIK__CURL_ERROR_SIZE] = "";
  if (req->range_header)
    snprintf(range, sizeof range, "%lld-%lld", (long long)req->offset,
             (long long)(req->offset + (int64_t)req->length - 1));
  struct kvik__curl_slist *headers = NULL;
  if (req->auth && sign_headers(req->auth, &headers) < 0) {
    snprintf(why, len, "out of memory");
    return -ENOMEM;
  }
  cu->easy_reset(curl); /* options of the handle's last request; its connections stay */
  set_request_options(curl, &t, req->range_header ? range : NULL, headers, errbuf);
  kvik__curl_code cc = cu->easy_perform(curl);
  cu->slist_free_all(headers);
  if (!t.status_seen) kvik__curl_response_code(curl, &t.resp.status);
  *resp = t.resp;
  return classify(&t, cc, errbuf, why, len);
}

/* How often a wait between attempts asks whether it was cancelled. */
#define BACK_OFF_POLL_MS 10

/* The pause after `failed_attempts` attempts: kvikio's, 0.5 s before the second attempt, doubling
 * up to 4 s. */
static int64_t back_off_ms(unsigned failed_attempts) {
  return (int64_t)500 << (failed_attempts > 4 ? 3 : failed_attempts - 1);
}

/* Tell the retry hook, if any, that attempt n of the request failed with rc and is tried again
 * after delay_ms. */
static void tell_retry(const kvik__http_request *req, unsigned n, unsigned max_attempts, int rc,
                       int64_t delay_ms) {
  pthread_mutex_lock(&hook_lock);
  kvik_retry_hook *hook = retry_hook;
  void *arg = retry_hook_arg;
  pthread_mutex_unlock(&hook_lock);
  if (!hook) return;
  kvik_retry_info info = {.attempt = n,
                          .max_attempts = max_attempts,
                          .cause = rc,
                          .status = KVIK_IS_HTTP_ERROR(rc) ? KVIK_HTTP_STATUS(rc) : 0,
                          .delay_ms = delay_ms,
                          .url = req->display};
  hook(&info, arg);
}

/* Pause for ms, cut short once cancelled (cancel.h). */
static void back_off(int64_t ms) {
  for (; ms > 0 && !kvik__cancelled(); ms -= BACK_OFF_POLL_MS) {
    struct timespec ts = {0, (long)(ms < BACK_OFF_POLL_MS ? ms : BACK_OFF_POLL_MS) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
}

static void describe_request(const kvik__http_request *req, char *what, size_t len) {
  if (req->length > 0)
    snprintf(what, len, "%s bytes %lld-%lld", req->label, (long long)req->offset,
             (long long)(req->offset + (int64_t)req->length - 1));
  else snprintf(what, len, "%s", req->label);
}

int kvik__http_perform(const kvik__http_request *req, kvik__http_response *resp) {
  reset_response(resp);
  char what[96], why[512];
  describe_request(req, what, sizeof what);
  int rc = load_curl(why, sizeof why);
  if (rc < 0)
    return kvik__fail(rc, "%s: %s of \"%s\": libcurl unavailable: %s", req->fn, what, req->display,
                      why);
  pooled_handle *h = acquire_handle();
  if (!h)
    return kvik__fail(-ENOMEM, "%s: %s of \"%s\": curl_easy_init failed", req->fn, what,
                      req->display);
  unsigned max_attempts = (unsigned)kvik__setting(KVIK_SETTING_HTTP_MAX_ATTEMPTS), n = 0;
  for (;;) {
    if (kvik__cancelled()) {
      rc = -ECANCELED;
      break;
    }
    rc = attempt(h->curl, req, resp, why, sizeof why); /* -ECANCELED where on_progress stopped it */
    n++;
    if (rc == 0 || !retryable(rc) || n >= max_attempts) break;
    int64_t delay_ms = back_off_ms(n);
    tell_retry(req, n, max_attempts, rc, delay_ms);
    back_off(delay_ms);
  }
  release_handle(h);
  if (rc == 0) return 0;
  /* Only the work that cancelled it sees this: the failure that did came first (cancel.h). */
  if (rc == -ECANCELED)
    return kvik__fail(rc, "%s: %s of \"%s\": cancelled, as another task of the request failed",
                      req->fn, what, req->display);
  /* The sentence in parentheses is kvikio's, word for word: code written for it looks for it. */
  if (n >= max_attempts && retryable(rc)) {
    char reason[48];
    if (rc == -ETIMEDOUT) snprintf(reason, sizeof reason, "Operation timed out.");
    else if (KVIK_IS_HTTP_ERROR(rc))
      snprintf(reason, sizeof reason, "Got HTTP code %d.", KVIK_HTTP_STATUS(rc));
    else snprintf(reason, sizeof reason, "%s.", kvik_strerror(rc));
    return kvik__fail(rc,
                      "%s: %s of \"%s\": %s (KvikIO: HTTP request reached maximum number of "
                      "attempts (%u). Reason: %s)",
                      req->fn, what, req->display, why, n, reason);
  }
  if (n > 1)
    return kvik__fail(rc, "%s: %s of \"%s\": %s (gave up after %u attempts)", req->fn, what,
                      req->display, why, n);
  return kvik__fail(rc, "%s: %s of \"%s\": %s", req->fn, what, req->display, why);
}
