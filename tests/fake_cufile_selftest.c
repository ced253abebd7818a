/* Tests of the fake cuFile library (fake_cufile.c) itself. It is reached as kvik reaches it,
 * through dlopen("libcufile.so.0") and dlsym, with the fake CUDA driver beside it (ctest's
 * LD_LIBRARY_PATH decides which libraries load). Skips (77) when the libraries that load are not
 * the fakes, or when the working directory cannot open files with O_DIRECT, which cuFile needs.
 *
 * The checks that need a fresh library (environment settings, implicit open) or that end in an
 * abort run first, in forked children, while this process has no threads yet. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "fake_cuda.h"
#include "fake_cufile.h"
#include "test.h"

/* test.h prints kvik's last error when an assertion fails; this program does not link kvik. */
const char *kvik_last_error(void) { return "(none: the fake cuFile's selftest does not use kvik)"; }

/* The fake driver's functions that kvik does not call (fake_cuda.h). */
typedef struct extra_cuda {
#define EXTRA_MEMBER_(member, symbol, ret, params) ret(*member) params;
  FAKE_CUDA_EXTRA_FUNCTIONS(EXTRA_MEMBER_)
#undef EXTRA_MEMBER_
} extra_cuda;

static kvik__cufile_api cf;
static kvik__cuda_api cu;
static extra_cuda cx;
static fake_cufile_fail_fn fake_fail;
static fake_cufile_calls_fn fake_calls;
static fake_cufile_live_fn fake_live;
static fake_cufile_reset_fn fake_reset;

#define CF_OK(call) ASSERT_EQ((call).err, KVIK__CUFILE_SUCCESS)
#define CF_FAILS(call, status) ASSERT_EQ((call).err, (status))
#define CU_OK(call) ASSERT_EQ((call), CUDA_SUCCESS)

#define KiB ((size_t)1024)
#define MiB ((size_t)1 << 20)

static void *must_find(void *lib, const char *symbol) {
  void *fn = dlsym(lib, symbol);
  if (!fn) FAIL_AT("no %s in the library loaded", symbol);
  return fn;
}

/* Every function kvik calls must be exported under the symbol src/cufile.h names. */
static void load_cufile(void *lib) {
#define LOAD_(member, symbol, ret, params) cf.member = (ret(*) params)must_find(lib, symbol);
  KVIK__CUFILE_FUNCTIONS(LOAD_)
  KVIK__CUFILE_OPTIONAL_FUNCTIONS(LOAD_)
#undef LOAD_
  fake_fail = (fake_cufile_fail_fn)must_find(lib, "fake_cufile_fail");
  fake_calls = (fake_cufile_calls_fn)must_find(lib, "fake_cufile_calls");
  fake_live = (fake_cufile_live_fn)must_find(lib, "fake_cufile_live");
  fake_reset = (fake_cufile_reset_fn)must_find(lib, "fake_cufile_reset");
}

static void load_cuda(void *lib) {
#define LOAD_(member, symbol, ret, params) cu.member = (ret(*) params)must_find(lib, symbol);
  KVIK__CUDA_FUNCTIONS(LOAD_)
#undef LOAD_
#define LOAD_EXTRA_(member, symbol, ret, params) cx.member = (ret(*) params)must_find(lib, symbol);
  FAKE_CUDA_EXTRA_FUNCTIONS(LOAD_EXTRA_)
#undef LOAD_EXTRA_
}

/* ---- Files in the working directory, removed at exit by the process that made them -------- */

static char *g_paths[32];
static int g_npaths;
static pid_t g_owner;

static void remove_files(void) {
  for (int i = 0; getpid() == g_owner && i < g_npaths; i++) unlink(g_paths[i]);
}

static const char *local_path(const char *name) {
  if (g_npaths == (int)(sizeof g_paths / sizeof g_paths[0])) FAIL_AT("too many files");
  char *path = malloc(strlen(name) + 64);
  sprintf(path, "fake_cufile_selftest.%ld.%s", (long)getpid(), name);
  g_paths[g_npaths++] = path;
  return path;
}

static int open_or_die(const char *path, int flags) {
  int fd = open(path, flags | O_CLOEXEC, 0644);
  if (fd < 0) FAIL_AT("open(%s): %s", path, strerror(errno));
  return fd;
}

/* A file of `size` seeded bytes, opened again with O_DIRECT and `access`; its bytes in *data. */
static int direct_file(const char *name, size_t size, uint64_t seed, int access, unsigned char **data) {
  const char *path = local_path(name);
  unsigned char *bytes = malloc(size ? size : 1);
  test_fill(bytes, size, seed);
  test_write_file(path, bytes, size);
  if (data) *data = bytes;
  else free(bytes);
  return open_or_die(path, access | O_DIRECT);
}

static kvik__cufile_handle register_fd(int fd) {
  kvik__cufile_descr descr = {KVIK__CUFILE_HANDLE_TYPE_OPAQUE_FD, {.fd = fd}, NULL};
  kvik__cufile_handle fh = NULL;
  CF_OK(cf.cuFileHandleRegister(&fh, &descr));
  ASSERT(fh != NULL);
  return fh;
}

static CUdeviceptr device_alloc(size_t size) {
  CUdeviceptr p;
  CU_OK(cu.cuMemAlloc(&p, size));
  return p;
}

static void *dev_ptr(CUdeviceptr p) { return (void *)(uintptr_t)p; }

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, ms % 1000 * 1000000};
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}

static void expect_no_leaks(void) {
  static const char *const kinds[] = {"handles", "buffers", "batches", "streams", "in_flight"};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (fake_live(kinds[i]) != 0) FAIL_AT("%ld live %s", fake_live(kinds[i]), kinds[i]);
}

/* ---- Forked children: a fresh library each, and the aborts ----------------------------------- */

/* Run body in a child; it must exit 0 (expect_abort == NULL) or abort with `expect_abort` on its
 * stderr. */
static void in_child(void (*body)(void), const char *expect_abort) {
  int out[2];
  ASSERT(pipe(out) == 0);
  fflush(NULL);
  pid_t child = fork();
  ASSERT(child >= 0);
  if (child == 0) {
    setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
    if (expect_abort) dup2(out[1], STDERR_FILENO);
    close(out[0]);
    close(out[1]);
    body();
    exit(0);
  }
  close(out[1]);
  char text[4096];
  size_t n = 0;
  for (ssize_t r; n < sizeof text - 1 && (r = read(out[0], text + n, sizeof text - 1 - n)) > 0;) n += (size_t)r;
  text[n] = '\0';
  close(out[0]);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (!expect_abort) {
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) FAIL_AT("a child failed (status %#x)", status);
    return;
  }
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT) FAIL_AT("a child did not abort with \"%s\" (status %#x): %s", expect_abort, status, text);
  if (!strstr(text, expect_abort)) FAIL_AT("the child's message lacks \"%s\": %s", expect_abort, text);
}

