/*
 * One verdict for a job of several communicators. Four processes share a data-parallel
 * communicator "dp"; processes 2 and 3 also share a pipeline communicator "pp". Process 3 gets
 * stuck in its data loader; process 2 then waits in a pp AllReduce on it, so it never enters the
 * next dp AllReduce, in which processes 0 and 1 wait. Per communicator the analyzer blames dp
 * ranks 2 and 3 and pp rank 1; the job verdict must follow dp rank 2 into pp and name process 3
 * (global rank 3) as the root, first line of the report.
 *
 * NCCL's order, as the test host plays it (nccl_host.h): the application thread's events from
 * ncclEnqueueCheck (enqueue.cc), the proxy's ProxyOps and steps from ncclProxyOpToArgs (proxy.cc)
 * and sendProxyProgress / recvProxyProgress (transport/net.cc).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "nccl_host.h"

#define DP 0xd9d9d9d9ull
#define PP 0xbbbbbbbbull

/* The next AllReduce of c, whose data never comes. */
static void hang_in(wdh_comm *c) {
  wdh_op op;
  wdh_op_hang(c, &op);
}

static void rank_main(int r, int fd) {
  char g[8];
  snprintf(g, sizeof g, "%d", r);
  setenv("RANK", g, 1);
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm dp, pp;
  wdh_comm_init(&dp, &p, DP, "dp", 1, 4, r);
  if (r >= 2) wdh_comm_init(&pp, &p, PP, "pp", 1, 2, r - 2);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&dp, NULL, &cfg, 5);
  if (r >= 2) wdh_run_ops(&pp, NULL, &cfg, 3);
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  if (r <= 1) hang_in(&dp);      /* dp AllReduce seq 5: waits for ranks 2 and 3 */
  else if (r == 2) hang_in(&pp); /* pp AllReduce seq 3: waits for process 3 */
  /* r == 3: stuck in its data loader */
  for (;;) pause();
}

/* A job of n rank processes until every process dumped once for the episode (the first stalled
 * rank's stall dump, the others' peer dumps or their own stall dumps), settle_ms more, then gone.
 * Their pids stay in pids (for the checks). */
static void run_job(int n, void (*fn)(int, int), const char *dir, unsigned settle_ms, pid_t *pids) {
  WDH_CHECK(wdh_fork_ranks(n, fn, pids) == n, "ranks not ready");
  WDH_CHECK(wdh_wait_dumps(dir, NULL, n, 10000) >= n, "not a dump from every process");
  wdh_sleep_ms(settle_ms);
  pid_t keep[8];
  memcpy(keep, pids, sizeof(pid_t) * (size_t)n);
  wdh_kill_ranks(keep, n);
}

/* The analyzer's text report of dir (echoed to stderr); its first line in first. Returns 1 when
 * some line holds want (NULL: none wanted). */
static int report(const char *az, const char *dir, char *first, size_t len, const char *want) {
  char cmd[2048], line[4096];
  snprintf(cmd, sizeof cmd, "'%s' -q '%s'", az, dir);
  FILE *f = popen(cmd, "r");
  int n = 0, found = 0;
  first[0] = '\0';
  while (f && fgets(line, sizeof line, f)) {
    if (n++ == 0) snprintf(first, len, "%s", line);
    if (want && strstr(line, want)) found = 1;
    fputs(line, stderr);
  }
  if (f) pclose(f);
  return found;
}

