#include "trace.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "load.h"

#define TRACK_PROXY_BASE 1000000 /* proxy tracks: comm track * this + recording tid */

typedef struct tw {
  FILE *f;
  int first;             /* no event written yet */
  uint64_t base_ns;      /* wall time of ts 0 */
  int64_t dump_off_ns;   /* this dump's wall time - base */
  int pid;               /* trace process id of this dump */
  uint64_t flow_id;
  int *named;            /* tracks already named in this process */
  size_t nnamed, cap_named;
  size_t nslices, nzero; /* complete events, and those of zero length (coarse clock) */
} tw;

/* Coll/P2p starts of one op ring, for drawing flow arrows to their ProxyOps. */
typedef struct parent_start {
  uint32_t slot;
  int64_t t;
  int track;
} parent_start;

typedef struct parents {
  parent_start *v;
  size_t n, cap;
} parents;

/* ---- output ---- */

static void put_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

static void sep(tw *w) {
  if (!w->first) fputs(",\n", w->f);
  w->first = 0;
}

static double ts_us(const tw *w, int64_t t) {
  return ((double)w->dump_off_ns + (double)t) / 1000.0;
}

static void meta(tw *w, const char *what, int tid, const char *name) {
  sep(w);
  fprintf(w->f, "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":", what,
          w->pid, tid);
  put_str(w->f, name);
  fputs("}}", w->f);
}

static void name_track(tw *w, int tid, const char *name) {
  for (size_t i = 0; i < w->nnamed; i++)
    if (w->named[i] == tid) return;
  if (w->nnamed == w->cap_named) {
    size_t cap = w->cap_named ? w->cap_named * 2 : 16;
    int *p = realloc(w->named, cap * sizeof(*p));
    if (!p) return;
    w->named = p;
    w->cap_named = cap;
  }
  w->named[w->nnamed++] = tid;
  meta(w, "thread_name", tid, name);
}

/* The record's own fields (all but the common ones) as the event's args. */
static void put_args(FILE *f, const cJSON *rec, int open) {
  static const char *const skip[] = {"t", "ph", "type"};
  const cJSON *it;
  int n = 0;
  fputs(",\"args\":{", f);
  cJSON_ArrayForEach(it, rec) {
    int common = 0;
    for (size_t i = 0; i < sizeof(skip) / sizeof(skip[0]); i++)
      common |= strcmp(it->string, skip[i]) == 0;
    if (common || !(cJSON_IsNumber(it) || cJSON_IsString(it) || cJSON_IsBool(it))) continue;
    fprintf(f, "%s", n++ ? "," : "");
    put_str(f, it->string);
    fputc(':', f);
    if (cJSON_IsString(it)) put_str(f, it->valuestring);
    else if (cJSON_IsBool(it)) fputs(cJSON_IsTrue(it) ? "true" : "false", f);
    else fprintf(f, "%.17g", it->valuedouble);
  }
  if (open) fprintf(f, "%s\"open\":true", n ? "," : "");
  fputc('}', f);
}

/* ---- record fields ---- */

static const char *rstr(const cJSON *r, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double rnum(const cJSON *r, const char *k, double def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, k);
  return cJSON_IsNumber(v) ? v->valuedouble : def;
}

/* Conversions that stay defined whatever a damaged file holds. */
static int64_t rt(const cJSON *r) {
  double t = rnum(r, "t", 0);
  return t > -9e18 && t < 9e18 ? (int64_t)t : 0;
}

static uint32_t to_slot(double v) { return v >= 0 && v < 4294967295.0 ? (uint32_t)v : 0; }
static uint32_t rslot(const cJSON *r) { return to_slot(rnum(r, "slot", 0)); }

static int has_type(const cJSON *r, const char *t) {
  const char *s = rstr(r, "type");
  return s && strcmp(s, t) == 0;
}

