/*
 * Event tracking through the exported tables: completion of operations, reference counts that
 * keep parent slots alive, stale and NULL handles, PXN (detached) events, the watchdog's scan
 * (superseded operations, abandoned children, the stall rule), v4 descriptors.
 *
 * One context that lives for the whole run keeps process-wide state up; each test makes its own
 * context so counters and slot numbers start fresh. The watchdog thread is told to poll once a
 * minute and to time out after an hour, so it never acts during the run: every scan here is
 * called directly with an explicit `now`.
 */
#include <CUnit/Basic.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flightrec/strtab.h"
#include "events/blacklist.h"
#include "base/clock.h"
#include "events/context.h"
#include "events/store.h"
#include "plugin/lifecycle.h"
#include "plugin/profiler_abi.h"
#include "events/track.h"
#include "watchdog/stall.h"
#include "wd_test_util.h"

extern ncclProfiler_v4_t ncclProfiler_v4;
extern ncclProfiler_v5_t ncclProfiler_v5;
extern ncclProfiler_v6_t ncclProfiler_v6;

#define SEC 1000000000ull
#define MS 1000000ull

static char tmpdir[512];

/* CUnit is not thread-safe: helpers called from worker threads count failures instead. */
static __thread int in_worker;
static _Atomic int worker_errors;
#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (in_worker) {                                                                             \
      if (!(cond)) atomic_fetch_add(&worker_errors, 1);                                          \
    } else {                                                                                     \
      CU_ASSERT(cond);                                                                           \
    }                                                                                            \
  } while (0)
static void *anchor;
static wd_config tcfg; /* scan settings: timeout 10 s, poll 1 s (settle 2 s) */

/* ---------------------------------------------------------------- helpers */

static wd_context *new_ctx(const char *name, int kch_on) {
  void *c = NULL;
  int mask = 0;
  CU_ASSERT_EQUAL(ncclProfiler_v5.init(&c, (uint64_t)(uintptr_t)name, &mask, name, 1, 4, 1, NULL),
                  ncclSuccess);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c); /* ends the calling test */
  ((wd_context *)c)->kch_on = kch_on; /* as if the mask had (or lacked) KernelCh */
  return c;
}

static void free_ctx(wd_context *c) {
  if (c) CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(c), ncclSuccess);
}

static void *start(void *ctx, ncclProfilerEventDescr_v5_t *d) {
  void *h = (void *)0x5; /* must be overwritten */
  CHECK(ncclProfiler_v5.startEvent(ctx, &h, d) == ncclSuccess);
  CHECK(h != (void *)0x5);
  return h;
}

/* A zeroed v5 descriptor of that type and parent, for the constructors below to fill. */
static void descr(ncclProfilerEventDescr_v5_t *d, uint64_t type, void *parent) {
  memset(d, 0, sizeof *d);
  d->type = type;
  d->parentObj = parent;
  d->rank = 1; /* NCCL names the comm rank (plugin/profiler.cc); every context here is rank 1 */
}

static void *coll(void *ctx, void *parent, const char *func, uint64_t seq, uint8_t nch) {
  ncclProfilerEventDescr_v5_t d;
  descr(&d, ncclProfileColl, parent);
  d.coll.seqNumber = seq;
  d.coll.func = func;
  d.coll.count = 1024;
  d.coll.root = 0;
  d.coll.datatype = "ncclFloat32";
  d.coll.nChannels = nch;
  d.coll.nWarps = 8;
  d.coll.algo = "Ring";
  d.coll.proto = "Simple";
  return start(ctx, &d);
}

static void *p2p(void *ctx, const char *func, int peer, uint8_t nch) {
  ncclProfilerEventDescr_v5_t d;
  descr(&d, ncclProfileP2p, NULL);
  d.p2p.func = func;
  d.p2p.datatype = "ncclInt8";
  d.p2p.count = 4096;
  d.p2p.peer = peer;
  d.p2p.nChannels = nch;
  return start(ctx, &d);
}

static void *proxyop(void *ctx, void *parent, pid_t pid, uint8_t ch, int peer, int nsteps, int send) {
  ncclProfilerEventDescr_v5_t d;
  descr(&d, ncclProfileProxyOp, parent);
  d.proxyOp.pid = pid;
  d.proxyOp.channelId = ch;
  d.proxyOp.peer = peer;
  d.proxyOp.nSteps = nsteps;
  d.proxyOp.chunkSize = 1 << 19;
  d.proxyOp.isSend = send;
  return start(ctx, &d);
}

static void *step(void *ctx, void *parent, int s) {
  ncclProfilerEventDescr_v5_t d;
  descr(&d, ncclProfileProxyStep, parent);
  d.proxyStep.step = s;
  return start(ctx, &d);
}

static void *kch(void *ctx, void *parent, uint8_t ch) {
  ncclProfilerEventDescr_v5_t d;
  descr(&d, ncclProfileKernelCh, parent);
  d.kernelCh.channelId = ch;
  d.kernelCh.pTimer = 1000 + ch;
  return start(ctx, &d);
}

static void *simple(void *ctx, uint64_t type, void *parent) {
  ncclProfilerEventDescr_v5_t d;
  descr(&d, type, parent);
  return start(ctx, &d);
}

static void stop(void *h) { CHECK(ncclProfiler_v5.stopEvent(h) == ncclSuccess); }

static void state(void *h, int st, uint64_t val) {
  ncclProfilerEventStateArgs_v5_t a;
  memset(&a, 0, sizeof a);
  a.proxyStep.transSize = val; /* same word as kernelCh.pTimer */
  CHECK(ncclProfiler_v5.recordEventState(h, (ncclProfilerEventState_v5_t)st, &a) == ncclSuccess);
}

static wd_event *slot(void *h) { return (wd_event *)((uintptr_t)h & ~(uintptr_t)WD_TAG_MASK); }
static int alive(void *h) { return h && wd_event_from_handle(h) != NULL; }
/* Word loads into a word array, then memcpy: wd_event_read_start stores uint64_t words into a
 * wd_record, which GCC treats as not initialising its byte fields (strict aliasing). */
static wd_record start_rec(void *h) {
  uint64_t w[WD_RECORD_WORDS];
  for (unsigned i = 0; i < WD_RECORD_WORDS; i++)
    w[i] = __atomic_load_n(&slot(h)->startw[i], __ATOMIC_RELAXED);
  wd_record r;
  memcpy(&r, w, sizeof r);
  return r;
}
static int64_t done_of(wd_context *c, const char *func) {
  return atomic_load(&c->seq_done[wd_str_id(func)]);
}
static int64_t enq_of(wd_context *c, const char *func) {
  return atomic_load(&c->seq_enq[wd_str_id(func)]);
}
static uint64_t ring_head(const wd_ring *r) { return atomic_load(&r->head); }

static uint32_t scan(wd_context *c, uint64_t now, const wd_config *cfg, wd_stall *out, uint32_t max) {
  pthread_mutex_lock(&wd_store.lock);
  uint32_t n = (wd_note_calls(c, now), wd_scan_context(c, now, cfg, out, max));
  pthread_mutex_unlock(&wd_store.lock);
  return n;
}

/* The watchdog's regular poll, now: it sees (and dates) the states set so far (track.h). */
static void seen(wd_context *c) {
  wd_stall st[4];
  scan(c, wd_now_ns(), &tcfg, st, 4);
}

static int superseded(wd_context *c, void *h) {
  wd_slot_view v;
  if (!wd_view_read(slot(h), wd_now_ns(), c, &tcfg, &v)) return -1;
  return v.superseded;
}

static int status_of(wd_context *c, void *h, uint64_t now) {
  wd_slot_view v;
  if (!wd_view_read(slot(h), now, c, &tcfg, &v)) return -1;
  return v.snap.status;
}

/* Pretend everything under these handles last progressed (and was reached) `ago` before now. */
static void age(uint64_t ago, void **hs, int n) {
  uint64_t now = wd_now_ns();
  for (int i = 0; i < n; i++) {
    atomic_store(&slot(hs[i])->last_ns, now - ago);
    if (atomic_load(&slot(hs[i])->reached_ns)) atomic_store(&slot(hs[i])->reached_ns, now - ago);
  }
}

/* ---------------------------------------------------------------- completion */

