/* libkvik's error codes as Python exceptions. */
#include "pykvik.h"

#include <errno.h>

PyObject *pykvik_error_type;

static PyObject *raise_kvik_error(int code, const char *message) {
  PyObject *exc = PyObject_CallFunction(pykvik_error_type, "s", message);
  PyObject *code_obj = PyLong_FromLong(code);
  PyObject *name_obj = PyUnicode_FromString(kvik_err_name(code));
  if (exc && code_obj && name_obj && PyObject_SetAttrString(exc, "code", code_obj) == 0 &&
      PyObject_SetAttrString(exc, "name", name_obj) == 0)
    PyErr_SetObject(pykvik_error_type, exc);
  Py_XDECREF(exc);
  Py_XDECREF(code_obj);
  Py_XDECREF(name_obj);
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
  pykvik_error_type = PyErr_NewExceptionWithDoc(
      "kvik.KvikError",
      "An error of libkvik, CUDA or cuFile. `code` is the kvik code (negative), `name` its "
      "symbolic name (KVIK_ECONFIG, CU_FILE_IO_ERROR, CUDA_ERROR_OUT_OF_MEMORY, ...).",
      PyExc_RuntimeError, NULL);
  if (!pykvik_error_type) return -1;
  Py_INCREF(pykvik_error_type);
  if (PyModule_AddObject(module, "KvikError", pykvik_error_type) < 0) {
    Py_DECREF(pykvik_error_type);
    return -1;
  }
  return 0;
}
