/* Settings: defaults, run-time changes, text values, and the KvikIO environment variables.
 * Settings are read from the environment once per process, so each environment case runs in a
 * child process that sets its variables before its first kvik call. */
#include "test.h"
#include "test_cuda.h"

#include <limits.h>
#include <sys/wait.h>

static void test_defaults(void) {
  int64_t v;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_COMPAT_MODE, &v));
  ASSERT_EQ(v, KVIK_COMPAT_AUTO);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_NUM_THREADS, &v));
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  ASSERT(v >= 1 && v <= 64 && v <= cpus);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_TASK_SIZE, &v));
  ASSERT_EQ(v, 4 << 20);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_GDS_THRESHOLD, &v));
  ASSERT_EQ(v, 1 << 20);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_BOUNCE_BUFFER_SIZE, &v));
  ASSERT_EQ(v, 16 << 20);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_AUTO_DIRECT_IO_READ, &v));
  ASSERT_EQ(v, 0);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, &v));
  ASSERT_EQ(v, 0);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_HTTP_MAX_ATTEMPTS, &v));
  ASSERT_EQ(v, 3);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_HTTP_TIMEOUT, &v));
  ASSERT_EQ(v, 60);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_REMOTE_VERBOSE, &v));
  ASSERT_EQ(v, 0);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_REMOTE_CONNECTIONS, &v));
  ASSERT_EQ(v, 64);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_IO_URING, &v));
  ASSERT_EQ(v, KVIK_AUTO);
  /* KvikIO's remote engine settings, with its defaults. */
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_REMOTE_IO_BACKEND, &v));
  ASSERT_EQ(v, KVIK_REMOTE_IO_EASY_THREADPOOL);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_REMOTE_IO_NUM_REACTORS, &v));
  ASSERT_EQ(v, 1);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_REMOTE_IO_REACTOR_DISPATCH, &v));
  ASSERT_EQ(v, KVIK_REACTOR_PER_CHUNK);
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS, &v));
  ASSERT_EQ(v, 256);
  char text[64];
  ASSERT_EQ(kvik_setting_format(KVIK_SETTING_HTTP_STATUS_CODES, text, sizeof text), 19);
  ASSERT(strcmp(text, "429,500,502,503,504") == 0);
  for (int s = 0; s < KVIK_SETTING_COUNT; s++) ASSERT_EQ(kvik_setting_source_of((kvik_setting)s), KVIK_SOURCE_DEFAULT);
}

static void test_names(void) {
  static const char *const names[] = {"compat_mode", "num_threads", "task_size", "gds_threshold",
                                      "bounce_buffer_size", "auto_direct_io_read", "auto_direct_io_write",
                                      "zero_copy_read", "http_max_attempts", "http_timeout",
                                      "http_status_codes", "remote_verbose", "remote_connections", "io_uring",
                                      "remote_io_backend", "remote_io_num_reactors",
                                      "remote_io_reactor_dispatch",
                                      "remote_io_max_concurrent_requests", "nvcomp_library",
                                      "nvcomp_memory", "curl_library", "numa_affinity",
                                      "write_behind"};
  ASSERT_EQ(sizeof names / sizeof names[0], KVIK_SETTING_COUNT);
  for (int s = 0; s < KVIK_SETTING_COUNT; s++) {
    ASSERT(strcmp(kvik_setting_name((kvik_setting)s), names[s]) == 0);
    ASSERT_EQ(kvik_setting_lookup(names[s]), s);
    const char *env = kvik_setting_env_name((kvik_setting)s);
    ASSERT(strncmp(env, "KVIKIO_", 7) == 0 || strncmp(env, "KVIK_", 5) == 0);
  }
  ASSERT(kvik_setting_name(KVIK_SETTING_COUNT) == NULL);
  ASSERT_FAILS(kvik_setting_lookup("nthreads_typo"), -EINVAL, "nthreads_typo");
}

