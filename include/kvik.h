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
#define KVIK_VERSION_NUM                                                                           \
  ((KVIK_VERSION_MAJOR << 16) | (KVIK_VERSION_MINOR << 8) | KVIK_VERSION_PATCH)
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
  X(KVIK_ECUFILE_UNAVAILABLE, KVIK_ERRNO_BASE - 5, "cuFile library or driver not available")     \
  X(KVIK_ENOREMOTE, KVIK_ERRNO_BASE - 6, "kvik was built without remote file support (libcurl)") \
  X(KVIK_EREMOTE, KVIK_ERRNO_BASE - 7, "remote transfer failed")                                \
  X(KVIK_EREMOTE_SHORT, KVIK_ERRNO_BASE - 8, "remote response ended before the requested range") \
  X(KVIK_EREMOTE_LONG, KVIK_ERRNO_BASE - 9, "remote response longer than the requested range")  \
  X(KVIK_ERANGE_IGNORED, KVIK_ERRNO_BASE - 10, "server ignored the range request")               \
  X(KVIK_ETLS, KVIK_ERRNO_BASE - 11, "TLS connection or certificate verification failed")        \
  X(KVIK_ERANGE_MISMATCH, KVIK_ERRNO_BASE - 12, "Content-Range does not match the requested range")

enum kvik_error {
#define KVIK_ERROR_ENUM_(name, value, text) name = (value),
  KVIK_ERROR_MAP(KVIK_ERROR_ENUM_)
#undef KVIK_ERROR_ENUM_
};

/* Other libraries' failures are returned in one encoding: the number n (1..999) of a failure in
 * library L's own numbering becomes the code KVIK_E<L>_BASE - n. KVIK_IS_<L>_ERROR(code) tells
 * such a code apart and a third macro gives back L's number. kvik_err_name() gives L's name for
 * it and kvik_strerror() L's description. */
#define KVIK_FOREIGN_CODE_(base, n) ((base) - (n))
#define KVIK_IS_FOREIGN_CODE_(base, code) ((code) < (base) && (code) > (base) - 1000)

/* cuFile: n is the status's offset from cuFile's CUFILEOP_BASE_ERR (5000), so a status s
 * (CU_FILE_DRIVER_NOT_INITIALIZED = 5001 ... 5999) is the code -s; KVIK_CUFILE_STATUS() gives
 * back s, and kvik_err_name() its name ("CU_FILE_HANDLE_NOT_REGISTERED"). */
#define KVIK_ECUFILE_BASE (-5000)
#define KVIK_IS_CUFILE_ERROR(code) KVIK_IS_FOREIGN_CODE_(KVIK_ECUFILE_BASE, code)
#define KVIK_CUFILE_STATUS(code) (5000 + KVIK_FOREIGN_CODE_(KVIK_ECUFILE_BASE, code))

/* The CUDA driver: n is the CUresult (CUDA_ERROR_OUT_OF_MEMORY = 2); KVIK_CUDA_RESULT() gives it
 * back. A result outside 1..999, which no driver defines, is reported as CUDA_ERROR_UNKNOWN
 * (999). */
#define KVIK_ECUDA_BASE (-6000)
#define KVIK_IS_CUDA_ERROR(code) KVIK_IS_FOREIGN_CODE_(KVIK_ECUDA_BASE, code)
#define KVIK_CUDA_RESULT(code) KVIK_FOREIGN_CODE_(KVIK_ECUDA_BASE, code)

/* HTTP: n is the error status of a remote read (100..999, e.g. 404); KVIK_HTTP_STATUS() gives it
 * back, kvik_err_name() gives "HTTP_404" and kvik_strerror() the reason phrase ("Not Found"). */
#define KVIK_EHTTP_BASE (-7000)
#define KVIK_IS_HTTP_ERROR(code)                                                                 \
  (KVIK_IS_FOREIGN_CODE_(KVIK_EHTTP_BASE, code) && (code) <= KVIK_EHTTP_BASE - 100)
