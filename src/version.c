/* The version of the library that is loaded, as opposed to the header's macros. */
#include "kvik.h"

unsigned kvik_version(void) { return KVIK_VERSION_NUM; }

const char *kvik_version_string(void) { return KVIK_VERSION_STRING; }
