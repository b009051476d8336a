/*
 * Hangs that end before our timeout, or that NCCL's own events hide, played in the order NCCL
 * 2.29-2.31 and PyTorch 2.15 run them; each ends with the analyzer run as the runbook says
 * (docs/operations.md, "When PyTorch's watchdog fired first") and its first line checked. A
 * 4-rank job: ranks 0-2 wait in AllReduce seq 5, rank 3 never enters it (its data loader).
 *
 *   nccl2      PyTorch's nccl2 backend: its watchdog thread calls ::abort() on the collective
 *              timeout (no ncclCommAbort, no finalize); torchrun then SIGTERMs the survivor
 *              (torch/distributed/elastic/multiprocessing/api.py, PContext.close: SIGTERM, a
 *              grace period, SIGKILL). Each dying rank leaves a "sigabrt" dump; rank 3 a "term".
 *   legacy3    nccl-legacy, TORCH_NCCL_ASYNC_ERROR_HANDLING=3: the watchdog dumps its own flight
 *              recorder, waits, rethrows on its thread: std::terminate, SIGABRT. Rank 3 ignores
 *              SIGTERM, so torchrun's SIGKILL ends it: its ring file is its evidence.
 *   legacy1    =1: ncclCommAbort (finalize with events open, on PyTorch's watchdog thread), then
 *              the process exits: "abort" dumps.
 *   healthy    the nccl2 job without the hang: it finishes, no stall, abort or sigabrt dump.
 *   termok     a healthy job ended by the scheduler's SIGTERM mid-traffic: the report says OK.
 *   self       CUDA events around each launch: an AlltoAll's self round (send/recv to self: no
 *              KernelCh, the host's work counter falls behind, NCCL 2.29/2.30 proxy.cc
 *              incWorkCounter), then a small intra-node AllReduce whose KernelCh pairs with the
 *              self round's finished work (transport/profiler.cc, profilerProxyProgress): it
 *              starts and stops at once while the AllReduce kernel is blocked. The CUDA end event
 *              is the truth: a stall dump. Twin (selfok): the kernel finishes, no stall dump.
 *   replay     no CUDA events: eager AllReduces, then a graph replay whose KernelCh pairs with
 *              the last eager work (enqueue.cc: the host increment only while
 *              planner.persistent) and looks complete; rank 3 never replays. PyTorch aborts the
 *              ranks; the analyzer finds the impossible completion in the sequence numbers. Twin
 *              (replayok): everyone replays, no dump.
 *   neterr     CUDA events; rank 1's proxy thread ends in a network error (proxy.cc: the
 *              progress loop returns, nothing is stopped) while its kernel waits: a stall dump
 *              at once that names it, though every rank entered. Twin (revoke): the proxy thread
 *              is joined after the kernels ended (init.cc, ncclCommRevoke): no dump.
 *   abrtbad    SIGABRT in a forked child, from two threads at once, and while the watchdog
 *              cannot finish its dump in time: the signal always reaches the default action.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_host.h"

#define COMM 0x7ea4d0e0c0ffee01ull
#define NR 4
#define PT_TIMEOUT_MS 900 /* PyTorch's collective timeout, scaled down */

enum { C_NCCL2, C_LEGACY3, C_LEGACY1, C_HEALTHY, C_TERMOK, C_SELF, C_SELFOK, C_REPLAY,
       C_REPLAYOK, C_NETERR };
static int g_case;
static wdh_plugin g_p;
static wdh_comm g_c;

static int culprit_enters(void) {
  return g_case == C_HEALTHY || g_case == C_SELFOK || g_case == C_REPLAYOK || g_case == C_NETERR;
}

/* PyTorch's watchdog thread: the collective timed out. */
static void *pt_watchdog(void *arg) {
  (void)arg;
  /* The ranks' sequence numbers, not their events, tell a replay's hang: real timeouts (minutes)
   * are far above the analyzer's one-second margin; this one must be too. */
  wdh_sleep_ms(g_case == C_REPLAY ? 2 * PT_TIMEOUT_MS : PT_TIMEOUT_MS);
  if (g_case == C_LEGACY1) {
    /* ProcessGroupNCCL (legacy) abort path: ncclCommAbort on this thread, then the process ends. */
    wdh_comm_finalize(&g_c);
    _exit(6);
  }
  if (g_case == C_LEGACY3) wdh_sleep_ms(200); /* its own flight recorder dump, then the rethrow */
  abort();
}

