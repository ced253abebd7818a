/* The fault sweep (issue 7): every system call and allocation site of src/ fails in turn, and
 * kvik must report it truthfully and keep working.
 *
 * Sites are the uses of src/sys.h's wrappers, found by reading the sources: a site that the
 * scenario below does not reach fails the test, so a new site needs a step that reaches it.
 * A census run counts how often each site is reached; then, for each site, its first, middle and
 * last call fail with each errno its kind of call can give (or return a short count), each in a
 * fresh child process (`--fault`), so that sites reached once per process (caches, the first
 * load of CUDA) fail as often as the others. The child checks, for each step of the scenario:
 *  - the step succeeds with the right data, or fails with the injected code and a message;
 *    interrupted calls and short counts never fail it;
 *  - after a failed write, each byte of the file is either old or new, and the future's byte
 *    count is exactly the number of new bytes; after a failed read, likewise in the buffer;
 *  - then the scenario runs again without faults and succeeds: the library works. This run leaves
 *    out the two steps that read tens of MiB to reach zero-copy's granules (each handle's
 *    registrations end with it; the small zero-copy step stays): they were two thirds of a child's
 *    time under the sanitizers. They come last, and the run with the fault ends with the step it
 *    was injected in (an armed fault fails one call; the steps after it would run as they do in
 *    the run after), so that most children never run them.
 * The parent kills a child that hangs (2 minutes) and fails; LeakSanitizer (the ASan build)
 * fails a child that leaks. Under ThreadSanitizer, which looks for races, each site fails at its
 * middle call only, when the pool's threads are at work (a full sweep there took most of CI's
 * time); the other builds also fail its first and last, which set up and tear down.
 *
 * Usage: test_fault_sweep SOURCE_DIR CALL   (CALL: open, read, write, sync, mmap, alloc, thread,
 * dlopen, copy, uring, cachestat, wait). Needs a build with -DKVIK_FAULT_INJECTION=ON; runs with
 * the fake CUDA driver, cuFile and nvCOMP (tests/CMakeLists.txt) so that the device paths are swept
 * too. */
#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>

#include "fake_cuda.h"
#include "test_cuda.h"
#include "../src/sys.h"

extern char **environ;

#define FILE_BYTES ((size_t)(1 << 20) + 777)
#define TASK (64 << 10)
#define FILL 0xEE /* what a read buffer holds before the read; no data byte has this value */
/* The read of step_zero_copy_relay: the last 16 MiB of a file's first zero-copy granule (64 MiB),
 * and the MiB after it. */
#define RELAY_OFFSET ((size_t)48 << 20)
#define RELAY_BYTES ((size_t)17 << 20)
#define MAX_SITES 256
#define CHILD_TIMEOUT_MS (120 * 1000)

#if defined(__SANITIZE_ADDRESS__)
#define LEAK_CHECKED 1 /* a leak fails the child that made it */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LEAK_CHECKED 1
#endif
#endif
#ifndef LEAK_CHECKED
#define LEAK_CHECKED 0
#endif

#if defined(__SANITIZE_THREAD__)
#define RACE_CHECKED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RACE_CHECKED 1
#endif
#endif
#ifndef RACE_CHECKED
#define RACE_CHECKED 0
#endif

#if LEAK_CHECKED
/* The sweep runs with LSAN_OPTIONS=use_tls=0 (tests/CMakeLists.txt says why): what glibc keeps
 * for a thread in TLS alone, the last dlerror() of a failed dlopen(), is then no leak of ours. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:_dlerror_run\n"; }
#endif

static const char *const call_names[KVIK__FAULT_CALLS] = {
    "open", "read", "write", "sync", "mmap", "alloc", "thread", "dlopen", "copy", "uring",
    "cachestat", "wait"};

/* The wrappers of sys.h, by the kind of call they make. */
static const struct {
  const char *macro;
  kvik__fault_call call;
} wrappers[] = {
    {"kvik__open(", KVIK__FAULT_OPEN},
    {"kvik__open_for_io(", KVIK__FAULT_OPEN},
    {"kvik__pread(", KVIK__FAULT_READ},
    {"kvik__preadv2(", KVIK__FAULT_READ},
    {"kvik__fadvise(", KVIK__FAULT_READ},
    {"kvik__pwrite(", KVIK__FAULT_WRITE},
    {"kvik__write(", KVIK__FAULT_WRITE},
    {"kvik__fdatasync(", KVIK__FAULT_SYNC},
    {"kvik__sync_file_range(", KVIK__FAULT_SYNC},
    {"kvik__mmap(", KVIK__FAULT_MMAP},
    {"kvik__madvise(", KVIK__FAULT_MMAP},
    {"kvik__get_mempolicy(", KVIK__FAULT_MMAP},
    {"kvik__prefer_node(", KVIK__FAULT_MMAP},
    {"kvik__malloc(", KVIK__FAULT_ALLOC},
    {"kvik__calloc(", KVIK__FAULT_ALLOC},
    {"kvik__realloc(", KVIK__FAULT_ALLOC},
    {"kvik__strdup(", KVIK__FAULT_ALLOC},
    {"kvik__strndup(", KVIK__FAULT_ALLOC},
    {"kvik__posix_memalign(", KVIK__FAULT_ALLOC},
    {"kvik__pthread_create(", KVIK__FAULT_THREAD},
    {"kvik__sched_getaffinity(", KVIK__FAULT_THREAD},
    {"kvik__sched_setaffinity(", KVIK__FAULT_THREAD},
    {"kvik__dlopen(", KVIK__FAULT_DLOPEN},
    {"kvik__ring_read_result(", KVIK__FAULT_READ},
    {"kvik__ring_write_result(", KVIK__FAULT_WRITE},
    {"kvik__copy_user(", KVIK__FAULT_COPY},
    {"kvik__io_uring_setup(", KVIK__FAULT_URING},
    {"kvik__io_uring_enter(", KVIK__FAULT_URING},
    {"kvik__io_uring_register(", KVIK__FAULT_URING},
    {"kvik__cachestat(", KVIK__FAULT_CACHESTAT},
    {"kvik__futex_wait(", KVIK__FAULT_WAIT},
};

/* What each kind of call fails with, 0-terminated. dlopen() has no errno: ENOENT only names it. */
static const int open_errs[] = {EINTR, EIO, ENOSPC, EAGAIN, ENOMEM, 0};
static const int read_errs[] = {EINTR, EIO, EAGAIN, ENOMEM, KVIK__FAULT_SHORT, 0};
static const int write_errs[] = {EINTR, EIO, ENOSPC, EAGAIN, KVIK__FAULT_SHORT, 0};
static const int sync_errs[] = {EINTR, EIO, ENOSPC, 0};
static const int mmap_errs[] = {ENOMEM, EAGAIN, 0};
static const int alloc_errs[] = {ENOMEM, 0};
static const int thread_errs[] = {EAGAIN, 0};
static const int dlopen_errs[] = {ENOENT, 0};
/* ENOSYS and EPERM: the system refuses process_vm_readv/writev, and kvik goes on without them. */
static const int copy_errs[] = {EINTR, EFAULT, ENOMEM, ENOSYS, EPERM, KVIK__FAULT_SHORT, 0};
/* A ring the kernel will not set up leaves the batch to the thread pool; operations it will not
 * take are done on the submitting thread; a failed wait for completions fails kvik_batch_wait. */
static const int uring_errs[] = {EINTR, EAGAIN, ENOMEM, 0};
/* Where cachestat(2) is refused, the pages are counted with mincore(2): no step fails. */
static const int cachestat_errs[] = {EINTR, ENOSYS, EPERM, 0};
/* A futex wait that ends early, as a signal or a changed word makes it: the waiter waits again. */
static const int wait_errs[] = {EINTR, EAGAIN, 0};
static const int *const errs_of[KVIK__FAULT_CALLS] = {
    open_errs,   read_errs,   write_errs, sync_errs,  mmap_errs,      alloc_errs,
    thread_errs, dlopen_errs, copy_errs,  uring_errs, cachestat_errs, wait_errs};

