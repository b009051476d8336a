/*
 * A stand-in for the CUDA driver (built as libcuda.so.1) that the test host controls. It has the
 * entry points the plugin looks up and a GPU the host drives by hand: each stream is a queue of
 * positions; a kernel takes one (wdfake_launch), an event recorded on a stream completes once
 * the host has completed every position before it (wdfake_complete). A kernel that hangs is one
 * the host never completes.
 *
 * CUresult values as the driver's: 0 success, 600 not ready, 1 invalid value.
 *
 * Capture and replay, as the driver API documents them (cuda.h; CUDA C++ Programming Guide,
 * "Stream Capture"):
 *  - A capturing stream (cuStreamBeginCapture: "all operations pushed into the stream will not
 *    be executed, but will instead be captured into a graph") takes nodes instead of work: a
 *    kernel (wdfake_capture_kernel), an event record, a host function (cuLaunchHostFunc).
 *  - cuEventRecordWithFlags with CU_EVENT_RECORD_EXTERNAL during capture adds an event record
 *    node: "Each launch of the graph will record event" (cuGraphAddEventRecordNode); the event
 *    stays queryable. The flag is invalid outside capture. A plain record during capture makes
 *    the event a captured one: cuEventQuery returns CUDA_ERROR_CAPTURED_EVENT (907) until it is
 *    recorded again outside capture.
 *  - cuLaunchHostFunc during capture adds a host node that runs at every launch, when the GPU
 *    gets there; work behind it waits for it. Here host functions run on the thread that
 *    completes the work ahead of them (wdfake_complete): the host playing the GPU.
 *  - wdfake_graph_launch (cuGraphLaunch) pushes the graph's nodes onto the stream in order:
 *    each kernel takes a position, each external event is recorded behind the kernels before
 *    it (at launch: a graph launched again re-targets the record), each host node is queued.
 *  - cuStreamGetCaptureInfo_v2 gives the capture's id (unique per capture in the process), or
 *    fails when the host turned ids off (wdfake_capture_ids), as a driver without it would.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define OK 0
#define NOT_READY 600
#define INVALID 1

typedef struct fake_stream {
  uint32_t magic;
  _Atomic uint64_t submitted; /* positions taken so far */
  _Atomic uint64_t completed; /* positions the "GPU" finished */
  _Atomic int capturing;
  int graph;                  /* the graph being captured (under gmu) */
  unsigned long long serial;  /* its capture id (under gmu) */
} fake_stream;

typedef struct fake_event {
  uint32_t magic;
  _Atomic(fake_stream *) stream; /* NULL until recorded */
  _Atomic uint64_t pos;          /* completes when stream->completed >= pos */
  _Atomic int captured;          /* last recorded plainly in a capturing stream */
} fake_event;

#define CAPTURED_EVENT 907
#define MAXGRAPHS 64
#define MAXNODES 2048 /* a serving engine's graph: 160 captured launches, their records */
enum { N_KERNEL = 1, N_EVENT, N_HOST };
typedef struct gnode {
  int kind;
  fake_event *ev;
  void (*fn)(void *);
  void *arg;
} gnode;
/* A user object (cuUserObjectCreate): its destructor runs when its last reference goes. */
typedef struct fake_uobj {
  uint32_t magic;
  void *ptr;
  void (*fn)(void *);
  int refs;
} fake_uobj;
#define MAXOBJS 8
typedef struct fgraph {
  int live; /* captured and not destroyed (wdfake_graph_destroy) */
  int n;
  gnode node[MAXNODES];
  int nobj;
  fake_uobj *obj[MAXOBJS]; /* the references it holds (cuGraphRetainUserObject) */
} fgraph;
/* Host functions queued on a stream behind its positions. */
typedef struct hfn {
  fake_stream *s;
  uint64_t after;
  void (*fn)(void *);
  void *arg;
  struct hfn *next;
} hfn;
static pthread_mutex_t gmu = PTHREAD_MUTEX_INITIALIZER;
static fgraph graphs[MAXGRAPHS + 1];
static int ngraphs;
static hfn *hhead, *htail;
static _Atomic int capture_ids = 1;
static unsigned long long capture_serial; /* capture ids: unique per capture (under gmu) */
static _Atomic long uobjs_live;
#define UOBJ_MAGIC 0x554f424au

