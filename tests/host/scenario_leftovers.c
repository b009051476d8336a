/*
 * A node that runs job after job without an epilog: what ended processes and earlier jobs left
 * in the ring directory besides ring files. The node's first local rank sweeps it at start: the
 * metrics file of a process that ended (a textfile collector would export it as live) goes once
 * it is a minute old, relay files (triggers, heartbeats, verdict lines) once they are 6 h old;
 * the metrics file of a live process, a fresh one, and younger relay files stay; the log says
 * what was removed. Before: all of them stayed for good.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl_host.h"

static char g_dir[4096];

static void plant(const char *name, long age_s) {
  char p[4300];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  FILE *f = fopen(p, "w");
  if (f) fputs("x 1\n", f), fclose(f);
  struct timespec ts[2];
  clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= age_s;
  ts[1] = ts[0];
  utimensat(AT_FDCWD, p, ts, 0);
}

static int there(const char *name) {
  char p[4300];
  snprintf(p, sizeof p, "%s/%s", g_dir, name);
  return access(p, F_OK) == 0;
}

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_scenario_dir("leftovers", "10s", "50ms");
  snprintf(g_dir, sizeof g_dir, "%s", dir);
  setenv("NCCL_WATCHDOG_HOSTNAME", "lefthost", 1);
  unsetenv("LOCAL_RANK");
  /* A process that ended: its pid, reaped. */
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  char stale[128], fresh[128], live[128], other[128];
  snprintf(stale, sizeof stale, "nccl-watchdog-lefthost-%d.prom", (int)dead);
  snprintf(live, sizeof live, "nccl-watchdog-lefthost-%d.prom", (int)getppid());
  snprintf(other, sizeof other, "nccl-watchdog-otherhost-%d.prom", (int)dead);
  plant(stale, 120);
  plant(live, 120);
  plant(other, 120);
  /* Its pid's file written moments ago: not yet a minute without a rewrite. */
  pid_t dead2 = fork();
  if (dead2 == 0) _exit(0);
  waitpid(dead2, NULL, 0);
  snprintf(fresh, sizeof fresh, "nccl-watchdog-lefthost-%d.prom", (int)dead2);
  plant(fresh, 0);
  plant("poller-oldjob.alive", 7 * 3600);
  plant("trigger-oldjob-3.trigger", 7 * 3600);
  plant("verdict-oldjob-3.line", 7 * 3600);
  plant("verdict-recentjob-1.line", 3600);

  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) return 1;
  wdh_comm c;
  wdh_comm_init(&c, &p, 0x1ef7ull, "leftovers", 1, 2, 0);
  for (int i = 0; i < 60 && wdh_log_contains(NCCL_LOG_WARN, "removed from this node's ring directory") < 1; i++)
    usleep(50 * 1000);
  WDH_CHECK(wdh_log_contains(NCCL_LOG_WARN, "removed from this node's ring directory 1 metrics file of ended "
                                            "processes (no longer exported as live) and 3 relay files") == 1,
            "the sweep did not say it removed 1 metrics file and 3 relay files");
  WDH_CHECK(!there(stale), "the metrics file of an ended process is still there");
  WDH_CHECK(there(live), "the metrics file of a live process was removed");
  WDH_CHECK(there(fresh), "a metrics file rewritten moments ago was removed");
  WDH_CHECK(there(other), "another host's metrics file was removed");
  WDH_CHECK(!there("poller-oldjob.alive") && !there("trigger-oldjob-3.trigger") && !there("verdict-oldjob-3.line"),
            "relay files 7 h old are still there");
  WDH_CHECK(there("verdict-recentjob-1.line"), "a relay file an hour old was removed");
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  return wdh_scenario_end("leftovers", dir);
}
