/*
 * Dead links named from the steps' states, through the real plugin and the analyzer. Four
 * processes in one ring communicator on two simulated hosts (NCCL_WATCHDOG_HOSTNAME): ranks 0
 * and 1 on hosta, 2 and 3 on hostb; the ring runs 0 -> 1 -> 2 -> 3 -> 0. The link from rank 1 to
 * rank 2 dies on channel 0 and every rank stalls in the same poll, as a ring does: time tells
 * nothing, the states tell where the data stopped (transport/net.cc).
 *   tick     rank 1's send step reaches SendWait (sendProxyProgress: SendGPUWait, then
 *            SendPeerWait_v4 once the receiver is ready, then SendWait once its isend is posted)
 *            and never completes; rank 2's receive stays in RecvWait (recvProxyProgress: its
 *            irecv posted, nothing arrived). Behind the break every rank waits on its own GPU
 *            for the send (SendGPUWait: its kernel got no data to forward) and in RecvWait for
 *            upstream data.
 *   pxn      the same, but rank 1's send goes through PXN: rank 0's proxy (hosta, another
 *            process) progresses it, so the ProxyOp and its steps are in rank 0's process with
 *            rank 1's pid and originating rank (plugin/profiler.cc, ncclProfilerStartProxyOpEvent:
 *            sub->pid, sub->rank); rank 1 has no send ProxyOp. Only sends use PXN.
 *   pxnp2p   point-to-point: rank 1 sends to rank 2 through rank 0's PXN proxy, rank 2 receives,
 *            nothing arrives; ranks 0 and 3 are idle.
 * In each case the analyzer's first line names rank 1 (hosta) and rank 2 (hostb), channel 0, and
 * no other rank is a suspect.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "nccl_host.h"

#define RING 0xdeadc0de0000001ull

static const char *g_case;
static const char *g_dir;

/* Rank 1's pid, published for rank 0 (its PXN proxy) through the dump directory. */
static void publish_pid(void) {
  char path[4200], tmp[4210];
  snprintf(path, sizeof path, "%s/pxn-origin.pid", g_dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) _exit(3);
  fprintf(f, "%d\n", (int)getpid());
  fclose(f);
  if (rename(tmp, path) != 0) _exit(3);
}

static pid_t read_origin_pid(void) {
  char path[4200];
  snprintf(path, sizeof path, "%s/pxn-origin.pid", g_dir);
  for (int i = 0; i < 500; i++) {
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f) {
      if (fscanf(f, "%d", &pid) != 1) pid = 0;
      fclose(f);
    }
    if (pid > 0) return pid;
    wdh_sleep_ms(10);
  }
  return 0;
}

