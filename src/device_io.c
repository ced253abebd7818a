/* Pipelined device transfers, and the per-thread streams they run on. */
#define _GNU_SOURCE
#include "device_io.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>

#include "bounce.h"
#include "error.h"
#include "init.h"
#include "numa.h"
#include "pool.h"
#include "settings.h"
#include "sys.h"
#include "zero_copy.h"

#define MIN_CHUNK ((size_t)256 << 10)

/* Reads into the slots of at least this many bytes are timed for the zero-copy cost model
 * (kvik__zc_note_pread): smaller ones measure the system call more than the copy. */
#define MIN_TIMED_READ ((size_t)1 << 20)
#define PAGE 4096
#define MAX_LANES 8

/* A bounce buffer of a lane, and the read that its last copy to the device belongs to. */
typedef struct slot {
  char *buf;
  kvik__device_read *owner; /* whose copy from buf may still run; NULL when none may */
  size_t bytes;             /* that copy's size */
  kvik__handoff *handoff;   /* which took that copy to queue it; NULL when the lane's thread did */
  kvik__handed_copy copy;   /* that copy, as handed off */
} slot;

/* A thread's stream in one context, with two bounce buffers and an event each that marks the
 * buffer's last copy. Each thread has its own, so threads never wait on each other's copies; and
 * one per context, so that a thread's copies to one device never wait for another's. A read of
 * more than one chunk takes both buffers as one pinned allocation, registered once: a new
 * process's first read registers for every thread, and each more buffer per thread made that
 * read 6-8 ms slower on an H200 (docs/benchmarks.md). A read of one chunk takes one buffer, as
 * kvikio does (kvik_bounce_buffer_free then counts its size). */
typedef struct kvik__lane {
  CUcontext ctx;
  unsigned long long ctx_id; /* tells a context from a later one with the same handle */
  CUdevice device;           /* ctx's: its bounce buffers come from the device's own cache */
  CUstream stream;
  CUevent copied[2];
  CUevent direct_copied; /* after the direct copies */
  slot slot[2];          /* reads only; writes take buffers of their own */
  char *pair;            /* both slots' buffers, 2 x chunk bytes, where one allocation holds them */
  size_t chunk;          /* the size of the slots' buffers */
  unsigned next;         /* the slot reads fill next: the one whose copy was queued first */
  int deferred;          /* its slots may hold copies of reads not yet finished */
} lane;

typedef struct thread_lanes {
  lane lane[MAX_LANES];
  unsigned count;
  unsigned next_evicted; /* when all are taken, the oldest makes room */
} thread_lanes;

static _Thread_local thread_lanes lanes;
static pthread_key_t lanes_key; /* only for its destructor, which frees a thread's lanes */
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

/* ---- handed copies (see kvik__handoff) ----------------------------------------------------- */

/* Hand slot s's copy of its bytes to `dst` to `handoff`, if it takes it. Returns whether it did. */
static int hand_off(kvik__handoff *handoff, lane *l, unsigned s, CUdeviceptr dst) {
  slot *sl = &l->slot[s];
  assert(!sl->handoff); /* its last handed copy was waited for, when it was reaped */
  kvik__handed_copy *c = &sl->copy;
  c->dst = dst;
  c->src = sl->buf;
  c->bytes = sl->bytes;
  c->stream = l->stream;
  c->event = l->copied[s];
  int taken = handoff->take(handoff, c);
  sl->handoff = taken ? handoff : NULL;
  return taken;
}

/* Wait until the slot's copy was queued, if it was handed off. Returns the result of its calls;
 * after a failure the copy may run without its event, so the caller waits for the stream. */
static CUresult wait_handed(slot *sl) {
  kvik__handoff *handoff = sl->handoff;
  if (!handoff) return CUDA_SUCCESS;
  handoff->wait(handoff, &sl->copy);
  sl->handoff = NULL;
  return sl->copy.result;
}

/* Give the slots' buffers back to the device's cache. Their copies must be done. */
static void give_back_buffers(lane *l) {
  if (l->pair) {
    kvik__device_pinned_put(l->device, l->pair, 2 * l->chunk);
  } else {
    for (int i = 0; i < 2; i++) kvik__device_pinned_put(l->device, l->slot[i].buf, l->chunk);
  }
  l->pair = l->slot[0].buf = l->slot[1].buf = NULL;
}

/* Destroy the lane's stream and events, unless its context is gone: then they went with it, and
 * its handle may now name another context. */
