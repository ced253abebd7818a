/*
 * The bad input catalogue (docs/bad-input.md): every row of the tables there is one case here,
 * in the same order. Each case hands one kvik function one bad input and proves that it returns
 * the documented code and leaves a detail message that names the operation and, where there is
 * one, the path, URL, handle or setting at fault. Inputs that are valid no-ops (size 0, a read
 * past the end of the file) must return 0 and do nothing. Across all cases it also proves that
 * no bad input hangs (a FIFO without a partner is unblocked after a while and the case fails),
 * crashes (cases that crashed once run in a child process), stores a handle or future on
 * failure, submits part of a rejected batch, or changes a setting.
 *
 * Misuse that C cannot detect (a buffer smaller than `size`, a freed handle, a future freed
 * twice) is undefined: the docs say so and nothing here tries it.
 *
 * Cases that this machine cannot set up are skipped with the reason: unreadable files as root
 * (root reads them), a read-only mount without the right to make one, remote handles without
 * libcurl at run time (remote URLs then fail with KVIK_ENOREMOTE, which is checked instead).
 * KVIK_TEST_VERBOSE=1 prints every case as a docs table row with the message it produced.
 * Failures do not stop the run: every failing case is reported, then the test fails.
 */
#include "test.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#define REMOTE_URL "http://127.0.0.1:9/object"
#define FILE_BYTES 4096
/* The file of the bad buffer cases, and their requests: futures of several tasks on the pool. */
#define BIG_BYTES ((size_t)1 << 20)
#define TASK ((size_t)256 << 10)
/* Outputs are set to this before each case: a failing call must replace it with NULL. */
#define POISON ((void *)(uintptr_t)0x1)
/* How long a call on a FIFO may block before the test opens the other end to free it. */
#define FIFO_PATIENCE_MS 2000

static struct fixture {
  char *dir, *file, *missing, *notdir, *too_long, *fifo, *unreadable, *locked_new, *out_path, *closed_path;
  char *ro_src, *ro_dir, *ro_file, *ro_new, *big, *big_out;
  kvik_file *rfile, *wfile, *closed; /* opened "r", "w", and one closed */
  kvik_file *rbig, *wbig;            /* `big` opened "r", `big_out` opened "w" */
  int direct_io;                     /* files in `dir` take O_DIRECT */
  /* Mappings of BIG_BYTES + a page: read-only; inaccessible; readable and writable but for the
   * page at BIG_BYTES / 2. */
  unsigned char *read_only, *no_access, *holed;
  kvik_mmap *map, *closed_map;       /* all of `file` mapped, and one closed */
  kvik_future *future;               /* a finished read */
  kvik_batch *batch;                 /* max_ops 2 */
  int has_remote;                    /* built with libcurl */
  kvik_remote *remote, *closed_remote;
  kvik_remote_options sized, http_kind, s3_kind, no_struct_size, bad_kind, bad_size;
  kvik_batch_op op_read, op_null_file, op_bad_opcode, op_null_buf, op_negative, op_overflow, op_closed,
      op_wrong_mode, op_zero, ops3[3];
  kvik_batch_event events[4];
  char buf[FILE_BYTES];
  int64_t value;
  /* Outputs of the calls under test. */
  kvik_file *out_file;
  kvik_mmap *out_map;
  kvik_future *out_future;
  kvik_batch *out_batch;
  kvik_remote *out_remote;
  /* The message of the call under test, kept by helpers that make more kvik calls after it. */
  char message[1200];
  int message_kept;
} fx;

static int failures, cases_run, skipped;
static int verbose;

/* ---- cases ------------------------------------------------------------------------------ */

enum case_flags {
  NEEDS_NON_ROOT = 1 << 0, /* permissions: root reads and writes anything */
  NEEDS_REMOTE = 1 << 1,   /* uses a remote handle: needs libcurl */
  NOREMOTE_CODE = 1 << 2,  /* without libcurl the code is KVIK_ENOREMOTE */
  ON_FIFO = 1 << 3,        /* may block in open(2): watched, and freed if it does */
  IN_CHILD = 1 << 4,       /* crashed once (UBSan included): runs in a child process */
  NEEDS_DIRECT_IO = 1 << 5 /* O_DIRECT in the test's directory */
};

typedef struct bad_case {
  const char *input; /* the bad input, as the docs table names it */
  const char *call;  /* the call under test, as written below */
  long long (*run)(void);
  long long code;   /* the code it must return */
  const char *op;   /* what the message must name: the operation */
  const char *what; /* and this (path, URL, setting), unless NULL */
  unsigned flags;
} bad_case;

#define DEFINE_RUN_(id, input, call, code, op, what, flags) \
  static long long run_##id(void) { return (long long)(call); }
#define ROW_(id, input, call, code, op, what, flags) {input, #call, run_##id, code, op, what, flags},
#define COUNT_OF(a) (sizeof(a) / sizeof((a)[0]))

static void failf(const char *input, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(const char *input, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "FAIL [%s] ", input);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  failures++;
}

/* For helpers that make kvik calls after the one under test. */
static void keep_message(void) {
  snprintf(fx.message, sizeof fx.message, "%s", kvik_last_error());
  fx.message_kept = 1;
}

static int same(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

/* ---- helpers that some cases call ----------------------------------------------------------- */

/* A write that RLIMIT_FSIZE forbids: the limit stands in for a file system's largest file, which
 * is not the same everywhere (tmpfs takes any off_t). SIGXFSZ is ignored so that write(2) fails
 * with EFBIG instead of killing the process. */
static long long write_past_file_size_limit(void) {
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old;
  lim.rlim_cur = 4096;
  void (*previous)(int) = signal(SIGXFSZ, SIG_IGN);
  setrlimit(RLIMIT_FSIZE, &lim);
  long long rc = kvik_file_write(fx.wfile, fx.buf, 16, 8192);
  keep_message();
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, previous);
  return rc;
}

/* A write of 0 bytes past the end returns 0 and leaves the file as it was. */
static long long write_nothing_past_end(void) {
  int64_t before = kvik_file_size(fx.wfile);
  long long rc = kvik_file_write(fx.wfile, NULL, 0, (int64_t)1 << 40);
  keep_message();
  if (kvik_file_size(fx.wfile) != before) failf("write of 0 bytes", "the file's size changed");
  return rc;
}

/* Finish a request of 0 bytes started as `rc`: it must have given a future whose result is 0. */
static long long finish_future(int rc, const char *what) {
  if (rc < 0) return rc;
  if (fx.out_future == NULL || fx.out_future == POISON) {
    failf(what, "returned 0 without a future");
    return rc;
  }
  long long result = kvik_future_wait(fx.out_future);
  keep_message();
  kvik_future_free(fx.out_future);
  fx.out_future = NULL;
  return result;
}

static long long pread_nothing(void) {
  return finish_future(kvik_file_pread(fx.rfile, NULL, 0, 0, 0, &fx.out_future), "kvik_file_pread of 0 bytes");
}

static long long pwrite_nothing(void) {
  return finish_future(kvik_file_pwrite(fx.wfile, NULL, 0, 0, 0, &fx.out_future), "kvik_file_pwrite of 0 bytes");
}

static long long mmap_pread_nothing(void) {
  return finish_future(kvik_mmap_pread(fx.map, NULL, 0, 0, 0, &fx.out_future), "kvik_mmap_pread of 0 bytes");
}

/* Submit a good operation followed by `bad`: the batch must refuse both. */
static long long submit_after_good_op(const kvik_batch_op *bad) {
  kvik_batch_op ops[2] = {fx.op_read, *bad};
  long long rc = kvik_batch_submit(fx.batch, ops, 2);
  keep_message();
  kvik_batch_cancel(fx.batch);
  int leaked = kvik_batch_wait(fx.batch, 0, fx.events, 4, 0);
  if (rc < 0 && leaked != 0) failf("rejected batch", "%d operation(s) ran although the submission failed", leaked);
  return rc;
}

/* A batch operation of 0 bytes completes with result 0. */
static long long batch_nothing(void) {
  int rc = kvik_batch_submit(fx.batch, &fx.op_zero, 1);
  if (rc < 0) return rc;
  int n = kvik_batch_wait(fx.batch, 1, fx.events, 4, -1);
  if (n != 1 || fx.events[0].status != KVIK_BATCH_COMPLETE) {
    failf("batch op of 0 bytes", "kvik_batch_wait gave %d events, status %d", n, (int)fx.events[0].status);
    return n < 0 ? n : INT_MIN;
  }
  return fx.events[0].result;
}

static long long remote_read_nothing(void) { return kvik_remote_read(fx.remote, NULL, 0, 0); }

/* O_DIRECT on, for reads and writes: in a case that runs in a child process, which the settings
 * end with. */
static void direct_io_on(void) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 1));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, 1));
}
#define DIRECT(call) (direct_io_on(), (call))

/* The result of a request started as `rc`. */
static long long waited(int rc) {
  if (rc < 0) return rc;
  long long result = kvik_future_wait(fx.out_future);
  keep_message();
  kvik_future_free(fx.out_future);
  fx.out_future = NULL;
  return result;
}

/* One batch operation of BIG_BYTES at offset 0: its result. (Events carry no message.) */
static long long batch_result(kvik_file *file, kvik_batch_opcode opcode, void *buf) {
  kvik_batch_op op = {file, opcode, buf, BIG_BYTES, 0, NULL};
  int rc = kvik_batch_submit(fx.batch, &op, 1);
  if (rc < 0) return rc;
  snprintf(fx.message, sizeof fx.message, "(none: batch events carry no message)");
  fx.message_kept = 1;
  int n = kvik_batch_wait(fx.batch, 1, fx.events, 1, -1);
  if (n != 1) {
    failf("batch operation", "kvik_batch_wait gave %d events", n);
    return n < 0 ? n : INT_MIN;
  }
  return fx.events[0].result;
}

