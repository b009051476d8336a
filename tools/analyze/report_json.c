#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "job.h"

#define JSON_SCHEMA_VERSION 1

/* cJSON idiom: every item is attached to its parent at once, one cJSON_Delete at the end, and a
 * failed allocation only makes the document incomplete (checked once, when printing). */

static void add_hex(cJSON *o, const char *key, uint64_t v) {
  char buf[32];
  wd_az_fmt(buf, sizeof(buf), "0x%016" PRIx64, v);
  cJSON_AddStringToObject(o, key, buf);
}

static void add_seq(cJSON *o, const char *key, int64_t v) {
  if (v < 0) cJSON_AddNullToObject(o, key);
  else cJSON_AddNumberToObject(o, key, (double)v);
}

static cJSON *int_array(const int *v, int n) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
  return a;
}

static void add_wait(cJSON *o, const wd_az_wait *w) {
  if (!w->valid) return;
  char text[256];
  wd_az_wait_text(w, text, sizeof(text));
  cJSON_AddStringToObject(o, "waitingOn", text);
  cJSON_AddStringToObject(o, "waitType", wd_az_s(w->type));
  cJSON_AddNumberToObject(o, "peer", w->peer);
  cJSON_AddNumberToObject(o, "channel", w->channel);
  if (w->step >= 0) cJSON_AddNumberToObject(o, "step", w->step);
  if (w->state) cJSON_AddStringToObject(o, "state", wd_az_s(w->state));
  cJSON_AddBoolToObject(o, "isSend", w->is_send);
}

static cJSON *op_json(const wd_az_op *op) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "type", wd_az_s(op->type));
  cJSON_AddStringToObject(o, "func", wd_az_s(op->func));
  add_seq(o, "seq", op->seq);
  cJSON_AddNumberToObject(o, "count", (double)op->count);
  cJSON_AddStringToObject(o, "datatype", wd_az_s(op->dtype));
  cJSON_AddNumberToObject(o, "root", op->root);
  if (op->peer >= 0) cJSON_AddNumberToObject(o, "opPeer", op->peer);
  cJSON_AddStringToObject(o, "status", wd_az_s(op->status));
  cJSON_AddNumberToObject(o, "ageMs", op->age_ms);
  cJSON_AddNumberToObject(o, "sinceProgressMs", op->since_ms);
  add_wait(o, &op->wait);
  return o;
}

static cJSON *frames_json(const wd_az_dump *d) {
  cJSON *a = cJSON_CreateArray();
  for (int i = 0; a && i < d->nframes; i++)
    cJSON_AddItemToArray(a, cJSON_CreateString(wd_az_s(d->frames[i])));
  return a;
}

static void add_where(cJSON *o, const wd_az_set *set, const wd_az_crank *cr) {
  const wd_az_dump *d = wd_az_dump_of(set, cr);
  cJSON_AddStringToObject(o, "host", wd_az_s(d->host));
  cJSON_AddNumberToObject(o, "pid", d->pid);
  int grank = wd_az_global_rank(set, cr);
  if (grank >= 0) cJSON_AddNumberToObject(o, "globalRank", grank);
  else cJSON_AddNullToObject(o, "globalRank");
  if (cr->cuda_dev >= 0) cJSON_AddNumberToObject(o, "gpu", cr->cuda_dev);
  if (cr->gpu_uuid) cJSON_AddStringToObject(o, "gpuUuid", wd_az_s(cr->gpu_uuid));
  char id[256];
  wd_az_ident_text(set, cr, id, sizeof id);
  cJSON_AddStringToObject(o, "where", id);
  cJSON_AddStringToObject(o, "file", d->path);
  cJSON_AddStringToObject(o, "dumpReason", wd_az_s(d->reason));
}

