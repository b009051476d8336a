/*
 * The NCCL-facing entry points: ncclProfiler_v7, _v6, _v5 and _v4. Each version's descriptor is
 * normalised into one internal start request; everything after that is version-independent.
 * Every callback returns ncclSuccess; init "fails" only by returning a NULL context.
 */
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "events/store.h"
#include "events/track.h"
#include "flightrec/strtab.h"
#include "plugin/lifecycle.h"
#include "plugin/profiler_abi.h"

#define WD_EXPORT __attribute__((visibility("default")))

/* The layers below speak of log levels and event types with NCCL's numbers, not its header. */
_Static_assert(WD_LOG_WARN == (int)NCCL_LOG_WARN && WD_LOG_INFO == (int)NCCL_LOG_INFO &&
                   WD_LOG_TRACE == (int)NCCL_LOG_TRACE && WD_LOG_ABORT == (int)NCCL_LOG_ABORT &&
                   WD_LOG_SUBSYS == NCCL_PROFILE,
               "log levels agree with NCCL's");
_Static_assert(1u << WD_T_COLL == ncclProfileColl && 1u << WD_T_PROXYSTEP == ncclProfileProxyStep &&
                   1u << WD_T_KERNELCH == ncclProfileKernelCh && 1u << WD_T_CECOLL == ncclProfileCeColl,
               "event type bits agree with NCCL's");

static inline unsigned wd_type_of(uint64_t bit) {
  if (bit == 0 || (bit & (bit - 1)) != 0) return WD_T_UNKNOWN;
  unsigned t = (unsigned)__builtin_ctzll(bit);
  return t < WD_T_COUNT ? t : WD_T_UNKNOWN;
}

/* The proxy-level members are the same in v4, v5 and v6. A tail call: the event layer stores
 * the handle and returns 0 (ncclSuccess). A ProxyOp's rank rides above its chunk size: for a PXN
 * send progressed here for another process it is the ORIGINATING rank (plugin/profiler.cc,
 * ncclProfilerStartProxyOpEvent: sub->rank), which tells that process apart where pids and
 * addresses coincide. */
#define wd_child_start(context, eHandle, d, type)                                              \
  ((ncclResult_t)((type) == WD_T_PROXYSTEP                                                     \
       ? wd_track_step_start((context), (eHandle), (d)->parentObj, (uint32_t)(d)->proxyStep.step) \
   : (type) == WD_T_KERNELCH                                                                   \
       ? wd_track_kch_start((context), (eHandle), (d)->parentObj, (d)->kernelCh.pTimer,        \
                            (uint8_t)(d)->kernelCh.channelId)                                  \
       : wd_track_proxyop_start(                                                               \
             (context), (eHandle), (d)->parentObj,                                             \
             (uint64_t)(uint32_t)(d)->proxyOp.chunkSize | ((uint64_t)(uint32_t)((d)->rank + 1) << 32), \
             (uint32_t)(d)->proxyOp.nSteps | ((uint64_t)(uint32_t)(d)->proxyOp.pid << 32),     \
             wd_child_meta((type), (d)->proxyOp.isSend ? WD_F_SEND : 0,                        \
                           (d)->proxyOp.channelId, (d)->proxyOp.peer))))
_Static_assert(ncclSuccess == 0, "the event layer's 0 is ncclSuccess");

static inline void wd_req_init(wd_start_req *req, void *context, void *parent, unsigned type) {
  /* Field by field: the record's ten words as stores the compiler inlines, not a memset call. */
  for (unsigned i = 0; i < WD_RECORD_WORDS; i++) req->recw.w[i] = 0;
  req->context = context;
  req->parent_obj = parent;
  req->group_obj = NULL;
  req->stream = NULL;
  req->pid = 0;
  req->user_tag = 0;
  req->rec.type = (uint8_t)type;
  req->rec.peer = -1;
}

/* Fields common to v4, v5 and v6 (the union members they share), beyond the proxy thread's types
 * that wd_child_start takes before the switch. */
#define WD_FILL_COMMON(req, d)                                                                 \
  case WD_T_NETPLUGIN: (req)->rec.a = (uint64_t)(d)->netPlugin.id; break;

