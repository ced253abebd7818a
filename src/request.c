/* Requests: checked, classified, split into tasks, run now or in stream order. */
#define _GNU_SOURCE
#include "request.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>

#include "cuda.h"
#include "error.h"
#include "init.h"
#include "pool.h"
#include "settings.h"

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
  size_t task_size;
  int map_fd; /* the descriptor zero-copy reads may map, or -1 (see KVIK_SETTING_ZERO_COPY_READ) */
  kvik__device_read read; /* the state of a read into device memory */
} io_task;

static void finish_device_read(kvik__device_read *read, size_t bytes, int rc) {
  io_task *task = (io_task *)((char *)read - offsetof(io_task, read));
  kvik__future_task_done(task->future, bytes, rc);
}

/* Reads into device memory on pool threads may complete after the task returns (see
 * kvik__read_to_device); everything else completes here, after the thread's deferred reads
 * (kvik__device_write settles them itself). */
static void run_io_task(kvik__task *base) {
  io_task *t = (io_task *)base;
  if (kvik__memory_on_device(&t->mem) && t->op == KVIK__READ) {
    kvik__read_to_device(t->fn, &t->mem, t->buf, t->size, t->offset, t->task_size, t->source->transfer,
                         t->source->self, t->map_fd, kvik__pool_in_worker(), &t->read);
    return;
  }
  size_t done = 0;
  int rc;
  if (kvik__memory_on_device(&t->mem)) {
    rc = kvik__device_write(t->fn, &t->mem, t->buf, t->size, t->offset, t->task_size, t->source->transfer,
                            t->source->self, &done);
  } else {
    kvik__device_settle(); /* a host task may take long: finish the device reads before it */
    rc = t->source->transfer(t->source->self, t->op, t->buf, t->size, t->offset, &done);
  }
  kvik__future_task_done(t->future, done, rc);
}

static int check(const kvik__request *req, kvik_future **out) {
  const char *fn = req->fn, *name = req->source->name;
  if (!req->buf && req->size > 0) return kvik__fail(-EINVAL, "%s(\"%s\"): NULL buffer for %zu bytes", fn, name, req->size);
  if (req->offset < 0)
    return kvik__fail(-EINVAL, "%s(\"%s\"): negative offset %lld", fn, name, (long long)req->offset);
  if (req->size > (size_t)SSIZE_MAX || (uint64_t)req->offset + req->size > (uint64_t)INT64_MAX)
    return kvik__fail(-EINVAL, "%s(\"%s\"): %zu bytes at offset %lld overflow the largest file offset", fn, name,
                      req->size, (long long)req->offset);
  if (!out) return kvik__fail(-EINVAL, "%s(\"%s\"): NULL future", fn, name);
  return kvik__init();
}

/* Everything up to running: checks, classification, the owner's acquisition, the append offset,
 * and a future with its tasks laid out (one task when `single`). Zero-copy reads are left out of
 * requests in stream order: their registration would wait for the stream that waits for them. */
static int prepare(kvik__request *req, int single, int stream_ordered, kvik_future **out, size_t *ntasks_out) {
  int rc = check(req, out);
  kvik__memory mem;
  if (rc == 0) rc = kvik__memory_classify(req->fn, req->buf, &mem);
  if (rc < 0) return rc;
  kvik__source *src = req->source;
  if (kvik__owner_acquire(&src->owner) < 0)
    return kvik__fail(-EBADF, "%s(\"%s\"): handle is closed", req->fn, src->name);
  if (src->append_end && req->op == KVIK__WRITE) req->offset = atomic_fetch_add(src->append_end, (int64_t)req->size);
  if (req->task_size == 0) req->task_size = (size_t)kvik__setting(KVIK_SETTING_TASK_SIZE);
  size_t ts = req->task_size, ntasks = single ? 1 : req->size / ts + (req->size % ts != 0);
  if (ntasks == 0) ntasks = 1;
  kvik_future *future = kvik__future_new(&src->owner, ntasks, req->size, ntasks * sizeof(io_task));
  if (!future) {
    kvik__owner_release(&src->owner);
    return kvik__fail(-ENOMEM, "%s(\"%s\"): out of memory for %zu tasks", req->fn, src->name, ntasks);
  }
  io_task *tasks = kvik__future_extra(future);
  size_t piece = single ? req->size : ts;
  for (size_t i = 0; i < ntasks; i++) {
    size_t start = i * piece;
    tasks[i] = (io_task){{i + 1 < ntasks ? &tasks[i + 1].base : NULL, run_io_task}, future, req->fn, src, mem, req->op,
                         req->buf + start, req->size - start < piece ? req->size - start : piece,
                         req->offset + (int64_t)start, ts, stream_ordered ? -1 : src->fd,
                         {finish_device_read, req->fn, 0, 0, 0, 0}};
  }
  *out = future;
  *ntasks_out = ntasks;
  return 0;
}

