/* Append handles (issue 24): every write lands at the end of the file as it is when the write is
 * placed, the kernel placing it, and never overwrites anything: across handles of one process,
 * against another process's O_APPEND writes, after a truncation, after ENOSPC. Each append stays
 * one contiguous range against the process's other appends to the file, from host or device
 * memory, sync, futures, streams and batches, and none goes through cuFile.
 *
 * Usage: test_append           every case but ENOSPC; the device case where a CUDA driver loads
 *                              (the fake one in CI), its cuFile check where the fake cuFile does
 *        test_append CASE      that case alone (two_handles, other_process, truncate, concurrent,
 *                              batch, device)
 *        test_append enospc    ENOSPC on a 1 MiB tmpfs mounted in a mount namespace of its own;
 *                              skips (77) where the namespace or the mount is refused */
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include "test_cuda.h"

static char *dir;

/* ---- records: a head that says whose and how long, then bytes that only that record has ---- */

#define MAGIC 0x6b76696bu
#define WRITERS_MAX 8

typedef struct {
  uint32_t magic, writer, seq, size;
} record_head;

static void make_record(unsigned char *buf, uint32_t writer, uint32_t seq, uint32_t size) {
  record_head h = {MAGIC, writer, seq, size};
  ASSERT(size >= sizeof h);
  memcpy(buf, &h, sizeof h);
  test_fill(buf + sizeof h, size - sizeof h,
            ((uint64_t)(writer + 1) << 32) ^ ((uint64_t)seq << 8) ^ size);
}

/* A record of a size between `min` and `max` bytes. */
static uint32_t record_size(uint64_t *rng, uint32_t min, uint32_t max) {
  return min + (uint32_t)test_below(rng, max - min + 1);
}

/* The file holds `prefix` bytes of `prefix_bytes`, then exactly the records that writer w wrote,
 * count[w] of them, each once and whole, in any interleaving; those of the writers in `ordered`
 * (a bit per writer) in the order they were written. Returns how often the writer changes from
 * one record to the next. */
static long long check_records(const char *path, const unsigned char *prefix_bytes, size_t prefix,
                               unsigned writers, const uint32_t *count, unsigned ordered) {
  size_t n;
  unsigned char *content = test_read_file(path, &n);
  ASSERT(n >= prefix);
  if (prefix) ASSERT_SAME_BYTES(content, prefix_bytes, prefix);
  unsigned char *seen[WRITERS_MAX];
  long long next_seq[WRITERS_MAX] = {0}, records = 0, expected = 0;
  for (unsigned w = 0; w < writers; w++) {
    seen[w] = calloc(count[w] + 1, 1);
    expected += count[w];
  }
  unsigned char *want = NULL;
  size_t want_cap = 0;
  long long switches = 0;
  uint32_t last_writer = UINT32_MAX;
  for (size_t at = prefix; at < n;) {
    record_head h;
    if (n - at < sizeof h) FAIL_AT("%s: %zu stray bytes at the end, offset %zu", path, n - at, at);
    memcpy(&h, content + at, sizeof h);
    if (h.magic != MAGIC || h.writer >= writers || h.seq >= count[h.writer] || h.size < sizeof h ||
        h.size > n - at)
      FAIL_AT("%s: no record head at offset %zu (magic %#x writer %u seq %u size %u): a record "
              "was overwritten, torn, or preceded by a hole",
              path, at, h.magic, h.writer, h.seq, h.size);
    if (seen[h.writer][h.seq])
      FAIL_AT("%s: record %u of writer %u twice (again at %zu)", path, h.seq, h.writer, at);
    if ((ordered >> h.writer & 1) && h.seq != next_seq[h.writer])
      FAIL_AT("%s: writer %u's record %u at offset %zu, where its record %lld was due", path,
              h.writer, h.seq, at, next_seq[h.writer]);
    if (h.size > want_cap) want = realloc(want, want_cap = h.size);
    make_record(want, h.writer, h.seq, h.size);
    long long diff = test_first_diff(content + at, want, h.size);
    if (diff >= 0)
      FAIL_AT("%s: record %u of writer %u (%u bytes at offset %zu) differs at its byte %lld: "
              "another write came between its bytes or over them",
              path, h.seq, h.writer, h.size, at, diff);
    seen[h.writer][h.seq] = 1;
    switches += last_writer != UINT32_MAX && h.writer != last_writer;
    last_writer = h.writer;
    next_seq[h.writer] = h.seq + 1;
    records++;
    at += h.size;
  }
  if (records != expected)
    FAIL_AT("%s: %lld records, %lld written: some were overwritten", path, records, expected);
  for (unsigned w = 0; w < writers; w++) free(seen[w]);
  free(want);
  free(content);
  return switches;
}

