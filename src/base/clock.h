/* Time and thread identity for the hot path: no system call after the first use per thread. */
#ifndef WD_CLOCK_H
#define WD_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

/* The clock every record and progress stamp uses: CLOCK_MONOTONIC_COARSE by default (a few ns
 * through the vDSO, resolution of one kernel tick), CLOCK_MONOTONIC with NCCL_WATCHDOG_CLOCK=precise
 * (20-90 ns depending on the machine's clock source). Both share one time line. */
extern int wd_clock_id;
/* Called through the kernel's vDSO entry itself where wd_clock_setup found it (vdso(7)), else
 * through libc: libc's wrapper costs about as much again as a coarse read (docs/performance.md),
 * and the hot path reads the clock about twice per callback. */
typedef int (*wd_clock_fn_t)(clockid_t, struct timespec *);
extern _Atomic(wd_clock_fn_t) wd_clock_fn;
static inline uint64_t wd_now_ns(void) {
  struct timespec ts;
  atomic_load_explicit(&wd_clock_fn, memory_order_relaxed)(wd_clock_id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* Choose the clock (precise: CLOCK_MONOTONIC) and how it is read. Returns 1 when the vDSO's
 * entry is used, 0 when libc's clock_gettime is. Before the first call: libc, the coarse clock. */
int wd_clock_setup(int precise);

/* Kernel thread id, cached per thread (one gettid per thread, refreshed after fork). */
int wd_tid_slow(void);
extern __thread int wd_tid_cache __attribute__((tls_model("initial-exec")));
static inline int wd_tid(void) {
  int t = wd_tid_cache;
  return t ? t : wd_tid_slow();
}
/* Forget cached tids (called in a forked child). */
void wd_tid_forget(void);

#endif