static long long free_null_handles(void) {
  kvik_file_free(NULL);
  kvik_mmap_free(NULL);
  kvik_future_free(NULL);
  kvik_batch_free(NULL);
  kvik_remote_free(NULL);
  return 0;
}

/* ---- the catalogue -------------------------------------------------------------------------- */

#define OPEN "kvik_file_open"
#define FILE_OPEN_CASES(X)                                                                                          \
  X(open_null_path, "NULL path", kvik_file_open(NULL, "r", 0, &fx.out_file), -EINVAL, OPEN, "NULL path", 0)         \
  X(open_null_flags, "NULL flags", kvik_file_open(fx.file, NULL, 0, &fx.out_file), -EINVAL, OPEN, "NULL flags", 0)  \
  X(open_null_out, "NULL output handle", kvik_file_open(fx.file, "r", 0, NULL), -EINVAL, OPEN, "NULL output", 0)     \
  X(open_bad_flags, "unknown flag string", kvik_file_open(fx.file, "rw", 0, &fx.out_file), -EINVAL, OPEN, fx.file,  \
    0)                                                                                                              \
  X(open_missing, "missing file", kvik_file_open(fx.missing, "r", 0, &fx.out_file), -ENOENT, OPEN, fx.missing, 0)   \
  X(open_empty, "empty path", kvik_file_open("", "r", 0, &fx.out_file), -ENOENT, OPEN, "(\"\"", 0)                  \
  X(open_notdir, "a file used as a directory", kvik_file_open(fx.notdir, "r", 0, &fx.out_file), -ENOTDIR, OPEN,     \
    fx.notdir, 0)                                                                                                   \
  X(open_too_long, "name longer than NAME_MAX", kvik_file_open(fx.too_long, "r", 0, &fx.out_file), -ENAMETOOLONG,   \
    OPEN, fx.dir, 0)                                                                                                \
  X(open_dir, "directory", kvik_file_open(fx.dir, "r", 0, &fx.out_file), -EISDIR, OPEN, fx.dir, 0)                  \
  X(open_dir_write, "directory, for writing", kvik_file_open(fx.dir, "w", 0644, &fx.out_file), -EISDIR, OPEN,       \
    fx.dir, 0)                                                                                                      \
  X(open_fifo_read, "FIFO without a writer", kvik_file_open(fx.fifo, "r", 0, &fx.out_file), -ESPIPE, OPEN, fx.fifo, \
    ON_FIFO)                                                                                                        \
  X(open_fifo_write, "FIFO without a reader", kvik_file_open(fx.fifo, "w", 0644, &fx.out_file), -ESPIPE, OPEN,      \
    fx.fifo, ON_FIFO)                                                                                               \
  X(open_fifo_rw, "FIFO, read and write", kvik_file_open(fx.fifo, "r+", 0, &fx.out_file), -ESPIPE, OPEN, fx.fifo,   \
    ON_FIFO)                                                                                                        \
  X(open_unreadable, "file without read permission", kvik_file_open(fx.unreadable, "r", 0, &fx.out_file),          \
    -EACCES, OPEN, fx.unreadable, NEEDS_NON_ROOT)                                                                   \
  X(open_unwritable_dir, "new file in a directory without write permission",                                        \
    kvik_file_open(fx.locked_new, "w", 0644, &fx.out_file), -EACCES, OPEN, fx.locked_new, NEEDS_NON_ROOT)

#define FILE_IO_CASES(X)                                                                                            \
  X(read_null_handle, "NULL handle", kvik_file_read(NULL, fx.buf, 16, 0), -EINVAL, "kvik_file_read", "NULL handle", \
    0)                                                                                                              \
  X(write_null_handle, "NULL handle", kvik_file_write(NULL, fx.buf, 16, 0), -EINVAL, "kvik_file_write",             \
    "NULL handle", 0)                                                                                               \
  X(pread_null_handle, "NULL handle", kvik_file_pread(NULL, fx.buf, 16, 0, 0, &fx.out_future), -EINVAL,             \
    "kvik_file_pread", "NULL handle", 0)                                                                            \
  X(pwrite_null_handle, "NULL handle", kvik_file_pwrite(NULL, fx.buf, 16, 0, 0, &fx.out_future), -EINVAL,           \
    "kvik_file_pwrite", "NULL handle", 0)                                                                           \
  X(close_null_handle, "NULL handle", kvik_file_close(NULL), -EINVAL, "kvik_file_close", "NULL handle", 0)          \
  X(size_null_handle, "NULL handle", kvik_file_size(NULL), -EINVAL, "kvik_file_size", "NULL handle", 0)             \
  X(fd_null_handle, "NULL handle", kvik_file_fd(NULL), -EINVAL, "kvik_file_fd", "NULL handle", 0)                   \
  X(direct_null_handle, "NULL handle", kvik_file_set_direct_io(NULL, 1, 1), -EINVAL,                              \
    "kvik_file_set_direct_io", "NULL handle", 0)                                                                    \
  X(direct_bad_choice, "direct IO choice not -1, 0 or 1", kvik_file_set_direct_io(fx.rfile, 2, 0), -EINVAL,         \
    "kvik_file_set_direct_io", fx.file, 0)                                                                          \
  X(read_null_buf, "NULL buffer, size > 0", kvik_file_read(fx.rfile, NULL, 16, 0), -EINVAL, "kvik_file_read",       \
    fx.file, 0)                                                                                                     \
  X(write_null_buf, "NULL buffer, size > 0", kvik_file_write(fx.wfile, NULL, 16, 0), -EINVAL, "kvik_file_write",    \
    fx.out_path, 0)                                                                                                 \
  X(pread_null_buf, "NULL buffer, size > 0", kvik_file_pread(fx.rfile, NULL, 16, 0, 0, &fx.out_future), -EINVAL,    \
    "kvik_file_pread", fx.file, 0)                                                                                  \
  X(pwrite_null_buf, "NULL buffer, size > 0", kvik_file_pwrite(fx.wfile, NULL, 16, 0, 0, &fx.out_future), -EINVAL,  \
    "kvik_file_pwrite", fx.out_path, 0)                                                                             \
  X(pread_null_future, "NULL future", kvik_file_pread(fx.rfile, fx.buf, 16, 0, 0, NULL), -EINVAL,                   \
    "kvik_file_pread", "NULL future", 0)                                                                            \
  X(pwrite_null_future, "NULL future", kvik_file_pwrite(fx.wfile, fx.buf, 16, 0, 0, NULL), -EINVAL,                 \
    "kvik_file_pwrite", "NULL future", 0)                                                                           \
  X(read_negative, "negative offset", kvik_file_read(fx.rfile, fx.buf, 16, -1), -EINVAL, "kvik_file_read",          \
    "negative offset -1", 0)                                                                                        \
  X(write_negative, "negative offset", kvik_file_write(fx.wfile, fx.buf, 16, -1), -EINVAL, "kvik_file_write",       \
    "negative offset", 0)                                                                                           \
  X(pread_negative, "negative offset", kvik_file_pread(fx.rfile, fx.buf, 16, INT64_MIN, 0, &fx.out_future),         \
    -EINVAL, "kvik_file_pread", "negative offset", 0)                                                               \
  X(pwrite_negative, "negative offset", kvik_file_pwrite(fx.wfile, fx.buf, 16, -4096, 0, &fx.out_future), -EINVAL,  \
    "kvik_file_pwrite", "negative offset", 0)                                                                       \
  X(read_overflow, "offset + size > INT64_MAX", kvik_file_read(fx.rfile, fx.buf, 16, INT64_MAX), -EINVAL,           \
    "kvik_file_read", "overflow", 0)                                                                                \
  X(write_overflow, "offset + size > INT64_MAX", kvik_file_write(fx.wfile, fx.buf, 16, INT64_MAX - 8), -EINVAL,     \
    "kvik_file_write", "overflow", 0)                                                                               \
  X(pread_huge, "size > SSIZE_MAX", kvik_file_pread(fx.rfile, fx.buf, SIZE_MAX, 0, 0, &fx.out_future), -EINVAL,     \
    "kvik_file_pread", "overflow", 0)                                                                               \
  X(pwrite_huge, "size > SSIZE_MAX", kvik_file_pwrite(fx.wfile, fx.buf, (size_t)SSIZE_MAX + 1, 0, 0, &fx.out_future), \
    -EINVAL, "kvik_file_pwrite", "overflow", 0)                                                                     \
  X(write_too_far, "offset past the largest file allowed", write_past_file_size_limit(), -EFBIG, "pwrite",          \
    fx.out_path, 0)                                                                                                 \
  X(read_write_only, "handle not open for reading", kvik_file_read(fx.wfile, fx.buf, 16, 0), -EBADF,                \
    "kvik_file_read", "not opened for reading", 0)                                                                  \
  X(pread_write_only, "handle not open for reading", kvik_file_pread(fx.wfile, fx.buf, 16, 0, 0, &fx.out_future),   \
    -EBADF, "kvik_file_pread", "not opened for reading", 0)                                                         \
  X(write_read_only, "handle not open for writing", kvik_file_write(fx.rfile, fx.buf, 16, 0), -EBADF,               \
    "kvik_file_write", "not opened for writing", 0)                                                                 \
  X(pwrite_read_only, "handle not open for writing", kvik_file_pwrite(fx.rfile, fx.buf, 16, 0, 0, &fx.out_future),  \
    -EBADF, "kvik_file_pwrite", "not opened for writing", 0)                                                        \
  X(read_closed, "closed handle", kvik_file_read(fx.closed, fx.buf, 16, 0), -EBADF, "kvik_file_read",               \
    fx.closed_path, 0)                                                                                              \
  X(write_closed, "closed handle", kvik_file_write(fx.closed, fx.buf, 16, 0), -EBADF, "kvik_file_write",            \
    fx.closed_path, 0)                                                                                              \
  X(pread_closed, "closed handle", kvik_file_pread(fx.closed, fx.buf, 16, 0, 0, &fx.out_future), -EBADF,            \
    "kvik_file_pread", fx.closed_path, 0)                                                                           \
  X(pwrite_closed, "closed handle", kvik_file_pwrite(fx.closed, fx.buf, 16, 0, 0, &fx.out_future), -EBADF,          \
    "kvik_file_pwrite", fx.closed_path, 0)                                                                          \
  X(size_closed, "closed handle", kvik_file_size(fx.closed), -EBADF, "kvik_file_size", fx.closed_path, 0)           \
  X(fd_closed, "closed handle", kvik_file_fd(fx.closed), -EBADF, "kvik_file_fd", fx.closed_path, 0)                 \
  X(direct_closed, "closed handle", kvik_file_set_direct_io(fx.closed, 1, 1), -EBADF, "kvik_file_set_direct_io",  \
    fx.closed_path, 0)                                                                                              \
  X(flags_closed, "closed handle", kvik_file_open_flags(fx.closed), -EBADF, "kvik_file_open_flags", fx.closed_path, \
    0)                                                                                                              \
  X(backend_closed, "closed handle", kvik_file_backend(fx.closed, NULL, 0), -EBADF, "kvik_file_backend",            \
    fx.closed_path, 0)                                                                                              \
  X(double_close, "double close", kvik_file_close(fx.closed), -EBADF, "kvik_file_close", "already closed", 0)       \
  X(read_nothing, "size 0, NULL buffer: no-op", kvik_file_read(fx.rfile, NULL, 0, 0), 0, NULL, NULL, 0)             \
  X(read_nothing_at_end, "size 0 at offset INT64_MAX: no-op", kvik_file_read(fx.rfile, NULL, 0, INT64_MAX), 0,      \
    NULL, NULL, 0)                                                                                                  \
  X(write_nothing, "size 0 past the end: no-op, size unchanged", write_nothing_past_end(), 0, NULL, NULL, 0)        \
  X(pread_nothing, "size 0: a future with result 0", pread_nothing(), 0, NULL, NULL, 0)                             \
  X(pwrite_nothing, "size 0: a future with result 0", pwrite_nothing(), 0, NULL, NULL, 0)                           \
  X(read_past_end, "offset past the end of the file: 0 bytes", kvik_file_read(fx.rfile, fx.buf, 16, (int64_t)1 << 40), \
    0, NULL, NULL, 0)

