/* The address blacklist: reference counts, LRU eviction, hash deletion, threads. */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "events/blacklist.h"
#include "base/log.h"
#include "wd_test_util.h"

/* Eviction warnings arrive through the logger. */
static int nlog;
static char last_log[1024];

static void fake_logger(wd_log_level level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...) {
  (void)flags, (void)file, (void)line;
  if (level != WD_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_log, sizeof last_log, fmt, ap);
  va_end(ap);
  nlog++;
}

static void test_create_bounds(void) {
  CU_ASSERT_PTR_NULL(wd_blacklist_create(0));
  CU_ASSERT_PTR_NULL(wd_blacklist_create(WD_BLACKLIST_MAX_CAPACITY + 1));
  wd_blacklist *bl = wd_blacklist_create(1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(bl);
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), 0);
  CU_ASSERT_EQUAL(wd_blacklist_evictions(bl), 0);
  CU_ASSERT_EQUAL(wd_blacklist_contains(bl, 0x1000), 0);
  CU_ASSERT_EQUAL(wd_blacklist_unref(bl, 0x1000), -1);
  wd_blacklist_destroy(bl);
  wd_blacklist_destroy(NULL);
  /* NULL handles are harmless. */
  wd_blacklist_ref(NULL, 1);
  CU_ASSERT_EQUAL(wd_blacklist_unref(NULL, 1), -1);
  CU_ASSERT_EQUAL(wd_blacklist_contains(NULL, 1), 0);
  CU_ASSERT_EQUAL(wd_blacklist_size(NULL), 0);
}

static void test_refcounts(void) {
  wd_blacklist *bl = wd_blacklist_create(16);
  CU_ASSERT_PTR_NOT_NULL_FATAL(bl);
  uintptr_t a = 0x1000, b = 0x2000;
  wd_blacklist_ref(bl, a);
  wd_blacklist_ref(bl, a);
  wd_blacklist_ref(bl, a);
  wd_blacklist_ref(bl, b);
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), 2);
  CU_ASSERT_EQUAL(wd_blacklist_refcount(bl, a), 3);
  CU_ASSERT_EQUAL(wd_blacklist_refcount(bl, b), 1);
  CU_ASSERT(wd_blacklist_contains(bl, a));
  CU_ASSERT(wd_blacklist_contains(bl, b));
  CU_ASSERT_FALSE(wd_blacklist_contains(bl, 0x3000));
  CU_ASSERT_EQUAL(wd_blacklist_unref(bl, a), 2);
  CU_ASSERT_EQUAL(wd_blacklist_unref(bl, a), 1);
  CU_ASSERT(wd_blacklist_contains(bl, a));
  CU_ASSERT_EQUAL(wd_blacklist_unref(bl, a), 0);
  CU_ASSERT_FALSE(wd_blacklist_contains(bl, a));
  CU_ASSERT_EQUAL(wd_blacklist_refcount(bl, a), 0);
  CU_ASSERT_EQUAL(wd_blacklist_unref(bl, a), -1);
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), 1);
  /* Address 0 is an ordinary key. */
  wd_blacklist_ref(bl, 0);
  CU_ASSERT(wd_blacklist_contains(bl, 0));
  CU_ASSERT_EQUAL(wd_blacklist_unref(bl, 0), 0);
  CU_ASSERT_EQUAL(wd_blacklist_unref(bl, b), 0);
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), 0);
  /* Reuse after removal. */
  wd_blacklist_ref(bl, a);
  CU_ASSERT_EQUAL(wd_blacklist_refcount(bl, a), 1);
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), 1);
  CU_ASSERT_EQUAL(wd_blacklist_evictions(bl), 0);
  wd_blacklist_destroy(bl);
}

