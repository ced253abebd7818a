/* kvik bench --device all: every GPU of the node reads a file of its own at the same time, each
 * set against its own pinned host-to-device ceiling, and the node's total against its parallel
 * pread ceiling, all measured in the same run (issue 30's targets). The CUDA driver is the
 * tool's own (bench_device.c); kvik is used through its public API only. */
#define _GNU_SOURCE

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

#define GPU_TARGET 0.90  /* each GPU's kvik read against its copy alone, all reading at once */
#define NODE_TARGET 0.85 /* the node's kvik total against its pread ceiling */
#define ORIGIN_STEP ((uint64_t)1 << 40) /* GPU g's file holds the pattern from g * this on */
#define SAMPLES 8                       /* ranges read back after a pinned copy */
#define SAMPLE 4096                     /* bytes in each */
#define MPOL_PREFERRED_ 1               /* set_mempolicy(2); glibc has no wrapper */
#define NUMA_NODES 1024
#define MASK_BITS (8 * sizeof(unsigned long))

/* What one thread per GPU does, all of them at once (gang()). */
enum work { ALLOCATE, CLEAR_DEVICE, CLEAR_PINNED, COPY, KVIK_READ, CHECK_DEVICE, CHECK_PINNED };

struct node;

struct gpu {
  struct node *node;
  int ordinal;
  kvik_cuda_device_properties props;
  int known;             /* props were filled */
  int placed;            /* its pinned memory was allocated preferring props.numa_node */
  CUcontext ctx;         /* its primary context */
  CUdeviceptr dev;       /* --size bytes of its memory */
  unsigned char *pinned; /* --size bytes of pinned host memory */
  uint64_t origin;       /* its file holds the pattern from here on, so that files differ */
  int fd;                /* its test file */
  kvik_file *file;
  pthread_t thread;
  double start, end; /* of its part of the last gang() */
  int rc;
  double alone, together, kvik; /* the best GB/s of its copy alone, copy all, kvik all */
};

struct node {
  struct bench *b;
  int n;
  struct gpu *gpus;
  enum work work;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int ready;                    /* gang threads waiting for `go` */
  int go;                       /* 1: start; -1: not all threads started, end */
  double together, pread, kvik; /* the best totals in GB/s */
  double pread_cpu, kvik_cpu;   /* CPU s/GB of those runs */
};

/* ---- one thread per GPU -------------------------------------------------------------------- */

/* Prefer NUMA node `node` for the pages the calling thread allocates. 0 or -1. */
static int prefer_node(int node) {
  unsigned long mask[NUMA_NODES / MASK_BITS] = {0};
  if (node >= NUMA_NODES) return -1;
  mask[node / MASK_BITS] = 1UL << (node % MASK_BITS);
  return (int)syscall(SYS_set_mempolicy, MPOL_PREFERRED_, mask, NUMA_NODES + 1);
}

/* The GPU's buffers, on its own thread: the driver allocates and pins cuMemHostAlloc's pages in
 * the calling thread, under its memory policy, so they land on the GPU's NUMA node, as kvik's
 * bounce buffers do; the thread ends with its policy, so nothing is put back. Where the policy
 * cannot be set (seccomp, no NUMA), the pages lie where the kernel puts them. Filling the
 * buffer with the file's pattern gives its file its content. */
static int allocate(struct gpu *g, size_t size) {
  g->placed = g->known && g->props.numa_node >= 0 && prefer_node(g->props.numa_node) == 0;
  CU_CHECK(bench_cu.cuMemHostAlloc((void **)&g->pinned, size, 0));
  CU_CHECK(bench_cu.cuMemAlloc(&g->dev, size));
  bench_pattern_fill(g->pinned, g->origin, size);
  return CLI_OK;
}

static int work(struct node *nd, struct gpu *g) {
  size_t size = nd->b->opt.size;
  char what[64];
  switch (nd->work) {
  case ALLOCATE: return allocate(g, size);
  case CLEAR_DEVICE:
    /* The memset runs on the legacy default stream, which kvik's streams do not wait for. */
    CU_CHECK(bench_cu.cuMemsetD8(g->dev, 0, size));
    CU_CHECK(bench_cu.cuCtxSynchronize());
    return CLI_OK;
  case CLEAR_PINNED: memset(g->pinned, 0, size); return CLI_OK;
  case COPY: CU_CHECK(bench_cu.cuMemcpyHtoD(g->dev, g->pinned, size)); return CLI_OK;
  case KVIK_READ:
    snprintf(what, sizeof what, "kvik_file_read into GPU %d", g->ordinal);
    return bench_check_count(nd->b, kvik_file_read(g->file, (void *)(uintptr_t)g->dev, size, 0),
                             what);
  case CHECK_DEVICE:
    CU_CHECK(bench_cu.cuMemcpyDtoH(g->pinned, g->dev, size));
    snprintf(what, sizeof what, "kvik_file_read into GPU %d", g->ordinal);
    return bench_check_pattern(g->pinned, g->origin, 0, size, what);
  case CHECK_PINNED:
    snprintf(what, sizeof what, "pread into GPU %d's pinned memory", g->ordinal);
    return bench_check_pattern(g->pinned, g->origin, 0, size, what);
  }
  return CLI_ERROR;
}