#define KVIK_HTTP_STATUS(code) KVIK_FOREIGN_CODE_(KVIK_EHTTP_BASE, code)

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
 *   KVIK_SETTING_HTTP_MAX_ATTEMPTS KVIKIO_HTTP_MAX_ATTEMPTS   3
 *   KVIK_SETTING_HTTP_TIMEOUT  KVIKIO_HTTP_TIMEOUT            60 (seconds per attempt)
 *   KVIK_SETTING_HTTP_STATUS_CODES KVIKIO_HTTP_STATUS_CODES   429,500,502,503,504
 *   KVIK_SETTING_REMOTE_VERBOSE KVIKIO_REMOTE_VERBOSE         0 (off)
 *   KVIK_SETTING_REMOTE_CONNECTIONS KVIK_REMOTE_CONNECTIONS   64
 *   KVIK_SETTING_IO_URING      KVIK_IO_URING                  KVIK_AUTO
 *
 * Settings of kvik's own, which KvikIO lacks, use the prefix KVIK_ instead of KVIKIO_.
 *
 * KVIK_SETTING_TASK_SIZE: the bytes of one task of a request; a request is cut into at most
 * 16384 tasks, so a larger request gets larger tasks (see kvik_file_pread).
 *
 * KVIK_SETTING_AUTO_DIRECT_IO_READ/WRITE: reads (writes) of host memory through O_DIRECT where the
 * file system takes it: the page-aligned middle of a range through an O_DIRECT descriptor, its
 * unaligned head and tail through the page cache. A buffer that is not page-aligned takes the
 * middle through a bounce buffer, which the kernel copies into or out of the buffer
 * (process_vm_readv/writev(2)); where the system refuses those calls (a seccomp filter, a kernel
 * without CONFIG_CROSS_MEMORY_ATTACH), such buffers go through the page cache instead. Either way a
 * buffer the process cannot write (read) fails the call with -EFAULT, as with the setting off.
 *
 * KVIK_SETTING_ZERO_COPY_READ: how reads of a file into device memory may skip the CPU copy.
 * The file is mapped (mmap), registered read-only with CUDA in granules of 64 MiB as reads reach
 * them, and the GPU copies straight out of the page cache. KVIK_OFF: never; KVIK_AUTO: granules
 * whose every page is in the page cache (cachestat(2), else mincore(2)), by reads of at least
 * half of what they would register; KVIK_ON: always (pages not in memory are then read from
 * storage by the registration, one fault at a time). Whenever the path cannot be taken (no
 * support for read-only registration, a range reaching past the end of the file, a failed mapping
 * or registration, a granule needed while another file registers one), the read goes through the
 * bounce buffers instead, with the same result.
 *
 * A handle keeps its registrations until kvik_file_close(): a later read of registered bytes is
 * one DMA transfer per granule, with almost no CPU (on an H100: 54.6 GB/s from 4 threads for
 * 0.001 CPU s/GB, where copying through bounce buffers takes 16 threads and 0.32 s/GB). Their
 * pages stay pinned in memory meanwhile. Writes to the file, by any path, reach those pages and
 * so the reads; a change of the file's size, mtime or ctime drops them all first (a truncate
 * and a rewrite of the same size in the same time-stamp tick as the registration would not be
 * noticed). A read racing a truncation returns the bytes the file had before, or after, or stops
 * short where the shortened file ended, as pread(2) would: kvik never touches the mapping with
 * the CPU, and the GPU copies pinned pages. The driver itself reads the source of a small copy
 * with the CPU (up to 16 KiB on driver 580), which a truncated page answers with SIGBUS, so
 * pieces under 256 KiB take the bounce buffers. A first read pays for the registration, which
 * the driver does one at a time, at 22-60 GB/s depending on the machine, and which can hold up
 * another thread's call that queues a copy. So one task of a read takes its granules in order: it
 * registers one, queues its copy, and registers the next while that copy runs. The pool's other
 * threads read the request from its far end through the bounce buffers meanwhile, in pieces of at
 * least 16 MiB, until the two ends meet, and leave granules already registered to the first: the
 * thread count sets how much CPU a first read may spend. Their copies are queued by the first
 * task between its registrations. On an H100 the read call of an 8 GiB first read ran at 35.8
 * GB/s from 1 thread (0.028 CPU s/GB), 45.1 from 4 (0.084) and 52.7 from 8, where the bounce
 * buffers alone give 7.5, 23.9 and 46.5. Closing the handle unregisters: 48-86 ms per 8 GiB there.
 * So a first read with its open and close gains most on few threads (next to KvikIO on H100s:
 * 4.9-5.1x at 1 thread, 1.47-1.68x at 4, where the bounce buffers give 1.16-1.21x), and loses
 * on 8 or more (0.91x at 8, 0.89x at 16, where the bounce buffers give 1.28x and 1.05x), as the
 * bounce buffers alone come near the link rate; the registrations pay there when the file is
 * read again (1.48x and 1.14x). The bytes a first read's other threads carried are registered by
 * later reads, as their first task reaches them.
 * Off by default, since the registrations pin the file's pages until the handle is closed,
 * and because registering waits for work the device is doing (measured on an H100 with driver
 * 580), so a read then also waits for kernels that run meanwhile. Stream-ordered reads never take
 * this path: their copies run on their stream, from pinned buffers. Setting it again makes kvik ask a
 * driver that refused read-only registration again.
 *
 * KVIK_SETTING_IO_URING: which operations of a batch (kvik_batch_submit) the kernel's io_uring
 * serves, handed over from the submitting thread, instead of the thread pool. KVIK_OFF: none.
 * KVIK_AUTO: those it serves better, namely operations smaller than KVIK_SETTING_GDS_THRESHOLD
 * (which the pool would run one after another on the submitting thread) and those that go
 * through O_DIRECT (KVIK_SETTING_AUTO_DIRECT_IO_READ/WRITE on; offset and size multiples of
 * 4096, and so the buffer for host memory). KVIK_ON: every operation. Large operations through
 * the page cache stay on the pool under AUTO: there the copy is the work, and the pool's threads
 * share it out (measured in the README). Device and managed memory that cuFile does not serve
 * goes through a pinned staging arena of the batch (64 MiB, set up and registered with the ring
 * on the batch's first such operation, about 1.5 ms on an H100 machine; without CAP_IPC_LOCK only
 * as much of it as RLIMIT_MEMLOCK lets the ring pin is registered; operations of up to
 * 16 MiB, of the CUDA context of the first; the others, and those that find the arena full, go
 * to the pool). Writes to append handles always go to the pool. Where io_uring is missing or
 * refused (Linux before 5.11, a seccomp profile or kernel.io_uring_disabled that forbids it) the
 * pool serves everything, with the same results; kvik_io_uring_supported() says which.
 *
 * The HTTP and remote settings are described with remote files, below.
 *
 * Values are int64_t. Booleans are 0/1; sizes are bytes. Text values (environment variables
 * and `kvik_setting_parse()`) are trimmed and case-insensitive: booleans accept
 * on/off/true/false/yes/no/1/0, the compat mode accepts those and "auto", sizes and counts
 * accept decimal integers. KVIK_SETTING_HTTP_STATUS_CODES is a list: it is read and changed as
 * text only (kvik_setting_format, kvik_setting_parse: comma-separated statuses, "" for none);
 * kvik_setting_get and kvik_setting_set refuse it with -EINVAL.
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
  KVIK_SETTING_HTTP_MAX_ATTEMPTS,
  KVIK_SETTING_HTTP_TIMEOUT,
  KVIK_SETTING_HTTP_STATUS_CODES,
  KVIK_SETTING_REMOTE_VERBOSE,
  KVIK_SETTING_REMOTE_CONNECTIONS,
  KVIK_SETTING_IO_URING,
  KVIK_SETTING_COUNT /* number of settings; not a setting */
} kvik_setting;

