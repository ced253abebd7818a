/* GPUDirect Storage for one file: which path serves its device memory (the compat-mode
 * decision), its cuFile handle, and transfers through cuFileRead/cuFileWrite. */
#ifndef KVIK_SRC_GDS_H
#define KVIK_SRC_GDS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cufile.h"
#include "memory.h"
#include "posix_io.h"

/* cuFile transfers are split at file offsets that are multiples of this, so that no two tasks
 * share a page cuFile might read, modify and write back. */
#define KVIK__GDS_ALIGNMENT 4096

typedef struct kvik__gds_file {
  _Atomic int state; /* see gds.c */
  int backend;       /* kvik_backend, once decided */
  int fd;            /* the file's buffered descriptor, which the O_DIRECT one reopens */
  int access;        /* O_RDONLY, O_WRONLY or O_RDWR */
  int direct_fd;     /* the O_DIRECT descriptor registered with cuFile, or -1 */
  kvik__cufile_handle handle;
  unsigned generation; /* kvik__cufile_generation() at registration */
  const char *path;
  char why[320];
} kvik__gds_file;

/* Set up `g` for a file just opened. With compat mode OFF the decision is made now, and a file
 * cuFile cannot serve fails with its code and a message naming `fn` and `flags`; with AUTO it is
 * made on the first device IO (so that host-only programs never load cuFile); with ON it is
 * POSIX. Returns 0 or a negative code. */
int kvik__gds_open(kvik__gds_file *g, const char *fn, const char *flags, const char *path, int fd,
                   int access);

/* Deregister and close what kvik__gds_open() and the decision set up. */
void kvik__gds_close(kvik__gds_file *g);

/* The file's backend, deciding it now if it has not been; the reason goes into `why`. */
int kvik__gds_backend(kvik__gds_file *g, char *why, size_t len);

/* The cuFile handle when cuFile serves the file in this process, else NULL. Decides first. */
kvik__cufile_handle kvik__gds_handle(kvik__gds_file *g);

/* A transfer between device memory and a file through cuFile. */
typedef struct kvik__gds_io {
  const char *fn; /* the public function called, for messages */
  kvik__op op;
  const kvik__memory *mem; /* the device memory, classified */
  char *dev;               /* its first byte */
  size_t size;
  int64_t offset; /* in the file */
} kvik__gds_io;

/* Transfer io's range with cuFile, retrying short transfers; a read stops early only at end of
 * file. Returns 0 or a negative code with a message naming io->fn; *done counts the bytes
 * transferred. */
int kvik__gds_transfer(kvik__gds_file *g, const kvik__gds_io *io, size_t *done);

/* One cuFileRead/cuFileWrite of io->size bytes at `io->dev + base_offset` (io->dev: the base
 * pointer), as KvikIO's raw IO. */
ssize_t kvik__gds_raw(kvik__gds_file *g, const kvik__gds_io *io, int64_t base_offset);

/* The arguments cuFileReadAsync/WriteAsync read when the stream reaches them, and the result it
 * writes then: they must live until that moment. */
typedef struct kvik__gds_async {
  size_t size;
  off_t file_offset, base_offset;
  ssize_t bytes;
} kvik__gds_async;

/* Whether kvik__gds_enqueue() can take a transfer of memory `mem` on this file. */
int kvik__gds_async_possible(kvik__gds_file *g, const kvik__memory *mem);

/* Queue cuFileReadAsync/WriteAsync of io's range on `stream`, with `state` holding its arguments
 * and result. Returns 0 or a negative code (nothing queued). */
int kvik__gds_enqueue(kvik__gds_file *g, const kvik__gds_io *io, void *stream,
                      kvik__gds_async *state);

/* The result of a transfer queued by kvik__gds_enqueue(), once the stream passed it: the byte
 * count, or a negative code with a message naming `fn`. */
ssize_t kvik__gds_async_result(const kvik__gds_file *g, const char *fn, kvik__op op,
                               const kvik__gds_async *state);

#endif
