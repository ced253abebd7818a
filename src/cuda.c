/* Loading the CUDA driver, and the public queries about it. */
#define _GNU_SOURCE
#include "cuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dl.h"
#include "error.h"
#include "init.h"
#include "sys.h"

#define CUDA_SONAME "libcuda.so.1"

typedef enum {
  NOT_TRIED,
  LOADED,
  FAILED,
  FORKED /* a child forked while CUDA was in the parent: the driver's state is unusable here */
} load_state;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Written under lock; read without it on the fast path, as LOADED is final. */
static _Atomic load_state state = NOT_TRIED;
static kvik__cuda_api api; /* written once, before state becomes LOADED */
static char why_unavailable[KVIK_MESSAGE_MAX];
static int present_at_fork;

static int resolve_all(void *handle) {
#define KVIK__CUDA_RESOLVE_(member, symbol, ret, params)                                           \
  *(void **)&api.member = dlsym(handle, symbol);                                                   \
  if (!api.member) {                                                                               \
    snprintf(why_unavailable, sizeof why_unavailable, CUDA_SONAME " lacks %s (driver too old?)",   \
             symbol);                                                                              \
    return -1;                                                                                     \
  }
  KVIK__CUDA_FUNCTIONS(KVIK__CUDA_RESOLVE_)
#undef KVIK__CUDA_RESOLVE_
  return 0;
}

/* The loaded driver's name ("CUDA_ERROR_OUT_OF_MEMORY") and description ("out of memory") of
 * `result`, or NULL when kvik has not loaded the driver (these never load it) or the driver does
 * not know the result. Static strings of the driver. */
static const char *driver_error_name(CUresult result) {
  const char *name = NULL;
  if (atomic_load(&state) != LOADED || api.cuGetErrorName(result, &name) != CUDA_SUCCESS)
    return NULL;
  return name;
}

static const char *driver_error_text(CUresult result) {
  const char *text = NULL;
  if (atomic_load(&state) != LOADED || api.cuGetErrorString(result, &text) != CUDA_SUCCESS)
    return NULL;
  return text;
}

/* The common CUresults, named and described as the driver does, for when it is not loaded:
 * X(name, value, text). The driver, when loaded, knows them all (and
 * tests/test_errors.c checks that the table does). */
