/* kvik.Mmap: kvikio.Mmap on kvik_mmap, a read-only mapping read into host or device memory. */
#include <sys/stat.h>

#include "pykvik.h"

typedef struct {
  PyObject_HEAD
  kvik_mmap *map;
} MmapObject;

/* kvikio's flag check: a first letter other than r or w is unknown (a ValueError). Flags that
 * kvikio knows but kvik does not map ("w", "r+") are refused by kvik_mmap_open. */
static int check_flags(const char *flags) {
  if (flags[0] == 'r' || flags[0] == 'w') return 0;
  PyErr_Format(PyExc_ValueError, "Unknown file open flag \"%s\": a mapping opens with \"r\"",
               flags);
  return -1;
}

/* kvikio's range checks, made before opening so that each raises kvikio's type: an offset at or
 * past the end of a non-empty file, or a range that reaches past it, is an IndexError; a size of
 * 0 is a ValueError. A path that stat(2) cannot reach is left to kvik_mmap_open to report. */
static int check_map_range(const char *path, PyObject *size_obj, size_t size, int64_t offset) {
  int explicit_size = size_obj && size_obj != Py_None;
  struct stat st;
  if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    if (offset >= st.st_size) {
      PyErr_Format(PyExc_IndexError,
                   "Offset must be less than the file size: initial_map_offset %lld, "
                   "file size %lld",
                   (long long)offset, (long long)st.st_size);
      return -1;
    }
    if (explicit_size && size > (uint64_t)(st.st_size - offset)) {
      PyErr_Format(PyExc_IndexError,
                   "Mapped region is past the end of file: %zu bytes at %lld, file size %lld", size,
                   (long long)offset, (long long)st.st_size);
      return -1;
    }
  }
  if (explicit_size && size == 0) {
    PyErr_SetString(PyExc_ValueError, "Mapped region should not be zero byte: initial_map_size "
                                      "must be positive (None maps up to the end of the file)");
    return -1;
  }
  return 0;
}

static int mmap_init(MmapObject *self, PyObject *args, PyObject *kwargs) {
  static const char *const keywords[] = {"file_path", "flags", "initial_map_size",
                                         "initial_map_offset", "mode", "map_flags", NULL};
  PyObject *path_bytes = NULL, *size_obj = NULL, *offset_obj = NULL, *mode_obj = NULL, *map_flags = Py_None;
  const char *flags = "r";
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|sOOOO:Mmap", PYKVIK_KEYWORDS(keywords),
                                   PyUnicode_FSConverter, &path_bytes, &flags, &size_obj,
                                   &offset_obj, &mode_obj, &map_flags))
    return -1;
  size_t map_size;
  int64_t map_offset;
  int rc = -1;
  if (map_flags != Py_None)
    PyErr_SetString(PyExc_NotImplementedError, "map_flags: kvik always maps files read-only and MAP_SHARED");
  else if (check_flags(flags) == 0 &&
           pykvik_size_arg(size_obj, "initial_map_size", 0, &map_size) == 0 &&
           pykvik_offset_arg(offset_obj, "initial_map_offset", &map_offset) == 0 &&
           check_map_range(PyBytes_AS_STRING(path_bytes), size_obj, map_size, map_offset) == 0) {
    kvik_mmap *map = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = kvik_mmap_open(PyBytes_AS_STRING(path_bytes), flags, map_size, map_offset, &map);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
      pykvik_raise_as(rc, PYKVIK_OPEN_WORDS(rc));
    } else {
      kvik_mmap_free(self->map); /* __init__ called again on the same object */
      self->map = map;
    }
  }
  Py_DECREF(path_bytes);
  return rc < 0 ? -1 : 0;
}

