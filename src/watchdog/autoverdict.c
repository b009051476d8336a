/* The automatic verdict of a stall episode (autoverdict.h). */
#include "watchdog/autoverdict.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/host.h"
#include "base/log.h"
#include "dump/dumpfile.h"
#include "flightrec/ringfile.h"

extern char **environ;

#define AV_HOOK_LIMIT_NS (60ull * 1000000000ull) /* the hook's time limit */
#define AV_LINE 2048
#define AV_SALVAGE_MAX 64 /* ring files of dead processes turned into dumps per episode */
#define WD_AV_JOB 800     /* a job's name from a process's environment (wd_proc_job) */

enum { AV_IDLE, AV_RUNNING };

/* A child this module runs: the analyzer, the hook or a salvage. */
typedef struct av_child {
  pid_t pid;
  uint64_t kill_ns;
} av_child;

static struct {
  const wd_config *cfg;
  wd_trigger_watch *watch;
  char base[WD_PATH_MAX];
  char dir[WD_PATH_MAX]; /* this process's own dump folder (a host folder of this user's) */
  char host[64];
  char analyzer[WD_PATH_MAX + 64]; /* "" when none was found */
  /* The episode whose verdict this process makes. */
  int state;
  unsigned k;
  uint64_t opened_ns;
  /* The last episode this process opened, analyzed or not: its resume is marked for the others
   * (verdict-K.resumed: the analyzer's RESUMED line, the peer dumps' budget). */
  unsigned mark_k;
  time_t opened_wall; /* the same moment on the wall clock, against files' mtimes */
  av_child analyzer_run, hook, salvage;
  /* The episode whose verdict line this process logs. */
  unsigned wait_k;
  uint64_t wait_until_ns;
  /* The episode this process's own stall dumped for: its line is logged whatever triggers are
   * answered meanwhile (they move wait_k). */
  unsigned own_k;
  uint64_t own_until_ns;
  unsigned salvaged_k; /* the last episode this node's ring files were salvaged for */
  /* salvage-<k>-<host>-<pid>.pending in the dump directory while that salvage runs: the
   * automatic verdict's settle waits for it (tools/analyze/main.c, settle). */
  char salvage_mark[WD_PATH_MAX + 160];
  /* This node's running processes' ring files, read when the poller answered episode silent_k:
   * those still not rewritten at silent_due_ns are of processes whose watchdog is silent. */
  unsigned silent_k;
  uint64_t silent_due_ns, silent_wait_ns;
  uint32_t nsilent;
  int silent_again; /* the list holds those whose watchdog had begun to answer when first due */
  struct {
    char name[256];
    uint64_t gen;
  } silent[AV_SALVAGE_MAX];
  av_child copy; /* the salvage of those files */
  wd_av_stats stats;
} av;

/* The paths a salvage is given (copied by the exec: reused once the child is spawned). */
static char av_paths[AV_SALVAGE_MAX][WD_PATH_MAX + 300];

/* ---- children ---------------------------------------------------------------------------- */

/* argv[0] is run directly (never a shell), in its own process group, with default signal
 * dispositions, stdin and stdout on /dev/null and stderr to err_path (or /dev/null). */
static pid_t av_spawn_flags(char *const argv[], char *const envp[], const char *err_path, int detached) {
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  if (posix_spawn_file_actions_init(&fa) != 0) return -1;
  if (posix_spawnattr_init(&at) != 0) {
    posix_spawn_file_actions_destroy(&fa);
    return -1;
  }
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  /* Detached: stderr stays the job's (its log), and a session of its own outlives this process
   * and the launcher's signals to its process group. The log is made new (never through a link
   * or into a file someone planted in the shared directory); when its name is taken, the child
   * writes to /dev/null rather than not running at all. */
  int err_fd = -1;
  if (!detached && err_path) {
    err_fd = open(err_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (err_fd < 0) WD_WARN("automatic verdict: %s is taken (%s): its log goes nowhere", err_path, strerror(errno));
  }
  if (!detached) {
    if (err_fd >= 0) posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    else posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  }
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &all);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                    (detached ? POSIX_SPAWN_SETSID : POSIX_SPAWN_SETPGROUP));
  pid_t pid = -1;
  int rc = posix_spawn(&pid, argv[0], &fa, &at, argv, envp ? envp : environ);
  if (err_fd >= 0) close(err_fd);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  return pid;
}

static pid_t av_spawn(char *const argv[], char *const envp[], const char *err_path) {
  return av_spawn_flags(argv, envp, err_path, 0);
}

