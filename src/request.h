/* IO requests against a source (a file, a mapping): argument checks, memory classification,
 * splitting into tasks on the pool, and starting them. */
#ifndef KVIK_SRC_REQUEST_H
#define KVIK_SRC_REQUEST_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "append.h"
#include "device_io.h"
#include "future.h"
#include "gds.h"
#include "stats.h"
#include "zero_copy.h"

/* What requests run against. Lives inside its handle, so it outlives every request on it (the
 * handle's close waits for them through `owner`). */
typedef struct kvik__source {
  kvik__owner owner;
  kvik__host_transfer transfer; /* moves bytes between host memory and the source */
  void *self;                   /* the handle, passed to transfer */
  /* For append handles, the file their writes go to; else NULL. The source's transfer has the
   * kernel place each write at the end; a request runs as one task under kvik__append_enter(). */
  const kvik__append_file *append;
  kvik__zc_file *zc;       /* for zero-copy reads into device memory, or NULL */
  kvik__gds_file *gds;     /* how cuFile serves the source, or NULL where it cannot */
  const char *name;        /* the path, for messages */
  kvik_io_backend backend; /* what carries its requests for the monitors, unless cuFile does */
  /* NULL, or whether the page cache lacks much of `size` bytes at `offset` of the source: a large
   * read of such a range runs in larger tasks (request.c, COLD_TASK). */
  int (*cold)(void *self, int64_t offset, size_t size);
  /* NULL, or have the source start reading `size` bytes at `offset` into its cache, as advice:
   * a task of a cold read into device memory announces its range before it reads it chunk by
   * chunk, and then its thread's next task's (request.c, announce_task()). */
  void (*announce)(void *self, int64_t offset, size_t size);
} kvik__source;

typedef struct kvik__request {
  const char *fn; /* the public function called, for messages */
  kvik__source *source;
  kvik__op op;
  char *buf;
  size_t size;
  int64_t offset;
  size_t task_size; /* 0: KVIK_SETTING_TASK_SIZE */
  /* Run on the pool whatever the size: for callers that start many small requests at once and
   * wait for them together, which the calling thread would otherwise serve one by one. */
  unsigned char pooled;
  /* The source's writes from host memory are serialised by the kernel (a file's buffered writes
   * each take its inode lock): such a write runs as one task, which moves its bytes in calls of
   * task_size, on the calling thread when it waits anyway. More threads would only wait on the
   * lock, and spin for it on CPUs that the writer and the kernel's writeback need. */
  unsigned char serial_writes;
  /* The public call as the monitors count it, begun by the entry point (stats.h); a start of 0:
   * not counted. kvik__request_start() ends it, at once when it fails, else when the future is
   * done. */
  kvik__stats_op stats;
} kvik__request;

/* Start the request and store its future in *out. Requests of no bytes, and unless `pooled`,
 * those below the GDS threshold or of one task when `blocking` (the caller waits anyway), run on
 * the calling thread; so do the serial writes (serial_writes) that `blocking` asks. Returns 0,
 * or a negative code with a message (then no future exists). */
int kvik__request_start(kvik__request *req, int blocking, kvik_future **out);

/* The checks of buffer, size and offset that every request gets: 0, or -EINVAL with a message.
 * For a source that shortens requests first (a remote object's end), so that what it shortens
 * was valid as the caller asked it. */
int kvik__request_check_args(const kvik__request *req);

/* Every check a request gets before it starts: kvik__request_check_args(), a future to store
 * (`out`); then the buffer's kind and context in *mem. (The library is initialised: its source's
 * handle was opened after kvik__init() succeeded.) Returns 0, or a negative code with a message. */
int kvik__request_check(const kvik__request *req, kvik_future **out, kvik__memory *mem);

/* Start the request and wait for it. Returns the byte count or a negative code. */
ssize_t kvik__request_run(kvik__request *req);

/* The error of a blocking request of `size` bytes that failed with `rc` after it moved `done`:
 * this thread's message, which names the cause, gets the count appended, as a future's does.
 * Returns rc. */
int kvik__request_failed(int rc, size_t done, size_t size);

#endif
