/*
 * Live health metrics: every NCCL_WATCHDOG_METRICS interval the watchdog thread rewrites one
 * Prometheus text-format file per process (node_exporter's textfile collector reads it), which
 * nccl-watchdog-status also reads. Nothing here runs on the hot path: it reads counters the
 * hot path keeps anyway (sequence numbers, ring tickets, drops).
 */
#ifndef WD_METRICS_H
#define WD_METRICS_H

#include <stdint.h>

#include "base/config.h"
#include "events/context.h"

/* At watchdog start: the file's path and the process's labels. Off when the interval is 0 or
 * there is no directory. */
void wd_metrics_open(const wd_config *cfg, const char *host, int pid);
/* Whether this poll writes the file (the interval has passed). */
int wd_metrics_due(uint64_t now);
/* For each context, with wd_store.lock held, every poll: notes activity; when due, copies the
 * context's counters for the file. */
void wd_metrics_note(wd_context *ctx, uint64_t now, int due);
/* After the pass, when due: writes the file (temporary, rename), with the process counters. */
struct wd_av_stats;
/* av: the automatic verdict's state (autoverdict.h), NULL when there is none. */
void wd_metrics_flush(unsigned stall_episodes, unsigned dumps, const struct wd_av_stats *av);
/* At watchdog stop: removes the file (a process that is gone has no health to report). */
void wd_metrics_close(void);

#endif