#define DIO (IN_CHILD | NEEDS_DIRECT_IO)
#define BAD_BUFFER_CASES(X)                                                                                         \
  X(read_ro, "read-only buffer", kvik_file_read(fx.rbig, fx.read_only, BIG_BYTES, 0), -EFAULT, "pread", fx.big,     \
    IN_CHILD)                                                                                                       \
  X(read_ro_direct, "read-only buffer, O_DIRECT", DIRECT(kvik_file_read(fx.rbig, fx.read_only, BIG_BYTES, 0)),      \
    -EFAULT, "pread", fx.big, DIO)                                                                                  \
  X(read_ro_bounced, "read-only buffer, O_DIRECT, not page-aligned",                                               \
    DIRECT(kvik_file_read(fx.rbig, fx.read_only + 1, BIG_BYTES, 0)), -EFAULT, "pread", fx.big, DIO)                \
  X(pread_ro_bounced, "read-only buffer, O_DIRECT, not page-aligned, 4 tasks",                                     \
    DIRECT(waited(kvik_file_pread(fx.rbig, fx.read_only + 1, BIG_BYTES, 0, TASK, &fx.out_future))), -EFAULT,        \
    "pread", fx.big, DIO)                                                                                           \
  X(read_holed_bounced, "a bad page in the middle, O_DIRECT, not page-aligned",                                    \
    DIRECT(kvik_file_read(fx.rbig, fx.holed + 1, BIG_BYTES, 0)), -EFAULT, "pread", "(524287 of 1048576 bytes", DIO) \
  X(batch_read_ro_bounced, "read-only buffer, O_DIRECT, not page-aligned, batch",                                  \
    DIRECT(batch_result(fx.rbig, KVIK_BATCH_READ, fx.read_only + 1)), -EFAULT, NULL, NULL, DIO)                    \
  X(write_none, "inaccessible buffer", kvik_file_write(fx.wbig, fx.no_access, BIG_BYTES, 0), -EFAULT, "pwrite",     \
    fx.big_out, IN_CHILD)                                                                                           \
  X(write_none_direct, "inaccessible buffer, O_DIRECT",                                                             \
    DIRECT(kvik_file_write(fx.wbig, fx.no_access, BIG_BYTES, 0)), -EFAULT, "pwrite", fx.big_out, DIO)              \
  X(write_none_bounced, "inaccessible buffer, O_DIRECT, not page-aligned",                                         \
    DIRECT(kvik_file_write(fx.wbig, fx.no_access + 1, BIG_BYTES, 0)), -EFAULT, "pwrite", fx.big_out, DIO)          \
  X(pwrite_none_bounced, "inaccessible buffer, O_DIRECT, not page-aligned, 4 tasks",                                \
    DIRECT(waited(kvik_file_pwrite(fx.wbig, fx.no_access + 1, BIG_BYTES, 0, TASK, &fx.out_future))), -EFAULT,       \
    "pwrite", fx.big_out, DIO)                                                                                      \
  X(write_holed_direct, "a bad page in the middle, O_DIRECT", DIRECT(kvik_file_write(fx.wbig, fx.holed, BIG_BYTES, \
    0)), -EFAULT, "pwrite", "(524288 of 1048576 bytes", DIO)                                                       \
  X(batch_write_none, "inaccessible buffer, O_DIRECT, batch", DIRECT(batch_result(fx.wbig, KVIK_BATCH_WRITE,       \
    fx.no_access)), -EFAULT, NULL, NULL, DIO)

#define FUTURE_CASES(X)                                                                                             \
  X(wait_null, "NULL future", kvik_future_wait(NULL), -EINVAL, "kvik_future_wait", "NULL future", 0)                \
  X(wait_for_null, "NULL future", kvik_future_wait_for(NULL, 0), -EINVAL, "kvik_future_wait_for", "NULL future", 0) \
  X(wait_for_negative, "negative timeout", kvik_future_wait_for(fx.future, -1), -EINVAL, "kvik_future_wait_for",    \
    "negative timeout", 0)

#define MMAP "kvik_mmap_open"
#define MMAP_CASES(X)                                                                                               \
  X(mmap_null_path, "NULL path", kvik_mmap_open(NULL, "r", 0, 0, &fx.out_map), -EINVAL, MMAP, "NULL path", 0)       \
  X(mmap_null_flags, "NULL flags", kvik_mmap_open(fx.file, NULL, 0, 0, &fx.out_map), -EINVAL, MMAP, "NULL flags",   \
    0)                                                                                                              \
  X(mmap_null_out, "NULL output handle", kvik_mmap_open(fx.file, "r", 0, 0, NULL), -EINVAL, MMAP, "NULL output", 0) \
  X(mmap_write_flags, "flags other than \"r\"", kvik_mmap_open(fx.file, "r+", 0, 0, &fx.out_map), -EINVAL, MMAP,    \
    fx.file, 0)                                                                                                     \
  X(mmap_missing, "missing file", kvik_mmap_open(fx.missing, "r", 0, 0, &fx.out_map), -ENOENT, MMAP, fx.missing, 0) \
  X(mmap_dir, "directory", kvik_mmap_open(fx.dir, "r", 0, 0, &fx.out_map), -EISDIR, MMAP, fx.dir, 0)                \
  X(mmap_fifo, "FIFO without a writer", kvik_mmap_open(fx.fifo, "r", 0, 0, &fx.out_map), -ESPIPE, MMAP, fx.fifo,    \
    ON_FIFO)                                                                                                        \
  X(mmap_unreadable, "file without read permission", kvik_mmap_open(fx.unreadable, "r", 0, 0, &fx.out_map),         \
    -EACCES, MMAP, fx.unreadable, NEEDS_NON_ROOT)                                                                   \
  X(mmap_negative, "negative map offset", kvik_mmap_open(fx.file, "r", 0, -1, &fx.out_map), -EINVAL, MMAP,          \
    "map offset -1", 0)                                                                                             \
  X(mmap_offset_past_end, "map offset past the end", kvik_mmap_open(fx.file, "r", 1, INT64_MAX, &fx.out_map),       \
    -EINVAL, MMAP, fx.file, 0)                                                                                      \
  X(mmap_size_past_end, "map size past the end", kvik_mmap_open(fx.file, "r", FILE_BYTES + 1, 0, &fx.out_map),      \
    -EINVAL, MMAP, "past the end", 0)                                                                               \
  X(mmap_huge, "map size SIZE_MAX", kvik_mmap_open(fx.file, "r", SIZE_MAX, 0, &fx.out_map), -EINVAL, MMAP,          \
    "past the end", 0)                                                                                              \
  X(mmap_read_null_handle, "NULL handle", kvik_mmap_read(NULL, fx.buf, 16, 0), -EINVAL, "kvik_mmap_read",           \
    "NULL handle", 0)                                                                                               \
  X(mmap_read_null_buf, "NULL buffer, size > 0", kvik_mmap_read(fx.map, NULL, 16, 0), -EINVAL, "kvik_mmap_read",    \
    "NULL buffer", 0)                                                                                               \
  X(mmap_pread_null_future, "NULL future", kvik_mmap_pread(fx.map, fx.buf, 16, 0, 0, NULL), -EINVAL,                \
    "kvik_mmap_pread", "NULL future", 0)                                                                            \
  X(mmap_read_negative, "negative offset", kvik_mmap_read(fx.map, fx.buf, 16, -1), -EINVAL, "kvik_mmap_read",       \
    "outside the mapped range", 0)                                                                                  \
  X(mmap_read_past_end, "range past the mapped end", kvik_mmap_read(fx.map, fx.buf, 16, FILE_BYTES - 8), -EINVAL,   \
    "kvik_mmap_read", "outside the mapped range", 0)                                                                \
  X(mmap_read_huge, "size SIZE_MAX", kvik_mmap_read(fx.map, fx.buf, SIZE_MAX, 0), -EINVAL, "kvik_mmap_read",        \
    "outside the mapped range", 0)                                                                                  \
  X(mmap_read_overflow, "offset INT64_MAX", kvik_mmap_read(fx.map, fx.buf, 16, INT64_MAX), -EINVAL,                 \
    "kvik_mmap_read", "outside the mapped range", 0)                                                                \
  X(mmap_read_closed, "closed handle", kvik_mmap_read(fx.closed_map, fx.buf, 16, 0), -EBADF, "kvik_mmap_read",      \
    fx.file, 0)                                                                                                     \
  X(mmap_pread_closed, "closed handle", kvik_mmap_pread(fx.closed_map, fx.buf, 16, 0, 0, &fx.out_future), -EBADF,   \
    "kvik_mmap_pread", fx.file, 0)                                                                                  \
  X(mmap_close_null, "NULL handle", kvik_mmap_close(NULL), -EINVAL, "kvik_mmap_close", "NULL handle", 0)            \
  X(mmap_double_close, "double close", kvik_mmap_close(fx.closed_map), -EBADF, "kvik_mmap_close", "already closed", \
    0)                                                                                                              \
  X(mmap_size_null, "NULL handle", kvik_mmap_file_size(NULL), -EINVAL, "kvik_mmap_file_size", "NULL handle", 0)     \
  X(mmap_read_nothing, "size 0 at the mapped end: no-op", kvik_mmap_read(fx.map, NULL, 0, FILE_BYTES), 0, NULL,     \
    NULL, IN_CHILD)                                                                                                   \
  X(mmap_pread_nothing, "size 0: a future with result 0", mmap_pread_nothing(), 0, NULL, NULL, IN_CHILD)

