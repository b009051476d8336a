/* The plugin's life in a process (lifecycle.h). */
#include "plugin/lifecycle.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/gpu.h"
#include "base/host.h"
#include "base/ncclver.h"
#include "events/arena.h"
#include "events/budget.h"
#include "events/graph.h"
#include "events/store.h"
#include "flightrec/record.h"
#include "flightrec/strtab.h"
#include "watchdog/watchdog.h"

#ifndef WD_VERSION
#define WD_VERSION "0.0.0"
#endif

/* Serialises init and finalize (which start and stop the watchdog); the store's lock only
 * guards the context lists that the watchdog scans. */
static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;
static int forked_child;
static int atfork_done;

static wd_config config; /* loaded at each process-wide start; read by the store and the watchdog */

/* In a forked child the parent's watchdog thread does not exist and its locks may be held by
 * threads that do not exist either: the plugin goes quiet in the child. Starts are refused, and
 * stop and state, which check only the handle, find none of ours. */
static void on_fork_child(void) {
  forked_child = 1;
  wd_store_quiesce();
  wd_arena_disown();
  wd_tid_forget();
}

static void config_warn(const char *msg) { WD_WARN("%s", msg); }

static int process_start(void) {
  wd_config_defaults(&config);
  /* NULL: the real environment, so misspelt NCCL_WATCHDOG_* variables are named. */
  wd_config_load(&config, NULL, config_warn);
  wd_hostname_override(config.hostname);
  wd_budget_set((uint64_t)config.memory_budget_mib << 20);
  /* The budget must fit well inside the process's own limit: rings in /dev/shm count against a
   * cgroup, and what a limit refuses later would be a crash of the job, not a smaller ring. */
  const char *what;
  uint64_t limit = wd_host_memory_limit(&what);
  if (limit && ((uint64_t)config.memory_budget_mib << 20) > limit / 8) {
    uint64_t mib = (limit / 8) >> 20;
    if (mib < 1) mib = 1;
    WD_WARN("NCCL_WATCHDOG_MEMORY_BUDGET=%u MiB lowered to %llu MiB, an eighth of %s (%llu MiB): "
            "communicators get smaller rings past it", config.memory_budget_mib,
            (unsigned long long)mib, what, (unsigned long long)(limit >> 20));
    config.memory_budget_mib = (uint32_t)mib;
    wd_budget_set((uint64_t)mib << 20);
  }
  char desc[1024];
  wd_config_describe(&config, desc, sizeof(desc));
  WD_INFO("nccl-watchdog %s: %s", WD_VERSION, desc);
  if (!config.enable) return 0;
  wd_clock_setup(config.precise_clock);
  if (wd_store_open(&config) != 0) return -1;
  if (!atfork_done) {
    pthread_atfork(NULL, NULL, on_fork_child);
    atfork_done = 1;
  }

  if (wd_watchdog_start(&config) != 0) WD_WARN("watchdog thread not started: recording only, no dumps");
  return 0;
}

static void process_stop(void) {
  wd_watchdog_stop();
  wd_store_close();
  long graphs = wd_graphs_pin_if_pending();
  if (graphs > 0)
    WD_INFO("%ld CUDA graph(s) captured with NCCL work outlive the last communicator: the plugin "
            "stays loaded, as the driver will call it when they are destroyed", graphs);
  wd_cuda_release();
  /* NCCL may be unloaded and loaded again at another address (or another NCCL): forget its
   * string pointers and its version. */
  wd_str_reset_ptrs();
  wd_nccl_version_reset();
}

/* The mask this communicator asks NCCL for. KernelCh is the only completion signal of intra-node
 * work without CUDA events, but where CUDA events bracket every launch it adds nothing to the
 * truth, and on NCCL 2.31+ (profiler ABI v7) it turns on per-phase device writes and a fence
 * that cost 4-13 % of 128 KB-4 MB AllReduce (NVIDIA/nccl issue 2355; src/device/common.h,
 * src/plugin/profiler.cc). *why says which case applied. */
