/* Zero-copy reads: how a read's tasks split its range between the mapping and the bounce
 * buffers, the relay of the bounce copies, and the copies from the mapping.
 *
 * A zero-copy read's bytes that no task has taken yet are [front, back) of the file (the split).
 * Its first task takes them from the front, a granule at a time: it registers the granule, queues
 * its copy from the mapping, and registers the next while that copy runs. One thread, in that
 * order, because a call that queues a copy can wait for another thread's registration to end
 * (bench_zero_copy_probe step 6: up to 78 ms on an H100), which would leave the copy engine idle.
 * Its other tasks take them from the back, in pieces of at least BACK_PIECE_MIN, through the
 * bounce buffers, which adds their rate to the registration's until the two ends meet. For the
 * same reason they do not queue their copies themselves: they hand them to the front (the relay),
 * which queues them between its registrations. On a file read before, whose granules are all
 * registered, the first task queues its copies faster than the others read and takes nearly all.
 * Taking is short and rare (once per MiBs), so a spin lock guards it. */
#define _GNU_SOURCE
#include "zero_copy_read.h"

#include <assert.h>

#include "cancel.h"
#include "cuda.h"
#include "settings.h"
#include "sys.h"

/* The back's pieces: at least this large, since each of their copies is a call that can wait for
 * a registration; on an H100, 16 MiB tasks read a first 8 GiB at 33 GB/s from 4 threads where 4
 * MiB ones read it at 26. */
#define BACK_PIECE_MIN ((size_t)16 << 20)

/* ---- the relay ----------------------------------------------------------------------------- */

/* A call that queues a copy waits while another thread of the process registers memory with the
 * driver (bench_zero_copy_probe step 6), and the front of a first read registers all the time:
 * on an H100 its back tasks spent 45% of their time in such calls. So while the front runs, the
 * back hands its copies to the relay and reads on, and the front queues them between its
 * registrations. Handing and taking move a few pointers, under a spin lock. */

static void relay_lock(kvik__zc_relay *relay) {
  while (atomic_flag_test_and_set_explicit(&relay->lock, memory_order_acquire)) {
  }
}

static void relay_unlock(kvik__zc_relay *relay) {
  atomic_flag_clear_explicit(&relay->lock, memory_order_release);
}

/* kvik__handoff.take: the copy is queued by the front while the relay is open. */
static int relay_take(kvik__handoff *handoff, kvik__handed_copy *copy) {
  kvik__zc_relay *relay = (kvik__zc_relay *)handoff;
  copy->next = NULL;
  atomic_store_explicit(&copy->queued, 0, memory_order_relaxed);
  relay_lock(relay);
  int open = relay->open;
  if (open) {
    if (relay->last) relay->last->next = copy;
    else relay->first = copy;
    relay->last = copy;
  }
  relay_unlock(relay);
  return open;
}

/* kvik__handoff.wait: sleep until the front queued the copy. */
static void relay_wait(kvik__handoff *handoff, kvik__handed_copy *copy) {
  (void)handoff;
  while (atomic_load_explicit(&copy->queued, memory_order_acquire) == 0)
    kvik__futex_wait(&copy->queued, 0);
}

/* A closed relay. */
static void relay_init(kvik__zc_relay *relay) {
  relay->handoff = (kvik__handoff){relay_take, relay_wait};
  atomic_flag_clear(&relay->lock);
  relay->open = 0;
  relay->first = relay->last = NULL;
}

/* Queue a handed copy and record its event, as its own thread would, and wake that thread. */
static void pass(const kvik__cuda_api *cu, kvik__handed_copy *c) {
  c->call = "cuMemcpyHtoDAsync";
  c->result = cu->cuMemcpyHtoDAsync(c->dst, c->src, c->bytes, c->stream);
  if (c->result == CUDA_SUCCESS) {
    c->call = "cuEventRecord";
    c->result = cu->cuEventRecord(c->event, c->stream);
  }
  atomic_store_explicit(&c->queued, 1, memory_order_release);
  kvik__futex_wake(&c->queued, 1);
}

/* Take what was handed (and close the relay, with `close`), then queue it. A copy is read before
 * it is passed: from then on its thread may hand it again. */
static void pass_handed(kvik__zc_relay *relay, int close) {
  relay_lock(relay);
  kvik__handed_copy *c = relay->first;
  relay->first = relay->last = NULL;
  if (close) relay->open = 0;
  relay_unlock(relay);
  const kvik__cuda_api *cu = kvik__cuda_if_present();
  while (c) {
    kvik__handed_copy *next = c->next;
    pass(cu, c);
    c = next;
  }
}

