/* Futures: polling, timeouts, several waiters, freeing while running, close waiting for IO,
 * pool resizes under load, thousands of futures. The shim's gate holds reads in flight so that
 * "still running" is a fact, not a race. */
#include <pthread.h>

#include "fault_shim.h"
#include "test.h"

#define FILE_BYTES ((size_t)(4 << 20))
#define TASK (64 << 10)

static char *dir, *path;
static unsigned char *ref;

typedef struct {
  kvik_future *future;
  ssize_t result;
} waiter;

static void *wait_in_thread(void *arg) {
  waiter *w = arg;
  w->result = kvik_future_wait(w->future);
  return NULL;
}

static void *open_gate_later(void *arg) {
  (void)arg;
  usleep(50 * 1000);
  shim_open_gate();
  return NULL;
}

static kvik_future *start_held_read(kvik_file *f, unsigned char *buf) {
  atomic_store(&shim.gate_closed, 1);
  kvik_future *fut = NULL;
  ASSERT_OK(kvik_file_pread(f, buf, FILE_BYTES, 0, TASK, &fut));
  return fut;
}

static void test_poll_and_timeout(kvik_file *f, unsigned char *buf) {
  kvik_future *fut = start_held_read(f, buf);
  ASSERT_EQ(kvik_future_done(fut), 0);
  ASSERT_FAILS(kvik_future_wait_for(fut, 0), -ETIMEDOUT, "still running");
  ASSERT_FAILS(kvik_future_wait_for(fut, 20 * 1000 * 1000), -ETIMEDOUT, "still running");
  shim_open_gate();
  ASSERT_EQ(kvik_future_wait_for(fut, INT64_C(60) * 1000000000), FILE_BYTES);
  ASSERT_EQ(kvik_future_done(fut), 1);
  ASSERT_EQ(kvik_future_wait(fut), FILE_BYTES); /* again: same result */
  ASSERT_EQ(kvik_future_wait_for(fut, 0), FILE_BYTES);
  ASSERT_SAME_BYTES(buf, ref, FILE_BYTES);
  kvik_future_free(fut);
}

static void test_several_waiters(kvik_file *f, unsigned char *buf) {
  memset(buf, 0, FILE_BYTES);
  kvik_future *fut = start_held_read(f, buf);
  enum { N = 4 };
  waiter w[N];
  pthread_t t[N];
  for (int i = 0; i < N; i++) {
    w[i] = (waiter){fut, -1};
    pthread_create(&t[i], NULL, wait_in_thread, &w[i]);
  }
  usleep(10 * 1000);
  shim_open_gate();
  for (int i = 0; i < N; i++) {
    pthread_join(t[i], NULL);
    ASSERT_EQ(w[i].result, FILE_BYTES);
  }
  ASSERT_SAME_BYTES(buf, ref, FILE_BYTES);
  kvik_future_free(fut);
}

static void test_free_while_running(kvik_file *f, unsigned char *buf) {
  memset(buf, 0, FILE_BYTES);
  kvik_future *fut = start_held_read(f, buf);
  pthread_t t;
  pthread_create(&t, NULL, open_gate_later, NULL);
  kvik_future_free(fut); /* waits for the read */
  ASSERT_SAME_BYTES(buf, ref, FILE_BYTES);
  pthread_join(t, NULL);
  kvik_future_free(NULL);
}

static void test_close_waits_for_io(unsigned char *buf) {
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r", 0, &f));
  memset(buf, 0, FILE_BYTES);
  kvik_future *fut = start_held_read(f, buf);
  pthread_t t;
  pthread_create(&t, NULL, open_gate_later, NULL);
  ASSERT_OK(kvik_file_close(f)); /* returns only once the read is done */
  ASSERT_EQ(kvik_future_done(fut), 1);
  ASSERT_EQ(kvik_future_wait(fut), FILE_BYTES);
  ASSERT_SAME_BYTES(buf, ref, FILE_BYTES);
  kvik_future_free(fut);
  pthread_join(t, NULL);
  kvik_file_free(f);
}

static void *resize_to_three(void *arg) {
  (void)arg;
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 3));
  return NULL;
}

