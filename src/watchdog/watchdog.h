/* The watchdog thread: stall detection, snapshot signals, peer triggers, dumps. */
#ifndef WD_WATCHDOG_H
#define WD_WATCHDOG_H

#include "base/config.h"

/* Start the thread and install the signal handlers (first init). 0, or -1 (plugin keeps
 * recording but cannot dump). cfg stays alive until wd_watchdog_stop. Called under the
 * lifecycle lock. */
int wd_watchdog_start(const wd_config *cfg);
/* A communicator is being finalized (NCCL's thread, before it is retired): when it has
 * operations in flight (ncclCommAbort, a framework's timeout path), the watchdog thread writes
 * one "abort" dump of it while the caller waits, at most a few seconds. Returns 1 when a dump
 * was written. */
struct wd_context;
int wd_watchdog_finalizing(struct wd_context *ctx);
/* Stop and join the thread, restore every handler (last finalize). */
void wd_watchdog_stop(void);

#endif
