/* libkvik's error codes as Python exceptions. */
#include "pykvik.h"

#include <errno.h>

PyObject *pykvik_error_type;
PyObject *pykvik_invalid_argument_type;
static PyObject *range_not_supported_type;

/* kvik's class for each class Python's OSError picks for an errno: a subclass of that class and
 * of KvikError, so that code written for kvikio, which raises RuntimeError for failed IO, still
 * catches it, and new code catches FileNotFoundError or kvik.FileNotFound. */
static const struct {
  const char *name;
  PyObject **base;
} os_error_classes[] = {
    {"OSFailure", &PyExc_OSError},
    {"FileNotFound", &PyExc_FileNotFoundError},
    {"FileExists", &PyExc_FileExistsError},
    {"PermissionDenied", &PyExc_PermissionError},
    {"IsADirectory", &PyExc_IsADirectoryError},
    {"NotADirectory", &PyExc_NotADirectoryError},
    {"TimedOut", &PyExc_TimeoutError},
    {"ConnectionRefused", &PyExc_ConnectionRefusedError},
    {"ConnectionReset", &PyExc_ConnectionResetError},
    {"ConnectionAborted", &PyExc_ConnectionAbortedError},
    {"BrokenPipe", &PyExc_BrokenPipeError},
    {"Interrupted", &PyExc_InterruptedError},
    {"WouldBlock", &PyExc_BlockingIOError},
    {"ChildProcessFailure", &PyExc_ChildProcessError},
    {"NoSuchProcess", &PyExc_ProcessLookupError},
};

/* Python's OSError class -> kvik's class of os_error_classes. */
static PyObject *os_error_types;

/* HTTP 404 for the code of HTTP_404; None for codes that are no HTTP status. */
static PyObject *http_status_of(int code) {
  return KVIK_IS_HTTP_ERROR(code) ? PyLong_FromLong(KVIK_HTTP_STATUS(code)) : Py_NewRef(Py_None);
}

/* Raise type(*args) with the attributes of kvik code `code`. Steals `args`. */
static PyObject *raise_with_code(PyObject *type, PyObject *args, int code) {
  PyObject *exc = args ? PyObject_CallObject(type, args) : NULL;
  PyObject *code_obj = PyLong_FromLong(code);
  PyObject *name_obj = PyUnicode_FromString(kvik_err_name(code));
  PyObject *status_obj = http_status_of(code);
  if (exc && code_obj && name_obj && status_obj &&
      PyObject_SetAttrString(exc, "code", code_obj) == 0 &&
      PyObject_SetAttrString(exc, "name", name_obj) == 0 &&
      PyObject_SetAttrString(exc, "http_status", status_obj) == 0)
    PyErr_SetObject(type, exc);
  Py_XDECREF(args);
  Py_XDECREF(exc);
  Py_XDECREF(code_obj);
  Py_XDECREF(name_obj);
  Py_XDECREF(status_obj);
  return NULL;
}

/* kvik's class for errno `err`: that of the class OSError(err, ...) would be. Borrowed. */
static PyObject *os_error_type(int err) {
  PyObject *probe = PyObject_CallFunction(PyExc_OSError, "(is)", err, "");
  if (!probe) return NULL;
  PyObject *type = PyDict_GetItemWithError(os_error_types, (PyObject *)Py_TYPE(probe));
  Py_DECREF(probe);
  if (!type && !PyErr_Occurred())
    type = PyDict_GetItemWithError(os_error_types, PyExc_OSError);
  return type;
}

PyObject *pykvik_raise(int code) { return pykvik_raise_as(code, NULL); }

/* The class pykvik_raise() picks for `code`, with `message`. */
static PyObject *raise_message(int code, const char *message) {
  if (code == -EINVAL)
    return raise_with_code(pykvik_invalid_argument_type, Py_BuildValue("(s)", message), code);
  if (code < 0 && code > KVIK_ERRNO_BASE) return pykvik_raise_errno(-code, message);
  /* kvikio raises OverflowError, with these words, for a body longer than the range asked for. */
  if (code == KVIK_ERANGE_IGNORED || code == KVIK_EREMOTE_LONG)
    return raise_with_code(
        range_not_supported_type,
        Py_BuildValue("(N)", PyUnicode_FromFormat(
                                 "maybe the server doesn't support file ranges? [%s]", message)),
        code);
  return raise_with_code(pykvik_error_type, Py_BuildValue("(s)", message), code);
}