#define KVIK__CUDA_RESULTS(X)                                                                      \
  X(CUDA_ERROR_INVALID_VALUE, 1, "invalid argument")                                               \
  X(CUDA_ERROR_OUT_OF_MEMORY, 2, "out of memory")                                                  \
  X(CUDA_ERROR_NOT_INITIALIZED, 3, "initialization error")                                         \
  X(CUDA_ERROR_DEINITIALIZED, 4, "driver shutting down")                                           \
  X(CUDA_ERROR_PROFILER_DISABLED, 5, "profiler disabled while using external profiling tool")      \
  X(CUDA_ERROR_STUB_LIBRARY, 34, "CUDA driver is a stub library")                                  \
  X(CUDA_ERROR_DEVICE_UNAVAILABLE, 46, "CUDA-capable device(s) is/are busy or unavailable")        \
  X(CUDA_ERROR_NO_DEVICE, 100, "no CUDA-capable device is detected")                               \
  X(CUDA_ERROR_INVALID_DEVICE, 101, "invalid device ordinal")                                      \
  X(CUDA_ERROR_DEVICE_NOT_LICENSED, 102, "device doesn't have valid Grid license")                 \
  X(CUDA_ERROR_INVALID_IMAGE, 200, "device kernel image is invalid")                               \
  X(CUDA_ERROR_INVALID_CONTEXT, 201, "invalid device context")                                     \
  X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, 202, "context already current")                            \
  X(CUDA_ERROR_MAP_FAILED, 205, "mapping of buffer object failed")                                 \
  X(CUDA_ERROR_UNMAP_FAILED, 206, "unmapping of buffer object failed")                             \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209, "no kernel image is available for execution on the device") \
  X(CUDA_ERROR_ECC_UNCORRECTABLE, 214, "uncorrectable ECC error encountered")                      \
  X(CUDA_ERROR_INVALID_PTX, 218, "a PTX JIT compilation failed")                                   \
  X(CUDA_ERROR_INVALID_SOURCE, 300, "device kernel image is invalid")                              \
  X(CUDA_ERROR_FILE_NOT_FOUND, 301, "file not found")                                              \
  X(CUDA_ERROR_OPERATING_SYSTEM, 304, "OS call failed or operation not supported on this OS")      \
  X(CUDA_ERROR_INVALID_HANDLE, 400, "invalid resource handle")                                     \
  X(CUDA_ERROR_ILLEGAL_STATE, 401, "the operation cannot be performed in the present state")       \
  X(CUDA_ERROR_NOT_FOUND, 500, "named symbol not found")                                           \
  X(CUDA_ERROR_NOT_READY, 600, "device not ready")                                                 \
  X(CUDA_ERROR_ILLEGAL_ADDRESS, 700, "an illegal memory access was encountered")                   \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 701, "too many resources requested for launch")            \
  X(CUDA_ERROR_LAUNCH_TIMEOUT, 702, "the launch timed out and was terminated")                     \
  X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, 704, "peer access is already enabled")                 \
  X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, 705, "peer access has not been enabled")                   \
  X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, 708, "cannot set while device is active in this process")   \
  X(CUDA_ERROR_CONTEXT_IS_DESTROYED, 709, "context is destroyed")                                  \
  X(CUDA_ERROR_ASSERT, 710, "device-side assert triggered")                                        \
  X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, 712,                                                \
    "part or all of the requested memory range is already mapped")                                 \
  X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, 713,                                                    \
    "pointer does not correspond to a registered memory region")                                   \
  X(CUDA_ERROR_HARDWARE_STACK_ERROR, 714, "hardware stack error")                                  \
  X(CUDA_ERROR_ILLEGAL_INSTRUCTION, 715, "an illegal instruction was encountered")                 \
  X(CUDA_ERROR_MISALIGNED_ADDRESS, 716, "misaligned address")                                      \
  X(CUDA_ERROR_INVALID_ADDRESS_SPACE, 717,                                                         \
    "operation not supported on global/shared address space")                                      \
  X(CUDA_ERROR_INVALID_PC, 718, "invalid program counter")                                         \
  X(CUDA_ERROR_LAUNCH_FAILED, 719, "unspecified launch failure")                                   \
  X(CUDA_ERROR_NOT_PERMITTED, 800, "operation not permitted")                                      \
  X(CUDA_ERROR_NOT_SUPPORTED, 801, "operation not supported")                                      \
  X(CUDA_ERROR_SYSTEM_NOT_READY, 802, "system not yet initialized")                                \
  X(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, 803,                                                        \
    "system has unsupported display driver / cuda driver combination")                             \
  X(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, 804,                                                \
    "forward compatibility was attempted on non supported HW")                                     \
  X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, 900,                                                    \
    "operation not permitted when stream is capturing")                                            \
  X(CUDA_ERROR_TIMEOUT, 909, "wait operation timed out")                                           \
  X(CUDA_ERROR_UNKNOWN, 999, "unknown error")

/* For kvik_err_name() and kvik_strerror(): the driver's words where kvik loaded it, else the
 * table's. */
static const char *result_name(CUresult result) {
  const char *name = driver_error_name(result);
  if (name) return name;
  switch (result) {
#define KVIK_CUDA_NAME_(name, value, text)                                                         \
  case value: return #name;
    KVIK__CUDA_RESULTS(KVIK_CUDA_NAME_)
#undef KVIK_CUDA_NAME_
  default: return "CUDA_ERROR_UNKNOWN_CODE";
  }
}

static const char *result_text(CUresult result) {
  const char *text = driver_error_text(result);
  if (text) return text;
  switch (result) {
#define KVIK_CUDA_TEXT_(name, value, text)                                                         \
  case value: return text;
    KVIK__CUDA_RESULTS(KVIK_CUDA_TEXT_)
#undef KVIK_CUDA_TEXT_
  default: return "unknown CUDA error";
  }
}

