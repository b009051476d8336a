/*
 * Callback fuzzer: loads the built plugin as NCCL does and calls it from several threads with
 * random event types (valid, unknown, several bits), parents (live, stale, from other
 * communicators, garbage, unmapped), handles, states, state arguments, strings (NULL, empty,
 * invalid UTF-8, long), pids, contexts (live, finalized, garbage) and ABI versions, while one
 * thread finalizes and re-creates communicators and the watchdog scans and dumps. It passes when
 * every callback returned ncclSuccess and nothing crashed; CI runs it under ASan+UBSan.
 *
 *   fuzz_callbacks PLUGIN.so [--seconds N] [--seed S] [--threads T]
 */
#include <dlfcn.h>
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "plugin/profiler_abi.h"

#define NHANDLES 4096
#define NCOMMS 6
#define MAX_THREADS 16

static ncclProfiler_v4_t *abi4;
static ncclProfiler_v5_t *abi5;
static ncclProfiler_v6_t *abi6;
static ncclProfiler_v7_t *abi7;
static _Atomic(void *) handles[NHANDLES];
static _Atomic(void *) comms[NCOMMS];
static _Atomic(void *) finalized[64]; /* contexts finalized earlier: stale context values */
static _Atomic unsigned nfinalized;
static _Atomic int stop_flag;
static _Atomic uint64_t ncalls, nfailures;
static pthread_mutex_t comm_lock = PTHREAD_MUTEX_INITIALIZER;
static char host_mem[256]; /* memory of the "host": a parent value that is not the plugin's */

static uint64_t next_rand(uint64_t *s) { /* xorshift64* */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545f4914f6cdd1dull;
}
static unsigned pick(uint64_t *s, unsigned n) { return (unsigned)(next_rand(s) % n); }

static void count(ncclResult_t r) {
  atomic_fetch_add_explicit(&ncalls, 1, memory_order_relaxed);
  if (r != ncclSuccess) atomic_fetch_add_explicit(&nfailures, 1, memory_order_relaxed);
}

/* Strings as NCCL could pass them, and some it never would (NCCL's are always valid or NULL). */
static const char *rand_str(uint64_t *s, char *buf, size_t len) {
  static const char *const fixed[] = {"AllReduce", "Broadcast", "Send", "Recv", "ncclFloat32",
                                      "RING", "SIMPLE", "", "quote\"back\\slash\n", "\xff\xfe bad utf8",
                                      "a-very-long-function-name-that-goes-beyond-the-string-table-copy"};
  unsigned k = pick(s, 16);
  if (k == 0) return NULL;
  if (k < 12) return fixed[k - 1];
  size_t n = pick(s, (unsigned)len - 1);
  for (size_t i = 0; i < n; i++) buf[i] = (char)(1 + pick(s, 255));
  buf[n] = '\0';
  return buf;
}

static void *rand_handle(uint64_t *s) {
  switch (pick(s, 10)) {
  case 0: return NULL;
  case 1: return (void *)(uintptr_t)next_rand(s);                     /* garbage */
  case 2: return (void *)(uintptr_t)0xdeadbeef0000ull;                /* unmapped */
  case 3: return host_mem + pick(s, 128);                             /* the host's memory */
  case 4: {                                                           /* another tag, same slot */
    void *h = atomic_load(&handles[pick(s, NHANDLES)]);
    return h ? (void *)(((uintptr_t)h & ~(uintptr_t)63) | pick(s, 64)) : NULL;
  }
  default: return atomic_load(&handles[pick(s, NHANDLES)]);           /* live or stale */
  }
}

static void *rand_context(uint64_t *s) {
  unsigned k = pick(s, 20);
  if (k == 0) return NULL;
  if (k == 1) return host_mem;
  if (k == 2) {
    unsigned n = atomic_load(&nfinalized);
    return n ? atomic_load(&finalized[pick(s, n < 64 ? n : 64)]) : NULL;
  }
  return atomic_load(&comms[pick(s, NCOMMS)]);
}

static uint64_t rand_type(uint64_t *s) {
  switch (pick(s, 12)) {
  case 0: return 0;
  case 1: return next_rand(s);                     /* several bits, unknown bits */
  case 2: return 1ull << pick(s, 64);
  default: return 1ull << pick(s, 16);             /* the types NCCL has (v7: KernelPhase) */
  }
}

