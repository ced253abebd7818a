/* cuFile (GPUDirect Storage), loaded at run time from libcufile.so.0 on first need.
 *
 * kvik is built without cufile.h. The types and constants it needs are declared here under names
 * of our own (so that tests/test_cufile_abi.c can include both headers and compare every size,
 * offset and value against the real cufile.h), with the layout of cuFile's stable C ABI on
 * x86-64 and aarch64 Linux. */
#ifndef KVIK_SRC_CUFILE_H
#define KVIK_SRC_CUFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "cuda.h"

/* Every CUfileOpError: X(name, value, description). cuFile's own descriptions, rephrased. */
#define KVIK__CUFILE_STATUSES(X)                                                                   \
  X(CU_FILE_DRIVER_NOT_INITIALIZED, 5001,                                                          \
    "cuFile: nvidia-fs driver not loaded (allow_compat_mode is off)")                              \
  X(CU_FILE_DRIVER_INVALID_PROPS, 5002, "cuFile: invalid driver property")                         \
  X(CU_FILE_DRIVER_UNSUPPORTED_LIMIT, 5003, "cuFile: driver property out of range")                \
  X(CU_FILE_DRIVER_VERSION_MISMATCH, 5004, "cuFile: nvidia-fs driver version mismatch")            \
  X(CU_FILE_DRIVER_VERSION_READ_ERROR, 5005, "cuFile: cannot read the nvidia-fs driver version")   \
  X(CU_FILE_DRIVER_CLOSING, 5006, "cuFile: driver shutdown in progress")                           \
  X(CU_FILE_PLATFORM_NOT_SUPPORTED, 5007,                                                          \
    "cuFile: GPUDirect Storage not supported on this platform")                                    \
  X(CU_FILE_IO_NOT_SUPPORTED, 5008, "cuFile: GPUDirect Storage not supported for this file")       \
  X(CU_FILE_DEVICE_NOT_SUPPORTED, 5009, "cuFile: GPUDirect Storage not supported on this GPU")     \
  X(CU_FILE_NVFS_DRIVER_ERROR, 5010, "cuFile: nvidia-fs driver ioctl error")                       \
  X(CU_FILE_CUDA_DRIVER_ERROR, 5011, "cuFile: CUDA driver error")                                  \
  X(CU_FILE_CUDA_POINTER_INVALID, 5012, "cuFile: invalid device pointer")                          \
  X(CU_FILE_CUDA_MEMORY_TYPE_INVALID, 5013, "cuFile: invalid pointer memory type")                 \
  X(CU_FILE_CUDA_POINTER_RANGE_ERROR, 5014, "cuFile: pointer range exceeds the allocation")        \
  X(CU_FILE_CUDA_CONTEXT_MISMATCH, 5015, "cuFile: CUDA context mismatch")                          \
  X(CU_FILE_INVALID_MAPPING_SIZE, 5016, "cuFile: access beyond the maximum pinned size")           \
  X(CU_FILE_INVALID_MAPPING_RANGE, 5017, "cuFile: access beyond the mapped size")                  \
  X(CU_FILE_INVALID_FILE_TYPE, 5018, "cuFile: unsupported file type")                              \
  X(CU_FILE_INVALID_FILE_OPEN_FLAG, 5019, "cuFile: unsupported file open flags")                   \
  X(CU_FILE_DIO_NOT_SET, 5020, "cuFile: file descriptor not opened with O_DIRECT")                 \
  X(CU_FILE_INVALID_VALUE, 5022, "cuFile: invalid arguments")                                      \
  X(CU_FILE_MEMORY_ALREADY_REGISTERED, 5023, "cuFile: buffer already registered")                  \
  X(CU_FILE_MEMORY_NOT_REGISTERED, 5024, "cuFile: buffer not registered")                          \
  X(CU_FILE_PERMISSION_DENIED, 5025, "cuFile: driver or file access denied")                       \
  X(CU_FILE_DRIVER_ALREADY_OPEN, 5026, "cuFile: driver already open")                              \
  X(CU_FILE_HANDLE_NOT_REGISTERED, 5027, "cuFile: file descriptor not registered")                 \
  X(CU_FILE_HANDLE_ALREADY_REGISTERED, 5028, "cuFile: file descriptor already registered")         \
  X(CU_FILE_DEVICE_NOT_FOUND, 5029, "cuFile: GPU device not found")                                \
  X(CU_FILE_INTERNAL_ERROR, 5030, "cuFile: internal error")                                        \
  X(CU_FILE_GETNEWFD_FAILED, 5031, "cuFile: failed to obtain a new file descriptor")               \
  X(CU_FILE_NVFS_SETUP_ERROR, 5033, "cuFile: nvidia-fs driver initialisation error")               \
  X(CU_FILE_IO_DISABLED, 5034,                                                                     \
    "cuFile: GPUDirect Storage disabled by configuration for this file")                           \
  X(CU_FILE_BATCH_SUBMIT_FAILED, 5035, "cuFile: batch submission failed")                          \
  X(CU_FILE_GPU_MEMORY_PINNING_FAILED, 5036, "cuFile: failed to pin GPU memory")                   \
  X(CU_FILE_BATCH_FULL, 5037, "cuFile: batch queue full")                                          \
  X(CU_FILE_ASYNC_NOT_SUPPORTED, 5038, "cuFile: stream operation not supported")                   \
  X(CU_FILE_INTERNAL_BATCH_SETUP_ERROR, 5039, "cuFile: internal batch setup error")                \
  X(CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR, 5040, "cuFile: internal batch submit error")              \
  X(CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR, 5041, "cuFile: internal batch status error")           \
  X(CU_FILE_INTERNAL_BATCH_CANCEL_ERROR, 5042, "cuFile: internal batch cancel error")              \
  X(CU_FILE_NOMEM_ERROR, 5043, "cuFile: out of memory")                                            \
  X(CU_FILE_IO_ERROR, 5044, "cuFile: IO error")                                                    \
  X(CU_FILE_INTERNAL_BUF_REGISTER_ERROR, 5045, "cuFile: internal buffer registration error")       \
  X(CU_FILE_HASH_OPR_ERROR, 5046, "cuFile: hash operation error")                                  \
  X(CU_FILE_INVALID_CONTEXT_ERROR, 5047, "cuFile: invalid CUDA context")                           \
  X(CU_FILE_NVFS_INTERNAL_DRIVER_ERROR, 5048, "cuFile: nvidia-fs internal driver error")           \
  X(CU_FILE_BATCH_NOCOMPAT_ERROR, 5049, "cuFile: batch IO needs GDS, and compat mode is off")      \
  X(CU_FILE_IO_MAX_ERROR, 5050, "cuFile: GPUDirect Storage maximum error")

