/* A fake CUDA driver, built as libcuda.so.1, for testing kvik on machines without a GPU.
 *
 * It implements the part of the driver API that kvik calls (src/cuda.h) plus what tests need to
 * set up and check device memory, with the real driver's error codes. It is meant to be strict
 * where the real driver would misbehave silently:
 *
 *  - Device memory cannot be touched by the CPU. It lives in one big sparse memfd mapped twice:
 *    device pointers are addresses in a PROT_NONE view, so a CPU access crashes and pread() or
 *    pwrite() on one fails with EFAULT, as on a real GPU; the fake copies through a second,
 *    read-write view of the same pages. Freed ranges are punched out of the memfd, so tests with
 *    large allocations do not accumulate RAM.
 *  - Streams are asynchronous: each has a worker thread that runs its work in order, and every
 *    asynchronous copy first sleeps FAKE_CUDA_COPY_DELAY_US (default 200) microseconds and reads
 *    its source only then, so that a buffer reused before its copy finished gives wrong data.
 *  - Handles are checked against registries of live streams, events and contexts, so that a
 *    stale or bogus handle gives CUDA_ERROR_INVALID_HANDLE (or _CONTEXT) instead of a crash.
 *
 * Locks: g_lock guards the registries (allocation records, streams, events, contexts); each
 * stream and event has its own lock for its queue and state; g_arena_lock guards the free list
 * of device memory; g_api.lock (fake_common.h) the armed failures. No lock is held while taking
 * g_lock, and none at all while a stream runs its work (a host function may call back into the
 * fake). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create, fallocate, pthread_setname_np */
#endif
#include "fake_cuda.h"
#include "fake_common.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ---- The driver API this file exports ----------------------------------------------------- */

/* src/cuda.h's functions and fake_cuda.h's extras, declared under their symbols (cuMemAlloc_v2,
 * ...) and counted and failed by those names (fake_common.h). */
#define ALL_FUNCTIONS(X) KVIK__CUDA_FUNCTIONS(X) FAKE_CUDA_EXTRA_FUNCTIONS(X)
ALL_FUNCTIONS(FAKE_DECLARE)

typedef enum fn_id { ALL_FUNCTIONS(FAKE_FN_ID) FN_COUNT } fn_id;
static const char *const fn_symbols[FN_COUNT] = {ALL_FUNCTIONS(FAKE_FN_SYMBOL)};

/* ---- Call counting and fault injection ---------------------------------------------------- */

const char fake_name[] = "fake_cuda";
static fake_api g_api = FAKE_API_INIT(fn_symbols, FN_COUNT);
_Static_assert(FN_COUNT <= FAKE_MAX_FUNCTIONS, "raise FAKE_MAX_FUNCTIONS");
static atomic_long g_copies_beside; /* see fake_cuda_copies_beside_registration() */
static atomic_long g_spinning_waits; /* see fake_cuda_spinning_waits() */
static atomic_long g_cross_device;  /* see fake_cuda_cross_device_copies() */
static atomic_long g_read_only_calls; /* see fake_cuda_read_only_registrations() */

static atomic_int g_initialized;

/* ---- The rules of host functions and of calls that wait for the device ------------------
 *
 * A host function (cuLaunchHostFunc) may make no driver call: each one fails with
 * CUDA_ERROR_NOT_PERMITTED. A call that waits for the device (cuMemFree, cuCtxSynchronize, module
 * loads and unloads, and the zero-copy path's read-only cuMemHostRegister, which the real driver
 * was seen to hold behind a stream) waits until every stream has run all the work queued on it,
 * host functions included, and every other driver call waits while one of them does. That is how
 * the real driver hangs a process whose stream waits for a thread that makes driver calls (issue
 * 24), so here it hangs the same way (the tests' watchdogs turn that into a failure). Work the
 * driver queues for itself (fake cuFile's transfers, fake_cuda_launch_driver_work) is exempt from
 * both. */
static _Thread_local int t_in_host_fn, t_in_driver_work;
static pthread_mutex_t g_gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cond = PTHREAD_COND_INITIALIZER;
static atomic_int g_device_waits; /* calls waiting for the device now */

static CUresult gate(void) {
  if (t_in_host_fn) return CUDA_ERROR_NOT_PERMITTED;
  if (t_in_driver_work || !atomic_load(&g_device_waits)) return CUDA_SUCCESS;
  pthread_mutex_lock(&g_gate_lock);
  while (atomic_load(&g_device_waits)) pthread_cond_wait(&g_gate_cond, &g_gate_lock);
  pthread_mutex_unlock(&g_gate_lock);
  return CUDA_SUCCESS;
}

/* The prologue of every exported driver function: count the call, return an armed failure
 * without doing anything, refuse to work before cuInit as the real driver does, and keep the
 * rules above. */
