/* Remote files against real servers on loopback, started by tests/remote/servers.py, which sets
 * the KVIK_TEST_* variables: nginx for range reads, a fault server, a WebHDFS responder, moto
 * for S3. A server that could not start leaves its variables unset and its cases skip. Every
 * read is compared byte for byte with the file the server serves. Device memory comes from the
 * fake CUDA driver in CI, from the GPU on a GPU machine; without a driver those cases skip. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "test.h"
#include "test_cuda.h"

static const char *const objects[] = {"empty", "small", "medium", "large"};
static int have_cuda;
/* Cases in a child process start threads there, which ThreadSanitizer cannot follow. */
#ifdef KVIK_TEST_NO_FORK
static const int children_allowed = 0;
#else
static const int children_allowed = 1;
#endif

/* ---- helpers ------------------------------------------------------------------------------- */

static const char *env_or_null(const char *name) {
  const char *v = getenv(name);
  return v && *v ? v : NULL;
}

static unsigned char *load_object(const char *name, size_t *size) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", getenv("KVIK_TEST_REMOTE_DATA"), name);
  FILE *f = fopen(path, "rb");
  if (!f) FAIL_AT("cannot open %s: %s", path, strerror(errno));
  fseek(f, 0, SEEK_END);
  *size = (size_t)ftell(f);
  rewind(f);
  unsigned char *data = malloc(*size + 1);
  if (fread(data, 1, *size, f) != *size) FAIL_AT("cannot read %s", path);
  fclose(f);
  return data;
}

/* The body of GET base_url + path, over a plain socket (the fault server's own counters). */
static void fault_server_get(const char *path, char *body, size_t len) {
  const char *url = getenv("KVIK_TEST_FAULT_URL");
  int port = atoi(strrchr(url, ':') + 1);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) FAIL_AT("connect to %s", url);
  char req[512], resp[4096];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
  if (write(fd, req, (size_t)n) != n) FAIL_AT("send to %s", url);
  size_t got = 0;
  ssize_t r;
  while (got < sizeof resp - 1 && (r = read(fd, resp + got, sizeof resp - 1 - got)) > 0) got += (size_t)r;
  close(fd);
  resp[got] = '\0';
  const char *start = strstr(resp, "\r\n\r\n");
  snprintf(body, len, "%s", start ? start + 4 : "");
}

static long fault_server_requests(void) {
  char body[64];
  fault_server_get("/_requests", body, sizeof body);
  return atol(body);
}

static kvik_remote *open_ok(const char *url, const kvik_remote_options *o) {
  kvik_remote *r = NULL;
  int rc = kvik_remote_open(url, o, &r);
  if (rc < 0) FAIL_AT("kvik_remote_open(%s): %s: %s", url, kvik_err_name(rc), kvik_last_error());
  return r;
}

static char *url_of(const char *base, const char *name) {
  char *url = malloc(strlen(base) + strlen(name) + 2);
  sprintf(url, "%s/%s", base, name);
  return url;
}

/* ---- reads compared with the source ------------------------------------------------------ */

/* Read [offset, offset + size) into host memory, through read or pread, and compare. */
static void check_host_range(kvik_remote *r, const unsigned char *ref, size_t n, size_t size, int64_t offset,
                             int use_future) {
  size_t expect = (uint64_t)offset >= n ? 0 : (size < n - (size_t)offset ? size : n - (size_t)offset);
  unsigned char *buf = malloc(size + 1);
  memset(buf, 0xA5, size + 1);
  ssize_t got;
  if (use_future) {
    kvik_future *f;
    ASSERT_OK(kvik_remote_pread(r, buf, size, offset, 1 << 20, &f));
    got = kvik_future_wait(f);
    kvik_future_free(f);
  } else {
    got = kvik_remote_read(r, buf, size, offset);
  }
  if (got != (ssize_t)expect)
    FAIL_AT("%s: %zu bytes at %lld read %zd, expected %zu", kvik_remote_url(r), size, (long long)offset, got, expect);
  if (memcmp(buf, ref + offset, expect) != 0) FAIL_AT("%s: bytes differ at %lld", kvik_remote_url(r), (long long)offset);
  if (buf[expect] != 0xA5) FAIL_AT("%s: a byte past the read was written", kvik_remote_url(r));
  free(buf);
}

static void check_device_range(kvik_remote *r, const unsigned char *ref, size_t n, size_t size, int64_t offset) {
  size_t expect = (uint64_t)offset >= n ? 0 : (size < n - (size_t)offset ? size : n - (size_t)offset);
  CUdeviceptr dev;
  CU_OK(cu.cuMemAlloc_v2(&dev, size + 1));
  ASSERT_EQ(kvik_remote_read(r, (void *)dev, size, offset), expect);
  unsigned char *back = malloc(size + 1);
  CU_OK(cu.cuMemcpyDtoH_v2(back, dev, expect));
  if (memcmp(back, ref + offset, expect) != 0)
    FAIL_AT("%s: device bytes differ at %lld", kvik_remote_url(r), (long long)offset);
  free(back);
  CU_OK(cu.cuMemFree_v2(dev));
}

/* The whole object, then random ranges (some past its end) into host and device memory. */
static void check_reads(kvik_remote *r, const unsigned char *ref, size_t n, uint64_t seed) {
  ASSERT_EQ(kvik_remote_size(r), n);
  check_host_range(r, ref, n, n, 0, 0);
  if (have_cuda && n > 0) check_device_range(r, ref, n, n, 0);
  uint64_t rng = seed | 1;
  for (int i = 0; i < 12; i++) {
    int64_t offset = (int64_t)test_below(&rng, n + 16);
    size_t size = (size_t)test_below(&rng, n - ((uint64_t)offset < n ? (size_t)offset : n) + 64) + 1;
    check_host_range(r, ref, n, size, offset, i % 2);
    if (have_cuda && i % 3 == 0) check_device_range(r, ref, n, size, offset);
  }
}