#define KVIK__CUFILE_SUCCESS 0
#define KVIK__CUFILE_STATUS_BASE 5000

/* KVIK__CU_FILE_DRIVER_CLOSING and so on. */
enum kvik__cufile_status {
#define KVIK__CUFILE_ENUM_(name, value, text) KVIK__##name = value,
  KVIK__CUFILE_STATUSES(KVIK__CUFILE_ENUM_)
#undef KVIK__CUFILE_ENUM_
};

typedef struct kvik__cufile_error {
  int err;         /* CUfileOpError: 0 or a status above */
  CUresult cu_err; /* the CUDA driver's result, when err is CU_FILE_CUDA_DRIVER_ERROR */
} kvik__cufile_error;

typedef void *kvik__cufile_handle;
typedef void *kvik__cufile_batch_handle;

typedef struct kvik__cufile_props {
  struct {
    unsigned major_version; /* nvidia-fs kernel driver; 0 when it is not loaded */
    unsigned minor_version;
    size_t poll_thresh_size;   /* KiB */
    size_t max_direct_io_size; /* KiB */
    unsigned dstatusflags;     /* bits: KVIK__CUFILE_*_SUPPORTED file systems */
    unsigned dcontrolflags; /* bits: KVIK__CUFILE_USE_POLL_MODE, KVIK__CUFILE_ALLOW_COMPAT_MODE */
  } nvfs;
  unsigned fflags;                     /* bits: KVIK__CUFILE_*_SUPPORTED features */
  unsigned max_device_cache_size;      /* KiB */
  unsigned per_buffer_cache_size;      /* KiB */
  unsigned max_device_pinned_mem_size; /* KiB */
  unsigned max_batch_io_size;
  unsigned max_batch_io_timeout_msecs;
} kvik__cufile_props;

/* Bits of nvfs.dcontrolflags and fflags. */
#define KVIK__CUFILE_USE_POLL_MODE 0
#define KVIK__CUFILE_ALLOW_COMPAT_MODE 1
#define KVIK__CUFILE_DYN_ROUTING_SUPPORTED 0
#define KVIK__CUFILE_BATCH_IO_SUPPORTED 1
#define KVIK__CUFILE_STREAMS_SUPPORTED 2
#define KVIK__CUFILE_PARALLEL_IO_SUPPORTED 3

#define KVIK__CUFILE_HANDLE_TYPE_OPAQUE_FD 1

