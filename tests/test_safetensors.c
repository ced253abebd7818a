/* safetensors files through the C API (kvik.h, "Model weights"): a checkpoint of every dtype,
 * scalars, empty tensors and metadata, read into host memory (and device memory where a CUDA
 * driver loads) in any order and compared byte for byte; every malformed header refused with
 * -EBADMSG and a message naming the file and the problem; reads of tensors that the file lost
 * since it was opened. Skips (77) without Jansson. */
#include "test_cuda.h"

#include <unistd.h>

static char *dir;
static int file_number;
static int cuda; /* a CUDA driver loads: reads into device memory too */

/* A file of an 8-byte length, `header` padded with `pad` spaces, then `data`. Returns its path. */
static char *write_checkpoint(const char *header, size_t pad, const void *data, size_t size) {
  char name[32];
  snprintf(name, sizeof name, "st%d.safetensors", file_number++);
  char *path = test_path(dir, name);
  size_t hlen = strlen(header) + pad, total = 8 + hlen + size;
  unsigned char *image = malloc(total);
  for (int i = 0; i < 8; i++) image[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
  memcpy(image + 8, header, strlen(header));
  memset(image + 8 + strlen(header), ' ', pad);
  if (size) memcpy(image + 8 + hlen, data, size);
  test_write_file(path, image, total);
  free(image);
  return path;
}

/* ---- a good checkpoint --------------------------------------------------------------------- */

typedef struct expected {
  const char *name, *dtype;
  unsigned bits, ndim;
  int64_t shape[3];
  uint64_t begin, end;
} expected;

/* In the order of their data; the header lists them in another. */
static const expected good[] = {
    {"a.scalar", "F32", 32, 0, {0}, 0, 4},
    {"b.bf16", "BF16", 16, 2, {3, 5}, 4, 34},
    {"c.empty", "I64", 64, 2, {0, 7}, 34, 34},
    {"d.f4", "F4", 4, 2, {3, 4}, 34, 40},
    {"e.bool", "BOOL", 8, 1, {5}, 40, 45},
    {"f.f8", "F8_E4M3", 8, 3, {2, 2, 2}, 45, 53},
    {"g.f6", "F6_E2M3", 6, 1, {4}, 53, 56},
    {"h.c64", "C64", 64, 1, {3}, 56, 80},
};
#define NGOOD (sizeof good / sizeof good[0])
#define GOOD_HEADER                                                                                \
  "{\"h.c64\":{\"dtype\":\"C64\",\"shape\":[3],\"data_offsets\":[56,80]},"                        \
  "\"__metadata__\":{\"format\":\"pt\",\"note\":\"caf\\u00e9\"},"                                  \
  "\"b.bf16\":{\"dtype\":\"BF16\",\"shape\":[3,5],\"data_offsets\":[4,34]},"                      \
  "\"g.f6\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[53,56]},"                      \
  "\"c.empty\":{\"dtype\":\"I64\",\"shape\":[0,7],\"data_offsets\":[34,34]},"                     \
  "\"a.scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"                         \
  "\"e.bool\":{\"dtype\":\"BOOL\",\"shape\":[5],\"data_offsets\":[40,45]},"                       \
  "\"d.f4\":{\"dtype\":\"F4\",\"shape\":[3,4],\"data_offsets\":[34,40]},"                         \
  "\"f.f8\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2,2],\"data_offsets\":[45,53]}}"
#define GOOD_DATA 80

static void check_info(kvik_safetensors *st, size_t i, int64_t data_start) {
  kvik_tensor_info info = {.struct_size = sizeof info};
  ASSERT_OK(kvik_safetensors_tensor(st, i, &info));
  const expected *e = &good[i];
  ASSERT(strcmp(info.name, e->name) == 0 && strcmp(info.dtype, e->dtype) == 0);
  ASSERT_EQ(info.dtype_bits, e->bits);
  ASSERT_EQ(info.ndim, e->ndim);
  for (unsigned d = 0; d < e->ndim; d++) ASSERT_EQ(info.shape[d], e->shape[d]);
  ASSERT_EQ(info.file_offset, data_start + (int64_t)e->begin);
  ASSERT_EQ(info.nbytes, e->end - e->begin);
  ASSERT_EQ(kvik_safetensors_find(st, e->name), (int64_t)i);
  ASSERT_EQ(kvik_safetensors_dtype_bits(e->dtype), e->bits);
}

/* Every tensor read into `mem` (host or device: `device`), in reverse order, each at an odd
 * place, and compared with the data. */
static void read_all(kvik_safetensors *st, const unsigned char *data, int device) {
  enum { SLOT = 128 };
  unsigned char *mem = device ? (unsigned char *)device_alloc(NGOOD * SLOT) : malloc(NGOOD * SLOT);
  size_t indices[NGOOD];
  void *dsts[NGOOD];
  for (size_t k = 0; k < NGOOD; k++) {
    indices[k] = NGOOD - 1 - k;
    dsts[k] = mem + k * SLOT + 1 + k % 3;
  }
  ASSERT_OK(kvik_safetensors_read(st, indices, dsts, NGOOD));
  unsigned char got[NGOOD * SLOT];
  if (device) from_device(got, (const char *)mem, sizeof got);
  else memcpy(got, mem, sizeof got);
  for (size_t k = 0; k < NGOOD; k++) {
    const expected *e = &good[indices[k]];
    ASSERT_SAME_BYTES(got + ((unsigned char *)dsts[k] - mem), data + e->begin, e->end - e->begin);
  }
  if (device) device_free((char *)mem);
  else free(mem);
}

static void test_good(void) {
  unsigned char data[GOOD_DATA];
  test_fill(data, sizeof data, 28);
  char *path = write_checkpoint(GOOD_HEADER, 5, data, sizeof data); /* an odd data offset */
  kvik_safetensors *st;
  ASSERT_OK(kvik_safetensors_open(path, &st));
  ASSERT_EQ(kvik_safetensors_count(st), NGOOD);
  int64_t data_start = 8 + (int64_t)strlen(GOOD_HEADER) + 5;
  for (size_t i = 0; i < NGOOD; i++) check_info(st, i, data_start);
  ASSERT(strcmp(kvik_safetensors_metadata(st, "format"), "pt") == 0);
  ASSERT(strcmp(kvik_safetensors_metadata(st, "note"), "caf\xc3\xa9") == 0);
  ASSERT(kvik_safetensors_metadata(st, "absent") == NULL);
  ASSERT_FAILS(kvik_safetensors_find(st, "absent"), -ENOENT, "absent");
  kvik_tensor_info info = {.struct_size = sizeof info};
  ASSERT_FAILS(kvik_safetensors_tensor(st, NGOOD, &info), -ENOENT, path);
  /* A caller built against a smaller struct gets that much of it. */
  struct {
    size_t struct_size;
    const char *name;
  } small = {sizeof small, NULL};
  ASSERT_OK(kvik_safetensors_tensor(st, 1, (kvik_tensor_info *)(void *)&small));
  ASSERT(strcmp(small.name, "b.bf16") == 0);
  read_all(st, data, 0);
  if (cuda) read_all(st, data, 1);
  /* The handle's file, for a read of one's own: the whole data section. */
  unsigned char whole[GOOD_DATA];
  ASSERT_EQ(kvik_file_read(kvik_safetensors_file(st), whole, GOOD_DATA, data_start), GOOD_DATA);
  ASSERT_SAME_BYTES(whole, data, GOOD_DATA);
  kvik_safetensors_free(st);
  free(path);
  printf("ok: a checkpoint of %zu tensors, their dtypes, shapes, ranges and bytes%s\n", NGOOD,
         cuda ? ", into host and device memory" : "");
}

/* No tensor at all, and nothing but metadata: a valid, empty checkpoint. */
static void test_empty(void) {
  const char *headers[] = {"{}", "{\"__metadata__\":{}}"};
  for (int i = 0; i < 2; i++) {
    char *path = write_checkpoint(headers[i], 0, NULL, 0);
    kvik_safetensors *st;
    ASSERT_OK(kvik_safetensors_open(path, &st));
    ASSERT_EQ(kvik_safetensors_count(st), 0);
    ASSERT_OK(kvik_safetensors_read(st, NULL, NULL, 0));
    kvik_safetensors_free(st);
    free(path);
  }
  printf("ok: empty checkpoints\n");
}

/* ---- bad input ----------------------------------------------------------------------------- */

/* The file of `header` and `data_size` bytes of data fails to open with -EBADMSG and a message
 * naming it and containing `problem`. */
static void refused(const char *header, size_t data_size, const char *problem) {
  unsigned char *data = calloc(1, data_size + 1);
  char *path = write_checkpoint(header, 0, data, data_size);
  kvik_safetensors *st = (kvik_safetensors *)(uintptr_t)1;
  int rc = kvik_safetensors_open(path, &st);
  if (rc != -EBADMSG || st != NULL || !strstr(kvik_last_error(), path) ||
      !strstr(kvik_last_error(), problem))
    FAIL_AT("header %s: %s (%d), wanted -EBADMSG saying \"%s\"", header, kvik_err_name(rc), rc,
            problem);
  free(data);
  free(path);
}

#define ENTRY(name, dtype, shape, offsets)                                                         \
  "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":" offsets "}"

