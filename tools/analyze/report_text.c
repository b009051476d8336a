#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "job.h"

#define MAX_GROUPS 4   /* value groups shown per table cell */
#define MAX_CULPRITS 8 /* culprit lines after a summary */

typedef struct vr {
  int64_t v;
  int rank;
} vr;

static int cmp_vr(const void *a, const void *b) {
  const vr *x = a, *y = b;
  if (x->v != y->v) return x->v < y->v ? -1 : 1;
  return x->rank - y->rank;
}

/* "88411: 3 | 88412: 0-2,4-7", or "88412 (all)" when every present rank agrees. */
static void value_groups(const wd_az_comm *c, wd_az_str func, int done, char *out, size_t len) {
  vr *p = malloc((size_t)c->npresent * sizeof(*p));
  int *ranks = malloc((size_t)c->npresent * sizeof(int));
  out[0] = '\0';
  if (!p || !ranks) goto end;
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_crank *cr = c->by_rank[c->present[i]];
    p[i] = (vr){done ? wd_az_done(cr, func) : wd_az_enq(cr, func), cr->rank};
  }
  qsort(p, (size_t)c->npresent, sizeof(*p), cmp_vr);
  size_t pos = 0;
  int groups = 0;
  for (int i = 0; i < c->npresent && pos + 1 < len;) {
    int n = 0, j = i;
    for (; j < c->npresent && p[j].v == p[i].v; j++) ranks[n++] = p[j].rank;
    char r[128];
    if (n == c->npresent) wd_az_fmt(r, sizeof(r), "all");
    else wd_az_ranges(ranks, (size_t)n, r, sizeof(r));
    int w = groups == MAX_GROUPS ? snprintf(out + pos, len - pos, " | ...")
                                 : snprintf(out + pos, len - pos, "%s%" PRId64 ": %s",
                                            groups ? " | " : "", p[i].v, r);
    if (w < 0 || groups++ == MAX_GROUPS) break;
    pos += (size_t)w;
    i = j;
  }
end:
  free(p);
  free(ranks);
}

static void print_ranges(FILE *f, const char *label, const int *r, int n) {
  char buf[512];
  wd_az_ranges(r, (size_t)n, buf, sizeof(buf));
  fprintf(f, "%s%s (%d)", label, n ? buf : "none", n);
}

static void print_funcs(FILE *f, const wd_az_comm *c) {
  fprintf(f, "  %-14s %-32s %-32s %s\n", "function", "last enqueued", "last completed",
          "diverges at");
  for (int k = 0; k < c->nfuncs; k++) {
    const wd_az_func_row *row = &c->funcs[k];
    char enq[256], done[256], div[32] = "-";
    value_groups(c, row->func, 0, enq, sizeof(enq));
    value_groups(c, row->func, 1, done, sizeof(done));
    if (row->first_div >= 0) wd_az_fmt(div, sizeof(div), "%" PRId64, row->first_div);
    fprintf(f, "  %-14s %-32s %-32s %s\n", wd_az_s(row->func), enq, done, div);
  }
  for (int k = 0; k < c->nfuncs; k++) {
    const wd_az_func_row *row = &c->funcs[k];
    if (row->hist_lo < 0) continue;
    fprintf(f, "  history %s: seqs %" PRId64 "-%" PRId64 " compared on every rank: ",
            wd_az_s(row->func), row->hist_lo, row->hist_hi);
    if (row->hist_div >= 0) fprintf(f, "arguments differ at seq %" PRId64 "\n", row->hist_div);
    else fprintf(f, "no divergence\n");
  }
}

static void print_tree(FILE *f, const wd_az_crank *cr, const wd_az_op *op, const char *indent) {
  char text[256], wait[256];
  wd_az_op_text(op, text, sizeof(text));
  wd_az_wait_text(&op->wait, wait, sizeof(wait));
  fprintf(f, "%sopen tree of rank %d: %s %s; kernel channels %d of %d done; %d ProxyOp%s open; "
             "waiting on: %s\n",
          indent, cr->rank, wd_az_s(op->type), text, op->kch_done, op->kch_expected,
          op->nproxy_open, op->nproxy_open == 1 ? "" : "s", wait);
}

/* The open tree of the waiting rank that has gone longest without progress. */
static void print_stalled_tree(FILE *f, const wd_az_comm *c) {
  const wd_az_crank *best = NULL;
  const wd_az_op *bop = NULL;
  for (int i = 0; i < c->nwaiting; i++) {
    const wd_az_crank *cr = c->by_rank[c->waiting[i]];
    for (int k = 0; k < cr->nops; k++) {
      const wd_az_op *op = &cr->ops[k];
      if (op->func != c->stuck_func || op->seq != c->stuck_seq) continue;
      if (!bop || op->since_ms > bop->since_ms) best = cr, bop = op;
    }
  }
  if (bop) print_tree(f, best, bop, "  ");
}

