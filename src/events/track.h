/*
 * Event lifecycle shared by the entry points and the watchdog: references between events,
 * completion of operations, progress stamps, ring records. See docs/architecture.md.
 */
#ifndef WD_TRACK_H
#define WD_TRACK_H

#include <string.h>

#include "events/context.h"
#include "events/event.h"

/* A start request, normalised from the v4/v5/v6 descriptors. */
typedef struct wd_start_req {
  void *context;
  void *parent_obj;
  void *group_obj;   /* Coll/P2p: the Group event (v5/v6 parentGroup, v4 parentObj) */
  int pid;           /* ProxyOp only */
  void *stream;      /* KernelLaunch, CeColl: the CUDA stream NCCL enqueues on */
  uint64_t user_tag; /* v7: the call's userTag, 0 = none */
  union {
    wd_record rec;   /* type, flags and type fields filled by the entry point */
    wd_recw recw;
  };
} wd_start_req;

void *wd_track_start(wd_start_req *req);
/* The common start: a ProxyStep, KernelCh or ProxyOp under a live parent of the same
 * communicator, without the general request (anything else goes the general way). Its fields
 * as in wd_record, packed into registers: val = a for a KernelCh, count for a ProxyOp (the other
 * is 0; a ProxyStep has neither), n_pid = n | pid << 32, meta = wd_child_meta(). Stores the
 * handle (or NULL) in *out and returns 0, always: the entry point returns that as ncclSuccess, a
 * tail call. */
static inline uint64_t wd_child_meta(unsigned type, unsigned flags, unsigned channel, int32_t peer) {
  return type | (flags << 8) | (channel << 16) | ((uint64_t)(uint32_t)peer << 32);
}
int wd_track_child_start(void *context, void **out, void *parent_obj, uint64_t val, uint64_t n_pid,
                         uint64_t meta);
/* The same for a ProxyStep (step: its number), the commonest start. */
int wd_track_step_start(void *context, void **out, void *parent_obj, uint32_t step);
/* A KernelCh (its pTimer and channel), and a ProxyOp (arguments as wd_track_child_start's). */
int wd_track_kch_start(void *context, void **out, void *parent_obj, uint64_t ptimer, uint8_t channel);
int wd_track_proxyop_start(void *context, void **out, void *parent_obj, uint64_t val, uint64_t n_pid,
                           uint64_t meta);
/* Stop and state return 0, always: the entry points return it as ncclSuccess (tail calls). */
int wd_track_stop(void *handle);
/* A state change: NCCL's state id and its arguments, NULL when NCCL gave none (a union whose
 * members all begin at its start: ProxyStep transSize / KernelCh pTimer read as the whole word,
 * ProxyCtrl appendedProxyOps as its first int). Touches only the event's own slot: the watchdog
 * carries progress up to the root operation when it scans (stall.c). */
int wd_track_state(void *handle, int state, const void *args);

/* Drop one reference; the last one completes the event and returns its slot. Returns 0. */
int wd_event_unref(wd_event *ev);
/* Stop an event NCCL will never stop (watchdog only). Returns 1 if this call closed it. */
int wd_event_abandon(wd_event *ev, uint64_t now);
/* Release the kernel-channel hold of a root operation once. */
void wd_event_release_hold(wd_event *ev);
/* Watchdog thread, after wd_graphs_poll gave slots back: the captured API events that named
 * them (kept for their replays) are unpinned; then wd_graphs_settle frees the slots. */
void wd_unpin_gone(wd_context *ctx);

/* Copy an event's start record with atomic word loads (safe while it is being reused; the
 * caller validates with the slot's seq word). */
static inline void wd_event_read_words(const wd_event *ev, uint64_t *out) {
  out[0] = 0; /* the turn: a slot's start record has none */
#pragma GCC unroll 16
  for (unsigned i = 1; i < WD_RECORD_WORDS; i++) out[i] = __atomic_load_n(&ev->startw[i], __ATOMIC_RELAXED);
}

static inline void wd_event_read_start(const wd_event *ev, wd_record *out) {
  wd_recw w;
  wd_event_read_words(ev, w.w);
  *out = w.r;
}

static inline int wd_type_is_proxy_level(unsigned type) {
  return type == WD_T_PROXYOP || type == WD_T_PROXYSTEP || type == WD_T_PROXYCTRL ||
         type == WD_T_KERNELCH || type == WD_T_NETPLUGIN || type == WD_T_KERNELPHASE;
}

/* Types whose state changes update only their slot, never the ring, and read no clock: NCCL's
 * proxy thread reports several per step. Their stop record carries the last state and value;
 * the watchdog's scan dates a state by when it first sees it (at most one poll late: a stall is
 * found late, never early). */
static inline int wd_state_in_slot(unsigned type) {
  return type == WD_T_PROXYSTEP || type == WD_T_PROXYOP || type == WD_T_KERNELCH ||
         type == WD_T_KERNELPHASE;
}

/* What the scan compares to tell that a slot's state moved: the state id and its value. */
static inline uint64_t wd_state_sig(const wd_event *ev) {
  return atomic_load_explicit(&ev->state, memory_order_relaxed) |
         (atomic_load_explicit(&ev->last_trans, memory_order_relaxed) << 8);
}
#define WD_SIG_NONE 0xffu /* a fresh start: no state, no value */

#endif
