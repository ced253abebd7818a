/* The system calls and allocations the library makes, each through one wrapper, so that:
 *  - interrupted calls (EINTR) are retried in one place;
 *  - tests can make any of them fail (issue 7). A build with KVIK_FAULT_INJECTION asks
 *    kvik__fault() before each call whether to fail it; other builds compile the question out,
 *    and each wrapper is the plain call.
 * Call the macros (kvik__open, kvik__pread, ...), not the *_at functions: the macros name the
 * call site, which tests/test_fault_sweep.c finds in the sources and fails in turn. Each returns
 * what the wrapped call returns, with errno set as it sets it.
 *
 * Calls that release (close, munmap, dlclose, free) are made directly: their failure could only
 * come from a bug, and nothing can be done about it. */
#ifndef KVIK_SRC_SYS_H
#define KVIK_SRC_SYS_H

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "kvik.h"

/* The kinds of call a fault can be injected into. */
typedef enum {
  KVIK__FAULT_OPEN,
  KVIK__FAULT_READ,   /* pread, preadv2, posix_fadvise */
  KVIK__FAULT_WRITE,  /* pwrite, write */
  KVIK__FAULT_SYNC,   /* fdatasync, sync_file_range */
  KVIK__FAULT_MMAP,   /* mmap, madvise, get_mempolicy, set_mempolicy */
  KVIK__FAULT_ALLOC,  /* malloc, calloc, realloc, strdup, strndup, posix_memalign */
  KVIK__FAULT_THREAD, /* pthread_create, sched_getaffinity, sched_setaffinity */
  KVIK__FAULT_DLOPEN,
  KVIK__FAULT_COPY,      /* process_vm_readv, process_vm_writev */
  KVIK__FAULT_URING,     /* io_uring_setup, io_uring_enter, io_uring_register */
  KVIK__FAULT_CACHESTAT, /* cachestat */
  KVIK__FAULT_WAIT,      /* futex waits */
  KVIK__FAULT_CALLS
} kvik__fault_call;

/* Injected into a read or write instead of an errno: the call moves about half the bytes. */
#define KVIK__FAULT_SHORT (-1)

#ifdef KVIK_FAULT_INJECTION
/* 0 to make the call; else the errno to fail it with, or KVIK__FAULT_SHORT. Thread-safe. */
int kvik__fault(kvik__fault_call call, const char *site);

/* The control of tests (src/fault.c), exported from fault-injection builds only. */
/* From now on, the nth call of `call` at `site` (any site when NULL) fails with `err`. */
KVIK_API void kvik__fault_arm(kvik__fault_call call, const char *site, long nth, int err);
KVIK_API void kvik__fault_disarm(void);
/* From now on, independently of the fault armed: the nth call of `call` at `site` (any site when
 * NULL) sleeps `us` microseconds, then is made as armed (kvik__fault_disarm() leaves this). */
KVIK_API void kvik__fault_delay(kvik__fault_call call, const char *site, long nth, long us);
/* Faults injected since the last kvik__fault_arm(). */
KVIK_API long kvik__fault_injected(void);
/* Every site reached since the process started, as "path/file.c:line", with the call it makes
 * and how many times it was reached. */
KVIK_API size_t kvik__fault_sites(const char **sites, kvik__fault_call *calls, long *hits,
                                  size_t max);

#define KVIK__STRINGIFY_(x) #x
#define KVIK__STRINGIFY(x) KVIK__STRINGIFY_(x)
#define KVIK__SITE __FILE__ ":" KVIK__STRINGIFY(__LINE__)
#else
#define kvik__fault(call, site) ((void)(call), (void)(site), 0)
#define KVIK__SITE NULL /* no source paths in release binaries */
#endif

/* The errno a fault sets, or 0 to go ahead. A short count is not an errno. */
static inline int kvik__fault_errno(kvik__fault_call call, const char *site) {
  int err = kvik__fault(call, site);
  return err > 0 ? err : 0;
}