/* Fields of the v5 members (also in v6). */
#define WD_FILL_V5(req, d)                                                                     \
  case WD_T_GROUPAPI:                                                                          \
    (req)->rec.n = (d)->groupApi.groupDepth;                                                   \
    if ((d)->groupApi.graphCaptured) (req)->rec.flags |= WD_F_GRAPH;                           \
    break;                                                                                     \
  case WD_T_COLLAPI:                                                                           \
    (req)->rec.func = wd_str_id_hot((d)->collApi.func);                                            \
    (req)->rec.count = (d)->collApi.count;                                                     \
    (req)->rec.dtype = wd_str_id_hot((d)->collApi.datatype);                                       \
    (req)->rec.peer = (d)->collApi.root;                                                       \
    if ((d)->collApi.graphCaptured) (req)->rec.flags |= WD_F_GRAPH;                            \
    break;                                                                                     \
  case WD_T_P2PAPI:                                                                            \
    (req)->rec.func = wd_str_id_hot((d)->p2pApi.func);                                             \
    (req)->rec.count = (d)->p2pApi.count;                                                      \
    (req)->rec.dtype = wd_str_id_hot((d)->p2pApi.datatype);                                        \
    if ((d)->p2pApi.graphCaptured) (req)->rec.flags |= WD_F_GRAPH;                             \
    break;                                                                                     \
  case WD_T_KERNELLAUNCH: (req)->stream = (d)->kernelLaunch.stream; break;                    \
  case WD_T_COLL:                                                                              \
    (req)->rec.a = (d)->coll.seqNumber;                                                        \
    (req)->rec.func = wd_str_id_hot((d)->coll.func);                                               \
    (req)->rec.count = (d)->coll.count;                                                        \
    (req)->rec.peer = (d)->coll.root;                                                          \
    (req)->rec.dtype = wd_str_id_hot((d)->coll.datatype);                                          \
    (req)->rec.nChannels = (d)->coll.nChannels;                                                \
    (req)->rec.nWarps = (d)->coll.nWarps;                                                      \
    (req)->rec.algo = wd_str_id_hot((d)->coll.algo);                                               \
    (req)->rec.proto = wd_str_id_hot((d)->coll.proto);                                             \
    (req)->group_obj = (d)->coll.parentGroup;                                                  \
    break;                                                                                     \
  case WD_T_P2P:                                                                               \
    (req)->group_obj = (d)->p2p.parentGroup;                                                   \
    (req)->rec.func = wd_str_id_hot((d)->p2p.func);                                                \
    (req)->rec.dtype = wd_str_id_hot((d)->p2p.datatype);                                           \
    (req)->rec.count = (d)->p2p.count;                                                         \
    (req)->rec.peer = (d)->p2p.peer;                                                           \
    (req)->rec.nChannels = (d)->p2p.nChannels;                                                 \
    break;

/* Fields of the v6 members (also in v7): the CE collectives. */
#define WD_FILL_V6(req, d)                                                                     \
  case WD_T_CECOLL:                                                                            \
    (req)->rec.a = (d)->ceColl.seqNumber;                                                      \
    (req)->rec.func = wd_str_id_hot((d)->ceColl.func);                                             \
    (req)->rec.count = (d)->ceColl.count;                                                      \
    (req)->rec.peer = (d)->ceColl.root;                                                        \
    (req)->rec.dtype = wd_str_id_hot((d)->ceColl.datatype);                                        \
    (req)->stream = (d)->ceColl.stream;                                                        \
    break;                                                                                     \
  case WD_T_CESYNC: (req)->rec.n = (d)->ceCollSync.nRanks; break;                             \
  case WD_T_CEBATCH:                                                                           \
    (req)->rec.n = (d)->ceCollBatch.numOps;                                                    \
    (req)->rec.count = (d)->ceCollBatch.totalBytes;                                            \
    break;

/* Whether the plugin runs (the general start needs it said; wd_child_start_slow checks it for
 * the proxy thread's types); when not, the handle is NULL. */
static inline int wd_running(void **eHandle) {
  if (atomic_load_explicit(&wd_store_active, memory_order_acquire)) return 1;
  *eHandle = NULL;
  return 0;
}

/* The entry points tell the proxy thread's types apart first (most starts) and hand them on as
 * tail calls; the general decoding (wd_start_general_vN) is out of line, so those need no stack
 * frame. The proxy thread's types need a live parent of the context, which the plugin's state
 * vouches for (wd_child_start_slow checks it for the others). */