typedef struct kvik__cufile_descr {
  int type; /* KVIK__CUFILE_HANDLE_TYPE_OPAQUE_FD */
  union {
    int fd;
    void *handle;
  } handle;
  const void *fs_ops; /* NULL: the kernel's file system */
} kvik__cufile_descr;

#define KVIK__CUFILE_READ 0
#define KVIK__CUFILE_WRITE 1
#define KVIK__CUFILE_BATCH 1

/* Values of kvik__cufile_io_event.status. */
#define KVIK__CUFILE_WAITING 0x01
#define KVIK__CUFILE_PENDING 0x02
#define KVIK__CUFILE_INVALID 0x04
#define KVIK__CUFILE_CANCELED 0x08
#define KVIK__CUFILE_COMPLETE 0x10
#define KVIK__CUFILE_TIMEOUT 0x20
#define KVIK__CUFILE_FAILED 0x40

typedef struct kvik__cufile_io_params {
  int mode; /* KVIK__CUFILE_BATCH */
  union {
    struct {
      void *devPtr_base;
      off_t file_offset;
      off_t devPtr_offset;
      size_t size;
    } batch;
  } u;
  kvik__cufile_handle fh;
  int opcode; /* KVIK__CUFILE_READ or KVIK__CUFILE_WRITE */
  void *cookie;
} kvik__cufile_io_params;

typedef struct kvik__cufile_io_event {
  void *cookie;
  int status; /* KVIK__CUFILE_WAITING ... KVIK__CUFILE_FAILED */
  size_t ret; /* bytes transferred, or a negated error code */
} kvik__cufile_io_event;

typedef struct kvik__cufile_op_counter {
  uint64_t ok, err;
} kvik__cufile_op_counter;

/* CUfileStatsLevel1_t: the counters kvik reports. Members in cuFile's order. */
typedef struct kvik__cufile_stats1 {
  kvik__cufile_op_counter read_ops, write_ops, hdl_register_ops, hdl_deregister_ops,
      buf_register_ops, buf_deregister_ops;
  uint64_t read_bytes, write_bytes, read_bw_bytes_per_sec, write_bw_bytes_per_sec, read_lat_avg_us,
      write_lat_avg_us, read_ops_per_sec, write_ops_per_sec, read_lat_sum_us, write_lat_sum_us;
  kvik__cufile_op_counter batch_submit_ops, batch_complete_ops, batch_setup_ops, batch_cancel_ops,
      batch_destroy_ops, batch_enqueued_ops, batch_posix_enqueued_ops, batch_processed_ops,
      batch_posix_processed_ops, batch_nvfs_submit_ops, batch_p2p_submit_ops, batch_aio_submit_ops,
      batch_iouring_submit_ops, batch_mixed_io_submit_ops, batch_total_submit_ops;
  uint64_t batch_read_bytes, batch_write_bytes, batch_read_bw_bytes, batch_write_bw_bytes,
      batch_submit_lat_avg_us, batch_completion_lat_avg_us, batch_submit_ops_per_sec,
      batch_complete_ops_per_sec, batch_submit_lat_sum_us, batch_completion_lat_sum_us,
      last_batch_read_bytes, last_batch_write_bytes;
} kvik__cufile_stats1;

/* The parameter API of cuFile 1.14: X(kvik name, value of CUFILE_PARAM_<NAME>). kvik's name is
 * cuFile's constant without the CUFILE_PARAM_ prefix, in lower case. */
#define KVIK__CUFILE_SIZE_PARAMS(X)                                                                \
  X(profile_stats, 0)                                                                              \
  X(execution_max_io_queue_depth, 1)                                                               \
  X(execution_max_io_threads, 2)                                                                   \
  X(execution_min_io_threshold_size_kb, 3)                                                         \
  X(execution_max_request_parallelism, 4)                                                          \
  X(properties_max_direct_io_size_kb, 5)                                                           \
  X(properties_max_device_cache_size_kb, 6)                                                        \
  X(properties_per_buffer_cache_size_kb, 7)                                                        \
  X(properties_max_device_pinned_mem_size_kb, 8)                                                   \
  X(properties_io_batchsize, 9)                                                                    \
  X(pollthreshold_size_kb, 10)                                                                     \
  X(properties_batch_io_timeout_ms, 11)

