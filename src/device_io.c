/* Pipelined device transfers, and the per-thread streams they run on. */
#define _GNU_SOURCE
#include "device_io.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bounce.h"
#include "error.h"
#include "settings.h"

#define MIN_CHUNK ((size_t)256 << 10)
#define PAGE 4096
#define MAX_LANES 8

/* A bounce buffer of a lane, and the read that its last copy to the device belongs to. */
typedef struct kvik__slot {
  char *buf;
  kvik__device_read *owner; /* whose copy from buf may still run; NULL when none may */
  size_t bytes;             /* that copy's size */
  /* That copy, when it was posted to a relay: */
  kvik__relay *relay; /* NULL when the lane's thread queued it */
  struct kvik__slot *next_posted;
  CUdeviceptr dst;
  CUstream stream;
  CUevent event;
  _Atomic uint32_t passed; /* a futex word: 1 once the relay made the calls below */
  CUresult result;         /* of the first of them that failed, or CUDA_SUCCESS */
  const char *call;        /* its name */
} slot;

/* A thread's stream in one context, with two bounce buffers and an event each that marks the
 * buffer's last copy. Each thread has its own, so threads never wait on each other's copies. */
typedef struct kvik__lane {
  CUcontext ctx;
  unsigned long long ctx_id; /* tells a context from a later one with the same handle */
  CUstream stream;
  CUevent copied[2];
  CUevent mapped_copied; /* the last copy from a mapping; its waiter sleeps, as the copies are all it waits for */
  slot slot[2]; /* reads only; writes take buffers of their own */
  size_t chunk; /* the size of the slots' buffers */
  unsigned next; /* the slot reads fill next: the one whose copy was queued first */
} lane;

typedef struct thread_lanes {
  lane lane[MAX_LANES];
  unsigned count;
  unsigned next_evicted; /* when all are taken, the oldest makes room */
} thread_lanes;

static _Thread_local thread_lanes lanes;
static _Thread_local lane *busy; /* the lane whose slots may hold copies of unfinished reads */
static pthread_key_t lanes_key; /* only for its destructor, which frees a thread's lanes */
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

/* ---- relays (see kvik__relay) ------------------------------------------------------------ */

static void relay_lock(kvik__relay *relay) {
  while (atomic_flag_test_and_set_explicit(&relay->lock, memory_order_acquire)) {
  }
}

static void relay_unlock(kvik__relay *relay) { atomic_flag_clear_explicit(&relay->lock, memory_order_release); }

void kvik__relay_init(kvik__relay *relay) {
  atomic_flag_clear(&relay->lock);
  relay->open = 0;
  relay->first = relay->last = NULL;
}

/* Post slot s's copy of its bytes to `dst` if the relay is open. Returns whether it did. */
static int post(kvik__relay *relay, lane *l, unsigned s, CUdeviceptr dst) {
  slot *sl = &l->slot[s];
  sl->dst = dst;
  sl->stream = l->stream;
  sl->event = l->copied[s];
  sl->next_posted = NULL;
  atomic_store_explicit(&sl->passed, 0, memory_order_relaxed);
  relay_lock(relay);
  int open = relay->open;
  if (open) {
    if (relay->last) relay->last->next_posted = sl;
    else relay->first = sl;
    relay->last = sl;
  }
  relay_unlock(relay);
  sl->relay = open ? relay : NULL;
  return open;
}

