#include "load.h"
#include "ringfile.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "base/host.h"
#include "flightrec/ringfile.h"

#define DUMP_FORMAT "nccl-watchdog-dump"
#define DUMP_VERSION 1

/* ---- field access: absent or mistyped optional fields give the default ---- */

static const cJSON *get(const cJSON *o, const char *key) {
  return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

static double num(const cJSON *o, const char *key, double def) {
  const cJSON *v = get(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static int inum(const cJSON *o, const char *key, int def) {
  double d = num(o, key, def);
  return (d >= -2147483648.0 && d <= 2147483647.0) ? (int)d : def;
}

static int64_t lnum(const cJSON *o, const char *key, int64_t def) {
  double d = num(o, key, (double)def);
  return (d >= -9.2e18 && d <= 9.2e18) ? (int64_t)d : def;
}

static const char *str(const cJSON *o, const char *key) {
  const cJSON *v = get(o, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static wd_az_str istr(const cJSON *o, const char *key) {
  return wd_az_intern(str(o, key));
}

/* 64-bit values are hex strings; a plain number is accepted too. */
static int hex(const cJSON *o, const char *key, uint64_t *out) {
  const cJSON *v = get(o, key);
  if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1.8e19) {
    *out = (uint64_t)v->valuedouble;
    return 0;
  }
  if (!cJSON_IsString(v) || !v->valuestring[0]) return -1;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v->valuestring, &end, 16);
  if (errno || *end) return -1;
  *out = x;
  return 0;
}

static int is_true(const cJSON *o, const char *key) {
  return cJSON_IsTrue(get(o, key));
}

/* ---- threads ---- */

static void frame_text(const cJSON *f, char *out, size_t len) {
  const char *sym = str(f, "symbol"), *mod = str(f, "module"), *moff = str(f, "moduleOffset");
  if (sym && *sym) {
    snprintf(out, len, "%s+0x%llx", sym, (unsigned long long)lnum(f, "symbolOffset", 0));
  } else if (mod && *mod && moff) {
    const char *base = strrchr(mod, '/');
    snprintf(out, len, "%s+%s", base ? base + 1 : mod, moff);
  } else {
    const char *pc = str(f, "pc");
    snprintf(out, len, "%s", pc ? pc : "?");
  }
}

static wd_az_str top_frame(const cJSON *th) {
  const cJSON *frames = get(th, "frames");
  const cJSON *f = cJSON_IsArray(frames) ? cJSON_GetArrayItem(frames, 0) : NULL;
  if (!cJSON_IsObject(f)) return 0;
  char buf[512];
  frame_text(f, buf, sizeof(buf));
  return wd_az_intern(buf);
}

/* Helper threads NCCL, CUDA and the plugin create: never the application's main thread. */
static int helper_thread(const char *name) {
  static const char *const pfx[] = {"NCCL", "nccl", "cuda", "pt_", "wd-", "python3-auto"};
  if (!name) return 0;
  for (size_t i = 0; i < sizeof(pfx) / sizeof(pfx[0]); i++)
    if (strncmp(name, pfx[i], strlen(pfx[i])) == 0) return 1;
  return 0;
}

static const cJSON *main_thread(const cJSON *list, int pid) {
  const cJSON *th, *fallback = NULL;
  cJSON_ArrayForEach(th, list) {
    if (inum(th, "tid", -1) == pid) return th;
    if (!fallback && !helper_thread(str(th, "name")) && cJSON_IsArray(get(th, "frames")))
      fallback = th;
  }
  return fallback;
}

static void load_main_frames(wd_az_dump *d, const cJSON *th) {
  d->main_tid = inum(th, "tid", -1);
  d->main_name = istr(th, "name");
  d->main_status = istr(th, "status");
  d->main_syscall = istr(th, "syscall");
  const char *k = str(th, "kernelState");
  d->main_kstate = k && k[0] >= 'A' && k[0] <= 'z' && !k[1] ? k[0] : 0;
  const cJSON *f, *frames = get(th, "frames");
  if (!cJSON_IsArray(frames)) return;
  cJSON_ArrayForEach(f, frames) {
    if (d->nframes == WD_AZ_FRAMES) break;
    char buf[512];
    frame_text(f, buf, sizeof(buf));
    d->frames[d->nframes++] = wd_az_intern(buf);
  }
}

/* The main thread's Python stack (tid == pid), else the first Python thread with frames. */
static void load_python(wd_az_dump *d, const cJSON *python) {
  const cJSON *th, *pick = NULL, *list = get(python, "threads");
  if (!cJSON_IsArray(list)) return;
  cJSON_ArrayForEach(th, list) {
    if (!cJSON_GetArraySize(get(th, "frames"))) continue;
    if (inum(th, "tid", -1) == d->pid) {
      pick = th;
      break;
    }
    if (!pick) pick = th;
  }
  const cJSON *f;
  if (!pick) return;
  cJSON_ArrayForEach(f, get(pick, "frames")) {
    if (d->npy == WD_AZ_FRAMES) break;
    const char *file = str(f, "file"), *fn = str(f, "function");
    const char *base = file ? strrchr(file, '/') : NULL;
    char buf[512];
    snprintf(buf, sizeof buf, "%s:%d in %s", base ? base + 1 : file ? file : "?", inum(f, "line", 0),
             fn ? fn : "?");
    d->py[d->npy++] = wd_az_intern(buf);
  }
}

static void load_threads(wd_az_dump *d, const cJSON *threads) {
  d->main_tid = -1;
  if (!cJSON_IsObject(threads) || is_true(threads, "disabled")) {
    d->threads_disabled = 1;
    return;
  }
  const cJSON *th, *list = get(threads, "list");
  if (!cJSON_IsArray(list)) return;
  cJSON_ArrayForEach(th, list) {
    d->threads_total++;
    if (d->nthreads == WD_AZ_THREADS) continue;
    wd_az_thread *t = &d->threads[d->nthreads++];
    t->tid = inum(th, "tid", -1);
    t->name = istr(th, "name");
    t->status = istr(th, "status");
    t->top = top_frame(th);
  }
  const cJSON *m = main_thread(list, d->pid);
  if (m) load_main_frames(d, m);
}

/* ---- open trees ---- */

static int wait_rank(const char *type) {
  if (!type) return 0;
  if (strcmp(type, "ProxyStep") == 0) return 3;
  if (strcmp(type, "ProxyOp") == 0) return 2;
  if (strcmp(type, "KernelCh") == 0) return 1;
  return 0;
}

/* Keep the most precise open proxy/kernel node (ProxyStep > ProxyOp > KernelCh), the one that has
 * waited longest among equals: in a stalled op every open node has been quiet for the whole
 * timeout, and a kernel channel waits on the network step, not the other way round. */
static void consider_wait(wd_az_op *op, const cJSON *node, const cJSON *proxyop) {
  const char *type = str(node, "type");
  int rank = wait_rank(type);
  if (!rank || is_true(node, "stopped")) return;
  double since = num(node, "sinceProgressMs", 0);
  wd_az_wait *w = &op->wait;
  if (w->valid) {
    int old_rank = wait_rank(wd_az_s(w->type));
    /* Steps that stalled together (one clock tick): the earliest step is the one the pipeline
     * waits on, whatever order the list gives them in (slot order: slots are reused). */
    int earlier = rank == 3 && since == w->since_ms && inum(node, "step", -1) < w->step;
    if (rank < old_rank || (rank == old_rank && since <= w->since_ms && !earlier)) return;
  }
  const cJSON *src = proxyop ? proxyop : node;
  w->valid = 1;
  w->type = wd_az_intern(type);
  w->state = istr(node, "state");
  w->peer = inum(src, "peer", -1);
  w->channel = inum(src, "channel", -1);
  w->is_send = is_true(src, "isSend");
  w->steps_done = inum(src, "stepsDone", -1);
  w->nsteps = inum(src, "nSteps", -1);
  w->step = rank == 3 ? inum(node, "step", -1) : -1;
  w->since_ms = since;
}

/* ---- connection states (dead links by state) ---- */

static int state_is(const char *st, const char *name) { return st && strcmp(st, name) == 0; }

/* One open ProxyOp's standing from its open steps (children). 0 when it tells nothing. */
static int conn_of(const cJSON *pop, wd_az_conn *out) {
  memset(out, 0, sizeof *out);
  int is_send = is_true(pop, "isSend");
  int lo = -1, hi = -1, gpu = 0, recv_lo = -1;
  const char *recv_state = NULL;
  double since = num(pop, "sinceProgressMs", 0);
  const cJSON *st;
  cJSON_ArrayForEach(st, get(pop, "children")) {
    const char *t = str(st, "type");
    if (!t || strcmp(t, "ProxyStep") || is_true(st, "stopped")) continue;
    const char *state = str(st, "state");
    int step = inum(st, "step", -1);
    double s = num(st, "sinceProgressMs", 0);
    if (s > since) since = s;
    if (is_send) {
      if (state_is(state, "SendPeerWait") || state_is(state, "SendWait")) {
        if (lo < 0 || step < lo) lo = step;
        if (step > hi) hi = step;
      } else if (state_is(state, "SendGPUWait")) {
        gpu = 1;
      }
    } else if (recv_lo < 0 || step < recv_lo) {
      recv_lo = step;
      recv_state = state;
    }
  }
  out->peer = inum(pop, "peer", -1);
  out->channel = (int16_t)inum(pop, "channel", -1);
  out->since_ms = (float)since;
  if (is_send && lo >= 0) {
    out->kind = WD_AZ_CONN_SEND_POSTED;
    out->step_lo = lo, out->step_hi = hi;
  } else if (is_send && gpu) {
    out->kind = WD_AZ_CONN_SEND_GPU;
  } else if (!is_send && recv_lo >= 0) {
    out->kind = state_is(recv_state, "RecvWait") ? WD_AZ_CONN_RECV_EMPTY : WD_AZ_CONN_RECV_GOT;
    out->step_lo = out->step_hi = recv_lo;
  }
  return out->kind;
}

/* Keep the telling ones (posted sends, empty receives) before the others. */
static void keep_conn(wd_az_op *op, const wd_az_conn *c) {
  int telling = c->kind == WD_AZ_CONN_SEND_POSTED || c->kind == WD_AZ_CONN_RECV_EMPTY;
  if (op->nconn < WD_AZ_CONNS) {
    op->conn[op->nconn++] = *c;
    return;
  }
  if (!telling) return;
  for (int i = 0; i < WD_AZ_CONNS; i++)
    if (op->conn[i].kind != WD_AZ_CONN_SEND_POSTED && op->conn[i].kind != WD_AZ_CONN_RECV_EMPTY) {
      op->conn[i] = *c;
      return;
    }
}

/* Another process's PXN sends this one progressed: detached ProxyOps with their origin. */
static void load_pxn(wd_az_dump *d, const cJSON *open, int depth) {
  const cJSON *n;
  if (depth > 4) return;
  cJSON_ArrayForEach(n, open) {
    const char *t = str(n, "type");
    if (t && !strcmp(t, "ProxyOp") && !is_true(n, "stopped") && is_true(n, "isSend") &&
        d->npxn < WD_AZ_PXN) {
      wd_az_pxn *x = &d->pxn[d->npxn];
      x->origin_pid = inum(n, "pid", -1);
      x->origin_rank = inum(n, "originRank", -1);
      if (conn_of(n, &x->conn) == WD_AZ_CONN_SEND_POSTED && x->origin_pid > 0) {
        x->conn.pxn = 1;
        d->npxn++;
      }
    }
    load_pxn(d, get(n, "children"), depth + 1);
  }
}

static void walk_children(wd_az_op *op, const cJSON *node, const cJSON *proxyop, int depth) {
  const cJSON *c, *children = get(node, "children");
  if (!cJSON_IsArray(children) || depth > 8) return;
  cJSON_ArrayForEach(c, children) {
    const char *type = str(c, "type");
    int is_op = type && strcmp(type, "ProxyOp") == 0;
    if (is_op && !is_true(c, "stopped")) {
      op->nproxy_open++;
      wd_az_conn conn;
      if (conn_of(c, &conn)) keep_conn(op, &conn);
    }
    consider_wait(op, c, is_op ? NULL : proxyop);
    walk_children(op, c, is_op ? c : proxyop, depth + 1);
  }
}

static void load_op(wd_az_op *op, const cJSON *node) {
  op->type = istr(node, "type");
  op->func = istr(node, "func");
  op->dtype = istr(node, "datatype");
  op->status = istr(node, "status");
  op->seq = lnum(node, "seq", -1);
  op->replay = lnum(node, "replay", -1);
  op->count = lnum(node, "count", -1);
  op->root = inum(node, "root", -1);
  op->peer = inum(node, "peer", -1);
  op->age_ms = num(node, "ageMs", 0);
  op->since_ms = num(node, "sinceProgressMs", 0);
  const cJSON *k = get(node, "kernelChannels");
  op->kch_expected = inum(k, "expected", 0);
  op->kch_done = inum(k, "done", 0);
  if (hex(node, "userTag", &op->user_tag) != 0) op->user_tag = 0;
  const char *pt = str(node, "proxyThread");
  op->proxy_gone = !pt ? 0 : strcmp(pt, "exited_kernel_waiting") == 0 ? 2 : 1;
  const char *type = str(node, "type");
  if (type && strcmp(type, "ProxyOp") == 0) consider_wait(op, node, NULL);
  walk_children(op, node, type && strcmp(type, "ProxyOp") == 0 ? node : NULL, 0);
}

/* The open list's proxy-level events, flat: a step's ProxyOp is found by its parentSlot. */
static void load_open_wait(wd_az_crank *cr, const cJSON *open) {
  wd_az_op tmp;
  memset(&tmp, 0, sizeof tmp);
  const cJSON *node, *op;
  cJSON_ArrayForEach(node, open) {
    const char *type = str(node, "type");
    if (!type || (strcmp(type, "ProxyStep") && strcmp(type, "ProxyOp") && strcmp(type, "KernelCh")))
      continue;
    const cJSON *proxyop = NULL;
    if (strcmp(type, "ProxyStep") == 0)
      cJSON_ArrayForEach(op, open) {
        const char *t = str(op, "type");
        if (t && strcmp(t, "ProxyOp") == 0 && num(op, "slot", -1) == num(node, "parentSlot", -2)) proxyop = op;
      }
    consider_wait(&tmp, node, proxyop);
  }
  cr->open_wait = tmp.wait;
}

static void load_inflight(wd_az_crank *cr, const cJSON *inflight) {
  const cJSON *node;
  cJSON_ArrayForEach(node, inflight) {
    cr->ops_total++;
    if (cr->nops < WD_AZ_MAX_OPS && cJSON_IsObject(node)) load_op(&cr->ops[cr->nops++], node);
  }
}

/* ---- rings ---- */

static int op_level_kept(const char *type) {
  static const char *const keep[] = {"Coll", "P2p", "CollApi", "P2pApi", "CeColl"};
  if (!type) return 0;
  for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++)
    if (strcmp(type, keep[i]) == 0) return 1;
  return 0;
}

static uint8_t phase(const char *ph) {
  if (ph && strcmp(ph, "state") == 0) return 1;
  if (ph && (strcmp(ph, "stop") == 0 || strcmp(ph, "span") == 0)) return 2;
  return 0;
}

static void keep_last(wd_az_crank *cr, const cJSON *r, const char *type, size_t *pos) {
  wd_az_rec *x = &cr->last[*pos % WD_AZ_LAST_RECS];
  x->t = lnum(r, "t", 0);
  x->ph = phase(str(r, "ph"));
  x->type = wd_az_intern(type);
  x->func = istr(r, "func");
  x->dtype = istr(r, "datatype");
  x->seq = lnum(r, "seq", -1);
  x->count = lnum(r, "count", -1);
  x->peer = inum(r, "root", inum(r, "peer", -1));
  (*pos)++;
}

static void keep_hist(wd_az_crank *cr, const cJSON *r, size_t *pos) {
  wd_az_hist *h = &cr->hist[*pos % WD_AZ_HIST];
  h->func = istr(r, "func");
  h->dtype = istr(r, "datatype");
  h->seq = lnum(r, "seq", -1);
  h->count = lnum(r, "count", -1);
  h->root = inum(r, "root", -1);
  h->t = lnum(r, "t", 0);
  h->replay = lnum(r, "replay", -1);
  (*pos)++;
}

/* Circular buffers filled oldest first are rotated so index 0 is the oldest kept. */
static void rotate(void *arr, size_t elem, size_t cap, size_t written, int *n) {
  *n = written < cap ? (int)written : (int)cap;
  if (written <= cap) return;
  size_t start = written % cap;
  char *tmp = malloc(elem * cap);
  if (!tmp) return;
  memcpy(tmp, (char *)arr + start * elem, (cap - start) * elem);
  memcpy(tmp + (cap - start) * elem, arr, start * elem);
  memcpy(arr, tmp, elem * cap);
  free(tmp);
}

/* When a record's event began: a span's start lies dur before it. */
static int64_t rec_begin(const cJSON *r) { return lnum(r, "t", 0) - lnum(r, "dur", 0); }

static void ring_min_t(const cJSON *ring, int64_t *min_t) {
  const cJSON *r, *recs = get(ring, "records");
  if (!cJSON_IsArray(recs)) return;
  cJSON_ArrayForEach(r, recs) {
    int64_t t = rec_begin(r);
    if (t < *min_t) *min_t = t;
  }
}

/* Open events started before everything in the rings (a long hang) bound the time line too. */
static void tree_min_t(const cJSON *node, int64_t *min_t, int depth) {
  if (!cJSON_IsObject(node) || depth > 16) return;
  int64_t t = -(int64_t)(num(node, "ageMs", 0) * 1e6);
  if (t < *min_t) *min_t = t;
  const cJSON *k;
  cJSON_ArrayForEach(k, get(node, "children")) tree_min_t(k, min_t, depth + 1);
}

static void load_ring(wd_az_crank *cr, const cJSON *ring, int64_t *min_t) {
  const cJSON *r, *recs = get(ring, "records");
  cr->ring_written = (uint64_t)lnum(ring, "written", 0);
  cr->ring_lost = (uint64_t)lnum(ring, "lost", 0);
  if (!cJSON_IsArray(recs)) return;
  size_t nlast = 0, nhist = 0;
  cJSON_ArrayForEach(r, recs) {
    int64_t t = rec_begin(r);
    if (t < *min_t) *min_t = t;
    const char *type = str(r, "type");
    if (!op_level_kept(type)) continue;
    keep_last(cr, r, type, &nlast);
    if (phase(str(r, "ph")) == 0 && strcmp(type, "Coll") == 0 && get(r, "seq"))
      keep_hist(cr, r, &nhist);
  }
  rotate(cr->last, sizeof(cr->last[0]), WD_AZ_LAST_RECS, nlast, &cr->nlast);
  rotate(cr->hist, sizeof(cr->hist[0]), WD_AZ_HIST, nhist, &cr->nhist);
}

/* ---- kernel phases (ABI v7) ---- */

typedef struct wd_az_link {
  int64_t slot, to; /* a KernelCh's slot -> its Coll's slot; a Coll's slot -> its ring index */
} wd_az_link;

static int cmp_link(const void *a, const void *b) {
  int64_t x = ((const wd_az_link *)a)->slot, y = ((const wd_az_link *)b)->slot;
  return (x > y) - (x < y);
}

static const wd_az_link *find_link(const wd_az_link *v, size_t n, int64_t slot) {
  wd_az_link key = {slot, 0};
  return n ? bsearch(&key, v, n, sizeof *v, cmp_link) : NULL;
}

static int phase_ns(const cJSON *r, double *ms) {
  uint64_t a, b;
  if (hex(r, "pTimer", &a) != 0 || hex(r, "pTimerStop", &b) != 0 || b < a) return -1;
  *ms = (double)(b - a) / 1e6;
  return 0;
}

/* Phase records name their KernelCh, whose record names its Coll: joined by slot within this
 * dump's rings (slots are reused last-freed-last, so far apart). Only dumps with KernelPhase
 * records pay for it. */
static void load_phases(wd_az_crank *cr, const cJSON *ring, const cJSON *pring) {
  const cJSON *r, *precs = get(pring, "records"), *recs = get(ring, "records");
  if (!cJSON_IsArray(precs) || !cJSON_IsArray(recs)) return;
  size_t nph = 0, nk = 0, nc = 0;
  cJSON_ArrayForEach(r, precs) {
    const char *t = str(r, "type");
    if (t && !strcmp(t, "KernelPhase")) nph++;
    else if (t && !strcmp(t, "KernelCh")) nk++;
  }
  if (!nph || !nk) return;
  cJSON_ArrayForEach(r, recs) {
    const char *t = str(r, "type");
    if (t && !strcmp(t, "Coll") && phase(str(r, "ph")) == 0) nc++;
  }
  wd_az_link *k = malloc(nk * sizeof *k), *c = malloc((nc ? nc : 1) * sizeof *c);
  const cJSON **coll = malloc((nc ? nc : 1) * sizeof *coll);
  if (!k || !c || !coll) goto out;
  nk = nc = 0;
  cJSON_ArrayForEach(r, precs) {
    const char *t = str(r, "type");
    const cJSON *par = get(r, "parent");
    if (t && !strcmp(t, "KernelCh") && cJSON_IsNumber(par)) k[nk++] = (wd_az_link){lnum(r, "slot", -1), (int64_t)par->valuedouble};
  }
  cJSON_ArrayForEach(r, recs) {
    const char *t = str(r, "type");
    if (t && !strcmp(t, "Coll") && phase(str(r, "ph")) == 0 && get(r, "seq")) {
      coll[nc] = r;
      c[nc] = (wd_az_link){lnum(r, "slot", -1), (int64_t)nc};
      nc++;
    }
  }
  qsort(k, nk, sizeof *k, cmp_link);
  qsort(c, nc, sizeof *c, cmp_link);
  /* Newest phase records first, into at most WD_AZ_PHASES collectives. */
  double sum[WD_AZ_PHASES][2] = {{0}};
  int cnt[WD_AZ_PHASES][2] = {{0}};
  int64_t key[WD_AZ_PHASES];
  int n = 0;
  int total = cJSON_GetArraySize(precs);
  const cJSON *x = cJSON_GetArrayItem(precs, total - 1);
  for (int idx = 0; idx < total && x; idx++, x = x->prev) {
    const char *t = str(x, "type"), *ph = str(x, "phase");
    int which = ph && !strcmp(ph, "initial_sync") ? 0 : ph && !strcmp(ph, "compute") ? 1 : -1;
    const cJSON *par = get(x, "parent");
    double ms;
    if (!t || strcmp(t, "KernelPhase") || which < 0 || !cJSON_IsNumber(par) || phase_ns(x, &ms)) continue;
    const wd_az_link *kl = find_link(k, nk, (int64_t)par->valuedouble);
    const wd_az_link *cl = kl ? find_link(c, nc, kl->to) : NULL;
    if (!cl) continue;
    int i = 0;
    while (i < n && key[i] != cl->to) i++;
    if (i == n) {
      if (n == WD_AZ_PHASES) continue;
      key[n] = cl->to;
      cr->phase[n].func = istr(coll[cl->to], "func");
      cr->phase[n].seq = lnum(coll[cl->to], "seq", -1);
      n++;
    }
    sum[i][which] += ms;
    cnt[i][which]++;
  }
  for (int i = 0; i < n; i++) {
    cr->phase[i].sync_ms = cnt[i][0] ? sum[i][0] / cnt[i][0] : -1;
    cr->phase[i].compute_ms = cnt[i][1] ? sum[i][1] / cnt[i][1] : -1;
  }
  cr->nphase = n;
out:
  free(k);
  free(c);
  free(coll);
}

/* ---- communicators ---- */

static void load_seq(wd_az_crank *cr, const cJSON *seq) {
  const cJSON *e;
  cJSON_ArrayForEach(e, seq) {
    if (cr->nseq == WD_AZ_MAX_FUNCS) break;
    wd_az_str f = istr(e, "func");
    if (!f) continue;
    wd_az_seq *s = &cr->seq[cr->nseq++];
    s->func = f;
    s->enq = lnum(e, "lastEnqueued", -1);
    s->done = lnum(e, "lastCompleted", -1);
  }
}

/* ---- telemetry ---- */

static int cmp_tlink_rate(const void *a, const void *b) {
  double x = ((const wd_az_tlink *)a)->rate, y = ((const wd_az_tlink *)b)->rate;
  return x < y ? -1 : x > y;
}

/* Links that moved data (the slowest kept when there are more than WD_AZ_TLINKS), and the
 * arrival wait. */
static void load_telemetry(wd_az_crank *cr, const cJSON *t) {
  if (!cJSON_IsObject(t)) return;
  const cJSON *l;
  wd_az_tlink all[1024];
  int n = 0;
  cJSON_ArrayForEach(l, get(t, "links")) {
    const char *dir = str(l, "direction");
    double bytes = num(l, "bytes", 0), rate = num(l, "bytesPerS", 0), steps = num(l, "steps", 0);
    int peer = (int)lnum(l, "peer", -1);
    /* A send's network part (isend to done) where the dump has it: in a pipelined ring every
     * link's whole step follows the slowest link, its network part does not. */
    double step_s = num(l, "stepS", 0), net_rate = num(l, "networkBytesPerS", 0);
    if (net_rate > 0) rate = net_rate, step_s = num(l, "networkS", step_s);
    if (n == 1024 || peer < 0 || !dir || bytes <= 0 || rate <= 0 || steps <= 0) continue;
    all[n++] = (wd_az_tlink){peer, (int16_t)lnum(l, "channel", 0), !strcmp(dir, "transmit"), bytes, rate,
                             step_s * 1e3 / steps};
  }
  qsort(all, (size_t)n, sizeof all[0], cmp_tlink_rate);
  cr->ntlinks = n < WD_AZ_TLINKS ? n : WD_AZ_TLINKS;
  memcpy(cr->tlinks, all, (size_t)cr->ntlinks * sizeof all[0]);
  const cJSON *a = get(t, "arrival");
  if (cJSON_IsObject(a) && cJSON_IsNumber(get(a, "waitS"))) {
    cr->t_arrival = 1;
    cr->t_wait_ms = num(a, "waitS", 0) * 1e3;
    cr->t_measure = istr(a, "measure");
  }
}

/* Captured launches: those in a replay or waiting for one first (a hang), then the others,
 * newest captures first, up to WD_AZ_GLAUNCH. */
static void load_glaunch(wd_az_crank *cr, const cJSON *arr) {
  static const char *const names[] = {"notReplayed", "notReached", "inProgress", "passed"};
  for (int pass = 0; pass < 2; pass++) {
    int n = cJSON_GetArraySize(arr);
    for (int i = n - 1; i >= 0 && cr->nglaunch < WD_AZ_GLAUNCH; i--) {
      const cJSON *l = cJSON_GetArrayItem(arr, i);
      const char *st = str(l, "state");
      int state = -1;
      for (int k = 0; st && k < 4; k++)
        if (!strcmp(st, names[k])) state = k;
      if (state < 0 || (pass == 0) != (state == WD_AZ_GL_IN || state == WD_AZ_GL_WAIT)) continue;
      cr->glaunch[cr->nglaunch++] = (wd_az_glaunch){inum(l, "graph", 0), inum(l, "launch", 0),
                                                    istr(l, "func"), lnum(l, "replays", 0), state,
                                                    num(l, "forMs", 0)};
    }
  }
}

static int load_comm(wd_az_set *set, uint32_t dump_idx, const cJSON *c, int64_t *min_t) {
  uint64_t id;
  int rank = inum(c, "rank", -1), nranks = inum(c, "nranks", 0);
  if (hex(c, "commId", &id) != 0 || nranks <= 0 || nranks > (1 << 22) || rank < 0 ||
      rank >= nranks)
    return -1;
  wd_az_crank *cr = wd_az_add_crank(set);
  if (!cr) return -1;
  cr->comm_id = id;
  cr->name = istr(c, "commName");
  cr->rank = rank;
  cr->nranks = nranks;
  cr->cuda_dev = inum(c, "cudaDev", -1);
  cr->gpu_uuid = istr(c, "gpuUuid");
  cr->dump = dump_idx;
  cr->since_ms = num(c, "sinceProgressMs", 0);
  load_seq(cr, get(c, "seq"));
  const cJSON *p2p = get(c, "p2p");
  cr->p2p_enq = lnum(p2p, "enqueued", -1);
  cr->p2p_done = lnum(p2p, "completed", -1);
  load_inflight(cr, get(c, "inflight"));
  load_open_wait(cr, get(c, "open"));
  const cJSON *n;
  cJSON_ArrayForEach(n, get(c, "inflight")) tree_min_t(n, min_t, 0);
  load_ring(cr, get(c, "ring"), min_t);
  ring_min_t(get(c, "proxyRing"), min_t);
  load_phases(cr, get(c, "ring"), get(c, "proxyRing"));
  load_telemetry(cr, get(c, "telemetry"));
  load_glaunch(cr, get(c, "graphLaunches"));
  return 0;
}

/* ---- top level ---- */

static int check_header(const cJSON *root, char *why, size_t why_len) {
  if (!cJSON_IsObject(root)) {
    snprintf(why, why_len, "not a JSON object");
    return -1;
  }
  const char *fmt = str(root, "format");
  if (!fmt || strcmp(fmt, DUMP_FORMAT) != 0) {
    snprintf(why, why_len, "foreign JSON (format is not \"%s\")", DUMP_FORMAT);
    return -1;
  }
  const cJSON *v = get(root, "version");
  if (!cJSON_IsNumber(v) || v->valuedouble < 1) {
    snprintf(why, why_len, "missing or invalid version");
    return -1;
  }
  if (v->valuedouble > DUMP_VERSION) {
    snprintf(why, why_len, "future format version %g (this analyzer reads %d)", v->valuedouble,
             DUMP_VERSION);
    return -1;
  }
  return 0;
}

static int load_identity(wd_az_dump *d, const cJSON *root, char *why, size_t why_len) {
  const cJSON *time = get(root, "time");
  const char *host = str(root, "host");
  d->pid = inum(root, "pid", -1);
  if (!host || d->pid < 0) {
    snprintf(why, why_len, "missing host or pid");
    return -1;
  }
  if (hex(time, "wall_ns", &d->wall_ns) != 0) {
    snprintf(why, why_len, "missing or invalid time.wall_ns");
    return -1;
  }
  if (!cJSON_IsArray(get(root, "comms"))) {
    snprintf(why, why_len, "missing comms array");
    return -1;
  }
  if (hex(time, "mono_ns", &d->mono_ns) != 0) d->mono_ns = 0;
  d->host = wd_az_intern(host);
  d->reason = istr(root, "reason");
  const char *g = str(get(root, "env"), "RANK");
  d->global_rank = g && *g ? atoi(g) : -1;
  const cJSON *id = get(root, "identity");
  if (cJSON_IsObject(id)) {
    d->slurm_restart = inum(id, "slurmRestartCount", -1);
    d->te_restart = inum(id, "torchelasticRestartCount", -1);
    d->boot_id = istr(id, "bootId");
    d->job_episode = inum(id, "jobEpisode", -1);
    if (hex(id, "processStartNs", &d->proc_start_ns) != 0) d->proc_start_ns = 0;
    if (d->global_rank < 0) d->global_rank = inum(id, "globalRank", -1);
    /* A ring file's dump names its process, never its attempt: that of its process's own dumps. */
    const char *r = wd_az_s(d->reason);
    if ((!strcmp(r, "postmortem") || !strcmp(r, "live")) && !get(id, "slurmRestartCount") &&
        !get(id, "torchelasticRestartCount"))
      d->slurm_restart = d->te_restart = -2;
  } else {
    d->slurm_restart = d->te_restart = -2;
    d->job_episode = -1;
  }
  d->dump_seq = inum(root, "dumpSeq", 0);
  d->timeout_ms = num(get(root, "config"), "timeoutMs", 0);
  d->poll_ms = num(get(root, "config"), "pollMs", 0);
  d->fatal_signal = inum(get(get(root, "postmortem"), "fatal"), "signal", 0);
  if (hex(get(root, "postmortem"), "lastActivityWallNs", &d->activity_ns) != 0) d->activity_ns = 0;
  const char *st = str(get(root, "live"), "state");
  d->live_state = st && st[0] && !st[1] ? st[0] : 0;
  d->silent_ms = num(get(root, "live"), "watchdogSilentMs", -1);
  d->answered_episode = inum(get(root, "live"), "answeredEpisode", 0);
  const char *wt = str(get(root, "live"), "watchdogThreadState");
  d->wd_thread_state = wt && wt[0] && !wt[1] ? wt[0] : 0;
  return 0;
}

static int load_root(wd_az_set *set, const char *path, const cJSON *root, char *why,
                     size_t why_len) {
  wd_az_dump tmp;
  memset(&tmp, 0, sizeof(tmp));
  if (check_header(root, why, why_len) != 0 || load_identity(&tmp, root, why, why_len) != 0)
    return -1;
  size_t first_crank = set->ncranks;
  uint32_t idx = (uint32_t)set->ndumps;
  const cJSON *c;
  int64_t min_t = 0;
  int ncomms = 0;
  cJSON_ArrayForEach(c, get(root, "comms")) {
    if (ncomms++ == WD_AZ_MAX_COMMS_PER_DUMP) {
      char note[160];
      snprintf(note, sizeof note, "bound: only the first %d communicators were read",
               WD_AZ_MAX_COMMS_PER_DUMP);
      wd_az_add_skip(set, path, note);
      set->ncut++;
      break;
    }
    load_comm(set, idx, c, &min_t);
  }
  ring_min_t(get(get(root, "detached"), "ring"), &min_t);
  wd_az_dump *d = wd_az_add_dump(set);
  if (!d || !(tmp.path = wd_az_utf8_dup(path))) {
    set->ncranks = first_crank;
    if (d) set->ndumps--;
    snprintf(why, why_len, "out of memory");
    return -1;
  }
  tmp.min_t = min_t;
  tmp.crank0 = first_crank;
  tmp.ncranks = set->ncranks - first_crank;
  load_threads(&tmp, get(root, "threads"));
  load_python(&tmp, get(root, "python"));
  load_pxn(&tmp, get(get(root, "detached"), "open"), 0);
  *d = tmp;
  return 0;
}

/* ---- parse arena: a tree lives only while its file is summarised, so cJSON's many small
 * allocations come from chunks that are dropped together (parsing twice as fast) ---- */

#define ARENA_CHUNK (16u << 20)
#define ARENA_MAX (3ull << 30) /* a tree larger than this fails to parse: file skipped */

typedef struct chunk {
  struct chunk *next;
  size_t used, cap;
  _Alignas(16) char data[];
} chunk;

/* One tree's memory. Each thread parses into its own: a default one reused file after file, or,
 * in a parallel load, one per file that lives until the file is summarised. */
typedef struct wd_arena {
  chunk *head;
  size_t total;
  size_t first; /* size of the first chunk, 0: ARENA_CHUNK */
} wd_arena;

static _Thread_local wd_arena t_default;
static _Thread_local wd_arena *t_cur; /* NULL: t_default */

static wd_arena *arena_cur(void) { return t_cur ? t_cur : &t_default; }

/* Set when a parse ran out of room (the bound, or memory): its file is cut, not invalid.
 * t_budget_full: the room was the whole run's memory budget (others' trees held some of it). */
static _Thread_local int t_arena_full, t_budget_full;

/* The parse trees of every thread together stay within the run's memory budget (--max-memory,
 * wd_az_set_memory; 0 none): trees are the analyzer's memory, several times their file. */
static size_t g_mem_budget;
static _Atomic size_t g_mem_used;

void wd_az_set_memory(size_t bytes) { g_mem_budget = bytes; }

static double g_read_until;
static unsigned g_deadline_s;
void wd_az_set_read_until(double t, unsigned deadline_s) {
  g_read_until = t;
  g_deadline_s = deadline_s;
}

/* Past the time for reading: why says so, 1. */
static int out_of_time(char *why, size_t len) {
  if (g_read_until <= 0) return 0;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  if ((double)ts.tv_sec + (double)ts.tv_nsec / 1e9 < g_read_until) return 0;
  snprintf(why, len, "bound: not read within the run's time (--deadline %u s)", g_deadline_s);
  return 1;
}

static int mem_take(size_t n) {
  size_t u = atomic_load_explicit(&g_mem_used, memory_order_relaxed);
  do {
    if (g_mem_budget && u + n > g_mem_budget) return 0;
  } while (!atomic_compare_exchange_weak_explicit(&g_mem_used, &u, u + n, memory_order_relaxed,
                                                  memory_order_relaxed));
  return 1;
}

static void mem_give(size_t n) { atomic_fetch_sub_explicit(&g_mem_used, n, memory_order_relaxed); }

/* Why a parse gave no tree. */
static void parse_failed(char *why, size_t len) {
  if (t_budget_full)
    snprintf(why, len, "bound: over the analyzer's memory budget (%zu MiB, --max-memory)", g_mem_budget >> 20);
  else if (t_arena_full)
    snprintf(why, len, "bound: no room to parse it (3 GiB, or memory)");
  else
    snprintf(why, len, "truncated or invalid JSON");
}

static void *arena_alloc(size_t n) {
  wd_arena *a = arena_cur();
  n = (n + 15) & ~(size_t)15;
  if (!a->head || a->head->used + n > a->head->cap) {
    size_t want = a->head || !a->first ? ARENA_CHUNK : a->first;
    if (g_mem_budget && want > g_mem_budget / 8) want = g_mem_budget / 8; /* a small budget, fine chunks */
    size_t cap = n > want ? n : want;
    if (a->total + cap > ARENA_MAX) return t_arena_full = 1, NULL;
    if (!mem_take(cap)) return t_arena_full = t_budget_full = 1, NULL;
    chunk *c = malloc(sizeof(chunk) + cap);
    if (!c) {
      mem_give(cap);
      return t_arena_full = 1, NULL;
    }
    c->next = a->head;
    c->used = 0;
    c->cap = cap;
    a->head = c;
    a->total += cap;
  }
  void *p = a->head->data + a->head->used;
  a->head->used += n;
  return p;
}

static void arena_free(void *p) { (void)p; }

/* Keep one chunk for the next file. */
static void arena_reset(void) {
  wd_arena *a = arena_cur();
  while (a->head && a->head->next) {
    chunk *c = a->head;
    a->head = c->next;
    a->total -= c->cap;
    mem_give(c->cap);
    free(c);
  }
  if (a->head) a->head->used = 0;
}

static void arena_drop(wd_arena *a) {
  while (a->head) {
    chunk *c = a->head;
    a->head = c->next;
    mem_give(c->cap);
    free(c);
  }
  a->total = 0;
}

void wd_az_load_release(void) { arena_drop(&t_default); }

int wd_az_load_buffer(wd_az_set *set, const char *path, const char *data, size_t len, char *why,
                      size_t why_len) {
  if (len == 0) {
    snprintf(why, why_len, "empty file");
    return -1;
  }
  /* A dead process's ring file: decoded into a dump, then read like any other. */
  if (wd_az_is_ringfile(data, len)) {
    cJSON *doc = wd_az_ringfile_decode(data, len, path, why, why_len);
    if (!doc) return -1;
    int rc = load_root(set, path, doc, why, why_len);
    cJSON_Delete(doc);
    return rc;
  }
  cJSON_Hooks hooks = {arena_alloc, arena_free};
  cJSON_InitHooks(&hooks);
  t_arena_full = t_budget_full = 0;
  cJSON *root = cJSON_ParseWithLength(data, len);
  int rc = -1;
  if (!root) parse_failed(why, why_len);
  else rc = load_root(set, path, root, why, why_len);
  cJSON_InitHooks(NULL); /* the reports build their JSON with malloc */
  arena_reset();
  return rc;
}

static char *read_all(const char *path, size_t *len, char *why, size_t why_len);

struct cJSON *wd_az_parse_file(const char *path) {
  char why[256];
  size_t len = 0;
  char *buf = read_all(path, &len, why, sizeof(why));
  if (!buf) return NULL;
  cJSON_Hooks hooks = {arena_alloc, arena_free};
  cJSON_InitHooks(&hooks);
  cJSON *root = len ? cJSON_ParseWithLength(buf, len) : NULL;
  cJSON_InitHooks(NULL);
  free(buf);
  if (!root) arena_reset();
  return root;
}

void wd_az_parse_free(void) { arena_reset(); }

static int gz_name(const char *path) {
  size_t n = strlen(path);
  return n > 3 && strcmp(path + n - 3, ".gz") == 0;
}

static unsigned g_trusted_owner = (unsigned)-1;
void wd_az_trust_owner(unsigned owner) { g_trusted_owner = owner; }

int wd_az_open_nolink(int dfd, const char *name, int flags) {
  struct stat st;
  if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
    errno = ELOOP;
    return -1;
  }
  return openat(dfd, name, flags | O_NOFOLLOW);
}

/* The dump directory is shared and untrusted (docs/operations.md, "What the analyzer trusts"):
 * a file is opened without following a link and without blocking (a FIFO named like a dump),
 * and read only when it is a regular file of the analyzing user or of the job's user. Returns
 * the descriptor, or -1 with the reason in why. */
static int open_dump(const char *path, struct stat *st, char *why, size_t why_len) {
  int fd = wd_az_open_nolink(AT_FDCWD, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    snprintf(why, why_len, errno == ELOOP ? "a symbolic link: not followed" : "cannot open: %s",
             strerror(errno));
    return -1;
  }
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    snprintf(why, why_len, "not a regular file");
    close(fd);
    return -1;
  }
  if (st->st_uid != geteuid() && st->st_uid != g_trusted_owner) {
    snprintf(why, why_len, "owned by uid %u, neither the analyzing user nor the job's: not its dump",
             (unsigned)st->st_uid);
    close(fd);
    return -1;
  }
  return fd;
}