/* A KernelCh paired with an earlier, finished work: it starts and stops at once. */
static void stale_kernelch(wdh_op *op) {
  for (int ch = 0; ch < op->cfg.n_channels; ch++) {
    wdh_descr d;
    memset(&d, 0, sizeof d);
    d.type = ncclProfileKernelCh;
    d.parent = op->coll;
    d.rank = g_c.rank;
    d.channel = (uint8_t)ch;
    d.ptimer = 1000 + (uint64_t)ch;
    void *k = wdh_start(&g_p, g_c.ctx, &d);
    wdh_state(&g_p, k, ncclProfilerKernelChStop, 2000 + (uint64_t)ch);
    wdh_stop(&g_p, k);
  }
}

static void *net_proxy(void *arg) {
  wdh_op_proxy((wdh_op *)arg); /* reaches the hang point, then the loop ends: the thread exits */
  return NULL;
}

static void rank_main(int rank, int fd) {
  int use_cuda = g_case == C_SELF || g_case == C_SELFOK || g_case == C_NETERR;
  if (use_cuda && wdh_fake_cuda_load() != 0) _exit(1);
  if (g_case == C_LEGACY3 && rank == 3) signal(SIGTERM, SIG_IGN); /* stuck in a C extension */
  if (wdh_load(&g_p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm_init(&g_c, &g_p, COMM, "job", 1, NR, rank);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  if (g_case == C_TERMOK) {
    wdh_traffic_start(&g_c, 4, "train");
    char ok = 1;
    if (write(fd, &ok, 1) != 1) _exit(1);
    for (;;) pause();
  }
  wdh_run_ops(&g_c, NULL, &cfg, 5); /* AllReduce seq 0..4 everywhere */
  int waits = rank != 3 || culprit_enters();
  wdh_op op;
  pthread_t t;
  if (g_case == C_SELF || g_case == C_SELFOK) {
    wdh_op_cfg self;
    wdh_op_cfg_default(&self);
    self.kind = WDH_OP_SEND;
    self.peer = rank;
    wdh_op so;
    wdh_op_run(&g_c, &self, &so);
    self.kind = WDH_OP_RECV;
    wdh_op_run(&g_c, &self, &so);
    cfg.no_proxy = 1; /* small and intra-node: KernelCh is its only NCCL event */
    cfg.count = 1024;
    if (waits) {
      wdh_op_enqueue(&g_c, &cfg, &op);
      if (g_case == C_SELFOK) {
        wdh_op_gpu(&op);
      } else {
        wdh_gpu_complete(&g_c, op.gpu_pos - 1); /* the stream got to it */
        stale_kernelch(&op);                    /* ... and its kernel blocks */
      }
    }
  } else if (g_case == C_REPLAY || g_case == C_REPLAYOK) {
    wdh_op_cfg cap = cfg;
    cap.graph_captured = 1;
    wdh_op captured;
    wdh_op_enqueue(&g_c, &cap, &captured);
    g_c.seq[WDH_FUNC_ALLREDUCE]--; /* the capture gave no Coll: the replay is seq 5 */
    if (waits) {
      wdh_op rep;
      wdh_op_replay(&captured, &rep); /* its KernelCh starts and stops at once */
      wdh_op_cfg next = cfg;
      if (g_case == C_REPLAY) wdh_op_enqueue(&g_c, &next, &op); /* seq 6 waits behind it */
      else wdh_run_ops(&g_c, NULL, &next, 1);
    }
  } else if (g_case == C_NETERR) {
    cfg.hang_channel = 0;
    wdh_op_enqueue(&g_c, &cfg, &op);
    if (rank == 1) {
      pthread_create(&t, NULL, net_proxy, &op);
      pthread_join(t, NULL); /* gone: its steps stay open, nobody stops them */
    } else {
      wdh_op_proxy(&op);
    }
  } else if (waits) {
    if (g_case != C_HEALTHY) cfg.hang_channel = 0; /* rank 3's data never comes */
    wdh_op_enqueue(&g_c, &cfg, &op);
    wdh_op_proxy(&op);
  }
  int pytorch = g_case == C_NCCL2 || g_case == C_LEGACY3 || g_case == C_LEGACY1 || g_case == C_REPLAY;
  if (pytorch && rank != 3) pthread_create(&t, NULL, pt_watchdog, NULL);
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  if (culprit_enters() && g_case != C_NETERR) {
    wdh_sleep_ms(300);
    wdh_comm_finalize(&g_c);
    wdh_unload(&g_p);
    _exit(0);
  }
  for (;;) pause(); /* waiting in cudaStreamSynchronize, or in the data loader */
}

static int run_job(pid_t *pids) {
  int n = wdh_fork_ranks(NR, rank_main, pids);
  WDH_CHECK(n == NR, "%d of %d ranks ready", n, NR);
  return n == NR;
}

static void expect_first(const char *dir, const char *a, const char *b, const char *what) {
  char line[4096];
  wdh_analyzer_first_line(dir, "", line, sizeof line);
  WDH_CHECK(strstr(line, a) && (!b || strstr(line, b)), "%s: first line \"%s\" lacks \"%s\" / \"%s\"",
            what, line, a, b ? b : "");
}

/* Whether some dump of reason in dir lists AllReduce seq `seq` in flight with status st. */
static int lists_op(const char *dir, const char *reason, int seq, const char *st) {
  char *paths[8];
  int n = wdh_list_dumps(dir, reason, paths, 8), found = 0;
  for (int i = 0; i < n && i < 8 && !found; i++) {
    void *j = wdh_json_load(paths[i]);
    WDH_CHECK(wdh_validate_dump(paths[i]) == 0, "%s does not validate", paths[i]);
    for (int k = 0; k < 8 && !found; k++) {
      char fp[64], sp[64], qp[64];
      snprintf(fp, sizeof fp, "comms.0.inflight.%d.func", k);
      snprintf(sp, sizeof sp, "comms.0.inflight.%d.status", k);
      snprintf(qp, sizeof qp, "comms.0.inflight.%d.seq", k);
      const char *func = wdh_jstr(j, fp), *status = wdh_jstr(j, sp);
      found = func && !strcmp(func, "AllReduce") && wdh_jnum(j, qp, -1) == seq && status &&
              (!st || !strcmp(status, st));
    }
    wdh_json_free(j);
  }
  wdh_free_paths(paths, n < 8 ? n : 8);
  return found;
}

/* torchrun once the waiting ranks died: SIGTERM to the survivor, SIGKILL after the grace. */
static void torchrun_end(pid_t *pids, int expect_sig, int expect_exit) {
  for (int r = 0; r < 3; r++) {
    int st = 0;
    int ended = wdh_wait_child(pids[r], 15000, &st);
    WDH_CHECK(ended, "rank %d did not end by itself", r);
    if (expect_sig)
      WDH_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == expect_sig, "rank %d: status 0x%x, expected signal %d",
                r, st, expect_sig);
    else
      WDH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == expect_exit, "rank %d: status 0x%x", r, st);
    pids[r] = 0;
  }
  kill(pids[3], SIGTERM);
  int st = 0;
  wdh_wait_child(pids[3], 5000, &st); /* the grace period (30 s), scaled down; then SIGKILL */
  pids[3] = 0;
}

