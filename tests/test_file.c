/* File handles: every flag string, append, bad arguments, closed handles, directories. */
#include "test.h"

static char *dir;

static kvik_file *open_ok(const char *path, const char *flags) {
  kvik_file *f = NULL;
  ASSERT_OK(kvik_file_open(path, flags, 0644, &f));
  ASSERT(f != NULL);
  return f;
}

static void test_flag_strings(void) {
  char *path = test_path(dir, "flags");
  unsigned char data[100], back[100];
  test_fill(data, sizeof data, 1);

  /* "w" creates and truncates, write only. */
  kvik_file *f = open_ok(path, "w");
  ASSERT_EQ(kvik_file_write(f, data, 100, 0), 100);
  ASSERT_FAILS(kvik_file_read(f, back, 10, 0), -EBADF, "not opened for reading");
  ASSERT_EQ(kvik_file_open_flags(f) & O_ACCMODE, O_WRONLY);
  ASSERT(kvik_file_open_flags(f) & O_CLOEXEC || (fcntl(kvik_file_fd(f), F_GETFD) & FD_CLOEXEC));
  kvik_file_free(f);

  /* "r": read only. */
  f = open_ok(path, "r");
  ASSERT_EQ(kvik_file_size(f), 100);
  ASSERT_EQ(kvik_file_read(f, back, 100, 0), 100);
  ASSERT_SAME_BYTES(back, data, 100);
  ASSERT_FAILS(kvik_file_write(f, data, 10, 0), -EBADF, "not opened for writing");
  ASSERT_EQ(kvik_file_open_flags(f) & O_ACCMODE, O_RDONLY);
  ASSERT(fcntl(kvik_file_fd(f), F_GETFD) & FD_CLOEXEC);
  kvik_file_free(f);

  /* "r+": both, no truncation. */
  f = open_ok(path, "r+");
  ASSERT_EQ(kvik_file_size(f), 100);
  ASSERT_EQ(kvik_file_write(f, data, 10, 100), 10);
  ASSERT_EQ(kvik_file_read(f, back, 10, 100), 10);
  ASSERT_SAME_BYTES(back, data, 10);
  ASSERT_EQ(kvik_file_open_flags(f) & O_ACCMODE, O_RDWR);
  kvik_file_free(f);

  /* "w+": both, truncates. */
  f = open_ok(path, "w+");
  ASSERT_EQ(kvik_file_size(f), 0);
  ASSERT_EQ(kvik_file_write(f, data, 50, 0), 50);
  ASSERT_EQ(kvik_file_read(f, back, 100, 0), 50);
  kvik_file_free(f);

  /* "r" on a missing file fails; "w" creates it with the given mode. */
  char *missing = test_path(dir, "missing");
  ASSERT_FAILS(kvik_file_open(missing, "r", 0, &f), -ENOENT, missing);
  ASSERT(f == NULL);
  ASSERT_OK(kvik_file_open(missing, "w", 0600, &f));
  struct stat st;
  ASSERT(stat(missing, &st) == 0);
  ASSERT_EQ(st.st_mode & 0777, 0600);
  kvik_file_free(f);
  free(missing);
  free(path);
}

static void test_append(void) {
  char *path = test_path(dir, "append");
  unsigned char data[300], back[300];
  test_fill(data, sizeof data, 2);
  test_write_file(path, data, 100);

  kvik_file *f = open_ok(path, "a");
  ASSERT(kvik_file_open_flags(f) & O_APPEND);
  ASSERT_EQ(kvik_file_size(f), 100); /* "a" keeps existing content */
  /* The offset is ignored: both writes land at the end, in order. */
  ASSERT_EQ(kvik_file_write(f, data + 100, 100, 0), 100);
  ASSERT_EQ(kvik_file_write(f, data + 200, 100, 12345), 100);
  ASSERT_FAILS(kvik_file_read(f, back, 10, 0), -EBADF, "not opened for reading");
  kvik_file_free(f);
  size_t n;
  unsigned char *content = test_read_file(path, &n);
  ASSERT_EQ(n, 300);
  ASSERT_SAME_BYTES(content, data, 300);
  free(content);

  /* "a+" reads too, and creates a missing file. */
  char *fresh = test_path(dir, "append-plus");
  f = open_ok(fresh, "a+");
  ASSERT_EQ(kvik_file_write(f, data, 300, 0), 300);
  ASSERT_EQ(kvik_file_read(f, back, 300, 0), 300);
  ASSERT_SAME_BYTES(back, data, 300);
  kvik_file_free(f);
  free(fresh);
  free(path);
}

