/*
 * A lean allreduce lifecycle for the benchmarks: the same sequence of callbacks the test host
 * emits, called straight through the plugin's v6 function table with descriptors built on the
 * stack, and nothing else on the path (no counters, no poisoning, no locks), so that the time
 * measured is the plugin's. Loading and init go through the test host (wdh_load, wdh_comm_init).
 */
#ifndef WD_BENCH_LIFECYCLE_H
#define WD_BENCH_LIFECYCLE_H

#include <stdint.h>
#include <sys/types.h>

#include "plugin/profiler_abi.h"

#define BL_CHANNELS 2
#define BL_OPS (BL_CHANNELS * 2) /* send + recv ProxyOp per channel (ring) */

/* Callbacks of one lifecycle. Application thread: GroupApi start, GroupStartApiStop, CollApi
 * start/stop, GroupEndApiStart, Group start, Coll start/stop, Group stop, GroupApi stop.
 * Proxy thread: per channel KernelCh start/KernelChStop/stop; per ProxyOp start,
 * ProxyOpInProgress, stop; per ProxyStep start, three states, stop. */
#define BL_CB_APP 10
#define BL_CB_PROXY(steps) (BL_CHANNELS * 3 + BL_OPS * 3 + BL_OPS * (steps) * 5)

typedef struct bl_comm {
  const ncclProfiler_v6_t *t;
  void *ctx;
  pid_t pid;
  int rank;
  int steps;    /* ProxySteps per ProxyOp */
  uint64_t seq; /* AllReduce seqNumber */
} bl_comm;

/* Application-thread part; returns the Coll handle the proxy part hangs its children on. */
void *bl_app_part(bl_comm *c);
/* Proxy-thread part for the operation whose Coll handle is coll. */
void bl_proxy_part(bl_comm *c, void *coll);

static inline int bl_callbacks(int steps) { return BL_CB_APP + BL_CB_PROXY(steps); }

/* Optional window markers provided by bench/count_calls.c when it is preloaded. A system call
 * (prctl PR_SET_NAME "wdb-window-on"/"-off") also marks the window for strace. */
void bl_window(int open);

uint64_t bl_now_ns(void);

#endif
