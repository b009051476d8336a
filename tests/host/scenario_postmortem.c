/*
 * The flight recorder outlives the process. Each case runs the plugin in child processes and
 * kills them with SIGKILL (no handler runs, nothing is flushed); what they leave in their ring
 * files is read back with nccl-watchdog-analyze --salvage:
 *   killed     traffic on two communicators from two threads, SIGKILL in the middle: every
 *              record decodes or is counted torn, and the last operation completed before the
 *              kill (its sequence number known to the parent through a pipe) is there, as the
 *              file's last completed one (kept as it completed, not at the next poll).
 *   two_jobs   two processes started at once, as two jobs on one node would: two files, none
 *              reused, each naming its own process.
 *   culprit    a 4-rank job; rank 2 is SIGKILLed before the collective the others then hang in:
 *              the analyzer, given the others' stall dumps and rank 2's ring file, names rank 2.
 *   aftersnap  the same, with a SIGUSR1 snapshot of rank 2 taken three collectives before it
 *              was killed: its ring file, newer, decides (not the snapshot).
 *   abort      a communicator finalized with an operation in flight (ncclCommAbort) gets one
 *              "abort" dump before it is retired; one destroyed after its work, none.
 *   segv       SIGSEGV in an application thread: the application's own handler still runs, and
 *              the ring file holds the signal, the faulting thread and its frames.
 *   sigterm    SIGTERM: a "term" dump appears and the process still ends by SIGTERM.
 *   grow       ring files are allocated on demand: a communicator without traffic holds its
 *              header, strings and first records only (under 64 KiB of the file system); one
 *              with traffic has its whole rings allocated after a poll, and more records in its
 *              file than the first allocation held.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "nccl_host.h"

#define COMM_A 0x70a70a70a70aull
#define COMM_B 0x70b70b70b70bull
#define COMM_JOB 0xcafe0000beefull

static int count_files(const char *dir, const char *suffix) {
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "ls '%s' | grep -c -- '%s$'", dir, suffix);
  FILE *p = popen(cmd, "r");
  int n = 0;
  if (p && fscanf(p, "%d", &n) != 1) n = 0;
  if (p) pclose(p);
  return n;
}

/* analyzer --salvage DIR DIR: every ring file there becomes DIR/...-postmortem.json. */
static int salvage(const char *dir) {
  const char *az = getenv("WDH_ANALYZER");
  if (!az || access(az, X_OK) != 0) return -1;
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' --salvage '%s' '%s' >/dev/null", az, dir, dir);
  return system(cmd);
}

/* The salvaged dump of comm id in dir (wdh_json_free), or NULL. */
static void *salvaged(const char *dir, uint64_t comm_id) {
  char *paths[16];
  int n = wdh_list_dumps(dir, "postmortem", paths, 16);
  void *found = NULL;
  for (int i = 0; i < n && !found; i++) {
    void *j = wdh_json_load(paths[i]);
    const char *id = j ? wdh_jstr(j, "comms.0.commId") : NULL;
    if (id && strtoull(id, NULL, 16) == comm_id) {
      found = j;
      /* A salvaged dump is a dump like any other (docs/dump-schema.json). */
      WDH_CHECK(wdh_validate_dump(paths[i]) == 0, "%s does not validate", paths[i]);
    } else {
      wdh_json_free(j);
    }
  }
  wdh_free_paths(paths, n);
  return found;
}

/* ---- killed ---- */

static void killed_child(int fd) {
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm a, b;
  wdh_comm_init(&a, &p, COMM_A, "pm-a", 1, 2, 0);
  wdh_comm_init(&b, &p, COMM_B, "pm-b", 1, 2, 0);
  wdh_traffic *t = wdh_traffic_start(&b, 8, "pm-traffic");
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  /* Comm B's thread under way first (a loaded machine under TSan starts it late). */
  for (int i = 0; i < 2000 && wdh_traffic_ops(t) == 0; i++) wdh_sleep_ms(5);
  for (;;) {
    wdh_op op;
    wdh_op_run(&a, &cfg, &op); /* completes before the next line */
    uint64_t seq = op.seq;
    if (write(fd, &seq, sizeof seq) != sizeof seq) _exit(1);
    (void)t;
  }
}