#define PC_INFO "kvik_page_cache_info"
#define PC_DROP "kvik_page_cache_drop"
#define PC_RANGE "kvik_page_cache_info_range"
#define PAGE_CACHE_CASES(X)                                                                                         \
  X(pc_info_null, "NULL path", kvik_page_cache_info(NULL, NULL, NULL), -EINVAL, PC_INFO, "NULL path", 0)            \
  X(pc_drop_null, "NULL path", kvik_page_cache_drop(NULL), -EINVAL, PC_DROP, "NULL path", 0)                        \
  X(pc_info_missing, "missing file", kvik_page_cache_info(fx.missing, NULL, NULL), -ENOENT, PC_INFO, fx.missing, 0) \
  X(pc_drop_missing, "missing file", kvik_page_cache_drop(fx.missing), -ENOENT, PC_DROP, fx.missing, 0)             \
  X(pc_info_dir, "directory", kvik_page_cache_info(fx.dir, NULL, NULL), -EISDIR, PC_INFO, fx.dir, 0)                \
  X(pc_drop_dir, "directory", kvik_page_cache_drop(fx.dir), -EISDIR, PC_DROP, fx.dir, 0)                            \
  X(pc_info_fifo, "FIFO without a writer", kvik_page_cache_info(fx.fifo, NULL, NULL), -ESPIPE, PC_INFO, fx.fifo,    \
    ON_FIFO)                                                                                                        \
  X(pc_drop_fifo, "FIFO without a writer", kvik_page_cache_drop(fx.fifo), -ESPIPE, PC_DROP, fx.fifo, ON_FIFO)       \
  X(pc_info_unreadable, "file without read permission", kvik_page_cache_info(fx.unreadable, NULL, NULL), -EACCES,   \
    PC_INFO, fx.unreadable, NEEDS_NON_ROOT)                                                                         \
  X(pc_drop_unreadable, "file without read permission", kvik_page_cache_drop(fx.unreadable), -EACCES, PC_DROP,      \
    fx.unreadable, NEEDS_NON_ROOT)                                                                                  \
  X(pc_range_null, "NULL path", kvik_page_cache_info_range(NULL, 0, 0, NULL, NULL), -EINVAL,      \
    PC_RANGE, "NULL path", 0)                                                                     \
  X(pc_range_offset, "negative offset", kvik_page_cache_info_range(fx.file, -1, 0, NULL, NULL),   \
    -EINVAL, PC_RANGE, "negative offset -1", 0)                                                   \
  X(pc_range_length, "negative length", kvik_page_cache_info_range(fx.file, 0, -1, NULL, NULL),   \
    -EINVAL, PC_RANGE, "negative length -1", 0)                                                   \
  X(pc_range_missing, "missing file", kvik_page_cache_info_range(fx.missing, 0, 0, NULL, NULL),   \
    -ENOENT, PC_RANGE, fx.missing, 0)                                                             \
  X(dio_null, "NULL directory", kvik_direct_io_supported(NULL), -EINVAL, "kvik_direct_io_supported", "NULL", 0)     \
  X(dio_missing, "missing directory", kvik_direct_io_supported(fx.missing), -ENOENT, "kvik_direct_io_supported",    \
    fx.missing, 0)                                                                                                  \
  X(dio_file, "a file, not a directory", kvik_direct_io_supported(fx.file), -ENOTDIR, "kvik_direct_io_supported",   \
    fx.file, 0)

#define SUBMIT "kvik_batch_submit"
#define BATCH_CASES(X)                                                                                              \
  X(batch_zero_ops, "max_ops 0", kvik_batch_create(0, &fx.out_batch), -EINVAL, "kvik_batch_create", "max_ops", 0)   \
  X(batch_many_ops, "max_ops above 65536", kvik_batch_create(65537, &fx.out_batch), -EINVAL, "kvik_batch_create",   \
    "max_ops", 0)                                                                                                   \
  X(batch_null_out, "NULL output handle", kvik_batch_create(1, NULL), -EINVAL, "kvik_batch_create", "NULL output",  \
    0)                                                                                                              \
  X(submit_null_batch, "NULL batch", kvik_batch_submit(NULL, &fx.op_read, 1), -EINVAL, SUBMIT, "NULL batch", 0)     \
  X(submit_null_ops, "NULL operations, count > 0", kvik_batch_submit(fx.batch, NULL, 1), -EINVAL, SUBMIT,           \
    "NULL operations", 0)                                                                                           \
  X(submit_null_file, "operation with a NULL file", submit_after_good_op(&fx.op_null_file), -EINVAL,                \
    SUBMIT ": operation 1", "NULL file", 0)                                                                         \
  X(submit_bad_opcode, "operation with an unknown opcode", submit_after_good_op(&fx.op_bad_opcode), -EINVAL,        \
    SUBMIT ": operation 1", fx.file, 0)                                                                             \
  X(submit_null_buf, "operation with a NULL buffer, size > 0", submit_after_good_op(&fx.op_null_buf), -EINVAL,      \
    SUBMIT ": operation 1", "NULL buffer", 0)                                                                       \
  X(submit_negative, "operation with a negative offset", submit_after_good_op(&fx.op_negative), -EINVAL,            \
    SUBMIT ": operation 1", "negative offset", 0)                                                                   \
  X(submit_overflow, "operation with offset + size > INT64_MAX", submit_after_good_op(&fx.op_overflow), -EINVAL,    \
    SUBMIT ": operation 1", "overflow", 0)                                                                          \
  X(submit_closed, "operation on a closed file", submit_after_good_op(&fx.op_closed), -EBADF, SUBMIT ": operation 1", \
    fx.closed_path, 0)                                                                                              \
  X(submit_wrong_mode, "write to a file opened \"r\"", submit_after_good_op(&fx.op_wrong_mode), -EBADF,             \
    SUBMIT ": operation 1", "not opened for writing", 0)                                                            \
  X(submit_too_many, "more operations than max_ops", kvik_batch_submit(fx.batch, fx.ops3, 3), -EAGAIN, SUBMIT,      \
    "max_ops", 0)                                                                                                   \
  X(wait_null_batch, "NULL batch", kvik_batch_wait(NULL, 0, fx.events, 4, 0), -EINVAL, "kvik_batch_wait",           \
    "NULL batch", 0)                                                                                                \
  X(wait_null_events, "NULL events, max_events > 0", kvik_batch_wait(fx.batch, 0, NULL, 1, 0), -EINVAL,             \
    "kvik_batch_wait", "NULL events", 0)                                                                            \
  X(wait_min_above_max, "min_events > max_events", kvik_batch_wait(fx.batch, 2, fx.events, 1, 0), -EINVAL,          \
    "kvik_batch_wait", "min_events", 0)                                                                             \
  X(cancel_null, "NULL batch", kvik_batch_cancel(NULL), -EINVAL, "kvik_batch_cancel", "NULL batch", 0)              \
  X(submit_nothing, "count 0, NULL operations: no-op", kvik_batch_submit(fx.batch, NULL, 0), 0, NULL, NULL, 0)      \
  X(batch_op_nothing, "operation of size 0: completes with 0", batch_nothing(), 0, NULL, NULL, 0)

#define MEMORY_CASES(X)                                                                                             \
  X(register_null, "NULL buffer", kvik_host_pin(NULL, 4096), -EINVAL, "kvik_host_pin", "empty range", \
    0)                                                                                                              \
  X(register_empty, "size 0", kvik_host_pin(fx.buf, 0), -EINVAL, "kvik_host_pin", "empty range", 0)   \
  X(deregister_null, "NULL buffer", kvik_host_unpin(NULL), -EINVAL, "kvik_host_unpin", "NULL", 0)     \
  X(probe_unknown, "unknown library", kvik_runtime_lib_supported((kvik_runtime_lib)9, NULL, 0), -EINVAL,                \
    "kvik_runtime_lib_supported", "unknown library 9", 0)

