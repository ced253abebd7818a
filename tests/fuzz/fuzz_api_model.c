/* Sequences of file API calls decoded from the input, checked against a model: an array of bytes
 * that mirrors the file. Covers kvik_file_open (all six flag strings), kvik_file_read/write,
 * kvik_file_pread/pwrite with futures waited for or freed in any order, kvik_file_size,
 * kvik_file_close with IO in flight, kvik_file_free, and changes of task_size, gds_threshold and
 * num_threads (2 to 4) between and during requests. Every return value and every byte read must
 * be what the model predicts; bytes of a read buffer past the end of file stay untouched.
 *
 * Requests in flight at once are either all reads, or writes to disjoint ranges of a handle
 * without append (at most one write in flight on an append handle): the order of anything else is
 * not defined, so a conflicting call first waits for (or frees) the futures it conflicts with, in
 * an order the input chooses. Offsets and sizes stay within MAX_FILE so a run is fast. */
#include <errno.h>
#include <stdint.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FILE (256 * 1024)
#define MAX_IO (64 * 1024)
#define MAX_FUTURES 8
#define FILL 0xA5

typedef struct {
  const uint8_t *p;
  size_t left;
} input;

static int more(const input *in) { return in->left > 0; }

static unsigned byte(input *in) {
  if (!in->left) return 0;
  in->left--;
  return *in->p++;
}

static unsigned u16(input *in) { return byte(in) | byte(in) << 8; }

typedef struct {
  kvik_future *future;
  int is_read;
  unsigned char *buf; /* the read's buffer, or the write's data */
  size_t size;        /* bytes asked for */
  int64_t offset;     /* for an append write: where the model put it */
  ssize_t expect;     /* the result */
} pending;

typedef struct {
  kvik_file *file; /* NULL when no handle */
  int closed;
  int readable, writable, append;
  unsigned char model[MAX_FILE];
  size_t model_size;
  pending futures[MAX_FUTURES];
  int nfutures;
  unsigned counter; /* makes every write's data different */
} state;

static state st;
static char path[512];

static const char *const modes[] = {"r", "r+", "w", "w+", "a", "a+"};

/* Bytes read at offset for size: clipped at the end of the model. */
static size_t expected_read(int64_t offset, size_t size) {
  if ((size_t)offset >= st.model_size) return 0;
  size_t avail = st.model_size - (size_t)offset;
  return size < avail ? size : avail;
}

static void check_read(const char *what, const unsigned char *buf, size_t asked, int64_t offset, ssize_t got,
                       ssize_t expect) {
  FUZZ_CHECK(got == expect, "%s(%zu at %lld): returned %zd, model says %zd", what, asked, (long long)offset, got,
             expect);
  if (got < 0) return;
  FUZZ_CHECK(memcmp(buf, st.model + offset, (size_t)got) == 0, "%s(%zu at %lld): bytes differ from the model", what,
             asked, (long long)offset);
  for (size_t i = (size_t)got; i < asked; i++)
    FUZZ_CHECK(buf[i] == FILL, "%s(%zu at %lld): byte %zu past the end of file was written", what, asked,
               (long long)offset, i);
}

/* Apply a write to the model; returns where it landed. */
static int64_t model_write(const unsigned char *buf, size_t size, int64_t offset) {
  if (st.append) offset = (int64_t)st.model_size;
  if (size == 0) return offset; /* no bytes: the file keeps its size */
  if ((size_t)offset > st.model_size) memset(st.model + st.model_size, 0, (size_t)offset - st.model_size);
  memcpy(st.model + offset, buf, size);
  if ((size_t)offset + size > st.model_size) st.model_size = (size_t)offset + size;
  return offset;
}

static void fill_data(unsigned char *buf, size_t size) {
  uint32_t x = 0x9E3779B9u * ++st.counter;
  for (size_t i = 0; i < size; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    buf[i] = (unsigned char)x;
  }
}

/* Finish future i: wait and check, or free without waiting (free waits) and check the bytes. */
static void finish(int i, int wait) {
  pending *f = &st.futures[i];
  if (wait) {
    ssize_t got = kvik_future_wait(f->future);
    if (f->is_read) check_read("kvik_file_pread", f->buf, f->size, f->offset, got, f->expect);
    else FUZZ_CHECK(got == f->expect, "kvik_file_pwrite(%zu): future says %zd, model %zd", f->size, got, f->expect);
    FUZZ_CHECK(kvik_future_done(f->future) == 1, "done after wait");
    FUZZ_CHECK(kvik_future_bytes_done(f->future) == (size_t)got, "bytes_done %zu, result %zd",
               kvik_future_bytes_done(f->future), got);
    FUZZ_CHECK(kvik_future_wait(f->future) == got, "second wait differs");
    kvik_future_free(f->future);
  } else {
    kvik_future_free(f->future);
    if (f->is_read) check_read("kvik_file_pread (freed)", f->buf, f->size, f->offset, f->expect, f->expect);
  }
  free(f->buf);
  st.futures[i] = st.futures[--st.nfutures];
}

