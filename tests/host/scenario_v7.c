/*
 * NCCL 2.31/2.32: profiler ABI v7, played as NCCL calls it (src/plugin/profiler.cc).
 *   tag      a 2-rank job through ncclProfiler_v7 with KernelPhase asked for: each call carries its
 *            userTag (NCCL's per-call userProfilerTag, copied into CollApi, Coll and P2p), every
 *            kernel channel reports its phases (the Profiler Thread: start, KernelPhaseStop,
 *            stop, parent the KernelCh, before the KernelCh stops). Rank 1 never enters the
 *            tagged AllReduce seq 3: the stall dump shows its userTag, the ring the phases, and
 *            the analyzer's first line the tag.
 *   mask     CUDA events around each launch on v7: the plugin leaves KernelCh off (NCCL 2.31
 *            charges the GPU for it, NVIDIA/nccl issue 2355) and says why; healthy ops complete
 *            on the CUDA end event (no dump), a kernel that never ends is a stall; then NCCL's RAS
 *            sets the mask to 0 (ncclras CONTROL PROFILER_MASK): one WARN, and the snapshot's
 *            blindSpots says the plugin was blinded.
 *   v6mask   the same process on v6 (NCCL 2.30): KernelCh stays on.
 *   sym      a symmetric plan of three AllReduce tasks (NCCL 2.31, symmetric_sched.cc,
 *            ncclProfilerStartTaskEvents / profilerPostPlanWorkSym): only the head announces
 *            channels and gets KernelCh; the other two announce 0 and get none. Once the head is
 *            done they are too: nothing stays in flight, every seq completes, no stall dump.
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "nccl_host.h"

#define COMM 0x7a95e7c0ffee0007ull

/* The NCCL library's version query, as the plugin finds it in the global scope (the program is
 * linked with its symbols exported): WDH_NCCL_VERSION's value, or an error without it. */
__attribute__((visibility("default"))) int ncclGetVersion(int *version);
int ncclGetVersion(int *version) {
  const char *v = getenv("WDH_NCCL_VERSION");
  if (!v || !version) return 4; /* ncclInvalidArgument */
  *version = atoi(v);
  return 0;
}
#define TAG 0x5eed0003ull

static void tag_rank(int rank, int fd) {
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 7) != 0 || p.version != 7) _exit(11);
  wdh_comm c;
  wdh_comm_init(&c, &p, COMM, "v7job", 1, 2, rank);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.user_tag = 0x5eed0000ull;
  wdh_run_ops(&c, NULL, &cfg, 3); /* seq 0..2 */
  char ok = 1;
  if (rank == 0) {
    cfg.user_tag = TAG;
    cfg.hang_channel = 0;
    wdh_op op;
    wdh_op_enqueue(&c, &cfg, &op);
    wdh_op_proxy(&op);
  }
  if (write(fd, &ok, 1) != 1) _exit(1);
  for (;;) pause();
}

