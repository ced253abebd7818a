/* dlopen() with its error kept, and the probe behind kvik_runtime_lib_supported(). */
#define _GNU_SOURCE
#include "dl.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>

#include "error.h"
#include "init.h"
#include "settings.h"
#include "sys.h"

void *kvik__dl_open(const char *soname, char *why, size_t len) {
  dlerror(); /* a stale message from earlier calls must not be reported as ours */
  void *handle = kvik__dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!handle && why && len) {
    const char *reason = dlerror();
    snprintf(why, len, "%s", reason ? reason : "dlopen failed");
  }
  return handle;
}

static const char *const sonames[] = {"libcuda.so.1", "libcufile.so.0", "libcurl.so.4",
                                      "libjansson.so.4"};

int kvik_runtime_lib_supported(kvik_runtime_lib lib, char *detail, size_t len) {
  if ((unsigned)lib >= sizeof sonames / sizeof sonames[0])
    return kvik__fail(-EINVAL, "kvik_runtime_lib_supported: unknown library %d", (int)lib);
  /* libcurl from where remote files would load it (curl.h). */
  char file[4096];
  snprintf(file, sizeof file, "%s", sonames[lib]);
  if (lib == KVIK_LIB_CURL) {
    int rc = kvik__init();
    if (rc < 0) return rc;
    if (kvik__setting_text(KVIK_SETTING_CURL_LIBRARY, file, sizeof file) == 0)
      snprintf(file, sizeof file, "%s", sonames[lib]);
  }
  void *handle = kvik__dl_open(file, detail, len);
  if (!handle) return 0;
  if (detail && len) kvik__dl_path(handle, file, detail, len);
  dlclose(handle);
  return 1;
}

void kvik__dl_path(void *handle, const char *file, char *path, size_t len) {
  struct link_map *map = NULL;
  const char *found =
      dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name[0] ? map->l_name : file;
  snprintf(path, len, "%s", found);
}
