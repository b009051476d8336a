/*
 * The dump document (docs/dump-format.md). cJSON holds the document; the bulky parts (ring
 * records and open event trees, up to a few hundred thousand objects) are formatted straight into
 * one growing buffer and attached as raw JSON, because one cJSON object per record costs several
 * times the 200 ms a full dump may take. Both paths escape every string they emit.
 */
#include "dump/render.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "base/ncclver.h"
#include "dump/dumpfile.h"
#include "dump/forest.h"
#include "dump/jsonstr.h"
#include "dump/textbuf.h"
#include "events/judge.h"
#include "flightrec/strtab.h"

#ifndef WD_VERSION
#define WD_VERSION "0.0.0"
#endif

/* ------------------------------------------------------------------------------------------ */
/* Names, escaped once per dump.                                                               */

typedef struct wd_name {
  char s[WD_SB_STR_BOUND(WD_STR_LEN) + 1]; /* quoted, escaped */
  uint16_t len;
} wd_name;

/* A bulky part of the document, rendered straight into the output where its placeholder is. */
enum { SEC_RECORDS = 0, SEC_INFLIGHT = 1, SEC_OPEN = 2, SEC_DETACHED = 3 };
typedef struct wd_section {
  int kind;
  const wd_ring_snap *ring; /* SEC_RECORDS */
  const wd_ev_snap *ev;     /* the others */
  uint32_t n;
} wd_section;

typedef struct wd_ctx {
  const wd_dump_input *in;
  wd_name strs[WD_STR_MAX];
  wd_name types[256];
  wd_name states[256];
  wd_section *secs;
  uint32_t nsecs, cap_secs;
  wd_forest forest;
} wd_ctx;

static void name_set(wd_name *nm, const char *s) {
  wd_sb b = {nm->s, 0, sizeof(nm->s), 0, 0};
  size_t n = s ? strnlen(s, (size_t)WD_STR_LEN * 2) : 0;
  if (n > WD_STR_LEN - 1) n = WD_STR_LEN - 1; /* bound the cache entry */
  wd_sb_str(&b, s ? s : "", n);
  nm->len = (uint16_t)b.len;
}

static void ctx_init(wd_ctx *c, const wd_dump_input *in) {
  c->in = in;
  c->secs = NULL;
  c->nsecs = c->cap_secs = 0;
  memset(&c->forest, 0, sizeof(c->forest));
  for (unsigned i = 0; i < WD_STR_MAX; i++) name_set(&c->strs[i], wd_str((uint8_t)i));
  for (unsigned i = 0; i < 256; i++) {
    name_set(&c->types[i], wd_type_name(i));
    name_set(&c->states[i], wd_state_name(i));
  }
}

static inline void wd_sb_name(wd_sb *b, const wd_name *nm) { wd_sb_mem(b, nm->s, nm->len); }

/* ------------------------------------------------------------------------------------------ */
/* Records and nodes.                                                                          */

/* Enough for the longest record or node header: 5 resolved strings of at most 188 bytes, about 30
 * numbers and the keys. */
#define REC_BOUND 4096

static void put_parent(wd_sb *b, uint32_t parent) {
  if (parent == WD_SLOT_NONE)
    WD_SB_LIT(b, "null");
  else if (parent == WD_SLOT_FOREIGN)
    WD_SB_LIT(b, "\"foreign\"");
  else
    wd_sb_u64(b, parent);
}

/* The fields of the event type (the table in docs/dump-format.md). ev is the live event when
 * rendering a node, NULL for a ring record. */
/* func, then seq for collectives, then count and datatype: what API and operation events share. */
static void put_call(wd_ctx *c, wd_sb *b, const wd_record *r, int with_seq) {
  WD_SB_LIT(b, ",\"func\":");
  wd_sb_name(b, &c->strs[r->func]);
  if (with_seq) {
    WD_SB_LIT(b, ",\"seq\":");
    wd_sb_u64(b, r->a);
  }
  WD_SB_LIT(b, ",\"count\":");
  wd_sb_u64(b, r->count);
  WD_SB_LIT(b, ",\"datatype\":");
  wd_sb_name(b, &c->strs[r->dtype]);
}

static void put_int(wd_sb *b, const char *key_lit, size_t key_len, int64_t v) {
  wd_sb_mem(b, key_lit, key_len);
  wd_sb_i64(b, v);
}
#define PUT_INT(b, key, v) put_int((b), ",\"" key "\":", sizeof(",\"" key "\":") - 1, (int64_t)(v))

/* A kernel channel's (or phase's) GPU start time, and its stop time once NCCL gave it. */
static void put_ptimers(wd_sb *b, const wd_record *r, const wd_ev_snap *ev, int stop_rec) {
  WD_SB_LIT(b, ",\"pTimer\":");
  wd_sb_hex(b, r->a);
  if ((ev && ev->last_trans) || (stop_rec && r->count)) {
    WD_SB_LIT(b, ",\"pTimerStop\":");
    wd_sb_hex(b, ev ? ev->last_trans : r->count);
  }
}

