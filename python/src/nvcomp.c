/* Batched GPU compression and decompression by nvCOMP (kvik.h, "Compression"): the low level of
 * kvik.nvcomp. Chunks in host memory are staged through device memory here, since nvCOMP works on
 * device memory only; the Python layer picks the capacities. */
#include "pykvik.h"

#include <stdint.h>

#include "cuda.h"
#include "memory.h"

/* The codec numbered `obj` (an int of kvik_codec), checked. Returns 0 or -1. */
static int codec_arg(PyObject *obj, kvik_codec *codec) {
  long value = PyLong_AsLong(obj);
  if (value == -1 && PyErr_Occurred()) return -1;
  if (value < 0 || value >= KVIK_CODEC_COUNT) {
    PyErr_Format(PyExc_ValueError, "unknown codec number %ld", value);
    return -1;
  }
  *codec = (kvik_codec)value;
  return 0;
}

/* codec_names() -> tuple[str, ...]: the codecs' names, indexed by their numbers. */
static PyObject *py_codec_names(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  PyObject *names = PyTuple_New(KVIK_CODEC_COUNT);
  for (int i = 0; names && i < KVIK_CODEC_COUNT; i++) {
    PyObject *name = PyUnicode_FromString(kvik_codec_name((kvik_codec)i));
    if (!name) Py_CLEAR(names);
    else PyTuple_SET_ITEM(names, i, name);
  }
  return names;
}

/* codec_gpu_only(codec) -> bool. */
static PyObject *py_codec_gpu_only(PyObject *self, PyObject *arg) {
  (void)self;
  kvik_codec codec;
  if (codec_arg(arg, &codec) < 0) return NULL;
  int rc = kvik_codec_gpu_only(codec);
  return rc < 0 ? pykvik_raise(rc) : PyBool_FromLong(rc);
}

/* codec_supported(codec) -> bool: loads nvCOMP if not tried yet. */
static PyObject *py_codec_supported(PyObject *self, PyObject *arg) {
  (void)self;
  kvik_codec codec;
  if (codec_arg(arg, &codec) < 0) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kvik_codec_supported(codec);
  Py_END_ALLOW_THREADS
  return rc < 0 ? pykvik_raise(rc) : PyBool_FromLong(rc);
}

/* codec_max_compressed_size(codec, size) -> int. */
static PyObject *py_codec_max_compressed_size(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *codec_obj, *size_obj;
  kvik_codec codec;
  size_t size, out;
  if (!PyArg_ParseTuple(args, "OO", &codec_obj, &size_obj) || codec_arg(codec_obj, &codec) < 0 ||
      pykvik_size_arg(size_obj, "size", 0, &size) < 0)
    return NULL;
  int rc = kvik_codec_max_compressed_size(codec, size, &out);
  return rc < 0 ? pykvik_raise(rc) : PyLong_FromSize_t(out);
}

/* codec_alignment(codec, compress) -> (input, output). */
static PyObject *py_codec_alignment(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *codec_obj;
  int compress;
  kvik_codec codec;
  size_t input, output;
  if (!PyArg_ParseTuple(args, "Op", &codec_obj, &compress) || codec_arg(codec_obj, &codec) < 0)
    return NULL;
  int rc = kvik_codec_alignment(codec, compress, &input, &output);
  return rc < 0 ? pykvik_raise(rc) : Py_BuildValue("(nn)", (Py_ssize_t)input, (Py_ssize_t)output);
}

/* nvcomp_version() -> int: 6000 for 6.0.0. */
static PyObject *py_nvcomp_version(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = kvik_nvcomp_version();
  Py_END_ALLOW_THREADS
  return rc < 0 ? pykvik_raise(rc) : PyLong_FromLong(rc);
}

/* nvcomp_path() -> str: the file nvCOMP was loaded from. */
static PyObject *py_nvcomp_path(PyObject *self, PyObject *unused) {
  (void)self, (void)unused;
  char path[4096];
  int n;
  Py_BEGIN_ALLOW_THREADS
  n = kvik_nvcomp_path(path, sizeof path);
  Py_END_ALLOW_THREADS
  return n < 0 ? pykvik_raise(n) : PyUnicode_FromString(path);
}

/* ---- nvcomp_run -------------------------------------------------------------------------- */

/* One batch: the chunks' buffers, and what kvik_compress()/kvik_decompress() take. A chunk whose
 * memory came without __cuda_array_interface__ runs from device memory of its own (`staged`). */
