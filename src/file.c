/* File handles and their parallel host IO. */
#define _GNU_SOURCE
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "append.h"
#include "device_io.h"
#include "error.h"
#include "file.h"
#include "gds.h"
#include "init.h"
#include "page_cache.h"
#include "posix_io.h"
#include "request.h"
#include "settings.h"
#include "stream_io.h"
#include "sys.h"
#include "zero_copy.h"

/* States of kvik_file.direct_fd besides an open descriptor. */
#define DIRECT_NOT_TRIED (-2)
#define DIRECT_UNAVAILABLE (-1)

struct kvik_file {
  kvik__source source; /* requests run against it; close waits for them */
  int fd;
  _Atomic int direct_fd;        /* opened on first direct use; see direct_descriptor() */
  _Atomic int direct_refused;   /* the file system refused O_DIRECT IO on it */
  _Atomic int direct_choice[2]; /* per kvik__op: -1 (the setting), 0 or 1: set_direct_io() */
  int access;                   /* O_RDONLY, O_WRONLY or O_RDWR */
  int append;                   /* fd has O_APPEND: the kernel places every write at the end */
  kvik__append_file append_to;  /* an append handle's file */
  kvik__gds_file gds;
  kvik__zc_file zc;
  kvik__write_behind behind;
  char path[];
};

static int file_transfer(void *self, kvik__op op, char *buf, size_t size, int64_t offset,
                         size_t *done);
static int file_cold(void *self, int64_t offset, size_t size);
static void file_announce(void *self, int64_t offset, size_t size);

/* ---- open and close ------------------------------------------------------------------- */

typedef struct {
  const char *text;
  int flags;
} flag_string;

static const flag_string flag_strings[] = {
    {"r", O_RDONLY},
    {"r+", O_RDWR},
    {"w", O_WRONLY | O_CREAT | O_TRUNC},
    {"w+", O_RDWR | O_CREAT | O_TRUNC},
    {"a", O_WRONLY | O_CREAT | O_APPEND},
    {"a+", O_RDWR | O_CREAT | O_APPEND},
};

static const flag_string *lookup_flags(const char *text) {
  for (size_t i = 0; i < sizeof flag_strings / sizeof flag_strings[0]; i++)
    if (strcmp(flag_strings[i].text, text) == 0) return &flag_strings[i];
  return NULL;
}

static int64_t size_of_fd(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return -errno;
  if (!S_ISBLK(st.st_mode)) return st.st_size;
  off_t end = lseek(fd, 0, SEEK_END);
  return end < 0 ? -errno : end;
}

int kvik_file_open(const char *path, const char *flags, unsigned mode, kvik_file **file) {
  if (file) *file = NULL;
  if (!path || !flags || !file)
    return kvik__fail(-EINVAL, "kvik_file_open: NULL %s",
                      !path    ? "path"
                      : !flags ? "flags"
                               : "output handle");
  const flag_string *fs = lookup_flags(flags);
  if (!fs)
    return kvik__fail(
        -EINVAL, "kvik_file_open(\"%s\", \"%s\"): unknown flags (expected r, r+, w, w+, a or a+)",
        path, flags);
  int rc = kvik__init();
  if (rc < 0) return rc;
  size_t path_len = strlen(path);
  kvik_file *f = kvik__calloc(1, sizeof *f + path_len + 1);
  if (!f) return kvik__fail(-ENOMEM, "kvik_file_open(\"%s\", \"%s\"): out of memory", path, flags);
  memcpy(f->path, path, path_len + 1);
  f->fd = kvik__open_for_io(path, fs->flags | O_CLOEXEC, (mode_t)mode);
  if (f->fd < 0) {
    rc = kvik__fail_errno(errno, "kvik_file_open(\"%s\", \"%s\")", path, flags);
    free(f);
    return rc;
  }
  f->append = (fs->flags & O_APPEND) != 0;
  struct stat st; /* which file an append handle's appends take turns on (append.h) */
  if (f->append && fstat(f->fd, &st) != 0)
    rc = kvik__fail_errno(errno, "kvik_file_open(\"%s\", \"%s\"): fstat", path, flags);
  else if (f->append) f->append_to = (kvik__append_file){st.st_dev, st.st_ino};
  if (rc == 0)
    rc = kvik__gds_open(&f->gds, "kvik_file_open", flags, f->path, f->fd, fs->flags & O_ACCMODE);
  if (rc < 0) {
    close(f->fd);
    free(f);
    return rc;
  }
  atomic_init(&f->direct_fd, DIRECT_NOT_TRIED);
  atomic_init(&f->direct_refused, 0);
  atomic_init(&f->direct_choice[KVIK__READ], -1);
  atomic_init(&f->direct_choice[KVIK__WRITE], -1);
  f->access = fs->flags & O_ACCMODE;
  kvik__zc_init(&f->zc, f->fd);
  kvik__zc_file *zc = f->access == O_WRONLY ? NULL : &f->zc; /* a mapping needs read access */
  const kvik__append_file *append_to = f->append ? &f->append_to : NULL;
  f->source = (kvik__source){.transfer = file_transfer,
                             .self = f,
                             .append = append_to,
                             .zc = zc,
                             .gds = &f->gds,
                             .name = f->path,
                             .backend = KVIK_IO_POSIX,
                             .cold = file_cold,
                             .announce = file_announce};
  *file = f;
  return 0;
}