static void mmap_dealloc(MmapObject *self) {
  if (self->map) {
    Py_BEGIN_ALLOW_THREADS
    kvik_mmap_free(self->map);
    Py_END_ALLOW_THREADS
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static kvik_mmap *open_map(MmapObject *self) {
  if (self->map && !kvik_mmap_closed(self->map)) return self->map;
  PyErr_SetString(PyExc_ValueError, "I/O operation on closed mapping");
  return NULL;
}

static PyObject *mmap_close(MmapObject *self, PyObject *unused) {
  (void)unused;
  if (self->map && !kvik_mmap_closed(self->map)) {
    Py_BEGIN_ALLOW_THREADS
    kvik_mmap_close(self->map); /* waits for reads in flight */
    Py_END_ALLOW_THREADS
  }
  Py_RETURN_NONE;
}

static PyObject *mmap_closed(MmapObject *self, PyObject *unused) {
  (void)unused;
  return PyBool_FromLong(!self->map || kvik_mmap_closed(self->map));
}

/* The mapping while open, else NULL: a closed mapping's sizes read 0, as kvikio's do. */
static kvik_mmap *open_or_null(MmapObject *self) {
  return self->map && !kvik_mmap_closed(self->map) ? self->map : NULL;
}

static PyObject *mmap_file_size(MmapObject *self, PyObject *unused) {
  (void)unused;
  kvik_mmap *map = open_or_null(self);
  return PyLong_FromLongLong(map ? kvik_mmap_file_size(map) : 0);
}

static PyObject *mmap_initial_map_size(MmapObject *self, PyObject *unused) {
  (void)unused;
  kvik_mmap *map = open_or_null(self);
  return PyLong_FromSize_t(map ? kvik_mmap_map_size(map) : 0);
}

static PyObject *mmap_initial_map_offset(MmapObject *self, PyObject *unused) {
  (void)unused;
  kvik_mmap *map = open_or_null(self);
  return PyLong_FromLongLong(map ? kvik_mmap_map_offset(map) : 0);
}

/* One read's arguments: (buf, size=None, offset=0[, task_size=None]). */
typedef struct {
  kvik_mmap *map;
  pykvik_buffer buf;
  size_t size;
  int64_t offset;
  size_t task_size;
} read_args;

/* `size` defaults to the rest of the mapped range from `offset`, and must fit the buffer. */
static const char *const read_keywords[] = {"buf", "size", "offset", NULL};
static const char *const pread_keywords[] = {"buf", "size", "offset", "task_size", NULL};

static int parse_read_args(MmapObject *self, PyObject *args, PyObject *kwargs, const char *format,
                           const char *const *keywords, read_args *a) {
  PyObject *buf_obj, *size_obj = NULL, *offset_obj = NULL, *task_obj = NULL;
  memset(a, 0, sizeof *a);
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, PYKVIK_KEYWORDS(keywords), &buf_obj,
                                   &size_obj, &offset_obj, &task_obj))
    return -1;
  if (!(a->map = open_or_null(self))) {
    /* kvikio's RuntimeError and words, so that code written for it still catches this */
    PyErr_SetString(pykvik_error_type, "Cannot read from a closed MmapHandle (kvik.Mmap)");
    return -1;
  }
  if (pykvik_offset_arg(offset_obj, "offset", &a->offset) < 0 ||
      pykvik_size_arg(task_obj, "task_size", 0, &a->task_size) < 0)
    return -1;
  int64_t map_start = kvik_mmap_map_offset(a->map);
  int64_t map_end = map_start + (int64_t)kvik_mmap_map_size(a->map);
  size_t rest = a->offset < map_end ? (size_t)(map_end - a->offset) : 0;
  if (pykvik_size_arg(size_obj, "size", rest, &a->size) < 0) return -1;
  /* kvik_mmap_read refuses these too (-EINVAL); checked here to raise kvikio's IndexError */
  if (a->offset > kvik_mmap_file_size(a->map)) {
    PyErr_Format(PyExc_IndexError, "Offset is past the end of file: offset %lld, file size %lld",
                 (long long)a->offset, (long long)kvik_mmap_file_size(a->map));
    return -1;
  }
  if (a->offset < map_start || a->offset > map_end || a->size > (uint64_t)(map_end - a->offset)) {
    PyErr_Format(PyExc_IndexError,
                 "Read is out of bound: %zu bytes at %lld lie outside the mapped range "
                 "[%lld, %lld)",
                 a->size, (long long)a->offset, (long long)map_start, (long long)map_end);
    return -1;
  }
  if (pykvik_buffer_get(buf_obj, 1, &a->buf) < 0) return -1;
  if (a->size > a->buf.nbytes) {
    PyErr_Format(PyExc_ValueError, "size %zu is larger than the buffer (%zu bytes)", a->size, a->buf.nbytes);
    pykvik_buffer_release(&a->buf);
    return -1;
  }
  return 0;
}

