/* The cuFile driver, page cache and memory registration, for kvik.cufile_driver and kvik. */
#include "pykvik.h" /* first: Python.h sets the feature macros (_GNU_SOURCE) */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

/* The kvik calls here may block: cuFile calls load the library and open its driver (seconds),
 * page-cache calls go through whole files. RC_CALL(rc, call) runs `call` without the GIL and
 * stores its result in rc. */
#define RC_CALL(rc, call)  \
  do {                     \
    Py_BEGIN_ALLOW_THREADS \
    (rc) = (call);         \
    Py_END_ALLOW_THREADS   \
  } while (0)

static PyObject *none_or_raise(int rc) { return rc < 0 ? pykvik_raise(rc) : Py_NewRef(Py_None); }

/* ---- cuFile driver ----------------------------------------------------------------------- */

static PyObject *py_cufile_open(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  int rc;
  RC_CALL(rc, kvik_cufile_open());
  return none_or_raise(rc);
}

static PyObject *py_libcufile_version(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  int version;
  RC_CALL(version, kvik_cufile_version());
  return version < 0 ? pykvik_raise(version) : PyLong_FromLong(version);
}

static PyObject *py_cufile_properties(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  kvik_cufile_properties p = {.struct_size = sizeof p};
  int rc;
  RC_CALL(rc, kvik_cufile_get_properties(&p));
  if (rc < 0) return pykvik_raise(rc);
  return Py_BuildValue("{s:I,s:I,s:O,s:O,s:O,s:K,s:K,s:K,s:K,s:K,s:I,s:I,s:I,s:I}", "nvfs_major_version",
                       p.nvfs_major_version, "nvfs_minor_version", p.nvfs_minor_version, "gds_available",
                       p.gds_available ? Py_True : Py_False, "allow_compat_mode",
                       p.allow_compat_mode ? Py_True : Py_False, "poll_mode", p.poll_mode ? Py_True : Py_False,
                       "poll_threshold_size", (unsigned long long)p.poll_threshold_size, "max_direct_io_size",
                       (unsigned long long)p.max_direct_io_size, "max_device_cache_size",
                       (unsigned long long)p.max_device_cache_size, "per_buffer_cache_size",
                       (unsigned long long)p.per_buffer_cache_size, "max_device_pinned_mem_size",
                       (unsigned long long)p.max_device_pinned_mem_size, "max_batch_io_size", p.max_batch_io_size,
                       "max_batch_io_timeout_ms", p.max_batch_io_timeout_ms, "file_system_flags",
                       p.file_system_flags, "feature_flags", p.feature_flags);
}

static PyObject *py_cufile_set_poll_mode(PyObject *self, PyObject *args) {
  (void)self;
  int enable;
  PyObject *threshold_obj;
  size_t threshold;
  if (!PyArg_ParseTuple(args, "pO:cufile_set_poll_mode", &enable, &threshold_obj) ||
      pykvik_size_arg(threshold_obj, "threshold_size", 0, &threshold) < 0)
    return NULL;
  int rc;
  RC_CALL(rc, kvik_cufile_set_poll_mode(enable, threshold));
  return none_or_raise(rc);
}

/* The three size setters of the driver, which differ only in the function they call. */
static PyObject *set_driver_size(PyObject *size_obj, int (*set)(size_t)) {
  size_t size;
  if (pykvik_size_arg(size_obj, "size", 0, &size) < 0) return NULL;
  int rc;
  RC_CALL(rc, set(size));
  return none_or_raise(rc);
}

static PyObject *py_cufile_set_max_direct_io_size(PyObject *self, PyObject *size) {
  (void)self;
  return set_driver_size(size, kvik_cufile_set_max_direct_io_size);
}

static PyObject *py_cufile_set_max_cache_size(PyObject *self, PyObject *size) {
  (void)self;
  return set_driver_size(size, kvik_cufile_set_max_cache_size);
}

static PyObject *py_cufile_set_max_pinned_memory(PyObject *self, PyObject *size) {
  (void)self;
  return set_driver_size(size, kvik_cufile_set_max_pinned_memory);
}

/* ---- cuFile parameters ------------------------------------------------------------------- */

