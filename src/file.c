/* File handles and their parallel host IO. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "future.h"
#include "init.h"
#include "pool.h"
#include "posix_io.h"
#include "settings.h"

/* States of kvik_file.direct_fd besides an open descriptor. */
#define DIRECT_NOT_TRIED (-2)
#define DIRECT_UNAVAILABLE (-1)

struct kvik_file {
  kvik__owner owner; /* in-flight requests; close waits for them */
  int fd;
  _Atomic int direct_fd;      /* opened on first direct use; see direct_descriptor() */
  _Atomic int direct_refused; /* the file system refused O_DIRECT IO on it */
  int access;            /* O_RDONLY, O_WRONLY or O_RDWR */
  int append;
  _Atomic int64_t append_end; /* where the next append lands */
  char path[];
};

typedef struct io_task {
  kvik__task base; /* first: the pool hands back a kvik__task pointer */
  kvik_future *future;
  kvik_file *file;
  kvik__op op;
  char *buf;
  size_t size;
  int64_t offset;
} io_task;

/* ---- open and close ------------------------------------------------------------------- */

typedef struct {
  const char *text;
  int flags;
  int append;
} flag_string;

static const flag_string flag_strings[] = {
    {"r", O_RDONLY, 0},
    {"r+", O_RDWR, 0},
    {"w", O_WRONLY | O_CREAT | O_TRUNC, 0},
    {"w+", O_RDWR | O_CREAT | O_TRUNC, 0},
    {"a", O_WRONLY | O_CREAT, 1},
    {"a+", O_RDWR | O_CREAT, 1},
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

/* Refuse what cannot be read or written as a file. Directories open fine with O_RDONLY. */
static int check_opened(int fd, const char *path, const char *flags) {
  struct stat st;
  if (fstat(fd, &st) != 0) return kvik__fail_errno(errno, "kvik_file_open(\"%s\", \"%s\"): fstat", path, flags);
  if (S_ISDIR(st.st_mode)) return kvik__fail(-EISDIR, "kvik_file_open(\"%s\", \"%s\"): is a directory", path, flags);
  return 0;
}

int kvik_file_open(const char *path, const char *flags, unsigned mode, kvik_file **file) {
  if (file) *file = NULL;
  if (!path || !flags || !file)
    return kvik__fail(-EINVAL, "kvik_file_open: NULL %s", !path ? "path" : !flags ? "flags" : "output handle");
  const flag_string *fs = lookup_flags(flags);
  if (!fs)
    return kvik__fail(-EINVAL, "kvik_file_open(\"%s\", \"%s\"): unknown flags (expected r, r+, w, w+, a or a+)", path,
                      flags);
  int rc = kvik__init();
  if (rc < 0) return rc;
  size_t path_len = strlen(path);
  kvik_file *f = calloc(1, sizeof *f + path_len + 1);
  if (!f) return kvik__fail(-ENOMEM, "kvik_file_open(\"%s\", \"%s\"): out of memory", path, flags);
  memcpy(f->path, path, path_len + 1);
  f->fd = open(path, fs->flags | O_CLOEXEC, (mode_t)mode);
  if (f->fd < 0) {
    rc = kvik__fail_errno(errno, "kvik_file_open(\"%s\", \"%s\")", path, flags);
    free(f);
    return rc;
  }
  rc = check_opened(f->fd, path, flags);
  int64_t size = rc < 0 ? 0 : size_of_fd(f->fd);
  if (rc == 0 && size < 0) rc = kvik__fail_errno((int)-size, "kvik_file_open(\"%s\", \"%s\"): size", path, flags);
  if (rc < 0) {
    close(f->fd);
    free(f);
    return rc;
  }
  atomic_init(&f->direct_fd, DIRECT_NOT_TRIED);
  atomic_init(&f->direct_refused, 0);
  f->access = fs->flags & O_ACCMODE;
  f->append = fs->append;
  atomic_init(&f->append_end, size);
  *file = f;
  return 0;
}

int kvik_file_close(kvik_file *file) {
  if (!file) return kvik__fail(-EINVAL, "kvik_file_close: NULL handle");
  if (kvik__owner_close(&file->owner) < 0)
    return kvik__fail(-EBADF, "kvik_file_close(\"%s\"): already closed", file->path);
  int rc = 0;
  int direct = atomic_load(&file->direct_fd);
  if (direct >= 0) close(direct);
  if (close(file->fd) != 0 && errno != EINTR) rc = kvik__fail_errno(errno, "kvik_file_close(\"%s\")", file->path);
  return rc;
}

void kvik_file_free(kvik_file *file) {
  if (!file) return;
  if (!kvik__owner_is_closed(&file->owner)) kvik_file_close(file);
  free(file);
}

int kvik_file_closed(const kvik_file *file) { return file ? kvik__owner_is_closed(&file->owner) : 1; }

static int closed_error(const kvik_file *file, const char *fn) {
  if (!file) return kvik__fail(-EINVAL, "%s: NULL handle", fn);
  return kvik__fail(-EBADF, "%s(\"%s\"): file is closed", fn, file->path);
}

int kvik_file_fd(const kvik_file *file) {
  if (!file || kvik__owner_is_closed(&file->owner)) return closed_error(file, "kvik_file_fd");
  return file->fd;
}

int kvik_file_open_flags(const kvik_file *file) {
  if (!file || kvik__owner_is_closed(&file->owner)) return closed_error(file, "kvik_file_open_flags");
  int flags = fcntl(file->fd, F_GETFL);
  if (flags < 0) return kvik__fail_errno(errno, "kvik_file_open_flags(\"%s\")", file->path);
  return file->append ? flags | O_APPEND : flags;
}

int64_t kvik_file_size(const kvik_file *file) {
  if (!file || kvik__owner_is_closed(&file->owner)) return closed_error(file, "kvik_file_size");
  int64_t size = size_of_fd(file->fd);
  return size < 0 ? kvik__fail_errno((int)-size, "kvik_file_size(\"%s\")", file->path) : size;
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
  int opened = open(proc_path, file->access | O_DIRECT | O_CLOEXEC);
  if (opened < 0) opened = DIRECT_UNAVAILABLE;
  int expected = DIRECT_NOT_TRIED;
  if (atomic_compare_exchange_strong(&file->direct_fd, &expected, opened)) return opened;
  if (opened >= 0) close(opened);
  return expected;
}

/* The O_DIRECT descriptor to use for op, or -1 for none. */
static int direct_for(kvik_file *file, kvik__op op) {
  kvik_setting s = op == KVIK__READ ? KVIK_SETTING_AUTO_DIRECT_IO_READ : KVIK_SETTING_AUTO_DIRECT_IO_WRITE;
  if (!kvik__setting(s) || atomic_load(&file->direct_refused)) return -1;
  return direct_descriptor(file);
}

static int transfer(kvik_file *file, kvik__op op, char *buf, size_t size, int64_t offset, size_t *done) {
  kvik__posix_target target = {file->fd, direct_for(file, op), file->path};
  int refused = 0;
  int rc = kvik__posix_io(op, &target, buf, size, offset, done, &refused);
  /* The file system opens with O_DIRECT but refuses its IO: stop trying for this file. The
   * descriptor stays open until close, as other tasks may be using it right now. */
  if (refused) atomic_store(&file->direct_refused, 1);
  return rc;
}

static void run_io_task(kvik__task *base) {
  io_task *task = (io_task *)base;
  size_t done = 0;
  int rc = transfer(task->file, task->op, task->buf, task->size, task->offset, &done);
  kvik__future_task_done(task->future, done, rc);
}

/* `fn` is the public function called, for messages. */
static int check_request(const char *fn, kvik_file *file, kvik__op op, const void *buf, size_t size,
                         int64_t offset) {
  if (!file) return kvik__fail(-EINVAL, "%s: NULL handle", fn);
  if (!buf && size > 0) return kvik__fail(-EINVAL, "%s(\"%s\"): NULL buffer for %zu bytes", fn, file->path, size);
  if (offset < 0) return kvik__fail(-EINVAL, "%s(\"%s\"): negative offset %lld", fn, file->path, (long long)offset);
  if (size > (size_t)SSIZE_MAX || (uint64_t)offset + size > (uint64_t)INT64_MAX)
    return kvik__fail(-EINVAL, "%s(\"%s\"): %zu bytes at offset %lld overflow the largest file offset", fn,
                      file->path, size, (long long)offset);
  int forbidding_mode = op == KVIK__READ ? O_WRONLY : O_RDONLY;
  if (file->access == forbidding_mode)
    return kvik__fail(-EBADF, "%s(\"%s\"): file not opened for %s", fn, file->path,
                      op == KVIK__READ ? "reading" : "writing");
  return 0;
}

/* Split a request into tasks and start it. Requests below the GDS threshold, of one task when the
 * caller is going to wait anyway (`blocking`), or of no bytes, run on this thread: a round trip
 * through the pool would cost more than it saves. */
static int start_request(const char *fn, kvik_file *file, kvik__op op, char *buf, size_t size, int64_t offset,
                         size_t task_size, int blocking, kvik_future **out) {
  int rc = check_request(fn, file, op, buf, size, offset);
  if (rc == 0 && !out) rc = kvik__fail(-EINVAL, "%s(\"%s\"): NULL future", fn, file->path);
  if (rc == 0) rc = kvik__init();
  if (rc < 0) return rc;
  if (kvik__owner_acquire(&file->owner) < 0) return closed_error(file, fn);
  if (file->append && op == KVIK__WRITE) offset = atomic_fetch_add(&file->append_end, (int64_t)size);
  if (task_size == 0) task_size = (size_t)kvik__setting(KVIK_SETTING_TASK_SIZE);
  size_t ntasks = size / task_size + (size % task_size != 0);
  int inline_run = size == 0 || (ntasks == 1 && blocking) || size < (size_t)kvik__setting(KVIK_SETTING_GDS_THRESHOLD);
  if (inline_run) ntasks = 1;
  kvik_future *future = kvik__future_new(&file->owner, ntasks, size, inline_run ? 0 : ntasks * sizeof(io_task));
  if (!future) {
    kvik__owner_release(&file->owner);
    return kvik__fail(-ENOMEM, "%s(\"%s\"): out of memory for %zu tasks", fn, file->path, ntasks);
  }
  if (inline_run) {
    size_t done = 0;
    rc = transfer(file, op, buf, size, offset, &done);
    kvik__future_task_done(future, done, rc);
    *out = future;
    return 0;
  }
  io_task *tasks = kvik__future_extra(future);
  for (size_t i = 0; i < ntasks; i++) {
    size_t start = i * task_size;
    tasks[i] = (io_task){{i + 1 < ntasks ? &tasks[i + 1].base : NULL, run_io_task}, future, file, op, buf + start,
                         size - start < task_size ? size - start : task_size, offset + (int64_t)start};
  }
  rc = kvik__pool_submit(&tasks[0].base, &tasks[ntasks - 1].base);
  if (rc < 0) {
    for (size_t i = 0; i < ntasks; i++) kvik__future_task_done(future, 0, rc);
    kvik_future_free(future);
    return rc;
  }
  *out = future;
  return 0;
}

int kvik_file_pread(kvik_file *file, void *buf, size_t size, int64_t file_offset, size_t task_size,
                    kvik_future **future) {
  if (future) *future = NULL;
  return start_request("kvik_file_pread", file, KVIK__READ, buf, size, file_offset, task_size, 0, future);
}

int kvik_file_pwrite(kvik_file *file, const void *buf, size_t size, int64_t file_offset, size_t task_size,
                     kvik_future **future) {
  if (future) *future = NULL;
  /* The buffer is only read from; the cast lets reads and writes share one task type. */
  return start_request("kvik_file_pwrite", file, KVIK__WRITE, (char *)buf, size, file_offset, task_size, 0, future);
}

static ssize_t run_blocking(const char *fn, kvik_file *file, kvik__op op, char *buf, size_t size, int64_t offset) {
  kvik_future *future = NULL;
  int rc = start_request(fn, file, op, buf, size, offset, 0, 1, &future);
  if (rc < 0) return rc;
  ssize_t result = kvik_future_wait(future);
  kvik_future_free(future);
  return result;
}

ssize_t kvik_file_read(kvik_file *file, void *buf, size_t size, int64_t file_offset) {
  return run_blocking("kvik_file_read", file, KVIK__READ, buf, size, file_offset);
}

ssize_t kvik_file_write(kvik_file *file, const void *buf, size_t size, int64_t file_offset) {
  return run_blocking("kvik_file_write", file, KVIK__WRITE, (char *)buf, size, file_offset);
}