static void child_env(void) {
  setenv("FAKE_CUFILE_NVFS", "2.26", 1);
  setenv("FAKE_CUFILE_VERSION", "1160", 1);
  int version = 0;
  CF_OK(cf.cuFileGetVersion(&version));
  ASSERT_EQ(version, 1160);
  kvik__cufile_props p;
  CF_OK(cf.cuFileDriverGetProperties(&p));
  ASSERT_EQ(p.nvfs.major_version, 2);
  ASSERT_EQ(p.nvfs.minor_version, 26);
  /* With nvidia-fs, the driver opens without compatibility mode. */
  CF_OK(cf.cuFileSetParameterBool(1, false));
  CF_OK(cf.cuFileDriverOpen());
}

static void child_bad_env(void) {
  setenv("FAKE_CUFILE_NVFS", "two", 1);
  int version;
  cf.cuFileGetVersion(&version);
}

/* IO and registration calls open the driver; a close before any open is an error. */
static void child_implicit_open(void) {
  CF_FAILS(cf.cuFileDriverClose(), CU_FILE_DRIVER_NOT_INITIALIZED);
  ASSERT_EQ(fake_live("driver"), 0);
  char buf[64];
  CF_OK(cf.cuFileBufRegister(buf, sizeof buf, 0));
  ASSERT_EQ(fake_live("driver"), 1);
  CF_OK(cf.cuFileBufDeregister(buf));
  CF_OK(cf.cuFileDriverClose());
  ASSERT_EQ(fake_live("driver"), 0);
  /* What may still be called. */
  int version;
  CF_OK(cf.cuFileGetVersion(&version));
  size_t size;
  CF_OK(cf.cuFileGetParameterSizeT(5, &size));
  /* And the driver opens again. */
  CF_OK(cf.cuFileDriverOpen());
  ASSERT_EQ(fake_live("driver"), 1);
  CF_OK(cf.cuFileDriverClose());
}

static void child_register_after_close(void) {
  CF_OK(cf.cuFileDriverOpen());
  CF_OK(cf.cuFileDriverClose());
  kvik__cufile_descr descr = {KVIK__CUFILE_HANDLE_TYPE_OPAQUE_FD, {.fd = 0}, NULL};
  kvik__cufile_handle fh;
  cf.cuFileHandleRegister(&fh, &descr);
}

static void child_close_twice(void) {
  CF_OK(cf.cuFileDriverOpen());
  CF_OK(cf.cuFileDriverClose());
  cf.cuFileDriverClose();
}

static void child_deregister_unknown(void) { cf.cuFileHandleDeregister((kvik__cufile_handle)0x1234); }

static void child_destroy_unknown(void) { cf.cuFileBatchIODestroy((kvik__cufile_batch_handle)0x1234); }

static void child_fail_unknown(void) { fake_fail("cuFileDriverClose", 1, CU_FILE_INTERNAL_ERROR); }

static void child_fail_void(void) { fake_fail("cuFileHandleDeregister", 1, CU_FILE_INTERNAL_ERROR); }

static void child_wait_forever(void) {
  kvik__cufile_batch_handle b;
  CF_OK(cf.cuFileBatchIOSetUp(&b, 2));
  unsigned nr = 2;
  kvik__cufile_io_event events[2];
  cf.cuFileBatchIOGetStatus(b, 1, &nr, events, NULL);
}

/* A child dies before its atexit could remove its files: they go as soon as they are open. */
static int child_file(const char *name) {
  int fd = direct_file(name, 4096, 1, O_RDWR, NULL);
  unlink(g_paths[--g_npaths]);
  return fd;
}

static void *reap_one(void *b) {
  unsigned nr = 1;
  kvik__cufile_io_event event;
  cf.cuFileBatchIOGetStatus(b, 1, &nr, &event, NULL);
  return NULL;
}

static void child_destroy_busy(void) {
  setenv("FAKE_CUFILE_IO_DELAY_US", "1000000", 1);
  int fd = child_file("destroy");
  kvik__cufile_handle fh = register_fd(fd);
  kvik__cufile_batch_handle b;
  CF_OK(cf.cuFileBatchIOSetUp(&b, 1));
  static char buf[4096];
  kvik__cufile_io_params p = {KVIK__CUFILE_BATCH, {{buf, 0, 0, sizeof buf}}, fh, KVIK__CUFILE_READ, NULL};
  CF_OK(cf.cuFileBatchIOSubmit(b, 1, &p, 0));
  pthread_t waiter;
  ASSERT(pthread_create(&waiter, NULL, reap_one, b) == 0);
  while (fake_calls("cuFileBatchIOGetStatus") == 0) sleep_ms(1);
  sleep_ms(20); /* into its wait */
  cf.cuFileBatchIODestroy(b);
}

static void child_deregister_busy(void) {
  setenv("FAKE_CUFILE_IO_DELAY_US", "1000000", 1);
  int fd = child_file("busy");
  kvik__cufile_handle fh = register_fd(fd);
  kvik__cufile_batch_handle b;
  CF_OK(cf.cuFileBatchIOSetUp(&b, 1));
  static char buf[4096];
  kvik__cufile_io_params p = {KVIK__CUFILE_BATCH, {{buf, 0, 0, sizeof buf}}, fh, KVIK__CUFILE_READ, NULL};
  CF_OK(cf.cuFileBatchIOSubmit(b, 1, &p, 0));
  cf.cuFileHandleDeregister(fh);
}

static void child_fd_reused(void) {
  int fd = direct_file("reused", 4096, 1, O_RDWR, NULL);
  kvik__cufile_handle fh = register_fd(fd);
  close(fd);
  /* Both linked until then, so that the new file cannot get the old one's inode number. */
  ASSERT_EQ(direct_file("other", 4096, 2, O_RDWR, NULL), fd);
  unlink(g_paths[--g_npaths]);
  unlink(g_paths[--g_npaths]);
  char buf[16];
  cf.cuFileRead(fh, buf, sizeof buf, 0, 0);
}

static void test_children(void) {
  in_child(child_env, NULL);
  in_child(child_bad_env, "FAKE_CUFILE_NVFS='two'");
  in_child(child_implicit_open, NULL);
  in_child(child_register_after_close, "fake_cufile: cuFileHandleRegister called after cuFileDriverClose");
  in_child(child_close_twice, "fake_cufile: cuFileDriverClose_v2 called after cuFileDriverClose");
  in_child(child_deregister_unknown, "cuFileHandleDeregister(0x1234): not a registered handle");
  in_child(child_destroy_unknown, "cuFileBatchIODestroy(0x1234): not a batch");
  in_child(child_fail_unknown, "no such function");
  in_child(child_fail_void, "cannot fail");
  in_child(child_wait_forever, "would wait forever");
  in_child(child_deregister_busy, "still queued or running");
  in_child(child_destroy_busy, "another thread is using the batch");
  in_child(child_fd_reused, "closed and reopened for another file");
}