static unsigned long long loads_so_far(void);
static int soname_loaded(void);

/* The load count at which dlopen() last failed while the driver was not in the process; 0 for
 * never. Written under the lock. */
static unsigned long long missing_at_loads;

/* Called with the lock held. The handle stays open for the life of the process: the driver
 * cannot be unloaded once initialised. A failed dlopen() leaves the state NOT_TRIED, to be tried
 * again: it fails for want of memory or of a file, which may change. Where the driver was not in
 * the process, the search (some 40 directories, dl.h) is not made again until the process loads
 * another object, so that a process without a GPU searches once, not at every call; where it was
 * (another library loaded it), the next need tries again. A driver that lacks symbols or devices
 * does not change: that failure is final. */
static void load_locked(void) {
  unsigned long long loads = loads_so_far();
  if (loads != 0 && loads == missing_at_loads) return; /* why_unavailable still says why */
  char why[512];
  void *handle = kvik__dl_open(CUDA_SONAME, why, sizeof why);
  if (!handle) {
    snprintf(why_unavailable, sizeof why_unavailable, "%s", why);
    if (!soname_loaded()) missing_at_loads = loads;
    return;
  }
  if (resolve_all(handle) < 0) {
    state = FAILED;
    return;
  }
  *(void **)&api.cuCtxGetId = dlsym(handle, "cuCtxGetId");
  *(void **)&api.cuStreamWaitValue32 = dlsym(handle, "cuStreamWaitValue32_v2");
  *(void **)&api.cuStreamWriteValue32 = dlsym(handle, "cuStreamWriteValue32_v2");
  *(void **)&api.cuMemAllocAsync = dlsym(handle, "cuMemAllocAsync");
  *(void **)&api.cuMemFreeAsync = dlsym(handle, "cuMemFreeAsync");
  *(void **)&api.cuMemPoolCreate = dlsym(handle, "cuMemPoolCreate");
  *(void **)&api.cuMemPoolSetAttribute = dlsym(handle, "cuMemPoolSetAttribute");
  *(void **)&api.cuMemAllocFromPoolAsync = dlsym(handle, "cuMemAllocFromPoolAsync");
  *(void **)&api.cuMemPoolTrimTo = dlsym(handle, "cuMemPoolTrimTo");
  *(void **)&api.cuDeviceGetPCIBusId = dlsym(handle, "cuDeviceGetPCIBusId");
  *(void **)&api.cuDeviceTotalMem = dlsym(handle, "cuDeviceTotalMem_v2");
  *(void **)&api.cuEventQuery = dlsym(handle, "cuEventQuery");
  CUresult result = api.cuInit(0);
  if (result != CUDA_SUCCESS) {
    const char *name = NULL;
    api.cuGetErrorName(result, &name);
    snprintf(why_unavailable, sizeof why_unavailable, "cuInit failed: %s (%d)",
             name ? name : "unknown error", result);
    state = FAILED;
    return;
  }
  state = LOADED;
}

static load_state current_state(int try_load) {
  load_state now = atomic_load(&state);
  if (now == LOADED || !try_load) return now; /* a look needs no lock: every request looks */
  pthread_mutex_lock(&lock);
  if (state == NOT_TRIED && try_load) load_locked();
  load_state s = state;
  pthread_mutex_unlock(&lock);
  return s;
}

/* Why the driver is not loaded; a failed load may be retried, and rewrite it, at any time. */
static void copy_why(char *why, size_t len) {
  pthread_mutex_lock(&lock);
  snprintf(why, len, "%s", why_unavailable);
  pthread_mutex_unlock(&lock);
}

const kvik__cuda_api *kvik__cuda(const char *fn) {
  load_state s = current_state(1);
  if (s == LOADED) return &api;
  char why[sizeof why_unavailable];
  copy_why(why, sizeof why);
  kvik__fail(KVIK_ECUDA_UNAVAILABLE, "%s: CUDA driver unavailable: %s", fn, why);
  return NULL;
}

static int count_loads(struct dl_phdr_info *info, size_t size, void *loads) {
  (void)size;
  *(unsigned long long *)loads = info->dlpi_adds;
  return 1; /* the first object says it: the count is the process's */
}

