/* Which dumps belong together (incarnation.h): the incarnation, the episode and the clocks. */
#include "incarnation.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/host.h"
#include "flightrec/ringfile.h"
#include "load.h"
#include "ringfile.h"

static const wd_az_set *g_sort_set; /* qsort has no context argument */
static wd_az_str g_postmortem;

static int cmp_key(const void *a, const void *b) {
  const wd_az_crank *x = &g_sort_set->cranks[*(const size_t *)a];
  const wd_az_crank *y = &g_sort_set->cranks[*(const size_t *)b];
  const wd_az_dump *dx = &g_sort_set->dumps[x->dump], *dy = &g_sort_set->dumps[y->dump];
  if (x->comm_id != y->comm_id) return x->comm_id < y->comm_id ? -1 : 1;
  if (x->rank != y->rank) return x->rank - y->rank;
  if (dx->host != dy->host) return dx->host < dy->host ? -1 : 1;
  if (dx->pid != dy->pid) return dx->pid - dy->pid;
  if (dx->boot_id != dy->boot_id) return dx->boot_id < dy->boot_id ? -1 : 1;
  if (dx->proc_start_ns != dy->proc_start_ns) return dx->proc_start_ns < dy->proc_start_ns ? -1 : 1;
  /* A dump the process wrote itself says more (open trees, stacks) than its ring file. */
  int px = dx->reason == g_postmortem, py = dy->reason == g_postmortem;
  if (px != py) return px - py;
  if (dx->wall_ns != dy->wall_ns) return dx->wall_ns > dy->wall_ns ? -1 : 1;
  return x->dump < y->dump ? 1 : -1; /* later file wins a tie */
}

static int same_key(const wd_az_set *s, const wd_az_crank *x, const wd_az_crank *y) {
  const wd_az_dump *a = &s->dumps[x->dump], *b = &s->dumps[y->dump];
  /* Two nodes with one host name whose processes have one pid (containers, cloned images) are
   * two processes: their boot ids or start times differ. */
  return x->comm_id == y->comm_id && x->rank == y->rank && a->host == b->host && a->pid == b->pid &&
         a->boot_id == b->boot_id && a->proc_start_ns == b->proc_start_ns;
}

static int g_attempt = -1; /* --attempt: the attempt to judge, -1 the latest */
void wd_az_set_attempt(int attempt) { g_attempt = attempt; }


/* A verdict is about one stall episode: by default the latest of the judged attempt, whose
 * stall and peer dumps are judged with the snapshots and teardown dumps (each process's newest);
 * stall and peer dumps of earlier episodes (ones that resumed, or a process that did not answer
 * the latest) are set aside. --episode=K (the automatic verdict's): episode K's stall and peer
 * dumps and what processes left as they ended (postmortem, teardown: an episode posted on
 * SIGABRT is answered by those), never a snapshot or an earlier episode's dump, which would show
 * a moment before the hang; none of these, no verdict. */
static void select_episode(wd_az_set *set) {
  int want = wd_az_episode_wanted();
  set->episode = want;
  if (want < 0) { /* the latest episode, when dumps of several are here */
    int latest = -1, several = 0;
    for (size_t i = 0; i < set->ndumps; i++) {
      const wd_az_dump *d = &set->dumps[i];
      if (d->aside || d->job_episode < 0) continue;
      several |= latest >= 0 && d->job_episode != latest;
      if (d->job_episode > latest) latest = d->job_episode;
    }
    set->episode = latest;
    if (!several) return;
    want = latest;
  }
  size_t aside = wd_az_episode_wanted() >= 0 ? set->snapshots_unread : 0;
  for (size_t i = 0; i < set->ndumps; i++) {
    wd_az_dump *d = &set->dumps[i];
    int other = wd_az_episode_wanted() >= 0 ? d->job_episode != want && !(d->job_episode < 0 && wd_az_reason_is_final(wd_az_s(d->reason)))
                               : d->job_episode >= 0 && d->job_episode != want;
    if (!d->aside && other) d->aside = 1, aside++;
  }
  for (size_t i = 0; i < set->ncranks; i++)
    if (set->dumps[set->cranks[i].dump].aside) set->cranks[i].aside = 1;
  size_t n = strlen(set->attempt_note);
  snprintf(set->attempt_note + n, sizeof set->attempt_note - n, "%sepisode %d; set aside %zu dump%s of %s",
           n ? "; " : "", want, aside, aside == 1 ? "" : "s",
           wd_az_episode_wanted() >= 0 ? "other episodes and snapshots" : "earlier episodes");
}

