/* kvik: the command line tool of libkvik. `kvik info` shows what the library found on this
 * machine, `kvik bench` (bench.c) measures it, `kvik cat` and `kvik bench URL` (remote.c) read
 * and measure remote objects. Only the public kvik.h API is used, so the tool also shows what
 * any application can see. */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "kvik.h"

static const char usage_text[] =
    "usage: kvik <command> [options]\n"
    "\n"
    "Fast parallel file IO (a C take on NVIDIA KvikIO).\n"
    "\n"
    "commands:\n"
    "  info [PATH]  version, settings, CUDA/cuFile/libcurl presence, GPUs, GPUDirect Storage,\n"
    "               O_DIRECT support of PATH, and which IO path kvik picks for PATH if it is a\n"
    "               file\n"
    "  bench        page-cache throughput of kvik next to plain pread/pwrite loops\n"
    "  bench URL    throughput of reading a remote object (HTTP, S3, WebHDFS)\n"
    "  cat URL      write a remote object, or a byte range of it, to stdout or a file\n"
    "\n"
    "options:\n"
    "  -h, --help   show this help\n"
    "  --version    show the library version\n"
    "\n"
    "'kvik <command> --help' shows the options of a command.\n";

static const char info_usage[] =
    "usage: kvik info [PATH]\n"
    "\n"
    "Print the library version, every setting with its value, environment variable and\n"
    "source, whether the CUDA driver, cuFile and libcurl can be loaded, the GPUs that device\n"
    "IO can use (or why it cannot), what GPUDirect Storage (cuFile) reports, as 'gdscheck -p'\n"
    "would: version, configuration file, nvidia-fs or cuFile's compatibility mode, driver\n"
    "properties and parameters (this opens the cuFile driver), and whether files in PATH (a\n"
    "directory; default: the current directory) can be opened with O_DIRECT.\n"
    "\n"
    "If PATH is a regular file, O_DIRECT is checked in its directory, and the file is opened\n"
    "for reading to show which path serves its device memory (cuFile or POSIX) and why, under\n"
    "the compat mode in effect. With compat mode OFF, a file cuFile cannot serve does not open:\n"
    "the error is printed and the exit status is 1.\n"
    "\n"
    "O_DIRECT is checked with a test file. Where none can be made (/proc, a device, a read-only\n"
    "or missing directory), its line says so and why, and the rest is printed all the same; the\n"
    "exit status is 1 if PATH does not exist.\n";

int cli_is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }

int cli_fail(const char *command) {
  fprintf(stderr, "kvik %s: %s\n", command, kvik_last_error());
  return CLI_ERROR;
}

int cli_usage_error(const char *command, const char *message, const char *arg) {
  fprintf(stderr, "kvik %s: %s '%s' (try 'kvik %s --help')\n", command, message, arg, command);
  return CLI_USAGE;
}

int cli_parse_positive(const char *text, char **end) {
  if (!isdigit((unsigned char)*text)) return -1;
  errno = 0;
  long v = strtol(text, end, 10);
  return errno || v < 1 || v > INT_MAX ? -1 : (int)v;
}

int cli_parse_size(const char *text, size_t *size) {
  if (!isdigit((unsigned char)*text)) return -1;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  int shift = *end == 'K' || *end == 'k'   ? 10
              : *end == 'M' || *end == 'm' ? 20
              : *end == 'G' || *end == 'g' ? 30
                                           : 0;
  if (shift) end++;
  /* Offsets are int64_t and transfer sizes come back as ssize_t. */
  if (errno || *end || v == 0 || v > ((unsigned long long)INT64_MAX >> shift)) return -1;
  *size = (size_t)(v << shift);
  return 0;
}

const char *cli_option_value(const char *name, int argc, char **argv, int *i) {
  size_t n = strlen(name);
  if (strncmp(argv[*i], name, n) != 0) return NULL;
  if (argv[*i][n] == '=') return argv[*i] + n + 1;
  if (argv[*i][n] != '\0') return NULL;
  return *i + 1 < argc ? argv[++*i] : "";
}

