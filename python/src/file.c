/* kvik.CuFile and its futures, IOFuture and IOFutureStream: kvikio.cufile on kvik_file. */
#include "pykvik.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>

/* ---- futures ----------------------------------------------------------------------------- */

/* A request in flight. It holds the buffer and its file (or mapping) until the request is done, so that
 * neither goes away under the IO even if the caller drops its own references. */
typedef struct {
  PyObject_HEAD
  kvik_future *future;
  pykvik_buffer buf;
  PyObject *owner;
} FutureObject;

static PyTypeObject IOFutureType;
static PyTypeObject IOFutureStreamType;

/* Wait for the request without the GIL; once it is done the buffer is no longer needed. */
static ssize_t future_wait(FutureObject *self) {
  ssize_t result;
  Py_BEGIN_ALLOW_THREADS
  result = kvik_future_wait(self->future);
  Py_END_ALLOW_THREADS
  pykvik_buffer_release(&self->buf);
  return result;
}

static PyObject *future_get(FutureObject *self, PyObject *unused) {
  (void)unused;
  ssize_t result = future_wait(self);
  return result < 0 ? pykvik_raise((int)result) : PyLong_FromSsize_t(result);
}

static PyObject *future_done(FutureObject *self, PyObject *unused) {
  (void)unused;
  return PyBool_FromLong(kvik_future_done(self->future));
}

static void future_dealloc(FutureObject *self) {
  if (self->future) {
    /* Freeing waits for a request still running: its buffer is released only after. */
    Py_BEGIN_ALLOW_THREADS
    kvik_future_free(self->future);
    Py_END_ALLOW_THREADS
  }
  pykvik_buffer_release(&self->buf);
  Py_XDECREF(self->owner);
  PyObject_Free(self);
}

PyObject *pykvik_future_start(PyObject *owner, pykvik_buffer *buf, int stream_ordered, pykvik_start_fn start,
                              void *ctx) {
  return pykvik_future_start_as(owner, buf, stream_ordered, start, ctx, NULL);
}

PyObject *pykvik_future_start_as(PyObject *owner, pykvik_buffer *buf, int stream_ordered,
                                 pykvik_start_fn start, void *ctx, const char *words) {
  FutureObject *self = PyObject_New(FutureObject, stream_ordered ? &IOFutureStreamType : &IOFutureType);
  if (!self) {
    pykvik_buffer_release(buf);
    return NULL;
  }
  self->future = NULL;
  self->buf = *buf;
  self->owner = Py_NewRef(owner);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = start(ctx, &self->future);
  Py_END_ALLOW_THREADS
  if (rc < 0) {
    pykvik_raise_as(rc, words);
    Py_DECREF(self);
    return NULL;
  }
  return (PyObject *)self;
}

