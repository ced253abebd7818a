/* kvik._lib.RemoteHandle: a remote object read over HTTP(S), S3 or WebHDFS (kvik_remote), the base
 * of kvik.RemoteFile, which adds kvikio's constructors (open_http, open_s3, ...) in Python. */
#include "pykvik.h"

#include <errno.h>

typedef struct {
  PyObject_HEAD
  kvik_remote *remote;
  int closed; /* close() ran: the handle stays until dealloc, so that repr can still name its URL */
} RemoteObject;

/* kvik_remote_kind's names, as kvik.RemoteEndpointType spells them. */
static const char *const kind_names[] = {
    [KVIK_REMOTE_AUTO] = "AUTO",
    [KVIK_REMOTE_S3] = "S3",
    [KVIK_REMOTE_S3_PUBLIC] = "S3_PUBLIC",
    [KVIK_REMOTE_S3_PRESIGNED] = "S3_PRESIGNED_URL",
    [KVIK_REMOTE_WEBHDFS] = "WEBHDFS",
    [KVIK_REMOTE_HTTP] = "HTTP",
};

/* ---- opening ----------------------------------------------------------------------------- */

/* The option strings of kvik_remote_options, held as UTF-8 bytes while the handle opens. */
enum { OPT_KEY_ID, OPT_SECRET, OPT_TOKEN, OPT_REGION, OPT_ENDPOINT, OPT_WEBHDFS_USER, OPT_COUNT };

/* A str option (None: not given) into `*text`, which points into `*holder` (a new reference). */
static int string_option(PyObject *obj, const char *what, PyObject **holder, const char **text) {
  *holder = NULL;
  *text = NULL;
  if (!obj || obj == Py_None) return 0;
  if (!PyUnicode_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s must be a str or None, not %.100s", what, Py_TYPE(obj)->tp_name);
    return -1;
  }
  *holder = PyUnicode_AsUTF8String(obj);
  if (!*holder) return -1;
  *text = PyBytes_AS_STRING(*holder);
  if ((size_t)PyBytes_GET_SIZE(*holder) != strlen(*text)) {
    PyErr_Format(PyExc_ValueError, "%s must not contain NUL characters", what);
    Py_CLEAR(*holder);
    return -1;
  }
  return 0;
}

static int kind_arg(PyObject *obj, kvik_remote_kind *kind) {
  if (!obj) return *kind = KVIK_REMOTE_AUTO, 0;
  PyObject *index = PyNumber_Index(obj); /* RemoteEndpointType is an IntEnum */
  if (!index) return -1;
  long value = PyLong_AsLong(index);
  Py_DECREF(index);
  if (value == -1 && PyErr_Occurred()) return -1;
  if (value < KVIK_REMOTE_AUTO || value > KVIK_REMOTE_HTTP) {
    PyErr_Format(pykvik_invalid_argument_type, "remote_endpoint_type must be 0 to %d (a RemoteEndpointType), not %ld",
                 KVIK_REMOTE_HTTP, value);
    return -1;
  }
  *kind = (kvik_remote_kind)value;
  return 0;
}

/* RemoteHandle(url, remote_endpoint_type=0, nbytes=None, *, aws_access_key_id=None,
 *              aws_secret_access_key=None, aws_session_token=None, aws_region=None,
 *              aws_endpoint_url=None, webhdfs_user=None) */