/* ---- Parameters, the driver, properties ----------------------------------------------------- */

static void test_parameters(void) {
  int version = 0;
  CF_OK(cf.cuFileGetVersion(&version));
  ASSERT_EQ(version, 1150);
  CF_FAILS(cf.cuFileGetVersion(NULL), CU_FILE_INVALID_VALUE);
  static const size_t sizes[] = {0, 128, 4, 8192, 4, 16384, 131072, 1024, 33554432, 128, 4, 5};
  for (int i = 0; i < 12; i++) {
    size_t v = 0;
    CF_OK(cf.cuFileGetParameterSizeT(i, &v));
    ASSERT_EQ(v, sizes[i]);
  }
  bool b = false;
  CF_OK(cf.cuFileGetParameterBool(1, &b));
  ASSERT(b);
  CF_OK(cf.cuFileGetParameterBool(0, &b));
  ASSERT(!b);
  char s[16];
  CF_OK(cf.cuFileGetParameterString(0, s, sizeof s));
  ASSERT(strcmp(s, "ERROR") == 0);
  CF_OK(cf.cuFileGetParameterString(0, s, 3));
  ASSERT(strcmp(s, "ER") == 0);
  size_t v;
  CF_FAILS(cf.cuFileGetParameterSizeT(-1, &v), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileGetParameterSizeT(12, &v), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileGetParameterBool(12, &b), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileGetParameterString(3, s, sizeof s), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileGetParameterString(0, s, 0), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileSetParameterSizeT(12, 1), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileSetParameterBool(-1, true), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileSetParameterString(3, "x"), CU_FILE_INVALID_VALUE);

  CF_OK(cf.cuFileSetParameterSizeT(5, 8192));
  CF_OK(cf.cuFileSetParameterString(0, "DEBUG"));
  CF_OK(cf.cuFileGetParameterString(0, s, sizeof s));
  ASSERT(strcmp(s, "DEBUG") == 0);
  /* No nvidia-fs and no compatibility mode: no driver. */
  CF_OK(cf.cuFileSetParameterBool(1, false));
  CF_FAILS(cf.cuFileDriverOpen(), CU_FILE_DRIVER_NOT_INITIALIZED);
  ASSERT_EQ(fake_live("driver"), 0);
  CF_OK(cf.cuFileSetParameterBool(1, true));

  CF_OK(cf.cuFileDriverOpen());
  CF_OK(cf.cuFileDriverOpen());
  ASSERT_EQ(fake_live("driver"), 1);
  CF_FAILS(cf.cuFileSetParameterSizeT(5, 4096), CU_FILE_DRIVER_ALREADY_OPEN);
  CF_FAILS(cf.cuFileSetParameterBool(0, true), CU_FILE_DRIVER_ALREADY_OPEN);
  CF_FAILS(cf.cuFileSetParameterString(0, "INFO"), CU_FILE_DRIVER_ALREADY_OPEN);
  CF_OK(cf.cuFileGetParameterSizeT(5, &v));
  ASSERT_EQ(v, 8192);
}

static kvik__cufile_props properties(void) {
  kvik__cufile_props p;
  memset(&p, 0x5a, sizeof p);
  CF_OK(cf.cuFileDriverGetProperties(&p));
  return p;
}

static void test_properties(void) {
  kvik__cufile_props p = properties();
  ASSERT_EQ(p.nvfs.major_version, 0);
  ASSERT_EQ(p.nvfs.minor_version, 0);
  ASSERT_EQ(p.nvfs.poll_thresh_size, 4);
  ASSERT_EQ(p.nvfs.max_direct_io_size, 8192); /* the parameter set before the open */
  ASSERT_EQ(p.nvfs.dstatusflags, 0);
  ASSERT_EQ(p.nvfs.dcontrolflags, 1u << KVIK__CUFILE_ALLOW_COMPAT_MODE);
  ASSERT_EQ(p.fflags, (1u << KVIK__CUFILE_BATCH_IO_SUPPORTED) | (1u << KVIK__CUFILE_STREAMS_SUPPORTED));
  ASSERT_EQ(p.max_device_cache_size, 131072);
  ASSERT_EQ(p.per_buffer_cache_size, 1024);
  ASSERT_EQ(p.max_device_pinned_mem_size, 33554432);
  ASSERT_EQ(p.max_batch_io_size, 128);
  ASSERT_EQ(p.max_batch_io_timeout_msecs, 5);
  CF_FAILS(cf.cuFileDriverGetProperties(NULL), CU_FILE_INVALID_VALUE);

  CF_OK(cf.cuFileDriverSetPollMode(true, 8));
  p = properties();
  ASSERT_EQ(p.nvfs.dcontrolflags, 3);
  ASSERT_EQ(p.nvfs.poll_thresh_size, 8);
  CF_OK(cf.cuFileDriverSetPollMode(false, 4));
  ASSERT_EQ(properties().nvfs.dcontrolflags, 2);

  CF_FAILS(cf.cuFileDriverSetMaxDirectIOSize(0), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileDriverSetMaxCacheSize(0), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileDriverSetMaxPinnedMemSize(0), CU_FILE_INVALID_VALUE);
  CF_OK(cf.cuFileDriverSetMaxDirectIOSize(16384));
  CF_OK(cf.cuFileDriverSetMaxCacheSize(2048));
  CF_OK(cf.cuFileDriverSetMaxPinnedMemSize(4096));
  p = properties();
  ASSERT_EQ(p.nvfs.max_direct_io_size, 16384);
  ASSERT_EQ(p.max_device_cache_size, 2048);
  ASSERT_EQ(p.max_device_pinned_mem_size, 4096);
  size_t v;
  CF_OK(cf.cuFileGetParameterSizeT(5, &v)); /* one configuration: the parameters follow */
  ASSERT_EQ(v, 16384);
  CF_OK(cf.cuFileDriverSetMaxCacheSize(131072));
  CF_OK(cf.cuFileDriverSetMaxPinnedMemSize(33554432));
}

/* ---- File handles and buffers --------------------------------------------------------------- */