#define ENTER(name)                                                                            \
  do {                                                                                         \
    CUresult enter_ = fake_api_call(&g_api, FN_##name);                                        \
    if (enter_ != CUDA_SUCCESS) return enter_;                                                 \
    if (!atomic_load(&g_initialized)) return CUDA_ERROR_NOT_INITIALIZED;                       \
    if ((enter_ = gate()) != CUDA_SUCCESS) return enter_;                                      \
  } while (0)

/* For the few functions the real driver serves before cuInit. */
#define ENTER_BEFORE_INIT(name)                                                                \
  do {                                                                                         \
    CUresult enter_ = fake_api_call(&g_api, FN_##name);                                        \
    if (enter_ != CUDA_SUCCESS) return enter_;                                                 \
  } while (0)

void fake_cuda_fail(const char *symbol, int nth, int error) {
  int fn = fake_name_index(fn_symbols, FN_COUNT, symbol);
  if (fn < 0 || nth < 1)
    fake_die("fake_cuda_fail(\"%s\", %d): %s", symbol ? symbol : "(null)", nth,
             fn < 0 ? "no such function in the fake driver" : "nth must be 1 or more");
  fake_api_arm(&g_api, fn, nth, error);
}

long fake_cuda_calls(const char *symbol) { return fake_api_calls(&g_api, symbol); }

void fake_cuda_reset(void) {
  fake_api_reset(&g_api);
  atomic_store(&g_copies_beside, 0);
  atomic_store(&g_spinning_waits, 0);
  atomic_store(&g_cross_device, 0);
  atomic_store(&g_read_only_calls, 0);
}

/* ---- Live counts -------------------------------------------------------------------------- */

typedef enum live_kind {
  LIVE_DEVICE, LIVE_PINNED, LIVE_REGISTERED, LIVE_READ_ONLY, LIVE_STREAMS, LIVE_EVENTS,
  LIVE_CONTEXTS, LIVE_PRIMARY, LIVE_POOLS, LIVE_COUNT
} live_kind;

static const char *const live_names[LIVE_COUNT] = {
    "device", "pinned", "registered", "read-only", "streams", "events", "contexts", "primary",
    "pools"};
static atomic_long g_live[LIVE_COUNT];

long fake_cuda_live(const char *what) {
  int i = fake_name_index(live_names, LIVE_COUNT, what);
  return i < 0 ? -1 : atomic_load(&g_live[i]);
}

/* ---- Errors ------------------------------------------------------------------------------- */

/* The names and texts of the real driver for the codes the fake or kvik's tests use. */
#define FAKE_ERRORS(X)                                                                         \
  X(0, CUDA_SUCCESS, "no error")                                                               \
  X(1, CUDA_ERROR_INVALID_VALUE, "invalid argument")                                           \
  X(2, CUDA_ERROR_OUT_OF_MEMORY, "out of memory")                                              \
  X(3, CUDA_ERROR_NOT_INITIALIZED, "initialization error")                                     \
  X(4, CUDA_ERROR_DEINITIALIZED, "driver shutting down")                                       \
  X(34, CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library")                              \
  X(46, CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA-capable device(s) is/are busy or unavailable")     \
  X(100, CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected")                           \
  X(101, CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal")                                  \
  X(201, CUDA_ERROR_INVALID_CONTEXT, "invalid device context")                                 \
  X(304, CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS")  \
  X(400, CUDA_ERROR_INVALID_HANDLE, "invalid resource handle")                                 \
  X(401, CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state")   \
  X(600, CUDA_ERROR_NOT_READY, "device not ready")                                             \
  X(700, CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered")               \
  X(709, CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed")                              \
  X(712, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,                                            \
    "part or all of the requested memory range is already mapped")                            \
  X(713, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,                                                \
    "pointer does not correspond to a registered memory region")                              \
  X(719, CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure")                               \
  X(800, CUDA_ERROR_NOT_PERMITTED, "operation not permitted")                                  \
  X(801, CUDA_ERROR_NOT_SUPPORTED, "operation not supported")                                  \
  X(803, CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,                                                    \
    "system has unsupported display driver / cuda driver combination")                        \
  X(999, CUDA_ERROR_UNKNOWN, "unknown error")

typedef struct error_info {
  CUresult code;
  const char *name, *text;
} error_info;

static const error_info errors[] = {
#define ERROR_ENTRY_(code, name, text) {code, #name, text},
    FAKE_ERRORS(ERROR_ENTRY_)
#undef ERROR_ENTRY_
};

static const error_info *error_find(CUresult code) {
  for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
    if (errors[i].code == code) return &errors[i];
  return NULL;
}

/* Like the real driver: CUDA_ERROR_INVALID_VALUE and a NULL string for an unknown code. */
CUresult cuGetErrorName(CUresult error, const char **name) {
  ENTER_BEFORE_INIT(cuGetErrorName);
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  const error_info *info = error_find(error);
  *name = info ? info->name : NULL;
  return info ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **text) {
  ENTER_BEFORE_INIT(cuGetErrorString);
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  const error_info *info = error_find(error);
  *text = info ? info->text : NULL;
  return info ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuDriverGetVersion(int *version) {
  ENTER_BEFORE_INIT(cuDriverGetVersion);
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = 13000;
  return CUDA_SUCCESS;
}

/* ---- Device memory: one sparse memfd, seen by the CPU only through the fake's own view ----- */

#define ARENA_BYTES ((size_t)64 << 30)
#define DEVICE_ALIGN ((size_t)4096)

typedef struct extent {
  size_t offset, length;
} extent;

static int g_arena_fd = -1;
static unsigned char *g_device_view; /* PROT_NONE: its addresses are the device pointers */
static unsigned char *g_cpu_view;    /* the same pages, read-write, for the fake's copies */
static pthread_mutex_t g_arena_lock = PTHREAD_MUTEX_INITIALIZER;
static extent *g_free;               /* free extents of the memfd, sorted by offset */
static size_t g_nfree, g_free_cap;

static int arena_setup(void) {
  g_arena_fd = memfd_create("fake-cuda-device-memory", MFD_CLOEXEC);
  if (g_arena_fd < 0) return -1;
  /* Sparse: pages exist only once written, and punched holes give them back. */
  if (ftruncate(g_arena_fd, (off_t)ARENA_BYTES) != 0) return -1;
  void *device = mmap(NULL, ARENA_BYTES, PROT_NONE, MAP_SHARED | MAP_NORESERVE, g_arena_fd, 0);
  if (device == MAP_FAILED) return -1;
  void *cpu = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, g_arena_fd, 0);
  if (cpu == MAP_FAILED) return -1;
  g_free = malloc(16 * sizeof *g_free);
  if (!g_free) return -1;
  g_device_view = device;
  g_cpu_view = cpu;
  g_free[0] = (extent){0, ARENA_BYTES};
  g_nfree = 1;
  g_free_cap = 16;
  return 0;
}

static int in_device_view(uintptr_t start, size_t size) {
  uintptr_t base = (uintptr_t)g_device_view;
  return g_device_view && start < base + ARENA_BYTES && start + size > base;
}

/* First fit. Returns the offset of `length` bytes (a multiple of DEVICE_ALIGN), or -1. */
static long long arena_alloc(size_t length) {
  long long offset = -1;
  pthread_mutex_lock(&g_arena_lock);
  for (size_t i = 0; i < g_nfree; i++) {
    if (g_free[i].length < length) continue;
    offset = (long long)g_free[i].offset;
    g_free[i].offset += length;
    g_free[i].length -= length;
    if (g_free[i].length == 0) {
      memmove(&g_free[i], &g_free[i + 1], (g_nfree - i - 1) * sizeof *g_free);
      g_nfree--;
    }
    break;
  }
  pthread_mutex_unlock(&g_arena_lock);
  return offset;
}

/* Give the pages back to the system, then the range back to the free list, merged with its
 * neighbours. */
static void arena_free(size_t offset, size_t length) {
  if (fallocate(g_arena_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset, (off_t)length) != 0)
    fprintf(stderr, "fake_cuda: punching a hole in device memory: %s\n", strerror(errno));
  pthread_mutex_lock(&g_arena_lock);
  size_t i = 0;
  while (i < g_nfree && g_free[i].offset < offset) i++;
  int joins_prev = i > 0 && g_free[i - 1].offset + g_free[i - 1].length == offset;
  int joins_next = i < g_nfree && offset + length == g_free[i].offset;
  if (joins_prev && joins_next) {
    g_free[i - 1].length += length + g_free[i].length;
    memmove(&g_free[i], &g_free[i + 1], (g_nfree - i - 1) * sizeof *g_free);
    g_nfree--;
  } else if (joins_prev) {
    g_free[i - 1].length += length;
  } else if (joins_next) {
    g_free[i].offset = offset;
    g_free[i].length += length;
  } else {
    if (g_nfree == g_free_cap) {
      extent *grown = realloc(g_free, 2 * g_free_cap * sizeof *g_free);
      if (!grown) { /* the range is lost to later allocations, nothing worse */
        pthread_mutex_unlock(&g_arena_lock);
        return;
      }
      g_free = grown;
      g_free_cap *= 2;
    }
    memmove(&g_free[i + 1], &g_free[i], (g_nfree - i) * sizeof *g_free);
    g_free[i] = (extent){offset, length};
    g_nfree++;
  }
  pthread_mutex_unlock(&g_arena_lock);
}

/* ---- Allocation records: what cuPointerGetAttributes and the copies look up --------------- */

typedef enum mem_kind {
  KIND_DEVICE = 1,     /* cuMemAlloc */
  KIND_POOL = 2,       /* cuMemAllocAsync: no context, as with the real stream-ordered pools */
  KIND_MANAGED = 4,    /* cuMemAllocManaged: ordinary host memory, reported as device memory */
  KIND_PINNED = 8,     /* cuMemHostAlloc */
  KIND_REGISTERED = 16 /* cuMemHostRegister */
} mem_kind;

#define KINDS_ON_DEVICE (KIND_DEVICE | KIND_POOL | KIND_MANAGED)

typedef struct record {
  uintptr_t start;
  size_t size;
  size_t reserved; /* bytes of the arena extent or mapping behind it */
  mem_kind kind;
  CUcontext ctx;
  CUdevice device;
  unsigned char *cpu; /* where the fake itself reads and writes byte 0 */
  atomic_int refs;    /* one for the registry, one per queued operation that uses it */
  int freeing;        /* cuMemFreeAsync called; g_lock. Still found (by work queued before the
                       * free, as the real driver allows) until the stream reaches the free. */
  int read_only;      /* registered with CU_MEMHOSTREGISTER_READ_ONLY */
} record;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static record **g_records; /* live allocations and registrations, guarded by g_lock */
static size_t g_nrecords, g_records_cap;

/* The record whose range holds addr and whose kind is in `kinds`; g_lock held. */
static record *record_find(uintptr_t addr, int kinds) {
  for (size_t i = 0; i < g_nrecords; i++) {
    record *r = g_records[i];
    if ((r->kind & kinds) && addr >= r->start && addr - r->start < r->size) return r;
  }
  return NULL;
}

/* Remove the record of kind in `kinds` that starts exactly at addr; NULL if there is none. */
static record *record_take(uintptr_t addr, int kinds) {
  record *found = NULL;
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_nrecords; i++) {
    if (g_records[i]->start == addr && (g_records[i]->kind & kinds) && !g_records[i]->freeing) {
      found = g_records[i];
      g_records[i] = g_records[--g_nrecords];
      break;
    }
  }
  pthread_mutex_unlock(&g_lock);
  return found;
}

/* Mark the record of kind in `kinds` that starts exactly at addr as freeing (record_take's
 * search, for cuMemFreeAsync); NULL if there is none, or it is being freed already. */
static record *record_mark_freeing(uintptr_t addr, int kinds) {
  record *found = NULL;
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_nrecords && !found; i++)
    if (g_records[i]->start == addr && (g_records[i]->kind & kinds) && !g_records[i]->freeing)
      found = g_records[i], found->freeing = 1;
  pthread_mutex_unlock(&g_lock);
  return found;
}

/* Remove record r from the registry, once a stream reached its cuMemFreeAsync. */
static void record_remove(record *r) {
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_nrecords; i++)
    if (g_records[i] == r) {
      g_records[i] = g_records[--g_nrecords];
      break;
    }
  pthread_mutex_unlock(&g_lock);
}