static int remote_init(RemoteObject *self, PyObject *args, PyObject *kwargs) {
  static const char *const keywords[] = {"url", "remote_endpoint_type", "nbytes",
                                         "aws_access_key_id", "aws_secret_access_key",
                                         "aws_session_token", "aws_region", "aws_endpoint_url",
                                         "webhdfs_user", NULL};
  static const char *const option_names[OPT_COUNT] = {"aws_access_key_id", "aws_secret_access_key",
                                                      "aws_session_token", "aws_region", "aws_endpoint_url",
                                                      "webhdfs_user"};
  PyObject *url_obj, *kind_obj = NULL, *nbytes_obj = NULL, *option_objs[OPT_COUNT] = {NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OO$OOOOOO:RemoteHandle",
                                   PYKVIK_KEYWORDS(keywords), &url_obj, &kind_obj, &nbytes_obj,
                                   &option_objs[0], &option_objs[1], &option_objs[2],
                                   &option_objs[3], &option_objs[4], &option_objs[5]))
    return -1;
  kvik_remote_options options;
  kvik_remote_options_init(&options);
  PyObject *url_holder = NULL, *holders[OPT_COUNT] = {NULL};
  const char *url, *texts[OPT_COUNT] = {NULL};
  size_t nbytes;
  int rc = -1;
  if (string_option(url_obj, "url", &url_holder, &url) < 0) goto out;
  if (!url) {
    PyErr_SetString(PyExc_TypeError, "url must be a str, not None");
    goto out;
  }
  if (kind_arg(kind_obj, &options.kind) < 0 || pykvik_size_arg(nbytes_obj, "nbytes", (size_t)-1, &nbytes) < 0)
    goto out;
  for (int i = 0; i < OPT_COUNT; i++)
    if (string_option(option_objs[i], option_names[i], &holders[i], &texts[i]) < 0) goto out;
  options.size = nbytes == (size_t)-1 ? -1 : (int64_t)nbytes;
  options.aws_access_key_id = texts[OPT_KEY_ID];
  options.aws_secret_access_key = texts[OPT_SECRET];
  options.aws_session_token = texts[OPT_TOKEN];
  options.aws_region = texts[OPT_REGION];
  options.aws_endpoint_url = texts[OPT_ENDPOINT];
  options.webhdfs_user = texts[OPT_WEBHDFS_USER];
  kvik_remote *remote = NULL;
  /* Opening asks the server for the size (unless nbytes is given): a round trip, or several with
   * retries, so without the GIL. */
  Py_BEGIN_ALLOW_THREADS
  rc = kvik_remote_open(url, &options, &remote);
  Py_END_ALLOW_THREADS
  if (rc < 0) {
    rc = pykvik_raise_int(rc);
    goto out;
  }
  kvik_remote_free(self->remote); /* __init__ called again on the same object */
  self->remote = remote;
  self->closed = 0;
out:
  Py_XDECREF(url_holder);
  for (int i = 0; i < OPT_COUNT; i++) Py_XDECREF(holders[i]);
  return rc < 0 ? -1 : 0;
}