static const char *source_name(int source) {
  switch (source) {
  case KVIK_SOURCE_DEFAULT: return "default";
  case KVIK_SOURCE_ENV: return "environment";
  case KVIK_SOURCE_API: return "API";
  default: return "?";
  }
}

static int max_int(int a, int b) { return a > b ? a : b; }

/* All settings as a table whose columns are as wide as their longest entry. */
static int print_settings(void) {
  char values[KVIK_SETTING_COUNT][64];
  int name_w = (int)strlen("setting"), value_w = (int)strlen("value");
  int env_w = (int)strlen("environment variable");
  for (int s = 0; s < KVIK_SETTING_COUNT; s++) {
    if (kvik_setting_format((kvik_setting)s, values[s], sizeof values[s]) < 0)
      return cli_fail("info");
    name_w = max_int(name_w, (int)strlen(kvik_setting_name((kvik_setting)s)));
    value_w = max_int(value_w, (int)strlen(values[s]));
    env_w = max_int(env_w, (int)strlen(kvik_setting_env_name((kvik_setting)s)));
  }
  printf("settings:\n  %-*s  %-*s  %-*s  %s\n", name_w, "setting", value_w, "value", env_w,
         "environment variable", "source");
  for (int s = 0; s < KVIK_SETTING_COUNT; s++)
    printf("  %-*s  %-*s  %-*s  %s\n", name_w, kvik_setting_name((kvik_setting)s), value_w,
           values[s], env_w, kvik_setting_env_name((kvik_setting)s),
           source_name(kvik_setting_source_of((kvik_setting)s)));
  return CLI_OK;
}

static void print_lib(const char *label, kvik_runtime_lib lib) {
  char detail[512] = "";
  int found = kvik_runtime_lib_supported(lib, detail, sizeof detail);
  if (found < 0) snprintf(detail, sizeof detail, "%s", kvik_last_error());
  printf("  %-12s %s: %s\n", label, found == 1 ? "found" : "not found", detail);
}

static void print_remote(void) {
  char detail[256];
  int supported = kvik_remote_supported(detail, sizeof detail);
  printf("\nremote files: %s%s\n", supported ? "" : "unavailable: ", detail);
}

/* What device IO can use: the driver's version and devices, or why it cannot work. */
/* "gen 4 x16"; "unknown" for what sysfs does not say. */
static void format_link(char *text, size_t len, int generation, int width) {
  char gen[16] = "gen unknown", lanes[24] = "width unknown";
  if (generation > 0) snprintf(gen, sizeof gen, "gen %d", generation);
  if (width > 0) snprintf(lanes, sizeof lanes, "x%d", width);
  if (generation <= 0 && width <= 0) snprintf(text, len, "unknown");
  else snprintf(text, len, "%s %s", gen, lanes);
}

/* One GPU: its name, then where it sits (what the driver or sysfs does not say is "unknown"). */
static void print_gpu(int ordinal) {
  kvik_cuda_device_properties p = {.struct_size = sizeof p};
  if (kvik_cuda_device_get_properties(ordinal, &p) < 0) {
    printf("  device %d: ? (%s)\n", ordinal, kvik_last_error());
    return;
  }
  char node[16] = "unknown", link[48], max_link[48], memory[32] = "unknown";
  if (p.numa_node >= 0) snprintf(node, sizeof node, "%d", p.numa_node);
  format_link(link, sizeof link, p.link_generation, p.link_width);
  format_link(max_link, sizeof max_link, p.max_link_generation, p.max_link_width);
  if (p.total_memory) snprintf(memory, sizeof memory, "%.1f GiB", p.total_memory / 1073741824.0);
  printf("  device %d: %s\n    PCI bus id: %s, NUMA node: %s\n    PCIe link: %s (max %s)\n"
         "    memory: %s\n",
         ordinal, p.name, *p.pci_bus_id ? p.pci_bus_id : "unknown", node, link, max_link, memory);
}

