/* Contexts, the registry and the process lifecycle, through the exported tables. */
#include <CUnit/Basic.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "events/context.h"
#include "events/store.h"
#include "plugin/lifecycle.h"
#include "plugin/profiler_abi.h"
#include "events/track.h"
#include "wd_test_descr.h"
#include "wd_test_util.h"

extern ncclProfiler_v4_t ncclProfiler_v4;
extern ncclProfiler_v5_t ncclProfiler_v5;
extern ncclProfiler_v6_t ncclProfiler_v6;

static char tmpdir[512];
static int nlog;

static void fake_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...) {
  (void)level, (void)flags, (void)file, (void)line, (void)fmt;
  nlog++;
}

static void *init5(uint64_t id, const char *name, int nranks, int rank, int *mask,
                   ncclDebugLogger_t logfn) {
  void *ctx = (void *)0x1; /* must be overwritten */
  CU_ASSERT_EQUAL(ncclProfiler_v5.init(&ctx, id, mask, name, 1, nranks, rank, logfn), ncclSuccess);
  return ctx;
}

static int on_retired(const wd_context *ctx) {
  for (wd_context *c = wd_store.retired; c; c = c->next)
    if (c == ctx) return 1;
  return 0;
}

static int in_list(const wd_context *ctx) {
  int found = 0;
  pthread_mutex_lock(&wd_store.lock);
  for (wd_context *c = wd_store.contexts; c; c = c->next)
    if (c == ctx) found = 1;
  pthread_mutex_unlock(&wd_store.lock);
  return found;
}

static void test_three_contexts(void) {
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 0);
  int mask = 0;
  nlog = 0;
  wd_context *a = init5(0x1111, "commA", 4, 0, &mask, fake_logger);
  wd_context *b = init5(0x2222, "commB", 4, 1, &mask, fake_logger);
  wd_context *c = init5(0x3333, "commC", 8, 7, &mask, fake_logger);
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(b);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  CU_ASSERT_TRUE(nlog > 0); /* the INFO lines went through NCCL's logger */
  CU_ASSERT_TRUE(a != b && b != c && a != c);
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 1);
  CU_ASSERT_EQUAL(wd_store.nctx, 3);
  CU_ASSERT_EQUAL(wd_store.pid, getpid());
  CU_ASSERT_EQUAL(mask, wd_store.cfg->event_mask);
  CU_ASSERT_EQUAL(mask, WD_DEFAULT_EVENT_MASK);
  CU_ASSERT_EQUAL(a->magic, WD_CTX_MAGIC);
  CU_ASSERT_EQUAL(a->abi, 5);
  CU_ASSERT_EQUAL(a->comm_id, 0x1111);
  CU_ASSERT_STRING_EQUAL(a->name, "commA");
  CU_ASSERT_EQUAL(c->rank, 7);
  CU_ASSERT_EQUAL(c->nranks, 8);
  CU_ASSERT_EQUAL(c->nnodes, 1);
  CU_ASSERT_EQUAL(atomic_load(&a->seq_enq[0]), -1);
  CU_ASSERT_EQUAL(atomic_load(&a->seq_done[WD_NSTR - 1]), -1);
  CU_ASSERT_TRUE(wd_registry_has(a));
  CU_ASSERT_TRUE(wd_registry_has(b));
  CU_ASSERT_TRUE(wd_registry_has(c));
  CU_ASSERT_TRUE(in_list(a) && in_list(b) && in_list(c));
  int local;
  void *heap = malloc(64);
  CU_ASSERT_FALSE(wd_registry_has(NULL));
  CU_ASSERT_FALSE(wd_registry_has((void *)1));
  CU_ASSERT_FALSE(wd_registry_has(&local));
  CU_ASSERT_FALSE(wd_registry_has(heap));
  CU_ASSERT_FALSE(wd_registry_has((char *)a + 8));
  CU_ASSERT_FALSE(wd_registry_has((void *)0x7f0000001000ull));
  free(heap);

  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(b), ncclSuccess);
  CU_ASSERT_FALSE(wd_registry_has(b));
  CU_ASSERT_TRUE(wd_registry_has(a));
  CU_ASSERT_TRUE(wd_registry_has(c));
  CU_ASSERT_FALSE(in_list(b));
  CU_ASSERT_EQUAL(wd_store.nctx, 2);
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 1);
  /* A second finalize of the same context is recognised and ignored. */
  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(b), ncclSuccess);
  CU_ASSERT_EQUAL(wd_store.nctx, 2);

  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(a), ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 1);
  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(c), ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 0);
  CU_ASSERT_EQUAL(wd_store.nctx, 0);
  CU_ASSERT_PTR_NULL(wd_store.contexts);
  CU_ASSERT_FALSE(wd_registry_has(a));
  CU_ASSERT_FALSE(wd_registry_has(c));
}