/* 1 when the child ended (status in *st, -1 when someone else reaped it: a framework's SIGCHLD
 * handler may), 0 while it runs. Kills it (its process group) at its deadline. */
static int av_reap(av_child *c, uint64_t now, int *st, int *killed) {
  *killed = 0;
  if (c->pid <= 0) return 0;
  pid_t r = waitpid(c->pid, st, WNOHANG);
  if (r == 0 && now >= c->kill_ns) {
    kill(-c->pid, SIGKILL);
    kill(c->pid, SIGKILL);
    r = waitpid(c->pid, st, 0); /* prompt after SIGKILL */
    *killed = 1;
  }
  if (r == 0) return 0;
  if (r < 0) *st = -1;
  c->pid = 0;
  return 1;
}

static void av_kill(av_child *c) {
  if (c->pid <= 0) return;
  int st;
  kill(-c->pid, SIGKILL);
  kill(c->pid, SIGKILL);
  waitpid(c->pid, &st, 0);
  c->pid = 0;
}

/* ---- the analyzer ------------------------------------------------------------------------- */

/* The analyzer beside the plugin: <plugin dir>/../bin (make install, the build tree), or the
 * plugin's own directory (a wheel). */
static void av_find_analyzer(void) {
  av.analyzer[0] = '\0';
  if (av.cfg->analyzer[0]) {
    if (access(av.cfg->analyzer, X_OK) == 0) snprintf(av.analyzer, sizeof av.analyzer, "%s", av.cfg->analyzer);
    else
      WD_WARN("automatic verdict off: NCCL_WATCHDOG_ANALYZER=%s is not an executable file (%s)",
              av.cfg->analyzer, strerror(errno));
    return;
  }
  Dl_info info;
  char dir[WD_PATH_MAX] = ".";
  if (dladdr((void *)av_find_analyzer, &info) && info.dli_fname) {
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
  }
  char a[WD_PATH_MAX + 64], b[WD_PATH_MAX + 64];
  snprintf(a, sizeof a, "%s/../bin/nccl-watchdog-analyze", dir);
  snprintf(b, sizeof b, "%s/nccl-watchdog-analyze", dir);
  if (access(a, X_OK) == 0) snprintf(av.analyzer, sizeof av.analyzer, "%s", a);
  else if (access(b, X_OK) == 0) snprintf(av.analyzer, sizeof av.analyzer, "%s", b);
  else
    WD_WARN("automatic verdict off: nccl-watchdog-analyze is neither %s nor %s; "
            "NCCL_WATCHDOG_ANALYZER names it", a, b);
}

static void av_publish(const char *line);

/* The analyzer of episode k: it waits itself for `expected` dumps written since the episode
 * began (--settle), writes verdict-<k>.txt/.json/.html and publishes the line (--line: should
 * this process die meanwhile, the episode still gets its verdict), at nice 19, within
 * VERDICT_MEMORY and its own deadline. detached: a session of its own, stderr the job's (the
 * process is ending). Returns its pid, or -1. */
static pid_t av_start_analyzer(unsigned k, const wd_av_who *who, int detached) {
  char out[WD_PATH_MAX + 48], err[WD_PATH_MAX + 48], line[WD_PATH_MAX + 64], settle[96], deadline[32],
      episode[32], comms[16 + WD_AV_COMMS * 20];
  int expected = who->processes;
  snprintf(out, sizeof out, "--out=%s/verdict-%u", av.base, k);
  snprintf(err, sizeof err, "%s/verdict-%u.log", av.base, k);
  snprintf(line, sizeof line, "--line=%s/verdict-%u.line", av.watch->dir, k);
  /* A rank's own stall dump may come a timeout before the episode's trigger. */
  long since = (long)time(NULL) - (long)(av.cfg->timeout_ns / 1000000000ull) - 5;
  snprintf(settle, sizeof settle, "--settle=%d,%.1f,%ld", expected > 0 ? expected : 1,
           (double)av.cfg->verdict_wait_ns / 1e9, since);
  snprintf(deadline, sizeof deadline, "--deadline=%u",
           (unsigned)((av.cfg->verdict_wait_ns + av.cfg->verdict_limit_ns) / 1000000000ull));
  /* Episode k alone: the directory may hold hundreds of routine snapshots and earlier episodes
   * that resumed; read as the latest moment they would answer for a process whose dump of k is
   * not in (an "OK" during a hang, or a verdict on an old barrier). The settle counts k's. */
  snprintf(episode, sizeof episode, "--episode=%u", k);
  /* A dump of a process's end counts only when it names one of the episode's communicators: the
   * directory may hold an earlier incarnation's (a restart, a requeue) written minutes ago. */
  size_t used = (size_t)snprintf(comms, sizeof comms, "--settle-comms=");
  for (uint32_t i = 0; i < who->ncomms && used < sizeof comms; i++)
    used += (size_t)snprintf(comms + used, sizeof comms - used, "%s0x%llx", i ? "," : "",
                             (unsigned long long)who->comms[i]);
  char *argv[] = {av.analyzer, "-q", "-j", "2", settle, deadline, episode, out, line, av.base, NULL, NULL};
  if (who->ncomms) { /* before the directory, the last argument */
    argv[10] = argv[9];
    argv[9] = comms;
  }
  pid_t pid = av_spawn_flags(argv, NULL, err, detached);
  if (pid <= 0) return -1;
  /* At low priority and within its memory: the job's own work comes first. */
  setpriority(PRIO_PROCESS, (id_t)pid, 19);
  if (av.cfg->verdict_memory_mib) {
    struct rlimit rl = {(rlim_t)av.cfg->verdict_memory_mib << 20, (rlim_t)av.cfg->verdict_memory_mib << 20};
    prlimit(pid, RLIMIT_AS, &rl, NULL);
  }
  return pid;
}

