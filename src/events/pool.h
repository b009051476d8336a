/*
 * Chunked event pool. Free slots wait in a FIFO (a bounded lock-free queue), so a freed slot is
 * reused as late as possible: after every other free slot (the round-robin of the seed design).
 * Chunks come whole from the slot arena and go back to it, never to the system. Allocation never blocks; when the
 * queue is empty one thread grows the pool by a chunk (warm-up) and the watchdog grows it ahead
 * of need; when the configured maximum is reached the event is dropped and counted.
 */
#ifndef WD_POOL_H
#define WD_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "events/event.h"

#define WD_CHUNK_SLOTS 1024u
#define WD_POOL_STACK 14u      /* free slots an owner thread keeps at hand (wd_pool.stack) */
#define WD_POOL_NO_OWNER 0xffffffffu

struct wd_blacklist;

typedef struct wd_pool_cell {
  _Atomic uint32_t seq;
  _Atomic uint32_t val;
} wd_pool_cell;

typedef struct wd_pool {
  wd_event *_Atomic *chunks; /* max_chunks entries */
  _Atomic uint32_t nchunks;
  uint32_t max_chunks;
  uint32_t id_base; /* OR'ed into slot ids (WD_SLOT_DETACHED_BIT for the detach pool) */
  wd_pool_cell *cells;
  uint32_t qmask;
  _Alignas(64) _Atomic uint32_t qhead; /* consumers and producers on separate cache lines */
  _Alignas(64) _Atomic uint32_t qtail;
  /* The owner's stack: the thread that frees the pool's slots most (NCCL's proxy thread, for a
   * proxy pool) keeps the last few it freed and takes them back without the queue's atomics.
   * Only that thread touches the stack; the owner is claimed once (wd_pool_free) and given up
   * only by wd_pool_recycle. WD_POOL_NO_OWNER for a pool whose freed slots must wait their turn
   * (an operation pool: wd_track_start reads an API parent's freed slot). */
  _Alignas(64) _Atomic uint32_t owner;
  _Atomic uint32_t nstack;
  wd_event *_Atomic stack[WD_POOL_STACK];
  _Alignas(64) char qpad;
  pthread_mutex_t grow_lock;
  struct wd_context *ctx;
  struct wd_blacklist *blacklist; /* optional: addresses that must not be handed out */
  _Atomic uint64_t exhausted;     /* allocations refused */
  _Atomic int short_why;          /* WD_SHORT_*: why it last could not grow (arena.h) */
} wd_pool;

/* initial and max are slot counts (rounded up to whole chunks). owned: whether a thread may
 * keep a stack of its freed slots (wd_pool.owner). 0 or -1. */
int wd_pool_init(wd_pool *p, uint32_t initial, uint32_t max, uint32_t id_base,
                 struct wd_context *ctx, int owned);
void wd_pool_destroy(wd_pool *p);
/* The general allocation and free (wd_pool_alloc and wd_pool_free below try the common case
 * inline first). */
wd_event *wd_pool_alloc_slow(wd_pool *p);
void wd_pool_free_slow(wd_pool *p, wd_event *ev);
/* Retire every slot (stale handles stop matching) and make all of them free again, keeping the
 * chunks: a finalized communicator's pool is recycled for the next one, so memory NCCL may still
 * hold handles into is never freed while the plugin is loaded. No concurrent allocation. */
void wd_pool_recycle(wd_pool *p);
/* Only the first half of that: every slot stops matching its handles. Safe while a late call
 * is still inside one of the slots (the queue is left alone until wd_pool_recycle). */
void wd_pool_retire(wd_pool *p);
/* Add one chunk if fewer than min_free slots are free. Off the hot path. */
void wd_pool_reserve(wd_pool *p, uint32_t min_free);
uint32_t wd_pool_nslots(const wd_pool *p);
/* Free slots (approximate while other threads allocate). */
uint32_t wd_pool_nfree(const wd_pool *p);
/* Slot by index (0..nslots-1), for scans. */
wd_event *wd_pool_slot(const wd_pool *p, uint32_t idx);
/* Whether ptr is a slot of this pool (checked against the arena before anything is read). */
int wd_pool_owns(const wd_pool *p, const void *ptr);

/* Slot idx of a pool (a chunk that exists). */
static inline wd_event *wd_pool_at(const wd_pool *p, uint32_t idx) {
  wd_event *chunk = atomic_load_explicit(&p->chunks[idx / WD_CHUNK_SLOTS], memory_order_acquire);
  return &chunk[idx % WD_CHUNK_SLOTS];
}

