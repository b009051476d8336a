/*
 * Analyzer end to end: dumps written by the real plugin, driven by this host in several
 * processes (one per rank, sharing a dump directory and a communicator), are fed to
 * nccl-watchdog-analyze --json, and its suspects are checked:
 *   missing    rank 2 never started: no dump at all        -> rank 2 "missing"
 *   notentered rank 2 stops calling AllReduce               -> rank 2 "not_entered"
 *   mismatch   rank 2 enters AllReduce #S with another count -> rank 2 "args_mismatch"
 *   network    rank 1's recv from peer 0 stalls in RecvWait,
 *              the others completed the op                 -> rank 1 "network_stall"
 *   healthy    every rank snapshots itself with SIGUSR1    -> no suspect, verdict no_hang
 *   wrapped    like notentered, but ranks 0-1 have tiny rings that wrapped long before:
 *              the history they lost is not compared       -> only rank 2, "not_entered"
 */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_host.h"

#define NRANKS 4
#define HANG_SEQ 30

/* ------------------------------------------------------------------------------------------- */
/* Child: one rank. */

static int settled(const char *dir, int *last, uint64_t *since) {
  int n = wdh_list_dumps(dir, NULL, NULL, 0);
  uint64_t now = wdh_now_ns();
  if (n != *last) {
    *last = n;
    *since = now;
  }
  return n > 0 && now - *since > 1000000000ull;
}

static int child_main(const char *role, int rank, const char *dir, uint64_t comm_id, int nops) {
  alarm(40);
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) return 2;
  wdh_comm c;
  wdh_comm_init(&c, &p, comm_id, "az", NRANKS, NRANKS, rank);
  wdh_proxy *px = wdh_proxy_create();
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  for (int s = 0; s < nops; s++) {
    wdh_run_ops(&c, px, &cfg, 1);
    if (s % 8 == 0) {
      cfg.func = "AllGather"; /* some variety in the history */
      wdh_run_ops(&c, px, &cfg, 1);
      cfg.func = "AllReduce";
    }
  }
  /* NCCL completes a collective on no rank before every rank entered it (wdh_barrier: net.cc
   * recvProxyProgress waits for the peer's data): the history ends on
   * all ranks before the hang (a rank left behind, under TSan on a loaded machine, was still in
   * seq 326 when the others stalled in 400). */
  const char *bar = getenv("WDH_BARRIER");
  if (bar) wdh_barrier(bar, "history", rank, getenv("WDH_BARRIER_N") ? atoi(getenv("WDH_BARRIER_N")) : 0, 30000);
  wdh_op op;
  memset(&op, 0, sizeof(op));
  int hung = 0;
  if (!strcmp(role, "hang") || !strcmp(role, "mismatch") || !strcmp(role, "net")) {
    if (!strcmp(role, "mismatch")) cfg.count = 1024;
    cfg.hang_channel = !strcmp(role, "net") ? 1 : 0;
    cfg.hang_step = !strcmp(role, "net") ? 2 : 0;
    wdh_op_enqueue(&c, &cfg, &op);
    wdh_op_proxy(&op);
    hung = 1;
  } else if (!strcmp(role, "complete")) {
    wdh_run_ops(&c, px, &cfg, 1);
  } else if (!strcmp(role, "healthy")) {
    wdh_sleep_ms(100);
    kill(getpid(), SIGUSR1);
  } /* "skip": stops calling the collective */
  int last = -1;
  uint64_t since = wdh_now_ns(), end = since + 20000000000ull;
  while (!settled(dir, &last, &since) && wdh_now_ns() < end) wdh_sleep_ms(20);
  (void)hung;
  wdh_proxy_destroy(px);
  wdh_comm_finalize(&c);
  wdh_unload(&p);
  return wdh_failures() ? 3 : 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Parent. */

