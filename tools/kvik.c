/* kvik: the command line tool of libkvik. `kvik info` shows what the library found on this
 * machine, `kvik bench` (bench.c) measures it. Only the public kvik.h API is used, so the tool
 * also shows what any application can see. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kvik.h"

static const char usage_text[] =
    "usage: kvik <command> [options]\n"
    "\n"
    "Fast parallel file IO (a C take on NVIDIA KvikIO).\n"
    "\n"
    "commands:\n"
    "  info [DIR]   version, settings, CUDA/cuFile presence, GPUs, O_DIRECT support of DIR\n"
    "  bench        page-cache throughput of kvik next to plain pread/pwrite loops\n"
    "\n"
    "options:\n"
    "  -h, --help   show this help\n"
    "  --version    show the library version\n"
    "\n"
    "'kvik <command> --help' shows the options of a command.\n";

static const char info_usage[] =
    "usage: kvik info [DIR]\n"
    "\n"
    "Print the library version, every setting with its value, environment variable and\n"
    "source, whether the CUDA driver and cuFile can be loaded, the GPUs that device IO can\n"
    "use (or why it cannot), and whether files in DIR\n"
    "(default: the current directory) can be opened with O_DIRECT.\n";

int cli_is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }

int cli_fail(const char *command) {
  fprintf(stderr, "kvik %s: %s\n", command, kvik_last_error());
  return CLI_ERROR;
}

int cli_usage_error(const char *command, const char *message, const char *arg) {
  fprintf(stderr, "kvik %s: %s '%s' (try 'kvik %s --help')\n", command, message, arg, command);
  return CLI_USAGE;
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
    if (kvik_setting_format((kvik_setting)s, values[s], sizeof values[s]) < 0) return cli_fail("info");
    name_w = max_int(name_w, (int)strlen(kvik_setting_name((kvik_setting)s)));
    value_w = max_int(value_w, (int)strlen(values[s]));
    env_w = max_int(env_w, (int)strlen(kvik_setting_env_name((kvik_setting)s)));
  }
  printf("settings:\n  %-*s  %-*s  %-*s  %s\n", name_w, "setting", value_w, "value", env_w,
         "environment variable", "source");
  for (int s = 0; s < KVIK_SETTING_COUNT; s++)
    printf("  %-*s  %-*s  %-*s  %s\n", name_w, kvik_setting_name((kvik_setting)s), value_w, values[s],
           env_w, kvik_setting_env_name((kvik_setting)s),
           source_name(kvik_setting_source_of((kvik_setting)s)));
  return CLI_OK;
}

static void print_lib(const char *label, kvik_runtime_lib lib) {
  char detail[512] = "";
  int found = kvik_runtime_lib_probe(lib, detail, sizeof detail);
  if (found < 0) snprintf(detail, sizeof detail, "%s", kvik_last_error());
  printf("  %-12s %s: %s\n", label, found == 1 ? "found" : "not found", detail);
}

/* What device IO can use: the driver's version and devices, or why it cannot work. */
static void print_cuda(void) {
  int version = kvik_cuda_driver_version();
  int count = version < 0 ? version : kvik_cuda_device_count();
  if (count < 0) {
    printf("\nGPU memory: unavailable (host IO works): %s\n", kvik_last_error());
    return;
  }
  printf("\nGPU memory: CUDA driver %d.%d, %d device%s\n", version / 1000, version % 1000 / 10, count,
         count == 1 ? "" : "s");
  for (int i = 0; i < count; i++) {
    char name[256];
    if (kvik_cuda_device_name(i, name, sizeof name) < 0) snprintf(name, sizeof name, "? (%s)", kvik_last_error());
    printf("  device %d: %s\n", i, name);
  }
}

static int cmd_info(int argc, char **argv) {
  const char *dir = ".";
  for (int i = 1; i < argc; i++) {
    if (cli_is_help(argv[i])) return fputs(info_usage, stdout), CLI_OK;
    if (argv[i][0] == '-') return cli_usage_error("info", "unknown option", argv[i]);
    if (i > 1) return cli_usage_error("info", "unexpected argument", argv[i]);
    dir = argv[i];
  }
  /* An invalid environment value makes every setting meaningless: fail before printing any. */
  for (int s = 0; s < KVIK_SETTING_COUNT; s++) {
    int64_t unused;
    if (kvik_setting_get((kvik_setting)s, &unused) < 0) return cli_fail("info");
  }
  printf("kvik %s\n\n", kvik_version_string());
  if (print_settings() != CLI_OK) return CLI_ERROR;
  printf("\nruntime libraries:\n");
  print_lib("CUDA driver", KVIK_LIB_CUDA);
  print_lib("cuFile", KVIK_LIB_CUFILE);
  print_cuda();
  int direct = kvik_direct_io_supported(dir);
  if (direct < 0) return cli_fail("info");
  printf("\nO_DIRECT in %s: %s\n", dir, direct ? "supported" : "not supported");
  return CLI_OK;
}

int main(int argc, char **argv) {
  if (argc < 2) return fputs(usage_text, stdout), CLI_USAGE;
  const char *cmd = argv[1];
  if (cli_is_help(cmd)) return fputs(usage_text, stdout), CLI_OK;
  if (strcmp(cmd, "--version") == 0) return printf("kvik %s\n", kvik_version_string()), CLI_OK;
  if (strcmp(cmd, "info") == 0) return cmd_info(argc - 1, argv + 1);
  if (strcmp(cmd, "bench") == 0) return cli_bench(argc - 1, argv + 1);
  fprintf(stderr, "kvik: unknown %s '%s' (try 'kvik --help')\n", cmd[0] == '-' ? "option" : "command", cmd);
  return CLI_USAGE;
}
