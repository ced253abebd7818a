/* Requests in the order of a CUDA stream.
 *
 * The rule: no stream ever waits for a thread that makes CUDA calls, and no host function of
 * kvik's waits for anything. A call that waits for the device (cuMemFree, a module load,
 * cuCtxSynchronize) waits for every stream, and other threads' CUDA calls wait behind it: had a
 * stream to wait for a thread that is making CUDA calls, the process would hang. (kvik 0.1 held
 * the stream in a host function until pool threads had copied the data, and it did hang, with
 * CuPy loading a kernel while the read was queued.)
 *
 * So a request queues all of its CUDA work on the caller's thread, during the call, at most a few
 * hundred operations (a stream's queue holds about a thousand; a call that finds it full waits
 * for the device to take some, which it can, as it waits for nothing the call holds back):
 *  - a host function, `start`, that hands the request's host side to KVIK__POOL_HOST (whose
 *    threads make no CUDA call) when the stream reaches it, and returns;
 *  - for device memory, the copies between the buffer and a ring of pinned slots, a chunk each,
 *    ordered against the host side by stream memory operations on flags in pinned memory: the
 *    stream waits (cuStreamWaitValue32) until a host thread has filled a slot, and writes
 *    (cuStreamWriteValue32) when it has emptied one, which the host thread waits for by polling;
 *  - a wait for the flag `done`, which the host side sets at its end, and a host function,
 *    `finish`, that completes the future and retires the ring, whose pinned memory a task on
 *    KVIK__POOL_IO gives back (that makes CUDA calls, which a host function may not).
 * Host memory needs no ring: the host side moves its bytes in place.
 *
 * Where the driver has no stream memory operations, and for appends, the caller's thread
 * synchronises the stream and runs the request before it returns, as KvikIO does. cuFile's own
 * stream API serves files that cuFile serves (its transfer, then a host function that completes
 * the future). */
#define _GNU_SOURCE
#include "stream_io.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "bounce.h"
#include "cuda.h"
#include "error.h"
#include "init.h"
#include "pool.h"
#include "settings.h"
#include "sys.h"

/* A request's chunks: at most this many (larger chunks for larger requests), since each costs
 * the call three queued operations, and a stream queues about a thousand before a call that
 * queues more waits for the device. */
#define MAX_CHUNKS 256u
/* The pinned slots of one request: at most this many bytes, and at least two slots. */
#define MAX_STAGING ((size_t)256 << 20)
#define PAGE ((size_t)4096)

/* The flags, in pinned memory; each a 32-bit word the device reads or writes. Chunk k is in slot
 * k % slots; a slot's flags count chunks: filled = k + 1 once chunk k is in it, avail = k + 1 once
 * chunk k may be put in it. */
enum { FLAG_DONE, FLAG_SLOTS };

typedef struct ring ring;

typedef struct host_task {
  kvik__task base; /* first: the pool hands back a kvik__task pointer */
  ring *ring;
} host_task;

struct ring {
  kvik_future *future;
  const char *fn;
  kvik__source *source;
  kvik__op op;
  char *buf;
  int64_t offset;
  size_t size, chunk;
  uint32_t chunks;
  uint32_t slots; /* 0: host memory, moved in place */
  /* Reads into device memory: from this chunk on, a slot first gets the buffer's own bytes, so
   * that those past the end of file stay as they were. */
  uint32_t prefill_from;
  uint32_t ntasks;
  CUcontext ctx;
  _Atomic uint32_t *flags;
  size_t flags_bytes;
  char **slot;
  _Atomic uint32_t next; /* the next chunk a host task takes */
  _Atomic int failed;    /* a chunk failed: the others only pass their flags on */
  _Atomic uint32_t tasks_left;
  int start_rc; /* the host side could not start: the future's error, and its message */
  char message[KVIK_MESSAGE_MAX];
  int abandoned; /* the call failed after queueing `start`: its error, and its message */
  int abandon_rc;
  char abandon_message[KVIK_MESSAGE_MAX];
  ring *next_retired;
  host_task tasks[];
};

static _Atomic uint32_t *flag(const ring *r, uint32_t i) { return &r->flags[i]; }
static _Atomic uint32_t *filled(const ring *r, uint32_t s) { return &r->flags[FLAG_SLOTS + s]; }
static _Atomic uint32_t *avail(const ring *r, uint32_t s) {
  return &r->flags[FLAG_SLOTS + r->slots + s];
}
static CUdeviceptr device_address(_Atomic uint32_t *word) { return (CUdeviceptr)(uintptr_t)word; }