/* Objects loaded into the process so far (dl_iterate_phdr's dlpi_adds, a few ns). */
static unsigned long long loads_so_far(void) {
  unsigned long long loads = 0;
  dl_iterate_phdr(count_loads, &loads);
  return loads;
}

/* The load count at which libcuda was last found absent; 0 for never. */
static _Atomic unsigned long long absent_at_loads;

/* An object's DT_SONAME, or NULL. The loader has relocated the dynamic section's addresses in
 * place where it could; an address below the object's base is one it left as a file offset. */
static const char *object_soname(const struct dl_phdr_info *info) {
  for (int i = 0; i < info->dlpi_phnum; i++) {
    if (info->dlpi_phdr[i].p_type != PT_DYNAMIC) continue;
    const ElfW(Dyn) *dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    ElfW(Addr) strtab = 0;
    ElfW(Xword) soname = 0;
    int has_soname = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
      if (dyn->d_tag == DT_STRTAB) strtab = dyn->d_un.d_ptr;
      else if (dyn->d_tag == DT_SONAME) soname = dyn->d_un.d_val, has_soname = 1;
    }
    if (!strtab || !has_soname) return NULL;
    if (strtab < info->dlpi_addr) strtab += info->dlpi_addr;
    return (const char *)strtab + soname;
  }
  return NULL;
}

/* Stops the walk (1) at an object whose file name or soname is libcuda.so.1, as dlopen() would
 * match it. */
static int is_cuda(struct dl_phdr_info *info, size_t size, void *unused) {
  (void)size, (void)unused;
  const char *slash = strrchr(info->dlpi_name, '/');
  if (strcmp(slash ? slash + 1 : info->dlpi_name, CUDA_SONAME) == 0) return 1;
  const char *soname = object_soname(info);
  return soname && strcmp(soname, CUDA_SONAME) == 0;
}

/* Every request asks, to classify its memory. dlopen(RTLD_NOLOAD) would search the library path
 * before it answers "not loaded" (about 40 directories, 20 us, in every process that reads a
 * file); the objects already loaded are walked instead, without a system call, and a "not
 * loaded" stands until the process loads another object. */
static int soname_loaded(void) {
  unsigned long long loads = loads_so_far();
  if (loads != 0 && loads == atomic_load(&absent_at_loads)) return 0;
  int loaded = dl_iterate_phdr(is_cuda, NULL) == 1;
  if (!loaded) atomic_store(&absent_at_loads, loads);
  return loaded;
}

const kvik__cuda_api *kvik__cuda_if_present(void) {
  load_state s = current_state(0);
  if (s == NOT_TRIED && soname_loaded()) s = current_state(1);
  return s == LOADED ? &api : NULL;
}

/* As kvik__cuda_if_present(), asking soname_loaded() once: it is most of a host request's cost
 * in a process without CUDA. */
int kvik__cuda_for_pointers(const char *fn, const kvik__cuda_api **out) {
  load_state s = current_state(0);
  int in_process = s == NOT_TRIED && soname_loaded();
  if (in_process) s = current_state(1);
  *out = s == LOADED ? &api : NULL;
  if (*out || !in_process || atomic_load(&state) != NOT_TRIED) return 0;
  char why[sizeof why_unavailable];
  copy_why(why, sizeof why);
  return kvik__fail(KVIK_ECUDA_UNAVAILABLE,
                    "%s: " CUDA_SONAME
                    " is in this process, but kvik could not load it (%s), so device memory "
                    "cannot be told from host memory",
                    fn, why);
}

int kvik__cuda_check(CUresult result, const char *fn, const char *call) {
  if (result == CUDA_SUCCESS) return 0;
  const char *name = driver_error_name(result), *text = driver_error_text(result);
  /* No driver defines a result outside the range that kvik's codes leave for CUDA. */
  int code = kvik__foreign_code(KVIK_ECUDA_BASE, result, CUDA_ERROR_UNKNOWN);
  return kvik__fail(code, "%s: %s: %s (%s)", fn, call, name ? name : "unknown CUDA error",
                    text ? text : "no description");
}