static void check_object(const char *url, const kvik_remote_options *o, const char *name, kvik_remote_kind kind) {
  size_t n;
  unsigned char *ref = load_object(name, &n);
  kvik_remote *r = open_ok(url, o);
  ASSERT_EQ(kvik_remote_kind_of(r), kind);
  check_reads(r, ref, n, n + 7);
  kvik_remote_free(r);
  free(ref);
}

/* Every object, at BASE/NAME, opened with AUTO. */
static void check_every_object(const char *base, kvik_remote_kind kind) {
  for (size_t i = 0; i < sizeof objects / sizeof *objects; i++) {
    char *url = url_of(base, objects[i]);
    check_object(url, NULL, objects[i], kind);
    free(url);
  }
}

/* ---- HTTP (nginx) -------------------------------------------------------------------------- */

/* Many reads in flight at once, on a small pool of connections. */
static void test_http_concurrent(const char *base, int64_t connections) {
  size_t n;
  unsigned char *ref = load_object("large", &n);
  char *url = url_of(base, "large");
  int64_t threads_before, connections_before;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_NUM_THREADS, &threads_before));
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_REMOTE_CONNECTIONS, &connections_before));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 6));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_REMOTE_CONNECTIONS, connections));
  kvik_remote *r = open_ok(url, NULL);
  enum { READS = 8 };
  kvik_future *futures[READS];
  unsigned char *bufs[READS];
  int64_t offsets[READS];
  size_t sizes[READS];
  uint64_t rng = 99;
  for (int i = 0; i < READS; i++) {
    offsets[i] = (int64_t)test_below(&rng, n / 2);
    sizes[i] = (size_t)test_below(&rng, n / 2) + 1;
    bufs[i] = malloc(sizes[i]);
    ASSERT_OK(kvik_remote_pread(r, bufs[i], sizes[i], offsets[i], 1 << 20, &futures[i]));
  }
  for (int i = 0; i < READS; i++) {
    ASSERT_EQ(kvik_future_wait(futures[i]), sizes[i]);
    ASSERT(memcmp(bufs[i], ref + offsets[i], sizes[i]) == 0);
    kvik_future_free(futures[i]);
    free(bufs[i]);
  }
  kvik_remote_free(r);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, threads_before));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_REMOTE_CONNECTIONS, connections_before));
  free(url);
  free(ref);
}

static double seconds_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Seconds that four 1 MiB tasks, on four threads, take from a server that answers each GET after
 * 0.3 s. */
static double four_slow_tasks(const char *fault) {
  char url[512];
  snprintf(url, sizeof url, "%s/slow-0.3/medium", fault);
  kvik_remote *r = open_ok(url, NULL);
  char *buf = malloc(4 << 20);
  double start = seconds_now();
  kvik_future *f;
  ASSERT_OK(kvik_remote_pread(r, buf, 4 << 20, 0, 1 << 20, &f));
  ASSERT_EQ(kvik_future_wait(f), 4 << 20);
  double took = seconds_now() - start;
  kvik_future_free(f);
  free(buf);
  kvik_remote_free(r);
  return took;
}

/* kvikio's remote_io_max_concurrent_requests caps the requests in flight too: at 1, the four
 * tasks run one after another. */
static void test_max_concurrent_requests(const char *fault) {
  int64_t threads_before;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_NUM_THREADS, &threads_before));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS, 1));
  ASSERT(four_slow_tasks(fault) >= 4 * 0.3);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS, 0)); /* no limit */
  ASSERT(four_slow_tasks(fault) < 4 * 0.3);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS, 256));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, threads_before));
}

/* ---- the handle ---------------------------------------------------------------------------- */

static void test_known_size_asks_nothing(const char *fault) {
  size_t n;
  unsigned char *ref = load_object("small", &n);
  char *url = url_of(fault, "ok/small");
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  o.size = (int64_t)n;
  long before = fault_server_requests();
  kvik_remote *r = open_ok(url, &o);
  ASSERT_EQ(fault_server_requests(), before + 1); /* the count request itself */
  check_host_range(r, ref, n, n, 0, 0);
  kvik_remote_free(r);
  free(url);
  free(ref);
}

static void test_lifetime_and_arguments(const char *base) {
  kvik_remote *r;
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  ASSERT_FAILS(kvik_remote_open(NULL, NULL, &r), -EINVAL, "NULL URL");
  ASSERT_FAILS(kvik_remote_open("http://x/y", NULL, NULL), -EINVAL, "NULL output");
  ASSERT_FAILS(kvik_remote_open("ftp://127.0.0.1/x", NULL, &r), -EINVAL, "not an http://");
  ASSERT_FAILS(kvik_remote_open("no-scheme", NULL, &r), -EINVAL, "not an http://");
  /* Messages of a refused open show no credentials either. */
  ASSERT_FAILS(kvik_remote_open("ftp://user:pw@host/x?X-Amz-Signature=ff", NULL, &r), -EINVAL, "\"ftp://host/x\"");
  o.kind = KVIK_REMOTE_S3;
  unsetenv("AWS_ACCESS_KEY_ID");
  ASSERT_FAILS(kvik_remote_open("https://h/k?X-Amz-Signature=ff", &o, &r), -EINVAL, "\"https://h/k\"");
  kvik_remote_options_init(&o);
  ASSERT_FAILS(kvik_remote_open("s3://bucket-only", &o, &r), -EINVAL, "s3://BUCKET/KEY");
  o.kind = KVIK_REMOTE_WEBHDFS;
  ASSERT_FAILS(kvik_remote_open("s3://b/k", &o, &r), -EINVAL, "S3 or public S3 only");
  o.kind = (kvik_remote_kind)42;
  ASSERT_FAILS(kvik_remote_open("http://x/y", &o, &r), -EINVAL, "unknown kind 42");
  kvik_remote_options_init(&o);
  o.size = -2;
  ASSERT_FAILS(kvik_remote_open("http://x/y", &o, &r), -EINVAL, "negative size");
  kvik_remote_options_init(&o);
  o.struct_size = 8;
  ASSERT_FAILS(kvik_remote_open("http://x/y", &o, &r), -EINVAL, "struct_size");
  ASSERT(r == NULL);

  char *url = url_of(base, "small");
  r = open_ok(url, NULL);
  char buf[16];
  ASSERT_FAILS(kvik_remote_read(r, NULL, 5, 0), -EINVAL, "NULL buffer");
  ASSERT_FAILS(kvik_remote_read(r, buf, 5, -1), -EINVAL, "negative offset");
  ASSERT_OK(kvik_remote_close(r));
  ASSERT_FAILS(kvik_remote_close(r), -EBADF, "already closed");
  ASSERT_FAILS(kvik_remote_read(r, buf, 5, 0), -EBADF, "closed");
  ASSERT_EQ(kvik_remote_size(r), 1000); /* what it learnt stays */
  kvik_remote_free(r);
  kvik_remote_free(NULL);
  ASSERT_FAILS(kvik_remote_size(NULL), -EINVAL, "NULL");
  free(url);
}

