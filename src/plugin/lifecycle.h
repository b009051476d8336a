/*
 * The plugin's life in a process: the first init loads the configuration, opens the event store
 * and starts the watchdog; the last finalize stops and closes them; a forked child goes quiet.
 */
#ifndef WD_LIFECYCLE_H
#define WD_LIFECYCLE_H

#include <stdint.h>

#include "base/log.h"
#include "events/context.h"

/* init of one communicator. Returns 0 with *out NULL when the plugin is disabled or the
 * communicator cannot be profiled, -1 when the process-wide start failed. */
int wd_lifecycle_init(wd_context **out, int abi, uint64_t comm_id, const char *name, int nnodes,
                      int nranks, int rank, int *mask, wd_logger_fn logfn);
/* finalize of one communicator; the last one stops everything. Unknown contexts are ignored. */
void wd_lifecycle_finalize(wd_context *ctx);

#endif
