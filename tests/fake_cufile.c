/* A fake cuFile library, built as libcufile.so.0, for testing kvik's GPUDirect Storage paths on
 * machines without a GPU. fake_cufile.h says what it models; this file says how.
 *
 * Device memory belongs to the fake CUDA driver (fake_cuda.c), where the CPU cannot touch it:
 * the fake moves it through a host bounce buffer with cuMemcpyHtoD/DtoH, with a context pushed
 * for the copy (the allocation's own), because the batch worker and stream threads have none.
 *
 * Registered files need an O_DIRECT descriptor, as with cuFile. Transfers that O_DIRECT refuses
 * (an offset, length or buffer not a multiple of 4096) go through a second descriptor of the
 * same file without O_DIRECT, opened on first need, as cuFile's compatibility mode does its own
 * buffered IO for them.
 *
 * Locks: g_lock guards the driver state, the parameters, the statistics and the registries of
 * handles, buffers, streams and batches; each batch has its own lock for its slots, and may take
 * g_lock under it, never the reverse. g_api.lock (fake_common.h) guards the armed failures,
 * taken under g_lock. No lock is held during a transfer or a call into CUDA. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT, pthread_setname_np */
#endif
#include "fake_cufile.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fake_common.h"
#include "fake_cuda.h" /* CUDA constants beyond those of src/cuda.h */

/* ---- The API this file exports ------------------------------------------------------------ */

/* src/cufile.h's functions, declared under their symbols (cuFileDriverClose_v2, ...) and counted
 * and failed by those names (fake_common.h). */
#define ALL_FUNCTIONS(X) KVIK__CUFILE_FUNCTIONS(X) KVIK__CUFILE_OPTIONAL_FUNCTIONS(X)
ALL_FUNCTIONS(FAKE_DECLARE)

typedef enum fn_id { ALL_FUNCTIONS(FAKE_FN_ID) FN_COUNT } fn_id;
static const char *const fn_symbols[FN_COUNT] = {ALL_FUNCTIONS(FAKE_FN_SYMBOL)};

#define ALIGN ((size_t)4096)           /* what O_DIRECT needs, and what GDS calls aligned */
#define BOUNCE_MAX ((size_t)1 << 20)   /* device memory moves through the CPU in pieces this big */
#define STRING_PARAM_MAX 1024

static const kvik__cufile_error OK = {KVIK__CUFILE_SUCCESS, CUDA_SUCCESS};

static kvik__cufile_error status_of(int status) { return (kvik__cufile_error){status, CUDA_SUCCESS}; }

/* ---- Call counting and fault injection ------------------------------------------------------ */

const char fake_name[] = "fake_cufile";
static fake_api g_api = FAKE_API_INIT(fn_symbols, FN_COUNT);
_Static_assert(FN_COUNT <= FAKE_MAX_FUNCTIONS, "raise FAKE_MAX_FUNCTIONS");
static atomic_long g_unaligned;

/* ---- Settings from the environment ---------------------------------------------------------- */

static unsigned g_nvfs_major, g_nvfs_minor;
static int g_version;
static pthread_once_t g_env_once = PTHREAD_ONCE_INIT;

static void env_nvfs(void) {
  const char *text = getenv("FAKE_CUFILE_NVFS");
  if (!text || !*text) return;
  char extra;
  if (sscanf(text, "%u.%u%c", &g_nvfs_major, &g_nvfs_minor, &extra) != 2 || g_nvfs_major == 0)
    fake_die("FAKE_CUFILE_NVFS='%s' is not an nvidia-fs version such as 2.26", text);
}

/* Read per transfer, so that a test can make IO slow for one phase only. */
static long io_delay_us(void) {
  return fake_env_long("FAKE_CUFILE_IO_DELAY_US", 0, 60L * 1000 * 1000);
}

static void install_fork_handlers(void);

static void load_env(void) {
  env_nvfs();
  g_version = (int)fake_env_long("FAKE_CUFILE_VERSION", 1150, 1000000);
  install_fork_handlers();
}

/* ---- Parameters, which are also the driver's properties ------------------------------------ *
 * cuFile keeps one configuration: cuFileDriverGetProperties reports the parameters, and the
 * cuFileDriverSet* calls change them. Defaults are those of cuFile's cufile.json. */

#define FAKE_PARAM_ENUM_(name, value) P_##name = value,
#define FAKE_PARAM_COUNT_(name, value) +1
enum size_param { KVIK__CUFILE_SIZE_PARAMS(FAKE_PARAM_ENUM_) };
enum bool_param { KVIK__CUFILE_BOOL_PARAMS(FAKE_PARAM_ENUM_) };
enum string_param { KVIK__CUFILE_STRING_PARAMS(FAKE_PARAM_ENUM_) };
enum {
  SIZE_PARAMS = 0 KVIK__CUFILE_SIZE_PARAMS(FAKE_PARAM_COUNT_),
  BOOL_PARAMS = 0 KVIK__CUFILE_BOOL_PARAMS(FAKE_PARAM_COUNT_),
  STRING_PARAMS = 0 KVIK__CUFILE_STRING_PARAMS(FAKE_PARAM_COUNT_)
};
#undef FAKE_PARAM_ENUM_
#undef FAKE_PARAM_COUNT_

/* One default per parameter of src/cufile.h: a parameter added there without one here does not
 * compile, and neither does one whose value is outside 0..count-1 (the array bound). */
#define DEFAULT_profile_stats 0
#define DEFAULT_execution_max_io_queue_depth 128
#define DEFAULT_execution_max_io_threads 4
#define DEFAULT_execution_min_io_threshold_size_kb 8192
#define DEFAULT_execution_max_request_parallelism 4
#define DEFAULT_properties_max_direct_io_size_kb 16384
#define DEFAULT_properties_max_device_cache_size_kb 131072
#define DEFAULT_properties_per_buffer_cache_size_kb 1024
#define DEFAULT_properties_max_device_pinned_mem_size_kb 33554432
#define DEFAULT_properties_io_batchsize 128
#define DEFAULT_pollthreshold_size_kb 4
#define DEFAULT_properties_batch_io_timeout_ms 5
#define DEFAULT_properties_use_poll_mode false
#define DEFAULT_properties_allow_compat_mode true
#define DEFAULT_force_compat_mode false
#define DEFAULT_fs_misc_api_check_aggressive false
#define DEFAULT_execution_parallel_io true
#define DEFAULT_profile_nvtx false
#define DEFAULT_properties_allow_system_memory false
#define DEFAULT_use_pcip2pdma false
#define DEFAULT_prefer_io_uring false
#define DEFAULT_force_odirect_mode false
#define DEFAULT_skip_topology_detection false
#define DEFAULT_stream_memops_bypass false
#define DEFAULT_logging_level "ERROR"
#define DEFAULT_env_logfile_path ""
#define DEFAULT_log_dir ""

#define FAKE_PARAM_DEFAULT_(name, value) [value] = DEFAULT_##name,
static size_t g_size_params[SIZE_PARAMS] = {KVIK__CUFILE_SIZE_PARAMS(FAKE_PARAM_DEFAULT_)};
static bool g_bool_params[BOOL_PARAMS] = {KVIK__CUFILE_BOOL_PARAMS(FAKE_PARAM_DEFAULT_)};
static char g_string_params[STRING_PARAMS][STRING_PARAM_MAX] = {KVIK__CUFILE_STRING_PARAMS(FAKE_PARAM_DEFAULT_)};
#undef FAKE_PARAM_DEFAULT_

/* ---- Driver state and the prologue of every exported function ------------------------------ */

