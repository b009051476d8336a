/* Dump files: directory resolution, atomic private writes that never overwrite, trigger files. */
#include <CUnit/Basic.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/host.h"
#include "dump/dumpfile.h"
#include "dump/trigger.h"
#include "base/log.h"
#include "wd_test_util.h"

static char g_tmp[PATH_MAX];

/* snprintf for paths in tests: they are far below the limits, so no truncation checks here. */
static void pathf(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, len, fmt, ap);
  va_end(ap);
} /* a fresh directory per test */
static int g_warns;

static void count_warns(wd_log_level level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  (void)fmt;
  if (level == WD_LOG_WARN) g_warns++;
}

static int setup(void) { return wd_test_mkdtemp(g_tmp, sizeof(g_tmp), "dumpfile"); }

static int teardown(void) {
  wd_test_rmtree(g_tmp);
  return 0;
}

static int count_entries(const char *dir, const char *prefix) {
  int n = 0;
  DIR *d = opendir(dir);
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL)
    if (!strncmp(de->d_name, prefix, strlen(prefix))) n++;
  if (d) closedir(d);
  return n;
}

static int read_file(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  buf[n] = 0;
  fclose(f);
  return (int)n;
}

static void test_write_mode_and_name(void) {
  char dir[PATH_MAX + 16], path[PATH_MAX * 2], want[PATH_MAX * 2], buf[256];
  pathf(dir, sizeof(dir), "%s/w1", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0700), 0);
  mode_t old = umask(022);
  CU_ASSERT_EQUAL(wd_dumpfile_write(dir, "node017", 41233, 1, "stall", "{\"a\":1}", 7, path,
                                    sizeof(path)), 0);
  umask(old);
  pathf(want, sizeof(want), "%s/node017-41233-0001-stall.json", dir);
  CU_ASSERT_STRING_EQUAL(path, want);
  struct stat st;
  CU_ASSERT_EQUAL_FATAL(lstat(path, &st), 0);
  CU_ASSERT(S_ISREG(st.st_mode));
  CU_ASSERT_EQUAL(st.st_mode & 07777, 0600);
  CU_ASSERT_EQUAL(read_file(path, buf, sizeof(buf)), 7);
  CU_ASSERT_STRING_EQUAL(buf, "{\"a\":1}");
  CU_ASSERT_EQUAL(count_entries(dir, "."), 2); /* "." and "..": no temporary file left behind */

  /* Unsafe characters in host and reason cannot leave the directory or break the name. */
  CU_ASSERT_EQUAL(wd_dumpfile_write(dir, "../evil/host", 7, 12345, "a b/c", "x", 1, path,
                                    sizeof(path)), 0);
  pathf(want, sizeof(want), "%s/.._evil_host-7-12345-a_b_c.json", dir);
  CU_ASSERT_STRING_EQUAL(path, want);
  CU_ASSERT_EQUAL(wd_dumpfile_write(dir, "", 7, 1, "", "", 0, path, sizeof(path)), 0);
  pathf(want, sizeof(want), "%s/unknown-7-0001-dump.json", dir);
  CU_ASSERT_STRING_EQUAL(path, want);
  CU_ASSERT_EQUAL(lstat(path, &st), 0);
  CU_ASSERT_EQUAL(st.st_size, 0);
}