static const char *err_name(int err) { return err == KVIK__FAULT_SHORT ? "a short count" : strerror(err); }

static kvik__fault_call call_of_name(const char *name) {
  for (int c = 0; c < KVIK__FAULT_CALLS; c++)
    if (strcmp(call_names[c], name) == 0) return (kvik__fault_call)c;
  FAIL_AT("unknown kind of call \"%s\"", name);
}

/* ==== the child: one scenario that reaches every site ======================================= */

static struct {
  char *dir, *path;
  unsigned char *old_bytes, *new_bytes; /* differ at every byte; neither holds FILL */
  unsigned char *buf;                   /* FILE_BYTES + 1, for an unaligned read too */
  char *dev_new, *dev_buf;              /* device memory: new_bytes, and a read target */
  char *relay_path;                     /* relay_bytes at RELAY_OFFSET, a hole before them */
  unsigned char *relay_bytes;           /* RELAY_BYTES; none is FILL */
  unsigned char *relay_buf;             /* RELAY_BYTES, for a read */
  char *dev_relay;                      /* device memory of RELAY_BYTES, a read target */
  fake_cuda_slow_registration_fn slow_registration;
  int direct_io_supported;              /* kvik_direct_io_supported(dir) without faults */
  int have_remote;
  int have_jansson; /* libjansson.so.4 loads: safetensors headers can be parsed */
} env;

/* The fault armed in this child, for judging each step. */
static struct {
  kvik__fault_call call;
  int err;         /* 0: none armed */
  int cufile_gone; /* a dlopen() fault was injected: cuFile and Jansson may stay unavailable
                    * (each loaded once) */
} fault;

static char failed_message[1024];

/* A failed kvik call: keep its message, for judging the step, and pass its code on. */
static int failed(long long rc) {
  snprintf(failed_message, sizeof failed_message, "%s", kvik_last_error());
  return (int)rc;
}

/* Each of the `len` bytes of `got` is either `before` (one value when `fill`, else an array) or
 * `after`; the bytes that are `after` number `expected` (-1: any number). Block by block with
 * memcmp, and byte by byte only in a block that mixes the two: under ThreadSanitizer each byte a
 * loop reads is a call. */
static void check_truth_of(const char *what, size_t len, const unsigned char *got,
                           const unsigned char *before, int fill, const unsigned char *after,
                           long long expected) {
  enum { BLOCK = 4096 };
  unsigned char filled[BLOCK];
  memset(filled, fill, sizeof filled);
  long long changed = 0;
  for (size_t at = 0; at < len; at += BLOCK) {
    size_t n = len - at < BLOCK ? len - at : BLOCK;
    const unsigned char *old = before ? before + at : filled;
    if (memcmp(got + at, after + at, n) == 0) {
      changed += (long long)n;
      continue;
    }
    if (memcmp(got + at, old, n) == 0) continue;
    for (size_t i = at; i < at + n; i++) {
      if (got[i] == after[i]) changed++;
      else if (got[i] != old[i - at])
        FAIL_AT("%s: byte %zu is %#x, neither %#x (before) nor %#x (after)", what, i, got[i], old[i - at], after[i]);
    }
  }
  if (expected >= 0 && changed != expected)
    FAIL_AT("%s: %lld bytes changed, but the byte count says %lld", what, changed, expected);
}

/* check_truth_of() for the FILE_BYTES of the file at env.path. */
static void check_truth(const char *what, const unsigned char *got, const unsigned char *before,
                        int fill, const unsigned char *after, long long expected) {
  check_truth_of(what, FILE_BYTES, got, before, fill, after, expected);
}

static void check_file(const char *what, long long expected_new) {
  size_t n;
  unsigned char *content = test_read_file(env.path, &n);
  ASSERT_EQ(n, FILE_BYTES);
  check_truth(what, content, env.old_bytes, 0, env.new_bytes, expected_new);
  free(content);
}

static void reset_file(const unsigned char *bytes) { test_write_file(env.path, bytes, FILE_BYTES); }

/* The read target's bytes, on the host. */
static const unsigned char *landed(const void *dst, int device) {
  if (!device) return dst;
  from_device(env.buf, dst, FILE_BYTES);
  return env.buf;
}

static void prepare_target(void *dst, int device) {
  memset(env.buf, FILL, FILE_BYTES + 1);
  if (device) to_device(dst, env.buf, FILE_BYTES);
}

/* Write new_bytes over old_bytes through a future, and check what reached the file. */
static int write_future(kvik_file *f, const void *src) {
  kvik_future *future;
  int rc = kvik_file_pwrite(f, src, FILE_BYTES, 0, TASK, &future);
  if (rc < 0) {
    rc = failed(rc);
    check_file("pwrite that did not start", 0);
    return rc;
  }
  ssize_t n = kvik_future_wait(future);
  if (n < 0) rc = failed(n);
  else ASSERT_EQ(n, FILE_BYTES);
  check_file("pwrite", (long long)kvik_future_bytes_done(future));
  kvik_future_free(future);
  return rc;
}

static int write_sync(kvik_file *f, const void *src) {
  ssize_t n = kvik_file_write(f, src, FILE_BYTES, 0);
  check_file("write", n < 0 ? -1 : (long long)FILE_BYTES);
  if (n < 0) return failed(n);
  ASSERT_EQ(n, FILE_BYTES);
  return 0;
}

/* Read the file (new_bytes) through a future, and check what reached the buffer. */
static int read_future(kvik_file *f, void *dst, int device) {
  prepare_target(dst, device);
  kvik_future *future;
  int rc = kvik_file_pread(f, dst, FILE_BYTES, 0, TASK, &future);
  if (rc < 0) {
    rc = failed(rc);
    check_truth("pread that did not start", landed(dst, device), NULL, FILL, env.new_bytes, 0);
    return rc;
  }
  ssize_t n = kvik_future_wait(future);
  if (n < 0) rc = failed(n);
  else ASSERT_EQ(n, FILE_BYTES);
  check_truth("pread", landed(dst, device), NULL, FILL, env.new_bytes, (long long)kvik_future_bytes_done(future));
  kvik_future_free(future);
  return rc;
}

static int read_sync(kvik_file *f, void *dst, int device) {
  prepare_target(dst, device);
  ssize_t n = kvik_file_read(f, dst, FILE_BYTES, 0);
  check_truth("read", landed(dst, device), NULL, FILL, env.new_bytes, n < 0 ? -1 : (long long)FILE_BYTES);
  if (n < 0) return failed(n);
  ASSERT_EQ(n, FILE_BYTES);
  return 0;
}

static int open_path(const char *path, const char *flags, kvik_compat_mode compat, kvik_file **f) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_COMPAT_MODE, compat));
  int rc = kvik_file_open(path, flags, 0644, f);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_COMPAT_MODE, KVIK_COMPAT_AUTO));
  return rc < 0 ? failed(rc) : 0;
}

static int open_file(const char *flags, kvik_compat_mode compat, kvik_file **f) {
  return open_path(env.path, flags, compat, f);
}

/* A write then a read of the whole file: host or device memory, future or not. */
static int write_then_read(kvik_compat_mode compat, int device, int futures) {
  reset_file(env.old_bytes);
  kvik_file *f;
  int rc = open_file("r+", compat, &f);
  if (rc < 0) return rc;
  const void *src = device ? (const void *)env.dev_new : env.new_bytes;
  void *dst = device ? (void *)env.dev_buf : env.buf;
  rc = futures ? write_future(f, src) : write_sync(f, src);
  if (rc == 0) rc = futures ? read_future(f, dst, device) : read_sync(f, dst, device);
  kvik_file_free(f);
  return rc;
}

static int step_host(void) { return write_then_read(KVIK_COMPAT_ON, 0, 1); }

