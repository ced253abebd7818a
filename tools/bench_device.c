/* kvik bench --device: file <-> device memory, next to the baseline a user would write and the
 * two ceilings that bound any such transfer (the page cache and PCIe). The tool loads the CUDA
 * driver itself for its buffers and baselines; kvik is used through its public API only. */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

struct bench_driver bench_cu;

/* KVIK_ZERO_COPY is kvik with zero-copy reads on auto (KVIK_SETTING_ZERO_COPY_READ), which is
 * off by default, each run on a handle of its own: a first read, which registers what it maps,
 * and a close that unregisters it, both timed. KVIK_ZERO_COPY_AGAIN reads on one handle kept
 * for the whole bench, read once on one thread before its first run: a read of a file read
 * before, served by the registrations its handle kept. Reads only. CUFILE is kvik on a second
 * handle of the file, opened with compat mode OFF, so that cuFile serves its device memory. It is
 * the read table's last column, and the write table's (which has no zero-copy columns) too:
 * method_of() maps columns to methods. */
enum device_method {
  PAGEABLE_COPY,
  PINNED_PARALLEL,
  PINNED_COPY,
  KVIK_DEVICE,
  KVIK_ZERO_COPY,
  KVIK_ZERO_COPY_AGAIN,
  CUFILE
};

struct device_state {
  CUdeviceptr dev;       /* the file's size of device memory */
  unsigned char *pinned; /* the file's size of pinned host memory */
  int64_t zero_copy;     /* kvik's zero_copy_read setting before the bench changed it */
  kvik_file *cufile;     /* the file served by cuFile; NULL where cuFile cannot serve it */
  kvik_file *again;      /* KVIK_ZERO_COPY_AGAIN's handle, once it has read the file */
};

static int method_of(int column, int write) {
  return write && column == KVIK_ZERO_COPY ? CUFILE : column;
}

static int is_kvik(int m) { return m >= KVIK_DEVICE; }

int bench_cuda_fail(const char *call, CUresult r) {
  const char *name = NULL;
  bench_cu.cuGetErrorName(r, &name);
  bench_progress_clear();
  fprintf(stderr, "kvik bench --device: %s failed: %s\n", call, name ? name : "unknown CUDA error");
  return CLI_ERROR;
}

int bench_cuda_load(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return fprintf(stderr, "kvik bench --device: %s\n", dlerror()), CLI_ERROR;
#define RESOLVE_(member, symbol, params)                                                           \
  if (!(*(void **)&bench_cu.member = dlsym(lib, symbol)))                                          \
    return fprintf(stderr, "kvik bench --device: libcuda.so.1 lacks %s\n", symbol), CLI_ERROR;
  BENCH_DRIVER_FUNCTIONS(RESOLVE_)
#undef RESOLVE_
  CU_CHECK(bench_cu.cuInit(0));
  return CLI_OK;
}

int bench_cuda_context(int ordinal, CUcontext *ctx) {
  int device;
  CU_CHECK(bench_cu.cuDeviceGet(&device, ordinal));
  CU_CHECK(bench_cu.cuDevicePrimaryCtxRetain(ctx, device));
  return CLI_OK;
}

static int reads_file(int m) { return m != PINNED_COPY; }

static int device_prepare(struct bench *b, int column, int write) {
  struct device_state *d = b->device_state;
  int m = method_of(column, write);
  if (!write && b->cold_run && reads_file(m) && kvik_page_cache_drop(test_path) < 0)
    return bench_kvik_fail();
  /* A read target is zeroed so that bytes kvik did not read cannot pass. The memset runs on the
   * legacy default stream, which kvik's streams do not wait for: it must end first. */
  if (!write && is_kvik(m)) {
    CU_CHECK(bench_cu.cuMemsetD8(d->dev, 0, b->opt.size));
    CU_CHECK(bench_cu.cuCtxSynchronize());
  }
  return CLI_OK;
}

/* kvik_file_read into device memory with zero-copy reads in `mode`. */
static int kvik_read(struct bench *b, kvik_file *f, int64_t mode) {
  struct device_state *d = b->device_state;
  if (kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, mode) < 0) return bench_kvik_fail();
  return bench_check_count(b, kvik_file_read(f, (void *)(uintptr_t)d->dev, b->opt.size, 0),
                           "kvik_file_read");
}

/* A first zero-copy read: open, read, close. */
static int zero_copy_first_read(struct bench *b) {
  kvik_file *f;
  if (kvik_file_open(test_path, "r", 0, &f) < 0) return bench_kvik_fail();
  int rc = kvik_read(b, f, KVIK_AUTO);
  if (kvik_file_close(f) < 0 && rc == CLI_OK) rc = bench_kvik_fail();
  kvik_file_free(f);
  return rc;
}

/* The handle's first read runs on one thread, so that its one task registers the whole file
 * (on more, the other tasks would carry the far end through bounce buffers, unregistered). */