/* Random ProxyOp fields (the member every ABI version shares); other types read them as theirs. */
#define FILL_PROXY_OP(d, s)                                                                     \
  do {                                                                                          \
    (d).proxyOp.pid = pick(s, 2) ? getpid() : (pid_t)next_rand(s);                              \
    (d).proxyOp.channelId = (uint8_t)next_rand(s);                                              \
    (d).proxyOp.peer = (int)next_rand(s);                                                       \
    (d).proxyOp.nSteps = (int)next_rand(s);                                                     \
    (d).proxyOp.isSend = (int)pick(s, 2);                                                       \
  } while (0)

/* Coll and P2p fields: the same names in v4's and in v5/v6's (differently laid out) members. */
#define FILL_COLL(d, s)                                                                         \
  do {                                                                                          \
    (d).coll.seqNumber = next_rand(s) % 100;                                                    \
    (d).coll.func = rand_str(s, b1, sizeof b1);                                                 \
    (d).coll.datatype = rand_str(s, b2, sizeof b2);                                             \
    (d).coll.algo = rand_str(s, b3, sizeof b3);                                                 \
    (d).coll.proto = rand_str(s, b4, sizeof b4);                                                \
    (d).coll.nChannels = (uint8_t)pick(s, 80);                                                  \
  } while (0)
#define FILL_P2P(d, s)                                                                          \
  do {                                                                                          \
    (d).p2p.func = rand_str(s, b1, sizeof b1);                                                  \
    (d).p2p.datatype = rand_str(s, b2, sizeof b2);                                              \
    (d).p2p.nChannels = (uint8_t)pick(s, 4);                                                    \
  } while (0)

static void do_start(uint64_t *s) {
  char b1[80], b2[80], b3[80], b4[80];
  void *ctx = rand_context(s), *h = NULL;
  void *parent = rand_handle(s);
  uint64_t type = rand_type(s);
  int version = 4 + (int)pick(s, 4);
  ncclResult_t r;
  if (version == 4) {
    ncclProfilerEventDescr_v4_t d;
    memset(&d, 0, sizeof d);
    d.type = (uint8_t)type; /* v4's type is 8 bits: the fields follow the type NCCL would see */
    d.parentObj = parent;
    if (d.type == ncclProfileColl) {
      FILL_COLL(d, s);
    } else if (d.type == ncclProfileP2p) {
      FILL_P2P(d, s);
      d.p2p.peer = (int)pick(s, 8) - 1;
    } else {
      FILL_PROXY_OP(d, s);
    }
    r = abi4->startEvent(ctx, pick(s, 50) ? &h : NULL, &d);
  } else {
    ncclProfilerEventDescr_v6_t d;
    memset(&d, 0, sizeof d);
    d.type = type;
    d.parentObj = parent;
    if (type == ncclProfileColl) {
      FILL_COLL(d, s);
      d.coll.parentGroup = rand_handle(s);
    } else if (type == ncclProfileP2p) {
      FILL_P2P(d, s);
      d.p2p.parentGroup = rand_handle(s);
    } else if (type == ncclProfileCollApi) {
      d.collApi.func = rand_str(s, b1, sizeof b1);
      d.collApi.datatype = rand_str(s, b2, sizeof b2);
      d.collApi.graphCaptured = pick(s, 2);
    } else if (type == ncclProfileP2pApi) {
      d.p2pApi.func = rand_str(s, b1, sizeof b1);
      d.p2pApi.datatype = rand_str(s, b2, sizeof b2);
    } else if (type == ncclProfileCeColl && version == 6) {
      d.ceColl.func = rand_str(s, b1, sizeof b1);
      d.ceColl.datatype = rand_str(s, b2, sizeof b2);
      d.ceColl.syncStrategy = rand_str(s, b3, sizeof b3);
      d.ceColl.seqNumber = next_rand(s) % 100;
    } else if (type == ncclProfileGroupApi) {
      d.groupApi.groupDepth = (int)pick(s, 4);
      d.groupApi.graphCaptured = pick(s, 2);
    } else {
      FILL_PROXY_OP(d, s);
    }
    if (version == 7) {
      /* v7 (NCCL 2.31): v6's members in v7's layout, and what only v7 carries: userTag,
       * isSymColl, kernelVariant, KernelPhase with any phaseId and a NULL or odd phaseName. */
      ncclProfilerEventDescr_v7_t d7;
      memset(&d7, 0, sizeof d7);
      d7.type = type;
      d7.parentObj = parent;
      d7.rank = (int)pick(s, 8);
      if (type == ncclProfileColl) {
        FILL_COLL(d7, s);
        d7.coll.parentGroup = rand_handle(s);
        d7.coll.userTag = pick(s, 2) ? next_rand(s) : 0;
        d7.coll.isSymColl = (uint8_t)pick(s, 3);
        d7.coll.kernelVariant = pick(s, 2) ? rand_str(s, b3, sizeof b3) : NULL;
      } else if (type == ncclProfileP2p) {
        FILL_P2P(d7, s);
        d7.p2p.parentGroup = rand_handle(s);
        d7.p2p.userTag = next_rand(s);
      } else if (type == ncclProfileCollApi) {
        d7.collApi.func = rand_str(s, b1, sizeof b1);
        d7.collApi.datatype = rand_str(s, b2, sizeof b2);
        d7.collApi.userTag = next_rand(s);
      } else if (type == ncclProfileP2pApi) {
        d7.p2pApi.func = rand_str(s, b1, sizeof b1);
        d7.p2pApi.datatype = rand_str(s, b2, sizeof b2);
        d7.p2pApi.userTag = next_rand(s);
      } else if (type == ncclProfileCeColl) {
        d7.ceColl.func = rand_str(s, b1, sizeof b1);
        d7.ceColl.datatype = rand_str(s, b2, sizeof b2);
        d7.ceColl.syncStrategy = rand_str(s, b3, sizeof b3);
        d7.ceColl.seqNumber = next_rand(s) % 100;
        d7.ceColl.userTag = next_rand(s);
      } else if (type == ncclProfileGroupApi) {
        d7.groupApi.groupDepth = (int)pick(s, 4);
      } else if (type == ncclProfileKernelPhase) {
        d7.kernelPhase.channelId = (uint8_t)next_rand(s);
        d7.kernelPhase.phaseId = (uint8_t)(pick(s, 4) ? pick(s, 3) : next_rand(s));
        d7.kernelPhase.phaseName = pick(s, 3) ? rand_str(s, b1, sizeof b1) : NULL;
        d7.kernelPhase.pTimer = next_rand(s);
      } else {
        FILL_PROXY_OP(d7, s);
      }
      r = abi7->startEvent(ctx, pick(s, 50) ? &h : NULL, &d7);
    } else if (version == 5) {
      ncclProfilerEventDescr_v5_t d5;
      memcpy(&d5, &d, sizeof d5); /* same layout for the v5 members */
      r = abi5->startEvent(ctx, pick(s, 50) ? &h : NULL, &d5);
    } else {
      r = abi6->startEvent(ctx, pick(s, 50) ? &h : NULL, &d);
    }
  }
  count(r);
  if (h) atomic_store(&handles[pick(s, NHANDLES)], h);
}