/* The last finalize released everything; the next init starts again (NCCL reloads the plugin). */
static void test_reinit_all_versions(void) {
  for (int round = 0; round < 3; round++) {
    int mask = 0;
    void *c4 = (void *)0x1, *c5, *c6 = (void *)0x1;
    /* v4: (context, mask, name, commHash, nNodes, nranks, rank, logfn). */
    CU_ASSERT_EQUAL(ncclProfiler_v4.init(&c4, &mask, "v4comm", 0xabcdef, 2, 16, 9, fake_logger),
                    ncclSuccess);
    c5 = init5(0x55, "v5comm", 2, 1, NULL, fake_logger);
    CU_ASSERT_EQUAL(ncclProfiler_v6.init(&c6, 0x66, &mask, "v6comm", 3, 12, 11, NULL), ncclSuccess);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c5);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c6);
    CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 1);
    wd_context *x4 = c4, *x6 = c6;
    CU_ASSERT_EQUAL(x4->abi, 4);
    CU_ASSERT_EQUAL(x4->comm_id, 0xabcdef);
    CU_ASSERT_STRING_EQUAL(x4->name, "v4comm");
    CU_ASSERT_EQUAL(x4->nnodes, 2);
    CU_ASSERT_EQUAL(x4->nranks, 16);
    CU_ASSERT_EQUAL(x4->rank, 9);
    CU_ASSERT_EQUAL(x6->abi, 6);
    CU_ASSERT_EQUAL(x6->comm_id, 0x66);
    CU_ASSERT_EQUAL(x6->nnodes, 3);
    CU_ASSERT_EQUAL(x6->rank, 11);
    CU_ASSERT_EQUAL(wd_store.abi_max, 6);
    CU_ASSERT_EQUAL(mask, WD_DEFAULT_EVENT_MASK);
    CU_ASSERT_TRUE(wd_registry_has(c4) && wd_registry_has(c5) && wd_registry_has(c6));
    /* The three tables share one implementation: any finalize ends any context. */
    CU_ASSERT_EQUAL(ncclProfiler_v6.finalize(c4), ncclSuccess);
    CU_ASSERT_EQUAL(ncclProfiler_v4.finalize(c5), ncclSuccess);
    CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(c6), ncclSuccess);
    CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 0);
    CU_ASSERT_EQUAL(wd_store.nctx, 0);
  }
}

static void test_null_arguments(void) {
  /* No logger, no mask, no name. */
  void *ctx = init5(0x77, NULL, 1, 0, NULL, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
  CU_ASSERT_STRING_EQUAL(((wd_context *)ctx)->name, "");
  /* No place to put the context: nothing to do, still success. */
  CU_ASSERT_EQUAL(ncclProfiler_v5.init(NULL, 1, NULL, "x", 1, 1, 0, NULL), ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v4.init(NULL, NULL, "x", 1, 1, 1, 0, NULL), ncclSuccess);
  CU_ASSERT_EQUAL(wd_store.nctx, 1);
  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(NULL), ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(ctx), ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 0);
}

static void test_disabled(void) {
  setenv("NCCL_WATCHDOG_ENABLE", "0", 1);
  int mask = 12345;
  void *ctx = init5(0x88, "off", 2, 0, &mask, fake_logger);
  CU_ASSERT_PTR_NULL(ctx);
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 0);
  CU_ASSERT_EQUAL(wd_store.nctx, 0);
  /* NCCL calls with the NULL context it got. */
  ncclProfilerEventDescr_v5_t d = {.type = ncclProfileColl};
  void *h = (void *)0x5;
  CU_ASSERT_EQUAL(ncclProfiler_v5.startEvent(NULL, &h, &d), ncclSuccess);
  CU_ASSERT_PTR_NULL(h);
  CU_ASSERT_EQUAL(ncclProfiler_v5.stopEvent(NULL), ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v5.recordEventState(NULL, ncclProfilerProxyStepRecvWait, NULL),
                  ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(NULL), ncclSuccess);
  /* Each init while disabled still says NULL. */
  void *again = init5(0x89, "off2", 2, 1, &mask, NULL);
  CU_ASSERT_PTR_NULL(again);
  unsetenv("NCCL_WATCHDOG_ENABLE");
  /* Settings are read at the first init of a lifecycle: enabled again. */
  ctx = init5(0x8a, "on", 2, 0, &mask, fake_logger);
  CU_ASSERT_PTR_NOT_NULL(ctx);
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 1);
  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(ctx), ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 0);
}

