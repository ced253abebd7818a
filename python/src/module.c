/* The extension module kvik._lib: libkvik for Python. The Python package (kvik/) builds the
 * kvikio API on top of it. */
#include "pykvik.h"

#include <stdio.h>

#include "cli.h"

/* cli_main(argv: list[str]) -> int: the `kvik` command, run in this process. */
static PyObject *py_cli_main(PyObject *self, PyObject *arg) {
  (void)self;
  PyObject *seq = PySequence_Fast(arg, "cli_main() takes a list of strings");
  if (!seq) return NULL;
  Py_ssize_t argc = PySequence_Fast_GET_SIZE(seq);
  char **argv = PyMem_Calloc((size_t)argc + 1, sizeof *argv);
  int rc = -1;
  if (!argv) {
    PyErr_NoMemory();
    goto out;
  }
  for (Py_ssize_t i = 0; i < argc; i++) {
    const char *text = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
    if (!text) goto out;
    argv[i] = (char *)text;
  }
  /* Python's and C's stdout buffer separately: flush Python's so the output stays in order. */
  PyObject *flushed = PyObject_CallMethod(PySys_GetObject("stdout"), "flush", NULL);
  Py_XDECREF(flushed);
  PyErr_Clear();
  Py_BEGIN_ALLOW_THREADS
  rc = cli_main((int)argc, argv);
  fflush(stdout);
  fflush(stderr);
  Py_END_ALLOW_THREADS
out:
  PyMem_Free(argv);
  Py_DECREF(seq);
  return rc < 0 ? NULL : PyLong_FromLong(rc);
}

static PyMethodDef module_methods[] = {
    {"cli_main", py_cli_main, METH_O, "cli_main(argv) -> int: run the kvik command in this process."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "kvik._lib", "libkvik, compiled into this module.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lib(void);

PyMODINIT_FUNC PyInit__lib(void) {
  PyObject *module = PyModule_Create(&module_def);
  if (!module) return NULL;
  if (PyModule_AddStringConstant(module, "__version__", kvik_version_string()) < 0 ||
      PyModule_AddFunctions(module, pykvik_settings_methods) < 0 ||
      PyModule_AddFunctions(module, pykvik_driver_methods) < 0 ||
      PyModule_AddFunctions(module, pykvik_remote_methods) < 0 ||
      PyModule_AddFunctions(module, pykvik_nvcomp_methods) < 0 || pykvik_errors_init(module) < 0 ||
      pykvik_file_types_init(module) < 0 || pykvik_mmap_type_init(module) < 0 || pykvik_remote_type_init(module) < 0 ||
      pykvik_stats_type_init(module) < 0) {
    Py_DECREF(module);
    return NULL;
  }
  return module;
}
