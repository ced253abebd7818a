/* Batch IO's three backends, which batch.c (the API, routing, waiting) calls: the thread pool
 * (batch_pool.c), io_uring (batch_uring.c) and cuFile's batch API (batch_cufile.c). Their state
 * and the slots are in batch_state.h. */
#ifndef KVIK_SRC_BATCH_H
#define KVIK_SRC_BATCH_H

#include <stdint.h>

#include "batch_state.h"

/* ---- the pool (batch_pool.c) ---------------------------------------------------------------- */

/* Start the operation, which holds slot `id`, as a future (kvik_file_pread/pwrite); one that
 * cannot start is done. */
void kvik__batch_pool_start(kvik_batch *b, const kvik_batch_op *op, unsigned id);

/* Move the pool operations that are done to the done queue. */
void kvik__batch_pool_collect(kvik_batch *b);

/* Wait until `min_done` of the pool's operations are done or `timeout_ns` passed (negative: no
 * limit). */
void kvik__batch_pool_wait(kvik_batch *b, unsigned min_done, int64_t timeout_ns);

/* ---- io_uring (batch_uring.c) --------------------------------------------------------------- */

/* Hand to the ring the operations it takes (see KVIK_SETTING_IO_URING) of those not done
 * (r[i].done), and set r[i].ring or r[i].failed for them; the others are left to the pool. An
 * operation already in a slot (r[i].slotted) keeps it. */
void kvik__batch_uring_submit(kvik_batch *b, const kvik_batch_op *ops, kvik__batch_route *r,
                              unsigned count);

unsigned kvik__batch_uring_in_flight(const kvik_batch *b);

/* Collect the ring's completions, waiting up to timeout_ns until min_nr came. Returns 0 or a
 * negative code. */
int kvik__batch_uring_collect(kvik_batch *b, unsigned min_nr, int64_t timeout_ns);

/* Cancel what the kernel has not started, and collect everything in flight. */
void kvik__batch_uring_cancel(kvik_batch *b);

/* Free the ring and the staging arena. */
void kvik__batch_uring_free(kvik_batch *b);

/* ---- cuFile (batch_cufile.c) ---------------------------------------------------------------- */

/* Set r->cufile when cuFile's batch takes the operation: device memory on a file that cuFile
 * serves, with a cuFile that has the batch API, in the batch's one context (*ctx, once known:
 * memory of another goes to the pool). r->ctx is the memory's context. Returns 0 or a negative
 * code with a message naming `who`. */
int kvik__batch_cufile_route(const char *who, const kvik_batch_op *op, CUcontext *ctx,
                             kvik__batch_route *r);

/* Hand the operations routed to cuFile to its batch, set up in `ctx` on first use; those beyond
 * its free entries are routed to the pool instead. On failure nothing was submitted. */
int kvik__batch_cufile_submit(kvik_batch *b, const char *fn, const kvik_batch_op *ops,
                              kvik__batch_route *r, unsigned count, CUcontext ctx);

/* Collect what cuFile reports, waiting up to timeout_ns until min_nr operations completed. If
 * cuFile can no longer be called for the batch, its operations fail with that code. */
int kvik__batch_cufile_collect(kvik_batch *b, const char *fn, unsigned min_nr, int64_t timeout_ns);

/* Cancel cuFile's operations and collect them all. */
int kvik__batch_cufile_cancel(kvik_batch *b, const char *fn);

/* Destroy cuFile's batch, if it was set up, and free its arrays. */
void kvik__batch_cufile_free(kvik_batch *b);

#endif