static void test_handles(void) {
  const char *path = local_path("handles");
  int plain = open_or_die(path, O_RDWR | O_CREAT | O_TRUNC);
  kvik__cufile_descr descr = {KVIK__CUFILE_HANDLE_TYPE_OPAQUE_FD, {.fd = plain}, NULL};
  kvik__cufile_handle fh = NULL, again = NULL;
  CF_FAILS(cf.cuFileHandleRegister(&fh, &descr), CU_FILE_DIO_NOT_SET);
  int direct = open_or_die(path, O_RDWR | O_DIRECT);
  descr.handle.fd = direct;
  descr.type = 2;
  CF_FAILS(cf.cuFileHandleRegister(&fh, &descr), CU_FILE_INVALID_VALUE);
  descr.type = KVIK__CUFILE_HANDLE_TYPE_OPAQUE_FD;
  CF_FAILS(cf.cuFileHandleRegister(NULL, &descr), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileHandleRegister(&fh, NULL), CU_FILE_INVALID_VALUE);
  int pipe_fds[2];
  ASSERT(pipe2(pipe_fds, O_DIRECT | O_CLOEXEC) == 0);
  descr.handle.fd = pipe_fds[0];
  CF_FAILS(cf.cuFileHandleRegister(&fh, &descr), CU_FILE_INVALID_FILE_TYPE);
  close(pipe_fds[0]);
  CF_FAILS(cf.cuFileHandleRegister(&fh, &descr), CU_FILE_INVALID_VALUE); /* closed */
  ASSERT_EQ(fake_live("handles"), 0);

  fh = register_fd(direct);
  descr.handle.fd = direct;
  CF_FAILS(cf.cuFileHandleRegister(&again, &descr), CU_FILE_HANDLE_ALREADY_REGISTERED);
  ASSERT_EQ(fake_live("handles"), 1);
  char buf[16];
  ASSERT_EQ(cf.cuFileRead(fh, buf, 0, 0, 0), 0);
  ASSERT_EQ(cf.cuFileRead((kvik__cufile_handle)0x1234, buf, sizeof buf, 0, 0), -CU_FILE_HANDLE_NOT_REGISTERED);
  cf.cuFileHandleDeregister(fh);
  ASSERT_EQ(fake_live("handles"), 0);
  ASSERT_EQ(cf.cuFileRead(fh, buf, sizeof buf, 0, 0), -CU_FILE_HANDLE_NOT_REGISTERED);
  ASSERT_EQ(cf.cuFileWrite(fh, buf, sizeof buf, 0, 0), -CU_FILE_HANDLE_NOT_REGISTERED);
  /* Registering again after the deregistration gives a new handle. */
  again = register_fd(direct);
  ASSERT(again != fh);
  cf.cuFileHandleDeregister(again);
  close(pipe_fds[1]);
  close(direct);
  close(plain);
}

static void test_buffers(void) {
  CUdeviceptr dev = device_alloc(64 * KiB);
  CF_OK(cf.cuFileBufRegister(dev_ptr(dev), 64 * KiB, 0));
  CF_FAILS(cf.cuFileBufRegister(dev_ptr(dev), 64 * KiB, 0), CU_FILE_MEMORY_ALREADY_REGISTERED);
  CF_FAILS(cf.cuFileBufRegister(dev_ptr(dev + 4096), 4096, 0), CU_FILE_CUDA_POINTER_INVALID);
  CF_FAILS(cf.cuFileBufRegister(NULL, 4096, 0), CU_FILE_INVALID_VALUE);
  CUdeviceptr small = device_alloc(8 * KiB);
  CF_FAILS(cf.cuFileBufRegister(dev_ptr(small), 0, 0), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileBufRegister(dev_ptr(small), 64 * KiB, 0), CU_FILE_CUDA_POINTER_RANGE_ERROR);
  char *host = malloc(1000);
  CF_OK(cf.cuFileBufRegister(host + 1, 999, 0)); /* host memory, any address */
  ASSERT_EQ(fake_live("buffers"), 2);
  CF_OK(cf.cuFileBufDeregister(host + 1));
  CF_FAILS(cf.cuFileBufDeregister(host + 1), CU_FILE_MEMORY_NOT_REGISTERED);
  CF_FAILS(cf.cuFileBufDeregister(dev_ptr(small)), CU_FILE_MEMORY_NOT_REGISTERED);
  CF_OK(cf.cuFileBufDeregister(dev_ptr(dev)));
  ASSERT_EQ(fake_live("buffers"), 0);
  free(host);
  CU_OK(cu.cuMemFree(small));
  CU_OK(cu.cuMemFree(dev));
}

/* ---- Synchronous IO ------------------------------------------------------------------------- */

/* What the file must hold, kept alongside it. */
typedef struct model {
  unsigned char *bytes;
  size_t len;
} model;

static void model_check(const model *m, const char *path) {
  size_t n;
  unsigned char *on_disk = test_read_file(path, &n);
  ASSERT_EQ(n, m->len);
  ASSERT_SAME_BYTES(on_disk, m->bytes, n);
  free(on_disk);
}

static void check_device(CUdeviceptr dev, const void *expected, size_t n) {
  unsigned char *got = malloc(n ? n : 1);
  CU_OK(cx.cuMemcpyDtoH(got, dev, n));
  ASSERT_SAME_BYTES(got, expected, n);
  free(got);
}

/* One random transfer between device memory and the file; every third one aligned. */
static void random_io(kvik__cufile_handle fh, CUdeviceptr src, CUdeviceptr dst, const unsigned char *src_bytes,
                      model *m, uint64_t *rng, int i, long *unaligned) {
  size_t size = 1 + test_below(rng, 256 * KiB);
  off_t foff = (off_t)test_below(rng, MiB);
  size_t boff = test_below(rng, MiB);
  if (i % 3 == 0) {
    size = (size + 4095) & ~(size_t)4095;
    foff &= ~(off_t)4095;
    boff &= ~(size_t)4095;
  }
  if (foff % 4096) (*unaligned)++;
  if (i % 2 == 0) {
    ASSERT_EQ(cf.cuFileWrite(fh, dev_ptr(src), size, foff, (off_t)boff), size);
    memcpy(m->bytes + foff, src_bytes + boff, size);
    if ((size_t)foff + size > m->len) m->len = (size_t)foff + size;
    return;
  }
  size_t expected = (size_t)foff >= m->len ? 0 : m->len - (size_t)foff < size ? m->len - (size_t)foff : size;
  ASSERT_EQ(cf.cuFileRead(fh, dev_ptr(dst), size, foff, (off_t)boff), expected);
  check_device(dst + boff, m->bytes + foff, expected);
}

