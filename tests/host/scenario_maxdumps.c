/*
 * NCCL_WATCHDOG_MAX_DUMPS caps snapshot (signal) dumps and automatic (stall, peer) dumps
 * separately: a process that was sent the snapshot signal more often than the cap still writes
 * the dump of a real hang.
 */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "nccl_host.h"

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_scenario_dir("maxdumps", "300ms", "50ms");
  setenv("NCCL_WATCHDOG_MAX_DUMPS", "2", 1);
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) return 1;
  wdh_comm c;
  wdh_comm_init(&c, &p, 0x5eedull, "maxdumps", 2, 4, 1);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_op op;
  WDH_CHECK(wdh_op_run(&c, &cfg, &op) == 0, "healthy op hung");

  /* Three snapshots asked for, two written. */
  for (int i = 1; i <= 3; i++) {
    kill(getpid(), SIGUSR1);
    int want = i < 2 ? i : 2;
    int n = wdh_wait_dumps(dir, "signal", want, 5000);
    WDH_CHECK(n == want, "after %d signals: %d signal dumps, expected %d", i, n, want);
  }
  usleep(300 * 1000); /* time for a third dump, which must not come */
  WDH_CHECK(wdh_list_dumps(dir, "signal", NULL, 0) == 2, "%d signal dumps, cap is 2",
            wdh_list_dumps(dir, "signal", NULL, 0));
  WDH_CHECK(wdh_log_contains(NCCL_LOG_WARN, "NCCL_WATCHDOG_MAX_DUMPS") >= 1,
            "no WARN line about the cap");

  /* A hang afterwards is still dumped. */
  cfg.hang_channel = 0;
  WDH_CHECK(wdh_op_run(&c, &cfg, &op) == 1, "the op did not hang");
  int n = wdh_wait_dumps(dir, "stall", 1, 5000);
  WDH_CHECK(n == 1, "%d stall dumps after the snapshots used up their cap", n);
  wdh_op_resume(&op);

  wdh_comm_finalize(&c);
  wdh_unload(&p);
  return wdh_scenario_end("maxdumps", dir);
}