typedef struct sub {
  const char *name;
  const char *roles[NRANKS]; /* NULL: the rank never runs */
  const char *ring[NRANKS];  /* NCCL_WATCHDOG_RING_SIZE per rank, NULL = default */
  int nops;
} sub;

static const char *g_self;

static cJSON *run_analyzer(const char *dir) {
  const char *az = getenv("WDH_ANALYZER");
  char cmd[4096];
  snprintf(cmd, sizeof(cmd), "'%s' --json -q '%s'", az, dir);
  FILE *f = popen(cmd, "r");
  if (!f) return NULL;
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
    len += got;
    if (cap - len < 2) {
      cap *= 2;
      buf = realloc(buf, cap);
    }
  }
  int st = pclose(f);
  WDH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "analyzer exit status 0x%x", st);
  if (!buf) return NULL;
  buf[len] = 0;
  cJSON *j = cJSON_Parse(buf);
  if (!j) fprintf(stderr, "analyzer output is not JSON:\n%s\n", buf);
  free(buf);
  return j;
}

static cJSON *comm_of(cJSON *report, uint64_t comm_id) {
  cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(report, "comms")) {
    const char *id = wdh_jstr(c, "commId");
    if (id && strtoull(id, NULL, 16) == comm_id) return c;
  }
  return NULL;
}

/* Runs one sub-scenario and returns the analyzer's entry for its communicator (in *report). */
static cJSON *run_sub(const sub *s, uint64_t comm_id, cJSON **report, char **dir_out) {
  char *dir = wdh_tempdir(s->name);
  *dir_out = dir;
  char *bar = wdh_tempdir("analyze-barrier");
  int present = 0;
  for (int r = 0; r < NRANKS; r++) present += s->roles[r] != NULL;
  pid_t pids[NRANKS] = {0};
  for (int r = 0; r < NRANKS; r++) {
    if (!s->roles[r]) continue;
    fflush(NULL);
    pids[r] = fork();
    if (pids[r] == 0) {
      char n[16];
      snprintf(n, sizeof n, "%d", present);
      setenv("WDH_BARRIER", bar, 1);
      setenv("WDH_BARRIER_N", n, 1);
      setenv("NCCL_WATCHDOG_DUMP_DIR", dir, 1);
      if (s->ring[r]) setenv("NCCL_WATCHDOG_RING_SIZE", s->ring[r], 1);
      char rank[16], id[32], nops[16];
      snprintf(rank, sizeof(rank), "%d", r);
      snprintf(id, sizeof(id), "0x%llx", (unsigned long long)comm_id);
      snprintf(nops, sizeof(nops), "%d", s->nops);
      execl("/proc/self/exe", g_self, "--child", s->roles[r], rank, dir, id, nops, (char *)NULL);
      _exit(127);
    }
  }
  uint64_t end = wdh_now_ns() + 45000000000ull;
  for (int r = 0; r < NRANKS; r++) {
    if (!pids[r]) continue;
    int st = 0;
    uint64_t now = wdh_now_ns();
    wdh_wait_child(pids[r], now < end ? (unsigned)((end - now) / 1000000) : 0, &st);
    WDH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: rank %d status 0x%x", s->name, r, st);
  }
  wdh_rmtree(bar);
  free(bar);
  *report = run_analyzer(dir);
  WDH_CHECK(*report != NULL, "%s: no analyzer report", s->name);
  cJSON *c = *report ? comm_of(*report, comm_id) : NULL;
  WDH_CHECK(c != NULL, "%s: comm not in the report", s->name);
  return c;
}

/* The suspects as "rank:reason" pairs, for messages and checks. */
static int suspects(cJSON *comm, char *out, size_t len) {
  int n = 0;
  out[0] = 0;
  cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItem(comm, "suspects")) {
    size_t used = strlen(out);
    const char *reason = wdh_jstr(s, "reason");
    snprintf(out + used, len - used, "%s%d:%s", n ? " " : "", (int)wdh_jnum(s, "rank", -1),
             reason ? reason : "?");
    n++;
  }
  return n;
}