int kvik_file_close(kvik_file *file) {
  if (!file) return kvik__fail(-EINVAL, "kvik_file_close: NULL handle");
  if (kvik__owner_close(&file->source.owner) < 0)
    return kvik__fail(-EBADF, "kvik_file_close(\"%s\"): already closed", file->path);
  int rc = 0;
  kvik__gds_close(&file->gds);
  kvik__zc_close(&file->zc);
  int direct = atomic_load(&file->direct_fd);
  if (direct >= 0) close(direct);
  if (close(file->fd) != 0 && errno != EINTR)
    rc = kvik__fail_errno(errno, "kvik_file_close(\"%s\")", file->path);
  return rc;
}

void kvik_file_free(kvik_file *file) {
  if (!file) return;
  if (!kvik__owner_is_closed(&file->source.owner)) kvik_file_close(file);
  free(file);
}

int kvik_file_closed(const kvik_file *file) {
  return file ? kvik__owner_is_closed(&file->source.owner) : 1;
}

static int closed_error(const kvik_file *file, const char *fn) {
  if (!file) return kvik__fail(-EINVAL, "%s: NULL handle", fn);
  return kvik__fail(-EBADF, "%s(\"%s\"): file is closed", fn, file->path);
}

int kvik_file_fd(const kvik_file *file) {
  if (!file || kvik__owner_is_closed(&file->source.owner))
    return closed_error(file, "kvik_file_fd");
  return file->fd;
}

/* The queries below hold the handle while they use its descriptor: a concurrent close waits for
 * them instead of closing the descriptor, whose number another open may then reuse, under them.
 * Holding it leaves the handle logically const. */
static int hold(const kvik_file *file, const char *fn) {
  if (!file || kvik__owner_acquire(&((kvik_file *)file)->source.owner) < 0)
    return closed_error(file, fn);
  return 0;
}

static void let_go(const kvik_file *file) {
  kvik__owner_release(&((kvik_file *)file)->source.owner);
}

int kvik_file_open_flags(const kvik_file *file) {
  int rc = hold(file, "kvik_file_open_flags");
  if (rc < 0) return rc;
  int flags = fcntl(file->fd, F_GETFL);
  if (flags < 0) rc = kvik__fail_errno(errno, "kvik_file_open_flags(\"%s\")", file->path);
  let_go(file);
  return rc < 0 ? rc : flags;
}

int64_t kvik_file_size(const kvik_file *file) {
  int rc = hold(file, "kvik_file_size");
  if (rc < 0) return rc;
  int64_t size = size_of_fd(file->fd);
  if (size < 0) size = kvik__fail_errno((int)-size, "kvik_file_size(\"%s\")", file->path);
  let_go(file);
  return size;
}

/* ---- IO ------------------------------------------------------------------------------- */

/* The O_DIRECT twin of the descriptor, opened on first use. It is reopened through /proc so that
 * it is the same file even if the path was renamed or removed since kvik_file_open(). Tasks that
 * start together may each open one; the first to publish wins and the others close theirs, which
 * keeps this path free of locks (and so safe across fork()). */