/* Set a setting; returns the value it had, for restoring. */
static int64_t set_setting(kvik_setting setting, int64_t value) {
  int64_t before;
  ASSERT_OK(kvik_setting_get(setting, &before));
  ASSERT_OK(kvik_setting_set(setting, value));
  return before;
}

static kvik_file *open_ok(const char *path, const char *flags) {
  kvik_file *f = NULL;
  ASSERT_OK(kvik_file_open(path, flags, 0644, &f));
  return f;
}

static void append_ok(kvik_file *f, const void *buf, size_t size) {
  ASSERT_EQ(kvik_file_write(f, buf, size, 0), size);
}

static void wait_ok(kvik_future *future, size_t size) {
  ASSERT_EQ(kvik_future_wait(future), size);
  kvik_future_free(future);
}

/* ---- cases ---------------------------------------------------------------------------------- */

/* Two handles of one file, appending in turn, both opened before either wrote: each append goes
 * after the other handle's. Sync writes and futures; the offsets passed are ignored. */
static void test_two_handles(void) {
  char *path = test_path(dir, "two-handles");
  unsigned char prefix[37];
  test_fill(prefix, sizeof prefix, 24);
  test_write_file(path, prefix, sizeof prefix);
  kvik_file *h[2] = {open_ok(path, "a"), open_ok(path, "a+")};
  enum { N = 30, SIZE = 100 };
  unsigned char rec[SIZE];
  for (uint32_t i = 0; i < N; i++) {
    make_record(rec, i % 2, i / 2, SIZE);
    if (i % 3 == 2) {
      kvik_future *future;
      ASSERT_OK(kvik_file_pwrite(h[i % 2], rec, SIZE, (int64_t)i * 7, 0, &future));
      wait_ok(future, SIZE);
    } else {
      ASSERT_EQ(kvik_file_write(h[i % 2], rec, SIZE, (int64_t)i * 1000), SIZE);
    }
  }
  ASSERT_EQ(kvik_file_size(h[1]), sizeof prefix + N * SIZE);
  /* "a+" reads where it is asked to; only writes go to the end. */
  unsigned char back[SIZE];
  ASSERT_EQ(kvik_file_read(h[1], back, SIZE, (int64_t)sizeof prefix), SIZE);
  make_record(rec, 0, 0, SIZE);
  ASSERT_SAME_BYTES(back, rec, SIZE);
  kvik_file_free(h[0]);
  kvik_file_free(h[1]);
  const uint32_t count[2] = {N / 2, N / 2};
  check_records(path, prefix, sizeof prefix, 2, count, 3);
  /* Exactly in turn, as they were written one after another. */
  size_t n;
  unsigned char *content = test_read_file(path, &n);
  for (uint32_t i = 0; i < N; i++) {
    record_head head;
    memcpy(&head, content + sizeof prefix + i * SIZE, sizeof head);
    ASSERT_EQ(head.writer, i % 2);
    ASSERT_EQ(head.seq, i / 2);
  }
  free(content);
  free(path);
}

/* A kvik handle and a plain O_APPEND writer in another process, at the same time: no record of
 * either is lost, torn or overwritten (each of these records is one write(2) call). */
static void test_other_process(void) {
  char *path = test_path(dir, "other-process");
  test_write_file(path, NULL, 0);
  kvik_file *f = open_ok(path, "a");
  int ready[2], go[2];
  ASSERT_OK(pipe(ready));
  ASSERT_OK(pipe(go));
  enum { N = 1500 };
  pid_t child = fork();
  ASSERT(child >= 0);
  if (child == 0) {
    char c;
    int fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0 || write(ready[1], "r", 1) != 1 || read(go[0], &c, 1) != 1) _exit(2);
    unsigned char rec[4096];
    uint64_t rng = 99;
    for (uint32_t i = 0; i < N; i++) {
      uint32_t size = record_size(&rng, sizeof(record_head), sizeof rec);
      make_record(rec, 1, i, size);
      if (write(fd, rec, size) != (ssize_t)size) _exit(3);
    }
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1); /* both start together */
  ASSERT_EQ(write(go[1], "g", 1), 1);
  unsigned char *rec = malloc(8192);
  uint64_t rng = 7;
  for (uint32_t i = 0; i < N; i++) {
    uint32_t size = record_size(&rng, sizeof(record_head), 8192);
    make_record(rec, 0, i, size);
    if (i % 2) {
      append_ok(f, rec, size);
    } else {
      kvik_future *future;
      ASSERT_OK(kvik_file_pwrite(f, rec, size, 0, 0, &future));
      wait_ok(future, size);
    }
  }
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (int i = 0; i < 2; i++) {
    close(ready[i]);
    close(go[i]);
  }
  /* Appends after the other process's, on a handle opened before them: at the end too. */
  make_record(rec, 0, N, 100);
  append_ok(f, rec, 100);
  kvik_file_free(f);
  const uint32_t count[2] = {N + 1, N};
  printf("%d records from kvik, %d from another process: their turns changed %lld times\n", N + 1,
         N, check_records(path, NULL, 0, 2, count, 3));
  free(rec);
  free(path);
}