/* g_lock held. */
static int record_add(record *r) {
  if (g_nrecords == g_records_cap) {
    size_t cap = g_records_cap ? 2 * g_records_cap : 64;
    record **grown = realloc(g_records, cap * sizeof *grown);
    if (!grown) return -1;
    g_records = grown;
    g_records_cap = cap;
  }
  g_records[g_nrecords++] = r;
  return 0;
}

/* Drop a reference; the last one releases the memory behind the record. The registry drops its
 * reference at free time, but a copy still queued keeps the range from being reused under it. */
static void record_put(record *r) {
  if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
  if (r->kind == KIND_DEVICE || r->kind == KIND_POOL)
    arena_free((size_t)(r->start - (uintptr_t)g_device_view), r->reserved);
  else if (r->kind == KIND_MANAGED || r->kind == KIND_PINNED)
    munmap((void *)r->start, r->reserved);
  free(r);
}

static live_kind live_of(mem_kind kind) {
  return kind == KIND_PINNED ? LIVE_PINNED : kind == KIND_REGISTERED ? LIVE_REGISTERED : LIVE_DEVICE;
}

static record *record_make(uintptr_t start, size_t size, size_t reserved, mem_kind kind,
                           CUcontext ctx, CUdevice device, unsigned char *cpu) {
  record *r = malloc(sizeof *r);
  if (!r) return NULL;
  r->start = start;
  r->size = size;
  r->reserved = reserved;
  r->kind = kind;
  r->ctx = ctx;
  r->device = device;
  r->cpu = cpu;
  r->freeing = 0;
  r->read_only = 0;
  atomic_init(&r->refs, 1);
  return r;
}

/* Register a new record for [start, start + size); g_lock not held. */
static CUresult record_new(uintptr_t start, size_t size, size_t reserved, mem_kind kind,
                           CUcontext ctx, CUdevice device, unsigned char *cpu) {
  record *r = record_make(start, size, reserved, kind, ctx, device, cpu);
  if (!r) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_lock);
  int failed = record_add(r);
  pthread_mutex_unlock(&g_lock);
  if (failed) {
    free(r);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  atomic_fetch_add(&g_live[live_of(kind)], 1);
  return CUDA_SUCCESS;
}

/* Free an allocation of a kind in `kinds` that starts at addr. */
static CUresult record_free(uintptr_t addr, int kinds, CUresult not_found) {
  record *r = record_take(addr, kinds);
  if (!r) return not_found;
  atomic_fetch_sub(&g_live[live_of(r->kind)], 1);
  if (r->read_only) atomic_fetch_sub(&g_live[LIVE_READ_ONLY], 1);
  record_put(r);
  return CUDA_SUCCESS;
}

/* ---- Contexts ----------------------------------------------------------------------------- */

#define MAX_DEVICES 64
#define CTX_STACK_MAX 128

struct CUctx_st {
  unsigned long long id;    /* unique for the life of the process, as cuCtxGetId promises */
  CUdevice device;
  int primary;
  atomic_int destroyed;
  int primary_refs;         /* retains not yet released; g_lock */
  CUstream default_stream;  /* made on first use; g_lock */
  struct CUctx_st *next;    /* in g_created */
};

static int g_device_count;
static long g_copy_delay_us;
static long g_queue_depth; /* operations a stream holds before a call that queues one waits */
static struct CUctx_st g_primary[MAX_DEVICES];
/* Contexts of cuCtxCreate. They are never freed, only marked destroyed, so that a handle that
 * outlived its context is still recognised and answered with an error. */
static struct CUctx_st *g_created;

/* The real driver's stack of current contexts: per thread, empty in a new thread. */
static _Thread_local struct {
  CUcontext ctx[CTX_STACK_MAX];
  int depth;
} t_stack;

static int device_valid(CUdevice device) { return device >= 0 && device < g_device_count; }

/* Whether ctx is a context of this driver, destroyed or not. */
static int ctx_known(CUcontext ctx) {
  if (!ctx) return 0;
  for (int i = 0; i < g_device_count; i++)
    if (ctx == &g_primary[i]) return 1;
  pthread_mutex_lock(&g_lock);
  struct CUctx_st *c = g_created;
  while (c && c != ctx) c = c->next;
  pthread_mutex_unlock(&g_lock);
  return c != NULL;
}

