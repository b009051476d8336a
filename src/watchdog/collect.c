/* Gather a dump's snapshot from the event store (collect.h). */
#include "watchdog/collect.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/host.h"
#include "base/log.h"
#include "base/ncclver.h"
#include "events/store.h"
#include "events/nodeshare.h"
#include "flightrec/strtab.h"
#include "stacks/python.h"
#include "telemetry/aggregate.h"
#include "watchdog/stall.h"
#include "events/budget.h"

/* keep > 0: only the newest keep records (a summary); the others count as lost. */
static int wd_collect_ring(const wd_ring *r, wd_ring_snap *out, uint32_t keep) {
  memset(out, 0, sizeof(*out));
  out->capacity = wd_ring_capacity(r);
  out->recs = malloc(sizeof(wd_record) * out->capacity);
  if (out->recs == NULL) return -1;
  out->written = atomic_load_explicit(&r->head, memory_order_acquire);
  out->n = wd_ring_snapshot(r, out->recs, out->capacity, &out->torn, &out->lost);
  if (keep && out->n > keep) {
    memmove(out->recs, out->recs + (out->n - keep), sizeof(wd_record) * keep);
    out->lost += out->n - keep;
    out->n = keep;
  }
  return 0;
}

static int wd_collect_events(const wd_pool *const *pools, int npools, const wd_context *ctx,
                             const wd_config *cfg, uint64_t now, wd_ev_snap **out, uint32_t *nout) {
  uint32_t n = 0, k = 0;
  for (int p = 0; p < npools; p++) n += wd_pool_nslots(pools[p]);
  wd_ev_snap *evs = malloc(sizeof(wd_ev_snap) * (n ? n : 1));
  if (evs == NULL) return -1;
  for (int p = 0; p < npools; p++) {
    uint32_t np = wd_pool_nslots(pools[p]);
    for (uint32_t i = 0; i < np && k < n; i++) {
      wd_slot_view v;
      if (!wd_view_read(wd_pool_slot(pools[p], i), now, ctx, cfg, &v)) continue;
      /* A captured call's API event, kept for its replays after its stop (track.c): not open. */
      unsigned t = v.snap.start.type;
      if (v.snap.stopped && (t == WD_T_COLLAPI || t == WD_T_P2PAPI)) continue;
      evs[k++] = v.snap;
    }
  }
  *out = evs;
  *nout = k;
  return 0;
}

/* The functions that have a sequence number, with their last enqueued and completed ones. */
static uint32_t wd_collect_seqs(const _Atomic int64_t *enq, const _Atomic int64_t *done,
                                wd_seq_snap *out, uint32_t max) {
  uint32_t n = 0;
  for (int f = 0; f < WD_NSTR && n < max; f++) {
    int64_t e = atomic_load(&enq[f]), d = atomic_load(&done[f]);
    if (e < 0 && d < 0) continue;
    out[n++] = (wd_seq_snap){.func = (uint8_t)f, .enqueued = e, .completed = d};
  }
  return n;
}

/* The captured launches followed, as the watchdog's last poll left them (its own fields). */
static void wd_collect_glaunch(wd_graphs *g, uint64_t now, wd_comm_snap *c) {
  c->graph_watch = (uint8_t)g->on;
  c->glaunch_unfollowed = atomic_load(&g->unfollowed);
  uint32_t n = g->slot ? atomic_load_explicit(&g->used, memory_order_acquire) : 0;
  c->glaunch = n ? calloc(n, sizeof *c->glaunch) : NULL;
  if (c->glaunch == NULL) return;
  for (uint32_t i = 0; i < n; i++) {
    const wd_glaunch *s = &g->slot[i];
    if (atomic_load_explicit(&s->armed, memory_order_acquire) != 2) continue;
    wd_glaunch_snap *o = &c->glaunch[c->nglaunch++];
    o->graph = s->graph;
    o->pos = s->pos;
    o->func = s->func;
    o->dtype = s->dtype;
    o->ncalls = s->ncalls;
    o->root = s->root;
    o->count = s->count;
    o->replays = s->w_replay;
    o->state = s->w_state;
    o->error = s->w_error;
    o->for_ns = s->w_since_ns && now > s->w_since_ns ? now - s->w_since_ns : 0;
  }
}

