/*
 * Incarnations the launcher's counters do not tell apart, played through the plugin in the
 * tools' own order. Every case: incarnation 0 hangs (its victim never enters AllReduce seq 5: stall
 * and peer dumps), then incarnation 1 either hangs on another rank or runs healthy and is
 * snapshotted (SIGUSR1). The verdict must be about incarnation 1 (OK when healthy, its culprit by
 * global rank when hung, never incarnation 0's), and --incarnation=0 must reach the other.
 *
 *   inprocess  NVIDIA Resiliency Extension's in-process restart (nvidia_resiliency_ext/inprocess:
 *              on a fault the wrapper aborts the process group, ncclCommAbort through PyTorch,
 *              then runs the wrapped function again in the same processes): the same pids, new
 *              communicators, no variable changed. Incarnation 0's victim is rank 3, 1's rank 1.
 *   quorum     torchft (pytorch/torchft: a quorum per step; a replica that leaves is left out of
 *              the communicators made again): replica 3 leaves (its process lives on, idle), the
 *              other three abort theirs and make a 3-rank one; incarnation 1 hangs on rank 2, which
 *              has a dump: it is named, never "left no dump". Each replica group is a torchrun of
 *              its own, as torchft's examples launch them (`torchrun --nnodes=1 --nproc_per_node=1`
 *              per group, REPLICA_GROUP_ID and NUM_REPLICA_GROUPS set by hand): RANK 0, LOCAL_RANK
 *              0 and WORLD_SIZE 1 in every process. The global rank is then torchft's own
 *              (torchft/manager.py, _global_rank: REPLICA_GROUP_ID x WORLD_SIZE + RANK, here the
 *              replica's group), never RANK (0 for all), and the automatic verdict waits for the
 *              communicator's processes, not for WORLD_SIZE's one.
 *   replaced   torchrun after a node was replaced: the new node's agent starts its restart count
 *              at 0 (torch/distributed/elastic/agent/server/api.py), so incarnation 1's ranks 2
 *              and 3 say TORCHELASTIC_RESTART_COUNT=0 like incarnation 0's, ranks 0 and 1 say 1;
 *              new processes, a new communicator. Incarnation 1 hangs on rank 1.
 *   requeue    Slurm requeues the job onto other nodes (scontrol requeue; --nodes=1-2): incarnation
 *              0 ran 4 ranks on node-a and node-b and was killed (SIGKILL: its ring files stay in
 *              the directory, read as post-mortems); incarnation 1 runs 2 ranks on node-c, the
 *              same SLURM_JOB_ID, SLURM_RESTART_COUNT=1, and hangs on rank 1.
 * Each with its healthy twin (inprocessok, quorumok, replacedok, requeueok): incarnation 1 reads
 * OK.
 * The automatic verdict too (the line every process of an episode logs, verdict-<K>.txt's first):
 * an episode of incarnation 1 names its culprit by global rank and host, AllReduce seq 5, and
 * none is made in a healthy incarnation 1; incarnation 0's episode names rank 3.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"

#define NR 4
#define COMM0 0x1ca4000000000a00ull
#define COMM1 0x1ca4000000000a01ull

enum { K_INPROCESS, K_QUORUM, K_REPLACED, K_REQUEUE };
static int g_kind, g_hang;
static const char *g_dir;

/* The next AllReduce of c on every rank but the victim, whose data never comes. */
static void hang_but(wdh_comm *c, int victim, int rank) {
  wdh_op op;
  if (rank != victim) wdh_op_hang(c, &op);
}