static int wd_choose_mask(wd_context *ctx, int abi, const char **why) {
  int m = config.event_mask;
  const int kch = 1 << WD_T_KERNELCH, phase = 1 << WD_T_KERNELPHASE;
  if (abi < 7) m &= ~phase; /* KernelPhase exists from v7 on */
  /* The library's own version where it answers; else the ABI it asked for (v7 = 2.31+). */
  int ver = wd_nccl_version();
  int costly = ver ? ver >= WD_NCCL_KCH_COSTLY : abi >= 7;
  if (config.kernelch == WD_KCH_ON) {
    m |= kch;
    *why = "NCCL_WATCHDOG_KERNELCH=on";
  } else if (config.kernelch == WD_KCH_OFF) {
    m &= ~(kch | phase);
    *why = ctx->launches.on ? "NCCL_WATCHDOG_KERNELCH=off; CUDA events give completion"
                            : "NCCL_WATCHDOG_KERNELCH=off; intra-node operations are not seen to complete";
  } else if (!(m & kch)) {
    *why = "not in NCCL_WATCHDOG_EVENT_MASK";
  } else if (ctx->launches.on && costly) {
    m &= ~(kch | phase);
    /* Replays of intra-node graph work: the captured launches' own records (events/graph.h). */
    *why = ctx->graphs.on
               ? (ver ? "CUDA events bracket every launch, and KernelCh costs the GPU on NCCL 2.31+ "
                        "(ncclGetVersion); graph replays are followed by their captured launches' "
                        "own records"
                      : "CUDA events bracket every launch, and KernelCh costs the GPU on NCCL 2.31+ "
                        "(profiler ABI v7; ncclGetVersion not found); graph replays are followed by "
                        "their captured launches' own records")
               : (ver ? "CUDA events bracket every launch, and KernelCh costs the GPU on NCCL 2.31+ "
                        "(ncclGetVersion); graph replays of intra-node work are then not seen to "
                        "complete (NCCL_WATCHDOG_GRAPH_LAUNCHES=0 or the driver lacks what the "
                        "watch needs; NCCL_WATCHDOG_KERNELCH=on for that)"
                      : "CUDA events bracket every launch, and KernelCh costs the GPU on NCCL 2.31+ "
                        "(profiler ABI v7; ncclGetVersion not found); graph replays of intra-node "
                        "work are then not seen to complete (NCCL_WATCHDOG_GRAPH_LAUNCHES=0 or the "
                        "driver lacks what the watch needs; NCCL_WATCHDOG_KERNELCH=on for that)");
  } else {
    *why = ctx->launches.on ? "kept: NCCL before 2.31 charges little for it"
                            : "kept: without CUDA events it is the completion of intra-node work";
  }
  ctx->kch_on = (m & kch) != 0;
  if (ctx->launches.on) m |= (1 << WD_T_KERNELLAUNCH) | (abi >= 6 ? 1 << WD_T_CECOLL : 0);
  return m;
}

int wd_lifecycle_init(wd_context **out, int abi, uint64_t comm_id, const char *name, int nnodes,
                      int nranks, int rank, int *mask, wd_logger_fn logfn) {
  *out = NULL;
  pthread_mutex_lock(&life_lock);
  int rc = 0;
  if (forked_child) goto done;
  wd_log_set_logger(logfn);
  if (wd_store.nctx == 0 && !atomic_load(&wd_store_active)) {
    if (process_start() != 0) {
      rc = -1;
      goto done;
    }
  }
  if (!config.enable || !atomic_load(&wd_store_active)) goto done;
  wd_context *ctx = wd_store_add(abi, comm_id, name, nnodes, nranks, rank);
  if (ctx == NULL) goto done;
  /* KernelLaunch and CeColl carry the stream the ground-truth events are recorded on. */
  const char *kch_why = "";
  int m = wd_choose_mask(ctx, abi, &kch_why);
  if (mask) __atomic_store_n(mask, m, __ATOMIC_RELAXED);
  /* The context is on the store's list already: the watchdog reads these under its lock. */
  pthread_mutex_lock(&wd_store.lock);
  ctx->mask_ptr = mask;
  ctx->mask_set = ctx->mask_seen = m;
  pthread_mutex_unlock(&wd_store.lock);
  char vbuf[24];
  WD_INFO("profiling comm 0x%llx \"%s\" rank %d/%d (NCCL %s, profiler ABI v%d, GPU progress from %s; "
          "event mask 0x%x, KernelCh %s: %s)",
          (unsigned long long)comm_id, ctx->name, rank, nranks,
          wd_nccl_version_str(wd_nccl_version(), vbuf, sizeof vbuf), abi,
          ctx->launches.on ? "CUDA events" : "NCCL's events", (unsigned)m,
          (m & (1 << WD_T_KERNELCH)) ? "on" : "off", kch_why);
  *out = ctx;
done:
  if (*out == NULL && wd_store.nctx == 0 && atomic_load(&wd_store_active)) process_stop();
  pthread_mutex_unlock(&life_lock);
  return rc;
}

void wd_lifecycle_finalize(wd_context *ctx) {
  pthread_mutex_lock(&life_lock);
  /* Finalized with operations in flight: an abort (ncclCommAbort, a framework's timeout path).
   * Dumped before its state is retired. */
  if (!forked_child && wd_registry_has(ctx)) wd_watchdog_finalizing(ctx);
  if (!forked_child && wd_store_remove(ctx) == 0) {
    process_stop();
    wd_log_reset();
  }
  pthread_mutex_unlock(&life_lock);
}
