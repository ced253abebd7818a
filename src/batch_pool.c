/* The thread pool's part of a batch: operations that run as ordinary futures. */
#define _GNU_SOURCE
#include <stddef.h>

#include "batch.h"
#include "future.h"

void kvik__batch_pool_start(kvik_batch *b, const kvik_batch_op *op, unsigned id) {
  kvik_future *future = NULL;
  int rc = op->opcode == KVIK_BATCH_READ
               ? kvik_file_pread(op->file, op->buf, op->size, op->file_offset, 0, &future)
               : kvik_file_pwrite(op->file, op->buf, op->size, op->file_offset, 0, &future);
  /* Everything kvik_file_pread checks was checked already: what fails here (out of memory, a
   * file closed meanwhile) fails this operation alone, as it would have in flight. */
  if (rc < 0) {
    kvik__batch_finish(b, id, KVIK_BATCH_FAILED, rc);
    return;
  }
  b->pool.ids[b->pool.n] = id;
  b->pool.futures[b->pool.n++] = future;
}

void kvik__batch_pool_collect(kvik_batch *b) {
  for (unsigned k = 0; k < b->pool.n;) {
    kvik_future *future = b->pool.futures[k];
    if (!kvik_future_done(future)) {
      k++;
      continue;
    }
    unsigned id = b->pool.ids[k];
    ssize_t result = kvik_future_wait(future);
    kvik_future_free(future);
    b->pool.n--;
    b->pool.futures[k] = b->pool.futures[b->pool.n];
    b->pool.ids[k] = b->pool.ids[b->pool.n];
    kvik__batch_finish(b, id, result < 0 ? KVIK_BATCH_FAILED : KVIK_BATCH_COMPLETE, result);
  }
}

void kvik__batch_pool_wait(kvik_batch *b, unsigned min_done, int64_t timeout_ns) {
  kvik__futures_wait_some(b->pool.futures, b->pool.n, min_done, timeout_ns);
}