typedef struct run {
  kvik_codec codec;
  int compress;
  size_t n;
  pykvik_buffer *src_bufs, *dst_bufs;
  const void **src;
  void **dst;
  size_t *src_sizes, *capacities, *sizes;
  int *statuses;
  CUdeviceptr *staged_src, *staged_dst;
} run;

static void run_free(run *r) {
  for (size_t i = 0; i < r->n; i++) {
    if (r->src_bufs) pykvik_buffer_release(&r->src_bufs[i]);
    if (r->dst_bufs) pykvik_buffer_release(&r->dst_bufs[i]);
  }
  PyMem_Free(r->src_bufs);
  PyMem_Free(r->dst_bufs);
  PyMem_Free(r->src);
  PyMem_Free(r->dst);
  PyMem_Free(r->src_sizes);
  PyMem_Free(r->capacities);
  PyMem_Free(r->sizes);
  PyMem_Free(r->statuses);
  PyMem_Free(r->staged_src);
  PyMem_Free(r->staged_dst);
}

/* Acquire the buffers of the two lists, of equal length. Returns 0 or -1. */
static int run_buffers(run *r, PyObject *srcs, PyObject *dsts) {
  Py_ssize_t n = PySequence_Fast_GET_SIZE(srcs);
  if (PySequence_Fast_GET_SIZE(dsts) != n) {
    PyErr_Format(PyExc_ValueError, "%zd inputs but %zd outputs", n, PySequence_Fast_GET_SIZE(dsts));
    return -1;
  }
  size_t count = (size_t)n ? (size_t)n : 1;
  r->src_bufs = PyMem_Calloc(count, sizeof *r->src_bufs);
  r->dst_bufs = PyMem_Calloc(count, sizeof *r->dst_bufs);
  r->src = PyMem_Calloc(count, sizeof *r->src);
  r->dst = PyMem_Calloc(count, sizeof *r->dst);
  r->src_sizes = PyMem_Calloc(count, sizeof *r->src_sizes);
  r->capacities = PyMem_Calloc(count, sizeof *r->capacities);
  r->sizes = PyMem_Calloc(count, sizeof *r->sizes);
  r->statuses = PyMem_Calloc(count, sizeof *r->statuses);
  r->staged_src = PyMem_Calloc(count, sizeof *r->staged_src);
  r->staged_dst = PyMem_Calloc(count, sizeof *r->staged_dst);
  if (!r->src_bufs || !r->dst_bufs || !r->src || !r->dst || !r->src_sizes || !r->capacities ||
      !r->sizes || !r->statuses || !r->staged_src || !r->staged_dst) {
    PyErr_NoMemory();
    return -1;
  }
  for (size_t i = 0; i < (size_t)n; i++) {
    r->n = i + 1; /* what run_free() releases */
    if (pykvik_buffer_get(PySequence_Fast_GET_ITEM(srcs, (Py_ssize_t)i), 0, &r->src_bufs[i]) < 0 ||
        pykvik_buffer_get(PySequence_Fast_GET_ITEM(dsts, (Py_ssize_t)i), 1, &r->dst_bufs[i]) < 0)
      return -1;
    r->src[i] = r->src_bufs[i].ptr;
    r->src_sizes[i] = r->src_bufs[i].nbytes;
    r->dst[i] = r->dst_bufs[i].ptr;
    r->capacities[i] = r->dst_bufs[i].nbytes;
  }
  r->n = (size_t)n;
  return 0;
}

/* Device memory of `size` bytes (at least 1, so that an empty chunk has a pointer too). */
static int stage_alloc(const kvik__cuda_api *cu, size_t size, CUdeviceptr *d) {
  return kvik__cuda_check(cu->cuMemAlloc(d, size ? size : 1), "kvik.nvcomp", "cuMemAlloc");
}

/* Copy the host inputs to device memory and point the host outputs at device memory, on
 * `stream`, in the current context. */
