/*
 * Buffers the process cannot use (issue 24): a read into memory it cannot write, or a write from
 * memory it cannot read, fails with -EFAULT, as pread(2) and pwrite(2) report it, and never
 * crashes: through the page cache, through O_DIRECT (KVIK_SETTING_AUTO_DIRECT_IO_READ/WRITE)
 * from page-aligned buffers and through its bounce buffer from unaligned ones, in the unaligned
 * head and tail of a range, in blocking calls, in futures of several tasks, and in batches (with
 * io_uring and without). What the result says is true:
 *  - a read returns -EFAULT; each byte of the buffer is then either what it held before or the
 *    file's, and those that are the file's number exactly kvik_future_bytes_done() (futures) or
 *    the count in the message's "(X of Y bytes transferred)" (blocking calls);
 *  - a write returns -EFAULT; each byte of the file is old or new, and the new ones number
 *    exactly the count the future and the message give.
 * Buffers are one mapping with some pages made read-only or inaccessible: all of them, one page in
 * the middle (the first part of the buffer is good), the page of the range's head, or of its tail.
 * Each case runs in a child process, so that a crash fails the case instead of the test. Where
 * the system refuses process_vm_readv/writev (a seccomp filter here, with ENOSYS and with EPERM),
 * unaligned buffers go through the page cache: the data stays right and bad buffers still give
 * -EFAULT.
 *
 * O_DIRECT needs a file system that has it (tmpfs has not): TMPDIR's if it does, else an ext4
 * image mounted on a loop device in a mount namespace of the test's own (root only). The test is
 * skipped (77) where neither is possible.
 */
#include "test.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>

#define PAGE 4096
#define IO_BYTES ((size_t)1 << 20)
#define FILE_BYTES (IO_BYTES + 4 * PAGE)
#define MAP_BYTES (IO_BYTES + 2 * PAGE)
#define TASK ((size_t)128 << 10)
#define FILL 0xEE /* what a read buffer holds before the read; no file byte has this value */

static struct {
  char *tmp;  /* the test's temporary directory */
  char *mnt;  /* the loop mount inside it, or NULL */
  char *path; /* the file */
  unsigned char *old_bytes, *new_bytes; /* differ at every byte; neither holds FILL */
} env;

/* ---- the cases ------------------------------------------------------------------------------ */

typedef enum { BLOCKING, FUTURE, BATCH_RING, BATCH_POOL } api;
static const char *const api_names[] = {"blocking", "future", "batch (io_uring)",
                                        "batch (thread pool)"};

/* Which pages of the mapping the case takes away. */
typedef enum { ALL, MIDDLE, HEAD, TAIL } bad_part;
static const char *const part_names[] = {"all pages", "a page in the middle", "the first page",
                                         "the last page"};

typedef struct bad_case {
  int write;
  api how;
  int direct;     /* KVIK_SETTING_AUTO_DIRECT_IO_READ/WRITE */
  size_t skew;    /* the buffer starts this far into the mapping */
  int64_t offset; /* in the file */
  bad_part part;
  int prot; /* of the pages taken away: PROT_NONE, or PROT_READ (reads only) */
} bad_case;

/* The pages of the mapping [from, to) that the case takes away. With an unaligned file offset, the
 * range's head (its bytes before the file's first page boundary, which go through the page cache)
 * lies in the first page of the buffer, and its tail (the bytes after the last boundary) in the
 * last: alone there when the buffer starts at page + 1. */
static void bad_pages(const bad_case *c, size_t *from, size_t *to) {
  size_t last = (c->skew + IO_BYTES - 1) & ~(size_t)(PAGE - 1);
  *from = c->part == MIDDLE ? IO_BYTES / 2 : c->part == TAIL ? last : 0;
  *to = c->part == ALL ? MAP_BYTES : *from + PAGE;
}

static void describe(const bad_case *c, char *out, size_t len) {
  snprintf(out, len, "%s %s, O_DIRECT %s, buffer at page + %zu, file offset %lld, %s %s",
           api_names[c->how], c->write ? "write" : "read", c->direct ? "on" : "off", c->skew,
           (long long)c->offset, part_names[c->part],
           c->prot == PROT_NONE ? "inaccessible" : "read-only");
}

/* "(X of Y bytes transferred)" at the end of a failed request's message: X, or -1. */
static long long count_in_message(const char *message) {
  const char *open = strrchr(message, '(');
  unsigned long long x, y;
  if (!open || sscanf(open, "(%llu of %llu bytes transferred)", &x, &y) != 2) return -1;
  ASSERT_EQ(y, IO_BYTES);
  return (long long)x;
}

/* Each byte of got is `before` (an array, or the value fill) or `after`; returns how many are
 * `after`. */