#define KVIK__CUFILE_BOOL_PARAMS(X)                                                                \
  X(properties_use_poll_mode, 0)                                                                   \
  X(properties_allow_compat_mode, 1)                                                               \
  X(force_compat_mode, 2)                                                                          \
  X(fs_misc_api_check_aggressive, 3)                                                               \
  X(execution_parallel_io, 4)                                                                      \
  X(profile_nvtx, 5)                                                                               \
  X(properties_allow_system_memory, 6)                                                             \
  X(use_pcip2pdma, 7)                                                                              \
  X(prefer_io_uring, 8)                                                                            \
  X(force_odirect_mode, 9)                                                                         \
  X(skip_topology_detection, 10)                                                                   \
  X(stream_memops_bypass, 11)

#define KVIK__CUFILE_STRING_PARAMS(X)                                                              \
  X(logging_level, 0)                                                                              \
  X(env_logfile_path, 1)                                                                           \
  X(log_dir, 2)

/* Functions every cuFile release since 1.0 has: X(member, symbol, return type, parameters).
 * cufile.h maps cuFileDriverClose to the versioned symbol. */
#define KVIK__CUFILE_FUNCTIONS(X)                                                                  \
  X(cuFileDriverOpen, "cuFileDriverOpen", kvik__cufile_error, (void))                              \
  X(cuFileDriverClose, "cuFileDriverClose_v2", kvik__cufile_error, (void))                         \
  X(cuFileHandleRegister, "cuFileHandleRegister", kvik__cufile_error,                              \
    (kvik__cufile_handle * fh, kvik__cufile_descr * descr))                                        \
  X(cuFileHandleDeregister, "cuFileHandleDeregister", void, (kvik__cufile_handle fh))              \
  X(cuFileBufRegister, "cuFileBufRegister", kvik__cufile_error,                                    \
    (const void *base, size_t length, int flags))                                                  \
  X(cuFileBufDeregister, "cuFileBufDeregister", kvik__cufile_error, (const void *base))            \
  X(cuFileRead, "cuFileRead", ssize_t,                                                             \
    (kvik__cufile_handle fh, void *base, size_t size, off_t file_offset, off_t base_offset))       \
  X(cuFileWrite, "cuFileWrite", ssize_t,                                                           \
    (kvik__cufile_handle fh, const void *base, size_t size, off_t file_offset, off_t base_offset)) \
  X(cuFileDriverGetProperties, "cuFileDriverGetProperties", kvik__cufile_error,                    \
    (kvik__cufile_props * props))                                                                  \
  X(cuFileDriverSetPollMode, "cuFileDriverSetPollMode", kvik__cufile_error,                        \
    (bool poll, size_t threshold_kb))                                                              \
  X(cuFileDriverSetMaxDirectIOSize, "cuFileDriverSetMaxDirectIOSize", kvik__cufile_error,          \
    (size_t kb))                                                                                   \
  X(cuFileDriverSetMaxCacheSize, "cuFileDriverSetMaxCacheSize", kvik__cufile_error, (size_t kb))   \
  X(cuFileDriverSetMaxPinnedMemSize, "cuFileDriverSetMaxPinnedMemSize", kvik__cufile_error,        \
    (size_t kb))

