/* A profiler context: pools, rings and counters of one communicator (context.h). */
#include "events/context.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/host.h"
#include "base/log.h"
#include "events/budget.h"
#include "events/track.h"
#include "events/nodeshare.h"
#include "flightrec/strtab.h"

wd_event *wd_ctx_slot(wd_context *ctx, uint32_t slot_id) {
  if (slot_id == WD_SLOT_NONE || slot_id == WD_SLOT_FOREIGN || (slot_id & WD_SLOT_DETACHED_BIT))
    return NULL;
  wd_pool *p = (slot_id & WD_SLOT_PROXY_BIT) ? &ctx->proxy_pool : &ctx->pool;
  uint32_t idx = slot_id & ~WD_SLOT_PROXY_BIT;
  return idx < wd_pool_nslots(p) ? wd_pool_slot(p, idx) : NULL;
}

/* Everything but the pools and the rings. */
static void wd_context_reset(wd_context *ctx) {
  ctx->abi = 0;
  ctx->kch_on = 0;
  ctx->mask_ptr = NULL;
  ctx->mask_set = ctx->mask_seen = ctx->mask_warned = 0;
  atomic_store(&ctx->order_next, 0);
  atomic_store(&ctx->completed_order, 0);
  atomic_store(&ctx->p2p_enq, 0);
  atomic_store(&ctx->p2p_done, 0);
  atomic_store(&ctx->dropped, 0);
  ctx->dropped_logged = 0;
  ctx->abandoned = 0;
  atomic_store(&ctx->stale, 0);
  memset(&ctx->launches, 0, sizeof(ctx->launches));
  ctx->next = NULL;
}

void wd_context_free(wd_context *ctx) {
  wd_budget_rings(-(int64_t)ctx->ring_bytes);
  wd_launches_close(&ctx->launches);
  wd_graphs_free(&ctx->graphs);
  wd_ring_destroy(&ctx->ring);
  wd_ring_destroy(&ctx->proxy_ring);
  wd_ringfile_close(&ctx->file, ctx->keep_file);
  /* A file kept (post-mortem evidence) still takes its place on the node. */
  if (!ctx->keep_file) wd_nodeshare_release(ctx->file_share);
  wd_pool_destroy(&ctx->pool);
  wd_pool_destroy(&ctx->proxy_pool);
  ctx->magic = 0;
  free(ctx);
}

wd_context *wd_context_alloc(uint32_t max_events, uint32_t ring_size, uint32_t proxy_ring_size,
                             const char *ring_dir, int keep_file) {
  /* Cache-line aligned: ring heads and queue ends sit on lines of their own. */
  wd_context *ctx = aligned_alloc(64, (sizeof(*ctx) + 63) & ~(size_t)63);
  if (ctx == NULL) return NULL;
  memset(ctx, 0, sizeof(*ctx));
  /* Operation-level events are few at a time (a handful per collective in flight); the bulk
   * is proxy steps. max_events bounds the proxy pool, a quarter of it the other. */
  uint32_t op_max = max_events / 4 > WD_CHUNK_SLOTS ? max_events / 4 : WD_CHUNK_SLOTS;
  /* A part that failed, or was not tried, is left empty: freeing the whole context is safe. */
  /* No slot until the first event: a communicator that never carries traffic costs no chunk
   * (its first event grows the pool, warm-up; the watchdog keeps a quarter free after that). */
  if (wd_pool_init(&ctx->pool, 0, op_max, 0, ctx, 0) != 0 ||
      wd_pool_init(&ctx->proxy_pool, 0, max_events, WD_SLOT_PROXY_BIT, ctx, 1) != 0) {
    wd_context_free(ctx);
    return NULL;
  }
  ctx->keep_file = keep_file;
  uint32_t cap = wd_ring_round(ring_size), pcap = wd_ring_round(proxy_ring_size);
  /* Over the process's memory budget, a new communicator gets smaller rings (never below
   * WD_BUDGET_MIN_RING records), rather than none. */
  int shrunk = 0;
  while (!wd_budget_allows((uint64_t)(cap + pcap) * sizeof(wd_record)) &&
         (cap > WD_BUDGET_MIN_RING || pcap > WD_BUDGET_MIN_RING)) {
    if (pcap >= cap && pcap > WD_BUDGET_MIN_RING) pcap /= 2;
    else cap /= 2;
    shrunk = 1;
  }
  if (shrunk) {
    wd_budget_note_shrunk();
    static _Atomic int warned;
    if (!atomic_exchange(&warned, 1))
      WD_WARN("NCCL_WATCHDOG_MEMORY_BUDGET reached: new communicators get smaller rings (this "
              "one %u + %u records); raise the budget for whole rings", cap, pcap);
  }
  ctx->ring_bytes = (uint64_t)(cap + pcap) * sizeof(wd_record);
  wd_budget_rings((int64_t)ctx->ring_bytes);
  if (ring_dir && ring_dir[0]) {
    char host[64];
    wd_hostname(host, sizeof host);
    /* Checked where it is relied on: the file system NCCL's shared memory lives on, now. */
    char why[400];
    uint64_t need = wd_rf_file_bytes(cap, pcap);
    int admitted = wd_nodeshare_admit(ring_dir, need, why, sizeof why);
    int refused = !admitted;
    if (admitted && wd_ringfile_create(&ctx->file, ring_dir, host, cap, pcap) != 0) {
      int saved = errno;
      wd_nodeshare_release(need);
      admitted = 0;
      errno = saved;
    }
    if (admitted) {
      ctx->file_share = need;
      wd_ring_init_at(&ctx->ring, cap, wd_ringfile_ring(&ctx->file, 0), WD_RF_INITIAL_RECORDS);
      wd_ring_init_at(&ctx->proxy_ring, pcap, wd_ringfile_ring(&ctx->file, 1), WD_RF_INITIAL_RECORDS);
      /* Fixed for the context's life (the mapping is): the hot path reads it unlocked. */
      ctx->file_done = wd_ringfile_done_reset(&ctx->file);
      return ctx;
    }
    static _Atomic int warned;
    if (atomic_exchange(&warned, 1)) {
      /* said once per process; every dump says it too (memory.ringFilesRefused) */
    } else if (refused) {
      WD_WARN("no ring file for this communicator: %s; its rings are kept in memory, whole, but will not "
              "outlive the process (no post-mortem); said once, every dump says so", why);
    } else {
      WD_WARN("cannot create a ring file in %s (%s): rings kept in memory only, they will not "
              "outlive the process", ring_dir, strerror(errno));
    }
  }
  if (wd_ring_init(&ctx->ring, cap) != 0 || wd_ring_init(&ctx->proxy_ring, pcap) != 0) {
    wd_context_free(ctx);
    return NULL;
  }
  return ctx;
}