/* Graph 0 is a capture that is never launched: its nodes are accepted and forgotten. */
static int add_node(fake_stream *s, gnode nd) {
  fgraph *g = &graphs[s->graph];
  if (s->graph <= 0) return OK;
  if (g->n >= MAXNODES) return 2;
  g->node[g->n++] = nd;
  return OK;
}
/* Queued host functions come from a fixed pool (under gmu): a million replays allocate nothing,
 * so a test of the plugin's memory measures the plugin's. */
#define HPOOL 4096
static hfn hpool[HPOOL];
static hfn *hfree;
static int hpool_init;
static hfn *hfn_get(void) {
  if (!hpool_init) {
    for (int i = 0; i < HPOOL; i++) hpool[i].next = i + 1 < HPOOL ? &hpool[i + 1] : NULL;
    hfree = &hpool[0];
    hpool_init = 1;
  }
  hfn *h = hfree;
  if (h) hfree = h->next;
  return h;
}
static void hfn_put(hfn *h) {
  pthread_mutex_lock(&gmu);
  h->next = hfree;
  hfree = h;
  pthread_mutex_unlock(&gmu);
}
static int host_enqueue(fake_stream *s, uint64_t after, void (*fn)(void *), void *arg) {
  hfn *h = hfn_get();
  if (!h) return 2; /* out of memory */
  memset(h, 0, sizeof(*h));
  h->s = s;
  h->after = after;
  h->fn = fn;
  h->arg = arg;
  if (htail) htail->next = h;
  else hhead = h;
  htail = h;
  return OK;
}

#define STREAM_MAGIC 0x5354524du
#define EVENT_MAGIC 0x4556544eu

static _Atomic long events_live, records, queries;
static _Atomic int sticky_error;
static int fake_ctx_token;

/* ---- driver entry points the plugin uses ---- */

EXPORT int cuCtxGetCurrent(void **ctx) {
  if (!ctx) return INVALID;
  *ctx = &fake_ctx_token;
  return OK;
}
EXPORT int cuCtxPushCurrent_v2(void *ctx) { return ctx ? OK : INVALID; }
EXPORT int cuCtxPopCurrent_v2(void **ctx) {
  if (ctx) *ctx = &fake_ctx_token;
  return OK;
}
/* The calling thread's current device (cudaSetDevice): one process may drive several GPUs
 * (JAX, TensorFlow, nccl-tests -g). */
static __thread int cur_dev;
#define NDEVS 8
EXPORT void wdfake_set_device(int dev) { cur_dev = dev >= 0 && dev < NDEVS ? dev : 0; }
EXPORT int cuCtxGetDevice(int *dev) {
  if (!dev) return INVALID;
  *dev = cur_dev;
  return OK;
}
EXPORT int cuDeviceGetUuid_v2(unsigned char *uuid, int dev) {
  if (!uuid || dev < 0 || dev >= NDEVS) return INVALID;
  for (int i = 0; i < 16; i++) uuid[i] = (unsigned char)(0xf0 + i);
  uuid[15] = (unsigned char)(0xf0 + dev);
  return OK;
}

EXPORT int cuEventCreate(void **ev, unsigned flags) {
  (void)flags;
  if (!ev) return INVALID;
  fake_event *e = calloc(1, sizeof(*e));
  if (!e) return 2; /* out of memory */
  e->magic = EVENT_MAGIC;
  atomic_fetch_add(&events_live, 1);
  *ev = e;
  return OK;
}

EXPORT int cuEventDestroy_v2(void *ev) {
  fake_event *e = ev;
  if (!e || e->magic != EVENT_MAGIC) return INVALID;
  e->magic = 0;
  free(e);
  atomic_fetch_sub(&events_live, 1);
  return OK;
}

