/*
 * kvik: fast file IO between storage and host or GPU memory.
 *
 * This is the one public header of libkvik. It is meant to be read top to bottom.
 *
 * Conventions that hold for every function below unless its block says otherwise:
 *
 *  - Return values: `0` or a byte count on success, a negative code on failure. Codes are
 *    `-errno` for system errors (`-ENOENT`, `-ENOSPC`, ...) and `KVIK_E...` values (below
 *    `KVIK_ERRNO_BASE`) for errors of the library itself. `kvik_strerror()` describes a code.
 *  - Detail: every failing call also stores a message on the calling thread saying what failed,
 *    on which path or handle and why ("kvik_file_open(\"/data/x\", \"r\"): No such file or
 *    directory"). Read it with `kvik_last_error()` before the next kvik call on that thread.
 *  - The library never prints, never exits, never changes `errno` as seen by the caller in a
 *    way that callers should rely on, and never raises signals of its own.
 *  - Handles are opaque, created and destroyed in pairs (`kvik_file_open`/`kvik_file_free`,
 *    future-returning calls/`kvik_future_free`). Destroy functions accept NULL.
 *  - Thread-safety is stated per function. "Thread-safe" means any number of threads may call it
 *    at once, also on the same handle.
 */
#ifndef KVIK_H
#define KVIK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KVIK_BUILDING_LIBRARY) && defined(__GNUC__)
#define KVIK_API __attribute__((visibility("default")))
#else
#define KVIK_API
#endif

/* ------------------------------------------------------------------------------------------ */
/* Version                                                                                      */
/* ------------------------------------------------------------------------------------------ */

#define KVIK_VERSION_MAJOR 0
#define KVIK_VERSION_MINOR 1
#define KVIK_VERSION_PATCH 0
/* One number that grows with every release: 0xMMmmpp. Compare with `>=`. */
#define KVIK_VERSION_NUM ((KVIK_VERSION_MAJOR << 16) | (KVIK_VERSION_MINOR << 8) | KVIK_VERSION_PATCH)
#define KVIK_VERSION_STRING "0.1.0"

/* The KVIK_VERSION_NUM of the library loaded at run time (may differ from the header's).
 * Thread-safe. */
KVIK_API unsigned kvik_version(void);

/* The version of the loaded library as "MAJOR.MINOR.PATCH". Static storage. Thread-safe. */
KVIK_API const char *kvik_version_string(void);

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* Library codes lie below every errno value. Once released, a code keeps its value and meaning;
 * new codes are appended. */
#define KVIK_ERRNO_BASE (-4000)

#define KVIK_ERROR_MAP(X)                                                                      \
  X(KVIK_ECONFIG, KVIK_ERRNO_BASE - 1, "invalid setting or environment variable value")       \
  X(KVIK_ECANCELED_BY_FORK, KVIK_ERRNO_BASE - 2, "IO was in flight in the parent at fork()")   \
  X(KVIK_EINTERNAL, KVIK_ERRNO_BASE - 3, "internal error in kvik")                             \
  X(KVIK_ECUDA_UNAVAILABLE, KVIK_ERRNO_BASE - 4, "CUDA driver or device not available")          \
  X(KVIK_ECUFILE_UNAVAILABLE, KVIK_ERRNO_BASE - 5, "cuFile library or driver not available")

enum kvik_error {
#define KVIK_ERROR_ENUM_(name, value, text) name = (value),
  KVIK_ERROR_MAP(KVIK_ERROR_ENUM_)
#undef KVIK_ERROR_ENUM_
};

/* cuFile's own failures: a cuFile status s (CU_FILE_DRIVER_NOT_INITIALIZED = 5001 ...
 * CU_FILE_IO_MAX_ERROR, all within 5001..5999) is returned as the code -s, so that
 * KVIK_CUFILE_STATUS() gives back cuFile's number. kvik_err_name() gives the status's name
 * ("CU_FILE_HANDLE_NOT_REGISTERED") and kvik_strerror() what it means. */
#define KVIK_ECUFILE_BASE (-5000)
#define KVIK_IS_CUFILE_ERROR(code) ((code) < KVIK_ECUFILE_BASE && (code) > KVIK_ECUFILE_BASE - 1000)
#define KVIK_CUFILE_STATUS(code) (-(code))