static void event_name(const cJSON *r, char *out, size_t len) {
  const char *type = rstr(r, "type"), *func = rstr(r, "func");
  type = type ? type : "?";
  double seq = rnum(r, "seq", -1);
  if (func && seq >= 0) snprintf(out, len, "%s #%.0f", func, seq);
  else if (func) snprintf(out, len, "%s %s", type, func);
  else if (strcmp(type, "ProxyOp") == 0)
    snprintf(out, len, "ProxyOp %s peer %.0f ch %.0f",
             cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "isSend")) ? "send" : "recv",
             rnum(r, "peer", -1), rnum(r, "channel", -1));
  else if (strcmp(type, "ProxyStep") == 0) snprintf(out, len, "ProxyStep %.0f", rnum(r, "step", -1));
  else if (strcmp(type, "KernelCh") == 0) snprintf(out, len, "KernelCh ch %.0f", rnum(r, "channel", -1));
  else snprintf(out, len, "%s", type);
}

/* ---- slot matching: the pending start of each slot within one ring ---- */

typedef struct slotmap {
  uint32_t *keys; /* slot + 1, 0 = empty */
  const cJSON **vals;
  size_t cap;
} slotmap;

static int map_init(slotmap *m, size_t n) {
  m->cap = 64;
  while (m->cap < n * 2) m->cap *= 2;
  m->keys = calloc(m->cap, sizeof(*m->keys));
  m->vals = calloc(m->cap, sizeof(const cJSON *));
  return m->keys && m->vals ? 0 : -1;
}

static const cJSON **map_at(slotmap *m, uint32_t slot) {
  size_t h = (uint32_t)(slot * 2654435761u) & (m->cap - 1); /* 32-bit multiplicative hash */
  while (m->keys[h] && m->keys[h] != slot + 1) h = (h + 1) & (m->cap - 1);
  m->keys[h] = slot + 1;
  return &m->vals[h];
}

static void map_free(slotmap *m) {
  free(m->keys);
  free(m->vals);
}

/* ---- events ---- */

/* A slice from start's fields: from t_begin (its start record's time, or a span's start) to t_end. */
static void slice(tw *w, int tid, const cJSON *start, int64_t t_begin, int64_t t_end, int open) {
  w->nslices++;
  w->nzero += t_end == t_begin;
  char name[128];
  event_name(start, name, sizeof(name));
  sep(w);
  fprintf(w->f, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"name\":", w->pid,
          tid, ts_us(w, t_begin), ((double)t_end - (double)t_begin) / 1000.0);
  put_str(w->f, name);
  fprintf(w->f, ",\"cat\":\"%s\"", rstr(start, "type") ? rstr(start, "type") : "?");
  put_args(w->f, start, open);
  fputc('}', w->f);
}

static void complete(tw *w, int tid, const cJSON *start, int64_t t_end, int open) {
  slice(w, tid, start, rt(start), t_end, open);
}

static void instant(tw *w, int tid, const cJSON *r) {
  const char *state = rstr(r, "state");
  sep(w);
  fprintf(w->f, "{\"ph\":\"i\",\"s\":\"t\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"name\":", w->pid,
          tid, ts_us(w, rt(r)));
  put_str(w->f, state ? state : "state");
  put_args(w->f, r, 0);
  fputc('}', w->f);
}

static void flow(tw *w, const parent_start *p, int tid, int64_t t) {
  uint64_t id = ++w->flow_id;
  sep(w);
  fprintf(w->f, "{\"ph\":\"s\",\"id\":%" PRIu64 ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
                "\"name\":\"coll-proxy\",\"cat\":\"flow\"}",
          id, w->pid, p->track, ts_us(w, p->t));
  sep(w);
  fprintf(w->f, "{\"ph\":\"f\",\"bp\":\"e\",\"id\":%" PRIu64 ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
                "\"name\":\"coll-proxy\",\"cat\":\"flow\"}",
          id, w->pid, tid, ts_us(w, t));
}

static void add_parent(parents *ps, uint32_t slot, int64_t t, int track) {
  if (ps->n == ps->cap) {
    size_t cap = ps->cap ? ps->cap * 2 : 256;
    parent_start *v = realloc(ps->v, cap * sizeof(*v));
    if (!v) return;
    ps->v = v;
    ps->cap = cap;
  }
  ps->v[ps->n++] = (parent_start){slot, t, track};
}

/* The latest Coll/P2p start of that slot at or before t (records are in time order). */
static const parent_start *find_parent(const parents *ps, uint32_t slot, int64_t t) {
  const parent_start *best = NULL;
  for (size_t i = 0; i < ps->n; i++)
    if (ps->v[i].slot == slot && ps->v[i].t <= t) best = &ps->v[i];
  return best;
}

