/*
 * Real NCCL's order, healthy and hung, on both of the plugin's paths: with CUDA events (the
 * stand-in driver loaded, profiler ABI v5 and v6) and on NCCL's events alone (no driver; v4, v5
 * and v6). Every case runs in a child process of its own, all at once; a healthy case must leave
 * no stall dump, a hung one must be dumped within timeout + 2 polls, naming the communicator,
 * function and sequence number.
 *
 * What each case plays, and the NCCL code it follows (NCCL 2.28 to 2.30.7, master after it):
 *   busy_gpu      the GPU computes for 3x the timeout before a network AllReduce: ProxyOps and
 *                 their first steps open at enqueue (proxy.cc, ncclProxyOpToArgs; transport/
 *                 net.cc, sendProxyProgress posts steps in SendGPUWait) long before it runs.
 *   collnet_idle  a CollNet AllReduce (nChannels 0, KernelCh per channel, ProxyOps never
 *                 stopped: enqueue.cc / proxy.cc), then an idle period.
 *   alltoall_idle an AlltoAll inside ncclGroupStart/End (GroupApi depth 2) with its send and
 *                 recv to self (no KernelCh, no ProxyOp), then an idle period.
 *   revoke        a communicator revoked with an op in flight (init.cc, commRevokeAsync: its
 *                 proxy thread is stopped and joined, its kernels exit, nothing is finalized)
 *                 while a new communicator carries on.
 *   neterr_busy   a network error ends one communicator's proxy loop while another, older one
 *                 runs on for twice the timeout: a stall (no communicator made since).
 *   ce_idle       a CE AllGather (v6; ce_coll.cc, ncclLaunchCeColl: everything at enqueue).
 *   api_only_idle a Broadcast on the AllGatherV path (GroupApi + CollApi only).
 *   graph_replay  a captured AllReduce replayed from another thread (enqueue.cc,
 *                 hostStreamPlanCallback), Coll parent = the capture-time CollApi.
 *   net_stuck     a network AllReduce whose recv step never gets its data.
 *   kernel_stuck  an intra-node AllGather whose kernel never finishes on one channel.
 *   collnet_stuck a CollNet AllReduce that never finishes.
 *   recv_stuck    a p2p Recv whose peer never sends.
 *   ce_stuck      a CE AllGather whose copies never finish (CUDA events only: NCCL reports
 *                 nothing at completion, so without them it cannot be seen).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "nccl_host.h"

#define TIMEOUT_MS 500
#define POLL_MS 100
#define SLACK_MS 2500 /* a loaded 2-core CI machine under a sanitizer */

typedef struct mode {
  const char *name;
  int abi;  /* highest profiler ABI the host takes from the plugin */
  int cuda; /* stand-in driver loaded: the CUDA-event path */
} mode;

static const mode g_modes[] = {
    {"v6-cuda", 6, 1}, {"v5-cuda", 5, 1}, {"v6-nccl", 6, 0}, {"v5-nccl", 5, 0}, {"v4-nccl", 4, 0},
};

typedef struct expect {
  int hung;          /* a stall dump must appear */
  int no_launch;     /* no kernel launch the CUDA-event path could bracket */
  wdh_comm *open;    /* a communicator to finalize after the checks */
  uint64_t comm_id;
  const char *func;
  const char *type;  /* "Coll", "P2p", "CeColl" */
  long long seq;     /* -1: none (p2p) */
} expect;

typedef int (*case_fn)(wdh_plugin *p, const mode *m, expect *e);

static void idle(int times_timeout) { wdh_sleep_ms((unsigned)(times_timeout * TIMEOUT_MS)); }

static void init(wdh_comm *c, wdh_plugin *p, uint64_t id, const char *name) {
  wdh_comm_init(c, p, id, name, 2, 4, 1);
  WDH_CHECK(c->ctx != NULL, "init %s returned no context", name);
}

/* ---- healthy ---- */

static int case_busy_gpu(wdh_plugin *p, const mode *m, expect *e) {
  (void)m;
  (void)e;
  wdh_comm c;
  init(&c, p, 0x1001, "busy");
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_gpu_launch(&c); /* a long compute kernel ahead on the stream */
  wdh_op op;
  wdh_op_enqueue(&c, &cfg, &op);
  wdh_op_post(&op); /* the proxy opens its ProxyOps and first steps at once */
  idle(3);
  WDH_CHECK(wdh_op_gpu(&op) == 0, "op hung");
  wdh_op_finish(&op);
  idle(2);
  wdh_comm_finalize(&c);
  return 0;
}

