/*
 * The HTML report (--html FILE): one self-contained page (inline CSS and SVG, no script, nothing
 * fetched) for people who would rather look at where each rank stands than read 4,096 lines:
 * the verdict lines, per hung communicator a chart of each rank's last enqueued and completed
 * sequence number with the culprits in red, the open tree of the stuck operation, and the
 * suspects with their global identity.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "report.h"

#define HTML_COMMS 32    /* communicators drawn; the rest are listed */
#define HTML_BARS 1024   /* ranks drawn per chart */
#define CHART_W 960
#define CHART_H 180

static void esc(FILE *f, const char *s) {
  for (; s && *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    default: fputc(*s, f);
    }
  }
}

static int is_culprit(const wd_az_comm *c, int rank) {
  for (int i = 0; i < c->nsus; i++)
    if (c->sus[i].rank == rank && c->sus[i].culprit) return 1;
  return 0;
}

static int is_waiting(const wd_az_comm *c, int rank) {
  for (int i = 0; i < c->nwaiting; i++)
    if (c->waiting[i] == rank) return 1;
  return 0;
}

/* Per rank: completed (filled) and enqueued (outlined) sequence numbers of the function the
 * communicator is stuck in (else its first), above the lowest completed one. */
static void chart(FILE *f, const wd_az_comm *c) {
  wd_az_str func = c->stuck && c->stuck_seq >= 0 ? c->stuck_func : c->nfuncs ? c->funcs[0].func : 0;
  if (!func || !c->npresent) return;
  int n = c->npresent < HTML_BARS ? c->npresent : HTML_BARS;
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (int i = 0; i < n; i++) {
    const wd_az_crank *cr = c->by_rank[c->present[i]];
    int64_t e = wd_az_enq(cr, func), d = wd_az_done(cr, func);
    if (d < lo) lo = d;
    if (e > hi) hi = e;
  }
  lo -= 2; /* every bar shows, even the lowest */
  double span = hi > lo ? (double)(hi - lo) : 1, bw = (double)CHART_W / n;
  fprintf(f, "<figure><svg class=\"chart\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
             "role=\"img\"><title>last enqueued and completed %s per rank</title>\n",
          CHART_W, CHART_H + 20, CHART_W, CHART_H + 20, wd_az_s(func));
  for (int i = 0; i < n; i++) {
    int r = c->present[i];
    const wd_az_crank *cr = c->by_rank[r];
    int64_t e = wd_az_enq(cr, func), d = wd_az_done(cr, func);
    double he = (double)(e - lo) / span * CHART_H, hd = (double)(d - lo) / span * CHART_H;
    const char *cls = is_culprit(c, r) ? "culprit" : is_waiting(c, r) ? "waiting" : "other";
    fprintf(f, "<g class=\"%s\"><title>rank %d: enqueued %" PRId64 ", completed %" PRId64
               "</title><rect class=\"done\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>"
               "<rect class=\"enq\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/></g>\n",
            cls, r, e, d, i * bw + bw * 0.1, CHART_H - hd, bw * 0.8, hd, i * bw + bw * 0.1,
            CHART_H - he, bw * 0.8, he - hd > 0 ? he - hd : 0);
    if (n <= 64 || i % (n / 32 + 1) == 0)
      fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"axis\">%d</text>\n", i * bw + bw / 2, CHART_H + 14, r);
  }
  fprintf(f, "</svg><figcaption>%s: last completed (filled) and last enqueued (outline) "
             "sequence number per rank, from %" PRId64 "; <span class=\"culprit\">culprit</span>, "
             "<span class=\"waiting\">waiting</span>%s</figcaption></figure>\n",
          wd_az_s(func), lo + 2, n < c->npresent ? "; first ranks only" : "");
}

static void tree(FILE *f, const wd_az_comm *c) {
  const wd_az_crank *best = NULL;
  const wd_az_op *bop = NULL;
  for (int i = 0; i < c->nwaiting; i++) {
    const wd_az_crank *cr = c->by_rank[c->waiting[i]];
    for (int k = 0; k < cr->nops; k++)
      if (cr->ops[k].func == c->stuck_func && (c->stuck_seq < 0 || cr->ops[k].seq == c->stuck_seq) &&
          (!bop || cr->ops[k].since_ms > bop->since_ms))
        best = cr, bop = &cr->ops[k];
  }
  if (!bop) return;
  char op[256], wait[256];
  wd_az_op_text(bop, op, sizeof op);
  wd_az_wait_text(&bop->wait, wait, sizeof wait);
  fprintf(f, "<h3>Open tree of rank %d (the longest without progress)</h3><pre class=\"tree\">",
          best->rank);
  if (bop->seq >= 0) { /* a p2p's text already starts with its type */
    esc(f, wd_az_s(bop->type));
    fputc(' ', f);
  }
  esc(f, op);
  fprintf(f, "\n  kernel channels: %d of %d done\n  ProxyOps open: %d\n    waiting on: ",
          bop->kch_done, bop->kch_expected, bop->nproxy_open);
  esc(f, wait);
  fputs("</pre>\n", f);
}

