/* The stall rule and the watchdog's pass over a context's live events (stall.h). */
#include "watchdog/stall.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/log.h"
#include "events/judge.h"
#include "events/store.h"
#include "events/track.h"
#include "flightrec/strtab.h"

int wd_view_read(wd_event *ev, uint64_t now, const wd_context *ctx, const wd_config *cfg,
                 wd_slot_view *v) {
  if (!wd_slot_read(ev, ctx, v)) return 0;
  if (v->snap.is_root && wd_view_is_stalled(v, now, cfg)) v->snap.status = WD_OP_STALLED;
  return 1;
}

static wd_judge_limits wd_limits(const wd_config *cfg) {
  wd_judge_limits l = {cfg->timeout_ns, cfg->unreached_timeout_ns, 2 * cfg->poll_ns};
  return l;
}

int wd_view_is_stalled(const wd_slot_view *v, uint64_t now, const wd_config *cfg) {
  wd_judge_limits l = wd_limits(cfg);
  return wd_judge_stalled(v, now, &l);
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
    /* Of steps that progressed at one tick, the earliest (slot order says nothing: slots are
     * reused as they free up). */
    int earlier = pri == best_pri && v.snap.last_ns == best.snap.last_ns &&
                  v.snap.start.type == WD_T_PROXYSTEP && best.snap.start.type == WD_T_PROXYSTEP &&
                  v.snap.start.n < best.snap.start.n;
    if (!have || pri > best_pri || (pri == best_pri && v.snap.last_ns < best.snap.last_ns) || earlier) {
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

/* A communicator the application made after the op started, and has called NCCL on since the
 * op last moved: what a job that revoked or shrank a communicator and carried on looks like
 * (ncclCommShrink, init.cc). Its start, not its last move, is the mark: a state change is dated
 * by the scan that saw it, up to a poll late (track.h), and a communicator the job had before
 * the op is no recovery (after a network error the others may run on for a while). */
static const wd_context *wd_newer_comm(const wd_context *ctx, uint64_t start_ns, uint64_t last_ns) {
  for (const wd_context *c = wd_store.contexts; c; c = c->next)
    if (c != ctx && c->init_ns >= start_ns && c->calls_ns > last_ns) return c; /* one clock tick */
  return NULL;
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
  s->nccl_open = v->snap.children_open > 0;
  s->age_ns = now > r->ts_ns ? now - r->ts_ns : 0;
  if (v->snap.reached_ns == 0)
    snprintf(s->waiting_on, sizeof(s->waiting_on), "not reached: enqueued, the GPU has not got to it");
  else {
    const char *why = wd_judge_why(v->snap.gpu);
    size_t n = strlen(why);
    snprintf(s->waiting_on, sizeof(s->waiting_on), "%s", why);
    if (n < sizeof(s->waiting_on))
      wd_describe_wait(ctx, v->ev, s->waiting_on + n, (unsigned)(sizeof(s->waiting_on) - n));
  }
  /* A replay keyed to its captured launch: which one, as a captured launch's own stall says. */
  uint64_t key = atomic_load_explicit(&v->ev->gpu_key, memory_order_relaxed);
  if (wd_is_graph_key(key) && (r->type == WD_T_COLL || r->type == WD_T_P2P) &&
      wd_graph_key_slot(key) < atomic_load_explicit(&ctx->graphs.used, memory_order_acquire)) {
    const wd_glaunch *l = &ctx->graphs.slot[wd_graph_key_slot(key)];
    s->graph = l->graph;
    s->graph_pos = l->pos;
    s->replay = wd_graph_key_replay(key);
    s->graph_state = v->snap.reached_ns ? WD_GL_IN : WD_GL_WAIT;
  }
  const wd_context *newer = wd_newer_comm(ctx, r->ts_ns, v->snap.last_ns);
  size_t n = strlen(s->waiting_on);
  if (newer && n < sizeof(s->waiting_on))
    snprintf(s->waiting_on + n, sizeof(s->waiting_on) - n,
             "; since then the application made comm \"%s\" and carries on with it (this one revoked "
             "or abandoned?)", newer->name);
}

/* Time since the event last progressed; an event may progress after `now` was read. */
static inline uint64_t wd_quiet_for(const wd_slot_view *v, uint64_t now) {
  return now > v->snap.last_ns ? now - v->snap.last_ns : 0;
}

static inline int wd_is_root(wd_event *ev) {
  return atomic_load_explicit(&ev->live, memory_order_acquire) &&
         atomic_load_explicit(&ev->kind, memory_order_relaxed) == WD_KIND_ROOT;
}

/* ProxyStep states in which the kernel still owes the step something: its data (send, before
 * SendPeerWait) or the consumption of received data (recv, until the step stops). */
static inline int wd_step_needs_gpu(unsigned state) {
  return state == 0xff || state == WD_ST_SEND_GPU_WAIT || state == WD_ST_RECV_WAIT ||
         state == WD_ST_RECV_FLUSH_WAIT || state == WD_ST_RECV_GPU_WAIT;
}

/* Raise *a to v unless it is already later (the hot path may store a newer stamp meanwhile). */
static inline void wd_raise_u64(_Atomic uint64_t *a, uint64_t v) {
  uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
  while (cur < v && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

/* Whether thread tid of this process still exists (a few threads per scan, remembered). */
typedef struct wd_tid_cache {
  int n;
  int tid[8];
  int alive[8];
} wd_tid_cache;

static int wd_thread_alive(wd_tid_cache *c, int tid) {
  for (int i = 0; i < c->n; i++)
    if (c->tid[i] == tid) return c->alive[i];
  int alive = !(syscall(SYS_tgkill, getpid(), tid, 0) != 0 && errno == ESRCH);
  if (c->n < 8) {
    c->tid[c->n] = tid;
    c->alive[c->n++] = alive;
  }
  return alive;
}

/* Pass 1, root ops: forget the last scan's aggregates; ask the GPU where ground truth exists. */
static void wd_scan_truth(wd_context *ctx, wd_event *ev, uint64_t now) {
  atomic_store_explicit(&ev->wd_gpu_wait, 0, memory_order_relaxed);
  atomic_store_explicit(&ev->wd_proxy_tid, 0, memory_order_relaxed);
  /* Everything is found anew each scan but a recovery, which stays (wd_scan_settle). */
  uint32_t gpu = atomic_load_explicit(&ev->wd_gpu, memory_order_relaxed) & WD_GPU_MOVED_ON;
  atomic_store_explicit(&ev->wd_gpu, gpu | wd_judge_gpu(ctx, ev, now), memory_order_relaxed);
}

/* Pass 2, open children: the progress their states made (the hot path stamps only the event's
 * own slot on a state change: the root's stamp is carried up here), what each root op's kernel
 * still owes, and which thread drives its proxy part. */
static void wd_scan_child(wd_event *ev, uint64_t now) {
  if (!atomic_load_explicit(&ev->live, memory_order_acquire) ||
      !wd_event_open(ev))
    return;
  unsigned type = wd_event_type(ev);
  /* A state kept in the slot moved since the last scan (track.h): progress, dated now, the latest
   * it can have been. Never earlier: a watchdog thread that was itself held up (a loaded host)
   * must not take progress made meanwhile for none; a stall is found at most a poll late. */
  if (wd_state_in_slot(type)) {
    uint64_t sig = wd_state_sig(ev);
    if (sig != atomic_exchange_explicit(&ev->wd_seen, sig, memory_order_relaxed) && sig != WD_SIG_NONE)
      wd_raise_u64(&ev->last_ns, now);
  }
  wd_event *root = atomic_load_explicit(&ev->root, memory_order_relaxed);
  if (!root || root == ev) return;
  uint64_t last = atomic_load_explicit(&ev->last_ns, memory_order_relaxed);
  wd_raise_u64(&root->last_ns, last);
  /* The kernel filled a send step's buffer: the proxy moves it on to the network
   * (transport/net.cc, sendProxyProgress: SendPeerWait_v4 then SendWait). */
  if (type == WD_T_PROXYSTEP) {
    unsigned st = atomic_load_explicit(&ev->state, memory_order_relaxed);
    if ((st == WD_ST_SEND_PEER_WAIT || st == WD_ST_SEND_WAIT) &&
        atomic_load_explicit(&root->reached_ns, memory_order_relaxed) == 0)
      atomic_store_explicit(&root->reached_ns, last, memory_order_relaxed);
  }
  if (type != WD_T_PROXYOP && type != WD_T_PROXYSTEP && type != WD_T_KERNELCH) return;
  wd_record r;
  wd_event_read_start(ev, &r);
  atomic_store_explicit(&root->wd_proxy_tid, r.tid, memory_order_relaxed);
  int owes = 0;
  if (type == WD_T_PROXYSTEP)
    owes = wd_step_needs_gpu(atomic_load_explicit(&ev->state, memory_order_relaxed));
  /* A ProxyOp part way through its steps with none open: the proxy has yet to post the rest,
   * which the kernel needs. */
  else if (type == WD_T_PROXYOP)
    owes = atomic_load_explicit(&ev->children_seen, memory_order_relaxed) > 0 &&
           wd_event_children_live(ev) == 0 && r.n > 0 &&
           atomic_load_explicit(&ev->steps_done, memory_order_relaxed) < (uint32_t)r.n;
  if (owes) atomic_fetch_add_explicit(&root->wd_gpu_wait, 1, memory_order_relaxed);
}

/* Pass 3, root ops: what the evidence says about the kernel (judge.h). */
static void wd_scan_settle(const wd_context *ctx, wd_event *ev, uint64_t now, uint64_t settle,
                           wd_tid_cache *tids) {
  wd_judge_in in;
  in.gpu = atomic_load_explicit(&ev->wd_gpu, memory_order_relaxed);
  in.kch_expected = atomic_load_explicit(&ev->kch_expected, memory_order_relaxed);
  in.kch_seen = atomic_load_explicit(&ev->kch_seen, memory_order_relaxed);
  in.kch_done = atomic_load_explicit(&ev->kch_done, memory_order_relaxed);
  in.kch_trust = atomic_load_explicit(&ev->kch_trust, memory_order_relaxed);
  in.owed = atomic_load_explicit(&ev->wd_gpu_wait, memory_order_relaxed);
  uint64_t last = atomic_load_explicit(&ev->last_ns, memory_order_relaxed);
  in.quiet_ns = now > last ? now - last : 0;
  int tid = atomic_load_explicit(&ev->wd_proxy_tid, memory_order_relaxed);
  in.proxy_gone = tid > 0 && !wd_thread_alive(tids, tid);
  /* Recovered from, once its proxy thread is gone: the application made a communicator after the
   * op started and calls NCCL on it (ncclCommShrink after a revoke, a re-init). Calls on
   * communicators it had already would not do: after a network error the job's other
   * communicators may run on for a while before the application blocks on this one. Once
   * recovered, always (the new communicator may be finalized before the old one). */
  in.moved_on = (in.gpu & WD_GPU_MOVED_ON) ||
                (in.proxy_gone &&
                 wd_newer_comm(ctx, __atomic_load_n(&ev->startw[WD_RECW_TS], __ATOMIC_RELAXED), last));
  atomic_store_explicit(&ev->wd_gpu, wd_judge_kernel(&in, settle), memory_order_relaxed);
}

uint64_t wd_context_proxy_records(const wd_context *ctx) {
  return atomic_load_explicit(&ctx->proxy_ring.head, memory_order_relaxed) - ctx->abandoned;
}

void wd_note_calls(wd_context *ctx, uint64_t now) {
  /* The operation-level ring takes a record for every API, Group, Coll and P2p event: the
   * application's NCCL calls, whatever the proxy does. Dated by the poll that sees them. */
  uint64_t t = atomic_load_explicit(&ctx->ring.head, memory_order_relaxed);
  if (t != ctx->calls_seen) ctx->calls_ns = now;
  ctx->calls_seen = t;
}

/* Captured launches whose replay stopped on the GPU (graph.h): inside one for longer than the
 * timeout, or not reached for longer than the unreached timeout. NCCL may report nothing of
 * these replays (no proxy work, no KernelCh: enqueue.cc ncclLaunchPrepare adds no host node), so
 * they are stalls of their own, named by graph, launch and replay. */
static uint32_t wd_graph_stalls(wd_context *ctx, uint64_t now, const wd_config *cfg, wd_stall *out,
                                uint32_t max) {
  wd_graphs *g = &ctx->graphs;
  wd_judge_limits lim = wd_limits(cfg);
  uint32_t n = g->on ? atomic_load_explicit(&g->used, memory_order_acquire) : 0, nst = 0;
  for (uint32_t i = 0; i < n && nst < max; i++) {
    const wd_glaunch *l = &g->slot[i];
    /* Only an armed slot's fields are settled: a given-back one may be filling again on the
     * launching thread (its release store of armed publishes them). */
    if (atomic_load_explicit(&l->armed, memory_order_acquire) != 2) continue;
    uint64_t for_ns;
    int why = wd_judge_glaunch(l, now, &lim, &for_ns), in = why == WD_GL_IN;
    if (!why) continue;
    wd_stall *s = &out[nst++];
    memset(s, 0, sizeof(*s));
    s->comm_id = ctx->comm_id;
    snprintf(s->comm_name, sizeof(s->comm_name), "%s", ctx->name);
    s->rank = ctx->rank;
    s->nranks = ctx->nranks;
    s->type = WD_T_COLL;
    s->func = l->func;
    s->seq = -1;
    s->peer = l->root;
    s->slot = WD_SLOT_NONE;
    s->since_progress_ns = s->age_ns = for_ns;
    s->graph = l->graph;
    s->graph_pos = l->pos;
    s->replay = in ? l->w_replay : l->w_replay + 1;
    s->graph_state = l->w_state;
    snprintf(s->waiting_on, sizeof(s->waiting_on),
             in ? "the GPU, inside replay %llu of CUDA graph %u (launch %u): the start record "
                  "of that replay completed, its end record did not"
                : "the GPU to reach it in replay %llu of CUDA graph %u (launch %u): the graph was "
                  "launched again and the GPU has not got to it",
             (unsigned long long)s->replay, l->graph, l->pos);
  }
  return nst;
}

/* A captured launch found every slot held by a live graph: said once per communicator, in the
 * job's log (every dump also counts them: graphLaunchesUnfollowed). */
static void wd_graphs_say_full(wd_context *ctx, const wd_config *cfg) {
  wd_graphs *g = &ctx->graphs;
  if (g->full_said || !atomic_load_explicit(&g->full, memory_order_relaxed)) return;
  g->full_said = 1;
  WD_WARN("comm 0x%llx \"%s\" rank %d: all %u captured-launch slots are held by live CUDA graphs "
          "(%u graphs give theirs back when destroyed, %llu given back so far): captured launches past "
          "them are not followed, and a hang in their replays gives no dump; raise "
          "NCCL_WATCHDOG_GRAPH_LAUNCHES (now %u)",
          (unsigned long long)ctx->comm_id, ctx->name, ctx->rank, g->cap, atomic_load(&g->tied),
          (unsigned long long)g->given_back, cfg->graph_launches);
}

uint32_t wd_scan_context(wd_context *ctx, uint64_t now, const wd_config *cfg, wd_stall *out,
                         uint32_t max) {
  uint32_t nst = 0;
  uint64_t settle = 2 * cfg->poll_ns;
  wd_tid_cache tids = {0};
  /* First: a replay's operations read the state this leaves (wd_graph_truth_of). */
  if (wd_graphs_poll(&ctx->graphs, now)) { /* destroyed graphs: their pins, then their slots */
    wd_unpin_gone(ctx);
    wd_graphs_settle(&ctx->graphs);
  }
  wd_graphs_say_full(ctx, cfg);
  for (int p = 0; p < WD_CTX_NPOOLS; p++)
    for (uint32_t i = 0, n = wd_pool_nslots(wd_ctx_pool(ctx, p)); i < n; i++) {
      wd_event *ev = wd_pool_slot(wd_ctx_pool(ctx, p), i);
      if (wd_is_root(ev)) wd_scan_truth(ctx, ev, now);
    }
  for (int p = 0; p < WD_CTX_NPOOLS; p++)
    for (uint32_t i = 0, n = wd_pool_nslots(wd_ctx_pool(ctx, p)); i < n; i++)
      wd_scan_child(wd_pool_slot(wd_ctx_pool(ctx, p), i), now);
  for (int p = 0; p < WD_CTX_NPOOLS; p++)
    for (uint32_t i = 0, n = wd_pool_nslots(wd_ctx_pool(ctx, p)); i < n; i++) {
      wd_event *ev = wd_pool_slot(wd_ctx_pool(ctx, p), i);
      if (wd_is_root(ev)) wd_scan_settle(ctx, ev, now, settle, &tids);
    }

  for (int p = 0; p < WD_CTX_NPOOLS; p++)
  for (uint32_t i = 0, n = wd_pool_nslots(wd_ctx_pool(ctx, p)); i < n; i++) {
    wd_event *ev = wd_pool_slot(wd_ctx_pool(ctx, p), i);
    wd_slot_view v;
    if (!wd_view_read(ev, now, ctx, cfg, &v)) continue;
    if (v.snap.is_root) {
      if (v.snap.status == WD_OP_STALLED && nst < max) wd_fill_stall(ctx, &v, now, &out[nst++]);
      if (v.open || wd_event_from_handle(v.handle) != ev) continue;
      /* Its kernel is done (ground truth, or trustworthy kernel channels), or a later operation
       * completed and neither ground truth nor a step its kernel needs says otherwise: done on
       * the GPU even if NCCL never says so. Stop holding it. */
      if (wd_judge_release(&v, now, settle)) wd_event_release_hold(ev);
    } else if (v.open && v.root) {
      wd_event *root = v.root;
      uint32_t rgpu = atomic_load_explicit(&root->wd_gpu, memory_order_relaxed);
      int done = wd_judge_root_finished(
          rgpu, atomic_load_explicit(&root->wd_gpu_wait, memory_order_relaxed),
          atomic_load_explicit(&root->order, memory_order_relaxed) <
              atomic_load_explicit(&ctx->completed_order, memory_order_relaxed));
      /* Children NCCL never stops (CollNet, p2p memcpy ProxyOps) once the op is done. */
      if (done && wd_quiet_for(&v, now) >= settle && v.snap.children_open == 0 &&
          wd_event_from_handle(v.handle) == ev) {
        int proxy = atomic_load_explicit(&ev->ring, memory_order_relaxed) == &ctx->proxy_ring;
        if (wd_event_abandon(ev, now) && proxy) ctx->abandoned++;
      }
    }
  }
  return nst + wd_graph_stalls(ctx, now, cfg, out + nst, max - nst);
}

uint32_t wd_context_inflight(wd_context *ctx, uint64_t now, const wd_config *cfg) {
  uint32_t n = 0;
  for (int p = 0; p < WD_CTX_NPOOLS; p++)
    for (uint32_t i = 0, k = wd_pool_nslots(wd_ctx_pool(ctx, p)); i < k; i++) {
      wd_slot_view v;
      if (!wd_view_read(wd_pool_slot(wd_ctx_pool(ctx, p), i), now, ctx, cfg, &v) || !v.snap.is_root)
        continue;
      if ((v.snap.status == WD_OP_REACHED || v.snap.status == WD_OP_STALLED ||
           v.snap.status == WD_OP_ABANDONED) &&
          wd_quiet_for(&v, now) >= 2 * cfg->poll_ns)
        n++;
    }
  return n;
}