static void test_set_get_format(void) {
  char text[32];
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, 12345));
  int64_t v;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_TASK_SIZE, &v));
  ASSERT_EQ(v, 12345);
  ASSERT_EQ(kvik_setting_source_of(KVIK_SETTING_TASK_SIZE), KVIK_SOURCE_API);
  ASSERT_EQ(kvik_setting_format(KVIK_SETTING_TASK_SIZE, text, sizeof text), 5);
  ASSERT(strcmp(text, "12345") == 0);

  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_COMPAT_MODE, "  oN "));
  kvik_setting_format(KVIK_SETTING_COMPAT_MODE, text, sizeof text);
  ASSERT(strcmp(text, "ON") == 0);
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_COMPAT_MODE, "AuTo"));
  kvik_setting_format(KVIK_SETTING_COMPAT_MODE, text, sizeof text);
  ASSERT(strcmp(text, "AUTO") == 0);
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_AUTO_DIRECT_IO_READ, "YES"));
  kvik_setting_format(KVIK_SETTING_AUTO_DIRECT_IO_READ, text, sizeof text);
  ASSERT(strcmp(text, "on") == 0);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 0));

  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 3));
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_NUM_THREADS, &v));
  ASSERT_EQ(v, 3);
}

/* KvikIO's remote engine choices: its names as text, its numbers as values; 0 requests is no
 * limit, 0 reactors is refused. */
static void test_remote_io_settings(void) {
  char text[32];
  int64_t v;
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_REMOTE_IO_BACKEND, " multi_POLL "));
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_REMOTE_IO_BACKEND, &v));
  ASSERT_EQ(v, KVIK_REMOTE_IO_MULTI_POLL);
  ASSERT_EQ(kvik_setting_format(KVIK_SETTING_REMOTE_IO_BACKEND, text, sizeof text), 10);
  ASSERT(strcmp(text, "MULTI_POLL") == 0);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_REMOTE_IO_BACKEND, KVIK_REMOTE_IO_EASY_THREADPOOL));
  kvik_setting_format(KVIK_SETTING_REMOTE_IO_BACKEND, text, sizeof text);
  ASSERT(strcmp(text, "EASY_THREADPOOL") == 0);
  ASSERT_FAILS(kvik_setting_parse(KVIK_SETTING_REMOTE_IO_BACKEND, "fast"), -EINVAL,
               "expected EASY_THREADPOOL or MULTI_POLL");
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_REMOTE_IO_BACKEND, 2), -EINVAL, "remote_io_backend");
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_REMOTE_IO_REACTOR_DISPATCH, "per_pread"));
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_REMOTE_IO_REACTOR_DISPATCH, &v));
  ASSERT_EQ(v, KVIK_REACTOR_PER_PREAD);
  kvik_setting_format(KVIK_SETTING_REMOTE_IO_REACTOR_DISPATCH, text, sizeof text);
  ASSERT(strcmp(text, "PER_PREAD") == 0);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_REMOTE_IO_REACTOR_DISPATCH, KVIK_REACTOR_PER_CHUNK));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_REMOTE_IO_NUM_REACTORS, 4));
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_REMOTE_IO_NUM_REACTORS, 0), -EINVAL,
               "positive integer");
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_REMOTE_IO_NUM_REACTORS, 1));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS, 0));
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS, -1), -EINVAL,
               "must not be negative");
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS, 256));
}