static void destroy_lane(const kvik__cuda_api *cu, lane *l) {
  for (int i = 0; i < 2; i++) wait_handed(&l->slot[i]);
  if (kvik__context_id(l->ctx) != l->ctx_id || cu->cuCtxPushCurrent(l->ctx) != CUDA_SUCCESS) return;
  if (l->stream) cu->cuStreamSynchronize(l->stream);
  give_back_buffers(l);
  for (int i = 0; i < 2; i++)
    if (l->copied[i]) cu->cuEventDestroy(l->copied[i]);
  if (l->direct_copied) cu->cuEventDestroy(l->direct_copied);
  if (l->stream) cu->cuStreamDestroy(l->stream);
  CUcontext popped;
  cu->cuCtxPopCurrent(&popped);
  *l = (lane){0};
}

static void destroy_thread_lanes(void *arg) {
  thread_lanes *ls = arg;
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  if (!cu) return;
  for (unsigned i = 0; i < ls->count; i++) destroy_lane(cu, &ls->lane[i]);
  ls->count = 0;
}

static void create_key(void) { pthread_key_create(&lanes_key, destroy_thread_lanes); }

/* Called with l->ctx current. */
static int create_lane(const char *fn, const kvik__cuda_api *cu, lane *l) {
  int rc = kvik__cuda_check(cu->cuCtxGetDevice(&l->device), fn, "cuCtxGetDevice");
  if (rc == 0)
    rc = kvik__cuda_check(cu->cuStreamCreate(&l->stream, CU_STREAM_NON_BLOCKING), fn,
                          "cuStreamCreate");
  for (int i = 0; i < 2 && rc == 0; i++)
    rc = kvik__cuda_check(cu->cuEventCreate(&l->copied[i], KVIK__EVENT_FLAGS), fn, "cuEventCreate");
  if (rc == 0)
    rc = kvik__cuda_check(cu->cuEventCreate(&l->direct_copied, KVIK__EVENT_FLAGS), fn,
                          "cuEventCreate");
  if (rc < 0) destroy_lane(cu, l);
  return rc;
}

/* This thread's lane for `ctx`, which is current. A lane whose context was destroyed (same
 * handle, other ID) is forgotten: its stream and events died with that context. Lanes of other
 * contexts are settled first only where one is moved or evicted: a read that deferred copies
 * to one device does not wait for them when the thread goes on to another device. */
static int lane_for(const char *fn, CUcontext ctx, lane **out) {
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  unsigned long long id = kvik__context_id(ctx);
  for (unsigned i = 0; i < lanes.count; i++) {
    if (lanes.lane[i].ctx != ctx) continue;
    if (lanes.lane[i].ctx_id == id) {
      *out = &lanes.lane[i];
      return 0;
    }
    kvik__device_settle(); /* the last lane moves into this one's place */
    for (int s = 0; s < 2; s++) wait_handed(&lanes.lane[i].slot[s]); /* takers write to slots */
    lanes.lane[i] = lanes.lane[--lanes.count];
    break;
  }
  if (lanes.count == MAX_LANES) kvik__device_settle(); /* one is evicted */
  pthread_once(&key_once, create_key);
  pthread_setspecific(lanes_key, &lanes);
  lane *l;
  if (lanes.count < MAX_LANES) {
    l = &lanes.lane[lanes.count++];
  } else {
    l = &lanes.lane[lanes.next_evicted++ % MAX_LANES];
    destroy_lane(cu, l);
  }
  /* Nothing of a forgotten lane is kept: its buffers, if its context died, died with it. */
  *l = (lane){.ctx = ctx, .ctx_id = id};
  int rc = create_lane(fn, cu, l);
  if (rc < 0) {
    *l = lanes.lane[--lanes.count];
    return rc;
  }
  *out = l;
  return 0;
}

/* One transfer's state: its lane, its two bounce buffers (the second taken only when needed). */
typedef struct pipeline {
  const char *fn;
  const kvik__cuda_api *cu;
  lane *lane;
  char *buf[2];
  size_t chunk;
  kvik__host_transfer transfer;
  void *source;
} pipeline;

/* Take bounce buffer b on first use. Returns 0 or the allocation's code. */
static int take_buffer(pipeline *p, unsigned b) {
  if (p->buf[b]) return 0;
  void *buf;
  int rc = kvik__device_pinned_get(p->fn, p->lane->device, p->chunk, &buf);
  p->buf[b] = buf;
  return rc;
}