static void remote_dealloc(RemoteObject *self) {
  if (self->remote) {
    Py_BEGIN_ALLOW_THREADS
    kvik_remote_free(self->remote); /* futures hold the object, so no read is in flight here */
    Py_END_ALLOW_THREADS
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The handle, or NULL with ValueError for a closed (or never opened) one, as CuFile does. */
static kvik_remote *open_remote(RemoteObject *self) {
  if (self->remote && !self->closed) return self->remote;
  PyErr_SetString(PyExc_ValueError, "I/O operation on closed file");
  return NULL;
}

static PyObject *remote_close(RemoteObject *self, PyObject *unused) {
  (void)unused;
  if (!self->remote || self->closed) Py_RETURN_NONE;
  self->closed = 1;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kvik_remote_close(self->remote); /* waits for reads in flight */
  Py_END_ALLOW_THREADS
  if (rc < 0 && rc != -EBADF) return pykvik_raise(rc);
  Py_RETURN_NONE;
}

static PyObject *remote_closed(RemoteObject *self, void *unused) {
  (void)unused;
  return PyBool_FromLong(!self->remote || self->closed);
}

static PyObject *remote_nbytes(RemoteObject *self, PyObject *unused) {
  (void)unused;
  kvik_remote *remote = open_remote(self);
  if (!remote) return NULL;
  int64_t size = kvik_remote_size(remote);
  return size < 0 ? pykvik_raise((int)size) : PyLong_FromLongLong(size);
}

static PyObject *remote_url(RemoteObject *self, PyObject *unused) {
  (void)unused;
  kvik_remote *remote = open_remote(self);
  return remote ? PyUnicode_FromString(kvik_remote_url(remote)) : NULL;
}

/* The resolved kind as an int; kvik.RemoteFile makes it a RemoteEndpointType. */
static PyObject *remote_kind(RemoteObject *self, PyObject *unused) {
  (void)unused;
  kvik_remote *remote = open_remote(self);
  if (!remote) return NULL;
  int kind = kvik_remote_kind_of(remote);
  return kind < 0 ? pykvik_raise(kind) : PyLong_FromLong(kind);
}

static PyObject *remote_enter(RemoteObject *self, PyObject *unused) {
  (void)unused;
  return open_remote(self) ? Py_NewRef(self) : NULL;
}

static PyObject *remote_exit(RemoteObject *self, PyObject *args) {
  (void)args;
  return remote_close(self, NULL);
}

/* <kvik.RemoteFile HTTP 'http://host/path' nbytes=N>: the URL as kvik_remote_url gives it, without
 * user name, password or query string, so that no credential reaches a log. */
static PyObject *remote_repr(RemoteObject *self) {
  PyObject *type_name = PyObject_GetAttrString((PyObject *)Py_TYPE(self), "__name__");
  if (!type_name) return NULL;
  PyObject *repr;
  if (!self->remote) {
    repr = PyUnicode_FromFormat("<kvik.%U (not open)>", type_name);
  } else {
    int kind = kvik_remote_kind_of(self->remote);
    repr = PyUnicode_FromFormat("<kvik.%U %s '%s' nbytes=%lld%s>", type_name,
                                kind >= 0 && kind <= KVIK_REMOTE_HTTP ? kind_names[kind] : "?",
                                kvik_remote_url(self->remote), (long long)kvik_remote_size(self->remote),
                                self->closed ? " closed" : "");
  }
  Py_DECREF(type_name);
  return repr;
}

/* ---- reads ------------------------------------------------------------------------------- */

/* The arguments of read and pread, checked against the buffer. */
typedef struct {
  kvik_remote *remote;
  pykvik_buffer buf;
  size_t size;
  int64_t file_offset;
  size_t task_size;
} read_args;

/* A remote object's size is known, so a read past its end is the caller's error: ValueError, as
 * kvikio raises (with its words), where kvik_remote_read keeps pread(2)'s short count. */
static void check_within_object(const read_args *a) {
  int64_t nbytes = kvik_remote_size(a->remote);
  if (a->size > (uint64_t)INT64_MAX || a->file_offset > nbytes - (int64_t)a->size)
    PyErr_Format(PyExc_ValueError, "cannot read %lld+%zu bytes into a %lld bytes file (%s)",
                 (long long)a->file_offset, a->size, (long long)nbytes, kvik_remote_url(a->remote));
}

/* (buf, size=None, file_offset=0, task_size=None); size defaults to the whole buffer. */
static int parse_read_args(RemoteObject *self, PyObject *args, PyObject *kwargs, const char *format, read_args *a) {
  static const char *const keywords[] = {"buf", "size", "file_offset", "task_size", NULL};
  PyObject *buf_obj, *size_obj = NULL, *offset_obj = NULL, *task_obj = NULL;
  memset(a, 0, sizeof *a);
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, PYKVIK_KEYWORDS(keywords), &buf_obj,
                                   &size_obj, &offset_obj, &task_obj) ||
      pykvik_offset_arg(offset_obj, "file_offset", &a->file_offset) < 0 ||
      pykvik_size_arg(task_obj, "task_size", 0, &a->task_size) < 0)
    return -1;
  if (task_obj && task_obj != Py_None && a->task_size == 0) {
    PyErr_SetString(PyExc_ValueError, "task_size must be positive");
    return -1;
  }
  if (!(a->remote = open_remote(self)) || pykvik_buffer_get(buf_obj, 1, &a->buf) < 0) return -1;
  if (pykvik_size_arg(size_obj, "size", a->buf.nbytes, &a->size) == 0 && a->size > a->buf.nbytes)
    PyErr_Format(PyExc_ValueError, "size %zu is larger than the buffer (%zu bytes)", a->size, a->buf.nbytes);
  else if (!PyErr_Occurred())
    check_within_object(a);
  if (PyErr_Occurred()) {
    pykvik_buffer_release(&a->buf);
    return -1;
  }
  return 0;
}

static int start_pread(void *ctx, kvik_future **future) {
  read_args *a = ctx;
  return kvik_remote_pread(a->remote, a->buf.ptr, a->size, a->file_offset, a->task_size, future);
}

static PyObject *remote_pread(RemoteObject *self, PyObject *args, PyObject *kwargs) {
  read_args a;
  if (parse_read_args(self, args, kwargs, "O|OOO:pread", &a) < 0) return NULL;
  /* The future holds the buffer and this object until the read is done. */
  return pykvik_future_start((PyObject *)self, &a.buf, 0, start_pread, &a);
}

/* read() waits in the same call, without a Python future. Its error is raised before the kvik
 * future is freed, since kvik_last_error() holds only until the next kvik call. */
static PyObject *remote_read(RemoteObject *self, PyObject *args, PyObject *kwargs) {
  read_args a;
  if (parse_read_args(self, args, kwargs, "O|OOO:read", &a) < 0) return NULL;
  ssize_t n;
  kvik_future *future = NULL;
  Py_BEGIN_ALLOW_THREADS
  if (a.task_size == 0) {
    n = kvik_remote_read(a.remote, a.buf.ptr, a.size, a.file_offset);
  } else {
    n = kvik_remote_pread(a.remote, a.buf.ptr, a.size, a.file_offset, a.task_size, &future);
    if (n == 0) n = kvik_future_wait(future);
  }
  Py_END_ALLOW_THREADS
  PyObject *result = n < 0 ? pykvik_raise((int)n) : PyLong_FromSsize_t(n);
  kvik_future_free(future); /* done: returns at once */
  pykvik_buffer_release(&a.buf);
  return result;
}

