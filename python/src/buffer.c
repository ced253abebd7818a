/* Host and device memory from Python objects, and the checks on sizes and offsets. */
#include "pykvik.h"

/* ---- __cuda_array_interface__ / __array_interface__ -------------------------------------- */

/* The bytes per item of a typestr such as "<f8" or "|u1". */
static int typestr_itemsize(PyObject *typestr, Py_ssize_t *itemsize) {
  const char *text = PyUnicode_Check(typestr) ? PyUnicode_AsUTF8(typestr) : NULL;
  if (!text) return -1;
  char *end;
  long n = strlen(text) > 2 ? strtol(text + 2, &end, 10) : 0;
  if (n <= 0 || *end) {
    PyErr_Format(PyExc_ValueError, "array interface: bad typestr '%s'", text);
    return -1;
  }
  *itemsize = n;
  return 0;
}

/* 1 if `strides` (a tuple or None) describe C- or Fortran-ordered items of `shape`, else 0. */
static int strides_contiguous(PyObject *shape, PyObject *strides, Py_ssize_t itemsize, Py_ssize_t nitems) {
  if (strides == Py_None || nitems == 0) return 1;
  Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
  if (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != ndim) return 0;
  for (int order = 0; order < 2; order++) { /* 0: C order, 1: Fortran order */
    Py_ssize_t expected = itemsize;
    int ok = 1;
    for (Py_ssize_t k = 0; k < ndim && ok; k++) {
      Py_ssize_t d = order == 0 ? ndim - 1 - k : k;
      Py_ssize_t extent = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d));
      Py_ssize_t stride = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, d));
      if (extent != 1 && stride != expected) ok = 0;
      expected *= extent;
    }
    if (ok) return 1;
  }
  return 0;
}

/* Fill `buf` from an interface dict (the two protocols share its layout). */
static int buffer_from_interface(PyObject *obj, PyObject *iface, const char *name, int writable, pykvik_buffer *buf) {
  PyObject *data = PyDict_Check(iface) ? PyDict_GetItemString(iface, "data") : NULL;
  PyObject *shape = PyDict_Check(iface) ? PyDict_GetItemString(iface, "shape") : NULL;
  PyObject *typestr = PyDict_Check(iface) ? PyDict_GetItemString(iface, "typestr") : NULL;
  PyObject *strides = PyDict_Check(iface) ? PyDict_GetItemString(iface, "strides") : NULL;
  if (!data || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2 || !shape || !PyTuple_Check(shape) || !typestr) {
    PyErr_Format(PyExc_TypeError, "%s of %.100s lacks data, shape or typestr", name, Py_TYPE(obj)->tp_name);
    return -1;
  }
  Py_ssize_t itemsize, nitems = 1;
  if (typestr_itemsize(typestr, &itemsize) < 0) return -1;
  for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape); d++) {
    Py_ssize_t extent = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d));
    if (extent < 0) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: negative shape", name);
      return -1;
    }
    nitems *= extent;
  }
  if (!strides_contiguous(shape, strides ? strides : Py_None, itemsize, nitems)) {
    if (PyErr_Occurred()) return -1;
    PyErr_Format(PyExc_ValueError, "buffer of %.100s is not contiguous; IO needs contiguous memory (copy it first)",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  if (writable && PyObject_IsTrue(PyTuple_GET_ITEM(data, 1))) {
    PyErr_Format(PyExc_TypeError, "buffer of %.100s is read-only; a read needs a writable buffer", Py_TYPE(obj)->tp_name);
    return -1;
  }
  void *ptr = PyLong_AsVoidPtr(PyTuple_GET_ITEM(data, 0));
  if (PyErr_Occurred()) return -1;
  buf->ptr = ptr;
  buf->nbytes = (size_t)nitems * (size_t)itemsize;
  buf->owner = Py_NewRef(obj);
  return 0;
}

/* Version 3 of __cuda_array_interface__ names the stream its producer writes the memory on, and
 * asks consumers to wait for it; kvik's copies run on streams of their own, so wait here, or a
 * kernel still queued (CuPy's, say) could be read before it has run. */
static int wait_for_producer(PyObject *iface, const void *ptr) {
  PyObject *stream = PyDict_GetItemString(iface, "stream");
  if (!stream || stream == Py_None) return 0;
  void *handle = PyLong_Check(stream) ? PyLong_AsVoidPtr(stream) : NULL;
  if (!handle) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "__cuda_array_interface__: stream must be a non-zero int");
    return -1;
  }
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kvik_cuda_stream_synchronize(handle, ptr);
  Py_END_ALLOW_THREADS
  return rc < 0 ? pykvik_raise_int(rc) : 0;
}

