/*
 * What the hot path's building blocks cost on this machine: a clock read of each kind, one
 * locked read-modify-write, a system call, and the plugin's own clock read (wd_now_ns: the coarse
 * clock through the vDSO's entry where wd_clock_setup finds it, base/clock.h). Tight loops on
 * one thread; ns per operation, the best of 5 runs. Printed by run-bench.sh beside the machine line, so the figures of a run come with
 * the machine they were taken on.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#endif

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile uint64_t sink;
static _Atomic uint64_t counter;

enum { OP_MONO, OP_COARSE, OP_OURS, OP_TSC, OP_LOCKED, OP_SYSCALL, OP_COUNT };
static const char *names[OP_COUNT] = {"clock_gettime(MONOTONIC)", "clock_gettime(MONOTONIC_COARSE)",
                                      "wd_now_ns", "rdtsc", "lock xadd", "syscall(gettid)"};

static double run(int op, long n) {
  struct timespec ts;
  uint64_t acc = 0, t0 = now_ns();
  for (long i = 0; i < n; i++) {
    switch (op) {
    case OP_MONO: clock_gettime(CLOCK_MONOTONIC, &ts); acc += (uint64_t)ts.tv_nsec; break;
    case OP_COARSE: clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); acc += (uint64_t)ts.tv_nsec; break;
    case OP_OURS: acc += wd_now_ns(); break;
#ifdef HAVE_TSC
    case OP_TSC: acc += __rdtsc(); break;
#endif
    case OP_LOCKED: acc += atomic_fetch_add(&counter, 1); break;
    case OP_SYSCALL: acc += (uint64_t)syscall(SYS_gettid); break;
    default: break;
    }
  }
  sink = acc;
  return (double)(now_ns() - t0) / (double)n;
}

int main(void) {
  names[OP_OURS] = wd_clock_setup(0) ? "wd_now_ns (coarse, vDSO entry)" : "wd_now_ns (coarse, libc)";
  for (int op = 0; op < OP_COUNT; op++) {
#ifndef HAVE_TSC
    if (op == OP_TSC) continue;
#endif
    long n = op == OP_SYSCALL ? 200000 : 5000000;
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
      double t = run(op, n);
      if (t < best) best = t;
    }
    printf("%s%s %.1f ns", op ? ", " : "", names[op], best);
  }
  printf("\n");
  return 0;
}
