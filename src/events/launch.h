/*
 * GPU-side ground truth for one communicator: CUDA events recorded on NCCL's stream around each
 * kernel launch (and each CE collective), the way PyTorch's watchdog brackets its collectives.
 * "Reached" = the event recorded before the launch completed (the stream got there); "GPU done" =
 * the one recorded after it completed. This does not depend on NCCL's KernelCh bookkeeping.
 *
 * Event pairs are created once per communicator and reused round-robin; a launch on a stream that
 * is capturing a graph records nothing. An operation finds its launch through the GroupApi event
 * it was issued under (NCCL gives KernelLaunch the GroupApi as parent and the Coll a CollApi whose
 * parent is that GroupApi; see docs/architecture.md).
 */
#ifndef WD_LAUNCH_H
#define WD_LAUNCH_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/gpu.h"

#define WD_LAUNCH_SLOTS 64u /* launches whose events can be told apart at once */
#define WD_GMAP_SLOTS 256u  /* recent GroupApi -> launches entries */

typedef struct wd_launch {
  void *start, *end; /* CUevents, created at open */
  void *stream;
  _Atomic uint64_t token; /* the launch whose records these are (0 while being re-recorded) */
  _Atomic uint32_t phase; /* 1: start recorded; 2: end recorded too */
  /* The watchdog's own: when it first saw `seen`'s start complete. */
  uint64_t seen, reached_ns;
} wd_launch;

typedef struct wd_gmap {
  _Atomic uint64_t key;         /* GroupApi handle value */
  _Atomic uint64_t first, last; /* tokens of its first and latest launch */
} wd_gmap;

typedef struct wd_launches {
  int on;              /* events were created: ground truth available */
  const wd_cuda *cu;   /* the driver table (valid while any communicator lives) */
  void *cu_ctx;        /* the CUDA context they belong to */
  _Atomic uint64_t next;
  _Atomic uint32_t skipped; /* launches without events (capturing stream, driver error) */
  _Atomic int last_error;   /* last CUresult other than success / not ready */
  wd_launch slot[WD_LAUNCH_SLOTS];
  wd_gmap gmap[WD_GMAP_SLOTS];
} wd_launches;

/* At communicator init, on NCCL's thread with the communicator's CUDA context current: create
 * the event pairs. Returns 1 when ground truth is on, 0 when the driver is not usable. */
int wd_launches_open(wd_launches *l);
/* Destroy the events (finalize). Safe when open failed. */
void wd_launches_close(wd_launches *l);

/* Hot path, NCCL's launching thread. Records the start event of a launch on stream and files it
 * under key (the GroupApi handle, 0 for none); returns its token, 0 when nothing was recorded,
 * WD_LAUNCH_CAPTURING when the stream is capturing a graph (events/graph.h takes it). */
#define WD_LAUNCH_CAPTURING UINT64_MAX
uint64_t wd_launch_begin(wd_launches *l, void *stream, uint64_t key);
/* Records the end event of the launch `token` (after the kernel was enqueued). */
void wd_launch_end(wd_launches *l, uint64_t token);
/* Tokens of the launches filed under key; returns 0 when none (yet) or forgotten. */
int wd_launch_lookup(const wd_launches *l, uint64_t key, uint64_t *first, uint64_t *last);

/* What the GPU says about the launches first..last (watchdog thread). */
typedef struct wd_gpu_truth {
  uint8_t known;   /* the events still describe these launches */
  uint8_t reached; /* first's start event completed */
  uint8_t done;    /* last's end event completed */
  uint64_t reached_ns; /* when the watchdog first saw it reached */
  int error;       /* a CUresult other than success / not ready (sticky GPU error), else 0 */
} wd_gpu_truth;
void wd_launch_truth(wd_launches *l, uint64_t first, uint64_t last, uint64_t now, wd_gpu_truth *t);
/* Once per thread that queries: relaxed capture mode, so a query never disturbs an application
 * thread capturing a graph (as PyTorch's watchdog does). */
void wd_launch_query_thread_init(void);

#endif