/* Failed CUDA driver calls: a CUresult r (1..999, e.g. CUDA_ERROR_OUT_OF_MEMORY = 2) is returned
 * as the code KVIK_ECUDA_BASE - r; KVIK_CUDA_RESULT() gives back r. kvik_err_name() gives the
 * driver's name ("CUDA_ERROR_OUT_OF_MEMORY") and kvik_strerror() its description. A result
 * outside 1..999, which no driver defines, is reported as CUDA_ERROR_UNKNOWN (999). */
#define KVIK_ECUDA_BASE (-6000)
#define KVIK_IS_CUDA_ERROR(code) ((code) < KVIK_ECUDA_BASE && (code) > KVIK_ECUDA_BASE - 1000)
#define KVIK_CUDA_RESULT(code) (KVIK_ECUDA_BASE - (code))

/* A description of `code` ("No such file or directory", "invalid setting ...", "out of
 * memory"). Accepts any int: unknown codes give "unknown error". CUDA codes are described by
 * the driver once kvik has loaded it (this never loads it), else from a built-in table of the
 * common results. Static storage. Thread-safe. */
KVIK_API const char *kvik_strerror(int code);

/* The symbolic name of `code` ("ENOENT", "KVIK_ECONFIG", "CU_FILE_IO_ERROR",
 * "CUDA_ERROR_INVALID_VALUE"), or "UNKNOWN". Static storage. Thread-safe. */
KVIK_API const char *kvik_err_name(int code);

/* The detail message of the last failing kvik call on this thread, or "" if none failed yet.
 * Valid until the next kvik call on this thread. Thread-safe (each thread has its own). */
KVIK_API const char *kvik_last_error(void);

/* ------------------------------------------------------------------------------------------ */
/* Settings                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/*
 * Process-wide settings. Each starts at its default, is then read once from its environment
 * variable (the same names and values as KvikIO, so existing deployments keep working) on the
 * first kvik call that needs settings, and can be changed at run time with
 * `kvik_setting_set()`. An invalid environment value is never ignored: every call that needs
 * settings then fails with KVIK_ECONFIG and a message naming the variable and the value.
 *
 *   setting                    environment variable           default
 *   KVIK_SETTING_COMPAT_MODE   KVIKIO_COMPAT_MODE             KVIK_COMPAT_AUTO
 *   KVIK_SETTING_NUM_THREADS   KVIKIO_NTHREADS (alias         CPUs this process may run on,
 *                              KVIKIO_NUM_THREADS)            at most 64
 *   KVIK_SETTING_TASK_SIZE     KVIKIO_TASK_SIZE               4 MiB
 *   KVIK_SETTING_GDS_THRESHOLD KVIKIO_GDS_THRESHOLD           1 MiB
 *   KVIK_SETTING_BOUNCE_BUFFER_SIZE KVIKIO_BOUNCE_BUFFER_SIZE 16 MiB
 *   KVIK_SETTING_AUTO_DIRECT_IO_READ  KVIKIO_AUTO_DIRECT_IO_READ  0 (off)
 *   KVIK_SETTING_AUTO_DIRECT_IO_WRITE KVIKIO_AUTO_DIRECT_IO_WRITE 0 (off)
 *   KVIK_SETTING_ZERO_COPY_READ KVIK_ZERO_COPY_READ           KVIK_OFF
 *
 * Settings of kvik's own, which KvikIO lacks, use the prefix KVIK_ instead of KVIKIO_.
 *
 * KVIK_SETTING_ZERO_COPY_READ: how reads of a file into device memory may skip the CPU copy.
 * The range is mapped (mmap), the mapping is registered read-only with CUDA, and the GPU copies
 * straight out of the page cache. KVIK_OFF: never; KVIK_AUTO: when every page of a task's range
 * is in the page cache; KVIK_ON: always (pages not in memory are then read from storage by the
 * registration, one fault at a time). Whenever the path cannot be taken (no support for
 * read-only registration, a range reaching past the end of the file, a failed mapping or
 * registration), the read goes through the bounce buffers instead, with the same result.
 * Off by default: registering and unregistering host memory wait for work the device is doing
 * (measured on an H100 with driver 580: a registration waited for a stream held by a host
 * function), so a read then also waits for kernels that run meanwhile; and the driver
 * serialises registrations, so one thread of the process at a time takes the path (10-13 GB/s
 * there, about twice a copying thread) while the others use the bounce buffers. Stream-ordered
 * reads never take this path, since their own stream is held while they run.
 *
 * Values are int64_t. Booleans are 0/1; sizes are bytes. Text values (environment variables
 * and `kvik_setting_parse()`) are trimmed and case-insensitive: booleans accept
 * on/off/true/false/yes/no/1/0, the compat mode accepts those and "auto", sizes and counts
 * accept decimal integers.
 */
