/*
 * The snapshot signal. The handler only counts, remembers the sender and wakes the watchdog
 * thread through its fd (the libuv self-pipe idea); the dump itself happens on that thread.
 * It then chains to whatever handler the application had, but never to SIG_DFL: SIGUSR1's
 * default action would kill the job the user only wanted to look at.
 */
#include "watchdog/signals.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int snapsig_signo;
static int snapsig_installed;
static struct sigaction snapsig_old;
static pid_t snapsig_pid;
/* Cleared by restore: a handler that still runs afterwards (someone chained to us, or a
 * signal already in flight) must not write to a wake fd that may be closed or reused. */
static atomic_int snapsig_active;
static atomic_int snapsig_wake_fd = -1;
static atomic_int snapsig_pending;
static atomic_int snapsig_sender;
/* Handlers anywhere in our code, chaining included: restore waits (bounded) for them to leave
 * so the plugin can be unloaded after it. */
static atomic_int snapsig_entered;

static void wd_snapsig_handler(int sig, siginfo_t *si, void *uc) {
  int saved_errno = errno;
  atomic_fetch_add(&snapsig_entered, 1);
  /* In a forked child the parent's watchdog thread does not exist: only chain. */
  if (atomic_load(&snapsig_active) && getpid() == snapsig_pid) {
    atomic_fetch_add(&snapsig_pending, 1);
    atomic_store(&snapsig_sender, si ? (int)si->si_pid : 0);
    int fd = atomic_load(&snapsig_wake_fd);
    if (fd >= 0) {
      uint64_t one = 1;
      ssize_t w;
      do {
        w = write(fd, &one, sizeof(one));
      } while (w < 0 && errno == EINTR);
      /* EAGAIN: the fd is already readable, the watchdog will wake anyway. */
    }
  }
  if (snapsig_old.sa_flags & SA_SIGINFO) {
    if (snapsig_old.sa_sigaction && snapsig_old.sa_sigaction != wd_snapsig_handler)
      snapsig_old.sa_sigaction(sig, si, uc);
  } else if (snapsig_old.sa_handler != SIG_DFL && snapsig_old.sa_handler != SIG_IGN &&
             snapsig_old.sa_handler != NULL) {
    snapsig_old.sa_handler(sig);
  }
  errno = saved_errno;
  atomic_fetch_sub(&snapsig_entered, 1);
}

static int wd_snapsig_put(int signo, int wake_fd) {
  if (signo <= 0 || signo >= NSIG) return -1;
  if (snapsig_installed) wd_snapsig_restore();
  struct sigaction sa, old;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = wd_snapsig_handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  /* Set the state first: the signal may arrive the moment sigaction returns. snapsig_old is only
   * read by our handler, which is not installed yet (or no longer active after restore). */
  if (sigaction(signo, NULL, &old) != 0) return -1;
  if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction == wd_snapsig_handler) {
    /* Ours is still there from an earlier install whose restore found it replaced and back:
     * keep the previous action we saved then, so we never chain to ourselves. */
    old = snapsig_old;
  }
  snapsig_old = old;
  snapsig_signo = signo;
  snapsig_pid = getpid();
  atomic_store(&snapsig_wake_fd, wake_fd);
  atomic_store(&snapsig_active, 1);
  if (sigaction(signo, &sa, NULL) != 0) {
    atomic_store(&snapsig_active, 0);
    atomic_store(&snapsig_wake_fd, -1);
    return -1;
  }
  snapsig_installed = 1;
  return 0;
}

int wd_snapsig_install(int signo, int wake_fd) {
  return wake_fd < 0 ? -1 : wd_snapsig_put(signo, wake_fd);
}

int wd_snapsig_install_inert(int signo) { return wd_snapsig_put(signo, -1); }

void wd_snapsig_restore(void) {
  if (!snapsig_installed) return;
  struct sigaction cur;
  if (sigaction(snapsig_signo, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
      cur.sa_sigaction == wd_snapsig_handler)
    sigaction(snapsig_signo, &snapsig_old, NULL);
  atomic_store(&snapsig_active, 0);
  atomic_store(&snapsig_wake_fd, -1);
  snapsig_installed = 0;
  for (int i = 0; i < 100 && atomic_load(&snapsig_entered) > 0; i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

int wd_snapsig_take(int *sender_pid) {
  int n = atomic_exchange(&snapsig_pending, 0);
  if (sender_pid) *sender_pid = atomic_load(&snapsig_sender);
  return n;
}