/* 1 and `buf` filled if `obj` has interface `name`, 0 if not, -1 on error. `device`: the
 * interface describes device memory (__cuda_array_interface__), whose producer's stream is waited
 * for. */
static int try_interface(PyObject *obj, const char *name, int device, int writable, pykvik_buffer *buf) {
  /* Looked up without an AttributeError where it is missing (a NumPy array lacks the CUDA
   * interface: raising and clearing the error took a third of a 4 KiB CuFile.read), by a name
   * made once; what else the lookup raises (a tensor that requires grad) is the caller's. */
  static PyObject *cuda_name, *host_name; /* interned; guarded by the GIL */
  PyObject **key = device ? &cuda_name : &host_name, *iface = NULL;
  if (!*key && !(*key = PyUnicode_InternFromString(name))) return -1;
#if PY_VERSION_HEX >= 0x030D0000
  int found = PyObject_GetOptionalAttr(obj, *key, &iface);
#else
  int found = _PyObject_LookupAttr(obj, *key, &iface);
#endif
  if (found <= 0) return found;
  int rc = buffer_from_interface(obj, iface, name, writable, buf);
  /* An empty array has no memory to wait for, nor maybe a context yet to wait in. */
  if (rc == 0 && device && buf->nbytes > 0) rc = wait_for_producer(iface, buf->ptr);
  Py_DECREF(iface);
  if (rc < 0) {
    pykvik_buffer_release(buf);
    return -1;
  }
  buf->device = device;
  return 1;
}

/* ---- the buffer protocol ----------------------------------------------------------------- */

static int buffer_from_protocol(PyObject *obj, int writable, pykvik_buffer *buf) {
  if (PyObject_GetBuffer(obj, &buf->view, PyBUF_FULL_RO) < 0) return -1;
  buf->has_view = 1;
  const char *problem = NULL;
  PyObject *type = PyExc_ValueError;
  if (!PyBuffer_IsContiguous(&buf->view, 'A'))
    problem = "is not contiguous; IO needs contiguous memory (copy it first)";
  else if (writable && buf->view.readonly)
    problem = "is read-only; a read needs a writable buffer", type = PyExc_TypeError;
  if (problem) {
    PyErr_Format(type, "buffer of %.100s %s", Py_TYPE(obj)->tp_name, problem);
    PyBuffer_Release(&buf->view);
    buf->has_view = 0;
    return -1;
  }
  buf->ptr = buf->view.buf;
  buf->nbytes = (size_t)buf->view.len;
  buf->owner = Py_NewRef(obj);
  return 0;
}

int pykvik_buffer_get(PyObject *obj, int writable, pykvik_buffer *buf) {
  memset(buf, 0, sizeof *buf);
  int found = try_interface(obj, "__cuda_array_interface__", 1, writable, buf);
  if (found) return found > 0 ? 0 : -1;
  if (PyObject_CheckBuffer(obj)) return buffer_from_protocol(obj, writable, buf);
  found = try_interface(obj, "__array_interface__", 0, writable, buf);
  if (found) return found > 0 ? 0 : -1;
  PyErr_Format(PyExc_TypeError,
               "a %.100s is not a buffer: expected an object with the buffer protocol (bytearray, NumPy, "
               "memoryview) or __cuda_array_interface__ (CuPy, PyTorch, Numba)",
               Py_TYPE(obj)->tp_name);
  return -1;
}

void pykvik_buffer_release(pykvik_buffer *buf) {
  if (buf->has_view) PyBuffer_Release(&buf->view);
  buf->has_view = 0;
  Py_CLEAR(buf->owner);
}

/* ---- sizes and offsets ------------------------------------------------------------------- */

static int nonnegative_arg(PyObject *obj, const char *what, long long *out) {
  PyObject *index = PyNumber_Index(obj);
  if (!index) return -1;
  long long value = PyLong_AsLongLong(index);
  Py_DECREF(index);
  if (value == -1 && PyErr_Occurred()) return -1;
  if (value < 0) {
    PyErr_Format(PyExc_ValueError, "%s must not be negative (got %lld)", what, value);
    return -1;
  }
  *out = value;
  return 0;
}

int pykvik_size_arg(PyObject *obj, const char *what, size_t if_none, size_t *out) {
  long long value;
  if (!obj || obj == Py_None) return *out = if_none, 0;
  if (nonnegative_arg(obj, what, &value) < 0) return -1;
  *out = (size_t)value;
  return 0;
}

int pykvik_offset_arg(PyObject *obj, const char *what, int64_t *out) {
  long long value;
  if (!obj || obj == Py_None) return *out = 0, 0;
  if (nonnegative_arg(obj, what, &value) < 0) return -1;
  *out = (int64_t)value;
  return 0;
}
