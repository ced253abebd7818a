/* Stress: the library under load from many threads at once, checked against a model.
 *
 * What it proves, while a chaos thread keeps resizing the thread pool (1 to 8 threads) and
 * changing the task size, GDS threshold, direct IO for reads and writes and the bounce buffer
 * size:
 *  1. Clients: 8 threads write and read back random blocks of their own disjoint ranges of 8
 *     shared handles (sync calls and futures, several in flight at once, waited in any order).
 *     Every read-back and, at the end, every file's whole content equals the model each thread
 *     keeps in memory: no byte lost, torn, misplaced or written twice.
 *  2. Futures: 10,000 small preads and pwrites, created and retired interleaved in a shuffled
 *     order (waited, polled with kvik_future_done, waited with timeouts, or freed unwaited),
 *     each with its right result and bytes.
 *  3. Close races: threads read (and write back the same bytes) on a handle while another thread
 *     closes it, as kvik.h defines: close waits for IO in flight, so a request that started
 *     transfers all its bytes, correctly, and a future that started is done once close returns;
 *     a call that starts after close fails with -EBADF; close returns 0 once and -EBADF after.
 *     Nothing hangs, crashes or returns wrong data.
 * Random choices come from one seed (printed; KVIK_STRESS_SEED repeats it). Phases 1 and 3 run
 * for a wall-clock budget (KVIK_STRESS_SECONDS in all) past a minimum of work; no assertion
 * depends on timing. The last line sums up what was checked. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "test.h"

/* Sanitizers slow IO-heavy code several times over: they get a larger budget, less data. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define DEFAULT_SECONDS (SANITIZED ? 16.0 : 10.0)
#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* Phase 1. An odd file size puts the clients' range boundaries inside pages, so neighbouring
 * clients share pages. */
#define NCLIENTS 8
#define NFILES 8
#define CLIENT_FILE_BYTES ((SANITIZED ? 2 : 4) * MiB + 4099)
#define MAX_BATCH 4            /* blocks in flight at once per client */
#define SMALL_BLOCK (64 * KiB) /* most blocks are at most this; some fill their whole slot */
#define MIN_CLIENT_ROUNDS 20

/* Phase 2: one slot of the file per future, so no two futures touch the same bytes. */
#define NFUTURES 10000
#define SLOT (2 * KiB)

/* Phase 3. */
#define CLOSE_FILE_BYTES (1 * MiB + 777)
#define CLOSE_READERS 3
#define MAX_HELD 4                 /* futures a reader keeps in flight */
#define MAX_RACE_IO (256 * KiB)    /* largest request; some reach past the end of the file */
#define MIN_CLOSE_ROUNDS 50
#define CANARY 0xA5

static uint64_t seed;
static double budget_seconds;

/* Figures for the summary. */
static _Atomic uint64_t io_calls, bytes_verified, mismatches;
static _Atomic uint64_t pool_resizes, setting_changes;
static uint64_t futures_in_flight_at_retire;
static _Atomic uint64_t race_requests_done, race_requests_refused;
static uint64_t close_races;

/* ---- helpers ----------------------------------------------------------------------------- */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* An independent generator per thread and purpose, all derived from the one seed (splitmix64). */
static uint64_t rng_for(uint64_t stream) {
  uint64_t z = seed + (stream + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return z ? z : 1; /* xorshift must not start at 0 */
}

/* Eight random bytes per step: byte-wise filling is slow under ThreadSanitizer. */
static void fill_random(unsigned char *p, size_t n, uint64_t *rng) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = test_rand(rng);
    memcpy(p + i, &x, 8);
  }
  uint64_t x = test_rand(rng);
  memcpy(p + i, &x, n - i);
}

/* Compare bytes read at file offset `offset` with what the model says. A mismatch is counted and
 * reported, not fatal, so that the summary tells how many there were. */