/* The one list: text in and out, no int64_t value. */
static void test_status_codes(void) {
  char text[64];
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_HTTP_STATUS_CODES, " 503, 429,503 "));
  ASSERT_EQ(kvik_setting_format(KVIK_SETTING_HTTP_STATUS_CODES, text, sizeof text), 7);
  ASSERT(strcmp(text, "429,503") == 0);
  ASSERT_EQ(kvik_setting_source_of(KVIK_SETTING_HTTP_STATUS_CODES), KVIK_SOURCE_API);
  /* Too small a buffer: the length it needs, the text cut short and terminated. */
  ASSERT_EQ(kvik_setting_format(KVIK_SETTING_HTTP_STATUS_CODES, text, 4), 7);
  ASSERT(strcmp(text, "429") == 0);
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_HTTP_STATUS_CODES, ""));
  ASSERT_EQ(kvik_setting_format(KVIK_SETTING_HTTP_STATUS_CODES, text, sizeof text), 0);
  ASSERT_FAILS(kvik_setting_parse(KVIK_SETTING_HTTP_STATUS_CODES, "503,5xx"), -EINVAL, "'503,5xx'");
  ASSERT_FAILS(kvik_setting_parse(KVIK_SETTING_HTTP_STATUS_CODES, "99"), -EINVAL, "100 to 999");
  ASSERT_FAILS(kvik_setting_parse(KVIK_SETTING_HTTP_STATUS_CODES, "503;504"), -EINVAL, "comma");
  ASSERT_EQ(kvik_setting_format(KVIK_SETTING_HTTP_STATUS_CODES, text, sizeof text), 0); /* unchanged */
  int64_t v;
  ASSERT_FAILS(kvik_setting_get(KVIK_SETTING_HTTP_STATUS_CODES, &v), -EINVAL, "kvik_setting_format");
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_HTTP_STATUS_CODES, 503), -EINVAL, "kvik_setting_parse");
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_HTTP_STATUS_CODES, "429,500,502,503,504"));
}

static void test_invalid_values_change_nothing(void) {
  int64_t before, after;
  kvik_setting_get(KVIK_SETTING_TASK_SIZE, &before);
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_TASK_SIZE, 0), -EINVAL, "task_size");
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 0), -EINVAL, "positive integer");
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_COMPAT_MODE, 3), -EINVAL, "compat_mode");
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, 2), -EINVAL, "auto_direct_io_write");
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 0), -EINVAL,
               "kvik_setting_set(bounce_buffer_size, 0): must be a positive integer");
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, -3), -EINVAL, "positive integer");
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, -1), -EINVAL, "must not be negative");
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_NUM_THREADS, (int64_t)UINT_MAX + 1), -EINVAL,
               "must be at most 4294967295");
  /* curl takes at most INT_MAX milliseconds. */
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_HTTP_TIMEOUT, INT_MAX / 1000 + 1), -EINVAL,
               "must be at most 2147483");
  ASSERT_FAILS(kvik_setting_parse(KVIK_SETTING_TASK_SIZE, "4MiB"), -EINVAL, "'4MiB'");
  ASSERT_FAILS(kvik_setting_parse(KVIK_SETTING_TASK_SIZE, "-1"), -EINVAL, "'-1'");
  ASSERT_FAILS(kvik_setting_parse(KVIK_SETTING_TASK_SIZE, ""), -EINVAL, "task_size");
  ASSERT_FAILS(kvik_setting_parse(KVIK_SETTING_TASK_SIZE, "99999999999999999999999"), -EINVAL, "task_size");
  ASSERT_FAILS(kvik_setting_parse(KVIK_SETTING_AUTO_DIRECT_IO_READ, "maybe"), -EINVAL, "'maybe'");
  ASSERT_FAILS(kvik_setting_parse(KVIK_SETTING_COMPAT_MODE, "automatic"), -EINVAL, "'automatic'");
  ASSERT_FAILS(kvik_setting_set(KVIK_SETTING_COUNT, 1), -EINVAL, "unknown setting");
  ASSERT_FAILS(kvik_setting_get(KVIK_SETTING_TASK_SIZE, NULL), -EINVAL, "NULL");
  kvik_setting_get(KVIK_SETTING_TASK_SIZE, &after);
  ASSERT_EQ(before, after);
}

/* ---- environment cases, one child process each ------------------------------------------ */

typedef struct {
  const char *vars[4]; /* NAME=VALUE, NULL-terminated */
  kvik_setting setting;
  int64_t expect;      /* when valid */
  int valid;
  const char *message; /* when invalid: must appear in the message */
} env_case;

