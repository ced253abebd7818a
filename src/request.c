/* Requests: checked, classified, split into tasks, run now. Stream order: stream_io.c. */
#define _GNU_SOURCE
#include "request.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stddef.h>

#include "cancel.h"
#include "cuda.h"
#include "error.h"
#include "init.h"
#include "pool.h"
#include "settings.h"

/* A zero-copy read's bytes that no task has taken yet, [front, back) of the file. Its first task
 * takes them from the front, a granule at a time: it registers the granule, queues its copy from
 * the mapping, and registers the next while that copy runs. One thread, in that order, because a
 * call that queues a copy can wait for another thread's registration to end (bench_zero_copy_probe
 * step 6: up to 78 ms on an H100), which would leave the copy engine idle. Its other tasks take them
 * from the back, in pieces of at least BACK_PIECE_MIN, through the bounce buffers, which adds their
 * rate to the registration's until the two ends meet. For the same reason they do not queue their
 * copies themselves: they post them to the front (kvik__relay), which queues them between its
 * registrations. On a file read before, whose granules are all registered, the first task queues
 * its copies faster than the others read and takes nearly all. Taking is short and rare (once per
 * MiBs), so a spin lock guards it. */
typedef struct split {
  atomic_flag lock;
  int64_t front, back;
  int failed;        /* a task failed: the others take nothing more */
  kvik__relay relay; /* the back's copies, queued by the front between registrations */
} split;

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
  kvik__zc_read zc; /* the zero-copy path (see KVIK_SETTING_ZERO_COPY_READ), for the front of a split */
  int via_cufile; /* cuFile moves this task's bytes (see plan()) */
  kvik__device_read read; /* the state of a read into device memory */
  split *split;           /* the request's bytes that its tasks take in pieces, or NULL: the task's own range */
  int front;              /* takes the split's bytes from the front */
} io_task;

/* A split task's range is the request's, and it reports its pieces' ends itself (read_piece). */
static void task_done(io_task *t, size_t bytes, int rc) {
  if (t->op == KVIK__READ && !t->split && rc == 0 && bytes < t->size)
    kvik__future_read_ended(t->future, t->start + bytes);
  kvik__future_task_done(t->future, bytes, rc);
}

static void finish_device_read(kvik__device_read *read, size_t bytes, int rc) {
  task_done((io_task *)(void *)((char *)read - offsetof(io_task, read)), bytes, rc); /* container of `read` */
}

static void split_lock(split *s) {
  while (atomic_flag_test_and_set_explicit(&s->lock, memory_order_acquire)) {
  }
}

static void split_unlock(split *s) { atomic_flag_clear_explicit(&s->lock, memory_order_release); }

/* Take the next bytes from the front: to the end of their granule, or, before `mapped_from` (where
 * the mapping failed the front), a task's worth. Returns how many, from *offset; 0 when none are
 * left. */
static size_t take_front(split *s, int64_t mapped_from, size_t task_size, int64_t *offset) {
  split_lock(s);
  int64_t at = s->front, granule = (int64_t)KVIK__ZC_GRANULE;
  int64_t end = at >= mapped_from ? (at / granule + 1) * granule
                                  : (mapped_from - at < (int64_t)task_size ? mapped_from : at + (int64_t)task_size);
  if (end > s->back) end = s->back;
  if (s->failed) end = at;
  s->front = end;
  split_unlock(s);
  *offset = at;
  return (size_t)(end - at);
}

/* Give back the last `n` bytes that take_front() took, unread: no other task moves the front, and
 * the back never passes it. */
static void give_back_front(split *s, size_t n) {
  split_lock(s);
  s->front -= (int64_t)n;
  split_unlock(s);
}

/* The back's pieces: at least this large, since each of their copies is a call that can wait for
 * a registration; on an H100, 16 MiB tasks read a first 8 GiB at 33 GB/s from 4 threads where 4
 * MiB ones read it at 26. */
#define BACK_PIECE_MIN ((size_t)16 << 20)

