/* Zero-copy reads into device memory (KVIK_SETTING_ZERO_COPY_READ): how the tasks of one read
 * share its range between the file's registered mapping (zero_copy.h) and the bounce buffers
 * (device_io.h). A request asks kvik__zc_read_tasks() whether the path takes a read; if it does,
 * it sets up one kvik__zc_split for the read and runs that many tasks, each over the whole range,
 * through kvik__zc_read_run(). */
#ifndef KVIK_SRC_ZERO_COPY_READ_H
#define KVIK_SRC_ZERO_COPY_READ_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "device_io.h"
#include "zero_copy.h"

/* The copies of the back tasks, queued by the front task (zero_copy_read.c says why). */
typedef struct kvik__zc_relay {
  kvik__handoff handoff; /* first: the back tasks' reads hand their copies to it */
  atomic_flag lock;
  int open;                        /* the front queues what is handed to it */
  kvik__handed_copy *first, *last; /* handed, not queued yet */
} kvik__zc_relay;

/* What the tasks of one zero-copy read share: the bytes no task has taken yet. The request keeps
 * it with the tasks; its fields are zero_copy_read.c's. */
typedef struct kvik__zc_split {
  atomic_flag lock;
  int64_t front, back; /* [front, back) of the file: not taken yet */
  int failed;          /* a task failed: the others take nothing more */
  kvik__zc_relay relay;
  kvik__zc_file *file;
  size_t tasks; /* the read's */
} kvik__zc_split;

/* One task of a zero-copy read. */
typedef struct kvik__zc_task {
  kvik__zc_split *split;
  size_t index; /* 0 for the first task, which the others relay to */
  size_t ended; /* set by the run: where, counted from the read's first byte, a piece found the
                   * end of the file; SIZE_MAX if none did */
} kvik__zc_task;

/* How many tasks a read of `size` bytes at `offset` into device memory, asked with tasks of
 * `task_size`, from the file whose zero-copy state is `zc` (NULL: none) runs as on the zero-copy
 * path: a first task and up to one per other pool thread (the threads set how much CPU the read
 * may take); one with `single`. 0: the path declines the read, which takes the bounce buffers as
 * usual; under KVIK_AUTO also where registering would not pay on that many threads
 * (kvik__zc_pays) and the mapping has nothing for the read (kvik__zc_count_read, which counts the
 * read). */
size_t kvik__zc_read_tasks(kvik__zc_file *zc, int64_t offset, size_t size, size_t task_size,
                           int single);

/* Set up the split of a read of [offset, offset + size) of the file whose zero-copy state is `zc`,
 * which kvik__zc_read_tasks() took with `tasks`, before any of its tasks runs. */
void kvik__zc_split_init(kvik__zc_split *split, kvik__zc_file *zc, int64_t offset, size_t size,
                         size_t tasks);

/* Run a task of the read of io's range (the whole request's, as given to kvik__zc_split_init()).
 * The task takes pieces of the range until none is left, a piece fails, or kvik__cancelled()
 * (cancel.h: the request watches its failure flag). `read` is the task's read into device
 * memory: set read->finish first; it finishes as kvik__device_read_end(read, may_defer) says.
 * Report task->ended before the task completes. */
void kvik__zc_read_run(kvik__zc_task *task, const kvik__device_io *io, int may_defer,
                       kvik__device_read *read);

#endif
