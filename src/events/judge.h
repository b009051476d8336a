/*
 * The one judge of an in-flight operation's status. The hot path (track.c) and the watchdog's
 * scan (watchdog/stall.c) only gather evidence; what it means is decided here, in one order of
 * trust (docs/architecture.md, "Order of trust"):
 *   1. the GPU: a captured launch's own records in a graph replay (graph.h), else CUDA events
 *      recorded around the operation's kernel launch (launch.h);
 *   2. the network: its proxy steps (a step the kernel still owes data to, or has yet to take);
 *   3. NCCL's kernel channels (KernelCh), which NCCL pairs with works through per-channel
 *      counters that drift on NCCL 2.29/2.30 (a send to self, a graph replay after eager work);
 *   4. sequence numbers: a later operation of the communicator completed (supersession).
 * A weaker kind is consulted only where every stronger one is silent.
 */
#ifndef WD_JUDGE_H
#define WD_JUDGE_H

#include <stdint.h>

#include "events/context.h"
#include "events/event.h"
#include "events/view.h"

/* Hot path, at a kernel channel's or a ProxyOp's stop: whether NCCL's kernel channels may
 * complete op now. Not where CUDA events can bracket its launch: their end event is the truth,
 * and a KernelCh paired with an earlier, finished work would complete a hung op. The watchdog
 * decides for those (wd_judge_kernel), falling back to the channels when no pair describes the
 * launch after all (a graph replay, a pair reused since). */
static inline int wd_judge_kch_final(const wd_event *op) {
  const wd_context *ctx = op->ctx;
  return ctx == NULL || !ctx->launches.on ||
         atomic_load_explicit(&op->gpu_key, memory_order_relaxed) == 0;
}

/* What one scan gathered about a root operation, beside the WD_GPU_* bits of the GPU's truth. */
typedef struct wd_judge_in {
  uint32_t gpu;         /* WD_GPU_KNOWN / WD_GPU_DONE / WD_GPU_ERROR from its CUDA events */
  uint32_t kch_expected, kch_seen, kch_done;
  uint32_t owed;        /* open proxy steps (or a half-posted ProxyOp) the kernel still needs */
  uint32_t kch_trust;   /* WD_KCH_* (event.h) */
  uint64_t quiet_ns;    /* since its last progress */
  int proxy_gone;       /* the thread that drove its proxy part has exited */
  int moved_on;         /* a communicator made since it started is called since it last moved */
} wd_judge_in;

/* The GPU's word on a root operation (the first witness), asked once per scan: WD_GPU_KNOWN,
 * DONE, ERROR from its captured launch's records (a replay's op) or its launch's CUDA events;
 * 0 where neither describes it. Stores when the GPU got there in op->wd_reached_ns. */
uint32_t wd_judge_gpu(wd_context *ctx, wd_event *op, uint64_t now);

/* The scan's verdict on the kernel: WD_GPU_* bits (DONE, PROXY_GONE, NET_ERROR added). */
uint32_t wd_judge_kernel(const wd_judge_in *in, uint64_t settle_ns);

/* Status of a root operation from a consistent copy (view.c): WD_OP_* but never STALLED. */
int wd_judge_status(int open, uint32_t gpu, uint64_t reached_ns);

typedef struct wd_judge_limits {
  uint64_t timeout_ns;   /* NCCL_WATCHDOG_TIMEOUT */
  uint64_t unreached_ns; /* NCCL_WATCHDOG_UNREACHED_TIMEOUT, 0 = never */
  uint64_t settle_ns;    /* two polls */
} wd_judge_limits;

/* The stall rule for a root view. */
int wd_judge_stalled(const wd_slot_view *v, uint64_t now, const wd_judge_limits *lim);

/* The stall rule for a captured launch's replay (its own records, whether or not NCCL reported
 * the replay): WD_GL_IN when inside one replay for longer than the timeout, WD_GL_WAIT when not
 * reached for longer than the unreached timeout, 0 otherwise; *for_ns: how long. */
int wd_judge_glaunch(const wd_glaunch *l, uint64_t now, const wd_judge_limits *lim, uint64_t *for_ns);

/* Whether the watchdog may stop holding a root operation: its kernel is done, or a later
 * operation completed and nothing stronger says this one's kernel still runs. */
int wd_judge_release(const wd_slot_view *v, uint64_t now, uint64_t settle_ns);

/* Whether an open child of root (bits rgpu, rwait) belongs to a finished operation and will
 * never be stopped by NCCL (CollNet and p2p-memcpy ProxyOps). */
int wd_judge_root_finished(uint32_t rgpu, uint32_t rwait, int superseded);

/* The strongest evidence behind a root op's status: "cudaEvents", "kernelChannels" (with its
 * open steps), or "ncclEvents" (its proxy events alone). */
const char *wd_judge_evidence_name(uint32_t gpu, uint32_t kch_expected);

/* Why an operation is stalled, for the stall line and the dump: "" for the plain rule. */
const char *wd_judge_why(uint32_t gpu);

#endif