static const env_case env_cases[] = {
    {{"KVIKIO_COMPAT_MODE=on"}, KVIK_SETTING_COMPAT_MODE, KVIK_COMPAT_ON, 1, NULL},
    {{"KVIKIO_COMPAT_MODE= OFF\t"}, KVIK_SETTING_COMPAT_MODE, KVIK_COMPAT_OFF, 1, NULL},
    {{"KVIKIO_COMPAT_MODE=Auto"}, KVIK_SETTING_COMPAT_MODE, KVIK_COMPAT_AUTO, 1, NULL},
    {{"KVIKIO_COMPAT_MODE=true"}, KVIK_SETTING_COMPAT_MODE, KVIK_COMPAT_ON, 1, NULL},
    {{"KVIKIO_COMPAT_MODE=No"}, KVIK_SETTING_COMPAT_MODE, KVIK_COMPAT_OFF, 1, NULL},
    {{"KVIKIO_COMPAT_MODE=1"}, KVIK_SETTING_COMPAT_MODE, KVIK_COMPAT_ON, 1, NULL},
    {{"KVIKIO_COMPAT_MODE=sometimes"}, KVIK_SETTING_COMPAT_MODE, 0, 0, "KVIKIO_COMPAT_MODE='sometimes'"},
    {{"KVIKIO_NTHREADS=7"}, KVIK_SETTING_NUM_THREADS, 7, 1, NULL},
    {{"KVIKIO_NUM_THREADS=5"}, KVIK_SETTING_NUM_THREADS, 5, 1, NULL},
    {{"KVIKIO_NTHREADS=6", "KVIKIO_NUM_THREADS=6"}, KVIK_SETTING_NUM_THREADS, 6, 1, NULL},
    {{"KVIKIO_NTHREADS=6", "KVIKIO_NUM_THREADS=8"}, KVIK_SETTING_NUM_THREADS, 0, 0, "disagree"},
    {{"KVIKIO_NTHREADS=0"}, KVIK_SETTING_NUM_THREADS, 0, 0, "KVIKIO_NTHREADS='0'"},
    {{"KVIKIO_NTHREADS=four"}, KVIK_SETTING_NUM_THREADS, 0, 0, "KVIKIO_NTHREADS='four'"},
    {{"KVIKIO_NUM_THREADS=-2"}, KVIK_SETTING_NUM_THREADS, 0, 0, "KVIKIO_NUM_THREADS='-2'"},
    {{"KVIKIO_TASK_SIZE=1048576"}, KVIK_SETTING_TASK_SIZE, 1048576, 1, NULL},
    {{"KVIKIO_TASK_SIZE= 65536 "}, KVIK_SETTING_TASK_SIZE, 65536, 1, NULL},
    {{"KVIKIO_TASK_SIZE=1.5"}, KVIK_SETTING_TASK_SIZE, 0, 0, "KVIKIO_TASK_SIZE='1.5'"},
    {{"KVIKIO_TASK_SIZE="}, KVIK_SETTING_TASK_SIZE, 0, 0, "KVIKIO_TASK_SIZE=''"},
    {{"KVIKIO_GDS_THRESHOLD=0"}, KVIK_SETTING_GDS_THRESHOLD, 0, 1, NULL},
    {{"KVIKIO_GDS_THRESHOLD=1k"}, KVIK_SETTING_GDS_THRESHOLD, 0, 0, "KVIKIO_GDS_THRESHOLD='1k'"},
    {{"KVIKIO_BOUNCE_BUFFER_SIZE=8388608"}, KVIK_SETTING_BOUNCE_BUFFER_SIZE, 8388608, 1, NULL},
    {{"KVIKIO_BOUNCE_BUFFER_SIZE=12"}, KVIK_SETTING_BOUNCE_BUFFER_SIZE, 12, 1, NULL},
    {{"KVIKIO_BOUNCE_BUFFER_SIZE=0"}, KVIK_SETTING_BOUNCE_BUFFER_SIZE, 0, 0,
     "KVIKIO_BOUNCE_BUFFER_SIZE='0': must be a positive integer"},
    {{"KVIKIO_AUTO_DIRECT_IO_READ=YES"}, KVIK_SETTING_AUTO_DIRECT_IO_READ, 1, 1, NULL},
    {{"KVIKIO_AUTO_DIRECT_IO_READ=off"}, KVIK_SETTING_AUTO_DIRECT_IO_READ, 0, 1, NULL},
    {{"KVIKIO_AUTO_DIRECT_IO_WRITE=True"}, KVIK_SETTING_AUTO_DIRECT_IO_WRITE, 1, 1, NULL},
    {{"KVIKIO_AUTO_DIRECT_IO_WRITE=0"}, KVIK_SETTING_AUTO_DIRECT_IO_WRITE, 0, 1, NULL},
    {{"KVIKIO_AUTO_DIRECT_IO_WRITE=2"}, KVIK_SETTING_AUTO_DIRECT_IO_WRITE, 0, 0, "KVIKIO_AUTO_DIRECT_IO_WRITE='2'"},
    {{"KVIK_ZERO_COPY_READ=off"}, KVIK_SETTING_ZERO_COPY_READ, KVIK_OFF, 1, NULL},
    {{"KVIK_ZERO_COPY_READ=Auto"}, KVIK_SETTING_ZERO_COPY_READ, KVIK_AUTO, 1, NULL},
    {{"KVIK_ZERO_COPY_READ=maybe"}, KVIK_SETTING_ZERO_COPY_READ, 0, 0, "KVIK_ZERO_COPY_READ='maybe'"},
    {{"KVIKIO_HTTP_MAX_ATTEMPTS=5"}, KVIK_SETTING_HTTP_MAX_ATTEMPTS, 5, 1, NULL},
    {{"KVIKIO_HTTP_MAX_ATTEMPTS=100000"}, KVIK_SETTING_HTTP_MAX_ATTEMPTS, 100000, 1, NULL},
    {{"KVIKIO_HTTP_MAX_ATTEMPTS=0"}, KVIK_SETTING_HTTP_MAX_ATTEMPTS, 0, 0, "KVIKIO_HTTP_MAX_ATTEMPTS='0'"},
    {{"KVIKIO_HTTP_TIMEOUT=2"}, KVIK_SETTING_HTTP_TIMEOUT, 2, 1, NULL},
    {{"KVIKIO_HTTP_TIMEOUT=1.5"}, KVIK_SETTING_HTTP_TIMEOUT, 0, 0, "KVIKIO_HTTP_TIMEOUT='1.5'"},
    {{"KVIKIO_REMOTE_VERBOSE=on"}, KVIK_SETTING_REMOTE_VERBOSE, 1, 1, NULL},
    {{"KVIK_REMOTE_CONNECTIONS=8"}, KVIK_SETTING_REMOTE_CONNECTIONS, 8, 1, NULL},
    {{"KVIK_REMOTE_CONNECTIONS=0"}, KVIK_SETTING_REMOTE_CONNECTIONS, 0, 0, "KVIK_REMOTE_CONNECTIONS='0'"},
    {{"KVIK_IO_URING=off"}, KVIK_SETTING_IO_URING, KVIK_OFF, 1, NULL},
    {{"KVIK_IO_URING=ON"}, KVIK_SETTING_IO_URING, KVIK_ON, 1, NULL},
    {{"KVIK_IO_URING=always"}, KVIK_SETTING_IO_URING, 0, 0, "KVIK_IO_URING='always'"},
    {{"KVIKIO_REMOTE_IO_BACKEND=multi_poll"}, KVIK_SETTING_REMOTE_IO_BACKEND,
     KVIK_REMOTE_IO_MULTI_POLL, 1, NULL},
    {{"KVIKIO_REMOTE_IO_BACKEND= Easy_ThreadPool"}, KVIK_SETTING_REMOTE_IO_BACKEND,
     KVIK_REMOTE_IO_EASY_THREADPOOL, 1, NULL},
    {{"KVIKIO_REMOTE_IO_BACKEND=curl"}, KVIK_SETTING_REMOTE_IO_BACKEND, 0, 0,
     "KVIKIO_REMOTE_IO_BACKEND='curl'"},
    {{"KVIKIO_REMOTE_IO_NUM_REACTORS=16"}, KVIK_SETTING_REMOTE_IO_NUM_REACTORS, 16, 1, NULL},
    {{"KVIKIO_REMOTE_IO_NUM_REACTORS=0"}, KVIK_SETTING_REMOTE_IO_NUM_REACTORS, 0, 0,
     "KVIKIO_REMOTE_IO_NUM_REACTORS='0': must be a positive integer"},
    {{"KVIKIO_REMOTE_IO_REACTOR_DISPATCH=PER_PREAD"}, KVIK_SETTING_REMOTE_IO_REACTOR_DISPATCH,
     KVIK_REACTOR_PER_PREAD, 1, NULL},
    {{"KVIKIO_REMOTE_IO_REACTOR_DISPATCH=per_byte"}, KVIK_SETTING_REMOTE_IO_REACTOR_DISPATCH, 0, 0,
     "KVIKIO_REMOTE_IO_REACTOR_DISPATCH='per_byte'"},
    {{"KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS=0"},
     KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS, 0, 1, NULL},
    {{"KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS=-1"},
     KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS, 0, 0,
     "KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS='-1': must not be negative"},
};