static void case_killed(const char *dir) {
  int fds[2];
  WDH_CHECK(pipe(fds) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    killed_child(fds[1]);
  }
  close(fds[1]);
  uint64_t seq = 0, last = UINT64_MAX;
  /* 400 ms of traffic from the child's first operation on. */
  uint64_t end = 0;
  while ((!end || wdh_now_ns() < end) && read(fds[0], &seq, sizeof seq) == sizeof seq) {
    if (!end) end = wdh_now_ns() + 400000000ull;
    last = seq;
  }
  kill(pid, SIGKILL);
  int st;
  waitpid(pid, &st, 0);
  /* Whatever the child reported after our last read also completed: keep reading. */
  while (read(fds[0], &seq, sizeof seq) == sizeof seq) last = seq;
  close(fds[0]);
  WDH_CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child not killed");
  WDH_CHECK(last != UINT64_MAX, "the child completed no operation");
  WDH_CHECK(count_files(dir, ".ring") == 2, "%d ring files, expected 2", count_files(dir, ".ring"));
  WDH_CHECK(salvage(dir) == 0, "salvage failed");
  void *j = salvaged(dir, COMM_A);
  WDH_CHECK(j != NULL, "no postmortem dump of comm A");
  if (j) {
    WDH_CHECK(strcmp(wdh_jstr(j, "reason"), "postmortem") == 0, "reason");
    double enq = wdh_jnum(j, "comms.0.seq.0.lastEnqueued", -1);
    WDH_CHECK(enq >= (double)last && enq <= (double)last + 1,
              "last AllReduce in the file %g, the child completed %llu before the kill", enq,
              (unsigned long long)last);
    /* Completions are kept as they happen, not at the watchdog's next poll (100 ms here, dozens
     * of operations): the last one the child saw complete is the file's last completed. */
    double done = wdh_jnum(j, "comms.0.seq.0.lastCompleted", -1);
    WDH_CHECK(done >= (double)last && done <= (double)last + 1,
              "last completed AllReduce in the file %g, the child completed %llu before the kill", done,
              (unsigned long long)last);
    double recs = wdh_jnum(j, "postmortem.records", -1), torn = wdh_jnum(j, "postmortem.tornRecords", -1);
    WDH_CHECK(recs > 0 && torn >= 0 && recs + torn <= 2 * 8192, "records %g torn %g", recs, torn);
    /* The last completed op's records are in the ring: its Coll start with that seq. */
    int seen = 0;
    cJSON *r;
    cJSON_ArrayForEach(r, (cJSON *)wdh_jpath(j, "comms.0.ring.records")) {
      const char *type = wdh_jstr(r, "type"), *ph = wdh_jstr(r, "ph");
      if (type && ph && !strcmp(type, "Coll") && !strcmp(ph, "start") &&
          wdh_jnum(r, "seq", -1) == (double)last)
        seen = 1;
    }
    WDH_CHECK(seen, "the Coll start of seq %llu is not in the ring file", (unsigned long long)last);
    wdh_json_free(j);
  }
  j = salvaged(dir, COMM_B);
  WDH_CHECK(j && wdh_jnum(j, "postmortem.records", -1) > 0, "comm B's traffic not in its file");
  wdh_json_free(j);
}

/* ---- killed while hung: the open proxy events are in the file's header ---- */

#define COMM_HUNG 0x70a70a70a70aull

static void hung_rank(int rank, int fd) {
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm a;
  wdh_comm_init(&a, &p, COMM_HUNG, "pm-hung", 1, 2, rank);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&a, NULL, &cfg, 3);
  cfg.hang_channel = 0; /* seq 3: step 1 of channel 0's receive stays in RecvWait on both */
  cfg.hang_step = 1;
  wdh_op op;
  wdh_op_enqueue(&a, &cfg, &op);
  wdh_op_proxy(&op);
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  pause();
  _exit(0);
}