/* Its context current, then wait until every GPU's thread is ready, so that they start
 * together; its own start and end are timed. */
static void *gpu_main(void *arg) {
  struct gpu *g = arg;
  struct node *nd = g->node;
  CUresult r = bench_cu.cuCtxSetCurrent(g->ctx);
  pthread_mutex_lock(&nd->lock);
  nd->ready++;
  pthread_cond_broadcast(&nd->cond);
  while (!nd->go) pthread_cond_wait(&nd->cond, &nd->lock);
  int go = nd->go > 0;
  pthread_mutex_unlock(&nd->lock);
  g->start = bench_now();
  g->rc = !go ? CLI_ERROR : r ? bench_cuda_fail("cuCtxSetCurrent", r) : work(nd, g);
  g->end = bench_now();
  return NULL;
}

/* Run `w` on one thread per GPU, all at once. A CLI exit code. */
static int gang(struct node *nd, enum work w) {
  nd->work = w;
  nd->ready = nd->go = 0;
  int started = 0, rc = CLI_OK;
  for (; started < nd->n; started++) {
    int err = pthread_create(&nd->gpus[started].thread, NULL, gpu_main, &nd->gpus[started]);
    if (err) {
      rc = bench_sys_fail("pthread_create", -err);
      break;
    }
  }
  pthread_mutex_lock(&nd->lock);
  while (nd->ready < started) pthread_cond_wait(&nd->cond, &nd->lock);
  nd->go = rc == CLI_OK ? 1 : -1;
  pthread_cond_broadcast(&nd->cond);
  pthread_mutex_unlock(&nd->lock);
  for (int i = 0; i < started; i++) {
    pthread_join(nd->gpus[i].thread, NULL);
    if (nd->gpus[i].rc != CLI_OK) rc = CLI_ERROR;
  }
  return rc;
}

static void keep_best(double *best, double rate) {
  if (rate > *best) *best = rate;
}

/* The node's rate in the last gang(): every GPU's bytes over the time from the first start to
 * the last end; each GPU's own rate is its bytes over its own time. */
static double gang_rate(struct node *nd, int is_kvik) {
  double gb = (double)nd->b->opt.size / 1e9, first = nd->gpus[0].start, last = nd->gpus[0].end;
  for (int i = 0; i < nd->n; i++) {
    struct gpu *g = &nd->gpus[i];
    keep_best(is_kvik ? &g->kvik : &g->together, gb / (g->end - g->start));
    if (g->start < first) first = g->start;
    if (g->end > last) last = g->end;
  }
  return gb * nd->n / (last - first);
}

/* ---- the measures ---------------------------------------------------------------------------- */

/* After a pinned copy into zeroed memory: SAMPLES ranges of it, its first and last bytes among
 * them, read back and set against the file's pattern. */
static int check_samples(struct node *nd, struct gpu *g) {
  size_t size = nd->b->opt.size, len = size < SAMPLE ? size : SAMPLE;
  char what[64];
  snprintf(what, sizeof what, "pinned cuMemcpyHtoD into GPU %d", g->ordinal);
  CU_CHECK(bench_cu.cuCtxSetCurrent(g->ctx));
  for (int s = 0; s < SAMPLES; s++) {
    size_t at = (size - len) / (SAMPLES - 1) * (size_t)s;
    if (s == SAMPLES - 1) at = size - len;
    CU_CHECK(bench_cu.cuMemcpyDtoH(nd->b->scratch, g->dev + at, len));
    if (bench_check_pattern(nd->b->scratch, g->origin, at, len, what) != CLI_OK) return CLI_ERROR;
  }
  return CLI_OK;
}