static size_t chunk_len(const ring *r, uint32_t k) {
  size_t start = (size_t)k * r->chunk;
  return r->size - start < r->chunk ? r->size - start : r->chunk;
}

/* Flags only grow: a raise for chunk k also stands for the earlier chunks of the same slot. */
static void raise_flag(_Atomic uint32_t *word, uint32_t value) {
  uint32_t seen = atomic_load(word);
  while (seen < value && !atomic_compare_exchange_weak(word, &seen, value)) {
  }
}

/* Wait until the device raised *word to `value` (1), or until the request failed (0): then the
 * device may never raise it, as the operations that would were not queued (see abandon()). Polls,
 * from 1 µs up to 100 µs apart (a 4 MiB copy takes about 80 µs at 50 GB/s). */
static int await_flag(const ring *r, _Atomic uint32_t *word, uint32_t value) {
  long pause = 1000;
  while (atomic_load_explicit(word, memory_order_acquire) < value) {
    if (atomic_load(&r->failed)) return 0;
    kvik__pause_ns(pause);
    if (pause < 100000) pause *= 2;
  }
  return 1;
}

/* ---- the host side -------------------------------------------------------------------------- */

/* Wait until a host thread raised *word to `value`, whether or not the request failed. */
static void await_host(_Atomic uint32_t *word, uint32_t value) {
  long pause = 1000;
  while (atomic_load_explicit(word, memory_order_acquire) < value) {
    kvik__pause_ns(pause);
    if (pause < 100000) pause *= 2;
  }
}

/* After a failure: let the stream pass chunk k without moving it. Flags only grow, so the raise
 * for chunk k also lets the stream past chunk k - slots, of the same slot: first wait until the
 * host is done with that one (its move_chunk or pass_chunk raised the flag). Else the stream would
 * copy the slot while a thread still reads into it, or put chunk k's bytes into it while a thread
 * still writes it out, and the file would get them at chunk k - slots's offset.
 * This cannot hang. Chunk k - slots was taken before chunk k (atomic_fetch_add), by a thread that
 * is not waiting here for chunk k, and a taken chunk always ends with a raise: move_chunk's waits
 * for the device end on `failed`, set before any chunk is passed; pass_chunk's wait for chunk
 * k - 2 * slots ends by the same argument, down to a chunk of the first round, which waits for
 * nothing. Where `start` runs the host tasks inline, one after another, the first takes every
 * chunk in order. */
static void pass_chunk(ring *r, uint32_t k) {
  if (!r->slots) return;
  uint32_t s = k % r->slots;
  if (r->op == KVIK__WRITE) {
    if (k >= r->slots) await_host(avail(r, s), k + 1);
    raise_flag(avail(r, s), k + r->slots + 1);
  } else {
    if (k >= r->slots) await_host(filled(r, s), k - r->slots + 1);
    raise_flag(filled(r, s), k + 1);
  }
}

/* Move chunk k between the source and its slot (or the host buffer), in step with the stream. The
 * device raised the flag waited for only once the stream had passed chunk k - slots, so the host
 * was done with it; should the wait end on a failure instead, the chunk is passed. */
static int move_chunk(ring *r, uint32_t k, size_t *done) {
  size_t len = chunk_len(r, k);
  int64_t at = r->offset + (int64_t)((size_t)k * r->chunk);
  if (!r->slots)
    return r->source->transfer(r->source->self, r->op, r->buf + (size_t)k * r->chunk, len, at,
                               done);
  uint32_t s = k % r->slots;
  char *slot = r->slot[s];
  int rc = 0;
  if (r->op == KVIK__WRITE) {
    if (!await_flag(r, filled(r, s), k + 1)) {
      pass_chunk(r, k);
      return 0;
    }
    rc = r->source->transfer(r->source->self, KVIK__WRITE, slot, len, at, done);
    raise_flag(avail(r, s), k + r->slots + 1);
    return rc;
  }
  if (!await_flag(r, avail(r, s), k + 1)) {
    pass_chunk(r, k);
    return 0;
  }
  rc = r->source->transfer(r->source->self, KVIK__READ, slot, len, at, done);
  if (rc == 0 && *done < len && k < r->prefill_from) memset(slot + *done, 0, len - *done);
  raise_flag(filled(r, s), k + 1);
  return rc;
}

