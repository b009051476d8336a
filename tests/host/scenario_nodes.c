/*
 * Nodes of their own, one dump directory: what a job on cloned nodes or in containers leaves.
 * Two nodes of two ranks each, every node in Linux namespaces of its own: one host name for both
 * (cloned images: "worker"), its own pid space (each node's ranks have the same pids), its own
 * /dev/shm (the ring files stay on the node, as on a real one), its own boot id, its monotonic
 * clock moved by a time namespace, and node 1's wall clock 5 s ahead (NTP gone wrong; played by
 * wdh_clockshift.so, Linux having no namespace for the wall clock). Global ranks 0-1 on node 0,
 * 2-3 on node 1 (RANK and LOCAL_RANK as torchrun sets them: wdh_launcher_env). Each rank plays
 * NCCL's order as the test host does (nccl_host.h: ncclEnqueueCheck in enqueue.cc, the proxy's
 * sendProxyProgress / recvProxyProgress in transport/net.cc); a hung AllReduce is one whose
 * peer's data never comes (a receive step left in RecvWait).
 *   healthy  every rank runs 5 AllReduces and is snapshotted (SIGUSR1): OK; the report says the
 *            host name names two machines and sets node 1's clock against the file system's.
 *   hang     global rank 3 (node 1) never enters AllReduce seq 5: named, the four ranks present
 *            (never merged by host name and pid), no deadlock; by hand and by the automatic
 *            verdict (run beside the plugin on the node that opened the episode).
 *   killed   global rank 3 (node 1, its clock 5 s ahead) is SIGKILLed 55 ms before the others
 *            enter AllReduce seq 5: node 1's poller turns its ring file into a post-mortem dump,
 *            and rank 3 is named dead, never said to have lived on after the others entered.
 *   straggler healthy, one AllReduce a second; global rank 3 (node 1, its clock 5 s *behind*)
 *            enters each 0.8 s after the others: named a straggler (raw clocks would make it
 *            4.2 s early), OK otherwise.
 * The analyzer must tell the nodes apart by their boot ids and compare no clock across them
 * without an offset. Needs root (namespaces): skipped (77) where they are refused.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_host.h"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

#define NODES 2
#define PER_NODE 2
#define NR (NODES * PER_NODE)
#define COMM 0x0de5000000000042ull
#define VICTIM 3

static int g_node, g_hang, g_killed, g_straggler;

static void rank_main(int local, int fd) {
  int rank = g_node * PER_NODE + local;
  wdh_launcher_env(rank, local, NR);
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm c;
  wdh_comm_init(&c, &p, COMM, "default_pg", NODES, NR, rank);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  if (g_straggler) { /* one AllReduce a second, global rank 3 always 0.8 s after the others */
    if (rank == VICTIM) wdh_sleep_ms(800);
    for (int i = 0; i < 5; i++) {
      wdh_run_ops(&c, NULL, &cfg, 1);
      if (i < 4) wdh_sleep_ms(1000);
    }
  } else {
    wdh_run_ops(&c, NULL, &cfg, 5); /* AllReduce seq 0..4 */
  }
  char ok = 1;
  if (g_killed) { /* ready first: the victim is killed, then the others enter seq 5 */
    if (write(fd, &ok, 1) != 1) _exit(1);
    const char *go = getenv("WDH_NODES_GO");
    while (go && access(go, F_OK) != 0) wdh_sleep_ms(2);
  }
  if ((g_hang || g_killed) && rank != VICTIM) {
    cfg.hang_channel = 0; /* the victim's data never comes */
    wdh_op op;
    wdh_op_enqueue(&c, &cfg, &op);
    wdh_op_proxy(&op);
  }
  if (!g_killed && write(fd, &ok, 1) != 1) _exit(1);
  for (;;) pause();
}

/* The node's first process (pid 1 of its pid namespace): its own mounts, name and boot, then its
 * ranks; answers the test's commands: 's' snapshot every rank, 'q' stop. */
