/*
 * kvik: fast file IO between storage and host or GPU memory.
 *
 * The one public header of libkvik and its contract: what each call does, returns and requires.
 * How the library works inside, and why: docs/design.md. Measurements: docs/benchmarks.md.
 *
 * Each function's block says what it does, then, in this order, "Returns:" its result on
 * success; "Errors:" the negative codes it can return, each with its cause; "Threads:" "safe"
 * (any number of threads may call it at once, on the same handle too) or who may; and, where the
 * call keeps or gives anything, "Lifetime:" who owns it and how long it must stay valid. A block
 * above several declarations holds for each of them. For every function:
 *  - Codes are `-errno` for system errors (-ENOENT, -ENOSPC, ...), KVIK_E... values below
 *    KVIK_ERRNO_BASE for kvik's own, and other libraries' failures in one encoding ("a CUDA
 *    code", "a cuFile code", "an HTTP code": see Errors). kvik_strerror() describes any code.
 *  - A failing call stores a message on the calling thread saying what failed, on which path or
 *    handle and why ("kvik_file_open(\"/data/x\", \"r\"): No such file or directory"); read it
 *    with kvik_last_error() before the next kvik call on that thread.
 *  - KVIK_ECONFIG, where listed: an environment variable holds an invalid setting (see
 *    Settings); every call that reads settings then fails with it.
 *  - The library never prints, never exits, never raises signals of its own, and sets no errno
 *    that a caller should read.
 *  - Handles are opaque, created and freed in pairs (kvik_file_open/kvik_file_free, a call that
 *    makes a future/kvik_future_free). Free functions accept NULL.
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
/* Version                                                                                    */
/* ------------------------------------------------------------------------------------------ */

#define KVIK_VERSION_MAJOR 0
#define KVIK_VERSION_MINOR 1
#define KVIK_VERSION_PATCH 0
/* One number that grows with every release: 0xMMmmpp. Compare with `>=`. */
#define KVIK_VERSION_NUM                                                                           \
  ((KVIK_VERSION_MAJOR << 16) | (KVIK_VERSION_MINOR << 8) | KVIK_VERSION_PATCH)
#define KVIK_VERSION_STRING "0.1.0"

/* The version of the library loaded at run time, which may differ from the header's.
 * Returns: its KVIK_VERSION_NUM. Errors: none. Threads: safe. */
KVIK_API unsigned kvik_version(void);

/* The version of the library loaded at run time as text.
 * Returns: "MAJOR.MINOR.PATCH", in static storage. Errors: none. Threads: safe. */
KVIK_API const char *kvik_version_string(void);

/* ------------------------------------------------------------------------------------------ */
/* Errors                                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Library codes lie below every errno value. Once released, a code keeps its value and meaning;
 * new codes are appended. */
#define KVIK_ERRNO_BASE (-4000)

/* kvik's own codes: X(name, value, description). */
#define KVIK_ERROR_MAP(X)                                                                          \
  X(KVIK_ECONFIG, KVIK_ERRNO_BASE - 1, "invalid setting or environment variable value")            \
  X(KVIK_ECANCELED_BY_FORK, KVIK_ERRNO_BASE - 2, "IO was in flight in the parent at fork()")       \
  X(KVIK_EINTERNAL, KVIK_ERRNO_BASE - 3, "internal error in kvik")                                 \
  X(KVIK_ECUDA_UNAVAILABLE, KVIK_ERRNO_BASE - 4, "CUDA driver or device not available")            \
  X(KVIK_ECUFILE_UNAVAILABLE, KVIK_ERRNO_BASE - 5, "cuFile library or driver not available")       \
  X(KVIK_ENOREMOTE, KVIK_ERRNO_BASE - 6, "remote files unavailable: libcurl could not be loaded")  \
  X(KVIK_EREMOTE, KVIK_ERRNO_BASE - 7, "remote transfer failed")                                   \
  X(KVIK_EREMOTE_SHORT, KVIK_ERRNO_BASE - 8, "remote response ended before the requested range")   \
  X(KVIK_EREMOTE_LONG, KVIK_ERRNO_BASE - 9, "remote response longer than the requested range")     \
  X(KVIK_ERANGE_IGNORED, KVIK_ERRNO_BASE - 10, "server ignored the range request")                 \
  X(KVIK_ETLS, KVIK_ERRNO_BASE - 11, "TLS connection or certificate verification failed")          \
  X(KVIK_ERANGE_MISMATCH, KVIK_ERRNO_BASE - 12,                                                    \
    "Content-Range does not match the requested range")                                            \
  X(KVIK_ENVCOMP_UNAVAILABLE, KVIK_ERRNO_BASE - 13, "nvCOMP library or codec not available")       \
  X(KVIK_EDECODED_SIZE, KVIK_ERRNO_BASE - 14, "chunk decompressed to a size other than expected")  \
  X(KVIK_ENOJSON, KVIK_ERRNO_BASE - 15, "JSON library (Jansson) could not be loaded")

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
#define KVIK_IS_FOREIGN_CODE_(base, code) ((code) < (base) && (code) > (base)-1000)

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
#define KVIK_IS_HTTP_ERROR(code)                                                                   \
  (KVIK_IS_FOREIGN_CODE_(KVIK_EHTTP_BASE, code) && (code) <= KVIK_EHTTP_BASE - 100)
#define KVIK_HTTP_STATUS(code) KVIK_FOREIGN_CODE_(KVIK_EHTTP_BASE, code)

/* nvCOMP: n is the nvcompStatus_t of a chunk or a call (nvcompErrorCannotDecompress = 12), but
 * for nvcompErrorCudaError (1000), which is n = 998, and nvcompErrorInternal (10000), n = 999;
 * KVIK_NVCOMP_STATUS() gives back the status, kvik_err_name() its name
 * ("nvcompErrorCannotDecompress"). */
#define KVIK_ENVCOMP_BASE (-8000)
#define KVIK_IS_NVCOMP_ERROR(code) KVIK_IS_FOREIGN_CODE_(KVIK_ENVCOMP_BASE, code)
#define KVIK_NVCOMP_N_(code) KVIK_FOREIGN_CODE_(KVIK_ENVCOMP_BASE, code)
#define KVIK_NVCOMP_STATUS(code)                                                                   \
  (KVIK_NVCOMP_N_(code) == 998 ? 1000 : KVIK_NVCOMP_N_(code) == 999 ? 10000 : KVIK_NVCOMP_N_(code))

/* A description of `code` ("No such file or directory", "invalid setting ...", "out of
 * memory"). Any int is accepted: 0 and above give "success", unknown codes "unknown error". CUDA
 * codes are described by the driver once kvik has loaded it (this never loads it), else from a
 * built-in table of the common results.
 * Returns: the description, never NULL. Errors: none. Threads: safe. Lifetime: static storage. */
KVIK_API const char *kvik_strerror(int code);

/* The symbolic name of `code` ("ENOENT", "KVIK_ECONFIG", "CU_FILE_IO_ERROR",
 * "CUDA_ERROR_INVALID_VALUE", "HTTP_404").
 * Returns: the name; "OK" for 0 and above; for a code of no known name "UNKNOWN" (in the CUDA and
 * HTTP ranges "CUDA_ERROR_UNKNOWN_CODE", "HTTP_ERROR"). Errors: none. Threads: safe. Lifetime:
 * static storage. */
KVIK_API const char *kvik_err_name(int code);

/* The message of the last failing kvik call on this thread.
 * Returns: the message, or "" if no call failed on this thread yet. Errors: none. Threads: safe:
 * each thread has its own message. Lifetime: the text stays as it is until the next kvik call on
 * this thread, which may replace it. */
KVIK_API const char *kvik_last_error(void);

