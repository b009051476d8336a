/* Signals that end the process (fatal.h). */
#include "watchdog/fatal.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <sys/eventfd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/sigown.h"
#include "flightrec/ringfile.h"
#include "stacks/backtrace.h"
#include "stacks/python.h"

static const int wd_fatal_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTERM};
static const char *const wd_fatal_names[] = {"SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT", "SIGTERM"};
#define WD_NFATAL (int)(sizeof(wd_fatal_signals) / sizeof(wd_fatal_signals[0]))

static wd_sig_prev fatal_old[WD_NFATAL];
/* Install, restore, the chain of SIGTERM and the watchdog's check take it in turn: the check
 * must never take a signal back after restore gave it up. Never taken by the handler. */
static pthread_mutex_t fatal_mu = PTHREAD_MUTEX_INITIALIZER;
static int fatal_installed[WD_NFATAL];
static pid_t fatal_pid;
static atomic_int fatal_wake_fd = -1;
static atomic_int fatal_recorded; /* the first fatal signal is recorded, later ones only chained */
static atomic_int term_pending;
/* SIGABRT (PyTorch's watchdog, std::terminate): 0 none, 1 a dump is asked, 2 it is over. */
static atomic_int abrt_state;
static int abrt_on;
static int abrt_done_fd = -1; /* readable once the watchdog thread is through with the dump */
static atomic_int watchdog_tid;
/* Said by the handler itself when the dump did not come in time: where the ring files are. */
static char abrt_msg[WD_FATAL_MSG];
static size_t abrt_msg_len;
static void *alt_stack;
static size_t alt_size;

static int wd_fatal_index(int sig) {
  for (int i = 0; i < WD_NFATAL; i++)
    if (wd_fatal_signals[i] == sig) return i;
  return -1;
}

static uint64_t wd_fatal_clock(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts); /* async-signal-safe (POSIX) */
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The previous action back, as if we had never been there. */
static void wd_fatal_put_back(int i) {
  sigaction(wd_fatal_signals[i], wd_sig_prev_get(&fatal_old[i]), NULL);
}

/* The aborting thread waits for the watchdog thread's dump, at most WD_FATAL_ABRT_WAIT_MS: a
 * SIGABRT raised with the allocator's lock held (a corrupt heap) must not become a hung process,
 * so past the bound the signal goes on as it would have. poll() is async-signal-safe. */
static void wd_fatal_abrt_wait(void) {
  int wake = atomic_load(&fatal_wake_fd);
  if (!abrt_on || wake < 0 || abrt_done_fd < 0 || getpid() != fatal_pid) return;
  /* The watchdog thread itself (NCCL_WATCHDOG_ACTION=abort, or a failure in a dump) cannot wait
   * on its own dump. */
  if ((int)syscall(SYS_gettid) == atomic_load(&watchdog_tid)) return;
  int expected = 0;
  if (atomic_compare_exchange_strong(&abrt_state, &expected, 1)) {
    uint64_t one = 1;
    ssize_t w;
    do {
      w = write(wake, &one, sizeof(one));
    } while (w < 0 && errno == EINTR);
  }
  /* A second SIGABRT (another thread) waits for the same dump, within the same bound. */
  uint64_t end = wd_fatal_clock(CLOCK_MONOTONIC) + (uint64_t)WD_FATAL_ABRT_WAIT_MS * 1000000ull;
  while (atomic_load(&abrt_state) == 1) {
    uint64_t now = wd_fatal_clock(CLOCK_MONOTONIC);
    if (now >= end) break;
    struct pollfd pfd = {.fd = abrt_done_fd, .events = POLLIN};
    if (poll(&pfd, 1, (int)((end - now + 999999) / 1000000)) > 0 && (pfd.revents & POLLNVAL)) break;
  }
  if (atomic_load(&abrt_state) != 2 && abrt_msg_len) {
    ssize_t w = write(STDERR_FILENO, abrt_msg, abrt_msg_len);
    (void)w;
  }
}