/* Kinds KVIK_REMOTE_AUTO finds, checked without a request: the size is given. */
static void test_detection(void) {
  static const struct {
    const char *url;
    kvik_remote_kind kind;
    const char *shown;
  } cases[] = {
      {"https://user:pw@example.com/data.bin?token=abc", KVIK_REMOTE_HTTP, "https://example.com/data.bin"},
      {"http://user:p@ss@example.com:8080/x", KVIK_REMOTE_HTTP, "http://example.com:8080/x"},
      {"http://nn:9870/webhdfs/v1/a/b?user.name=me", KVIK_REMOTE_WEBHDFS, "http://nn:9870/webhdfs/v1/a/b"},
      {"https://b.s3.eu-west-1.amazonaws.com/k?X-Amz-Signature=ff&X-Amz-Credential=AKID", KVIK_REMOTE_S3_PRESIGNED,
       "https://b.s3.eu-west-1.amazonaws.com/k"},
      {"https://b.s3.eu-west-1.amazonaws.com/k", KVIK_REMOTE_S3, "https://b.s3.eu-west-1.amazonaws.com/k"},
      {"s3://bucket/dir/a b+c.bin", KVIK_REMOTE_S3, "http://127.0.0.1:1/bucket/dir/a%20b%2Bc.bin"},
  };
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  o.size = 10;
  o.aws_access_key_id = "AKIDEXAMPLE";
  o.aws_secret_access_key = "SECRET";
  o.aws_endpoint_url = "http://127.0.0.1:1/";
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    kvik_remote *r = open_ok(cases[i].url, &o);
    ASSERT_EQ(kvik_remote_kind_of(r), cases[i].kind);
    if (strcmp(kvik_remote_url(r), cases[i].shown) != 0)
      FAIL_AT("%s is shown as %s, expected %s", cases[i].url, kvik_remote_url(r), cases[i].shown);
    kvik_remote_free(r);
  }
  kvik_remote *r;
  ASSERT_FAILS(kvik_remote_open("s3://user:SECRET@bucket/key", &o, &r), -EINVAL, "bucket name");
  ASSERT(!strstr(kvik_last_error(), "SECRET"));
  /* S3 without credentials is refused, naming what to set. */
  kvik_remote_options_init(&o);
  o.size = 10;
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  ASSERT_FAILS(kvik_remote_open("s3://bucket/key", &o, &r), -EINVAL, "AWS_ACCESS_KEY_ID");
  o.kind = KVIK_REMOTE_S3_PUBLIC;
  o.aws_endpoint_url = "http://127.0.0.1:1";
  r = open_ok("s3://bucket/key", &o);
  ASSERT_EQ(kvik_remote_kind_of(r), KVIK_REMOTE_S3_PUBLIC);
  kvik_remote_free(r);
}

/* ---- S3 (moto) ----------------------------------------------------------------------------- */

static kvik_remote_options s3_options(const char *secret) {
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  o.aws_access_key_id = getenv("KVIK_TEST_S3_ACCESS_KEY_ID");
  o.aws_secret_access_key = secret;
  o.aws_region = getenv("KVIK_TEST_S3_REGION");
  o.aws_endpoint_url = getenv("KVIK_TEST_S3_ENDPOINT");
  return o;
}

static char *s3_url(const char *name) {
  char *url = malloc(strlen(getenv("KVIK_TEST_S3_BUCKET")) + strlen(name) + 8);
  sprintf(url, "s3://%s/%s", getenv("KVIK_TEST_S3_BUCKET"), name);
  return url;
}

static void assert_no_credentials(const char *text) {
  const char *secrets[] = {getenv("KVIK_TEST_S3_SECRET_ACCESS_KEY"), getenv("KVIK_TEST_S3_ACCESS_KEY_ID"),
                           "X-Amz-Signature", "wrong-secret"};
  for (size_t i = 0; i < sizeof secrets / sizeof *secrets; i++)
    if (strstr(text, secrets[i])) FAIL_AT("\"%s\" appears in: %s", secrets[i], text);
}

static void test_s3_signed(void) {
  kvik_remote_options o = s3_options(getenv("KVIK_TEST_S3_SECRET_ACCESS_KEY"));
  for (size_t i = 0; i < sizeof objects / sizeof *objects; i++) {
    char *url = s3_url(objects[i]);
    check_object(url, &o, objects[i], KVIK_REMOTE_S3);
    free(url);
  }
  /* The same from the environment, as AWS tools take it. */
  char *url = s3_url("medium");
  setenv("AWS_ACCESS_KEY_ID", getenv("KVIK_TEST_S3_ACCESS_KEY_ID"), 1);
  setenv("AWS_SECRET_ACCESS_KEY", getenv("KVIK_TEST_S3_SECRET_ACCESS_KEY"), 1);
  setenv("AWS_DEFAULT_REGION", getenv("KVIK_TEST_S3_REGION"), 1);
  setenv("AWS_ENDPOINT_URL", getenv("KVIK_TEST_S3_ENDPOINT"), 1);
  check_object(url, NULL, "medium", KVIK_REMOTE_S3);
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("AWS_DEFAULT_REGION");
  unsetenv("AWS_ENDPOINT_URL");
  free(url);
}