/* The first line of the verdict's text report, or why there is none. */
static void av_read_line(const char *path, char *line, size_t len) {
  line[0] = '\0';
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  /* Only what the job's analyzer wrote: a regular file of this user (the directory is shared). */
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
      st.st_mtime >= (time_t)av.opened_wall - 1) {
    ssize_t r = read(fd, line, len - 1);
    line[r > 0 ? r : 0] = '\0';
    char *nl = strchr(line, '\n');
    if (nl) *nl = '\0';
  }
  close(fd);
}

static void av_first_line(int status, int killed, char *line, size_t len) {
  char path[WD_PATH_MAX + 48];
  /* The line the analyzer published itself (--line), else its report's first line; neither
   * counts when planted before the episode or by another user. */
  snprintf(path, sizeof path, "%s/verdict-%u.line", av.watch->dir, av.k);
  av_read_line(path, line, len);
  if (!line[0]) {
    snprintf(path, sizeof path, "%s/verdict-%u.txt", av.base, av.k);
    av_read_line(path, line, len);
  }
  if (line[0] && !killed) return;
  const char *why = killed ? "ran past NCCL_WATCHDOG_VERDICT_TIMEOUT and was killed"
                    : status == -1 ? "ended, reaped by another handler, without a report"
                    : WIFSIGNALED(status) ? "was killed by a signal (out of memory?)"
                                          : "wrote no report";
  snprintf(line, len, "NO VERDICT MADE for stall episode %u: the analyzer %s (see %s/verdict-%u.log)",
           av.k, why, av.base, av.k);
}

/* "HANG", "JOB", "NO VERDICT", "OK"; the first "global rank N" (else "rank N"); "host X". */
static void av_parse_line(const char *line) {
  wd_av_stats *s = &av.stats;
  s->last_kind[0] = s->last_rank[0] = s->last_host[0] = '\0';
  const char *colon = strchr(line, ':');
  size_t n = colon ? (size_t)(colon - line) : 0;
  if (n >= sizeof s->last_kind) n = sizeof s->last_kind - 1;
  memcpy(s->last_kind, line, n);
  s->last_kind[n] = '\0';
  const char *r = strstr(line, "global rank ");
  r = r ? r + 12 : (r = strstr(line, "rank ")) ? r + 5 : NULL;
  for (size_t i = 0; r && isdigit((unsigned char)r[i]) && i + 1 < sizeof s->last_rank; i++) {
    s->last_rank[i] = r[i];
    s->last_rank[i + 1] = '\0';
  }
  const char *h = strstr(line, "host ");
  for (size_t i = 0; h && h[5 + i] && !strchr(" ),;", h[5 + i]) && i + 1 < sizeof s->last_host; i++) {
    s->last_host[i] = h[5 + i];
    s->last_host[i + 1] = '\0';
  }
}

/* NCCL_WATCHDOG_ON_VERDICT: the command and its arguments split on blanks (no shell, no text
 * from dumps in the command line), the verdict's paths and first line in its environment. */