/* Finish the futures that `keep` refuses, in an order drawn from the input. */
static void drain(input *in, int (*keep)(const pending *, int64_t, size_t), int64_t offset, size_t size) {
  for (;;) {
    int idx[MAX_FUTURES], n = 0;
    for (int i = 0; i < st.nfutures; i++)
      if (!keep || !keep(&st.futures[i], offset, size)) idx[n++] = i;
    if (!n) return;
    unsigned b = byte(in);
    finish(idx[b % (unsigned)n], (b >> 7) & 1);
  }
}

static int keep_reads(const pending *f, int64_t offset, size_t size) {
  (void)offset, (void)size;
  return f->is_read;
}

/* A write may stay in flight beside a new write when neither appends and the ranges are
 * disjoint. */
static int keep_disjoint_writes(const pending *f, int64_t offset, size_t size) {
  if (f->is_read || st.append) return 0;
  return (uint64_t)offset >= (uint64_t)f->offset + f->size || (uint64_t)f->offset >= (uint64_t)offset + size;
}

static void drop_handle(input *in) {
  drain(in, NULL, 0, 0);
  kvik_file_free(st.file);
  st.file = NULL;
}

static void op_open(input *in) {
  if (st.file) drop_handle(in);
  int m = (int)(byte(in) % 6);
  int rc = kvik_file_open(path, modes[m], 0644, &st.file);
  FUZZ_CHECK(rc == 0, "kvik_file_open(\"%s\") = %d", modes[m], rc);
  st.closed = 0;
  st.readable = m != 2 && m != 4; /* w and a are write only */
  st.writable = m != 0;
  st.append = m >= 4;
  if (m == 2 || m == 3) st.model_size = 0;
}

/* Offset and size of a request, within the model's bounds. */
static void range(input *in, int64_t *offset, size_t *size) {
  unsigned o = u16(in), s = u16(in);
  *offset = (int64_t)(((o & 0xFF00u) << 2 | (o & 0xFF)) % (MAX_FILE + 1)); /* 0 .. 256 KiB, small values too */
  *size = s % (MAX_IO + 1);
}

static int fits(int64_t offset, size_t size) {
  size_t end = st.append ? st.model_size + size : (size_t)offset + size;
  return end <= MAX_FILE;
}

static void op_read(input *in, int async) {
  int64_t offset;
  size_t size;
  range(in, &offset, &size);
  size_t task = async ? (byte(in) % 5) * 4096 : 0;
  drain(in, keep_reads, 0, 0);
  if (async && st.nfutures == MAX_FUTURES) drain(in, NULL, 0, 0);
  unsigned char *buf = malloc(size ? size : 1);
  if (!buf) abort();
  memset(buf, FILL, size);
  ssize_t expect = !st.file || st.closed || !st.readable ? -EBADF : (ssize_t)expected_read(offset, size);
  if (!st.file) {
    free(buf);
    return;
  }
  if (!async) {
    ssize_t got = kvik_file_read(st.file, buf, size, offset);
    check_read("kvik_file_read", buf, size, offset, got, expect);
    free(buf);
    return;
  }
  kvik_future *fut = (kvik_future *)(uintptr_t)1;
  int rc = kvik_file_pread(st.file, buf, size, offset, task, &fut);
  if (expect < 0) {
    FUZZ_CHECK(rc == expect, "kvik_file_pread on a handle that cannot read: %d, model %zd", rc, expect);
    FUZZ_CHECK(fut == NULL, "kvik_file_pread failed but left a future");
    free(buf);
    return;
  }
  FUZZ_CHECK(rc == 0 && fut != NULL, "kvik_file_pread(%zu at %lld) = %d", size, (long long)offset, rc);
  st.futures[st.nfutures++] = (pending){fut, 1, buf, size, offset, expect};
}

