/* The public controls of cuFile's driver: opening it, its version and properties, its
 * parameters and statistics. The driver itself is cufile.c's. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cufile.h"
#include "error.h"
#include "init.h"

/* The open driver for a public call, or NULL with *rc set. */
static const kvik__cufile_api *driver(const char *fn, int *rc) {
  *rc = kvik__init();
  if (*rc < 0) return NULL;
  return kvik__cufile(fn, rc);
}

int kvik_cufile_open(void) {
  int rc;
  return driver("kvik_cufile_open", &rc) ? 0 : rc;
}

static int missing(const char *fn, const char *symbol, const char *since) {
  return kvik__fail(-ENOTSUP, "%s: the loaded cuFile lacks %s (cuFile %s or later)", fn, symbol,
                    since);
}

int kvik_cufile_version(void) {
  static const char fn[] = "kvik_cufile_version";
  int rc;
  const kvik__cufile_api *cf = driver(fn, &rc);
  if (!cf) return rc;
  if (!cf->cuFileGetVersion) return missing(fn, "cuFileGetVersion", "1.9");
  int version = 0;
  rc = kvik__cufile_check(cf->cuFileGetVersion(&version), fn, "cuFileGetVersion");
  return rc < 0 ? rc : version;
}

#define KiB ((size_t)1024)

int kvik_cufile_get_properties(kvik_cufile_properties *props) {
  static const char fn[] = "kvik_cufile_get_properties";
  if (!props || props->struct_size < sizeof(size_t))
    return kvik__fail(-EINVAL, "%s: NULL, or struct_size not set", fn);
  int rc;
  const kvik__cufile_api *cf = driver(fn, &rc);
  if (!cf) return rc;
  kvik__cufile_props p;
  memset(&p, 0, sizeof p);
  rc = kvik__cufile_check(cf->cuFileDriverGetProperties(&p), fn, "cuFileDriverGetProperties");
  if (rc < 0) return rc;
  kvik_cufile_properties out = {
      .struct_size = props->struct_size,
      .nvfs_major_version = p.nvfs.major_version,
      .nvfs_minor_version = p.nvfs.minor_version,
      .gds_available = p.nvfs.major_version > 0,
      .allow_compat_mode = (p.nvfs.dcontrolflags >> KVIK__CUFILE_ALLOW_COMPAT_MODE) & 1,
      .poll_mode = (p.nvfs.dcontrolflags >> KVIK__CUFILE_USE_POLL_MODE) & 1,
      .poll_threshold_size = p.nvfs.poll_thresh_size * KiB,
      .max_direct_io_size = p.nvfs.max_direct_io_size * KiB,
      .max_device_cache_size = p.max_device_cache_size * KiB,
      .per_buffer_cache_size = p.per_buffer_cache_size * KiB,
      .max_device_pinned_mem_size = p.max_device_pinned_mem_size * KiB,
      .max_batch_io_size = p.max_batch_io_size,
      .max_batch_io_timeout_ms = p.max_batch_io_timeout_msecs,
      .file_system_flags = p.nvfs.dstatusflags,
      .feature_flags = p.fflags,
  };
  size_t n = props->struct_size < sizeof out ? props->struct_size : sizeof out;
  memcpy(props, &out, n);
  return 0;
}

int kvik_cufile_set_poll_mode(int enable, size_t threshold_size) {
  static const char fn[] = "kvik_cufile_set_poll_mode";
  int rc;
  const kvik__cufile_api *cf = driver(fn, &rc);
  if (!cf) return rc;
  return kvik__cufile_check(cf->cuFileDriverSetPollMode(enable != 0, threshold_size / KiB), fn,
                            "cuFileDriverSetPollMode");
}

