/* The cuFile part of a batch: device memory on files that cuFile serves, through cuFile's batch
 * API (cuFileBatchIOSetUp, Submit, GetStatus, Cancel, Destroy), in one CUDA context. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "batch.h"
#include "error.h"
#include "file.h"
#include "gds.h"
#include "sys.h"

/* Enter a call on cuFile's batch: the exit gate passed and the batch's context current. It fails
 * for good in a child after fork() (the batch belongs to the parent's cuFile) and once the
 * driver closes at exit. */
static int cufile_begin(kvik_batch *b, const char *fn, const kvik__cufile_api **cf) {
  if (b->cufile.generation != kvik__cufile_generation())
    return kvik__fail(KVIK_ECANCELED_BY_FORK,
                      "%s: the batch's cuFile operations belong to the parent process", fn);
  *cf = kvik__cufile_if_open();
  if (!*cf) return kvik__fail(-KVIK__CU_FILE_DRIVER_CLOSING, "%s: the cuFile driver is closed", fn);
  int rc = kvik__cufile_enter(fn);
  if (rc < 0) return rc;
  rc = kvik__context_push(fn, b->cufile.ctx);
  if (rc < 0) kvik__cufile_leave();
  return rc;
}

static void cufile_end(void) {
  kvik__context_pop();
  kvik__cufile_leave();
}

/* Report every cuFile operation in flight as failed with `code`: used when cuFile cannot be asked
 * about them any more, so that waits and kvik_batch_free() end. */
static void abandon_cufile(kvik_batch *b, int code) {
  for (unsigned id = 0; id < b->max_ops && b->cufile.n > 0; id++) {
    if (!b->slots[id].in_cufile) continue;
    b->cufile.n--;
    kvik__batch_finish(b, id, KVIK_BATCH_FAILED, code);
  }
}

/* The code of a failed cuFile operation: its "negated error" is -errno or -(cuFile status), which
 * are kvik's codes for them too. Anything else is no code cuFile documents: an IO error. */
static ssize_t failure_code(size_t ret) {
  ssize_t code = (ssize_t)ret;
  if ((code < 0 && code > KVIK_ERRNO_BASE) || KVIK_IS_CUFILE_ERROR(code)) return code;
  return -EIO;
}

/* Queue the completion cuFile reported. Entries still waiting or pending are not completions. */
static void take_cufile_event(kvik_batch *b, const kvik__cufile_io_event *ev) {
  uintptr_t id = (uintptr_t)ev->cookie;
  if (id >= b->max_ops || !b->slots[id].in_cufile) return; /* reported before */
  const kvik__batch_slot *s = &b->slots[id];
  kvik_batch_status status = KVIK_BATCH_FAILED;
  ssize_t result;
  if (ev->status == KVIK__CUFILE_COMPLETE && s->write && ev->ret < s->size) {
    result = -EIO; /* a short write is an error, as kvik_file_write has it */
  } else if (ev->status == KVIK__CUFILE_COMPLETE) {
    status = KVIK_BATCH_COMPLETE;
    result = (ssize_t)ev->ret;
  } else if (ev->status == KVIK__CUFILE_CANCELED) {
    status = KVIK_BATCH_CANCELED;
    result = -ECANCELED;
  } else if (ev->status == KVIK__CUFILE_FAILED) {
    result = failure_code(ev->ret);
  } else if (ev->status == KVIK__CUFILE_TIMEOUT) {
    result = -ETIMEDOUT;
  } else if (ev->status == KVIK__CUFILE_INVALID) {
    result = -EINVAL;
  } else {
    return;
  }
  assert(b->cufile.n > 0);
  b->cufile.n--;
  kvik__batch_finish(b, (unsigned)id, status, result);
}

int kvik__batch_cufile_collect(kvik_batch *b, const char *fn, unsigned min_nr, int64_t timeout_ns) {
  const kvik__cufile_api *cf;
  int rc = cufile_begin(b, fn, &cf);
  if (rc < 0) {
    abandon_cufile(b, rc);
    return 0;
  }
  unsigned nr = b->cufile.capacity;
  struct timespec timeout = {(time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000)};
  rc = kvik__cufile_check(
      cf->cuFileBatchIOGetStatus(b->cufile.handle, min_nr, &nr, b->cufile.events, &timeout), fn,
      "cuFileBatchIOGetStatus");
  cufile_end();
  for (unsigned k = 0; rc == 0 && k < nr && k < b->cufile.capacity; k++)
    take_cufile_event(b, &b->cufile.events[k]);
  return rc;
}

/* How many entries cuFile's batch gets: max_ops, or cuFile's own limit (its io_batchsize, 128 by
 * default) where that is lower, as cuFileBatchIOSetUp refuses more. Operations beyond it run on
 * the pool. */
static unsigned cufile_capacity(const kvik__cufile_api *cf, unsigned max_ops) {
  kvik__cufile_props props = {0};
  if (cf->cuFileDriverGetProperties(&props).err != KVIK__CUFILE_SUCCESS ||
      props.max_batch_io_size == 0)
    return max_ops;
  return props.max_batch_io_size < max_ops ? props.max_batch_io_size : max_ops;
}