/* A ring file's rings are allocated whole once their communicator carries traffic, one poll after:
 * until then only the first WD_RF_INITIAL_RECORDS slots are backed, and records wrap within them
 * (the newest kept: ring.h). */
static void wd_context_grow_file(wd_context *ctx) {
  for (int proxy = 0; proxy < 2; proxy++) {
    wd_ring *r = proxy ? &ctx->proxy_ring : &ctx->ring;
    uint32_t cap = wd_ring_capacity(r);
    if (ctx->file_full || atomic_load_explicit(&r->ready, memory_order_relaxed) >= cap ||
        atomic_load_explicit(&r->head, memory_order_relaxed) == 0)
      continue;
    if (wd_ringfile_reserve(&ctx->file, proxy, cap) == 0) {
      wd_ring_ready(r, cap);
    } else {
      /* /dev/shm is full: the ring stays at what is backed (its newest records), never SIGBUS. */
      ctx->file_full = 1;
      WD_WARN("comm 0x%llx: cannot allocate its ring file %s (%s): its rings keep only their "
              "newest %u records", (unsigned long long)ctx->comm_id, ctx->file.path, strerror(errno),
              atomic_load_explicit(&r->ready, memory_order_relaxed));
    }
  }
}

/* The proxy-level events open now, into the file's header: their starts are in no ring (a span is
 * written at their stop), so this is what a decoder of a process that dies before its next
 * refresh has of them. The longest without progress are kept when more are open than fit. */
static void wd_context_list_open(wd_context *ctx, wd_rf_header *h) {
  uint32_t n = 0, total = 0;
  for (uint32_t i = 0, ns = wd_pool_nslots(&ctx->proxy_pool); i < ns; i++) {
    wd_event *ev = wd_pool_slot(&ctx->proxy_pool, i);
    uint64_t seq = atomic_load_explicit(&ev->seq, memory_order_acquire);
    if ((seq & 1) || !atomic_load_explicit(&ev->live, memory_order_relaxed) ||
        !wd_event_open(ev))
      continue;
    wd_record r;
    wd_event_read_start(ev, &r);
    if (!(r.flags & WD_F_SPAN)) continue; /* its start is in the ring */
    wd_rf_open_ev e = {
        .type = r.type, .state = atomic_load_explicit(&ev->state, memory_order_relaxed),
        .channel = r.channel, .flags = r.flags, .slot = r.slot, .parent = r.parent, .n = r.n,
        .peer = r.peer, .pid = r.pid, .tid = r.tid,
        .steps_done = atomic_load_explicit(&ev->steps_done, memory_order_relaxed),
        .a = r.a, .count = r.count, .trans = atomic_load_explicit(&ev->last_trans, memory_order_relaxed),
        .start_ns = r.ts_ns, .last_ns = atomic_load_explicit(&ev->last_ns, memory_order_relaxed)};
    if (atomic_load_explicit(&ev->seq, memory_order_acquire) != seq) continue; /* reused meanwhile */
    total++;
    uint32_t at = n;
    if (n == WD_RF_OPEN_EVENTS) { /* full: replace the one that progressed last, if later */
      at = 0;
      for (uint32_t k = 1; k < n; k++)
        if (h->open[k].last_ns > h->open[at].last_ns) at = k;
      if (h->open[at].last_ns <= e.last_ns) continue;
    } else {
      n++;
    }
    h->open[at] = e;
  }
  h->nopen = n;
  h->open_total = total;
}