static int case_collnet_idle(wdh_plugin *p, const mode *m, expect *e) {
  (void)m;
  (void)e;
  wdh_comm c;
  init(&c, p, 0x1002, "collnet");
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.collnet = 1;
  for (int i = 0; i < 3; i++) {
    wdh_op op;
    WDH_CHECK(wdh_op_run(&c, &cfg, &op) == 0, "op hung");
  }
  idle(3);
  wdh_comm_finalize(&c);
  return 0;
}

static int case_alltoall_idle(wdh_plugin *p, const mode *m, expect *e) {
  (void)m;
  (void)e;
  wdh_comm c;
  init(&c, p, 0x1003, "alltoall");
  for (int peer = 0; peer < c.nranks; peer++) {
    for (int kind = WDH_OP_SEND; kind <= WDH_OP_RECV; kind++) {
      wdh_op_cfg cfg;
      wdh_op_cfg_default(&cfg);
      cfg.kind = kind;
      cfg.peer = peer; /* peer == rank: the copy to self */
      cfg.n_channels = 1;
      cfg.explicit_group = 1;
      wdh_op op;
      WDH_CHECK(wdh_op_run(&c, &cfg, &op) == 0, "op hung");
    }
  }
  idle(3);
  wdh_comm_finalize(&c);
  return 0;
}

static void *proxy_then_exit(void *arg) {
  wdh_op_proxy(arg); /* hangs part way; the thread then ends, as a stopped proxy thread does */
  return NULL;
}

/* An AllReduce on c whose proxy part is driven by a thread that stops part way and exits
 * (proxy.cc, progress loop: a revoke's abort flag or a network error ends it, nothing stopped). */
static void op_lose_proxy(wdh_comm *c, wdh_op *op) {
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.hang_channel = 0;
  cfg.hang_step = 1;
  wdh_op_enqueue(c, &cfg, op);
  pthread_t t;
  WDH_CHECK(pthread_create(&t, NULL, proxy_then_exit, op) == 0, "proxy thread");
  pthread_join(t, NULL);
  wdh_op_finish(op);
}

/* Healthy AllReduces on c for ms milliseconds, 20 ms apart. */
static void run_for(wdh_comm *c, uint64_t ms) {
  wdh_op_cfg ok;
  wdh_op_cfg_default(&ok);
  uint64_t end = wdh_now_ns() + ms * 1000000ull;
  while (wdh_now_ns() < end) {
    wdh_op o;
    wdh_op_run(c, &ok, &o);
    wdh_sleep_ms(20);
  }
}

static int case_revoke(wdh_plugin *p, const mode *m, expect *e) {
  (void)m;
  (void)e;
  wdh_comm old, fresh;
  init(&old, p, 0x1004, "revoked");
  wdh_op op;
  op_lose_proxy(&old, &op);
  /* Revoke: its kernels exit (the stream drains), its proxy thread is gone, no finalize. */
  wdh_gpu_complete(&old, op.gpu_pos);
  init(&fresh, p, 0x1005, "shrunk");
  run_for(&fresh, 3ull * TIMEOUT_MS);
  wdh_comm_finalize(&fresh);
  wdh_comm_finalize(&old); /* at the end of the job */
  return 0;
}

/* A network error ends comm A's proxy loop with an op in flight (proxy.cc, progress loop: the
 * loop breaks on ncclNet->test's error, nothing is stopped), while comm B, made before, runs on
 * for twice the timeout before the application blocks on A: a hang, not a recovered revoke
 * (no communicator was made after A stopped). Without CUDA events only; with them the end event
 * already tells (net_stuck). */