/* Take the last bytes from the back, back to a multiple of `piece` or to the front; none from a
 * registered granule, which the front copies for next to no CPU (a file read before). The
 * granule is asked about outside the lock, since its state waits for a file that changed to be
 * dropped: a piece taken meanwhile by another task only makes this answer about a neighbour. */
static size_t take_back(split *s, size_t piece, kvik__zc_file *zc, int64_t *offset) {
  split_lock(s);
  int64_t end = s->back;
  split_unlock(s);
  if (kvik__zc_registered(zc, end - 1)) return 0;
  split_lock(s);
  end = s->back;
  int64_t start = (end - 1) / (int64_t)piece * (int64_t)piece;
  if (start < s->front) start = s->front;
  if (s->failed) start = end;
  s->back = start;
  split_unlock(s);
  *offset = start;
  return (size_t)(end - start);
}

/* Read a piece through the bounce buffers. A short one marks where the file ended; a failed one
 * stops the other tasks from taking more. */
static void read_piece(io_task *t, int64_t at, size_t n) {
  size_t got = kvik__device_read_bounced(&t->read, t->buf + (at - t->offset), n, at);
  if (t->read.rc < 0) {
    split_lock(t->split);
    t->split->failed = 1;
    split_unlock(t->split);
  } else if (got < n) {
    kvik__future_read_ended(t->future, (size_t)(at - t->offset) + got);
  }
}

/* The front of a split: a granule the mapping cannot serve (not resident under KVIK_AUTO, refused,
 * another file registering) goes through the bounce buffers, a task's worth at a time, so that the
 * back tasks share it. After each step it queues the copies the back posted meanwhile. */
static void run_front(io_task *t) {
  int64_t mapped_from = 0, at;
  size_t n;
  kvik__relay *relay = &t->split->relay;
  kvik__relay_open(relay);
  while (t->read.rc == 0 && !kvik__future_failed(t->future) &&
         (n = take_front(t->split, mapped_from, t->task_size, &at)) > 0) {
    char *dev = t->buf + (at - t->offset);
    size_t mapped = at >= mapped_from ? kvik__device_read_mapped(&t->read, &t->zc, dev, n, at) : 0;
    kvik__relay_pass(relay);
    if (mapped == n) continue;
    if (at >= mapped_from) {
      mapped_from = (at / (int64_t)KVIK__ZC_GRANULE + 1) * (int64_t)KVIK__ZC_GRANULE;
      size_t keep = n < t->task_size ? n : t->task_size;
      give_back_front(t->split, n - keep);
      n = keep;
    }
    read_piece(t, at, n);
  }
  kvik__relay_close(relay);
}

static size_t back_piece(size_t task_size) { return task_size > BACK_PIECE_MIN ? task_size : BACK_PIECE_MIN; }

static void run_back(io_task *t) {
  int64_t at;
  size_t n;
  size_t piece = back_piece(t->task_size);
  while (t->read.rc == 0 && !kvik__future_failed(t->future) &&
         (n = take_back(t->split, piece, t->zc.file, &at)) > 0)
    read_piece(t, at, n);
}

/* The task's range, for the device paths. */
static kvik__device_io device_io_of(const io_task *t) {
  return (kvik__device_io){.fn = t->fn, .mem = &t->mem, .dev = t->buf, .size = t->size,
                           .offset = t->offset, .task_size = t->task_size,
                           .transfer = t->source->transfer, .source = t->source->self};
}