static int stage_in(run *r, const kvik__cuda_api *cu, CUstream stream) {
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < r->n; i++) {
    if (!r->src_bufs[i].device && (rc = stage_alloc(cu, r->src_sizes[i], &r->staged_src[i])) == 0) {
      r->src[i] = (const void *)(uintptr_t)r->staged_src[i];
      if (r->src_sizes[i])
        rc = kvik__cuda_check(
            cu->cuMemcpyHtoDAsync(r->staged_src[i], r->src_bufs[i].ptr, r->src_sizes[i], stream),
            "kvik.nvcomp", "cuMemcpyHtoDAsync");
    }
    if (rc == 0 && !r->dst_bufs[i].device &&
        (rc = stage_alloc(cu, r->capacities[i], &r->staged_dst[i])) == 0)
      r->dst[i] = (void *)(uintptr_t)r->staged_dst[i];
  }
  return rc;
}

/* Copy what the chunks that succeeded wrote back to their host outputs. */
static int stage_out(run *r, const kvik__cuda_api *cu, CUstream stream) {
  int rc = 0;
  for (size_t i = 0; rc == 0 && i < r->n; i++)
    if (r->staged_dst[i] && r->statuses[i] == 0 && r->sizes[i])
      rc = kvik__cuda_check(
          cu->cuMemcpyDtoHAsync(r->dst_bufs[i].ptr, r->staged_dst[i], r->sizes[i], stream),
          "kvik.nvcomp", "cuMemcpyDtoHAsync");
  return rc;
}

static int call_kvik(run *r) {
  return (r->compress ? kvik_compress : kvik_decompress)(
      r->codec, r->n, r->src, r->src_sizes, r->dst, r->capacities, r->sizes, r->statuses);
}

static int any_host(const run *r) {
  for (size_t i = 0; i < r->n; i++)
    if (!r->src_bufs[i].device || !r->dst_bufs[i].device) return 1;
  return 0;
}

/* The batch, with its host chunks staged, without the GIL. Returns 0 or a kvik code with its
 * message; a chunk's failure leaves the statuses filled. */
static int run_staged(run *r) {
  if (!any_host(r) || r->n == 0) return call_kvik(r);
  const kvik__cuda_api *cu = kvik__cuda("kvik.nvcomp");
  if (!cu) return KVIK_ECUDA_UNAVAILABLE;
  int rc = kvik__context_push_any("kvik.nvcomp", cu);
  if (rc < 0) return rc;
  CUstream stream;
  rc = kvik__cuda_check(cu->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "kvik.nvcomp",
                        "cuStreamCreate");
  if (rc == 0) {
    rc = stage_in(r, cu, stream);
    int synced =
        kvik__cuda_check(cu->cuStreamSynchronize(stream), "kvik.nvcomp", "cuStreamSynchronize");
    if (rc == 0) rc = synced;
    if (rc == 0) rc = call_kvik(r);
    /* The chunks that succeeded come back even where others failed, for the caller to see. */
    int copied = stage_out(r, cu, stream);
    synced =
        kvik__cuda_check(cu->cuStreamSynchronize(stream), "kvik.nvcomp", "cuStreamSynchronize");
    if (rc == 0) rc = copied ? copied : synced;
    cu->cuStreamDestroy(stream);
  }
  for (size_t i = 0; i < r->n; i++) {
    if (r->staged_src[i]) cu->cuMemFree(r->staged_src[i]);
    if (r->staged_dst[i]) cu->cuMemFree(r->staged_dst[i]);
  }
  kvik__context_pop();
  return rc;
}

/* Raise the exception of code `rc`, with `chunk` (the first chunk whose status is not 0, or
 * None) and `statuses` (a list of the n chunks' codes) on it. */
static PyObject *raise_batch(size_t n, const int *codes, int rc) {
  pykvik_raise(rc);
  PyObject *statuses = PyList_New((Py_ssize_t)n);
  PyObject *chunk = NULL;
  for (size_t i = 0; statuses && i < n; i++) {
    PyList_SET_ITEM(statuses, (Py_ssize_t)i, PyLong_FromLong(codes[i]));
    if (!chunk && codes[i]) chunk = PyLong_FromSize_t(i);
  }
  if (!chunk) chunk = Py_NewRef(Py_None);
#if PY_VERSION_HEX >= 0x030C0000
  PyObject *exc = PyErr_GetRaisedException();
  if (statuses && PyObject_SetAttrString(exc, "statuses", statuses) == 0)
    PyObject_SetAttrString(exc, "chunk", chunk);
  PyErr_SetRaisedException(exc);
#else
  PyObject *type, *exc, *traceback;
  PyErr_Fetch(&type, &exc, &traceback);
  PyErr_NormalizeException(&type, &exc, &traceback);
  if (statuses && PyObject_SetAttrString(exc, "statuses", statuses) == 0)
    PyObject_SetAttrString(exc, "chunk", chunk);
  PyErr_Restore(type, exc, traceback);
#endif
  Py_XDECREF(statuses);
  Py_DECREF(chunk);
  return NULL;
}

