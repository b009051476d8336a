/* A dead process's ring file, decoded into an ordinary dump (ringfile.h). */
#include "ringfile.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flightrec/ringfile.h"

#define DUMP_FORMAT "nccl-watchdog-dump"

int wd_az_is_ringfile(const char *data, size_t len) {
  return len >= 8 && memcmp(data, WD_RF_MAGIC, 8) == 0;
}

typedef struct rec_t {
  uint64_t ticket;
  wd_record r;
} rec_t;

static int cmp_ticket(const void *a, const void *b) {
  uint64_t x = ((const rec_t *)a)->ticket, y = ((const rec_t *)b)->ticket;
  return x < y ? -1 : x > y;
}

static void add_hex(cJSON *o, const char *key, uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  cJSON_AddStringToObject(o, key, buf);
}

/* Every slot that holds a complete record of its own ticket, oldest first; the others counted. */
/* Every slot's record, by ticket. A record sits at its ticket modulo the capacity, or modulo
 * `wrap` (a power of two, 0 for none) when it was written before the ring was allocated whole. */
static rec_t *read_ring(const unsigned char *base, uint32_t cap, uint32_t wrap, uint32_t *n, uint32_t *torn) {
  rec_t *out = malloc(sizeof(rec_t) * (cap ? cap : 1));
  *n = *torn = 0;
  if (!out) return NULL;
  for (uint32_t i = 0; i < cap; i++) {
    uint64_t w[WD_RECORD_WORDS];
    memcpy(w, base + (size_t)i * sizeof(wd_record), sizeof w);
    if (w[0] == 0) continue; /* never written */
    uint64_t ticket = w[0] / 2 - 1;
    int placed = (ticket & (cap - 1)) == i || (wrap && (ticket & (wrap - 1)) == i);
    if ((w[0] & 1) || w[0] < 2 || !placed ||
        (uint32_t)(w[WD_RECORD_WORDS - 1] >> 32) != wd_record_check(ticket, w)) {
      (*torn)++;
      continue;
    }
    out[*n].ticket = ticket;
    memcpy(&out[*n].r, w, sizeof w);
    (*n)++;
  }
  qsort(out, *n, sizeof(rec_t), cmp_ticket);
  return out;
}

static const char *sstr(char (*strs)[WD_RF_STRLEN], uint8_t id) { return strs[id]; }

/* A record as the plugin's renderer writes it into a live dump (src/dump/render.c, put_record
 * and put_type_fields for a ring record): a salvaged dump is read like any other. */
static void add_parent(cJSON *o, uint32_t parent) {
  if (parent == WD_SLOT_NONE) cJSON_AddNullToObject(o, "parent");
  else if (parent == WD_SLOT_FOREIGN) cJSON_AddStringToObject(o, "parent", "foreign");
  else cJSON_AddNumberToObject(o, "parent", parent);
}

static void add_call(cJSON *o, const wd_record *r, char (*strs)[WD_RF_STRLEN], int with_seq) {
  cJSON_AddStringToObject(o, "func", sstr(strs, r->func));
  if (with_seq) cJSON_AddNumberToObject(o, "seq", (double)r->a);
  cJSON_AddNumberToObject(o, "count", (double)r->count);
  cJSON_AddStringToObject(o, "datatype", sstr(strs, r->dtype));
}

/* A ProxyOp's fields, from a ring record or from the file's list of open events. */
static void add_proxyop(cJSON *o, int32_t pid, unsigned channel, int32_t peer, int32_t nsteps,
                        uint64_t chunk, unsigned flags) {
  cJSON_AddNumberToObject(o, "pid", pid);
  cJSON_AddNumberToObject(o, "channel", channel);
  cJSON_AddNumberToObject(o, "peer", peer);
  cJSON_AddNumberToObject(o, "nSteps", nsteps);
  cJSON_AddNumberToObject(o, "chunkSize", (double)chunk);
  cJSON_AddBoolToObject(o, "isSend", (flags & WD_F_SEND) != 0);
}