/* Each GPU's own ceiling: one pinned copy of the file's size, that GPU alone. */
static int measure_alone(struct node *nd, int nthreads, int rep) {
  double gb = (double)nd->b->opt.size / 1e9;
  bench_progress(0, "copy alone", nthreads, rep, nd->b->opt.repeat);
  if (gang(nd, CLEAR_DEVICE) != CLI_OK) return CLI_ERROR;
  for (int i = 0; i < nd->n; i++) {
    struct gpu *g = &nd->gpus[i];
    CU_CHECK(bench_cu.cuCtxSetCurrent(g->ctx));
    double start = bench_now();
    CU_CHECK(bench_cu.cuMemcpyHtoD(g->dev, g->pinned, nd->b->opt.size));
    double rate = gb / (bench_now() - start);
    if (check_samples(nd, g) != CLI_OK) return CLI_ERROR;
    keep_best(&g->alone, rate);
  }
  return CLI_OK;
}

/* The same copy on every GPU at once: the node's links and memory when all of them copy. */
static int measure_together(struct node *nd, int nthreads, int rep) {
  bench_progress(0, "copy all", nthreads, rep, nd->b->opt.repeat);
  if (gang(nd, CLEAR_DEVICE) != CLI_OK || gang(nd, COPY) != CLI_OK) return CLI_ERROR;
  keep_best(&nd->together, gang_rate(nd, 0));
  for (int i = 0; i < nd->n; i++)
    if (check_samples(nd, &nd->gpus[i]) != CLI_OK) return CLI_ERROR;
  return CLI_OK;
}

struct span {
  pthread_t thread;
  struct node *node;
  uint64_t begin, end; /* of the files laid end to end */
  int err;
};

/* Read a span of the files laid end to end, each part into its GPU's pinned memory. */
static void *span_main(void *arg) {
  struct span *s = arg;
  uint64_t size = s->node->b->opt.size;
  for (uint64_t at = s->begin; at < s->end && !s->err;) {
    struct gpu *g = &s->node->gpus[at / size];
    uint64_t offset = at % size, len = size - offset < s->end - at ? size - offset : s->end - at;
    s->err = bench_io_loop(g->fd, g->pinned + offset, (size_t)len, offset, 0);
    at += len;
  }
  return NULL;
}

/* The parallel loop one would write by hand, as `kvik bench --device`'s (b), over every file at
 * once: T threads in all, each a contiguous, page-aligned 1/T of the files laid end to end.
 * Thread start-up is timed too. 0 or -errno. */
static int read_files(struct node *nd, int nthreads) {
  struct span *s = calloc((size_t)nthreads, sizeof *s);
  if (!s) return -ENOMEM;
  uint64_t total = nd->b->opt.size * (uint64_t)nd->n,
           step = total / (uint64_t)nthreads / 4096 * 4096;
  int started = 0, err = 0;
  for (; started < nthreads; started++) {
    uint64_t begin = step * (uint64_t)started, end = started == nthreads - 1 ? total : begin + step;
    s[started] = (struct span){.node = nd, .begin = begin, .end = end};
    int rc = pthread_create(&s[started].thread, NULL, span_main, &s[started]);
    if (rc != 0) {
      err = -rc;
      break;
    }
  }
  for (int i = 0; i < started; i++) {
    pthread_join(s[i].thread, NULL);
    if (!err) err = s[i].err;
  }
  free(s);
  return err;
}

/* The node's pread ceiling: every file read at once into pinned memory, T threads in all. */
static int measure_pread(struct node *nd, int nthreads, int rep) {
  double gb = (double)nd->b->opt.size * nd->n / 1e9;
  bench_progress(0, "pread all", nthreads, rep, nd->b->opt.repeat);
  if (gang(nd, CLEAR_PINNED) != CLI_OK) return CLI_ERROR;
  double cpu = bench_cpu_seconds(0), start = bench_now();
  int err = read_files(nd, nthreads);
  double rate = gb / (bench_now() - start);
  cpu = (bench_cpu_seconds(0) - cpu) / gb;
  if (err) return bench_sys_fail("pread", err);
  if (gang(nd, CHECK_PINNED) != CLI_OK) return CLI_ERROR;
  if (rate > nd->pread) {
    nd->pread = rate;
    nd->pread_cpu = cpu;
  }
  return CLI_OK;
}

