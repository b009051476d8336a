/*
 * Hot-path benchmark in NCCL's real callback mix: nanoseconds of plugin work per callback when
 * the callbacks come from the threads NCCL calls them from, in its order, with its overlap.
 *
 *   bench_mix PLUGIN.so -m 230|231 [-k proxy|thread] [-n ops] [-r runs] [-w warmup] [-s steps]
 *
 * One AllReduce over 2 ring channels per op, the default mask's events (0x65f), played as:
 *   application thread  GroupApi, CollApi, Group, Coll (enqueue.cc: ncclEnqueueCheck,
 *                       hostStreamPlanTask), 10 callbacks;
 *   proxy thread        per channel a send and a recv ProxyOp (proxy.cc, ncclProxyOpToArgs:
 *                       start, ProxyOpInProgress_v4), their steps posted NCCL_STEPS = 8 ahead
 *                       (send: start in SendGPUWait; recv: start in RecvWait) and progressed in
 *                       net.cc's sequence (send: SendPeerWait_v4, SendWait, stop; recv:
 *                       RecvFlushWait, RecvGPUWait, stop), the next step posted as a slot frees;
 *   KernelCh            -m 230 (NCCL 2.27-2.30): on the proxy thread (transport/profiler.cc,
 *                       profilerProxyProgress), start before the channel's steps progress, stop
 *                       before its ProxyOps stop; -m 231 (NCCL 2.31+): from a third thread, the
 *                       Profiler Thread (plugin/profiler.cc, profilerProgressOps), through the
 *                       v7 table, once the proxy thread is done with the op (a channel's kernel
 *                       cannot finish before its data moved), at its own pace against the proxy
 *                       thread's work on later ops.
 * -g plays CUDA-graph replays instead of eager ops: the AllReduce is captured once (GroupApi and
 * CollApi with graphCaptured, KernelLaunch on a capturing stream: with the stand-in driver loaded
 * from WDH_FAKE_CUDA the plugin adds its host node and event records), and each op is a replay
 * of a network plan as 2.31 reports it from the graph's host node (enqueue.cc,
 * hostStreamPlanCallback): Group, Coll (parent: the captured CollApi), their stops, then the
 * proxy and Profiler Thread parts as above. 4 application callbacks instead of 10.
 * -k proxy with -m 231 plays 2.31's table with KernelCh on the proxy thread (what the third
 * thread costs, apart from the ABI). Each thread measures its own CPU time over batches of work (CLOCK_THREAD_CPUTIME_ID, a
 * system call per batch of 32 ops, the same for every plugin), so waiting for another thread
 * and being descheduled on a small machine are not counted. Prints one line:
 *   mix plugin=NAME nccl=230|231 ops=N callbacks=C runs=R ns_per_cb=MEDIAN min=.. max=.. mask=0x..
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl_host.h"

#define CHANNELS 2
#define OPS_PER_COLL (CHANNELS * 2)
#define STEPS_OPEN 8 /* NCCL_STEPS */
#define QCAP 1024
#define BATCH 32

typedef struct mix {
  int mode;  /* 230 or 231 */
  int graph; /* -g: each op a replay of the captured AllReduce */
  void *capi; /* -g: the captured CollApi */
  int kch_on_proxy; /* KernelCh from the proxy thread (2.30's order; -k proxy with -m 231) */
  int steps; /* ProxySteps per ProxyOp */
  wdh_plugin *p;
  void *ctx;
  int mask;
} mix;

/* ---- one callback each, through the table of the mode's ABI ---------------------------------- */

typedef union descr {
  ncclProfilerEventDescr_v6_t v6;
  ncclProfilerEventDescr_v7_t v7;
} descr;

