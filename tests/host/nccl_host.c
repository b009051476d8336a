/* wdhost: plays NCCL's part towards a profiler plugin (see nccl_host.h). */
#include "nccl_host.h"

#include <cjson/cJSON.h>
#include <zlib.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(ncclProfilerEventDescr_v5_t) == sizeof(ncclProfilerEventDescr_v6_t),
               "v5 and v6 descriptors share a layout for the members the host fills");

/* Written by the plugin (it owns the mask); every init gets this address. */
int wdh_activation_mask = 0;

static atomic_long g_failures;
static atomic_long g_calls;

/* A value no plugin would return as a handle: tells "did not write *eHandle" apart. */
#define WDH_POISON ((void *)(uintptr_t)0x5a5a5a5a5a5a5a5aULL)

static void fail(const char *what, int rc) {
  long n = atomic_fetch_add(&g_failures, 1) + 1;
  if (n <= 20) fprintf(stderr, "wdhost: callback failure #%ld: %s returned %d\n", n, what, rc);
}

long wdh_failures(void) { return atomic_load(&g_failures); }
void wdh_failures_reset(void) { atomic_store(&g_failures, 0); }
long wdh_calls(void) { return atomic_load(&g_calls); }

int wdh_effective_mask(int m) {
  if (m & (ncclProfileNetPlugin | ncclProfileProxyStep)) m |= ncclProfileProxyOp;
  if (m & (ncclProfileProxyOp | ncclProfileKernelCh)) m |= ncclProfileColl | ncclProfileP2p;
  if (m & (ncclProfileColl | ncclProfileP2p)) m |= ncclProfileGroup;
  if (m & (ncclProfileCollApi | ncclProfileP2pApi | ncclProfileKernelLaunch))
    m |= ncclProfileGroupApi;
  return m;
}

/* ---------------------------------------------------------------------------------------------
 * Logger
 * ------------------------------------------------------------------------------------------- */

#define WDH_LOG_LINES 4096
#define WDH_LOG_LEN 512

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  int level;
  char text[WDH_LOG_LEN];
} g_log[WDH_LOG_LINES];
static int g_log_n;

void wdh_logfn(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
               const char *fmt, ...) {
  (void)flags;
  char buf[WDH_LOG_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt ? fmt : "(null fmt)", ap);
  va_end(ap);
  pthread_mutex_lock(&g_log_mu);
  if (g_log_n < WDH_LOG_LINES) {
    g_log[g_log_n].level = (int)level;
    memcpy(g_log[g_log_n].text, buf, sizeof(buf));
    g_log_n++;
  }
  pthread_mutex_unlock(&g_log_mu);
  const char *echo = getenv("WDH_LOG_ECHO");
  if (echo && echo[0] == '1')
    fprintf(stderr, "wdhost log[%d] %s:%d %s\n", (int)level, file ? file : "?", line, buf);
  else if (echo && !strcmp(echo, "warn") && level == NCCL_LOG_WARN)
    fprintf(stderr, "NCCL WARN %s\n", buf); /* what NCCL's logger prints for a WARN */
}

int wdh_log_count(int level) {
  int n = 0;
  pthread_mutex_lock(&g_log_mu);
  for (int i = 0; i < g_log_n; i++)
    if (level < 0 || g_log[i].level == level) n++;
  pthread_mutex_unlock(&g_log_mu);
  return n;
}

int wdh_log_contains(int level, const char *substr) {
  int n = 0;
  pthread_mutex_lock(&g_log_mu);
  for (int i = 0; i < g_log_n; i++)
    if ((level < 0 || g_log[i].level == level) && strstr(g_log[i].text, substr)) n++;
  pthread_mutex_unlock(&g_log_mu);
  return n;
}

void wdh_log_clear(void) {
  pthread_mutex_lock(&g_log_mu);
  g_log_n = 0;
  pthread_mutex_unlock(&g_log_mu);
}

void wdh_log_print(void) {
  pthread_mutex_lock(&g_log_mu);
  for (int i = 0; i < g_log_n; i++) fprintf(stderr, "  [%d] %s\n", g_log[i].level, g_log[i].text);
  pthread_mutex_unlock(&g_log_mu);
}

/* ---------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------- */

int wdh_load(wdh_plugin *p, const char *path, int max_version) {
  memset(p, 0, sizeof(*p));
  if (!path) {
    fprintf(stderr, "wdhost: no plugin path\n");
    return -1;
  }
  p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!p->dl) {
    fprintf(stderr, "wdhost: dlopen(%s): %s\n", path, dlerror());
    return -1;
  }
  if (max_version >= 7) {
    p->v7 = dlsym(p->dl, "ncclProfiler_v7");
    if (p->v7) {
      p->version = 7;
      p->name = p->v7->name;
      return 0;
    }
  }
  if (max_version == 0 || max_version >= 6) {
    p->v6 = dlsym(p->dl, "ncclProfiler_v6");
    if (p->v6) {
      p->version = 6;
      p->name = p->v6->name;
      return 0;
    }
  }
  if (max_version == 0 || max_version >= 5) {
    p->v5 = dlsym(p->dl, "ncclProfiler_v5");
    if (p->v5) {
      p->version = 5;
      p->name = p->v5->name;
      return 0;
    }
  }
  p->v4 = dlsym(p->dl, "ncclProfiler_v4");
  if (p->v4) {
    p->version = 4;
    p->name = p->v4->name;
    return 0;
  }
  fprintf(stderr, "wdhost: %s exports no usable ncclProfiler_v6/v5/v4\n", path);
  dlclose(p->dl);
  p->dl = NULL;
  return -1;
}

void wdh_unload(wdh_plugin *p) {
  if (p->dl) dlclose(p->dl);
  memset(p, 0, sizeof(*p));
}

const char *wdh_plugin_path(void) {
  const char *s = getenv("WDH_PLUGIN");
  return (s && *s) ? s : NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Communicators
 * ------------------------------------------------------------------------------------------- */

static const char *const g_funcs[WDH_FUNC_COUNT] = {"Broadcast", "Reduce", "AllGather",
                                                    "ReduceScatter", "AllReduce"};

int wdh_func_index(const char *func) {
  if (!func) return -1;
  for (int i = 0; i < WDH_FUNC_COUNT; i++)
    if (strcmp(func, g_funcs[i]) == 0) return i;
  return -1;
}

/* ---------------------------------------------------------------------------------------------
 * The stand-in CUDA driver
 * ------------------------------------------------------------------------------------------- */

static struct {
  void *dl;
  void *(*stream_create)(void);
  uint64_t (*launch)(void *);
  void (*complete)(void *, uint64_t);
  void (*set_capturing)(void *, int);
  void (*set_error)(int);
  long (*events_live)(void);
  long (*records)(void);
  /* Capture and replay (optional: older stand-ins lack them). */
  int (*capture_begin)(void *);
  void (*capture_end)(void *);
  int (*capture_kernel)(void *);
  uint64_t (*graph_launch)(void *, int);
  void (*capture_ids)(int);
  int (*graph_nodes)(int, int);
  void (*refuse_nodes)(int);
  void (*graph_destroy)(int);
  long (*user_objects)(void);
  void (*set_device)(int);
} g_fake;

static int fake_sym(void *slot, const char *name) {
  void *sym = dlsym(g_fake.dl, name);
  if (!sym) return -1;
  *(void **)slot = sym;
  return 0;
}

int wdh_fake_cuda_load(void) {
  if (g_fake.dl) return 0;
  const char *path = getenv("WDH_FAKE_CUDA");
  if (!path || !*path) {
    fprintf(stderr, "wdh: WDH_FAKE_CUDA not set\n");
    return -1;
  }
  /* Global, as NCCL's own dlopen of the driver leaves it: the plugin finds it by soname. */
  g_fake.dl = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!g_fake.dl || fake_sym(&g_fake.stream_create, "wdfake_stream_create") ||
      fake_sym(&g_fake.launch, "wdfake_launch") || fake_sym(&g_fake.complete, "wdfake_complete") ||
      fake_sym(&g_fake.set_capturing, "wdfake_set_capturing") ||
      fake_sym(&g_fake.set_error, "wdfake_set_error") ||
      fake_sym(&g_fake.events_live, "wdfake_events_live") || fake_sym(&g_fake.records, "wdfake_records")) {
    fprintf(stderr, "wdh: cannot load the stand-in driver %s: %s\n", path, dlerror());
    return -1;
  }
  fake_sym(&g_fake.capture_begin, "wdfake_capture_begin");
  fake_sym(&g_fake.capture_end, "wdfake_capture_end");
  fake_sym(&g_fake.capture_kernel, "wdfake_capture_kernel");
  fake_sym(&g_fake.graph_launch, "wdfake_graph_launch");
  fake_sym(&g_fake.capture_ids, "wdfake_capture_ids");
  fake_sym(&g_fake.graph_nodes, "wdfake_graph_nodes");
  fake_sym(&g_fake.refuse_nodes, "wdfake_refuse_nodes");
  fake_sym(&g_fake.graph_destroy, "wdfake_graph_destroy");
  fake_sym(&g_fake.user_objects, "wdfake_user_objects");
  fake_sym(&g_fake.set_device, "wdfake_set_device");
  return 0;
}

void wdh_gpu_graph_destroy(int graph) {
  if (g_fake.graph_destroy) g_fake.graph_destroy(graph);
}
long wdh_gpu_user_objects(void) { return g_fake.user_objects ? g_fake.user_objects() : -1; }

void wdh_gpu_refuse_nodes(int on) {
  if (g_fake.refuse_nodes) g_fake.refuse_nodes(on);
}