/* The file out of the page cache, by plain calls that no fault reaches. */
static void drop_file(void) {
  int fd = open(env.path, O_RDONLY | O_CLOEXEC);
  ASSERT(fd >= 0);
  ASSERT_EQ(fdatasync(fd), 0);
  ASSERT_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  close(fd);
}

/* O_DIRECT: a write from and a read into unaligned buffers, through a bounce buffer that the
 * kernel copies to and from (kvik__copy_user). The read is of a file out of the page cache, which
 * cachestat(2) counts none of: mincore(2) is asked (kvik__page_cache_mostly). */
static int step_direct(void) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 1));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, 1));
  reset_file(env.old_bytes);
  kvik_file *f;
  int rc = open_file("r+", KVIK_COMPAT_ON, &f);
  if (rc == 0) {
    memcpy(env.buf + 1, env.new_bytes, FILE_BYTES);
    rc = write_sync(f, env.buf + 1);
    if (rc == 0) drop_file();
    if (rc == 0) rc = read_future(f, env.buf + 1, 0);
    kvik_file_free(f);
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, 0));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, 0));
  return rc;
}

/* A buffered read of a file out of the page cache, in one task of more than a MiB: announced to
 * the kernel first (kvik__posix_announce in posix_io.c). */
static int step_cold_buffered(void) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, (int64_t)FILE_BYTES));
  reset_file(env.old_bytes);
  kvik_file *f;
  int rc = open_file("r+", KVIK_COMPAT_ON, &f);
  if (rc == 0) {
    rc = write_sync(f, env.new_bytes);
    if (rc == 0) drop_file();
    if (rc == 0) rc = read_sync(f, env.buf, 0);
    kvik_file_free(f);
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, TASK));
  return rc;
}

/* With numa_affinity on: where sysfs gives device 0 a NUMA node, the pool threads move to its
 * CPUs (numa.c's sites), and give them back at their next device transfer after. */
static int step_device(void) {
  kvik_setting_set(KVIK_SETTING_NUMA_AFFINITY, 1);
  int rc = write_then_read(KVIK_COMPAT_ON, 1, 1);
  kvik_setting_set(KVIK_SETTING_NUMA_AFFINITY, 0);
  return rc;
}

static int step_cufile(void) { return write_then_read(KVIK_COMPAT_OFF, 1, 0); }

/* A write of device memory then a read into it, both in the order of the default stream. A failed
 * stream-ordered read leaves the bytes of its range unspecified (kvik.h): only a read that succeeds
 * is checked byte for byte. */
static int step_stream(void) {
  reset_file(env.old_bytes);
  kvik_file *f;
  int rc = open_file("r+", KVIK_COMPAT_ON, &f);
  if (rc < 0) return rc;
  kvik_future *future;
  rc = kvik_file_write_async(f, env.dev_new, FILE_BYTES, 0, NULL, &future);
  if (rc < 0) {
    rc = failed(rc);
    check_file("write_async that was not queued", 0);
  } else {
    ssize_t n = kvik_future_wait(future);
    if (n < 0) rc = failed(n);
    check_file("write_async", (long long)kvik_future_bytes_done(future));
    kvik_future_free(future);
  }
  if (rc == 0) {
    reset_file(env.new_bytes);
    prepare_target(env.dev_buf, 1);
    rc = kvik_file_read_async(f, env.dev_buf, FILE_BYTES, 0, NULL, &future);
    if (rc < 0) {
      rc = failed(rc);
    } else {
      ssize_t n = kvik_future_wait(future);
      if (n < 0) rc = failed(n);
      else check_truth("read_async", landed(env.dev_buf, 1), NULL, FILL, env.new_bytes, (long long)FILE_BYTES);
      kvik_future_free(future);
    }
  }
  kvik_file_free(f);
  return rc;
}

/* One task of the whole file: how a zero-copy read's front and back tasks share a file varies from
 * run to run, and the sweep fails the calls that one run counted. */
static int step_zero_copy(void) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_AUTO));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, (int64_t)FILE_BYTES));
  reset_file(env.new_bytes);
  kvik_file *f;
  int rc = open_file("r", KVIK_COMPAT_ON, &f);
  if (rc == 0) {
    rc = read_sync(f, env.dev_buf, 1);
    kvik_file_free(f);
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, TASK));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_OFF));
  return rc;
}

/* The times the relay's futex was waited on (zero_copy_read.c), failed waits included. */
static long futex_waits(void) {
  const char *sites[MAX_SITES];
  kvik__fault_call calls[MAX_SITES];
  long hits[MAX_SITES], waits = 0;
  size_t n = kvik__fault_sites(sites, calls, hits, MAX_SITES);
  for (size_t i = 0; i < n; i++)
    if (calls[i] == KVIK__FAULT_WAIT) waits += hits[i];
  return waits;
}

/* kvik_file_pread of `bytes` at `offset` in tasks of `task` into `dev`, filled first, and a check
 * of what landed, through `host`, against `want`: each byte the fill or the file's, and as many
 * of the file's as the future counted (none where the call failed). */
static int pread_to_device(const char *what, kvik_file *f, char *dev, unsigned char *host,
                           size_t bytes, size_t offset, size_t task, const unsigned char *want) {
  memset(host, FILL, bytes);
  to_device(dev, host, bytes);
  kvik_future *future;
  int rc = kvik_file_pread(f, dev, bytes, (int64_t)offset, task, &future);
  long long done = 0;
  if (rc < 0) {
    rc = failed(rc);
  } else {
    ssize_t n = kvik_future_wait(future);
    if (n < 0) rc = failed(n);
    else ASSERT_EQ(n, bytes);
    done = (long long)kvik_future_bytes_done(future);
    kvik_future_free(future);
  }
  from_device(host, dev, bytes);
  check_truth_of(what, bytes, host, NULL, FILL, want, done);
  return rc;
}

/* A first zero-copy read of the relay file's bytes in pieces of 16 MiB, so in two tasks
 * (zero_copy_read.c): the first registers the file's first granule, slowly (the fake driver sleeps
 * in each registration), and copies its last 16 MiB from it, while the other reads the MiB after
 * the granule through a bounce buffer and hands its copy to the first, whose thread queues it
 * after the registration: the other thread waits for that, on the relay's futex. Whether the
 * relay was open when the copy was handed depends on which thread ran first, so the read is made
 * again until a thread waited. */
static int step_zero_copy_relay(void) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_ON));
  env.slow_registration(20 * 1000);
  int rc = 0;
  long waits_before = futex_waits();
  for (int attempt = 0; attempt < 20 && rc == 0 && futex_waits() == waits_before; attempt++) {
    kvik_file *f;
    if ((rc = open_path(env.relay_path, "r", KVIK_COMPAT_ON, &f)) < 0) break;
    rc = pread_to_device("zero-copy read in two tasks", f, env.dev_relay, env.relay_buf,
                         RELAY_BYTES, RELAY_OFFSET, (size_t)16 << 20, env.relay_bytes);
    kvik_file_free(f);
  }
  env.slow_registration(0);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_OFF));
  return rc;
}

/* Reads of half a zero-copy granule (32 MiB), which a handle counts to register what it reads
 * again (zero_copy.c): the relay file's bytes and the hole before them, twice, in one task each
 * so that every run makes the same calls. */
static int step_zero_copy_counted(void) {
  size_t bytes = (size_t)32 << 20, offset = RELAY_OFFSET + RELAY_BYTES - bytes;
  unsigned char *want = calloc(bytes, 1), *got = malloc(bytes);
  char *dev = device_alloc(bytes);
  ASSERT(want && got);
  memcpy(want + (RELAY_OFFSET - offset), env.relay_bytes, RELAY_BYTES);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_AUTO));
  kvik_file *f;
  int rc = open_path(env.relay_path, "r", KVIK_COMPAT_ON, &f);
  if (rc == 0) {
    for (int round = 0; round < 2 && rc == 0; round++)
      rc = pread_to_device("zero-copy read, counted", f, dev, got, bytes, offset, bytes, want);
    kvik_file_free(f);
  }
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, KVIK_OFF));
  device_free(dev);
  free(got);
  free(want);
  return rc;
}

