/* safetensors files (kvik.h, "Model weights"): the header parsed by Jansson (jansson.h) and
 * checked as python/kvik/safetensors.py checks it, the tensors read through the file's handle on
 * the thread pool. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "file.h"
#include "jansson.h"
#include "sys.h"

#define MAX_HEADER ((uint64_t)100000000) /* safetensors' own limit on the header's length */

/* safetensors' dtypes: bits of one element, and elements packed into one byte-aligned item of
 * the last dimension (F4: two to a byte). */
static const struct dtype {
  const char *name;
  unsigned bits, packed;
} dtypes[] = {
    {"BOOL", 8, 1},    {"F4", 4, 2},          {"F6_E2M3", 6, 1},     {"F6_E3M2", 6, 1},
    {"U8", 8, 1},      {"I8", 8, 1},          {"F8_E5M2", 8, 1},     {"F8_E4M3", 8, 1},
    {"F8_E8M0", 8, 1}, {"F8_E4M3FNUZ", 8, 1}, {"F8_E5M2FNUZ", 8, 1}, {"I16", 16, 1},
    {"U16", 16, 1},    {"F16", 16, 1},        {"BF16", 16, 1},       {"I32", 32, 1},
    {"U32", 32, 1},    {"F32", 32, 1},        {"C64", 64, 1},        {"F64", 64, 1},
    {"I64", 64, 1},    {"U64", 64, 1},
};

static const struct dtype *dtype_named(const char *name) {
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (strcmp(dtypes[i].name, name) == 0) return &dtypes[i];
  return NULL;
}

typedef struct tensor {
  char *name;
  const struct dtype *dtype;
  unsigned ndim;
  int64_t *shape;
  uint64_t begin, end; /* in the data section */
} tensor;

struct kvik_safetensors {
  kvik_file *file;
  char *path;
  uint64_t data_start, data_size;
  size_t count, nmeta;
  tensor *tensors; /* sorted by range */
  char **meta;     /* key, value, key, value ... */
};

/* ---- checking the header ---------------------------------------------------------------- */

/* What a parse needs: the API, the handle being built, and the message of the first problem. */
typedef struct parse {
  const kvik__jansson_api *js;
  kvik_safetensors *st;
  char why[512];
} parse;

static int bad(parse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(parse *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->why, sizeof p->why, fmt, ap);
  va_end(ap);
  return -EBADMSG;
}

static const char *kind_of(const kvik__json *value) {
  static const char *const kinds[] = {"an object", "an array",  "a string",  "a number",
                                      "a number",  "a boolean", "a boolean", "null"};
  return kinds[value->type];
}

static int is_count(const kvik__jansson_api *js, const kvik__json *value) {
  return value && value->type == KVIK__JSON_INTEGER && js->integer_value(value) >= 0;
}

/* "[2, 3]" of a shape, cut to `len`. */
static const char *shape_text(const tensor *t, char *text, size_t len) {
  size_t at = (size_t)snprintf(text, len, "[");
  for (unsigned d = 0; d < t->ndim && at < len; d++)
    at += (size_t)snprintf(text + at, len - at, "%s%" PRId64, d ? ", " : "", t->shape[d]);
  if (at < len) snprintf(text + at, len - at, "]");
  return text;
}

/* The shape of `entry`, a JSON array of non-negative integers, into t. */
static int take_shape(parse *p, const kvik__json *shape, tensor *t) {
  const kvik__jansson_api *js = p->js;
  int ok = shape && shape->type == KVIK__JSON_ARRAY;
  t->ndim = ok ? (unsigned)js->array_size(shape) : 0;
  for (unsigned d = 0; ok && d < t->ndim; d++) ok = is_count(js, js->array_get(shape, d));
  if (!ok) return bad(p, "tensor '%s': shape is not a list of non-negative ints", t->name);
  if (t->ndim && !(t->shape = kvik__calloc(t->ndim, sizeof *t->shape))) return -ENOMEM;
  for (unsigned d = 0; d < t->ndim; d++) t->shape[d] = js->integer_value(js->array_get(shape, d));
  return 0;
}

/* The tensor's bytes by its dtype and shape: 0 with *bytes, or the problem. */
static int shape_bytes(parse *p, const tensor *t, uint64_t *bytes) {
  char text[128];
  uint64_t bits = t->dtype->bits;
  int whole = t->ndim == 0 || t->shape[t->ndim - 1] % t->dtype->packed == 0;
  for (unsigned d = 0; d < t->ndim; d++)
    if (__builtin_mul_overflow(bits, (uint64_t)t->shape[d], &bits))
      return bad(p, "tensor '%s': shape %s of %s is larger than any file", t->name,
                 shape_text(t, text, sizeof text), t->dtype->name);
  if (bits % 8 || !whole)
    return bad(p, "tensor '%s': shape %s of %s is not a whole number of bytes", t->name,
               shape_text(t, text, sizeof text), t->dtype->name);
  *bytes = bits / 8;
  return 0;
}

