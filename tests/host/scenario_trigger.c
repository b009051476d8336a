/*
 * Scenario 11: the job-wide trigger path. Three processes (this program re-executed in a helper
 * mode) share one dump directory and one communicator; rank 1 hangs an op. Its watchdog writes a
 * `stall` dump and a trigger file; the two other processes' watchdogs each write one `peer` dump
 * naming the trigger. The hanging process writes no peer dump for its own trigger.
 * "takeover": two simulated nodes (a ring directory each). On node A, LOCAL_RANK 0 (the node's
 * poller of the shared directory) is SIGKILLed before the hang; on node B rank 2 hangs. Rank 1,
 * node A's LOCAL_RANK 1, finds the poller's heartbeat stale, polls the shared directory itself
 * and answers the episode with its peer dump.
 * "groups": torchft's replica groups, each under a torchrun of its own (pytorch/torchft's
 * examples; torch/distributed/run.py sets LOCAL_RANK per agent), two of them on one node: ranks
 * 0, 1 are group A's LOCAL_RANK 0, 1 and ranks 2, 3 group B's. Of the two LOCAL_RANK 0 only one
 * may poll the shared directory: the other says it reads the node's relay. The one that polls is
 * SIGKILLed; one survivor of the node takes its place (it logs the takeover and its dump says
 * it polls), the others do not, and the episode of rank 1's hang is answered by every survivor.
 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_host.h"

#define NPROC 3
#define HANG_RANK 1
#define COMM_ID 0x7777000011112222ull

static int own_dump(const char *dir, const char *reason) {
  char *paths[16];
  int n = wdh_list_dumps(dir, reason, paths, 16), found = 0;
  char key[32];
  snprintf(key, sizeof(key), "-%d-", (int)getpid());
  for (int i = 0; i < n && i < 16; i++)
    if (strstr(strrchr(paths[i], '/'), key)) found++;
  wdh_free_paths(paths, n < 16 ? n : 16);
  return found;
}

static void touch(const char *path) {
  FILE *f = fopen(path, "w");
  if (f) fclose(f);
}

/* Until end: whether this process wrote a dump of that reason. */
static int wait_own(const char *dir, const char *reason, uint64_t end) {
  while (!own_dump(dir, reason) && wdh_now_ns() < end) wdh_sleep_ms(20);
  return own_dump(dir, reason) > 0;
}

/* The plugin loaded, the communicator made and five operations through it. 0, or 2. */
static int start_rank(wdh_plugin *p, wdh_comm *c, const char *name, int nnodes, int nranks, int rank) {
  if (wdh_load(p, wdh_plugin_path(), 0) != 0) return 2;
  wdh_comm_init(c, p, COMM_ID, name, nnodes, nranks, rank);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_op op;
  for (int i = 0; i < 5; i++) wdh_op_run(c, &cfg, &op);
  return 0;
}

/* The hanging rank: an operation stuck on channel 0 until `peers` peer dumps answered it (or
 * end), then a little longer, then resumed. */
static void hang_until_answered(wdh_comm *c, const char *dir, int peers, uint64_t end) {
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.hang_channel = 0;
  wdh_op op;
  wdh_op_enqueue(c, &cfg, &op);
  wdh_op_proxy(&op);
  while (wdh_list_dumps(dir, "peer", NULL, 0) < peers && wdh_now_ns() < end) wdh_sleep_ms(20);
  wdh_sleep_ms(200);
  wdh_op_resume(&op);
}