#define DRIVER_SIZE_SETTER(public_name, member)                                                    \
  int public_name(size_t size) {                                                                   \
    int rc;                                                                                        \
    const kvik__cufile_api *cf = driver(#public_name, &rc);                                        \
    if (!cf) return rc;                                                                            \
    return kvik__cufile_check(cf->member(size / KiB), #public_name, #member);                      \
  }
DRIVER_SIZE_SETTER(kvik_cufile_set_max_direct_io_size, cuFileDriverSetMaxDirectIOSize)
DRIVER_SIZE_SETTER(kvik_cufile_set_max_cache_size, cuFileDriverSetMaxCacheSize)
DRIVER_SIZE_SETTER(kvik_cufile_set_max_pinned_memory, cuFileDriverSetMaxPinnedMemSize)
#undef DRIVER_SIZE_SETTER

/* ---- parameters --------------------------------------------------------------------------- */

typedef enum { PARAM_SIZE, PARAM_BOOL, PARAM_STRING } param_type;

typedef struct {
  const char *name;
  param_type type;
  int value; /* cuFile's enum value */
} param_desc;

static const param_desc params[] = {
#define KVIK__PARAM_SIZE_(name, value) {#name, PARAM_SIZE, value},
#define KVIK__PARAM_BOOL_(name, value) {#name, PARAM_BOOL, value},
#define KVIK__PARAM_STRING_(name, value) {#name, PARAM_STRING, value},
    KVIK__CUFILE_SIZE_PARAMS(KVIK__PARAM_SIZE_) KVIK__CUFILE_BOOL_PARAMS(KVIK__PARAM_BOOL_)
        KVIK__CUFILE_STRING_PARAMS(KVIK__PARAM_STRING_)
#undef KVIK__PARAM_SIZE_
#undef KVIK__PARAM_BOOL_
#undef KVIK__PARAM_STRING_
};

#define PARAM_COUNT (sizeof params / sizeof params[0])

const char *kvik_cufile_parameter_name(unsigned index) {
  return index < PARAM_COUNT ? params[index].name : NULL;
}

static const param_desc *find_param(const char *fn, const char *name) {
  for (size_t i = 0; name && i < PARAM_COUNT; i++)
    if (strcmp(params[i].name, name) == 0) return &params[i];
  kvik__fail(-EINVAL,
             "%s(\"%s\"): no such cuFile parameter (kvik_cufile_parameter_name lists them)", fn,
             name ? name : "(null)");
  return NULL;
}

/* The library for a parameter call: loaded, with the 1.14 parameter API. Parameters are set
 * before the driver opens, so this loads without opening. */
static const kvik__cufile_api *param_library(const char *fn, int *rc) {
  *rc = kvik__init();
  if (*rc < 0) return NULL;
  const kvik__cufile_api *cf = kvik__cufile_loaded(fn, rc);
  if (cf && !cf->cuFileGetParameterSizeT) {
    *rc = missing(fn, "cuFileGetParameterSizeT", "1.14");
    return NULL;
  }
  return cf;
}

int kvik_cufile_parameter_get(const char *name, char *value, size_t len) {
  static const char fn[] = "kvik_cufile_parameter_get";
  if (!value || len == 0) return kvik__fail(-EINVAL, "%s: no room for the value", fn);
  value[0] = '\0';
  const param_desc *p = find_param(fn, name);
  int rc;
  const kvik__cufile_api *cf = p ? param_library(fn, &rc) : NULL;
  if (!p) return -EINVAL;
  if (!cf) return rc;
  if (p->type == PARAM_SIZE) {
    size_t v = 0;
    rc = kvik__cufile_check(cf->cuFileGetParameterSizeT(p->value, &v), fn,
                            "cuFileGetParameterSizeT");
    if (rc == 0) snprintf(value, len, "%zu", v);
  } else if (p->type == PARAM_BOOL) {
    bool v = false;
    rc = kvik__cufile_check(cf->cuFileGetParameterBool(p->value, &v), fn, "cuFileGetParameterBool");
    if (rc == 0) snprintf(value, len, "%s", v ? "true" : "false");
  } else {
    rc = kvik__cufile_check(
        cf->cuFileGetParameterString(p->value, value, len > 4096 ? 4096 : (int)len), fn,
        "cuFileGetParameterString");
  }
  return rc;
}

static int parse_bool(const char *text, bool *out) {
  static const char *const yes[] = {"true", "on", "yes", "1"};
  static const char *const no[] = {"false", "off", "no", "0"};
  for (size_t i = 0; i < 4; i++) {
    if (strcasecmp(text, yes[i]) == 0) return *out = true, 0;
    if (strcasecmp(text, no[i]) == 0) return *out = false, 0;
  }
  return -1;
}

int kvik_cufile_parameter_set(const char *name, const char *value) {
  static const char fn[] = "kvik_cufile_parameter_set";
  const param_desc *p = find_param(fn, name);
  if (!p) return -EINVAL;
  if (!value) return kvik__fail(-EINVAL, "%s(\"%s\"): NULL value", fn, name);
  int rc;
  const kvik__cufile_api *cf = param_library(fn, &rc);
  if (!cf) return rc;
  if (p->type == PARAM_SIZE) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (errno || end == value || *end || value[0] == '-')
      return kvik__fail(-EINVAL, "%s(\"%s\"): \"%s\" is not a decimal number", fn, name, value);
    return kvik__cufile_check(cf->cuFileSetParameterSizeT(p->value, (size_t)v), fn,
                              "cuFileSetParameterSizeT");
  }
  if (p->type == PARAM_BOOL) {
    bool v;
    if (parse_bool(value, &v) < 0)
      return kvik__fail(-EINVAL, "%s(\"%s\"): \"%s\" is not true or false", fn, name, value);
    return kvik__cufile_check(cf->cuFileSetParameterBool(p->value, v), fn,
                              "cuFileSetParameterBool");
  }
  return kvik__cufile_check(cf->cuFileSetParameterString(p->value, value), fn,
                            "cuFileSetParameterString");
}

/* ---- statistics ------------------------------------------------------------------------------ */

static const kvik__cufile_api *stats_driver(const char *fn, int *rc) {
  const kvik__cufile_api *cf = driver(fn, rc);
  if (cf && !cf->cuFileGetStatsL1) {
    *rc = missing(fn, "cuFileGetStatsL1", "1.15");
    return NULL;
  }
  return cf;
}

int kvik_cufile_stats_start(int level) {
  static const char fn[] = "kvik_cufile_stats_start";
  if (level < 1 || level > 3)
    return kvik__fail(-EINVAL, "%s(%d): the level is 1, 2 or 3", fn, level);
  int rc;
  const kvik__cufile_api *cf = stats_driver(fn, &rc);
  if (!cf) return rc;
  rc = kvik__cufile_check(cf->cuFileSetStatsLevel(level), fn, "cuFileSetStatsLevel");
  return rc < 0 ? rc : kvik__cufile_check(cf->cuFileStatsStart(), fn, "cuFileStatsStart");
}

int kvik_cufile_stats_stop(void) {
  static const char fn[] = "kvik_cufile_stats_stop";
  int rc;
  const kvik__cufile_api *cf = stats_driver(fn, &rc);
  return cf ? kvik__cufile_check(cf->cuFileStatsStop(), fn, "cuFileStatsStop") : rc;
}

int kvik_cufile_stats_reset(void) {
  static const char fn[] = "kvik_cufile_stats_reset";
  int rc;
  const kvik__cufile_api *cf = stats_driver(fn, &rc);
  return cf ? kvik__cufile_check(cf->cuFileStatsReset(), fn, "cuFileStatsReset") : rc;
}

int kvik_cufile_stats_get(kvik_cufile_stats *stats) {
  static const char fn[] = "kvik_cufile_stats_get";
  if (!stats || stats->struct_size < sizeof(size_t))
    return kvik__fail(-EINVAL, "%s: NULL, or struct_size not set", fn);
  int rc;
  const kvik__cufile_api *cf = stats_driver(fn, &rc);
  if (!cf) return rc;
  kvik__cufile_stats1 s;
  memset(&s, 0, sizeof s);
  rc = kvik__cufile_check(cf->cuFileGetStatsL1(&s), fn, "cuFileGetStatsL1");
  if (rc < 0) return rc;
  kvik_cufile_stats out = {
      .struct_size = stats->struct_size,
      .read_ops = s.read_ops.ok,
      .read_errors = s.read_ops.err,
      .write_ops = s.write_ops.ok,
      .write_errors = s.write_ops.err,
      .read_bytes = s.read_bytes,
      .write_bytes = s.write_bytes,
      .read_bw_bytes_per_sec = s.read_bw_bytes_per_sec,
      .write_bw_bytes_per_sec = s.write_bw_bytes_per_sec,
      .read_lat_avg_us = s.read_lat_avg_us,
      .write_lat_avg_us = s.write_lat_avg_us,
      .batch_submit_ops = s.batch_submit_ops.ok,
      .batch_complete_ops = s.batch_complete_ops.ok,
      .batch_read_bytes = s.batch_read_bytes,
      .batch_write_bytes = s.batch_write_bytes,
  };
  size_t n = stats->struct_size < sizeof out ? stats->struct_size : sizeof out;
  memcpy(stats, &out, n);
  return 0;
}
