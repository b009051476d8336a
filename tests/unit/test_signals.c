/*
 * The snapshot signal handler. Each test changes signal dispositions and sends signals, so each
 * runs in a forked child with a bounded wait.
 */
#include "watchdog/signals.h"

#include <CUnit/Basic.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wd_test_util.h"

#define CHECK(cond) WD_CHILD_CHECK(cond)

/* Reads the wake fd without blocking: the uint64 written (eventfd sums them), or 0 when empty. */
static uint64_t read_wake(int fd) {
  uint64_t v = 0, sum = 0;
  while (read(fd, &v, sizeof(v)) == (ssize_t)sizeof(v)) sum += v;
  return sum;
}

static int wait_readable(int fd, int ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, ms) == 1;
}

static atomic_int g_app_plain;
static atomic_int g_app_info;
static atomic_int g_app_info_pid;
static void app_plain(int sig) {
  if (sig == SIGUSR1) atomic_fetch_add(&g_app_plain, 1);
}
static void app_info(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  if (sig == SIGUSR1 && si) {
    atomic_fetch_add(&g_app_info, 1);
    atomic_store(&g_app_info_pid, (int)si->si_pid);
  }
}

static void set_plain(int sig, void (*h)(int)) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = h;
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(sig, &sa, NULL) == 0);
}

static void set_info(int sig) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = app_info;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(sig, &sa, NULL) == 0);
}

static void child_prev_plain(void) {
  set_plain(SIGUSR1, app_plain);
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  CHECK(efd >= 0);
  CHECK(wd_snapsig_install(SIGUSR1, efd) == 0);
  int sender = -1;
  CHECK(wd_snapsig_take(&sender) == 0);
  CHECK(kill(getpid(), SIGUSR1) == 0); /* delivered to us before kill returns */
  CHECK(atomic_load(&g_app_plain) == 1);
  CHECK(wd_snapsig_take(&sender) == 1);
  CHECK(sender == getpid());
  CHECK(read_wake(efd) == 1);
  /* Several signals count; the eventfd sums the wakes. */
  for (int i = 0; i < 3; i++) CHECK(kill(getpid(), SIGUSR1) == 0);
  CHECK(atomic_load(&g_app_plain) == 4);
  CHECK(read_wake(efd) == 3);
  CHECK(wd_snapsig_take(NULL) == 3);
  CHECK(wd_snapsig_take(NULL) == 0);
  /* errno of the interrupted code survives the handler. */
  errno = 1234;
  raise(SIGUSR1);
  CHECK(errno == 1234);
  CHECK(wd_snapsig_take(NULL) == 1);
  CHECK(read_wake(efd) == 1);

  wd_snapsig_restore();
  struct sigaction cur;
  CHECK(sigaction(SIGUSR1, NULL, &cur) == 0);
  CHECK(!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == app_plain);
  wd_snapsig_restore(); /* idempotent */
  CHECK(sigaction(SIGUSR1, NULL, &cur) == 0 && cur.sa_handler == app_plain);
  /* Restored: signals no longer reach us. */
  CHECK(kill(getpid(), SIGUSR1) == 0);
  CHECK(atomic_load(&g_app_plain) == 6);
  CHECK(wd_snapsig_take(NULL) == 0);
  CHECK(read_wake(efd) == 0);
  close(efd);
}