/* nvcomp_run(codec, compress, srcs, dsts) -> list[int]: the chunks' output sizes. */
static PyObject *py_nvcomp_run(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *codec_obj, *srcs_obj, *dsts_obj, *result = NULL;
  run r = {0};
  if (!PyArg_ParseTuple(args, "OpOO", &codec_obj, &r.compress, &srcs_obj, &dsts_obj) ||
      codec_arg(codec_obj, &r.codec) < 0)
    return NULL;
  PyObject *srcs = PySequence_Fast(srcs_obj, "nvcomp_run() takes a list of inputs");
  PyObject *dsts = srcs ? PySequence_Fast(dsts_obj, "nvcomp_run() takes a list of outputs") : NULL;
  if (dsts && run_buffers(&r, srcs, dsts) == 0) {
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run_staged(&r);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
      raise_batch(r.n, r.statuses, rc);
    } else if ((result = PyList_New((Py_ssize_t)r.n))) {
      for (size_t i = 0; i < r.n; i++)
        PyList_SET_ITEM(result, (Py_ssize_t)i, PyLong_FromSize_t(r.sizes[i]));
    }
  }
  run_free(&r);
  Py_XDECREF(srcs);
  Py_XDECREF(dsts);
  return result;
}

/* ---- read_decompress ---------------------------------------------------------------------- */

/* One fused read: the chunks, and a reference to what each one's file came from: the caller's
 * CuFile, so that no other thread frees its handle meanwhile, or its path as bytes, which
 * kvik_file_read_decompress opens (all of them at once, on its pool) and closes. */
typedef struct fused {
  size_t n;
  kvik_compressed_chunk *chunks;
  PyObject **keep;
  int *statuses;
} fused;

static void fused_free(fused *f) {
  for (size_t i = 0; f->keep && i < f->n; i++) Py_XDECREF(f->keep[i]);
  PyMem_Free(f->chunks);
  PyMem_Free(f->keep);
  PyMem_Free(f->statuses);
}

/* Chunk i's file: a kvik.CuFile's handle, or a path (str, bytes, os.PathLike). */
static int chunk_file(fused *f, size_t i, PyObject *file) {
  kvik_compressed_chunk *c = &f->chunks[i];
  if (pykvik_is_cufile(file)) {
    if (!(c->file = pykvik_cufile_handle(file))) return -1;
    f->keep[i] = Py_NewRef(file);
    return 0;
  }
  if (!PyUnicode_FSConverter(file, &f->keep[i])) {
    PyErr_Format(PyExc_TypeError, "read_decompress(): chunk %zu: expected a kvik.CuFile or a "
                 "path, not %.100s", i, Py_TYPE(file)->tp_name);
    return -1;
  }
  c->path = PyBytes_AS_STRING(f->keep[i]);
  return 0;
}

/* A chunk's compressed size: a positive number, or None for the rest of the file (kvik's 0). */
static int chunk_size(size_t i, PyObject *csize, size_t *size) {
  *size = 0;
  if (csize == Py_None) return 0;
  if (pykvik_size_arg(csize, "compressed_size", 0, size) < 0) return -1;
  if (*size > 0) return 0;
  PyErr_Format(PyExc_ValueError, "read_decompress(): chunk %zu: compressed_size 0 (None: the "
               "rest of the file)", i);
  return -1;
}

/* Chunk i from (CuFile or path, file_offset, compressed_size or None, dst_ptr,
 * uncompressed_size). */
static int fused_chunk(fused *f, size_t i, PyObject *item) {
  PyObject *file, *offset, *csize, *dst, *usize;
  if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "OOOOO", &file, &offset, &csize, &dst,
                                                &usize)) {
    PyErr_Format(PyExc_TypeError, "read_decompress(): chunk %zu is not a tuple (CuFile or path, "
                 "file_offset, compressed_size, dst_ptr, uncompressed_size)", i);
    return -1;
  }
  kvik_compressed_chunk *c = &f->chunks[i];
  if (chunk_file(f, i, file) < 0 || pykvik_offset_arg(offset, "file_offset", &c->file_offset) < 0 ||
      chunk_size(i, csize, &c->compressed_size) < 0 ||
      pykvik_size_arg(usize, "uncompressed_size", 0, &c->uncompressed_size) < 0)
    return -1;
  c->dst = PyLong_AsVoidPtr(dst);
  return c->dst || !PyErr_Occurred() ? 0 : -1;
}