static int direct_descriptor(kvik_file *file) {
  int fd = atomic_load(&file->direct_fd);
  if (fd != DIRECT_NOT_TRIED) return fd;
  char proc_path[64];
  snprintf(proc_path, sizeof proc_path, "/proc/self/fd/%d", file->fd);
  int opened = kvik__open(proc_path, file->access | O_DIRECT | O_CLOEXEC, 0);
  if (opened < 0) opened = DIRECT_UNAVAILABLE;
  int expected = DIRECT_NOT_TRIED;
  if (atomic_compare_exchange_strong(&file->direct_fd, &expected, opened)) return opened;
  if (opened >= 0) close(opened);
  return expected;
}

/* Whether op may use O_DIRECT on this handle: its own choice, else the setting. */
static int direct_chosen(kvik_file *file, kvik__op op) {
  int choice = atomic_load_explicit(&file->direct_choice[op], memory_order_relaxed);
  if (choice >= 0) return choice;
  return (int)kvik__setting(op == KVIK__READ ? KVIK_SETTING_AUTO_DIRECT_IO_READ
                                             : KVIK_SETTING_AUTO_DIRECT_IO_WRITE);
}

/* The O_DIRECT descriptor to use for op, or -1 for none. */
static int direct_for(kvik_file *file, kvik__op op) {
  if (!direct_chosen(file, op) || atomic_load(&file->direct_refused)) return -1;
  return direct_descriptor(file);
}

int kvik_file_set_direct_io(kvik_file *file, int reads, int writes) {
  static const char fn[] = "kvik_file_set_direct_io";
  if (!file) return kvik__fail(-EINVAL, "%s: NULL handle", fn);
  if (reads < -1 || reads > 1 || writes < -1 || writes > 1)
    return kvik__fail(-EINVAL, "%s(\"%s\"): reads %d, writes %d: each is -1, 0 or 1", fn,
                      file->path, reads, writes);
  if (kvik_file_closed(file)) return closed_error(file, fn);
  atomic_store(&file->direct_choice[KVIK__READ], reads);
  atomic_store(&file->direct_choice[KVIK__WRITE], writes);
  return 0;
}

/* The hook of kvik__posix_io(): a task's middle is megabytes, worth a mincore(2) sample where
 * cachestat(2) cannot tell. */
static int cached_middle(int fd, int64_t offset, size_t len) {
  return kvik__page_cache_mostly(fd, offset, len, 1);
}

/* The source's hook (kvik__source.cold), for ranges of many MiB: one of COLD_SAMPLES samples of
 * COLD_SAMPLE bytes spread over the range has less than 9 pages in 10 in the page cache. Samples
 * bound the cost at any size, where cachestat(2) walks every page of its range. */
#define COLD_SAMPLES 4
#define COLD_SAMPLE ((size_t)1 << 20)

static int file_cold(void *self, int64_t offset, size_t size) {
  int fd = ((kvik_file *)self)->fd;
  assert(size >= COLD_SAMPLE);
  for (size_t i = 0; i < COLD_SAMPLES; i++) {
    int64_t at = offset + (int64_t)((size - COLD_SAMPLE) / (COLD_SAMPLES - 1) * i);
    if (!kvik__page_cache_mostly(fd, at, COLD_SAMPLE, 1)) return 1;
  }
  return 0;
}

/* The source's hook (kvik__source.announce): the range's missing pages asked of the kernel,
 * unless the handle reads with O_DIRECT, which would then find them cached and read them through
 * the page cache. */
static void file_announce(void *self, int64_t offset, size_t size) {
  kvik_file *file = self;
  if (direct_for(file, KVIK__READ) >= 0) return;
  kvik__posix_target target = {file->fd, -1, file->path, cached_middle, NULL};
  kvik__posix_announce(&target, offset, size);
}

/* An append handle's writes go through its O_APPEND descriptor, in the page cache, where the
 * kernel places them (kvik__posix_append): `offset` is not used. */