static void test_lru_eviction(void) {
  wd_blacklist *bl = wd_blacklist_create(4);
  CU_ASSERT_PTR_NOT_NULL_FATAL(bl);
  nlog = 0;
  for (uintptr_t i = 1; i <= 4; i++) wd_blacklist_ref(bl, i * 0x100); /* LRU: 100 200 300 400 */
  wd_blacklist_ref(bl, 0x100);                                       /* 200 300 400 100 */
  wd_blacklist_ref(bl, 0x300);                                       /* 200 400 100 300 */
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), 4);
  CU_ASSERT_EQUAL(nlog, 0);

  wd_blacklist_ref(bl, 0x500); /* evicts 200 (refcount 1) */
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), 4);
  CU_ASSERT_EQUAL(wd_blacklist_evictions(bl), 1);
  CU_ASSERT_FALSE(wd_blacklist_contains(bl, 0x200));
  CU_ASSERT(wd_blacklist_contains(bl, 0x100));
  CU_ASSERT(wd_blacklist_contains(bl, 0x300));
  CU_ASSERT(wd_blacklist_contains(bl, 0x400));
  CU_ASSERT(wd_blacklist_contains(bl, 0x500));
  CU_ASSERT_EQUAL(nlog, 1);
  CU_ASSERT_PTR_NOT_NULL(strstr(last_log, "capacity 4"));
  CU_ASSERT_PTR_NOT_NULL(strstr(last_log, "evicted address 0x200 with refcount 1"));

  /* contains() does not refresh: 400 is now the oldest. */
  CU_ASSERT(wd_blacklist_contains(bl, 0x400));
  wd_blacklist_ref(bl, 0x600); /* evicts 400 */
  CU_ASSERT_FALSE(wd_blacklist_contains(bl, 0x400));
  CU_ASSERT_EQUAL(wd_blacklist_refcount(bl, 0x100), 2); /* survived, refcount kept */
  CU_ASSERT_EQUAL(wd_blacklist_refcount(bl, 0x300), 2);
  wd_blacklist_ref(bl, 0x700); /* evicts 100 with refcount 2 */
  CU_ASSERT_FALSE(wd_blacklist_contains(bl, 0x100));
  CU_ASSERT_EQUAL(wd_blacklist_evictions(bl), 3);
  /* Further evictions are counted; warnings only at 1, 2, 4, 8, ... */
  CU_ASSERT_EQUAL(nlog, 2);
  CU_ASSERT_PTR_NOT_NULL(strstr(last_log, "eviction 2;"));
  for (uintptr_t i = 0; i < 100; i++) wd_blacklist_ref(bl, 0x10000 + i * 8);
  CU_ASSERT_EQUAL(wd_blacklist_evictions(bl), 103);
  CU_ASSERT_EQUAL(nlog, 7); /* 1 2 4 8 16 32 64 */
  CU_ASSERT_PTR_NOT_NULL(strstr(last_log, "eviction 64; the next warning at eviction 128"));
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), 4);
  /* The survivors are the four most recent. */
  for (uintptr_t i = 96; i < 100; i++) CU_ASSERT(wd_blacklist_contains(bl, 0x10000 + i * 8));
  /* Removing one frees a slot: no eviction for the next insert. */
  CU_ASSERT_EQUAL(wd_blacklist_unref(bl, 0x10000 + 97 * 8), 0);
  wd_blacklist_ref(bl, 0x42);
  CU_ASSERT_EQUAL(wd_blacklist_evictions(bl), 103);
  CU_ASSERT(wd_blacklist_contains(bl, 0x10000 + 96 * 8));
  wd_blacklist_destroy(bl);
}

/* Deterministic pseudo-random numbers. */
static uint64_t rng_state = 88172645463325252ULL;
static uint64_t rng(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

/* Random ref/unref against a reference model: exercises backward-shift deletion in long probe
 * runs (clustered addresses, many insert/remove cycles). */
static void test_cycles_against_model(void) {
  enum { CAP = 512, KEYS = 400, OPS = 400000 };
  wd_blacklist *bl = wd_blacklist_create(CAP);
  CU_ASSERT_PTR_NOT_NULL_FATAL(bl);
  static uint32_t model[KEYS];
  memset(model, 0, sizeof model);
  int bad = 0;
  uint32_t live = 0;
  for (int op = 0; op < OPS && !bad; op++) {
    uint32_t k = (uint32_t)(rng() % KEYS);
    uintptr_t addr = 0x7f0000000000ULL + (uintptr_t)k * 64; /* pool-like: aligned, dense */
    if (rng() % 2) {
      wd_blacklist_ref(bl, addr);
      if (model[k]++ == 0) live++;
    } else {
      int r = wd_blacklist_unref(bl, addr);
      int expect = model[k] ? (int)--model[k] : -1;
      if (model[k] == 0 && expect == 0) live--;
      if (r != expect) bad++;
    }
    if (op % 997 == 0) {
      for (uint32_t j = 0; j < KEYS; j++) {
        uintptr_t a = 0x7f0000000000ULL + (uintptr_t)j * 64;
        if ((uint32_t)wd_blacklist_contains(bl, a) != (model[j] > 0)) bad++;
        if (wd_blacklist_refcount(bl, a) != model[j]) bad++;
      }
      if (wd_blacklist_size(bl) != live) bad++;
    }
  }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(wd_blacklist_evictions(bl), 0); /* never more than KEYS < CAP live */
  /* Drain completely, then the table must be empty and reusable. */
  for (uint32_t j = 0; j < KEYS; j++) {
    uintptr_t a = 0x7f0000000000ULL + (uintptr_t)j * 64;
    while (model[j]) {
      if (wd_blacklist_unref(bl, a) != (int)--model[j]) bad++;
    }
  }
  CU_ASSERT_EQUAL(bad, 0);
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), 0);
  for (uint32_t j = 0; j < CAP; j++) wd_blacklist_ref(bl, (uintptr_t)j * 4096);
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), CAP);
  CU_ASSERT_EQUAL(wd_blacklist_evictions(bl), 0);
  for (uint32_t j = 0; j < CAP; j++) CU_ASSERT_EQUAL(wd_blacklist_unref(bl, (uintptr_t)j * 4096), 0);
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), 0);
  wd_blacklist_destroy(bl);
}