static int has_suspect(cJSON *comm, int rank, const char *reason) {
  cJSON *s;
  cJSON_ArrayForEach(s, cJSON_GetObjectItem(comm, "suspects")) {
    const char *r = wdh_jstr(s, "reason");
    if ((int)wdh_jnum(s, "rank", -1) == rank && r && !strcmp(r, reason)) return 1;
  }
  return 0;
}

static void finish(const sub *s, cJSON *report, char *dir) {
  if (wdh_check_failures()) {
    fprintf(stderr, "%s: dumps kept in %s\n", s->name, dir);
  } else {
    wdh_rmtree(dir);
  }
  free(dir);
  cJSON_Delete(report);
}

static void expect_one(const sub *s, uint64_t comm_id, int rank, const char *reason,
                       const char *verdict) {
  cJSON *report;
  char *dir;
  cJSON *c = run_sub(s, comm_id, &report, &dir);
  if (c) {
    char list[512];
    int n = suspects(c, list, sizeof(list));
    const char *v = wdh_jstr(c, "verdict");
    WDH_CHECK(v && !strcmp(v, verdict), "%s: verdict %s, expected %s", s->name, v ? v : "(none)",
              verdict);
    if (rank >= 0) {
      WDH_CHECK(has_suspect(c, rank, reason), "%s: expected suspect %d:%s, got [%s]", s->name,
                rank, reason, list);
      WDH_CHECK(n == 1, "%s: expected exactly one suspect, got [%s]", s->name, list);
    } else {
      WDH_CHECK(n == 0, "%s: expected no suspect, got [%s]", s->name, list);
    }
    printf("%s: verdict %s, suspects [%s]\n", s->name, v ? v : "(none)", list);
  }
  finish(s, report, dir);
}

int main(int argc, char **argv) {
  if (argc == 7 && !strcmp(argv[1], "--child"))
    return child_main(argv[2], atoi(argv[3]), argv[4], strtoull(argv[5], NULL, 16),
                      atoi(argv[6]));
  g_self = argv[0];
  if (!wdh_plugin_path()) return 77;
  const char *az = getenv("WDH_ANALYZER");
  if (!az || access(az, X_OK) != 0) {
    fprintf(stderr, "analyzer not built (%s): skipped\n", az ? az : "WDH_ANALYZER unset");
    return 77;
  }
  setenv("NCCL_WATCHDOG_TIMEOUT", "500ms", 1);
  setenv("NCCL_WATCHDOG_POLL", "50ms", 1);
  const char *only = getenv("WDH_ONLY"); /* run one sub-scenario by name */

  sub subs[] = {
      {"missing", {"hang", "hang", NULL, "hang"}, {0}, HANG_SEQ},
      {"notentered", {"hang", "hang", "skip", "hang"}, {0}, HANG_SEQ},
      {"mismatch", {"hang", "hang", "mismatch", "hang"}, {0}, HANG_SEQ},
      {"network", {"complete", "net", "complete", "complete"}, {0}, HANG_SEQ},
      {"healthy", {"healthy", "healthy", "healthy", "healthy"}, {0}, HANG_SEQ},
      {"wrapped", {"hang", "hang", "skip", "hang"}, {"64", "64", NULL, NULL}, 400},
  };
  const int rank[] = {2, 2, 2, 1, -1, 2};
  const char *reason[] = {"missing", "not_entered", "args_mismatch", "network_stall", NULL,
                          "not_entered"};
  const char *verdict[] = {"hang", "hang", "hang", "hang", "no_hang", "hang"};
  for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
    if (only && strcmp(only, subs[i].name)) continue;
    expect_one(&subs[i], 0xa2a2000000000000ull + i, rank[i], reason[i], verdict[i]);
  }
  return wdh_check_summary("scenario_analyze");
}
