/*
 * Process-wide string table. NCCL passes string literals that live inside NCCL; a record keeps a
 * small id and the table keeps a bounded copy, so nothing reads NCCL's memory after it unloads.
 * Lookups are lock-free; adding a new string takes a short mutex, once per distinct string.
 */
#ifndef WD_STRTAB_H
#define WD_STRTAB_H

#include <stdatomic.h>
#include <stdint.h>

#define WD_STR_MAX 256 /* ids 0..255; 0 is "" (NULL or empty) */
#define WD_STR_LEN 32  /* bytes kept per string, NUL included */
#define WD_STR_OVERFLOW 255 /* id used when the table is full ("?") */

/* Intern s (may be NULL). Safe from any thread, never allocates. */
uint8_t wd_str_id(const char *s);

/* The pointer cache in front of the table (strtab.c): NCCL passes the same few literals again and
 * again, so the hot path tries their first cell inline. */
#define WD_PTR_CACHE 1024 /* open-addressed pointer -> id cache; power of two */
typedef struct {
  _Atomic uintptr_t ptr;
  _Atomic uint8_t id;
} wd_ptr_entry;
extern wd_ptr_entry wd_ptr_cache[WD_PTR_CACHE];
static inline unsigned wd_ptr_hash(uintptr_t p) {
  uint64_t x = (uint64_t)p * 0x9e3779b97f4a7c15ull;
  return (unsigned)(x >> 54) & (WD_PTR_CACHE - 1);
}
/* wd_str_id, its commonest case inline: s is in its first cell. */
static inline uint8_t wd_str_id_hot(const char *s) {
  uintptr_t p = (uintptr_t)s;
  const wd_ptr_entry *e = &wd_ptr_cache[wd_ptr_hash(p)];
  if (p && atomic_load_explicit(&e->ptr, memory_order_acquire) == p) {
    uint8_t id = atomic_load_explicit(&e->id, memory_order_relaxed);
    if (id) return id;
  }
  return wd_str_id(s);
}
/* The copy kept for id ("" for 0 and unknown ids). */
const char *wd_str(uint8_t id);
/* Number of ids in use (for dumps: ids 0..n-1). */
unsigned wd_str_count(void);
/* Forget every pointer mapping (the copies stay valid). Called at the last finalize, when NCCL
 * may unload and load again at other addresses. */
void wd_str_reset_ptrs(void);

#endif
