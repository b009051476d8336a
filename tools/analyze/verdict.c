#include "verdict.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_TIMEOUT_MS 300000.0
#define STANDOUT_MS 1000.0 /* a rank "stalled first" only when earlier by at least this */
#define DEFAULT_STRAGGLER_MS 500.0
#define STRAGGLER_OPS 16 /* newest operations of each function compared for stragglers */
#define MAX_KEYS 64
#define MAX_MISSING_SUSPECTS 256
#define TEARDOWN_QUIET_MS 200.0
#define CONTRADICTION_MS 1000.0 /* the rank behind dumped this long after the others last moved */

const char *wd_az_verdict_name(int v) {
  return v == WD_AZ_HANG ? "hang" : v == WD_AZ_NO_VERDICT ? "no_verdict" : "no_hang";
}

const char *wd_az_reason_name(int r) {
  static const char *const names[WD_AZ_NREASONS] = {
      "not_entered",  "mismatch",  "network_stall", "missing",
      "args_mismatch", "p2p_mismatch", "dead_link", "died"};
  return r >= 0 && r < WD_AZ_NREASONS ? names[r] : "?";
}

const wd_az_dump *wd_az_dump_of(const wd_az_set *set, const wd_az_crank *cr) {
  return &set->dumps[cr->dump];
}

int wd_az_global_rank(const wd_az_set *set, const wd_az_crank *cr) {
  const wd_az_dump *d = wd_az_dump_of(set, cr);
  if (!d->multi_rank && !d->rank_shared) return d->global_rank;
  /* torchft, launched as its examples are (REPLICA_GROUP_ID per group's torchrun, replica_id
   * ending with it): the global rank its Manager gives (torchft/manager.py, _global_rank:
   * replica group times the group's world size, plus the rank in the group). */
  if (!d->multi_rank && d->replica_group >= 0 && d->group_size > 0 && d->global_rank >= 0 &&
      d->global_rank < d->group_size)
    return d->replica_group * d->group_size + d->global_rank;
  /* RANK names the process, or other processes too: the rank in the world communicator, on the
   * same GPU where the process holds several. */
  if (!d->world_comm || (d->multi_rank && cr->cuda_dev < 0)) return -1;
  if (d->world_comm == cr->comm_id) return cr->rank;
  const wd_az_crank *hit = NULL;
  int nhit = 0;
  for (size_t i = 0; i < d->ncranks; i++) {
    const wd_az_crank *w = &set->cranks[d->crank0 + i];
    if (w->comm_id != d->world_comm) continue;
    if (d->multi_rank && (w->cuda_dev != cr->cuda_dev || (cr->gpu_uuid && w->gpu_uuid && w->gpu_uuid != cr->gpu_uuid)))
      continue;
    hit = w, nhit++;
  }
  return nhit == 1 ? hit->rank : -1;
}

int64_t wd_az_enq(const wd_az_crank *cr, wd_az_str func) {
  for (int i = 0; i < cr->nseq; i++)
    if (cr->seq[i].func == func) return cr->seq[i].enq;
  return -1;
}

int64_t wd_az_done(const wd_az_crank *cr, wd_az_str func) {
  for (int i = 0; i < cr->nseq; i++)
    if (cr->seq[i].func == func) return cr->seq[i].done;
  return -1;
}

static int is(wd_az_str id, const char *s) { return strcmp(wd_az_s(id), s) == 0; }
static int is_coll(const wd_az_op *op) { return is(op->type, "Coll") || is(op->type, "CeColl"); }
static int is_root_op(const wd_az_op *op) { return is_coll(op) || is(op->type, "P2p"); }

static double threshold(const wd_az_set *set, const wd_az_opts *o, const wd_az_crank *cr) {
  if (o->stall_ms > 0) return o->stall_ms;
  double t = set->dumps[cr->dump].timeout_ms;
  return t > 0 ? t : DEFAULT_TIMEOUT_MS;
}

/* Stuck: the watchdog said so, or it reached the GPU/network and made no progress for the
 * timeout (snapshots taken by signal before the watchdog fired). Not-reached operations wait
 * for the GPU and are not stuck by themselves. */
static double g_first_stall_ms; /* wall time of the job's first stall dump, 0 when none */

static int op_stuck_thr(const wd_az_op *op, double thr) {
  if (is(op->status, "stalled")) return 1;
  /* abandoned: its proxy thread exited with it in flight and the application went on calling
   * NCCL since (a revoke or shrink it recovered from; a network error leaves it calling nothing,
   * and the plugin times such an op out as stalled): not stuck. */
  return (is(op->status, "reached") || is(op->status, "gpu_done")) && op->since_ms >= thr;
}

const char *wd_az_proc_state_text(char st) {
  switch (st) {
  case 'T': return "stopped (state T: SIGSTOP or a debugger)";
  case 't': return "stopped by a debugger (state t)";
  case 'D': return "in the kernel, uninterruptible (state D: a hung file system or driver)";
  case 'S': return "asleep";
  case 'R': return "running";
  default: return "alive";
  }
}

void wd_az_live_text(const wd_az_dump *d, char *out, size_t len) {
  const char *st = wd_az_proc_state_text(d->live_state);
  /* The watchdog thread stuck in the kernel while the process is not stopped: a dump write that
   * never returns (a hung shared file system) is the likeliest. */
  const char *wd = d->wd_thread_state == 'D' && d->live_state != 'T' && d->live_state != 't'
                       ? " in the kernel (its thread in state D: a hung file system or driver call?)"
                       : "";
  char silent[48] = "";
  if (d->silent_ms >= 0) snprintf(silent, sizeof silent, " for %.0f s", d->silent_ms / 1000.0);
  /* It had begun its dump for the episode it stands in for: stuck in that dump. */
  const char *began = d->job_episode > 0 && d->answered_episode >= d->job_episode
                          ? ", after it began its dump for this episode (never finished)"
                          : "";
  wd_az_fmt(out, len, "the process runs, %s, its watchdog silent%s%s%s (its ring file, copied by its node)", st,
            silent, began, wd);
}

/* A dump a process wrote, or left, as it ended: SIGABRT (PyTorch's watchdog), SIGTERM (the
 * launcher), a finalize with operations in flight (ncclCommAbort), or its ring file. Such a
 * process waited no timeout of ours: whatever it was still in, quiet, it never finished. */
int wd_az_is_teardown(const wd_az_dump *d) {
  return is(d->reason, "sigabrt") || is(d->reason, "term") || is(d->reason, "abort") ||
         is(d->reason, "postmortem");
}

/* How long an operation of a teardown dump must have been quiet to count as stuck: two of the
 * dump's polls (one poll is how stale a root's stamp may be), at least TEARDOWN_QUIET_MS; an
 * operation of a healthy job killed by its scheduler moved more recently than that. */
static double teardown_quiet(const wd_az_dump *d) {
  double q = 2 * d->poll_ms;
  return q > TEARDOWN_QUIET_MS ? q : TEARDOWN_QUIET_MS;
}

/* A process answers the job's stall episode with one dump (a peer dump, not its own stall dump:
 * docs/architecture.md, "Trigger episodes"), usually before its own timeout ran out. Its
 * operation still counts as stuck when it had stopped progressing before the watchdog of any
 * process fired (and for a tenth of the timeout at least): it waits on the same hang. In a
 * teardown dump the timeout does not apply at all. */
static int op_stuck_in(const wd_az_set *set, const wd_az_opts *o, const wd_az_crank *cr,
                       const wd_az_op *op) {
  double thr = threshold(set, o, cr);
  if (op_stuck_thr(op, thr)) return 1;
  const wd_az_dump *d = wd_az_dump_of(set, cr);
  if (wd_az_is_teardown(d) && o->stall_ms <= 0)
    return op_stuck_thr(op, teardown_quiet(d)) && !is(op->status, "gpu_done");
  if (g_first_stall_ms <= 0 || is(d->reason, "stall") || op->since_ms < thr / 10) return 0;
  if (!is(op->status, "reached") && !is(op->status, "gpu_done")) return 0;
  return (double)d->wall_ns / 1e6 - op->since_ms <= g_first_stall_ms;
}

/* ---- text helpers ---- */

void wd_az_op_text(const wd_az_op *op, char *out, size_t len) {
  char secs[32], tag[40] = "";
  const char *func = op->func ? wd_az_s(op->func) : wd_az_s(op->type);
  /* The userTag says which phase or step of training the call was (NCCL 2.31+). */
  if (op->user_tag) wd_az_fmt(tag, sizeof tag, " [userTag 0x%" PRIx64 "]", op->user_tag);
  if (op->seq >= 0)
    wd_az_fmt(out, len, "%s seq %" PRId64 "%s (%s, %s s without progress)", func, op->seq, tag,
             wd_az_s(op->status), wd_az_secs(op->since_ms, secs, sizeof(secs)));
  else
    wd_az_fmt(out, len, "%s %s peer %d%s (%s, %s s without progress)", wd_az_s(op->type), func,
             op->peer, tag, wd_az_s(op->status), wd_az_secs(op->since_ms, secs, sizeof(secs)));
}

void wd_az_wait_text(const wd_az_wait *w, char *out, size_t len) {
  if (!w->valid) {
    wd_az_fmt(out, len, "no open proxy or kernel event");
    return;
  }
  char step[32] = "", state[64] = "", done[48] = "";
  if (w->step >= 0) wd_az_fmt(step, sizeof(step), ", step %d", w->step);
  if (w->state) wd_az_fmt(state, sizeof(state), " in %s", wd_az_s(w->state));
  if (w->steps_done >= 0 && w->nsteps > 0)
    wd_az_fmt(done, sizeof(done), " (%d of %d steps done)", w->steps_done, w->nsteps);
  if (is(w->type, "KernelCh"))
    wd_az_fmt(out, len, "KernelCh channel %d%s", w->channel, state);
  else
    wd_az_fmt(out, len, "%s peer %d, channel %d%s%s%s", w->is_send ? "send to" : "recv from",
             w->peer, w->channel, step, state, done);
}

void wd_az_frames_text(const wd_az_dump *d, int max, char *out, size_t len) {
  size_t pos = 0;
  out[0] = '\0';
  for (int i = 0; i < d->nframes && i < max && pos + 1 < len; i++) {
    int n = snprintf(out + pos, len - pos, "%s%s", i ? " <- " : "", wd_az_s(d->frames[i]));
    if (n < 0) break;
    pos += (size_t)n;
  }
}

void wd_az_ident_text(const wd_az_set *set, const wd_az_crank *cr, char *out, size_t len) {
  const wd_az_dump *d = wd_az_dump_of(set, cr);
  char g[32] = "", gpu[96] = "";
  int grank = wd_az_global_rank(set, cr);
  if (grank >= 0) wd_az_fmt(g, sizeof g, "global rank %d on ", grank);
  if (cr->cuda_dev >= 0 && cr->gpu_uuid && *wd_az_s(cr->gpu_uuid))
    wd_az_fmt(gpu, sizeof gpu, ", GPU %d (%s)", cr->cuda_dev, wd_az_s(cr->gpu_uuid));
  else if (cr->cuda_dev >= 0)
    wd_az_fmt(gpu, sizeof gpu, ", GPU %d", cr->cuda_dev);
  wd_az_fmt(out, len, "%shost %s%s, pid %d", g, wd_az_s(d->host), gpu, d->pid);
}

void wd_az_where_text(const wd_az_set *set, const wd_az_crank *cr, char *out, size_t len) {
  const wd_az_dump *d = wd_az_dump_of(set, cr);
  int grank = wd_az_global_rank(set, cr);
  if (grank >= 0) wd_az_fmt(out, len, "global rank %d on host %s", grank, wd_az_s(d->host));
  else if (cr->cuda_dev >= 0) wd_az_fmt(out, len, "host %s pid %d GPU %d", wd_az_s(d->host), d->pid, cr->cuda_dev);
  else wd_az_fmt(out, len, "host %s pid %d", wd_az_s(d->host), d->pid);
}

static void last_text(const wd_az_crank *cr, char *out, size_t len) {
  if (!cr->nlast) {
    wd_az_fmt(out, len, "no operation in its ring");
    return;
  }
  const wd_az_rec *r = &cr->last[cr->nlast - 1];
  static const char *const ph[] = {"start", "state", "stop"};
  char secs[32], seq[48] = "";
  if (r->seq >= 0) wd_az_fmt(seq, sizeof(seq), " seq %" PRId64, r->seq);
  /* A stop record may carry no fields: name the function from an earlier record of the ring. */
  wd_az_str func = r->func;
  for (int i = cr->nlast - 1; !func && i >= 0; i--) func = cr->last[i].func;
  if (!seq[0])
    for (int i = cr->nlast - 1; i >= 0; i--)
      if (cr->last[i].seq >= 0 && cr->last[i].func == func) {
        wd_az_fmt(seq, sizeof(seq), " seq %" PRId64, cr->last[i].seq);
        break;
      }
  wd_az_fmt(out, len, "%s%s (%s %s, %s s before its dump)", wd_az_s(func), seq, wd_az_s(r->type),
           ph[r->ph % 3], wd_az_secs(-(double)r->t / 1e6, secs, sizeof(secs)));
}

static size_t inflight_text(const wd_az_set *set, const wd_az_crank *cr, char *out, size_t len) {
  const wd_az_dump *d = wd_az_dump_of(set, cr);
  size_t pos = 0;
  out[0] = '\0';
  for (size_t i = d->crank0; i < d->crank0 + d->ncranks && pos + 1 < len; i++) {
    const wd_az_crank *o = &set->cranks[i];
    /* A process holding several GPUs: this rank's GPU only, not its siblings'. */
    if (d->multi_rank && o->cuda_dev != cr->cuda_dev) continue;
    for (int k = 0; k < o->nops && pos + 1 < len; k++) {
      char op[256];
      wd_az_op_text(&o->ops[k], op, sizeof(op));
      int n = snprintf(out + pos, len - pos, "%s%s on \"%s\"", pos ? ", " : "", op,
                       wd_az_s(o->name));
      if (n < 0) break;
      pos += (size_t)n;
    }
  }
  if (!pos) wd_az_fmt(out, len, "nothing");
  return pos;
}