static void av_run_hook(uint64_t now, const char *line) {
  if (!av.cfg->on_verdict[0]) return;
  char cmd[WD_PATH_MAX];
  snprintf(cmd, sizeof cmd, "%s", av.cfg->on_verdict);
  char *argv[33];
  int argc = 0;
  for (char *save = NULL, *t = strtok_r(cmd, " \t", &save); t && argc < 32; t = strtok_r(NULL, " \t", &save))
    argv[argc++] = t;
  argv[argc] = NULL;
  if (!argc) return;
  size_t nenv = 0;
  while (environ && environ[nenv]) nenv++;
  char **envp = calloc(nenv + 6, sizeof *envp);
  char vars[5][WD_PATH_MAX + AV_LINE];
  if (!envp) return;
  for (size_t i = 0; i < nenv; i++) envp[i] = environ[i];
  snprintf(vars[0], sizeof vars[0], "NCCL_WATCHDOG_VERDICT_TXT=%s/verdict-%u.txt", av.base, av.k);
  snprintf(vars[1], sizeof vars[1], "NCCL_WATCHDOG_VERDICT_JSON=%s/verdict-%u.json", av.base, av.k);
  snprintf(vars[2], sizeof vars[2], "NCCL_WATCHDOG_VERDICT_HTML=%s/verdict-%u.html", av.base, av.k);
  snprintf(vars[3], sizeof vars[3], "NCCL_WATCHDOG_VERDICT_EPISODE=%u", av.k);
  snprintf(vars[4], sizeof vars[4], "NCCL_WATCHDOG_VERDICT_LINE=%s", line);
  for (int i = 0; i < 5; i++) envp[nenv + (size_t)i] = vars[i];
  char err[WD_PATH_MAX + 48];
  snprintf(err, sizeof err, "%s/verdict-%u.hook.log", av.base, av.k);
  pid_t pid = av_spawn(argv, envp, err);
  free(envp);
  if (pid <= 0) {
    WD_WARN("NCCL_WATCHDOG_ON_VERDICT: could not run %s: %s", argv[0], strerror(errno));
    return;
  }
  av.hook = (av_child){pid, now + AV_HOOK_LIMIT_NS};
}

static void av_publish(const char *line) {
  char text[AV_LINE + 2];
  snprintf(text, sizeof text, "%s\n", line);
  if (wd_trigger_post_verdict(av.watch, av.k, text) != 0 && errno != EEXIST)
    WD_WARN("stall episode %u: could not publish the verdict in %s: %s", av.k, av.watch->dir, strerror(errno));
  /* The opener logs its episode's line now, not at its next look, even when it answered other
   * triggers meanwhile (they moved what it waits for). */
  WD_WARN("verdict of stall episode %u: %s", av.k, line);
  if (av.wait_k == av.k) av.wait_k = 0;
  if (av.own_k == av.k) av.own_k = 0;
  av.stats.verdicts++;
  av.stats.last_seconds = (double)(wd_now_ns() - av.opened_ns) / 1e9;
  av_parse_line(line);
}

/* ---- salvages of this node's ring files ----------------------------------------------------- */

/* The start of a salvage's command line: the analyzer writing into this process's own dump
 * folder (out holds the option). Returns how many arguments it filled. */
static int av_salvage_argv(char **argv, char *out, size_t len) {
  snprintf(out, len, "--salvage=%s", av.dir);
  argv[0] = av.analyzer;
  argv[1] = "-q";
  argv[2] = out;
  return 3;
}

/* Runs the salvage argv[0..argc) (its first `fixed` arguments the command, the rest ring files)
 * at low priority, as child c. Returns how many files it was given, 0 when none or it could not
 * be started. */
static int av_salvage_start(char **argv, int argc, int fixed, av_child *c, uint64_t now) {
  argv[argc] = NULL;
  if (argc == fixed) return 0;
  pid_t pid = av_spawn(argv, NULL, NULL);
  if (pid <= 0) return 0;
  setpriority(PRIO_PROCESS, (id_t)pid, 19);
  *c = (av_child){pid, now + av.cfg->verdict_limit_ns};
  return argc - fixed;
}

/* ---- dead processes of this node ---------------------------------------------------------- */

/* The salvage ended (or this process stops): its post-mortems are in, or never will be. */
static void av_salvage_unmark(void) {
  if (av.salvage_mark[0]) unlink(av.salvage_mark);
  av.salvage_mark[0] = '\0';
}

/* The node's poller turns the ring files of this node's dead processes (pid gone, not ours,
 * refreshed since this job started) into post-mortem dumps in the shared directory, once per
 * episode: the verdict then sees a rank that was SIGKILLed without an epilog. */