static void test_never_overwrites(void) {
  char dir[PATH_MAX + 16], path[PATH_MAX * 2], want[PATH_MAX * 2], buf[64];
  pathf(dir, sizeof(dir), "%s/w2", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0700), 0);
  /* The name seq 5 would take exists; so does a dangling symlink at the name of seq 6. */
  pathf(want, sizeof(want), "%s/h-1-0005-signal.json", dir);
  FILE *f = fopen(want, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fputs("first", f);
  fclose(f);
  pathf(want, sizeof(want), "%s/h-1-0006-signal.json", dir);
  CU_ASSERT_EQUAL_FATAL(symlink("nowhere", want), 0);
  CU_ASSERT_EQUAL(wd_dumpfile_write(dir, "h", 1, 5, "signal", "second", 6, path, sizeof(path)), 0);
  pathf(want, sizeof(want), "%s/h-1-0007-signal.json", dir);
  CU_ASSERT_STRING_EQUAL(path, want);
  CU_ASSERT_EQUAL(read_file(path, buf, sizeof(buf)), 6);
  CU_ASSERT_STRING_EQUAL(buf, "second");
  pathf(want, sizeof(want), "%s/h-1-0005-signal.json", dir);
  CU_ASSERT_EQUAL(read_file(want, buf, sizeof(buf)), 5);
  CU_ASSERT_STRING_EQUAL(buf, "first");
  char target[64];
  pathf(want, sizeof(want), "%s/h-1-0006-signal.json", dir);
  ssize_t n = readlink(want, target, sizeof(target) - 1);
  CU_ASSERT_EQUAL(n, 7); /* the symlink is still there, not followed */
  /* A stale temporary file of the same name (a crashed writer) is not reused either. */
  pathf(want, sizeof(want), "%s/.h-1-0009-signal.json.tmp", dir);
  f = fopen(want, "w");
  fclose(f);
  CU_ASSERT_EQUAL(wd_dumpfile_write(dir, "h", 1, 9, "signal", "third", 5, path, sizeof(path)), 0);
  pathf(want, sizeof(want), "%s/h-1-0010-signal.json", dir);
  CU_ASSERT_STRING_EQUAL(path, want);
  CU_ASSERT_EQUAL(count_entries(dir, "."), 3); /* ".", ".." and the stale temporary only */
  /* Writing into a directory that does not exist fails with errno set. */
  errno = 0;
  pathf(want, sizeof(want), "%s/missing", g_tmp);
  CU_ASSERT_EQUAL(wd_dumpfile_write(want, "h", 1, 1, "signal", "x", 1, path, sizeof(path)), -1);
  CU_ASSERT_EQUAL(errno, ENOENT);
}

static void test_large_write(void) {
  char dir[PATH_MAX + 16], path[PATH_MAX * 2];
  pathf(dir, sizeof(dir), "%s/w3", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0700), 0);
  size_t len = 8u << 20;
  char *data = malloc(len);
  CU_ASSERT_PTR_NOT_NULL_FATAL(data);
  for (size_t i = 0; i < len; i++) data[i] = (char)('a' + i % 26);
  CU_ASSERT_EQUAL(wd_dumpfile_write(dir, "h", 2, 1, "stall", data, len, path, sizeof(path)), 0);
  struct stat st;
  CU_ASSERT_EQUAL(stat(path, &st), 0);
  CU_ASSERT_EQUAL((size_t)st.st_size, len);
  FILE *f = fopen(path, "r");
  char *back = malloc(len);
  CU_ASSERT_EQUAL(fread(back, 1, len, f), len);
  CU_ASSERT(memcmp(back, data, len) == 0);
  fclose(f);
  free(back);
  free(data);
}

