/* The compat-mode decision for a file, its cuFile handle, and cuFile transfers. */
#define _GNU_SOURCE
#include "gds.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "error.h"
#include "settings.h"
#include "sys.h"

/* kvik__gds_file.state: the decision is made once, by whichever thread gets there first; the
 * others wait for it (it takes as long as a cuFile registration). */
enum { UNDECIDED, DECIDING, DECIDED };

#define UDEV_PATH "/run/udev"
#define UDEV_NOTE UDEV_PATH " is not readable, and cuFile identifies file systems through udev"

static int is_wsl(void) {
  char release[256] = "";
  FILE *f = fopen("/proc/sys/kernel/osrelease", "re");
  if (!f) return 0;
  size_t n = fread(release, 1, sizeof release - 1, f);
  fclose(f);
  release[n] = '\0';
  for (char *c = release; *c; c++) *c = (char)tolower((unsigned char)*c);
  return strstr(release, "microsoft") != NULL;
}

static int udev_readable(void) { return access(UDEV_PATH, R_OK) == 0; }

/* The reason cuFile serves the file, for kvik_file_backend(). */
static void describe_cufile(kvik__gds_file *g, const kvik__cufile_api *cf) {
  kvik__cufile_props p;
  memset(&p, 0, sizeof p);
  if (cf->cuFileDriverGetProperties(&p).err == KVIK__CUFILE_SUCCESS && p.nvfs.major_version > 0)
    snprintf(g->why, sizeof g->why, "cuFile: GPUDirect Storage through nvidia-fs %u.%u",
             p.nvfs.major_version, p.nvfs.minor_version);
  else
    snprintf(g->why, sizeof g->why,
             "cuFile: in cuFile's own compatibility mode (nvidia-fs is not loaded)");
}

static int open_direct(kvik__gds_file *g, const char *fn) {
  char proc_path[64];
  snprintf(proc_path, sizeof proc_path, "/proc/self/fd/%d", g->fd);
  g->direct_fd = kvik__open(proc_path, g->access | O_DIRECT | O_CLOEXEC, 0);
  if (g->direct_fd >= 0) return 0;
  return kvik__fail_errno(errno, "%s: the file does not open with O_DIRECT, which cuFile needs",
                          fn);
}

static int register_handle(kvik__gds_file *g, const char *fn, const kvik__cufile_api *cf) {
  kvik__cufile_descr descr;
  memset(&descr, 0, sizeof descr);
  descr.type = KVIK__CUFILE_HANDLE_TYPE_OPAQUE_FD;
  descr.handle.fd = g->direct_fd;
  int rc = kvik__cufile_enter(fn);
  if (rc < 0) return rc;
  rc = kvik__cufile_check(cf->cuFileHandleRegister(&g->handle, &descr), fn, "cuFileHandleRegister");
  kvik__cufile_leave();
  if (rc < 0) g->handle = NULL;
  return rc;
}

/* Try to make cuFile serve the file. Returns 0, or a negative code with the reason as this
 * thread's message. `check_platform`: first rule out what cannot work (AUTO), rather than let
 * cuFile say so (OFF, where the caller wants cuFile's own answer). */
static int try_cufile(kvik__gds_file *g, const char *fn, int check_platform) {
  if (check_platform && is_wsl())
    return kvik__fail(KVIK_ECUFILE_UNAVAILABLE, "WSL: cuFile does not work there");
  if (check_platform && !udev_readable()) return kvik__fail(KVIK_ECUFILE_UNAVAILABLE, UDEV_NOTE);
  int rc;
  const kvik__cufile_api *cf = kvik__cufile(NULL, &rc);
  if (!cf) return rc;
  rc = open_direct(g, fn);
  if (rc == 0) rc = register_handle(g, fn, cf);
  if (rc == 0) {
    g->generation = kvik__cufile_generation();
    describe_cufile(g, cf);
    return 0;
  }
  if (g->direct_fd >= 0) close(g->direct_fd);
  g->direct_fd = -1;
  if (!udev_readable()) {
    char message[KVIK_MESSAGE_MAX];
    snprintf(message, sizeof message, "%s; likely cause: " UDEV_NOTE, kvik_last_error());
    kvik__set_message(message);
  }
  return rc;
}

static void decide(kvik__gds_file *g, const char *fn, int check_platform) {
  if (try_cufile(g, fn, check_platform) == 0) {
    g->backend = KVIK_BACKEND_CUFILE;
    return;
  }
  g->backend = KVIK_BACKEND_POSIX;
  snprintf(g->why, sizeof g->why, "compat mode AUTO, and cuFile cannot serve the file: %s",
           kvik_last_error());
}