static void test_coll_completion_with_kernels(void) {
  wd_context *c = new_ctx("completion", 1);
  const char *f = "AllReduce";
  CU_ASSERT_EQUAL(enq_of(c, f), -1);
  void *h = coll(c, NULL, f, 0, 2);
  CU_ASSERT_PTR_NOT_NULL_FATAL(h);
  wd_event *ev = slot(h);
  CU_ASSERT_EQUAL(enq_of(c, f), 0);
  CU_ASSERT_EQUAL(done_of(c, f), -1);
  CU_ASSERT_EQUAL(atomic_load(&ev->kind), WD_KIND_ROOT);
  CU_ASSERT_EQUAL(wd_event_refs(ev), 2); /* itself + kernel-channel hold */
  CU_ASSERT_EQUAL(atomic_load(&ev->hold), 1);
  CU_ASSERT_EQUAL(atomic_load(&ev->kch_expected), 2);
  CU_ASSERT_EQUAL(status_of(c, h, wd_now_ns()), WD_OP_POSTING);
  wd_record r = start_rec(h);
  CU_ASSERT_EQUAL(r.type, WD_T_COLL);
  CU_ASSERT_EQUAL(r.a, 0);
  CU_ASSERT_STRING_EQUAL(wd_str(r.func), "AllReduce");
  CU_ASSERT_STRING_EQUAL(wd_str(r.algo), "Ring");
  CU_ASSERT_STRING_EQUAL(wd_str(r.proto), "Simple");
  CU_ASSERT_EQUAL(r.nChannels, 2);
  CU_ASSERT_EQUAL(r.count, 1024);
  CU_ASSERT_EQUAL(r.parent, WD_SLOT_NONE);

  stop(h); /* enqueued, not done */
  CU_ASSERT_EQUAL(done_of(c, f), -1);
  CU_ASSERT_TRUE(alive(h));
  CU_ASSERT_EQUAL(wd_event_open(ev), 0);
  CU_ASSERT_EQUAL(status_of(c, h, wd_now_ns()), WD_OP_ENQUEUED);

  void *k0 = kch(c, h, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(k0);
  CU_ASSERT_EQUAL(status_of(c, h, wd_now_ns()), WD_OP_REACHED);
  wd_record kr = start_rec(k0);
  CU_ASSERT_EQUAL(kr.parent, ev->slot_id);
  CU_ASSERT_EQUAL(kr.channel, 0);
  CU_ASSERT_EQUAL(kr.a, 1000);
  void *op = proxyop(c, h, getpid(), 0, 1, 2, 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(op);
  CU_ASSERT_EQUAL(wd_event_children_live(ev), 2);
  state(k0, ncclProfilerKernelChStop, 5000);
  CU_ASSERT_EQUAL(atomic_load(&slot(k0)->last_trans), 5000);
  stop(k0);
  CU_ASSERT_EQUAL(done_of(c, f), -1);
  CU_ASSERT_EQUAL(atomic_load(&ev->hold), 1);
  void *k1 = kch(c, h, 1);
  stop(k1);
  /* Every kernel channel stopped while proxy work is open: NCCL may have paired a KernelCh
   * with the wrong op, so the hold stays until the watchdog finds nothing the kernel still
   * needs (no open step waiting on the GPU). */
  CU_ASSERT_EQUAL(atomic_load(&ev->kch_done), 2);
  CU_ASSERT_EQUAL(atomic_load(&ev->hold), 1);
  CU_ASSERT_EQUAL(status_of(c, h, wd_now_ns()), WD_OP_REACHED);
  wd_stall none[2];
  CU_ASSERT_EQUAL(scan(c, wd_now_ns(), &tcfg, none, 2), 0);
  CU_ASSERT_EQUAL(atomic_load(&ev->hold), 0);
  CU_ASSERT_EQUAL(done_of(c, f), -1);
  CU_ASSERT_TRUE(alive(h));
  CU_ASSERT_EQUAL(status_of(c, h, wd_now_ns()), WD_OP_GPU_DONE);

  void *s = step(c, op, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CU_ASSERT_EQUAL(atomic_load(&slot(s)->root), ev);
  state(s, ncclProfilerProxyStepSendWait, 65536);
  stop(s);
  CU_ASSERT_EQUAL(atomic_load(&slot(op)->steps_done), 1);
  CU_ASSERT_TRUE(alive(h));
  stop(op);
  CU_ASSERT_EQUAL(done_of(c, f), 0);
  CU_ASSERT_FALSE(alive(h));
  CU_ASSERT_EQUAL(atomic_load(&ev->live), 0);
  CU_ASSERT_EQUAL(atomic_load(&c->dropped), 0);

  /* The flight recorder saw every step, operation records and proxy records apart; the proxy
   * thread's events under a live parent leave one span each at their stop, with their last state
   * and its value, their start time and their start's fields. */
  CU_ASSERT_EQUAL(ring_head(&c->ring), 2);
  wd_record recs[16];
  uint32_t torn;
  uint64_t lost;
  uint32_t n = wd_ring_snapshot(&c->proxy_ring, recs, 16, &torn, &lost);
  static const uint8_t want[][2] = {
      {WD_T_KERNELCH, WD_PH_SPAN}, {WD_T_KERNELCH, WD_PH_SPAN}, {WD_T_PROXYSTEP, WD_PH_SPAN},
      {WD_T_PROXYOP, WD_PH_SPAN}};
  CU_ASSERT_EQUAL_FATAL(n, 4);
  for (uint32_t i = 0; i < n; i++) {
    CU_ASSERT_EQUAL(recs[i].type, want[i][0]);
    CU_ASSERT_EQUAL(recs[i].phase, want[i][1]);
    CU_ASSERT_TRUE(recs[i].flags & WD_F_SPAN);
    CU_ASSERT_TRUE(recs[i].raw != 0 && recs[i].raw <= recs[i].ts_ns); /* its start time */
  }
  CU_ASSERT_EQUAL(recs[0].state, ncclProfilerKernelChStop);
  CU_ASSERT_EQUAL(recs[0].count, 5000);
  CU_ASSERT_EQUAL(recs[0].a, 1000); /* the GPU's start time stays */
  CU_ASSERT_EQUAL(recs[0].channel, 0);
  CU_ASSERT_EQUAL(recs[0].parent, ev->slot_id);
  CU_ASSERT_EQUAL(recs[1].state, 0xff); /* stopped without a state */
  CU_ASSERT_EQUAL(recs[1].count, 0);
  CU_ASSERT_EQUAL(recs[1].channel, 1);
  CU_ASSERT_EQUAL(recs[2].state, ncclProfilerProxyStepSendWait);
  CU_ASSERT_EQUAL(recs[2].count, 65536);
  CU_ASSERT_EQUAL(recs[2].n, 0); /* step 0 */
  CU_ASSERT_EQUAL(recs[2].peer, -1);
  CU_ASSERT_EQUAL(recs[3].flags & WD_F_ABANDONED, 0);
  CU_ASSERT_EQUAL(recs[3].flags & WD_F_SEND, WD_F_SEND);
  CU_ASSERT_EQUAL(recs[3].pid, getpid());
  CU_ASSERT_EQUAL(recs[3].parent, ev->slot_id);
  free_ctx(c);
}

/* Children may all finish before the Coll's own stop; P2p counts; no kernel channels. */
static void test_completion_variants(void) {
  wd_context *c = new_ctx("variants", 1);
  /* Children done first: the Coll's stop completes it. */
  void *h = coll(c, NULL, "AllGather", 4, 1);
  void *k = kch(c, h, 0);
  void *op = proxyop(c, h, getpid(), 0, 2, 1, 0);
  stop(k);
  stop(op);
  CU_ASSERT_TRUE(alive(h));
  CU_ASSERT_EQUAL(done_of(c, "AllGather"), -1);
  stop(h);
  CU_ASSERT_FALSE(alive(h));
  CU_ASSERT_EQUAL(done_of(c, "AllGather"), 4);

  /* P2p: counted, held for its channels. */
  void *p = p2p(c, "Send", 3, 1);
  CU_ASSERT_EQUAL(atomic_load(&c->p2p_enq), 1);
  wd_record pr = start_rec(p);
  CU_ASSERT_EQUAL(pr.peer, 3);
  CU_ASSERT_EQUAL(pr.type, WD_T_P2P);
  stop(p);
  CU_ASSERT_EQUAL(atomic_load(&c->p2p_done), 0);
  void *pk = kch(c, p, 0);
  stop(pk);
  CU_ASSERT_EQUAL(atomic_load(&c->p2p_done), 1);
  CU_ASSERT_FALSE(alive(p));

  /* nChannels 0 (CollNet) still gets kernel channels, and ProxyOps that may start after its
   * stop: held all the same, until its channels have all stopped and settled. */
  void *z = coll(c, NULL, "AllGather", 5, 0);
  CU_ASSERT_EQUAL(atomic_load(&slot(z)->hold), 1);
  stop(z);
  stop(kch(c, z, 0));
  stop(kch(c, z, 1));
  CU_ASSERT_TRUE(alive(z));
  wd_stall st[2];
  CU_ASSERT_EQUAL(scan(c, wd_now_ns() + 5 * SEC, &tcfg, st, 2), 0);
  CU_ASSERT_FALSE(alive(z));
  CU_ASSERT_EQUAL(done_of(c, "AllGather"), 5);

  /* Without KernelCh in the mask, a childless Coll completes at its stop but vouches for
   * nothing (completed_order unchanged). */
  uint64_t before = atomic_load(&c->completed_order);
  c->kch_on = 0;
  void *n = coll(c, NULL, "ReduceScatter", 0, 4);
  CU_ASSERT_EQUAL(wd_event_refs(slot(n)), 1);
  stop(n);
  CU_ASSERT_FALSE(alive(n));
  CU_ASSERT_EQUAL(done_of(c, "ReduceScatter"), 0);
  CU_ASSERT_EQUAL(atomic_load(&c->completed_order), before);
  /* A ProxyOp that comes after such a Coll completed is an orphan root of its own. */
  void *late = proxyop(c, n, getpid(), 1, 2, 3, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(late);
  wd_record lr = start_rec(late);
  CU_ASSERT_TRUE(lr.flags & WD_F_ORPHAN);
  CU_ASSERT_EQUAL(lr.parent, WD_SLOT_NONE);
  CU_ASSERT_EQUAL(atomic_load(&slot(late)->kind), WD_KIND_ROOT);
  stop(late);
  CU_ASSERT_FALSE(alive(late));

  /* v6 CeColl: no kernel-channel hold, completes at its stop. */
  c->kch_on = 1;
  ncclProfilerEventDescr_v6_t d6;
  memset(&d6, 0, sizeof d6);
  d6.type = ncclProfileCeColl;
  d6.ceColl.seqNumber = 9;
  d6.ceColl.func = "AllGather";
  d6.ceColl.count = 77;
  void *ce = NULL;
  CU_ASSERT_EQUAL(ncclProfiler_v6.startEvent(c, &ce, &d6), ncclSuccess);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ce);
  /* CE collectives number themselves apart (ceSeqNum): the kernel counters do not move. */
  CU_ASSERT_EQUAL(atomic_load(&c->ce_seq_enq[wd_str_id("AllGather")]), 9);
  CU_ASSERT_EQUAL(enq_of(c, "AllGather"), 5);
  CU_ASSERT_EQUAL(start_rec(ce).type, WD_T_CECOLL);
  CU_ASSERT_EQUAL(ncclProfiler_v6.stopEvent(ce), ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&c->ce_seq_done[wd_str_id("AllGather")]), 9);
  CU_ASSERT_EQUAL(done_of(c, "AllGather"), 5);
  free_ctx(c);
}

/* ProxyOps that start after their Coll stopped attach to it and keep it alive. */
static void test_late_proxyops_keep_coll(void) {
  wd_context *c = new_ctx("late-proxy", 1);
  void *h = coll(c, NULL, "AllReduce", 0, 2);
  stop(h);
  void *op1 = proxyop(c, h, getpid(), 0, 1, 4, 1);
  void *op2 = proxyop(c, h, getpid(), 0, 1, 4, 0);
  wd_record r1 = start_rec(op1);
  CU_ASSERT_EQUAL(r1.parent, slot(h)->slot_id);
  CU_ASSERT_EQUAL(r1.flags & WD_F_ORPHAN, 0);
  CU_ASSERT_EQUAL(atomic_load(&slot(op1)->kind), WD_KIND_CHILD);
  stop(kch(c, h, 0));
  stop(kch(c, h, 1));
  CU_ASSERT_TRUE(alive(h));
  stop(op1);
  CU_ASSERT_TRUE(alive(h));
  CU_ASSERT_EQUAL(done_of(c, "AllReduce"), -1);
  stop(op2);
  CU_ASSERT_FALSE(alive(h));
  CU_ASSERT_EQUAL(done_of(c, "AllReduce"), 0);
  free_ctx(c);
}

/* A parent's slot is never handed out while a child references it, however many events pass. */
static void test_parent_slot_not_reused(void) {
  wd_context *c = new_ctx("no-reuse", 1);
  void *h = coll(c, NULL, "AllReduce", 7, 1);
  stop(h);
  void *op = proxyop(c, h, getpid(), 3, 5, 2, 0); /* after the parent stopped */
  void *s = step(c, op, 0);
  stop(kch(c, h, 3)); /* the hold is released: only the ProxyOp keeps the Coll */
  stop(op);           /* only the open step keeps the ProxyOp */
  CU_ASSERT_TRUE(alive(h));
  CU_ASSERT_TRUE(alive(op));
  wd_record coll_rec = start_rec(h), op_rec = start_rec(op);
  uint32_t coll_tag = atomic_load(&slot(h)->tag), op_tag = atomic_load(&slot(op)->tag);
  uint32_t nslots = wd_pool_nslots(&c->pool) + wd_pool_nslots(&c->proxy_pool);
  int hit = 0;
  for (int i = 0; i < 6000; i++) {
    void *e = simple(c, (i & 1) ? ncclProfileProxyCtrl : ncclProfileCollApi, NULL);
    if (e == NULL) {
      hit = -1;
      break;
    }
    if (slot(e) == slot(h) || slot(e) == slot(op) || slot(e) == slot(s)) hit = 1;
    stop(e);
  }
  CU_ASSERT_EQUAL(hit, 0);
  CU_ASSERT_EQUAL(wd_pool_nslots(&c->pool) + wd_pool_nslots(&c->proxy_pool), nslots); /* churn alone never grows the pools */
  CU_ASSERT_EQUAL(atomic_load(&slot(h)->tag), coll_tag);
  CU_ASSERT_EQUAL(atomic_load(&slot(op)->tag), op_tag);
  CU_ASSERT_PTR_EQUAL(wd_event_from_handle(h), slot(h));
  wd_record now_rec = start_rec(h);
  CU_ASSERT_EQUAL(memcmp(&now_rec, &coll_rec, sizeof now_rec), 0);
  now_rec = start_rec(op);
  CU_ASSERT_EQUAL(memcmp(&now_rec, &op_rec, sizeof now_rec), 0);
  CU_ASSERT_EQUAL(coll_rec.type, WD_T_COLL);
  CU_ASSERT_EQUAL(coll_rec.a, 7);
  /* The step under the stopped ProxyOp still names both. */
  CU_ASSERT_EQUAL(start_rec(s).parent, slot(op)->slot_id);
  CU_ASSERT_PTR_EQUAL(atomic_load(&slot(s)->root), slot(h));
  CU_ASSERT_EQUAL(done_of(c, "AllReduce"), -1);
  stop(s);
  CU_ASSERT_FALSE(alive(op));
  CU_ASSERT_FALSE(alive(h));
  CU_ASSERT_EQUAL(done_of(c, "AllReduce"), 7);
  free_ctx(c);
}

/* ---------------------------------------------------------------- bad input */

static void test_stale_handles_ignored(void) {
  wd_context *c = new_ctx("stale", 0);
  void *h = coll(c, NULL, "Reduce", 0, 2);
  stop(h);
  CU_ASSERT_FALSE(alive(h));
  uint64_t ring = ring_head(&c->ring), pring = ring_head(&c->proxy_ring);
  int64_t done = done_of(c, "Reduce");
  uint64_t corder = atomic_load(&c->completed_order);
  uint64_t stale = atomic_load(&c->stale);
  stop(h);
  state(h, ncclProfilerProxyStepRecvWait, 1);
  CU_ASSERT_EQUAL(atomic_load(&c->stale), stale + 2); /* counted for the dump, nothing else */
  CU_ASSERT_EQUAL(ring_head(&c->ring), ring);
  CU_ASSERT_EQUAL(ring_head(&c->proxy_ring), pring);
  CU_ASSERT_EQUAL(done_of(c, "Reduce"), done);
  CU_ASSERT_EQUAL(atomic_load(&c->completed_order), corder);
  /* Let the slot be reused by another event, then use the old handle again. */
  void *e = NULL;
  for (int i = 0; i < 10000; i++) {
    e = simple(c, ncclProfileCollApi, NULL); /* operation-level: the Coll's own pool */
    if (e == NULL || slot(e) == slot(h)) break;
    stop(e);
    e = NULL;
  }
  CU_ASSERT_PTR_NOT_NULL_FATAL(e);
  CU_ASSERT_PTR_NOT_EQUAL(e, h);
  ring = ring_head(&c->ring);
  pring = ring_head(&c->proxy_ring);
  stop(h);
  state(h, ncclProfilerProxyCtrlSleep, 0);
  CU_ASSERT_NOT_EQUAL(wd_event_open(slot(e)), 0); /* the new event was not stopped */
  CU_ASSERT_EQUAL(atomic_load(&slot(e)->state), 0xff);
  CU_ASSERT_EQUAL(ring_head(&c->ring), ring);
  CU_ASSERT_EQUAL(ring_head(&c->proxy_ring), pring);
  /* A child naming the stale handle is an orphan, not a child of the new event. */
  void *orphan = step(c, h, 0);
  CU_ASSERT_PTR_NOT_NULL(orphan);
  if (orphan) {
    CU_ASSERT_TRUE(start_rec(orphan).flags & WD_F_ORPHAN);
    CU_ASSERT_PTR_NULL(slot(orphan)->parent);
    CU_ASSERT_EQUAL(atomic_load(&slot(e)->children_seen), 0);
    stop(orphan);
  }
  stop(e);
  CU_ASSERT_FALSE(alive(e));

  /* A second stop of an event still alive is ignored: it drops no second reference. */
  c->kch_on = 1;
  void *held = coll(c, NULL, "Reduce", 1, 1);
  stop(held);
  stop(held);
  CU_ASSERT_EQUAL(wd_event_refs(slot(held)), 1);
  CU_ASSERT_TRUE(alive(held));
  void *k = kch(c, held, 0);
  stop(k);
  stop(k);
  CU_ASSERT_FALSE(alive(held));
  CU_ASSERT_EQUAL(done_of(c, "Reduce"), 1);
  free_ctx(c);
}

/* A Coll with one send ProxyOp and its first step open, on a fresh context, in NCCL's order:
 * the Coll stops at enqueue (enqueue.cc, hostStreamPlanTask -> ncclProfilerStopTaskEvents) and
 * is held for its kernel channel; the proxy thread then starts the ProxyOp (proxy.cc ->
 * ncclProfilerStartProxyOpEvent) and its first send step (transport/net.cc, sendProxyProgress ->
 * ncclProfilerStartSendProxyStepEvent). */
typedef struct {
  wd_context *c;
  void *coll, *op, *step;
} op_chain;

static op_chain open_chain(const char *name) {
  op_chain k;
  k.c = new_ctx(name, 1);
  k.coll = coll(k.c, NULL, "AllReduce", 0, 1);
  stop(k.coll);
  k.op = proxyop(k.c, k.coll, getpid(), 0, 1, 4, 1);
  k.step = step(k.c, k.op, 0);
  return k;
}

static void close_chain(op_chain *k) {
  stop(k->op);
  free_ctx(k->c);
}

/* The tag is the whole handle check (event.h, wd_event_matches). A handle that names a free slot
 * with the tag its next incarnation will carry (forged, or 64 incarnations old) must still do no
 * harm: its stop closes nothing, a child cannot hold the slot, and a state it stores there is
 * gone when the slot is next handed out. */
static void test_free_slot_matching_tag(void) {
  op_chain k = open_chain("freetag");
  wd_context *c = k.c;
  void *op = k.op, *st = k.step;
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  stop(st);
  wd_event *fs = slot(st);
  void *forged = (void *)((uintptr_t)fs | (atomic_load(&fs->tag) & WD_TAG_MASK));
  CU_ASSERT_PTR_NOT_EQUAL(forged, st);
  CU_ASSERT_EQUAL(wd_event_refs(fs), 0);
  uint32_t nfree = wd_pool_nfree(&c->proxy_pool);
  uint64_t pring = ring_head(&c->proxy_ring);
  uint32_t op_seen = atomic_load(&slot(op)->children_seen);
  state(forged, ncclProfilerProxyStepRecvWait, 77);
  stop(forged);
  stop(forged);
  CU_ASSERT_EQUAL(wd_pool_nfree(&c->proxy_pool), nfree); /* not freed a second time */
  CU_ASSERT_EQUAL(ring_head(&c->proxy_ring), pring);   /* no span written */
  CU_ASSERT_EQUAL(wd_event_refs(fs), 0);
  /* A child naming it is an orphan: a free slot cannot be referenced. */
  void *orphan = step(c, forged, 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(orphan);
  CU_ASSERT_TRUE(start_rec(orphan).flags & WD_F_ORPHAN);
  CU_ASSERT_PTR_NULL(slot(orphan)->parent);
  /* The proxy thread takes back the slots it freed last (pool.h, the owner's stack): the orphan
   * may be the free slot itself, in its next incarnation, which the forged handle names. */
  int orphan_took_it = slot(orphan) == fs;
  if (orphan_took_it) {
    CU_ASSERT_PTR_EQUAL(orphan, forged);
  } else {
    CU_ASSERT_EQUAL(wd_event_refs(fs), 0);
  }
  CU_ASSERT_EQUAL(atomic_load(&slot(op)->children_seen), op_seen);
  stop(orphan);
  /* When the slot comes round again, the new step starts clean. */
  void *again = NULL;
  for (int i = 0; i < 100000 && again == NULL; i++) {
    void *s2 = step(c, op, 2 + i);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s2);
    if (slot(s2) == fs) again = s2;
    else stop(s2);
  }
  CU_ASSERT_PTR_NOT_NULL_FATAL(again);
  if (!orphan_took_it) {
    CU_ASSERT_PTR_EQUAL(again, forged); /* the tag it was forged with */
  }
  CU_ASSERT_EQUAL(atomic_load(&fs->state), 0xff);
  CU_ASSERT_EQUAL(atomic_load(&fs->last_trans), 0);
  CU_ASSERT_PTR_EQUAL(fs->parent, slot(op));
  stop(again);
  close_chain(&k);
}

/* A forked child: the plugin goes quiet there. Stop and state check only the handle, so the
 * handles the child inherited must fail that check (its rings may be the parent's shared ring
 * file), and the child's normal exit must leave the parent's ring files alone. The child reports
 * through its exit status: a bit per check that failed. */
static int in_forked_child;
#ifdef WD_SANITIZER_BUILD
/* LeakSanitizer's hook: no leak check at the forked child's exit, where the parent's threads'
 * memory (their dlerror buffers, say) is unreachable from any thread that exists. */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return in_forked_child; }
#endif

static void test_forked_child_quiet(void) {
  op_chain k = open_chain("forked");
  wd_context *c = k.c;
  void *op = k.op, *st = k.step;
  CU_ASSERT_PTR_NOT_NULL_FATAL(st);
  state(st, ncclProfilerProxyStepSendGPUWait, 5);
  CU_ASSERT_NOT_EQUAL_FATAL(c->file.path[0], '\0'); /* rings in a file: the default */
  char path[sizeof c->file.path];
  snprintf(path, sizeof path, "%s", c->file.path);
  fflush(NULL);
  pid_t pid = fork();
  CU_ASSERT_NOT_EQUAL_FATAL(pid, -1);
  if (pid == 0) {
    in_forked_child = 1;
    uint64_t pring = ring_head(&c->proxy_ring);
    int bad = 0;
    ncclProfilerEventStateArgs_v5_t a;
    memset(&a, 0, sizeof a);
    a.proxyStep.transSize = 9;
    ncclProfiler_v5.recordEventState(st, ncclProfilerProxyStepSendWait, &a);
    ncclProfiler_v5.stopEvent(st);
    ncclProfiler_v5.stopEvent(op);
    if (wd_event_open(slot(st)) == 0 || wd_event_open(slot(op)) == 0) bad |= 1;
    if (atomic_load(&slot(st)->state) != ncclProfilerProxyStepSendGPUWait ||
        atomic_load(&slot(st)->last_trans) != 5)
      bad |= 2;
    if (ring_head(&c->proxy_ring) != pring) bad |= 4;
    ncclProfilerEventDescr_v5_t d;
    descr(&d, ncclProfileProxyStep, op);
    void *h = (void *)1;
    ncclProfiler_v5.startEvent(c, &h, &d);
    if (h != NULL) bad |= 8;
    exit(bad); /* a normal exit: the plugin's destructor runs in the child */
  }
  int status = 0;
  CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
  CU_ASSERT_TRUE(WIFEXITED(status));
  CU_ASSERT_EQUAL(WEXITSTATUS(status), 0);
  CU_ASSERT_EQUAL(access(path, F_OK), 0); /* the parent's ring file is still there */
  CU_ASSERT_TRUE(alive(st));
  stop(st);
  CU_ASSERT_FALSE(alive(st));
  close_chain(&k);
}

static void test_null_and_unknown(void) {
  wd_context *c = new_ctx("nulls", 1);
  uint64_t ring = ring_head(&c->ring), pring = ring_head(&c->proxy_ring);
  uint64_t det = ring_head(&wd_store.detached_ring);
  ncclProfilerEventDescr_v5_t d;
  descr(&d, ncclProfileColl, NULL);
  void *h = (void *)0x5;
  CU_ASSERT_EQUAL(ncclProfiler_v5.startEvent(NULL, &h, &d), ncclSuccess);
  CU_ASSERT_PTR_NULL(h);
  CU_ASSERT_EQUAL(ncclProfiler_v5.startEvent(c, NULL, &d), ncclSuccess);
  h = (void *)0x5;
  CU_ASSERT_EQUAL(ncclProfiler_v5.startEvent(c, &h, NULL), ncclSuccess);
  CU_ASSERT_PTR_NULL(h);
  static const uint64_t bad5[] = {0, 3, 1ull << 20, ncclProfileCeColl, ncclProfileCeBatch,
                                  1ull << 63, ncclProfileColl | ncclProfileP2p};
  for (unsigned i = 0; i < sizeof bad5 / sizeof bad5[0]; i++) {
    d.type = bad5[i];
    h = (void *)0x5;
    CU_ASSERT_EQUAL(ncclProfiler_v5.startEvent(c, &h, &d), ncclSuccess);
    CU_ASSERT_PTR_NULL(h);
  }
  ncclProfilerEventDescr_v6_t d6;
  memset(&d6, 0, sizeof d6);
  static const uint64_t bad6[] = {0, 3, 1ull << 15, 1ull << 20};
  for (unsigned i = 0; i < sizeof bad6 / sizeof bad6[0]; i++) {
    d6.type = bad6[i];
    h = (void *)0x5;
    CU_ASSERT_EQUAL(ncclProfiler_v6.startEvent(c, &h, &d6), ncclSuccess);
    CU_ASSERT_PTR_NULL(h);
  }
  ncclProfilerEventDescr_v4_t d4;
  memset(&d4, 0, sizeof d4);
  static const uint8_t bad4[] = {0, 3, 0x81, 0xff};
  for (unsigned i = 0; i < sizeof bad4; i++) {
    d4.type = bad4[i];
    h = (void *)0x5;
    CU_ASSERT_EQUAL(ncclProfiler_v4.startEvent(c, &h, &d4), ncclSuccess);
    CU_ASSERT_PTR_NULL(h);
  }
  CU_ASSERT_EQUAL(ncclProfiler_v5.stopEvent(NULL), ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v5.recordEventState(NULL, ncclProfilerProxyStepRecvWait, NULL),
                  ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v4.stopEvent(NULL), ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v6.recordEventState(NULL, ncclProfilerKernelChStop, NULL), ncclSuccess);
  /* Nothing was recorded for any of that. */
  CU_ASSERT_EQUAL(ring_head(&c->ring), ring);
  CU_ASSERT_EQUAL(ring_head(&c->proxy_ring), pring);
  CU_ASSERT_EQUAL(ring_head(&wd_store.detached_ring), det);
  CU_ASSERT_EQUAL(atomic_load(&c->order_next), 0);

  /* NULL strings and NULL state arguments are fine. */
  void *n = coll(c, NULL, NULL, 2, 1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(n);
  wd_record r = start_rec(n);
  CU_ASSERT_EQUAL(r.func, 0);
  CU_ASSERT_EQUAL(enq_of(c, ""), 2);
  stop(n);
  void *s = step(c, proxyop(c, n, getpid(), 0, 1, 1, 1), 0);
  CU_ASSERT_EQUAL(ncclProfiler_v5.recordEventState(s, ncclProfilerProxyStepRecvWait, NULL),
                  ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&slot(s)->state), ncclProfilerProxyStepRecvWait);
  CU_ASSERT_EQUAL(atomic_load(&slot(s)->last_trans), 0);
  /* An out-of-range state is stored as 255, not truncated into a real state. */
  CU_ASSERT_EQUAL(ncclProfiler_v5.recordEventState(s, (ncclProfilerEventState_v5_t)1000, NULL),
                  ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&slot(s)->state), 255);
  free_ctx(c);
}

