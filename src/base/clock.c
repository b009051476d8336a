/* The record clock and the per-thread id cache (see clock.h). */
#include "base/clock.h"

#include <sys/syscall.h>
#include <unistd.h>

__thread int wd_tid_cache __attribute__((tls_model("initial-exec")));
int wd_clock_id = CLOCK_MONOTONIC_COARSE;

int wd_tid_slow(void) {
  wd_tid_cache = (int)syscall(SYS_gettid);
  return wd_tid_cache;
}

void wd_tid_forget(void) { wd_tid_cache = 0; }