static void put_type_fields(wd_ctx *c, wd_sb *b, const wd_record *r, const wd_ev_snap *ev) {
  int state_rec = !ev && r->phase == WD_PH_STATE;
  int stop_rec = !ev && (r->phase == WD_PH_STOP || r->phase == WD_PH_SPAN);
  switch (r->type) {
  case WD_T_COLL:
  case WD_T_CECOLL:
    put_call(c, b, r, 1);
    WD_SB_LIT(b, ",\"algo\":");
    wd_sb_name(b, &c->strs[r->algo]);
    WD_SB_LIT(b, ",\"proto\":");
    wd_sb_name(b, &c->strs[r->proto]);
    PUT_INT(b, "root", r->peer);
    PUT_INT(b, "nChannels", r->nChannels);
    PUT_INT(b, "nWarps", r->nWarps);
    break;
  case WD_T_P2P:
    put_call(c, b, r, 0);
    PUT_INT(b, "peer", r->peer);
    PUT_INT(b, "nChannels", r->nChannels);
    break;
  case WD_T_COLLAPI:
    put_call(c, b, r, 0);
    PUT_INT(b, "root", r->peer);
    break;
  case WD_T_P2PAPI:
    put_call(c, b, r, 0);
    break;
  case WD_T_GROUPAPI:
    PUT_INT(b, "groupDepth", r->n);
    break;
  case WD_T_PROXYOP:
    PUT_INT(b, "pid", r->pid);
    /* A PXN send progressed here for another process: the rank whose data it is. */
    if ((r->flags & WD_F_DETACHED) && r->a) PUT_INT(b, "originRank", (int64_t)r->a - 1);
    PUT_INT(b, "channel", r->channel);
    PUT_INT(b, "peer", r->peer);
    PUT_INT(b, "nSteps", r->n);
    PUT_INT(b, "chunkSize", r->count);
    wd_sb_bool(b, ",\"isSend\":", r->flags & WD_F_SEND);
    break;
  case WD_T_PROXYSTEP:
    PUT_INT(b, "step", r->n);
    if (state_rec) {
      PUT_INT(b, "transSize", r->a); /* records of older builds */
    } else if (stop_rec && r->state != 0xff) {
      PUT_INT(b, "transSize", r->count);
    } else if (ev) {
      PUT_INT(b, "transSize", ev->last_trans);
    }
    break;
  case WD_T_KERNELCH:
    PUT_INT(b, "channel", r->channel);
    put_ptimers(b, r, ev, stop_rec);
    break;
  case WD_T_KERNELPHASE:
    PUT_INT(b, "channel", r->channel);
    PUT_INT(b, "phaseId", r->n);
    WD_SB_LIT(b, ",\"phase\":\"");
    {
      const char *pn = r->n == 0 ? "initial_sync" : r->n == 1 ? "compute" : r->n == 2 ? "final_sync" : "unknown";
      wd_sb_mem(b, pn, strlen(pn));
    }
    wd_sb_ch(b, '"');
    put_ptimers(b, r, ev, stop_rec);
    break;
  case WD_T_PROXYCTRL:
    if (state_rec) {
      PUT_INT(b, "appendedProxyOps", r->n);
    }
    break;
  case WD_T_NETPLUGIN:
    WD_SB_LIT(b, ",\"id\":");
    wd_sb_hex(b, r->a);
    break;
  case WD_T_CESYNC:
    PUT_INT(b, "nRanks", r->n);
    break;
  case WD_T_CEBATCH:
    PUT_INT(b, "numOps", r->n);
    PUT_INT(b, "totalBytes", r->count);
    break;
  default:
    break;
  }
  if (r->flags & WD_F_DETACHED) {
    WD_SB_LIT(b, ",\"raw\":");
    wd_sb_hex(b, r->raw);
  } else if (r->flags & WD_F_TAGGED) {
    WD_SB_LIT(b, ",\"userTag\":");
    wd_sb_hex(b, r->raw);
  }
  if (r->type == WD_T_COLL && (r->flags & WD_F_SYMCOLL)) WD_SB_LIT(b, ",\"isSymColl\":true");
  /* A replay NCCL reported, keyed to its captured launch (events/graph.h): which replay. */
  if ((r->type == WD_T_COLL || r->type == WD_T_P2P) && (r->flags & WD_F_GRAPH) && r->n > 0)
    PUT_INT(b, "replay", r->n);
  int is_op = r->type == WD_T_COLL || r->type == WD_T_P2P || r->type == WD_T_CECOLL;
  if (ev && is_op)
    wd_sb_bool(b, ",\"graphCaptured\":", r->flags & WD_F_GRAPH);
  else if (r->flags & WD_F_GRAPH)
    WD_SB_LIT(b, ",\"graphCaptured\":true");
  if (r->flags & WD_F_DETACHED) WD_SB_LIT(b, ",\"detached\":true");
  if (r->flags & WD_F_ORPHAN) WD_SB_LIT(b, ",\"orphan\":true");
  if (r->flags & WD_F_ABANDONED) WD_SB_LIT(b, ",\"abandoned\":true");
}

static int put_record(wd_ctx *c, wd_sb *b, const wd_record *r, int comma) {
  if (wd_sb_reserve(b, REC_BOUND)) return -1;
  if (comma) wd_sb_ch(b, ',');
  WD_SB_LIT(b, "{\"t\":");
  wd_sb_i64(b, (int64_t)(r->ts_ns - c->in->mono_ns));
  switch (r->phase) {
  case WD_PH_START: WD_SB_LIT(b, ",\"ph\":\"start\""); break;
  case WD_PH_STATE: WD_SB_LIT(b, ",\"ph\":\"state\""); break;
  case WD_PH_STOP: WD_SB_LIT(b, ",\"ph\":\"stop\""); break;
  case WD_PH_SPAN: WD_SB_LIT(b, ",\"ph\":\"span\""); break;
  default:
    WD_SB_LIT(b, ",\"ph\":\"phase");
    wd_sb_u64(b, r->phase);
    wd_sb_ch(b, '"');
  }
  WD_SB_LIT(b, ",\"type\":");
  wd_sb_name(b, &c->types[r->type]);
  WD_SB_LIT(b, ",\"slot\":");
  wd_sb_u64(b, r->slot);
  WD_SB_LIT(b, ",\"parent\":");
  put_parent(b, r->parent);
  WD_SB_LIT(b, ",\"tid\":");
  wd_sb_i64(b, r->tid);
  if (r->phase == WD_PH_STATE) {
    WD_SB_LIT(b, ",\"state\":");
    wd_sb_name(b, &c->states[r->state]);
  } else if ((r->phase == WD_PH_STOP || r->phase == WD_PH_SPAN) && r->state != 0xff) {
    WD_SB_LIT(b, ",\"lastState\":");
    wd_sb_name(b, &c->states[r->state]);
  }
  if (r->phase == WD_PH_SPAN) {
    WD_SB_LIT(b, ",\"dur\":");
    wd_sb_i64(b, r->ts_ns >= r->raw ? (int64_t)(r->ts_ns - r->raw) : 0);
  }
  put_type_fields(c, b, r, NULL);
  wd_sb_ch(b, '}');
  return 0;
}

/* "[record,...]" for a ring snapshot. */
static int put_records(wd_ctx *c, wd_sb *b, const wd_ring_snap *rs) {
  if (wd_sb_reserve(b, 2)) return -1;
  wd_sb_ch(b, '[');
  for (uint32_t i = 0; rs->recs && i < rs->n; i++)
    if (put_record(c, b, &rs->recs[i], i > 0)) return -1;
  if (wd_sb_reserve(b, 2)) return -1;
  wd_sb_ch(b, ']');
  return 0;
}

static uint64_t ago(const wd_ctx *c, uint64_t ts) {
  return ts && ts < c->in->mono_ns ? c->in->mono_ns - ts : 0;
}

#define WD_TREE_DEPTH 16 /* deeper chains (never produced by NCCL) are listed flat */