int wdh_gpu_capture_begin(wdh_comm *c) {
  return g_fake.capture_begin ? g_fake.capture_begin(c->stream) : 0;
}
void wdh_gpu_capture_end(wdh_comm *c) {
  if (g_fake.capture_end) g_fake.capture_end(c->stream);
}
void wdh_gpu_capture_kernel(wdh_comm *c) {
  if (g_fake.capture_kernel) g_fake.capture_kernel(c->stream);
}
uint64_t wdh_gpu_graph_launch(wdh_comm *c, int graph) {
  return g_fake.graph_launch ? g_fake.graph_launch(c->stream, graph) : 0;
}
void wdh_gpu_set_device(int dev) {
  if (g_fake.set_device) g_fake.set_device(dev);
}
void *wdh_gpu_stream_new(void) { return g_fake.dl ? g_fake.stream_create() : NULL; }
uint64_t wdh_gpu_graph_launch_on(void *stream, int graph) {
  return g_fake.graph_launch && stream ? g_fake.graph_launch(stream, graph) : 0;
}
void wdh_gpu_complete_on(void *stream, uint64_t pos) {
  if (g_fake.dl && stream && pos) g_fake.complete(stream, pos);
}
void wdh_gpu_capture_ids(int on) {
  if (g_fake.capture_ids) g_fake.capture_ids(on);
}
int wdh_gpu_graph_nodes(int graph, int kind) { return g_fake.graph_nodes ? g_fake.graph_nodes(graph, kind) : -1; }

int wdh_fake_cuda_loaded(void) { return g_fake.dl != NULL; }

uint64_t wdh_gpu_launch(wdh_comm *c) { return g_fake.dl ? g_fake.launch(c->stream) : 0; }
void wdh_gpu_complete(wdh_comm *c, uint64_t pos) {
  if (g_fake.dl && pos) g_fake.complete(c->stream, pos);
}
void wdh_gpu_set_capturing(wdh_comm *c, int on) {
  if (g_fake.dl) g_fake.set_capturing(c->stream, on);
}
void wdh_gpu_set_error(int err) {
  if (g_fake.dl) g_fake.set_error(err);
}
long wdh_fake_events_live(void) { return g_fake.dl ? g_fake.events_live() : 0; }
long wdh_fake_records(void) { return g_fake.dl ? g_fake.records() : 0; }

int wdh_comm_init(wdh_comm *c, wdh_plugin *p, uint64_t comm_id, const char *name, int nnodes,
                  int nranks, int rank) {
  memset(c, 0, sizeof(*c));
  c->plugin = p;
  c->comm_id = comm_id;
  c->rank = rank;
  c->nranks = nranks;
  c->nnodes = nnodes;
  if (name) snprintf(c->name, sizeof(c->name), "%s", name);
  /* NCCL's stream: a stand-in stream when the stand-in driver is loaded, else any pointer. */
  c->stream = g_fake.dl ? g_fake.stream_create() : (void *)(uintptr_t)0x5000;
  void *ctx = WDH_POISON;
  ncclResult_t rc;
  const char *nm = name ? c->name : NULL;
  if (p->version == 4)
    rc = p->v4->init(&ctx, &wdh_activation_mask, nm, comm_id, nnodes, nranks, rank,
                     (ncclDebugLogger_t)wdh_logfn);
  else if (p->version == 5)
    rc = p->v5->init(&ctx, comm_id, &wdh_activation_mask, nm, nnodes, nranks, rank,
                     (ncclDebugLogger_t)wdh_logfn);
  else if (p->version == 6)
    rc = p->v6->init(&ctx, comm_id, &wdh_activation_mask, nm, nnodes, nranks, rank,
                     (ncclDebugLogger_t)wdh_logfn);
  else
    rc = p->v7->init(&ctx, comm_id, &wdh_activation_mask, nm, nnodes, nranks, rank,
                     (ncclDebugLogger_t)wdh_logfn);
  atomic_fetch_add(&g_calls, 1);
  if (rc != ncclSuccess) fail("init", rc);
  if (ctx == WDH_POISON) {
    fail("init (did not write *context)", -1);
    ctx = NULL;
  }
  c->ctx = (rc == ncclSuccess) ? ctx : NULL;
  return rc;
}