/* The descriptor is cleared whole and filled per type, as NCCL does ("= {0}" then the fields). */
static inline void *mx_start(const mix *m, descr *d) {
  void *h = NULL;
  if (m->mode == 231)
    m->p->v7->startEvent(m->ctx, &h, &d->v7);
  else
    m->p->v6->startEvent(m->ctx, &h, &d->v6);
  return h;
}
static inline void mx_stop(const mix *m, void *h) {
  if (m->mode == 231) m->p->v7->stopEvent(h);
  else m->p->v6->stopEvent(h);
}
static inline void mx_state(const mix *m, void *h, ncclProfilerEventState_t s, uint64_t arg) {
  ncclProfilerEventStateArgs_t a;
  memset(&a, 0, sizeof a);
  a.proxyStep.transSize = (size_t)arg;
  if (m->mode == 231) m->p->v7->recordEventState(h, s, &a);
  else m->p->v6->recordEventState(h, s, &a);
}

/* Common header of v6 and v7 descriptors: type, parentObj, rank sit at the same offsets. */
#define D_SET(m, d, field, val)                                                                  \
  do {                                                                                           \
    if ((m)->mode == 231) (d)->v7.field = (val);                                                 \
    else (d)->v6.field = (val);                                                                  \
  } while (0)

static inline void d_init(const mix *m, descr *d, uint64_t type, void *parent) {
  memset(d, 0, m->mode == 231 ? sizeof d->v7 : sizeof d->v6);
  D_SET(m, d, type, type);
  D_SET(m, d, parentObj, parent);
  D_SET(m, d, rank, 0);
}

/* ---- the three threads' parts of one op --------------------------------------------------- */

static uint64_t g_seq;
static int g_stream;

static void coll_descr(const mix *m, descr *d, void *parent, void *group) {
  d_init(m, d, ncclProfileColl, parent);
  D_SET(m, d, coll.seqNumber, g_seq++);
  D_SET(m, d, coll.func, "AllReduce");
  D_SET(m, d, coll.sendBuff, &g_stream);
  D_SET(m, d, coll.recvBuff, &g_stream);
  D_SET(m, d, coll.count, 1 << 18);
  D_SET(m, d, coll.datatype, "ncclFloat32");
  D_SET(m, d, coll.nChannels, CHANNELS);
  D_SET(m, d, coll.nWarps, 16);
  D_SET(m, d, coll.algo, "RING");
  D_SET(m, d, coll.proto, "SIMPLE");
  D_SET(m, d, coll.parentGroup, group);
}

/* One replay's operation-level events, from the graph's host node. */
static void *replay_part(const mix *m) {
  descr d;
  d_init(m, &d, ncclProfileGroup, NULL);
  void *group = mx_start(m, &d);
  coll_descr(m, &d, m->capi, group);
  void *coll = mx_start(m, &d);
  mx_stop(m, coll);
  mx_stop(m, group);
  return coll;
}

/* ncclEnqueueCheck's API events (enqueue.cc): GroupApi and its start state, the CollApi around
 * the append, GroupEndApiStart; returns the GroupApi, *capi the CollApi (already stopped). */
static void *api_part(const mix *m, void *stream, bool captured, void **capi) {
  descr d;
  d_init(m, &d, ncclProfileGroupApi, NULL);
  D_SET(m, &d, groupApi.groupDepth, 1);
  D_SET(m, &d, groupApi.graphCaptured, captured);
  void *gapi = mx_start(m, &d);
  mx_state(m, gapi, ncclProfilerGroupStartApiStop, 0);
  d_init(m, &d, ncclProfileCollApi, gapi);
  D_SET(m, &d, collApi.func, "AllReduce");
  D_SET(m, &d, collApi.count, 1 << 18);
  D_SET(m, &d, collApi.datatype, "ncclFloat32");
  D_SET(m, &d, collApi.stream, stream);
  D_SET(m, &d, collApi.graphCaptured, captured);
  *capi = mx_start(m, &d);
  mx_stop(m, *capi);
  mx_state(m, gapi, ncclProfilerGroupEndApiStart, 0);
  return gapi;
}