/* A slot with live=1, refs=0, seq odd (the caller initialises it and calls wd_event_publish),
 * or NULL when the pool is at its maximum. Inline: the head cell is ready and nobody races for
 * it, in a pool without a blacklist (the queue is pool.c's; the slow path does everything). */
static inline __attribute__((always_inline)) wd_event *wd_pool_alloc(wd_pool *p, uint32_t tid) {
  uint32_t n = atomic_load_explicit(&p->nstack, memory_order_relaxed);
  if (atomic_load_explicit(&p->owner, memory_order_relaxed) == tid && n) {
    atomic_store_explicit(&p->nstack, n - 1, memory_order_relaxed);
    wd_event *ev = atomic_load_explicit(&p->stack[n - 1], memory_order_relaxed);
    if (ev == NULL) __builtin_unreachable(); /* the stack holds slots */
    atomic_store_explicit(&ev->seq, atomic_load_explicit(&ev->seq, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    atomic_store_explicit(&ev->live, 1, memory_order_release);
    return ev;
  }
  uint32_t pos = atomic_load_explicit(&p->qhead, memory_order_relaxed);
  wd_pool_cell *c = &p->cells[pos & p->qmask];
  if (__builtin_expect(p->blacklist != NULL ||
                           atomic_load_explicit(&c->seq, memory_order_acquire) != pos + 1 ||
                           !atomic_compare_exchange_strong_explicit(&p->qhead, &pos, pos + 1,
                                                                    memory_order_relaxed,
                                                                    memory_order_relaxed),
                       0))
    return wd_pool_alloc_slow(p);
  uint32_t idx = atomic_load_explicit(&c->val, memory_order_relaxed);
  atomic_store_explicit(&c->seq, pos + p->qmask + 1, memory_order_release);
  wd_event *ev = wd_pool_at(p, idx);
  if (ev == NULL) __builtin_unreachable(); /* a queued index names a slot: callers skip the test */
  /* Only the thread that popped the slot writes seq, tag and live until it is freed again. */
  atomic_store_explicit(&ev->seq, atomic_load_explicit(&ev->seq, memory_order_relaxed) + 1,
                        memory_order_relaxed); /* odd: initialising */
  atomic_store_explicit(&ev->live, 1, memory_order_release);
  return ev;
}

/* Whether thread tid keeps p's freed slots (claiming an unowned pool). */
int wd_pool_claim(wd_pool *p, uint32_t tid);

/* Return a slot whose refs reached zero; tid: the calling thread (wd_tid). */
static inline __attribute__((always_inline)) void wd_pool_free(wd_pool *p, wd_event *ev,
                                                            uint32_t tid) {
  atomic_store_explicit(&ev->live, 0, memory_order_release);
  atomic_store_explicit(&ev->tag, atomic_load_explicit(&ev->tag, memory_order_relaxed) + 1,
                        memory_order_release);
  uint32_t n = atomic_load_explicit(&p->nstack, memory_order_relaxed);
  uint32_t owner = atomic_load_explicit(&p->owner, memory_order_relaxed);
  if ((owner == tid || (__builtin_expect(owner == 0, 0) && wd_pool_claim(p, tid))) &&
      n < WD_POOL_STACK) {
    atomic_store_explicit(&p->stack[n], ev, memory_order_relaxed);
    atomic_store_explicit(&p->nstack, n + 1, memory_order_relaxed);
    return;
  }
  uint32_t pos = atomic_load_explicit(&p->qtail, memory_order_relaxed);
  wd_pool_cell *c = &p->cells[pos & p->qmask];
  uint32_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
  /* A never used cell is zero on the queue's first lap (pool.c, wd_q_push). */
  if (__builtin_expect((seq == pos || (seq == 0 && pos <= p->qmask)) &&
                           atomic_compare_exchange_strong_explicit(&p->qtail, &pos, pos + 1,
                                                                   memory_order_relaxed,
                                                                   memory_order_relaxed),
                       1)) {
    atomic_store_explicit(&c->val, ev->slot_id & ~p->id_base, memory_order_relaxed);
    atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
    return;
  }
  wd_pool_free_slow(p, ev);
}

/* Make a freshly initialised slot visible to readers (seq turns even). */
static inline void wd_event_publish(wd_event *ev) {
  atomic_store_explicit(&ev->seq, atomic_load_explicit(&ev->seq, memory_order_relaxed) + 1,
                        memory_order_release);
}

#endif