static void case_tag(const char *dir) {
  setenv("NCCL_WATCHDOG_EVENT_MASK", "0x865f", 1); /* the default and KernelPhase */
  pid_t pids[2];
  WDH_CHECK(wdh_fork_ranks(2, tag_rank, pids) == 2, "ranks not ready (a v7 table?)");
  int n = wdh_wait_dumps(dir, "stall", 1, 8000);
  WDH_CHECK(n == 1, "%d stall dumps", n);
  wdh_wait_dumps(dir, "peer", 1, 8000);
  wdh_kill_ranks(pids, 2);
  char *paths[2];
  n = wdh_list_dumps(dir, "stall", paths, 2);
  cJSON *j = n ? wdh_json_load(paths[0]) : NULL;
  if (n) WDH_CHECK(wdh_validate_dump(paths[0]) == 0, "the stall dump does not validate");
  wdh_free_paths(paths, n);
  WDH_CHECK(j != NULL, "no stall dump");
  if (!j) return;
  WDH_CHECK(wdh_jnum(j, "comms.0.abi", 0) == 7, "abi %g", wdh_jnum(j, "comms.0.abi", 0));
  const char *tag = wdh_jstr(j, "comms.0.inflight.0.userTag");
  WDH_CHECK(tag && strtoull(tag, NULL, 16) == TAG, "in-flight Coll userTag %s", tag ? tag : "(none)");
  int phases = 0, api_tags = 0;
  cJSON *r;
  cJSON_ArrayForEach(r, (cJSON *)wdh_jpath(j, "comms.0.proxyRing.records")) {
    const char *type = wdh_jstr(r, "type"), *ph = wdh_jstr(r, "phase");
    if (type && !strcmp(type, "KernelPhase") && ph && !strcmp(ph, "compute") && wdh_jstr(r, "pTimerStop"))
      phases++;
  }
  cJSON_ArrayForEach(r, (cJSON *)wdh_jpath(j, "comms.0.ring.records")) {
    const char *type = wdh_jstr(r, "type"), *t = wdh_jstr(r, "userTag");
    if (type && !strcmp(type, "CollApi") && t && strtoull(t, NULL, 16) == 0x5eed0000ull) api_tags++;
  }
  WDH_CHECK(phases >= 6, "%d compute phases in the proxy ring (3 ops x 2 channels)", phases);
  WDH_CHECK(api_tags >= 3, "%d tagged CollApi records", api_tags);
  wdh_json_free(j);
  const char *az = getenv("WDH_ANALYZER");
  if (!az || access(az, X_OK) != 0) return;
  char cmd[2048], line[4096] = "";
  snprintf(cmd, sizeof cmd, "'%s' '%s' 2>&1", az, dir);
  FILE *p = popen(cmd, "r");
  if (p && fgets(line, sizeof line, p)) fputs(line, stderr);
  if (p) pclose(p);
  WDH_CHECK(strstr(line, "rank 1 never entered AllReduce seq 3 [userTag 0x5eed0003]") != NULL,
            "first line: %s", line);
  unsetenv("NCCL_WATCHDOG_EVENT_MASK");
}

/* Three ranks; rank 2 arrives last at every collective (its kernels wait 0.1 ms in initial_sync,
 * the others 5 ms), then never enters AllReduce seq 6. */
static void arrival_rank(int rank, int fd) {
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 7) != 0 || p.version != 7) _exit(11);
  wdh_comm c;
  wdh_comm_init(&c, &p, COMM + 50, "arrive", 1, 3, rank);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.sync_ns = rank == 2 ? 100000 : 5000000;
  wdh_run_ops(&c, NULL, &cfg, 6); /* seq 0..5 */
  if (rank != 2) {
    cfg.hang_channel = 0;
    wdh_op op;
    wdh_op_enqueue(&c, &cfg, &op);
    wdh_op_proxy(&op);
  }
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  for (;;) pause();
}

static void case_arrival(const char *dir) {
  setenv("NCCL_WATCHDOG_EVENT_MASK", "0x865f", 1);
  /* Peer dumps keep the newest records only: enough here for the phases of six collectives. */
  setenv("NCCL_WATCHDOG_PEER_RECORDS", "4096", 1);
  pid_t pids[3];
  WDH_CHECK(wdh_fork_ranks(3, arrival_rank, pids) == 3, "ranks not ready");
  int n = wdh_wait_dumps(dir, NULL, 3, 8000);
  WDH_CHECK(n == 3, "%d dumps, expected one per rank", n);
  wdh_kill_ranks(pids, 3);
  unsetenv("NCCL_WATCHDOG_EVENT_MASK");
  unsetenv("NCCL_WATCHDOG_PEER_RECORDS");
  const char *az = getenv("WDH_ANALYZER");
  if (!az || access(az, X_OK) != 0) return;
  char cmd[2048], buf[8192] = "";
  snprintf(cmd, sizeof cmd, "'%s' '%s' 2>&1", az, dir);
  FILE *p = popen(cmd, "r");
  size_t len = p ? fread(buf, 1, sizeof buf - 1, p) : 0;
  buf[len] = '\0';
  if (p) pclose(p);
  fputs(buf, stderr);
  WDH_CHECK(strstr(buf, "rank 2 never entered AllReduce seq 6") != NULL, "no verdict on rank 2");
  /* Every collective all three rings still hold (seq 6 does not count: rank 2 never ran it). */
  const char *a = strstr(buf, "arrival: rank 2 arrived last at ");
  int k = 0, of = 0;
  if (a) sscanf(a, "arrival: rank 2 arrived last at %d of %d", &k, &of);
  WDH_CHECK(a && k == of && k >= 3 && k <= 6, "no KernelPhase arrival line for rank 2 (%d of %d)", k, of);
}

