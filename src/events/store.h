/*
 * The event store of the process: the contexts NCCL created (a lock-free registry for the hot
 * path, lists for the watchdog), finalized contexts kept for reuse, and the detach pool for PXN
 * events of other processes. Opened at the first init, closed at the last finalize.
 */
#ifndef WD_STORE_H
#define WD_STORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/config.h"
#include "events/context.h"
#include "events/pool.h"
#include "flightrec/ring.h"

typedef struct wd_store_state {
  pthread_mutex_t lock; /* the lists, for init, finalize and the watchdog's scans; never the hot path */
  int nctx;
  wd_context *contexts;
  wd_context *retired;      /* finalized contexts kept for reuse (NCCL may still hold handles) */
  uint64_t retire_grace_ns; /* a finalized context is reused only after this long */
  const wd_config *cfg;     /* sizes and mask for new contexts; the caller's, alive while open */
  pid_t pid;
  int abi_max;
  wd_pool detached;
  wd_ring detached_ring;
  struct wd_blacklist *detached_bl;
} wd_store_state;

extern wd_store_state wd_store;
/* 1 while the store is open (first init .. last finalize), 0 in a forked child. */
extern _Atomic int wd_store_active;

/* Open the store with cfg (kept by pointer). 0, or -1 (nothing allocated). */
int wd_store_open(const wd_config *cfg);
/* Close it: the detach pool and the registry go; contexts retired within the grace period stay
 * for reuse (freed when the library is unloaded). */
void wd_store_close(void);
/* Stop accepting events (a forked child): nothing is freed. */
void wd_store_quiesce(void);
/* A normal exit: remove every ring file not asked to be kept (they stay mapped). Crashes and
 * kills never get here, which is the point of the files. */
void wd_store_unlink_files(void);

/* A context for a new communicator, registered and listed; NULL when out of memory or when the
 * registry is full. */
wd_context *wd_store_add(int abi, uint64_t comm_id, const char *name, int nnodes, int nranks,
                         int rank);
/* Unlist and retire a context (finalize). Returns the number of contexts left, or -1 when ctx
 * is not a live context of this store. */
int wd_store_remove(wd_context *ctx);

/* Is ctx a live context of this process? Lock-free. */
int wd_registry_has(const void *ctx);

#endif