static int case_root(const char *az) {
  char *dir = wdh_scenario_dir("jobroot", "1s", "100ms");
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
  pid_t pids[4];
  run_job(4, rank_main, dir, 1500, pids);
  pid_t root_pid = pids[3];
  char cmd[2048], first[4096];
  report(az, dir, first, sizeof first, NULL);
  WDH_CHECK(strncmp(first, "JOB: root cause", 15) == 0, "first line: %s", first);
  WDH_CHECK(strstr(first, "global rank 3") != NULL, "the root is not global rank 3: %s", first);
  WDH_CHECK(strstr(first, "dp") && strstr(first, "pp"), "the chain does not cross dp and pp: %s", first);
  snprintf(cmd, sizeof cmd, "'%s' -q --json '%s' > '%s/report.json'", az, dir, dir);
  WDH_CHECK(system(cmd) == 0, "analyzer --json");
  char path[1024];
  snprintf(path, sizeof path, "%s/report.json", dir);
  void *j = wdh_json_load(path);
  WDH_CHECK(j != NULL, "no JSON report");
  if (j) {
    cJSON *chain = wdh_jpath(j, "job.chain");
    int len = cJSON_GetArraySize(chain);
    WDH_CHECK(len == 2, "chain of %d links, expected dp -> pp", len);
    cJSON *last = cJSON_GetArrayItem(chain, len - 1);
    WDH_CHECK(last && wdh_jnum(last, "onPid", -1) == root_pid, "root pid %g, expected %d",
              wdh_jnum(last, "onPid", -1), (int)root_pid);
    WDH_CHECK(last && wdh_jnum(last, "onGlobalRank", -1) == 3, "root global rank %g",
              wdh_jnum(last, "onGlobalRank", -1));
    const char *name0 = wdh_jstr(cJSON_GetArrayItem(chain, 0), "commName");
    WDH_CHECK(name0 && !strcmp(name0, "dp"), "chain starts in %s", name0 ? name0 : "(none)");
    WDH_CHECK(wdh_jpath(j, "job.deadlock") && !cJSON_IsTrue((cJSON *)wdh_jpath(j, "job.deadlock")),
              "not a deadlock");
    wdh_json_free(j);
  }
  unlink(path);
  return wdh_scenario_end("jobroot", dir);
}

/* Two processes, two communicators entered in opposite orders: process 0 waits in X for 1,
 * process 1 waits in Y for 0. A deadlock, named as one. */
#define CX 0xa11a11ull
#define CY 0xb22b22ull

static void dl_main(int r, int fd) {
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm x, y;
  wdh_comm_init(&x, &p, CX, "x", 1, 2, r);
  wdh_comm_init(&y, &p, CY, "y", 1, 2, r);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&x, NULL, &cfg, 2);
  wdh_run_ops(&y, NULL, &cfg, 2);
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  hang_in(r == 0 ? &x : &y);
  for (;;) pause();
}

static int case_deadlock(const char *az) {
  char *dir = wdh_scenario_dir("jobdeadlock", "1s", "100ms");
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
  pid_t pids[2];
  run_job(2, dl_main, dir, 300, pids);
  char first[4096];
  report(az, dir, first, sizeof first, NULL);
  WDH_CHECK(strncmp(first, "JOB: deadlock", 13) == 0, "first line: %s", first);
  WDH_CHECK(strstr(first, " x ") && strstr(first, " y "), "both communicators named: %s", first);
  return wdh_scenario_end("jobdeadlock", dir);
}

/* A dead link, played through four processes on two simulated hosts (NCCL_WATCHDOG_HOSTNAME):
 * every process is in "dp" and "pp". In pp, process 1 (hosta) sends to process 2 (hostb) and
 * process 2 receives from 1: both post their halves and both wait in the network, the send in
 * SendWait, the receive in RecvWait (transport/net.cc: sendProxyProgress records SendWait once its
 * isend is posted, recvProxyProgress RecvWait once its irecv is; neither completes). Processes 0
 * and 3 then wait in the next dp AllReduce, which 1 and 2 never enter. The job verdict: the link
 * between rank 1 on hosta and rank 2 on hostb, reached from dp. */
#define LDP 0xd1d1d1d1ull
#define LPP 0xb1b1b1b1ull

