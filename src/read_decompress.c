/* The fused read (kvik.h, "Compression": kvik_file_read_decompress): chunks read from files into
 * pinned host memory, checked there (frame_check.h), copied to staging device memory of kvik's
 * own, and decoded from there into their outputs.
 *
 * Chunks named by path are opened first, on the pool (OPEN_GROUP at a time a task), and those
 * of size 0 measured; the call then works on its own copy of the chunks, with those handles and
 * sizes. A chunk whose open fails has its status, and the others go on.
 *
 * The chunks go in batches of at most `budget` compressed bytes and `batch_chunks` chunks, each
 * one nvCOMP call on a stream of its own with its own staging device memory (SLOTS of them,
 * taken in turn: a slot is filled again once the decoding of the batch that used it is done). A
 * batch is read in steps of at most `step` bytes, into pinned host buffers taken in turn: a
 * step's chunks are read by kvik__file_pread_pooled() (the pool's threads, whatever a chunk's
 * size), checked, and copied to the device on the batch's stream, while the `ahead` steps after
 * it are read into other buffers. There are twice as many buffers as steps read ahead, so that a
 * step is read into a buffer whose copy was enqueued `ahead` steps before, long done, not into
 * the one just enqueued. The batch's decoding is enqueued after its last copy. nvCOMP's
 * results land by the streams' host functions (codec.c) and are judged after every stream was
 * waited for. docs/design.md ("The fused read") says why the sizes are what they are. */
#define _GNU_SOURCE
#include "read_decompress.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bounce.h"
#include "codec.h"
#include "cuda.h"
#include "device_pool.h"
#include "error.h"
#include "file.h"
#include "frame_check.h"
#include "memory.h"
#include "pool.h"
#include "sys.h"

#define DEFAULT_BUDGET ((size_t)2 << 30) /* compressed bytes of a batch */
#define DEFAULT_BATCH_CHUNKS 1024        /* chunks of a batch */
#define DEFAULT_STEP ((size_t)8 << 20)   /* compressed bytes read into pinned memory at once */
#define DEFAULT_AHEAD 4                  /* steps read ahead */
/* Where the checks walk every byte (LZ4), on the pool: steps of enough chunks to keep its threads
 * busy, fewer of them ahead (the pinned buffers stay within kvik's pinned cache), and smaller
 * batches, whose fast decoding overlaps the checks of the next. */
#define DEFAULT_WALKED_BUDGET ((size_t)512 << 20)
#define DEFAULT_WALKED_STEP ((size_t)64 << 20)
#define DEFAULT_WALKED_AHEAD 2
#define MAX_AHEAD 8
#define SLOTS 4           /* batches in flight */
#define STAGING_ALIGN 256 /* a CUDA allocation's; above every nvCOMP 6 input alignment */
#define OPEN_GROUP 32     /* chunks a task of the pool opens, one after the other */
#define PAGE ((size_t)4096)

static const char fn[] = "kvik_file_read_decompress";

static _Atomic size_t budget_for_tests, chunks_for_tests, step_for_tests, ahead_for_tests;

void kvik__read_decompress_sizes(size_t budget, size_t chunks, size_t step, size_t ahead) {
  budget_for_tests = budget;
  chunks_for_tests = chunks;
  step_for_tests = step;
  ahead_for_tests = ahead < MAX_AHEAD ? ahead : MAX_AHEAD;
}

/* The per-call arrays, one block: nvCOMP's arguments of each batch at the batch's place (its
 * chunks that were read, compacted), and what the call keeps per chunk. */
typedef struct arrays {
  const void **src;
  void **dst;
  size_t *src_sizes, *capacities, *sizes;
  size_t *chunk_of; /* the chunk each entry of nvCOMP's arrays stands for */
  size_t *staged;   /* each chunk's offset in its staging buffer */
  size_t *batch;    /* each chunk's batch */
  kvik_future **futures;
  int *nv_statuses, *own_statuses;
} arrays;

struct call;

/* The opening of chunks [first, end)'s paths as a task of the pool. */
typedef struct open_task {
  kvik__task base;
  struct call *c;
  size_t first, end;
} open_task;