static void verify(const char *what, int64_t offset, const unsigned char *got, const unsigned char *want, size_t n) {
  atomic_fetch_add(&bytes_verified, n);
  if (memcmp(got, want, n) == 0) return;
  long long at = test_first_diff(got, want, n);
  if (atomic_fetch_add(&mismatches, 1) < 10)
    fprintf(stderr, "MISMATCH: %s: %zu bytes at offset %lld differ first at offset %lld: 0x%02x, expected 0x%02x\n",
            what, n, (long long)offset, (long long)offset + at, got[at], want[at]);
}

/* The task size of a request: mostly the setting's (0), else one that splits it oddly. */
static size_t random_task_size(uint64_t *rng) {
  static const size_t sizes[] = {4 * KiB, 5000, 64 * KiB, 1 * MiB};
  if (test_below(rng, 2)) return 0;
  return sizes[test_below(rng, COUNT(sizes))];
}

/* Wait in one of the ways a caller may: blocking, polling kvik_future_done(), or timed waits. */
static ssize_t wait_somehow(kvik_future *fut, uint64_t *rng) {
  ssize_t r;
  switch (test_below(rng, 3)) {
  case 0: r = kvik_future_wait(fut); break;
  case 1:
    while (!kvik_future_done(fut)) sched_yield();
    r = kvik_future_wait_for(fut, 0);
    break;
  default:
    while ((r = kvik_future_wait_for(fut, 1000 * 1000)) == -ETIMEDOUT) ASSERT(strstr(kvik_last_error(), "still running"));
  }
  ASSERT_EQ(kvik_future_done(fut), 1);
  if (r >= 0) ASSERT_EQ(kvik_future_bytes_done(fut), r);
  return r;
}

/* ---- chaos: the pool and the settings change under the clients' feet --------------------- */

static _Atomic int chaos_stop;

static void set_setting(kvik_setting s, int64_t value) {
  ASSERT_OK(kvik_setting_set(s, value));
  atomic_fetch_add(s == KVIK_SETTING_NUM_THREADS ? &pool_resizes : &setting_changes, 1);
}

static int64_t pick(uint64_t *rng, const int64_t *values, size_t n) { return values[test_below(rng, n)]; }

/* Set while the requests are small (phases 2 and 3): the GDS threshold then stays at 0 or 1 KiB,
 * so that most requests run on the pool and are still in flight when retired or raced. */
static _Atomic int small_requests;

static int64_t pick_threshold(uint64_t *rng) {
  static const int64_t thresholds[] = {0, 1024, 4096, 64 << 10, 1 << 20, 16 << 20};
  return thresholds[test_below(rng, atomic_load(&small_requests) ? 2 : COUNT(thresholds))];
}

static void pin_small_thresholds(void) {
  atomic_store(&small_requests, 1);
  set_setting(KVIK_SETTING_GDS_THRESHOLD, 0);
}

static void chaos_step(uint64_t *rng) {
  static const int64_t task_sizes[] = {4096, 12345, 64 << 10, 1 << 20, 4 << 20};
  static const int64_t bounce_sizes[] = {4096, 64 << 10, 1 << 20, 4 << 20};
  switch (test_below(rng, 7)) {
  case 0:
  case 1: set_setting(KVIK_SETTING_NUM_THREADS, 1 + (int64_t)test_below(rng, 8)); break;
  case 2: set_setting(KVIK_SETTING_TASK_SIZE, pick(rng, task_sizes, COUNT(task_sizes))); break;
  case 3: set_setting(KVIK_SETTING_GDS_THRESHOLD, pick_threshold(rng)); break;
  case 4: set_setting(KVIK_SETTING_BOUNCE_BUFFER_SIZE, pick(rng, bounce_sizes, COUNT(bounce_sizes))); break;
  case 5: set_setting(KVIK_SETTING_AUTO_DIRECT_IO_READ, (int64_t)test_below(rng, 2)); break;
  default:
    /* Through the text path too, as an environment-driven caller would. */
    ASSERT_OK(kvik_setting_parse(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, test_below(rng, 2) ? " On" : "off"));
    atomic_fetch_add(&setting_changes, 1);
  }
}