static void case_mask(const char *dir, int abi) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("NCCL_WATCHDOG_METRICS", "100ms", 1);
    setenv("NCCL_WATCHDOG_METRICS_DIR", dir, 1);
    setenv("NCCL_WATCHDOG_HOSTNAME", "mhost", 1);
    if (wdh_fake_cuda_load() != 0) _exit(1);
    wdh_plugin p;
    if (wdh_load(&p, wdh_plugin_path(), abi) != 0 || p.version != abi) _exit(11);
    wdh_comm c;
    wdh_comm_init(&c, &p, COMM + (uint64_t)abi, "masked", 1, 2, 0);
    int mask = __atomic_load_n(&wdh_activation_mask, __ATOMIC_RELAXED);
    int kch = (mask & ncclProfileKernelCh) != 0;
    if (abi == 6) _exit(kch ? 0 : 12);
    if (kch) _exit(13);
    if (wdh_log_contains(NCCL_LOG_INFO, "KernelCh off: CUDA events bracket every launch") != 1) _exit(14);
    wdh_op_cfg cfg;
    wdh_op_cfg_default(&cfg);
    cfg.no_proxy = 1; /* intra-node: only the CUDA events tell its end */
    wdh_run_ops(&c, NULL, &cfg, 5);
    wdh_sleep_ms(1200); /* past the timeout: healthy ops were released on their end events */
    if (wdh_list_dumps(dir, "stall", NULL, 0) != 0) _exit(15);
    cfg.hang_channel = 0; /* a kernel that never ends */
    wdh_op op;
    wdh_op_enqueue(&c, &cfg, &op);
    wdh_op_proxy(&op);
    if (wdh_wait_dumps(dir, "stall", 1, 5000) != 1) _exit(16);
    /* NCCL's RAS sets the mask job-wide; 0 stops every callback. */
    __atomic_store_n(&wdh_activation_mask, 0, __ATOMIC_RELAXED);
    wdh_sleep_ms(400);
    if (wdh_log_contains(NCCL_LOG_WARN, "event mask changed under the plugin") != 1) _exit(17);
    kill(getpid(), SIGUSR1);
    if (wdh_wait_dumps(dir, "signal", 1, 5000) != 1) _exit(18);
    char *paths[1];
    int n = wdh_list_dumps(dir, "signal", paths, 1);
    char *text = n ? wdh_read_file(paths[0], NULL) : NULL;
    int said = text && strstr(text, "changed under the plugin") && strstr(text, "\"eventMaskNow\":\"0x0\"");
    free(text);
    wdh_free_paths(paths, n);
    if (!said) _exit(19);
    /* The metrics say it too: every type we asked for is lost. */
    char prom[4200];
    snprintf(prom, sizeof prom, "%s/nccl-watchdog-mhost-%d.prom", dir, (int)getpid());
    text = wdh_read_file(prom, NULL);
    const char *line = text ? strstr(text, "\nnccl_watchdog_event_types_lost{") : NULL;
    const char *end = line ? strchr(line + 1, '\n') : NULL;
    int lost = -1;
    if (line && end) {
      const char *sp = end;
      while (sp > line && sp[-1] != ' ') sp--;
      lost = atoi(sp);
    }
    int masked = line && end && strstr(line, "mask=\"0x0\"") && strstr(line, "mask=\"0x0\"") < end;
    free(text);
    _exit(masked && lost >= 4 ? 0 : 20);
  }
  int st = 0;
  wdh_wait_child(pid, 30000, &st);
  WDH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "ABI v%d mask case: status 0x%x (12 v6 lost KernelCh, 13 v7 kept it, 14 no reason "
            "logged, 15 false stall, 16 no stall, 17 no WARN for the changed mask, 18-19 snapshot, 20 metrics)",
            abi, st);
}

