/*
 * The verdict without a human: a job of four processes and two communicators hung by one rank
 * prints, with nobody running a command, a line naming the root in every process's log.
 * Processes 0-3 share "dp"; 2 and 3 also share "pp" (as in scenario.jobroot). Process 3 gets
 * stuck in its data loader; 2 waits on it in a pp AllReduce; 0 and 1 wait in the next dp
 * AllReduce. NCCL's order as the test host plays it (nccl_host.h): ncclEnqueueCheck
 * (enqueue.cc), ncclProxyOpToArgs (proxy.cc), sendProxyProgress / recvProxyProgress
 * (transport/net.cc).
 *   job      the opener of the episode waits for the four dumps, runs the analyzer beside the
 *            plugin (its verdict-1.txt, .json, .html in the dump directory, exactly once), every
 *            process logs "verdict of stall episode 1: JOB: root cause ... global rank 3 ...",
 *            within the timeout + 15 s of the hang; NCCL_WATCHDOG_ON_VERDICT (this program,
 *            no shell) gets the files' paths and the line; the metrics file has the verdict.
 *            A salvage mark left by a node torn down mid-salvage (salvage-1-gone-99999.pending,
 *            the job's own) is in the directory from the start: with every process in, the
 *            settle does not wait for it.
 *   missing  NCCL_WATCHDOG_ANALYZER names nothing: one WARN, dumps as before, no verdict.
 *   resumed  a rank whose AllReduce stalls past the timeout and then completes: "progress
 *            resumed after" in its log, verdict-1.resumed beside the verdict.
 *   aborted  its twin as NCCL 2.28.9 played it on a GPU (docs/gpu-testing.md): CUDA events
 *            around the launch, the AllReduce stalls, the verdict is made, then ncclCommAbort
 *            (init.cc: setCommAbortFlags, then commReclaim): the abort flag ends the kernel (its
 *            CUDA end event completes), the proxy's progress loop (proxy.cc, ncclProxyProgress)
 *            ends with every step open and stops nothing, the communicator is finalized 1.5 s
 *            later (2.31 drains its KernelCh work without stopEvent the same way).
 *            The episode is not "resumed": no such line, no verdict-1.resumed.
 *   killed   process 3 is SIGKILLed (no epilog, no dump); the node's poller (LOCAL_RANK 0)
 *            turns its ring files into post-mortem dumps in the dump directory, and the
 *            verdict names rank 3 from them ("only its post-mortem ring file is left").
 *   slowsalvage  "killed" with ring files in node memory, NCCL_WATCHDOG_VERDICT_WAIT=1s and a
 *            salvage that writes the killed process's two communicators 2 s and 4 s in (the
 *            analyzer, a script, splits it when given --salvage: a nice-19 child on a loaded
 *            node): the poller's salvage-1-*.pending, which lists the process, keeps the
 *            verdict's settle waiting until both are in, and the line still names rank 3 from
 *            its ring files, never "left no dump" (before: the settle ended at 1 s without it,
 *            as nodes' skew_killed did in CI; then, in CI, at the first of the two dumps).
 *   ftgroups torchft's replica groups of two processes each, a torchrun per group (pytorch/torchft:
 *            Manager takes the group's RANK and WORLD_SIZE from torchrun; torchft/process_group.py
 *            makes the quorum's communicator across the groups, one per position in the group):
 *            groups A (processes 0, 1) and B (2, 3) on two nodes, WORLD_SIZE 2 in every process,
 *            a "shard" communicator per group and a "replicate" one per position. Group B sits
 *            outside NCCL (its data loader), group A waits for it in replicate AllReduce seq 3;
 *            node B's poller looks at the shared directory every 1.5 s. The opener's count (2:
 *            WORLD_SIZE, its communicators' sizes) is short of the job: the settle waits until
 *            every rank of the communicators the answers name has answered ("4 of 2 dumps"),
 *            and no line says "no dump" (before: a verdict on group A's two dumps, group B
 *            "left no dump"). Group B's processes are named by torchft's global rank
 *            (torchft/manager.py, _global_rank: REPLICA_GROUP_ID x WORLD_SIZE + RANK): 2 and 3,
 *            never the RANK 0 and 1 group A's processes have too.
 *   forged   another member of the shared directory planted, before the job, verdict-1.txt as a
 *            link to a forged report, verdict-1.log as a link, and triggers/verdict-1.line
 *            (another user's when run as root, else a link): every process still logs the
 *            analyzer's own line naming global rank 3, none logs the forged one.
 *   flood    the job case while a process of the same user writes a well-formed episode trigger
 *            naming another job's communicator every 100 ms, and a malformed one beside each, from
 *            before the hang on: every process answers (peer dumps, their own budget) and its
 *            stall folds into an episode that never gets a verdict; once the verdict could have
 *            come (NCCL_WATCHDOG_VERDICT_WAIT + _TIMEOUT), the stall opens an episode of its own
 *            (processes falling back for one communicator meet in one, under the first free
 *            number): each stalled process writes its own stall dump and logs a verdict of a
 *            hang. Behind the flood the others may not answer that episode, so who is to blame
 *            is not checked (the verdict may say a waiting rank left no dump).
 *   foreign  the same job run as an unprivileged user (uid 65532; root ignores permissions) in a
 *            directory its group shares (mode 2770), where another member (uid 65531) made, before
 *            the job, the host folder "mhost" and "triggers" as folders of its own (mode 0777), a
 *            forged episode trigger and verdict line in them, and verdict-1.txt and verdict-1.log
 *            as links to a forged report. Every process logs the analyzer's line naming global
 *            rank 3; the job's dumps and triggers go to folders of its own (mhost~65532,
 *            triggers~65532); nothing is written into the other member's folders or through its
 *            links. Needs root (to become both users); skipped otherwise.
 *   routine  the job case after the moments a real job's directory holds first: every process is
 *            snapshotted (SIGUSR1) 32 times, the cap of its kind (128 snapshot dumps), then a
 *            checkpoint-like stall: processes 0-2 wait in dp AllReduce seq 5 while process 3 comes
 *            2.5 s late (the 1 s timeout passes; the episode resumes), then the real hang in the
 *            next AllReduce. Every process logs the real hang's verdict naming global rank 3 and
 *            dp AllReduce seq 6; none logs "OK".
 *   superseded  "routine" without the snapshots, process 1 first into each stall (0 and 2
 *            come 800 ms later and answer its triggers), and an analyzer (NCCL_WATCHDOG_ANALYZER, a
 *            script) that takes a minute over episode 1, the slow phase that resumed: process 1
 *            opens episode 2 while its analyzer of episode 1 still runs. It stops that one and
 *            says so ("NO VERDICT MADE for stall episode 1: it resumed"), and every process logs
 *            the real hang's verdict naming global rank 3 and dp AllReduce seq 6 (a CI run under
 *            TSan had no verdict of episode 2: it waited for the first analyzer to end).
 *   torndown  the job case, then the launcher ends the job (every process SIGKILLed after its
 *            dump) and the on-call salvages the ring files by hand (--salvage, docs/operations.md):
 *            each post-mortem names its process's incarnation (boot, start) as its own dumps do,
 *            so the analyzer still names global rank 3 as never entering; no process "died" (a
 *            CI run under TSan, whose node poller's copy of a process found it killed, blamed a
 *            waiting rank that "died").
 *   saver    NCCL_WATCHDOG_MAX_DUMPS=2 and three checkpoint-like stalls that resume before the
 *            real hang (as in "routine"): process 3, the slow saver, only ever answers with peer
 *            dumps; those of resumed episodes give their budget back, so it still dumps for the
 *            real hang, and every process logs a verdict naming global rank 3 as never having
 *            entered (not "left no dump").
 *   unanswered  the job case with NCCL_WATCHDOG_PEER_DUMPS=0 and no automatic verdict: process 3
 *            writes nothing; the analyzer run by hand reads its ring file (rewritten while read)
 *            as its live state, not a post-mortem: global rank 3 never entered pp seq 3.
 *   slowpoll  "unanswered" with process 3's watchdog polling every 8 s (the others 100 ms): its
 *            ring file is rewritten once in 8 s, so the analyzer's first three re-reads (2.5 s)
 *            may see no change; the file records the poll, and the analyzer reads it again until
 *            one poll and a quarter have passed: global rank 3 never entered, never "died".
 *   stopped  "unanswered" with process 3 stopped (SIGSTOP: its watchdog cannot rewrite
 *            anything) before the analyzer runs by hand: /proc tells the process that wrote the
 *            ring file alive (this machine's boot and PID namespace, whatever host name it took), the line says it is stopped and names global
 *            rank 3 as never entering; SIGKILLed and reaped, the same analyzer says it died.
 *   frozen   the job case with ring files in node memory (NCCL_WATCHDOG_RING_DIR outside the dump
 *            directory, as in production) and process 3 stopped (SIGSTOP: a debugger, or a
 *            process whose watchdog cannot run) once the ranks are ready: it answers nothing, and
 *            the analyzer, as on another node, cannot see its ring files. The node's poller finds
 *            them not rewritten past their poll while their process lives, copies them into the
 *            dump directory as its live state for the episode, and every other process logs a
 *            verdict naming global rank 3 as never entering pp seq 3, stopped, not "left no dump".
 *            A process of another job of the same user (another SLURM_JOB_ID at exec), stopped
 *            with its ring file in the same folder, is not copied.
 *   busy     the job case with ring files in node memory and process 3 slow to answer: its main
 *            thread sits in vfork (a child that takes 10 s to exit), so its watchdog's dump
 *            waits NCCL_WATCHDOG_BACKTRACE_WAIT=4s for that thread's stack and rewrites no ring file
 *            meanwhile. Its watchdog noted the episode before it began (answered_k): the node's
 *            poller, due 2.5 s after it answered, gives it another wait instead of copying its
 *            ring files as a silent process's live state (the conformance storm had 47 such
 *            copies of 200 processes, all of which answered). Every process logs the verdict
 *            naming global rank 3 as never entering, its main thread's place as the kernel gives
 *            it (state D, in the system call clone that waits for its vfork child; before: "no stack in its dump"); no live copy.
 *   stuckdump  "busy" with process 3's dump stuck for 25 s (NCCL_WATCHDOG_BACKTRACE_WAIT=40s): past
 *            the poller's second wait (7.5 s) it copies process 3's ring files after all, and the
 *            verdict says that process 3 began its dump for the episode and never finished it.
 *   late     the job case, but process 3 comes to pp AllReduce seq 3 2.5 s after it answered
 *            episode 1 (outside NCCL then: its dump says it never entered), and the collective
 *            hangs all the same (its data never comes). Its stall is of an operation it began more
 *            than a timeout after its answer: it opens episode 2 instead of folding into 1 (one
 *            that comes within a timeout, a loaded node's late rank, still folds: scenario.storm),
 *            every process dumps again, and
 *            episode 2's verdict no longer names global rank 3 as never entering (before: "already
 *            dumped for the job's stall episode ... not dumping again", and the only verdict said
 *            it never entered).
 *   foreignfrozen  "frozen" run as in "foreign" (needs root): the poller's copy goes to the job's
 *            own host folder (mhost~65532), as its dumps do, never into the other member's.
 *   saverquiet  "saver" with NCCL_WATCHDOG_VERDICT=0: the resumed episodes are still marked
 *            (verdict-K.resumed, by the process that opened each), process 3 still dumps for the
 *            real hang, and the analyzer run by hand names global rank 3 as never entering seq 8.
 * Each process copies the lines it logged into <dir>/log-<rank>.txt (it is SIGKILLed at the end).
 */
