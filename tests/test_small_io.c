/* Small blocking reads and writes of host memory, which kvik_file_read and kvik_file_write serve
 * with their system calls alone (src/file.c, quick()): random ones against a model of the file,
 * beside the full way (larger, O_DIRECT, small tasks); their errors, each with its code, its
 * message and the bytes it moved; the monitors, which count each call once; and writes on a full
 * file system.
 *
 * Usage: test_small_io          every case but the full file system
 *        test_small_io enospc   writes on a 1 MiB tmpfs mounted in a mount namespace of its own;
 *                               skips (77) where the namespace or the mount is refused */
#include "test.h"

#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

#define PAGE 4096
#define QUICK_MAX (256 << 10) /* src/file.c's */
#define MODEL_BYTES ((size_t)3 << 20)
#define FILL 0xA5 /* what a read buffer holds before the read */

static char *dir;
static uint64_t rng = 0x5eed;

static kvik_file *open_ok(const char *path, const char *flags) {
  kvik_file *f = NULL;
  ASSERT_OK(kvik_file_open(path, flags, 0644, &f));
  return f;
}

/* Sizes around the quick path's limits, and some larger ones that take the full way. */
static size_t random_size(void) {
  static const size_t edges[] = {0, 1, PAGE - 1, PAGE, PAGE + 1, QUICK_MAX - 1, QUICK_MAX,
                                 QUICK_MAX + 1};
  switch (test_below(&rng, 4)) {
  case 0: return edges[test_below(&rng, sizeof edges / sizeof edges[0])];
  case 1: return test_below(&rng, 64) * PAGE;
  case 2: return test_below(&rng, QUICK_MAX + 1);
  default: return test_below(&rng, 2 * QUICK_MAX);
  }
}

/* The ways a handle can be set up for one call: as it opened, with O_DIRECT chosen for it, or
 * with tasks smaller than the request (both take the full way). */
static void set_way(kvik_file *f, int way) {
  ASSERT_OK(kvik_file_set_direct_io(f, way == 1, way == 1));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_TASK_SIZE, way == 2 ? 3 * PAGE : 4 << 20));
}

/* Random reads and writes of one handle against the model of its file: every read returns what
 * the model holds up to its end and leaves the rest of the buffer alone; every write lands. */
static void test_model(void) {
  char *path = test_path(dir, "model");
  unsigned char *model = calloc(1, MODEL_BYTES), *buf = malloc(2 * QUICK_MAX + 64);
  size_t len = MODEL_BYTES / 2;
  test_fill(model, len, 1);
  test_write_file(path, model, len);
  kvik_file *f = open_ok(path, "r+");
  for (int i = 0; i < 3000; i++) {
    size_t size = random_size(), at_buf = test_below(&rng, 64);
    int64_t offset = (int64_t)test_below(&rng, len + 3 * PAGE);
    if (i % 3 == 0) offset &= ~(int64_t)(PAGE - 1);
    if ((size_t)offset + size > MODEL_BYTES) offset = (int64_t)(MODEL_BYTES - size);
    set_way(f, i % 7 == 3 ? 1 : i % 7 == 5 ? 2 : 0);
    if (test_below(&rng, 3) == 0) {
      test_fill(buf + at_buf, size, test_rand(&rng));
      ASSERT_EQ(kvik_file_write(f, buf + at_buf, size, offset), (ssize_t)size);
      memcpy(model + offset, buf + at_buf, size);
      if (size && (size_t)offset + size > len) len = (size_t)offset + size;
    } else {
      memset(buf, FILL, 2 * QUICK_MAX + 64);
      size_t want = (size_t)offset >= len ? 0 : size < len - (size_t)offset ? size : len - (size_t)offset;
      ssize_t got = kvik_file_read(f, buf + at_buf, size, offset);
      if (got != (ssize_t)want)
        FAIL_AT("read %d of %zu bytes at %lld returned %zd, expected %zu", i, size,
                (long long)offset, got, want);
      ASSERT_SAME_BYTES(buf + at_buf, model + offset, want);
      for (size_t k = want; k < size; k++)
        if (buf[at_buf + k] != FILL) FAIL_AT("read %d wrote byte %zu past the end of file", i, k);
    }
  }
  set_way(f, 0);
  kvik_file_free(f);
  size_t n;
  unsigned char *back = test_read_file(path, &n);
  ASSERT_EQ(n, len);
  ASSERT_SAME_BYTES(back, model, len);
  free(back);
  free(buf);
  free(model);
  free(path);
  printf("ok: 3000 random small reads and writes against a model\n");
}