static int file_transfer(void *self, kvik__op op, char *buf, size_t size, int64_t offset,
                         size_t *done) {
  kvik_file *file = self;
  if (file->append && op == KVIK__WRITE) {
    kvik__posix_target target = {file->fd, -1, file->path, NULL, NULL};
    return kvik__posix_append(&target, buf, size, done);
  }
  kvik__posix_target target = {file->fd, direct_for(file, op), file->path, cached_middle,
                               &file->behind};
  int refused = 0;
  kvik__posix_range range = {.op = op, .buf = buf, .size = size, .offset = offset};
  int rc = kvik__posix_io(&target, &range, done, &refused);
  /* The file system opens with O_DIRECT but refuses its IO: stop trying for this file. The
   * descriptor stays open until close, as other tasks may be using it right now. */
  if (refused) atomic_store(&file->direct_refused, 1);
  return rc;
}

/* ---- what io_uring needs (uring.h) ------------------------------------------------------- */

int kvik__file_access(const kvik_file *file) {
  return file->access | (file->append ? O_APPEND : 0);
}

int kvik__file_hold(kvik_file *file) {
  return kvik__owner_acquire(&file->source.owner) < 0 ? -EBADF : file->fd;
}

void kvik__file_let_go(kvik_file *file) { let_go(file); }

int kvik__file_hold_access(kvik_file *file, int *access) {
  int fd = kvik__file_hold(file);
  if (fd >= 0) *access = kvik__file_access(file);
  return fd;
}

int kvik__file_ring_fd(kvik_file *file, kvik__op op, int buf_aligned, size_t size, int64_t offset,
                       int *direct) {
  *direct = 0;
  if (!buf_aligned || !kvik__direct_aligned(size) || !kvik__direct_aligned((uintptr_t)offset) ||
      size == 0)
    return file->fd;
  kvik__posix_target target = {file->fd, direct_for(file, op), file->path, NULL, NULL};
  int fd = target.direct_fd;
  /* A read the page cache holds goes buffered, as in kvik__posix_io(), asked with cachestat(2)
   * alone: a mapping for mincore(2) would cost a small read more than the read. */
  if (fd >= 0 && op == KVIK__READ &&
      (kvik__direct_readable(&target, offset, size) < size ||
       kvik__page_cache_mostly(file->fd, offset, size, 0)))
    fd = -1;
  *direct = fd >= 0;
  return fd >= 0 ? fd : file->fd;
}

int kvik__file_transfer(kvik_file *file, kvik__op op, char *buf, size_t size, int64_t offset,
                        size_t *done) {
  *done = 0;
  if (kvik__owner_acquire(&file->source.owner) < 0)
    return kvik__fail(-EBADF, "kvik_batch(\"%s\"): file closed with operations in flight",
                      file->path);
  int rc = file_transfer(file, op, buf, size, offset, done);
  let_go(file);
  return rc;
}

/* Whether the kernel serialises this handle's writes (kvik__request.serial_writes): each
 * buffered write to a file takes its inode lock, so that threads writing one file take turns.
 * A handle that may write with O_DIRECT (direct_chosen()) keeps its writes in parallel tasks,
 * as the kernel may run those side by side. */
static int writes_serialise(kvik_file *file) {
  return !direct_chosen(file, KVIK__WRITE) || atomic_load(&file->direct_refused);
}

/* The checks only a file needs; kvik__request checks the rest. `fn` is the public function. */
static int check_access(const char *fn, kvik_file *file, kvik__op op) {
  if (!file) return kvik__fail(-EINVAL, "%s: NULL handle", fn);
  int forbidding_mode = op == KVIK__READ ? O_WRONLY : O_RDONLY;
  if (file->access == forbidding_mode)
    return kvik__fail(-EBADF, "%s(\"%s\"): file not opened for %s", fn, file->path,
                      op == KVIK__READ ? "reading" : "writing");
  return 0;
}

/* *req: a request of `fn` for `size` bytes at `offset` of `file`, in tasks of the setting's size.
 * A write's buffer is only read from: the cast lets reads and writes share one request. */
static void file_request(kvik__request *req, const char *fn, kvik_file *file, kvik__op op,
                         const void *buf, size_t size, int64_t offset) {
  *req = (kvik__request){.fn = fn,
                         .source = &file->source,
                         .op = op,
                         .buf = (char *)buf,
                         .size = size,
                         .offset = offset};
}