static int node_init(int ctl, int ready) {
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64m") != 0 || sethostname("worker", 6) != 0)
    return 77;
  char boot[64], path[] = "/dev/shm/boot_id";
  snprintf(boot, sizeof boot, "0de5%04x-0000-4000-8000-%012x\n", g_node, (unsigned)getppid());
  int bf = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (bf < 0 || write(bf, boot, strlen(boot)) < 0) return 77;
  close(bf);
  if (mount(path, "/proc/sys/kernel/random/boot_id", NULL, MS_BIND, NULL) != 0) return 77;
  unsetenv("NCCL_WATCHDOG_RING_DIR"); /* the default, in the node's own /dev/shm */
  pid_t pids[PER_NODE];
  int n = wdh_fork_ranks(PER_NODE, rank_main, pids);
  char b = (char)n;
  if (write(ready, &b, 1) != 1) return 1;
  char cmd;
  while (read(ctl, &cmd, 1) == 1 && cmd != 'q') {
    if (cmd == 's')
      for (int r = 0; r < PER_NODE; r++) kill(pids[r], SIGUSR1);
    if (cmd == 'k' && pids[PER_NODE - 1] > 0) { /* the OOM killer: no handler, no dump */
      kill(pids[PER_NODE - 1], SIGKILL);
      waitpid(pids[PER_NODE - 1], NULL, 0);
      pids[PER_NODE - 1] = 0;
    }
  }
  wdh_kill_ranks(pids, PER_NODE);
  return 0;
}