/* Take chunks until none is left; the last task to end lets the stream go on. */
static void run_host_task(kvik__task *base) {
  ring *r = ((host_task *)base)->ring;
  size_t bytes = 0;
  int rc = 0;
  uint32_t k;
  while ((k = atomic_fetch_add(&r->next, 1)) < r->chunks) {
    if (atomic_load(&r->failed)) {
      pass_chunk(r, k);
      continue;
    }
    size_t done = 0;
    int one = move_chunk(r, k, &done);
    bytes += done;
    if (one < 0) {
      rc = one;
      atomic_store(&r->failed, 1);
    } else if (r->op == KVIK__READ && done < chunk_len(r, k) && !atomic_load(&r->failed)) {
      kvik__future_read_ended(r->future, (size_t)k * r->chunk + done);
    }
  }
  kvik__future_task_done(r->future, bytes, rc);
  if (atomic_fetch_sub(&r->tasks_left, 1) == 1) raise_flag(flag(r, FLAG_DONE), 1);
}

/* ---- rings that the streams have passed ------------------------------------------------------ */

static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
static ring *retired;      /* guarded by retired_lock */
static int release_queued; /* release_task is queued and has not started; guarded by retired_lock */
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t *probe_page; /* pinned, made once; guarded by probe_lock */

static void ring_free(ring *r) {
  if (!r) return;
  int pushed = r->ctx && kvik__context_push(r->fn, r->ctx) == 0;
  for (uint32_t s = 0; s < r->slots && r->slot; s++) kvik__pinned_put(r->slot[s], r->chunk);
  if (r->flags) kvik__pinned_put((void *)r->flags, r->flags_bytes);
  if (pushed) kvik__context_pop();
  free(r->slot);
  free(r);
}

/* Take the retired rings; `release_started`: the caller is release_task, which may be queued
 * again from now on (not before: a task must not be in the queue twice). */
static ring *take_retired(int release_started) {
  pthread_mutex_lock(&retired_lock);
  ring *list = retired;
  retired = NULL;
  if (release_started) release_queued = 0;
  pthread_mutex_unlock(&retired_lock);
  return list;
}

static void free_rings(ring *list) {
  for (ring *next; list; list = next) {
    next = list->next_retired;
    ring_free(list);
  }
}

void kvik__stream_release_retired(void) { free_rings(take_retired(0)); }

static void run_release(kvik__task *task) {
  (void)task;
  free_rings(take_retired(1));
}

static kvik__task release_task = {NULL, run_release};

/* From a host function: no CUDA call here, so the release runs on KVIK__POOL_IO (or, should that
 * fail to start, at the next stream-ordered call). */
static void retire(ring *r) {
  pthread_mutex_lock(&retired_lock);
  r->next_retired = retired;
  retired = r;
  int queue = !release_queued;
  release_queued = 1;
  if (queue && kvik__pool_submit(KVIK__POOL_IO, &release_task, &release_task) < 0)
    release_queued = 0;
  pthread_mutex_unlock(&retired_lock);
}

static void fork_child(void) {
  pthread_mutex_init(&retired_lock, NULL);
  pthread_mutex_init(&probe_lock, NULL);
  probe_page = NULL;
  retired = NULL; /* pinned memory of the parent's CUDA, which the child cannot use */
  release_queued = 0;
}

KVIK__ON_LOAD(register_fork_handlers) {
  static const kvik__fork_handlers handlers = {NULL, NULL, fork_child};
  kvik__atfork_register(KVIK__FORK_STREAM, &handlers);
}

/* ---- the host functions ---------------------------------------------------------------------- */

static void start(void *arg) {
  ring *r = arg;
  int rc = kvik__pool_submit(KVIK__POOL_HOST, &r->tasks[0].base, &r->tasks[r->ntasks - 1].base);
  if (rc == 0) return;
  r->start_rc = rc;
  snprintf(r->message, sizeof r->message, "%s(\"%s\"): %s", r->fn, r->source->name,
           kvik_last_error());
  atomic_store(&r->failed, 1);
  for (uint32_t i = 0; i < r->ntasks; i++)
    run_host_task(&r->tasks[i].base); /* nothing to wait for */
}

