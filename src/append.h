/* Appends of the process to one file, one at a time. The kernel places each write(2) of an
 * append at the end of the file (an O_APPEND descriptor); this keeps the write(2) calls of one
 * append request next to each other, whichever handle of the file they go through. */
#ifndef KVIK_SRC_APPEND_H
#define KVIK_SRC_APPEND_H

#include <sys/types.h>

/* The file appends go to, the same for every handle of it: device and inode, from fstat(2). */
typedef struct kvik__append_file {
  dev_t dev;
  ino_t ino;
} kvik__append_file;

/* An append in progress; lives on the stack of the thread that makes it. */
typedef struct kvik__append {
  kvik__append_file file;
  struct kvik__append *next;
} kvik__append;

/* Wait until no other append of the process to `file` is in progress, then record `a` as in
 * progress until kvik__append_leave(a). Appends to different files do not wait for each other. */
void kvik__append_enter(kvik__append *a, const kvik__append_file *file);
void kvik__append_leave(kvik__append *a);

#endif