/* The capture: API events with graphCaptured, the launch into the capturing stream. */
static void capture(mix *m, wdh_comm *c) {
  wdh_gpu_capture_begin(c);
  descr d;
  void *gapi = api_part(m, c->stream, true, &m->capi);
  d_init(m, &d, ncclProfileKernelLaunch, gapi);
  D_SET(m, &d, kernelLaunch.stream, c->stream);
  void *kl = mx_start(m, &d);
  wdh_gpu_capture_kernel(c);
  mx_stop(m, kl);
  mx_stop(m, gapi);
  wdh_gpu_capture_end(c);
}

static void *app_part(const mix *m) {
  if (m->graph) return replay_part(m);
  descr d;
  void *capi;
  void *gapi = api_part(m, &g_stream, false, &capi);
  d_init(m, &d, ncclProfileGroup, NULL);
  void *group = mx_start(m, &d);
  coll_descr(m, &d, capi, group);
  void *coll = mx_start(m, &d);
  mx_stop(m, coll);
  mx_stop(m, group);
  mx_stop(m, gapi);
  return coll;
}

static void kch_start(const mix *m, void *coll, void **kch) {
  for (int ch = 0; ch < CHANNELS; ch++) {
    descr d;
    d_init(m, &d, ncclProfileKernelCh, coll);
    D_SET(m, &d, kernelCh.channelId, (uint8_t)ch);
    D_SET(m, &d, kernelCh.pTimer, 1000);
    kch[ch] = mx_start(m, &d);
  }
}

static void kch_stop(const mix *m, void *h) {
  ncclProfilerEventStateArgs_t a;
  memset(&a, 0, sizeof a);
  a.kernelCh.pTimer = 2000;
  if (m->mode == 231) m->p->v7->recordEventState(h, ncclProfilerKernelChStop, &a);
  else m->p->v6->recordEventState(h, ncclProfilerKernelChStop, &a);
  mx_stop(m, h);
}

static void *post_step(const mix *m, void *pop, int is_send, int s) {
  descr d;
  d_init(m, &d, ncclProfileProxyStep, pop);
  D_SET(m, &d, proxyStep.step, s);
  void *st = mx_start(m, &d);
  mx_state(m, st, is_send ? ncclProfilerProxyStepSendGPUWait : ncclProfilerProxyStepRecvWait, 0);
  return st;
}

static void proxy_part(const mix *m, void *coll) {
  void *pop[OPS_PER_COLL], *steps[OPS_PER_COLL][STEPS_OPEN], *kch[CHANNELS];
  pid_t pid = getpid();
  for (int i = 0; i < OPS_PER_COLL; i++) {
    descr d;
    d_init(m, &d, ncclProfileProxyOp, coll);
    D_SET(m, &d, proxyOp.pid, pid);
    D_SET(m, &d, proxyOp.channelId, (uint8_t)(i / 2));
    D_SET(m, &d, proxyOp.peer, 1);
    D_SET(m, &d, proxyOp.nSteps, m->steps);
    D_SET(m, &d, proxyOp.chunkSize, 1 << 17);
    D_SET(m, &d, proxyOp.isSend, !(i & 1));
    pop[i] = mx_start(m, &d);
    mx_state(m, pop[i], ncclProfilerProxyOpInProgress_v4, 0);
    for (int s = 0; s < m->steps && s < STEPS_OPEN; s++) steps[i][s] = post_step(m, pop[i], !(i & 1), s);
  }
  if (m->kch_on_proxy) kch_start(m, coll, kch);
  for (int s = 0; s < m->steps; s++) {
    for (int i = 0; i < OPS_PER_COLL; i++) {
      void *st = steps[i][s % STEPS_OPEN];
      if (!(i & 1)) {
        mx_state(m, st, ncclProfilerProxyStepSendPeerWait_v4, 1 << 17);
        mx_state(m, st, ncclProfilerProxyStepSendWait, 1 << 17);
      } else {
        mx_state(m, st, ncclProfilerProxyStepRecvFlushWait, 1 << 17);
        mx_state(m, st, ncclProfilerProxyStepRecvGPUWait, 1 << 17);
      }
      mx_stop(m, st);
      if (s + STEPS_OPEN < m->steps) steps[i][s % STEPS_OPEN] = post_step(m, pop[i], !(i & 1), s + STEPS_OPEN);
    }
  }
  if (m->kch_on_proxy)
    for (int ch = 0; ch < CHANNELS; ch++) kch_stop(m, kch[ch]);
  for (int i = 0; i < OPS_PER_COLL; i++) mx_stop(m, pop[i]);
}