/* One process through both incarnations (inprocess, quorum): abort, then new communicators. */
static void same_process_main(int rank, int fd) {
  if (g_kind == K_QUORUM) { /* a torchrun per replica group (torchft's examples/README) */
    char g[8];
    snprintf(g, sizeof g, "%d", rank);
    wdh_launcher_env(0, 0, 1);
    setenv("REPLICA_GROUP_ID", g, 1);
    setenv("NUM_REPLICA_GROUPS", "4", 1);
  } else {
    wdh_launcher_env(rank, -1, NR);
  }
  setenv("TORCHELASTIC_RESTART_COUNT", "0", 1);
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm c;
  wdh_comm_init(&c, &p, COMM0, "default_pg", 1, NR, rank);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, NULL, &cfg, 5);
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  hang_but(&c, 3, rank);
  /* The fault is seen (PyTorch's or the wrapper's timeout), after the plugin's dumps. */
  wdh_sleep_ms(2500);
  /* ncclCommAbort: commReclaim, then commFree calls ncclProfilerPluginFinalize (init.cc) with
   * work in flight; the plugin's last communicator gone, its watchdog stops, and NCCL closes the
   * library (plugin/profiler.cc ncclProfilerPluginUnload: the reference count at 0) and opens it
   * again at the next communicator's init (ncclProfilerPluginLoad). */
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  int n = g_kind == K_QUORUM ? NR - 1 : NR;
  if (rank >= n) {
    for (;;) pause(); /* the replica that left the quorum lives on, outside it */
  }
  wdh_sleep_ms(200);
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  /* The new process group: a new unique id, so a new commHash (init.cc getHash), same name. */
  wdh_comm_init(&c, &p, COMM1, "default_pg", 1, n, rank);
  wdh_run_ops(&c, NULL, &cfg, 5);
  if (wdh_barrier(g_dir, "inc1", rank, n, 10000) != 0) _exit(4);
  if (g_hang) hang_but(&c, g_kind == K_QUORUM ? 2 : 1, rank);
  for (;;) pause();
}

/* A new process per incarnation (replaced). */
static int g_inc;
static void new_process_main(int rank, int fd) {
  int requeue = g_kind == K_REQUEUE, n = requeue && g_inc ? 2 : NR;
  wdh_launcher_env(rank, -1, n);
  if (requeue) {
    setenv("SLURM_JOB_ID", "5151", 1);
    if (g_inc) setenv("SLURM_RESTART_COUNT", "1", 1);
    else unsetenv("SLURM_RESTART_COUNT");
    unsetenv("TORCHELASTIC_RESTART_COUNT");
    setenv("NCCL_WATCHDOG_HOSTNAME", g_inc ? "node-c" : rank < 2 ? "node-a" : "node-b", 1);
  } else {
    /* The replaced node's agent (ranks 2 and 3) counts restarts from 0 again. */
    setenv("TORCHELASTIC_RESTART_COUNT", g_inc && rank < 2 ? "1" : "0", 1);
    setenv("TORCHELASTIC_RUN_ID", "replaced-job", 1);
    setenv("NCCL_WATCHDOG_HOSTNAME", rank < 2 ? "node-a" : g_inc ? "node-c" : "node-b", 1);
  }
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm c;
  wdh_comm_init(&c, &p, g_inc ? COMM1 : COMM0, "default_pg", requeue && g_inc ? 1 : 2, n, rank);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, NULL, &cfg, 5);
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  if (!g_inc) hang_but(&c, 3, rank);
  else if (g_hang) hang_but(&c, 1, rank);
  for (;;) pause();
}

/* The newest automatic verdict whose line is about comm (its id in the line): 1 and the line. */
static int verdict_of(const char *dir, uint64_t comm, char *out, size_t len) {
  char id[32], line[4096];
  snprintf(id, sizeof id, "0x%016llx", (unsigned long long)comm);
  int found = 0;
  for (unsigned k = 1; k <= 8; k++)
    if (wdh_verdict_line(dir, k, 0, line, sizeof line) && strstr(line, id)) {
      found = 1;
      if (out) snprintf(out, len, "%s", line);
    }
  return found;
}

/* What the job logged: incarnation 1's culprit (hang) or no verdict about it (healthy);
 * incarnation 0's episode named rank 3 when it was judged. */
static void check_automatic(const char *dir, int culprit) {
  static const char *const host1[] = {NULL, NULL, "node-a", "node-c"}; /* culprit rank 1's host */
  char line[4096], want[128];
  int got = verdict_of(dir, COMM1, line, sizeof line);
  if (g_hang) {
    snprintf(want, sizeof want, "rank %d never entered AllReduce seq 5 (global rank %d on host %s", culprit, culprit,
             host1[g_kind] ? host1[g_kind] : "");
    WDH_CHECK(got && strstr(line, want) && strstr(line, "HANG") && !strstr(line, "no dump"),
              "incarnation 1's automatic verdict: \"%s\" should name rank %d (%s...)", got ? line : "(none)",
              culprit, want);
  } else {
    WDH_CHECK(!got, "an automatic verdict about healthy incarnation 1: %s", line);
  }
  if (verdict_of(dir, COMM0, line, sizeof line))
    WDH_CHECK(strstr(line, "rank 3 never entered AllReduce seq 5 (global rank 3"),
              "incarnation 0's automatic verdict: \"%s\" should name rank 3", line);
}

