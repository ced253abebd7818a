/* kvik declares cuFile's ABI itself (src/cufile.h), since it is built without cufile.h. This
 * test, built only where the real cufile.h and cuda.h are found (tests/CMakeLists.txt),
 * compares the two at run time: the size and alignment of every struct, the size and offset of
 * every member, every status, flag, opcode and parameter value, and every function's type. It
 * prints each mismatch and exits 1 if there is any, so that one run lists all that is wrong.
 *
 * argv[1], optional: the path of src/cufile.h, to check that every KVIK__CUFILE_* constant it
 * defines is compared here (a constant added there later must be added to CONSTANTS below). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include <cufile.h>

/* src/cufile.h takes CUresult and CUstream from src/cuda.h, kvik's own declaration of the CUDA
 * driver API, which cannot share a translation unit with the real cuda.h: it declares CUresult
 * as int where cuda.h has an enum, and some of its macros differ in spelling. Its include guard
 * keeps it out; src/cufile.h then sees cuda.h's types, and check_cuda_types() compares those
 * with kvik's. */
#define KVIK_SRC_CUDA_H
#include "../src/cufile.h"

static int checks, mismatches;

static void expect_equal(const char *what, long long kvik, long long real) {
  checks++;
  if (kvik == real) return;
  mismatches++;
  printf("MISMATCH %s: kvik %lld, cufile.h %lld\n", what, kvik, real);
}

static void expect_true(const char *what, int ok) {
  checks++;
  if (ok) return;
  mismatches++;
  printf("MISMATCH %s\n", what);
}

/* ---- CUDA types src/cufile.h uses ------------------------------------------------------------ */

/* src/cuda.h: typedef int CUresult; typedef struct CUstream_st *CUstream. */
static void check_cuda_types(void) {
  expect_equal("sizeof(CUresult) (src/cuda.h: int)", sizeof(int), sizeof(CUresult));
  expect_equal("_Alignof(CUresult) (src/cuda.h: int)", _Alignof(int), _Alignof(CUresult));
  expect_true("CUstream is struct CUstream_st * (as in src/cuda.h)",
              _Generic((CUstream)0, struct CUstream_st *: 1, default: 0));
}

/* ---- structs ----------------------------------------------------------------------------------- */

/* X(kvik type, cuFile type, member) for every member, nested ones by their path; the names are
 * cuFile's in both. */
#define ERROR_MEMBERS(X, k, r) X(k, r, err) X(k, r, cu_err)

#define PROPS_MEMBERS(X, k, r)                                                                      \
  X(k, r, nvfs) X(k, r, nvfs.major_version) X(k, r, nvfs.minor_version) X(k, r, nvfs.poll_thresh_size) \
  X(k, r, nvfs.max_direct_io_size) X(k, r, nvfs.dstatusflags) X(k, r, nvfs.dcontrolflags) X(k, r, fflags) \
  X(k, r, max_device_cache_size) X(k, r, per_buffer_cache_size) X(k, r, max_device_pinned_mem_size)      \
  X(k, r, max_batch_io_size) X(k, r, max_batch_io_timeout_msecs)

#define DESCR_MEMBERS(X, k, r) X(k, r, type) X(k, r, handle) X(k, r, handle.fd) X(k, r, handle.handle) X(k, r, fs_ops)

#define IO_PARAMS_MEMBERS(X, k, r)                                                                  \
  X(k, r, mode) X(k, r, u) X(k, r, u.batch) X(k, r, u.batch.devPtr_base) X(k, r, u.batch.file_offset) \
  X(k, r, u.batch.devPtr_offset) X(k, r, u.batch.size) X(k, r, fh) X(k, r, opcode) X(k, r, cookie)

#define IO_EVENT_MEMBERS(X, k, r) X(k, r, cookie) X(k, r, status) X(k, r, ret)

#define OP_COUNTER_MEMBERS(X, k, r) X(k, r, ok) X(k, r, err)