static void case_pytorch(const char *dir, int which) {
  g_case = which;
  pid_t pids[NR];
  if (!run_job(pids)) {
    wdh_kill_ranks(pids, NR);
    return;
  }
  torchrun_end(pids, which == C_LEGACY1 ? 0 : SIGABRT, 6);
  const char *reason = which == C_LEGACY1 ? "abort" : "sigabrt";
  int n = wdh_list_dumps(dir, reason, NULL, 0);
  WDH_CHECK(n == 3, "%d %s dumps from the 3 waiting ranks", n, reason);
  WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 0, "a stall dump although PyTorch fired first");
  WDH_CHECK(lists_op(dir, reason, 5, "reached"), "no %s dump lists AllReduce seq 5 reached", reason);
  if (which != C_LEGACY3) WDH_CHECK(wdh_list_dumps(dir, "term", NULL, 0) == 1, "no term dump from rank 3");
  expect_first(dir, "rank 3 never entered AllReduce seq 5", "HANG", "PyTorch's teardown");
  if (which == C_NCCL2) {
    /* The automatic verdict, though every waiting rank died: the first to abort posted the
     * episode (live processes answer with peer dumps: rank 3, when it sees the episode before
     * torchrun's SIGTERM) and left a detached analyzer behind, which waited for a dump of every
     * process and published the line. */
    char line[4200];
    snprintf(line, sizeof line, "%s/triggers/verdict-1.line", dir);
    for (int i = 0; i < 200 && access(line, R_OK) != 0; i++) wdh_sleep_ms(100);
    char *t = wdh_read_file(line, NULL);
    WDH_CHECK(t && strstr(t, "rank 3 never entered AllReduce seq 5"), "automatic verdict: %s",
              t ? t : "(none)");
    free(t);
  }
}