#include <dirent.h>
#include <grp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl_host.h"

#define DP 0xa7a7a7a7ull
#define PP 0xb7b7b7b7ull
#define JOB_UID 65532   /* "foreign": the job's user */
#define OTHER_UID 65531 /* another member of the job's group */

/* Become uid (group gid, and member of JOB_UID's group): 0, or -1. */
static int become(uid_t uid, gid_t gid) {
  gid_t groups[1] = {JOB_UID};
  if (setgroups(1, groups) != 0 || setgid(gid) != 0 || setuid(uid) != 0) return -1;
  /* As a process the user started: the change of user left it undumpable, its /proc files
   * readable by root alone (the poller reads a neighbour's environment and state there). */
  return prctl(PR_SET_DUMPABLE, 1) == 0 ? 0 : -1;
}

static const char *g_dir, *g_case;
static char *g_barrier; /* where ranks meet (wdh_barrier), outside the dump directory */

/* "foreign" and "foreignfrozen": the job runs as JOB_UID beside another member's folders. */
static int foreign_case(void) { return !strcmp(g_case, "foreign") || !strcmp(g_case, "foreignfrozen"); }
/* "frozen" and "foreignfrozen": process 3 stopped, ring files in node memory. */
static int frozen_case(void) { return !strcmp(g_case, "frozen") || !strcmp(g_case, "foreignfrozen"); }
/* Ring files in node memory, outside the dump directory. */
static int node_rings_case(void) {
  return frozen_case() || !strcmp(g_case, "busy") || !strcmp(g_case, "stuckdump") || !strcmp(g_case, "slowsalvage");
}
/* "saver" and "saverquiet": three resumed checkpoint stalls before the real hang. */
static int saver_case(void) { return !strcmp(g_case, "saver") || !strcmp(g_case, "saverquiet"); }
/* The cases where process 3 answers nothing and the analyzer is run by hand. */
static int unanswered_case(void) {
  return !strcmp(g_case, "unanswered") || !strcmp(g_case, "slowpoll") || !strcmp(g_case, "stopped");
}
static int known_case(void) {
  static const char *const cases[] = {"job", "missing", "resumed", "aborted", "killed", "forged", "foreign",
                                      "flood", "routine", "saver", "saverquiet", "unanswered",
                                      "slowpoll", "stopped", "frozen", "foreignfrozen", "superseded",
                                      "torndown", "busy", "late", "stuckdump", "slowsalvage", "ftgroups"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (!strcmp(g_case, cases[i])) return 1;
  return 0;
}

/* The next AllReduce of c, whose data never comes (or comes after resume_ms). */
static void hang_in(wdh_comm *c, unsigned resume_ms) {
  wdh_op op;
  wdh_op_hang(c, &op);
  if (resume_ms) {
    wdh_sleep_ms(resume_ms);
    wdh_op_resume(&op);
  }
  wdh_op_finish(&op);
}

/* What this process logged, for the parent: the lines with "verdict", "resumed" or "automatic
 * verdict", rewritten every 100 ms until the process is killed. */
static void keep_log(int r) {
  char path[4200], tmp[4210];
  snprintf(path, sizeof path, "%s/log-%d.txt", g_dir, r);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int last = -1;
  for (;;) {
    int n = wdh_log_count(-1);
    if (n != last) {
      last = n;
      FILE *f = fopen(tmp, "w");
      if (f) {
        int saved = dup(2);
        if (saved >= 0 && dup2(fileno(f), 2) >= 0) {
          wdh_log_print();
          fflush(stderr);
          dup2(saved, 2);
        }
        if (saved >= 0) close(saved);
        fclose(f);
        if (rename(tmp, path) != 0) unlink(tmp);
      }
    }
    wdh_sleep_ms(100);
  }
}

/* The child of "busy" and "stuckdump" process 3's vfork: its parent waits for it, in the kernel,
 * taking no signal, for 10 s (busy) or 25 s (stuckdump). No sanitizer runs here (shared memory,
 * no stack of its own to speak of): one system call, then the exit. */
__attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize_undefined)) static int
vfork_child(void *arg) {
  (void)arg;
  static const struct timespec busy = {10, 0}, stuck = {25, 0};
  syscall(SYS_nanosleep, g_case[0] == 's' ? &stuck : &busy, NULL);
  syscall(SYS_exit, 0);
  return 0;
}

#define SHARD_A 0x5a0000000000a0a0ull
#define SHARD_B 0x5a0000000000b0b0ull
#define REP0 0x7e0000000000c0c0ull
#define REP1 0x7e0000000000c1c1ull
static char g_rings[2][64]; /* ftgroups: each node's ring folder */