typedef enum driver_state { NEVER_OPENED, OPEN, CLOSED } driver_state;

typedef enum live_kind { LIVE_HANDLES, LIVE_BUFFERS, LIVE_BATCHES, LIVE_STREAMS, LIVE_IN_FLIGHT, LIVE_COUNT } live_kind;
static const char *const live_names[LIVE_COUNT] = {"handles", "buffers", "batches", "streams", "in_flight"};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static driver_state g_state;
static atomic_long g_active; /* calls that need the open driver, running now */
static atomic_long g_live[LIVE_COUNT];

typedef enum stats_state { STATS_NEVER, STATS_RUNNING, STATS_STOPPED } stats_state;
static stats_state g_stats_state;
static kvik__cufile_stats1 g_stats;

/* What a function needs of the driver. */
typedef enum need {
  ANY_TIME,        /* cuFileDriverOpen, cuFileGetVersion, the parameter getters */
  NOT_AFTER_CLOSE, /* the rest ... */
  OPEN_DRIVER      /* ... and those that open it implicitly: IO, registrations, batches, streams */
} need;

/* g_lock held. Without nvidia-fs, cuFile opens only in compatibility mode. */
static int open_locked(void) {
  if (g_state == OPEN) return 0;
  if (g_nvfs_major == 0 && !g_bool_params[P_properties_allow_compat_mode]) return CU_FILE_DRIVER_NOT_INITIALIZED;
  g_state = OPEN;
  return 0;
}

/* Catch a use after close, count the call, return an armed failure without doing anything, and
 * open the driver where cuFile would. Returns 0 or the status to fail with. An OPEN_DRIVER call
 * that got 0 must call end() when done: cuFileDriverClose refuses to close under it. */
static int begin(fn_id fn, need n) {
  pthread_once(&g_env_once, load_env);
  pthread_mutex_lock(&g_lock);
  if (n != ANY_TIME && g_state == CLOSED)
    fake_die("%s called after cuFileDriverClose", fn_symbols[fn]);
  int status = fake_api_call(&g_api, fn);
  if (status == 0 && n == OPEN_DRIVER) status = open_locked();
  if (status == 0 && n == OPEN_DRIVER) atomic_fetch_add(&g_active, 1);
  pthread_mutex_unlock(&g_lock);
  return status;
}

static void end(void) { atomic_fetch_sub(&g_active, 1); }

static void live_add(live_kind kind, long n) { atomic_fetch_add(&g_live[kind], n); }

/* A child of fork() has none of its parent's other threads, so none of their calls or IO; and it
 * must not inherit g_lock held by one of them. */
static void fork_prepare(void) {
  pthread_mutex_lock(&g_lock);
  pthread_mutex_lock(&g_api.lock);
}

static void fork_parent(void) {
  pthread_mutex_unlock(&g_api.lock);
  pthread_mutex_unlock(&g_lock);
}

static void fork_child(void) {
  atomic_store(&g_active, 0);
  atomic_store(&g_live[LIVE_IN_FLIGHT], 0);
  fork_parent();
}

static void install_fork_handlers(void) { pthread_atfork(fork_prepare, fork_parent, fork_child); }

/* ---- The CUDA driver ------------------------------------------------------------------------ */

typedef struct cuda_fns {
  CUresult (*pointer_attributes)(unsigned count, int *attributes, void **data, CUdeviceptr ptr);
  CUresult (*htod)(CUdeviceptr dst, const void *src, size_t size);
  CUresult (*dtoh)(void *dst, CUdeviceptr src, size_t size);
  CUresult (*launch_host_func)(CUstream stream, CUhostFn fn, void *user_data);
  CUresult (*ctx_get_current)(CUcontext *ctx);
  CUresult (*ctx_push)(CUcontext ctx);
  CUresult (*ctx_pop)(CUcontext *ctx);
} cuda_fns;

static cuda_fns g_cuda;
static fake_loaded g_cuda_loaded = FAKE_LOADED_INIT;

static int cuda_resolve(void *lib) {
  static const char *const names[] = {"cuPointerGetAttributes", "cuMemcpyHtoD_v2",     "cuMemcpyDtoH_v2",
                                      "cuLaunchHostFunc",       "cuCtxGetCurrent",     "cuCtxPushCurrent_v2",
                                      "cuCtxPopCurrent_v2"};
  void **slots[] = {(void **)&g_cuda.pointer_attributes, (void **)&g_cuda.htod,     (void **)&g_cuda.dtoh,
                    (void **)&g_cuda.launch_host_func,   (void **)&g_cuda.ctx_get_current,
                    (void **)&g_cuda.ctx_push,           (void **)&g_cuda.ctx_pop};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!(*slots[i] = dlsym(lib, names[i]))) return 0;
  /* cuFile's transfers on a stream are the driver's work, which may call the driver; the fake
   * CUDA driver forbids that to host functions (fake_cuda.h). */
  void *driver_work = dlsym(lib, "fake_cuda_launch_driver_work");
  if (driver_work) *(void **)&g_cuda.launch_host_func = driver_work;
  return 1;
}

/* The CUDA driver once the process has loaded it, else NULL. Device memory exists only after
 * someone loaded libcuda.so.1, so until then every pointer is host memory, and the fake does
 * not load CUDA itself just to learn that: a host-only test stays a process without CUDA. */
static const cuda_fns *cuda(void) {
  return fake_once_loaded(&g_cuda_loaded, "libcuda.so.1", cuda_resolve) ? &g_cuda : NULL;
}

static CUcontext current_ctx(const cuda_fns *cu) {
  CUcontext ctx = NULL;
  if (!cu || cu->ctx_get_current(&ctx) != CUDA_SUCCESS) return NULL;
  return ctx;
}

typedef struct mem_info {
  int device; /* device or managed memory: only cuMemcpy may touch it */
  CUcontext ctx;
  CUdeviceptr start;
  size_t size;
} mem_info;