EXPORT int cuEventRecordWithFlags(void *ev, void *stream, unsigned flags) {
  fake_event *e = ev;
  fake_stream *s = stream;
  if (!e || e->magic != EVENT_MAGIC || !s || s->magic != STREAM_MAGIC || (flags & ~1u)) return INVALID;
  int rc = OK;
  pthread_mutex_lock(&gmu);
  if (atomic_load(&s->capturing)) {
    if (flags & 1u) rc = add_node(s, (gnode){N_EVENT, e, NULL, NULL});
    else atomic_store(&e->captured, 1); /* an internal node; the event is now a captured one */
  } else if (flags & 1u) {
    rc = INVALID; /* "invalid outside of stream capture" */
  } else {
    atomic_store(&e->pos, atomic_load(&s->submitted));
    atomic_store(&e->stream, s);
    atomic_store(&e->captured, 0);
  }
  pthread_mutex_unlock(&gmu);
  if (rc == OK) atomic_fetch_add(&records, 1);
  return rc;
}

EXPORT int cuEventRecord(void *ev, void *stream) { return cuEventRecordWithFlags(ev, stream, 0); }

static _Atomic int refuse_nodes;
EXPORT int cuLaunchHostFunc(void *stream, void (*fn)(void *), void *arg) {
  fake_stream *s = stream;
  if (!s || s->magic != STREAM_MAGIC || !fn) return INVALID;
  if (atomic_load(&refuse_nodes)) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  pthread_mutex_lock(&gmu);
  int rc = OK;
  if (atomic_load(&s->capturing)) rc = add_node(s, (gnode){N_HOST, NULL, fn, arg});
  else rc = host_enqueue(s, atomic_load(&s->submitted), fn, arg);
  pthread_mutex_unlock(&gmu);
  return rc;
}

EXPORT int cuStreamGetCaptureInfo_v2(void *stream, int *status, unsigned long long *id, void **graph,
                                     const void **deps, size_t *ndeps) {
  fake_stream *s = stream;
  if (!s || s->magic != STREAM_MAGIC || !status) return INVALID;
  if (!atomic_load(&capture_ids)) return 801; /* CUDA_ERROR_NOT_SUPPORTED */
  pthread_mutex_lock(&gmu);
  *status = atomic_load(&s->capturing) ? 1 : 0;
  if (id) *id = *status ? s->serial : 0;
  if (graph) *graph = *status && s->graph > 0 ? (void *)&graphs[s->graph] : NULL;
  pthread_mutex_unlock(&gmu);
  if (deps) *deps = NULL;
  if (ndeps) *ndeps = 0;
  return OK;
}

/* User objects, as cuda.h documents them: "the destructor callback ... is called when the
 * reference count reaches zero"; a graph holds references moved into it
 * (CU_GRAPH_USER_OBJECT_MOVE) and drops them when destroyed. Destructors run on the thread that
 * drops the last reference here (the driver's own thread on a GPU). */
EXPORT int cuUserObjectCreate(void **out, void *ptr, void (*destroy)(void *), unsigned refs, unsigned flags) {
  if (!out || !destroy || refs == 0 || flags != 1) return INVALID;
  fake_uobj *o = calloc(1, sizeof *o);
  if (!o) return 2;
  *o = (fake_uobj){UOBJ_MAGIC, ptr, destroy, (int)refs};
  atomic_fetch_add(&uobjs_live, 1);
  *out = o;
  return OK;
}
EXPORT int cuUserObjectRelease(void *obj, unsigned count) {
  fake_uobj *o = obj;
  if (!o || o->magic != UOBJ_MAGIC || count == 0) return INVALID;
  pthread_mutex_lock(&gmu);
  int left = o->refs -= (int)count;
  pthread_mutex_unlock(&gmu);
  if (left > 0) return OK;
  o->magic = 0;
  o->fn(o->ptr);
  free(o);
  atomic_fetch_sub(&uobjs_live, 1);
  return OK;
}
EXPORT int cuGraphRetainUserObject(void *graph, void *obj, unsigned count, unsigned flags) {
  fgraph *g = graph;
  fake_uobj *o = obj;
  if (!g || g < &graphs[1] || g > &graphs[MAXGRAPHS] || !o || o->magic != UOBJ_MAGIC || count != 1) return INVALID;
  pthread_mutex_lock(&gmu);
  int rc = g->live && g->nobj < MAXOBJS ? OK : 2;
  if (rc == OK) {
    g->obj[g->nobj++] = o;
    if (!(flags & 1)) o->refs++; /* not moved: the graph takes a reference of its own */
  }
  pthread_mutex_unlock(&gmu);
  return rc;
}

