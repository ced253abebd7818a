/* libkvik's error codes as Python exceptions. */
#include "pykvik.h"

#include <errno.h>

PyObject *pykvik_error_type;

/* HTTP 404 for the code of HTTP_404; None for codes that are no HTTP status. */
static PyObject *http_status_of(int code) {
  return KVIK_IS_HTTP_ERROR(code) ? PyLong_FromLong(KVIK_HTTP_STATUS(code)) : Py_NewRef(Py_None);
}

static PyObject *raise_kvik_error(int code, const char *message) {
  PyObject *exc = PyObject_CallFunction(pykvik_error_type, "s", message);
  PyObject *code_obj = PyLong_FromLong(code);
  PyObject *name_obj = PyUnicode_FromString(kvik_err_name(code));
  PyObject *status_obj = http_status_of(code);
  if (exc && code_obj && name_obj && status_obj && PyObject_SetAttrString(exc, "code", code_obj) == 0 &&
      PyObject_SetAttrString(exc, "name", name_obj) == 0 && PyObject_SetAttrString(exc, "http_status", status_obj) == 0)
    PyErr_SetObject(pykvik_error_type, exc);
  Py_XDECREF(exc);
  Py_XDECREF(code_obj);
  Py_XDECREF(name_obj);
  Py_XDECREF(status_obj);
  return NULL;
}

PyObject *pykvik_raise(int code) {
  const char *detail = kvik_last_error();
  const char *message = detail[0] ? detail : kvik_strerror(code);
  if (code == -EINVAL) {
    PyErr_SetString(PyExc_ValueError, message);
    return NULL;
  }
  if (code < 0 && code > KVIK_ERRNO_BASE) {
    /* OSError(errno, text) becomes the subclass for errno, as open() raises. */
    PyObject *args = Py_BuildValue("(is)", -code, message);
    if (args) PyErr_SetObject(PyExc_OSError, args);
    Py_XDECREF(args);
    return NULL;
  }
  return raise_kvik_error(code, message);
}

int pykvik_raise_int(int code) {
  pykvik_raise(code);
  return -1;
}

int pykvik_errors_init(PyObject *module) {
  /* Class attributes, so that a KvikError made in Python (or pickled) has them too. */
  PyObject *attributes = Py_BuildValue("{s:O,s:s,s:O}", "code", Py_None, "name", "", "http_status", Py_None);
  if (!attributes) return -1;
  pykvik_error_type = PyErr_NewExceptionWithDoc(
      "kvik.KvikError",
      "An error of libkvik, CUDA, cuFile or a remote server. `code` is the kvik code (negative), `name` its "
      "symbolic name (KVIK_ECONFIG, CU_FILE_IO_ERROR, CUDA_ERROR_OUT_OF_MEMORY, HTTP_404, ...), `http_status` "
      "the HTTP status of a failed remote request (404) and None for other errors.",
      PyExc_RuntimeError, attributes);
  Py_DECREF(attributes);
  if (!pykvik_error_type) return -1;
  Py_INCREF(pykvik_error_type);
  if (PyModule_AddObject(module, "KvikError", pykvik_error_type) < 0) {
    Py_DECREF(pykvik_error_type);
    return -1;
  }
  return 0;
}