static void profiler_part(const mix *m, void *coll) {
  void *kch[CHANNELS];
  kch_start(m, coll, kch);
  for (int ch = 0; ch < CHANNELS; ch++) kch_stop(m, kch[ch]);
}

static int callbacks_per_op(const mix *m) {
  return (m->graph ? 4 : 10) + OPS_PER_COLL * 3 + OPS_PER_COLL * m->steps * 5 + CHANNELS * 3;
}

/* ---- threads ------------------------------------------------------------------------------- */

static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct spsc {
  void *items[QCAP];
  _Alignas(64) _Atomic long head;
  _Alignas(64) _Atomic long tail;
} spsc;

typedef struct consumer {
  const mix *m;
  spsc *q;
  spsc *gate; /* items become available only once this queue's consumer is past them */
  void (*part)(const mix *, void *);
  pthread_barrier_t *start, *done;
  long n;
  int stop;
  uint64_t busy_ns;
} consumer;

static void *consumer_main(void *arg) {
  consumer *c = arg;
  for (;;) {
    pthread_barrier_wait(c->start);
    if (c->stop) return NULL;
    long tail = atomic_load(&c->q->tail), end = tail + c->n;
    uint64_t busy = 0;
    while (tail < end) {
      long want = tail + (end - tail < BATCH ? end - tail : BATCH);
      while (atomic_load_explicit(&c->q->head, memory_order_acquire) < want ||
             (c->gate && atomic_load_explicit(&c->gate->tail, memory_order_acquire) < want))
        sched_yield();
      uint64_t t0 = cpu_ns();
      for (; tail < want; tail++) {
        c->part(c->m, c->q->items[tail % QCAP]);
        atomic_store_explicit(&c->q->tail, tail + 1, memory_order_release);
      }
      busy += cpu_ns() - t0;
    }
    c->busy_ns = busy;
    pthread_barrier_wait(c->done);
  }
}