/* The request, in *req, of a call of `fn` that the monitors count (stats.h), begun at `start`
 * (kvik__stats_begin()). Returns 0, or the error of a file that refuses the call, which then
 * counts as failed. The request and its count are built in place, field by field: built on the
 * stack and copied, they cost store-forwarding stalls worth a third of what kvik adds to a 4 KiB
 * read. */
static int counted_request(const char *fn, kvik_file *file, kvik__op op, const void *buf,
                           size_t size, int64_t offset, int64_t start, kvik__request *req) {
  int rc = check_access(fn, file, op);
  if (rc < 0) {
    kvik__stats_op refused = {start, KVIK_IO_POSIX, op, size};
    return kvik__stats_refuse(&refused, rc);
  }
  file_request(req, fn, file, op, buf, size, offset);
  req->stats.start_ns = start;
  req->stats.backend = KVIK_IO_POSIX;
  req->stats.op = op;
  req->stats.requested = size;
  return 0;
}

static int pread_request(kvik_file *file, void *buf, size_t size, int64_t file_offset,
                         size_t task_size, int pooled, kvik_future **future) {
  if (future) *future = NULL;
  kvik__request req;
  int rc = counted_request("kvik_file_pread", file, KVIK__READ, buf, size, file_offset,
                           kvik__stats_begin(), &req);
  if (rc < 0) return rc;
  req.task_size = task_size;
  req.pooled = (unsigned char)pooled;
  return kvik__request_start(&req, 0, future);
}

int kvik_file_pread(kvik_file *file, void *buf, size_t size, int64_t file_offset, size_t task_size,
                    kvik_future **future) {
  return pread_request(file, buf, size, file_offset, task_size, 0, future);
}

int kvik__file_pread_pooled(kvik_file *file, void *buf, size_t size, int64_t file_offset,
                            kvik_future **future) {
  return pread_request(file, buf, size, file_offset, 0, 1, future);
}

int kvik_file_pwrite(kvik_file *file, const void *buf, size_t size, int64_t file_offset,
                     size_t task_size, kvik_future **future) {
  if (future) *future = NULL;
  kvik__request req;
  int rc = counted_request("kvik_file_pwrite", file, KVIK__WRITE, buf, size, file_offset,
                           kvik__stats_begin(), &req);
  if (rc < 0) return rc;
  req.task_size = task_size;
  req.serial_writes = (unsigned char)writes_serialise(file);
  return kvik__request_start(&req, 0, future);
}

/* The largest blocking read or write tried as host memory before its buffer is classified
 * (quick()). Classifying costs more than the rest of a small request's bookkeeping: a walk of the
 * loaded objects to learn whether libcuda is there, and with CUDA in the process a driver call.
 * Most small requests are of host memory; device memory that the CPU cannot touch fails their
 * first system call with EFAULT before a byte moves, and they then go the device's way. Managed
 * memory, which the CPU may touch, is read or written through the CPU up to this size, a few
 * dozen pages, as cheap as the copy through a bounce buffer it would otherwise take. */
#define QUICK_MAX ((size_t)256 << 10)

/* A blocking request that kvik__request_run() would serve as one buffered transfer of host memory
 * on this thread, served by its system calls alone: no classification of the buffer, no future.
 * Returns 1 with *moved set where it ended the request (the bytes moved, fewer where a read
 * reached the end of the file, or its error with a message), counted by the monitors from
 * `start`; 0 where the request must go the full way: where the first system call failed with
 * EFAULT before a byte moved (device memory), and without trying, for a handle that refuses the
 * call, O_DIRECT chosen for it, an append, a request the pool would serve or that
 * kvik__request_check_args() refuses. The calling thread has no deferred device reads to settle
 * first, unlike a pool thread (run_task()). Inlined into its two callers, where `op` is known:
 * a quarter fewer instructions a 4 KiB read. */