/* ------------------------------------------------------------------------------------------ */
/* Settings                                                                                   */
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
 *   KVIK_SETTING_REMOTE_IO_BACKEND KVIKIO_REMOTE_IO_BACKEND   KVIK_REMOTE_IO_EASY_THREADPOOL
 *   KVIK_SETTING_REMOTE_IO_NUM_REACTORS KVIKIO_REMOTE_IO_NUM_REACTORS  1
 *   KVIK_SETTING_REMOTE_IO_REACTOR_DISPATCH KVIKIO_REMOTE_IO_REACTOR_DISPATCH
 *                                                             KVIK_REACTOR_PER_CHUNK
 *   KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS KVIKIO_REMOTE_IO_MAX_CONCURRENT_REQUESTS 256
 *   KVIK_SETTING_NVCOMP_LIBRARY KVIK_NVCOMP_LIBRARY           "" (the soname)
 *   KVIK_SETTING_NVCOMP_MEMORY KVIK_NVCOMP_MEMORY             16 GiB
 *   KVIK_SETTING_CURL_LIBRARY  KVIK_CURL_LIBRARY              "" (the soname)
 *   KVIK_SETTING_NUMA_AFFINITY KVIK_NUMA_AFFINITY             0 (off)
 *   KVIK_SETTING_WRITE_BEHIND  KVIK_WRITE_BEHIND              1 (on)
 *
 * Settings of kvik's own, which KvikIO lacks, use the prefix KVIK_ instead of KVIKIO_. What each
 * does, KVIK_SETTING_ left out (how the O_DIRECT, zero-copy and io_uring paths work, and why:
 * docs/design.md):
 *  - COMPAT_MODE: whether a file's device memory goes through cuFile, read when the file opens
 *    (see "Device memory: POSIX or cuFile").
 *  - NUM_THREADS: the threads of the pool that runs the tasks of requests (a buffered write of
 *    host memory takes one: see kvik_file_write).
 *  - TASK_SIZE: the bytes of one task; a request has at most 16384 tasks (see kvik_file_pread).
 *    A read of a file of 64 MiB or more whose range the page cache mostly lacks (by a sample of
 *    its pages) runs in tasks of at least 16 MiB: each buffered task asks the kernel to read its
 *    whole range at once (POSIX_FADV_WILLNEED), so larger tasks keep more of the file in flight.
 *  - GDS_THRESHOLD: smaller requests run on the calling thread; on files that cuFile serves,
 *    device memory goes through cuFile from this size on.
 *  - BOUNCE_BUFFER_SIZE: the largest bounce buffer, pinned for device memory (see "Device
 *    memory"), aligned for O_DIRECT; any positive size, read back as set. kvik rounds the
 *    buffers it allocates up to whole pages (4 KiB), but for pinned buffers below a page, which
 *    are allocated at the setting rounded up to 64 bytes.
 *  - AUTO_DIRECT_IO_READ/WRITE: reads (writes) of host memory take O_DIRECT for the page-aligned
 *    middle of a range where the file system allows it; results and errors stay the same. A read
 *    asks the page cache first, once per task (and per io_uring operation): a middle of which the
 *    cache holds at least 9 pages in 10 is copied out of it instead, as a read without the setting
 *    would, so that a file already in memory is not read again from the device. io_uring
 *    operations ask cachestat(2) alone: where it is missing (before Linux 6.5) or counts nothing
 *    (overlayfs), they take O_DIRECT; tasks then ask mincore(2). kvik_file_set_direct_io()
 *    overrides the setting for one handle.
 *  - ZERO_COPY_READ: reads of a file into device memory may let the GPU copy straight out of the
 *    page cache, through a mapping that the handle registers read-only with CUDA in granules of
 *    64 MiB as reads reach them. OFF: never. AUTO: granules whose every page is in the page
 *    cache, by reads of at least half of what they would register, where registering gets the
 *    bytes there sooner than the bounce buffers on the read's threads: a cost model compares the
 *    best rates measured so far in the process (one thread's pread into pinned memory; the
 *    registration), with priors from an H100 host (6 and 22 GB/s) before the first measurement,
 *    and registers while threads * pread rate < registration rate (up to 3 threads on the
 *    priors). A granule that an earlier request of the handle read (requests of at least half a
 *    granule count) is registered where that holds on one thread, whatever the read's threads:
 *    a range read again is taken to be read more, and each read of a registered granule costs
 *    next to no CPU. Granules registered before serve every read. ON: always (the registration
 *    then reads pages not in memory from storage). Where the path cannot be taken, the read goes
 *    through the bounce buffers, with the same result. A handle keeps its registrations, and
 *    their pages pinned in memory, until kvik_file_close(). Writes to the file, by any path,
 *    reach later reads; a change of its size, mtime or ctime drops the registrations first (a
 *    truncation and a rewrite of the same size within one time-stamp tick would go unnoticed). A
 *    read racing a truncation returns the bytes from before, or after, or stops short where the
 *    file ended, as pread(2) would. Registering waits for work the device is doing, so such a
 *    read also waits for kernels that run meanwhile, and never ends where that work waits for
 *    the reading thread (a host function that waits for the read): that is why the default is
 *    OFF. Stream-ordered reads never take this path.
 *    Setting it again makes kvik ask a driver that refused read-only registration again.
 *  - IO_URING: which operations of a batch the kernel's io_uring serves instead of the thread
 *    pool. OFF: none. AUTO: those below GDS_THRESHOLD, and those that go through O_DIRECT
 *    (AUTO_DIRECT_IO_READ/WRITE on; offset and size multiples of 4096, and so the address of
 *    host memory; a read of a range the page cache does not hold). ON: all. Under OFF and AUTO
 *    a read into host memory below GDS_THRESHOLD first reads what the page cache holds of it
 *    within kvik_batch_submit() (see Batch IO). Writes to append handles always go to the pool.
 *    Results are the same either way, and where the kernel refuses io_uring the pool serves all
 *    (see kvik_io_uring_supported). A batch that gives device memory to io_uring holds a
 *    pinned staging arena of 64 MiB, for operations of up to 16 MiB.
 *  - HTTP_* and REMOTE_*: see "Remote files".
 *  - REMOTE_IO_*: KvikIO's choice of remote engine, read back as set. kvik has one engine,
 *    requests on the thread pool (KvikIO's EASY_THREADPOOL); under either backend reads work
 *    the same. NUM_REACTORS (at least 1) and REACTOR_DISPATCH configure KvikIO's MULTI_POLL
 *    reactors, which kvik has not: they change nothing. MAX_CONCURRENT_REQUESTS, 0 for no
 *    limit, caps the remote requests in flight at once, as REMOTE_CONNECTIONS does: the smaller
 *    of the two applies. KvikIO fixes the last three once its reactors have started; kvik's
 *    may change at any time, taking effect for requests that start after.
 *  - NVCOMP_LIBRARY: the file that nvCOMP is loaded from, "" for the soname (see "Compression").
 *    Read when nvCOMP is first needed; a change after that has no effect in this process.
 *  - NVCOMP_MEMORY: the device memory, per GPU, that kvik keeps between calls for its work with
 *    nvCOMP (nvCOMP's temporary space, kvik_file_read_decompress()'s staging), so that a call
 *    does not map again what the last one freed (see "Compression"). 0 keeps none. Memory above
 *    it goes back to the device when the work that used it is waited for; a change gives back at
 *    once what kvik holds above the new value (0: all of it) and no work uses.
 *  - CURL_LIBRARY: the file that libcurl is loaded from, "" for the soname (see "Remote files").
 *    Read at the first remote call; a change after that has no effect in this process.
 *  - NUMA_AFFINITY: a pool thread that moves data for a GPU runs, from then on, on the CPUs of the
 *    GPU's NUMA node (sysfs's numa_node of its PCI function; those CPUs the thread may run on),
 *    until it serves a GPU of another node; set to 0, threads get back the CPUs they had at
 *    their next device transfer. Nothing changes where the node is not known (one socket, no
 *    sysfs). Off by default: no measurement has shown it faster yet (docs/multi_gpu.md).
 *  - WRITE_BEHIND: a buffered write call of 1 MiB or more (a task's, a piece's) asks the kernel
 *    to start writing its range to storage as soon as the call returns (sync_file_range(2),
 *    SYNC_FILE_RANGE_WRITE, which waits for no IO), so that a later fsync finds little left to
 *    write, instead of all of it. Where starting the writeback takes more than a quarter of the
 *    handle's writing time (the storage is behind: the kernel makes the caller wait for room in
 *    the device's queue), the handle stops asking for a second, and its writes stay in the page
 *    cache as a plain write(2)'s do. Errors of the writeback reach fsync as always.
 *    Off: the kernel writes dirty pages back when it decides to (docs/design.md).
 *
 * Values are int64_t. Booleans are 0/1; sizes are bytes. Text values (environment variables
 * and `kvik_setting_parse()`) are trimmed and case-insensitive: booleans accept
 * on/off/true/false/yes/no/1/0, the compat mode accepts those and "auto", sizes and counts
 * accept decimal integers, REMOTE_IO_BACKEND "easy_threadpool" and "multi_poll",
 * REMOTE_IO_REACTOR_DISPATCH "per_chunk" and "per_pread" (KvikIO's names).
 * KVIK_SETTING_HTTP_STATUS_CODES is a list: it is read and changed as text only
 * (kvik_setting_format, kvik_setting_parse: comma-separated statuses, "" for none);
 * kvik_setting_get and kvik_setting_set refuse it with -EINVAL. So are KVIK_SETTING_NVCOMP_LIBRARY
 * and KVIK_SETTING_CURL_LIBRARY, paths taken as they are (not trimmed), of at most 4095 bytes.
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
  KVIK_SETTING_REMOTE_IO_BACKEND,
  KVIK_SETTING_REMOTE_IO_NUM_REACTORS,
  KVIK_SETTING_REMOTE_IO_REACTOR_DISPATCH,
  KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS,
  KVIK_SETTING_NVCOMP_LIBRARY,
  KVIK_SETTING_NVCOMP_MEMORY,
  KVIK_SETTING_CURL_LIBRARY,
  KVIK_SETTING_NUMA_AFFINITY,
  KVIK_SETTING_WRITE_BEHIND,
  KVIK_SETTING_COUNT /* number of settings; not a setting */
} kvik_setting;

/* Values of KVIK_SETTING_REMOTE_IO_BACKEND; the numbers are KvikIO's RemoteIOBackend. */
typedef enum kvik_remote_io_backend {
  KVIK_REMOTE_IO_EASY_THREADPOOL = 0,
  KVIK_REMOTE_IO_MULTI_POLL = 1
} kvik_remote_io_backend;

/* Values of KVIK_SETTING_REMOTE_IO_REACTOR_DISPATCH; the numbers are KvikIO's
 * RemoteReactorDispatch. */
typedef enum kvik_reactor_dispatch {
  KVIK_REACTOR_PER_CHUNK = 0,
  KVIK_REACTOR_PER_PREAD = 1
} kvik_reactor_dispatch;

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

/* Read a setting into *value.
 * Returns: 0. Errors: -EINVAL (unknown setting, NULL value, KVIK_SETTING_HTTP_STATUS_CODES or
 * KVIK_SETTING_NVCOMP_LIBRARY, KVIK_SETTING_CURL_LIBRARY); KVIK_ECONFIG. Threads: safe. */
KVIK_API int kvik_setting_get(kvik_setting setting, int64_t *value);

/* Change a setting for the whole process. IO already submitted keeps the task size it was split
 * with. Setting KVIK_SETTING_NUM_THREADS resizes the thread pool: it waits for running tasks to
 * finish; queued tasks run on the new threads.
 * Returns: 0. Errors: -EINVAL (unknown setting, KVIK_SETTING_HTTP_STATUS_CODES or
 * KVIK_SETTING_NVCOMP_LIBRARY, KVIK_SETTING_CURL_LIBRARY, a value out of range: the message says
 * the range), with nothing changed; KVIK_ECONFIG. For KVIK_SETTING_NUM_THREADS: -EDEADLK (called
 * from a kvik pool thread; nothing changed); -ENOMEM or an errno of pthread_create(3) (no new
 * thread could start: the count applies all the same, queued tasks run on the calling thread,
 * and the pool tries again on its next use). Threads: safe. */
KVIK_API int kvik_setting_set(kvik_setting setting, int64_t value);

/* Like kvik_setting_set(), with the value given as text and parsed as its environment variable
 * would be; KVIK_SETTING_HTTP_STATUS_CODES and the library paths included.
 * Returns: 0. Errors: those of kvik_setting_set(); -EINVAL also for NULL or unparsable text, and
 * a path longer than 4095 bytes.
 * Threads: safe. */
KVIK_API int kvik_setting_parse(kvik_setting setting, const char *text);

/* Where the setting's current value came from.
 * Returns: a kvik_setting_source. Errors: -EINVAL (unknown setting); KVIK_ECONFIG.
 * Threads: safe. */
KVIK_API int kvik_setting_source_of(kvik_setting setting);

/* Write the current value as text ("AUTO", "on", "4194304", "429,500") into `buf`, cut to `len`
 * bytes with the NUL as snprintf(3) does; `buf` may be NULL when `len` is 0, to learn the length.
 * Returns: the text's full length, without the NUL. Errors: -EINVAL (unknown setting, NULL `buf`
 * with `len` > 0); KVIK_ECONFIG. Threads: safe. */
KVIK_API int kvik_setting_format(kvik_setting setting, char *buf, size_t len);

/* The setting's short name as KvikIO's Python `defaults.get()` knows it ("num_threads",
 * "task_size", ...), and its environment variable ("KVIKIO_NTHREADS").
 * Returns: the name, or NULL for an unknown setting. Errors: none. Threads: safe. Lifetime: static
 * storage. */
KVIK_API const char *kvik_setting_name(kvik_setting setting);
KVIK_API const char *kvik_setting_env_name(kvik_setting setting);

/* The setting with this short name (see kvik_setting_name).
 * Returns: a kvik_setting. Errors: -EINVAL (NULL or unknown name). Threads: safe. */
KVIK_API int kvik_setting_lookup(const char *name);

/* ------------------------------------------------------------------------------------------ */
/* Files                                                                                      */
/* ------------------------------------------------------------------------------------------ */

typedef struct kvik_file kvik_file;

/*
 * Open `path` with a flag string:
 *   "r"  read only            "r+" read and write
 *   "w"  write only, create, truncate    "w+" read and write, create, truncate
 *   "a"  append, create       "a+" read and append, create
 * O_CLOEXEC always applies. `mode` is the permission of a created file (e.g. 0644).
 *
 * Append handles ("a", "a+"): every write goes to the end of the file as it is when the write
 * reaches it, and ignores its offset argument. An append never overwrites anything, whoever else
 * appends to the file or cuts it. One that fails part way (ENOSPC, EIO ...) keeps the bytes that
 * reached the file, a prefix of its buffer (kvik_future_bytes_done() counts them), and the next
 * lands right after them. In this process, the appends to one file (through any of its append
 * handles) run one at a time, in no defined order, so each lands as one contiguous range however
 * many threads, futures, batches and streams append at once; the others wait (a pool thread each,
 * for futures). Against other writers (another process, or this one through another descriptor)
 * an append is contiguous only within each of its write(2) calls: one for host memory (Linux
 * moves at most 2 GiB - 4 KiB per call), one per bounce buffer for device memory, and another
 * for what a signal or the file system cut short; another process's O_APPEND write may land
 * between two calls, never inside one (NFS does not make O_APPEND atomic across clients). Appends
 * go through the page cache and never through cuFile. pwrite(2) on kvik_file_fd() of an append
 * handle appends too.
 *
 * Returns: 0, with a new handle in *file (NULL there on failure). Errors: -EINVAL (NULL argument,
 * unknown flag string); -EISDIR (a directory); -ESPIPE (a FIFO or socket: kvik's IO is positional;
 * a FIFO is refused without waiting for its other end); an errno of open(2) or fstat(2); -ENOMEM;
 * KVIK_ECONFIG. With compat mode OFF, why cuFile cannot serve the file: KVIK_ECUFILE_UNAVAILABLE,
 * an errno of opening it with O_DIRECT, a cuFile code, a CUDA code. Threads: safe. Lifetime: the
 * caller owns the handle and frees it with kvik_file_free(); `path` is copied.
 */
KVIK_API int kvik_file_open(const char *path, const char *flags, unsigned mode, kvik_file **file);

/* Close the file's descriptors, first waiting for the IO in flight on it (futures included). The
 * handle stays valid, and calls on it fail with -EBADF, until kvik_file_free().
 * Returns: 0. Errors: -EINVAL (NULL); -EBADF (closed already); an errno of close(2) (the descriptor
 * is closed all the same). Threads: safe. */
KVIK_API int kvik_file_close(kvik_file *file);

/* Close the file if it is open, then free the handle. NULL is ignored.
 * Returns: nothing. Errors: none (an error of the close is lost). Threads: no other thread may use
 * the handle during or after this call. */
KVIK_API void kvik_file_free(kvik_file *file);

/* Whether kvik_file_close() has been called.
 * Returns: 1 if so (or for NULL), else 0. Errors: none. Threads: safe. */
KVIK_API int kvik_file_closed(const kvik_file *file);

/* The file's descriptor (buffered, without O_DIRECT).
 * Returns: the descriptor. Errors: -EINVAL (NULL); -EBADF (closed). Threads: safe. Lifetime: the
 * handle owns it: do not close it, and do not use it once kvik_file_close() was called (its number
 * may then belong to another file). */
KVIK_API int kvik_file_fd(const kvik_file *file);

/* The descriptor's open flags, as fcntl(F_GETFL) gives them.
 * Returns: the flags (with O_APPEND for append handles). Errors: -EINVAL (NULL); -EBADF (closed);
 * an errno of fcntl(2). Threads: safe. */
KVIK_API int kvik_file_open_flags(const kvik_file *file);

/* The file's size in bytes (a block device's too).
 * Returns: the size. Errors: -EINVAL (NULL); -EBADF (closed); an errno of fstat(2) or lseek(2).
 * Threads: safe. */
KVIK_API int64_t kvik_file_size(const kvik_file *file);

/* O_DIRECT for this handle alone, whatever KVIK_SETTING_AUTO_DIRECT_IO_READ and _WRITE say for
 * every handle: `reads` (`writes`) 1 makes this handle's reads (writes) as the setting's "on"
 * does (the page-aligned middle of a request with O_DIRECT; of a read, only what the page cache
 * does not hold), 0 as its "off" does, and -1 follows the setting again, as a new handle does.
 * For a caller that knows a file better than the process-wide setting can: one that reads a
 * large file once, say. What O_DIRECT reads is not left in the page cache, so the next read of
 * it goes to the disk again.
 * Returns: 0. Errors: -EINVAL (NULL; a value other than -1, 0 or 1); -EBADF (closed). Threads:
 * safe; a request already started may move some of its bytes the old way. */
KVIK_API int kvik_file_set_direct_io(kvik_file *file, int reads, int writes);

/*
 * Errors of reads and writes. The reads and writes of files, mapped files and remote objects,
 * the results of their futures and the events of batches fail with:
 *   -EINVAL                 NULL handle; NULL `buf` with `size` > 0; negative offset; `size`
 *                           above SSIZE_MAX or offset + size above INT64_MAX; NULL `future`
 *   -EBADF                  the handle is closed, or a file is not open for reading (writing)
 *   -ENOMEM                 no memory for the request
 *   -EAGAIN                 the thread pool could start none of its threads (or another errno
 *                           of pthread_create(3))
 *   KVIK_ECONFIG            see the conventions at the top
 *   KVIK_ECUDA_UNAVAILABLE  libcuda.so.1 is in the process but kvik cannot load it, so device
 *                           memory cannot be told from host memory
 *   a CUDA code             the driver failed on device or managed memory: finding its kind,
 *                           its bounce buffers, a copy
 *   KVIK_ECANCELED_BY_FORK  a future's result in a child process: the request was in flight in
 *                           the parent at fork(), and does not run in the child
 * and with the errors of what is read or written: for files an errno of pread(2), pwrite(2) or
 * write(2) (-EIO, -ENOSPC, -EFBIG, -EDQUOT, -EFAULT where the process cannot write (read) all of
 * `buf` ...), on files that cuFile serves also a cuFile code, or -EIO where cuFile wrote less than
 * asked; for remote objects the codes listed with them. A call that makes a future fails at once
 * only with what it finds before IO starts (the argument errors, -ENOMEM, -EAGAIN, finding the
 * kind of `buf`); the errors of the IO itself are the future's result.
 */

/* Read `size` bytes at `file_offset` into `buf` (host or device memory: see "Device memory"), in
 * parallel on the thread pool in tasks of KVIK_SETTING_TASK_SIZE bytes, and wait for them. As
 * pread(2), the read stops at the end of the file; bytes of `buf` past it are left untouched.
 * Interrupted and short system calls are retried. A read of host memory of at most one task (or
 * below KVIK_SETTING_GDS_THRESHOLD) runs on the calling thread and allocates nothing: its cost
 * is the system call's and a few atomic operations (kvik_file_write likewise).
 * Returns: the bytes read, fewer than `size` only where the file ends first. Errors: those of reads
 * and writes (above). On -EFAULT the bytes the process can write may have been read all the same:
 * the message says how many. Threads: safe. */
KVIK_API ssize_t kvik_file_read(kvik_file *file, void *buf, size_t size, int64_t file_offset);

/* Write `size` bytes from `buf` at `file_offset` in parallel, and wait; on an append handle at
 * the end of the file, on the calling thread (see kvik_file_open). A write of host memory that
 * goes through the page cache (KVIK_SETTING_AUTO_DIRECT_IO_WRITE off, or O_DIRECT refused on the
 * file) also runs on the calling thread, in pwrite(2) calls of KVIK_SETTING_TASK_SIZE bytes one
 * after the other: the kernel takes the file's lock for each buffered write, so that threads
 * writing one file only take turns, and waiting for the lock would cost them CPU time.
 * Returns: `size`. Errors: those of reads and writes (above). A write that cannot complete returns
 * its errno (-ENOSPC, -EIO, -EFBIG, -EFAULT ...), and the message says how many bytes were written,
 * not necessarily one contiguous range. Threads: safe. */
KVIK_API ssize_t kvik_file_write(kvik_file *file, const void *buf, size_t size,
                                 int64_t file_offset);

/*
 * A future stands for one request that runs in the background. The calls that take
 * `kvik_future **future` start the request and store a new future there, or fail, store NULL and
 * start nothing: a call that fails at once never makes a future. The request runs as tasks on
 * the thread pool; a request smaller than KVIK_SETTING_GDS_THRESHOLD runs on the calling thread,
 * whose call then returns a future that is done already. The first task that fails decides the
 * request's result: tasks that have not started then move no bytes, so the error comes back
 * without waiting for the rest. What tasks moved before stays moved: kvik_future_bytes_done()
 * counts it, and the message of a failed request ends with "(X of Y bytes transferred)".
 *
 * Lifetime: the caller owns the future and frees it with kvik_future_free(), done or not. The
 * request's buffer must stay valid until the future is done. Closing or freeing the handle
 * waits for the request; the future stays valid after the handle is gone.
 */
typedef struct kvik_future kvik_future;

/* Start a read like kvik_file_read() without waiting. `task_size` 0 means
 * KVIK_SETTING_TASK_SIZE. A request has at most 16384 tasks: where `size` / `task_size` would make
 * more, its tasks are `size` / 16384 bytes rounded up to 4 KiB (at the default task size, requests
 * above 64 GiB).
 * Returns: 0, with a new future in *future; its result is kvik_file_read()'s. Errors: those of
 * reads and writes (above) found before IO starts. Threads: safe. Lifetime: `buf` until the future
 * is done (see futures, above). */
KVIK_API int kvik_file_pread(kvik_file *file, void *buf, size_t size, int64_t file_offset,
                             size_t task_size, kvik_future **future);

/* Start a write like kvik_file_write() without waiting; see kvik_file_pread(). A buffered write
 * of host memory (see kvik_file_write) is one task on the pool, in calls of `task_size` bytes.
 * Returns: 0, with a new future in *future; its result is kvik_file_write()'s. Errors: those of
 * reads and writes (above) found before IO starts. Threads: safe. Lifetime: `buf` until the future
 * is done (see futures, above). */
KVIK_API int kvik_file_pwrite(kvik_file *file, const void *buf, size_t size, int64_t file_offset,
                              size_t task_size, kvik_future **future);

/* Wait until the request is done.
 * Returns: its result: the bytes transferred, as the call that made the future says. Errors: the
 * request's (then kvik_last_error() says what failed, and kvik_future_bytes_done() how many bytes
 * moved all the same); -EINVAL (NULL). Threads: safe: any number of threads may wait for a future,
 * any number of times. */
KVIK_API ssize_t kvik_future_wait(kvik_future *future);

/* Like kvik_future_wait(), but give up after `timeout_ns` nanoseconds (0 polls).
 * Returns: the request's result, if it is done in time. Errors: -ETIMEDOUT (still running); -EINVAL
 * (NULL, negative timeout); the request's. Threads: safe. */
KVIK_API ssize_t kvik_future_wait_for(kvik_future *future, int64_t timeout_ns);

/* Whether the request is done (its result is ready). Never blocks.
 * Returns: 1 if so, else 0 (also for NULL). Errors: none. Threads: safe. */
KVIK_API int kvik_future_done(kvik_future *future);

/* The bytes transferred so far, exact once done. For a failed write, the bytes that did reach
 * the file, not necessarily one contiguous range. Never blocks.
 * Returns: the count (0 for NULL). Errors: none. Threads: safe. */
KVIK_API size_t kvik_future_bytes_done(kvik_future *future);

/* Free the future, first waiting for its request if it is still running. NULL is ignored.
 * Returns: nothing. Errors: none. Threads: no other thread may use the future during or after this
 * call. */
KVIK_API void kvik_future_free(kvik_future *future);

/* ------------------------------------------------------------------------------------------ */
/* Device memory                                                                              */
/* ------------------------------------------------------------------------------------------ */

/*
 * Every read and write of this header but raw IO accepts host or device memory: the kind of
 * `buf` is found per call from the pointer itself, an address inside an allocation included.
 * Pinned host memory (cuMemHostAlloc, cudaHostAlloc, kvik_host_pin) and pageable host memory are
 * read and written directly; device and managed memory go through pinned bounce buffers. A
 * blocking read or write of a file (kvik_file_read, kvik_file_write) of at most 256 KiB that
 * would run on the calling thread is tried as host memory before the kind is asked: device
 * memory fails its first system call with EFAULT before a byte moves and then takes the bounce
 * buffers, while managed memory, which the CPU may touch, is read or written through the CPU.
 *
 * The CUDA driver (libcuda.so.1) is loaded on the first call that needs it, never at build or
 * load time. Without a driver or a device, host IO works as before and whatever needs the
 * driver fails with KVIK_ECUDA_UNAVAILABLE and a message saying what is missing. A pointer is
 * taken to be host memory while the process has no libcuda.so.1 loaded, and in a child process
 * of a parent that used CUDA, which cannot use CUDA (a rule of the driver). Host IO only asks
 * whether the driver is in the process, which searches no directory; a driver that could not be
 * found is not looked for again until the process loads another library (one that another
 * library loaded is then found).
 *
 * Copies run in the context of the buffer's allocation; for memory without one (stream-ordered
 * pools) in the calling thread's current context, else the primary context of the buffer's
 * device. Device memory must be ready when a call starts: work on other streams that writes it
 * must have completed.
 *
 * Memory bound: a thread with device work holds two pinned buffers of
 * min(KVIK_SETTING_BOUNCE_BUFFER_SIZE, max(task size / 2, 256 KiB)) bytes (2 MiB at the
 * defaults; 4 MiB for reads of 256 MiB or more into device memory, which run in tasks of at
 * least 8 MiB; a read of more than one chunk takes them as one allocation; one of 2 MiB or more
 * is whole huge pages, a piece of one mapping made for all the pool's threads, of which only the
 * pieces taken hold memory), per device it works for, and gives them back when it runs out of
 * work; at most KVIK_PINNED_CACHE_BYTES of idle pinned buffers per device (and as much again of
 * those that stream-ordered requests and fused reads take for any device) are kept for reuse and
 * the rest are freed. Keep 2 x buffer size x KVIK_SETTING_NUM_THREADS under that bound, or
 * buffers are freed and allocated again (slow).
 *
 * Several devices: requests into memory of different devices, from one thread or many, run side
 * by side. Each thread copies on a stream of its own per context, and each device has its own
 * pinned buffers, allocated on the NUMA node closest to it where sysfs names one; no buffer of
 * one device serves another. The thread pool is shared: a device slower than the others holds
 * only the threads that wait for its copies, and requests into other devices go on with the
 * rest. One process per device works as any process does (docs/multi_gpu.md).
 * How the bounce buffers overlap storage and PCIe:
 * docs/design.md#device-memory-through-bounce-buffers.
 *
 * The bounce buffers' sizes follow KVIK_SETTING_BOUNCE_BUFFER_SIZE: once it changes, the idle
 * buffers of the old size are freed at the next IO that takes a buffer.
 */
#define KVIK_PINNED_CACHE_BYTES ((size_t)256 << 20)

/* Free the idle bounce buffers that kvik keeps for reuse: pinned ones (for device memory, of
 * every device) and aligned pageable ones (for O_DIRECT). Buffers that IO holds are not touched;
 * later IO allocates again what it needs. Frees pinned memory in the calling thread's current
 * CUDA context, else in device 0's primary context. kvikio's bounce_buffer_free().
 * Returns: the bytes freed, 0 where none were idle. Threads: safe. */
KVIK_API size_t kvik_bounce_buffer_free(void);

/* What kind of memory a pointer refers to. */
typedef enum kvik_memory_kind {
  KVIK_MEMORY_HOST = 0,   /* pageable host memory, or any pointer CUDA does not know */
  KVIK_MEMORY_PINNED = 1, /* page-locked host memory: cuMemHostAlloc or registered */
  KVIK_MEMORY_DEVICE = 2, /* device memory: cuMemAlloc, cudaMallocAsync pools, CuPy, PyTorch */
  KVIK_MEMORY_MANAGED = 3 /* managed (unified) memory */
} kvik_memory_kind;

/* The kind of memory at `ptr`, as reads and writes find it. Loads the CUDA driver only where the
 * process has libcuda.so.1 loaded already.
 * Returns: a kvik_memory_kind; KVIK_MEMORY_HOST for NULL, and for every pointer without a driver.
 * Errors: KVIK_ECUDA_UNAVAILABLE (libcuda.so.1 is in the process but kvik cannot load it); a CUDA
 * code (the driver fails to say). Threads: safe. */
KVIK_API int kvik_memory_kind_of(const void *ptr);

/* Page-lock host memory [buf, buf + size) for every CUDA context (cuMemHostRegister, portable),
 * so that device transfers from and to it skip the bounce buffers. Loads the CUDA driver.
 * Returns: 0. Errors: -EINVAL (NULL `buf`, `size` 0); KVIK_ECUDA_UNAVAILABLE; a CUDA code (that of
 * CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED where part of the range is pinned already). Threads:
 * safe. Lifetime: the range must stay allocated until kvik_host_unpin(buf). */
KVIK_API int kvik_host_pin(void *buf, size_t size);

/* Undo kvik_host_pin(buf, ...).
 * Returns: 0. Errors: -EINVAL (NULL); KVIK_ECUDA_UNAVAILABLE; a CUDA code (that of
 * CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED where `buf` is not pinned). Threads: safe. */
KVIK_API int kvik_host_unpin(void *buf);

/* Wait until the work queued on CUDA stream `stream` is done (cuStreamSynchronize), for callers
 * that pass kvik memory written on a stream of theirs, since kvik's copies run on streams of its
 * own. `stream` is a CUstream or cudaStream_t, or NULL, 1 or 2 cast to pointers for CUDA's
 * default, legacy default and per-thread default streams, as __cuda_array_interface__ names
 * them. Those are streams of a context: of the one device memory `ptr` lies in (the memory the
 * stream writes), or the calling thread's current one where `ptr` is NULL or host memory.
 * Returns: 0. Errors: KVIK_ECUDA_UNAVAILABLE; a CUDA code (finding `ptr`'s context, or of the
 * stream). Threads: safe. */
KVIK_API int kvik_cuda_stream_synchronize(void *stream, const void *ptr);

/* The CUDA driver's version. Loads the driver.
 * Returns: the version (13000 for 13.0). Errors: KVIK_ECUDA_UNAVAILABLE, with a message saying why
 * (no libcuda.so.1, no device, ...); a CUDA code. Threads: safe. */
KVIK_API int kvik_cuda_driver_version(void);

/* The number of CUDA devices. Loads the driver.
 * Returns: the number. Errors: KVIK_ECUDA_UNAVAILABLE; a CUDA code. Threads: safe. */
KVIK_API int kvik_cuda_device_count(void);

/* Write the name of CUDA device `ordinal` into `name`, cut to `len` bytes with the NUL.
 * Returns: 0. Errors: -EINVAL (NULL `name`, `len` 0, no such device); KVIK_ECUDA_UNAVAILABLE; a
 * CUDA code. Threads: safe. */
KVIK_API int kvik_cuda_device_name(int ordinal, char *name, size_t len);

/* Where CUDA device `ordinal` sits, for placing work near it (`kvik info` lists them). A
 * parameter struct: set struct_size to sizeof(kvik_cuda_device_properties) before the call;
 * members the library does not know are left untouched. What the driver or sysfs does not say
 * is left "", -1 or 0 as noted, and is no error. */
typedef struct kvik_cuda_device_properties {
  size_t struct_size;
  char name[256];
  char pci_bus_id[32];     /* "0000:3b:00.0", as /sys/bus/pci/devices names it; "" unknown */
  int numa_node;           /* the NUMA node closest to the device; -1: none or unknown */
  int link_width;          /* PCIe lanes of the device's link now (x16: 16); 0 unknown */
  int link_generation;     /* the PCIe generation of the link's speed now (1 to 6); 0 unknown */
  int max_link_width;      /* what the link can do at most; 0 unknown */
  int max_link_generation; /* 0 unknown */
  size_t total_memory;     /* bytes of device memory; 0 unknown */
} kvik_cuda_device_properties;

/* Fill `props` with device `ordinal`'s properties, up to props->struct_size bytes: the driver's
 * name, PCI bus id and memory, and from sysfs (/sys/bus/pci/devices/<bus id>/) the NUMA node and
 * the link's current and maximum width and speed. Loads the driver.
 * Returns: 0. Errors: -EINVAL (NULL, struct_size not set, no such device);
 * KVIK_ECUDA_UNAVAILABLE; a CUDA code. Threads: safe. */
KVIK_API int kvik_cuda_device_get_properties(int ordinal, kvik_cuda_device_properties *props);

/* Read the whole file into new device memory of CUDA device `device`, allocated in its primary
 * context, in parallel.
 * Returns: the bytes read, with the allocation in *devptr (NULL for an empty file, and on failure,
 * when nothing stays allocated). Errors: -EINVAL (NULL `devptr`, no such device); those of
 * kvik_file_size(); those of reads and writes (above); KVIK_ECUDA_UNAVAILABLE; a CUDA code (that of
 * CUDA_ERROR_OUT_OF_MEMORY where the allocation fails). Threads: safe. Lifetime: the caller owns
 * the memory and frees it with kvik_device_free(). */
KVIK_API ssize_t kvik_file_read_to_device(kvik_file *file, int device, void **devptr);

/* Free device memory from kvik_file_read_to_device(). NULL is ignored.
 * Returns: 0. Errors: -EINVAL (not device memory); KVIK_ECUDA_UNAVAILABLE; a CUDA code. Threads:
 * safe. */
KVIK_API int kvik_device_free(void *devptr);

/* ------------------------------------------------------------------------------------------ */
/* Device memory: POSIX or cuFile                                                             */
/* ------------------------------------------------------------------------------------------ */

/*
 * Each file decides which path serves its device memory, following KVIK_SETTING_COMPAT_MODE at
 * kvik_file_open():
 *   KVIK_COMPAT_ON    POSIX IO (pinned bounce buffers); cuFile is never loaded.
 *   KVIK_COMPAT_OFF   cuFile (GPUDirect Storage). kvik_file_open() fails if cuFile cannot serve
 *                     the file, with a message that says why.
 *   KVIK_COMPAT_AUTO  cuFile where it can work: the library loads and its driver opens,
 *                     /run/udev is readable (cuFile identifies file systems through udev), the
 *                     system is not WSL, the file opens with O_DIRECT and cuFileHandleRegister
 *                     accepts it. Else POSIX IO. Decided when the file's device memory first
 *                     needs it.
 * kvik_file_backend() tells which path a file got, and why.
 *
 * On a file that cuFile serves, reads and writes of device memory of at least
 * KVIK_SETTING_GDS_THRESHOLD bytes go through cuFileRead/cuFileWrite; the bytes that reach the
 * file or the buffer are the same as in POSIX mode. Host memory, smaller requests and appends
 * (see kvik_file_open) always use POSIX IO.
 *
 * cuFile (libcufile.so.0) is loaded, and its driver opened, on the first call that needs it,
 * never at build or load time. The driver is closed at exit, after the cuFile calls still running
 * have returned: calls made after that fail with the code of CU_FILE_DRIVER_CLOSING. In a child
 * process after fork() the driver opens again on first need; files opened in the parent use
 * POSIX IO there.
 */

/* Which path serves a file's device memory. */
typedef enum kvik_backend { KVIK_BACKEND_POSIX = 0, KVIK_BACKEND_CUFILE = 1 } kvik_backend;

/* Which path serves the file's device memory, and why, in `why` (cut to `len` bytes with the
 * NUL; may be NULL): e.g. "compat mode is ON: POSIX IO only", "cuFile: GPUDirect Storage through
 * nvidia-fs 2.26", or, under AUTO, why cuFile cannot serve the file ("... /run/udev is not
 * readable ..."). Under AUTO the first call may make the decision, and so load cuFile.
 * Returns: a kvik_backend. Errors: -EINVAL (NULL file); -EBADF (closed). Threads: safe. */
KVIK_API int kvik_file_backend(const kvik_file *file, char *why, size_t len);

/* Raw IO: one transfer between the file and device memory at `dev_base + dev_offset`, on the
 * calling thread, without the thread pool (KvikIO's raw_read/raw_write). `dev_base` should be the
 * start of an allocation (or of a buffer registered with kvik_cufile_buffer_register). Through
 * one cuFileRead/cuFileWrite call on a file that cuFile serves, else, and for appends, through the
 * bounce buffers. A `size` of 0 returns 0 without looking at `dev_base`, which may then be NULL
 * (an empty array).
 * Returns: the bytes transferred (a read is short only at end of file). Errors: -EINVAL (NULL file,
 * negative offset, NULL `dev_base` with `size` > 0, memory that is not device memory: managed
 * memory neither); -EBADF (closed, or not open for reading (writing)); KVIK_ECONFIG;
 * KVIK_ECUDA_UNAVAILABLE; a CUDA code; through cuFile, a cuFile code or an errno cuFile reports;
 * else those of reads and writes (above). Threads: safe. */
KVIK_API ssize_t kvik_file_raw_read(kvik_file *file, void *dev_base, size_t size,
                                    int64_t file_offset, int64_t dev_offset);
KVIK_API ssize_t kvik_file_raw_write(kvik_file *file, const void *dev_base, size_t size,
                                     int64_t file_offset, int64_t dev_offset);

/* ------------------------------------------------------------------------------------------ */
/* Stream-ordered IO                                                                          */
/* ------------------------------------------------------------------------------------------ */

/*
 * Read `size` bytes at `file_offset` into `buf` (host or device memory) in the order of CUDA
 * stream `stream` (a CUstream or cudaStream_t; NULL is the default stream): the read starts when
 * the work queued on the stream before it is done, and work queued after it starts only when the
 * read is done. The call queues the request and returns without waiting for either. Where the
 * driver has no stream memory operations (cuStreamWaitValue32, CUDA 11.7 and later), the call
 * instead synchronises the stream and reads, and returns a future that is done already, as
 * KvikIO does. The stream never waits for a thread that makes CUDA calls, and kvik's host
 * functions never wait, so the stream's other users may free memory (cuMemFree), load modules
 * and synchronise while the read is queued. How: docs/design.md#stream-ordered-io.
 *
 * The future completes before the stream moves past the read: once the stream is synchronised,
 * kvik_future_done() is 1 and kvik_future_wait() returns at once. Bytes of `buf` past the end of
 * the file are left as they were, except where the file shrank between the call and the stream
 * reaching the read: those become zero. A failed read completes the future with its error; the
 * stream still moves on, so check the future before using the data, whose bytes in the range are
 * then unspecified.
 *
 * Returns: 0, with a new future in *future; its result is the bytes read (fewer than `size` only at
 * end of file). Errors: those of kvik_file_pread(); KVIK_ECUDA_UNAVAILABLE (no driver); a CUDA
 * code; on a file that cuFile serves, a cuFile code. Then nothing that touches the file runs; but
 * should a CUDA call fail after part of the request was queued, the stream still passes that part,
 * which may copy unspecified bytes into the range of a device `buf`. Threads: safe. Lifetime: the
 * file and `buf` must stay valid until the future is done; freeing the future before the stream
 * reached the read waits for the stream.
 */
KVIK_API int kvik_file_read_async(kvik_file *file, void *buf, size_t size, int64_t file_offset,
                                  void *stream, kvik_future **future);

/* Write like kvik_file_write() in the order of `stream`; see kvik_file_read_async(). On an append
 * handle the call synchronises the stream and writes before it returns (an append waits for the
 * file's other appends, and no stream may wait for that).
 * Returns: 0, with a new future in *future; its result is `size`. Errors: those of
 * kvik_file_read_async(). Threads: safe. Lifetime: as kvik_file_read_async(). */
KVIK_API int kvik_file_write_async(kvik_file *file, const void *buf, size_t size,
                                   int64_t file_offset, void *stream, kvik_future **future);

/* ------------------------------------------------------------------------------------------ */
/* Mapped files                                                                               */
/* ------------------------------------------------------------------------------------------ */

/*
 * A read-only memory mapping of a file (mmap(2), MAP_SHARED), read into host or device memory
 * by copying from the mapping: the KvikIO MmapHandle. Useful when the same file is read many
 * times in small pieces, as the page cache then serves it without a system call per read.
 */
typedef struct kvik_mmap kvik_mmap;

/* Map `map_size` bytes of `path` from `map_offset` (map_size 0: up to the end of the file).
 * `flags` must be "r". An empty file opens with nothing mapped.
 * Returns: 0, with a new handle in *map (NULL there on failure). Errors: -EINVAL (NULL argument,
 * flags other than "r", a range outside the file); -EISDIR, -ESPIPE (as kvik_file_open); an errno
 * of open(2), fstat(2) or mmap(2); -ENOMEM; KVIK_ECONFIG. Threads: safe. Lifetime: the caller owns
 * the handle and frees it with kvik_mmap_free(); `path` is copied. The file must not shrink while
 * mapped: touching a page past its new end raises SIGBUS, a rule of mmap. */
KVIK_API int kvik_mmap_open(const char *path, const char *flags, size_t map_size,
                            int64_t map_offset, kvik_mmap **map);

/* Unmap and close, first waiting for reads in flight. The handle stays valid, and reads fail with
 * -EBADF, until kvik_mmap_free().
 * Returns: 0. Errors: -EINVAL (NULL); -EBADF (closed already). Threads: safe. */
KVIK_API int kvik_mmap_close(kvik_mmap *map);

/* Close if open, then free. NULL is ignored.
 * Returns: nothing. Errors: none. Threads: no other thread may use the handle during or after this
 * call. */
KVIK_API void kvik_mmap_free(kvik_mmap *map);

/* Whether kvik_mmap_close() has been called.
 * Returns: 1 if so (or for NULL), else 0. Errors: none. Threads: safe. */
KVIK_API int kvik_mmap_closed(const kvik_mmap *map);

/* The file's size when it was opened, the mapped size and the mapped offset; after the close too.
 * Returns: the value; for NULL, -EINVAL from kvik_mmap_file_size() and 0 from the others. Errors:
 * -EINVAL (NULL; kvik_mmap_file_size() only). Threads: safe. */
KVIK_API int64_t kvik_mmap_file_size(const kvik_mmap *map);
KVIK_API size_t kvik_mmap_map_size(const kvik_mmap *map);
KVIK_API int64_t kvik_mmap_map_offset(const kvik_mmap *map);

/* Copy `size` bytes at file offset `offset` into `buf` (host or device memory), in parallel like
 * kvik_file_read(). The range must lie inside the mapped range: reads never stop short.
 * Returns: `size`. Errors: -EINVAL (NULL handle, a range outside the mapped range); those of reads
 * and writes (above) other than the file's own. Threads: safe. */
KVIK_API ssize_t kvik_mmap_read(kvik_mmap *map, void *buf, size_t size, int64_t offset);

/* Start kvik_mmap_read() without waiting; see kvik_file_pread().
 * Returns: 0, with a new future in *future; its result is `size`. Errors: those of kvik_mmap_read()
 * found before the copy starts. Threads: safe. Lifetime: `buf` until the future is done (see
 * futures). */
KVIK_API int kvik_mmap_pread(kvik_mmap *map, void *buf, size_t size, int64_t offset,
                             size_t task_size, kvik_future **future);

/* ------------------------------------------------------------------------------------------ */
/* Remote files                                                                               */
/* ------------------------------------------------------------------------------------------ */

/*
 * A remote object, read over HTTP(S) with range requests through libcurl: a web server, S3
 * (signed, public or presigned) or WebHDFS: KvikIO's RemoteHandle. Reads work as file reads do:
 * into host or device memory, split into tasks of the task size that run in parallel on the
 * thread pool, each one range request. At most KVIK_SETTING_REMOTE_CONNECTIONS requests are in
 * flight at once (and at most KVIK_SETTING_REMOTE_IO_MAX_CONCURRENT_REQUESTS, where that is not
 * 0), and each takes a pool thread: a high-latency store needs both settings raised.
 *
 * Failures: a request answered with a status in KVIK_SETTING_HTTP_STATUS_CODES, a connection
 * refused, dropped or timed out, or a body cut short is tried again after a pause that doubles
 * each time, as KvikIO's (0.5 s, 1 s, 2 s, then 4 s each), up to KVIK_SETTING_HTTP_MAX_ATTEMPTS
 * attempts in all, each limited to KVIK_SETTING_HTTP_TIMEOUT seconds; the library prints nothing,
 * a retry hook (kvik_remote_set_retry_hook) hears of each. Then, and for any other failure, the
 * read fails with a code that says what happened:
 *   KVIK_EHTTP_BASE - status   an HTTP error status (403, 404, ...; KVIK_IS_HTTP_ERROR)
 *   -ETIMEDOUT                 an attempt took longer than KVIK_SETTING_HTTP_TIMEOUT
 *   -ECONNREFUSED, -ECONNRESET the server refused the connection, or dropped it mid-response
 *   KVIK_EREMOTE_SHORT         the response body ended before the requested range did
 *   KVIK_EREMOTE_LONG          the response body was longer than the requested range
 *   KVIK_ERANGE_IGNORED        the server answered a range request with the whole object (200)
 *                              where the range was not all of it. A 200 whose body is exactly
 *                              the range is taken, so a request for bytes 0 to the size (a read
 *                              of the whole object in one task) takes the whole object.
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
 * They carry KvikIO's words where code written for it looks for them: an HTTP error status adds
 * "(the requested URL returned error: 404)", and a request that used up its attempts ends with
 * "(KvikIO: HTTP request reached maximum number of attempts (3). Reason: Got HTTP code 503.)"
 * ("Reason: Operation timed out." after timeouts, else the code's kvik_strerror()).
 *
 * TLS certificates are verified, against libcurl's CA store or the one named by CURL_CA_BUNDLE
 * or SSL_CERT_FILE (a file) and SSL_CERT_DIR (a directory), read when a remote file opens.
 *
 * libcurl 7.85 or newer is loaded at run time, never linked, by the first remote call of the
 * process (kvik_remote_open, kvik_remote_supported): a process that reads no remote file never
 * maps it. kvik loads it once per process from:
 *  1. the path in KVIK_SETTING_CURL_LIBRARY (environment KVIK_CURL_LIBRARY), where set: only that
 *     file, the soname is not tried then;
 *  2. else the soname libcurl.so.4, which the dynamic loader looks for in LD_LIBRARY_PATH, its
 *     cache (ldconfig) and the default directories.
 * Where that fails (no such file, a function missing, a version before 7.85, curl_global_init
 * failing), every remote call of the process fails with KVIK_ENOREMOTE, its message naming the
 * file and the loader's reason ("libcurl unavailable: libcurl.so.4: cannot open shared object
 * file: No such file or directory"); it is not tried again.
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

/* Set every option to its default: struct_size, KVIK_REMOTE_AUTO, size -1, no strings. NULL is
 * ignored.
 * Returns: nothing. Errors: none. Threads: safe. */
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
 * Returns: 0, with a new handle in *remote (NULL there on failure). Errors: -EINVAL (NULL `url` or
 * `remote`; options with a struct_size below sizeof(kvik_remote_options), an unknown kind or a size
 * below -1; a URL that is none of the above or names no host; an s3:// URL opened as neither S3
 * kind, without a bucket and key, or with a bucket name of other than letters, digits, '.', '-',
 * '_'; S3 without credentials); KVIK_ENOREMOTE (libcurl could not be loaded); -ENOMEM;
 * KVIK_ECONFIG; for the size request, the codes above, and KVIK_EREMOTE for an answer without the
 * size. Threads: safe. Lifetime: the caller owns the handle and frees it with kvik_remote_free().
 * The URL, the options' strings and the environment's credentials are copied at the call.
 */
KVIK_API int kvik_remote_open(const char *url, const kvik_remote_options *options,
                              kvik_remote **remote);

/* Mark the handle closed, first waiting for reads in flight. The handle stays valid, and reads
 * fail with -EBADF, until kvik_remote_free().
 * Returns: 0. Errors: -EINVAL (NULL); -EBADF (closed already). Threads: safe. */
KVIK_API int kvik_remote_close(kvik_remote *remote);

/* Close if open, then free. NULL is ignored.
 * Returns: nothing. Errors: none. Threads: no other thread may use the handle during or after this
 * call. */
KVIK_API void kvik_remote_free(kvik_remote *remote);

/* The object's size in bytes, learnt at open.
 * Returns: the size. Errors: -EINVAL (NULL). Threads: safe. */
KVIK_API int64_t kvik_remote_size(const kvik_remote *remote);

/* The kind the handle was opened as, KVIK_REMOTE_AUTO resolved.
 * Returns: a kvik_remote_kind. Errors: -EINVAL (NULL). Threads: safe. */
KVIK_API int kvik_remote_kind_of(const kvik_remote *remote);

/* The URL requests go to, as messages name it: without user name, password or query string.
 * Returns: the URL, or NULL for NULL. Errors: none. Threads: safe. Lifetime: the handle owns it;
 * valid until kvik_remote_free(). */
KVIK_API const char *kvik_remote_url(const kvik_remote *remote);

/* Read `size` bytes at `offset` of the object into `buf` (host or device memory), in parallel,
 * and wait. The arguments are checked as kvik_file_read() checks them, past the end of the
 * object too: a NULL buf with size > 0, or offset + size beyond INT64_MAX, is -EINVAL there as
 * well.
 * Returns: the bytes read, fewer than `size` only where the object ends first. Errors: those of
 * reads and writes (above); the codes of remote objects (above). Threads: safe. */
KVIK_API ssize_t kvik_remote_read(kvik_remote *remote, void *buf, size_t size, int64_t offset);

/* Start kvik_remote_read() without waiting; see kvik_file_pread().
 * Returns: 0, with a new future in *future; its result is kvik_remote_read()'s. Errors: those of
 * kvik_remote_read() found before IO starts. Threads: safe. Lifetime: `buf` until the future is
 * done (see futures). */
KVIK_API int kvik_remote_pread(kvik_remote *remote, void *buf, size_t size, int64_t offset,
                               size_t task_size, kvik_future **future);

/* Whether remote files work in this process: loads libcurl if no call has yet (see above), and
 * puts in `detail` (cut to `len` bytes with the NUL; may be NULL) libcurl's version
 * ("libcurl/7.88.1 OpenSSL/3.0.17 ...") or why not ("libcurl unavailable: ...").
 * Returns: 1 or 0. Errors: none. Threads: safe. */
KVIK_API int kvik_remote_supported(char *detail, size_t len);

/* What a retry hook is told: an attempt of a remote request failed, and the request is tried
 * again after a pause. */
typedef struct kvik_retry_info {
  unsigned attempt;      /* the attempt that failed, from 1 */
  unsigned max_attempts; /* KVIK_SETTING_HTTP_MAX_ATTEMPTS as the request began */
  int cause;             /* the failure's code, from the list above (-ETIMEDOUT, ...) */
  int status;            /* the HTTP status where cause is one (KVIK_IS_HTTP_ERROR), else 0 */
  int64_t delay_ms;      /* the pause before the next attempt, in milliseconds */
  const char *url;       /* the URL as messages name it; valid during the call only */
} kvik_retry_info;

typedef void kvik_retry_hook(const kvik_retry_info *info, void *arg);

/* Have `hook` called with `arg` each time a remote request of this process is tried again, before
 * the pause; NULL removes the hook. It runs on the thread that makes the request (a pool thread),
 * possibly on several at once, and must not call kvik_remote_set_retry_hook(); a call under way
 * may still finish after the hook is replaced. kvik itself prints nothing: the Python package's
 * hook prints KvikIO's notice ("KvikIO: Got HTTP code 503. Retrying after 500ms (attempt 1 of
 * 2).") on stderr. Without libcurl, the hook is kept and never called.
 * Returns: 0. Errors: none. Threads: safe. */
KVIK_API int kvik_remote_set_retry_hook(kvik_retry_hook *hook, void *arg);

/* ------------------------------------------------------------------------------------------ */
/* Batch IO                                                                                   */
/* ------------------------------------------------------------------------------------------ */

/*
 * A batch submits many independent reads and writes of files at once and collects their
 * completions, as cuFile's batch API does, everywhere: device memory on files that cuFile serves
 * goes to cuFile's batch; operations that KVIK_SETTING_IO_URING gives to the kernel go to the
 * batch's own io_uring; all others run on the thread pool as kvik_file_pread()/pwrite() start
 * them (those below KVIK_SETTING_GDS_THRESHOLD within kvik_batch_submit()). A read below
 * KVIK_SETTING_GDS_THRESHOLD, unless KVIK_SETTING_IO_URING is ON, is first made within
 * kvik_batch_submit() as far as the page cache holds its bytes (preadv2(2) with RWF_NOWAIT),
 * before its memory is classified: such a read may be complete when kvik_batch_submit() returns,
 * and the rest of one read in part goes where it would have gone. After 64 such reads in a row
 * that the page cache held whole, a batch trusts it: it reads them with pread(2) instead, asking
 * with RWF_NOWAIT one in 16, until one of those is refused. While it trusts the page cache, a
 * read of pages it does not hold waits for storage within kvik_batch_submit(), as every read
 * below the threshold does where the pool is the backend. Device memory fails that try
 * before a byte moves and then goes where device memory goes; managed memory is read by the CPU
 * there. Completions of every kind come back through kvik_batch_wait(), with the results
 * kvik_file_pread()/pwrite() would give. Device memory that io_uring serves is staged through
 * pinned memory: a write's bytes are copied from the device within kvik_batch_submit(), a read's
 * to the device within the kvik_batch_wait() that collects it; a failed copy fails that operation
 * alone, with its CUDA code. How operations are routed: docs/design.md#batches-and-io_uring.
 *
 * Threads: a batch is used by one thread at a time; different batches are independent. Lifetime:
 * the buffers and files of submitted operations must stay valid, and the files open, until their
 * completion has been collected, the batch was canceled, or it was freed.
 * kvik_batch_submit(), kvik_batch_wait() and kvik_batch_cancel() that succeed leave
 * kvik_last_error() as it was, whatever the operations' results.
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

/* A batch for up to `max_ops` operations in flight at once (1 to 65536).
 * Returns: 0, with a new batch in *batch (NULL there on failure). Errors: -EINVAL (NULL `batch`,
 * `max_ops` out of range); -ENOMEM; KVIK_ECONFIG. Threads: safe. Lifetime: the caller owns the
 * batch and frees it with kvik_batch_free(). */
KVIK_API int kvik_batch_create(unsigned max_ops, kvik_batch **batch);

/* Submit `count` operations. All are checked first, as kvik_file_pread()/pwrite() check theirs:
 * on an error none was submitted, and the message names the operation's index. An operation is
 * in flight from its submission until its completion is collected, also one that completed
 * within this call (its event waits in the batch, in the order of completion, as others do). An
 * operation that fails once submitted (a staging copy, say) reports its error in its event.
 * Returns: 0. Errors: -EINVAL (NULL `batch`, NULL `ops` with `count` > 0; an operation with a NULL
 * file, an unknown opcode, a NULL `buf` with `size` > 0, a negative offset, or offset + size above
 * INT64_MAX); -EBADF (an operation's file is closed, or not open for its opcode); -EAGAIN (more
 * than max_ops would be in flight); -ENOMEM; KVIK_ECUDA_UNAVAILABLE, a CUDA code (finding a
 * buffer's kind or allocation); where cuFile takes operations, a cuFile code (cuFile refused them;
 * that of CU_FILE_DRIVER_CLOSING after exit began) or KVIK_ECANCELED_BY_FORK (in a child process,
 * for a batch whose cuFile part is the parent's). On each, none was submitted, although a read
 * made within the call from the page cache may have put its bytes in its buffer. Threads: the
 * batch's one thread at a time. Lifetime: `ops` is read during the call only; buffers and files as
 * said for batches. */
KVIK_API int kvik_batch_submit(kvik_batch *batch, const kvik_batch_op *ops, unsigned count);

/* Wait until at least `min_events` operations completed (0: do not wait; more than are in flight:
 * all of them) or `timeout_ns` passed (negative: no limit), then store up to `max_events`
 * completions in `events`, each operation's once.
 * Returns: how many were stored (fewer than `min_events` after a timeout). Errors: -EINVAL (NULL
 * `batch`, NULL `events` with `max_events` > 0, `min_events` above `max_events`); a cuFile code
 * (asking cuFile for completions failed) or an errno of io_uring_enter(2): none is lost, a later
 * wait collects them. Threads: the batch's one thread at a time. Lifetime: `events` is written
 * during the call only. */
KVIK_API int kvik_batch_wait(kvik_batch *batch, unsigned min_events, kvik_batch_event *events,
                             unsigned max_events, int64_t timeout_ns);

/* Cancel what has not completed, and wait until nothing is in flight. cuFile's operations are
 * canceled with cuFileBatchIOCancel: they report KVIK_BATCH_CANCELED, or their result where they
 * completed first. Operations on the thread pool cannot be stopped (some of their bytes may have
 * moved already): they are waited for and report their own result. io_uring operations the kernel
 * has not started are canceled (Linux 5.19 and later), the others report their own result.
 * Operations that completed within kvik_batch_submit() report their result. The events are
 * collected with kvik_batch_wait() like others.
 * Returns: 0. Errors: -EINVAL (NULL); the code of a failed cuFile call (if cuFile stops answering,
 * its operations report KVIK_BATCH_FAILED with that code), KVIK_ECANCELED_BY_FORK, or that of
 * CU_FILE_DRIVER_CLOSING, as for kvik_batch_submit(). Threads: the batch's one thread at a time. */
KVIK_API int kvik_batch_cancel(kvik_batch *batch);

/* Cancel what is in flight, wait for it, and free the batch. NULL is ignored.
 * Returns: nothing. Errors: none. Threads: no other thread may use the batch during or after this
 * call. */
KVIK_API void kvik_batch_free(kvik_batch *batch);

/* Whether io_uring can serve batches in this process (KVIK_SETTING_IO_URING), and in `why` (cut
 * to `len` bytes with the NUL; may be NULL) what was found: "available (Linux 6.18)", or "not
 * available: " and what refused it, with the kernel's release. Found once, by setting up a
 * small ring, and kept.
 * Returns: 1 or 0. Errors: none. Threads: safe. */
KVIK_API int kvik_io_uring_supported(char *why, size_t len);

/* ------------------------------------------------------------------------------------------ */
/* cuFile (kvik_cufile_*)                                                                     */
/* ------------------------------------------------------------------------------------------ */

/*
 * cuFile's own controls. The driver calls load cuFile and open its driver whatever
 * KVIK_SETTING_COMPAT_MODE says; buffer and stream registration follow it. The driver errors,
 * which every call below that opens the driver can return:
 *   KVIK_ECONFIG
 *   KVIK_ECUFILE_UNAVAILABLE  no libcufile.so.0, a cuFile that lacks a function kvik needs, or no
 *                             CUDA driver; the message says which
 *   a cuFile code             cuFileDriverOpen refused; that of CU_FILE_DRIVER_CLOSING once the
 *                             driver was closed at exit
 *   a CUDA code               a CUDA failure inside cuFile
 * A driver that failed to open is not tried again: later calls fail the same way (in a child
 * process after fork() it is tried anew).
 */

/* Load cuFile and open its driver now; it otherwise opens on first need.
 * Returns: 0. Errors: the driver errors (above), with a message saying why. Threads: safe. */
KVIK_API int kvik_cufile_open(void);

/* The loaded cuFile's version, as cuFileGetVersion() gives it.
 * Returns: the version (1150 for 1.15.0). Errors: the driver errors (above); -ENOTSUP (a cuFile
 * without cuFileGetVersion, before 1.9); a cuFile code. Threads: safe. */
KVIK_API int kvik_cufile_version(void);

/* cuFile's driver properties (cuFileDriverGetProperties), sizes in bytes. A parameter struct:
 * set struct_size to sizeof(kvik_cufile_properties) before the call; members the library does
 * not know are left untouched. */
typedef struct kvik_cufile_properties {
  size_t struct_size;
  unsigned nvfs_major_version; /* nvidia-fs kernel driver; 0.0 when it is not loaded */
  unsigned nvfs_minor_version;
  int gds_available;     /* 1 when nvidia-fs is loaded: true GPUDirect transfers */
  int allow_compat_mode; /* cuFile's own POSIX fallback (properties.allow_compat_mode) */
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

/* Fill `props` with the driver's properties, up to props->struct_size bytes.
 * Returns: 0. Errors: -EINVAL (NULL, struct_size not set); the driver errors (above); a cuFile
 * code. Threads: safe. */
KVIK_API int kvik_cufile_get_properties(kvik_cufile_properties *props);

/* Change a driver property: cuFileDriverSetPollMode, cuFileDriverSetMaxDirectIOSize,
 * cuFileDriverSetMaxCacheSize, cuFileDriverSetMaxPinnedMemSize. Sizes in bytes, rounded down to
 * KiB.
 * Returns: 0. Errors: the driver errors (above); a cuFile code (the message names cuFile's
 * complaint, e.g. a value out of range). Threads: safe. */
KVIK_API int kvik_cufile_set_poll_mode(int enable, size_t threshold_size);
KVIK_API int kvik_cufile_set_max_direct_io_size(size_t size);
KVIK_API int kvik_cufile_set_max_cache_size(size_t size);
KVIK_API int kvik_cufile_set_max_pinned_memory(size_t size);

/*
 * cuFile's parameters (cuFile 1.14 and later: cuFileGetParameter*, cuFileSetParameter*), by name:
 * the name of cuFile's CUFILE_PARAM_ constant without that prefix, in lower case
 * ("properties_max_direct_io_size_kb", "properties_allow_compat_mode", "logging_level", ...).
 * Values are text: a decimal number, "true"/"false", or a string. Parameters can only be set
 * before the driver opens (cuFile's rule), so set them before the first IO on a cuFile file.
 * These calls load cuFile without opening its driver.
 */

/* The name of parameter `index`, for index = 0, 1, ...
 * Returns: the name, or NULL past the last. Errors: none. Threads: safe.
 * Lifetime: static storage. */
KVIK_API const char *kvik_cufile_parameter_name(unsigned index);

/* Write parameter `name`'s value as text into `value`, cut to `len` bytes with the NUL.
 * Returns: 0. Errors: -EINVAL (NULL `value`, `len` 0, NULL or unknown name); -ENOTSUP (cuFile
 * before 1.14); KVIK_ECUFILE_UNAVAILABLE (no libcufile.so.0, or one that lacks a function kvik
 * needs); KVIK_ECONFIG; a cuFile code. Threads: safe. */
KVIK_API int kvik_cufile_parameter_get(const char *name, char *value, size_t len);

/* Set parameter `name` from text.
 * Returns: 0. Errors: -EINVAL (unknown name; NULL `value`; a value that is not a decimal number, or
 * not true/false, for such a parameter); the others of kvik_cufile_parameter_get(); a cuFile code
 * (cuFile refused it). Threads: safe. */
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

/* Start collecting statistics at `level` (1 to 3; cuFileSetStatsLevel, cuFileStatsStart), stop,
 * zero them, and read them into `stats` (up to stats->struct_size bytes).
 * Returns: 0. Errors: -EINVAL (`level` outside 1 to 3; NULL `stats`, struct_size not set); -ENOTSUP
 * (cuFile before 1.15); the driver errors (above); a cuFile code. Threads: safe. */
KVIK_API int kvik_cufile_stats_start(int level);
KVIK_API int kvik_cufile_stats_stop(void);
KVIK_API int kvik_cufile_stats_reset(void);
KVIK_API int kvik_cufile_stats_get(kvik_cufile_stats *stats);

/* Register with cuFile the whole device allocation that `ptr` points into (cuFileBufRegister), so
 * that GDS transfers into it skip cuFile's own bounce buffers. `flags` is passed to cuFile (0).
 * Where cuFile is not in use (compat mode ON, or AUTO without cuFile) the registration is only
 * recorded, so the same code runs everywhere.
 * Returns: 0. Errors: -EINVAL (NULL, or not device memory); the code of
 * CU_FILE_MEMORY_ALREADY_REGISTERED (the allocation is registered already); -ENOMEM; KVIK_ECONFIG;
 * KVIK_ECUDA_UNAVAILABLE; a CUDA code; with compat mode OFF, the driver errors (above); a cuFile
 * code. Threads: safe. Lifetime: pair with kvik_cufile_buffer_deregister(), before the memory is
 * freed. */
KVIK_API int kvik_cufile_buffer_register(const void *ptr, int flags);

/* Undo kvik_cufile_buffer_register() for the allocation `ptr` points into.
 * Returns: 0. Errors: -EINVAL (NULL, or not device memory); the code of
 * CU_FILE_MEMORY_NOT_REGISTERED (not registered); KVIK_ECONFIG; KVIK_ECUDA_UNAVAILABLE; a CUDA
 * code; a cuFile code. Threads: safe. */
KVIK_API int kvik_cufile_buffer_deregister(const void *ptr);

/* Register CUDA stream `stream` with cuFile (cuFileStreamRegister; `flags` are cuFile's
 * CU_FILE_STREAM_* bits), which makes kvik_file_read_async()/write_async() on files cuFile serves
 * faster; and undo that. Where cuFile is not in use (compat mode ON, or AUTO without cuFile), or
 * has no stream registration, they do nothing.
 * Returns: 0. Errors: KVIK_ECONFIG; with compat mode OFF, the driver errors (above); a cuFile code.
 * Threads: safe. Lifetime: pair with kvik_cufile_stream_deregister(), before the stream is
 * destroyed. */
KVIK_API int kvik_cufile_stream_register(void *stream, unsigned flags);
KVIK_API int kvik_cufile_stream_deregister(void *stream);

/* ------------------------------------------------------------------------------------------ */
/* Page cache                                                                                 */
/* ------------------------------------------------------------------------------------------ */

/* How many of the file's pages are in the page cache (cachestat(2), or mincore(2) on kernels
 * before 6.5 and where cachestat counts none, as on overlayfs), into *resident_pages and
 * *total_pages (either may be NULL).
 * Returns: 0. Errors: -EINVAL (NULL path); -EISDIR, -ESPIPE (as kvik_file_open); an errno of
 * open(2), fstat(2), mmap(2) or mincore(2). Threads: safe. */
KVIK_API int kvik_page_cache_info(const char *path, size_t *resident_pages, size_t *total_pages);

/* kvik_page_cache_info for the bytes [offset, offset + length) of the file (length 0: to the end),
 * in whole pages, those the range only touches included (kvikio's get_page_cache_info(file,
 * offset, length)): a range that starts at or past the end of the file counts none (0 and 0), one
 * that runs past it ends there.
 * Returns: 0. Errors: -EINVAL (NULL path, negative offset or length); as kvik_page_cache_info.
 * Threads: safe. */
KVIK_API int kvik_page_cache_info_range(const char *path, int64_t offset, int64_t length,
                                        size_t *resident_pages, size_t *total_pages);

/* Write back the file's dirty pages and ask the kernel to drop its cached pages (fdatasync(2),
 * then posix_fadvise(POSIX_FADV_DONTNEED)). Pages in use elsewhere (mapped by other processes)
 * may stay.
 * Returns: 0. Errors: -EINVAL (NULL path); -EISDIR, -ESPIPE (as kvik_file_open); an errno of
 * open(2), fdatasync(2) or posix_fadvise(2). Threads: safe. */
KVIK_API int kvik_page_cache_drop(const char *path);

/* ------------------------------------------------------------------------------------------ */
/* I/O statistics                                                                             */
/* ------------------------------------------------------------------------------------------ */

/*
 * A monitor counts the IO of the whole process, every thread's, from its creation until it is
 * stopped or freed (KvikIO's SummaryMonitor). While no monitor exists nothing is counted, and an
 * IO call pays one atomic load for the check.
 *
 * It counts logical operations: one public call is one operation however many tasks and system
 * calls it takes, counted when it completes (a future's request when it is done), with the bytes
 * it asked for, the bytes it moved, its duration and whether it failed. The calls counted:
 * kvik_file_read/write/pread/pwrite, kvik_file_raw_read/raw_write, kvik_mmap_read/pread,
 * kvik_remote_read/pread, and the read of kvik_file_read_to_device once its device buffer is
 * allocated. A call of these refused at once (a closed handle, a file not open for the direction,
 * a bad argument) counts as a failed operation that moved nothing; a request that fails part way
 * counts the bytes it did move. Not counted: the
 * stream-ordered calls (kvik_file_read_async/write_async) and batches. An operation that started
 * before a monitor was created is not that monitor's, even where it completes later.
 *
 * Monitors are independent: any number may exist, and resetting or stopping one leaves the others
 * as they are. Times are nanoseconds on CLOCK_MONOTONIC; each monitor takes an anchor when it is
 * created (CLOCK_REALTIME and CLOCK_MONOTONIC read together) that maps them to Unix time:
 * unix_ns = anchor_unix_ns + (t - anchor_mono_ns).
 */
typedef struct kvik_monitor kvik_monitor;

/* The paths an operation can take, with kvik_io_backend_name() KvikIO's names for them. */
typedef enum kvik_io_backend {
  KVIK_IO_POSIX = 0,       /* "Posix": POSIX IO on a file, with bounce buffers for device memory */
  KVIK_IO_GDS = 1,         /* "Gds": cuFile carried the request (or its aligned body) */
  KVIK_IO_MMAP = 2,        /* "Mmap": a mapped file */
  KVIK_IO_REMOTE_HTTP = 3, /* "RemoteHttp": a remote object over HTTP(S), S3 included */
  KVIK_IO_REMOTE_HDFS = 4, /* "RemoteHdfs": a remote object over WebHDFS */
  KVIK_IO_BACKENDS = 5     /* how many there are */
} kvik_io_backend;

/* What one backend carried. */
typedef struct kvik_backend_totals {
  uint64_t num_ops;
  uint64_t bytes_transferred;
  uint64_t total_duration_ns; /* the operations' durations added up */
  uint64_t num_errors;
} kvik_backend_totals;

/* A reading of a monitor: a parameter struct like kvik_cufile_properties (set struct_size). */
typedef struct kvik_summary {
  size_t struct_size;
  uint64_t span;    /* the span read: new at each kvik_monitor_create and kvik_monitor_reset, never
                   * the same for two spans of the process; never 0 */
  int64_t start_ns; /* CLOCK_MONOTONIC: when the span started */
  int64_t end_ns;   /* when it was read, or when the monitor was stopped */
  int64_t anchor_unix_ns, anchor_mono_ns;  /* the monitor's anchor (above) */
  uint64_t num_ops, num_reads, num_writes; /* num_reads + num_writes == num_ops */
  uint64_t bytes_requested;
  uint64_t bytes_transferred, bytes_read, bytes_written; /* read + written == transferred */
  uint64_t num_errors;
  uint64_t busy_ns; /* the union of the operations' spans within the span: at most end - start */
  uint64_t total_duration_ns; /* the durations added up: overlapping operations each count */
  kvik_backend_totals by_backend[KVIK_IO_BACKENDS]; /* indexed by kvik_io_backend; they add up
                                                     * to the totals above */
} kvik_summary;

/* KvikIO's name of `backend` ("Posix", "Gds", "Mmap", "RemoteHttp", "RemoteHdfs").
 * Returns: the name, or NULL for a value that is no backend. Errors: none. Threads: safe.
 * Lifetime: static storage. */
KVIK_API const char *kvik_io_backend_name(int backend);

/* Create a monitor, which counts from now on, and store it in *monitor.
 * Returns: 0. Errors: -EINVAL (NULL `monitor`); -ENOMEM. Threads: safe. Lifetime: free it with
 * kvik_monitor_free(). */
KVIK_API int kvik_monitor_create(kvik_monitor **monitor);

/* Stop the monitor and free it. NULL is ignored.
 * Returns: nothing. Errors: none. Threads: no other thread may use the monitor during or after
 * this call; IO in flight on other threads is fine. */
KVIK_API void kvik_monitor_free(kvik_monitor *monitor);

/* Read the totals of the monitor's span into `summary` (up to summary->struct_size bytes). A
 * reading never changes the monitor, and two readings of one span never go backwards. An
 * operation in flight counts in busy_ns for the time it has run, and in the rest once it is done.
 * Returns: 0. Errors: -EINVAL (NULL, struct_size not set). Threads: safe, with IO in flight. */
KVIK_API int kvik_monitor_read(kvik_monitor *monitor, kvik_summary *summary);

/* Zero the totals and start a new span now, with a new `span` number, as if the monitor had just
 * been created (the anchor stays). On a stopped monitor the new span is empty, and ends where it
 * starts.
 * Returns: 0. Errors: -EINVAL (NULL). Threads: safe. */
KVIK_API int kvik_monitor_reset(kvik_monitor *monitor);

/* Stop counting, for good: the span ends now, and every later reading returns the same totals
 * and end. Stopping again does nothing.
 * Returns: 0. Errors: -EINVAL (NULL). Threads: safe. */
KVIK_API int kvik_monitor_stop(kvik_monitor *monitor);

/* ------------------------------------------------------------------------------------------ */
/* Compression (nvCOMP)                                                                       */
/* ------------------------------------------------------------------------------------------ */

/*
 * Batched compression and decompression of chunks in device memory, by NVIDIA's nvCOMP 6, which
 * kvik loads at run time on first need and never links: kvik runs without it, and these calls
 * then fail with KVIK_ENVCOMP_UNAVAILABLE. kvik loads it, once per process, from:
 *  1. the path in KVIK_SETTING_NVCOMP_LIBRARY (environment KVIK_NVCOMP_LIBRARY), where set: only
 *     that file, the soname is not tried then;
 *  2. else the soname libnvcomp.so.6, which finds a system install, or the library of the
 *     nvidia-libnvcomp wheel that the Python package loaded into the process beforehand (the
 *     package may instead set the setting to the wheel's lib64/libnvcomp.so.6).
 * nvCOMP 5 and earlier are never loaded: their C API differs. A library that lacks the functions
 * of a format disables that format only (kvik_codec_supported); one without nvcompGetProperties,
 * or whose version it gives is not 6.x, is refused whole, for good. A failed dlopen() is tried
 * again at the next need (a file may appear); a library that loaded stays for the life of the
 * process.
 *
 * A batch is `num_chunks` independent chunks, each its own compressed stream in the codec's raw
 * format (no container: LZ4 raw blocks, Snappy raw, raw Deflate, gzip members, zstd frames ...).
 * The arrays `src`, `src_sizes`, `dst`, `dst_capacities`, `sizes` and `statuses` are host memory,
 * num_chunks long; the pointers in `src` and `dst` point to device memory of the stream's context
 * (the calling thread's current context, or device 0's primary one, for the default streams),
 * and chunks must not overlap each other's output. kvik copies the host arrays before the call
 * returns, and allocates the device memory nvCOMP needs (pointer and size arrays, temporary
 * space), in stream order from a memory pool of kvik's own on the device, which keeps up to
 * KVIK_SETTING_NVCOMP_MEMORY bytes of it mapped between calls (from the device's default pool
 * where the driver has no pools of one's own; cuMemAlloc before CUDA 11.2).
 *
 * Results: `sizes[i]` gets chunk i's decompressed (compressed) size and `statuses[i]` 0 or the
 * chunk's error: an nvCOMP code (KVIK_IS_NVCOMP_ERROR: nvcompErrorCannotDecompress for corrupt
 * or truncated input, nvcompErrorOutputBufferTooSmall where the output does not fit its
 * capacity, ...). A chunk whose status is not 0 gets size 0 and undefined output. kvik always
 * passes nvCOMP the statuses to fill, and a chunk reported with a size past its output's capacity
 * fails with nvcompErrorOutputBufferTooSmall. nvCOMP 6 itself validates little: its headers call
 * corrupt input undefined behaviour, and on an H100 its zstd and LZ4 decoders reported corrupt,
 * truncated and too-large chunks as successes (Snappy caught corrupt and truncated ones). kvik
 * checks what it can without a second decoder: the size past the capacity (above, every call),
 * and, where the caller knows what a chunk decodes to (kvik_file_read_decompress), a decoded
 * size other than that one (KVIK_EDECODED_SIZE). Worse, the real nvCOMP's zstd decoder faulted
 * the CUDA context (CUDA_ERROR_ILLEGAL_ADDRESS, which no later GPU work of the process survives)
 * on a truncated chunk. kvik_file_read_decompress, whose chunks pass through host memory, checks
 * each chunk's framing first (zstd frames and blocks, LZ4 sequences, Snappy and gzip sizes) and
 * fails a broken one alone; these calls get device memory and cannot. Decompress here only data
 * whose integrity is known: a checksum of it checked (Zarr's crc32c codec, a container's own), or
 * data this process wrote. -EINVAL names the first chunk that breaks an argument rule, with
 * nothing started.
 *
 * Alignment: nvCOMP requires each input and output pointer of a format to be aligned to a few
 * bytes (kvik_codec_alignment; at most 16 in nvCOMP 6, so the start of any CUDA allocation is).
 *
 * `stream` is a CUstream or cudaStream_t, or NULL, 1 or 2 cast to pointers for CUDA's default,
 * legacy default and per-thread default streams. Threads: every call is safe, from any number
 * of threads at once, on the same stream too (work on one stream runs in the order enqueued).
 */

/* The formats nvCOMP offers. GPU-only formats have no standard CPU implementation: data in them
 * can only be read back with nvCOMP. */
typedef enum kvik_codec {
  KVIK_CODEC_ZSTD = 0, /* zstd frames */
  KVIK_CODEC_LZ4,      /* LZ4 raw blocks (no frame) */
  KVIK_CODEC_SNAPPY,   /* raw Snappy (no framing format) */
  KVIK_CODEC_DEFLATE,  /* raw Deflate (RFC 1951) */
  KVIK_CODEC_GZIP,     /* gzip (RFC 1952); nvCOMP decompresses it, compressing it needs a GPU of
                        * compute capability 9.0 or later and may be refused (not supported) */
  KVIK_CODEC_GDEFLATE, /* GPU-only */
  KVIK_CODEC_CASCADED, /* GPU-only */
  KVIK_CODEC_BITCOMP,  /* GPU-only */
  KVIK_CODEC_ANS,      /* GPU-only */
  KVIK_CODEC_COUNT     /* number of codecs; not a codec */
} kvik_codec;

/* The codec's lower-case name: "zstd", "lz4", "snappy", "deflate", "gzip", "gdeflate",
 * "cascaded", "bitcomp", "ans".
 * Returns: the name, or NULL for an unknown codec. Errors: none. Threads: safe. Lifetime: static
 * storage. */
KVIK_API const char *kvik_codec_name(kvik_codec codec);

/* The codec with this name (see kvik_codec_name), case-insensitive.
 * Returns: a kvik_codec. Errors: -EINVAL (NULL or unknown name). Threads: safe. */
KVIK_API int kvik_codec_lookup(const char *name);

/* Whether only nvCOMP reads and writes the codec (GDeflate, Cascaded, Bitcomp, ANS).
 * Returns: 1 or 0. Errors: -EINVAL (unknown codec). Threads: safe. */
KVIK_API int kvik_codec_gpu_only(kvik_codec codec);

/* Whether the calls below can run the codec: nvCOMP loaded (loading it if not tried yet), and it
 * has all of the codec's functions. Needs no GPU.
 * Returns: 1 or 0. Errors: -EINVAL (unknown codec); KVIK_ECONFIG. Threads: safe. */
KVIK_API int kvik_codec_supported(kvik_codec codec);

/* nvCOMP's version, loading it if not tried yet.
 * Returns: the version as nvCOMP numbers it, major * 1000 + minor * 100 + patch (6000 for 6.0.0).
 * Errors: KVIK_ENVCOMP_UNAVAILABLE, with a message saying where kvik looked and why each failed;
 * an nvCOMP code (nvcompGetProperties failed); KVIK_ECONFIG. Threads: safe. */
KVIK_API int kvik_nvcomp_version(void);

/* The file nvCOMP was loaded from, written into `buf` as snprintf() would, cut to `len` bytes.
 * Returns: the path's full length. Errors: those of kvik_nvcomp_version(); -EINVAL (NULL `buf`
 * with `len` > 0). Threads: safe. */
KVIK_API int kvik_nvcomp_path(char *buf, size_t len);

/* The alignment nvCOMP requires of every input and every output pointer of the codec, for
 * compression (`compress` 1) or decompression (0).
 * Returns: 0, with the alignments in bytes in *input and *output. Errors: -EINVAL (unknown codec,
 * NULL pointer); KVIK_ENVCOMP_UNAVAILABLE (no nvCOMP, or it lacks the codec); an nvCOMP code;
 * KVIK_ECONFIG. Threads: safe. */
KVIK_API int kvik_codec_alignment(kvik_codec codec, int compress, size_t *input, size_t *output);

/* The most bytes that compressing a chunk of up to `max_chunk_size` bytes can give: every `dst`
 * buffer of a compression must have at least this capacity for the batch's largest chunk.
 * Returns: 0, with the size in *size. Errors: -EINVAL (unknown codec, NULL `size`);
 * KVIK_ENVCOMP_UNAVAILABLE; an nvCOMP code (nvcompErrorChunkSizeTooLarge: larger than the format
 * allows); KVIK_ECONFIG. Threads: safe. */
KVIK_API int kvik_codec_max_compressed_size(kvik_codec codec, size_t max_chunk_size, size_t *size);

/* Decompress chunk i, `src_sizes[i]` bytes at `src[i]`, into `dst[i]`, which holds
 * `dst_capacities[i]` bytes, for i below `num_chunks`, on `stream`, after the work queued on it
 * before, without waiting. `sizes` (may be NULL) and `statuses` (required) are written once
 * the stream reaches the end of this work (by a host function of the stream, see Results
 * above): they are valid after a cuStreamSynchronize() (kvik_cuda_stream_synchronize), or after
 * an event recorded on the stream after this call completed, or in a host function enqueued
 * later; until then the caller must keep them allocated and not read them. After a return below
 * 0 neither is written, and what the call had enqueued before it failed only frees kvik's own
 * memory. The host arrays are read during the call: `src_sizes` that an earlier call on the
 * stream writes (the sizes of a compression) must be waited for first.
 * Returns: 0 when enqueued. Errors: -EINVAL (unknown codec; NULL `statuses`, `src`, `src_sizes`,
 * `dst` or `dst_capacities` with `num_chunks` > 0; a NULL `src[i]` with a size above 0 or a NULL
 * `dst[i]`; a pointer that breaks the codec's alignment: the message names the chunk);
 * KVIK_ENVCOMP_UNAVAILABLE; KVIK_ECUDA_UNAVAILABLE; -ENOMEM; a CUDA code (allocating, copying,
 * enqueuing); an nvCOMP code (nvCOMP refused the batch: too many chunks, a chunk too large);
 * KVIK_ECONFIG. Where the driver has no stream-ordered allocator (CUDA before 11.2), the call
 * waits for the stream before it returns, so that it can free the device memory it used.
 * Threads: safe. Lifetime: the device buffers must stay allocated, and the inputs unchanged,
 * until the stream passes this work. */
KVIK_API int kvik_decompress_async(kvik_codec codec, size_t num_chunks, const void *const *src,
                                   const size_t *src_sizes, void *const *dst,
                                   const size_t *dst_capacities, size_t *sizes, int *statuses,
                                   void *stream);

/* Decompress like kvik_decompress_async() on a stream of kvik's own in the calling thread's
 * current context (device 0's primary one where none is current), and wait. `sizes` and
 * `statuses` may be NULL.
 * Returns: 0 when every chunk decompressed. Errors: those of kvik_decompress_async(); the code of
 * the first chunk that failed (statuses says all), with a message naming it. Device memory
 * written on other streams must be ready when the call starts. Threads: safe. */
KVIK_API int kvik_decompress(kvik_codec codec, size_t num_chunks, const void *const *src,
                             const size_t *src_sizes, void *const *dst,
                             const size_t *dst_capacities, size_t *sizes, int *statuses);

/* Compress chunk i, `src_sizes[i]` bytes at `src[i]`, into `dst[i]`, which holds
 * `dst_capacities[i]` bytes, on `stream`, without waiting; results and their validity as for
 * kvik_decompress_async(), `sizes[i]` being the compressed size. Every capacity must be at least
 * kvik_codec_max_compressed_size() of the batch's largest chunk (-EINVAL naming the chunk
 * otherwise): nvCOMP does not check it.
 * Returns: 0 when enqueued. Errors: those of kvik_decompress_async(). Threads: safe. Lifetime: as
 * for kvik_decompress_async(). */
KVIK_API int kvik_compress_async(kvik_codec codec, size_t num_chunks, const void *const *src,
                                 const size_t *src_sizes, void *const *dst,
                                 const size_t *dst_capacities, size_t *sizes, int *statuses,
                                 void *stream);

/* Compress like kvik_compress_async() and wait; see kvik_decompress().
 * Returns: 0 when every chunk compressed. Errors: those of kvik_decompress(). Threads: safe. */
KVIK_API int kvik_compress(kvik_codec codec, size_t num_chunks, const void *const *src,
                           const size_t *src_sizes, void *const *dst, const size_t *dst_capacities,
                           size_t *sizes, int *statuses);

/* A chunk of a fused read: `compressed_size` bytes of a file at `file_offset`, which decode to
 * exactly `uncompressed_size` bytes at `dst`. The file is `file`, or where that is NULL, the one
 * at `path`, which the call opens for reading and closes before it returns: how a reader of
 * thousands of chunk files (Zarr) names them without opening each one first. */
typedef struct kvik_compressed_chunk {
  kvik_file *file;          /* open for reading; or NULL, and `path` names the file */
  int64_t file_offset;      /* where the chunk's compressed bytes start */
  size_t compressed_size;   /* or 0: the rest of the file, from `file_offset` on */
  void *dst;                /* device memory for the decoded bytes, see below */
  size_t uncompressed_size; /* above 0: exactly what the chunk decodes to */
  const char *path;         /* where `file` is NULL; else NULL */
} kvik_compressed_chunk;

/* Read each chunk's compressed bytes and decompress them on the GPU into its `dst`, and wait.
 * The chunks are read on the thread pool (whatever their size) into pinned host memory, where
 * kvik checks each one's framing (see Results above), then copied to staging device memory of
 * kvik's own in the calling thread's current context (device 0's primary one where none is
 * current); nvCOMP decodes from there on streams of kvik's own in that context, which must reach
 * every `dst` (device memory of that context, or of one it can access; aligned as
 * kvik_codec_alignment() says). The chunks go in batches of up to 1024 chunks and 2 GiB of
 * compressed bytes (LZ4: 512 MiB; a larger chunk alone), in their order, each one nvCOMP call on
 * its own stream, up to 4 in flight; the reads run ahead of the copies and decoding
 * (docs/design.md#the-fused-read). Device memory: the staging (up to 4 batches), and nvCOMP's
 * temporary space, which for zstd is about three times a batch's decoded bytes; both come from
 * kvik's pool, which keeps up to KVIK_SETTING_NVCOMP_MEMORY of them for the next call.
 * Chunks may share files and overlap in them; their outputs must not overlap. Chunks given by
 * `path` are opened (and those of size 0 measured) on the thread pool before the first read, a
 * handle each, closed while the last batch decodes.
 * `statuses` (may be NULL) gets each chunk's result: 0 when it was read and decoded to exactly
 * its `uncompressed_size`; else the error of its open (those of kvik_file_open: -ENOENT, ...),
 * of its read (those of reads and writes; -ENODATA where the file ends before the chunk does, or
 * at its offset for one of size 0), -EBADMSG where its framing is broken (never decoded),
 * KVIK_EDECODED_SIZE where its framing states, or nvCOMP decoded it to, another size, or an
 * nvCOMP code (see Results above). A chunk that failed leaves its `dst`
 * undefined, and the others are read and decoded all the same. An error of the call itself (a
 * CUDA code, -ENOMEM) fails the chunks it reached and those after them.
 * Returns: 0 when every chunk decoded. Errors: -EINVAL (unknown codec; NULL `chunks` with
 * `num_chunks` > 0; a chunk with neither `file` nor `path` or both, a NULL `dst`, a negative
 * offset, an uncompressed size of 0, offset + compressed size above INT64_MAX, a `dst` that breaks
 * the codec's alignment) and -EBADF (a file closed or not open for reading), the message naming
 * the chunk, with nothing started;
 * KVIK_ENVCOMP_UNAVAILABLE; KVIK_ECUDA_UNAVAILABLE; -ENOMEM; a CUDA code (the staging memory,
 * the stream); else the code of the first chunk that failed, with a message naming the call,
 * the chunk, its file and offset, and why. Threads: safe. Lifetime: the handles, paths and `dst`
 * buffers until the call returns. */
KVIK_API int kvik_file_read_decompress(kvik_codec codec, const kvik_compressed_chunk *chunks,
                                       size_t num_chunks, int *statuses);

/* ------------------------------------------------------------------------------------------ */
/* Model weights (safetensors)                                                                */
/* ------------------------------------------------------------------------------------------ */

/*
 * A safetensors file: an 8-byte little-endian header length, a JSON header naming each tensor's
 * dtype, shape and byte range of the data section after it, then the data. kvik parses the header
 * with Jansson (libjansson.so.4, loaded at run time on the first kvik_safetensors_open(); kvik
 * info says whether it was found) and checks it as a loader must before it trusts a byte: the
 * header inside the file and at most 100 MB, UTF-8 JSON, an object whose keys are each once,
 * "__metadata__" an object of strings, each tensor a known dtype (kvik_safetensors_dtype_bits),
 * a shape of non-negative integers whose bytes are its range's, and the ranges tiling the data
 * section with no gap, overlap or byte past its end. Anything else fails the open with -EBADMSG
 * and a message naming the file and the problem.
 *
 * Tensors are listed in the order of their data, and read into host or device memory (see
 * "Device memory") at any alignment: safetensors does not align the data section.
 */
typedef struct kvik_safetensors kvik_safetensors;

/* One tensor of a kvik_safetensors. A parameter struct: set struct_size to
 * sizeof(kvik_tensor_info) before the call; members the library does not know are left
 * untouched. Its pointers are the handle's, valid until kvik_safetensors_free(). */
typedef struct kvik_tensor_info {
  size_t struct_size;
  const char *name;
  const char *dtype;    /* safetensors' name: "BF16", "F8_E4M3", "BOOL", ... */
  unsigned dtype_bits;  /* of one element: 4 (F4), 6 (F6_E2M3, F6_E3M2), 8, 16, 32 or 64 */
  unsigned ndim;        /* 0 for a scalar */
  const int64_t *shape; /* ndim sizes */
  int64_t file_offset;  /* of the tensor's first byte in the file */
  uint64_t nbytes;
} kvik_tensor_info;

/* Open the safetensors file at `path` and check its header (above), storing the handle in *st.
 * Returns: 0. Errors: -EINVAL (NULL); KVIK_ENOJSON (Jansson missing: the message says why); those
 * of kvik_file_open(); -EBADMSG (not a valid safetensors file); -ENOMEM. On failure *st is NULL.
 * Threads: safe. Lifetime: free it with kvik_safetensors_free(). */
KVIK_API int kvik_safetensors_open(const char *path, kvik_safetensors **st);

/* Close the file and free the handle; NULL does nothing. Reads of the handle must be done. */
KVIK_API void kvik_safetensors_free(kvik_safetensors *st);

/* The number of tensors (0 for NULL). Threads: safe. */
KVIK_API size_t kvik_safetensors_count(const kvik_safetensors *st);

/* Tensor `index` (0 to count - 1, in the order of their data) in *info, up to info->struct_size
 * bytes.
 * Returns: 0. Errors: -EINVAL (NULL, struct_size not set); -ENOENT (no such index). Threads:
 * safe. */
KVIK_API int kvik_safetensors_tensor(const kvik_safetensors *st, size_t index,
                                     kvik_tensor_info *info);

/* The index of the tensor called `name`.
 * Returns: the index. Errors: -EINVAL (NULL); -ENOENT (no such tensor). Threads: safe. */
KVIK_API int64_t kvik_safetensors_find(const kvik_safetensors *st, const char *name);

/* The value of "__metadata__"'s `key`, or NULL where the header has none. Threads: safe.
 * Lifetime: the handle's. */
KVIK_API const char *kvik_safetensors_metadata(const kvik_safetensors *st, const char *key);

/* Bits of one element of safetensors dtype `dtype` ("BF16": 16), or 0 for a name kvik does not
 * know. Threads: safe. */
KVIK_API unsigned kvik_safetensors_dtype_bits(const char *dtype);

/* The file's handle, for reads of one's own: the whole data section in one kvik_file_pread, say.
 * Returns: the handle, NULL for NULL. Threads: safe. Lifetime: the safetensors handle's; do not
 * close or free it. */
KVIK_API kvik_file *kvik_safetensors_file(kvik_safetensors *st);

/* Read tensors indices[0..n) into dsts[0..n) (host or device memory, each of the tensor's nbytes
 * at least), all at once on the thread pool, and wait for them.
 * Returns: 0, with every tensor's bytes in place. Errors: -EINVAL (NULL; an index out of range;
 * a NULL destination of a tensor of any bytes); -ENODATA (the file ends before a tensor's last
 * byte: truncated since the open); those of reads and writes (above). The message names the first
 * tensor that failed. On failure, what was read of the others is in place. Threads: safe.
 * Lifetime: `dsts` until the call returns. */
KVIK_API int kvik_safetensors_read(kvik_safetensors *st, const size_t *indices, void *const *dsts,
                                   size_t n);

/* ------------------------------------------------------------------------------------------ */
/* What the library found                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Optional libraries that kvik loads at run time, never at build time. */
typedef enum kvik_runtime_lib {
  KVIK_LIB_CUDA = 0,
  KVIK_LIB_CUFILE = 1,
  KVIK_LIB_CURL = 2,   /* from KVIK_SETTING_CURL_LIBRARY where set (see "Remote files") */
  KVIK_LIB_JANSSON = 3 /* libjansson.so.4, for safetensors headers */
} kvik_runtime_lib;

/* Whether `lib` can be loaded on this machine (it is loaded and let go again), and in `detail`
 * (cut to `len` bytes with the NUL; may be NULL) the path it was loaded from, or the loader's
 * reason.
 * Returns: 1 or 0. Errors: -EINVAL (unknown library); KVIK_ECONFIG (KVIK_LIB_CURL, which reads
 * the settings). Threads: safe. */
KVIK_API int kvik_runtime_lib_supported(kvik_runtime_lib lib, char *detail, size_t len);

/* Whether files in directory `dir` can be opened with O_DIRECT and read and written with it,
 * tested with a temporary file that is removed again.
 * Returns: 1, or 0 when the file system refuses O_DIRECT (EINVAL). Errors: -EINVAL (NULL);
 * -ENAMETOOLONG; an errno of creating the file, of opening it with O_DIRECT, of allocating an
 * aligned block (-ENOMEM) or of its IO (-ENOSPC, -EIO ...). Threads: safe. */
KVIK_API int kvik_direct_io_supported(const char *dir);

#ifdef __cplusplus
}
#endif

#endif /* KVIK_H */
