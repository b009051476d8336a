#include "load.h"
#include "ringfile.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
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
  const char *ev = str(node, "evidence");
  op->cuda_evidence = ev && strcmp(ev, "cudaEvents") == 0;
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

/* Captured launches (WD_AZ_GLAUNCH says which are kept). A graph's launches behind the first one
 * its GPU waits for are in the same state for the same reason: 60 of them pushed the stuck one
 * out once, and a directory with a stall dump read "OK". */
static int glaunch_state(const cJSON *l) {
  static const char *const names[] = {"notReplayed", "notReached", "inProgress", "passed"};
  const char *st = str(l, "state");
  for (int k = 0; st && k < 4; k++)
    if (!strcmp(st, names[k])) return k;
  return -1;
}

typedef struct gl_item {
  const cJSON *l;
  int graph, launch, state, order; /* order: its place in the dump's list */
  wd_az_str func;
} gl_item;

static int cmp_gl_item(const void *a, const void *b) {
  const gl_item *x = a, *y = b;
  if (x->graph != y->graph) return x->graph < y->graph ? -1 : 1;
  if (x->launch != y->launch) return x->launch < y->launch ? -1 : 1;
  return x->order - y->order;
}

static void keep_glaunch(wd_az_crank *cr, const gl_item *it, const gl_item *all, int n, int pass) {
  if (cr->nglaunch == WD_AZ_GLAUNCH) {
    cr->glaunch_cut += pass < 2;
    return;
  }
  const cJSON *l = it->l;
  wd_az_glaunch g = {it->graph, it->launch, it->func, lnum(l, "replays", 0), it->state, num(l, "forMs", 0), -1, -1};
  if (it->state == WD_AZ_GL_IN) {
    g.fn_before = g.fn_total = 0;
    for (int k = 0; k < n; k++) {
      if (all[k].graph != it->graph || all[k].func != it->func) continue;
      g.fn_total++;
      g.fn_before += all[k].launch < it->launch;
    }
  }
  cr->glaunch[cr->nglaunch++] = g;
}

