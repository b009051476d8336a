/* Fail-slow aggregates from the rings (aggregate.h). Watchdog thread only. */
#include "telemetry/aggregate.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "flightrec/strtab.h"

const double wd_tm_bounds[WD_TM_NBOUNDS] = {1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2,
                                            5e-2, 0.1,  0.5,  1.0,  5.0,  10.0};
const char *const wd_tm_class_names[WD_TM_NCLASSES] = {"lt64KiB", "64KiB-1MiB", "1MiB-16MiB",
                                                       "16MiB-256MiB", "ge256MiB"};

#define WD_TM_SLOTS 256     /* open operations and ProxyOps followed per context (by slot) */
#define WD_TM_FUNCS 96      /* function x size class rows of the process */
#define WD_TM_CONTEXTS 256  /* contexts followed; more are counted, not aggregated */
#define WD_TM_CHUNK 1024    /* records read per copy */
#define WD_TM_BASELINE 0.1  /* weight of the newest interval in the arrival baseline */

/* A collective from its start record until NCCL's counters say it completed: its completion is
 * its last child's stop (ProxyOp, KernelCh), since NCCL's own Coll stop comes at enqueue. */
typedef struct tm_op {
  uint32_t slot;
  uint8_t func, cls;
  int64_t seq;
  uint64_t start_ns, last_ns, gpu_lo, gpu_hi;
} tm_op;

/* A ProxyOp's steps, summed until its own span arrives. */
typedef struct tm_pop {
  uint32_t slot;
  uint32_t steps;
  uint64_t bytes, step_ns, net_ns, first_ns, last_ns;
} tm_pop;

typedef struct tm_ctx {
  const wd_context *ctx;
  uint64_t init_ns;
  int comm; /* index into comms */
  uint64_t op_cursor, proxy_cursor;
  int seen;
  tm_op ops[WD_TM_SLOTS];
  tm_pop pops[WD_TM_SLOTS];
} tm_ctx;

static struct {
  int on;
  uint32_t max_links;
  wd_tm_func funcs[WD_TM_FUNCS];
  uint32_t nfuncs;
  wd_tm_comm comms[WD_TM_CONTEXTS];
  tm_ctx *ctxs[WD_TM_CONTEXTS];
  uint32_t nctxs;
  wd_tm_link *links;
  uint32_t nlinks;
  int32_t *index; /* open addressing over links, 2 x max_links (a power of two), -1 empty */
  uint32_t index_mask;
  wd_record *buf;
  uint64_t missed, folded;
  int warned_links, warned_ctxs;
} tm;

unsigned wd_tm_dtype_size(const char *n) {
  if (!n || !*n) return 0;
  if (strstr(n, "64")) return 8;
  if (strstr(n, "32")) return 4;
  if (strstr(n, "16")) return 2;
  if (strstr(n, "8")) return 1; /* Int8, Uint8, Float8e4m3, Float8e5m2 */
  return 0;
}

int wd_tm_size_class(uint64_t bytes) {
  int c = 0;
  for (uint64_t lim = (uint64_t)64 * 1024; c < WD_TM_NCLASSES - 1 && bytes >= lim; lim *= 16) c++;
  return c;
}

void wd_tm_observe(wd_tm_hist *h, double s) {
  int b = 0;
  while (b < WD_TM_NBOUNDS && s > wd_tm_bounds[b]) b++;
  h->buckets[b]++;
  h->count++;
  h->sum += s;
}

int wd_tm_open(uint32_t max_links) {
  memset(&tm, 0, sizeof tm);
  if (max_links < 16) max_links = 16;
  uint32_t isize = 16;
  while (isize < 2 * max_links) isize <<= 1;
  tm.links = calloc(max_links, sizeof *tm.links);
  tm.index = malloc(isize * sizeof *tm.index);
  tm.buf = malloc(WD_TM_CHUNK * sizeof *tm.buf);
  if (!tm.links || !tm.index || !tm.buf) {
    wd_tm_close();
    return -1;
  }
  memset(tm.index, 0xff, isize * sizeof *tm.index);
  tm.index_mask = isize - 1;
  tm.max_links = max_links;
  tm.on = 1;
  return 0;
}

void wd_tm_close(void) {
  for (uint32_t i = 0; i < tm.nctxs; i++) free(tm.ctxs[i]);
  free(tm.links);
  free(tm.index);
  free(tm.buf);
  memset(&tm, 0, sizeof tm);
}