static PyMethodDef io_future_methods[] = {
    {"get", (PyCFunction)future_get, METH_NOARGS,
     "get() -> int\n\nWait for the IO (without holding the GIL) and return the number of bytes "
     "transferred; raise its error if it failed."},
    {"done", (PyCFunction)future_done, METH_NOARGS, "done() -> bool\n\nWhether the IO has finished. Never blocks."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef io_future_stream_methods[] = {
    {"check_bytes_done", (PyCFunction)future_get, METH_NOARGS,
     "check_bytes_done() -> int\n\nWait until the stream has run the IO and return the number of bytes "
     "transferred; raise its error if it failed."},
    {"done", (PyCFunction)future_done, METH_NOARGS, "done() -> bool\n\nWhether the IO has finished. Never blocks."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject IOFutureType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvik.IOFuture",
    .tp_basicsize = sizeof(FutureObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The result of CuFile.pread/pwrite and Mmap.pread, to come. get() waits for it.",
    .tp_dealloc = (destructor)future_dealloc,
    .tp_methods = io_future_methods,
};

static PyTypeObject IOFutureStreamType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvik.IOFutureStream",
    .tp_basicsize = sizeof(FutureObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The result of CuFile.raw_read_async/raw_write_async, in the order of a CUDA stream.",
    .tp_dealloc = (destructor)future_dealloc,
    .tp_methods = io_future_stream_methods,
};

/* ---- CuFile ------------------------------------------------------------------------------ */

typedef struct {
  PyObject_HEAD
  kvik_file *file;
  PyObject *path; /* as given, for repr() */
  PyObject *flags;
  int access; /* O_RDONLY, O_WRONLY or O_RDWR, as opened: asked once, not at every IO call */
} CuFileObject;

static int cufile_init(CuFileObject *self, PyObject *args, PyObject *kwargs) {
  static const char *const keywords[] = {"file", "flags", NULL};
  PyObject *path_bytes = NULL;
  const char *flags = "r";
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|s:CuFile", PYKVIK_KEYWORDS(keywords),
                                   PyUnicode_FSConverter, &path_bytes, &flags))
    return -1;
  kvik_file *file = NULL;
  const char *path = PyBytes_AS_STRING(path_bytes);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kvik_file_open(path, flags, 0644, &file);
  Py_END_ALLOW_THREADS
  if (rc < 0) {
    Py_DECREF(path_bytes);
    pykvik_raise_as(rc, PYKVIK_OPEN_WORDS(rc));
    return -1;
  }
  kvik_file_free(self->file); /* __init__ called again on the same object */
  self->file = file;
  int open_flags = kvik_file_open_flags(file);
  self->access = open_flags < 0 ? O_RDWR : open_flags & O_ACCMODE;
  Py_XSETREF(self->path, PyUnicode_DecodeFSDefault(path));
  Py_XSETREF(self->flags, PyUnicode_FromString(flags));
  Py_DECREF(path_bytes);
  return self->path && self->flags ? 0 : -1;
}

static void cufile_dealloc(CuFileObject *self) {
  if (self->file) {
    Py_BEGIN_ALLOW_THREADS
    kvik_file_free(self->file);
    Py_END_ALLOW_THREADS
  }
  Py_XDECREF(self->path);
  Py_XDECREF(self->flags);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The handle, or NULL with ValueError for a closed (or never opened) file, as Python's io does. */
static kvik_file *open_file(CuFileObject *self) {
  if (self->file && !kvik_file_closed(self->file)) return self->file;
  PyErr_SetString(PyExc_ValueError, "I/O operation on closed file");
  return NULL;
}

static PyObject *cufile_close(CuFileObject *self, PyObject *unused) {
  (void)unused;
  if (!self->file || kvik_file_closed(self->file)) Py_RETURN_NONE;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kvik_file_close(self->file); /* waits for IO in flight */
  Py_END_ALLOW_THREADS
  if (rc < 0 && rc != -EBADF) return pykvik_raise(rc);
  Py_RETURN_NONE;
}

static PyObject *cufile_closed(CuFileObject *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(!self->file || kvik_file_closed(self->file));
}

static PyObject *int_or_raise(int64_t value) {
  return value < 0 ? pykvik_raise((int)value) : PyLong_FromLongLong(value);
}

static PyObject *cufile_fileno(CuFileObject *self, PyObject *unused) {
  (void)unused;
  kvik_file *file = open_file(self);
  return file ? int_or_raise(kvik_file_fd(file)) : NULL;
}

static PyObject *cufile_open_flags(CuFileObject *self, PyObject *unused) {
  (void)unused;
  kvik_file *file = open_file(self);
  return file ? int_or_raise(kvik_file_open_flags(file)) : NULL;
}

static PyObject *cufile_nbytes(CuFileObject *self, PyObject *unused) {
  (void)unused;
  kvik_file *file = open_file(self);
  return file ? int_or_raise(kvik_file_size(file)) : NULL;
}

/* None: -1 (the setting); else the truth of the value, 0 or 1; -2 where bool() raised. */
static int direct_choice(PyObject *value) {
  if (value == Py_None) return -1;
  int truth = PyObject_IsTrue(value);
  return truth < 0 ? -2 : truth;
}

static PyObject *cufile_set_direct_io(CuFileObject *self, PyObject *args, PyObject *kwargs) {
  static const char *const keywords[] = {"reads", "writes", NULL};
  PyObject *reads = Py_None, *writes = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:set_direct_io", PYKVIK_KEYWORDS(keywords),
                                   &reads, &writes))
    return NULL;
  int r = direct_choice(reads), w = direct_choice(writes);
  if (r == -2 || w == -2) return NULL;
  kvik_file *file = open_file(self);
  if (!file) return NULL;
  int rc = kvik_file_set_direct_io(file, r, w);
  return rc < 0 ? pykvik_raise(rc) : Py_NewRef(Py_None);
}

static PyObject *cufile_enter(CuFileObject *self, PyObject *unused) {
  (void)unused;
  return open_file(self) ? Py_NewRef(self) : NULL;
}

static PyObject *cufile_exit(CuFileObject *self, PyObject *args) {
  (void)args;
  return cufile_close(self, NULL);
}

static PyObject *cufile_repr(CuFileObject *self) {
  return PyUnicode_FromFormat("<kvik.CuFile %R mode=%R%s>", self->path ? self->path : Py_None,
                              self->flags ? self->flags : Py_None,
                              !self->file || kvik_file_closed(self->file) ? " closed" : "");
}

/* ---- the IO methods ---------------------------------------------------------------------- */

/* The arguments every IO method shares, checked against the buffer. */
typedef struct {
  kvik_file *file;
  pykvik_buffer buf;
  size_t size;
  int64_t file_offset;
  int64_t dev_offset; /* raw IO: where in the buffer */
  size_t task_size;
  const char *words; /* kvikio's words for the failure the call will meet, or NULL */
} io_args;

/* IO that the handle's mode forbids fails in libkvik with -EBADF ("file not opened for writing");
 * kvikio says "Operation not permitted", which its users match: put before libkvik's message. */
static const char *mode_words(const CuFileObject *self, int reading) {
  return self->access == (reading ? O_WRONLY : O_RDONLY) ? "Operation not permitted" : NULL;
}

/* Acquire the buffer and check `size` (default: what the buffer holds past dev_offset) fits. */
static int io_args_finish(CuFileObject *self, PyObject *buf_obj, PyObject *size_obj, int writable, io_args *a) {
  if (!(a->file = open_file(self))) return -1;
  a->words = mode_words(self, writable);
  if (pykvik_buffer_get(buf_obj, writable, &a->buf) < 0) return -1;
  if ((size_t)a->dev_offset > a->buf.nbytes) {
    PyErr_Format(PyExc_ValueError, "dev_offset %lld is past the end of the buffer (%zu bytes)",
                 (long long)a->dev_offset, a->buf.nbytes);
  } else {
    size_t room = a->buf.nbytes - (size_t)a->dev_offset;
    if (pykvik_size_arg(size_obj, "size", room, &a->size) == 0 && a->size > room)
      PyErr_Format(PyExc_ValueError, "size %zu is larger than the buffer (%zu bytes%s)", a->size, room,
                   a->dev_offset ? " past dev_offset" : "");
  }
  if (PyErr_Occurred()) {
    pykvik_buffer_release(&a->buf);
    return -1;
  }
  return 0;
}

/* (buf, size=None, file_offset=0, task_size=None): pread, pwrite, read, write. */
static int parse_parallel_args(CuFileObject *self, PyObject *args, PyObject *kwargs, const char *format, int writable,
                               io_args *a) {
  static const char *const keywords[] = {"buf", "size", "file_offset", "task_size", NULL};
  PyObject *buf_obj, *size_obj = NULL, *offset_obj = NULL, *task_obj = NULL;
  memset(a, 0, sizeof *a);
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, PYKVIK_KEYWORDS(keywords), &buf_obj,
                                   &size_obj, &offset_obj, &task_obj))
    return -1;
  if (pykvik_offset_arg(offset_obj, "file_offset", &a->file_offset) < 0 ||
      pykvik_size_arg(task_obj, "task_size", 0, &a->task_size) < 0)
    return -1;
  if (task_obj && task_obj != Py_None && a->task_size == 0) {
    PyErr_SetString(PyExc_ValueError, "task_size must be positive");
    return -1;
  }
  return io_args_finish(self, buf_obj, size_obj, writable, a);
}