static void *chaos_main(void *unused) {
  (void)unused;
  uint64_t rng = rng_for(1000);
  while (!atomic_load(&chaos_stop)) {
    chaos_step(&rng);
    usleep((useconds_t)test_below(&rng, 3000));
  }
  return NULL;
}

/* ---- phase 1: clients on disjoint ranges of shared handles ------------------------------- */

static kvik_file *shared_files[NFILES];
static unsigned char *models[NFILES]; /* each client writes only its own range of each */

typedef struct {
  size_t offset, size;
} block;

/* A client's buffers are laid out like its range of the file (see at()), so that the blocks in
 * flight at once never share buffer bytes either. */
typedef struct {
  size_t lo, hi;  /* its range of every file */
  size_t base;    /* the file offset that the buffers' first byte stands for, minus `skew` */
  size_t skew;    /* 0: buffer and file offsets agree modulo 4 KiB, so O_DIRECT runs straight
                   * from the buffer; else never, so O_DIRECT goes through a bounce buffer */
  unsigned char *wbuf, *rbuf;
  uint64_t rng;
  double deadline;
  uint64_t rounds;
} client;

#define PAGE ((size_t)4096)

static unsigned char *at(const client *c, unsigned char *buf, size_t offset) {
  return buf + c->skew + (offset - c->base);
}

static unsigned char *client_buffer(const client *c) {
  void *p = NULL;
  ASSERT_EQ(posix_memalign(&p, PAGE, c->skew + (c->hi - c->base)), 0);
  return p;
}

/* k blocks, one in each of k equal slots of the client's range, so that they never overlap:
 * mostly small, at times as large as the slot. */
static void pick_blocks(client *c, block *b, int k) {
  size_t slot = (c->hi - c->lo) / (size_t)k;
  for (int i = 0; i < k; i++) {
    size_t max = test_below(&c->rng, 4) == 0 || slot < SMALL_BLOCK ? slot : SMALL_BLOCK;
    size_t size = 1 + test_below(&c->rng, max);
    size_t start = c->lo + (size_t)i * slot + test_below(&c->rng, slot - size + 1);
    b[i] = (block){start, size};
  }
}

/* Wait for the futures started for blocks, in order or backwards; each must move all its bytes. */
static void wait_blocks(client *c, kvik_future **futs, const block *b, int k) {
  int backwards = (int)test_below(&c->rng, 2);
  for (int j = 0; j < k; j++) {
    int i = backwards ? k - 1 - j : j;
    if (!futs[i]) continue;
    ASSERT_EQ(wait_somehow(futs[i], &c->rng), b[i].size);
    kvik_future_free(futs[i]);
  }
}

static void write_blocks(client *c, int f, const block *b, int k) {
  kvik_future *futs[MAX_BATCH] = {0};
  int sync = test_below(&c->rng, 3) == 0;
  for (int i = 0; i < k; i++) {
    unsigned char *src = at(c, c->wbuf, b[i].offset);
    fill_random(src, b[i].size, &c->rng);
    if (sync)
      ASSERT_EQ(kvik_file_write(shared_files[f], src, b[i].size, (int64_t)b[i].offset), b[i].size);
    else
      ASSERT_OK(kvik_file_pwrite(shared_files[f], src, b[i].size, (int64_t)b[i].offset, random_task_size(&c->rng),
                                 &futs[i]));
  }
  atomic_fetch_add(&io_calls, (uint64_t)k);
  wait_blocks(c, futs, b, k);
  for (int i = 0; i < k; i++) memcpy(models[f] + b[i].offset, at(c, c->wbuf, b[i].offset), b[i].size);
}

static void read_blocks(client *c, int f, const block *b, int k) {
  kvik_future *futs[MAX_BATCH] = {0};
  int sync = test_below(&c->rng, 3) == 0;
  for (int i = 0; i < k; i++) {
    unsigned char *dst = at(c, c->rbuf, b[i].offset);
    if (sync)
      ASSERT_EQ(kvik_file_read(shared_files[f], dst, b[i].size, (int64_t)b[i].offset), b[i].size);
    else
      ASSERT_OK(kvik_file_pread(shared_files[f], dst, b[i].size, (int64_t)b[i].offset, random_task_size(&c->rng),
                                &futs[i]));
  }
  atomic_fetch_add(&io_calls, (uint64_t)k);
  wait_blocks(c, futs, b, k);
  for (int i = 0; i < k; i++)
    verify("client read-back", (int64_t)b[i].offset, at(c, c->rbuf, b[i].offset), models[f] + b[i].offset, b[i].size);
}

