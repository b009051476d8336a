/*
 * Scenario 7: SIGUSR1 during traffic. One signal gives one `signal` dump while the application
 * and proxy threads keep running; a burst of signals coalesces (at most one dump in progress and
 * one more); traffic is never disturbed and no callback fails.
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
  char *dir = wdh_scenario_dir("signal", "5s", "50ms");
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) return 1;
  wdh_comm c;
  wdh_comm_init(&c, &p, 0x5151515151515151ull, "signal", 1, 2, 1);
  wdh_traffic *app = wdh_traffic_start(&c, 10, "wdh-app");
  wdh_sleep_ms(200);

  long before = wdh_traffic_ops(app);
  kill(getpid(), SIGUSR1);
  int n = wdh_wait_dumps(dir, "signal", 1, 5000);
  WDH_CHECK(n == 1, "%d signal dumps after one signal", n);
  wdh_sleep_ms(200);
  WDH_CHECK(wdh_list_dumps(dir, "signal", NULL, 0) == 1, "one signal gave %d dumps",
            wdh_list_dumps(dir, "signal", NULL, 0));
  long after = wdh_traffic_ops(app);
  WDH_CHECK(after > before, "traffic stopped across the dump (%ld -> %ld)", before, after);
  char *paths[8];
  if (wdh_list_dumps(dir, "signal", paths, 1) == 1) {
    WDH_CHECK(wdh_validate_dump(paths[0]) == 0, "%s does not validate", paths[0]);
    cJSON *j = wdh_json_load(paths[0]);
    WDH_CHECK(j != NULL, "cannot parse");
    const char *sig = wdh_jstr(j, "trigger.signal");
    WDH_CHECK(sig && !strcmp(sig, "SIGUSR1"), "trigger.signal %s", sig ? sig : "(none)");
    WDH_CHECK(wdh_jnum(j, "trigger.senderPid", -1) == getpid(), "senderPid %g",
              wdh_jnum(j, "trigger.senderPid", -1));
    WDH_CHECK(cJSON_GetArraySize(wdh_jpath(j, "comms.0.ring.records")) > 0, "empty ring");
    /* Traffic was live: a stall verdict would be wrong. */
    cJSON *node;
    cJSON_ArrayForEach(node, (cJSON *)wdh_jpath(j, "comms.0.inflight")) {
      const char *st = wdh_jstr(node, "status");
      WDH_CHECK(!st || strcmp(st, "stalled"), "op marked stalled in a live job");
    }
    wdh_json_free(j);
    free(paths[0]);
  }

  /* A burst coalesces: 1 or 2 more dumps, not 10. */
  for (int i = 0; i < 10; i++) kill(getpid(), SIGUSR1);
  wdh_wait_dumps(dir, "signal", 3, 3000);
  wdh_sleep_ms(500);
  n = wdh_list_dumps(dir, "signal", NULL, 0);
  WDH_CHECK(n >= 2 && n <= 3, "a burst of 10 signals gave %d more dumps (expected 1 or 2)", n - 1);
  before = wdh_traffic_ops(app);
  wdh_sleep_ms(200);
  WDH_CHECK(wdh_traffic_ops(app) > before, "traffic stopped after the burst");

  long ops = wdh_traffic_stop(app);
  WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 0, "stall dump in a healthy run");
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  printf("ops during the test: %ld\n", ops);
  return wdh_scenario_end("scenario_signal", dir);
}
