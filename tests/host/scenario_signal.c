/*
 * Scenario 7: SIGUSR1 during traffic. One signal gives one `signal` dump while the application
 * and proxy threads keep running; a burst of signals coalesces (at most one dump in progress and
 * one more); traffic is never disturbed and no callback fails.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"

static wdh_comm g_comm;
static atomic_int g_stop;
static atomic_long g_ops;

static void *app_thread(void *arg) {
  (void)arg;
  pthread_setname_np(pthread_self(), "wdh-app");
  wdh_proxy *px = wdh_proxy_create();
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  while (!atomic_load(&g_stop)) {
    wdh_run_ops(&g_comm, px, &cfg, 10);
    atomic_fetch_add(&g_ops, 10);
  }
  wdh_proxy_destroy(px);
  return NULL;
}

static long ops_now(void) { return atomic_load(&g_ops); }

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_tempdir("signal");
  setenv("NCCL_WATCHDOG_DUMP_DIR", dir, 1);
  setenv("NCCL_WATCHDOG_TIMEOUT", "5s", 1);
  setenv("NCCL_WATCHDOG_POLL", "50ms", 1);
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) return 1;
  wdh_comm_init(&g_comm, &p, 0x5151515151515151ull, "signal", 1, 2, 1);
  pthread_t t;
  pthread_create(&t, NULL, app_thread, NULL);
  wdh_sleep_ms(200);

  long before = ops_now();
  kill(getpid(), SIGUSR1);
  int n = wdh_wait_dumps(dir, "signal", 1, 5000);
  WDH_CHECK(n == 1, "%d signal dumps after one signal", n);
  wdh_sleep_ms(200);
  WDH_CHECK(wdh_list_dumps(dir, "signal", NULL, 0) == 1, "one signal gave %d dumps",
            wdh_list_dumps(dir, "signal", NULL, 0));
  long after = ops_now();
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
  before = ops_now();
  wdh_sleep_ms(200);
  WDH_CHECK(ops_now() > before, "traffic stopped after the burst");

  atomic_store(&g_stop, 1);
  pthread_join(t, NULL);
  WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 0, "stall dump in a healthy run");
  wdh_comm_finalize(&g_comm);
  wdh_unload(&p);
  WDH_CHECK(wdh_failures() == 0, "%ld callbacks failed", wdh_failures());
  printf("ops during the test: %ld\n", ops_now());
  int rc = wdh_check_summary("scenario_signal");
  if (rc) {
    wdh_log_print();
    fprintf(stderr, "dumps kept in %s\n", dir);
  } else {
    wdh_rmtree(dir);
  }
  free(dir);
  return rc;
}
