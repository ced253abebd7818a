/* Requests: checked, classified, split into tasks, run now. Stream order: stream_io.c. */
#define _GNU_SOURCE
#include "request.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>

#include "cancel.h"
#include "cuda.h"
#include "error.h"
#include "pool.h"
#include "settings.h"
#include "zero_copy_read.h"

typedef struct io_task {
  kvik__task base; /* first: the pool hands back a kvik__task pointer */
  kvik_future *future;
  const char *fn;
  kvik__source *source;
  kvik__memory mem;
  kvik__op op;
  char *buf;
  size_t size;
  int64_t offset;
  size_t start; /* the task's first byte, counted from the request's */
  size_t task_size;
  int via_cufile; /* cuFile moves this task's bytes (see plan()) */
  int in_pieces;  /* a serial write (kvik__request.serial_writes): calls of task_size */
  int announce;   /* a cold read into device memory: announce the range (run_task()) */
  /* With announce, the range announced after the task's own (announce_ahead()) */
  int64_t ahead_offset;
  size_t ahead_size;
  kvik__device_read read; /* the state of a read into device memory */
  /* With zc.split set, a task of a zero-copy read (zero_copy_read.h), whose range is the
   * request's: it takes its pieces of it, and says where the file ended. */
  kvik__zc_task zc;
} io_task;

static void task_done(io_task *t, size_t bytes, int rc) {
  assert(bytes <= t->size);
  if (t->zc.split) {
    if (t->zc.ended != SIZE_MAX) kvik__future_read_ended(t->future, t->zc.ended);
  } else if (t->op == KVIK__READ && rc == 0 && bytes < t->size) {
    kvik__future_read_ended(t->future, t->start + bytes);
  }
  kvik__future_task_done(t->future, bytes, rc);
}

static void finish_device_read(kvik__device_read *read, size_t bytes, int rc) {
  task_done((io_task *)(void *)((char *)read - offsetof(io_task, read)), bytes,
            rc); /* container of `read` */
}

/* The task's range, for the device paths. */
static kvik__device_io device_io_of(const io_task *t) {
  return (kvik__device_io){.fn = t->fn,
                           .mem = &t->mem,
                           .dev = t->buf,
                           .size = t->size,
                           .offset = t->offset,
                           .task_size = t->task_size,
                           .transfer = t->source->transfer,
                           .source = t->source->self};
}

/* A write to an append handle (see kvik__source.append): one task, under the file's append lock
 * from its first byte to its last, so that the write(2) calls of a device write's chunks follow
 * each other at the end of the file. */
static void run_append_task(io_task *t) {
  kvik__device_settle(); /* the reads this thread deferred do not wait for the lock */
  kvik__append in_progress;
  kvik__append_enter(&in_progress, t->source->append);
  size_t done = 0;
  kvik__source *src = t->source;
  kvik__device_io io = device_io_of(t);
  int rc = kvik__memory_on_device(&t->mem)
               ? kvik__device_write(&io, &done)
               : src->transfer(src->self, t->op, t->buf, t->size, t->offset, &done);
  kvik__append_leave(&in_progress);
  task_done(t, done, rc);
}

/* The task's bytes between host memory and its source: in one call, or for a serial write in
 * calls of task_size, each of which the source finishes or fails. */
static int host_transfer(io_task *t, size_t *done) {
  kvik__source *src = t->source;
  size_t piece = t->in_pieces ? t->task_size : t->size;
  *done = 0;
  int rc = 0;
  do {
    size_t n = t->size - *done < piece ? t->size - *done : piece, moved = 0;
    rc = src->transfer(src->self, t->op, t->buf + *done, n, t->offset + (int64_t)*done, &moved);
    *done += moved;
    if (moved < n) break;
  } while (rc == 0 && *done < t->size);
  return rc;
}