static int zero_copy_again(struct bench *b) {
  struct device_state *d = b->device_state;
  if (!d->again) {
    int64_t threads;
    if (kvik_file_open(test_path, "r", 0, &d->again) < 0 ||
        kvik_setting_get(KVIK_SETTING_NUM_THREADS, &threads) < 0 ||
        kvik_setting_set(KVIK_SETTING_NUM_THREADS, 1) < 0)
      return bench_kvik_fail();
    int rc = kvik_read(b, d->again, KVIK_AUTO);
    if (kvik_setting_set(KVIK_SETTING_NUM_THREADS, threads) < 0 && rc == CLI_OK)
      rc = bench_kvik_fail();
    if (rc != CLI_OK) return rc;
  }
  return kvik_read(b, d->again, KVIK_AUTO);
}

static int device_read(struct bench *b, kvik_file *f, int m, int nthreads) {
  struct device_state *d = b->device_state;
  size_t size = b->opt.size;
  int err = 0;
  switch (m) {
  case PAGEABLE_COPY:
    err = bench_io_loop(b->fd, b->buf, size, 0, 0);
    if (!err) CU_CHECK(bench_cu.cuMemcpyHtoD(d->dev, b->buf, size));
    break;
  case PINNED_PARALLEL: err = bench_io_parallel(b->fd, d->pinned, size, nthreads, 0); break;
  case PINNED_COPY: CU_CHECK(bench_cu.cuMemcpyHtoD(d->dev, d->pinned, size)); break;
  case KVIK_ZERO_COPY: return zero_copy_first_read(b);
  case KVIK_ZERO_COPY_AGAIN: return zero_copy_again(b);
  case CUFILE: return kvik_read(b, d->cufile, d->zero_copy);
  default: return kvik_read(b, f, d->zero_copy);
  }
  return err ? bench_sys_fail("pread", err) : CLI_OK;
}

static int kvik_write(struct bench *b, kvik_file *f) {
  struct device_state *d = b->device_state;
  return bench_check_count(b, kvik_file_write(f, (void *)(uintptr_t)d->dev, b->opt.size, 0),
                           "kvik_file_write");
}

static int device_write(struct bench *b, kvik_file *f, int m, int nthreads) {
  struct device_state *d = b->device_state;
  size_t size = b->opt.size;
  int err = 0;
  switch (m) {
  case PAGEABLE_COPY:
    CU_CHECK(bench_cu.cuMemcpyDtoH(b->buf, d->dev, size));
    err = bench_io_loop(b->fd, b->buf, size, 0, 1);
    break;
  case PINNED_PARALLEL: err = bench_io_parallel(b->fd, d->pinned, size, nthreads, 1); break;
  case PINNED_COPY: CU_CHECK(bench_cu.cuMemcpyDtoH(d->pinned, d->dev, size)); break;
  case CUFILE: return kvik_write(b, d->cufile);
  default: return kvik_write(b, f);
  }
  return err ? bench_sys_fail("pwrite", err) : CLI_OK;
}

static int device_run(struct bench *b, kvik_file *f, int column, int nthreads, int write) {
  int m = method_of(column, write);
  return write ? device_write(b, f, m, nthreads) : device_read(b, f, m, nthreads);
}

/* After a kvik read the device memory must hold the pattern; after a kvik write the file must. */
static int device_verify(struct bench *b, int column, int write) {
  struct device_state *d = b->device_state;
  int m = method_of(column, write);
  if (!is_kvik(m)) return CLI_OK;
  if (write) return bench_verify_file(b, "kvik_file_write");
  CU_CHECK(bench_cu.cuMemcpyDtoH(d->pinned, d->dev, b->opt.size));
  return bench_check_range(d->pinned, 0, b->opt.size, "kvik_file_read");
}

/* Registered pages stay in the page cache, so a cold run cannot re-read through them. */
static int device_available(struct bench *b, int column, int write) {
  const struct device_state *d = b->device_state;
  int m = method_of(column, write);
  return (m != CUFILE || d->cufile != NULL) && !(m == KVIK_ZERO_COPY_AGAIN && b->cold_run);
}

static double device_ratio(const double *best, int i) {
  if (i == 1) return best[KVIK_DEVICE] / best[PAGEABLE_COPY];
  double ceiling =
      best[PINNED_PARALLEL] < best[PINNED_COPY] ? best[PINNED_PARALLEL] : best[PINNED_COPY];
  return best[KVIK_DEVICE] / ceiling;
}

