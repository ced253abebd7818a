/* The default thread pool: a FIFO queue of tasks run by a fixed set of threads.
 *
 * Tasks never wait on other tasks: a request's last task to finish completes its future
 * (future.c), so no thread of the pool ever blocks on work queued behind it. */
#ifndef KVIK_SRC_POOL_H
#define KVIK_SRC_POOL_H

typedef struct kvik__task {
  struct kvik__task *next;
  void (*run)(struct kvik__task *task);
} kvik__task;

/* Queue the tasks linked from `first` to `last` (through ->next), starting the pool's threads
 * if it has none (after creation or fork). Returns 0, or a negative errno when no thread could
 * be started (then nothing was queued). */
int kvik__pool_submit(kvik__task *first, kvik__task *last);

/* Set the number of threads. A running pool is resized at once: running tasks finish, queued
 * tasks wait for the new threads. Returns 0; -EDEADLK when called from a pool thread; a negative
 * errno when no thread could be started (queued tasks then run on the calling thread, so none is
 * lost). */
int kvik__pool_resize(unsigned nthreads);

/* Whether the calling thread is one of the pool's. */
int kvik__pool_in_worker(void);

/* Threads running now (0 before first use and in a child after fork). */
unsigned kvik__pool_running(void);

void kvik__pool_atfork_prepare(void);
void kvik__pool_atfork_parent(void);
void kvik__pool_atfork_child(void);

#endif
