/* The two clocks every bench program reads: wall seconds, and the CPU seconds a program spends
 * (all of its threads, kvik's pools included) or its children spend. */
#ifndef KVIK_BENCH_CLOCK_H
#define KVIK_BENCH_CLOCK_H

#include <sys/resource.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
static inline double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* User + system seconds of RUSAGE_SELF or RUSAGE_CHILDREN (those waited for). */
static inline double cpu_seconds(int who) {
  struct rusage u;
  getrusage(who, &u);
  return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

#endif