static void test_dir_resolution(void) {
  char cwd[PATH_MAX], out[WD_PATH_MAX], want[WD_PATH_MAX * 2], work[PATH_MAX + 16];
  CU_ASSERT_PTR_NOT_NULL_FATAL(getcwd(cwd, sizeof(cwd)));
  pathf(work, sizeof(work), "%s/cwd", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(work, 0755), 0);
  CU_ASSERT_EQUAL_FATAL(chdir(work), 0);
  char real[PATH_MAX];
  CU_ASSERT_PTR_NOT_NULL_FATAL(getcwd(real, sizeof(real)));
  wd_config cfg;
  memset(&cfg, 0, sizeof(cfg));

  setenv("SLURM_JOB_ID", "12/34 x", 1);
  setenv("TORCHELASTIC_RUN_ID", "elastic", 1);
  mode_t old = umask(0);
  CU_ASSERT_EQUAL(wd_dumpdir_resolve(&cfg, out, sizeof(out)), 0);
  umask(old);
  pathf(want, sizeof(want), "%s/nccl-watchdog-12_34_x", real);
  CU_ASSERT_STRING_EQUAL(out, want);
  struct stat st;
  CU_ASSERT_EQUAL(stat(want, &st), 0);
  CU_ASSERT(S_ISDIR(st.st_mode));
  CU_ASSERT_EQUAL(st.st_mode & 0777, 0700);
  /* A second call finds it. */
  CU_ASSERT_EQUAL(wd_dumpdir_resolve(&cfg, out, sizeof(out)), 0);
  CU_ASSERT_STRING_EQUAL(out, want);

  unsetenv("SLURM_JOB_ID");
  CU_ASSERT_EQUAL(wd_dumpdir_resolve(&cfg, out, sizeof(out)), 0);
  pathf(want, sizeof(want), "%s/nccl-watchdog-elastic", real);
  CU_ASSERT_STRING_EQUAL(out, want);

  setenv("SLURM_JOB_ID", "", 1); /* empty counts as unset */
  unsetenv("TORCHELASTIC_RUN_ID");
  CU_ASSERT_EQUAL(wd_dumpdir_resolve(&cfg, out, sizeof(out)), 0);
  pathf(want, sizeof(want), "%s/nccl-watchdog-local", real);
  CU_ASSERT_STRING_EQUAL(out, want);
  unsetenv("SLURM_JOB_ID");

  /* A configured directory wins, and missing parents are created. */
  pathf(cfg.dump_dir, sizeof(cfg.dump_dir), "%s/a/b/c", g_tmp);
  CU_ASSERT_EQUAL(wd_dumpdir_resolve(&cfg, out, sizeof(out)), 0);
  CU_ASSERT_STRING_EQUAL(out, cfg.dump_dir);
  CU_ASSERT_EQUAL(stat(cfg.dump_dir, &st), 0);
  CU_ASSERT(S_ISDIR(st.st_mode));

  /* A directory that cannot be created (under a regular file): $TMPDIR, with one WARN. */
  pathf(want, sizeof(want), "%s/regular", g_tmp);
  FILE *f = fopen(want, "w");
  fclose(f);
  pathf(cfg.dump_dir, sizeof(cfg.dump_dir), "%s/regular/sub", g_tmp);
  char tmpdir[PATH_MAX + 16];
  pathf(tmpdir, sizeof(tmpdir), "%s/fallback", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(tmpdir, 0700), 0);
  char *saved = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : NULL;
  setenv("TMPDIR", tmpdir, 1);
  wd_log_set_logger(count_warns);
  g_warns = 0;
  CU_ASSERT_EQUAL(wd_dumpdir_resolve(&cfg, out, sizeof(out)), 0);
  CU_ASSERT_STRING_EQUAL(out, tmpdir);
  CU_ASSERT_EQUAL(wd_dumpdir_resolve(&cfg, out, sizeof(out)), 0);
  CU_ASSERT_STRING_EQUAL(out, tmpdir);
  CU_ASSERT_EQUAL(g_warns, 1);
  /* $TMPDIR unusable: /tmp. */
  pathf(want, sizeof(want), "%s/no-such-dir", g_tmp);
  setenv("TMPDIR", want, 1);
  CU_ASSERT_EQUAL(wd_dumpdir_resolve(&cfg, out, sizeof(out)), 0);
  CU_ASSERT_STRING_EQUAL(out, "/tmp");
  CU_ASSERT_EQUAL(g_warns, 1);
  wd_log_reset();
  if (saved) {
    setenv("TMPDIR", saved, 1);
    free(saved);
  } else {
    unsetenv("TMPDIR");
  }
  CU_ASSERT_EQUAL(chdir(cwd), 0);
}

/* Trigger episodes (trigger.h): history is never answered, one episode per job however many
 * ranks post it, found with one stat of one name, relayed on the node. */
