/* Which copies out of a registered file mapping does the CUDA driver make with the CPU? (issue 8)
 *
 * A zero-copy read registers a file's mapping read-only and has the GPU copy from it. If the file
 * is truncated meanwhile, its pages leave the file and the mapping, yet stay pinned for the
 * registration: a DMA transfer still reads them, but a CPU read of the mapping gets SIGBUS. So a
 * copy that the driver makes with the CPU (small copies, inlined into the command stream) can
 * raise SIGBUS in a reader whose file was truncated.
 *
 * For each size and source alignment, a child process maps a 64 MiB file, registers the mapping
 * read-only, truncates the file to nothing, and copies that many bytes from the mapping to the
 * device with cuMemcpyHtoDAsync. The child dying of SIGBUS says the driver read the source with
 * the CPU; exiting normally says the copy engine did. A control row copies without truncating;
 * the last row truncates before registering (may the registration itself fault?).
 * Uses the CUDA driver only (loaded with dlopen, in each child: CUDA does not survive fork).
 *
 * usage: bench_zero_copy_truncation_probe DIR */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define FILE_BYTES ((size_t)64 << 20)
#define READ_ONLY 8 /* CU_MEMHOSTREGISTER_READ_ONLY */

typedef int (*init_fn)(unsigned);
typedef int (*retain_fn)(void **, int);
typedef int (*set_current_fn)(void *);
typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*register_fn)(void *, size_t, unsigned);
typedef int (*copy_fn)(unsigned long long, const void *, size_t, void *);
typedef int (*sync_fn)(void *);

enum { NO_TRUNCATION, TRUNCATE_THEN_COPY, TRUNCATE_THEN_REGISTER };

/* In the child: exit 0 when the copy completed, 3 when it or the registration failed with a CUDA
 * error, 4 on a setup failure; or die of the signal the driver raised. */
static void copy_from_truncated(const char *path, size_t size, size_t offset, int how) {
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cuda) _exit(4);
  init_fn init = (init_fn)dlsym(cuda, "cuInit");
  retain_fn retain = (retain_fn)dlsym(cuda, "cuDevicePrimaryCtxRetain");
  set_current_fn set_current = (set_current_fn)dlsym(cuda, "cuCtxSetCurrent");
  alloc_fn alloc = (alloc_fn)dlsym(cuda, "cuMemAlloc_v2");
  register_fn host_register = (register_fn)dlsym(cuda, "cuMemHostRegister_v2");
  copy_fn copy = (copy_fn)dlsym(cuda, "cuMemcpyHtoDAsync_v2");
  sync_fn sync = (sync_fn)dlsym(cuda, "cuStreamSynchronize");
  void *ctx;
  unsigned long long dev;
  int fd = open(path, O_RDWR);
  char *map = fd < 0 ? MAP_FAILED : mmap(NULL, FILE_BYTES, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED || init(0) != 0 || retain(&ctx, 0) != 0 || set_current(ctx) != 0 ||
      alloc(&dev, FILE_BYTES) != 0)
    _exit(4);
  if (how == TRUNCATE_THEN_REGISTER && ftruncate(fd, 0) != 0) _exit(4);
  if (host_register(map, FILE_BYTES, READ_ONLY) != 0) _exit(how == TRUNCATE_THEN_REGISTER ? 3 : 4);
  if (how == TRUNCATE_THEN_COPY && ftruncate(fd, 0) != 0) _exit(4);
  int rc = copy(dev, map + offset, size, NULL);
  if (rc == 0) rc = sync(NULL);
  _exit(rc == 0 ? 0 : 3);
}

static const char *outcome(int status) {
  if (WIFSIGNALED(status))
    return WTERMSIG(status) == SIGBUS ? "SIGBUS (read with the CPU)" : strsignal(WTERMSIG(status));
  switch (WEXITSTATUS(status)) {
  case 0: return "copied, no SIGBUS";
  case 3: return "failed with a CUDA error";
  default: return "setup failed (no GPU?)";
  }
}

static int write_file(const char *path) {
  char *data = malloc(FILE_BYTES);
  if (!data) return -1;
  memset(data, 0x5a, FILE_BYTES);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ssize_t wrote = fd < 0 ? -1 : write(fd, data, FILE_BYTES);
  free(data);
  if (fd >= 0) close(fd);
  return wrote == (ssize_t)FILE_BYTES ? 0 : -1;
}

static const char *const how_names[] = {"never", "after registering", "before registering"};

/* One case in a child process, printed as a row. Returns 0, or -1 if it could not run. */
static int run_case(const char *path, size_t size, size_t offset, int how) {
  if (write_file(path) != 0) return perror(path), -1;
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) copy_from_truncated(path, size, offset, how);
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return perror("fork"), -1;
  printf("%-9zu %-8s %-19s %s\n", size, offset % 4096 ? "+123" : "aligned", how_names[how], outcome(status));
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) return fprintf(stderr, "usage: %s DIR\n", argv[0]), 2;
  char path[4096];
  snprintf(path, sizeof path, "%s/kvik-truncation-probe-%d", argv[1], (int)getpid());
  const size_t sizes[] = {1,     100,   4096,   8192,   12288,           16384,           32768,
                          49152, 65535, 65536,  262144, (size_t)1 << 20, (size_t)16 << 20};
  const size_t offsets[] = {(size_t)8 << 20, ((size_t)8 << 20) + 123};
  printf("%-9s %-8s %-19s %s\n", "bytes", "offset", "truncated", "outcome");
  int rc = run_case(path, 1, offsets[0], NO_TRUNCATION);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && rc == 0; i++)
    for (size_t j = 0; j < sizeof offsets / sizeof offsets[0] && rc == 0; j++)
      rc = run_case(path, sizes[i], offsets[j], TRUNCATE_THEN_COPY);
  if (rc == 0) rc = run_case(path, (size_t)16 << 20, offsets[0], TRUNCATE_THEN_REGISTER);
  unlink(path);
  return rc == 0 ? 0 : 1;
}
