/* Event lifecycle on the hot path: no malloc, no system call, no lock. */
#include "events/track.h"

#include <string.h>

#include "base/clock.h"
#include "events/blacklist.h"
#include "events/judge.h"
#include "flightrec/strtab.h"
#include "events/store.h"

static inline void wd_max_u64(_Atomic uint64_t *a, uint64_t v) {
  uint64_t cur = atomic_load_explicit(a, memory_order_relaxed);
  while (cur < v && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

static inline void wd_max_i64(_Atomic int64_t *a, int64_t v) {
  int64_t cur = atomic_load_explicit(a, memory_order_relaxed);
  while (cur < v && !atomic_compare_exchange_weak_explicit(a, &cur, v, memory_order_relaxed,
                                                           memory_order_relaxed)) {
  }
}

/* Counter bumped without a lock prefix: one thread updates it in practice (NCCL's proxy thread)
 * and a lost update only changes a displayed count. */
static inline void wd_bump(_Atomic uint32_t *c) {
  atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

static inline wd_ring *wd_ring_for(const wd_context *ctx, unsigned type) {
  if (ctx == NULL) return &wd_store.detached_ring;
  return wd_type_is_proxy_level(type) ? (wd_ring *)&ctx->proxy_ring : (wd_ring *)&ctx->ring;
}

static inline void wd_progress(wd_event *ev, uint64_t now) {
  atomic_store_explicit(&ev->last_ns, now, memory_order_relaxed);
  wd_event *root = atomic_load_explicit(&ev->root, memory_order_relaxed);
  if (root && root != ev) atomic_store_explicit(&root->last_ns, now, memory_order_relaxed);
}

/* First sign from NCCL's own events that the GPU got to the operation root belongs to. */
static inline void wd_mark_reached(wd_event *root, uint64_t now) {
  if (root && atomic_load_explicit(&root->reached_ns, memory_order_relaxed) == 0)
    atomic_store_explicit(&root->reached_ns, now, memory_order_relaxed);
}

/* A tracked child's start, for its parent: one more child seen; a kernel channel's start is a
 * sign the GPU got to the operation (the kernel wrote its start counter: transport/profiler.cc).
 * Returns the root operation the child progresses. */
static inline wd_event *wd_child_started(wd_event *parent, unsigned type, uint64_t now) {
  wd_event *root = atomic_load_explicit(&parent->root, memory_order_relaxed);
  wd_bump(&parent->children_seen);
  if (type == WD_T_KERNELCH) {
    wd_bump(&parent->kch_seen);
    wd_mark_reached(root, now);
  }
  return root;
}

/* The fields every start sets (a root's own come after, then wd_slot_open). Not hold and
 * gpu_key: a free slot's hold is 0 (released before its last reference, reset by a pool's
 * retire) and no reader looks at a child's key, so the fast child start leaves both. */
static inline void wd_slot_fill(wd_event *ev, unsigned type, wd_event *parent, wd_ring *ring,
                                wd_event *root, uint32_t kind, uint64_t now) {
  ev->parent = parent;
  atomic_store_explicit(&ev->ring, ring, memory_order_relaxed);
  atomic_store_explicit(&ev->root, root, memory_order_relaxed);
  atomic_store_explicit(&ev->kind, (uint8_t)kind, memory_order_relaxed);
  atomic_store_explicit(&ev->type, (uint8_t)type, memory_order_relaxed);
  atomic_store_explicit(&ev->children_seen, 0, memory_order_relaxed);
  atomic_store_explicit(&ev->steps_done, 0, memory_order_relaxed);
  atomic_store_explicit(&ev->state, 0xff, memory_order_relaxed);
  atomic_store_explicit(&ev->last_trans, 0, memory_order_relaxed);
  atomic_store_explicit(&ev->wd_seen, WD_SIG_NONE, memory_order_relaxed);
  atomic_store_explicit(&ev->last_ns, now, memory_order_relaxed);
}

/* Release: a stop that claims the event (acq_rel) sees the fields set before, parent included. */
static inline void wd_slot_open(wd_event *ev, uint32_t refs) {
  atomic_store_explicit(&ev->life, WD_LIFE(refs, WD_OPEN(atomic_load_explicit(&ev->tag, memory_order_relaxed))),
                        memory_order_release);
}

/* Take a reference on slot p (ours: range-checked) if it is not completed (refs == 0), then check
 * that it is the incarnation parent_handle names (dropping the reference if not). 1 when taken. */
static inline __attribute__((always_inline)) int wd_ref_matched(wd_event *p, void *parent_handle) {
  uint64_t l = atomic_load_explicit(&p->life, memory_order_relaxed);
  do {
    if (wd_life_refs(l) == 0) return 0;
  } while (!atomic_compare_exchange_weak_explicit(&p->life, &l, l + 1, memory_order_acq_rel,
                                                  memory_order_relaxed));
  if (!wd_event_matches(p, parent_handle)) {
    wd_event_unref(p);
    return 0;
  }
  return 1;
}

/* The same for parent slot p (already range-checked) and the incarnation the handle names. */
static inline wd_event *wd_try_ref(wd_event *p, void *parent_handle) {
  return wd_event_matches(p, parent_handle) && wd_ref_matched(p, parent_handle) ? p : NULL;
}

static void wd_complete_root(wd_event *ev) {
  wd_context *ctx = ev->ctx;
  if (ctx == NULL) return;
  wd_record rec;
  wd_event_read_start(ev, &rec);
  /* Into the ring file too, as it happens (its live part lags a poll): a process killed now
   * still says what it completed. */
  wd_rf_header *file = ctx->file_done;
  if (rec.type == WD_T_COLL || rec.type == WD_T_CECOLL) {
    int ce = rec.type == WD_T_CECOLL;
    wd_max_i64(ce ? &ctx->ce_seq_done[rec.func] : &ctx->seq_done[rec.func], (int64_t)rec.a);
    if (file) wd_rf_done_put(file->done, rec.func, ce, (int64_t)rec.a);
  } else if (rec.type == WD_T_P2P) {
    int64_t n = atomic_fetch_add_explicit(&ctx->p2p_done, 1, memory_order_relaxed) + 1;
    if (file) wd_rf_done_p2p(&file->p2p_done, (uint64_t)n);
  }
  /* Groups of one communicator complete in enqueue order on its stream, so a completed op
   * vouches for every op of older groups (the watchdog retires those: captured-never-replayed,
   * childless ops). Ops of one group may complete in any order, hence orders per group, and a
   * P2p whose group is unknown vouches for nothing (its batch may hold a hung send). Only ops
   * that saw children, or whose CUDA end event completed, count: a childless op's stop proves
   * nothing about the GPU. */
  if ((atomic_load_explicit(&ev->children_seen, memory_order_relaxed) > 0 ||
       (atomic_load_explicit(&ev->wd_gpu, memory_order_relaxed) & WD_GPU_DONE)) &&
      (rec.type != WD_T_P2P || atomic_load_explicit(&ev->grouped, memory_order_relaxed)))
    wd_max_u64(&ctx->completed_order, atomic_load_explicit(&ev->order, memory_order_relaxed));
}

static int wd_event_gone(wd_event *ev);

/* One reference less on a parent: the decrement inline, the rest (rare on the hot path: a
 * parent outlives its children) out of line. */
static inline __attribute__((always_inline)) int wd_unref_parent(wd_event *parent) {
  if (wd_life_refs(atomic_fetch_sub_explicit(&parent->life, 1, memory_order_acq_rel)) != 1) return 0;
  return wd_event_gone(parent);
}

/* What the last reference's drop does: complete a root, return the slot, drop the parent's
 * reference. Inlined where the caller knows the event is never a root (a ProxyStep:
 * wd_close_step_now). */
static inline __attribute__((always_inline)) int wd_release(wd_event *ev, int may_be_root, uint32_t tid) {
  if (may_be_root && atomic_load_explicit(&ev->kind, memory_order_relaxed) == WD_KIND_ROOT)
    wd_complete_root(ev);
  if (ev->ctx == NULL) {
    uint64_t raw = wd_event_raw(ev);
    if (raw) wd_blacklist_unref(wd_store.detached_bl, (uintptr_t)raw);
  }
  /* parent and root stay as they were: nothing follows them in a slot that is not live. */
  wd_event *parent = ev->parent;
  wd_pool_free(ev->pool, ev, tid);
  return parent ? wd_unref_parent(parent) : 0;
}

static __attribute__((noinline)) int wd_event_gone(wd_event *ev) { return wd_release(ev, 1, (uint32_t)wd_tid()); }

static inline __attribute__((always_inline)) int wd_unref(wd_event *ev, int may_be_root, uint32_t tid) {
  if (wd_life_refs(atomic_fetch_sub_explicit(&ev->life, 1, memory_order_acq_rel)) != 1) return 0;
  return wd_release(ev, may_be_root, tid);
}

int wd_event_unref(wd_event *ev) {
  if (wd_life_refs(atomic_fetch_sub_explicit(&ev->life, 1, memory_order_acq_rel)) != 1) return 0;
  return wd_event_gone(ev);
}

void wd_event_release_hold(wd_event *ev) {
  if (atomic_exchange_explicit(&ev->hold, 0, memory_order_acq_rel) == 1) wd_event_unref(ev);
}

/* The stop record: the start record with phase, time, thread, last state and flags. Returns the
 * event's type. */
static inline __attribute__((always_inline)) unsigned wd_write_stop(wd_event *ev, uint64_t now,
                                                                    uint8_t extra_flags,
                                                                    unsigned known, uint32_t tid) {
  if (known == WD_T_PROXYSTEP) {
    /* Word by word, as wd_ring_put would write them (below). */
    uint64_t tags = __atomic_load_n(&ev->startw[WD_RECW_TAGS], __ATOMIC_RELAXED) | ((uint64_t)extra_flags << 24);
    uint64_t start = __atomic_load_n(&ev->startw[WD_RECW_TS], __ATOMIC_RELAXED);
    int span = (wd_recw_flags(tags) & WD_F_SPAN) != 0;
    wd_ring_w w = wd_ring_begin(atomic_load_explicit(&ev->ring, memory_order_relaxed));
    wd_ring_word(&w, WD_RECW_TS, now);
    wd_ring_word(&w, WD_RECW_A, atomic_load_explicit(&ev->reached_ns, memory_order_relaxed));
    wd_ring_word(&w, WD_RECW_COUNT, atomic_load_explicit(&ev->last_trans, memory_order_relaxed));
    wd_ring_word(&w, WD_RECW_RAW, span ? start : __atomic_load_n(&ev->startw[WD_RECW_RAW], __ATOMIC_RELAXED));
    wd_ring_word(&w, WD_RECW_SLOT, __atomic_load_n(&ev->startw[WD_RECW_SLOT], __ATOMIC_RELAXED));
    wd_ring_word(&w, WD_RECW_TID, wd_recw_pair(tid, (uint32_t)-1)); /* a step has no peer */
    wd_ring_word(&w, WD_RECW_N, __atomic_load_n(&ev->startw[WD_RECW_N], __ATOMIC_RELAXED));
    wd_ring_word(&w, WD_RECW_TAGS, wd_recw_retag(tags, span ? WD_PH_SPAN : WD_PH_STOP,
                                                  atomic_load_explicit(&ev->state, memory_order_relaxed)));
    _Static_assert(WD_RECW_CHAN == WD_RECORD_WORDS - 1, "the channel word is the last");
    wd_ring_end(&w, (uint32_t)__atomic_load_n(&ev->startw[WD_RECW_CHAN], __ATOMIC_RELAXED));
    return WD_T_PROXYSTEP;
  }
  uint64_t v[WD_RECORD_WORDS];
  wd_event_read_words(ev, v);
  uint64_t tags = v[WD_RECW_TAGS] | ((uint64_t)extra_flags << 24);
  /* A span carries its start time where a detached event keeps its foreign parent (never both). */
  unsigned phase = WD_PH_STOP;
  if (wd_recw_flags(tags) & WD_F_SPAN) {
    phase = WD_PH_SPAN;
    v[WD_RECW_RAW] = v[WD_RECW_TS];
  }
  v[WD_RECW_TAGS] = wd_recw_retag(tags, phase, atomic_load_explicit(&ev->state, memory_order_relaxed));
  v[WD_RECW_TS] = now;
  v[WD_RECW_TID] = wd_recw_low32(v[WD_RECW_TID], tid);
  unsigned type = known != WD_T_UNKNOWN ? known : wd_recw_type(tags);
  if (type == WD_T_PROXYSTEP || type == WD_T_KERNELCH || type == WD_T_KERNELPHASE)
    v[WD_RECW_COUNT] = atomic_load_explicit(&ev->last_trans, memory_order_relaxed);
  /* A step's SendWait time (wd_track_state); a reader takes it only inside the step's span, so
   * an earlier incarnation's value is never mistaken for this one's. */
  if (type == WD_T_PROXYSTEP) v[WD_RECW_A] = atomic_load_explicit(&ev->reached_ns, memory_order_relaxed);
  wd_ring_put(atomic_load_explicit(&ev->ring, memory_order_relaxed), v);
  return type;
}

/* Called as a child of op closes: every expected kernel channel stopped and this child was the
 * last one open, so no open step can contradict the channels, and no CUDA event pair will tell
 * better (judge.h): the watchdog decides every other case. */
static inline void wd_release_if_done(wd_event *op) {
  uint32_t expected = atomic_load_explicit(&op->kch_expected, memory_order_relaxed);
  if (expected && atomic_load_explicit(&op->kch_done, memory_order_relaxed) >= expected &&
      wd_event_children_live(op) <= 1 && wd_judge_kch_final(op))
    wd_event_release_hold(op);
}

/* What a child's stop means for its parent. Returns 0 (a tail call for the entry points).
 * known: the event's type where the caller has read it (its branches then fold), else
 * WD_T_UNKNOWN. last: the claim took the event's own reference, the last one, already. */
static inline __attribute__((always_inline)) int wd_close(wd_event *ev, uint64_t now,
                                                          uint8_t extra_flags, unsigned known,
                                                          int last) {
  uint32_t tid = (uint32_t)wd_tid();
  unsigned type = wd_write_stop(ev, now, extra_flags, known, tid);
  wd_event *root = atomic_load_explicit(&ev->root, memory_order_relaxed);
  wd_event *parent = ev->parent;
  if (parent) {
    if (type == WD_T_PROXYSTEP) {
      wd_bump(&parent->steps_done);
      /* A send step ends once the network took data the kernel posted; a recv step once the
       * kernel consumed it (transport/net.cc, sendProxyProgress / recvProxyProgress). */
      if (!extra_flags) wd_mark_reached(root, now);
    } else if (type == WD_T_PROXYOP) {
      if (!extra_flags) wd_mark_reached(root, now);
      /* The last proxy work after every kernel channel stopped: the op is done. */
      wd_release_if_done(parent);
    } else if (type == WD_T_KERNELCH) {
      atomic_fetch_add_explicit(&parent->kch_done, 1, memory_order_relaxed);
      /* NCCL's per-channel counters can pair a KernelCh with the wrong op (transport/profiler.cc):
       * with proxy work still open, the watchdog checks that nothing the kernel needs is
       * pending before it believes the op is done. Only this channel left: done now. */
      wd_release_if_done(parent);
    }
  } else if (type == WD_T_KERNELLAUNCH || type == WD_T_CECOLL) {
    uint64_t token = atomic_load_explicit(&ev->gpu_key, memory_order_relaxed);
    if (token && ev->ctx) {
      if (wd_is_graph_key(token)) wd_graph_capture_end(&ev->ctx->graphs, wd_graph_key_slot(token) + 1u);
      else wd_launch_end(&ev->ctx->launches, token);
    }
  }
  /* A stopped step is never scanned again (wd_scan_child): its own stamp would go unread. */
  if (known != WD_T_PROXYSTEP) atomic_store_explicit(&ev->last_ns, now, memory_order_relaxed);
  if (root && root != ev) atomic_store_explicit(&root->last_ns, now, memory_order_relaxed);
  /* A ProxyStep is never a root (wd_track_start). */
  if (last) return wd_release(ev, known != WD_T_PROXYSTEP, tid);
  return known == WD_T_PROXYSTEP ? wd_unref(ev, 0, tid) : wd_unref(ev, 1, tid);
}

/* NCCL's stop, once claimed: out of line, so the entry point needs no stack frame. A ProxyStep
 * (half of all stops) has a copy of the close made for its type, a function of its own so that
 * its registers are its own too. */
static __attribute__((noinline)) int wd_close_now(wd_event *ev, int last) {
  return wd_close(ev, wd_now_ns(), 0, WD_T_UNKNOWN, last);
}
/* The proxy thread's types, claimed with their last reference (wd_track_stop). */
static __attribute__((noinline)) int wd_close_step_now(wd_event *ev) {
  return wd_close(ev, wd_now_ns(), 0, WD_T_PROXYSTEP, 1);
}
static __attribute__((noinline)) int wd_close_proxyop_now(wd_event *ev) {
  return wd_close(ev, wd_now_ns(), 0, WD_T_PROXYOP, 1);
}
static __attribute__((noinline)) int wd_close_kch_now(wd_event *ev) {
  return wd_close(ev, wd_now_ns(), 0, WD_T_KERNELCH, 1);
}

static int wd_count_stale(void *handle);

/* A stop of an event that holds more than its own reference (children, a hold), or of a stale
 * or stopped handle: l is what the slot's life word was. Claims it, keeping the references. */
static __attribute__((noinline)) int wd_stop_shared(wd_event *ev, void *handle, uint64_t l) {
  uint32_t o = WD_OPEN((uint32_t)(uintptr_t)handle);
  int last;
  do {
    if (wd_life_open(l) != o) return wd_event_matches(ev, handle) ? 0 : wd_count_stale(handle);
    last = wd_life_refs(l) == 1; /* the others went meanwhile */
  } while (!atomic_compare_exchange_weak_explicit(&ev->life, &l, last ? 0 : WD_LIFE(wd_life_refs(l), 0),
                                                  memory_order_acq_rel, memory_order_relaxed));
  return wd_close_now(ev, last);
}

int wd_event_abandon(wd_event *ev, uint64_t now) {
  uint64_t l = atomic_load_explicit(&ev->life, memory_order_acquire);
  do {
    if (wd_life_open(l) == 0) return 0;
  } while (!atomic_compare_exchange_weak_explicit(&ev->life, &l, WD_LIFE(wd_life_refs(l), 0),
                                                  memory_order_acq_rel, memory_order_acquire));
  wd_close(ev, now, WD_F_ABANDONED, WD_T_UNKNOWN, 0);
  return 1;
}

static inline int wd_is_root_type(unsigned type) {
  return type == WD_T_COLL || type == WD_T_P2P || type == WD_T_CECOLL;
}

/* The pool a proxy-level event's slot comes from. From NCCL 2.31 (ABI v7) kernel channels and
 * phases come from the Profiler Thread (plugin/profiler.cc), not the proxy thread: they take the
 * operation pool's slots, so no two threads but the Profiler Thread and the application thread
 * (a few slots per operation) share a free queue, and the proxy thread keeps its own. */
static inline wd_pool *wd_child_pool(wd_context *ctx, unsigned type) {
  return ctx->abi >= 7 && (type == WD_T_KERNELCH || type == WD_T_KERNELPHASE) ? &ctx->pool
                                                                              : &ctx->proxy_pool;
}

/* Children that keep their parent alive and progress its operation. */
static inline int wd_is_tracked_child(unsigned type) {
  return type == WD_T_PROXYOP || type == WD_T_PROXYSTEP || type == WD_T_KERNELCH ||
         type == WD_T_NETPLUGIN || type == WD_T_KERNELPHASE;
}

/* Enqueue order of a root operation: that of its Group event (still live while its Coll/P2p
 * start), or a fresh one when there is none. */
static uint64_t wd_group_order(wd_context *ctx, void *group_obj, int *grouped) {
  wd_event *g = wd_event_from_handle(group_obj);
  *grouped = g && wd_event_type(g) == WD_T_GROUP;
  if (*grouped) return atomic_load_explicit(&g->order, memory_order_relaxed);
  return atomic_fetch_add_explicit(&ctx->order_next, 1, memory_order_relaxed);
}

/* What NCCL 2.29/2.30's work counters will make of later kernel channels (event.h, WD_KCH_*),
 * from a CollApi of the application thread: a group of Broadcasts from several roots takes the
 * AllGatherV path (enqueue.cc, ncclPrepareTasks). */
static void wd_note_api(wd_context *ctx, const wd_start_req *req) {
  if (req->rec.func != ctx->bcast_func || ctx->bcast_func == WD_STR_OVERFLOW) return;
  uint64_t group = (uint64_t)(uintptr_t)req->parent_obj;
  if (group && atomic_load_explicit(&ctx->bcast_group, memory_order_relaxed) == group &&
      atomic_load_explicit(&ctx->bcast_root, memory_order_relaxed) != req->rec.peer)
    atomic_store_explicit(&ctx->gather_seen, 1, memory_order_relaxed);
  atomic_store_explicit(&ctx->bcast_group, group, memory_order_relaxed);
  atomic_store_explicit(&ctx->bcast_root, req->rec.peer, memory_order_relaxed);
}

/* Whether a ProxyOp started on ctx's proxy belongs to another process (PXN): another pid, or,
 * where pids coincide (one PID namespace per container), another originating rank. NCCL gives
 * a ProxyOp the rank of the comm that posted it (plugin/profiler.cc,
 * ncclProfilerStartProxyOpEvent: sub->rank); rank_plus1 is 0 where it was not known. */
static inline int wd_proxyop_foreign(int32_t pid, uint64_t rank_plus1, const wd_context *ctx) {
  return pid != wd_store.pid || (rank_plus1 != 0 && (int64_t)rank_plus1 - 1 != (int64_t)ctx->rank);
}

/* An API parent (GroupApi, CollApi, P2pApi) of an operation-level event. API parents stop before
 * their Coll/P2p starts, so the handle is usually stale by now. The slot is still ours and, freed
 * slots being reused late, still describes the parent unless it was re-initialised meanwhile (odd
 * seq) or is of another type. */
static wd_event *wd_api_parent(wd_start_req *req, wd_event *pslot, uint32_t *parent_slot, uint64_t *gkey) {
  unsigned type = req->rec.type;
  *parent_slot = __atomic_load_n(&pslot->slot_id, __ATOMIC_RELAXED);
  unsigned ptype = wd_event_type(pslot);
  int intact = !(atomic_load_explicit(&pslot->seq, memory_order_acquire) & 1);
  if (intact && (ptype == WD_T_COLLAPI || ptype == WD_T_P2PAPI || ptype == WD_T_GROUPAPI) &&
      (wd_event_flags(pslot) & WD_F_GRAPH))
    req->rec.flags |= WD_F_GRAPH;
  /* The GroupApi an operation was issued under keys its kernel launches: KernelLaunch and
   * CollApi/P2pApi name it as parent, the Coll/P2p names its CollApi/P2pApi
   * (plugin/profiler.cc, ncclProfilerStartKernelLaunchEvent / StartTaskEvents). */
  if (ptype == WD_T_GROUPAPI && (type == WD_T_COLLAPI || type == WD_T_P2PAPI || type == WD_T_KERNELLAUNCH))
    *gkey = (uint64_t)(uintptr_t)req->parent_obj;
  else if (intact && (ptype == WD_T_COLLAPI || ptype == WD_T_P2PAPI) && (type == WD_T_COLL || type == WD_T_P2P)) {
    *gkey = atomic_load_explicit(&pslot->gpu_key, memory_order_relaxed);
    /* A replay names the captured call's kept slot (refs 2 while its context lives). */
    if (req->rec.flags & WD_F_GRAPH) return pslot;
  }
  return NULL;
}

/* A replay's Coll/P2p, named by its captured API event `api`: the key of the captured launch
 * under the same GroupApi and this replay's number (the API slot counts its replays; it caches
 * the launch's slot in kch_expected, a field API events do not use otherwise). 0 when the
 * launch is not followed. */
static uint64_t wd_replay_key(wd_context *ctx, wd_event *api, uint64_t group, wd_record *rec) {
  uint32_t cached = atomic_load_explicit(&api->kch_expected, memory_order_relaxed);
  int gi = cached ? (int)cached - 1 : wd_graph_lookup(&ctx->graphs, group);
  if (gi < 0) return 0;
  if (!cached) atomic_store_explicit(&api->kch_expected, (uint32_t)gi + 1, memory_order_relaxed);
  uint64_t r = atomic_fetch_add_explicit(&api->kch_done, 1, memory_order_relaxed) + 1u;
  rec->n = (int32_t)(r & 0x7fffffff);
  return wd_graph_key((uint32_t)gi, r);
}

void wd_unpin_gone(wd_context *ctx) {
  const wd_graphs *g = &ctx->graphs;
  for (uint32_t i = 0, n = wd_pool_nslots(&ctx->pool); i < n; i++) {
    wd_event *ev = wd_pool_slot(&ctx->pool, i);
    uint32_t k = atomic_load_explicit(&ev->kch_expected, memory_order_relaxed);
    unsigned t = wd_event_type(ev);
    if (k == 0 || k > g->cap || (t != WD_T_COLLAPI && t != WD_T_P2PAPI) || !(wd_event_flags(ev) & WD_F_GRAPH) ||
        wd_life_refs(atomic_load_explicit(&ev->life, memory_order_acquire)) == 0 ||
        atomic_load_explicit(&g->slot[k - 1].armed, memory_order_acquire) != WD_SLOT_GONE)
      continue;
    if (!atomic_compare_exchange_strong_explicit(&ev->kch_expected, &k, 0, memory_order_acq_rel, memory_order_relaxed))
      continue;
    atomic_fetch_sub_explicit(&ctx->pinned_api, 1, memory_order_relaxed);
    wd_event_unref(ev);
  }
}

/* A replay's events come from its graph's host node, which runs only once the graph's previous
 * launch finished on the GPU (cuGraphLaunch orders one graph's launches): the previous replay
 * of the same captured call is past its kernel, so its hold goes now, not a poll later, and the
 * replays held at once stay one per captured call, whatever the replay rate. The captured API
 * slot remembers its latest replay's handle in wd_reached_ns, a root-only field. */
static void wd_replay_supersede(wd_event *api, wd_event *ev, uint64_t key) {
  void *prev = (void *)(uintptr_t)atomic_exchange_explicit(
      &api->wd_reached_ns, (uint64_t)(uintptr_t)wd_event_handle(ev), memory_order_acq_rel);
  wd_event *p = wd_event_from_handle(prev);
  if (!p || p == ev || atomic_load_explicit(&p->kind, memory_order_relaxed) != WD_KIND_ROOT) return;
  uint64_t pk = atomic_load_explicit(&p->gpu_key, memory_order_relaxed);
  if (wd_is_graph_key(pk) && wd_graph_key_slot(pk) == wd_graph_key_slot(key) &&
      wd_graph_key_replay(pk) < wd_graph_key_replay(key))
    wd_event_release_hold(p);
}

/* The general start; type is rec->type, a constant where the caller knows it (wd_track_start). */
static inline __attribute__((always_inline)) void *wd_start_typed(wd_start_req *req, unsigned type) {
  wd_record *rec = &req->rec;
  if (type >= WD_T_COUNT) return NULL;
  wd_context *ctx = (wd_context *)req->context;
  wd_event *pslot = req->parent_obj ? wd_event_slot_of(req->parent_obj) : NULL;
  wd_event *parent = NULL;
  uint32_t parent_slot = WD_SLOT_NONE;
  uint64_t gkey = 0;
  wd_event *replay_api = NULL;
  int detached;
  rec->raw = 0;
  /* The common case, a proxy-level child of a live event of the same communicator: the parent
   * being live in one of ctx's pools proves ctx is a live context of ours (finalize retires its
   * slots), so the registry need not be asked. */
  if (pslot && ctx && __atomic_load_n(&pslot->ctx, __ATOMIC_RELAXED) == ctx && wd_is_tracked_child(type) &&
      (type != WD_T_PROXYOP || !wd_proxyop_foreign(req->pid, rec->a, ctx)) &&
      (parent = wd_try_ref(pslot, req->parent_obj))) {
    detached = 0;
    parent_slot = parent->slot_id;
  } else {
    detached = ctx == NULL || !wd_registry_has(ctx);
    if (type == WD_T_PROXYOP && (detached || wd_proxyop_foreign(req->pid, rec->a, ctx))) detached = 1;
    /* A parentObj is followed only when it is a slot of ours (arena range check). Anything else
     * is foreign: a PXN op of another process (possibly one with our pid in another PID
     * namespace), or garbage. Its proxy-level children are kept apart in the detach pool. */
    int parent_detached = pslot && __atomic_load_n(&pslot->pool, __ATOMIC_RELAXED) == &wd_store.detached;
    /* A PXN ProxyStep may come with a context value that happens to be ours; its parent, our
     * detached ProxyOp, gives it away. */
    if (parent_detached && (type == WD_T_PROXYSTEP || type == WD_T_NETPLUGIN)) detached = 1;
    /* An event of another process names a parent of that process: never one of our contexts'. */
    int foreign = req->parent_obj != NULL && (pslot == NULL || (detached && !parent_detached));
    if (foreign && wd_is_tracked_child(type)) detached = 1;
    if (req->parent_obj) {
      if (foreign) {
        parent_slot = WD_SLOT_FOREIGN;
        rec->raw = (uint64_t)(uintptr_t)req->parent_obj;
      } else if (wd_is_tracked_child(type)) {
        parent = wd_try_ref(pslot, req->parent_obj);
        if (parent) parent_slot = parent->slot_id;
        else rec->flags |= WD_F_ORPHAN;
      } else {
        replay_api = wd_api_parent(req, pslot, &parent_slot, &gkey);
      }
    }
  }
  if (type == WD_T_COLLAPI && !detached && ctx->abi < 7) wd_note_api(ctx, req);
  /* A captured call: what its launch, recorded next, will be named after. */
  if ((type == WD_T_COLLAPI || type == WD_T_P2PAPI) && (rec->flags & WD_F_GRAPH) && !detached)
    wd_graph_note_api(&ctx->graphs, gkey, rec->func, rec->dtype, rec->count, rec->peer);
  /* The call's userTag rides in raw, which only a foreign parent uses otherwise. */
  if (req->user_tag && rec->raw == 0 && !detached) {
    rec->raw = req->user_tag;
    rec->flags |= WD_F_TAGGED;
  }
  /* CUDA events around the launch (or the CE collective) on NCCL's stream. */
  if (!detached && req->stream && (type == WD_T_KERNELLAUNCH || type == WD_T_CECOLL)) {
    uint64_t group = type == WD_T_KERNELLAUNCH ? gkey : 0;
    gkey = wd_launch_begin(&ctx->launches, req->stream, group);
    /* Into a graph being captured: the replays' own ground truth (graph.h). */
    if (gkey == WD_LAUNCH_CAPTURING) {
      gkey = type == WD_T_KERNELLAUNCH ? wd_graph_capture_key(&ctx->graphs, req->stream, group) : 0;
      /* The group's captured API events name the launch's slot now (wd_replay_key's cache): its
       * graph's destruction then unpins them (wd_unpin_gone). */
      if (wd_is_graph_key(gkey) && atomic_load_explicit(&ctx->cap_api_group, memory_order_relaxed) == group) {
        uint32_t n = atomic_load_explicit(&ctx->ncap_api, memory_order_relaxed);
        for (uint32_t k = 0; k < n && k < WD_CAP_API; k++) {
          wd_event *api = atomic_load_explicit(&ctx->cap_api[k], memory_order_relaxed);
          if (api) atomic_store_explicit(&api->kch_expected, wd_graph_key_slot(gkey) + 1, memory_order_relaxed);
        }
      }
      atomic_store_explicit(&ctx->ncap_api, 0, memory_order_relaxed);
    }
    else if (gkey && type == WD_T_KERNELLAUNCH)
      wd_graph_note_eager(&ctx->graphs);
  }

  wd_pool *pool = detached ? &wd_store.detached
                           : (wd_type_is_proxy_level(type) ? wd_child_pool(ctx, type) : &ctx->pool);
  wd_event *ev = wd_pool_alloc(pool, (uint32_t)wd_tid());
  if (ev == NULL) {
    if (!detached) atomic_fetch_add_explicit(&ctx->dropped, 1, memory_order_relaxed);
    if (parent) wd_event_unref(parent);
    return NULL;
  }
  if (detached) {
    rec->flags |= WD_F_DETACHED;
    if (rec->raw) wd_blacklist_ref(wd_store.detached_bl, (uintptr_t)rec->raw);
  }

  uint64_t now = wd_now_ns();
  rec->ts_ns = now;
  rec->slot = ev->slot_id;
  rec->parent = parent_slot;
  rec->tid = wd_tid();
  rec->phase = WD_PH_START;
  rec->state = 0xff;

  wd_event *root = NULL;
  uint32_t refs = 1, hold = 0, kind = WD_KIND_CHILD, kch_expected = 0, kch_trust = WD_KCH_TRUSTED;
  if (wd_is_root_type(type) || (type == WD_T_PROXYOP && parent == NULL)) {
    kind = WD_KIND_ROOT;
    root = ev;
    if (!detached) {
      int grouped;
      atomic_store_explicit(&ev->order, wd_group_order(ctx, req->group_obj, &grouped), memory_order_relaxed);
      atomic_store_explicit(&ev->grouped, (uint8_t)grouped, memory_order_relaxed);
      /* Kernel channels are expected for every channel it announces, except for a send or
       * recv to self before NCCL 2.31, which gets none (no profiler proxy op: proxy.cc); 2.31
       * posts the self pair's too (plugin/profiler.cc, ncclProfilerPostPlanWork). A CollNet op
       * announces none yet gets them, and ProxyOps that may start after its stop: held too,
       * until the watchdog finds its kernel done. */
      int not_self = (type == WD_T_COLL || type == WD_T_P2P) &&
                     !(type == WD_T_P2P && rec->peer == ctx->rank && ctx->abi < 7);
      /* A captured symmetric kernel's replay gets Group and Coll from the graph's host node and
       * no KernelCh (NCCL 2.31, plugin/profiler.cc: a symmetric plan's channels are not posted
       * at a replay): no KernelCh hold. Keyed to its captured launch (below) it is held until the
       * launch's records say the GPU passed that replay; without the watch it completes at its
       * stop, like an op without KernelCh (config.blindSpots). */
      int sym_replay = ctx->abi >= 7 && type == WD_T_COLL && (rec->flags & WD_F_SYMCOLL) &&
                       (rec->flags & WD_F_GRAPH);
      int kch_hold = ctx->kch_on && not_self && !sym_replay;
      /* A CE collective ends at enqueue as far as NCCL tells (ce_coll.cc): with CUDA events
       * around it, it is held until the GPU has done it. */
      int gpu_hold = type == WD_T_CECOLL && gkey;
      /* KernelCh off (left out where CUDA events bracket the launches: judge.h): an op whose
       * launch was bracketed is held until its end event completes. One without (a graph
       * replay) completes at its stop, as without KernelCh ever. */
      /* An op is judged by the launch of its own plan: NCCL launches a plan's kernel before it
       * starts that plan's Group and Coll/P2p events (group.cc doLaunches, enqueue.cc
       * ncclLaunchKernel then hostStreamPlanTask), so the GroupApi's latest launch now is its
       * plan's, or a later one of the same group whose end implies its own (stream order). A
       * group of more ops than fit in one plan then never ties plan 1's ops to plan 2's kernel. */
      uint64_t lf, ll;
      if (type != WD_T_CECOLL) {
        uint64_t group = gkey;
        gkey = gkey && wd_launch_lookup(&ctx->launches, gkey, &lf, &ll) ? ll : 0;
        /* A replay of a followed captured launch: held until the GPU has passed it in this
         * replay, so the proxy work NCCL starts after its stop (enqueue.cc uploadProxyOps, from
         * the graph's host node) joins it rather than becoming orphans. */
        if (!gkey && replay_api && ctx->graphs.on) gkey = wd_replay_key(ctx, replay_api, group, rec);
      }
      if (!ctx->kch_on && not_self && gkey) gpu_hold = 1;
      hold = (uint32_t)(kch_hold || gpu_hold);
      kch_expected = kch_hold ? rec->nChannels : 0;
      if (kch_hold && ctx->abi < 7 && atomic_load_explicit(&ctx->gather_seen, memory_order_relaxed))
        kch_trust = WD_KCH_STARTED_ONLY;
      if (type == WD_T_COLL) wd_max_i64(&ctx->seq_enq[rec->func], (int64_t)rec->a);
      else if (type == WD_T_CECOLL) wd_max_i64(&ctx->ce_seq_enq[rec->func], (int64_t)rec->a);
      else if (type == WD_T_P2P) atomic_fetch_add_explicit(&ctx->p2p_enq, 1, memory_order_relaxed);
    }
  } else if ((type == WD_T_COLLAPI || type == WD_T_P2PAPI) && (rec->flags & WD_F_GRAPH) && !detached &&
             atomic_fetch_add_explicit(&ctx->pinned_api, 1, memory_order_relaxed) < WD_MAX_PINNED_API) {
    /* A captured call's API event names every replay's Coll/P2p as parent (enqueue.cc,
     * hostStreamPlanCallback): its slot is kept, never reused, so each replay still reads
     * graphCaptured from it (bounded: WD_MAX_PINNED_API per communicator; finalize frees them). */
    refs = 2;
    /* NCCL calls one communicator from one thread; atomics keep a host that does not (the
     * fuzzer) from tearing the list, which only names slots, never frees them. */
    if (atomic_load_explicit(&ctx->cap_api_group, memory_order_relaxed) != gkey) {
      atomic_store_explicit(&ctx->cap_api_group, gkey, memory_order_relaxed);
      atomic_store_explicit(&ctx->ncap_api, 0, memory_order_relaxed);
    }
    uint32_t k = atomic_fetch_add_explicit(&ctx->ncap_api, 1, memory_order_relaxed);
    if (k < WD_CAP_API) atomic_store_explicit(&ctx->cap_api[k], ev, memory_order_relaxed);
    /* Its replay count, captured launch and latest replay (wd_replay_key, wd_replay_supersede),
     * fields only roots use otherwise. */
    atomic_store_explicit(&ev->kch_expected, 0, memory_order_relaxed);
    atomic_store_explicit(&ev->kch_done, 0, memory_order_relaxed);
    atomic_store_explicit(&ev->wd_reached_ns, 0, memory_order_relaxed);
  } else if (type == WD_T_GROUP && !detached) {
    atomic_store_explicit(&ev->order, atomic_fetch_add_explicit(&ctx->order_next, 1, memory_order_relaxed),
                          memory_order_relaxed);
  } else if (parent) {
    root = wd_child_started(parent, type, now);
  }

  wd_slot_fill(ev, type, parent, wd_ring_for(ev->ctx, type), root, kind, now);
  atomic_store_explicit(&ev->hold, hold, memory_order_relaxed);
  atomic_store_explicit(&ev->gpu_key, gkey, memory_order_relaxed);
  if (kind == WD_KIND_ROOT) {
    atomic_store_explicit(&ev->kch_expected, kch_expected, memory_order_relaxed);
    atomic_store_explicit(&ev->kch_trust, (uint8_t)kch_trust, memory_order_relaxed);
    atomic_store_explicit(&ev->kch_done, 0, memory_order_relaxed);
    atomic_store_explicit(&ev->kch_seen, 0, memory_order_relaxed);
    atomic_store_explicit(&ev->reached_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&ev->wd_gpu_wait, 0, memory_order_relaxed);
    atomic_store_explicit(&ev->wd_gpu, 0, memory_order_relaxed);
    atomic_store_explicit(&ev->wd_reached_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&ev->wd_proxy_tid, 0, memory_order_relaxed);
  }
  wd_slot_open(ev, refs + hold);
  if (replay_api && hold && wd_is_graph_key(gkey)) wd_replay_supersede(replay_api, ev, gkey);
  uint64_t v[WD_RECORD_WORDS];
  const wd_recw *src = (const wd_recw *)rec; /* rec is the r member of req's wd_recw */
  v[0] = 0;
#pragma GCC unroll 16
  for (unsigned i = 1; i < WD_RECORD_WORDS; i++) {
    v[i] = src->w[i];
    __atomic_store_n(&ev->startw[i], v[i], __ATOMIC_RELAXED);
  }
  wd_event_publish(ev);

  wd_ring_put(atomic_load_explicit(&ev->ring, memory_order_relaxed), v);
  /* A new child is progress of its root op; like a state change, it is carried up to the root
   * by the watchdog's scan of open children (stall.c), not stamped here. */
  return wd_event_handle(ev);
}

/* The application thread's common types get copies of the general start made for them. */
void *wd_track_start(wd_start_req *req) {
  switch (req->rec.type) {
  case WD_T_GROUP: return wd_start_typed(req, WD_T_GROUP);
  case WD_T_COLLAPI: return wd_start_typed(req, WD_T_COLLAPI);
  case WD_T_COLL: return wd_start_typed(req, WD_T_COLL);
  case WD_T_P2PAPI: return wd_start_typed(req, WD_T_P2PAPI);
  case WD_T_P2P: return wd_start_typed(req, WD_T_P2P);
  default: return wd_start_typed(req, req->rec.type);
  }
}

/* The generic start for what wd_track_child_start could not take (no live parent of ctx). */
static __attribute__((noinline)) int wd_child_start_slow(void *context, void **out, void *parent_obj,
                                                         uint64_t val, uint64_t n_pid, uint64_t meta) {
  /* The entry points leave the plugin's state to the fast path (a live parent of ctx proves it
   * running: stopping retires every slot, a fork disowns the arena); the general start needs it. */
  if (!atomic_load_explicit(&wd_store_active, memory_order_acquire)) {
    *out = NULL;
    return 0;
  }
  wd_start_req req;
  memset(&req, 0, sizeof req);
  req.context = context;
  req.parent_obj = parent_obj;
  req.pid = (int32_t)(n_pid >> 32);
  req.rec.type = (uint8_t)meta;
  req.rec.flags = (uint8_t)(meta >> 8);
  req.rec.channel = (uint8_t)(meta >> 16);
  req.rec.peer = (int32_t)(meta >> 32);
  if (req.rec.type == WD_T_PROXYOP) {
    req.rec.count = (uint32_t)val; /* chunk size */
    req.rec.a = val >> 32;         /* its rank + 1: kept for a detached (PXN) op's origin */
  } else {
    req.rec.a = val;
  }
  req.rec.n = (int32_t)n_pid;
  req.rec.pid = req.pid;
  *out = wd_track_start(&req);
  return 0;
}

/* The fast start, inlined into its two entry points so that a ProxyStep's (half of all starts)
 * constant type, flags, channel and peer fold away. */
static inline __attribute__((always_inline)) int wd_child_start_fast(void *context, void **out,
                                                                     void *parent_obj, uint64_t val,
                                                                     uint64_t n_pid, uint64_t meta) {
  wd_context *ctx = (wd_context *)context;
  unsigned type = (uint8_t)meta;
  uintptr_t pa = (uintptr_t)parent_obj & ~(uintptr_t)WD_TAG_MASK;
  wd_event *pslot = (wd_event *)pa;
  /* As in wd_track_start: a parent live in one of ctx's pools proves ctx is live and ours; a
   * ProxyOp of another process (PXN) is kept apart. The parent's incarnation is checked once,
   * after the reference is taken (wd_ref_matched); before, only that the slot is ours. */
  if (__builtin_expect(!wd_arena_holds(pa, sizeof(wd_event)), 0) ||
      __builtin_expect(__atomic_load_n(&pslot->ctx, __ATOMIC_RELAXED) != ctx, 0) ||
      __builtin_expect(type == WD_T_PROXYOP && wd_proxyop_foreign((int32_t)(n_pid >> 32), val >> 32, ctx), 0) ||
      __builtin_expect(!wd_ref_matched(pslot, parent_obj), 0))
    return wd_child_start_slow(context, out, parent_obj, val, n_pid, meta);
  wd_event *parent = pslot;
  uint64_t now = wd_now_ns(); /* before the slot: fewer values live across the call */
  uint32_t tid = (uint32_t)wd_tid();
  wd_event *ev = wd_pool_alloc(wd_child_pool(ctx, type), tid);
  if (__builtin_expect(ev == NULL, 0)) {
    atomic_fetch_add_explicit(&ctx->dropped, 1, memory_order_relaxed);
    wd_event_unref(parent);
    *out = NULL;
    return 0;
  }
  wd_event *root = wd_child_started(parent, type, now);
  wd_slot_fill(ev, type, parent, &ctx->proxy_ring, root, WD_KIND_CHILD, now);
  uint32_t tag = atomic_load_explicit(&ev->tag, memory_order_relaxed); /* ours until freed */
  atomic_store_explicit(&ev->life, WD_LIFE(1, WD_OPEN(tag)), memory_order_release);
  /* The record a generic start would write, built in registers. */
  uint64_t w[WD_RECORD_WORDS] = {0};
  w[WD_RECW_TS] = now;
  w[WD_RECW_A] = type == WD_T_PROXYOP ? 0 : val;
  w[WD_RECW_COUNT] = type == WD_T_PROXYOP ? (uint32_t)val : 0;
  w[WD_RECW_SLOT] = wd_recw_pair(ev->slot_id, parent->slot_id);
  w[WD_RECW_TID] = wd_recw_pair(tid, (uint32_t)(meta >> 32));
  w[WD_RECW_N] = n_pid;
  w[WD_RECW_TAGS] = wd_recw_tags(WD_PH_START, type, 0xff, (uint8_t)(meta >> 8) | WD_F_SPAN);
  w[WD_RECW_CHAN] = (uint8_t)(meta >> 16);
  /* Word 0, the ring's turn, means nothing in a slot: never written there (wd_event_read_words). */
#pragma GCC unroll 16
  for (unsigned i = 1; i < WD_RECORD_WORDS; i++) __atomic_store_n(&ev->startw[i], w[i], __ATOMIC_RELAXED);
  /* No ring record now: the stop writes the span (record.h). */
  wd_event_publish(ev);
  *out = (void *)((uintptr_t)ev | (tag & WD_TAG_MASK));
  return 0;
}

int wd_track_child_start(void *context, void **out, void *parent_obj, uint64_t val, uint64_t n_pid,
                         uint64_t meta) {
  return wd_child_start_fast(context, out, parent_obj, val, n_pid, meta);
}

int wd_track_step_start(void *context, void **out, void *parent_obj, uint32_t step) {
  return wd_child_start_fast(context, out, parent_obj, 0, step, wd_child_meta(WD_T_PROXYSTEP, 0, 0, -1));
}

int wd_track_kch_start(void *context, void **out, void *parent_obj, uint64_t ptimer, uint8_t channel) {
  return wd_child_start_fast(context, out, parent_obj, ptimer, 0, wd_child_meta(WD_T_KERNELCH, 0, channel, -1));
}

int wd_track_proxyop_start(void *context, void **out, void *parent_obj, uint64_t val, uint64_t n_pid,
                           uint64_t meta) {
  return wd_child_start_fast(context, out, parent_obj, val, n_pid, (meta & ~(uint64_t)0xff) | WD_T_PROXYOP);
}

/* A call with a handle whose event is gone (stopped twice, abandoned, retired at finalize) is
 * ignored, and counted on the communicator the slot belongs to (immutable, memory still ours). */
static __attribute__((noinline)) int wd_count_stale(void *handle) {
  const wd_event *slot = wd_event_slot_of(handle);
  if (slot == NULL) return 0; /* NULL or not ours: no communicator to count it on */
  wd_context *ctx = __atomic_load_n(&slot->ctx, __ATOMIC_RELAXED);
  /* Only a live context: a finalized one may be gone, and nobody reads its count any more. */
  if (ctx && wd_registry_has(ctx)) atomic_fetch_add_explicit(&ctx->stale, 1, memory_order_relaxed);
  return 0;
}

int wd_track_stop(void *handle) {
  uintptr_t a = (uintptr_t)handle & ~(uintptr_t)WD_TAG_MASK;
  if (!wd_arena_holds(a, sizeof(wd_event))) return wd_count_stale(handle);
  wd_event *ev = (wd_event *)a;
  /* Closes the incarnation the handle names, not a later one the slot was reused for: open holds
   * the live incarnation's tag, so the exchange is also the tag check (a handle of another
   * incarnation is told apart from a second stop after it failed). */
  uint32_t o = WD_OPEN((uint32_t)(uintptr_t)handle);
  /* An event that holds only its own reference (no child, no hold: most) is claimed and
   * released in the same exchange; the slot is then this call's alone until it frees it. */
  uint64_t l = WD_LIFE(1, o);
  if (__builtin_expect(!atomic_compare_exchange_strong_explicit(&ev->life, &l, 0, memory_order_acq_rel,
                                                                memory_order_relaxed), 0))
    return wd_stop_shared(ev, handle, l);
  unsigned type = atomic_load_explicit(&ev->type, memory_order_relaxed);
  if (__builtin_expect(type == WD_T_PROXYSTEP, 1)) return wd_close_step_now(ev);
  if (type == WD_T_PROXYOP) return wd_close_proxyop_now(ev);
  if (type == WD_T_KERNELCH) return wd_close_kch_now(ev);
  return wd_close_now(ev, 1);
}

/* A state record in the ring (operation-level types, ProxyCtrl): kept out of line so the common
 * in-slot state needs no stack frame. */
static __attribute__((noinline)) int wd_state_record(wd_event *ev, unsigned type, unsigned st,
                                                     const void *args) {
  uint64_t now = wd_now_ns();
  uint64_t v[WD_RECORD_WORDS];
  wd_event_read_words(ev, v);
  v[WD_RECW_TAGS] = wd_recw_retag(v[WD_RECW_TAGS], WD_PH_STATE, st);
  v[WD_RECW_TS] = now;
  v[WD_RECW_TID] = wd_recw_low32(v[WD_RECW_TID], (uint32_t)wd_tid());
  if (args && type == WD_T_PROXYCTRL) {
    int32_t n;
    memcpy(&n, args, sizeof n);
    v[WD_RECW_N] = wd_recw_low32(v[WD_RECW_N], (uint32_t)n);
  }
  atomic_store_explicit(&ev->state, (uint8_t)st, memory_order_relaxed);
  atomic_store_explicit(&ev->last_ns, now, memory_order_relaxed);
  wd_ring_put(atomic_load_explicit(&ev->ring, memory_order_relaxed), v);
  return 0;
}

/* A send step's SendWait time, kept in a field a child does not otherwise use (event.h). */
static __attribute__((noinline)) int wd_mark_send_wait(wd_event *ev) {
  atomic_store_explicit(&ev->reached_ns, wd_now_ns(), memory_order_relaxed);
  return 0;
}

int wd_track_state(void *handle, int state, const void *args) {
  wd_event *ev;
  if (!wd_event_lookup(handle, &ev)) return wd_count_stale(handle);
  unsigned st = (unsigned)state;
  if (__builtin_expect(st >= 255u, 0)) st = 255u; /* a negative one too */
  unsigned type = atomic_load_explicit(&ev->type, memory_order_relaxed);
  /* The proxy thread's states (half of all callbacks) stay in the event's own slot: the live
   * tree shows them, the stop record carries the last one and its value, the watchdog's scan
   * dates them (track.h). The verdicts read operation-level records only (analyzer: load.c,
   * op_level_kept). */
  if (__builtin_expect(type == WD_T_PROXYSTEP, 1)) { /* most of them */
    if (__builtin_expect(args != NULL, 1)) {
      uint64_t value;
      memcpy(&value, args, sizeof value);
      atomic_store_explicit(&ev->last_trans, value, memory_order_relaxed);
    }
    atomic_store_explicit(&ev->state, (uint8_t)st, memory_order_relaxed);
    /* The network's own part of a send step begins when the isend is posted (transport/net.cc,
     * sendProxyProgress: SendWait until the request tests done): in a pipelined ring every
     * link's whole step waits on the slowest, this part alone tells a slow link. One clock read
     * per send step, out of line so that the other states need no stack frame. */
    if (st == WD_ST_SEND_WAIT) return wd_mark_send_wait(ev);
    return 0;
  }
  if (wd_state_in_slot(type)) {
    if (args && type != WD_T_PROXYOP) {
      uint64_t value;
      memcpy(&value, args, sizeof value);
      atomic_store_explicit(&ev->last_trans, value, memory_order_relaxed);
    }
    atomic_store_explicit(&ev->state, (uint8_t)st, memory_order_relaxed);
    return 0;
  }
  return wd_state_record(ev, type, st, args);
}
