/*
 * NCCL_WATCHDOG_MAX_DUMPS caps snapshot (signal) dumps and automatic (stall, peer) dumps
 * separately: a process that was sent the snapshot signal more often than the cap still writes
 * the dump of a real hang. Stall and peer dumps stay within the cap on disk: stall episodes that
 * resume (a checkpoint's long barrier, every few minutes of a long job) make room, the oldest
 * first, so after more of them than the cap a real hang still gets its stall dump and the
 * directory holds no more than the cap (before: the first resumed ones were kept and the budget
 * refunded, 2x the cap and more on disk: longrun slow_phases_cap).
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
  usleep(400 * 1000); /* the episode is seen to resume */

  /* Four more episodes that resume: more than the cap of 2. */
  for (int i = 0; i < 4; i++) {
    WDH_CHECK(wdh_op_run(&c, &cfg, &op) == 1, "episode %d: the op did not hang", i);
    usleep(700 * 1000); /* past the timeout: a stall dump */
    wdh_op_resume(&op);
    usleep(400 * 1000);
  }
  WDH_CHECK(wdh_log_contains(NCCL_LOG_WARN, "progress resumed") >= 4,
            "the episodes were not seen to resume");
  n = wdh_list_dumps(dir, "stall", NULL, 0);
  WDH_CHECK(n == 2, "%d stall dumps of resumed episodes on disk, expected 2 (the cap)", n);
  WDH_CHECK(wdh_log_contains(-1, "removed") >= 3, "the removals of resumed episodes' dumps were not said");
  /* Then a real hang: its stall dump is written whatever came before, a resumed one making room. */
  WDH_CHECK(wdh_op_run(&c, &cfg, &op) == 1, "the last op did not hang");
  for (int i = 0; i < 100 && wdh_log_contains(NCCL_LOG_WARN, "made no progress") < 6; i++) usleep(50 * 1000);
  WDH_CHECK(wdh_log_contains(NCCL_LOG_WARN, "made no progress") == 6, "the real hang was not seen");
  WDH_CHECK(wdh_log_contains(NCCL_LOG_WARN, "dump: (not written)") == 0, "the real hang after 5 resumed episodes got no stall dump");
  n = wdh_list_dumps(dir, "stall", NULL, 0);
  WDH_CHECK(n == 2, "%d stall dumps on disk after the real hang, cap 2", n);
  WDH_CHECK(wdh_log_contains(NCCL_LOG_WARN, "reached for stall and peer dumps") == 0, "the stall budget ran out");
  wdh_op_resume(&op);

  wdh_comm_finalize(&c);
  wdh_unload(&p);
  return wdh_scenario_end("maxdumps", dir);
}