static uint32_t link_hash(int comm, int peer, unsigned channel, unsigned send) {
  uint64_t k = ((uint64_t)(uint32_t)comm << 40) ^ ((uint64_t)(uint32_t)peer << 9) ^ (channel << 1) ^ send;
  k *= 0x9e3779b97f4a7c15ull;
  return (uint32_t)(k >> 32);
}

static void index_rebuild(void) {
  memset(tm.index, 0xff, (tm.index_mask + 1) * sizeof *tm.index);
  for (uint32_t i = 0; i < tm.nlinks; i++) {
    const wd_tm_link *l = &tm.links[i];
    uint32_t h = link_hash(l->comm, l->peer, l->channel, l->send) & tm.index_mask;
    while (tm.index[h] >= 0) h = (h + 1) & tm.index_mask;
    tm.index[h] = (int32_t)i;
  }
}

/* The link row, made when new; beyond the bound, the communicator's folded row (peer -1). */
static wd_tm_link *link_get(int comm, int peer, unsigned channel, unsigned send) {
  for (int pass = 0; pass < 2; pass++) {
    uint32_t h = link_hash(comm, peer, channel, send) & tm.index_mask;
    for (; tm.index[h] >= 0; h = (h + 1) & tm.index_mask) {
      wd_tm_link *l = &tm.links[tm.index[h]];
      if (l->comm == comm && l->peer == peer && l->channel == channel && l->send == send) return l;
    }
    /* One row is kept back per fold key: a fold row can always be made. */
    if (tm.nlinks < tm.max_links && (peer < 0 || tm.nlinks + 1 < tm.max_links)) {
      wd_tm_link *l = &tm.links[tm.nlinks];
      memset(l, 0, sizeof *l);
      l->comm = comm;
      l->peer = peer;
      l->channel = (uint8_t)channel;
      l->send = (uint8_t)send;
      tm.index[h] = (int32_t)tm.nlinks++;
      return l;
    }
    if (peer < 0) return NULL;
    if (!tm.warned_links++)
      WD_WARN("telemetry: more than %u links (peer x channel x direction) in this process: the rest "
              "are folded into peer=\"other\" per communicator (NCCL_WATCHDOG_TELEMETRY_LINKS)",
              tm.max_links);
    tm.folded++;
    peer = -1, channel = 0, send = 0;
  }
  return NULL;
}

static wd_tm_func *func_get(uint8_t func, uint8_t cls) {
  for (uint32_t i = 0; i < tm.nfuncs; i++)
    if (tm.funcs[i].func == func && tm.funcs[i].size_class == cls) return &tm.funcs[i];
  if (tm.nfuncs == WD_TM_FUNCS) return NULL;
  wd_tm_func *f = &tm.funcs[tm.nfuncs++];
  memset(f, 0, sizeof *f);
  f->func = func;
  f->size_class = cls;
  return f;
}

static tm_ctx *ctx_get(const wd_context *ctx) {
  for (uint32_t i = 0; i < tm.nctxs; i++) {
    tm_ctx *c = tm.ctxs[i];
    if (c->ctx == ctx && c->init_ns == ctx->init_ns && tm.comms[c->comm].comm_id == ctx->comm_id) return c;
  }
  if (tm.nctxs == WD_TM_CONTEXTS) {
    if (!tm.warned_ctxs++) WD_WARN("telemetry: more than %d communicators: the rest are not aggregated", WD_TM_CONTEXTS);
    return NULL;
  }
  tm_ctx *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  for (uint32_t s = 0; s < WD_TM_SLOTS; s++) c->ops[s].slot = c->pops[s].slot = WD_SLOT_NONE;
  c->ctx = ctx;
  c->init_ns = ctx->init_ns;
  c->comm = (int)tm.nctxs;
  wd_tm_comm *m = &tm.comms[tm.nctxs];
  memset(m, 0, sizeof *m);
  m->comm_id = ctx->comm_id;
  memcpy(m->name, ctx->name, sizeof m->name);
  m->name[sizeof m->name - 1] = '\0';
  m->rank = ctx->rank;
  m->nranks = ctx->nranks;
  tm.ctxs[tm.nctxs++] = c;
  return c;
}

static void op_record(tm_ctx *c, const wd_record *r) {
  if (r->type != WD_T_COLL || r->phase != WD_PH_START) return;
  unsigned es = wd_tm_dtype_size(wd_str(r->dtype));
  c->ops[r->slot % WD_TM_SLOTS] = (tm_op){.slot = r->slot, .func = r->func, .seq = (int64_t)r->a,
                                          .cls = (uint8_t)wd_tm_size_class(r->count * (es ? es : 1)),
                                          .start_ns = r->ts_ns};
}