static cJSON *suspect_json(const wd_az_set *set, const wd_az_suspect *s) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "rank", s->rank);
  cJSON_AddStringToObject(o, "reason", wd_az_reason_name(s->reason));
  cJSON_AddBoolToObject(o, "culprit", s->culprit);
  cJSON_AddStringToObject(o, "detail", s->detail);
  if (!s->cr) return o;
  add_where(o, set, s->cr);
  const wd_az_dump *d = wd_az_dump_of(set, s->cr);
  if (s->op) cJSON_AddItemToObject(o, "op", op_json(s->op));
  if (s->op) {
    cJSON_AddStringToObject(o, "func", wd_az_s(s->op->func));
    add_seq(o, "seq", s->op->seq);
    add_wait(o, &s->op->wait);
  } else if (s->hist) {
    cJSON_AddStringToObject(o, "func", wd_az_s(s->hist->func));
    add_seq(o, "seq", s->hist->seq);
    cJSON_AddNumberToObject(o, "count", (double)s->hist->count);
    cJSON_AddStringToObject(o, "datatype", wd_az_s(s->hist->dtype));
    cJSON_AddNumberToObject(o, "root", s->hist->root);
  }
  if (s->reason == WD_AZ_NETWORK_STALL) cJSON_AddBoolToObject(o, "peerIsSuspect", s->peer_is_suspect);
  if (s->reason == WD_AZ_DEAD_LINK) {
    cJSON_AddNumberToObject(o, "linkPeer", s->link_peer);
    cJSON_AddNumberToObject(o, "linkChannel", s->link_channel);
  }
  char doing[2048];
  wd_az_doing_text(set, s->cr, doing, sizeof(doing));
  cJSON_AddStringToObject(o, "doing", doing);
  cJSON_AddBoolToObject(o, "backtracesDisabled", d->threads_disabled);
  cJSON_AddItemToObject(o, "topFrames", frames_json(d));
  cJSON *py = cJSON_CreateArray();
  for (int i = 0; py && i < d->npy; i++) cJSON_AddItemToArray(py, cJSON_CreateString(wd_az_s(d->py[i])));
  cJSON_AddItemToObject(o, "pythonFrames", py);
  return o;
}

static cJSON *func_json(const wd_az_func_row *f) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "func", wd_az_s(f->func));
  cJSON_AddNumberToObject(o, "lastEnqueuedMin", (double)f->enq_min);
  cJSON_AddNumberToObject(o, "lastEnqueuedMax", (double)f->enq_max);
  cJSON_AddNumberToObject(o, "lastCompletedMin", (double)f->done_min);
  cJSON_AddNumberToObject(o, "lastCompletedMax", (double)f->done_max);
  add_seq(o, "firstDivergingSeq", f->first_div);
  if (f->hist_lo >= 0) {
    cJSON *h = cJSON_AddObjectToObject(o, "historyCompared");
    cJSON_AddNumberToObject(h, "from", (double)f->hist_lo);
    cJSON_AddNumberToObject(h, "to", (double)f->hist_hi);
  } else {
    cJSON_AddNullToObject(o, "historyCompared");
  }
  add_seq(o, "historyDivergingSeq", f->hist_div);
  return o;
}

static cJSON *rank_json(const wd_az_set *set, const wd_az_crank *cr) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "rank", cr->rank);
  add_where(o, set, cr);
  cJSON *seq = cJSON_AddArrayToObject(o, "seq");
  for (int i = 0; i < cr->nseq; i++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToArray(seq, e);
    cJSON_AddStringToObject(e, "func", wd_az_s(cr->seq[i].func));
    cJSON_AddNumberToObject(e, "lastEnqueued", (double)cr->seq[i].enq);
    cJSON_AddNumberToObject(e, "lastCompleted", (double)cr->seq[i].done);
  }
  cJSON *ops = cJSON_AddArrayToObject(o, "inflight");
  for (int i = 0; i < cr->nops; i++) cJSON_AddItemToArray(ops, op_json(&cr->ops[i]));
  cJSON_AddNumberToObject(o, "inflightTotal", cr->ops_total);
  cJSON_AddBoolToObject(o, "ringWrapped", cr->ring_lost > 0);
  return o;
}