/* The future's last share; for an abandoned request, whose caller got the error, the future is
 * freed here. */
static void finish(void *arg) {
  ring *r = arg;
  kvik_future *future = r->future;
  int abandoned = r->abandoned, rc = abandoned ? r->abandon_rc : r->start_rc;
  if (rc < 0) kvik__set_message(abandoned ? r->abandon_message : r->message);
  retire(r);
  kvik__future_task_done(future, 0, rc);
  if (abandoned) kvik_future_free(future);
}

/* ---- the call ------------------------------------------------------------------------------- */

/* The context a stream belongs to; for the default stream the current one, else that of the
 * memory, else device 0's primary context. */
static int stream_context(const char *fn, const kvik__cuda_api *cu, void *stream,
                          const kvik__memory *mem, CUcontext *ctx) {
  *ctx = NULL;
  /* Handles 0, 1 and 2 stand for the default, legacy and per-thread default streams. */
  if ((uintptr_t)stream > 2)
    return kvik__cuda_check(cu->cuStreamGetCtx((CUstream)stream, ctx), fn, "cuStreamGetCtx");
  int rc = kvik__cuda_check(cu->cuCtxGetCurrent(ctx), fn, "cuCtxGetCurrent");
  if (rc < 0 || *ctx) return rc;
  if (mem->ctx) {
    *ctx = mem->ctx;
    return 0;
  }
  return kvik__primary_context(fn, 0, ctx);
}

static uint32_t ceil_div(size_t a, size_t b) { return (uint32_t)(a / b + (a % b != 0)); }

/* The chunks, slots and host tasks of a request. */
static void ring_shape(ring *r, const kvik__request *req, const kvik__memory *mem,
                       int64_t source_size) {
  size_t task = req->task_size ? req->task_size : (size_t)kvik__setting(KVIK_SETTING_TASK_SIZE);
  size_t floor = req->size / MAX_CHUNKS + 1, chunk = task > floor ? task : floor;
  r->chunk = (chunk + PAGE - 1) / PAGE * PAGE;
  r->chunks = ceil_div(req->size, r->chunk);
  uint32_t threads = (uint32_t)kvik__setting(KVIK_SETTING_NUM_THREADS);
  r->ntasks = r->chunks < threads ? r->chunks : threads;
  if (!kvik__memory_on_device(mem)) return;
  /* Two slots more than threads: the stream empties them in order, so a thread that finished a
   * chunk finds a free slot while a slower one still reads an earlier chunk. (Two a thread ran
   * slower on an H100: bench/stream_read.py, 0.64x against 0.83x.) */
  uint32_t most = (uint32_t)(MAX_STAGING / r->chunk), want = threads + 2;
  if (want > most) want = most;
  if (want < 2) want = 2;
  r->slots = r->chunks < want ? r->chunks : want;
  int64_t known = source_size - req->offset;
  r->prefill_from = source_size < 0 || known <= 0 ? 0 : (uint32_t)((size_t)known / r->chunk);
}

/* A ring for the request in *out, its pinned memory taken (the context current). Returns 0 or a
 * negative code with a message. */
static int ring_new(const kvik__request *req, const kvik__memory *mem, CUcontext ctx,
                    int64_t source_size, ring **out) {
  ring shape = {.ctx = ctx};
  ring_shape(&shape, req, mem, source_size);
  ring *r = *out = kvik__calloc(1, sizeof *r + shape.ntasks * sizeof r->tasks[0]);
  if (!r) return kvik__fail(-ENOMEM, "%s(\"%s\"): out of memory", req->fn, req->source->name);
  *r = shape;
  r->fn = req->fn;
  r->source = req->source;
  r->op = req->op;
  r->buf = req->buf;
  r->offset = req->offset;
  r->size = req->size;
  atomic_init(&r->tasks_left, r->ntasks);
  for (uint32_t i = 0; i < r->ntasks; i++)
    r->tasks[i] = (host_task){{i + 1 < r->ntasks ? &r->tasks[i + 1].base : NULL, run_host_task}, r};
  r->flags_bytes =
      ((FLAG_SLOTS + 2 * (size_t)r->slots) * sizeof(uint32_t) + PAGE - 1) / PAGE * PAGE;
  int rc = kvik__pinned_get(req->fn, r->flags_bytes, (void **)&r->flags);
  if (rc == 0 && r->slots && !(r->slot = kvik__calloc(r->slots, sizeof *r->slot)))
    rc = kvik__fail(-ENOMEM, "%s(\"%s\"): out of memory", req->fn, req->source->name);
  for (uint32_t s = 0; rc == 0 && s < r->slots; s++)
    rc = kvik__pinned_get(req->fn, r->chunk, (void **)&r->slot[s]);
  if (rc < 0) {
    ring_free(r);
    *out = NULL;
    return rc;
  }
  memset((void *)r->flags, 0, r->flags_bytes);
  return 0;
}

