/*
 * Helpers shared by the unit tests. Each test is one executable built from one .c file, so they
 * are static inline here rather than a library.
 */
#ifndef WD_TEST_UTIL_H
#define WD_TEST_UTIL_H

#include <CUnit/Basic.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Forks; the child runs fn(arg) and _exits with its result (fn may call exit() itself, so that
 * LeakSanitizer checks the child). Waits at most timeout_s seconds, then kills the child.
 * Returns the child's exit code, 128 + the signal that ended it, or -1 when fork failed or the
 * child timed out (said on stderr). */
static inline int wd_test_in_child(int (*fn)(void *), void *arg, int timeout_s) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) _exit(fn(arg));
  for (int i = 0; i < timeout_s * 100; i++) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) {
      if (WIFEXITED(st)) return WEXITSTATUS(st);
      fprintf(stderr, "child killed by signal %d\n", WTERMSIG(st));
      return 128 + WTERMSIG(st);
    }
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "child timed out after %d s\n", timeout_s);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  return -1;
}

/* Checks in a forked child (wd_test_isolated): a failed one is printed and counted, and the
 * child's exit status carries the count, since CUnit's state does not survive the child. */
static int wd_child_fails __attribute__((unused));
#define WD_CHILD_CHECK(cond)                                                                     \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                   \
      wd_child_fails++;                                                                          \
    }                                                                                            \
  } while (0)

struct wd_test_isolated_fn {
  void (*fn)(void);
};

static inline int wd_test_isolated_main(void *arg) {
  wd_child_fails = 0;
  ((struct wd_test_isolated_fn *)arg)->fn();
  fflush(stderr);
  exit(wd_child_fails ? 1 : 0); /* exit, not _exit: LeakSanitizer checks the child */
}

/* Runs fn in a forked child with a bounded wait (wd_test_in_child). Returns 0 when it finished
 * with no failed WD_CHILD_CHECK. For tests that install signal handlers or start threads. */
static inline int wd_test_isolated(void (*fn)(void), int timeout_s) {
  struct wd_test_isolated_fn w = {fn};
  return wd_test_in_child(wd_test_isolated_main, &w, timeout_s);
}

/* A fresh directory "$TMPDIR/wd-test-TAG-XXXXXX" (TMPDIR defaults to /tmp) in buf. Returns 0, or
 * -1 when it cannot be made. */
static inline int wd_test_mkdtemp(char *buf, size_t len, const char *tag) {
  const char *base = getenv("TMPDIR");
  int n = snprintf(buf, len, "%s/wd-test-%s-XXXXXX", base && *base ? base : "/tmp", tag);
  if (n < 0 || (size_t)n >= len) return -1;
  return mkdtemp(buf) ? 0 : -1;
}

static inline int wd_test_rm_entry(const char *path, const struct stat *sb, int flag,
                                   struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(path);
}

/* Removes dir and everything below it (links are removed, never followed). */
static inline void wd_test_rmtree(const char *dir) {
  nftw(dir, wd_test_rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* Environment for tests that drive the real plugin: dumps go to dump_dir, the watchdog never acts
 * during the run (timeout an hour, poll a minute), no peer dumps, and nothing from the caller's
 * environment switches the plugin off or changes its mask. */
static inline void wd_test_quiet_env(const char *dump_dir) {
  setenv("NCCL_WATCHDOG_DUMP_DIR", dump_dir, 1);
  setenv("NCCL_WATCHDOG_TIMEOUT", "3600", 1);
  setenv("NCCL_WATCHDOG_POLL", "60", 1);
  setenv("NCCL_WATCHDOG_PEER_DUMPS", "0", 1);
  unsetenv("NCCL_WATCHDOG_ENABLE");
  unsetenv("NCCL_WATCHDOG_EVENT_MASK");
  unsetenv("NCCL_WATCHDOG_CONFIG");
}

/* The end of every unit test's main: run the registered suites verbosely, clean up, and return
 * the exit status (1 when any assertion or test failed, so ctest sees it). */
static inline int wd_test_run(void) {
  CU_basic_set_mode(CU_BRM_VERBOSE);
  CU_basic_run_tests();
  unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
  CU_cleanup_registry();
  return failed ? 1 : 0;
}

#endif /* WD_TEST_UTIL_H */