/* A chunk's framing check as a task of the pool: a walk of LZ4's sequences costs about a
 * nanosecond a byte, so the checks of a step run on the pool's threads at once. */
typedef struct check_task {
  kvik__task base;
  struct call *c;
  const unsigned char *bytes;
  size_t i;
  int rc;
  char why[128];
} check_task;

typedef struct call {
  kvik_codec codec;
  const kvik_compressed_chunk *given;  /* the caller's chunks */
  const kvik_compressed_chunk *chunks; /* those the call works on: `given`, or `own` */
  kvik_compressed_chunk *own;          /* given ones with their paths opened and sizes known */
  open_task *opens;
  size_t n;
  int *statuses; /* the caller's, or own_statuses */
  arrays a;
  void *block;
  size_t align; /* of chunks in a staging buffer */
  size_t budget, batch_chunks, step, staging_bytes, host_bytes, batches;
  /* the most chunks, decoded bytes of a chunk and of a batch, for nvCOMP's space; that space's
   * place in each slot's staging memory, after the compressed chunks, and its size */
  size_t batch_n_max, out_max, batch_out_max, space_offset, space_bytes;
  int ahead, hosts; /* steps read ahead; pinned buffers, twice as many */
  const kvik__cuda_api *cu;
  CUstream stream[SLOTS];
  CUdeviceptr staging[SLOTS];
  CUevent decoded[SLOTS];
  void *host[2 * MAX_AHEAD];
  CUevent copied[2 * MAX_AHEAD];
  check_task *checks; /* one a chunk */
  pthread_mutex_t lock;
  pthread_cond_t done;
  size_t pending; /* tasks of the call on the pool that have not finished */
  /* the first chunk whose failure came with a message (a read's, the pipeline's), and it */
  size_t noted;
  char message[KVIK_MESSAGE_MAX];
} call;

/* ---- checks ----------------------------------------------------------------------------- */

static int chunk_fail(const call *c, int code, size_t i, const char *what) {
  return kvik__fail(code, "%s(%s): chunk %zu of %zu: %s", fn, kvik_codec_name(c->codec), i, c->n,
                    what);
}

static int check_chunk(const call *c, size_t i, size_t out_align) {
  const kvik_compressed_chunk *k = &c->given[i];
  if (!k->file && !k->path) return chunk_fail(c, -EINVAL, i, "NULL file and path");
  if (k->file && k->path) return chunk_fail(c, -EINVAL, i, "both a file and a path");
  if (!k->dst) return chunk_fail(c, -EINVAL, i, "NULL output");
  if (k->file_offset < 0) return chunk_fail(c, -EINVAL, i, "negative file offset");
  if (!k->uncompressed_size) return chunk_fail(c, -EINVAL, i, "uncompressed size 0");
  if (k->compressed_size > (uint64_t)INT64_MAX - (uint64_t)k->file_offset)
    return chunk_fail(c, -EINVAL, i, "offset + compressed size above INT64_MAX");
  if (out_align > 1 && (uintptr_t)k->dst % out_align)
    return chunk_fail(c, -EINVAL, i, "output not aligned as the codec requires");
  if (k->file && kvik_file_closed(k->file)) return chunk_fail(c, -EBADF, i, "file closed");
  if (k->file && (kvik__file_access(k->file) & O_ACCMODE) == O_WRONLY)
    return chunk_fail(c, -EBADF, i, "file not open for reading");
  return 0;
}

/* Everything checked before anything starts; nvCOMP loaded, its alignments known. */
static int check_call(call *c) {
  if (!kvik_codec_name(c->codec))
    return kvik__fail(-EINVAL, "%s: unknown codec %d", fn, (int)c->codec);
  if (!c->given && c->n > 0)
    return kvik__fail(-EINVAL, "%s(%s): NULL chunks for %zu chunks", fn, kvik_codec_name(c->codec),
                      c->n);
  size_t in_align, out_align;
  int rc = kvik_codec_alignment(c->codec, 0, &in_align, &out_align);
  for (size_t i = 0; rc == 0 && i < c->n; i++) rc = check_chunk(c, i, out_align);
  c->align = in_align > STAGING_ALIGN ? in_align : STAGING_ALIGN;
  return rc;
}

