/* Consistent copies of live event slots (view.h). */
#include "events/view.h"

#include <string.h>

#include "events/judge.h"
#include "events/track.h"

const char *wd_op_status_name(int status) {
  switch (status) {
  case WD_OP_ENQUEUED: return "enqueued";
  case WD_OP_REACHED: return "reached";
  case WD_OP_GPU_DONE: return "gpu_done";
  case WD_OP_STALLED: return "stalled";
  case WD_OP_POSTING: return "posting";
  case WD_OP_ABANDONED: return "abandoned";
  default: return "unknown";
  }
}

int wd_slot_read(wd_event *ev, const wd_context *ctx, wd_slot_view *v) {
  uint64_t s1 = atomic_load_explicit(&ev->seq, memory_order_acquire);
  if ((s1 & 1) || !atomic_load_explicit(&ev->live, memory_order_acquire)) return 0;
  memset(v, 0, sizeof(*v));
  v->ev = ev;
  v->handle = wd_event_handle(ev);
  wd_event_read_start(ev, &v->snap.start);
  v->snap.last_ns = atomic_load_explicit(&ev->last_ns, memory_order_relaxed);
  v->snap.last_state = atomic_load_explicit(&ev->state, memory_order_relaxed);
  v->open = wd_event_open(ev) != 0;
  v->snap.stopped = !v->open;
  v->snap.is_root = atomic_load_explicit(&ev->kind, memory_order_relaxed) == WD_KIND_ROOT;
  v->snap.children_open = wd_event_children_live(ev);
  v->snap.children_seen = atomic_load_explicit(&ev->children_seen, memory_order_relaxed);
  v->snap.steps_done = atomic_load_explicit(&ev->steps_done, memory_order_relaxed);
  v->snap.kch_expected = atomic_load_explicit(&ev->kch_expected, memory_order_relaxed);
  v->snap.kch_done = atomic_load_explicit(&ev->kch_done, memory_order_relaxed);
  v->snap.last_trans = atomic_load_explicit(&ev->last_trans, memory_order_relaxed);
  v->snap.gpu_wait = atomic_load_explicit(&ev->wd_gpu_wait, memory_order_relaxed);
  v->snap.gpu = atomic_load_explicit(&ev->wd_gpu, memory_order_relaxed);
  v->snap.reached_ns = (v->snap.gpu & WD_GPU_KNOWN)
                           ? atomic_load_explicit(&ev->wd_reached_ns, memory_order_relaxed)
                           : atomic_load_explicit(&ev->reached_ns, memory_order_relaxed);
  v->order = atomic_load_explicit(&ev->order, memory_order_relaxed);
  v->root = atomic_load_explicit(&ev->root, memory_order_relaxed);
  if (v->root == ev) v->root = NULL;
  atomic_thread_fence(memory_order_acquire);
  if (atomic_load_explicit(&ev->seq, memory_order_relaxed) != s1) return 0;
  if (!v->snap.is_root) {
    /* Fields only a root's start sets: a child's slot keeps whatever an earlier root left. */
    v->snap.kch_expected = v->snap.kch_done = v->snap.gpu_wait = v->snap.gpu = 0;
    v->snap.reached_ns = 0;
    v->order = 0;
  }
  if (v->snap.is_root) {
    if (ctx) {
      uint64_t done = atomic_load_explicit(&ctx->completed_order, memory_order_relaxed);
      v->superseded = v->order < done;
      v->group_done = v->order <= done && done != 0;
    }
    v->snap.status = (uint8_t)wd_judge_status(v->open, v->snap.gpu, v->snap.reached_ns);
  }
  return 1;
}