/* Values of KVIK_SETTING_COMPAT_MODE. ON: never use cuFile (POSIX IO only). OFF: require
 * cuFile. AUTO: use cuFile where it can work, POSIX elsewhere. */
typedef enum kvik_compat_mode {
  KVIK_COMPAT_OFF = 0,
  KVIK_COMPAT_ON = 1,
  KVIK_COMPAT_AUTO = 2
} kvik_compat_mode;

/* Values of the other three-way settings (KVIK_SETTING_ZERO_COPY_READ, KVIK_SETTING_IO_URING);
 * the same numbers. */
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
 * len > 0; buf may be NULL when len is 0, to learn the length). Returns the text's length, or a
 * negative code: -EINVAL for an unknown setting or a NULL buf with len > 0. Thread-safe. */
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
 *
 * A request runs as tasks on the thread pool. The first task that fails (after its own
 * retries, for remote files) decides the request's result: its tasks that have not started yet
 * then move no bytes, and remote transfers in flight stop (within about a second, where the
 * server sends nothing), so the error comes back without waiting for the rest of the request.
 * Tasks that did run before keep what they moved: the message's "(X of Y bytes transferred)"
 * and kvik_future_bytes_done() count it.
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
 * argument. The descriptor has O_APPEND, and kvik writes through it with write(2), so the kernel
 * places each call at the end of the file as it is at that moment; kvik computes no offset. So:
 *  - an append never overwrites anything, whoever else appends to the file or cuts it: after a
 *    truncation the next append lands at the new end;
 *  - an append that fails part way (ENOSPC, EIO ...) keeps the bytes that reached the file, a
 *    prefix of its buffer (kvik_future_bytes_done() counts them), and takes no room beyond them:
 *    the next append lands right after them;
 *  - in this process, the appends to one file (through any of its append handles: the same
 *    device and inode) run one at a time, each as one sequential task, so each lands as one
 *    contiguous range however many threads, futures, batches and streams append at once. Which
 *    of the appends in flight at the same time goes first is not defined; while one runs, the
 *    others wait (a pool thread each, for futures).
 * Against writes that do not go through this process's append handles (another process's, or
 * the application's own through another descriptor), an append is contiguous only within each
 * of its write(2) calls: host memory goes in one call (Linux moves at most 2 GiB - 4 KiB per
 * call), device memory in one call per bounce buffer (see GPU memory, below), and a call that a
 * signal interrupts or the file system cuts short leaves the rest to another. Another process's
 * O_APPEND write may land between two of these calls, never inside or over one. (That is the
 * kernel's O_APPEND on a local file system; NFS does not make O_APPEND atomic across clients,
 * so there a write from another machine may land over an append.) Appends go through the page
 * cache (the O_DIRECT settings leave them) and never through cuFile, which writes at offsets:
 * device memory is staged through the bounce buffers. pwrite(2) on kvik_file_fd() of an append
 * handle appends too (Linux ignores its offset on O_APPEND descriptors).
 *
 * On success stores a new handle in *file and returns 0. Errors: -EINVAL (NULL argument,
 * unknown flag string), -EISDIR (a directory), -ESPIPE (a FIFO or socket: kvik's IO is
 * positional; refused without waiting for the FIFO's other end), any errno of open(2),
 * KVIK_ECONFIG.
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
 * handle: do not close it, and do not use it once kvik_file_close() was called (its number may
 * then belong to another file). Thread-safe. */
KVIK_API int kvik_file_fd(const kvik_file *file);

/* The descriptor's open flags as fcntl(F_GETFL) gives them (with O_APPEND for append handles).
 * -EBADF if closed. Thread-safe. */
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
 * pread(2): -EFAULT where the process cannot write to all of `buf` (the bytes it can write
 * may have been read all the same: the message says how many). Thread-safe.
 *
 * Into device memory, kvik copies on CUDA streams of its own, which wait for no other stream (the
 * default stream neither): work queued earlier that writes `buf`, a cudaMemset say, must be
 * finished (cudaStreamSynchronize) before the read, or it may overwrite what was read.
 * kvik_file_read_async() orders a read after the work of a stream.
 */
KVIK_API ssize_t kvik_file_read(kvik_file *file, void *buf, size_t size, int64_t file_offset);

/* Write `size` bytes from `buf` at `file_offset` in parallel, and wait; for append handles at the
 * end, on the calling thread (see kvik_file_open). Returns `size`, or a negative code: a write
 * that cannot complete (ENOSPC, EIO, EFBIG, EFAULT where the process cannot read `buf` ...)
 * returns that errno, and the detail message says how many bytes were written. Thread-safe. */
KVIK_API ssize_t kvik_file_write(kvik_file *file, const void *buf, size_t size,
                                 int64_t file_offset);

/* Start a read like kvik_file_read() without waiting: stores a future in *future and returns 0,
 * or returns a negative code (and creates no future). `task_size` 0 means
 * KVIK_SETTING_TASK_SIZE. A request is cut into at most 16384 tasks, so that what its tasks take
 * in memory stays bounded: where `size` / `task_size` would make more, its tasks are `size` /
 * 16384 bytes, rounded up to a multiple of 4 KiB (at the default task size, requests of more
 * than 64 GiB). Requests smaller than KVIK_SETTING_GDS_THRESHOLD run on the calling thread and
 * return a future that is already done. Thread-safe. */
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
 * cuMemHostAlloc/cudaHostAlloc or kvik_host_pin) and pageable host memory are read and
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
 * from and to it skip the bounce buffers (cuMemHostRegister). Pair with kvik_host_unpin().
 * Returns 0; -EINVAL (NULL or size 0); KVIK_ECUDA_UNAVAILABLE; a CUDA error code
 * (KVIK_IS_CUDA_ERROR; for instance that of CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED when the
 * range is already registered). Thread-safe. */
KVIK_API int kvik_host_pin(void *buf, size_t size);

