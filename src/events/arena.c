/* The slot arena (arena.h). */
#include "events/arena.h"

#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "base/log.h"
#include "events/budget.h"

/* Address space, not memory: pages are committed chunk by chunk as pools grow. 16 GiB holds
 * about 89 M slots, hundreds of communicators at the default event bound. Never more than the
 * memory budget: slots cannot commit past it, and under ulimit -v the rest of the limit is the
 * job's (a 4 GiB reservation under an 8 GiB limit left a snapshot dump no room to render). */
#define WD_ARENA_RESERVE (16ull << 30)
#define WD_ARENA_MIN (64ull << 20)
#define WD_ARENA_FREE_MAX 4096

wd_arena_state wd_arena;
static pthread_mutex_t arena_lock = PTHREAD_MUTEX_INITIALIZER;
static void *free_chunks[WD_ARENA_FREE_MAX];
static unsigned nfree;

static int reserve(void) {
  wd_budget_stats b;
  wd_budget_get(&b);
  size_t first = WD_ARENA_RESERVE;
  if (b.budget > 0 && b.budget < first) /* rounded up to whole 64 MiB */
    first = (size_t)((b.budget + WD_ARENA_MIN - 1) / WD_ARENA_MIN * WD_ARENA_MIN);
  for (size_t size = first; size >= WD_ARENA_MIN; size /= 2) {
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
      wd_arena.base = (uintptr_t)p;
      wd_arena.size = size;
      return 0;
    }
  }
  WD_WARN("cannot reserve address space for event slots: no events are recorded");
  return -1;
}

void *wd_arena_chunk_get(size_t bytes, int *why) {
  void *chunk = NULL;
  int short_why = WD_SHORT_ADDRESS;
  pthread_mutex_lock(&arena_lock);
  if (wd_arena.chunk_bytes == 0) wd_arena.chunk_bytes = bytes;
  if (bytes != wd_arena.chunk_bytes) goto out;
  if (nfree > 0) {
    chunk = free_chunks[--nfree];
    goto out;
  }
  if (wd_arena.base == 0 && reserve() != 0) goto out;
  size_t used = atomic_load_explicit(&wd_arena.committed, memory_order_relaxed);
  if (wd_arena.size - used < bytes) goto out;
  if (!wd_budget_allows(bytes)) { /* the pool drops (and counts) events instead */
    wd_budget_note_refused();
    short_why = WD_SHORT_BUDGET;
    goto out;
  }
  void *at = (void *)(wd_arena.base + used);
  if (mprotect(at, bytes, PROT_READ | PROT_WRITE) != 0) goto out;
  chunk = at;
  /* Published only once the pages are readable: a range check never admits unmapped memory. */
  atomic_store_explicit(&wd_arena.committed, used + bytes, memory_order_release);
out:
  pthread_mutex_unlock(&arena_lock);
  if (why) *why = chunk ? WD_SHORT_NONE : short_why;
  return chunk;
}

void wd_arena_chunk_put(void *chunk) {
  if (chunk == NULL) return;
  pthread_mutex_lock(&arena_lock);
  /* The list holds every committed chunk at most once, so it cannot overflow in practice;
   * a chunk that does not fit stays committed and unused rather than being reused twice. */
  if (nfree < WD_ARENA_FREE_MAX) free_chunks[nfree++] = chunk;
  pthread_mutex_unlock(&arena_lock);
}

void wd_arena_release(void) {
  pthread_mutex_lock(&arena_lock);
  if (wd_arena.base) munmap((void *)wd_arena.base, wd_arena.size);
  atomic_store_explicit(&wd_arena.committed, 0, memory_order_release);
  wd_arena.base = 0;
  wd_arena.size = 0;
  wd_arena.chunk_bytes = 0;
  nfree = 0;
  pthread_mutex_unlock(&arena_lock);
}

void wd_arena_disown(void) {
  /* No lock: the child has one thread, and the parent's holder of arena_lock does not exist. */
  atomic_store_explicit(&wd_arena.committed, 0, memory_order_release);
}