/* argv: node K MODE CTL READY (after the namespaces were made, before its first process). */
static int node_main(char **argv) {
  g_node = atoi(argv[2]);
  g_hang = !strcmp(argv[3], "hang");
  g_killed = !strcmp(argv[3], "killed");
  g_straggler = !strcmp(argv[3], "straggler");
  int ctl = atoi(argv[4]), ready = atoi(argv[5]);
  pid_t init = fork();
  if (init < 0) return 1;
  if (init == 0) _exit(node_init(ctl, ready));
  int st = 0;
  waitpid(init, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* Node k: new namespaces, its monotonic clock moved (the time namespace takes its first child),
 * node 1's wall clock 5 s ahead, then this program again as the node. */
static pid_t start_node(const char *self, int k, const char *mode, int ctl, int ready) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  if (unshare(CLONE_NEWUTS | CLONE_NEWPID | CLONE_NEWNS) != 0) _exit(77);
  if (unshare(CLONE_NEWTIME) == 0) {
    int f = open("/proc/self/timens_offsets", O_WRONLY);
    char off[64];
    snprintf(off, sizeof off, "monotonic %d 0\n", 1000 * (k + 1));
    if (f >= 0) {
      if (write(f, off, strlen(off)) < 0) fprintf(stderr, "nodes: monotonic offset refused\n");
      close(f);
    }
  }
  const char *shift = getenv("WDH_CLOCKSHIFT");
  if (k == 1 && shift && *shift) { /* ahead; behind for the straggler, who is then early by it */
    setenv("LD_PRELOAD", shift, 1);
    setenv("WDH_WALL_SHIFT_MS", strcmp(mode, "straggler") ? "5000" : "-5000", 1);
  }
  char ks[8], cs[16], rs[16];
  snprintf(ks, sizeof ks, "%d", k);
  snprintf(cs, sizeof cs, "%d", ctl);
  snprintf(rs, sizeof rs, "%d", ready);
  execl(self, self, "node", ks, mode, cs, rs, (char *)NULL);
  _exit(1);
}

static char *report(const char *dir) {
  const char *az = getenv("WDH_ANALYZER");
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' '%s' 2>&1", az, dir);
  FILE *p = popen(cmd, "r");
  if (!p) return NULL;
  size_t cap = 1 << 16, len = 0;
  char *out = calloc(cap, 1);
  while (out && len + 1 < cap) {
    size_t got = fread(out + len, 1, cap - 1 - len, p);
    if (got == 0) break;
    len += got;
  }
  pclose(p);
  return out;
}

int main(int argc, char **argv) {
  if (argc > 5 && !strcmp(argv[1], "node")) return node_main(argv);
  const char *which = argc > 1 ? argv[1] : "healthy";
  int hang = !strcmp(which, "hang"), killed = !strcmp(which, "killed"), straggler = !strcmp(which, "straggler");
  if (!hang && !killed && !straggler && strcmp(which, "healthy")) return 2;
  const char *az = getenv("WDH_ANALYZER");
  if (!wdh_plugin_path() || !az || access(az, X_OK) != 0) return 77;
  if (geteuid() != 0) {
    fprintf(stderr, "scenario_nodes: SKIP: namespaces need root\n");
    return 77;
  }
  char self[4096];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) return 1;
  self[sl] = '\0';
  char *dir = wdh_scenario_dir("nodes", "1s", "100ms");
  /* The verdict without a human too (hang): run beside the plugin on the node that opens the
   * episode, over the shared directory. */
  if (hang || killed) {
    setenv("NCCL_WATCHDOG_VERDICT", "1", 1);
    setenv("NCCL_WATCHDOG_TRIGGER_POLL", "200ms", 1);
  }
  char go[4200];
  snprintf(go, sizeof go, "%s.go", dir); /* beside the dump directory, not in it */
  setenv("WDH_NODES_GO", go, 1);

  int ctl[NODES][2], ready[2];
  pid_t node[NODES];
  if (pipe(ready) != 0) return 1;
  for (int k = 0; k < NODES; k++) {
    if (pipe(ctl[k]) != 0) return 1;
    node[k] = start_node(self, k, which, ctl[k][0], ready[1]);
    close(ctl[k][0]);
  }
  close(ready[1]);
  int ranks = 0;
  char b;
  for (int k = 0; k < NODES && read(ready[0], &b, 1) == 1; k++) ranks += b;
  if (ranks != NR) {
    int st = 0, skip = 0;
    for (int k = 0; k < NODES; k++) {
      close(ctl[k][1]);
      wdh_wait_child(node[k], 5000, &st);
      skip |= WIFEXITED(st) && WEXITSTATUS(st) == 77;
    }
    if (skip) {
      fprintf(stderr, "scenario_nodes: SKIP: Linux namespaces refused here (unshare, mount)\n");
      wdh_rmtree(dir);
      free(dir);
      return 77;
    }
    WDH_CHECK(0, "%d of %d ranks ready on the nodes", ranks, NR);
    return wdh_scenario_end("scenario_nodes", dir);
  }

  char verdict[4200];
  snprintf(verdict, sizeof verdict, "%s/verdict-1.txt", dir);
  if (killed) {
    /* Rank 3 dies on node 1 (clock 5 s ahead) 55 ms before the others enter AllReduce seq 5. */
    if (write(ctl[1][1], "k", 1) != 1) WDH_CHECK(0, "node 1: no kill asked");
    wdh_sleep_ms(55);
    int gf = open(go, O_WRONLY | O_CREAT | O_EXCL, 0600);
    if (gf >= 0) close(gf);
  }
  if (hang || killed) {
    uint64_t end = wdh_now_ns() + 20000000000ull;
    while (access(verdict, F_OK) != 0 && wdh_now_ns() < end) wdh_sleep_ms(100);
    wdh_sleep_ms(500);
  } else {
    wdh_sleep_ms(300);
    for (int k = 0; k < NODES; k++)
      if (write(ctl[k][1], "s", 1) != 1) WDH_CHECK(0, "node %d: no snapshot asked", k);
    wdh_wait_dumps(dir, "signal", NR, 8000);
    wdh_sleep_ms(300);
  }
  for (int k = 0; k < NODES; k++) {
    if (write(ctl[k][1], "q", 1) != 1) WDH_CHECK(0, "node %d: not stopped", k);
    close(ctl[k][1]);
    int st = 0;
    WDH_CHECK(wdh_wait_child(node[k], 10000, &st), "node %d did not stop", k);
  }

  /* The dumps: one host name, equal pids across nodes, two boot ids. */
  char *paths[64];
  int np = wdh_list_dumps(dir, NULL, paths, 64);
  int same_pid = 0, boots = 0, worker = 0;
  char boot0[64] = "";
  int pid_of[NR];
  for (int r = 0; r < NR; r++) pid_of[r] = -1;
  for (int i = 0; i < np && i < 64; i++) {
    void *j = wdh_json_load(paths[i]);
    if (!j) continue;
    const char *host = wdh_jstr(j, "host"), *boot = wdh_jstr(j, "identity.bootId");
    int rk = (int)wdh_jnum(j, "identity.globalRank", -1);
    int pid = (int)wdh_jnum(j, "pid", -1);
    worker += host && !strcmp(host, "worker");
    if (boot && !boot0[0]) snprintf(boot0, sizeof boot0, "%s", boot);
    else if (boot && strcmp(boot, boot0)) boots = 2;
    if (rk >= 0 && rk < NR) pid_of[rk] = pid;
    wdh_json_free(j);
  }
  wdh_free_paths(paths, np < 64 ? np : 64);
  for (int r = 0; r < PER_NODE; r++)
    same_pid += pid_of[r] > 0 && pid_of[r] == pid_of[r + PER_NODE];
  int want = killed ? NR - 1 : NR; /* the killed rank wrote none (its ring file is salvaged) */
  WDH_CHECK(np >= want && worker >= want, "%d dumps, %d from host \"worker\"", np, worker);
  WDH_CHECK(boots == 2, "the dumps should carry two boot ids");
  WDH_CHECK(same_pid >= 1, "the nodes' ranks should share pids (their own pid spaces)");

  char *out = report(dir);
  WDH_CHECK(out != NULL, "no analyzer report");
  if (out) {
    fputs(out, stderr);
    char first[512];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(out, "\n"), out);
    if (killed) {
      WDH_CHECK(strstr(first, "HANG") && strstr(first, "rank 3") &&
                    (strstr(first, "post-mortem ring file") || strstr(first, "died")),
                "first line \"%s\" should name rank 3, dead", first);
      WDH_CHECK(!strstr(out, "lived on"), "no rank may be said to have lived on (clocks compared raw)");
      WDH_CHECK(wdh_list_dumps(dir, "postmortem", NULL, 0) >= 1,
                "node 1's poller should have turned rank 3's ring file into a post-mortem dump");
      char *v = wdh_read_file(verdict, NULL);
      WDH_CHECK(v && strstr(v, "rank 3") && !strstr(v, "lived on"),
                "the automatic verdict (%s) should name rank 3", v ? "verdict-1.txt" : "none written");
      free(v);
    }
    if (hang) {
      WDH_CHECK(strstr(first, "HANG") && strstr(first, "rank 3 never entered AllReduce seq 5"),
                "first line \"%s\" should name global rank 3", first);
      char *v = wdh_read_file(verdict, NULL);
      WDH_CHECK(v && strstr(v, "rank 3 never entered AllReduce seq 5") && strstr(v, "names 2 machines"),
                "the automatic verdict (%s) should name global rank 3 and tell the machines apart",
                v ? "verdict-1.txt" : "none written");
      free(v);
      WDH_CHECK(strstr(out, "present 0-3 (4)") != NULL, "the four ranks should be present, none merged");
      WDH_CHECK(strstr(out, "deadlock") == NULL, "no deadlock across the nodes");
    } else if (!killed) {
      WDH_CHECK(!strncmp(first, "OK", 2), "first line \"%s\" should be OK", first);
    }
    if (straggler) {
      const char *sl = strstr(out, "STRAGGLERS");
      WDH_CHECK(sl && strstr(sl, "global rank 3") && strstr(sl, "late"),
                "global rank 3, 0.8 s late on a node 5 s behind, should be named a straggler");
    }
    WDH_CHECK(strstr(out, "host name worker names 2 machines") != NULL,
              "the report should say the host name names two machines");
    const char *shift = getenv("WDH_CLOCKSHIFT");
    if (shift && *shift) {
      /* The offset is read against the file system's stamps, each dump's write delay included:
       * 5 s within 0.2 s (a loaded run read 4.9). */
      const char *cr = strstr(out, "clock read ");
      char dir[16] = "";
      double secs = 0;
      int got = cr ? sscanf(cr, "clock read %lf s %15s", &secs, dir) : 0;
      WDH_CHECK(got == 2 && secs >= 4.8 && secs <= 5.2 && !strcmp(dir, straggler ? "behind" : "ahead"),
                "the report should set node 1's clock right by 5 s (%s)", cr ? cr : "no \"clock read\"");
    }
    free(out);
  }
  unlink(go);
  char name[64];
  snprintf(name, sizeof name, "scenario_nodes %s", which);
  return wdh_scenario_end(name, dir);
}