/* Undo kvik_host_pin(buf, ...). Returns 0, -EINVAL, KVIK_ECUDA_UNAVAILABLE or a CUDA
 * error code (KVIK_IS_CUDA_ERROR; that of CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED when not
 * registered). Thread-safe. */
KVIK_API int kvik_host_unpin(void *buf);

/* Wait until the work queued on CUDA stream `stream` is done (cuStreamSynchronize), for callers
 * that pass kvik memory written on a stream of theirs, since kvik's copies run on streams of its
 * own. `stream` is a CUstream or cudaStream_t, or NULL, 1 or 2 cast to pointers for CUDA's default,
 * legacy default and per-thread default streams, as __cuda_array_interface__ names them. Those are
 * streams of a context: of the one device memory `ptr` lies in (the memory the stream writes), or
 * the calling thread's current one where `ptr` is NULL or host memory. Returns 0,
 * KVIK_ECUDA_UNAVAILABLE or a CUDA error code (KVIK_IS_CUDA_ERROR). Thread-safe. */
KVIK_API int kvik_cuda_stream_synchronize(void *stream, const void *ptr);

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
/* Device memory: POSIX or cuFile                                                             */
/* ------------------------------------------------------------------------------------------ */

/*
 * cuFile (libcufile.so.0) is loaded, and its driver opened, on the first call that needs it, never
 * at build or load time; the driver is closed at exit, after the cuFile calls still running have
 * returned (calls made after that fail with the code of CU_FILE_DRIVER_CLOSING). In a child
 * process after fork() it opens again on first need; files opened in the parent use POSIX IO
 * there.
 *
 * Each file decides at kvik_file_open() which path serves its device memory, following
 * KVIK_SETTING_COMPAT_MODE at that moment:
 *   KVIK_COMPAT_ON    POSIX IO (pinned bounce buffers); cuFile is never loaded.
 *   KVIK_COMPAT_OFF   cuFile. kvik_file_open() fails if it cannot serve the file, with
 *                     KVIK_ECUFILE_UNAVAILABLE, an errno, or cuFile's status (kvik_strerror names
 *                     it), and a message that says why.
 *   KVIK_COMPAT_AUTO  cuFile where it can work: the library loads and its driver opens, /run/udev
 *                     is readable (cuFile identifies file systems through udev), the system is not
 *                     WSL, the file opens with O_DIRECT and cuFileHandleRegister accepts it. Else
 *                     POSIX IO.
 * kvik_file_backend() tells which path a file got, and why.
 *
 * On a cuFile file, reads and writes of device memory of at least KVIK_SETTING_GDS_THRESHOLD
 * bytes go through cuFileRead/cuFileWrite, in tasks on the thread pool whose file offsets are
 * 4 KiB aligned: an unaligned head and tail of the range go the POSIX way, so cuFile never
 * rewrites a partial page that a neighbouring task writes too, and the bytes that reach the file
 * or the buffer are the same as in POSIX mode. Host memory, smaller requests and appends (see
 * kvik_file_open) always use POSIX IO.
 */

/* Which path serves a file's device memory. */
typedef enum kvik_backend { KVIK_BACKEND_POSIX = 0, KVIK_BACKEND_CUFILE = 1 } kvik_backend;

/* The file's kvik_backend, or -EINVAL/-EBADF. Writes the reason for the choice into `why`
 * (terminated when len > 0; may be NULL), e.g. "compat mode is ON", "cuFile: GDS through
 * nvidia-fs 2.26", "/run/udev is not readable". Thread-safe. */
KVIK_API int kvik_file_backend(const kvik_file *file, char *why, size_t len);

/*
 * Raw IO: one transfer between the file and device memory at `dev_base + dev_offset`, on the
 * calling thread, without the thread pool (KvikIO's raw_read/raw_write). `dev_base` should be the
 * start of an allocation (or of a buffer registered with kvik_cufile_buffer_register). Through cuFile on
 * a cuFile file (one cuFileRead/cuFileWrite call), else, and for appends, through the bounce
 * buffers. Returns the bytes transferred (a read is short only at end of file) or a negative
 * code. A `size` of 0 returns 0 without looking at `dev_base`, which may then be NULL (an empty
 * array). Thread-safe.
 */
KVIK_API ssize_t kvik_file_raw_read(kvik_file *file, void *dev_base, size_t size,
                                    int64_t file_offset, int64_t dev_offset);
KVIK_API ssize_t kvik_file_raw_write(kvik_file *file, const void *dev_base, size_t size,
                                     int64_t file_offset, int64_t dev_offset);

/* ------------------------------------------------------------------------------------------ */
/* Stream-ordered IO                                                                            */
/* ------------------------------------------------------------------------------------------ */

/*
 * Read `size` bytes at `file_offset` into `buf` (host or device memory) in the order of CUDA
 * stream `stream` (a CUstream or cudaStream_t; NULL is the default stream): the read starts when
 * the work queued on the stream before it is done, and work queued after it starts only when the
 * read is done. The call queues the request and returns without waiting for either, storing a
 * future in *future. Where the driver has no stream memory operations (cuStreamWaitValue32,
 * CUDA 11.7 and later), the call instead synchronises the stream, reads, and returns a future
 * that is already done, as KvikIO does.
 *
 * The stream never waits for a thread that makes CUDA calls, and kvik's host functions never
 * wait, so the stream's other users may free memory (cuMemFree), load modules and synchronise
 * while the read is queued. Copies to device memory run on the stream itself, through pinned
 * buffers that kvik's threads fill from the file.
 *
 * The future completes before the stream moves past the read: once the stream is synchronised,
 * kvik_future_done() is 1 and kvik_future_wait() returns the byte count (less than `size` only
 * at end of file) at once. Bytes of `buf` past the end of the file are left as they were, except
 * where the file shrank between the call and the stream reaching the read: those become zero. A
 * failed read completes the future with its error; the stream still moves on, so check the future
 * before using the data, whose bytes in the range are then unspecified.
 *
 * The file and the buffer must stay valid until the future is done. Freeing the future before
 * the stream reached the read waits for the stream. Returns 0, or a negative code (then nothing
 * runs that touches the file; should a CUDA call fail after part of the request was queued, the
 * stream still passes that part, which may copy unspecified bytes into the range of a device
 * `buf`): the errors of kvik_file_pread(), KVIK_ECUDA_UNAVAILABLE, a CUDA error code
 * (KVIK_IS_CUDA_ERROR). Thread-safe.
 */