static void test_s3_refusals(void) {
  kvik_remote *r;
  char *url = s3_url("medium");
  kvik_remote_options o = s3_options("wrong-secret");
  ASSERT_FAILS(kvik_remote_open(url, &o, &r), KVIK_EHTTP_BASE - 403, "HTTP 403 Forbidden");
  assert_no_credentials(kvik_last_error());
  o = s3_options(getenv("KVIK_TEST_S3_SECRET_ACCESS_KEY"));
  o.aws_access_key_id = "AKIDUNKNOWN0000000000";
  ASSERT_FAILS(kvik_remote_open(url, &o, &r), KVIK_EHTTP_BASE - 403, "HTTP 403");
  /* A wrong secret fails reads too, not only the size request. */
  o = s3_options("wrong-secret");
  o.size = 100;
  r = open_ok(url, &o);
  char buf[100];
  ASSERT_FAILS(kvik_remote_read(r, buf, sizeof buf, 0), KVIK_EHTTP_BASE - 403, "GET bytes 0-99");
  assert_no_credentials(kvik_last_error());
  kvik_remote_free(r);
  free(url);
  url = s3_url("no-such-object");
  o = s3_options(getenv("KVIK_TEST_S3_SECRET_ACCESS_KEY"));
  ASSERT_FAILS(kvik_remote_open(url, &o, &r), KVIK_EHTTP_BASE - 404, "HTTP 404 Not Found");
  free(url);
}

static void test_s3_public(const char *endpoint) {
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  o.kind = KVIK_REMOTE_S3_PUBLIC;
  o.aws_endpoint_url = endpoint;
  for (size_t i = 0; i < sizeof objects / sizeof *objects; i++) {
    char url[256];
    snprintf(url, sizeof url, "s3://kvik-public/%s", objects[i]);
    check_object(url, &o, objects[i], KVIK_REMOTE_S3_PUBLIC);
  }
}

static void test_s3_presigned(const char *url) {
  check_object(url, NULL, "medium", KVIK_REMOTE_S3_PRESIGNED);
  kvik_remote *r = open_ok(url, NULL);
  assert_no_credentials(kvik_remote_url(r));
  kvik_remote_free(r);
}

/* ---- WebHDFS ------------------------------------------------------------------------------- */

static void test_webhdfs(const char *base) {
  check_every_object(base, KVIK_REMOTE_WEBHDFS);
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  o.webhdfs_user = "kvik user";
  char *url = url_of(base, "small");
  check_object(url, &o, "small", KVIK_REMOTE_WEBHDFS);
  free(url);
  url = url_of(base, "small?user.name=url%20user"); /* the URL's own, encoded already */
  check_object(url, NULL, "small", KVIK_REMOTE_WEBHDFS);
  char users[256];
  fault_server_get("/_webhdfs_users", users, sizeof users);
  if (!strstr(users, "kvik user") || !strstr(users, "url user")) FAIL_AT("the WebHDFS server saw users \"%s\"", users);
  kvik_remote *r;
  free(url);
  url = url_of(base, "no-such-file");
  ASSERT_FAILS(kvik_remote_open(url, NULL, &r), KVIK_EHTTP_BASE - 404, "GETFILESTATUS");
  free(url);
}

/* ---- faults -------------------------------------------------------------------------------- */

/* What the retry hook was told; the requests below make one task, so calls do not overlap. */
static kvik_retry_info retries[4];
static char retry_urls[4][512];
static int retry_count;

static void record_retry(const kvik_retry_info *info, void *arg) {
  ASSERT(arg == retries);
  if (retry_count < 4) {
    retries[retry_count] = *info;
    snprintf(retry_urls[retry_count], sizeof retry_urls[0], "%s", info->url);
  }
  retry_count++;
}

/* Read the first MiB of fault/MODE/medium in one task: one request. */
static ssize_t read_one_task(const char *fault, const char *mode) {
  char url[512];
  snprintf(url, sizeof url, "%s/%s/medium", fault, mode);
  size_t size;
  free(load_object("medium", &size));
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  o.size = (int64_t)size; /* given, so that only the read meets the fault */
  kvik_remote *r = open_ok(url, &o);
  char *buf = malloc(1 << 20);
  kvik_future *f;
  ASSERT_OK(kvik_remote_pread(r, buf, 1 << 20, 0, 1 << 20, &f));
  ssize_t got = kvik_future_wait(f);
  kvik_future_free(f);
  free(buf);
  kvik_remote_free(r);
  return got;
}

/* The hook hears of each retry, before its pause (kvikio's: 0.5 s first), and of nothing else;
 * the library itself prints nothing. A request that runs out of attempts says so in kvikio's
 * words. */
