/* Pool threads on the CPUs of the GPU they serve (KVIK_SETTING_NUMA_AFFINITY): on a node with
 * several sockets, a thread that copies between the page cache and a GPU's pinned bounce buffers
 * (which lie on the GPU's NUMA node, bounce.c) may move them faster from that node's cores. */
#ifndef KVIK_SRC_NUMA_H
#define KVIK_SRC_NUMA_H

#include <sched.h>

#include "cuda.h"

/* Called by a thread about to move data for CUDA device `device`; does nothing on a thread that
 * is not one of kvik's IO pool (the caller's threads stay where the caller put them). With the
 * setting on and the device's NUMA node known (kvik__device_numa_node), the pool thread runs from
 * now on on that node's CPUs (those of them it may run on), until it serves a device of another
 * node. With the setting off, or a device of no known node, a thread that was moved gets back the
 * CPUs it had. Anything that fails leaves the thread where it runs: the placement is a
 * preference, never an error. Costs a few loads and compares where nothing changes. */
void kvik__numa_follow_device(const kvik__cuda_api *cu, CUdevice device);

/* The CPUs of a sysfs cpulist ("0-15,32-47\n") in `set`: 0, or -1 where the text is not one or
 * names no CPU. */
int kvik__parse_cpulist(const char *text, cpu_set_t *set);

#endif