typedef enum kvik_setting {
  KVIK_SETTING_COMPAT_MODE = 0,
  KVIK_SETTING_NUM_THREADS,
  KVIK_SETTING_TASK_SIZE,
  KVIK_SETTING_GDS_THRESHOLD,
  KVIK_SETTING_BOUNCE_BUFFER_SIZE,
  KVIK_SETTING_AUTO_DIRECT_IO_READ,
  KVIK_SETTING_AUTO_DIRECT_IO_WRITE,
  KVIK_SETTING_ZERO_COPY_READ,
  KVIK_SETTING_COUNT /* number of settings; not a setting */
} kvik_setting;

/* Values of KVIK_SETTING_COMPAT_MODE. ON: never use cuFile (POSIX IO only). OFF: require
 * cuFile. AUTO: use cuFile where it can work, POSIX elsewhere. */
typedef enum kvik_compat_mode { KVIK_COMPAT_OFF = 0, KVIK_COMPAT_ON = 1, KVIK_COMPAT_AUTO = 2 } kvik_compat_mode;

/* Values of the other three-way settings (KVIK_SETTING_ZERO_COPY_READ); the same numbers. */
typedef enum kvik_tristate { KVIK_OFF = 0, KVIK_ON = 1, KVIK_AUTO = 2 } kvik_tristate;

/* Where a setting's current value came from. */
typedef enum kvik_setting_source {
  KVIK_SOURCE_DEFAULT = 0,
  KVIK_SOURCE_ENV = 1, /* its environment variable */
  KVIK_SOURCE_API = 2  /* kvik_setting_set() or kvik_setting_parse() */
} kvik_setting_source;

/* Read a setting into *value. Returns 0, -EINVAL for an unknown setting or NULL value,
 * KVIK_ECONFIG if the environment holds an invalid value. Thread-safe. */
KVIK_API int kvik_setting_get(kvik_setting setting, int64_t *value);

/* Change a setting for the whole process. Returns 0, or -EINVAL (message says the accepted
 * range) without changing anything. Setting KVIK_SETTING_NUM_THREADS resizes the default
 * thread pool: it waits for running tasks to finish; queued tasks run on the new threads. If no
 * new thread can be started it returns that errno: the count still applies, queued tasks run on
 * the calling thread, and the pool tries again on its next use. From a kvik pool thread it
 * returns -EDEADLK. IO already submitted keeps the task size it was split with. Thread-safe. */
KVIK_API int kvik_setting_set(kvik_setting setting, int64_t value);

/* Like kvik_setting_set() with the value given as text, parsed as its environment variable
 * would be. Thread-safe. */
KVIK_API int kvik_setting_parse(kvik_setting setting, const char *text);

/* Where the current value came from. Returns a kvik_setting_source, or -EINVAL. Thread-safe. */
KVIK_API int kvik_setting_source_of(kvik_setting setting);

/* Write the current value as text ("AUTO", "on", "4194304") into buf (always terminated when
 * len > 0). Returns the text's length, or a negative code. Thread-safe. */
KVIK_API int kvik_setting_format(kvik_setting setting, char *buf, size_t len);

/* The setting's short name as KvikIO's Python `defaults.get()` knows it ("num_threads",
 * "task_size", "compat_mode", ...), or NULL for an unknown setting. Thread-safe. */
KVIK_API const char *kvik_setting_name(kvik_setting setting);

/* The setting's environment variable ("KVIKIO_NTHREADS"), or NULL. Thread-safe. */
KVIK_API const char *kvik_setting_env_name(kvik_setting setting);

/* The setting with this short name (see kvik_setting_name), or -EINVAL. Thread-safe. */
KVIK_API int kvik_setting_lookup(const char *name);

