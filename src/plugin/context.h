/*
 * Profiler contexts (one per communicator init) and the process-wide state they share: the
 * registry of contexts this process created, the detach pool for PXN events, the configuration.
 */
#ifndef WD_CONTEXT_H
#define WD_CONTEXT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../flightrec/ring.h"
#include "config.h"
#include "gpu.h"
#include "pool.h"

#define WD_CTX_MAGIC 0x57444358u /* "WDCX" */
#define WD_NSTR 256

typedef struct wd_context {
  uint32_t magic;
  int abi;
  uint64_t comm_id;
  char name[128];
  int rank, nranks, nnodes;
  int cuda_dev;
  char gpu_uuid[WD_UUID_LEN];
  uint64_t init_ns;
  int kch_on; /* KernelCh was in the mask we set: every Coll/P2p gets nChannels kernel children */
  wd_pool pool;       /* operation-level events (application thread, CUDA callbacks) */
  wd_pool proxy_pool; /* proxy-level events (NCCL's proxy thread): separate free queues keep
                         each thread's allocations on cache lines the other does not touch */
  wd_ring ring;       /* operation-level records */
  wd_ring proxy_ring; /* proxy-level records */
  _Atomic uint64_t order_next;
  _Atomic uint64_t completed_order; /* highest order (group) of a root op completed by its own events: ops of older groups are done */
  _Atomic int64_t seq_enq[WD_NSTR]; /* by func string id */
  _Atomic int64_t seq_done[WD_NSTR];
  _Atomic int64_t p2p_enq, p2p_done;
  _Atomic uint64_t dropped, stale;
  uint64_t dropped_logged; /* watchdog only: drops already reported in the log */
  uint64_t retired_ns;     /* when it was finalized (on the retired list) */
  struct wd_context *next; /* process list, under wd_proc.lock */
} wd_context;

typedef struct wd_process {
  pthread_mutex_t lock; /* init, finalize and the watchdog's scans; never the hot path */
  int nctx;
  wd_context *contexts;
  wd_context *retired; /* finalized contexts kept for reuse (NCCL may still hold handles) */
  uint64_t retire_grace_ns; /* a finalized context is reused only after this long */
  wd_config cfg;
  pid_t pid;
  int abi_max;
  wd_pool detached;
  wd_ring detached_ring;
  struct wd_blacklist *detached_bl;
} wd_process;

extern wd_process wd_proc;
/* 1 while process-wide resources exist (first init .. last finalize), 0 in a forked child. */
extern _Atomic int wd_proc_active;

#define WD_SLOT_PROXY_BIT 0x40000000u /* slot ids of a context's proxy pool */

/* The pools of a context, for scans. */
static inline wd_pool *wd_ctx_pool(wd_context *ctx, int i) { return i ? &ctx->proxy_pool : &ctx->pool; }
#define WD_CTX_NPOOLS 2
/* The slot a slot id of this context names, or NULL. */
wd_event *wd_ctx_slot(wd_context *ctx, uint32_t slot_id);

/* Is ctx a live context of this process? Lock-free. */
int wd_registry_has(const void *ctx);

/* init/finalize of one context. Return 0 or -1 (init: *out NULL means disabled). */
int wd_context_create(wd_context **out, int abi, uint64_t comm_id, const char *name, int nnodes,
                      int nranks, int rank, int *mask, void *logfn);
void wd_context_destroy(wd_context *ctx);

#endif