static void *start5(void *ctx, uint64_t type, void *parent) {
  ncclProfilerEventDescr_v5_t d;
  wd_test_descr5(&d, type, parent);
  void *h = NULL;
  CU_ASSERT_EQUAL(ncclProfiler_v5.startEvent(ctx, &h, &d), ncclSuccess);
  return h;
}

/* Abort paths: finalize with operations in flight frees everything (ASan checks for leaks);
 * callbacks that arrive after the last finalize are ignored without touching freed memory. */
static void test_finalize_in_flight(void) {
  void *ctx = init5(0x99, "inflight", 2, 0, NULL, fake_logger);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ctx);
  void *coll = start5(ctx, ncclProfileColl, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(coll);
  CU_ASSERT_EQUAL(ncclProfiler_v5.stopEvent(coll), ncclSuccess);
  void *op = start5(ctx, ncclProfileProxyOp, coll);
  void *step = start5(ctx, ncclProfileProxyStep, op);
  CU_ASSERT_PTR_NOT_NULL(op);
  CU_ASSERT_PTR_NOT_NULL(step);
  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(ctx), ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 0);
  CU_ASSERT_EQUAL(ncclProfiler_v5.recordEventState(step, ncclProfilerProxyStepRecvWait, NULL),
                  ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v5.stopEvent(step), ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v5.stopEvent(op), ncclSuccess);
  void *h = (void *)0x5;
  ncclProfilerEventDescr_v5_t d = {.type = ncclProfileProxyStep, .parentObj = op};
  CU_ASSERT_EQUAL(ncclProfiler_v5.startEvent(ctx, &h, &d), ncclSuccess);
  CU_ASSERT_PTR_NULL(h);
}

/* NCCL's proxy thread can still update or stop an event started under a finalized context
 * (ProxyCtrl events use the context of the communicator that created the proxy thread, which
 * can be finalized while a split communicator sharing that proxy lives on). Finalize therefore
 * keeps the context's memory and recycles it for the next init; late callbacks are ignored. */
static void test_callbacks_after_owner_finalized(void) {
  void *keep = init5(0xa1, "keeps-process-active", 2, 0, NULL, fake_logger);
  void *gone = init5(0xa2, "finalized-first", 2, 0, NULL, fake_logger);
  CU_ASSERT_PTR_NOT_NULL_FATAL(keep);
  CU_ASSERT_PTR_NOT_NULL_FATAL(gone);
  void *ctrl = start5(gone, ncclProfileProxyCtrl, NULL);
  void *coll = start5(gone, ncclProfileColl, NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(ctrl);
  CU_ASSERT_PTR_NOT_NULL_FATAL(coll);
  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(gone), ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 1);
  CU_ASSERT_FALSE(wd_registry_has(gone));
  CU_ASSERT_PTR_NULL(wd_event_from_handle(ctrl)); /* retired */
  CU_ASSERT_EQUAL(ncclProfiler_v5.recordEventState(ctrl, ncclProfilerProxyCtrlSleep, NULL),
                  ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v5.stopEvent(ctrl), ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v5.stopEvent(coll), ncclSuccess);
  /* New events with the finalized context are detached, never dereferenced. */
  void *ctrl2 = start5(gone, ncclProfileProxyCtrl, NULL);
  wd_event *ev = wd_event_from_handle(ctrl2);
  CU_ASSERT_PTR_NOT_NULL(ev);
  if (ev) CU_ASSERT_TRUE(wd_pool_owns(&wd_store.detached, ev));
  CU_ASSERT_EQUAL(ncclProfiler_v5.stopEvent(ctrl2), ncclSuccess);

  /* Within the grace period a new init gets new memory; after it, the recycled context, fresh:
   * counters, rings, name. */
  wd_context *early = init5(0xa4, "too-early", 8, 6, NULL, fake_logger);
  CU_ASSERT_PTR_NOT_NULL_FATAL(early);
  CU_ASSERT_PTR_NOT_EQUAL(early, gone);
  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(early), ncclSuccess);
  uint64_t grace = wd_store.retire_grace_ns;
  wd_store.retire_grace_ns = 0;
  CU_ASSERT_TRUE(on_retired(gone));
  wd_context *oldest = NULL; /* contexts of earlier tests may be kept too (within their grace) */
  for (wd_context *c = wd_store.retired; c; c = c->next) oldest = c;
  wd_context *next = init5(0xa3, "recycled", 8, 5, NULL, fake_logger);
  wd_store.retire_grace_ns = grace;
  CU_ASSERT_PTR_NOT_NULL_FATAL(next);
  CU_ASSERT_PTR_EQUAL(next, oldest);
  CU_ASSERT_TRUE(wd_registry_has(next));
  CU_ASSERT_EQUAL(next->magic, WD_CTX_MAGIC);
  CU_ASSERT_STRING_EQUAL(next->name, "recycled");
  CU_ASSERT_EQUAL(next->comm_id, 0xa3);
  CU_ASSERT_EQUAL(next->rank, 5);
  CU_ASSERT_EQUAL(atomic_load(&next->seq_enq[0]), -1);
  CU_ASSERT_EQUAL(atomic_load(&next->order_next), 0);
  CU_ASSERT_EQUAL(atomic_load(&next->ring.head), 0);
  CU_ASSERT_EQUAL(atomic_load(&next->proxy_ring.head), 0);
  CU_ASSERT_EQUAL(atomic_load(&next->p2p_enq), 0);
  /* Old handles into it stay stale, whatever the new communicator does. */
  void *fresh = start5(next, ncclProfileProxyCtrl, NULL);
  CU_ASSERT_PTR_NOT_NULL(fresh);
  CU_ASSERT_EQUAL(atomic_load(&next->proxy_ring.head), 1);
  CU_ASSERT_EQUAL(ncclProfiler_v5.stopEvent(ctrl), ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v5.recordEventState(coll, ncclProfilerProxyStepRecvWait, NULL),
                  ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&next->proxy_ring.head), 1);
  CU_ASSERT_EQUAL(atomic_load(&next->ring.head), 0);
  CU_ASSERT_TRUE(wd_event_from_handle(fresh) != NULL);
  CU_ASSERT_EQUAL(ncclProfiler_v5.stopEvent(fresh), ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(next), ncclSuccess);
  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(keep), ncclSuccess);
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 0);
  /* Finalized within the grace period: kept (a late callback may still be inside), unlisted;
   * freed when the library is unloaded. */
  CU_ASSERT_TRUE(on_retired(next));
  CU_ASSERT_FALSE(wd_registry_has(next));
}

