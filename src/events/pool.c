#include "events/pool.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "events/arena.h"
#include "events/blacklist.h"
#include "base/log.h"

/* Bounded MPMC queue of slot indices (Vyukov). Positions are 32-bit and compared by signed
 * difference, which stays correct across wrap-around because capacity << 2^31. */
static inline void wd_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static int wd_q_push(wd_pool *p, uint32_t v) {
  unsigned spins = 0;
  uint32_t pos = atomic_load_explicit(&p->qtail, memory_order_relaxed);
  for (;;) {
    wd_pool_cell *c = &p->cells[pos & p->qmask];
    uint32_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    /* Cells start zeroed, not numbered (their pages stay untouched until a communicator has
     * traffic): on the first lap a zero cell is one nobody used yet, i.e. numbered pos. A used
     * cell is never zero there (producers leave pos + 1, consumers pos + capacity). */
    if (seq == 0 && pos <= p->qmask) seq = pos;
    int32_t dif = (int32_t)(seq - pos);
    if (dif == 0) {
      if (atomic_compare_exchange_weak_explicit(&p->qtail, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed)) {
        atomic_store_explicit(&c->val, v, memory_order_relaxed);
        atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
        return 0;
      }
    } else if (dif < 0) {
      /* The queue has room for every slot, so this cell is being vacated by a consumer that
       * advanced qhead but has not yet published the cell: wait for it (a few instructions). */
      if (++spins > (1u << 24)) return -1;
      wd_cpu_relax();
      pos = atomic_load_explicit(&p->qtail, memory_order_relaxed);
    } else {
      pos = atomic_load_explicit(&p->qtail, memory_order_relaxed);
    }
  }
}

static int wd_q_pop(wd_pool *p, uint32_t *v) {
  unsigned spins = 0;
  uint32_t pos = atomic_load_explicit(&p->qhead, memory_order_relaxed);
  for (;;) {
    wd_pool_cell *c = &p->cells[pos & p->qmask];
    uint32_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    int32_t dif = (int32_t)(seq - (pos + 1));
    if (dif == 0) {
      if (atomic_compare_exchange_weak_explicit(&p->qhead, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed)) {
        *v = atomic_load_explicit(&c->val, memory_order_relaxed);
        atomic_store_explicit(&c->seq, pos + p->qmask + 1, memory_order_release);
        return 0;
      }
    } else if (dif < 0) {
      /* Empty, unless a producer advanced qtail and is about to publish this cell. */
      if (atomic_load_explicit(&p->qtail, memory_order_acquire) == pos || ++spins > (1u << 20))
        return -1;
      wd_cpu_relax();
      pos = atomic_load_explicit(&p->qhead, memory_order_relaxed);
    } else {
      pos = atomic_load_explicit(&p->qhead, memory_order_relaxed);
    }
  }
}

