/* Captured launches and their replays (graph.h). */
#include "events/graph.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <stdlib.h>
#include <string.h>

static _Atomic uint64_t wd_replay_count[WD_REPLAY_COUNTERS];
/* A counter's life: free, held by one communicator's graph, or that graph gone (its user
 * object's destructor ran) until the communicator's watchdog gives its slots back. */
enum { WD_CTR_FREE = 0, WD_CTR_HELD = 1, WD_CTR_GONE = 2 };
static _Atomic uint8_t wd_counter_state[WD_REPLAY_COUNTERS];
static _Atomic uint32_t wd_counter_hint;
/* User objects whose destructor has not run yet: the library must stay mapped while any is
 * (graph.h, wd_graphs_pending). */
static _Atomic long wd_user_objects;
/* Odd while a destructor is marking its counter gone: a watchdog pass that saw it change knows
 * a counter may have turned gone after it passed some of that graph's slots (wd_graphs_poll). */
static _Atomic uint64_t wd_gone_seq;

/* A free counter, or WD_REPLAY_COUNTERS when all are held. One pass from a rotating hint: at
 * capture, never in a replay. */
static uint32_t wd_counter_take(void) {
  uint32_t start = atomic_fetch_add_explicit(&wd_counter_hint, 1, memory_order_relaxed) % WD_REPLAY_COUNTERS;
  for (uint32_t k = 0; k < WD_REPLAY_COUNTERS; k++) {
    uint32_t i = (start + k) % WD_REPLAY_COUNTERS;
    uint8_t want = WD_CTR_FREE;
    if (atomic_compare_exchange_strong_explicit(&wd_counter_state[i], &want, WD_CTR_HELD, memory_order_acq_rel,
                                                memory_order_relaxed))
      return i;
  }
  return WD_REPLAY_COUNTERS;
}

/* The user object's destructor: the driver runs it (on a thread of its own, no CUDA call
 * allowed) when the last graph or executable graph holding it is destroyed. Marks the counter's
 * graph gone; its slots are given back by its communicator's watchdog at its next poll. */
static void wd_graph_gone(void *arg) {
  uintptr_t i = (uintptr_t)arg;
  atomic_fetch_add(&wd_gone_seq, 1);
  if (i < WD_REPLAY_COUNTERS) atomic_store(&wd_counter_state[i], WD_CTR_GONE);
  atomic_fetch_add(&wd_gone_seq, 1);
  atomic_fetch_sub_explicit(&wd_user_objects, 1, memory_order_acq_rel);
}

long wd_graphs_pending(void) { return atomic_load_explicit(&wd_user_objects, memory_order_acquire); }