static void test_triggers(void) {
  char dump[PATH_MAX + 16], relay[PATH_MAX + 16], name[64], content[256], path[PATH_MAX * 2];
  pathf(dump, sizeof(dump), "%s/trig", g_tmp);
  pathf(relay, sizeof(relay), "%s/trig-relay", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(dump, 0700), 0);
  /* An earlier incarnation of the job left episodes 1 and 2. */
  pathf(path, sizeof(path), "%s/triggers", dump);
  CU_ASSERT_EQUAL_FATAL(mkdir(path, 0700), 0);
  for (int k = 1; k <= 2; k++) {
    pathf(path, sizeof(path), "%s/triggers/episode-%d.trigger", dump, k);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
  }
  wd_trigger_watch a, b;
  wd_trigger_watch_init(&a, dump, "", "h", 1, 0);
  wd_trigger_watch_init(&b, dump, "", "h", 1, 0);
  CU_ASSERT_EQUAL(a.next, 3);
  CU_ASSERT_EQUAL(wd_trigger_poll(&a, 1, name, sizeof(name), content, sizeof(content)), 0);

  /* b stalls: it posts episode 3; a finds it once, with its content. */
  CU_ASSERT_EQUAL(wd_trigger_post(&b, "{\"host\":\"b\"}", name, sizeof(name), NULL, 0), 1);
  CU_ASSERT_STRING_EQUAL(name, "episode-3.trigger");
  struct stat st;
  pathf(path, sizeof(path), "%s/triggers/episode-3.trigger", dump);
  CU_ASSERT_EQUAL(stat(path, &st), 0);
  CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
  CU_ASSERT_EQUAL(wd_trigger_poll(&a, 2, name, sizeof(name), content, sizeof(content)), 1);
  CU_ASSERT_STRING_EQUAL(name, "episode-3.trigger");
  CU_ASSERT_STRING_EQUAL(content, "{\"host\":\"b\"}");
  CU_ASSERT_EQUAL(wd_trigger_poll(&a, 3, name, sizeof(name), content, sizeof(content)), 0);

  /* Both stall at once: one episode; the second poster gets the first one's content. */
  CU_ASSERT_EQUAL(wd_trigger_post(&a, "{\"n\":1}", name, sizeof(name), NULL, 0), 1);
  char small[4];
  CU_ASSERT_EQUAL(wd_trigger_post(&b, "{\"n\":2}", name, sizeof(name), small, sizeof(small)), 0);
  CU_ASSERT_STRING_EQUAL(small, "{\"n");
  CU_ASSERT_STRING_EQUAL(name, "episode-4.trigger");
  CU_ASSERT_EQUAL(a.next, 5);
  CU_ASSERT_EQUAL(b.next, 5);
  /* Nothing else was written in the triggers directory (no temporaries left). */
  int nfiles = 0;
  pathf(path, sizeof(path), "%s/triggers", dump);
  DIR *d = opendir(path);
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) nfiles += e->d_name[0] != '.' || strlen(e->d_name) > 2;
  if (d) closedir(d);
  CU_ASSERT_EQUAL(nfiles, 4);

  /* A node: its poller relays, the other process reads only node-local memory. */
  wd_trigger_watch p, o;
  wd_trigger_watch_init(&p, dump, relay, "h", 1, 1000);
  wd_trigger_watch_init(&o, dump, relay, "h", 0, 1000);
  uint64_t o_shared = o.shared_checks;
  CU_ASSERT_EQUAL(wd_trigger_post(&b, "{\"k\":5}", name, sizeof(name), NULL, 0), 1);
  CU_ASSERT_EQUAL(wd_trigger_poll(&o, 10, name, sizeof(name), content, sizeof(content)), 0);
  CU_ASSERT_EQUAL(wd_trigger_poll(&p, 10, name, sizeof(name), content, sizeof(content)), 1);
  CU_ASSERT_EQUAL(wd_trigger_poll(&o, 20, name, sizeof(name), content, sizeof(content)), 1);
  CU_ASSERT_STRING_EQUAL(content, "{\"k\":5}");
  CU_ASSERT_EQUAL(o.shared_checks, o_shared); /* never the shared file system after its start */
  CU_ASSERT(o.node_checks >= 2);
  /* The poller checks the shared directory at its own interval only. */
  uint64_t before = p.shared_checks;
  CU_ASSERT_EQUAL(wd_trigger_poll(&p, 11, name, sizeof(name), content, sizeof(content)), 0);
  CU_ASSERT_EQUAL(p.shared_checks, before);
  CU_ASSERT_EQUAL(wd_trigger_poll(&p, 1010, name, sizeof(name), content, sizeof(content)), 0);
  CU_ASSERT_EQUAL(p.shared_checks, before + 1);

  /* A relay file left in node memory by an earlier job with this dump directory is stale: never
   * answered, and replaced when the episode comes. */
  pathf(path, sizeof(path), "%s/trigger-%s-%u.trigger", relay, o.job, o.next);
  FILE *stale = fopen(path, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(stale);
  fputs("{\"stale\":1}", stale);
  fclose(stale);
  struct timespec old[2] = {{1000000, 0}, {1000000, 0}};
  CU_ASSERT_EQUAL(utimensat(AT_FDCWD, path, old, 0), 0);
  CU_ASSERT_EQUAL(wd_trigger_poll(&o, 30, name, sizeof(name), content, sizeof(content)), 0);
  CU_ASSERT_EQUAL(wd_trigger_post(&b, "{\"k\":6}", name, sizeof(name), NULL, 0), 1);
  CU_ASSERT_EQUAL(wd_trigger_poll(&p, 5000, name, sizeof(name), content, sizeof(content)), 1);
  CU_ASSERT_EQUAL(wd_trigger_poll(&o, 40, name, sizeof(name), content, sizeof(content)), 1);
  CU_ASSERT_STRING_EQUAL(content, "{\"k\":6}");

  /* A missing dump directory is not an error. */
  pathf(path, sizeof(path), "%s/none", g_tmp);
  wd_trigger_watch w3;
  wd_trigger_watch_init(&w3, path, "", "h", 1, 0);
  CU_ASSERT_EQUAL(wd_trigger_poll(&w3, 1, name, sizeof(name), NULL, 0), 0);
}