int wdh_comm_finalize(wdh_comm *c) {
  if (!c->ctx) return 0;
  wdh_plugin *p = c->plugin;
  ncclResult_t rc = p->version == 4   ? p->v4->finalize(c->ctx)
                    : p->version == 5 ? p->v5->finalize(c->ctx)
                    : p->version == 6 ? p->v6->finalize(c->ctx)
                                      : p->v7->finalize(c->ctx);
  atomic_fetch_add(&g_calls, 1);
  if (rc != ncclSuccess) fail("finalize", rc);
  c->ctx = NULL;
  return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Raw calls
 * ------------------------------------------------------------------------------------------- */

/* Everything v4 and v6 descriptors name alike: the header, Coll and P2p up to parentGroup, the
 * proxy, kernel and net members. The two types differ in layout, so a macro serves both. */
#define WDH_FILL_SHARED(e, d)                                                                    \
  do {                                                                                           \
    memset((e), 0, sizeof(*(e)));                                                                \
    (e)->parentObj = (d)->parent;                                                                \
    (e)->rank = (d)->rank;                                                                       \
    switch ((d)->type) {                                                                         \
    case ncclProfileColl:                                                                        \
      (e)->coll.seqNumber = (d)->seq;                                                            \
      (e)->coll.func = (d)->func;                                                                \
      (e)->coll.sendBuff = (d)->send_buff;                                                       \
      (e)->coll.recvBuff = (d)->recv_buff;                                                       \
      (e)->coll.count = (d)->count;                                                              \
      (e)->coll.root = (d)->root;                                                                \
      (e)->coll.datatype = (d)->datatype;                                                        \
      (e)->coll.nChannels = (d)->n_channels;                                                     \
      (e)->coll.nWarps = (d)->n_warps;                                                           \
      (e)->coll.algo = (d)->algo;                                                                \
      (e)->coll.proto = (d)->proto;                                                              \
      break;                                                                                     \
    case ncclProfileP2p:                                                                         \
      (e)->p2p.func = (d)->func;                                                                 \
      (e)->p2p.buff = (d)->recv_buff;                                                            \
      (e)->p2p.datatype = (d)->datatype;                                                         \
      (e)->p2p.count = (d)->count;                                                               \
      (e)->p2p.peer = (d)->peer;                                                                 \
      (e)->p2p.nChannels = (d)->n_channels;                                                      \
      break;                                                                                     \
    case ncclProfileProxyOp:                                                                     \
      (e)->proxyOp.pid = (d)->pid;                                                               \
      (e)->proxyOp.channelId = (d)->channel;                                                     \
      (e)->proxyOp.peer = (d)->peer;                                                             \
      (e)->proxyOp.nSteps = (d)->n_steps;                                                        \
      (e)->proxyOp.chunkSize = (d)->chunk_size;                                                  \
      (e)->proxyOp.isSend = (d)->is_send;                                                        \
      break;                                                                                     \
    case ncclProfileProxyStep:                                                                   \
      (e)->proxyStep.step = (d)->step;                                                           \
      break;                                                                                     \
    case ncclProfileKernelCh:                                                                    \
      (e)->kernelCh.channelId = (d)->channel;                                                    \
      (e)->kernelCh.pTimer = (d)->ptimer;                                                        \
      break;                                                                                     \
    case ncclProfileNetPlugin:                                                                   \
      (e)->netPlugin.id = (d)->net_id;                                                           \
      break;                                                                                     \
    default:                                                                                     \
      break;                                                                                     \
    }                                                                                            \
  } while (0)

static void fill_v6(ncclProfilerEventDescr_v6_t *e, const wdh_descr *d) {
  WDH_FILL_SHARED(e, d);
  e->type = d->type;
  switch (d->type) {
  case ncclProfileGroupApi:
    e->groupApi.graphCaptured = d->graph_captured;
    e->groupApi.groupDepth = d->group_depth;
    break;
  case ncclProfileCollApi:
    e->collApi.func = d->func;
    e->collApi.count = d->count;
    e->collApi.datatype = d->datatype;
    e->collApi.root = d->root;
    e->collApi.stream = d->stream;
    e->collApi.graphCaptured = d->graph_captured;
    break;
  case ncclProfileP2pApi:
    e->p2pApi.func = d->func;
    e->p2pApi.count = d->count;
    e->p2pApi.datatype = d->datatype;
    e->p2pApi.stream = d->stream;
    e->p2pApi.graphCaptured = d->graph_captured;
    break;
  case ncclProfileKernelLaunch:
    e->kernelLaunch.stream = d->stream;
    break;
  case ncclProfileColl:
    e->coll.parentGroup = d->parent_group;
    break;
  case ncclProfileP2p:
    e->p2p.parentGroup = d->parent_group;
    break;
  case ncclProfileCeColl:
    e->ceColl.seqNumber = d->seq;
    e->ceColl.func = d->func;
    e->ceColl.sendBuff = d->send_buff;
    e->ceColl.recvBuff = d->recv_buff;
    e->ceColl.count = d->count;
    e->ceColl.root = d->root;
    e->ceColl.datatype = d->datatype;
    e->ceColl.syncStrategy = "UC";
    e->ceColl.ceSeqNum = (uint32_t)d->seq;
    e->ceColl.stream = d->stream;
    break;
  case ncclProfileCeSync:
    e->ceCollSync.nRanks = d->n_steps;
    break;
  case ncclProfileCeBatch:
    e->ceCollBatch.numOps = d->n_steps;
    e->ceCollBatch.totalBytes = d->count;
    break;
  default:
    break;
  }
}

/* v7 (NCCL 2.31, src/include/plugin/profiler/profiler_v7.h): v6's members in v7's layout, each
 * call's userTag, isSymColl and kernelVariant, and the KernelPhase event. */
static void fill_v7(ncclProfilerEventDescr_v7_t *e, const wdh_descr *d) {
  ncclProfilerEventDescr_v6_t e6;
  fill_v6(&e6, d);
  memset(e, 0, sizeof(*e));
  e->type = e6.type;
  e->parentObj = e6.parentObj;
  e->rank = e6.rank;
  switch (d->type) {
  case ncclProfileGroupApi: e->groupApi.graphCaptured = e6.groupApi.graphCaptured; e->groupApi.groupDepth = e6.groupApi.groupDepth; break;
  case ncclProfileCollApi:
    memcpy(&e->collApi, &e6.collApi, sizeof(e6.collApi));
    e->collApi.userTag = d->user_tag;
    break;
  case ncclProfileP2pApi:
    memcpy(&e->p2pApi, &e6.p2pApi, sizeof(e6.p2pApi));
    e->p2pApi.userTag = d->user_tag;
    break;
  case ncclProfileColl:
    memcpy(&e->coll, &e6.coll, sizeof(e6.coll));
    e->coll.kernelVariant = d->is_sym_coll ? "Sym" : "Default";
    e->coll.isSymColl = d->is_sym_coll;
    e->coll.userTag = d->user_tag;
    break;
  case ncclProfileP2p:
    memcpy(&e->p2p, &e6.p2p, sizeof(e6.p2p));
    e->p2p.userTag = d->user_tag;
    break;
  case ncclProfileCeColl:
    memcpy(&e->ceColl, &e6.ceColl, sizeof(e6.ceColl));
    e->ceColl.userTag = d->user_tag;
    break;
  case ncclProfileKernelPhase:
    e->kernelPhase.channelId = d->channel;
    e->kernelPhase.phaseId = (uint8_t)d->phase_id;
    e->kernelPhase.phaseName = d->phase_name;
    e->kernelPhase.pTimer = d->ptimer;
    break;
  default: /* the proxy, kernel, net and CE members have v6's layout */
    memcpy(&e->kernelLaunch, &e6.kernelLaunch, sizeof(e6) - offsetof(ncclProfilerEventDescr_v6_t, kernelLaunch));
    break;
  }
}

static void fill_v4(ncclProfilerEventDescr_v4_t *e, const wdh_descr *d) {
  WDH_FILL_SHARED(e, d);
  e->type = (uint8_t)d->type; /* v4 has an 8-bit type: an unknown high bit truncates */
}

void *wdh_start(wdh_plugin *p, void *ctx, const wdh_descr *d) {
  void *h = WDH_POISON;
  ncclResult_t rc;
  if (p->version == 4) {
    ncclProfilerEventDescr_v4_t e;
    fill_v4(&e, d);
    rc = p->v4->startEvent(ctx, &h, &e);
  } else if (p->version == 5) {
    ncclProfilerEventDescr_v6_t e6;
    ncclProfilerEventDescr_v5_t e5;
    fill_v6(&e6, d);
    memcpy(&e5, &e6, sizeof(e5));
    rc = p->v5->startEvent(ctx, &h, &e5);
  } else if (p->version == 6) {
    ncclProfilerEventDescr_v6_t e;
    fill_v6(&e, d);
    rc = p->v6->startEvent(ctx, &h, &e);
  } else {
    ncclProfilerEventDescr_v7_t e;
    fill_v7(&e, d);
    rc = p->v7->startEvent(ctx, &h, &e);
  }
  atomic_fetch_add_explicit(&g_calls, 1, memory_order_relaxed);
  if (rc != ncclSuccess) fail("startEvent", rc);
  if (h == WDH_POISON) {
    fail("startEvent (did not write *eHandle)", -1);
    h = NULL;
  }
  return h;
}

void wdh_stop(wdh_plugin *p, void *h) {
  ncclResult_t rc = p->version == 4   ? p->v4->stopEvent(h)
                    : p->version == 5 ? p->v5->stopEvent(h)
                    : p->version == 6 ? p->v6->stopEvent(h)
                                      : p->v7->stopEvent(h);
  atomic_fetch_add_explicit(&g_calls, 1, memory_order_relaxed);
  if (rc != ncclSuccess) fail("stopEvent", rc);
}

void wdh_state(wdh_plugin *p, void *h, int state, uint64_t arg) {
  ncclProfilerEventStateArgs_t a;
  memset(&a, 0, sizeof(a));
  if (state == ncclProfilerKernelChStop || state == ncclProfilerKernelPhaseStop)
    a.kernelCh.pTimer = arg;
  else if (state >= ncclProfilerProxyCtrlIdle && state <= ncclProfilerProxyCtrlAppendEnd)
    a.proxyCtrl.appendedProxyOps = (int)arg;
  else if (state == ncclProfilerNetPluginUpdate)
    a.netPlugin.data = (void *)(uintptr_t)arg;
  else
    a.proxyStep.transSize = (size_t)arg;
  ncclProfilerEventState_t st = (ncclProfilerEventState_t)state;
  ncclResult_t rc = p->version == 4   ? p->v4->recordEventState(h, st, &a)
                    : p->version == 5 ? p->v5->recordEventState(h, st, &a)
                    : p->version == 6 ? p->v6->recordEventState(h, st, &a)
                                      : p->v7->recordEventState(h, st, &a);
  atomic_fetch_add_explicit(&g_calls, 1, memory_order_relaxed);
  if (rc != ncclSuccess) fail("recordEventState", rc);
}

/* ---------------------------------------------------------------------------------------------
 * Operations
 * ------------------------------------------------------------------------------------------- */

void wdh_op_cfg_default(wdh_op_cfg *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->kind = WDH_OP_COLL;
  cfg->func = "AllReduce";
  cfg->count = 1048576;
  cfg->datatype = "ncclFloat32";
  cfg->n_channels = 2;
  cfg->n_steps = 4;
  cfg->hang_channel = -1;
  cfg->slow_channel = -1;
  cfg->hang_step = 0;
}

static int has(int mask, int bit) { return (mask & bit) != 0; }

static uint64_t next_seq(wdh_comm *c, const char *func) {
  int fi = wdh_func_index(func);
  if (fi < 0) return 0;
  return __atomic_fetch_add(&c->seq[fi], 1, __ATOMIC_RELAXED);
}

static int has_kernelch(const wdh_op *op);
static void pt_post(wdh_op *op);
static void pt_mark(wdh_op *op, int ch, int dev);
enum { WDH_DEV_POSTED = 1, WDH_DEV_STARTED = 2, WDH_DEV_COMPLETED = 3 };

/* Group start + Coll/P2p start + stop (+ Group stop unless deferred). */
static void emit_group_and_op(wdh_op *op, void *coll_api_parent, int defer_stops) {
  wdh_comm *c = op->comm;
  wdh_plugin *p = c->plugin;
  const wdh_op_cfg *cfg = &op->cfg;
  int v5 = p->version >= 5;
  int is_p2p = cfg->kind != WDH_OP_COLL;
  wdh_descr d;

  /* hostStreamPlanTask (enqueue.cc): Group start, task events, proxy upload, task stops, Group
   * stop. The Group has no parent (plugin/profiler.cc, ncclProfilerStartGroupEvent). */
  if (has(op->mask, ncclProfileGroup)) {
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileGroup;
    d.rank = c->rank;
    op->group = wdh_start(p, c->ctx, &d);
  }
  int bit = is_p2p ? ncclProfileP2p : ncclProfileColl;
  if (has(op->mask, bit)) {
    memset(&d, 0, sizeof(d));
    d.type = (uint64_t)bit;
    d.rank = c->rank;
    d.parent = v5 ? coll_api_parent : op->group;
    d.parent_group = op->group;
    d.func = is_p2p ? (cfg->kind == WDH_OP_SEND ? "Send" : "Recv") : cfg->func;
    d.count = cfg->count;
    d.datatype = cfg->datatype;
    d.root = cfg->root;
    d.peer = cfg->peer;
    d.seq = op->seq;
    d.send_buff = (const void *)(uintptr_t)0x7f0000001000ULL;
    d.recv_buff = (void *)(uintptr_t)0x7f0000002000ULL;
    /* CollNet ops announce no channels (their work is on the CollNet transport). */
    d.n_channels = (uint8_t)(cfg->collnet ? 0 : cfg->n_channels);
    d.n_warps = 8;
    d.algo = cfg->collnet ? "CollnetDirect" : "Ring";
    d.proto = "Simple";
    d.user_tag = cfg->user_tag;
    op->coll = wdh_start(p, c->ctx, &d);
    /* 2.31: the KernelCh work ops are posted against the task's handle before the task events
     * stop (ncclProfilerPostPlanWork, from hostStreamPlanTask). */
    pt_post(op);
    if (!defer_stops) wdh_stop(p, op->coll);
  }
  if (!defer_stops && has(op->mask, ncclProfileGroup)) wdh_stop(p, op->group);
}

void wdh_op_enqueue(wdh_comm *c, const wdh_op_cfg *cfg, wdh_op *op) {
  memset(op, 0, sizeof(*op));
  op->comm = c;
  op->cfg = *cfg;
  if (!op->cfg.func) op->cfg.func = "AllReduce";
  if (!op->cfg.datatype) op->cfg.datatype = "ncclFloat32";
  wdh_plugin *p = c->plugin;
  int raw = cfg->mask ? cfg->mask : __atomic_load_n(&wdh_activation_mask, __ATOMIC_RELAXED);
  op->mask = wdh_effective_mask(raw);
  int v5 = p->version >= 5;
  int is_p2p = cfg->kind != WDH_OP_COLL;
  op->seq = is_p2p ? 0 : next_seq(c, op->cfg.func);
  wdh_descr d;
  void *stream = c->stream;

  /* ncclEnqueueCheck (enqueue.cc): GroupApi start and GroupStartApiStop, then the CollApi or
   * P2pApi event around the task's append; an explicit ncclGroupStart/End gives depth 2. */
  if (v5 && has(op->mask, ncclProfileGroupApi)) {
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileGroupApi;
    d.rank = c->rank;
    d.graph_captured = cfg->graph_captured;
    d.group_depth = cfg->explicit_group ? 2 : 1;
    op->group_api = wdh_start(p, c->ctx, &d);
    wdh_state(p, op->group_api, ncclProfilerGroupStartApiStop, 0);
  }
  int api_bit = is_p2p ? ncclProfileP2pApi : ncclProfileCollApi;
  if (v5 && has(op->mask, api_bit)) {
    memset(&d, 0, sizeof(d));
    d.type = (uint64_t)api_bit;
    d.rank = c->rank;
    d.parent = op->group_api;
    d.func = is_p2p ? (cfg->kind == WDH_OP_SEND ? "Send" : "Recv") : op->cfg.func;
    d.count = cfg->count;
    d.datatype = op->cfg.datatype;
    d.root = cfg->root;
    d.stream = stream;
    d.graph_captured = cfg->graph_captured;
    d.user_tag = cfg->user_tag;
    op->coll_api = wdh_start(p, c->ctx, &d);
    wdh_stop(p, op->coll_api); /* API events stop before their child starts */
  }
  if (v5 && has(op->mask, ncclProfileGroupApi))
    wdh_state(p, op->group_api, ncclProfilerGroupEndApiStart, 0);
  /* Broadcast on the AllGatherV path and symmetric-memory kernels: their plan has no task the
   * profiler sees, so no KernelLaunch, Group or Coll (symmetric_sched.cc). */
  if (cfg->api_only) {
    if (!cfg->graph_captured) op->gpu_pos = wdh_gpu_launch(c);
    if (v5 && has(op->mask, ncclProfileGroupApi)) wdh_stop(p, op->group_api);
    return;
  }
  /* ncclLaunchKernel (enqueue.cc): KernelLaunch start, cuLaunchKernelEx on the stream, stop;
   * before the plan's Group (hostStreamPlanTask runs after, ncclLaunchKernelAfter_NoCuda). A
   * launch under capture is only recorded into the graph. */
  if (cfg->graph_captured && !cfg->in_capture) wdh_gpu_set_capturing(c, 1);
  if (v5 && has(op->mask, ncclProfileKernelLaunch)) {
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileKernelLaunch;
    d.rank = c->rank;
    d.parent = op->group_api;
    d.stream = stream;
    op->kernel_launch = wdh_start(p, c->ctx, &d);
  }
  if (!cfg->graph_captured) op->gpu_pos = wdh_gpu_launch(c);
  else if (cfg->in_capture) wdh_gpu_capture_kernel(c); /* a kernel node of the graph */
  if (v5 && has(op->mask, ncclProfileKernelLaunch)) wdh_stop(p, op->kernel_launch);
  if (cfg->graph_captured && !cfg->in_capture) wdh_gpu_set_capturing(c, 0);
  int emit_plan = !cfg->graph_captured || cfg->capture_emits_coll;
  if (emit_plan) emit_group_and_op(op, op->coll_api, cfg->children_first);
  if (cfg->children_first && emit_plan) {
    op->enqueued_open = 1;
    return;
  }
  if (v5 && has(op->mask, ncclProfileGroupApi)) wdh_stop(p, op->group_api);
}

void wdh_op_finish(wdh_op *op) {
  if (!op->enqueued_open) return;
  wdh_plugin *p = op->comm->plugin;
  int bit = op->cfg.kind != WDH_OP_COLL ? ncclProfileP2p : ncclProfileColl;
  if (has(op->mask, bit)) wdh_stop(p, op->coll);
  if (has(op->mask, ncclProfileGroup)) wdh_stop(p, op->group);
  if (p->version >= 5 && has(op->mask, ncclProfileGroupApi)) wdh_stop(p, op->group_api);
  op->enqueued_open = 0;
}

static void pause_us(unsigned us) {
  if (us) usleep(us);
}

/* Which ProxyOps an op has on a channel: network ops one per direction (a send and a recv per
 * ring channel), p2p ops their own direction; intra-node ops, sends to self and API-only ops
 * none (enqueue.cc, uploadProxyOps: only network and CollNet transports get proxy ops). */
static int has_proxyop(const wdh_op *op, int is_send) {
  const wdh_op_cfg *cfg = &op->cfg;
  if (!has(op->mask, ncclProfileProxyOp) || cfg->no_proxy || cfg->api_only || wdh_op_is_self(op))
    return 0;
  if (is_send && cfg->pxn_send) return 0; /* progressed by another process's proxy (PXN) */
  if (cfg->kind == WDH_OP_SEND) return is_send;
  if (cfg->kind == WDH_OP_RECV) return !is_send;
  return 1;
}

static int has_kernelch(const wdh_op *op) {
  /* 2.27-2.30: a send/recv to self gets no profiler proxy op, hence no KernelCh (proxy.cc,
   * incWorkCounter). 2.31 posts both halves of every pair, the self pair too
   * (plugin/profiler.cc, ncclProfilerPostPlanWork). */
  if (!has(op->mask, ncclProfileKernelCh) || op->cfg.api_only) return 0;
  return op->comm->plugin->version >= 7 || !wdh_op_is_self(op);
}

/* One ProxyStep started the way the proxy posts it: a send step when its buffer is offered to
 * the kernel (SendGPUWait), a recv step when its irecv is posted (RecvWait) (transport/net.cc,
 * sendProxyProgress / recvProxyProgress). */
static void open_step(wdh_op *op, int ch, int is_send, int s) {
  if (!has(op->mask, ncclProfileProxyStep)) return;
  wdh_plugin *p = op->comm->plugin;
  wdh_descr d;
  memset(&d, 0, sizeof(d));
  d.type = ncclProfileProxyStep;
  d.parent = op->pop[ch][is_send];
  d.rank = op->comm->rank;
  d.step = s;
  void *st = wdh_start(p, op->comm->ctx, &d);
  wdh_state(p, st, is_send ? ncclProfilerProxyStepSendGPUWait : ncclProfilerProxyStepRecvWait, 0);
  op->step[ch][is_send][s % WDH_STEPS_OPEN] = st;
}

void wdh_op_post(wdh_op *op) {
  if (op->posted) return;
  op->posted = 1;
  wdh_comm *c = op->comm;
  const wdh_op_cfg *cfg = &op->cfg;
  for (int ch = 0; ch < cfg->n_channels && ch < WDH_MAX_CH; ch++) {
    for (int is_send = 0; is_send < 2; is_send++) {
      if (!has_proxyop(op, is_send)) continue;
      /* ncclProxyOpToArgs appends the op: ProxyOp start; the first progress pass records
       * ProxyOpInProgress_v4 and posts up to NCCL_STEPS steps, before the GPU gets there. */
      wdh_descr d;
      memset(&d, 0, sizeof(d));
      d.type = ncclProfileProxyOp;
      d.parent = op->coll;
      d.rank = c->rank;
      d.pid = getpid();
      d.channel = (uint8_t)ch;
      int n = c->nranks > 0 ? c->nranks : 1;
      d.peer = cfg->kind == WDH_OP_COLL ? (is_send ? (c->rank + 1) % n : (c->rank + n - 1) % n) : cfg->peer;
      d.n_steps = cfg->n_steps;
      d.chunk_size = 131072;
      d.is_send = is_send;
      op->pop[ch][is_send] = wdh_start(c->plugin, c->ctx, &d);
      wdh_state(c->plugin, op->pop[ch][is_send], ncclProfilerProxyOpInProgress_v4, 0);
      for (int s = 0; s < cfg->n_steps && s < WDH_STEPS_OPEN; s++) open_step(op, ch, is_send, s);
      op->next_step[ch][is_send] = cfg->n_steps < WDH_STEPS_OPEN ? cfg->n_steps : WDH_STEPS_OPEN;
    }
  }
}

/* Steps from `first` of one ProxyOp once the GPU is there; stops at hang_at (returns 1). */
static int run_steps(wdh_op *op, int ch, int is_send, int first, int hang_at, int gpu_hang) {
  wdh_plugin *p = op->comm->plugin;
  const wdh_op_cfg *cfg = &op->cfg;
  int steps_on = has(op->mask, ncclProfileProxyStep);
  size_t chunk = 131072;
  for (int s = first; s < cfg->n_steps; s++) {
    void *st = steps_on ? op->step[ch][is_send][s % WDH_STEPS_OPEN] : NULL;
    pause_us(cfg->step_delay_us);
    if (is_send && gpu_hang && s == hang_at) return 1; /* the kernel never fills the buffer */
    if (is_send) {
      /* The kernel's data is ready: SendPeerWait_v4, then SendWait once isend is posted. */
      if (steps_on) wdh_state(p, st, ncclProfilerProxyStepSendPeerWait_v4, chunk);
      pause_us(cfg->step_delay_us);
      if (steps_on) wdh_state(p, st, ncclProfilerProxyStepSendWait, chunk);
      if (s == hang_at) return 1; /* the network never completes it */
    } else {
      if (s == hang_at) return 1; /* the peer's data never arrives */
      if (steps_on) wdh_state(p, st, ncclProfilerProxyStepRecvFlushWait, chunk);
      pause_us(cfg->step_delay_us);
      if (steps_on) wdh_state(p, st, ncclProfilerProxyStepRecvGPUWait, chunk);
    }
    pause_us(cfg->step_delay_us);
    if (ch == cfg->slow_channel) pause_us(cfg->slow_us); /* the link takes its time */
    if (steps_on) wdh_stop(p, st);
    /* A slot freed: the proxy posts the next step. */
    int next = op->next_step[ch][is_send];
    if (next < cfg->n_steps) {
      open_step(op, ch, is_send, next);
      op->next_step[ch][is_send] = next + 1;
    }
  }
  return 0;
}

/* ProxyOp stop once all its steps are done; CollNet and p2p-memcpy ProxyOps are never stopped. */
static void end_proxyop(wdh_op *op, int ch, int is_send) {
  if (op->cfg.collnet || !op->pop[ch][is_send]) return;
  pause_us(op->cfg.step_delay_us);
  wdh_stop(op->comm->plugin, op->pop[ch][is_send]);
}

static void end_kernelch(wdh_op *op, void *kch) {
  if (!kch) return;
  wdh_plugin *p = op->comm->plugin;
  wdh_state(p, kch, ncclProfilerKernelChStop, wdh_now_ns());
  wdh_stop(p, kch);
}

/* v7 (NCCL 2.31, src/plugin/profiler.cc, the Profiler Thread): once a channel's kernel is done,
 * its phases (initial_sync, compute, final_sync) as start, KernelPhaseStop, stop each, parent
 * the channel's KernelCh, before the KernelCh stops; zero-length phases are skipped. */
static void kernel_phases(wdh_op *op, void *kch, int ch) {
  static const char *const names[3] = {"initial_sync", "compute", "final_sync"};
  wdh_plugin *p = op->comm->plugin;
  if (p->version < 7 || !kch || !has(op->mask, ncclProfileKernelPhase)) return;
  uint64_t t = wdh_now_ns();
  for (int i = 0; i < 3; i++) {
    wdh_descr d;
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileKernelPhase;
    d.parent = kch;
    d.rank = op->comm->rank;
    d.channel = (uint8_t)ch;
    d.phase_id = i;
    d.phase_name = names[i];
    /* initial_sync lasts cfg.sync_ns (the wait for the peers), the others 1 us each. */
    uint64_t sync = op->cfg.sync_ns ? op->cfg.sync_ns : 1000;
    uint64_t begin = i == 0 ? t : t + sync + (uint64_t)(i - 1) * 1000;
    uint64_t end = i == 0 ? t + sync : begin + 1000;
    d.ptimer = begin;
    void *h = wdh_start(p, op->comm->ctx, &d);
    wdh_state(p, h, ncclProfilerKernelPhaseStop, end);
    wdh_stop(p, h);
  }
}

int wdh_op_gpu(wdh_op *op) {
  wdh_comm *c = op->comm;
  wdh_plugin *p = c->plugin;
  const wdh_op_cfg *cfg = &op->cfg;
  wdh_op_post(op);
  /* The stream got to the kernel: everything before it is done. */
  if (op->gpu_pos) wdh_gpu_complete(c, op->gpu_pos - 1);
  int hung = 0;
  for (int ch = 0; ch < cfg->n_channels && ch < WDH_MAX_CH; ch++) {
    void *kch = NULL;
    if (op->kslot[ch]) {
      pt_mark(op, ch, WDH_DEV_STARTED); /* the kernel wrote its start counter */
    } else if (has_kernelch(op) && !op->comm->pthread) {
      /* The kernel wrote this channel's start counter; the proxy thread saw it
       * (transport/profiler.cc, profilerProxyProgress). */
      wdh_descr d;
      memset(&d, 0, sizeof(d));
      d.type = ncclProfileKernelCh;
      d.parent = op->coll;
      d.rank = c->rank;
      d.channel = (uint8_t)ch;
      d.ptimer = wdh_now_ns();
      kch = wdh_start(p, c->ctx, &d);
    }
    int ch_hung = 0, dir_hung[2] = {0, 0};
    int any_proxy = has_proxyop(op, 0) || has_proxyop(op, 1);
    for (int is_send = 0; is_send < 2; is_send++) {
      if (!has_proxyop(op, is_send)) continue;
      int dirs = cfg->hang_dirs ? cfg->hang_dirs
                                : cfg->kind == WDH_OP_SEND ? WDH_HANG_SEND_NET : WDH_HANG_RECV;
      int hang_here = ch == cfg->hang_channel &&
                      (is_send ? (dirs & (WDH_HANG_SEND_NET | WDH_HANG_SEND_GPU)) : (dirs & WDH_HANG_RECV));
      if (run_steps(op, ch, is_send, 0, hang_here ? cfg->hang_step : -1,
                    is_send && (dirs & WDH_HANG_SEND_GPU))) {
        op->hung_proxyop = op->pop[ch][is_send];
        op->hung_step = has(op->mask, ncclProfileProxyStep)
                            ? op->step[ch][is_send][cfg->hang_step % WDH_STEPS_OPEN] : NULL;
        op->hung_ch = ch;
        op->hung_is_send = is_send;
        ch_hung = dir_hung[is_send] = 1;
      }
    }
    if (!any_proxy && ch == cfg->hang_channel) ch_hung = 1; /* a kernel that never finishes */
    /* Its send went through another process's proxy (PXN) and never completes there. */
    if (cfg->pxn_send && ch == cfg->hang_channel && (cfg->hang_dirs & WDH_HANG_SEND_NET)) ch_hung = 1;
    if (ch_hung) {
      /* The other direction of the channel finishes; the kernel channel never does. */
      for (int is_send = 0; is_send < 2; is_send++)
        if (has_proxyop(op, is_send) && !dir_hung[is_send]) end_proxyop(op, ch, is_send);
      op->hung_kernelch = kch;
      hung = 1;
      continue;
    }
    /* The kernel is done with this channel before the proxy's last network completions are
     * reported: KernelCh stops before the channel's ProxyOps. */
    if (op->kslot[ch]) pt_mark(op, ch, WDH_DEV_COMPLETED);
    kernel_phases(op, kch, ch);
    end_kernelch(op, kch);
    for (int is_send = 0; is_send < 2; is_send++)
      if (has_proxyop(op, is_send)) end_proxyop(op, ch, is_send);
  }
  if (!hung && op->gpu_pos) wdh_gpu_complete(c, op->gpu_pos);
  return hung;
}

int wdh_op_proxy(wdh_op *op) {
  wdh_op_post(op);
  return wdh_op_gpu(op);
}

void wdh_op_resume(wdh_op *op) {
  wdh_plugin *p = op->comm->plugin;
  const wdh_op_cfg *cfg = &op->cfg;
  if (op->hung_proxyop) {
    int ch = op->hung_ch, is_send = op->hung_is_send;
    void *st = has(op->mask, ncclProfileProxyStep)
                   ? op->step[ch][is_send][cfg->hang_step % WDH_STEPS_OPEN] : NULL;
    if (st) {
      if (!is_send) {
        wdh_state(p, st, ncclProfilerProxyStepRecvFlushWait, 131072);
        wdh_state(p, st, ncclProfilerProxyStepRecvGPUWait, 131072);
      }
      wdh_stop(p, st);
    }
    int next = op->next_step[ch][is_send];
    if (next < cfg->n_steps) {
      open_step(op, ch, is_send, next);
      op->next_step[ch][is_send] = next + 1;
    }
    run_steps(op, ch, is_send, cfg->hang_step + 1, -1, 0);
    if (op->kslot[ch]) pt_mark(op, ch, WDH_DEV_COMPLETED);
    end_kernelch(op, op->hung_kernelch);
    end_proxyop(op, ch, is_send);
  } else {
    if (cfg->hang_channel >= 0 && cfg->hang_channel < WDH_MAX_CH && op->kslot[cfg->hang_channel])
      pt_mark(op, cfg->hang_channel, WDH_DEV_COMPLETED);
    end_kernelch(op, op->hung_kernelch);
  }
  if (op->gpu_pos) wdh_gpu_complete(op->comm, op->gpu_pos);
  op->hung_proxyop = op->hung_step = op->hung_kernelch = NULL;
}

int wdh_op_run(wdh_comm *c, const wdh_op_cfg *cfg, wdh_op *op) {
  wdh_op_enqueue(c, cfg, op);
  int rc = 0;
  if (!cfg->graph_captured && !cfg->api_only) rc = wdh_op_proxy(op);
  else if (!cfg->graph_captured && op->gpu_pos) wdh_gpu_complete(c, op->gpu_pos);
  wdh_op_finish(op);
  return rc;
}

int wdh_op_replay(const wdh_op *captured, wdh_op *out) {
  memset(out, 0, sizeof(*out));
  out->comm = captured->comm;
  out->cfg = captured->cfg;
  out->cfg.graph_captured = 0;
  out->cfg.children_first = 0;
  out->mask = captured->mask;
  out->group_api = captured->group_api; /* capture-time handles, long stopped */
  out->coll_api = captured->coll_api;
  out->seq = out->cfg.kind == WDH_OP_COLL ? next_seq(out->comm, out->cfg.func) : 0;
  emit_group_and_op(out, captured->coll_api, 0);
  return wdh_op_proxy(out);
}

uint64_t wdh_ce_coll(wdh_comm *c, const char *func, wdh_op *out) {
  memset(out, 0, sizeof(*out));
  out->comm = c;
  wdh_op_cfg_default(&out->cfg);
  out->cfg.func = func;
  wdh_plugin *p = c->plugin;
  if (p->version < 6) return 0;
  int mask = wdh_effective_mask(__atomic_load_n(&wdh_activation_mask, __ATOMIC_RELAXED));
  out->mask = mask;
  wdh_descr d;
  if (has(mask, ncclProfileGroupApi)) {
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileGroupApi;
    d.rank = c->rank;
    d.group_depth = 1;
    out->group_api = wdh_start(p, c->ctx, &d);
    wdh_state(p, out->group_api, ncclProfilerGroupStartApiStop, 0);
  }
  if (has(mask, ncclProfileCollApi)) {
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileCollApi;
    d.rank = c->rank;
    d.parent = out->group_api;
    d.func = func;
    d.count = 4096;
    d.datatype = "ncclFloat32";
    d.stream = c->stream;
    out->coll_api = wdh_start(p, c->ctx, &d);
    wdh_stop(p, out->coll_api);
  }
  if (has(mask, ncclProfileGroupApi)) wdh_state(p, out->group_api, ncclProfilerGroupEndApiStart, 0);
  /* ncclLaunchCeColl (ce_coll.cc): CeColl start with the stream and ceSeqNum, the copies and
   * their syncs enqueued on the stream (CeSync around ncclMemOpSync, CeBatch around
   * ncclCeLaunchBatchOps), CeColl stop. All on this thread, nothing when the copies finish. */
  int ce_on = has(mask, ncclProfileCeColl) || has(mask, ncclProfileCeSync) || has(mask, ncclProfileCeBatch);
  if (ce_on) {
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileCeColl;
    d.rank = c->rank;
    d.parent = out->coll_api;
    d.func = func;
    d.count = 4096;
    d.datatype = "ncclFloat32";
    d.seq = __atomic_fetch_add(&c->ce_seq, 1, __ATOMIC_RELAXED);
    d.stream = c->stream;
    out->seq = d.seq;
    out->coll = wdh_start(p, c->ctx, &d);
  }
  static const uint64_t kinds[3] = {ncclProfileCeSync, ncclProfileCeBatch, ncclProfileCeSync};
  for (int i = 0; i < 3; i++) {
    if (ce_on && has(mask, (int)kinds[i])) {
      memset(&d, 0, sizeof(d));
      d.type = kinds[i];
      d.rank = c->rank;
      d.parent = out->coll;
      d.n_steps = kinds[i] == ncclProfileCeSync ? c->nranks : 4;
      d.count = 4 * 4096 * 4;
      void *h = wdh_start(p, c->ctx, &d);
      out->gpu_pos = wdh_gpu_launch(c);
      wdh_stop(p, h);
    } else {
      out->gpu_pos = wdh_gpu_launch(c);
    }
  }
  if (ce_on) wdh_stop(p, out->coll);
  if (has(mask, ncclProfileGroupApi)) wdh_stop(p, out->group_api);
  return out->gpu_pos;
}

void *wdh_pxn_send(wdh_plugin *p, void *foreign_ctx, void *foreign_parent, pid_t origin_pid,
                   int origin_rank, int channel, int peer, int n_steps, int posted) {
  wdh_descr d;
  memset(&d, 0, sizeof(d));
  d.type = ncclProfileProxyOp;
  d.parent = foreign_parent;
  d.rank = origin_rank; /* sub->rank: the originating rank (plugin/profiler.cc) */
  d.pid = origin_pid;
  d.channel = (uint8_t)channel;
  d.peer = peer;
  d.n_steps = n_steps;
  d.chunk_size = 131072;
  d.is_send = 1;
  void *pop = wdh_start(p, foreign_ctx, &d);
  wdh_state(p, pop, ncclProfilerProxyOpInProgress_v4, 0);
  for (int s = 0; s < posted && s < WDH_STEPS_OPEN; s++) {
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyStep;
    d.parent = pop;
    d.rank = origin_rank;
    d.step = s;
    void *st = wdh_start(p, foreign_ctx, &d);
    wdh_state(p, st, ncclProfilerProxyStepSendGPUWait, 0);
    wdh_state(p, st, ncclProfilerProxyStepSendPeerWait_v4, 131072);
    wdh_state(p, st, ncclProfilerProxyStepSendWait, 131072);
  }
  return pop;
}

void *wdh_pxn_op(wdh_plugin *p, void *foreign_ctx, void *foreign_parent, pid_t pid, int channel,
                 int peer, int is_send, int n_steps, int leave_open) {
  wdh_descr d;
  memset(&d, 0, sizeof(d));
  d.type = ncclProfileProxyOp;
  d.parent = foreign_parent;
  d.rank = 0;
  d.pid = pid;
  d.channel = (uint8_t)channel;
  d.peer = peer;
  d.n_steps = n_steps;
  d.chunk_size = 65536;
  d.is_send = is_send;
  void *pop = wdh_start(p, foreign_ctx, &d);
  for (int s = 0; s < n_steps; s++) {
    memset(&d, 0, sizeof(d));
    d.type = ncclProfileProxyStep;
    d.parent = pop;
    d.step = s;
    void *st = wdh_start(p, foreign_ctx, &d);
    wdh_state(p, st, is_send ? ncclProfilerProxyStepSendWait : ncclProfilerProxyStepRecvWait, 0);
    if (leave_open && s == n_steps - 1) return pop;
    wdh_stop(p, st);
  }
  if (!leave_open) wdh_stop(p, pop);
  return pop;
}

/* ---------------------------------------------------------------------------------------------
 * Proxy thread
 * ------------------------------------------------------------------------------------------- */

#define WDH_PROXY_QUEUE 256

struct wdh_proxy {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  wdh_op q[WDH_PROXY_QUEUE];
  long head, tail; /* tail - head = queued */
  int busy, quit;
  atomic_long done;
};

static void *proxy_main(void *arg) {
  wdh_proxy *px = arg;
  pthread_mutex_lock(&px->mu);
  for (;;) {
    while (px->head == px->tail && !px->quit) pthread_cond_wait(&px->cv, &px->mu);
    if (px->head == px->tail && px->quit) break;
    wdh_op op = px->q[px->head % WDH_PROXY_QUEUE];
    px->head++;
    px->busy = 1;
    pthread_cond_broadcast(&px->cv);
    pthread_mutex_unlock(&px->mu);
    wdh_op_proxy(&op);
    atomic_fetch_add(&px->done, 1);
    pthread_mutex_lock(&px->mu);
    px->busy = 0;
    pthread_cond_broadcast(&px->cv);
  }
  pthread_mutex_unlock(&px->mu);
  return NULL;
}

wdh_proxy *wdh_proxy_create(void) {
  wdh_proxy *px = calloc(1, sizeof(*px));
  if (!px) return NULL;
  pthread_mutex_init(&px->mu, NULL);
  pthread_cond_init(&px->cv, NULL);
  if (pthread_create(&px->thread, NULL, proxy_main, px) != 0) {
    free(px);
    return NULL;
  }
  pthread_setname_np(px->thread, "wdh-proxy");
  return px;
}

void wdh_proxy_submit(wdh_proxy *px, const wdh_op *op) {
  pthread_mutex_lock(&px->mu);
  while (px->tail - px->head >= WDH_PROXY_QUEUE) pthread_cond_wait(&px->cv, &px->mu);
  px->q[px->tail % WDH_PROXY_QUEUE] = *op;
  px->tail++;
  pthread_cond_broadcast(&px->cv);
  pthread_mutex_unlock(&px->mu);
}

void wdh_proxy_drain(wdh_proxy *px) {
  pthread_mutex_lock(&px->mu);
  while (px->head != px->tail || px->busy) pthread_cond_wait(&px->cv, &px->mu);
  pthread_mutex_unlock(&px->mu);
}

void wdh_proxy_destroy(wdh_proxy *px) {
  if (!px) return;
  wdh_proxy_drain(px);
  pthread_mutex_lock(&px->mu);
  px->quit = 1;
  pthread_cond_broadcast(&px->cv);
  pthread_mutex_unlock(&px->mu);
  pthread_join(px->thread, NULL);
  pthread_mutex_destroy(&px->mu);
  pthread_cond_destroy(&px->cv);
  free(px);
}

long wdh_proxy_done(wdh_proxy *px) { return atomic_load(&px->done); }

void wdh_run_ops(wdh_comm *c, wdh_proxy *px, const wdh_op_cfg *cfg, int n) {
  for (int i = 0; i < n; i++) {
    wdh_op op;
    wdh_op_enqueue(c, cfg, &op);
    if (px)
      wdh_proxy_submit(px, &op);
    else
      wdh_op_proxy(&op);
    wdh_op_finish(&op);
  }
  if (px) wdh_proxy_drain(px);
}

struct wdh_traffic {
  pthread_t thread;
  wdh_comm *comm;
  int batch;
  char name[16];
  atomic_int stop;
  atomic_long ops;
};

static void *traffic_main(void *arg) {
  wdh_traffic *t = arg;
  if (t->name[0]) pthread_setname_np(pthread_self(), t->name);
  wdh_proxy *px = wdh_proxy_create();
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  while (!atomic_load(&t->stop)) {
    wdh_run_ops(t->comm, px, &cfg, t->batch);
    atomic_fetch_add(&t->ops, t->batch);
  }
  wdh_proxy_destroy(px);
  return NULL;
}

wdh_traffic *wdh_traffic_start(wdh_comm *c, int batch, const char *thread_name) {
  wdh_traffic *t = calloc(1, sizeof(*t));
  if (!t) return NULL;
  t->comm = c;
  t->batch = batch;
  if (thread_name) snprintf(t->name, sizeof(t->name), "%s", thread_name);
  if (pthread_create(&t->thread, NULL, traffic_main, t) != 0) {
    free(t);
    return NULL;
  }
  return t;
}

long wdh_traffic_ops(wdh_traffic *t) { return atomic_load(&t->ops); }

long wdh_traffic_stop(wdh_traffic *t) {
  if (!t) return 0;
  atomic_store(&t->stop, 1);
  pthread_join(t->thread, NULL);
  long ops = atomic_load(&t->ops);
  free(t);
  return ops;
}

/* ---------------------------------------------------------------------------------------------
 * NCCL 2.31's Profiler Thread (plugin/profiler.cc)
 * ------------------------------------------------------------------------------------------- */

#define WDH_PT_OPS 4096

typedef struct wdh_work_op {
  _Atomic int dev;   /* 0 free, else WDH_DEV_*: what the kernel wrote (workStarted/workCompleted) */
  int started;       /* thread-private: KernelCh started (op->started) */
  wdh_plugin *plugin;
  void *ctx, *task; /* profilerContext, taskEventHandle */
  void *kch;
  int rank, channel, mask;
  uint64_t t_start, t_stop;
} wdh_work_op;

struct wdh_pthread {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  wdh_work_op ops[WDH_PT_OPS];
  long head, tail;  /* posted ops live in [tail, head) (modulo WDH_PT_OPS); tail under mu */
  int stop, drain, idle;
  atomic_long kch_started, kch_stopped;
};

/* The thread's pass over its active ops (profilerProgressOps): start once the channel started,
 * phases then stop once it completed; completed ops at the tail are recycled. */
static int pt_progress(wdh_pthread *pt, long tail, long head) {
  int progressed = 0;
  for (long i = tail; i < head; i++) {
    wdh_work_op *w = &pt->ops[i % WDH_PT_OPS];
    int dev = atomic_load(&w->dev);
    if (!w->started && dev >= WDH_DEV_STARTED) {
      wdh_descr d;
      memset(&d, 0, sizeof(d));
      d.type = ncclProfileKernelCh;
      d.parent = w->task;
      d.rank = w->rank;
      d.channel = (uint8_t)w->channel;
      d.ptimer = w->t_start;
      w->kch = wdh_start(w->plugin, w->ctx, &d);
      w->started = 1;
      atomic_fetch_add(&pt->kch_started, 1);
      progressed = 1;
    }
    if (w->started && dev == WDH_DEV_COMPLETED) {
      /* profilerFireKernelPhaseEvents, then ncclProfilerStopKernelChEvent. */
      if (w->kch && has(w->mask, ncclProfileKernelPhase)) {
        static const char *const names[3] = {"initial_sync", "compute", "final_sync"};
        uint64_t span = w->t_stop > w->t_start ? w->t_stop - w->t_start : 3;
        for (int k = 0; k < 3; k++) {
          wdh_descr d;
          memset(&d, 0, sizeof(d));
          d.type = ncclProfileKernelPhase;
          d.parent = w->kch;
          d.rank = w->rank;
          d.channel = (uint8_t)w->channel;
          d.phase_id = k;
          d.phase_name = names[k];
          d.ptimer = w->t_start + span * (uint64_t)k / 3;
          void *h = wdh_start(w->plugin, w->ctx, &d);
          if (h) {
            wdh_state(w->plugin, h, ncclProfilerKernelPhaseStop, w->t_start + span * (uint64_t)(k + 1) / 3);
            wdh_stop(w->plugin, h);
          }
        }
      }
      if (w->kch) {
        wdh_state(w->plugin, w->kch, ncclProfilerKernelChStop, w->t_stop);
        wdh_stop(w->plugin, w->kch);
      }
      atomic_fetch_add(&pt->kch_stopped, 1);
      atomic_store(&w->dev, -1); /* delivered; recycled once it reaches the tail */
      progressed = 1;
    }
  }
  return progressed;
}

static void *pt_main(void *arg) {
  wdh_pthread *pt = arg;
  pthread_mutex_lock(&pt->mu);
  for (;;) {
    while (pt->tail == pt->head && !pt->stop) pthread_cond_wait(&pt->cv, &pt->mu);
    if (pt->stop && (pt->tail == pt->head || pt->drain)) {
      /* cleanupAndStop(drainStuck): ops whose kernels never finish are dropped, no stop. */
      for (long i = pt->tail; i < pt->head; i++) atomic_store(&pt->ops[i % WDH_PT_OPS].dev, 0);
      pt->tail = pt->head;
      break;
    }
    long tail = pt->tail, head = pt->head;
    pt->idle = 0;
    pthread_mutex_unlock(&pt->mu);
    int progressed = pt_progress(pt, tail, head); /* outside the lock: the plugin may block */
    pthread_mutex_lock(&pt->mu);
    while (pt->tail < head && atomic_load(&pt->ops[pt->tail % WDH_PT_OPS].dev) == -1) {
      atomic_store(&pt->ops[pt->tail % WDH_PT_OPS].dev, 0);
      pt->tail++;
    }
    pt->idle = !progressed;
    pthread_cond_broadcast(&pt->cv);
    if (!progressed) {
      /* Back off briefly while the head has not completed (updateProgressInterval: <= 10 us). */
      pthread_mutex_unlock(&pt->mu);
      usleep(10);
      pthread_mutex_lock(&pt->mu);
    }
  }
  pthread_cond_broadcast(&pt->cv);
  pthread_mutex_unlock(&pt->mu);
  return NULL;
}

wdh_pthread *wdh_pthread_create(void) {
  wdh_pthread *pt = calloc(1, sizeof(*pt));
  if (!pt) return NULL;
  pthread_mutex_init(&pt->mu, NULL);
  pthread_cond_init(&pt->cv, NULL);
  if (pthread_create(&pt->thread, NULL, pt_main, pt) != 0) {
    free(pt);
    return NULL;
  }
  pthread_setname_np(pt->thread, "wdh-profiler");
  return pt;
}

void wdh_pthread_attach(wdh_pthread *pt, wdh_comm *c) { c->pthread = pt; }

/* ncclProfilerPostPlanWork: one work op per channel the task's kernel runs on. */
static void pt_post(wdh_op *op) {
  wdh_comm *c = op->comm;
  wdh_pthread *pt = c->pthread;
  /* At capture nothing is posted: the captured host callback posts at each replay. */
  if (!pt || c->plugin->version < 7 || !has_kernelch(op) || !op->coll || op->cfg.graph_captured)
    return;
  for (int ch = 0; ch < op->cfg.n_channels && ch < WDH_MAX_CH; ch++) {
    pthread_mutex_lock(&pt->mu);
    while (pt->head - pt->tail >= WDH_PT_OPS) pthread_cond_wait(&pt->cv, &pt->mu);
    long i = pt->head;
    wdh_work_op *w = &pt->ops[i % WDH_PT_OPS];
    w->started = 0;
    w->plugin = c->plugin;
    w->ctx = c->ctx;
    w->task = op->coll;
    w->kch = NULL;
    w->rank = c->rank;
    w->channel = ch;
    w->mask = op->mask;
    w->t_start = w->t_stop = 0;
    atomic_store(&w->dev, WDH_DEV_POSTED);
    pt->head = i + 1;
    op->kslot[ch] = (int)(i % WDH_PT_OPS) + 1;
    pthread_cond_broadcast(&pt->cv);
    pthread_mutex_unlock(&pt->mu);
  }
}

/* The kernel writes the channel's start or completion counter (device/common.h, profiler()). */
static void pt_mark(wdh_op *op, int ch, int dev) {
  wdh_pthread *pt = op->comm->pthread;
  if (!pt || !op->kslot[ch]) return;
  wdh_work_op *w = &pt->ops[op->kslot[ch] - 1];
  if (dev == WDH_DEV_STARTED) w->t_start = wdh_now_ns();
  else w->t_stop = wdh_now_ns();
  int expect = dev - 1;
  atomic_compare_exchange_strong(&w->dev, &expect, dev);
  if (dev == WDH_DEV_COMPLETED) op->kslot[ch] = 0;
}

void wdh_pthread_settle(wdh_pthread *pt) {
  pthread_mutex_lock(&pt->mu);
  for (;;) {
    int pending = 0;
    for (long i = pt->tail; i < pt->head; i++) {
      wdh_work_op *w = &pt->ops[i % WDH_PT_OPS];
      int dev = atomic_load(&w->dev);
      if (dev == WDH_DEV_COMPLETED || (dev == WDH_DEV_STARTED && !w->started)) pending = 1;
    }
    if (!pending && (pt->idle || pt->tail == pt->head)) break;
    pthread_cond_wait(&pt->cv, &pt->mu);
  }
  pthread_mutex_unlock(&pt->mu);
}

void wdh_pthread_destroy(wdh_pthread *pt, int drain) {
  if (!pt) return;
  pthread_mutex_lock(&pt->mu);
  pt->stop = 1;
  pt->drain = drain;
  pthread_cond_broadcast(&pt->cv);
  pthread_mutex_unlock(&pt->mu);
  pthread_join(pt->thread, NULL);
  pthread_mutex_destroy(&pt->mu);
  pthread_cond_destroy(&pt->cv);
  free(pt);
}

long wdh_pthread_kch_started(wdh_pthread *pt) { return atomic_load(&pt->kch_started); }
long wdh_pthread_kch_stopped(wdh_pthread *pt) { return atomic_load(&pt->kch_stopped); }

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

uint64_t wdh_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

long wdh_rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
    fclose(f);
  }
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

