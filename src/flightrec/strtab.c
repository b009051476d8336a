/* Lock-free string interning: a pointer cache in front of a table of bounded copies. */
#include "flightrec/strtab.h"

#include "flightrec/ringfile.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>


/* An entry is claimed by CAS on `state` (0 free, 1 being written, 2 ready), then its bytes
 * are written and published with a release store; readers only look at ready entries. */
static struct {
  _Atomic uint8_t state;
  char text[WD_STR_LEN];
} wd_strings[WD_STR_MAX];
static _Atomic unsigned wd_nstrings = 1; /* id 0 is "" */
wd_ptr_entry wd_ptr_cache[WD_PTR_CACHE];

static uint8_t wd_find_text(const char *s, unsigned n) {
  for (unsigned i = 1; i < n && i < WD_STR_OVERFLOW; i++) {
    if (atomic_load_explicit(&wd_strings[i].state, memory_order_acquire) == 2 &&
        strncmp(wd_strings[i].text, s, WD_STR_LEN - 1) == 0)
      return (uint8_t)i;
  }
  return 0;
}

/* Adding a string takes a mutex: it happens once per distinct string for the life of the
 * process (a few dozen function, type, algorithm and protocol names), and one id per text keeps
 * the per-function sequence tables exact. Lookups of known strings never take it. */
static pthread_mutex_t wd_str_lock = PTHREAD_MUTEX_INITIALIZER;

static uint8_t wd_intern_text(const char *s) {
  unsigned n = atomic_load_explicit(&wd_nstrings, memory_order_acquire);
  uint8_t id = wd_find_text(s, n);
  if (id) return id;
  pthread_mutex_lock(&wd_str_lock);
  n = atomic_load_explicit(&wd_nstrings, memory_order_acquire);
  id = wd_find_text(s, n);
  if (id == 0) {
    if (n >= WD_STR_OVERFLOW) {
      id = WD_STR_OVERFLOW;
    } else {
      strncpy(wd_strings[n].text, s, WD_STR_LEN - 1);
      wd_strings[n].text[WD_STR_LEN - 1] = '\0';
      atomic_store_explicit(&wd_strings[n].state, 2, memory_order_release);
      atomic_store_explicit(&wd_nstrings, n + 1, memory_order_release);
      id = (uint8_t)n;
      wd_ringfile_note_string(n, wd_strings[n].text);
    }
  }
  pthread_mutex_unlock(&wd_str_lock);
  return id;
}

uint8_t wd_str_id(const char *s) {
  if (s == NULL || s[0] == '\0') return 0;
  uintptr_t p = (uintptr_t)s;
  unsigned h = wd_ptr_hash(p);
  for (unsigned i = 0; i < 8; i++) {
    wd_ptr_entry *e = &wd_ptr_cache[(h + i) & (WD_PTR_CACHE - 1)];
    uintptr_t cur = atomic_load_explicit(&e->ptr, memory_order_acquire);
    if (cur == p) {
      uint8_t id = atomic_load_explicit(&e->id, memory_order_relaxed);
      if (id) return id;
      break; /* being filled by another thread */
    }
    if (cur == 0) {
      uint8_t id = wd_intern_text(s);
      if (atomic_compare_exchange_strong_explicit(&e->ptr, &cur, p, memory_order_acq_rel,
                                                  memory_order_acquire))
        atomic_store_explicit(&e->id, id, memory_order_release);
      return id;
    }
  }
  return wd_intern_text(s); /* cache neighbourhood full: slow path, still correct */
}

const char *wd_str(uint8_t id) {
  if (id == 0) return "";
  if (id == WD_STR_OVERFLOW) return "?";
  if (atomic_load_explicit(&wd_strings[id].state, memory_order_acquire) != 2) return "";
  return wd_strings[id].text;
}

unsigned wd_str_count(void) {
  unsigned n = atomic_load_explicit(&wd_nstrings, memory_order_acquire);
  return n > WD_STR_MAX ? WD_STR_MAX : n;
}

void wd_str_reset_ptrs(void) {
  for (unsigned i = 0; i < WD_PTR_CACHE; i++) {
    atomic_store_explicit(&wd_ptr_cache[i].id, 0, memory_order_relaxed);
    atomic_store_explicit(&wd_ptr_cache[i].ptr, 0, memory_order_release);
  }
}
