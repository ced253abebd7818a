/* Remote files: which server a URL names, what a request to it looks like, and reads that run
 * as requests against a source, like files (see "Remote files" in kvik.h). */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "error.h"
#include "http.h"
#include "init.h"
#include "request.h"
#include "sys.h"

struct kvik_remote {
  kvik__source source; /* reads run against it; close waits for them */
  kvik_remote_kind kind;
  int64_t size;
  char *url;          /* what requests go to; for WebHDFS without its query */
  char *display;      /* url without user, password and query, for messages */
  char *webhdfs_user; /* percent-encoded, or NULL */
  kvik__http_auth auth;
  int sign;               /* S3 requests are signed with auth */
  char *ca_file, *ca_dir; /* from the environment at open; see tls_from_env() */
};

void kvik_remote_options_init(kvik_remote_options *o) {
  if (o)
    *o = (kvik_remote_options){sizeof *o, KVIK_REMOTE_AUTO, -1, NULL, NULL, NULL, NULL, NULL, NULL};
}

/* ---- URLs ----------------------------------------------------------------------------------- */

static int has_prefix_nocase(const char *s, const char *prefix) {
  return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

static int is_http_url(const char *url) {
  return has_prefix_nocase(url, "http://") || has_prefix_nocase(url, "https://");
}

/* The host (with port) of an http(s) URL, into buf. */
static void url_host(const char *url, char *buf, size_t len) {
  const char *scheme_end = strstr(url, "://"), *start = scheme_end ? scheme_end + 3 : url;
  const char *end = start + strcspn(start, "/?#");
  const char *at = memrchr(start, '@', (size_t)(end - start)); /* a password may hold '@' */
  if (at) start = at + 1;
  snprintf(buf, len, "%.*s", (int)(end - start), start);
}

/* Whether an http(s) URL names a host: "http://" and "https:///key" do not, and would open
 * (given a size) only to fail at the first read. A port alone (":80") is no host either. */
static int has_host(const char *url) {
  char host[256];
  url_host(url, host, sizeof host);
  return host[0] != '\0' && host[0] != ':';
}

static const char *url_query(const char *url) { return strchr(url, '?'); }

/* The URL without user, password, query and fragment: what messages may show. */
static char *display_url(const char *url) {
  const char *scheme_end = strstr(url, "://"), *start = scheme_end ? scheme_end + 3 : url;
  const char *host_end = start + strcspn(start, "/?#");
  const char *at = memrchr(start, '@', (size_t)(host_end - start)); /* a password may hold '@' */
  size_t head = (size_t)(start - url), rest = strcspn(at ? at + 1 : start, "?#");
  char *out = kvik__malloc(head + rest + 1);
  if (!out) return NULL;
  memcpy(out, url, head);
  memcpy(out + head, at ? at + 1 : start, rest);
  out[head + rest] = '\0';
  return out;
}

/* Whether the query has parameter `name` (case-insensitive), and its value into buf. */
static int query_param(const char *url, const char *name, char *buf, size_t len) {
  const char *q = url_query(url);
  size_t n = strlen(name);
  for (const char *p = q; p; p = strchr(p + 1, '&')) {
    if (strncasecmp(p + 1, name, n) == 0 && p[1 + n] == '=') {
      if (buf) snprintf(buf, len, "%.*s", (int)strcspn(p + 2 + n, "&#"), p + 2 + n);
      return 1;
    }
  }
  return 0;
}

/* S3 hosts: BUCKET.s3.REGION.amazonaws.com, s3.REGION.amazonaws.com, s3.amazonaws.com and the
 * dash forms (s3-REGION). The region, when the host names one, goes into region. */
static int s3_host(const char *url, char *region, size_t len) {
  char host[256];
  url_host(url, host, sizeof host);
  host[strcspn(host, ":")] = '\0';
  size_t n = strlen(host);
  static const char suffix[] = ".amazonaws.com";
  if (n < sizeof suffix || strcasecmp(host + n - (sizeof suffix - 1), suffix) != 0) return 0;
  host[n - (sizeof suffix - 1)] = '\0';
  char *s3 = has_prefix_nocase(host, "s3.") || has_prefix_nocase(host, "s3-")
                 ? host
                 : strcasestr(host, ".s3.");
  if (!s3) s3 = strcasestr(host, ".s3-");
  if (!s3) return 0;
  if (*s3 == '.') s3++;
  region[0] = '\0';
  const char *r = s3 + 3; /* after "s3." or "s3-" */
  if (*r && strncasecmp(r, "dualstack.", 10) != 0)
    snprintf(region, len, "%.*s", (int)strcspn(r, "."), r);
  return 1;
}

static kvik_remote_kind detect_kind(const char *url) {
  char region[64];
  if (has_prefix_nocase(url, "s3://")) return KVIK_REMOTE_S3;
  if (query_param(url, "X-Amz-Signature", NULL, 0)) return KVIK_REMOTE_S3_PRESIGNED;
  if (strstr(url, "/webhdfs/v1/")) return KVIK_REMOTE_WEBHDFS;
  if (is_http_url(url) && s3_host(url, region, sizeof region)) return KVIK_REMOTE_S3;
  return KVIK_REMOTE_HTTP;
}

/* Append `text` percent-encoded (RFC 3986 unreserved characters and `keep` stay) to out. */
static size_t percent_encode(char *out, const char *text, const char *keep) {
  static const char hex[] = "0123456789ABCDEF";
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
    if (isalnum(*p) || strchr("-._~", *p) || (keep && strchr(keep, *p))) {
      if (out) out[n] = (char)*p;
      n++;
    } else {
      if (out) out[n] = '%', out[n + 1] = hex[*p >> 4], out[n + 2] = hex[*p & 15];
      n += 3;
    }
  }
  return n;
}