static PyObject *py_cufile_parameter_names(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  PyObject *names = PyList_New(0);
  const char *name;
  for (unsigned i = 0; names && (name = kvik_cufile_parameter_name(i)) != NULL; i++) {
    PyObject *item = PyUnicode_FromString(name);
    if (!item || PyList_Append(names, item) < 0) Py_CLEAR(names);
    Py_XDECREF(item);
  }
  if (!names) return NULL;
  PyObject *tuple = PyList_AsTuple(names);
  Py_DECREF(names);
  return tuple;
}

static PyObject *py_cufile_parameter_get(PyObject *self, PyObject *args) {
  (void)self;
  const char *name;
  if (!PyArg_ParseTuple(args, "s:cufile_parameter_get", &name)) return NULL;
  char value[4096]; /* cuFile's string parameters are paths and levels, well below this */
  int rc;
  RC_CALL(rc, kvik_cufile_parameter_get(name, value, sizeof value));
  return rc < 0 ? pykvik_raise(rc) : PyUnicode_FromString(value);
}

static PyObject *py_cufile_parameter_set(PyObject *self, PyObject *args) {
  (void)self;
  const char *name, *value;
  if (!PyArg_ParseTuple(args, "ss:cufile_parameter_set", &name, &value)) return NULL;
  int rc;
  RC_CALL(rc, kvik_cufile_parameter_set(name, value));
  return none_or_raise(rc);
}

/* ---- memory registration ----------------------------------------------------------------- */

/* Device memory is registered with cuFile (kvik_cufile_buffer_register). Host memory is left alone:
 * kvik reads and writes it directly, without cuFile, so there is nothing to register, and code
 * that registers its buffers runs unchanged on machines with and without a GPU. */
static PyObject *py_memory_register(PyObject *self, PyObject *obj) {
  (void)self;
  pykvik_buffer buf;
  if (pykvik_buffer_get(obj, 0, &buf) < 0) return NULL;
  int rc = 0;
  if (buf.device) RC_CALL(rc, kvik_cufile_buffer_register(buf.ptr, 0));
  pykvik_buffer_release(&buf);
  return none_or_raise(rc);
}

static PyObject *py_memory_deregister(PyObject *self, PyObject *obj) {
  (void)self;
  pykvik_buffer buf;
  if (pykvik_buffer_get(obj, 0, &buf) < 0) return NULL;
  int rc = 0;
  if (buf.device) RC_CALL(rc, kvik_cufile_buffer_deregister(buf.ptr));
  pykvik_buffer_release(&buf);
  return none_or_raise(rc);
}

static PyObject *py_bounce_buffer_free(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  size_t bytes;
  Py_BEGIN_ALLOW_THREADS
  bytes = kvik_bounce_buffer_free();
  Py_END_ALLOW_THREADS
  return PyLong_FromSize_t(bytes);
}

/* ---- page cache -------------------------------------------------------------------------- */

/* The path of `file` as bytes (new reference): a str, bytes or os.PathLike names it; an int file
 * descriptor or an open file (an object with fileno()) is named by /proc/self/fd/N, which opens
 * the same file. NULL with an exception for anything else or a descriptor that is not open. */
static PyObject *file_path(PyObject *file) {
  PyObject *path = NULL;
  if (PyUnicode_Check(file) || PyBytes_Check(file) || PyObject_HasAttrString(file, "__fspath__"))
    return PyUnicode_FSConverter(file, &path) ? path : NULL;
  PyObject *fd_obj = PyLong_Check(file)                     ? Py_NewRef(file)
                     : PyObject_HasAttrString(file, "fileno") ? PyObject_CallMethod(file, "fileno", NULL)
                                                              : NULL;
  if (!fd_obj) {
    if (!PyErr_Occurred())
      /* ValueError, as kvikio raises for a `file` of another type. */
      PyErr_Format(PyExc_ValueError,
                   "expected a path (str, bytes, os.PathLike), a file descriptor or an open file, "
                   "not %.100s",
                   Py_TYPE(file)->tp_name);
    return NULL;
  }
  long fd = PyLong_Check(fd_obj) ? PyLong_AsLong(fd_obj) : -1;
  Py_DECREF(fd_obj);
  if (fd == -1 && PyErr_Occurred()) return NULL;
  /* A number that is no open descriptor is reported as EBADF, as os.fstat() does, rather than
   * as a missing /proc entry. */
  if (fd < 0 || fd > INT_MAX || fcntl((int)fd, F_GETFD) < 0) {
    PyObject *message = PyUnicode_FromFormat("file descriptor %ld: %s", fd, strerror(EBADF));
    if (message) pykvik_raise_errno(EBADF, PyUnicode_AsUTF8(message));
    Py_XDECREF(message);
    return NULL;
  }
  return PyBytes_FromFormat("/proc/self/fd/%ld", fd);
}