static int device_tables(struct bench *b) {
  struct suite s = {"READ: page cache -> device memory",
                    7,
                    {"(a) pread1+copy", "(b) pread pinned T", "(c) copy pinned", "kvik",
                     "kvik zero-copy", "zero-copy again", "cuFile"},
                    device_prepare,
                    device_run,
                    device_verify,
                    2,
                    {"kvik/min(b,c)", "kvik/(a)"},
                    device_ratio,
                    device_available};
  int rc = bench_table(b, &s, 0);
  if (rc == CLI_OK && b->opt.cold) {
    struct device_state *d = b->device_state;
    kvik_file_free(d->again); /* its registrations would keep the file in the page cache */
    d->again = NULL;
    b->cold_run = 1;
    s.title = "READ (cold, page cache dropped before each run): storage -> device memory";
    rc = bench_table(b, &s, 0);
    b->cold_run = 0;
  }
  if (rc != CLI_OK || !b->opt.write) return rc;
  /* The writes write the pattern: put it in device memory and in the pinned buffer. */
  struct device_state *d = b->device_state;
  CU_CHECK(bench_cu.cuMemcpyHtoD(d->dev, b->buf, b->opt.size));
  CU_CHECK(bench_cu.cuMemcpyDtoH(d->pinned, d->dev, b->opt.size));
  s.title = "WRITE: device memory -> page cache";
  s.nmethods = 5;
  s.names[0] = "(a) copy+pwrite1";
  s.names[1] = "(b) pwrite pinned T";
  s.names[KVIK_ZERO_COPY] = "cuFile"; /* method_of(KVIK_ZERO_COPY, 1) */
  return bench_table(b, &s, 1);
}

/* The cuFile column's handle: the test file opened once more, with compat mode OFF for the
 * open only, so that it fails unless cuFile can serve the file. Either way one line says what
 * the column measures, or why it shows n/a; the other columns run regardless. */
static int open_cufile(struct device_state *d) {
  int64_t mode;
  if (kvik_setting_get(KVIK_SETTING_COMPAT_MODE, &mode) < 0) return bench_kvik_fail();
  if (kvik_setting_set(KVIK_SETTING_COMPAT_MODE, KVIK_COMPAT_OFF) < 0) return bench_kvik_fail();
  char why[512];
  if (kvik_file_open(test_path, "r+", 0, &d->cufile) < 0) {
    snprintf(why, sizeof why, "%s", kvik_last_error()); /* before the next kvik call replaces it */
    d->cufile = NULL;
  } else if (kvik_file_backend(d->cufile, why, sizeof why) < 0) {
    snprintf(why, sizeof why, "%s", kvik_last_error());
  }
  if (kvik_setting_set(KVIK_SETTING_COMPAT_MODE, mode) < 0) return bench_kvik_fail();
  printf("kvik bench --device: cuFile column %s: %s\n", d->cufile ? "(compat mode OFF)" : "n/a",
         why);
  return CLI_OK;
}

/* GPU `ordinal`'s primary context, current on the calling thread; its name on stdout. */
static int cuda_use(int ordinal) {
  CUcontext ctx;
  if (bench_cuda_load() != CLI_OK || bench_cuda_context(ordinal, &ctx) != CLI_OK) return CLI_ERROR;
  CU_CHECK(bench_cu.cuCtxSetCurrent(ctx));
  char name[256] = "?";
  kvik_cuda_device_name(ordinal, name, sizeof name);
  printf("kvik bench --device: GPU %d %s\n", ordinal, name);
  return CLI_OK;
}

int bench_cuda_init(void) { return cuda_use(0); }

int bench_cuda_alloc(size_t size, void **dev) {
  CUdeviceptr ptr;
  CU_CHECK(bench_cu.cuMemAlloc(&ptr, size));
  *dev = (void *)(uintptr_t)ptr;
  return CLI_OK;
}

void bench_cuda_free(void *dev) {
  if (dev) bench_cu.cuMemFree((CUdeviceptr)(uintptr_t)dev);
}

int bench_device(struct bench *b) {
  if (cuda_use(b->opt.gpu) != CLI_OK) return CLI_ERROR;
  struct device_state d = {0, NULL, KVIK_AUTO, NULL, NULL};
  if (kvik_setting_get(KVIK_SETTING_ZERO_COPY_READ, &d.zero_copy) < 0) return bench_kvik_fail();
  CUresult r = bench_cu.cuMemAlloc(&d.dev, b->opt.size);
  if (r == 0) r = bench_cu.cuMemHostAlloc((void **)&d.pinned, b->opt.size, 0);
  int rc = r == 0 ? CLI_OK : bench_cuda_fail("buffers of the file's size", r);
  if (rc == CLI_OK) rc = open_cufile(&d);
  b->device_state = &d;
  if (rc == CLI_OK) rc = device_tables(b);
  b->device_state = NULL;
  if (kvik_setting_set(KVIK_SETTING_ZERO_COPY_READ, d.zero_copy) < 0 && rc == CLI_OK)
    rc = bench_kvik_fail();
  kvik_file_free(d.cufile);
  kvik_file_free(d.again);
  if (d.pinned) bench_cu.cuMemFreeHost(d.pinned);
  if (d.dev) bench_cu.cuMemFree(d.dev);
  return rc;
}