static int put_node(wd_ctx *c, wd_sb *b, wd_forest *f, uint32_t idx, int depth, int nest) {
  const wd_ev_snap *e = &f->ev[idx];
  const wd_record *r = &e->start;
  if (wd_sb_reserve(b, REC_BOUND)) return -1;
  WD_SB_LIT(b, "{\"slot\":");
  wd_sb_u64(b, r->slot);
  WD_SB_LIT(b, ",\"type\":");
  wd_sb_name(b, &c->types[r->type]);
  WD_SB_LIT(b, ",\"parentSlot\":");
  put_parent(b, r->parent);
  if (e->is_root) {
    WD_SB_LIT(b, ",\"status\":\"");
    const char *st = wd_op_status_name(e->status);
    wd_sb_mem(b, st, strlen(st));
    /* Which evidence decided it, in the order of trust (events/judge.h). */
    WD_SB_LIT(b, "\",\"evidence\":\"");
    const char *ev = wd_judge_evidence_name(e->gpu, e->kch_expected);
    wd_sb_mem(b, ev, strlen(ev));
    wd_sb_ch(b, '"');
    if (e->gpu & (WD_GPU_NET_ERROR | WD_GPU_PROXY_GONE)) {
      /* Its proxy thread has exited: a network error when the kernel is known to wait still. */
      WD_SB_LIT(b, ",\"proxyThread\":\"");
      const char *pt = (e->gpu & WD_GPU_NET_ERROR) ? "exited_kernel_waiting" : "exited_kernel_unknown";
      wd_sb_mem(b, pt, strlen(pt));
      wd_sb_ch(b, '"');
    }
  }
  wd_sb_bool(b, ",\"stopped\":", e->stopped);
  WD_SB_LIT(b, ",\"ageMs\":");
  wd_sb_ms(b, ago(c, r->ts_ns));
  WD_SB_LIT(b, ",\"sinceProgressMs\":");
  wd_sb_ms(b, ago(c, e->last_ns ? e->last_ns : r->ts_ns));
  WD_SB_LIT(b, ",\"state\":");
  if (e->last_state == 0xff)
    WD_SB_LIT(b, "null");
  else
    wd_sb_name(b, &c->states[e->last_state]);
  WD_SB_LIT(b, ",\"tid\":");
  wd_sb_i64(b, r->tid);
  put_type_fields(c, b, r, e);
  switch (r->type) {
  case WD_T_COLL:
  case WD_T_P2P:
  case WD_T_CECOLL:
    WD_SB_LIT(b, ",\"kernelChannels\":{\"expected\":");
    wd_sb_u64(b, e->kch_expected);
    WD_SB_LIT(b, ",\"done\":");
    wd_sb_u64(b, e->kch_done);
    wd_sb_ch(b, '}');
    break;
  case WD_T_PROXYOP:
    WD_SB_LIT(b, ",\"stepsDone\":");
    wd_sb_u64(b, e->steps_done);
    break;
  default:
    break;
  }
  if (e->children_seen || e->children_open) {
    WD_SB_LIT(b, ",\"childrenSeen\":");
    wd_sb_u64(b, e->children_seen);
    WD_SB_LIT(b, ",\"childrenOpen\":");
    wd_sb_u64(b, e->children_open);
  }
  WD_SB_LIT(b, ",\"children\":[");
  if (nest && depth < WD_TREE_DEPTH) {
    int first = 1;
    for (uint32_t k = wd_forest_kids_first(f, r->slot); k < f->n && f->kids[k].parent == r->slot; k++) {
      uint32_t ci = f->kids[k].idx;
      if (f->placed[ci] || f->ev[ci].is_root) continue;
      f->placed[ci] = 1;
      if (!first) {
        if (wd_sb_reserve(b, 1)) return -1;
        wd_sb_ch(b, ',');
      }
      first = 0;
      if (put_node(c, b, f, ci, depth + 1, 1)) return -1;
    }
  }
  if (wd_sb_reserve(b, 3)) return -1;
  WD_SB_LIT(b, "]}");
  return 0;
}

/* Append to an open "[" list: the tops with their trees (tops) or, flat, every event not shown
 * yet (!tops), oldest first. */
static int forest_list(wd_ctx *c, wd_sb *b, int tops, int *first) {
  wd_forest *f = &c->forest;
  for (uint32_t i = 0; i < f->n; i++) {
    uint32_t idx = f->order[i].idx;
    if (tops ? f->placed[idx] != 2 : f->placed[idx] != 0) continue;
    if (!tops) f->placed[idx] = 1;
    if (!*first) {
      if (wd_sb_reserve(b, 1)) return -1;
      wd_sb_ch(b, ',');
    }
    *first = 0;
    if (put_node(c, b, f, idx, 0, tops)) return -1;
  }
  return 0;
}

static int put_section(wd_ctx *c, wd_sb *b, const wd_section *s) {
  int first = 1;
  switch (s->kind) {
  case SEC_RECORDS:
    return put_records(c, b, s->ring);
  case SEC_INFLIGHT: /* the forest stays for the SEC_OPEN that follows */
    if (wd_forest_build(&c->forest, s->ev, s->n, 0) || wd_sb_reserve(b, 1)) return -1;
    wd_sb_ch(b, '[');
    if (forest_list(c, b, 1, &first) || wd_sb_reserve(b, 1)) return -1;
    wd_sb_ch(b, ']');
    return 0;
  case SEC_OPEN:
    if (c->forest.ev != s->ev && wd_forest_build(&c->forest, s->ev, s->n, 0)) return -1;
    if (wd_sb_reserve(b, 1)) return -1;
    wd_sb_ch(b, '[');
    if (forest_list(c, b, 0, &first) || wd_sb_reserve(b, 1)) return -1;
    wd_sb_ch(b, ']');
    wd_forest_free(&c->forest);
    return 0;
  case SEC_DETACHED: /* trees, then whatever is left (parent cycles) flat, in one list */
    if (wd_forest_build(&c->forest, s->ev, s->n, 1) || wd_sb_reserve(b, 1)) return -1;
    wd_sb_ch(b, '[');
    if (forest_list(c, b, 1, &first) || forest_list(c, b, 0, &first) || wd_sb_reserve(b, 1))
      return -1;
    wd_sb_ch(b, ']');
    wd_forest_free(&c->forest);
    return 0;
  default:
    return -1;
  }
}

/* ------------------------------------------------------------------------------------------ */
/* cJSON helpers: each creates the item and attaches it to its parent at once.                */

static int add_str(cJSON *o, const char *key, const char *s) {
  char *clean = wd_utf8_clean(s ? s : "");
  if (!clean) return -1;
  cJSON *it = cJSON_AddStringToObject(o, key, clean);
  free(clean);
  return it ? 0 : -1;
}

static int add_bounded_str(cJSON *o, const char *key, const char *s, size_t max) {
  char buf[256];
  size_t n = strnlen(s, max < sizeof(buf) ? max : sizeof(buf) - 1);
  memcpy(buf, s, n);
  buf[n] = 0;
  return add_str(o, key, buf);
}

static int add_num(cJSON *o, const char *key, double v) {
  return cJSON_AddNumberToObject(o, key, v) ? 0 : -1;
}

static int add_bool(cJSON *o, const char *key, int v) {
  return cJSON_AddBoolToObject(o, key, v != 0) ? 0 : -1;
}

static int add_hex(cJSON *o, const char *key, uint64_t v) {
  char buf[24];
  snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)v);
  return cJSON_AddStringToObject(o, key, buf) ? 0 : -1;
}

static int add_ms(cJSON *o, const char *key, uint64_t ns) { return add_num(o, key, (double)ns / 1e6); }

/* Attach an item created by the caller; the item is freed when it cannot be attached. */
static int push(cJSON *arr, cJSON *it) {
  if (!it) return -1;
  if (!cJSON_AddItemToArray(arr, it)) {
    cJSON_Delete(it);
    return -1;
  }
  return 0;
}

/* A placeholder for a bulky part: raw "\x01<index>". cJSON escapes control characters in every
 * string and key, so a raw 0x01 byte in the printed skeleton can only be one of these. */