static void av_salvage(uint64_t now, unsigned k) {
  if (!av.analyzer[0] || !av.cfg->ring_dir[0] || !av.watch->poller || av.salvaged_k == k || av.salvage.pid > 0)
    return;
  av.salvaged_k = k;
  /* "Since this job started" on the clock the node's files are stamped with: this process's start
   * by the kernel's account (boot time plus its start tick), not a reading of the wall clock, which
   * may have been stepped since. One second of slack for coarser stamps. */
  wd_process_id me;
  wd_process_identity(&me);
  long long since = me.start_wall_ns ? (long long)(me.start_wall_ns / 1000000000ull) - 1 : (long long)av.watch->start_sec;
  DIR *d = opendir(av.cfg->ring_dir);
  if (!d) return;
  int nfiles = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && nfiles < AV_SALVAGE_MAX) {
    size_t n = strlen(e->d_name);
    if (n < 6 || strcmp(e->d_name + n - 5, ".ring") != 0) continue;
    /* <host>-<pid>-<start>-<n>.ring */
    const char *p = e->d_name + strlen(av.host);
    if (strncmp(e->d_name, av.host, strlen(av.host)) != 0 || *p != '-') continue;
    long pid = strtol(p + 1, NULL, 10);
    struct stat st;
    if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    if (fstatat(dirfd(d), e->d_name, &st, 0) != 0 || st.st_mtime < since) continue;
    snprintf(av_paths[nfiles++], sizeof av_paths[0], "%s/%s", av.cfg->ring_dir, e->d_name);
  }
  closedir(d);
  if (!nfiles) return;
  /* salvage-<k>-<host>-<pid>.pending while it runs: the verdict's settle waits for it. The salvage
   * removes it once its dumps are written (--salvage-mark), this process when it reaps the
   * salvage; best effort: without it the verdict waits NCCL_WATCHDOG_VERDICT_WAIT, as before. */
  char mark[WD_PATH_MAX + 200];
  snprintf(av.salvage_mark, sizeof av.salvage_mark, "%s/salvage-%u-%s-%d.pending", av.base, k, av.host,
           (int)getpid());
  int fd = open(av.salvage_mark, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    /* The processes it salvages, <host>-<pid> a line: the settle counts none of them until the
     * mark is gone (one dump per communicator: the first must not count the process as in). */
    char list[AV_SALVAGE_MAX * 80];
    size_t used = 0;
    for (int i = 0; i < nfiles; i++) {
      const char *name = strrchr(av_paths[i], '/') + 1;
      const char *dash = strchr(name + strlen(av.host) + 1, '-'); /* after <host>-<pid> */
      size_t len = dash ? (size_t)(dash - name) : 0;
      if (!len || used + len + 1 > sizeof list) continue;
      memcpy(list + used, name, len);
      used += len;
      list[used++] = '\n';
    }
    if (wd_write_all(fd, list, used) != 0) { /* best effort: a partial line holds nobody */
    }
    close(fd);
  } else {
    av.salvage_mark[0] = '\0';
  }
  snprintf(mark, sizeof mark, "--salvage-mark=%s", av.salvage_mark);
  char *argv[AV_SALVAGE_MAX + 5];
  char out[WD_PATH_MAX + 96];
  int argc = av_salvage_argv(argv, out, sizeof out);
  if (av.salvage_mark[0]) argv[argc++] = mark;
  int fixed = argc;
  for (int i = 0; i < nfiles; i++) argv[argc++] = av_paths[i];
  if (!av_salvage_start(argv, argc, fixed, &av.salvage, now)) {
    av_salvage_unmark();
    return;
  }
  WD_WARN("stall episode %u: %d ring file(s) of dead processes on this node turned into "
          "post-mortem dumps in %s", k, nfiles, av.dir);
}

/* ---- running processes of this node whose watchdog is silent ------------------------------ */

/* A ring file of this node (name in dir), as its header says, if the running process of this
 * machine and PID namespace that wrote it, of this job (job: wd_proc_job's), still has it open
 * (not finalized): its live part's generation and its watchdog's poll. Read as the analyzer
 * reads dumps: a regular file of this user, no link. 0 when it is not such a file. */