void wdh_op_hang(wdh_comm *c, wdh_op *op) {
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.hang_channel = 0;
  wdh_op_enqueue(c, &cfg, op);
  wdh_op_proxy(op);
}

int wdh_gpu_capture_allreduces(wdh_comm *c, int n, int lead_kernel, int split) {
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  cfg.no_proxy = 1;
  cfg.graph_captured = 1;
  cfg.in_capture = 1;
  int gid = wdh_gpu_capture_begin(c);
  if (lead_kernel) wdh_gpu_capture_kernel(c);
  for (int k = 1; k <= n; k++) {
    if (k == split) wdh_gpu_capture_kernel(c);
    wdh_op op;
    wdh_op_enqueue(c, &cfg, &op);
  }
  wdh_gpu_capture_end(c);
  return gid;
}

void wdh_sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

char *wdh_tempdir(const char *tag) {
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = "/tmp";
  char *path = malloc(strlen(base) + strlen(tag ? tag : "x") + 32);
  if (!path) return NULL;
  sprintf(path, "%s/wdh-%s-XXXXXX", base, tag ? tag : "x");
  if (!mkdtemp(path)) {
    free(path);
    return NULL;
  }
  return path;
}

static void rmtree_depth(const char *dir, int depth) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char buf[4096];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(buf, sizeof(buf), "%s/%s", dir, e->d_name);
    if (unlink(buf) != 0 && depth > 0) rmtree_depth(buf, depth - 1); /* a host or triggers dir */
  }
  closedir(d);
  rmdir(dir);
}

