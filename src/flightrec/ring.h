/*
 * Lock-free overwrite ring of wd_record. Any number of writers; a writer takes a ticket with one
 * fetch-add and publishes the slot with a release store of its turn word. A reader copies a record
 * and re-checks the turn to tell a torn record from a complete one.
 */
#ifndef WD_RING_H
#define WD_RING_H

#include <stdatomic.h>
#include <stdint.h>

#include "flightrec/record.h"

/* The head alone on its cache line: the operation ring and the proxy ring of one communicator
 * are written by different threads and must not share one. */
typedef struct wd_ring {
  _Alignas(64) _Atomic uint64_t head; /* next ticket */
  uint32_t mask;                      /* capacity - 1, capacity a power of two */
  uint32_t external;                  /* recs belong to a mapping the ring does not free */
  /* Records backed by memory, a power of two: the capacity for a ring in memory; for a ring in a
   * ring file, the part of the file allocated so far (the watchdog allocates the rest once the
   * communicator carries traffic). Until then records wrap within that part: the newest are
   * kept, and no store lands in a hole, which a full /dev/shm would answer with SIGBUS. */
  _Atomic uint32_t ready;
  uint32_t ready0; /* ready when the ring was made: what tickets before ready_from wrapped in */
  /* The head when ready last grew: tickets from here on use the grown ready. 0 for a ring backed
   * from the start. */
  _Atomic uint64_t ready_from;
  wd_record *recs;
} wd_ring;

/* capacity is rounded up to a power of two (minimum 16). Returns 0, or -1 when out of memory. */
int wd_ring_init(wd_ring *r, uint32_t capacity);
/* The same over memory the caller owns (a new ring file's mapping, zero-filled), capacity
 * already a power of two, of which the first `ready` records are backed (wd_ring_ready). */
void wd_ring_init_at(wd_ring *r, uint32_t capacity, wd_record *mem, uint32_t ready);
/* More of a ring's records are backed now (never fewer). */
static inline void wd_ring_ready(wd_ring *r, uint32_t ready) {
  if (ready > r->mask + 1) ready = r->mask + 1;
  while (ready & (ready - 1)) ready &= ready - 1; /* a power of two: it is a mask */
  if (ready > atomic_load_explicit(&r->ready, memory_order_relaxed)) {
    atomic_store_explicit(&r->ready_from, atomic_load_explicit(&r->head, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&r->ready, ready, memory_order_release);
  }
}
/* The capacity wd_ring_init gives for a requested one. */
uint32_t wd_ring_round(uint32_t capacity);
void wd_ring_destroy(wd_ring *r);

/* Forget every record (no concurrent writer). */
void wd_ring_clear(wd_ring *r);

/* Append a copy of *rec (its turn field is ignored). Never blocks, never allocates. */
void wd_ring_write(wd_ring *r, const wd_record *rec);

/* The hot path's append, for a writer that produces the words one by one: wd_ring_begin takes a
 * ticket and marks the slot (odd turn), wd_ring_word stores words 1 to WD_RECORD_WORDS - 2 in any
 * order, wd_ring_end the last one's low half with the check (record.h) and publishes (even turn).
 * Payload words are stored with atomics: the turn word orders them, and readers copy while
 * writers may be inside the slot (the turn check discards such copies). Release stores order the
 * odd turn before the payload, so a reader that sees new payload sees the odd turn (plain stores
 * on x86; a fence here is not something TSan models). */
typedef struct wd_ring_w {
  uint64_t *dst;
  uint64_t t;
  uint64_t h;
} wd_ring_w;
static inline __attribute__((always_inline)) wd_ring_w wd_ring_begin(wd_ring *r) {
  wd_ring_w w;
  w.t = atomic_fetch_add_explicit(&r->head, 1, memory_order_relaxed);
  /* Within the backed part (all of it, once a ring file's ring is allocated whole). */
  uint32_t idx = (uint32_t)w.t & (atomic_load_explicit(&r->ready, memory_order_relaxed) - 1);
  w.dst = (uint64_t *)&r->recs[idx]; /* ring memory is only accessed as words */
  w.h = w.t;
  __atomic_store_n(&w.dst[0], 2 * w.t + 1, __ATOMIC_RELAXED);
  return w;
}
static inline __attribute__((always_inline)) void wd_ring_word(wd_ring_w *w, unsigned i, uint64_t v) {
  w->h += v;
  __atomic_store_n(&w->dst[i], v, __ATOMIC_RELEASE);
}
static inline __attribute__((always_inline)) void wd_ring_end(wd_ring_w *w, uint32_t last) {
  uint64_t check = wd_record_check_of(w->h + last);
  __atomic_store_n(&w->dst[WD_RECORD_WORDS - 1], last | (check << 32), __ATOMIC_RELEASE);
  __atomic_store_n(&w->dst[0], 2 * w->t + 2, __ATOMIC_RELEASE);
}

/* The same append from a record held as words (v[0], the turn, is ignored), inlined into the
 * callers so the words go from registers to the ring. */
static inline void wd_ring_put(wd_ring *r, const uint64_t *v) {
  wd_ring_w w = wd_ring_begin(r);
  /* Callers fill v with an unrolled copy loop, which cppcheck does not follow. */
#pragma GCC unroll 16
  // cppcheck-suppress uninitvar
  for (unsigned i = 1; i < WD_RECORD_WORDS - 1; i++) wd_ring_word(&w, i, v[i]);
  wd_ring_end(&w, (uint32_t)v[WD_RECORD_WORDS - 1]);
}

/* Copy out up to max complete records, oldest first, into out. Returns the number copied;
 * *torn receives the number of records skipped because a writer was inside them and *lost the
 * number of records overwritten before they could be read (older than the ring, or lapped by a
 * writer during the copy). A copy the writers lap jumps ahead of them, so a busy ring loses
 * its oldest records rather than its newest. Safe while writers run. */
uint32_t wd_ring_snapshot(const wd_ring *r, wd_record *out, uint32_t max, uint32_t *torn,
                          uint64_t *lost);

/* Copy out up to max complete records written since *cursor (a ticket), oldest first, and move
 * *cursor past what was read: a reader that follows the ring from poll to poll (telemetry). A
 * record a writer is still inside near the head ends the copy (the next call reads it); *missed
 * receives the records since *cursor that are gone (overwritten, or torn beyond repair). */
uint32_t wd_ring_read_since(const wd_ring *r, uint64_t *cursor, wd_record *out, uint32_t max,
                            uint64_t *missed);

static inline uint32_t wd_ring_capacity(const wd_ring *r) { return r->mask + 1; }

#endif