static void check_env_case_in_child(const env_case *c) {
  for (int i = 0; c->vars[i]; i++) putenv((char *)c->vars[i]);
  int64_t v = -1;
  if (c->valid) {
    ASSERT_OK(kvik_setting_get(c->setting, &v));
    ASSERT_EQ(v, c->expect);
    ASSERT_EQ(kvik_setting_source_of(c->setting), KVIK_SOURCE_ENV);
    return;
  }
  /* Every call that needs settings fails, each time, with the same message. */
  ASSERT_FAILS(kvik_setting_get(c->setting, &v), KVIK_ECONFIG, c->message);
  kvik_file *f;
  ASSERT_FAILS(kvik_file_open("/dev/null", "r", 0, &f), KVIK_ECONFIG, c->message);
}

/* The list, read as text. */
static void check_status_env_in_child(const env_case *unused) {
  (void)unused;
  setenv("KVIKIO_HTTP_STATUS_CODES", "503, 429", 1);
  char text[64];
  ASSERT_EQ(kvik_setting_format(KVIK_SETTING_HTTP_STATUS_CODES, text, sizeof text), 7);
  ASSERT(strcmp(text, "429,503") == 0);
  ASSERT_EQ(kvik_setting_source_of(KVIK_SETTING_HTTP_STATUS_CODES), KVIK_SOURCE_ENV);
}