static void wd_collect_comm(wd_context *ctx, const wd_config *cfg, uint64_t now, uint32_t keep,
                            wd_comm_snap *c) {
  memset(c, 0, sizeof(*c));
  c->comm_id = ctx->comm_id;
  memcpy(c->name, ctx->name, sizeof(c->name));
  c->rank = ctx->rank;
  c->nranks = ctx->nranks;
  c->nnodes = ctx->nnodes;
  c->abi = ctx->abi;
  c->cuda_dev = ctx->cuda_dev;
  memcpy(c->gpu_uuid, ctx->gpu_uuid, sizeof(c->gpu_uuid));
  c->init_ns = ctx->init_ns;
  c->dropped = atomic_load(&ctx->dropped);
  c->stale = atomic_load(&ctx->stale);
  c->nseq = wd_collect_seqs(ctx->seq_enq, ctx->seq_done, c->seq, 32);
  c->nceseq = wd_collect_seqs(ctx->ce_seq_enq, ctx->ce_seq_done, c->ce_seq, 8);
  c->gpu_events = (uint8_t)ctx->launches.on;
  c->launches_unbracketed = atomic_load(&ctx->launches.skipped);
  c->gpu_error = atomic_load(&ctx->launches.last_error);
  c->mask_set = ctx->mask_set;
  c->mask_now = wd_mask_now(ctx);
  c->p2p_enqueued = atomic_load(&ctx->p2p_enq);
  c->p2p_completed = atomic_load(&ctx->p2p_done);
  wd_collect_glaunch(&ctx->graphs, now, c);
  const wd_pool *pools[WD_CTX_NPOOLS] = {&ctx->pool, &ctx->proxy_pool};
  wd_collect_events(pools, WD_CTX_NPOOLS, ctx, cfg, now, &c->events, &c->nevents);
  wd_collect_ring(&ctx->ring, &c->ring, keep);
  wd_collect_ring(&ctx->proxy_ring, &c->proxy_ring, keep);
  /* The newest record is the communicator's last sign of life (no shared per-callback stamp:
   * it would bounce one cache line between the application and proxy threads). */
  if (c->ring.n) c->last_progress_ns = c->ring.recs[c->ring.n - 1].ts_ns;
  if (c->proxy_ring.n && c->proxy_ring.recs[c->proxy_ring.n - 1].ts_ns > c->last_progress_ns)
    c->last_progress_ns = c->proxy_ring.recs[c->proxy_ring.n - 1].ts_ns;
}

/* Threads sleeping in calls a signal would make fail with EINTR are left alone for a snapshot of
 * a job that is running fine (SIGUSR1); when something is already wrong (stall, peer, term,
 * abort) the whole stack of every thread is worth one EINTR: the sleeping main thread is often
 * the culprit (a data loader, a barrier). NCCL_WATCHDOG_BACKTRACE=all interrupts them always. */
static int wd_interrupt_all(const wd_config *cfg, const char *reason) {
  return cfg->backtrace == WD_BACKTRACE_ALL || !reason || strcmp(reason, "signal") != 0;
}

/* Each communicator's links and arrival from telemetry (watchdog thread: its tables are this
 * thread's). */
static void wd_collect_telemetry(wd_dump_input *in) {
  wd_tm_view t;
  wd_tm_get(&t);
  if (!t.funcs || !in->comms) return;
  for (uint32_t i = 0; i < in->ncomms; i++) {
    wd_comm_snap *cs = &in->comms[i];
    cs->telemetry = 1;
    for (uint32_t m = 0; m < t.ncomms; m++) {
      const wd_tm_comm *tc = &t.comms[m];
      if (tc->comm_id != cs->comm_id || tc->rank != cs->rank) continue;
      cs->have_arrival = tc->have_recent;
      cs->arrival_sync = tc->sync_based;
      cs->arrival_wait_s = tc->recent_s;
      cs->arrival_lag_s = tc->lag_s;
      uint32_t n = 0;
      for (uint32_t k = 0; k < t.nlinks; k++) n += t.links[k].comm == (int)m;
      cs->links = n ? calloc(n, sizeof *cs->links) : NULL;
      for (uint32_t k = 0; cs->links && k < t.nlinks; k++) {
        const wd_tm_link *l = &t.links[k];
        if (l->comm == (int)m)
          cs->links[cs->nlinks++] = (wd_link_snap){l->peer, l->channel, l->send, l->bytes, l->steps,
                                                   l->step_s, l->busy_s, l->rate, l->net_s, l->net_rate};
      }
      break;
    }
  }
}