static void add_type_fields(cJSON *o, const wd_record *r, char (*strs)[WD_RF_STRLEN]) {
  int stop_rec = r->phase == WD_PH_STOP || r->phase == WD_PH_SPAN;
  switch (r->type) {
  case WD_T_COLL:
  case WD_T_CECOLL:
    add_call(o, r, strs, 1);
    cJSON_AddStringToObject(o, "algo", sstr(strs, r->algo));
    cJSON_AddStringToObject(o, "proto", sstr(strs, r->proto));
    cJSON_AddNumberToObject(o, "root", r->peer);
    cJSON_AddNumberToObject(o, "nChannels", r->nChannels);
    cJSON_AddNumberToObject(o, "nWarps", r->nWarps);
    break;
  case WD_T_P2P:
    add_call(o, r, strs, 0);
    cJSON_AddNumberToObject(o, "peer", r->peer);
    cJSON_AddNumberToObject(o, "nChannels", r->nChannels);
    break;
  case WD_T_COLLAPI:
    add_call(o, r, strs, 0);
    cJSON_AddNumberToObject(o, "root", r->peer);
    break;
  case WD_T_P2PAPI: add_call(o, r, strs, 0); break;
  case WD_T_GROUPAPI: cJSON_AddNumberToObject(o, "groupDepth", r->n); break;
  case WD_T_PROXYOP: add_proxyop(o, r->pid, r->channel, r->peer, r->n, r->count, r->flags); break;
  case WD_T_PROXYSTEP:
    cJSON_AddNumberToObject(o, "step", r->n);
    if (r->phase == WD_PH_STATE) cJSON_AddNumberToObject(o, "transSize", (double)r->a); /* older builds */
    else if (stop_rec && r->state != 0xff) cJSON_AddNumberToObject(o, "transSize", (double)r->count);
    break;
  case WD_T_KERNELCH:
    cJSON_AddNumberToObject(o, "channel", r->channel);
    add_hex(o, "pTimer", r->a);
    if (stop_rec && r->count) add_hex(o, "pTimerStop", r->count);
    break;
  case WD_T_PROXYCTRL:
    if (r->phase == WD_PH_STATE) cJSON_AddNumberToObject(o, "appendedProxyOps", r->n);
    break;
  case WD_T_NETPLUGIN: add_hex(o, "id", r->a); break;
  case WD_T_KERNELPHASE:
    cJSON_AddNumberToObject(o, "channel", r->channel);
    cJSON_AddNumberToObject(o, "phaseId", r->n);
    cJSON_AddStringToObject(o, "phase", r->n == 0 ? "initial_sync" : r->n == 1 ? "compute" : r->n == 2 ? "final_sync" : "unknown");
    add_hex(o, "pTimer", r->a);
    if (stop_rec && r->count) add_hex(o, "pTimerStop", r->count);
    break;
  case WD_T_CESYNC: cJSON_AddNumberToObject(o, "nRanks", r->n); break;
  case WD_T_CEBATCH:
    cJSON_AddNumberToObject(o, "numOps", r->n);
    cJSON_AddNumberToObject(o, "totalBytes", (double)r->count);
    break;
  default: break;
  }
  if (r->flags & WD_F_DETACHED) add_hex(o, "raw", r->raw);
  else if (r->flags & WD_F_TAGGED) add_hex(o, "userTag", r->raw);
  if (r->type == WD_T_COLL && (r->flags & WD_F_SYMCOLL)) cJSON_AddBoolToObject(o, "isSymColl", 1);
  if (r->flags & WD_F_GRAPH) cJSON_AddBoolToObject(o, "graphCaptured", 1);
  if (r->flags & WD_F_DETACHED) cJSON_AddBoolToObject(o, "detached", 1);
  if (r->flags & WD_F_ORPHAN) cJSON_AddBoolToObject(o, "orphan", 1);
  if (r->flags & WD_F_ABANDONED) cJSON_AddBoolToObject(o, "abandoned", 1);
}

static cJSON *records_json(const rec_t *recs, uint32_t n, char (*strs)[WD_RF_STRLEN], uint64_t mono_ref) {
  cJSON *arr = cJSON_CreateArray();
  for (uint32_t i = 0; arr && i < n; i++) {
    const wd_record *r = &recs[i].r;
    cJSON *o = cJSON_CreateObject();
    if (!o) break;
    cJSON_AddItemToArray(arr, o);
    cJSON_AddNumberToObject(o, "t", (double)((int64_t)(r->ts_ns - mono_ref)));
    cJSON_AddStringToObject(o, "ph", wd_phase_name(r->phase));
    cJSON_AddStringToObject(o, "type", wd_type_name(r->type));
    cJSON_AddNumberToObject(o, "slot", r->slot);
    add_parent(o, r->parent);
    cJSON_AddNumberToObject(o, "tid", r->tid);
    if (r->phase == WD_PH_STATE)
      cJSON_AddStringToObject(o, "state", wd_state_name(r->state));
    else if ((r->phase == WD_PH_STOP || r->phase == WD_PH_SPAN) && r->state != 0xff)
      cJSON_AddStringToObject(o, "lastState", wd_state_name(r->state));
    /* A span's start time is where a detached event keeps its foreign parent (never both). */
    if (r->phase == WD_PH_SPAN)
      cJSON_AddNumberToObject(o, "dur", (double)(r->ts_ns >= r->raw ? r->ts_ns - r->raw : 0));
    add_type_fields(o, r, strs);
  }
  return arr;
}