/* One tensor's entry of the header, into t. */
static int take_tensor(parse *p, const char *name, const kvik__json *entry, tensor *t) {
  const kvik__jansson_api *js = p->js;
  if (!(t->name = kvik__strdup(name))) return -ENOMEM;
  if (entry->type != KVIK__JSON_OBJECT)
    return bad(p, "tensor '%s': its entry is %s, not an object", name, kind_of(entry));
  const kvik__json *dtype = js->object_get(entry, "dtype"), *shape = js->object_get(entry, "shape"),
                   *offsets = js->object_get(entry, "data_offsets");
  if (!dtype || !shape || !offsets)
    return bad(p, "tensor '%s': its entry lacks %s%s%s", name, dtype ? "" : "dtype ",
               shape ? "" : "shape ", offsets ? "" : "data_offsets");
  const char *dtype_name = dtype->type == KVIK__JSON_STRING ? js->string_value(dtype) : NULL;
  if (!dtype_name || !(t->dtype = dtype_named(dtype_name)))
    return bad(p, "tensor '%s': unknown dtype %s", name, dtype_name ? dtype_name : kind_of(dtype));
  int rc = take_shape(p, shape, t);
  if (rc < 0) return rc;
  if (offsets->type != KVIK__JSON_ARRAY || js->array_size(offsets) != 2 ||
      !is_count(js, js->array_get(offsets, 0)) || !is_count(js, js->array_get(offsets, 1)) ||
      js->integer_value(js->array_get(offsets, 0)) > js->integer_value(js->array_get(offsets, 1)))
    return bad(p, "tensor '%s': data_offsets are not two ints 0 <= begin <= end", name);
  t->begin = (uint64_t)js->integer_value(js->array_get(offsets, 0));
  t->end = (uint64_t)js->integer_value(js->array_get(offsets, 1));
  uint64_t bytes = 0;
  if ((rc = shape_bytes(p, t, &bytes)) < 0) return rc;
  char text[128];
  if (bytes != t->end - t->begin)
    return bad(p,
               "tensor '%s': shape %s of %s is %" PRIu64 " bytes, but its data_offsets [%" PRIu64
               ", %" PRIu64 "] hold %" PRIu64,
               name, shape_text(t, text, sizeof text), t->dtype->name, bytes, t->begin, t->end,
               t->end - t->begin);
  return 0;
}

/* "__metadata__": an object of strings, into st->meta. */
static int take_metadata(parse *p, kvik__json *metadata) {
  const kvik__jansson_api *js = p->js;
  kvik_safetensors *st = p->st;
  if (metadata->type != KVIK__JSON_OBJECT)
    return bad(p, "__metadata__ is not an object of strings");
  size_t n = 0;
  for (void *it = js->object_iter(metadata); it; it = js->object_iter_next(metadata, it)) n++;
  if (n && !(st->meta = kvik__calloc(2 * n, sizeof *st->meta))) return -ENOMEM;
  for (void *it = js->object_iter(metadata); it; it = js->object_iter_next(metadata, it)) {
    const kvik__json *value = js->object_iter_value(it);
    if (value->type != KVIK__JSON_STRING) return bad(p, "__metadata__ is not an object of strings");
    char **pair = &st->meta[2 * st->nmeta++];
    if (!(pair[0] = kvik__strdup(js->object_iter_key(it))) ||
        !(pair[1] = kvik__strdup(js->string_value(value))))
      return -ENOMEM;
  }
  return 0;
}

static int by_range(const void *a, const void *b) {
  const tensor *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* The ranges, sorted, tile the data section: no overlap, no gap, nothing past its end. */
static int check_ranges(parse *p) {
  kvik_safetensors *st = p->st;
  if (st->count) qsort(st->tensors, st->count, sizeof *st->tensors, by_range);
  uint64_t at = 0;
  for (size_t i = 0; i < st->count; i++) {
    const tensor *t = &st->tensors[i];
    if (t->end > st->data_size)
      return bad(p,
                 "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] run past the data (%" PRIu64
                 " bytes)",
                 t->name, t->begin, t->end, st->data_size);
    if (t->begin < at)
      return bad(p, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] overlap tensor '%s'",
                 t->name, t->begin, t->end, st->tensors[i - 1].name);
    if (t->begin > at)
      return bad(p, "a gap in the data: bytes [%" PRIu64 ", %" PRIu64 ") belong to no tensor", at,
                 t->begin);
    at = t->end;
  }
  if (at != st->data_size)
    return bad(p, "a gap in the data: bytes [%" PRIu64 ", %" PRIu64 ") belong to no tensor", at,
               st->data_size);
  return 0;
}

