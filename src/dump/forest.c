/* Open trees of live events (forest.h). */
#include "dump/forest.h"

#include <stdlib.h>
#include <string.h>

static int kid_cmp(const void *pa, const void *pb) {
  const wd_kid *a = pa, *b = pb;
  if (a->parent != b->parent) return a->parent < b->parent ? -1 : 1;
  if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
  if (a->slot != b->slot) return a->slot < b->slot ? -1 : 1;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

/* Start-time order (for roots and flat lists): same key with parent ignored. */
static int start_cmp(const void *pa, const void *pb) {
  const wd_kid *a = pa, *b = pb;
  if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
  if (a->slot != b->slot) return a->slot < b->slot ? -1 : 1;
  return a->idx < b->idx ? -1 : a->idx > b->idx;
}

static int u32_cmp(const void *pa, const void *pb) {
  uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
  return a < b ? -1 : a > b;
}

uint32_t wd_forest_kids_first(const wd_forest *f, uint32_t slot) {
  uint32_t lo = 0, hi = f->n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (f->kids[mid].parent < slot)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

void wd_forest_free(wd_forest *f) {
  free(f->kids);
  free(f->order);
  free(f->placed);
  memset(f, 0, sizeof(*f));
}

int wd_forest_build(wd_forest *f, const wd_ev_snap *ev, uint32_t n, int tops_orphans) {
  wd_forest_free(f);
  f->ev = ev;
  f->n = ev ? n : 0;
  n = f->n;
  if (!n) return 0;
  f->kids = malloc(sizeof(wd_kid) * n);
  f->order = malloc(sizeof(wd_kid) * n);
  f->placed = calloc(n, 1);
  if (!f->kids || !f->order || !f->placed) return -1;
  for (uint32_t i = 0; i < n; i++) {
    f->kids[i] = (wd_kid){ev[i].start.parent, ev[i].start.slot, ev[i].start.ts_ns, i};
    f->order[i] = f->kids[i];
  }
  qsort(f->kids, n, sizeof(wd_kid), kid_cmp);
  qsort(f->order, n, sizeof(wd_kid), start_cmp);
  uint32_t *slots = NULL; /* sorted live slots, to tell a live parent from a gone one */
  if (tops_orphans) {
    slots = malloc(sizeof(uint32_t) * n);
    if (!slots) return -1;
    for (uint32_t i = 0; i < n; i++) slots[i] = f->order[i].slot;
    qsort(slots, n, sizeof(uint32_t), u32_cmp);
  }
  for (uint32_t i = 0; i < n; i++) {
    const wd_ev_snap *e = &ev[i];
    int top = e->is_root;
    uint32_t p = e->start.parent;
    if (!top && slots) {
      top = 1;
      if (p != WD_SLOT_NONE && p != WD_SLOT_FOREIGN && p != e->start.slot) {
        uint32_t lo = 0, hi = n;
        while (lo < hi) {
          uint32_t mid = lo + (hi - lo) / 2;
          if (slots[mid] < p)
            lo = mid + 1;
          else
            hi = mid;
        }
        if (lo < n && slots[lo] == p) top = 0;
      }
    }
    if (top) f->placed[i] = 2;
  }
  free(slots);
  return 0;
}

