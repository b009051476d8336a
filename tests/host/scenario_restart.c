/*
 * One verdict per attempt, from the plugin's own dumps: torchrun's agent restarts a job that hung
 * (torch/distributed/elastic/agent/server/api.py, _restart_workers: every worker a new process
 * with TORCHELASTIC_RESTART_COUNT incremented and the same TORCHELASTIC_RUN_ID; PyTorch makes a
 * new unique id per process group per attempt, so the communicator's hash changes while its name
 * repeats: init.cc getHash of the unique id, bootstrap.cc's random magic). Both attempts write
 * into one dump directory.
 *
 * Attempt 0: 4 ranks of "default_pg"; rank 3 never enters AllReduce seq 5: stall and peer dumps.
 * The launcher kills the job and starts attempt 1 (new processes, new hash, same name).
 *   healthy   attempt 1 runs and is snapshotted (SIGUSR1): the analyzer judges attempt 1, "OK",
 *             and says on its first line that it set an earlier attempt aside; --attempt=0 gives
 *             attempt 0's verdict, rank 3 never entered AllReduce seq 5.
 *   hang      attempt 1 hangs on rank 1 instead: the first line names rank 1 (attempt 1), never
 *             rank 3; --attempt=0 names rank 3.
 *   slurm     Slurm's requeue instead of torchrun (scontrol requeue: the batch script runs again
 *             with the same SLURM_JOB_ID and SLURM_RESTART_COUNT set, unset in the first attempt);
 *             attempt 1 healthy, as `healthy`.
 *   scaledown an elastic restart with fewer nodes (torchrun's new rendezvous admits 2 of the 4
 *             workers: WORLD_SIZE 2, a 2-rank default_pg); attempt 1 healthy: OK, judged on 2 ranks,
 *             attempt 0's 4-rank communicator set aside.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"

#define NR 4
#define COMM0 0xa77e0000000000a0ull
#define COMM1 0xa77e0000000000a1ull

static int g_attempt, g_victim; /* g_victim -1: healthy */
static int g_slurm, g_world = NR;

static void rank_main(int rank, int fd) {
  char n[16];
  snprintf(n, sizeof n, "%d", g_attempt);
  if (g_slurm) {
    setenv("SLURM_JOB_ID", "4242", 1);
    if (g_attempt) setenv("SLURM_RESTART_COUNT", n, 1); /* unset in the first attempt */
    else unsetenv("SLURM_RESTART_COUNT");
    unsetenv("TORCHELASTIC_RESTART_COUNT");
  } else {
    setenv("TORCHELASTIC_RESTART_COUNT", n, 1);
    setenv("TORCHELASTIC_RUN_ID", "restart-job", 1);
  }
  wdh_launcher_env(rank, -1, g_world);
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm c;
  wdh_comm_init(&c, &p, g_attempt ? COMM1 : COMM0, "default_pg", 1, g_world, rank);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, NULL, &cfg, 5); /* AllReduce seq 0..4 */
  if (g_victim >= 0 && rank != g_victim) {
    cfg.hang_channel = 0; /* the victim's data never comes */
    wdh_op op;
    wdh_op_enqueue(&c, &cfg, &op);
    wdh_op_proxy(&op);
  }
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  for (;;) pause();
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "healthy";
  int hang = !strcmp(which, "hang");
  g_slurm = !strcmp(which, "slurm");
  int scaledown = !strcmp(which, "scaledown");
  if (!hang && !g_slurm && !scaledown && strcmp(which, "healthy")) return 2;
  const char *az = getenv("WDH_ANALYZER");
  if (!wdh_plugin_path() || !az || access(az, X_OK) != 0) return 77;
  char *dir = wdh_scenario_dir("restart", "1s", "100ms");
  pid_t pids[NR];

  /* Attempt 0 hangs on rank 3. */
  g_attempt = 0;
  g_victim = 3;
  int n = wdh_fork_ranks(NR, rank_main, pids);
  WDH_CHECK(n == NR, "attempt 0: %d of %d ranks ready", n, NR);
  WDH_CHECK(wdh_wait_dumps(dir, "stall", 1, 10000) >= 1, "attempt 0: no stall dump");
  wdh_wait_dumps(dir, "peer", 1, 8000);
  wdh_sleep_ms(1500);
  wdh_kill_ranks(pids, NR); /* torchrun: the workers are stopped, then restarted */
  wdh_sleep_ms(300);        /* its new rendezvous (seconds in a real job) */

  /* Attempt 1: new processes, a new communicator hash, the same name. */
  g_attempt = 1;
  g_victim = hang ? 1 : -1;
  if (scaledown) g_world = 2;
  int before = wdh_list_dumps(dir, NULL, NULL, 0);
  n = wdh_fork_ranks(g_world, rank_main, pids);
  WDH_CHECK(n == g_world, "attempt 1: %d of %d ranks ready", n, g_world);
  if (hang) {
    uint64_t end = wdh_now_ns() + 10000000000ull;
    while (wdh_list_dumps(dir, "stall", NULL, 0) + wdh_list_dumps(dir, "peer", NULL, 0) < 2 * NR &&
           wdh_now_ns() < end)
      wdh_sleep_ms(50);
    wdh_sleep_ms(1500);
  } else {
    wdh_sleep_ms(300);
    for (int r = 0; r < g_world; r++) kill(pids[r], SIGUSR1);
    wdh_wait_dumps(dir, "signal", g_world, 8000);
    wdh_sleep_ms(300);
  }
  WDH_CHECK(wdh_list_dumps(dir, NULL, NULL, 0) > before, "attempt 1 wrote no dump");
  wdh_kill_ranks(pids, g_world);

  char line[4096];
  wdh_analyzer_first_line(dir, "", line, sizeof line);
  if (hang)
    WDH_CHECK(strstr(line, "HANG") && strstr(line, "rank 1") && !strstr(line, "rank 3 never") &&
                  strstr(line, "incarnation 1 of 2"),
              "latest incarnation: first line \"%s\" should name rank 1 and the incarnation", line);
  else
    WDH_CHECK(!strncmp(line, "OK", 2) && strstr(line, "incarnation 1 of 2") &&
                  strstr(line, g_slurm ? "SLURM_RESTART_COUNT=1" : "TORCHELASTIC_RESTART_COUNT=1"),
              "latest attempt: first line \"%s\" should be OK and say which attempt", line);
  wdh_analyzer_first_line(dir, "--attempt=0", line, sizeof line);
  WDH_CHECK(strstr(line, "HANG") && strstr(line, "rank 3 never entered AllReduce seq 5"),
            "--attempt=0: first line \"%s\" should name rank 3", line);
  char name[64];
  snprintf(name, sizeof name, "scenario_restart %s", which);
  return wdh_scenario_end(name, dir);
}
