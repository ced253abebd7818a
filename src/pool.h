/* The thread pools: FIFO queues of tasks, each run by a fixed set of threads.
 *
 * Tasks never wait on other tasks: a request's last task to finish completes its future
 * (future.c), so no thread of a pool ever blocks on work queued behind it.
 *
 * Two pools, of KVIK_SETTING_NUM_THREADS threads each (a change resizes them: see pool.c):
 *  - KVIK__POOL_IO runs requests: file IO, and the copies to and from device memory;
 *  - KVIK__POOL_HOST runs the host side of stream-ordered requests (stream_io.c), whose tasks
 *    never make a CUDA call. A CUDA stream waits for them, and a call such as cuMemFree waits for
 *    every stream while other threads' CUDA calls wait for it: were they queued behind tasks that
 *    make CUDA calls, the process would hang. Its threads start on first use. */
#ifndef KVIK_SRC_POOL_H
#define KVIK_SRC_POOL_H

typedef struct kvik__task {
  struct kvik__task *next;
  void (*run)(struct kvik__task *task);
} kvik__task;

typedef enum kvik__pool_id { KVIK__POOL_IO, KVIK__POOL_HOST, KVIK__POOLS } kvik__pool_id;

/* Queue the tasks linked from `first` to `last` (through ->next) on `pool`, starting its threads
 * if it has none (after creation or fork). Returns 0, or a negative errno when no thread could
 * be started (then nothing was queued). */
int kvik__pool_submit(kvik__pool_id pool, kvik__task *first, kvik__task *last);

/* Whether the calling thread is one of KVIK__POOL_IO's. */
int kvik__pool_in_worker(void);

/* Have each thread of `pool` call `idle` when it runs out of work: how a higher layer finishes
 * work a thread deferred (device_io.c: the device reads whose copies still run). Before it
 * sleeps, the thread calls idle(0), which finishes what it can without waiting and returns
 * whether anything is left; while something is, the thread sleeps in short turns, taking new
 * tasks as they come, and calls idle(0) again. Before it exits it calls idle(1), which finishes
 * everything. So a thread never waits on deferred work while a task waits for it. Call this while
 * the library loads (KVIK__ON_LOAD, init.h), before any thread starts. */
void kvik__pool_set_idle(kvik__pool_id pool, int (*idle)(int may_wait));

#endif