static long long count_after(const unsigned char *got, const unsigned char *before, int fill,
                             const unsigned char *after) {
  long long changed = 0;
  for (size_t i = 0; i < IO_BYTES; i++) {
    unsigned char old = before ? before[i] : (unsigned char)fill;
    if (got[i] == after[i])
      changed++;
    else if (got[i] != old)
      FAIL_AT("byte %zu is %#x, neither %#x (before) nor %#x (after)", i, got[i], old, after[i]);
  }
  return changed;
}

/* One request of IO_BYTES, as the case says: its result, with the bytes it reports done (-1 for
 * batches, which report none) and its message. */
static ssize_t transfer(const bad_case *c, kvik_file *f, unsigned char *buf, long long *reported,
                        char *message, size_t len) {
  *reported = -1;
  ssize_t rc;
  if (c->how == BLOCKING) {
    rc = c->write ? kvik_file_write(f, buf, IO_BYTES, c->offset)
                  : kvik_file_read(f, buf, IO_BYTES, c->offset);
    snprintf(message, len, "%s", kvik_last_error());
    if (rc < 0) *reported = count_in_message(message);
  } else if (c->how == FUTURE) {
    kvik_future *future;
    ASSERT_OK(c->write ? kvik_file_pwrite(f, buf, IO_BYTES, c->offset, TASK, &future)
                       : kvik_file_pread(f, buf, IO_BYTES, c->offset, TASK, &future));
    rc = kvik_future_wait(future);
    snprintf(message, len, "%s", kvik_last_error());
    *reported = (long long)kvik_future_bytes_done(future);
    if (rc < 0) ASSERT_EQ(count_in_message(message), *reported);
    kvik_future_free(future);
  } else {
    kvik_batch *b;
    ASSERT_OK(kvik_batch_create(4, &b));
    kvik_batch_op ops[4];
    size_t part = IO_BYTES / 4;
    kvik_batch_opcode opcode = c->write ? KVIK_BATCH_WRITE : KVIK_BATCH_READ;
    for (size_t i = 0; i < 4; i++)
      ops[i] = (kvik_batch_op){f, opcode, buf + i * part, part, c->offset + (int64_t)(i * part), 0};
    ASSERT_OK(kvik_batch_submit(b, ops, 4));
    kvik_batch_event events[4];
    rc = (ssize_t)IO_BYTES;
    for (int got = 0; got < 4;) {
      int n = kvik_batch_wait(b, 1, events, 4, -1);
      ASSERT(n > 0);
      for (int i = 0; i < n; i++) {
        if (events[i].status != KVIK_BATCH_COMPLETE) rc = events[i].result;
        else ASSERT_EQ(events[i].result, part);
      }
      got += n;
    }
    snprintf(message, len, "batch operation failed with %s", kvik_err_name((int)rc));
    kvik_batch_free(b);
  }
  return rc;
}

static void set_up_io(const bad_case *c) {
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_READ, c->direct));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_AUTO_DIRECT_IO_WRITE, c->direct));
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_IO_URING, c->how == BATCH_POOL ? KVIK_OFF : KVIK_ON));
  /* Futures of several tasks, on the pool. */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_GDS_THRESHOLD, 0));
  /* Several bounce buffer chunks per task: a write that fails part way has written some. */
  ASSERT_OK(kvik_setting_set(KVIK_SETTING_BOUNCE_BUFFER_SIZE, 8 * PAGE));
}

/* The case, in the child: the file holds old_bytes, the buffer's good pages new_bytes (a write)
 * or FILL (a read). */