static CUresult ctx_check(CUcontext ctx) {
  if (!ctx_known(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  return atomic_load(&ctx->destroyed) ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_SUCCESS;
}

/* The calling thread's current context, which most calls need. */
static CUresult current_ctx(CUcontext *ctx) {
  if (t_stack.depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  *ctx = t_stack.ctx[t_stack.depth - 1];
  return atomic_load(&(*ctx)->destroyed) ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_SUCCESS;
}

static CUresult stack_push(CUcontext ctx) {
  if (t_stack.depth == CTX_STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
  t_stack.ctx[t_stack.depth++] = ctx;
  return CUDA_SUCCESS;
}

CUresult cuInit(unsigned flags) {
  ENTER_BEFORE_INIT(cuInit);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult result = CUDA_SUCCESS;
  pthread_mutex_lock(&g_lock);
  if (!atomic_load(&g_initialized)) {
    int devices = (int)fake_env_long("FAKE_CUDA_DEVICES", 1, MAX_DEVICES);
    g_copy_delay_us = fake_env_long("FAKE_CUDA_COPY_DELAY_US", 200, 60L * 1000 * 1000);
    g_queue_depth = fake_env_long("FAKE_CUDA_QUEUE_DEPTH", 1024, 1L << 30);
    if (devices == 0) {
      result = CUDA_ERROR_NO_DEVICE;
    } else if (!g_device_view && arena_setup() != 0) {
      fprintf(stderr, "fake_cuda: cannot set up device memory: %s\n", strerror(errno));
      result = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
      g_device_count = devices;
      for (int i = 0; i < devices; i++) {
        g_primary[i].id = (unsigned long long)i + 1;
        g_primary[i].device = i;
        g_primary[i].primary = 1;
      }
      atomic_store(&g_initialized, 1);
    }
  }
  pthread_mutex_unlock(&g_lock);
  return result;
}

CUresult cuDeviceGetCount(int *count) {
  ENTER(cuDeviceGetCount);
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = g_device_count;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  ENTER(cuDeviceGet);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!device_valid(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice device) {
  ENTER(cuDeviceGetName);
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!device_valid(device)) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, (size_t)len, "Fake CUDA Device %d", device);
  return CUDA_SUCCESS;
}

/* FAKE_CUDA_PCI_BUS_IDS, comma-separated, names device n's bus id by the nth entry; the others
 * get "0000:<0x80 + n>:00.0", which no machine of CI has in /sys/bus/pci/devices. */
CUresult cuDeviceGetPCIBusId(char *bus_id, int len, CUdevice device) {
  ENTER(cuDeviceGetPCIBusId);
  if (!bus_id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!device_valid(device)) return CUDA_ERROR_INVALID_DEVICE;
  const char *ids = getenv("FAKE_CUDA_PCI_BUS_IDS");
  for (int n = 0; ids && n < device; n++) {
    ids = strchr(ids, ',');
    if (ids) ids++;
  }
  if (ids && *ids && *ids != ',')
    snprintf(bus_id, (size_t)len, "%.*s", (int)strcspn(ids, ","), ids);
  else snprintf(bus_id, (size_t)len, "0000:%02x:00.0", 0x80 + device);
  return CUDA_SUCCESS;
}

/* Every fake device has the size of the arena that holds all their memory. */
CUresult cuDeviceTotalMem(size_t *bytes, CUdevice device) {
  ENTER(cuDeviceTotalMem);
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!device_valid(device)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = ARENA_BYTES;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) {
  ENTER(cuDevicePrimaryCtxRetain);
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  if (!device_valid(device)) return CUDA_ERROR_INVALID_DEVICE;
  pthread_mutex_lock(&g_lock);
  g_primary[device].primary_refs++;
  pthread_mutex_unlock(&g_lock);
  atomic_fetch_add(&g_live[LIVE_PRIMARY], 1);
  *ctx = &g_primary[device];
  return CUDA_SUCCESS;
}

/* The real driver resets the primary context when its last reference goes; the fake keeps it
 * usable and only counts, so that fake_cuda_live("primary") shows unbalanced retains. */
CUresult cuDevicePrimaryCtxRelease(CUdevice device) {
  ENTER(cuDevicePrimaryCtxRelease);
  if (!device_valid(device)) return CUDA_ERROR_INVALID_DEVICE;
  CUresult result = CUDA_SUCCESS;
  pthread_mutex_lock(&g_lock);
  if (g_primary[device].primary_refs == 0) result = CUDA_ERROR_INVALID_CONTEXT;
  else g_primary[device].primary_refs--;
  pthread_mutex_unlock(&g_lock);
  if (result == CUDA_SUCCESS) atomic_fetch_sub(&g_live[LIVE_PRIMARY], 1);
  return result;
}

CUresult cuCtxCreate(CUcontext *ctx, unsigned flags, CUdevice device) {
  ENTER(cuCtxCreate);
  (void)flags; /* scheduling flags mean nothing to the fake */
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  if (!device_valid(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (t_stack.depth == CTX_STACK_MAX) return CUDA_ERROR_OUT_OF_MEMORY;
  struct CUctx_st *c = calloc(1, sizeof *c);
  if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
  static unsigned long long next_id = MAX_DEVICES + 1;
  c->device = device;
  pthread_mutex_lock(&g_lock);
  c->id = next_id++;
  c->next = g_created;
  g_created = c;
  pthread_mutex_unlock(&g_lock);
  atomic_fetch_add(&g_live[LIVE_CONTEXTS], 1);
  stack_push(c);
  *ctx = c;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *ctx) {
  ENTER(cuCtxGetCurrent);
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = t_stack.depth ? t_stack.ctx[t_stack.depth - 1] : NULL;
  return CUDA_SUCCESS;
}

/* Replaces the top of the stack; NULL pops it (a no-op on an empty stack). */
CUresult cuCtxSetCurrent(CUcontext ctx) {
  ENTER(cuCtxSetCurrent);
  if (!ctx) {
    if (t_stack.depth) t_stack.depth--;
    return CUDA_SUCCESS;
  }
  CUresult result = ctx_check(ctx);
  if (result != CUDA_SUCCESS) return result;
  if (t_stack.depth == 0) return stack_push(ctx);
  t_stack.ctx[t_stack.depth - 1] = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent(CUcontext ctx) {
  ENTER(cuCtxPushCurrent);
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  CUresult result = ctx_check(ctx);
  return result != CUDA_SUCCESS ? result : stack_push(ctx);
}

CUresult cuCtxPopCurrent(CUcontext *ctx) {
  ENTER(cuCtxPopCurrent);
  if (t_stack.depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  CUcontext top = t_stack.ctx[--t_stack.depth];
  if (ctx) *ctx = top;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice *device) {
  ENTER(cuCtxGetDevice);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx;
  CUresult result = current_ctx(&ctx);
  if (result == CUDA_SUCCESS) *device = ctx->device;
  return result;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id) {
  ENTER(cuCtxGetId);
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  CUresult result = ctx ? ctx_check(ctx) : current_ctx(&ctx);
  if (result == CUDA_SUCCESS) *id = ctx->id;
  return result;
}

/* ---- Streams: a worker thread each, running queued operations in order -------------------- */

typedef enum op_kind {
  OP_COPY,        /* memcpy after the copy delay */
  OP_FILL,        /* cuMemsetD8Async: memset after the copy delay */
  OP_HOST_FN,     /* cuLaunchHostFunc */
  OP_DRIVER_WORK, /* fake_cuda_launch_driver_work: a host function that may call the driver */
  OP_EVENT,       /* cuEventRecord: marks the event reached */
  OP_RELEASE,     /* cuMemFreeAsync: unregisters the memory, once earlier work ran */
  OP_WAIT_VALUE,  /* cuStreamWaitValue32: polls *word until it is at least `value` */
  OP_WRITE_VALUE  /* cuStreamWriteValue32 */
} op_kind;

typedef struct op {
  struct op *next;
  op_kind kind;
  void *dst; /* OP_COPY */
  const void *src;
  size_t size;
  CUhostFn fn; /* OP_HOST_FN, OP_DRIVER_WORK */
  void *user_data;
  _Atomic uint32_t *word; /* OP_WAIT_VALUE, OP_WRITE_VALUE */
  uint32_t value;
  CUevent event; /* OP_EVENT, with a reference */
  unsigned long long generation;
  CUdevice device; /* OP_COPY, OP_FILL: the device of the stream's context */
  record *holds[2]; /* records kept alive until the operation ran */
} op;

struct CUstream_st {
  pthread_mutex_t lock;
  pthread_cond_t work; /* an operation was queued, or the stream is closing */
  pthread_cond_t done; /* an operation has run */
  op *head, *tail;
  unsigned long long queued, completed;
  int closing;
  atomic_int refs; /* one for the registry, one per caller using it right now */
  CUcontext ctx;
  int is_default;
  pthread_t worker;
};

struct CUevent_st {
  pthread_mutex_t lock;
  pthread_cond_t reached_cond;
  unsigned long long recorded; /* generation of the latest cuEventRecord */
  unsigned long long reached;  /* latest generation whose marker has run */
  atomic_int refs;             /* one for the registry, one per queued marker */
  CUcontext ctx;
  unsigned flags; /* of cuEventCreate */
};

/* The live handles, guarded by g_lock: a handle is looked up here before it is used, so a stale
 * or bogus one is an error rather than a crash. */
static fake_list g_streams; /* default streams included */
static fake_list g_events;

static void event_put(CUevent event);

/* Devices whose copies wait (fake_cuda_hold_copies); g_hold_lock. */
static pthread_mutex_t g_hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_hold_cond = PTHREAD_COND_INITIALIZER;
static int g_held[MAX_DEVICES];

void fake_cuda_hold_copies(int device, int hold) {
  if (device < 0 || device >= MAX_DEVICES)
    fake_die("fake_cuda_hold_copies(%d, %d): no such device", device, hold);
  pthread_mutex_lock(&g_hold_lock);
  g_held[device] = hold != 0;
  pthread_cond_broadcast(&g_hold_cond);
  pthread_mutex_unlock(&g_hold_lock);
}

static void wait_while_held(CUdevice device) {
  pthread_mutex_lock(&g_hold_lock);
  while (g_held[device]) pthread_cond_wait(&g_hold_cond, &g_hold_lock);
  pthread_mutex_unlock(&g_hold_lock);
}

static void stream_put(CUstream s) {
  if (atomic_fetch_sub(&s->refs, 1) != 1) return;
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->work);
  pthread_cond_destroy(&s->done);
  free(s);
}

static void op_run(op *o) {
  switch (o->kind) {
  case OP_COPY:
    wait_while_held(o->device);
    fake_sleep_us(g_copy_delay_us);
    memcpy(o->dst, o->src, o->size);
    break;
  case OP_FILL:
    wait_while_held(o->device);
    fake_sleep_us(g_copy_delay_us);
    memset(o->dst, (int)o->value, o->size);
    break;
  case OP_HOST_FN:
    t_in_host_fn = 1;
    o->fn(o->user_data);
    t_in_host_fn = 0;
    break;
  case OP_DRIVER_WORK:
    t_in_driver_work = 1;
    o->fn(o->user_data);
    t_in_driver_work = 0;
    break;
  case OP_WAIT_VALUE:
    while (atomic_load(o->word) < o->value) fake_sleep_us(20);
    break;
  case OP_WRITE_VALUE:
    atomic_store(o->word, o->value);
    break;
  case OP_EVENT:
    pthread_mutex_lock(&o->event->lock);
    if (o->generation > o->event->reached) o->event->reached = o->generation;
    pthread_cond_broadcast(&o->event->reached_cond);
    pthread_mutex_unlock(&o->event->lock);
    event_put(o->event);
    break;
  case OP_RELEASE:
    record_remove(o->holds[0]);
    break;
  }
  record_put(o->holds[0]);
  record_put(o->holds[1]);
  free(o);
}

static void *stream_worker(void *arg) {
  CUstream s = arg;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->closing) pthread_cond_wait(&s->work, &s->lock);
    op *o = s->head;
    if (!o) break; /* closing, and nothing left to run */
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    pthread_mutex_unlock(&s->lock);
    op_run(o);
    pthread_mutex_lock(&s->lock);
    s->completed++;
    pthread_cond_broadcast(&s->done);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

/* Run what is queued, end the worker and drop the registry's reference; s must already be out
 * of the registry. */
static void stream_close(CUstream s) {
  pthread_mutex_lock(&s->lock);
  s->closing = 1;
  pthread_cond_signal(&s->work);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->worker, NULL);
  stream_put(s);
}

/* A new stream of ctx, registered, with its worker running. */
static CUresult stream_new(CUcontext ctx, int is_default, CUstream *out) {
  CUstream s = calloc(1, sizeof *s);
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->work, NULL);
  pthread_cond_init(&s->done, NULL);
  atomic_init(&s->refs, 1);
  s->ctx = ctx;
  s->is_default = is_default;
  if (pthread_create(&s->worker, NULL, stream_worker, s) != 0) {
    stream_put(s);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  pthread_setname_np(s->worker, is_default ? "fake-cuda-dflt" : "fake-cuda-strm");
  pthread_mutex_lock(&g_lock);
  int failed = fake_list_add(&g_streams, s);
  pthread_mutex_unlock(&g_lock);
  if (failed) {
    stream_close(s); /* nothing was queued: this only ends the worker */
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = s;
  return CUDA_SUCCESS;
}

static int is_default_handle(CUstream handle) {
  return handle == NULL || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD;
}

/* The default stream of ctx, made on first use, with a reference for the caller. */
static CUresult default_stream(CUcontext ctx, CUstream *out) {
  pthread_mutex_lock(&g_lock);
  CUstream s = ctx->default_stream;
  if (s) atomic_fetch_add(&s->refs, 1);
  pthread_mutex_unlock(&g_lock);
  if (s) {
    *out = s;
    return CUDA_SUCCESS;
  }
  CUresult result = stream_new(ctx, 1, &s);
  if (result != CUDA_SUCCESS) return result;
  pthread_mutex_lock(&g_lock);
  int lost = ctx->default_stream != NULL; /* another thread made it first: ours was never used */
  if (lost) fake_list_remove(&g_streams, s);
  else ctx->default_stream = s;
  CUstream winner = ctx->default_stream;
  atomic_fetch_add(&winner->refs, 1);
  pthread_mutex_unlock(&g_lock);
  if (lost) stream_close(s);
  *out = winner;
  return CUDA_SUCCESS;
}

/* Resolve a stream handle to a stream with a reference for the caller (stream_put it). The
 * default handles (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) mean the current context's
 * default stream and need a current context; others must be live streams. */
static CUresult stream_get(CUstream handle, CUstream *out) {
  if (is_default_handle(handle)) {
    CUcontext ctx;
    CUresult result = current_ctx(&ctx);
    return result != CUDA_SUCCESS ? result : default_stream(ctx, out);
  }
  pthread_mutex_lock(&g_lock);
  /* Default streams are in the set too, but their handles are never given out. */
  int found = fake_list_find(&g_streams, handle) >= 0 && !handle->is_default;
  if (found) atomic_fetch_add(&handle->refs, 1);
  pthread_mutex_unlock(&g_lock);
  if (found) *out = handle;
  return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* Queue o on s; on failure (the stream is being destroyed) o is not queued. As with the real
 * driver, whose streams hold about a thousand operations, a full stream makes the call wait until
 * the stream ran some (0: no bound). */
static CUresult stream_enqueue(CUstream s, op *o) {
  pthread_mutex_lock(&s->lock);
  while (g_queue_depth && s->queued - s->completed >= (unsigned long long)g_queue_depth && !s->closing)
    pthread_cond_wait(&s->done, &s->lock);
  int closing = s->closing;
  if (!closing) {
    o->next = NULL;
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    s->queued++;
    pthread_cond_signal(&s->work);
  }
  pthread_mutex_unlock(&s->lock);
  return closing ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

/* Wait until everything queued on s before this call has run. */
static void stream_wait(CUstream s) {
  pthread_mutex_lock(&s->lock);
  unsigned long long target = s->queued;
  while (s->completed < target) pthread_cond_wait(&s->done, &s->lock);
  pthread_mutex_unlock(&s->lock);
}

CUresult cuStreamCreate(CUstream *stream, unsigned flags) {
  ENTER(cuStreamCreate);
  if (!stream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx;
  CUresult result = current_ctx(&ctx);
  if (result == CUDA_SUCCESS) result = stream_new(ctx, 0, stream);
  if (result == CUDA_SUCCESS) atomic_fetch_add(&g_live[LIVE_STREAMS], 1);
  return result;
}

/* Unlike the real driver, which returns at once and frees the stream once its work is done,
 * this waits for the queued work: the visible outcome is the same. */
CUresult cuStreamDestroy(CUstream stream) {
  ENTER(cuStreamDestroy);
  if (is_default_handle(stream)) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&g_lock);
  int found = fake_list_find(&g_streams, stream) >= 0 && !stream->is_default;
  if (found) fake_list_remove(&g_streams, stream);
  pthread_mutex_unlock(&g_lock);
  if (!found) return CUDA_ERROR_INVALID_HANDLE;
  atomic_fetch_sub(&g_live[LIVE_STREAMS], 1);
  stream_close(stream);
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream stream) {
  ENTER(cuStreamSynchronize);
  CUstream s;
  CUresult result = stream_get(stream, &s);
  if (result != CUDA_SUCCESS) return result;
  stream_wait(s);
  stream_put(s);
  return CUDA_SUCCESS;
}

CUresult cuStreamQuery(CUstream stream) {
  ENTER(cuStreamQuery);
  CUstream s;
  CUresult result = stream_get(stream, &s);
  if (result != CUDA_SUCCESS) return result;
  pthread_mutex_lock(&s->lock);
  int pending = s->completed < s->queued;
  pthread_mutex_unlock(&s->lock);
  stream_put(s);
  return pending ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult cuStreamGetCtx(CUstream stream, CUcontext *ctx) {
  ENTER(cuStreamGetCtx);
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  CUstream s;
  CUresult result = stream_get(stream, &s);
  if (result != CUDA_SUCCESS) return result;
  *ctx = s->ctx;
  stream_put(s);
  return CUDA_SUCCESS;
}

/* Wait until every stream (of every context: the device's work) has run what is queued on it,
 * while other driver calls wait (see gate()). */
static CUresult wait_for_device(void) {
  pthread_mutex_lock(&g_gate_lock);
  atomic_fetch_add(&g_device_waits, 1);
  pthread_mutex_unlock(&g_gate_lock);
  pthread_mutex_lock(&g_lock);
  size_t n = 0;
  CUstream *all = malloc((g_streams.n + 1) * sizeof *all);
  for (size_t i = 0; all && i < g_streams.n; i++) {
    CUstream s = g_streams.items[i];
    atomic_fetch_add(&s->refs, 1);
    all[n++] = s;
  }
  pthread_mutex_unlock(&g_lock);
  for (size_t i = 0; i < n; i++) {
    stream_wait(all[i]);
    stream_put(all[i]);
  }
  free(all);
  pthread_mutex_lock(&g_gate_lock);
  atomic_fetch_sub(&g_device_waits, 1);
  pthread_cond_broadcast(&g_gate_cond);
  pthread_mutex_unlock(&g_gate_lock);
  return all ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuCtxSynchronize(void) {
  ENTER(cuCtxSynchronize);
  CUcontext ctx;
  CUresult result = current_ctx(&ctx);
  return result != CUDA_SUCCESS ? result : wait_for_device();
}

/* Modules hold no code here: loading one only waits for the device, as the real driver's lazy
 * loading can (CUDA_MODULE_LOADING=LAZY). */
struct CUmod_st {
  int unused;
};

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  ENTER(cuModuleLoadData);
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx;
  CUresult result = current_ctx(&ctx);
  if (result == CUDA_SUCCESS) result = wait_for_device();
  if (result == CUDA_SUCCESS && !(*module = calloc(1, sizeof **module))) result = CUDA_ERROR_OUT_OF_MEMORY;
  return result;
}

CUresult cuModuleUnload(CUmodule module) {
  ENTER(cuModuleUnload);
  if (!module) return CUDA_ERROR_INVALID_HANDLE;
  CUresult result = wait_for_device();
  free(module);
  return result;
}

/* Waits for the context's work and ends its default stream. Allocations, streams and events
 * made in the context stay (the real driver frees them): the live counts show them as leaks. */
CUresult cuCtxDestroy(CUcontext ctx) {
  ENTER(cuCtxDestroy);
  if (!ctx_known(ctx) || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&g_lock);
  int already = atomic_exchange(&ctx->destroyed, 1);
  CUstream s = ctx->default_stream;
  ctx->default_stream = NULL;
  if (s) fake_list_remove(&g_streams, s);
  pthread_mutex_unlock(&g_lock);
  if (already) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (s) stream_close(s);
  atomic_fetch_sub(&g_live[LIVE_CONTEXTS], 1);
  if (t_stack.depth && t_stack.ctx[t_stack.depth - 1] == ctx) t_stack.depth--;
  return CUDA_SUCCESS;
}

/* ---- Events ------------------------------------------------------------------------------- */

static void event_put(CUevent event) {
  if (atomic_fetch_sub(&event->refs, 1) != 1) return;
  pthread_mutex_destroy(&event->lock);
  pthread_cond_destroy(&event->reached_cond);
  free(event);
}

/* A live event with a reference for the caller. */
static CUresult event_get(CUevent handle, CUevent *out) {
  pthread_mutex_lock(&g_lock);
  int found = fake_list_find(&g_events, handle) >= 0;
  if (found) atomic_fetch_add(&handle->refs, 1);
  pthread_mutex_unlock(&g_lock);
  if (found) *out = handle;
  return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuEventCreate(CUevent *event, unsigned flags) {
  ENTER(cuEventCreate);
  if (!event || (flags & ~7u)) return CUDA_ERROR_INVALID_VALUE; /* 1, 2, 4: the real flags */
  CUcontext ctx;
  CUresult result = current_ctx(&ctx);
  if (result != CUDA_SUCCESS) return result;
  CUevent e = calloc(1, sizeof *e);
  if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_init(&e->lock, NULL);
  pthread_cond_init(&e->reached_cond, NULL);
  atomic_init(&e->refs, 1);
  e->ctx = ctx;
  e->flags = flags;
  pthread_mutex_lock(&g_lock);
  int failed = fake_list_add(&g_events, e);
  pthread_mutex_unlock(&g_lock);
  if (failed) {
    event_put(e);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  atomic_fetch_add(&g_live[LIVE_EVENTS], 1);
  *event = e;
  return CUDA_SUCCESS;
}

/* As in the real driver, a marker still queued stays valid: it holds its own reference. */
CUresult cuEventDestroy(CUevent event) {
  ENTER(cuEventDestroy);
  pthread_mutex_lock(&g_lock);
  int found = fake_list_remove(&g_events, event);
  pthread_mutex_unlock(&g_lock);
  if (!found) return CUDA_ERROR_INVALID_HANDLE;
  atomic_fetch_sub(&g_live[LIVE_EVENTS], 1);
  event_put(event);
  return CUDA_SUCCESS;
}

/* Each record starts a new generation; the event is complete once the marker of its latest
 * generation has run, so re-recording makes a completed event pending again. */
CUresult cuEventRecord(CUevent event, CUstream stream) {
  ENTER(cuEventRecord);
  CUevent e;
  CUresult result = event_get(event, &e);
  if (result != CUDA_SUCCESS) return result;
  CUstream s;
  result = stream_get(stream, &s);
  if (result != CUDA_SUCCESS) {
    event_put(e);
    return result;
  }
  op *o = calloc(1, sizeof *o);
  if (!o) result = CUDA_ERROR_OUT_OF_MEMORY;
  else if (s->ctx != e->ctx) result = CUDA_ERROR_INVALID_HANDLE;
  if (result != CUDA_SUCCESS) {
    free(o);
    event_put(e);
    stream_put(s);
    return result;
  }
  pthread_mutex_lock(&e->lock);
  *o = (op){.kind = OP_EVENT, .event = e, .generation = ++e->recorded};
  pthread_mutex_unlock(&e->lock);
  result = stream_enqueue(s, o); /* the marker takes over our reference to e */
  if (result != CUDA_SUCCESS) {
    op_run(o); /* the stream is going away: mark the event reached rather than hang waiters */
  }
  stream_put(s);
  return result;
}

CUresult cuEventSynchronize(CUevent event) {
  ENTER(cuEventSynchronize);
  CUevent e;
  CUresult result = event_get(event, &e);
  if (result != CUDA_SUCCESS) return result;
  if (!(e->flags & CU_EVENT_BLOCKING_SYNC)) atomic_fetch_add(&g_spinning_waits, 1);
  pthread_mutex_lock(&e->lock);
  unsigned long long target = e->recorded;
  while (e->reached < target) pthread_cond_wait(&e->reached_cond, &e->lock);
  pthread_mutex_unlock(&e->lock);
  event_put(e);
  return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent event) {
  ENTER(cuEventQuery);
  CUevent e;
  CUresult result = event_get(event, &e);
  if (result != CUDA_SUCCESS) return result;
  pthread_mutex_lock(&e->lock);
  int pending = e->reached < e->recorded;
  pthread_mutex_unlock(&e->lock);
  event_put(e);
  return pending ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

/* ---- Allocation --------------------------------------------------------------------------- */

static CUresult device_alloc(CUdeviceptr *ptr, size_t size, mem_kind kind, CUcontext ctx) {
  if (!ptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  if (size > ARENA_BYTES) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t reserved = fake_round_up(size, DEVICE_ALIGN);
  long long offset = arena_alloc(reserved);
  if (offset < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t start = (uintptr_t)g_device_view + (size_t)offset;
  /* Pool allocations belong to no context, as with the real stream-ordered allocator. */
  CUresult result = record_new(start, size, reserved, kind, kind == KIND_POOL ? NULL : ctx,
                               ctx->device, g_cpu_view + offset);
  if (result != CUDA_SUCCESS) arena_free((size_t)offset, reserved);
  else *ptr = (CUdeviceptr)start;
  return result;
}

/* Managed and pinned memory: ordinary page-aligned host memory the CPU may use. */
static CUresult host_alloc(void **ptr, size_t size, mem_kind kind, CUcontext ctx) {
  if (!ptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  size_t reserved = fake_round_up(size, (size_t)sysconf(_SC_PAGESIZE));
  void *p = mmap(NULL, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult result = record_new((uintptr_t)p, size, reserved, kind, ctx, ctx->device, p);
  if (result != CUDA_SUCCESS) munmap(p, reserved);
  else *ptr = p;
  return result;
}

CUresult cuMemAlloc(CUdeviceptr *ptr, size_t size) {
  ENTER(cuMemAlloc);
  CUcontext ctx;
  CUresult result = current_ctx(&ctx);
  return result != CUDA_SUCCESS ? result : device_alloc(ptr, size, KIND_DEVICE, ctx);
}

CUresult cuMemAllocAsync(CUdeviceptr *ptr, size_t size, CUstream stream) {
  ENTER(cuMemAllocAsync);
  CUcontext ctx;
  CUresult result = current_ctx(&ctx);
  if (result != CUDA_SUCCESS) return result;
  CUstream s;
  result = stream_get(stream, &s);
  if (result != CUDA_SUCCESS) return result;
  /* The memory is usable at once, which stream order also allows. */
  result = device_alloc(ptr, size, KIND_POOL, s->ctx);
  stream_put(s);
  return result;
}

/* Memory pools of one's own: their allocations are the default pool's (KIND_POOL); a pool keeps
 * its device and release threshold, which fake_cuda_pool_threshold() reports. */
struct CUmemPoolHandle_st {
  CUdevice device;
  unsigned long long release_threshold;
};

static _Atomic unsigned long long g_last_threshold;

unsigned long long fake_cuda_pool_threshold(void) { return atomic_load(&g_last_threshold); }

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
  ENTER(cuMemPoolCreate);
  if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->handleTypes != 0 || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !device_valid(props->location.id))
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < sizeof props->unset; i++)
    if (props->unset[i]) return CUDA_ERROR_INVALID_VALUE;
  CUmemoryPool p = calloc(1, sizeof *p);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  p->device = props->location.id;
  atomic_fetch_add(&g_live[LIVE_POOLS], 1);
  *pool = p;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  ENTER(cuMemPoolDestroy);
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  atomic_fetch_sub(&g_live[LIVE_POOLS], 1);
  free(pool);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, int attribute, void *value) {
  ENTER(cuMemPoolSetAttribute);
  if (!pool || !value || attribute != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
    return CUDA_ERROR_INVALID_VALUE;
  memcpy(&pool->release_threshold, value, sizeof pool->release_threshold);
  atomic_store(&g_last_threshold, pool->release_threshold);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, int attribute, void *value) {
  ENTER(cuMemPoolGetAttribute);
  if (!pool || !value || attribute != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
    return CUDA_ERROR_INVALID_VALUE;
  memcpy(value, &pool->release_threshold, sizeof pool->release_threshold);
  return CUDA_SUCCESS;
}

/* The fake's pools hold nothing between allocations: there is nothing to give back. */
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  ENTER(cuMemPoolTrimTo);
  (void)keep;
  return pool ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *ptr, size_t size, CUmemoryPool pool,
                                 CUstream stream) {
  ENTER(cuMemAllocFromPoolAsync);
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  CUstream s;
  CUresult result = stream_get(stream, &s);
  if (result != CUDA_SUCCESS) return result;
  result = s->ctx->device == pool->device ? device_alloc(ptr, size, KIND_POOL, s->ctx)
                                          : CUDA_ERROR_INVALID_VALUE;
  stream_put(s);
  return result;
}

CUresult cuMemAllocManaged(CUdeviceptr *ptr, size_t size, unsigned flags) {
  ENTER(cuMemAllocManaged);
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != 2 /* CU_MEM_ATTACH_HOST */)
    return CUDA_ERROR_INVALID_VALUE;
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx;
  CUresult result = current_ctx(&ctx);
  void *p = NULL;
  if (result == CUDA_SUCCESS) result = host_alloc(&p, size, KIND_MANAGED, ctx);
  if (result == CUDA_SUCCESS) *ptr = (CUdeviceptr)(uintptr_t)p;
  return result;
}

/* Like cuMemFree of the real driver after an implicit synchronisation: a copy still queued
 * keeps the memory alive until it ran. */
CUresult cuMemFree(CUdeviceptr ptr) {
  ENTER(cuMemFree);
  CUresult result = wait_for_device();
  return result != CUDA_SUCCESS ? result : record_free((uintptr_t)ptr, KINDS_ON_DEVICE, CUDA_ERROR_INVALID_VALUE);
}

/* The memory goes back once the stream's earlier work ran, which may use it until then (a
 * second free of it fails at once). */
CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  ENTER(cuMemFreeAsync);
  CUstream s;
  CUresult result = stream_get(stream, &s);
  if (result != CUDA_SUCCESS) return result;
  op *o = calloc(1, sizeof *o);
  record *r = o ? record_mark_freeing((uintptr_t)ptr, KIND_DEVICE | KIND_POOL) : NULL;
  if (!o || !r) {
    free(o);
    stream_put(s);
    return o ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_OUT_OF_MEMORY;
  }
  atomic_fetch_sub(&g_live[LIVE_DEVICE], 1);
  *o = (op){.kind = OP_RELEASE, .holds = {r, NULL}};
  if (stream_enqueue(s, o) != CUDA_SUCCESS) op_run(o);
  stream_put(s);
  return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void **ptr, size_t size, unsigned flags) {
  ENTER(cuMemHostAlloc);
  (void)flags; /* portable, mapped, write-combined: all the same to the fake */
  CUcontext ctx;
  CUresult result = current_ctx(&ctx);
  return result != CUDA_SUCCESS ? result : host_alloc(ptr, size, KIND_PINNED, ctx);
}

CUresult cuMemFreeHost(void *ptr) {
  ENTER(cuMemFreeHost);
  return record_free((uintptr_t)ptr, KIND_PINNED, CUDA_ERROR_INVALID_VALUE);
}

static atomic_long g_register_delay_us;
static atomic_int g_registering; /* threads in a read-only cuMemHostRegister */

void fake_cuda_slow_registration(long us) { atomic_store(&g_register_delay_us, us); }

long fake_cuda_copies_beside_registration(void) { return atomic_load(&g_copies_beside); }
long fake_cuda_read_only_registrations(void) { return atomic_load(&g_read_only_calls); }

long fake_cuda_spinning_waits(void) { return atomic_load(&g_spinning_waits); }
long fake_cuda_cross_device_copies(void) { return atomic_load(&g_cross_device); }

static CUresult register_range(void *ptr, size_t size, unsigned flags);

CUresult cuMemHostRegister(void *ptr, size_t size, unsigned flags) {
  int read_only = (flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0;
  if (read_only) atomic_fetch_add(&g_read_only_calls, 1);
  ENTER(cuMemHostRegister);
  if (!read_only) return register_range(ptr, size, flags);
  atomic_fetch_add(&g_registering, 1);
  CUresult result = wait_for_device(); /* see "calls that wait for the device" above */
  long delay_us = atomic_load(&g_register_delay_us);
  if (result == CUDA_SUCCESS && delay_us > 0) usleep((useconds_t)delay_us);
  if (result == CUDA_SUCCESS) result = register_range(ptr, size, flags);
  atomic_fetch_sub(&g_registering, 1);
  return result;
}

static CUresult register_range(void *ptr, size_t size, unsigned flags) {
  if (!ptr || size == 0 || (flags & ~15u)) return CUDA_ERROR_INVALID_VALUE; /* 1, 2, 4, 8: the real flags */
  CUcontext ctx;
  CUresult result = current_ctx(&ctx);
  if (result != CUDA_SUCCESS) return result;
  uintptr_t start = (uintptr_t)ptr;
  if (in_device_view(start, size)) return CUDA_ERROR_INVALID_VALUE;
  record *r = record_make(start, size, size, KIND_REGISTERED, ctx, ctx->device, ptr);
  if (!r) return CUDA_ERROR_OUT_OF_MEMORY;
  r->read_only = (flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0;
  /* The overlap check and the insertion under one lock: two threads registering overlapping
   * ranges at once must not both succeed. */
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_nrecords && result == CUDA_SUCCESS; i++) {
    const record *o = g_records[i];
    if (start < o->start + o->size && o->start < start + size)
      result = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  if (result == CUDA_SUCCESS && record_add(r) != 0) result = CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_unlock(&g_lock);
  if (result != CUDA_SUCCESS) {
    free(r);
    return result;
  }
  atomic_fetch_add(&g_live[LIVE_REGISTERED], 1);
  if (r->read_only) atomic_fetch_add(&g_live[LIVE_READ_ONLY], 1);
  return result;
}

CUresult cuMemHostUnregister(void *ptr) {
  ENTER(cuMemHostUnregister);
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  return record_free((uintptr_t)ptr, KIND_REGISTERED, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

/* ---- Pointer attributes ------------------------------------------------------------------- */

CUresult cuPointerGetAttributes(unsigned count, int *attributes, void **data, CUdeviceptr ptr) {
  ENTER(cuPointerGetAttributes);
  if (count && (!attributes || !data)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; i++) {
    int a = attributes[i];
    if (!data[i]) return CUDA_ERROR_INVALID_VALUE;
    if (a != CU_POINTER_ATTRIBUTE_CONTEXT && a != CU_POINTER_ATTRIBUTE_MEMORY_TYPE &&
        a != CU_POINTER_ATTRIBUTE_IS_MANAGED && a != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL &&
        a != CU_POINTER_ATTRIBUTE_RANGE_START_ADDR && a != CU_POINTER_ATTRIBUTE_RANGE_SIZE)
      return CUDA_ERROR_INVALID_VALUE; /* real attributes the fake does not model */
  }
  /* What the real driver reports for a pointer it does not know: no error, "NULL" values. */
  CUcontext ctx = NULL;
  int device = -2;
  unsigned memory_type = 0, managed = 0;
  CUdeviceptr start = 0;
  size_t size = 0;
  pthread_mutex_lock(&g_lock);
  const record *r = record_find((uintptr_t)ptr, ~0);
  if (r) {
    ctx = r->ctx;
    device = r->device;
    memory_type = (r->kind & KINDS_ON_DEVICE) ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
    managed = r->kind == KIND_MANAGED;
    start = r->start;
    size = r->size;
  }
  pthread_mutex_unlock(&g_lock);
  for (unsigned i = 0; i < count; i++) {
    switch (attributes[i]) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data[i] = ctx; break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data[i] = memory_type; break;
    /* cuda.h calls it "a boolean"; NVIDIA's own callers (CCCL) and most others pass an int,
     * so the fake writes a whole unsigned int: a one-byte bool buffer then overflows. */
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned *)data[i] = managed; break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = device; break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data[i] = start; break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data[i] = size; break;
    }
  }
  return CUDA_SUCCESS;
}

/* ---- Copies ------------------------------------------------------------------------------- */

/* The CPU address of [ptr, ptr + size) in one device, pool or managed allocation, with a
 * reference on its record in *held; NULL if the range is not inside one allocation. */
static unsigned char *device_range(CUdeviceptr ptr, size_t size, record **held) {
  unsigned char *cpu = NULL;
  pthread_mutex_lock(&g_lock);
  record *r = record_find((uintptr_t)ptr, KINDS_ON_DEVICE);
  if (r && size <= r->size - ((uintptr_t)ptr - r->start)) {
    atomic_fetch_add(&r->refs, 1);
    cpu = r->cpu + ((uintptr_t)ptr - r->start);
    *held = r;
  }
  pthread_mutex_unlock(&g_lock);
  return cpu;
}

/* The host side of a copy must be memory the CPU can use. If it is pinned memory, hold a
 * reference so that cuMemFreeHost does not unmap it under a queued copy. Returns 0 if the range
 * is unusable (bugs the real driver reports too): NULL, device memory, or a range that runs
 * past the end of the pinned allocation or registration it starts in. *device is the device
 * whose context was current when the range was allocated or registered, -1 for pageable memory
 * (see fake_cuda_cross_device_copies). */
static int host_range(const void *ptr, size_t size, record **held, CUdevice *device) {
  *device = -1;
  if (!ptr || in_device_view((uintptr_t)ptr, size)) return 0;
  pthread_mutex_lock(&g_lock);
  record *r = record_find((uintptr_t)ptr, KIND_PINNED | KIND_REGISTERED);
  if (r) *device = r->device;
  /* A copy that starts in page-locked memory must end in the same allocation or registration,
   * even where another one follows it (CUDA_ERROR_INVALID_VALUE on an H100, driver 580). */
  int inside = !r || size <= r->size - ((uintptr_t)ptr - r->start);
  if (r && r->kind != KIND_PINNED) r = NULL;
  if (r && inside) atomic_fetch_add(&r->refs, 1);
  *held = inside ? r : NULL;
  pthread_mutex_unlock(&g_lock);
  return inside;
}

/* The checks every asynchronous copy makes when it is queued, in the real driver's order:
 * a current context, a stream of that context, then the memory ranges. */
/* A copy between device and host memory, or where `fill` is a byte value (not -1) a fill of the
 * device memory with it, queued on the stream. */
static CUresult copy_async(int to_device, CUdeviceptr device, void *host, size_t size, int fill,
                           CUstream stream) {
  CUcontext ctx;
  CUresult result = current_ctx(&ctx);
  if (result != CUDA_SUCCESS) return result;
  CUstream s;
  result = stream_get(stream, &s);
  if (result != CUDA_SUCCESS) return result;
  if (!is_default_handle(stream) && s->ctx != ctx) {
    stream_put(s);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (size == 0) {
    stream_put(s);
    return CUDA_SUCCESS;
  }
  op *o = calloc(1, sizeof *o);
  unsigned char *cpu = o ? device_range(device, size, &o->holds[0]) : NULL;
  CUdevice host_device = -1;
  if (!o) result = CUDA_ERROR_OUT_OF_MEMORY;
  else if (!cpu || (fill < 0 && !host_range(host, size, &o->holds[1], &host_device)))
    result = CUDA_ERROR_INVALID_VALUE;
  if (result == CUDA_SUCCESS) {
    if (host_device >= 0 && host_device != s->ctx->device) atomic_fetch_add(&g_cross_device, 1);
    o->device = s->ctx->device;
    o->kind = fill < 0 ? OP_COPY : OP_FILL;
    o->value = (uint32_t)fill;
    o->size = size;
    o->dst = to_device ? (void *)cpu : host;
    o->src = to_device ? (const void *)host : cpu;
    result = stream_enqueue(s, o);
  }
  if (result != CUDA_SUCCESS && o) {
    record_put(o->holds[0]);
    record_put(o->holds[1]);
    free(o);
  }
  stream_put(s);
  return result;
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t size, CUstream stream) {
  ENTER(cuMemcpyHtoDAsync);
  if (atomic_load(&g_registering) > 0) atomic_fetch_add(&g_copies_beside, 1);
  return copy_async(1, dst, (void *)(uintptr_t)src, size, -1, stream);
}

CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t size, CUstream stream) {
  ENTER(cuMemcpyDtoHAsync);
  return copy_async(0, src, dst, size, -1, stream);
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t size, CUstream stream) {
  ENTER(cuMemsetD8Async);
  return copy_async(1, dst, NULL, size, value, stream);
}

/* The synchronous copies and memset run at once in the calling thread, without the delay: they
 * are for tests that prepare and check device memory. */
static CUresult copy_now(int to_device, CUdeviceptr device, void *host, size_t size,
                         int fill) {
  CUcontext ctx;
  CUresult result = current_ctx(&ctx);
  if (result != CUDA_SUCCESS || size == 0) return result;
  record *held = NULL, *host_held = NULL;
  CUdevice host_device;
  unsigned char *cpu = device_range(device, size, &held);
  if (!cpu) return CUDA_ERROR_INVALID_VALUE;
  if (fill >= 0) memset(cpu, fill, size);
  else if (!host_range(host, size, &host_held, &host_device)) result = CUDA_ERROR_INVALID_VALUE;
  else if (to_device) memcpy(cpu, host, size);
  else memcpy(host, cpu, size);
  record_put(held);
  record_put(host_held);
  return result;
}

CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t size) {
  ENTER(cuMemcpyHtoD);
  return copy_now(1, dst, (void *)(uintptr_t)src, size, -1);
}

CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t size) {
  ENTER(cuMemcpyDtoH);
  return copy_now(0, src, dst, size, -1);
}

CUresult cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t size) {
  ENTER(cuMemsetD8);
  return copy_now(1, dst, NULL, size, value);
}

/* ---- Another fake library's view of memory ------------------------------------------------ */

void *fake_cuda_host_view(CUdeviceptr ptr, size_t size) {
  uintptr_t at = (uintptr_t)ptr;
  unsigned char *cpu = NULL;
  pthread_mutex_lock(&g_lock);
  record *r = record_find(at, ~0); /* memory being freed by cuMemFreeAsync included */
  if (r && size <= r->size - (at - r->start)) cpu = r->cpu + (at - r->start);
  pthread_mutex_unlock(&g_lock);
  return cpu;
}

/* ---- Host functions ----------------------------------------------------------------------- */

/* Queue a stream operation that holds no memory. */
static CUresult enqueue_plain(CUstream stream, op model) {
  CUstream s;
  CUresult result = stream_get(stream, &s);
  if (result != CUDA_SUCCESS) return result;
  op *o = calloc(1, sizeof *o);
  if (!o) result = CUDA_ERROR_OUT_OF_MEMORY;
  else *o = model;
  if (o && (result = stream_enqueue(s, o)) != CUDA_SUCCESS) free(o);
  stream_put(s);
  return result;
}

CUresult cuLaunchHostFunc(CUstream stream, CUhostFn fn, void *user_data) {
  ENTER(cuLaunchHostFunc);
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  return enqueue_plain(stream, (op){.kind = OP_HOST_FN, .fn = fn, .user_data = user_data});
}

CUresult fake_cuda_launch_driver_work(CUstream stream, CUhostFn fn, void *user_data) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  return enqueue_plain(stream, (op){.kind = OP_DRIVER_WORK, .fn = fn, .user_data = user_data});
}

/* The word of a stream memory operation: 4-byte aligned, in device memory (through the fake's
 * CPU view) or in pinned host memory, whose device address is its host address. */
static _Atomic uint32_t *memop_word(CUdeviceptr addr) {
  if (addr % 4) return NULL;
  record *held = NULL;
  unsigned char *cpu = device_range(addr, 4, &held);
  if (!cpu) {
    pthread_mutex_lock(&g_lock);
    record *r = record_find((uintptr_t)addr, KIND_PINNED | KIND_REGISTERED);
    pthread_mutex_unlock(&g_lock);
    if (r && (uintptr_t)addr - r->start + 4 <= r->size) cpu = (unsigned char *)(uintptr_t)addr;
  }
  record_put(held); /* the word's memory must outlive the operation, as with the real driver */
  return (_Atomic uint32_t *)(void *)cpu;
}

static CUresult memop(CUstream stream, op_kind kind, CUdeviceptr addr, unsigned value, unsigned flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE; /* GEQ and the default write: all kvik uses */
  _Atomic uint32_t *word = memop_word(addr);
  if (!word) return CUDA_ERROR_INVALID_VALUE;
  return enqueue_plain(stream, (op){.kind = kind, .word = word, .value = value});
}

CUresult cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, unsigned value, unsigned flags) {
  ENTER(cuStreamWaitValue32);
  return memop(stream, OP_WAIT_VALUE, addr, value, flags);
}

CUresult cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, unsigned value, unsigned flags) {
  ENTER(cuStreamWriteValue32);
  return memop(stream, OP_WRITE_VALUE, addr, value, flags);
}
