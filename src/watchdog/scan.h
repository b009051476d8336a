/*
 * The watchdog's view of live events: consistent copies of event slots (seqlock reads), the
 * status of each in-flight operation, and the stall rules. Called with wd_proc.lock held.
 */
#ifndef WD_SCAN_H
#define WD_SCAN_H

#include "../flightrec/dump.h"
#include "../plugin/context.h"

typedef struct wd_slot_view {
  wd_ev_snap snap;
  wd_event *ev;
  void *handle;   /* ptr|tag at the time of the read, to re-validate before acting */
  wd_event *root; /* NULL for roots and untracked events */
  uint64_t order;
  uint8_t open;
  uint8_t superseded;
} wd_slot_view;

/* Copy a live slot; returns 0 when the slot is free or changed during the copy. */
int wd_slot_read(wd_event *ev, uint64_t now, const wd_context *ctx, const wd_config *cfg,
                 wd_slot_view *v);

/* Stall rules for one root view (status already computed by wd_slot_read). */
int wd_view_is_stalled(const wd_slot_view *v, uint64_t now, const wd_config *cfg);

/* One pass over a context: retire operations a later completed one vouches for, abandon their
 * children that NCCL will never stop, and append stalls (up to max) to out. Returns the number
 * of stalls appended. */
uint32_t wd_scan_context(wd_context *ctx, uint64_t now, const wd_config *cfg, wd_stall *out,
                         uint32_t max);

/* Describe what a stalled root operation waits on (its least recently progressed open leaf). */
void wd_describe_wait(wd_context *ctx, const wd_event *root, uint64_t now, char *buf,
                      unsigned len);

#endif