static PyObject *py_get_page_cache_info(PyObject *self, PyObject *args, PyObject *kwargs) {
  (void)self;
  static const char *const keywords[] = {"file", "offset", "length", NULL};
  PyObject *file, *offset_obj = NULL, *length_obj = NULL;
  int64_t offset, length;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OO:get_page_cache_info",
                                   PYKVIK_KEYWORDS(keywords), &file, &offset_obj, &length_obj) ||
      pykvik_offset_arg(offset_obj, "offset", &offset) < 0 ||
      pykvik_offset_arg(length_obj, "length", &length) < 0)
    return NULL;
  PyObject *path = file_path(file);
  if (!path) return NULL;
  size_t resident = 0, total = 0;
  int rc;
  RC_CALL(rc, kvik_page_cache_info_range(PyBytes_AS_STRING(path), offset, length, &resident,
                                         &total));
  Py_DECREF(path);
  if (rc < 0) return pykvik_raise_as(rc, PYKVIK_OPEN_WORDS(rc));
  return Py_BuildValue("(KK)", (unsigned long long)resident, (unsigned long long)total);
}

/* Drop part of a file's cached pages: kvik_page_cache_drop() does the whole file only. Returns 0
 * or an errno value. */
static int drop_range(const char *path, int64_t offset, int64_t length, int sync_first) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  /* Dirty pages cannot be dropped; EINVAL: the file cannot be synced (a pipe, /proc), fine. */
  int err = sync_first && fdatasync(fd) != 0 && errno != EINVAL ? errno : 0;
  if (!err) err = posix_fadvise(fd, (off_t)offset, (off_t)length, POSIX_FADV_DONTNEED);
  close(fd);
  return err;
}

static PyObject *py_drop_file_page_cache(PyObject *self, PyObject *args, PyObject *kwargs) {
  (void)self;
  static const char *const keywords[] = {"file", "offset", "length", "sync_first", NULL};
  PyObject *file, *offset_obj = NULL, *length_obj = NULL;
  int sync_first = 1;
  int64_t offset, length;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OOp:drop_file_page_cache",
                                   PYKVIK_KEYWORDS(keywords), &file, &offset_obj, &length_obj,
                                   &sync_first) ||
      pykvik_offset_arg(offset_obj, "offset", &offset) < 0 || pykvik_offset_arg(length_obj, "length", &length) < 0)
    return NULL;
  PyObject *path = file_path(file);
  if (!path) return NULL;
  const char *text = PyBytes_AS_STRING(path);
  int rc = 0, err = 0;
  if (offset == 0 && length == 0 && sync_first) RC_CALL(rc, kvik_page_cache_drop(text));
  else RC_CALL(err, drop_range(text, offset, length, sync_first));
  PyObject *result = rc < 0 ? pykvik_raise(rc) : Py_NewRef(Py_None);
  if (err) {
    Py_CLEAR(result);
    PyObject *message = PyUnicode_FromFormat("drop_file_page_cache(\"%s\"): %s", text, strerror(err));
    if (message) pykvik_raise_errno(err, PyUnicode_AsUTF8(message));
    Py_XDECREF(message);
  }
  Py_DECREF(path);
  return result;
}

/* ---- CUDA and what the library finds ----------------------------------------------------- */

static PyObject *py_cuda_driver_version(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  int version;
  RC_CALL(version, kvik_cuda_driver_version());
  return version < 0 ? pykvik_raise(version) : PyLong_FromLong(version);
}

static PyObject *py_runtime_lib_probe(PyObject *self, PyObject *args) {
  (void)self;
  const char *name;
  if (!PyArg_ParseTuple(args, "s:runtime_lib_probe", &name)) return NULL;
  kvik_runtime_lib lib;
  if (strcmp(name, "cuda") == 0) lib = KVIK_LIB_CUDA;
  else if (strcmp(name, "cufile") == 0) lib = KVIK_LIB_CUFILE;
  else return PyErr_Format(PyExc_ValueError, "runtime_lib_probe: unknown library '%s' (expected 'cuda' or 'cufile')", name);
  char detail[1024];
  int found;
  RC_CALL(found, kvik_runtime_lib_supported(lib, detail, sizeof detail));
  if (found < 0) return pykvik_raise(found);
  return Py_BuildValue("(Os)", found ? Py_True : Py_False, detail);
}