#define WD_START_ENTRY(v)                                                                      \
  static ncclResult_t wd_start_v##v(void *context, void **eHandle,                             \
                                    ncclProfilerEventDescr_v##v##_t *d) {                      \
    if (eHandle == NULL) return ncclSuccess;                                                   \
    if (context == NULL || d == NULL) {                                                        \
      *eHandle = NULL;                                                                         \
      return ncclSuccess;                                                                      \
    }                                                                                          \
    if (d->type == ncclProfileProxyStep)                                                       \
      return wd_child_start(context, eHandle, d, WD_T_PROXYSTEP);                              \
    if (d->type == ncclProfileKernelCh)                                                        \
      return wd_child_start(context, eHandle, d, WD_T_KERNELCH);                               \
    if (d->type == ncclProfileProxyOp)                                                         \
      return wd_child_start(context, eHandle, d, WD_T_PROXYOP);                                \
    if (!wd_running(eHandle)) return ncclSuccess;                                              \
    return wd_start_general_v##v(context, eHandle, d);                                         \
  }

/* v7 (NCCL 2.31): the v6 decoding plus each call's userTag, isSymColl and the KernelPhase
 * events of a kernel channel (a child of its KernelCh, from NCCL's Profiler Thread). */
static __attribute__((noinline)) ncclResult_t wd_start_general_v7(void *context, void **eHandle,
                                                                 ncclProfilerEventDescr_v7_t *d) {
  *eHandle = NULL;
  unsigned type = wd_type_of(d->type);
  if (type == WD_T_UNKNOWN) return ncclSuccess;
  if (type == WD_T_KERNELPHASE)
    return (ncclResult_t)wd_track_child_start(
        context, eHandle, d->parentObj, d->kernelPhase.pTimer, d->kernelPhase.phaseId,
        wd_child_meta(WD_T_KERNELPHASE, 0, d->kernelPhase.channelId, -1));
  wd_start_req req;
  wd_req_init(&req, context, d->parentObj, type);
  switch (type) {
    WD_FILL_COMMON(&req, d)
    WD_FILL_V5(&req, d)
    WD_FILL_V6(&req, d)
  default: break;
  }
  /* Which phase or step of training the call belongs to (NCCL's per-call userProfilerTag). */
  switch (type) {
  case WD_T_COLLAPI: req.user_tag = d->collApi.userTag; break;
  case WD_T_P2PAPI: req.user_tag = d->p2pApi.userTag; break;
  case WD_T_COLL:
    req.user_tag = d->coll.userTag;
    if (d->coll.isSymColl) req.rec.flags |= WD_F_SYMCOLL;
    break;
  case WD_T_P2P: req.user_tag = d->p2p.userTag; break;
  case WD_T_CECOLL: req.user_tag = d->ceColl.userTag; break;
  default: break;
  }
  *eHandle = wd_track_start(&req);
  return ncclSuccess;
}

WD_START_ENTRY(7)

static __attribute__((noinline)) ncclResult_t wd_start_general_v6(void *context, void **eHandle,
                                                                 ncclProfilerEventDescr_v6_t *d) {
  *eHandle = NULL;
  unsigned type = wd_type_of(d->type);
  if (type == WD_T_UNKNOWN || type == WD_T_KERNELPHASE) return ncclSuccess;
  wd_start_req req;
  wd_req_init(&req, context, d->parentObj, type);
  switch (type) {
    WD_FILL_COMMON(&req, d)
    WD_FILL_V5(&req, d)
    WD_FILL_V6(&req, d)
  default: break;
  }
  *eHandle = wd_track_start(&req);
  return ncclSuccess;
}

WD_START_ENTRY(6)

static __attribute__((noinline)) ncclResult_t wd_start_general_v5(void *context, void **eHandle,
                                                                 ncclProfilerEventDescr_v5_t *d) {
  *eHandle = NULL;
  unsigned type = wd_type_of(d->type);
  if (type == WD_T_UNKNOWN || type >= WD_T_CECOLL) return ncclSuccess;
  wd_start_req req;
  wd_req_init(&req, context, d->parentObj, type);
  switch (type) {
    WD_FILL_COMMON(&req, d)
    WD_FILL_V5(&req, d)
  default: break;
  }
  *eHandle = wd_track_start(&req);
  return ncclSuccess;
}

WD_START_ENTRY(5)