static void test_device_round_trip(void) {
  const char *path = local_path("round_trip");
  int fd = open_or_die(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT);
  kvik__cufile_handle fh = register_fd(fd);
  CUdeviceptr src = device_alloc(2 * MiB), dst = device_alloc(2 * MiB);
  unsigned char *src_bytes = malloc(2 * MiB);
  test_fill(src_bytes, 2 * MiB, 42);
  CU_OK(cx.cuMemcpyHtoD(src, src_bytes, 2 * MiB));
  model m = {calloc(2 * MiB, 1), 0};

  fake_reset();
  ASSERT_EQ(cf.cuFileWrite(fh, dev_ptr(src), MiB, 0, 0), MiB);
  memcpy(m.bytes, src_bytes, MiB);
  m.len = MiB;
  model_check(&m, path);
  uint64_t rng = 7;
  long unaligned = 0;
  for (int i = 0; i < 60; i++) random_io(fh, src, dst, src_bytes, &m, &rng, i, &unaligned);
  model_check(&m, path);
  ASSERT_EQ(fake_calls("unaligned_io"), unaligned);
  ASSERT(unaligned > 10);
  ASSERT_EQ(fake_calls("cuFileRead") + fake_calls("cuFileWrite"), 61);

  ASSERT_EQ(cf.cuFileRead(fh, dev_ptr(dst), 4096, (off_t)m.len, 0), 0); /* at the end of the file */
  ASSERT_EQ(cf.cuFileRead(fh, dev_ptr(dst), 4096, 0, (off_t)(2 * MiB - 100)), -CU_FILE_CUDA_POINTER_RANGE_ERROR);
  ASSERT_EQ(cf.cuFileRead(fh, NULL, 4096, 0, 0), -CU_FILE_INVALID_VALUE);
  ASSERT_EQ(cf.cuFileRead(fh, dev_ptr(dst), 4096, -1, 0), -CU_FILE_INVALID_VALUE);

  /* Host memory: plain, at any address, and pinned. */
  unsigned char *host = malloc(20000);
  ASSERT_EQ(cf.cuFileRead(fh, host, 10000, 3, 1), 10000);
  ASSERT_SAME_BYTES(host + 1, m.bytes + 3, 10000);
  void *pinned;
  CU_OK(cu.cuMemHostAlloc(&pinned, 64 * KiB, 0));
  test_fill(pinned, 64 * KiB, 9);
  ASSERT_EQ(cf.cuFileWrite(fh, pinned, 64 * KiB, 8192, 0), 64 * KiB);
  memcpy(m.bytes + 8192, pinned, 64 * KiB);
  model_check(&m, path);

  /* Memory of a stream-ordered pool has no context: the caller's serves. */
  CUdeviceptr pool;
  CU_OK(cx.cuMemAllocAsync(&pool, 64 * KiB, NULL));
  CU_OK(cu.cuStreamSynchronize(NULL));
  ASSERT_EQ(cf.cuFileRead(fh, dev_ptr(pool), 64 * KiB, 4096, 0), 64 * KiB);
  check_device(pool, m.bytes + 4096, 64 * KiB);
  CU_OK(cx.cuMemFreeAsync(pool, NULL));
  CU_OK(cu.cuStreamSynchronize(NULL));

  /* Errors of the file system come back as -errno. */
  int read_only = open_or_die(path, O_RDONLY | O_DIRECT);
  kvik__cufile_handle ro = register_fd(read_only);
  ASSERT_EQ(cf.cuFileWrite(ro, host, 4096, 0, 0), -EBADF);
  cf.cuFileHandleDeregister(ro);
  close(read_only);

  CU_OK(cu.cuMemFreeHost(pinned));
  free(host);
  free(m.bytes);
  free(src_bytes);
  CU_OK(cu.cuMemFree(src));
  CU_OK(cu.cuMemFree(dst));
  cf.cuFileHandleDeregister(fh);
  close(fd);
}

/* ---- Batches -------------------------------------------------------------------------------- */

static kvik__cufile_io_params batch_entry(kvik__cufile_handle fh, int opcode, void *base, off_t file_offset,
                                          off_t base_offset, size_t size, void *cookie) {
  return (kvik__cufile_io_params){KVIK__CUFILE_BATCH, {{base, file_offset, base_offset, size}}, fh, opcode, cookie};
}

/* Reap exactly `want` events, waiting as long as it takes. */
static unsigned reap(kvik__cufile_batch_handle b, unsigned want, kvik__cufile_io_event *events) {
  unsigned nr = want;
  CF_OK(cf.cuFileBatchIOGetStatus(b, want, &nr, events, NULL));
  ASSERT_EQ(nr, want);
  return nr;
}

static void test_batch_basics(kvik__cufile_handle fh, const unsigned char *data) {
  kvik__cufile_batch_handle b;
  CF_FAILS(cf.cuFileBatchIOSetUp(&b, 0), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileBatchIOSetUp(&b, 129), CU_FILE_INVALID_VALUE);
  CF_OK(cf.cuFileBatchIOSetUp(&b, 4));
  ASSERT_EQ(fake_live("batches"), 1);
  CUdeviceptr dev = device_alloc(256 * KiB);
  kvik__cufile_io_params p[4];
  int cookies[4];
  for (int i = 0; i < 4; i++)
    p[i] = batch_entry(fh, KVIK__CUFILE_READ, dev_ptr(dev), (off_t)(i * 64 * KiB), (off_t)(i * 64 * KiB), 64 * KiB,
                       &cookies[i]);
  CF_OK(cf.cuFileBatchIOSubmit(b, 4, p, 0));
  CF_FAILS(cf.cuFileBatchIOSubmit(b, 1, p, 0), CU_FILE_BATCH_FULL); /* until the events are reaped */
  kvik__cufile_io_event ev[8];
  unsigned nr = 8;
  CF_FAILS(cf.cuFileBatchIOGetStatus(b, 9, &nr, ev, NULL), CU_FILE_INVALID_VALUE);
  reap(b, 4, ev);
  int seen[4] = {0};
  for (int i = 0; i < 4; i++) {
    ASSERT_EQ(ev[i].status, KVIK__CUFILE_COMPLETE);
    ASSERT_EQ(ev[i].ret, 64 * KiB);
    seen[(int *)ev[i].cookie - cookies]++;
  }
  ASSERT(seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1);
  check_device(dev, data, 256 * KiB);
  nr = 4;
  CF_OK(cf.cuFileBatchIOGetStatus(b, 0, &nr, ev, &(struct timespec){0, 0}));
  ASSERT_EQ(nr, 0); /* each reported once */

  /* A bad entry anywhere refuses the whole submission. */
  kvik__cufile_io_params bad[3] = {p[0], p[1], p[2]};
  bad[1].mode = 0;
  CF_FAILS(cf.cuFileBatchIOSubmit(b, 3, bad, 0), CU_FILE_INVALID_VALUE);
  bad[1] = p[1];
  bad[2].opcode = 2;
  CF_FAILS(cf.cuFileBatchIOSubmit(b, 3, bad, 0), CU_FILE_INVALID_VALUE);
  bad[2] = p[2];
  bad[0].fh = (kvik__cufile_handle)0x1234;
  CF_FAILS(cf.cuFileBatchIOSubmit(b, 3, bad, 0), CU_FILE_INVALID_VALUE);
  ASSERT_EQ(fake_live("in_flight"), 0);
  CF_FAILS(cf.cuFileBatchIOSubmit((kvik__cufile_batch_handle)0x1234, 1, p, 0), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileBatchIOGetStatus((kvik__cufile_batch_handle)0x1234, 0, &nr, ev, NULL), CU_FILE_INVALID_VALUE);

  /* A write back, then a read of it. */
  kvik__cufile_io_params w = batch_entry(fh, KVIK__CUFILE_WRITE, dev_ptr(dev), 5, 0, 1000, NULL);
  CF_OK(cf.cuFileBatchIOSubmit(b, 1, &w, 0));
  reap(b, 1, ev);
  ASSERT_EQ(ev[0].status, KVIK__CUFILE_COMPLETE);
  ASSERT_EQ(ev[0].ret, 1000);
  cf.cuFileBatchIODestroy(b);
  ASSERT_EQ(fake_live("batches"), 0);
  CU_OK(cu.cuMemFree(dev));
}

