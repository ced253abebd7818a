/* The kvik hello world: write a buffer, read it back in parallel, and read two halves without
 * blocking. Build against an installed kvik with
 *   cc hello.c $(pkg-config --cflags --libs kvik)                                          */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kvik.h>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    long long rc_ = (long long)(call);                                                       \
    if (rc_ < 0) {                                                                           \
      fprintf(stderr, "%s: %s\n", #call, kvik_last_error());                                 \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "/tmp/kvik-hello-world-file";
  size_t size = 64u << 20;
  char *a = malloc(size), *b = calloc(1, size);
  for (size_t i = 0; i < size; i++) a[i] = (char)(i * 31);

  kvik_file *f;
  CHECK(kvik_file_open(path, "w", 0644, &f));
  CHECK(kvik_file_write(f, a, size, 0)); /* parallel, on the default thread pool */
  kvik_file_free(f);

  CHECK(kvik_file_open(path, "r", 0, &f));
  CHECK(kvik_file_read(f, b, size, 0));

  /* Non-blocking: two reads in flight at once; the buffers must live until each is done. */
  memset(b, 0, size);
  kvik_future *first, *second;
  CHECK(kvik_file_pread(f, b, size / 2, 0, 0, &first));
  CHECK(kvik_file_pread(f, b + size / 2, size / 2, (int64_t)(size / 2), 0, &second));
  ssize_t n1 = kvik_future_wait(first), n2 = kvik_future_wait(second);
  kvik_future_free(first);
  kvik_future_free(second);
  kvik_file_free(f);
  CHECK(n1);
  CHECK(n2);

  int same = memcmp(a, b, size) == 0;
  printf("read %zd bytes back: %s\n", n1 + n2, same ? "identical" : "DIFFERENT");
  free(a);
  free(b);
  remove(path);
  return same ? 0 : 1;
}