static void case_hung(const char *dir) {
  pid_t pids[2];
  WDH_CHECK(wdh_fork_ranks(2, hung_rank, pids) == 2, "ranks not ready");
  pid_t dead = pids[1];
  wdh_sleep_ms(350); /* a few polls: the header lists what is open */
  wdh_kill_ranks(&pids[1], 1); /* killed while it waits, before the timeout */
  int n = wdh_wait_dumps(dir, "stall", 1, 8000);
  WDH_CHECK(n >= 1, "no stall dump from the living rank");
  wdh_kill_ranks(pids, 2);
  WDH_CHECK(salvage(dir) == 0, "salvage failed");
  /* The dead rank's steps left spans at their stop; the hung one is in no ring, only in the open
   * list its ring file's header kept. */
  char *paths[16];
  int np = wdh_list_dumps(dir, "postmortem", paths, 16);
  int step = 0, op = 0, spans = 0;
  for (int i = 0; i < np && i < 16; i++) {
    cJSON *j = wdh_json_load(paths[i]);
    if (!j || wdh_jnum(j, "pid", -1) != dead) {
      wdh_json_free(j);
      continue;
    }
    cJSON *e;
    cJSON_ArrayForEach(e, (cJSON *)wdh_jpath(j, "comms.0.open")) {
      const char *type = wdh_jstr(e, "type"), *state = wdh_jstr(e, "state");
      if (type && !strcmp(type, "ProxyStep") && state && !strcmp(state, "RecvWait") &&
          wdh_jnum(e, "step", -1) == 1 && wdh_jnum(e, "sinceProgressMs", -1) >= 200)
        step++;
      if (type && !strcmp(type, "ProxyOp") && cJSON_IsFalse(cJSON_GetObjectItem(e, "isSend")) &&
          wdh_jnum(e, "channel", -1) == 0 && wdh_jnum(e, "peer", -2) == 0)
        op++;
    }
    cJSON_ArrayForEach(e, (cJSON *)wdh_jpath(j, "comms.0.proxyRing.records")) {
      const char *ph = wdh_jstr(e, "ph");
      spans += ph && !strcmp(ph, "span") && wdh_jnum(e, "dur", -1) >= 0;
    }
    wdh_json_free(j);
  }
  wdh_free_paths(paths, np < 16 ? np : 16);
  WDH_CHECK(step == 1, "%d open ProxySteps 1 in RecvWait in the dead rank's ring file", step);
  WDH_CHECK(op >= 1, "the hung receive ProxyOp is not listed open");
  WDH_CHECK(spans > 10, "%d spans of the completed operations", spans);
  /* The analyzer says where the dead rank's proxy thread was. */
  const char *az = getenv("WDH_ANALYZER");
  if (!az || access(az, X_OK) != 0) return;
  char cmd[2048], line[2048];
  snprintf(cmd, sizeof cmd, "'%s' '%s' 2>&1", az, dir);
  FILE *p = popen(cmd, "r");
  int said = 0;
  while (p && fgets(line, sizeof line, p)) {
    fputs(line, stderr);
    if (strstr(line, "died") &&
        strstr(line, "its proxy thread waited on recv from peer 0, channel 0, step 1 in RecvWait"))
      said = 1;
  }
  if (p) pclose(p);
  WDH_CHECK(said, "the analyzer does not say where the dead rank's proxy thread waited");
}

/* ---- two jobs on one node ---- */

static void two_jobs_rank(int rank, int fd) {
  (void)rank;
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm c;
  wdh_comm_init(&c, &p, COMM_JOB, "same-name", 1, 2, 0);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, NULL, &cfg, 3);
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  for (;;) pause(); /* until killed */
}

static void case_two_jobs(const char *dir) {
  pid_t pids[2];
  /* Both have their rings in files before they die (a fixed wait was too short under TSan). */
  WDH_CHECK(wdh_fork_ranks(2, two_jobs_rank, pids) == 2, "processes not ready");
  for (int i = 0; i < 2; i++) {
    kill(pids[i], SIGKILL);
    waitpid(pids[i], NULL, 0);
  }
  WDH_CHECK(count_files(dir, ".ring") == 2, "%d ring files for two processes", count_files(dir, ".ring"));
  WDH_CHECK(salvage(dir) == 0, "salvage failed");
  char *paths[4];
  int n = wdh_list_dumps(dir, "postmortem", paths, 4);
  WDH_CHECK(n == 2, "%d postmortem dumps", n);
  int seen[2] = {0, 0};
  for (int i = 0; i < n; i++) {
    void *j = wdh_json_load(paths[i]);
    int pid = (int)wdh_jnum(j, "pid", -1);
    for (int k = 0; k < 2; k++) seen[k] += pid == pids[k];
    WDH_CHECK(wdh_jnum(j, "comms.0.seq.0.lastEnqueued", -1) == 2, "each job did seq 0..2");
    wdh_json_free(j);
  }
  wdh_free_paths(paths, n);
  WDH_CHECK(seen[0] == 1 && seen[1] == 1, "files not one per process");
}