/* Whether CUDA was in the process is decided in the parent: the child may not call dlopen(),
 * whose lock another parent thread may have held at fork(). */
static void fork_prepare(void) {
  pthread_mutex_lock(&lock);
  present_at_fork = state == LOADED || soname_loaded();
}

static void fork_parent(void) { pthread_mutex_unlock(&lock); }

static void fork_child(void) {
  pthread_mutex_init(&lock, NULL);
  if (present_at_fork) {
    state = FORKED;
    snprintf(
        why_unavailable, sizeof why_unavailable,
        "this process was forked from one that had CUDA loaded, and CUDA does not survive fork()");
  }
}

KVIK__ON_LOAD(install_hooks) {
  static const kvik__fork_handlers handlers = {fork_prepare, fork_parent, fork_child};
  kvik__atfork_register(KVIK__FORK_CUDA, &handlers);
  kvik__error_register(KVIK_ECUDA_BASE, result_name, result_text);
}

/* ---- public queries ------------------------------------------------------------------- */

int kvik_cuda_driver_version(void) {
  const kvik__cuda_api *cu = kvik__cuda("kvik_cuda_driver_version");
  if (!cu) return KVIK_ECUDA_UNAVAILABLE;
  int version = 0;
  int rc = kvik__cuda_check(cu->cuDriverGetVersion(&version), "kvik_cuda_driver_version",
                            "cuDriverGetVersion");
  return rc < 0 ? rc : version;
}

int kvik_cuda_device_count(void) {
  const kvik__cuda_api *cu = kvik__cuda("kvik_cuda_device_count");
  if (!cu) return KVIK_ECUDA_UNAVAILABLE;
  int count = 0;
  int rc =
      kvik__cuda_check(cu->cuDeviceGetCount(&count), "kvik_cuda_device_count", "cuDeviceGetCount");
  return rc < 0 ? rc : count;
}

/* Device `ordinal`, loading the driver. Returns 0 or a negative code with a message naming
 * `fn`. */
static int device_of(const char *fn, int ordinal, CUdevice *device) {
  const kvik__cuda_api *cu = kvik__cuda(fn);
  if (!cu) return KVIK_ECUDA_UNAVAILABLE;
  int count = 0;
  int rc = kvik__cuda_check(cu->cuDeviceGetCount(&count), fn, "cuDeviceGetCount");
  if (rc < 0) return rc;
  if (ordinal < 0 || ordinal >= count)
    return kvik__fail(-EINVAL, "%s(%d): no such device (%d present)", fn, ordinal, count);
  return kvik__cuda_check(cu->cuDeviceGet(device, ordinal), fn, "cuDeviceGet");
}

static int name_of(const char *fn, CUdevice device, char *name, size_t len) {
  return kvik__cuda_check(api.cuDeviceGetName(name, len > 1024 ? 1024 : (int)len, device), fn,
                          "cuDeviceGetName");
}

int kvik_cuda_device_name(int ordinal, char *name, size_t len) {
  static const char fn[] = "kvik_cuda_device_name";
  if (!name || len == 0) return kvik__fail(-EINVAL, "%s(%d): no room for the name", fn, ordinal);
  name[0] = '\0';
  CUdevice device;
  int rc = device_of(fn, ordinal, &device);
  return rc < 0 ? rc : name_of(fn, device, name, len);
}

/* ---- where a device sits: its PCI function in sysfs ----------------------------------------- */

#define PCI_DEVICES "/sys/bus/pci/devices/"
#define MAX_NUMA_DEVICES 64

/* The device's PCI bus id as sysfs names it ("0000:3b:00.0": the driver's is upper case, and
 * some drivers give an 8-digit domain). Returns 0, or -1 where the driver does not say. */