/* Two pages whose second (or both, `whole`) the process can neither read nor write. */
static unsigned char *bad_pages(int whole) {
  unsigned char *p = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT(p != MAP_FAILED);
  memset(p, FILL, 2 * PAGE);
  ASSERT(mprotect(whole ? p : p + PAGE, whole ? 2 * PAGE : PAGE, PROT_NONE) == 0);
  return p;
}

/* Errors, each with its code and a message that names the call and says what moved; what moved
 * before the failure is in place. */
static void test_errors(void) {
  char *path = test_path(dir, "errors");
  unsigned char ref[4 * PAGE], got[PAGE];
  test_fill(ref, sizeof ref, 2);
  test_write_file(path, ref, sizeof ref);
  kvik_file *f = open_ok(path, "r+");

  /* A buffer that ends early: the bytes before its bad page move, then -EFAULT. */
  unsigned char *p = bad_pages(0);
  ASSERT_FAILS(kvik_file_read(f, p, 2 * PAGE, 0), -EFAULT, "(4096 of 8192 bytes transferred)");
  ASSERT_SAME_BYTES(p, ref, PAGE);
  ASSERT(strstr(kvik_last_error(), "pread(") && strstr(kvik_last_error(), path));
  ASSERT_FAILS(kvik_file_write(f, p, 2 * PAGE, PAGE), -EFAULT, "(4096 of 8192 bytes transferred)");
  ASSERT_EQ(kvik_file_read(f, got, PAGE, PAGE), PAGE);
  ASSERT_SAME_BYTES(got, p, PAGE); /* the page before the bad one was written */
  memcpy(ref + PAGE, p, PAGE);
  munmap(p, 2 * PAGE);

  /* A buffer the process cannot touch at all: tried as device memory, then -EFAULT. */
  p = bad_pages(1);
  ASSERT_FAILS(kvik_file_read(f, p, PAGE, 0), -EFAULT, "(0 of 4096 bytes transferred)");
  ASSERT_FAILS(kvik_file_write(f, p, PAGE, 0), -EFAULT, "(0 of 4096 bytes transferred)");
  munmap(p, 2 * PAGE);

  /* Arguments: refused before any system call. */
  ASSERT_FAILS(kvik_file_read(f, got, 10, -1), -EINVAL, "negative offset");
  ASSERT_FAILS(kvik_file_write(f, got, 10, INT64_MAX - 5), -EINVAL, "overflow");
  ASSERT_FAILS(kvik_file_read(f, NULL, 10, 0), -EINVAL, "NULL buffer");
  ASSERT_EQ(kvik_file_read(f, NULL, 0, 0), 0);
  ASSERT_FAILS(kvik_file_read(NULL, got, 10, 0), -EINVAL, "NULL handle");

  /* The end of the file: what is left of it, then nothing. */
  ASSERT_EQ(kvik_file_read(f, got, PAGE, 4 * PAGE - 100), 100);
  ASSERT_SAME_BYTES(got, ref + 4 * PAGE - 100, 100);
  ASSERT_EQ(kvik_file_read(f, got, PAGE, 4 * PAGE), 0);
  ASSERT_EQ(kvik_file_read(f, got, PAGE, 1 << 30), 0);
  kvik_file_free(f);

  /* Handles that refuse the call. */
  f = open_ok(path, "r");
  ASSERT_FAILS(kvik_file_write(f, got, 10, 0), -EBADF, "not opened for writing");
  ASSERT_OK(kvik_file_close(f));
  ASSERT_FAILS(kvik_file_read(f, got, 10, 0), -EBADF, "closed");
  kvik_file_free(f);
  f = open_ok(path, "a");
  ASSERT_FAILS(kvik_file_read(f, got, 10, 0), -EBADF, "not opened for reading");
  ASSERT_EQ(kvik_file_write(f, ref, 10, 0), 10); /* an append: at the end, whatever the offset */
  kvik_file_free(f);
  size_t n;
  unsigned char *back = test_read_file(path, &n);
  ASSERT_EQ(n, sizeof ref + 10);
  ASSERT_SAME_BYTES(back, ref, sizeof ref);
  ASSERT_SAME_BYTES(back + sizeof ref, ref, 10);
  free(back);
  free(path);
  printf("ok: errors of small reads and writes, with their codes, messages and bytes\n");
}

