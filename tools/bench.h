/* What the host (bench.c) and device (bench_device.c, bench_all.c) benchmarks share: options,
 * the test files and their pattern, the plain IO loops, the engine that measures a suite of
 * methods side by side and prints one table row per thread count, and the CUDA driver. */
#ifndef KVIK_BENCH_H
#define KVIK_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "kvik.h"

#define CHUNK ((size_t)4 << 20) /* bytes per call of the hand-written loops: kvik's task size */
#define MAX_COUNTS 32           /* thread counts --threads may list */
#define MAX_METHODS 7
#define BENCH_MAX_GPUS 64 /* --device all measures at most this many */
#define BENCH_ALL_GPUS (-1)

struct options {
  const char *dir;
  size_t size;
  int counts[MAX_COUNTS];
  int ncounts; /* 0: the default list */
  int repeat;
  int write;
  int device; /* --device: measure device memory (bench_device.c) */
  int gpu;    /* --device N: the GPU measured (default 0); BENCH_ALL_GPUS: --device all */
  int cold;   /* --cold: also read with the file dropped from the page cache before each run */
};

/* Everything a run holds, so that one cleanup path undoes it on success and on error alike. */
struct bench {
  struct options opt;
  int64_t default_threads; /* kvik's num_threads before the bench changed it */
  unsigned char *buf;      /* the whole file's content */
  unsigned char *scratch;  /* CHUNK bytes to read the file back into */
  int fd;
  int cold_run;       /* the table being measured drops the page cache before each read */
  void *device_state; /* bench_device.c's buffers */
};

extern char test_path[4096];

/*
 * A table: methods measured side by side, taking turns within each repetition so that a noisy
 * neighbour or a drifting clock speed hits all alike, the best of --repeat runs of each in GB/s.
 * `prepare` and `verify` run outside the timed region, before and after each run of a method.
 * After the method columns come `nratios` ratio columns computed by `ratio`. `available`, if
 * set, says whether a method can run on this machine at all; a column it rules out shows "n/a".
 */
struct suite {
  const char *title;
  int nmethods;
  const char *names[MAX_METHODS];
  int (*prepare)(struct bench *b, int method, int write);
  int (*run)(struct bench *b, kvik_file *f, int method, int nthreads, int write);
  int (*verify)(struct bench *b, int method, int write);
  int nratios;
  const char *ratio_names[2];
  double (*ratio)(const double *best, int i);
  int (*available)(struct bench *b, int method, int write);
};

/* Measure every thread count of --threads and print the table. Returns a CLI exit code. */
int bench_table(struct bench *b, const struct suite *suite, int write);

/* Fill buf with the pattern of the test file's bytes from `offset` (a multiple of 8) on. */
void bench_pattern_fill(unsigned char *buf, uint64_t offset, size_t len);

/* The file's pattern at `offset`: CLI_OK if buf holds it, else print where it differs. */
int bench_check_range(const unsigned char *buf, uint64_t offset, size_t len, const char *what);

/* The same, for a file that holds the pattern from `origin` (a multiple of 8) on, as
 * bench_pattern_fill(buf, origin, size) wrote it: its byte at `offset` is the pattern's at
 * origin + offset. */
int bench_check_pattern(const unsigned char *buf, uint64_t origin, uint64_t offset, size_t len,
                        const char *what);

/* Another test file in --dir, of --size bytes holding `content`, flushed and read once as the
 * first one is, so that it is in the page cache; removed, and its descriptor closed, when the
 * command ends or dies of a signal. Its path (valid until then) in *path, its descriptor in *fd.
 * At most BENCH_MAX_GPUS - 1 of them. Returns a CLI exit code. */
int bench_add_file(struct bench *b, unsigned char *content, const char **path, int *fd);

/* Check that the test file holds the pattern, reading it back with plain preads. */
int bench_verify_file(struct bench *b, const char *what);