static int sysfs_bus_id(const kvik__cuda_api *cu, CUdevice device, char *id, size_t len) {
  char raw[64];
  unsigned domain, bus, slot, function;
  if (!cu->cuDeviceGetPCIBusId ||
      cu->cuDeviceGetPCIBusId(raw, sizeof raw, device) != CUDA_SUCCESS ||
      sscanf(raw, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4)
    return -1;
  snprintf(id, len, "%04x:%02x:%02x.%x", domain, bus, slot, function);
  return 0;
}

/* The first line of sysfs attribute `name` of PCI function `id`, without its newline. Returns 0,
 * or -1 where it is missing or unreadable. */
static int sysfs_attribute(const char *id, const char *name, char *text, size_t len) {
  char path[128];
  snprintf(path, sizeof path, PCI_DEVICES "%s/%s", id, name);
  int fd = kvik__open(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return -1;
  ssize_t n = kvik__pread(fd, text, len - 1, 0);
  close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  text[strcspn(text, "\n")] = '\0';
  return 0;
}

/* An integer attribute, or `unknown` where it is missing or not a number. */
static long sysfs_number(const char *id, const char *name, long unknown) {
  char text[64], *end;
  if (sysfs_attribute(id, name, text, sizeof text) < 0) return unknown;
  long value = strtol(text, &end, 10);
  return end == text ? unknown : value;
}

/* The PCIe generation of a link speed as sysfs writes it ("16.0 GT/s PCIe", "8 GT/s"); 0 for
 * "Unknown speed" and anything else. */
static int link_generation(const char *id, const char *name) {
  static const double rates[] = {2.5, 5, 8, 16, 32, 64}; /* GT/s of generations 1 to 6 */
  char text[64], *end;
  if (sysfs_attribute(id, name, text, sizeof text) < 0) return 0;
  double rate = strtod(text, &end);
  for (int g = 0; end != text && g < (int)(sizeof rates / sizeof rates[0]); g++)
    if (rate == rates[g]) return g + 1;
  return 0;
}

static int numa_node_of(const char *id) {
  long node = sysfs_number(id, "numa_node", -1);
  return node < 0 || node > 1023 ? -1 : (int)node;
}

/* Per device: the node + 2, 0 until looked up (a node never changes while the system runs). */
static _Atomic int numa_nodes[MAX_NUMA_DEVICES];

int kvik__device_numa_node(const kvik__cuda_api *cu, CUdevice device) {
  if (device < 0 || device >= MAX_NUMA_DEVICES) return -1;
  int known = atomic_load(&numa_nodes[device]);
  if (known) return known - 2;
  char id[32];
  int node = sysfs_bus_id(cu, device, id, sizeof id) < 0 ? -1 : numa_node_of(id);
  atomic_store(&numa_nodes[device], node + 2);
  return node;
}

int kvik_cuda_device_get_properties(int ordinal, kvik_cuda_device_properties *props) {
  static const char fn[] = "kvik_cuda_device_get_properties";
  if (!props || props->struct_size < sizeof(size_t))
    return kvik__fail(-EINVAL, "%s(%d): NULL, or struct_size not set", fn, ordinal);
  kvik_cuda_device_properties out = {.struct_size = props->struct_size, .numa_node = -1};
  CUdevice device;
  int rc = device_of(fn, ordinal, &device);
  if (rc == 0) rc = name_of(fn, device, out.name, sizeof out.name);
  if (rc < 0) return rc;
  if (api.cuDeviceTotalMem && api.cuDeviceTotalMem(&out.total_memory, device) != CUDA_SUCCESS)
    out.total_memory = 0;
  if (sysfs_bus_id(&api, device, out.pci_bus_id, sizeof out.pci_bus_id) == 0) {
    const char *id = out.pci_bus_id;
    out.numa_node = numa_node_of(id);
    long width = sysfs_number(id, "current_link_width", 0);
    long max_width = sysfs_number(id, "max_link_width", 0);
    out.link_width = width > 0 && width <= 32 ? (int)width : 0;
    out.max_link_width = max_width > 0 && max_width <= 32 ? (int)max_width : 0;
    out.link_generation = link_generation(id, "current_link_speed");
    out.max_link_generation = link_generation(id, "max_link_speed");
  }
  size_t n = props->struct_size < sizeof out ? props->struct_size : sizeof out;
  memcpy(props, &out, n);
  return 0;
}