/* Announce a cold task's range, then the range its thread is likely to read next. */
static void announce_task(const io_task *t) {
  kvik__source *src = t->source;
  src->announce(src->self, t->offset, t->size);
  if (t->ahead_size) src->announce(src->self, t->ahead_offset, t->ahead_size);
}

/* Reads into device memory on pool threads may complete after the task returns (see
 * kvik__device_read_end); everything else completes here, after the thread's deferred reads
 * (kvik__device_write settles them itself). */
static void run_task(io_task *t) {
  if (t->zc.split) {
    kvik__device_io io = device_io_of(t);
    kvik__zc_read_run(&t->zc, &io, kvik__pool_in_worker(), &t->read);
    return;
  }
  if (t->source->append && t->op == KVIK__WRITE) {
    run_append_task(t);
    return;
  }
  if (t->via_cufile) {
    size_t done = 0;
    kvik__device_settle(); /* its pinned buffers may be needed while this thread waits on cuFile */
    kvik__gds_io io = {.fn = t->fn,
                       .op = t->op,
                       .mem = &t->mem,
                       .dev = t->buf,
                       .size = t->size,
                       .offset = t->offset};
    int rc = kvik__gds_transfer(t->source->gds, &io, &done);
    task_done(t, done, rc);
    return;
  }
  kvik__device_io io = device_io_of(t);
  if (kvik__memory_on_device(&t->mem) && t->op == KVIK__READ) {
    if (t->announce) announce_task(t);
    kvik__read_to_device(&io, kvik__pool_in_worker(), &t->read);
    return;
  }
  size_t done = 0;
  int rc;
  if (kvik__memory_on_device(&t->mem)) {
    rc = kvik__device_write(&io, &done);
  } else {
    kvik__device_settle(); /* a host task may take long: finish the device reads before it */
    rc = host_transfer(t, &done);
  }
  task_done(t, done, rc);
}

/* Once a task of the request failed, that failure is its result: a task that starts after it
 * moves nothing, and one that runs watches for it (cancel.h), so that a remote transfer waiting
 * on its server stops too. The tasks of a zero-copy read also stop at another's failed piece
 * (zero_copy_read.c), before its task reports it. */
static void run_io_task(kvik__task *base) {
  io_task *t = (io_task *)base;
  if (kvik__future_failed(t->future)) {
    kvik__future_task_done(t->future, 0, 0); /* not task_done(): this task met no end of file */
    return;
  }
  const atomic_int *outer = kvik__cancel_watch(kvik__future_failed_flag(t->future));
  run_task(t);
  kvik__cancel_watch(outer); /* the future may be gone: the flag is not read again */
}

int kvik__request_check_args(const kvik__request *req) {
  const char *fn = req->fn, *name = req->source->name;
  if (!req->buf && req->size > 0)
    return kvik__fail(-EINVAL, "%s(\"%s\"): NULL buffer for %zu bytes", fn, name, req->size);
  if (req->offset < 0)
    return kvik__fail(-EINVAL, "%s(\"%s\"): negative offset %lld", fn, name,
                      (long long)req->offset);
  if (req->size > (size_t)SSIZE_MAX || (uint64_t)req->offset + req->size > (uint64_t)INT64_MAX)
    return kvik__fail(-EINVAL,
                      "%s(\"%s\"): %zu bytes at offset %lld overflow the largest file offset", fn,
                      name, req->size, (long long)req->offset);
  return 0;
}

int kvik__request_check(const kvik__request *req, kvik_future **out, kvik__memory *mem) {
  int rc = kvik__request_check_args(req);
  if (rc < 0) return rc;
  if (!out) return kvik__fail(-EINVAL, "%s(\"%s\"): NULL future", req->fn, req->source->name);
  return kvik__memory_classify(req->fn, req->buf, mem);
}

/* Whether the request appends: a write to an append handle. */
static int appends(const kvik__request *req) {
  return req->source->append && req->op == KVIK__WRITE;
}

