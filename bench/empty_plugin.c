/*
 * The baseline for the hot-path benchmark: a profiler plugin that does nothing. It returns
 * non-NULL handles so NCCL (and the bench driver) take the same paths as with a real plugin; the
 * cost measured against it is the cost of the call itself.
 */
#include <stdlib.h>

#include "plugin/profiler_abi.h"

#define EXPORT __attribute__((visibility("default")))

static char empty_handle;

static ncclResult_t empty_init_v5(void **context, uint64_t comm_id, int *mask, const char *name,
                                  int nnodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  (void)comm_id, (void)name, (void)nnodes, (void)nranks, (void)rank, (void)logfn;
  /* Ask for the same events as nccl-watchdog's default (WD_EMPTY_MASK overrides), so that on a
   * real NCCL both plugins are called equally often and only the work differs. */
  const char *m = getenv("WD_EMPTY_MASK");
  if (mask) *mask = m ? (int)strtol(m, NULL, 0) : 0x65f;
  *context = malloc(1);
  return ncclSuccess;
}

static ncclResult_t empty_init_v4(void **context, int *mask, const char *name, uint64_t comm_hash,
                                  int nnodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  return empty_init_v5(context, comm_hash, mask, name, nnodes, nranks, rank, logfn);
}

/* One start per descriptor version: the argument types differ, the work does not. */
#define EMPTY_START(ver)                                                                         \
  static ncclResult_t empty_start_##ver(void *context, void **handle,                            \
                                        ncclProfilerEventDescr_##ver##_t *descr) {               \
    (void)context, (void)descr;                                                                  \
    *handle = &empty_handle;                                                                     \
    return ncclSuccess;                                                                          \
  }
EMPTY_START(v4)
EMPTY_START(v5)
EMPTY_START(v6)
EMPTY_START(v7)

static ncclResult_t empty_stop(void *handle) {
  (void)handle;
  return ncclSuccess;
}

static ncclResult_t empty_state(void *handle, ncclProfilerEventState_t state,
                                ncclProfilerEventStateArgs_t *args) {
  (void)handle, (void)state, (void)args;
  return ncclSuccess;
}

static ncclResult_t empty_finalize(void *context) {
  free(context);
  return ncclSuccess;
}

EXPORT ncclProfiler_v7_t ncclProfiler_v7 = {"empty", empty_init_v5, empty_start_v7, empty_stop,
                                            empty_state, empty_finalize};
EXPORT ncclProfiler_v6_t ncclProfiler_v6 = {"empty", empty_init_v5, empty_start_v6, empty_stop,
                                            empty_state, empty_finalize};
EXPORT ncclProfiler_v5_t ncclProfiler_v5 = {"empty", empty_init_v5, empty_start_v5, empty_stop,
                                            empty_state, empty_finalize};
EXPORT ncclProfiler_v4_t ncclProfiler_v4 = {"empty", empty_init_v4, empty_start_v4, empty_stop,
                                            empty_state, empty_finalize};