static cJSON *ring_json(const rec_t *recs, uint32_t n, uint32_t torn, uint32_t cap,
                        char (*strs)[WD_RF_STRLEN], uint64_t mono_ref) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return NULL;
  uint64_t written = n ? recs[n - 1].ticket + 1 : 0;
  cJSON_AddNumberToObject(o, "capacity", cap);
  cJSON_AddNumberToObject(o, "written", (double)written);
  /* Overwritten: a lap of the ring, or wrapped over before it was allocated whole. */
  cJSON_AddNumberToObject(o, "lost", (double)(written > (uint64_t)n + torn ? written - n - torn : 0));
  cJSON_AddNumberToObject(o, "torn", torn);
  cJSON_AddItemToObject(o, "records", records_json(recs, n, strs, mono_ref));
  return o;
}

/* Whether the file keeps completions as they happen (done[]: its plugin did). */
static int done_kept(const wd_rf_header *h) { return h->version >= 3 && h->done_magic == WD_RF_DONE_MAGIC; }

/* The last seqNumber completed per function (CeColl in ce_done), -1 none: the header's counters
 * (when its live part is whole: they are as of the watchdog's last poll) or the completion words
 * kept as operations completed, whichever is newer. known[f] (bit 0 Coll, bit 1 CeColl): either
 * says something of f, so that an op of f past its last completed one is in flight. Returns
 * whether anything says what completed. */
static int completed_seqs(const wd_rf_header *h, int live_ok, int64_t *done, int64_t *ce_done, unsigned char *known) {
  for (unsigned i = 0; i < WD_RF_STRINGS; i++) done[i] = ce_done[i] = -1, known[i] = 0;
  if (live_ok)
    for (uint32_t i = 0; i < h->nseq && i < WD_RF_SEQS; i++) {
      const wd_rf_seq *s = &h->seq[i];
      (s->ce ? ce_done : done)[s->func] = s->completed;
      known[s->func] |= (unsigned char)(s->ce ? 2 : 1);
    }
  if (!done_kept(h)) return live_ok;
  for (unsigned f = 1; f < WD_RF_STRINGS; f++)
    for (int ce = 0; ce < 2; ce++) {
      int64_t v = wd_rf_done_get(h->done, f, ce), *d = ce ? &ce_done[f] : &done[f];
      if (v < 0) continue;
      if (v > *d) *d = v;
      known[f] |= (unsigned char)(ce ? 2 : 1);
    }
  return 1;
}

/* The last seqNumber enqueued and completed per function: enqueued from the header (when its
 * live part is whole) and the records (Coll starts), completed as completed_seqs says; an op
 * completed was enqueued. */
static void add_seqs(cJSON *comm, const wd_rf_header *h, int live_ok, const rec_t *recs, uint32_t n,
                     char (*strs)[WD_RF_STRLEN]) {
  int64_t enq[WD_RF_STRINGS], done[WD_RF_STRINGS], ce_enq[WD_RF_STRINGS], ce_done[WD_RF_STRINGS];
  unsigned char known[WD_RF_STRINGS];
  completed_seqs(h, live_ok, done, ce_done, known);
  for (unsigned i = 0; i < WD_RF_STRINGS; i++) enq[i] = done[i], ce_enq[i] = ce_done[i];
  if (live_ok)
    for (uint32_t i = 0; i < h->nseq && i < WD_RF_SEQS; i++) {
      const wd_rf_seq *s = &h->seq[i];
      int64_t *e = s->ce ? ce_enq : enq;
      if (s->enqueued > e[s->func]) e[s->func] = s->enqueued;
    }
  for (uint32_t i = 0; i < n; i++) {
    const wd_record *r = &recs[i].r;
    if (r->phase != WD_PH_START || (r->type != WD_T_COLL && r->type != WD_T_CECOLL)) continue;
    int64_t *e = r->type == WD_T_CECOLL ? ce_enq : enq;
    if ((int64_t)r->a > e[r->func]) e[r->func] = (int64_t)r->a;
  }
  for (int ce = 0; ce < 2; ce++) {
    cJSON *arr = cJSON_AddArrayToObject(comm, ce ? "ceSeq" : "seq");
    for (unsigned f = 0; arr && f < WD_RF_STRINGS; f++) {
      int64_t e = ce ? ce_enq[f] : enq[f], d = ce ? ce_done[f] : done[f];
      if (e < 0 && d < 0) continue;
      cJSON *s = cJSON_CreateObject();
      if (!s) break;
      cJSON_AddItemToArray(arr, s);
      cJSON_AddStringToObject(s, "func", strs[f][0] ? strs[f] : "?");
      cJSON_AddNumberToObject(s, "lastEnqueued", (double)e);
      cJSON_AddNumberToObject(s, "lastCompleted", (double)d);
    }
  }
}