static int add_section(wd_ctx *c, cJSON *o, const char *key, wd_section sec) {
  if (c->nsecs == c->cap_secs) {
    uint32_t cap = c->cap_secs ? c->cap_secs * 2 : 32;
    wd_section *p = realloc(c->secs, sizeof(*p) * cap);
    if (!p) return -1;
    c->secs = p;
    c->cap_secs = cap;
  }
  char tok[16];
  snprintf(tok, sizeof(tok), "\x01%u", c->nsecs);
  if (!cJSON_AddRawToObject(o, key, tok)) return -1;
  c->secs[c->nsecs++] = sec;
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Document sections.                                                                          */


static const char *bt_status_name(int status) {
  switch (status) {
  case WD_BT_OK: return "ok";
  case WD_BT_SELF: return "self";
  case WD_BT_NO_ANSWER: return "no_answer";
  case WD_BT_BLOCKED: return "blocked";
  case WD_BT_GONE: return "gone";
  case WD_BT_LEFT_ALONE: return "left_alone";
  case WD_BT_NOT_ASKED: return "not_asked";
  default: return "unknown";
  }
}

/* Python stacks, when the dump collected them: "python": {available, note, threads[]}. */
static int put_python(cJSON *root, const wd_py_result *py) {
  if (!py || !py->available) return 0; /* no interpreter: no section */
  cJSON *o = cJSON_AddObjectToObject(root, "python");
  if (!o || add_bool(o, "available", py->available) ||
      add_bounded_str(o, "note", py->note, sizeof(py->note)))
    return -1;
  cJSON *arr = cJSON_AddArrayToObject(o, "threads");
  if (!arr) return -1;
  for (int i = 0; py->threads && i < py->nthreads; i++) {
    const wd_py_thread *t = &py->threads[i];
    cJSON *to = cJSON_CreateObject();
    if (push(arr, to) || add_hex(to, "ident", t->ident)) return -1;
    if (t->tid ? add_num(to, "tid", t->tid) : !cJSON_AddNullToObject(to, "tid")) return -1;
    if (add_bool(to, "truncated", t->truncated)) return -1;
    cJSON *frames = cJSON_AddArrayToObject(to, "frames");
    if (!frames) return -1;
    for (int k = 0; k < t->nframes && k < WD_PY_MAX_FRAMES; k++) {
      cJSON *fo = cJSON_CreateObject();
      if (push(frames, fo) || add_bounded_str(fo, "file", t->frames[k].file, sizeof(t->frames[k].file)) ||
          add_num(fo, "line", t->frames[k].line) ||
          add_bounded_str(fo, "function", t->frames[k].func, sizeof(t->frames[k].func)))
        return -1;
    }
  }
  return 0;
}

static const char *glaunch_state(uint8_t st) {
  switch (st) {
  case WD_GL_WAIT: return "notReached";
  case WD_GL_IN: return "inProgress";
  case WD_GL_PASSED: return "passed";
  default: return "notReplayed";
  }
}

/* Launches captured into CUDA graphs and the replay the GPU is at (events/graph.h). */
static int put_glaunch(cJSON *o, const wd_comm_snap *cs) {
  if (cs->nglaunch == 0 && cs->glaunch_unfollowed == 0) return 0;
  cJSON *arr = cJSON_AddArrayToObject(o, "graphLaunches");
  if (!arr || add_num(o, "graphLaunchesUnfollowed", cs->glaunch_unfollowed)) return -1;
  for (uint32_t i = 0; cs->glaunch && i < cs->nglaunch; i++) {
    const wd_glaunch_snap *g = &cs->glaunch[i];
    cJSON *e = cJSON_CreateObject();
    if (push(arr, e) || add_num(e, "graph", g->graph) || add_num(e, "launch", g->pos) ||
        add_str(e, "func", g->func ? wd_str(g->func) : "") ||
        add_str(e, "datatype", g->dtype ? wd_str(g->dtype) : "") ||
        add_num(e, "count", (double)g->count) || add_num(e, "root", g->root) ||
        add_num(e, "calls", g->ncalls) || add_num(e, "replays", (double)g->replays) ||
        add_str(e, "state", glaunch_state(g->state)) || add_ms(e, "forMs", g->for_ns) ||
        (g->error && add_bool(e, "queryError", 1)))
      return -1;
  }
  return 0;
}

static int put_stall(cJSON *arr, const wd_stall *s) {
  cJSON *o = cJSON_CreateObject();
  if (push(arr, o)) return -1;
  if (add_hex(o, "commId", s->comm_id) ||
      add_bounded_str(o, "commName", s->comm_name, sizeof(s->comm_name)) ||
      add_num(o, "rank", s->rank) || add_num(o, "nranks", s->nranks) ||
      add_str(o, "type", wd_type_name(s->type)) || add_str(o, "func", wd_str(s->func)) ||
      add_num(o, "seq", (double)s->seq) || add_num(o, "peer", s->peer) ||
      add_num(o, "slot", s->slot) || add_ms(o, "sinceProgressMs", s->since_progress_ns) ||
      add_ms(o, "ageMs", s->age_ns) ||
      add_bounded_str(o, "waitingOn", s->waiting_on, sizeof(s->waiting_on)))
    return -1;
  if (s->graph) {
    cJSON *g = cJSON_AddObjectToObject(o, "graph");
    if (!g || add_num(g, "graph", s->graph) || add_num(g, "launch", s->graph_pos) ||
        add_num(g, "replay", (double)s->replay) || add_str(g, "state", glaunch_state(s->graph_state)))
      return -1;
  }
  return 0;
}

static int put_trigger(cJSON *root, const wd_dump_input *in) {
  cJSON *t = cJSON_AddObjectToObject(root, "trigger");
  if (!t) return -1;
  const char *reason = in->reason ? in->reason : "";
  if (in->nstalls || !strcmp(reason, "stall")) {
    cJSON *arr = cJSON_AddArrayToObject(t, "stalls");
    if (!arr) return -1;
    for (uint32_t i = 0; in->stalls && i < in->nstalls; i++)
      if (put_stall(arr, &in->stalls[i])) return -1;
  }
  if (in->signo || !strcmp(reason, "signal")) {
    char buf[32];
    if (add_str(t, "signal", wd_signal_name(in->signo, buf, sizeof(buf))) ||
        add_num(t, "senderPid", in->sender_pid))
      return -1;
  }
  if (in->abort_comm_id || !strcmp(reason, "abort")) {
    if (add_hex(t, "commId", in->abort_comm_id) || add_num(t, "inflight", in->abort_inflight))
      return -1;
  }
  if (in->trig_on) {
    /* The cost of the trigger protocol so far, for scale tests and for on-call's doubts. */
    cJSON *w = cJSON_AddObjectToObject(t, "watch");
    if (!w || add_num(w, "nextEpisode", in->trig_next) ||
        !cJSON_AddBoolToObject(w, "poller", in->trig_poller) ||
        add_num(w, "sharedChecks", (double)in->trig_shared) || add_num(w, "nodeChecks", (double)in->trig_node))
      return -1;
  }
  if (in->peer_trigger || !strcmp(reason, "peer")) {
    if (add_str(t, "file", in->peer_trigger ? in->peer_trigger : "")) return -1;
    cJSON *origin = in->peer_trigger_json ? cJSON_Parse(in->peer_trigger_json) : NULL;
    if (!origin) origin = cJSON_CreateNull(); /* absent or not JSON: the file name still tells */
    if (!origin || !cJSON_AddItemToObject(t, "origin", origin)) {
      cJSON_Delete(origin);
      return -1;
    }
  }
  return 0;
}

/* What this process's plugin cannot see, given its settings and each communicator's path:
 * said in every dump rather than assumed fine (docs/architecture.md, "What NCCL tells"). */
/* The process's memory against its budget: what a 512-communicator process really holds. */
static int put_memory(cJSON *root, const wd_dump_input *in) {
  cJSON *m = cJSON_AddObjectToObject(root, "memory");
  if (!m || add_num(m, "budgetBytes", (double)in->mem_budget) ||
      add_num(m, "ringBytes", (double)in->mem_rings) || add_num(m, "slotBytes", (double)in->mem_slots) ||
      add_num(m, "commsWithSmallerRings", (double)in->mem_shrunk) ||
      add_num(m, "slotChunksRefused", (double)in->mem_refused))
    return -1;
  /* Rings kept in memory because the node's share of /dev/shm could not hold their file. */
  if (in->ring_files_note[0] &&
      add_bounded_str(m, "ringFilesRefused", in->ring_files_note, sizeof(in->ring_files_note)))
    return -1;
  return 0;
}

static int put_blind_spots(cJSON *o, const wd_config *cfg, const wd_dump_input *in) {
  int cuda = 0, nccl = 0, graphs = 0, unwatched = 0;
  for (uint32_t i = 0; in->comms && i < in->ncomms; i++) {
    if (in->comms[i].gpu_events) cuda = 1;
    else nccl = 1;
    if (in->comms[i].graph_watch) graphs = 1;
    else if (in->comms[i].gpu_events) unwatched = 1;
  }
  cJSON *a = cJSON_AddArrayToObject(o, "blindSpots");
  if (!a) return -1;
  const char *spots[10];
  int n = 0;
  spots[n++] = "RMA operations: NCCL reports no profiler events for them";
  spots[n++] = graphs && !unwatched
                  ? "Broadcast on the AllGatherV path and symmetric-memory kernels: API events "
                    "only, never judged (a captured one's replays are, by its graph's records)"
                  : "Broadcast on the AllGatherV path and symmetric-memory kernels: API events only, "
                    "never judged; a captured symmetric kernel's replays get no KernelCh: completed at "
                    "their Coll's stop";
  if (nccl || !cuda)
    spots[n++] = "without CUDA events: CE collectives are not followed past enqueue, and an "
                 "intra-node op's completion rests on NCCL's KernelCh counters, which can pair "
                 "with another op";
  if (unwatched)
    spots[n++] = "graph replays launch no kernel the plugin sees (NCCL_WATCHDOG_GRAPH_LAUNCHES=0, or "
                 "a driver without cuEventRecordWithFlags / cuLaunchHostFunc): judged on NCCL's events";
  if (graphs)
    spots[n++] = "captured launches beyond NCCL_WATCHDOG_GRAPH_LAUNCHES per communicator, or made "
                 "while the driver refused a node, are not followed (comms[].graphLaunchesUnfollowed)";
  int set = 0, lost = 0;
  for (uint32_t i = 0; in->comms && i < in->ncomms; i++) {
    set |= in->comms[i].mask_set;
    lost |= in->comms[i].mask_set & ~in->comms[i].mask_now;
  }
  if (!in->comms || !in->ncomms) set = cfg->event_mask;
  if (lost)
    spots[n++] = "NCCL's event mask was changed under the plugin (NCCL RAS PROFILER_MASK?): "
                 "event types it needs are off; see comms[].eventMaskNow";
  if (!(set & (1 << WD_T_KERNELCH)))
    spots[n++] = cuda ? (unwatched ? "KernelCh is off (CUDA events give completion): intra-node work "
                                     "replayed from a CUDA graph is not seen to complete"
                                   : "KernelCh is off (CUDA events give completion): intra-node work "
                                     "replayed from a CUDA graph is followed by its captured "
                                     "launch's records only (comms[].graphLaunches)")
                      : "KernelCh is off: an op without network work is not seen past enqueue";
  if (!(cfg->event_mask & (1 << WD_T_PROXYSTEP)))
    spots[n++] = "ProxyStep is off: network progress is seen per ProxyOp only";
  for (int i = 0; i < n; i++)
    if (push(a, cJSON_CreateString(spots[i]))) return -1;
  return 0;
}

static int put_config(cJSON *root, const wd_config *cfg_in, const wd_dump_input *in) {
  wd_config def;
  const wd_config *cfg = cfg_in;
  if (!cfg) {
    wd_config_defaults(&def);
    cfg = &def;
  }
  cJSON *o = cJSON_AddObjectToObject(root, "config");
  if (!o) return -1;
  char s1[32], s2[32];
  if (add_bool(o, "enable", cfg->enable) || add_ms(o, "timeoutMs", cfg->timeout_ns) ||
      add_ms(o, "pollMs", cfg->poll_ns) ||
      add_ms(o, "unreachedTimeoutMs", cfg->unreached_timeout_ns) ||
      add_bounded_str(o, "dumpDir", cfg->dump_dir, sizeof(cfg->dump_dir)) ||
      add_num(o, "ringSize", cfg->ring_size) || add_num(o, "proxyRingSize", cfg->proxy_ring_size) ||
      add_num(o, "maxEvents", cfg->max_events) ||
      add_str(o, "signal", wd_signal_name(cfg->signal, s1, sizeof(s1))) ||
      add_str(o, "backtraceSignal", wd_signal_name(cfg->bt_signal, s2, sizeof(s2))) ||
      add_str(o, "action", cfg->action == WD_ACTION_ABORT ? "abort" : "dump") ||
      add_hex(o, "eventMask", (uint64_t)(unsigned)cfg->event_mask) ||
      add_bool(o, "backtrace", cfg->backtrace) ||
      add_bool(o, "backtraceInterruptAll", cfg->backtrace == WD_BACKTRACE_ALL) || add_ms(o, "backtraceWaitMs", cfg->bt_wait_ns) ||
      add_bool(o, "peerDumps", cfg->peer_dumps) || add_num(o, "maxDumps", cfg->max_dumps) ||
      add_num(o, "peerRecords", cfg->peer_records) ||
      add_bool(o, "gpuEvents", cfg->gpu_events) || put_blind_spots(o, cfg, in))
    return -1;
  return 0;
}

static const char *const wd_env_names[] = {
    "CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
    "SLURM_STEP_ID", "TORCHELASTIC_RUN_ID", "RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK",
    "TORCHELASTIC_RESTART_COUNT", "SLURM_RESTART_COUNT", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
    "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    /* torchft's examples name each replica group's torchrun so (its Manager's replica_id ends
     * with it): the analyzer's global rank of a torchft job (analyzer.md, "Ranks"). */
    "REPLICA_GROUP_ID", "NUM_REPLICA_GROUPS"};