static int case_neterr_busy(wdh_plugin *p, const mode *m, expect *e) {
  if (m->cuda) return 77;
  static wdh_comm a, b;
  init(&a, p, 0x1014, "neterr");
  init(&b, p, 0x1015, "busy");
  wdh_sleep_ms(20); /* B is older than the op by more than a tick of the coarse clock */
  static wdh_op op;
  op_lose_proxy(&a, &op);
  run_for(&b, 2ull * TIMEOUT_MS);
  wdh_comm_finalize(&b);
  e->hung = 1;
  e->open = &a;
  e->comm_id = 0x1014;
  e->func = "AllReduce";
  e->type = "Coll";
  e->seq = (long long)op.seq;
  return 0;
}

static int case_ce_idle(wdh_plugin *p, const mode *m, expect *e) {
  (void)e;
  if (m->abi < 6) return 77;
  wdh_comm c;
  init(&c, p, 0x1006, "ce");
  for (int i = 0; i < 3; i++) {
    wdh_op op;
    wdh_gpu_complete(&c, wdh_ce_coll(&c, "AllGather", &op));
  }
  idle(3);
  wdh_comm_finalize(&c);
  return 0;
}

static int case_api_only_idle(wdh_plugin *p, const mode *m, expect *e) {
  if (m->abi < 5) return 77;
  e->no_launch = 1;
  wdh_comm c;
  init(&c, p, 0x1007, "apionly");
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.func = "Broadcast";
  cfg.api_only = 1;
  wdh_op op;
  wdh_op_run(&c, &cfg, &op);
  idle(3);
  wdh_comm_finalize(&c);
  return 0;
}

static void *replay_main(void *arg) {
  wdh_op out;
  return (void *)(intptr_t)wdh_op_replay(arg, &out);
}

static int case_graph_replay(wdh_plugin *p, const mode *m, expect *e) {
  (void)m;
  e->no_launch = 1; /* the capture's launch is only recorded; replays launch no kernel we see */
  wdh_comm c;
  init(&c, p, 0x1008, "graph");
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.graph_captured = 1;
  wdh_op captured;
  wdh_op_run(&c, &cfg, &captured);
  for (int i = 0; i < 3; i++) {
    pthread_t t;
    void *rc = NULL;
    WDH_CHECK(pthread_create(&t, NULL, replay_main, &captured) == 0, "replay thread");
    pthread_join(t, &rc);
    WDH_CHECK(rc == NULL, "replay hung");
  }
  idle(3);
  wdh_comm_finalize(&c);
  return 0;
}

/* ---- hung ---- */

static wdh_comm g_hung_comm;

static int run_hung(wdh_plugin *p, uint64_t id, const char *name, const wdh_op_cfg *cfg, expect *e) {
  wdh_comm *c = &g_hung_comm;
  init(c, p, id, name);
  e->open = c;
  wdh_op_cfg ok;
  wdh_op_cfg_default(&ok);
  ok.func = cfg->func;
  for (int i = 0; i < 2; i++) {
    wdh_op o;
    wdh_op_run(c, &ok, &o);
  }
  wdh_op op;
  wdh_op_enqueue(c, cfg, &op);
  WDH_CHECK(wdh_op_proxy(&op) == 1, "op did not hang");
  wdh_op_finish(&op);
  e->hung = 1;
  e->comm_id = id;
  e->func = cfg->kind == WDH_OP_SEND ? "Send" : cfg->kind == WDH_OP_RECV ? "Recv"
             : cfg->func ? cfg->func : "AllReduce";
  e->type = cfg->kind == WDH_OP_COLL ? "Coll" : "P2p";
  e->seq = cfg->kind == WDH_OP_COLL ? (long long)op.seq : -1;
  return 0;
}

static int case_net_stuck(wdh_plugin *p, const mode *m, expect *e) {
  (void)m;
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.hang_channel = 1;
  cfg.hang_step = 1;
  return run_hung(p, 0x2001, "net-stuck", &cfg, e);
}

static int case_kernel_stuck(wdh_plugin *p, const mode *m, expect *e) {
  (void)m;
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.func = "AllGather";
  cfg.no_proxy = 1;
  cfg.hang_channel = 1;
  return run_hung(p, 0x2002, "kernel-stuck", &cfg, e);
}

static int case_collnet_stuck(wdh_plugin *p, const mode *m, expect *e) {
  (void)m;
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.collnet = 1;
  cfg.hang_channel = 0;
  cfg.hang_step = 0;
  return run_hung(p, 0x2003, "collnet-stuck", &cfg, e);
}

