/* Shared by the fuzz targets: a check that stops the fuzzer with a message, and one temporary
 * directory per process, removed at exit. */
#ifndef KVIK_FUZZ_COMMON_H
#define KVIK_FUZZ_COMMON_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvik.h"

/* A failed check is a finding: print it and abort, which libFuzzer reports as a crash and saves
 * the input for. */
#define FUZZ_CHECK(cond, ...)                                                                 \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
      fprintf(stderr, __VA_ARGS__);                                                           \
      fprintf(stderr, " (kvik_last_error: %s)\n", kvik_last_error());                         \
      abort();                                                                                \
    }                                                                                         \
  } while (0)

static char fuzz_tmpdir_path[256];

static void fuzz_tmpdir_remove(void) {
  DIR *d = opendir(fuzz_tmpdir_path);
  if (!d) return;
  char path[512];
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", fuzz_tmpdir_path, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(fuzz_tmpdir_path);
}

/* A directory of this process's own, made on first use. */
static inline const char *fuzz_tmpdir(void) {
  if (!fuzz_tmpdir_path[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(fuzz_tmpdir_path, sizeof fuzz_tmpdir_path, "%s/kvik-fuzz-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(fuzz_tmpdir_path)) {
      perror("mkdtemp");
      abort();
    }
    atexit(fuzz_tmpdir_remove);
  }
  return fuzz_tmpdir_path;
}

/* The input as a terminated string (libFuzzer's data is not terminated). Free it. */
static inline char *fuzz_string(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) abort();
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

#endif