static int64_t attempt_of(const wd_az_dump *d) {
  /* Slurm's requeue restarts everything, torchrun's agent restarts within a Slurm attempt. */
  return d->slurm_restart < -1 ? -1 : (int64_t)(d->slurm_restart + 1) * 1000000 + (d->te_restart + 1);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static size_t uf_find(size_t *parent, size_t x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

/* When a file was written on the one clock every host shares, the file system's (its mtime);
 * the dump's own wall clock when the file system gave none. */
static uint64_t written_ns(const wd_az_dump *d) { return d->mtime_ns ? d->mtime_ns : d->wall_ns; }

/* A dump the analyzer made later from a ring file (a salvage): its file time is the salvage's,
 * not its process's; a ring file read whole keeps its last refresh. */
static int salvaged(const wd_az_dump *d) {
  size_t n = d->path ? strlen(d->path) : 0;
  return d->reason == wd_az_intern("postmortem") && !(n >= 5 && !strcmp(d->path + n - 5, ".ring"));
}

/* A dump made of ring files (a post-mortem, a running process's live state): one file per
 * communicator, so it lists one of the process's communicators, not all. */
static int from_ring(const wd_az_dump *d) {
  return d->reason == wd_az_intern("postmortem") || d->reason == wd_az_intern("live");
}

typedef struct incarnation {
  uint64_t first_ns, last_ns; /* its files' span on the file system's clock */
  size_t ndumps, first_dump;  /* first_dump: one of its dumps, for its labels */
  int has_span, has_episode;
  uint64_t comm;              /* one of its communicators, for the report */
  size_t ncomms;
} incarnation;

static incarnation *g_incs; /* qsort has no context argument */
/* Spans this close ran at once: a restart takes longer than this from the old processes' last
 * file to the new ones' first (the launcher's stop and rendezvous, NCCL's init, a timeout). */
#define CONCURRENT_NS 1000000000ull
static int cmp_inc(const void *a, const void *b) {
  const incarnation *x = &g_incs[*(const size_t *)a], *y = &g_incs[*(const size_t *)b];
  if (x->first_ns != y->first_ns) return x->first_ns < y->first_ns ? -1 : 1;
  return (x->last_ns > y->last_ns) - (x->last_ns < y->last_ns);
}

static int cmp_host_pid(const void *a, const void *b) {
  const wd_az_dump *x = &g_sort_set->dumps[*(const size_t *)a], *y = &g_sort_set->dumps[*(const size_t *)b];
  if (x->host != y->host) return x->host < y->host ? -1 : 1;
  return (x->pid > y->pid) - (x->pid < y->pid);
}

/* A communicator one process replaced while it lived (torchft's quorum, an in-process restart
 * whose new communicators overlap the old): a later dump the process wrote itself lists
 * communicators an earlier one did not, and no longer lists one that the earlier did. That one
 * was finalized or aborted: history, whatever its last dumps say. Its ranks are set aside. */
static size_t superseded(wd_az_set *set, const char *in_judged, uint64_t *gone, size_t cap) {
  size_t n = 0, nd = set->ndumps, *ix = malloc((nd ? nd : 1) * sizeof(*ix));
  if (!ix) return 0;
  for (size_t i = 0; i < nd; i++) ix[i] = i;
  g_sort_set = set;
  qsort(ix, nd, sizeof(*ix), cmp_host_pid); /* one pass per host and pid: no pair across */
  for (size_t a = 0, b; a < nd; a = b) {
    for (b = a + 1; b < nd && !cmp_host_pid(&ix[a], &ix[b]); b++) {
    }
    for (size_t x = a; x < b; x++) {
      const wd_az_dump *newest = &set->dumps[ix[x]];
      if (!in_judged[ix[x]] || from_ring(newest) || !newest->ncranks) continue;
      for (size_t y = a; y < b; y++) {
        const wd_az_dump *old = &set->dumps[ix[y]];
        if (y == x || !in_judged[ix[y]] || from_ring(old) || old->proc_start_ns != newest->proc_start_ns ||
            old->boot_id != newest->boot_id || old->wall_ns >= newest->wall_ns || !old->ncranks ||
            /* one process numbers its dumps: without a PID namespace to tell them apart, two
             * that both say they are its n-th are of two processes that look alike (cloned
             * nodes, one host name and pid). With it, the file's time orders them: the plugin
             * numbers again from 1 after NCCL unloaded and loaded it (an in-process restart). */
            ((!old->pid_ns || !newest->pid_ns) && old->dump_seq >= newest->dump_seq))
          continue;
        int added = 0;
        for (size_t p = 0; p < newest->ncranks && !added; p++) {
          int had = 0;
          for (size_t q = 0; q < old->ncranks && !had; q++)
            had = set->cranks[old->crank0 + q].comm_id == set->cranks[newest->crank0 + p].comm_id;
          added = !had;
        }
        if (!added) continue;
        for (size_t q = 0; q < old->ncranks; q++) {
          uint64_t id = set->cranks[old->crank0 + q].comm_id;
          int kept = 0;
          for (size_t p = 0; p < newest->ncranks && !kept; p++) kept = set->cranks[newest->crank0 + p].comm_id == id;
          for (size_t k = 0; k < n && !kept; k++) kept = gone[k] == id;
          if (!kept && n < cap) gone[n++] = id;
        }
      }
    }
  }
  free(ix);
  return n;
}

/* A verdict is about one incarnation of the job (restarts share the dump directory). The
 * communicators each dump lists were alive together in one process: joined, they give the
 * job's incarnations, each with the processes that used them. Incarnations whose files' times
 * overlap (within CONCURRENT_NS) on the file system's clock ran at once (processes with no communicator in common) and
 * are one; otherwise the later one replaced the earlier. The newest is judged (or
 * --incarnation's, or the one holding --episode's dumps); the rest are set aside and said so,
 * labelled with the launcher's counters where they gave any. A ring file marked finalized is
 * history. A dump with no communicator goes with its process's, else with the judged one. */
static void select_incarnation(wd_az_set *set) {
  set->attempt_note[0] = '\0';
  size_t nd = set->ndumps, nc = set->ncranks;
  if (!nd) return;
  uint64_t *ids = malloc((nc ? nc : 1) * sizeof(*ids));
  size_t *parent = malloc((nc ? nc : 1) * sizeof(*parent));
  long *comp_of = malloc(nd * sizeof(*comp_of));
  incarnation *inc = calloc(nd, sizeof(*inc));
  size_t *order = malloc(nd * sizeof(*order));
  long *group = malloc(nd * sizeof(*group));
  char *in_judged = calloc(nd, 1);
  uint64_t gone[64];
  if (!ids || !parent || !comp_of || !inc || !order || !group || !in_judged) goto out;
  size_t nids = 0;
  for (size_t i = 0; i < nc; i++) ids[nids++] = set->cranks[i].comm_id;
  qsort(ids, nids, sizeof(*ids), cmp_u64);
  size_t u = 0;
  for (size_t i = 0; i < nids; i++)
    if (!u || ids[u - 1] != ids[i]) ids[u++] = ids[i];
  nids = u;
  for (size_t i = 0; i < nids; i++) parent[i] = i;
#define ID_INDEX(id) ((size_t)((const uint64_t *)bsearch(&(id), ids, nids, sizeof(*ids), cmp_u64) - ids))
  for (size_t i = 0; i < nd; i++) {
    const wd_az_dump *d = &set->dumps[i];
    if (d->finalized || d->ncranks < 2) continue;
    size_t a = uf_find(parent, ID_INDEX(set->cranks[d->crank0].comm_id));
    for (size_t k = 1; k < d->ncranks; k++) {
      size_t b = uf_find(parent, ID_INDEX(set->cranks[d->crank0 + k].comm_id));
      if (a != b) parent[b] = a;
    }
  }
  /* Each dump's incarnation: its communicators' root. */
  size_t ninc = 0;
  long *root_inc = malloc((nids ? nids : 1) * sizeof(*root_inc));
  if (!root_inc) goto out;
  for (size_t i = 0; i < nids; i++) root_inc[i] = -1;
  for (size_t i = 0; i < nd; i++) {
    const wd_az_dump *d = &set->dumps[i];
    comp_of[i] = -1;
    if (!d->ncranks) continue;
    size_t r = uf_find(parent, ID_INDEX(set->cranks[d->crank0].comm_id));
    if (root_inc[r] < 0) {
      root_inc[r] = (long)ninc;
      inc[ninc].comm = ids[r];
      inc[ninc].first_dump = i;
      ninc++;
    }
    comp_of[i] = root_inc[r];
  }
  for (size_t i = 0; i < nids; i++)
    if (root_inc[uf_find(parent, i)] >= 0) inc[root_inc[uf_find(parent, i)]].ncomms++;
  free(root_inc);
#undef ID_INDEX
  /* Spans: files the processes wrote, ring files as last refreshed; a salvage's copy or a
   * finalized ring file only where nothing else dates its incarnation. */
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < nd; i++) {
      const wd_az_dump *d = &set->dumps[i];
      if (comp_of[i] < 0) continue;
      incarnation *c = &inc[comp_of[i]];
      int weak = salvaged(d) || d->finalized;
      if (pass == 0) c->ndumps++;
      if ((pass == 0 && weak) || (pass == 1 && (!weak || c->has_span))) continue;
      uint64_t t = written_ns(d);
      if (!c->has_span || t < c->first_ns) c->first_ns = t;
      if (!c->has_span || t > c->last_ns) c->last_ns = t;
      if (pass == 0) c->has_span = 1;
    }
  for (size_t i = 0; i < ninc; i++) order[i] = i;
  g_incs = inc;
  qsort(order, ninc, sizeof(*order), cmp_inc);
  /* Overlapping spans: one incarnation. But communicators a process replaced while it lived
   * (an in-process restart, a quorum change: superseded) are an incarnation of their own, the
   * one before, however close in time: --incarnation reaches them. */
  for (size_t i = 0; i < nd; i++) in_judged[i] = 1;
  size_t nhist = superseded(set, in_judged, gone, sizeof gone / sizeof gone[0]);
  size_t ngroups = 0;
  uint64_t end = 0;
  int prev_hist = 0;
  for (size_t k = 0; k < ninc; k++) {
    incarnation *c = &inc[order[k]];
    int hist = 0;
    for (size_t g = 0; g < nhist && !hist; g++) hist = gone[g] == c->comm;
    if (!ngroups || c->first_ns > end + CONCURRENT_NS || hist || prev_hist) ngroups++, end = c->last_ns;
    else if (c->last_ns > end) end = c->last_ns;
    group[order[k]] = (long)ngroups - 1;
    prev_hist = hist;
  }
  if (ngroups == 0) goto out;
  long pick = g_attempt >= 0 && (size_t)g_attempt < ngroups ? g_attempt : (long)ngroups - 1;
  int ep = wd_az_episode_wanted();
  if (ep >= 0 && g_attempt < 0) /* the incarnation that answered episode K */
    for (size_t i = 0; i < nd; i++)
      if (comp_of[i] >= 0 && set->dumps[i].job_episode == ep) pick = group[comp_of[i]];
  for (size_t i = 0; i < nd; i++) in_judged[i] = comp_of[i] >= 0 && group[comp_of[i]] == pick;
  /* A dump with no communicator: its process's incarnation, else the judged one when written in
   * its span or after. */
  uint64_t pick_first = 0;
  for (size_t i = 0; i < ninc; i++)
    if (group[i] == pick && (!pick_first || inc[i].first_ns < pick_first)) pick_first = inc[i].first_ns;
  for (size_t i = 0; i < nd; i++) {
    const wd_az_dump *d = &set->dumps[i];
    if (comp_of[i] >= 0) continue;
    long g = -1;
    for (size_t j = 0; j < nd && g < 0; j++) {
      const wd_az_dump *e = &set->dumps[j];
      if (comp_of[j] >= 0 && e->host == d->host && e->pid == d->pid && e->proc_start_ns == d->proc_start_ns)
        g = group[comp_of[j]];
    }
    in_judged[i] = g >= 0 ? g == pick : written_ns(d) >= pick_first;
  }
  size_t ngone = superseded(set, in_judged, gone, sizeof gone / sizeof gone[0]);
  size_t aside = 0, hist = 0;
  for (size_t i = 0; i < nd; i++) {
    wd_az_dump *d = &set->dumps[i];
    if (!in_judged[i] && !d->aside) d->aside = 1, aside++;
  }
  for (size_t i = 0; i < nc; i++) {
    wd_az_crank *cr = &set->cranks[i];
    if (set->dumps[cr->dump].aside) cr->aside = 1;
    for (size_t k = 0; k < ngone && !cr->aside; k++)
      if (cr->comm_id == gone[k]) cr->aside = 1, hist++;
  }
  if (ngroups < 2 && !ngone) goto out;
  /* Its labels: the launcher's counters, where its dumps state them. */
  char what[160] = "";
  size_t pos = 0;
  for (size_t i = 0; i < nd && pos < sizeof what; i++) {
    const wd_az_dump *d = &set->dumps[i];
    if (!in_judged[i] || attempt_of(d) < 0) continue;
    if (d->slurm_restart >= 0)
      pos += (size_t)snprintf(what + pos, sizeof what - pos, ", SLURM_RESTART_COUNT=%d", d->slurm_restart);
    if (d->te_restart >= 0 && pos < sizeof what)
      pos += (size_t)snprintf(what + pos, sizeof what - pos, ", TORCHELASTIC_RESTART_COUNT=%d", d->te_restart);
    break;
  }
  size_t ncomm = 0;
  uint64_t one = 0;
  for (size_t i = 0; i < ninc; i++)
    if (group[i] == pick) ncomm += inc[i].ncomms, one = one ? one : inc[i].comm;
  if (ngroups >= 2)
    pos = (size_t)snprintf(set->attempt_note, sizeof set->attempt_note,
                           "incarnation %ld of %zu (communicator 0x%llx%s%s); set aside %zu dump%s of %s",
                           pick, ngroups, (unsigned long long)one, ncomm > 1 ? " and others" : "", what, aside,
                           aside == 1 ? "" : "s", pick == (long)ngroups - 1 ? "earlier incarnations" : "other incarnations");
  else
    pos = 0;
  if (ngone && pos < sizeof set->attempt_note)
    snprintf(set->attempt_note + pos, sizeof set->attempt_note - pos,
             "%s%zu communicator%s its processes replaced (0x%llx%s) set aside: %zu rank%s", pos ? "; " : "", ngone,
             ngone == 1 ? "" : "s", (unsigned long long)gone[0], ngone > 1 ? ", ..." : "", hist, hist == 1 ? "" : "s");
out:
  free(ids);
  free(parent);
  free(comp_of);
  free(inc);
  free(order);
  free(group);
  free(in_judged);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

#define CLOCK_FIX_MIN_NS 1000000000ll    /* a smaller offset is within write delays: left alone */
#define CLOCK_SPREAD_MAX_NS 2000000000ll /* a host's files must agree with each other this well */
#define CLOCK_COPIED_NS 120000000000ll   /* files stamped this long after their dump: copied */

/* A machine: its host name and its boot (cloned nodes and containers share names; a dump without
 * a boot id, an older format's, goes with its host name alone). */
typedef struct host_clock {
  wd_az_str host, boot;
  int64_t med, spread; /* median and spread of wall_ns - mtime over its dumps */
  int fix;
} host_clock;

static int cmp_machine(const wd_az_dump *x, const wd_az_dump *y) {
  if (x->host != y->host) return (x->host > y->host) - (x->host < y->host);
  return (x->boot_id > y->boot_id) - (x->boot_id < y->boot_id);
}

static int cmp_host(const void *a, const void *b) {
  return cmp_machine(&g_sort_set->dumps[*(const size_t *)a], &g_sort_set->dumps[*(const size_t *)b]);
}

/* The machine of dump d among hc[0..nh) (sorted by host, then boot): its own, or, for a dump that
 * names no boot (a ring file), its host's when only one machine has that name. -1 if none. */
static long machine_of(const host_clock *hc, size_t nh, const wd_az_dump *d) {
  size_t lo = 0, hi = nh;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (hc[mid].host < d->host) lo = mid + 1;
    else hi = mid;
  }
  size_t k = lo;
  for (; k < nh && hc[k].host == d->host; k++)
    if (hc[k].boot == d->boot_id) return (long)k;
  if (!d->boot_id && k == lo + 1) return (long)lo;
  return -1;
}

/* No wall clock is compared across hosts without an offset: each host's clock is set against
 * the shared file system's, which stamped every dump file as it was written (its mtime). For a
 * host, wall_ns - mtime is its offset plus the write delay; the hosts' median is the common
 * part. A host further than CLOCK_FIX_MIN_NS from it, whose own files agree with each other, is
 * corrected by the difference (the report says by how much, and how sure). Files copied later
 * (mtime far from every dump's time) tell nothing: no correction. */
void wd_az_clock_offsets(wd_az_set *set) {
  set->clock_note[0] = '\0';
  wd_az_str pm = wd_az_intern("postmortem");
  size_t n = 0, *ix = malloc((set->ndumps ? set->ndumps : 1) * sizeof(*ix));
  int64_t *v = malloc((set->ndumps ? set->ndumps : 1) * sizeof(*v));
  host_clock *hc = malloc((set->ndumps ? set->ndumps : 1) * sizeof(*hc));
  if (!ix || !v || !hc) goto out;
  for (size_t i = 0; i < set->ndumps; i++)
    if (set->dumps[i].kept && set->dumps[i].reason != pm && set->dumps[i].mtime_ns) ix[n++] = i;
  /* One pass per host over the dumps sorted by host (a 100,000-rank job: 12,500 hosts). */
  g_sort_set = set;
  qsort(ix, n, sizeof(*ix), cmp_host);
  size_t nh = 0;
  for (size_t a = 0, b; a < n; a = b) {
    size_t k = 0;
    for (b = a; b < n && !cmp_machine(&set->dumps[ix[b]], &set->dumps[ix[a]]); b++)
      v[k++] = (int64_t)(set->dumps[ix[b]].wall_ns - set->dumps[ix[b]].mtime_ns);
    qsort(v, k, sizeof(*v), cmp_i64);
    hc[nh++] = (host_clock){set->dumps[ix[a]].host, set->dumps[ix[a]].boot_id, v[k / 2], v[k - 1] - v[0], 0};
  }
  if (nh < 2) goto out;
  /* One host name on several machines: said once, each machine's clock set apart. */
  size_t pos = 0;
  for (size_t h = 0, e; h < nh; h = e) {
    for (e = h + 1; e < nh && hc[e].host == hc[h].host; e++) {
    }
    if (e - h > 1 && pos < sizeof set->clock_note)
      pos += (size_t)snprintf(set->clock_note + pos, sizeof set->clock_note - pos,
                              "%shost name %s names %zu machines (their boot ids differ): told apart", pos ? "; " : "",
                              wd_az_s(hc[h].host), e - h);
  }
  for (size_t h = 0; h < nh; h++) v[h] = hc[h].med;
  qsort(v, nh, sizeof(*v), cmp_i64);
  int64_t common = v[nh / 2];
  if (nh == 2) common = llabs(v[0]) < llabs(v[1]) ? v[0] : v[1];
  if (llabs(common) > CLOCK_COPIED_NS) goto out;
  for (size_t h = 0; h < nh; h++) {
    int64_t dev = hc[h].med - common;
    if (llabs(dev) < CLOCK_FIX_MIN_NS || hc[h].spread > CLOCK_SPREAD_MAX_NS) continue;
    hc[h].fix = 1;
    int shared = (h > 0 && hc[h - 1].host == hc[h].host) || (h + 1 < nh && hc[h + 1].host == hc[h].host);
    char boot[48] = "";
    if (shared && hc[h].boot) snprintf(boot, sizeof boot, " (boot %.8s)", wd_az_s(hc[h].boot));
    if (pos < sizeof set->clock_note)
      pos += (size_t)snprintf(set->clock_note + pos, sizeof set->clock_note - pos,
                              "%shost %s%s's clock read %.1f s %s the others' (within %.1f s, from the file "
                              "system's times of its dumps): corrected",
                              pos ? "; " : "", wd_az_s(hc[h].host), boot, (double)llabs(dev) / 1e9,
                              dev > 0 ? "ahead of" : "behind", (double)hc[h].spread / 1e9 + 0.1);
  }
  /* Every dump of a corrected machine, its ring files included. */
  for (size_t i = 0; i < set->ndumps; i++) {
    long lo = machine_of(hc, nh, &set->dumps[i]);
    if (lo >= 0 && hc[lo].fix) {
      int64_t dev = hc[lo].med - common;
      set->dumps[i].clock_fix_ns = dev;
      set->dumps[i].wall_ns -= (uint64_t)dev;
    }
  }
out:
  free(ix);
  free(v);
  free(hc);
}


/* Whether two dumps of one host and pid can be of one process: no part of their identity
 * (machine boot, process start) that both state differs. */
static int same_process(const wd_az_dump *x, const wd_az_dump *y) {
  return (!x->proc_start_ns || !y->proc_start_ns || x->proc_start_ns == y->proc_start_ns) &&
         (!x->boot_id || !y->boot_id || x->boot_id == y->boot_id);
}

/* An older dump (and an older plugin's ring file) may say nothing of its machine or start: it
 * takes those of the process of its host and pid when there is exactly one, so it stays that
 * process's evidence. A ring file never states its attempt: it takes that of its own process's
 * dumps (the same start and boot), whichever else its host and pid once ran. */
static void adopt_identity(wd_az_set *set) {
  size_t n = set->ndumps, *ix = malloc((n ? n : 1) * sizeof(*ix));
  if (!ix) return;
  for (size_t i = 0; i < n; i++) ix[i] = i;
  g_sort_set = set;
  qsort(ix, n, sizeof(*ix), cmp_host_pid);
  for (size_t a = 0, b; a < n; a = b) {
    const wd_az_dump *first = NULL;
    int several = 0;
    for (b = a; b < n && !cmp_host_pid(&ix[a], &ix[b]); b++) {
      const wd_az_dump *d = &set->dumps[ix[b]];
      if (!d->proc_start_ns && !d->boot_id) continue;
      if (!first) first = d;
      else several |= !same_process(first, d);
      /* The fullest identity stands for the process. */
      if ((d->proc_start_ns && d->boot_id) && !(first->proc_start_ns && first->boot_id)) first = d;
    }
    for (size_t k = a; first && !several && k < b; k++) {
      wd_az_dump *d = &set->dumps[ix[k]];
      if (!d->proc_start_ns) d->proc_start_ns = first->proc_start_ns;
      if (!d->boot_id) d->boot_id = first->boot_id;
    }
    for (size_t k = a; k < b; k++) {
      wd_az_dump *d = &set->dumps[ix[k]];
      if (d->slurm_restart >= -1) continue;
      for (size_t j = a; j < b; j++) {
        const wd_az_dump *e = &set->dumps[ix[j]];
        if (e->slurm_restart < -1 || e->proc_start_ns != d->proc_start_ns || e->boot_id != d->boot_id) continue;
        d->slurm_restart = e->slurm_restart, d->te_restart = e->te_restart;
        break;
      }
    }
  }
  free(ix);
}

/* What a ring file's header says now: its live part's generation (0: it cannot be read as a ring
 * file), how often its watchdog rewrites that part (0: not recorded), whose it is, and whether
 * /proc here speaks of that process: the same machine boot and PID namespace, whatever host
 * name the file was given (NCCL_WATCHDOG_HOSTNAME names a container's node; an older file,
 * without boot and namespace, never: it is probed). A running process's watchdog rewrites it
 * every poll (NCCL_WATCHDOG_POLL, 1 s by default); a dead process's never changes. Read as the
 * dumps are: a regular file, no link. */
typedef struct ring_now {
  uint64_t gen, proc_start_ns;
  uint32_t poll_ms;
  int32_t pid;
  int here;
} ring_now;

/* 0 when h is not a ring file's header or its identity fails its check. */
static int ring_now_of(const wd_rf_header *h, const wd_process_id *here, ring_now *out) {
  memset(out, 0, sizeof *out);
  if (!wd_az_is_ringfile((const char *)h, sizeof *h) || h->ident_sum != wd_rf_ident_sum(h)) return 0;
  out->gen = h->live_gen;
  out->poll_ms = h->poll_ms;
  out->pid = h->pid;
  out->proc_start_ns = h->process_start_wall_ns;
  out->here = wd_rf_of_place(h, here->boot_id, here->pidns_ino);
  return 1;
}

static int ring_read_now(const char *path, const wd_process_id *here, ring_now *out) {
  memset(out, 0, sizeof *out);
  int fd = wd_az_open_nolink(AT_FDCWD, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return 0;
  wd_rf_header h;
  struct stat st;
  int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h;
  close(fd);
  return ok && ring_now_of(&h, here, out) && out->gen != 0;
}

int wd_az_ring_alive_here(const void *data, size_t len, char *state) {
  wd_rf_header h;
  ring_now r;
  wd_process_id here;
  *state = '?';
  if (len < sizeof h) return 0;
  memcpy(&h, data, sizeof h); /* the buffer need not be aligned */
  wd_process_identity(&here);
  return ring_now_of(&h, &here, &r) && r.here && wd_proc_alive_since(r.pid, r.proc_start_ns, state);
}

/* When a ring file's header is read again, in ms after the first reading: two polls at the
 * default and a slow one, in three re-reads (a job's directory may hold a ring file per
 * communicator of every process: no tight loop over a shared file system). A file whose
 * watchdog polls slower is read again every 2.5 s until one of its polls and a quarter more
 * have passed, never past LIVE_RING_MAX_MS (NCCL_WATCHDOG_POLL may be up to a minute: a
 * process polling slower than that is called dead only after the wait). */
static const int live_ring_reread_ms[] = {300, 1100, 2500};
#define LIVE_RING_STEP_MS 2500
#define LIVE_RING_MAX_MS 15000

/* How long file's probe lasts: three default polls' worth, or its own poll and a quarter. */
static int live_ring_deadline_ms(uint32_t poll_ms) {
  uint64_t ms = (uint64_t)poll_ms + poll_ms / 4 + 500;
  if (ms < 2500) ms = 2500;
  return ms > LIVE_RING_MAX_MS ? LIVE_RING_MAX_MS : (int)ms;
}

/* A ring file stands for a process that died (reason postmortem) only if that process is gone:
 * ring files kept among the dumps (NCCL_WATCHDOG_RING_DIR inside the dump directory) of
 * processes still running would call each rank that has not answered the episode yet dead.
 * Those become "live" evidence instead: the process's state at its watchdog's last poll, used
 * only where the process left no other dump in the judged cut (live_rings_keep). A file of this
 * machine is settled by /proc (its process alive, maybe stopped: its watchdog cannot rewrite
 * anything); the others by their headers, re-read until each has been seen rewritten or its
 * watchdog's poll has passed (one wait for all, only when there are such files). A file that
 * records a fatal signal is dead already. Returns how many are live; *stopped: how many of
 * them are stopped processes of this machine. */
static size_t find_live_rings(wd_az_set *set, size_t *stopped) {
  wd_az_str pm = wd_az_intern("postmortem"), live_reason = wd_az_intern("live");
  uint64_t *gen = calloc(set->ndumps ? set->ndumps : 1, sizeof(*gen));
  int *deadline = calloc(set->ndumps ? set->ndumps : 1, sizeof(*deadline));
  *stopped = 0;
  if (!gen || !deadline) {
    free(gen);
    free(deadline);
    return 0;
  }
  wd_process_id here;
  wd_process_identity(&here);
  size_t probing = 0, live = 0;
  int last = 0;
  for (size_t i = 0; i < set->ndumps; i++) {
    wd_az_dump *d = &set->dumps[i];
    size_t n = d->path ? strlen(d->path) : 0;
    if (d->aside || d->reason != pm || d->fatal_signal > 0 || n < 5 || strcmp(d->path + n - 5, ".ring") != 0) continue;
    ring_now r;
    if (!ring_read_now(d->path, &here, &r)) continue;
    char state = '?';
    if (r.here && wd_proc_alive_since(r.pid, r.proc_start_ns, &state)) {
      d->reason = live_reason;
      live++;
      if (state == 'T' || state == 't') ++*stopped;
      continue;
    }
    if (r.here && wd_proc_gone(r.pid, r.proc_start_ns)) continue; /* /proc here says it ended */
    gen[i] = r.gen;
    deadline[i] = live_ring_deadline_ms(r.poll_ms);
    if (deadline[i] > last) last = deadline[i];
    probing++;
  }
  int waited = 0;
  for (size_t r = 0; probing && waited < last; r++) {
    int at = r < sizeof live_ring_reread_ms / sizeof live_ring_reread_ms[0]
                 ? live_ring_reread_ms[r]
                 : waited + LIVE_RING_STEP_MS;
    if (at > last) at = last;
    int ms = at - waited;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    waited = at;
    for (size_t i = 0; i < set->ndumps; i++) {
      if (!gen[i]) continue;
      ring_now now;
      int read = ring_read_now(set->dumps[i].path, &here, &now);
      if (read && now.gen != gen[i]) {
        set->dumps[i].reason = live_reason;
        live++;
      } else if (read && waited < deadline[i]) {
        continue;
      }
      gen[i] = 0; /* rewritten, past its poll, or gone */
      probing--;
    }
  }
  free(gen);
  free(deadline);
  return live;
}

/* A live ring file stands in for its process only where that process has nothing else in the
 * judged cut (it has not answered the episode: no peer dumps, a spent budget): its own dumps
 * say more (stacks, the moment of the episode). One pass over the dumps sorted by host and pid.
 * Returns how many were set aside. */
static size_t live_rings_keep(wd_az_set *set) {
  wd_az_str live = wd_az_intern("live");
  size_t n = set->ndumps, aside = 0, *ix = malloc((n ? n : 1) * sizeof(*ix));
  if (!ix) return 0;
  for (size_t i = 0; i < n; i++) ix[i] = i;
  g_sort_set = set;
  qsort(ix, n, sizeof(*ix), cmp_host_pid);
  for (size_t a = 0, b; a < n; a = b) {
    for (b = a; b < n && !cmp_host_pid(&ix[a], &ix[b]); b++) {
    }
    for (size_t k = a; k < b; k++) {
      wd_az_dump *d = &set->dumps[ix[k]];
      if (d->aside || d->reason != live) continue;
      for (size_t j = a; j < b && !d->aside; j++) {
        const wd_az_dump *e = &set->dumps[ix[j]];
        if (!e->aside && e->reason != live && e->proc_start_ns == d->proc_start_ns) d->aside = 1, aside++;
      }
    }
  }
  free(ix);
  for (size_t i = 0; aside && i < set->ncranks; i++)
    if (set->dumps[set->cranks[i].dump].aside) set->cranks[i].aside = 1;
  return aside;
}

static int cmp_grank(const void *a, const void *b) {
  int x = g_sort_set->dumps[*(const size_t *)a].global_rank, y = g_sort_set->dumps[*(const size_t *)b].global_rank;
  return (x > y) - (x < y);
}

/* The judged incarnation's processes that give one RANK between them (torchft runs a torchrun
 * per replica group: RANK 0 in each; two jobs' launchers told apart by nothing else): their RANK
 * names no rank of the job, and the global rank is taken from their world communicator instead
 * (wd_az_global_rank). A process's several dumps are one process. */
static void shared_ranks(wd_az_set *set) {
  size_t n = 0, *ix = malloc((set->ndumps ? set->ndumps : 1) * sizeof(*ix));
  if (!ix) return;
  for (size_t i = 0; i < set->ndumps; i++) {
    set->dumps[i].rank_shared = 0;
    if (set->dumps[i].kept && !set->dumps[i].aside && set->dumps[i].global_rank >= 0) ix[n++] = i;
  }
  g_sort_set = set;
  qsort(ix, n, sizeof(*ix), cmp_grank);
  for (size_t a = 0, b; a < n; a = b) {
    int several = 0;
    const wd_az_dump *x = &set->dumps[ix[a]];
    for (b = a + 1; b < n && set->dumps[ix[b]].global_rank == x->global_rank; b++) {
      const wd_az_dump *y = &set->dumps[ix[b]];
      several |= x->host != y->host || x->pid != y->pid || !same_process(x, y);
    }
    for (size_t k = a; several && k < b; k++) set->dumps[ix[k]].rank_shared = 1;
  }
  free(ix);
}

void wd_az_select(wd_az_set *set, int all_dumps) {
  adopt_identity(set);
  size_t *idx = malloc((set->ncranks ? set->ncranks : 1) * sizeof(*idx));
  for (size_t i = 0; i < set->ndumps; i++) set->dumps[i].kept = all_dumps;
  if (!idx) return;
  set->episode = -1;
  set->resumed_note[0] = '\0';
  size_t stopped = 0, live = all_dumps ? 0 : find_live_rings(set, &stopped);
  if (!all_dumps) select_incarnation(set), select_episode(set);
  /* Copies a node made of its silent processes' ring files (the salvage's, for this episode). */
  size_t copies = 0, copies_stopped = 0;
  for (size_t i = 0; !all_dumps && i < set->ndumps; i++) {
    const wd_az_dump *d = &set->dumps[i];
    if (d->aside || !d->live_state) continue;
    copies++;
    copies_stopped += d->live_state == 'T' || d->live_state == 't';
  }
  size_t aside = live || copies ? live_rings_keep(set) : 0, n = strlen(set->attempt_note);
  if (live) {
    snprintf(set->attempt_note + n, sizeof set->attempt_note - n,
             "%s%zu ring file%s of running processes (rewritten while read, or alive on this machine: "
             "not post-mortems)",
             n ? "; " : "", live, live == 1 ? "" : "s");
    n = strlen(set->attempt_note);
    if (stopped)
      snprintf(set->attempt_note + n, sizeof set->attempt_note - n,
               ", %zu of them stopped (state T: SIGSTOP or a debugger), their watchdogs frozen too", stopped);
    n = strlen(set->attempt_note);
  }
  if (copies) {
    snprintf(set->attempt_note + n, sizeof set->attempt_note - n,
             "%sthe ring files of %zu running process%s whose watchdog did not answer, copied by %s node",
             n ? "; " : "", copies, copies == 1 ? "" : "es", copies == 1 ? "its" : "their");
    n = strlen(set->attempt_note);
    if (copies_stopped)
      snprintf(set->attempt_note + n, sizeof set->attempt_note - n,
               ", %zu of them stopped (state T: SIGSTOP or a debugger)", copies_stopped);
    n = strlen(set->attempt_note);
  }
  if (live || copies)
    snprintf(set->attempt_note + n, sizeof set->attempt_note - n, "; %zu set aside for their own dumps", aside);
  for (size_t i = 0; i < set->ncranks; i++) idx[i] = i;
  g_sort_set = set;
  g_postmortem = wd_az_intern("postmortem");
  qsort(idx, set->ncranks, sizeof(*idx), cmp_key);
  /* Sorted newest first within a key, the process's own dumps before its ring file: the newest
   * of the judged attempt is kept. Newest evidence first: a snapshot is a routine picture, so a
   * ring file of the same process that recorded activity after it (the process ran on and was
   * then killed: an OOM kill after `scancel --signal=USR1`) decides what that process was doing.
   * A ring file that was only refreshed since (an idle process) does not: the snapshot has more. */
  wd_az_str snap = wd_az_intern("signal");
  for (size_t a = 0, b; a < set->ncranks; a = b) {
    for (b = a + 1; b < set->ncranks && same_key(set, &set->cranks[idx[b]], &set->cranks[idx[a]]); b++) {
    }
    size_t pick = b;
    for (size_t i = a; i < b && pick == b; i++)
      if (!set->cranks[idx[i]].aside) pick = i;
    if (pick < b && set->dumps[set->cranks[idx[pick]].dump].reason == snap) {
      const wd_az_dump *own = &set->dumps[set->cranks[idx[pick]].dump];
      for (size_t i = pick + 1; i < b; i++) {
        const wd_az_dump *d = &set->dumps[set->cranks[idx[i]].dump];
        if (!set->cranks[idx[i]].aside && d->reason == g_postmortem && d->activity_ns > own->wall_ns) {
          pick = i;
          break;
        }
      }
    }
    for (size_t i = a; i < b; i++) {
      wd_az_crank *c = &set->cranks[idx[i]];
      c->kept = all_dumps || i == pick;
      if (c->kept) set->dumps[c->dump].kept = 1;
    }
  }
  /* A process that had no communicator alive still counts as read. */
  char *has = calloc(set->ndumps ? set->ndumps : 1, 1);
  for (size_t j = 0; has && j < set->ncranks; j++) has[set->cranks[j].dump] = 1;
  for (size_t i = 0; has && i < set->ndumps; i++)
    if (!has[i] && !(set->dumps[i].aside && !all_dumps)) set->dumps[i].kept = 1;
  free(has);
  free(idx);
  if (!all_dumps) shared_ranks(set);
}