/* A symmetric plan's task (NCCL 2.31, symmetric_sched.cc: isSymColl, NVLS, only the head
 * announces channels). */
static void sym_coll(wdh_descr *d, void *group, uint64_t seq, uint8_t nch) {
  memset(d, 0, sizeof *d);
  d->type = ncclProfileColl;
  d->parent_group = group;
  d->func = "AllReduce";
  d->count = 4096;
  d->datatype = "ncclFloat32";
  d->seq = seq;
  d->n_channels = nch;
  d->is_sym_coll = true;
  d->algo = "NVLS";
  d->proto = "Simple";
}

/* A captured symmetric AllReduce replayed 2,000 times (NCCL 2.31: at a replay a symmetric plan's
 * tasks get Group and Coll from the host node, isSymColl, and no KernelCh: issue 40's reading of
 * plugin/profiler.cc and enqueue.cc): nothing may stay in flight, nothing may stall. */
static void case_symreplay(const char *dir) {
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 7) != 0) return;
  wdh_comm c;
  wdh_comm_init(&c, &p, COMM + 10, "symreplay", 1, 2, 0);
  wdh_descr d;
  memset(&d, 0, sizeof d);
  d.type = ncclProfileGroupApi;
  d.graph_captured = true;
  d.group_depth = 1;
  void *gapi = wdh_start(&p, c.ctx, &d);
  memset(&d, 0, sizeof d);
  d.type = ncclProfileCollApi;
  d.parent = gapi;
  d.func = "AllReduce";
  d.count = 4096;
  d.datatype = "ncclFloat32";
  d.graph_captured = true;
  void *capi = wdh_start(&p, c.ctx, &d);
  wdh_stop(&p, capi);
  wdh_stop(&p, gapi);
  for (int r = 0; r < 2000; r++) {
    memset(&d, 0, sizeof d);
    d.type = ncclProfileGroup;
    void *group = wdh_start(&p, c.ctx, &d);
    sym_coll(&d, group, (uint64_t)r, 2);
    d.parent = capi; /* the capture-time CollApi, long stopped */
    wdh_stop(&p, wdh_start(&p, c.ctx, &d));
    wdh_stop(&p, group);
  }
  wdh_sleep_ms(900); /* past the timeout */
  WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 0, "a stall dump for symmetric replays");
  cJSON *j = wdh_signal_snapshot(dir);
  if (j) {
    WDH_CHECK(cJSON_GetArraySize((cJSON *)wdh_jpath(j, "comms.0.inflight")) == 0,
              "%d symmetric replays still in flight", cJSON_GetArraySize((cJSON *)wdh_jpath(j, "comms.0.inflight")));
    wdh_json_free(j);
  }
  wdh_comm_finalize(&c);
  WDH_CHECK(wdh_list_dumps(dir, "abort", NULL, 0) == 0, "an abort dump at a normal finalize");
  wdh_unload(&p);
}

