/*
 * A dump is built in two steps: the watchdog collects a snapshot into the plain structures below
 * (no pointers into live event storage), then wd_dump_write() turns it into one JSON document
 * (docs/dump-format.md) with cJSON and writes it atomically. Runs on the watchdog thread only.
 */
#ifndef WD_DUMP_H
#define WD_DUMP_H

#include <stddef.h>
#include <stdint.h>

#include "../plugin/config.h"
#include "../watchdog/backtrace.h"
#include "record.h"

#define WD_DUMP_FORMAT "nccl-watchdog-dump"
#define WD_DUMP_VERSION 1

/* Status of an in-flight root operation (Coll, P2p, or a ProxyOp whose parent is gone). */
enum {
  WD_OP_ENQUEUED = 0, /* stopped (handed to the proxy / GPU stream), no child started yet */
  WD_OP_REACHED = 1,  /* a child started: the GPU or the network got to it */
  WD_OP_GPU_DONE = 2, /* every expected kernel channel stopped; only proxy tails remain */
  WD_OP_STALLED = 3,  /* reached and no progress for longer than the timeout */
  WD_OP_POSTING = 4,  /* started, not stopped yet (being enqueued) */
};
const char *wd_op_status_name(int status); /* "enqueued", "reached", ... */

/* One live event. */
typedef struct wd_ev_snap {
  wd_record start;        /* its start record: type, slot, parent slot, fields, start time */
  uint64_t last_ns;       /* last progress at or under this event (CLOCK_MONOTONIC) */
  uint8_t last_state;     /* last NCCL state id, 0xff when none */
  uint8_t stopped;        /* NCCL stopped it (for Coll/P2p: enqueued) */
  uint8_t status;         /* WD_OP_* for root operations, 0 otherwise */
  uint8_t is_root;        /* a root operation: dumps show it as the top of an open tree */
  uint32_t children_open; /* children started and not stopped */
  uint32_t children_seen; /* children ever started */
  uint32_t steps_done;    /* ProxyOp: ProxySteps stopped */
  uint32_t kch_expected;  /* Coll/P2p: kernel channels expected (0 when KernelCh is off) */
  uint32_t kch_done;      /* Coll/P2p: kernel channels stopped */
  uint64_t last_trans;    /* ProxyStep: last transSize; KernelCh: GPU stop time */
} wd_ev_snap;

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
  uint32_t nevents;
  wd_ev_snap *events; /* every live event of the communicator */
  wd_ring_snap ring;       /* operation-level records */
  wd_ring_snap proxy_ring; /* proxy-level records (ProxyOp, ProxyStep, KernelCh, ...) */
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
} wd_stall;

typedef struct wd_dump_input {
  const char *reason;   /* "stall", "signal", "peer", "abort" */
  const wd_config *cfg;
  unsigned dump_seq;    /* n-th dump of this process, 1-based */
  uint64_t mono_ns;     /* CLOCK_MONOTONIC at collection */
  int64_t wall_sec, wall_nsec; /* CLOCK_REALTIME at collection */
  char host[64];
  int pid;
  int abi;              /* highest ABI version NCCL used in this process */
  /* reason-specific */
  uint32_t nstalls;
  const wd_stall *stalls;        /* reason "stall" */
  int signo, sender_pid;         /* reason "signal" */
  const char *peer_trigger;      /* reason "peer": trigger file name */
  const char *peer_trigger_json; /* its content (may be NULL) */
  /* data */
  uint32_t ncomms;
  wd_comm_snap *comms;
  uint32_t ndetached;
  wd_ev_snap *detached;  /* live detached (PXN) events */
  wd_ring_snap detached_ring;
  const wd_bt_result *threads; /* NULL when backtraces are off */
} wd_dump_input;

/* Build the JSON document. Returns a malloc'd NUL-terminated string (caller frees), or NULL. */
char *wd_dump_render(const wd_dump_input *in);
/* Render and write into dir atomically; path_out receives the final path. 0, or -1. */
int wd_dump_write(const wd_dump_input *in, const char *dir, char *path_out, size_t path_len);

#endif