static void run_case(const bad_case *c) {
  set_up_io(c);
  test_write_file(env.path, env.old_bytes, FILE_BYTES);
  /* A direct read of what the page cache holds reads from the cache (issue 29): out of it, the
   * read takes the O_DIRECT path whose bad buffers this checks. */
  if (c->direct && !c->write) ASSERT_OK(kvik_page_cache_drop(env.path));
  unsigned char *map =
      mmap(NULL, MAP_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT(map != MAP_FAILED);
  unsigned char *buf = map + c->skew;
  if (c->write)
    memcpy(buf, env.new_bytes + c->offset, IO_BYTES);
  else
    memset(map, FILL, MAP_BYTES);
  size_t from, to;
  bad_pages(c, &from, &to);
  ASSERT_EQ(mprotect(map + from, to - from, c->prot), 0);
  kvik_file *f;
  ASSERT_OK(kvik_file_open(env.path, "r+", 0, &f));
  long long reported;
  char message[1024];
  ssize_t rc = transfer(c, f, buf, &reported, message, sizeof message);
  kvik_file_free(f);
  if (rc != -EFAULT)
    FAIL_AT("returned %zd (%s), expected -EFAULT: %s", rc, kvik_err_name((int)rc), message);
  if (c->how == BLOCKING || c->how == FUTURE) {
    if (!strstr(message, env.path)) FAIL_AT("message \"%s\" lacks the path", message);
    if (!strstr(message, c->write ? "pwrite" : "pread"))
      FAIL_AT("message \"%s\" lacks the operation", message);
  }
  long long changed;
  if (c->write) {
    size_t n;
    unsigned char *content = test_read_file(env.path, &n);
    ASSERT_EQ(n, FILE_BYTES);
    changed =
        count_after(content + c->offset, env.old_bytes + c->offset, 0, env.new_bytes + c->offset);
    ASSERT_SAME_BYTES(content, env.old_bytes, (size_t)c->offset);
    ASSERT_SAME_BYTES(content + c->offset + IO_BYTES, env.old_bytes + c->offset + IO_BYTES,
                      FILE_BYTES - IO_BYTES - (size_t)c->offset);
    free(content);
  } else {
    ASSERT_EQ(mprotect(map + from, to - from, PROT_READ | PROT_WRITE), 0);
    changed = count_after(buf, NULL, FILL, env.old_bytes + c->offset);
  }
  if (reported >= 0 && changed != reported)
    FAIL_AT("%lld bytes %s, but the request reports %lld: %s", changed,
            c->write ? "reached the file" : "were read", reported, message);
  if (getenv("KVIK_TEST_VERBOSE")) printf("  %zd, %lld bytes: %s\n", rc, changed, message);
  munmap(map, MAP_BYTES);
}

/* Good unaligned buffers where the bounce buffer's copies are refused: the data is right. */
static void good_unaligned_write(void) {
  bad_case c = {1, FUTURE, 1, 1, 100, ALL, 0};
  set_up_io(&c);
  test_write_file(env.path, env.old_bytes, FILE_BYTES);
  unsigned char *buf = malloc(IO_BYTES + 1);
  memcpy(buf + 1, env.new_bytes + 100, IO_BYTES);
  kvik_file *f;
  ASSERT_OK(kvik_file_open(env.path, "r+", 0, &f));
  ASSERT_EQ(kvik_file_write(f, buf + 1, IO_BYTES, 100), IO_BYTES);
  kvik_file_free(f);
  size_t n;
  unsigned char *content = test_read_file(env.path, &n);
  ASSERT_SAME_BYTES(content + 100, env.new_bytes + 100, IO_BYTES);
  free(content);
  free(buf);
}

static void good_unaligned_read(void) {
  bad_case c = {0, FUTURE, 1, 1, 100, ALL, 0};
  set_up_io(&c);
  test_write_file(env.path, env.new_bytes, FILE_BYTES);
  unsigned char *buf = malloc(IO_BYTES + 1);
  memset(buf, FILL, IO_BYTES + 1);
  kvik_file *f;
  ASSERT_OK(kvik_file_open(env.path, "r", 0, &f));
  ASSERT_EQ(kvik_file_read(f, buf + 1, IO_BYTES, 100), IO_BYTES);
  ASSERT_SAME_BYTES(buf + 1, env.new_bytes + 100, IO_BYTES);
  kvik_file_free(f);
  free(buf);
}

/* With a seccomp filter that fails process_vm_readv/writev with err, from now on. */
static void refuse_vm_copies(int err) {
  struct sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 1, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned)err),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog program = {(unsigned short)(sizeof code / sizeof code[0]), code};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
    printf("no seccomp filter: %s\n", strerror(errno));
    exit(TEST_SKIP);
  }
}

/* ---- running them --------------------------------------------------------------------------- */

static int cases, failures, skipped;

/* Runs body(arg) in a child: a crash or a failed assertion fails the case, a skip is counted. */
static void in_child(const char *what, void (*body)(const void *), const void *arg) {
  cases++;
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) FAIL_AT("fork: %s", strerror(errno));
  if (pid == 0) {
    body(arg);
    fflush(NULL);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == TEST_SKIP) {
    skipped++;
  } else if (WIFSIGNALED(status)) {
    fprintf(stderr, "FAIL [%s]: killed by signal %d (%s)\n", what, WTERMSIG(status),
            strsignal(WTERMSIG(status)));
    failures++;
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "FAIL [%s]: exited with %d\n", what, WEXITSTATUS(status));
    failures++;
  } else if (getenv("KVIK_TEST_VERBOSE")) {
    printf("ok [%s]\n", what);
  }
}

static void case_body(const void *arg) { run_case(arg); }

