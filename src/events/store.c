/* The process's event store (store.h). */
#include "events/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/host.h"
#include "base/log.h"
#include "events/arena.h"
#include "events/blacklist.h"
#include "events/budget.h"
#include "flightrec/record.h"
#include "flightrec/ringfile.h"

/* Long enough that no late callback of a finalized communicator (NCCL's shared proxy thread) can
 * still be inside one of its slots when the context is reset for another communicator. */
#define WD_RETIRE_GRACE_NS (10ull * 1000000000ull)

wd_store_state wd_store = {.lock = PTHREAD_MUTEX_INITIALIZER, .retire_grace_ns = WD_RETIRE_GRACE_NS};
_Atomic int wd_store_active;

/* Registry: open addressing over context addresses, lock-free lookups. */
#define WD_REG_SIZE 4096u
#define WD_REG_TOMB ((uintptr_t)1)
static _Atomic uintptr_t wd_registry[WD_REG_SIZE];

static inline unsigned reg_hash(uintptr_t p) {
  return (unsigned)(((uint64_t)p * 0x9e3779b97f4a7c15ull) >> 52) & (WD_REG_SIZE - 1);
}

int wd_registry_has(const void *ctx) {
  uintptr_t p = (uintptr_t)ctx;
  if (p <= WD_REG_TOMB) return 0;
  unsigned h = reg_hash(p);
  for (unsigned i = 0; i < WD_REG_SIZE; i++) {
    uintptr_t cur = atomic_load_explicit(&wd_registry[(h + i) & (WD_REG_SIZE - 1)], memory_order_acquire);
    if (cur == p) return 1;
    if (cur == 0) return 0;
  }
  return 0;
}

static int reg_add(uintptr_t p) {
  unsigned h = reg_hash(p);
  for (unsigned i = 0; i < WD_REG_SIZE; i++) {
    _Atomic uintptr_t *e = &wd_registry[(h + i) & (WD_REG_SIZE - 1)];
    uintptr_t cur = atomic_load_explicit(e, memory_order_relaxed);
    if (cur == 0 || cur == WD_REG_TOMB) {
      atomic_store_explicit(e, p, memory_order_release);
      return 0;
    }
  }
  return -1;
}

static void reg_remove(uintptr_t p) {
  unsigned h = reg_hash(p);
  for (unsigned i = 0; i < WD_REG_SIZE; i++) {
    _Atomic uintptr_t *e = &wd_registry[(h + i) & (WD_REG_SIZE - 1)];
    uintptr_t cur = atomic_load_explicit(e, memory_order_relaxed);
    if (cur == p) {
      atomic_store_explicit(e, WD_REG_TOMB, memory_order_release);
      return;
    }
    if (cur == 0) return;
  }
}

static void reg_clear(void) {
  for (unsigned i = 0; i < WD_REG_SIZE; i++) atomic_store_explicit(&wd_registry[i], 0, memory_order_relaxed);
}

int wd_store_open(const wd_config *cfg) {
  wd_store.cfg = cfg;
  wd_store.pid = getpid();
  wd_store.abi_max = 0;
  /* Ring files name this process by its start as /proc tells it: the analyzer, on this machine,
   * can then tell it alive (tools/analyze/load.c, find_live_rings). */
  wd_process_id me;
  wd_process_identity(&me);
  wd_ringfile_set_process(me.start_wall_ns, me.boot_id, me.pidns_ino);
  wd_store.detached_bl = wd_blacklist_create(65536);
  if (wd_store.detached_bl == NULL ||
      wd_pool_init(&wd_store.detached, WD_CHUNK_SLOTS, 16 * WD_CHUNK_SLOTS, WD_SLOT_DETACHED_BIT, NULL, 0) != 0) {
    if (wd_store.detached_bl) wd_blacklist_destroy(wd_store.detached_bl);
    wd_store.detached_bl = NULL;
    WD_WARN("cannot allocate the detach pool; nccl-watchdog disabled for this process");
    return -1;
  }
  wd_store.detached.blacklist = wd_store.detached_bl;
  if (wd_ring_init(&wd_store.detached_ring, cfg->proxy_ring_size) != 0) {
    wd_pool_destroy(&wd_store.detached);
    wd_blacklist_destroy(wd_store.detached_bl);
    wd_store.detached_bl = NULL;
    return -1;
  }
  atomic_store_explicit(&wd_store_active, 1, memory_order_release);
  return 0;
}