/* A child's stop of operation slot `parent`, not of a later one on the same slot. */
static tm_op *op_of(tm_ctx *c, uint32_t parent, uint64_t child_start) {
  tm_op *o = &c->ops[parent % WD_TM_SLOTS];
  return o->slot == parent && o->start_ns <= child_start ? o : NULL;
}

/* A collective NCCL counts as completed (its counter read before its records were). */
static void op_done(tm_ctx *c, tm_op *o) {
  o->slot = WD_SLOT_NONE;
  if (!o->last_ns || o->last_ns < o->start_ns) return; /* no child: no completion time */
  double s = (double)(o->last_ns - o->start_ns) / 1e9;
  wd_tm_func *f = func_get(o->func, o->cls);
  if (f) {
    wd_tm_observe(&f->host, s);
    if (o->gpu_hi > o->gpu_lo) wd_tm_observe(&f->gpu, (double)(o->gpu_hi - o->gpu_lo) / 1e9);
  }
  wd_tm_comm *m = &tm.comms[c->comm];
  m->colls++;
  m->coll_s += s;
}

static void proxy_record(tm_ctx *c, const wd_record *r) {
  if (r->flags & WD_F_DETACHED) return; /* PXN: another process's link */
  if (r->type == WD_T_PROXYSTEP && r->phase == WD_PH_SPAN && r->parent != WD_SLOT_NONE) {
    tm_pop *p = &c->pops[r->parent % WD_TM_SLOTS];
    if (p->slot != r->parent) *p = (tm_pop){.slot = r->parent, .first_ns = r->raw};
    p->steps++;
    p->bytes += r->count;
    if (r->ts_ns > r->raw) p->step_ns += r->ts_ns - r->raw;
    /* From the isend to the network's completion (a send step's SendWait to its stop). */
    if (r->a >= r->raw && r->a <= r->ts_ns && r->a) p->net_ns += r->ts_ns - r->a;
    if (r->raw < p->first_ns) p->first_ns = r->raw;
    if (r->ts_ns > p->last_ns) p->last_ns = r->ts_ns;
  } else if (r->type == WD_T_PROXYOP && (r->phase == WD_PH_SPAN || r->phase == WD_PH_STOP)) {
    tm_op *o = r->phase == WD_PH_SPAN ? op_of(c, r->parent, r->raw) : NULL;
    if (o && r->ts_ns > o->last_ns) o->last_ns = r->ts_ns;
    tm_pop *p = &c->pops[r->slot % WD_TM_SLOTS];
    if (p->slot != r->slot) return; /* no step seen */
    p->slot = WD_SLOT_NONE;
    /* Steps older than the op are an earlier op's on the same slot, whose own span was lost. */
    if ((r->phase == WD_PH_SPAN && p->first_ns < r->raw) || !p->steps) return;
    wd_tm_link *l = link_get(c->comm, r->peer, r->channel, (r->flags & WD_F_SEND) != 0);
    if (!l) return;
    l->bytes += p->bytes;
    l->steps += p->steps;
    l->step_s += (double)p->step_ns / 1e9;
    l->net_s += (double)p->net_ns / 1e9;
    l->busy_s += (double)(p->last_ns - p->first_ns) / 1e9;
  } else if (r->type == WD_T_KERNELCH && r->phase == WD_PH_SPAN && r->count > r->a && r->a) {
    tm_op *o = op_of(c, r->parent, r->raw);
    if (!o) return;
    if (r->ts_ns > o->last_ns) o->last_ns = r->ts_ns;
    if (!o->gpu_hi || r->a < o->gpu_lo) o->gpu_lo = r->a;
    if (r->count > o->gpu_hi) o->gpu_hi = r->count;
  } else if (r->type == WD_T_KERNELPHASE && r->phase == WD_PH_SPAN && r->n == 0 && r->count > r->a && r->a) {
    wd_tm_comm *m = &tm.comms[c->comm];
    m->syncs++;
    m->sync_s += (double)(r->count - r->a) / 1e9;
  }
}

/* Reads a ring from the cursor, chunk by chunk, to where it was when the poll began. */
static void drain(tm_ctx *c, const wd_ring *ring, uint64_t *cursor, int proxy) {
  uint64_t end = atomic_load_explicit(&ring->head, memory_order_acquire);
  while (*cursor < end) {
    uint64_t before = *cursor, missed = 0;
    uint32_t n = wd_ring_read_since(ring, cursor, tm.buf, WD_TM_CHUNK, &missed);
    tm.missed += missed;
    for (uint32_t i = 0; i < n; i++) proxy ? proxy_record(c, &tm.buf[i]) : op_record(c, &tm.buf[i]);
    if (*cursor == before) break; /* a writer inside the next record: next poll */
  }
}

