/*
 * The stall rule and the watchdog's pass over a context's live events: which in-flight
 * operations are stalled, what each waits on, and which finished operations NCCL will never
 * report. Called with wd_store.lock held.
 */
#ifndef WD_STALL_H
#define WD_STALL_H

#include "base/config.h"
#include "dump/snapshot.h"
#include "events/context.h"
#include "events/view.h"

/* wd_slot_read, then the stall rule: a stalled root operation's status is WD_OP_STALLED. */
int wd_view_read(wd_event *ev, uint64_t now, const wd_context *ctx, const wd_config *cfg,
                 wd_slot_view *v);

/* Stall rules for one root view (status already computed by wd_slot_read). */
int wd_view_is_stalled(const wd_slot_view *v, uint64_t now, const wd_config *cfg);

/* One pass over a context: retire operations a later completed one vouches for, abandon their
 * children that NCCL will never stop, and append stalls (up to max) to out. Returns the number
 * of stalls appended. Every context's calls are noted first (wd_note_calls): a communicator made
 * and called after an operation started tells a revoke recovered from from a network error. */
void wd_note_calls(wd_context *ctx, uint64_t now);
/* Records NCCL's proxy-level callbacks (ProxyOp, ProxyStep, KernelCh) wrote to ctx's proxy ring
 * so far, the stops of events the watchdog closed itself left out: unchanged, NCCL reported no
 * work of ctx progressing meanwhile (an application that only enqueues writes none). */
uint64_t wd_context_proxy_records(const wd_context *ctx);
uint32_t wd_scan_context(wd_context *ctx, uint64_t now, const wd_config *cfg, wd_stall *out,
                         uint32_t max);

/* Operations of ctx NCCL left in flight: reached, not done, quiet for two polls (a finalize
 * that comes with some is an abort, not a normal destroy). */
uint32_t wd_context_inflight(wd_context *ctx, uint64_t now, const wd_config *cfg);

/* Describe what a stalled root operation waits on (its least recently progressed open leaf). */
void wd_describe_wait(wd_context *ctx, const wd_event *root, char *buf,
                      unsigned len);

#endif
