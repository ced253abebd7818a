/* The zero-copy read path: a file mapped and registered read-only with CUDA, so that the GPU
 * copies straight out of the page cache (see KVIK_SETTING_ZERO_COPY_READ).
 *
 * Registering costs about as much CPU per byte as the copy it saves, so a file's registrations
 * are kept until it is closed: a later read of the same range is a DMA transfer and nothing else.
 * The file is mapped once, whole, and registered in granules of KVIK__ZC_GRANULE bytes as reads
 * reach them. A request takes its granules in order on one thread, queueing a granule's copy
 * before it registers the next, so that the copy runs while the driver registers
 * (zero_copy_read.c); its other tasks read from its far end through bounce buffers meanwhile.
 * The driver serialises registrations, so one thread of the process registers at a time: a read
 * that needs a granule of the file it registers waits for it (and then registers its own), a
 * read that needs one while another file registers takes the bounce buffers.
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

/* The smallest copy taken from the mapping. The driver reads small copies' sources with the CPU
 * (up to 16 KiB on driver 580, by DMA from 32 KiB: bench_zero_copy_truncation_probe), and a CPU
 * read of a page that a truncation took out of the file raises SIGBUS, where the copy engine
 * reads the registration's pinned page. Smaller pieces take the bounce buffers, which pread(2)
 * the file and so see its end. */
#define KVIK__ZC_MIN_COPY ((size_t)256 << 10)

typedef struct kvik__zc_identity {
  dev_t dev;
  ino_t ino;
  off_t size;
  struct timespec mtime, ctime;
} kvik__zc_identity;

/* A granule of the mapping: registered, being registered by one thread (others wait for it), or
 * neither. */
enum { KVIK__ZC_NONE, KVIK__ZC_PENDING, KVIK__ZC_REGISTERED };

/* The context current at a granule's registration. Registrations are portable (they serve
 * every context), so a granule is registered once, by whichever device reads it first, and every
 * device copies from it; each is undone in its own context. */
typedef struct kvik__zc_owner {
  CUcontext ctx;
  unsigned long long id; /* tells that context from a later one with the same handle */
} kvik__zc_owner;

/* A file's zero-copy state, inside its handle. All fields under `lock`. */
typedef struct kvik__zc_file {
  pthread_mutex_t lock;
  pthread_cond_t settled; /* a pending granule was registered, or given up */
  int fd;
  kvik__zc_identity seen; /* the file when it was mapped */
  pid_t pid;      /* the process that mapped it: a child has neither mapping nor registration */
  char *map;      /* the whole file, or NULL */
  size_t map_len; /* whole pages */
  unsigned char *state; /* per granule: KVIK__ZC_NONE, _PENDING or _REGISTERED */
  int registering;      /* a thread registers a granule of this file */
  size_t granules;
  kvik__zc_owner *owner; /* per granule: the context it was registered in, to undo it there */
  unsigned readers;      /* reads between kvik__zc_begin() and kvik__zc_done(): copies may run */
  unsigned char *reads;  /* per granule: requests of the handle that read it, counted up to 2; kept
                          * when the mapping is dropped */
  size_t counted;        /* granules `reads` covers */
} kvik__zc_file;

/* What a read into device memory passes down for the zero-copy path. */
typedef struct kvik__zc_read {
  kvik__zc_file *file;    /* NULL: no zero-copy for this read */
  int64_t request_offset; /* the whole request's range */
  size_t request_size;
  size_t tasks; /* the threads the request runs on */
} kvik__zc_read;

/* Set up (nothing is mapped yet) for the file open as `fd`. */
void kvik__zc_init(kvik__zc_file *zc, int fd);

/* Unregister and unmap everything. Called once no read can use the state any more. */
void kvik__zc_close(kvik__zc_file *zc);

/* Whether a read of `size` bytes from the file whose state is `zc` (NULL: none) may take the
 * zero-copy path at all: the setting allows it, the driver did not refuse it, and the read is not
 * too small. Looks at nothing of the file. */
int kvik__zc_wanted(const kvik__zc_file *zc, size_t size);

/* Whether the mapping can serve a read of [offset, offset + size) into device memory: 1 with
 * *host pointing at the range's bytes in the mapping, which stays until kvik__zc_done(); or 0,
 * and the caller takes the bounce buffers. Registers nothing; sets no message. */
int kvik__zc_begin(const kvik__zc_read *zc, int64_t offset, size_t size, const char **host);

/* How many of `size` bytes from `offset`, between kvik__zc_begin() and kvik__zc_done(), the GPU
 * may copy from the mapping: those up to the end of offset's granule, if they are at least
 * KVIK__ZC_MIN_COPY, once that granule is registered. Registers it if it is not and the setting
 * and the request allow (KVIK_AUTO: only pages in the page cache, only for a request of at least
 * half a granule, and only where kvik__zc_pays(zc->tasks), or, for a granule an earlier request
 * read (kvik__zc_count_read), kvik__zc_pays(1)), after waiting for a thread that registers a
 * granule of the file. 0 if it cannot: the rest of the read takes the bounce buffers.
 * Each granule is a registration of its own, and the driver refuses a copy that runs out of the
 * registration it starts in. `ctx` is current; the granule is registered in it, and serves every
 * context (several devices reading one file register its granules between them). */
size_t kvik__zc_ready(const kvik__zc_read *zc, CUcontext ctx, int64_t offset, size_t size);

/* KVIK_AUTO's cost model: whether a first read on `tasks` threads gets its bytes sooner when it
 * registers granules than through the bounce buffers alone, from the rates measured so far in the
 * process (kvik__zc_note_pread(), and each registration's own), or priors where none was. */
int kvik__zc_pays(size_t tasks);

/* Count a read of [offset, offset + size) through the handle whose state is `zc` (NULL: none), for
 * KVIK_AUTO, which registers a granule that a request reads again (see kvik__zc_ready), and
 * return whether the zero-copy path has something for the read under KVIK_AUTO on threads where
 * a first read does not pay: a granule of the file registered, or one of the range read before
 * where registering pays on one thread. A request smaller than half a granule, or not inside the
 * file, is not counted. */
int kvik__zc_count_read(kvik__zc_file *zc, int64_t offset, size_t size);

/* A pread(2) of `bytes` into pinned memory for a copy to the device took `ns` nanoseconds: an
 * input of the cost model. */
void kvik__zc_note_pread(size_t bytes, uint64_t ns);

/* A registration of `bytes` took `ns` nanoseconds: the model's other input. */
void kvik__zc_note_registration(size_t bytes, uint64_t ns);

/* Whether the granule of `offset` is registered (NULL: no state, no). A hint: it may be dropped
 * right after, if the file changes. */
int kvik__zc_registered(kvik__zc_file *zc, int64_t offset);

/* The copies from the pointer kvik__zc_begin() gave are complete (or failed). */
void kvik__zc_done(kvik__zc_file *zc);

#endif