static int wait_copied(pipeline *p, unsigned b) {
  return kvik__cuda_check(p->cu->cuEventSynchronize(p->lane->copied[b]), p->fn,
                          "cuEventSynchronize");
}

static int mark_copied(pipeline *p, unsigned b) {
  return kvik__cuda_check(p->cu->cuEventRecord(p->lane->copied[b], p->lane->stream), p->fn,
                          "cuEventRecord");
}

/* Wait for the lane's copies, which must end before their buffers are reused, also after a
 * failure. Returns `rc` if it is an error: the first error is the one that explains (its code
 * and message stay); else 0 or the wait's own error. */
static int drain(pipeline *p, int rc) {
  CUresult result = p->cu->cuStreamSynchronize(p->lane->stream);
  return rc < 0 ? rc : kvik__cuda_check(result, p->fn, "cuStreamSynchronize");
}

static int queue_copy_out(pipeline *p, unsigned b, CUdeviceptr src, size_t n) {
  int rc = take_buffer(p, b);
  if (rc == 0)
    rc = kvik__cuda_check(p->cu->cuMemcpyDtoHAsync(p->buf[b], src, n, p->lane->stream), p->fn,
                          "cuMemcpyDtoHAsync");
  return rc < 0 ? rc : mark_copied(p, b);
}

/* Device to file: the copy of chunk i+1 is queued before chunk i is written. */
static int pipeline_write(pipeline *p, CUdeviceptr dev, size_t size, int64_t offset, size_t *done) {
  size_t nchunks = size / p->chunk + (size % p->chunk != 0);
  int rc = queue_copy_out(p, 0, dev, size < p->chunk ? size : p->chunk);
  for (size_t i = 0; i < nchunks && rc == 0; i++) {
    unsigned b = i & 1;
    size_t pos = i * p->chunk, n = size - pos < p->chunk ? size - pos : p->chunk;
    if (i + 1 < nchunks) {
      size_t next = pos + p->chunk;
      rc = queue_copy_out(p, b ^ 1, dev + next, size - next < p->chunk ? size - next : p->chunk);
    }
    if (rc == 0) rc = wait_copied(p, b);
    size_t wrote = 0;
    if (rc == 0)
      rc = p->transfer(p->source, KVIK__WRITE, p->buf[b], n, offset + (int64_t)pos, &wrote);
    *done += wrote;
  }
  /* A queued copy may still be filling a buffer. */
  return drain(p, rc);
}

/* Two chunks per task, so that one is copied while the other is read; page multiples, so that
 * O_DIRECT can fill them. Larger chunks would leave a task nothing to overlap; smaller ones pay
 * the driver calls of a copy (about 10 us) too often: measured on an H100, 1 MiB chunks cost
 * 10% against 4 MiB ones. The size depends on the task size only, so that every task of every
 * request reuses the same cached buffers. A bounce buffer size below a page (set for tests) is
 * kept, in grains: kvikio code sees buffers of the size it set (kvik_bounce_buffer_free counts
 * them), and the POSIX layer takes unaligned ones through its own O_DIRECT path. */
static size_t chunk_size(size_t task_size) {
  size_t chunk = task_size / 2 > MIN_CHUNK ? task_size / 2 : MIN_CHUNK;
  size_t bounce = (size_t)kvik__setting(KVIK_SETTING_BOUNCE_BUFFER_SIZE);
  if (chunk > bounce) chunk = bounce;
  size_t grain = chunk < PAGE ? KVIK__BOUNCE_GRAIN : PAGE;
  return (chunk + grain - 1) & ~(grain - 1);
}

/* ---- reads ------------------------------------------------------------------------------ */

/* A read finishes once all its chunks were queued and all their copies are known to be done. */
static void finish_if_done(kvik__device_read *r) {
  if (r->issued && r->in_flight == 0) r->finish(r, r->bytes, r->rc);
}

/* Wait for the copy from slot s, credit its read, and finish that read if it was its last. */
static void reap(const kvik__cuda_api *cu, lane *l, unsigned s) {
  slot *sl = &l->slot[s];
  kvik__device_read *r = sl->owner;
  if (!r) return;
  sl->owner = NULL;
  CUresult result = wait_handed(sl);
  const char *call = "cuEventSynchronize";
  if (result != CUDA_SUCCESS) {
    call = sl->copy.call;
    cu->cuStreamSynchronize(l->stream); /* the copy may run without its event */
  } else {
    result = cu->cuEventSynchronize(l->copied[s]);
  }
  if (result == CUDA_SUCCESS) r->bytes += sl->bytes;
  else if (r->rc == 0) r->rc = kvik__cuda_check(result, r->fn, call);
  assert(r->in_flight > 0);
  r->in_flight--;
  finish_if_done(r);
}

