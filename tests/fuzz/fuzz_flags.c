/* kvik_file_open's flag string: any text either opens the file with one of the six flag strings
 * or fails with a negative code; it never crashes. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const valid[] = {"r", "r+", "w", "w+", "a", "a+"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[512];
  if (!path[0]) {
    snprintf(path, sizeof path, "%s/file", fuzz_tmpdir());
    FILE *f = fopen(path, "w");
    if (!f || fputs("kvik", f) < 0 || fclose(f) != 0) abort();
  }
  char *flags = fuzz_string(data, size);
  kvik_file *file = (kvik_file *)(uintptr_t)1; /* must be overwritten or left alone, never used */
  int rc = kvik_file_open(path, flags, 0644, &file);
  int known = -1;
  for (int i = 0; i < 6; i++)
    if (strcmp(flags, valid[i]) == 0) known = i;
  if (rc == 0) {
    FUZZ_CHECK(known >= 0, "opened with flags \"%s\"", flags);
    FUZZ_CHECK(file != NULL && file != (kvik_file *)(uintptr_t)1, "no handle for \"%s\"", flags);
    int open_flags = kvik_file_open_flags(file);
    int want = flags[0] == 'r' ? (flags[1] ? O_RDWR : O_RDONLY) : flags[1] ? O_RDWR : O_WRONLY;
    FUZZ_CHECK(open_flags >= 0 && (open_flags & O_ACCMODE) == want, "\"%s\" opened with F_GETFL %#x", flags,
               open_flags);
    FUZZ_CHECK(!!(open_flags & O_APPEND) == (flags[0] == 'a'), "\"%s\": O_APPEND is %d", flags,
               !!(open_flags & O_APPEND));
    kvik_file_free(file);
  } else {
    FUZZ_CHECK(known < 0, "valid flags \"%s\" failed with %d", flags, rc);
    FUZZ_CHECK(rc == -EINVAL, "flags \"%s\": expected -EINVAL, got %d", flags, rc);
    FUZZ_CHECK(kvik_last_error()[0] != '\0', "no message for flags \"%s\"", flags);
  }
  free(flags);
  return 0;
}