static inline int kvik__open_at(const char *site, const char *path, int flags, mode_t mode) {
  int fd, err;
  do {
    err = kvik__fault_errno(KVIK__FAULT_OPEN, site);
    fd = err ? (errno = err, -1) : open(path, flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}
#define kvik__open(path, flags, mode) kvik__open_at(KVIK__SITE, path, flags, mode)

/* About half of n, in whole pages where it is large enough, as a short count of a file system. */
static inline size_t kvik__short_count(size_t n) {
  return n >= 8192 ? (n / 2) & ~(size_t)4095 : (n + 1) / 2;
}

static inline ssize_t kvik__pread_at(const char *site, int fd, void *buf, size_t n, off_t offset) {
  ssize_t r;
  do {
    int err = kvik__fault(KVIK__FAULT_READ, site);
    if (err > 0) {
      errno = err;
      r = -1;
    } else {
      r = pread(fd, buf, err == KVIK__FAULT_SHORT ? kvik__short_count(n) : n, offset);
    }
  } while (r < 0 && errno == EINTR);
  return r;
}
#define kvik__pread(fd, buf, n, offset) kvik__pread_at(KVIK__SITE, fd, buf, n, offset)

/* posix_fadvise(2), which returns its error instead of setting errno; failed as a read. */
static inline int kvik__fadvise_at(const char *site, int fd, off_t offset, off_t len, int advice) {
  int err = kvik__fault_errno(KVIK__FAULT_READ, site);
  return err ? err : posix_fadvise(fd, offset, len, advice);
}
#define kvik__fadvise(fd, offset, len, advice) kvik__fadvise_at(KVIK__SITE, fd, offset, len, advice)

static inline ssize_t kvik__pwrite_at(const char *site, int fd, const void *buf, size_t n,
                                      off_t offset) {
  ssize_t r;
  do {
    int err = kvik__fault(KVIK__FAULT_WRITE, site);
    if (err > 0) {
      errno = err;
      r = -1;
    } else {
      r = pwrite(fd, buf, err == KVIK__FAULT_SHORT ? kvik__short_count(n) : n, offset);
    }
  } while (r < 0 && errno == EINTR);
  return r;
}
#define kvik__pwrite(fd, buf, n, offset) kvik__pwrite_at(KVIK__SITE, fd, buf, n, offset)

/* preadv2(2) of one buffer with `flags` (RWF_NOWAIT: only what the page cache holds, EAGAIN when
 * that is nothing; EOPNOTSUPP where the file or kernel refuses the flag). */
static inline ssize_t kvik__preadv2_at(const char *site, int fd, void *buf, size_t n, off_t offset,
                                       int flags) {
  ssize_t r;
  do {
    int err = kvik__fault(KVIK__FAULT_READ, site);
    if (err > 0) {
      errno = err;
      r = -1;
    } else {
      struct iovec iov = {buf, err == KVIK__FAULT_SHORT ? kvik__short_count(n) : n};
      r = preadv2(fd, &iov, 1, offset, flags);
    }
  } while (r < 0 && errno == EINTR);
  return r;
}
#define kvik__preadv2(fd, buf, n, offset, flags)                                                   \
  kvik__preadv2_at(KVIK__SITE, fd, buf, n, offset, flags)

/* Copy n bytes between `theirs`, a caller's buffer, and `mine`, memory of the library: into
 * `theirs` when `to_theirs`, else out of it. The kernel makes the copy (process_vm_readv/writev(2)
 * on this process) and accesses `theirs` as read(2) and write(2) do, so a buffer that cannot be
 * written (or read) fails the call with EFAULT where memcpy would crash. Returns the bytes copied,
 * fewer than n when the error came part way (the next call gives it), or -1 with errno set:
 * ENOSYS or EPERM where the system refuses the call (a kernel without CROSS_MEMORY_ATTACH, a
 * seccomp filter). */
static inline ssize_t kvik__copy_user_at(const char *site, int to_theirs, void *theirs, void *mine,
                                         size_t n) {
  ssize_t r;
  do {
    int err = kvik__fault(KVIK__FAULT_COPY, site);
    if (err > 0) {
      errno = err;
      r = -1;
    } else {
      size_t len = err == KVIK__FAULT_SHORT ? kvik__short_count(n) : n;
      struct iovec local = {theirs, len}, remote = {mine, len};
      r = to_theirs ? process_vm_readv(getpid(), &local, 1, &remote, 1, 0)
                    : process_vm_writev(getpid(), &local, 1, &remote, 1, 0);
    }
  } while (r < 0 && errno == EINTR);
  return r;
}
#define kvik__copy_user(to_theirs, theirs, mine, n)                                                \
  kvik__copy_user_at(KVIK__SITE, to_theirs, theirs, mine, n)

/* write(2), for descriptors opened with O_APPEND: the kernel places each call at the end. */
static inline ssize_t kvik__write_at(const char *site, int fd, const void *buf, size_t n) {
  ssize_t r;
  do {
    int err = kvik__fault(KVIK__FAULT_WRITE, site);
    if (err > 0) {
      errno = err;
      r = -1;
    } else {
      r = write(fd, buf, err == KVIK__FAULT_SHORT ? kvik__short_count(n) : n);
    }
  } while (r < 0 && errno == EINTR);
  return r;
}
#define kvik__write(fd, buf, n) kvik__write_at(KVIK__SITE, fd, buf, n)

/* The result of an io_uring read or write as the library takes it: a fault turns it into -errno,
 * or into a short count (the kernel moved all the bytes all the same; the library moves the rest
 * again). */
static inline ssize_t kvik__ring_result_at(const char *site, kvik__fault_call call, ssize_t res) {
  int err = kvik__fault(call, site);
  if (err > 0) return -err;
  return err == KVIK__FAULT_SHORT && res > 0 ? (ssize_t)kvik__short_count((size_t)res) : res;
}
#define kvik__ring_read_result(res) kvik__ring_result_at(KVIK__SITE, KVIK__FAULT_READ, res)
#define kvik__ring_write_result(res) kvik__ring_result_at(KVIK__SITE, KVIK__FAULT_WRITE, res)

static inline int kvik__fdatasync_at(const char *site, int fd) {
  int r, err;
  do {
    err = kvik__fault_errno(KVIK__FAULT_SYNC, site);
    r = err ? (errno = err, -1) : fdatasync(fd);
  } while (r < 0 && errno == EINTR);
  return r;
}
#define kvik__fdatasync(fd) kvik__fdatasync_at(KVIK__SITE, fd)

static inline int kvik__sync_file_range_at(const char *site, int fd, off_t offset, off_t len,
                                           unsigned flags) {
  int r, err;
  do {
    err = kvik__fault_errno(KVIK__FAULT_SYNC, site);
    r = err ? (errno = err, -1) : sync_file_range(fd, offset, len, flags);
  } while (r < 0 && errno == EINTR);
  return r;
}
#define kvik__sync_file_range(fd, offset, len, flags)                                              \
  kvik__sync_file_range_at(KVIK__SITE, fd, offset, len, flags)

static inline void *kvik__mmap_at(const char *site, size_t len, int prot, int flags, int fd,
                                  off_t offset) {
  int err = kvik__fault_errno(KVIK__FAULT_MMAP, site);
  return err ? (errno = err, MAP_FAILED) : mmap(NULL, len, prot, flags, fd, offset);
}
#define kvik__mmap(len, prot, flags, fd, offset)                                                   \
  kvik__mmap_at(KVIK__SITE, len, prot, flags, fd, offset)

static inline int kvik__madvise_at(const char *site, void *addr, size_t len, int advice) {
  int err = kvik__fault_errno(KVIK__FAULT_MMAP, site);
  return err ? (errno = err, -1) : madvise(addr, len, advice);
}
#define kvik__madvise(addr, len, advice) kvik__madvise_at(KVIK__SITE, addr, len, advice)

/* Allocations fail as malloc does: NULL and ENOMEM, whatever the fault's errno. */
static inline int kvik__alloc_fails(const char *site) {
  if (!kvik__fault_errno(KVIK__FAULT_ALLOC, site)) return 0;
  errno = ENOMEM;
  return 1;
}
#define kvik__malloc(n) (kvik__alloc_fails(KVIK__SITE) ? NULL : malloc(n))
#define kvik__calloc(count, n) (kvik__alloc_fails(KVIK__SITE) ? NULL : calloc(count, n))
#define kvik__realloc(p, n) (kvik__alloc_fails(KVIK__SITE) ? NULL : realloc(p, n))
#define kvik__strdup(s) (kvik__alloc_fails(KVIK__SITE) ? NULL : strdup(s))
#define kvik__strndup(s, n) (kvik__alloc_fails(KVIK__SITE) ? NULL : strndup(s, n))
#define kvik__posix_memalign(p, alignment, n)                                                      \
  (kvik__alloc_fails(KVIK__SITE) ? ENOMEM : posix_memalign(p, alignment, n))

static inline int kvik__pthread_create_at(const char *site, pthread_t *thread,
                                          void *(*start)(void *), void *arg) {
  int err = kvik__fault_errno(KVIK__FAULT_THREAD, site);
  return err ? err : pthread_create(thread, NULL, start, arg);
}
#define kvik__pthread_create(thread, start, arg)                                                   \
  kvik__pthread_create_at(KVIK__SITE, thread, start, arg)

/* The calling thread's CPUs: sched_getaffinity(2), sched_setaffinity(2). */
static inline int kvik__sched_getaffinity_at(const char *site, cpu_set_t *cpus) {
  int err = kvik__fault_errno(KVIK__FAULT_THREAD, site);
  return err ? (errno = err, -1) : sched_getaffinity(0, sizeof *cpus, cpus);
}
#define kvik__sched_getaffinity(cpus) kvik__sched_getaffinity_at(KVIK__SITE, cpus)

static inline int kvik__sched_setaffinity_at(const char *site, const cpu_set_t *cpus) {
  int err = kvik__fault_errno(KVIK__FAULT_THREAD, site);
  return err ? (errno = err, -1) : sched_setaffinity(0, sizeof *cpus, cpus);
}
#define kvik__sched_setaffinity(cpus) kvik__sched_setaffinity_at(KVIK__SITE, cpus)

/* Sleep `ns` nanoseconds (less where a signal interrupts it: callers poll). Not a fault site:
 * a sleep that fails only ends early. */
static inline void kvik__pause_ns(long ns) {
  struct timespec t = {ns / 1000000000, ns % 1000000000};
  nanosleep(&t, NULL);
}

/* ---- system calls that libc has no function for, made through syscall(2) ------------------- */

/* io_uring(7). io_uring_enter() is not retried when interrupted: a wait that a signal ends returns
 * -1 with EINTR, and its caller decides whether to wait again (its deadline may have passed). */
struct io_uring_params;

static inline int kvik__io_uring_setup_at(const char *site, unsigned entries,
                                          struct io_uring_params *params) {
  long r;
  do {
    int err = kvik__fault_errno(KVIK__FAULT_URING, site);
    r = err ? (errno = err, -1) : syscall(__NR_io_uring_setup, entries, params);
  } while (r < 0 && errno == EINTR);
  return (int)r;
}
#define kvik__io_uring_setup(entries, params) kvik__io_uring_setup_at(KVIK__SITE, entries, params)

static inline int kvik__io_uring_enter_at(const char *site, int fd, unsigned to_submit,
                                          unsigned min_complete, unsigned flags, void *arg,
                                          size_t arg_len) {
  int err = kvik__fault_errno(KVIK__FAULT_URING, site);
  if (err) return errno = err, -1;
  return (int)syscall(__NR_io_uring_enter, fd, to_submit, min_complete, flags, arg, arg_len);
}
#define kvik__io_uring_enter(fd, to_submit, min_complete, flags, arg, arg_len)                     \
  kvik__io_uring_enter_at(KVIK__SITE, fd, to_submit, min_complete, flags, arg, arg_len)

static inline int kvik__io_uring_register_at(const char *site, int fd, unsigned opcode, void *arg,
                                             unsigned nr_args) {
  long r;
  do {
    int err = kvik__fault_errno(KVIK__FAULT_URING, site);
    r = err ? (errno = err, -1) : syscall(__NR_io_uring_register, fd, opcode, arg, nr_args);
  } while (r < 0 && errno == EINTR);
  return (int)r;
}
#define kvik__io_uring_register(fd, opcode, arg, nr_args)                                          \
  kvik__io_uring_register_at(KVIK__SITE, fd, opcode, arg, nr_args)

/* cachestat(2) (Linux 6.5): how many pages of [range->off, range->off + range->len) of `fd` the
 * page cache holds. Kernels before it fail with ENOSYS; seccomp filters that predate it with
 * ENOSYS or EPERM. */
#ifndef SYS_cachestat
#define SYS_cachestat 451 /* the same on every architecture; older headers lack it */
#endif
typedef struct kvik__cachestat_range {
  uint64_t off, len;
} kvik__cachestat_range;
typedef struct kvik__cachestat_counts {
  uint64_t cached, dirty, writeback, evicted, recently_evicted;
} kvik__cachestat_counts;

static inline int kvik__cachestat_at(const char *site, int fd, kvik__cachestat_range *range,
                                     kvik__cachestat_counts *counts) {
  long r;
  do {
    int err = kvik__fault_errno(KVIK__FAULT_CACHESTAT, site);
    r = err ? (errno = err, -1) : syscall(SYS_cachestat, fd, range, counts, 0);
  } while (r < 0 && errno == EINTR);
  return (int)r;
}
#define kvik__cachestat(fd, range, counts) kvik__cachestat_at(KVIK__SITE, fd, range, counts)

/* get_mempolicy(2) and set_mempolicy(2): the calling thread's NUMA memory policy, which the pages
 * it allocates follow (glibc has no wrappers; libnuma, which kvik does without, has). Masks cover
 * nodes 0 to KVIK__NUMA_NODES - 1; the kernel takes one bit fewer than the count it is given. */
#define KVIK__MPOL_PREFERRED 1
#define KVIK__NUMA_NODES 1024
#define KVIK__MASK_BITS (8 * sizeof(unsigned long))
typedef struct kvik__nodemask {
  unsigned long bits[KVIK__NUMA_NODES / KVIK__MASK_BITS];
} kvik__nodemask;

static inline int kvik__get_mempolicy_at(const char *site, int *mode, kvik__nodemask *mask) {
  int err = kvik__fault_errno(KVIK__FAULT_MMAP, site);
  return err ? (errno = err, -1)
             : (int)syscall(SYS_get_mempolicy, mode, mask->bits, KVIK__NUMA_NODES + 1, NULL, 0);
}
#define kvik__get_mempolicy(mode, mask) kvik__get_mempolicy_at(KVIK__SITE, mode, mask)

/* Prefer node `node` (0 to KVIK__NUMA_NODES - 1) for the pages this thread allocates from now
 * on, where it has room (MPOL_PREFERRED: others where it has none). */
static inline int kvik__prefer_node_at(const char *site, int node) {
  kvik__nodemask mask = {{0}};
  mask.bits[node / KVIK__MASK_BITS] = 1UL << (node % KVIK__MASK_BITS);
  int err = kvik__fault_errno(KVIK__FAULT_MMAP, site);
  return err ? (errno = err, -1)
             : (int)syscall(SYS_set_mempolicy, KVIK__MPOL_PREFERRED, mask.bits,
                            KVIK__NUMA_NODES + 1);
}
#define kvik__prefer_node(node) kvik__prefer_node_at(KVIK__SITE, node)

/* Put back a policy from kvik__get_mempolicy(). Not a fault site: it undoes kvik__prefer_node(),
 * and fails only for a bug. */
static inline void kvik__restore_mempolicy(int mode, const kvik__nodemask *mask) {
  syscall(SYS_set_mempolicy, mode, mask->bits, KVIK__NUMA_NODES + 1);
}

/* futex(2) */

/* Sleep while the 32-bit word at `word` holds `expected`, until kvik__futex_wake() on it
 * (futex(2), FUTEX_WAIT_PRIVATE: a word of this process). Returns 0, or -1 with errno set: EAGAIN
 * when the word no longer held `expected`, EINTR on a signal. A wait may also end for no reason,
 * so callers check the word again, in a loop; a fault makes the wait end early, as those do. */
static inline int kvik__futex_wait_at(const char *site, _Atomic uint32_t *word, uint32_t expected) {
  int err = kvik__fault_errno(KVIK__FAULT_WAIT, site);
  return err ? (errno = err, -1)
             : (int)syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}
#define kvik__futex_wait(word, expected) kvik__futex_wait_at(KVIK__SITE, word, expected)

/* Wake at most `n` threads waiting on `word`; returns how many it woke. Not a fault site: waking
 * a word of this process fails only for a bad address, a bug, and a wake that did not happen
 * would leave its waiter asleep for good. */
static inline int kvik__futex_wake(_Atomic uint32_t *word, int n) {
  return (int)syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* dlerror() says nothing after an injected failure; callers report a generic reason then. */
static inline void *kvik__dlopen_at(const char *site, const char *file, int flags) {
  return kvik__fault_errno(KVIK__FAULT_DLOPEN, site) ? NULL : dlopen(file, flags);
}
#define kvik__dlopen(file, flags) kvik__dlopen_at(KVIK__SITE, file, flags)

/* Now on CLOCK_MONOTONIC, in nanoseconds: for measured rates (the vDSO answers, no fault). */
static inline uint64_t kvik__now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#endif