static void test_resize_with_io_in_flight(kvik_file *f, unsigned char *buf) {
  memset(buf, 0, FILE_BYTES);
  kvik_future *fut = start_held_read(f, buf);
  pthread_t t;
  pthread_create(&t, NULL, resize_to_three, NULL); /* waits for the running, held tasks */
  usleep(20 * 1000);
  shim_open_gate();
  pthread_join(t, NULL);
  ASSERT_EQ(kvik_future_wait(fut), FILE_BYTES);
  ASSERT_SAME_BYTES(buf, ref, FILE_BYTES);
  kvik_future_free(fut);
  int64_t n;
  ASSERT_OK(kvik_setting_get(KVIK_SETTING_NUM_THREADS, &n));
  ASSERT_EQ(n, 3);
}

/* Many small requests in flight at once, freed in a shuffled order, each with its own data. */
static void test_many_futures(kvik_file *f) {
  enum { N = 10000, CHUNK = 256 };
  kvik_future **futs = malloc(N * sizeof *futs);
  unsigned char *out = malloc((size_t)N * CHUNK);
  uint64_t rng = 12345;
  int64_t offsets[N];
  for (int i = 0; i < N; i++) {
    offsets[i] = (int64_t)test_below(&rng, FILE_BYTES - CHUNK);
    ASSERT_OK(kvik_file_pread(f, out + (size_t)i * CHUNK, CHUNK, offsets[i], 0, &futs[i]));
  }
  for (int i = N - 1; i > 0; i--) {
    int j = (int)test_below(&rng, (uint64_t)i + 1);
    kvik_future *x = futs[i];
    futs[i] = futs[j];
    futs[j] = x;
  }
  for (int i = 0; i < N; i++) {
    if (i % 3) ASSERT_EQ(kvik_future_wait(futs[i]), CHUNK);
    kvik_future_free(futs[i]);
  }
  for (int i = 0; i < N; i++) ASSERT_SAME_BYTES(out + (size_t)i * CHUNK, ref + offsets[i], CHUNK);
  free(out);
  free(futs);
}

static void test_bad_arguments(kvik_file *f, unsigned char *buf) {
  ASSERT_FAILS(kvik_future_wait(NULL), -EINVAL, "NULL future");
  ASSERT_FAILS(kvik_future_wait_for(NULL, 0), -EINVAL, "NULL future");
  ASSERT_EQ(kvik_future_done(NULL), 0);
  ASSERT_FAILS(kvik_file_pread(f, buf, 10, 0, 0, NULL), -EINVAL, "NULL future");
  kvik_future *fut = (kvik_future *)0x1;
  ASSERT_FAILS(kvik_file_pread(f, NULL, 10, 0, 0, &fut), -EINVAL, "NULL buffer");
  ASSERT(fut == NULL);
  ASSERT_FAILS(kvik_file_pread(f, buf, 10, -1, 0, &fut), -EINVAL, "negative offset");
  ASSERT_FAILS(kvik_file_pread(f, buf, 10, INT64_MAX - 5, 0, &fut), -EINVAL, "overflow");
  ASSERT_FAILS(kvik_file_read(f, buf, (size_t)-1, 0), -EINVAL, "overflow");
  ASSERT_OK(kvik_file_pread(f, NULL, 0, 0, 0, &fut)); /* size 0: nothing to read, no buffer needed */
  ASSERT_EQ(kvik_future_wait(fut), 0);
  kvik_future_free(fut);
}

int main(void) {
  dir = test_mkdtemp();
  path = test_path(dir, SHIM_TARGET_MARK);
  ref = malloc(FILE_BYTES);
  unsigned char *buf = malloc(FILE_BYTES);
  test_fill(ref, FILE_BYTES, 3);
  test_write_file(path, ref, FILE_BYTES);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 2));
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, "r", 0, &f));
  test_poll_and_timeout(f, buf);
  test_several_waiters(f, buf);
  test_free_while_running(f, buf);
  test_close_waits_for_io(buf);
  test_resize_with_io_in_flight(f, buf);
  test_many_futures(f);
  test_bad_arguments(f, buf);
  kvik_file_free(f);
  free(buf);
  free(ref);
  free(path);
  test_rmdir(dir);
  return 0;
}
