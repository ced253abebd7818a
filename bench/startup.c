/* Start-up: what a new process pays to open a file and read 4 KiB with kvik (issue 29).
 *
 * Spawns, N times each and taking turns, three programs that open FILE and read its first 4 KiB
 * into host memory, then exit: (a) plain C, open(2) + pread(2) + close(2), a program not linked
 * to libkvik (bench_startup_plain, this file built with STARTUP_PLAIN); (b) the same through kvik,
 * kvik_file_open + kvik_file_read + kvik_file_close, linked to libkvik.so (this program, in child
 * mode); (c) dd bs=4096 count=1. Prints the median and 90th percentile of the wall time per
 * process, from spawn to exit, and (b)/(a) against the target of 1.5x, saying MISSED where the
 * median misses it. Then which optional libraries kvik's process had mapped before exit (none,
 * for a host read: libcurl and libcuda are loaded on first need only), and the libraries that
 * libkvik.so needs to load (its DT_NEEDED entries: no libcurl).
 *
 * usage: bench_startup [N] [FILE]   (defaults: 200, this program's own file)
 *        bench_startup --child kvik FILE [--maps]   (one run of (b); --maps prints what it mapped)
 * Exit status: 0 (the target missed is printed, not an error), 1 when a child fails. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_BYTES 4096

#ifdef STARTUP_PLAIN

/* (a): the plain C program. */
int main(int argc, char **argv) {
  static char buf[READ_BYTES];
  if (argc != 2) return 2;
  int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 1;
  ssize_t n = pread(fd, buf, sizeof buf, 0);
  close(fd);
  return n < 0;
}

#else

#include <elf.h>
#include <link.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>

#include "kvik.h"

#define TARGET 1.5

extern char **environ;

/* ---- (b): the kvik child ----------------------------------------------------------------- */

/* Whether /proc/self/maps names a file whose name holds `needle`. */
static int mapped(const char *needle) {
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[4096];
  int found = 0;
  while (maps && !found && fgets(line, sizeof line, maps)) found = strstr(line, needle) != NULL;
  if (maps) fclose(maps);
  return found;
}

static int kvik_child(const char *path, int print_maps) {
  static char buf[READ_BYTES];
  kvik_file *f = NULL;
  if (kvik_file_open(path, "r", 0, &f) < 0) {
    fprintf(stderr, "bench_startup: %s\n", kvik_last_error());
    return 1;
  }
  ssize_t n = kvik_file_read(f, buf, sizeof buf, 0);
  if (n < 0) fprintf(stderr, "bench_startup: %s\n", kvik_last_error());
  kvik_file_close(f);
  kvik_file_free(f);
  if (print_maps)
    printf("libcurl %s, libcuda %s\n", mapped("libcurl") ? "MAPPED" : "not mapped",
           mapped("libcuda") ? "MAPPED" : "not mapped");
  return n < 0;
}