static void print_suspects(FILE *f, const wd_az_set *set, const wd_az_comm *c) {
  if (!c->nsus) return;
  fprintf(f, "  suspects:\n");
  for (int i = 0; i < c->nsus; i++) {
    const wd_az_suspect *s = &c->sus[i];
    char id[256] = "no dump";
    if (s->cr) wd_az_ident_text(set, s->cr, id, sizeof id);
    fprintf(f, "    rank %-6d %-14s %s%s [%s]\n", s->rank, wd_az_reason_name(s->reason), s->detail,
            s->culprit ? "" : " (not the cause)", id);
  }
}

static void print_stragglers(FILE *f, const wd_az_set *set, const wd_az_comm *c) {
  if (!c->nstrag) return;
  fprintf(f, "  stragglers (late, not hung):\n");
  for (int i = 0; i < c->nstrag && i < MAX_CULPRITS; i++) {
    const wd_az_straggler *g = &c->strag[i];
    char id[256], secs[32];
    wd_az_ident_text(set, g->cr, id, sizeof id);
    fprintf(f, "    rank %-6d enters %s s after the median rank (mean of %d operations) [%s]\n",
            g->rank, wd_az_secs(g->lag_ms, secs, sizeof secs), g->nops, id);
  }
  if (c->nstrag > MAX_CULPRITS) fprintf(f, "    ... and %d more\n", c->nstrag - MAX_CULPRITS);
}

/* "STRAGGLERS (slow, not hung): global rank 20 on host node002 ... enters collectives 2.0 s late
 * (pp_t0_d2, dp_t0_p2)": one entry per process, the slowest first. */
static void print_straggler_line(FILE *f, const wd_az_result *res) {
  uint32_t done[MAX_CULPRITS];
  int shown = 0;
  for (;;) {
    const wd_az_straggler *best = NULL;
    for (size_t i = 0; i < res->ncomms; i++)
      for (int k = 0; k < res->comms[i].nstrag; k++) {
        const wd_az_straggler *g = &res->comms[i].strag[k];
        int seen = 0;
        for (int q = 0; q < shown; q++) seen |= done[q] == g->cr->dump;
        if (!seen && (!best || g->lag_ms > best->lag_ms)) best = g;
      }
    if (!best || shown == MAX_CULPRITS) break;
    char id[256], secs[32], comms[256] = "";
    size_t pos = 0;
    for (size_t i = 0; i < res->ncomms; i++)
      for (int k = 0; k < res->comms[i].nstrag; k++)
        if (res->comms[i].strag[k].cr->dump == best->cr->dump && pos < sizeof comms) {
          int n = snprintf(comms + pos, sizeof comms - pos, "%s%s", pos ? ", " : "",
                           wd_az_s(res->comms[i].name));
          if (n > 0) pos += (size_t)n;
        }
    wd_az_ident_text(res->set, best->cr, id, sizeof id);
    fprintf(f, "%s %s enters collectives %s s late (%s)", shown ? ";" : "STRAGGLERS (slow, not hung):",
            id, wd_az_secs(best->lag_ms, secs, sizeof secs), comms);
    done[shown++] = best->cr->dump;
  }
  if (shown) fputc('\n', f);
}

static void print_comm(FILE *f, const wd_az_set *set, const wd_az_comm *c) {
  fprintf(f, "comm 0x%016" PRIx64 " \"%s\": %d ranks, verdict %s; ", c->comm_id, wd_az_s(c->name),
          c->nranks, wd_az_verdict_name(c->verdict));
  print_ranges(f, "present ", c->present, c->npresent);
  print_ranges(f, ", missing ", c->missing, c->nmissing);
  fputc('\n', f);
  print_funcs(f, c);
  if (c->stuck) {
    char w[512], secs[32];
    wd_az_ranges(c->waiting, (size_t)c->nwaiting, w, sizeof(w));
    /* Point-to-point operations have no sequence number (-1). */
    char seq[32] = "";
    if (c->stuck_seq >= 0) snprintf(seq, sizeof seq, " seq %" PRId64, c->stuck_seq);
    fprintf(f, "  stuck in %s%s: in flight on %s (%d), longest without progress %s s\n",
            wd_az_s(c->stuck_func), seq, w, c->nwaiting, wd_az_secs(c->stalled_ms, secs, sizeof(secs)));
    print_stalled_tree(f, c);
  } else if (c->ninflight) {
    fprintf(f, "  %d rank%s with operations in flight, none stalled\n", c->ninflight,
            c->ninflight == 1 ? "" : "s");
  }
  if (c->note[0]) fprintf(f, "  note: %s\n", c->note);
  if (c->arrival[0]) fprintf(f, "  arrival: %s\n", c->arrival);
  if (c->slow_link[0]) fprintf(f, "  %s\n", c->slow_link);
  if (c->late[0]) fprintf(f, "  %s\n", c->late);
  print_suspects(f, set, c);
  print_stragglers(f, set, c);
}