static void print_cuda(void) {
  int version = kvik_cuda_driver_version();
  int count = version < 0 ? version : kvik_cuda_device_count();
  if (count < 0) {
    printf("\nGPU memory: unavailable (host IO works): %s\n", kvik_last_error());
    return;
  }
  printf("\nGPU memory: CUDA driver %d.%d, %d device%s\n", version / 1000, version % 1000 / 10,
         count, count == 1 ? "" : "s");
  for (int i = 0; i < count; i++) print_gpu(i);
}

/* ---- GPUDirect Storage ---------------------------------------------------------------------- */

/* A byte count, with the largest binary unit it is a whole multiple of, as cuFile's sizes
 * (kept in KiB) are. */
static void print_size(const char *name, size_t bytes) {
  static const char *const units[] = {"KiB", "MiB", "GiB"};
  int unit = -1;
  size_t n = bytes;
  while (unit < 2 && n && n % 1024 == 0) n /= 1024, unit++;
  if (unit < 0) printf("    %s: %zu\n", name, bytes);
  else printf("    %s: %zu (%zu %s)\n", name, bytes, n, units[unit]);
}

/* The set bits of `flags` by name: bit n is names[n] (cufile.h's CU_FILE_*_SUPPORTED n). */
static void print_flags(const char *label, unsigned flags, const char *const *names,
                        unsigned count) {
  printf("    %s: 0x%x (", label, flags);
  const char *sep = "";
  for (unsigned bit = 0; bit < 32; bit++) {
    if (!(flags >> bit & 1u)) continue;
    if (bit < count && names[bit]) printf("%s%s", sep, names[bit]);
    else printf("%sbit%u", sep, bit);
    sep = " ";
  }
  printf("%s)\n", *sep ? "" : "none");
}

/* cufile.h's CUfileDriverStatusFlags (10 is reserved) and CUfileFeatureFlags, by bit. */
static const char *const file_system_names[] = {
    "lustre",        "wekafs", "nfs",    "gpfs", "nvme",     "nvmeof", "scsi",
    "scaleflux_csd", "nvmesh", "beegfs", NULL,   "nvme_p2p", "scatefs"};
static const char *const feature_names[] = {"dyn_routing", "batch_io", "streams", "parallel_io"};

/* What kvik does with device memory under the compat mode now in effect. */
static void print_compat_mode(void) {
  char mode[16] = "?";
  int64_t value = KVIK_COMPAT_AUTO;
  kvik_setting_format(KVIK_SETTING_COMPAT_MODE, mode, sizeof mode);
  kvik_setting_get(KVIK_SETTING_COMPAT_MODE, &value);
  const char *meaning = value == KVIK_COMPAT_ON ? "POSIX IO only, cuFile is not used"
                        : value == KVIK_COMPAT_OFF
                            ? "cuFile required: files it cannot serve do not open"
                            : "cuFile where it can serve a file, POSIX IO elsewhere";
  printf("  compat mode: %s (%s): %s\n", mode,
         source_name(kvik_setting_source_of(KVIK_SETTING_COMPAT_MODE)), meaning);
}

/* cuFile reads CUFILE_ENV_PATH_JSON if set, else /etc/cufile.json; without it, built-in
 * defaults apply. */
static void print_config_file(void) {
  const char *env = getenv("CUFILE_ENV_PATH_JSON");
  const char *path = env && *env ? env : "/etc/cufile.json";
  const char *state = access(path, R_OK) == 0 ? "exists"
                      : errno == ENOENT       ? "missing: cuFile's defaults apply"
                                              : "not readable";
  printf("  config file: %s (%s; %s)\n", path, env && *env ? "CUFILE_ENV_PATH_JSON" : "default",
         state);
}

/* cuFile tells file systems apart through udev; where /run/udev is hidden (containers) its
 * handle registrations fail, and AUTO picks POSIX IO for that reason. */
static void print_udev(void) {
  if (access("/run/udev", R_OK) == 0) printf("  /run/udev: readable\n");
  else
    printf(
        "  /run/udev: not readable (%s): cuFile cannot identify file systems, AUTO uses POSIX IO\n",
        strerror(errno));
}