static int step_read_to_device(void) {
  reset_file(env.new_bytes);
  kvik_file *f;
  int rc = open_file("r", KVIK_COMPAT_ON, &f);
  if (rc < 0) return rc;
  void *dev = NULL;
  ssize_t n = kvik_file_read_to_device(f, 0, &dev);
  if (n < 0) {
    rc = failed(n);
    ASSERT(dev == NULL);
  } else {
    ASSERT_EQ(n, FILE_BYTES);
    ASSERT_SAME_BYTES(landed(dev, 1), env.new_bytes, FILE_BYTES);
    ASSERT_OK(kvik_device_free(dev));
  }
  kvik_file_free(f);
  return rc;
}

/* Collect every event of a batch of reads of equal parts of the file, and check the data of each
 * completed one; returns the first failure's code, else 0. */
static int collect_batch(kvik_batch *b, unsigned count, unsigned char **targets, const int *on_device) {
  kvik_batch_event events[8];
  int rc = 0;
  for (unsigned got = 0; got < count;) {
    int n = kvik_batch_wait(b, count - got, events, count - got, -1);
    if (n < 0) return failed(n);
    for (int i = 0; i < n; i++) {
      size_t part = (size_t)(uintptr_t)events[i].cookie, len = FILE_BYTES / 4;
      if (events[i].status == KVIK_BATCH_FAILED) {
        if (rc == 0) rc = (int)events[i].result;
        snprintf(failed_message, sizeof failed_message, "batch operation %zu failed", part);
        continue;
      }
      ASSERT_EQ(events[i].status, KVIK_BATCH_COMPLETE);
      ASSERT_EQ(events[i].result, len);
      unsigned char *bytes = targets[part];
      if (on_device[part]) from_device(bytes = malloc(len), (const char *)targets[part], len);
      ASSERT_SAME_BYTES(bytes, env.new_bytes + part * len, len);
      if (on_device[part]) free(bytes);
    }
    got += (unsigned)n;
  }
  return rc;
}

/* Four reads of a quarter each, through io_uring where the kernel has it: two into host memory,
 * one into device memory through the ring's staging arena; and one into device memory through
 * cuFile. */
static int step_batch(void) {
  reset_file(env.new_bytes);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_IO_URING, KVIK_ON));
  kvik_file *posix, *gds;
  int rc = open_file("r", KVIK_COMPAT_ON, &posix);
  if (rc < 0) return rc;
  rc = open_file("r", KVIK_COMPAT_OFF, &gds);
  if (rc < 0) {
    kvik_file_free(posix);
    return rc;
  }
  kvik_batch *b;
  rc = kvik_batch_create(8, &b);
  if (rc < 0) rc = failed(rc);
  size_t len = FILE_BYTES / 4;
  unsigned char *targets[4] = {env.buf, env.buf + len, (unsigned char *)env.dev_buf + 2 * len,
                               (unsigned char *)env.dev_buf + 3 * len};
  const int on_device[4] = {0, 0, 1, 1};
  if (rc == 0) {
    kvik_batch_op ops[4];
    for (size_t part = 0; part < 4; part++)
      ops[part] = (kvik_batch_op){part == 3 ? gds : posix, KVIK_BATCH_READ, targets[part], len,
                                  (int64_t)(part * len), (void *)(uintptr_t)part};
    rc = kvik_batch_submit(b, ops, 4);
    rc = rc < 0 ? failed(rc) : collect_batch(b, 4, targets, on_device);
    kvik_batch_free(b);
  }
  kvik_file_free(gds);
  kvik_file_free(posix);
  return rc;
}

/* Four reads of a quarter each into host memory below the GDS threshold (1 MiB here, its
 * default) under KVIK_SETTING_IO_URING's default, which a batch tries within kvik_batch_submit()
 * (preadv2 with RWF_NOWAIT) since the file was just written: what a try does not read goes to the
 * ring or the pool. In CACHED_ROUNDS submissions: after 64 tries the page cache served, the batch
 * trusts it, and the last round's tries read with pread (src/batch.c, TRUST_STREAK). */
#define CACHED_ROUNDS 17

static int step_batch_cached(void) {
  reset_file(env.new_bytes);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_IO_URING, KVIK_AUTO));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 1 << 20));
  kvik_file *f;
  int rc = open_file("r", KVIK_COMPAT_ON, &f);
  if (rc < 0) {
    ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
    return rc;
  }
  kvik_batch *b;
  rc = kvik_batch_create(4, &b);
  if (rc < 0) rc = failed(rc);
  size_t len = FILE_BYTES / 4;
  unsigned char *targets[4];
  const int on_device[4] = {0, 0, 0, 0};
  if (rc == 0) {
    kvik_batch_op ops[4];
    for (size_t part = 0; part < 4; part++) {
      targets[part] = env.buf + part * len;
      ops[part] = (kvik_batch_op){f,   KVIK_BATCH_READ,       targets[part],
                                  len, (int64_t)(part * len), (void *)(uintptr_t)part};
    }
    for (int round = 0; rc == 0 && round < CACHED_ROUNDS; round++) {
      rc = kvik_batch_submit(b, ops, 4);
      rc = rc < 0 ? failed(rc) : collect_batch(b, 4, targets, on_device);
    }
    kvik_batch_free(b);
  }
  kvik_file_free(f);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
  return rc;
}

/* new_bytes over old_bytes in four writes through a batch's io_uring (where the kernel has it),
 * the last from device memory through the staging arena: each completed write lands whole, and a
 * failed one leaves each of its bytes old or new. */
static int step_batch_write(void) {
  reset_file(env.old_bytes);
  kvik_file *f;
  int rc = open_file("r+", KVIK_COMPAT_ON, &f);
  if (rc < 0) return rc;
  kvik_batch *b;
  rc = kvik_batch_create(4, &b);
  if (rc < 0) {
    kvik_file_free(f);
    return failed(rc);
  }
  size_t len = FILE_BYTES / 4;
  kvik_batch_op ops[4];
  for (size_t part = 0; part < 4; part++) {
    unsigned char *from = part == 3 ? (unsigned char *)env.dev_new : env.new_bytes;
    ops[part] = (kvik_batch_op){f, KVIK_BATCH_WRITE, from + part * len, part == 3 ? FILE_BYTES - 3 * len : len,
                                (int64_t)(part * len), (void *)(uintptr_t)part};
  }
  rc = kvik_batch_submit(b, ops, 4);
  if (rc < 0) {
    rc = failed(rc);
    check_file("batch write that did not start", 0);
  } else {
    kvik_batch_event events[4];
    for (unsigned got = 0; got < 4;) {
      int n = kvik_batch_wait(b, 4 - got, events, 4 - got, -1);
      if (n < 0) { /* the wait failed (io_uring_enter): the writes end as the batch is freed */
        if (rc == 0) rc = failed(n);
        break;
      }
      for (int i = 0; i < n; i++) {
        const kvik_batch_op *op = &ops[(uintptr_t)events[i].cookie];
        if (events[i].status == KVIK_BATCH_COMPLETE) {
          ASSERT_EQ(events[i].result, op->size);
        } else if (rc == 0) {
          ASSERT_EQ(events[i].status, KVIK_BATCH_FAILED);
          rc = (int)events[i].result;
          snprintf(failed_message, sizeof failed_message, "batch write %zu failed", (size_t)(uintptr_t)events[i].cookie);
        }
      }
      got += (unsigned)n;
    }
    kvik_batch_free(b);
    b = NULL;
    check_file("batch write", rc < 0 ? -1 : (long long)FILE_BYTES);
  }
  kvik_batch_free(b);
  kvik_file_free(f);
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_IO_URING, KVIK_AUTO));
  return rc;
}

