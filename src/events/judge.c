/* The one judge of an operation's status (judge.h). */
#include "events/judge.h"

#include "events/graph.h"
#include "events/launch.h"

uint32_t wd_judge_gpu(wd_context *ctx, wd_event *op, uint64_t now) {
  unsigned type = wd_event_type(op);
  /* A CE collective and a Coll/P2p both hold the token of the launch that brackets them. */
  if (type != WD_T_CECOLL && type != WD_T_COLL && type != WD_T_P2P) return 0;
  uint64_t key = atomic_load_explicit(&op->gpu_key, memory_order_relaxed);
  if (key == 0) return 0;
  uint32_t gpu = 0;
  if (wd_is_graph_key(key)) {
    /* A replay of a captured launch: its graph's counter and event records. */
    wd_graph_truth t;
    wd_graph_truth_of(&ctx->graphs, wd_graph_key_slot(key), wd_graph_key_replay(key), &t);
    if (t.known) {
      gpu |= WD_GPU_KNOWN | (t.done ? WD_GPU_DONE : 0u);
      uint64_t was = atomic_load_explicit(&op->wd_reached_ns, memory_order_relaxed);
      atomic_store_explicit(&op->wd_reached_ns, t.reached ? (was ? was : now) : 0, memory_order_relaxed);
    }
    return gpu;
  }
  wd_gpu_truth t;
  wd_launch_truth(&ctx->launches, key, key, now, &t);
  if (t.known) {
    gpu |= WD_GPU_KNOWN | (t.done ? WD_GPU_DONE : 0u);
    atomic_store_explicit(&op->wd_reached_ns, t.reached_ns, memory_order_relaxed);
  }
  if (t.error) gpu |= WD_GPU_ERROR;
  return gpu;
}

uint32_t wd_judge_kernel(const wd_judge_in *in, uint64_t settle_ns) {
  uint32_t gpu = in->gpu & (WD_GPU_KNOWN | WD_GPU_DONE | WD_GPU_ERROR);
  if (!(gpu & WD_GPU_KNOWN)) {
    /* No CUDA pair describes the launch: the network's open steps outrank the kernel channels,
     * which are trusted only once every one of them stopped. CollNet announces no channels but
     * its KernelCh still fire: the ones seen count once they all stopped and two polls went by. */
    uint32_t want = in->kch_expected ? in->kch_expected : in->kch_seen;
    int settled = in->kch_expected || in->quiet_ns >= settle_ns;
    /* After a gather of several roots, the channels it used are silent for a while: the ones
     * that started decide, once all of them stopped and two polls went by (a hung op's started
     * channels never stop: every channel needs every peer). */
    if (in->kch_trust == WD_KCH_STARTED_ONLY && in->kch_seen < want)
      want = in->kch_seen, settled = in->quiet_ns >= settle_ns;
    if (want && in->kch_done >= want && in->owed == 0 && settled)
      gpu |= WD_GPU_DONE;
  }
  if (in->proxy_gone && !(gpu & WD_GPU_DONE)) {
    /* The proxy loop ended with the op in flight. A revoke joins it after the streams were
     * synchronised (init.cc, ncclCommRevoke): the end event completes. A network error ends it
     * with the kernels still waiting (proxy.cc, progress loop): the end event never does. */
    gpu |= (gpu & WD_GPU_KNOWN) ? WD_GPU_NET_ERROR : WD_GPU_PROXY_GONE;
    /* Without CUDA events the two differ in what the application does next: after a revoke or
     * a shrink it carries on with a new communicator (init.cc ncclCommShrink); after a network
     * error it waits on the kernel (PyTorch's watchdog would abort).
     * Only the first is abandoned; the second is timed out like any reached op. */
    if ((gpu & WD_GPU_PROXY_GONE) && in->moved_on) gpu |= WD_GPU_MOVED_ON;
  }
  return gpu;
}

int wd_judge_status(int open, uint32_t gpu, uint64_t reached_ns) {
  if (open) return WD_OP_POSTING;
  if (gpu & WD_GPU_DONE) return WD_OP_GPU_DONE;
  if ((gpu & WD_GPU_PROXY_GONE) && (gpu & WD_GPU_MOVED_ON)) return WD_OP_ABANDONED;
  if (reached_ns == 0 && !(gpu & WD_GPU_NET_ERROR)) return WD_OP_ENQUEUED;
  return WD_OP_REACHED;
}

/* When the op last moved: its own and its children's progress, or the moment the GPU got there
 * (an op can wait at the head of the stream for longer than the timeout and then run). */