KVIK_API int kvik_file_read_async(kvik_file *file, void *buf, size_t size, int64_t file_offset,
                                  void *stream, kvik_future **future);

/* Write like kvik_file_write() in the order of `stream`; see kvik_file_read_async(). The
 * future's result is `size` or the write's error. On an append handle the call synchronises the
 * stream and writes before it returns (an append waits for the file's other appends, and no
 * stream may wait for that). Thread-safe. */
KVIK_API int kvik_file_write_async(kvik_file *file, const void *buf, size_t size,
                                   int64_t file_offset, void *stream, kvik_future **future);

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
 * outside the file), -EISDIR, -ESPIPE (as kvik_file_open), any errno of open(2) or mmap(2). An
 * empty file opens with nothing mapped.
 * The file must not shrink while mapped: touching a page past its new end raises SIGBUS, a
 * rule of mmap. Thread-safe.
 */
typedef struct kvik_mmap kvik_mmap;

KVIK_API int kvik_mmap_open(const char *path, const char *flags, size_t map_size,
                            int64_t map_offset, kvik_mmap **map);

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
KVIK_API int kvik_mmap_pread(kvik_mmap *map, void *buf, size_t size, int64_t offset,
                             size_t task_size, kvik_future **future);

/* ------------------------------------------------------------------------------------------ */
/* Remote files                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/*
 * A remote object, read over HTTP(S) with range requests through libcurl: a web server, S3
 * (signed, public or presigned) or WebHDFS: KvikIO's RemoteHandle. Reads work as file reads do:
 * into host or device memory, split into tasks of the task size that run in parallel on the
 * thread pool, each one range request. Device memory goes through the pinned bounce buffers, one
 * request per buffer, pipelined with the copies to the device as for files.
 *
 * Connections come from one process-wide pool of libcurl handles that stay connected between
 * requests (keep-alive). At most KVIK_SETTING_REMOTE_CONNECTIONS requests are in flight at once;
 * since each runs on a pool thread, KVIK_SETTING_NUM_THREADS bounds them too: raise both for a
 * high-latency store, which needs many requests in flight to fill a link.
 *
 * Failures: a request answered with a status in KVIK_SETTING_HTTP_STATUS_CODES, a connection
 * refused, dropped or timed out, or a body cut short is tried again after a pause that doubles
 * each time (0.1 s, 0.2 s, 0.4 s ...), up to KVIK_SETTING_HTTP_MAX_ATTEMPTS attempts in all, each
 * limited to KVIK_SETTING_HTTP_TIMEOUT seconds. Then, and for any other failure, the read fails
 * with a code that says what happened:
 *   KVIK_EHTTP_BASE - status   an HTTP error status (403, 404, ...; KVIK_IS_HTTP_ERROR)
 *   -ETIMEDOUT                 an attempt took longer than KVIK_SETTING_HTTP_TIMEOUT
 *   -ECONNREFUSED, -ECONNRESET the server refused the connection, or dropped it mid-response
 *   KVIK_EREMOTE_SHORT         the response body ended before the requested range did
 *   KVIK_EREMOTE_LONG          the response body was longer than the requested range
 *   KVIK_ERANGE_IGNORED        the server answered a range request with the whole object (200)
 *                              where the range was not all of it. A request for bytes 0 to the
 *                              size (a read of the whole object in one task) takes the 200.
 *   KVIK_ERANGE_MISMATCH       a 206 whose Content-Range is missing, does not parse, or names
 *                              other bytes than those asked for (another start, an end past the
 *                              range), another object size than kvik learnt at open ("*" passes),
 *                              or other bytes than its body holds. One that ends early, with a
 *                              body to match, is KVIK_EREMOTE_SHORT.
 *   KVIK_ETLS                  TLS failed, e.g. a certificate that does not verify
 *   KVIK_EREMOTE               any other transfer failure (the message has libcurl's words)
 * A read that fails returns its code, never a byte count, and leaves its buffer undefined.
 * Messages name the URL without its user name, password or query string, and never carry
 * credentials; KVIK_SETTING_REMOTE_VERBOSE traces every request on stderr, credentials removed.
 *
 * TLS certificates are verified, against libcurl's CA store or the one named by CURL_CA_BUNDLE
 * or SSL_CERT_FILE (a file) and SSL_CERT_DIR (a directory), read when a remote file opens.
 */
typedef struct kvik_remote kvik_remote;

/* What kind of server a URL names; the numbers are KvikIO's RemoteEndpointType. */
typedef enum kvik_remote_kind {
  KVIK_REMOTE_AUTO = 0,         /* find out from the URL, as below */
  KVIK_REMOTE_S3 = 1,           /* S3, requests signed (AWS Signature Version 4) */
  KVIK_REMOTE_S3_PUBLIC = 2,    /* S3, anonymous requests */
  KVIK_REMOTE_S3_PRESIGNED = 3, /* an S3 URL that carries its own signature */
  KVIK_REMOTE_WEBHDFS = 4,      /* Hadoop WebHDFS (op=OPEN, then the redirect to a data node) */
  KVIK_REMOTE_HTTP = 5          /* any HTTP(S) server that answers range requests */
} kvik_remote_kind;

/*
 * Options of kvik_remote_open(), a parameter struct: fill it with kvik_remote_options_init(),
 * then set what differs. Strings are copied by kvik_remote_open(); NULL means "not given".
 *
 * S3 credentials, region and endpoint not given here are read from the environment:
 * AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_DEFAULT_REGION (else
 * us-east-1, or the region an https URL names) and AWS_ENDPOINT_URL.
 */