static void check_bad_status_env_in_child(const env_case *unused) {
  (void)unused;
  setenv("KVIKIO_HTTP_STATUS_CODES", "5xx", 1);
  kvik_file *f;
  ASSERT_FAILS(kvik_file_open("/dev/null", "r", 0, &f), KVIK_ECONFIG, "KVIKIO_HTTP_STATUS_CODES='5xx'");
}

static void run_in_child(const char *name, void (*check)(const env_case *), const env_case *c) {
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    check(c);
    _exit(0);
  }
  int status;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) FAIL_AT("environment case %s failed", name);
}

static void test_environment(void) {
  for (size_t i = 0; i < sizeof env_cases / sizeof env_cases[0]; i++)
    run_in_child(env_cases[i].vars[0], check_env_case_in_child, &env_cases[i]);
  run_in_child("KVIKIO_HTTP_STATUS_CODES", check_status_env_in_child, NULL);
  run_in_child("KVIKIO_HTTP_STATUS_CODES (invalid)", check_bad_status_env_in_child, NULL);
}

/* ---- limits: only those of kvikio's C types, and curl's ------------------------------- */

/* kvikio takes any count and size its C types hold: kvik has no smaller caps, but for the HTTP
 * timeout (curl's) and the int64_t of its API. */
static void test_large_values(void) {
  static const struct {
    kvik_setting setting;
    int64_t value;
  } cases[] = {
      {KVIK_SETTING_HTTP_MAX_ATTEMPTS, 1001},       {KVIK_SETTING_HTTP_MAX_ATTEMPTS, UINT_MAX},
      {KVIK_SETTING_TASK_SIZE, (int64_t)1 << 41},   {KVIK_SETTING_GDS_THRESHOLD, INT64_MAX},
      {KVIK_SETTING_BOUNCE_BUFFER_SIZE, INT64_MAX}, {KVIK_SETTING_REMOTE_CONNECTIONS, 100000},
      {KVIK_SETTING_HTTP_TIMEOUT, INT_MAX / 1000},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int64_t before, v;
    ASSERT_OK(kvik_setting_get(cases[i].setting, &before));
    ASSERT_OK(kvik_setting_set(cases[i].setting, cases[i].value));
    ASSERT_OK(kvik_setting_get(cases[i].setting, &v));
    ASSERT_EQ(v, cases[i].value);
    ASSERT_OK(kvik_setting_set(cases[i].setting, before));
  }
}