static inline uint64_t wd_moved_ns(const wd_slot_view *v) {
  return v->snap.last_ns > v->snap.reached_ns ? v->snap.last_ns : v->snap.reached_ns;
}

int wd_judge_stalled(const wd_slot_view *v, uint64_t now, const wd_judge_limits *lim) {
  if (!v->snap.is_root || v->open) return 0;
  if (v->snap.start.flags & WD_F_DETACHED) return 0;
  uint32_t gpu = v->snap.gpu;
  if (gpu & WD_GPU_DONE) return 0;
  if ((gpu & WD_GPU_PROXY_GONE) && (gpu & WD_GPU_MOVED_ON)) return 0;
  uint64_t moved = wd_moved_ns(v);
  uint64_t idle = now > moved ? now - moved : 0;
  /* Nothing will ever move it again: no timeout to wait for, only the two polls in which an
   * ncclCommAbort would have ended the kernel. */
  if (gpu & WD_GPU_NET_ERROR) return idle >= lim->settle_ns;
  /* A later op of this communicator completed, and nothing says this one's kernel is still
   * running (no ground truth against it, no step the kernel needs still open). */
  if (v->superseded && !(gpu & WD_GPU_KNOWN) && v->snap.gpu_wait == 0) return 0;
  if (v->snap.reached_ns) return idle > lim->timeout_ns;
  /* Not reached: the GPU has not got there yet. Optional, much longer threshold. */
  return lim->unreached_ns && idle > lim->unreached_ns;
}

int wd_judge_glaunch(const wd_glaunch *l, uint64_t now, const wd_judge_limits *lim, uint64_t *for_ns) {
  *for_ns = l->w_since_ns && now > l->w_since_ns ? now - l->w_since_ns : 0;
  /* A new replay (counter moved) restarted w_since_ns: the timer never spans replays. */
  if (l->w_state == WD_GL_IN && *for_ns > lim->timeout_ns) return WD_GL_IN;
  if (l->w_state == WD_GL_WAIT && lim->unreached_ns && *for_ns > lim->unreached_ns) return WD_GL_WAIT;
  return 0;
}

int wd_judge_release(const wd_slot_view *v, uint64_t now, uint64_t settle_ns) {
  if (v->snap.gpu & WD_GPU_DONE) return 1;
  uint64_t quiet = now > v->snap.last_ns ? now - v->snap.last_ns : 0;
  /* A task of a symmetric plan that is not its head (NCCL 2.31, symmetric_sched.cc,
   * ncclProfilerStartTaskEvents): it announces no channel and never gets a KernelCh; it is done
   * when its head, of the same group, is. */
  if (v->group_done && v->snap.start.type == WD_T_COLL && v->snap.start.nChannels == 0 &&
      v->snap.children_seen == 0 && !(v->snap.gpu & WD_GPU_KNOWN) && quiet >= settle_ns)
    return 1;
  /* A replay keyed to a captured launch whose host node never ran in this process (a host that
   * replays without launching the graph): no ground truth after all, so done once its proxy
   * work is over and two polls went by, as an operation without CUDA events would be. */
  if ((v->snap.start.flags & WD_F_GRAPH) && v->snap.start.n > 0 &&
      (v->snap.start.type == WD_T_COLL || v->snap.start.type == WD_T_P2P) &&
      !(v->snap.gpu & WD_GPU_KNOWN) && v->snap.kch_expected == 0 && v->snap.children_open == 0 &&
      v->snap.gpu_wait == 0 && quiet >= settle_ns)
    return 1;
  return v->superseded && !(v->snap.gpu & (WD_GPU_KNOWN | WD_GPU_NET_ERROR)) &&
         v->snap.gpu_wait == 0 && quiet >= settle_ns;
}

int wd_judge_root_finished(uint32_t rgpu, uint32_t rwait, int superseded) {
  if (rgpu & WD_GPU_DONE) return 1;
  return !(rgpu & (WD_GPU_KNOWN | WD_GPU_NET_ERROR)) && rwait == 0 && superseded;
}

const char *wd_judge_why(uint32_t gpu) {
  if (gpu & WD_GPU_NET_ERROR)
    return "NCCL's proxy thread exited (a network error) while the kernel still waits: ";
  if (gpu & WD_GPU_PROXY_GONE)
    return "NCCL's proxy thread exited with it in flight and the application has not carried on "
           "with a new communicator (a network error): ";
  return "";
}

const char *wd_judge_evidence_name(uint32_t gpu, uint32_t kch_expected) {
  if (gpu & WD_GPU_KNOWN) return "cudaEvents";
  if (kch_expected || (gpu & WD_GPU_DONE)) return "kernelChannels";
  return "ncclEvents";
}