static void wd_fatal_handler(int sig, siginfo_t *si, void *uc) {
  int saved_errno = errno;
  int i = wd_fatal_index(sig);
  if (i < 0) return;
  /* A fault inside the Python traceback dumper (our watchdog thread): that dump goes without
   * Python stacks, the process lives on. Does not return when it applies. */
  if ((sig == SIGSEGV || sig == SIGBUS) && si && si->si_code > 0) wd_py_guard_jump();
  if (sig == SIGTERM) {
    /* A second SIGTERM, a forked child, or no watchdog to dump: straight to the previous
     * disposition. */
    int fd = atomic_load(&fatal_wake_fd);
    if (atomic_exchange(&term_pending, 1) || getpid() != fatal_pid || fd < 0) {
      wd_fatal_put_back(i);
      raise(sig);
      errno = saved_errno;
      return;
    }
    uint64_t one = 1;
    ssize_t w;
    do {
      w = write(fd, &one, sizeof(one));
    } while (w < 0 && errno == EINTR);
    errno = saved_errno;
    return;
  }
  if (getpid() == fatal_pid && !atomic_exchange(&fatal_recorded, 1)) {
    wd_rf_fatal f;
    memset(&f, 0, sizeof f);
    f.signo = sig;
    f.code = si ? si->si_code : 0;
    f.addr = si ? (uint64_t)(uintptr_t)si->si_addr : 0;
    f.tid = (int32_t)syscall(SYS_gettid);
    f.wall_ns = wd_fatal_clock(CLOCK_REALTIME);
    f.mono_ns = wd_fatal_clock(CLOCK_MONOTONIC);
    f.nframes = wd_bt_unwind_signal(f.frames, WD_RF_FATAL_FRAMES, uc);
    wd_ringfile_note_fatal(&f);
  }
  if (sig == SIGABRT) wd_fatal_abrt_wait();
  /* The application's handler, or the default action (a core dump), as if we were not here: a
   * fault re-executes its instruction and meets the previous action; a signal that was sent
   * (abort(), kill) is raised again for it. */
  wd_fatal_put_back(i);
  if (!si || si->si_code <= 0 || sig == SIGABRT) raise(sig);
  errno = saved_errno;
}

int wd_fatal_install(int term_dump, int wake_fd, const char *ring_dir) {
  fatal_pid = getpid();
  atomic_store(&fatal_wake_fd, wake_fd);
  atomic_store(&fatal_recorded, 0);
  atomic_store(&term_pending, 0);
  atomic_store(&abrt_state, 0);
  abrt_on = 0;
  if (term_dump && abrt_done_fd < 0) abrt_done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  abrt_on = term_dump && abrt_done_fd >= 0;
  int n = snprintf(abrt_msg, sizeof abrt_msg,
                   "nccl-watchdog: SIGABRT: no teardown dump within %d ms; %s%s\n",
                   WD_FATAL_ABRT_WAIT_MS,
                   ring_dir && *ring_dir ? "this process's ring files are in " : "no ring files (NCCL_WATCHDOG_RING_DIR off)",
                   ring_dir && *ring_dir ? ring_dir : "");
  abrt_msg_len = n > 0 ? ((size_t)n < sizeof abrt_msg ? (size_t)n : sizeof abrt_msg - 1) : 0;
  int rc = 0;
  pthread_mutex_lock(&fatal_mu);
  for (int i = 0; i < WD_NFATAL; i++) {
    if (fatal_installed[i]) continue;
    if (wd_fatal_signals[i] == SIGTERM && !term_dump) continue;
    struct sigaction old;
    if (sigaction(wd_fatal_signals[i], NULL, &old) != 0) {
      rc = -1;
      continue;
    }
    /* An application that ignores the signal (SIGTERM) keeps ignoring it. */
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue;
    /* SA_ONSTACK: on a thread with an alternate stack (ours), a stack overflow still gets here. */
    if (wd_sig_install(wd_fatal_signals[i], wd_fatal_handler, SA_ONSTACK | SA_RESTART, &fatal_old[i]) != 0) {
      rc = -1;
      continue;
    }
    fatal_installed[i] = 1;
  }
  pthread_mutex_unlock(&fatal_mu);
  return rc;
}