static cJSON *stuck_json(const wd_az_comm *c) {
  if (!c->stuck) return cJSON_CreateNull();
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "type", wd_az_s(c->stuck_type));
  cJSON_AddStringToObject(o, "func", wd_az_s(c->stuck_func));
  cJSON_AddNumberToObject(o, "seq", (double)c->stuck_seq);
  if (c->graph) {
    cJSON *g = cJSON_AddObjectToObject(o, "graph");
    if (g) {
      cJSON_AddNumberToObject(g, "graph", c->graph);
      cJSON_AddNumberToObject(g, "launch", c->graph_launch);
      cJSON_AddNumberToObject(g, "replay", (double)c->graph_replay);
      if (c->graph_seq >= 0) cJSON_AddNumberToObject(g, "seq", (double)c->graph_seq);
    }
  }
  cJSON_AddItemToObject(o, "ranksWaiting", int_array(c->waiting, c->nwaiting));
  cJSON_AddNumberToObject(o, "stalledMs", c->stalled_ms);
  return o;
}

static cJSON *comm_json(const wd_az_set *set, const wd_az_comm *c) {
  cJSON *o = cJSON_CreateObject();
  add_hex(o, "commId", c->comm_id);
  cJSON_AddStringToObject(o, "commName", wd_az_s(c->name));
  cJSON_AddNumberToObject(o, "nranks", c->nranks);
  cJSON_AddItemToObject(o, "ranksPresent", int_array(c->present, c->npresent));
  cJSON_AddItemToObject(o, "ranksMissing", int_array(c->missing, c->nmissing));
  /* The judged episode resumed (the job's own verdict-K.resumed): nothing hangs now; what was
   * stuck at that moment stays readable. */
  if (set && set->resumed_note[0] && c->verdict == WD_AZ_HANG) {
    cJSON_AddStringToObject(o, "verdict", "resumed");
    cJSON_AddStringToObject(o, "verdictAtThatMoment", wd_az_verdict_name(c->verdict));
  } else {
    cJSON_AddStringToObject(o, "verdict", wd_az_verdict_name(c->verdict));
  }
  cJSON_AddStringToObject(o, "summary", c->summary);
  if (c->note[0]) cJSON_AddStringToObject(o, "note", c->note);
  if (c->slow_link[0]) {
    cJSON *sl = cJSON_AddObjectToObject(o, "slowLink");
    if (sl) {
      cJSON_AddStringToObject(sl, "line", c->slow_link);
      cJSON_AddNumberToObject(sl, "rank", c->slow_rank);
      cJSON_AddNumberToObject(sl, "peer", c->slow_peer);
      cJSON_AddNumberToObject(sl, "channel", c->slow_channel);
      cJSON_AddStringToObject(sl, "direction", c->slow_send ? "transmit" : "receive");
      cJSON_AddNumberToObject(sl, "ratioToMedian", c->slow_ratio);
    }
  }
  if (c->late[0]) {
    cJSON_AddStringToObject(o, "lateRank", c->late);
    cJSON_AddNumberToObject(o, "lateRankIndex", c->late_rank);
  }
  if (c->arrival[0]) {
    cJSON_AddStringToObject(o, "arrival", c->arrival);
    cJSON_AddNumberToObject(o, "arrivalLastRank", c->arrival_rank);
  }
  cJSON_AddItemToObject(o, "stuck", stuck_json(c));
  cJSON *funcs = cJSON_AddArrayToObject(o, "functions");
  for (int i = 0; i < c->nfuncs; i++) cJSON_AddItemToArray(funcs, func_json(&c->funcs[i]));
  cJSON *sus = cJSON_AddArrayToObject(o, "suspects");
  for (int i = 0; i < c->nsus; i++) cJSON_AddItemToArray(sus, suspect_json(set, &c->sus[i]));
  cJSON *strag = cJSON_AddArrayToObject(o, "stragglers");
  for (int i = 0; strag && i < c->nstrag; i++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToArray(strag, e);
    cJSON_AddNumberToObject(e, "rank", c->strag[i].rank);
    cJSON_AddNumberToObject(e, "lagMs", c->strag[i].lag_ms);
    cJSON_AddNumberToObject(e, "opsCompared", c->strag[i].nops);
    add_where(e, set, c->strag[i].cr);
  }
  cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
  for (int i = 0; i < c->npresent; i++)
    cJSON_AddItemToArray(ranks, rank_json(set, c->by_rank[c->present[i]]));
  return o;
}