/* The application thread's part of a run: n ops, each handed to every consumer. */
static uint64_t produce(const mix *m, spsc **qs, int nq, long n) {
  uint64_t busy = 0;
  long head = atomic_load(&qs[0]->head);
  for (long done = 0; done < n;) {
    long batch = n - done < BATCH ? n - done : BATCH;
    for (int k = 0; k < nq; k++)
      while (head + batch - atomic_load_explicit(&qs[k]->tail, memory_order_acquire) > QCAP) sched_yield();
    uint64_t t0 = cpu_ns();
    for (long i = 0; i < batch; i++) {
      void *coll = app_part(m);
      for (int k = 0; k < nq; k++) {
        qs[k]->items[(head + i) % QCAP] = coll;
      }
    }
    busy += cpu_ns() - t0;
    head += batch;
    for (int k = 0; k < nq; k++) atomic_store_explicit(&qs[k]->head, head, memory_order_release);
    done += batch;
  }
  return busy;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void usage(void) {
  fprintf(stderr, "usage: bench_mix PLUGIN.so -m 230|231 [-k proxy|thread] [-g] [-n ops] [-r runs] "
                  "[-w warmup] [-s steps]\n");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') usage();
  const char *path = argv[1];
  long n = 50000, warm = 10000;
  int runs = 7, steps = 8, mode = 230, kch = -1, graph = 0, opt;
  optind = 2;
  while ((opt = getopt(argc, argv, "gm:k:n:r:w:s:")) != -1) {
    switch (opt) {
    case 'g': graph = 1; break;
    case 'm': mode = atoi(optarg); break;
    case 'k': kch = !strcmp(optarg, "proxy") ? 1 : !strcmp(optarg, "thread") ? 0 : -2; break;
    case 'n': n = atol(optarg); break;
    case 'r': runs = atoi(optarg); break;
    case 'w': warm = atol(optarg); break;
    case 's': steps = atoi(optarg); break;
    default: usage();
    }
  }
  if (kch == -1) kch = mode == 230;
  if ((mode != 230 && mode != 231) || kch < 0 || (mode == 230 && !kch) || n < 1 || runs < 1 || runs > 99 || warm < 0 || steps < 1) usage();

  /* The stand-in driver, where given, before the plugin (NCCL has the driver loaded by then). */
  if (graph && getenv("WDH_FAKE_CUDA") && wdh_fake_cuda_load() != 0) return 1;
  wdh_plugin plugin;
  if (wdh_load(&plugin, path, mode == 231 ? 7 : 0) != 0) return 1;
  if ((mode == 231 && !plugin.v7) || (mode == 230 && !plugin.v6)) {
    fprintf(stderr, "bench_mix: %s has no ncclProfiler_v%d\n", path, mode == 231 ? 7 : 6);
    return 1;
  }
  wdh_comm comm;
  wdh_comm_init(&comm, &plugin, 0x2310, "mix", 2, 2, 0);
  mix m = {.mode = mode, .kch_on_proxy = kch, .steps = steps, .p = &plugin, .ctx = comm.ctx,
           .mask = __atomic_load_n(&wdh_activation_mask, __ATOMIC_RELAXED)};
  if (graph) capture(&m, &comm);
  m.graph = graph;

  /* As bench_hotpath: one op, then more than a watchdog poll, so every run sees whole rings. */
  proxy_part(&m, app_part(&m));
  wdh_sleep_ms(1500);

  static spsc qp, qk;
  pthread_barrier_t start, done;
  int nthreads = kch ? 1 : 2;
  pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
  pthread_barrier_init(&done, NULL, (unsigned)nthreads + 1);
  consumer proxy = {.m = &m, .q = &qp, .part = proxy_part, .start = &start, .done = &done};
  /* A channel's kernel cannot finish before the proxy moved its data: the Profiler Thread sees
   * an op's channels complete once the proxy thread is done with it (the usual 2.31 order: its
   * KernelCh after the op's ProxyOps stopped, the Coll released on the Profiler Thread). */
  consumer prof = {.m = &m, .q = &qk, .gate = &qp, .part = profiler_part, .start = &start, .done = &done};
  pthread_t th[2];
  if (pthread_create(&th[0], NULL, consumer_main, &proxy) != 0) return 1;
  if (nthreads == 2 && pthread_create(&th[1], NULL, consumer_main, &prof) != 0) return 1;
  spsc *qs[2] = {&qp, &qk};

  double per_cb[99];
  int cb = callbacks_per_op(&m);
  for (int r = -1; r < runs; r++) {
    long ops = r < 0 ? warm : n;
    proxy.n = prof.n = ops;
    pthread_barrier_wait(&start);
    uint64_t app = produce(&m, qs, nthreads, ops);
    pthread_barrier_wait(&done);
    uint64_t busy = app + proxy.busy_ns + (nthreads == 2 ? prof.busy_ns : 0);
    if (r >= 0) per_cb[r] = (double)busy / ((double)ops * cb);
  }
  proxy.stop = prof.stop = 1;
  pthread_barrier_wait(&start);
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);

  wdh_comm_finalize(&comm);
  char name[64];
  snprintf(name, sizeof name, "%s", plugin.name ? plugin.name : "?");
  wdh_unload(&plugin);
  qsort(per_cb, (size_t)runs, sizeof(double), cmp_double);
  printf("mix plugin=%s nccl=%d kernelch=%s%s ops=%ld callbacks=%d runs=%d ns_per_cb=%.2f min=%.2f "
         "max=%.2f mask=0x%x\n",
         name, mode, kch ? "proxy" : "thread", graph ? " replays=1" : "", n, cb, runs, per_cb[runs / 2],
         per_cb[0], per_cb[runs - 1], m.mask);
  return wdh_failures() ? 1 : 0;
}