static void run_split_task(io_task *t) {
  kvik__device_io io = device_io_of(t);
  io.task_size = t->front ? t->task_size : back_piece(t->task_size);
  if (kvik__device_read_begin(&t->read, &io) == 0) {
    if (t->front) run_front(t);
    else run_back(t);
  }
  kvik__device_read_end(&t->read, kvik__pool_in_worker());
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

/* Reads into device memory on pool threads may complete after the task returns (see
 * kvik__device_read_end); everything else completes here, after the thread's deferred reads
 * (kvik__device_write settles them itself). */
static void run_task(io_task *t) {
  if (t->split) {
    run_split_task(t);
    return;
  }
  if (t->source->append && t->op == KVIK__WRITE) {
    run_append_task(t);
    return;
  }
  if (t->via_cufile) {
    size_t done = 0;
    kvik__device_settle(); /* its pinned buffers may be needed while this thread waits on cuFile */
    kvik__gds_io io = {.fn = t->fn, .op = t->op, .mem = &t->mem, .dev = t->buf, .size = t->size,
                       .offset = t->offset};
    int rc = kvik__gds_transfer(t->source->gds, &io, &done);
    task_done(t, done, rc);
    return;
  }
  kvik__device_io io = device_io_of(t);
  if (kvik__memory_on_device(&t->mem) && t->op == KVIK__READ) {
    kvik__read_to_device(&io, kvik__pool_in_worker(), &t->read);
    return;
  }
  size_t done = 0;
  int rc;
  if (kvik__memory_on_device(&t->mem)) {
    rc = kvik__device_write(&io, &done);
  } else {
    kvik__device_settle(); /* a host task may take long: finish the device reads before it */
    rc = t->source->transfer(t->source->self, t->op, t->buf, t->size, t->offset, &done);
  }
  task_done(t, done, rc);
}

/* Once a task of the request failed, that failure is its result: a task that starts after it
 * moves nothing, and one that runs watches for it (cancel.h), so that a remote transfer waiting
 * on its server stops too. The split tasks also stop at a failed piece (split.failed), before
 * its task reports it. */
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
  if (!req->buf && req->size > 0) return kvik__fail(-EINVAL, "%s(\"%s\"): NULL buffer for %zu bytes", fn, name, req->size);
  if (req->offset < 0)
    return kvik__fail(-EINVAL, "%s(\"%s\"): negative offset %lld", fn, name, (long long)req->offset);
  if (req->size > (size_t)SSIZE_MAX || (uint64_t)req->offset + req->size > (uint64_t)INT64_MAX)
    return kvik__fail(-EINVAL, "%s(\"%s\"): %zu bytes at offset %lld overflow the largest file offset", fn, name,
                      req->size, (long long)req->offset);
  return 0;
}

int kvik__request_check(const kvik__request *req, kvik_future **out, kvik__memory *mem) {
  int rc = kvik__request_check_args(req);
  if (rc < 0) return rc;
  if (!out) return kvik__fail(-EINVAL, "%s(\"%s\"): NULL future", req->fn, req->source->name);
  rc = kvik__init();
  return rc < 0 ? rc : kvik__memory_classify(req->fn, req->buf, mem);
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
  size_t n = (p->head > 0) + (p->piece ? p->body / p->piece + (p->body % p->piece != 0) : 0) + (p->tail > 0);
  return n ? n : 1;
}

/* Whether the request is a read into device memory that the zero-copy path may serve, and so is
 * split (see `split`) into a front task and up to one back task per other pool thread: the
 * threads set how much CPU a read may take. */
static size_t split_tasks(const kvik__request *req, const kvik__memory *mem, const plan *p, int single) {
  if (req->op != KVIK__READ || !kvik__memory_on_device(mem) || p->via_cufile ||
      !kvik__zc_wanted(req->source->zc, req->size))
    return 0;
  if (single) return 1;
  size_t piece = back_piece(req->task_size), pieces = req->size / piece + (req->size % piece != 0);
  size_t others = (size_t)kvik__setting(KVIK_SETTING_NUM_THREADS) - 1;
  return 1 + (pieces - 1 < others ? pieces - 1 : others);
}

/* Task i of `ntasks`, with what every task of the request shares; the range is the request's. */
static io_task request_task(const kvik__request *req, const kvik__memory *mem, kvik_future *future, io_task *tasks,
                            size_t i, size_t ntasks) {
  return (io_task){.base = {i + 1 < ntasks ? &tasks[i + 1].base : NULL, run_io_task}, .future = future, .fn = req->fn,
                   .source = req->source, .mem = *mem, .op = req->op, .buf = req->buf, .size = req->size,
                   .offset = req->offset, .task_size = req->task_size, .read = {.finish = finish_device_read}};
}