/* One round: write a batch of blocks, then read back either the same blocks or fresh ones of
 * the range (which checks that the writes left their neighbours alone). */
static void client_round(client *c) {
  int f = (int)test_below(&c->rng, NFILES);
  block b[MAX_BATCH];
  int k = 1 + (int)test_below(&c->rng, MAX_BATCH);
  pick_blocks(c, b, k);
  write_blocks(c, f, b, k);
  if (test_below(&c->rng, 2)) {
    k = 1 + (int)test_below(&c->rng, MAX_BATCH);
    pick_blocks(c, b, k);
  }
  read_blocks(c, f, b, k);
}

static void *client_main(void *arg) {
  client *c = arg;
  while (c->rounds < MIN_CLIENT_ROUNDS || now_s() < c->deadline) {
    client_round(c);
    c->rounds++;
  }
  return NULL;
}

static void create_shared_files(const char *dir) {
  uint64_t rng = rng_for(2000);
  for (int f = 0; f < NFILES; f++) {
    char name[32];
    snprintf(name, sizeof name, "shared%d", f);
    char *path = test_path(dir, name);
    models[f] = malloc(CLIENT_FILE_BYTES);
    fill_random(models[f], CLIENT_FILE_BYTES, &rng);
    test_write_file(path, models[f], CLIENT_FILE_BYTES);
    ASSERT_OK(kvik_file_open(path, "r+", 0, &shared_files[f]));
    free(path);
  }
}

/* Every file, whole, through POSIX and through the library, against the model. */
static void check_and_close_shared_files(const char *dir) {
  unsigned char *buf = malloc(CLIENT_FILE_BYTES);
  for (int f = 0; f < NFILES; f++) {
    ASSERT_EQ(kvik_file_read(shared_files[f], buf, CLIENT_FILE_BYTES, 0), CLIENT_FILE_BYTES);
    verify("final kvik read of a shared file", 0, buf, models[f], CLIENT_FILE_BYTES);
    ASSERT_OK(kvik_file_close(shared_files[f]));
    kvik_file_free(shared_files[f]);
    char name[32];
    snprintf(name, sizeof name, "shared%d", f);
    char *path = test_path(dir, name);
    size_t n;
    unsigned char *posix = test_read_file(path, &n);
    ASSERT_EQ(n, CLIENT_FILE_BYTES);
    verify("final POSIX read of a shared file", 0, posix, models[f], n);
    free(posix);
    free(path);
    free(models[f]);
  }
  free(buf);
}

static void phase_clients(const char *dir, double seconds) {
  double start = now_s();
  create_shared_files(dir);
  client clients[NCLIENTS];
  pthread_t threads[NCLIENTS];
  double deadline = now_s() + seconds;
  for (int i = 0; i < NCLIENTS; i++) {
    size_t lo = (size_t)i * CLIENT_FILE_BYTES / NCLIENTS, hi = (size_t)(i + 1) * CLIENT_FILE_BYTES / NCLIENTS;
    client *c = &clients[i];
    *c = (client){lo, hi, lo & ~(PAGE - 1), i % 2 ? 8 * (size_t)i : 0, NULL, NULL, rng_for(100 + (uint64_t)i),
                  deadline, 0};
    c->wbuf = client_buffer(c);
    c->rbuf = client_buffer(c);
    ASSERT_EQ(pthread_create(&threads[i], NULL, client_main, &clients[i]), 0);
  }
  uint64_t rounds = 0;
  for (int i = 0; i < NCLIENTS; i++) {
    ASSERT_EQ(pthread_join(threads[i], NULL), 0);
    rounds += clients[i].rounds;
    free(clients[i].wbuf);
    free(clients[i].rbuf);
  }
  check_and_close_shared_files(dir);
  printf("phase 1: %d clients x %d files, %" PRIu64 " rounds, %.1f s\n", NCLIENTS, NFILES, rounds, now_s() - start);
}