static int child_main(int rank, const char *dir) {
  alarm(30);
  const char *path = wdh_plugin_path();
  wdh_plugin p;
  if (wdh_load(&p, path, 0) != 0) return 2;
  wdh_comm c;
  wdh_comm_init(&c, &p, COMM_ID, "trigger", NPROC, NPROC, rank);
  wdh_proxy *px = wdh_proxy_create();
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, px, &cfg, 10);
  wdh_proxy_destroy(px);
  wdh_op op;
  int rc = 0;
  /* Every process has traffic in its rings before the hang: the peer dumps' summaries are
   * checked for it (a slow start under TSan once answered the trigger with empty rings). */
  char mark[1024];
  snprintf(mark, sizeof mark, "%s/ready-%d", dir, rank);
  touch(mark);
  if (rank == HANG_RANK) {
    uint64_t ready_by = wdh_now_ns() + 10000000000ull;
    for (int r = 0; r < NPROC; r++) {
      snprintf(mark, sizeof mark, "%s/ready-%d", dir, r);
      while (access(mark, F_OK) != 0 && wdh_now_ns() < ready_by) wdh_sleep_ms(5);
    }
    cfg.hang_channel = 1;
    wdh_op_enqueue(&c, &cfg, &op);
    wdh_op_proxy(&op);
    uint64_t end = wdh_now_ns() + 10000000000ull;
    while (!own_dump(dir, "stall") && wdh_now_ns() < end) wdh_sleep_ms(10);
    if (!own_dump(dir, "stall")) rc = 4;
    /* Stay alive until the peers answered, so nothing races with our exit. */
    while (wdh_list_dumps(dir, "peer", NULL, 0) < NPROC - 1 && wdh_now_ns() < end)
      wdh_sleep_ms(10);
    wdh_sleep_ms(300); /* several polls: a peer dump for our own trigger would show now */
    wdh_op_resume(&op);
  } else {
    uint64_t end = wdh_now_ns() + 10000000000ull;
    while (!own_dump(dir, "peer") && wdh_now_ns() < end) wdh_sleep_ms(10);
    if (!own_dump(dir, "peer")) rc = 5;
    wdh_sleep_ms(300); /* one trigger must give one peer dump, not one per poll */
  }
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  if (wdh_failures()) rc = 6;
  return rc;
}

static int takeover_child(int rank, const char *dir) {
  alarm(30);
  char ring[1024];
  snprintf(ring, sizeof ring, "%s/ring-%s", dir, rank == 2 ? "b" : "a");
  setenv("NCCL_WATCHDOG_RING_DIR", ring, 1);
  setenv("LOCAL_RANK", rank == 1 ? "1" : "0", 1);
  setenv("NCCL_WATCHDOG_TRIGGER_POLL", "200ms", 1);
  wdh_plugin p;
  wdh_comm c;
  if (start_rank(&p, &c, "takeover", 2, NPROC, rank) != 0) return 2;
  if (rank == 0) { /* node A's poller dies: no epilog, no dump */
    wdh_sleep_ms(300);
    raise(SIGKILL);
  }
  int rc = 0;
  uint64_t end = wdh_now_ns() + 15000000000ull;
  if (rank == 2) {
    wdh_sleep_ms(2500); /* node A's survivor has had time to miss the heartbeat */
    hang_until_answered(&c, dir, 1, end);
  } else {
    if (!wait_own(dir, "peer", end)) rc = 5;
    if (!wdh_log_contains(NCCL_LOG_INFO, "trigger poller is gone")) rc = 7;
  }
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  return rc;
}

#define GROUPS_NPROC 4
#define GROUPS_HANG 1

/* Exit codes: 5 no dump, 8 the election's line wrong, 9 the dump's watch.poller not whether
 * this process took over. */