void wd_context_refresh_file(wd_context *ctx) {
  wd_rf_header *h = wd_ringfile_header(&ctx->file);
  if (!h) return;
  wd_context_grow_file(ctx);
  wd_ringfile_live_begin(&ctx->file);
  uint32_t n = 0;
  for (int ce = 0; ce < 2; ce++)
    for (int f = 0; f < WD_NSTR && n < WD_RF_SEQS; f++) {
      int64_t e = atomic_load(ce ? &ctx->ce_seq_enq[f] : &ctx->seq_enq[f]);
      int64_t d = atomic_load(ce ? &ctx->ce_seq_done[f] : &ctx->seq_done[f]);
      if (e < 0 && d < 0) continue;
      h->seq[n] = (wd_rf_seq){.func = (uint8_t)f, .ce = (uint8_t)ce, .enqueued = e, .completed = d};
      n++;
    }
  h->nseq = n;
  h->p2p_enqueued = atomic_load(&ctx->p2p_enq);
  h->p2p_completed = atomic_load(&ctx->p2p_done);
  h->finalized = ctx->magic != WD_CTX_MAGIC;
  wd_context_list_open(ctx, h);
  wd_ringfile_live_end(&ctx->file);
}

void wd_context_recycle(wd_context *ctx) {
  wd_pool_recycle(&ctx->pool);
  wd_pool_recycle(&ctx->proxy_pool);
  wd_ring_clear(&ctx->ring);
  wd_ring_clear(&ctx->proxy_ring);
  wd_context_reset(ctx);
}

void wd_context_bind(wd_context *ctx, int abi, uint64_t comm_id, const char *name, int nnodes,
                     int nranks, int rank, int kch_on, int gpu_events, uint64_t poll_ns) {
  ctx->magic = WD_CTX_MAGIC;
  ctx->abi = abi;
  ctx->comm_id = comm_id;
  snprintf(ctx->name, sizeof(ctx->name), "%s", name ? name : "");
  ctx->rank = rank;
  ctx->nranks = nranks;
  ctx->nnodes = nnodes;
  ctx->init_ns = wd_now_ns();
  ctx->bcast_func = wd_str_id("Broadcast");
  for (int i = 0; i < WD_NSTR; i++) {
    atomic_store(&ctx->seq_enq[i], -1);
    atomic_store(&ctx->seq_done[i], -1);
    atomic_store(&ctx->ce_seq_enq[i], -1);
    atomic_store(&ctx->ce_seq_done[i], -1);
  }
  wd_gpu_uuid(ctx->gpu_uuid, sizeof(ctx->gpu_uuid));
  ctx->cuda_dev = wd_gpu_device();
  ctx->kch_on = kch_on;
  /* KernelLaunch (which carries the stream) and CeColl exist from ABI v5/v6 on. */
  if (gpu_events && abi >= 5) wd_launches_open(&ctx->launches);
  /* Captured launches need the same driver and KernelLaunch; slots were sized at store level. */
  if (gpu_events && abi >= 5 && ctx->launches.on) wd_graphs_open(&ctx->graphs);
  wd_rf_header *h = wd_ringfile_header(&ctx->file);
  if (h) {
    h->rank = rank;
    h->nranks = nranks;
    h->nnodes = nnodes;
    h->abi = abi;
    h->cuda_dev = ctx->cuda_dev;
    h->comm_id = comm_id;
    uint64_t poll_ms = poll_ns / 1000000u;
    h->poll_ms = poll_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)poll_ms;
    wd_hostname(h->host, sizeof h->host);
    snprintf(h->comm_name, sizeof h->comm_name, "%s", ctx->name);
    snprintf(h->gpu_uuid, sizeof h->gpu_uuid, "%s", ctx->gpu_uuid);
    wd_ringfile_seal_identity(&ctx->file);
    wd_ringfile_done_reset(&ctx->file); /* a recycled context's file: the last communicator's */
    wd_context_refresh_file(ctx);
  }
}

void wd_context_retire(wd_context *ctx, uint64_t now) {
  ctx->magic = 0;
  wd_launches_close(&ctx->launches);
  wd_graphs_close(&ctx->graphs);
  wd_context_refresh_file(ctx); /* its last counters, marked finalized */
  wd_pool_retire(&ctx->pool);
  wd_pool_retire(&ctx->proxy_pool);
  ctx->retired_ns = now;
}