/* Functions of later releases; NULL where the loaded library lacks them. */
#define KVIK__CUFILE_OPTIONAL_FUNCTIONS(X)                                                         \
  X(cuFileBatchIOSetUp, "cuFileBatchIOSetUp", kvik__cufile_error,                                  \
    (kvik__cufile_batch_handle * batch, unsigned nr))                                              \
  X(cuFileBatchIOSubmit, "cuFileBatchIOSubmit", kvik__cufile_error,                                \
    (kvik__cufile_batch_handle batch, unsigned nr, kvik__cufile_io_params *params,                 \
     unsigned flags))                                                                              \
  X(cuFileBatchIOGetStatus, "cuFileBatchIOGetStatus", kvik__cufile_error,                          \
    (kvik__cufile_batch_handle batch, unsigned min_nr, unsigned *nr,                               \
     kvik__cufile_io_event *events, struct timespec *timeout))                                     \
  X(cuFileBatchIOCancel, "cuFileBatchIOCancel", kvik__cufile_error,                                \
    (kvik__cufile_batch_handle batch))                                                             \
  X(cuFileBatchIODestroy, "cuFileBatchIODestroy", void, (kvik__cufile_batch_handle batch))         \
  X(cuFileReadAsync, "cuFileReadAsync", kvik__cufile_error,                                        \
    (kvik__cufile_handle fh, void *base, size_t *size, off_t *file_offset, off_t *base_offset,     \
     ssize_t *bytes_read, CUstream stream))                                                        \
  X(cuFileWriteAsync, "cuFileWriteAsync", kvik__cufile_error,                                      \
    (kvik__cufile_handle fh, void *base, size_t *size, off_t *file_offset, off_t *base_offset,     \
     ssize_t *bytes_written, CUstream stream))                                                     \
  X(cuFileStreamRegister, "cuFileStreamRegister", kvik__cufile_error,                              \
    (CUstream stream, unsigned flags))                                                             \
  X(cuFileStreamDeregister, "cuFileStreamDeregister", kvik__cufile_error, (CUstream stream))       \
  X(cuFileGetVersion, "cuFileGetVersion", kvik__cufile_error, (int *version))                      \
  X(cuFileGetParameterSizeT, "cuFileGetParameterSizeT", kvik__cufile_error,                        \
    (int param, size_t *value))                                                                    \
  X(cuFileGetParameterBool, "cuFileGetParameterBool", kvik__cufile_error,                          \
    (int param, bool *value))                                                                      \
  X(cuFileGetParameterString, "cuFileGetParameterString", kvik__cufile_error,                      \
    (int param, char *value, int len))                                                             \
  X(cuFileSetParameterSizeT, "cuFileSetParameterSizeT", kvik__cufile_error,                        \
    (int param, size_t value))                                                                     \
  X(cuFileSetParameterBool, "cuFileSetParameterBool", kvik__cufile_error, (int param, bool value)) \
  X(cuFileSetParameterString, "cuFileSetParameterString", kvik__cufile_error,                      \
    (int param, const char *value))                                                                \
  X(cuFileSetStatsLevel, "cuFileSetStatsLevel", kvik__cufile_error, (int level))                   \
  X(cuFileGetStatsLevel, "cuFileGetStatsLevel", kvik__cufile_error, (int *level))                  \
  X(cuFileStatsStart, "cuFileStatsStart", kvik__cufile_error, (void))                              \
  X(cuFileStatsStop, "cuFileStatsStop", kvik__cufile_error, (void))                                \
  X(cuFileStatsReset, "cuFileStatsReset", kvik__cufile_error, (void))                              \
  X(cuFileGetStatsL1, "cuFileGetStatsL1", kvik__cufile_error, (kvik__cufile_stats1 * stats))

typedef struct kvik__cufile_api {
#define KVIK__CUFILE_MEMBER_(member, symbol, ret, params) ret(*member) params;
  KVIK__CUFILE_FUNCTIONS(KVIK__CUFILE_MEMBER_)
  KVIK__CUFILE_OPTIONAL_FUNCTIONS(KVIK__CUFILE_MEMBER_)
#undef KVIK__CUFILE_MEMBER_
} kvik__cufile_api;

/* The cuFile API with its driver open: loads libcufile.so.0 and the CUDA driver and calls
 * cuFileDriverOpen() on the first call. Returns NULL with a detail message "<fn>: cuFile
 * unavailable: <why>" (callers return the code stored in *code: KVIK_ECUFILE_UNAVAILABLE, or the
 * driver's status). `fn` names the public function called; NULL leaves the prefix out.
 * Thread-safe. */
const kvik__cufile_api *kvik__cufile(const char *fn, int *code);

/* The cuFile API, loaded but its driver not necessarily open (parameters are set before the
 * driver opens): loads libcufile.so.0 on the first call, never opens the driver. Returns NULL
 * with *code = KVIK_ECUFILE_UNAVAILABLE and a detail message "<fn>: cuFile unavailable: <why>".
 * Thread-safe. */
const kvik__cufile_api *kvik__cufile_loaded(const char *fn, int *code);

/* The loaded API if the driver is open, else NULL; never loads anything. */
const kvik__cufile_api *kvik__cufile_if_open(void);

/* Turn a failed cuFile status into its kvik code (-status, or a CUDA code for
 * CU_FILE_CUDA_DRIVER_ERROR) with a message "<fn>: <call>: <status name> (<description>)".
 * Returns 0 for success. */
int kvik__cufile_check(kvik__cufile_error status, const char *fn, const char *call);

/* The kvik code of a negative return value of cuFileRead/cuFileWrite (-1 with errno, a negated
 * errno, or a negated CUfileOpError), with a message naming `fn`, `call` and `path`. */
int kvik__cufile_io_error(ssize_t ret, int saved_errno, const char *fn, const char *call,
                          const char *path);

/* Bracket every cuFile call that uses the driver, so that closing the driver at exit waits for
 * them and later calls fail cleanly instead of crashing. kvik__cufile_enter() returns 0, or the
 * code of CU_FILE_DRIVER_CLOSING with a message naming `fn` once the process is exiting. */
int kvik__cufile_enter(const char *fn);
void kvik__cufile_leave(void);

/* Incremented in a child after fork(): handles registered before belong to the parent. */
unsigned kvik__cufile_generation(void);

#endif
