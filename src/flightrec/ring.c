/* Overwrite ring with per-slot turn words (the folly/printk scheme, see docs/architecture.md). */
#include "flightrec/ring.h"

#include <stdlib.h>
#include <string.h>

uint32_t wd_ring_round(uint32_t capacity) {
  uint32_t cap = 16;
  while (cap < capacity && cap < (1u << 30)) cap <<= 1;
  return cap;
}

void wd_ring_init_at(wd_ring *r, uint32_t capacity, wd_record *mem, uint32_t ready) {
  memset(r, 0, sizeof(*r));
  /* mem is a new file's mapping, already zero: clearing it would make every page resident for
   * a communicator that may never carry traffic. */
  r->recs = mem;
  r->mask = capacity - 1;
  r->external = 1;
  atomic_init(&r->head, 0);
  if (ready > capacity) ready = capacity;
  while (ready & (ready - 1)) ready &= ready - 1; /* a power of two: it is a mask */
  atomic_init(&r->ready, ready);
  r->ready0 = ready;
}

int wd_ring_init(wd_ring *r, uint32_t capacity) {
  uint32_t cap = wd_ring_round(capacity);
  memset(r, 0, sizeof(*r));
  r->recs = calloc(cap, sizeof(wd_record));
  if (r->recs == NULL) return -1;
  r->mask = cap - 1;
  atomic_init(&r->head, 0);
  atomic_init(&r->ready, cap); /* calloc'ed: its pages arrive when first written */
  r->ready0 = cap;
  return 0;
}

void wd_ring_destroy(wd_ring *r) {
  if (!r->external) free(r->recs);
  r->recs = NULL;
}

void wd_ring_clear(wd_ring *r) {
  /* Only what is backed: clearing a ring file's unallocated part would allocate it. */
  memset(r->recs, 0, sizeof(wd_record) * atomic_load_explicit(&r->ready, memory_order_acquire));
  atomic_store_explicit(&r->ready_from, 0, memory_order_relaxed);
  atomic_store_explicit(&r->head, 0, memory_order_release);
}

void wd_ring_write(wd_ring *r, const wd_record *rec) {
  wd_recw w;
  w.r = *rec;
  wd_ring_put(r, w.w);
}

/* How far past the writers a lapped copy resumes: enough to copy a few records before they
 * arrive, little enough that the jump itself drops almost nothing. */
enum { WD_RING_LEAD = 32 };

/* What reading ticket t found. */
enum { WD_FETCH_OK, WD_FETCH_INSIDE, WD_FETCH_NEVER, WD_FETCH_LAPPED, WD_FETCH_MIXED };

/* The record of ticket t into w, wherever its writer put it: within what was backed then
 * (wd_ring_put), or, for a writer that read the ring's size on the other side of its growth,
 * the other place (the watchdog may be held up between setting ready_from and ready). */
static int ring_fetch(const wd_ring *r, uint64_t t, uint32_t ready, uint64_t ready_from, uint64_t *w) {
  uint32_t m = (t < ready_from ? r->ready0 : ready) - 1;
  const uint64_t *src = (const uint64_t *)&r->recs[t & m];
  uint64_t want = 2 * t + 2;
  uint64_t turn = __atomic_load_n(&src[0], __ATOMIC_ACQUIRE);
  if (turn != want && ready != r->ready0) {
    const uint64_t *alt = (const uint64_t *)&r->recs[t & ((t < ready_from ? ready : r->ready0) - 1)];
    if (__atomic_load_n(&alt[0], __ATOMIC_ACQUIRE) == want) {
      src = alt;
      turn = want;
    }
  }
  if (turn == want) {
    /* Acquire loads keep the re-check of the turn after them (and TSan models them, which it
     * does not a fence); the watchdog thread can afford them. */
    for (unsigned i = 1; i < WD_RECORD_WORDS; i++) w[i] = __atomic_load_n(&src[i], __ATOMIC_ACQUIRE);
    turn = __atomic_load_n(&src[0], __ATOMIC_RELAXED);
  }
  if (turn == want) {
    /* Two writers of different laps in one slot at once (one preempted for a whole lap). */
    if ((uint32_t)(w[WD_RECORD_WORDS - 1] >> 32) != wd_record_check(t, w)) return WD_FETCH_MIXED;
    w[0] = want;
    return WD_FETCH_OK;
  }
  if (turn == 0 && t < ready_from) return WD_FETCH_NEVER; /* from around the ring's growth */
  return turn < want || (turn & 1) ? WD_FETCH_INSIDE : WD_FETCH_LAPPED;
}