static void test_retry_hook(const char *fault) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_HTTP_TIMEOUT, 1));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_HTTP_MAX_ATTEMPTS, 3));
  ASSERT_OK(kvik_remote_set_retry_hook(record_retry, retries));
  fault_server_get("/_reset", (char[8]){0}, 8);
  retry_count = 0;
  ASSERT_EQ(read_one_task(fault, "flaky-1"), 1 << 20);
  ASSERT_EQ(retry_count, 1);
  ASSERT_EQ(retries[0].attempt, 1);
  ASSERT_EQ(retries[0].max_attempts, 3);
  ASSERT_EQ(retries[0].cause, KVIK_EHTTP_BASE - 503);
  ASSERT_EQ(retries[0].status, 503);
  ASSERT_EQ(retries[0].delay_ms, 500);
  ASSERT(strstr(retry_urls[0], "/flaky-1/medium"));

  ASSERT_OK(kvik_setting_set(KVIK_SETTING_HTTP_MAX_ATTEMPTS, 2));
  fault_server_get("/_reset", (char[8]){0}, 8);
  retry_count = 0;
  ASSERT_FAILS(read_one_task(fault, "flaky-2"), KVIK_EHTTP_BASE - 503,
               "(KvikIO: HTTP request reached maximum number of attempts (2). Reason: Got HTTP "
               "code 503.)");
  ASSERT(strstr(kvik_last_error(), "(the requested URL returned error: 503)"));
  ASSERT_EQ(retry_count, 1); /* none after the last attempt */
  retry_count = 0;
  ASSERT_FAILS(read_one_task(fault, "slow-3"), -ETIMEDOUT,
               "(KvikIO: HTTP request reached maximum number of attempts (2). Reason: Operation "
               "timed out.)");
  ASSERT_EQ(retry_count, 1);
  ASSERT_EQ(retries[0].cause, -ETIMEDOUT);
  ASSERT_EQ(retries[0].status, 0);
  ASSERT_EQ(retries[0].attempt, 1);
  ASSERT_EQ(retries[0].max_attempts, 2);

  ASSERT_OK(kvik_remote_set_retry_hook(NULL, NULL));
  fault_server_get("/_reset", (char[8]){0}, 8);
  retry_count = 0;
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_HTTP_MAX_ATTEMPTS, 3));
  ASSERT_EQ(read_one_task(fault, "flaky-1"), 1 << 20);
  ASSERT_EQ(retry_count, 0);
}

/* Read 3 MiB of fault/MODE/medium in three 1 MiB tasks. The size is given, so that only the
 * reads meet the fault. */
static ssize_t read_under_fault(const char *fault, const char *mode) {
  char url[512];
  snprintf(url, sizeof url, "%s/%s/medium", fault, mode);
  size_t size;
  unsigned char *ref = load_object("medium", &size);
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  o.size = (int64_t)size;
  kvik_remote *r = open_ok(url, &o);
  size_t n = 3 << 20;
  char *buf = malloc(n);
  kvik_future *f;
  ASSERT_OK(kvik_remote_pread(r, buf, n, 12345, 1 << 20, &f));
  ssize_t got = kvik_future_wait(f);
  kvik_future_free(f);
  if (got == (ssize_t)n) ASSERT(memcmp(buf, ref + 12345, n) == 0);
  free(buf);
  free(ref);
  kvik_remote_free(r);
  return got;
}

static void test_faults(const char *fault) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_HTTP_TIMEOUT, 1));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_HTTP_MAX_ATTEMPTS, 3));
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_HTTP_STATUS_CODES, "429,500,502,503,504"));
  fault_server_get("/_reset", (char[8]){0}, 8);
  /* Three 1 MiB tasks, each failing twice with 503 first. */
  long before = fault_server_requests();
  ASSERT_EQ(read_under_fault(fault, "flaky-2"), 3 << 20);
  ASSERT(fault_server_requests() - before >= 3 * 3);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_HTTP_MAX_ATTEMPTS, 2));
  fault_server_get("/_reset", (char[8]){0}, 8);
  ASSERT_FAILS(read_under_fault(fault, "flaky-2"), KVIK_EHTTP_BASE - 503,
               "maximum number of attempts (2)");
  /* A status left out of the list is not tried again. */
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_HTTP_STATUS_CODES, "500"));
  fault_server_get("/_reset", (char[8]){0}, 8);
  ASSERT_FAILS(read_under_fault(fault, "flaky-1"), KVIK_EHTTP_BASE - 503, "HTTP 503 Service Unavailable");
  ASSERT(!strstr(kvik_last_error(), "attempts"));
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_HTTP_STATUS_CODES, "429,500,502,503,504"));

  kvik_remote *r;
  char url[512];
  snprintf(url, sizeof url, "%s/status-403/medium", fault);
  ASSERT_FAILS(kvik_remote_open(url, NULL, &r), KVIK_EHTTP_BASE - 403, "HEAD of");
  snprintf(url, sizeof url, "%s/status-404/medium", fault);
  ASSERT_FAILS(kvik_remote_open(url, NULL, &r), KVIK_EHTTP_BASE - 404, "HTTP 404 Not Found");
  ASSERT_FAILS(read_under_fault(fault, "slow-3"), -ETIMEDOUT, "maximum number of attempts (2)");
  ASSERT_FAILS(read_under_fault(fault, "truncate"), KVIK_EREMOTE_SHORT, "GET bytes");
  ASSERT_FAILS(read_under_fault(fault, "short"), KVIK_EREMOTE_SHORT, "were asked for");
  ASSERT_FAILS(read_under_fault(fault, "oversize"), KVIK_EREMOTE_LONG, "longer than");
  ASSERT_FAILS(read_under_fault(fault, "norange"), KVIK_ERANGE_IGNORED, "whole object");
  /* The same with no body at all: an empty object whose size was given wrong. */
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  o.size = 100;
  snprintf(url, sizeof url, "%s/norange/empty", fault);
  r = open_ok(url, &o);
  char small[100];
  /* Asked for from 0 to the size given, the range is the whole object as far as kvik knows: the
   * 200 is taken as that, and holds too few bytes. */
  ASSERT_FAILS(kvik_remote_read(r, small, sizeof small, 0), KVIK_EREMOTE_SHORT,
               "0 bytes, 100 were asked for");
  kvik_remote_free(r);
  ASSERT_FAILS(read_under_fault(fault, "drop"), -ECONNRESET, "GET bytes");
  /* A port nothing listens on: one bound and closed again. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT(bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0 && getsockname(fd, (struct sockaddr *)&addr, &len) == 0);
  close(fd);
  snprintf(url, sizeof url, "http://127.0.0.1:%d/x", ntohs(addr.sin_port));
  ASSERT_FAILS(kvik_remote_open(url, NULL, &r), -ECONNREFUSED, "127.0.0.1");
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_HTTP_TIMEOUT, 60));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_HTTP_MAX_ATTEMPTS, 3));
}

/* A read of 8 MiB of fault/MODE/large in 64 KiB tasks (128 of them) on 4 threads, into `dest`,
 * which fails: with the first failure, after its 3 attempts, and promptly (a watchdog of 30 s),
 * having made at most 3 requests per thread, since the tasks still queued make none. */