static void suspects(FILE *f, const wd_az_set *set, const wd_az_comm *c) {
  if (!c->nsus && !c->nstrag) return;
  fputs("<table><tr><th>rank</th><th>reason</th><th>where</th><th>detail</th></tr>\n", f);
  for (int i = 0; i < c->nsus; i++) {
    const wd_az_suspect *s = &c->sus[i];
    char id[256] = "no dump";
    if (s->cr) wd_az_ident_text(set, s->cr, id, sizeof id);
    fprintf(f, "<tr class=\"%s\"><td>%d</td><td>%s</td><td>", s->culprit ? "culprit" : "other",
            s->rank, wd_az_reason_name(s->reason));
    esc(f, id);
    fputs("</td><td>", f);
    esc(f, s->detail);
    fputs(s->culprit ? "" : " (not the cause)", f);
    fputs("</td></tr>\n", f);
  }
  for (int i = 0; i < c->nstrag; i++) {
    char id[256], secs[32];
    wd_az_ident_text(set, c->strag[i].cr, id, sizeof id);
    fprintf(f, "<tr class=\"straggler\"><td>%d</td><td>straggler</td><td>", c->strag[i].rank);
    esc(f, id);
    fprintf(f, "</td><td>enters collectives %s s after the median rank</td></tr>\n",
            wd_az_secs(c->strag[i].lag_ms, secs, sizeof secs));
  }
  fputs("</table>\n", f);
}

int wd_az_report_html(FILE *f, const wd_az_result *res) {
  wd_az_job job;
  wd_az_job_verdict(res, &job);
  fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>nccl-watchdog report</title>\n<style>\n"
        "body{font:14px/1.4 sans-serif;margin:1.5em;color:#222;max-width:1100px}\n"
        "h1{font-size:1.3em} h2{font-size:1.1em;margin-top:2em} h3{font-size:1em}\n"
        ".verdict{font:13px/1.4 monospace;background:#f6f6f6;padding:.6em;white-space:pre-wrap}\n"
        "#culprit{font-size:1.2em;font-weight:bold;color:#b00;border:2px solid #b00;padding:.5em}\n"
        "svg .culprit rect.done{fill:#d00} svg .culprit rect.enq{fill:none;stroke:#d00}\n"
        "svg .waiting rect.done{fill:#e90} svg .waiting rect.enq{fill:none;stroke:#e90}\n"
        "svg .other rect.done{fill:#999} svg .other rect.enq{fill:none;stroke:#999}\n"
        ".axis{font-size:10px;text-anchor:middle;fill:#555}\n"
        "span.culprit{color:#d00;font-weight:bold} span.waiting{color:#e90;font-weight:bold}\n"
        "table{border-collapse:collapse} td,th{border:1px solid #ccc;padding:.2em .5em;vertical-align:top}\n"
        "tr.culprit td{background:#fde0e0} tr.straggler td{background:#fff4d6}\n"
        "pre.tree{background:#f6f6f6;padding:.6em}\n"
        "</style></head><body>\n<h1>nccl-watchdog report</h1>\n",
        f);
  /* The root, first and in red: what on-call came for. */
  const wd_az_suspect *root = job.root;
  const wd_az_comm *rc = NULL;
  if (!root)
    for (size_t i = 0; i < res->ncomms && !root; i++)
      for (int k = 0; k < res->comms[i].nsus && !root; k++)
        if (res->comms[i].sus[k].culprit) root = &res->comms[i].sus[k], rc = &res->comms[i];
  if (job.root) rc = job.links[job.nlinks - 1].comm;
  if (job.host) {
    fputs("<p id=\"culprit\" class=\"culprit\">Culprit: host ", f);
    esc(f, wd_az_s(job.host));
    fprintf(f, " (%d processes wait on the network)</p>\n", job.host_nprocs);
  } else if (job.deadlock) {
    fputs("<p id=\"culprit\" class=\"culprit\">Deadlock across communicators (see below)</p>\n", f);
  } else if (root) {
    char id[256] = "no dump";
    if (root->cr) wd_az_ident_text(res->set, root->cr, id, sizeof id);
    fprintf(f, "<p id=\"culprit\" class=\"culprit\">Culprit: rank %d of ", root->rank);
    esc(f, rc && wd_az_s(rc->name) ? wd_az_s(rc->name) : "?");
    fputs(" (", f);
    esc(f, id);
    fprintf(f, "): %s</p>\n", wd_az_reason_name(root->reason));
  } else {
    fputs("<p id=\"verdict-ok\">No culprit: ", f);
    esc(f, res->summary);
    fputs("</p>\n", f);
  }
  fputs("<div class=\"verdict\">", f);
  if (job.host) {
    esc(f, job.host_line);
    fputc('\n', f);
  }
  if (job.found && (job.nlinks > 1 || job.deadlock)) {
    esc(f, job.line);
    fputc('\n', f);
  }
  esc(f, res->summary);
  fputs("</div>\n", f);
  int drawn = 0;
  for (size_t i = 0; i < res->ncomms; i++) {
    const wd_az_comm *c = &res->comms[i];
    if (c->verdict == WD_AZ_NO_HANG && !c->nstrag) continue;
    if (drawn++ == HTML_COMMS) {
      fprintf(f, "<p>%zu more communicators: see the text report.</p>\n", res->ncomms - i);
      break;
    }
    fprintf(f, "<h2>comm 0x%016" PRIx64 " &ldquo;", c->comm_id);
    esc(f, wd_az_s(c->name));
    fprintf(f, "&rdquo;: %d ranks, verdict %s</h2>\n<p class=\"verdict\">", c->nranks,
            wd_az_verdict_name(c->verdict));
    esc(f, c->summary);
    fputs("</p>\n", f);
    chart(f, c);
    if (c->stuck) tree(f, c);
    suspects(f, res->set, c);
  }
  fprintf(f, "<p>%zu dumps read, %zu used, %zu communicators. Timeline: run the analyzer with "
             "<code>--trace=FILE</code> and open it in ui.perfetto.dev; with the default coarse "
             "clock most slices have zero length, <code>NCCL_WATCHDOG_CLOCK=precise</code> gives "
             "a microsecond timeline.</p>\n</body></html>\n",
          res->ndumps_read, res->ndumps_kept, res->ncomms);
  return ferror(f) ? -1 : 0;
}
