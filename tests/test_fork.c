/* fork(): the child gets a working library (threads start again on first use), and IO the
 * parent had in flight completes in the child with KVIK_ECANCELED_BY_FORK instead of hanging,
 * while the parent's own copy completes normally. */
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
  kvik_file_free(f);
  free(ref);
  free(path);
  test_rmdir(dir);
  return 0;
}