static void run_cases(int refused_err) {
  static const int prots[] = {PROT_NONE, PROT_READ};
  static const size_t skews[] = {0, 1};
  static const int64_t offsets[] = {0, 100};
  static const api apis[] = {BLOCKING, FUTURE, BATCH_RING, BATCH_POOL};
  for (int write = 0; write < 2; write++)
    for (size_t a = 0; a < sizeof apis / sizeof apis[0]; a++)
      for (int direct = 0; direct < 2; direct++)
        for (size_t s = 0; s < sizeof skews / sizeof skews[0]; s++)
          for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++)
            for (int part = ALL; part <= TAIL; part++)
              for (size_t p = 0; p < sizeof prots / sizeof prots[0]; p++) {
                if (write && prots[p] == PROT_READ) continue; /* a write may read it */
                if ((part == HEAD || part == TAIL) && offsets[o] == 0)
                  continue; /* no head or tail */
                if (apis[a] >= BATCH_RING && offsets[o] != 0) continue; /* batches: one layout */
                bad_case c = {write, apis[a], direct, skews[s], offsets[o], (bad_part)part,
                              prots[p]};
                char what[256];
                describe(&c, what, sizeof what);
                if (refused_err) {
                  if (!direct || skews[s] == 0) continue; /* the bounce buffer is what changes */
                  snprintf(what + strlen(what), sizeof what - strlen(what),
                           ", process_vm_*v refused with %s", strerror(refused_err));
                }
                in_child(what, case_body, &c);
              }
}

static void good_write_body(const void *arg) {
  (void)arg;
  good_unaligned_write();
}

static void good_read_body(const void *arg) {
  (void)arg;
  good_unaligned_read();
}

/* Each case in a child of its own, so that each meets the refusal first. */
static void refused_body(const void *arg) {
  int err = *(const int *)arg;
  cases = failures = 0; /* this child's own */
  refuse_vm_copies(err);
  in_child("good unaligned write, process_vm_*v refused", good_write_body, NULL);
  in_child("good unaligned read, process_vm_*v refused", good_read_body, NULL);
  run_cases(err);
  printf("%d cases with process_vm_*v refused with %s, %d failures\n", cases, strerror(err),
         failures);
  fflush(NULL);
  exit(failures ? 1 : 0);
}

/* ---- a file system with O_DIRECT ------------------------------------------------------------ */

/* An ext4 image on a loop device, mounted in a mount namespace of this process (before any thread
 * starts) on env.tmp/mnt. Returns NULL, or why it cannot be. */
static const char *mount_ext4(void) {
  if (geteuid() != 0) return "not root";
  if (unshare(CLONE_NEWNS) != 0) return "no mount namespace";
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
    return "cannot make the mounts private";
  env.mnt = test_path(env.tmp, "mnt");
  char cmd[4096 * 3];
  snprintf(cmd, sizeof cmd,
           "truncate -s 64M '%s/ext4.img' && mkfs.ext4 -q '%s/ext4.img' && mkdir '%s' && "
           "mount -o loop '%s/ext4.img' '%s'",
           env.tmp, env.tmp, env.mnt, env.tmp, env.mnt);
  if (system(cmd) != 0) {
    free(env.mnt);
    env.mnt = NULL;
    return "cannot make and mount an ext4 image (mkfs.ext4, a loop device)";
  }
  return NULL;
}

/* The directory for the file: env.tmp where it has O_DIRECT, else the loop mount. */
static const char *direct_io_dir(void) {
  env.tmp = test_mkdtemp();
  if (kvik_direct_io_supported(env.tmp) == 1) return env.tmp;
  const char *why = mount_ext4();
  if (why) {
    printf("skip: no O_DIRECT in %s, and %s\n", env.tmp, why);
    test_rmdir(env.tmp);
    exit(TEST_SKIP);
  }
  if (kvik_direct_io_supported(env.mnt) != 1)
    FAIL_AT("no O_DIRECT on the ext4 loop mount %s", env.mnt);
  printf("O_DIRECT on an ext4 loop mount (none in %s)\n", env.tmp);
  return env.mnt;
}

int main(void) {
  const char *dir = direct_io_dir();
  env.path = test_path(dir, "data");
  env.old_bytes = malloc(FILE_BYTES);
  env.new_bytes = malloc(FILE_BYTES);
  uint64_t seed = 24;
  for (size_t i = 0; i < FILE_BYTES; i++) {
    env.old_bytes[i] = (unsigned char)test_below(&seed, FILL);
    env.new_bytes[i] = (unsigned char)(env.old_bytes[i] + 1 + test_below(&seed, FILL - 1)) % FILL;
  }
  run_cases(0);
  static const int refusals[] = {ENOSYS, EPERM};
  for (size_t i = 0; i < 2; i++) in_child(strerror(refusals[i]), refused_body, &refusals[i]);
  if (env.mnt) umount2(env.mnt, MNT_DETACH);
  free(env.mnt);
  free(env.path);
  free(env.old_bytes);
  free(env.new_bytes);
  test_rmdir(env.tmp);
  printf("%d cases (2 of them groups with process_vm_*v refused), %d failures, %d skipped\n",
         cases, failures, skipped);
  return failures ? 1 : 0;
}