/* ---- the plan ----------------------------------------------------------------------------- */

static size_t padded(const call *c, size_t bytes) {
  return (bytes + c->align - 1) / c->align * c->align;
}

/* Place each chunk in its batch's staging buffer: a batch ends where the next chunk would pass
 * the budget or the count, but takes one chunk at least. The staging buffers hold the largest
 * batch; the pinned ones a step, or the largest chunk. */
static void plan(call *c) {
  size_t budget = budget_for_tests, chunks = chunks_for_tests, step = step_for_tests,
         ahead = ahead_for_tests;
  int walked = kvik__frame_check_walks_bytes(c->codec);
  c->budget = budget ? budget : walked ? DEFAULT_WALKED_BUDGET : DEFAULT_BUDGET;
  c->batch_chunks = chunks ? chunks : DEFAULT_BATCH_CHUNKS;
  c->step = step ? step : walked ? DEFAULT_WALKED_STEP : DEFAULT_STEP;
  c->ahead = ahead ? (int)ahead : walked ? DEFAULT_WALKED_AHEAD : DEFAULT_AHEAD;
  c->hosts = 2 * c->ahead;
  size_t fill = 0, count = 0, total = 0, out = 0;
  for (size_t i = 0; i < c->n; i++) {
    size_t bytes = padded(c, c->chunks[i].compressed_size); /* 0 for a chunk whose open failed */
    if (i == 0 || (fill > 0 && (bytes > c->budget || fill > c->budget - bytes)) ||
        count == c->batch_chunks) {
      c->batches++;
      fill = count = out = 0;
    }
    count++;
    c->a.batch[i] = c->batches - 1;
    c->a.staged[i] = fill;
    fill += bytes;
    total += bytes;
    out += c->chunks[i].uncompressed_size;
    if (fill > c->staging_bytes) c->staging_bytes = fill;
    if (bytes > c->host_bytes) c->host_bytes = bytes;
    if (count > c->batch_n_max) c->batch_n_max = count;
    if (c->chunks[i].uncompressed_size > c->out_max) c->out_max = c->chunks[i].uncompressed_size;
    if (out > c->batch_out_max) c->batch_out_max = out;
  }
  /* A step, or all there is; the largest chunk at least. */
  if (c->host_bytes < c->step) c->host_bytes = total < c->step ? total : c->step;
  c->host_bytes = (c->host_bytes + PAGE - 1) / PAGE * PAGE;
}

/* A batch's end: the first chunk of the next batch. */
static size_t batch_end(const call *c, size_t first) {
  size_t end = first + 1;
  while (end < c->n && c->a.batch[end] == c->a.batch[first]) end++;
  return end;
}

/* The end of the step that starts at `first`, within the batch that ends at `end`: the chunks
 * whose bytes fit in a pinned buffer from `first`'s on. */
static size_t step_end(const call *c, size_t first, size_t end) {
  size_t last = first + 1;
  while (last < end &&
         c->a.staged[last] + padded(c, c->chunks[last].compressed_size) - c->a.staged[first] <=
             c->host_bytes)
    last++;
  return last;
}

/* ---- per-call memory ---------------------------------------------------------------------- */

static int arrays_alloc(call *c) {
  size_t n = c->n, words = 9 * sizeof(uint64_t), ints = 2 * sizeof(int);
  if (n > SIZE_MAX / (words + ints) || !(c->block = kvik__calloc(n, words + ints)))
    return kvik__fail(-ENOMEM, "%s: no memory for %zu chunks", fn, n);
  uint64_t *w = c->block;
  arrays *a = &c->a;
  a->src = (const void **)(w);
  a->dst = (void **)(w + n);
  a->src_sizes = (size_t *)(w + 2 * n);
  a->capacities = (size_t *)(w + 3 * n);
  a->sizes = (size_t *)(w + 4 * n);
  a->chunk_of = (size_t *)(w + 5 * n);
  a->staged = (size_t *)(w + 6 * n);
  a->futures = (kvik_future **)(w + 7 * n);
  a->batch = (size_t *)(w + 8 * n);
  a->nv_statuses = (int *)(w + 9 * n);
  a->own_statuses = a->nv_statuses + n;
  if (!c->statuses) c->statuses = a->own_statuses;
  memset(c->statuses, 0, n * sizeof *c->statuses);
  if (kvik__frame_checked(c->codec) && !(c->checks = kvik__calloc(n, sizeof *c->checks)))
    return kvik__fail(-ENOMEM, "%s: no memory for %zu chunks' checks", fn, n);
  return 0;
}

