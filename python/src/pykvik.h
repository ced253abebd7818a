/* What the files of the extension module kvik._lib share.
 *
 * Conventions: every function that can fail returns NULL or -1 with a Python exception set.
 * Blocking kvik calls run with the GIL released (Py_BEGIN_ALLOW_THREADS), so other Python
 * threads run while IO is in flight. Errors of libkvik become exceptions through pykvik_raise(),
 * right after the failing call and on the same thread, since kvik_last_error() is per thread. */
#ifndef PYKVIK_H
#define PYKVIK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>

#include "kvik.h"

/* ---- errors (errors.c) ------------------------------------------------------------------- */

/* kvik.KvikError, a RuntimeError subclass for library, CUDA, cuFile and HTTP codes; its `code`
 * and `name` attributes hold the kvik code and kvik_err_name() of it, `http_status` the HTTP
 * status of an HTTP error code (404 for the code of HTTP_404) and None for the others.
 * kvik.InvalidArgument is a ValueError and a KvikError, for -EINVAL. */
extern PyObject *pykvik_error_type;
extern PyObject *pykvik_invalid_argument_type;

/* Raise the exception for kvik code `code` < 0, with kvik_last_error() as its message:
 * -EINVAL gives kvik.InvalidArgument, other negative errno values kvik's subclass of the OSError
 * class Python picks for the errno (kvik.FileNotFound, a FileNotFoundError, ...), with errno
 * set, all other codes KvikError. Every one is a KvikError, so a RuntimeError, as kvikio raises
 * for failed IO; each has `code`, `name` and `http_status`. Returns NULL. */
PyObject *pykvik_raise(int code);

/* pykvik_raise(code) with kvikio's `words` for the failure (NULL: none) before kvik's message,
 * for code that matches kvikio's messages ("Unable to open file: kvik_file_open(...): ..."). */
PyObject *pykvik_raise_as(int code, const char *words);

/* kvikio's words for a failure to open a file: those of the system's refusals (an errno), not of
 * bad arguments (-EINVAL). */
#define PYKVIK_OPEN_WORDS(code)                                                                    \
  ((code) != -EINVAL && (code) > KVIK_ERRNO_BASE ? "Unable to open file" : NULL)

/* Raise kvik's class for errno `err` > 0 (as pykvik_raise(-err) does) with `message`. Returns
 * NULL. */
PyObject *pykvik_raise_errno(int err, const char *message);

/* Like pykvik_raise(), returning -1, for functions that return int. */
int pykvik_raise_int(int code);

/* Add KvikError and its subclasses to the module. Returns 0 or -1. */
int pykvik_errors_init(PyObject *module);

/* ---- buffers (buffer.c) ------------------------------------------------------------------ */

/* Memory that IO reads into or writes from, and what keeps it alive. */
typedef struct pykvik_buffer {
  char *ptr;
  size_t nbytes;
  int device;       /* 1 if it came through __cuda_array_interface__ */
  int has_view;     /* view holds a buffer-protocol export to release */
  PyObject *owner;  /* the object, referenced while the buffer is held */
  Py_buffer view;
} pykvik_buffer;

/* Acquire the memory of `obj`: an object with __cuda_array_interface__ (CuPy, PyTorch, Numba),
 * then anything with the buffer protocol (bytes-like, NumPy, memoryview), then an object with
 * __array_interface__. `writable`: the IO writes into it (a read). Raises ValueError for memory
 * that is not contiguous and TypeError for a read-only target or an object without memory.
 * Returns 0 or -1. Release with pykvik_buffer_release(), with the GIL held. */
int pykvik_buffer_get(PyObject *obj, int writable, pykvik_buffer *buf);
void pykvik_buffer_release(pykvik_buffer *buf);

/* ---- argument helpers (buffer.c) --------------------------------------------------------- */

/* Python int -> non-negative size or offset; None gives `if_none`. `what` names the argument in
 * the ValueError for a negative value. Return 0 or -1. */
int pykvik_size_arg(PyObject *obj, const char *what, size_t if_none, size_t *out);
int pykvik_offset_arg(PyObject *obj, const char *what, int64_t *out);

/* A keyword list `static const char *const keywords[]`, as PyArg_ParseTupleAndKeywords() takes
 * it: Python before 3.13 declares that parameter `char **` (string literals are const, as
 * -Wwrite-strings has them), yet never writes through it. */
#define PYKVIK_KEYWORDS(keywords) ((char **)(keywords))

/* ---- futures (file.c) ------------------------------------------------------------------- */

/* Starts a kvik request: stores its future in *future and returns 0, or returns a code < 0. */
typedef int (*pykvik_start_fn)(void *ctx, kvik_future **future);

/* Call start(ctx, ...) without the GIL and return the request as a kvik.IOFuture (or, if
 * `stream_ordered`, a kvik.IOFutureStream) that takes over `buf` (also on failure: the caller no longer releases it) and keeps
 * `owner` (the file) alive until it is freed. `ctx` must not point into Python objects. */
PyObject *pykvik_future_start(PyObject *owner, pykvik_buffer *buf, int stream_ordered, pykvik_start_fn start,
                              void *ctx);

/* pykvik_future_start, raising a failure to start with kvikio's `words` (pykvik_raise_as). */
PyObject *pykvik_future_start_as(PyObject *owner, pykvik_buffer *buf, int stream_ordered,
                                 pykvik_start_fn start, void *ctx, const char *words);

/* ---- the parts of the module ------------------------------------------------------------- */

/* Types: CuFile, IOFuture, IOFutureStream (file.c); Mmap (mmap.c); RemoteHandle (remote.c).
 * Return 0 or -1. */
int pykvik_file_types_init(PyObject *module);
/* The handle of a kvik.CuFile (file.c), or NULL with TypeError (another object) or ValueError
 * (closed). Borrowed: valid while the caller holds a reference to `obj`. */
kvik_file *pykvik_cufile_handle(PyObject *obj);

/* Whether `obj` is a kvik.CuFile (open or closed). */
int pykvik_is_cufile(PyObject *obj);
int pykvik_mmap_type_init(PyObject *module);
int pykvik_remote_type_init(PyObject *module);
int pykvik_stats_type_init(PyObject *module);

/* Module functions, each table ends with a {NULL} entry:
 *   settings.c  setting_get/set/..., the low level of kvik.defaults
 *   driver.c    cuFile driver properties, parameters, versions (kvik.cufile_driver), page cache,
 *               memory registration, runtime library probes
 *   remote.c    remote_supported, setting_format (the text form, the only one of http_status_codes)
 *   nvcomp.c    codec queries and batched (de)compression, the low level of kvik.nvcomp
 *   module.c    version, cli_main */
extern PyMethodDef pykvik_settings_methods[];
extern PyMethodDef pykvik_nvcomp_methods[];
extern PyMethodDef pykvik_driver_methods[];
extern PyMethodDef pykvik_remote_methods[];

#endif /* PYKVIK_H */
