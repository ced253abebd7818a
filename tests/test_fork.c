/* fork(): the child gets a working library (threads start again on first use), and IO the
 * parent had in flight completes in the child with KVIK_ECANCELED_BY_FORK instead of hanging,
 * while the parent's own copy completes normally: futures on the pool, and a batch's operations
 * in its io_uring, which the child must leave to the parent. */
#include <sys/wait.h>

#include "fault_shim.h"
#include "test.h"

#define FILE_BYTES ((size_t)(2 << 20) + 99)
#define TASK (64 << 10)

static char *path;
static unsigned char *ref;

static void read_and_check(kvik_file *f) {
  unsigned char *buf = malloc(FILE_BYTES);
  ASSERT_EQ(kvik_file_read(f, buf, FILE_BYTES, 0), FILE_BYTES);
  ASSERT_SAME_BYTES(buf, ref, FILE_BYTES);
  free(buf);
}

static void wait_child(pid_t pid) {
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) FAIL_AT("child failed (status %d)", status);
}

static void test_child_gets_working_library(kvik_file *f) {
  read_and_check(f); /* the pool is running in the parent */
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    read_and_check(f);
    ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 3));
    read_and_check(f);
    kvik_file *g;
    ASSERT_OK(kvik_file_open(path, "r", 0, &g));
    read_and_check(g);
    kvik_file_free(g);
    _exit(0);
  }
  wait_child(pid);
  read_and_check(f);
}

static void test_in_flight_io_is_cancelled_in_child(kvik_file *f) {
  unsigned char *buf = calloc(1, FILE_BYTES);
  atomic_store(&shim.gate_closed, 1);
  kvik_future *fut;
  ASSERT_OK(kvik_file_pread(f, buf, FILE_BYTES, 0, TASK, &fut));
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    shim_open_gate();
    ASSERT_FAILS(kvik_future_wait(fut), KVIK_ECANCELED_BY_FORK, "fork");
    kvik_future_free(fut);
    read_and_check(f);
    ASSERT_OK(kvik_file_close(f)); /* nothing in flight any more: must not hang */
    kvik_file_free(f);
    _exit(0);
  }
  wait_child(pid);
  shim_open_gate();
  ASSERT_EQ(kvik_future_wait(fut), FILE_BYTES);
  ASSERT_SAME_BYTES(buf, ref, FILE_BYTES);
  kvik_future_free(fut);
  free(buf);
}

/* The parent's reads through a batch's io_uring (not yet collected at the fork) are reported to
 * the child as canceled by the fork; the child's own batch reads work through a ring of its own;
 * the parent then collects its reads, untouched by the child. */
static void batch_reads(kvik_batch *b, kvik_file *f, unsigned char *buf, unsigned n) {
  kvik_batch_op ops[8];
  for (unsigned i = 0; i < n; i++)
    ops[i] = (kvik_batch_op){f, KVIK_BATCH_READ, buf + i * TASK, TASK, (int64_t)(i * TASK), NULL};
  ASSERT_OK(kvik_batch_submit(b, ops, n));
}

static void expect_events(kvik_batch *b, unsigned n, kvik_batch_status status, ssize_t result) {
  kvik_batch_event ev[8];
  ASSERT_EQ(kvik_batch_wait(b, n, ev, 8, -1), n);
  for (unsigned i = 0; i < n; i++)
    if (ev[i].status != status || ev[i].result != result)
      FAIL_AT("event %u: status %d, result %zd; expected %d, %zd", i, ev[i].status, ev[i].result, status, result);
}

static void test_batch_ring_in_child(kvik_file *f) {
  if (!kvik_io_uring_supported(NULL, 0)) {
    printf("skip: a batch's io_uring across fork (no io_uring here)\n");
    return;
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_IO_URING, KVIK_ON));
  unsigned char *buf = calloc(8, TASK);
  kvik_batch *b;
  ASSERT_OK(kvik_batch_create(8, &b));
  batch_reads(b, f, buf, 8);
  fflush(NULL);
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    expect_events(b, 8, KVIK_BATCH_FAILED, KVIK_ECANCELED_BY_FORK);
    memset(buf, 0, 8 * TASK);
    batch_reads(b, f, buf, 8);
    expect_events(b, 8, KVIK_BATCH_COMPLETE, TASK);
    ASSERT_SAME_BYTES(buf, ref, 8 * TASK);
    kvik_batch_free(b);
    _exit(0);
  }
  wait_child(pid);
  expect_events(b, 8, KVIK_BATCH_COMPLETE, TASK);
  ASSERT_SAME_BYTES(buf, ref, 8 * TASK);
  kvik_batch_free(b);
  free(buf);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_IO_URING, KVIK_AUTO));
}

int main(void) {
  char *dir = test_mkdtemp();
  path = test_path(dir, SHIM_TARGET_MARK);
  ref = malloc(FILE_BYTES);
  test_fill(ref, FILE_BYTES, 5);
  test_write_file(path, ref, FILE_BYTES);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 2));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, TASK));
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r", 0, &f));
  test_child_gets_working_library(f);
  test_in_flight_io_is_cancelled_in_child(f);
  test_batch_ring_in_child(f);
  kvik_file_free(f);
  free(ref);
  free(path);
  test_rmdir(dir);
  return 0;
}
