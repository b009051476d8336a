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

static void test_triggers(void) {
  char dir[PATH_MAX + 16], name[256], content[256], pre[PATH_MAX * 2];
  pathf(dir, sizeof(dir), "%s/trig", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0700), 0);
  /* Present before the watch starts: never answered. */
  CU_ASSERT_EQUAL(wd_trigger_post(dir, "old", 5, "{\"old\":1}", name, sizeof(name)), 0);
  pathf(pre, sizeof(pre), "%s", name);
  /* Unrelated files are ignored too. */
  pathf(content, sizeof(content), "%s/node-1-0001-stall.json", dir);
  FILE *f = fopen(content, "w");
  fclose(f);

  wd_trigger_watch w;
  wd_trigger_watch_init(&w, dir, "me", 100);
  CU_ASSERT_STRING_EQUAL(w.self_prefix, "trigger-me-100-");
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, name, sizeof(name), content, sizeof(content)), 0);

  /* Our own trigger is ignored. */
  CU_ASSERT_EQUAL(wd_trigger_post(dir, "me", 100, "{\"mine\":1}", name, sizeof(name)), 0);
  CU_ASSERT(strncmp(name, "trigger-me-100-", 15) == 0);
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, name, sizeof(name), content, sizeof(content)), 0);

  /* Another process's trigger is returned once, with its content. */
  char posted[256];
  CU_ASSERT_EQUAL(wd_trigger_post(dir, "peer", 200, "{\"host\":\"peer\"}", posted, sizeof(posted)), 0);
  CU_ASSERT(strncmp(posted, "trigger-peer-200-", 17) == 0);
  struct stat st;
  pathf(pre, sizeof(pre), "%s/%s", dir, posted);
  CU_ASSERT_EQUAL(stat(pre, &st), 0);
  CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
  memset(name, 0, sizeof(name));
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, name, sizeof(name), content, sizeof(content)), 1);
  CU_ASSERT_STRING_EQUAL(name, posted);
  CU_ASSERT_STRING_EQUAL(content, "{\"host\":\"peer\"}");
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, name, sizeof(name), content, sizeof(content)), 0);
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, name, sizeof(name), content, sizeof(content)), 0);

  /* Two at once: one per call. Content is cut to the buffer. */
  char a[256], b[256];
  CU_ASSERT_EQUAL(wd_trigger_post(dir, "peer", 201, "{\"n\":1}", a, sizeof(a)), 0);
  CU_ASSERT_EQUAL(wd_trigger_post(dir, "other", 202, "{\"n\":2}", b, sizeof(b)), 0);
  char n1[256], n2[256], small[4];
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, n1, sizeof(n1), small, sizeof(small)), 1);
  CU_ASSERT_EQUAL(strlen(small), 3);
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, n2, sizeof(n2), NULL, 0), 1);
  CU_ASSERT(strcmp(n1, n2) != 0);
  CU_ASSERT((!strcmp(n1, a) && !strcmp(n2, b)) || (!strcmp(n1, b) && !strcmp(n2, a)));
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, n1, sizeof(n1), NULL, 0), 0);

  /* A second watcher (another rank) started now ignores all of them. */
  wd_trigger_watch w2;
  wd_trigger_watch_init(&w2, dir, "late", 300);
  CU_ASSERT_EQUAL(wd_trigger_poll(&w2, n1, sizeof(n1), NULL, 0), 0);
  /* A missing directory is not an error. */
  pathf(pre, sizeof(pre), "%s/none", g_tmp);
  wd_trigger_watch w3;
  wd_trigger_watch_init(&w3, pre, "x", 1);
  CU_ASSERT_EQUAL(wd_trigger_poll(&w3, n1, sizeof(n1), NULL, 0), 0);
}

/* When the directory mtime did not move and is old, poll does not read the directory. */
static void test_trigger_cheap_poll(void) {
  char dir[PATH_MAX + 16], name[256];
  pathf(dir, sizeof(dir), "%s/trig2", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0700), 0);
  wd_trigger_watch w;
  wd_trigger_watch_init(&w, dir, "me", 1);
  /* Place a trigger, then set the directory mtime back to what the watch stored: a poll that
   * only stats sees no change and must not find it. */
  char path[PATH_MAX * 2];
  pathf(path, sizeof(path), "%s/trigger-x-9-1.trigger", dir);
  FILE *f = fopen(path, "w");
  fclose(f);
  struct timespec ts[2] = {{100000, 0}, {100000, 0}};
  CU_ASSERT_EQUAL(utimensat(AT_FDCWD, dir, ts, 0), 0);
  w.mtime_sec = 100000;
  w.mtime_nsec = 0;
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, name, sizeof(name), NULL, 0), 0);
  /* Once the directory changes, it is found. */
  struct timespec ts2[2] = {{200000, 0}, {200000, 0}};
  CU_ASSERT_EQUAL(utimensat(AT_FDCWD, dir, ts2, 0), 0);
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, name, sizeof(name), NULL, 0), 1);
  CU_ASSERT_STRING_EQUAL(name, "trigger-x-9-1.trigger");
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, name, sizeof(name), NULL, 0), 0);
  CU_ASSERT_EQUAL(w.mtime_sec, 200000);
}

/* Triggers of an earlier incarnation of the job (more of them than the watch remembers by name)
 * are never answered; a new one still is. */
static void test_trigger_history(void) {
  char dir[PATH_MAX + 16], name[256], path[PATH_MAX * 2];
  pathf(dir, sizeof(dir), "%s/trig3", g_tmp);
  CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0700), 0);
  struct timespec old[2] = {{1000000, 0}, {1000000, 0}};
  for (int i = 0; i < WD_TRIGGER_SEEN + 64; i++) {
    pathf(path, sizeof(path), "%s/trigger-old-%d-1.trigger", dir, 1000 + i);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
    CU_ASSERT_EQUAL(utimensat(AT_FDCWD, path, old, 0), 0);
  }
  wd_trigger_watch w;
  wd_trigger_watch_init(&w, dir, "me", 7);
  int answered = 0;
  for (int i = 0; i < WD_TRIGGER_SEEN + 64; i++)
    answered += wd_trigger_poll(&w, name, sizeof(name), NULL, 0);
  CU_ASSERT_EQUAL(answered, 0);
  char posted[256];
  CU_ASSERT_EQUAL(wd_trigger_post(dir, "peer", 8, "{}", posted, sizeof(posted)), 0);
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, name, sizeof(name), NULL, 0), 1);
  CU_ASSERT_STRING_EQUAL(name, posted);
  CU_ASSERT_EQUAL(wd_trigger_poll(&w, name, sizeof(name), NULL, 0), 0);
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
  CU_add_test(s, "trigger history is never answered", test_trigger_history);
  CU_add_test(s, "trigger files", test_triggers);
  CU_add_test(s, "trigger poll only stats an unchanged directory", test_trigger_cheap_poll);
  CU_add_test(s, "host name", test_hostname);
  return wd_test_run();
}
