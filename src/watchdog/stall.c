/* The stall rule and the watchdog's pass over a context's live events (stall.h). */
#include "watchdog/stall.h"

#include <stdio.h>
#include <string.h>

#include "events/track.h"
#include "flightrec/strtab.h"

int wd_view_read(wd_event *ev, uint64_t now, const wd_context *ctx, const wd_config *cfg,
                 wd_slot_view *v) {
  if (!wd_slot_read(ev, ctx, v)) return 0;
  if (v->snap.is_root && wd_view_is_stalled(v, now, cfg)) v->snap.status = WD_OP_STALLED;
  return 1;
}

int wd_view_is_stalled(const wd_slot_view *v, uint64_t now, const wd_config *cfg) {
  if (!v->snap.is_root || v->open || v->superseded) return 0;
  if (v->snap.start.flags & WD_F_DETACHED) return 0;
  uint64_t idle = now > v->snap.last_ns ? now - v->snap.last_ns : 0;
  if (v->snap.kch_expected && v->snap.kch_done >= v->snap.kch_expected) return 0;
  if (v->snap.children_seen > 0) return idle > cfg->timeout_ns;
  /* Not reached: the GPU has not got there yet. Optional, much longer threshold. */
  return cfg->unreached_timeout_ns && idle > cfg->unreached_timeout_ns;
}

static int wd_wait_priority(unsigned type) {
  switch (type) {
  case WD_T_PROXYSTEP: return 3;
  case WD_T_PROXYOP: return 2;
  case WD_T_KERNELCH: return 1;
  default: return 0;
  }
}

void wd_describe_wait(wd_context *ctx, const wd_event *root, char *buf,
                      unsigned len) {
  wd_slot_view best, v, op;
  memset(&best, 0, sizeof(best));
  int have = 0;
  for (int p = 0; p < WD_CTX_NPOOLS; p++)
  for (uint32_t i = 0, n = wd_pool_nslots(wd_ctx_pool(ctx, p)); i < n; i++) {
    wd_event *ev = wd_pool_slot(wd_ctx_pool(ctx, p), i);
    if (atomic_load_explicit(&ev->root, memory_order_relaxed) != root) continue;
    if (!wd_slot_read(ev, NULL, &v) || !v.open || v.snap.children_open) continue;
    /* The open leaf that progressed least recently is what the operation waits on; network
     * steps say more (peer, direction) than a kernel channel that is merely running. */
    int pri = wd_wait_priority(v.snap.start.type), best_pri = have ? wd_wait_priority(best.snap.start.type) : -1;
    if (!have || pri > best_pri || (pri == best_pri && v.snap.last_ns < best.snap.last_ns)) {
      best = v;
      have = 1;
    }
  }
  if (!have) {
    snprintf(buf, len, "no open child: waiting for the GPU or the proxy to start its next step");
    return;
  }
  const wd_record *r = &best.snap.start;
  const char *state = best.snap.last_state == 0xff ? "no state yet" : wd_state_name(best.snap.last_state);
  wd_event *parent = r->type == WD_T_PROXYSTEP ? wd_ctx_slot(ctx, r->parent) : NULL;
  if (parent && wd_slot_read(parent, NULL, &op)) {
    const wd_record *o = &op.snap.start;
    snprintf(buf, len, "ProxyStep %d of %d (%s peer %d, channel %u) in %s", r->n, o->n,
             (o->flags & WD_F_SEND) ? "send to" : "recv from", o->peer, o->channel, state);
  } else if (r->type == WD_T_PROXYOP) {
    snprintf(buf, len, "ProxyOp (%s peer %d, channel %u), %u of %d steps done, in %s",
             (r->flags & WD_F_SEND) ? "send to" : "recv from", r->peer, r->channel,
             best.snap.steps_done, r->n, state);
  } else if (r->type == WD_T_KERNELCH) {
    snprintf(buf, len, "KernelCh channel %u running on the GPU (no stop)", r->channel);
  } else {
    snprintf(buf, len, "%s slot %u in %s", wd_type_name(r->type), r->slot, state);
  }
}

static void wd_fill_stall(wd_context *ctx, const wd_slot_view *v, uint64_t now, wd_stall *s) {
  memset(s, 0, sizeof(*s));
  const wd_record *r = &v->snap.start;
  s->comm_id = ctx->comm_id;
  snprintf(s->comm_name, sizeof(s->comm_name), "%s", ctx->name);
  s->rank = ctx->rank;
  s->nranks = ctx->nranks;
  s->type = r->type;
  s->func = r->func;
  s->seq = (r->type == WD_T_COLL || r->type == WD_T_CECOLL) ? (int64_t)r->a : -1;
  s->peer = r->peer;
  s->slot = r->slot;
  s->since_progress_ns = now > v->snap.last_ns ? now - v->snap.last_ns : 0;
  s->age_ns = now > r->ts_ns ? now - r->ts_ns : 0;
  if (v->snap.children_seen == 0)
    snprintf(s->waiting_on, sizeof(s->waiting_on), "not reached: enqueued, no kernel channel or proxy operation started");
  else
    wd_describe_wait(ctx, v->ev, s->waiting_on, sizeof(s->waiting_on));
}

/* Time since the event last progressed; an event may progress after `now` was read. */
static inline uint64_t wd_quiet_for(const wd_slot_view *v, uint64_t now) {
  return now > v->snap.last_ns ? now - v->snap.last_ns : 0;
}

uint32_t wd_scan_context(wd_context *ctx, uint64_t now, const wd_config *cfg, wd_stall *out,
                         uint32_t max) {
  uint32_t nst = 0;
  uint64_t settle = 2 * cfg->poll_ns;
  for (int p = 0; p < WD_CTX_NPOOLS; p++)
  for (uint32_t i = 0, n = wd_pool_nslots(wd_ctx_pool(ctx, p)); i < n; i++) {
    wd_event *ev = wd_pool_slot(wd_ctx_pool(ctx, p), i);
    wd_slot_view v;
    if (!wd_view_read(ev, now, ctx, cfg, &v)) continue;
    if (v.snap.is_root) {
      if (v.snap.status == WD_OP_STALLED && nst < max) wd_fill_stall(ctx, &v, now, &out[nst++]);
      /* A later operation completed: this one is done on the GPU even if NCCL never says so. */
      if (v.superseded && !v.open && wd_quiet_for(&v, now) >= settle &&
          wd_event_from_handle(v.handle) == ev)
        wd_event_release_hold(ev);
    } else if (v.open && v.root) {
      wd_event *root = v.root;
      int done = atomic_load_explicit(&root->order, memory_order_relaxed) <
                 atomic_load_explicit(&ctx->completed_order, memory_order_relaxed);
      /* Children NCCL never stops (CollNet, p2p memcpy ProxyOps) once the op is done. */
      if (done && wd_quiet_for(&v, now) >= settle && v.snap.children_open == 0 &&
          wd_event_from_handle(v.handle) == ev)
        wd_event_abandon(ev, now);
    }
  }
  return nst;
}