/* Full table, every insert evicts: the LRU list and the hash stay consistent. */
static void test_churn_at_capacity(void) {
  enum { CAP = 64 };
  wd_blacklist *bl = wd_blacklist_create(CAP);
  CU_ASSERT_PTR_NOT_NULL_FATAL(bl);
  for (uintptr_t i = 0; i < 100000; i++) wd_blacklist_ref(bl, i * 16);
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), CAP);
  CU_ASSERT_EQUAL(wd_blacklist_evictions(bl), 100000 - CAP);
  int bad = 0;
  for (uintptr_t i = 100000 - CAP; i < 100000; i++) bad += !wd_blacklist_contains(bl, i * 16);
  for (uintptr_t i = 0; i < 100000 - CAP; i++) bad += wd_blacklist_contains(bl, i * 16);
  CU_ASSERT_EQUAL(bad, 0);
  wd_blacklist_destroy(bl);
}

typedef struct {
  wd_blacklist *bl;
  int id;
  int errors;
} worker_arg;

static void *worker(void *p) {
  worker_arg *w = p;
  /* Each thread owns its addresses, so every result is predictable, while the hash and the LRU
   * list are shared. */
  for (int round = 0; round < 2000; round++) {
    for (uintptr_t i = 0; i < 32; i++) {
      uintptr_t a = ((uintptr_t)w->id << 32) | (i * 64);
      wd_blacklist_ref(w->bl, a);
      wd_blacklist_ref(w->bl, a);
    }
    for (uintptr_t i = 0; i < 32; i++) {
      uintptr_t a = ((uintptr_t)w->id << 32) | (i * 64);
      if (!wd_blacklist_contains(w->bl, a)) w->errors++;
      if (wd_blacklist_unref(w->bl, a) != 1) w->errors++;
      if (wd_blacklist_unref(w->bl, a) != 0) w->errors++;
    }
  }
  return NULL;
}

static void test_threads(void) {
  enum { NT = 4 };
  wd_blacklist *bl = wd_blacklist_create(NT * 32);
  CU_ASSERT_PTR_NOT_NULL_FATAL(bl);
  pthread_t t[NT];
  worker_arg args[NT];
  for (int i = 0; i < NT; i++) {
    args[i] = (worker_arg){.bl = bl, .id = i + 1, .errors = 0};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, worker, &args[i]), 0);
  }
  for (int i = 0; i < NT; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < NT; i++) CU_ASSERT_EQUAL(args[i].errors, 0);
  CU_ASSERT_EQUAL(wd_blacklist_size(bl), 0);
  CU_ASSERT_EQUAL(wd_blacklist_evictions(bl), 0);
  wd_blacklist_destroy(bl);
}

int main(void) {
  wd_log_set_logger(fake_logger);
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("blacklist", NULL, NULL);
  CU_add_test(s, "create bounds", test_create_bounds);
  CU_add_test(s, "refcounts", test_refcounts);
  CU_add_test(s, "lru eviction", test_lru_eviction);
  CU_add_test(s, "cycles against a model", test_cycles_against_model);
  CU_add_test(s, "churn at capacity", test_churn_at_capacity);
  CU_add_test(s, "threads", test_threads);
  int rc = wd_test_run();
  wd_log_reset();
  return rc;
}