typedef struct ring_ctx {
  int comm_track;      /* op-level track of the communicator rank */
  const char *label;   /* "comm NAME rank R" */
  int proxy;           /* proxy-level ring: one track per recording tid */
  parents *ps;
} ring_ctx;

static int track_of(tw *w, const ring_ctx *rc, const cJSON *r) {
  if (!rc->proxy) return rc->comm_track;
  double d = rnum(r, "tid", 0);
  int rtid = d >= 0 && d < 2147483647.0 ? (int)d : 0;
  int tid = rc->comm_track * TRACK_PROXY_BASE + (rtid % TRACK_PROXY_BASE);
  char name[256];
  snprintf(name, sizeof(name), "%s, proxy tid %d", rc->label, rtid);
  name_track(w, tid, name);
  return tid;
}

static void on_start(tw *w, const ring_ctx *rc, slotmap *m, const cJSON *r, int tid) {
  *map_at(m, rslot(r)) = r;
  if (!rc->proxy && (has_type(r, "Coll") || has_type(r, "P2p")))
    add_parent(rc->ps, rslot(r), rt(r), tid);
  const cJSON *parent = cJSON_GetObjectItemCaseSensitive(r, "parent");
  if (rc->proxy && has_type(r, "ProxyOp") && cJSON_IsNumber(parent)) {
    const parent_start *p = find_parent(rc->ps, to_slot(parent->valuedouble), rt(r));
    if (p) flow(w, p, tid, rt(r));
  }
}

/* A counter track per communicator rank: the last completed sequence number of each function,
 * so a rank that falls behind shows as a line that stops climbing. */
static void seq_counter(tw *w, const ring_ctx *rc, const cJSON *start, int64_t t) {
  const char *func = rstr(start, "func");
  double seq = rnum(start, "seq", -1);
  if (!func || seq < 0) return;
  sep(w);
  fprintf(w->f, "{\"ph\":\"C\",\"name\":");
  char name[300];
  snprintf(name, sizeof name, "completed seq, %s", rc->label);
  put_str(w->f, name);
  fprintf(w->f, ",\"pid\":%d,\"ts\":%.3f,\"args\":{", w->pid, ts_us(w, t));
  put_str(w->f, func);
  fprintf(w->f, ":%.0f}}", seq);
}

static void emit_ring(tw *w, const cJSON *ring, const ring_ctx *rc) {
  const cJSON *r, *recs = cJSON_GetObjectItemCaseSensitive(ring, "records");
  int n = cJSON_GetArraySize(recs);
  slotmap m;
  if (!cJSON_IsArray(recs)) return;
  if (map_init(&m, (size_t)n + 1) != 0) {
    map_free(&m);
    return;
  }
  cJSON_ArrayForEach(r, recs) {
    const char *ph = rstr(r, "ph");
    if (!ph || !cJSON_IsObject(r)) continue;
    int tid = track_of(w, rc, r);
    if (strcmp(ph, "start") == 0) {
      on_start(w, rc, &m, r, tid);
    } else if (strcmp(ph, "state") == 0) {
      instant(w, tid, r);
    } else if (strcmp(ph, "span") == 0) {
      /* A child's whole life in one record (its start never was in the ring). */
      int64_t dur = (int64_t)rnum(r, "dur", 0);
      const cJSON *parent = cJSON_GetObjectItemCaseSensitive(r, "parent");
      if (has_type(r, "ProxyOp") && cJSON_IsNumber(parent)) {
        const parent_start *p = find_parent(rc->ps, to_slot(parent->valuedouble), rt(r) - dur);
        if (p) flow(w, p, tid, rt(r) - dur);
      }
      slice(w, tid, r, rt(r) - dur, rt(r), 0);
    } else if (strcmp(ph, "stop") == 0) {
      const cJSON **start = map_at(&m, rslot(r));
      if (*start) complete(w, track_of(w, rc, *start), *start, rt(r), 0);
      if (*start && !rc->proxy && has_type(*start, "Coll")) seq_counter(w, rc, *start, rt(r));
      *start = NULL;
    }
  }
  /* Still open at the dump: extend to the dump time. */
  for (size_t i = 0; i < m.cap; i++)
    if (m.keys[i] && m.vals[i]) complete(w, track_of(w, rc, m.vals[i]), m.vals[i], 0, 1);
  map_free(&m);
}

