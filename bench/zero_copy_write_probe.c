/* Could a write from device memory land straight in a file's page cache? (issue 8)
 *
 * The mirror of zero-copy reads: map the file writable and shared, register the mapping with
 * CUDA (no read-only flag: the GPU writes to it), copy device memory into it with
 * cuMemcpyDtoHAsync, unregister. Two questions, for each directory given:
 *  1. does the driver register a writable shared mapping of a file there at all? Linux refuses
 *     long-term writable pins of file pages on most file systems (shmem and hugetlbfs excepted),
 *     since the file system cannot see a DMA write to write it back;
 *  2. where it does, do the bytes reach the file: written back with fsync, dropped from the page
 *     cache, read again with pread(2)?
 * Uses the CUDA driver only (loaded with dlopen), no kvik.
 *
 * usage: bench_zero_copy_write_probe DIR...   (say /tmp /dev/shm) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FILE_BYTES ((size_t)64 << 20)
#define FILL 0xa5

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static struct {
  CUresult (*init)(unsigned);
  CUresult (*primary_retain)(void **, int);
  CUresult (*set_current)(void *);
  CUresult (*mem_alloc)(CUdeviceptr *, size_t);
  CUresult (*memset)(CUdeviceptr, unsigned char, size_t);
  CUresult (*host_register)(void *, size_t, unsigned);
  CUresult (*host_unregister)(void *);
  CUresult (*copy_dtoh)(void *, CUdeviceptr, size_t, void *);
  CUresult (*stream_sync)(void *);
  CUresult (*error_name)(CUresult, const char **);
} cu;

static const char *name_of(CUresult r) {
  const char *name = "?";
  cu.error_name(r, &name);
  return name;
}

static int load_driver(CUdeviceptr *dev) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) return fprintf(stderr, "no CUDA driver: %s\n", dlerror()), 0;
  *(void **)&cu.init = dlsym(h, "cuInit");
  *(void **)&cu.primary_retain = dlsym(h, "cuDevicePrimaryCtxRetain");
  *(void **)&cu.set_current = dlsym(h, "cuCtxSetCurrent");
  *(void **)&cu.mem_alloc = dlsym(h, "cuMemAlloc_v2");
  *(void **)&cu.memset = dlsym(h, "cuMemsetD8_v2");
  *(void **)&cu.host_register = dlsym(h, "cuMemHostRegister_v2");
  *(void **)&cu.host_unregister = dlsym(h, "cuMemHostUnregister");
  *(void **)&cu.copy_dtoh = dlsym(h, "cuMemcpyDtoHAsync_v2");
  *(void **)&cu.stream_sync = dlsym(h, "cuStreamSynchronize");
  *(void **)&cu.error_name = dlsym(h, "cuGetErrorName");
  void *ctx;
  return cu.init(0) == 0 && cu.primary_retain(&ctx, 0) == 0 && cu.set_current(ctx) == 0 &&
         cu.mem_alloc(dev, FILE_BYTES) == 0 && cu.memset(*dev, FILL, FILE_BYTES) == 0;
}

/* Bytes of the file that hold FILL, read with pread after the page cache was dropped. */
static size_t filled_on_disk(int fd) {
  fsync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  unsigned char *buf = malloc(FILE_BYTES);
  size_t filled = 0;
  if (buf && pread(fd, buf, FILE_BYTES, 0) == (ssize_t)FILE_BYTES)
    for (size_t i = 0; i < FILE_BYTES; i++) filled += buf[i] == FILL;
  free(buf);
  return filled;
}

static void probe(const char *dir, CUdeviceptr dev) {
  char path[4096];
  snprintf(path, sizeof path, "%s/kvik-zero-copy-write-XXXXXX", dir);
  int fd = mkstemp(path);
  if (fd < 0 || ftruncate(fd, (off_t)FILE_BYTES) != 0) return perror(path);
  unlink(path);
  char *map = mmap(NULL, FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return perror("mmap"), (void)close(fd);
  CUresult r = cu.host_register(map, FILE_BYTES, 0);
  printf("%-10s register a writable shared mapping: %s (%d)", dir, r == 0 ? "done" : name_of(r), r);
  if (r == 0) {
    CUresult copy = cu.copy_dtoh(map, dev, FILE_BYTES, NULL);
    if (copy == 0) copy = cu.stream_sync(NULL);
    cu.host_unregister(map);
    printf("; copy from the device: %s", copy == 0 ? "done" : name_of(copy));
  }
  munmap(map, FILE_BYTES);
  if (r == 0)
    printf("; after fsync and a drop, %zu of %zu bytes hold what the GPU wrote", filled_on_disk(fd), FILE_BYTES);
  printf("\n");
  close(fd);
}

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: %s DIR...\n", argv[0]), 2;
  CUdeviceptr dev;
  if (!load_driver(&dev)) return fprintf(stderr, "CUDA setup failed\n"), 77;
  for (int i = 1; i < argc; i++) probe(argv[i], dev);
  return 0;
}