static void print_version(void) {
  int version = kvik_cufile_version();
  if (version < 0) printf("  version: unknown: %s\n", kvik_last_error());
  else printf("  version: %d (%d.%d)\n", version, version / 1000, version % 1000 / 10);
}

/* Whether transfers go through nvidia-fs (GDS proper) or cuFile's own POSIX fallback. */
static void print_transfer_path(const kvik_cufile_properties *p) {
  if (p->gds_available)
    printf("  GDS: nvidia-fs %u.%u loaded: GPUDirect transfers\n", p->nvfs_major_version,
           p->nvfs_minor_version);
  else if (p->allow_compat_mode)
    printf("  GDS: nvidia-fs not loaded: cuFile's own compatibility mode (allow_compat_mode on): "
           "POSIX IO inside cuFile\n");
  else
    printf("  GDS: nvidia-fs not loaded, and allow_compat_mode is off: cuFile cannot transfer\n");
}

static void print_properties(void) {
  kvik_cufile_properties p = {.struct_size = sizeof p};
  if (kvik_cufile_get_properties(&p) < 0) {
    printf("  properties: unavailable: %s\n", kvik_last_error());
    return;
  }
  print_transfer_path(&p);
  printf("  properties:\n    nvfs_version: %u.%u\n", p.nvfs_major_version, p.nvfs_minor_version);
  printf("    gds_available: %s\n", p.gds_available ? "yes" : "no");
  printf("    allow_compat_mode: %s\n", p.allow_compat_mode ? "yes" : "no");
  printf("    poll_mode: %s\n", p.poll_mode ? "on" : "off");
  print_size("poll_threshold_size", p.poll_threshold_size);
  print_size("max_direct_io_size", p.max_direct_io_size);
  print_size("max_device_cache_size", p.max_device_cache_size);
  print_size("per_buffer_cache_size", p.per_buffer_cache_size);
  print_size("max_device_pinned_mem_size", p.max_device_pinned_mem_size);
  printf("    max_batch_io_size: %u\n", p.max_batch_io_size);
  printf("    max_batch_io_timeout_ms: %u\n", p.max_batch_io_timeout_ms);
  print_flags("file_systems", p.file_system_flags, file_system_names,
              sizeof file_system_names / sizeof file_system_names[0]);
  print_flags("features", p.feature_flags, feature_names,
              sizeof feature_names / sizeof feature_names[0]);
}

/* The message after "kvik_cufile_parameter_get: ", which every line would repeat. */
static const char *param_reason(void) {
  static const char prefix[] = "kvik_cufile_parameter_get: ";
  const char *why = kvik_last_error();
  return strncmp(why, prefix, sizeof prefix - 1) == 0 ? why + sizeof prefix - 1 : why;
}

/* One line per parameter. A cuFile without the parameter API (older than 1.14) gets one line
 * for all. */
static void print_parameters(void) {
  printf("  parameters:\n");
  for (unsigned i = 0; kvik_cufile_parameter_name(i); i++) {
    const char *name = kvik_cufile_parameter_name(i);
    char value[1024];
    int rc = kvik_cufile_parameter_get(name, value, sizeof value);
    if (rc >= 0) {
      printf("    %s: %s\n", name, *value ? value : "(empty)");
    } else if (rc == -ENOTSUP || rc == KVIK_ECUFILE_UNAVAILABLE) {
      printf("    unavailable: %s\n", param_reason());
      return;
    } else {
      printf("    %s: unavailable: %s\n", name, param_reason());
    }
  }
}