/* The most tasks a request is cut into, whose structs come with its future (kvik_file_pread
 * states the rule), so that their memory stays a few MiB whatever the task size asked for. At
 * the default task size, only requests beyond 64 GiB reach it. */
#define MAX_TASKS ((size_t)1 << 14)

/* The task size of a request of `size` bytes asked to run in tasks of `task_size`: that, unless
 * it makes more than MAX_TASKS tasks; then size / MAX_TASKS, rounded up to a multiple of 4 KiB
 * (cuFile's alignment, which plan_request() keeps). */
static size_t capped_task_size(size_t size, size_t task_size) {
  size_t least = size / MAX_TASKS + (size % MAX_TASKS != 0), a = KVIK__GDS_ALIGNMENT;
  return task_size >= least ? task_size : (least + a - 1) / a * a;
}

/* A read of at least COLD_REQUEST bytes whose range the page cache mostly lacks runs in tasks of
 * at least COLD_TASK bytes. Each such task announces its range to the kernel (posix_io.c), which
 * then has the range read from the device at once: larger tasks keep more of the file in flight
 * on the pool's threads. A task into device memory announces its whole range before its first
 * chunk (kvik__source.announce), not each chunk as it reads it, so that the disk reads the second
 * chunk while the first is copied to the GPU: on an H100 machine a cold 8.49 GB checkpoint loaded
 * 15% faster on 32 threads than on 16, as if 16 left the disk idle between chunks
 * (docs/benchmarks.md). On the H100 machines' virtio disk, a cold 4 GiB read into GPU memory on
 * 16 threads ran at 1.65-1.66 GB/s in tasks of 16 MiB against 1.33-1.42 in 4 MiB ones, and 1.54-
 * 1.57 for `dd bs=16M` (docs/benchmarks.md). A smaller cold request keeps its tasks: they are all
 * in flight at once either way. Reads that cuFile serves keep theirs too: it reads without the
 * page cache. Only ever larger: the request keeps within MAX_TASKS. */
#define COLD_REQUEST ((size_t)64 << 20)
#define COLD_TASK ((size_t)16 << 20)

static int cold_read(const kvik__request *req) {
  kvik__source *src = req->source;
  return req->op == KVIK__READ && req->size >= COLD_REQUEST && src->cold &&
         src->cold(src->self, req->offset, req->size);
}

/* A read of at least DEVICE_REQUEST bytes into device memory, through the bounce buffers, runs
 * in tasks of at least DEVICE_TASK bytes: its chunks (two a task, device_io.c) are then 4 MiB
 * rather than 2, which halves the system calls, the copies queued and the waits for them. A fresh
 * process on an H100 machine read an 8.49 GB page-cached checkpoint into a torch buffer in
 * 171.8 ms (then 166.0 and 165.6) in 8 MiB tasks, against 204.2 (181.2, 181.5) in 4 MiB ones;
 * 2 MiB tasks took 280 ms and 1 MiB ones 574 (docs/benchmarks.md). DEVICE_REQUEST keeps two such
 * tasks a thread at 16 threads. Only ever larger. */
#define DEVICE_REQUEST ((size_t)256 << 20)
#define DEVICE_TASK ((size_t)8 << 20)

static size_t device_task_size(const kvik__request *req, const kvik__memory *mem,
                               size_t task_size) {
  if (req->op != KVIK__READ || task_size >= DEVICE_TASK || req->size < DEVICE_REQUEST ||
      !kvik__memory_on_device(mem))
    return task_size;
  return DEVICE_TASK;
}

/* How a request is cut into tasks: an optional head, a body of tasks of `piece` bytes, an
 * optional tail. Only requests that cuFile serves have a head and a tail: the parts before the
 * first and after the last 4 KiB boundary of the file range, which go the POSIX way, so that every
 * cuFile task starts on a page boundary and no two tasks share a page. */
typedef struct plan {
  size_t head, body, tail, piece;
  int via_cufile;
} plan;