__attribute__((always_inline)) static inline int quick(kvik_file *file, kvik__op op, char *buf,
                                                       size_t size, int64_t offset, int64_t start,
                                                       ssize_t *moved) {
  if (!file || file->access == (op == KVIK__READ ? O_WRONLY : O_RDONLY) || size > QUICK_MAX ||
      (uint64_t)offset > (uint64_t)INT64_MAX - size || (file->append && op == KVIK__WRITE) ||
      direct_chosen(file, op) || size > (size_t)kvik__setting(KVIK_SETTING_TASK_SIZE))
    return 0;
  if (kvik__owner_acquire(&file->source.owner) < 0) return 0;
  size_t done;
  kvik__posix_range range = {op, buf, size, offset};
  int rc = kvik__posix_move(file->fd, &range, &done);
  kvik__owner_release(&file->source.owner);
  kvik__stats_op counted = {start, KVIK_IO_POSIX, op, size};
  if (rc == 0 && (done == size || op == KVIK__READ)) { /* a read may end with the file */
    kvik__stats_end(&counted, done, 0);
    *moved = (ssize_t)done;
    return 1;
  }
  if (rc == -EFAULT && done == 0) return 0;
  kvik__posix_target target = {file->fd, -1, file->path, NULL, NULL};
  rc = kvik__posix_report(&target, &range, done, rc);
  kvik__stats_end(&counted, done, 1);
  *moved = kvik__request_failed(rc, done, size);
  return 1;
}

/* kvik_file_read and kvik_file_write where quick() did not serve them, counted from `start`. Not
 * inlined: the request on its stack would give the callers a frame to build on every call. */
__attribute__((noinline)) static ssize_t run_blocking(const char *fn, kvik_file *file, kvik__op op,
                                                      const void *buf, size_t size, int64_t offset,
                                                      int64_t start) {
  kvik__request req;
  int rc = counted_request(fn, file, op, buf, size, offset, start, &req);
  if (rc < 0) return rc;
  if (op == KVIK__WRITE) req.serial_writes = (unsigned char)writes_serialise(file);
  return kvik__request_run(&req);
}

ssize_t kvik_file_read(kvik_file *file, void *buf, size_t size, int64_t file_offset) {
  int64_t start = kvik__stats_begin();
  ssize_t moved;
  if (quick(file, KVIK__READ, buf, size, file_offset, start, &moved)) return moved;
  return run_blocking("kvik_file_read", file, KVIK__READ, buf, size, file_offset, start);
}

ssize_t kvik_file_write(kvik_file *file, const void *buf, size_t size, int64_t file_offset) {
  int64_t start = kvik__stats_begin();
  ssize_t moved;
  if (quick(file, KVIK__WRITE, (char *)buf, size, file_offset, start, &moved)) return moved;
  return run_blocking("kvik_file_write", file, KVIK__WRITE, buf, size, file_offset, start);
}

int kvik_file_read_async(kvik_file *file, void *buf, size_t size, int64_t file_offset, void *stream,
                         kvik_future **future) {
  static const char fn[] = "kvik_file_read_async";
  if (future) *future = NULL;
  int rc = check_access(fn, file, KVIK__READ);
  if (rc < 0) return rc;
  kvik__request req;
  file_request(&req, fn, file, KVIK__READ, buf, size, file_offset);
  return kvik__stream_request_start(&req, stream, size_of_fd(file->fd), future);
}

int kvik_file_write_async(kvik_file *file, const void *buf, size_t size, int64_t file_offset,
                          void *stream, kvik_future **future) {
  static const char fn[] = "kvik_file_write_async";
  if (future) *future = NULL;
  int rc = check_access(fn, file, KVIK__WRITE);
  if (rc < 0) return rc;
  kvik__request req;
  file_request(&req, fn, file, KVIK__WRITE, buf, size, file_offset);
  return kvik__stream_request_start(&req, stream, -1, future);
}

ssize_t kvik_file_read_to_device(kvik_file *file, int device, void **devptr) {
  static const char fn[] = "kvik_file_read_to_device";
  if (devptr) *devptr = NULL;
  if (!devptr) return kvik__fail(-EINVAL, "%s: NULL output pointer", fn);
  int rc = check_access(fn, file, KVIK__READ);
  if (rc < 0) return rc;
  int64_t size = kvik_file_size(file);
  if (size <= 0) return size;
  void *dev = NULL;
  rc = kvik__device_alloc(fn, device, (size_t)size, &dev);
  if (rc < 0) return rc;
  kvik__request req;
  file_request(&req, fn, file, KVIK__READ, dev, (size_t)size, 0);
  req.stats = kvik__stats_observe(KVIK_IO_POSIX, KVIK__READ, (size_t)size);
  ssize_t got = kvik__request_run(&req);
  if (got < 0) {
    kvik_device_free(dev);
    return got;
  }
  *devptr = dev;
  return got;
}