typedef struct kvik_remote_options {
  size_t struct_size;
  kvik_remote_kind kind;
  int64_t size; /* the object's size in bytes when known, which saves asking the server; or -1 */
  const char *aws_access_key_id;
  const char *aws_secret_access_key;
  const char *aws_session_token;
  const char *aws_region;
  const char *aws_endpoint_url; /* e.g. "http://127.0.0.1:9000", for s3:// URLs (path-style) */
  const char *webhdfs_user;     /* WebHDFS user.name; else the URL's own user.name, if any */
} kvik_remote_options;

/* Set every option to its default: struct_size, KVIK_REMOTE_AUTO, size -1, no strings. */
KVIK_API void kvik_remote_options_init(kvik_remote_options *options);

/*
 * Open the remote object at `url` (`options` may be NULL for the defaults) and learn its size:
 * from options->size, else by asking the server (HEAD; a one-byte range GET for presigned URLs,
 * which sign GET only; GETFILESTATUS for WebHDFS).
 *
 * The URL forms, and how KVIK_REMOTE_AUTO classifies them, in this order:
 *   s3://BUCKET/KEY                     S3 (KVIK_REMOTE_S3_PUBLIC if asked); requests go to
 *                                       ENDPOINT/BUCKET/KEY with an endpoint, else to
 *                                       https://BUCKET.s3.REGION.amazonaws.com/KEY
 *   http(s)://... with X-Amz-Signature  KVIK_REMOTE_S3_PRESIGNED
 *   http(s)://.../webhdfs/v1/PATH       KVIK_REMOTE_WEBHDFS
 *   http(s)://HOST/... (S3 host)        KVIK_REMOTE_S3, for hosts such as
 *                                       BUCKET.s3.REGION.amazonaws.com
 *   http(s)://...                       KVIK_REMOTE_HTTP
 *
 * Returns 0 and a new handle in *remote, or a negative code: -EINVAL (NULL argument, bad
 * options, a URL that is none of the above or names no host, S3 without credentials),
 * KVIK_ENOREMOTE, and the codes above for the size request. Thread-safe.
 */
KVIK_API int kvik_remote_open(const char *url, const kvik_remote_options *options,
                              kvik_remote **remote);

/* Mark the handle closed, first waiting for reads in flight. The handle stays valid (calls on it
 * fail with -EBADF) until kvik_remote_free(). Returns 0, or -EBADF if already closed.
 * Thread-safe. */
KVIK_API int kvik_remote_close(kvik_remote *remote);

/* Close if open, then free. NULL is ignored. No other thread may use the handle during or after
 * this call. */
KVIK_API void kvik_remote_free(kvik_remote *remote);

/* The object's size in bytes, learnt at open; or -EINVAL for NULL. Thread-safe. */
KVIK_API int64_t kvik_remote_size(const kvik_remote *remote);

/* The kind the handle was opened as, KVIK_REMOTE_AUTO resolved; or -EINVAL. Thread-safe. */
KVIK_API int kvik_remote_kind_of(const kvik_remote *remote);

/* The URL requests go to, as messages name it: without user name, password or query string.
 * Lives as long as the handle. Thread-safe. */
KVIK_API const char *kvik_remote_url(const kvik_remote *remote);

/* Read `size` bytes at `offset` of the object into `buf` (host or device memory), in parallel,
 * and wait. Returns the number of bytes read, less than `size` only where the object ends first
 * (as kvik_file_read), or a negative code: -EBADF (closed), -EINVAL, and the codes above.
 * The arguments are checked as kvik_file_read checks them, past the end of the object too: a
 * NULL buf with size > 0, or offset + size beyond INT64_MAX, is -EINVAL there as well.
 * Thread-safe. */
KVIK_API ssize_t kvik_remote_read(kvik_remote *remote, void *buf, size_t size, int64_t offset);

/* Start kvik_remote_read() without waiting; see kvik_file_pread(). Thread-safe. */
KVIK_API int kvik_remote_pread(kvik_remote *remote, void *buf, size_t size, int64_t offset,
                               size_t task_size, kvik_future **future);

/* Whether this kvik was built with remote file support. Returns 1 and writes libcurl's version
 * ("libcurl/7.88.1 OpenSSL/3.0.17 ...") into `detail`, or returns 0 and writes why not.
 * `detail` may be NULL. Thread-safe. */
KVIK_API int kvik_remote_supported(char *detail, size_t len);

/* ------------------------------------------------------------------------------------------ */
/* Batch IO                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/*
 * A batch submits many independent reads and writes at once and collects their completions
 * (cuFile's batch API). It works everywhere: operations on cuFile files into device memory go to
 * cuFileBatchIO*; other operations go to the batch's own io_uring where KVIK_SETTING_IO_URING
 * says so (small and O_DIRECT ones by default) and the kernel allows it, device memory staged
 * through pinned memory; all others run on the thread pool; completions of every kind come back
 * through the same calls. An io_uring operation the kernel leaves unfinished (a short count, an
 * interrupted call, O_DIRECT refused) is finished by the thread that collects it, so results are
 * those of the pool. A staged write's bytes are copied from the device within
 * kvik_batch_submit(); a staged read's are copied to the device by the thread that collects it,
 * within kvik_batch_wait(), before its completion is handed out. A failed copy fails that
 * operation alone, with the CUDA error code.
 *
 * Operations on the pool start as kvik_file_pread()/kvik_file_pwrite() start them: those below
 * KVIK_SETTING_GDS_THRESHOLD run within kvik_batch_submit(). cuFile's batch runs in the CUDA
 * context of the first operation it took and holds at most cuFile's own batch size of them at
 * once (max_batch_io_size, 128 by default); device memory beyond that, or of another context,
 * goes to the pool.
 *
 * A batch is used by one thread at a time (not thread-safe); different batches are independent.
 * The buffers and files of submitted operations must stay valid, and the files open, until their
 * completion has been collected, the batch was canceled, or the batch was freed.
 */
