/*
 * One process per node driving all its GPUs (JAX and XLA: one process per host, each GPU one rank
 * of every communicator; TensorFlow and nccl-tests -g alike), in a 2-D mesh: tensor parallel
 * inside a process, data parallel across. Two processes on hosts "hosta" and "hostb"
 * (NCCL_WATCHDOG_HOSTNAME), RANK 0 and 1 (a process's number, as SLURM_PROCID is per task), four
 * GPUs each (the stand-in driver's current device at each communicator's init, as NCCL inits a
 * communicator with its device current: init.cc ncclCommInitAll sets each device, then
 * ncclCommInitRankDev, inside one group). Communicators: "world" (8 ranks, GPU k of process p is
 * rank 4p+k), "tp0" and "tp1" (the 4 GPUs of one process), "dp0".."dp3" (GPU k of both). Each
 * collective is played in NCCL's order by the test host (enqueue.cc ncclEnqueueCheck; proxy.cc
 * ncclProxyOpToArgs; transport/net.cc recvProxyProgress for the step left in RecvWait).
 *
 *   hang     process 0's host loop never gets to GPU 2's tensor-parallel AllReduce: its GPUs 0, 1, 3
 *            wait inside it for GPU 2. The data-parallel AllReduces queue behind it on each GPU's
 *            stream (enqueued, never reached); process 1's reach theirs and wait for process 0.
 *            The verdict: rank 2 of tp0, global rank 2 (its world rank, not the process's RANK 0),
 *            on hosta, GPU 2; the data-parallel waits are not blamed on hostb's network.
 *   healthy  its twin: every collective completes; OK.
 *   single   nccl-tests -g 4 (one process, one communicator of its four GPUs: init.cc
 *            ncclCommInitAll; each iteration one group over the four ranks, common.cu): GPU 2's
 *            AllReduce seq 2 is enqueued and never reached (its stream held by a kernel outside
 *            NCCL that never ends), GPUs 0, 1, 3 wait inside it; the GPU's own events tell. The job is this process: the global rank is the
 *            communicator's rank, 2 on hosta, never RANK's 0 for all four.
 *   singleok its twin: OK.
 * The automatic verdict (verdict-1.txt, the line every process logs) names the same, and waits for
 * the two processes (WORLD_SIZE=2: "2 of 2 dumps" in verdict-1.log), not for 8.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "nccl_host.h"

#define WORLD 0x3e3e3e3e00000001ull
#define TP(p) (0x7070707000000000ull + (p))
#define DP(k) (0xd0d0d0d000000000ull + (k))
#define NGPU 4

static int g_hang, g_single;

/* nccl-tests -g 4 in one process (single, singleok). */
static void single_main(int p, int fd) {
  (void)p;
  setenv("RANK", "0", 1); /* srun's task, one per node */
  setenv("WORLD_SIZE", "1", 1);
  setenv("NCCL_WATCHDOG_HOSTNAME", "hosta", 1);
  if (wdh_fake_cuda_load() != 0) _exit(1);
  wdh_plugin pl;
  if (wdh_load(&pl, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm c[NGPU];
  for (int k = 0; k < NGPU; k++) {
    wdh_gpu_set_device(k);
    wdh_comm_init(&c[k], &pl, WORLD, "nccl-tests", 1, NGPU, k);
  }
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  for (int k = 0; k < NGPU; k++) wdh_run_ops(&c[k], NULL, &cfg, 2);
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  for (int k = 0; k < NGPU; k++) {
    wdh_op_cfg h = cfg;
    wdh_op op;
    if (!g_hang) {
      wdh_run_ops(&c[k], NULL, &cfg, 1);
      continue;
    }
    h.hang_channel = 0;
    if (k == 2) wdh_gpu_launch(&c[k]); /* a kernel outside NCCL that never ends */
    wdh_op_enqueue(&c[k], &h, &op);
    if (k == 2) continue; /* GPU 2 never reaches the AllReduce */
    wdh_op_proxy(&op);
    wdh_op_finish(&op);
  }
  for (;;) pause();
}

static void mesh_main(int p, int fd) {
  char g[8];
  snprintf(g, sizeof g, "%d", p);
  setenv("RANK", g, 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("NCCL_WATCHDOG_HOSTNAME", p == 0 ? "hosta" : "hostb", 1);
  if (wdh_fake_cuda_load() != 0) _exit(1);
  wdh_plugin pl;
  if (wdh_load(&pl, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm world[NGPU], tp[NGPU], dp[NGPU];
  char name[16];
  for (int k = 0; k < NGPU; k++) {
    wdh_gpu_set_device(k);
    wdh_comm_init(&world[k], &pl, WORLD, "world", 2, 2 * NGPU, NGPU * p + k);
    snprintf(name, sizeof name, "tp%d", p);
    wdh_comm_init(&tp[k], &pl, TP(p), name, 1, NGPU, k);
    snprintf(name, sizeof name, "dp%d", k);
    wdh_comm_init(&dp[k], &pl, DP(k), name, 2, 2, p);
  }
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  for (int k = 0; k < NGPU; k++) {
    wdh_run_ops(&world[k], NULL, &cfg, 2);
    wdh_run_ops(&tp[k], NULL, &cfg, 3);
    wdh_run_ops(&dp[k], NULL, &cfg, 3);
  }
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  if (!g_hang) {
    for (int k = 0; k < NGPU; k++) {
      wdh_run_ops(&tp[k], NULL, &cfg, 1);
      wdh_run_ops(&dp[k], NULL, &cfg, 1);
    }
    for (;;) pause();
  }
  for (int k = 0; k < NGPU; k++) {
    wdh_op_cfg h = cfg;
    wdh_op op;
    if (p == 0) {
      if (k == 2) continue; /* the host loop never gets to GPU 2 */
      h.hang_channel = 0;   /* TP AllReduce seq 3: waits for GPU 2 */
      wdh_op_enqueue(&tp[k], &h, &op);
      wdh_op_proxy(&op);
      wdh_op_finish(&op);
      wdh_op_enqueue(&dp[k], &cfg, &op); /* behind it on the GPU's stream: never reached */
    } else {
      wdh_run_ops(&tp[k], NULL, &cfg, 1);
      h.hang_channel = 0; /* DP AllReduce seq 3: waits for process 0's GPU */
      wdh_op_enqueue(&dp[k], &h, &op);
      wdh_op_proxy(&op);
      wdh_op_finish(&op);
    }
  }
  for (;;) pause();
}

static int run(const char *az) {
  char *dir = wdh_scenario_dir(g_single ? "meshsingle" : g_hang ? "mesh" : "meshok", "1s", "100ms");
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
  /* The mesh: the device only, NCCL's events decide. A single process's GPU 2 is told by the
   * GPU's own events. */
  if (!g_single) setenv("NCCL_WATCHDOG_GPU_EVENTS", "0", 1);
  setenv("NCCL_WATCHDOG_VERDICT", "1", 1);
  setenv("NCCL_WATCHDOG_TRIGGER_POLL", "200ms", 1);
  pid_t pids[2] = {0, 0};
  int np = g_single ? 1 : 2;
  WDH_CHECK(wdh_fork_ranks(np, g_single ? single_main : mesh_main, pids) == np, "processes not ready");
  char line[4096];
  if (g_hang && g_single) {
    WDH_CHECK(wdh_verdict_line(dir, 1, 9000, line, sizeof line), "no automatic verdict within 9 s");
    WDH_CHECK(strstr(line, "HANG") && strstr(line, "rank 2: its GPU never reached AllReduce seq 2") &&
                  strstr(line, "global rank 2 on host hosta"),
              "the automatic verdict does not name rank 2, global rank 2 on hosta, AllReduce seq 2: %s", line);
    WDH_CHECK(!strstr(line, "global rank 0"), "RANK 0 given to a GPU: %s", line);
    wdh_sleep_ms(300);
  } else if (g_hang) {
    WDH_CHECK(wdh_wait_dumps(dir, NULL, 2, 10000) >= 2, "not a dump from both processes");
    /* Within the settle's 10 s only if it counts processes (2), not ranks (8). */
    WDH_CHECK(wdh_verdict_line(dir, 1, 9000, line, sizeof line), "no automatic verdict within 9 s");
    WDH_CHECK(strstr(line, "rank 2 of tp0") && strstr(line, "global rank 2 on") && strstr(line, "hosta") &&
                  strstr(line, "AllReduce seq 3") && !strstr(line, "network"),
              "the automatic verdict does not name rank 2 of tp0, global rank 2 on hosta, AllReduce "
              "seq 3: %s", line);
    char log[4200];
    snprintf(log, sizeof log, "%s/verdict-1.log", dir);
    char *t = wdh_read_file(log, NULL);
    WDH_CHECK(t && strstr(t, " of 2 dumps"), "the settle did not wait for 2 processes: %s", t ? t : "(no log)");
    free(t);
    wdh_sleep_ms(500);
  } else {
    wdh_sleep_ms(2500);
    WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 0, "a stall dump for a healthy mesh");
    for (int i = 0; i < np; i++) kill(pids[i], SIGUSR1);
    WDH_CHECK(wdh_wait_dumps(dir, "signal", np, 5000) == np, "no snapshot of every process");
    WDH_CHECK(!wdh_verdict_line(dir, 1, 0, line, sizeof line), "a verdict of a healthy mesh: %s", line);
  }
  wdh_kill_ranks(pids, np);
  char first[4096];
  if (wdh_analyzer_first_line(dir, "", first, sizeof first)) {
    if (!g_hang) {
      WDH_CHECK(!strncmp(first, "OK", 2), "first line: %s", first);
    } else if (g_single) {
      WDH_CHECK(strstr(first, "rank 2: its GPU never reached AllReduce seq 2") &&
                    strstr(first, "global rank 2 on host hosta"),
                "by hand: \"%s\" should name rank 2 as the automatic verdict did", first);
    } else {
      WDH_CHECK(strstr(first, "rank 2 of tp0") && strstr(first, "global rank 2 on host hosta"),
                "the root is not rank 2 of tp0, global rank 2 on hosta: %s", first);
      WDH_CHECK(!strstr(first, "hostb") || strstr(first, "dp"), "hostb blamed: %s", first);
      WDH_CHECK(!strstr(first, "network"), "a network blamed: %s", first);
    }
    char cmd[2048], path[1024];
    snprintf(path, sizeof path, "%s/report.json", dir);
    snprintf(cmd, sizeof cmd, "'%s' -q --json '%s' > '%s'", az, dir, path);
    WDH_CHECK(system(cmd) == 0, "analyzer --json");
    cJSON *j = wdh_json_load(path);
    cJSON *comms = j ? cJSON_GetObjectItem(j, "comms") : NULL;
    /* No rank of a process holding several is given the process's RANK as its global rank. */
    cJSON *c, *s;
    int bad = 0, named = 0;
    cJSON_ArrayForEach(c, comms) {
      cJSON_ArrayForEach(s, cJSON_GetObjectItem(c, "suspects")) {
        const char *host = wdh_jstr(s, "host"), *doing = wdh_jstr(s, "doing");
        double gr = wdh_jnum(s, "globalRank", -1), gpu = wdh_jnum(s, "gpu", -1);
        /* The root's GPU is in nothing: its siblings' operations are not its own. */
        if (g_hang && !g_single && gr == 2)
          WDH_CHECK(doing && strstr(doing, "in flight: nothing"), "global rank 2 was doing: %s",
                    doing ? doing : "(none)");
        if (gr < 0 || !host) continue;
        named++;
        bad += gr != (strcmp(host, "hosta") ? NGPU : 0) + gpu; /* single: the communicator's rank, its GPU's */
      }
    }
    WDH_CHECK(bad == 0, "%d suspects with a global rank other than their world rank", bad);
    WDH_CHECK(!g_hang || named > 0, "no suspect with a global rank");
    wdh_json_free(j);
    unlink(path);
  }
  char label[48];
  snprintf(label, sizeof label, "scenario_mesh %s%s", g_single ? "single" : g_hang ? "hang" : "healthy",
           g_single && !g_hang ? "ok" : "");
  return wdh_scenario_end(label, dir);
}

int main(int argc, char **argv) {
  if (!wdh_plugin_path() || !getenv("WDH_FAKE_CUDA")) return 77;
  const char *az = getenv("WDH_ANALYZER");
  if (!az || access(az, X_OK) != 0) return 77;
  const char *which = argc > 1 ? argv[1] : "hang";
  g_single = !strncmp(which, "single", 6);
  g_hang = !strcmp(which, "hang") || !strcmp(which, "single");
  return run(az);
}
