/* Error codes, their names and descriptions, and the per-thread detail message. */
#define _GNU_SOURCE
#include "error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda.h"
#include "cufile.h"

static _Thread_local char last_message[KVIK_MESSAGE_MAX];

const char *kvik_last_error(void) { return last_message; }

void kvik__set_message(const char *message) {
  snprintf(last_message, sizeof last_message, "%s", message);
}

int kvik__fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_message, sizeof last_message, fmt, ap);
  va_end(ap);
  return code;
}

int kvik__fail_errno(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(last_message, sizeof last_message, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof last_message)
    snprintf(last_message + n, sizeof last_message - (size_t)n, ": %s", kvik_strerror(-err));
  return -err;
}

/* errno values are small positive numbers; anything between KVIK_ERRNO_BASE and 0 is one. */
static int is_errno_code(int code) { return code < 0 && code > KVIK_ERRNO_BASE; }

/* The common CUresults, named and described as the driver does, for when it is not loaded:
 * X(name, value, text). The driver, when loaded, knows them all. */
#define KVIK__CUDA_RESULTS(X)                                                                      \
  X(CUDA_ERROR_INVALID_VALUE, 1, "invalid argument")                                               \
  X(CUDA_ERROR_OUT_OF_MEMORY, 2, "out of memory")                                                  \
  X(CUDA_ERROR_NOT_INITIALIZED, 3, "initialization error")                                         \
  X(CUDA_ERROR_DEINITIALIZED, 4, "driver shutting down")                                           \
  X(CUDA_ERROR_PROFILER_DISABLED, 5, "profiler disabled while using external profiling tool")      \
  X(CUDA_ERROR_STUB_LIBRARY, 34, "CUDA driver is a stub library")                                  \
  X(CUDA_ERROR_DEVICE_UNAVAILABLE, 46, "CUDA-capable device(s) is/are busy or unavailable")         \
  X(CUDA_ERROR_NO_DEVICE, 100, "no CUDA-capable device is detected")                               \
  X(CUDA_ERROR_INVALID_DEVICE, 101, "invalid device ordinal")                                      \
  X(CUDA_ERROR_DEVICE_NOT_LICENSED, 102, "device doesn't have valid Grid license")                 \
  X(CUDA_ERROR_INVALID_IMAGE, 200, "device kernel image is invalid")                               \
  X(CUDA_ERROR_INVALID_CONTEXT, 201, "invalid device context")                                     \
  X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, 202, "context already current")                            \
  X(CUDA_ERROR_MAP_FAILED, 205, "mapping of buffer object failed")                                 \
  X(CUDA_ERROR_UNMAP_FAILED, 206, "unmapping of buffer object failed")                             \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209, "no kernel image is available for execution on the device") \
  X(CUDA_ERROR_ECC_UNCORRECTABLE, 214, "uncorrectable ECC error encountered")                      \
  X(CUDA_ERROR_INVALID_PTX, 218, "a PTX JIT compilation failed")                                   \
  X(CUDA_ERROR_INVALID_SOURCE, 300, "device kernel image is invalid")                              \
  X(CUDA_ERROR_FILE_NOT_FOUND, 301, "file not found")                                              \
  X(CUDA_ERROR_OPERATING_SYSTEM, 304, "OS call failed or operation not supported on this OS")      \
  X(CUDA_ERROR_INVALID_HANDLE, 400, "invalid resource handle")                                     \
  X(CUDA_ERROR_ILLEGAL_STATE, 401, "the operation cannot be performed in the present state")       \
  X(CUDA_ERROR_NOT_FOUND, 500, "named symbol not found")                                           \
  X(CUDA_ERROR_NOT_READY, 600, "device not ready")                                                 \
  X(CUDA_ERROR_ILLEGAL_ADDRESS, 700, "an illegal memory access was encountered")                   \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 701, "too many resources requested for launch")            \
  X(CUDA_ERROR_LAUNCH_TIMEOUT, 702, "the launch timed out and was terminated")                     \
  X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, 704, "peer access is already enabled")                 \
  X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, 705, "peer access has not been enabled")                   \
  X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, 708, "cannot set while device is active in this process")   \
  X(CUDA_ERROR_CONTEXT_IS_DESTROYED, 709, "context is destroyed")                                  \
  X(CUDA_ERROR_ASSERT, 710, "device-side assert triggered")                                        \
  X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, 712,                                                \
    "part or all of the requested memory range is already mapped")                                \
  X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, 713, "pointer does not correspond to a registered memory region") \
  X(CUDA_ERROR_HARDWARE_STACK_ERROR, 714, "hardware stack error")                                  \
  X(CUDA_ERROR_ILLEGAL_INSTRUCTION, 715, "an illegal instruction was encountered")                 \
  X(CUDA_ERROR_MISALIGNED_ADDRESS, 716, "misaligned address")                                      \
  X(CUDA_ERROR_INVALID_ADDRESS_SPACE, 717, "operation not supported on global/shared address space") \
  X(CUDA_ERROR_INVALID_PC, 718, "invalid program counter")                                         \
  X(CUDA_ERROR_LAUNCH_FAILED, 719, "unspecified launch failure")                                   \
  X(CUDA_ERROR_NOT_PERMITTED, 800, "operation not permitted")                                      \
  X(CUDA_ERROR_NOT_SUPPORTED, 801, "operation not supported")                                      \
  X(CUDA_ERROR_SYSTEM_NOT_READY, 802, "system not yet initialized")                                \
  X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, 803, "system has unsupported display driver / cuda driver combination") \
  X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, 804,                                                \
    "forward compatibility was attempted on non supported HW")                                    \
  X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, 900, "operation not permitted when stream is capturing") \
  X(CUDA_ERROR_TIMEOUT, 909, "wait operation timed out")                                           \
  X(CUDA_ERROR_UNKNOWN, 999, "unknown error")