static void load_glaunch(wd_az_crank *cr, const cJSON *arr) {
  int n = 0, cap = cJSON_GetArraySize(arr);
  if (cap <= 0) return;
  gl_item *it = malloc((size_t)cap * sizeof *it);
  if (!it) {
    cr->glaunch_cut = cap;
    return;
  }
  const cJSON *l;
  cJSON_ArrayForEach(l, arr) {
    int state = glaunch_state(l);
    if (state < 0 || n == cap) continue;
    it[n] = (gl_item){l, inum(l, "graph", 0), inum(l, "launch", 0), state, n, istr(l, "func")};
    n++;
  }
  qsort(it, (size_t)n, sizeof *it, cmp_gl_item);
  /* 0: inside; 1: the first waited for in each graph; 2: other waiting ones; 3: passed, the
   * newest captures first. */
  for (int i = 0; i < n; i++)
    if (it[i].state == WD_AZ_GL_IN) keep_glaunch(cr, &it[i], it, n, 0);
  for (int i = 0, seen = 0; i < n; i++) {
    if (i > 0 && it[i].graph != it[i - 1].graph) seen = 0;
    if (it[i].state != WD_AZ_GL_WAIT) continue;
    if (!seen++) keep_glaunch(cr, &it[i], it, n, 1);
    else it[i].state = -1; /* pass 2 */
  }
  for (int i = 0; i < n; i++)
    if (it[i].state == -1) {
      it[i].state = WD_AZ_GL_WAIT;
      keep_glaunch(cr, &it[i], it, n, 2);
    }
  for (int i = n - 1; i >= 0; i--)
    if (it[i].state == WD_AZ_GL_PASSED) keep_glaunch(cr, &it[i], it, n, 3);
  free(it);
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
  cr->glaunch_unfollowed = lnum(c, "graphLaunchesUnfollowed", 0);
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

/* A count from the dump's environment (digits only, below 2^24), -1 when absent or not one. */
static int env_count(const cJSON *env, const char *name) {
  const char *v = str(env, name);
  if (!v || !*v || strlen(v) > 8) return -1;
  for (const char *c = v; *c; c++)
    if (*c < '0' || *c > '9') return -1;
  long n = strtol(v, NULL, 10);
  return n < (1L << 24) ? (int)n : -1;
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
  d->replica_group = env_count(get(root, "env"), "REPLICA_GROUP_ID");
  d->group_size = env_count(get(root, "env"), "WORLD_SIZE");
  const cJSON *id = get(root, "identity");
  if (cJSON_IsObject(id)) {
    d->slurm_restart = inum(id, "slurmRestartCount", -1);
    d->te_restart = inum(id, "torchelasticRestartCount", -1);
    d->boot_id = istr(id, "bootId");
    d->job_episode = inum(id, "jobEpisode", -1);
    if (hex(id, "processStartNs", &d->proc_start_ns) != 0) d->proc_start_ns = 0;
    /* A process is named by its start and its PID namespace together (proc_start_ns is only
     * compared, never read as a time): two containers with one host name and boot whose
     * processes got one pid in one clock tick stay two. */
    uint64_t ns = 0;
    if (hex(id, "pidNs", &ns) == 0 && ns) d->pid_ns = ns;
    if (d->proc_start_ns && d->pid_ns) d->proc_start_ns ^= ns * 0x9e3779b97f4a7c15ull;
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
  d->finalized = is_true(get(root, "postmortem"), "finalized");
  const cJSON *st0 = cJSON_GetArrayItem(get(get(root, "trigger"), "stalls"), 0);
  if (cJSON_IsObject(st0)) {
    char what[256], where[96] = "";
    const cJSON *gr = get(st0, "graph");
    if (cJSON_IsObject(gr))
      snprintf(where, sizeof where, " (replay %" PRId64 " of CUDA graph %d, launch %d)", lnum(gr, "replay", 0),
               inum(gr, "graph", 0), inum(gr, "launch", 0));
    else if (lnum(st0, "seq", -1) >= 0)
      snprintf(where, sizeof where, " seq %" PRId64, lnum(st0, "seq", -1));
    const char *f = str(st0, "func"), *cn = str(st0, "commName");
    snprintf(what, sizeof what, "%s%s of rank %d of \"%.64s\", stalled %.1f s", f && *f ? f : "an operation",
             where, inum(st0, "rank", -1), cn ? cn : "", num(st0, "sinceProgressMs", 0) / 1e3);
    d->stall_what = wd_az_intern(what);
  }
  const char *st = str(get(root, "live"), "state");
  d->live_state = st && st[0] && !st[1] ? st[0] : 0;
  d->silent_ms = num(get(root, "live"), "watchdogSilentMs", -1);
  d->answered_episode = inum(get(root, "live"), "answeredEpisode", 0);
  const char *wt = str(get(root, "live"), "watchdogThreadState");
  d->wd_thread_state = wt && wt[0] && !wt[1] ? wt[0] : 0;
  return 0;
}

/* Whether the process holds several ranks of one communicator (JAX, TensorFlow, nccl-tests -g),
 * and its world communicator (wd_az_global_rank): the largest it holds that spans more ranks than
 * it does and holds a rank of each of its GPUs (as many as in any communicator it holds: a
 * data-parallel communicator of one GPU per process is no world); when none spans other
 * processes (nccl-tests -g: the job is this process), the largest it holds. Once per dump,
 * O(k log k) in its communicator ranks. */
typedef struct held_comm {
  uint64_t id;
  int nranks;
} held_comm;
static int cmp_held(const void *a, const void *b) {
  uint64_t x = ((const held_comm *)a)->id, y = ((const held_comm *)b)->id;
  return (x > y) - (x < y);
}
static void several_ranks(const wd_az_set *set, wd_az_dump *d) {
  d->world_comm = 0;
  d->multi_rank = 0;
  if (!d->ncranks) return;
  held_comm *h = malloc(d->ncranks * sizeof *h);
  if (!h) return;
  for (size_t i = 0; i < d->ncranks; i++)
    h[i] = (held_comm){set->cranks[d->crank0 + i].comm_id, set->cranks[d->crank0 + i].nranks};
  qsort(h, d->ncranks, sizeof *h, cmp_held);
  int most = 0, best = 0, spans = 0;
  uint64_t own = 0;
  for (size_t i = 0, j; i < d->ncranks; i = j) {
    for (j = i + 1; j < d->ncranks && h[j].id == h[i].id; j++) {
    }
    if ((int)(j - i) > most) most = (int)(j - i);
  }
  d->multi_rank = most > 1;
  for (size_t i = 0, j; i < d->ncranks; i = j) {
    for (j = i + 1; j < d->ncranks && h[j].id == h[i].id; j++) {
    }
    spans |= h[i].nranks > (int)(j - i);
    if ((int)(j - i) < most) continue;
    if (h[i].nranks > most && h[i].nranks > best) best = h[i].nranks, d->world_comm = h[i].id;
    if (h[i].nranks == most && !own) own = h[i].id;
  }
  if (!spans && d->multi_rank) d->world_comm = own;
  free(h);
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
  several_ranks(set, &tmp);
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

double wd_az_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Past the time for reading: why says so, 1. */
static int out_of_time(char *why, size_t len) {
  if (g_read_until <= 0) return 0;
  if (wd_az_now_s() < g_read_until) return 0;
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

void wd_az_set_episode(int episode) { g_episode = episode; }
int wd_az_episode_wanted(void) { return g_episode; }

int wd_az_reason_is_final(const char *r) {
  return r && (!strcmp(r, "postmortem") || !strcmp(r, "term") || !strcmp(r, "sigabrt") || !strcmp(r, "abort"));
}