/* Lay out the tasks of a request that is not split. */
static void lay_out_tasks(const kvik__request *req, const kvik__memory *mem, const plan *p, kvik_future *future,
                          io_task *tasks, size_t ntasks) {
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
    start += n;
  }
}

/* Lay out the tasks of a split request: each covers the whole request, and takes its pieces. */
static void lay_out_split(const kvik__request *req, const kvik__memory *mem, kvik_future *future, io_task *tasks,
                          size_t ntasks, split *s) {
  *s = (split){.front = req->offset, .back = req->offset + (int64_t)req->size};
  atomic_flag_clear(&s->lock);
  kvik__relay_init(&s->relay);
  for (size_t i = 0; i < ntasks; i++) {
    io_task *t = &tasks[i];
    *t = request_task(req, mem, future, tasks, i, ntasks);
    t->zc = (kvik__zc_read){req->source->zc, req->offset, req->size};
    t->split = s;
    t->front = i == 0;
    if (!t->front) t->read.relay = &s->relay;
  }
}

/* Everything up to running: checks, classification, the owner's acquisition, and a future with
 * its tasks laid out (one task when `single` or for an append, besides a cuFile head and tail). */
static int prepare(kvik__request *req, int single, kvik_future **out, size_t *ntasks_out) {
  kvik__memory mem;
  int rc = kvik__request_check(req, out, &mem);
  if (rc < 0) return rc;
  kvik__source *src = req->source;
  if (kvik__owner_acquire(&src->owner) < 0)
    return kvik__fail(-EBADF, "%s(\"%s\"): handle is closed", req->fn, src->name);
  if (appends(req)) single = 1;
  if (req->task_size == 0) req->task_size = (size_t)kvik__setting(KVIK_SETTING_TASK_SIZE);
  req->task_size = capped_task_size(req->size, req->task_size);
  plan p = plan_request(req, &mem, single);
  size_t split_count = split_tasks(req, &mem, &p, single);
  size_t ntasks = split_count ? split_count : plan_tasks(&p);
  size_t extra = ntasks * sizeof(io_task) + (split_count ? sizeof(split) : 0);
  kvik_future *future = kvik__future_new(&src->owner, ntasks, req->size, extra);
  if (!future) {
    kvik__owner_release(&src->owner);
    return kvik__fail(-ENOMEM, "%s(\"%s\"): out of memory for %zu tasks", req->fn, src->name, ntasks);
  }
  io_task *tasks = kvik__future_extra(future);
  if (split_count) lay_out_split(req, &mem, future, tasks, ntasks, (split *)(void *)(tasks + ntasks));
  else lay_out_tasks(req, &mem, &p, future, tasks, ntasks);
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

int kvik__request_start(kvik__request *req, int blocking, kvik_future **out) {
  if (out) *out = NULL;
  int rc = kvik__init();
  if (rc < 0) return rc;
  size_t task_size = req->task_size ? req->task_size : (size_t)kvik__setting(KVIK_SETTING_TASK_SIZE);
  int inline_run = req->size == 0 || (blocking && (req->size <= task_size || appends(req))) ||
                   req->size < (size_t)kvik__setting(KVIK_SETTING_GDS_THRESHOLD);
  size_t ntasks = 0;
  rc = prepare(req, inline_run, out, &ntasks);
  if (rc < 0) return rc;
  if (inline_run) {
    io_task *tasks = kvik__future_extra(*out);
    for (size_t i = 0; i < ntasks; i++) run_io_task(&tasks[i].base);
  } else if ((rc = submit(*out, ntasks)) < 0) {
    kvik_future_free(*out);
    *out = NULL;
  }
  return rc;
}

ssize_t kvik__request_run(kvik__request *req) {
  kvik_future *future = NULL;
  int rc = kvik__request_start(req, 1, &future);
  if (rc < 0) return rc;
  ssize_t result = kvik_future_wait(future);
  kvik_future_free(future);
  return result;
}