/* The node's poller election (trigger.c, poller_claim): a process that holds the heartbeat's lock
 * polls, another that could poll reads the relay; it takes the place when the holder is gone,
 * and only then, or when the holder gave no sign for twice the stale time. Record locks never
 * conflict within one process, so the holder is a forked child. */
static void set_age(const char *path, time_t age) {
  struct timespec t[2];
  clock_gettime(CLOCK_REALTIME, &t[0]);
  t[0].tv_sec -= age;
  t[1] = t[0];
  CU_ASSERT_EQUAL(utimensat(AT_FDCWD, path, t, 0), 0);
}

static void test_poller_election(void) {
  char dump[PATH_MAX + 16], relay[PATH_MAX + 16], path[PATH_MAX * 2];
  pathf(dump, sizeof(dump), "%s/elect", g_tmp);
  pathf(relay, sizeof(relay), "%s/elect-relay", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(dump, 0700), 0);
  const uint64_t every = 2000000000ull; /* stale after 3 intervals: 7 s of file age */
  int up[2], down[2];
  CU_ASSERT_EQUAL_FATAL(pipe(up), 0);
  CU_ASSERT_EQUAL_FATAL(pipe(down), 0);
  pid_t child = fork();
  CU_ASSERT_FATAL(child >= 0);
  if (child == 0) {
    wd_trigger_watch c;
    wd_trigger_watch_init(&c, dump, relay, "h", 1, every);
    char v = c.poller ? 'P' : 'n';
    if (write(up[1], &v, 1) != 1 || read(down[0], &v, 1) < 0) _exit(1);
    _exit(0);
  }
  char v = 0;
  CU_ASSERT_EQUAL(read(up[0], &v, 1), 1);
  CU_ASSERT_EQUAL(v, 'P'); /* the first to ask */
  wd_trigger_watch q;
  wd_trigger_watch_init(&q, dump, relay, "h", 1, every);
  CU_ASSERT_FALSE(q.poller);
  /* Another host name in the same ring directory (hosts simulated by NCCL_WATCHDOG_HOSTNAME)
   * salvages other ring files: it elects its own poller. */
  wd_trigger_watch other;
  wd_trigger_watch_init(&other, dump, relay, "h2", 1, every);
  CU_ASSERT_TRUE(other.poller);
  CU_ASSERT_TRUE(other.lock_held);
  CU_ASSERT_STRING_NOT_EQUAL(other.poller_key, q.poller_key);
  wd_trigger_watch_close(&other);
  pathf(path, sizeof(path), "%s/poller-%s.alive", relay, q.poller_key);
  CU_ASSERT_EQUAL(access(path, F_OK), 0);
  uint64_t t = 1;
  wd_trigger_poll(&q, t, NULL, 0, NULL, 0); /* starts its count of the holder's first beat */
  /* Silent 10 s: stale, but its holder lives (stopped, or busy): not yet. */
  set_age(path, 10);
  t += 5 * every;
  wd_trigger_poll(&q, t, NULL, 0, NULL, 0);
  CU_ASSERT_FALSE(q.poller);
  CU_ASSERT_FALSE(q.took_over);
  /* Silent 20 s, over twice the stale time: its watchdog is stuck, the place is taken. */
  set_age(path, 20);
  t += 5 * every;
  wd_trigger_poll(&q, t, NULL, 0, NULL, 0);
  CU_ASSERT_TRUE(q.poller);
  CU_ASSERT_TRUE(q.took_over);
  CU_ASSERT_FALSE(q.lock_held);
  /* Another candidate, the holder gone: the lock is free, so its place is taken at 1x. */
  CU_ASSERT_EQUAL(write(down[1], &v, 1), 1);
  int st = 0;
  CU_ASSERT_EQUAL(waitpid(child, &st, 0), child);
  wd_trigger_watch r;
  wd_trigger_watch_init(&r, dump, relay, "h", 0, every); /* LOCAL_RANK 1: never stands at start */
  CU_ASSERT_FALSE(r.poller);
  wd_trigger_poll(&r, 1, NULL, 0, NULL, 0);
  set_age(path, 10);
  wd_trigger_poll(&r, 1 + 5 * every, NULL, 0, NULL, 0);
  CU_ASSERT_TRUE(r.poller);
  CU_ASSERT_TRUE(r.lock_held);
  wd_trigger_watch_close(&r);
  CU_ASSERT_FALSE(r.lock_held);
  wd_trigger_watch_close(&q);
  close(up[0]);
  close(up[1]);
  close(down[0]);
  close(down[1]);
}