static void link_main(int r, int fd) {
  char g[8];
  snprintf(g, sizeof g, "%d", r);
  setenv("RANK", g, 1);
  setenv("NCCL_WATCHDOG_HOSTNAME", r < 2 ? "hosta" : "hostb", 1);
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm dp, pp;
  wdh_comm_init(&dp, &p, LDP, "dp", 2, 4, r);
  wdh_comm_init(&pp, &p, LPP, "pp", 2, 4, r);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&dp, NULL, &cfg, 4);
  wdh_run_ops(&pp, NULL, &cfg, 2);
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  if (r == 1 || r == 2) {
    wdh_op_cfg_default(&cfg);
    cfg.kind = r == 1 ? WDH_OP_SEND : WDH_OP_RECV;
    cfg.peer = r == 1 ? 2 : 1;
    cfg.n_channels = 1;
    cfg.hang_channel = 0;
    cfg.hang_step = 1;
    wdh_op op;
    wdh_op_enqueue(&pp, &cfg, &op);
    wdh_op_proxy(&op);
    wdh_op_finish(&op);
  } else {
    wdh_sleep_ms(300); /* they reach dp after the link died */
    hang_in(&dp);
  }
  for (;;) pause();
}

static int case_deadlink(const char *az) {
  char *dir = wdh_scenario_dir("joblink", "1s", "100ms");
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
  pid_t pids[4];
  run_job(4, link_main, dir, 500, pids);
  char cmd[2048], first[4096];
  int linkline = report(az, dir, first, sizeof first,
                        "dead link between rank 1 (host hosta) and rank 2 (host hostb) on channel 0");
  WDH_CHECK(strncmp(first, "JOB: root cause rank ", 21) == 0, "first line: %s", first);
  WDH_CHECK(strstr(first, "dead_link") != NULL, "the root is not the dead link: %s", first);
  WDH_CHECK(strstr(first, "of pp (global rank 1 on host hosta") ||
                strstr(first, "of pp (global rank 2 on host hostb"),
            "the root is not an end of the link: %s", first);
  WDH_CHECK(strstr(first, "ranks 0,3 of dp wait in AllReduce") != NULL, "chain from dp: %s", first);
  WDH_CHECK(linkline, "no line names both ends of the link, their hosts and the channel");
  snprintf(cmd, sizeof cmd, "'%s' -q --json '%s' > '%s/report.json'", az, dir, dir);
  WDH_CHECK(system(cmd) == 0, "analyzer --json");
  char path[1024];
  snprintf(path, sizeof path, "%s/report.json", dir);
  cJSON *j = wdh_json_load(path);
  WDH_CHECK(j != NULL, "no JSON report");
  int ends = 0;
  cJSON *c;
  cJSON *comms = j ? cJSON_GetObjectItem(j, "comms") : NULL;
  cJSON_ArrayForEach(c, comms) {
    cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(c, "suspects")) {
      const char *reason = wdh_jstr(s, "reason");
      if (!reason || strcmp(reason, "dead_link")) continue;
      int rank = (int)wdh_jnum(s, "rank", -1);
      const char *host = wdh_jstr(s, "host");
      WDH_CHECK(rank == 1 || rank == 2, "dead_link end %d", rank);
      WDH_CHECK(host && !strcmp(host, rank == 1 ? "hosta" : "hostb"), "host of %d: %s", rank,
                host ? host : "(none)");
      WDH_CHECK(wdh_jnum(s, "linkPeer", -1) == 3 - rank, "linkPeer of %d", rank);
      WDH_CHECK(wdh_jnum(s, "globalRank", -1) == rank, "globalRank of %d", rank);
      ends++;
    }
  }
  WDH_CHECK(ends == 2, "%d dead_link ends, expected 2", ends);
  wdh_json_free(j);
  unlink(path);
  return wdh_scenario_end("joblink", dir);
}

int main(void) {
  if (!wdh_plugin_path()) return 77;
  const char *az = getenv("WDH_ANALYZER");
  if (!az || access(az, X_OK) != 0) return 77;
  int rc = case_root(az);
  rc |= case_deadlock(az);
  rc |= case_deadlink(az);
  return rc;
}