/* ---- a 4-rank job whose rank 2 is SIGKILLed ---- */

/* "aftersnap": rank 2 takes a routine snapshot after seq 1 (scancel --signal=USR1), then runs
 * on to seq 4 before it is killed. */
static const char *g_snap_dir;

static void rank_main(int rank, int fd) {
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm c;
  wdh_comm_init(&c, &p, COMM_JOB, "job", 1, 4, rank);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  if (g_snap_dir) {
    wdh_run_ops(&c, NULL, &cfg, 2); /* seq 0..1 */
    if (rank == 2) {
      kill(getpid(), SIGUSR1);
      if (wdh_wait_dumps(g_snap_dir, "signal", 1, 5000) < 1) _exit(1);
    }
    wdh_run_ops(&c, NULL, &cfg, 3); /* seq 2..4 */
  } else {
    wdh_run_ops(&c, NULL, &cfg, 5); /* seq 0..4 everywhere */
  }
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  if (rank == 2) pause(); /* killed before the collective */
  cfg.hang_channel = 0;  /* seq 5: the peers' data never comes from rank 2 */
  wdh_op op;
  wdh_op_enqueue(&c, &cfg, &op);
  wdh_op_proxy(&op);
  wdh_op_finish(&op);
  pause();
  _exit(0);
}

static void case_culprit(const char *dir) {
  pid_t pids[4];
  WDH_CHECK(wdh_fork_ranks(4, rank_main, pids) == 4, "ranks not ready");
  wdh_kill_ranks(&pids[2], 1); /* the OOM killer, say */
  int n = wdh_wait_dumps(dir, "stall", 3, 8000);
  WDH_CHECK(n >= 3, "%d stall dumps from the 3 living ranks", n);
  wdh_kill_ranks(pids, 4);
  const char *az = getenv("WDH_ANALYZER");
  if (!az || access(az, X_OK) != 0) return;
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "'%s' -q '%s'", az, dir);
  FILE *p = popen(cmd, "r");
  char line[1024];
  int named = 0, postmortem = 0;
  while (p && fgets(line, sizeof line, p)) {
    fputs(line, stderr);
    if (strstr(line, "rank 2") && strstr(line, "died") && strstr(line, "post-mortem")) named = 1;
    if (strstr(line, "postmortem")) postmortem = 1;
  }
  if (p) pclose(p);
  WDH_CHECK(named, "the analyzer did not name rank 2 (died) from its ring file");
  (void)postmortem;
}

/* Newest evidence first: rank 2's snapshot says it completed seq 1; its ring file, refreshed
 * after it, that it completed seq 4 and then died. The verdict rests on the ring file (before:
 * "rank 2 ... seq 1 ... instead of AllReduce seq 5 (mismatch)", judged by the snapshot). */
static void case_aftersnap(const char *dir) {
  g_snap_dir = dir;
  case_culprit(dir);
  g_snap_dir = NULL;
  WDH_CHECK(wdh_list_dumps(dir, "signal", NULL, 0) == 1, "rank 2's snapshot was not written");
  const char *az = getenv("WDH_ANALYZER");
  if (!az || access(az, X_OK) != 0) return;
  char line[2048];
  wdh_analyzer_first_line(dir, "-q", line, sizeof line);
  WDH_CHECK(!strstr(line, "mismatch") && !strstr(line, "seq 1 "), "judged by the older snapshot: %.600s", line);
}

/* ---- finalized with operations in flight: ncclCommAbort ---- */