static int env_wanted(const char *kv, size_t klen) {
  if (klen > 5 && !strncmp(kv, "NCCL_", 5)) return 1;
  for (size_t i = 0; i < sizeof(wd_env_names) / sizeof(wd_env_names[0]); i++)
    if (strlen(wd_env_names[i]) == klen && !strncmp(kv, wd_env_names[i], klen)) return 1;
  return 0;
}

static int put_env(cJSON *root) {
  cJSON *o = cJSON_AddObjectToObject(root, "env");
  if (!o) return -1;
  for (char **e = environ; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq) continue;
    size_t klen = (size_t)(eq - *e);
    if (!env_wanted(*e, klen) || klen >= 256) continue;
    char key[256];
    memcpy(key, *e, klen);
    key[klen] = 0;
    char *ckey = wd_utf8_clean(key);
    if (!ckey) return -1;
    if (cJSON_GetObjectItemCaseSensitive(o, ckey)) { /* duplicate entry: the first one wins */
      free(ckey);
      continue;
    }
    int rc = add_str(o, ckey, eq + 1);
    free(ckey);
    if (rc) return -1;
  }
  return 0;
}

static int put_strings(cJSON *root) {
  cJSON *arr = cJSON_AddArrayToObject(root, "strings");
  if (!arr) return -1;
  unsigned n = wd_str_count();
  if (n > WD_STR_MAX) n = WD_STR_MAX;
  for (unsigned i = 0; i < n; i++) {
    char *clean = wd_utf8_clean(wd_str((uint8_t)i));
    if (!clean) return -1;
    int rc = push(arr, cJSON_CreateString(clean));
    free(clean);
    if (rc) return -1;
  }
  return 0;
}

