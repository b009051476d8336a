/* The root cause across communicators (job.h). */
#include "job.h"

#include <stdio.h>
#include <string.h>

/* The hung communicator in which the process of dump index d is itself waiting, and its rank
 * there; NULL when it waits nowhere. */
static const wd_az_comm *waiting_in(const wd_az_result *res, uint32_t d, const wd_az_crank **who) {
  for (size_t i = 0; i < res->ncomms; i++) {
    const wd_az_comm *c = &res->comms[i];
    if (c->verdict != WD_AZ_HANG) continue;
    for (int k = 0; k < c->nwaiting; k++) {
      int r = c->waiting[k];
      const wd_az_crank *cr = r >= 0 && r < c->nranks ? c->by_rank[r] : NULL;
      if (cr && cr->dump == d) {
        *who = cr;
        return c;
      }
    }
  }
  return NULL;
}

static const wd_az_comm *waiting_in(const wd_az_result *res, uint32_t d, const wd_az_crank **who);

/* The culprit to follow: one that is itself waiting in another hung communicator explains the
 * others (it leads on to the root), else the first culprit. */
static const wd_az_suspect *next_culprit(const wd_az_result *res, const wd_az_comm *c) {
  const wd_az_suspect *first = NULL;
  for (int i = 0; i < c->nsus; i++) {
    const wd_az_suspect *s = &c->sus[i];
    if (!s->culprit) continue;
    if (!first) first = s;
    const wd_az_crank *who;
    const wd_az_comm *other = s->cr ? waiting_in(res, s->cr->dump, &who) : NULL;
    if (other && other != c) return s;
  }
  return first ? first : c->nsus ? &c->sus[0] : NULL;
}

static void who_text(const wd_az_result *res, const wd_az_comm *c, const wd_az_suspect *s,
                     char *out, size_t len) {
  if (!s->cr) {
    snprintf(out, len, "rank %d of %s (no dump)", s->rank, wd_az_s(c->name) ? wd_az_s(c->name) : "?");
    return;
  }
  const wd_az_dump *d = wd_az_dump_of(res->set, s->cr);
  char g[32] = "";
  if (d->global_rank >= 0) snprintf(g, sizeof g, "global rank %d, ", d->global_rank);
  snprintf(out, len, "rank %d of %s (%shost %s, pid %d)", s->rank,
           wd_az_s(c->name) && *wd_az_s(c->name) ? wd_az_s(c->name) : "?", g, wd_az_s(d->host), d->pid);
}

void wd_az_job_verdict(const wd_az_result *res, wd_az_job *job) {
  memset(job, 0, sizeof(*job));
  /* Start where most ranks wait: the symptom on-call sees first (dp waiting on pp, say). */
  const wd_az_comm *c = NULL;
  for (size_t i = 0; i < res->ncomms; i++)
    if (res->comms[i].verdict == WD_AZ_HANG && next_culprit(res, &res->comms[i]) &&
        (!c || res->comms[i].nwaiting > c->nwaiting))
      c = &res->comms[i];
  if (!c) return;
  job->found = 1;
  uint32_t seen[WD_AZ_CHAIN];
  int nseen = 0;
  const wd_az_crank *who = NULL;
  while (c && job->nlinks < WD_AZ_CHAIN) {
    const wd_az_suspect *s = next_culprit(res, c);
    if (!s) break;
    job->links[job->nlinks++] = (wd_az_link){c, who, s};
    job->root = s;
    if (!s->cr) break; /* no dump: it cannot tell us where it waits */
    for (int i = 0; i < nseen; i++)
      if (seen[i] == s->cr->dump) {
        job->deadlock = 1;
        job->root = NULL;
        break;
      }
    if (job->deadlock) break;
    seen[nseen++] = s->cr->dump;
    who = NULL;
    c = waiting_in(res, s->cr->dump, &who);
  }
  /* "JOB: root ...; chain: ranks W wait in A -> rank x waits in B -> rank y: reason" */
  char *p = job->line;
  size_t left = sizeof(job->line);
  int n;
#define PUT(...)                                                                                  \
  do {                                                                                          \
    n = snprintf(p, left, __VA_ARGS__);                                                         \
    if (n < 0 || (size_t)n >= left) return;                                                     \
    p += n;                                                                                     \
    left -= (size_t)n;                                                                          \
  } while (0)
  char w[256];
  if (job->deadlock) {
    int ncomm = 0;
    for (int i = 0; i < job->nlinks; i++) {
      int dup = 0;
      for (int k = 0; k < i; k++) dup |= job->links[k].comm == job->links[i].comm;
      ncomm += !dup;
    }
    PUT("JOB: deadlock across %d communicators (ranks entered them in different orders):", ncomm);
  } else {
    const wd_az_link *last = &job->links[job->nlinks - 1];
    who_text(res, last->comm, last->on, w, sizeof w);
    PUT("JOB: root cause %s: %s %s", w, wd_az_reason_name(last->on->reason), last->on->detail);
    if (job->nlinks < 2) return;
    PUT("; chain:");
  }
  for (int i = 0; i < job->nlinks; i++) {
    const wd_az_link *l = &job->links[i];
    const char *cn = wd_az_s(l->comm->name) && *wd_az_s(l->comm->name) ? wd_az_s(l->comm->name) : "?";
    if (i == 0)
      PUT(" %d rank(s) wait in %s %s seq %lld", l->comm->nwaiting, cn, wd_az_s(l->comm->stuck_func) ? wd_az_s(l->comm->stuck_func) : "?",
          (long long)l->comm->stuck_seq);
    else
      PUT(" -> waits in %s %s seq %lld", cn, wd_az_s(l->comm->stuck_func) ? wd_az_s(l->comm->stuck_func) : "?",
          (long long)l->comm->stuck_seq);
    who_text(res, l->comm, l->on, w, sizeof w);
    PUT(" on %s", w);
  }
  if (job->deadlock) PUT(", which is already on this chain");
#undef PUT
}
