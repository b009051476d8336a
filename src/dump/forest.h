/*
 * Open trees of live events, rebuilt from a snapshot: each event names its parent by slot id, so
 * the trees are recovered by sorting (no pointers into live event storage).
 */
#ifndef WD_FOREST_H
#define WD_FOREST_H

#include <stdint.h>

#include "dump/snapshot.h"

/* Children index entry: live events sorted by (parent slot, start time, slot). */
typedef struct wd_kid {
  uint32_t parent;
  uint32_t slot;
  uint64_t ts;
  uint32_t idx;
} wd_kid;

/* The live events of one communicator (or the detached ones) being laid out as trees. */
typedef struct wd_forest {
  const wd_ev_snap *ev;
  uint32_t n;
  wd_kid *kids;  /* by parent, for children lookups */
  wd_kid *order; /* by start time */
  char *placed;  /* per event: 0 not yet shown, 1 shown, 2 top of a tree */
} wd_forest;

/* Index the live events ev[0..n) for layout. Tops (nodes shown at the top level with their live
 * descendants nested, placed[i] == 2) are the root operations; with tops_orphans, also every
 * event whose parent is not live (detached events have no root operations of their own).
 * O(n log n). 0, or -1 when out of memory. */
int wd_forest_build(wd_forest *f, const wd_ev_snap *ev, uint32_t n, int tops_orphans);
void wd_forest_free(wd_forest *f);
/* Index in f->kids of the first child of slot, or f->n: children follow in start order. */
uint32_t wd_forest_kids_first(const wd_forest *f, uint32_t slot);

#endif