static int av_ring_running(int dir, const char *name, const wd_process_id *me, const char *job,
                           uint64_t *gen, uint32_t *poll_ms, unsigned *answered) {
  int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return 0;
  wd_rf_header h;
  struct stat st;
  int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
           pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h;
  close(fd);
  if (!ok || memcmp(h.magic, WD_RF_MAGIC, sizeof h.magic) != 0 || h.ident_sum != wd_rf_ident_sum(&h) ||
      !wd_rf_of_place(&h, me->boot_id, me->pidns_ino) || h.pid <= 0 || h.pid == (int32_t)getpid() || h.finalized)
    return 0;
  /* The process that wrote it, not one that reuses its pid: it started when the header says. */
  if (!wd_proc_alive_since(h.pid, h.process_start_wall_ns, NULL)) return 0;
  /* Of this job: another job of the same user on this node shares the ring folder. */
  char its[WD_AV_JOB];
  if (wd_proc_job(h.pid, its, sizeof its) != 0 || strcmp(its, job) != 0) return 0;
  *gen = h.live_gen;
  *poll_ms = h.poll_ms;
  *answered = h.answered_k;
  return 1;
}

/* When the poller answered episode k: note this node's other running processes' ring files and
 * when each must have been rewritten (its watchdog's poll and a quarter, at least 2.5 s, at
 * most 15 s, as the analyzer waits for a file it cannot ask /proc about). A watchdog that is
 * running answers the episode itself; one that is silent (its process stopped, or stuck in the
 * kernel) would leave the verdict with no word from that rank, as the analyzer on another node
 * cannot see this node's memory. */
static void av_silent_arm(uint64_t now, unsigned k) {
  if (!av.analyzer[0] || !av.cfg->ring_dir[0] || !av.watch->poller || av.silent_k == k) return;
  av.silent_k = k;
  av.nsilent = 0;
  wd_process_id me;
  wd_process_identity(&me);
  char job[WD_AV_JOB];
  if (wd_proc_job(0, job, sizeof job) != 0) return;
  DIR *d = opendir(av.cfg->ring_dir);
  if (!d) return;
  uint64_t wait_ms = 0;
  struct dirent *e;
  size_t hl = strlen(av.host);
  while ((e = readdir(d)) != NULL && av.nsilent < AV_SALVAGE_MAX) {
    size_t n = strlen(e->d_name);
    if (n < 6 || n >= sizeof av.silent[0].name || strcmp(e->d_name + n - 5, ".ring") != 0 ||
        strncmp(e->d_name, av.host, hl) != 0 || e->d_name[hl] != '-')
      continue;
    uint64_t gen;
    uint32_t poll_ms;
    unsigned answered;
    if (!av_ring_running(dirfd(d), e->d_name, &me, job, &gen, &poll_ms, &answered)) continue;
    memcpy(av.silent[av.nsilent].name, e->d_name, n + 1);
    av.silent[av.nsilent++].gen = gen;
    uint64_t ms = (uint64_t)poll_ms + poll_ms / 4 + 500;
    if (ms > wait_ms) wait_ms = ms;
  }
  closedir(d);
  if (wait_ms < 2500) wait_ms = 2500;
  if (wait_ms > 15000) wait_ms = 15000;
  av.silent_wait_ns = wait_ms * 1000000ull;
  av.silent_due_ns = now + av.silent_wait_ns;
  av.silent_again = 0;
}

/* Once due: the files still not rewritten go to the analyzer's salvage, which writes each as
 * its running process's state for episode k (reason "live", <...>-e<k>-live.json beside the
 * dumps; the verdict uses it only where that process has no answer of its own). A watchdog that
 * has begun to answer k (its dump, seconds on a loaded node, holds up the rewrite) is given
 * another wait, twice as long, before it counts as silent (stuck in that dump): a false copy
 * is an extra dump of every busy process of a loaded node, a late one only leaves a stuck
 * process "with no dump" in a verdict made before it (7.5 s after the poller's answer at the
 * shortest wait, against a 10 s settle). */