/* Whether the proxy ring already draws this open event (a start record of it from t on). */
static int ring_has_start(const cJSON *ring, uint32_t slot, int64_t t) {
  const cJSON *r, *recs = cJSON_GetObjectItemCaseSensitive(ring, "records");
  cJSON_ArrayForEach(r, recs) {
    const char *ph = rstr(r, "ph");
    if (ph && strcmp(ph, "start") == 0 && rslot(r) == slot && rt(r) >= t) return 1;
  }
  return 0;
}

/* Proxy-level events still open at the dump: under a live parent their start stays in their slot
 * (the ring gets a span at their stop), so the open trees are where they are. */
static void emit_open_tree(tw *w, const ring_ctx *rc, const cJSON *ring, const cJSON *node, int depth) {
  if (!cJSON_IsObject(node) || depth > 16) return;
  if (has_type(node, "ProxyOp") || has_type(node, "ProxyStep") || has_type(node, "KernelCh")) {
    /* ageMs is rounded: a start record from a millisecond earlier is the same event. */
    int64_t t = -(int64_t)(rnum(node, "ageMs", 0) * 1e6);
    if (!ring_has_start(ring, rslot(node), t - 1000000)) slice(w, track_of(w, rc, node), node, t, 0, 1);
  }
  const cJSON *k;
  cJSON_ArrayForEach(k, cJSON_GetObjectItemCaseSensitive(node, "children"))
    emit_open_tree(w, rc, ring, k, depth + 1);
}

static void emit_comm(tw *w, const cJSON *c, int index) {
  char label[192];
  const char *name = rstr(c, "commName");
  const char *uuid = rstr(c, "gpuUuid");
  double dev = rnum(c, "cudaDev", -1);
  if (dev >= 0)
    snprintf(label, sizeof(label), "comm %.64s rank %.0f, GPU %.0f %.64s", name ? name : "?",
             rnum(c, "rank", -1), dev, uuid ? uuid : "");
  else
    snprintf(label, sizeof(label), "comm %.64s rank %.0f", name ? name : "?", rnum(c, "rank", -1));
  parents ps = {0};
  ring_ctx rc = {index + 1, label, 0, &ps};
  name_track(w, rc.comm_track, label);
  emit_ring(w, cJSON_GetObjectItemCaseSensitive(c, "ring"), &rc);
  rc.proxy = 1;
  const cJSON *pring = cJSON_GetObjectItemCaseSensitive(c, "proxyRing");
  emit_ring(w, pring, &rc);
  const cJSON *n;
  cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(c, "inflight")) emit_open_tree(w, &rc, pring, n, 0);
  /* Outside every tree (a post-mortem dump lists its open proxy-level events there). */
  cJSON_ArrayForEach(n, cJSON_GetObjectItemCaseSensitive(c, "open")) emit_open_tree(w, &rc, pring, n, 0);
  free(ps.v);
}

