/* The string table: interning by pointer and by text, bounds, reset, threads, overflow.
 * The table is process-wide; tests run in registration order and the overflow test is last. */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flightrec/strtab.h"
#include "wd_test_util.h"

static void test_empty_and_null(void) {
  CU_ASSERT_EQUAL(wd_str_count(), 1); /* only id 0 */
  CU_ASSERT_EQUAL(wd_str_id(NULL), 0);
  CU_ASSERT_EQUAL(wd_str_id(""), 0);
  CU_ASSERT_STRING_EQUAL(wd_str(0), "");
  CU_ASSERT_STRING_EQUAL(wd_str(WD_STR_OVERFLOW), "?");
  CU_ASSERT_STRING_EQUAL(wd_str(200), ""); /* never assigned */
  CU_ASSERT_EQUAL(wd_str_count(), 1);
}

static void test_same_pointer_same_id(void) {
  static const char *allreduce = "AllReduce";
  uint8_t a = wd_str_id(allreduce);
  CU_ASSERT_NOT_EQUAL(a, 0);
  CU_ASSERT_NOT_EQUAL(a, WD_STR_OVERFLOW);
  CU_ASSERT_EQUAL(wd_str_id(allreduce), a);
  CU_ASSERT_STRING_EQUAL(wd_str(a), "AllReduce");
  uint8_t b = wd_str_id("Broadcast");
  CU_ASSERT_NOT_EQUAL(b, a);
  CU_ASSERT_STRING_EQUAL(wd_str(b), "Broadcast");
  CU_ASSERT_EQUAL(wd_str_count(), 3);
}

static void test_equal_text_same_id(void) {
  uint8_t a = wd_str_id("ReduceScatter");
  char *copy = strdup("ReduceScatter");
  char stack[32];
  snprintf(stack, sizeof stack, "%s", "ReduceScatter");
  CU_ASSERT_PTR_NOT_NULL_FATAL(copy);
  CU_ASSERT_EQUAL(wd_str_id(copy), a);
  CU_ASSERT_EQUAL(wd_str_id(stack), a);
  unsigned n = wd_str_count();
  CU_ASSERT_EQUAL(wd_str_id(copy), a);
  CU_ASSERT_EQUAL(wd_str_count(), n); /* no new id */
  free(copy);
  /* Prefixes and extensions are other strings. */
  uint8_t r = wd_str_id("Reduce");
  CU_ASSERT_NOT_EQUAL(r, a);
  CU_ASSERT_STRING_EQUAL(wd_str(r), "Reduce");
}

static void test_long_truncated(void) {
  char longs[200];
  memset(longs, 'x', sizeof longs - 1);
  longs[sizeof longs - 1] = '\0';
  memcpy(longs, "VeryLongName_", 13);
  uint8_t id = wd_str_id(longs);
  CU_ASSERT_NOT_EQUAL(id, 0);
  const char *kept = wd_str(id);
  CU_ASSERT_EQUAL(strlen(kept), WD_STR_LEN - 1);
  CU_ASSERT_EQUAL(strncmp(kept, longs, WD_STR_LEN - 1), 0);
  /* Texts that agree on the kept prefix are the same string to the table. */
  char other[200];
  memcpy(other, longs, sizeof other);
  other[150] = 'y';
  CU_ASSERT_EQUAL(wd_str_id(other), id);
  /* Exactly WD_STR_LEN-1 characters are kept whole. */
  char fit[WD_STR_LEN];
  memset(fit, 'f', WD_STR_LEN - 1);
  fit[WD_STR_LEN - 1] = '\0';
  uint8_t f = wd_str_id(fit);
  CU_ASSERT_STRING_EQUAL(wd_str(f), fit);
}

/* After a reset the copies stay; a pointer that now holds other text gets that text's id. */
static void test_reset_ptrs(void) {
  char *buf = malloc(64);
  CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
  snprintf(buf, 64, "%s", "LoadedAtAddressA");
  uint8_t a = wd_str_id(buf);
  CU_ASSERT_STRING_EQUAL(wd_str(a), "LoadedAtAddressA");
  unsigned n = wd_str_count();
  wd_str_reset_ptrs();
  CU_ASSERT_EQUAL(wd_str_count(), n);
  CU_ASSERT_STRING_EQUAL(wd_str(a), "LoadedAtAddressA");
  snprintf(buf, 64, "%s", "ReloadedSomethingElse");
  uint8_t b = wd_str_id(buf);
  CU_ASSERT_NOT_EQUAL(b, a);
  CU_ASSERT_STRING_EQUAL(wd_str(b), "ReloadedSomethingElse");
  CU_ASSERT_STRING_EQUAL(wd_str(a), "LoadedAtAddressA");
  /* The old text interned again from another pointer finds its old id. */
  CU_ASSERT_EQUAL(wd_str_id("LoadedAtAddressA"), a);
  free(buf);
}

