/* I/O statistics (issue 26, KvikIO's SummaryMonitor): monitors count every public read and write
 * of the process while they exist, each call once with its bytes, duration and failure; they are
 * independent of one another; reset starts a new span and stop ends it for good; counting is
 * exact with threads doing IO while monitors are read, reset and created. */
#include <stddef.h>

#include "test.h"

#define BYTES ((size_t)1 << 20)
#define THREADS 4
#define READS_PER_THREAD 50

static char *dir, *path;
static unsigned char *data;

static kvik_summary reading(kvik_monitor *m) {
  kvik_summary s = {.struct_size = sizeof s};
  ASSERT_OK(kvik_monitor_read(m, &s));
  ASSERT_EQ(s.struct_size, sizeof s);
  return s;
}

/* What every reading holds whatever was counted: the parts add up to the whole. */
static void check_consistent(const kvik_summary *s) {
  ASSERT_EQ(s->num_reads + s->num_writes, s->num_ops);
  ASSERT_EQ(s->bytes_read + s->bytes_written, s->bytes_transferred);
  ASSERT(s->start_ns <= s->end_ns);
  ASSERT(s->busy_ns <= (uint64_t)(s->end_ns - s->start_ns));
  uint64_t ops = 0, bytes = 0, duration = 0, errors = 0;
  for (int b = 0; b < KVIK_IO_BACKENDS; b++) {
    ops += s->by_backend[b].num_ops;
    bytes += s->by_backend[b].bytes_transferred;
    duration += s->by_backend[b].total_duration_ns;
    errors += s->by_backend[b].num_errors;
  }
  ASSERT_EQ(ops, s->num_ops);
  ASSERT_EQ(bytes, s->bytes_transferred);
  ASSERT_EQ(duration, s->total_duration_ns);
  ASSERT_EQ(errors, s->num_errors);
}

static kvik_file *open_file(const char *flags) {
  kvik_file *f;
  ASSERT_OK(kvik_file_open(path, flags, 0644, &f));
  return f;
}

static void read_all(kvik_file *f, unsigned char *buf) {
  ASSERT_EQ(kvik_file_read(f, buf, BYTES, 0), BYTES);
}

/* Nothing is counted while no monitor exists, or by a monitor for what came before it; each
 * call is one operation, whatever its tasks. */
static void test_counts(void) {
  unsigned char *buf = malloc(BYTES);
  kvik_file *w = open_file("w");
  ASSERT_EQ(kvik_file_write(w, data, BYTES, 0), BYTES); /* no monitor: not counted */
  kvik_future *before;
  ASSERT_OK(kvik_file_pwrite(w, data, BYTES, 0, 4096, &before));

  kvik_monitor *m;
  ASSERT_OK(kvik_monitor_create(&m));
  /* Started before the monitor, so not its own, however late it completes. */
  ASSERT_EQ(kvik_future_wait(before), BYTES);
  kvik_future_free(before);
  kvik_summary s = reading(m);
  ASSERT_EQ(s.num_ops, 0);
  ASSERT_EQ(s.busy_ns, 0);
  ASSERT(s.span != 0);

  ASSERT_EQ(kvik_file_write(w, data, BYTES, 0), BYTES);
  kvik_file_free(w);
  kvik_file *r = open_file("r");
  read_all(r, buf);
  kvik_future *future;
  ASSERT_OK(kvik_file_pread(r, buf, BYTES, 0, 4096, &future)); /* 256 tasks, one operation */
  ASSERT_EQ(kvik_future_wait(future), BYTES);
  kvik_future_free(future);
  /* A read past the end asks for more than it gets. */
  ASSERT_EQ(kvik_file_read(r, buf, BYTES, (int64_t)(BYTES - 100)), 100);
  kvik_file_free(r);

  s = reading(m);
  check_consistent(&s);
  ASSERT_EQ(s.num_ops, 4);
  ASSERT_EQ(s.num_reads, 3);
  ASSERT_EQ(s.num_writes, 1);
  ASSERT_EQ(s.bytes_requested, 4 * BYTES);
  ASSERT_EQ(s.bytes_transferred, 3 * BYTES + 100);
  ASSERT_EQ(s.bytes_written, BYTES);
  ASSERT_EQ(s.num_errors, 0);
  ASSERT_EQ(s.by_backend[KVIK_IO_POSIX].num_ops, 4);
  ASSERT(s.total_duration_ns > 0);
  /* One after the other, so the durations lie inside the busy time. */
  ASSERT(s.total_duration_ns <= s.busy_ns);
  /* The anchor maps the span onto the wall clock. */
  int64_t unix_start = s.anchor_unix_ns + (s.start_ns - s.anchor_mono_ns);
  ASSERT(llabs(unix_start - (int64_t)time(NULL) * 1000000000) < 60LL * 1000000000);

  kvik_monitor_free(m);
  free(buf);
}