#define FAILING_READ (8 << 20)
#define FAILING_TASK (64 << 10)
#define FAILING_THREADS 4
static void read_that_fails(const char *fault, const char *mode, void *dest) {
  char url[512], transferred[64];
  snprintf(url, sizeof url, "%s/%s/large", fault, mode);
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  o.size = 64 << 20;
  kvik_remote *r = open_ok(url, &o);
  long before = fault_server_requests();
  kvik_future *f;
  ASSERT_OK(kvik_remote_pread(r, dest, FAILING_READ, 0, FAILING_TASK, &f));
  ssize_t got = kvik_future_wait_for(f, 30 * (int64_t)1000000000);
  if (got == -ETIMEDOUT) FAIL_AT("%s: a read that failed still ran after 30 s", url);
  ASSERT_FAILS(got, KVIK_EREMOTE_SHORT, "maximum number of attempts (3)");
  ASSERT(!strstr(kvik_last_error(), "cancelled")); /* the failure that cancelled the others */
  snprintf(transferred, sizeof transferred, "(0 of %d bytes transferred)", FAILING_READ);
  ASSERT(strstr(kvik_last_error(), transferred));
  long requests = fault_server_requests() - before - 1; /* this count's own request */
  if (requests > FAILING_THREADS * 3)
    FAIL_AT("%s: a read of %d tasks on %d threads made %ld requests", url,
            FAILING_READ / FAILING_TASK, FAILING_THREADS, requests);
  printf("ok: %s: the read failed after %ld requests\n", url, requests);
  kvik_future_free(f);
  kvik_remote_free(r);
}

/* The first task of a read to fail fails the read (issue 24, item 4). From a server that cuts
 * every body, each thread tries one task and the read fails: the queued tasks make no request
 * (the old code made all 384, in 20 s). From one that cuts the range from byte 0 and stalls the
 * others (fault stall-S), the stalled transfers stop as soon as the first task failed, where they
 * would wait for KVIK_SETTING_HTTP_TIMEOUT, be tried again, and the read take minutes. */
static void test_failure_stops_read(const char *fault) {
  int64_t threads_before;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_NUM_THREADS, &threads_before));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, FAILING_THREADS));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_HTTP_MAX_ATTEMPTS, 3));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_HTTP_TIMEOUT, 60));
  char *host = malloc(FAILING_READ);
  read_that_fails(fault, "truncate", host);
  read_that_fails(fault, "stall-100", host);
  free(host);
  if (have_cuda) {
    CUdeviceptr dev;
    CU_OK(cu.cuMemAlloc_v2(&dev, FAILING_READ));
    read_that_fails(fault, "truncate", (void *)dev);
    read_that_fails(fault, "stall-100", (void *)dev);
    CU_OK(cu.cuMemFree_v2(dev));
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, threads_before));
}

/* A 206 of the right length whose Content-Range is wrong, missing or garbled (fault modes
 * shifted, badtotal, nocontentrange, garbledrange) fails with KVIK_ERANGE_MISMATCH, on the first
 * attempt: through one request, and through tasks that each meet it. */
static void test_wrong_ranges(const char *fault) {
  static const struct {
    const char *mode, *needle;
  } cases[] = {
      {"shifted", "Content-Range \"bytes 101-1100/5243003\" for bytes 100-1099/5243003"},
      {"badtotal", "Content-Range \"bytes 100-1099/5243004\" for bytes 100-1099/5243003"},
      {"nocontentrange", "206 without a Content-Range"},
      {"garbledrange", "does not parse: \"bytes=100-1099/5243003\""},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char url[512];
    snprintf(url, sizeof url, "%s/%s/medium", fault, cases[i].mode);
    kvik_remote *r = open_ok(url, NULL); /* HEAD is right in these modes */
    char buf[1000];
    long before = fault_server_requests();
    ASSERT_FAILS(kvik_remote_read(r, buf, sizeof buf, 100), KVIK_ERANGE_MISMATCH, cases[i].needle);
    ASSERT_EQ(fault_server_requests(), before + 2); /* the read's one request, and this count's */
    kvik_remote_free(r);
    ASSERT_FAILS(read_under_fault(fault, cases[i].mode), KVIK_ERANGE_MISMATCH,
                 "the server answered 206");
    ASSERT(!strstr(kvik_last_error(), "attempts"));
  }
}

/* A 200 of exactly the range asked for (fault mode range200) is taken, in one task or several. */
static void test_range_in_a_200(const char *fault) {
  size_t n;
  unsigned char *ref = load_object("medium", &n);
  char url[512];
  snprintf(url, sizeof url, "%s/range200/medium", fault);
  kvik_remote *r = open_ok(url, NULL);
  unsigned char buf[1000];
  ASSERT_EQ(kvik_remote_read(r, buf, 100, 10), 100);
  ASSERT(memcmp(buf, ref + 10, 100) == 0);
  kvik_future *f;
  ASSERT_OK(kvik_remote_pread(r, buf, 1000, 500, 300, &f));
  ASSERT_EQ(kvik_future_wait(f), 1000);
  kvik_future_free(f);
  ASSERT(memcmp(buf, ref + 500, 1000) == 0);
  kvik_remote_free(r);
  free(ref);
}