static void test_batch_failure(kvik__cufile_handle read_only) {
  kvik__cufile_batch_handle b;
  CF_OK(cf.cuFileBatchIOSetUp(&b, 2));
  static char buf[4096];
  kvik__cufile_io_params w = batch_entry(read_only, KVIK__CUFILE_WRITE, buf, 0, 0, sizeof buf, buf);
  CF_OK(cf.cuFileBatchIOSubmit(b, 1, &w, 0));
  kvik__cufile_io_event ev;
  reap(b, 1, &ev);
  ASSERT_EQ(ev.status, KVIK__CUFILE_FAILED);
  ASSERT_EQ((ssize_t)ev.ret, -EBADF);
  ASSERT(ev.cookie == buf);
  cf.cuFileBatchIODestroy(b);
}

/* With slow IO: a timeout that passes, close refused while IO is in flight, cancel, destroy. */
static void test_batch_timing(kvik__cufile_handle fh) {
  kvik__cufile_batch_handle b;
  CF_OK(cf.cuFileBatchIOSetUp(&b, 4));
  static char buf[4][4096];
  kvik__cufile_io_params p[4];
  for (int i = 0; i < 4; i++) p[i] = batch_entry(fh, KVIK__CUFILE_READ, buf[i], 0, 0, 4096, buf[i]);
  kvik__cufile_io_event ev[4];

  setenv("FAKE_CUFILE_IO_DELAY_US", "500000", 1);
  CF_OK(cf.cuFileBatchIOSubmit(b, 1, p, 0));
  double t0 = now_ms();
  unsigned nr = 4;
  CF_OK(cf.cuFileBatchIOGetStatus(b, 1, &nr, ev, &(struct timespec){0, 20 * 1000 * 1000}));
  double waited = now_ms() - t0;
  ASSERT_EQ(nr, 0);
  if (waited < 15 || waited > 400) FAIL_AT("a timeout of 20 ms took %.1f ms", waited);
  ASSERT_EQ(fake_live("in_flight"), 1);
  CF_FAILS(cf.cuFileDriverClose(), CU_FILE_DRIVER_CLOSING);
  reap(b, 1, ev);
  ASSERT_EQ(ev[0].status, KVIK__CUFILE_COMPLETE);

  /* Cancel: what has not started is canceled (at most the first has), and reported once. */
  setenv("FAKE_CUFILE_IO_DELAY_US", "100000", 1);
  CF_OK(cf.cuFileBatchIOSubmit(b, 4, p, 0));
  CF_OK(cf.cuFileBatchIOCancel(b));
  reap(b, 4, ev);
  int canceled = 0;
  for (int i = 0; i < 4; i++) {
    if (ev[i].status == KVIK__CUFILE_CANCELED) canceled++;
    else ASSERT_EQ(ev[i].status, KVIK__CUFILE_COMPLETE);
  }
  ASSERT(canceled >= 3);
  ASSERT_EQ(fake_live("in_flight"), 0);
  CF_FAILS(cf.cuFileBatchIOCancel((kvik__cufile_batch_handle)0x1234), CU_FILE_INVALID_VALUE);

  /* Destroy waits for the running operation and drops the rest. */
  setenv("FAKE_CUFILE_IO_DELAY_US", "50000", 1);
  CF_OK(cf.cuFileBatchIOSubmit(b, 2, p, 0));
  cf.cuFileBatchIODestroy(b);
  ASSERT_EQ(fake_live("in_flight"), 0);
  ASSERT_EQ(fake_live("batches"), 0);
  unsetenv("FAKE_CUFILE_IO_DELAY_US");
}

static void test_batches(void) {
  unsigned char *data;
  int fd = direct_file("batch", MiB, 3, O_RDWR, &data);
  kvik__cufile_handle fh = register_fd(fd);
  test_batch_basics(fh, data);
  int ro_fd = open_or_die(g_paths[g_npaths - 1], O_RDONLY | O_DIRECT);
  kvik__cufile_handle ro = register_fd(ro_fd);
  test_batch_failure(ro);
  test_batch_timing(fh);
  cf.cuFileHandleDeregister(ro);
  cf.cuFileHandleDeregister(fh);
  close(ro_fd);
  close(fd);
  free(data);
}

/* ---- Stream-ordered IO ---------------------------------------------------------------------- */

typedef struct gate {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int open;
} gate;

/* A host function that holds its stream until the test opens the gate. */
static void gate_wait(void *arg) {
  gate *g = arg;
  pthread_mutex_lock(&g->lock);
  while (!g->open) pthread_cond_wait(&g->cond, &g->lock);
  pthread_mutex_unlock(&g->lock);
}

static void gate_open(gate *g) {
  pthread_mutex_lock(&g->lock);
  g->open = 1;
  pthread_cond_broadcast(&g->cond);
  pthread_mutex_unlock(&g->lock);
}