static void do_state(uint64_t *s) {
  ncclProfilerEventStateArgs_t a;
  a.proxyStep.transSize = (size_t)next_rand(s);
  ncclProfilerEventState_t st = (ncclProfilerEventState_t)(pick(s, 4) ? pick(s, 40) : next_rand(s));
  if (pick(s, 2))
    count(abi7->recordEventState(rand_handle(s), st, pick(s, 3) ? &a : NULL));
  else
    count(abi5->recordEventState(rand_handle(s), st, pick(s, 3) ? &a : NULL));
}

static void do_lifecycle(uint64_t *s) {
  pthread_mutex_lock(&comm_lock);
  unsigned i = pick(s, NCOMMS);
  void *old = atomic_exchange(&comms[i], NULL);
  if (old) {
    count(abi5->finalize(old));
    unsigned n = atomic_fetch_add(&nfinalized, 1);
    atomic_store(&finalized[n % 64], old);
  }
  void *ctx = NULL;
  int mask = 0;
  char name[32];
  snprintf(name, sizeof name, "fuzz-%u", pick(s, 1000));
  unsigned which = pick(s, 3);
  if (which == 2)
    count(abi7->init(&ctx, next_rand(s), &mask, pick(s, 8) ? name : NULL, 1, 8, (int)pick(s, 8), NULL));
  else if (which == 1)
    count(abi6->init(&ctx, next_rand(s), &mask, pick(s, 8) ? name : NULL, 1, 8, (int)pick(s, 8), NULL));
  else
    count(abi4->init(&ctx, &mask, name, next_rand(s), 1, 8, (int)pick(s, 8), NULL));
  atomic_store(&comms[i], ctx);
  pthread_mutex_unlock(&comm_lock);
}

struct worker {
  pthread_t t;
  uint64_t seed;
  int lifecycle;
};

