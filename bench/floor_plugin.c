/*
 * The floor for the hot-path benchmark (issue "hot path within 1.5x of a bare ring append"): a
 * plugin that only appends every callback to its communicator's ring, nothing else: a coarse
 * clock read, one fetch-add for the slot, one 64-byte store. No slot allocation, no reference
 * counts, no completion, nothing a watchdog could judge from. What nccl-watchdog adds beyond
 * this is the price of its verdicts; the bench reports ours / floor of the added cost.
 */
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plugin/profiler_abi.h"

#define EXPORT __attribute__((visibility("default")))
#define FLOOR_RING 8192u /* records per communicator, as nccl-watchdog's default ring */

typedef struct floor_rec {
  uint64_t ts;
  uint64_t handle;
  uint32_t type, phase;
  uint64_t a, b, c, d, e; /* the descriptor fields a record would keep */
} floor_rec;
_Static_assert(sizeof(floor_rec) == 64, "one cache line per record");

typedef struct floor_ctx {
  alignas(64) _Atomic uint64_t head;
  alignas(64) floor_rec ring[FLOOR_RING];
} floor_ctx;

/* The handle names the communicator the event belongs to: the ring its stop and states go to. */
typedef struct floor_handle {
  floor_ctx *ctx;
  uint32_t type;
} floor_handle;

static floor_handle g_handles[2][16]; /* [comm slot][type bit]: no allocation per event */
static _Atomic int g_nctx;

static inline uint64_t coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* vDSO: no system call */
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void append(floor_ctx *c, const void *h, uint32_t type, uint32_t phase, uint64_t a,
                          uint64_t b) {
  uint64_t t = atomic_fetch_add_explicit(&c->head, 1, memory_order_relaxed);
  floor_rec *r = &c->ring[t & (FLOOR_RING - 1)];
  floor_rec v = {coarse_ns(), (uint64_t)(uintptr_t)h, type, phase, a, b, t, 0, 0};
  memcpy(r, &v, sizeof v);
}

static ncclResult_t floor_init_v5(void **context, uint64_t comm_id, int *mask, const char *name,
                                  int nnodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  (void)comm_id, (void)name, (void)nnodes, (void)nranks, (void)rank, (void)logfn;
  const char *m = getenv("WD_EMPTY_MASK");
  if (mask) *mask = m ? (int)strtol(m, NULL, 0) : 0x65f;
  floor_ctx *c = aligned_alloc(64, sizeof(floor_ctx));
  if (!c) return ncclSystemError;
  memset(c, 0, sizeof *c);
  int slot = atomic_fetch_add(&g_nctx, 1) & 1;
  for (int i = 0; i < 16; i++) g_handles[slot][i] = (floor_handle){c, (uint32_t)i};
  *context = c;
  return ncclSuccess;
}

static ncclResult_t floor_init_v4(void **context, int *mask, const char *name, uint64_t comm_hash,
                                  int nnodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  return floor_init_v5(context, comm_hash, mask, name, nnodes, nranks, rank, logfn);
}

static floor_handle *handle_of(floor_ctx *c, uint64_t type) {
  int slot = g_handles[1][0].ctx == c;
  unsigned bit = type ? (unsigned)__builtin_ctzll(type) & 15u : 0;
  return &g_handles[slot][bit];
}

#define FLOOR_START(ver)                                                                         \
  static ncclResult_t floor_start_##ver(void *context, void **handle,                            \
                                        ncclProfilerEventDescr_##ver##_t *descr) {               \
    floor_ctx *c = context;                                                                      \
    floor_handle *h = handle_of(c, descr->type);                                                 \
    append(c, h, (uint32_t)descr->type, 0, (uint64_t)(uintptr_t)descr->parentObj,                \
           (uint64_t)descr->rank);                                                               \
    *handle = h;                                                                                 \
    return ncclSuccess;                                                                          \
  }
FLOOR_START(v4)
FLOOR_START(v5)
FLOOR_START(v6)
FLOOR_START(v7)

static ncclResult_t floor_stop(void *handle) {
  floor_handle *h = handle;
  if (h) append(h->ctx, h, h->type, 2, 0, 0);
  return ncclSuccess;
}

static ncclResult_t floor_state(void *handle, ncclProfilerEventState_t state,
                                ncclProfilerEventStateArgs_t *args) {
  floor_handle *h = handle;
  if (h) append(h->ctx, h, h->type, 1, (uint64_t)state, (uint64_t)(uintptr_t)args);
  return ncclSuccess;
}

static ncclResult_t floor_finalize(void *context) {
  free(context);
  return ncclSuccess;
}

EXPORT ncclProfiler_v7_t ncclProfiler_v7 = {"floor", floor_init_v5, floor_start_v7, floor_stop,
                                            floor_state, floor_finalize};
EXPORT ncclProfiler_v6_t ncclProfiler_v6 = {"floor", floor_init_v5, floor_start_v6, floor_stop,
                                            floor_state, floor_finalize};
EXPORT ncclProfiler_v5_t ncclProfiler_v5 = {"floor", floor_init_v5, floor_start_v5, floor_stop,
                                            floor_state, floor_finalize};
EXPORT ncclProfiler_v4_t ncclProfiler_v4 = {"floor", floor_init_v4, floor_start_v4, floor_stop,
                                            floor_state, floor_finalize};
