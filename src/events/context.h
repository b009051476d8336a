/*
 * A profiler context: one per communicator init. It owns the communicator's event pools, its two
 * rings and its sequence counters; the store (store.h) keeps the list of contexts.
 */
#ifndef WD_CONTEXT_H
#define WD_CONTEXT_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/gpu.h"
#include "events/graph.h"
#include "events/launch.h"
#include "events/pool.h"
#include "flightrec/ring.h"
#include "flightrec/ringfile.h"

#define WD_CTX_MAGIC 0x57444358u /* "WDCX" */
#define WD_NSTR 256

#define WD_MAX_PINNED_API 4096u /* captured API slots kept per communicator */

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
  /* NCCL 2.29/2.30 counter drift (event.h, WD_KCH_*), from the application thread's API events:
   * the last Broadcast CollApi's group and root, and whether a Broadcast group of several roots
   * ever ran. */
  _Atomic uint8_t gather_seen;
  uint8_t bcast_func; /* "Broadcast"'s string id, interned at bind: the hot path compares ids */
  _Atomic uint32_t pinned_api; /* captured API events whose slots are kept (track.c) */
  /* The launching thread's: the pinned API events of the group being captured, named after the
   * launch slot their KernelLaunch takes (track.c), so that its graph's destruction unpins them. */
  _Atomic uint64_t cap_api_group;
  _Atomic uint32_t ncap_api; /* may run past 8 when threads race: read bounded */
#define WD_CAP_API 8
  struct wd_event *_Atomic cap_api[WD_CAP_API];
  _Atomic int32_t bcast_root;
  _Atomic uint64_t bcast_group;
  /* NCCL's activation mask (one per process, NCCL's memory), what we set in it at init, and
   * what the watchdog last read there: NCCL's RAS may change it job-wide (PROFILER_MASK). */
  int *mask_ptr;
  int mask_set;
  int mask_seen;  /* watchdog only */
  int mask_warned; /* watchdog only */
  wd_pool pool;       /* operation-level events (application thread, CUDA callbacks) */
  wd_pool proxy_pool; /* proxy-level events (NCCL's proxy thread): separate free queues keep
                         each thread's allocations on cache lines the other does not touch */
  wd_ring ring;       /* operation-level records */
  wd_ring proxy_ring; /* proxy-level records */
  _Atomic uint64_t order_next;
  _Atomic uint64_t completed_order; /* highest order (group) of a root op completed by its own events: ops of older groups are done */
  _Atomic int64_t seq_enq[WD_NSTR]; /* by func string id */
  _Atomic int64_t seq_done[WD_NSTR];
  /* CE collectives number themselves apart (NCCL's ceSeqNum), so their counters are apart too. */
  _Atomic int64_t ce_seq_enq[WD_NSTR];
  _Atomic int64_t ce_seq_done[WD_NSTR];
  _Atomic int64_t p2p_enq, p2p_done;
  _Atomic uint64_t dropped, stale;
  uint64_t dropped_logged; /* watchdog only: drops already reported in the log */
  uint64_t seen_tickets;   /* watchdog only: ring tickets at the last poll (metrics) */
  uint64_t active_ns;      /* watchdog only: when a poll last saw new records (metrics) */
  uint64_t calls_seen, calls_ns; /* watchdog only: operation-ring tickets at the last poll, and
                                    when a poll last saw them move (stall.c, wd_note_calls) */
  uint64_t abandoned;      /* watchdog only: proxy-ring events it closed itself (stall.c): their
                              stop records are its own, not NCCL's */
  uint64_t retired_ns;     /* when it was finalized (on the retired list) */
  wd_launches launches;    /* CUDA events around kernel launches, when the driver is usable */
  wd_graphs graphs;        /* launches captured into CUDA graphs, and their replays */
  wd_ringfile file;        /* the rings' file-backed mapping, when NCCL_WATCHDOG_RING_DIR is on */
  wd_rf_header *file_done; /* its header, where completions are kept as they happen; NULL none */
  int keep_file;           /* leave the file behind when the context is freed */
  int file_full;           /* watchdog only: the ring file could not be allocated further */
  uint64_t ring_bytes;     /* counted against the memory budget while it lives */
  uint64_t file_share;     /* its ring file's bytes, counted against the node's share (nodeshare.h) */
  struct wd_context *next; /* store list, under wd_store.lock */
} wd_context;

/* The pools of a context, for scans. */
static inline wd_pool *wd_ctx_pool(wd_context *ctx, int i) { return i ? &ctx->proxy_pool : &ctx->pool; }
#define WD_CTX_NPOOLS 2
/* The slot a slot id of this context names, or NULL. */
wd_event *wd_ctx_slot(wd_context *ctx, uint32_t slot_id);

/* A new context with its pools and rings sized from the arguments, or NULL (out of memory). With
 * ring_dir, the rings live in a ring file there (memory when the file cannot be made). */
wd_context *wd_context_alloc(uint32_t max_events, uint32_t ring_size, uint32_t proxy_ring_size,
                             const char *ring_dir, int keep_file);
/* Refresh the ring file's live header: sequence counters (watchdog thread; strings reach the
 * file when they are interned, ringfile.h). */
void wd_context_refresh_file(wd_context *ctx);
/* Make a context finalized long ago fit for another communicator (pools, rings, counters). */
void wd_context_recycle(wd_context *ctx);
/* Fill in the identity of the communicator it profiles; poll_ns: how often the watchdog refreshes
 * its ring file's live part (recorded there for readers). */
void wd_context_bind(wd_context *ctx, int abi, uint64_t comm_id, const char *name, int nnodes,
                     int nranks, int rank, int kch_on, int gpu_events, uint64_t poll_ns);
/* Its handles stop matching (finalize); the memory stays for late callbacks. */
void wd_context_retire(wd_context *ctx, uint64_t now);
void wd_context_free(wd_context *ctx);

#endif