/* A server that ignores Range (fault mode norange, like `python3 -m http.server`) answers 200
 * with the whole object: right for a read of the whole object in one request, and no other. */
static void test_whole_object_answers(const char *fault) {
  size_t n;
  unsigned char *ref = load_object("small", &n);
  char url[512];
  snprintf(url, sizeof url, "%s/norange/small", fault);
  kvik_remote *r = open_ok(url, NULL);
  check_host_range(r, ref, n, n, 0, 0);
  check_host_range(r, ref, n, n, 0, 1);
  check_host_range(r, ref, n, n + 500, 0, 0); /* clipped to the object: the whole of it */
  char buf[1000];
  ASSERT_FAILS(kvik_remote_read(r, buf, 100, 0), KVIK_ERANGE_IGNORED, "GET bytes 0-99");
  ASSERT_FAILS(kvik_remote_read(r, buf, n - 10, 10), KVIK_ERANGE_IGNORED,
               "whole object instead of the range");
  kvik_remote_free(r);
  free(ref);

  /* The whole object in one task, then in tasks of which none is the whole. */
  ref = load_object("medium", &n);
  snprintf(url, sizeof url, "%s/norange/medium", fault);
  r = open_ok(url, NULL);
  unsigned char *big = malloc(n + 1);
  big[n] = 0xA5;
  kvik_future *f;
  ASSERT_OK(kvik_remote_pread(r, big, n, 0, n, &f));
  ASSERT_EQ(kvik_future_wait(f), n);
  kvik_future_free(f);
  ASSERT(memcmp(big, ref, n) == 0 && big[n] == 0xA5);
  ASSERT_OK(kvik_remote_pread(r, big, n, 0, 1 << 20, &f));
  ASSERT_FAILS(kvik_future_wait(f), KVIK_ERANGE_IGNORED, "whole object instead of the range");
  kvik_future_free(f);
  kvik_remote_free(r);

  /* A size given smaller than the object's: the 200 holds more than the range, which is the
   * whole object as far as kvik knows. Nothing lands past the buffer. */
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  o.size = 1000;
  r = open_ok(url, &o);
  memset(big, 0xA5, 1001);
  ASSERT_FAILS(kvik_remote_read(r, big, 1000, 0), KVIK_EREMOTE_LONG, "longer than the 1000 bytes");
  ASSERT(big[1000] == 0xA5);
  kvik_remote_free(r);
  free(big);
  free(ref);
}

/* A HEAD whose Content-Length is no byte count is named as such, with the value. */
static void test_bad_content_length(const char *fault) {
  static const char *const values[] = {"abc", "99999999999999999999", "-5", "12abc"};
  for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
    char url[512], needle[128];
    snprintf(url, sizeof url, "%s/badlength-%s/small", fault, values[i]);
    snprintf(needle, sizeof needle, "HEAD answered with Content-Length \"%s\", which is no byte",
             values[i]);
    kvik_remote *r;
    ASSERT_FAILS(kvik_remote_open(url, NULL, &r), KVIK_EREMOTE, needle);
  }
}

/* ---- processes ----------------------------------------------------------------------------- */

static void wait_child(pid_t pid, const char *what) {
  int status;
  ASSERT(waitpid(pid, &status, 0) == pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) FAIL_AT("%s: child failed", what);
}

/* The pool's connections are the parent's: the child makes its own and reads correctly. */
static void test_fork(const char *base) {
  size_t n;
  unsigned char *ref = load_object("medium", &n);
  char *url = url_of(base, "medium");
  kvik_remote *r = open_ok(url, NULL);
  check_host_range(r, ref, n, n, 0, 0);
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    check_host_range(r, ref, n, n, 0, 1);
    _exit(0);
  }
  check_host_range(r, ref, n, n, 0, 1);
  wait_child(pid, "remote read after fork");
  kvik_remote_free(r);
  free(url);
  free(ref);
}

/* In a child: libcurl's CA variables are read when the first remote file opens. */
static void check_tls_in_child(const char *https, const char *ca_variable, const char *ca) {
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    have_cuda = 0; /* CUDA is the parent's: a child of a process that used it cannot */
    unsetenv("CURL_CA_BUNDLE");
    unsetenv("SSL_CERT_FILE");
    unsetenv("SSL_CERT_DIR");
    char *url = url_of(https, "medium");
    if (!ca_variable) {
      kvik_remote *r;
      ASSERT_FAILS(kvik_remote_open(url, NULL, &r), KVIK_ETLS, "HEAD of \"https://");
    } else {
      setenv(ca_variable, ca, 1);
      check_object(url, NULL, "medium", KVIK_REMOTE_HTTP);
    }
    _exit(0);
  }
  wait_child(pid, ca_variable ? ca_variable : "TLS without the CA");
}

/* A self-signed certificate fails verification, unless the CA variables name it. */
static void test_tls(const char *https, const char *ca) {
  check_tls_in_child(https, NULL, NULL);
  check_tls_in_child(https, "CURL_CA_BUNDLE", ca);
  check_tls_in_child(https, "SSL_CERT_FILE", ca);
}

/* Credentials stay out of the trace: a signed read with a session token and a presigned read,
 * with stderr in a file, in a child (the trace is the process's). */