static void case_sym(const char *dir) {
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 7) != 0) return;
  wdh_comm c;
  wdh_comm_init(&c, &p, COMM + 9, "sym", 1, 2, 0);
  for (int round = 0; round < 3; round++) {
    wdh_descr d;
    memset(&d, 0, sizeof d);
    d.type = ncclProfileGroup;
    void *group = wdh_start(&p, c.ctx, &d);
    void *coll[3];
    for (int t = 0; t < 3; t++) {
      sym_coll(&d, group, (uint64_t)(round * 3 + t), t == 0 ? 2 : 0); /* only the head */
      coll[t] = wdh_start(&p, c.ctx, &d);
      wdh_stop(&p, coll[t]);
    }
    wdh_stop(&p, group);
    for (int ch = 0; ch < 2; ch++) { /* the head's kernel channels, from the Profiler Thread */
      memset(&d, 0, sizeof d);
      d.type = ncclProfileKernelCh;
      d.parent = coll[0];
      d.channel = (uint8_t)ch;
      d.ptimer = wdh_now_ns();
      void *k = wdh_start(&p, c.ctx, &d);
      wdh_state(&p, k, ncclProfilerKernelChStop, wdh_now_ns());
      wdh_stop(&p, k);
    }
  }
  wdh_sleep_ms(900); /* past the timeout: nothing may look stuck */
  WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 0, "a stall dump for a symmetric plan's tasks");
  cJSON *j = wdh_signal_snapshot(dir);
  if (j) {
    WDH_CHECK(cJSON_GetArraySize((cJSON *)wdh_jpath(j, "comms.0.inflight")) == 0,
              "%d operations still in flight", cJSON_GetArraySize((cJSON *)wdh_jpath(j, "comms.0.inflight")));
    WDH_CHECK(wdh_jnum(j, "comms.0.seq.0.lastCompleted", -1) == 8, "last completed %g",
              wdh_jnum(j, "comms.0.seq.0.lastCompleted", -1));
    int sym = 0;
    cJSON *r;
    cJSON_ArrayForEach(r, (cJSON *)wdh_jpath(j, "comms.0.ring.records"))
      sym += cJSON_IsTrue(cJSON_GetObjectItem(r, "isSymColl"));
    WDH_CHECK(sym >= 9, "%d records flagged isSymColl", sym);
    wdh_json_free(j);
  }
  wdh_comm_finalize(&c);
  WDH_CHECK(wdh_list_dumps(dir, "abort", NULL, 0) == 0, "an abort dump at a normal finalize");
  wdh_unload(&p);
}

static void case_ncclver(const char *dir) {
  static const struct { const char *ver; int abi, kch; const char *says; } runs[] = {
      {"23200", 7, 0, "NCCL 2.32.0, profiler ABI v7"},
      {"23007", 6, 1, "NCCL 2.30.7, profiler ABI v6"},
  };
  for (unsigned i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("WDH_NCCL_VERSION", runs[i].ver, 1);
      if (wdh_fake_cuda_load() != 0) _exit(1);
      wdh_plugin p;
      if (wdh_load(&p, wdh_plugin_path(), runs[i].abi) != 0 || p.version != runs[i].abi) _exit(11);
      wdh_comm c;
      wdh_comm_init(&c, &p, COMM + 40 + i, "ver", 1, 2, 0);
      int kch = (__atomic_load_n(&wdh_activation_mask, __ATOMIC_RELAXED) & ncclProfileKernelCh) != 0;
      if (kch != runs[i].kch) _exit(12);
      if (wdh_log_contains(NCCL_LOG_INFO, runs[i].says) != 1) _exit(13);
      kill(getpid(), SIGUSR1);
      if (wdh_wait_dumps(dir, "signal", (int)i + 1, 5000) != (int)i + 1) _exit(14);
      char *paths[2];
      int n = wdh_list_dumps(dir, "signal", paths, 2);
      int found = 0;
      char want[64];
      snprintf(want, sizeof want, "\"ncclVersion\":\"%.*s\"", (int)(strchr(runs[i].says, ',') - runs[i].says - 5),
               runs[i].says + 5);
      for (int k = 0; k < n; k++) {
        char *text = wdh_read_file(paths[k], NULL);
        if (text && strstr(text, want)) found = 1;
        free(text);
      }
      wdh_free_paths(paths, n);
      _exit(found ? 0 : 15);
    }
    int st = 0;
    wdh_wait_child(pid, 30000, &st);
    WDH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "NCCL %s: status 0x%x (12 KernelCh choice, 13 log line, 14 no snapshot, 15 no "
              "ncclVersion in the dump)", runs[i].ver, st);
  }
}

/* The in-flight root of comm (by commId) with that type and seq, or NULL. */
static cJSON *inflight_op(cJSON *j, uint64_t comm_id, const char *type, double seq) {
  cJSON *c, *n;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "comms")) {
    const char *id = wdh_jstr(c, "commId");
    if (!id || strtoull(id, NULL, 16) != comm_id) continue;
    cJSON_ArrayForEach(n, cJSON_GetObjectItem(c, "inflight")) {
      const char *t = wdh_jstr(n, "type");
      if (t && !strcmp(t, type) && (seq < 0 || wdh_jnum(n, "seq", -1) == seq)) return n;
    }
  }
  return NULL;
}