static void op_write(input *in, int async) {
  int64_t offset;
  size_t size;
  range(in, &offset, &size);
  size_t task = async ? (byte(in) % 5) * 4096 : 0;
  if (!st.file) return;
  if (!fits(offset, size)) size = st.append ? MAX_FILE - st.model_size : MAX_FILE - (size_t)offset;
  drain(in, keep_disjoint_writes, offset, size);
  if (async && st.nfutures == MAX_FUTURES) drain(in, NULL, 0, 0);
  unsigned char *buf = malloc(size ? size : 1);
  if (!buf) abort();
  fill_data(buf, size);
  int ok = !st.closed && st.writable;
  if (!async) {
    ssize_t got = kvik_file_write(st.file, buf, size, offset);
    FUZZ_CHECK(got == (ok ? (ssize_t)size : -EBADF), "kvik_file_write(%zu at %lld) = %zd", size, (long long)offset,
               got);
    if (ok) model_write(buf, size, offset);
    free(buf);
    return;
  }
  kvik_future *fut = (kvik_future *)(uintptr_t)1;
  int rc = kvik_file_pwrite(st.file, buf, size, offset, task, &fut);
  if (!ok) {
    FUZZ_CHECK(rc == -EBADF && fut == NULL, "kvik_file_pwrite on a handle that cannot write: %d", rc);
    free(buf);
    return;
  }
  FUZZ_CHECK(rc == 0 && fut != NULL, "kvik_file_pwrite(%zu at %lld) = %d", size, (long long)offset, rc);
  int64_t at = model_write(buf, size, offset);
  st.futures[st.nfutures++] = (pending){fut, 0, buf, size, at, (ssize_t)size};
}

static void op_size(input *in) {
  if (!st.file) return;
  drain(in, keep_reads, 0, 0);
  int64_t got = kvik_file_size(st.file);
  if (st.closed) FUZZ_CHECK(got < 0, "kvik_file_size of a closed handle = %lld", (long long)got);
  else FUZZ_CHECK(got == (int64_t)st.model_size, "kvik_file_size = %lld, model %zu", (long long)got, st.model_size);
}

static void op_close(void) {
  if (!st.file) return;
  int rc = kvik_file_close(st.file);
  FUZZ_CHECK(rc == (st.closed ? -EBADF : 0), "kvik_file_close = %d (closed before: %d)", rc, st.closed);
  FUZZ_CHECK(kvik_file_closed(st.file) == 1, "kvik_file_closed after close");
  st.closed = 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!path[0]) {
    snprintf(path, sizeof path, "%s/model", fuzz_tmpdir());
    if (kvik_setting_set(KVIK_SETTING_NUM_THREADS, 2) != 0) abort();
  }
  /* Each input starts from an empty file and the same settings. */
  FILE *f = fopen(path, "w");
  if (!f || fclose(f) != 0) abort();
  st.model_size = 0;
  st.counter = 0;
  FUZZ_CHECK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, 16384) == 0, "task_size");
  FUZZ_CHECK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 8192) == 0, "gds_threshold");

  input in = {data, size};
  int ops = 0;
  while (more(&in) && ops++ < 64) {
    unsigned op = byte(&in) % 13;
    switch (op) {
    case 0: op_open(&in); break;
    case 1: op_write(&in, 0); break;
    case 2: op_read(&in, 0); break;
    case 3: op_read(&in, 1); break;
    case 4: op_write(&in, 1); break;
    case 5:
    case 6:
      if (st.nfutures) {
        unsigned b = byte(&in);
        finish((int)(b % (unsigned)st.nfutures), op == 5);
      }
      break;
    case 7: {
      int64_t v = (int64_t)(byte(&in) % 16 + 1) * 4096;
      FUZZ_CHECK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, v) == 0, "task_size %lld", (long long)v);
      break;
    }
    case 8: {
      int64_t v = (int64_t)(byte(&in) % 17) * 4096;
      FUZZ_CHECK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, v) == 0, "gds_threshold %lld", (long long)v);
      break;
    }
    case 9: op_size(&in); break;
    case 10: op_close(); break;
    case 11:
      if (st.file) drop_handle(&in);
      break;
    case 12: {
      int64_t v = 2 + byte(&in) % 3;
      FUZZ_CHECK(kvik_setting_set(KVIK_SETTING_NUM_THREADS, v) == 0, "num_threads %lld", (long long)v);
      break;
    }
    }
  }
  if (st.file) drop_handle(&in);
  drain(&in, NULL, 0, 0);
  /* What is on disk is the model. */
  f = fopen(path, "rb");
  FUZZ_CHECK(f != NULL, "reopen");
  static unsigned char disk[MAX_FILE + 1];
  size_t n = fread(disk, 1, sizeof disk, f);
  fclose(f);
  FUZZ_CHECK(n == st.model_size && memcmp(disk, st.model, n) == 0, "file on disk (%zu bytes) differs from the model (%zu)",
             n, st.model_size);
  return 0;
}
