/* See fault_shim.h. */
#include "fault_shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_FDS 4096

shim_config shim;
_Atomic long shim_direct_io_calls;
_Atomic long shim_io_calls;
_Atomic long shim_willneed_calls, shim_willneed_bytes;
_Atomic long shim_willneed_bytes_at_first_read = -1;
_Atomic long shim_writer_tid;
_Atomic int shim_many_writers;
_Atomic int shim_writes_out_of_order;
static _Atomic long write_end = -1; /* where the last target pwrite ended; -1: none yet */

static _Atomic unsigned char target_fd[MAX_FDS]; /* 1: target, 2: target with O_DIRECT */
static _Atomic long read_calls;

static int (*real_open)(const char *, int, ...);
static ssize_t (*real_pread)(int, void *, size_t, off_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static int (*real_fadvise)(int, off_t, off_t, int);
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

static void resolve_real_calls(void) {
  real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
  real_pread = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
  real_pwrite = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
  real_fadvise = (int (*)(int, off_t, off_t, int))dlsym(RTLD_NEXT, "posix_fadvise");
}
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;

void shim_reset(void) {
  shim_open_gate();
  atomic_store(&shim.eintr_every, 0);
  atomic_store(&shim.max_per_call, 0);
  atomic_store(&shim.refuse_direct_open, 0);
  atomic_store(&shim.refuse_direct_io, 0);
  atomic_store(&shim.write_budget, 0);
  atomic_store(&shim.read_fail_at, 0);
  atomic_store(&read_calls, 0);
  atomic_store(&shim_direct_io_calls, 0);
  atomic_store(&shim_io_calls, 0);
  atomic_store(&shim_willneed_calls, 0);
  atomic_store(&shim_willneed_bytes, 0);
  atomic_store(&shim_willneed_bytes_at_first_read, -1);
  atomic_store(&shim_writer_tid, 0);
  atomic_store(&shim_many_writers, 0);
  atomic_store(&shim_writes_out_of_order, 0);
  atomic_store(&write_end, -1);
}

/* Who writes, and where (see shim_writer_tid). */
static void note_write(off_t offset, ssize_t written) {
  long tid = (long)syscall(SYS_gettid), first = 0;
  if (!atomic_compare_exchange_strong(&shim_writer_tid, &first, tid) && first != tid)
    atomic_store(&shim_many_writers, 1);
  long end = atomic_exchange(&write_end, written > 0 ? (long)offset + written : -2);
  if (end != -1 && end != (long)offset) atomic_store(&shim_writes_out_of_order, 1);
}

void shim_open_gate(void) {
  pthread_mutex_lock(&gate_lock);
  atomic_store(&shim.gate_closed, 0);
  pthread_cond_broadcast(&gate_cond);
  pthread_mutex_unlock(&gate_lock);
}

static int is_target_path(const char *path) {
  int fd;
  if (strstr(path, SHIM_TARGET_MARK)) return 1;
  return sscanf(path, "/proc/self/fd/%d", &fd) == 1 && fd >= 0 && fd < MAX_FDS && atomic_load(&target_fd[fd]);
}

static int shim_open(const char *path, int flags, mode_t mode) {
  pthread_once(&resolve_once, resolve_real_calls);
  int target = is_target_path(path);
  if (target && (flags & O_DIRECT) && atomic_load(&shim.refuse_direct_open)) return errno = EINVAL, -1;
  int fd = real_open(path, flags, mode);
  if (fd >= 0 && fd < MAX_FDS) atomic_store(&target_fd[fd], target ? ((flags & O_DIRECT) ? 2 : 1) : 0);
  return fd;
}

int open(const char *path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list ap;
    va_start(ap, flags);
    mode = va_arg(ap, mode_t);
    va_end(ap);
  }
  return shim_open(path, flags, mode);
}

/* With _FORTIFY_SOURCE (the default of some distributions' compilers), open() without a mode
 * argument compiles to this. */
int __open_2(const char *path, int flags);
int __open_2(const char *path, int flags) { return shim_open(path, flags, 0); }

/* Faults common to reads and writes; returns -1 with errno set, or the (capped) count. */
static ssize_t before_io(int fd, size_t *count) {
  unsigned char kind = fd >= 0 && fd < MAX_FDS ? atomic_load(&target_fd[fd]) : 0;
  if (!kind) return 0;
  long n = atomic_fetch_add(&shim_io_calls, 1) + 1;
  int every = atomic_load(&shim.eintr_every);
  if (every && n % every == 0) return errno = EINTR, -1;
  if (kind == 2) {
    atomic_fetch_add(&shim_direct_io_calls, 1);
    if (atomic_load(&shim.refuse_direct_io)) return errno = EINVAL, -1;
  }
  long cap = atomic_load(&shim.max_per_call);
  if (cap > 0 && *count > (size_t)cap) *count = (size_t)cap;
  return 1;
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset) {
  pthread_once(&resolve_once, resolve_real_calls);
  ssize_t target = before_io(fd, &count);
  if (target < 0) return -1;
  if (target) {
    long unset = -1;
    atomic_compare_exchange_strong(&shim_willneed_bytes_at_first_read, &unset,
                                   atomic_load(&shim_willneed_bytes));
    pthread_mutex_lock(&gate_lock);
    while (atomic_load(&shim.gate_closed)) pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    int fail_at = atomic_load(&shim.read_fail_at);
    if (fail_at && atomic_fetch_add(&read_calls, 1) + 1 == fail_at) return errno = atomic_load(&shim.read_errno), -1;
  }
  return real_pread(fd, buf, count, offset);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
  pthread_once(&resolve_once, resolve_real_calls);
  ssize_t target = before_io(fd, &count);
  if (target < 0) return -1;
  if (target && atomic_load(&shim.write_budget) != 0) {
    /* Take what fits of the budget; once it is spent, writes fail. */
    long budget = atomic_load(&shim.write_budget), take;
    do {
      if (budget <= 0) return errno = atomic_load(&shim.write_errno), -1;
      take = (long)count < budget ? (long)count : budget;
    } while (!atomic_compare_exchange_weak(&shim.write_budget, &budget, budget - take == 0 ? -1 : budget - take));
    count = (size_t)take;
  }
  ssize_t written = real_pwrite(fd, buf, count, offset);
  if (target) note_write(offset, written);
  return written;
}

int posix_fadvise(int fd, off_t offset, off_t len, int advice) {
  pthread_once(&resolve_once, resolve_real_calls);
  if (advice == POSIX_FADV_WILLNEED && fd >= 0 && fd < MAX_FDS && atomic_load(&target_fd[fd])) {
    atomic_fetch_add(&shim_willneed_calls, 1);
    atomic_fetch_add(&shim_willneed_bytes, (long)len);
  }
  return real_fadvise(fd, offset, len, advice);
}