int kvik__gds_open(kvik__gds_file *g, const char *fn, const char *flags, const char *path, int fd,
                   int access) {
  memset(g, 0, sizeof *g);
  g->fd = fd;
  g->access = access;
  g->direct_fd = -1;
  g->path = path;
  g->backend = KVIK_BACKEND_POSIX;
  int64_t mode = kvik__setting(KVIK_SETTING_COMPAT_MODE);
  if (mode == KVIK_COMPAT_ON) {
    snprintf(g->why, sizeof g->why, "compat mode is ON: POSIX IO only");
    atomic_init(&g->state, DECIDED);
    return 0;
  }
  if (mode == KVIK_COMPAT_AUTO) {
    atomic_init(&g->state, UNDECIDED);
    return 0;
  }
  atomic_init(&g->state, DECIDED);
  int rc = try_cufile(g, fn, 0);
  if (rc < 0) {
    char why[KVIK_MESSAGE_MAX];
    snprintf(why, sizeof why, "%s", kvik_last_error()); /* the message is rewritten below */
    return kvik__fail(
        rc, "%s(\"%s\", \"%s\"): compat mode is OFF, and cuFile cannot serve the file: %s", fn,
        path, flags, why);
  }
  g->backend = KVIK_BACKEND_CUFILE;
  return 0;
}

void kvik__gds_close(kvik__gds_file *g) {
  const kvik__cufile_api *cf = kvik__cufile_if_open();
  if (g->handle && cf && g->generation == kvik__cufile_generation() &&
      kvik__cufile_enter("kvik_file_close") == 0) {
    cf->cuFileHandleDeregister(g->handle);
    kvik__cufile_leave();
  }
  g->handle = NULL;
  if (g->direct_fd >= 0) close(g->direct_fd);
  g->direct_fd = -1;
}

static void decide_once(kvik__gds_file *g) {
  int expected = UNDECIDED;
  if (atomic_compare_exchange_strong(&g->state, &expected, DECIDING)) {
    kvik__saved_message m; /* the decision is no failure of the caller */
    kvik__message_save(&m);
    decide(g, "cuFile", 1);
    kvik__message_restore(&m, 0);
    atomic_store(&g->state, DECIDED);
    return;
  }
  while (atomic_load(&g->state) != DECIDED) sched_yield();
}

int kvik__gds_backend(kvik__gds_file *g, char *why, size_t len) {
  decide_once(g);
  if (why && len) snprintf(why, len, "%s", g->why);
  return g->backend;
}

kvik__cufile_handle kvik__gds_handle(kvik__gds_file *g) {
  if (atomic_load(&g->state) != DECIDED) decide_once(g);
  if (g->backend != KVIK_BACKEND_CUFILE || g->generation != kvik__cufile_generation()) return NULL;
  return g->handle;
}

/* ---- transfers ------------------------------------------------------------------------------ */

/* One cuFile call; the context of the memory is current, as cuFile requires. */
static ssize_t cufile_call(const kvik__cufile_api *cf, kvik__cufile_handle h, kvik__op op,
                           char *base, size_t size, int64_t offset, int64_t base_offset) {
  return op == KVIK__READ ? cf->cuFileRead(h, base, size, (off_t)offset, (off_t)base_offset)
                          : cf->cuFileWrite(h, base, size, (off_t)offset, (off_t)base_offset);
}

/* The handle and API for a transfer, with the context pushed and the exit gate entered. */
static int begin(kvik__gds_file *g, const kvik__gds_io *io, const kvik__cufile_api **cf,
                 kvik__cufile_handle *h) {
  const char *fn = io->fn;
  *h = kvik__gds_handle(g);
  *cf = kvik__cufile_if_open();
  if (!*h || !*cf)
    return kvik__fail(KVIK_ECUFILE_UNAVAILABLE, "%s(\"%s\"): cuFile does not serve this file", fn,
                      g->path);
  int rc = kvik__context_push(fn, io->mem->ctx);
  if (rc < 0) return rc;
  rc = kvik__cufile_enter(fn);
  if (rc < 0) kvik__context_pop();
  return rc;
}

static void end(void) {
  kvik__cufile_leave();
  kvik__context_pop();
}

/* begin() for a transfer at io->dev, finding the allocation it lies in: cuFile takes the
 * allocation's start and an offset into it. */