static void test_streams(void) {
  unsigned char *data;
  int fd = direct_file("stream", MiB, 4, O_RDWR, &data);
  const char *path = g_paths[g_npaths - 1];
  kvik__cufile_handle fh = register_fd(fd);
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CF_OK(cf.cuFileStreamRegister(s, 0));
  CF_OK(cf.cuFileStreamRegister(s, 0xf)); /* again: new flags, one registration */
  ASSERT_EQ(fake_live("streams"), 1);
  CF_FAILS(cf.cuFileStreamRegister(s, 0x10), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileStreamDeregister((CUstream)0x999), CU_FILE_INVALID_VALUE);

  /* The stream reads size and offsets when it reaches the operation, not when it is queued. */
  CUdeviceptr dev = device_alloc(256 * KiB);
  gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  CU_OK(cu.cuLaunchHostFunc(s, gate_wait, &g));
  size_t size = 1;
  off_t foff = 999, boff = 999;
  ssize_t bytes = -1;
  CF_OK(cf.cuFileReadAsync(fh, dev_ptr(dev), &size, &foff, &boff, &bytes, s));
  ASSERT_EQ(fake_live("in_flight"), 1);
  CF_FAILS(cf.cuFileDriverClose(), CU_FILE_DRIVER_CLOSING);
  size = 64 * KiB;
  foff = 4096;
  boff = 8192;
  gate_open(&g);
  CU_OK(cu.cuStreamSynchronize(s));
  ASSERT_EQ(bytes, 64 * KiB);
  check_device(dev + 8192, data + 4096, 64 * KiB);

  size = 4099;
  foff = (off_t)MiB - 7;
  boff = 8192;
  CF_OK(cf.cuFileWriteAsync(fh, dev_ptr(dev), &size, &foff, &boff, &bytes, s));
  CU_OK(cu.cuStreamSynchronize(s));
  ASSERT_EQ(bytes, 4099);
  size_t n;
  unsigned char *on_disk = test_read_file(path, &n);
  ASSERT_EQ(n, MiB + 4092);
  ASSERT_SAME_BYTES(on_disk + MiB - 7, data + 4096, 4099);
  free(on_disk);

  CF_FAILS(cf.cuFileReadAsync(fh, dev_ptr(dev), NULL, &foff, &boff, &bytes, s), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileReadAsync((kvik__cufile_handle)0x1234, dev_ptr(dev), &size, &foff, &boff, &bytes, s),
           CU_FILE_HANDLE_NOT_REGISTERED);
  kvik__cufile_error e = cf.cuFileReadAsync(fh, dev_ptr(dev), &size, &foff, &boff, &bytes, (CUstream)0x999);
  ASSERT_EQ(e.err, CU_FILE_CUDA_DRIVER_ERROR);
  ASSERT_EQ(e.cu_err, CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(fake_live("in_flight"), 0);

  CF_OK(cf.cuFileStreamDeregister(s));
  CF_FAILS(cf.cuFileStreamDeregister(s), CU_FILE_INVALID_VALUE);
  ASSERT_EQ(fake_live("streams"), 0);
  CU_OK(cu.cuStreamDestroy(s));
  CU_OK(cu.cuMemFree(dev));
  cf.cuFileHandleDeregister(fh);
  close(fd);
  free(data);
}

/* ---- Statistics ----------------------------------------------------------------------------- */

static kvik__cufile_stats1 stats(void) {
  kvik__cufile_stats1 s;
  memset(&s, 0x5a, sizeof s);
  CF_OK(cf.cuFileGetStatsL1(&s));
  return s;
}

static void test_stats(void) {
  int level = -1;
  CF_OK(cf.cuFileGetStatsLevel(&level));
  ASSERT_EQ(level, 0);
  kvik__cufile_stats1 s;
  CF_FAILS(cf.cuFileGetStatsL1(&s), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileSetStatsLevel(4), CU_FILE_INVALID_VALUE);
  CF_FAILS(cf.cuFileSetStatsLevel(-1), CU_FILE_INVALID_VALUE);
  CF_OK(cf.cuFileSetStatsLevel(1));
  CF_OK(cf.cuFileGetStatsLevel(&level));
  ASSERT_EQ(level, 1);
  CF_FAILS(cf.cuFileGetStatsL1(&s), CU_FILE_INVALID_VALUE); /* not started */

  int fd = direct_file("stats", 64 * KiB, 5, O_RDWR, NULL);
  kvik__cufile_handle fh = register_fd(fd);
  static char buf[8192];
  CF_OK(cf.cuFileStatsStart());
  ASSERT_EQ(cf.cuFileRead(fh, buf, 4096, 0, 0), 4096);
  ASSERT_EQ(cf.cuFileRead(fh, buf, 4096, 4096, 0), 4096);
  ASSERT_EQ(cf.cuFileRead(fh, NULL, 4096, 0, 0), -CU_FILE_INVALID_VALUE);
  ASSERT_EQ(cf.cuFileWrite(fh, buf, 8192, 0, 0), 8192);
  kvik__cufile_batch_handle b;
  CF_OK(cf.cuFileBatchIOSetUp(&b, 1));
  kvik__cufile_io_params p = batch_entry(fh, KVIK__CUFILE_READ, buf, 0, 0, 4096, NULL);
  CF_OK(cf.cuFileBatchIOSubmit(b, 1, &p, 0));
  kvik__cufile_io_event ev;
  reap(b, 1, &ev);
  cf.cuFileBatchIODestroy(b);

  kvik__cufile_stats1 expected;
  memset(&expected, 0, sizeof expected);
  expected.read_ops.ok = 2;
  expected.read_ops.err = 1;
  expected.write_ops.ok = 1;
  expected.read_bytes = 8192;
  expected.write_bytes = 8192;
  expected.batch_submit_ops.ok = 1;
  s = stats();
  ASSERT(memcmp(&s, &expected, sizeof s) == 0);
  CF_OK(cf.cuFileStatsStop());
  ASSERT_EQ(cf.cuFileRead(fh, buf, 4096, 0, 0), 4096); /* not counted, and the counts stay readable */
  s = stats();
  ASSERT(memcmp(&s, &expected, sizeof s) == 0);
  CF_OK(cf.cuFileStatsReset());
  memset(&expected, 0, sizeof expected);
  s = stats();
  ASSERT(memcmp(&s, &expected, sizeof s) == 0);
  CF_OK(cf.cuFileSetStatsLevel(0));
  CF_FAILS(cf.cuFileGetStatsL1(&s), CU_FILE_INVALID_VALUE);
  cf.cuFileHandleDeregister(fh);
  close(fd);
}

/* ---- Fault injection ------------------------------------------------------------------------ */

static void test_faults(void) {
  fake_reset();
  ASSERT_EQ(fake_calls("cuFileRead"), 0);
  ASSERT_EQ(fake_calls("cuFileDriverClose"), -1); /* the symbol is cuFileDriverClose_v2 */
  ASSERT_EQ(fake_calls("no such function"), -1);
  ASSERT_EQ(fake_live("no such thing"), -1);
  int fd = direct_file("faults", 64 * KiB, 6, O_RDWR, NULL);
  kvik__cufile_handle fh = register_fd(fd);
  static char buf[4096];

  /* The 2nd next call fails, once. */
  fake_fail("cuFileRead", 2, CU_FILE_IO_ERROR);
  ASSERT_EQ(cf.cuFileRead(fh, buf, 4096, 0, 0), 4096);
  ASSERT_EQ(cf.cuFileRead(fh, buf, 4096, 0, 0), -CU_FILE_IO_ERROR);
  ASSERT_EQ(cf.cuFileRead(fh, buf, 4096, 0, 0), 4096);
  ASSERT_EQ(fake_calls("cuFileRead"), 3);
  fake_fail("cuFileWrite", 1, EIO);
  ASSERT_EQ(cf.cuFileWrite(fh, buf, 4096, 0, 0), -EIO);

  /* nth 0: every call, until reset; a failed call does nothing. */
  fake_fail("cuFileBufRegister", 0, CU_FILE_GPU_MEMORY_PINNING_FAILED);
  for (int i = 0; i < 3; i++) CF_FAILS(cf.cuFileBufRegister(buf, sizeof buf, 0), CU_FILE_GPU_MEMORY_PINNING_FAILED);
  ASSERT_EQ(fake_live("buffers"), 0);
  ASSERT_EQ(fake_calls("cuFileBufRegister"), 3);
  fake_reset();
  CF_OK(cf.cuFileBufRegister(buf, sizeof buf, 0));
  CF_OK(cf.cuFileBufDeregister(buf));

  /* Several at once, and on functions of every kind. */
  fake_fail("cuFileDriverClose_v2", 1, CU_FILE_INTERNAL_ERROR);
  fake_fail("cuFileGetVersion", 1, CU_FILE_INVALID_VALUE);
  fake_fail("cuFileHandleRegister", 1, CU_FILE_INTERNAL_ERROR);
  fake_fail("cuFileBatchIOSetUp", 1, CU_FILE_NOMEM_ERROR);
  CF_FAILS(cf.cuFileDriverClose(), CU_FILE_INTERNAL_ERROR);
  ASSERT_EQ(fake_live("driver"), 1);
  int version;
  CF_FAILS(cf.cuFileGetVersion(&version), CU_FILE_INVALID_VALUE);
  kvik__cufile_descr descr = {KVIK__CUFILE_HANDLE_TYPE_OPAQUE_FD, {.fd = fd}, NULL};
  kvik__cufile_handle other;
  CF_FAILS(cf.cuFileHandleRegister(&other, &descr), CU_FILE_INTERNAL_ERROR); /* before its own checks */
  kvik__cufile_batch_handle b;
  CF_FAILS(cf.cuFileBatchIOSetUp(&b, 1), CU_FILE_NOMEM_ERROR);
  ASSERT_EQ(fake_live("batches"), 0);
  ASSERT_EQ(fake_live("handles"), 1);
  /* Reset disarms. */
  fake_fail("cuFileRead", 1, CU_FILE_IO_ERROR);
  fake_reset();
  ASSERT_EQ(cf.cuFileRead(fh, buf, 4096, 0, 0), 4096);
  ASSERT_EQ(fake_calls("cuFileRead"), 1);
  cf.cuFileHandleDeregister(fh);
  close(fd);
}

/* ---- Threads, for the sanitizers -------------------------------------------------------------- */

typedef struct worker_arg {
  CUcontext ctx;
  kvik__cufile_handle fh;
  int index;
} worker_arg;

/* Each thread owns 256 KiB of the file and writes and reads it back at random offsets. */
static void *worker(void *p) {
  worker_arg *a = p;
  CU_OK(cu.cuCtxPushCurrent(a->ctx));
  size_t region = 256 * KiB;
  off_t base = (off_t)(a->index * region);
  CUdeviceptr dev = device_alloc(region);
  unsigned char *bytes = malloc(region), *back = malloc(region);
  uint64_t rng = (uint64_t)a->index + 11;
  for (int i = 0; i < 20; i++) {
    size_t off = test_below(&rng, region / 2), n = 1 + test_below(&rng, region / 2);
    test_fill(bytes, n, rng);
    CU_OK(cx.cuMemcpyHtoD(dev + off, bytes, n));
    ASSERT_EQ(cf.cuFileWrite(a->fh, dev_ptr(dev), n, base + (off_t)off, (off_t)off), n);
    ASSERT_EQ(cf.cuFileRead(a->fh, back, n, base + (off_t)off, 0), n);
    ASSERT_SAME_BYTES(back, bytes, n);
  }
  free(bytes);
  free(back);
  CU_OK(cu.cuMemFree(dev));
  CU_OK(cu.cuCtxPopCurrent(NULL));
  return NULL;
}

static void test_threads(CUcontext ctx) {
  int fd = direct_file("threads", 0, 0, O_RDWR, NULL);
  kvik__cufile_handle fh = register_fd(fd);
  enum { THREADS = 4 };
  pthread_t threads[THREADS];
  worker_arg args[THREADS];
  for (int i = 0; i < THREADS; i++) {
    args[i] = (worker_arg){ctx, fh, i};
    ASSERT(pthread_create(&threads[i], NULL, worker, &args[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  cf.cuFileHandleDeregister(fh);
  close(fd);
}

/* ---- Shutdown ------------------------------------------------------------------------------- */

static void test_close(void) {
  expect_no_leaks();
  CF_OK(cf.cuFileDriverClose());
  ASSERT_EQ(fake_live("driver"), 0);
  int version;
  CF_OK(cf.cuFileGetVersion(&version));
  bool b;
  CF_OK(cf.cuFileGetParameterBool(1, &b));
  CF_OK(cf.cuFileDriverOpen());
  CF_OK(cf.cuFileDriverClose());
}

/* O_DIRECT needs a file system that supports it (tmpfs before Linux 6.6 does not). */
static int direct_io_works(void) {
  const char *path = local_path("probe");
  int fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) return 0;
  close(fd);
  return 1;
}

int main(void) {
  g_owner = getpid();
  atexit(remove_files);
  void *cufile = dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cufile || !dlsym(cufile, "fake_cufile_reset") || !cuda || !dlsym(cuda, "fake_cuda_reset")) {
    printf("skip: libcufile.so.0 and libcuda.so.1 are not both the fakes\n");
    return TEST_SKIP;
  }
  if (!direct_io_works()) {
    printf("skip: the working directory does not open files with O_DIRECT: %s\n", strerror(errno));
    return TEST_SKIP;
  }
  load_cufile(cufile);
  load_cuda(cuda);

  test_children();
  test_parameters();
  test_properties();
  CU_OK(cu.cuInit(0));
  CUcontext p0;
  CU_OK(cu.cuDevicePrimaryCtxRetain(&p0, 0));
  CU_OK(cu.cuCtxPushCurrent(p0));
  test_handles();
  test_buffers();
  test_device_round_trip();
  test_batches();
  test_streams();
  test_stats();
  test_faults();
  test_threads(p0);
  test_close();
  CU_OK(cu.cuCtxPopCurrent(NULL));
  CU_OK(cx.cuDevicePrimaryCtxRelease(0));
  printf("fake cuFile: all checks passed\n");
  return 0;
}