/* ---- phase 2: 10,000 futures created and retired in random order ------------------------- */

typedef struct {
  kvik_future *fut;
  int write;
  size_t offset, size;
} pending;

typedef struct {
  kvik_file *file;
  unsigned char *model, *buf; /* both laid out like the file */
  size_t *slots;              /* a shuffled order of the slots */
  pending *live;
  size_t nlive, created;
  uint64_t rng;
} futures_run;

/* Start the next future on its own slot: a read of it, or a write of new bytes (the model takes
 * them now, since no other future touches the slot and the file is compared only at the end). */
static void future_create(futures_run *r) {
  size_t slot = r->slots[r->created++];
  size_t size = 1 + test_below(&r->rng, SLOT), offset = slot * SLOT + test_below(&r->rng, SLOT - size + 1);
  pending p = {NULL, (int)test_below(&r->rng, 2), offset, size};
  unsigned char *mem = r->buf + offset;
  size_t task_size = test_below(&r->rng, 2) ? 512 : 0; /* 512: several tasks per future */
  if (p.write) {
    fill_random(mem, size, &r->rng);
    memcpy(r->model + offset, mem, size);
    ASSERT_OK(kvik_file_pwrite(r->file, mem, size, (int64_t)offset, task_size, &p.fut));
  } else {
    ASSERT_OK(kvik_file_pread(r->file, mem, size, (int64_t)offset, task_size, &p.fut));
  }
  atomic_fetch_add(&io_calls, 1);
  r->live[r->nlive++] = p;
}

/* Retire a live future, the newest (likely still running) or a random one, in one of four ways;
 * freeing unwaited (kvik_future_free waits) leaves only the bytes to check. */
static void future_retire(futures_run *r) {
  size_t i = test_below(&r->rng, 2) ? r->nlive - 1 : test_below(&r->rng, r->nlive);
  pending p = r->live[i];
  r->live[i] = r->live[--r->nlive];
  if (!kvik_future_done(p.fut)) futures_in_flight_at_retire++;
  if (test_below(&r->rng, 4) != 0) ASSERT_EQ(wait_somehow(p.fut, &r->rng), p.size);
  kvik_future_free(p.fut);
  if (!p.write) verify("future read", (int64_t)p.offset, r->buf + p.offset, r->model + p.offset, p.size);
}

static void shuffle(size_t *a, size_t n, uint64_t *rng) {
  for (size_t i = n; i > 1; i--) {
    size_t j = test_below(rng, i), t = a[i - 1];
    a[i - 1] = a[j];
    a[j] = t;
  }
}

static void phase_futures(const char *dir) {
  double start = now_s();
  const size_t bytes = (size_t)NFUTURES * SLOT;
  futures_run r = {NULL, malloc(bytes), malloc(bytes), malloc(NFUTURES * sizeof(size_t)),
                   malloc(NFUTURES * sizeof(pending)), 0, 0, rng_for(3000)};
  char *path = test_path(dir, "futures");
  fill_random(r.model, bytes, &r.rng);
  test_write_file(path, r.model, bytes);
  ASSERT_OK(kvik_file_open(path, "r+", 0, &r.file));
  for (size_t i = 0; i < NFUTURES; i++) r.slots[i] = i;
  shuffle(r.slots, NFUTURES, &r.rng);
  /* Two creations for each retirement on average: thousands are live at the peak. */
  while (r.created < NFUTURES || r.nlive > 0) {
    if (r.created < NFUTURES && (r.nlive == 0 || test_below(&r.rng, 3) != 0)) future_create(&r);
    else future_retire(&r);
  }
  ASSERT_OK(kvik_file_close(r.file));
  kvik_file_free(r.file);
  size_t n;
  unsigned char *posix = test_read_file(path, &n);
  ASSERT_EQ(n, bytes);
  verify("file written by futures", 0, posix, r.model, n);
  free(posix);
  free(path);
  free(r.model);
  free(r.buf);
  free(r.slots);
  free(r.live);
  printf("phase 2: %d futures, %" PRIu64 " still in flight when retired, %.1f s\n", NFUTURES,
         futures_in_flight_at_retire, now_s() - start);
}