/* Oldest first, chasing: when a writer laps the copy, the copy jumps ahead of the writers
 * (WD_RING_LEAD records) instead of following them slot by slot. A copy faster than the
 * writers loses nothing; a slower one keeps about capacity x (copy rate / write rate) records,
 * the newest included. Copying newest first instead always loses write/(copy+write) of the ring
 * (measured in bench/bench_snapshot.c, docs/performance.md). */
uint32_t wd_ring_snapshot(const wd_ring *r, wd_record *out, uint32_t max, uint32_t *torn,
                          uint64_t *lost) {
  uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
  uint64_t cap = (uint64_t)r->mask + 1;
  uint64_t first = head > cap ? head - cap : 0;
  if (head - first > max) first = head - max;
  uint32_t n = 0, bad = 0;
  uint64_t lapped = 0;
  uint32_t ready = atomic_load_explicit(&r->ready, memory_order_acquire);
  uint64_t ready_from = atomic_load_explicit(&r->ready_from, memory_order_relaxed);
  for (uint64_t t = first; t < head; t++) {
    uint64_t w[WD_RECORD_WORDS];
    switch (ring_fetch(r, t, ready, ready_from, w)) {
    case WD_FETCH_OK:
      memcpy(&out[n++], w, sizeof(w));
      continue;
    case WD_FETCH_NEVER: lapped++; continue;
    case WD_FETCH_INSIDE:
    case WD_FETCH_MIXED: bad++; continue;
    default: break;
    }
    /* Lapped: every ticket the writers have passed is gone; go past them. */
    uint64_t now = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t gone = now > cap ? now - cap : 0; /* tickets below this are overwritten */
    if (gone <= t) {
      lapped++;
      continue;
    }
    if (gone > head) gone = head;
    uint64_t next = gone + WD_RING_LEAD < head ? gone + WD_RING_LEAD : head;
    lapped += gone - t;
    bad += (uint32_t)(next - gone); /* skipped: the writers are about to be inside */
    t = next - 1;
  }
  if (torn) *torn = bad;
  if (lost) *lost = first + lapped;
  return n;
}

/* How near the head a record a writer is still inside is waited for rather than skipped: a
 * writer preempted there finishes soon; one further back was lapped or died. */
enum { WD_RING_WAIT_NEAR = 64 };

uint32_t wd_ring_read_since(const wd_ring *r, uint64_t *cursor, wd_record *out, uint32_t max,
                            uint64_t *missed) {
  uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
  uint64_t cap = (uint64_t)r->mask + 1;
  uint64_t t = *cursor, gone = 0;
  if (t > head) t = head; /* the ring was cleared (a recycled context): start over */
  if (head > cap && t < head - cap) {
    gone += head - cap - t;
    t = head - cap;
  }
  uint32_t ready = atomic_load_explicit(&r->ready, memory_order_acquire);
  uint64_t ready_from = atomic_load_explicit(&r->ready_from, memory_order_relaxed);
  uint32_t n = 0;
  for (; t < head && n < max; t++) {
    uint64_t w[WD_RECORD_WORDS];
    int got = ring_fetch(r, t, ready, ready_from, w);
    if (got == WD_FETCH_INSIDE && head - t <= WD_RING_WAIT_NEAR) break;
    if (got != WD_FETCH_OK) {
      gone++;
      continue;
    }
    memcpy(&out[n++], w, sizeof(w));
  }
  *cursor = t;
  if (missed) *missed = gone;
  return n;
}