void wd_az_doing_text(const wd_az_set *set, const wd_az_crank *cr, char *out, size_t len) {
  const wd_az_dump *d = wd_az_dump_of(set, cr);
  char last[256], infl[512], frames[512], who[256];
  last_text(cr, last, sizeof(last));
  wd_az_ident_text(set, cr, who, sizeof who);
  inflight_text(set, cr, infl, sizeof(infl));
  const char *reason = wd_az_s(d->reason);
  if (reason && strcmp(reason, "postmortem") == 0)
    wd_az_fmt(frames, sizeof(frames), "none: the process died, this is its ring file");
  else if (d->live_state) {
    char lt[384];
    wd_az_live_text(d, lt, sizeof lt);
    wd_az_fmt(frames, sizeof(frames), "none: %s", lt);
  }
  else if (d->threads_disabled) wd_az_fmt(frames, sizeof(frames), "backtraces disabled");
  else if (!d->nframes) wd_az_fmt(frames, sizeof(frames), "no stack");
  else wd_az_frames_text(d, WD_AZ_FRAMES, frames, sizeof(frames));
  if (d->npy) {
    /* The line of the training script first: what on-call asks for. */
    char py[512];
    size_t pos = 0;
    for (int i = 0; i < d->npy && i < 3 && pos < sizeof py; i++) {
      int n = snprintf(py + pos, sizeof py - pos, "%s%s", i ? " <- " : "", wd_az_s(d->py[i]));
      if (n < 0) break;
      pos += (size_t)n;
    }
    wd_az_fmt(out, len, "rank %d of \"%s\" (%s) was last in: %s; in flight: %s; Python: %s; "
             "main thread: %s", cr->rank, wd_az_s(cr->name), who, last, infl, py, frames);
    return;
  }
  wd_az_fmt(out, len, "rank %d of \"%s\" (%s) was last in: %s; in flight: %s; main thread: %s",
           cr->rank, wd_az_s(cr->name), who, last, infl, frames);
}

static void rank_list(const int *r, int n, char *out, size_t len) {
  char tmp[256];
  wd_az_ranges(r, (size_t)n, tmp, sizeof(tmp));
  wd_az_fmt(out, len, "%s %s", n == 1 ? "rank" : "ranks", tmp);
}

/* ---- building communicators ---- */

static const wd_az_set *g_set; /* qsort has no context argument */

static int cmp_crank(const void *a, const void *b) {
  const wd_az_crank *x = &g_set->cranks[*(const size_t *)a];
  const wd_az_crank *y = &g_set->cranks[*(const size_t *)b];
  if (x->comm_id != y->comm_id) return x->comm_id < y->comm_id ? -1 : 1;
  return x->rank - y->rank;
}

static int newer(const wd_az_set *set, const wd_az_crank *a, const wd_az_crank *b) {
  return set->dumps[a->dump].wall_ns > set->dumps[b->dump].wall_ns;
}

static int fill_comm(const wd_az_set *set, wd_az_comm *c, const size_t *idx, size_t n) {
  c->comm_id = set->cranks[idx[0]].comm_id;
  for (size_t i = 0; i < n; i++) {
    const wd_az_crank *cr = &set->cranks[idx[i]];
    if (cr->nranks > c->nranks) c->nranks = cr->nranks;
    if (!c->name) c->name = cr->name;
  }
  if (c->nranks <= 0) return -1; /* the loader admits no such rank */
  c->by_rank = calloc((size_t)c->nranks, sizeof(const wd_az_crank *));
  c->present = malloc((size_t)c->nranks * sizeof(int));
  c->missing = malloc((size_t)c->nranks * sizeof(int));
  c->waiting = malloc((size_t)c->nranks * sizeof(int));
  if (!c->by_rank || !c->present || !c->missing || !c->waiting) return -1;
  for (size_t i = 0; i < n; i++) {
    const wd_az_crank *cr = &set->cranks[idx[i]];
    const wd_az_crank **slot = &c->by_rank[cr->rank];
    if (!*slot || newer(set, cr, *slot)) *slot = cr;
  }
  for (int r = 0; r < c->nranks; r++) {
    if (c->by_rank[r]) c->present[c->npresent++] = r;
    else c->missing[c->nmissing++] = r;
  }
  /* Missing ranks beyond MAX_MISSING_SUSPECTS are counted, not listed one by one. */
  c->cap_sus = c->npresent + (c->nmissing < MAX_MISSING_SUSPECTS ? c->nmissing
                                                                 : MAX_MISSING_SUSPECTS) + 8;
  c->sus = calloc((size_t)c->cap_sus, sizeof(*c->sus));
  return c->sus ? 0 : -1;
}

/* ---- per-function table and history ---- */

static wd_az_func_row *func_row(wd_az_comm *c, wd_az_str func) {
  for (int i = 0; i < c->nfuncs; i++)
    if (c->funcs[i].func == func) return &c->funcs[i];
  if (c->nfuncs == WD_AZ_MAX_FUNCS) return NULL;
  wd_az_func_row *f = &c->funcs[c->nfuncs++];
  memset(f, 0, sizeof(*f));
  f->func = func;
  return f;
}

static void func_table(wd_az_comm *c) {
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_crank *cr = c->by_rank[c->present[i]];
    for (int k = 0; k < cr->nseq; k++) func_row(c, cr->seq[k].func);
  }
  for (int k = 0; k < c->nfuncs; k++) {
    wd_az_func_row *f = &c->funcs[k];
    f->enq_min = f->done_min = INT64_MAX;
    f->enq_max = f->done_max = INT64_MIN;
    for (int i = 0; i < c->npresent; i++) {
      const wd_az_crank *cr = c->by_rank[c->present[i]];
      int64_t e = wd_az_enq(cr, f->func), d = wd_az_done(cr, f->func);
      if (e < f->enq_min) f->enq_min = e;
      if (e > f->enq_max) f->enq_max = e;
      if (d < f->done_min) f->done_min = d;
      if (d > f->done_max) f->done_max = d;
    }
    f->first_div = f->enq_min != f->enq_max ? f->enq_min + 1 : -1;
    f->hist_div = f->hist_lo = f->hist_hi = -1;
  }
}

static const wd_az_hist *hist_find(const wd_az_crank *cr, wd_az_str func, int64_t seq) {
  for (int i = cr->nhist - 1; i >= 0; i--)
    if (cr->hist[i].func == func && cr->hist[i].seq == seq) return &cr->hist[i];
  return NULL;
}

static int hist_same(const wd_az_hist *a, const wd_az_hist *b) {
  return a->count == b->count && a->dtype == b->dtype && a->root == b->root;
}

/* The window every rank's ring still holds: from the newest "oldest record" to the oldest
 * "newest record". Ranks whose ring holds nothing of func take no part. */
static void hist_window(const wd_az_comm *c, wd_az_func_row *f) {
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  int any = 0;
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_crank *cr = c->by_rank[c->present[i]];
    int64_t mn = INT64_MAX, mx = INT64_MIN;
    for (int k = 0; k < cr->nhist; k++) {
      if (cr->hist[k].func != f->func) continue;
      if (cr->hist[k].seq < mn) mn = cr->hist[k].seq;
      if (cr->hist[k].seq > mx) mx = cr->hist[k].seq;
    }
    if (mn == INT64_MAX) continue;
    any = 1;
    if (mn > lo) lo = mn;
    if (mx < hi) hi = mx;
  }
  if (any && lo <= hi) {
    f->hist_lo = lo;
    f->hist_hi = hi;
  }
}

static const wd_az_hist *majority(const wd_az_comm *c, wd_az_str func, int64_t seq, int *nvote) {
  const wd_az_hist *cand = NULL;
  int votes = 0;
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_hist *h = hist_find(c->by_rank[c->present[i]], func, seq);
    if (!h) continue;
    (*nvote)++;
    if (!votes) cand = h, votes = 1;
    else votes += hist_same(cand, h) ? 1 : -1;
  }
  return cand;
}

static int is_suspect(const wd_az_comm *c, int rank) {
  for (int i = 0; i < c->nsus; i++)
    if (c->sus[i].rank == rank) return 1;
  return 0;
}

static wd_az_suspect *add_suspect(wd_az_comm *c, int rank, int reason, const wd_az_crank *cr) {
  if (c->nsus >= c->cap_sus || is_suspect(c, rank)) return NULL;
  wd_az_suspect *s = &c->sus[c->nsus++];
  memset(s, 0, sizeof(*s));
  s->rank = rank;
  s->reason = reason;
  s->cr = cr;
  s->culprit = reason != WD_AZ_MISSING;
  s->link_peer = s->link_channel = -1;
  return s;
}

static void hist_mismatch(wd_az_comm *c, wd_az_func_row *f, int64_t seq,
                          const wd_az_hist *maj) {
  f->hist_div = seq;
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_crank *cr = c->by_rank[c->present[i]];
    const wd_az_hist *h = hist_find(cr, f->func, seq);
    if (!h || hist_same(h, maj)) continue;
    wd_az_suspect *s = add_suspect(c, cr->rank, WD_AZ_ARGS_MISMATCH, cr);
    if (!s) continue;
    s->hist = h;
    wd_az_fmt(s->detail, sizeof(s->detail),
             "called %s seq %" PRId64 " with count %" PRId64 " %s root %d; the other ranks used "
             "count %" PRId64 " %s root %d",
             wd_az_s(f->func), seq, h->count, wd_az_s(h->dtype), h->root, maj->count,
             wd_az_s(maj->dtype), maj->root);
  }
}

/* Completed history: the first seq, inside the common window, where a minority of ranks called
 * the function with other arguments. Without a strict majority nobody is blamed. */
static void history_check(wd_az_comm *c) {
  for (int k = 0; k < c->nfuncs; k++) {
    wd_az_func_row *f = &c->funcs[k];
    hist_window(c, f);
    for (int64_t s = f->hist_lo; f->hist_lo >= 0 && s <= f->hist_hi; s++) {
      int nvote = 0, agree = 0;
      const wd_az_hist *maj = majority(c, f->func, s, &nvote);
      if (!maj) continue;
      for (int i = 0; i < c->npresent; i++) {
        const wd_az_hist *h = hist_find(c->by_rank[c->present[i]], f->func, s);
        agree += h && hist_same(h, maj);
      }
      if (agree == nvote) continue;
      if (agree * 2 > nvote) hist_mismatch(c, f, s, maj);
      else f->hist_div = s;
      break;
    }
  }
}

/* ---- the stuck operation ---- */

typedef struct key {
  wd_az_str type, func;
  int64_t seq;
  int n, nstuck;
} key;

static const wd_az_op *find_op(const wd_az_crank *cr, wd_az_str func, int64_t seq) {
  for (int i = 0; i < cr->nops; i++)
    if (is_coll(&cr->ops[i]) && cr->ops[i].func == func && cr->ops[i].seq == seq)
      return &cr->ops[i];
  return NULL;
}

static void count_key(key *keys, int *nkeys, const wd_az_op *op, int stuck) {
  for (int i = 0; i < *nkeys; i++)
    if (keys[i].func == op->func && keys[i].seq == op->seq) {
      keys[i].n++;
      keys[i].nstuck += stuck;
      return;
    }
  if (*nkeys == MAX_KEYS) return;
  keys[(*nkeys)++] = (key){op->type, op->func, op->seq, 1, stuck};
}

static int pick_stuck(const wd_az_set *set, const wd_az_opts *o, wd_az_comm *c) {
  key keys[MAX_KEYS];
  int nkeys = 0;
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_crank *cr = c->by_rank[c->present[i]];
    c->ninflight += cr->nops > 0;
    for (int k = 0; k < cr->nops; k++)
      if (is_coll(&cr->ops[k]) && cr->ops[k].seq >= 0)
        count_key(keys, &nkeys, &cr->ops[k], op_stuck_in(set, o, cr, &cr->ops[k]));
  }
  const key *best = NULL;
  for (int i = 0; i < nkeys; i++) {
    if (!keys[i].nstuck) continue;
    if (!best || keys[i].n > best->n || (keys[i].n == best->n && keys[i].seq < best->seq))
      best = &keys[i];
  }
  if (!best) return 0;
  c->stuck = 1;
  c->stuck_type = best->type;
  c->stuck_func = best->func;
  c->stuck_seq = best->seq;
  return 1;
}

static void collect_waiting(const wd_az_set *set, const wd_az_opts *o, wd_az_comm *c) {
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_crank *cr = c->by_rank[c->present[i]];
    const wd_az_op *op = find_op(cr, c->stuck_func, c->stuck_seq);
    if (!op) continue;
    c->waiting[c->nwaiting++] = cr->rank;
    if (op_stuck_in(set, o, cr, op) && op->since_ms > c->stalled_ms)
      c->stalled_ms = op->since_ms;
  }
}

/* Stream order across communicators on one GPU (JAX and XLA put every communicator's
 * collectives of a device on one stream; PyTorch orders its process groups' streams with events):
 * a waiting rank whose GPU never reached the stuck operation (enqueued) while the same process's
 * same GPU is inside an earlier operation of another communicator that has not finished waits
 * for that one, not for its peers: it is the rank the others wait for here, and the job-level
 * chain follows it to that communicator. Its peers' network waits are the consequence. */