#define SET "kvik_setting_set"
#define PARSE "kvik_setting_parse"
#define SETTING_CASES(X)                                                                                            \
  X(set_unknown, "unknown setting", kvik_setting_set(KVIK_SETTING_COUNT, 1), -EINVAL, SET, "unknown setting", 0)    \
  X(set_negative_id, "negative setting", kvik_setting_set((kvik_setting)-1, 1), -EINVAL, SET, "unknown setting", 0) \
  X(set_no_threads, "value below the range", kvik_setting_set(KVIK_SETTING_NUM_THREADS, 0), -EINVAL, SET,          \
    "num_threads", 0)                                                                                               \
  X(set_many_threads, "value above the range", kvik_setting_set(KVIK_SETTING_NUM_THREADS, INT64_MAX), -EINVAL, SET, \
    "must be at most 4294967295", 0)                                                                                \
  X(set_task_size_zero, "value below the range", kvik_setting_set(KVIK_SETTING_TASK_SIZE, 0), -EINVAL, SET,         \
    "task_size", 0)                                                                                                 \
  X(set_timeout_huge, "value above the range", kvik_setting_set(KVIK_SETTING_HTTP_TIMEOUT, INT64_MAX), -EINVAL, SET, \
    "http_timeout", 0)                                                                                              \
  X(set_compat_3, "not a compat mode", kvik_setting_set(KVIK_SETTING_COMPAT_MODE, 3), -EINVAL, SET, "compat_mode",  \
    0)                                                                                                              \
  X(set_bool_2, "not a boolean", kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 2), -EINVAL, SET,               \
    "auto_direct_io_read", 0)                                                                                       \
  X(set_list, "a list setting as a number", kvik_setting_set(KVIK_SETTING_HTTP_STATUS_CODES, 404), -EINVAL, SET,    \
    "http_status_codes", 0)                                                                                         \
  X(parse_word, "text that is no number", kvik_setting_parse(KVIK_SETTING_NUM_THREADS, "abc"), -EINVAL, PARSE,      \
    "num_threads='abc'", 0)                                                                                         \
  X(parse_empty, "empty text", kvik_setting_parse(KVIK_SETTING_NUM_THREADS, " "), -EINVAL, PARSE, "num_threads", 0) \
  X(parse_unit, "a number with a unit", kvik_setting_parse(KVIK_SETTING_TASK_SIZE, "4 MiB"), -EINVAL, PARSE,        \
    "task_size='4 MiB'", 0)                                                                                         \
  X(parse_too_big, "a number beyond int64_t", kvik_setting_parse(KVIK_SETTING_TASK_SIZE, "99999999999999999999"),   \
    -EINVAL, PARSE, "task_size", 0)                                                                                 \
  X(parse_negative, "a value below the range", kvik_setting_parse(KVIK_SETTING_TASK_SIZE, "-1"), -EINVAL, PARSE,    \
    "task_size", 0)                                                                                                 \
  X(parse_tristate, "not a compat mode", kvik_setting_parse(KVIK_SETTING_COMPAT_MODE, "maybe"), -EINVAL, PARSE,     \
    "compat_mode='maybe'", 0)                                                                                       \
  X(parse_bool, "not a boolean", kvik_setting_parse(KVIK_SETTING_REMOTE_VERBOSE, "2"), -EINVAL, PARSE,              \
    "remote_verbose='2'", 0)                                                                                        \
  X(parse_status_low, "HTTP status below 100", kvik_setting_parse(KVIK_SETTING_HTTP_STATUS_CODES, "429,99"),        \
    -EINVAL, PARSE, "http_status_codes", 0)                                                                         \
  X(parse_status_word, "HTTP status list with a word", kvik_setting_parse(KVIK_SETTING_HTTP_STATUS_CODES, "429,x"), \
    -EINVAL, PARSE, "http_status_codes", 0)                                                                         \
  X(parse_null, "NULL text", kvik_setting_parse(KVIK_SETTING_NUM_THREADS, NULL), -EINVAL, PARSE, "NULL text", 0)    \
  X(parse_unknown, "unknown setting", kvik_setting_parse(KVIK_SETTING_COUNT, "1"), -EINVAL, PARSE,                  \
    "unknown setting", 0)                                                                                           \
  X(get_null, "NULL value", kvik_setting_get(KVIK_SETTING_TASK_SIZE, NULL), -EINVAL, "kvik_setting_get",            \
    "NULL value", 0)                                                                                                \
  X(get_unknown, "unknown setting", kvik_setting_get(KVIK_SETTING_COUNT, &fx.value), -EINVAL, "kvik_setting_get",   \
    "unknown setting", 0)                                                                                           \
  X(get_list, "a list setting as a number", kvik_setting_get(KVIK_SETTING_HTTP_STATUS_CODES, &fx.value), -EINVAL,   \
    "kvik_setting_get", "http_status_codes", 0)                                                                     \
  X(source_unknown, "unknown setting", kvik_setting_source_of(KVIK_SETTING_COUNT), -EINVAL,                         \
    "kvik_setting_source_of", "unknown setting", 0)                                                                 \
  X(format_unknown, "unknown setting", kvik_setting_format(KVIK_SETTING_COUNT, fx.buf, 64), -EINVAL,                \
    "kvik_setting_format", "unknown setting", 0)                                                                    \
  X(format_null_buf, "NULL buffer, len > 0", kvik_setting_format(KVIK_SETTING_TASK_SIZE, NULL, 16), -EINVAL,        \
    "kvik_setting_format", "NULL buffer", IN_CHILD)                                                                 \
  X(format_list_null_buf, "NULL buffer, len > 0", kvik_setting_format(KVIK_SETTING_HTTP_STATUS_CODES, NULL, 16),    \
    -EINVAL, "kvik_setting_format", "NULL buffer", IN_CHILD)                                                        \
  X(lookup_unknown, "unknown name", kvik_setting_lookup("no_such_setting"), -EINVAL, "kvik_setting_lookup",         \
    "no_such_setting", 0)                                                                                           \
  X(lookup_null, "NULL name", kvik_setting_lookup(NULL), -EINVAL, "kvik_setting_lookup", "NULL", 0)

#define ROPEN "kvik_remote_open"
#define REMOTE_CASES(X)                                                                                             \
  X(remote_null_url, "NULL URL", kvik_remote_open(NULL, NULL, &fx.out_remote), -EINVAL, ROPEN, "NULL URL", 0)       \
  X(remote_null_out, "NULL output handle", kvik_remote_open(REMOTE_URL, NULL, NULL), -EINVAL, ROPEN, "NULL output", \
    0)                                                                                                              \
  X(remote_struct_size, "options.struct_size 0", kvik_remote_open(REMOTE_URL, &fx.no_struct_size, &fx.out_remote),  \
    -EINVAL, ROPEN, "struct_size", 0)                                                                               \
  X(remote_bad_kind, "unknown kind", kvik_remote_open(REMOTE_URL, &fx.bad_kind, &fx.out_remote), -EINVAL, ROPEN,    \
    "unknown kind", 0)                                                                                              \
  X(remote_bad_size, "size below -1", kvik_remote_open(REMOTE_URL, &fx.bad_size, &fx.out_remote), -EINVAL, ROPEN,   \
    "negative size", 0)                                                                                             \
  X(remote_empty, "empty URL", kvik_remote_open("", &fx.sized, &fx.out_remote), -EINVAL, ROPEN "(\"\")",             \
    "not an http://, https:// or s3:// URL", NOREMOTE_CODE)                                                         \
  X(remote_ftp, "unsupported scheme", kvik_remote_open("ftp://host/key", &fx.sized, &fx.out_remote), -EINVAL,       \
    ROPEN "(\"ftp://host/key\")", "not an http://", NOREMOTE_CODE)                                                 \
  X(remote_no_scheme, "no scheme", kvik_remote_open("host/key", &fx.sized, &fx.out_remote), -EINVAL,                \
    ROPEN "(\"host/key\")", "not an http://", NOREMOTE_CODE)                                                       \
  X(remote_one_slash, "malformed scheme", kvik_remote_open("http:/host/key", &fx.sized, &fx.out_remote), -EINVAL,   \
    ROPEN "(\"http:/host/key\")", "not an http://", NOREMOTE_CODE)                                                 \
  X(remote_no_host, "http URL without a host", kvik_remote_open("http://", &fx.sized, &fx.out_remote), -EINVAL,     \
    ROPEN "(\"http://\")", "host", NOREMOTE_CODE)                                                                  \
  X(remote_empty_host, "https URL with an empty host", kvik_remote_open("https:///key", &fx.sized, &fx.out_remote), \
    -EINVAL, ROPEN "(\"https:///key\")", "host", NOREMOTE_CODE)                                                    \
  X(remote_s3_no_key, "s3 URL without a key", kvik_remote_open("s3://bucket", &fx.s3_kind, &fx.out_remote),         \
    -EINVAL, ROPEN "(\"s3://bucket\")", "expected s3://BUCKET/KEY", NOREMOTE_CODE)                                 \
  X(remote_s3_empty_key, "s3 URL with an empty key", kvik_remote_open("s3://bucket/", &fx.s3_kind, &fx.out_remote), \
    -EINVAL, ROPEN "(\"s3://bucket/\")", "expected s3://BUCKET/KEY", NOREMOTE_CODE)                                \
  X(remote_s3_no_bucket, "s3 URL without a bucket", kvik_remote_open("s3:///key", &fx.s3_kind, &fx.out_remote),     \
    -EINVAL, ROPEN "(\"s3:///key\")", "expected s3://BUCKET/KEY", NOREMOTE_CODE)                                   \
  X(remote_s3_bad_bucket, "s3 bucket with other characters", kvik_remote_open("s3://b@d/key", &fx.s3_kind,          \
    &fx.out_remote), -EINVAL, ROPEN, "a bucket name holds letters", NOREMOTE_CODE)                                  \
  X(remote_s3_as_http, "s3 URL opened as HTTP", kvik_remote_open("s3://bucket/key", &fx.http_kind, &fx.out_remote), \
    -EINVAL, ROPEN "(\"s3://bucket/key\")", "opens as S3 or public S3 only", NOREMOTE_CODE)                        \
  X(remote_s3_no_credentials, "S3 without credentials", kvik_remote_open("s3://bucket/key", &fx.s3_kind,            \
    &fx.out_remote), -EINVAL, ROPEN "(\"s3://bucket/key\")", "credentials", NOREMOTE_CODE)                         \
  X(remote_read_null_handle, "NULL handle", kvik_remote_read(NULL, fx.buf, 16, 0), -EINVAL, "kvik_remote_read",     \
    "NULL handle", 0)                                                                                               \
  X(remote_close_null, "NULL handle", kvik_remote_close(NULL), -EINVAL, "kvik_remote_close", "NULL handle", 0)      \
  X(remote_size_null, "NULL handle", kvik_remote_size(NULL), -EINVAL, "kvik_remote_size", "NULL handle", 0)         \
  X(remote_kind_null, "NULL handle", kvik_remote_kind_of(NULL), -EINVAL, "kvik_remote_kind_of", "NULL handle", 0)   \
  X(remote_read_null_buf, "NULL buffer, size > 0", kvik_remote_read(fx.remote, NULL, 16, 0), -EINVAL,               \
    "kvik_remote_read", REMOTE_URL, NEEDS_REMOTE)                                                                   \
  X(remote_read_null_buf_past_end, "NULL buffer, size > 0, past the end", kvik_remote_read(fx.remote, NULL, 16, 100), \
    -EINVAL, "kvik_remote_read", "NULL buffer", NEEDS_REMOTE)                                                       \
  X(remote_read_negative, "negative offset", kvik_remote_read(fx.remote, fx.buf, 16, -1), -EINVAL,                  \
    "kvik_remote_read", "negative offset", NEEDS_REMOTE)                                                            \
  X(remote_read_overflow, "offset + size > INT64_MAX", kvik_remote_read(fx.remote, fx.buf, SIZE_MAX, INT64_MAX),    \
    -EINVAL, "kvik_remote_read", "overflow", NEEDS_REMOTE)                                                          \
  X(remote_pread_null_future, "NULL future", kvik_remote_pread(fx.remote, fx.buf, 16, 0, 0, NULL), -EINVAL,         \
    "kvik_remote_pread", "NULL future", NEEDS_REMOTE)                                                               \
  X(remote_read_closed, "closed handle", kvik_remote_read(fx.closed_remote, fx.buf, 16, 0), -EBADF,                 \
    "kvik_remote_read", REMOTE_URL, NEEDS_REMOTE)                                                                   \
  X(remote_double_close, "double close", kvik_remote_close(fx.closed_remote), -EBADF, "kvik_remote_close",          \
    "already closed", NEEDS_REMOTE)                                                                                 \
  X(remote_read_nothing, "size 0, NULL buffer: no-op", remote_read_nothing(), 0, NULL, NULL, NEEDS_REMOTE)