typedef struct kvik_batch kvik_batch;

typedef enum kvik_batch_opcode { KVIK_BATCH_READ = 0, KVIK_BATCH_WRITE = 1 } kvik_batch_opcode;

/* One operation. This struct never changes; new members would come in a new struct. */
typedef struct kvik_batch_op {
  kvik_file *file;
  kvik_batch_opcode opcode;
  void *buf; /* host or device memory; read from for writes */
  size_t size;
  int64_t file_offset;
  void *cookie; /* handed back in the operation's event */
} kvik_batch_op;

typedef enum kvik_batch_status {
  KVIK_BATCH_COMPLETE = 0, /* result holds the bytes transferred (short only at end of file) */
  KVIK_BATCH_FAILED = 1,   /* result holds the negative code; kvik_last_error() is not set */
  KVIK_BATCH_CANCELED = 2  /* canceled by kvik_batch_cancel(); result holds -ECANCELED */
} kvik_batch_status;

/* One completion. This struct never changes. */
typedef struct kvik_batch_event {
  void *cookie;
  kvik_batch_status status;
  ssize_t result;
} kvik_batch_event;

/* A batch for up to `max_ops` operations in flight at once (1 to 65536). Returns 0 or -EINVAL,
 * -ENOMEM, KVIK_ECONFIG. */
KVIK_API int kvik_batch_create(unsigned max_ops, kvik_batch **batch);

/* Submit `count` operations. All are checked first: on an error (-EINVAL for a bad operation,
 * -EBADF for a closed file or wrong access mode, -EAGAIN when more than max_ops would be in
 * flight) none was submitted and the message names the operation's index. An operation is in
 * flight from its submission until its completion is collected. Returns 0, or cuFile's code when
 * cuFile refuses its part (then none was submitted either). */
KVIK_API int kvik_batch_submit(kvik_batch *batch, const kvik_batch_op *ops, unsigned count);

/* Wait until at least `min_events` operations completed (0: do not wait; more than are in flight:
 * all of them) or `timeout_ns` passed (negative: no limit), then store up to `max_events`
 * completions in `events`, each operation's once. Returns how many were stored (fewer than
 * min_events after a timeout), -EINVAL (min_events above max_events), or cuFile's code when
 * asking it for completions failed (none is lost: a later wait collects them). */
KVIK_API int kvik_batch_wait(kvik_batch *batch, unsigned min_events, kvik_batch_event *events,
                             unsigned max_events, int64_t timeout_ns);

/* Cancel what has not completed, and wait until nothing is in flight. cuFile's operations are
 * canceled with cuFileBatchIOCancel: they report KVIK_BATCH_CANCELED, or their result where they
 * completed first. Operations on the thread pool cannot be stopped (some of their bytes may have
 * moved already): they are waited for and report their own result. io_uring operations the kernel
 * has not started are canceled (Linux 5.19 and later), the others report their own result. The
 * events are collected with kvik_batch_wait() like others. Returns 0 or a negative code: that of
 * a failed cuFile call (if cuFile stops answering, its operations report KVIK_BATCH_FAILED with
 * that code). */
KVIK_API int kvik_batch_cancel(kvik_batch *batch);

/* Cancel what is in flight, wait for it, and free the batch. NULL is ignored. */
KVIK_API void kvik_batch_free(kvik_batch *batch);

/* Whether io_uring can serve batches in this process (KVIK_SETTING_IO_URING), and in `why` (up
 * to `len` bytes with the NUL; may be NULL) what was found: "available (Linux 6.18)", or "not
 * available: " and what refused it, with the kernel's release. Found once, by setting up a
 * small ring, and kept. Returns 1 or 0. Thread-safe. */
KVIK_API int kvik_io_uring_supported(char *why, size_t len);

/* ------------------------------------------------------------------------------------------ */
/* cuFile (kvik_cufile_*)                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Load cuFile and open its driver now (it otherwise opens on first need). Returns 0,
 * KVIK_ECUFILE_UNAVAILABLE or cuFile's status code, with a message saying why. Thread-safe. */
KVIK_API int kvik_cufile_open(void);

/* The loaded cuFile's version as cuFileGetVersion() gives it (e.g. 1150 for 1.15.0), or a
 * negative code (-ENOTSUP for a cuFile older than the call). Thread-safe. */
KVIK_API int kvik_cufile_version(void);

/* cuFile's driver properties (cuFileDriverGetProperties), sizes in bytes. A parameter struct:
 * set struct_size to sizeof(kvik_cufile_properties) before the call; members the library does
 * not know are left untouched. */
typedef struct kvik_cufile_properties {
  size_t struct_size;
  unsigned nvfs_major_version; /* nvidia-fs kernel driver; 0.0 when it is not loaded */
  unsigned nvfs_minor_version;
  int gds_available;           /* 1 when nvidia-fs is loaded: true GPUDirect transfers */
  int allow_compat_mode;       /* cuFile's own POSIX fallback (properties.allow_compat_mode) */
  int poll_mode;
  size_t poll_threshold_size;
  size_t max_direct_io_size;
  size_t max_device_cache_size;
  size_t per_buffer_cache_size;
  size_t max_device_pinned_mem_size;
  unsigned max_batch_io_size;
  unsigned max_batch_io_timeout_ms;
  unsigned file_system_flags; /* nvfs.dstatusflags: bit n is cuFile's CU_FILE_*_SUPPORTED n */
  unsigned feature_flags;     /* fflags: bit n is cuFile's CU_FILE_*_SUPPORTED feature n */
} kvik_cufile_properties;

/* Fill `props`. Returns 0, -EINVAL (NULL or struct_size too small), or a cuFile code.
 * Thread-safe. */
KVIK_API int kvik_cufile_get_properties(kvik_cufile_properties *props);