/* The file after an append of new_bytes to old_bytes that moved `appended` bytes: the kernel
 * places each write at the end, so a failed append leaves exactly those after old_bytes. */
static void check_appended(const char *what, size_t appended) {
  size_t n;
  unsigned char *content = test_read_file(env.path, &n);
  if (n != FILE_BYTES + appended)
    FAIL_AT("%s: the file has %zu bytes, %zu more than before, but the byte count says %zu", what,
            n, n - FILE_BYTES, appended);
  ASSERT_SAME_BYTES(content, env.old_bytes, FILE_BYTES);
  ASSERT_SAME_BYTES(content + FILE_BYTES, env.new_bytes, appended);
  free(content);
}

static int append_once(const void *src) {
  reset_file(env.old_bytes);
  kvik_file *f;
  int rc = open_file("a", KVIK_COMPAT_ON, &f);
  if (rc < 0) return rc;
  kvik_future *future;
  rc = kvik_file_pwrite(f, src, FILE_BYTES, 0, TASK, &future);
  if (rc < 0) {
    rc = failed(rc);
    check_appended("append that did not start", 0);
  } else {
    ssize_t n = kvik_future_wait(future);
    if (n < 0) rc = failed(n);
    else ASSERT_EQ(n, FILE_BYTES);
    check_appended("append", kvik_future_bytes_done(future));
    kvik_future_free(future);
  }
  kvik_file_free(f);
  return rc;
}

/* An append from host memory (one write(2)), then one from device memory (a write(2) per bounce
 * buffer). */
static int step_append(void) {
  int rc = append_once(env.new_bytes);
  return rc < 0 ? rc : append_once(env.dev_new);
}

static int step_mmap(void) {
  reset_file(env.new_bytes);
  kvik_mmap *map;
  int rc = kvik_mmap_open(env.path, "r", 0, 0, &map);
  if (rc < 0) return failed(rc);
  memset(env.buf, FILL, FILE_BYTES);
  ssize_t n = kvik_mmap_read(map, env.buf, FILE_BYTES, 0);
  if (n < 0) rc = failed(n);
  else ASSERT_SAME_BYTES(env.buf, env.new_bytes, FILE_BYTES);
  kvik_future *future;
  if (rc == 0 && (rc = kvik_mmap_pread(map, env.dev_buf, FILE_BYTES, 0, TASK, &future)) < 0) rc = failed(rc);
  else if (rc == 0) {
    n = kvik_future_wait(future);
    if (n < 0) rc = failed(n);
    else ASSERT_SAME_BYTES(landed(env.dev_buf, 1), env.new_bytes, FILE_BYTES);
    kvik_future_free(future);
  }
  kvik_mmap_free(map);
  return rc;
}

/* A file that is all hole has no page cached on any file system, which cachestat(2) cannot tell
 * from a file on overlayfs: mincore(2) is asked, through a mapping. */
static int step_page_cache(void) {
  size_t resident, total, page = (size_t)sysconf(_SC_PAGESIZE);
  int rc = kvik_page_cache_info(env.path, &resident, &total);
  if (rc < 0) return failed(rc);
  ASSERT_EQ(total, (FILE_BYTES + page - 1) / page);
  ASSERT(resident <= total);
  char *hole = test_path(env.dir, "hole");
  int fd = open(hole, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT(fd >= 0 && ftruncate(fd, (off_t)FILE_BYTES) == 0);
  close(fd);
  rc = kvik_page_cache_info(hole, &resident, &total);
  unlink(hole);
  free(hole);
  if (rc < 0) return failed(rc);
  ASSERT_EQ(resident, 0);
  rc = kvik_page_cache_drop(env.path);
  return rc < 0 ? failed(rc) : 0;
}

/* Threads start on a resize; fewer than asked is no error (the pool runs with those it got). */
static int step_pool(void) {
  int rc = kvik_setting_set(KVIK_SETTING_NUM_THREADS, 3);
  if (rc == 0) rc = kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4);
  return rc < 0 ? failed(rc) : 0;
}

/* Host memory pinned, and device memory registered with cuFile. */
static int step_register(void) {
  int rc = kvik_host_pin(env.buf, FILE_BYTES);
  if (rc < 0) return failed(rc);
  ASSERT_OK(kvik_host_unpin(env.buf));
  rc = kvik_cufile_buffer_register(env.dev_buf, 0);
  if (rc < 0) return failed(rc);
  ASSERT_OK(kvik_cufile_buffer_deregister(env.dev_buf));
  return 0;
}

/* Where device 0 sits: its PCI bus id is the machine's first PCI function (main sets it), whose
 * sysfs attributes are read. What sysfs does not give is "unknown", never an error. */
static int step_device_properties(void) {
  kvik_cuda_device_properties p = {.struct_size = sizeof p};
  int rc = kvik_cuda_device_get_properties(0, &p);
  if (rc < 0) return failed(rc);
  ASSERT(strcmp(p.name, "Fake CUDA Device 0") == 0);
  return 0;
}

static int step_direct_probe(void) {
  int supported = kvik_direct_io_supported(env.dir);
  if (supported < 0) return failed(supported);
  ASSERT_EQ(supported, env.direct_io_supported);
  return 0;
}

/* Opens that reach every allocation of a remote handle: nothing listens on port 1, so each ends
 * in -ECONNREFUSED unless a fault stops it first. */
static int remote_open_refused(const char *url, const kvik_remote_options *o) {
  kvik_remote *r = NULL;
  int rc = kvik_remote_open(url, o, &r);
  ASSERT(rc < 0 && r == NULL);
  return rc == -ECONNREFUSED ? 0 : failed(rc);
}

static int step_remote(void) {
  if (!env.have_remote) return 0;
  kvik_remote_options o;
  kvik_remote_options_init(&o);
  int rc = remote_open_refused("http://user@127.0.0.1:1/sweep", NULL);
  if (rc == 0) rc = remote_open_refused("http://127.0.0.1:1/webhdfs/v1/sweep?user.name=sweep", NULL);
  o.webhdfs_user = "sweep user";
  if (rc == 0) rc = remote_open_refused("http://127.0.0.1:1/webhdfs/v1/sweep", &o);
  kvik_remote_options_init(&o);
  o.aws_endpoint_url = "http://127.0.0.1:1";
  o.aws_access_key_id = "AKIDSWEEP";
  o.aws_secret_access_key = "sweep";
  o.aws_region = "us-east-1";
  if (rc == 0) rc = remote_open_refused("s3://bucket/sweep key", &o);
  return rc;
}

/* A monitor watching host IO: it counts each call once, the failed one as failed. */
static int step_stats(void) {
  kvik_monitor *m;
  int rc = kvik_monitor_create(&m);
  if (rc < 0) return failed(rc);
  rc = write_then_read(KVIK_COMPAT_ON, 0, 1);
  kvik_summary s = {.struct_size = sizeof s};
  ASSERT_OK(kvik_monitor_read(m, &s));
  kvik_monitor_free(m);
  ASSERT(s.num_ops <= 2 && s.num_errors == (rc < 0 && s.num_ops > 0));
  if (rc == 0) ASSERT_EQ(s.bytes_transferred, 2 * FILE_BYTES);
  return rc;
}

/* Compression through nvCOMP (the fake's): two zstd chunks of new_bytes compressed (blocking,
 * without statuses) and decompressed (stream-ordered) in env.dev_buf, and compared. */