/* File systems without RENAME_NOREPLACE (NFS, older kernels): link() + unlink() must give the same
 * guarantees. A forked child makes renameat2 fail with ENOSYS through seccomp. */
static int child_without_renameat2(void *arg) {
  const char *dir = arg;
#ifdef SYS_renameat2
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_renameat2, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {(unsigned short)(sizeof(filter) / sizeof(filter[0])), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 10;
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return 11;
  if (syscall(SYS_renameat2, AT_FDCWD, "a", AT_FDCWD, "b", 0) == 0 || errno != ENOSYS) return 12;
#endif
  char path[PATH_MAX * 2], want[PATH_MAX * 2], buf[16];
  pathf(want, sizeof(want), "%s/h-3-0001-stall.json", dir);
  FILE *f = fopen(want, "w");
  if (!f) return 13;
  fputs("old", f);
  fclose(f);
  if (wd_dumpfile_write(dir, "h", 3, 1, "stall", "new", 3, path, sizeof(path)) != 0) return 14;
  pathf(want, sizeof(want), "%s/h-3-0002-stall.json", dir);
  if (strcmp(path, want) != 0) return 15;
  if (read_file(path, buf, sizeof(buf)) != 3 || strcmp(buf, "new") != 0) return 16;
  pathf(want, sizeof(want), "%s/h-3-0001-stall.json", dir);
  if (read_file(want, buf, sizeof(buf)) != 3 || strcmp(buf, "old") != 0) return 17;
  if (count_entries(dir, ".") != 2) return 18; /* the temporary name is gone */
  struct stat st;
  if (stat(path, &st) != 0 || (st.st_mode & 0777) != 0600 || st.st_nlink != 1) return 19;
  return 0;
}

static void test_link_fallback(void) {
  char dir[PATH_MAX + 16];
  pathf(dir, sizeof(dir), "%s/nolink", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0700), 0);
  int rc = wd_test_in_child(child_without_renameat2, dir, 10);
  CU_ASSERT(rc >= 0 && rc < 128); /* forked, finished in time, not killed by a signal */
  CU_ASSERT_EQUAL(rc, 0);
}

