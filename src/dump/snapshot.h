/*
 * A dump is built in two steps: the watchdog collects a snapshot into the plain structures below
 * (no pointers into live event storage), then wd_dump_write() turns it into one JSON document
 * (docs/dump-format.md) with cJSON and writes it atomically. Runs on the watchdog thread only.
 */
#ifndef WD_SNAPSHOT_H
#define WD_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "base/host.h"
#include "events/view.h"
#include "flightrec/record.h"
#include "stacks/backtrace.h"
#include "stacks/python.h"

#define WD_DUMP_FORMAT "nccl-watchdog-dump"
#define WD_DUMP_VERSION 1

typedef struct wd_seq_snap {
  uint8_t func;       /* string id */
  int64_t enqueued;   /* last enqueued seqNumber, -1 when none */
  int64_t completed;  /* last completed seqNumber, -1 when none */
} wd_seq_snap;

typedef struct wd_ring_snap {
  uint32_t capacity;
  uint64_t written; /* records ever written */
  uint32_t torn;    /* records skipped because a writer was inside them */
  uint64_t lost;    /* records overwritten (written - capacity, when positive) */
  uint32_t n;
  wd_record *recs; /* oldest first */
} wd_ring_snap;

/* A link's fail-slow telemetry (telemetry/aggregate.h), as the watchdog last aggregated it. */
typedef struct wd_link_snap {
  int peer; /* -1: links beyond the bound, folded */
  uint8_t channel, send;
  uint64_t bytes, steps;
  double step_s, busy_s, rate, net_s, net_rate;
} wd_link_snap;

/* A launch captured into a CUDA graph and where its replays stand (events/graph.h). */
typedef struct wd_glaunch_snap {
  uint32_t graph, pos;   /* graph number in the communicator, launch in it (1-based) */
  uint8_t func, dtype;   /* string ids of its captured call (0 unknown) */
  uint16_t ncalls;       /* captured calls in its group */
  int32_t root;
  uint64_t count;
  uint64_t replays;      /* replays the GPU has begun */
  uint8_t state;         /* WD_GL_* at the last poll */
  uint8_t error;
  uint64_t for_ns;       /* in that state (this replay) for */
} wd_glaunch_snap;

typedef struct wd_comm_snap {
  uint64_t comm_id;
  char name[128];
  int rank, nranks, nnodes;
  int abi;        /* profiler ABI version NCCL used: 4, 5 or 6 */
  int cuda_dev;   /* -1 when unknown */
  char gpu_uuid[48];
  uint64_t init_ns;    /* CLOCK_MONOTONIC at init */
  uint64_t last_progress_ns; /* last progress of any operation of this communicator */
  uint64_t dropped;    /* events dropped because the pool was full */
  uint64_t stale;      /* calls with a stale or unknown handle */
  uint32_t nseq;
  wd_seq_snap seq[32];
  int64_t p2p_enqueued, p2p_completed; /* p2p operations counted by the plugin (NCCL has no seq) */
  uint32_t nceseq;
  wd_seq_snap ce_seq[8]; /* CE collectives: NCCL numbers them apart (ceSeqNum) */
  uint8_t gpu_events;    /* GPU progress from CUDA events around its launches */
  uint32_t launches_unbracketed; /* launches without CUDA events (capturing stream, driver error) */
  uint8_t graph_watch; /* captured launches are followed (events/graph.h) */
  uint32_t nglaunch, glaunch_unfollowed;
  wd_glaunch_snap *glaunch; /* captured launches followed (oldest capture first) */
  int gpu_error;         /* last CUresult error the driver gave for its events, 0 none */
  int mask_set, mask_now; /* the event mask asked for at init, and NCCL's now (RAS may change it) */
  uint32_t nevents;
  wd_ev_snap *events; /* every live event of the communicator */
  wd_ring_snap ring;       /* operation-level records */
  wd_ring_snap proxy_ring; /* proxy-level records (ProxyOp, ProxyStep, KernelCh, ...) */
  /* Telemetry, when on: the communicator's links and its arrival wait (the analyzer's
   * fail-slow lines). */
  int telemetry;
  uint32_t nlinks;
  wd_link_snap *links;
  int have_arrival, arrival_sync;
  double arrival_wait_s, arrival_lag_s;
} wd_comm_snap;

typedef struct wd_stall {
  uint64_t comm_id;
  char comm_name[128];
  int rank, nranks;
  uint8_t type; /* WD_T_COLL / WD_T_P2P / WD_T_PROXYOP */
  uint8_t func; /* string id */
  int64_t seq;  /* -1 for p2p */
  int peer;     /* root for Coll, peer for P2p, -1 */
  uint32_t slot;
  uint64_t since_progress_ns;
  uint64_t age_ns;
  char waiting_on[256]; /* "ProxyStep 4 (recv from peer 2, channel 0) in RecvWait" */
  uint8_t nccl_open;    /* NCCL's own events of it (ProxyOp, ProxyStep, KernelCh) were open */
  /* A replay of a captured launch (graph > 0): which, and where the GPU stands in it. */
  uint32_t graph, graph_pos;
  uint64_t replay;
  uint8_t graph_state; /* WD_GL_* */
} wd_stall;

typedef struct wd_dump_input {
  const char *reason;   /* "stall", "signal", "peer", "abort" */
  int summary;          /* only the newest records of each ring (a peer dump) */
  const wd_config *cfg;
  unsigned dump_seq;    /* n-th dump of this process, 1-based */
  uint64_t mono_ns;     /* CLOCK_MONOTONIC at collection */
  int64_t wall_sec, wall_nsec; /* CLOCK_REALTIME at collection */
  char host[64];
  int pid;
  int abi;              /* highest ABI version NCCL used in this process */
  int nccl_version;     /* the loaded NCCL's version code (ncclGetVersion), 0 unknown */
  /* reason-specific */
  uint32_t nstalls;
  const wd_stall *stalls;        /* reason "stall" */
  int signo, sender_pid;         /* reason "signal" */
  const char *peer_trigger;      /* reason "peer": trigger file name */
  const char *peer_trigger_json; /* its content (may be NULL) */
  uint64_t abort_comm_id;        /* reason "abort": the communicator finalized with ops in flight */
  uint32_t abort_inflight;       /* how many of its operations were in flight */
  /* the job's trigger episodes as this process sees them (NULL: peer dumps off) */
  unsigned trig_next;            /* next episode it watches for */
  int trig_on, trig_poller;
  uint64_t trig_shared, trig_node; /* metadata operations: shared file system, node memory */
  /* the process's memory against NCCL_WATCHDOG_MEMORY_BUDGET */
  uint64_t mem_budget, mem_rings, mem_slots, mem_shrunk, mem_refused;
  /* Ring files refused by the node's share of their file system (nodeshare.h): why, "" when none. */
  char ring_files_note[400];
  /* data */
  uint32_t ncomms;
  wd_comm_snap *comms;
  uint32_t ndetached;
  wd_ev_snap *detached;  /* live detached (PXN) events */
  wd_ring_snap detached_ring;
  const wd_bt_result *threads; /* NULL when backtraces are off */
  const wd_py_result *python;  /* NULL when not collected (NCCL_WATCHDOG_PYTHON=0) */
  /* which process of which attempt wrote it (NULL: not known) and this process's stall
   * episodes so far: a verdict is about one episode of one attempt (operations.md, 5a) */
  const wd_process_id *proc;
  unsigned episodes;
} wd_dump_input;

#endif
