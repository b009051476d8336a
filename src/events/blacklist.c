/*
 * The address blacklist: an open-addressing hash of entry indices (linear probing, deletion by
 * backward shift, so there are no tombstones and probe chains never degrade after many
 * insert/remove cycles) plus an LRU list linked through entry indices.
 */
#include "events/blacklist.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

#include "base/log.h"

#define WD_BL_NIL UINT32_MAX

typedef struct {
  uintptr_t addr;
  uint32_t refs;
  uint32_t prev, next; /* LRU links (entry indices); next also links the free list */
} wd_bl_entry;

struct wd_blacklist {
  pthread_mutex_t lock;
  uint32_t cap;
  uint32_t size;
  uint32_t mask;      /* table size - 1; the table is at least twice the capacity */
  uint32_t lru_head;  /* least recently used */
  uint32_t lru_tail;  /* most recently used */
  uint32_t free_head;
  uint64_t evictions;
  uint64_t next_warn; /* eviction count at which the next warning is logged */
  wd_bl_entry *e;
  uint32_t *table;    /* entry index, or WD_BL_NIL */
};

static uint32_t wd_bl_hash(const wd_blacklist *bl, uintptr_t addr) {
  /* Addresses are aligned and clustered: mix every bit into the low ones (murmur3 finaliser). */
  uint64_t x = (uint64_t)addr;
  x ^= x >> 33;
  x *= UINT64_C(0xff51afd7ed558ccd);
  x ^= x >> 33;
  x *= UINT64_C(0xc4ceb9fe1a85ec53);
  x ^= x >> 33;
  return (uint32_t)x & bl->mask;
}

wd_blacklist *wd_blacklist_create(uint32_t capacity) {
  if (capacity == 0 || capacity > WD_BLACKLIST_MAX_CAPACITY) return NULL;
  wd_blacklist *bl = calloc(1, sizeof *bl);
  if (!bl) return NULL;
  uint32_t tsize = 2;
  while (tsize < 2 * capacity) tsize <<= 1;
  bl->e = calloc(capacity, sizeof *bl->e);
  bl->table = malloc((size_t)tsize * sizeof *bl->table);
  if (!bl->e || !bl->table || pthread_mutex_init(&bl->lock, NULL) != 0) {
    free(bl->e);
    free(bl->table);
    free(bl);
    return NULL;
  }
  for (uint32_t i = 0; i < tsize; i++) bl->table[i] = WD_BL_NIL;
  for (uint32_t i = 0; i < capacity; i++) bl->e[i].next = i + 1 < capacity ? i + 1 : WD_BL_NIL;
  bl->cap = capacity;
  bl->mask = tsize - 1;
  bl->lru_head = bl->lru_tail = WD_BL_NIL;
  bl->free_head = 0;
  bl->next_warn = 1;
  return bl;
}

void wd_blacklist_destroy(wd_blacklist *bl) {
  if (!bl) return;
  pthread_mutex_destroy(&bl->lock);
  free(bl->table);
  free(bl->e);
  free(bl);
}

/* Table slot holding addr, or WD_BL_NIL. */
static uint32_t wd_bl_find(const wd_blacklist *bl, uintptr_t addr) {
  uint32_t h = wd_bl_hash(bl, addr);
  for (;;) {
    uint32_t idx = bl->table[h];
    if (idx == WD_BL_NIL) return WD_BL_NIL;
    if (bl->e[idx].addr == addr) return h;
    h = (h + 1) & bl->mask;
  }
}

/* Empty table slot i and shift later members of its probe run back, so lookups need no
 * tombstones: an entry at j may move to i unless its home slot lies cyclically in (i, j]. */
static void wd_bl_table_remove(wd_blacklist *bl, uint32_t i) {
  uint32_t j = i;
  for (;;) {
    j = (j + 1) & bl->mask;
    uint32_t idx = bl->table[j];
    if (idx == WD_BL_NIL) break;
    uint32_t k = wd_bl_hash(bl, bl->e[idx].addr);
    int home_between = (i <= j) ? (i < k && k <= j) : (i < k || k <= j);
    if (!home_between) {
      bl->table[i] = idx;
      i = j;
    }
  }
  bl->table[i] = WD_BL_NIL;
}

static void wd_bl_unlink(wd_blacklist *bl, uint32_t idx) {
  wd_bl_entry *en = &bl->e[idx];
  if (en->prev != WD_BL_NIL) bl->e[en->prev].next = en->next;
  else bl->lru_head = en->next;
  if (en->next != WD_BL_NIL) bl->e[en->next].prev = en->prev;
  else bl->lru_tail = en->prev;
  en->prev = en->next = WD_BL_NIL;
}