static int put_ring(wd_ctx *c, cJSON *parent, const char *key, const wd_ring_snap *rs) {
  cJSON *o = cJSON_AddObjectToObject(parent, key);
  if (!o) return -1;
  if (add_num(o, "capacity", rs->capacity) || add_num(o, "written", (double)rs->written) ||
      add_num(o, "torn", rs->torn) || add_num(o, "lost", (double)rs->lost))
    return -1;
  return add_section(c, o, "records", (wd_section){SEC_RECORDS, rs, NULL, 0});
}

static int put_seq(cJSON *o, const char *key, const wd_seq_snap *sq, uint32_t n) {
  cJSON *seq = cJSON_AddArrayToObject(o, key);
  if (!seq) return -1;
  for (uint32_t i = 0; i < n; i++) {
    cJSON *s = cJSON_CreateObject();
    if (push(seq, s)) return -1;
    if (add_str(s, "func", wd_str(sq[i].func)) ||
        add_num(s, "lastEnqueued", (double)sq[i].enqueued) ||
        add_num(s, "lastCompleted", (double)sq[i].completed))
      return -1;
  }
  return 0;
}

/* The fail-slow telemetry of a communicator: its links and its arrival wait. */
static int put_telemetry(cJSON *o, const wd_comm_snap *cs) {
  cJSON *t = cJSON_AddObjectToObject(o, "telemetry");
  cJSON *links = t ? cJSON_AddArrayToObject(t, "links") : NULL;
  if (!links) return -1;
  for (uint32_t i = 0; i < cs->nlinks; i++) {
    const wd_link_snap *l = &cs->links[i];
    cJSON *k = cJSON_CreateObject();
    if (push(links, k) || add_num(k, "peer", l->peer) || add_num(k, "channel", l->channel) ||
        add_str(k, "direction", l->send ? "transmit" : "receive") || add_num(k, "bytes", (double)l->bytes) ||
        add_num(k, "steps", (double)l->steps) || add_num(k, "stepS", l->step_s) ||
        add_num(k, "busyS", l->busy_s) || add_num(k, "bytesPerS", l->rate) ||
        (l->send && (add_num(k, "networkS", l->net_s) || add_num(k, "networkBytesPerS", l->net_rate))))
      return -1;
  }
  if (cs->have_arrival) {
    cJSON *a = cJSON_AddObjectToObject(t, "arrival");
    if (!a || add_num(a, "waitS", cs->arrival_wait_s) || add_num(a, "lagS", cs->arrival_lag_s) ||
        add_str(a, "measure", cs->arrival_sync ? "initial_sync" : "enqueue_to_completion"))
      return -1;
  }
  return 0;
}

static int put_comm(wd_ctx *c, cJSON *arr, const wd_comm_snap *cs) {
  cJSON *o = cJSON_CreateObject();
  if (push(arr, o)) return -1;
  if (add_hex(o, "commId", cs->comm_id) ||
      add_bounded_str(o, "commName", cs->name, sizeof(cs->name)) || add_num(o, "rank", cs->rank) ||
      add_num(o, "nranks", cs->nranks) || add_num(o, "nNodes", cs->nnodes) ||
      add_num(o, "abi", cs->abi) || add_num(o, "cudaDev", cs->cuda_dev) ||
      add_bounded_str(o, "gpuUuid", cs->gpu_uuid, sizeof(cs->gpu_uuid)))
    return -1;
  if (cs->init_ns ? add_ms(o, "initAgoMs", ago(c, cs->init_ns))
                  : !cJSON_AddNullToObject(o, "initAgoMs"))
    return -1;
  if (cs->last_progress_ns ? add_ms(o, "sinceProgressMs", ago(c, cs->last_progress_ns))
                           : !cJSON_AddNullToObject(o, "sinceProgressMs"))
    return -1;
  if (add_num(o, "droppedEvents", (double)cs->dropped) ||
      add_num(o, "staleHandles", (double)cs->stale))
    return -1;
  if (add_str(o, "gpuProgress", cs->gpu_events ? "cudaEvents" : "ncclEvents") ||
      add_num(o, "launchesUnbracketed", cs->launches_unbracketed) ||
      add_num(o, "gpuError", cs->gpu_error) ||
      add_hex(o, "eventMask", (uint64_t)(unsigned)cs->mask_set) ||
      add_hex(o, "eventMaskNow", (uint64_t)(unsigned)cs->mask_now))
    return -1;
  if (put_seq(o, "seq", cs->seq, cs->nseq < 32 ? cs->nseq : 32) ||
      put_seq(o, "ceSeq", cs->ce_seq, cs->nceseq < 8 ? cs->nceseq : 8))
    return -1;
  cJSON *p2p = cJSON_AddObjectToObject(o, "p2p");
  if (!p2p || add_num(p2p, "enqueued", (double)cs->p2p_enqueued) ||
      add_num(p2p, "completed", (double)cs->p2p_completed))
    return -1;
  if (put_glaunch(o, cs)) return -1;
  uint32_t nev = cs->events ? cs->nevents : 0;
  if (add_section(c, o, "inflight", (wd_section){SEC_INFLIGHT, NULL, cs->events, nev}) ||
      add_section(c, o, "open", (wd_section){SEC_OPEN, NULL, cs->events, nev}))
    return -1;
  if (put_ring(c, o, "ring", &cs->ring) || put_ring(c, o, "proxyRing", &cs->proxy_ring)) return -1;
  return cs->telemetry ? put_telemetry(o, cs) : 0;
}