/* ---- GPUDirect Storage ------------------------------------------------------------------- */

kvik__gds_file *kvik__file_gds(kvik_file *file) { return &file->gds; }

const char *kvik__file_path(const kvik_file *file) { return file->path; }

int kvik_file_backend(const kvik_file *file, char *why, size_t len) {
  if (why && len) why[0] = '\0';
  /* Made once and never changed, the decision leaves the handle logically const; holding it
   * keeps a concurrent close from deregistering what the decision registers. */
  int rc = hold(file, "kvik_file_backend");
  if (rc < 0) return rc;
  int backend = kvik__gds_backend(&((kvik_file *)file)->gds, why, len);
  let_go(file);
  return backend;
}

/* Raw IO runs the whole transfer on this thread in one piece: through one cuFile call, or
 * through the bounce buffers when cuFile does not serve the file or the write appends (cuFile
 * writes at offsets). */
static ssize_t raw_transfer(const char *fn, kvik_file *file, char *base, int64_t file_offset,
                            int64_t dev_offset, kvik__stats_op *stats) {
  kvik__op op = stats->op;
  size_t size = stats->requested;
  int rc = check_access(fn, file, op);
  if (rc < 0) return rc;
  if (dev_offset < 0 || file_offset < 0)
    return kvik__fail(-EINVAL, "%s(\"%s\"): negative offset", fn, file->path);
  if (size == 0) return 0; /* as every other read and write: an empty array has no pointer */
  if (!base)
    return kvik__fail(-EINVAL, "%s(\"%s\"): NULL buffer for %zu bytes", fn, file->path, size);
  kvik__memory mem;
  rc = kvik__init();
  if (rc == 0) rc = kvik__memory_classify(fn, base, &mem);
  if (rc < 0) return rc;
  if (mem.kind != KVIK_MEMORY_DEVICE)
    return kvik__fail(-EINVAL, "%s(\"%s\"): %p is not device memory", fn, file->path, (void *)base);
  if (kvik__owner_acquire(&file->source.owner) < 0) return closed_error(file, fn);
  ssize_t result;
  if (!(file->append && op == KVIK__WRITE) && kvik__gds_handle(&file->gds)) {
    kvik__gds_io io = {
        .fn = fn, .op = op, .mem = &mem, .dev = base, .size = size, .offset = file_offset};
    stats->backend = KVIK_IO_GDS;
    result = kvik__gds_raw(&file->gds, &io, dev_offset);
  } else {
    /* One task of the whole size: kvik__request_run() runs it on this thread. */
    kvik__request req;
    file_request(&req, fn, file, op, base + dev_offset, size, file_offset);
    req.task_size = size ? size : 1;
    req.stats = *stats;
    stats->start_ns = 0; /* the request ends it */
    result = kvik__request_run(&req);
  }
  kvik__owner_release(&file->source.owner);
  return result;
}

/* One raw call, counted for the monitors (stats.h): as the request counts it where it makes one,
 * else here. */
static ssize_t raw_io(const char *fn, kvik_file *file, kvik__op op, char *base, size_t size,
                      int64_t file_offset, int64_t dev_offset) {
  kvik__stats_op stats = kvik__stats_observe(KVIK_IO_POSIX, op, size);
  ssize_t result = raw_transfer(fn, file, base, file_offset, dev_offset, &stats);
  kvik__stats_end(&stats, result < 0 ? 0 : (size_t)result, result < 0);
  return result;
}

ssize_t kvik_file_raw_read(kvik_file *file, void *dev_base, size_t size, int64_t file_offset,
                           int64_t dev_offset) {
  return raw_io("kvik_file_raw_read", file, KVIK__READ, dev_base, size, file_offset, dev_offset);
}

ssize_t kvik_file_raw_write(kvik_file *file, const void *dev_base, size_t size, int64_t file_offset,
                            int64_t dev_offset) {
  return raw_io("kvik_file_raw_write", file, KVIK__WRITE, (char *)dev_base, size, file_offset,
                dev_offset);
}