/* ---- the driver -------------------------------------------------------------------------- */

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Wall milliseconds of one run of argv, from spawn to exit, its output discarded; -1 on failure. */
static double run_ms(const char *const argv[]) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  double start = now_ms();
  int rc = posix_spawnp(&pid, argv[0], &actions, NULL, (char *const *)argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  if (rc != 0 || waitpid(pid, &status, 0) != pid) return -1;
  double ms = now_ms() - start;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? ms : -1;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile of n sorted values (nearest rank). */
static double quantile(const double *sorted, int n, double q) {
  int i = (int)(q * n + 0.999999) - 1;
  return sorted[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* The entries of libkvik.so's dynamic section that name the libraries it needs, as the loader
 * left them in memory: the libraries a program linked to libkvik loads with it. */
static int print_needed(struct dl_phdr_info *info, size_t size, void *unused) {
  (void)size, (void)unused;
  if (!strstr(info->dlpi_name, "libkvik.so")) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
    const ElfW(Dyn) *dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr), *d;
    ElfW(Addr) strtab = 0;
    for (d = dyn; d->d_tag != DT_NULL; d++)
      if (d->d_tag == DT_STRTAB) strtab = d->d_un.d_ptr;
    if (strtab < info->dlpi_addr) strtab += info->dlpi_addr;
    int curl = 0;
    printf("%s needs:", info->dlpi_name);
    for (d = dyn; d->d_tag != DT_NULL; d++) {
      if (d->d_tag != DT_NEEDED) continue;
      const char *name = (const char *)strtab + d->d_un.d_val;
      curl |= strstr(name, "libcurl") != NULL;
      printf(" %s", name);
    }
    printf("%s\n", curl ? " (links libcurl: MISSED)" : " (no libcurl)");
  }
  return 1;
}

/* What kvik's child had mapped before exit, as it prints it. */
static void print_child_maps(const char *self, const char *path) {
  char command[8400];
  snprintf(command, sizeof command, "'%s' --child kvik '%s' --maps", self, path);
  FILE *out = popen(command, "r");
  char line[256] = "";
  if (!out || !fgets(line, sizeof line, out)) snprintf(line, sizeof line, "? (no answer)\n");
  if (out) pclose(out);
  printf("kvik's process before exit: %s", line);
}

enum { PLAIN, KVIK, DD, PROGRAMS };

int main(int argc, char **argv) {
  if (argc >= 4 && strcmp(argv[1], "--child") == 0 && strcmp(argv[2], "kvik") == 0)
    return kvik_child(argv[3], argc > 4 && strcmp(argv[4], "--maps") == 0);
  char self[4096], plain[4200];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return perror("readlink /proc/self/exe"), 1;
  self[len] = '\0';
  snprintf(plain, sizeof plain, "%.*s/bench_startup_plain", (int)(strrchr(self, '/') - self),
           self);
  int n = argc > 1 ? atoi(argv[1]) : 200;
  const char *path = argc > 2 ? argv[2] : self;
  if (n < 1) return fprintf(stderr, "usage: bench_startup [N] [FILE]\n"), 2;
  char dd_in[4200];
  snprintf(dd_in, sizeof dd_in, "if=%s", path);
  const char *const commands[PROGRAMS][8] = {
      [PLAIN] = {plain, path, NULL},
      [KVIK] = {self, "--child", "kvik", path, NULL},
      [DD] = {"dd", dd_in, "of=/dev/null", "bs=4096", "count=1", "status=none", NULL}};
  static const char *const names[PROGRAMS] = {"(a) plain C open+pread", "(b) kvik open+read",
                                              "(c) dd bs=4096 count=1"};
  double *ms[PROGRAMS];
  for (int p = 0; p < PROGRAMS; p++) ms[p] = calloc((size_t)n, sizeof(double));
  for (int p = 0; p < PROGRAMS; p++) /* warm: the page cache holds the programs and the file */
    if (run_ms(commands[p]) < 0) return fprintf(stderr, "%s failed\n", names[p]), 1;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < PROGRAMS; k++) { /* taking turns, each first in turn */
      int p = (i + k) % PROGRAMS;
      if ((ms[p][i] = run_ms(commands[p])) < 0) return fprintf(stderr, "%s failed\n", names[p]), 1;
    }
  printf("start-up: a new process opens %s and reads 4 KiB into host memory, then exits\n", path);
  printf("%d runs each, taking turns; wall ms per process, spawn to exit\n", n);
  printf("%-26s %8s %8s\n", "program", "median", "p90");
  double median[PROGRAMS], p90[PROGRAMS];
  for (int p = 0; p < PROGRAMS; p++) {
    qsort(ms[p], (size_t)n, sizeof(double), by_value);
    median[p] = quantile(ms[p], n, 0.5);
    p90[p] = quantile(ms[p], n, 0.9);
    printf("%-26s %8.3f %8.3f\n", names[p], median[p], p90[p]);
    free(ms[p]);
  }
  double ratio = median[KVIK] / median[PLAIN], ratio90 = p90[KVIK] / p90[PLAIN];
  printf("kvik / plain C: %.2fx median, %.2fx p90 (target: at most %.1fx): %s\n", ratio, ratio90,
         TARGET, ratio <= TARGET ? "met" : "MISSED");
  print_child_maps(self, path);
  dl_iterate_phdr(print_needed, NULL);
  return 0;
}

#endif