void wdh_rmtree(const char *dir) { rmtree_depth(dir, 2); }

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int is_dump_name(const char *name, const char *reason) {
  if (name[0] == '.' || strncmp(name, "trigger-", 8) == 0) return 0;
  static const char *const reasons[] = {"stall", "signal", "peer", "abort"};
  char suffix[64], gz[72];
  for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
    const char *r = reason ? reason : reasons[i];
    snprintf(suffix, sizeof(suffix), "-%s.json", r);
    snprintf(gz, sizeof(gz), "%s.gz", suffix); /* NCCL_WATCHDOG_COMPRESS=gzip */
    if (ends_with(name, suffix) || ends_with(name, gz)) return 1;
    if (reason) break;
  }
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Dumps in dir and in its host subdirectories (<dir>/<host>/, the plugin's layout). */
static int list_in(const char *dir, int depth, const char *reason, char **paths, int max, int n) {
  DIR *d = opendir(dir);
  if (!d) return n;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char sub[4096];
    snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
    if (!is_dump_name(e->d_name, reason)) {
      struct stat st;
      if (depth > 0 && strcmp(e->d_name, "triggers") != 0 && stat(sub, &st) == 0 &&
          S_ISDIR(st.st_mode))
        n = list_in(sub, depth - 1, reason, paths, max, n);
      continue;
    }
    if (paths && n < max) paths[n] = strdup(sub);
    n++;
  }
  closedir(d);
  return n;
}

