/*
 * Scenario 3: a slow but progressing operation. For more than 3x the timeout the op changes
 * state every timeout/3 (ProxyStep states, step and ProxyOp stops): the watchdog must never
 * declare a stall, because progress is any child start, stop or state change.
 */
#include <stdio.h>
#include <stdlib.h>

#include "nccl_host.h"

#define TIMEOUT_MS 300

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_scenario_dir("slow", "300ms", "50ms");
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) return 1;
  wdh_comm c;
  wdh_comm_init(&c, &p, 0xabcdef01ull, "slow", 1, 2, 0);

  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.n_channels = 1;
  cfg.n_steps = 2;
  cfg.step_delay_us = TIMEOUT_MS * 1000 / 3;
  uint64_t t0 = wdh_now_ns();
  wdh_op op;
  wdh_op_run(&c, &cfg, &op); /* 16 pauses of timeout/3: ~5x the timeout */
  double took = (wdh_now_ns() - t0) / 1e6;
  WDH_CHECK(took >= 3 * TIMEOUT_MS, "the slow op lasted only %.0f ms", took);
  /* A second slow op from a proxy thread, with 4 channels at once. */
  wdh_proxy *px = wdh_proxy_create();
  cfg.n_channels = 4;
  cfg.n_steps = 1;
  wdh_run_ops(&c, px, &cfg, 1);
  wdh_proxy_destroy(px);
  wdh_sleep_ms(2 * TIMEOUT_MS); /* nothing in flight: still no dump */
  int n = wdh_list_dumps(dir, NULL, NULL, 0);
  WDH_CHECK(n == 0, "%d dumps for a slow but progressing op", n);
  WDH_CHECK(wdh_log_count(NCCL_LOG_WARN) == 0, "%d WARN lines", wdh_log_count(NCCL_LOG_WARN));
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  return wdh_scenario_end("scenario_slow", dir);
}