/* pread/pwrite the range in CHUNK-sized calls, on 1 or on T threads. 0 or -errno. */
int bench_io_loop(int fd, unsigned char *buf, size_t len, uint64_t offset, int write);
int bench_io_parallel(int fd, unsigned char *buf, size_t size, int nthreads, int write);

/* Print an error (a -errno, or kvik_last_error()) without garbling a progress line. */
int bench_sys_fail(const char *what, int err);
int bench_kvik_fail(void);

/* Progress lines go to stderr only when it is a terminal: init finds out, once per command. */
void bench_progress_init(void);
void bench_progress(int write, const char *method, int nthreads, int rep, int repeat);

/* Erase the progress line (shown when stderr is a terminal) before printing. */
void bench_progress_clear(void);

/* Seconds on the monotonic clock. */
double bench_now(void);

/* CPU seconds (user + system) this process has used so far, all its threads; with `children`,
 * those of its waited-for children instead (curl in the remote bench). */
double bench_cpu_seconds(int children);

/* --threads LIST into o->counts; -1 if it is not a list of positive counts. */
int bench_parse_counts(const char *text, struct options *o);

/* The default --threads: 1, 2, 4 and kvik's default thread count `def`, ascending. */
void bench_default_counts(struct options *o, int def);

/* Check a kvik call's byte count against the file size. */
int bench_check_count(struct bench *b, ssize_t n, const char *call);

/* `kvik bench --device [N]`: the device tables of GPU N (0). Returns a CLI exit code. */
int bench_device(struct bench *b);

/* `kvik bench --device all`: every GPU at once (bench_all.c). Returns a CLI exit code. */
int bench_all(struct bench *b);

/* ---- the CUDA driver, which the tool loads itself for its buffers and baselines ------------ */

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;

/* The driver functions the device benches call: X(member, symbol, parameters). */
#define BENCH_DRIVER_FUNCTIONS(X)                                                                  \
  X(cuInit, "cuInit", (unsigned flags))                                                            \
  X(cuGetErrorName, "cuGetErrorName", (CUresult error, const char **name))                         \
  X(cuDeviceGet, "cuDeviceGet", (int *device, int ordinal))                                        \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext * ctx, int device))           \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext ctx))                                           \
  X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr * ptr, size_t size))                                 \
  X(cuMemFree, "cuMemFree_v2", (CUdeviceptr ptr))                                                  \
  X(cuMemHostAlloc, "cuMemHostAlloc", (void **ptr, size_t size, unsigned flags))                   \
  X(cuMemFreeHost, "cuMemFreeHost", (void *ptr))                                                   \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", (CUdeviceptr dst, const void *src, size_t size))              \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", (void *dst, CUdeviceptr src, size_t size))                    \
  X(cuMemsetD8, "cuMemsetD8_v2", (CUdeviceptr dst, unsigned char value, size_t count))             \
  X(cuCtxSynchronize, "cuCtxSynchronize", (void))

struct bench_driver {
#define MEMBER_(member, symbol, params) CUresult(*member) params;
  BENCH_DRIVER_FUNCTIONS(MEMBER_)
#undef MEMBER_
};

extern struct bench_driver bench_cu; /* filled by bench_cuda_load() */

/* Print "kvik bench --device: CALL failed: CUDA_ERROR_..." on stderr; returns CLI_ERROR. */
int bench_cuda_fail(const char *call, CUresult r);

#define CU_CHECK(call)                                                                             \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != 0) return bench_cuda_fail(#call, r_);                                                \
  } while (0)

/* Load libcuda.so.1 into bench_cu and initialise it (cuInit). A CLI exit code. */
int bench_cuda_load(void);

/* GPU `ordinal`'s primary context, retained for the rest of the process. A CLI exit code. */
int bench_cuda_context(int ordinal, CUcontext *ctx);

/* Load the CUDA driver and make GPU 0's primary context current (naming the GPU on stdout), then
 * allocate and free device memory in it: for `kvik bench URL --device` (remote.c). CLI codes. */
int bench_cuda_init(void);
int bench_cuda_alloc(size_t size, void **dev);
void bench_cuda_free(void *dev);

#endif