/* What one IO call starts: the arguments and which kvik function takes them. */
typedef struct {
  io_args a;
  int is_write;
  void *stream;
} io_start;

static int start_parallel_io(void *ctx, kvik_future **future) {
  io_start *s = ctx;
  return s->is_write ? kvik_file_pwrite(s->a.file, s->a.buf.ptr, s->a.size, s->a.file_offset, s->a.task_size, future)
                     : kvik_file_pread(s->a.file, s->a.buf.ptr, s->a.size, s->a.file_offset, s->a.task_size, future);
}

static PyObject *start_parallel(CuFileObject *self, PyObject *args, PyObject *kwargs, const char *format,
                                int is_write) {
  io_start s = {.is_write = is_write};
  if (parse_parallel_args(self, args, kwargs, format, !is_write, &s.a) < 0) return NULL;
  return pykvik_future_start_as((PyObject *)self, &s.a.buf, 0, start_parallel_io, &s, s.a.words);
}

static PyObject *cufile_pread(CuFileObject *self, PyObject *args, PyObject *kwargs) {
  return start_parallel(self, args, kwargs, "O|OOO:pread", 0);
}

static PyObject *cufile_pwrite(CuFileObject *self, PyObject *args, PyObject *kwargs) {
  return start_parallel(self, args, kwargs, "O|OOO:pwrite", 1);
}