/* Finish every read with copies on the lane, the older copy first. With `release`, also wait for
 * whatever else the stream holds (a copy queued by a call that then failed) and give the buffers
 * back. Called with the lane's context current. */
static void settle_lane(const kvik__cuda_api *cu, lane *l, int release) {
  reap(cu, l, l->next);
  reap(cu, l, l->next ^ 1);
  if (!release) return;
  cu->cuStreamSynchronize(l->stream);
  give_back_buffers(l);
}

/* Take slot s's buffer on its first use, with the other slot's where that has none and `left`
 * bytes need both. Returns 0 or the allocation's code. */
static int take_slot_buffer(const char *fn, lane *l, unsigned s, size_t left) {
  if (l->slot[s].buf) return 0;
  int pair = !l->slot[s ^ 1].buf && left > l->chunk;
  void *buf;
  int rc = kvik__device_pinned_get(fn, l->device, pair ? 2 * l->chunk : l->chunk, &buf);
  if (rc < 0) return rc;
  l->slot[s].buf = buf;
  if (pair) {
    l->pair = buf;
    l->slot[s ^ 1].buf = l->pair + l->chunk;
  }
  return 0;
}

/* Settle a lane whose reads were deferred, in its context. */
static void settle_deferred(const kvik__cuda_api *cu, lane *l) {
  int pushed = cu->cuCtxPushCurrent(l->ctx) == CUDA_SUCCESS;
  settle_lane(cu, l, 1);
  if (pushed) kvik__context_pop();
  l->deferred = 0;
}

/* Finish the reads of the lane's copies that are done, the older first (a stream runs its copies
 * in order), without waiting for a copy that is not. Returns whether copies remain. A copy handed
 * off (a zero-copy read's), or one of a driver without cuEventQuery, cannot be asked about: it is
 * waited for `if_unknown`, else left. */
static int reap_done(const kvik__cuda_api *cu, lane *l, int if_unknown) {
  int pushed = cu->cuCtxPushCurrent(l->ctx) == CUDA_SUCCESS;
  int remain = 0;
  for (unsigned i = 0; i < 2 && !remain; i++) {
    unsigned s = l->next ^ i;
    if (!l->slot[s].owner) continue;
    int known = !l->slot[s].handoff && cu->cuEventQuery;
    remain = known ? cu->cuEventQuery(l->copied[s]) == CUDA_ERROR_NOT_READY : !if_unknown;
    if (!remain) reap(cu, l, s);
  }
  if (pushed) kvik__context_pop();
  return remain;
}

/* Deferred reads into several devices: while copies to two or more of them remain, the thread
 * polls (their copies take a few ms) rather than wait for one device while another's reads could
 * finish. The last one it waits for, as it waits for a single device's. */
#define SETTLE_POLL_NS 20000

void kvik__device_settle(void) {
  if (lanes.count == 0) return; /* nothing deferred, and no need to ask for CUDA: a host read */
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  if (!cu) return;
  unsigned waiting = 0;
  for (unsigned i = 0; i < lanes.count; i++) waiting += lanes.lane[i].deferred;
  while (waiting > 1) {
    waiting = 0;
    for (unsigned i = 0; i < lanes.count; i++) {
      lane *l = &lanes.lane[i];
      if (!l->deferred) continue;
      if (reap_done(cu, l, 1)) waiting++;
      else settle_deferred(cu, l);
    }
    if (waiting > 1) kvik__pause_ns(SETTLE_POLL_NS);
  }
  for (unsigned i = 0; i < lanes.count; i++)
    if (lanes.lane[i].deferred) settle_deferred(cu, &lanes.lane[i]);
}

/* Finish the deferred reads of lanes other than `l` whose copies are done, without waiting: a
 * thread that goes on to another device finishes them at its next task, not only when it runs
 * out of work. */
static void settle_finished(const kvik__cuda_api *cu, const lane *l) {
  for (unsigned i = 0; i < lanes.count; i++) {
    lane *other = &lanes.lane[i];
    if (other != l && other->deferred && !reap_done(cu, other, 0)) settle_deferred(cu, other);
  }
}

/* An IO worker out of work: the deferred reads whose copies are done are finished, and whether
 * any is left returned, so that the worker takes new tasks (for another device, say) while a
 * stalled device's copies run; before it exits (`may_wait`) all of them, waiting. */
