/* A test-only interposer on open/pread/pwrite/posix_fadvise, linked into a test executable so that its
 * definitions take precedence over libc's for libkvik too. It acts only on "target" files:
 * those whose path contains SHIM_TARGET_MARK, and O_DIRECT twins reopened from them through
 * /proc/self/fd. Every knob is off (0) by default. */
#ifndef KVIK_FAULT_SHIM_H
#define KVIK_FAULT_SHIM_H

#include <stdatomic.h>

#define SHIM_TARGET_MARK "shim-target"

typedef struct shim_config {
  _Atomic int eintr_every;        /* every Nth IO call fails with EINTR before doing anything */
  _Atomic long max_per_call;      /* cap on bytes per call (short reads and writes) */
  _Atomic int refuse_direct_open; /* open(O_DIRECT) fails with EINVAL */
  _Atomic int refuse_direct_io;   /* IO on an O_DIRECT descriptor fails with EINVAL */
  _Atomic long write_budget;      /* >0: bytes pwrite may still write before write_errno */
  _Atomic int write_errno;
  _Atomic int read_fail_at;       /* >0: the Nth pread fails with read_errno */
  _Atomic int read_errno;
  _Atomic int gate_closed;        /* preads wait while set */
} shim_config;

extern shim_config shim;

/* Counters for assertions. */
extern _Atomic long shim_direct_io_calls;
extern _Atomic long shim_io_calls;
/* The posix_fadvise(POSIX_FADV_WILLNEED) calls on target files, and the bytes they named. */
extern _Atomic long shim_willneed_calls, shim_willneed_bytes;
/* shim_willneed_bytes when the first pread of a target file since the last reset began; -1
 * before one. */
extern _Atomic long shim_willneed_bytes_at_first_read;
/* The target pwrites since the last reset: the thread (gettid) that made the first, whether
 * another thread made one too, and whether one began elsewhere than where the one before ended. */
extern _Atomic long shim_writer_tid;
extern _Atomic int shim_many_writers;
extern _Atomic int shim_writes_out_of_order;

void shim_reset(void);
void shim_open_gate(void);

#endif