#define READ_DOC(name, returns, text) name "(buf, size=None, file_offset=0, task_size=None) -> " returns "\n\n" text

static PyMethodDef remote_methods[] = {
    {"close", (PyCFunction)remote_close, METH_NOARGS,
     "close()\n\nClose the handle, after the reads still in flight on it. Closing twice does nothing."},
    {"nbytes", (PyCFunction)remote_nbytes, METH_NOARGS,
     "nbytes() -> int\n\nThe object's size in bytes, learnt when it was opened (no request)."},
    {"url", (PyCFunction)remote_url, METH_NOARGS,
     "url() -> str\n\nThe URL requests go to, without user name, password or query string."},
    {"_kind", (PyCFunction)remote_kind, METH_NOARGS,
     "_kind() -> int\n\nThe kind of server it was opened as, AUTO resolved (a RemoteEndpointType's value)."},
    {"pread", (PyCFunction)(void (*)(void))remote_pread, METH_VARARGS | METH_KEYWORDS,
     READ_DOC("pread", "IOFuture",
              "Start reading `size` bytes (default: all of buf) at `file_offset` into host or device memory, "
              "in parallel range requests of `task_size` bytes. The future's get() gives the bytes "
              "read. A range past the end of the object raises ValueError.")},
    {"read", (PyCFunction)(void (*)(void))remote_read, METH_VARARGS | METH_KEYWORDS,
     READ_DOC("read", "int", "pread(...).get(): read and return the number of bytes read.")},
    {"__enter__", (PyCFunction)remote_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)remote_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef remote_getset[] = {
    {"closed", (getter)remote_closed, NULL, "True once the handle is closed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RemoteHandleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kvik._lib.RemoteHandle",
    .tp_basicsize = sizeof(RemoteObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "RemoteHandle(url, remote_endpoint_type=0, nbytes=None, *, aws_access_key_id=None, "
              "aws_secret_access_key=None, aws_session_token=None, aws_region=None, aws_endpoint_url=None, "
              "webhdfs_user=None)\n\nA remote object (kvik_remote_open); kvik.RemoteFile builds on it.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)remote_init,
    .tp_dealloc = (destructor)remote_dealloc,
    .tp_repr = (reprfunc)remote_repr,
    .tp_methods = remote_methods,
    .tp_getset = remote_getset,
};

/* ---- module functions -------------------------------------------------------------------- */

/* remote_supported() -> (bool, str): whether libcurl could be loaded, and its version or why not. */
static PyObject *py_remote_supported(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  char detail[256] = "";
  int supported = kvik_remote_supported(detail, sizeof detail);
  return Py_BuildValue("(Ns)", PyBool_FromLong(supported), detail);
}

PyMethodDef pykvik_remote_methods[] = {
    {"remote_supported", py_remote_supported, METH_NOARGS,
     "remote_supported() -> (bool, str): whether remote files work in this process (libcurl), with libcurl's "
     "version, or why not."},
    {NULL, NULL, 0, NULL},
};

/* ---- retries ------------------------------------------------------------------------------ */

/* kvikio prints a notice on stderr before each retry of a remote request, and code written for
 * it may look for it there: libkvik prints nothing, so the package prints it through libkvik's
 * retry hook, in kvikio's words. It writes to the process's stderr (fd 2), as kvikio's C++ does,
 * from the pool thread that retries, which holds no GIL. */
static void print_retry_notice(const kvik_retry_info *info, void *arg) {
  (void)arg;
  char cause[96];
  if (info->cause == -ETIMEDOUT) snprintf(cause, sizeof cause, "Timeout error");
  else if (info->status) snprintf(cause, sizeof cause, "Got HTTP code %d", info->status);
  else if (info->cause == -ECONNREFUSED || info->cause == -ECONNRESET)
    snprintf(cause, sizeof cause, "Transport failed before an HTTP response");
  else snprintf(cause, sizeof cause, "%s", kvik_strerror(info->cause));
  fprintf(stderr, "KvikIO: %s. Retrying after %lldms (attempt %u of %u).\n", cause,
          (long long)info->delay_ms, info->attempt, info->max_attempts);
  fflush(stderr);
}

int pykvik_remote_type_init(PyObject *module) {
  kvik_remote_set_retry_hook(print_retry_notice, NULL);
  if (PyType_Ready(&RemoteHandleType) < 0) return -1;
  Py_INCREF(&RemoteHandleType);
  if (PyModule_AddObject(module, "RemoteHandle", (PyObject *)&RemoteHandleType) < 0) {
    Py_DECREF(&RemoteHandleType);
    return -1;
  }
  return 0;
}