typedef struct queue {
  const kvik__cuda_api *cu;
  CUstream stream;
  const char *fn;
} queue;

static int wait_value(const queue *q, _Atomic uint32_t *word, uint32_t value) {
  return kvik__cuda_check(
      q->cu->cuStreamWaitValue32(q->stream, device_address(word), value, CU_STREAM_WAIT_VALUE_GEQ),
      q->fn, "cuStreamWaitValue32");
}

static int write_value(const queue *q, _Atomic uint32_t *word, uint32_t value) {
  return kvik__cuda_check(q->cu->cuStreamWriteValue32(q->stream, device_address(word), value,
                                                      CU_STREAM_WRITE_VALUE_DEFAULT),
                          q->fn, "cuStreamWriteValue32");
}

static int host_func(const queue *q, CUhostFn fn, void *arg) {
  return kvik__cuda_check(q->cu->cuLaunchHostFunc(q->stream, fn, arg), q->fn, "cuLaunchHostFunc");
}

static char *chunk_at(const ring *r, uint32_t k) { return r->buf + (size_t)k * r->chunk; }

static int to_device(const queue *q, const ring *r, uint32_t k) {
  return kvik__cuda_check(q->cu->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)chunk_at(r, k),
                                                   r->slot[k % r->slots], chunk_len(r, k),
                                                   q->stream),
                          q->fn, "cuMemcpyHtoDAsync");
}

static int to_host(const queue *q, const ring *r, uint32_t k) {
  return kvik__cuda_check(q->cu->cuMemcpyDtoHAsync(r->slot[k % r->slots],
                                                   (CUdeviceptr)(uintptr_t)chunk_at(r, k),
                                                   chunk_len(r, k), q->stream),
                          q->fn, "cuMemcpyDtoHAsync");
}

/* Make slot k % slots available for chunk k: a slot's first chunk at once, unless it gets the
 * buffer's own bytes first; else once the stream passed what comes before (the copy of chunk
 * k - slots out of it, the buffer's bytes into it). */
static int offer_slot(const queue *q, ring *r, uint32_t k) {
  uint32_t s = k % r->slots;
  int prefill = k >= r->prefill_from;
  if (k < r->slots && !prefill) {
    raise_flag(avail(r, s), k + 1);
    return 0;
  }
  int rc = prefill ? to_host(q, r, k) : 0;
  return rc < 0 ? rc : write_value(q, avail(r, s), k + 1);
}

/* The stream's part of a read into device memory: each chunk, once a host thread filled its
 * slot, is copied to the device, and the slot offered to the chunk `slots` further on. */
static int queue_device_read(const queue *q, ring *r) {
  int rc = 0;
  for (uint32_t k = 0; rc == 0 && k < r->slots; k++) rc = offer_slot(q, r, k);
  for (uint32_t k = 0; rc == 0 && k < r->chunks; k++) {
    rc = wait_value(q, filled(r, k % r->slots), k + 1);
    if (rc == 0) rc = to_device(q, r, k);
    if (rc == 0 && k + r->slots < r->chunks) rc = offer_slot(q, r, k + r->slots);
  }
  return rc;
}

/* The stream's part of a write from device memory: each chunk, once its slot is free, is copied
 * into it, and the slot marked filled for a host thread to write. */
static int queue_device_write(const queue *q, ring *r) {
  int rc = 0;
  for (uint32_t k = 0; rc == 0 && k < r->chunks; k++) {
    uint32_t s = k % r->slots;
    if (k >= r->slots) rc = wait_value(q, avail(r, s), k + 1);
    if (rc == 0) rc = to_host(q, r, k);
    if (rc == 0) rc = write_value(q, filled(r, s), k + 1);
  }
  return rc;
}