/* Queue a posted copy and record its event, as its own thread would, and wake that thread. */
static void pass(const kvik__cuda_api *cu, slot *sl) {
  sl->call = "cuMemcpyHtoDAsync";
  sl->result = cu->cuMemcpyHtoDAsync(sl->dst, sl->buf, sl->bytes, sl->stream);
  if (sl->result == CUDA_SUCCESS) {
    sl->call = "cuEventRecord";
    sl->result = cu->cuEventRecord(sl->event, sl->stream);
  }
  atomic_store_explicit(&sl->passed, 1, memory_order_release);
  syscall(SYS_futex, &sl->passed, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Take what was posted (and close the relay, with `close`), then queue it. A slot is read before
 * it is passed: from then on its thread may post it again. */
static void pass_posted(kvik__relay *relay, int close) {
  relay_lock(relay);
  slot *sl = relay->first;
  relay->first = relay->last = NULL;
  if (close) relay->open = 0;
  relay_unlock(relay);
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  while (sl) {
    slot *next = sl->next_posted;
    pass(cu, sl);
    sl = next;
  }
}

void kvik__relay_open(kvik__relay *relay) {
  relay_lock(relay);
  relay->open = 1;
  relay_unlock(relay);
}

void kvik__relay_pass(kvik__relay *relay) { pass_posted(relay, 0); }

void kvik__relay_close(kvik__relay *relay) { pass_posted(relay, 1); }

/* Wait until the relay queued the slot's copy, if it was posted. Returns the result of its calls;
 * after a failure the copy may run without its event, so the caller waits for the stream. */
static CUresult wait_passed(slot *sl) {
  if (!sl->relay) return CUDA_SUCCESS;
  while (atomic_load_explicit(&sl->passed, memory_order_acquire) == 0)
    syscall(SYS_futex, &sl->passed, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
  sl->relay = NULL;
  return sl->result;
}

/* Destroy the lane's stream and events, unless its context is gone: then they went with it, and
 * its handle may now name another context. */
static void destroy_lane(const kvik__cuda_api *cu, lane *l) {
  for (int i = 0; i < 2; i++) wait_passed(&l->slot[i]);
  if (kvik__context_id(l->ctx) != l->ctx_id || cu->cuCtxPushCurrent(l->ctx) != CUDA_SUCCESS) return;
  if (l->stream) cu->cuStreamSynchronize(l->stream);
  for (int i = 0; i < 2; i++) {
    kvik__pinned_put(l->slot[i].buf, l->chunk);
    if (l->copied[i]) cu->cuEventDestroy(l->copied[i]);
  }
  if (l->mapped_copied) cu->cuEventDestroy(l->mapped_copied);
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
  int rc = kvik__cuda_check(cu->cuStreamCreate(&l->stream, CU_STREAM_NON_BLOCKING), fn, "cuStreamCreate");
  for (int i = 0; i < 2 && rc == 0; i++)
    rc = kvik__cuda_check(cu->cuEventCreate(&l->copied[i], CU_EVENT_DISABLE_TIMING), fn, "cuEventCreate");
  if (rc == 0)
    rc = kvik__cuda_check(cu->cuEventCreate(&l->mapped_copied, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING), fn,
                          "cuEventCreate");
  if (rc < 0) destroy_lane(cu, l);
  return rc;
}

/* This thread's lane for `ctx`, which is current. A lane whose context was destroyed (same
 * handle, other ID) is forgotten: its stream and events died with that context. */
static int lane_for(const char *fn, CUcontext ctx, lane **out) {
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  unsigned long long id = kvik__context_id(ctx);
  for (unsigned i = 0; i < lanes.count; i++) {
    if (lanes.lane[i].ctx != ctx) continue;
    if (lanes.lane[i].ctx_id == id) {
      *out = &lanes.lane[i];
      return 0;
    }
    for (int s = 0; s < 2; s++) wait_passed(&lanes.lane[i].slot[s]); /* the relay writes to the slots */
    lanes.lane[i] = lanes.lane[--lanes.count];
    break;
  }
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
  int rc = kvik__pinned_get(p->fn, p->chunk, &buf);
  p->buf[b] = buf;
  return rc;
}

static int wait_copied(pipeline *p, unsigned b) {
  return kvik__cuda_check(p->cu->cuEventSynchronize(p->lane->copied[b]), p->fn, "cuEventSynchronize");
}

static int mark_copied(pipeline *p, unsigned b) {
  return kvik__cuda_check(p->cu->cuEventRecord(p->lane->copied[b], p->lane->stream), p->fn, "cuEventRecord");
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
    rc = kvik__cuda_check(p->cu->cuMemcpyDtoHAsync(p->buf[b], src, n, p->lane->stream), p->fn, "cuMemcpyDtoHAsync");
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
    if (rc == 0) rc = p->transfer(p->source, KVIK__WRITE, p->buf[b], n, offset + (int64_t)pos, &wrote);
    *done += wrote;
  }
  /* A queued copy may still be filling a buffer. */
  return drain(p, rc);
}

/* Two chunks per task, so that one is copied while the other is read; page multiples, so that
 * O_DIRECT can fill them. Larger chunks would leave a task nothing to overlap; smaller ones pay
 * the driver calls of a copy (about 10 us) too often: measured on an H100, 1 MiB chunks cost
 * 10% against 4 MiB ones. The size depends on the task size only, so that every task of every
 * request reuses the same cached buffers. */
static size_t chunk_size(size_t task_size) {
  size_t chunk = task_size / 2 > MIN_CHUNK ? task_size / 2 : MIN_CHUNK;
  size_t bounce = (size_t)kvik__setting(KVIK_SETTING_BOUNCE_BUFFER_SIZE);
  if (chunk > bounce) chunk = bounce;
  return (chunk + PAGE - 1) & ~(size_t)(PAGE - 1);
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
  CUresult result = wait_passed(sl);
  const char *call = "cuEventSynchronize";
  if (result != CUDA_SUCCESS) {
    call = sl->call;
    cu->cuStreamSynchronize(l->stream); /* the copy may run without its event */
  } else {
    result = cu->cuEventSynchronize(l->copied[s]);
  }
  if (result == CUDA_SUCCESS) r->bytes += sl->bytes;
  else if (r->rc == 0) r->rc = kvik__cuda_check(result, r->fn, call);
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
  for (int i = 0; i < 2; i++) {
    kvik__pinned_put(l->slot[i].buf, l->chunk);
    l->slot[i].buf = NULL;
  }
}

void kvik__device_settle(void) {
  lane *l = busy;
  if (!l) return;
  busy = NULL;
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  if (!cu) return;
  int pushed = cu->cuCtxPushCurrent(l->ctx) == CUDA_SUCCESS;
  settle_lane(cu, l, 1);
  if (pushed) kvik__context_pop();
}

/* Read the range chunk by chunk, each into the slot whose copy was queued first, once that copy
 * is done. Returns 0 or the first error. */
static int queue_chunks(const kvik__cuda_api *cu, lane *l, kvik__device_read *r, CUdeviceptr dev,
                        size_t size, int64_t offset) {
  for (size_t pos = 0; pos < size;) {
    unsigned s = l->next;
    slot *sl = &l->slot[s];
    reap(cu, l, s);
    if (r->rc < 0) return r->rc; /* a copy the relay queued for it failed */
    if (!sl->buf) {
      void *buf;
      int get_rc = kvik__pinned_get(r->fn, l->chunk, &buf);
      if (get_rc < 0) return get_rc;
      sl->buf = buf;
    }
    l->next ^= 1;
    size_t n = size - pos < l->chunk ? size - pos : l->chunk, got = 0;
    int rc = r->transfer(r->source, KVIK__READ, sl->buf, n, offset + (int64_t)pos, &got);
    if (got > 0) {
      sl->bytes = got;
      if (!r->relay || !post(r->relay, l, s, dev + pos)) {
        int copy_rc = kvik__cuda_check(cu->cuMemcpyHtoDAsync(dev + pos, sl->buf, got, l->stream), r->fn,
                                       "cuMemcpyHtoDAsync");
        if (copy_rc == 0)
          copy_rc = kvik__cuda_check(cu->cuEventRecord(l->copied[s], l->stream), r->fn, "cuEventRecord");
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
static int read_lane(const char *fn, const kvik__cuda_api *cu, const kvik__memory *mem, size_t chunk, lane **out) {
  /* Settled before lane_for(), which may evict or move lanes. */
  if (busy && busy->ctx != mem->ctx) kvik__device_settle();
  int rc = lane_for(fn, mem->ctx, out);
  if (rc < 0) return rc;
  lane *l = *out;
  if (l->chunk != chunk) {
    settle_lane(cu, l, 1);
    l->chunk = chunk;
  }
  busy = l;
  return 0;
}

int kvik__device_read_begin(kvik__device_read *r, const kvik__device_io *io) {
  *r = (kvik__device_read){.finish = r->finish, .fn = io->fn, .relay = r->relay,
                           .transfer = io->transfer, .source = io->source};
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

/* Whether r may copy from the mapping of its request: asked once per read, for the whole request,
 * which holds the mapping until kvik__device_read_end(). */
static int mapping_held(kvik__device_read *r, const kvik__zc_read *zc) {
  if (!r->map.asked) {
    r->map.asked = 1;
    if (kvik__zc_begin(zc, zc->request_offset, zc->request_size, &r->map.host)) r->map.file = zc->file;
    r->map.offset = zc->request_offset;
  }
  return r->map.file != NULL;
}

size_t kvik__device_read_mapped(kvik__device_read *r, const kvik__zc_read *zc, char *dev, size_t size,
                                int64_t offset) {
  if (r->rc < 0 || !zc->file || !mapping_held(r, zc)) return 0;
  size_t n = kvik__zc_ready(zc, r->lane->ctx, offset, size);
  if (n == 0) return 0;
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  const char *host = r->map.host + (offset - r->map.offset);
  int rc = kvik__cuda_check(cu->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dev, host, n, r->lane->stream), r->fn,
                            "cuMemcpyHtoDAsync");
  if (rc < 0) {
    r->rc = rc;
    return 0;
  }
  r->map.bytes += n;
  return n;
}

/* Wait for the copies from the mapping (which must end before it may be dropped), credit them,
 * and let the mapping go. */
static void finish_mapped(const kvik__cuda_api *cu, kvik__device_read *r) {
  if (!r->map.file) return;
  if (r->map.bytes > 0) {
    lane *l = r->lane;
    CUresult result = cu->cuEventRecord(l->mapped_copied, l->stream);
    if (result == CUDA_SUCCESS) result = cu->cuEventSynchronize(l->mapped_copied);
    if (result != CUDA_SUCCESS) cu->cuStreamSynchronize(l->stream); /* nothing may still copy from the mapping */
    if (result == CUDA_SUCCESS) r->bytes += r->map.bytes;
    else if (r->rc == 0) r->rc = kvik__cuda_check(result, r->fn, "cuEventSynchronize");
  }
  kvik__zc_done(r->map.file);
  r->map.file = NULL;
}

void kvik__device_read_end(kvik__device_read *r, int may_defer) {
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  lane *l = r->lane;
  int pushed = r->pushed;
  finish_mapped(cu, r);
  int defer = may_defer && r->rc == 0;
  r->issued = 1;
  /* From here on r may be finished, and then freed by its waiter: it is not touched again. */
  if (r->in_flight == 0) r->finish(r, r->bytes, r->rc);
  if (!defer && l) {
    settle_lane(cu, l, 1);
    busy = NULL;
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
  kvik__device_settle(); /* writes use the lane's events */
  if (io->size == 0) return 0;
  pipeline p = {.fn = io->fn, .cu = kvik__cuda_if_present(), .chunk = chunk_size(io->task_size),
                .transfer = io->transfer, .source = io->source};
  int rc = kvik__context_push(io->fn, io->mem->ctx);
  if (rc < 0) return rc;
  rc = lane_for(io->fn, io->mem->ctx, &p.lane);
  if (rc == 0)
    rc = pipeline_write(&p, (CUdeviceptr)(uintptr_t)io->dev, io->size, io->offset, done);
  for (int b = 0; b < 2; b++) kvik__pinned_put(p.buf[b], p.chunk);
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
  if (rc == 0 && mem.kind != KVIK_MEMORY_DEVICE) rc = kvik__fail(-EINVAL, "%s(%p): not device memory", fn, devptr);
  if (rc == 0) rc = kvik__context_push(fn, mem.ctx);
  if (rc < 0) return rc;
  rc = kvik__cuda_check(kvik__cuda_if_present()->cuMemFree((CUdeviceptr)(uintptr_t)devptr), fn, "cuMemFree");
  kvik__context_pop();
  return rc;
}