static int groups_child(int rank, const char *dir) {
  alarm(30);
  setenv("LOCAL_RANK", rank % 2 ? "1" : "0", 1);
  setenv("TORCHELASTIC_RUN_ID", rank < 2 ? "replica-a" : "replica-b", 1);
  setenv("NCCL_WATCHDOG_TRIGGER_POLL", "200ms", 1);
  wdh_plugin p;
  wdh_comm c;
  if (start_rank(&p, &c, "groups", 1, GROUPS_NPROC, rank) != 0) return 2;
  int rc = 0;
  int told = wdh_log_contains(NCCL_LOG_INFO, "another process of this job on this node polls");
  char mark[1024];
  if (rank % 2 == 0) {
    /* The two LOCAL_RANK 0: each says whether it lost the election, by a file of its own. */
    snprintf(mark, sizeof mark, "%s/elected-%d-%d", dir, rank, !told);
    touch(mark);
    if (!told) { /* the poller: its node loses it */
      wdh_sleep_ms(300);
      raise(SIGKILL);
    }
  } else if (told) {
    rc = 8; /* LOCAL_RANK 1 never stood */
  }
  uint64_t end = wdh_now_ns() + 15000000000ull;
  if (rank == GROUPS_HANG) {
    wdh_sleep_ms(2500); /* the poller's heartbeat is stale by now */
    hang_until_answered(&c, dir, 2, end);
    if (!own_dump(dir, "stall")) rc = 5; /* written before the episode its peers answered */
  } else if (!wait_own(dir, "peer", end)) {
    rc = 5;
  }
  /* One survivor takes the dead poller's place, whichever claims the lock first: says so by a
   * file of its own. */
  int took = wdh_log_contains(NCCL_LOG_INFO, "trigger poller is gone");
  snprintf(mark, sizeof mark, "%s/took-%d-%d", dir, rank, took);
  touch(mark);
  char *paths[4];
  int n = wdh_list_dumps(dir, rank == GROUPS_HANG ? "stall" : "peer", paths, 4);
  char key[32];
  snprintf(key, sizeof key, "-%d-", (int)getpid());
  for (int i = 0; i < n && i < 4; i++) {
    if (!strstr(strrchr(paths[i], '/'), key)) continue;
    cJSON *j = wdh_json_load(paths[i]);
    cJSON *pl = j ? (cJSON *)wdh_jpath(j, "trigger.watch.poller") : NULL;
    if (rc == 0 && (!pl || cJSON_IsTrue(pl) != took)) rc = 9;
    wdh_json_free(j);
  }
  wdh_free_paths(paths, n < 4 ? n : 4);
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  return rc;
}

/* NPROC copies of this program, re-executed as `self flag rank dir`. */
static void spawn_n(const char *self, const char *flag, const char *dir, pid_t *pids, int nproc) {
  for (int r = 0; r < nproc; r++) {
    fflush(NULL);
    pids[r] = fork();
    if (pids[r] == 0) {
      char rank[16];
      snprintf(rank, sizeof(rank), "%d", r);
      execl("/proc/self/exe", self, flag, rank, dir, (char *)NULL);
      _exit(127);
    }
  }
}

static void spawn_ranks(const char *self, const char *flag, const char *dir, pid_t *pids) {
  spawn_n(self, flag, dir, pids, NPROC);
}

static int groups(char *self) {
  char *dir = wdh_scenario_dir("trigger-groups", "300ms", "50ms");
  pid_t pids[GROUPS_NPROC];
  spawn_n(self, "--groups-child", dir, pids, GROUPS_NPROC);
  int killed = 0;
  for (int r = 0; r < GROUPS_NPROC; r++) {
    int st = 0;
    wdh_wait_child(pids[r], 40000, &st);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && r % 2 == 0) {
      killed++;
      continue;
    }
    WDH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "rank %d: status 0x%x (exit %d: 5 no dump, 8 LOCAL_RANK 1 said it lost an election, 9 "
              "watch.poller not whether it took over)",
              r, st, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  }
  WDH_CHECK(killed == 1, "%d of the two LOCAL_RANK 0 polled (and were killed), expected exactly 1", killed);
  /* Each LOCAL_RANK 0 left its mark: one elected, one not. */
  char mark[1024];
  int elected = 0, not_elected = 0;
  for (int r = 0; r < GROUPS_NPROC; r += 2) {
    snprintf(mark, sizeof mark, "%s/elected-%d-1", dir, r);
    elected += access(mark, F_OK) == 0;
    snprintf(mark, sizeof mark, "%s/elected-%d-0", dir, r);
    not_elected += access(mark, F_OK) == 0;
  }
  WDH_CHECK(elected == 1 && not_elected == 1, "%d LOCAL_RANK 0 polled and %d read the relay, expected 1 and 1",
            elected, not_elected);
  int took = 0;
  for (int r = 0; r < GROUPS_NPROC; r++) {
    snprintf(mark, sizeof mark, "%s/took-%d-1", dir, r);
    took += access(mark, F_OK) == 0;
  }
  WDH_CHECK(took == 1, "%d survivors took the dead poller's place, expected exactly 1", took);
  WDH_CHECK(wdh_list_dumps(dir, "peer", NULL, 0) == 2, "%d peer dumps, expected the 2 survivors'",
            wdh_list_dumps(dir, "peer", NULL, 0));
  return wdh_scenario_end("scenario.trigger groups", dir);
}

