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
  wd_record *recs;
} wd_ring;

/* capacity is rounded up to a power of two (minimum 16). Returns 0, or -1 when out of memory. */
int wd_ring_init(wd_ring *r, uint32_t capacity);
/* The same over memory the caller owns (a new ring file's mapping, zero-filled), capacity
 * already a power of two. */
void wd_ring_init_at(wd_ring *r, uint32_t capacity, wd_record *mem);
/* The capacity wd_ring_init gives for a requested one. */
uint32_t wd_ring_round(uint32_t capacity);
void wd_ring_destroy(wd_ring *r);

/* Forget every record (no concurrent writer). */
void wd_ring_clear(wd_ring *r);

/* Append a copy of *rec (its turn field is ignored). Never blocks, never allocates. */
void wd_ring_write(wd_ring *r, const wd_record *rec);
/* The same from the hot path's word view (no copy). */
void wd_ring_write_w(wd_ring *r, const wd_recw *rec);

/* Copy out up to max complete records, oldest first, into out. Returns the number copied;
 * *torn receives the number of records skipped because a writer was inside them and *lost the
 * number of records overwritten before they could be read (older than the ring, or lapped by a
 * writer during the copy). A copy the writers lap jumps ahead of them, so a busy ring loses
 * its oldest records rather than its newest. Safe while writers run. */
uint32_t wd_ring_snapshot(const wd_ring *r, wd_record *out, uint32_t max, uint32_t *torn,
                          uint64_t *lost);

static inline uint32_t wd_ring_capacity(const wd_ring *r) { return r->mask + 1; }

#endif
