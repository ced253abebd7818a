/* What other modules need of a file handle's insides. */
#ifndef KVIK_SRC_FILE_H
#define KVIK_SRC_FILE_H

#include "gds.h"
#include "kvik.h"

/* The file's GPUDirect Storage state (kvik__gds_handle() gives its cuFile handle, if any). */
kvik__gds_file *kvik__file_gds(kvik_file *file);

/* The path the file was opened with, for messages. */
const char *kvik__file_path(const kvik_file *file);

#endif