/* The proxy-level events open at the last refresh (version 3), as nodes of the dump's open list:
 * their starts are in no ring (spans are written at the stop). */
static void add_open(cJSON *comm, const wd_rf_header *h, int live_ok, uint64_t mono_ref) {
  cJSON *arr = cJSON_AddArrayToObject(comm, "open");
  if (!arr || h->version < 3 || !live_ok || h->open_sum != wd_rf_open_sum(h)) return;
  uint32_t n = h->nopen < WD_RF_OPEN_EVENTS ? h->nopen : WD_RF_OPEN_EVENTS;
  if (h->open_total > n) cJSON_AddNumberToObject(comm, "openNotListed", h->open_total - n);
  for (uint32_t i = 0; i < n; i++) {
    const wd_rf_open_ev *e = &h->open[i];
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddItemToArray(arr, o);
    cJSON_AddNumberToObject(o, "slot", e->slot);
    cJSON_AddStringToObject(o, "type", wd_type_name(e->type));
    if (e->parent == WD_SLOT_NONE) cJSON_AddNullToObject(o, "parentSlot");
    else if (e->parent == WD_SLOT_FOREIGN) cJSON_AddStringToObject(o, "parentSlot", "foreign");
    else cJSON_AddNumberToObject(o, "parentSlot", e->parent);
    cJSON_AddBoolToObject(o, "stopped", 0);
    cJSON_AddNumberToObject(o, "ageMs", e->start_ns < mono_ref ? (double)(mono_ref - e->start_ns) / 1e6 : 0);
    uint64_t last = e->last_ns > e->start_ns ? e->last_ns : e->start_ns;
    cJSON_AddNumberToObject(o, "sinceProgressMs", last < mono_ref ? (double)(mono_ref - last) / 1e6 : 0);
    if (e->state == 0xff) cJSON_AddNullToObject(o, "state");
    else cJSON_AddStringToObject(o, "state", wd_state_name(e->state));
    cJSON_AddNumberToObject(o, "tid", e->tid);
    if (e->type == WD_T_PROXYOP) {
      add_proxyop(o, e->pid, e->channel, e->peer, e->n, e->count, e->flags);
      cJSON_AddNumberToObject(o, "stepsDone", e->steps_done);
    } else if (e->type == WD_T_PROXYSTEP) {
      cJSON_AddNumberToObject(o, "step", e->n);
      cJSON_AddNumberToObject(o, "transSize", (double)e->trans);
    } else if (e->type == WD_T_KERNELCH) {
      cJSON_AddNumberToObject(o, "channel", e->channel);
      add_hex(o, "pTimer", e->a);
    }
    cJSON_AddArrayToObject(o, "children");
  }
}

/* The operations the process enqueued and never completed, rebuilt from the file: every Coll
 * (or CeColl) start whose seq is past the header's last completed one, newest incarnation only.
 * It is "reached" when the GPU had got there by what the file tells (a kernel channel or proxy
 * operation of it was open at the last refresh, or one of them had stopped), else "enqueued";
 * its last progress is the newest of its own records and those of its children. */
#define WD_RF_INFLIGHT_MAX 32 /* the oldest: the stuck one is among them */