static PyObject *blocking(PyObject *future) {
  if (!future) return NULL;
  PyObject *result = future_get((FutureObject *)future, NULL);
  Py_DECREF(future);
  return result;
}

/* read and write: kvik_file_read/_write without the GIL where no task size is asked for (theirs is
 * the setting's), which serve a small request on this thread with its system calls alone; else
 * pread/pwrite's future, waited for. */
static PyObject *blocking_io(CuFileObject *self, PyObject *args, PyObject *kwargs,
                             const char *format, int is_write) {
  io_start s = {.is_write = is_write};
  if (parse_parallel_args(self, args, kwargs, format, !is_write, &s.a) < 0) return NULL;
  if (s.a.task_size)
    return blocking(pykvik_future_start_as((PyObject *)self, &s.a.buf, 0, start_parallel_io, &s,
                                           s.a.words));
  ssize_t n;
  Py_BEGIN_ALLOW_THREADS
  n = is_write ? kvik_file_write(s.a.file, s.a.buf.ptr, s.a.size, s.a.file_offset)
               : kvik_file_read(s.a.file, s.a.buf.ptr, s.a.size, s.a.file_offset);
  Py_END_ALLOW_THREADS
  pykvik_buffer_release(&s.a.buf);
  return n < 0 ? pykvik_raise_as((int)n, s.a.words) : PyLong_FromSsize_t(n);
}

static PyObject *cufile_read(CuFileObject *self, PyObject *args, PyObject *kwargs) {
  return blocking_io(self, args, kwargs, "O|OOO:read", 0);
}

static PyObject *cufile_write(CuFileObject *self, PyObject *args, PyObject *kwargs) {
  return blocking_io(self, args, kwargs, "O|OOO:write", 1);
}

/* (buf, size=None, file_offset=0, dev_offset=0): raw_read and raw_write. */
static PyObject *raw_io(CuFileObject *self, PyObject *args, PyObject *kwargs, const char *format, int is_write) {
  static const char *const keywords[] = {"buf", "size", "file_offset", "dev_offset", NULL};
  PyObject *buf_obj, *size_obj = NULL, *offset_obj = NULL, *dev_obj = NULL;
  io_args a;
  memset(&a, 0, sizeof a);
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, PYKVIK_KEYWORDS(keywords), &buf_obj,
                                   &size_obj, &offset_obj, &dev_obj) ||
      pykvik_offset_arg(offset_obj, "file_offset", &a.file_offset) < 0 ||
      pykvik_offset_arg(dev_obj, "dev_offset", &a.dev_offset) < 0 ||
      io_args_finish(self, buf_obj, size_obj, !is_write, &a) < 0)
    return NULL;
  ssize_t n;
  Py_BEGIN_ALLOW_THREADS
  n = is_write ? kvik_file_raw_write(a.file, a.buf.ptr, a.size, a.file_offset, a.dev_offset)
               : kvik_file_raw_read(a.file, a.buf.ptr, a.size, a.file_offset, a.dev_offset);
  Py_END_ALLOW_THREADS
  /* kvikio's words for host memory, which raw IO refuses */
  if (!a.words && n == -EINVAL && !a.buf.device) a.words = "Non-CUDA buffers not supported";
  PyObject *result = n < 0 ? pykvik_raise_as((int)n, a.words) : PyLong_FromSsize_t(n);
  pykvik_buffer_release(&a.buf);
  return result;
}

static PyObject *cufile_raw_read(CuFileObject *self, PyObject *args, PyObject *kwargs) {
  return raw_io(self, args, kwargs, "O|OOO:raw_read", 0);
}

