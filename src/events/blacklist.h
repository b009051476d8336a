/*
 * Addresses still referenced as parents, so that an event pool does not hand them out again
 * while a child may still name them. Reference-counted, bounded: when full, the least recently
 * referenced address is evicted and a warning is logged (further evictions are counted and
 * warned about at powers of two).
 *
 * All memory is allocated by create; every operation is O(1) and takes an internal mutex. It is
 * meant for the rare paths (parents we do not own: PXN and detached events), not the hot path.
 */
#ifndef WD_BLACKLIST_H
#define WD_BLACKLIST_H

#include <stdint.h>

typedef struct wd_blacklist wd_blacklist;

/* capacity: 1 .. WD_BLACKLIST_MAX_CAPACITY addresses. NULL on a bad capacity or no memory. */
#define WD_BLACKLIST_MAX_CAPACITY (1u << 28)
wd_blacklist *wd_blacklist_create(uint32_t capacity);
void wd_blacklist_destroy(wd_blacklist *bl);

/* Add addr with a count of 1, or increment its count; either way it becomes most recently used. */
void wd_blacklist_ref(wd_blacklist *bl, uintptr_t addr);
/* Decrement; remove at 0. Returns the remaining count, or -1 when addr is absent. */
int wd_blacklist_unref(wd_blacklist *bl, uintptr_t addr);
/* 1 when addr is present, else 0. Does not change the LRU order. */
int wd_blacklist_contains(wd_blacklist *bl, uintptr_t addr);
/* Reference count of addr (0 when absent). */
uint32_t wd_blacklist_refcount(wd_blacklist *bl, uintptr_t addr);
uint32_t wd_blacklist_size(wd_blacklist *bl);
uint64_t wd_blacklist_evictions(wd_blacklist *bl);

#endif