EXPORT int cuEventQuery(void *ev) {
  fake_event *e = ev;
  if (!e || e->magic != EVENT_MAGIC) return INVALID;
  atomic_fetch_add(&queries, 1);
  int err = atomic_load(&sticky_error);
  if (err) return err;
  if (atomic_load(&e->captured)) return CAPTURED_EVENT;
  fake_stream *s = atomic_load(&e->stream);
  if (!s) return OK;
  return atomic_load(&s->completed) >= atomic_load(&e->pos) ? OK : NOT_READY;
}

EXPORT int cuStreamIsCapturing(void *stream, int *status) {
  fake_stream *s = stream;
  if (!s || s->magic != STREAM_MAGIC || !status) return INVALID;
  *status = atomic_load(&s->capturing);
  return OK;
}

EXPORT int cuThreadExchangeStreamCaptureMode(int *mode) { return mode ? OK : INVALID; }

/* ---- control, for the test host ---- */

/* Every stream stays reachable from here (never freed: a plugin may still query events recorded
 * on them), so leak checkers do not report the host's. */
static fake_stream *streams[1024];
static _Atomic int nstreams;
EXPORT void *wdfake_stream_create(void) {
  fake_stream *s = calloc(1, sizeof(*s));
  if (s) {
    s->magic = STREAM_MAGIC;
    int i = atomic_fetch_add(&nstreams, 1);
    if (i < 1024) streams[i] = s;
  }
  return s;
}
/* Streams are never freed: a plugin may still query events recorded on them. */

/* A kernel (or CE copy) enqueued on the stream; returns its position. */
EXPORT uint64_t wdfake_launch(void *stream) {
  fake_stream *s = stream;
  return atomic_fetch_add(&s->submitted, 1) + 1;
}
static void advance(fake_stream *s, uint64_t pos) {
  uint64_t cur = atomic_load(&s->completed);
  while (cur < pos && !atomic_compare_exchange_weak(&s->completed, &cur, pos)) {
  }
}
/* The GPU finished every position up to pos; host functions queued behind positions up to pos
 * run first, in order, each once the work ahead of it is done. */
EXPORT void wdfake_complete(void *stream, uint64_t pos) {
  fake_stream *s = stream;
  for (;;) {
    pthread_mutex_lock(&gmu);
    hfn *h = NULL, *prev = NULL;
    for (hfn *x = hhead; x; prev = x, x = x->next)
      if (x->s == s) {
        if (x->after <= pos) h = x;
        break;
      }
    if (h) {
      if (prev) prev->next = h->next;
      else hhead = h->next;
      if (htail == h) htail = prev;
    }
    pthread_mutex_unlock(&gmu);
    if (!h) break;
    advance(s, h->after);
    h->fn(h->arg);
    hfn_put(h);
  }
  advance(s, pos);
}
/* Capture into a new graph; returns its id (1..MAXGRAPHS), 0 (never launched) when there is no room. */
EXPORT int wdfake_capture_begin(void *stream) {
  fake_stream *s = stream;
  pthread_mutex_lock(&gmu);
  int id = 0;
  for (int k = 1; k <= MAXGRAPHS && !id; k++) /* a destroyed graph's place is taken again */
    if (!graphs[k].live) id = k;
  if (id) graphs[id].n = 0, graphs[id].nobj = 0, graphs[id].live = 1;
  if (id > ngraphs) ngraphs = id;
  s->graph = id;
  s->serial = ++capture_serial;
  atomic_store(&s->capturing, 1);
  pthread_mutex_unlock(&gmu);
  return id;
}
EXPORT void wdfake_capture_end(void *stream) {
  fake_stream *s = stream;
  pthread_mutex_lock(&gmu);
  atomic_store(&s->capturing, 0);
  s->graph = 0;
  pthread_mutex_unlock(&gmu);
}
/* A kernel launched into the capturing stream: a node, nothing runs. */
EXPORT int wdfake_capture_kernel(void *stream) {
  fake_stream *s = stream;
  pthread_mutex_lock(&gmu);
  int rc = atomic_load(&s->capturing) ? add_node(s, (gnode){N_KERNEL, NULL, NULL, NULL}) : INVALID;
  pthread_mutex_unlock(&gmu);
  return rc;
}
/* cuGraphLaunch of graph id on stream: returns the position before its first kernel (its k-th
 * kernel takes that + k), or 0 for an unknown graph. */