static void *fork_ctx;

static int child_checks(void *arg) {
  (void)arg;
  int bad = 0;
  if (atomic_load(&wd_store_active) != 0) bad |= 1;
  void *c = (void *)0x1;
  ncclProfiler_v5.init(&c, 0xb2, NULL, "child", 1, 2, 1, NULL);
  if (c != NULL) bad |= 2;
  ncclProfilerEventDescr_v5_t d = {.type = ncclProfileColl};
  void *h = (void *)0x5;
  ncclProfiler_v5.startEvent(fork_ctx, &h, &d);
  if (h != NULL) bad |= 4;
  ncclProfiler_v5.finalize(fork_ctx);
  return bad;
}

/* In a forked child the plugin goes quiet: no context, no events, no deadlock. */
static void test_fork_child_quiet(void) {
  fork_ctx = init5(0xb1, "parent", 2, 0, NULL, fake_logger);
  CU_ASSERT_PTR_NOT_NULL_FATAL(fork_ctx);
  int rc = wd_test_in_child(child_checks, NULL, 10);
  CU_ASSERT_TRUE(rc >= 0 && rc < 128); /* finished in time, not killed by a signal */
  CU_ASSERT_EQUAL(rc, 0);
  /* The parent is unaffected. */
  CU_ASSERT_TRUE(wd_registry_has(fork_ctx));
  CU_ASSERT_EQUAL(atomic_load(&wd_store_active), 1);
  CU_ASSERT_EQUAL(ncclProfiler_v5.finalize(fork_ctx), ncclSuccess);
}

int main(void) {
  if (wd_test_mkdtemp(tmpdir, sizeof tmpdir, "registry") != 0) return 2;
  wd_test_quiet_env(tmpdir);
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("registry", NULL, NULL);
  CU_add_test(s, "three contexts", test_three_contexts);
  CU_add_test(s, "reinit with v4, v5, v6", test_reinit_all_versions);
  CU_add_test(s, "NULL arguments", test_null_arguments);
  CU_add_test(s, "NCCL_WATCHDOG_ENABLE=0", test_disabled);
  CU_add_test(s, "finalize with events in flight", test_finalize_in_flight);
  CU_add_test(s, "callbacks after the owner was finalized; recycling",
              test_callbacks_after_owner_finalized);
  CU_add_test(s, "forked child is quiet", test_fork_child_quiet);
  int rc = wd_test_run();
  wd_test_rmtree(tmpdir);
  return rc;
}
