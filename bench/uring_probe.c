/* Whether io_uring would serve kvik's host reads better than its thread pool (issue 8, part 2):
 * random reads of SIZE bytes (default 4 KiB) from a file, pread(2) on T threads against io_uring
 * on one thread with QD reads in flight, reads per second, side by side in one run. Twice: through
 * the page cache, and with O_DIRECT (from the device: what a cold read costs). Raw system calls,
 * no liburing; a kernel or container that refuses io_uring_setup is reported as such.
 *
 * usage: bench_uring_probe FILE [SIZE] [READS]   (FILE: 1 GiB or more; defaults 4096 200000) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_QD 256

static size_t read_size = 4096;
static uint64_t slots;        /* aligned positions a read may start at */
static uint64_t measurements; /* each measurement reads other offsets: no cache below kvik helps one */

static uint64_t fresh_seed(void) { return 0x1234567u + 0x9E3779B9u * ++measurements; }

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t next_offset(uint64_t *state) {
  *state = *state * 6364136223846793005u + 1442695040888963407u;
  return (*state >> 33) % slots * read_size;
}

/* ---- pread on threads ---------------------------------------------------------------------- */

struct preader {
  int fd;
  long reads;
  uint64_t seed;
  pthread_t thread;
};

static void *preader_main(void *arg) {
  struct preader *p = arg;
  void *buf;
  if (posix_memalign(&buf, 4096, read_size)) return (void *)1;
  for (long i = 0; i < p->reads; i++)
    if (pread(p->fd, buf, read_size, (off_t)next_offset(&p->seed)) != (ssize_t)read_size) return (void *)1;
  free(buf);
  return NULL;
}

static double pread_rate(int fd, int threads, long reads) {
  struct preader p[64];
  uint64_t seed = fresh_seed();
  double start = now();
  for (int t = 0; t < threads; t++) {
    p[t] = (struct preader){fd, reads / threads, seed + (uint64_t)t, 0};
    pthread_create(&p[t].thread, NULL, preader_main, &p[t]);
  }
  int failed = 0;
  for (int t = 0; t < threads; t++) {
    void *rc;
    pthread_join(p[t].thread, &rc);
    failed |= rc != NULL;
  }
  return failed ? -1 : (double)(reads / threads * threads) / (now() - start);
}

/* ---- io_uring, raw ------------------------------------------------------------------------- */

struct ring {
  int fd;
  unsigned *sq_head, *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
  struct io_uring_sqe *sqes;
  struct io_uring_cqe *cqes;
};

static int ring_open(struct ring *r, unsigned entries) {
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  r->fd = (int)syscall(__NR_io_uring_setup, entries, &p);
  if (r->fd < 0) return -errno;
  size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
  char *sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQ_RING);
  char *cq = mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_CQ_RING);
  r->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                 r->fd, IORING_OFF_SQES);
  if (sq == MAP_FAILED || cq == MAP_FAILED || r->sqes == MAP_FAILED) return -errno;
  r->sq_head = (unsigned *)(sq + p.sq_off.head);
  r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
  r->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
  r->sq_array = (unsigned *)(sq + p.sq_off.array);
  r->cq_head = (unsigned *)(cq + p.cq_off.head);
  r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
  r->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
  r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
  return 0;
}

static void queue_read(struct ring *r, int fd, void *buf, uint64_t offset, uint64_t tag) {
  unsigned tail = *r->sq_tail, index = tail & *r->sq_mask;
  struct io_uring_sqe *sqe = &r->sqes[index];
  memset(sqe, 0, sizeof *sqe);
  sqe->opcode = IORING_OP_READ;
  sqe->fd = fd;
  sqe->addr = (uint64_t)(uintptr_t)buf;
  sqe->len = (unsigned)read_size;
  sqe->off = offset;
  sqe->user_data = tag;
  r->sq_array[index] = index;
  atomic_store_explicit((_Atomic unsigned *)r->sq_tail, tail + 1, memory_order_release);
}

/* `reads` random reads with `qd` in flight: submit, then refill each slot as it completes. */
static double uring_rate(int fd, int qd, long reads) {
  struct ring r;
  int rc = ring_open(&r, (unsigned)qd);
  if (rc < 0) return rc;
  char *bufs;
  if (posix_memalign((void **)&bufs, 4096, (size_t)qd * read_size)) return -ENOMEM;
  uint64_t seed = fresh_seed();
  long issued = 0, done = 0;
  double start = now();
  for (; issued < qd && issued < reads; issued++) queue_read(&r, fd, bufs + issued * read_size, next_offset(&seed), (uint64_t)issued);
  unsigned to_submit = (unsigned)issued;
  while (done < reads) {
    if (syscall(__NR_io_uring_enter, r.fd, to_submit, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0 && errno != EINTR)
      return -errno;
    to_submit = 0;
    unsigned head = *r.cq_head, tail = atomic_load_explicit((_Atomic unsigned *)r.cq_tail, memory_order_acquire);
    for (; head != tail; head++) {
      struct io_uring_cqe *cqe = &r.cqes[head & *r.cq_mask];
      if (cqe->res != (int)read_size) return cqe->res < 0 ? cqe->res : -EIO;
      done++;
      if (issued < reads) {
        uint64_t slot = cqe->user_data;
        queue_read(&r, fd, bufs + slot * read_size, next_offset(&seed), slot);
        issued++, to_submit++;
      }
    }
    atomic_store_explicit((_Atomic unsigned *)r.cq_head, head, memory_order_release);
  }
  double seconds = now() - start;
  close(r.fd);
  free(bufs);
  return (double)reads / seconds;
}

static void table(const char *title, int fd, long reads) {
  printf("\n%s: %zu-byte random reads per second (one run each, in this order, each at other offsets)\n", title,
         read_size);
  const int threads[] = {1, 4, 16};
  for (size_t i = 0; i < sizeof threads / sizeof threads[0]; i++)
    printf("  pread, %2d thread(s)          %12.0f\n", threads[i], pread_rate(fd, threads[i], reads));
  const int depths[] = {1, 8, 32, 128};
  for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++) {
    double rate = uring_rate(fd, depths[i], reads);
    if (rate < 0) printf("  io_uring, queue depth %3d    unavailable: %s\n", depths[i], strerror((int)-rate));
    else printf("  io_uring, queue depth %3d    %12.0f   (one thread)\n", depths[i], rate);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) return fprintf(stderr, "usage: %s FILE [SIZE] [READS]\n", argv[0]), 2;
  if (argc > 2) read_size = strtoul(argv[2], NULL, 10);
  long reads = argc > 3 ? atol(argv[3]) : 200000;
  struct stat st;
  int fd = open(argv[1], O_RDONLY), direct = open(argv[1], O_RDONLY | O_DIRECT);
  if (fd < 0 || fstat(fd, &st) != 0 || read_size == 0 || read_size % 4096) return perror(argv[1]), 1;
  slots = ((uint64_t)st.st_size - read_size) / read_size + 1;
  printf("%s: %lld bytes, %ld reads per measurement\n", argv[1], (long long)st.st_size, reads);
  table("page cache (buffered)", fd, reads);
  if (direct < 0) printf("\nO_DIRECT: cannot open: %s\n", strerror(errno));
  else table("O_DIRECT (from the device)", direct, reads / 10);
  return 0;
}