/* What `gdscheck -p` shows, through kvik's API: opening the driver is what tells. */
static void print_gds(void) {
  char detail[512] = "";
  int found = kvik_runtime_lib_supported(KVIK_LIB_CUFILE, detail, sizeof detail);
  if (found < 0) snprintf(detail, sizeof detail, "%s", kvik_last_error());
  printf("\nGPUDirect Storage:\n  cuFile: %s: %s\n", found == 1 ? "found" : "not found", detail);
  print_compat_mode();
  if (found != 1) return;
  print_config_file();
  print_udev();
  int rc = kvik_cufile_open();
  if (rc < 0) printf("  driver: cannot open: %s: %s\n", kvik_err_name(rc), kvik_last_error());
  else printf("  driver: open\n");
  if (rc >= 0) {
    print_version();
    print_properties();
  }
  print_parameters();
}

/* ---- compression --------------------------------------------------------------------------- */

/* Whether nvCOMP loads, from where, its version, and the codecs it offers. */
static void print_nvcomp(void) {
  int version = kvik_nvcomp_version();
  if (version < 0) {
    const char *why = kvik_last_error(), *after = strstr(why, "nvCOMP unavailable: ");
    printf("\ncompression (nvCOMP): not found: %s\n", after ? after + 20 : why);
    return;
  }
  char path[4096] = "?";
  kvik_nvcomp_path(path, sizeof path);
  printf("\ncompression (nvCOMP): nvCOMP %d.%d.%d from %s\n  codecs:", version / 1000,
         version % 1000 / 100, version % 100, path);
  for (int c = 0; c < KVIK_CODEC_COUNT; c++)
    if (kvik_codec_supported((kvik_codec)c) == 1)
      printf(" %s%s", kvik_codec_name((kvik_codec)c),
             kvik_codec_gpu_only((kvik_codec)c) ? " (GPU-only)" : "");
  printf("\n");
  for (int c = 0; c < KVIK_CODEC_COUNT; c++)
    if (kvik_codec_supported((kvik_codec)c) != 1)
      printf("  %s: not offered by this nvCOMP\n", kvik_codec_name((kvik_codec)c));
}

/* ---- info ------------------------------------------------------------------------------------ */

static const char *backend_name(int backend) {
  return backend == KVIK_BACKEND_CUFILE ? "cuFile" : backend == KVIK_BACKEND_POSIX ? "POSIX" : "?";
}

/* Which path serves the file's device memory, decided as for any application: the file is
 * opened for reading under the compat mode in effect. */
static int print_file_backend(const char *path) {
  char mode[16] = "?", why[512] = "";
  kvik_setting_format(KVIK_SETTING_COMPAT_MODE, mode, sizeof mode);
  kvik_file *f;
  int rc = kvik_file_open(path, "r", 0, &f);
  if (rc < 0) {
    printf("\ncompat mode %s: cannot open %s: %s: %s\n", mode, path, kvik_err_name(rc),
           kvik_last_error());
    return CLI_ERROR;
  }
  int backend = kvik_file_backend(f, why, sizeof why);
  if (backend < 0) snprintf(why, sizeof why, "%s", kvik_last_error());
  printf("\ncompat mode %s chose %s for %s: %s\n", mode, backend_name(backend), path, why);
  kvik_file_free(f);
  return backend < 0 ? CLI_ERROR : CLI_OK;
}

