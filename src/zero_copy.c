/* Mapping and read-only registration of file ranges for copies straight from the page cache. */
#define _GNU_SOURCE
#include "zero_copy.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda.h"
#include "settings.h"
#include "sys.h"

#define CUDA_ERROR_NOT_SUPPORTED 801
#define CU_MEMHOSTREGISTER_READ_ONLY 8

/* Set once the driver said it cannot register read-only memory: no use asking again. */
static _Atomic int unsupported;

/* One mapping at a time in the whole process: the driver serialises registrations (on an H100,
 * 13 GB/s on one thread, no more on 16), so a second thread gains more from the bounce buffers,
 * and the two paths then add up. */
static atomic_flag in_use = ATOMIC_FLAG_INIT;

/* Only a range wholly inside the file: pages past the end would fault (SIGBUS), and a read that
 * reaches the end needs the bounce path's short count anyway. */
static int inside_file(int fd, int64_t offset, size_t size) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)offset + size <= (uint64_t)st.st_size;
}

static int all_resident(void *addr, size_t len, size_t page) {
  size_t pages = len / page;
  unsigned char *vec = kvik__malloc(pages);
  int resident = vec && mincore(addr, len, vec) == 0;
  for (size_t i = 0; resident && i < pages; i++) resident = vec[i] & 1;
  free(vec);
  return resident;
}

static int register_read_only(const kvik__mapped *m) {
  CUresult result = kvik__cuda_if_present()->cuMemHostRegister(m->addr, m->len, CU_MEMHOSTREGISTER_READ_ONLY);
  if (result == CUDA_ERROR_NOT_SUPPORTED) atomic_store(&unsupported, 1);
  return result == CUDA_SUCCESS;
}

int kvik__map_for_device(int fd, int64_t offset, size_t size, kvik__mapped *m) {
  int64_t mode = kvik__setting(KVIK_SETTING_ZERO_COPY_READ);
  if (mode == KVIK_OFF || atomic_load(&unsupported) || size == 0 || fd < 0 || !inside_file(fd, offset, size))
    return 0;
  if (atomic_flag_test_and_set(&in_use)) return 0;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  int64_t start = offset - offset % (int64_t)page;
  m->len = ((size_t)(offset - start) + size + page - 1) / page * page;
  m->addr = kvik__mmap(m->len, PROT_READ, MAP_SHARED, fd, (off_t)start);
  int mapped = m->addr != MAP_FAILED;
  if (!mapped || (mode != KVIK_ON && !all_resident(m->addr, m->len, page)) || !register_read_only(m)) {
    if (mapped) munmap(m->addr, m->len);
    atomic_flag_clear(&in_use);
    return 0;
  }
  m->host = (const char *)m->addr + (offset - start);
  return 1;
}

void kvik__unmap_for_device(kvik__mapped *m) {
  kvik__cuda_if_present()->cuMemHostUnregister(m->addr);
  munmap(m->addr, m->len);
  atomic_flag_clear(&in_use);
}