/* kvik: every GPU's thread reads its own file at once, on kvik's one pool of T threads. */
static int measure_kvik(struct node *nd, int nthreads, int rep) {
  double gb = (double)nd->b->opt.size * nd->n / 1e9;
  bench_progress(0, "kvik all", nthreads, rep, nd->b->opt.repeat);
  if (gang(nd, CLEAR_DEVICE) != CLI_OK) return CLI_ERROR;
  double cpu = bench_cpu_seconds(0);
  if (gang(nd, KVIK_READ) != CLI_OK) return CLI_ERROR;
  cpu = (bench_cpu_seconds(0) - cpu) / gb;
  double rate = gang_rate(nd, 1);
  if (gang(nd, CHECK_DEVICE) != CLI_OK) return CLI_ERROR;
  if (rate > nd->kvik) {
    nd->kvik = rate;
    nd->kvik_cpu = cpu;
  }
  return CLI_OK;
}

/* ---- the table ------------------------------------------------------------------------------ */

static void print_targets(const struct node *nd) {
  double sum_alone = 0, lowest = 0;
  int low = 0, missed = 0;
  for (int i = 0; i < nd->n; i++) {
    const struct gpu *g = &nd->gpus[i];
    double ratio = g->kvik / g->alone;
    sum_alone += g->alone;
    missed += ratio < GPU_TARGET;
    if (i == 0 || ratio < lowest) lowest = ratio, low = i;
  }
  double node_ratio = nd->kvik / nd->pread;
  int per_gpu = nd->pread >= sum_alone;
  printf("target, every GPU >= %.2fx its copy alone while all read: %s (%d of %d below; lowest "
         "%.2fx, GPU %d)%s\n",
         GPU_TARGET, missed ? "missed" : "held", missed, nd->n, lowest, nd->gpus[low].ordinal,
         per_gpu ? " <- applies" : "");
  printf("target, node total >= %.2fx the pread ceiling: %s (%.2fx)%s\n", NODE_TARGET,
         node_ratio < NODE_TARGET ? "missed" : "held", node_ratio, per_gpu ? "" : " <- applies");
  printf("(the per-GPU target applies where the pread ceiling, %.2f GB/s, is at least the copies "
         "alone together, %.2f GB/s; the node target elsewhere)\n",
         nd->pread, sum_alone);
}

static void print_table(const struct node *nd, int nthreads) {
  const struct bench *b = nd->b;
  double sum_alone = 0;
  bench_progress_clear();
  printf("\nREAD, every GPU at once: page cache -> device memory, T = %d%s (GB/s, best of %d)\n",
         nthreads, nthreads == b->default_threads ? " (default)" : "", b->opt.repeat);
  printf("%-6s  %10s  %10s  %10s  %10s  %10s  kvik >= %.2fx alone\n", "GPU", "copy alone",
         "copy all", "kvik all", "kvik/alone", "kvik/all", GPU_TARGET);
  for (int i = 0; i < nd->n; i++) {
    const struct gpu *g = &nd->gpus[i];
    sum_alone += g->alone;
    printf("%-6d  %10.2f  %10.2f  %10.2f  %9.2fx  %9.2fx  %s\n", g->ordinal, g->alone, g->together,
           g->kvik, g->kvik / g->alone, g->kvik / g->together,
           g->kvik / g->alone < GPU_TARGET ? "missed" : "held");
  }
  printf("%-6s  %10.2f  %10.2f  %10.2f  %9.2fx  %9.2fx  (copy alone: the sum)\n", "node", sum_alone,
         nd->together, nd->kvik, nd->kvik / sum_alone, nd->kvik / nd->together);
  printf("pread ceiling, every file at once into pinned memory on T threads: %.2f GB/s; kvik all "
         "%.2fx of it\nCPU s/GB (user + system): pread %.3f, kvik all %.3f\n",
         nd->pread, nd->kvik / nd->pread, nd->pread_cpu, nd->kvik_cpu);
  print_targets(nd);
  fflush(stdout);
}

/* One table: kvik's num_threads = T; the measures take turns within each repetition, so that a
 * noisy neighbour or a drifting clock hits all alike. */
static int node_table(struct node *nd, int nthreads) {
  if (kvik_setting_set(KVIK_SETTING_NUM_THREADS, nthreads) < 0) return bench_kvik_fail();
  nd->together = nd->pread = nd->kvik = 0;
  for (int i = 0; i < nd->n; i++) nd->gpus[i].alone = nd->gpus[i].together = nd->gpus[i].kvik = 0;
  for (int rep = 1; rep <= nd->b->opt.repeat; rep++) {
    if (measure_pread(nd, nthreads, rep) != CLI_OK || measure_alone(nd, nthreads, rep) != CLI_OK ||
        measure_together(nd, nthreads, rep) != CLI_OK || measure_kvik(nd, nthreads, rep) != CLI_OK)
      return CLI_ERROR;
  }
  print_table(nd, nthreads);
  return CLI_OK;
}