static int put_detached(wd_ctx *c, cJSON *root, const wd_dump_input *in) {
  cJSON *o = cJSON_AddObjectToObject(root, "detached");
  if (!o) return -1;
  uint32_t n = in->detached ? in->ndetached : 0;
  if (add_section(c, o, "open", (wd_section){SEC_DETACHED, NULL, in->detached, n})) return -1;
  return put_ring(c, o, "ring", &in->detached_ring);
}

static int put_threads(cJSON *root, const wd_bt_result *bt) {
  cJSON *o = cJSON_AddObjectToObject(root, "threads");
  if (!o) return -1;
  cJSON *mods = cJSON_AddArrayToObject(root, "modules");
  if (!mods) return -1;
  if (!bt) return add_bool(o, "disabled", 1);
  if (add_num(o, "asked", bt->asked) || add_num(o, "answered", bt->answered)) return -1;
  /* The stack signal had been replaced: what was found, and whether it was taken back. */
  if (bt->signal_taken_back) {
    cJSON *sg = cJSON_AddObjectToObject(o, "signal");
    if (!sg || add_str(sg, "found", bt->signal_found) ||
        add_str(sg, "action", bt->signal_taken_back > 0 ? "taken_back" : "not_ours_threads_not_asked"))
      return -1;
  }
  cJSON *list = cJSON_AddArrayToObject(o, "list");
  if (!list) return -1;
  for (int i = 0; bt->threads && i < bt->nthreads; i++) {
    const wd_bt_thread *t = &bt->threads[i];
    cJSON *to = cJSON_CreateObject();
    if (push(list, to)) return -1;
    if (add_num(to, "tid", t->tid) || add_bounded_str(to, "name", t->name, sizeof(t->name)) ||
        add_str(to, "status", bt_status_name(t->status)))
      return -1;
    if (t->syscall[0] && add_bounded_str(to, "syscall", t->syscall, sizeof(t->syscall))) return -1;
    if (t->kstate) {
      char k[2] = {t->kstate, '\0'};
      if (add_str(to, "kernelState", k)) return -1;
    }
    cJSON *frames = cJSON_AddArrayToObject(to, "frames");
    if (!frames) return -1;
    int nf = t->nframes < 0 ? 0 : t->nframes > WD_BT_MAX_FRAMES ? WD_BT_MAX_FRAMES : t->nframes;
    for (int k = 0; k < nf; k++) {
      const wd_bt_frame *fr = &t->frames[k];
      cJSON *fo = cJSON_CreateObject();
      if (push(frames, fo)) return -1;
      if (add_hex(fo, "pc", fr->pc)) return -1;
      if (fr->module[0] && (add_bounded_str(fo, "module", fr->module, sizeof(fr->module)) ||
                            add_hex(fo, "moduleOffset", fr->module_offset)))
        return -1;
      if (fr->symbol[0] && (add_bounded_str(fo, "symbol", fr->symbol, sizeof(fr->symbol)) ||
                            add_num(fo, "symbolOffset", (double)fr->symbol_offset)))
        return -1;
      if (fr->mangled[0] && add_bounded_str(fo, "mangled", fr->mangled, sizeof(fr->mangled)))
        return -1;
    }
  }
  for (int i = 0; bt->modules && i < bt->nmodules; i++) {
    const wd_bt_module *m = &bt->modules[i];
    cJSON *mo = cJSON_CreateObject();
    if (push(mods, mo)) return -1;
    if (add_bounded_str(mo, "path", m->path, sizeof(m->path)) || add_hex(mo, "start", m->start) ||
        add_hex(mo, "end", m->end) || add_hex(mo, "offset", m->offset) ||
        add_bounded_str(mo, "perms", m->perms, sizeof(m->perms)))
      return -1;
  }
  return 0;
}

/* Which job, attempt, rank and process wrote the dump: restarted attempts share the dump
 * directory (torchrun's agent, Slurm's requeue), host names and pids can repeat (containers). */
/* A whole non-negative number from the environment: added when it is one, else left out. */
static int add_env_count(cJSON *o, const char *key, const char *name, const char *alt) {
  const char *v = getenv(name);
  if ((!v || !*v) && alt) v = getenv(alt);
  if (!v || !*v) return 0;
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (*end || errno || v[0] == '-') return 0;
  return add_num(o, key, (double)n);
}

#define WD_IDENTITY_COMMS 32
static int put_identity(cJSON *root, const wd_dump_input *in) {
  cJSON *o = cJSON_AddObjectToObject(root, "identity");
  if (!o) return -1;
  const char *job = getenv("SLURM_JOB_ID");
  if (!job || !*job) job = getenv("TORCHELASTIC_RUN_ID");
  if ((job && *job && add_str(o, "job", job)) ||
      add_env_count(o, "torchelasticRestartCount", "TORCHELASTIC_RESTART_COUNT", NULL) ||
      add_env_count(o, "slurmRestartCount", "SLURM_RESTART_COUNT", NULL) ||
      add_env_count(o, "globalRank", "RANK", "SLURM_PROCID") || add_num(o, "episodes", in->episodes))
    return -1;
  /* The job's stall episode a stall or peer dump answers (its trigger, trigger.h): the watch
   * moved past it when the dump was written. */
  const char *r = in->reason ? in->reason : "";
  if (in->trig_on && in->trig_next > 1 && (!strcmp(r, "stall") || !strcmp(r, "peer")) &&
      add_num(o, "jobEpisode", in->trig_next - 1))
    return -1;
  /* The PID namespace tells apart two containers (or cloned nodes) with one host name, one boot
   * and one pid whose processes started in the same clock tick. */
  if (in->proc && ((in->proc->boot_id[0] && add_str(o, "bootId", in->proc->boot_id)) ||
                   (in->proc->start_wall_ns && add_hex(o, "processStartNs", in->proc->start_wall_ns)) ||
                   (in->proc->pidns_ino && add_hex(o, "pidNs", in->proc->pidns_ino))))
    return -1;
  /* The communicators this process had alive when it wrote the dump: an incarnation of the job
   * is the communicators made together and the processes that use them, and this list (in the
   * file's first bytes) lets the automatic verdict count a dump toward its episode by them, not
   * by a launcher's counter. Bounded: the rest are in comms[]. Beside each, this process's rank
   * in it and its size ("rank/nranks"): the verdict's settle waits until every rank of every
   * communicator its dumps name has answered, whatever the launcher's WORLD_SIZE says (torchft's
   * replica groups each run a torchrun of their own: WORLD_SIZE is the group's). */
  cJSON *ids = cJSON_AddArrayToObject(o, "comms");
  cJSON *ranks = cJSON_AddArrayToObject(o, "ranks");
  if (!ids || !ranks) return -1;
  for (uint32_t i = 0; i < in->ncomms && i < WD_IDENTITY_COMMS; i++) {
    char buf[24];
    snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)in->comms[i].comm_id);
    if (!cJSON_AddItemToArray(ids, cJSON_CreateString(buf))) return -1;
    snprintf(buf, sizeof(buf), "%d/%d", in->comms[i].rank, in->comms[i].nranks);
    if (!cJSON_AddItemToArray(ranks, cJSON_CreateString(buf))) return -1;
  }
  return 0;
}

