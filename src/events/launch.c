/* CUDA events around NCCL's kernel launches (launch.h). */
#include "events/launch.h"

#include <string.h>


static inline uint32_t wd_gmap_index(uint64_t key) {
  key ^= key >> 29;
  key *= 0xbf58476d1ce4e5b9ull;
  return (uint32_t)(key >> 40) % WD_GMAP_SLOTS;
}

int wd_launches_open(wd_launches *l) {
  memset(l, 0, sizeof(*l));
  const wd_cuda *cu = wd_cuda_get();
  if (!cu) return 0;
  void *cur = NULL;
  if (cu->ctx_get_current(&cur) != WD_CUDA_SUCCESS || cur == NULL) return 0;
  uint32_t made = 0;
  for (; made < WD_LAUNCH_SLOTS; made++) {
    wd_launch *s = &l->slot[made];
    if (cu->event_create(&s->start, WD_CU_EVENT_DISABLE_TIMING) != WD_CUDA_SUCCESS) break;
    if (cu->event_create(&s->end, WD_CU_EVENT_DISABLE_TIMING) != WD_CUDA_SUCCESS) {
      cu->event_destroy(s->start);
      s->start = NULL;
      break;
    }
  }
  if (made < WD_LAUNCH_SLOTS) {
    for (uint32_t i = 0; i < made; i++) {
      cu->event_destroy(l->slot[i].start);
      cu->event_destroy(l->slot[i].end);
    }
    memset(l->slot, 0, sizeof(l->slot));
    return 0;
  }
  l->cu = cu;
  l->cu_ctx = cur;
  l->on = 1;
  return 1;
}

void wd_launches_close(wd_launches *l) {
  const wd_cuda *cu = l->on ? l->cu : NULL;
  l->on = 0;
  if (!cu) return;
  /* Finalize may run on a thread whose current context is another one (abort paths). */
  int pushed = cu->ctx_push(l->cu_ctx) == WD_CUDA_SUCCESS;
  for (uint32_t i = 0; i < WD_LAUNCH_SLOTS; i++) {
    if (l->slot[i].start) cu->event_destroy(l->slot[i].start);
    if (l->slot[i].end) cu->event_destroy(l->slot[i].end);
    l->slot[i].start = l->slot[i].end = NULL;
  }
  void *popped;
  if (pushed) cu->ctx_pop(&popped);
}

uint64_t wd_launch_begin(wd_launches *l, void *stream, uint64_t key) {
  if (!l->on) return 0;
  const wd_cuda *cu = l->cu;
  int st = -1;
  /* Never add a node to a graph being captured: the launch is only recorded, not run. */
  if (cu->stream_is_capturing(stream, &st) != WD_CUDA_SUCCESS || st != WD_CU_CAPTURE_NONE) {
    atomic_fetch_add_explicit(&l->skipped, 1, memory_order_relaxed);
    return st == WD_CU_CAPTURE_ACTIVE ? WD_LAUNCH_CAPTURING : 0;
  }
  uint64_t token = atomic_fetch_add_explicit(&l->next, 1, memory_order_relaxed) + 1;
  wd_launch *s = &l->slot[token % WD_LAUNCH_SLOTS];
  atomic_store_explicit(&s->token, 0, memory_order_release);
  s->stream = stream;
  int rc = cu->event_record(s->start, stream);
  if (rc != WD_CUDA_SUCCESS) {
    atomic_store_explicit(&l->last_error, rc, memory_order_relaxed);
    atomic_fetch_add_explicit(&l->skipped, 1, memory_order_relaxed);
    return 0;
  }
  atomic_store_explicit(&s->phase, 1, memory_order_relaxed);
  atomic_store_explicit(&s->token, token, memory_order_release);
  if (key) {
    wd_gmap *g = &l->gmap[wd_gmap_index(key)];
    if (atomic_load_explicit(&g->key, memory_order_acquire) == key) {
      atomic_store_explicit(&g->last, token, memory_order_release);
    } else {
      atomic_store_explicit(&g->key, 0, memory_order_release);
      atomic_store_explicit(&g->first, token, memory_order_relaxed);
      atomic_store_explicit(&g->last, token, memory_order_relaxed);
      atomic_store_explicit(&g->key, key, memory_order_release);
    }
  }
  return token;
}

void wd_launch_end(wd_launches *l, uint64_t token) {
  if (!l->on || token == 0) return;
  wd_launch *s = &l->slot[token % WD_LAUNCH_SLOTS];
  if (atomic_load_explicit(&s->token, memory_order_acquire) != token) return;
  int rc = l->cu->event_record(s->end, s->stream);
  if (rc == WD_CUDA_SUCCESS) atomic_store_explicit(&s->phase, 2, memory_order_release);
  else atomic_store_explicit(&l->last_error, rc, memory_order_relaxed);
}

int wd_launch_lookup(const wd_launches *l, uint64_t key, uint64_t *first, uint64_t *last) {
  if (!l->on || key == 0) return 0;
  const wd_gmap *g = &l->gmap[wd_gmap_index(key)];
  if (atomic_load_explicit(&g->key, memory_order_acquire) != key) return 0;
  *first = atomic_load_explicit(&g->first, memory_order_acquire);
  *last = atomic_load_explicit(&g->last, memory_order_acquire);
  return atomic_load_explicit(&g->key, memory_order_acquire) == key && *first && *last;
}

/* 1 complete, 0 not yet, -1 cannot tell (re-recorded meanwhile, or an error in *err). */
static int wd_query(const wd_cuda *cu, wd_launch *s, uint64_t token, int end, int *err) {
  if (atomic_load_explicit(&s->token, memory_order_acquire) != token) return -1;
  if (end && atomic_load_explicit(&s->phase, memory_order_acquire) < 2) return 0;
  int rc = cu->event_query(end ? s->end : s->start);
  if (atomic_load_explicit(&s->token, memory_order_acquire) != token) return -1;
  if (rc == WD_CUDA_SUCCESS) return 1;
  if (rc == WD_CUDA_NOT_READY) return 0;
  *err = rc;
  return -1;
}

void wd_launch_truth(wd_launches *l, uint64_t first, uint64_t last, uint64_t now, wd_gpu_truth *t) {
  memset(t, 0, sizeof(*t));
  const wd_cuda *cu = l->on ? l->cu : NULL;
  if (!cu || !first || !last) return;
  wd_launch *fs = &l->slot[first % WD_LAUNCH_SLOTS], *ls = &l->slot[last % WD_LAUNCH_SLOTS];
  int pushed = cu->ctx_push(l->cu_ctx) == WD_CUDA_SUCCESS;
  int err = 0;
  int reached = wd_query(cu, fs, first, 0, &err);
  int done = reached == 1 ? wd_query(cu, ls, last, 1, &err) : 0;
  void *popped;
  if (pushed) cu->ctx_pop(&popped);
  if (err) {
    t->error = err;
    atomic_store_explicit(&l->last_error, err, memory_order_relaxed);
  }
  if (reached < 0 || done < 0) return;
  t->known = 1;
  t->reached = reached == 1;
  t->done = done == 1;
  if (t->reached) {
    if (fs->seen != first) {
      fs->seen = first;
      fs->reached_ns = now;
    }
    t->reached_ns = fs->reached_ns;
  }
}

void wd_launch_query_thread_init(void) {
  const wd_cuda *cu = wd_cuda_get();
  int mode = WD_CU_CAPTURE_MODE_RELAXED;
  if (cu) cu->capture_mode_exchange(&mode);
}