static int settle_idle(int may_wait) {
  if (may_wait) kvik__device_settle();
  if (may_wait || lanes.count == 0) return 0;
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  if (!cu) return 0;
  unsigned left = 0;
  for (unsigned i = 0; i < lanes.count; i++) {
    lane *l = &lanes.lane[i];
    if (!l->deferred) continue;
    if (reap_done(cu, l, 1)) left++;
    else settle_deferred(cu, l);
  }
  return left > 0;
}

KVIK__ON_LOAD(install_idle_hook) { kvik__pool_set_idle(KVIK__POOL_IO, settle_idle); }

/* Read the range chunk by chunk, each into the slot whose copy was queued first, once that copy
 * is done. Returns 0 or the first error. */
static int queue_chunks(const kvik__cuda_api *cu, lane *l, kvik__device_read *r, CUdeviceptr dev,
                        size_t size, int64_t offset) {
  for (size_t pos = 0; pos < size;) {
    unsigned s = l->next;
    slot *sl = &l->slot[s];
    reap(cu, l, s);
    assert(!sl->owner);
    if (r->rc < 0) return r->rc; /* a copy that another thread queued for it failed */
    int take_rc = take_slot_buffer(r->fn, l, s, size - pos);
    if (take_rc < 0) return take_rc;
    l->next ^= 1;
    size_t n = size - pos < l->chunk ? size - pos : l->chunk, got = 0;
    uint64_t start_ns = kvik__now_ns();
    int rc = r->transfer(r->source, KVIK__READ, sl->buf, n, offset + (int64_t)pos, &got);
    if (got >= MIN_TIMED_READ) kvik__zc_note_pread(got, kvik__now_ns() - start_ns);
    if (got > 0) {
      sl->bytes = got;
      if (!r->handoff || !hand_off(r->handoff, l, s, dev + pos)) {
        int copy_rc = kvik__cuda_check(cu->cuMemcpyHtoDAsync(dev + pos, sl->buf, got, l->stream),
                                       r->fn, "cuMemcpyHtoDAsync");
        if (copy_rc == 0)
          copy_rc =
              kvik__cuda_check(cu->cuEventRecord(l->copied[s], l->stream), r->fn, "cuEventRecord");
        if (copy_rc < 0) return copy_rc;
      }
      sl->owner = r;
      r->in_flight++;
      r->issued_bytes += got;
      pos += got;
    }
    if (rc < 0 || got < n) return rc;
  }
  return 0;
}

/* The lane for `mem` with slots of `chunk` bytes; a lane with other copies in flight is settled
 * first. Called with mem->ctx current. */
static int read_lane(const char *fn, const kvik__cuda_api *cu, const kvik__memory *mem,
                     size_t chunk, lane **out) {
  int rc = lane_for(fn, mem->ctx, out);
  if (rc < 0) return rc;
  lane *l = *out;
  kvik__numa_follow_device(cu, l->device);
  settle_finished(cu, l);
  if (l->chunk != chunk) {
    settle_lane(cu, l, 1);
    l->chunk = chunk;
  }
  l->deferred = 1;
  return 0;
}

int kvik__device_read_begin(kvik__device_read *r, const kvik__device_io *io) {
  *r = (kvik__device_read){.finish = r->finish,
                           .fn = io->fn,
                           .handoff = r->handoff,
                           .transfer = io->transfer,
                           .source = io->source};
  int rc = kvik__context_push(io->fn, io->mem->ctx);
  if (rc < 0) {
    r->rc = rc;
    return rc;
  }
  r->pushed = 1;
  rc = read_lane(io->fn, kvik__cuda_if_present(), io->mem, chunk_size(io->task_size), &r->lane);
  if (rc < 0) r->rc = rc;
  return rc;
}

size_t kvik__device_read_bounced(kvik__device_read *r, char *dev, size_t size, int64_t offset) {
  if (r->rc < 0) return 0;
  size_t before = r->issued_bytes;
  CUdeviceptr to = (CUdeviceptr)(uintptr_t)dev;
  int rc = queue_chunks(kvik__cuda_if_present(), r->lane, r, to, size, offset);
  if (rc < 0) r->rc = rc;
  return r->issued_bytes - before;
}