static void test_bad_headers(void) {
  refused("[1,2]", 0, "an array, not a JSON object");
  refused("{\"a\":", 0, "not JSON");
  refused("{\"a\":NaN}", 0, "not JSON");
  refused("{\"x\xff\":1}", 0, "not JSON"); /* not UTF-8 */
  refused("{" ENTRY("a", "U8", "[1]", "[0,1]") "," ENTRY("a", "U8", "[1]", "[1,2]") "}", 2,
          "not JSON"); /* a name twice */
  refused("{\"__metadata__\":{\"a\":1}}", 0, "__metadata__ is not an object of strings");
  refused("{\"__metadata__\":[]}", 0, "__metadata__ is not an object of strings");
  refused("{\"a\":[0,1]}", 1, "tensor 'a': its entry is an array, not an object");
  refused("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, "tensor 'a': its entry lacks data_offsets");
  refused("{" ENTRY("a", "U7", "[1]", "[0,1]") "}", 1, "tensor 'a': unknown dtype U7");
  refused("{\"a\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "unknown dtype a number");
  refused("{" ENTRY("a", "U8", "[-1]", "[0,1]") "}", 1, "shape is not a list of non-negative ints");
  refused("{" ENTRY("a", "U8", "[1.0]", "[0,1]") "}", 1, "shape is not a list of non-negative");
  refused("{" ENTRY("a", "U8", "1", "[0,1]") "}", 1, "shape is not a list of non-negative ints");
  refused("{" ENTRY("a", "U8", "[1]", "[1,0]") "}", 1, "data_offsets are not two ints");
  refused("{" ENTRY("a", "U8", "[1]", "[0,1,2]") "}", 1, "data_offsets are not two ints");
  refused("{" ENTRY("a", "U8", "[1]", "[0,true]") "}", 1, "data_offsets are not two ints");
  refused("{" ENTRY("a", "F32", "[2]", "[0,4]") "}", 4, "is 8 bytes, but its data_offsets [0, 4]");
  refused("{" ENTRY("a", "F4", "[3]", "[0,2]") "}", 2, "shape [3] of F4 is not a whole number");
  refused("{" ENTRY("a", "F6_E3M2", "[3]", "[0,2]") "}", 2, "not a whole number of bytes");
  refused("{" ENTRY("a", "U64", "[4294967296,4294967296]", "[0,8]") "}", 8,
          "is larger than any file");
  refused("{" ENTRY("a", "U8", "[4]", "[0,4]") "}", 3, "run past the data (3 bytes)");
  refused("{" ENTRY("a", "U8", "[4]", "[0,4]") "," ENTRY("b", "U8", "[2]", "[3,5]") "}", 5,
          "tensor 'b': data_offsets [3, 5] overlap tensor 'a'");
  refused("{" ENTRY("a", "U8", "[4]", "[0,4]") "," ENTRY("b", "U8", "[2]", "[5,7]") "}", 7,
          "a gap in the data: bytes [4, 5)");
  refused("{" ENTRY("a", "U8", "[4]", "[0,4]") "}", 6, "a gap in the data: bytes [4, 6)");
  refused("{" ENTRY("a", "U8", "[4]", "[1,5]") "}", 5, "a gap in the data: bytes [0, 1)");
  printf("ok: malformed headers refused with -EBADMSG and the problem\n");
}

/* Lengths: a file shorter than the length field, a length past the end, one over the limit. */
static void test_bad_lengths(void) {
  char *path = test_path(dir, "short.safetensors");
  test_write_file(path, "\x02\x00\x00", 3);
  kvik_safetensors *st;
  ASSERT_FAILS(kvik_safetensors_open(path, &st), -EBADMSG, "truncated: 3 bytes");
  test_write_file(path, "\x10\x00\x00\x00\x00\x00\x00\x00{}", 10);
  ASSERT_FAILS(kvik_safetensors_open(path, &st), -EBADMSG, "header length 16 is past the end");
  test_write_file(path, "\xff\xff\xff\xff\xff\xff\xff\xff{}", 10);
  ASSERT_FAILS(kvik_safetensors_open(path, &st), -EBADMSG, "is past the end of the file");
  /* 100000001 bytes of header, in a sparse file */
  unsigned char head[8] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0};
  test_write_file(path, head, 8);
  ASSERT(truncate(path, 8 + 100000001 + 10) == 0);
  ASSERT_FAILS(kvik_safetensors_open(path, &st), -EBADMSG, "over safetensors' limit");
  ASSERT(st == NULL);
  char *missing = test_path(dir, "missing.safetensors");
  ASSERT_FAILS(kvik_safetensors_open(missing, &st), -ENOENT, missing);
  free(missing);
  free(path);
  printf("ok: lengths past the file or the limit refused\n");
}

/* ---- reads -------------------------------------------------------------------------------- */

static void test_read_errors(void) {
  unsigned char data[GOOD_DATA];
  test_fill(data, sizeof data, 29);
  char *path = write_checkpoint(GOOD_HEADER, 0, data, sizeof data);
  kvik_safetensors *st;
  ASSERT_OK(kvik_safetensors_open(path, &st));
  unsigned char buf[64];
  size_t index = NGOOD;
  void *dst = buf;
  ASSERT_FAILS(kvik_safetensors_read(st, &index, &dst, 1), -EINVAL, "no tensor 8 of 8");
  index = 1;
  dst = NULL;
  ASSERT_FAILS(kvik_safetensors_read(st, &index, &dst, 1), -EINVAL, "NULL destination");
  index = 2; /* empty: no destination needed */
  ASSERT_OK(kvik_safetensors_read(st, &index, &dst, 1));
  /* The file loses its last 25 bytes after the open: the last two tensors cannot be read whole
   * (the message names the first asked for), the others still are. */
  ASSERT(truncate(path, 8 + (off_t)strlen(GOOD_HEADER) + GOOD_DATA - 25) == 0);
  size_t three[3] = {NGOOD - 1, 1, NGOOD - 2};
  unsigned char last[32], second[32], before_last[32];
  void *dsts[3] = {last, second, before_last};
  ASSERT_FAILS(kvik_safetensors_read(st, three, dsts, 3), -ENODATA, "tensor 'h.c64'");
  ASSERT(strstr(kvik_last_error(), path) && !strstr(kvik_last_error(), "g.f6"));
  ASSERT_SAME_BYTES(second, data + good[1].begin, good[1].end - good[1].begin);
  kvik_safetensors_free(st);
  ASSERT_FAILS(kvik_safetensors_open(NULL, &st), -EINVAL, "NULL");
  ASSERT_FAILS(kvik_safetensors_tensor(NULL, 0, NULL), -EINVAL, "NULL");
  ASSERT_EQ(kvik_safetensors_count(NULL), 0);
  ASSERT(kvik_safetensors_file(NULL) == NULL && kvik_safetensors_metadata(NULL, "a") == NULL);
  ASSERT_EQ(kvik_safetensors_dtype_bits("U7"), 0);
  kvik_safetensors_free(NULL);
  free(path);
  printf("ok: reads of missing tensors, without destinations, past a truncated end\n");
}

int main(void) {
  if (kvik_runtime_lib_supported(KVIK_LIB_JANSSON, NULL, 0) != 1) {
    printf("skip: no Jansson (libjansson.so.4)\n");
    return TEST_SKIP;
  }
  cuda = load_cuda();
  dir = test_mkdtemp();
  test_good();
  test_empty();
  test_bad_headers();
  test_bad_lengths();
  test_read_errors();
  test_rmdir(dir);
  return 0;
}