static void add_inflight(cJSON *comm, const wd_rf_header *h, int live_ok, const rec_t *r1,
                         uint32_t n1, const rec_t *r2, uint32_t n2, char (*strs)[WD_RF_STRLEN],
                         uint64_t mono_ref) {
  cJSON *arr = cJSON_AddArrayToObject(comm, "inflight");
  int64_t done[WD_RF_STRINGS], ce_done[WD_RF_STRINGS];
  unsigned char known[WD_RF_STRINGS];
  /* Without the header's counters or the completion words nothing says what completed. */
  if (!arr || !completed_seqs(h, live_ok, done, ce_done, known)) return;
  int open_ok = h->version >= 3 && h->open_sum == wd_rf_open_sum(h);
  uint32_t nopen = open_ok ? (h->nopen < WD_RF_OPEN_EVENTS ? h->nopen : WD_RF_OPEN_EVENTS) : 0;
  uint32_t not_listed = 0;
  for (uint32_t i = 0; i < n1; i++) {
    const wd_record *r = &r1[i].r;
    if (r->phase != WD_PH_START || (r->type != WD_T_COLL && r->type != WD_T_CECOLL)) continue;
    int64_t d = (r->type == WD_T_CECOLL ? ce_done : done)[r->func];
    if (!(known[r->func] & (r->type == WD_T_CECOLL ? 2 : 1)) || (int64_t)r->a <= d) continue;
    int newer = 0; /* a later start of the same op (a retried enqueue) stands for it */
    for (uint32_t k = i + 1; k < n1 && !newer; k++)
      newer = r1[k].r.phase == WD_PH_START && r1[k].r.type == r->type && r1[k].r.func == r->func &&
              r1[k].r.a == r->a;
    if (newer) continue;
    uint64_t last = r->ts_ns;
    int stopped = 0, reached = 0, open_kids = 0;
    uint32_t kch_spans = 0;
    for (uint32_t k = i + 1; k < n1; k++)
      if (r1[k].r.slot == r->slot && r1[k].r.type == r->type) {
        stopped |= r1[k].r.phase == WD_PH_STOP;
        if (r1[k].r.ts_ns > last) last = r1[k].r.ts_ns;
      }
    for (uint32_t k = 0; k < n2; k++) {
      const wd_record *c = &r2[k].r;
      if (c->parent != r->slot || c->ts_ns < r->ts_ns) continue;
      reached |= c->phase == WD_PH_SPAN || c->phase == WD_PH_STOP || c->type == WD_T_KERNELCH;
      kch_spans += c->type == WD_T_KERNELCH && (c->phase == WD_PH_SPAN || c->phase == WD_PH_STOP);
      if (c->ts_ns > last) last = c->ts_ns;
    }
    for (uint32_t k = 0; k < nopen; k++) {
      const wd_rf_open_ev *e = &h->open[k];
      if (e->parent != r->slot || e->start_ns < r->ts_ns) continue;
      open_kids++;
      reached |= e->type == WD_T_KERNELCH || e->steps_done > 0;
      uint64_t el = e->last_ns > e->start_ns ? e->last_ns : e->start_ns;
      if (el > last) last = el;
    }
    /* Completed after the header's last refresh: every kernel channel stopped, nothing open. */
    if (stopped && r->nChannels && kch_spans >= r->nChannels && !open_kids) continue;
    if (cJSON_GetArraySize(arr) >= WD_RF_INFLIGHT_MAX) {
      not_listed++;
      continue;
    }
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddItemToArray(arr, o);
    cJSON_AddNumberToObject(o, "slot", r->slot);
    if (r->parent == WD_SLOT_NONE) cJSON_AddNullToObject(o, "parentSlot");
    else if (r->parent == WD_SLOT_FOREIGN) cJSON_AddStringToObject(o, "parentSlot", "foreign");
    else cJSON_AddNumberToObject(o, "parentSlot", r->parent);
    cJSON_AddStringToObject(o, "type", wd_type_name(r->type));
    cJSON *kc = cJSON_AddObjectToObject(o, "kernelChannels");
    if (kc) {
      cJSON_AddNumberToObject(kc, "expected", r->nChannels);
      cJSON_AddNumberToObject(kc, "done", kch_spans);
    }
    cJSON_AddStringToObject(o, "status", !stopped ? "posting" : reached ? "reached" : "enqueued");
    cJSON_AddBoolToObject(o, "stopped", stopped);
    cJSON_AddNumberToObject(o, "ageMs", r->ts_ns < mono_ref ? (double)(mono_ref - r->ts_ns) / 1e6 : 0);
    cJSON_AddNumberToObject(o, "sinceProgressMs", last < mono_ref ? (double)(mono_ref - last) / 1e6 : 0);
    cJSON_AddNullToObject(o, "state");
    cJSON_AddNumberToObject(o, "tid", r->tid);
    cJSON_AddBoolToObject(o, "graphCaptured", (r->flags & WD_F_GRAPH) != 0);
    add_type_fields(o, r, strs);
    cJSON_AddBoolToObject(o, "fromRingFile", 1);
    cJSON_AddArrayToObject(o, "children");
  }
  if (not_listed) cJSON_AddNumberToObject(comm, "inflightNotListed", not_listed);
}

cJSON *wd_az_ringfile_decode(const char *data, size_t len, const char *path, char *why,
                             size_t why_len) {
  return wd_az_ringfile_decode_at(data, len, path, 0, why, why_len);
}