/* ---- phase 3: reads racing with close ---------------------------------------------------- */

static unsigned char *race_ref; /* the content of the raced file; writes put back the same bytes */

typedef struct {
  kvik_file *file;
  _Atomic uint64_t started;     /* requests started, for the closer to wait on */
  _Atomic int close_returned;
} race;

typedef struct {
  kvik_future *fut;
  unsigned char *buf;
  int write;
  int64_t offset;
  size_t size;
} held;

typedef struct {
  race *race;
  uint64_t rng;
  unsigned char *bufs[MAX_HELD + 1]; /* one per held future, one for sync calls */
  held inflight[MAX_HELD];
  int nheld;
} reader;

static size_t expected_bytes(int64_t offset, size_t size) {
  size_t left = (size_t)offset >= CLOSE_FILE_BYTES ? 0 : CLOSE_FILE_BYTES - (size_t)offset;
  return size < left ? size : left;
}

/* A request that ran: all its bytes (up to the end of the file), right, and for reads nothing
 * past them touched. */
static void check_done_request(ssize_t got, const unsigned char *buf, int write, int64_t offset, size_t size) {
  size_t want = write ? size : expected_bytes(offset, size);
  if (got != (ssize_t)want)
    FAIL_AT("%s of %zu bytes at %lld racing close returned %zd (%s), expected %zu", write ? "write" : "read", size,
            (long long)offset, got, got < 0 ? kvik_err_name((int)got) : "bytes", want);
  atomic_fetch_add(&race_requests_done, 1);
  if (write) return;
  verify("read racing close", offset, buf, race_ref + offset, want);
  for (size_t i = want; i < size; i++)
    if (buf[i] != CANARY) FAIL_AT("read at %lld racing close wrote byte %zu past the end of file", (long long)offset, i);
}

/* A request refused: only because the handle is closed. */
static void check_refused(int rc, const char *what) {
  if (rc != -EBADF) FAIL_AT("%s racing close failed with %s (%d): %s", what, kvik_err_name(rc), rc, kvik_last_error());
  ASSERT(strstr(kvik_last_error(), "closed"));
  atomic_fetch_add(&race_requests_refused, 1);
}

static void random_request(reader *rd, int64_t *offset, size_t *size, int *write) {
  *write = test_below(&rd->rng, 4) == 0;
  *size = 1 + test_below(&rd->rng, MAX_RACE_IO);
  *offset = (int64_t)test_below(&rd->rng, CLOSE_FILE_BYTES);
  if (*write && (size_t)*offset + *size > CLOSE_FILE_BYTES) *size = CLOSE_FILE_BYTES - (size_t)*offset;
}

static void retire_held(reader *rd, int i) {
  held *h = &rd->inflight[i];
  ssize_t got = wait_somehow(h->fut, &rd->rng);
  kvik_future_free(h->fut);
  check_done_request(got, h->buf, h->write, h->offset, h->size);
  rd->inflight[i] = rd->inflight[--rd->nheld];
  unsigned char *b = rd->bufs[i]; /* keep buffers paired with their slots */
  rd->bufs[i] = rd->bufs[rd->nheld];
  rd->bufs[rd->nheld] = b;
}