#define STATS1_MEMBERS(X, k, r)                                                                      \
  X(k, r, read_ops) X(k, r, read_ops.ok) X(k, r, read_ops.err) X(k, r, write_ops) X(k, r, hdl_register_ops)  \
  X(k, r, hdl_deregister_ops) X(k, r, buf_register_ops) X(k, r, buf_deregister_ops) X(k, r, read_bytes)      \
  X(k, r, write_bytes) X(k, r, read_bw_bytes_per_sec) X(k, r, write_bw_bytes_per_sec) X(k, r, read_lat_avg_us) \
  X(k, r, write_lat_avg_us) X(k, r, read_ops_per_sec) X(k, r, write_ops_per_sec) X(k, r, read_lat_sum_us)    \
  X(k, r, write_lat_sum_us) X(k, r, batch_submit_ops) X(k, r, batch_complete_ops) X(k, r, batch_setup_ops)   \
  X(k, r, batch_cancel_ops) X(k, r, batch_destroy_ops) X(k, r, batch_enqueued_ops)                          \
  X(k, r, batch_posix_enqueued_ops) X(k, r, batch_processed_ops) X(k, r, batch_posix_processed_ops)         \
  X(k, r, batch_nvfs_submit_ops) X(k, r, batch_p2p_submit_ops) X(k, r, batch_aio_submit_ops)                \
  X(k, r, batch_iouring_submit_ops) X(k, r, batch_mixed_io_submit_ops) X(k, r, batch_total_submit_ops)      \
  X(k, r, batch_read_bytes) X(k, r, batch_write_bytes) X(k, r, batch_read_bw_bytes) X(k, r, batch_write_bw_bytes) \
  X(k, r, batch_submit_lat_avg_us) X(k, r, batch_completion_lat_avg_us) X(k, r, batch_submit_ops_per_sec)   \
  X(k, r, batch_complete_ops_per_sec) X(k, r, batch_submit_lat_sum_us) X(k, r, batch_completion_lat_sum_us) \
  X(k, r, last_batch_read_bytes) X(k, r, last_batch_write_bytes)

#define MEMBER_SIZE(type, m) sizeof(((type *)0)->m)

static void check_member(const char *kvik_type, const char *member, size_t kvik_size, size_t real_size,
                         size_t kvik_offset, size_t real_offset) {
  char what[256];
  snprintf(what, sizeof what, "sizeof(%s.%s)", kvik_type, member);
  expect_equal(what, (long long)kvik_size, (long long)real_size);
  snprintf(what, sizeof what, "offsetof(%s, %s)", kvik_type, member);
  expect_equal(what, (long long)kvik_offset, (long long)real_offset);
}