static const wd_az_op *ahead_on_gpu(const wd_az_set *set, const wd_az_crank *cr, const wd_az_op *op,
                                    const wd_az_crank **on) {
  const wd_az_dump *d = wd_az_dump_of(set, cr);
  const wd_az_op *best = NULL;
  for (size_t i = 0; cr->cuda_dev >= 0 && i < d->ncranks; i++) {
    const wd_az_crank *x = &set->cranks[d->crank0 + i];
    if (x->comm_id == cr->comm_id || x->cuda_dev != cr->cuda_dev) continue;
    for (int k = 0; k < x->nops; k++) {
      const wd_az_op *y = &x->ops[k];
      if (!is_root_op(y) || y->age_ms < op->age_ms || is(y->status, "gpu_done") || is(y->status, "enqueued") ||
          is(y->status, "abandoned"))
        continue;
      if (!best || y->age_ms > best->age_ms) best = y, *on = x;
    }
  }
  return best;
}

static void stream_order_check(const wd_az_set *set, const wd_az_opts *o, wd_az_comm *c) {
  int stuck = 0;
  for (int i = 0; i < c->nwaiting && !stuck; i++) {
    const wd_az_crank *cr = c->by_rank[c->waiting[i]];
    stuck = op_stuck_in(set, o, cr, find_op(cr, c->stuck_func, c->stuck_seq));
  }
  if (!stuck) return;
  for (int i = 0; i < c->nwaiting;) {
    const wd_az_crank *cr = c->by_rank[c->waiting[i]], *on = NULL;
    const wd_az_op *op = find_op(cr, c->stuck_func, c->stuck_seq);
    int unreached = op && is(op->status, "enqueued");
    const wd_az_op *ahead = unreached ? ahead_on_gpu(set, cr, op, &on) : NULL;
    /* Its own CUDA events say its GPU has not got there while its peers' are inside and stuck:
     * the work queued before it on its stream (outside what the plugin follows) has not ended. */
    int busy = unreached && !ahead && op->cuda_evidence;
    wd_az_suspect *s = ahead || busy ? add_suspect(c, cr->rank, WD_AZ_NOT_ENTERED, cr) : NULL;
    if (!s) {
      i++;
      continue;
    }
    s->op = op;
    char text[256], secs[32];
    if (ahead) {
      wd_az_op_text(ahead, text, sizeof text);
      wd_az_fmt(s->detail, sizeof s->detail,
                "its GPU never reached %s seq %" PRId64 ": it is queued behind %s of \"%s\" (rank %d) on the same "
                "GPU, in flight for %s s and not finished",
                wd_az_s(c->stuck_func), c->stuck_seq, text, wd_az_s(on->name), on->rank,
                wd_az_secs(ahead->age_ms, secs, sizeof secs));
    } else {
      wd_az_fmt(s->detail, sizeof s->detail,
                "its GPU never reached %s seq %" PRId64 " (its CUDA events, %s s after the launch): the work "
                "queued before it on its stream has not finished (a kernel outside NCCL, or a stuck GPU)",
                wd_az_s(c->stuck_func), c->stuck_seq, wd_az_secs(op->age_ms, secs, sizeof secs));
    }
    c->waiting[i] = c->waiting[--c->nwaiting]; /* not waiting for its peers */
  }
}

static const wd_az_op *first_root_op(const wd_az_crank *cr) {
  for (int i = 0; i < cr->nops; i++)
    if (is_root_op(&cr->ops[i])) return &cr->ops[i];
  return NULL;
}

/* A rank that is not in the stuck operation: behind it and idle (never entered), or behind it
 * and inside another operation (mismatch). A rank past it is no suspect. */
static void classify_outside(wd_az_comm *c, const wd_az_crank *cr) {
  if (find_op(cr, c->stuck_func, c->stuck_seq)) return;
  int64_t enq = wd_az_enq(cr, c->stuck_func);
  if (enq >= c->stuck_seq) return;
  const wd_az_op *other = first_root_op(cr);
  wd_az_suspect *s = add_suspect(c, cr->rank, other ? WD_AZ_MISMATCH : WD_AZ_NOT_ENTERED, cr);
  if (!s) return;
  s->op = other;
  if (other) {
    char op[256];
    wd_az_op_text(other, op, sizeof(op));
    wd_az_fmt(s->detail, sizeof(s->detail), "is in %s instead of %s seq %" PRId64, op,
             wd_az_s(c->stuck_func), c->stuck_seq);
  } else {
    wd_az_fmt(s->detail, sizeof(s->detail),
             "never entered %s seq %" PRId64 " (its last enqueued %s is %" PRId64 ")",
             wd_az_s(c->stuck_func), c->stuck_seq, wd_az_s(c->stuck_func), enq);
  }
}

static int same_args(const wd_az_op *a, const wd_az_op *b) {
  return a->count == b->count && a->dtype == b->dtype && a->root == b->root;
}

/* Ranks inside the stuck operation with other count/datatype/root than a strict majority. */
static void args_check(wd_az_comm *c) {
  const wd_az_op *cand = NULL;
  int votes = 0, agree = 0;
  for (int i = 0; i < c->nwaiting; i++) {
    const wd_az_op *op = find_op(c->by_rank[c->waiting[i]], c->stuck_func, c->stuck_seq);
    if (!votes) cand = op, votes = 1;
    else votes += same_args(cand, op) ? 1 : -1;
  }
  for (int i = 0; i < c->nwaiting; i++)
    agree += same_args(cand, find_op(c->by_rank[c->waiting[i]], c->stuck_func, c->stuck_seq));
  if (!cand || agree == c->nwaiting) return;
  if (agree * 2 <= c->nwaiting) {
    wd_az_fmt(c->note, sizeof(c->note), "ranks disagree on the arguments of %s seq %" PRId64
             " and no majority exists", wd_az_s(c->stuck_func), c->stuck_seq);
    return;
  }
  for (int i = 0; i < c->nwaiting; i++) {
    const wd_az_crank *cr = c->by_rank[c->waiting[i]];
    const wd_az_op *op = find_op(cr, c->stuck_func, c->stuck_seq);
    if (same_args(cand, op)) continue;
    wd_az_suspect *s = add_suspect(c, cr->rank, WD_AZ_ARGS_MISMATCH, cr);
    if (!s) continue;
    s->op = op;
    wd_az_fmt(s->detail, sizeof(s->detail),
             "called %s seq %" PRId64 " with count %" PRId64 " %s root %d; the majority used "
             "count %" PRId64 " %s root %d",
             wd_az_s(op->func), op->seq, op->count, wd_az_s(op->dtype), op->root, cand->count,
             wd_az_s(cand->dtype), cand->root);
  }
}

/* When the stall began, on the common wall-clock axis (ms). */
static double stall_start_ms(const wd_az_set *set, const wd_az_crank *cr, const wd_az_op *op) {
  double since = op->since_ms;
  if (op->wait.valid && op->wait.since_ms > since) since = op->wait.since_ms;
  return (double)wd_az_dump_of(set, cr)->wall_ns / 1e6 - since;
}

/* A wait in the network (a proxy step or op, not a kernel channel) on peer p. */
static int net_wait_on(const wd_az_op *op, int p) {
  return op && op->wait.valid && op->wait.peer == p && !is(op->wait.type, "KernelCh");
}

/* Both ends of one connection, each waiting on the other on the same channel, one sending and
 * one receiving: nothing moves on the link between them. */
static int link_pair(const wd_az_op *a, int ra, const wd_az_op *b, int rb) {
  return net_wait_on(a, rb) && net_wait_on(b, ra) && a->wait.channel == b->wait.channel &&
         a->wait.is_send != b->wait.is_send;
}

static void link_suspect(const wd_az_set *set, wd_az_comm *c, const wd_az_crank *cr,
                         const wd_az_op *op, const wd_az_crank *other, const wd_az_op *oop) {
  wd_az_suspect *s = add_suspect(c, cr->rank, WD_AZ_DEAD_LINK, cr);
  if (!s) return;
  s->op = op;
  s->link_peer = other->rank;
  s->link_channel = op->wait.channel;
  char secs[32], osecs[32];
  wd_az_fmt(s->detail, sizeof(s->detail),
            "its %s rank %d on channel %d has waited %s s in %s while rank %d (host %s) has "
            "waited %s s in %s for it: the link between host %s and host %s carries nothing",
            op->wait.is_send ? "send to" : "receive from", other->rank, op->wait.channel,
            wd_az_secs(op->wait.since_ms, secs, sizeof secs),
            op->wait.state ? wd_az_s(op->wait.state) : wd_az_s(op->wait.type), other->rank,
            wd_az_s(wd_az_dump_of(set, other)->host),
            wd_az_secs(oop->wait.since_ms, osecs, sizeof osecs),
            oop->wait.state ? wd_az_s(oop->wait.state) : wd_az_s(oop->wait.type),
            wd_az_s(wd_az_dump_of(set, cr)->host), wd_az_s(wd_az_dump_of(set, other)->host));
}

static double stall_start_ms(const wd_az_set *set, const wd_az_crank *cr, const wd_az_op *op);

static const wd_az_op *stuck_p2p(const wd_az_set *set, const wd_az_opts *o, const wd_az_crank *cr);
static const wd_az_op *p2p_partner(const wd_az_crank *cr, const wd_az_op *op, int r);

/* ---- dead links by the steps' states ---- */

/* PXN sends of the whole set, by (host, origin pid): another local process progressed them for
 * the origin (transport/net.cc: only sends go through PXN). Built once per analysis. */
typedef struct pxn_ref {
  wd_az_str host;
  int pid, rank;
  const wd_az_pxn *x;
  const wd_az_dump *by; /* the process whose proxy progressed it */
} pxn_ref;
static pxn_ref *g_pxn;
static size_t g_npxn;

static int cmp_pxn(const void *a, const void *b) {
  const pxn_ref *x = a, *y = b;
  if (x->host != y->host) return x->host < y->host ? -1 : 1;
  return (x->pid > y->pid) - (x->pid < y->pid);
}

static void pxn_index(const wd_az_set *set) {
  free(g_pxn);
  g_pxn = NULL;
  g_npxn = 0;
  size_t n = 0;
  for (size_t i = 0; i < set->ndumps; i++) n += set->dumps[i].kept ? (size_t)set->dumps[i].npxn : 0;
  if (!n || !(g_pxn = malloc(n * sizeof *g_pxn))) return;
  for (size_t i = 0; i < set->ndumps; i++) {
    const wd_az_dump *d = &set->dumps[i];
    for (int k = 0; d->kept && k < d->npxn; k++)
      g_pxn[g_npxn++] = (pxn_ref){d->host, d->pxn[k].origin_pid, d->pxn[k].origin_rank, &d->pxn[k], d};
  }
  qsort(g_pxn, g_npxn, sizeof *g_pxn, cmp_pxn);
}

/* A rank's standing on each of its open connections in op: its own ProxyOps, and the PXN sends
 * another process of its host progressed for it. The originating rank in the PXN descriptor
 * tells apart two processes with one pid on one host (PID namespaces). */
static int conns_of(const wd_az_set *set, const wd_az_crank *cr, const wd_az_op *op,
                    wd_az_conn *out, const wd_az_dump **via, int max) {
  int n = 0;
  for (int i = 0; op && i < op->nconn && n < max; i++) via[n] = NULL, out[n++] = op->conn[i];
  const wd_az_dump *d = wd_az_dump_of(set, cr);
  if (!g_npxn) return n;
  pxn_ref key = {d->host, d->pid, 0, NULL, NULL};
  pxn_ref *hit = bsearch(&key, g_pxn, g_npxn, sizeof *g_pxn, cmp_pxn);
  if (!hit) return n;
  while (hit > g_pxn && !cmp_pxn(hit - 1, &key)) hit--;
  for (; hit < g_pxn + g_npxn && !cmp_pxn(hit, &key) && n < max; hit++) {
    if (hit->by == d || (hit->rank >= 0 && hit->rank != cr->rank)) continue;
    via[n] = hit->by;
    out[n++] = hit->x->conn;
  }
  return n;
}

typedef struct link_hit {
  const wd_az_crank *from, *to;
  const wd_az_op *ofrom, *oto;
  wd_az_conn send, recv;
  const wd_az_dump *via; /* the PXN proxy's process, NULL when the sender's own */
} link_hit;

/* The sender handed step k to the network and the receiver, on the same channel, has received
 * nothing for step k: the data stopped between them. */
static int link_between(const wd_az_set *set, const wd_az_crank *a, const wd_az_op *oa,
                        const wd_az_crank *b, const wd_az_op *ob, link_hit *out) {
  wd_az_conn ca[WD_AZ_CONNS + WD_AZ_PXN], cb[WD_AZ_CONNS + WD_AZ_PXN];
  const wd_az_dump *va[WD_AZ_CONNS + WD_AZ_PXN], *vb[WD_AZ_CONNS + WD_AZ_PXN];
  int na = conns_of(set, a, oa, ca, va, WD_AZ_CONNS + WD_AZ_PXN);
  int nb = conns_of(set, b, ob, cb, vb, WD_AZ_CONNS + WD_AZ_PXN);
  for (int i = 0; i < na; i++) {
    if (ca[i].kind != WD_AZ_CONN_SEND_POSTED || ca[i].peer != b->rank) continue;
    for (int j = 0; j < nb; j++) {
      if (cb[j].kind != WD_AZ_CONN_RECV_EMPTY || cb[j].peer != a->rank ||
          cb[j].channel != ca[i].channel || cb[j].step_lo < ca[i].step_lo ||
          cb[j].step_lo > ca[i].step_hi)
        continue;
      *out = (link_hit){a, b, oa, ob, ca[i], cb[j], va[i]};
      return 1;
    }
  }
  return 0;
}