/* The parsed header, a JSON object, into the handle. */
static int take_header(parse *p, kvik__json *header) {
  const kvik__jansson_api *js = p->js;
  kvik_safetensors *st = p->st;
  if (header->type != KVIK__JSON_OBJECT)
    return bad(p, "the header is %s, not a JSON object", kind_of(header));
  size_t n = 0;
  for (void *it = js->object_iter(header); it; it = js->object_iter_next(header, it)) n++;
  if (n && !(st->tensors = kvik__calloc(n, sizeof *st->tensors))) return -ENOMEM;
  for (void *it = js->object_iter(header); it; it = js->object_iter_next(header, it)) {
    const char *key = js->object_iter_key(it);
    kvik__json *value = js->object_iter_value(it);
    int rc = strcmp(key, "__metadata__") == 0
                 ? take_metadata(p, value)
                 : take_tensor(p, key, value, &st->tensors[st->count++]);
    if (rc < 0) return rc;
  }
  return check_ranges(p);
}

/* Read the header length and the header, and parse it. */
static int read_header(parse *p) {
  kvik_safetensors *st = p->st;
  int64_t size = kvik_file_size(st->file);
  if (size < 0) return (int)size;
  if (size < 8)
    return bad(p, "truncated: %" PRId64 " bytes, less than the 8-byte header length", size);
  unsigned char head[8];
  ssize_t got = kvik_file_read(st->file, head, sizeof head, 0);
  if (got < 0) return (int)got;
  if (got < 8) return bad(p, "the file shrank to %zd bytes while it was read", got);
  uint64_t length = 0;
  for (int i = 7; i >= 0; i--) length = length << 8 | head[i];
  if (length > (uint64_t)size - 8)
    return bad(p,
               "header length %" PRIu64 " is past the end of the file (%" PRId64
               " bytes): truncated, or not a safetensors file",
               length, size);
  if (length > MAX_HEADER)
    return bad(p, "header length %" PRIu64 " is over safetensors' limit of %" PRIu64, length,
               MAX_HEADER);
  st->data_start = 8 + length;
  st->data_size = (uint64_t)size - st->data_start;
  char *text = kvik__malloc(length ? length : 1);
  if (!text) return -ENOMEM;
  got = kvik_file_read(st->file, text, length, 8);
  int rc = got < 0 ? (int)got : 0;
  if (rc == 0 && (uint64_t)got != length)
    rc = bad(p, "the header shrank while it was read: %zd of %" PRIu64 " bytes", got, length);
  kvik__json_error error;
  kvik__json *header =
      rc < 0 ? NULL : p->js->loadb(text, length, KVIK__JSON_REJECT_DUPLICATES, &error);
  free(text);
  if (rc < 0) return rc;
  if (!header)
    return bad(p, "the header is not JSON: %s (line %d, column %d)", error.text, error.line,
               error.column);
  rc = take_header(p, header);
  p->js->delete_(header);
  return rc;
}

/* ---- the handle ---------------------------------------------------------------------------- */

void kvik_safetensors_free(kvik_safetensors *st) {
  if (!st) return;
  for (size_t i = 0; i < st->count; i++) {
    free(st->tensors[i].name);
    free(st->tensors[i].shape);
  }
  for (size_t i = 0; i < 2 * st->nmeta; i++) free(st->meta[i]);
  free(st->tensors);
  free(st->meta);
  free(st->path);
  kvik_file_free(st->file);
  free(st);
}

int kvik_safetensors_open(const char *path, kvik_safetensors **out) {
  static const char fn[] = "kvik_safetensors_open";
  if (out) *out = NULL;
  if (!path || !out) return kvik__fail(-EINVAL, "%s: NULL %s", fn, path ? "output" : "path");
  parse p = {.why = ""};
  if (!(p.js = kvik__jansson_load(p.why, sizeof p.why)))
    return kvik__fail(KVIK_ENOJSON, "%s(\"%s\"): %s", fn, path, p.why);
  if (!(p.st = kvik__calloc(1, sizeof *p.st)) || !(p.st->path = kvik__strdup(path))) {
    kvik_safetensors_free(p.st);
    return kvik__fail(-ENOMEM, "%s(\"%s\"): out of memory", fn, path);
  }
  int rc = kvik_file_open(path, "r", 0, &p.st->file);
  if (rc == 0) rc = read_header(&p);
  if (rc < 0) {
    kvik_safetensors_free(p.st);
    if (p.why[0]) return kvik__fail(rc, "%s(\"%s\"): %s", fn, path, p.why); /* bad() */
    if (rc == -ENOMEM) return kvik__fail(rc, "%s(\"%s\"): out of memory", fn, path);
    return rc; /* a read's or the open's, with its message */
  }
  *out = p.st;
  return 0;
}

size_t kvik_safetensors_count(const kvik_safetensors *st) { return st ? st->count : 0; }