static int begin_at(kvik__gds_file *g, const kvik__gds_io *io, const kvik__cufile_api **cf,
                    kvik__cufile_handle *h, char **base) {
  size_t alloc_size;
  int rc = kvik__allocation_range(io->fn, io->dev, base, &alloc_size);
  return rc < 0 ? rc : begin(g, io, cf, h);
}

/* Whether a short read stopped at the end of the file. Asking the file rather than cuFile again
 * keeps cuFile from ever seeing the unaligned offset that the end of a file usually is. */
static int at_end(const kvik__gds_file *g, int64_t offset) {
  struct stat st;
  return fstat(g->fd, &st) != 0 || offset >= st.st_size;
}

int kvik__gds_transfer(kvik__gds_file *g, const kvik__gds_io *io, size_t *done) {
  *done = 0;
  char *base = NULL;
  const kvik__cufile_api *cf;
  kvik__cufile_handle h;
  int rc = begin_at(g, io, &cf, &h, &base);
  if (rc < 0) return rc;
  const char *fn = io->fn;
  kvik__op op = io->op;
  size_t size = io->size;
  int64_t offset = io->offset, base_offset = io->dev - base;
  const char *call = op == KVIK__READ ? "cuFileRead" : "cuFileWrite";
  while (*done < size) {
    errno = 0;
    ssize_t n = cufile_call(cf, h, op, base, size - *done, offset + (int64_t)*done,
                            base_offset + (int64_t)*done);
    if (n < 0) {
      rc = kvik__cufile_io_error(n, errno, fn, call, g->path);
      break;
    }
    if (n == 0) {
      if (op == KVIK__WRITE)
        rc = kvik__fail(-EIO, "%s(\"%s\"): %s wrote nothing", fn, g->path, call);
      break;
    }
    *done += (size_t)n;
    if (op == KVIK__READ && *done < size && at_end(g, offset + (int64_t)*done)) break;
  }
  end();
  return rc;
}

ssize_t kvik__gds_raw(kvik__gds_file *g, const kvik__gds_io *io, int64_t base_offset) {
  const kvik__cufile_api *cf;
  kvik__cufile_handle h;
  int rc = begin(g, io, &cf, &h);
  if (rc < 0) return rc;
  errno = 0;
  ssize_t n = cufile_call(cf, h, io->op, io->dev, io->size, io->offset, base_offset);
  int saved = errno;
  end();
  const char *call = io->op == KVIK__READ ? "cuFileRead" : "cuFileWrite";
  return n < 0 ? kvik__cufile_io_error(n, saved, io->fn, call, g->path) : n;
}

/* ---- stream order ------------------------------------------------------------------------- */

int kvik__gds_async_possible(kvik__gds_file *g, const kvik__memory *mem) {
  const kvik__cufile_api *cf = kvik__cufile_if_open();
  return g && mem->kind == KVIK_MEMORY_DEVICE && kvik__gds_handle(g) && cf && cf->cuFileReadAsync &&
         cf->cuFileWriteAsync;
}

int kvik__gds_enqueue(kvik__gds_file *g, const kvik__gds_io *io, void *stream,
                      kvik__gds_async *state) {
  char *base = NULL;
  const kvik__cufile_api *cf;
  kvik__cufile_handle h;
  int rc = begin_at(g, io, &cf, &h, &base);
  if (rc < 0) return rc;
  *state = (kvik__gds_async){io->size, (off_t)io->offset, (off_t)(io->dev - base), 0};
  int read = io->op == KVIK__READ;
  kvik__cufile_error status =
      read ? cf->cuFileReadAsync(h, base, &state->size, &state->file_offset, &state->base_offset,
                                 &state->bytes, (CUstream)stream)
           : cf->cuFileWriteAsync(h, base, &state->size, &state->file_offset, &state->base_offset,
                                  &state->bytes, (CUstream)stream);
  end();
  return kvik__cufile_check(status, io->fn, read ? "cuFileReadAsync" : "cuFileWriteAsync");
}

ssize_t kvik__gds_async_result(const kvik__gds_file *g, const char *fn, kvik__op op,
                               const kvik__gds_async *state) {
  const char *call = op == KVIK__READ ? "cuFileReadAsync" : "cuFileWriteAsync";
  if (state->bytes < 0) return kvik__cufile_io_error(state->bytes, EIO, fn, call, g->path);
  if (op == KVIK__WRITE && (size_t)state->bytes < state->size)
    return kvik__fail(-EIO, "%s(\"%s\"): %s wrote %zd of %zu bytes", fn, g->path, call,
                      state->bytes, state->size);
  return state->bytes;
}