static void state_link_suspects(const wd_az_set *set, wd_az_comm *c, const link_hit *h) {
  const wd_az_dump *df = wd_az_dump_of(set, h->from), *dt = wd_az_dump_of(set, h->to);
  char ss[32], sr[32], via[160] = "";
  if (h->via) {
    int vr = -1; /* the proxying process's rank in this communicator, when it has one */
    for (size_t k = h->via->crank0; k < h->via->crank0 + h->via->ncranks; k++)
      if (set->cranks[k].comm_id == c->comm_id) vr = set->cranks[k].rank;
    if (vr >= 0)
      wd_az_fmt(via, sizeof via, " (a PXN send, progressed by rank %d's process, pid %d on host %s)",
                vr, h->via->pid, wd_az_s(h->via->host));
    else
      wd_az_fmt(via, sizeof via, " (a PXN send, progressed by pid %d on host %s)", h->via->pid,
                wd_az_s(h->via->host));
  }
  wd_az_suspect *a = add_suspect(c, h->from->rank, WD_AZ_DEAD_LINK, h->from);
  wd_az_suspect *b = add_suspect(c, h->to->rank, WD_AZ_DEAD_LINK, h->to);
  for (int end = 0; end < 2; end++) {
    wd_az_suspect *x = end ? b : a;
    if (!x) continue;
    x->op = end ? h->oto : h->ofrom;
    x->link_peer = end ? h->from->rank : h->to->rank;
    x->link_channel = h->send.channel;
  }
  if (a) {
    wd_az_fmt(a->detail, sizeof a->detail,
              "its send to rank %d on channel %d handed step %d to the network %s s ago%s and "
              "rank %d (host %s) has received nothing for it: the link from host %s to host %s "
              "carries nothing", h->to->rank, h->send.channel, h->recv.step_lo,
              wd_az_secs(h->send.since_ms, ss, sizeof ss), via, h->to->rank, wd_az_s(dt->host),
              wd_az_s(df->host), wd_az_s(dt->host));
    wd_az_fmt(a->link, sizeof a->link,
              "dead link between rank %d (host %s) and rank %d (host %s) on channel %d: rank "
              "%d's send%s handed step %d to the network %s s ago (SendWait) and rank %d has "
              "received nothing for it (RecvWait, %s s)",
              h->from->rank, wd_az_s(df->host), h->to->rank, wd_az_s(dt->host), h->send.channel,
              h->from->rank, via, h->recv.step_lo, wd_az_secs(h->send.since_ms, ss, sizeof ss),
              h->to->rank, wd_az_secs(h->recv.since_ms, sr, sizeof sr));
  }
  if (b) {
    wd_az_fmt(b->detail, sizeof b->detail,
              "its receive from rank %d on channel %d has got nothing for step %d for %s s while "
              "rank %d (host %s) handed that step to the network%s: the link from host %s to "
              "host %s carries nothing", h->from->rank, h->recv.channel, h->recv.step_lo,
              wd_az_secs(h->recv.since_ms, sr, sizeof sr), h->from->rank, wd_az_s(df->host), via,
              wd_az_s(df->host), wd_az_s(dt->host));
    if (a) snprintf(b->link, sizeof b->link, "%s", a->link);
  }
}

/* Every link whose sender posted and whose receiver got nothing, among the ranks waiting in the
 * stuck operation (or, for point-to-point, in their stuck Send/Recv pairs). Only the earliest
 * is named unless others began within a tick of it: time breaks ties only. */
static int state_link_check(const wd_az_set *set, const wd_az_opts *o, wd_az_comm *c, int p2p) {
  link_hit hits[8];
  int n = 0;
  for (int i = 0; i < c->nwaiting && n < 8; i++) {
    const wd_az_crank *a = c->by_rank[c->waiting[i]];
    const wd_az_op *oa = p2p ? stuck_p2p(set, o, a) : find_op(a, c->stuck_func, c->stuck_seq);
    if (!oa) continue;
    for (int j = 0; j < c->nwaiting && n < 8; j++) {
      const wd_az_crank *b = c->by_rank[c->waiting[j]];
      if (b == a) continue;
      const wd_az_op *ob = p2p ? p2p_partner(b, oa, a->rank) : find_op(b, c->stuck_func, c->stuck_seq);
      if (p2p && !ob) ob = stuck_p2p(set, o, b);
      if (ob && link_between(set, a, oa, b, ob, &hits[n])) n++;
    }
  }
  if (!n) return 0;
  double first = 0;
  for (int k = 0; k < n; k++)
    if (hits[k].send.since_ms > first) first = hits[k].send.since_ms;
  int named = 0;
  for (int k = 0; k < n; k++)
    if (first - hits[k].send.since_ms < STANDOUT_MS) {
      state_link_suspects(set, c, &hits[k]);
      named++;
    }
  return named;
}

/* Dead links among the ranks waiting in the stuck collective: a pair of ranks waiting on each
 * other, both stalled before every other waiting rank by a clear margin (the rest only wait on
 * what the link holds up). Returns the number of links named. */
static int dead_link_check(const wd_az_set *set, const wd_az_opts *o, wd_az_comm *c) {
  int nlinks = 0;
  for (int i = 0; i < c->nwaiting; i++) {
    const wd_az_crank *a = c->by_rank[c->waiting[i]];
    const wd_az_op *oa = find_op(a, c->stuck_func, c->stuck_seq);
    if (!op_stuck_in(set, o, a, oa) || !oa->wait.valid) continue;
    int p = oa->wait.peer;
    if (p <= a->rank || p >= c->nranks || !c->by_rank[p]) continue;
    const wd_az_crank *b = c->by_rank[p];
    const wd_az_op *ob = find_op(b, c->stuck_func, c->stuck_seq);
    if (!ob || !op_stuck_in(set, o, b, ob) || !link_pair(oa, a->rank, ob, b->rank))
      continue;
    double ta = stall_start_ms(set, a, oa), tb = stall_start_ms(set, b, ob);
    double late = ta > tb ? ta : tb;
    int clear = 1;
    for (int k = 0; k < c->nwaiting && clear; k++) {
      const wd_az_crank *x = c->by_rank[c->waiting[k]];
      if (x == a || x == b) continue;
      const wd_az_op *ox = find_op(x, c->stuck_func, c->stuck_seq);
      if (op_stuck_in(set, o, x, ox) && stall_start_ms(set, x, ox) - late < STANDOUT_MS &&
          !(net_wait_on(ox, a->rank) || net_wait_on(ox, b->rank)))
        clear = 0;
    }
    if (!clear) continue;
    link_suspect(set, c, a, oa, b, ob);
    link_suspect(set, c, b, ob, a, oa);
    nlinks++;
  }
  return nlinks;
}

/* A rank whose proxy thread exited with the stuck operation in flight, its kernel still waiting
 * (or, without CUDA events, not known to have ended): a network error ended NCCL's progress loop
 * there (proxy.cc), and nothing will move the operation again. Returns the ranks named. */
static int proxy_gone_check(wd_az_comm *c) {
  int n = 0;
  for (int pass = 2; pass >= 1 && !n; pass--)
    for (int i = 0; i < c->nwaiting; i++) {
      const wd_az_crank *cr = c->by_rank[c->waiting[i]];
      const wd_az_op *op = find_op(cr, c->stuck_func, c->stuck_seq);
      if (!op || op->proxy_gone != pass) continue;
      wd_az_suspect *s = add_suspect(c, cr->rank, WD_AZ_NETWORK_STALL, cr);
      if (!s) continue;
      s->op = op;
      char wait[256];
      wd_az_wait_text(&op->wait, wait, sizeof wait);
      wd_az_fmt(s->detail, sizeof(s->detail),
                "its NCCL proxy thread exited with %s seq %" PRId64 " in flight (%s): it last "
                "waited on %s", wd_az_s(op->func), op->seq,
                pass == 2 ? "a network error: the kernel still waits"
                          : "a network error or a revoke: no CUDA events tell which",
                wait);
      n++;
    }
  return n;
}

/* Everyone is in the stuck operation: the rank whose operation stopped progressing first, by a
 * clear margin, and whose wait is on the network, is the suspect. */
static void network_check(const wd_az_set *set, const wd_az_opts *o, wd_az_comm *c) {
  if (proxy_gone_check(c)) return;
  if (state_link_check(set, o, c, 0)) return;
  if (dead_link_check(set, o, c)) return;
  const wd_az_crank *first = NULL;
  const wd_az_op *fop = NULL;
  double t1 = 0, t2 = 0;
  int n = 0;
  for (int i = 0; i < c->nwaiting; i++) {
    const wd_az_crank *cr = c->by_rank[c->waiting[i]];
    const wd_az_op *op = find_op(cr, c->stuck_func, c->stuck_seq);
    if (!op_stuck_in(set, o, cr, op)) continue;
    double t = stall_start_ms(set, cr, op);
    if (n == 0 || t < t1) {
      t2 = t1;
      t1 = t, first = cr, fop = op;
    } else if (n == 1 || t < t2) {
      t2 = t;
    }
    n++;
  }
  if (!n) return;
  if (n > 1 && t2 - t1 < STANDOUT_MS) {
    wd_az_fmt(c->note, sizeof(c->note),
             "every waiting rank stalled within %.1f s of the others; no rank stands out",
             (t2 - t1) / 1000.0);
    return;
  }
  char wait[256];
  wd_az_wait_text(&fop->wait, wait, sizeof(wait));
  if (!fop->wait.valid || is(fop->wait.type, "KernelCh")) {
    wd_az_fmt(c->note, sizeof(c->note),
             "rank %d stalled first, but not on the network (%s)", first->rank, wait);
    return;
  }
  wd_az_suspect *s = add_suspect(c, first->rank, WD_AZ_NETWORK_STALL, first);
  if (!s) return;
  s->op = fop;
  wd_az_fmt(s->detail, sizeof(s->detail), "its %s seq %" PRId64 " stalled in the network first: %s",
           wd_az_s(fop->func), fop->seq, wait);
  if (n > 1)
    wd_az_fmt(s->detail + strlen(s->detail), sizeof(s->detail) - strlen(s->detail),
             " (%.1f s before any other rank)", (t2 - t1) / 1000.0);
}

static int has_culprit(const wd_az_comm *c);
static void head(const wd_az_comm *c, const char *tag, char *out, size_t len);

/* ---- point-to-point: no sequence numbers, so a stuck Send/Recv is matched by peer ---- */

static const wd_az_op *stuck_p2p(const wd_az_set *set, const wd_az_opts *o,
                                 const wd_az_crank *cr) {
  for (int i = 0; i < cr->nops; i++) {
    const wd_az_op *op = &cr->ops[i];
    if ((!is_coll(op) || op->seq < 0) && op_stuck_in(set, o, cr, op)) return op;
  }
  return NULL;
}

static int is_p2p(const wd_az_op *op) { return is(op->type, "P2p"); }
static int is_send(const wd_az_op *op) { return is(op->func, "Send"); }

/* The operation of cr that pairs with op of rank r: a Recv from r for a Send to cr, a Send to r
 * for a Recv (any P2p with r when op's direction is unknown). */
static const wd_az_op *p2p_partner(const wd_az_crank *cr, const wd_az_op *op, int r) {
  int known = is(op->func, "Send") || is(op->func, "Recv");
  for (int i = 0; i < cr->nops; i++) {
    const wd_az_op *x = &cr->ops[i];
    if (is_p2p(x) && x->peer == r && (!known || is_send(x) != is_send(op))) return x;
  }
  return NULL;
}

static const wd_az_op *first_p2p(const wd_az_crank *cr) {
  for (int i = 0; i < cr->nops; i++)
    if (is_p2p(&cr->ops[i])) return &cr->ops[i];
  return NULL;
}

static void p2p_blame(wd_az_comm *c, int r, const wd_az_op *op) {
  int p = op->peer >= 0 ? op->peer : op->wait.valid ? op->wait.peer : -1;
  if (p < 0 || p >= c->nranks || !c->by_rank[p] || p2p_partner(c->by_rank[p], op, r)) return;
  const wd_az_op *other = first_p2p(c->by_rank[p]);
  char text[256];
  wd_az_op_text(op, text, sizeof(text));
  const char *want = is_send(op) ? "Recv from" : "Send to";
  if (other) {
    /* Pipeline schedules that disagree: the peer waits on someone else (or the same way). */
    wd_az_suspect *s = add_suspect(c, p, WD_AZ_P2P_MISMATCH, c->by_rank[p]);
    if (!s) return;
    s->op = other;
    wd_az_fmt(s->detail, sizeof(s->detail),
              "is in %s %s rank %d instead of the %s rank %d that rank %d waits for (%s %s rank %d)",
              wd_az_s(other->func), is_send(other) ? "to" : "from", other->peer, want, r, r,
              wd_az_s(op->func), is_send(op) ? "to" : "from", p);
    return;
  }
  wd_az_suspect *s = add_suspect(c, p, WD_AZ_NOT_ENTERED, c->by_rank[p]);
  if (!s) return;
  char secs[32];
  wd_az_fmt(s->detail, sizeof(s->detail),
            "never posted the %s rank %d that rank %d's %s has waited for %s s (it has no "
            "point-to-point operation in flight)", want, r, r, wd_az_s(op->func),
            wd_az_secs(op->since_ms, secs, sizeof secs));
}