/* From now on the back's reads hand their copies to the relay, and the calling thread queues
 * them, with relay_pass(), until it closes it. */
static void relay_open(kvik__zc_relay *relay) {
  relay_lock(relay);
  relay->open = 1;
  relay_unlock(relay);
}

/* Queue the copies handed so far, with the reads' context current. */
static void relay_pass(kvik__zc_relay *relay) { pass_handed(relay, 0); }

/* Queue the copies handed so far and take no more: from now on each thread queues its own. */
static void relay_close(kvik__zc_relay *relay) { pass_handed(relay, 1); }

/* ---- the split ----------------------------------------------------------------------------- */

static void split_lock(kvik__zc_split *s) {
  while (atomic_flag_test_and_set_explicit(&s->lock, memory_order_acquire)) {
  }
}

static void split_unlock(kvik__zc_split *s) {
  atomic_flag_clear_explicit(&s->lock, memory_order_release);
}

/* Take the next bytes from the front: to the end of their granule, or, before `mapped_from` (where
 * the mapping failed the front), a task's worth. Returns how many, from *offset; 0 when none are
 * left. */
static size_t take_front(kvik__zc_split *s, int64_t mapped_from, size_t task_size,
                         int64_t *offset) {
  split_lock(s);
  assert(s->front <= s->back);
  int64_t at = s->front, granule = (int64_t)KVIK__ZC_GRANULE;
  int64_t end;
  if (at >= mapped_from) end = (at / granule + 1) * granule;
  else end = mapped_from - at < (int64_t)task_size ? mapped_from : at + (int64_t)task_size;
  if (end > s->back) end = s->back;
  if (s->failed) end = at;
  s->front = end;
  split_unlock(s);
  *offset = at;
  return (size_t)(end - at);
}

/* Give back the last `n` bytes that take_front() took, unread: no other task moves the front, and
 * the back never passes it. */
static void give_back_front(kvik__zc_split *s, size_t n) {
  split_lock(s);
  assert((int64_t)n <= s->front);
  s->front -= (int64_t)n;
  split_unlock(s);
}

/* Take the last bytes from the back, back to a multiple of `piece` or to the front; none from a
 * registered granule, which the front copies for next to no CPU (a file read before). The
 * granule is asked about outside the lock, since its state waits for a file that changed to be
 * dropped: a piece taken meanwhile by another task only makes this answer about a neighbour. */
static size_t take_back(kvik__zc_split *s, size_t piece, int64_t *offset) {
  split_lock(s);
  int64_t end = s->back;
  split_unlock(s);
  if (kvik__zc_registered(s->file, end - 1)) return 0;
  split_lock(s);
  end = s->back;
  int64_t start = (end - 1) / (int64_t)piece * (int64_t)piece;
  if (start < s->front) start = s->front;
  if (s->failed) start = end;
  assert(s->front <= start && start <= end);
  s->back = start;
  split_unlock(s);
  *offset = start;
  return (size_t)(end - start);
}

static size_t back_piece(size_t task_size) {
  return task_size > BACK_PIECE_MIN ? task_size : BACK_PIECE_MIN;
}

/* ---- the tasks ----------------------------------------------------------------------------- */

/* A task as it runs: its read into device memory of the split's pieces of io's range. */
typedef struct run {
  kvik__zc_task *task;
  kvik__zc_split *split;
  const kvik__device_io *io;
  kvik__device_read *read;
} run;

/* Read a piece through the bounce buffers. A short one marks where the file ended; a failed one
 * stops the other tasks from taking more. */
static void read_piece(run *r, int64_t at, size_t n) {
  size_t got = kvik__device_read_bounced(r->read, r->io->dev + (at - r->io->offset), n, at);
  if (r->read->rc < 0) {
    split_lock(r->split);
    r->split->failed = 1;
    split_unlock(r->split);
  } else if (got < n) {
    size_t end = (size_t)(at - r->io->offset) + got;
    if (end < r->task->ended) r->task->ended = end;
  }
}

/* The front's hold on the mapping, asked for once, for the whole read, on the first piece. */
typedef struct mapping {
  int asked;
  int held;         /* the copies may read from `host` until release_mapping() */
  const char *host; /* the read's first byte in the mapping */
} mapping;

/* Queue the copy of what it can of `size` bytes at `offset` straight from the file's registered
 * mapping: those up to the end of offset's granule, once it is registered (kvik__zc_ready).
 * Returns the bytes queued, 0 when the mapping cannot serve them: they are for the bounce
 * buffers. */
