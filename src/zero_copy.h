/* The zero-copy read path: a file mapped and registered read-only with CUDA, so that the GPU
 * copies straight out of the page cache (see KVIK_SETTING_ZERO_COPY_READ).
 *
 * Registering costs about as much CPU per byte as the copy it saves, so a file's registrations
 * are kept until it is closed: a later read of the same range is a DMA transfer and nothing else.
 * The file is mapped once, whole, and registered in granules of KVIK__ZC_GRANULE bytes as reads
 * reach them. The driver serialises registrations, so one thread of the process registers at a
 * time; a read that would wait for it takes the bounce buffers instead.
 *
 * The pages of a registered granule stay pinned in the page cache. They are the file's pages, so
 * a write to the file through any path changes what the GPU copies, as it changes what pread(2)
 * returns. A truncation takes pages out of the file but not out of the registration: every read
 * compares the file's size, mtime and ctime with those seen at mapping, and any change drops
 * every registration and the mapping first (or, while other reads still copy from them, sends
 * this read to the bounce buffers). */
#ifndef KVIK_SRC_ZERO_COPY_H
#define KVIK_SRC_ZERO_COPY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "cuda.h"

/* Registered at a time: 3 ms of registration on an H100 (22 GB/s, whatever the size from 16 MiB
 * to 1 GiB), so a large read's first pass gets most of its bytes registered while small reads
 * do not register much more than they read. */
#define KVIK__ZC_GRANULE ((size_t)64 << 20)

typedef struct kvik__zc_identity {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime, ctime;
} kvik__zc_identity;

/* A file's zero-copy state, inside its handle. All fields under `lock`. */
typedef struct kvik__zc_file {
  pthread_mutex_t lock;
  int fd;
  kvik__zc_identity seen; /* the file when it was mapped */
  pid_t pid;              /* the process that mapped it: a child has neither mapping nor registration */
  char *map;              /* the whole file, or NULL */
  size_t map_len;         /* whole pages */
  unsigned char *registered; /* per granule: 1 once registered */
  size_t granules;
  CUcontext ctx;             /* current at the registrations, needed to undo them */
  unsigned long long ctx_id; /* tells that context from a later one with the same handle */
  unsigned readers;          /* copies from the mapping that may still run */
} kvik__zc_file;

/* What a read into device memory passes down for the zero-copy path. */
typedef struct kvik__zc_read {
  kvik__zc_file *file; /* NULL: no zero-copy for this read */
  size_t request_size; /* the whole request's bytes, of which the read is a task */
} kvik__zc_read;

/* Set up (nothing is mapped yet) for the file open as `fd`. */
void kvik__zc_init(kvik__zc_file *zc, int fd);

/* Unregister and unmap everything. Called once no read can use the state any more. */
void kvik__zc_close(kvik__zc_file *zc);

/* For a read of [offset, offset + size) into device memory, part of a request of `request_size`
 * bytes: 1 with *host pointing at the range's bytes in a registered mapping, from which the GPU
 * may copy until kvik__zc_done(); or 0, and the caller takes the bounce buffers. Whether it
 * may register granules the range lacks follows the setting (KVIK_AUTO: only pages in the page
 * cache) and the request's size (at least half of what it would register). `ctx` is current, and
 * a file's registrations are all made in one context (they serve every context). Sets no
 * message. */
int kvik__zc_begin(kvik__zc_file *zc, CUcontext ctx, int64_t offset, size_t size, size_t request_size,
                   const char **host);

/* How many of `size` bytes from `offset` one copy may take: up to the next granule. Each
 * granule is a registration of its own, and the driver refuses a copy that runs out of the
 * registration it starts in. */
static inline size_t kvik__zc_piece(int64_t offset, size_t size) {
  size_t to_boundary = KVIK__ZC_GRANULE - (size_t)offset % KVIK__ZC_GRANULE;
  return size < to_boundary ? size : to_boundary;
}

/* The copy from the pointer kvik__zc_begin() gave is complete (or failed). */
void kvik__zc_done(kvik__zc_file *zc);

/* The setting was set again: try the driver once more even if it refused read-only
 * registration before. */
void kvik__zc_retry(void);

#endif