int wd_fatal_check(char *what, size_t len) {
  int n = 0;
  size_t at = 0;
  if (what && len) what[0] = '\0';
  pthread_mutex_lock(&fatal_mu);
  for (int i = 0; getpid() == fatal_pid && i < WD_NFATAL; i++) {
    if (!fatal_installed[i]) continue;
    struct sigaction cur;
    if (sigaction(wd_fatal_signals[i], NULL, &cur) != 0) continue;
    /* Ignored since (the application's choice for SIGTERM): left so. */
    if (!(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_IGN) continue;
    struct sigaction found;
    int r = wd_sig_reclaim(wd_fatal_signals[i], wd_fatal_handler, SA_ONSTACK | SA_RESTART, &fatal_old[i], &found);
    if (r == 0) continue;
    n++;
    if (what && at < len) {
      char d[48];
      wd_sig_describe(&found, d, sizeof d);
      int w = snprintf(what + at, len - at, "%s%s (%s%s)", at ? ", " : "", wd_fatal_names[i], d,
                       r < 0 ? ", not taken back" : "");
      if (w > 0) at += (size_t)w;
    }
  }
  pthread_mutex_unlock(&fatal_mu);
  return n;
}

void wd_fatal_restore(void) {
  atomic_store(&fatal_wake_fd, -1);
  abrt_on = 0;
  pthread_mutex_lock(&fatal_mu);
  for (int i = 0; i < WD_NFATAL; i++) {
    if (!fatal_installed[i]) continue;
    wd_sig_restore(wd_fatal_signals[i], wd_fatal_handler, &fatal_old[i]);
    fatal_installed[i] = 0;
  }
  pthread_mutex_unlock(&fatal_mu);
}

int wd_fatal_term_pending(void) { return atomic_load(&term_pending); }

int wd_fatal_abrt_pending(void) { return atomic_load(&abrt_state) == 1; }

void wd_fatal_abrt_done(void) {
  atomic_store(&abrt_state, 2);
  uint64_t one = 1;
  if (abrt_done_fd >= 0 && write(abrt_done_fd, &one, sizeof(one)) < 0) { /* the flag is enough */
  }
}

void wd_fatal_close(void) {
  if (abrt_done_fd >= 0) close(abrt_done_fd);
  abrt_done_fd = -1;
}

void wd_fatal_term_chain(void) {
  int i = wd_fatal_index(SIGTERM);
  pthread_mutex_lock(&fatal_mu);
  if (i >= 0 && fatal_installed[i]) {
    wd_fatal_put_back(i);
    fatal_installed[i] = 0;
  }
  pthread_mutex_unlock(&fatal_mu);
  /* To the process: whichever thread has it unblocked takes the previous action. */
  kill(getpid(), SIGTERM);
}

/* An alternate signal stack for the calling thread (the watchdog's): a stack overflow there
 * still reaches the handler. */
static void wd_fatal_altstack(void) {
  stack_t cur;
  if (sigaltstack(NULL, &cur) == 0 && !(cur.ss_flags & SS_DISABLE)) return; /* has one */
  size_t size = (size_t)64 * 1024;
  void *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return;
  stack_t ss = {.ss_sp = mem, .ss_size = size, .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0) {
    munmap(mem, size);
    return;
  }
  alt_stack = mem;
  alt_size = size;
}

void wd_fatal_thread_init(void) {
  /* The thread starts with every signal blocked (process-directed ones belong to the
   * application's threads). A fault this thread causes is its own, though: with SIGSEGV blocked
   * the kernel would kill the process without running any handler, so neither the Python
   * dumper's guard nor the crash record could act. */
  sigset_t faults;
  sigemptyset(&faults);
  sigaddset(&faults, SIGSEGV);
  sigaddset(&faults, SIGBUS);
  sigaddset(&faults, SIGILL);
  sigaddset(&faults, SIGFPE);
  pthread_sigmask(SIG_UNBLOCK, &faults, NULL);
  atomic_store(&watchdog_tid, (int)syscall(SYS_gettid));
  wd_fatal_altstack();
}

void wd_fatal_altstack_free(void) {
  if (!alt_stack) return;
  stack_t ss = {.ss_flags = SS_DISABLE};
  sigaltstack(&ss, NULL);
  munmap(alt_stack, alt_size);
  alt_stack = NULL;
}