/* Change a driver property (cuFileDriverSet*); sizes in bytes, rounded down to KiB. Return 0 or
 * a cuFile code (the message names cuFile's complaint, e.g. a value out of range). Thread-safe. */
KVIK_API int kvik_cufile_set_poll_mode(int enable, size_t threshold_size);
KVIK_API int kvik_cufile_set_max_direct_io_size(size_t size);
KVIK_API int kvik_cufile_set_max_cache_size(size_t size);
KVIK_API int kvik_cufile_set_max_pinned_memory(size_t size);

/*
 * cuFile's parameters (cuFile >= 1.14: cuFileGetParameter*, cuFileSetParameter*), by name: the
 * name of cuFile's CUFILE_PARAM_ constant without that prefix, in lower case
 * ("properties_max_direct_io_size_kb", "properties_allow_compat_mode", "logging_level", ...).
 * Values are text: a decimal number, "true"/"false", or a string. Parameters can only be set
 * before the driver opens (cuFile's rule), so set them before the first IO on a cuFile file.
 * kvik_cufile_parameter_name(i) lists the names for i = 0, 1, ... and returns NULL past the last.
 * Errors: -EINVAL (unknown name, bad value), -ENOTSUP (cuFile older than 1.14),
 * KVIK_ECUFILE_UNAVAILABLE, cuFile codes. Thread-safe.
 */
KVIK_API const char *kvik_cufile_parameter_name(unsigned index);
KVIK_API int kvik_cufile_parameter_get(const char *name, char *value, size_t len);
KVIK_API int kvik_cufile_parameter_set(const char *name, const char *value);

/* cuFile's level 1 statistics (cuFile >= 1.15). A parameter struct like kvik_cufile_properties. */
typedef struct kvik_cufile_stats {
  size_t struct_size;
  uint64_t read_ops, read_errors, write_ops, write_errors;
  uint64_t read_bytes, write_bytes;
  uint64_t read_bw_bytes_per_sec, write_bw_bytes_per_sec;
  uint64_t read_lat_avg_us, write_lat_avg_us;
  uint64_t batch_submit_ops, batch_complete_ops, batch_read_bytes, batch_write_bytes;
} kvik_cufile_stats;

/* Start collecting statistics at `level` (1 to 3; cuFileSetStatsLevel + cuFileStatsStart), stop,
 * zero them, and read them. Return 0, -EINVAL, -ENOTSUP (cuFile older than 1.15), or a cuFile
 * code. Thread-safe. */
KVIK_API int kvik_cufile_stats_start(int level);
KVIK_API int kvik_cufile_stats_stop(void);
KVIK_API int kvik_cufile_stats_reset(void);
KVIK_API int kvik_cufile_stats_get(kvik_cufile_stats *stats);

/*
 * Register with cuFile the whole device allocation that `ptr` points into (cuFileBufRegister), so
 * that GDS transfers into it skip cuFile's own bounce buffers. `flags` is passed to cuFile (0).
 * Pair with kvik_cufile_buffer_deregister(), before the memory is freed. Where cuFile is not in use
 * (compat mode ON, or AUTO without cuFile) the registration is only recorded, so the same code
 * runs everywhere. Errors: -EINVAL (NULL, or not device memory), the code of
 * CU_FILE_MEMORY_ALREADY_REGISTERED (the allocation is registered already),
 * KVIK_ECUFILE_UNAVAILABLE (compat mode OFF without cuFile), cuFile and CUDA codes. Thread-safe.
 */
KVIK_API int kvik_cufile_buffer_register(const void *ptr, int flags);

/* Undo kvik_cufile_buffer_register() for the allocation `ptr` points into. Returns 0, or the code of
 * CU_FILE_MEMORY_NOT_REGISTERED if it is not registered, or a cuFile code. Thread-safe. */
KVIK_API int kvik_cufile_buffer_deregister(const void *ptr);

/* Register CUDA stream `stream` with cuFile (cuFileStreamRegister; `flags` are cuFile's
 * CU_FILE_STREAM_* bits), which makes kvik_file_read_async/write_async on cuFile files faster.
 * Where cuFile is not in use (compat mode ON, or AUTO without cuFile) it does nothing and returns
 * 0; with compat mode OFF and no cuFile it fails with KVIK_ECUFILE_UNAVAILABLE. Pair with kvik_cufile_stream_deregister() before the
 * stream is destroyed. Thread-safe. */
KVIK_API int kvik_cufile_stream_register(void *stream, unsigned flags);
KVIK_API int kvik_cufile_stream_deregister(void *stream);

/* ------------------------------------------------------------------------------------------ */
/* Page cache                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* How many of the file's pages are in the page cache (cachestat(2), or mincore(2) on kernels
 * before 6.5 and where cachestat counts none, as on overlayfs): stores the counts in
 * *resident_pages and *total_pages (either may be NULL). Returns 0 or a negative code: -EISDIR,
 * -ESPIPE as kvik_file_open gives them, an errno of open(2) or mmap(2). Thread-safe. */
KVIK_API int kvik_page_cache_info(const char *path, size_t *resident_pages, size_t *total_pages);

/* Write back the file's dirty pages and ask the kernel to drop its cached pages
 * (fdatasync + posix_fadvise(POSIX_FADV_DONTNEED)). Returns 0 or a negative code (those of
 * kvik_page_cache_info, an errno of fdatasync(2)). Pages in
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
KVIK_API int kvik_runtime_lib_supported(kvik_runtime_lib lib, char *detail, size_t len);

/* Whether files in directory `dir` can be opened with O_DIRECT and read and written with it
 * (tested with a temporary file, removed again). Returns 1, or 0 when the file system refuses
 * O_DIRECT (EINVAL), or a negative code when the test itself fails (the file cannot be created,
 * or its IO fails otherwise: ENOSPC, EIO, ENOMEM ...). Thread-safe. */
KVIK_API int kvik_direct_io_supported(const char *dir);

#ifdef __cplusplus
}
#endif

#endif /* KVIK_H */