static int cuda(CUresult result, const char *what) { return kvik__cuda_check(result, fn, what); }

/* A stream, staging device memory (from kvik's pool, which keeps it for the next call) and an
 * event for each slot the batches use. A slot's staging holds a batch's compressed chunks, then
 * nvCOMP's space for decoding the largest batch (kvik__decompress_space: the most chunks, the
 * largest chunk and the most decoded bytes of any batch bound every batch's need). Where nvCOMP
 * cannot say (a chunk too large for it), there is none: each decoding takes its own and fails
 * its own batch. */
static int staging_alloc(call *c) {
  const kvik__cuda_api *cu = c->cu;
  int rc = 0;
  size_t slots = c->batches < SLOTS ? c->batches : SLOTS;
  c->space_offset = (c->staging_bytes + STAGING_ALIGN - 1) / STAGING_ALIGN * STAGING_ALIGN;
  for (size_t d = 0; rc == 0 && d < slots; d++) {
    rc = cuda(cu->cuStreamCreate(&c->stream[d], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    if (rc == 0 && d == 0 &&
        kvik__decompress_space(fn, c->codec, c->batch_n_max, c->out_max, c->batch_out_max,
                               c->stream[0], &c->space_bytes) < 0)
      c->space_bytes = 0;
    if (rc == 0)
      rc = kvik__device_pool_alloc(fn, cu, c->space_offset + c->space_bytes, c->stream[d],
                                   &c->staging[d]);
    if (rc == 0) rc = cuda(cu->cuEventCreate(&c->decoded[d], KVIK__EVENT_FLAGS), "cuEventCreate");
  }
  return rc;
}

/* Pinned buffer h and its event, taken on its first use: a call of a few steps takes a few. */
static int host_alloc(call *c, int h) {
  if (c->host[h]) return 0;
  int rc = kvik__pinned_get(fn, c->host_bytes, &c->host[h]);
  if (rc == 0) rc = cuda(c->cu->cuEventCreate(&c->copied[h], KVIK__EVENT_FLAGS), "cuEventCreate");
  return rc;
}

/* Wait for every stream; 0 or the first failure. */
static int streams_wait(call *c) {
  int rc = 0;
  for (int d = 0; d < SLOTS; d++) {
    if (!c->stream[d]) continue;
    int synced = cuda(c->cu->cuStreamSynchronize(c->stream[d]), "cuStreamSynchronize");
    if (rc == 0) rc = synced;
  }
  return rc;
}

/* After the streams were waited for, or could not be: memory a failed stream may still use is
 * left allocated. */
static void staging_free(call *c, int streams_idle) {
  const kvik__cuda_api *cu = c->cu;
  for (int d = 0; d < SLOTS; d++) {
    if (c->decoded[d]) cu->cuEventDestroy(c->decoded[d]);
    if (c->staging[d] && streams_idle) kvik__device_pool_free(fn, cu, c->staging[d], c->stream[d]);
    if (c->stream[d]) cu->cuStreamDestroy(c->stream[d]);
  }
  for (int h = 0; h < c->hosts; h++) {
    if (c->copied[h]) cu->cuEventDestroy(c->copied[h]);
    if (c->host[h] && streams_idle) kvik__pinned_put(c->host[h], c->host_bytes);
  }
}

/* ---- failures and tasks ------------------------------------------------------------------- */

/* Chunk i failed with `code` and the thread's message; the first such chunk keeps it. Chunks
 * fail in their order, but for those that nvCOMP fails, judged at the end. */
static void note_failure(call *c, size_t i, int code) {
  c->statuses[i] = code;
  if (c->noted < i) return;
  c->noted = i;
  snprintf(c->message, sizeof c->message, "%s", kvik_last_error());
}

/* A task of the call finished. */
static void task_done(call *c) {
  pthread_mutex_lock(&c->lock);
  if (--c->pending == 0) pthread_cond_signal(&c->done);
  pthread_mutex_unlock(&c->lock);
}

/* Run the `count` tasks linked from `first` to `last` and wait for them: on the pool where
 * `pooled` (on the calling thread where the pool cannot start), else on the calling thread. */
static void run_tasks(call *c, kvik__task *first, kvik__task *last, size_t count, int pooled) {
  c->pending = count;
  if (!pooled || kvik__pool_submit(KVIK__POOL_IO, first, last) < 0)
    for (kvik__task *t = first, *next; t; t = next) {
      next = t->next;
      t->run(t);
    }
  pthread_mutex_lock(&c->lock);
  while (c->pending) pthread_cond_wait(&c->done, &c->lock);
  pthread_mutex_unlock(&c->lock);
}

/* ---- chunks by path ----------------------------------------------------------------------- */

static int unresolved(const kvik_compressed_chunk *k) { return !k->file || !k->compressed_size; }

/* Chunk i's file opened from its path, and where its size is 0, the rest of the file from its
 * offset; a failure is the chunk's. */
static void resolve(call *c, size_t i) {
  kvik_compressed_chunk *k = &c->own[i];
  int rc = k->file ? 0 : kvik_file_open(k->path, "r", 0, &k->file);
  if (rc == 0 && !k->compressed_size) {
    int64_t end = kvik_file_size(k->file);
    if (end >= 0 && end <= k->file_offset)
      end = kvik__fail(-ENODATA, "the file ends at byte %lld, at or before the chunk's offset",
                       (long long)end);
    if (end < 0) rc = (int)end;
    else k->compressed_size = (size_t)(end - k->file_offset);
  }
  if (rc < 0) {
    pthread_mutex_lock(&c->lock);
    note_failure(c, i, rc);
    pthread_mutex_unlock(&c->lock);
  }
}

static void open_run(kvik__task *task) {
  open_task *t = (open_task *)(void *)task;
  for (size_t i = t->first; i < t->end; i++)
    if (unresolved(&t->c->given[i])) resolve(t->c, i);
  task_done(t->c);
}

/* Where a chunk is named by path or has size 0: the call's own copy of the chunks, with its
 * paths opened (OPEN_GROUP chunks a task, on the pool where there are several) and its sizes
 * known. 0, or -ENOMEM. */
static int resolve_chunks(call *c) {
  size_t first = c->n, last = 0;
  for (size_t i = 0; i < c->n; i++)
    if (unresolved(&c->given[i])) {
      if (first == c->n) first = i;
      last = i;
    }
  if (first == c->n) return 0;
  size_t first_group = first / OPEN_GROUP, groups = last / OPEN_GROUP - first_group + 1;
  c->own = kvik__calloc(c->n, sizeof *c->own);
  c->opens = kvik__calloc(groups, sizeof *c->opens);
  if (!c->own || !c->opens) return kvik__fail(-ENOMEM, "%s: no memory for %zu chunks", fn, c->n);
  memcpy(c->own, c->given, c->n * sizeof *c->own);
  c->chunks = c->own;
  for (size_t g = 0; g < groups; g++) {
    size_t from = (first_group + g) * OPEN_GROUP, to = from + OPEN_GROUP;
    open_task *next = g + 1 < groups ? &c->opens[g + 1] : NULL;
    c->opens[g] = (open_task){.base = {.run = open_run, .next = next ? &next->base : NULL},
                              .c = c,
                              .first = from,
                              .end = to < c->n ? to : c->n};
  }
  run_tasks(c, &c->opens[0].base, &c->opens[groups - 1].base, groups, groups > 1);
  return 0;
}

/* Close the handles opened from paths. */
static void close_opened(call *c) {
  for (size_t i = 0; c->own && i < c->n; i++)
    if (!c->given[i].file) {
      kvik_file_free(c->own[i].file);
      c->own[i].file = NULL;
    }
}

/* ---- a batch ------------------------------------------------------------------------------ */

static void read_wait(call *c, size_t i) {
  const kvik_compressed_chunk *k = &c->chunks[i];
  ssize_t got = kvik_future_wait(c->a.futures[i]);
  kvik_future_free(c->a.futures[i]);
  c->a.futures[i] = NULL;
  if (got >= 0 && (size_t)got < k->compressed_size)
    got = kvik__fail(-ENODATA, "the file ends %zd bytes into the chunk's %zu", got,
                     k->compressed_size);
  if (got < 0) note_failure(c, i, (int)got);
}

/* A step of the pipeline: chunks [first, last) of batch k, which is chunks [batch_first,
 * batch_end), read into pinned buffer `h` (chunk `first` at its start). */
typedef struct step {
  size_t first, last, k, batch_first, batch_end;
  int h;
} step;

static void step_at(const call *c, size_t first, size_t k, size_t batch_first, int h, step *s) {
  s->batch_first = batch_first;
  s->batch_end = batch_end(c, batch_first);
  s->k = k;
  s->first = first;
  s->last = step_end(c, first, s->batch_end);
  s->h = h;
}

/* The step after `s`, in its batch or the next one, into the next pinned buffer; 0 after the
 * last. */
static int step_next(const call *c, const step *s, step *next) {
  int h = (s->h + 1) % c->hosts;
  if (s->last < s->batch_end) step_at(c, s->last, s->k, s->batch_first, h, next);
  else if (s->last < c->n) step_at(c, s->last, s->k + 1, s->last, h, next);
  else return 0;
  return 1;
}

static unsigned char *step_host(const call *c, const step *s, size_t i) {
  return (unsigned char *)c->host[s->h] + (c->a.staged[i] - c->a.staged[s->first]);
}

/* Start the reads of the step's chunks that did not fail (to open), all at once on the pool. */
static void step_read(call *c, const step *s) {
  for (size_t i = s->first; i < s->last; i++) {
    if (c->statuses[i]) continue;
    const kvik_compressed_chunk *k = &c->chunks[i];
    int rc = kvik__file_pread_pooled(k->file, step_host(c, s, i), k->compressed_size,
                                     k->file_offset, &c->a.futures[i]);
    if (rc < 0) note_failure(c, i, rc);
  }
}

static void step_wait(call *c, const step *s) {
  for (size_t i = s->first; i < s->last; i++)
    if (c->a.futures[i]) read_wait(c, i);
}

static void check_run(kvik__task *task) {
  check_task *t = (check_task *)(void *)task;
  struct call *c = t->c;
  const kvik_compressed_chunk *k = &c->chunks[t->i];
  t->rc = kvik__frame_check(c->codec, t->bytes, k->compressed_size, k->uncompressed_size, t->why,
                            sizeof t->why);
  task_done(c);
}

/* Check the framing of the step's chunks that were read, and wait: on the calling thread where
 * the checks read only headers, else on the pool (on the calling thread where it cannot start).
 * Tasks for the pool would queue behind the reads of the steps ahead. */
static void step_frames(call *c, const step *s) {
  kvik__task *first = NULL, **link = &first, *last = NULL;
  size_t count = 0;
  for (size_t i = s->first; i < s->last; i++) {
    if (c->statuses[i]) continue;
    check_task *t = &c->checks[i];
    *t = (check_task){.base = {.run = check_run}, .c = c, .bytes = step_host(c, s, i), .i = i};
    *link = last = &t->base;
    link = &t->base.next;
    count++;
  }
  if (!count) return;
  run_tasks(c, first, last, count, kvik__frame_check_walks_bytes(c->codec));
  for (size_t i = s->first; i < s->last; i++)
    if (!c->statuses[i] && c->checks[i].rc < 0)
      note_failure(c, i, kvik__fail(c->checks[i].rc, "not decoded: %s", c->checks[i].why));
}

/* Wait for the step's reads and check what they read. */
static void step_check(call *c, const step *s) {
  step_wait(c, s);
  if (kvik__frame_checked(c->codec)) step_frames(c, s);
}

/* Copy the step to its batch's staging memory, on the batch's stream. The batch's first step
 * waits for the slot to be free (its last batch decoded), and zeroes nvCOMP's space first: the
 * GPU does that while the batch is read, not after its last copy. */
static int step_copy(call *c, const step *s) {
  int d = (int)(s->k % SLOTS), rc = 0;
  if (s->first == s->batch_first && s->k >= SLOTS)
    rc = cuda(c->cu->cuEventSynchronize(c->decoded[d]), "cuEventSynchronize");
  if (rc == 0 && s->first == s->batch_first && c->space_bytes)
    rc = cuda(
        c->cu->cuMemsetD8Async(c->staging[d] + c->space_offset, 0, c->space_bytes, c->stream[d]),
        "cuMemsetD8Async");
  size_t from = c->a.staged[s->first];
  size_t bytes = c->a.staged[s->last - 1] + c->chunks[s->last - 1].compressed_size - from;
  if (rc == 0 && bytes > 0) /* none where every chunk of the step failed to open */
    rc = cuda(c->cu->cuMemcpyHtoDAsync(c->staging[d] + from, c->host[s->h], bytes, c->stream[d]),
              "cuMemcpyHtoDAsync");
  if (rc == 0) rc = cuda(c->cu->cuEventRecord(c->copied[s->h], c->stream[d]), "cuEventRecord");
  return rc;
}

/* Enqueue the decoding of the batch's chunks that were read and passed their checks, at the
 * batch's place in nvCOMP's arrays, and the event after it. */
static int decode_batch(call *c, size_t first, size_t end, int d) {
  arrays *a = &c->a;
  size_t m = 0;
  for (size_t i = first; i < end; i++) {
    if (c->statuses[i]) continue;
    size_t e = first + m++;
    a->src[e] = (const void *)(uintptr_t)(c->staging[d] + a->staged[i]);
    a->src_sizes[e] = c->chunks[i].compressed_size;
    a->dst[e] = c->chunks[i].dst;
    a->capacities[e] = c->chunks[i].uncompressed_size;
    a->chunk_of[e] = i;
  }
  for (size_t e = first + m; e < end; e++) a->chunk_of[e] = SIZE_MAX; /* no entry */
  int rc =
      kvik__decompress_async_in(c->codec, m, a->src + first, a->src_sizes + first, a->dst + first,
                                a->capacities + first, a->sizes + first, a->nv_statuses + first,
                                c->stream[d], c->staging[d] + c->space_offset, c->space_bytes);
  if (rc == 0) rc = cuda(c->cu->cuEventRecord(c->decoded[d], c->stream[d]), "cuEventRecord");
  return rc;
}

/* An error of the call itself, before chunk `first` was enqueued: it and those after it fail
 * with it, the first of them keeping the message. */
static void fail_rest(call *c, size_t first, int code) {
  for (size_t i = c->n; i-- > first;)
    if (c->statuses[i] == 0) note_failure(c, i, code);
  for (size_t e = first; e < c->n; e++) c->a.chunk_of[e] = SIZE_MAX; /* nothing to judge */
}

/* The steps read ahead: a ring of at most `ahead`; step i in pinned buffer i % hosts. */
typedef struct ahead {
  step steps[MAX_AHEAD];
  size_t first, count, issued; /* the oldest's place in `steps`, how many, how many ever */
} ahead;

/* Start reading the step after the newest one, into the next pinned buffer, once the copy from
 * it that was enqueued `ahead` steps before is done. 0 when all steps were issued, 1 when one
 * was, or the code of a failure to allocate or wait. */
static int read_ahead(call *c, ahead *q) {
  step next;
  if (q->issued == 0) step_at(c, 0, 0, 0, 0, &next);
  else if (!step_next(c, &q->steps[(q->first + q->count - 1) % c->ahead], &next)) return 0;
  int rc = q->issued < (size_t)c->hosts
               ? host_alloc(c, next.h)
               : cuda(c->cu->cuEventSynchronize(c->copied[next.h]), "cuEventSynchronize");
  if (rc < 0) return rc;
  step_read(c, &next);
  q->steps[(q->first + q->count++) % c->ahead] = next;
  q->issued++;
  return 1;
}

/* The pipeline of the file comment: `ahead` steps are read while the oldest one is checked and
 * copied. An error of its own stops it: the chunks of batches it had not enqueued fail with it. */
static void pipeline(call *c) {
  ahead q = {0};
  size_t enqueued = 0; /* the chunks before it are in batches enqueued */
  int rc = 0;
  while (q.count < (size_t)c->ahead && (rc = read_ahead(c, &q)) > 0) continue;
  while (rc >= 0 && q.count > 0) {
    step s = q.steps[q.first];
    q.first = (q.first + 1) % c->ahead;
    q.count--;
    step_check(c, &s);
    rc = step_copy(c, &s);
    if (rc == 0 && s.last == s.batch_end &&
        (rc = decode_batch(c, s.batch_first, s.batch_end, (int)(s.k % SLOTS))) == 0)
      enqueued = s.batch_end;
    if (rc == 0) rc = read_ahead(c, &q);
  }
  if (rc < 0) {
    for (; q.count > 0; q.count--, q.first = (q.first + 1) % c->ahead)
      step_wait(c, &q.steps[q.first]); /* their reads are done with the buffers */
    fail_rest(c, enqueued, rc);
  }
}

/* nvCOMP's results once the stream was waited for (`synced` 0), where a success must have the
 * size the caller gave; else the chunks it decoded fail with the wait's error. */
static void judge(call *c, int synced) {
  const arrays *a = &c->a;
  for (size_t e = 0; e < c->n; e++) {
    size_t i = a->chunk_of[e];
    if (i == SIZE_MAX) continue;
    int status = synced < 0 ? synced : a->nv_statuses[e];
    size_t want = c->chunks[i].uncompressed_size;
    c->statuses[i] = status;
    if (status == 0 && a->sizes[e] != want)
      note_failure(c, i,
                   kvik__fail(KVIK_EDECODED_SIZE, "nvCOMP decoded it to %zu bytes, not %zu",
                              a->sizes[e], want));
  }
}

/* The first failed chunk's code, with a message naming it. */
static int first_failure(const call *c) {
  for (size_t i = 0; i < c->n; i++) {
    int code = c->statuses[i];
    if (code == 0) continue;
    const kvik_compressed_chunk *k = &c->chunks[i], *given = &c->given[i];
    const char *why = i == c->noted ? c->message : kvik_strerror(code);
    char extent[48] = "to the end"; /* a size 0 that was not measured */
    if (k->compressed_size) snprintf(extent, sizeof extent, "%zu bytes", k->compressed_size);
    return kvik__fail(code, "%s(%s): chunk %zu of %zu (%s at offset %lld, %s): %s", fn,
                      kvik_codec_name(c->codec), i, c->n,
                      given->path ? given->path : kvik__file_path(given->file),
                      (long long)k->file_offset, extent, why);
  }
  return 0;
}

/* In the context made current: staging, the pipeline, the wait, the verdicts. */
static int run_in_context(call *c) {
  plan(c);
  if (!c->staging_bytes) return first_failure(c); /* every chunk failed to open: nothing to read */
  int rc = staging_alloc(c);
  if (rc == 0) pipeline(c);
  else fail_rest(c, 0, rc);
  close_opened(c); /* every read is done; the GPU may still decode */
  int synced = streams_wait(c);
  if (rc == 0) rc = synced;
  judge(c, synced);
  staging_free(c, synced == 0);
  return rc < 0 ? rc : first_failure(c);
}

int kvik_file_read_decompress(kvik_codec codec, const kvik_compressed_chunk *chunks,
                              size_t num_chunks, int *statuses) {
  call c = {.codec = codec,
            .given = chunks,
            .chunks = chunks,
            .n = num_chunks,
            .statuses = statuses,
            .noted = SIZE_MAX,
            .lock = PTHREAD_MUTEX_INITIALIZER,
            .done = PTHREAD_COND_INITIALIZER};
  int rc = check_call(&c);
  if (rc < 0 || num_chunks == 0) return rc;
  if (!(c.cu = kvik__cuda(fn))) return KVIK_ECUDA_UNAVAILABLE;
  if ((rc = arrays_alloc(&c)) == 0 && (rc = resolve_chunks(&c)) == 0 &&
      (rc = kvik__context_push_any(fn, c.cu)) == 0) {
    rc = run_in_context(&c);
    kvik__context_pop();
  }
  close_opened(&c);
  free(c.own);
  free(c.opens);
  free(c.checks);
  free(c.block);
  return rc;
}