/* ---- bounce buffers of any positive size ------------------------------------------------ */

#define TRIP_BYTES ((size_t)5 * 4096 + 777)
#define TRIP_OFFSET 5

/* Write `size` bytes from src at an unaligned offset of a new file and read them back into dst,
 * once whole and once in tasks of 8 KiB on the thread pool. */
static void round_trip(const char *path, const void *src, void *dst, size_t size) {
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "w+", 0644, &f));
  ASSERT_EQ(kvik_file_write(f, src, size, TRIP_OFFSET), size);
  ASSERT_EQ(kvik_file_read(f, dst, size, TRIP_OFFSET), size);
  kvik_future *fut;
  ASSERT_OK(kvik_file_pread(f, dst, size, TRIP_OFFSET, 8192, &fut));
  ASSERT_EQ(kvik_future_wait(fut), size);
  kvik_future_free(fut);
  kvik_file_free(f);
}

/* Host memory, at addresses O_DIRECT cannot take, with O_DIRECT on: through aligned bounce
 * buffers. */
static void host_round_trip(const char *path, const unsigned char *ref) {
  unsigned char *src = malloc(TRIP_BYTES + 1), *dst = malloc(TRIP_BYTES + 1);
  ASSERT(src && dst);
  memcpy(src + 1, ref, TRIP_BYTES);
  memset(dst, 0, TRIP_BYTES + 1);
  round_trip(path, src + 1, dst + 1, TRIP_BYTES);
  ASSERT_SAME_BYTES(dst + 1, ref, TRIP_BYTES);
  size_t n;
  unsigned char *content = test_read_file(path, &n);
  ASSERT_EQ(n, TRIP_OFFSET + TRIP_BYTES);
  ASSERT_SAME_BYTES(content + TRIP_OFFSET, ref, TRIP_BYTES);
  free(content);
  free(src);
  free(dst);
}

/* Device memory in compatibility mode: through pinned bounce buffers. */
static void device_round_trip(const char *path, const unsigned char *ref) {
  char *src = device_alloc(TRIP_BYTES), *dst = device_alloc(TRIP_BYTES);
  unsigned char *back = calloc(1, TRIP_BYTES);
  ASSERT(back);
  to_device(src, ref, TRIP_BYTES);
  to_device(dst, back, TRIP_BYTES);
  round_trip(path, src, dst, TRIP_BYTES);
  from_device(back, dst, TRIP_BYTES);
  ASSERT_SAME_BYTES(back, ref, TRIP_BYTES);
  free(back);
  device_free(src);
  device_free(dst);
}