static plan plan_request(const kvik__request *req, const kvik__memory *mem, int single) {
  size_t ts = req->task_size;
  plan p = {0, req->size, 0, single ? req->size : ts, 0};
  kvik__gds_file *gds = req->source->gds;
  if (appends(req) || !gds || mem->kind != KVIK_MEMORY_DEVICE ||
      req->size < (size_t)kvik__setting(KVIK_SETTING_GDS_THRESHOLD) || !kvik__gds_handle(gds))
    return p;
  size_t a = KVIK__GDS_ALIGNMENT, misalign = (size_t)req->offset % a;
  p.via_cufile = 1;
  p.head = misalign ? a - misalign : 0;
  if (p.head > req->size) p.head = req->size;
  size_t rest = req->size - p.head, end_misalign = (size_t)(req->offset + (int64_t)req->size) % a;
  p.tail = end_misalign < rest ? end_misalign : rest;
  p.body = rest - p.tail;
  if (!single) p.piece = (ts + a - 1) / a * a;
  if (p.piece == 0) p.piece = a;
  return p;
}

static size_t plan_tasks(const plan *p) {
  size_t n = (p->head > 0) + (p->piece ? p->body / p->piece + (p->body % p->piece != 0) : 0) +
             (p->tail > 0);
  return n ? n : 1;
}

/* The tasks of the zero-copy path, for a read into device memory that cuFile does not serve and
 * that the path takes; else 0. */
static size_t zero_copy_tasks(const kvik__request *req, const kvik__memory *mem, const plan *p,
                              int single) {
  if (req->op != KVIK__READ || !kvik__memory_on_device(mem) || p->via_cufile) return 0;
  return kvik__zc_read_tasks(req->source->zc, req->offset, req->size, req->task_size, single);
}

/* Task i of `ntasks`, with what every task of the request shares; the range is the request's. */
static io_task request_task(const kvik__request *req, const kvik__memory *mem, kvik_future *future,
                            io_task *tasks, size_t i, size_t ntasks) {
  return (io_task){.base = {i + 1 < ntasks ? &tasks[i + 1].base : NULL, run_io_task},
                   .future = future,
                   .fn = req->fn,
                   .source = req->source,
                   .mem = *mem,
                   .op = req->op,
                   .buf = req->buf,
                   .size = req->size,
                   .offset = req->offset,
                   .task_size = req->task_size,
                   .read = {.finish = finish_device_read}};
}

/* A cold task into device memory also announces the range of the task `threads` places after it:
 * the one its thread takes when it finishes, as the pool's threads take tasks in order. So each
 * thread keeps two tasks' ranges in flight at the disk, its present one and its next, where it
 * kept one: on an H100 machine a cold checkpoint loaded 15% faster on 32 threads than on 16
 * (docs/benchmarks.md), and this gives the disk 32 threads' depth without their threads. */
static void announce_ahead(io_task *tasks, size_t ntasks) {
  size_t threads = (size_t)kvik__setting(KVIK_SETTING_NUM_THREADS);
  for (size_t i = 0; i + threads < ntasks; i++) {
    tasks[i].ahead_offset = tasks[i + threads].offset;
    tasks[i].ahead_size = tasks[i + threads].size;
  }
}

/* Lay out the tasks of a request that is not split; with `announce`, each announces its range,
 * and that of a task ahead (announce_ahead()). */
static void lay_out_tasks(const kvik__request *req, const kvik__memory *mem, const plan *p,
                          kvik_future *future, io_task *tasks, size_t ntasks, int announce) {
  size_t start = 0, body_end = p->head + p->body;
  for (size_t i = 0; i < ntasks; i++) {
    int in_body = start >= p->head && start < body_end;
    size_t n = !in_body ? (start < p->head ? p->head : req->size - start)
                        : (body_end - start < p->piece ? body_end - start : p->piece);
    io_task *t = &tasks[i];
    *t = request_task(req, mem, future, tasks, i, ntasks);
    t->buf += start;
    t->size = n;
    t->offset += (int64_t)start;
    t->start = start;
    t->via_cufile = p->via_cufile && in_body;
    t->announce = announce;
    start += n;
  }
  assert(start == req->size);
  if (announce) announce_ahead(tasks, ntasks);
}