static size_t read_mapped(run *r, mapping *m, char *dev, size_t size, int64_t offset) {
  kvik__zc_read zc = {r->split->file, r->io->offset, r->io->size, r->split->tasks};
  if (r->read->rc < 0) return 0;
  if (!m->asked) {
    m->asked = 1;
    m->held = kvik__zc_begin(&zc, zc.request_offset, zc.request_size, &m->host);
  }
  if (!m->held) return 0;
  size_t n = kvik__zc_ready(&zc, r->io->mem->ctx, offset, size);
  if (n == 0) return 0;
  assert(n <= size);
  return kvik__device_read_direct(r->read, dev, m->host + (offset - r->io->offset), n) ? n : 0;
}

/* Wait for the copies from the mapping, which must end before it may be dropped, and let it go. */
static void release_mapping(run *r, const mapping *m) {
  if (!m->held) return;
  kvik__device_read_direct_wait(r->read);
  kvik__zc_done(r->split->file);
}

/* The front of a split: a granule the mapping cannot serve (not resident under KVIK_AUTO, refused,
 * another file registering) goes through the bounce buffers, a task's worth at a time, so that the
 * back tasks share it. After each step it queues the copies the back handed meanwhile. */
static void run_front(run *r) {
  int64_t mapped_from = 0, at;
  size_t n, task_size = r->io->task_size;
  mapping m = {0, 0, NULL};
  kvik__zc_relay *relay = &r->split->relay;
  relay_open(relay);
  while (r->read->rc == 0 && !kvik__cancelled() &&
         (n = take_front(r->split, mapped_from, task_size, &at)) > 0) {
    char *dev = r->io->dev + (at - r->io->offset);
    size_t mapped = at >= mapped_from ? read_mapped(r, &m, dev, n, at) : 0;
    relay_pass(relay);
    if (mapped == n) continue;
    if (at >= mapped_from) {
      mapped_from = (at / (int64_t)KVIK__ZC_GRANULE + 1) * (int64_t)KVIK__ZC_GRANULE;
      size_t keep = n < task_size ? n : task_size;
      give_back_front(r->split, n - keep);
      n = keep;
    }
    read_piece(r, at, n);
  }
  relay_close(relay);
  release_mapping(r, &m);
}

static void run_back(run *r) {
  int64_t at;
  size_t n, piece = back_piece(r->io->task_size);
  while (r->read->rc == 0 && !kvik__cancelled() && (n = take_back(r->split, piece, &at)) > 0)
    read_piece(r, at, n);
}

size_t kvik__zc_read_tasks(kvik__zc_file *zc, int64_t offset, size_t size, size_t task_size,
                           int single) {
  if (!kvik__zc_wanted(zc, size)) return 0;
  size_t tasks = 1;
  if (!single) {
    size_t piece = back_piece(task_size), pieces = size / piece + (size % piece != 0);
    size_t others = (size_t)kvik__setting(KVIK_SETTING_NUM_THREADS) - 1;
    tasks += pieces - 1 < others ? pieces - 1 : others;
  }
  /* Nothing to copy from the mapping yet, and registering would not pay: plain bounce buffers,
   * which have no relay to go through. */
  int worth = kvik__zc_count_read(zc, offset, size);
  if (kvik__setting(KVIK_SETTING_ZERO_COPY_READ) == KVIK_AUTO && !kvik__zc_pays(tasks) && !worth)
    return 0;
  return tasks;
}

void kvik__zc_split_init(kvik__zc_split *s, kvik__zc_file *zc, int64_t offset, size_t size,
                         size_t tasks) {
  *s =
      (kvik__zc_split){.front = offset, .back = offset + (int64_t)size, .file = zc, .tasks = tasks};
  atomic_flag_clear(&s->lock);
  relay_init(&s->relay);
}

void kvik__zc_read_run(kvik__zc_task *task, const kvik__device_io *io, int may_defer,
                       kvik__device_read *read) {
  assert(task->split);
  int front = task->index == 0;
  run r = {task, task->split, io, read};
  kvik__device_io bounced = *io;
  bounced.task_size = front ? io->task_size : back_piece(io->task_size);
  task->ended = SIZE_MAX;
  read->handoff = front ? NULL : &task->split->relay.handoff;
  if (kvik__device_read_begin(read, &bounced) == 0) {
    if (front) run_front(&r);
    else run_back(&r);
  }
  kvik__device_read_end(read, may_defer);
}