/* Hand the tasks to the pool. If it cannot take them, they fail, the future completes, and the
 * caller gets the error. */
static int submit(kvik_future *future, size_t ntasks) {
  io_task *tasks = kvik__future_extra(future);
  int rc = kvik__pool_submit(&tasks[0].base, &tasks[ntasks - 1].base);
  if (rc < 0)
    for (size_t i = 0; i < ntasks; i++) kvik__future_task_done(future, 0, rc);
  return rc;
}

int kvik__request_start(kvik__request *req, int blocking, kvik_future **out) {
  if (out) *out = NULL;
  int rc = kvik__init();
  if (rc < 0) return rc;
  size_t task_size = req->task_size ? req->task_size : (size_t)kvik__setting(KVIK_SETTING_TASK_SIZE);
  int inline_run = req->size == 0 || (blocking && req->size <= task_size) ||
                   req->size < (size_t)kvik__setting(KVIK_SETTING_GDS_THRESHOLD);
  size_t ntasks;
  rc = prepare(req, inline_run, 0, out, &ntasks);
  if (rc < 0) return rc;
  if (inline_run) {
    run_io_task(&((io_task *)kvik__future_extra(*out))->base);
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

/* ---- stream order ------------------------------------------------------------------------ */

/* Runs on the driver's callback thread when the stream reaches the request: hands the tasks to
 * the pool and holds the stream until they are done. It makes no CUDA call itself (the driver
 * forbids that here); the pool threads make the copies on streams of their own, which never
 * wait for this one. */
static void stream_gate(void *arg) {
  kvik_future *future = arg;
  submit(future, kvik__future_tasks(future));
  kvik__future_await_release(future);
}

/* The context a stream belongs to; for the default stream the current one, else that of the
 * memory, else device 0's primary context. */
static int stream_context(const char *fn, const kvik__cuda_api *cu, void *stream, const kvik__memory *mem,
                          CUcontext *ctx) {
  *ctx = NULL;
  /* Handles 0, 1 and 2 stand for the default, legacy and per-thread default streams. */
  if ((uintptr_t)stream > 2) return kvik__cuda_check(cu->cuStreamGetCtx((CUstream)stream, ctx), fn, "cuStreamGetCtx");
  int rc = kvik__cuda_check(cu->cuCtxGetCurrent(ctx), fn, "cuCtxGetCurrent");
  if (rc < 0 || *ctx) return rc;
  if (mem->ctx) {
    *ctx = mem->ctx;
    return 0;
  }
  return kvik__primary_context(fn, 0, ctx);
}

int kvik__request_start_on_stream(kvik__request *req, void *stream, kvik_future **out) {
  size_t ntasks;
  int rc = prepare(req, 0, 1, out, &ntasks);
  if (rc < 0) return rc;
  kvik_future *future = *out;
  *out = NULL;
  const kvik__cuda_api *cu = kvik__cuda(req->fn);
  CUcontext ctx;
  rc = cu ? stream_context(req->fn, cu, stream, &((const io_task *)kvik__future_extra(future))->mem, &ctx)
          : KVIK_ECUDA_UNAVAILABLE;
  if (rc == 0) rc = kvik__context_push(req->fn, ctx);
  int held = 0;
  if (rc == 0) {
    kvik__future_hold(future);
    held = 1;
    rc = kvik__cuda_check(cu->cuLaunchHostFunc((CUstream)stream, stream_gate, future), req->fn, "cuLaunchHostFunc");
    kvik__context_pop();
  }
  if (rc < 0) {
    for (size_t i = 0; i < ntasks; i++) kvik__future_task_done(future, 0, rc);
    if (held) kvik__future_await_release(future);
    kvik_future_free(future);
    return rc;
  }
  *out = future;
  return 0;
}