/* The stack signal had been replaced before this dump (bt says what was found): said once per
 * process in the job's log; every dump that met it says it too (threads.signal). */
static atomic_int said_bt_signal;
static void wd_collect_say_bt_signal(const wd_bt_result *bt, int signo) {
  if (!bt->signal_taken_back || atomic_exchange(&said_bt_signal, 1)) return;
  if (bt->signal_taken_back > 0)
    WD_WARN("the stack signal %d had been replaced (now %s; a framework putting back what it took for the "
            "original handler): taken back, chaining to it, before asking the threads; said once", signo,
            bt->signal_found);
  else
    WD_WARN("the stack signal %d is not the plugin's (now %s) and could not be taken back: dumps go on without "
            "other threads' stacks (never a signal whose action would end the process)", signo, bt->signal_found);
}

int wd_collect(wd_dump_input *in, const wd_config *cfg, const char *reason, int with_threads,
               uint32_t keep) {
  memset(in, 0, sizeof(*in));
  in->reason = reason;
  in->cfg = cfg;
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  in->mono_ns = wd_now_ns();
  in->wall_sec = wall.tv_sec;
  in->wall_nsec = wall.tv_nsec;
  wd_hostname(in->host, sizeof(in->host));
  in->pid = (int)getpid();

  wd_budget_stats mem;
  wd_budget_get(&mem);
  in->mem_budget = mem.budget;
  in->mem_rings = mem.ring_bytes;
  in->mem_slots = mem.slot_bytes;
  in->mem_shrunk = mem.shrunk;
  in->mem_refused = mem.refused;
  wd_nodeshare_note(in->ring_files_note, sizeof in->ring_files_note);
  pthread_mutex_lock(&wd_store.lock);
  in->abi = wd_store.abi_max;
  in->nccl_version = wd_nccl_version();
  in->comms = calloc(wd_store.nctx ? (size_t)wd_store.nctx : 1, sizeof(wd_comm_snap));
  if (in->comms) {
    /* Oldest communicator first (the list is newest first). */
    uint32_t k = (uint32_t)wd_store.nctx;
    for (wd_context *ctx = wd_store.contexts; ctx && k > 0; ctx = ctx->next)
      wd_collect_comm(ctx, cfg, in->mono_ns, keep, &in->comms[--k]);
    in->ncomms = (uint32_t)wd_store.nctx;
  }
  wd_collect_telemetry(in);
  const wd_pool *detached = &wd_store.detached;
  wd_collect_events(&detached, 1, NULL, cfg, in->mono_ns, &in->detached, &in->ndetached);
  wd_collect_ring(&wd_store.detached_ring, &in->detached_ring, 0);
  pthread_mutex_unlock(&wd_store.lock);

  if (with_threads) {
    wd_bt_result *bt = calloc(1, sizeof(*bt));
    if (bt && wd_bt_collect(bt, cfg->bt_wait_ns, wd_interrupt_all(cfg, reason)) == 0) {
      in->threads = bt;
      wd_collect_say_bt_signal(bt, cfg->bt_signal);
    } else {
      free(bt);
    }
  }
  if (cfg->python) {
    wd_py_result *py = calloc(1, sizeof(*py));
    if (py) wd_py_collect(py); /* "not available" is said in the dump too */
    in->python = py;
  }
  return in->comms ? 0 : -1;
}

void wd_collect_free(wd_dump_input *in) {
  for (uint32_t i = 0; i < in->ncomms; i++) {
    free(in->comms[i].events);
    free(in->comms[i].ring.recs);
    free(in->comms[i].proxy_ring.recs);
    free(in->comms[i].links);
    free(in->comms[i].glaunch);
  }
  free(in->comms);
  free(in->detached);
  free(in->detached_ring.recs);
  if (in->threads) {
    wd_bt_free((wd_bt_result *)in->threads);
    free((void *)in->threads);
  }
  if (in->python) {
    wd_py_free((wd_py_result *)in->python);
    free((void *)in->python);
  }
  memset(in, 0, sizeof(*in));
}

int wd_mask_now(wd_context *ctx) {
  if (ctx->mask_ptr == NULL) return ctx->mask_set;
  int now = 0;
  struct iovec local = {&now, sizeof now}, remote = {ctx->mask_ptr, sizeof now};
  if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof now) {
    ctx->mask_ptr = NULL; /* unreadable, or the call is not allowed here (seccomp) */
    return ctx->mask_set;
  }
  return now;
}