PyMethodDef pykvik_driver_methods[] = {
    {"cufile_open", py_cufile_open, METH_NOARGS,
     "cufile_open(): load cuFile and open its driver now. KvikError (KVIK_ECUFILE_UNAVAILABLE or cuFile's "
     "status) saying why it cannot."},
    {"libcufile_version", py_libcufile_version, METH_NOARGS,
     "libcufile_version() -> int: cuFile's version as cuFileGetVersion gives it (1150 for 1.15.0). Raises "
     "KvikError without cuFile, OSError (ENOTSUP) for a cuFile older than the call."},
    {"cufile_properties", py_cufile_properties, METH_NOARGS,
     "cufile_properties() -> dict: the driver's properties (kvik_cufile_properties), sizes in bytes."},
    {"cufile_set_poll_mode", py_cufile_set_poll_mode, METH_VARARGS,
     "cufile_set_poll_mode(enable, threshold_size): cuFileDriverSetPollMode; the size in bytes."},
    {"cufile_set_max_direct_io_size", py_cufile_set_max_direct_io_size, METH_O,
     "cufile_set_max_direct_io_size(size): cuFileDriverSetMaxDirectIOSize; bytes, rounded down to KiB."},
    {"cufile_set_max_cache_size", py_cufile_set_max_cache_size, METH_O,
     "cufile_set_max_cache_size(size): cuFileDriverSetMaxCacheSize; bytes, rounded down to KiB."},
    {"cufile_set_max_pinned_memory", py_cufile_set_max_pinned_memory, METH_O,
     "cufile_set_max_pinned_memory(size): cuFileDriverSetMaxPinnedMemSize; bytes, rounded down to KiB."},
    {"cufile_parameter_names", py_cufile_parameter_names, METH_NOARGS,
     "cufile_parameter_names() -> tuple[str, ...]: the names of cuFile's parameters (cuFile >= 1.14)."},
    {"cufile_parameter_get", py_cufile_parameter_get, METH_VARARGS,
     "cufile_parameter_get(name) -> str: a cuFile parameter as text (a number, 'true'/'false', or a string)."},
    {"cufile_parameter_set", py_cufile_parameter_set, METH_VARARGS,
     "cufile_parameter_set(name, value: str): set a cuFile parameter; only before the driver opens."},
    {"memory_register", py_memory_register, METH_O,
     "memory_register(buf): register the device allocation `buf` lies in with cuFile. Host memory needs no "
     "registration (kvik reads and writes it directly): nothing is done for it."},
    {"memory_deregister", py_memory_deregister, METH_O,
     "memory_deregister(buf): undo memory_register(buf). Nothing is done for host memory."},
    {"bounce_buffer_free", py_bounce_buffer_free, METH_NOARGS,
     "bounce_buffer_free() -> int: free the idle bounce buffers (kvik_bounce_buffer_free); the bytes freed."},
    {"get_page_cache_info", (PyCFunction)(void (*)(void))py_get_page_cache_info,
     METH_VARARGS | METH_KEYWORDS,
     "get_page_cache_info(file, offset=0, length=0) -> (num_pages_in_page_cache, num_pages):\n"
     "how much of the file (a path, a file descriptor or an open file) is in the page cache:\n"
     "of its bytes [offset, offset + length) (length 0: to the end), in whole pages; (0, 0)\n"
     "from the end of the file on."},
    {"drop_file_page_cache", (PyCFunction)(void (*)(void))py_drop_file_page_cache, METH_VARARGS | METH_KEYWORDS,
     "drop_file_page_cache(file, offset=0, length=0, sync_first=True): ask the kernel to drop the file's cached "
     "pages in [offset, offset + length) (length 0: to the end), first writing back dirty ones if sync_first."},
    {"cuda_driver_version", py_cuda_driver_version, METH_NOARGS,
     "cuda_driver_version() -> int: the CUDA driver's version (13000 for 13.0). KvikError without a driver."},
    {"runtime_lib_probe", py_runtime_lib_probe, METH_VARARGS,
     "runtime_lib_probe(name) -> (found: bool, detail: str): whether 'cuda' (libcuda.so.1) or 'cufile' "
     "(libcufile.so.0) loads here; detail is its path, or the loader's reason."},
    {NULL, NULL, 0, NULL},
};
