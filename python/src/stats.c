/* kvik._lib.Monitor: a kvik_monitor, read as plain integers. kvik.statistics builds kvikio's
 * SummaryMonitor and Summary on it; the counting is libkvik's. */
#include <stddef.h>

#include "pykvik.h"

typedef struct {
  PyObject_HEAD
  kvik_monitor *monitor;
} MonitorObject;

static int monitor_init(MonitorObject *self, PyObject *args, PyObject *kwargs) {
  static const char *const keywords[] = {NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":Monitor", PYKVIK_KEYWORDS(keywords)))
    return -1;
  kvik_monitor_free(self->monitor); /* __init__ called again: a new monitor */
  self->monitor = NULL;
  int rc = kvik_monitor_create(&self->monitor);
  return rc < 0 ? pykvik_raise_int(rc) : 0;
}

static void monitor_dealloc(MonitorObject *self) {
  kvik_monitor_free(self->monitor);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static kvik_monitor *monitor_of(MonitorObject *self) {
  if (!self->monitor) PyErr_SetString(PyExc_ValueError, "Monitor was not initialised");
  return self->monitor;
}

/* The fields of kvik_summary, in its order, with the names the reading's dict gives them. */
static const struct {
  const char *name;
  size_t offset;
  int is_signed;
} fields[] = {
#define SIGNED(f) {#f, offsetof(kvik_summary, f), 1}
#define UNSIGNED(f) {#f, offsetof(kvik_summary, f), 0}
    UNSIGNED(span),          SIGNED(start_ns),          SIGNED(end_ns),
    SIGNED(anchor_unix_ns),  SIGNED(anchor_mono_ns),    UNSIGNED(num_ops),
    UNSIGNED(num_reads),     UNSIGNED(num_writes),      UNSIGNED(bytes_requested),
    UNSIGNED(bytes_transferred), UNSIGNED(bytes_read),  UNSIGNED(bytes_written),
    UNSIGNED(num_errors),    UNSIGNED(busy_ns),         UNSIGNED(total_duration_ns),
#undef SIGNED
#undef UNSIGNED
};

static int set_item(PyObject *dict, const char *key, PyObject *value) {
  if (!value) return -1;
  int rc = PyDict_SetItemString(dict, key, value);
  Py_DECREF(value);
  return rc;
}

/* {backend name: {num_ops, bytes_transferred, total_duration_ns, num_errors}} */
static PyObject *backends_dict(const kvik_summary *s) {
  PyObject *all = PyDict_New();
  for (int b = 0; all && b < KVIK_IO_BACKENDS; b++) {
    const kvik_backend_totals *t = &s->by_backend[b];
    PyObject *one = PyDict_New();
    if (!one || set_item(one, "num_ops", PyLong_FromUnsignedLongLong(t->num_ops)) < 0 ||
        set_item(one, "bytes_transferred", PyLong_FromUnsignedLongLong(t->bytes_transferred)) <
            0 ||
        set_item(one, "total_duration_ns", PyLong_FromUnsignedLongLong(t->total_duration_ns)) <
            0 ||
        set_item(one, "num_errors", PyLong_FromUnsignedLongLong(t->num_errors)) < 0 ||
        PyDict_SetItemString(all, kvik_io_backend_name(b), one) < 0)
      Py_CLEAR(all);
    Py_XDECREF(one);
  }
  return all;
}

static PyObject *monitor_read(MonitorObject *self, PyObject *unused) {
  (void)unused;
  kvik_monitor *m = monitor_of(self);
  if (!m) return NULL;
  kvik_summary s = {.struct_size = sizeof s};
  int rc = kvik_monitor_read(m, &s);
  if (rc < 0) return pykvik_raise(rc);
  PyObject *dict = PyDict_New();
  for (size_t i = 0; dict && i < sizeof fields / sizeof fields[0]; i++) {
    const char *at = (const char *)&s + fields[i].offset;
    int64_t v;
    memcpy(&v, at, sizeof v);
    PyObject *value =
        fields[i].is_signed ? PyLong_FromLongLong(v) : PyLong_FromUnsignedLongLong((uint64_t)v);
    if (set_item(dict, fields[i].name, value) < 0) Py_CLEAR(dict);
  }
  if (dict && set_item(dict, "by_backend", backends_dict(&s)) < 0) Py_CLEAR(dict);
  return dict;
}

static PyObject *monitor_reset(MonitorObject *self, PyObject *unused) {
  (void)unused;
  kvik_monitor *m = monitor_of(self);
  if (!m) return NULL;
  int rc = kvik_monitor_reset(m);
  if (rc < 0) return pykvik_raise(rc);
  Py_RETURN_NONE;
}

static PyObject *monitor_stop(MonitorObject *self, PyObject *unused) {
  (void)unused;
  kvik_monitor *m = monitor_of(self);
  if (!m) return NULL;
  int rc = kvik_monitor_stop(m);
  if (rc < 0) return pykvik_raise(rc);
  Py_RETURN_NONE;
}

static PyMethodDef monitor_methods[] = {
    {"read", (PyCFunction)monitor_read, METH_NOARGS,
     "read() -> dict: the kvik_summary of the span, as ints, with by_backend a dict by name."},
    {"reset", (PyCFunction)monitor_reset, METH_NOARGS, "reset(): kvik_monitor_reset()."},
    {"stop", (PyCFunction)monitor_stop, METH_NOARGS, "stop(): kvik_monitor_stop()."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject MonitorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvik._lib.Monitor",
    .tp_basicsize = sizeof(MonitorObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Monitor(): a kvik_monitor, counting the process's IO from its creation on.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)monitor_init,
    .tp_dealloc = (destructor)monitor_dealloc,
    .tp_methods = monitor_methods,
};

int pykvik_stats_type_init(PyObject *module) {
  if (PyType_Ready(&MonitorType) < 0) return -1;
  Py_INCREF(&MonitorType);
  if (PyModule_AddObject(module, "Monitor", (PyObject *)&MonitorType) < 0) {
    Py_DECREF(&MonitorType);
    return -1;
  }
  return 0;
}
