/* Cancellation as the layers below a request see it: a flag this thread watches while it runs
 * work that may become pointless part way, such as one task of a request whose other task
 * failed. The layer that owns the work (request.c) points the thread at the flag; the layers
 * below (http.c) ask kvik__cancelled() between and during their transfers and stop early,
 * without knowing what set it. A hook, so that no lower layer calls up. */
#ifndef KVIK_SRC_CANCEL_H
#define KVIK_SRC_CANCEL_H

#include <stdatomic.h>

/* Watch `flag` (NULL: none) on this thread from now on; returns the flag watched before, which
 * the caller restores when its work ends. The flag must stay valid while it is watched. */
const atomic_int *kvik__cancel_watch(const atomic_int *flag);

/* Whether the flag this thread watches is set: the work should stop. One load; 0 with none. */
int kvik__cancelled(void);

#endif