static void case_abort(const char *dir) {
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) return;
  wdh_comm hung, fine;
  wdh_comm_init(&hung, &p, 0xab0a7ull, "aborted", 1, 2, 0);
  wdh_comm_init(&fine, &p, 0xf1e4ull, "destroyed", 1, 2, 0);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&fine, NULL, &cfg, 3);
  wdh_run_ops(&hung, NULL, &cfg, 2);
  cfg.hang_channel = 0;
  wdh_op op;
  wdh_op_enqueue(&hung, &cfg, &op);
  wdh_op_proxy(&op);
  wdh_op_finish(&op);
  wdh_sleep_ms(400); /* a few polls, less than the timeout: no stall dump yet */
  wdh_comm_finalize(&fine); /* a normal destroy: nothing in flight, no dump */
  WDH_CHECK(wdh_list_dumps(dir, "abort", NULL, 0) == 0, "abort dump for a normal destroy");
  wdh_comm_finalize(&hung); /* abort: the op never finished */
  WDH_CHECK(wdh_list_dumps(dir, "abort", NULL, 0) == 1, "%d abort dumps, expected 1",
            wdh_list_dumps(dir, "abort", NULL, 0));
  char *paths[2];
  int n = wdh_list_dumps(dir, "abort", paths, 2);
  if (n == 1) {
    void *j = wdh_json_load(paths[0]);
    const char *id = j ? wdh_jstr(j, "trigger.commId") : NULL;
    WDH_CHECK(id && strtoull(id, NULL, 16) == 0xab0a7ull, "abort dump names comm %s", id ? id : "(none)");
    WDH_CHECK(wdh_jnum(j, "trigger.inflight", 0) == 1, "inflight %g", wdh_jnum(j, "trigger.inflight", 0));
    WDH_CHECK(wdh_validate_dump(paths[0]) == 0, "abort dump does not validate");
    wdh_json_free(j);
  }
  wdh_free_paths(paths, n);
  wdh_unload(&p);
}

/* In a child: the plugin loaded, one communicator, ops AllReduces done (seq 0..ops-1). */
static void child_comm(uint64_t id, const char *name, int ops) {
  static wdh_plugin p;
  static wdh_comm c;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm_init(&c, &p, id, name, 1, 2, 0);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&c, NULL, &cfg, ops);
}

/* ---- SIGSEGV in an application thread ---- */

static void app_segv(int sig) {
  (void)sig;
  static const char msg[] = "application handler\n";
  if (write(2, msg, sizeof msg - 1) < 0) {
  }
  _exit(42); /* the application's own handler ran */
}

static void *faulting_thread(void *arg) {
  (void)arg;
  /* Not NULL: UBSan would stop a NULL store before the fault happens. */
  volatile int *volatile nowhere = (volatile int *)(uintptr_t)16;
  *nowhere = 1;
  return NULL;
}

static void case_segv(const char *dir) {
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, app_segv); /* before the plugin, as Python's faulthandler would be */
    child_comm(0x5e67ull, "segv", 4);
    pthread_t t;
    pthread_create(&t, NULL, faulting_thread, NULL);
    pthread_join(t, NULL);
    _exit(3);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  WDH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 42, "the application's SIGSEGV handler did not run (status %d)", st);
  WDH_CHECK(salvage(dir) == 0, "salvage failed");
  void *j = salvaged(dir, 0x5e67ull);
  WDH_CHECK(j != NULL, "no postmortem dump");
  if (j) {
    WDH_CHECK(wdh_jnum(j, "postmortem.fatal.signal", 0) == SIGSEGV, "fatal signal %g",
              wdh_jnum(j, "postmortem.fatal.signal", 0));
    WDH_CHECK(wdh_jnum(j, "postmortem.fatal.tid", 0) > 0 && wdh_jnum(j, "postmortem.fatal.tid", 0) != pid,
              "fatal tid %g (the faulting thread, not the main one)", wdh_jnum(j, "postmortem.fatal.tid", 0));
    cJSON *frames = wdh_jpath(j, "postmortem.fatal.frames");
    WDH_CHECK(cJSON_GetArraySize(frames) >= 1, "no frame of the faulting thread");
    const char *addr = wdh_jstr(j, "postmortem.fatal.addr");
    WDH_CHECK(addr && strtoull(addr, NULL, 16) == 16, "fault address %s", addr ? addr : "(none)");
    WDH_CHECK(wdh_jnum(j, "comms.0.seq.0.lastEnqueued", -1) == 3, "the ops before the crash");
    wdh_json_free(j);
  }
}

/* ---- SIGTERM: a dump, then the process ends by SIGTERM ---- */

