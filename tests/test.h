/* Shared helpers of the C tests: assertions that print both values, temporary files, a seeded
 * random generator, and the exit codes ctest reads (0 pass, 1 fail, 77 skip). */
#ifndef KVIK_TEST_H
#define KVIK_TEST_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "kvik.h"

#define TEST_SKIP 77

#define FAIL_AT(...)                                                                           \
  do {                                                                                         \
    fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                            \
    fprintf(stderr, __VA_ARGS__);                                                              \
    fprintf(stderr, "\n  last kvik error: %s\n", kvik_last_error());                           \
    exit(1);                                                                                   \
  } while (0)

#define ASSERT(cond)                                                                           \
  do {                                                                                         \
    if (!(cond)) FAIL_AT("assertion failed: %s", #cond);                                       \
  } while (0)

#define ASSERT_EQ(a, b)                                                                        \
  do {                                                                                         \
    long long a_ = (long long)(a), b_ = (long long)(b);                                        \
    if (a_ != b_) FAIL_AT("%s == %s failed: %lld != %lld", #a, #b, a_, b_);                    \
  } while (0)

/* A call that must succeed: prints the kvik error name and message otherwise. */
#define ASSERT_OK(call)                                                                        \
  do {                                                                                         \
    long long rc_ = (long long)(call);                                                         \
    if (rc_ < 0) FAIL_AT("%s failed: %s (%lld)", #call, kvik_err_name((int)rc_), rc_);        \
  } while (0)

/* A call that must fail with `code`, leaving a detail message that contains `needle`. */
#define ASSERT_FAILS(call, code, needle)                                                       \
  do {                                                                                         \
    long long rc_ = (long long)(call);                                                         \
    if (rc_ != (long long)(code))                                                              \
      FAIL_AT("%s returned %lld (%s), expected %s", #call, rc_, kvik_err_name((int)rc_),       \
              kvik_err_name((int)(code)));                                                     \
    if (!strstr(kvik_last_error(), (needle)))                                                  \
      FAIL_AT("%s: message lacks \"%s\"", #call, (needle));                                    \
  } while (0)

static inline uint64_t test_rand(uint64_t *state) {
  uint64_t x = *state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *state = x;
}

/* A value in [0, n). */
static inline uint64_t test_below(uint64_t *state, uint64_t n) { return n ? test_rand(state) % n : 0; }

/* A word at a time, since under ThreadSanitizer every access is a call and tests fill hundreds of
 * MiB; a shorter fill with the same seed gives a prefix of a longer one. */
static inline void test_fill(void *buf, size_t n, uint64_t seed) {
  unsigned char *p = buf;
  uint64_t s = seed | 1;
  for (size_t i = 0; i < n; i += sizeof s) {
    uint64_t word = test_rand(&s);
    memcpy(p + i, &word, n - i < sizeof word ? n - i : sizeof word);
  }
}

/* A fresh directory under TMPDIR (or /tmp), removed by test_rmdir(). */
static inline char *test_mkdtemp(void) {
  const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  char *path = malloc(strlen(base) + 32);
  sprintf(path, "%s/kvik-test-XXXXXX", base);
  if (!mkdtemp(path)) FAIL_AT("mkdtemp(%s): %s", path, strerror(errno));
  return path;
}

static inline char *test_path(const char *dir, const char *name) {
  char *path = malloc(strlen(dir) + strlen(name) + 2);
  sprintf(path, "%s/%s", dir, name);
  return path;
}

static inline void test_rmdir(char *dir) {
  char cmd[4200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
  free(dir);
}

/* A 1 MiB tmpfs at a fresh directory, in a mount namespace of this process alone (so that it goes
 * away with the process), for tests of a full file system; NULL, saying why, where either is
 * refused. Call it before any thread starts; umount(2) and rmdir(2) it after. */
static inline char *test_mount_small_tmpfs(void) {
  if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    printf("skip: a mount namespace of our own: %s\n", strerror(errno));
    return NULL;
  }
  char *mnt = test_mkdtemp();
  if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0) {
    printf("skip: mount -t tmpfs %s: %s\n", mnt, strerror(errno));
    rmdir(mnt);
    free(mnt);
    return NULL;
  }
  return mnt;
}

/* Write n bytes with plain POSIX calls: the reference the library is compared with. */
static inline void test_write_file(const char *path, const void *data, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) FAIL_AT("open(%s): %s", path, strerror(errno));
  for (size_t done = 0; done < n;) {
    ssize_t r = pwrite(fd, (const char *)data + done, n - done, (off_t)done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) FAIL_AT("pwrite(%s): %s", path, strerror(errno));
    done += (size_t)r;
  }
  close(fd);
}

/* Read the whole file with plain POSIX calls into a new buffer; its size in *n. */
static inline unsigned char *test_read_file(const char *path, size_t *n) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) FAIL_AT("open(%s): %s", path, strerror(errno));
  struct stat st;
  fstat(fd, &st);
  *n = (size_t)st.st_size;
  unsigned char *buf = malloc(*n + 1);
  for (size_t done = 0; done < *n;) {
    ssize_t r = pread(fd, buf + done, *n - done, (off_t)done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) FAIL_AT("pread(%s): %s", path, strerror(errno));
    done += (size_t)r;
  }
  close(fd);
  return buf;
}