static int inflight_total(cJSON *j) {
  int n = 0;
  cJSON *c;
  cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "comms"))
    n += cJSON_GetArraySize(cJSON_GetObjectItem(c, "inflight"));
  return n;
}

static void case_thread(const char *dir) {
  setenv("NCCL_WATCHDOG_EVENT_MASK", "0x865f", 1); /* the default and KernelPhase */
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 7) != 0 || p.version != 7) {
    WDH_CHECK(0, "no v7 table");
    return;
  }
  wdh_comm a, b;
  wdh_comm_init(&a, &p, COMM + 31, "pt-parent", 1, 2, 0);
  wdh_comm_init(&b, &p, COMM + 32, "pt-child", 1, 2, 0);
  WDH_CHECK(__atomic_load_n(&wdh_activation_mask, __ATOMIC_RELAXED) & ncclProfileKernelCh,
            "KernelCh off without CUDA events");
  wdh_pthread *pt = wdh_pthread_create();
  wdh_pthread_attach(pt, &a);
  wdh_pthread_attach(pt, &b); /* ncclProfilerThreadCreate: a child sharing resources shares it */
  wdh_proxy *px = wdh_proxy_create();

  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&a, px, &cfg, 40);
  wdh_run_ops(&b, px, &cfg, 40);
  /* Send/recv pairs with the peer: each half announces its own direction's channels. */
  for (int i = 0; i < 10; i++) {
    wdh_op_cfg pc;
    wdh_op_cfg_default(&pc);
    pc.kind = i & 1 ? WDH_OP_RECV : WDH_OP_SEND;
    pc.peer = 1;
    pc.n_channels = i & 1 ? 2 : 3;
    pc.explicit_group = 1;
    wdh_run_ops(&a, px, &pc, 1);
  }
  /* The self pair of an AlltoAll: no proxy work, KernelCh on 2.31. */
  for (int i = 0; i < 6; i++) {
    wdh_op_cfg pc;
    wdh_op_cfg_default(&pc);
    pc.kind = i & 1 ? WDH_OP_RECV : WDH_OP_SEND;
    pc.peer = 0;
    pc.n_channels = 1;
    pc.explicit_group = 1;
    wdh_run_ops(&b, px, &pc, 1);
  }
  /* A captured AllReduce replayed five times after eager work. */
  wdh_op_cfg gc;
  wdh_op_cfg_default(&gc);
  gc.graph_captured = 1;
  wdh_op captured, rep;
  wdh_op_run(&a, &gc, &captured);
  for (int i = 0; i < 5; i++) wdh_op_replay(&captured, &rep);
  wdh_proxy_drain(px);
  wdh_pthread_settle(pt);
  long started = wdh_pthread_kch_started(pt), stopped = wdh_pthread_kch_stopped(pt);
  /* 80 AllReduce x 2 + 5 sends x 3 + 5 recvs x 2 + 6 self halves + 5 replays x 2 */
  WDH_CHECK(started == 201 && stopped == 201, "KernelCh delivered: %ld started, %ld stopped", started, stopped);
  wdh_sleep_ms(1300); /* past twice the timeout */
  WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 0, "a stall dump in healthy 2.31 traffic");
  cJSON *j = wdh_signal_snapshot(dir);
  if (j) {
    WDH_CHECK(inflight_total(j) == 0, "%d operations in flight after healthy traffic", inflight_total(j));
    int phases = 0;
    cJSON *c, *r;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "comms"))
      cJSON_ArrayForEach(r, (cJSON *)wdh_jpath(c, "proxyRing.records")) {
        const char *t = wdh_jstr(r, "type");
        phases += t && !strcmp(t, "KernelPhase");
      }
    WDH_CHECK(phases > 0, "no KernelPhase records from the Profiler Thread");
    wdh_json_free(j);
  }

  /* A replay whose kernel never finishes channel 1. */
  captured.cfg.hang_channel = 1;
  int hung = wdh_op_replay(&captured, &rep);
  WDH_CHECK(hung == 1, "the replay did not hang");
  int n = wdh_wait_dumps(dir, "stall", 1, 6000);
  WDH_CHECK(n == 1, "%d stall dumps for the hung replay", n);
  char *paths[1];
  n = wdh_list_dumps(dir, "stall", paths, 1);
  j = n ? wdh_json_load(paths[0]) : NULL;
  wdh_free_paths(paths, n);
  if (j) {
    cJSON *op = inflight_op(j, a.comm_id, "Coll", (double)rep.seq);
    WDH_CHECK(op != NULL, "the hung replay (seq %llu) not in flight", (unsigned long long)rep.seq);
    const char *st = op ? wdh_jstr(op, "status") : NULL;
    WDH_CHECK(st && !strcmp(st, "stalled"), "status %s", st ? st : "(none)");
    WDH_CHECK(inflight_total(j) == 1, "%d in flight, expected only the replay", inflight_total(j));
    wdh_json_free(j);
  }

  /* Abort (init.cc, commReclaim): the Profiler Thread drains, then finalize. */
  a.pthread = b.pthread = NULL;
  wdh_pthread_destroy(pt, 1);
  wdh_proxy_destroy(px);
  wdh_comm_finalize(&b);
  wdh_comm_finalize(&a);
  n = wdh_wait_dumps(dir, "abort", 1, 5000);
  WDH_CHECK(n == 1, "%d abort dumps", n);
  n = wdh_list_dumps(dir, "abort", paths, 1);
  j = n ? wdh_json_load(paths[0]) : NULL;
  wdh_free_paths(paths, n);
  if (j) {
    WDH_CHECK(inflight_op(j, a.comm_id, "Coll", (double)rep.seq) != NULL, "the abort dump lost the replay");
    wdh_json_free(j);
  }
  wdh_unload(&p);
  unsetenv("NCCL_WATCHDOG_EVENT_MASK");
}

