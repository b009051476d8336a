/* The record clock: the vDSO's entry, where it is used, tells the same time as libc's. */
#include <CUnit/Basic.h>
#include <stdint.h>
#include <time.h>

#include "base/clock.h"
#include "wd_test_util.h"

static uint64_t libc_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Before setup: libc's function on the coarse clock. */
static void test_default(void) {
  CU_ASSERT_EQUAL(wd_clock_id, CLOCK_MONOTONIC_COARSE);
  CU_ASSERT_PTR_EQUAL(atomic_load(&wd_clock_fn), clock_gettime);
}

/* Each of the two clocks, read through whatever setup chose, lies between two libc reads, and
 * a thousand reads never go back. */
static void check_clock(int precise) {
  int vdso = wd_clock_setup(precise);
  clockid_t id = precise ? CLOCK_MONOTONIC : CLOCK_MONOTONIC_COARSE;
  CU_ASSERT_EQUAL(wd_clock_id, id);
  CU_ASSERT_EQUAL(vdso, atomic_load(&wd_clock_fn) != clock_gettime);
#if defined(__GLIBC__) && defined(__x86_64__)
  CU_ASSERT_EQUAL(vdso, 1); /* glibc on x86-64 lists the vDSO: the fast path is taken */
#endif
  uint64_t a = libc_ns(id), prev = wd_now_ns(), b;
  CU_ASSERT_TRUE(prev >= a);
  int back = 0;
  for (int i = 0; i < 1000; i++) {
    uint64_t t = wd_now_ns();
    back += t < prev;
    prev = t;
  }
  b = libc_ns(id);
  CU_ASSERT_EQUAL(back, 0);
  CU_ASSERT_TRUE(prev <= b);
}

static void test_coarse(void) { check_clock(0); }
static void test_precise(void) { check_clock(1); }

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("clock", NULL, NULL);
  CU_add_test(s, "libc's coarse clock until set up", test_default);
  CU_add_test(s, "coarse clock through the chosen entry", test_coarse);
  CU_add_test(s, "precise clock through the chosen entry", test_precise);
  return wd_test_run();
}