/* After the file is cut, the next append lands at the new end: no hole of zeros before it. */
static void test_truncate(void) {
  char *path = test_path(dir, "truncate");
  kvik_file *f = open_ok(path, "a+");
  unsigned char a[100], b[100], c[100];
  make_record(a, 0, 0, sizeof a);
  make_record(b, 0, 1, sizeof b);
  make_record(c, 0, 2, sizeof c);
  append_ok(f, a, sizeof a);
  ASSERT_OK(truncate(path, 0));
  append_ok(f, b, sizeof b);
  size_t n;
  unsigned char *content = test_read_file(path, &n);
  ASSERT_EQ(n, sizeof b);
  ASSERT_SAME_BYTES(content, b, sizeof b);
  free(content);
  ASSERT_OK(truncate(path, 40));
  kvik_future *future;
  ASSERT_OK(kvik_file_pwrite(f, c, sizeof c, 0, 0, &future));
  wait_ok(future, sizeof c);
  content = test_read_file(path, &n);
  ASSERT_EQ(n, 40 + sizeof c);
  ASSERT_SAME_BYTES(content, b, 40);
  ASSERT_SAME_BYTES(content + 40, c, sizeof c);
  free(content);
  kvik_file_free(f);
  free(path);
}

/* Several threads, each with several futures in flight, through two handles of one file; appends
 * large enough to be many tasks of a write elsewhere: each lands whole. */
enum { THREADS = 4, PER_THREAD = 9, IN_FLIGHT = 3 };

typedef struct {
  kvik_file *file;
  uint32_t writer;
} appender;

static void *append_records(void *arg) {
  const appender *a = arg;
  uint64_t rng = a->writer + 1;
  unsigned char *recs[IN_FLIGHT];
  kvik_future *futures[IN_FLIGHT];
  uint32_t sizes[IN_FLIGHT];
  for (uint32_t seq = 0; seq < PER_THREAD; seq += IN_FLIGHT) {
    for (int k = 0; k < IN_FLIGHT; k++) {
      sizes[k] = test_below(&rng, 3) == 0 ? record_size(&rng, 16, 300)
                                          : record_size(&rng, 100000, 3000000);
      recs[k] = malloc(sizes[k]);
      make_record(recs[k], a->writer, seq + (uint32_t)k, sizes[k]);
    }
    for (int k = 0; k < IN_FLIGHT; k++)
      ASSERT_OK(kvik_file_pwrite(a->file, recs[k], sizes[k], 0, 0, &futures[k]));
    for (int k = 0; k < IN_FLIGHT; k++) {
      wait_ok(futures[k], sizes[k]);
      free(recs[k]);
    }
  }
  return NULL;
}