static PyObject *cufile_raw_write(CuFileObject *self, PyObject *args, PyObject *kwargs) {
  return raw_io(self, args, kwargs, "O|OOO:raw_write", 1);
}

/* A CUDA stream handle from an int, None (the default stream), or an object that carries one:
 * __cuda_stream__() (the CUDA stream protocol), .ptr (CuPy) or .cuda_stream (PyTorch). */
static int stream_arg(PyObject *obj, void **stream) {
  PyObject *handle = NULL;
  if (obj == Py_None) return *stream = NULL, 0;
  if (PyLong_Check(obj)) {
    handle = Py_NewRef(obj);
  } else if (PyObject_HasAttrString(obj, "__cuda_stream__")) {
    PyObject *pair = PyObject_CallMethod(obj, "__cuda_stream__", NULL);
    if (pair && PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2) handle = Py_NewRef(PyTuple_GET_ITEM(pair, 1));
    Py_XDECREF(pair);
  } else if (PyObject_HasAttrString(obj, "ptr")) {
    handle = PyObject_GetAttrString(obj, "ptr");
  } else if (PyObject_HasAttrString(obj, "cuda_stream")) {
    handle = PyObject_GetAttrString(obj, "cuda_stream");
  }
  if (!handle || !PyLong_Check(handle)) {
    if (!PyErr_Occurred())
      PyErr_Format(PyExc_TypeError,
                   "stream must be an int, None, or a CUDA stream object (CuPy, PyTorch, cuda.core), not %.100s",
                   Py_TYPE(obj)->tp_name);
    Py_XDECREF(handle);
    return -1;
  }
  *stream = PyLong_AsVoidPtr(handle);
  Py_DECREF(handle);
  return PyErr_Occurred() ? -1 : 0;
}

static int start_stream_io(void *ctx, kvik_future **future) {
  io_start *s = ctx;
  char *at = s->a.buf.ptr + s->a.dev_offset;
  return s->is_write ? kvik_file_write_async(s->a.file, at, s->a.size, s->a.file_offset, s->stream, future)
                     : kvik_file_read_async(s->a.file, at, s->a.size, s->a.file_offset, s->stream, future);
}

/* (buf, stream, size=None, file_offset=0, dev_offset=0): raw_read_async and raw_write_async. */
static PyObject *raw_io_async(CuFileObject *self, PyObject *args, PyObject *kwargs, const char *format,
                              int is_write) {
  static const char *const keywords[] = {"buf", "stream", "size", "file_offset", "dev_offset",
                                         NULL};
  PyObject *buf_obj, *stream_obj, *size_obj = NULL, *offset_obj = NULL, *dev_obj = NULL;
  io_args a;
  void *stream;
  memset(&a, 0, sizeof a);
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, PYKVIK_KEYWORDS(keywords), &buf_obj,
                                   &stream_obj, &size_obj, &offset_obj, &dev_obj) ||
      stream_arg(stream_obj, &stream) < 0 || pykvik_offset_arg(offset_obj, "file_offset", &a.file_offset) < 0 ||
      pykvik_offset_arg(dev_obj, "dev_offset", &a.dev_offset) < 0 ||
      io_args_finish(self, buf_obj, size_obj, !is_write, &a) < 0)
    return NULL;
  io_start s = {.a = a, .is_write = is_write, .stream = stream};
  return pykvik_future_start_as((PyObject *)self, &s.a.buf, 1, start_stream_io, &s, s.a.words);
}

static PyObject *cufile_raw_read_async(CuFileObject *self, PyObject *args, PyObject *kwargs) {
  return raw_io_async(self, args, kwargs, "OO|OOO:raw_read_async", 0);
}

static PyObject *cufile_raw_write_async(CuFileObject *self, PyObject *args, PyObject *kwargs) {
  return raw_io_async(self, args, kwargs, "OO|OOO:raw_write_async", 1);
}

static PyObject *cufile_backend(CuFileObject *self, PyObject *unused) {
  (void)unused;
  kvik_file *file = open_file(self);
  if (!file) return NULL;
  char why[512];
  int backend = kvik_file_backend(file, why, sizeof why);
  if (backend < 0) return pykvik_raise(backend);
  return Py_BuildValue("(ss)", backend == KVIK_BACKEND_CUFILE ? "cufile" : "posix", why);
}