static int put_time(cJSON *root, const wd_dump_input *in) {
  cJSON *o = cJSON_AddObjectToObject(root, "time");
  if (!o) return -1;
  char buf[64];
  struct tm tm;
  time_t sec = (time_t)in->wall_sec;
  if (!gmtime_r(&sec, &tm)) memset(&tm, 0, sizeof(tm));
  snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%09lldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (long long)in->wall_nsec);
  uint64_t wall_ns = (uint64_t)in->wall_sec * 1000000000ull + (uint64_t)in->wall_nsec;
  if (add_str(o, "wall", buf) || add_hex(o, "wall_ns", wall_ns) || add_hex(o, "mono_ns", in->mono_ns))
    return -1;
  return 0;
}

/* Room for the bulky parts, so the document buffer is mapped once (it grows if needed). */
static size_t estimate(const wd_dump_input *in) {
  size_t n = 0;
  for (uint32_t i = 0; in->comms && i < in->ncomms; i++)
    n += ((size_t)in->comms[i].ring.n + in->comms[i].proxy_ring.n) * 220 +
         (size_t)in->comms[i].nevents * 400;
  n += (size_t)in->detached_ring.n * 220 + (size_t)in->ndetached * 400;
  return n;
}

/* The whole document into out (a mapped buffer): the skeleton from cJSON with the bulky parts
 * formatted in place of their placeholders. */
static int render_doc(const wd_dump_input *in, wd_sb *out) {
  int rc = -1;
  char *skel = NULL;
  memset(out, 0, sizeof(*out)); /* the failure path frees it */
  wd_ctx *c = calloc(1, sizeof(*c)); /* zeroed: the failure path frees its buffers */
  cJSON *root = cJSON_CreateObject();
  if (!c || !root) goto end;
  ctx_init(c, in);

  if (add_str(root, "format", WD_DUMP_FORMAT) || add_num(root, "version", WD_DUMP_VERSION) ||
      add_str(root, "reason", in->reason ? in->reason : "") ||
      add_num(root, "dumpSeq", in->dump_seq) ||
      add_bounded_str(root, "host", in->host, sizeof(in->host)) || add_num(root, "pid", in->pid))
    goto end;
  cJSON *plugin = cJSON_AddObjectToObject(root, "plugin");
  if (!plugin || add_str(plugin, "name", "nccl-watchdog") ||
      add_str(plugin, "version", WD_VERSION) || add_num(plugin, "abi", in->abi))
    goto end;
  if (in->nccl_version > 0) {
    char vbuf[24];
    if (add_str(plugin, "ncclVersion", wd_nccl_version_str(in->nccl_version, vbuf, sizeof vbuf))) goto end;
  }
  if (put_time(root, in) || put_identity(root, in) || put_trigger(root, in) || put_config(root, in->cfg, in) ||
      put_memory(root, in) || put_env(root) ||
      put_strings(root))
    goto end;
  cJSON *comms = cJSON_AddArrayToObject(root, "comms");
  if (!comms) goto end;
  for (uint32_t i = 0; in->comms && i < in->ncomms; i++)
    if (put_comm(c, comms, &in->comms[i])) goto end;
  if (put_detached(c, root, in) || put_threads(root, in->threads) || put_python(root, in->python))
    goto end;

  skel = cJSON_PrintUnformatted(root);
  if (!skel) goto end;
  size_t skel_len = strlen(skel);
  memset(out, 0, sizeof(*out));
  out->mapped = 1;
  if (wd_sb_reserve(out, skel_len + estimate(in))) goto end;
  const char *p = skel;
  for (;;) {
    const char *m = strchr(p, '\x01');
    size_t n = m ? (size_t)(m - p) : strlen(p);
    if (wd_sb_reserve(out, n)) goto end;
    wd_sb_mem(out, p, n);
    if (!m) break;
    uint32_t idx = 0;
    for (p = m + 1; *p >= '0' && *p <= '9'; p++) idx = idx * 10 + (uint32_t)(*p - '0');
    if (idx >= c->nsecs || put_section(c, out, &c->secs[idx])) goto end;
  }
  out->p[out->len] = 0;
  rc = 0;
end:
  if (rc) wd_sb_free(out);
  if (c) {
    wd_forest_free(&c->forest);
    free(c->secs);
  }
  free(skel);
  cJSON_Delete(root);
  free(c);
  return rc;
}

char *wd_dump_render(const wd_dump_input *in) {
  if (!in) return NULL;
  wd_sb doc;
  if (render_doc(in, &doc)) return NULL;
  char *out = malloc(doc.len + 1);
  if (out) memcpy(out, doc.p, doc.len + 1);
  wd_sb_free(&doc);
  return out;
}

/* gzip format (zlib's deflate with a gzip wrapper: windowBits 15 + 16), so `zcat` and Python's
 * gzip read it as well as the analyzer. Returns a malloc'ed buffer, NULL on failure. */
static char *gzip_buffer(const char *data, size_t len, size_t *out_len) {
  z_stream z;
  memset(&z, 0, sizeof z);
  if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return NULL;
  uLong cap = deflateBound(&z, (uLong)len) + 32;
  char *out = malloc(cap);
  if (!out) {
    deflateEnd(&z);
    return NULL;
  }
  z.next_in = (Bytef *)(uintptr_t)data;
  z.avail_in = (uInt)len;
  z.next_out = (Bytef *)out;
  z.avail_out = (uInt)cap;
  int rc = deflate(&z, Z_FINISH);
  *out_len = z.total_out;
  deflateEnd(&z);
  if (rc != Z_STREAM_END) {
    free(out);
    return NULL;
  }
  return out;
}

int wd_dump_write(const wd_dump_input *in, const char *dir, char *path_out, size_t path_len) {
  if (!in || !dir) return -1;
  wd_sb doc;
  if (render_doc(in, &doc)) return -1;
  const char *reason = in->reason ? in->reason : "dump";
  int rc;
  char *gz = NULL;
  size_t gz_len = 0;
  /* Compression on request; should it fail (memory), the dump is written plain, never lost. */
  int compress = in->cfg && (in->cfg->compress == WD_COMPRESS_ALL ||
                             (in->cfg->compress == WD_COMPRESS_PEER && in->summary));
  if (compress && doc.len < UINT32_MAX && (gz = gzip_buffer(doc.p, doc.len, &gz_len)))
    rc = wd_dumpfile_write_ext(dir, in->host, in->pid, in->dump_seq, reason, ".json.gz", gz, gz_len,
                               path_out, path_len);
  else
    rc = wd_dumpfile_write(dir, in->host, in->pid, in->dump_seq, reason, doc.p, doc.len, path_out,
                           path_len);
  free(gz);
  wd_sb_free(&doc);
  return rc;
}
