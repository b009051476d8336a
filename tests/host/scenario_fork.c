/*
 * Scenario 9: fork during traffic. While an application thread and a proxy thread call into the
 * plugin, the main thread forks five times. Each child uses the plugin (events on the inherited
 * context, a new communicator) and exits; it must not deadlock on a lock a parent thread held
 * (bounded waitpid). The parent keeps working and can still dump.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_host.h"

static wdh_comm g_comm;
static wdh_plugin g_plugin;

static void child(void) {
  alarm(20); /* last resort: never outlive the test */
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&g_comm, NULL, &cfg, 20);
  wdh_comm c2;
  wdh_comm_init(&c2, &g_plugin, 0xc41dull, "child", 1, 1, 0);
  wdh_run_ops(&c2, NULL, &cfg, 20);
  wdh_comm_finalize(&c2);
  _exit(wdh_failures() == 0 ? 0 : 3);
}

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_scenario_dir("fork", "5s", "10ms");
  if (wdh_load(&g_plugin, path, 0) != 0) return 1;
  wdh_comm_init(&g_comm, &g_plugin, 0xf0f0f0f0ull, "fork", 1, 2, 0);
  wdh_traffic *app = wdh_traffic_start(&g_comm, 5, NULL);
  wdh_sleep_ms(100);

  for (int i = 0; i < 5; i++) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) child();
    WDH_CHECK(pid > 0, "fork failed");
    int st = 0;
    int done = wdh_wait_child(pid, 10000, &st);
    WDH_CHECK(done, "fork %d: child did not finish in 10 s (deadlock?)", i);
    WDH_CHECK(!done || (WIFEXITED(st) && WEXITSTATUS(st) == 0),
              "fork %d: child status 0x%x (exit %d, signal %d)", i, st,
              WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    wdh_sleep_ms(30);
  }
  long before = wdh_traffic_ops(app);
  wdh_sleep_ms(100);
  WDH_CHECK(wdh_traffic_ops(app) > before, "parent traffic stopped after the forks");

  /* The parent's watchdog still answers. */
  kill(getpid(), SIGUSR1);
  WDH_CHECK(wdh_wait_dumps(dir, "signal", 1, 5000) >= 1, "parent cannot dump after fork");
  wdh_traffic_stop(app);
  WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 0, "stall dumps");
  wdh_comm_finalize(&g_comm);
  wdh_unload(&g_plugin);
  return wdh_scenario_end("scenario_fork", dir);
}
