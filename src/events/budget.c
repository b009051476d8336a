/* The process-wide memory budget (budget.h). */
#include "events/budget.h"

#include <stdatomic.h>

#include "events/arena.h"

static _Atomic uint64_t budget_bytes, ring_bytes, shrunk, refused;

void wd_budget_set(uint64_t bytes) { atomic_store(&budget_bytes, bytes); }

static uint64_t used(void) {
  return atomic_load(&ring_bytes) + atomic_load_explicit(&wd_arena.committed, memory_order_relaxed);
}

int wd_budget_allows(uint64_t bytes) {
  uint64_t b = atomic_load(&budget_bytes);
  return b == 0 || used() + bytes <= b;
}

void wd_budget_rings(int64_t delta) { atomic_fetch_add(&ring_bytes, (uint64_t)delta); }
void wd_budget_note_shrunk(void) { atomic_fetch_add(&shrunk, 1); }
void wd_budget_note_refused(void) { atomic_fetch_add(&refused, 1); }

void wd_budget_get(wd_budget_stats *out) {
  out->budget = atomic_load(&budget_bytes);
  out->ring_bytes = atomic_load(&ring_bytes);
  out->slot_bytes = atomic_load_explicit(&wd_arena.committed, memory_order_relaxed);
  out->shrunk = atomic_load(&shrunk);
  out->refused = atomic_load(&refused);
}