/* Matched point-to-point pairs stuck on each other in the network: dead links. */
static int p2p_links(const wd_az_set *set, const wd_az_opts *o, wd_az_comm *c) {
  int n = 0;
  for (int i = 0; i < c->nwaiting; i++) {
    const wd_az_crank *a = c->by_rank[c->waiting[i]];
    const wd_az_op *oa = stuck_p2p(set, o, a);
    int p = oa ? oa->peer : -1;
    if (p <= a->rank || p >= c->nranks || !c->by_rank[p]) continue;
    const wd_az_crank *b = c->by_rank[p];
    const wd_az_op *ob = p2p_partner(b, oa, a->rank);
    if (!ob || !op_stuck_in(set, o, b, ob) || !link_pair(oa, a->rank, ob, b->rank))
      continue;
    link_suspect(set, c, a, oa, b, ob);
    link_suspect(set, c, b, ob, a, oa);
    n++;
  }
  return n;
}

static int p2p_check(const wd_az_set *set, const wd_az_opts *o, wd_az_comm *c) {
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_op *op = stuck_p2p(set, o, c->by_rank[c->present[i]]);
    if (!op) continue;
    c->stuck = 1;
    c->stuck_type = op->type;
    c->stuck_func = op->func;
    c->stuck_seq = -1;
    c->waiting[c->nwaiting++] = c->present[i];
    if (op->since_ms > c->stalled_ms) c->stalled_ms = op->since_ms;
  }
  for (int i = 0; i < c->nwaiting; i++)
    p2p_blame(c, c->waiting[i], stuck_p2p(set, o, c->by_rank[c->waiting[i]]));
  if (c->stuck && !has_culprit(c) && !state_link_check(set, o, c, 1)) p2p_links(set, o, c);
  if (c->stuck && !has_culprit(c) && !c->nmissing)
    wd_az_fmt(c->note, sizeof(c->note), "every peer of a stuck point-to-point operation has a "
              "matching operation in flight");
  return c->stuck;
}

static void link_text(const wd_az_set *set, const wd_az_comm *c, char *out, size_t len);

/* " (global rank 3 on host node002)": where the culprits of the first line run, said in the
 * line itself (a job's log keeps only that line); "" for a rank that left no dump. At most max,
 * then how many more the report's suspects name. */
static void culprit_where(const wd_az_set *set, const wd_az_comm *c, int reason, int max, char *out, size_t len) {
  size_t pos = 0;
  int k = 0, more = 0;
  out[0] = '\0';
  for (int i = 0; i < c->nsus; i++) {
    const wd_az_suspect *s = &c->sus[i];
    if (!s->culprit || s->reason != reason || !s->cr) continue;
    char where[160];
    wd_az_where_text(set, s->cr, where, sizeof where);
    int w = k < max ? snprintf(out + pos, len - pos, "%s%s", k ? ", " : " (", where) : -1;
    if (w < 0 || (size_t)w >= len - pos - 24) { /* room kept for the count and ")" */
      out[pos] = '\0';
      more++;
      continue;
    }
    pos += (size_t)w, k++;
  }
  if (k && more) wd_az_fmt(out + pos, len - pos, ", %d more among the suspects)", more);
  else if (k) wd_az_fmt(out + pos, len - pos, ")");
}

static void p2p_summary(const wd_az_set *set, wd_az_comm *c) {
  char h[256], wait[300], secs[32];
  head(c, c->verdict == WD_AZ_HANG ? "HANG" : "NO VERDICT", h, sizeof(h));
  rank_list(c->waiting, c->nwaiting, wait, sizeof(wait));
  wd_az_secs(c->stalled_ms, secs, sizeof(secs));
  if (c->verdict == WD_AZ_HANG && c->sus[0].reason == WD_AZ_DEAD_LINK) {
    char link[700];
    link_text(set, c, link, sizeof link);
    wd_az_fmt(c->summary, sizeof(c->summary),
              "%s: %s; %s %s waiting in point-to-point operations (stalled %s s).", h, link, wait,
              c->nwaiting == 1 ? "is" : "are", secs);
  } else if (c->verdict == WD_AZ_HANG) {
    char where[320];
    culprit_where(set, c, c->sus[0].reason, 1, where, sizeof where);
    wd_az_fmt(c->summary, sizeof(c->summary),
              "%s: rank %d %s%s; %s %s waiting in point-to-point operations (stalled %s s).", h,
              c->sus[0].rank, c->sus[0].detail, where, wait, c->nwaiting == 1 ? "is" : "are", secs);
  } else
    wd_az_fmt(c->summary, sizeof(c->summary),
              "%s: %s %s waiting in point-to-point operations (stalled %s s); %s.", h, wait,
              c->nwaiting == 1 ? "is" : "are", secs,
              c->note[0] ? c->note : "the evidence names no rank");
}

static int has_culprit(const wd_az_comm *c) {
  for (int i = 0; i < c->nsus; i++)
    if (c->sus[i].culprit) return 1;
  return 0;
}

static wd_az_suspect *find_suspect(wd_az_comm *c, int rank) {
  for (int i = 0; i < c->nsus; i++)
    if (c->sus[i].rank == rank) return &c->sus[i];
  return NULL;
}

/* "left no dump; ranks 4 wait on it in the network" */
static void missing_detail(const wd_az_comm *c, wd_az_suspect *s) {
  int *r = malloc((size_t)c->nwaiting * sizeof(int) + 1), n = 0;
  for (int i = 0; r && i < c->nwaiting; i++) {
    const wd_az_crank *w = c->by_rank[c->waiting[i]];
    const wd_az_op *op = c->stuck_seq >= 0 ? find_op(w, c->stuck_func, c->stuck_seq) : first_p2p(w);
    if (op && ((is_p2p(op) && op->peer == s->rank) ||
               (op->wait.valid && op->wait.peer == s->rank && !is(op->wait.type, "KernelCh"))))
      r[n++] = c->waiting[i];
  }
  char who[300];
  if (n) rank_list(r, n, who, sizeof(who));
  if (n) wd_az_fmt(s->detail, sizeof(s->detail), "left no dump (crashed, killed, or its host is "
                   "gone); %s wait%s on it", who, n == 1 ? "s" : "");
  else wd_az_fmt(s->detail, sizeof(s->detail), "left no dump (crashed, killed, or its host is gone)");
  free(r);
}

/* Missing ranks are listed; they become culprits only when nothing else explains the hang, or
 * when the rank that stalled first waits on one of them. */
static void missing_check(wd_az_comm *c) {
  int explained = has_culprit(c);
  for (int i = 0; i < c->nmissing; i++) {
    wd_az_suspect *s = add_suspect(c, c->missing[i], WD_AZ_MISSING, NULL);
    if (!s) continue;
    s->culprit = !explained;
    missing_detail(c, s);
  }
  for (int i = 0; i < c->nsus; i++) {
    wd_az_suspect *s = &c->sus[i];
    if (s->reason != WD_AZ_NETWORK_STALL) continue;
    wd_az_suspect *peer = find_suspect(c, s->op->wait.peer);
    if (!peer) continue;
    s->peer_is_suspect = 1;
    /* Waiting on a process that left no dump: that process is the better explanation. */
    if (peer->reason == WD_AZ_MISSING) {
      peer->culprit = 1;
      s->culprit = 0;
    }
    wd_az_fmt(s->detail + strlen(s->detail), sizeof(s->detail) - strlen(s->detail),
             "; peer %d is itself a suspect (%s)", peer->rank, wd_az_reason_name(peer->reason));
  }
}

/* How long the process of cr lived on after the first waiting rank entered the stuck operation
 * (its ring file's last refresh against their entry), 0 when unknown. */
static double outlived_ms(const wd_az_set *set, const wd_az_comm *c, const wd_az_crank *cr) {
  double entered = -1;
  for (int i = 0; i < c->nwaiting; i++) {
    const wd_az_crank *w = c->by_rank[c->waiting[i]];
    const wd_az_op *op = find_op(w, c->stuck_func, c->stuck_seq);
    double t = (double)wd_az_dump_of(set, w)->wall_ns / 1e6 - (op ? op->age_ms : w->since_ms);
    if (entered < 0 || t < entered) entered = t;
  }
  double end = (double)wd_az_dump_of(set, cr)->wall_ns / 1e6;
  return entered >= 0 && end > entered ? end - entered : 0;
}

/* A rank whose process died: its ring file is all that is left. It explains every wait on it,
 * whatever the rules above made of it. */
static void died_check(const wd_az_set *set, wd_az_comm *c) {
  wd_az_str pm = wd_az_intern("postmortem");
  int other_cause = has_culprit(c);
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_crank *cr = c->by_rank[c->present[i]];
    if (wd_az_dump_of(set, cr)->reason != pm) continue;
    wd_az_suspect *s = find_suspect(c, cr->rank);
    /* Ended by SIGABRT while waiting in the stuck operation, when another rank explains it:
     * PyTorch's watchdog aborted it because of the hang (its teardown dump did not make it). A
     * victim, not the cause. */
    if (!s && other_cause && wd_az_dump_of(set, cr)->fatal_signal == 6 &&
        find_op(cr, c->stuck_func, c->stuck_seq))
      continue;
    /* Killed (SIGKILL leaves no signal on record) inside the stuck operation long after the others
     * entered it, when another rank explains the wait: the launcher's cleanup once the others
     * ended (srun's --kill-on-bad-exit, torchrun's SIGKILL after its grace), not the cause. */
    if (!s && other_cause && find_op(cr, c->stuck_func, c->stuck_seq) && c->stuck_seq >= 0 &&
        outlived_ms(set, c, cr) >= CONTRADICTION_MS)
      continue;
    double alive_ms = s && s->reason == WD_AZ_NOT_ENTERED ? outlived_ms(set, c, cr) : 0;
    if (alive_ms >= CONTRADICTION_MS) {
      /* It outlived the others' wait by far, outside the operation: killed afterwards (torchrun's
       * SIGKILL once PyTorch's watchdog ended the others), not the cause by dying. */
      char secs[32];
      size_t used = strlen(s->detail);
      wd_az_fmt(s->detail + used, sizeof(s->detail) - used,
                "; it lived on %s s after the others entered it, then was killed (only its ring "
                "file is left)", wd_az_secs(alive_ms, secs, sizeof secs));
      continue;
    }
    if (s) {
      char old[sizeof(s->detail)];
      memcpy(old, s->detail, sizeof old);
      wd_az_fmt(s->detail, sizeof(s->detail),
                "only its post-mortem ring file is left; before it died it %s", old);
    } else {
      s = add_suspect(c, cr->rank, WD_AZ_DIED, cr);
      if (!s) continue;
      s->op = find_op(cr, c->stuck_func, c->stuck_seq);
      wd_az_fmt(s->detail, sizeof(s->detail),
                "was inside %s seq %" PRId64 " when it died (only its post-mortem ring file is left)",
                wd_az_s(c->stuck_func), c->stuck_seq);
    }
    /* Where its proxy thread was at the file's last refresh (ring file version 3). */
    if (cr->open_wait.valid) {
      char wait[160];
      wd_az_wait_text(&cr->open_wait, wait, sizeof wait);
      size_t used = strlen(s->detail);
      wd_az_fmt(s->detail + used, sizeof(s->detail) - used,
                "; at its ring file's last refresh its proxy thread waited on %s", wait);
    }
    s->reason = WD_AZ_DIED;
    s->culprit = 1;
  }
}

/* Order of explanations: a dead process first, then what a rank did wrong, then the network. */
static int reason_order(int r) {
  static const int order[WD_AZ_NREASONS] = {
      [WD_AZ_DIED] = 0,         [WD_AZ_NOT_ENTERED] = 1, [WD_AZ_MISMATCH] = 2,
      [WD_AZ_ARGS_MISMATCH] = 3, [WD_AZ_P2P_MISMATCH] = 4, [WD_AZ_DEAD_LINK] = 5,
      [WD_AZ_NETWORK_STALL] = 6, [WD_AZ_MISSING] = 7};
  return r >= 0 && r < WD_AZ_NREASONS ? order[r] : WD_AZ_NREASONS;
}

static int cmp_suspect(const void *a, const void *b) {
  const wd_az_suspect *x = a, *y = b;
  if (x->culprit != y->culprit) return y->culprit - x->culprit;
  if (x->reason != y->reason) return reason_order(x->reason) - reason_order(y->reason);
  return x->rank - y->rank;
}

/* ---- stragglers: late, not hung ---- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int cmp_strag(const void *a, const void *b) {
  const wd_az_straggler *x = a, *y = b;
  if (x->lag_ms != y->lag_ms) return x->lag_ms > y->lag_ms ? -1 : 1;
  return x->rank - y->rank;
}

/* For the newest operations every rank's ring still holds, when each rank entered them against
 * the median rank (on the dumps' wall clocks). A rank late on average by the threshold or more is
 * a straggler: it slows the job down without stopping it. */