/* Whether the file system holding the file takes O_DIRECT, as kvikio's handle tells by its
 * O_DIRECT descriptor: kvik_direct_io_supported() on the file's directory. A directory where the
 * probe cannot make its temporary file (EACCES, EROFS, ENOSPC ...) answers False rather than
 * raising, as kvikio's never raises for an open file. */
static PyObject *cufile_is_direct_io_supported(CuFileObject *self, PyObject *unused) {
  (void)unused;
  PyObject *path = NULL;
  if (!open_file(self) || !PyUnicode_FSConverter(self->path, &path)) return NULL;
  char *dir = PyMem_Malloc((size_t)PyBytes_GET_SIZE(path) + 1);
  if (!dir) {
    Py_DECREF(path);
    return PyErr_NoMemory();
  }
  memcpy(dir, PyBytes_AS_STRING(path), (size_t)PyBytes_GET_SIZE(path) + 1);
  Py_DECREF(path);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kvik_direct_io_supported(dirname(dir)); /* dirname() may write into dir */
  Py_END_ALLOW_THREADS
  PyMem_Free(dir);
  return PyBool_FromLong(rc > 0);
}

#define IO_DOC(name, text) name "(buf, size=None, file_offset=0, task_size=None)\n\n" text
#define RAW_DOC(name, text) name "(buf, size=None, file_offset=0, dev_offset=0) -> int\n\n" text
#define ASYNC_DOC(name, text) name "(buf, stream, size=None, file_offset=0, dev_offset=0) -> IOFutureStream\n\n" text

