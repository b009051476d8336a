/*
 * The lifetime of what NCCL holds: handles that outlive their communicator and the plugin's
 * restart, and values handed back that were never ours. Each test runs in a child process that
 * starts the plugin itself (the parent never does, so the child is not a "forked child" the plugin
 * stays quiet in).
 */
#include <CUnit/Basic.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "events/context.h"
#include "events/store.h"
#include "events/track.h"
#include "plugin/profiler_abi.h"
#include "wd_test_descr.h"
#include "wd_test_util.h"

extern ncclProfiler_v5_t ncclProfiler_v5;

static char tmpdir[512];

static void fake_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...) {
  (void)level, (void)flags, (void)file, (void)line, (void)fmt;
}

static void *init5(uint64_t id, const char *name, int nranks, int rank, int *mask,
                   ncclDebugLogger_t logfn) {
  void *ctx = (void *)0x1; /* must be overwritten */
  WD_CHILD_CHECK(ncclProfiler_v5.init(&ctx, id, mask, name, 1, nranks, rank, logfn) == ncclSuccess);
  return ctx;
}

static void *start5(void *ctx, uint64_t type, void *parent) {
  ncclProfilerEventDescr_v5_t d;
  wd_test_descr5(&d, type, parent);
  void *h = NULL;
  WD_CHILD_CHECK(ncclProfiler_v5.startEvent(ctx, &h, &d) == ncclSuccess);
  return h;
}

/* Handles of a communicator finalized as the last one stay safe after the plugin starts again
 * for another communicator, even when the new one reuses the old one's memory (grace 0): every
 * callback with an old handle is ignored and touches nothing of the new communicator. Under ASan
 * this was a heap-use-after-free; in a normal build, a crash. Child process: it restarts the
 * plugin. */
static void restart_body(int grace_zero) {
  uint64_t grace = wd_store.retire_grace_ns;
  if (grace_zero) wd_store.retire_grace_ns = 0;
  wd_context *a = init5(0xb1, "restart-a", 2, 0, NULL, fake_logger);
  WD_CHILD_CHECK(a != NULL);
  if (!a) return;
  void *coll = start5(a, ncclProfileColl, NULL);
  void *op = start5(a, ncclProfileProxyOp, coll);
  void *step = start5(a, ncclProfileProxyStep, op);
  WD_CHILD_CHECK(coll && op && step);
  ncclProfiler_v5.finalize(a); /* the last one: the store closes */
  WD_CHILD_CHECK(atomic_load(&wd_store_active) == 0);
  wd_context *b = init5(0xb2, "restart-b", 2, 0, NULL, fake_logger);
  WD_CHILD_CHECK(b != NULL);
  if (!b) return;
  uint64_t ops = atomic_load(&b->ring.head), proxy = atomic_load(&b->proxy_ring.head);
  ncclProfilerEventStateArgs_t args = {.proxyStep = {.transSize = 4096}};
  for (int round = 0; round < 2; round++) {
    WD_CHILD_CHECK(ncclProfiler_v5.recordEventState(step, ncclProfilerProxyStepRecvWait, &args) == ncclSuccess);
    WD_CHILD_CHECK(ncclProfiler_v5.stopEvent(step) == ncclSuccess);
    WD_CHILD_CHECK(ncclProfiler_v5.recordEventState(op, ncclProfilerProxyOpInProgress_v4, NULL) == ncclSuccess);
    WD_CHILD_CHECK(ncclProfiler_v5.stopEvent(op) == ncclSuccess);
    WD_CHILD_CHECK(ncclProfiler_v5.stopEvent(coll) == ncclSuccess);
  }
  WD_CHILD_CHECK(wd_event_from_handle(step) == NULL && wd_event_from_handle(coll) == NULL);
  WD_CHILD_CHECK(atomic_load(&b->ring.head) == ops && atomic_load(&b->proxy_ring.head) == proxy);
  WD_CHILD_CHECK(grace_zero || atomic_load(&b->stale) == 0); /* reused memory: counted on its owner */
  /* B works as new. */
  void *c2 = start5(b, ncclProfileColl, NULL);
  WD_CHILD_CHECK(c2 != NULL && wd_event_from_handle(c2) != NULL);
  ncclProfiler_v5.stopEvent(c2);
  ncclProfiler_v5.finalize(b);
  /* And with nothing open at all. */
  WD_CHILD_CHECK(ncclProfiler_v5.stopEvent(step) == ncclSuccess);
  WD_CHILD_CHECK(ncclProfiler_v5.stopEvent(coll) == ncclSuccess);
  wd_store.retire_grace_ns = grace;
}