static void case_healthy(const char *dir, int which) {
  g_case = which;
  pid_t pids[NR];
  if (!run_job(pids)) {
    wdh_kill_ranks(pids, NR);
    return;
  }
  for (int r = 0; r < NR; r++) {
    int st = 0;
    WDH_CHECK(wdh_wait_child(pids[r], 15000, &st) && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "rank %d: status 0x%x", r, st);
  }
  wdh_sleep_ms(100);
  WDH_CHECK(wdh_list_dumps(dir, NULL, NULL, 0) == 0, "%d dumps from a healthy job",
            wdh_list_dumps(dir, NULL, NULL, 0));
}

static void case_termok(const char *dir) {
  g_case = C_TERMOK;
  pid_t pids[NR];
  if (!run_job(pids)) {
    wdh_kill_ranks(pids, NR);
    return;
  }
  wdh_sleep_ms(500);
  for (int r = 0; r < NR; r++) kill(pids[r], SIGTERM);
  /* torchrun's grace before its SIGKILL (torch/distributed/elastic/multiprocessing/api.py,
   * PContext.close: timeout 30 s), from the SIGTERM, for all ranks together: the term dumps of
   * four processes each busy with traffic took 10 s and more on CI's loaded 2-core machine. */
  uint64_t end = wdh_now_ns() + 30ull * 1000000000ull;
  for (int r = 0; r < NR; r++) {
    int st = 0;
    uint64_t now = wdh_now_ns();
    wdh_wait_child(pids[r], now < end ? (unsigned)((end - now) / 1000000ull) : 1, &st);
    WDH_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "rank %d: status 0x%x", r, st);
  }
  WDH_CHECK(wdh_list_dumps(dir, "term", NULL, 0) == NR, "%d term dumps", wdh_list_dumps(dir, "term", NULL, 0));
  expect_first(dir, "OK: no hang found", NULL, "a healthy job ended by SIGTERM");
}

static void case_self(const char *dir) {
  g_case = C_SELF;
  pid_t pids[NR];
  if (!run_job(pids)) {
    wdh_kill_ranks(pids, NR);
    return;
  }
  /* One stall dump opens the job's episode; the others answer it with peer dumps, or dump for
   * their own stall (joining the same episode) when it fires first. */
  int n = wdh_wait_dumps(dir, "stall", 1, 10000);
  WDH_CHECK(n >= 1, "no stall dump although the kernel is blocked");
  n = wdh_wait_dumps(dir, NULL, NR, 8000);
  WDH_CHECK(n == NR, "%d stall and peer dumps", n);
  wdh_kill_ranks(pids, NR);
  WDH_CHECK(lists_op(dir, "stall", 5, "stalled"), "no stall dump lists AllReduce seq 5 stalled");
  expect_first(dir, "rank 3 never entered AllReduce seq 5", "HANG", "self round then KernelCh");
}

static void case_replay(const char *dir) {
  g_case = C_REPLAY;
  pid_t pids[NR];
  if (!run_job(pids)) {
    wdh_kill_ranks(pids, NR);
    return;
  }
  torchrun_end(pids, SIGABRT, 0);
  WDH_CHECK(wdh_list_dumps(dir, "sigabrt", NULL, 0) == 3, "sigabrt dumps");
  expect_first(dir, "rank 3 never entered AllReduce seq 5", "HANG", "graph replay after eager work");
}

static void case_neterr(const char *dir) {
  g_case = C_NETERR;
  pid_t pids[NR];
  if (!run_job(pids)) {
    wdh_kill_ranks(pids, NR);
    return;
  }
  int n = wdh_wait_dumps(dir, "stall", 1, 5000);
  WDH_CHECK(n == 1, "%d stall dumps: rank 1's proxy thread is gone with its kernel waiting", n);
  wdh_wait_dumps(dir, "peer", 3, 8000);
  wdh_kill_ranks(pids, NR);
  expect_first(dir, "rank 1: its NCCL proxy thread exited with AllReduce seq 5", "network error",
               "network error");
}

/* One process: the proxy thread is joined after the kernel ended (revoke): no dump. */
static void case_revoke(const char *dir) {
  pid_t pid = fork();
  if (pid == 0) {
    if (wdh_fake_cuda_load() != 0) _exit(1);
    g_case = C_NETERR;
    if (wdh_load(&g_p, wdh_plugin_path(), 0) != 0) _exit(1);
    wdh_comm_init(&g_c, &g_p, COMM + 1, "revoked", 1, 2, 0);
    wdh_op_cfg cfg;
    wdh_op_cfg_default(&cfg);
    wdh_run_ops(&g_c, NULL, &cfg, 2);
    cfg.hang_channel = 0;
    wdh_op op;
    wdh_op_enqueue(&g_c, &cfg, &op);
    pthread_t t;
    pthread_create(&t, NULL, net_proxy, &op);
    pthread_join(t, NULL);
    wdh_gpu_complete(&g_c, op.gpu_pos); /* the abort flag ended the kernel */
    wdh_sleep_ms(1500);
    _exit(wdh_list_dumps(dir, NULL, NULL, 0) == 0 ? 0 : 2);
  }
  int st = 0;
  wdh_wait_child(pid, 10000, &st);
  WDH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "a revoked communicator's op was dumped (0x%x)", st);
}