/* Host memory unless CUDA says otherwise; a pointer CUDA does not know is host memory too. */
static mem_info mem_query(const cuda_fns *cu, const void *ptr) {
  mem_info m = {0};
  if (!cu) return m;
  unsigned type = 0;
  int which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void *data[] = {&type, &m.ctx, &m.start, &m.size};
  if (cu->pointer_attributes(4, which, data, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS) return (mem_info){0};
  m.device = type == CU_MEMORYTYPE_DEVICE;
  return m;
}

/* Make a context current for a copy: the allocation's own, else (memory of a stream-ordered
 * pool, which has none) the one that was current where the IO was asked for. Returns 1 if it
 * pushed one, 0 if the right one is current already, -1 if there is none. */
static int ctx_enter(const cuda_fns *cu, CUcontext own, CUcontext requester) {
  CUcontext want = own ? own : requester;
  CUcontext current = current_ctx(cu);
  if (!want) return current ? 0 : -1;
  if (want == current) return 0;
  return cu->ctx_push(want) == CUDA_SUCCESS ? 1 : -1;
}

/* ---- Registries ----------------------------------------------------------------------------- */

/* Handles are numbers, never reused, rather than addresses: a stale handle is then unknown
 * instead of matching whatever malloc put at its old address. */
static uintptr_t g_next_id; /* g_lock */

static uintptr_t new_id_locked(void) { return (uintptr_t)0xcf1e0000u + (++g_next_id << 4); }

typedef struct fake_handle {
  uintptr_t id;
  int fd;
  atomic_int buffered; /* the same file without O_DIRECT; -1 until a transfer needs it */
  dev_t dev;           /* of fd when registered, to catch an fd closed and reused */
  ino_t ino;
  long users; /* IO operations accepted on it and not finished; g_lock */
} fake_handle;

typedef struct buffer_record {
  const void *base;
  size_t length;
} buffer_record;

static fake_list g_handles, g_buffers, g_streams, g_batches; /* g_lock */

/* g_lock held. */
static long handle_index(uintptr_t id) {
  for (size_t i = 0; i < g_handles.n; i++)
    if (((fake_handle *)g_handles.items[i])->id == id) return (long)i;
  return -1;
}

/* The handle, held for an IO operation (handle_release it), or NULL if it is not registered. */
static fake_handle *handle_acquire(kvik__cufile_handle fh) {
  pthread_mutex_lock(&g_lock);
  long i = handle_index((uintptr_t)fh);
  fake_handle *h = i >= 0 ? g_handles.items[i] : NULL;
  if (h) h->users++;
  pthread_mutex_unlock(&g_lock);
  return h;
}

static void handle_release(fake_handle *h) {
  pthread_mutex_lock(&g_lock);
  h->users--;
  pthread_mutex_unlock(&g_lock);
}

static int fd_registered_locked(int fd) {
  for (size_t i = 0; i < g_handles.n; i++)
    if (((fake_handle *)g_handles.items[i])->fd == fd) return 1;
  return 0;
}

/* What cuFile checks of a descriptor before it registers it. */
static int descr_check(const kvik__cufile_descr *descr, struct stat *st) {
  if (!descr || descr->type != KVIK__CUFILE_HANDLE_TYPE_OPAQUE_FD) return CU_FILE_INVALID_VALUE;
  int flags = fcntl(descr->handle.fd, F_GETFL);
  if (flags < 0 || fstat(descr->handle.fd, st) != 0) return CU_FILE_INVALID_VALUE;
  if (!S_ISREG(st->st_mode) && !S_ISBLK(st->st_mode)) return CU_FILE_INVALID_FILE_TYPE;
  return (flags & O_DIRECT) ? 0 : CU_FILE_DIO_NOT_SET;
}

static int handle_register(kvik__cufile_handle *fh, const kvik__cufile_descr *descr) {
  struct stat st;
  int status = fh ? descr_check(descr, &st) : CU_FILE_INVALID_VALUE;
  if (status) return status;
  fake_handle *h = calloc(1, sizeof *h);
  if (!h) return CU_FILE_NOMEM_ERROR;
  h->fd = descr->handle.fd;
  atomic_init(&h->buffered, -1);
  h->dev = st.st_dev;
  h->ino = st.st_ino;
  pthread_mutex_lock(&g_lock);
  if (fd_registered_locked(h->fd)) status = CU_FILE_HANDLE_ALREADY_REGISTERED;
  else if (fake_list_add(&g_handles, h) != 0) status = CU_FILE_NOMEM_ERROR;
  if (!status) h->id = new_id_locked();
  pthread_mutex_unlock(&g_lock);
  if (status) {
    free(h);
    return status;
  }
  live_add(LIVE_HANDLES, 1);
  *fh = (kvik__cufile_handle)h->id;
  return 0;
}

static void handle_deregister(kvik__cufile_handle fh) {
  pthread_mutex_lock(&g_lock);
  long i = handle_index((uintptr_t)fh);
  if (i < 0) fake_die("cuFileHandleDeregister(%p): not a registered handle", fh);
  fake_handle *h = g_handles.items[i];
  if (h->users > 0)
    fake_die("cuFileHandleDeregister(%p): %ld IO operations on the handle are still queued or "
             "running", fh, h->users);
  fake_list_remove_at(&g_handles, (size_t)i);
  pthread_mutex_unlock(&g_lock);
  live_add(LIVE_HANDLES, -1);
  int buffered = atomic_load(&h->buffered);
  if (buffered >= 0) close(buffered);
  free(h);
}

/* ---- Transfers ------------------------------------------------------------------------------ */

static int aligned(uintptr_t x) { return x % ALIGN == 0; }

static int reopen_without_direct(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return -1;
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  return open(path, (flags & (O_ACCMODE | O_APPEND | O_SYNC | O_DSYNC)) | O_CLOEXEC);
}

/* The descriptor for a transfer that O_DIRECT would refuse. Without /proc, the O_DIRECT one,
 * which then fails it with EINVAL, as the kernel says. */
static int buffered_fd(fake_handle *h) {
  int fd = atomic_load(&h->buffered);
  if (fd >= 0) return fd;
  pthread_mutex_lock(&g_lock);
  fd = atomic_load(&h->buffered);
  if (fd < 0 && (fd = reopen_without_direct(h->fd)) >= 0) atomic_store(&h->buffered, fd);
  pthread_mutex_unlock(&g_lock);
  return fd >= 0 ? fd : h->fd;
}

static int fd_for(fake_handle *h, const void *buf, size_t n, off_t offset) {
  if (aligned((uintptr_t)buf) && aligned(n) && aligned((uintptr_t)offset)) return h->fd;
  return buffered_fd(h);
}

/* pread/pwrite all of it, through whichever descriptor suits each piece (after a short O_DIRECT
 * read the rest is unaligned). A read stops at the end of the file. Bytes moved, or -errno. */
static ssize_t file_io(fake_handle *h, int write, void *buf, size_t n, off_t offset) {
  size_t done = 0;
  while (done < n) {
    char *at = (char *)buf + done;
    off_t where = offset + (off_t)done;
    int fd = fd_for(h, at, n - done, where);
    ssize_t r = write ? pwrite(fd, at, n - done, where) : pread(fd, at, n - done, where);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -errno;
    if (r == 0) break;
    done += (size_t)r;
  }
  return (ssize_t)done;
}

/* Device memory, through a host buffer: the file into the buffer, the buffer to the device. */
static ssize_t device_read(const cuda_fns *cu, fake_handle *h, CUdeviceptr dst, size_t size, off_t offset,
                           unsigned char *bounce, size_t chunk) {
  size_t done = 0;
  while (done < size) {
    size_t n = size - done < chunk ? size - done : chunk;
    ssize_t got = file_io(h, 0, bounce, n, offset + (off_t)done);
    if (got < 0) return got;
    if (got > 0 && cu->htod(dst + done, bounce, (size_t)got) != CUDA_SUCCESS) return -CU_FILE_CUDA_DRIVER_ERROR;
    done += (size_t)got;
    if ((size_t)got < n) break; /* the end of the file */
  }
  return (ssize_t)done;
}

static ssize_t device_write(const cuda_fns *cu, fake_handle *h, CUdeviceptr src, size_t size, off_t offset,
                            unsigned char *bounce, size_t chunk) {
  size_t done = 0;
  while (done < size) {
    size_t n = size - done < chunk ? size - done : chunk;
    if (cu->dtoh(bounce, src + done, n) != CUDA_SUCCESS) return -CU_FILE_CUDA_DRIVER_ERROR;
    ssize_t put = file_io(h, 1, bounce, n, offset + (off_t)done);
    if (put < 0) return put;
    done += (size_t)put;
    if ((size_t)put < n) break;
  }
  return (ssize_t)done;
}

/* One IO operation, as cuFileRead/Write, a batch entry or a stream-ordered call describe it. */
typedef struct io_op {
  fake_handle *h; /* held (users) by whoever queued the operation */
  int write;
  void *base;
  size_t size;
  off_t file_offset, base_offset;
  CUcontext requester; /* current where the operation was asked for; NULL for cuFileRead/Write */
} io_op;

static ssize_t device_io(const cuda_fns *cu, const io_op *op, const mem_info *m, CUdeviceptr dev) {
  if (op->size > m->size - (size_t)(dev - m->start)) return -CU_FILE_CUDA_POINTER_RANGE_ERROR;
  int pushed = ctx_enter(cu, m->ctx, op->requester);
  if (pushed < 0) return -CU_FILE_INVALID_CONTEXT_ERROR;
  size_t chunk = op->size < BOUNCE_MAX ? op->size : BOUNCE_MAX;
  void *bounce = NULL;
  ssize_t ret = -CU_FILE_NOMEM_ERROR;
  if (posix_memalign(&bounce, ALIGN, fake_round_up(chunk, ALIGN)) == 0)
    ret = op->write ? device_write(cu, op->h, dev, op->size, op->file_offset, bounce, chunk)
                    : device_read(cu, op->h, dev, op->size, op->file_offset, bounce, chunk);
  free(bounce);
  CUcontext popped;
  if (pushed) cu->ctx_pop(&popped);
  return ret;
}

/* An fd closed and reused for another file would have real cuFile move the wrong file's bytes:
 * a bug to stop at. A closed one fails as pread would. */
static int fd_check(const fake_handle *h) {
  struct stat st;
  if (fstat(h->fd, &st) != 0) return -errno;
  if (st.st_dev != h->dev || st.st_ino != h->ino)
    fake_die("IO through handle %p: its fd %d was closed and reopened for another file",
             (void *)h->id, h->fd);
  return 0;
}

/* Bytes moved, -errno, or -status. */
static ssize_t io_run(const io_op *op) {
  if (!op->base || op->file_offset < 0 || op->base_offset < 0) return -CU_FILE_INVALID_VALUE;
  if (!aligned((uintptr_t)op->file_offset)) atomic_fetch_add(&g_unaligned, 1);
  long delay = io_delay_us();
  if (delay) fake_sleep_us(delay);
  int rc = fd_check(op->h);
  if (rc < 0) return rc;
  if (op->size == 0) return 0;
  char *at = (char *)op->base + op->base_offset;
  const cuda_fns *cu = cuda();
  mem_info m = mem_query(cu, at);
  if (!m.device) return file_io(op->h, op->write, at, op->size, op->file_offset);
  return device_io(cu, op, &m, (CUdeviceptr)(uintptr_t)at);
}

/* Statistics count while started, at level 1 and above. */
static int stats_counting_locked(void) { return g_stats_state == STATS_RUNNING && g_size_params[P_profile_stats] > 0; }

static void stats_io(int write, ssize_t ret) {
  pthread_mutex_lock(&g_lock);
  if (stats_counting_locked()) {
    kvik__cufile_op_counter *ops = write ? &g_stats.write_ops : &g_stats.read_ops;
    if (ret < 0) ops->err++;
    else ops->ok++;
    if (ret > 0) *(write ? &g_stats.write_bytes : &g_stats.read_bytes) += (uint64_t)ret;
  }
  pthread_mutex_unlock(&g_lock);
}

static ssize_t sync_io(fn_id fn, kvik__cufile_handle fh, int write, const void *base, size_t size, off_t file_offset,
                       off_t base_offset) {
  int status = begin(fn, OPEN_DRIVER);
  if (status) return -(ssize_t)status;
  ssize_t ret = -CU_FILE_HANDLE_NOT_REGISTERED;
  fake_handle *h = handle_acquire(fh);
  if (h) {
    live_add(LIVE_IN_FLIGHT, 1);
    io_op op = {h, write, (void *)(uintptr_t)base, size, file_offset, base_offset, NULL};
    ret = io_run(&op);
    stats_io(write, ret);
    live_add(LIVE_IN_FLIGHT, -1);
    handle_release(h);
  }
  end();
  return ret;
}

/* ---- Buffers and streams -------------------------------------------------------------------- */

/* g_lock held. */
static long buffer_index(const void *base) {
  for (size_t i = 0; i < g_buffers.n; i++)
    if (((buffer_record *)g_buffers.items[i])->base == base) return (long)i;
  return -1;
}

/* Device memory registers from the start of its allocation, and not beyond it; host memory as
 * it comes. flags (CU_FILE_RDMA_*) mean nothing without RDMA. */
static int buf_register(const void *base, size_t length) {
  if (!base || length == 0) return CU_FILE_INVALID_VALUE;
  mem_info m = mem_query(cuda(), base);
  if (m.device && m.start != (CUdeviceptr)(uintptr_t)base) return CU_FILE_CUDA_POINTER_INVALID;
  if (m.device && length > m.size) return CU_FILE_CUDA_POINTER_RANGE_ERROR;
  buffer_record *r = malloc(sizeof *r);
  if (!r) return CU_FILE_NOMEM_ERROR;
  *r = (buffer_record){base, length};
  pthread_mutex_lock(&g_lock);
  int status = buffer_index(base) >= 0 ? CU_FILE_MEMORY_ALREADY_REGISTERED : 0;
  if (!status && fake_list_add(&g_buffers, r) != 0) status = CU_FILE_NOMEM_ERROR;
  pthread_mutex_unlock(&g_lock);
  if (status) free(r);
  else live_add(LIVE_BUFFERS, 1);
  return status;
}

static int buf_deregister(const void *base) {
  pthread_mutex_lock(&g_lock);
  long i = buffer_index(base);
  buffer_record *r = i >= 0 ? g_buffers.items[i] : NULL;
  if (r) fake_list_remove_at(&g_buffers, (size_t)i);
  pthread_mutex_unlock(&g_lock);
  if (!r) return CU_FILE_MEMORY_NOT_REGISTERED;
  free(r);
  live_add(LIVE_BUFFERS, -1);
  return 0;
}

/* Registering a registered stream again only changes its flags, which the fake ignores: it
 * always reads the sizes and offsets when the stream reaches the operation. */
static int stream_register(CUstream stream, unsigned flags) {
  if (flags > 0xf) return CU_FILE_INVALID_VALUE; /* the four CU_FILE_STREAM_* bits */
  int status = 0, added = 0;
  pthread_mutex_lock(&g_lock);
  if (fake_list_find(&g_streams, stream) < 0) {
    added = fake_list_add(&g_streams, (void *)stream) == 0;
    status = added ? 0 : CU_FILE_NOMEM_ERROR;
  }
  pthread_mutex_unlock(&g_lock);
  if (added) live_add(LIVE_STREAMS, 1);
  return status;
}

static int stream_deregister(CUstream stream) {
  pthread_mutex_lock(&g_lock);
  int found = fake_list_remove(&g_streams, stream);
  pthread_mutex_unlock(&g_lock);
  if (!found) return CU_FILE_INVALID_VALUE;
  live_add(LIVE_STREAMS, -1);
  return 0;
}

/* ---- Stream-ordered IO ---------------------------------------------------------------------- */

typedef struct async_op {
  io_op op;
  size_t *size_p;
  off_t *file_offset_p, *base_offset_p;
  ssize_t *bytes_p;
} async_op;

/* Runs when the stream reaches it: only then are the size and offsets read, as cuFile does for
 * a stream registered without the CU_FILE_STREAM_FIXED_* flags. */
static void async_run(void *arg) {
  async_op *a = arg;
  a->op.size = *a->size_p;
  a->op.file_offset = *a->file_offset_p;
  a->op.base_offset = *a->base_offset_p;
  ssize_t ret = io_run(&a->op);
  stats_io(a->op.write, ret);
  *a->bytes_p = ret;
  handle_release(a->op.h);
  live_add(LIVE_IN_FLIGHT, -1);
  free(a);
}

static kvik__cufile_error async_enqueue(kvik__cufile_handle fh, int write, void *base, size_t *size_p,
                                        off_t *file_offset_p, off_t *base_offset_p, ssize_t *bytes_p,
                                        CUstream stream) {
  if (!base || !size_p || !file_offset_p || !base_offset_p || !bytes_p) return status_of(CU_FILE_INVALID_VALUE);
  const cuda_fns *cu = cuda();
  if (!cu) return (kvik__cufile_error){CU_FILE_CUDA_DRIVER_ERROR, CUDA_ERROR_NOT_INITIALIZED};
  fake_handle *h = handle_acquire(fh);
  if (!h) return status_of(CU_FILE_HANDLE_NOT_REGISTERED);
  async_op *a = malloc(sizeof *a);
  if (!a) {
    handle_release(h);
    return status_of(CU_FILE_NOMEM_ERROR);
  }
  *a = (async_op){{h, write, base, 0, 0, 0, current_ctx(cu)}, size_p, file_offset_p, base_offset_p, bytes_p};
  live_add(LIVE_IN_FLIGHT, 1); /* before the launch: the stream may run it at once */
  CUresult result = cu->launch_host_func(stream, async_run, a);
  if (result == CUDA_SUCCESS) return OK;
  live_add(LIVE_IN_FLIGHT, -1);
  handle_release(h);
  free(a);
  return (kvik__cufile_error){CU_FILE_CUDA_DRIVER_ERROR, result};
}

/* ---- Batches -------------------------------------------------------------------------------- */

typedef enum slot_state { SLOT_FREE, SLOT_PENDING, SLOT_RUNNING, SLOT_DONE } slot_state;

typedef struct slot {
  slot_state state;
  unsigned long long order; /* submission order while pending, completion order once done */
  io_op op;                 /* its handle held from submission until the operation finished */
  void *cookie;
  int status; /* once done: KVIK__CUFILE_COMPLETE, _FAILED or _CANCELED */
  size_t ret;
} slot;

typedef struct fake_batch {
  uintptr_t id;
  unsigned capacity;
  slot *slots;
  unsigned used; /* slots not free: submitted, and not yet reported by cuFileBatchIOGetStatus */
  unsigned done; /* of those, the finished ones */
  unsigned long long next_order;
  int stopping;
  long users; /* calls using the batch right now; g_lock */
  pthread_mutex_t lock;
  pthread_cond_t changed; /* on CLOCK_MONOTONIC, for the timeouts of cuFileBatchIOGetStatus */
  pthread_t worker;
} fake_batch;

/* b->lock held. The operation's handle and its place in "in_flight" go now, the slot when the
 * event is reported. */
static void slot_finish(fake_batch *b, slot *s, int status, size_t ret) {
  s->state = SLOT_DONE;
  s->status = status;
  s->ret = ret;
  s->order = b->next_order++;
  b->done++;
  handle_release(s->op.h);
  live_add(LIVE_IN_FLIGHT, -1);
  pthread_cond_broadcast(&b->changed);
}

/* b->lock held. The slot in `state` that came first, or NULL. */
static slot *first_slot(fake_batch *b, slot_state state) {
  slot *first = NULL;
  for (unsigned i = 0; i < b->capacity; i++)
    if (b->slots[i].state == state && (!first || b->slots[i].order < first->order)) first = &b->slots[i];
  return first;
}

/* Runs the batch's operations one after the other, in the order they were submitted. A running
 * slot is the worker's alone, so its operation runs without the lock. */
static void *batch_worker(void *arg) {
  fake_batch *b = arg;
  pthread_mutex_lock(&b->lock);
  for (;;) {
    slot *s = first_slot(b, SLOT_PENDING);
    if (!s && b->stopping) break;
    if (!s) {
      pthread_cond_wait(&b->changed, &b->lock);
      continue;
    }
    s->state = SLOT_RUNNING;
    pthread_mutex_unlock(&b->lock);
    ssize_t ret = io_run(&s->op);
    pthread_mutex_lock(&b->lock);
    slot_finish(b, s, ret < 0 ? KVIK__CUFILE_FAILED : KVIK__CUFILE_COMPLETE, (size_t)ret);
  }
  pthread_mutex_unlock(&b->lock);
  return NULL;
}

static void batch_free(fake_batch *b) {
  pthread_mutex_destroy(&b->lock);
  pthread_cond_destroy(&b->changed);
  free(b->slots);
  free(b);
}

static fake_batch *batch_new(unsigned capacity) {
  fake_batch *b = calloc(1, sizeof *b);
  slot *slots = b ? calloc(capacity, sizeof *slots) : NULL;
  if (!slots) {
    free(b);
    return NULL;
  }
  b->capacity = capacity;
  b->slots = slots;
  pthread_mutex_init(&b->lock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&b->changed, &attr);
  pthread_condattr_destroy(&attr);
  if (pthread_create(&b->worker, NULL, batch_worker, b) != 0) {
    batch_free(b);
    return NULL;
  }
  pthread_setname_np(b->worker, "fake-cufile-bat");
  return b;
}

/* Cancel what has not started, then end the worker once the running operation finished. */
static void batch_stop(fake_batch *b) {
  pthread_mutex_lock(&b->lock);
  for (slot *s; (s = first_slot(b, SLOT_PENDING));) slot_finish(b, s, KVIK__CUFILE_CANCELED, 0);
  b->stopping = 1;
  pthread_cond_broadcast(&b->changed);
  pthread_mutex_unlock(&b->lock);
  pthread_join(b->worker, NULL);
}

static int batch_setup(kvik__cufile_batch_handle *out, unsigned nr) {
  pthread_mutex_lock(&g_lock);
  size_t max = g_size_params[P_properties_io_batchsize];
  pthread_mutex_unlock(&g_lock);
  if (!out || nr < 1 || nr > max) return CU_FILE_INVALID_VALUE;
  fake_batch *b = batch_new(nr);
  if (!b) return CU_FILE_NOMEM_ERROR;
  pthread_mutex_lock(&g_lock);
  int failed = fake_list_add(&g_batches, b) != 0;
  if (!failed) b->id = new_id_locked();
  pthread_mutex_unlock(&g_lock);
  if (failed) {
    batch_stop(b);
    batch_free(b);
    return CU_FILE_NOMEM_ERROR;
  }
  live_add(LIVE_BATCHES, 1);
  *out = (kvik__cufile_batch_handle)b->id;
  return 0;
}

/* g_lock held. */
static long batch_index(kvik__cufile_batch_handle handle) {
  for (size_t i = 0; i < g_batches.n; i++)
    if (((fake_batch *)g_batches.items[i])->id == (uintptr_t)handle) return (long)i;
  return -1;
}

/* The batch, held against cuFileBatchIODestroy until batch_release, or NULL if unknown. */
static fake_batch *batch_acquire(kvik__cufile_batch_handle handle) {
  pthread_mutex_lock(&g_lock);
  long i = batch_index(handle);
  fake_batch *b = i >= 0 ? g_batches.items[i] : NULL;
  if (b) b->users++;
  pthread_mutex_unlock(&g_lock);
  return b;
}

static void batch_release(fake_batch *b) {
  pthread_mutex_lock(&g_lock);
  b->users--;
  pthread_mutex_unlock(&g_lock);
}

static void batch_destroy(kvik__cufile_batch_handle handle) {
  pthread_mutex_lock(&g_lock);
  long i = batch_index(handle);
  if (i < 0) fake_die("cuFileBatchIODestroy(%p): not a batch that was set up", handle);
  fake_batch *b = g_batches.items[i];
  if (b->users > 0) fake_die("cuFileBatchIODestroy(%p): another thread is using the batch", handle);
  fake_list_remove_at(&g_batches, (size_t)i);
  pthread_mutex_unlock(&g_lock);
  live_add(LIVE_BATCHES, -1);
  batch_stop(b);
  batch_free(b);
}

/* Each entry as cuFile checks it, with its handle held in *h on success. */
static int entry_check(const kvik__cufile_io_params *p, fake_handle **h) {
  if (p->mode != KVIK__CUFILE_BATCH || (p->opcode != KVIK__CUFILE_READ && p->opcode != KVIK__CUFILE_WRITE) ||
      !p->u.batch.devPtr_base || p->u.batch.file_offset < 0 || p->u.batch.devPtr_offset < 0)
    return CU_FILE_INVALID_VALUE;
  *h = handle_acquire(p->fh);
  return *h ? 0 : CU_FILE_INVALID_VALUE;
}

/* b->lock held; there is room. */
static void slots_fill(fake_batch *b, unsigned nr, const kvik__cufile_io_params *params, fake_handle **held,
                       CUcontext requester) {
  unsigned next = 0;
  for (unsigned i = 0; i < nr; i++) {
    while (b->slots[next].state != SLOT_FREE) next++;
    const kvik__cufile_io_params *p = &params[i];
    b->slots[next] = (slot){SLOT_PENDING, b->next_order++,
                            {held[i], p->opcode == KVIK__CUFILE_WRITE, p->u.batch.devPtr_base, p->u.batch.size,
                             p->u.batch.file_offset, p->u.batch.devPtr_offset, requester},
                            p->cookie, 0, 0};
  }
  b->used += nr;
  live_add(LIVE_IN_FLIGHT, nr);
  pthread_cond_broadcast(&b->changed);
}

/* All the entries or none. */
static int batch_submit(fake_batch *b, unsigned nr, const kvik__cufile_io_params *params) {
  if (nr == 0 || !params) return CU_FILE_INVALID_VALUE;
  fake_handle **held = calloc(nr, sizeof *held);
  if (!held) return CU_FILE_NOMEM_ERROR;
  unsigned checked = 0;
  int status = 0;
  while (checked < nr && !(status = entry_check(&params[checked], &held[checked]))) checked++;
  CUcontext requester = current_ctx(cuda());
  if (!status) {
    pthread_mutex_lock(&b->lock);
    if (nr > b->capacity - b->used) status = CU_FILE_BATCH_FULL;
    else slots_fill(b, nr, params, held, requester);
    pthread_mutex_unlock(&b->lock);
  }
  for (unsigned i = 0; status && i < checked; i++) handle_release(held[i]);
  free(held);
  return status;
}

static void stats_submit(int status) {
  pthread_mutex_lock(&g_lock);
  if (stats_counting_locked()) {
    if (status) g_stats.batch_submit_ops.err++;
    else g_stats.batch_submit_ops.ok++;
  }
  pthread_mutex_unlock(&g_lock);
}

static struct timespec deadline_after(const struct timespec *timeout) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_sec += timeout->tv_sec;
  t.tv_nsec += timeout->tv_nsec;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

/* b->lock held. Wait for min_nr finished operations, or until the deadline (none: forever). */
static void wait_done(fake_batch *b, unsigned min_nr, const struct timespec *deadline) {
  while (b->done < min_nr) {
    if (!deadline && min_nr > b->used)
      fake_die("cuFileBatchIOGetStatus(%p, min_nr %u) with no timeout would wait forever: "
               "%u operations outstanding", (void *)b->id, min_nr, b->used);
    if (!deadline) pthread_cond_wait(&b->changed, &b->lock);
    else if (pthread_cond_timedwait(&b->changed, &b->lock, deadline) == ETIMEDOUT) return;
  }
}

static int batch_status(fake_batch *b, unsigned min_nr, unsigned *nr, kvik__cufile_io_event *events,
                        const struct timespec *timeout) {
  if (!nr || (*nr > 0 && !events) || min_nr > *nr) return CU_FILE_INVALID_VALUE;
  if (timeout && (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000L))
    return CU_FILE_INVALID_VALUE;
  struct timespec deadline = timeout ? deadline_after(timeout) : (struct timespec){0, 0};
  pthread_mutex_lock(&b->lock);
  wait_done(b, min_nr, timeout ? &deadline : NULL);
  unsigned n = 0;
  for (slot *s; n < *nr && (s = first_slot(b, SLOT_DONE)); n++) {
    events[n] = (kvik__cufile_io_event){s->cookie, s->status, s->ret};
    s->state = SLOT_FREE;
    b->done--;
    b->used--;
  }
  pthread_mutex_unlock(&b->lock);
  *nr = n;
  return 0;
}

static void batch_cancel(fake_batch *b) {
  pthread_mutex_lock(&b->lock);
  for (slot *s; (s = first_slot(b, SLOT_PENDING));) slot_finish(b, s, KVIK__CUFILE_CANCELED, 0);
  pthread_mutex_unlock(&b->lock);
}

/* ---- The exported cuFile API ------------------------------------------------------------- */

kvik__cufile_error cuFileDriverOpen(void) {
  int status = begin(FN_cuFileDriverOpen, ANY_TIME);
  if (status) return status_of(status);
  pthread_mutex_lock(&g_lock);
  status = open_locked();
  pthread_mutex_unlock(&g_lock);
  return status_of(status);
}

kvik__cufile_error cuFileDriverClose(void) {
  int status = begin(FN_cuFileDriverClose, NOT_AFTER_CLOSE);
  if (status) return status_of(status);
  pthread_mutex_lock(&g_lock);
  if (g_state == NEVER_OPENED) status = CU_FILE_DRIVER_NOT_INITIALIZED;
  else if (atomic_load(&g_active) > 0 || atomic_load(&g_live[LIVE_IN_FLIGHT]) > 0) status = CU_FILE_DRIVER_CLOSING;
  else g_state = CLOSED;
  pthread_mutex_unlock(&g_lock);
  return status_of(status);
}

kvik__cufile_error cuFileHandleRegister(kvik__cufile_handle *fh, kvik__cufile_descr *descr) {
  int status = begin(FN_cuFileHandleRegister, OPEN_DRIVER);
  if (status) return status_of(status);
  status = handle_register(fh, descr);
  end();
  return status_of(status);
}

void cuFileHandleDeregister(kvik__cufile_handle fh) {
  if (begin(FN_cuFileHandleDeregister, OPEN_DRIVER)) return; /* the driver would not open */
  handle_deregister(fh);
  end();
}

kvik__cufile_error cuFileBufRegister(const void *base, size_t length, int flags) {
  (void)flags;
  int status = begin(FN_cuFileBufRegister, OPEN_DRIVER);
  if (status) return status_of(status);
  status = buf_register(base, length);
  end();
  return status_of(status);
}

kvik__cufile_error cuFileBufDeregister(const void *base) {
  int status = begin(FN_cuFileBufDeregister, OPEN_DRIVER);
  if (status) return status_of(status);
  status = buf_deregister(base);
  end();
  return status_of(status);
}

ssize_t cuFileRead(kvik__cufile_handle fh, void *base, size_t size, off_t file_offset, off_t base_offset) {
  return sync_io(FN_cuFileRead, fh, 0, base, size, file_offset, base_offset);
}

ssize_t cuFileWrite(kvik__cufile_handle fh, const void *base, size_t size, off_t file_offset, off_t base_offset) {
  return sync_io(FN_cuFileWrite, fh, 1, base, size, file_offset, base_offset);
}

kvik__cufile_error cuFileDriverGetProperties(kvik__cufile_props *props) {
  int status = begin(FN_cuFileDriverGetProperties, NOT_AFTER_CLOSE);
  if (status) return status_of(status);
  if (!props) return status_of(CU_FILE_INVALID_VALUE);
  pthread_mutex_lock(&g_lock);
  const size_t *sz = g_size_params;
  memset(props, 0, sizeof *props);
  props->nvfs.major_version = g_nvfs_major;
  props->nvfs.minor_version = g_nvfs_minor;
  props->nvfs.poll_thresh_size = sz[P_pollthreshold_size_kb];
  props->nvfs.max_direct_io_size = sz[P_properties_max_direct_io_size_kb];
  props->nvfs.dcontrolflags = ((unsigned)g_bool_params[P_properties_use_poll_mode] << KVIK__CUFILE_USE_POLL_MODE) |
                              ((unsigned)g_bool_params[P_properties_allow_compat_mode] << KVIK__CUFILE_ALLOW_COMPAT_MODE);
  props->fflags = (1u << KVIK__CUFILE_BATCH_IO_SUPPORTED) | (1u << KVIK__CUFILE_STREAMS_SUPPORTED);
  props->max_device_cache_size = (unsigned)sz[P_properties_max_device_cache_size_kb];
  props->per_buffer_cache_size = (unsigned)sz[P_properties_per_buffer_cache_size_kb];
  props->max_device_pinned_mem_size = (unsigned)sz[P_properties_max_device_pinned_mem_size_kb];
  props->max_batch_io_size = (unsigned)sz[P_properties_io_batchsize];
  props->max_batch_io_timeout_msecs = (unsigned)sz[P_properties_batch_io_timeout_ms];
  pthread_mutex_unlock(&g_lock);
  return OK;
}

kvik__cufile_error cuFileDriverSetPollMode(bool poll, size_t threshold_kb) {
  int status = begin(FN_cuFileDriverSetPollMode, NOT_AFTER_CLOSE);
  if (status) return status_of(status);
  pthread_mutex_lock(&g_lock);
  g_bool_params[P_properties_use_poll_mode] = poll;
  g_size_params[P_pollthreshold_size_kb] = threshold_kb;
  pthread_mutex_unlock(&g_lock);
  return OK;
}

static kvik__cufile_error set_size_property(fn_id fn, enum size_param param, size_t kb) {
  int status = begin(fn, NOT_AFTER_CLOSE);
  if (status) return status_of(status);
  if (kb == 0) return status_of(CU_FILE_INVALID_VALUE);
  pthread_mutex_lock(&g_lock);
  g_size_params[param] = kb;
  pthread_mutex_unlock(&g_lock);
  return OK;
}

kvik__cufile_error cuFileDriverSetMaxDirectIOSize(size_t kb) {
  return set_size_property(FN_cuFileDriverSetMaxDirectIOSize, P_properties_max_direct_io_size_kb, kb);
}

kvik__cufile_error cuFileDriverSetMaxCacheSize(size_t kb) {
  return set_size_property(FN_cuFileDriverSetMaxCacheSize, P_properties_max_device_cache_size_kb, kb);
}

kvik__cufile_error cuFileDriverSetMaxPinnedMemSize(size_t kb) {
  return set_size_property(FN_cuFileDriverSetMaxPinnedMemSize, P_properties_max_device_pinned_mem_size_kb, kb);
}

kvik__cufile_error cuFileBatchIOSetUp(kvik__cufile_batch_handle *batch, unsigned nr) {
  int status = begin(FN_cuFileBatchIOSetUp, OPEN_DRIVER);
  if (status) return status_of(status);
  status = batch_setup(batch, nr);
  end();
  return status_of(status);
}

kvik__cufile_error cuFileBatchIOSubmit(kvik__cufile_batch_handle batch, unsigned nr, kvik__cufile_io_params *params,
                                       unsigned flags) {
  (void)flags; /* reserved */
  int status = begin(FN_cuFileBatchIOSubmit, OPEN_DRIVER);
  if (status) return status_of(status);
  fake_batch *b = batch_acquire(batch);
  status = b ? batch_submit(b, nr, params) : CU_FILE_INVALID_VALUE;
  if (b) batch_release(b);
  stats_submit(status);
  end();
  return status_of(status);
}

kvik__cufile_error cuFileBatchIOGetStatus(kvik__cufile_batch_handle batch, unsigned min_nr, unsigned *nr,
                                          kvik__cufile_io_event *events, struct timespec *timeout) {
  int status = begin(FN_cuFileBatchIOGetStatus, OPEN_DRIVER);
  if (status) return status_of(status);
  fake_batch *b = batch_acquire(batch);
  status = b ? batch_status(b, min_nr, nr, events, timeout) : CU_FILE_INVALID_VALUE;
  if (b) batch_release(b);
  end();
  return status_of(status);
}

kvik__cufile_error cuFileBatchIOCancel(kvik__cufile_batch_handle batch) {
  int status = begin(FN_cuFileBatchIOCancel, OPEN_DRIVER);
  if (status) return status_of(status);
  fake_batch *b = batch_acquire(batch);
  if (b) batch_cancel(b);
  if (b) batch_release(b);
  end();
  return status_of(b ? 0 : CU_FILE_INVALID_VALUE);
}

void cuFileBatchIODestroy(kvik__cufile_batch_handle batch) {
  if (begin(FN_cuFileBatchIODestroy, OPEN_DRIVER)) return;
  batch_destroy(batch);
  end();
}

kvik__cufile_error cuFileReadAsync(kvik__cufile_handle fh, void *base, size_t *size, off_t *file_offset,
                                   off_t *base_offset, ssize_t *bytes_read, CUstream stream) {
  int status = begin(FN_cuFileReadAsync, OPEN_DRIVER);
  if (status) return status_of(status);
  kvik__cufile_error result = async_enqueue(fh, 0, base, size, file_offset, base_offset, bytes_read, stream);
  end();
  return result;
}

kvik__cufile_error cuFileWriteAsync(kvik__cufile_handle fh, void *base, size_t *size, off_t *file_offset,
                                    off_t *base_offset, ssize_t *bytes_written, CUstream stream) {
  int status = begin(FN_cuFileWriteAsync, OPEN_DRIVER);
  if (status) return status_of(status);
  kvik__cufile_error result = async_enqueue(fh, 1, base, size, file_offset, base_offset, bytes_written, stream);
  end();
  return result;
}

kvik__cufile_error cuFileStreamRegister(CUstream stream, unsigned flags) {
  int status = begin(FN_cuFileStreamRegister, OPEN_DRIVER);
  if (status) return status_of(status);
  status = stream_register(stream, flags);
  end();
  return status_of(status);
}

kvik__cufile_error cuFileStreamDeregister(CUstream stream) {
  int status = begin(FN_cuFileStreamDeregister, OPEN_DRIVER);
  if (status) return status_of(status);
  status = stream_deregister(stream);
  end();
  return status_of(status);
}

kvik__cufile_error cuFileGetVersion(int *version) {
  int status = begin(FN_cuFileGetVersion, ANY_TIME);
  if (status) return status_of(status);
  if (!version) return status_of(CU_FILE_INVALID_VALUE);
  *version = g_version;
  return OK;
}

/* ---- Parameters ----------------------------------------------------------------------------- */

static int param_get(fn_id fn, int param, int count, void *value, void (*copy)(int param, void *value)) {
  int status = begin(fn, ANY_TIME);
  if (status) return status;
  if (param < 0 || param >= count || !value) return CU_FILE_INVALID_VALUE;
  pthread_mutex_lock(&g_lock);
  copy(param, value);
  pthread_mutex_unlock(&g_lock);
  return 0;
}

/* cuFile reads its parameters when the driver opens, so it takes them only before. */
static int param_set(fn_id fn, int param, int count, const void *value, void (*copy)(int param, const void *value)) {
  int status = begin(fn, NOT_AFTER_CLOSE);
  if (status) return status;
  if (param < 0 || param >= count || !value) return CU_FILE_INVALID_VALUE;
  pthread_mutex_lock(&g_lock);
  if (g_state == OPEN) status = CU_FILE_DRIVER_ALREADY_OPEN;
  else copy(param, value);
  pthread_mutex_unlock(&g_lock);
  return status;
}

static void get_size(int param, void *value) { *(size_t *)value = g_size_params[param]; }
static void get_bool(int param, void *value) { *(bool *)value = g_bool_params[param]; }
static void set_size(int param, const void *value) { g_size_params[param] = *(const size_t *)value; }
static void set_bool(int param, const void *value) { g_bool_params[param] = *(const bool *)value; }
static void set_string(int param, const void *value) {
  snprintf(g_string_params[param], STRING_PARAM_MAX, "%s", (const char *)value);
}

kvik__cufile_error cuFileGetParameterSizeT(int param, size_t *value) {
  return status_of(param_get(FN_cuFileGetParameterSizeT, param, SIZE_PARAMS, value, get_size));
}

kvik__cufile_error cuFileGetParameterBool(int param, bool *value) {
  return status_of(param_get(FN_cuFileGetParameterBool, param, BOOL_PARAMS, value, get_bool));
}

kvik__cufile_error cuFileGetParameterString(int param, char *value, int len) {
  int status = begin(FN_cuFileGetParameterString, ANY_TIME);
  if (status) return status_of(status);
  if (param < 0 || param >= STRING_PARAMS || !value || len <= 0) return status_of(CU_FILE_INVALID_VALUE);
  pthread_mutex_lock(&g_lock);
  snprintf(value, (size_t)len, "%s", g_string_params[param]);
  pthread_mutex_unlock(&g_lock);
  return OK;
}

kvik__cufile_error cuFileSetParameterSizeT(int param, size_t value) {
  return status_of(param_set(FN_cuFileSetParameterSizeT, param, SIZE_PARAMS, &value, set_size));
}

kvik__cufile_error cuFileSetParameterBool(int param, bool value) {
  return status_of(param_set(FN_cuFileSetParameterBool, param, BOOL_PARAMS, &value, set_bool));
}

kvik__cufile_error cuFileSetParameterString(int param, const char *value) {
  if (value && strlen(value) >= STRING_PARAM_MAX) value = NULL; /* too long to keep: invalid */
  return status_of(param_set(FN_cuFileSetParameterString, param, STRING_PARAMS, value, set_string));
}

/* ---- Statistics ----------------------------------------------------------------------------- *
 * The level is the profile_stats parameter, as in cuFile's configuration. */

kvik__cufile_error cuFileSetStatsLevel(int level) {
  int status = begin(FN_cuFileSetStatsLevel, NOT_AFTER_CLOSE);
  if (status) return status_of(status);
  if (level < 0 || level > 3) return status_of(CU_FILE_INVALID_VALUE);
  pthread_mutex_lock(&g_lock);
  g_size_params[P_profile_stats] = (size_t)level;
  pthread_mutex_unlock(&g_lock);
  return OK;
}

kvik__cufile_error cuFileGetStatsLevel(int *level) {
  int status = begin(FN_cuFileGetStatsLevel, NOT_AFTER_CLOSE);
  if (status) return status_of(status);
  if (!level) return status_of(CU_FILE_INVALID_VALUE);
  pthread_mutex_lock(&g_lock);
  *level = (int)g_size_params[P_profile_stats];
  pthread_mutex_unlock(&g_lock);
  return OK;
}

kvik__cufile_error cuFileStatsStart(void) {
  int status = begin(FN_cuFileStatsStart, NOT_AFTER_CLOSE);
  if (status) return status_of(status);
  pthread_mutex_lock(&g_lock);
  g_stats_state = STATS_RUNNING;
  pthread_mutex_unlock(&g_lock);
  return OK;
}

/* Stopped statistics keep their counts, for reading. */
kvik__cufile_error cuFileStatsStop(void) {
  int status = begin(FN_cuFileStatsStop, NOT_AFTER_CLOSE);
  if (status) return status_of(status);
  pthread_mutex_lock(&g_lock);
  if (g_stats_state == STATS_RUNNING) g_stats_state = STATS_STOPPED;
  pthread_mutex_unlock(&g_lock);
  return OK;
}

kvik__cufile_error cuFileStatsReset(void) {
  int status = begin(FN_cuFileStatsReset, NOT_AFTER_CLOSE);
  if (status) return status_of(status);
  pthread_mutex_lock(&g_lock);
  memset(&g_stats, 0, sizeof g_stats);
  pthread_mutex_unlock(&g_lock);
  return OK;
}

kvik__cufile_error cuFileGetStatsL1(kvik__cufile_stats1 *stats) {
  int status = begin(FN_cuFileGetStatsL1, NOT_AFTER_CLOSE);
  if (status) return status_of(status);
  pthread_mutex_lock(&g_lock);
  if (!stats || g_size_params[P_profile_stats] == 0 || g_stats_state == STATS_NEVER) status = CU_FILE_INVALID_VALUE;
  else *stats = g_stats;
  pthread_mutex_unlock(&g_lock);
  return status_of(status);
}

/* ---- The control API (fake_cufile.h) ------------------------------------------------------- */

/* Why a failure cannot be armed so, or NULL. */
static const char *unarmable(int fn, int nth, int status) {
  if (fn < 0) return "no such function in the fake cuFile";
  if (fn == FN_cuFileHandleDeregister || fn == FN_cuFileBatchIODestroy)
    return "it returns nothing, so cannot fail";
  if (nth < 0) return "nth must be 0 (every call) or more";
  return status == 0 ? "status 0 is success, not a failure" : NULL;
}

void fake_cufile_fail(const char *symbol, int nth, int status) {
  int fn = fake_name_index(fn_symbols, FN_COUNT, symbol);
  const char *why = unarmable(fn, nth, status);
  if (why)
    fake_die("fake_cufile_fail(\"%s\", %d, %d): %s", symbol ? symbol : "(null)", nth, status, why);
  fake_api_arm(&g_api, fn, nth, status);
}

long fake_cufile_calls(const char *symbol) {
  if (symbol && strcmp(symbol, "unaligned_io") == 0) return atomic_load(&g_unaligned);
  return fake_api_calls(&g_api, symbol);
}

long fake_cufile_live(const char *what) {
  if (what && strcmp(what, "driver") == 0) {
    pthread_mutex_lock(&g_lock);
    long open = g_state == OPEN;
    pthread_mutex_unlock(&g_lock);
    return open;
  }
  int i = fake_name_index(live_names, LIVE_COUNT, what);
  return i < 0 ? -1 : atomic_load(&g_live[i]);
}

void fake_cufile_reset(void) {
  fake_api_reset(&g_api);
  atomic_store(&g_unaligned, 0);
}