static int step_compression(void) {
  enum { N = 2, SIZE = 32 << 10, SLOT = 256 << 10 };
  size_t bound;
  int rc = kvik_codec_max_compressed_size(KVIK_CODEC_ZSTD, SIZE, &bound);
  if (rc < 0) return failed(rc);
  ASSERT(bound <= SLOT);
  char *b = env.dev_buf;
  const void *src[N] = {env.dev_new, env.dev_new + SIZE};
  void *packed[N] = {b, b + SLOT}, *out[N] = {b + 2 * SLOT, b + 3 * SLOT};
  size_t sizes[N] = {SIZE, SIZE}, caps[N] = {bound, bound}, packed_sizes[N], out_sizes[N];
  int statuses[N];
  rc = kvik_compress(KVIK_CODEC_ZSTD, N, src, sizes, packed, caps, packed_sizes, NULL);
  if (rc < 0) return failed(rc);
  rc = kvik_decompress_async(KVIK_CODEC_ZSTD, N, (const void *const *)packed, packed_sizes, out,
                             sizes, out_sizes, statuses, NULL);
  if (rc < 0) return failed(rc);
  CU_OK(cu.cuStreamSynchronize(NULL));
  const unsigned char *got = landed(env.dev_buf, 1);
  for (int i = 0; i < N; i++) {
    ASSERT_EQ(statuses[i], 0);
    ASSERT_EQ(out_sizes[i], SIZE);
    ASSERT_SAME_BYTES(got + (2 + i) * SLOT, env.new_bytes + i * SIZE, SIZE);
  }
  return 0;
}

/* The fused read: two zstd chunks of new_bytes, compressed as step_compression does, written
 * at odd offsets of a file of their own, read and decoded into env.dev_buf by
 * kvik_file_read_decompress (one through a handle, one by path), and compared. */
static int step_fused_read(void) {
  enum { N = 2, SIZE = 32 << 10, SLOT = 256 << 10, AT = 333 };
  size_t bound;
  int rc = kvik_codec_max_compressed_size(KVIK_CODEC_ZSTD, SIZE, &bound);
  if (rc < 0) return failed(rc);
  char *b = env.dev_buf;
  const void *src[N] = {env.dev_new, env.dev_new + SIZE};
  void *packed[N] = {b, b + SLOT};
  size_t sizes[N] = {SIZE, SIZE}, caps[N] = {bound, bound}, packed_sizes[N];
  rc = kvik_compress(KVIK_CODEC_ZSTD, N, src, sizes, packed, caps, packed_sizes, NULL);
  if (rc < 0) return failed(rc);
  unsigned char *image = calloc(1, AT + 2 * SLOT);
  ASSERT(image);
  from_device(image + AT, packed[0], packed_sizes[0]);
  from_device(image + AT + packed_sizes[0], packed[1], packed_sizes[1]);
  char *path = test_path(env.dir, "fused");
  test_write_file(path, image, AT + packed_sizes[0] + packed_sizes[1]);
  free(image);
  kvik_file *f;
  rc = kvik_file_open(path, "r", 0, &f);
  if (rc < 0) rc = failed(rc);
  /* The second by path, to the end of the file: opened and measured by the call. */
  kvik_compressed_chunk chunks[N] = {{.file = f,
                                      .file_offset = AT,
                                      .compressed_size = packed_sizes[0],
                                      .dst = b + 2 * SLOT,
                                      .uncompressed_size = SIZE},
                                     {.path = path,
                                      .file_offset = AT + (int64_t)packed_sizes[0],
                                      .dst = b + 3 * SLOT,
                                      .uncompressed_size = SIZE}};
  int statuses[N];
  if (rc == 0 && (rc = kvik_file_read_decompress(KVIK_CODEC_ZSTD, chunks, N, statuses)) < 0)
    rc = failed(rc);
  if (rc == 0) {
    const unsigned char *got = landed(env.dev_buf, 1);
    for (int i = 0; i < N; i++) {
      ASSERT_EQ(statuses[i], 0);
      ASSERT_SAME_BYTES(got + (2 + i) * SLOT, env.new_bytes + i * SIZE, SIZE);
    }
  }
  kvik_file_free(f);
  unlink(path);
  free(path);
  return rc;
}

/* A safetensors checkpoint of two tensors of new_bytes, at an odd data offset, and metadata:
 * opened (its header parsed by Jansson) and read into host memory and into env.dev_buf, and
 * compared. */
static int step_safetensors(void) {
  if (!env.have_jansson) return 0;
  static const char header[] = "{\"__metadata__\":{\"format\":\"pt\"},"
                               "\"w\":{\"dtype\":\"F32\",\"shape\":[3,1000],\"data_offsets\":"
                               "[0,12000]},\"b\":{\"dtype\":\"U8\",\"shape\":[333],"
                               "\"data_offsets\":[12000,12333]}}";
  enum { DATA = 12333, PAD = 3 };
  size_t hlen = sizeof header - 1 + PAD;
  unsigned char *image = malloc(8 + hlen + DATA);
  ASSERT(image);
  for (int i = 0; i < 8; i++) image[i] = (unsigned char)(hlen >> (8 * i));
  memcpy(image + 8, header, sizeof header - 1);
  memset(image + 8 + sizeof header - 1, ' ', PAD);
  memcpy(image + 8 + hlen, env.new_bytes, DATA);
  char *path = test_path(env.dir, "weights.safetensors");
  test_write_file(path, image, 8 + hlen + DATA);
  free(image);
  kvik_safetensors *st;
  int rc = kvik_safetensors_open(path, &st);
  if (rc < 0) rc = failed(rc);
  for (int device = 0; rc == 0 && device < 2; device++) {
    char *mem = device ? env.dev_buf : (char *)env.buf;
    prepare_target(mem, device);
    size_t indices[2] = {1, 0};
    void *dsts[2] = {mem + 12001, mem + 1}; /* where each lands from byte 1 on */
    rc = kvik_safetensors_read(st, indices, dsts, 2);
    if (rc < 0) rc = failed(rc);
    check_truth_of("safetensors read", DATA, landed(mem, device) + 1, NULL, FILL, env.new_bytes,
                   rc < 0 ? -1 : DATA);
  }
  kvik_safetensors_free(st);
  unlink(path);
  free(path);
  return rc;
}

static const struct {
  const char *name;
  int (*run)(void);
  int large; /* reads tens of MiB: not in the run after the fault */
} steps[] = {
    {"host IO", step_host, 0},
    {"O_DIRECT IO", step_direct, 0},
    {"cold buffered read", step_cold_buffered, 0},
    {"device IO", step_device, 0},
    {"stream-ordered IO", step_stream, 0},
    {"cuFile IO", step_cufile, 0},
    {"zero-copy read", step_zero_copy, 0},
    {"read to device", step_read_to_device, 0},
    {"batch", step_batch, 0},
    {"batch writes", step_batch_write, 0},
    {"batch from the page cache", step_batch_cached, 0},
    {"append", step_append, 0},
    {"mmap", step_mmap, 0},
    {"page cache", step_page_cache, 0},
    {"pool resize", step_pool, 0},
    {"memory registration", step_register, 0},
    {"device properties", step_device_properties, 0},
    {"O_DIRECT probe", step_direct_probe, 0},
    {"remote open", step_remote, 0},
    {"statistics", step_stats, 0},
    {"compression", step_compression, 0},
    {"fused read", step_fused_read, 0},
    {"safetensors", step_safetensors, 0},
    /* Last, so that a run with a fault injected before them ends without them. */
    {"zero-copy read in two tasks", step_zero_copy_relay, 1},
    {"zero-copy reads, counted", step_zero_copy_counted, 1},
};

/* The code a step may fail with under the armed fault, or 0 for none. */
static int expected_code(void) {
  switch (fault.call) {
  case KVIK__FAULT_ALLOC: return -ENOMEM;
  case KVIK__FAULT_DLOPEN: return KVIK_ECUDA_UNAVAILABLE;
  case KVIK__FAULT_WAIT: return 0; /* a wait that ends early is no failure */
  default: break;
  }
  int refused_copy = fault.call == KVIK__FAULT_COPY && (fault.err == ENOSYS || fault.err == EPERM);
  return fault.err == EINTR || fault.err == KVIK__FAULT_SHORT || refused_copy ? 0 : -fault.err;
}

