/*
 * The process-wide memory budget (NCCL_WATCHDOG_MEMORY_BUDGET=4 MiB): six communicators with the
 * default rings (1.25 MiB each) do not all fit. The first get whole rings, the later ones smaller
 * rings (never below 256 records), one WARN says so, traffic goes on, and a snapshot dump reports
 * the memory held against the budget.
 *
 * NCCL's order, as the test host plays it (nccl_host.h): the application thread's events from
 * ncclEnqueueCheck (enqueue.cc), the proxy's ProxyOps and steps from ncclProxyOpToArgs (proxy.cc)
 * and sendProxyProgress / recvProxyProgress (transport/net.cc).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "nccl_host.h"

#define NCOMMS 6

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_scenario_dir("budget", "30s", "50ms");
  setenv("NCCL_WATCHDOG_MEMORY_BUDGET", "4", 1);
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
  wdh_plugin p;
  WDH_CHECK(wdh_load(&p, path, 0) == 0, "load");
  wdh_log_clear();
  wdh_comm c[NCOMMS];
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  for (int i = 0; i < NCOMMS; i++) {
    WDH_CHECK(wdh_comm_init(&c[i], &p, 0xb0d9e7000ull + (uint64_t)i, "budget", 1, 2, 0) == 0 &&
                  c[i].ctx != NULL,
              "communicator %d not created", i);
    wdh_run_ops(&c[i], NULL, &cfg, 50);
  }
  WDH_CHECK(wdh_log_contains(NCCL_LOG_WARN, "NCCL_WATCHDOG_MEMORY_BUDGET reached") == 1,
            "expected one WARN about the budget");
  kill(getpid(), SIGUSR1);
  WDH_CHECK(wdh_wait_dumps(dir, "signal", 1, 5000) == 1, "no snapshot dump");
  char *paths[2];
  int n = wdh_list_dumps(dir, "signal", paths, 2);
  cJSON *j = n ? wdh_json_load(paths[0]) : NULL;
  WDH_CHECK(j != NULL, "cannot read the snapshot");
  if (j) {
    double budget = wdh_jnum(j, "memory.budgetBytes", -1), rings = wdh_jnum(j, "memory.ringBytes", -1);
    WDH_CHECK(budget == 4.0 * 1048576, "memory.budgetBytes %g", budget);
    WDH_CHECK(rings > 0 && rings <= budget, "memory.ringBytes %g against a budget of %g", rings, budget);
    WDH_CHECK(wdh_jnum(j, "memory.commsWithSmallerRings", 0) >= 1, "no communicator got smaller rings");
    int whole = 0, smaller = 0;
    cJSON *cm;
    cJSON_ArrayForEach(cm, (cJSON *)wdh_jpath(j, "comms")) {
      double cap = wdh_jnum(cm, "ring.capacity", 0) + wdh_jnum(cm, "proxyRing.capacity", 0);
      WDH_CHECK(cap >= 2 * 256, "a ring below 256 records (%g in all)", cap);
      if (cap == 2 * 8192) whole++;
      else smaller++;
    }
    WDH_CHECK(whole >= 1 && smaller >= 1 && whole + smaller == NCOMMS,
              "%d communicators with whole rings, %d with smaller ones", whole, smaller);
    WDH_CHECK(wdh_validate_dump(paths[0]) == 0, "the snapshot does not validate");
  }
  wdh_json_free(j);
  wdh_free_paths(paths, n < 2 ? n : 2);
  for (int i = NCOMMS - 1; i >= 0; i--) wdh_comm_finalize(&c[i]);
  wdh_unload(&p);
  unsetenv("NCCL_WATCHDOG_MEMORY_BUDGET");
  return wdh_scenario_end("budget", dir);
}