static void straggler_check(const wd_az_set *set, const wd_az_opts *o, wd_az_comm *c) {
  double thr = o->straggler_ms > 0 ? o->straggler_ms : DEFAULT_STRAGGLER_MS;
  size_t np = (size_t)c->npresent;
  double *t = malloc(np * STRAGGLER_OPS * sizeof(double)), *col = malloc(np * sizeof(double));
  double *sum = calloc(np, sizeof(double));
  int *cnt = calloc(np, sizeof(int));
  if (!t || !col || !sum || !cnt || np < 3) goto out;
  for (int k = 0; k < c->nfuncs; k++) {
    const wd_az_func_row *f = &c->funcs[k];
    if (f->hist_lo < 0) continue;
    int64_t lo = f->hist_hi - STRAGGLER_OPS + 1 > f->hist_lo ? f->hist_hi - STRAGGLER_OPS + 1
                                                             : f->hist_lo;
    for (size_t i = 0; i < np * STRAGGLER_OPS; i++) t[i] = NAN;
    for (size_t i = 0; i < np; i++) {
      const wd_az_crank *cr = c->by_rank[c->present[i]];
      double wall = (double)wd_az_dump_of(set, cr)->wall_ns / 1e6;
      for (int h = 0; h < cr->nhist; h++) {
        const wd_az_hist *x = &cr->hist[h];
        if (x->func == f->func && x->seq >= lo && x->seq <= f->hist_hi)
          t[i * STRAGGLER_OPS + (size_t)(x->seq - lo)] = wall + (double)x->t / 1e6;
      }
    }
    for (int64_t q = 0; q <= f->hist_hi - lo; q++) {
      size_t n = 0;
      for (size_t i = 0; i < np; i++)
        if (!isnan(t[i * STRAGGLER_OPS + (size_t)q])) col[n++] = t[i * STRAGGLER_OPS + (size_t)q];
      if (n < 3) continue;
      qsort(col, n, sizeof(double), cmp_double);
      double med = col[n / 2];
      for (size_t i = 0; i < np; i++) {
        double x = t[i * STRAGGLER_OPS + (size_t)q];
        if (isnan(x)) continue;
        sum[i] += x - med;
        cnt[i]++;
      }
    }
  }
  for (size_t i = 0; i < np; i++)
    if (cnt[i] && sum[i] / cnt[i] >= thr) c->nstrag++;
  if (!c->nstrag) goto out;
  c->strag = calloc((size_t)c->nstrag, sizeof(*c->strag));
  if (!c->strag) {
    c->nstrag = 0;
    goto out;
  }
  int n = 0;
  for (size_t i = 0; i < np; i++)
    if (cnt[i] && sum[i] / cnt[i] >= thr)
      c->strag[n++] = (wd_az_straggler){c->present[i], c->by_rank[c->present[i]],
                                        sum[i] / cnt[i], cnt[i]};
  qsort(c->strag, (size_t)c->nstrag, sizeof(*c->strag), cmp_strag);
out:
  free(t);
  free(col);
  free(sum);
  free(cnt);
}

/* ---- summary lines ---- */

static void head(const wd_az_comm *c, const char *tag, char *out, size_t len) {
  wd_az_fmt(out, len, "%s: comm 0x%016" PRIx64 " (%d ranks, \"%s\")", tag, c->comm_id, c->nranks,
           wd_az_s(c->name));
}

static int culprit_ranks(const wd_az_comm *c, int reason, int *out) {
  int n = 0;
  for (int i = 0; i < c->nsus; i++)
    if (c->sus[i].culprit && c->sus[i].reason == reason) out[n++] = c->sus[i].rank;
  return n;
}

/* "dead link between rank 1 (host a) and rank 2 (host b) on channel 0: rank 1's send has waited
 * 3.0 s in SendWait, rank 2's receive 3.0 s in RecvWait, each on the other" */
static void link_text(const wd_az_set *set, const wd_az_comm *c, char *out, size_t len) {
  const wd_az_suspect *a = &c->sus[0], *b = find_suspect((wd_az_comm *)c, a->link_peer);
  if (a->link[0]) { /* found by the steps' states: said whole */
    wd_az_fmt(out, len, "%s", a->link);
    return;
  }
  if (!b || !a->cr || !b->cr || !a->op || !b->op) {
    wd_az_fmt(out, len, "dead link at rank %d: %s", a->rank, a->detail);
    return;
  }
  char sa[32], sb[32];
  wd_az_fmt(out, len,
            "dead link between rank %d (host %s) and rank %d (host %s) on channel %d: rank %d's "
            "%s has waited %s s in %s, rank %d's %s %s s in %s, each on the other",
            a->rank, wd_az_s(wd_az_dump_of(set, a->cr)->host), b->rank,
            wd_az_s(wd_az_dump_of(set, b->cr)->host), a->link_channel, a->rank,
            a->op->wait.is_send ? "send" : "receive", wd_az_secs(a->op->wait.since_ms, sa, sizeof sa),
            wd_az_s(a->op->wait.state), b->rank, b->op->wait.is_send ? "send" : "receive",
            wd_az_secs(b->op->wait.since_ms, sb, sizeof sb), wd_az_s(b->op->wait.state));
}

static void hang_summary(const wd_az_set *set, wd_az_comm *c, const int *tmp, int n) {
  char h[256], who[300], wait[300], secs[32], where[320];
  head(c, "HANG", h, sizeof(h));
  culprit_where(set, c, c->sus[0].reason, 4, where, sizeof where);
  rank_list(tmp, n, who, sizeof(who));
  rank_list(c->waiting, c->nwaiting, wait, sizeof(wait));
  wd_az_secs(c->stalled_ms, secs, sizeof(secs));
  const wd_az_suspect *s = &c->sus[0];
  const char *are = c->nwaiting == 1 ? "is" : "are";
  const char *F = wd_az_s(c->stuck_func);
  switch (s->reason) {
  case WD_AZ_NOT_ENTERED:
    if (n == 1 && s->op) /* in it, but queued behind another communicator's (stream order) */
      wd_az_fmt(c->summary, sizeof(c->summary), "%s: rank %d: %s%s; %s %s waiting in it (stalled %s s).", h,
                s->rank, s->detail, where, wait, are, secs);
    else
      wd_az_fmt(c->summary, sizeof(c->summary),
                "%s: %s never entered %s seq %" PRId64 "%s; %s %s waiting in it (stalled %s s).", h,
                who, F, c->stuck_seq, where, wait, are, secs);
    break;
  case WD_AZ_MISMATCH:
  case WD_AZ_ARGS_MISMATCH:
  case WD_AZ_DIED:
    wd_az_fmt(c->summary, sizeof(c->summary), "%s: rank %d %s%s; %s %s waiting in %s seq %" PRId64
             " (%s; stalled %s s).", h, s->rank, s->detail, where, wait, are, F, c->stuck_seq,
             s->reason == WD_AZ_DIED ? "died" : s->reason == WD_AZ_MISMATCH ? "mismatch"
                                                                           : "argument mismatch",
             secs);
    break;
  case WD_AZ_DEAD_LINK: {
    char link[700];
    link_text(set, c, link, sizeof link);
    wd_az_fmt(c->summary, sizeof(c->summary), "%s: %s; %s %s waiting in %s seq %" PRId64
              " (stalled %s s).", h, link, wait, are, F, c->stuck_seq, secs);
    break;
  }
  case WD_AZ_NETWORK_STALL:
    wd_az_fmt(c->summary, sizeof(c->summary), "%s: rank %d: %s%s; %s %s waiting in it (stalled %s s).",
             h, s->rank, s->detail, where, wait, are, secs);
    break;
  default:
    wd_az_fmt(c->summary, sizeof(c->summary),
             "%s: %s %s%s; %s %s waiting in %s seq %" PRId64 " (stalled %s s).", h, who,
             n == 1 ? s->detail : "left no dump", where, wait, are, F, c->stuck_seq, secs);
  }
}

/* The stuck collective's userTag (NCCL 2.31+), from the first waiting rank that has one: the first
 * line names the phase or step of training that hung, after "seq N". */
static void tag_summary(wd_az_comm *c) {
  uint64_t tag = 0;
  for (int i = 0; i < c->nwaiting && !tag; i++) {
    const wd_az_op *op = find_op(c->by_rank[c->waiting[i]], c->stuck_func, c->stuck_seq);
    if (op) tag = op->user_tag;
  }
  if (!tag) return;
  char at[40], ins[48];
  wd_az_fmt(at, sizeof at, "seq %" PRId64, c->stuck_seq);
  char *p = strstr(c->summary, at);
  if (!p) return;
  p += strlen(at);
  wd_az_fmt(ins, sizeof ins, " [userTag 0x%" PRIx64 "]", tag);
  size_t n = strlen(ins), rest = strlen(p);
  if ((size_t)(p - c->summary) + n + rest + 1 > sizeof c->summary) return;
  memmove(p + n, p, rest + 1);
  memcpy(p, ins, n);
}

static void summarize(const wd_az_set *set, wd_az_comm *c) {
  char h[256], tmp[300], secs[32];
  int *ranks = malloc(((size_t)c->nsus + 1) * sizeof(int));
  if (c->stuck && c->stuck_seq < 0) {
    p2p_summary(set, c);
  } else if (c->verdict == WD_AZ_HANG && ranks) {
    hang_summary(set, c, ranks, culprit_ranks(c, c->sus[0].reason, ranks));
  } else if (c->verdict == WD_AZ_NO_VERDICT) {
    head(c, "NO VERDICT", h, sizeof(h));
    rank_list(c->waiting, c->nwaiting, tmp, sizeof(tmp));
    wd_az_fmt(c->summary, sizeof(c->summary), "%s: %s %s waiting in %s seq %" PRId64
             " (stalled %s s); %s.", h, tmp, c->nwaiting == 1 ? "is" : "are",
             wd_az_s(c->stuck_func), c->stuck_seq, wd_az_secs(c->stalled_ms, secs, sizeof(secs)),
             c->note[0] ? c->note : "the evidence names no rank");
  } else {
    head(c, "OK", h, sizeof(h));
    tmp[0] = '\0';
    if (c->nmissing) {
      char r[256];
      wd_az_ranges(c->missing, (size_t)c->nmissing, r, sizeof(r));
      wd_az_fmt(tmp, sizeof(tmp), "; no dump from %s %s", c->nmissing == 1 ? "rank" : "ranks", r);
    }
    wd_az_fmt(c->summary, sizeof(c->summary), "%s: no hang found (%d of %d ranks present%s).", h,
             c->npresent, c->nranks, tmp);
  }
  free(ranks);
}

/* ---- sequence tables that cannot be ---- */

/* Collectives no rank can complete, nor be inside for long, before every rank entered them. */
static int all_ranks_needed(wd_az_str func) {
  return is(func, "AllReduce") || is(func, "AllGather") || is(func, "ReduceScatter");
}

/* No in-flight operation shows it, yet the sequence numbers do: ranks enqueued (or completed) seq
 * s of a collective that needs every rank, while another rank had not enqueued it when it
 * dumped, well after the first ones last moved. On NCCL 2.29/2.30 a KernelCh can pair with an
 * earlier, finished work (a send to self, a graph replay after eager work: NCCL-FACTS), so the
 * ranks inside a hung operation may show it completed; a completion the other ranks' numbers
 * make impossible is no evidence (docs/analyzer.md, "Order of trust"). Returns 1 when it names
 * the stuck operation; the ranks ahead are the waiting ones. */
static int seq_contradiction(const wd_az_set *set, wd_az_comm *c) {
  for (int k = 0; k < c->nfuncs; k++) {
    const wd_az_func_row *f = &c->funcs[k];
    if (f->enq_min >= f->enq_max || !all_ranks_needed(f->func)) continue;
    int64_t s = f->enq_min + 1;
    double ahead_moved = -1, behind_dumped = -1, since = 0;
    for (int i = 0; i < c->npresent; i++) {
      const wd_az_crank *cr = c->by_rank[c->present[i]];
      double wall = (double)wd_az_dump_of(set, cr)->wall_ns / 1e6;
      if (wd_az_enq(cr, f->func) >= s) {
        if (wall - cr->since_ms > ahead_moved) ahead_moved = wall - cr->since_ms;
        if (cr->since_ms > since) since = cr->since_ms;
      } else if (behind_dumped < 0 || wall < behind_dumped) {
        behind_dumped = wall;
      }
    }
    if (ahead_moved < 0 || behind_dumped < 0 || behind_dumped - ahead_moved < CONTRADICTION_MS)
      continue;
    c->stuck = 1;
    c->stuck_type = wd_az_intern("Coll");
    c->stuck_func = f->func;
    c->stuck_seq = s;
    for (int i = 0; i < c->npresent; i++)
      if (wd_az_enq(c->by_rank[c->present[i]], f->func) >= s) c->waiting[c->nwaiting++] = c->present[i];
    c->stalled_ms = since;
    wd_az_fmt(c->note, sizeof(c->note),
              "no rank lists %s seq %" PRId64 " in flight, but ranks entered it while others never "
              "did: a completion shown there rests on kernel channels paired with other work",
              wd_az_s(f->func), s);
    return 1;
  }
  return 0;
}

/* ---- CUDA graph replays ---- */

static const wd_az_glaunch *glaunch_find(const wd_az_crank *cr, int graph, int launch) {
  for (int i = 0; i < cr->nglaunch; i++)
    if (cr->glaunch[i].graph == graph && cr->glaunch[i].launch == launch) return &cr->glaunch[i];
  return NULL;
}

/* Where cr's GPU stands at launch `launch` of graph `graph`: its own entry, or, when the bound
 * left it out, what a kept launch of the same graph implies: the GPU waits for (or is inside)
 * an earlier one, so it has not reached this one in that replay; it passed or is inside a later
 * one, so it passed this one. NULL when nothing kept says. */
static const wd_az_glaunch *glaunch_at(const wd_az_crank *cr, int graph, int launch, wd_az_glaunch *tmp) {
  const wd_az_glaunch *h = glaunch_find(cr, graph, launch);
  if (h) return h;
  const wd_az_glaunch *before = NULL, *after = NULL;
  for (int i = 0; i < cr->nglaunch; i++) {
    const wd_az_glaunch *g = &cr->glaunch[i];
    if (g->graph != graph) continue;
    if (g->launch < launch && (g->state == WD_AZ_GL_WAIT || g->state == WD_AZ_GL_IN) &&
        (!before || g->launch < before->launch))
      before = g;
    if (g->launch > launch && (g->state == WD_AZ_GL_IN || g->state == WD_AZ_GL_PASSED) &&
        (!after || g->replays > after->replays))
      after = g;
  }
  if (!before && !after) return NULL;
  *tmp = before ? *before : *after;
  tmp->launch = launch;
  tmp->state = before ? WD_AZ_GL_WAIT : WD_AZ_GL_PASSED;
  tmp->fn_before = tmp->fn_total = -1;
  return tmp;
}