PyObject *pykvik_raise_as(int code, const char *words) {
  const char *detail = kvik_last_error();
  const char *message = detail[0] ? detail : kvik_strerror(code);
  if (!words) return raise_message(code, message);
  PyObject *text = PyUnicode_FromFormat("%s: %s", words, message);
  if (!text) return NULL;
  raise_message(code, PyUnicode_AsUTF8(text));
  Py_DECREF(text);
  return NULL;
}

PyObject *pykvik_raise_errno(int err, const char *message) {
  PyObject *type = os_error_type(err);
  return type ? raise_with_code(type, Py_BuildValue("(is)", err, message), -err) : NULL;
}

int pykvik_raise_int(int code) {
  pykvik_raise(code);
  return -1;
}

/* Add the class `name`, a subclass of `bases` with the attributes `dict`, to the module. */
static PyObject *add_class(PyObject *module, const char *name, const char *doc, PyObject *bases,
                           PyObject *dict) {
  char qualified[64];
  snprintf(qualified, sizeof qualified, "kvik.%s", name);
  PyObject *type = PyErr_NewExceptionWithDoc(qualified, doc, bases, dict);
  if (type && PyModule_AddObjectRef(module, name, type) < 0) Py_CLEAR(type);
  return type;
}

static int add_os_error_classes(PyObject *module) {
  os_error_types = PyDict_New();
  if (!os_error_types) return -1;
  for (size_t i = 0; i < sizeof os_error_classes / sizeof os_error_classes[0]; i++) {
    PyObject *base = *os_error_classes[i].base;
    PyObject *bases = PyTuple_Pack(2, base, pykvik_error_type);
    PyObject *type = bases ? add_class(module, os_error_classes[i].name,
                                       "A system error of libkvik: the OSError class Python "
                                       "picks for its errno, and a KvikError.",
                                       bases, NULL)
                           : NULL;
    int rc = type ? PyDict_SetItem(os_error_types, base, type) : -1;
    Py_XDECREF(bases);
    Py_XDECREF(type);
    if (rc < 0) return -1;
  }
  return 0;
}

static int add_invalid_argument(PyObject *module) {
  PyObject *bases = PyTuple_Pack(2, PyExc_ValueError, pykvik_error_type);
  PyObject *attributes = Py_BuildValue("{s:i,s:s}", "code", -EINVAL, "name", "EINVAL");
  if (bases && attributes)
    pykvik_invalid_argument_type =
        add_class(module, "InvalidArgument",
                  "An argument libkvik refused (EINVAL): a ValueError, and a KvikError.", bases,
                  attributes);
  Py_XDECREF(bases);
  Py_XDECREF(attributes);
  return pykvik_invalid_argument_type ? 0 : -1;
}

static int add_range_not_supported(PyObject *module) {
  PyObject *bases = PyTuple_Pack(2, PyExc_OverflowError, pykvik_error_type);
  if (bases)
    range_not_supported_type =
        add_class(module, "RangeNotSupported",
                  "A remote response longer than the range asked for, as from a server that "
                  "ignores Range (KVIK_ERANGE_IGNORED, KVIK_EREMOTE_LONG): an OverflowError, as "
                  "kvikio raises, and a KvikError.",
                  bases, NULL);
  Py_XDECREF(bases);
  return range_not_supported_type ? 0 : -1;
}

int pykvik_errors_init(PyObject *module) {
  /* Class attributes, so that a KvikError made in Python (or pickled) has them too. */
  PyObject *attributes = Py_BuildValue("{s:O,s:s,s:O}", "code", Py_None, "name", "",
                                       "http_status", Py_None);
  if (!attributes) return -1;
  pykvik_error_type = add_class(
      module, "KvikError",
      "An error of libkvik, CUDA, cuFile or a remote server: a RuntimeError, as kvikio raises for "
      "failed IO. `code` is the kvik code (negative), `name` its symbolic name (KVIK_ECONFIG, "
      "CU_FILE_IO_ERROR, CUDA_ERROR_OUT_OF_MEMORY, HTTP_404, ENOENT, ...), `http_status` the "
      "HTTP status of a failed remote request (404) and None for other errors. System errors are "
      "also the OSError Python picks for their errno (kvik.FileNotFound is a FileNotFoundError), "
      "and a refused argument a ValueError (kvik.InvalidArgument).",
      PyExc_RuntimeError, attributes);
  Py_DECREF(attributes);
  if (!pykvik_error_type) return -1;
  return add_os_error_classes(module) < 0 || add_invalid_argument(module) < 0 ||
                 add_range_not_supported(module) < 0
             ? -1
             : 0;
}