int main(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "inprocess";
  static const char *const names[] = {"inprocess", "quorum", "replaced", "requeue"};
  g_kind = -1;
  for (int k = 0; k < 4; k++) {
    size_t l = strlen(names[k]);
    if (!strncmp(which, names[k], l) && (!which[l] || !strcmp(which + l, "ok"))) {
      g_kind = k;
      g_hang = !which[l];
    }
  }
  if (g_kind < 0) return 2;
  const char *az = getenv("WDH_ANALYZER");
  if (!wdh_plugin_path() || !az || access(az, X_OK) != 0) return 77;
  char *dir = wdh_scenario_dir("incarnation", "1s", "100ms");
  g_dir = dir;
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
  setenv("NCCL_WATCHDOG_VERDICT", "1", 1);
  setenv("NCCL_WATCHDOG_TRIGGER_POLL", "200ms", 1);
  pid_t pids[NR];
  int n1 = g_kind == K_QUORUM ? NR - 1 : g_kind == K_REQUEUE ? 2 : NR, culprit = g_kind == K_QUORUM ? 2 : 1;
  if (g_kind == K_REPLACED || g_kind == K_REQUEUE) {
    g_inc = 0;
    WDH_CHECK(wdh_fork_ranks(NR, new_process_main, pids) == NR, "incarnation 0 not ready");
    WDH_CHECK(wdh_wait_dumps(dir, "stall", 1, 10000) >= 1, "incarnation 0: no stall dump");
    wdh_wait_dumps(dir, "peer", 1, 8000);
    wdh_sleep_ms(1500);
    wdh_kill_ranks(pids, NR);
    wdh_sleep_ms(300);
    g_inc = 1;
    memset(pids, 0, sizeof pids);
    WDH_CHECK(wdh_fork_ranks(n1, new_process_main, pids) == n1, "incarnation 1 not ready");
  } else {
    WDH_CHECK(wdh_fork_ranks(NR, same_process_main, pids) == NR, "processes not ready");
    WDH_CHECK(wdh_wait_dumps(dir, "stall", 1, 10000) >= 1, "incarnation 0: no stall dump");
    wdh_sleep_ms(2500); /* the abort and the new communicators */
  }
  int before = wdh_list_dumps(dir, "stall", NULL, 0) + wdh_list_dumps(dir, "peer", NULL, 0);
  if (g_hang) {
    uint64_t end = wdh_now_ns() + 10000000000ull;
    while (wdh_list_dumps(dir, "stall", NULL, 0) + wdh_list_dumps(dir, "peer", NULL, 0) < before + n1 &&
           wdh_now_ns() < end)
      wdh_sleep_ms(50);
    wdh_sleep_ms(1500);
  } else {
    wdh_sleep_ms(500);
    for (int r = 0; r < n1; r++) kill(pids[r], SIGUSR1); /* the quorum's */
    wdh_wait_dumps(dir, "signal", n1, 8000);
    wdh_sleep_ms(300);
  }
  if (g_hang) /* the automatic verdict of incarnation 1's episode, once its dumps are in */
    for (int i = 0; i < 100 && !verdict_of(dir, COMM1, NULL, 0); i++) wdh_sleep_ms(100);
  wdh_kill_ranks(pids, NR);
  check_automatic(dir, culprit);
  char line[4096], want[64];
  wdh_analyzer_first_line(dir, "", line, sizeof line);
  snprintf(want, sizeof want, "rank %d never entered AllReduce seq 5", culprit);
  if (g_hang)
    WDH_CHECK(strstr(line, "HANG") && strstr(line, want) && !strstr(line, "rank 3 never") && !strstr(line, "no dump") &&
                  !strstr(line, "JOB"),
              "incarnation 1: first line \"%s\" should name rank %d alone", line, culprit);
  else
    WDH_CHECK(!strncmp(line, "OK", 2), "incarnation 1 healthy: first line \"%s\"", line);
  wdh_analyzer_first_line(dir, "--incarnation=0", line, sizeof line);
  WDH_CHECK(strstr(line, "HANG") && strstr(line, "rank 3 never entered AllReduce seq 5"),
            "--incarnation=0: first line \"%s\" should name rank 3", line);
  char name[64];
  snprintf(name, sizeof name, "scenario_incarnation %s", which);
  return wdh_scenario_end(name, dir);
}
