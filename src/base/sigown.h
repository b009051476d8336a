/*
 * Signal actions the plugin installed and must notice losing. Frameworks save "the original
 * handlers" through CPython's signal.getsignal, which reports the action CPython saw at start
 * (SIG_DFL for a handler a C library installed later), and put them back at the end of every
 * fit (PyTorch Lightning's _SignalConnector); a requeue handler is installed over ours. Each
 * owner checks its action where it relies on it and takes it back, chaining to what is there now.
 */
#ifndef WD_SIGOWN_H
#define WD_SIGOWN_H

#include <signal.h>
#include <stdatomic.h>

typedef void (*wd_sig_fn)(int, siginfo_t *, void *);

/* The action a handler chains to. It is replaced while signals may be in flight (a late stack
 * signal, a SIGUSR1 that races the take-back): two copies, the writer fills the one not in use
 * and flips, so a handler always reads a whole action. */
typedef struct wd_sig_prev {
  struct sigaction a[2];
  atomic_int cur;
} wd_sig_prev;
void wd_sig_prev_set(wd_sig_prev *p, const struct sigaction *sa);
/* Async-signal-safe. */
static inline const struct sigaction *wd_sig_prev_get(wd_sig_prev *p) {
  return &p->a[atomic_load(&p->cur) & 1];
}
/* Runs the action in p for a signal our handler took (never SIG_DFL or SIG_IGN, nor fn itself).
 * Async-signal-safe. */
void wd_sig_prev_chain(wd_sig_prev *p, wd_sig_fn fn, int sig, siginfo_t *si, void *uc);

/* 1 when signo's action is fn (SA_SIGINFO), 0 when it is something else, -1 when unreadable. */
int wd_sig_is_ours(int signo, wd_sig_fn fn);

/* Installs fn for signo (flags | SA_SIGINFO, empty mask); the action found there becomes what fn
 * chains to (unless it is fn itself: an earlier install's, kept). 0, or -1 (nothing changed). */
int wd_sig_install(int signo, wd_sig_fn fn, int flags, wd_sig_prev *prev);
/* Takes signo back for fn when its action is no longer fn: the action found there becomes what
 * fn chains to. Returns 0 when it was still ours, 1 when taken back, -1 when it could not be read
 * or set (the action is left as found). *found (may be NULL) gets the action that was there. */
int wd_sig_reclaim(int signo, wd_sig_fn fn, int flags, wd_sig_prev *prev, struct sigaction *found);
/* Puts back what fn chains to, if fn is still signo's action (someone who replaced us keeps
 * theirs). */
void wd_sig_restore(int signo, wd_sig_fn fn, wd_sig_prev *prev);

/* A few words for an action: "SIG_DFL", "SIG_IGN" or "a handler at 0x...". */
void wd_sig_describe(const struct sigaction *sa, char *out, unsigned len);

#endif