/* A monitor counts each call once, failed ones included, with the bytes it moved. */
static void test_monitor(void) {
  char *path = test_path(dir, "monitor");
  unsigned char data[3 * PAGE];
  test_fill(data, sizeof data, 3);
  test_write_file(path, data, sizeof data);
  kvik_file *f = open_ok(path, "r+");
  kvik_monitor *m;
  ASSERT_OK(kvik_monitor_create(&m));
  unsigned char got[PAGE];
  for (int i = 0; i < 5; i++) ASSERT_EQ(kvik_file_read(f, got, PAGE, i * 1000), PAGE);
  ASSERT_EQ(kvik_file_read(f, got, PAGE, 2 * PAGE + 1000), PAGE - 1000);
  for (int i = 0; i < 3; i++) ASSERT_EQ(kvik_file_write(f, data, 100, i * 100), 100);
  for (int whole = 0; whole < 2; whole++) { /* the second tried again the full way */
    unsigned char *p = bad_pages(whole);
    ASSERT(kvik_file_read(f, p, 2 * PAGE, 0) == -EFAULT);
    munmap(p, 2 * PAGE);
  }
  ASSERT(kvik_file_read(f, got, 10, -1) == -EINVAL);
  kvik_summary sum = {.struct_size = sizeof sum};
  ASSERT_OK(kvik_monitor_read(m, &sum));
  kvik_monitor_free(m);
  ASSERT_EQ(sum.num_reads, 9);
  ASSERT_EQ(sum.bytes_read, 5 * PAGE + (PAGE - 1000) + PAGE);
  ASSERT_EQ(sum.num_writes, 3);
  ASSERT_EQ(sum.bytes_written, 300);
  ASSERT_EQ(sum.num_errors, 3);
  kvik_file_free(f);
  free(path);
  printf("ok: a monitor counts small reads and writes once each\n");
}

/* ---- a full file system -------------------------------------------------------------------- */

#define DISK_BYTES ((size_t)1 << 20)
#define FULL_MODEL ((size_t)3 << 20)

/* The bytes a failed write says it moved: its message's "(N of M bytes transferred)". */
static size_t moved_in_message(size_t size) {
  const char *open = strrchr(kvik_last_error(), '(');
  unsigned long long moved, of;
  if (!open || sscanf(open, "(%llu of %llu bytes transferred)", &moved, &of) != 2)
    FAIL_AT("no count in the message");
  ASSERT_EQ(of, size);
  return (size_t)moved;
}

/* One write of `size` bytes of `src` at `offset` that failed having moved `moved` of them: each
 * byte of the range in the file is as it was (`model`) or the new one, and `moved` counts the new
 * ones (bytes equal in both count either way). The model takes what is there. */
