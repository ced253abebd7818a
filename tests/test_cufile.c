/* GPUDirect Storage against whichever libcufile.so.0 the loader finds:
 *  - none (CI's plain runs): compat mode ON and AUTO give POSIX with the reason, OFF fails to
 *    open with KVIK_ECUFILE_UNAVAILABLE, buffer registrations are only recorded;
 *  - the fake of tests/fake_cufile.c (with the fake CUDA driver): the decision table of
 *    ON/AUTO/OFF, cuFile reads and writes compared byte for byte with the file at random
 *    unaligned offsets (cuFile only ever sees page-aligned file offsets), raw IO, buffer
 *    registration errors, stream-ordered IO through cuFileReadAsync/WriteAsync, driver
 *    properties, parameters and statistics, failures of each cuFile call, fork, and exit while
 *    IO is in flight and handles are open (the fake aborts on any call after the driver closed);
 *  - a real cuFile (the GPU machine): whatever OFF gives (an open, or a clear error), AUTO must
 *    agree with it; properties, version, parameters and statistics must read.
 *
 * The random choices come from one seed, printed at the start; KVIK_TEST_SEED=N repeats a run. */
#include <dlfcn.h>
#include <sys/wait.h>
#include <time.h>

#include "test_cuda.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define FILE_BYTES (24 * MiB + 777)

static uint64_t seed;
static char *dir;
static unsigned char *reference; /* the content of the reference file */
static char *ref_path;

typedef enum { NO_CUFILE, FAKE_CUFILE, REAL_CUFILE } cufile_kind;

static cufile_kind find_cufile(void) {
  int found = load_fake_cufile();
  return found < 0 ? NO_CUFILE : found ? FAKE_CUFILE : REAL_CUFILE;
}

static void set_compat(kvik_compat_mode mode) { ASSERT_OK(kvik_setting_set(KVIK_SETTING_COMPAT_MODE, mode)); }

static kvik_file *open_with(kvik_compat_mode mode, const char *path, const char *flags) {
  set_compat(mode);
  kvik_file *f = NULL;
  ASSERT_OK(kvik_file_open(path, flags, 0644, &f));
  set_compat(KVIK_COMPAT_AUTO);
  return f;
}

static int backend_of(kvik_file *f, char *why, size_t len) {
  int b = kvik_file_backend(f, why, len);
  ASSERT(b == KVIK_BACKEND_POSIX || b == KVIK_BACKEND_CUFILE);
  return b;
}

static int udev_readable(void) { return access("/run/udev", R_OK) == 0; }

/* ---- every kind of library ------------------------------------------------------------- */

static void test_compat_on_never_loads_cufile(cufile_kind kind) {
  kvik_file *f = open_with(KVIK_COMPAT_ON, ref_path, "r");
  char why[512];
  ASSERT_EQ(backend_of(f, why, sizeof why), KVIK_BACKEND_POSIX);
  ASSERT(strstr(why, "compat mode is ON"));
  kvik_file_free(f);
  if (kind == FAKE_CUFILE) ASSERT_EQ(fake.calls("cuFileDriverOpen"), 0);
}

static void test_without_cufile(void) {
  set_compat(KVIK_COMPAT_OFF);
  kvik_file *f = NULL;
  ASSERT_FAILS(kvik_file_open(ref_path, "r", 0, &f), KVIK_ECUFILE_UNAVAILABLE, "libcufile.so.0");
  ASSERT(strstr(kvik_last_error(), "compat mode is OFF"));
  ASSERT(f == NULL);
  set_compat(KVIK_COMPAT_AUTO);
  f = open_with(KVIK_COMPAT_AUTO, ref_path, "r");
  char why[512];
  ASSERT_EQ(backend_of(f, why, sizeof why), KVIK_BACKEND_POSIX);
  ASSERT(strstr(why, "libcufile.so.0") || strstr(why, "/run/udev"));
  unsigned char buf[100];
  ASSERT_EQ(kvik_file_read(f, buf, sizeof buf, 5), (long long)sizeof buf);
  ASSERT_SAME_BYTES(buf, reference + 5, sizeof buf);
  kvik_file_free(f);
  ASSERT_FAILS(kvik_cufile_open(), KVIK_ECUFILE_UNAVAILABLE, "libcufile.so.0");
  ASSERT_EQ(kvik_cufile_stream_register(NULL, 0), 0);
}