static int queue_body(const queue *q, ring *r) {
  int rc = 0;
  if (r->slots) rc = r->op == KVIK__READ ? queue_device_read(q, r) : queue_device_write(q, r);
  if (rc == 0) rc = wait_value(q, flag(r, FLAG_DONE), 1);
  if (rc == 0) rc = host_func(q, finish, r);
  return rc;
}

/* The call failed after `start` was queued: what is queued must still pass, and the host tasks
 * must end before the ring and the future go. Marked failed, the host tasks move nothing more,
 * stop waiting for flags that the operations not queued would have raised, and raise the flags
 * the queued ones wait for; the copies of a read into device memory then put stale bytes of the
 * slots into the buffer, and a write may have written part of the range (kvik.h says so).
 * `finish`, queued behind the wait for `done`, frees both; should even that not queue, both are
 * left, as the host tasks use them. */
static void abandon(const queue *q, ring *r, int rc) {
  char message[KVIK_MESSAGE_MAX]; /* the caller's; the ring may be gone once `finish` is queued */
  snprintf(message, sizeof message, "%s", kvik_last_error());
  memcpy(r->abandon_message, message, sizeof message);
  r->abandoned = 1;
  r->abandon_rc = rc;
  atomic_store(&r->failed, 1);
  if (wait_value(q, flag(r, FLAG_DONE), 1) == 0) host_func(q, finish, r);
  kvik__set_message(message);
}

#define CUDA_ERROR_NOT_SUPPORTED 801

/* The word a request's first operation writes (see queue_ring). */
static int probe_word(const char *fn, _Atomic uint32_t **word) {
  pthread_mutex_lock(&probe_lock);
  int rc = probe_page ? 0 : kvik__pinned_get(fn, PAGE, (void **)&probe_page);
  *word = probe_page;
  pthread_mutex_unlock(&probe_lock);
  return rc;
}

/* Queue the ring on the stream, which owns it from then on: freed here when nothing could be
 * queued, else retired by `finish`; it must not be touched once `start` is queued (the stream may
 * be through it at once). *unsupported says that the driver has no stream memory operations
 * (then nothing was queued). */
static int queue_ring(const queue *q, ring *r, kvik__request *req, int *unsupported,
                      kvik_future **out) {
  /* Made first: past `start` only a CUDA call can fail. */
  kvik_future *future = kvik__future_new(&req->source->owner, r->ntasks + 1, req->size, 0);
  if (!future) {
    *unsupported = 0;
    kvik__owner_release(&req->source->owner);
    ring_free(r);
    return kvik__fail(-ENOMEM, "%s(\"%s\"): out of memory", req->fn, req->source->name);
  }
  r->future = future;
  /* A write into a word of its own asks the driver for stream memory operations before anything
   * that matters is queued (not into the ring, which a failure below frees at once). */
  _Atomic uint32_t *word;
  int rc = probe_word(q->fn, &word);
  CUresult probe = rc < 0 ? CUDA_SUCCESS
                          : q->cu->cuStreamWriteValue32(q->stream, device_address(word), 0,
                                                        CU_STREAM_WRITE_VALUE_DEFAULT);
  *unsupported = probe == CUDA_ERROR_NOT_SUPPORTED;
  if (rc == 0) rc = kvik__cuda_check(probe, q->fn, "cuStreamWriteValue32");
  if (rc == 0) rc = host_func(q, start, r);
  if (rc < 0) { /* `start` was not queued: nothing runs */
    for (uint32_t i = 0; i <= r->ntasks; i++) kvik__future_task_done(future, 0, rc);
    kvik_future_free(future);
    ring_free(r);
    return rc;
  }
  rc = queue_body(q, r);
  if (rc < 0) abandon(q, r, rc);
  else *out = future;
  return rc;
}

/* Where streams cannot wait for host threads: wait for the stream here, then run the request. */
static int run_after_stream(const queue *q, kvik__request *req, kvik_future **out) {
  int rc = kvik__cuda_check(q->cu->cuStreamSynchronize(q->stream), q->fn, "cuStreamSynchronize");
  if (rc == 0) rc = kvik__request_start(req, 1, out);
  if (rc == 0) kvik_future_wait(*out);
  return rc;
}

/* ---- cuFile's stream API -------------------------------------------------------------------- */