/* ---- opening -------------------------------------------------------------------------------- */

/* Options and the environment, in that order of precedence. */
typedef struct s3_config {
  const char *key_id, *secret, *token, *region, *endpoint;
} s3_config;

static const char *option_or_env(const char *option, const char *var) {
  const char *v = option ? option : getenv(var);
  return v && *v ? v : NULL;
}

static s3_config s3_config_of(const kvik_remote_options *o) {
  return (s3_config){option_or_env(o->aws_access_key_id, "AWS_ACCESS_KEY_ID"),
                     option_or_env(o->aws_secret_access_key, "AWS_SECRET_ACCESS_KEY"),
                     option_or_env(o->aws_session_token, "AWS_SESSION_TOKEN"),
                     option_or_env(o->aws_region, "AWS_DEFAULT_REGION"),
                     option_or_env(o->aws_endpoint_url, "AWS_ENDPOINT_URL")};
}

/* The https URL of s3://BUCKET/KEY: path-style under an endpoint, else AWS's virtual host. */
static int s3_url(const char *url, const char *shown, const s3_config *c, const char *region,
                  char **out) {
  const char *bucket = url + strlen("s3://"), *slash = strchr(bucket, '/');
  if (!slash || slash == bucket || !slash[1])
    return kvik__fail(-EINVAL, "kvik_remote_open(\"%s\"): expected s3://BUCKET/KEY", shown);
  int bucket_len = (int)(slash - bucket);
  /* Bucket names are letters, digits, '.', '-' and '_': anything else (user:password@ ...) would
   * end up in the request's path and in messages. */
  if (strspn(bucket, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") !=
      (size_t)bucket_len)
    return kvik__fail(
        -EINVAL, "kvik_remote_open: a bucket name holds letters, digits, '.', '-' and '_' only");
  size_t key_len = percent_encode(NULL, slash + 1, "/");
  size_t endpoint_len = c->endpoint ? strlen(c->endpoint) : 0;
  while (endpoint_len > 0 && c->endpoint[endpoint_len - 1] == '/') endpoint_len--;
  size_t len = endpoint_len + (size_t)bucket_len + strlen(region) + key_len + 64;
  char *s = kvik__malloc(len);
  if (!s) return kvik__fail(-ENOMEM, "kvik_remote_open(\"%s\"): out of memory", shown);
  int n = c->endpoint
              ? snprintf(s, len, "%.*s/%.*s/", (int)endpoint_len, c->endpoint, bucket_len, bucket)
              : snprintf(s, len, "https://%.*s.s3.%s.amazonaws.com/", bucket_len, bucket, region);
  s[n + (int)percent_encode(s + n, slash + 1, "/")] = '\0';
  *out = s;
  return 0;
}

static int s3_auth(kvik_remote *r, const char *shown, const s3_config *c, const char *region) {
  if (!c->key_id || !c->secret)
    return kvik__fail(
        -EINVAL,
        "kvik_remote_open(\"%s\"): S3 needs credentials: set AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY (or pass them in the options), or open it as KVIK_REMOTE_S3_PUBLIC",
        shown);
  int ok =
      asprintf(&r->auth.sigv4, "aws:amz:%s:s3", region) >= 0 &&
      asprintf(&r->auth.userpwd, "%s:%s", c->key_id, c->secret) >= 0 &&
      (!c->token || asprintf(&r->auth.token_header, "x-amz-security-token: %s", c->token) >= 0);
  if (!ok) return kvik__fail(-ENOMEM, "kvik_remote_open(\"%s\"): out of memory", shown);
  r->sign = 1;
  return 0;
}

/* The URL requests go to, and how they are signed. */
static int resolve_endpoint(kvik_remote *r, const char *url, const char *shown,
                            const kvik_remote_options *o) {
  int is_s3_scheme = has_prefix_nocase(url, "s3://");
  if (is_s3_scheme && r->kind != KVIK_REMOTE_S3 && r->kind != KVIK_REMOTE_S3_PUBLIC)
    return kvik__fail(
        -EINVAL, "kvik_remote_open(\"%s\"): an s3:// URL opens as S3 or public S3 only", shown);
  if (!is_s3_scheme && !is_http_url(url))
    return kvik__fail(-EINVAL, "kvik_remote_open(\"%s\"): not an http://, https:// or s3:// URL",
                      shown);
  if (!is_s3_scheme && !has_host(url))
    return kvik__fail(-EINVAL, "kvik_remote_open(\"%s\"): no host in the URL", shown);
  s3_config c = s3_config_of(o);
  char host_region[64] = "";
  const char *region = c.region;
  if (!region && !is_s3_scheme && s3_host(url, host_region, sizeof host_region) && host_region[0])
    region = host_region;
  if (!region) region = "us-east-1";
  int rc = 0;
  if (is_s3_scheme) rc = s3_url(url, shown, &c, region, &r->url);
  else if (r->kind == KVIK_REMOTE_WEBHDFS) r->url = kvik__strndup(url, strcspn(url, "?#"));
  else r->url = kvik__strdup(url);
  if (rc < 0) return rc;
  if (!r->url) return kvik__fail(-ENOMEM, "kvik_remote_open(\"%s\"): out of memory", shown);
  return r->kind == KVIK_REMOTE_S3 ? s3_auth(r, shown, &c, region) : 0;
}

/* The user.name of the options, percent-encoded, else the URL's own (encoded already). */
static int webhdfs_user(kvik_remote *r, const char *url, const char *shown,
                        const kvik_remote_options *o) {
  char from_url[256];
  if (o->webhdfs_user) {
    r->webhdfs_user = kvik__malloc(percent_encode(NULL, o->webhdfs_user, NULL) + 1);
    if (r->webhdfs_user)
      r->webhdfs_user[percent_encode(r->webhdfs_user, o->webhdfs_user, NULL)] = '\0';
  } else if (query_param(url, "user.name", from_url, sizeof from_url)) {
    r->webhdfs_user = kvik__strdup(from_url);
  } else {
    return 0;
  }
  return r->webhdfs_user ? 0
                         : kvik__fail(-ENOMEM, "kvik_remote_open(\"%s\"): out of memory", shown);
}

/* libcurl reads no CA variables itself (its command line tool does): kvik passes them on. */
static int tls_from_env(kvik_remote *r) {
  const char *file = option_or_env(NULL, "CURL_CA_BUNDLE"),
             *dir = option_or_env(NULL, "SSL_CERT_DIR");
  if (!file) file = option_or_env(NULL, "SSL_CERT_FILE");
  r->ca_file = file ? kvik__strdup(file) : NULL;
  r->ca_dir = dir ? kvik__strdup(dir) : NULL;
  return (file && !r->ca_file) || (dir && !r->ca_dir)
             ? kvik__fail(-ENOMEM, "kvik_remote_open: out of memory")
             : 0;
}

/* A request to the handle's server, for messages of `fn`. */
static kvik__http_request request_of(const kvik_remote *r, const char *fn, const char *label) {
  return (kvik__http_request){.fn = fn,
                              .display = r->display,
                              .url = r->url,
                              .auth = r->sign ? &r->auth : NULL,
                              .ca_file = r->ca_file,
                              .ca_dir = r->ca_dir,
                              .label = label,
                              .total = -1};
}

/* ---- requests ------------------------------------------------------------------------------ */

/* WebHDFS names the operation and its range in the query; "&user.name=" follows when given. */
static char *webhdfs_url(const kvik_remote *r, const char *op_and_range) {
  char *url;
  int n = asprintf(&url, "%s?%s%s%s", r->url, op_and_range, r->webhdfs_user ? "&user.name=" : "",
                   r->webhdfs_user ? r->webhdfs_user : "");
  return n < 0 ? NULL : url;
}

static int get_range(kvik_remote *r, const char *fn, char *dest, size_t size, int64_t offset) {
  kvik__http_request req = request_of(r, fn, "GET");
  req.offset = offset;
  req.length = size;
  req.range_header = 1;
  req.total = r->size; /* a 206 must name it; a 200 is the whole object where the range is */
  req.dest = dest;
  req.capacity = req.expect = size;
  kvik__http_response resp;
  if (r->kind != KVIK_REMOTE_WEBHDFS) return kvik__http_perform(&req, &resp);
  char op[96];
  snprintf(op, sizeof op, "op=OPEN&offset=%lld&length=%zu", (long long)offset, size);
  char *url = webhdfs_url(r, op);
  if (!url) return kvik__fail(-ENOMEM, "%s: OPEN of \"%s\": out of memory", fn, r->display);
  req.url = url;
  req.label = "OPEN";
  req.range_header = 0; /* the range is in the query: the data node answers 200 with exactly it */
  int rc = kvik__http_perform(&req, &resp);
  free(url);
  return rc;
}

/* The source's transfer: one request per range. Reads never reach past the size, so a body
 * shorter than the range is an error, never the end of the object. */
static int fetch(void *self, kvik__op op, char *host, size_t size, int64_t offset, size_t *done) {
  (void)op; /* remote objects are read only: requests are reads */
  *done = 0;
  if (size == 0) return 0;
  int rc = get_range(self, "remote read", host, size, offset);
  if (rc == 0) *done = size;
  return rc;
}

/* GETFILESTATUS answers {"FileStatus":{..."length":N,...}}. */
static int webhdfs_size(kvik_remote *r, int64_t *size) {
  static const char fn[] = "kvik_remote_open";
  char body[4096], *url = webhdfs_url(r, "op=GETFILESTATUS");
  if (!url) return kvik__fail(-ENOMEM, "%s(\"%s\"): out of memory", fn, r->display);
  kvik__http_request req = request_of(r, fn, "GETFILESTATUS");
  req.url = url;
  req.dest = body;
  req.capacity = sizeof body - 1;
  req.expect = KVIK__HTTP_ANY_SIZE;
  kvik__http_response resp;
  int rc = kvik__http_perform(&req, &resp);
  free(url);
  if (rc < 0) return rc;
  body[resp.received] = '\0';
  const char *length = strstr(body, "\"length\"");
  const char *colon = length ? strchr(length, ':') : NULL;
  char *end;
  long long n = colon ? strtoll(colon + 1, &end, 10) : -1;
  if (!colon || end == colon + 1 || n < 0)
    return kvik__fail(KVIK_EREMOTE,
                      "%s(\"%s\"): GETFILESTATUS answered without a file length: Regular "
                      "expression search failed. Cannot extract file length from the JSON "
                      "response.",
                      fn, r->display);
  *size = n;
  return 0;
}

/* A presigned URL signs one method: GET. A one-byte range tells the size in Content-Range; an
 * empty object answers 416 with "bytes * /0" (no space). */
static int presigned_size(kvik_remote *r, int64_t *size) {
  char byte;
  kvik__http_request req = request_of(r, "kvik_remote_open", "GET");
  req.length = 1;
  req.range_header = 1;
  req.dest = &byte;
  req.capacity = 1;
  req.expect = KVIK__HTTP_ANY_SIZE;
  kvik__http_response resp;
  int rc = kvik__http_perform(&req, &resp);
  if ((rc == 0 || resp.status == 416) && resp.range_total >= 0) {
    *size = resp.range_total;
    return 0;
  }
  return rc < 0 ? rc
                : kvik__fail(
                      KVIK_EREMOTE,
                      "kvik_remote_open(\"%s\"): no Content-Range in the answer to a range request",
                      r->display);
}

static int head_size(kvik_remote *r, int64_t *size) {
  kvik__http_request req = request_of(r, "kvik_remote_open", "HEAD");
  req.head = 1;
  kvik__http_response resp;
  int rc = kvik__http_perform(&req, &resp);
  if (rc < 0) return rc;
  if (resp.content_length < 0 && resp.content_length_text[0])
    return kvik__fail(
        KVIK_EREMOTE,
        "kvik_remote_open(\"%s\"): HEAD answered with Content-Length \"%s\", which is "
        "no byte count; pass the size in the options",
        r->display, resp.content_length_text);
  if (resp.content_length < 0)
    return kvik__fail(
        KVIK_EREMOTE,
        "kvik_remote_open(\"%s\"): HEAD answered without Content-Length; pass the size in "
        "the options",
        r->display);
  *size = resp.content_length;
  return 0;
}

static int learn_size(kvik_remote *r, int64_t known) {
  if (known >= 0) {
    r->size = known;
    return 0;
  }
  switch (r->kind) {
  case KVIK_REMOTE_WEBHDFS: return webhdfs_size(r, &r->size);
  case KVIK_REMOTE_S3_PRESIGNED: return presigned_size(r, &r->size);
  default: return head_size(r, &r->size);
  }
}

/* ---- handle --------------------------------------------------------------------------------- */

static void free_remote(kvik_remote *r) {
  free(r->url);
  free(r->display);
  free(r->webhdfs_user);
  free(r->ca_file);
  free(r->ca_dir);
  free(r->auth.sigv4);
  if (r->auth.userpwd) explicit_bzero(r->auth.userpwd, strlen(r->auth.userpwd));
  free(r->auth.userpwd);
  if (r->auth.token_header) explicit_bzero(r->auth.token_header, strlen(r->auth.token_header));
  free(r->auth.token_header);
  free(r);
}

static int check_options(const char *shown, const kvik_remote_options *o) {
  if (o->struct_size < sizeof *o)
    return kvik__fail(-EINVAL,
                      "kvik_remote_open(\"%s\"): options.struct_size %zu, expected %zu (use "
                      "kvik_remote_options_init)",
                      shown, o->struct_size, sizeof *o);
  if ((unsigned)o->kind > KVIK_REMOTE_HTTP)
    return kvik__fail(-EINVAL, "kvik_remote_open(\"%s\"): unknown kind %d", shown, (int)o->kind);
  if (o->size < -1)
    return kvik__fail(-EINVAL, "kvik_remote_open(\"%s\"): negative size %lld", shown,
                      (long long)o->size);
  return 0;
}

/* Everything up to the size: the kind, the endpoint, the display name. */
static int configure(kvik_remote *r, const char *url, const char *shown,
                     const kvik_remote_options *o) {
  r->kind = o->kind == KVIK_REMOTE_AUTO ? detect_kind(url) : o->kind;
  int rc = resolve_endpoint(r, url, shown, o);
  if (rc < 0) return rc;
  r->display = display_url(r->url);
  if (!r->display) return kvik__fail(-ENOMEM, "kvik_remote_open(\"%s\"): out of memory", shown);
  rc = tls_from_env(r);
  if (rc == 0 && r->kind == KVIK_REMOTE_WEBHDFS) rc = webhdfs_user(r, url, shown, o);
  return rc;
}

/* kvik_remote_open() once the URL as messages may show it (`shown`) is known. */
static int open_remote(const char *url, const char *shown, const kvik_remote_options *o,
                       kvik_remote **out) {
  int rc = check_options(shown, o);
  if (rc == 0) rc = kvik__init();
  if (rc < 0) return rc;
  char why[256];
  if (!kvik__http_supported(why, sizeof why))
    return kvik__fail(KVIK_ENOREMOTE, "kvik_remote_open(\"%s\"): %s", shown, why);
  kvik_remote *r = kvik__calloc(1, sizeof *r);
  if (!r) return kvik__fail(-ENOMEM, "kvik_remote_open(\"%s\"): out of memory", shown);
  rc = configure(r, url, shown, o);
  if (rc == 0) rc = learn_size(r, o->size);
  if (rc < 0) {
    free_remote(r);
    return rc;
  }
  kvik_io_backend backend =
      r->kind == KVIK_REMOTE_WEBHDFS ? KVIK_IO_REMOTE_HDFS : KVIK_IO_REMOTE_HTTP;
  r->source = (kvik__source){.transfer = fetch, .self = r, .name = r->display, .backend = backend};
  *out = r;
  return 0;
}

int kvik_remote_open(const char *url, const kvik_remote_options *options, kvik_remote **out) {
  if (out) *out = NULL;
  if (!url || !out)
    return kvik__fail(-EINVAL, "kvik_remote_open: NULL %s", !url ? "URL" : "output handle");
  kvik_remote_options defaults;
  kvik_remote_options_init(&defaults);
  char *shown = display_url(url); /* the URL may carry credentials: messages show this */
  if (!shown) return kvik__fail(-ENOMEM, "kvik_remote_open: out of memory");
  int rc = open_remote(url, shown, options ? options : &defaults, out);
  free(shown);
  return rc;
}

int kvik_remote_close(kvik_remote *r) {
  if (!r) return kvik__fail(-EINVAL, "kvik_remote_close: NULL handle");
  if (kvik__owner_close(&r->source.owner) < 0)
    return kvik__fail(-EBADF, "kvik_remote_close(\"%s\"): already closed", r->display);
  return 0;
}

void kvik_remote_free(kvik_remote *r) {
  if (!r) return;
  if (!kvik__owner_is_closed(&r->source.owner)) kvik_remote_close(r);
  free_remote(r);
}

int64_t kvik_remote_size(const kvik_remote *r) {
  return r ? r->size : kvik__fail(-EINVAL, "kvik_remote_size: NULL handle");
}

int kvik_remote_kind_of(const kvik_remote *r) {
  return r ? (int)r->kind : kvik__fail(-EINVAL, "kvik_remote_kind_of: NULL handle");
}

const char *kvik_remote_url(const kvik_remote *r) { return r ? r->display : NULL; }

int kvik_remote_supported(char *detail, size_t len) { return kvik__http_supported(detail, len); }

/* Reads stop at the end of the object, as pread(2) does at the end of a file. The request is
 * checked as the caller asked it first: clipped to nothing, a NULL buffer or an overflowing range
 * past the end would pass as a read of nothing, where kvik_file_read refuses them. The call is
 * counted for the monitors (stats.h) with the size asked for; as failed if refused here. */
static int clip(const kvik_remote *r, kvik__request *req) {
  kvik_io_backend backend = r ? r->source.backend : KVIK_IO_REMOTE_HTTP;
  req->stats = kvik__stats_observe(backend, KVIK__READ, req->size);
  if (!r) return kvik__stats_refuse(&req->stats, kvik__fail(-EINVAL, "%s: NULL handle", req->fn));
  int rc = kvik__request_check_args(req);
  if (rc < 0) return kvik__stats_refuse(&req->stats, rc);
  if (req->offset >= r->size) req->size = 0;
  else if (req->size > (uint64_t)(r->size - req->offset))
    req->size = (size_t)(r->size - req->offset);
  return 0;
}

ssize_t kvik_remote_read(kvik_remote *r, void *buf, size_t size, int64_t offset) {
  kvik__request req = {.fn = "kvik_remote_read",
                       .source = r ? &r->source : NULL,
                       .op = KVIK__READ,
                       .buf = buf,
                       .size = size,
                       .offset = offset};
  int rc = clip(r, &req);
  return rc < 0 ? rc : kvik__request_run(&req);
}

int kvik_remote_pread(kvik_remote *r, void *buf, size_t size, int64_t offset, size_t task_size,
                      kvik_future **future) {
  if (future) *future = NULL;
  kvik__request req = {.fn = "kvik_remote_pread",
                       .source = r ? &r->source : NULL,
                       .op = KVIK__READ,
                       .buf = buf,
                       .size = size,
                       .offset = offset,
                       .task_size = task_size};
  int rc = clip(r, &req);
  return rc < 0 ? rc : kvik__request_start(&req, 0, future);
}