/* Run in a child process with a read-only bind mount of ro_src at ro_dir. */
#define READ_ONLY_FS_CASES(X)                                                                                       \
  X(ro_open_rw, "file on a read-only file system, \"r+\"", kvik_file_open(fx.ro_file, "r+", 0, &fx.out_file),       \
    -EROFS, OPEN, fx.ro_file, 0)                                                                                    \
  X(ro_open_w, "file on a read-only file system, \"w\"", kvik_file_open(fx.ro_file, "w", 0644, &fx.out_file),       \
    -EROFS, OPEN, fx.ro_file, 0)                                                                                    \
  X(ro_open_a, "file on a read-only file system, \"a\"", kvik_file_open(fx.ro_file, "a", 0644, &fx.out_file),       \
    -EROFS, OPEN, fx.ro_file, 0)                                                                                    \
  X(ro_create, "new file on a read-only file system", kvik_file_open(fx.ro_new, "w+", 0644, &fx.out_file), -EROFS,  \
    OPEN, fx.ro_new, 0)                                                                                             \
  X(ro_direct_io, "directory on a read-only file system", kvik_direct_io_supported(fx.ro_dir), -EROFS,              \
    "kvik_direct_io_supported", fx.ro_dir, 0)                                                                       \
  X(ro_open_r, "file on a read-only file system, \"r\": works", kvik_file_open(fx.ro_file, "r", 0, &fx.out_file),   \
    0, NULL, NULL, 0)                                                                                               \
  X(ro_mmap, "file on a read-only file system: maps", kvik_mmap_open(fx.ro_file, "r", 0, 0, &fx.out_map), 0, NULL,  \
    NULL, 0)                                                                                                        \
  X(ro_drop, "file on a read-only file system: drops", kvik_page_cache_drop(fx.ro_file), 0, NULL, NULL, 0)

/* Inputs that are no error by design: (id, input, call, the value it must give). */
#define NO_ERROR_CASES(X)                                                                                           \
  X(free_null, "NULL to every *_free", free_null_handles(), 0)                                                      \
  X(file_closed_null, "NULL handle", kvik_file_closed(NULL), 1)                                                     \
  X(mmap_closed_null, "NULL handle", kvik_mmap_closed(NULL), 1)                                                     \
  X(mmap_map_size_null, "NULL handle", kvik_mmap_map_size(NULL), 0)                                                 \
  X(mmap_map_offset_null, "NULL handle", kvik_mmap_map_offset(NULL), 0)                                             \
  X(future_done_null, "NULL future", kvik_future_done(NULL), 0)                                                     \
  X(future_bytes_null, "NULL future", kvik_future_bytes_done(NULL), 0)                                              \
  X(remote_url_null, "NULL handle", kvik_remote_url(NULL) == NULL, 1)                                               \
  X(setting_name_unknown, "unknown setting", kvik_setting_name(KVIK_SETTING_COUNT) == NULL, 1)                      \
  X(setting_env_unknown, "unknown setting", kvik_setting_env_name((kvik_setting)-1) == NULL, 1)                     \
  X(page_cache_null_outs, "NULL outputs", kvik_page_cache_info(fx.file, NULL, NULL), 0)                             \
  X(name_unknown, "unknown code", same(kvik_err_name(-999999), "UNKNOWN"), 1)                                       \
  X(text_unknown, "unknown code", same(kvik_strerror(-999999), "unknown error"), 1)                                 \
  X(name_unknown_errno, "errno value without a name", same(kvik_err_name(-200), "UNKNOWN"), 1)                      \
  X(text_unknown_errno, "errno value without a name", same(kvik_strerror(-200), "unknown error"), 1)                \
  X(name_unassigned, "unassigned library code", same(kvik_err_name(KVIK_ERRNO_BASE - 100), "UNKNOWN"), 1)          \
  X(name_int_min, "INT_MIN", same(kvik_err_name(INT_MIN), "UNKNOWN"), 1)                                            \
  X(text_int_min, "INT_MIN", same(kvik_strerror(INT_MIN), "unknown error"), 1)                                      \
  X(name_positive, "positive value", same(kvik_err_name(5), "OK"), 1)                                               \
  X(text_positive, "positive value", same(kvik_strerror(5), "success"), 1)

FILE_OPEN_CASES(DEFINE_RUN_)
FILE_IO_CASES(DEFINE_RUN_)
BAD_BUFFER_CASES(DEFINE_RUN_)
FUTURE_CASES(DEFINE_RUN_)
MMAP_CASES(DEFINE_RUN_)
PAGE_CACHE_CASES(DEFINE_RUN_)
BATCH_CASES(DEFINE_RUN_)
MEMORY_CASES(DEFINE_RUN_)
SETTING_CASES(DEFINE_RUN_)
REMOTE_CASES(DEFINE_RUN_)
READ_ONLY_FS_CASES(DEFINE_RUN_)

#define DEFINE_NO_ERROR_RUN_(id, input, call, value) static long long run_##id(void) { return (long long)(call); }
NO_ERROR_CASES(DEFINE_NO_ERROR_RUN_)

/* ---- running a case ------------------------------------------------------------------------- */

/* Frees a call on a FIFO that blocks in open(2): after FIFO_PATIENCE_MS it opens the other end. */
typedef struct fifo_guard {
  pthread_t thread;
  atomic_int call_returned;
  int freed_fd; /* >= 0 when it had to free the call */
} fifo_guard;

static void *guard_fifo(void *arg) {
  fifo_guard *g = arg;
  struct timespec tick = {0, 10 * 1000 * 1000};
  for (int ms = 0; ms < FIFO_PATIENCE_MS && !atomic_load(&g->call_returned); ms += 10) nanosleep(&tick, NULL);
  if (!atomic_load(&g->call_returned)) g->freed_fd = open(fx.fifo, O_RDWR | O_NONBLOCK | O_CLOEXEC);
  return NULL;
}

static void start_fifo_guard(fifo_guard *g) {
  atomic_init(&g->call_returned, 0);
  g->freed_fd = -1;
  if (pthread_create(&g->thread, NULL, guard_fifo, g) != 0) FAIL_AT("pthread_create");
}

/* Returns 1 if the call blocked until the guard opened the FIFO's other end. */
static int stop_fifo_guard(fifo_guard *g) {
  atomic_store(&g->call_returned, 1);
  pthread_join(g->thread, NULL);
  if (g->freed_fd < 0) return 0;
  close(g->freed_fd);
  return 1;
}

/* Run the call in a child process; its code and message come back through a pipe. Returns 0, or
 * -1 (with a failure reported) if the child crashed. */