/* A thread that cuts a file of `bytes` bytes (`content`) to half its length, pauses 1 ms, then
 * gives it back its length and bytes, over and over until test_truncator_stop(): for reads that
 * race truncations. Such a read may return, for each byte, the file's or zero (read between an
 * extension and its rewrite): see test_first_foreign(). */
typedef struct test_truncator {
  const char *path;
  const unsigned char *content;
  size_t bytes;
  atomic_int stop;
  pthread_t thread;
} test_truncator;

static inline void *test_truncator_main(void *arg) {
  test_truncator *t = arg;
  int fd = open(t->path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) FAIL_AT("open(%s): %s", t->path, strerror(errno));
  size_t half = t->bytes / 2;
  const struct timespec pause = {0, 1000000};
  while (!atomic_load(&t->stop)) {
    if (ftruncate(fd, (off_t)half) != 0) FAIL_AT("ftruncate(%s): %s", t->path, strerror(errno));
    nanosleep(&pause, NULL);
    if (ftruncate(fd, (off_t)t->bytes) != 0) FAIL_AT("ftruncate(%s): %s", t->path, strerror(errno));
    if (pwrite(fd, t->content + half, t->bytes - half, (off_t)half) != (ssize_t)(t->bytes - half))
      FAIL_AT("pwrite(%s): %s", t->path, strerror(errno));
  }
  close(fd);
  return NULL;
}

static inline void test_truncator_start(test_truncator *t, const char *path, const unsigned char *content,
                                        size_t bytes) {
  *t = (test_truncator){path, content, bytes, 0, 0};
  if (pthread_create(&t->thread, NULL, test_truncator_main, t) != 0) FAIL_AT("pthread_create failed");
}

static inline void test_truncator_stop(test_truncator *t) {
  atomic_store(&t->stop, 1);
  pthread_join(t->thread, NULL);
}

/* Index of the first byte of `got` that is neither `ref`'s nor zero, or -1. */
static inline long long test_first_foreign(const unsigned char *got, const unsigned char *ref, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != ref[i] && got[i] != 0) return (long long)i;
  return -1;
}

/* Index of the first differing byte, or -1. */
static inline long long test_first_diff(const void *a, const void *b, size_t n) {
  if (memcmp(a, b, n) == 0) return -1; /* one call, where the loop costs a sanitizer hook per byte */
  const unsigned char *x = a, *y = b;
  for (size_t i = 0; i < n; i++)
    if (x[i] != y[i]) return (long long)i;
  return -1;
}

#define ASSERT_SAME_BYTES(a, b, n)                                                             \
  do {                                                                                         \
    long long at_ = test_first_diff((a), (b), (n));                                            \
    if (at_ >= 0) FAIL_AT("%s and %s differ at byte %lld of %zu", #a, #b, at_, (size_t)(n));  \
  } while (0)

/* With KVIK_TEST_NO_CACHESTAT set, cachestat(2) fails with ENOSYS from here on, in this thread and
 * those it starts, as on kernels before 6.5 and under seccomp filters that predate the call: the
 * library counts cached pages with mincore(2) then. Call it before the first thread starts. Exits
 * with TEST_SKIP where no seccomp filter can be installed. */
static inline void test_without_cachestat_if_asked(void) {
  if (!getenv("KVIK_TEST_NO_CACHESTAT")) return;
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 451 /* cachestat */, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog program = {(unsigned short)(sizeof code / sizeof code[0]), code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
    printf("no seccomp filter: %s\n", strerror(errno));
    exit(TEST_SKIP);
  }
  errno = 0;
  if (syscall(451, -1, NULL, NULL, 0) != -1 || errno != ENOSYS) FAIL_AT("cachestat(2) is not refused");
}

#endif
