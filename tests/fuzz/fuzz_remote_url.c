/* kvik_remote_open's URL parsing: classification, S3 and WebHDFS URL building, the display form
 * that messages show. options.size is set, so opening makes no request (src/remote.c,
 * learn_size), and nothing is read from the handle. Input: one byte choosing the kind (and
 * whether an S3 endpoint is given), then the URL.
 *
 * Checks: never a crash; an opened handle's kvik_remote_url() has no user information ('@' in
 * the authority) and no query or fragment; the secret key and session token of the options
 * never show, in the URL or in kvik_last_error() after a failure, unless the URL's own visible
 * part (without user information, query and fragment) contains them.
 *
 * Its two findings, now fixed and kept as seeds (README.md, "Findings"): user information ended
 * at the first '@' of the authority, and an s3:// URL's user information became part of the
 * bucket. */
#include <errno.h>
#include <stdint.h>
#include <strings.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SECRET "SECRETKEY"
#define TOKEN "SESSIONTOKEN"

/* What of `url` may be shown, computed independently of src/remote.c: after "://" the authority
 * runs to the first '/', '?' or '#'; user information ends at its last '@' (RFC 3986: '@' is not
 * allowed in the host, and WHATWG URL parsers split there); query and fragment go, except in an
 * s3:// URL. */
static char *visible_part(const char *url) {
  const char *scheme_end = strstr(url, "://"), *start = scheme_end ? scheme_end + 3 : url;
  const char *host_end = start + strcspn(start, "/?#");
  int s3 = strncasecmp(url, "s3://", 5) == 0;
  const char *at = NULL;
  for (const char *p = start; p < host_end; p++)
    if (*p == '@') at = p;
  const char *rest = at ? at + 1 : start;
  /* An s3:// key is a key: '?' and '#' in it are percent-encoded and requested, not dropped. */
  size_t head = (size_t)(start - url), tail = s3 ? strlen(rest) : strcspn(rest, "?#");
  char *out = malloc(head + tail + 1);
  if (!out) abort();
  memcpy(out, url, head);
  memcpy(out + head, rest, tail);
  out[head + tail] = '\0';
  return out;
}

/* How many '@' the authority of `url` holds. */
static int authority_ats(const char *url) {
  const char *scheme_end = strstr(url, "://"), *start = scheme_end ? scheme_end + 3 : url;
  size_t n = strcspn(start, "/?#");
  int ats = 0;
  for (size_t i = 0; i < n; i++) ats += start[i] == '@';
  return ats;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static int started;
  if (!started) {
    started = 1;
    if (kvik_setting_set(KVIK_SETTING_NUM_THREADS, 2) != 0) abort();
  }
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  o.kind = (kvik_remote_kind)(data[0] % 6);
  o.size = 100;
  o.aws_access_key_id = "AKIDFUZZ";
  o.aws_secret_access_key = SECRET;
  o.aws_session_token = TOKEN;
  o.aws_region = (data[0] / 6) % 3 == 2 ? NULL : "eu-west-1";
  o.aws_endpoint_url = (data[0] / 6) % 2 == 0 ? "http://127.0.0.1:1" : NULL;
  o.webhdfs_user = (data[0] / 12) % 2 ? "fuzz user" : NULL;
  char *url = fuzz_string(data + 1, size - 1);
  char *visible = visible_part(url);
  int secret_visible = strstr(visible, SECRET) != NULL, token_visible = strstr(visible, TOKEN) != NULL;

  kvik_remote *r = (kvik_remote *)(uintptr_t)1;
  int rc = kvik_remote_open(url, &o, &r);
  if (rc == 0) {
    FUZZ_CHECK(r != NULL && r != (kvik_remote *)(uintptr_t)1, "no handle for \"%s\"", url);
    const char *shown = kvik_remote_url(r);
    FUZZ_CHECK(shown != NULL, "NULL kvik_remote_url for \"%s\"", url);
    FUZZ_CHECK(authority_ats(shown) == 0, "user information shown: \"%s\" for \"%s\"", shown, url);
    FUZZ_CHECK(strpbrk(shown, "?#") == NULL, "query or fragment shown: \"%s\" for \"%s\"", shown, url);
    FUZZ_CHECK(secret_visible || !strstr(shown, SECRET), "secret shown: \"%s\" for \"%s\"", shown, url);
    FUZZ_CHECK(token_visible || !strstr(shown, TOKEN), "token shown: \"%s\" for \"%s\"", shown, url);
    FUZZ_CHECK(kvik_remote_size(r) == 100, "size %lld", (long long)kvik_remote_size(r));
    int kind = kvik_remote_kind_of(r);
    FUZZ_CHECK(kind > KVIK_REMOTE_AUTO && kind <= KVIK_REMOTE_HTTP && (o.kind == KVIK_REMOTE_AUTO || kind == (int)o.kind),
               "kind %d asked %d for \"%s\"", kind, (int)o.kind, url);
    FUZZ_CHECK(kvik_remote_close(r) == 0, "close");
    FUZZ_CHECK(kvik_remote_close(r) == -EBADF, "second close");
    kvik_remote_free(r);
  } else {
    FUZZ_CHECK(rc == -EINVAL || rc == KVIK_ENOREMOTE, "kvik_remote_open(\"%s\") = %d", url, rc);
    const char *msg = kvik_last_error();
    FUZZ_CHECK(msg[0] != '\0', "no message for \"%s\"", url);
    FUZZ_CHECK(secret_visible || !strstr(msg, SECRET), "secret in message for \"%s\": %s", url, msg);
    FUZZ_CHECK(token_visible || !strstr(msg, TOKEN), "token in message for \"%s\": %s", url, msg);
  }
  free(visible);
  free(url);
  return 0;
}