static void rank_main(int r, int fd) {
  char g[8];
  snprintf(g, sizeof g, "%d", r);
  setenv("RANK", g, 1);
  setenv("LOCAL_RANK", r % 2 ? "1" : "0", 1);
  setenv("NCCL_WATCHDOG_HOSTNAME", r < 2 ? "hosta" : "hostb", 1);
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm c;
  wdh_comm_init(&c, &p, RING, "ring", 2, 4, r);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.n_channels = 1;
  wdh_run_ops(&c, NULL, &cfg, 3);
  int pxn = strcmp(g_case, "tick") != 0, p2p = strcmp(g_case, "pxnp2p") == 0;
  if (r == 1 && pxn) publish_pid();
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);

  if (r == 0 && pxn) {
    /* Rank 0's proxy thread progresses rank 1's send to rank 2 (PXN): rank 1's context and
     * Coll handle are its own process's addresses, foreign here (fork: they may even be valid
     * addresses of this process), its pid and rank come with the descriptor. */
    pid_t origin = read_origin_pid();
    if (origin <= 0) _exit(4);
    void *foreign_ctx = (void *)(uintptr_t)0x7f5a00001000ull;
    void *foreign_parent = (void *)(uintptr_t)0x7f5a00002000ull;
    wdh_pxn_send(&p, foreign_ctx, foreign_parent, origin, 1, 0, 2, 4, 1);
  }
  wdh_op_cfg_default(&cfg);
  cfg.n_channels = 1;
  cfg.hang_channel = 0;
  cfg.hang_step = 0;
  if (p2p) {
    if (r != 1 && r != 2) {
      for (;;) pause(); /* idle */
    }
    cfg.kind = r == 1 ? WDH_OP_SEND : WDH_OP_RECV;
    cfg.peer = r == 1 ? 2 : 1;
    cfg.hang_dirs = r == 1 ? WDH_HANG_SEND_NET : WDH_HANG_RECV;
    cfg.pxn_send = r == 1;
  } else {
    /* The sender of the dead link hands its step to the network; everyone else's kernel waits
     * for data that never comes, so their sends stay in SendGPUWait; every receive waits. */
    cfg.hang_dirs = WDH_HANG_RECV | (r == 1 ? WDH_HANG_SEND_NET : WDH_HANG_SEND_GPU);
    cfg.pxn_send = pxn && r == 1;
  }
  wdh_op op;
  wdh_op_enqueue(&c, &cfg, &op);
  wdh_op_proxy(&op);
  wdh_op_finish(&op);
  for (;;) pause();
}

int main(int argc, char **argv) {
  const char *az = getenv("WDH_ANALYZER");
  if (!wdh_plugin_path() || !az || access(az, X_OK) != 0) return 77;
  g_case = argc > 1 ? argv[1] : "tick";
  if (strcmp(g_case, "tick") && strcmp(g_case, "pxn") && strcmp(g_case, "pxnp2p")) return 2;
  char tag[32];
  snprintf(tag, sizeof tag, "deadlink-%s", g_case);
  char *dir = wdh_scenario_dir(tag, "1s", "100ms");
  g_dir = dir;
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
  int n = strcmp(g_case, "pxnp2p") ? 4 : 2; /* ranks that stall and dump */
  pid_t pids[4];
  WDH_CHECK(wdh_fork_ranks(4, rank_main, pids) == 4, "ranks not ready");
  WDH_CHECK(wdh_wait_dumps(dir, NULL, n, 10000) >= n, "fewer than %d dumps", n);
  wdh_sleep_ms(1500); /* the others' peer dumps */
  wdh_kill_ranks(pids, 4);

  char cmd[2048], line[4096], first[4096] = "";
  snprintf(cmd, sizeof cmd, "'%s' '%s' 2>&1", az, dir);
  FILE *f = popen(cmd, "r");
  int nl = 0, suspects = 0, in_sus = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (nl++ == 0) snprintf(first, sizeof first, "%s", line);
    if (strstr(line, "  suspects:")) in_sus = 1;
    else if (in_sus && strncmp(line, "    rank ", 9) == 0) suspects++;
    else in_sus = 0;
    fputs(line, stderr);
  }
  if (f) pclose(f);
  WDH_CHECK(strstr(first, "HANG: ") == first, "first line: %s", first);
  WDH_CHECK(strstr(first, "dead link between rank 1 (host hosta) and rank 2 (host hostb) on channel 0") != NULL,
            "the first line does not name the link: %s", first);
  WDH_CHECK(strstr(first, "handed step 0 to the network") && strstr(first, "rank 2 has received nothing"),
            "the first line does not say where the data stopped: %s", first);
  if (strcmp(g_case, "tick") != 0)
    WDH_CHECK(strstr(first, "a PXN send, progressed by rank 0's process") != NULL,
              "the PXN proxy not named: %s", first);
  WDH_CHECK(suspects == 2, "%d suspects, expected the link's two ends only", suspects);
  char label[64];
  snprintf(label, sizeof label, "scenario.deadlink %s", g_case);
  return wdh_scenario_end(label, dir);
}