/* ------------------------------------------------------------------------------------------ */
/* Futures                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/*
 * A future stands for one non-blocking IO request. It is created by the call that starts the
 * request and owned by the caller, who frees it with kvik_future_free(). The request's buffer
 * must stay valid until the future is done. A call that fails immediately returns an error
 * and creates no future.
 */
typedef struct kvik_future kvik_future;

/* Wait until the request is done and return its result: the number of bytes transferred, or a
 * negative code (then kvik_last_error() says what failed; kvik_future_bytes_done() says how many
 * bytes were transferred all the same). May be called any number of times and from several
 * threads at once. Thread-safe. */
KVIK_API ssize_t kvik_future_wait(kvik_future *future);

/* Like kvik_future_wait(), but give up after timeout_ns nanoseconds (0 polls) and return
 * -ETIMEDOUT if the request is still running. Thread-safe. */
KVIK_API ssize_t kvik_future_wait_for(kvik_future *future, int64_t timeout_ns);

/* 1 if the request is done (its result is ready), else 0. Never blocks. Thread-safe. */
KVIK_API int kvik_future_done(kvik_future *future);

/* Bytes transferred so far (exact once done). For a failed write, the bytes that did reach the
 * file, not necessarily one contiguous range. Never blocks. Thread-safe. */
KVIK_API size_t kvik_future_bytes_done(kvik_future *future);

/* Free the future, first waiting for its request if it is still running. NULL is ignored.
 * No other thread may use the future during or after this call. */
KVIK_API void kvik_future_free(kvik_future *future);

/* ------------------------------------------------------------------------------------------ */
/* Files                                                                                        */
/* ------------------------------------------------------------------------------------------ */

typedef struct kvik_file kvik_file;

/*
 * Open `path` with a flag string:
 *   "r"  read only            "r+" read and write
 *   "w"  write only, create, truncate    "w+" read and write, create, truncate
 *   "a"  append, create       "a+" read and append, create
 * O_CLOEXEC always applies. `mode` is the permission of a created file (e.g. 0644).
 *
 * Append handles ("a", "a+"): every write goes to the end of the file and ignores its offset
 * argument, as pwrite(2) does on an O_APPEND descriptor. Each write through the handle lands
 * as one contiguous range even when several threads write at once, which O_APPEND cannot give
 * for writes split over threads. Writes by other processes at the same time are not ordered
 * with these.
 *
 * On success stores a new handle in *file and returns 0. Errors: -EINVAL (NULL argument,
 * unknown flag string), -EISDIR (a directory), any errno of open(2), KVIK_ECONFIG.
 * Thread-safe.
 */
KVIK_API int kvik_file_open(const char *path, const char *flags, unsigned mode, kvik_file **file);

/* Close the file's descriptors, first waiting for IO still in flight on it. The handle stays
 * valid (calls on it fail with -EBADF) until kvik_file_free(). Returns 0; -EBADF if already
 * closed; or an errno of close(2) (the descriptor is closed all the same). Thread-safe. */
KVIK_API int kvik_file_close(kvik_file *file);

/* Close the file if it is open, then free the handle. NULL is ignored. No other thread may use
 * the handle during or after this call. */
KVIK_API void kvik_file_free(kvik_file *file);

/* 1 if kvik_file_close() has been called, else 0. Thread-safe. */
KVIK_API int kvik_file_closed(const kvik_file *file);

/* The file descriptor (buffered, without O_DIRECT), or -EBADF if closed. It stays owned by the
 * handle: do not close it. Thread-safe. */
KVIK_API int kvik_file_fd(const kvik_file *file);

/* The descriptor's open flags as fcntl(F_GETFL) gives them, with O_APPEND added for append
 * handles. -EBADF if closed. Thread-safe. */
KVIK_API int kvik_file_open_flags(const kvik_file *file);

/* The file's size in bytes, or a negative code. Thread-safe. */
KVIK_API int64_t kvik_file_size(const kvik_file *file);