static void test_concurrent(void) {
  char *path = test_path(dir, "concurrent");
  unsigned char prefix[4096 + 3];
  test_fill(prefix, sizeof prefix, 5);
  test_write_file(path, prefix, sizeof prefix);
  int64_t task_size = set_setting(KVIK_SETTING_TASK_SIZE, 64 << 10);
  kvik_file *h[2] = {open_ok(path, "a"), open_ok(path, "a")};
  pthread_t threads[THREADS];
  appender args[THREADS];
  for (uint32_t t = 0; t < THREADS; t++) {
    args[t] = (appender){h[t % 2], t};
    ASSERT_EQ(pthread_create(&threads[t], NULL, append_records, &args[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
  kvik_file_free(h[0]);
  kvik_file_free(h[1]);
  set_setting(KVIK_SETTING_TASK_SIZE, task_size);
  uint32_t count[THREADS];
  for (int t = 0; t < THREADS; t++) count[t] = PER_THREAD;
  check_records(path, prefix, sizeof prefix, THREADS, count, 0);
  free(path);
}

/* Append writes of a batch, through two handles of one file, with io_uring asked for everything:
 * they run on the pool, each whole at the end. */
static void test_batch(void) {
  char *path = test_path(dir, "batch");
  test_write_file(path, NULL, 0);
  int64_t io_uring = set_setting(KVIK_SETTING_IO_URING, KVIK_ON);
  kvik_file *h[2] = {open_ok(path, "a"), open_ok(path, "a+")};
  enum { OPS = 12 };
  unsigned char *recs[OPS];
  kvik_batch_op ops[OPS];
  uint64_t rng = 3;
  for (uint32_t i = 0; i < OPS; i++) {
    /* Aligned, so that the ring would take them if they were not appends. */
    uint32_t size = record_size(&rng, 4096, 300000) & ~4095u;
    recs[i] = malloc(size);
    make_record(recs[i], i % 2, i / 2, size);
    ops[i] = (kvik_batch_op){h[i % 2], KVIK_BATCH_WRITE, recs[i], size, 0, (void *)(uintptr_t)i};
  }
  kvik_batch *b;
  ASSERT_OK(kvik_batch_create(OPS, &b));
  ASSERT_OK(kvik_batch_submit(b, ops, OPS));
  kvik_batch_event events[OPS];
  for (int got = 0; got < OPS;) {
    int n = kvik_batch_wait(b, 1, events, OPS, -1);
    ASSERT_OK(n);
    for (int k = 0; k < n; k++) {
      ASSERT_EQ(events[k].status, KVIK_BATCH_COMPLETE);
      ASSERT_EQ(events[k].result, ops[(uintptr_t)events[k].cookie].size);
    }
    got += n;
  }
  kvik_batch_free(b);
  kvik_file_free(h[0]);
  kvik_file_free(h[1]);
  set_setting(KVIK_SETTING_IO_URING, io_uring);
  const uint32_t count[2] = {OPS / 2, OPS / 2};
  check_records(path, NULL, 0, 2, count, 0);
  for (int i = 0; i < OPS; i++) free(recs[i]);
  free(path);
}

/* ---- device memory -------------------------------------------------------------------------- */

typedef struct {
  kvik_file *file;
  atomic_int stop;
  uint32_t written;
} host_appender;

/* Small host appends through another handle while the device appends run. */
static void *append_host_until_stopped(void *arg) {
  host_appender *a = arg;
  unsigned char rec[200];
  while (!atomic_load(&a->stop)) {
    make_record(rec, 1, a->written, sizeof rec);
    append_ok(a->file, rec, sizeof rec);
    a->written++;
  }
  return NULL;
}

/* Device-memory appends staged through the bounce buffers chunk by chunk (many write(2) calls
 * each): sync, a future, stream-ordered, raw. Host appends through another handle run meanwhile
 * and come between them, never between their chunks. With the fake cuFile serving the file, no
 * append goes through it. */
static void test_device(int have_fake_cufile) {
  char *path = test_path(dir, "device");
  unsigned char prefix[10];
  test_fill(prefix, sizeof prefix, 11);
  test_write_file(path, prefix, sizeof prefix);
  int64_t task_size = set_setting(KVIK_SETTING_TASK_SIZE, 256 << 10);
  int64_t threshold = set_setting(KVIK_SETTING_GDS_THRESHOLD, 0);
  kvik_file *dev_file = open_ok(path, "a"), *host_file = open_ok(path, "a");
  enum { DEVICE_RECORDS = 4 };
  const uint32_t size = (3 << 20) + 123;
  unsigned char *rec = malloc(size);
  char *dev = device_alloc(size);
  if (have_fake_cufile) fake.reset();
  host_appender other = {host_file, 0, 0};
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, NULL, append_host_until_stopped, &other), 0);
  for (uint32_t seq = 0; seq < DEVICE_RECORDS; seq++) {
    make_record(rec, 0, seq, size);
    to_device(dev, rec, size);
    kvik_future *future;
    switch (seq) {
    case 0: ASSERT_EQ(kvik_file_write(dev_file, dev, size, 0), size); break;
    case 1:
      ASSERT_OK(kvik_file_pwrite(dev_file, dev, size, 0, 0, &future));
      wait_ok(future, size);
      break;
    case 2:
      ASSERT_OK(kvik_file_write_async(dev_file, dev, size, 0, NULL, &future));
      wait_ok(future, size);
      break;
    default: ASSERT_EQ(kvik_file_raw_write(dev_file, dev, size, 0, 0), size); break;
    }
  }
  atomic_store(&other.stop, 1);
  pthread_join(thread, NULL);
  if (have_fake_cufile) {
    ASSERT_EQ(kvik_file_backend(dev_file, NULL, 0), KVIK_BACKEND_CUFILE);
    ASSERT_EQ(fake.calls("cuFileWrite"), 0);
    ASSERT_EQ(fake.calls("cuFileWriteAsync"), 0);
  }
  kvik_file_free(dev_file);
  kvik_file_free(host_file);
  device_free(dev);
  set_setting(KVIK_SETTING_TASK_SIZE, task_size);
  set_setting(KVIK_SETTING_GDS_THRESHOLD, threshold);
  const uint32_t count[2] = {DEVICE_RECORDS, other.written};
  check_records(path, prefix, sizeof prefix, 2, count, 3);
  free(rec);
  free(path);
}

/* ---- ENOSPC --------------------------------------------------------------------------------- */

static size_t file_size(const char *path) {
  struct stat st;
  ASSERT_OK(stat(path, &st));
  return (size_t)st.st_size;
}

/* An append that runs out of space keeps what it wrote and takes no more room: once space is
 * freed, the next append lands right after those bytes. */
static int test_enospc(void) {
  char *mnt = test_mount_small_tmpfs();
  if (!mnt) return TEST_SKIP;
  char *filler = test_path(mnt, "filler"), *path = test_path(mnt, "log");
  enum { FILLER = 256 << 10, BIG = 2 << 20, SMALL = 100 };
  unsigned char *big = malloc(BIG), a[SMALL], b[SMALL];
  test_fill(big, BIG, 8);
  test_write_file(filler, big, FILLER);
  make_record(a, 0, 0, SMALL);
  make_record(b, 0, 1, SMALL);
  kvik_file *f = open_ok(path, "a");
  append_ok(f, a, SMALL);
  kvik_future *future;
  ASSERT_OK(kvik_file_pwrite(f, big, BIG, 0, 0, &future));
  ASSERT_FAILS(kvik_future_wait(future), -ENOSPC, "write(");
  size_t partial = kvik_future_bytes_done(future);
  kvik_future_free(future);
  ASSERT(partial < BIG);
  ASSERT_EQ(file_size(path), SMALL + partial);
  /* Full now: nothing is written, and nothing is reserved. */
  ASSERT_FAILS(kvik_file_write(f, big, BIG, 0), -ENOSPC, path);
  ASSERT_EQ(file_size(path), SMALL + partial);
  ASSERT_OK(unlink(filler));
  append_ok(f, b, SMALL);
  kvik_file_free(f);
  size_t n;
  unsigned char *content = test_read_file(path, &n);
  ASSERT_EQ(n, SMALL + partial + SMALL);
  ASSERT_SAME_BYTES(content, a, SMALL);
  ASSERT_SAME_BYTES(content + SMALL, big, partial);
  ASSERT_SAME_BYTES(content + SMALL + partial, b, SMALL);
  printf("ENOSPC after %zu of %d bytes; the next append right after them\n", partial, BIG);
  free(content);
  free(big);
  free(filler);
  unlink(path);
  free(path);
  ASSERT_OK(umount(mnt));
  rmdir(mnt);
  free(mnt);
  return 0;
}

static void test_device_if_any(void) {
  if (!load_cuda()) {
    printf("no CUDA driver: device appends not checked\n");
    return;
  }
  int have_fake_cufile = load_fake_cufile() == 1;
  test_device(have_fake_cufile);
  printf("device appends checked%s\n",
         have_fake_cufile ? ", with the fake cuFile serving the file" : "");
}

static const struct {
  const char *name;
  void (*run)(void);
} cases[] = {
    {"two_handles", test_two_handles},
    {"other_process", test_other_process},
    {"truncate", test_truncate},
    {"concurrent", test_concurrent},
    {"batch", test_batch},
    {"device", test_device_if_any},
};

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *only = argc == 2 ? argv[1] : NULL;
  if (only && strcmp(only, "enospc") == 0) return test_enospc();
  dir = test_mkdtemp();
  int ran = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (only && strcmp(only, cases[i].name) != 0) continue;
    cases[i].run();
    ran++;
  }
  test_rmdir(dir);
  if (!ran) FAIL_AT("no case named %s", only);
  return 0;
}