/* ---------------------------------------------------------------- PXN and foreign contexts */

static void test_pxn_pid(void) {
  wd_context *c = new_ctx("pxn", 1);
  uint64_t ring = ring_head(&c->ring), pring = ring_head(&c->proxy_ring);
  uint64_t det = ring_head(&wd_store.detached_ring);
  pid_t other = getpid() + 100000;
  void *raw_parent = (void *)(uintptr_t)0x7f00dead1040ull; /* a handle of the other process */
  void *op = proxyop(c, raw_parent, other, 6, 2, 8, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(op);
  wd_event *ev = slot(op);
  CU_ASSERT_TRUE(wd_pool_owns(&wd_store.detached, ev));
  CU_ASSERT_FALSE(wd_pool_owns(&c->pool, ev));
  CU_ASSERT_PTR_NULL(ev->ctx);
  CU_ASSERT_PTR_NULL(ev->parent);
  CU_ASSERT_TRUE(ev->slot_id & WD_SLOT_DETACHED_BIT);
  wd_record r = start_rec(op);
  CU_ASSERT_TRUE(r.flags & WD_F_DETACHED);
  CU_ASSERT_EQUAL(r.parent, WD_SLOT_FOREIGN);
  CU_ASSERT_EQUAL(r.raw, (uint64_t)(uintptr_t)raw_parent);
  CU_ASSERT_EQUAL(r.pid, other);
  CU_ASSERT_EQUAL(r.peer, 2);
  CU_ASSERT_EQUAL(r.channel, 6);
  CU_ASSERT_EQUAL(wd_blacklist_refcount(wd_store.detached_bl, (uintptr_t)raw_parent), 1);

  /* Its ProxySteps come with our context; the parent gives them away. */
  void *s = step(c, op, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  CU_ASSERT_TRUE(wd_pool_owns(&wd_store.detached, slot(s)));
  wd_record sr = start_rec(s);
  CU_ASSERT_TRUE(sr.flags & WD_F_DETACHED);
  CU_ASSERT_EQUAL(sr.parent, ev->slot_id);
  CU_ASSERT_EQUAL(sr.raw, 0);
  CU_ASSERT_PTR_EQUAL(slot(s)->parent, ev);
  /* And so does a NetPlugin event under such a step. */
  void *np = simple(c, ncclProfileNetPlugin, s);
  CU_ASSERT_PTR_NOT_NULL_FATAL(np);
  CU_ASSERT_TRUE(wd_pool_owns(&wd_store.detached, slot(np)));
  stop(np);
  state(s, ncclProfilerProxyStepRecvWait, 128);
  stop(s);
  CU_ASSERT_TRUE(alive(op));
  stop(op);
  CU_ASSERT_FALSE(alive(op));
  CU_ASSERT_FALSE(alive(s));
  CU_ASSERT_EQUAL(wd_blacklist_refcount(wd_store.detached_bl, (uintptr_t)raw_parent), 0);
  /* None of it touched the communicator: all in the detached ring. */
  CU_ASSERT_EQUAL(ring_head(&c->ring), ring);
  CU_ASSERT_EQUAL(ring_head(&c->proxy_ring), pring);
  CU_ASSERT_EQUAL(atomic_load(&c->order_next), 0);
  /* Start and stop of op, step and NetPlugin; the step's state stays in its slot. */
  CU_ASSERT_EQUAL(ring_head(&wd_store.detached_ring), det + 6);

  /* A ProxyOp with our pid under our Coll is ours. */
  void *h = coll(c, NULL, "AllReduce", 0, 1);
  void *mine = proxyop(c, h, getpid(), 0, 1, 1, 1);
  CU_ASSERT_TRUE(wd_pool_owns(&c->proxy_pool, slot(mine)));
  CU_ASSERT_EQUAL(start_rec(mine).flags & WD_F_DETACHED, 0);
  /* Our pid and our Coll's very handle, but another originating rank: a PXN op of a process in
   * another PID namespace whose addresses coincide (no ASLR) is still not ours. */
  ncclProfilerEventDescr_v5_t d;
  descr(&d, ncclProfileProxyOp, h);
  d.rank = 2;
  d.proxyOp.pid = getpid();
  d.proxyOp.peer = 3;
  d.proxyOp.nSteps = 2;
  d.proxyOp.isSend = 1;
  void *theirs = start(c, &d);
  CU_ASSERT_PTR_NOT_NULL_FATAL(theirs);
  CU_ASSERT_FALSE(wd_pool_owns(&c->proxy_pool, slot(theirs)));
  CU_ASSERT_TRUE(start_rec(theirs).flags & WD_F_DETACHED);
  CU_ASSERT_EQUAL(start_rec(theirs).parent, WD_SLOT_FOREIGN);
  stop(theirs);
  free_ctx(c);
}

/* A context pointer this process did not create is never dereferenced: here it points at a
 * page that faults on any access. */
static void test_foreign_context(void) {
  long pg = sysconf(_SC_PAGESIZE);
  char *page = mmap(NULL, (size_t)pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CU_ASSERT_FATAL(page != MAP_FAILED);
  void *fakes[] = {page, (void *)0x10};
  for (int i = 0; i < 2; i++) {
    void *fc = fakes[i];
    uint64_t det = ring_head(&wd_store.detached_ring);
    void *api = simple(fc, ncclProfileCollApi, NULL);
    void *h = coll(fc, page + 64, "AllReduce", 3, 2);
    void *op = proxyop(fc, h, getpid(), 0, 1, 2, 1);
    void *op2 = proxyop(fc, page + 128, getpid(), 1, 1, 2, 1);
    void *s = step(fc, op, 0);
    void *k = kch(fc, h, 0);
    void *ctrl = simple(fc, ncclProfileProxyCtrl, NULL);
    void *all[] = {api, h, op, op2, s, k, ctrl};
    int ok = 1;
    for (int j = 0; j < 7; j++)
      if (all[j] == NULL || !wd_pool_owns(&wd_store.detached, slot(all[j])) ||
          !(start_rec(all[j]).flags & WD_F_DETACHED))
        ok = 0;
    CU_ASSERT_TRUE(ok);
    if (!ok) continue;
    wd_record hr = start_rec(h);
    CU_ASSERT_EQUAL(hr.parent, WD_SLOT_FOREIGN);
    CU_ASSERT_EQUAL(hr.raw, (uint64_t)(uintptr_t)(page + 64));
    CU_ASSERT_EQUAL(start_rec(op).parent, slot(h)->slot_id);
    CU_ASSERT_EQUAL(start_rec(op2).parent, WD_SLOT_FOREIGN);
    CU_ASSERT_EQUAL(start_rec(s).parent, slot(op)->slot_id);
    /* Detached roots are never counted as operations of any communicator. */
    CU_ASSERT_EQUAL(atomic_load(&slot(h)->hold), 0);
    state(s, ncclProfilerProxyStepSendWait, 4);
    state(k, ncclProfilerKernelChStop, 9);
    state(ctrl, ncclProfilerProxyCtrlSleep, 0);
    stop(h);
    CU_ASSERT_TRUE(alive(h)); /* its children keep it */
    for (int j = 6; j >= 0; j--) stop(all[j]);
    for (int j = 0; j < 7; j++) CU_ASSERT_FALSE(alive(all[j]));
    /* Starts, the ProxyCtrl's state (the step's and channel's stay in their slots), stops. */
    CU_ASSERT_EQUAL(ring_head(&wd_store.detached_ring), det + 7 + 1 + 7);
  }
  /* v4 too. */
  ncclProfilerEventDescr_v4_t d4;
  memset(&d4, 0, sizeof d4);
  d4.type = ncclProfileColl;
  d4.parentObj = page;
  void *h4 = NULL;
  CU_ASSERT_EQUAL(ncclProfiler_v4.startEvent(page, &h4, &d4), ncclSuccess);
  CU_ASSERT_PTR_NOT_NULL(h4);
  CU_ASSERT_EQUAL(ncclProfiler_v4.stopEvent(h4), ncclSuccess);
  munmap(page, (size_t)pg);
}

/* ---------------------------------------------------------------- the watchdog's scan */

static void test_superseded_retired(void) {
  wd_context *c = new_ctx("superseded", 1);
  wd_stall st[4];
  /* A: its kernels never come (a graph captured and never replayed, or a lost stop). */
  void *a = coll(c, NULL, "AllReduce", 0, 2);
  stop(a);
  void *b = coll(c, NULL, "AllReduce", 1, 1);
  stop(b);
  stop(kch(c, b, 0));
  CU_ASSERT_EQUAL(done_of(c, "AllReduce"), 1);
  CU_ASSERT_FALSE(alive(b));
  CU_ASSERT_TRUE(alive(a));
  CU_ASSERT_EQUAL(superseded(c, a), 1);
  uint64_t t = atomic_load(&slot(a)->last_ns);
  /* Not settled yet (2 polls): kept. */
  CU_ASSERT_EQUAL(scan(c, t + 100 * MS, &tcfg, st, 4), 0);
  CU_ASSERT_TRUE(alive(a));
  /* Settled: retired, without a stall and without moving seq_done back. */
  CU_ASSERT_EQUAL(scan(c, t + 3600 * SEC, &tcfg, st, 4), 0);
  CU_ASSERT_FALSE(alive(a));
  CU_ASSERT_EQUAL(done_of(c, "AllReduce"), 1);
  free_ctx(c);

  /* A childless later completion vouches for nothing: A2 stays, and is not reached. */
  c = new_ctx("not-superseded", 1);
  void *a2 = coll(c, NULL, "Broadcast", 0, 1);
  stop(a2);
  c->kch_on = 0; /* a Coll that gets no children: done at its stop */
  void *b2 = coll(c, NULL, "Broadcast", 1, 1);
  c->kch_on = 1;
  stop(b2);
  CU_ASSERT_FALSE(alive(b2));
  CU_ASSERT_EQUAL(superseded(c, a2), 0);
  uint64_t far = atomic_load(&slot(a2)->last_ns) + 3600 * SEC;
  CU_ASSERT_EQUAL(scan(c, far, &tcfg, st, 4), 0);
  CU_ASSERT_TRUE(alive(a2));
  CU_ASSERT_EQUAL(status_of(c, a2, far), WD_OP_ENQUEUED);
  /* Only the optional unreached threshold times it out. */
  wd_config un = tcfg;
  un.unreached_timeout_ns = 60 * SEC;
  CU_ASSERT_EQUAL(scan(c, far, &un, st, 4), 1);
  CU_ASSERT_EQUAL(st[0].seq, 0);
  CU_ASSERT_EQUAL(st[0].func, wd_str_id("Broadcast"));
  CU_ASSERT_PTR_NOT_NULL(strstr(st[0].waiting_on, "not reached"));
  CU_ASSERT_TRUE(alive(a2));
  free_ctx(c);
}

static int find_stop(const wd_record *recs, uint32_t n, uint32_t slot_id) {
  for (uint32_t i = 0; i < n; i++)
    if (recs[i].slot == slot_id && (recs[i].phase == WD_PH_STOP || recs[i].phase == WD_PH_SPAN)) return (int)i;
  return -1;
}

/* A ProxyOp NCCL never stops (CollNet, p2p memcpy) under an operation a later one vouches for is
 * abandoned, leaf first, and the operation completes. */
static void test_abandon_under_superseded(void) {
  wd_context *c = new_ctx("abandon", 1);
  wd_stall st[4];
  void *a = coll(c, NULL, "AllReduce", 0, 1);
  stop(a);
  void *pa = proxyop(c, a, getpid(), 0, 1, 1, 1);
  void *sa = step(c, pa, 0);
  state(sa, ncclProfilerProxyStepSendWait, 4096); /* the kernel's part of it is done */
  stop(kch(c, a, 0));
  uint32_t pa_id = slot(pa)->slot_id, sa_id = slot(sa)->slot_id;
  /* b also waits on a ProxyOp NCCL never stops. */
  void *b = coll(c, NULL, "AllReduce", 1, 1);
  stop(b);
  void *pb = proxyop(c, b, getpid(), 0, 1, 4, 1);
  stop(kch(c, b, 0));
  CU_ASSERT_TRUE(alive(b));
  void *cc = coll(c, NULL, "AllReduce", 2, 1);
  stop(cc);
  void *pc = proxyop(c, cc, getpid(), 0, 1, 4, 1);
  stop(kch(c, cc, 0));
  stop(pc);
  CU_ASSERT_FALSE(alive(cc));
  /* cc completed: a and b are superseded; a and b still wait on their ProxyOps. */
  CU_ASSERT_TRUE(alive(a));
  uint64_t t = wd_now_ns();
  CU_ASSERT_EQUAL(scan(c, t + 10 * MS, &tcfg, st, 4), 0); /* not settled */
  CU_ASSERT_TRUE(alive(sa) && alive(pa) && alive(pb));
  /* Two passes at most: the step goes first, then its ProxyOp has no open child. */
  for (int pass = 0; pass < 2 && alive(a); pass++)
    CU_ASSERT_EQUAL(scan(c, t + 3600 * SEC, &tcfg, st, 4), 0);
  CU_ASSERT_FALSE(alive(sa));
  CU_ASSERT_FALSE(alive(pa));
  CU_ASSERT_FALSE(alive(a));
  CU_ASSERT_FALSE(alive(pb));
  CU_ASSERT_FALSE(alive(b));
  CU_ASSERT_EQUAL(done_of(c, "AllReduce"), 2);
  wd_record recs[64];
  uint32_t n = wd_ring_snapshot(&c->proxy_ring, recs, 64, NULL, NULL);
  int is = find_stop(recs, n, sa_id), ip = find_stop(recs, n, pa_id);
  CU_ASSERT_TRUE(is >= 0 && ip >= 0);
  if (is >= 0 && ip >= 0) {
    CU_ASSERT_TRUE(is < ip); /* leaf first */
    CU_ASSERT_TRUE(recs[is].flags & WD_F_ABANDONED);
    CU_ASSERT_TRUE(recs[ip].flags & WD_F_ABANDONED);
    CU_ASSERT_EQUAL(recs[ip].type, WD_T_PROXYOP);
  }
  /* NCCL's late stops find stale handles. */
  uint64_t pring = ring_head(&c->proxy_ring);
  stop(sa);
  stop(pa);
  CU_ASSERT_EQUAL(ring_head(&c->proxy_ring), pring);

  /* The newest operation's open ProxyOp with a step its kernel still needs is never
   * abandoned, whatever its kernel channels say (they may belong to another op). */
  void *d = coll(c, NULL, "AllReduce", 3, 1);
  stop(d);
  void *pd = proxyop(c, d, getpid(), 0, 1, 1, 0);
  void *sd = step(c, pd, 0);
  state(sd, ncclProfilerProxyStepRecvWait, 0);
  stop(kch(c, d, 0));
  seen(c);
  CU_ASSERT_EQUAL(scan(c, wd_now_ns() + 11 * SEC, &tcfg, st, 4), 1);
  CU_ASSERT_TRUE(alive(pd));
  CU_ASSERT_TRUE(alive(d));
  /* Its step went through: with nothing left for the kernel, the ProxyOp NCCL never stops
   * (CollNet, p2p memcpy) is let go once its kernel channels all stopped. */
  state(sd, ncclProfilerProxyStepRecvGPUWait, 4096);
  stop(sd);
  uint64_t t2 = wd_now_ns();
  CU_ASSERT_EQUAL(scan(c, t2, &tcfg, st, 4), 0); /* its hold goes */
  CU_ASSERT_TRUE(alive(pd));
  CU_ASSERT_EQUAL(scan(c, t2 + 5 * SEC, &tcfg, st, 4), 0); /* settled: abandoned */
  CU_ASSERT_FALSE(alive(pd));
  CU_ASSERT_FALSE(alive(d));
  CU_ASSERT_EQUAL(done_of(c, "AllReduce"), 3);
  free_ctx(c);
}

/* A ProxyStep's state reads no clock: the scan that first sees it dates it (the latest it can have
 * been: a watchdog held up meanwhile never takes that progress for none). */
static void test_state_dated_by_scan(void) {
  wd_context *c = new_ctx("dating", 1);
  wd_stall st[4];
  void *h = coll(c, NULL, "AllReduce", 0, 1);
  stop(h);
  void *op = proxyop(c, h, getpid(), 0, 1, 4, 0);
  void *k = kch(c, h, 0); /* the GPU got there */
  CU_ASSERT_PTR_NOT_NULL(k);
  void *s = step(c, op, 0);
  wd_event *ev = slot(s);
  uint64_t t0 = atomic_load(&ev->last_ns); /* its start */
  CU_ASSERT_TRUE(t0 > 0);
  CU_ASSERT_EQUAL(scan(c, t0 + 1 * SEC, &tcfg, st, 4), 0);
  CU_ASSERT_EQUAL(atomic_load(&ev->last_ns), t0); /* nothing moved */
  state(s, ncclProfilerProxyStepRecvWait, 0);
  CU_ASSERT_EQUAL(atomic_load(&ev->last_ns), t0); /* no clock on the hot path */
  CU_ASSERT_EQUAL(atomic_load(&ev->state), ncclProfilerProxyStepRecvWait);
  CU_ASSERT_EQUAL(scan(c, t0 + 2 * SEC, &tcfg, st, 4), 0);
  CU_ASSERT_EQUAL(atomic_load(&ev->last_ns), t0 + 2 * SEC); /* when the scan saw it */
  CU_ASSERT_EQUAL(atomic_load(&slot(h)->last_ns) >= t0 + 2 * SEC, 1); /* carried to the root */
  CU_ASSERT_EQUAL(scan(c, t0 + 3 * SEC, &tcfg, st, 4), 0);
  CU_ASSERT_EQUAL(atomic_load(&ev->last_ns), t0 + 2 * SEC); /* seen already: not progress */
  /* The value alone moving is progress too (a receive that got more bytes). */
  state(s, ncclProfilerProxyStepRecvWait, 4096);
  CU_ASSERT_EQUAL(scan(c, t0 + 4 * SEC, &tcfg, st, 4), 0);
  CU_ASSERT_EQUAL(atomic_load(&ev->last_ns), t0 + 4 * SEC);
  /* Then nothing: stalled once the timeout (10 s) has passed since that date, not before. */
  CU_ASSERT_EQUAL(scan(c, t0 + 13 * SEC, &tcfg, st, 4), 0);
  CU_ASSERT_EQUAL(scan(c, t0 + 14 * SEC + 1, &tcfg, st, 4), 1);
  CU_ASSERT_TRUE(st[0].since_progress_ns >= 10 * SEC && st[0].since_progress_ns < 11 * SEC);
  free_ctx(c);
}

static void test_stall_rule(void) {
  wd_context *c = new_ctx("stall", 1);
  wd_stall st[4];
  const char *f = "AllGather";
  void *h = coll(c, NULL, f, 5, 1);
  stop(h);
  void *op = proxyop(c, h, getpid(), 2, 3, 8, 0);
  void *s0 = step(c, op, 3);
  state(s0, ncclProfilerProxyStepRecvWait, 0);
  stop(s0);
  void *s = step(c, op, 4);
  state(s, ncclProfilerProxyStepRecvWait, 0);
  void *k = kch(c, h, 2);
  seen(c);
  uint64_t t0 = wd_now_ns();
  CU_ASSERT_EQUAL(scan(c, t0 + 5 * SEC, &tcfg, st, 4), 0);
  CU_ASSERT_EQUAL(status_of(c, h, t0 + 5 * SEC), WD_OP_REACHED);
  CU_ASSERT_EQUAL_FATAL(scan(c, t0 + 11 * SEC, &tcfg, st, 4), 1);
  CU_ASSERT_EQUAL(status_of(c, h, t0 + 11 * SEC), WD_OP_STALLED);
  CU_ASSERT_EQUAL(st[0].type, WD_T_COLL);
  CU_ASSERT_EQUAL(st[0].func, wd_str_id(f));
  CU_ASSERT_EQUAL(st[0].seq, 5);
  CU_ASSERT_EQUAL(st[0].slot, slot(h)->slot_id);
  CU_ASSERT_EQUAL(st[0].comm_id, c->comm_id);
  CU_ASSERT_STRING_EQUAL(st[0].comm_name, "stall");
  CU_ASSERT_EQUAL(st[0].rank, 1);
  CU_ASSERT_EQUAL(st[0].nranks, 4);
  CU_ASSERT_TRUE(st[0].since_progress_ns >= 11 * SEC && st[0].since_progress_ns < 12 * SEC);
  CU_ASSERT_PTR_NOT_NULL(strstr(st[0].waiting_on, "ProxyStep 4 of 8"));
  CU_ASSERT_PTR_NOT_NULL(strstr(st[0].waiting_on, "recv from peer 3"));
  CU_ASSERT_PTR_NOT_NULL(strstr(st[0].waiting_on, "channel 2"));
  CU_ASSERT_PTR_NOT_NULL(strstr(st[0].waiting_on, "RecvWait"));
  /* The operation stays alive and keeps being reported while it hangs. */
  CU_ASSERT_TRUE(alive(h));
  CU_ASSERT_EQUAL(scan(c, t0 + 20 * SEC, &tcfg, st, 4), 1);

  /* Progress resets the clock: a state change of the step. */
  void *tree[] = {h, op, s, k};
  age(20 * SEC, tree, 4);
  CU_ASSERT_EQUAL(scan(c, wd_now_ns(), &tcfg, st, 4), 1);
  state(s, ncclProfilerProxyStepRecvWait, 8192);
  CU_ASSERT_EQUAL(atomic_load(&slot(s)->last_trans), 8192);
  CU_ASSERT_EQUAL(scan(c, wd_now_ns(), &tcfg, st, 4), 0);
  /* ... the start of a new step ... */
  age(20 * SEC, tree, 4);
  CU_ASSERT_EQUAL(scan(c, wd_now_ns(), &tcfg, st, 4), 1);
  stop(s);
  void *s2 = step(c, op, 5);
  CU_ASSERT_EQUAL(scan(c, wd_now_ns(), &tcfg, st, 4), 0);
  /* ... and a kernel channel's state. */
  void *tree2[] = {h, op, s2, k};
  age(20 * SEC, tree2, 4);
  CU_ASSERT_EQUAL(scan(c, wd_now_ns(), &tcfg, st, 4), 1);
  state(k, ncclProfilerKernelChStop, 77);
  CU_ASSERT_EQUAL(scan(c, wd_now_ns(), &tcfg, st, 4), 0);

  /* Without an open step the ProxyOp itself is named, then the kernel channel. */
  stop(s2);
  age(20 * SEC, tree2, 4);
  CU_ASSERT_EQUAL_FATAL(scan(c, wd_now_ns(), &tcfg, st, 4), 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(st[0].waiting_on, "ProxyOp (recv from peer 3, channel 2)"));
  CU_ASSERT_PTR_NOT_NULL(strstr(st[0].waiting_on, "3 of 8 steps done"));
  stop(op);
  age(20 * SEC, tree2, 4);
  CU_ASSERT_EQUAL_FATAL(scan(c, wd_now_ns(), &tcfg, st, 4), 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(st[0].waiting_on, "KernelCh channel 2"));
  stop(k);
  CU_ASSERT_FALSE(alive(h));
  CU_ASSERT_EQUAL(done_of(c, f), 5);
  CU_ASSERT_EQUAL(scan(c, wd_now_ns() + 3600 * SEC, &tcfg, st, 4), 0);

  /* Still being enqueued (not stopped) is never a stall, even with children. */
  void *posting = coll(c, NULL, f, 6, 1);
  void *pk = kch(c, posting, 0);
  void *tree3[] = {posting, pk};
  age(60 * SEC, tree3, 2);
  CU_ASSERT_EQUAL(scan(c, wd_now_ns(), &tcfg, st, 4), 0);
  CU_ASSERT_EQUAL(status_of(c, posting, wd_now_ns()), WD_OP_POSTING);
  stop(posting);
  stop(pk);

  /* Enqueued but not reached: waiting for the GPU, not hung. */
  void *queued = coll(c, NULL, f, 7, 1);
  stop(queued);
  CU_ASSERT_EQUAL(scan(c, wd_now_ns() + 3600 * SEC, &tcfg, st, 4), 0);
  CU_ASSERT_EQUAL(status_of(c, queued, wd_now_ns() + 3600 * SEC), WD_OP_ENQUEUED);

  /* A P2p stall has no seq and names its peer. */
  void *p = p2p(c, "Recv", 2, 1);
  stop(p);
  void *pop = proxyop(c, p, getpid(), 1, 2, 2, 0);
  /* A ProxyOp starts when the proxy picks the op up, before the GPU gets there: not reached. */
  void *tree4[] = {p, pop};
  age(20 * SEC, tree4, 2);
  CU_ASSERT_EQUAL(scan(c, wd_now_ns(), &tcfg, st, 4), 0);
  CU_ASSERT_EQUAL(status_of(c, p, wd_now_ns()), WD_OP_ENQUEUED);
  void *pkc = kch(c, p, 1); /* the kernel started on its channel */
  void *tree5[] = {p, pop, pkc};
  age(20 * SEC, tree5, 3);
  CU_ASSERT_EQUAL_FATAL(scan(c, wd_now_ns(), &tcfg, st, 4), 1);
  CU_ASSERT_EQUAL(st[0].type, WD_T_P2P);
  CU_ASSERT_EQUAL(st[0].seq, -1);
  CU_ASSERT_EQUAL(st[0].peer, 2);
  CU_ASSERT_EQUAL(st[0].func, wd_str_id("Recv"));
  free_ctx(c);
}

/* The watchdog reads its clock before it takes the lock and scans, so an event may have
 * progressed after `now`: that must not count as settled (an unsigned wrap once abandoned a
 * ProxyOp that had just progressed and retired its operation at once). */
static void test_settle_when_now_is_behind(void) {
  wd_context *c = new_ctx("settle-race", 1);
  wd_stall st[4];
  void *a = coll(c, NULL, "AllReduce", 0, 1);
  stop(a);
  void *pa = proxyop(c, a, getpid(), 0, 1, 4, 1);
  stop(kch(c, a, 0));
  void *b = coll(c, NULL, "AllReduce", 1, 1);
  stop(b);
  stop(kch(c, b, 0));
  CU_ASSERT_FALSE(alive(b));
  /* The ProxyOp progresses just after the watchdog read its clock. */
  uint64_t now = wd_now_ns();
  atomic_store(&slot(pa)->last_ns, now + 1 * MS);
  atomic_store(&slot(a)->last_ns, now + 1 * MS);
  CU_ASSERT_EQUAL(scan(c, now, &tcfg, st, 4), 0);
  CU_ASSERT_TRUE(alive(pa));
  CU_ASSERT_TRUE(alive(a));
  free_ctx(c);
}

/* A pipeline-parallel step batches a send to the next stage and a receive from the previous
 * one; when the next stage never receives, the send hangs while the receive completes. The
 * completed receive must not vouch for the hung send. Here NCCL named no Group (v5 parentGroup
 * NULL): a P2p of an unknown group vouches for nothing. */
static void test_p2p_group_hang_not_superseded(void) {
  wd_context *c = new_ctx("p2p-group", 1);
  wd_stall st[4];
  void *send = p2p(c, "Send", 3, 1);
  void *recv = p2p(c, "Recv", 2, 1);
  stop(send);
  stop(recv);
  void *sop = proxyop(c, send, getpid(), 0, 3, 4, 1);
  void *sstep = step(c, sop, 0);
  state(sstep, ncclProfilerProxyStepSendWait, 0);
  void *sk = kch(c, send, 0);
  void *rop = proxyop(c, recv, getpid(), 1, 2, 1, 0);
  void *rstep = step(c, rop, 0);
  state(rstep, ncclProfilerProxyStepRecvWait, 0);
  stop(rstep);
  stop(rop);
  void *rk = kch(c, recv, 1);
  stop(rk);
  CU_ASSERT_FALSE(alive(recv));
  CU_ASSERT_EQUAL(atomic_load(&c->p2p_done), 1);
  seen(c);
  uint64_t t0 = wd_now_ns();
  uint32_t n = scan(c, t0 + 11 * SEC, &tcfg, st, 4);
  CU_ASSERT_EQUAL(n, 1);
  if (n == 1) {
    CU_ASSERT_EQUAL(st[0].type, WD_T_P2P);
    CU_ASSERT_EQUAL(st[0].peer, 3);
  }
  scan(c, t0 + 3600 * SEC, &tcfg, st, 4);
  scan(c, t0 + 3600 * SEC, &tcfg, st, 4);
  CU_ASSERT_TRUE(alive(send));
  CU_ASSERT_TRUE(alive(sstep));
  (void)sk;
  free_ctx(c);
}

static void *group5(void *ctx) { return simple(ctx, ncclProfileGroup, NULL); }

static void *p2p_in(void *ctx, void *group, const char *func, int peer) {
  ncclProfilerEventDescr_v5_t d;
  descr(&d, ncclProfileP2p, NULL);
  d.p2p.func = func;
  d.p2p.peer = peer;
  d.p2p.nChannels = 1;
  d.p2p.parentGroup = group;
  return start(ctx, &d);
}

/* Ops of one group share the Group's order and may complete in any order: the completed
 * receive of a batched send/recv pair (parentGroup set, as NCCL 2.28+ does) must not vouch for
 * the hung send of the same group (completed_order once became order + 1, which did). */
static void test_group_members_not_superseded(void) {
  wd_context *c = new_ctx("group-p2p", 1);
  wd_stall st[4];
  void *g = group5(c);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  void *send = p2p_in(c, g, "Send", 3);
  void *recv = p2p_in(c, g, "Recv", 2);
  stop(send);
  stop(recv);
  stop(g);
  CU_ASSERT_TRUE(atomic_load(&slot(send)->grouped));
  CU_ASSERT_EQUAL(atomic_load(&slot(send)->order), atomic_load(&slot(recv)->order));
  void *sop = proxyop(c, send, getpid(), 0, 1, 4, 1);
  void *sstep = step(c, sop, 0);
  state(sstep, ncclProfilerProxyStepSendWait, 0);
  void *sk = kch(c, send, 0);
  void *rop = proxyop(c, recv, getpid(), 1, 2, 1, 0);
  stop(rop);
  stop(kch(c, recv, 1));
  CU_ASSERT_FALSE(alive(recv));
  seen(c);
  uint64_t t0 = wd_now_ns();
  uint32_t n = scan(c, t0 + 11 * SEC, &tcfg, st, 4);
  CU_ASSERT_EQUAL(n, 1);
  if (n == 1) CU_ASSERT_EQUAL(st[0].peer, 3);
  scan(c, t0 + 3600 * SEC, &tcfg, st, 4);
  scan(c, t0 + 3600 * SEC, &tcfg, st, 4);
  CU_ASSERT_TRUE(alive(send));
  CU_ASSERT_TRUE(alive(sstep));
  (void)sk;
  free_ctx(c);
}

/* An op of an older group whose kernels never come is retired once a later group completed. */
static void test_older_group_superseded(void) {
  wd_context *c = new_ctx("group-order", 1);
  wd_stall st[4];
  void *g1 = group5(c);
  void *a = coll(c, NULL, "AllReduce", 0, 1);
  stop(a);
  stop(g1);
  void *g2 = group5(c);
  ncclProfilerEventDescr_v5_t d;
  descr(&d, ncclProfileColl, NULL);
  d.coll.func = "AllReduce";
  d.coll.seqNumber = 1;
  d.coll.nChannels = 1;
  d.coll.parentGroup = g2;
  void *b = start(c, &d);
  stop(b);
  stop(g2);
  CU_ASSERT_TRUE(atomic_load(&slot(b)->order) > atomic_load(&slot(a)->order));
  stop(kch(c, b, 0));
  CU_ASSERT_FALSE(alive(b));
  CU_ASSERT_EQUAL(scan(c, wd_now_ns() + 3600 * SEC, &tcfg, st, 4), 0);
  CU_ASSERT_FALSE(alive(a));
  CU_ASSERT_EQUAL(done_of(c, "AllReduce"), 1);
  free_ctx(c);
}

/* ---------------------------------------------------------------- API parents, v4 */

static void test_api_parent_graph_flag(void) {
  wd_context *c = new_ctx("api", 1);
  ncclProfilerEventDescr_v5_t d;
  descr(&d, ncclProfileCollApi, NULL);
  d.collApi.func = "AllReduce";
  d.collApi.count = 8;
  d.collApi.graphCaptured = true;
  void *api = start(c, &d);
  CU_ASSERT_PTR_NOT_NULL_FATAL(api);
  uint32_t api_id = slot(api)->slot_id;
  stop(api); /* API events stop before their Coll starts */
  /* A captured call's API slot is kept: every replay names it (its graphCaptured must read). */
  CU_ASSERT_TRUE(alive(api));
  CU_ASSERT_EQUAL(atomic_load(&c->pinned_api), 1);
  void *h = coll(c, api, "AllReduce", 0, 1);
  wd_record r = start_rec(h);
  CU_ASSERT_EQUAL(r.parent, api_id);
  CU_ASSERT_TRUE(r.flags & WD_F_GRAPH);
  stop(h);
  stop(kch(c, h, 0));
  d.collApi.graphCaptured = false;
  void *api2 = start(c, &d);
  stop(api2);
  CU_ASSERT_FALSE(alive(api2)); /* an eager call's is not */
  void *h2 = coll(c, api2, "AllReduce", 1, 1);
  CU_ASSERT_EQUAL(start_rec(h2).flags & WD_F_GRAPH, 0);
  CU_ASSERT_EQUAL(start_rec(h2).parent, slot(api2)->slot_id);
  stop(h2);
  stop(kch(c, h2, 0));
  CU_ASSERT_EQUAL(done_of(c, "AllReduce"), 1);
  free_ctx(c);
}

static void *start4(void *ctx, ncclProfilerEventDescr_v4_t *d) {
  void *h = (void *)0x5;
  CU_ASSERT_EQUAL(ncclProfiler_v4.startEvent(ctx, &h, d), ncclSuccess);
  return h;
}

static void test_v4(void) {
  void *cv = NULL;
  int mask = 0;
  CU_ASSERT_EQUAL(ncclProfiler_v4.init(&cv, &mask, "v4", 0x4444, 1, 2, 1, NULL), ncclSuccess);
  CU_ASSERT_PTR_NOT_NULL_FATAL(cv);
  wd_context *c = cv;
  CU_ASSERT_EQUAL(c->abi, 4);
  CU_ASSERT_EQUAL(c->comm_id, 0x4444);
  CU_ASSERT_EQUAL(c->kch_on, 1);
  ncclProfilerEventDescr_v4_t d;
  memset(&d, 0, sizeof d);
  d.type = (uint8_t)ncclProfileGroup;
  void *g = start4(c, &d);
  CU_ASSERT_PTR_NOT_NULL_FATAL(g);
  CU_ASSERT_EQUAL(start_rec(g).type, WD_T_GROUP);
  memset(&d, 0, sizeof d);
  d.type = (uint8_t)ncclProfileColl;
  d.parentObj = g;
  d.coll.seqNumber = 3;
  d.coll.func = "Reduce";
  d.coll.count = 100;
  d.coll.root = 1;
  d.coll.datatype = "ncclHalf";
  d.coll.nChannels = 1;
  d.coll.nWarps = 4;
  d.coll.algo = "Tree";
  d.coll.proto = "LL128";
  void *h = start4(c, &d);
  CU_ASSERT_PTR_NOT_NULL_FATAL(h);
  wd_record r = start_rec(h);
  CU_ASSERT_EQUAL(r.type, WD_T_COLL);
  CU_ASSERT_EQUAL(r.parent, slot(g)->slot_id);
  CU_ASSERT_EQUAL(r.a, 3);
  CU_ASSERT_EQUAL(r.count, 100);
  CU_ASSERT_EQUAL(r.peer, 1);
  CU_ASSERT_EQUAL(r.nChannels, 1);
  CU_ASSERT_EQUAL(r.nWarps, 4);
  CU_ASSERT_STRING_EQUAL(wd_str(r.func), "Reduce");
  CU_ASSERT_STRING_EQUAL(wd_str(r.dtype), "ncclHalf");
  CU_ASSERT_STRING_EQUAL(wd_str(r.algo), "Tree");
  CU_ASSERT_STRING_EQUAL(wd_str(r.proto), "LL128");
  CU_ASSERT_EQUAL(enq_of(c, "Reduce"), 3);
  CU_ASSERT_EQUAL(ncclProfiler_v4.stopEvent(h), ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v4.stopEvent(g), ncclSuccess);
  memset(&d, 0, sizeof d);
  d.type = (uint8_t)ncclProfileProxyOp;
  d.parentObj = h;
  d.rank = 1;
  d.proxyOp.pid = getpid();
  d.proxyOp.channelId = 1;
  d.proxyOp.peer = 0;
  d.proxyOp.nSteps = 2;
  d.proxyOp.isSend = 1;
  void *op = start4(c, &d);
  CU_ASSERT_PTR_NOT_NULL_FATAL(op);
  CU_ASSERT_EQUAL(start_rec(op).parent, slot(h)->slot_id);
  memset(&d, 0, sizeof d);
  d.type = (uint8_t)ncclProfileProxyStep;
  d.parentObj = op;
  d.proxyStep.step = 1;
  void *s = start4(c, &d);
  CU_ASSERT_EQUAL(start_rec(s).n, 1);
  ncclProfilerEventStateArgs_v4_t args = {.proxyStep = {.transSize = 333}};
  CU_ASSERT_EQUAL(ncclProfiler_v4.recordEventState(s, ncclProfilerProxyStepSendPeerWait_v4, &args),
                  ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&slot(s)->last_trans), 333);
  CU_ASSERT_EQUAL(atomic_load(&slot(s)->state), ncclProfilerProxyStepSendPeerWait_v4);
  memset(&d, 0, sizeof d);
  d.type = (uint8_t)ncclProfileKernelCh;
  d.parentObj = h;
  d.kernelCh.channelId = 1;
  void *k = start4(c, &d);
  CU_ASSERT_PTR_NOT_NULL_FATAL(k);
  CU_ASSERT_EQUAL(ncclProfiler_v4.stopEvent(k), ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v4.stopEvent(s), ncclSuccess);
  CU_ASSERT_EQUAL(done_of(c, "Reduce"), -1);
  CU_ASSERT_EQUAL(ncclProfiler_v4.stopEvent(op), ncclSuccess);
  CU_ASSERT_EQUAL(done_of(c, "Reduce"), 3);
  CU_ASSERT_FALSE(alive(h));
  /* v4 P2p. */
  memset(&d, 0, sizeof d);
  d.type = (uint8_t)ncclProfileP2p;
  d.p2p.func = "Send";
  d.p2p.peer = 0;
  d.p2p.nChannels = 1;
  d.p2p.count = 12;
  void *p = start4(c, &d);
  CU_ASSERT_EQUAL(start_rec(p).peer, 0);
  CU_ASSERT_EQUAL(start_rec(p).count, 12);
  CU_ASSERT_EQUAL(atomic_load(&c->p2p_enq), 1);
  CU_ASSERT_EQUAL(ncclProfiler_v4.stopEvent(p), ncclSuccess);
  memset(&d, 0, sizeof d);
  d.type = (uint8_t)ncclProfileKernelCh;
  d.parentObj = p;
  void *pk = start4(c, &d);
  CU_ASSERT_EQUAL(ncclProfiler_v4.stopEvent(pk), ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&c->p2p_done), 1);
  CU_ASSERT_EQUAL(ncclProfiler_v4.finalize(c), ncclSuccess);
}

/* ---------------------------------------------------------------- threads */

/* An application thread enqueues, a proxy thread runs children that start after their parent
 * stopped, and the watchdog scans at the same time (TSan checks the protocol). */
enum { NOPS = 3000 };
static void *_Atomic handoff[NOPS];

static void *proxy_thread(void *arg) {
  wd_context *c = arg;
  in_worker = 1;
  for (int i = 0; i < NOPS; i++) {
    void *h;
    while ((h = atomic_load(&handoff[i])) == NULL) sched_yield();
    void *op = proxyop(c, h, getpid(), 0, 1, 2, i & 1);
    void *k = kch(c, h, 0);
    for (int s = 0; s < 2; s++) {
      void *st = step(c, op, s);
      state(st, ncclProfilerProxyStepRecvWait, 64);
      stop(st);
    }
    state(k, ncclProfilerKernelChStop, 1);
    stop(k);
    stop(op);
  }
  return NULL;
}

static _Atomic int scanning;

static void *scan_thread(void *arg) {
  wd_context *c = arg;
  wd_stall st[4];
  int n = 0;
  while (atomic_load(&scanning)) n += (int)scan(c, wd_now_ns(), &tcfg, st, 4);
  return (void *)(intptr_t)n;
}

static void test_threads(void) {
  wd_context *c = new_ctx("threads", 1);
  for (int i = 0; i < NOPS; i++) atomic_store(&handoff[i], NULL);
  /* Grow ahead of need, as the watchdog does each poll: a thread that finds the pool empty
   * while another one grows it drops its event rather than wait. */
  for (int i = 0; i < 8; i++) {
    wd_pool_reserve(&c->pool, 2 * NOPS + 1024);
    wd_pool_reserve(&c->proxy_pool, 2 * NOPS + 1024);
  }
  CU_ASSERT_TRUE(wd_pool_nslots(&c->proxy_pool) >= 2 * NOPS);
  pthread_t pt, wt;
  atomic_store(&scanning, 1);
  CU_ASSERT_EQUAL_FATAL(pthread_create(&pt, NULL, proxy_thread, c), 0);
  CU_ASSERT_EQUAL_FATAL(pthread_create(&wt, NULL, scan_thread, c), 0);
  for (int i = 0; i < NOPS; i++) {
    void *h = coll(c, NULL, "AllReduce", (uint64_t)i, 1);
    stop(h);
    atomic_store(&handoff[i], h);
  }
  pthread_join(pt, NULL);
  atomic_store(&scanning, 0);
  CU_ASSERT_EQUAL(atomic_load(&worker_errors), 0);
  void *stalls;
  pthread_join(wt, &stalls);
  CU_ASSERT_EQUAL((intptr_t)stalls, 0);
  CU_ASSERT_EQUAL(done_of(c, "AllReduce"), NOPS - 1);
  CU_ASSERT_EQUAL(atomic_load(&c->dropped), 0);
  uint32_t live = 0;
  for (int p = 0; p < WD_CTX_NPOOLS; p++)
    for (uint32_t i = 0; i < wd_pool_nslots(wd_ctx_pool(c, p)); i++)
      live += atomic_load(&wd_pool_slot(wd_ctx_pool(c, p), i)->live);
  CU_ASSERT_EQUAL(live, 0);
  free_ctx(c);
}

/* ---------------------------------------------------------------- main */

/* A replay's GPU key names its captured launch's slot and its replay, and never collides with a
 * CUDA-event token; without a usable driver the watch stays off and follows nothing. */
static void test_graph_keys(void) {
  uint64_t k = wd_graph_key(1023, 501);
  CU_ASSERT_TRUE(wd_is_graph_key(k));
  CU_ASSERT_EQUAL(wd_graph_key_slot(k), 1023);
  CU_ASSERT_EQUAL(wd_graph_key_replay(k), 501);
  CU_ASSERT_FALSE(wd_is_graph_key(12345));
  CU_ASSERT_EQUAL(wd_graph_key_replay(wd_graph_key(7, 0)), 0);
  wd_graphs g;
  CU_ASSERT_EQUAL(wd_graphs_alloc(&g, 16), 0);
  CU_ASSERT_EQUAL(wd_graphs_open(&g), 0); /* no CUDA driver in the unit tests */
  CU_ASSERT_EQUAL(wd_graph_capture_begin(&g, (void *)0x10, 0x20), 0);
  CU_ASSERT_EQUAL(wd_graph_lookup(&g, 0x20), -1);
  wd_graph_truth t;
  wd_graph_truth_of(&g, 0, 1, &t);
  CU_ASSERT_FALSE(t.known);
  wd_graphs_poll(&g, 1);
  wd_graphs_free(&g);
  CU_ASSERT_PTR_NULL(g.slot);
  CU_ASSERT_EQUAL(wd_graph_counter(WD_REPLAY_COUNTERS), 0);
}

int main(void) {
  if (wd_test_mkdtemp(tmpdir, sizeof tmpdir, "track") != 0) return 2;
  wd_test_quiet_env(tmpdir);
  unsetenv("NCCL_WATCHDOG_UNREACHED_TIMEOUT");
  int mask = 0;
  if (ncclProfiler_v5.init(&anchor, 1, &mask, "anchor", 1, 1, 0, NULL) != ncclSuccess || !anchor)
    return 2;
  tcfg = *wd_store.cfg;
  tcfg.timeout_ns = 10 * SEC;
  tcfg.poll_ns = 1 * SEC;
  tcfg.unreached_timeout_ns = 0;
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("track", NULL, NULL);
  CU_add_test(s, "Coll completes after its stop, kernels and proxy ops",
              test_coll_completion_with_kernels);
  CU_add_test(s, "completion variants", test_completion_variants);
  CU_add_test(s, "late ProxyOps keep the Coll", test_late_proxyops_keep_coll);
  CU_add_test(s, "parent slot not reused", test_parent_slot_not_reused);
  CU_add_test(s, "stale handles ignored", test_stale_handles_ignored);
  CU_add_test(s, "a free slot named with its next tag", test_free_slot_matching_tag);
  CU_add_test(s, "a forked child follows no inherited handle", test_forked_child_quiet);
  CU_add_test(s, "NULL and unknown input", test_null_and_unknown);
  CU_add_test(s, "PXN: other pid", test_pxn_pid);
  CU_add_test(s, "foreign context never dereferenced", test_foreign_context);
  CU_add_test(s, "superseded operation retired", test_superseded_retired);
  CU_add_test(s, "abandon under superseded", test_abandon_under_superseded);
  CU_add_test(s, "a slot state is dated by the scan", test_state_dated_by_scan);
  CU_add_test(s, "stall rule", test_stall_rule);
  CU_add_test(s, "settle holds when now is behind last_ns", test_settle_when_now_is_behind);
  CU_add_test(s, "hung send not superseded by its recv (no group)",
              test_p2p_group_hang_not_superseded);
  CU_add_test(s, "ops of one group never supersede each other", test_group_members_not_superseded);
  CU_add_test(s, "an older group is superseded", test_older_group_superseded);
  CU_add_test(s, "API parent and graph flag", test_api_parent_graph_flag);
  CU_add_test(s, "graph keys, watch without a driver", test_graph_keys);
  CU_add_test(s, "v4 descriptors", test_v4);
  CU_add_test(s, "threads", test_threads);
  int rc = wd_test_run();
  ncclProfiler_v5.finalize(anchor);
  wd_test_rmtree(tmpdir);
  return rc;
}