static void *run(void *arg) {
  struct worker *w = arg;
  uint64_t s = w->seed | 1;
  while (!atomic_load_explicit(&stop_flag, memory_order_relaxed)) {
    unsigned k = pick(&s, 1000);
    if (w->lifecycle && k == 0) do_lifecycle(&s);
    else if (k < 500) do_start(&s);
    else if (k < 750) count(abi5->stopEvent(rand_handle(&s)));
    else do_state(&s);
  }
  return NULL;
}

int main(int argc, char **argv) {
  double seconds = 10;
  uint64_t seed = (uint64_t)time(NULL);
  int nthreads = 4;
  static const struct option opts[] = {{"seconds", required_argument, NULL, 's'},
                                       {"seed", required_argument, NULL, 'r'},
                                       {"threads", required_argument, NULL, 't'},
                                       {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "s:r:t:", opts, NULL)) != -1) {
    switch (c) {
    case 's': seconds = atof(optarg); break;
    case 'r': seed = strtoull(optarg, NULL, 0); break;
    case 't': nthreads = atoi(optarg); break;
    default: fprintf(stderr, "usage: %s PLUGIN.so [--seconds N] [--seed S] [--threads T]\n", argv[0]); return 2;
    }
  }
  if (optind >= argc || nthreads < 1 || nthreads > MAX_THREADS) {
    fprintf(stderr, "usage: %s PLUGIN.so [--seconds N] [--seed S] [--threads T]\n", argv[0]);
    return 2;
  }
  const char *env_s = getenv("WD_FUZZ_SECONDS");
  if (env_s && *env_s) seconds = atof(env_s);
  char dir[] = "/tmp/wd-fuzz-XXXXXX";
  if (!mkdtemp(dir)) return 2;
  setenv("NCCL_WATCHDOG_DUMP_DIR", dir, 1);
  setenv("NCCL_WATCHDOG_TIMEOUT", "300ms", 1); /* stalls happen: the watchdog scans and dumps */
  setenv("NCCL_WATCHDOG_POLL", "20ms", 1);
  setenv("NCCL_WATCHDOG_MAX_DUMPS", "3", 1);
  setenv("NCCL_WATCHDOG_PEER_DUMPS", "0", 1);
  setenv("NCCL_WATCHDOG_MAX_EVENTS", "8192", 1);
  void *lib = dlopen(argv[optind], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "fuzz_callbacks: %s\n", dlerror());
    return 2;
  }
  abi4 = dlsym(lib, "ncclProfiler_v4");
  abi5 = dlsym(lib, "ncclProfiler_v5");
  abi6 = dlsym(lib, "ncclProfiler_v6");
  abi7 = dlsym(lib, "ncclProfiler_v7");
  if (!abi4 || !abi5 || !abi6 || !abi7) return 2;
  printf("fuzz_callbacks: seed 0x%llx, %d threads, %.0f s\n", (unsigned long long)seed, nthreads, seconds);
  fflush(stdout);
  uint64_t s0 = seed;
  for (int i = 0; i < NCOMMS / 2; i++) do_lifecycle(&s0);
  struct worker w[MAX_THREADS];
  for (int i = 0; i < nthreads; i++) {
    w[i].seed = seed * 0x9e3779b97f4a7c15ull + (uint64_t)i;
    w[i].lifecycle = i == 0;
    pthread_create(&w[i].t, NULL, run, &w[i]);
  }
  struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
  nanosleep(&ts, NULL);
  atomic_store(&stop_flag, 1);
  for (int i = 0; i < nthreads; i++) pthread_join(w[i].t, NULL);
  for (int i = 0; i < NCOMMS; i++) {
    void *ctx = atomic_exchange(&comms[i], NULL);
    if (ctx) count(abi5->finalize(ctx));
  }
  /* After the last finalize: late callbacks with every handle ever seen. */
  for (int i = 0; i < NHANDLES; i++) {
    void *h = atomic_load(&handles[i]);
    count(abi5->stopEvent(h));
    count(abi5->recordEventState(h, ncclProfilerProxyStepRecvWait, NULL));
  }
  dlclose(lib);
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "fuzz_callbacks: could not remove %s\n", dir);
  unsigned long long calls = atomic_load(&ncalls), fails = atomic_load(&nfailures);
  printf("fuzz_callbacks: %llu callbacks, %llu did not return ncclSuccess\n", calls, fails);
  return fails == 0 && calls > 0 ? 0 : 1;
}
