/* Contexts, the registry of contexts this process created, and process-wide lifecycle. */
#include "context.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../flightrec/strtab.h"
#include "../watchdog/watchdog.h"
#include "blacklist.h"
#include "clock.h"
#include "log.h"

/* Long enough that no late callback of a finalized communicator (NCCL's shared proxy thread) can
 * still be inside one of its slots when the context is reset for another communicator. */
#define WD_RETIRE_GRACE_NS (10ull * 1000000000ull)

wd_process wd_proc = {.lock = PTHREAD_MUTEX_INITIALIZER, .retire_grace_ns = WD_RETIRE_GRACE_NS};
_Atomic int wd_proc_active;

/* Serialises init and finalize (which start and stop the watchdog); wd_proc.lock only guards
 * the context list that the watchdog scans. */
static pthread_mutex_t wd_life_lock = PTHREAD_MUTEX_INITIALIZER;
static int wd_forked_child;
static int wd_atfork_done;

/* Registry: open addressing over context addresses, lock-free lookups. */
#define WD_REG_SIZE 4096u
#define WD_REG_TOMB ((uintptr_t)1)
static _Atomic uintptr_t wd_registry[WD_REG_SIZE];

static inline unsigned wd_reg_hash(uintptr_t p) {
  return (unsigned)(((uint64_t)p * 0x9e3779b97f4a7c15ull) >> 52) & (WD_REG_SIZE - 1);
}

int wd_registry_has(const void *ctx) {
  uintptr_t p = (uintptr_t)ctx;
  if (p <= WD_REG_TOMB) return 0;
  unsigned h = wd_reg_hash(p);
  for (unsigned i = 0; i < WD_REG_SIZE; i++) {
    uintptr_t cur = atomic_load_explicit(&wd_registry[(h + i) & (WD_REG_SIZE - 1)], memory_order_acquire);
    if (cur == p) return 1;
    if (cur == 0) return 0;
  }
  return 0;
}