long wd_graphs_pin_if_pending(void) {
  long n = wd_graphs_pending();
  Dl_info info;
  if (n > 0 && dladdr((void *)wd_graph_gone, &info) && info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
  return n;
}

/* Ties counter i's life to the graph being captured on stream: a user object moved into the
 * graph (NCCL does the same for its persistent plans: strongstream.cc, ncclCudaGraphAddDestructor).
 * 0 when the driver cannot (no user objects, no graph handle): its slots are then never given
 * back while the communicator lives. */
static int wd_graph_tie(const wd_cuda *cu, void *stream, uint32_t i) {
  if (!cu->user_object_create || !cu->capture_info) return 0;
  int st = 0;
  unsigned long long id = 0;
  void *graph = NULL, *obj = NULL;
  if (cu->capture_info(stream, &st, &id, &graph, NULL, NULL) != WD_CUDA_SUCCESS || graph == NULL) return 0;
  if (cu->user_object_create(&obj, (void *)(uintptr_t)i, wd_graph_gone, 1, WD_CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) !=
      WD_CUDA_SUCCESS)
    return 0;
  atomic_fetch_add_explicit(&wd_user_objects, 1, memory_order_acq_rel);
  if (cu->graph_retain_user_object(graph, obj, 1, WD_CU_GRAPH_USER_OBJECT_MOVE) != WD_CUDA_SUCCESS) {
    /* Not taken: our reference is the only one, and its release runs the destructor, which
     * would mark a counter still in use gone: held again after it. */
    cu->user_object_release(obj, 1);
    atomic_store_explicit(&wd_counter_state[i], WD_CTR_HELD, memory_order_release);
    return 0;
  }
  return 1;
}

/* The host node: runs on CUDA's callback thread at every replay, when the GPU gets there. One
 * relaxed increment, no lock, no CUDA call (CUDA forbids driver calls in a host function). */
static void wd_replay_tick(void *arg) {
  uintptr_t i = (uintptr_t)arg;
  if (i < WD_REPLAY_COUNTERS) atomic_fetch_add_explicit(&wd_replay_count[i], 1, memory_order_release);
}

uint64_t wd_graph_counter(uint32_t index) {
  return index < WD_REPLAY_COUNTERS ? atomic_load_explicit(&wd_replay_count[index], memory_order_acquire) : 0;
}

/* Slots a communicator may have touched: the ones handed out and the one a failed capture left
 * its CUDA events in. The rest are pages never touched: mapped, not calloc'ed, so a communicator
 * that captures nothing keeps none of them resident. */
static uint32_t wd_graphs_touched(const wd_graphs *g) {
  uint32_t used = atomic_load_explicit(&g->used, memory_order_relaxed);
  return used < g->cap ? used + 1 : g->cap;
}

int wd_graphs_alloc(wd_graphs *g, uint32_t cap) {
  memset(g, 0, sizeof(*g));
  if (cap == 0) return 0;
  void *m = mmap(NULL, (size_t)cap * sizeof(*g->slot), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return -1;
  g->slot = m;
  g->cap = cap;
  return 0;
}

int wd_graphs_open(wd_graphs *g) {
  g->on = 0;
  /* A recycled communicator's slots: the ones its last life touched (wd_graphs_close destroyed
   * their events). */
  if (g->slot) memset(g->slot, 0, (size_t)wd_graphs_touched(g) * sizeof(*g->slot));
  atomic_store(&g->used, 0);
  atomic_store(&g->unfollowed, 0);
  atomic_store(&g->nfree, 0);
  atomic_store(&g->full, 0);
  g->given_back = 0;
  atomic_store(&g->tied, 0);
  g->full_said = 0;
  g->cap_id = 0;
  g->cap_stream = NULL;
  g->cap_graph = g->cap_pos = g->cap_counter = g->ngraphs = 0;
  g->api_group = 0;
  g->api_calls = 0;
  if (g->slot == NULL) return 0;
  const wd_cuda *cu = wd_cuda_get();
  void *cur = NULL;
  if (!cu || !cu->event_record_flags || !cu->launch_host_func) return 0;
  if (cu->ctx_get_current(&cur) != WD_CUDA_SUCCESS || cur == NULL) return 0;
  g->cu = cu;
  g->cu_ctx = cur;
  g->on = 1;
  return 1;
}

void wd_graphs_close(wd_graphs *g) {
  const wd_cuda *cu = g->on ? g->cu : NULL;
  g->on = 0;
  if (!cu) return;
  int pushed = cu->ctx_push(g->cu_ctx) == WD_CUDA_SUCCESS;
  for (uint32_t i = 0, n = wd_graphs_touched(g); i < n; i++) {
    wd_glaunch *s = &g->slot[i];
    /* A destroyed graph's counter is free again; a live graph's stays held (its host node
     * still counts its replays) until the process ends. */
    uint8_t want = WD_CTR_GONE;
    if (s->counter < WD_REPLAY_COUNTERS)
      atomic_compare_exchange_strong_explicit(&wd_counter_state[s->counter], &want, WD_CTR_FREE,
                                              memory_order_acq_rel, memory_order_relaxed);
    if (s->start) cu->event_destroy(s->start);
    if (s->end) cu->event_destroy(s->end);
    s->start = s->end = NULL;
  }
  void *popped;
  if (pushed) cu->ctx_pop(&popped);
}

void wd_graphs_free(wd_graphs *g) {
  wd_graphs_close(g);
  if (g->slot) munmap(g->slot, (size_t)g->cap * sizeof(*g->slot));
  g->slot = NULL;
  g->cap = 0;
}

void wd_graph_note_api(wd_graphs *g, uint64_t group, uint8_t func, uint8_t dtype, uint64_t count,
                       int32_t root) {
  if (!g->on) return;
  if (group != g->api_group) {
    g->api_group = group;
    g->api_calls = 0;
  }
  if (g->api_calls < UINT16_MAX) g->api_calls++;
  g->api_func = func;
  g->api_dtype = dtype;
  g->api_count = count;
  g->api_root = root;
}

/* The launching thread (one per communicator at a time: NCCL launches a communicator's plans in
 * order, group.cc doLaunches). Every call here is legal during capture; relaxed mode so that
 * none can invalidate a capture of the application's in global mode. */
uint64_t wd_graph_capture_begin(wd_graphs *g, void *stream, uint64_t group) {
  if (!g->on) return 0;
  const wd_cuda *cu = g->cu;
  uint32_t used = atomic_load_explicit(&g->used, memory_order_relaxed), i = used;
  /* A slot a destroyed graph gave back first (its events are reused: that graph records
   * nothing any more), else the next never used. */
  if (atomic_load_explicit(&g->nfree, memory_order_acquire) > 0)
    for (uint32_t k = 0; k < used && i == used; k++) {
      uint32_t want = WD_SLOT_FREE;
      if (atomic_compare_exchange_strong_explicit(&g->slot[k].armed, &want, WD_SLOT_CLAIMED, memory_order_acq_rel,
                                                  memory_order_relaxed)) {
        i = k;
        atomic_fetch_sub_explicit(&g->nfree, 1, memory_order_relaxed);
      }
    }
  if (i >= g->cap) {
    atomic_fetch_add_explicit(&g->unfollowed, 1, memory_order_relaxed);
    atomic_store_explicit(&g->full, 1, memory_order_relaxed);
    return 0;
  }
  int mode = WD_CU_CAPTURE_MODE_RELAXED;
  cu->capture_mode_exchange(&mode);
  uint64_t token = 0;
  wd_glaunch *s = &g->slot[i];
  unsigned long long id = 0;
  int st = 0;
  int have_id = cu->capture_info && cu->capture_info(stream, &st, &id, NULL, NULL, NULL) == WD_CUDA_SUCCESS &&
                st == WD_CU_CAPTURE_ACTIVE;
  /* A new graph: another capture id, or without ids another stream or an eager launch since. */
  int new_graph = g->ngraphs == 0 || (have_id ? id != g->cap_id : stream != g->cap_stream);
  /* Without capture ids every launch counts its own replays: a graph it shares with the
   * previous launch cannot be proven. */
  int own_counter = new_graph || !have_id;
  uint32_t counter = g->cap_counter;
  if ((s->start == NULL && cu->event_create(&s->start, WD_CU_EVENT_DISABLE_TIMING) != WD_CUDA_SUCCESS) ||
      (s->end == NULL && cu->event_create(&s->end, WD_CU_EVENT_DISABLE_TIMING) != WD_CUDA_SUCCESS))
    goto fail;
  if (own_counter) {
    counter = wd_counter_take();
    if (counter >= WD_REPLAY_COUNTERS) goto fail;
    atomic_store_explicit(&wd_replay_count[counter], 0, memory_order_relaxed);
    if (cu->launch_host_func(stream, wd_replay_tick, (void *)(uintptr_t)counter) != WD_CUDA_SUCCESS) {
      atomic_store_explicit(&wd_counter_state[counter], WD_CTR_FREE, memory_order_release);
      goto fail;
    }
    if (new_graph && have_id && wd_graph_tie(cu, stream, counter))
      atomic_fetch_add_explicit(&g->tied, 1, memory_order_relaxed);
  }
  if (new_graph) {
    g->ngraphs++;
    g->cap_graph = g->ngraphs;
    g->cap_pos = 0;
  }
  g->cap_stream = stream;
  g->cap_id = id;
  g->cap_counter = counter;
  if (cu->event_record_flags(s->start, stream, WD_CU_EVENT_RECORD_EXTERNAL) != WD_CUDA_SUCCESS) goto fail;
  s->counter = counter;
  s->graph = g->cap_graph;
  s->pos = ++g->cap_pos;
  int api = g->api_group == group && group != 0;
  s->func = api ? g->api_func : 0;
  s->dtype = api ? g->api_dtype : 0;
  s->ncalls = api ? g->api_calls : 0;
  s->count = api ? g->api_count : 0;
  s->root = api ? g->api_root : -1;
  s->gkey = group;
  s->w_replay = 0;
  s->w_state = WD_GL_IDLE;
  s->w_since_ns = 0;
  s->w_error = 0;
  s->stream = stream;
  atomic_store_explicit(&s->armed, 1, memory_order_release);
  if (i == used) atomic_store_explicit(&g->used, i + 1, memory_order_release);
  token = (uint64_t)i + 1;
  goto out;
fail:
  if (i < used) { /* a slot given back: back to the free ones */
    atomic_store_explicit(&s->armed, WD_SLOT_FREE, memory_order_release);
    atomic_fetch_add_explicit(&g->nfree, 1, memory_order_relaxed);
  }
  atomic_fetch_add_explicit(&g->unfollowed, 1, memory_order_relaxed);
out:
  cu->capture_mode_exchange(&mode);
  return token;
}

void wd_graph_capture_end(wd_graphs *g, uint64_t token) {
  if (!g->on || token == 0 || token > g->cap) return;
  wd_glaunch *s = &g->slot[token - 1];
  if (atomic_load_explicit(&s->armed, memory_order_relaxed) != 1) return;
  const wd_cuda *cu = g->cu;
  int mode = WD_CU_CAPTURE_MODE_RELAXED;
  cu->capture_mode_exchange(&mode);
  if (cu->event_record_flags(s->end, s->stream, WD_CU_EVENT_RECORD_EXTERNAL) == WD_CUDA_SUCCESS)
    atomic_store_explicit(&s->armed, 2, memory_order_release);
  cu->capture_mode_exchange(&mode);
}

int wd_graph_lookup(const wd_graphs *g, uint64_t group) {
  if (!g->on || group == 0) return -1;
  uint32_t n = atomic_load_explicit(&g->used, memory_order_acquire);
  for (uint32_t i = n; i-- > 0;)
    if (g->slot[i].gkey == group) return (int)i;
  return -1;
}

/* 1 complete, 0 not yet, -1 an error. */
static int wd_gq(const wd_cuda *cu, void *ev) {
  int rc = cu->event_query(ev);
  return rc == WD_CUDA_SUCCESS ? 1 : rc == WD_CUDA_NOT_READY ? 0 : -1;
}

void wd_graph_truth_of(wd_graphs *g, uint32_t i, uint64_t r, wd_graph_truth *t) {
  memset(t, 0, sizeof(*t));
  if (!g->on || r == 0 || i >= atomic_load_explicit(&g->used, memory_order_acquire)) return;
  wd_glaunch *s = &g->slot[i];
  if (atomic_load_explicit(&s->armed, memory_order_acquire) != 2) return;
  uint64_t c = wd_graph_counter(s->counter);
  /* Until its host node has run once, nothing says this process's replays are the graph's. */
  if (c == 0) return;
  t->known = 1;
  if (c > r) { /* a later replay got past the host node: this one is over (stream order) */
    t->reached = t->done = 1;
    return;
  }
  if (c < r) return; /* the GPU has not begun this replay */
  /* The watchdog's state of this replay, from its last poll (wd_graphs_poll). */
  if (s->w_replay == c) {
    t->reached = s->w_state == WD_GL_IN || s->w_state == WD_GL_PASSED;
    t->done = s->w_state == WD_GL_PASSED;
  }
}

/* Gives back the slots whose graph's counter is gone; counts them. A slot already given back by
 * an earlier pass whose counter is not free yet counts too, so that the caller settles it. */
static uint32_t wd_graphs_mark_gone(wd_graphs *g, uint32_t n) {
  uint32_t gone = 0;
  for (uint32_t i = 0; i < n; i++) {
    wd_glaunch *s = &g->slot[i];
    uint32_t armed = atomic_load_explicit(&s->armed, memory_order_acquire);
    if (armed == WD_SLOT_GONE && s->counter < WD_REPLAY_COUNTERS) gone++;
    if ((armed != 1 && armed != 2) || s->counter >= WD_REPLAY_COUNTERS ||
        atomic_load(&wd_counter_state[s->counter]) != WD_CTR_GONE)
      continue;
    s->w_state = WD_GL_IDLE;
    atomic_store_explicit(&s->armed, WD_SLOT_GONE, memory_order_release);
    g->given_back++;
    gone++;
  }
  return gone;
}

uint32_t wd_graphs_poll(wd_graphs *g, uint64_t now) {
  if (!g->on) return 0;
  uint32_t n = atomic_load_explicit(&g->used, memory_order_acquire);
  if (n == 0) return 0;
  /* Destroyed graphs first. A counter is free again only once every slot of its graph was given
   * back, and a destructor that ran while a pass was under way may have found that pass past
   * some of its graph's slots: such a pass is done again (a few times at most), and a pass still
   * overtaken gives the slots back but frees no counter until a later poll. */
  uint32_t gone = 0;
  int clean = 0;
  for (int tries = 0; tries < 4 && !clean; tries++) {
    uint64_t s0 = atomic_load(&wd_gone_seq);
    n = atomic_load_explicit(&g->used, memory_order_acquire);
    gone = wd_graphs_mark_gone(g, n);
    clean = !(s0 & 1) && atomic_load(&wd_gone_seq) == s0;
  }
  if (!clean) gone = 0;
  for (uint32_t i = 0; gone && i < n; i++) {
    wd_glaunch *s = &g->slot[i];
    if (atomic_load_explicit(&s->armed, memory_order_acquire) != WD_SLOT_GONE || s->counter >= WD_REPLAY_COUNTERS)
      continue;
    uint8_t want = WD_CTR_GONE;
    atomic_compare_exchange_strong_explicit(&wd_counter_state[s->counter], &want, WD_CTR_FREE, memory_order_acq_rel,
                                            memory_order_relaxed);
    s->counter = WD_REPLAY_COUNTERS;
  }
  const wd_cuda *cu = g->cu;
  int pushed = cu->ctx_push(g->cu_ctx) == WD_CUDA_SUCCESS;
  for (uint32_t i = 0; i < n; i++) {
    wd_glaunch *s = &g->slot[i];
    if (atomic_load_explicit(&s->armed, memory_order_acquire) != 2) continue;
    uint64_t c = wd_graph_counter(s->counter);
    uint8_t state;
    if (c == 0) {
      state = WD_GL_IDLE; /* never replayed */
    } else {
      int en = wd_gq(cu, s->end), st = en == 1 ? 1 : wd_gq(cu, s->start);
      if (en < 0 || st < 0) {
        s->w_error = 1;
        continue;
      }
      /* Both pending after in progress: the host launched the graph again and its records now
       * describe the next replay; while no later replay began (the counter), the GPU is still in
       * this one, in this launch or after it. */
      int still_in = s->w_state == WD_GL_IN && c == s->w_replay;
      if (en == 1) state = WD_GL_PASSED;
      else state = st == 1 || still_in ? WD_GL_IN : WD_GL_WAIT;
    }
    if (state != s->w_state || c != s->w_replay) s->w_since_ns = now;
    s->w_state = state;
    s->w_replay = c;
  }
  void *popped;
  if (pushed) cu->ctx_pop(&popped);
  return gone;
}

void wd_graphs_settle(wd_graphs *g) {
  uint32_t n = g->slot ? atomic_load_explicit(&g->used, memory_order_acquire) : 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t want = WD_SLOT_GONE;
    if (atomic_compare_exchange_strong_explicit(&g->slot[i].armed, &want, WD_SLOT_FREE, memory_order_acq_rel,
                                                memory_order_relaxed))
      atomic_fetch_add_explicit(&g->nfree, 1, memory_order_relaxed);
  }
}
