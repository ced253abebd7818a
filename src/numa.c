/* Pool threads on the CPUs of the GPU they serve: see numa.h. */
#define _GNU_SOURCE
#include "numa.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "pool.h"
#include "settings.h"
#include "sys.h"

/* The node whose CPUs this thread runs on, -1 for none (where it ran before). */
static _Thread_local int bound_node = -1;
/* The CPUs the thread had before it was first moved, to give back. */
static _Thread_local int saved;
static _Thread_local cpu_set_t original;

int kvik__parse_cpulist(const char *text, cpu_set_t *set) {
  CPU_ZERO(set);
  const char *p = text;
  while (*p && *p != '\n') {
    char *end;
    long first = strtol(p, &end, 10), last = first;
    if (end == p || first < 0) return -1;
    if (*end == '-') {
      const char *from = end + 1;
      last = strtol(from, &end, 10);
      if (end == from || last < first) return -1;
    }
    for (long cpu = first; cpu <= last && cpu < CPU_SETSIZE; cpu++) CPU_SET((int)cpu, set);
    if (*end == ',') p = end + 1;
    else if (*end == '\0' || *end == '\n') p = end;
    else return -1;
  }
  return CPU_COUNT(set) > 0 ? 0 : -1;
}

/* The CPUs of NUMA node `node`, from sysfs; 0, or -1 where they cannot be read. */
static int node_cpus(int node, cpu_set_t *set) {
  char path[96], text[4096];
  snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
  int fd = kvik__open(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return -1;
  ssize_t n = kvik__pread(fd, text, sizeof text - 1, 0);
  close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  return kvik__parse_cpulist(text, set);
}

static void give_back_cpus(void) {
  if (saved) kvik__sched_setaffinity(&original);
  bound_node = -1;
}

static void move_to(int node) {
  cpu_set_t cpus;
  if (node_cpus(node, &cpus) < 0) return;
  if (!saved) {
    if (kvik__sched_getaffinity(&original) != 0) return;
    saved = 1;
  }
  CPU_AND(&cpus, &cpus, &original);
  if (CPU_COUNT(&cpus) > 0 && kvik__sched_setaffinity(&cpus) == 0) bound_node = node;
}

void kvik__numa_follow_device(const kvik__cuda_api *cu, CUdevice device) {
  if (!kvik__pool_in_worker()) return;
  int node = kvik__setting(KVIK_SETTING_NUMA_AFFINITY) ? kvik__device_numa_node(cu, device) : -1;
  if (node == bound_node) return;
  if (node < 0) give_back_cpus();
  else move_to(node);
}
