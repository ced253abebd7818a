/* Settings for kvik.defaults: libkvik's process-wide settings by their short names
 * ("num_threads", "compat_mode", ...). Values are ints here; kvik.defaults gives them their
 * Python types (CompatMode, bool). */
#include "pykvik.h"

/* The setting named by `name` (a str), or -1 with ValueError for an unknown name. */
static int setting_arg(PyObject *name) {
  const char *text = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
  if (!text) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_TypeError, "a setting name is a str, not %.100s", Py_TYPE(name)->tp_name);
    return -1;
  }
  int setting = kvik_setting_lookup(text);
  return setting < 0 ? pykvik_raise_int(setting) : setting;
}

static PyObject *py_setting_names(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  PyObject *names = PyTuple_New(KVIK_SETTING_COUNT);
  for (int s = 0; names && s < KVIK_SETTING_COUNT; s++) {
    PyObject *name = PyUnicode_FromString(kvik_setting_name((kvik_setting)s));
    if (!name) Py_CLEAR(names);
    else PyTuple_SET_ITEM(names, s, name);
  }
  return names;
}

static PyObject *py_setting_get(PyObject *self, PyObject *name) {
  (void)self;
  int setting = setting_arg(name);
  if (setting < 0) return NULL;
  int64_t value;
  int rc = kvik_setting_get((kvik_setting)setting, &value);
  return rc < 0 ? pykvik_raise(rc) : PyLong_FromLongLong(value);
}

/* Setting num_threads resizes the thread pool, which waits for running tasks: without the GIL,
 * so that Python threads whose IO those tasks serve can go on. */
static PyObject *py_setting_set(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *name, *value_obj;
  if (!PyArg_ParseTuple(args, "OO:setting_set", &name, &value_obj)) return NULL;
  int setting = setting_arg(name);
  if (setting < 0) return NULL;
  PyObject *index = PyNumber_Index(value_obj);
  if (!index) return NULL;
  long long value = PyLong_AsLongLong(index);
  Py_DECREF(index);
  if (value == -1 && PyErr_Occurred()) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kvik_setting_set((kvik_setting)setting, (int64_t)value);
  Py_END_ALLOW_THREADS
  return rc < 0 ? pykvik_raise(rc) : Py_NewRef(Py_None);
}

/* Like setting_set, with the value as text parsed as its environment variable would be. */
static PyObject *py_setting_parse(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *name;
  const char *text;
  if (!PyArg_ParseTuple(args, "Os:setting_parse", &name, &text)) return NULL;
  int setting = setting_arg(name);
  if (setting < 0) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kvik_setting_parse((kvik_setting)setting, text);
  Py_END_ALLOW_THREADS
  return rc < 0 ? pykvik_raise(rc) : Py_NewRef(Py_None);
}

static PyObject *py_setting_source(PyObject *self, PyObject *name) {
  (void)self;
  static const char *const sources[] = {[KVIK_SOURCE_DEFAULT] = "default", [KVIK_SOURCE_ENV] = "env",
                                        [KVIK_SOURCE_API] = "api"};
  int setting = setting_arg(name);
  if (setting < 0) return NULL;
  int source = kvik_setting_source_of((kvik_setting)setting);
  return source < 0 ? pykvik_raise(source) : PyUnicode_FromString(sources[source]);
}

static PyObject *py_setting_env_name(PyObject *self, PyObject *name) {
  (void)self;
  int setting = setting_arg(name);
  return setting < 0 ? NULL : PyUnicode_FromString(kvik_setting_env_name((kvik_setting)setting));
}

/* The text form: the only one of http_status_codes, a list. */
static PyObject *py_setting_format(PyObject *self, PyObject *name) {
  (void)self;
  int setting = setting_arg(name);
  if (setting < 0) return NULL;
  char small[128];
  int n = kvik_setting_format((kvik_setting)setting, small, sizeof small);
  if (n < 0) return pykvik_raise(n);
  if ((size_t)n < sizeof small) return PyUnicode_FromString(small);
  /* A long status list: ask again with room for all of it. */
  char *big = PyMem_Malloc((size_t)n + 1);
  if (!big) return PyErr_NoMemory();
  int m = kvik_setting_format((kvik_setting)setting, big, (size_t)n + 1);
  PyObject *result = m < 0 ? pykvik_raise(m) : PyUnicode_FromString(big);
  PyMem_Free(big);
  return result;
}

PyMethodDef pykvik_settings_methods[] = {
    {"setting_names", py_setting_names, METH_NOARGS, "setting_names() -> tuple[str, ...]: the names of the settings."},
    {"setting_get", py_setting_get, METH_O,
     "setting_get(name) -> int: the setting's current value (compat_mode and zero_copy_read: 0 OFF, 1 ON, 2 AUTO; "
     "booleans 0/1; sizes in bytes). Raises KvikError (KVIK_ECONFIG) if its environment variable is invalid."},
    {"setting_set", py_setting_set, METH_VARARGS,
     "setting_set(name, value: int): change the setting for the whole process. ValueError, naming the accepted "
     "range, for a value out of range. Setting num_threads resizes the thread pool."},
    {"setting_parse", py_setting_parse, METH_VARARGS,
     "setting_parse(name, text: str): like setting_set, with the value given as its environment variable takes it "
     "('auto', 'on', 'false', '4194304')."},
    {"setting_format", py_setting_format, METH_O,
     "setting_format(name) -> str: the setting's value as text ('AUTO', 'on', '4194304', '429,500,503'), the "
     "form setting_parse takes; the only form of http_status_codes."},
    {"setting_source", py_setting_source, METH_O,
     "setting_source(name) -> str: where the current value came from: 'default', 'env' or 'api'."},
    {"setting_env_name", py_setting_env_name, METH_O,
     "setting_env_name(name) -> str: the environment variable the setting is read from (KVIKIO_NTHREADS, ...)."},
    {NULL, NULL, 0, NULL},
};