/* Lay out the tasks of a zero-copy read: each covers the whole request, and takes its pieces. */
static void lay_out_zero_copy(const kvik__request *req, const kvik__memory *mem,
                              kvik_future *future, io_task *tasks, size_t ntasks,
                              kvik__zc_split *s) {
  kvik__zc_split_init(s, req->source->zc, req->offset, req->size, ntasks);
  for (size_t i = 0; i < ntasks; i++) {
    tasks[i] = request_task(req, mem, future, tasks, i, ntasks);
    tasks[i].zc = (kvik__zc_task){.split = s, .index = i};
  }
}

/* Whether the request is a serial write (see kvik__request.serial_writes): from host memory. */
static int serial_write(const kvik__request *req, const kvik__memory *mem) {
  return req->serial_writes && req->op == KVIK__WRITE && !kvik__memory_on_device(mem);
}

/* Count the request against its source's owner: 0, or -EBADF where the handle was closed. */
static int acquire_owner(const kvik__request *req) {
  if (kvik__owner_acquire(&req->source->owner) == 0) return 0;
  return kvik__fail(-EBADF, "%s(\"%s\"): handle is closed", req->fn, req->source->name);
}

/* Everything up to running: checks and classification (unless `known` is the classification
 * of a request already checked), the owner's acquisition, and a future with its tasks laid out
 * (one task when `single`, for an append or for a serial write, whose task moves its bytes in
 * pieces, besides a cuFile head and tail). *serial says which it is. */
static int prepare(kvik__request *req, const kvik__memory *known, int single, kvik_future **out,
                   size_t *ntasks_out, int *serial) {
  kvik__memory mem;
  int rc = known ? 0 : kvik__request_check(req, out, &mem);
  if (known) mem = *known;
  if (rc < 0 || (rc = acquire_owner(req)) < 0) return rc;
  kvik__source *src = req->source;
  *serial = serial_write(req, &mem);
  if (appends(req) || *serial) single = 1;
  if (req->task_size == 0) req->task_size = (size_t)kvik__setting(KVIK_SETTING_TASK_SIZE);
  req->task_size = capped_task_size(req->size, req->task_size);
  plan p = plan_request(req, &mem, single);
  int cold = 0;
  if (!p.via_cufile && !single) {
    cold = cold_read(req);
    if (cold && req->task_size < COLD_TASK) req->task_size = COLD_TASK;
    p.piece = req->task_size = device_task_size(req, &mem, req->task_size);
  }
  size_t zc_count = zero_copy_tasks(req, &mem, &p, single);
  size_t ntasks = zc_count ? zc_count : plan_tasks(&p);
  size_t extra = ntasks * sizeof(io_task) + (zc_count ? sizeof(kvik__zc_split) : 0);
  kvik_future *future = kvik__future_new(&src->owner, ntasks, req->size, extra);
  if (!future) {
    kvik__owner_release(&src->owner);
    return kvik__fail(-ENOMEM, "%s(\"%s\"): out of memory for %zu tasks", req->fn, src->name,
                      ntasks);
  }
  kvik__stats_op stats = req->stats;
  if (p.via_cufile) stats.backend = KVIK_IO_GDS;
  kvik__future_observe(future, &stats);
  io_task *tasks = kvik__future_extra(future);
  if (zc_count)
    lay_out_zero_copy(req, &mem, future, tasks, ntasks, (kvik__zc_split *)(void *)(tasks + ntasks));
  else
    lay_out_tasks(req, &mem, &p, future, tasks, ntasks,
                  cold && kvik__memory_on_device(&mem) && src->announce);
  assert(!*serial || ntasks == 1);
  tasks[0].in_pieces = *serial;
  *out = future;
  *ntasks_out = ntasks;
  return 0;
}

