/*
 * The seed design (minimal_profiler), reimplemented minimally as the benchmark's reference point:
 * a mutex per context around event allocation, one malloc per started event, and one JSON line
 * per stop and per state change written with fprintf to a per-process trace file under a fresh
 * temporary directory (WD_REF_DIR when set). Thread ids come from syscall(SYS_gettid) and time
 * from clock_gettime on every record, as in the seed. Not for production: it exists so the bench
 * table shows what that design costs on the same driver.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "plugin/profiler_abi.h"

#define EXPORT __attribute__((visibility("default")))

typedef struct ref_ctx {
  pthread_mutex_t lock; /* the seed's per-context pool/blacklist mutex */
  uint64_t comm_id;
  int rank;
  long live;
} ref_ctx;

typedef struct ref_event {
  ref_ctx *ctx;
  uint64_t type;
  void *parent;
  const char *func;
  double start_us;
  int start_tid;
} ref_event;

static pthread_mutex_t ref_proc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t ref_file_lock = PTHREAD_MUTEX_INITIALIZER;
static int ref_contexts;
static FILE *ref_file;
static int ref_pid;

static double ref_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int ref_tid(void) { return (int)syscall(SYS_gettid); }

static void ref_open_file(void) {
  char dir[512];
  const char *env = getenv("WD_REF_DIR");
  if (env && *env) {
    snprintf(dir, sizeof(dir), "%s", env);
    mkdir(dir, 0700);
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/wd-ref-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return;
  }
  char path[600];
  snprintf(path, sizeof(path), "%s/trace_%ld_pid%d.jsonl", dir, (long)time(NULL), ref_pid);
  ref_file = fopen(path, "w");
}

static ncclResult_t ref_init_v5(void **context, uint64_t comm_id, int *mask, const char *name,
                                int nnodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  (void)name, (void)nnodes, (void)nranks, (void)logfn;
  ref_ctx *c = calloc(1, sizeof(*c));
  if (!c) {
    *context = NULL;
    return ncclSuccess;
  }
  pthread_mutex_init(&c->lock, NULL);
  c->comm_id = comm_id;
  c->rank = rank;
  pthread_mutex_lock(&ref_proc_lock);
  if (ref_contexts++ == 0) {
    ref_pid = getpid();
    ref_open_file();
  }
  pthread_mutex_unlock(&ref_proc_lock);
  *mask = 4095;
  *context = c;
  return ncclSuccess;
}

static ncclResult_t ref_init_v4(void **context, int *mask, const char *name, uint64_t comm_hash,
                                int nnodes, int nranks, int rank, ncclDebugLogger_t logfn) {
  return ref_init_v5(context, comm_hash, mask, name, nnodes, nranks, rank, logfn);
}

/* Shared by every descriptor version: type, parentObj and the union start at the same offsets
 * (v4's type is one byte, read separately). */
static ncclResult_t ref_start(void *context, void **handle, uint64_t type, void *parent,
                              const char *func) {
  ref_ctx *c = context;
  *handle = NULL;
  if (!c) return ncclSuccess;
  pthread_mutex_lock(&c->lock);
  ref_event *e = malloc(sizeof(*e));
  if (e) c->live++;
  pthread_mutex_unlock(&c->lock);
  if (!e) return ncclSuccess;
  e->ctx = c;
  e->type = type;
  e->parent = parent;
  e->func = func;
  e->start_us = ref_now_us();
  e->start_tid = ref_tid();
  *handle = e;
  return ncclSuccess;
}

static const char *ref_func(uint64_t type, const ncclProfilerEventDescr_v5_t *d) {
  if (type == ncclProfileColl) return d->coll.func;
  if (type == ncclProfileCollApi) return d->collApi.func;
  if (type == ncclProfileP2p) return d->p2p.func;
  if (type == ncclProfileP2pApi) return d->p2pApi.func;
  return NULL;
}