static int case_recv_stuck(wdh_plugin *p, const mode *m, expect *e) {
  (void)m;
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.kind = WDH_OP_RECV;
  cfg.peer = 2;
  cfg.n_channels = 1;
  cfg.hang_channel = 0;
  cfg.hang_step = 0;
  return run_hung(p, 0x2004, "recv-stuck", &cfg, e);
}

static int case_ce_stuck(wdh_plugin *p, const mode *m, expect *e) {
  if (m->abi < 6 || !m->cuda) return 77; /* invisible without CUDA events */
  wdh_comm *c = &g_hung_comm;
  init(c, p, 0x2005, "ce-stuck");
  e->open = c;
  wdh_op op;
  wdh_gpu_complete(c, wdh_ce_coll(c, "AllGather", &op)); /* one that finishes */
  wdh_ce_coll(c, "AllGather", &op);                       /* and one that never does */
  e->hung = 1;
  e->comm_id = 0x2005;
  e->func = "AllGather";
  e->type = "CeColl";
  e->seq = (long long)op.seq;
  return 0;
}

static const struct {
  const char *name;
  case_fn fn;
} g_cases[] = {
    {"busy_gpu", case_busy_gpu},           {"collnet_idle", case_collnet_idle},
    {"alltoall_idle", case_alltoall_idle}, {"revoke", case_revoke},
    {"neterr_busy", case_neterr_busy},
    {"ce_idle", case_ce_idle},             {"api_only_idle", case_api_only_idle},
    {"graph_replay", case_graph_replay},   {"net_stuck", case_net_stuck},
    {"kernel_stuck", case_kernel_stuck},   {"collnet_stuck", case_collnet_stuck},
    {"recv_stuck", case_recv_stuck},       {"ce_stuck", case_ce_stuck},
};
#define NCASES (int)(sizeof(g_cases) / sizeof(g_cases[0]))
#define NMODES (int)(sizeof(g_modes) / sizeof(g_modes[0]))

/* The hung op's stall dump: the right communicator, function, type and sequence number, found
 * within timeout + 2 polls of its last progress. */
static void check_stall(const char *dir, const expect *e, const char *label, int cuda_path) {
  char *paths[4];
  int n = wdh_wait_dumps(dir, "stall", 1, TIMEOUT_MS + 2 * POLL_MS + SLACK_MS);
  WDH_CHECK(n >= 1, "%s: no stall dump", label);
  if (n < 1) return;
  n = wdh_list_dumps(dir, "stall", paths, 4);
  void *j = n > 0 ? wdh_json_load(paths[0]) : NULL;
  WDH_CHECK(j != NULL, "%s: stall dump unreadable", label);
  if (j) {
    const char *cid = wdh_jstr(j, "trigger.stalls.0.commId");
    WDH_CHECK(cid && strtoull(cid, NULL, 16) == e->comm_id, "%s: stall commId %s, expected 0x%llx",
              label, cid ? cid : "(none)", (unsigned long long)e->comm_id);
    const char *func = wdh_jstr(j, "trigger.stalls.0.func");
    WDH_CHECK(func && strcmp(func, e->func) == 0, "%s: stall func %s, expected %s", label,
              func ? func : "(none)", e->func);
    const char *type = wdh_jstr(j, "trigger.stalls.0.type");
    WDH_CHECK(type && strcmp(type, e->type) == 0, "%s: stall type %s, expected %s", label,
              type ? type : "(none)", e->type);
    double seq = wdh_jnum(j, "trigger.stalls.0.seq", -2);
    WDH_CHECK(seq == (double)e->seq, "%s: stall seq %g, expected %lld", label, seq, e->seq);
    double since = wdh_jnum(j, "trigger.stalls.0.sinceProgressMs", -1);
    WDH_CHECK(since >= TIMEOUT_MS * 0.95 && since <= TIMEOUT_MS + 2 * POLL_MS + SLACK_MS,
              "%s: sinceProgressMs %g", label, since);
    WDH_CHECK(wdh_validate_dump(paths[0]) == 0, "%s: %s does not validate", label, paths[0]);
    /* The dump says which path judged it, and what it cannot see. */
    const char *gp = wdh_jstr(j, "comms.0.gpuProgress");
    WDH_CHECK(gp && strcmp(gp, cuda_path ? "cudaEvents" : "ncclEvents") == 0, "%s: gpuProgress %s",
              label, gp ? gp : "(none)");
    /* A process without Python gets no Python section. */
    WDH_CHECK(wdh_jpath(j, "python") == NULL, "%s: a python section without Python", label);
    const char *spot = wdh_jstr(j, "config.blindSpots.0");
    WDH_CHECK(spot && strstr(spot, "RMA"), "%s: blindSpots[0] %s", label, spot ? spot : "(none)");
    if (strcmp(e->type, "CeColl") == 0)
      WDH_CHECK(wdh_jnum(j, "comms.0.ceSeq.0.lastEnqueued", -2) == (double)e->seq &&
                    wdh_jnum(j, "comms.0.seq.0.lastEnqueued", -2) == -2,
                "%s: CE numbers not kept apart", label);
    wdh_json_free(j);
  }
  wdh_free_paths(paths, n);
}