int main(int argc, char **argv) {
  if (!wdh_plugin_path()) return 77;
  const char *which = argc > 1 ? argv[1] : NULL;
  int rc = 0;
  if (!which || !strcmp(which, "tag")) {
    char *dir = wdh_scenario_dir("v7-tag", "500ms", "50ms");
    case_tag(dir);
    rc |= wdh_scenario_end("scenario.v7 tag", dir);
  }
  if (!which || !strcmp(which, "mask")) {
    char *dir = wdh_scenario_dir("v7-mask", "500ms", "50ms");
    case_mask(dir, 7);
    rc |= wdh_scenario_end("scenario.v7 mask", dir);
  }
  if (!which || !strcmp(which, "v6mask")) {
    char *dir = wdh_scenario_dir("v7-v6mask", "500ms", "50ms");
    case_mask(dir, 6);
    rc |= wdh_scenario_end("scenario.v7 v6mask", dir);
  }
  if (!which || !strcmp(which, "sym")) {
    char *dir = wdh_scenario_dir("v7-sym", "500ms", "50ms");
    case_sym(dir);
    rc |= wdh_scenario_end("scenario.v7 sym", dir);
  }
  if (!which || !strcmp(which, "symreplay")) {
    char *dir = wdh_scenario_dir("v7-symreplay", "500ms", "50ms");
    case_symreplay(dir);
    rc |= wdh_scenario_end("scenario.v7 symreplay", dir);
  }
  if (!which || !strcmp(which, "arrival")) {
    char *dir = wdh_scenario_dir("v7-arrival", "500ms", "50ms");
    case_arrival(dir);
    rc |= wdh_scenario_end("scenario.v7 arrival", dir);
  }
  if (!which || !strcmp(which, "ncclver")) {
    char *dir = wdh_scenario_dir("v7-ncclver", "500ms", "50ms");
    case_ncclver(dir);
    rc |= wdh_scenario_end("scenario.v7 ncclver", dir);
  }
  if (!which || !strcmp(which, "thread")) {
    char *dir = wdh_scenario_dir("v7-thread", "500ms", "50ms");
    case_thread(dir);
    rc |= wdh_scenario_end("scenario.v7 thread", dir);
  }
  return rc;
}