static void emit_dump(tw *w, const wd_az_dump *d, const cJSON *root) {
  char pname[160];
  /* RANK only where it names this process's rank alone (wd_az_global_rank: not for a process of
   * several ranks, nor one whose RANK another process gives too). */
  if (d->global_rank >= 0 && !d->multi_rank && !d->rank_shared)
    snprintf(pname, sizeof(pname), "global rank %d (%.100s:%d)", d->global_rank, wd_az_s(d->host), d->pid);
  else
    snprintf(pname, sizeof(pname), "%.100s:%d", wd_az_s(d->host), d->pid);
  meta(w, "process_name", 0, pname);
  w->nnamed = 0;
  w->dump_off_ns = (int64_t)(d->wall_ns - w->base_ns);
  const cJSON *c;
  int i = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "comms")) {
    emit_comm(w, c, i++);
  }
  const cJSON *det = cJSON_GetObjectItemCaseSensitive(root, "detached");
  parents ps = {0};
  ring_ctx rc = {i + 1, "detached (PXN)", 1, &ps};
  emit_ring(w, cJSON_GetObjectItemCaseSensitive(det, "ring"), &rc);
  free(ps.v);
  /* Markers on the process: the stall the watchdog detected, and the dump itself (ts 0 of the
   * dump's own axis is its wall time). */
  const cJSON *stalls = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "trigger"), "stalls");
  const cJSON *st;
  cJSON_ArrayForEach(st, stalls) {
    double since = rnum(st, "sinceProgressMs", 0);
    sep(w);
    fprintf(w->f, "{\"ph\":\"i\",\"s\":\"p\",\"name\":\"stall detected\",\"pid\":%d,\"tid\":0,"
                  "\"ts\":%.3f,\"args\":{",
            w->pid, ts_us(w, 0));
    fprintf(w->f, "\"func\":");
    put_str(w->f, rstr(st, "func") ? rstr(st, "func") : "?");
    fprintf(w->f, ",\"seq\":%.0f,\"commName\":", rnum(st, "seq", -1));
    put_str(w->f, rstr(st, "commName") ? rstr(st, "commName") : "");
    fprintf(w->f, ",\"sinceProgressMs\":%.1f,\"waitingOn\":", since);
    put_str(w->f, rstr(st, "waitingOn") ? rstr(st, "waitingOn") : "");
    fputs("}}", w->f);
    /* Where progress stopped: the start of the wait, on the same axis. */
    sep(w);
    fprintf(w->f, "{\"ph\":\"i\",\"s\":\"p\",\"name\":\"last progress\",\"pid\":%d,\"tid\":0,"
                  "\"ts\":%.3f}",
            w->pid, ts_us(w, -(int64_t)(since * 1e6)));
  }
  char dn[96];
  snprintf(dn, sizeof dn, "dump (%s)", wd_az_s(d->reason) && *wd_az_s(d->reason) ? wd_az_s(d->reason) : "?");
  sep(w);
  fprintf(w->f, "{\"ph\":\"i\",\"s\":\"p\",\"name\":");
  put_str(w->f, dn);
  fprintf(w->f, ",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{\"file\":", w->pid, ts_us(w, 0));
  put_str(w->f, d->path);
  fputs("}}", w->f);
}

static uint64_t base_time(const wd_az_set *set) {
  uint64_t base = UINT64_MAX;
  for (size_t i = 0; i < set->ndumps; i++) {
    const wd_az_dump *d = &set->dumps[i];
    uint64_t t = d->wall_ns + (uint64_t)d->min_t; /* min_t <= 0: wraps to a subtraction */
    if (d->kept && t < base) base = t;
  }
  return base == UINT64_MAX ? 0 : base;
}

/* Dumps of one process share a trace process id. */
static int process_index(const wd_az_set *set, size_t i) {
  for (size_t j = 0; j < i; j++)
    if (set->dumps[j].kept && set->dumps[j].host == set->dumps[i].host &&
        set->dumps[j].pid == set->dumps[i].pid)
      return process_index(set, j);
  return (int)i + 1;
}

int wd_az_trace_write(const wd_az_set *set, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  tw w = {.f = f, .first = 1, .base_ns = base_time(set)};
  fputs("{\"traceEvents\":[\n", f);
  for (size_t i = 0; i < set->ndumps; i++) {
    if (!set->dumps[i].kept) continue;
    cJSON *root = wd_az_parse_file(set->dumps[i].path);
    if (!root) continue;
    w.pid = process_index(set, i);
    emit_dump(&w, &set->dumps[i], root);
    wd_az_parse_free();
  }
  wd_az_load_release();
  /* The default coarse clock ticks every 1-4 ms: most operations start and stop on one tick. */
  int coarse = w.nslices && w.nzero * 2 > w.nslices;
  const char *note = "most slices have zero length: the dumps were recorded with the coarse "
                     "clock (NCCL_WATCHDOG_CLOCK=coarse, 1-4 ms ticks); for a timeline, run with "
                     "NCCL_WATCHDOG_CLOCK=precise";
  fprintf(f, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"tool\":\"nccl-watchdog-analyze\","
             "\"baseWallNs\":\"0x%016" PRIx64 "\",\"zeroLengthSlices\":%zu,\"slices\":%zu%s%s%s}}\n",
          w.base_ns, w.nzero, w.nslices, coarse ? ",\"clockNote\":\"" : "", coarse ? note : "",
          coarse ? "\"" : "");
  if (coarse) fprintf(stderr, "nccl-watchdog-analyze: trace %s: %s\n", path, note);
  free(w.named);
  return fclose(f) == 0 ? 0 : -1;
}