static void judge(const char *phase, const char *step, int rc, long injected) {
  if (rc >= 0) return;
  /* Loading cuFile and Jansson is tried once. */
  if (fault.cufile_gone && (rc == KVIK_ECUFILE_UNAVAILABLE || rc == KVIK_ENOJSON)) return;
  if (!injected)
    FAIL_AT("%s: step \"%s\" failed with no fault injected in it: %s (%d): %s", phase, step, kvik_err_name(rc), rc,
            failed_message);
  int expected = expected_code();
  int unloaded =
      rc == KVIK_ECUFILE_UNAVAILABLE || rc == KVIK_ENVCOMP_UNAVAILABLE || rc == KVIK_ENOJSON;
  if (rc != expected && !(fault.call == KVIK__FAULT_DLOPEN && unloaded))
    FAIL_AT("%s: step \"%s\" failed with %s (%d), expected %s: %s", phase, step, kvik_err_name(rc), rc,
            expected ? kvik_err_name(expected) : "success", failed_message);
  if (!failed_message[0]) FAIL_AT("%s: step \"%s\" failed with %s and no message", phase, step, kvik_err_name(rc));
}

/* The runs of a child, and which steps each takes: the census all of them; the run with the fault
 * those up to the one the fault was injected in, as an armed fault fails one call only (the steps
 * after it would run as in the run after the fault); the run after the fault all but the large
 * ones. */
typedef enum { CENSUS, WITH_FAULT, AFTER_FAULT } run_kind;

static void run_scenario(run_kind kind) {
  static const char *const phases[] = {"census", "with the fault", "after the fault"};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    if (steps[i].large && kind == AFTER_FAULT) continue;
    long before = kvik__fault_injected();
    failed_message[0] = '\0';
    int rc = steps[i].run();
    long injected = kvik__fault_injected() - before;
    if (injected && fault.call == KVIK__FAULT_DLOPEN) fault.cufile_gone = 1;
    judge(phases[kind], steps[i].name, rc, injected);
    if (injected && kind == WITH_FAULT) return;
  }
}

static void setup(void) {
  /* Whether Jansson loads, asked not through kvik's sites (and kept loaded). */
  env.have_jansson = dlopen("libjansson.so.4", RTLD_NOW | RTLD_LOCAL) != NULL;
  if (!load_cuda()) FAIL_AT("no CUDA driver: run with the fake one (tests/CMakeLists.txt)");
  if (load_fake_cufile() != 1) FAIL_AT("no fake cuFile: run with it (tests/CMakeLists.txt)");
  env.dir = test_mkdtemp();
  env.path = test_path(env.dir, "sweep");
  env.old_bytes = malloc(FILE_BYTES);
  env.new_bytes = malloc(FILE_BYTES);
  env.buf = malloc(FILE_BYTES + 1);
  uint64_t seed = 7;
  for (size_t i = 0; i < FILE_BYTES; i++) {
    env.old_bytes[i] = (unsigned char)test_below(&seed, FILL);
    env.new_bytes[i] = (unsigned char)(env.old_bytes[i] + 1 + test_below(&seed, FILL - 1)) % FILL;
  }
  env.dev_new = device_alloc(FILE_BYTES);
  env.dev_buf = device_alloc(FILE_BYTES);
  to_device(env.dev_new, env.new_bytes, FILE_BYTES);
  /* new_bytes over and over: a piece put at another offset by a MiB shows. */
  env.relay_bytes = malloc(RELAY_BYTES);
  env.relay_buf = malloc(RELAY_BYTES);
  for (size_t at = 0; at < RELAY_BYTES; at += FILE_BYTES) {
    size_t n = RELAY_BYTES - at < FILE_BYTES ? RELAY_BYTES - at : FILE_BYTES;
    memcpy(env.relay_bytes + at, env.new_bytes, n);
  }
  env.relay_path = test_path(env.dir, "relay");
  int fd = open(env.relay_path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT(fd >= 0 && pwrite(fd, env.relay_bytes, RELAY_BYTES, RELAY_OFFSET) == (ssize_t)RELAY_BYTES);
  close(fd);
  env.dev_relay = device_alloc(RELAY_BYTES);
  *(void **)&env.slow_registration =
      dlsym(dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD), "fake_cuda_slow_registration");
  if (!env.slow_registration) FAIL_AT("no fake CUDA driver: run with it (tests/CMakeLists.txt)");
  env.direct_io_supported = kvik_direct_io_supported(env.dir);
  ASSERT_OK(env.direct_io_supported);
  env.have_remote = kvik_remote_supported(NULL, 0);
  /* Tasks on the pool, several per request; remote opens give up at once. */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, 4));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, TASK));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_HTTP_MAX_ATTEMPTS, 1));
  /* Where a CA bundle and directory are named, remote handles copy both names. */
  setenv("CURL_CA_BUNDLE", "/dev/null", 1);
  setenv("SSL_CERT_DIR", "/nonexistent", 1);
}

static void teardown(void) {
  device_free(env.dev_new);
  device_free(env.dev_buf);
  device_free(env.dev_relay);
  unlink(env.relay_path);
  free(env.relay_path);
  free(env.relay_bytes);
  free(env.relay_buf);
  free(env.old_bytes);
  free(env.new_bytes);
  free(env.buf);
  free(env.path);
  test_rmdir(env.dir);
}

/* --census: the scenario without faults; prints each site reached, its call and its hits. */
static int child_census(void) {
  setup();
  run_scenario(CENSUS);
  const char *sites[MAX_SITES];
  kvik__fault_call calls[MAX_SITES];
  long hits[MAX_SITES];
  size_t n = kvik__fault_sites(sites, calls, hits, MAX_SITES);
  for (size_t i = 0; i < n; i++) printf("%s\t%s\t%ld\n", sites[i], call_names[calls[i]], hits[i]);
  teardown();
  return 0;
}

/* --fault CALL SITE NTH ERR: the scenario with that fault, then without; prints how many
 * faults were injected (0 when the site was not reached NTH times). */
static int child_fault(const char *call, const char *site, long nth, int err) {
  setup();
  fault.call = call_of_name(call);
  fault.err = err;
  kvik__fault_arm(fault.call, site, nth, err);
  run_scenario(WITH_FAULT);
  long injected = kvik__fault_injected();
  kvik__fault_disarm();
  fault.err = 0;
  run_scenario(AFTER_FAULT);
  teardown();
  printf("injected %ld\n", injected);
  return 0;
}

/* ==== the parent: find the sites, take the census, run one child per fault ================== */

typedef struct {
  char site[512]; /* "src/file.c:LINE" in the sources; the full path in the census */
  kvik__fault_call call;
  long hits;
} site_entry;

/* Every use of a wrapper in the .c files of SOURCE_DIR/src, outside comments. */
static size_t scan_sources(const char *root, site_entry *out, size_t max) {
  char dir_path[4096];
  snprintf(dir_path, sizeof dir_path, "%s/src", root);
  DIR *dir = opendir(dir_path);
  if (!dir) FAIL_AT("opendir(%s): %s", dir_path, strerror(errno));
  size_t n = 0;
  struct dirent *e;
  while ((e = readdir(dir))) {
    size_t len = strlen(e->d_name);
    if (len < 3 || strcmp(e->d_name + len - 2, ".c") != 0) continue;
    char path[8192], line[4096];
    snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) FAIL_AT("fopen(%s): %s", path, strerror(errno));
    for (int lineno = 1; fgets(line, sizeof line, f); lineno++) {
      const char *code = line + strspn(line, " \t");
      if (code[0] == '*' || (code[0] == '/' && (code[1] == '*' || code[1] == '/'))) continue;
      for (size_t w = 0; w < sizeof wrappers / sizeof wrappers[0]; w++) {
        if (!strstr(line, wrappers[w].macro)) continue;
        if (n == max) FAIL_AT("more than %zu sites", max);
        snprintf(out[n].site, sizeof out[n].site, "src/%s:%d", e->d_name, lineno);
        out[n].call = wrappers[w].call;
        out[n++].hits = 0;
      }
    }
    fclose(f);
  }
  closedir(dir);
  return n;
}