/* Registration is recorded, with the same errors, where cuFile is not in use. */
static void test_registration(cufile_kind kind) {
  char *dev = device_alloc(3 * MiB);
  ASSERT_OK(kvik_cufile_buffer_register(dev + 4096, 0));
  ASSERT_FAILS(kvik_cufile_buffer_register(dev, 0), -KVIK__CU_FILE_MEMORY_ALREADY_REGISTERED, "registered already");
  ASSERT_EQ(kvik_err_name(-KVIK__CU_FILE_MEMORY_ALREADY_REGISTERED), kvik_err_name(-5023));
  if (kind == FAKE_CUFILE) ASSERT_EQ(fake.live("buffers"), 1);
  ASSERT_OK(kvik_cufile_buffer_deregister(dev + MiB));
  ASSERT_FAILS(kvik_cufile_buffer_deregister(dev), -KVIK__CU_FILE_MEMORY_NOT_REGISTERED, "not registered");
  char host[16];
  ASSERT_FAILS(kvik_cufile_buffer_register(host, 0), -EINVAL, "not device memory");
  ASSERT_FAILS(kvik_cufile_buffer_register(NULL, 0), -EINVAL, "NULL");
  if (kind == FAKE_CUFILE) ASSERT_EQ(fake.live("buffers"), 0);
  device_free(dev);
}

/* ---- the fake: cuFile's data path --------------------------------------------------------- */

static void check_device_range(const char *dev, size_t n, const unsigned char *expected) {
  unsigned char *host = malloc(n ? n : 1);
  from_device(host, dev, n);
  ASSERT_SAME_BYTES(host, expected, n);
  free(host);
}

/* Reads at random offsets and sizes, small (POSIX) and large (cuFile with a POSIX head and
 * tail), some reaching past the end of the file; cuFile never sees an unaligned offset. */
static void test_gds_reads(kvik_file *f) {
  char *dev = device_alloc(8 * MiB);
  long reads_before = fake.calls("cuFileRead");
  for (int i = 0; i < 40; i++) {
    size_t size = i % 4 == 0 ? test_below(&seed, 64 * KiB) : MiB + test_below(&seed, 7 * MiB);
    int64_t offset = (int64_t)test_below(&seed, FILE_BYTES + 5000);
    size_t task = i % 3 == 0 ? 0 : 64 * KiB + test_below(&seed, 2 * MiB);
    size_t expect = (uint64_t)offset >= FILE_BYTES ? 0 : (size_t)(FILE_BYTES - offset) < size ? FILE_BYTES - (size_t)offset : size;
    kvik_future *fut;
    ASSERT_OK(kvik_file_pread(f, dev, size, offset, task, &fut));
    ASSERT_EQ(kvik_future_wait(fut), (long long)expect);
    kvik_future_free(fut);
    check_device_range(dev, expect, reference + (expect ? offset : 0));
  }
  ASSERT(fake.calls("cuFileRead") > reads_before);
  ASSERT_EQ(fake.calls("unaligned_io"), 0);
  device_free(dev);
}

static void test_gds_writes(void) {
  char *path = test_path(dir, "gds_write");
  kvik_file *f = open_with(KVIK_COMPAT_OFF, path, "w+");
  size_t n = 9 * MiB + 4321;
  unsigned char *data = malloc(n), *expected = calloc(1, n + 2 * MiB);
  test_fill(data, n, seed + 1);
  char *dev = device_alloc(n);
  to_device(dev, data, n);
  long writes_before = fake.calls("cuFileWrite");
  size_t end = 0;
  for (int i = 0; i < 20; i++) {
    size_t size = i % 5 == 0 ? test_below(&seed, 4 * KiB) : MiB + test_below(&seed, 5 * MiB);
    size_t src = test_below(&seed, n - size), offset = test_below(&seed, 2 * MiB);
    ASSERT_EQ(kvik_file_write(f, dev + src, size, (int64_t)offset), (long long)size);
    memcpy(expected + offset, data + src, size);
    if (offset + size > end) end = offset + size;
  }
  ASSERT(fake.calls("cuFileWrite") > writes_before);
  ASSERT_EQ(fake.calls("unaligned_io"), 0);
  kvik_file_free(f);
  size_t got_n;
  unsigned char *got = test_read_file(path, &got_n);
  ASSERT_EQ(got_n, end);
  ASSERT_SAME_BYTES(got, expected, end);
  free(got);
  free(data);
  free(expected);
  device_free(dev);
  free(path);
}