static int fused_chunks(fused *f, PyObject *seq) {
  size_t n = (size_t)PySequence_Fast_GET_SIZE(seq), count = n ? n : 1;
  f->chunks = PyMem_Calloc(count, sizeof *f->chunks);
  f->keep = PyMem_Calloc(count, sizeof *f->keep);
  f->statuses = PyMem_Calloc(count, sizeof *f->statuses);
  if (!f->chunks || !f->keep || !f->statuses) {
    PyErr_NoMemory();
    return -1;
  }
  f->n = n;
  for (size_t i = 0; i < n; i++)
    if (fused_chunk(f, i, PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i)) < 0) return -1;
  return 0;
}

/* read_decompress(codec, chunks) -> list[int]: every chunk's status (all 0). */
static PyObject *py_read_decompress(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *codec_obj, *chunks_obj, *result = NULL;
  kvik_codec codec;
  if (!PyArg_ParseTuple(args, "OO", &codec_obj, &chunks_obj) || codec_arg(codec_obj, &codec) < 0)
    return NULL;
  PyObject *seq = PySequence_Fast(chunks_obj, "read_decompress() takes a list of chunks");
  fused f = {0};
  if (seq && fused_chunks(&f, seq) == 0) {
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = kvik_file_read_decompress(codec, f.chunks, f.n, f.statuses);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
      raise_batch(f.n, f.statuses, rc);
    } else if ((result = PyList_New((Py_ssize_t)f.n))) {
      for (size_t i = 0; i < f.n; i++)
        PyList_SET_ITEM(result, (Py_ssize_t)i, PyLong_FromLong(f.statuses[i]));
    }
  }
  fused_free(&f);
  Py_XDECREF(seq);
  return result;
}

PyMethodDef pykvik_nvcomp_methods[] = {
    {"codec_names", py_codec_names, METH_NOARGS,
     "codec_names() -> tuple[str, ...]: the codecs' names, indexed by kvik's codec numbers."},
    {"codec_gpu_only", py_codec_gpu_only, METH_O,
     "codec_gpu_only(codec: int) -> bool: whether only nvCOMP reads and writes the format."},
    {"codec_supported", py_codec_supported, METH_O,
     "codec_supported(codec: int) -> bool: whether nvCOMP is loaded (loading it if not tried yet) "
     "and offers the codec."},
    {"codec_max_compressed_size", py_codec_max_compressed_size, METH_VARARGS,
     "codec_max_compressed_size(codec, size) -> int: the capacity a compressed chunk of up to "
     "`size` bytes needs."},
    {"codec_alignment", py_codec_alignment, METH_VARARGS,
     "codec_alignment(codec, compress: bool) -> (input, output): the alignments nvCOMP requires."},
    {"nvcomp_version", py_nvcomp_version, METH_NOARGS,
     "nvcomp_version() -> int: nvCOMP's version (6000 for 6.0.0), loading it if not tried yet."},
    {"nvcomp_path", py_nvcomp_path, METH_NOARGS,
     "nvcomp_path() -> str: the file nvCOMP was loaded from."},
    {"nvcomp_run", py_nvcomp_run, METH_VARARGS,
     "nvcomp_run(codec, compress: bool, srcs, dsts) -> list[int]: compress or decompress chunk i "
     "of srcs into dsts[i] (its capacity: its size) and wait; the output sizes. Host buffers are "
     "staged through device memory. A failed chunk raises KvikError with `chunk` and `statuses`."},
    {"read_decompress", py_read_decompress, METH_VARARGS,
     "read_decompress(codec, chunks) -> list[int]: kvik_file_read_decompress. Each chunk is "
     "(CuFile or path, file_offset, compressed_size or None, dst_ptr, uncompressed_size), dst_ptr "
     "device memory, a path opened by the call, None the rest of the file; reads and decodes "
     "every chunk without the GIL, and returns their statuses (all 0). A failed chunk raises "
     "KvikError with `chunk` and `statuses`."},
    {NULL, NULL, 0, NULL},
};
