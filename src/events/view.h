/*
 * Consistent copies of live event slots for readers off the hot path (the watchdog, dumps): a
 * seqlock read of the slot, and the status of a root operation as its events show it.
 */
#ifndef WD_VIEW_H
#define WD_VIEW_H

#include <stdint.h>

#include "events/context.h"
#include "events/event.h"
#include "flightrec/record.h"

/* Status of an in-flight root operation (Coll, P2p, or a ProxyOp whose parent is gone). */
enum {
  WD_OP_ENQUEUED = 0, /* stopped (handed to the proxy / GPU stream), the GPU not there yet */
  WD_OP_REACHED = 1,  /* the GPU got to it (start event, KernelCh start, data posted or taken) */
  WD_OP_GPU_DONE = 2, /* its kernel finished (end event, or every kernel channel with nothing
                         the kernel needs left open); only proxy tails remain */
  WD_OP_STALLED = 3,  /* reached and no progress for longer than the timeout */
  WD_OP_POSTING = 4,  /* started, not stopped yet (being enqueued) */
  WD_OP_ABANDONED = 5, /* its proxy thread exited with it in flight (revoke, shrink, abort) */
};
const char *wd_op_status_name(int status); /* "enqueued", "reached", ... */

/* One live event. */
typedef struct wd_ev_snap {
  wd_record start;        /* its start record: type, slot, parent slot, fields, start time */
  uint64_t last_ns;       /* last progress at or under this event (CLOCK_MONOTONIC) */
  uint8_t last_state;     /* last NCCL state id, 0xff when none */
  uint8_t stopped;        /* NCCL stopped it (for Coll/P2p: enqueued) */
  uint8_t status;         /* WD_OP_* for root operations, 0 otherwise */
  uint8_t is_root;        /* a root operation: dumps show it as the top of an open tree */
  uint32_t children_open; /* children started and not stopped */
  uint32_t children_seen; /* children ever started */
  uint32_t steps_done;    /* ProxyOp: ProxySteps stopped */
  uint32_t kch_expected;  /* Coll/P2p: kernel channels expected (0 when KernelCh is off) */
  uint32_t kch_done;      /* Coll/P2p: kernel channels stopped */
  uint64_t last_trans;    /* ProxyStep: last transSize; KernelCh: GPU stop time */
  uint32_t gpu_wait;      /* root ops: open ProxySteps the kernel still needs (last scan) */
  uint32_t gpu;           /* root ops: WD_GPU_* (last scan) */
  uint64_t reached_ns;    /* root ops: when the GPU got there (ground truth when known), 0 not yet */
} wd_ev_snap;

typedef struct wd_slot_view {
  wd_ev_snap snap;
  wd_event *ev;
  void *handle;   /* ptr|tag at the time of the read, to re-validate before acting */
  wd_event *root; /* NULL for roots and untracked events */
  uint64_t order;
  uint8_t open;
  uint8_t superseded; /* a later operation of its context completed (ctx given) */
  uint8_t group_done; /* an operation of its own group, or a later one, completed (ctx given) */
} wd_slot_view;

/* Copy a live slot; returns 0 when the slot is free or changed during the copy. For a root
 * operation the status is set from its events (never WD_OP_STALLED: that is the watchdog's
 * rule); ctx, when given, is the slot's context, for supersession. */
int wd_slot_read(wd_event *ev, const wd_context *ctx, wd_slot_view *v);

#endif
