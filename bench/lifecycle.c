#include "lifecycle.h"

#include <string.h>
#include <sys/prctl.h>
#include <time.h>

/* Descriptors are filled the way NCCL fills them: the whole struct on the stack, then the fields
 * of the type. This cost is the same for every plugin and cancels in the comparison. */
static inline void *bl_start(bl_comm *c, ncclProfilerEventDescr_v6_t *d) {
  void *h = NULL;
  c->t->startEvent(c->ctx, &h, d);
  return h;
}

static inline void bl_state(bl_comm *c, void *h, ncclProfilerEventState_t s, uint64_t arg) {
  ncclProfilerEventStateArgs_t a;
  a.proxyStep.transSize = (size_t)arg;
  c->t->recordEventState(h, s, &a);
}

static inline void bl_init_descr(ncclProfilerEventDescr_v6_t *d, uint64_t type, void *parent,
                                 int rank) {
  memset(d, 0, sizeof(*d));
  d->type = type;
  d->parentObj = parent;
  d->rank = rank;
}

void *bl_app_part(bl_comm *c) {
  ncclProfilerEventDescr_v6_t d;
  static int stream;

  bl_init_descr(&d, ncclProfileGroupApi, NULL, c->rank);
  d.groupApi.groupDepth = 1;
  void *group_api = bl_start(c, &d);
  bl_state(c, group_api, ncclProfilerGroupStartApiStop, 0);

  bl_init_descr(&d, ncclProfileCollApi, group_api, c->rank);
  d.collApi.func = "AllReduce";
  d.collApi.count = 1 << 20;
  d.collApi.datatype = "ncclFloat32";
  d.collApi.stream = &stream;
  void *coll_api = bl_start(c, &d);
  c->t->stopEvent(coll_api);

  bl_state(c, group_api, ncclProfilerGroupEndApiStart, 0);

  bl_init_descr(&d, ncclProfileGroup, group_api, c->rank);
  void *group = bl_start(c, &d);

  bl_init_descr(&d, ncclProfileColl, coll_api, c->rank);
  d.coll.seqNumber = c->seq++;
  d.coll.func = "AllReduce";
  d.coll.sendBuff = &stream;
  d.coll.recvBuff = &stream;
  d.coll.count = 1 << 20;
  d.coll.datatype = "ncclFloat32";
  d.coll.nChannels = BL_CHANNELS;
  d.coll.nWarps = 16;
  d.coll.algo = "RING";
  d.coll.proto = "SIMPLE";
  d.coll.parentGroup = group;
  void *coll = bl_start(c, &d);
  c->t->stopEvent(coll);
  c->t->stopEvent(group);
  c->t->stopEvent(group_api);
  return coll;
}

void bl_proxy_part(bl_comm *c, void *coll) {
  ncclProfilerEventDescr_v6_t d;
  void *kch[BL_CHANNELS], *ops[BL_OPS];

  for (int ch = 0; ch < BL_CHANNELS; ch++) {
    bl_init_descr(&d, ncclProfileKernelCh, coll, c->rank);
    d.kernelCh.channelId = (uint8_t)ch;
    d.kernelCh.pTimer = 1000;
    kch[ch] = bl_start(c, &d);
  }
  for (int i = 0; i < BL_OPS; i++) {
    bl_init_descr(&d, ncclProfileProxyOp, coll, c->rank);
    d.proxyOp.pid = c->pid;
    d.proxyOp.channelId = (uint8_t)(i / 2);
    d.proxyOp.peer = 1;
    d.proxyOp.nSteps = c->steps;
    d.proxyOp.chunkSize = 1 << 19;
    d.proxyOp.isSend = !(i & 1);
    ops[i] = bl_start(c, &d);
    bl_state(c, ops[i], ncclProfilerProxyOpInProgress_v4, 0);
  }
  /* The proxy thread progresses every op a step at a time, round robin. */
  for (int s = 0; s < c->steps; s++) {
    for (int i = 0; i < BL_OPS; i++) {
      bl_init_descr(&d, ncclProfileProxyStep, ops[i], c->rank);
      d.proxyStep.step = s;
      void *st = bl_start(c, &d);
      if (!(i & 1)) {
        bl_state(c, st, ncclProfilerProxyStepSendGPUWait, 0);
        bl_state(c, st, ncclProfilerProxyStepSendPeerWait_v4, 1 << 19);
        bl_state(c, st, ncclProfilerProxyStepSendWait, 1 << 19);
      } else {
        bl_state(c, st, ncclProfilerProxyStepRecvWait, 0);
        bl_state(c, st, ncclProfilerProxyStepRecvFlushWait, 1 << 19);
        bl_state(c, st, ncclProfilerProxyStepRecvGPUWait, 1 << 19);
      }
      c->t->stopEvent(st);
    }
  }
  for (int i = 0; i < BL_OPS; i++) c->t->stopEvent(ops[i]);
  for (int ch = 0; ch < BL_CHANNELS; ch++) {
    ncclProfilerEventStateArgs_t a;
    a.kernelCh.pTimer = 2000;
    c->t->recordEventState(kch[ch], ncclProfilerKernelChStop, &a);
    c->t->stopEvent(kch[ch]);
  }
}

void wd_bench_window(int open) __attribute__((weak));

void bl_window(int open) {
  prctl(PR_SET_NAME, open ? "wdb-window-on" : "wdb-window-off", 0, 0, 0);
  if (wd_bench_window) wd_bench_window(open);
}

uint64_t bl_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