int kvik__device_read_direct(kvik__device_read *r, char *dev, const char *host, size_t size) {
  if (r->rc < 0) return 0;
  assert(r->lane); /* begun */
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  CUdeviceptr to = (CUdeviceptr)(uintptr_t)dev;
  int rc = kvik__cuda_check(cu->cuMemcpyHtoDAsync(to, host, size, r->lane->stream), r->fn,
                            "cuMemcpyHtoDAsync");
  if (rc < 0) {
    r->rc = rc;
    return 0;
  }
  r->direct_bytes += size;
  return 1;
}

void kvik__device_read_direct_wait(kvik__device_read *r) {
  if (r->direct_bytes == 0) return;
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  lane *l = r->lane;
  CUresult result = cu->cuEventRecord(l->direct_copied, l->stream);
  if (result == CUDA_SUCCESS) result = cu->cuEventSynchronize(l->direct_copied);
  if (result != CUDA_SUCCESS) cu->cuStreamSynchronize(l->stream); /* none may still copy */
  if (result == CUDA_SUCCESS) r->bytes += r->direct_bytes;
  else if (r->rc == 0) r->rc = kvik__cuda_check(result, r->fn, "cuEventSynchronize");
  r->direct_bytes = 0;
}

void kvik__device_read_end(kvik__device_read *r, int may_defer) {
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  lane *l = r->lane;
  int pushed = r->pushed;
  assert(r->direct_bytes == 0); /* the caller waited for its direct copies */
  int defer = may_defer && r->rc == 0;
  r->issued = 1;
  /* From here on r may be finished, and then freed by its waiter: it is not touched again. */
  if (r->in_flight == 0) r->finish(r, r->bytes, r->rc);
  if (!defer && l) {
    settle_lane(cu, l, 1);
    l->deferred = 0;
  }
  if (pushed) kvik__context_pop();
}

void kvik__read_to_device(const kvik__device_io *io, int may_defer, kvik__device_read *r) {
  if (kvik__device_read_begin(r, io) == 0)
    kvik__device_read_bounced(r, io->dev, io->size, io->offset);
  kvik__device_read_end(r, may_defer);
}

/* ---- writes ----------------------------------------------------------------------------- */

int kvik__device_write(const kvik__device_io *io, size_t *done) {
  *done = 0;
  if (io->size == 0) return 0;
  pipeline p = {.fn = io->fn,
                .cu = kvik__cuda_if_present(),
                .chunk = chunk_size(io->task_size),
                .transfer = io->transfer,
                .source = io->source};
  int rc = kvik__context_push(io->fn, io->mem->ctx);
  if (rc < 0) return rc;
  rc = lane_for(io->fn, io->mem->ctx, &p.lane);
  if (rc == 0) kvik__numa_follow_device(p.cu, p.lane->device);
  if (rc == 0) settle_finished(p.cu, p.lane);
  if (rc == 0 && p.lane->deferred) settle_deferred(p.cu, p.lane); /* writes use its events */
  if (rc == 0) rc = pipeline_write(&p, (CUdeviceptr)(uintptr_t)io->dev, io->size, io->offset, done);
  for (int b = 0; b < 2; b++)
    kvik__device_pinned_put(p.lane ? p.lane->device : -1, p.buf[b], p.chunk);
  kvik__context_pop();
  return rc;
}

int kvik__device_alloc(const char *fn, int device, size_t size, void **devptr) {
  CUcontext ctx;
  int rc = kvik__primary_context(fn, device, &ctx);
  if (rc == 0) rc = kvik__context_push(fn, ctx);
  if (rc < 0) return rc;
  CUdeviceptr ptr = 0;
  rc = kvik__cuda_check(kvik__cuda_if_present()->cuMemAlloc(&ptr, size), fn, "cuMemAlloc");
  kvik__context_pop();
  *devptr = (void *)(uintptr_t)ptr;
  return rc;
}

int kvik_device_free(void *devptr) {
  static const char fn[] = "kvik_device_free";
  if (!devptr) return 0;
  kvik__memory mem;
  int rc = kvik__memory_classify(fn, devptr, &mem);
  if (rc == 0 && mem.kind != KVIK_MEMORY_DEVICE)
    rc = kvik__fail(-EINVAL, "%s(%p): not device memory", fn, devptr);
  if (rc == 0) rc = kvik__context_push(fn, mem.ctx);
  if (rc < 0) return rc;
  rc = kvik__cuda_check(kvik__cuda_if_present()->cuMemFree((CUdeviceptr)(uintptr_t)devptr), fn,
                        "cuMemFree");
  kvik__context_pop();
  return rc;
}