/*
 * Read `size` bytes at `file_offset` into `buf`, in parallel on the default thread pool in
 * tasks of KVIK_SETTING_TASK_SIZE bytes, and wait for them. Returns the number of bytes read,
 * which is less than `size` only when the file ends first (like pread(2), never an error and
 * never undefined bytes: bytes past the end of file are left untouched). Interrupted and short
 * system calls are retried. Errors: -EBADF (closed, or not opened for reading), -EINVAL
 * (NULL buffer with size > 0, negative offset, offset + size overflowing), any errno of
 * pread(2). Thread-safe.
 */
KVIK_API ssize_t kvik_file_read(kvik_file *file, void *buf, size_t size, int64_t file_offset);

/* Write `size` bytes from `buf` at `file_offset` (at the end for append handles), in parallel,
 * and wait. Returns `size`, or a negative code: a write that cannot complete (ENOSPC, EIO,
 * EFBIG ...) returns that errno, and the detail message says how many bytes were written.
 * Thread-safe. */
KVIK_API ssize_t kvik_file_write(kvik_file *file, const void *buf, size_t size, int64_t file_offset);

/* Start a read like kvik_file_read() without waiting: stores a future in *future and returns 0,
 * or returns a negative code (and creates no future). `task_size` 0 means
 * KVIK_SETTING_TASK_SIZE. Requests smaller than KVIK_SETTING_GDS_THRESHOLD run on the calling
 * thread and return a future that is already done. Thread-safe. */
KVIK_API int kvik_file_pread(kvik_file *file, void *buf, size_t size, int64_t file_offset,
                             size_t task_size, kvik_future **future);

/* Start a write like kvik_file_write() without waiting; see kvik_file_pread(). Thread-safe. */
KVIK_API int kvik_file_pwrite(kvik_file *file, const void *buf, size_t size, int64_t file_offset,
                              size_t task_size, kvik_future **future);

/* ------------------------------------------------------------------------------------------ */
/* GPU memory                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/*
 * Every read and write above (and of kvik_mmap below) accepts host or GPU memory: the kind of
 * `buf` is found per call from the pointer itself, an address inside an allocation included.
 * Device and managed memory go through pinned bounce buffers: each thread reads a chunk of the
 * file into one buffer while the previous chunk (of the same task, or of the thread's previous
 * task) is copied to the device from another, on a stream of its own, so storage and PCIe work
 * at the same time. Pinned host memory (from
 * cuMemHostAlloc/cudaHostAlloc or kvik_memory_register) and pageable host memory are read and
 * written directly.
 *
 * The CUDA driver (libcuda.so.1) is loaded on the first call that needs it, never at build or
 * load time. Without a driver or a device, host IO works as before and whatever needs the
 * driver fails with KVIK_ECUDA_UNAVAILABLE and a message saying what is missing. A child
 * process of a parent that used CUDA cannot use CUDA (a rule of the driver): there, buffers are
 * taken to be host memory.
 *
 * Copies run in the context of the buffer's allocation; for memory without one (stream-ordered
 * pools) in the calling thread's current context, else the primary context of the buffer's
 * device. Device memory must be ready when the call starts: work on other streams that writes
 * it must have completed.
 *
 * Memory bound: a thread with device work holds two pinned buffers of
 * min(KVIK_SETTING_BOUNCE_BUFFER_SIZE, max(task size / 2, 256 KiB)) bytes (2 MiB at the
 * defaults), and gives them back when it runs out of work; at most KVIK_PINNED_CACHE_BYTES of
 * idle pinned buffers are kept for reuse and the rest are freed. Keep 2 x buffer size x
 * KVIK_SETTING_NUM_THREADS under that bound, or buffers are freed and allocated again (slow).
 */
#define KVIK_PINNED_CACHE_BYTES ((size_t)256 << 20)

/* What kind of memory a pointer refers to. */
typedef enum kvik_memory_kind {
  KVIK_MEMORY_HOST = 0,   /* pageable host memory, or any pointer CUDA does not know */
  KVIK_MEMORY_PINNED = 1, /* page-locked host memory: cuMemHostAlloc or registered */
  KVIK_MEMORY_DEVICE = 2, /* device memory: cuMemAlloc, cudaMallocAsync pools, CuPy, PyTorch */
  KVIK_MEMORY_MANAGED = 3 /* managed (unified) memory */
} kvik_memory_kind;