/* Four threads intern the same 40 texts, each from its own buffers and from shared literals, in
 * different orders. */
enum { NT = 4, NSTR = 40 };
static const char *shared_lit[NSTR];
static char shared_buf[NSTR][24];

typedef struct {
  int id;
  uint8_t own_ids[NSTR], lit_ids[NSTR];
  int bad;
} th_arg;

static void *interner(void *argp) {
  th_arg *a = argp;
  char mine[NSTR][24];
  for (int i = 0; i < NSTR; i++) snprintf(mine[i], sizeof mine[i], "thr_string_%02d", i);
  static const int step[NT] = {1, 3, 7, 9}; /* coprime with NSTR: each round visits all */
  for (int round = 0; round < 200; round++) {
    for (int k = 0; k < NSTR; k++) {
      int i = (k * step[a->id] + round) % NSTR;
      uint8_t x = wd_str_id(mine[i]);
      uint8_t y = wd_str_id(shared_lit[i]);
      if (x == 0 || x == WD_STR_OVERFLOW || strcmp(wd_str(x), mine[i]) != 0) a->bad++;
      if (y == 0 || y == WD_STR_OVERFLOW || strcmp(wd_str(y), mine[i]) != 0) a->bad++;
      /* Stable once the first round settled the pointer cache. */
      if (round > 2 && (a->own_ids[i] != x || a->lit_ids[i] != y)) a->bad++;
      a->own_ids[i] = x;
      a->lit_ids[i] = y;
    }
  }
  return NULL;
}

static void test_threads(void) {
  for (int i = 0; i < NSTR; i++) {
    snprintf(shared_buf[i], sizeof shared_buf[i], "thr_string_%02d", i);
    shared_lit[i] = shared_buf[i];
  }
  unsigned before = wd_str_count();
  pthread_t t[NT];
  th_arg args[NT];
  memset(args, 0, sizeof args);
  for (int i = 0; i < NT; i++) {
    args[i].id = i;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, interner, &args[i]), 0);
  }
  for (int i = 0; i < NT; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < NT; i++) CU_ASSERT_EQUAL(args[i].bad, 0);
  /* The shared pointers resolve to one id each, whatever thread asks. */
  for (int i = 0; i < NSTR; i++) {
    uint8_t y = wd_str_id(shared_lit[i]);
    for (int k = 0; k < NT; k++) CU_ASSERT_EQUAL(args[k].lit_ids[i], y);
    CU_ASSERT_STRING_EQUAL(wd_str(y), shared_buf[i]);
  }
  /* Concurrent first interning of one text may create a duplicate id (documented as harmless),
   * but never more than one per thread, and every id carries its text. */
  unsigned added = wd_str_count() - before;
  CU_ASSERT_TRUE(added >= NSTR && added <= NSTR * NT);
  for (unsigned id = before; id < wd_str_count(); id++)
    CU_ASSERT_EQUAL(strncmp(wd_str((uint8_t)id), "thr_string_", 11), 0);
}

static void test_overflow(void) {
  uint8_t keep = wd_str_id("AllReduce");
  char buf[WD_STR_MAX][16];
  int overflow_at = -1;
  for (int i = 0; i < WD_STR_MAX; i++) {
    snprintf(buf[i], sizeof buf[i], "fill_%d", i);
    uint8_t id = wd_str_id(buf[i]);
    if (id == WD_STR_OVERFLOW) {
      overflow_at = i;
      break;
    }
    CU_ASSERT_STRING_EQUAL(wd_str(id), buf[i]);
  }
  CU_ASSERT_TRUE_FATAL(overflow_at > 0);
  CU_ASSERT_EQUAL(wd_str_count(), WD_STR_OVERFLOW);
  CU_ASSERT_EQUAL(wd_str_id("yet another new string"), WD_STR_OVERFLOW);
  CU_ASSERT_STRING_EQUAL(wd_str(WD_STR_OVERFLOW), "?");
  /* Known strings still resolve, by pointer and by text. */
  CU_ASSERT_EQUAL(wd_str_id("AllReduce"), keep);
  char copy[16] = "AllReduce";
  CU_ASSERT_EQUAL(wd_str_id(copy), keep);
  CU_ASSERT_EQUAL(wd_str_id(buf[0]), wd_str_id("fill_0"));
  CU_ASSERT_STRING_EQUAL(wd_str(wd_str_id(buf[0])), "fill_0");
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("strtab", NULL, NULL);
  CU_add_test(s, "NULL and empty", test_empty_and_null);
  CU_add_test(s, "same pointer, same id", test_same_pointer_same_id);
  CU_add_test(s, "equal text, same id", test_equal_text_same_id);
  CU_add_test(s, "long strings truncated", test_long_truncated);
  CU_add_test(s, "reset keeps the copies", test_reset_ptrs);
  CU_add_test(s, "threads", test_threads);
  CU_add_test(s, "overflow", test_overflow);
  return wd_test_run();
}
