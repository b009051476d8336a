/*
 * Fail-slow telemetry: aggregates built on the watchdog thread from what the rings already hold,
 * so the hot path gains nothing. Each poll reads the records written since the last one:
 *   - per collective function and size class, a histogram of the time from enqueue to completion
 *     (the host's clock: NCCL's Coll stop comes at enqueue, so completion is the last stop of its
 *     proxy work and kernel channels, once NCCL's counters say it completed) and of the kernel's
 *     own time (the GPU's clock, KernelCh: first channel start to last channel stop);
 *   - per communicator, peer, channel and direction (a link), bytes moved, steps, step time and
 *     the time the link was busy, so a slow link stands out among its peers;
 *   - per communicator, how long this rank's collectives wait for the others (KernelPhase
 *     initial_sync where NCCL reports it, enqueue to completion otherwise), against its own
 *     history: a rank that arrives late waits less than its peers and less than it used to.
 * A busy ring laps between polls: what was overwritten is counted (records_missed), so the
 * histograms are a sample whose size is known. Memory: bounded tables, sized at start.
 */
#ifndef WD_TM_AGGREGATE_H
#define WD_TM_AGGREGATE_H

#include <stdint.h>

#include "events/context.h"

/* Histogram bounds in seconds (Prometheus buckets, OTLP explicit bounds). */
#define WD_TM_NBOUNDS 13
extern const double wd_tm_bounds[WD_TM_NBOUNDS];
/* Size classes of a call's payload (bytes = count x datatype size). */
#define WD_TM_NCLASSES 5
extern const char *const wd_tm_class_names[WD_TM_NCLASSES];

typedef struct wd_tm_hist {
  uint64_t buckets[WD_TM_NBOUNDS + 1]; /* not cumulative; the last one is +Inf */
  uint64_t count;
  double sum;
} wd_tm_hist;

/* One function and size class: p2p (Send, Recv) and collectives alike. */
typedef struct wd_tm_func {
  uint8_t func; /* string id (flightrec/strtab.h) */
  uint8_t size_class;
  wd_tm_hist host; /* enqueue to completion */
  wd_tm_hist gpu;  /* the kernel's longest channel, GPU clock */
} wd_tm_func;

typedef struct wd_tm_comm {
  uint64_t comm_id;
  char name[128];
  int rank, nranks;
  /* Collectives observed from enqueue to completion, and their total time. */
  uint64_t colls;
  double coll_s;
  /* KernelPhase initial_sync (NCCL 2.31+): channels that reported it, their total wait. */
  uint64_t syncs;
  double sync_s;
  /* Arrival, per interval (wd_tm_interval): the mean wait of the last interval and its
   * exponentially weighted history; lag = baseline - recent (> 0: arrives later than it did). */
  double recent_s, baseline_s, lag_s;
  int have_recent, have_baseline, sync_based;
  uint64_t mark_n;
  double mark_s;
} wd_tm_comm;

typedef struct wd_tm_link {
  int comm; /* index into comms */
  int peer; /* -1: the communicator's links beyond the table's bound, folded */
  uint8_t channel, send;
  uint64_t bytes, steps;
  double step_s, busy_s;
  /* Sends only: the network's own part of its steps (SendWait to stop), which a slow link
   * lengthens while every link of a pipelined ring shares the slowest one's step time. */
  double net_s;
  /* Throughput over the last interval, bytes per second of busy time (0 until it moved data),
   * and bytes per second of network time (sends). */
  uint64_t mark_bytes;
  double mark_busy, rate, mark_net, net_rate;
} wd_tm_link;

/* What the exporters read (watchdog thread only). */
typedef struct wd_tm_view {
  const wd_tm_func *funcs;
  uint32_t nfuncs;
  const wd_tm_comm *comms;
  uint32_t ncomms;
  const wd_tm_link *links;
  uint32_t nlinks;
  uint64_t records_missed;
  uint64_t links_folded; /* link rows that did not fit the bound and were folded */
} wd_tm_view;

/* max_links: the bound on link rows of the process (NCCL_WATCHDOG_TELEMETRY_LINKS). 0 on
 * success, -1 when out of memory (telemetry stays off). */
int wd_tm_open(uint32_t max_links);
/* Every poll, for each context, with wd_store.lock held: reads its new records. */
void wd_tm_note(wd_context *ctx);
/* After the pass: forgets the contexts that were not seen (freed), and their links. */
void wd_tm_end_poll(void);
/* At each export interval: the per-interval figures (link rates, arrival lag). */
void wd_tm_interval(void);
void wd_tm_get(wd_tm_view *v);
void wd_tm_close(void);

/* Bytes of one element of a datatype named as NCCL names it ("ncclFloat32"), 0 when unknown. */
unsigned wd_tm_dtype_size(const char *name);
int wd_tm_size_class(uint64_t bytes);
/* Add one observation of `seconds`. */
void wd_tm_observe(wd_tm_hist *h, double seconds);

#endif