static void wd_bl_push_mru(wd_blacklist *bl, uint32_t idx) {
  wd_bl_entry *en = &bl->e[idx];
  en->prev = bl->lru_tail;
  en->next = WD_BL_NIL;
  if (bl->lru_tail != WD_BL_NIL) bl->e[bl->lru_tail].next = idx;
  else bl->lru_head = idx;
  bl->lru_tail = idx;
}

/* Remove entry idx (its table slot is slot) and return it to the free list. */
static void wd_bl_drop(wd_blacklist *bl, uint32_t slot, uint32_t idx) {
  wd_bl_table_remove(bl, slot);
  wd_bl_unlink(bl, idx);
  bl->e[idx].next = bl->free_head;
  bl->free_head = idx;
  bl->size--;
}

void wd_blacklist_ref(wd_blacklist *bl, uintptr_t addr) {
  if (!bl) return;
  int warn = 0;
  uintptr_t ev_addr = 0;
  uint32_t ev_refs = 0;
  uint64_t ev_count = 0, ev_next = 0;

  pthread_mutex_lock(&bl->lock);
  uint32_t slot = wd_bl_find(bl, addr);
  if (slot != WD_BL_NIL) {
    uint32_t idx = bl->table[slot];
    if (bl->e[idx].refs < UINT32_MAX) bl->e[idx].refs++;
    if (bl->lru_tail != idx) {
      wd_bl_unlink(bl, idx);
      wd_bl_push_mru(bl, idx);
    }
    pthread_mutex_unlock(&bl->lock);
    return;
  }
  if (bl->free_head == WD_BL_NIL) {
    /* Full: evict the least recently used address. Its children, if any are still running,
     * may now see their parent's address reused: worth a warning, but not one per event. */
    uint32_t victim = bl->lru_head;
    ev_addr = bl->e[victim].addr;
    ev_refs = bl->e[victim].refs;
    wd_bl_drop(bl, wd_bl_find(bl, ev_addr), victim);
    ev_count = ++bl->evictions;
    if (ev_count >= bl->next_warn) {
      warn = 1;
      bl->next_warn = ev_count * 2;
      ev_next = bl->next_warn;
    }
  }
  uint32_t idx = bl->free_head;
  bl->free_head = bl->e[idx].next;
  bl->e[idx].addr = addr;
  bl->e[idx].refs = 1;
  wd_bl_push_mru(bl, idx);
  uint32_t h = wd_bl_hash(bl, addr);
  while (bl->table[h] != WD_BL_NIL) h = (h + 1) & bl->mask;
  bl->table[h] = idx;
  bl->size++;
  uint32_t cap = bl->cap;
  pthread_mutex_unlock(&bl->lock);

  /* Logged outside the lock: NCCL's logger takes its own mutex. */
  if (warn)
    WD_WARN("address blacklist full (capacity %" PRIu32 "): evicted address 0x%" PRIxPTR
            " with refcount %" PRIu32 "; a child may be matched to a new event at that address"
            " (eviction %" PRIu64 "; the next warning at eviction %" PRIu64 ")",
            cap, ev_addr, ev_refs, ev_count, ev_next);
}

int wd_blacklist_unref(wd_blacklist *bl, uintptr_t addr) {
  if (!bl) return -1;
  int left;
  pthread_mutex_lock(&bl->lock);
  uint32_t slot = wd_bl_find(bl, addr);
  if (slot == WD_BL_NIL) {
    left = -1;
  } else {
    uint32_t idx = bl->table[slot];
    uint32_t r = --bl->e[idx].refs;
    left = r > INT32_MAX ? INT32_MAX : (int)r;
    if (r == 0) wd_bl_drop(bl, slot, idx);
  }
  pthread_mutex_unlock(&bl->lock);
  return left;
}

int wd_blacklist_contains(wd_blacklist *bl, uintptr_t addr) {
  if (!bl) return 0;
  pthread_mutex_lock(&bl->lock);
  int found = wd_bl_find(bl, addr) != WD_BL_NIL;
  pthread_mutex_unlock(&bl->lock);
  return found;
}

uint32_t wd_blacklist_refcount(wd_blacklist *bl, uintptr_t addr) {
  if (!bl) return 0;
  pthread_mutex_lock(&bl->lock);
  uint32_t slot = wd_bl_find(bl, addr);
  uint32_t refs = slot == WD_BL_NIL ? 0 : bl->e[bl->table[slot]].refs;
  pthread_mutex_unlock(&bl->lock);
  return refs;
}

uint32_t wd_blacklist_size(wd_blacklist *bl) {
  if (!bl) return 0;
  pthread_mutex_lock(&bl->lock);
  uint32_t n = bl->size;
  pthread_mutex_unlock(&bl->lock);
  return n;
}

uint64_t wd_blacklist_evictions(wd_blacklist *bl) {
  if (!bl) return 0;
  pthread_mutex_lock(&bl->lock);
  uint64_t n = bl->evictions;
  pthread_mutex_unlock(&bl->lock);
  return n;
}