static void *second_abort(void *arg) {
  (void)arg;
  abort();
}

/* SIGABRT where it must not wait, or must not wait long. */
static void case_abrtbad(const char *dir) {
  (void)dir;
  for (int variant = 0; variant < 3; variant++) {
    uint64_t t0 = wdh_now_ns();
    pid_t pid = fork();
    if (pid == 0) {
      if (variant == 2) setenv("NCCL_WATCHDOG_BACKTRACE_WAIT", "10s", 1);
      if (wdh_load(&g_p, wdh_plugin_path(), 0) != 0) _exit(1);
      wdh_comm_init(&g_c, &g_p, COMM + 2, "bad", 1, 2, 0);
      if (variant == 0) {
        pid_t child = fork(); /* the plugin is quiet in a forked child: no wait there */
        if (child == 0) abort();
        int cst = 0;
        waitpid(child, &cst, 0);
        _exit(WIFSIGNALED(cst) && WTERMSIG(cst) == SIGABRT ? 0 : 3);
      }
      if (variant == 1) {
        pthread_t t;
        pthread_create(&t, NULL, second_abort, NULL);
        abort();
      }
      /* A thread that never answers the backtrace signal holds the dump for 10 s: the aborting
       * thread gives up after its bound and the signal goes on. */
      sigset_t all;
      sigfillset(&all);
      pthread_sigmask(SIG_BLOCK, &all, NULL);
      pthread_t t;
      pthread_create(&t, NULL, second_abort, NULL);
      for (;;) pause();
    }
    int st = 0;
    wdh_wait_child(pid, 20000, &st);
    double secs = (double)(wdh_now_ns() - t0) / 1e9;
    if (variant == 0)
      WDH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "forked child's abort: status 0x%x", st);
    else
      WDH_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "variant %d: status 0x%x", variant, st);
    WDH_CHECK(secs < 9.0, "variant %d took %.1f s (bound: 5 s)", variant, secs);
  }
}

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    void (*fn)(const char *);
    const char *timeout;
  } cases[] = {
      {"nccl2", NULL, "60s"},  {"legacy3", NULL, "60s"}, {"legacy1", NULL, "60s"},
      {"healthy", NULL, "2s"}, {"termok", case_termok, "60s"}, {"self", case_self, "1s"},
      {"selfok", NULL, "1s"},  {"replay", case_replay, "60s"}, {"replayok", NULL, "1s"},
      {"neterr", case_neterr, "60s"}, {"revoke", case_revoke, "60s"}, {"abrtbad", case_abrtbad, "60s"},
  };
  int rc = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (argc > 1 && strcmp(argv[1], cases[i].name) != 0) continue;
    char tag[64];
    snprintf(tag, sizeof tag, "teardown-%s", cases[i].name);
    /* nccl2 also checks the automatic verdict of a job PyTorch tears down. */
    setenv("NCCL_WATCHDOG_VERDICT", strcmp(cases[i].name, "nccl2") ? "0" : "1", 1);
    setenv("NCCL_WATCHDOG_VERDICT_WAIT", "5s", 1);
    char *dir = wdh_scenario_dir(tag, cases[i].timeout, "100ms");
    /* Stacks are not what these cases check; without them a dump is quick under sanitizers too. */
    setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
    fprintf(stderr, "== %s\n", cases[i].name);
    if (!strcmp(cases[i].name, "nccl2")) case_pytorch(dir, C_NCCL2);
    else if (!strcmp(cases[i].name, "legacy3")) case_pytorch(dir, C_LEGACY3);
    else if (!strcmp(cases[i].name, "legacy1")) case_pytorch(dir, C_LEGACY1);
    else if (!strcmp(cases[i].name, "healthy")) case_healthy(dir, C_HEALTHY);
    else if (!strcmp(cases[i].name, "selfok")) case_healthy(dir, C_SELFOK);
    else if (!strcmp(cases[i].name, "replayok")) case_healthy(dir, C_REPLAYOK);
    else cases[i].fn(dir);
    char name[80];
    snprintf(name, sizeof name, "scenario.teardown %s", cases[i].name);
    rc |= wdh_scenario_end(name, dir);
  }
  return rc;
}