static const char *cuda_name(CUresult result) {
  const char *name = kvik__cuda_error_name(result);
  if (name) return name;
  switch (result) {
#define KVIK_CUDA_NAME_(name, value, text) \
  case value:                              \
    return #name;
    KVIK__CUDA_RESULTS(KVIK_CUDA_NAME_)
#undef KVIK_CUDA_NAME_
  default:
    return "CUDA_ERROR_UNKNOWN_CODE";
  }
}

static const char *cuda_text(CUresult result) {
  const char *text = kvik__cuda_error_text(result);
  if (text) return text;
  switch (result) {
#define KVIK_CUDA_TEXT_(name, value, text) \
  case value:                              \
    return text;
    KVIK__CUDA_RESULTS(KVIK_CUDA_TEXT_)
#undef KVIK_CUDA_TEXT_
  default:
    return "unknown CUDA error";
  }
}

static const char *cufile_name(int status) {
  switch (status) {
#define KVIK_CUFILE_NAME_(name, value, text) \
  case value:                                \
    return #name;
    KVIK__CUFILE_STATUSES(KVIK_CUFILE_NAME_)
#undef KVIK_CUFILE_NAME_
  default:
    return "UNKNOWN";
  }
}

static const char *cufile_text(int status) {
  switch (status) {
#define KVIK_CUFILE_TEXT_(name, value, text) \
  case value:                                \
    return text;
    KVIK__CUFILE_STATUSES(KVIK_CUFILE_TEXT_)
#undef KVIK_CUFILE_TEXT_
  default:
    return "unknown cuFile status";
  }
}

/* The standard HTTP error statuses: X(status, reason phrase). */
#define KVIK__HTTP_STATUSES(X)                                                                     \
  X(300, "Multiple Choices") X(301, "Moved Permanently") X(302, "Found") X(303, "See Other")        \
  X(304, "Not Modified") X(307, "Temporary Redirect") X(308, "Permanent Redirect")                 \
  X(400, "Bad Request") X(401, "Unauthorized") X(402, "Payment Required") X(403, "Forbidden")      \
  X(404, "Not Found") X(405, "Method Not Allowed") X(406, "Not Acceptable")                        \
  X(407, "Proxy Authentication Required") X(408, "Request Timeout") X(409, "Conflict")              \
  X(410, "Gone") X(411, "Length Required") X(412, "Precondition Failed")                           \
  X(413, "Content Too Large") X(414, "URI Too Long") X(415, "Unsupported Media Type")              \
  X(416, "Range Not Satisfiable") X(417, "Expectation Failed") X(421, "Misdirected Request")        \
  X(422, "Unprocessable Content") X(425, "Too Early") X(426, "Upgrade Required")                   \
  X(428, "Precondition Required") X(429, "Too Many Requests")                                      \
  X(431, "Request Header Fields Too Large") X(451, "Unavailable For Legal Reasons")                 \
  X(500, "Internal Server Error") X(501, "Not Implemented") X(502, "Bad Gateway")                  \
  X(503, "Service Unavailable") X(504, "Gateway Timeout") X(505, "HTTP Version Not Supported")     \
  X(507, "Insufficient Storage") X(508, "Loop Detected") X(511, "Network Authentication Required")

static const char *http_name(int status) {
  switch (status) {
#define KVIK_HTTP_NAME_(status, text) \
  case status:                        \
    return "HTTP_" #status;
    KVIK__HTTP_STATUSES(KVIK_HTTP_NAME_)
#undef KVIK_HTTP_NAME_
  default:
    return "HTTP_ERROR";
  }
}

static const char *http_text(int status) {
  switch (status) {
#define KVIK_HTTP_TEXT_(status, text) \
  case status:                        \
    return text;
    KVIK__HTTP_STATUSES(KVIK_HTTP_TEXT_)
#undef KVIK_HTTP_TEXT_
  default:
    return "HTTP error status";
  }
}

const char *kvik_strerror(int code) {
  switch (code) {
#define KVIK_ERROR_TEXT_(name, value, text) \
  case value:                               \
    return text;
    KVIK_ERROR_MAP(KVIK_ERROR_TEXT_)
#undef KVIK_ERROR_TEXT_
  default:
    break;
  }
  if (code >= 0) return "success";
  if (KVIK_IS_CUFILE_ERROR(code)) return cufile_text(KVIK_CUFILE_STATUS(code));
  if (KVIK_IS_CUDA_ERROR(code)) return cuda_text(KVIK_CUDA_RESULT(code));
  if (KVIK_IS_HTTP_ERROR(code)) return http_text(KVIK_HTTP_STATUS(code));
  const char *text = is_errno_code(code) ? strerrordesc_np(-code) : NULL;
  return text ? text : "unknown error";
}

const char *kvik_err_name(int code) {
  switch (code) {
#define KVIK_ERROR_NAME_(name, value, text) \
  case value:                               \
    return #name;
    KVIK_ERROR_MAP(KVIK_ERROR_NAME_)
#undef KVIK_ERROR_NAME_
  default:
    break;
  }
  if (code >= 0) return "OK";
  if (KVIK_IS_CUFILE_ERROR(code)) return cufile_name(KVIK_CUFILE_STATUS(code));
  if (KVIK_IS_CUDA_ERROR(code)) return cuda_name(KVIK_CUDA_RESULT(code));
  if (KVIK_IS_HTTP_ERROR(code)) return http_name(KVIK_HTTP_STATUS(code));
  const char *name = is_errno_code(code) ? strerrorname_np(-code) : NULL;
  return name ? name : "UNKNOWN";
}