static int run_in_child(const bad_case *c, long long *rc, char *message, size_t len) {
  int fds[2];
  if (pipe(fds) != 0) FAIL_AT("pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) FAIL_AT("fork: %s", strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    long long result = c->run();
    const char *m = fx.message_kept ? fx.message : kvik_last_error();
    int sent = write(fds[1], &result, sizeof result) == (ssize_t)sizeof result && write(fds[1], m, strlen(m) + 1) > 0;
    _exit(sent ? 0 : 3);
  }
  close(fds[1]);
  ssize_t got = read(fds[0], rc, sizeof *rc);
  ssize_t text = got == (ssize_t)sizeof *rc ? read(fds[0], message, len - 1) : 0;
  message[text > 0 ? text : 0] = '\0';
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (got == (ssize_t)sizeof *rc && WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
  if (WIFSIGNALED(status)) failf(c->input, "%s crashed: killed by signal %d (%s)", c->call, WTERMSIG(status),
                                 strsignal(WTERMSIG(status)));
  else failf(c->input, "%s crashed: the child exited with %d", c->call, WEXITSTATUS(status));
  return -1;
}

static void poison_outputs(void) {
  fx.out_file = POISON;
  fx.out_map = POISON;
  fx.out_future = POISON;
  fx.out_batch = POISON;
  fx.out_remote = POISON;
  fx.message_kept = 0;
}

/* After a failing call every output it was given must be NULL. */
static void check_no_output(const bad_case *c) {
  static const char *const names[] = {"&fx.out_file", "&fx.out_map", "&fx.out_future", "&fx.out_batch",
                                      "&fx.out_remote"};
  void *const values[] = {fx.out_file, fx.out_map, fx.out_future, fx.out_batch, fx.out_remote};
  for (size_t i = 0; i < COUNT_OF(names); i++)
    if (strstr(c->call, names[i]) && values[i] != NULL)
      failf(c->input, "%s failed but left %s = %p instead of NULL", c->call, names[i] + 1, values[i]);
}

static void free_outputs(void) {
  if (fx.out_file != POISON) kvik_file_free(fx.out_file);
  if (fx.out_map != POISON) kvik_mmap_free(fx.out_map);
  if (fx.out_future != POISON) kvik_future_free(fx.out_future);
  if (fx.out_batch != POISON) kvik_batch_free(fx.out_batch);
  if (fx.out_remote != POISON) kvik_remote_free(fx.out_remote);
}

static long long expected_code(const bad_case *c) {
  return (c->flags & NOREMOTE_CODE) && !fx.has_remote ? KVIK_ENOREMOTE : c->code;
}

/* Markdown: '|' would end a table cell. */
static void print_cell(const char *text) {
  for (const char *p = text; *p; p++) {
    if (*p == '|') putchar('\\');
    putchar(*p);
  }
}

static void print_row(const bad_case *c, long long rc, const char *message) {
  fputs("| ", stdout);
  print_cell(c->input);
  fputs(" | `", stdout);
  print_cell(c->call);
  if (rc >= 0) printf("` | %lld | ", rc);
  else printf("` | %s | ", kvik_err_name((int)rc));
  print_cell(rc < 0 ? message : "");
  fputs(" |\n", stdout);
}

#ifdef KVIK_TEST_NO_FORK
static const int no_fork = 1;
#else
static const int no_fork = 0;
#endif

static int skip_reason(const bad_case *c, const char **why) {
  *why = (c->flags & NEEDS_NON_ROOT) && geteuid() == 0 ? "running as root, which may read and write any file"
         : (c->flags & NEEDS_REMOTE) && !fx.remote   ? "libcurl could not be loaded"
         : (c->flags & NEEDS_DIRECT_IO) && !fx.direct_io ? "no O_DIRECT in the test's directory"
         : (c->flags & IN_CHILD) && no_fork ? "runs in a child process, which ThreadSanitizer cannot follow"
                                                     : NULL;
  return *why != NULL;
}

static void check_result(const bad_case *c, long long rc, const char *message) {
  long long want = expected_code(c);
  if (rc != want) {
    failf(c->input, "%s returned %lld (%s), expected %lld (%s)%s%s%s", c->call, rc, kvik_err_name((int)rc), want,
          kvik_err_name((int)want), rc < 0 ? "; message: \"" : "", rc < 0 ? message : "", rc < 0 ? "\"" : "");
    return;
  }
  if (want >= 0) return;
  if (c->op && !strstr(message, c->op))
    failf(c->input, "%s: message \"%s\" does not name the operation \"%s\"", c->call, message, c->op);
  /* Without libcurl a remote call says so, before it looks at its URL. */
  const char *what = want == KVIK_ENOREMOTE && c->code != KVIK_ENOREMOTE ? "libcurl unavailable"
                                                                          : c->what;
  if (what && !strstr(message, what))
    failf(c->input, "%s: message \"%s\" lacks \"%s\"", c->call, message, what);
}

static void run_case(const bad_case *c) {
  const char *why;
  if (skip_reason(c, &why)) {
    printf("skip [%s] %s: %s\n", c->input, c->call, why);
    skipped++;
    return;
  }
  cases_run++;
  poison_outputs();
  char message[sizeof fx.message];
  long long rc;
  if (c->flags & IN_CHILD) {
    if (run_in_child(c, &rc, message, sizeof message) < 0) return;
  } else {
    fifo_guard guard;
    if (c->flags & ON_FIFO) start_fifo_guard(&guard);
    rc = c->run();
    snprintf(message, sizeof message, "%s", fx.message_kept ? fx.message : kvik_last_error());
    if ((c->flags & ON_FIFO) && stop_fifo_guard(&guard))
      failf(c->input, "%s hung: it blocked in open(2) until the test opened the FIFO's other end %d ms later",
            c->call, FIFO_PATIENCE_MS);
  }
  if (verbose) print_row(c, rc, message);
  check_result(c, rc, message);
  if (rc < 0 && !(c->flags & IN_CHILD)) check_no_output(c); /* a child's outputs stay there */
  free_outputs();
}

static void run_cases(const char *title, const bad_case *cases, size_t n) {
  if (verbose) printf("\n### %s\n\n| input | call | code | message |\n|---|---|---|---|\n", title);
  for (size_t i = 0; i < n; i++) run_case(&cases[i]);
}

static void run_catalogue(void) {
  const bad_case open_cases[] = {FILE_OPEN_CASES(ROW_)};
  const bad_case io_cases[] = {FILE_IO_CASES(ROW_)};
  const bad_case buffer_cases[] = {BAD_BUFFER_CASES(ROW_)};
  const bad_case future_cases[] = {FUTURE_CASES(ROW_)};
  const bad_case mmap_cases[] = {MMAP_CASES(ROW_)};
  const bad_case page_cache_cases[] = {PAGE_CACHE_CASES(ROW_)};
  const bad_case batch_cases[] = {BATCH_CASES(ROW_)};
  const bad_case memory_cases[] = {MEMORY_CASES(ROW_)};
  const bad_case setting_cases[] = {SETTING_CASES(ROW_)};
  const bad_case remote_cases[] = {REMOTE_CASES(ROW_)};
  run_cases("Opening files", open_cases, COUNT_OF(open_cases));
  run_cases("File IO", io_cases, COUNT_OF(io_cases));
  run_cases("Buffers the process cannot use", buffer_cases, COUNT_OF(buffer_cases));
  run_cases("Futures", future_cases, COUNT_OF(future_cases));
  run_cases("Mapped files", mmap_cases, COUNT_OF(mmap_cases));
  run_cases("Page cache and direct IO", page_cache_cases, COUNT_OF(page_cache_cases));
  run_cases("Batches", batch_cases, COUNT_OF(batch_cases));
  run_cases("Memory and libraries", memory_cases, COUNT_OF(memory_cases));
  run_cases("Settings", setting_cases, COUNT_OF(setting_cases));
  run_cases("Remote files", remote_cases, COUNT_OF(remote_cases));
}

typedef struct no_error_case {
  const char *input, *call;
  long long (*run)(void);
  long long value;
} no_error_case;

static void run_no_error_cases(void) {
#define NO_ERROR_ROW_(id, input, call, value) {input, #call, run_##id, value},
  const no_error_case cases[] = {NO_ERROR_CASES(NO_ERROR_ROW_)};
#undef NO_ERROR_ROW_
  if (verbose) printf("\n### No error by design\n\n| input | call | result |\n|---|---|---|\n");
  for (size_t i = 0; i < COUNT_OF(cases); i++) {
    cases_run++;
    long long got = cases[i].run();
    if (verbose) printf("| %s | `%s` | %lld |\n", cases[i].input, cases[i].call, got);
    if (got != cases[i].value) failf(cases[i].input, "%s gave %lld, expected %lld", cases[i].call, got, cases[i].value);
  }
}

/* ---- a read-only file system ----------------------------------------------------------------- */

static int write_text(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A mount namespace of our own: directly with CAP_SYS_ADMIN, else inside a user namespace. */
static const char *enter_mount_namespace(void) {
  if (unshare(CLONE_NEWNS) == 0) return NULL;
  uid_t uid = geteuid();
  gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return "no CAP_SYS_ADMIN and no user namespaces";
  char map[64];
  snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
  if (write_text("/proc/self/uid_map", map) != 0) return "cannot write uid_map";
  if (write_text("/proc/self/setgroups", "deny") != 0) return "cannot write setgroups";
  snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
  if (write_text("/proc/self/gid_map", map) != 0) return "cannot write gid_map";
  return NULL;
}

static const char *mount_read_only(void) {
  const char *why = enter_mount_namespace();
  if (why) return why;
  /* Keep the mount in this namespace: it must not propagate to the machine's. */
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return "cannot make the mounts private";
  if (mount(fx.ro_src, fx.ro_dir, NULL, MS_BIND, NULL) != 0) return "cannot bind-mount";
  if (mount(NULL, fx.ro_dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) != 0) return "cannot remount read-only";
  return NULL;
}

/* In a child process, so that the mount and its namespace end with it; before any other kvik
 * call, so that the child starts with no threads. */
static void run_read_only_fs_cases(void) {
  const bad_case cases[] = {READ_ONLY_FS_CASES(ROW_)};
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) FAIL_AT("fork: %s", strerror(errno));
  if (pid == 0) {
    const char *why = mount_read_only();
    if (why) {
      printf("skip %zu read-only file system cases: %s (%s)\n", COUNT_OF(cases), why, strerror(errno));
      fflush(NULL);
      _exit(TEST_SKIP);
    }
    run_cases("Read-only file systems", cases, COUNT_OF(cases));
    fflush(NULL);
    _exit(failures ? 1 : 0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == TEST_SKIP) skipped += (int)COUNT_OF(cases);
  else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failf("read-only file system", "child status %d", status);
  else cases_run += (int)COUNT_OF(cases);
}

/* ---- fixture -------------------------------------------------------------------------------- */

static void make_paths(void) {
  fx.dir = test_mkdtemp();
  fx.file = test_path(fx.dir, "data");
  test_fill(fx.buf, sizeof fx.buf, 7);
  test_write_file(fx.file, fx.buf, FILE_BYTES);
  fx.missing = test_path(fx.dir, "missing");
  fx.notdir = test_path(fx.file, "below");
  char name[NAME_MAX + 2];
  memset(name, 'n', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  fx.too_long = test_path(fx.dir, name);
  fx.fifo = test_path(fx.dir, "fifo");
  if (mkfifo(fx.fifo, 0644) != 0) FAIL_AT("mkfifo(%s): %s", fx.fifo, strerror(errno));
  fx.unreadable = test_path(fx.dir, "unreadable");
  test_write_file(fx.unreadable, "secret", 6);
  chmod(fx.unreadable, 0);
  char *locked = test_path(fx.dir, "locked");
  if (mkdir(locked, 0555) != 0) FAIL_AT("mkdir(%s): %s", locked, strerror(errno));
  fx.locked_new = test_path(locked, "new");
  free(locked);
  fx.out_path = test_path(fx.dir, "out");
  fx.closed_path = test_path(fx.dir, "closed");
  fx.ro_src = test_path(fx.dir, "ro-source");
  fx.ro_dir = test_path(fx.dir, "ro");
  if (mkdir(fx.ro_src, 0755) != 0 || mkdir(fx.ro_dir, 0755) != 0) FAIL_AT("mkdir: %s", strerror(errno));
  fx.ro_file = test_path(fx.ro_dir, "data");
  fx.ro_new = test_path(fx.ro_dir, "new");
  fx.big = test_path(fx.dir, "big");
  unsigned char *bytes = malloc(BIG_BYTES);
  test_fill(bytes, BIG_BYTES, 24);
  test_write_file(fx.big, bytes, BIG_BYTES);
  free(bytes);
  fx.big_out = test_path(fx.dir, "big-out");
  char *ro_src_file = test_path(fx.ro_src, "data");
  test_write_file(ro_src_file, fx.buf, FILE_BYTES);
  free(ro_src_file);
}

static void make_remote_options(void) {
  kvik_remote_options *all[] = {&fx.sized, &fx.http_kind, &fx.s3_kind, &fx.no_struct_size, &fx.bad_kind, &fx.bad_size};
  for (size_t i = 0; i < COUNT_OF(all); i++) kvik_remote_options_init(all[i]);
  fx.sized.kind = KVIK_REMOTE_HTTP;
  fx.sized.size = 64; /* known: no request goes out */
  fx.http_kind.kind = KVIK_REMOTE_HTTP;
  fx.s3_kind.kind = KVIK_REMOTE_S3;
  fx.s3_kind.size = 64;
  fx.no_struct_size.struct_size = 0;
  fx.bad_kind.kind = (kvik_remote_kind)99;
  fx.bad_size.size = -2;
  /* The credentials case needs none in the environment. */
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("AWS_SESSION_TOKEN");
}

static void open_remotes(void) {
  fx.has_remote = kvik_remote_supported(NULL, 0);
  if (!fx.has_remote) return;
  ASSERT_OK(kvik_remote_open(REMOTE_URL, &fx.sized, &fx.remote));
  ASSERT_OK(kvik_remote_open(REMOTE_URL, &fx.sized, &fx.closed_remote));
  ASSERT_OK(kvik_remote_close(fx.closed_remote));
}

static kvik_batch_op batch_op(kvik_file *file, kvik_batch_opcode opcode, void *buf, size_t size, int64_t offset) {
  return (kvik_batch_op){file, opcode, buf, size, offset, NULL};
}

static void make_batch_ops(void) {
  ASSERT_OK(kvik_batch_create(2, &fx.batch));
  fx.op_read = batch_op(fx.rfile, KVIK_BATCH_READ, fx.buf, 16, 0);
  fx.op_null_file = batch_op(NULL, KVIK_BATCH_READ, fx.buf, 16, 0);
  fx.op_bad_opcode = batch_op(fx.rfile, (kvik_batch_opcode)7, fx.buf, 16, 0);
  fx.op_null_buf = batch_op(fx.rfile, KVIK_BATCH_READ, NULL, 16, 0);
  fx.op_negative = batch_op(fx.rfile, KVIK_BATCH_READ, fx.buf, 16, -1);
  fx.op_overflow = batch_op(fx.rfile, KVIK_BATCH_READ, fx.buf, 16, INT64_MAX);
  fx.op_closed = batch_op(fx.closed, KVIK_BATCH_READ, fx.buf, 16, 0);
  fx.op_wrong_mode = batch_op(fx.rfile, KVIK_BATCH_WRITE, fx.buf, 16, 0);
  fx.op_zero = batch_op(fx.rfile, KVIK_BATCH_READ, NULL, 0, 0);
  for (int i = 0; i < 3; i++) fx.ops3[i] = fx.op_read;
}

static unsigned char *map_buffer(int prot) {
  void *map = mmap(NULL, BIG_BYTES + 4096, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) FAIL_AT("mmap: %s", strerror(errno));
  return map;
}

static void open_fixtures(void) {
  fx.direct_io = kvik_direct_io_supported(fx.dir) == 1;
  fx.read_only = map_buffer(PROT_READ);
  fx.no_access = map_buffer(PROT_NONE);
  fx.holed = map_buffer(PROT_READ | PROT_WRITE);
  ASSERT_EQ(mprotect(fx.holed + BIG_BYTES / 2, 4096, PROT_NONE), 0);
  ASSERT_OK(kvik_file_open(fx.big, "r", 0, &fx.rbig));
  ASSERT_OK(kvik_file_open(fx.big_out, "w", 0644, &fx.wbig));
  ASSERT_OK(kvik_file_open(fx.file, "r", 0, &fx.rfile));
  ASSERT_OK(kvik_file_open(fx.out_path, "w", 0644, &fx.wfile));
  ASSERT_OK(kvik_file_open(fx.closed_path, "w+", 0644, &fx.closed));
  ASSERT_OK(kvik_file_close(fx.closed));
  ASSERT_OK(kvik_mmap_open(fx.file, "r", 0, 0, &fx.map));
  ASSERT_OK(kvik_mmap_open(fx.file, "r", 0, 0, &fx.closed_map));
  ASSERT_OK(kvik_mmap_close(fx.closed_map));
  ASSERT_OK(kvik_file_pread(fx.rfile, fx.buf, 16, 0, 0, &fx.future));
  ASSERT_EQ(kvik_future_wait(fx.future), 16);
  make_batch_ops();
  open_remotes();
}

static void close_fixtures(void) {
  kvik_batch_free(fx.batch);
  kvik_future_free(fx.future);
  kvik_mmap_free(fx.map);
  kvik_mmap_free(fx.closed_map);
  kvik_file_free(fx.rfile);
  kvik_file_free(fx.wfile);
  kvik_file_free(fx.closed);
  kvik_file_free(fx.rbig);
  kvik_file_free(fx.wbig);
  munmap(fx.read_only, BIG_BYTES + 4096);
  munmap(fx.no_access, BIG_BYTES + 4096);
  munmap(fx.holed, BIG_BYTES + 4096);
  kvik_remote_free(fx.remote);
  kvik_remote_free(fx.closed_remote);
  char **paths[] = {&fx.file, &fx.missing, &fx.notdir, &fx.too_long, &fx.fifo, &fx.unreadable, &fx.locked_new,
                    &fx.out_path, &fx.closed_path, &fx.ro_src, &fx.ro_dir, &fx.ro_file, &fx.ro_new,
                    &fx.big,      &fx.big_out};
  for (size_t i = 0; i < COUNT_OF(paths); i++) free(*paths[i]);
  test_rmdir(fx.dir);
}

/* Every setting as text, to prove that no failing call changed one. */
static void snapshot_settings(char out[KVIK_SETTING_COUNT][128]) {
  for (int s = 0; s < KVIK_SETTING_COUNT; s++) {
    ASSERT(kvik_setting_format((kvik_setting)s, out[s], 100) >= 0);
    snprintf(out[s] + strlen(out[s]), 28, " (source %d)", kvik_setting_source_of((kvik_setting)s));
  }
}

static void check_settings_unchanged(char before[KVIK_SETTING_COUNT][128]) {
  char after[KVIK_SETTING_COUNT][128];
  snapshot_settings(after);
  for (int s = 0; s < KVIK_SETTING_COUNT; s++)
    if (strcmp(before[s], after[s]) != 0)
      failf("settings", "%s changed from %s to %s", kvik_setting_name((kvik_setting)s), before[s], after[s]);
}

int main(void) {
  verbose = getenv("KVIK_TEST_VERBOSE") && strcmp(getenv("KVIK_TEST_VERBOSE"), "0") != 0;
  make_paths();
  make_remote_options();
  run_read_only_fs_cases();
  open_fixtures();
  char settings[KVIK_SETTING_COUNT][128];
  snapshot_settings(settings);
  run_catalogue();
  run_no_error_cases();
  check_settings_unchanged(settings);
  close_fixtures();
  printf("%d cases run, %d skipped, %d failures\n", cases_run, skipped, failures);
  return failures ? 1 : 0;
}