/* ---- setup ---------------------------------------------------------------------------------- */

/* "gen 4 x16"; "unknown" for what sysfs does not say. */
static void format_link(char *text, size_t len, int generation, int width) {
  if (generation <= 0 && width <= 0) snprintf(text, len, "unknown");
  else if (generation <= 0) snprintf(text, len, "x%d", width);
  else if (width <= 0) snprintf(text, len, "gen %d", generation);
  else snprintf(text, len, "gen %d x%d", generation, width);
}

static void print_gpu(const struct gpu *g) {
  const kvik_cuda_device_properties *p = &g->props;
  if (!g->known) {
    printf("  GPU %d: ? (kvik_cuda_device_get_properties failed)\n", g->ordinal);
    return;
  }
  char node[16] = "unknown", link[32], max_link[32];
  if (p->numa_node >= 0) snprintf(node, sizeof node, "%d", p->numa_node);
  format_link(link, sizeof link, p->link_generation, p->link_width);
  format_link(max_link, sizeof max_link, p->max_link_generation, p->max_link_width);
  printf("  GPU %d: %s, PCI bus id %s, NUMA node %s, PCIe %s (max %s); its pinned memory %s\n",
         g->ordinal, p->name, *p->pci_bus_id ? p->pci_bus_id : "unknown", node, link, max_link,
         g->placed ? "on its node" : "anywhere");
}

/* Each GPU's context, buffers, test file and kvik handle. GPU 0 reads the command's test file;
 * each other GPU a file of its own, holding the pattern from its origin on. */
static int setup_gpus(struct node *nd) {
  struct bench *b = nd->b;
  for (int i = 0; i < nd->n; i++) {
    struct gpu *g = &nd->gpus[i];
    *g = (struct gpu){.node = nd, .ordinal = i, .origin = ORIGIN_STEP * (uint64_t)i, .fd = -1};
    g->props.struct_size = sizeof g->props;
    g->known = kvik_cuda_device_get_properties(i, &g->props) == 0;
    if (bench_cuda_context(i, &g->ctx) != CLI_OK) return CLI_ERROR;
  }
  if (gang(nd, ALLOCATE) != CLI_OK) return CLI_ERROR;
  for (int i = 0; i < nd->n; i++) {
    struct gpu *g = &nd->gpus[i];
    const char *path = test_path;
    g->fd = b->fd;
    if (i > 0 && bench_add_file(b, g->pinned, &path, &g->fd) != CLI_OK) return CLI_ERROR;
    if (kvik_file_open(path, "r", 0, &g->file) < 0) return bench_kvik_fail();
  }
  return CLI_OK;
}

static void release(struct node *nd) {
  for (int i = 0; i < nd->n; i++) {
    struct gpu *g = &nd->gpus[i];
    kvik_file_free(g->file);
    if (g->ctx) bench_cu.cuCtxSetCurrent(g->ctx);
    if (g->pinned) bench_cu.cuMemFreeHost(g->pinned);
    if (g->dev) bench_cu.cuMemFree(g->dev);
  }
  free(nd->gpus);
}

int bench_all(struct bench *b) {
  if (bench_cuda_load() != CLI_OK) return CLI_ERROR;
  int n = kvik_cuda_device_count();
  if (n < 0) return bench_kvik_fail();
  if (n > BENCH_MAX_GPUS) {
    fprintf(stderr, "kvik bench --device all: %d GPUs, at most %d are measured\n", n,
            BENCH_MAX_GPUS);
    return CLI_ERROR;
  }
  struct node nd = {.b = b, .n = n};
  nd.gpus = calloc((size_t)n, sizeof *nd.gpus);
  if (!nd.gpus) return bench_sys_fail("buffers", -ENOMEM);
  pthread_mutex_init(&nd.lock, NULL);
  pthread_cond_init(&nd.cond, NULL);
  int rc = setup_gpus(&nd);
  if (rc == CLI_OK) {
    printf("kvik bench --device all: %d GPU%s, each reading a file of its own at once\n", n,
           n == 1 ? "" : "s");
    for (int i = 0; i < n; i++) print_gpu(&nd.gpus[i]);
  }
  for (int i = 0; rc == CLI_OK && i < b->opt.ncounts; i++) rc = node_table(&nd, b->opt.counts[i]);
  release(&nd);
  pthread_cond_destroy(&nd.cond);
  pthread_mutex_destroy(&nd.lock);
  return rc;
}