static void test_bad_arguments(void) {
  kvik_file *f = (kvik_file *)0x1;
  ASSERT_FAILS(kvik_file_open(NULL, "r", 0, &f), -EINVAL, "NULL path");
  ASSERT(f == NULL);
  ASSERT_FAILS(kvik_file_open("/dev/null", NULL, 0, &f), -EINVAL, "NULL flags");
  ASSERT_FAILS(kvik_file_open("/dev/null", "r", 0, NULL), -EINVAL, "NULL output");
  static const char *const bad[] = {"", "x", "rw", "rb", "R", "r++", "+", "wa", " r"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    ASSERT_FAILS(kvik_file_open("/dev/null", bad[i], 0, &f), -EINVAL, "unknown flags");
}

static void test_directory(void) {
  kvik_file *f;
  ASSERT_FAILS(kvik_file_open(dir, "r", 0, &f), -EISDIR, dir);
  ASSERT(f == NULL);
  ASSERT_FAILS(kvik_file_open(dir, "r+", 0, &f), -EISDIR, dir);
  ASSERT_FAILS(kvik_file_open(dir, "w", 0644, &f), -EISDIR, dir);
}

static void test_use_after_close(void) {
  char *path = test_path(dir, "closed");
  kvik_file *f = open_ok(path, "w+");
  ASSERT_EQ(kvik_file_closed(f), 0);
  ASSERT(kvik_file_fd(f) >= 0);
  ASSERT_OK(kvik_file_close(f));
  ASSERT_EQ(kvik_file_closed(f), 1);
  char buf[16] = {0};
  kvik_future *fut = (kvik_future *)0x1;
  ASSERT_FAILS(kvik_file_read(f, buf, 16, 0), -EBADF, "kvik_file_read(");
  ASSERT(strstr(kvik_last_error(), "closed"));
  ASSERT_FAILS(kvik_file_write(f, buf, 16, 0), -EBADF, "kvik_file_write(");
  ASSERT_FAILS(kvik_file_pread(f, buf, 16, 0, 0, &fut), -EBADF, "kvik_file_pread(");
  ASSERT(strstr(kvik_last_error(), "closed"));
  ASSERT(fut == NULL);
  ASSERT_FAILS(kvik_file_pwrite(f, buf, 16, 0, 0, &fut), -EBADF, "closed");
  ASSERT_FAILS(kvik_file_fd(f), -EBADF, "closed");
  ASSERT_FAILS(kvik_file_size(f), -EBADF, "closed");
  ASSERT_FAILS(kvik_file_open_flags(f), -EBADF, "closed");
  ASSERT_FAILS(kvik_file_close(f), -EBADF, "already closed");
  kvik_file_free(f);
  kvik_file_free(NULL);
  free(path);
}

static void test_many_handles(void) {
  enum { N = 200 };
  kvik_file *files[N];
  char name[32];
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof name, "many-%d", i);
    char *path = test_path(dir, name);
    files[i] = open_ok(path, "w+");
    free(path);
  }
  for (int i = 0; i < N; i++) {
    int value = i * 7919;
    ASSERT_EQ(kvik_file_write(files[i], &value, sizeof value, (int64_t)i), sizeof value);
  }
  for (int i = N - 1; i >= 0; i--) {
    int value = -1;
    ASSERT_EQ(kvik_file_read(files[i], &value, sizeof value, (int64_t)i), sizeof value);
    ASSERT_EQ(value, i * 7919);
    ASSERT_EQ(kvik_file_size(files[i]), i + (int)sizeof value);
    kvik_file_free(files[i]);
  }
}

int main(void) {
  dir = test_mkdtemp();
  umask(022);
  test_flag_strings();
  test_append();
  test_bad_arguments();
  test_directory();
  test_use_after_close();
  test_many_handles();
  test_rmdir(dir);
  return 0;
}