typedef struct cufile_op {
  kvik_future *future;
  const char *fn;
  kvik__gds_file *gds;
  kvik__op op;
  kvik__gds_async async; /* cuFile writes the result here */
} cufile_op;

/* Runs on the driver's callback thread once the stream passed the cuFile transfer. */
static void finish_cufile(void *arg) {
  cufile_op *c = arg;
  ssize_t result = kvik__gds_async_result(c->gds, c->fn, c->op, &c->async);
  kvik__future_task_done(c->future, result < 0 ? 0 : (size_t)result, result < 0 ? (int)result : 0);
}

/* Queue cuFile's transfer and the host function that completes the future, which takes over the
 * caller's acquisition of the source (released here on failure). */
static int queue_cufile(const queue *q, kvik__request *req, const kvik__memory *mem,
                        kvik_future **out) {
  kvik__source *src = req->source;
  kvik_future *future = kvik__future_new(&src->owner, 1, req->size, sizeof(cufile_op));
  if (!future) {
    kvik__owner_release(&src->owner);
    return kvik__fail(-ENOMEM, "%s(\"%s\"): out of memory", req->fn, src->name);
  }
  cufile_op *c = kvik__future_extra(future);
  *c = (cufile_op){future, req->fn, src->gds, req->op, {0}};
  kvik__gds_io io = {.fn = req->fn,
                     .op = req->op,
                     .mem = mem,
                     .dev = req->buf,
                     .size = req->size,
                     .offset = req->offset};
  int rc = kvik__gds_enqueue(src->gds, &io, q->stream, &c->async);
  if (rc == 0 && (rc = host_func(q, finish_cufile, c)) < 0)
    q->cu->cuStreamSynchronize(q->stream); /* cuFile's transfer writes into the future */
  if (rc < 0) {
    kvik__future_task_done(future, 0, rc);
    kvik_future_free(future);
    return rc;
  }
  *out = future;
  return 0;
}

/* ---- the entry point ------------------------------------------------------------------------ */

static int queue_request(const queue *q, kvik__request *req, const kvik__memory *mem,
                         int64_t source_size, CUcontext ctx, kvik_future **out) {
  /* An append waits its turn behind the file's other appends, whose threads may make CUDA calls
   * (kvik__append_enter): no stream may wait for it. Nor may cuFile write it, at an offset. */
  if (req->source->append && req->op == KVIK__WRITE) return run_after_stream(q, req, out);
  if (req->source->gds && kvik__memory_on_device(mem) &&
      kvik__gds_async_possible(req->source->gds, mem)) {
    if (kvik__owner_acquire(&req->source->owner) < 0)
      return kvik__fail(-EBADF, "%s(\"%s\"): handle is closed", req->fn, req->source->name);
    return queue_cufile(q, req, mem, out);
  }
  if (!q->cu->cuStreamWaitValue32 || !q->cu->cuStreamWriteValue32)
    return run_after_stream(q, req, out);
  ring *r;
  int rc = ring_new(req, mem, ctx, source_size, &r);
  if (rc < 0) return rc;
  if (kvik__owner_acquire(&req->source->owner) < 0) {
    ring_free(r);
    return kvik__fail(-EBADF, "%s(\"%s\"): handle is closed", req->fn, req->source->name);
  }
  int unsupported;
  rc = queue_ring(q, r, req, &unsupported, out);
  return rc < 0 && unsupported ? run_after_stream(q, req, out) : rc;
}

int kvik__stream_request_start(kvik__request *req, void *stream, int64_t source_size,
                               kvik_future **out) {
  if (out) *out = NULL;
  kvik__memory mem;
  int rc = kvik__request_check(req, out, &mem);
  if (rc < 0) return rc;
  if (req->size == 0)
    return kvik__request_start(req, 1, out); /* nothing for the stream to wait for */
  const kvik__cuda_api *cu = kvik__cuda(req->fn);
  if (!cu) return KVIK_ECUDA_UNAVAILABLE;
  kvik__stream_release_retired();
  CUcontext ctx;
  rc = stream_context(req->fn, cu, stream, &mem, &ctx);
  if (rc == 0) rc = kvik__context_push(req->fn, ctx);
  if (rc < 0) return rc;
  queue q = {cu, (CUstream)stream, req->fn};
  rc = queue_request(&q, req, &mem, source_size, ctx, out);
  kvik__context_pop();
  return rc;
}