/* A call refused at once is a failed operation that moved nothing, on the handle's backend. */
static void test_errors(void) {
  unsigned char buf[16];
  kvik_monitor *m;
  ASSERT_OK(kvik_monitor_create(&m));
  kvik_file *r = open_file("r");
  ASSERT_FAILS(kvik_file_write(r, data, BYTES, 0), -EBADF, "not opened for writing");
  kvik_future *future;
  ASSERT_FAILS(kvik_file_pread(r, NULL, 8, 0, 0, &future), -EINVAL, "NULL");
  kvik_mmap *map;
  ASSERT_OK(kvik_mmap_open(path, "r", 0, 0, &map));
  ASSERT_FAILS(kvik_mmap_read(map, buf, 8, (int64_t)BYTES), -EINVAL, "outside the mapped range");
  ASSERT_EQ(kvik_mmap_read(map, buf, sizeof buf, 0), sizeof buf);
  kvik_mmap_free(map);
  kvik_file_close(r);
  ASSERT_FAILS(kvik_file_read(r, buf, sizeof buf, 0), -EBADF, "closed");
  kvik_file_free(r);

  kvik_summary s = reading(m);
  check_consistent(&s);
  ASSERT_EQ(s.num_ops, 5);
  ASSERT_EQ(s.num_errors, 4);
  ASSERT_EQ(s.num_writes, 1);
  ASSERT_EQ(s.bytes_transferred, sizeof buf);
  ASSERT_EQ(s.bytes_requested, BYTES + 8 + 8 + sizeof buf + sizeof buf);
  ASSERT_EQ(s.by_backend[KVIK_IO_POSIX].num_ops, 3);
  ASSERT_EQ(s.by_backend[KVIK_IO_POSIX].num_errors, 3);
  ASSERT_EQ(s.by_backend[KVIK_IO_MMAP].num_ops, 2);
  ASSERT_EQ(s.by_backend[KVIK_IO_MMAP].num_errors, 1);
  ASSERT_EQ(s.by_backend[KVIK_IO_MMAP].bytes_transferred, sizeof buf);
  kvik_monitor_free(m);
}

/* Monitors are independent: one created later misses what came before it, and a reset or a stop
 * of one leaves the other as it was. */
static void test_independent(void) {
  unsigned char *buf = malloc(BYTES);
  kvik_file *r = open_file("r");
  kvik_monitor *outer, *inner;
  ASSERT_OK(kvik_monitor_create(&outer));
  read_all(r, buf);
  ASSERT_OK(kvik_monitor_create(&inner));
  read_all(r, buf);
  ASSERT_EQ(reading(outer).num_ops, 2);
  ASSERT_EQ(reading(inner).num_ops, 1);

  kvik_summary before = reading(outer);
  ASSERT_OK(kvik_monitor_reset(outer));
  kvik_summary after = reading(outer);
  ASSERT_EQ(after.num_ops, 0);
  ASSERT_EQ(after.bytes_transferred, 0);
  ASSERT_EQ(after.busy_ns, 0);
  ASSERT(after.start_ns > before.start_ns);
  ASSERT(after.span != before.span);
  ASSERT_EQ(after.anchor_mono_ns, before.anchor_mono_ns);
  ASSERT_EQ(reading(inner).num_ops, 1);

  ASSERT_OK(kvik_monitor_stop(inner));
  read_all(r, buf);
  ASSERT_EQ(reading(outer).num_ops, 1);
  ASSERT_EQ(reading(inner).num_ops, 1);
  kvik_monitor_free(inner);
  kvik_monitor_free(outer);
  kvik_file_free(r);
  free(buf);
}

/* A stop ends the span for good: later IO is not counted and later readings are the same. */
static void test_stop(void) {
  unsigned char *buf = malloc(BYTES);
  kvik_file *r = open_file("r");
  kvik_monitor *m;
  ASSERT_OK(kvik_monitor_create(&m));
  read_all(r, buf);
  ASSERT_OK(kvik_monitor_stop(m));
  kvik_summary stopped = reading(m);
  read_all(r, buf);
  ASSERT_OK(kvik_monitor_stop(m)); /* again: nothing */
  kvik_summary later = reading(m);
  ASSERT_EQ(later.num_ops, 1);
  ASSERT_EQ(later.end_ns, stopped.end_ns);
  ASSERT_EQ(later.busy_ns, stopped.busy_ns);
  /* A reset of a stopped monitor: an empty span that ends where it starts. */
  ASSERT_OK(kvik_monitor_reset(m));
  kvik_summary empty = reading(m);
  ASSERT_EQ(empty.num_ops, 0);
  ASSERT_EQ(empty.end_ns, empty.start_ns);
  kvik_monitor_free(m);
  kvik_file_free(r);
  free(buf);
}

