/* Signal actions the plugin owns, checked where they are relied on (sigown.h). */
#include "base/sigown.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

int wd_sig_is_ours(int signo, wd_sig_fn fn) {
  struct sigaction cur;
  if (sigaction(signo, NULL, &cur) != 0) return -1;
  return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == fn;
}

void wd_sig_prev_set(wd_sig_prev *p, const struct sigaction *sa) {
  int next = (atomic_load(&p->cur) & 1) ^ 1;
  p->a[next] = *sa;
  atomic_store(&p->cur, next);
}

void wd_sig_prev_chain(wd_sig_prev *p, wd_sig_fn fn, int sig, siginfo_t *si, void *uc) {
  const struct sigaction *old = wd_sig_prev_get(p);
  if (old->sa_flags & SA_SIGINFO) {
    if (old->sa_sigaction && old->sa_sigaction != fn) old->sa_sigaction(sig, si, uc);
  } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN && old->sa_handler != NULL) {
    old->sa_handler(sig);
  }
}

static int wd_sig_put(int signo, wd_sig_fn fn, int flags, wd_sig_prev *prev, const struct sigaction *cur) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = fn;
  sa.sa_flags = flags | SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  /* What we chain to is set before ours goes in: a signal arriving the moment sigaction returns
   * chains to what was there. */
  struct sigaction keep = *wd_sig_prev_get(prev);
  if (!((cur->sa_flags & SA_SIGINFO) && cur->sa_sigaction == fn)) wd_sig_prev_set(prev, cur);
  if (sigaction(signo, &sa, NULL) != 0) {
    wd_sig_prev_set(prev, &keep);
    return -1;
  }
  return 0;
}

int wd_sig_install(int signo, wd_sig_fn fn, int flags, wd_sig_prev *prev) {
  struct sigaction cur;
  if (signo <= 0 || signo >= NSIG || sigaction(signo, NULL, &cur) != 0) return -1;
  return wd_sig_put(signo, fn, flags, prev, &cur);
}

int wd_sig_reclaim(int signo, wd_sig_fn fn, int flags, wd_sig_prev *prev, struct sigaction *found) {
  struct sigaction cur;
  if (sigaction(signo, NULL, &cur) != 0) return -1;
  if (found) *found = cur;
  if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == fn) return 0;
  return wd_sig_put(signo, fn, flags, prev, &cur) == 0 ? 1 : -1;
}

void wd_sig_restore(int signo, wd_sig_fn fn, wd_sig_prev *prev) {
  if (wd_sig_is_ours(signo, fn) == 1) sigaction(signo, wd_sig_prev_get(prev), NULL);
}

void wd_sig_describe(const struct sigaction *sa, char *out, unsigned len) {
  if (!(sa->sa_flags & SA_SIGINFO) && sa->sa_handler == SIG_DFL) snprintf(out, len, "SIG_DFL");
  else if (!(sa->sa_flags & SA_SIGINFO) && sa->sa_handler == SIG_IGN) snprintf(out, len, "SIG_IGN");
  else {
    void *p = (sa->sa_flags & SA_SIGINFO) ? (void *)(uintptr_t)sa->sa_sigaction : (void *)(uintptr_t)sa->sa_handler;
    snprintf(out, len, "a handler at %p", p);
  }
}