int wdh_list_dumps(const char *dir, const char *reason, char **paths, int max) {
  int n = list_in(dir, 1, reason, paths, max, 0);
  if (paths) qsort(paths, (size_t)(n < max ? n : max), sizeof(char *), cmp_str);
  return n;
}

void wdh_free_paths(char **paths, int n) {
  for (int i = 0; i < n; i++) free(paths[i]);
}

int wdh_wait_dumps(const char *dir, const char *reason, int want, unsigned timeout_ms) {
  uint64_t end = wdh_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
  int n;
  while ((n = wdh_list_dumps(dir, reason, NULL, 0)) < want && wdh_now_ns() < end)
    wdh_sleep_ms(10);
  return n;
}

int wdh_verdict_line(const char *dir, unsigned k, unsigned timeout_ms, char *out, size_t len) {
  char path[4200];
  snprintf(path, sizeof path, "%s/verdict-%u.txt", dir, k);
  out[0] = '\0';
  uint64_t end = wdh_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
  while (access(path, F_OK) != 0 && wdh_now_ns() < end) wdh_sleep_ms(50);
  char *t = wdh_read_file(path, NULL); /* written whole: a temporary renamed */
  if (!t) return 0;
  snprintf(out, len, "%.*s", (int)strcspn(t, "\n"), t);
  free(t);
  return 1;
}