static void test_raw_io(kvik_file *f) {
  char *dev = device_alloc(2 * MiB);
  long before = fake.calls("cuFileRead");
  ASSERT_EQ(kvik_file_raw_read(f, dev, MiB, 8192, 4096), (long long)MiB);
  ASSERT_EQ(fake.calls("cuFileRead"), before + 1);
  check_device_range(dev + 4096, MiB, reference + 8192);
  ASSERT_EQ(kvik_file_raw_read(f, dev, MiB, FILE_BYTES - 100, 0), 100);
  char host[8];
  ASSERT_FAILS(kvik_file_raw_read(f, host, 8, 0, 0), -EINVAL, "not device memory");
  ASSERT_FAILS(kvik_file_raw_read(f, dev, 8, -1, 0), -EINVAL, "negative");
  ASSERT_EQ(kvik_file_raw_read(f, NULL, 0, 0, 0), 0); /* an empty array: no pointer */
  ASSERT_EQ(kvik_file_raw_read(f, dev, 0, 0, 0), 0);
  ASSERT_FAILS(kvik_file_raw_read(f, NULL, 8, 0, 0), -EINVAL, "NULL buffer");
  device_free(dev);
}

static void test_stream_io(kvik_file *f) {
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  ASSERT_OK(kvik_cufile_stream_register(s, 0));
  ASSERT_EQ(fake.live("streams"), 1);
  char *dev = device_alloc(4 * MiB);
  long before = fake.calls("cuFileReadAsync");
  kvik_future *fut;
  ASSERT_OK(kvik_file_read_async(f, dev, 3 * MiB + 5, 12345, s, &fut));
  CU_OK(cu.cuStreamSynchronize(s));
  ASSERT(kvik_future_done(fut));
  ASSERT_EQ(kvik_future_wait(fut), (long long)(3 * MiB + 5));
  kvik_future_free(fut);
  ASSERT_EQ(fake.calls("cuFileReadAsync"), before + 1);
  check_device_range(dev, 3 * MiB + 5, reference + 12345);
  /* At the end of the file the future says how much there was. */
  ASSERT_OK(kvik_file_read_async(f, dev, MiB, FILE_BYTES - 10, s, &fut));
  ASSERT_EQ(kvik_future_wait(fut), 10);
  kvik_future_free(fut);
  /* A failure of the transfer reaches the future. */
  fake.fail("cuFileReadAsync", 1, KVIK__CU_FILE_IO_ERROR);
  ASSERT_FAILS(kvik_file_read_async(f, dev, MiB, 0, s, &fut), -KVIK__CU_FILE_IO_ERROR, "cuFileReadAsync");
  ASSERT_OK(kvik_cufile_stream_deregister(s));
  ASSERT_EQ(fake.live("streams"), 0);
  CU_OK(cu.cuStreamDestroy_v2(s));
  device_free(dev);
}