void wd_store_quiesce(void) { atomic_store_explicit(&wd_store_active, 0, memory_order_release); }

void wd_store_unlink_files(void) {
  /* A forked child that exits normally runs this too: the files are its parent's. */
  if (getpid() != wd_store.pid) return;
  /* trylock: exit() may run while another thread holds the lock; a file left behind is only
   * disk space, a deadlock at exit is not. */
  if (pthread_mutex_trylock(&wd_store.lock) != 0) return;
  for (int list = 0; list < 2; list++)
    for (wd_context *c = list ? wd_store.retired : wd_store.contexts; c; c = c->next)
      if (c->file.path[0] && !c->keep_file) {
        unlink(c->file.path);
        c->file.path[0] = '\0';
      }
  pthread_mutex_unlock(&wd_store.lock);
}

void wd_store_close(void) {
  wd_store_quiesce();
  /* Stop and state check only the handle: the detach pool's tags move on before its ring and
   * queue go, so a late call finds a stale handle rather than freed memory. */
  wd_pool_retire(&wd_store.detached);
  wd_ring_destroy(&wd_store.detached_ring);
  wd_pool_destroy(&wd_store.detached);
  wd_blacklist_destroy(wd_store.detached_bl);
  wd_store.detached_bl = NULL;
  reg_clear();
  /* Contexts finalized within the grace period stay (a late callback may still be inside one);
   * a later open reuses them, and unloading the library frees them. */
  uint64_t now = wd_now_ns();
  for (wd_context **pp = &wd_store.retired; *pp;) {
    wd_context *ctx = *pp;
    if (now - ctx->retired_ns >= wd_store.retire_grace_ns) {
      *pp = ctx->next;
      wd_context_free(ctx);
    } else {
      pp = &ctx->next;
    }
  }
}

/* Unloading the library (dlclose after the last finalize): nothing can call in any more, so the
 * contexts kept for late callbacks and the slot arena go. At process exit with communicators
 * still open, NCCL's threads may still be running: then nothing is freed (the system reclaims). */
/* At dlclose, and at a normal exit (destructors run then too; an atexit handler would outlive
 * the library under interposers that do not tie it to the object). */
__attribute__((destructor)) static void store_unload(void) {
  wd_store_unlink_files();
  if (wd_store.nctx != 0 || atomic_load(&wd_store_active)) return;
  while (wd_store.retired) {
    wd_context *ctx = wd_store.retired;
    wd_store.retired = ctx->next;
    wd_context_free(ctx);
  }
  wd_arena_release();
}

/* What stopped an allocation: the process's tightest limit when it has one, else memory. */
static void wd_store_short_cause(char *buf, size_t len) {
  const char *what;
  uint64_t limit = wd_host_memory_limit(&what);
  if (limit)
    snprintf(buf, len, "%s (%llu MiB) or the memory", what, (unsigned long long)(limit >> 20));
  else
    snprintf(buf, len, "the memory (or the memory map)");
}

/* A context as configured; when that cannot be mapped (an address-space limit, large rings or
 * NCCL_WATCHDOG_MAX_EVENTS), the largest of its event bound and rings halved until it can, with
 * one warning that says what it got and why; NULL (not profiled, one warning) when not even the
 * smallest fits. Nothing half-built is kept: a failed try frees everything it took. */