void wdh_launcher_env(int rank, int local_rank, int world_size) {
  char n[16];
  snprintf(n, sizeof n, "%d", rank);
  setenv("RANK", n, 1);
  if (local_rank >= 0) {
    snprintf(n, sizeof n, "%d", local_rank);
    setenv("LOCAL_RANK", n, 1);
  }
  snprintf(n, sizeof n, "%d", world_size);
  setenv("WORLD_SIZE", n, 1);
}

int wdh_fork_ranks(int n, void (*fn)(int rank, int ready_fd), pid_t *pids) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      close(fds[0]);
      fn(r, fds[1]);
      _exit(0);
    }
  }
  close(fds[1]);
  int ready = 0;
  char ok;
  while (ready < n && read(fds[0], &ok, 1) == 1) ready++;
  close(fds[0]);
  return ready;
}

void wdh_kill_ranks(pid_t *pids, int n) {
  for (int r = 0; r < n; r++) {
    if (pids[r] <= 0) continue;
    kill(pids[r], SIGKILL);
    waitpid(pids[r], NULL, 0);
    pids[r] = 0;
  }
}

int wdh_wait_child(pid_t pid, unsigned timeout_ms, int *status) {
  uint64_t end = wdh_now_ns() + (uint64_t)timeout_ms * 1000000ULL;
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR)) return 1; /* r < 0: nothing left to wait for */
    if (wdh_now_ns() >= end) break;
    wdh_sleep_ms(5);
  }
  kill(pid, SIGKILL);
  waitpid(pid, status, 0);
  return 0;
}