static cJSON *skipped_json(const wd_az_set *set) {
  cJSON *a = cJSON_CreateArray();
  for (size_t i = 0; a && i < set->nskips; i++) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddItemToArray(a, e);
    cJSON_AddStringToObject(e, "file", set->skips[i].path);
    cJSON_AddStringToObject(e, "reason", set->skips[i].why);
  }
  return a;
}

int wd_az_report_json(FILE *f, const wd_az_result *res) {
  cJSON *root = cJSON_CreateObject();
  if (!root) return -1;
  cJSON_AddStringToObject(root, "tool", "nccl-watchdog-analyze");
  cJSON_AddNumberToObject(root, "schemaVersion", JSON_SCHEMA_VERSION);
  cJSON_AddStringToObject(root, "summary", res->summary);
  if (res->set && res->set->resumed_note[0]) cJSON_AddStringToObject(root, "resumed", res->set->resumed_note);
  wd_az_job job;
  wd_az_job_verdict(res, &job);
  if (job.found) {
    cJSON *j = cJSON_AddObjectToObject(root, "job");
    if (j) {
      cJSON_AddStringToObject(j, "line", job.line);
      cJSON_AddBoolToObject(j, "deadlock", job.deadlock);
      if (job.host) {
        cJSON *h = cJSON_AddObjectToObject(j, "networkHost");
        cJSON_AddStringToObject(h, "host", wd_az_s(job.host));
        cJSON_AddNumberToObject(h, "processes", job.host_nprocs);
        cJSON_AddStringToObject(h, "line", job.host_line);
      }
      if (job.root && job.root->cr) {
        cJSON *r = cJSON_AddObjectToObject(j, "root");
        cJSON_AddNumberToObject(r, "rank", job.root->rank);
        cJSON_AddStringToObject(r, "reason", wd_az_reason_name(job.root->reason));
        cJSON_AddStringToObject(r, "detail", job.root->detail);
        add_where(r, res->set, job.root->cr);
      }
      cJSON *chain = cJSON_AddArrayToObject(j, "chain");
      for (int i = 0; chain && i < job.nlinks; i++) {
        const wd_az_link *l = &job.links[i];
        cJSON *o = cJSON_CreateObject();
        if (!o) break;
        cJSON_AddItemToArray(chain, o);
        char id[24];
        snprintf(id, sizeof id, "0x%016llx", (unsigned long long)l->comm->comm_id);
        cJSON_AddStringToObject(o, "commId", id);
        cJSON_AddStringToObject(o, "commName", wd_az_s(l->comm->name) ? wd_az_s(l->comm->name) : "");
        cJSON_AddNumberToObject(o, "seq", (double)l->comm->stuck_seq);
        cJSON_AddNumberToObject(o, "onRank", l->on->rank);
        cJSON_AddStringToObject(o, "onReason", wd_az_reason_name(l->on->reason));
        if (l->on->cr) {
          const wd_az_dump *d = wd_az_dump_of(res->set, l->on->cr);
          cJSON_AddNumberToObject(o, "onPid", d->pid);
          cJSON_AddStringToObject(o, "onHost", wd_az_s(d->host) ? wd_az_s(d->host) : "");
          cJSON_AddNumberToObject(o, "onGlobalRank", wd_az_global_rank(res->set, l->on->cr));
        }
      }
    }
  }
  cJSON_AddNumberToObject(root, "dumpsRead", (double)res->ndumps_read);
  cJSON_AddNumberToObject(root, "dumpsUsed", (double)res->ndumps_kept);
  cJSON_AddItemToObject(root, "skipped", skipped_json(res->set));
  if (res->set && res->set->attempt_note[0]) cJSON_AddStringToObject(root, "attempt", res->set->attempt_note);
  if (res->set && res->set->clock_note[0]) cJSON_AddStringToObject(root, "clocks", res->set->clock_note);
  cJSON *comms = cJSON_AddArrayToObject(root, "comms");
  for (size_t i = 0; i < res->ncomms; i++)
    cJSON_AddItemToArray(comms, comm_json(res->set, &res->comms[i]));
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (!text) return -1;
  fputs(text, f);
  fputc('\n', f);
  free(text);
  return 0;
}