static wd_context *wd_store_alloc_shrinking(const wd_config *cfg, const char *name, int rank) {
  uint32_t ev = cfg->max_events, rs = cfg->ring_size, prs = cfg->proxy_ring_size;
  wd_context *ctx = wd_context_alloc(ev, rs, prs, cfg->ring_dir, cfg->keep_rings);
  int tries = 0;
  while (ctx == NULL && tries < 64) {
    int can_ev = ev > 4 * WD_CHUNK_SLOTS, can_rs = rs > WD_BUDGET_MIN_RING, can_prs = prs > WD_BUDGET_MIN_RING;
    if (!can_ev && !can_rs && !can_prs) break;
    /* The largest first: the event bound's queues against the rings' records (bytes each). */
    uint64_t ev_b = can_ev ? (uint64_t)ev * 8 : 0, rs_b = can_rs ? (uint64_t)rs * 80 : 0,
             prs_b = can_prs ? (uint64_t)prs * 80 : 0;
    if (ev_b >= rs_b && ev_b >= prs_b) ev /= 2;
    else if (prs_b >= rs_b) prs /= 2;
    else rs /= 2;
    tries++;
    ctx = wd_context_alloc(ev, rs, prs, cfg->ring_dir, cfg->keep_rings);
  }
  char cause[128];
  if (ctx == NULL || tries) wd_store_short_cause(cause, sizeof cause);
  if (ctx == NULL) {
    WD_WARN("communicator %s rank %d not profiled: not even %u events and rings of %u + %u "
            "records could be mapped (%s)", name ? name : "", rank, ev, rs, prs, cause);
    return NULL;
  }
  static _Atomic int warned; /* one line for the process; the others in NCCL's INFO log */
  if (tries && !atomic_exchange(&warned, 1))
    WD_WARN("communicator %s rank %d: NCCL_WATCHDOG_MAX_EVENTS=%u with rings of %u + %u records "
            "did not fit in %s; it gets %u events and rings of %u + %u records (later "
            "communicators likewise, said at INFO)",
            name ? name : "", rank, cfg->max_events, cfg->ring_size, cfg->proxy_ring_size, cause, ev,
            rs, prs);
  else if (tries)
    WD_INFO("communicator %s rank %d: %u events and rings of %u + %u records (%s)", name ? name : "",
            rank, ev, rs, prs, cause);
  return ctx;
}

wd_context *wd_store_add(int abi, uint64_t comm_id, const char *name, int nnodes, int nranks,
                         int rank) {
  const wd_config *cfg = wd_store.cfg;
  /* Reuse the memory of a communicator finalized long enough ago; until then its slots stay
   * as they were left (retired, so late calls are ignored, but never reset under them). */
  wd_context *ctx = NULL, **oldest = NULL;
  uint64_t now = wd_now_ns();
  for (wd_context **pp = &wd_store.retired; *pp; pp = &(*pp)->next) /* newest first */
    if (now - (*pp)->retired_ns >= wd_store.retire_grace_ns) oldest = pp;
  if (oldest) {
    ctx = *oldest;
    *oldest = ctx->next;
    wd_context_recycle(ctx);
  } else {
    ctx = wd_store_alloc_shrinking(cfg, name, rank);
    if (ctx == NULL) return NULL;
  }
  /* Slots for captured launches (events/graph.h), kept when the context is recycled. Without
   * them the communicator is profiled as before, its graphs' intra-node replays unseen. */
  if (ctx->graphs.slot == NULL && cfg->gpu_events && cfg->graph_launches &&
      wd_graphs_alloc(&ctx->graphs, cfg->graph_launches) != 0)
    WD_WARN("communicator %s rank %d: no memory for %u captured-launch slots: hangs inside its "
            "CUDA graphs' replays may go unseen", name ? name : "", rank, cfg->graph_launches);
  wd_context_bind(ctx, abi, comm_id, name, nnodes, nranks, rank,
                  (cfg->event_mask & (1 << WD_T_KERNELCH)) != 0, cfg->gpu_events, cfg->poll_ns);

  pthread_mutex_lock(&wd_store.lock);
  if (reg_add((uintptr_t)ctx) != 0) {
    pthread_mutex_unlock(&wd_store.lock);
    WD_WARN("too many communicators in one process: %s rank %d not profiled", ctx->name, rank);
    wd_context_free(ctx);
    return NULL;
  }
  ctx->next = wd_store.contexts;
  wd_store.contexts = ctx;
  wd_store.nctx++;
  if (abi > wd_store.abi_max) wd_store.abi_max = abi;
  pthread_mutex_unlock(&wd_store.lock);
  return ctx;
}

int wd_store_remove(wd_context *ctx) {
  if (!wd_registry_has(ctx)) return -1;
  pthread_mutex_lock(&wd_store.lock);
  reg_remove((uintptr_t)ctx);
  for (wd_context **pp = &wd_store.contexts; *pp; pp = &(*pp)->next) {
    if (*pp == ctx) {
      *pp = ctx->next;
      break;
    }
  }
  int left = --wd_store.nctx;
  pthread_mutex_unlock(&wd_store.lock);
  /* Not freed: NCCL's proxy thread may still stop or update events of this context (ProxyCtrl
   * of a shared proxy). Its slots are retired (stale handles are ignored) and the context waits
   * on the retired list, to be reset and reused by a later init after a grace period. */
  wd_context_retire(ctx, wd_now_ns());
  ctx->next = wd_store.retired;
  wd_store.retired = ctx;
  return left;
}