static void av_silent_check(uint64_t now) {
  if (!av.nsilent || now < av.silent_due_ns || av.copy.pid > 0) return;
  uint32_t n = av.nsilent, later = 0;
  av.nsilent = 0;
  wd_process_id me;
  wd_process_identity(&me);
  char job[WD_AV_JOB];
  if (wd_proc_job(0, job, sizeof job) != 0) return;
  int dir = open(av.cfg->ring_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  char *argv[AV_SALVAGE_MAX + 5];
  char out[WD_PATH_MAX + 96], ep[32];
  int argc = av_salvage_argv(argv, out, sizeof out);
  snprintf(ep, sizeof ep, "--episode=%u", av.silent_k);
  argv[argc++] = ep;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t gen;
    uint32_t poll_ms;
    unsigned answered;
    if (!av_ring_running(dir, av.silent[i].name, &me, job, &gen, &poll_ms, &answered) || gen != av.silent[i].gen)
      continue;
    if (answered >= av.silent_k && !av.silent_again) {
      av.silent[later++] = av.silent[i]; /* later <= i */
      continue;
    }
    snprintf(av_paths[argc - 4], sizeof av_paths[0], "%s/%s", av.cfg->ring_dir, av.silent[i].name);
    argv[argc] = av_paths[argc - 4];
    argc++;
  }
  close(dir);
  av.nsilent = later;
  av.silent_again = 1;
  av.silent_due_ns = now + 2 * av.silent_wait_ns;
  int copied = av_salvage_start(argv, argc, 4, &av.copy, now);
  if (copied)
    WD_WARN("stall episode %u: %d ring file(s) of running processes on this node whose watchdog did "
            "not answer (not rewritten past their poll) copied as their live state into %s",
            av.silent_k, copied, av.dir);
}

/* ---- the interface ------------------------------------------------------------------------ */

void wd_av_start(const wd_config *cfg, wd_trigger_watch *watch, const char *base, const char *dir,
                 const char *host) {
  memset(&av, 0, sizeof av);
  av.cfg = cfg;
  av.watch = watch;
  snprintf(av.base, sizeof av.base, "%s", base);
  snprintf(av.dir, sizeof av.dir, "%s", dir);
  snprintf(av.host, sizeof av.host, "%s", host);
  if (cfg->verdict && cfg->peer_dumps) av_find_analyzer();
}

void wd_av_stop(void) {
  /* A verdict under way is left to finish (it has its own deadline and publishes its line
   * itself): a process that ends meanwhile, ncclCommAbort then exit, must not take the job's
   * verdict with it. */
  av_kill(&av.hook);
  av_salvage_unmark();
  memset(&av, 0, sizeof av);
}

/* The running analyzer, if it ended: its line published, its hook run. 1 when none runs now. */
static int av_finish(uint64_t now) {
  int st, killed;
  if (av.state == AV_RUNNING && av_reap(&av.analyzer_run, now, &st, &killed)) {
    char line[AV_LINE];
    av_first_line(st, killed, line, sizeof line);
    av.state = AV_IDLE;
    av_publish(line);
    av_run_hook(now, line);
  }
  return av.state == AV_IDLE;
}

/* This process opens episode k while its analyzer of an earlier one still runs (at nice 19 on a
 * busy node, a slow phase that resumed can take longer to judge than the next stall takes to
 * come): the new episode's verdict is the one wanted. The earlier analysis is stopped and its
 * episode says so (its dumps stay; it can be judged by hand), never k's left unanalyzed. */
static void av_supersede(unsigned k, uint64_t now) {
  if (av_finish(now)) return;
  av_kill(&av.analyzer_run);
  av.state = AV_IDLE;
  char line[AV_LINE];
  snprintf(line, sizeof line,
           "NO VERDICT MADE for stall episode %u: %s, and this process opened episode %u before "
           "its analyzer was done: stopped (judge it by hand: nccl-watchdog-analyze --episode=%u %s)",
           av.k, wd_av_episode_resumed(av.k) ? "it resumed" : "it got no verdict in time", k, av.k, av.base);
  av_publish(line);
}

void wd_av_opened(unsigned k, uint64_t now, const wd_av_who *who) {
  if (av.cfg) av.mark_k = k;
  if (!av.cfg || !av.analyzer[0]) return;
  if (av.state != AV_IDLE) av_supersede(k, now);
  av.k = k;
  av.opened_ns = now;
  av.opened_wall = time(NULL);
  av.stats.open_episode = k;
  pid_t pid = av_start_analyzer(k, who, 0);
  if (pid <= 0) {
    char line[AV_LINE];
    snprintf(line, sizeof line, "NO VERDICT MADE for stall episode %u: the analyzer %s could not be started (%s)",
             k, av.analyzer, strerror(errno));
    av_publish(line);
    return;
  }
  av.analyzer_run = (av_child){pid, now + av.cfg->verdict_wait_ns + av.cfg->verdict_limit_ns};
  av.state = AV_RUNNING;
  WD_INFO("stall episode %u: analyzing (pid %d) once %d process(es) have dumped: %s/verdict-%u.txt", k,
          (int)pid, who->processes, av.base, k);
}

void wd_av_answering(unsigned k, uint64_t now) {
  if (av.cfg && av.cfg->verdict && av.cfg->peer_dumps) av_salvage(now, k);
}

