/* Host reads and writes served by the kernel's io_uring: a batch's operations are handed to the
 * kernel from the thread that submits them, and reported as they end (KVIK_SETTING_IO_URING).
 * One ring serves one batch, and like the batch is used by one thread at a time. */
#ifndef KVIK_SRC_URING_H
#define KVIK_SRC_URING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvik.h"
#include "op.h"

typedef struct kvik__uring kvik__uring;

/* One operation: `fd` is the descriptor the ring reads or writes through (the file's O_DIRECT
 * one where the whole range may go direct). Whatever the ring leaves unfinished (a short count,
 * an interrupted call, O_DIRECT refused by the file system) is finished on the thread that
 * collects it, through the ring's kvik__uring_rest. */
typedef struct kvik__uring_op {
  kvik_file *file;
  kvik__op op;
  int fd;
  int direct; /* fd is the O_DIRECT descriptor */
  char *buf;
  size_t size;
  int64_t offset;
} kvik__uring_op;

/* Moves `size` bytes of an operation's file on this thread, without the ring, as a task of
 * kvik_file_pread or kvik_file_pwrite would (file.c: kvik__file_transfer, which the caller of
 * kvik__uring_create passes, as this layer may not call it). Returns 0 with *done, or a negative
 * code with a message. */
typedef int kvik__uring_rest(kvik_file *file, kvik__op op, char *buf, size_t size, int64_t offset,
                             size_t *done);

/* A ring for up to max_ops operations in flight, which finishes what it leaves unfinished with
 * `rest`. Returns 0, or a negative code with a message (-ENOSYS, -EPERM: the kernel or its policy
 * refuses io_uring; -EOPNOTSUPP: too old a kernel). */
int kvik__uring_create(const char *fn, unsigned max_ops, kvik__uring_rest *rest,
                       kvik__uring **ring);

/* Waits for what is in flight (the kernel writes into its buffers), then frees the ring. In a
 * child after fork() it only lets go of the child's copies: the ring is the parent's. */
void kvik__uring_free(kvik__uring *ring);

/* Register [base, base + len) as the ring's fixed buffer: operations whose buffer lies inside it
 * then use it as such, so the kernel does not pin its pages for each of them. Returns 0, or a
 * negative errno without a message (RLIMIT_MEMLOCK too low, say): operations work as before. */
int kvik__uring_register_buffer(kvik__uring *ring, char *base, size_t len);

/* Whether this process is a child forked after the ring was set up: the ring is the parent's. */
int kvik__uring_forked(const kvik__uring *ring);

/* Operations in flight, reported or not. */
unsigned kvik__uring_in_flight(const kvik__uring *ring);

/* Queue operation `id` (below max_ops). The kernel gets it at kvik__uring_submit(), or sooner
 * when the queue is full. */
void kvik__uring_start(kvik__uring *ring, unsigned id, const kvik__uring_op *op);

/* Hand every queued operation to the kernel: afterwards it holds its own reference to each
 * file, so a descriptor may close. Operations the kernel refuses to take (out of memory, say)
 * are finished on this thread instead, and reported as usual. */
void kvik__uring_submit(kvik__uring *ring);

/* Called for each operation that ended: its byte count or negative code, and whether the
 * kernel canceled it before it moved any bytes. */
typedef void kvik__uring_done(void *ctx, unsigned id, ssize_t result, int canceled);

/* Report ended operations to `done`, waiting up to timeout_ns (negative: no limit) until at
 * least min_nr were; a wait interrupted by a signal returns early. In a child after fork(),
 * every operation in flight is reported at once with KVIK_ECANCELED_BY_FORK. Returns 0 or a
 * negative code of io_uring_enter (nothing is lost: a later call reports it). */
int kvik__uring_reap(kvik__uring *ring, unsigned min_nr, int64_t timeout_ns, kvik__uring_done *done,
                     void *ctx);

/* Ask the kernel to cancel every operation in flight that has not started (Linux 5.19 and
 * later; earlier kernels let all finish). Reap them as usual. */
void kvik__uring_cancel(kvik__uring *ring);

#endif