static __attribute__((noinline)) ncclResult_t wd_start_general_v4(void *context, void **eHandle,
                                                                 ncclProfilerEventDescr_v4_t *d) {
  *eHandle = NULL;
  unsigned type = wd_type_of(d->type);
  if (type == WD_T_UNKNOWN || type >= WD_T_GROUPAPI) return ncclSuccess;
  wd_start_req req;
  wd_req_init(&req, context, d->parentObj, type);
  switch (type) {
    WD_FILL_COMMON(&req, d)
  case WD_T_COLL:
    req.rec.a = d->coll.seqNumber;
    req.rec.func = wd_str_id_hot(d->coll.func);
    req.rec.count = d->coll.count;
    req.rec.peer = d->coll.root;
    req.rec.dtype = wd_str_id_hot(d->coll.datatype);
    req.rec.nChannels = d->coll.nChannels;
    req.rec.nWarps = d->coll.nWarps;
    req.rec.algo = wd_str_id_hot(d->coll.algo);
    req.rec.proto = wd_str_id_hot(d->coll.proto);
    req.group_obj = d->parentObj;
    break;
  case WD_T_P2P:
    req.group_obj = d->parentObj;
    req.rec.func = wd_str_id_hot(d->p2p.func);
    req.rec.dtype = wd_str_id_hot(d->p2p.datatype);
    req.rec.count = d->p2p.count;
    req.rec.peer = d->p2p.peer;
    req.rec.nChannels = d->p2p.nChannels;
    break;
  default: break;
  }
  *eHandle = wd_track_start(&req);
  return ncclSuccess;
}

WD_START_ENTRY(4)

/* Stop and state need no check that the plugin is running: a handle is followed only when it
 * names a live slot in the arena, and every slot is retired (its tag moved on) before the last
 * finalize returns (pool.c, wd_pool_retire), so a late call finds a stale handle. */
static ncclResult_t wd_stop(void *eHandle) {
  return (ncclResult_t)wd_track_stop(eHandle);
}

/* How wd_track_state reads NCCL's state arguments: every member starts at offset 0. */
_Static_assert(offsetof(ncclProfilerEventStateArgs_t, proxyStep.transSize) == 0 &&
                   sizeof(((ncclProfilerEventStateArgs_t *)0)->proxyStep.transSize) == sizeof(uint64_t) &&
                   offsetof(ncclProfilerEventStateArgs_t, proxyCtrl.appendedProxyOps) == 0 &&
                   offsetof(ncclProfilerEventStateArgs_t, kernelCh.pTimer) == 0 &&
                   sizeof(ncclProfilerEventStateArgs_t) >= sizeof(uint64_t),
               "state arguments begin at the union's start");

static ncclResult_t wd_record_state(void *eHandle, ncclProfilerEventState_t eState,
                                    ncclProfilerEventStateArgs_t *eStateArgs) {
  return (ncclResult_t)wd_track_state(eHandle, (int)eState, eStateArgs);
}

static ncclResult_t wd_init_common(void **context, int abi, uint64_t commId, int *mask,
                                   const char *commName, int nNodes, int nranks, int rank,
                                   ncclDebugLogger_t logfn) {
  if (context == NULL) return ncclSuccess;
  *context = NULL;
  wd_context *ctx = NULL;
  wd_lifecycle_init(&ctx, abi, commId, commName, nNodes, nranks, rank, mask, (wd_logger_fn)logfn);
  *context = ctx;
  return ncclSuccess;
}

static ncclResult_t wd_init_v7(void **context, uint64_t commId, int *mask, const char *commName,
                               int nNodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  return wd_init_common(context, 7, commId, mask, commName, nNodes, nranks, rank, logfn);
}

static ncclResult_t wd_init_v6(void **context, uint64_t commId, int *mask, const char *commName,
                               int nNodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  return wd_init_common(context, 6, commId, mask, commName, nNodes, nranks, rank, logfn);
}

static ncclResult_t wd_init_v5(void **context, uint64_t commId, int *mask, const char *commName,
                               int nNodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  return wd_init_common(context, 5, commId, mask, commName, nNodes, nranks, rank, logfn);
}

static ncclResult_t wd_init_v4(void **context, int *mask, const char *commName, uint64_t commHash,
                               int nNodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  return wd_init_common(context, 4, commHash, mask, commName, nNodes, nranks, rank, logfn);
}

static ncclResult_t wd_finalize(void *context) {
  if (context) wd_lifecycle_finalize((wd_context *)context);
  return ncclSuccess;
}

WD_EXPORT ncclProfiler_v7_t ncclProfiler_v7 = {
    "nccl-watchdog", wd_init_v7, wd_start_v7, wd_stop, wd_record_state, wd_finalize};
WD_EXPORT ncclProfiler_v6_t ncclProfiler_v6 = {
    "nccl-watchdog", wd_init_v6, wd_start_v6, wd_stop, wd_record_state, wd_finalize};
WD_EXPORT ncclProfiler_v5_t ncclProfiler_v5 = {
    "nccl-watchdog", wd_init_v5, wd_start_v5, wd_stop, wd_record_state, wd_finalize};
WD_EXPORT ncclProfiler_v4_t ncclProfiler_v4 = {
    "nccl-watchdog", wd_init_v4, wd_start_v4, wd_stop, wd_record_state, wd_finalize};