static int wd_registry_add(uintptr_t p) {
  unsigned h = wd_reg_hash(p);
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

static void wd_registry_remove(uintptr_t p) {
  unsigned h = wd_reg_hash(p);
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

static void wd_registry_clear(void) {
  for (unsigned i = 0; i < WD_REG_SIZE; i++) atomic_store_explicit(&wd_registry[i], 0, memory_order_relaxed);
}

wd_event *wd_ctx_slot(wd_context *ctx, uint32_t slot_id) {
  if (slot_id == WD_SLOT_NONE || slot_id == WD_SLOT_FOREIGN || (slot_id & WD_SLOT_DETACHED_BIT))
    return NULL;
  wd_pool *p = (slot_id & WD_SLOT_PROXY_BIT) ? &ctx->proxy_pool : &ctx->pool;
  uint32_t idx = slot_id & ~WD_SLOT_PROXY_BIT;
  return idx < wd_pool_nslots(p) ? wd_pool_slot(p, idx) : NULL;
}

int wd_tid_slow(void) {
  wd_tid_cache = (int)syscall(SYS_gettid);
  return wd_tid_cache;
}

void wd_tid_forget(void) { wd_tid_cache = 0; }

/* In a forked child the parent's watchdog thread does not exist and its locks may be held by
 * threads that do not exist either: the plugin goes quiet in the child. */
static void wd_atfork_child(void) {
  wd_forked_child = 1;
  atomic_store_explicit(&wd_proc_active, 0, memory_order_release);
  wd_tid_forget();
}

static void wd_config_warn(const char *msg) { WD_WARN("%s", msg); }

static const char *wd_getenv(const char *name) { return getenv(name); }

static void wd_context_free(wd_context *ctx);

static int wd_process_start(void) {
  wd_config_defaults(&wd_proc.cfg);
  wd_config_load(&wd_proc.cfg, wd_getenv, wd_config_warn);
  char desc[1024];
  wd_config_describe(&wd_proc.cfg, desc, sizeof(desc));
  WD_INFO("nccl-watchdog %s: %s", WD_VERSION, desc);
  if (!wd_proc.cfg.enable) return 0;
  wd_clock_id = wd_proc.cfg.precise_clock ? CLOCK_MONOTONIC : CLOCK_MONOTONIC_COARSE;
  wd_proc.pid = getpid();
  wd_proc.abi_max = 0;
  wd_proc.detached_bl = wd_blacklist_create(65536);
  if (wd_proc.detached_bl == NULL ||
      wd_pool_init(&wd_proc.detached, WD_CHUNK_SLOTS, 16 * WD_CHUNK_SLOTS, WD_SLOT_DETACHED_BIT, NULL) != 0) {
    if (wd_proc.detached_bl) wd_blacklist_destroy(wd_proc.detached_bl);
    wd_proc.detached_bl = NULL;
    WD_WARN("cannot allocate the detach pool; nccl-watchdog disabled for this process");
    return -1;
  }
  wd_proc.detached.blacklist = wd_proc.detached_bl;
  if (wd_ring_init(&wd_proc.detached_ring, wd_proc.cfg.proxy_ring_size) != 0) {
    wd_pool_destroy(&wd_proc.detached);
    wd_blacklist_destroy(wd_proc.detached_bl);
    wd_proc.detached_bl = NULL;
    return -1;
  }
  if (!wd_atfork_done) {
    pthread_atfork(NULL, NULL, wd_atfork_child);
    wd_atfork_done = 1;
  }
  atomic_store_explicit(&wd_proc_active, 1, memory_order_release);
  if (wd_watchdog_start() != 0) WD_WARN("watchdog thread not started: recording only, no dumps");
  return 0;
}

static void wd_process_stop(void) {
  wd_watchdog_stop();
  atomic_store_explicit(&wd_proc_active, 0, memory_order_release);
  wd_ring_destroy(&wd_proc.detached_ring);
  wd_pool_destroy(&wd_proc.detached);
  wd_blacklist_destroy(wd_proc.detached_bl);
  wd_proc.detached_bl = NULL;
  wd_registry_clear();
  while (wd_proc.retired) {
    wd_context *ctx = wd_proc.retired;
    wd_proc.retired = ctx->next;
    wd_context_free(ctx);
  }
  /* NCCL may be unloaded and loaded again at another address: forget its string pointers. */
  wd_str_reset_ptrs();
}

/* Everything but the pool and the rings, which a recycled context keeps. */
static void wd_context_reset(wd_context *ctx) {
  ctx->abi = 0;
  ctx->kch_on = 0;
  atomic_store(&ctx->order_next, 0);
  atomic_store(&ctx->completed_order, 0);
  atomic_store(&ctx->p2p_enq, 0);
  atomic_store(&ctx->p2p_done, 0);
  atomic_store(&ctx->dropped, 0);
  ctx->dropped_logged = 0;
  atomic_store(&ctx->stale, 0);
  ctx->next = NULL;
}

static void wd_context_free(wd_context *ctx) {
  wd_ring_destroy(&ctx->ring);
  wd_ring_destroy(&ctx->proxy_ring);
  wd_pool_destroy(&ctx->pool);
  wd_pool_destroy(&ctx->proxy_pool);
  ctx->magic = 0;
  free(ctx);
}

int wd_context_create(wd_context **out, int abi, uint64_t comm_id, const char *name, int nnodes,
                      int nranks, int rank, int *mask, void *logfn) {
  *out = NULL;
  pthread_mutex_lock(&wd_life_lock);
  int rc = 0;
  if (wd_forked_child) goto done;
  wd_log_set_logger((ncclDebugLogger_t)logfn);
  if (wd_proc.nctx == 0 && !atomic_load(&wd_proc_active)) {
    if (wd_process_start() != 0) { rc = -1; goto done; }
  }
  if (!wd_proc.cfg.enable || !atomic_load(&wd_proc_active)) goto done;

  /* Reuse the memory of a communicator finalized long enough ago; until then its slots stay
   * as they were left (retired, so late calls are ignored, but never reset under them). */
  wd_context *ctx = NULL, **oldest = NULL;
  uint64_t now = wd_now_ns();
  for (wd_context **pp = &wd_proc.retired; *pp; pp = &(*pp)->next) /* newest first */
    if (now - (*pp)->retired_ns >= wd_proc.retire_grace_ns) oldest = pp;
  if (oldest) {
    ctx = *oldest;
    *oldest = ctx->next;
  }
  int recycled = ctx != NULL;
  if (recycled) {
    wd_pool_recycle(&ctx->pool);
    wd_pool_recycle(&ctx->proxy_pool);
    wd_ring_clear(&ctx->ring);
    wd_ring_clear(&ctx->proxy_ring);
    wd_context_reset(ctx);
  } else {
    /* Cache-line aligned: ring heads and queue ends sit on lines of their own. */
    ctx = aligned_alloc(64, (sizeof(*ctx) + 63) & ~(size_t)63);
    if (ctx == NULL) { rc = -1; goto done; }
    memset(ctx, 0, sizeof(*ctx));
  }
  ctx->magic = WD_CTX_MAGIC;
  ctx->abi = abi;
  ctx->comm_id = comm_id;
  snprintf(ctx->name, sizeof(ctx->name), "%s", name ? name : "");
  ctx->rank = rank;
  ctx->nranks = nranks;
  ctx->nnodes = nnodes;
  ctx->init_ns = wd_now_ns();
  for (int i = 0; i < WD_NSTR; i++) {
    atomic_store(&ctx->seq_enq[i], -1);
    atomic_store(&ctx->seq_done[i], -1);
  }
  wd_gpu_uuid(ctx->gpu_uuid, sizeof(ctx->gpu_uuid));
  ctx->cuda_dev = wd_gpu_device();
  /* Operation-level events are few at a time (a handful per collective in flight); the bulk
   * is proxy steps. NCCL_WATCHDOG_MAX_EVENTS bounds the proxy pool, a quarter of it the other. */
  uint32_t op_max = wd_proc.cfg.max_events / 4 > WD_CHUNK_SLOTS ? wd_proc.cfg.max_events / 4 : WD_CHUNK_SLOTS;
  if (!recycled && (wd_pool_init(&ctx->pool, WD_CHUNK_SLOTS, op_max, 0, ctx) != 0 ||
                    wd_pool_init(&ctx->proxy_pool, WD_CHUNK_SLOTS, wd_proc.cfg.max_events,
                                 WD_SLOT_PROXY_BIT, ctx) != 0 ||
                    wd_ring_init(&ctx->ring, wd_proc.cfg.ring_size) != 0 ||
                    wd_ring_init(&ctx->proxy_ring, wd_proc.cfg.proxy_ring_size) != 0)) {
    WD_WARN("out of memory for communicator %s rank %d: not profiled", ctx->name, rank);
    wd_context_free(ctx);
    rc = -1;
    goto done;
  }
  if (mask) *mask = wd_proc.cfg.event_mask;
  ctx->kch_on = (wd_proc.cfg.event_mask & (1 << WD_T_KERNELCH)) != 0;

  pthread_mutex_lock(&wd_proc.lock);
  if (wd_registry_add((uintptr_t)ctx) != 0) {
    pthread_mutex_unlock(&wd_proc.lock);
    WD_WARN("too many communicators in one process: %s rank %d not profiled", ctx->name, rank);
    wd_context_free(ctx);
    goto done;
  }
  ctx->next = wd_proc.contexts;
  wd_proc.contexts = ctx;
  wd_proc.nctx++;
  if (abi > wd_proc.abi_max) wd_proc.abi_max = abi;
  pthread_mutex_unlock(&wd_proc.lock);
  WD_INFO("profiling comm 0x%llx \"%s\" rank %d/%d (profiler ABI v%d)", (unsigned long long)comm_id,
          ctx->name, rank, nranks, abi);
  *out = ctx;
done:
  if (*out == NULL && wd_proc.nctx == 0 && atomic_load(&wd_proc_active)) wd_process_stop();
  pthread_mutex_unlock(&wd_life_lock);
  return rc;
}

void wd_context_destroy(wd_context *ctx) {
  pthread_mutex_lock(&wd_life_lock);
  if (wd_forked_child || !wd_registry_has(ctx)) {
    pthread_mutex_unlock(&wd_life_lock);
    return;
  }
  pthread_mutex_lock(&wd_proc.lock);
  wd_registry_remove((uintptr_t)ctx);
  for (wd_context **pp = &wd_proc.contexts; *pp; pp = &(*pp)->next) {
    if (*pp == ctx) {
      *pp = ctx->next;
      break;
    }
  }
  int last = --wd_proc.nctx == 0;
  pthread_mutex_unlock(&wd_proc.lock);
  /* Not freed: NCCL's proxy thread may still stop or update events of this context (ProxyCtrl
   * of a shared proxy). Its slots are retired (stale handles are ignored) and the context waits
   * on the retired list, to be reset and reused by a later init after a grace period;
   * everything is freed at the last finalize. */
  ctx->magic = 0;
  wd_pool_retire(&ctx->pool);
  wd_pool_retire(&ctx->proxy_pool);
  ctx->retired_ns = wd_now_ns();
  ctx->next = wd_proc.retired;
  wd_proc.retired = ctx;
  if (last) {
    wd_process_stop();
    wd_log_reset();
  }
  pthread_mutex_unlock(&wd_life_lock);
}