/* The kind of memory at `ptr`: a kvik_memory_kind, or a CUDA error code (KVIK_IS_CUDA_ERROR)
 * if the driver fails to say. Without a CUDA driver every pointer is KVIK_MEMORY_HOST.
 * Thread-safe. */
KVIK_API int kvik_memory_kind_of(const void *ptr);

/* Page-lock host memory [buf, buf + size) for every CUDA context, so that device transfers
 * from and to it skip the bounce buffers (cuMemHostRegister). Pair with kvik_memory_deregister().
 * Returns 0; -EINVAL (NULL or size 0); KVIK_ECUDA_UNAVAILABLE; a CUDA error code
 * (KVIK_IS_CUDA_ERROR; for instance that of CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED when the
 * range is already registered). Thread-safe. */
KVIK_API int kvik_memory_register(void *buf, size_t size);

/* Undo kvik_memory_register(buf, ...). Returns 0, -EINVAL, KVIK_ECUDA_UNAVAILABLE or a CUDA
 * error code (KVIK_IS_CUDA_ERROR; that of CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED when not
 * registered). Thread-safe. */
KVIK_API int kvik_memory_deregister(void *buf);

/* The CUDA driver's version (e.g. 13000 for 13.0), or KVIK_ECUDA_UNAVAILABLE with a message
 * saying why (no libcuda.so.1, no device, ...). Loads the driver. Thread-safe. */
KVIK_API int kvik_cuda_driver_version(void);

/* The number of CUDA devices, or KVIK_ECUDA_UNAVAILABLE. Thread-safe. */
KVIK_API int kvik_cuda_device_count(void);

/* Write the name of CUDA device `ordinal` into `name` (terminated when len > 0). Returns 0,
 * -EINVAL (bad ordinal), KVIK_ECUDA_UNAVAILABLE or a CUDA error code (KVIK_IS_CUDA_ERROR).
 * Thread-safe. */
KVIK_API int kvik_cuda_device_name(int ordinal, char *name, size_t len);

/*
 * Read the whole file into new device memory of CUDA device `device` (in its primary context):
 * allocates as many bytes as the file has, reads them in parallel and stores the allocation in
 * *devptr (NULL for an empty file). Returns the number of bytes, or a negative code (then nothing
 * stays allocated). Free the memory with kvik_device_free(). Thread-safe.
 */
KVIK_API ssize_t kvik_file_read_to_device(kvik_file *file, int device, void **devptr);

/* Free device memory from kvik_file_read_to_device(). NULL is ignored (returns 0). Returns 0 or
 * a CUDA error code (KVIK_IS_CUDA_ERROR). Thread-safe. */
KVIK_API int kvik_device_free(void *devptr);

/* ------------------------------------------------------------------------------------------ */
/* Stream-ordered IO                                                                            */
/* ------------------------------------------------------------------------------------------ */

/*
 * Read `size` bytes at `file_offset` into `buf` (host or device memory) in the order of CUDA
 * stream `stream` (a CUstream or cudaStream_t; NULL is the default stream): the read starts when
 * the work queued on the stream before it is done, and work queued after it starts only when the
 * read is done. The call itself does not wait for either: it queues the request and returns at
 * once, storing a future in *future.
 *
 * The future completes before the stream moves past the read: once the stream is synchronised,
 * kvik_future_done() is 1 and kvik_future_wait() returns the byte count (less than `size` only
 * at end of file) at once. A failed read completes the future with its error; the stream still
 * moves on, so check the future before using the data.
 *
 * The file and the buffer must stay valid until the future is done. Freeing the future before
 * the stream reached the read waits for the stream. Returns 0, or a negative code (then nothing
 * was queued): the errors of kvik_file_pread(), KVIK_ECUDA_UNAVAILABLE, a CUDA error code
 * (KVIK_IS_CUDA_ERROR). Thread-safe.
 */
KVIK_API int kvik_file_read_async(kvik_file *file, void *buf, size_t size, int64_t file_offset, void *stream,
                                  kvik_future **future);

/* Write like kvik_file_write() in the order of `stream`; see kvik_file_read_async(). The
 * future's result is `size` or the write's error. Thread-safe. */
KVIK_API int kvik_file_write_async(kvik_file *file, const void *buf, size_t size, int64_t file_offset,
                                   void *stream, kvik_future **future);

