/*
 * Scenario 12: pool reuse safety. A Coll is started and stopped, then its ProxyOps start (NCCL's
 * order) and stay open while thousands of other events churn through the same pool. The handles
 * of the pinned Coll and its open ProxyOps must never be handed out again, and a snapshot must
 * show the pinned tree intact: the Coll with its own seq and its two ProxyOps as children.
 */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  /* A long timeout: the pinned op is not what is tested here. */
  char *dir = wdh_scenario_dir("reuse", "60s", "50ms");
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) return 1;
  wdh_comm c;
  wdh_comm_init(&c, &p, 0x9e9e9e9eull, "reuse", 1, 2, 0);

  /* The pinned op: seq 0, hangs on channel 0, step 1 (channel 1 finishes). */
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.hang_channel = 0;
  cfg.hang_step = 1;
  wdh_op pinned;
  wdh_op_enqueue(&c, &cfg, &pinned);
  wdh_op_proxy(&pinned);
  WDH_CHECK(pinned.coll && pinned.hung_proxyop && pinned.hung_step, "pinned handles missing");

  /* Churn in the same pool while the pinned op is the newest one of the communicator (NCCL
   * completes a communicator's ops in order, and the plugin retires an op once a later one
   * completed, so the churn must not complete later ops): thousands of ProxySteps on another
   * ProxyOp of the pinned Coll, ProxyCtrl events, and the API events of captured ops. Every new
   * handle is compared with the pinned ones. */
  void *pinned_h[] = {pinned.coll, pinned.hung_proxyop, pinned.hung_step, pinned.hung_kernelch,
                      NULL};
  int clashes = 0;
  long starts = 0;
#define WDH_SEEN(h)                                                                              \
  do {                                                                                           \
    starts++;                                                                                    \
    for (int q = 0; pinned_h[q]; q++)                                                            \
      if ((h) && (h) == pinned_h[q]) clashes++;                                                  \
  } while (0)
  wdh_descr d;
  memset(&d, 0, sizeof(d));
  d.type = ncclProfileProxyOp;
  d.parent = pinned.coll;
  d.pid = getpid();
  d.channel = 1;
  d.peer = 1;
  d.is_send = 1;
  d.n_steps = 5000;
  void *busy = wdh_start(&p, c.ctx, &d);
  WDH_SEEN(busy);
  wdh_op_cfg_default(&cfg);
  cfg.graph_captured = 1;
  for (int i = 0; i < 5000; i++) {
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyStep;
    d.parent = busy;
    d.step = i;
    void *st = wdh_start(&p, c.ctx, &d);
    WDH_SEEN(st);
    wdh_state(&p, st, ncclProfilerProxyStepSendWait, 4096);
    wdh_stop(&p, st);
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyCtrl;
    void *ctl = wdh_start(&p, c.ctx, &d);
    WDH_SEEN(ctl);
    wdh_state(&p, ctl, ncclProfilerProxyCtrlAppend, 1);
    wdh_stop(&p, ctl);
    if (i % 10 == 0) {
      wdh_op cap;
      wdh_op_run(&c, &cfg, &cap); /* API events only */
      WDH_SEEN(cap.group_api);
      WDH_SEEN(cap.coll_api);
    }
  }
  wdh_stop(&p, busy);
#undef WDH_SEEN
  WDH_CHECK(clashes == 0, "%d of %ld new handles reused a pinned (still referenced) handle",
            clashes, starts);

  /* More children of the pinned Coll, long after it stopped. */
  memset(&d, 0, sizeof(d));
  d.type = ncclProfileProxyOp;
  d.parent = pinned.coll;
  d.pid = getpid();
  d.channel = 1;
  d.n_steps = 2;
  d.peer = 1;
  void *late = wdh_start(&p, c.ctx, &d);

  cJSON *j = wdh_signal_snapshot(dir);
  if (j) {
    cJSON *n, *coll = NULL;
    int colls = 0;
    cJSON_ArrayForEach(n, (cJSON *)wdh_jpath(j, "comms.0.inflight")) {
      const char *t = wdh_jstr(n, "type");
      if (t && !strcmp(t, "Coll")) {
        colls++;
        if (wdh_jnum(n, "seq", -1) == 0) coll = n;
      }
    }
    WDH_CHECK(colls == 1, "%d in-flight Colls, expected only the pinned one", colls);
    WDH_CHECK(wdh_jnum(j, "comms.0.seq.0.lastCompleted", -2) == -1,
              "lastCompleted %g: the pinned op must not be complete",
              wdh_jnum(j, "comms.0.seq.0.lastCompleted", -2));
    WDH_CHECK(coll != NULL, "pinned Coll (seq 0) not in flight");
    if (coll) {
      int pops = 0, steps = 0;
      double slot = wdh_jnum(coll, "slot", -1);
      cJSON *k;
      cJSON_ArrayForEach(k, cJSON_GetObjectItem(coll, "children")) {
        const char *t = wdh_jstr(k, "type");
        if (!t || strcmp(t, "ProxyOp")) continue;
        pops++;
        WDH_CHECK(wdh_jnum(k, "parentSlot", -2) == slot, "ProxyOp parentSlot %g, Coll slot %g",
                  wdh_jnum(k, "parentSlot", -2), slot);
        cJSON *s;
        cJSON_ArrayForEach(s, cJSON_GetObjectItem(k, "children")) {
          steps++;
          WDH_CHECK(wdh_jnum(s, "step", -1) >= 1, "pinned step %g", wdh_jnum(s, "step", -1));
        }
      }
      WDH_CHECK(pops == 2, "%d ProxyOps under the pinned Coll, expected 2 (hung + late)", pops);
      /* The hung step and the two NCCL posted after it (up to NCCL_STEPS open at once). */
      WDH_CHECK(steps == 3, "%d ProxySteps under the pinned Coll, expected 3", steps);
    }
    WDH_CHECK(wdh_jnum(j, "comms.0.staleHandles", -1) == 0, "staleHandles %g",
              wdh_jnum(j, "comms.0.staleHandles", -1));
    wdh_json_free(j);
  }
  wdh_stop(&p, late);
  wdh_op_resume(&pinned);
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  return wdh_scenario_end("scenario_reuse", dir);
}