static void check_failed_write(int fd, unsigned char *model, const unsigned char *src,
                               int64_t offset, size_t size, size_t moved) {
  unsigned char *got = malloc(size);
  ssize_t n = pread(fd, got, size, offset);
  ASSERT(n >= 0);
  memset(got + n, 0, size - (size_t)n); /* past the end: as the model, which holds zeros there */
  size_t surely_new = 0, maybe_new = 0;
  for (size_t i = 0; i < size; i++) {
    unsigned char old = model[offset + (int64_t)i];
    if (got[i] != old && got[i] != src[i])
      FAIL_AT("byte %zu of a failed write at %lld is %#x, neither old %#x nor new %#x", i,
              (long long)offset, got[i], old, src[i]);
    surely_new += got[i] == src[i] && got[i] != old;
    maybe_new += got[i] == src[i];
  }
  if (moved < surely_new || moved > maybe_new)
    FAIL_AT("a failed write at %lld said it moved %zu bytes; %zu to %zu are new", (long long)offset,
            moved, surely_new, maybe_new);
  memcpy(model + offset, got, size);
  free(got);
}

/* Writes of 1 byte to 300 KiB at random offsets of a file on a 1 MiB file system, blocking (the
 * small ones on the calling thread) and through futures, until some have found it full: each
 * lands whole or fails with -ENOSPC, naming the file and the bytes it moved, and those bytes
 * alone are new in the file; reads then return the model, what landed before a failure intact. */
static int test_full_disk(void) {
  char *mnt = test_mount_small_tmpfs();
  if (!mnt) return TEST_SKIP;
  char *path = test_path(mnt, "full");
  unsigned char *model = calloc(1, FULL_MODEL), *src = malloc(300 << 10);
  size_t len = 0;
  kvik_file *f = open_ok(path, "w+");
  int fd = kvik_file_fd(f), failures = 0, i;
  for (i = 0; i < 400 && failures < 12; i++) {
    size_t size = 1 + test_below(&rng, i % 2 ? 300 << 10 : 64 << 10);
    int64_t offset = (int64_t)test_below(&rng, len + (64 << 10));
    if ((size_t)offset + size > FULL_MODEL) offset = (int64_t)(FULL_MODEL - size);
    test_fill(src, size, test_rand(&rng));
    ssize_t rc;
    size_t moved;
    if (i % 3 == 2) {
      kvik_future *future;
      ASSERT_OK(kvik_file_pwrite(f, src, size, offset, 16 << 10, &future));
      rc = kvik_future_wait(future);
      moved = kvik_future_bytes_done(future);
      kvik_future_free(future);
    } else {
      rc = kvik_file_write(f, src, size, offset);
      moved = rc < 0 ? moved_in_message(size) : (size_t)rc;
    }
    if (rc >= 0) {
      ASSERT_EQ(rc, (ssize_t)size);
      memcpy(model + offset, src, size);
    } else {
      ASSERT_EQ(rc, -ENOSPC);
      ASSERT(strstr(kvik_last_error(), path));
      check_failed_write(fd, model, src, offset, size, moved);
      failures++;
    }
    struct stat st;
    ASSERT(fstat(fd, &st) == 0);
    len = (size_t)st.st_size;
  }
  ASSERT(failures > 0);
  unsigned char *back = malloc(len + 1);
  ASSERT_EQ(kvik_file_read(f, back, len + 1, 0), (ssize_t)len);
  ASSERT_SAME_BYTES(back, model, len);
  printf("ok: %d writes on a full file system, %d of them failed with ENOSPC\n", i, failures);
  free(back);
  kvik_file_free(f);
  unlink(path);
  free(path);
  free(src);
  free(model);
  ASSERT(umount(mnt) == 0);
  rmdir(mnt);
  free(mnt);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "enospc") == 0) return test_full_disk();
  dir = test_mkdtemp();
  test_model();
  test_errors();
  test_monitor();
  test_rmdir(dir);
  return 0;
}