static ncclResult_t ref_start_v6(void *context, void **handle, ncclProfilerEventDescr_v6_t *d) {
  return ref_start(context, handle, d->type, d->parentObj,
                   ref_func(d->type, (const ncclProfilerEventDescr_v5_t *)d));
}
static ncclResult_t ref_start_v5(void *context, void **handle, ncclProfilerEventDescr_v5_t *d) {
  return ref_start(context, handle, d->type, d->parentObj, ref_func(d->type, d));
}
static ncclResult_t ref_start_v4(void *context, void **handle, ncclProfilerEventDescr_v4_t *d) {
  const char *func = d->type == ncclProfileColl ? d->coll.func
                     : d->type == ncclProfileP2p ? d->p2p.func
                                                 : NULL;
  return ref_start(context, handle, d->type, d->parentObj, func);
}

static ncclResult_t ref_stop(void *handle) {
  ref_event *e = handle;
  if (!e) return ncclSuccess;
  double stop_us = ref_now_us();
  int tid = ref_tid();
  pthread_mutex_lock(&ref_file_lock);
  if (ref_file)
    fprintf(ref_file,
            "{\"recordType\":\"event\",\"type\":%llu,\"func\":\"%s\",\"commId\":%llu,\"rank\":%d,"
            "\"start\":{\"ts\":%.3f,\"pid\":%d,\"tid\":%d},\"stop\":{\"ts\":%.3f,\"pid\":%d,"
            "\"tid\":%d},\"duration\":%.3f,\"parentObj\":\"%p\",\"eventAddr\":\"%p\","
            "\"ctx\":\"%p\"}\n",
            (unsigned long long)e->type, e->func ? e->func : "",
            (unsigned long long)e->ctx->comm_id,
            e->ctx->rank, e->start_us, ref_pid, e->start_tid, stop_us, ref_pid, tid,
            stop_us - e->start_us, e->parent, (void *)e, (void *)e->ctx);
  pthread_mutex_unlock(&ref_file_lock);
  ref_ctx *c = e->ctx;
  pthread_mutex_lock(&c->lock);
  c->live--;
  free(e);
  pthread_mutex_unlock(&c->lock);
  return ncclSuccess;
}

static ncclResult_t ref_state(void *handle, ncclProfilerEventState_t state,
                              ncclProfilerEventStateArgs_t *args) {
  ref_event *e = handle;
  if (!e) return ncclSuccess;
  double ts = ref_now_us();
  int tid = ref_tid();
  pthread_mutex_lock(&ref_file_lock);
  if (ref_file)
    fprintf(ref_file,
            "{\"recordType\":\"state\",\"eventAddr\":\"%p\",\"ts\":%.3f,\"id\":%d,\"pid\":%d,"
            "\"tid\":%d,\"transSize\":%zu}\n",
            (void *)e, ts, (int)state, ref_pid, tid, args ? args->proxyStep.transSize : 0);
  pthread_mutex_unlock(&ref_file_lock);
  return ncclSuccess;
}

static ncclResult_t ref_finalize(void *context) {
  ref_ctx *c = context;
  if (!c) return ncclSuccess;
  pthread_mutex_lock(&ref_proc_lock);
  if (--ref_contexts == 0 && ref_file) {
    pthread_mutex_lock(&ref_file_lock);
    fclose(ref_file);
    ref_file = NULL;
    pthread_mutex_unlock(&ref_file_lock);
  }
  pthread_mutex_unlock(&ref_proc_lock);
  pthread_mutex_destroy(&c->lock);
  free(c);
  return ncclSuccess;
}

EXPORT ncclProfiler_v6_t ncclProfiler_v6 = {"reference", ref_init_v5, ref_start_v6, ref_stop,
                                            ref_state, ref_finalize};
EXPORT ncclProfiler_v5_t ncclProfiler_v5 = {"reference", ref_init_v5, ref_start_v5, ref_stop,
                                            ref_state, ref_finalize};
EXPORT ncclProfiler_v4_t ncclProfiler_v4 = {"reference", ref_init_v4, ref_start_v4, ref_stop,
                                            ref_state, ref_finalize};