static void restart_grace(void) { restart_body(0); }
static void restart_reuse(void) { restart_body(1); }

static void test_handles_across_restart(void) {
  CU_ASSERT_EQUAL(wd_test_isolated(restart_grace, 60), 0);
  CU_ASSERT_EQUAL(wd_test_isolated(restart_reuse, 60), 0);
}

/* A parentObj or handle that is not one this process returned is never dereferenced: garbage,
 * unmapped memory, memory of the host, a PXN ProxyOp of another process with our pid (another
 * PID namespace). Proxy-level events with such a parent are recorded as detached, with the
 * parent value kept as foreign. Child process: a regression crashes it. */
static void wild_parents_body(void) {
  wd_context *ctx = init5(0xb3, "wild", 2, 0, NULL, fake_logger);
  WD_CHILD_CHECK(ctx != NULL);
  if (!ctx) return;
  static char host_buf[4096];
  memset(host_buf, 0xff, sizeof host_buf);
  int local = 0;
  void *wild[] = {(void *)0x1234, (void *)(uintptr_t)0xdeadbeef0000ull, &local, host_buf + 64,
                  (void *)~(uintptr_t)0};
  uint64_t types[] = {ncclProfileProxyOp, ncclProfileProxyStep, ncclProfileKernelCh,
                      ncclProfileNetPlugin, ncclProfileColl, ncclProfileCollApi, ncclProfileGroup};
  for (size_t w = 0; w < sizeof wild / sizeof wild[0]; w++) {
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
      void *h = start5(ctx, types[t], wild[w]);
      if (!h) continue;
      wd_event *ev = wd_event_from_handle(h);
      WD_CHILD_CHECK(ev != NULL);
      if (ev) {
        wd_record r;
        wd_event_read_start(ev, &r);
        WD_CHILD_CHECK(r.parent == WD_SLOT_FOREIGN);
        WD_CHILD_CHECK(r.raw == (uint64_t)(uintptr_t)wild[w]);
        int proxy_level = types[t] != ncclProfileColl && types[t] != ncclProfileCollApi &&
                          types[t] != ncclProfileGroup;
        WD_CHILD_CHECK(!proxy_level || (r.flags & WD_F_DETACHED));
      }
      ncclProfiler_v5.stopEvent(h);
    }
    /* As a handle. */
    WD_CHILD_CHECK(ncclProfiler_v5.stopEvent(wild[w]) == ncclSuccess);
    WD_CHILD_CHECK(ncclProfiler_v5.recordEventState(wild[w], ncclProfilerProxyStepRecvWait, NULL) == ncclSuccess);
  }
  WD_CHILD_CHECK(host_buf[64] == (char)0xff && local == 0); /* nothing written either */
  WD_CHILD_CHECK(atomic_load(&ctx->stale) == 0); /* not ours: not even counted */
  ncclProfiler_v5.finalize(ctx);
}

static void test_wild_parents(void) { CU_ASSERT_EQUAL(wd_test_isolated(wild_parents_body, 60), 0); }


int main(void) {
  if (wd_test_mkdtemp(tmpdir, sizeof tmpdir, "lifetime") != 0) return 2;
  wd_test_quiet_env(tmpdir);
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("lifetime", NULL, NULL);
  CU_add_test(s, "old handles after the plugin restarted", test_handles_across_restart);
  CU_add_test(s, "parents and handles that are not ours", test_wild_parents);
  int rc = wd_test_run();
  wd_test_rmtree(tmpdir);
  return rc;
}