static void test_stream_write(void) {
  char *path = test_path(dir, "stream_write");
  kvik_file *f = open_with(KVIK_COMPAT_OFF, path, "w+");
  CUstream s;
  CU_OK(cu.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  char *dev = device_alloc(2 * MiB);
  to_device(dev, reference, 2 * MiB);
  kvik_future *fut;
  ASSERT_OK(kvik_file_write_async(f, dev, 2 * MiB, 100, s, &fut));
  ASSERT_EQ(kvik_future_wait(fut), (long long)(2 * MiB));
  kvik_future_free(fut);
  ASSERT(fake.calls("cuFileWriteAsync") >= 1);
  kvik_file_free(f);
  size_t n;
  unsigned char *got = test_read_file(path, &n);
  ASSERT_EQ(n, 2 * MiB + 100);
  ASSERT_SAME_BYTES(got + 100, reference, 2 * MiB);
  free(got);
  CU_OK(cu.cuStreamDestroy_v2(s));
  device_free(dev);
  free(path);
}

/* Each cuFile failure comes back with its own code and name. */
static void test_failures(kvik_file *f) {
  char *dev = device_alloc(4 * MiB);
  fake.fail("cuFileRead", 1, KVIK__CU_FILE_IO_ERROR);
  ASSERT_FAILS(kvik_file_read(f, dev, 4 * MiB, 0), -KVIK__CU_FILE_IO_ERROR, "CU_FILE_IO_ERROR");
  fake.fail("cuFileRead", 1, EIO);
  ASSERT_FAILS(kvik_file_read(f, dev, 4 * MiB, 0), -EIO, "cuFileRead");
  fake.fail("cuFileHandleRegister", 1, KVIK__CU_FILE_HANDLE_NOT_REGISTERED);
  set_compat(KVIK_COMPAT_OFF);
  kvik_file *g = NULL;
  ASSERT_FAILS(kvik_file_open(ref_path, "r", 0, &g), -KVIK__CU_FILE_HANDLE_NOT_REGISTERED,
               "CU_FILE_HANDLE_NOT_REGISTERED");
  ASSERT(strstr(kvik_last_error(), "compat mode is OFF"));
  if (!udev_readable()) ASSERT(strstr(kvik_last_error(), "/run/udev"));
  set_compat(KVIK_COMPAT_AUTO);
  device_free(dev);
}

static void test_auto(void) {
  kvik_file *f = open_with(KVIK_COMPAT_AUTO, ref_path, "r");
  char why[512];
  int backend = backend_of(f, why, sizeof why);
  if (udev_readable()) {
    ASSERT_EQ(backend, KVIK_BACKEND_CUFILE);
    ASSERT(strstr(why, "cuFile's own compatibility mode"));
  } else {
    ASSERT_EQ(backend, KVIK_BACKEND_POSIX);
    ASSERT(strstr(why, "/run/udev"));
  }
  kvik_file_free(f);
  if (!udev_readable()) return;
  fake.fail("cuFileHandleRegister", 1, KVIK__CU_FILE_HANDLE_NOT_REGISTERED);
  f = open_with(KVIK_COMPAT_AUTO, ref_path, "r");
  ASSERT_EQ(backend_of(f, why, sizeof why), KVIK_BACKEND_POSIX);
  ASSERT(strstr(why, "CU_FILE_HANDLE_NOT_REGISTERED"));
  kvik_file_free(f);
}

static void test_driver_controls(cufile_kind kind) {
  ASSERT_OK(kvik_cufile_open());
  int version = kvik_cufile_version();
  ASSERT(version > 1000);
  if (kind == FAKE_CUFILE) ASSERT_EQ(version, 1150);
  kvik_cufile_properties p = {.struct_size = sizeof p};
  ASSERT_OK(kvik_cufile_get_properties(&p));
  ASSERT(p.max_direct_io_size > 0 && p.max_batch_io_size > 0);
  ASSERT_EQ(p.gds_available, p.nvfs_major_version > 0);
  kvik_cufile_properties small = {.struct_size = sizeof(size_t) + sizeof(unsigned)};
  ASSERT_OK(kvik_cufile_get_properties(&small));
  ASSERT_EQ(small.nvfs_major_version, p.nvfs_major_version);
  ASSERT_EQ(small.max_batch_io_size, 0); /* beyond the caller's struct_size: untouched */
  ASSERT_FAILS(kvik_cufile_get_properties(NULL), -EINVAL, "struct_size");
  if (kind == FAKE_CUFILE) {
    ASSERT_OK(kvik_cufile_set_max_direct_io_size(8 * MiB));
    ASSERT_OK(kvik_cufile_get_properties(&p));
    ASSERT_EQ(p.max_direct_io_size, 8 * MiB);
    ASSERT_OK(kvik_cufile_set_poll_mode(1, 64 * KiB));
    ASSERT_OK(kvik_cufile_get_properties(&p));
    ASSERT_EQ(p.poll_mode, 1);
    ASSERT_EQ(p.poll_threshold_size, 64 * KiB);
    ASSERT_FAILS(kvik_cufile_set_max_cache_size(0), -KVIK__CU_FILE_INVALID_VALUE, "CU_FILE_INVALID_VALUE");
  }
  char value[256];
  for (unsigned i = 0; kvik_cufile_parameter_name(i); i++) {
    int rc = kvik_cufile_parameter_get(kvik_cufile_parameter_name(i), value, sizeof value);
    if (kind == FAKE_CUFILE) ASSERT_OK(rc);
  }
  ASSERT_OK(kvik_cufile_parameter_get("properties_max_direct_io_size_kb", value, sizeof value));
  ASSERT(atoi(value) > 0);
  ASSERT_FAILS(kvik_cufile_parameter_get("no_such_parameter", value, sizeof value), -EINVAL, "no such");
  ASSERT_FAILS(kvik_cufile_parameter_set("properties_use_poll_mode", "maybe"), -EINVAL, "true or false");
  if (kind == FAKE_CUFILE)
    ASSERT_FAILS(kvik_cufile_parameter_set("properties_max_direct_io_size_kb", "1024"),
                 -KVIK__CU_FILE_DRIVER_ALREADY_OPEN, "CU_FILE_DRIVER_ALREADY_OPEN");
  ASSERT_FAILS(kvik_cufile_stats_start(7), -EINVAL, "level");
  ASSERT_OK(kvik_cufile_stats_start(1));
  ASSERT_OK(kvik_cufile_stats_reset());
  kvik_cufile_stats s = {.struct_size = sizeof s};
  ASSERT_OK(kvik_cufile_stats_get(&s));
  ASSERT_OK(kvik_cufile_stats_stop());
}

/* Statistics count cuFile's reads. */
static void test_stats_count(kvik_file *f) {
  char *dev = device_alloc(2 * MiB);
  ASSERT_OK(kvik_cufile_stats_start(1));
  ASSERT_OK(kvik_cufile_stats_reset());
  ASSERT_EQ(kvik_file_read(f, dev, 2 * MiB, 0), (long long)(2 * MiB));
  kvik_cufile_stats s = {.struct_size = sizeof s};
  ASSERT_OK(kvik_cufile_stats_get(&s));
  ASSERT_EQ(s.read_bytes, 2 * MiB);
  ASSERT_OK(kvik_cufile_stats_stop());
  device_free(dev);
}

/* A child forked after cuFile was used: the files it inherited still do host IO, and a file it
 * opens with AUTO falls back to POSIX (CUDA, which cuFile needs, does not survive fork). */
static void test_fork(void) {
  kvik_file *f = open_with(KVIK_COMPAT_OFF, ref_path, "r");
  pid_t pid = fork();
  if (pid == 0) {
    unsigned char buf[64];
    if (kvik_file_read(f, buf, sizeof buf, 7) != (ssize_t)sizeof buf || memcmp(buf, reference + 7, sizeof buf)) _exit(2);
    kvik_file *g = NULL;
    if (kvik_file_open(ref_path, "r", 0, &g) < 0) _exit(3);
    char why[512];
    if (kvik_file_backend(g, why, sizeof why) != KVIK_BACKEND_POSIX) _exit(4);
    kvik_file_free(g);
    kvik_file_free(f);
    _exit(0);
  }
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  kvik_file_free(f);
}

/* The child side of test_exit_in_flight: open cuFile files, leave IO running, and exit. */
static int exit_in_flight_child(const char *path) {
  kvik_file *f = NULL, *idle = NULL;
  set_compat(KVIK_COMPAT_OFF);
  if (!load_cuda() || kvik_file_open(path, "r", 0, &f) < 0 || kvik_file_open(path, "r", 0, &idle) < 0) return 3;
  char *dev = device_alloc(16 * MiB);
  kvik_future *fut;
  if (kvik_file_pread(f, dev, 16 * MiB, 0, MiB, &fut) < 0) return 4;
  exit(0); /* with 16 reads of 20 ms queued or running, and two handles registered */
}

/* Exit while cuFile IO is in flight and handles are open: the driver closes only after the
 * running calls, later calls stop at kvik's gate, and nothing calls cuFile after its close (the
 * fake aborts if anything does). */
static void test_exit_in_flight(const char *self) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("FAKE_CUFILE_IO_DELAY_US", "20000", 1);
    execl("/proc/self/exe", self, "--exit-in-flight", ref_path, (char *)NULL);
    _exit(5);
  }
  int status;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status)) FAIL_AT("the child died of signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  ASSERT_EQ(WEXITSTATUS(status), 0);
}