/* The seq NCCL's own events gave launch bl of graph bg in replay br, where NCCL numbers replays
 * (KernelCh on, or a plan with proxy work): a replay's Colls carry its replay number, in capture
 * order, so the k-th launch of a function in the graph is the k-th Coll of that function in the
 * replay. Read from the waiting ranks' operations in flight and ring (a symmetric kernel's Coll
 * stops at once); -1 unless their seqs are exactly one per launch of that function and no other
 * replay carried one of them (seq left unmoved at replays names none). */
#define REPLAY_SEQS 16
static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}
static int64_t replay_seq(const wd_az_comm *c, int bg, int bl, int64_t br) {
  const wd_az_crank *any = c->nwaiting ? c->by_rank[c->waiting[0]] : NULL;
  const wd_az_glaunch *in = any ? glaunch_find(any, bg, bl) : NULL;
  if (!in || in->fn_total <= 0) return -1;
  int nl = in->fn_total, k = in->fn_before;
  int64_t seqs[REPLAY_SEQS], olds[REPLAY_SEQS];
  int n = 0, over = 0, stale = 0, nold = 0;
  for (int w = 0; w < c->nwaiting; w++) {
    const wd_az_crank *cr = c->by_rank[c->waiting[w]];
    for (int i = 0; i < cr->nops + cr->nhist; i++) {
      int op = i < cr->nops;
      wd_az_str f = op ? cr->ops[i].func : cr->hist[i - cr->nops].func;
      int64_t s = op ? cr->ops[i].seq : cr->hist[i - cr->nops].seq;
      int64_t r = op ? cr->ops[i].replay : cr->hist[i - cr->nops].replay;
      if (f != c->stuck_func || s < 0) continue;
      if (r != br) { /* NCCL leaves seq unmoved at replays (KernelCh off): it names no replay */
        for (int j = 0; j < n; j++) stale |= seqs[j] == s;
        if (r >= 0) olds[nold < REPLAY_SEQS ? nold++ : nold - 1] = s;
        continue;
      }
      int seen = 0;
      for (int j = 0; j < n && !seen; j++) seen = seqs[j] == s;
      if (seen) continue;
      if (n == REPLAY_SEQS) over = 1;
      else seqs[n++] = s;
    }
  }
  for (int i = 0; i < nold; i++)
    for (int j = 0; j < n; j++) stale |= olds[i] == seqs[j];
  if (over || stale || n != nl || k >= n) return -1;
  qsort(seqs, (size_t)n, sizeof(*seqs), cmp_i64);
  return seqs[k];
}

/* A hang inside a replayed CUDA graph, from the captured launches' own GPU records (the plugin's
 * external events and replay counters: the GPU's word, first in the order of trust). NCCL may
 * fire nothing at a replay, so no sequence number or in-flight operation need show it. Stuck:
 * the launch and replay the most ranks' GPUs are inside, for the timeout on one of them. The
 * ranks whose GPU is not in it: not reached within that replay (the graph's work before it has
 * not finished), or never began that replay (the application did not launch the graph again, or
 * its stream is blocked before it); a rank past it is no suspect. Returns 1 when it names the
 * stuck launch. */
static int graph_check(const wd_az_set *set, const wd_az_opts *o, wd_az_comm *c) {
  int best_n = 0, bg = 0, bl = 0;
  int64_t br = 0;
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_crank *cr = c->by_rank[c->present[i]];
    /* A process that ended (PyTorch's abort, the launcher's SIGTERM) waited no timeout of ours:
     * inside it for two of its polls is stuck, as for its operations (op_stuck_in). */
    const wd_az_dump *d = wd_az_dump_of(set, cr);
    double thr = wd_az_is_teardown(d) && o->stall_ms <= 0 ? teardown_quiet(d) : threshold(set, o, cr);
    for (int k = 0; k < cr->nglaunch; k++) {
      const wd_az_glaunch *g = &cr->glaunch[k];
      if (g->state != WD_AZ_GL_IN || g->for_ms < thr) continue;
      int n = 0;
      for (int j = 0; j < c->npresent; j++) {
        const wd_az_glaunch *h = glaunch_find(c->by_rank[c->present[j]], g->graph, g->launch);
        n += h && h->state == WD_AZ_GL_IN && h->replays == g->replays;
      }
      if (n > best_n) best_n = n, bg = g->graph, bl = g->launch, br = g->replays;
    }
  }
  if (!best_n) return 0;
  c->stuck = 1;
  c->graph = bg;
  c->graph_launch = bl;
  c->graph_replay = br;
  c->stuck_type = wd_az_intern("Coll");
  c->stuck_seq = -1;
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_glaunch *h = glaunch_find(c->by_rank[c->present[i]], bg, bl);
    if (h && h->func && !c->stuck_func) c->stuck_func = h->func;
  }
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_crank *cr = c->by_rank[c->present[i]];
    wd_az_glaunch tmp;
    const wd_az_glaunch *h = glaunch_at(cr, bg, bl, &tmp);
    if (h && h->state == WD_AZ_GL_IN && h->replays == br) {
      c->waiting[c->nwaiting++] = cr->rank;
      if (h->for_ms > c->stalled_ms) c->stalled_ms = h->for_ms;
      continue;
    }
    if (h && h->replays >= br && h->state == WD_AZ_GL_PASSED) continue; /* past it */
    wd_az_suspect *s = add_suspect(c, cr->rank, WD_AZ_NOT_ENTERED, cr);
    if (!s) continue;
    if (!h)
      wd_az_fmt(s->detail, sizeof s->detail, "its dump lists no launch %d of CUDA graph %d", bl, bg);
    else if (h->state == WD_AZ_GL_WAIT && h->replays >= br)
      wd_az_fmt(s->detail, sizeof s->detail,
                "its GPU is in that replay, short of it, for %.1f s: the graph's work ahead of it "
                "has not finished", h->for_ms / 1e3);
    else if (h->state == WD_AZ_GL_WAIT)
      wd_az_fmt(s->detail, sizeof s->detail,
                "that replay was launched and its GPU has not got to it for %.1f s: work ahead of "
                "it (in the graph or on the stream) has not finished", h->for_ms / 1e3);
    else
      wd_az_fmt(s->detail, sizeof s->detail,
                "its GPU never began that replay (replay %" PRId64 " passed it): the application has "
                "not launched the graph again, or its stream is blocked before it", h->replays);
  }
  c->graph_seq = c->stuck_seq = replay_seq(c, bg, bl, br);
  return 1;
}

static void graph_summary(const wd_az_set *set, wd_az_comm *c) {
  (void)set;
  char h[256], who[300], wait[300], secs[32], what[160];
  int none = -1;
  int *r = calloc((size_t)c->nsus + 1, sizeof(int));
  int n = r ? culprit_ranks(c, WD_AZ_NOT_ENTERED, r) : 0;
  rank_list(r ? r : &none, n, who, sizeof who);
  rank_list(c->waiting, c->nwaiting, wait, sizeof wait);
  wd_az_secs(c->stalled_ms, secs, sizeof secs);
  char seq[32] = "";
  if (c->graph_seq >= 0) wd_az_fmt(seq, sizeof seq, " seq %" PRId64, c->graph_seq);
  wd_az_fmt(what, sizeof what, "%s%s (replay %" PRId64 " of CUDA graph %d, launch %d)",
            wd_az_s(c->stuck_func), seq, c->graph_replay, c->graph, c->graph_launch);
  const char *are = c->nwaiting == 1 ? "is" : "are";
  if (c->verdict == WD_AZ_HANG && n == 1) {
    head(c, "HANG", h, sizeof h);
    const wd_az_suspect *s = r ? find_suspect(c, r[0]) : NULL;
    wd_az_fmt(c->summary, sizeof c->summary, "%s: %s's GPU never reached %s: %s; %s %s inside it (stalled %s s).",
              h, who, what, s ? s->detail : "", wait, are, secs);
  } else if (c->verdict == WD_AZ_HANG) {
    head(c, "HANG", h, sizeof h);
    wd_az_fmt(c->summary, sizeof c->summary, "%s: %s: their GPUs never reached %s; %s %s inside it (stalled %s s).",
              h, who, what, wait, are, secs);
  } else {
    head(c, "NO VERDICT", h, sizeof h);
    wd_az_fmt(c->summary, sizeof c->summary, "%s: %s %s inside %s (stalled %s s); %s.", h, wait, are, what, secs,
              c->note[0] ? c->note : "every rank's GPU got there: the evidence names no rank");
  }
  free(r);
}

/* ---- driver ---- */

static void analyze_comm(const wd_az_set *set, const wd_az_opts *o, wd_az_comm *c) {
  func_table(c);
  history_check(c);
  /* Every rank's GPU inside the captured launch: no rank stands out by the graph's records; a
   * replay NCCL reported (proxy work) may still name a link or a peer by its steps, so the
   * operations decide, and the graph's finding stays only when they find nothing stuck. */
  int graph = graph_check(set, o, c);
  int ops = 0;
  for (int i = 0; i < c->npresent && !ops; i++) ops = c->by_rank[c->present[i]]->nops > 0;
  if (graph && !has_culprit(c) && ops) {
    c->stuck = c->graph = c->graph_launch = 0;
    c->graph_replay = 0;
    c->stuck_func = 0;
    c->nwaiting = c->nsus = 0;
    c->stalled_ms = 0;
    graph = 0;
  }
  if (graph) {
    missing_check(c);
    died_check(set, c);
  } else if (pick_stuck(set, o, c)) {
    collect_waiting(set, o, c);
    for (int i = 0; i < c->npresent; i++) classify_outside(c, c->by_rank[c->present[i]]);
    stream_order_check(set, o, c);
    args_check(c);
    if (!has_culprit(c)) network_check(set, o, c);
    missing_check(c);
    died_check(set, c);
  } else if (p2p_check(set, o, c)) {
    missing_check(c);
    died_check(set, c);
  } else if (seq_contradiction(set, c)) {
    for (int i = 0; i < c->npresent; i++) classify_outside(c, c->by_rank[c->present[i]]);
    missing_check(c);
    died_check(set, c);
  } else if (graph_check(set, o, c)) {
    missing_check(c);
    died_check(set, c);
  }
  straggler_check(set, o, c);
  qsort(c->sus, (size_t)c->nsus, sizeof(*c->sus), cmp_suspect);
  if (!c->stuck) c->verdict = WD_AZ_NO_HANG;
  else c->verdict = has_culprit(c) ? WD_AZ_HANG : WD_AZ_NO_VERDICT;
  if (c->graph) graph_summary(set, c);
  else summarize(set, c);
  if (c->stuck && c->stuck_seq >= 0) tag_summary(c);
}

static int verdict_rank(int v) { return v == WD_AZ_HANG ? 0 : v == WD_AZ_NO_VERDICT ? 1 : 2; }

static int cmp_comm(const void *a, const void *b) {
  const wd_az_comm *x = a, *y = b;
  int rx = verdict_rank(x->verdict), ry = verdict_rank(y->verdict);
  if (rx != ry) return rx - ry;
  if (x->nwaiting != y->nwaiting) return y->nwaiting - x->nwaiting;
  return x->comm_id < y->comm_id ? -1 : x->comm_id > y->comm_id;
}

static size_t *sorted_kept(const wd_az_set *set, size_t *n) {
  size_t *idx = malloc((set->ncranks + 1) * sizeof(*idx));
  *n = 0;
  if (!idx) return NULL;
  for (size_t i = 0; i < set->ncranks; i++)
    if (set->cranks[i].kept) idx[(*n)++] = i;
  g_set = set;
  qsort(idx, *n, sizeof(*idx), cmp_crank);
  return idx;
}

/* Captured launches the GPU was inside or first waited for that the analyzer's bound left out,
 * over the ranks judged: said on the first line. */
static size_t glaunch_cut_total(const wd_az_set *set, size_t *nranks) {
  size_t n = 0;
  *nranks = 0;
  for (size_t i = 0; set && i < set->ncranks; i++)
    if (set->cranks[i].kept && set->cranks[i].glaunch_cut) n += (size_t)set->cranks[i].glaunch_cut, ++*nranks;
  return n;
}

/* The earliest stall dump of what is judged: the plugin saw an operation stuck there. */
static const wd_az_dump *judged_stall(const wd_az_set *set) {
  const wd_az_dump *first = NULL;
  for (size_t i = 0; set && i < set->ndumps; i++) {
    const wd_az_dump *d = &set->dumps[i];
    if (d->kept && !d->aside && d->stall_what && is(d->reason, "stall") && (!first || d->wall_ns < first->wall_ns))
      first = d;
  }
  return first;
}

/* Captured launches the plugin did not follow (its slots all held by live graphs, or the driver
 * refused its node), over the ranks judged: a hang inside one shows in no record. */
static void unfollowed_note(const wd_az_set *set, char *out, size_t len) {
  int64_t n = 0;
  size_t nr = 0;
  out[0] = '\0';
  for (size_t i = 0; set && i < set->ncranks; i++)
    if (set->cranks[i].kept && set->cranks[i].glaunch_unfollowed > 0) n += set->cranks[i].glaunch_unfollowed, nr++;
  if (n)
    wd_az_fmt(out, len,
              " [%" PRId64 " captured launch%s on %zu rank%s not followed (NCCL_WATCHDOG_GRAPH_LAUNCHES slots "
              "held by live graphs, or the driver refused the plugin's node): a hang inside one shows in no "
              "record]", n, n == 1 ? "" : "es", nr, nr == 1 ? "" : "s");
}

