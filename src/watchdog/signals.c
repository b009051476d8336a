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

static int g_signo;
static int g_installed;
static struct sigaction g_old;
static pid_t g_pid;
/* Cleared by restore: a handler that still runs afterwards (someone chained to us, or a
 * signal already in flight) must not write to a wake fd that may be closed or reused. */
static atomic_int g_active;
static atomic_int g_wake_fd = -1;
static atomic_int g_pending;
static atomic_int g_sender;
/* Handlers anywhere in our code, chaining included: restore waits (bounded) for them to leave
 * so the plugin can be unloaded after it. */
static atomic_int g_entered;

static void wd_snapsig_handler(int sig, siginfo_t *si, void *uc) {
  int saved_errno = errno;
  atomic_fetch_add(&g_entered, 1);
  /* In a forked child the parent's watchdog thread does not exist: only chain. */
  if (atomic_load(&g_active) && getpid() == g_pid) {
    atomic_fetch_add(&g_pending, 1);
    atomic_store(&g_sender, si ? (int)si->si_pid : 0);
    int fd = atomic_load(&g_wake_fd);
    if (fd >= 0) {
      uint64_t one = 1;
      ssize_t w;
      do {
        w = write(fd, &one, sizeof(one));
      } while (w < 0 && errno == EINTR);
      /* EAGAIN: the fd is already readable, the watchdog will wake anyway. */
    }
  }
  if (g_old.sa_flags & SA_SIGINFO) {
    if (g_old.sa_sigaction && g_old.sa_sigaction != wd_snapsig_handler)
      g_old.sa_sigaction(sig, si, uc);
  } else if (g_old.sa_handler != SIG_DFL && g_old.sa_handler != SIG_IGN &&
             g_old.sa_handler != NULL) {
    g_old.sa_handler(sig);
  }
  errno = saved_errno;
  atomic_fetch_sub(&g_entered, 1);
}

int wd_snapsig_install(int signo, int wake_fd) {
  if (signo <= 0 || signo >= NSIG || wake_fd < 0) return -1;
  if (g_installed) wd_snapsig_restore();
  struct sigaction sa, old;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = wd_snapsig_handler;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  /* Set the state first: the signal may arrive the moment sigaction returns. g_old is only
   * read by our handler, which is not installed yet (or no longer active after restore). */
  if (sigaction(signo, NULL, &old) != 0) return -1;
  if ((old.sa_flags & SA_SIGINFO) && old.sa_sigaction == wd_snapsig_handler) {
    /* Ours is still there from an earlier install whose restore found it replaced and back:
     * keep the previous action we saved then, so we never chain to ourselves. */
    old = g_old;
  }
  g_old = old;
  g_signo = signo;
  g_pid = getpid();
  atomic_store(&g_wake_fd, wake_fd);
  atomic_store(&g_active, 1);
  if (sigaction(signo, &sa, NULL) != 0) {
    atomic_store(&g_active, 0);
    atomic_store(&g_wake_fd, -1);
    return -1;
  }
  g_installed = 1;
  return 0;
}

void wd_snapsig_restore(void) {
  if (!g_installed) return;
  struct sigaction cur;
  if (sigaction(g_signo, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
      cur.sa_sigaction == wd_snapsig_handler)
    sigaction(g_signo, &g_old, NULL);
  atomic_store(&g_active, 0);
  atomic_store(&g_wake_fd, -1);
  g_installed = 0;
  for (int i = 0; i < 100 && atomic_load(&g_entered) > 0; i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

int wd_snapsig_take(int *sender_pid) {
  int n = atomic_exchange(&g_pending, 0);
  if (sender_pid) *sender_pid = atomic_load(&g_sender);
  return n;
}