static void child_prev_siginfo(void) {
  set_info(SIGUSR1);
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  CHECK(wd_snapsig_install(SIGUSR1, efd) == 0);
  /* From another process: the sender is that process, and the app's handler sees its siginfo. */
  pid_t helper = fork();
  if (helper == 0) _exit(kill(getppid(), SIGUSR1) == 0 ? 0 : 1);
  int st = -1;
  CHECK(waitpid(helper, &st, 0) == helper && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK(wait_readable(efd, 5000));
  CHECK(read_wake(efd) == 1);
  int sender = 0;
  CHECK(wd_snapsig_take(&sender) == 1);
  CHECK(sender == helper);
  CHECK(atomic_load(&g_app_info) == 1);
  CHECK(atomic_load(&g_app_info_pid) == helper);
  wd_snapsig_restore();
  struct sigaction cur;
  CHECK(sigaction(SIGUSR1, NULL, &cur) == 0);
  CHECK((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == app_info);
  close(efd);
}

/* SIG_DFL before us: SIGUSR1 would terminate the process; with us installed it must not. */
static void child_prev_default(void) {
  signal(SIGUSR1, SIG_DFL);
  int p[2];
  CHECK(pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
  CHECK(wd_snapsig_install(SIGUSR1, p[1]) == 0);
  CHECK(kill(getpid(), SIGUSR1) == 0);
  CHECK(kill(getpid(), SIGUSR1) == 0);
  CHECK(wd_snapsig_take(NULL) == 2);
  /* A pipe gets one 8-byte uint64 1 per signal. */
  uint64_t v[3] = {0, 0, 0};
  CHECK(read(p[0], v, sizeof(v)) == 16);
  CHECK(v[0] == 1 && v[1] == 1);
  /* A full pipe: the handler neither blocks nor fails the signal. */
  int filled = 0;
  uint64_t one = 1;
  while (write(p[1], &one, sizeof(one)) == (ssize_t)sizeof(one)) filled++;
  CHECK(filled > 0 && errno == EAGAIN);
  CHECK(kill(getpid(), SIGUSR1) == 0);
  CHECK(wd_snapsig_take(NULL) == 1);
  wd_snapsig_restore();
  struct sigaction cur;
  CHECK(sigaction(SIGUSR1, NULL, &cur) == 0 && cur.sa_handler == SIG_DFL);
  close(p[0]);
  close(p[1]);
}

static void child_prev_ignore(void) {
  signal(SIGUSR1, SIG_IGN);
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  CHECK(wd_snapsig_install(SIGUSR1, efd) == 0);
  CHECK(kill(getpid(), SIGUSR1) == 0);
  CHECK(wd_snapsig_take(NULL) == 1);
  CHECK(read_wake(efd) == 1);
  wd_snapsig_restore();
  struct sigaction cur;
  CHECK(sigaction(SIGUSR1, NULL, &cur) == 0 && cur.sa_handler == SIG_IGN);
  close(efd);
}

/* Someone installs their own handler over ours: restore leaves theirs, and a later install
 * chains to theirs. */
static void child_replaced(void) {
  signal(SIGUSR1, SIG_DFL);
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  CHECK(wd_snapsig_install(SIGUSR1, efd) == 0);
  set_plain(SIGUSR1, app_plain);
  wd_snapsig_restore();
  struct sigaction cur;
  CHECK(sigaction(SIGUSR1, NULL, &cur) == 0 && cur.sa_handler == app_plain);
  CHECK(kill(getpid(), SIGUSR1) == 0);
  CHECK(atomic_load(&g_app_plain) == 1);
  CHECK(wd_snapsig_take(NULL) == 0);
  CHECK(read_wake(efd) == 0);

  CHECK(wd_snapsig_install(SIGUSR1, efd) == 0);
  CHECK(wd_snapsig_install(SIGUSR1, efd) == 0); /* again: still chains once, to app_plain */
  CHECK(kill(getpid(), SIGUSR1) == 0);
  CHECK(atomic_load(&g_app_plain) == 2);
  CHECK(wd_snapsig_take(NULL) == 1);
  CHECK(read_wake(efd) == 1);
  wd_snapsig_restore();
  CHECK(sigaction(SIGUSR1, NULL, &cur) == 0 && cur.sa_handler == app_plain);
  CHECK(wd_snapsig_install(SIGUSR1, -1) == -1);
  CHECK(wd_snapsig_install(0, efd) == -1);
  close(efd);
}

/* After fork the child inherits the handler but not the watchdog: its signals must not wake
 * the parent through the inherited fd, and the application's handler still runs there. */
static void child_fork(void) {
  set_plain(SIGUSR1, app_plain);
  int p[2];
  CHECK(pipe2(p, O_NONBLOCK) == 0);
  CHECK(wd_snapsig_install(SIGUSR1, p[1]) == 0);
  pid_t c = fork();
  if (c == 0) {
    int before = atomic_load(&g_app_plain);
    kill(getpid(), SIGUSR1);
    int ok = atomic_load(&g_app_plain) == before + 1 && wd_snapsig_take(NULL) == 0;
    _exit(ok ? 0 : 1);
  }
  int st = -1;
  CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);
  uint64_t v;
  CHECK(read(p[0], &v, sizeof(v)) == -1 && errno == EAGAIN);
  CHECK(wd_snapsig_take(NULL) == 0);
  /* The parent still works. */
  CHECK(kill(getpid(), SIGUSR1) == 0);
  CHECK(read(p[0], &v, sizeof(v)) == (ssize_t)sizeof(v) && v == 1);
  CHECK(wd_snapsig_take(NULL) == 1);
  wd_snapsig_restore();
  close(p[0]);
  close(p[1]);
}

static void test_prev_plain(void) { CU_ASSERT_EQUAL(wd_test_isolated(child_prev_plain, 30), 0); }
static void test_prev_siginfo(void) { CU_ASSERT_EQUAL(wd_test_isolated(child_prev_siginfo, 30), 0); }
static void test_prev_default(void) { CU_ASSERT_EQUAL(wd_test_isolated(child_prev_default, 30), 0); }
static void test_prev_ignore(void) { CU_ASSERT_EQUAL(wd_test_isolated(child_prev_ignore, 30), 0); }
static void test_replaced(void) { CU_ASSERT_EQUAL(wd_test_isolated(child_replaced, 30), 0); }
static void test_fork(void) { CU_ASSERT_EQUAL(wd_test_isolated(child_fork, 30), 0); }

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("snapshot signal", NULL, NULL);
  if (!s) return 1;
  CU_add_test(s, "previous plain handler, eventfd, counts, errno, restore", test_prev_plain);
  CU_add_test(s, "previous SA_SIGINFO handler, sender pid from another process", test_prev_siginfo);
  CU_add_test(s, "previous SIG_DFL: process survives, pipe wake, full pipe", test_prev_default);
  CU_add_test(s, "previous SIG_IGN", test_prev_ignore);
  CU_add_test(s, "our handler replaced by someone else", test_replaced);
  CU_add_test(s, "forked child does not wake the parent", test_fork);
  return wd_test_run();
}