/* A synchronous read or write. Returns 1 once the handle refused it. */
static int race_sync(reader *rd, int after_close) {
  int64_t offset;
  size_t size;
  int write;
  random_request(rd, &offset, &size, &write);
  unsigned char *buf = rd->bufs[MAX_HELD];
  if (!write) memset(buf, CANARY, size);
  ssize_t got = write ? kvik_file_write(rd->race->file, race_ref + offset, size, offset)
                      : kvik_file_read(rd->race->file, buf, size, offset);
  atomic_fetch_add(&io_calls, 1);
  if (got == -EBADF) {
    check_refused((int)got, write ? "kvik_file_write" : "kvik_file_read");
    ASSERT_EQ(kvik_file_closed(rd->race->file), 1); /* close had at least begun */
    return 1;
  }
  if (after_close) FAIL_AT("a request that started after close returned %zd", got);
  check_done_request(got, buf, write, offset, size);
  atomic_fetch_add(&rd->race->started, 1);
  return 0;
}

/* A future, held in flight while the reader goes on. Returns 1 once the handle refused it. */
static int race_future(reader *rd, int after_close) {
  if (rd->nheld == MAX_HELD) retire_held(rd, (int)test_below(&rd->rng, MAX_HELD));
  held *h = &rd->inflight[rd->nheld];
  random_request(rd, &h->offset, &h->size, &h->write);
  h->buf = rd->bufs[rd->nheld];
  if (!h->write) memset(h->buf, CANARY, h->size);
  kvik_future *fut = (kvik_future *)0x1; /* not NULL: a refusal must reset it */
  size_t task_size = test_below(&rd->rng, 2) ? 16 * KiB : 0; /* 16 KiB: many tasks in flight */
  int rc = h->write ? kvik_file_pwrite(rd->race->file, race_ref + h->offset, h->size, h->offset, task_size, &fut)
                    : kvik_file_pread(rd->race->file, h->buf, h->size, h->offset, task_size, &fut);
  atomic_fetch_add(&io_calls, 1);
  if (rc < 0) {
    check_refused(rc, h->write ? "kvik_file_pwrite" : "kvik_file_pread");
    ASSERT(fut == NULL);
    return 1;
  }
  if (after_close) FAIL_AT("a future started after close returned");
  /* It started, so close counted it: once close has returned, it is done. */
  if (atomic_load(&rd->race->close_returned)) ASSERT_EQ(kvik_future_done(fut), 1);
  h->fut = fut;
  rd->nheld++;
  atomic_fetch_add(&rd->race->started, 1);
  return 0;
}

/* kvik_file_size: the size, or -EBADF once closed. */
static void race_size(reader *rd, int after_close) {
  int64_t size = kvik_file_size(rd->race->file);
  if (size == -EBADF) return;
  if (after_close) FAIL_AT("kvik_file_size after close returned %lld", (long long)size);
  ASSERT_EQ(size, CLOSE_FILE_BYTES);
}

static void *reader_main(void *arg) {
  reader *rd = arg;
  for (int refused = 0; !refused;) {
    /* Read before the call: if close had returned already, the call must be refused. */
    int after_close = atomic_load(&rd->race->close_returned);
    switch (test_below(&rd->rng, 8)) {
    case 0:
    case 1:
    case 2: refused = race_sync(rd, after_close); break;
    case 7: race_size(rd, after_close); break;
    default: refused = race_future(rd, after_close);
    }
  }
  while (rd->nheld > 0) retire_held(rd, rd->nheld - 1);
  /* Closed stays closed. */
  ASSERT_FAILS(kvik_file_read(rd->race->file, rd->bufs[0], 10, 0), -EBADF, "closed");
  return NULL;
}

static void close_race_round(const char *path, reader *readers, uint64_t *rng) {
  race r = {NULL, 0, 0};
  ASSERT_OK(kvik_file_open(path, "r+", 0, &r.file));
  pthread_t threads[CLOSE_READERS];
  for (int i = 0; i < CLOSE_READERS; i++) {
    readers[i].race = &r;
    readers[i].nheld = 0;
    ASSERT_EQ(pthread_create(&threads[i], NULL, reader_main, &readers[i]), 0);
  }
  /* Close after a random amount of work, at times at once, while requests are in flight. */
  uint64_t target = test_below(rng, 40);
  while (atomic_load(&r.started) < target) sched_yield();
  if (test_below(rng, 2)) usleep((useconds_t)test_below(rng, 300));
  ASSERT_EQ(kvik_file_close(r.file), 0);
  atomic_store(&r.close_returned, 1);
  ASSERT_EQ(kvik_file_closed(r.file), 1);
  ASSERT_FAILS(kvik_file_close(r.file), -EBADF, "already closed");
  ASSERT_FAILS(kvik_file_fd(r.file), -EBADF, "closed");
  for (int i = 0; i < CLOSE_READERS; i++) ASSERT_EQ(pthread_join(threads[i], NULL), 0);
  kvik_file_free(r.file);
}