/* ftgroups: process r is rank r % 2 of replica group r / 2, under that group's torchrun. */
static void ft_rank_main(int r, int fd) {
  int g = r / 2, l = r % 2;
  wdh_launcher_env(l, l, 2);
  setenv("REPLICA_GROUP_ID", g ? "1" : "0", 1); /* torchft's examples set these by hand */
  setenv("NUM_REPLICA_GROUPS", "2", 1);
  setenv("NCCL_WATCHDOG_HOSTNAME", g ? "nodeb" : "nodea", 1);
  setenv("NCCL_WATCHDOG_RING_DIR", g_rings[g], 1);
  if (g) setenv("NCCL_WATCHDOG_TRIGGER_POLL", "1500ms", 1);
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm shard, rep;
  wdh_comm_init(&shard, &p, g ? SHARD_B : SHARD_A, "shard", 1, 2, l);
  wdh_comm_init(&rep, &p, l ? REP1 : REP0, "replicate", 1, 2, g);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&shard, NULL, &cfg, 5);
  wdh_run_ops(&rep, NULL, &cfg, 3);
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  if (g == 0) hang_in(&rep, 0); /* replicate AllReduce seq 3: waits for group B */
  keep_log(r);                  /* group B: in its data loader */
}

static void rank_main(int r, int fd) {
  if (!strcmp(g_case, "ftgroups")) {
    ft_rank_main(r, fd);
    return;
  }
  wdh_launcher_env(r, r, 4); /* LOCAL_RANK 0: the node's trigger poller */
  if (!strcmp(g_case, "aborted") && wdh_fake_cuda_load() != 0) _exit(1);
  if (foreign_case() && become(JOB_UID, JOB_UID) != 0) _exit(1);
  if (!strcmp(g_case, "slowpoll") && r == 3) setenv("NCCL_WATCHDOG_POLL", "8s", 1);
  int busy = (!strcmp(g_case, "busy") || !strcmp(g_case, "stuckdump")) && r == 3;
  if (busy) {
    setenv("NCCL_WATCHDOG_BACKTRACE", "1", 1);
    setenv("NCCL_WATCHDOG_BACKTRACE_WAIT", g_case[0] == 's' ? "40s" : "4s", 1);
  }
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
  int superseded = !strcmp(g_case, "superseded");
  if (!strcmp(g_case, "routine") || saver_case() || superseded) {
    /* Routine snapshots, each one written (its log line) before the next is asked for: signals
     * sent faster would merge. At most 3 s each. */
    for (int i = 0; !strcmp(g_case, "routine") && i < 32; i++) {
      int before = wdh_log_count(-1);
      kill(getpid(), SIGUSR1);
      for (int w = 0; w < 300 && wdh_log_count(-1) == before; w++) wdh_sleep_ms(10);
    }
    wdh_sleep_ms(500);
    /* The checkpoint: process 3 saves it while the others wait at the next AllReduce. */
    for (int ck = 0; ck < (saver_case() ? 3 : 1); ck++) {
      if (r == 3) {
        wdh_sleep_ms(2500);
        wdh_run_ops(&dp, NULL, &cfg, 1);
      } else if (r <= 2) {
        if (superseded && r != 1) wdh_sleep_ms(800); /* process 1 opens the episode */
        hang_in(&dp, superseded && r != 1 ? 1700 : 2500);
      }
      /* NCCL completes the AllReduce on every rank once the last one entered it (wdh_barrier:
       * transport/net.cc recvProxyProgress waits for the peer's data): all leave it
       * together (ranks whose snapshots took longer under TSan came late to the real hang,
       * and answered its episode before they reached it). */
      char name[16];
      snprintf(name, sizeof name, "ck%d", ck);
      wdh_barrier(g_barrier, name, r, 4, 30000);
      wdh_sleep_ms(2000); /* the resumed episode settles */
    }
    /* The real hang, as in "job", one AllReduce later on dp. */
    if (superseded && r != 1) wdh_sleep_ms(800);
    if (r <= 1) hang_in(&dp, 0);
    else if (r == 2) hang_in(&pp, 0);
    keep_log(r);
  }
  if (!strcmp(g_case, "resumed")) {
    if (r == 0) hang_in(&dp, 2500); /* stalls past the 1 s timeout, then completes */
  } else if (!strcmp(g_case, "aborted")) {
    if (r == 0) {
      wdh_op_cfg hcfg;
      wdh_op_cfg_default(&hcfg);
      hcfg.hang_channel = 0;
      wdh_op op;
      wdh_op_enqueue(&dp, &hcfg, &op);
      wdh_op_proxy(&op);
      wdh_sleep_ms(2500);                  /* stalled past the 1 s timeout: dump, verdict */
      wdh_gpu_complete(&dp, op.gpu_pos);   /* ncclCommAbort's flag ends the kernel */
      wdh_sleep_ms(1500);                  /* the proxy's loop is over: nothing more from NCCL */
      wdh_comm_finalize(&dp);
    }
  } else if (r <= 1) {
    hang_in(&dp, 0); /* dp AllReduce seq 5: waits for ranks 2 and 3 */
  } else if (r == 2) {
    hang_in(&pp, 0); /* pp AllReduce seq 3: waits for process 3 */
  } else if (r == 3 && !strcmp(g_case, "late")) {
    /* Outside NCCL until well after it answered episode 1 (more than the 1 s timeout). */
    for (int i = 0; i < 600 && !wdh_log_contains(-1, "another process reported a stall"); i++) wdh_sleep_ms(50);
    wdh_sleep_ms(2500);
    hang_in(&pp, 0);
  } else if (busy) {
    /* Stuck in its data loader, in vfork: a thread that takes no signal until the child exits
     * (clone, so that no sanitizer turns it into a fork). */
    static char stack[64 * 1024] __attribute__((aligned(16)));
    pid_t child = clone(vfork_child, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
    if (child > 0) waitpid(child, NULL, 0);
  } /* r == 3: stuck in its data loader */
  keep_log(r);
}

static char *read_all(const char *path) { return wdh_read_file(path, NULL); }

/* Waits until every process's log holds want; returns how many do. */
static int wait_logs(const char *want, int n, unsigned timeout_ms) {
  uint64_t until = wdh_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  int have = 0;
  do {
    have = 0;
    for (int r = 0; r < n; r++) {
      char path[4200];
      snprintf(path, sizeof path, "%s/log-%d.txt", g_dir, r);
      char *t = read_all(path);
      have += t && strstr(t, want);
      free(t);
    }
    if (have == n) break;
    wdh_sleep_ms(200);
  } while (wdh_now_ns() < until);
  return have;
}

static int count_files(const char *prefix) {
  DIR *d = opendir(g_dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  if (d) closedir(d);
  return n;
}

static int count_resumed(void) {
  DIR *d = opendir(g_dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    size_t l = strlen(e->d_name);
    n += l > 8 && !strncmp(e->d_name, "verdict-", 8) && !strcmp(e->d_name + l - 8, ".resumed");
  }
  if (d) closedir(d);
  return n;
}

static void case_job(pid_t *pids) {
  uint64_t t0 = wdh_now_ns();
  int n = wait_logs("verdict of stall episode 1: JOB: root cause", 4, 16000);
  double secs = (double)(wdh_now_ns() - t0) / 1e9;
  WDH_CHECK(n == 4, "%d of 4 processes logged the verdict within 16 s", n);
  fprintf(stderr, "autoverdict: every process logged the verdict %.1f s after the hang (timeout 1 s)\n", secs);
  char path[4200];
  snprintf(path, sizeof path, "%s/log-0.txt", g_dir);
  char *t = read_all(path);
  const char *line = t ? strstr(t, "verdict of stall episode 1: ") : NULL;
  WDH_CHECK(line && strstr(line, "global rank 3") && strstr(line, "AllReduce seq"),
            "the line does not name global rank 3 and the collective: %.300s", line ? line : "(none)");
  free(t);
  WDH_CHECK(count_files("verdict-1.txt") == 1 && count_files("verdict-1.json") == 1 &&
                count_files("verdict-1.html") == 1,
            "verdict-1.txt/.json/.html not all there");
  WDH_CHECK(count_files("verdict-2.") == 0, "a second verdict"); /* not the poller's verdict-<job>-1.line */
  /* The hook: this program, run without a shell, with the files' paths and the line. */
  snprintf(path, sizeof path, "%s/hook.out", g_dir);
  for (int i = 0; i < 50 && access(path, R_OK) != 0; i++) wdh_sleep_ms(100);
  t = read_all(path);
  WDH_CHECK(t && strstr(t, "/verdict-1.txt") && strstr(t, "LINE=JOB: root cause") && strstr(t, "EPISODE=1"),
            "hook output: %.300s", t ? t : "(none)");
  free(t);
  /* The opener's metrics file holds the verdict's time and culprit. */
  int metrics = 0; /* rewritten every 200 ms: the next one after the verdict has it */
  for (int tries = 0; tries < 30 && !metrics; tries++) {
    if (tries) wdh_sleep_ms(100);
    for (int r = 0; r < 4; r++) {
      snprintf(path, sizeof path, "%s/nccl-watchdog-mhost-%d.prom", g_dir, (int)pids[r]);
      t = read_all(path);
      metrics += t && strstr(t, "nccl_watchdog_verdict_seconds{") && strstr(t, "culprit_rank=\"3\"");
      free(t);
    }
  }
  WDH_CHECK(metrics >= 1, "no metrics file shows the verdict with culprit rank 3");
}

/* The plants of "forged", made before the ranks start. */
static void plant_forged(void) {
  char forged[4200], path[4200];
  snprintf(forged, sizeof forged, "%s/forged.txt", g_dir);
  FILE *f = fopen(forged, "w");
  if (f) {
    fputs("HANG: FORGED rank 99 never entered AllReduce seq 1\n", f);
    fclose(f);
  }
  snprintf(path, sizeof path, "%s/verdict-1.txt", g_dir);
  WDH_CHECK(symlink(forged, path) == 0, "plant %s", path);
  snprintf(path, sizeof path, "%s/verdict-1.log", g_dir);
  WDH_CHECK(symlink(forged, path) == 0, "plant %s", path);
  snprintf(path, sizeof path, "%s/triggers", g_dir);
  mkdir(path, 0700);
  snprintf(path, sizeof path, "%s/triggers/verdict-1.line", g_dir);
  if (geteuid() == 0) {
    f = fopen(path, "w");
    if (f) {
      fputs("HANG: FORGED rank 99 never entered AllReduce seq 1\n", f);
      fclose(f);
    }
    WDH_CHECK(chown(path, 65534, 65534) == 0, "chown %s", path);
  } else {
    WDH_CHECK(symlink(forged, path) == 0, "plant %s", path);
  }
}

/* "flood": the next free episode-K.trigger every 100 ms, a malformed file beside it. */
static void flood_triggers(void) {
  char dir[4200];
  snprintf(dir, sizeof dir, "%s/triggers", g_dir);
  mkdir(dir, 0700);
  for (unsigned k = 1, bad = 1;; bad++) {
    char p[4300];
    for (;; k++) {
      snprintf(p, sizeof p, "%s/episode-%u.trigger", dir, k);
      if (access(p, F_OK) != 0) break;
    }
    FILE *f = fopen(p, "wx");
    if (f) {
      fprintf(f, "{\"host\":\"elsewhere\",\"pid\":1,\"stalls\":[{\"commId\":\"0xdead\",\"rank\":0}]}");
      fclose(f);
    }
    snprintf(p, sizeof p, "%s/episode-%u.trigger", dir, k + 1);
    f = fopen(p, "wx"); /* malformed: the next number, when nobody took it first */
    if (f) {
      fprintf(f, "not a trigger %u", bad);
      fclose(f);
    }
    wdh_sleep_ms(100);
  }
}

/* "foreign": another member of the group plants, as itself, before the job. */
static void plant_foreign(void) {
  pid_t pid = fork();
  if (pid == 0) {
    if (become(OTHER_UID, OTHER_UID) != 0) _exit(1);
    umask(0);
    char p[4200], forged[4200];
    const char *line = "HANG: FORGED rank 99 never entered AllReduce seq 1\n";
    snprintf(forged, sizeof forged, "%s/forged.txt", g_dir);
    FILE *f = fopen(forged, "w");
    if (!f || fputs(line, f) < 0 || fclose(f) != 0) _exit(2);
    snprintf(p, sizeof p, "%s/mhost", g_dir);
    if (mkdir(p, 0777) != 0) _exit(3);
    snprintf(p, sizeof p, "%s/triggers", g_dir);
    if (mkdir(p, 0777) != 0) _exit(4);
    const char *names[] = {"triggers/episode-1.trigger", "triggers/verdict-1.line"};
    for (int i = 0; i < 2; i++) {
      snprintf(p, sizeof p, "%s/%s", g_dir, names[i]);
      f = fopen(p, "w");
      if (!f || fputs(i ? line : "{\"host\":\"mhost\",\"pid\":1,\"stalls\":[]}", f) < 0 || fclose(f) != 0) _exit(5);
    }
    snprintf(p, sizeof p, "%s/verdict-1.txt", g_dir);
    if (symlink(forged, p) != 0) _exit(6);
    snprintf(p, sizeof p, "%s/verdict-1.log", g_dir);
    if (symlink(forged, p) != 0) _exit(7);
    _exit(0);
  }
  int st = 0;
  WDH_CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "the other member could not plant (status 0x%x)", st);
}

static int entries(const char *sub) {
  char p[4200];
  snprintf(p, sizeof p, "%s/%s", g_dir, sub);
  DIR *d = opendir(p);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  if (d) closedir(d);
  return d ? n : -1;
}

static uid_t owner(const char *sub) {
  char p[4200];
  struct stat st;
  snprintf(p, sizeof p, "%s/%s", g_dir, sub);
  return lstat(p, &st) == 0 ? st.st_uid : (uid_t)-1;
}

static void case_forged(void);

static void case_flood(void) {
  int n = wait_logs("verdict of stall episode", 3, 40000);
  WDH_CHECK(n == 3, "%d of the 3 stalled processes logged a verdict within 40 s of a trigger flood", n);
  WDH_CHECK(wait_logs("opens an episode of its own", 1, 1) == 1, "rank 0 did not say why it opened its own episode");
  for (int r = 0; r < 3; r++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/log-%d.txt", g_dir, r);
    char *t = read_all(path);
    const char *line = t ? strstr(t, "verdict of stall episode") : NULL;
    const char *what = line ? strstr(line, ": ") : NULL;
    WDH_CHECK(what && (!strncmp(what, ": HANG", 6) || !strncmp(what, ": JOB", 5)),
              "process %d's verdict is not a hang's: %.300s", r, line ? line : "(none)");
    free(t);
  }
  WDH_CHECK(wdh_list_dumps(g_dir, "stall", NULL, 0) >= 3, "%d stall dumps: the flood starved a stalled process's own",
            wdh_list_dumps(g_dir, "stall", NULL, 0));
}

static void case_foreign(void) {
  case_forged(); /* every process logs the analyzer's line naming global rank 3, none the forged */
  WDH_CHECK(entries("mhost") == 0, "%d file(s) written into the other member's host folder", entries("mhost"));
  WDH_CHECK(entries("triggers") == 2, "the other member's triggers folder holds %d files, not its 2",
            entries("triggers"));
  WDH_CHECK(owner("mhost~65532") == JOB_UID && entries("mhost~65532") >= 4,
            "the job's dumps are not in a folder of its own (mhost~65532: %d entries)", entries("mhost~65532"));
  WDH_CHECK(owner("triggers~65532/episode-1.trigger") == JOB_UID,
            "the job's episode trigger is not in a triggers folder of its own");
  char p[4200];
  snprintf(p, sizeof p, "%s/forged.txt", g_dir);
  char *t = read_all(p);
  WDH_CHECK(t && !strcmp(t, "HANG: FORGED rank 99 never entered AllReduce seq 1\n"),
            "the forged report was written through its link: %.200s", t ? t : "(gone)");
  free(t);
  WDH_CHECK(owner("verdict-1.txt") == JOB_UID, "verdict-1.txt is not the job's own report");
}

static void case_forged(void) {
  int n = wait_logs("verdict of stall episode 1: JOB: root cause", 4, 20000);
  WDH_CHECK(n == 4, "%d of 4 processes logged the analyzer's own verdict within 20 s", n);
  for (int r = 0; r < 4; r++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/log-%d.txt", g_dir, r);
    char *t = read_all(path);
    WDH_CHECK(!t || !strstr(t, "FORGED"), "process %d logged the forged line: %.300s", r, t ? t : "");
    const char *line = t ? strstr(t, "verdict of stall episode 1: ") : NULL;
    WDH_CHECK(line && strstr(line, "global rank 3"), "process %d: %.300s", r, line ? line : "(none)");
    free(t);
  }
}

static void case_missing(void) {
  int n = wait_logs("automatic verdict off: NCCL_WATCHDOG_ANALYZER", 4, 5000);
  WDH_CHECK(n == 4, "%d of 4 processes said the analyzer is missing", n);
  WDH_CHECK(wdh_wait_dumps(g_dir, NULL, 4, 10000) >= 4, "dumps are not written as before");
  wdh_sleep_ms(2000);
  WDH_CHECK(count_files("verdict-") == 0, "a verdict without an analyzer");
}

static void case_killed(pid_t *pids) {
  kill(pids[3], SIGKILL); /* the OOM killer: no handler, no dump */
  waitpid(pids[3], NULL, 0);
  pids[3] = 0;
  int n = wait_logs("verdict of stall episode 1: ", 3, 20000);
  WDH_CHECK(n == 3, "%d of 3 living processes logged the verdict", n);
  char path[4200];
  snprintf(path, sizeof path, "%s/log-0.txt", g_dir);
  char *t = read_all(path);
  const char *line = t ? strstr(t, "verdict of stall episode 1: ") : NULL;
  /* The job line (root: global rank 3, died) or, when one communicator alone is stuck at the
   * time, its HANG line (rank 3 known from its ring file only). */
  WDH_CHECK(line && ((strstr(line, "global rank 3") && strstr(line, "died")) ||
                     strstr(line, "rank 3 only its post-mortem ring file is left")),
            "the line does not name the killed rank 3 from its ring file: %.300s", line ? line : "(none)");
  WDH_CHECK(t && strstr(t, "ring file(s) of dead processes on this node turned into post-mortem dumps"),
            "the poller did not salvage the dead process's ring files");
  free(t);
  WDH_CHECK(wdh_list_dumps(g_dir, "postmortem", NULL, 0) >= 1, "no post-mortem dump in the dump directory");
  WDH_CHECK(count_files("salvage-") == 0, "the salvage's .pending mark was left in the dump directory");
}

static void case_aborted(void) {
  int n = wait_logs("the stall episode stands", 1, 12000);
  WDH_CHECK(n == 1, "rank 0 did not say that its stall ended by an abort");
  wdh_sleep_ms(1000); /* the finalize, and a few polls after it */
  n = wait_logs("progress resumed", 1, 1);
  WDH_CHECK(n == 0, "an aborted operation was logged as a resumed episode");
  WDH_CHECK(count_files("verdict-1.resumed") == 0, "verdict-1.resumed written for an abort");
  WDH_CHECK(count_files("verdict-1.txt") == 1, "no verdict-1.txt");
}

/* Every process's log holds the real hang's "JOB: root cause" line naming global rank 3 and
 * holding each of want (NULL-ended), none of avoid; no_ok: and never an "OK". */
static void check_real_hang(const char *const *want, const char *avoid, int no_ok) {
  int n = wait_logs("JOB: root cause", 4, 40000);
  WDH_CHECK(n == 4, "%d of 4 processes logged a verdict of the real hang within 40 s", n);
  for (int r = 0; r < 4; r++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/log-%d.txt", g_dir, r);
    char *t = read_all(path);
    const char *line = t ? strstr(t, "JOB: root cause") : NULL;
    int has = line && strstr(line, "global rank 3") && !(avoid && strstr(line, avoid));
    for (int i = 0; has && want[i]; i++) has = strstr(line, want[i]) != NULL;
    WDH_CHECK(has, "process %d: the line does not name global rank 3 with %s%s%s: %.400s", r, want[0],
              want[1] ? ", " : "", want[1] ? want[1] : "", line ? line : "(none)");
    const char *ok = no_ok && t ? strstr(t, "OK: no hang") : NULL;
    WDH_CHECK(t && !ok, "process %d logged an OK during the hang: %.300s", r, ok ? ok : "(no log)");
    free(t);
  }
}

/* "saver": three resumed episodes, then the real hang, on a budget of two peer dumps. */
static void case_saver(void) {
  const char *const want[] = {"never entered", "seq 8", NULL};
  check_real_hang(want, "left no dump", 0);
}

/* "saverquiet": as "saver" with no automatic verdict. The processes that opened the resumed
 * episodes still mark them resumed (verdict-K.resumed), process 3's peer budget comes back, and
 * the analyzer run by hand on the real hang names global rank 3 as never having entered. */
static void case_saverquiet(void) {
  for (int i = 0; i < 200 && count_resumed() < 3; i++) wdh_sleep_ms(100);
  WDH_CHECK(count_resumed() == 3, "%d of 3 resumed episodes marked without the automatic verdict",
            count_resumed());
  WDH_CHECK(count_files("verdict-") == 3, "a verdict was made with NCCL_WATCHDOG_VERDICT=0");
  char line[2048] = "";
  for (int i = 0; i < 40; i++) {
    wdh_sleep_ms(500);
    if (wdh_analyzer_first_line(g_dir, "", line, sizeof line) == 0) break;
    if (strstr(line, "global rank 3") && strstr(line, "never entered") && strstr(line, "seq 8")) break;
  }
  WDH_CHECK(strstr(line, "global rank 3") && strstr(line, "never entered") && strstr(line, "seq 8") &&
                !strstr(line, "left no dump"),
            "the analyzer does not name global rank 3 as never entering dp seq 8: %.400s", line);
}

/* "unanswered": the job case with no peer dumps and no automatic verdict: processes 0-2 dump
 * their own stalls, process 3 (alive, stuck outside NCCL) writes nothing. Its ring file, kept in
 * the dump directory, is rewritten every poll: the analyzer run by hand reads it as the running
 * process's state, not a post-mortem, and names global rank 3 as never entering pp seq 3. */
static void case_unanswered(pid_t *pids) {
  for (int i = 0; i < 100 && wdh_list_dumps(g_dir, "stall", NULL, 0) < 3; i++) wdh_sleep_ms(100);
  WDH_CHECK(wdh_list_dumps(g_dir, "stall", NULL, 0) == 3, "%d of 3 stall dumps", wdh_list_dumps(g_dir, "stall", NULL, 0));
  int stopped = !strcmp(g_case, "stopped");
  if (stopped) {
    WDH_CHECK(kill(pids[3], SIGSTOP) == 0, "cannot stop process 3");
    wdh_sleep_ms(300);
  }
  char line[2048] = "";
  uint64_t t0 = wdh_now_ns();
  WDH_CHECK(wdh_analyzer_first_line(g_dir, "", line, sizeof line) != 0, "no analyzer");
  fprintf(stderr, "autoverdict %s: the analyzer took %.1f s\n", g_case, (double)(wdh_now_ns() - t0) / 1e9);
  WDH_CHECK(strstr(line, "global rank 3") && strstr(line, "never entered AllReduce seq 3") && !strstr(line, "died") &&
                !strstr(line, "left no dump"),
            "the analyzer does not name the running global rank 3 as never entering pp seq 3: %.400s", line);
  WDH_CHECK(strstr(line, "ring file") && strstr(line, "running processes"),
            "the line does not say which ring files it set aside: %.400s", line);
  if (!stopped) return;
  WDH_CHECK(strstr(line, "2 of them stopped"), "the line does not say that process 3 (two communicators) is stopped: %.600s",
            strstr(line, "[") ? strstr(line, "[") : line);
  /* Gone now: its ring file is a post-mortem again. */
  kill(pids[3], SIGKILL);
  waitpid(pids[3], NULL, 0);
  pids[3] = 0;
  WDH_CHECK(wdh_analyzer_first_line(g_dir, "", line, sizeof line) != 0, "no analyzer");
  WDH_CHECK(strstr(line, "global rank 3") && (strstr(line, "died") || strstr(line, "post-mortem ring file")) &&
                !strstr(line, "stopped"),
            "the analyzer does not say that the killed global rank 3 died: %.400s", line);
}

/* What process r logged (*t, malloc'ed: free it) and its first line from want on, or NULL. */
static const char *logged_line(int r, const char *want, char **t) {
  char path[4200];
  snprintf(path, sizeof path, "%s/log-%d.txt", g_dir, r);
  *t = read_all(path);
  return *t ? strstr(*t, want) : NULL;
}

/* "frozen": process 3 stopped from the start; the poller copies its ring files as its state. */
static void case_frozen(pid_t *pids) {
  WDH_CHECK(kill(pids[3], SIGSTOP) == 0, "cannot stop process 3");
  int n = wait_logs("verdict of stall episode 1: ", 3, 30000);
  WDH_CHECK(n == 3, "%d of 3 running processes logged the verdict", n);
  char *t;
  const char *line = logged_line(0, "verdict of stall episode 1: ", &t);
  WDH_CHECK(line && strstr(line, "global rank 3") && strstr(line, "never entered AllReduce seq 3") &&
                strstr(line, "stopped") && !strstr(line, "left no dump") && !strstr(line, "died"),
            "the line does not name the stopped global rank 3 as never entering pp seq 3: %.600s",
            line ? line : "(none)");
  fprintf(stderr, "autoverdict frozen: %.1500s\n", line ? line : "(none)");
  WDH_CHECK(t && strstr(t, "whose watchdog did not answer"), "the poller did not say it copied process 3's ring files");
  free(t);
  WDH_CHECK(wdh_list_dumps(g_dir, "live", NULL, 0) == 1, "%d copies of ring files, not one for process 3 (its 2 communicators)",
            wdh_list_dumps(g_dir, "live", NULL, 0));
  kill(pids[3], SIGCONT);
}

/* "busy": process 3's dump takes 4 s; the poller waits for it rather than copying its rings. */
static void case_busy(void) {
  int n = wait_logs("verdict of stall episode 1: JOB: root cause", 4, 40000);
  WDH_CHECK(n == 4, "%d of 4 processes logged the verdict within 40 s", n);
  char *t;
  const char *line = logged_line(0, "verdict of stall episode 1: ", &t);
  WDH_CHECK(line && strstr(line, "global rank 3") && strstr(line, "never entered AllReduce seq 3") &&
                !strstr(line, "left no dump") && !strstr(line, "died"),
            "the line does not name global rank 3 as never entering pp seq 3: %.600s", line ? line : "(none)");
  fprintf(stderr, "autoverdict busy: %.800s\n", line ? line : "(none)");
  /* Its main thread gave no stack (vfork): the line says where the kernel has it instead. */
  WDH_CHECK(line && !strstr(line, "no stack in its dump") &&
                (!strstr(line, "gave no stack") || ((strstr(line, "in system call clone") || strstr(line, "in system call vfork")) && strstr(line, "state D"))),
            "the line does not say where process 3's main thread is: %.600s", line ? line : "(none)");
  WDH_CHECK(t && !strstr(t, "whose watchdog did not answer"), "the poller took process 3, busy answering, for silent");
  free(t);
  WDH_CHECK(wdh_list_dumps(g_dir, "live", NULL, 0) == 0, "%d copies of ring files of a process that answered",
            wdh_list_dumps(g_dir, "live", NULL, 0));
  WDH_CHECK(wdh_list_dumps(g_dir, "peer", NULL, 0) + wdh_list_dumps(g_dir, "stall", NULL, 0) == 4,
            "%d peer and stall dumps, not one per process",
            wdh_list_dumps(g_dir, "peer", NULL, 0) + wdh_list_dumps(g_dir, "stall", NULL, 0));
}

/* "stuckdump": process 3 began its dump and is stuck in it past the poller's second wait. */
static void case_stuckdump(void) {
  int n = wait_logs("verdict of stall episode 1: JOB: root cause", 3, 30000);
  WDH_CHECK(n >= 3, "%d processes logged the verdict within 30 s", n);
  char *t;
  const char *line = logged_line(0, "verdict of stall episode 1: ", &t);
  fprintf(stderr, "autoverdict stuckdump: %.900s\n", line ? line : "(none)");
  WDH_CHECK(line && strstr(line, "global rank 3") && strstr(line, "never entered AllReduce seq 3") &&
                strstr(line, "after it began its dump for this episode") && !strstr(line, "left no dump"),
            "the line does not say that global rank 3, never entering pp seq 3, is stuck in its dump: %.600s",
            line ? line : "(none)");
  WDH_CHECK(t && strstr(t, "whose watchdog did not answer"), "the poller did not copy process 3's ring files");
  free(t);
  WDH_CHECK(wdh_list_dumps(g_dir, "live", NULL, 0) == 1, "%d copies of process 3's ring files, not 1",
            wdh_list_dumps(g_dir, "live", NULL, 0));
}

/* "late": episode 2, opened by process 3's own stall, is judged from where it is now. */
static void case_late(void) {
  int n = wait_logs("verdict of stall episode 1: ", 4, 20000);
  WDH_CHECK(n == 4, "%d of 4 processes logged episode 1's verdict", n);
  n = wait_logs("verdict of stall episode 2: ", 4, 30000);
  WDH_CHECK(n == 4, "%d of 4 processes logged a verdict of episode 2 (opened by process 3's own stall)", n);
  char *t;
  const char *line = logged_line(3, "verdict of stall episode 2: ", &t);
  WDH_CHECK(t && !strstr(t, "not dumping again"), "process 3 folded its stall into the episode it answered from outside NCCL");
  fprintf(stderr, "autoverdict late: %.800s\n", line ? line : "(none)");
  WDH_CHECK(line && !strstr(line, "never entered AllReduce seq 3") && strstr(line, "AllReduce seq 3"),
            "episode 2's verdict still says process 3 never entered pp seq 3, or does not name it: %.600s",
            line ? line : "(none)");
  free(t);
}

/* "foreignfrozen": "frozen" run as the job's user beside another member's host folder: the
 * copy goes to the job's own folder, as its dumps do, never into the other member's. */
static void case_foreignfrozen(pid_t *pids) {
  case_frozen(pids);
  WDH_CHECK(entries("mhost") == 0, "%d file(s) written into the other member's host folder", entries("mhost"));
  char p[4200];
  snprintf(p, sizeof p, "%s/mhost~65532", g_dir);
  WDH_CHECK(wdh_list_dumps(p, "live", NULL, 0) == 1, "the copy is not in the job's own host folder");
}

/* "routine": the real hang's verdict in every log, never an "OK". */
static void case_routine(void) {
  const char *const want[] = {"seq 6", NULL};
  check_real_hang(want, NULL, 1);
  fprintf(stderr, "autoverdict routine: %d snapshot dumps, %d stall dumps in the directory\n",
          wdh_list_dumps(g_dir, "signal", NULL, 0), wdh_list_dumps(g_dir, "stall", NULL, 0));
  WDH_CHECK(wdh_list_dumps(g_dir, "signal", NULL, 0) >= 100, "fewer than 100 snapshot dumps were written");
}

/* "torndown": the job's post-mortems, salvaged after it was killed, blame no waiting rank. */
static void case_torndown(pid_t *pids) {
  int n = wait_logs("verdict of stall episode 1: JOB: root cause", 4, 20000);
  WDH_CHECK(n == 4, "%d of 4 processes logged the verdict within 20 s", n);
  wdh_kill_ranks(pids, 4); /* the launcher: SIGKILL, no epilog */
  char cmd[9000];
  snprintf(cmd, sizeof cmd, "'%s' -q --salvage='%s/mhost' '%s' >/dev/null 2>&1", getenv("WDH_ANALYZER"), g_dir, g_dir);
  WDH_CHECK(system(cmd) == 0, "the salvage by hand failed: %s", cmd);
  WDH_CHECK(wdh_list_dumps(g_dir, "postmortem", NULL, 0) >= 5, "%d post-mortem dumps (want one per ring file)",
            wdh_list_dumps(g_dir, "postmortem", NULL, 0));
  char line[4096];
  wdh_analyzer_first_line(g_dir, "-q", line, sizeof line);
  WDH_CHECK(strstr(line, "JOB: root cause") && strstr(line, "global rank 3") && strstr(line, "never entered") &&
                !strstr(line, "died"),
            "after the teardown's post-mortems: %.500s", line);
}

/* "superseded": episode 2's verdict although episode 1's analyzer was still at work. */
static void case_superseded(void) {
  const char *const want[] = {"seq 6", NULL};
  check_real_hang(want, NULL, 1);
  char path[4200];
  snprintf(path, sizeof path, "%s/log-1.txt", g_dir);
  char *t = read_all(path);
  WDH_CHECK(t && strstr(t, "verdict of stall episode 1: NO VERDICT MADE for stall episode 1: it resumed"),
            "process 1 did not say that it stopped episode 1's analysis: %.600s", t ? t : "(no log)");
  free(t);
  WDH_CHECK(count_files("verdict-2.txt") == 1, "no verdict-2.txt");
}

/* An analyzer that takes a minute over episode 1 (its process group is what a stop kills). */
/* The analyzer behind a script that sleeps secs first when its arguments hold pattern (a shell
 * case pattern). */
static void slow_analyzer(char *path, size_t len, const char *pattern, int secs) {
  snprintf(path, len, "%s/slow-analyzer.sh", g_dir);
  FILE *f = fopen(path, "w");
  WDH_CHECK(f != NULL, "cannot write %s", path);
  if (!f) return;
  fprintf(f, "#!/bin/sh\ncase \" $* \" in %s) sleep %d ;; esac\nexec '%s' \"$@\"\n", pattern, secs,
          getenv("WDH_ANALYZER"));
  fclose(f);
  chmod(path, 0700);
  setenv("NCCL_WATCHDOG_ANALYZER", path, 1);
}

static void case_ftgroups(void) {
  int n = wait_logs("verdict of stall episode 1: ", 4, 20000);
  WDH_CHECK(n == 4, "%d of 4 processes logged the verdict", n);
  char p[4200];
  snprintf(p, sizeof p, "%s/verdict-1.log", g_dir);
  char *log = read_all(p);
  WDH_CHECK(log && strstr(log, "4 of 2 dumps"),
            "the settle did not wait for both replica groups (2 by WORLD_SIZE, 4 by the communicators): %.300s",
            log ? log : "(no verdict-1.log)");
  free(log);
  snprintf(p, sizeof p, "%s/verdict-1.txt", g_dir);
  char *txt = read_all(p);
  WDH_CHECK(txt && strstr(txt, "never entered AllReduce seq 3 (global rank 2 on host nodeb") &&
                strstr(txt, "never entered AllReduce seq 3 (global rank 3 on host nodeb") &&
                !strstr(txt, "global rank 0 on host nodeb") && !strstr(txt, "global rank 1 on host nodeb"),
            "group B is not named by torchft's global ranks 2 and 3: %.600s", txt ? txt : "(no verdict-1.txt)");
  free(txt);
  for (int r = 0; r < 4; r++) {
    snprintf(p, sizeof p, "%s/log-%d.txt", g_dir, r);
    char *t = read_all(p);
    const char *line = t ? strstr(t, "verdict of stall episode 1: ") : NULL;
    WDH_CHECK(line && !strstr(line, "no dump") && strstr(line, "replicate") && strstr(line, "never entered"),
              "process %d: the line does not say group B never entered replicate AllReduce: %.300s", r,
              line ? line : "(none)");
    free(t);
  }
}

/* A salvage that writes the dead process's communicators one at a time, 2 s apart (a nice-19
 * child on a loaded node, one ring file decoded after the other): 2 s in, the first ring file
 * alone, without the mark; 2 s later the others, and the mark goes. Other runs as they are. */
static void split_salvage(char *path, size_t len) {
  snprintf(path, len, "%s/slow-analyzer.sh", g_dir);
  FILE *f = fopen(path, "w");
  WDH_CHECK(f != NULL, "cannot write %s", path);
  if (!f) return;
  const char *az = getenv("WDH_ANALYZER");
  fprintf(f,
          "#!/bin/sh\n"
          "case \" $* \" in *\" --salvage=\"*) ;; *) exec '%s' \"$@\" ;; esac\n"
          "opts= first= rest= mark=\n"
          "for a in \"$@\"; do case \"$a\" in\n"
          "  --salvage-mark=*) mark=\"$a\" ;; -*) opts=\"$opts $a\" ;;\n"
          "  *) if [ -z \"$first\" ]; then first=\"$a\"; else rest=\"$rest $a\"; fi ;;\n"
          "esac; done\n"
          "sleep 2\n'%s' $opts \"$first\"\nsleep 2\n"
          "if [ -n \"$rest\" ]; then exec '%s' $opts $mark $rest; fi\n"
          "rm -f \"${mark#--salvage-mark=}\"\n",
          az, az, az);
  fclose(f);
  chmod(path, 0700);
  setenv("NCCL_WATCHDOG_ANALYZER", path, 1);
}

/* The verdict was written after every post-mortem dump: the settle waited for the whole salvage. */
static void check_after_salvage(void) {
  char p[4200];
  struct stat v, st;
  snprintf(p, sizeof p, "%s/verdict-1.txt", g_dir);
  WDH_CHECK(stat(p, &v) == 0, "no verdict-1.txt");
  snprintf(p, sizeof p, "%s/mhost", g_dir);
  DIR *d = opendir(p);
  struct dirent *e;
  int n = 0;
  while (d && (e = readdir(d)) != NULL) {
    if (!strstr(e->d_name, "-postmortem.json") || e->d_name[0] == '.') continue;
    n++;
    WDH_CHECK(fstatat(dirfd(d), e->d_name, &st, 0) == 0 &&
                  (st.st_mtim.tv_sec < v.st_mtim.tv_sec ||
                   (st.st_mtim.tv_sec == v.st_mtim.tv_sec && st.st_mtim.tv_nsec <= v.st_mtim.tv_nsec)),
              "%s was written after the verdict: the settle ended with half the salvage", e->d_name);
  }
  if (d) closedir(d);
  WDH_CHECK(n == 2, "%d post-mortem dumps, not one per communicator of the killed process (dp, pp)", n);
}

static void case_resumed(void) {
  int n = wait_logs("progress resumed after", 1, 10000);
  WDH_CHECK(n == 1, "rank 0 did not log the resumed episode");
  for (int i = 0; i < 100 && count_files("verdict-1.resumed") == 0; i++) wdh_sleep_ms(100);
  WDH_CHECK(count_files("verdict-1.resumed") == 1, "no verdict-1.resumed");
}

int main(int argc, char **argv) {
  if (argc > 2 && !strcmp(argv[1], "hook")) { /* NCCL_WATCHDOG_ON_VERDICT */
    FILE *f = fopen(argv[2], "w");
    if (!f) return 1;
    const char *vars[] = {"NCCL_WATCHDOG_VERDICT_TXT", "NCCL_WATCHDOG_VERDICT_JSON",
                          "NCCL_WATCHDOG_VERDICT_HTML", "NCCL_WATCHDOG_VERDICT_EPISODE",
                          "NCCL_WATCHDOG_VERDICT_LINE"};
    for (int i = 0; i < 5; i++) {
      const char *v = getenv(vars[i]);
      fprintf(f, "%s=%s\n", vars[i] + 22, v ? v : "");
    }
    return fclose(f) == 0 ? 0 : 1;
  }
  if (argc > 1 && !strcmp(argv[1], "otherjob")) { /* "frozen": another job's stopped process */
    wdh_plugin p;
    if (wdh_load(&p, wdh_plugin_path(), 0) != 0) return 1;
    wdh_comm c;
    wdh_comm_init(&c, &p, 0xc7c7c7c7ull, "other", 1, 1, 0);
    wdh_op_cfg cfg;
    wdh_op_cfg_default(&cfg);
    wdh_run_ops(&c, NULL, &cfg, 2);
    wdh_sleep_ms(300); /* a poll or more: its ring file's live part is written */
    raise(SIGSTOP);
    for (;;) wdh_sleep_ms(1000);
  }
  const char *az = getenv("WDH_ANALYZER");
  if (!wdh_plugin_path() || !az || access(az, X_OK) != 0) return 77;
  g_case = argc > 1 ? argv[1] : "job";
  if (!known_case()) return 2;
  if (foreign_case() && geteuid() != 0) {
    printf("SKIP scenario.autoverdict %s: needs root, to run the job as one user and plant as another\n", g_case);
    return 77;
  }
  char tag[32];
  snprintf(tag, sizeof tag, "autoverdict-%s", g_case);
  setenv("NCCL_WATCHDOG_VERDICT", "1", 1);
  char *dir = wdh_scenario_dir(tag, "1s", "100ms");
  g_dir = dir;
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
  setenv("NCCL_WATCHDOG_TRIGGER_POLL", "200ms", 1);
  setenv("NCCL_WATCHDOG_METRICS", "200ms", 1);
  setenv("NCCL_WATCHDOG_METRICS_DIR", dir, 1);
  setenv("NCCL_WATCHDOG_HOSTNAME", "mhost", 1);
  if (saver_case()) setenv("NCCL_WATCHDOG_MAX_DUMPS", "2", 1);
  /* The copy comes 5 s after the poller answered, later under TSan: the settle waits for it. */
  if (!strcmp(g_case, "stuckdump")) setenv("NCCL_WATCHDOG_VERDICT_WAIT", "20s", 1);
  if (!strcmp(g_case, "saverquiet") || unanswered_case()) setenv("NCCL_WATCHDOG_VERDICT", "0", 1);
  if (unanswered_case()) setenv("NCCL_WATCHDOG_PEER_DUMPS", "0", 1);
  if (!strcmp(g_case, "missing")) setenv("NCCL_WATCHDOG_ANALYZER", "/nonexistent/nccl-watchdog-analyze", 1);
  char slow[4200];
  if (!strcmp(g_case, "superseded")) slow_analyzer(slow, sizeof slow, "*\" --episode=1 \"*", 60);
  if (!strcmp(g_case, "slowsalvage")) {
    split_salvage(slow, sizeof slow);
    setenv("NCCL_WATCHDOG_VERDICT_WAIT", "1s", 1);
  }
  char self[4096], hook[8400];
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  self[sl > 0 ? sl : 0] = '\0';
  snprintf(hook, sizeof hook, "%s hook %s/hook.out", self, dir);
  setenv("NCCL_WATCHDOG_ON_VERDICT", hook, 1);
  if (!strcmp(g_case, "forged")) plant_forged();
  pid_t flooder = 0;
  char rings[64] = "";
  if (node_rings_case()) { /* node memory, as in production */
    snprintf(rings, sizeof rings, "/tmp/wdh-frozen-rings-XXXXXX");
    WDH_CHECK(mkdtemp(rings) != NULL, "mkdtemp");
    setenv("NCCL_WATCHDOG_RING_DIR", rings, 1);
  }
  if (!strcmp(g_case, "ftgroups"))
    for (int g = 0; g < 2; g++) {
      snprintf(g_rings[g], sizeof g_rings[g], "/tmp/wdh-ft-rings-XXXXXX");
      WDH_CHECK(mkdtemp(g_rings[g]) != NULL, "mkdtemp");
    }
  if (!strcmp(g_case, "flood")) {
    /* Ring files in node memory, as in production, not among the dumps: several episodes'
     * analyzers run here, each must judge the processes' dumps, not their live ring files. */
    snprintf(rings, sizeof rings, "/tmp/wdh-flood-rings-XXXXXX");
    WDH_CHECK(mkdtemp(rings) != NULL, "mkdtemp");
    setenv("NCCL_WATCHDOG_RING_DIR", rings, 1);
    setenv("NCCL_WATCHDOG_VERDICT_WAIT", "1s", 1);
    setenv("NCCL_WATCHDOG_VERDICT_TIMEOUT", "5s", 1);
    flooder = fork();
    if (flooder == 0) flood_triggers();
  }
  if (foreign_case()) {
    if (rings[0]) WDH_CHECK(chown(rings, JOB_UID, JOB_UID) == 0, "cannot give the ring folder to the job");
    WDH_CHECK(chown(dir, JOB_UID, JOB_UID) == 0 && chmod(dir, 02770) == 0, "cannot share %s", dir);
    plant_foreign();
  }
  pid_t other = 0;
  if (!strcmp(g_case, "frozen")) {
    other = fork();
    if (other == 0) {
      setenv("SLURM_JOB_ID", "another-job-77", 1);
      char *const args[] = {self, "otherjob", NULL};
      execv(self, args);
      _exit(127);
    }
    int st = 0;
    WDH_CHECK(other > 0 && waitpid(other, &st, WUNTRACED) == other && WIFSTOPPED(st),
              "the other job's process did not stop (status 0x%x)", st);
  }
  if (!strcmp(g_case, "job")) { /* a stale salvage mark (see above) */
    char mark[4200];
    snprintf(mark, sizeof mark, "%s/salvage-1-gone-99999.pending", dir);
    FILE *f = fopen(mark, "w");
    WDH_CHECK(f && fclose(f) == 0, "cannot write %s", mark);
  }
  g_barrier = wdh_tempdir("autoverdict-barrier");
  pid_t pids[4];
  WDH_CHECK(wdh_fork_ranks(4, rank_main, pids) == 4, "ranks not ready");
  if (!strcmp(g_case, "job")) case_job(pids);
  else if (!strcmp(g_case, "forged")) case_forged();
  else if (!strcmp(g_case, "foreign")) case_foreign();
  else if (!strcmp(g_case, "flood")) case_flood();
  else if (!strcmp(g_case, "missing")) case_missing();
  else if (!strcmp(g_case, "killed")) case_killed(pids);
  else if (!strcmp(g_case, "ftgroups")) case_ftgroups();
  else if (!strcmp(g_case, "slowsalvage")) {
    case_killed(pids);
    check_after_salvage();
  }
  else if (!strcmp(g_case, "aborted")) case_aborted();
  else if (!strcmp(g_case, "routine")) case_routine();
  else if (!strcmp(g_case, "superseded")) case_superseded();
  else if (!strcmp(g_case, "torndown")) case_torndown(pids);
  else if (!strcmp(g_case, "saver")) case_saver();
  else if (!strcmp(g_case, "saverquiet")) case_saverquiet();
  else if (unanswered_case()) case_unanswered(pids);
  else if (!strcmp(g_case, "frozen")) case_frozen(pids);
  else if (!strcmp(g_case, "busy")) case_busy();
  else if (!strcmp(g_case, "late")) case_late();
  else if (!strcmp(g_case, "stuckdump")) case_stuckdump();
  else if (!strcmp(g_case, "foreignfrozen")) case_foreignfrozen(pids);
  else case_resumed();
  wdh_kill_ranks(pids, 4);
  if (flooder > 0) wdh_kill_ranks(&flooder, 1);
  if (other > 0) wdh_kill_ranks(&other, 1);
  if (rings[0]) wdh_rmtree(rings);
  for (int g = 0; g < 2; g++)
    if (g_rings[g][0]) wdh_rmtree(g_rings[g]);
  wdh_rmtree(g_barrier);
  free(g_barrier);
  char label[48];
  snprintf(label, sizeof label, "scenario.autoverdict %s", g_case);
  return wdh_scenario_end(label, dir);
}
