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
/* What this poll exports: the file, the OTLP request (NCCL_WATCHDOG_OTLP_ENDPOINT), both or
 * neither (0), as their intervals pass. */
enum { WD_M_DUE_FILE = 1, WD_M_DUE_OTLP = 2 };
int wd_metrics_due(uint64_t now);
/* For each context, with wd_store.lock held, every poll: notes activity, feeds telemetry its
 * new records; when due, copies the context's counters. */
void wd_metrics_note(wd_context *ctx, uint64_t now, int due);
/* After the pass, when due: writes the file (temporary, rename) and starts the OTLP export. */
struct wd_av_stats;
/* av: the automatic verdict's state (autoverdict.h), NULL when there is none. */
void wd_metrics_flush(int due, unsigned stall_episodes, unsigned dumps, const struct wd_av_stats *av);
/* After the poll's scan (telemetry forgets freed communicators). */
void wd_metrics_end_poll(void);
/* At watchdog stop: removes the file (a process that is gone has no health to report), ends
 * the OTLP export. */
void wd_metrics_close(void);

#endif
