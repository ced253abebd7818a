/* A fake cuFile library (GPUDirect Storage) for machines without a GPU: tests/fake_cufile.c,
 * built as <build>/tests/fake_cufile/libcufile.so.0. Tests that run with KVIK_FAKE_CUFILE_ENV
 * (tests/CMakeLists.txt) in their environment make kvik's dlopen("libcufile.so.0") load it, and
 * its own dlopen("libcuda.so.1") load the fake CUDA driver (fake_cuda.h), whose device memory it
 * moves through cuMemcpyHtoD/DtoH, never touching it with the CPU. (It never loads CUDA itself:
 * until the process has, every pointer is host memory.)
 *
 * It exports every function of src/cufile.h under its real symbol (cuFileDriverClose_v2, ...)
 * and models cuFile in compatibility mode (or, with FAKE_CUFILE_NVFS, with nvidia-fs loaded),
 * strictly, so that kvik's misuses fail loudly instead of passing by luck:
 *  - A call after cuFileDriverClose (other than cuFileDriverOpen, cuFileGetVersion and the
 *    parameter getters) prints "fake_cufile: <symbol> called after cuFileDriverClose" and
 *    aborts. So do, each with its own message: cuFileHandleDeregister and cuFileBatchIODestroy
 *    of an unknown handle; deregistering a file handle while IO on it is still queued or
 *    running; destroying a batch that another thread is using; and cuFileBatchIOGetStatus with
 *    no timeout waiting for more operations than are outstanding (it would hang).
 *  - cuFileDriverClose_v2 returns CU_FILE_DRIVER_CLOSING while any cuFile call runs or any IO
 *    it accepted (synchronous, batch or stream-ordered) has not finished.
 *  - IO, registration, batch and stream calls made before the driver was opened open it
 *    implicitly, as cuFile does. One close closes it, however many opens came before. Without
 *    nvidia-fs and with the parameter properties_allow_compat_mode false, it does not open
 *    (CU_FILE_DRIVER_NOT_INITIALIZED).
 *  - File handles need an fd opened with O_DIRECT; an IO through a handle whose fd was closed
 *    and reused for another file aborts. Unaligned IO works (through a second, buffered
 *    descriptor of the same file) and is counted: fake_cufile_calls("unaligned_io").
 *  - Batch operations run on a worker thread per batch, in submission order. An operation keeps
 *    its slot until cuFileBatchIOGetStatus reported it, so a batch set up for nr operations is
 *    full (CU_FILE_BATCH_FULL) with nr submitted and not yet reaped.
 *  - Stream-ordered operations run on the stream when it reaches them, reading *size_p,
 *    *file_offset_p and *base_offset_p only then.
 *  - Statistics count synchronous and stream-ordered IO (and batch submissions) while started at
 *    a level of 1 or more; stopped, they keep their counts for reading. The level is the
 *    profile_stats parameter. cuFileDriverGetProperties reports the parameters, and the
 *    cuFileDriverSet* calls change them, as in cuFile's single configuration.
 *
 * Environment, read when first needed:
 *   FAKE_CUFILE_NVFS         "major.minor" of a loaded nvidia-fs (say "2.26"); unset: none
 *   FAKE_CUFILE_VERSION      what cuFileGetVersion returns (default 1150)
 *   FAKE_CUFILE_IO_DELAY_US  microseconds every transfer waits first (default 0); read at each
 *                            transfer, so a test may change it between phases
 *
 * The control API below is exported too. Tests find it with dlsym() on the handle of
 * "libcufile.so.0", so that the same test can run against the real library, where it is absent:
 *
 *   void *cufile = dlopen("libcufile.so.0", RTLD_NOW | RTLD_LOCAL);
 *   fake_cufile_fail_fn fail = (fake_cufile_fail_fn)dlsym(cufile, "fake_cufile_fail");
 *   if (!fail) return TEST_SKIP;   // the real cuFile: fault injection is not available
 *
 * Every control function is thread-safe and may be called at any time. */
#ifndef KVIK_TESTS_FAKE_CUFILE_H
#define KVIK_TESTS_FAKE_CUFILE_H

#include "../src/cufile.h"

/* Arm a failure of the function exported as `symbol` ("cuFileRead", "cuFileDriverClose_v2",
 * ...): the nth next call (1 = the very next; calls by any thread count) returns `status`
 * without doing anything, as {status, 0}, or -status from cuFileRead and cuFileWrite (so an
 * errno such as EIO gives -EIO). nth == 0 fails every call until fake_cufile_reset(). Several
 * failures may be armed at once. An unknown symbol, a function returning void, nth < 0 or
 * status 0 is a bug in the test: the fake prints it and aborts. */
void fake_cufile_fail(const char *symbol, int nth, int status);

/* Calls of the function exported as `symbol` since the library was loaded or last reset, failed
 * ones included; "unaligned_io" counts the IO operations (cuFileRead/Write, batch and
 * stream-ordered) whose file offset is not a multiple of 4096. -1 for an unknown name. */
long fake_cufile_calls(const char *symbol);

/* Live counts, for leak checks; -1 for an unknown name:
 *   "driver"     1 while the driver is open, else 0
 *   "handles"    file handles registered and not deregistered
 *   "buffers"    buffers registered and not deregistered
 *   "batches"    batches set up and not destroyed
 *   "streams"    streams registered and not deregistered
 *   "in_flight"  IO operations accepted and not finished: cuFileRead/Write calls running, batch
 *                operations submitted and not yet complete, failed or canceled, stream-ordered
 *                operations enqueued and not yet run
 * A close leaves what was registered counted, so that a leak check after shutdown sees it. */
long fake_cufile_live(const char *what);

/* Disarm every armed failure and zero the call counters. Live counts are left as they are. */
void fake_cufile_reset(void);

typedef void (*fake_cufile_fail_fn)(const char *symbol, int nth, int status);
typedef long (*fake_cufile_calls_fn)(const char *symbol);
typedef long (*fake_cufile_live_fn)(const char *what);
typedef void (*fake_cufile_reset_fn)(void);

/* cuFile's status codes under their own names (CU_FILE_INVALID_VALUE, ...), for the fake and its
 * tests. Not to be included together with the real cufile.h, which defines the same names. */
enum fake_cufile_status {
#define FAKE_CUFILE_STATUS_(name, value, text) name = value,
  KVIK__CUFILE_STATUSES(FAKE_CUFILE_STATUS_)
#undef FAKE_CUFILE_STATUS_
};

#endif
