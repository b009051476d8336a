/*
 * The snapshot signal. The handler only counts, remembers the sender and wakes the watchdog
 * thread through its fd (the libuv self-pipe idea); the dump itself happens on that thread.
 * It then chains to whatever handler the application had, but never to SIG_DFL: SIGUSR1's
 * default action would kill the job the user only wanted to look at.
 */
#include "watchdog/signals.h"

#include "base/sigown.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Install, restore and the watchdog's check take it in turn: the check must never take the
 * signal back after restore gave it up (the plugin may be unloaded right after). Never taken by
 * the handler. */
static pthread_mutex_t snapsig_mu = PTHREAD_MUTEX_INITIALIZER;
static int snapsig_signo;
static int snapsig_installed;
static wd_sig_prev snapsig_old;
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
  wd_sig_prev_chain(&snapsig_old, wd_snapsig_handler, sig, si, uc);
  errno = saved_errno;
  atomic_fetch_sub(&snapsig_entered, 1);
}

static void wd_snapsig_restore_locked(void);

static int wd_snapsig_put_locked(int signo, int wake_fd) {
  if (signo <= 0 || signo >= NSIG) return -1;
  if (snapsig_installed) wd_snapsig_restore_locked();
  /* Set the state first: the signal may arrive the moment sigaction returns. */
  snapsig_signo = signo;
  snapsig_pid = getpid();
  atomic_store(&snapsig_wake_fd, wake_fd);
  atomic_store(&snapsig_active, 1);
  if (wd_sig_install(signo, wd_snapsig_handler, SA_RESTART, &snapsig_old) != 0) {
    atomic_store(&snapsig_active, 0);
    atomic_store(&snapsig_wake_fd, -1);
    return -1;
  }
  snapsig_installed = 1;
  return 0;
}

static int wd_snapsig_put(int signo, int wake_fd) {
  pthread_mutex_lock(&snapsig_mu);
  int rc = wd_snapsig_put_locked(signo, wake_fd);
  pthread_mutex_unlock(&snapsig_mu);
  return rc;
}

int wd_snapsig_install(int signo, int wake_fd) {
  return wake_fd < 0 ? -1 : wd_snapsig_put(signo, wake_fd);
}

int wd_snapsig_install_inert(int signo) { return wd_snapsig_put(signo, -1); }

static void wd_snapsig_restore_locked(void) {
  if (!snapsig_installed) return;
  wd_sig_restore(snapsig_signo, wd_snapsig_handler, &snapsig_old);
  atomic_store(&snapsig_active, 0);
  atomic_store(&snapsig_wake_fd, -1);
  snapsig_installed = 0;
  for (int i = 0; i < 100 && atomic_load(&snapsig_entered) > 0; i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

void wd_snapsig_restore(void) {
  pthread_mutex_lock(&snapsig_mu);
  wd_snapsig_restore_locked();
  pthread_mutex_unlock(&snapsig_mu);
}

int wd_snapsig_take(int *sender_pid) {
  int n = atomic_exchange(&snapsig_pending, 0);
  if (sender_pid) *sender_pid = atomic_load(&snapsig_sender);
  return n;
}

int wd_snapsig_check(char *found, size_t len) {
  pthread_mutex_lock(&snapsig_mu);
  int rc = 0;
  if (snapsig_installed && getpid() == snapsig_pid) {
    struct sigaction was;
    rc = wd_sig_reclaim(snapsig_signo, wd_snapsig_handler, SA_RESTART, &snapsig_old, &was);
    if (rc != 0 && found && len) wd_sig_describe(&was, found, (unsigned)len);
  }
  pthread_mutex_unlock(&snapsig_mu);
  return rc;
}

int wd_snapsig_signo(void) {
  pthread_mutex_lock(&snapsig_mu);
  int s = snapsig_installed ? snapsig_signo : 0;
  pthread_mutex_unlock(&snapsig_mu);
  return s;
}