static void test_arguments(void) {
  kvik_monitor *m;
  ASSERT_FAILS(kvik_monitor_create(NULL), -EINVAL, "NULL");
  ASSERT_OK(kvik_monitor_create(&m));
  kvik_summary s = {0};
  ASSERT_FAILS(kvik_monitor_read(m, &s), -EINVAL, "struct_size");
  ASSERT_FAILS(kvik_monitor_read(m, NULL), -EINVAL, "NULL");
  ASSERT_FAILS(kvik_monitor_read(NULL, &s), -EINVAL, "NULL");
  ASSERT_FAILS(kvik_monitor_reset(NULL), -EINVAL, "NULL");
  ASSERT_FAILS(kvik_monitor_stop(NULL), -EINVAL, "NULL");
  kvik_monitor_free(NULL);
  /* An older, shorter struct gets its own bytes and no more. */
  unsigned char raw[sizeof(kvik_summary) + 8];
  memset(raw, 0xAB, sizeof raw);
  size_t short_size = offsetof(kvik_summary, num_ops);
  memcpy(raw, &short_size, sizeof short_size);
  ASSERT_OK(kvik_monitor_read(m, (kvik_summary *)(void *)raw));
  for (size_t i = short_size; i < sizeof raw; i++) ASSERT_EQ(raw[i], 0xAB);
  kvik_monitor_free(m);

  static const char *const names[] = {"Posix", "Gds", "Mmap", "RemoteHttp", "RemoteHdfs"};
  for (int b = 0; b < KVIK_IO_BACKENDS; b++) ASSERT(!strcmp(kvik_io_backend_name(b), names[b]));
  ASSERT(kvik_io_backend_name(KVIK_IO_BACKENDS) == NULL);
  ASSERT(kvik_io_backend_name(-1) == NULL);
}

static void *reader(void *arg) {
  (void)arg;
  unsigned char *buf = malloc(BYTES);
  kvik_file *r = open_file("r");
  for (int i = 0; i < READS_PER_THREAD; i++)
    ASSERT_EQ(kvik_file_read(r, buf, BYTES / 16, (int64_t)(i % 16) * (int64_t)(BYTES / 16)),
              BYTES / 16);
  kvik_file_free(r);
  free(buf);
  return NULL;
}

/* Threads read while monitors are read, reset, created and freed: the monitor that watched the
 * whole run counts every read exactly once, and no reading breaks the invariants. */
static void test_threads(void) {
  kvik_monitor *whole;
  ASSERT_OK(kvik_monitor_create(&whole));
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) ASSERT_EQ(pthread_create(&t[i], NULL, reader, NULL), 0);
  kvik_monitor *churn;
  ASSERT_OK(kvik_monitor_create(&churn));
  for (int i = 0; i < 200; i++) {
    kvik_summary s = reading(churn);
    check_consistent(&s);
    s = reading(whole);
    check_consistent(&s);
    if (i % 10 == 0) ASSERT_OK(kvik_monitor_reset(churn));
    if (i % 50 == 0) {
      kvik_monitor_free(churn);
      ASSERT_OK(kvik_monitor_create(&churn));
    }
  }
  for (int i = 0; i < THREADS; i++) ASSERT_EQ(pthread_join(t[i], NULL), 0);
  kvik_summary s = reading(whole);
  check_consistent(&s);
  ASSERT_EQ(s.num_ops, THREADS * READS_PER_THREAD);
  ASSERT_EQ(s.bytes_transferred, THREADS * READS_PER_THREAD * (BYTES / 16));
  ASSERT_EQ(s.num_errors, 0);
  ASSERT(s.busy_ns > 0);
  kvik_monitor_free(churn);
  kvik_monitor_free(whole);
}

int main(void) {
  dir = test_mkdtemp();
  path = test_path(dir, "data");
  data = malloc(BYTES);
  test_fill(data, BYTES, 26);
  test_write_file(path, data, BYTES);
  test_counts();
  test_errors();
  test_independent();
  test_stop();
  test_arguments();
  test_threads();
  free(data);
  free(path);
  test_rmdir(dir);
  return 0;
}