static PyObject *mmap_read(MmapObject *self, PyObject *args, PyObject *kwargs) {
  read_args a;
  if (parse_read_args(self, args, kwargs, "O|OO:read", read_keywords, &a) < 0) return NULL;
  ssize_t n;
  Py_BEGIN_ALLOW_THREADS
  n = kvik_mmap_read(a.map, a.buf.ptr, a.size, a.offset);
  Py_END_ALLOW_THREADS
  pykvik_buffer_release(&a.buf);
  return n < 0 ? pykvik_raise((int)n) : PyLong_FromSsize_t(n);
}

static int start_pread(void *ctx, kvik_future **future) {
  read_args *a = ctx;
  return kvik_mmap_pread(a->map, a->buf.ptr, a->size, a->offset, a->task_size, future);
}

static PyObject *mmap_pread(MmapObject *self, PyObject *args, PyObject *kwargs) {
  read_args a;
  if (parse_read_args(self, args, kwargs, "O|OOO:pread", pread_keywords, &a) < 0) return NULL;
  return pykvik_future_start((PyObject *)self, &a.buf, 0, start_pread, &a);
}

static PyObject *mmap_enter(MmapObject *self, PyObject *unused) {
  (void)unused;
  return open_map(self) ? Py_NewRef(self) : NULL;
}

static PyObject *mmap_exit(MmapObject *self, PyObject *args) {
  (void)args;
  return mmap_close(self, NULL);
}

static PyMethodDef mmap_methods[] = {
    {"close", (PyCFunction)mmap_close, METH_NOARGS, "close()\n\nUnmap, after the reads in flight. Twice does nothing."},
    {"closed", (PyCFunction)mmap_closed, METH_NOARGS, "closed() -> bool"},
    {"file_size", (PyCFunction)mmap_file_size, METH_NOARGS,
     "file_size() -> int\n\nThe file's size when opened; 0 once closed."},
    {"nbytes", (PyCFunction)mmap_file_size, METH_NOARGS, "nbytes() -> int\n\nThe same as file_size()."},
    {"initial_map_size", (PyCFunction)mmap_initial_map_size, METH_NOARGS, "initial_map_size() -> int"},
    {"initial_map_offset", (PyCFunction)mmap_initial_map_offset, METH_NOARGS, "initial_map_offset() -> int"},
    {"read", (PyCFunction)(void (*)(void))mmap_read, METH_VARARGS | METH_KEYWORDS,
     "read(buf, size=None, offset=0) -> int\n\nCopy `size` bytes at file offset `offset` (default: up to the end "
     "of the mapped range) into host or device memory. The range must lie in the mapped range."},
    {"pread", (PyCFunction)(void (*)(void))mmap_pread, METH_VARARGS | METH_KEYWORDS,
     "pread(buf, size=None, offset=0, task_size=None) -> IOFuture\n\nread() in parallel, without waiting."},
    {"__enter__", (PyCFunction)mmap_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)mmap_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject MmapType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvik.Mmap",
    .tp_basicsize = sizeof(MmapObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Mmap(file_path, flags='r', initial_map_size=None, initial_map_offset=0, mode=0o644, map_flags=None)"
              "\n\nA read-only mapping of a file, read into host or device memory by copying from the page cache.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)mmap_init,
    .tp_dealloc = (destructor)mmap_dealloc,
    .tp_methods = mmap_methods,
};

int pykvik_mmap_type_init(PyObject *module) {
  if (PyType_Ready(&MmapType) < 0) return -1;
  Py_INCREF(&MmapType);
  if (PyModule_AddObject(module, "Mmap", (PyObject *)&MmapType) < 0) {
    Py_DECREF(&MmapType);
    return -1;
  }
  return 0;
}