static int wd_pool_add_chunk(wd_pool *p) {
  uint32_t n = atomic_load_explicit(&p->nchunks, memory_order_relaxed);
  if (n >= p->max_chunks) {
    atomic_store_explicit(&p->short_why, WD_SHORT_MAX_EVENTS, memory_order_relaxed);
    return -1;
  }
  int why = WD_SHORT_NONE;
  wd_event *chunk = wd_arena_chunk_get(sizeof(wd_event) * WD_CHUNK_SLOTS, &why);
  if (chunk == NULL) {
    atomic_store_explicit(&p->short_why, why, memory_order_relaxed);
    return -1;
  }
  /* A reused chunk keeps its tags (bumped once more), so handles from its previous pool stay
   * stale; the rest of a slot is initialised when it is allocated. */
  for (uint32_t i = 0; i < WD_CHUNK_SLOTS; i++) {
    wd_event *ev = &chunk[i];
    atomic_store_explicit(&ev->live, 0, memory_order_relaxed);
    atomic_store_explicit(&ev->tag, atomic_load_explicit(&ev->tag, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    uint64_t seq = atomic_load_explicit(&ev->seq, memory_order_relaxed);
    atomic_store_explicit(&ev->seq, seq + (seq & 1), memory_order_relaxed);
    ev->parent = NULL;
    atomic_store_explicit(&ev->root, NULL, memory_order_relaxed);
    __atomic_store_n(&ev->pool, p, __ATOMIC_RELAXED);
    __atomic_store_n(&ev->ctx, p->ctx, __ATOMIC_RELAXED);
    __atomic_store_n(&ev->slot_id, p->id_base | (n * WD_CHUNK_SLOTS + i), __ATOMIC_RELAXED);
  }
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&p->chunks[n], chunk, memory_order_release);
  atomic_store_explicit(&p->nchunks, n + 1, memory_order_release);
  for (uint32_t i = 0; i < WD_CHUNK_SLOTS; i++) wd_q_push(p, n * WD_CHUNK_SLOTS + i);
  return 0;
}

int wd_pool_init(wd_pool *p, uint32_t initial, uint32_t max, uint32_t id_base,
                 struct wd_context *ctx, int owned) {
  memset(p, 0, sizeof(*p));
  atomic_store_explicit(&p->owner, owned ? 0 : WD_POOL_NO_OWNER, memory_order_relaxed);
  if (max < WD_CHUNK_SLOTS) max = WD_CHUNK_SLOTS;
  if (initial && initial < WD_CHUNK_SLOTS) initial = WD_CHUNK_SLOTS; /* 0: on the first event */
  if (initial > max) initial = max;
  p->max_chunks = (max + WD_CHUNK_SLOTS - 1) / WD_CHUNK_SLOTS;
  p->id_base = id_base;
  p->ctx = ctx;
  uint32_t qcap = 1;
  while (qcap < p->max_chunks * WD_CHUNK_SLOTS) qcap <<= 1;
  p->qmask = qcap - 1;
  p->chunks = calloc(p->max_chunks, sizeof(*p->chunks));
  /* Zero = not used yet (wd_q_push). Mapped, not calloc'ed: fresh anonymous pages cost nothing
   * until touched, whereas heap memory may be cleared (touched) by calloc. */
  void *cells = mmap(NULL, sizeof(wd_pool_cell) * qcap, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  p->cells = cells == MAP_FAILED ? NULL : cells;
  if (p->chunks == NULL || p->cells == NULL) {
    /* Left empty: the context's clean-up destroys the pool again (no double free). */
    free(p->chunks);
    p->chunks = NULL;
    if (p->cells) munmap(p->cells, sizeof(wd_pool_cell) * qcap);
    p->cells = NULL;
    return -1;
  }
  pthread_mutex_init(&p->grow_lock, NULL);
  uint32_t nch = (initial + WD_CHUNK_SLOTS - 1) / WD_CHUNK_SLOTS;
  for (uint32_t i = 0; i < nch; i++) {
    if (wd_pool_add_chunk(p) != 0) {
      if (i == 0) {
        wd_pool_destroy(p);
        return -1;
      }
      break;
    }
  }
  return 0;
}

void wd_pool_destroy(wd_pool *p) {
  if (p->chunks) {
    uint32_t n = atomic_load(&p->nchunks);
    /* Chunks go back to the arena, never to the system: a late call with a handle into them
     * still reads our memory, and finds a bumped tag. */
    wd_pool_retire(p);
    for (uint32_t i = 0; i < n; i++) wd_arena_chunk_put(atomic_load(&p->chunks[i]));
    free(p->chunks);
    p->chunks = NULL;
    pthread_mutex_destroy(&p->grow_lock);
  }
  if (p->cells) munmap(p->cells, sizeof(wd_pool_cell) * ((size_t)p->qmask + 1));
  p->cells = NULL;
}


/* When the queue is empty, one thread adds a chunk; the others drop their event rather than
 * wait. Only happens while the pool warms up or under a burst beyond what the watchdog reserved. */
static int wd_pool_grow_now(wd_pool *p) {
  if (pthread_mutex_trylock(&p->grow_lock) != 0) return 1; /* someone else is growing it */
  int rc = wd_pool_add_chunk(p);
  pthread_mutex_unlock(&p->grow_lock);
  return rc;
}

wd_event *wd_pool_alloc_slow(wd_pool *p) {
  uint32_t idx;
  for (int attempt = 0; attempt < 64; attempt++) {
    if (wd_q_pop(p, &idx) != 0) {
      int g = wd_pool_grow_now(p);
      if (g < 0) break;                /* at its maximum, or out of memory: drop the event */
      if (g > 0) wd_cpu_relax();      /* the grower is about to push a whole chunk */
      continue;
    }
    wd_event *ev = wd_pool_at(p, idx);
    /* A slot whose address is still referenced (detach pool) goes back to the end. */
    if (p->blacklist && wd_blacklist_contains(p->blacklist, (uintptr_t)ev)) {
      wd_q_push(p, idx);
      continue;
    }
    /* Only the thread that popped the slot writes seq, tag and live until it is freed again,
     * so plain atomic stores do (no read-modify-write on the hot path). */
    atomic_store_explicit(&ev->seq, atomic_load_explicit(&ev->seq, memory_order_relaxed) + 1,
                          memory_order_relaxed); /* odd: initialising */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&ev->live, 1, memory_order_relaxed);
    return ev;
  }
  atomic_fetch_add_explicit(&p->exhausted, 1, memory_order_relaxed);
  return NULL;
}

void wd_pool_free_slow(wd_pool *p, wd_event *ev) { wd_q_push(p, ev->slot_id & ~p->id_base); }

int wd_pool_claim(wd_pool *p, uint32_t tid) {
  uint32_t none = 0;
  return atomic_compare_exchange_strong_explicit(&p->owner, &none, tid, memory_order_relaxed,
                                                 memory_order_relaxed);
}

void wd_pool_retire(wd_pool *p) {
  uint32_t n = wd_pool_nslots(p);
  for (uint32_t i = 0; i < n; i++) {
    wd_event *ev = wd_pool_at(p, i);
    atomic_store_explicit(&ev->live, 0, memory_order_release);
    atomic_fetch_and_explicit(&ev->life, 0xffffffffu, memory_order_relaxed); /* not open */
    atomic_store_explicit(&ev->hold, 0, memory_order_relaxed); /* a free slot holds nothing */
    atomic_fetch_add_explicit(&ev->tag, 1, memory_order_release);
  }
}

void wd_pool_recycle(wd_pool *p) {
  uint32_t n = wd_pool_nslots(p);
  wd_pool_retire(p);
  for (uint32_t i = 0; i <= p->qmask; i++) {
    atomic_store_explicit(&p->cells[i].seq, i, memory_order_relaxed);
    atomic_store_explicit(&p->cells[i].val, 0, memory_order_relaxed);
  }
  atomic_store_explicit(&p->qhead, 0, memory_order_relaxed);
  atomic_store_explicit(&p->qtail, 0, memory_order_relaxed);
  for (uint32_t i = 0; i < n; i++) wd_q_push(p, i);
  /* The stack's slots are in the queue again: nobody keeps any. */
  atomic_store_explicit(&p->nstack, 0, memory_order_relaxed);
  if (atomic_load_explicit(&p->owner, memory_order_relaxed) != WD_POOL_NO_OWNER)
    atomic_store_explicit(&p->owner, 0, memory_order_relaxed);
  atomic_store_explicit(&p->exhausted, 0, memory_order_relaxed);
}

void wd_pool_reserve(wd_pool *p, uint32_t min_free) {
  if (wd_pool_nfree(p) >= min_free) return;
  pthread_mutex_lock(&p->grow_lock);
  if (wd_pool_add_chunk(p) == 0)
    WD_INFO("event pool grown to %u slots", wd_pool_nslots(p));
  pthread_mutex_unlock(&p->grow_lock);
}

uint32_t wd_pool_nfree(const wd_pool *p) {
  uint32_t head = atomic_load_explicit(&p->qhead, memory_order_acquire);
  uint32_t tail = atomic_load_explicit(&p->qtail, memory_order_acquire);
  return (int32_t)(tail - head) > 0 ? tail - head : 0;
}

uint32_t wd_pool_nslots(const wd_pool *p) {
  return atomic_load_explicit(&p->nchunks, memory_order_acquire) * WD_CHUNK_SLOTS;
}

wd_event *wd_pool_slot(const wd_pool *p, uint32_t idx) { return wd_pool_at(p, idx); }

int wd_pool_owns(const wd_pool *p, const void *ptr) {
  const wd_event *ev = wd_event_slot_of(ptr);
  return ev != NULL && __atomic_load_n(&ev->pool, __ATOMIC_RELAXED) == p;
}