static int takeover(char *self) {
  char *dir = wdh_scenario_dir("trigger-takeover", "300ms", "50ms");
  pid_t pids[NPROC];
  spawn_ranks(self, "--takeover-child", dir, pids);
  for (int r = 0; r < NPROC; r++) {
    int st = 0;
    wdh_wait_child(pids[r], 40000, &st);
    if (r == 0)
      WDH_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "node A's poller: status 0x%x", st);
    else
      WDH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: status 0x%x (exit %d: 5 no peer dump, 7 no "
                "takeover logged)", r, st, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  }
  return wdh_scenario_end("scenario.trigger takeover", dir);
}

int main(int argc, char **argv) {
  if (argc == 4 && !strcmp(argv[1], "--child")) return child_main(atoi(argv[2]), argv[3]);
  if (argc == 4 && !strcmp(argv[1], "--takeover-child")) return takeover_child(atoi(argv[2]), argv[3]);
  if (argc == 2 && !strcmp(argv[1], "takeover")) return wdh_plugin_path() ? takeover(argv[0]) : 77;
  if (argc == 4 && !strcmp(argv[1], "--groups-child")) return groups_child(atoi(argv[2]), argv[3]);
  if (argc == 2 && !strcmp(argv[1], "groups")) return wdh_plugin_path() ? groups(argv[0]) : 77;
  if (!wdh_plugin_path()) return 77;
  char *dir = wdh_scenario_dir("trigger", "300ms", "50ms");
  pid_t pids[NPROC];
  spawn_ranks(argv[0], "--child", dir, pids);
  uint64_t end = wdh_now_ns() + 40000000000ull;
  for (int r = 0; r < NPROC; r++) {
    int st = 0;
    uint64_t now = wdh_now_ns();
    wdh_wait_child(pids[r], now < end ? (unsigned)((end - now) / 1000000) : 0, &st);
    WDH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: status 0x%x (exit %d, signal %d)",
              r, st, WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  }

  char *paths[16];
  int n = wdh_list_dumps(dir, "stall", paths, 16);
  WDH_CHECK(n == 1, "%d stall dumps, expected 1 (from rank %d)", n, HANG_RANK);
  if (n >= 1) {
    cJSON *j = wdh_json_load(paths[0]);
    WDH_CHECK(j && wdh_jnum(j, "pid", -1) == pids[HANG_RANK], "stall dump pid %g, hang pid %d",
              j ? wdh_jnum(j, "pid", -1) : -1, (int)pids[HANG_RANK]);
    WDH_CHECK(j && wdh_jnum(j, "trigger.stalls.0.rank", -1) == HANG_RANK, "stalled rank");
    /* The process that opened the episode dumps whole rings. */
    cJSON *pr = j ? (cJSON *)wdh_jpath(j, "comms.0.proxyRing.records") : NULL;
    WDH_CHECK(cJSON_GetArraySize(pr) > 64, "the stall dump's proxy ring holds %d records, expected "
              "the whole ring", cJSON_GetArraySize(pr));
    wdh_json_free(j);
  }
  wdh_free_paths(paths, n < 16 ? n : 16);

  n = wdh_list_dumps(dir, "peer", paths, 16);
  WDH_CHECK(n == NPROC - 1, "%d peer dumps, expected %d", n, NPROC - 1);
  int from[NPROC] = {0};
  for (int i = 0; i < n && i < 16; i++) {
    WDH_CHECK(wdh_validate_dump(paths[i]) == 0, "%s does not validate", paths[i]);
    /* Summaries are written compressed by default (NCCL_WATCHDOG_COMPRESS=peer). */
    size_t plen = strlen(paths[i]);
    WDH_CHECK(plen > 8 && strcmp(paths[i] + plen - 8, ".json.gz") == 0, "%s: a peer summary not compressed",
              paths[i]);
    cJSON *j = wdh_json_load(paths[i]);
    WDH_CHECK(j != NULL, "cannot parse %s", paths[i]);
    if (!j) continue;
    pid_t pid = (pid_t)wdh_jnum(j, "pid", -1);
    for (int r = 0; r < NPROC; r++)
      if (pids[r] == pid) from[r]++;
    const char *file = wdh_jstr(j, "trigger.file");
    WDH_CHECK(file && !strcmp(file, "episode-1.trigger"), "trigger.file %s", file ? file : "(none)");
    WDH_CHECK(wdh_jnum(j, "trigger.origin.pid", -1) == pids[HANG_RANK], "origin pid %g",
              wdh_jnum(j, "trigger.origin.pid", -1));
    WDH_CHECK(wdh_jnum(j, "trigger.origin.stalls.0.seq", -1) == 10, "origin stall seq %g",
              wdh_jnum(j, "trigger.origin.stalls.0.seq", -1));
    const char *reason = wdh_jstr(j, "reason");
    WDH_CHECK(reason && !strcmp(reason, "peer"), "reason %s", reason ? reason : "(none)");
    /* A peer dump is a summary: the newest NCCL_WATCHDOG_PEER_RECORDS (64) of each ring, the
     * rest counted as lost. */
    cJSON *pr = (cJSON *)wdh_jpath(j, "comms.0.proxyRing.records");
    WDH_CHECK(cJSON_GetArraySize(pr) == 64, "a peer dump's proxy ring holds %d records, expected 64",
              cJSON_GetArraySize(pr));
    WDH_CHECK(wdh_jnum(j, "comms.0.proxyRing.lost", 0) + 64 >= wdh_jnum(j, "comms.0.proxyRing.written", 0),
              "the records left out are not counted as lost");
    WDH_CHECK(wdh_jnum(j, "config.peerRecords", -1) == 64, "config.peerRecords");
    wdh_json_free(j);
  }
  wdh_free_paths(paths, n < 16 ? n : 16);
  for (int r = 0; r < NPROC; r++)
    WDH_CHECK(from[r] == (r == HANG_RANK ? 0 : 1), "rank %d wrote %d peer dumps", r, from[r]);

  /* *.json in the dump directory is dumps only: every one validates against the dump schema,
   * and the trigger file is there under its own extension. */
  int njson = 0, ntrig = 0;
  DIR *d;
  struct dirent *e;
  char *all[64];
  int nall = wdh_list_dumps(dir, NULL, all, 64);
  for (int i = 0; i < nall && i < 64; i++) {
    WDH_CHECK(wdh_validate_dump(all[i]) == 0, "%s in the dump directory is not a dump", all[i]);
    njson++;
  }
  wdh_free_paths(all, nall < 64 ? nall : 64);
  /* Nothing else ends in .json (or .json.gz: peer summaries are compressed by default) anywhere
   * in the dump directory's tree. */
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "test $(find '%s' -name '*.json' -o -name '*.json.gz' | wc -l) -eq %d", dir, NPROC);
  WDH_CHECK(system(cmd) == 0, "*.json files besides the dumps in %s", dir);
  WDH_CHECK(njson == NPROC, "%d *.json files, expected the %d dumps", njson, NPROC);
  /* One trigger for the episode, in its own directory. */
  char tdir[1024];
  snprintf(tdir, sizeof tdir, "%s/triggers", dir);
  d = opendir(tdir);
  while (d && (e = readdir(d)) != NULL) ntrig += e->d_name[0] != '.';
  if (d) closedir(d);
  WDH_CHECK(ntrig == 1, "%d trigger files, expected 1 (episode-1.trigger)", ntrig);

  return wdh_scenario_end("scenario_trigger", dir);
}
