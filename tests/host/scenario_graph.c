/*
 * Scenario 5: CUDA graph patterns. API events fire once at capture (graphCaptured=1); every
 * replay fires Group/Coll (parentObj = the capture-time CollApi handle, long stopped) and its
 * ProxyOps/KernelCh from a third thread; replays are separated by idle gaps longer than the
 * timeout. A captured op that is never replayed, and one whose Coll was enqueued at capture but
 * never reached, are not hung. No stall dump may appear.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"

#define TIMEOUT_MS 300

static wdh_op g_captured[2];

static void *replayer(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "wdh-cudacb");
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 20; i++) {
      wdh_op out;
      WDH_CHECK(wdh_op_replay(&g_captured[i % 2], &out) == 0, "replay hung");
      wdh_sleep_ms(5);
    }
    wdh_sleep_ms(2 * TIMEOUT_MS); /* the graph is idle between launches */
  }
  return NULL;
}

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_scenario_dir("graph", "300ms", "50ms");
  setenv("NCCL_WATCHDOG_RING_SIZE", "16384", 1);
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) return 1;
  wdh_comm c;
  wdh_comm_init(&c, &p, 0x6767676767676767ull, "graph", 1, 4, 0);

  /* Some eager traffic first. */
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, NULL, &cfg, 10);

  /* Capture two ops (API events only), and one never-replayed op. */
  cfg.graph_captured = 1;
  wdh_op_run(&c, &cfg, &g_captured[0]);
  cfg.func = "ReduceScatter";
  wdh_op_run(&c, &cfg, &g_captured[1]);
  wdh_op never;
  cfg.func = "AllGather";
  wdh_op_run(&c, &cfg, &never);
  /* Captured with the plan's Group/Coll emitted at capture: enqueued, never reached. */
  wdh_op enq;
  cfg.func = "AllReduce";
  cfg.capture_emits_coll = 1;
  wdh_op_run(&c, &cfg, &enq);
  WDH_CHECK(g_captured[0].coll_api != NULL, "capture-time CollApi handle is NULL");
  /* A few polls: the watchdog allocates the rings' files whole once they carry traffic; until
   * then they keep only their newest records, and the capture-time ones are checked below. */
  wdh_sleep_ms(150);

  pthread_t t;
  pthread_create(&t, NULL, replayer, NULL);
  /* Eager traffic on the application thread meanwhile. */
  wdh_op_cfg eager;
  wdh_op_cfg_default(&eager);
  for (int i = 0; i < 30; i++) {
    wdh_run_ops(&c, NULL, &eager, 5);
    wdh_sleep_ms(40);
  }
  pthread_join(t, NULL);
  wdh_sleep_ms(2 * TIMEOUT_MS);
  int n = wdh_list_dumps(dir, NULL, NULL, 0);
  WDH_CHECK(n == 0, "%d dumps for graph replays", n);

  /* A snapshot: nothing reached is in flight; the enqueued-only op may be listed, not stalled. */
  cJSON *j = wdh_signal_snapshot(dir);
  if (j) {
    cJSON *node;
    cJSON_ArrayForEach(node, (cJSON *)wdh_jpath(j, "comms.0.inflight")) {
      const char *st = wdh_jstr(node, "status");
      WDH_CHECK(st && strcmp(st, "stalled") && strcmp(st, "reached"),
                "in-flight op with status %s (seq %g)", st ? st : "(none)",
                wdh_jnum(node, "seq", -1));
    }
    /* The capture-time CollApi record carries graphCaptured. */
    int captured = 0;
    cJSON *r;
    cJSON_ArrayForEach(r, (cJSON *)wdh_jpath(j, "comms.0.ring.records")) {
      const char *type = wdh_jstr(r, "type");
      if (type && !strcmp(type, "CollApi") && cJSON_IsTrue(cJSON_GetObjectItem(r, "graphCaptured")))
        captured++;
    }
    WDH_CHECK(captured >= 4, "%d CollApi records with graphCaptured", captured);
    wdh_json_free(j);
  }
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  return wdh_scenario_end("scenario_graph", dir);
}
