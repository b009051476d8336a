/*
 * The slot arena: every event slot of the process lives in one address range reserved once per
 * load of the library and unmapped only when the library is unloaded. Any value NCCL hands back
 * (a handle, a parentObj) is checked against it before it is dereferenced: a range and alignment
 * check over memory that is provably ours and stays readable for the life of the library, so a
 * stale handle from a finalized communicator, or a garbage pointer, is never followed.
 */
#ifndef WD_ARENA_H
#define WD_ARENA_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct wd_arena_state {
  uintptr_t base;                 /* start of the reservation, 0 before the first chunk */
  size_t size;                    /* bytes reserved */
  size_t chunk_bytes;             /* every chunk has this size (set by the first) */
  _Atomic size_t committed;       /* bytes from base that are mapped and hold slots */
} wd_arena_state;

extern wd_arena_state wd_arena;

/* Whether a is the address of a slot of `stride` bytes inside a committed chunk. */
static inline int wd_arena_holds(uintptr_t a, size_t stride) {
  uintptr_t off = a - wd_arena.base; /* wraps to a huge value below base (and for NULL) */
  return off < atomic_load_explicit(&wd_arena.committed, memory_order_acquire) && off % stride == 0;
}

/* a, if it is the address of a slot of `stride` bytes inside a committed chunk, else NULL. */
static inline void *wd_arena_slot_at(uintptr_t a, size_t stride) {
  return wd_arena_holds(a, stride) ? (void *)a : NULL;
}

/* Why memory for events was refused (the cause a warning names). */
enum { WD_SHORT_NONE = 0, WD_SHORT_MAX_EVENTS = 1, WD_SHORT_BUDGET = 2, WD_SHORT_ADDRESS = 3 };

/* A chunk of bytes (the same size on every call), zeroed when fresh, or a chunk released
 * earlier with its contents as they were left (callers keep slot tags across reuse). NULL when
 * the arena is full or cannot be mapped, *why (when given) then says which: WD_SHORT_BUDGET or
 * WD_SHORT_ADDRESS. Not for the hot path's common case (pool growth). */
void *wd_arena_chunk_get(size_t bytes, int *why);
/* Give a chunk back for reuse; it stays mapped. */
void wd_arena_chunk_put(void *chunk);
/* Unmap everything (library unload; no slot may be in use). */
void wd_arena_release(void);
/* In a forked child: every value NCCL hands back fails the range check from now on, so no handle
 * inherited from the parent is followed (its slots are the child's copies, but its rings may be
 * the parent's shared ring file). The memory stays mapped. */
void wd_arena_disown(void);

#endif