static int run_child(int ci, int mi) {
  const mode *m = &g_modes[mi];
  char tag[64];
  snprintf(tag, sizeof tag, "real-%s-%s", g_cases[ci].name, m->name);
  char timeout[16], poll[16];
  snprintf(timeout, sizeof timeout, "%dms", TIMEOUT_MS);
  snprintf(poll, sizeof poll, "%dms", POLL_MS);
  char *dir = wdh_scenario_dir(tag, timeout, poll);
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1); /* stacks are not what these cases check */
  setenv("NCCL_WATCHDOG_PEER_DUMPS", "0", 1);
  if (m->cuda && wdh_fake_cuda_load() != 0) return 1;
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), m->abi) != 0) return 1;
  WDH_CHECK(p.version == m->abi, "%s: plugin gave ABI v%d", tag, p.version);
  expect e = {0};
  int rc = g_cases[ci].fn(&p, m, &e);
  if (rc == 77) {
    wdh_unload(&p);
    wdh_rmtree(dir);
    free(dir);
    return 77;
  }
  int cuda_path = m->cuda && m->abi >= 5;
  WDH_CHECK(wdh_log_contains(-1, cuda_path ? "GPU progress from CUDA events"
                                            : "GPU progress from NCCL's events") > 0,
            "%s: the plugin did not say which path it took", tag);
  if (cuda_path && !e.no_launch) WDH_CHECK(wdh_fake_records() > 0, "%s: no CUDA event recorded", tag);
  if (e.hung) {
    check_stall(dir, &e, tag, cuda_path);
  } else {
    WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 0, "%s: false stall dump in %s", tag, dir);
  }
  if (e.open) wdh_comm_finalize(e.open);
  wdh_unload(&p);
  /* Every event pair the plugin created was destroyed at finalize. */
  if (cuda_path) WDH_CHECK(wdh_fake_events_live() == 0, "%s: %ld CUDA events leaked", tag, wdh_fake_events_live());
  return wdh_scenario_end(tag, dir);
}

int main(void) {
  if (!wdh_plugin_path()) return 77;
  int total = 0, failed = 0, skipped = 0;
  /* One mode at a time, its cases at once: a dozen processes, mostly asleep. */
  for (int mi = 0; mi < NMODES; mi++) {
    pid_t pids[NCASES];
    for (int ci = 0; ci < NCASES; ci++) {
      pids[ci] = fork();
      if (pids[ci] == 0) _exit(run_child(ci, mi));
      if (pids[ci] < 0) {
        perror("fork");
        failed++;
      }
    }
    for (int i = 0; i < NCASES; i++) {
      if (pids[i] <= 0) continue;
      int status = 0;
      int ended = wdh_wait_child(pids[i], 60000, &status);
      total++;
      if (ended && WIFEXITED(status) && WEXITSTATUS(status) == 77) {
        skipped++;
        continue;
      }
      if (!ended || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "FAIL %s (%s): %s %d\n", g_cases[i].name, g_modes[mi].name,
                ended ? "exit" : "killed", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        failed++;
      }
    }
  }
  printf("scenario_realnccl: %d cases, %d skipped (not applicable), %d failed\n", total, skipped,
         failed);
  return failed ? 1 : 0;
}