int wdh_barrier(const char *dir, const char *name, int rank, int n, unsigned timeout_ms) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s.%d", dir, name, rank);
  FILE *f = fopen(path, "w");
  if (f) fclose(f);
  uint64_t end = wdh_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  for (;;) {
    int here = 0;
    for (int r = 0; r < 4096 && here < n; r++) {
      snprintf(path, sizeof path, "%s/%s.%d", dir, name, r);
      here += access(path, F_OK) == 0;
    }
    if (here >= n) return 0;
    if (wdh_now_ns() >= end) return -1;
    wdh_sleep_ms(5);
  }
}

char *wdh_read_file(const char *path, size_t *len) {
  gzFile f = gzopen(path, "rb"); /* zlib reads a plain file as it is */
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  int got;
  while (buf && (got = gzread(f, buf + n, (unsigned)(cap - n))) > 0) {
    n += (size_t)got;
    if (n < cap) continue;
    char *nb = realloc(buf, 2 * cap + 1);
    if (!nb) free(buf);
    buf = nb;
    cap *= 2;
  }
  gzclose(f);
  if (!buf) return NULL;
  buf[n] = '\0';
  if (len) *len = n;
  return buf;
}

void *wdh_json_load(const char *path) {
  char *buf = wdh_read_file(path, NULL);
  if (!buf) return NULL;
  cJSON *j = cJSON_Parse(buf);
  free(buf);
  return j;
}

void wdh_json_free(void *json) { cJSON_Delete(json); }

int wdh_validate_dump(const char *path) {
  const char *src = getenv("WDH_SOURCE_DIR");
  if (!src) return 0;
  char script[4096];
  snprintf(script, sizeof(script), "%s/tests/tools/validate_dump.py", src);
  if (access(script, R_OK) != 0) return 0;
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    execlp("python3", "python3", script, path, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(st) && WEXITSTATUS(st) == 127) return 0; /* no python3: nothing to check */
  return (WIFEXITED(st) && WEXITSTATUS(st) == 0) ? 0 : 1;
}

void *wdh_jpath(void *json, const char *path) {
  cJSON *cur = json;
  char key[256];
  const char *s = path;
  while (cur && *s) {
    size_t n = strcspn(s, ".");
    if (n >= sizeof(key)) return NULL;
    memcpy(key, s, n);
    key[n] = 0;
    s += n;
    if (*s == '.') s++;
    char *end;
    long idx = strtol(key, &end, 10);
    if (*key && *end == 0 && cJSON_IsArray(cur))
      cur = cJSON_GetArrayItem(cur, (int)idx);
    else
      cur = cJSON_GetObjectItemCaseSensitive(cur, key);
  }
  return cur;
}

const char *wdh_jstr(void *json, const char *path) {
  cJSON *j = wdh_jpath(json, path);
  return cJSON_IsString(j) ? j->valuestring : NULL;
}

double wdh_jnum(void *json, const char *path, double fallback) {
  cJSON *j = wdh_jpath(json, path);
  return cJSON_IsNumber(j) ? j->valuedouble : fallback;
}

static atomic_int g_check_failures;

void wdh_check_fail(const char *file, int line, const char *expr, const char *fmt, ...) {
  atomic_fetch_add(&g_check_failures, 1);
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "CHECK FAILED %s:%d: %s: %s\n", file, line, expr, msg);
}

int wdh_check_failures(void) { return atomic_load(&g_check_failures); }

int wdh_check_summary(const char *name) {
  int n = wdh_check_failures();
  printf("%s: %s (%d failed checks, %ld callbacks, %ld callback failures)\n", name,
         n ? "FAIL" : "PASS", n, wdh_calls(), wdh_failures());
  fflush(stdout);
  return n ? 1 : 0;
}

char *wdh_scenario_dir(const char *tag, const char *timeout, const char *poll) {
  char *dir = wdh_tempdir(tag);
  if (!dir) {
    fprintf(stderr, "wdhost: cannot create a dump directory for %s\n", tag);
    exit(1);
  }
  setenv("NCCL_WATCHDOG_DUMP_DIR", dir, 1);
  setenv("NCCL_WATCHDOG_RING_DIR", dir, 1); /* ring files go with the dumps, removed with them */
  setenv("NCCL_WATCHDOG_TIMEOUT", timeout, 1);
  setenv("NCCL_WATCHDOG_POLL", poll, 1);
  /* The automatic verdict (on for users) runs the analyzer beside the plugin after every
   * episode; scenarios about other things leave it out unless they ask (0 without overwriting). */
  setenv("NCCL_WATCHDOG_VERDICT", "0", 0);
  return dir;
}

int wdh_scenario_end(const char *name, char *dir) {
  WDH_CHECK(wdh_failures() == 0, "%ld callbacks failed", wdh_failures());
  int rc = wdh_check_summary(name);
  if (rc || getenv("WDH_KEEP")) { /* WDH_KEEP=1: kept for a look by hand */
    if (rc) wdh_log_print();
    fprintf(stderr, "dumps kept in %s\n", dir);
  } else {
    wdh_rmtree(dir);
  }
  free(dir);
  return rc;
}

int wdh_analyzer_first_line(const char *dir, const char *extra, char *out, size_t len) {
  out[0] = '\0';
  const char *az = getenv("WDH_ANALYZER");
  if (!az || access(az, X_OK) != 0) return 0;
  char cmd[2048], line[4096];
  snprintf(cmd, sizeof cmd, "'%s' %s '%s' 2>&1", az, extra ? extra : "", dir);
  FILE *p = popen(cmd, "r");
  while (p && fgets(line, sizeof line, p)) {
    fputs(line, stderr);
    if (!out[0]) snprintf(out, len, "%s", line);
  }
  if (p) pclose(p);
  return 1;
}

void *wdh_signal_snapshot(const char *dir) {
  kill(getpid(), SIGUSR1);
  int n = wdh_wait_dumps(dir, "signal", 1, 5000);
  WDH_CHECK(n == 1, "%d signal dumps in %s after one SIGUSR1, expected 1", n, dir);
  char *paths[1];
  int k = wdh_list_dumps(dir, "signal", paths, 1);
  if (k != 1) {
    wdh_free_paths(paths, k < 1 ? k : 1);
    return NULL;
  }
  WDH_CHECK(wdh_validate_dump(paths[0]) == 0, "%s does not validate", paths[0]);
  void *j = wdh_json_load(paths[0]);
  WDH_CHECK(j != NULL, "cannot parse %s", paths[0]);
  free(paths[0]);
  return j;
}