/* Hand the tasks to the pool. If it cannot take them, they fail, the future completes, and the
 * caller gets the error. */
static int submit(kvik_future *future, size_t ntasks) {
  io_task *tasks = kvik__future_extra(future);
  int rc = kvik__pool_submit(KVIK__POOL_IO, &tasks[0].base, &tasks[ntasks - 1].base);
  if (rc < 0)
    for (size_t i = 0; i < ntasks; i++) kvik__future_task_done(future, 0, rc);
  return rc;
}

/* Whether the request runs as one task on the calling thread (kvik_file_pread states the rule). */
static int runs_inline(const kvik__request *req, int blocking) {
  size_t task_size =
      req->task_size ? req->task_size : (size_t)kvik__setting(KVIK_SETTING_TASK_SIZE);
  return req->size == 0 ||
         (!req->pooled && ((blocking && (req->size <= task_size || appends(req))) ||
                           req->size < (size_t)kvik__setting(KVIK_SETTING_GDS_THRESHOLD)));
}

/* kvik__request_start(), for a request that `known` classifies where it was checked already. */
static int start(kvik__request *req, const kvik__memory *known, int blocking, kvik_future **out) {
  if (out) *out = NULL;
  int inline_run = runs_inline(req, blocking);
  size_t ntasks = 0;
  int serial = 0;
  int rc = prepare(req, known, inline_run, out, &ntasks, &serial);
  if (rc < 0) return kvik__stats_refuse(&req->stats, rc);
  if (inline_run || (serial && blocking && !req->pooled)) {
    io_task *tasks = kvik__future_extra(*out);
    for (size_t i = 0; i < ntasks; i++) run_io_task(&tasks[i].base);
  } else if ((rc = submit(*out, ntasks)) < 0) {
    kvik_future_free(*out);
    *out = NULL;
  }
  return rc;
}

int kvik__request_start(kvik__request *req, int blocking, kvik_future **out) {
  return start(req, NULL, blocking, out);
}

int kvik__request_failed(int rc, size_t done, size_t size) {
  char why[KVIK_MESSAGE_MAX];
  snprintf(why, sizeof why, "%s", kvik_last_error());
  return kvik__fail(rc, "%s (%zu of %zu bytes transferred)", why, done, size);
}

/* A blocking request of host memory that one task on the calling thread serves, but for appends:
 * the source's transfer alone, without a future, so that a small read or write costs its system
 * call and little else (no allocation, no lock: the owner counts with atomics). It ends as a
 * future would have: the bytes moved, or the error with how many moved, counted by the
 * monitors. */
static ssize_t run_on_caller(kvik__request *req) {
  kvik__source *src = req->source;
  int rc = acquire_owner(req);
  if (rc < 0) return kvik__stats_refuse(&req->stats, rc);
  kvik__device_settle(); /* as run_task() does before a host transfer */
  size_t done = 0;
  rc = src->transfer(src->self, req->op, req->buf, req->size, req->offset, &done);
  kvik__owner_release(&src->owner);
  kvik__stats_end(&req->stats, done, rc < 0);
  return rc < 0 ? kvik__request_failed(rc, done, req->size) : (ssize_t)done;
}

ssize_t kvik__request_run(kvik__request *req) {
  kvik__memory mem;
  int rc = kvik__request_check_args(req);
  if (rc == 0) rc = kvik__memory_classify(req->fn, req->buf, &mem);
  if (rc < 0) return kvik__stats_refuse(&req->stats, rc);
  if (!kvik__memory_on_device(&mem) && !appends(req) && runs_inline(req, 1))
    return run_on_caller(req);
  kvik_future *future = NULL;
  if ((rc = start(req, &mem, 1, &future)) < 0) return rc; /* classified once */
  ssize_t result = kvik_future_wait(future);
  kvik_future_free(future);
  return result;
}