static int setup_cufile(kvik_batch *b, const char *fn, CUcontext ctx) {
  b->cufile.ctx = ctx;
  b->cufile.generation = kvik__cufile_generation();
  const kvik__cufile_api *cf;
  int rc = cufile_begin(b, fn, &cf);
  if (rc < 0) return rc;
  b->cufile.capacity = cufile_capacity(cf, b->max_ops);
  free(b->cufile.params);
  free(b->cufile.events);
  b->cufile.params = kvik__calloc(b->cufile.capacity, sizeof *b->cufile.params);
  b->cufile.events = kvik__calloc(b->cufile.capacity, sizeof *b->cufile.events);
  if (!b->cufile.params || !b->cufile.events)
    rc = kvik__fail(-ENOMEM, "%s: out of memory for cuFile's batch", fn);
  kvik__cufile_batch_handle handle = NULL;
  if (rc == 0)
    rc = kvik__cufile_check(cf->cuFileBatchIOSetUp(&handle, b->cufile.capacity), fn,
                            "cuFileBatchIOSetUp");
  cufile_end();
  b->cufile.handle = rc == 0 ? handle : NULL;
  return rc;
}

static kvik__cufile_io_params cufile_params(const kvik_batch_op *op, const kvik__batch_route *r,
                                            unsigned id) {
  kvik__cufile_io_params p = {0};
  p.mode = KVIK__CUFILE_BATCH;
  p.u.batch.devPtr_base = r->base;
  p.u.batch.file_offset = (off_t)op->file_offset;
  p.u.batch.devPtr_offset = (off_t)((char *)op->buf - r->base);
  p.u.batch.size = op->size;
  p.fh = r->handle;
  p.opcode = op->opcode == KVIK_BATCH_READ ? KVIK__CUFILE_READ : KVIK__CUFILE_WRITE;
  p.cookie = (void *)(uintptr_t)id;
  return p;
}

/* One cuFileBatchIOSubmit for all of them. */
int kvik__batch_cufile_submit(kvik_batch *b, const char *fn, const kvik_batch_op *ops,
                              kvik__batch_route *r, unsigned count, CUcontext ctx) {
  unsigned n = 0;
  for (unsigned i = 0; i < count; i++) n += r[i].cufile;
  if (n == 0) return 0;
  int rc = b->cufile.handle ? 0 : setup_cufile(b, fn, ctx);
  if (rc < 0) return rc;
  unsigned k = 0;
  for (unsigned i = 0; i < count; i++) {
    if (!r[i].cufile) continue;
    if (b->cufile.n + k == b->cufile.capacity) {
      r[i].cufile = 0;
      continue;
    }
    unsigned id = kvik__batch_take_slot(b, ops[i].cookie);
    b->slots[id].size = ops[i].size;
    b->slots[id].write = ops[i].opcode == KVIK_BATCH_WRITE;
    b->cufile.params[k++] = cufile_params(&ops[i], &r[i], id);
  }
  if (k == 0) return 0;
  const kvik__cufile_api *cf;
  rc = cufile_begin(b, fn, &cf);
  if (rc == 0) {
    rc = kvik__cufile_check(cf->cuFileBatchIOSubmit(b->cufile.handle, k, b->cufile.params, 0), fn,
                            "cuFileBatchIOSubmit");
    cufile_end();
  }
  for (unsigned j = 0; j < k; j++) {
    unsigned id = (unsigned)(uintptr_t)b->cufile.params[j].cookie;
    if (rc < 0) kvik__batch_put_slot(b, id);
    else b->slots[id].in_cufile = 1;
  }
  if (rc == 0) b->cufile.n += k;
  return rc;
}

/* Whether cuFile's batch takes the operation; see batch.h. Writes to append handles never reach
 * here: the kernel places those, one append of the file at a time (see request.c). */
int kvik__batch_cufile_route(const char *who, const kvik_batch_op *op, CUcontext *ctx,
                             kvik__batch_route *r) {
  r->handle = kvik__gds_handle(kvik__file_gds(op->file));
  const kvik__cufile_api *cf = kvik__cufile_if_open();
  if (!r->handle || !cf || !cf->cuFileBatchIOSetUp || !cf->cuFileBatchIOSubmit ||
      !cf->cuFileBatchIOGetStatus || !cf->cuFileBatchIOCancel || !cf->cuFileBatchIODestroy)
    return 0;
  if (*ctx && *ctx != r->ctx) return 0;
  size_t alloc_size;
  int rc = kvik__allocation_range(who, op->buf, &r->base, &alloc_size);
  if (rc < 0) return rc;
  *ctx = r->ctx;
  r->cufile = 1;
  return 0;
}

/* cuFileBatchIOCancel, then every status cuFile gives, so that nothing of cuFile's is in flight on
 * return: canceled operations report CANCELED, those that finished first their result. If cuFile
 * stops answering, the operations left fail with its code. */
int kvik__batch_cufile_cancel(kvik_batch *b, const char *fn) {
  const kvik__cufile_api *cf;
  int rc = cufile_begin(b, fn, &cf);
  if (rc < 0) {
    abandon_cufile(b, rc);
    return rc;
  }
  rc = kvik__cufile_check(cf->cuFileBatchIOCancel(b->cufile.handle), fn, "cuFileBatchIOCancel");
  cufile_end();
  int wait_rc = 0;
  while (b->cufile.n > 0 && wait_rc == 0)
    wait_rc = kvik__batch_cufile_collect(b, fn, b->cufile.n, KVIK__BATCH_CUFILE_WAIT_MAX_NS);
  if (wait_rc < 0) abandon_cufile(b, wait_rc);
  return rc < 0 ? rc : wait_rc;
}

void kvik__batch_cufile_free(kvik_batch *b) {
  const kvik__cufile_api *cf = NULL;
  if (b->cufile.handle && cufile_begin(b, "kvik_batch_free", &cf) == 0) {
    cf->cuFileBatchIODestroy(b->cufile.handle);
    cufile_end();
  }
  free(b->cufile.params);
  free(b->cufile.events);
}