static void case_sigterm(const char *dir) {
  int fds[2];
  WDH_CHECK(pipe(fds) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    child_comm(0x7e47ull, "term", 2);
    char ok = 1;
    if (write(fds[1], &ok, 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(fds[1]);
  char ok;
  WDH_CHECK(read(fds[0], &ok, 1) == 1, "child ready");
  close(fds[0]);
  kill(pid, SIGTERM);
  int st = 0, ended = wdh_wait_child(pid, 10000, &st);
  WDH_CHECK(ended && WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM,
            "the process did not end by SIGTERM (ended %d, status %d)", ended, st);
  WDH_CHECK(wdh_list_dumps(dir, "term", NULL, 0) == 1, "%d term dumps", wdh_list_dumps(dir, "term", NULL, 0));
  char *paths[2];
  int n = wdh_list_dumps(dir, "term", paths, 2);
  if (n == 1) {
    void *j = wdh_json_load(paths[0]);
    const char *sig = j ? wdh_jstr(j, "trigger.signal") : NULL;
    WDH_CHECK(sig && strcmp(sig, "SIGTERM") == 0, "trigger.signal %s", sig ? sig : "(none)");
    WDH_CHECK(wdh_validate_dump(paths[0]) == 0, "term dump does not validate");
    wdh_json_free(j);
  }
  wdh_free_paths(paths, n);
}

typedef void (*case_fn)(const char *dir);

/* ---- grow ---- */

static void grow_child(int fd) {
  wdh_plugin p;
  if (wdh_load(&p, wdh_plugin_path(), 0) != 0) _exit(1);
  wdh_comm idle, busy;
  wdh_comm_init(&idle, &p, COMM_A, "pm-idle", 1, 2, 0);
  wdh_comm_init(&busy, &p, COMM_B, "pm-busy", 1, 2, 0);
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  uint64_t end = wdh_now_ns() + 600000000ull; /* several polls of 100 ms */
  while (wdh_now_ns() < end) {
    wdh_op op;
    wdh_op_run(&busy, &cfg, &op);
  }
  char ok = 1;
  if (write(fd, &ok, 1) != 1) _exit(1);
  for (;;) pause();
}

/* Allocated bytes of the ring files in dir, smallest first (at most 2). */
static int ring_blocks(const char *dir, long long *out) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL && n < 2) {
    size_t len = strlen(e->d_name);
    if (len < 5 || strcmp(e->d_name + len - 5, ".ring") != 0) continue;
    char path[2048];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (stat(path, &st) == 0) out[n++] = (long long)st.st_blocks * 512;
  }
  if (d) closedir(d);
  if (n == 2 && out[0] > out[1]) {
    long long t = out[0];
    out[0] = out[1];
    out[1] = t;
  }
  return n;
}

static void case_grow(const char *dir) {
  int fds[2];
  WDH_CHECK(pipe(fds) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    grow_child(fds[1]);
  }
  close(fds[1]);
  char ok = 0;
  WDH_CHECK(read(fds[0], &ok, 1) == 1, "the child did not run its traffic");
  wdh_sleep_ms(250); /* two more polls */
  long long bytes[2] = {0, 0};
  int n = ring_blocks(dir, bytes);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  close(fds[0]);
  WDH_CHECK(n == 2, "%d ring files, expected 2", n);
  WDH_CHECK(bytes[0] > 0 && bytes[0] <= 64 * 1024, "the idle communicator's ring file holds %lld bytes",
            bytes[0]);
  WDH_CHECK(bytes[1] >= 2LL * 8192 * 80, "the busy communicator's ring file holds %lld bytes, not its "
            "whole rings", bytes[1]);
  WDH_CHECK(salvage(dir) == 0, "salvage failed");
  void *j = salvaged(dir, COMM_B);
  WDH_CHECK(j && wdh_jnum(j, "postmortem.records", -1) > 2 * 128,
            "comm B's file holds %g records: no more than its first allocation",
            j ? wdh_jnum(j, "postmortem.records", -1) : -1);
  wdh_json_free(j);
}

static int run_case(const char *name, case_fn fn) {
  char *dir = wdh_scenario_dir(name, "1s", "100ms");
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
  setenv("NCCL_WATCHDOG_PEER_DUMPS", "0", 1);
  fn(dir);
  return wdh_scenario_end(name, dir);
}

int main(void) {
  if (!wdh_plugin_path()) return 77;
  int rc = 0;
  rc |= run_case("pm-killed", case_killed);
  rc |= run_case("pm-hung", case_hung);
  rc |= run_case("pm-two-jobs", case_two_jobs);
  rc |= run_case("pm-culprit", case_culprit);
  rc |= run_case("pm-aftersnap", case_aftersnap);
  rc |= run_case("pm-abort", case_abort);
  rc |= run_case("pm-segv", case_segv);
  rc |= run_case("pm-sigterm", case_sigterm);
  rc |= run_case("pm-grow", case_grow);
  return rc;
}