void wd_av_dumped(unsigned k, uint64_t now, int own) {
  if (!av.cfg || !av.cfg->verdict || !av.cfg->peer_dumps) return;
  av.wait_k = k;
  av.wait_until_ns = now + av.cfg->verdict_wait_ns + av.cfg->verdict_limit_ns + 30ull * 1000000000ull;
  if (own) {
    av.own_k = k;
    av.own_until_ns = av.wait_until_ns;
  }
  if (!av.stats.open_episode) av.stats.open_episode = k;
  av_salvage(now, k);
  av_silent_arm(now, k);
}

void wd_av_resumed(uint64_t now, uint64_t began_ns) {
  double secs = began_ns && now > began_ns ? (double)(now - began_ns) / 1e9 : 0;
  WD_WARN("progress resumed after %.1f s: the stall episode is over (a slow rank or a long "
          "operation, not a hang)", secs);
  av.stats.resumed++;
  av.stats.open_episode = 0;
  if (!av.cfg || !av.mark_k || !av.base[0]) return;
  unsigned k = av.mark_k;
  av.mark_k = 0;
  char path[WD_PATH_MAX + 48], text[256];
  snprintf(path, sizeof path, "%s/verdict-%u.resumed", av.base, k);
  snprintf(text, sizeof text, "stall episode %u resumed after %.1f s (host %s, pid %d)\n", k, secs,
           av.host, (int)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    if (wd_write_all(fd, text, strlen(text)) != 0) { /* best effort: the log has it */
    }
    close(fd);
  }
}

void wd_av_unmark(void) { av.mark_k = 0; }

int wd_av_episode_resumed(unsigned k) {
  if (!av.cfg || !av.base[0] || !k) return 0;
  char path[WD_PATH_MAX + 48];
  struct stat st;
  snprintf(path, sizeof path, "%s/verdict-%u.resumed", av.base, k);
  return lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid();
}

void wd_av_teardown(uint64_t now, const wd_av_who *who) {
  (void)now;
  if (!av.cfg || !av.analyzer[0] || av.state != AV_IDLE) return;
  char json[256], name[64];
  snprintf(json, sizeof json, "{\"host\":\"%s\",\"pid\":%d,\"teardown\":\"SIGABRT\",\"stalls\":[]}",
           av.host, (int)getpid());
  if (wd_trigger_post(av.watch, json, name, sizeof name, NULL, 0) != 1) return; /* another's */
  unsigned k = av.watch->next - 1;
  pid_t pid = av_start_analyzer(k, who, 1);
  if (pid <= 0) {
    WD_WARN("stall episode %u (posted on SIGABRT): could not start the analyzer: %s", k, strerror(errno));
    return;
  }
  WD_WARN("SIGABRT: posted stall episode %u (%s) so that every live process dumps; a detached "
          "analyzer (pid %d) writes %s/verdict-%u.txt and prints its first line here", k, name,
          (int)pid, av.base, k);
}

/* One look for episode k's verdict line (0: none awaited): logged when it came. 1 when the wait
 * is over (the line came, or until passed). */
static int av_look(unsigned k, uint64_t until, uint64_t now) {
  char line[AV_LINE];
  if (!k) return 0;
  if (wd_trigger_verdict_poll(av.watch, k, now, line, sizeof line)) {
    WD_WARN("verdict of stall episode %u: %s", k, line);
    av_parse_line(line);
    return 1;
  }
  return now >= until;
}

void wd_av_poll(uint64_t now) {
  if (!av.cfg) return;
  int st, killed;
  av_finish(now);
  if (av_reap(&av.hook, now, &st, &killed)) {
    if (killed) WD_WARN("NCCL_WATCHDOG_ON_VERDICT ran past %d s: killed", (int)(AV_HOOK_LIMIT_NS / 1000000000ull));
    else if (st != -1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
      WD_WARN("NCCL_WATCHDOG_ON_VERDICT failed (status 0x%x): see %s/verdict-%u.hook.log", st, av.base, av.k);
  }
  if (av_reap(&av.salvage, now, &st, &killed)) av_salvage_unmark();
  av_reap(&av.copy, now, &st, &killed);
  av_silent_check(now);
  if (av_look(av.wait_k, av.wait_until_ns, now)) {
    if (av.own_k == av.wait_k) av.own_k = 0;
    av.wait_k = 0;
  }
  if (av.own_k != av.wait_k && av_look(av.own_k, av.own_until_ns, now)) av.own_k = 0;
}

void wd_av_get_stats(wd_av_stats *out) { *out = av.stats; }