static void overall_line(wd_az_result *res) {
  size_t ncutr, ncut = glaunch_cut_total(res->set, &ncutr);
  if (res->ncomms && res->comms[0].verdict != WD_AZ_NO_HANG) {
    if (ncut)
      wd_az_fmt(res->summary, sizeof(res->summary),
                "%s [the analyzer's bound (%d per rank) left out %zu captured launch%s the GPU was in or "
                "waited for, on %zu rank%s]", res->comms[0].summary, WD_AZ_GLAUNCH, ncut, ncut == 1 ? "" : "es",
                ncutr, ncutr == 1 ? "" : "s");
    else
      wd_az_fmt(res->summary, sizeof(res->summary), "%s", res->comms[0].summary);
    return;
  }
  /* Not hung, but slow: the first fail-slow finding (the slowest link's, else a late rank's)
   * belongs on the first line, which is all an alert or a log line carries. */
  const char *slow = NULL, *cname = "";
  for (size_t i = 0; i < res->ncomms && !slow; i++)
    if (res->comms[i].slow_link[0]) slow = res->comms[i].slow_link, cname = wd_az_s(res->comms[i].name);
  for (size_t i = 0; i < res->ncomms && !slow; i++)
    if (res->comms[i].late[0]) slow = res->comms[i].late, cname = wd_az_s(res->comms[i].name);
  /* "No hang" needs every dump of the job read whole: evidence cut by a bound may hold it. */
  if (res->set && res->set->ncut) {
    wd_az_fmt(res->summary, sizeof(res->summary),
             "NO VERDICT: no hang found in what was read (%zu communicator%s, %zu dump%s), but %zu "
             "file%s of the job were cut by the analyzer's bounds (listed under \"files skipped\"): "
             "it cannot say there is none", res->ncomms, res->ncomms == 1 ? "" : "s", res->ndumps_read,
             res->ndumps_read == 1 ? "" : "s", res->set->ncut, res->set->ncut == 1 ? "" : "s");
    return;
  }
  if (ncut) {
    wd_az_fmt(res->summary, sizeof(res->summary),
              "NO VERDICT: no hang found in what was read, but the analyzer's bound (%d per rank) left out "
              "%zu captured launch%s the GPU was in or waited for, on %zu rank%s: it cannot say there is none",
              WD_AZ_GLAUNCH, ncut, ncut == 1 ? "" : "es", ncutr, ncutr == 1 ? "" : "s");
    return;
  }
  /* The plugin saw an operation stuck for its timeout and nothing read since says the episode
   * resumed: evidence that shows no rank stuck contradicts it, and "no hang" needs proof. */
  const wd_az_dump *sd = res->set && !res->set->resumed_note[0] ? judged_stall(res->set) : NULL;
  if (sd) {
    wd_az_fmt(res->summary, sizeof(res->summary),
              "NO VERDICT: the stall dump of host %s pid %d says %s, but no rank of what was read "
              "(%zu communicator%s, %zu dump%s) shows it stuck: the analyzer cannot say there is no hang; "
              "read that dump (%s)", wd_az_s(sd->host), sd->pid, wd_az_s(sd->stall_what), res->ncomms,
              res->ncomms == 1 ? "" : "s", res->ndumps_read, res->ndumps_read == 1 ? "" : "s", sd->path);
    return;
  }
  wd_az_fmt(res->summary, sizeof(res->summary),
           "OK: no hang found in %zu communicator%s (%zu dump%s read)%s%s%s%s%s", res->ncomms,
           res->ncomms == 1 ? "" : "s", res->ndumps_read, res->ndumps_read == 1 ? "" : "s",
           slow ? "; but in \"" : ".", slow ? cname : "", slow ? "\", " : "", slow ? slow : "", slow ? "." : "");
}

static void overall_summary(wd_az_result *res) {
  char unf[256];
  unfollowed_note(res->set, unf, sizeof unf);
  overall_line(res);
  size_t len = strlen(res->summary);
  if (unf[0] && len + strlen(unf) < sizeof(res->summary)) memcpy(res->summary + len, unf, strlen(unf) + 1);
}

static int cmp_dbl(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* KernelPhase (NCCL 2.31+): in a collective's kernel, initial_sync waits for the peers. Across
 * the recent collectives every rank reported phases for, the rank that waited least there
 * arrived last; one that does so at three quarters of them (at least 3), waiting under half the
 * others' median, is late by habit: a slow rank, whatever the verdict on the hang. */
static void arrival_check(wd_az_comm *c) {
  c->arrival_rank = -1;
  int nr = 0;
  for (int i = 0; i < c->npresent; i++) nr += c->by_rank[c->present[i]]->nphase > 0;
  if (nr < 2) return;
  int *last = calloc((size_t)c->nranks, sizeof *last);
  double *own = calloc((size_t)c->nranks, sizeof *own), *others = NULL;
  int nothers = 0, counted = 0;
  others = malloc((size_t)(WD_AZ_PHASES * nr) * sizeof *others);
  if (!last || !own || !others) goto out;
  const wd_az_crank *ref = NULL;
  for (int i = 0; i < c->npresent && !ref; i++)
    if (c->by_rank[c->present[i]]->nphase) ref = c->by_rank[c->present[i]];
  for (int k = 0; k < ref->nphase; k++) {
    const wd_az_phase *p = &ref->phase[k];
    int min_rank = -1, all = 1;
    double min_ms = 0;
    for (int i = 0; i < c->npresent && all; i++) {
      const wd_az_crank *cr = c->by_rank[c->present[i]];
      if (!cr->nphase) continue;
      const wd_az_phase *q = NULL;
      for (int j = 0; j < cr->nphase && !q; j++)
        if (cr->phase[j].seq == p->seq && cr->phase[j].func == p->func && cr->phase[j].sync_ms >= 0) q = &cr->phase[j];
      if (!q) all = 0;
      else if (min_rank < 0 || q->sync_ms < min_ms) min_rank = cr->rank, min_ms = q->sync_ms;
    }
    if (!all || min_rank < 0) continue;
    counted++;
    last[min_rank]++;
    own[min_rank] += min_ms;
    for (int i = 0; i < c->npresent; i++) {
      const wd_az_crank *cr = c->by_rank[c->present[i]];
      if (cr->rank == min_rank) continue;
      for (int j = 0; j < cr->nphase; j++)
        if (cr->phase[j].seq == p->seq && cr->phase[j].func == p->func && cr->phase[j].sync_ms >= 0)
          others[nothers++] = cr->phase[j].sync_ms;
    }
  }
  int best = -1;
  for (int r = 0; r < c->nranks; r++)
    if (last[r] && (best < 0 || last[r] > last[best])) best = r;
  if (best < 0 || counted < 3 || 4 * last[best] < 3 * counted || !nothers) goto out;
  qsort(others, (size_t)nothers, sizeof *others, cmp_dbl);
  double med = others[nothers / 2], mine = own[best] / last[best];
  if (!(mine < med / 2)) goto out;
  c->arrival_rank = best;
  wd_az_fmt(c->arrival, sizeof c->arrival,
            "rank %d arrived last at %d of %d recent collectives (KernelPhase: the others waited "
            "%.3g ms in initial_sync on median, rank %d %.3g ms): a slow rank",
            best, last[best], counted, med, best, mine);
out:
  free(last);
  free(own);
  free(others);
}

/* Fail-slow (telemetry in the dumps): the link of the communicator whose throughput is under
 * half the median of its links in the same direction (at least 4 of them), the slowest first;
 * and, when KernelPhase did not already say it, the rank whose collectives wait least for the
 * others, under a quarter of the median of at least 3 ranks. */
enum { WD_AZ_SLOW_MIN_LINKS = 4 };
static void failslow_check(const wd_az_set *set, wd_az_comm *c) {
  c->slow_rank = c->slow_peer = c->slow_channel = c->slow_send = c->late_rank = -1;
  size_t n = 0;
  for (int i = 0; i < c->npresent; i++) n += (size_t)c->by_rank[c->present[i]]->ntlinks;
  double *rates = n ? malloc(n * sizeof *rates) : NULL;
  for (int dir = 1; rates && dir >= 0; dir--) {
    size_t k = 0;
    const wd_az_crank *worst_cr = NULL;
    const wd_az_tlink *worst = NULL;
    for (int i = 0; i < c->npresent; i++) {
      const wd_az_crank *cr = c->by_rank[c->present[i]];
      for (int j = 0; j < cr->ntlinks; j++) {
        const wd_az_tlink *l = &cr->tlinks[j];
        if (l->send != dir) continue;
        rates[k++] = l->rate;
        if (!worst || l->rate < worst->rate) worst = l, worst_cr = cr;
      }
    }
    if (k < WD_AZ_SLOW_MIN_LINKS) continue;
    qsort(rates, k, sizeof *rates, cmp_dbl);
    double med = rates[k / 2];
    if (!(worst->rate < med / 2) || (c->slow_rank >= 0 && worst->rate / med >= c->slow_ratio)) continue;
    char me[160], peer[160] = "";
    wd_az_ident_text(set, worst_cr, me, sizeof me);
    const wd_az_crank *pc = worst->peer < c->nranks ? c->by_rank[worst->peer] : NULL;
    if (pc) {
      const wd_az_dump *pd = wd_az_dump_of(set, pc);
      wd_az_fmt(peer, sizeof peer, " (host %s)", wd_az_s(pd->host));
    }
    double mean_ms = 0;
    size_t others = 0;
    for (int i = 0; i < c->npresent; i++) {
      const wd_az_crank *cr = c->by_rank[c->present[i]];
      for (int j = 0; j < cr->ntlinks; j++)
        if (cr->tlinks[j].send == dir && &cr->tlinks[j] != worst) mean_ms += cr->tlinks[j].step_ms, others++;
    }
    c->slow_rank = worst_cr->rank;
    c->slow_peer = worst->peer;
    c->slow_channel = worst->channel;
    c->slow_send = dir;
    c->slow_ratio = worst->rate / med;
    wd_az_fmt(c->slow_link, sizeof c->slow_link,
              "slow link: rank %d (%s) %s rank %d%s on channel %d at %.3g MB/s, %.2gx the median of "
              "the communicator's %zu %s links (mean step %.3g ms against %.3g): a degraded NIC, "
              "cable or switch port on that path",
              worst_cr->rank, me, dir ? "->" : "<-", worst->peer, peer, worst->channel, worst->rate / 1e6,
              worst->rate / med, k, dir ? "transmitting" : "receiving", worst->step_ms,
              others ? mean_ms / (double)others : 0.0);
  }
  free(rates);
  if (c->arrival[0]) return;
  double waits[4096];
  int nw = 0, late = -1;
  double late_ms = 0;
  for (int i = 0; i < c->npresent && nw < 4096; i++) {
    const wd_az_crank *cr = c->by_rank[c->present[i]];
    if (!cr->t_arrival) continue;
    waits[nw++] = cr->t_wait_ms;
    if (late < 0 || cr->t_wait_ms < late_ms) late = cr->rank, late_ms = cr->t_wait_ms;
  }
  if (nw < 3) return;
  qsort(waits, (size_t)nw, sizeof *waits, cmp_dbl);
  double med = waits[nw / 2];
  if (!(late_ms < med / 4)) return;
  const wd_az_crank *cr = c->by_rank[late];
  char me[160];
  wd_az_ident_text(set, cr, me, sizeof me);
  c->late_rank = late;
  wd_az_fmt(c->late, sizeof c->late,
            "late rank: rank %d (%s) waits %.3g ms for its peers in its collectives, the median rank "
            "%.3g ms (%s): the others wait for it: a slow GPU, data loader or host",
            late, me, late_ms, med, wd_az_s(cr->t_measure));
}

int wd_az_analyze(const wd_az_set *set, const wd_az_opts *o, wd_az_result *res) {
  memset(res, 0, sizeof(*res));
  res->set = set;
  res->ndumps_read = set->ndumps;
  for (size_t i = 0; i < set->ndumps; i++) res->ndumps_kept += set->dumps[i].kept;
  g_first_stall_ms = 0;
  pxn_index(set);
  for (size_t i = 0; i < set->ndumps; i++) {
    const wd_az_dump *d = &set->dumps[i];
    double t = (double)d->wall_ns / 1e6;
    if (d->kept && is(d->reason, "stall") && (g_first_stall_ms <= 0 || t < g_first_stall_ms))
      g_first_stall_ms = t;
  }
  size_t n;
  size_t *idx = sorted_kept(set, &n);
  if (!idx) return -1;
  res->comms = calloc(n + 1, sizeof(*res->comms));
  size_t nc = 0;
  for (size_t i = 0; res->comms && i < n;) {
    size_t j = i;
    while (j < n && set->cranks[idx[j]].comm_id == set->cranks[idx[i]].comm_id) j++;
    wd_az_comm *c = &res->comms[nc++];
    if (fill_comm(set, c, idx + i, j - i) != 0) break;
    analyze_comm(set, o, c);
    arrival_check(c);
    failslow_check(set, c);
    i = j;
  }
  res->ncomms = nc;
  free(idx);
  free(g_pxn);
  g_pxn = NULL;
  g_npxn = 0;
  if (!res->comms) return -1;
  qsort(res->comms, res->ncomms, sizeof(*res->comms), cmp_comm);
  overall_summary(res);
  return 0;
}

void wd_az_result_free(wd_az_result *res) {
  for (size_t i = 0; i < res->ncomms; i++) {
    wd_az_comm *c = &res->comms[i];
    free(c->by_rank);
    free(c->present);
    free(c->missing);
    free(c->waiting);
    free(c->sus);
    free(c->strag);
  }
  free(res->comms);
  memset(res, 0, sizeof(*res));
}