/* kvikio takes any positive bounce buffer size; kvik rounds its buffers up to whole pages, and
 * the setting reads back as set. */
static void test_small_bounce_buffers(void) {
  int gpu = load_cuda();
  if (!gpu) fprintf(stderr, "no CUDA driver: bounce buffers checked with host memory only\n");
  char *dir = test_mkdtemp(), *path = test_path(dir, "bounced");
  unsigned char *ref = malloc(TRIP_BYTES);
  ASSERT(ref);
  test_fill(ref, TRIP_BYTES, 26);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_COMPAT_MODE, KVIK_COMPAT_ON));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 1));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, 1));
  static const int64_t sizes[] = {3, 1024, 4097};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    int64_t v;
    char text[32];
    ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, sizes[i]));
    ASSERT_OK(kvik_setting_get(KVIK_SETTING_BOUNCE_BUFFER_SIZE, &v));
    ASSERT_EQ(v, sizes[i]);
    kvik_setting_format(KVIK_SETTING_BOUNCE_BUFFER_SIZE, text, sizeof text);
    ASSERT_EQ(strtoll(text, NULL, 10), sizes[i]);
    host_round_trip(path, ref);
    if (gpu) device_round_trip(path, ref);
  }
  ASSERT_OK(kvik_setting_parse(KVIK_SETTING_BOUNCE_BUFFER_SIZE, "3"));
  host_round_trip(path, ref);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 0));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, 0));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_COMPAT_MODE, KVIK_COMPAT_AUTO));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 16 << 20));
  free(ref);
  free(path);
  test_rmdir(dir);
}

/* A text setting: a path, kept as given (spaces too), read and changed as text only. */
static void test_library_path(kvik_setting setting) {
  char text[64];
  ASSERT_EQ(kvik_setting_format(setting, text, sizeof text), 0);
  ASSERT(strcmp(text, "") == 0);
  ASSERT_OK(kvik_setting_parse(setting, " /opt/nv comp/libnvcomp.so.6"));
  ASSERT_EQ(kvik_setting_format(setting, text, sizeof text), 28);
  ASSERT(strcmp(text, " /opt/nv comp/libnvcomp.so.6") == 0);
  ASSERT_EQ(kvik_setting_source_of(setting), KVIK_SOURCE_API);
  ASSERT_EQ(kvik_setting_format(setting, NULL, 0), 28);
  int64_t v;
  ASSERT_FAILS(kvik_setting_get(setting, &v), -EINVAL, "text");
  ASSERT_FAILS(kvik_setting_set(setting, 1), -EINVAL, "text");
  static char huge[5000];
  memset(huge, 'x', sizeof huge - 1);
  ASSERT_FAILS(kvik_setting_parse(setting, huge), -EINVAL, "4095");
  ASSERT_EQ(kvik_setting_format(setting, text, sizeof text), 28);
  ASSERT_OK(kvik_setting_parse(setting, ""));
  ASSERT_EQ(kvik_setting_format(setting, text, sizeof text), 0);
}

int main(void) {
  /* Before any kvik call: this process's settings must come from an empty environment. */
  for (int s = 0; s < KVIK_SETTING_COUNT; s++) unsetenv(kvik_setting_env_name((kvik_setting)s));
  unsetenv("KVIKIO_NUM_THREADS");
  test_environment();
  test_defaults();
  test_names();
  test_set_get_format();
  test_status_codes();
  test_remote_io_settings();
  test_invalid_values_change_nothing();
  test_large_values();
  test_small_bounce_buffers();
  test_library_path(KVIK_SETTING_NVCOMP_LIBRARY);
  test_library_path(KVIK_SETTING_CURL_LIBRARY);
  return 0;
}
