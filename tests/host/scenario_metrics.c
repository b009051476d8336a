/*
 * Live metrics (NCCL_WATCHDOG_METRICS): a process with two communicators rewrites its Prometheus
 * file every 200 ms. Parsed with the Prometheus client library's own parser
 * (tests/tools/check_metrics.py): the counters are the host's operations, the stuck one is in
 * flight and its seconds without progress grow, a stall and its dump are counted. The status
 * command names the waiting communicator; the file is gone after a normal exit.
 *
 * NCCL's order, as the test host plays it (nccl_host.h): the application thread's events from
 * ncclEnqueueCheck (enqueue.cc), the proxy's ProxyOps and steps from ncclProxyOpToArgs (proxy.cc)
 * and sendProxyProgress / recvProxyProgress (transport/net.cc).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_host.h"

static int run(const char *cmd, char *out, size_t len) {
  FILE *p = popen(cmd, "r");
  size_t n = 0;
  if (!p) return -1;
  while (n + 1 < len && fgets(out + n, (int)(len - n), p)) n += strlen(out + n);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void) {
  const char *path = wdh_plugin_path();
  const char *src = getenv("WDH_SOURCE_DIR"), *az = getenv("WDH_ANALYZER");
  if (!path || !src || !az) return 77;
  char *dir = wdh_scenario_dir("metrics", "1s", "50ms");
  setenv("NCCL_WATCHDOG_METRICS", "200ms", 1);
  setenv("NCCL_WATCHDOG_HOSTNAME", "mhost", 1);
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
  setenv("RANK", "5", 1);
  wdh_plugin p;
  WDH_CHECK(wdh_load(&p, path, 0) == 0, "load");
  wdh_comm dp, pp;
  wdh_comm_init(&dp, &p, 0xd0d0ull, "dp", 1, 2, 0);
  wdh_comm_init(&pp, &p, 0xe0e0ull, "pp", 1, 2, 1);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&dp, NULL, &cfg, 30);
  wdh_op_cfg pc;
  wdh_op_cfg_default(&pc);
  pc.kind = WDH_OP_RECV;
  pc.peer = 0;
  pc.n_channels = 1;
  wdh_run_ops(&pp, NULL, &pc, 5);
  cfg.hang_channel = 0;
  wdh_op op;
  wdh_op_run(&dp, &cfg, &op); /* AllReduce seq 30 never finishes */
  wdh_sleep_ms(700);

  char file[1024], early[1100], cmd[4096], out[8192];
  snprintf(file, sizeof file, "%s/nccl-watchdog-mhost-%d.prom", dir, (int)getpid());
  WDH_CHECK(access(file, R_OK) == 0, "no metrics file %s", file);
  /* The file as it is now, before the stall (timeout 1 s): the checker's Python takes a while to
   * start on a loaded machine, and the file is rewritten every 200 ms meanwhile. */
  snprintf(early, sizeof early, "%s.early", file);
  size_t flen = 0;
  char *content = wdh_read_file(file, &flen);
  FILE *ef = content ? fopen(early, "w") : NULL;
  if (ef) {
    fwrite(content, 1, flen, ef);
    fclose(ef);
  }
  free(content);
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 '%s/tests/tools/check_metrics.py' '%s' "
           "'nccl_watchdog_ops_enqueued_total[comm_name=dp,func=AllReduce,rank=5,host=mhost]=31' "
           "'nccl_watchdog_ops_completed_total[comm_name=dp,func=AllReduce]=30' "
           "'nccl_watchdog_ops_inflight[comm_name=dp,comm_rank=0,nranks=2]=1' "
           "'nccl_watchdog_ops_inflight[comm_name=pp]=0' "
           "'nccl_watchdog_ops_completed_total[comm_name=pp,func=p2p]=5' "
           "'nccl_watchdog_seconds_since_progress[comm_name=dp]=>=0.4' "
           "'nccl_watchdog_stalls_detected_total[]=0' 2>&1",
           src, early);
  int rc = run(cmd, out, sizeof out);
  fputs(out, stderr);
  if (rc == 77) fprintf(stderr, "metrics: the Prometheus parser is missing; format not checked\n");
  else WDH_CHECK(rc == 0, "metrics file content (check_metrics.py exit %d)", rc);

  /* The status command: one line for this process, its dp communicator waiting. */
  char status[1024];
  snprintf(status, sizeof status, "%s", az);
  char *slash = strrchr(status, '/');
  if (slash) snprintf(slash + 1, sizeof status - (size_t)(slash + 1 - status), "nccl-watchdog-status");
  snprintf(cmd, sizeof cmd, "'%s' --slow=0.3 '%s'", status, dir);
  rc = run(cmd, out, sizeof out);
  fputs(out, stderr);
  WDH_CHECK(rc == 1, "status exit %d, expected 1 (a rank waiting)", rc);
  WDH_CHECK(strstr(out, "mhost") && strstr(out, "waiting") &&
                strstr(out, "dp (rank 0/2): 1 in flight"),
            "status line does not show dp waiting");
  WDH_CHECK(strstr(out, "\n5 ") != NULL, "status line does not start with global rank 5");

  /* The stall (timeout 1 s) and its dump are counted in a later file. */
  WDH_CHECK(wdh_wait_dumps(dir, "stall", 1, 5000) >= 1, "no stall dump");
  wdh_sleep_ms(500);
  snprintf(cmd, sizeof cmd,
           "/usr/bin/python3 '%s/tests/tools/check_metrics.py' '%s' "
           "'nccl_watchdog_stalls_detected_total[]=1' 'nccl_watchdog_dumps_written_total[]=>=1' 2>&1",
           src, file);
  rc = run(cmd, out, sizeof out);
  fputs(out, stderr);
  WDH_CHECK(rc == 0 || rc == 77, "stall counters (check_metrics.py exit %d)", rc);

  wdh_op_resume(&op);
  wdh_comm_finalize(&pp);
  wdh_comm_finalize(&dp);
  wdh_unload(&p);
  WDH_CHECK(access(file, F_OK) != 0, "the metrics file outlived the plugin");
  unlink(early);
  unsetenv("NCCL_WATCHDOG_METRICS");
  unsetenv("NCCL_WATCHDOG_HOSTNAME");
  return wdh_scenario_end("metrics", dir);
}