cJSON *wd_az_ringfile_decode_at(const char *data, size_t len, const char *path, uint64_t ref_at_least,
                                char *why, size_t why_len) {
  if (len < WD_RF_HEADER_BYTES || !wd_az_is_ringfile(data, len)) {
    snprintf(why, why_len, "not a ring file (too short or no magic)");
    return NULL;
  }
  wd_rf_header h;
  memcpy(&h, data, sizeof h);
  if (h.version != WD_RF_VERSION && h.version != 2) {
    snprintf(why, why_len, "ring file version %u (this analyzer reads 2 and %u)", h.version, WD_RF_VERSION);
    return NULL;
  }
  if (h.ident_sum != wd_rf_ident_sum(&h)) {
    snprintf(why, why_len, "ring file header fails its checksum (torn, or not written by nccl-watchdog)");
    return NULL;
  }
  if (h.header_bytes != WD_RF_HEADER_BYTES || h.record_bytes != sizeof(wd_record) ||
      h.ring_cap < 16 || h.proxy_ring_cap < 16 || h.ring_cap > (1u << 30) ||
      h.proxy_ring_cap > (1u << 30) || (h.ring_cap & (h.ring_cap - 1)) ||
      (h.proxy_ring_cap & (h.proxy_ring_cap - 1)) ||
      h.file_bytes != wd_rf_file_bytes(h.ring_cap, h.proxy_ring_cap) ||
      h.strtab_off != WD_RF_HEADER_BYTES ||
      h.ring_off != h.strtab_off + (uint64_t)WD_RF_STRINGS * WD_RF_STRLEN ||
      h.proxy_ring_off != h.ring_off + (uint64_t)h.ring_cap * sizeof(wd_record)) {
    snprintf(why, why_len, "ring file header describes an impossible layout");
    return NULL;
  }
  if (len < h.file_bytes) {
    snprintf(why, why_len, "ring file truncated: %zu of %" PRIu64 " bytes", len, h.file_bytes);
    return NULL;
  }
  int live_ok = !(h.live_gen & 1) && h.live_gen != 0 && h.live_sum == wd_rf_live_sum(&h);
  static _Thread_local char strs[WD_RF_STRINGS][WD_RF_STRLEN]; /* the loader decodes on several threads */
  memcpy(strs, data + h.strtab_off, sizeof strs);
  for (unsigned i = 0; i < WD_RF_STRINGS; i++) strs[i][WD_RF_STRLEN - 1] = '\0';
  h.host[sizeof h.host - 1] = h.comm_name[sizeof h.comm_name - 1] = h.gpu_uuid[sizeof h.gpu_uuid - 1] = '\0';

  uint32_t n1, t1, n2, t2;
  uint32_t wrap = h.version >= 3 ? h.wrap_records : 0;
  if (wrap & (wrap - 1)) wrap = 0; /* not a size the plugin writes: no wrapped records */
  rec_t *r1 = read_ring((const unsigned char *)data + h.ring_off, h.ring_cap, wrap < h.ring_cap ? wrap : 0,
                        &n1, &t1);
  rec_t *r2 = read_ring((const unsigned char *)data + h.proxy_ring_off, h.proxy_ring_cap,
                        wrap < h.proxy_ring_cap ? wrap : 0, &n2, &t2);
  if (!r1 || !r2) {
    free(r1);
    free(r2);
    snprintf(why, why_len, "out of memory");
    return NULL;
  }
  /* The reference instant: the newest of the last refresh and the last record. */
  uint64_t mono_ref = live_ok ? h.live_mono_ns : h.bind_mono_ns;
  if (n1 && r1[n1 - 1].r.ts_ns > mono_ref) mono_ref = r1[n1 - 1].r.ts_ns;
  if (n2 && r2[n2 - 1].r.ts_ns > mono_ref) mono_ref = r2[n2 - 1].r.ts_ns;
  /* A fatal signal's handler dated the process's end. */
  if (h.fatal.signo > 0 && h.fatal_sum == wd_rf_fnv(&h.fatal, sizeof h.fatal) &&
      h.fatal.mono_ns > mono_ref && h.fatal.mono_ns - mono_ref < 86400ull * 1000000000ull)
    mono_ref = h.fatal.mono_ns;
  /* One instant for all of a process's files, when they are decoded as one dump (salvage). */
  if (ref_at_least > mono_ref && ref_at_least - mono_ref < 86400ull * 1000000000ull) mono_ref = ref_at_least;
  uint64_t wall_ref = h.bind_wall_ns + (mono_ref - h.bind_mono_ns);

  cJSON *root = cJSON_CreateObject();
  if (!root) goto oom;
  cJSON_AddStringToObject(root, "format", DUMP_FORMAT);
  cJSON_AddNumberToObject(root, "version", 1);
  cJSON_AddStringToObject(root, "reason", "postmortem");
  cJSON_AddNumberToObject(root, "dumpSeq", 0);
  cJSON_AddStringToObject(root, "host", h.host);
  cJSON_AddNumberToObject(root, "pid", h.pid);
  /* The process incarnation, as its own dumps name it: without it a post-mortem of a process
   * that had dumped (a job torn down after the episode) would read as another process that died. */
  cJSON *ident = cJSON_AddObjectToObject(root, "identity");
  if (ident && h.version >= 3 && h.boot_id[0] && h.where_sum == wd_rf_where_sum(&h)) {
    char boot[sizeof h.boot_id];
    memcpy(boot, h.boot_id, sizeof boot);
    boot[sizeof boot - 1] = '\0';
    cJSON_AddStringToObject(ident, "bootId", boot);
  }
  if (ident && h.process_start_wall_ns) add_hex(ident, "processStartNs", h.process_start_wall_ns);
  if (ident && h.pidns_ino) add_hex(ident, "pidNs", h.pidns_ino);
  /* Its communicator, alive when the process ended (render.c's identity.comms): one finalized
   * or aborted before was history for that process already. */
  cJSON *ids = ident ? cJSON_AddArrayToObject(ident, "comms") : NULL;
  cJSON *ranks = ident ? cJSON_AddArrayToObject(ident, "ranks") : NULL;
  if (ids && ranks && !h.finalized) {
    char id[24];
    snprintf(id, sizeof id, "0x%llx", (unsigned long long)h.comm_id);
    cJSON_AddItemToArray(ids, cJSON_CreateString(id));
    snprintf(id, sizeof id, "%d/%d", (int)h.rank, (int)h.nranks);
    cJSON_AddItemToArray(ranks, cJSON_CreateString(id));
  }

  cJSON *time = cJSON_AddObjectToObject(root, "time");
  if (time) {
    /* As the plugin writes it: UTC, nanoseconds. */
    char wall[40] = "1970-01-01T00:00:00.000000000Z";
    time_t secs = (time_t)(wall_ref / 1000000000ull);
    struct tm tm;
    if (gmtime_r(&secs, &tm)) {
      char ymdhms[24];
      strftime(ymdhms, sizeof ymdhms, "%Y-%m-%dT%H:%M:%S", &tm);
      snprintf(wall, sizeof wall, "%s.%09uZ", ymdhms, (unsigned)(wall_ref % 1000000000ull));
    }
    cJSON_AddStringToObject(time, "wall", wall);
    add_hex(time, "wall_ns", wall_ref);
    add_hex(time, "mono_ns", mono_ref);
  }
  cJSON *pm = cJSON_AddObjectToObject(root, "postmortem");
  if (pm) {
    cJSON_AddStringToObject(pm, "file", path ? path : "");
    cJSON_AddBoolToObject(pm, "headerLive", live_ok);
    cJSON_AddBoolToObject(pm, "finalized", live_ok && h.finalized);
    add_hex(pm, "lastRefreshWallNs", live_ok ? h.live_wall_ns : 0);
    /* When the process last did something NCCL reported (its newest record, or its fatal
     * signal): a refresh alone says it lived, not that it moved on from an earlier snapshot. */
    uint64_t act = 0;
    if (n1 && r1[n1 - 1].r.ts_ns > act) act = r1[n1 - 1].r.ts_ns;
    if (n2 && r2[n2 - 1].r.ts_ns > act) act = r2[n2 - 1].r.ts_ns;
    if (h.fatal.signo > 0 && h.fatal_sum == wd_rf_fnv(&h.fatal, sizeof h.fatal) && h.fatal.mono_ns > act)
      act = h.fatal.mono_ns;
    if (act >= h.bind_mono_ns) add_hex(pm, "lastActivityWallNs", h.bind_wall_ns + (act - h.bind_mono_ns));
    cJSON_AddNumberToObject(pm, "records", n1 + n2);
    cJSON_AddNumberToObject(pm, "tornRecords", t1 + t2);
    /* The job stall episode its watchdog last began to answer: a silent process's copy whose
     * watchdog began its dump for the episode and never finished it. */
    if (h.answered_k) cJSON_AddNumberToObject(pm, "answeredEpisode", h.answered_k);
    /* What a fatal-signal handler wrote, when it is whole. */
    if (h.fatal.signo > 0 && h.fatal_sum == wd_rf_fnv(&h.fatal, sizeof h.fatal)) {
      cJSON *fa = cJSON_AddObjectToObject(pm, "fatal");
      if (fa) {
        cJSON_AddNumberToObject(fa, "signal", h.fatal.signo);
        cJSON_AddNumberToObject(fa, "code", h.fatal.code);
        cJSON_AddNumberToObject(fa, "tid", h.fatal.tid);
        add_hex(fa, "addr", h.fatal.addr);
        add_hex(fa, "wall_ns", h.fatal.wall_ns);
        cJSON *fr = cJSON_AddArrayToObject(fa, "frames");
        int nf = h.fatal.nframes < 0 ? 0 : h.fatal.nframes > WD_RF_FATAL_FRAMES ? WD_RF_FATAL_FRAMES : h.fatal.nframes;
        for (int i = 0; fr && i < nf; i++) {
          char b[24];
          snprintf(b, sizeof b, "0x%" PRIx64, h.fatal.frames[i]);
          cJSON_AddItemToArray(fr, cJSON_CreateString(b));
        }
      }
    }
  }
  /* Of the configuration, the file tells the ring sizes. */
  cJSON *cfg = cJSON_AddObjectToObject(root, "config");
  if (cfg) {
    cJSON_AddNumberToObject(cfg, "ringSize", h.ring_cap);
    cJSON_AddNumberToObject(cfg, "proxyRingSize", h.proxy_ring_cap);
  }
  cJSON *comms = cJSON_AddArrayToObject(root, "comms");
  cJSON *c = cJSON_CreateObject();
  if (!comms || !c) goto oom;
  cJSON_AddItemToArray(comms, c);
  add_hex(c, "commId", h.comm_id);
  cJSON_AddStringToObject(c, "commName", h.comm_name);
  cJSON_AddNumberToObject(c, "rank", h.rank);
  cJSON_AddNumberToObject(c, "nranks", h.nranks);
  cJSON_AddNumberToObject(c, "nNodes", h.nnodes);
  cJSON_AddNumberToObject(c, "abi", h.abi);
  cJSON_AddNumberToObject(c, "cudaDev", h.cuda_dev);
  cJSON_AddStringToObject(c, "gpuUuid", h.gpu_uuid);
  /* The file was bound to the communicator at its init. */
  cJSON_AddNumberToObject(c, "initAgoMs", h.bind_mono_ns && h.bind_mono_ns < mono_ref
                                              ? (double)(mono_ref - h.bind_mono_ns) / 1e6 : 0);
  uint64_t last = n1 ? r1[n1 - 1].r.ts_ns : 0;
  if (n2 && r2[n2 - 1].r.ts_ns > last) last = r2[n2 - 1].r.ts_ns;
  cJSON_AddNumberToObject(c, "sinceProgressMs", last ? (double)(mono_ref - last) / 1e6 : 0);
  add_seqs(c, &h, live_ok, r1, n1, strs);
  cJSON *p2p = cJSON_AddObjectToObject(c, "p2p");
  if (p2p) {
    cJSON_AddNumberToObject(p2p, "enqueued", live_ok ? (double)h.p2p_enqueued : -1);
    int64_t p2p_done = live_ok ? h.p2p_completed : -1;
    if (done_kept(&h) && h.p2p_done <= INT64_MAX && (int64_t)h.p2p_done > p2p_done) p2p_done = (int64_t)h.p2p_done;
    cJSON_AddNumberToObject(p2p, "completed", (double)p2p_done);
  }
  add_inflight(c, &h, live_ok, r1, n1, r2, n2, strs, mono_ref);
  add_open(c, &h, live_ok, mono_ref);
  cJSON_AddItemToObject(c, "ring", ring_json(r1, n1, t1, h.ring_cap, strs, mono_ref));
  cJSON_AddItemToObject(c, "proxyRing", ring_json(r2, n2, t2, h.proxy_ring_cap, strs, mono_ref));
  if (h.global_rank >= 0) {
    cJSON *env = cJSON_AddObjectToObject(root, "env");
    char g[16];
    snprintf(g, sizeof g, "%d", h.global_rank);
    if (env) cJSON_AddStringToObject(env, "RANK", g);
  }
  cJSON *th = cJSON_AddObjectToObject(root, "threads");
  if (th) cJSON_AddBoolToObject(th, "disabled", 1);
  free(r1);
  free(r2);
  return root;
oom:
  cJSON_Delete(root);
  free(r1);
  free(r2);
  snprintf(why, why_len, "out of memory");
  return NULL;
}