/* ------------------------------------------------------------------------------------------ */
/* Mapped files                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/*
 * A read-only memory mapping of a file (mmap(2), MAP_SHARED), read into host or device memory
 * by copying from the mapping: the KvikIO MmapHandle. Useful when the same file is read many
 * times in small pieces, as the page cache then serves it without a system call per read.
 *
 * kvik_mmap_open() maps `map_size` bytes from `map_offset` (map_size 0: up to the end of the
 * file). `flags` must be "r". Errors: -EINVAL (NULL argument, flags other than "r", a range
 * outside the file), any errno of open(2) or mmap(2). An empty file opens with nothing mapped.
 * The file must not shrink while mapped: touching a page past its new end raises SIGBUS, a
 * rule of mmap. Thread-safe.
 */
typedef struct kvik_mmap kvik_mmap;

KVIK_API int kvik_mmap_open(const char *path, const char *flags, size_t map_size, int64_t map_offset,
                            kvik_mmap **map);

/* Unmap and close, first waiting for reads in flight. The handle stays valid until
 * kvik_mmap_free(). Returns 0, or -EBADF if already closed. Thread-safe. */
KVIK_API int kvik_mmap_close(kvik_mmap *map);

/* Close if open, then free. NULL is ignored. No other thread may use the handle during or after
 * this call. */
KVIK_API void kvik_mmap_free(kvik_mmap *map);

/* 1 if closed, else 0. Thread-safe. */
KVIK_API int kvik_mmap_closed(const kvik_mmap *map);

/* The file's size when it was opened, and the mapped range. Thread-safe. */
KVIK_API int64_t kvik_mmap_file_size(const kvik_mmap *map);
KVIK_API size_t kvik_mmap_map_size(const kvik_mmap *map);
KVIK_API int64_t kvik_mmap_map_offset(const kvik_mmap *map);

/* Copy `size` bytes at file offset `offset` into `buf`, in parallel like kvik_file_read().
 * The range must lie inside the mapped range, else -EINVAL. Returns `size` or a negative code.
 * Thread-safe. */
KVIK_API ssize_t kvik_mmap_read(kvik_mmap *map, void *buf, size_t size, int64_t offset);

/* Start kvik_mmap_read() without waiting; see kvik_file_pread(). Thread-safe. */
KVIK_API int kvik_mmap_pread(kvik_mmap *map, void *buf, size_t size, int64_t offset, size_t task_size,
                             kvik_future **future);

/* ------------------------------------------------------------------------------------------ */
/* Page cache                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* How many of the file's pages are in the page cache (mincore(2)): stores the counts in
 * *resident_pages and *total_pages (either may be NULL). Returns 0 or a negative code.
 * Thread-safe. */
KVIK_API int kvik_page_cache_info(const char *path, size_t *resident_pages, size_t *total_pages);

/* Write back the file's dirty pages and ask the kernel to drop its cached pages
 * (fdatasync + posix_fadvise(POSIX_FADV_DONTNEED)). Returns 0 or a negative code. Pages in
 * use elsewhere (mapped by other processes) may stay. Thread-safe. */
KVIK_API int kvik_page_cache_drop(const char *path);

/* ------------------------------------------------------------------------------------------ */
/* What the library found                                                                       */
/* ------------------------------------------------------------------------------------------ */

/* Optional libraries that kvik loads at run time, never at build time. */
typedef enum kvik_runtime_lib { KVIK_LIB_CUDA = 0, KVIK_LIB_CUFILE = 1 } kvik_runtime_lib;

/* Whether `lib` can be loaded on this machine. Returns 1 and writes the path it was loaded from
 * into `detail`, or returns 0 and writes the loader's reason into `detail`; -EINVAL for an
 * unknown library. `detail` may be NULL. Thread-safe. */
KVIK_API int kvik_runtime_lib_probe(kvik_runtime_lib lib, char *detail, size_t len);

/* Whether files in directory `dir` can be opened with O_DIRECT and read and written with it
 * (tested with a temporary file, removed again). Returns 1 or 0, or a negative code when the
 * test file cannot be created. Thread-safe. */
KVIK_API int kvik_direct_io_supported(const char *dir);

#ifdef __cplusplus
}
#endif

#endif /* KVIK_H */