#define CHECK_MEMBER_(k, r, m) \
  check_member(#k, #m, MEMBER_SIZE(k, m), MEMBER_SIZE(r, m), offsetof(k, m), offsetof(r, m));

#define CHECK_STRUCT_(k, r, MEMBERS)                                                \
  expect_equal("sizeof(" #k ") vs " #r, sizeof(k), sizeof(r));                      \
  expect_equal("_Alignof(" #k ") vs " #r, _Alignof(k), _Alignof(r));                \
  MEMBERS(CHECK_MEMBER_, k, r)

static void check_structs(void) {
  CHECK_STRUCT_(kvik__cufile_error, CUfileError_t, ERROR_MEMBERS)
  CHECK_STRUCT_(kvik__cufile_props, CUfileDrvProps_t, PROPS_MEMBERS)
  CHECK_STRUCT_(kvik__cufile_descr, CUfileDescr_t, DESCR_MEMBERS)
  CHECK_STRUCT_(kvik__cufile_io_params, CUfileIOParams_t, IO_PARAMS_MEMBERS)
  CHECK_STRUCT_(kvik__cufile_io_event, CUfileIOEvents_t, IO_EVENT_MEMBERS)
  CHECK_STRUCT_(kvik__cufile_op_counter, CUfileOpCounter_t, OP_COUNTER_MEMBERS)
  CHECK_STRUCT_(kvik__cufile_stats1, CUfileStatsLevel1_t, STATS1_MEMBERS)
  /* Members kvik declares as int where cuFile has an enum, and the handles. */
  expect_equal("sizeof(enum CUfileFileHandleType) (descr.type: int)", sizeof(int), sizeof(enum CUfileFileHandleType));
  expect_equal("sizeof(CUfileBatchMode_t) (io_params.mode: int)", sizeof(int), sizeof(CUfileBatchMode_t));
  expect_equal("sizeof(CUfileOpcode_t) (io_params.opcode: int)", sizeof(int), sizeof(CUfileOpcode_t));
  expect_equal("sizeof(CUfileStatus_t) (io_event.status: int)", sizeof(int), sizeof(CUfileStatus_t));
  expect_equal("sizeof(CUfileOpError) (error.err: int)", sizeof(int), sizeof(CUfileOpError));
  expect_equal("sizeof(kvik__cufile_handle)", sizeof(kvik__cufile_handle), sizeof(CUfileHandle_t));
  expect_equal("sizeof(kvik__cufile_batch_handle)", sizeof(kvik__cufile_batch_handle), sizeof(CUfileBatchHandle_t));
}

/* ---- statuses ------------------------------------------------------------------------------ */

/* Each of kvik's statuses has cuFile's value under the same name, in the list and in kvik's
 * enum. */
static void check_statuses(void) {
#define CHECK_STATUS_(name, value, text)       \
  expect_equal("status " #name, value, name); \
  expect_equal("enum value KVIK__" #name, KVIK__##name, name);
  KVIK__CUFILE_STATUSES(CHECK_STATUS_)
#undef CHECK_STATUS_
}

static const char *const kvik_status_names[] = {
#define STATUS_NAME_(name, value, text) #name,
    KVIK__CUFILE_STATUSES(STATUS_NAME_)
#undef STATUS_NAME_
};

/* A status of cuFile's that kvik lacks is no ABI break (kvik names it "unknown cuFile status"),
 * so it is a note, not a mismatch. */
static void note_unknown_status(const char *name) {
  if (strcmp(name, "CU_FILE_SUCCESS") == 0) return; /* KVIK__CUFILE_SUCCESS, compared below */
  for (size_t i = 0; i < sizeof kvik_status_names / sizeof kvik_status_names[0]; i++)
    if (strcmp(kvik_status_names[i], name) == 0) return;
  printf("note: cufile.h has status %s, which KVIK__CUFILE_STATUSES lacks\n", name);
}

static void check_status_coverage(void) {
#ifdef CUFILEOP_STATUS_ENTRIES /* cufile.h's own X-macro list; absent in old releases */
#define CUFILE_OP(code, name, string) note_unknown_status(#name);
  CUFILEOP_STATUS_ENTRIES
#undef CUFILE_OP
#endif
}

/* ---- constants ----------------------------------------------------------------------------- */

/* X(kvik constant, cuFile constant): every KVIK__CUFILE_* value src/cufile.h defines. */
#define CONSTANTS(X)                                                                                 \
  X(KVIK__CUFILE_SUCCESS, CU_FILE_SUCCESS)                                                          \
  X(KVIK__CUFILE_STATUS_BASE, CUFILEOP_BASE_ERR)                                                    \
  X(KVIK__CUFILE_USE_POLL_MODE, CU_FILE_USE_POLL_MODE)                                              \
  X(KVIK__CUFILE_ALLOW_COMPAT_MODE, CU_FILE_ALLOW_COMPAT_MODE)                                      \
  X(KVIK__CUFILE_DYN_ROUTING_SUPPORTED, CU_FILE_DYN_ROUTING_SUPPORTED)                              \
  X(KVIK__CUFILE_BATCH_IO_SUPPORTED, CU_FILE_BATCH_IO_SUPPORTED)                                    \
  X(KVIK__CUFILE_STREAMS_SUPPORTED, CU_FILE_STREAMS_SUPPORTED)                                      \
  X(KVIK__CUFILE_PARALLEL_IO_SUPPORTED, CU_FILE_PARALLEL_IO_SUPPORTED)                              \
  X(KVIK__CUFILE_HANDLE_TYPE_OPAQUE_FD, CU_FILE_HANDLE_TYPE_OPAQUE_FD)                              \
  X(KVIK__CUFILE_READ, CUFILE_READ)                                                                 \
  X(KVIK__CUFILE_WRITE, CUFILE_WRITE)                                                               \
  X(KVIK__CUFILE_BATCH, CUFILE_BATCH)                                                               \
  X(KVIK__CUFILE_WAITING, CUFILE_WAITING)                                                           \
  X(KVIK__CUFILE_PENDING, CUFILE_PENDING)                                                           \
  X(KVIK__CUFILE_INVALID, CUFILE_INVALID)                                                           \
  X(KVIK__CUFILE_CANCELED, CUFILE_CANCELED)                                                         \
  X(KVIK__CUFILE_COMPLETE, CUFILE_COMPLETE)                                                         \
  X(KVIK__CUFILE_TIMEOUT, CUFILE_TIMEOUT)                                                           \
  X(KVIK__CUFILE_FAILED, CUFILE_FAILED)

static const char *const compared_constants[] = {
#define CONSTANT_NAME_(kvik, real) #kvik,
    CONSTANTS(CONSTANT_NAME_)
#undef CONSTANT_NAME_
};

static void check_constants(void) {
#define CHECK_CONSTANT_(kvik, real) expect_equal(#kvik " vs " #real, kvik, real);
  CONSTANTS(CHECK_CONSTANT_)
#undef CHECK_CONSTANT_
}

static int is_compared(const char *name) {
  for (size_t i = 0; i < sizeof compared_constants / sizeof compared_constants[0]; i++)
    if (strcmp(compared_constants[i], name) == 0) return 1;
  return 0;
}

/* Every "#define KVIK__CUFILE_NAME value" line of src/cufile.h (function-like macros, the
 * X-macro lists, have a '(' right after the name and are skipped) must be in CONSTANTS. */
static void check_constant_coverage(const char *header) {
  FILE *f = fopen(header, "r");
  if (!f) {
    expect_true("src/cufile.h given as argv[1] can be read", 0);
    return;
  }
  char line[1024], name[128];
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "#define %127[A-Za-z0-9_]", name) != 1 || strncmp(name, "KVIK__CUFILE_", 13) != 0) continue;
    char after = line[strlen("#define ") + strlen(name)];
    if (after != ' ' && after != '\t') continue;
    char what[256];
    snprintf(what, sizeof what, "%s (src/cufile.h) is not compared: add it to CONSTANTS", name);
    expect_true(what, is_compared(name));
  }
  fclose(f);
}

/* ---- parameters ---------------------------------------------------------------------------- */

/* cuFile's parameters, X(kvik name, cuFile name without CUFILE_PARAM_), grouped by the enum
 * they belong to. The preprocessor cannot change case, so this table spells out both names;
 * check_parameter_table() verifies that they agree but for case, and the arrays below make the
 * compiler check each constant's enum (-Wenum-conversion, an error with -Werror). cuFile's
 * array parameters (CUFileArrayConfigParameter_t) are not part of kvik's API. */
#define REAL_SIZE_PARAMS(X)                                                                          \
  X(profile_stats, PROFILE_STATS)                                                                   \
  X(execution_max_io_queue_depth, EXECUTION_MAX_IO_QUEUE_DEPTH)                                     \
  X(execution_max_io_threads, EXECUTION_MAX_IO_THREADS)                                             \
  X(execution_min_io_threshold_size_kb, EXECUTION_MIN_IO_THRESHOLD_SIZE_KB)                         \
  X(execution_max_request_parallelism, EXECUTION_MAX_REQUEST_PARALLELISM)                           \
  X(properties_max_direct_io_size_kb, PROPERTIES_MAX_DIRECT_IO_SIZE_KB)                             \
  X(properties_max_device_cache_size_kb, PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB)                       \
  X(properties_per_buffer_cache_size_kb, PROPERTIES_PER_BUFFER_CACHE_SIZE_KB)                       \
  X(properties_max_device_pinned_mem_size_kb, PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB)             \
  X(properties_io_batchsize, PROPERTIES_IO_BATCHSIZE)                                               \
  X(pollthreshold_size_kb, POLLTHRESHOLD_SIZE_KB)                                                   \
  X(properties_batch_io_timeout_ms, PROPERTIES_BATCH_IO_TIMEOUT_MS)

#define REAL_BOOL_PARAMS(X)                                                                          \
  X(properties_use_poll_mode, PROPERTIES_USE_POLL_MODE)                                             \
  X(properties_allow_compat_mode, PROPERTIES_ALLOW_COMPAT_MODE)                                     \
  X(force_compat_mode, FORCE_COMPAT_MODE)                                                           \
  X(fs_misc_api_check_aggressive, FS_MISC_API_CHECK_AGGRESSIVE)                                     \
  X(execution_parallel_io, EXECUTION_PARALLEL_IO)                                                   \
  X(profile_nvtx, PROFILE_NVTX)                                                                     \
  X(properties_allow_system_memory, PROPERTIES_ALLOW_SYSTEM_MEMORY)                                 \
  X(use_pcip2pdma, USE_PCIP2PDMA)                                                                   \
  X(prefer_io_uring, PREFER_IO_URING)                                                               \
  X(force_odirect_mode, FORCE_ODIRECT_MODE)                                                         \
  X(skip_topology_detection, SKIP_TOPOLOGY_DETECTION)                                               \
  X(stream_memops_bypass, STREAM_MEMOPS_BYPASS)

#define REAL_STRING_PARAMS(X)                                                                        \
  X(logging_level, LOGGING_LEVEL)                                                                   \
  X(env_logfile_path, ENV_LOGFILE_PATH)                                                             \
  X(log_dir, LOG_DIR)

#define REAL_ENUMERATOR_(lower, upper) CUFILE_PARAM_##upper,
static const CUFileSizeTConfigParameter_t real_size_params[] = {REAL_SIZE_PARAMS(REAL_ENUMERATOR_)};
static const CUFileBoolConfigParameter_t real_bool_params[] = {REAL_BOOL_PARAMS(REAL_ENUMERATOR_)};
static const CUFileStringConfigParameter_t real_string_params[] = {REAL_STRING_PARAMS(REAL_ENUMERATOR_)};
#undef REAL_ENUMERATOR_

enum param_kind { SIZE_PARAM, BOOL_PARAM, STRING_PARAM };
static const char *const kind_names[] = {"size_t", "bool", "string"};

struct param {
  const char *name, *real_name;
  enum param_kind kind;
  int value;
};

static const struct param real_params[] = {
#define REAL_SIZE_(lower, upper) {#lower, "CUFILE_PARAM_" #upper, SIZE_PARAM, CUFILE_PARAM_##upper},
#define REAL_BOOL_(lower, upper) {#lower, "CUFILE_PARAM_" #upper, BOOL_PARAM, CUFILE_PARAM_##upper},
#define REAL_STRING_(lower, upper) {#lower, "CUFILE_PARAM_" #upper, STRING_PARAM, CUFILE_PARAM_##upper},
    REAL_SIZE_PARAMS(REAL_SIZE_) REAL_BOOL_PARAMS(REAL_BOOL_) REAL_STRING_PARAMS(REAL_STRING_)
#undef REAL_SIZE_
#undef REAL_BOOL_
#undef REAL_STRING_
};

#define REAL_PARAM_COUNT (sizeof real_params / sizeof real_params[0])

/* The table's two spellings must agree: kvik's name is cuFile's in lower case. */
static void check_parameter_table(void) {
  (void)real_size_params, (void)real_bool_params, (void)real_string_params;
  for (size_t i = 0; i < REAL_PARAM_COUNT; i++) {
    const char *lower = real_params[i].name, *upper = real_params[i].real_name + strlen("CUFILE_PARAM_");
    size_t n = 0;
    while (lower[n] && toupper((unsigned char)lower[n]) == upper[n]) n++;
    char what[256];
    snprintf(what, sizeof what, "test table: %s spells %s", real_params[i].real_name, lower);
    expect_true(what, lower[n] == '\0' && upper[n] == '\0');
  }
}

static void check_parameter(const char *name, enum param_kind kind, int value) {
  char what[256];
  for (size_t i = 0; i < REAL_PARAM_COUNT; i++) {
    const struct param *r = &real_params[i];
    if (strcmp(r->name, name) != 0) continue;
    snprintf(what, sizeof what, "parameter %s is a %s parameter in kvik, %s is %s", name, kind_names[kind],
             r->real_name, kind_names[r->kind]);
    expect_true(what, kind == r->kind);
    snprintf(what, sizeof what, "parameter %s vs %s", name, r->real_name);
    expect_equal(what, value, r->value);
    return;
  }
  snprintf(what, sizeof what, "parameter %s: cufile.h has no CUFILE_PARAM_ of that name", name);
  expect_true(what, 0);
}

static void check_parameters(void) {
  check_parameter_table();
#define KVIK_SIZE_(name, value) check_parameter(#name, SIZE_PARAM, value);
#define KVIK_BOOL_(name, value) check_parameter(#name, BOOL_PARAM, value);
#define KVIK_STRING_(name, value) check_parameter(#name, STRING_PARAM, value);
  KVIK__CUFILE_SIZE_PARAMS(KVIK_SIZE_) KVIK__CUFILE_BOOL_PARAMS(KVIK_BOOL_) KVIK__CUFILE_STRING_PARAMS(KVIK_STRING_)
#undef KVIK_SIZE_
#undef KVIK_BOOL_
#undef KVIK_STRING_
}

/* ---- functions ----------------------------------------------------------------------------- */

/* The parameter functions take one of cuFile's parameter enums where kvik passes an int: the
 * same size and passed the same way, yet not the same C type, so they cannot pass the exact
 * comparison in check_functions(). X(function, cuFile's enum, return type, the other
 * parameters) states both types; the kvik side is compared here, before the names are
 * mapped below, and cuFile's side after. */
#define ENUM_PARAM_FUNCTIONS(X)                                                                      \
  X(cuFileGetParameterSizeT, CUFileSizeTConfigParameter_t, kvik__cufile_error, size_t *)            \
  X(cuFileGetParameterBool, CUFileBoolConfigParameter_t, kvik__cufile_error, bool *)                \
  X(cuFileGetParameterString, CUFileStringConfigParameter_t, kvik__cufile_error, char *, int)       \
  X(cuFileSetParameterSizeT, CUFileSizeTConfigParameter_t, kvik__cufile_error, size_t)              \
  X(cuFileSetParameterBool, CUFileBoolConfigParameter_t, kvik__cufile_error, bool)                  \
  X(cuFileSetParameterString, CUFileStringConfigParameter_t, kvik__cufile_error, const char *)

struct enum_param_function {
  const char *name;
  int kvik_ok, real_ok; /* each side is the type the table states */
  size_t enum_size;
};

static struct enum_param_function enum_param_functions[] = {
#define KVIK_SIDE_(fn, e, ret, ...) \
  {#fn, _Generic(((kvik__cufile_api *)0)->fn, ret(*)(int, __VA_ARGS__): 1, default: 0), 0, sizeof(e)},
    ENUM_PARAM_FUNCTIONS(KVIK_SIDE_)
#undef KVIK_SIDE_
};

#define ENUM_PARAM_FUNCTION_COUNT (sizeof enum_param_functions / sizeof enum_param_functions[0])

/* From here on, kvik's type names stand for cuFile's, so that a kvik function type written in
 * kvik's names reads as the cuFile type it must be. */
#define kvik__cufile_error CUfileError_t
#define kvik__cufile_handle CUfileHandle_t
#define kvik__cufile_batch_handle CUfileBatchHandle_t
#define kvik__cufile_descr CUfileDescr_t
#define kvik__cufile_props CUfileDrvProps_t
#define kvik__cufile_io_params CUfileIOParams_t
#define kvik__cufile_io_event CUfileIOEvents_t
#define kvik__cufile_stats1 CUfileStatsLevel1_t

static void note_enum_param_real_sides(void) {
  size_t i = 0;
#define REAL_SIDE_(fn, e, ret, ...) \
  enum_param_functions[i++].real_ok = _Generic(&fn, ret(*)(e, __VA_ARGS__): 1, default: 0);
  ENUM_PARAM_FUNCTIONS(REAL_SIDE_)
#undef REAL_SIDE_
}

/* 1 when `name` is an enum-parameter function whose both sides are as stated, and the enum has
 * the size of an int; -1 when it is not one of them. */
static int enum_param_function_ok(const char *name) {
  for (size_t i = 0; i < ENUM_PARAM_FUNCTION_COUNT; i++) {
    const struct enum_param_function *f = &enum_param_functions[i];
    if (strcmp(f->name, name) == 0) return f->kvik_ok && f->real_ok && f->enum_size == sizeof(int);
  }
  return -1;
}

#define STRINGIFY_(x) #x
#define EXPANDED_STRING_(x) STRINGIFY_(x) /* after macro expansion: cufile.h's symbol */

/* `exact`: kvik's pointer type, its names mapped to cuFile's, is the type of cuFile's function.
 * `linked`: the symbol a program built with cufile.h calls (cufile.h maps cuFileDriverClose to
 * cuFileDriverClose_v2). */
static void check_function(const char *name, const char *symbol, const char *linked, int exact, const char *signature) {
  char what[512];
  snprintf(what, sizeof what, "%s: kvik loads symbol %s, cufile.h calls %s", name, symbol, linked);
  expect_true(what, strcmp(symbol, linked) == 0);
  if (exact) {
    checks++;
    return;
  }
  int enum_ok = enum_param_function_ok(name);
  snprintf(what, sizeof what, "%s: kvik's type %s differs from cufile.h's declaration%s", name, signature,
           enum_ok < 0 ? "" : " beyond the parameter enum passed as int");
  expect_true(what, enum_ok == 1);
}

static void check_functions(void) {
  note_enum_param_real_sides();
#define CHECK_FUNCTION_(member, symbol, ret, params)                                             \
  check_function(#member, symbol, EXPANDED_STRING_(member), _Generic(&member, ret(*) params: 1, default: 0), \
                 #ret " (*)" #params);
  KVIK__CUFILE_FUNCTIONS(CHECK_FUNCTION_)
  KVIK__CUFILE_OPTIONAL_FUNCTIONS(CHECK_FUNCTION_)
#undef CHECK_FUNCTION_
}

int main(int argc, char **argv) {
  check_cuda_types();
  check_structs();
  check_statuses();
  check_status_coverage();
  check_constants();
  if (argc > 1) check_constant_coverage(argv[1]);
  check_parameters();
  check_functions();
  printf("cufile_abi: %d checks, %d mismatches\n", checks, mismatches);
  return mismatches ? 1 : 0;
}