static void test_trace_has_no_credentials(const char *presigned) {
  char path[] = "/tmp/kvik-trace-XXXXXX";
  int fd = mkstemp(path);
  ASSERT(fd >= 0);
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    dup2(fd, 2);
    ASSERT_OK(kvik_setting_set(KVIK_SETTING_REMOTE_VERBOSE, 1));
    kvik_remote_options o = s3_options(getenv("KVIK_TEST_S3_SECRET_ACCESS_KEY"));
    o.aws_session_token = "SESSION-TOKEN-SECRET";
    char *url = s3_url("small"), buf[100];
    kvik_remote *r;
    if (kvik_remote_open(url, &o, &r) == 0) kvik_remote_free(r); /* moto may refuse the made-up token */
    if (presigned) {
      r = open_ok(presigned, NULL);
      ASSERT_EQ(kvik_remote_read(r, buf, sizeof buf, 0), sizeof buf);
      kvik_remote_free(r);
    }
    _exit(0);
  }
  wait_child(pid, "verbose trace");
  char trace[1 << 16];
  ssize_t got = pread(fd, trace, sizeof trace - 1, 0);
  close(fd);
  unlink(path);
  ASSERT(got > 0);
  trace[got] = '\0';
  if (!strstr(trace, "kvik remote: > HEAD /") || !strstr(trace, "authorization: <redacted>"))
    FAIL_AT("unexpected trace:\n%s", trace);
  assert_no_credentials(trace);
  if (strstr(trace, "SESSION-TOKEN-SECRET")) FAIL_AT("the session token appears in:\n%s", trace);
}

/* A process without libcurl (none installed, or KVIK_CURL_LIBRARY naming a file that is not
 * there): remote calls fail with KVIK_ENOREMOTE, naming the file and the loader's reason, every
 * time; local files work, without libcurl in the process. */
static void test_without_curl(void) {
  const char *setting = env_or_null("KVIK_CURL_LIBRARY");
  char file[256], detail[512], needle[320];
  snprintf(file, sizeof file, "%s", setting ? setting : "libcurl.so.4");
  snprintf(needle, sizeof needle, "libcurl unavailable: %s: cannot open shared object file", file);
  ASSERT_EQ(kvik_remote_supported(detail, sizeof detail), 0);
  if (!strstr(detail, needle)) FAIL_AT("kvik_remote_supported: \"%s\" lacks \"%s\"", detail, needle);
  for (int i = 0; i < 2; i++) {
    kvik_remote *r = (kvik_remote *)1;
    ASSERT_FAILS(kvik_remote_open("http://127.0.0.1:1/x", NULL, &r), KVIK_ENOREMOTE, needle);
    ASSERT(r == NULL);
  }
  char *dir = test_mkdtemp(), *path = test_path(dir, "local");
  const char data[] = "local files need no libcurl";
  char back[sizeof data];
  kvik_file *f = NULL;
  ASSERT_OK(kvik_file_open(path, "w+", 0600, &f));
  ASSERT_EQ(kvik_file_write(f, data, sizeof data, 0), (ssize_t)sizeof data);
  ASSERT_EQ(kvik_file_read(f, back, sizeof back, 0), (ssize_t)sizeof data);
  ASSERT(memcmp(back, data, sizeof data) == 0);
  kvik_file_free(f);
  unlink(path);
  free(path);
  test_rmdir(dir);
  void *curl = dlopen("libcurl.so.4", RTLD_NOW | RTLD_NOLOAD);
  if (curl) FAIL_AT("libcurl is in the process, though kvik could not load it");
  printf("without libcurl (%s): remote calls fail with KVIK_ENOREMOTE: %s\n", file,
         kvik_last_error());
}

int main(void) {
  if (!kvik_remote_supported(NULL, 0)) {
    test_without_curl();
    return 0;
  }
  test_detection();
  const char *fault = env_or_null("KVIK_TEST_FAULT_URL");
  if (!fault || !env_or_null("KVIK_TEST_REMOTE_DATA")) {
    printf("skipped: no test servers (run under tests/remote/servers.py)\n");
    return TEST_SKIP;
  }
  /* Without nginx (a GPU machine may lack it), the fault server's honest mode serves ranges. */
  char *fault_ok = url_of(fault, "ok");
  const char *http = env_or_null("KVIK_TEST_NGINX_URL") ? getenv("KVIK_TEST_NGINX_URL") : fault_ok;
  have_cuda = load_cuda();
  printf("device memory: %s\n", have_cuda ? "yes" : "no CUDA driver: host memory only");
  test_lifetime_and_arguments(http);
  check_every_object(http, KVIK_REMOTE_HTTP);
  test_http_concurrent(http, 64);
  test_http_concurrent(http, 1);
  test_known_size_asks_nothing(fault);
  test_max_concurrent_requests(fault);
  test_faults(fault);
  test_retry_hook(fault);
  test_failure_stops_read(fault);
  test_wrong_ranges(fault);
  test_whole_object_answers(fault);
  test_range_in_a_200(fault);
  test_bad_content_length(fault);
  if (children_allowed) {
    test_fork(http);
    if (env_or_null("KVIK_TEST_NGINX_HTTPS_URL")) test_tls(getenv("KVIK_TEST_NGINX_HTTPS_URL"), getenv("KVIK_TEST_TLS_CA"));
  }
  if (env_or_null("KVIK_TEST_WEBHDFS_URL")) test_webhdfs(getenv("KVIK_TEST_WEBHDFS_URL"));
  const char *presigned = env_or_null("KVIK_TEST_S3_PRESIGNED_URL");
  if (env_or_null("KVIK_TEST_S3_ENDPOINT")) {
    test_s3_signed();
    test_s3_refusals();
    if (children_allowed) test_trace_has_no_credentials(presigned);
  }
  if (presigned) test_s3_presigned(presigned);
  if (env_or_null("KVIK_TEST_S3_PUBLIC_ENDPOINT")) test_s3_public(getenv("KVIK_TEST_S3_PUBLIC_ENDPOINT"));
  printf("remote tests passed against %s%s%s\n", http == fault_ok ? "the fault server (no nginx)" : "nginx",
         env_or_null("KVIK_TEST_S3_ENDPOINT") ? "" : " (S3 skipped: no moto)",
         env_or_null("KVIK_TEST_NGINX_HTTPS_URL") ? "" : " (TLS skipped)");
  free(fault_ok);
  return 0;
}