static void phase_close_races(const char *dir, double seconds) {
  double start = now_s();
  uint64_t rng = rng_for(4000);
  race_ref = malloc(CLOSE_FILE_BYTES);
  fill_random(race_ref, CLOSE_FILE_BYTES, &rng);
  char *path = test_path(dir, "raced");
  test_write_file(path, race_ref, CLOSE_FILE_BYTES);
  reader readers[CLOSE_READERS];
  for (int i = 0; i < CLOSE_READERS; i++) {
    readers[i].rng = rng_for(4100 + (uint64_t)i);
    for (int j = 0; j <= MAX_HELD; j++) readers[i].bufs[j] = malloc(MAX_RACE_IO);
  }
  double deadline = now_s() + seconds;
  while (close_races < MIN_CLOSE_ROUNDS || now_s() < deadline) {
    close_race_round(path, readers, &rng);
    close_races++;
  }
  /* The file is as it was: the writes racing close put back the same bytes. */
  size_t n;
  unsigned char *posix = test_read_file(path, &n);
  ASSERT_EQ(n, CLOSE_FILE_BYTES);
  verify("raced file", 0, posix, race_ref, n);
  free(posix);
  for (int i = 0; i < CLOSE_READERS; i++)
    for (int j = 0; j <= MAX_HELD; j++) free(readers[i].bufs[j]);
  free(path);
  free(race_ref);
  printf("phase 3: %" PRIu64 " close races, %" PRIu64 " requests completed, %" PRIu64 " refused with EBADF, %.1f s\n",
         close_races, atomic_load(&race_requests_done), atomic_load(&race_requests_refused), now_s() - start);
}

/* ---- main -------------------------------------------------------------------------------- */

static void read_environment(void) {
  const char *s = getenv("KVIK_STRESS_SEED");
  seed = s && *s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
  const char *b = getenv("KVIK_STRESS_SECONDS");
  budget_seconds = b && *b ? strtod(b, NULL) : DEFAULT_SECONDS;
  if (!(budget_seconds >= 0)) FAIL_AT("KVIK_STRESS_SECONDS='%s': not a number of seconds", b);
  printf("stress: seed %" PRIu64 " (KVIK_STRESS_SEED repeats it), budget %.0f s%s\n", seed, budget_seconds,
         SANITIZED ? " (sanitizer build)" : "");
  fflush(stdout);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  read_environment();
  double start = now_s();
  char *dir = test_mkdtemp();
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  pthread_t chaos;
  ASSERT_EQ(pthread_create(&chaos, NULL, chaos_main, NULL), 0);
  phase_clients(dir, budget_seconds * 0.6);
  pin_small_thresholds();
  phase_futures(dir);
  phase_close_races(dir, budget_seconds * 0.4);
  atomic_store(&chaos_stop, 1);
  ASSERT_EQ(pthread_join(chaos, NULL), 0);
  test_rmdir(dir);
  printf("stress: %" PRIu64 " IO calls, %d futures, %" PRIu64 " close races, %.2f GB verified, %" PRIu64
         " pool resizes, %" PRIu64 " setting changes, %" PRIu64 " mismatches, %.1f s\n",
         atomic_load(&io_calls), NFUTURES, close_races, (double)atomic_load(&bytes_verified) / 1e9,
         atomic_load(&pool_resizes), atomic_load(&setting_changes), atomic_load(&mismatches), now_s() - start);
  ASSERT_EQ(atomic_load(&mismatches), 0);
  return 0;
}