/* A compressed dump (NCCL_WATCHDOG_COMPRESS=gzip), through zlib, bounded: at most
 * WD_AZ_MAX_INFLATED once inflated (a gzip bomb is cut, not inflated). */
static char *read_gz(int fd, size_t *len, char *why, size_t why_len) {
  gzFile g = gzdopen(fd, "rb");
  if (!g) {
    close(fd);
    snprintf(why, why_len, "cannot read: %s", strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap + 1);
  while (buf) {
    if (n == cap) {
      if (cap >= WD_AZ_MAX_INFLATED) {
        snprintf(why, why_len, "bound: more than %ld MiB once inflated", WD_AZ_MAX_INFLATED >> 20);
        free(buf);
        buf = NULL;
        break;
      }
      char *nb = realloc(buf, cap * 2 + 1);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    int r = gzread(g, buf + n, (unsigned)(cap - n));
    if (r < 0) {
      int e;
      snprintf(why, why_len, "corrupt gzip data: %s", gzerror(g, &e));
      free(buf);
      buf = NULL;
      break;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  if (!buf && !why[0]) snprintf(why, why_len, "out of memory");
  gzclose(g);
  if (buf) {
    buf[n] = '\0';
    *len = n;
  }
  return buf;
}

/* The file's modification time as the file system stamped it, for the clock offsets of hosts
 * (wd_az_clock_offsets): set by read_all, 0 when unknown. */
static _Thread_local uint64_t t_mtime_ns;

static char *read_all(const char *path, size_t *len, char *why, size_t why_len) {
  why[0] = '\0';
  struct stat st;
  t_mtime_ns = 0;
  int fd = open_dump(path, &st, why, why_len);
  if (fd < 0) return NULL;
  t_mtime_ns = (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
  if (gz_name(path)) return read_gz(fd, len, why, why_len);
  FILE *f = fdopen(fd, "rb");
  if (!f) {
    close(fd);
    snprintf(why, why_len, "cannot read: %s", strerror(errno));
    return NULL;
  }
  char *buf = NULL;
  if (st.st_size > WD_AZ_MAX_FILE) {
    snprintf(why, why_len, "bound: larger than 1 GiB");
    goto out;
  }
  buf = malloc((size_t)st.st_size + 1);
  if (!buf) {
    snprintf(why, why_len, "out of memory");
    goto out;
  }
  *len = fread(buf, 1, (size_t)st.st_size, f);
  if (ferror(f)) {
    snprintf(why, why_len, "read error");
    free(buf);
    buf = NULL;
    goto out;
  }
  buf[*len] = '\0';
out:
  fclose(f);
  return buf;
}

static void skip(wd_az_set *set, const char *path, const char *why, int quiet) {
  if (!quiet) fprintf(stderr, "nccl-watchdog-analyze: skipped %s: %s\n", path, why);
  wd_az_add_skip(set, path, why);
  /* A file of the job's cut by a bound, or by want of memory, may hold the hang: the verdict
   * cannot say OK. */
  if (strncmp(why, "bound:", 6) == 0 || strstr(why, "out of memory")) set->ncut++;
}

int wd_az_load_file(wd_az_set *set, const char *path, int quiet) {
  char why[256];
  size_t len = 0;
  if (out_of_time(why, sizeof why)) {
    skip(set, path, why, quiet);
    return -1;
  }
  char *buf = read_all(path, &len, why, sizeof(why));
  uint64_t mtime = t_mtime_ns;
  int rc = buf ? wd_az_load_buffer(set, path, buf, len, why, sizeof(why)) : -1;
  if (rc == 0 && set->ndumps) set->dumps[set->ndumps - 1].mtime_ns = mtime;
  free(buf);
  if (rc != 0) skip(set, path, why, quiet);
  return rc;
}

static int dump_name(const char *name) {
  size_t n = strlen(name);
  /* verdict-<k>.json: the automatic verdict's own report (docs/operations.md, 4b) */
  return name[0] != '.' && strncmp(name, "trigger-", 8) != 0 && strncmp(name, "verdict-", 8) != 0 &&
         ((n > 5 && strcmp(name + n - 5, ".json") == 0) || (n > 8 && strcmp(name + n - 8, ".json.gz") == 0) ||
          (n > 5 && strcmp(name + n - 5, ".ring") == 0));
}

static int g_episode = -1; /* --episode: the job's stall episode to judge, -1 every dump's newest */

/* Whether name is the plugin's name for a snapshot, <host>-<pid>-<n>-signal.json[.gz]. */
static int snapshot_name(const char *name) {
  size_t n = strlen(name);
  return (n > 12 && strcmp(name + n - 12, "-signal.json") == 0) ||
         (n > 15 && strcmp(name + n - 15, "-signal.json.gz") == 0);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names of dumps in dir, and "<sub>/<name>" for those in its host subdirectories (the plugin
 * writes <dump dir>/<host>/...; triggers/ and hidden entries are not dumps). */
static int list_dir_in(const char *dir, const char *prefix, int depth, char ***names, size_t *n,
                       size_t *cap) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char rel[1024];
    snprintf(rel, sizeof rel, "%s%s%s", prefix, *prefix ? "/" : "", e->d_name);
    if (!dump_name(e->d_name)) {
      char sub[4096];
      struct stat st;
      snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
      /* A host folder is entered only when it is a directory itself, not a link to one made
       * by someone else (it could lead anywhere). */
      if (depth > 0 && strcmp(e->d_name, "triggers") != 0 &&
          fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))
        list_dir_in(sub, rel, depth - 1, names, n, cap);
      continue;
    }
    if (*n == *cap) {
      *cap = *cap ? *cap * 2 : 256;
      char **p = realloc(*names, *cap * sizeof(*p));
      if (!p) break;
      *names = p;
    }
    if (((*names)[*n] = strdup(rel)) != NULL) (*n)++;
  }
  closedir(d);
  return 0;
}

static int list_dir(const char *dir, char ***names, size_t *n) {
  size_t cap = 0;
  if (list_dir_in(dir, "", 1, names, n, &cap) != 0) return -1;
  if (*n) qsort(*names, *n, sizeof(**names), cmp_str);
  return 0;
}

/* ---- parallel load: worker threads read, decompress and parse files in name order, each into
 * an arena of its own; this thread summarises them in the same order (interning is not shared),
 * at most WD_AZ_AHEAD files behind the workers, so memory stays bounded. ---- */

static int g_jobs = 1;
void wd_az_set_jobs(int jobs) { g_jobs = jobs < 1 ? 1 : jobs > 64 ? 64 : jobs; }

#define WD_AZ_AHEAD 8 /* parsed trees waiting, per worker */

typedef struct pl_file {
  char *path;
  cJSON *root;
  wd_arena arena;
  int done;
  int budget; /* cut by the memory budget while other trees held it: parsed again alone */
  uint64_t mtime_ns;
  char why[256];
} pl_file;

typedef struct pl_state {
  pl_file *files;
  size_t n, next, consumed, ahead;
  pthread_mutex_t lock;
  pthread_cond_t cond;
} pl_state;

static void pl_parse(pl_file *f) {
  size_t len = 0;
  if (out_of_time(f->why, sizeof f->why)) return;
  char *buf = read_all(f->path, &len, f->why, sizeof f->why);
  f->mtime_ns = t_mtime_ns;
  if (!buf) return;
  f->arena.first = len * 4 + 65536 < ARENA_CHUNK ? len * 4 + 65536 : ARENA_CHUNK;
  t_cur = &f->arena;
  t_arena_full = t_budget_full = 0;
  if (len == 0) snprintf(f->why, sizeof f->why, "empty file");
  else if (wd_az_is_ringfile(buf, len)) f->root = wd_az_ringfile_decode(buf, len, f->path, f->why, sizeof f->why);
  else if (!(f->root = cJSON_ParseWithLength(buf, len)))
    parse_failed(f->why, sizeof f->why);
  f->budget = !f->root && t_budget_full;
  t_cur = NULL;
  free(buf);
}

static void *pl_worker(void *arg) {
  pl_state *st = arg;
  pthread_mutex_lock(&st->lock);
  for (;;) {
    while (st->next < st->n && st->next >= st->consumed + st->ahead) pthread_cond_wait(&st->cond, &st->lock);
    if (st->next >= st->n) break;
    pl_file *f = &st->files[st->next++];
    pthread_mutex_unlock(&st->lock);
    pl_parse(f);
    pthread_mutex_lock(&st->lock);
    f->done = 1;
    pthread_cond_broadcast(&st->cond);
  }
  pthread_mutex_unlock(&st->lock);
  return NULL;
}

/* 0 when the files were loaded, -1 when threads could not be started (nothing loaded). */
static int load_parallel(wd_az_set *set, char **paths, size_t n, int jobs, int quiet) {
  pl_state st = {.n = n, .ahead = (size_t)jobs * WD_AZ_AHEAD};
  st.files = calloc(n, sizeof(*st.files));
  if (!st.files) return -1;
  for (size_t i = 0; i < n; i++) st.files[i].path = paths[i];
  pthread_mutex_init(&st.lock, NULL);
  pthread_cond_init(&st.cond, NULL);
  /* Every tree of this load comes from an arena: the hooks are set once, for all threads. */
  cJSON_Hooks hooks = {arena_alloc, arena_free};
  cJSON_InitHooks(&hooks);
  pthread_t th[64];
  int started = 0;
  for (; started < jobs; started++)
    if (pthread_create(&th[started], NULL, pl_worker, &st) != 0) break;
  int rc = 0;
  size_t nretry = 0;
  if (started == 0) {
    rc = -1;
  } else {
    for (size_t i = 0; i < n; i++) {
      pl_file *f = &st.files[i];
      pthread_mutex_lock(&st.lock);
      while (!f->done) pthread_cond_wait(&st.cond, &st.lock);
      pthread_mutex_unlock(&st.lock);
      if (f->budget) nretry++; /* parsed again after the others, alone */
      else if (!f->root || load_root(set, f->path, f->root, f->why, sizeof f->why) != 0) skip(set, f->path, f->why, quiet);
      else set->dumps[set->ndumps - 1].mtime_ns = f->mtime_ns;
      arena_drop(&f->arena);
      pthread_mutex_lock(&st.lock);
      st.consumed = i + 1;
      pthread_cond_broadcast(&st.cond);
      pthread_mutex_unlock(&st.lock);
    }
  }
  for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
  /* Files the budget cut while other trees held part of it: alone now, the verdict's order of
   * files aside (the selection sorts them). Cut again, they are cut for good. */
  for (size_t i = 0; nretry && i < n; i++) {
    pl_file *f = &st.files[i];
    if (!f->budget) continue;
    f->why[0] = '\0';
    pl_parse(f);
    if (!f->root || load_root(set, f->path, f->root, f->why, sizeof f->why) != 0) skip(set, f->path, f->why, quiet);
    else set->dumps[set->ndumps - 1].mtime_ns = f->mtime_ns;
    arena_drop(&f->arena);
  }
  cJSON_InitHooks(NULL); /* the reports build their JSON with malloc */
  pthread_cond_destroy(&st.cond);
  pthread_mutex_destroy(&st.lock);
  free(st.files);
  return rc;
}

static int load_dir(wd_az_set *set, const char *dir, int quiet) {
  char **names = NULL;
  size_t n = 0;
  if (list_dir(dir, &names, &n) != 0) return -1;
  char **paths = calloc(n ? n : 1, sizeof(*paths));
  size_t np = 0;
  for (size_t i = 0; paths && i < n; i++) {
    /* --episode=K never judges a snapshot (select_episode), and a directory may hold hundreds
     * (routine SIGUSR1s), which cost the automatic verdict most of its time to read: they are
     * counted, not read. A file named so by anyone else could only have been set aside. */
    if (g_episode >= 0 && snapshot_name(names[i])) {
      set->snapshots_unread++;
      continue;
    }
    if (asprintf(&paths[np], "%s/%s", dir, names[i]) >= 0) np++;
  }
  int jobs = g_jobs < (int)np ? g_jobs : (int)np;
  if (!paths || jobs < 2 || load_parallel(set, paths, np, jobs, quiet) != 0)
    for (size_t i = 0; paths && i < np; i++) wd_az_load_file(set, paths[i], quiet);
  for (size_t i = 0; i < n; i++) free(names[i]);
  for (size_t i = 0; paths && i < np; i++) free(paths[i]);
  free(names);
  free(paths);
  return 0;
}

int wd_az_load_path(wd_az_set *set, const char *path, int quiet) {
  struct stat st;
  if (stat(path, &st) != 0) {
    char why[128];
    snprintf(why, sizeof(why), "cannot open: %s", strerror(errno));
    skip(set, path, why, quiet);
    return -1;
  }
  if (S_ISDIR(st.st_mode)) return load_dir(set, path, quiet);
  wd_az_load_file(set, path, quiet);
  return 0;
}

/* ---- selection ---- */

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
void wd_az_set_episode(int episode) { g_episode = episode; }

int wd_az_reason_is_final(const char *r) {
  return r && (!strcmp(r, "postmortem") || !strcmp(r, "term") || !strcmp(r, "sigabrt") || !strcmp(r, "abort"));
}

/* A verdict is about one stall episode: by default the latest of the judged attempt, whose
 * stall and peer dumps are judged with the snapshots and teardown dumps (each process's newest);
 * stall and peer dumps of earlier episodes (ones that resumed, or a process that did not answer
 * the latest) are set aside. --episode=K (the automatic verdict's): episode K's stall and peer
 * dumps and what processes left as they ended (postmortem, teardown: an episode posted on
 * SIGABRT is answered by those), never a snapshot or an earlier episode's dump, which would show
 * a moment before the hang; none of these, no verdict. */
static void select_episode(wd_az_set *set) {
  int want = g_episode;
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
  size_t aside = g_episode >= 0 ? set->snapshots_unread : 0;
  for (size_t i = 0; i < set->ndumps; i++) {
    wd_az_dump *d = &set->dumps[i];
    int other = g_episode >= 0 ? d->job_episode != want && !(d->job_episode < 0 && wd_az_reason_is_final(wd_az_s(d->reason)))
                               : d->job_episode >= 0 && d->job_episode != want;
    if (!d->aside && other) d->aside = 1, aside++;
  }
  for (size_t i = 0; i < set->ncranks; i++)
    if (set->dumps[set->cranks[i].dump].aside) set->cranks[i].aside = 1;
  size_t n = strlen(set->attempt_note);
  snprintf(set->attempt_note + n, sizeof set->attempt_note - n, "%sepisode %d; set aside %zu dump%s of %s",
           n ? "; " : "", want, aside, aside == 1 ? "" : "s",
           g_episode >= 0 ? "other episodes and snapshots" : "earlier episodes");
}

static int64_t attempt_of(const wd_az_dump *d) {
  /* Slurm's requeue restarts everything, torchrun's agent restarts within a Slurm attempt. */
  return d->slurm_restart < -1 ? -1 : (int64_t)(d->slurm_restart + 1) * 1000000 + (d->te_restart + 1);
}

/* A verdict is about one attempt of the job (restarted attempts share the dump directory):
 * the latest, or --attempt's; dumps of the others are set aside and said so. A ring file takes
 * the attempt its process's own dumps state (adopt_identity). One that still states none (its
 * process wrote no dump; an older format) goes with the judged attempt unless its host's clock
 * shows it older than that attempt there: written before the attempt's first process on the
 * same host started (one host, one clock). */
static void select_attempt(wd_az_set *set) {
  int64_t keys[64];
  int nk = 0;
  for (size_t i = 0; i < set->ndumps; i++) {
    int64_t k = attempt_of(&set->dumps[i]);
    int seen = k < 0;
    for (int j = 0; j < nk && !seen; j++) seen = keys[j] == k;
    if (!seen && nk < 64) keys[nk++] = k;
  }
  set->attempt_note[0] = '\0';
  if (nk == 0) return;
  for (int i = 1; i < nk; i++) /* ascending */
    for (int j = i; j > 0 && keys[j - 1] > keys[j]; j--) {
      int64_t t = keys[j];
      keys[j] = keys[j - 1], keys[j - 1] = t;
    }
  int pick = g_attempt >= 0 && g_attempt < nk ? g_attempt : nk - 1;
  int64_t want = keys[pick];
  size_t aside = 0, unstated = 0;
  for (size_t i = 0; i < set->ndumps; i++) {
    wd_az_dump *d = &set->dumps[i];
    int64_t k = attempt_of(d);
    if (k >= 0) {
      if (k != want) d->aside = 1, aside++;
      continue;
    }
    uint64_t began = 0;
    for (size_t j = 0; j < set->ndumps; j++) {
      const wd_az_dump *e = &set->dumps[j];
      if (e->host == d->host && attempt_of(e) == want && e->proc_start_ns && (!began || e->proc_start_ns < began))
        began = e->proc_start_ns;
    }
    if (began && d->wall_ns < began) d->aside = 1, aside++, unstated++;
  }
  for (size_t i = 0; i < set->ncranks; i++)
    if (set->dumps[set->cranks[i].dump].aside) set->cranks[i].aside = 1;
  if (!aside) return;
  int sr = (int)(want / 1000000) - 1, tr = (int)(want % 1000000) - 1;
  char what[96] = "";
  if (sr >= 0) snprintf(what, sizeof what, "SLURM_RESTART_COUNT=%d", sr);
  if (tr >= 0)
    snprintf(what + strlen(what), sizeof what - strlen(what), "%sTORCHELASTIC_RESTART_COUNT=%d", sr >= 0 ? ", " : "", tr);
  snprintf(set->attempt_note, sizeof set->attempt_note,
           "attempt %d of %d (%s); set aside %zu dump%s of %s%s", pick, nk, what[0] ? what : "no restart count",
           aside, aside == 1 ? "" : "s", pick == nk - 1 ? "earlier attempts" : "other attempts",
           unstated ? ", ring files included (written before this attempt began on their host)" : "");
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

static int cmp_host_pid(const void *a, const void *b) {
  const wd_az_dump *x = &g_sort_set->dumps[*(const size_t *)a], *y = &g_sort_set->dumps[*(const size_t *)b];
  if (x->host != y->host) return x->host < y->host ? -1 : 1;
  return (x->pid > y->pid) - (x->pid < y->pid);
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

void wd_az_select(wd_az_set *set, int all_dumps) {
  adopt_identity(set);
  size_t *idx = malloc((set->ncranks ? set->ncranks : 1) * sizeof(*idx));
  for (size_t i = 0; i < set->ndumps; i++) set->dumps[i].kept = all_dumps;
  if (!idx) return;
  set->episode = -1;
  set->resumed_note[0] = '\0';
  size_t stopped = 0, live = all_dumps ? 0 : find_live_rings(set, &stopped);
  if (!all_dumps) select_attempt(set), select_episode(set);
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
}
