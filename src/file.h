/* What other modules need of a file handle's insides. */
#ifndef KVIK_SRC_FILE_H
#define KVIK_SRC_FILE_H

#include "gds.h"
#include "kvik.h"
#include "posix_io.h"

/* The file's GPUDirect Storage state (kvik__gds_handle() gives its cuFile handle, if any). */
kvik__gds_file *kvik__file_gds(kvik_file *file);

/* The path the file was opened with, for messages. */
const char *kvik__file_path(const kvik_file *file);

/* The access mode the file was opened with (O_RDONLY, O_WRONLY or O_RDWR), with O_APPEND for an
 * append handle; unlike kvik_file_open_flags(), without a system call. */
int kvik__file_access(const kvik_file *file);

/* kvik_file_pread(), with the default task size, but on the pool whatever the size (a request's
 * `pooled`): for the many small reads the fused read starts at once. */
int kvik__file_pread_pooled(kvik_file *file, void *buf, size_t size, int64_t file_offset,
                            kvik_future **future);

/* Keep the file from closing while the caller uses its descriptors, as a request does. Returns
 * its buffered descriptor, or -EBADF (no message) once it is closed. */
int kvik__file_hold(kvik_file *file);
void kvik__file_let_go(kvik_file *file);

/* kvik__file_hold(), with kvik__file_access() in *access when it holds the file: one call for a
 * batch's check of an operation's file. */
int kvik__file_hold_access(kvik_file *file, int *access);

/* The descriptor through which io_uring may move the whole of `size` bytes between a buffer and
 * the file at `offset`: the O_DIRECT one where the settings ask for direct IO of this kind, the
 * file system has not refused it, the buffer (`buf_aligned`, kvik__direct_aligned()), offset
 * and size are aligned, and (reads) the whole range is kvik__direct_readable(); else the
 * buffered one. *direct says which. The file is held. */
int kvik__file_ring_fd(kvik_file *file, kvik__op op, int buf_aligned, size_t size, int64_t offset,
                       int *direct);

/* Move `size` bytes on this thread through the file's own path, as a task of kvik_file_pread or
 * kvik_file_pwrite would: retries, O_DIRECT as the settings say, end of file. Returns 0 with
 * *done, or a negative code with a message (-EBADF once the file is closed). */
int kvik__file_transfer(kvik_file *file, kvik__op op, char *buf, size_t size, int64_t offset,
                        size_t *done);

#endif