void wd_tm_note(wd_context *ctx) {
  if (!tm.on || ctx->magic != WD_CTX_MAGIC) return;
  /* A communicator without traffic costs nothing (22 KiB once it has some). */
  if (!atomic_load_explicit(&ctx->ring.head, memory_order_relaxed) &&
      !atomic_load_explicit(&ctx->proxy_ring.head, memory_order_relaxed))
    return;
  tm_ctx *c = ctx_get(ctx);
  if (!c) return;
  c->seen = 1;
  /* Completion counters first: a collective counted here has all its records in the rings. */
  int64_t done[WD_NSTR];
  for (int f = 0; f < WD_NSTR; f++) done[f] = atomic_load_explicit(&ctx->seq_done[f], memory_order_acquire);
  drain(c, &ctx->ring, &c->op_cursor, 0);
  drain(c, &ctx->proxy_ring, &c->proxy_cursor, 1);
  for (uint32_t s = 0; s < WD_TM_SLOTS; s++) {
    tm_op *o = &c->ops[s];
    if (o->slot != WD_SLOT_NONE && o->seq <= done[o->func]) op_done(c, o);
  }
}

static void forget(uint32_t i) {
  int comm = tm.ctxs[i]->comm;
  free(tm.ctxs[i]);
  /* Its links go; later communicators move down one place. */
  uint32_t k = 0;
  for (uint32_t j = 0; j < tm.nlinks; j++) {
    if (tm.links[j].comm == comm) continue;
    tm.links[k] = tm.links[j];
    if (tm.links[k].comm > comm) tm.links[k].comm--;
    k++;
  }
  tm.nlinks = k;
  memmove(&tm.comms[comm], &tm.comms[comm + 1], (tm.nctxs - 1 - (uint32_t)comm) * sizeof tm.comms[0]);
  memmove(&tm.ctxs[i], &tm.ctxs[i + 1], (tm.nctxs - 1 - i) * sizeof(tm_ctx *));
  tm.nctxs--;
  for (uint32_t j = 0; j < tm.nctxs; j++)
    if (tm.ctxs[j]->comm > comm) tm.ctxs[j]->comm--;
  index_rebuild();
}

void wd_tm_end_poll(void) {
  if (!tm.on) return;
  for (uint32_t i = tm.nctxs; i-- > 0;) {
    tm_ctx *c = tm.ctxs[i];
    if (!c->seen) {
      forget(i);
      continue;
    }
    c->seen = 0;
  }
}

void wd_tm_interval(void) {
  if (!tm.on) return;
  for (uint32_t i = 0; i < tm.nlinks; i++) {
    wd_tm_link *l = &tm.links[i];
    double busy = l->busy_s - l->mark_busy;
    if (busy > 0) l->rate = (double)(l->bytes - l->mark_bytes) / busy;
    double net = l->net_s - l->mark_net;
    if (net > 0) l->net_rate = (double)(l->bytes - l->mark_bytes) / net;
    l->mark_bytes = l->bytes;
    l->mark_busy = l->busy_s;
    l->mark_net = l->net_s;
  }
  for (uint32_t i = 0; i < tm.nctxs; i++) {
    wd_tm_comm *m = &tm.comms[i];
    /* initial_sync where NCCL reports it: the wait for the peers itself. */
    int sync = m->syncs > 0;
    uint64_t n = sync ? m->syncs : m->colls;
    double s = sync ? m->sync_s : m->coll_s;
    if (sync != m->sync_based) { /* the measure changed: start its history anew */
      m->sync_based = sync;
      m->mark_n = 0, m->mark_s = 0, m->have_baseline = 0;
    }
    if (n > m->mark_n) {
      m->recent_s = (s - m->mark_s) / (double)(n - m->mark_n);
      m->have_recent = 1;
      if (!m->have_baseline) m->baseline_s = m->recent_s, m->have_baseline = 1;
      m->lag_s = m->baseline_s - m->recent_s;
      m->baseline_s += WD_TM_BASELINE * (m->recent_s - m->baseline_s);
    }
    m->mark_n = n;
    m->mark_s = s;
  }
}

void wd_tm_get(wd_tm_view *v) {
  memset(v, 0, sizeof *v);
  if (!tm.on) return;
  v->funcs = tm.funcs;
  v->nfuncs = tm.nfuncs;
  v->comms = tm.comms;
  v->ncomms = tm.nctxs;
  v->links = tm.links;
  v->nlinks = tm.nlinks;
  v->records_missed = tm.missed;
  v->links_folded = tm.folded;
}