/* Runs argv[0] with `args`; returns its exit status and stores its standard output (malloc'd)
 * in *out. A child still running after CHILD_TIMEOUT_MS is killed, and the sweep fails. */
static int run_child(const char *self, char *const args[], char **out) {
  int pipe_fds[2];
  ASSERT_OK(pipe(pipe_fds));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  pid_t pid;
  int err = posix_spawn(&pid, self, &actions, NULL, args, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (err) FAIL_AT("posix_spawn(%s): %s", self, strerror(err));
  size_t len = 0, cap = 4096;
  *out = malloc(cap);
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    long elapsed_ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    struct pollfd p = {pipe_fds[0], POLLIN, 0};
    if (elapsed_ms >= CHILD_TIMEOUT_MS || poll(&p, 1, (int)(CHILD_TIMEOUT_MS - elapsed_ms)) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      FAIL_AT("a child hung for %d s: %s %s %s %s %s", CHILD_TIMEOUT_MS / 1000, args[1], args[2], args[3], args[4],
              args[5]);
    }
    if (len + 1024 > cap) *out = realloc(*out, cap *= 2);
    ssize_t r = read(pipe_fds[0], *out + len, cap - len - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
  }
  (*out)[len] = '\0';
  close(pipe_fds[0]);
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

static size_t take_census(const char *self, site_entry *out, size_t max) {
  char *const args[] = {(char *)self, (char *)"--census", NULL};
  char *text;
  int status = run_child(self, args, &text);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) FAIL_AT("the census run failed (status %#x)", status);
  size_t n = 0;
  for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
    char call[16];
    if (n == max) FAIL_AT("more than %zu sites", max);
    if (sscanf(line, "%511[^\t]\t%15s\t%ld", out[n].site, call, &out[n].hits) != 3) FAIL_AT("census line: %s", line);
    out[n++].call = call_of_name(call);
  }
  free(text);
  return n;
}

/* The census entry of source site "src/file.c:LINE" (its path ends in "/src/file.c:LINE"). */
static const site_entry *reached(const site_entry *census, size_t n, const char *source_site) {
  size_t len = strlen(source_site);
  for (size_t i = 0; i < n; i++) {
    size_t site_len = strlen(census[i].site);
    if (site_len > len && strcmp(census[i].site + site_len - len, source_site) == 0 &&
        census[i].site[site_len - len - 1] == '/')
      return &census[i];
  }
  return NULL;
}

/* A site that only a feature this build lacks reaches. */
/* The machine's first PCI function, "" where sysfs lists none. */
static char first_pci_function[64];

static void find_first_pci_function(void) {
  DIR *d = opendir("/sys/bus/pci/devices");
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.' && strlen(e->d_name) < sizeof first_pci_function &&
        (!*first_pci_function || strcmp(e->d_name, first_pci_function) < 0))
      strcpy(first_pci_function, e->d_name);
  if (d) closedir(d);
}

/* Whether sysfs gives device 0's function a NUMA node: only then do pinned buffers ask for one
 * (bounce.c's memory policy sites), and pool threads move to its CPUs (numa.c, with
 * KVIK_SETTING_NUMA_AFFINITY on). */
static int numa_node_known(void) {
  kvik_cuda_device_properties p = {.struct_size = sizeof p};
  return kvik_cuda_device_get_properties(0, &p) == 0 && p.numa_node >= 0;
}

static int needs_missing_feature(const char *source_site) {
  if (strstr(source_site, "/cuda.c:") && !*first_pci_function) return 1;
  if ((strstr(source_site, "/bounce.c:") || strstr(source_site, "/numa.c:")) && !numa_node_known())
    return 1;
  if (!kvik_io_uring_supported(NULL, 0) && (strstr(source_site, "/uring.c:") || strstr(source_site, "/staging.c:")))
    return 1;
  return !kvik_remote_supported(NULL, 0) && (strstr(source_site, "/remote.c:") || strstr(source_site, "/http.c:"));
}

typedef struct {
  long runs, injected, sites_failed;
} sweep_totals;

/* One child per fault at this site: its first, middle and last call (the middle one alone under
 * ThreadSanitizer), with each errno. */
static void sweep_site(const char *self, const site_entry *s, sweep_totals *t) {
  long middle = (s->hits + 1) / 2, all_three[3] = {1, middle, s->hits};
  const long *nths = RACE_CHECKED ? &middle : all_three;
  long injected_here = 0;
  for (int k = 0; k < (RACE_CHECKED ? 1 : 3); k++) {
    if (k > 0 && nths[k] == nths[k - 1]) continue;
    for (const int *err = errs_of[s->call]; *err; err++) {
      char nth_text[24], err_text[24];
      snprintf(nth_text, sizeof nth_text, "%ld", nths[k]);
      snprintf(err_text, sizeof err_text, "%d", *err);
      char *const args[] = {(char *)self, (char *)"--fault", (char *)call_names[s->call], (char *)s->site, nth_text, err_text, NULL};
      char *text;
      int status = run_child(self, args, &text);
      long injected = 0;
      const char *line = strstr(text, "injected ");
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !line || sscanf(line, "injected %ld", &injected) != 1)
        FAIL_AT("fault at %s (call %ld of %ld) with %s: the child failed (status %#x)", s->site, nths[k], s->hits,
                err_name(*err), status);
      free(text);
      t->runs++;
      t->injected += injected;
      injected_here += injected;
    }
  }
  if (!injected_here) FAIL_AT("%s was reached by the census but never failed", s->site);
  t->sites_failed++;
}

static int sweep(const char *self, const char *root, kvik__fault_call call) {
  static site_entry sources[MAX_SITES], census[MAX_SITES];
  size_t n_sources = scan_sources(root, sources, MAX_SITES), n_census = take_census(self, census, MAX_SITES);
  size_t in_sources = 0, missing = 0;
  for (size_t i = 0; i < n_sources; i++) {
    if (sources[i].call != call) continue;
    in_sources++;
    if (reached(census, n_census, sources[i].site) || needs_missing_feature(sources[i].site)) continue;
    fprintf(stderr, "%s: no step of the scenario reaches this %s site\n", sources[i].site, call_names[call]);
    missing++;
  }
  if (missing) FAIL_AT("%zu of %zu %s sites not reached: add a step to tests/test_fault_sweep.c", missing, in_sources,
                       call_names[call]);
  sweep_totals t = {0, 0, 0};
  for (size_t i = 0; i < n_census; i++)
    if (census[i].call == call) sweep_site(self, &census[i], &t);
  printf("fault sweep, %s: %ld of %zu sites failed (%s); %ld faults injected in %ld runs (%ld did not reach "
         "their call); every outcome right, no hang; LeakSanitizer %s\n",
         call_names[call], t.sites_failed, in_sources, RACE_CHECKED ? "middle calls" : "first, middle and last calls",
         t.injected, t.runs, t.runs - t.injected, LEAK_CHECKED ? "found no leak" : "not in this build");
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  find_first_pci_function(); /* before any thread starts: the children inherit it */
  if (*first_pci_function) setenv("FAKE_CUDA_PCI_BUS_IDS", first_pci_function, 1);
  if (argc == 2 && strcmp(argv[1], "--census") == 0) return child_census();
  if (argc == 6 && strcmp(argv[1], "--fault") == 0) return child_fault(argv[2], argv[3], atol(argv[4]), atoi(argv[5]));
  if (argc != 3) {
    fprintf(stderr, "usage: %s SOURCE_DIR CALL\n", argv[0]);
    return 2;
  }
  return sweep("/proc/self/exe", argv[1], call_of_name(argv[2]));
}
