/*
 * Scenario 10: NCCL_WATCHDOG_ACTION=abort. A child process hangs an op; its watchdog must write
 * the stall dump to disk and then raise SIGABRT. The parent checks the child died of SIGABRT
 * and the dump is complete JSON naming the stalled op.
 */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_host.h"

static void child(const char *path) {
  struct rlimit rl = {0, 0};
  setrlimit(RLIMIT_CORE, &rl); /* no core file for an expected abort */
  setenv("NCCL_WATCHDOG_ACTION", "abort", 1);
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) _exit(2);
  wdh_comm c;
  wdh_comm_init(&c, &p, 0xab0e7ull, "abort", 1, 2, 1);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, NULL, &cfg, 3);
  cfg.hang_channel = 0;
  wdh_op op;
  wdh_op_enqueue(&c, &cfg, &op);
  wdh_op_proxy(&op);
  wdh_sleep_ms(10000); /* the watchdog should abort us long before */
  _exit(3);
}

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_scenario_dir("abort", "300ms", "50ms");
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) child(path);
  int st = 0;
  if (!wdh_wait_child(pid, 15000, &st)) {
    WDH_CHECK(0, "child still alive after 15 s");
  } else {
    WDH_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
              "child status 0x%x: exit %d, signal %d (expected SIGABRT)", st,
              WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  }
  char *paths[2];
  int n = wdh_list_dumps(dir, "stall", paths, 2);
  WDH_CHECK(n == 1, "%d stall dumps on disk after the abort", n);
  if (n >= 1) {
    cJSON *j = wdh_json_load(paths[0]);
    WDH_CHECK(j != NULL, "stall dump %s is not complete JSON", paths[0]);
    WDH_CHECK(wdh_jnum(j, "pid", -1) == pid, "dump pid %g, child %d", wdh_jnum(j, "pid", -1),
              (int)pid);
    WDH_CHECK(wdh_jnum(j, "trigger.stalls.0.seq", -1) == 3, "stalled seq %g",
              wdh_jnum(j, "trigger.stalls.0.seq", -1));
    const char *action = wdh_jstr(j, "config.action");
    WDH_CHECK(action && !strcmp(action, "abort"), "config.action %s", action ? action : "(none)");
    WDH_CHECK(wdh_validate_dump(paths[0]) == 0, "%s does not validate", paths[0]);
    wdh_json_free(j);
    wdh_free_paths(paths, n < 2 ? n : 2);
  }
  return wdh_scenario_end("scenario_abort", dir);
}