static PyMethodDef cufile_methods[] = {
    {"close", (PyCFunction)cufile_close, METH_NOARGS,
     "close()\n\nClose the file, after the IO still in flight on it. Closing twice does nothing."},
    {"fileno", (PyCFunction)cufile_fileno, METH_NOARGS, "fileno() -> int\n\nThe file descriptor (owned by the file)."},
    {"open_flags", (PyCFunction)cufile_open_flags, METH_NOARGS,
     "open_flags() -> int\n\nThe descriptor's flags (see open(2)), with O_APPEND for append files."},
    {"nbytes", (PyCFunction)cufile_nbytes, METH_NOARGS, "nbytes() -> int\n\nThe file's size in bytes."},
    {"is_direct_io_supported", (PyCFunction)cufile_is_direct_io_supported, METH_NOARGS,
     "is_direct_io_supported() -> bool\n\nWhether the file's file system takes O_DIRECT."},
    {"set_direct_io", (PyCFunction)(void (*)(void))cufile_set_direct_io, METH_VARARGS | METH_KEYWORDS,
     "set_direct_io(reads=None, writes=None)\n\nO_DIRECT for this file's reads (writes) alone, whatever "
     "defaults' auto_direct_io_read (_write) says: True as that setting's on does (of a read, only what "
     "the page cache does not hold), False as its off does, None follows the setting again."},
    {"backend", (PyCFunction)cufile_backend, METH_NOARGS,
     "backend() -> (str, str)\n\nWhich path serves device memory, 'cufile' or 'posix', and why."},
    {"pread", (PyCFunction)(void (*)(void))cufile_pread, METH_VARARGS | METH_KEYWORDS,
     IO_DOC("pread", "Start reading `size` bytes (default: all of buf) at `file_offset` into host or device "
                     "memory, in parallel tasks of `task_size` bytes. Returns an IOFuture whose get() gives "
                     "the bytes read, fewer only at the end of the file.")},
    {"pwrite", (PyCFunction)(void (*)(void))cufile_pwrite, METH_VARARGS | METH_KEYWORDS,
     IO_DOC("pwrite", "Start writing `size` bytes of buf at `file_offset` (at the end for append files), in "
                      "parallel. Returns an IOFuture.")},
    {"read", (PyCFunction)(void (*)(void))cufile_read, METH_VARARGS | METH_KEYWORDS,
     IO_DOC("read", "pread(...).get(): read and return the number of bytes read.")},
    {"write", (PyCFunction)(void (*)(void))cufile_write, METH_VARARGS | METH_KEYWORDS,
     IO_DOC("write", "pwrite(...).get(): write and return the number of bytes written.")},
    {"raw_read", (PyCFunction)(void (*)(void))cufile_raw_read, METH_VARARGS | METH_KEYWORDS,
     RAW_DOC("raw_read", "Read into device memory at buf + dev_offset in one transfer on this thread "
                         "(cuFileRead on a cuFile file). Host memory is refused.")},
    {"raw_write", (PyCFunction)(void (*)(void))cufile_raw_write, METH_VARARGS | METH_KEYWORDS,
     RAW_DOC("raw_write", "Write device memory from buf + dev_offset in one transfer on this thread.")},
    {"raw_read_async", (PyCFunction)(void (*)(void))cufile_raw_read_async, METH_VARARGS | METH_KEYWORDS,
     ASYNC_DOC("raw_read_async", "Read in the order of CUDA `stream`: after the work queued on it before, and "
                                 "before the work queued after. Returns at once.")},
    {"raw_write_async", (PyCFunction)(void (*)(void))cufile_raw_write_async, METH_VARARGS | METH_KEYWORDS,
     ASYNC_DOC("raw_write_async", "Write in the order of CUDA `stream`. Returns at once.")},
    {"__enter__", (PyCFunction)cufile_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)cufile_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef cufile_getset[] = {
    {"closed", (getter)cufile_closed, NULL, "True once the file is closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject CuFileType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvik.CuFile",
    .tp_basicsize = sizeof(CuFileObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "CuFile(file, flags='r')\n\nA file for parallel IO between storage and host or GPU memory. `flags` is "
              "'r', 'r+', 'w', 'w+', 'a' or 'a+' (append: every write goes to the end of the file).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)cufile_init,
    .tp_dealloc = (destructor)cufile_dealloc,
    .tp_repr = (reprfunc)cufile_repr,
    .tp_methods = cufile_methods,
    .tp_getset = cufile_getset,
};

/* ---- stream registration ------------------------------------------------------------- */

/* stream_register(stream, flags) and stream_deregister(stream): kvikio.stream's calls, on
 * kvik_cufile_stream_register(), which does nothing where cuFile is not in use. */
static PyObject *py_stream_register(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *stream_obj;
  unsigned flags;
  void *stream;
  if (!PyArg_ParseTuple(args, "OI:stream_register", &stream_obj, &flags) ||
      stream_arg(stream_obj, &stream) < 0)
    return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kvik_cufile_stream_register(stream, flags);
  Py_END_ALLOW_THREADS
  return rc < 0 ? pykvik_raise(rc) : Py_NewRef(Py_None);
}

static PyObject *py_stream_deregister(PyObject *self, PyObject *stream_obj) {
  (void)self;
  void *stream;
  if (stream_arg(stream_obj, &stream) < 0) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kvik_cufile_stream_deregister(stream);
  Py_END_ALLOW_THREADS
  return rc < 0 ? pykvik_raise(rc) : Py_NewRef(Py_None);
}

static PyMethodDef stream_register_methods[] = {
    {"stream_register", py_stream_register, METH_VARARGS,
     "stream_register(stream, flags): register CUDA `stream` (an int, or a CuPy, PyTorch or "
     "cuda.core stream) with cuFile; `flags` are cuFile's CU_FILE_STREAM_* bits."},
    {"stream_deregister", py_stream_deregister, METH_O,
     "stream_deregister(stream): undo stream_register(stream)."},
    {NULL, NULL, 0, NULL},
};

static int add_type(PyObject *module, PyTypeObject *type, const char *name) {
  if (PyType_Ready(type) < 0) return -1;
  Py_INCREF(type);
  if (PyModule_AddObject(module, name, (PyObject *)type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

int pykvik_is_cufile(PyObject *obj) { return PyObject_TypeCheck(obj, &CuFileType); }

kvik_file *pykvik_cufile_handle(PyObject *obj) {
  if (!PyObject_TypeCheck(obj, &CuFileType)) {
    PyErr_Format(PyExc_TypeError, "expected a kvik.CuFile, not %.100s", Py_TYPE(obj)->tp_name);
    return NULL;
  }
  return open_file((CuFileObject *)obj);
}

int pykvik_file_types_init(PyObject *module) {
  if (add_type(module, &CuFileType, "CuFile") < 0 || add_type(module, &IOFutureType, "IOFuture") < 0 ||
      add_type(module, &IOFutureStreamType, "IOFutureStream") < 0 ||
      PyModule_AddFunctions(module, stream_register_methods) < 0)
    return -1;
  return 0;
}