int kvik_safetensors_tensor(const kvik_safetensors *st, size_t index, kvik_tensor_info *info) {
  static const char fn[] = "kvik_safetensors_tensor";
  if (!st || !info || info->struct_size < sizeof info->struct_size)
    return kvik__fail(-EINVAL, "%s: NULL, or struct_size not set", fn);
  if (index >= st->count)
    return kvik__fail(-ENOENT, "%s(\"%s\"): no tensor %zu of %zu", fn, st->path, index, st->count);
  const tensor *t = &st->tensors[index];
  kvik_tensor_info all = {.struct_size = info->struct_size,
                          .name = t->name,
                          .dtype = t->dtype->name,
                          .dtype_bits = t->dtype->bits,
                          .ndim = t->ndim,
                          .shape = t->shape,
                          .file_offset = (int64_t)(st->data_start + t->begin),
                          .nbytes = t->end - t->begin};
  size_t known = info->struct_size < sizeof all ? info->struct_size : sizeof all;
  memcpy(info, &all, known);
  return 0;
}

int64_t kvik_safetensors_find(const kvik_safetensors *st, const char *name) {
  if (!st || !name) return kvik__fail(-EINVAL, "kvik_safetensors_find: NULL");
  for (size_t i = 0; i < st->count; i++)
    if (strcmp(st->tensors[i].name, name) == 0) return (int64_t)i;
  return kvik__fail(-ENOENT, "kvik_safetensors_find(\"%s\"): no tensor '%s'", st->path, name);
}

const char *kvik_safetensors_metadata(const kvik_safetensors *st, const char *key) {
  for (size_t i = 0; st && key && i < st->nmeta; i++)
    if (strcmp(st->meta[2 * i], key) == 0) return st->meta[2 * i + 1];
  return NULL;
}

unsigned kvik_safetensors_dtype_bits(const char *dtype) {
  const struct dtype *d = dtype ? dtype_named(dtype) : NULL;
  return d ? d->bits : 0;
}

kvik_file *kvik_safetensors_file(kvik_safetensors *st) { return st ? st->file : NULL; }

/* ---- reading tensors ----------------------------------------------------------------------- */

/* The result of tensor t's read (`future`, or `rc` where none started), waited for: 0, or its
 * error, whose message `why` keeps where it is the first (*failed 0 before). */
static void tensor_wait(const tensor *t, kvik_future *future, int rc, int *failed, char *why,
                        size_t len) {
  if (future) {
    ssize_t got = kvik_future_wait(future);
    kvik_future_free(future);
    rc = got < 0 ? (int)got : 0;
    if (got >= 0 && (uint64_t)got < t->end - t->begin)
      rc = kvik__fail(-ENODATA, "the file ends %zd bytes into the tensor's %" PRIu64, got,
                      t->end - t->begin);
  }
  if (rc == 0 || *failed) return;
  *failed = rc;
  snprintf(why, len, "tensor '%s': %s", t->name, kvik_last_error());
}

int kvik_safetensors_read(kvik_safetensors *st, const size_t *indices, void *const *dsts,
                          size_t n) {
  static const char fn[] = "kvik_safetensors_read";
  if (!st || (n && (!indices || !dsts))) return kvik__fail(-EINVAL, "%s: NULL", fn);
  for (size_t k = 0; k < n; k++) {
    if (indices[k] >= st->count)
      return kvik__fail(-EINVAL, "%s(\"%s\"): no tensor %zu of %zu", fn, st->path, indices[k],
                        st->count);
    const tensor *t = &st->tensors[indices[k]];
    if (!dsts[k] && t->end > t->begin)
      return kvik__fail(-EINVAL, "%s(\"%s\"): NULL destination of tensor '%s'", fn, st->path,
                        t->name);
  }
  kvik_future **futures = kvik__calloc(n ? n : 1, sizeof *futures);
  int *started = kvik__calloc(n ? n : 1, sizeof *started);
  if (!futures || !started) {
    free(futures);
    free(started);
    return kvik__fail(-ENOMEM, "%s(\"%s\"): out of memory for %zu tensors", fn, st->path, n);
  }
  for (size_t k = 0; k < n; k++) {
    const tensor *t = &st->tensors[indices[k]];
    if (t->end > t->begin)
      started[k] = kvik__file_pread_pooled(st->file, dsts[k], t->end - t->begin,
                                           (int64_t)(st->data_start + t->begin), &futures[k]);
  }
  int failed = 0;
  char why[KVIK_MESSAGE_MAX];
  for (size_t k = 0; k < n; k++)
    tensor_wait(&st->tensors[indices[k]], futures[k], started[k], &failed, why, sizeof why);
  free(futures);
  free(started);
  return failed ? kvik__fail(failed, "%s(\"%s\"): %s", fn, st->path, why) : 0;
}