/* ---- a real cuFile ---------------------------------------------------------------------------- */

/* OFF either serves the file or fails clearly, and AUTO agrees with it. */
static void test_real_decision(void) {
  set_compat(KVIK_COMPAT_OFF);
  kvik_file *off = NULL;
  int rc = kvik_file_open(ref_path, "r", 0, &off);
  char message[1024];
  snprintf(message, sizeof message, "%s", kvik_last_error());
  set_compat(KVIK_COMPAT_AUTO);
  kvik_file *f = open_with(KVIK_COMPAT_AUTO, ref_path, "r");
  char why[1024];
  int backend = backend_of(f, why, sizeof why);
  printf("compat mode OFF: %s\ncompat mode AUTO: %s: %s\n", rc < 0 ? message : "cuFile serves the file",
         backend == KVIK_BACKEND_CUFILE ? "cuFile" : "POSIX", why);
  if (rc < 0) {
    ASSERT(KVIK_IS_CUFILE_ERROR(rc) || rc == KVIK_ECUFILE_UNAVAILABLE || rc > KVIK_ERRNO_BASE);
    ASSERT(strstr(message, "compat mode is OFF"));
    ASSERT_EQ(backend, KVIK_BACKEND_POSIX);
  } else {
    kvik_file_free(off);
    if (udev_readable()) ASSERT_EQ(backend, KVIK_BACKEND_CUFILE);
  }
  kvik_file_free(f);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--exit-in-flight") == 0) return exit_in_flight_child(argv[2]);
  const char *seed_env = getenv("KVIK_TEST_SEED");
  seed = seed_env ? strtoull(seed_env, NULL, 10) : (uint64_t)time(NULL);
  printf("seed %llu (KVIK_TEST_SEED to repeat)\n", (unsigned long long)seed);
  seed |= 1;
  dir = test_mkdtemp();
  ref_path = test_path(dir, "reference");
  reference = malloc(FILE_BYTES);
  test_fill(reference, FILE_BYTES, seed);
  test_write_file(ref_path, reference, FILE_BYTES);

  cufile_kind kind = find_cufile();
  int have_cuda = load_cuda();
  test_compat_on_never_loads_cufile(kind);
  if (kind == NO_CUFILE) {
    test_without_cufile();
    if (have_cuda) test_registration(kind);
  } else if (!have_cuda) {
    printf("cuFile found, but no CUDA device: skipping\n");
    test_rmdir(dir);
    return TEST_SKIP;
  } else if (kind == REAL_CUFILE) {
    test_real_decision();
    test_driver_controls(kind);
  } else if (kvik_direct_io_supported(dir) != 1) {
    printf("%s does not support O_DIRECT, which cuFile needs: skipping\n", dir);
    test_rmdir(dir);
    return TEST_SKIP;
  } else {
    test_auto();
    kvik_file *f = open_with(KVIK_COMPAT_OFF, ref_path, "r");
    char why[512];
    ASSERT_EQ(backend_of(f, why, sizeof why), KVIK_BACKEND_CUFILE);
    test_gds_reads(f);
    test_gds_writes();
    test_raw_io(f);
    test_stream_io(f);
    test_stream_write();
    test_registration(kind);
    test_failures(f);
    test_driver_controls(kind);
    test_stats_count(f);
    kvik_file_free(f);
    ASSERT_EQ(fake.live("handles"), 0);
    ASSERT_EQ(fake.live("in_flight"), 0);
    test_fork();
    test_exit_in_flight(argv[0]);
  }
  free(reference);
  free(ref_path);
  test_rmdir(dir);
  printf("ok\n");
  return 0;
}