static void print_verbose(FILE *f, const wd_az_result *res, const wd_az_comm *c) {
  for (int i = 0; i < c->npresent; i++) {
    const wd_az_crank *cr = c->by_rank[c->present[i]];
    const wd_az_dump *d = wd_az_dump_of(res->set, cr);
    char id[256];
    wd_az_ident_text(res->set, cr, id, sizeof id);
    fprintf(f, "    rank %-6d %s %-6s", cr->rank, id, wd_az_s(d->reason));
    for (int k = 0; k < cr->nseq; k++)
      fprintf(f, " %s %" PRId64 "/%" PRId64, wd_az_s(cr->seq[k].func), cr->seq[k].enq,
              cr->seq[k].done);
    for (int k = 0; k < cr->nops; k++) {
      char op[256];
      wd_az_op_text(&cr->ops[k], op, sizeof(op));
      fprintf(f, "; in flight: %s", op);
    }
    fprintf(f, "  [%s]\n", d->path);
  }
}

/* Lines after a summary: what each culprit was doing. */
static void print_culprits(FILE *f, const wd_az_result *res, const wd_az_comm *c) {
  int shown = 0;
  for (int i = 0; i < c->nsus && shown < MAX_CULPRITS; i++) {
    const wd_az_suspect *s = &c->sus[i];
    if (!s->culprit || !s->cr) continue;
    char doing[2048];
    wd_az_doing_text(res->set, s->cr, doing, sizeof(doing));
    fprintf(f, "%s\n", doing);
    /* A peer dump is a summary (the newest records of each ring): ask the process for all. */
    const wd_az_dump *d = wd_az_dump_of(res->set, s->cr);
    if (!strcmp(wd_az_s(d->reason), "peer") && s->cr->ring_lost > 0)
      fprintf(f, "  (its peer dump holds the newest records only: for whole rings, kill -USR1 %d on %s)\n",
              d->pid, wd_az_s(d->host));
    if (s->op && s->reason == WD_AZ_NETWORK_STALL) print_tree(f, s->cr, s->op, "");
    shown++;
  }
}

static void print_first(FILE *f, const char *line, const wd_az_set *set, int *first) {
  const char *note = set ? set->attempt_note : "";
  /* An episode the job itself saw resume: its verdict is of that moment, and says so first. */
  if (*first && set && set->resumed_note[0] && strncmp(line, "OK", 2) != 0)
    fprintf(f, "RESUMED: %s; at that moment: ", set->resumed_note);
  if (*first && note[0]) fprintf(f, "%s [%s]\n", line, note);
  else fprintf(f, "%s\n", line);
  *first = 0;
}

static void print_skipped(FILE *f, const wd_az_set *set) {
  if (!set->nskips) return;
  fprintf(f, "\nfiles skipped (%zu):\n", set->nskips);
  for (size_t i = 0; i < set->nskips; i++)
    fprintf(f, "  %s: %s\n", set->skips[i].path, set->skips[i].why);
}

void wd_az_report_text(FILE *f, const wd_az_result *res, int verbose) {
  /* Several communicators hung on each other: the job's root cause first. */
  wd_az_job job;
  wd_az_job_verdict(res, &job);
  /* The first line says which attempt it is about when the directory holds several. */
  int first = 1;
  const wd_az_set *set = res->set;
  if (job.host) print_first(f, job.host_line, set, &first);
  if (job.found && (job.nlinks > 1 || job.deadlock)) print_first(f, job.line, set, &first);
  print_first(f, res->summary, set, &first);
  if (res->set && res->set->clock_note[0]) fprintf(f, "clocks: %s\n", res->set->clock_note);
  print_straggler_line(f, res);
  for (size_t i = 0; i < res->ncomms; i++) {
    const wd_az_comm *c = &res->comms[i];
    if (c->verdict == WD_AZ_NO_HANG) break;
    if (i) fprintf(f, "%s\n", c->summary);
    print_culprits(f, res, c);
  }
  fprintf(f, "\n%zu dump%s read, %zu used, %zu communicator%s\n", res->ndumps_read,
          res->ndumps_read == 1 ? "" : "s", res->ndumps_kept, res->ncomms,
          res->ncomms == 1 ? "" : "s");
  for (size_t i = 0; i < res->ncomms; i++) {
    fputc('\n', f);
    print_comm(f, res->set, &res->comms[i]);
    if (verbose) print_verbose(f, res, &res->comms[i]);
  }
  print_skipped(f, res->set);
}