/* The directory of `path`: itself for a directory, else the part before the last '/'. */
static void directory_of(const char *path, int is_file, char *dir, size_t len) {
  const char *slash = is_file ? strrchr(path, '/') : NULL;
  if (!is_file) snprintf(dir, len, "%s", path);
  else if (!slash) snprintf(dir, len, ".");
  else if (slash == path) snprintf(dir, len, "/");
  else snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

/* The reason kvik_direct_io_supported() gave, without the call and directory its line names. */
static const char *direct_io_reason(void) {
  const char *why = kvik_last_error(), *after = strstr(why, "\"): ");
  return after ? after + 4 : why;
}

/* Which backend serves which host IO: the pool, and io_uring for the batch operations that
 * KVIK_SETTING_IO_URING gives it where the kernel allows it (device memory too, staged). */
static void print_host_io(void) {
  int64_t threads = 0, mode = KVIK_AUTO, threshold = 0;
  kvik_setting_get(KVIK_SETTING_NUM_THREADS, &threads);
  kvik_setting_get(KVIK_SETTING_IO_URING, &mode);
  kvik_setting_get(KVIK_SETTING_GDS_THRESHOLD, &threshold);
  char why[512];
  int ring = kvik_io_uring_supported(why, sizeof why);
  printf("\nhost IO:\n  thread pool: %lld threads: file reads and writes, and the batch operations "
         "io_uring does "
         "not take\n  io_uring: %s\n",
         (long long)threads, why);
  if (!ring || mode == KVIK_OFF) {
    printf("  batches: thread pool only%s\n", ring ? " (io_uring is off)" : "");
    return;
  }
  if (mode == KVIK_ON) printf("  batches: io_uring for every operation");
  else
    printf("  batches: io_uring for operations below %lld bytes (gds_threshold) and O_DIRECT ones",
           (long long)threshold);
  printf(" (device memory staged through a pinned arena, where cuFile does not serve it); the "
         "thread pool for the "
         "others\n");
}

static int cmd_info(int argc, char **argv) {
  const char *path = ".";
  for (int i = 1; i < argc; i++) {
    if (cli_is_help(argv[i])) return fputs(info_usage, stdout), CLI_OK;
    if (argv[i][0] == '-') return cli_usage_error("info", "unknown option", argv[i]);
    if (i > 1) return cli_usage_error("info", "unexpected argument", argv[i]);
    path = argv[i];
  }
  struct stat st;
  int exists = stat(path, &st) == 0, is_file = exists && S_ISREG(st.st_mode);
  char dir[4096];
  directory_of(path, is_file, dir, sizeof dir);
  /* An invalid environment value makes every setting meaningless: fail before printing any. */
  if (kvik_setting_source_of(KVIK_SETTING_COMPAT_MODE) < 0) return cli_fail("info");
  printf("kvik %s\n\n", kvik_version_string());
  if (print_settings() != CLI_OK) return CLI_ERROR;
  printf("\nruntime libraries:\n");
  print_lib("CUDA driver", KVIK_LIB_CUDA);
  print_lib("cuFile", KVIK_LIB_CUFILE);
  print_lib("libcurl", KVIK_LIB_CURL);
  print_lib("Jansson", KVIK_LIB_JANSSON);
  print_cuda();
  print_gds();
  print_nvcomp();
  print_remote();
  int direct = kvik_direct_io_supported(dir);
  if (direct < 0) printf("\nO_DIRECT in %s: not checked: %s\n", dir, direct_io_reason());
  else printf("\nO_DIRECT in %s: %s\n", dir, direct ? "supported" : "not supported");
  print_host_io();
  if (is_file) return print_file_backend(path);
  return exists ? CLI_OK : CLI_ERROR;
}

/* Whether a command's arguments name a URL: `kvik bench URL` measures a remote object, any
 * other `kvik bench` the page cache. No value of bench's own options has "://" in it. */
static int names_url(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (argv[i][0] != '-' && strstr(argv[i], "://")) return 1;
  return 0;
}

int cli_main(int argc, char **argv) {
  if (argc < 2) return fputs(usage_text, stdout), CLI_USAGE;
  const char *cmd = argv[1];
  if (cli_is_help(cmd)) return fputs(usage_text, stdout), CLI_OK;
  if (strcmp(cmd, "--version") == 0) return printf("kvik %s\n", kvik_version_string()), CLI_OK;
  if (strcmp(cmd, "info") == 0) return cmd_info(argc - 1, argv + 1);
  if (strcmp(cmd, "bench") == 0)
    return names_url(argc - 1, argv + 1) ? cli_bench_remote(argc - 1, argv + 1)
                                         : cli_bench(argc - 1, argv + 1);
  if (strcmp(cmd, "cat") == 0) return cli_cat(argc - 1, argv + 1);
  fprintf(stderr, "kvik: unknown %s '%s' (try 'kvik --help')\n",
          cmd[0] == '-' ? "option" : "command", cmd);
  return CLI_USAGE;
}
