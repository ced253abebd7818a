/* Process-wide settings (see kvik.h for the table of settings and variables). */
#ifndef KVIK_SRC_SETTINGS_H
#define KVIK_SRC_SETTINGS_H

#include <stdint.h>

#include "kvik.h"

/* The current value of a setting. Only meaningful after kvik__init() succeeded: its step here
 * reads every setting's environment variable (an invalid value makes it fail with KVIK_ECONFIG,
 * the detail message naming the first bad variable and its value). */
int64_t kvik__setting(kvik_setting setting);

/* Whether a response with this HTTP status is tried again (KVIK_SETTING_HTTP_STATUS_CODES). */
int kvik__http_status_retryable(long status);

#endif