EXPORT uint64_t wdfake_graph_launch(void *stream, int id) {
  fake_stream *s = stream;
  if (id <= 0 || id > MAXGRAPHS) return 0;
  pthread_mutex_lock(&gmu);
  fgraph *g = &graphs[id];
  uint64_t base = atomic_load(&s->submitted), k = base;
  for (int i = 0; i < g->n; i++) {
    gnode *nd = &g->node[i];
    if (nd->kind == N_KERNEL) k++;
    else if (nd->kind == N_HOST) (void)host_enqueue(s, k, nd->fn, nd->arg);
    else {
      atomic_store(&nd->ev->pos, k);
      atomic_store(&nd->ev->stream, s);
      atomic_store(&nd->ev->captured, 0);
    }
  }
  atomic_store(&s->submitted, k);
  pthread_mutex_unlock(&gmu);
  return base;
}
/* cuGraphDestroy and cuGraphExecDestroy of graph id together: its user objects' references go
 * (their destructors run here when those were the last), and its place is free for a capture. */
EXPORT void wdfake_graph_destroy(int id) {
  if (id <= 0 || id > MAXGRAPHS) return;
  pthread_mutex_lock(&gmu);
  int n = graphs[id].live ? graphs[id].nobj : 0;
  fake_uobj *objs[MAXOBJS];
  memcpy(objs, graphs[id].obj, sizeof objs);
  graphs[id].live = 0;
  graphs[id].nobj = 0;
  graphs[id].n = 0;
  pthread_mutex_unlock(&gmu);
  for (int i = 0; i < n; i++) cuUserObjectRelease(objs[i], 1);
}
/* User objects not yet destroyed. */
EXPORT long wdfake_user_objects(void) { return atomic_load(&uobjs_live); }
/* Nodes of graph id (kernels, events, host functions), for tests. */
EXPORT int wdfake_graph_nodes(int id, int kind) {
  if (id <= 0 || id > MAXGRAPHS) return -1;
  pthread_mutex_lock(&gmu);
  int n = 0;
  for (int i = 0; i < graphs[id].n; i++) n += kind == 0 || graphs[id].node[i].kind == kind;
  pthread_mutex_unlock(&gmu);
  return n;
}
/* Whether cuStreamGetCaptureInfo_v2 answers (1, default) or fails as an old driver's would. */
EXPORT void wdfake_capture_ids(int on) { atomic_store(&capture_ids, on); }
/* The driver refuses host functions from now on (1) or accepts them again (0). */
EXPORT void wdfake_refuse_nodes(int on) { atomic_store(&refuse_nodes, on); }
EXPORT uint64_t wdfake_submitted(void *stream) { return atomic_load(&((fake_stream *)stream)->submitted); }
/* Older hosts: a capture into a graph that is never launched (on), or its end. */
EXPORT void wdfake_set_capturing(void *stream, int on) {
  fake_stream *s = stream;
  pthread_mutex_lock(&gmu);
  s->graph = 0;
  atomic_store(&s->capturing, on);
  pthread_mutex_unlock(&gmu);
}
/* Every query fails with this CUresult from now on (0 clears it): a sticky GPU error. */
EXPORT void wdfake_set_error(int err) { atomic_store(&sticky_error, err); }
EXPORT long wdfake_events_live(void) { return atomic_load(&events_live); }
EXPORT long wdfake_records(void) { return atomic_load(&records); }
EXPORT long wdfake_queries(void) { return atomic_load(&queries); }