/* A host folder planted in the shared dump directory as a link to someone else's directory
 * never receives the job's dumps: a fresh name of this user's is used instead. */
static void test_own_subdir(void) {
  char target[4200], link[4300], out[4400], base[4200];
  snprintf(base, sizeof base, "%s/own", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(base, 0700), 0);
  snprintf(target, sizeof target, "%s/elsewhere", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(target, 0700), 0);
  snprintf(link, sizeof link, "%s/node-a", base);
  CU_ASSERT_EQUAL_FATAL(symlink(target, link), 0);
  CU_ASSERT_EQUAL(wd_own_subdir(base, "node-a", out, sizeof out), 0);
  char want[4400];
  snprintf(want, sizeof want, "%s/node-a~%u", base, (unsigned)geteuid());
  CU_ASSERT_STRING_EQUAL(out, want);
  struct stat st;
  CU_ASSERT_EQUAL(lstat(out, &st), 0);
  CU_ASSERT_TRUE(S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode));
  /* A plain file in the way, too. */
  char file[4300];
  snprintf(file, sizeof file, "%s/node-b", base);
  FILE *f = fopen(file, "w");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  fclose(f);
  CU_ASSERT_EQUAL(wd_own_subdir(base, "node-b", out, sizeof out), 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(out, "node-b~"));
  /* Its own folder, found again, is kept. */
  CU_ASSERT_EQUAL(wd_own_subdir(base, "node-c", out, sizeof out), 0);
  CU_ASSERT_EQUAL(wd_own_subdir(base, "node-c", out, sizeof out), 0);
  snprintf(want, sizeof want, "%s/node-c", base);
  CU_ASSERT_STRING_EQUAL(out, want);
}

static void test_hostname(void) {
  char h[64];
  wd_hostname(h, sizeof(h));
  CU_ASSERT(strlen(h) > 0);
  CU_ASSERT_PTR_NULL(strchr(h, '.'));
  char tiny[3];
  wd_hostname(tiny, sizeof(tiny));
  CU_ASSERT(strlen(tiny) <= 2);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("dumpfile", setup, teardown);
  CU_add_test(s, "atomic write: mode 0600, name, no temporary left", test_write_mode_and_name);
  CU_add_test(s, "never overwrites, never follows symlinks", test_never_overwrites);
  CU_add_test(s, "8 MB write is complete", test_large_write);
  CU_add_test(s, "link() fallback without renameat2", test_link_fallback);
  CU_add_test(s, "directory resolution and fallback", test_dir_resolution);
  CU_add_test(s, "trigger episodes", test_triggers);
  CU_add_test(s, "the node's poller election", test_poller_election);
  CU_add_test(s, "host name", test_hostname);
  CU_add_test(s, "a planted host folder is never written through", test_own_subdir);
  return wd_test_run();
}
