/*
 * Per-communicator analysis: who is present, where the ranks' sequence numbers diverge, which
 * operation the job is stuck in, and which ranks explain it (docs/analyzer.md, "Verdict rules").
 */
#ifndef WD_AZ_VERDICT_H
#define WD_AZ_VERDICT_H

#include "model.h"

enum { WD_AZ_NO_HANG = 0, WD_AZ_HANG = 1, WD_AZ_NO_VERDICT = 2 };
/* Why a rank is a suspect. mismatch: in another operation than the stuck one; args_mismatch: in
 * the stuck one with other count/datatype/root; p2p_mismatch: its point-to-point operations do
 * not pair with its peer's; dead_link: both ends of one connection wait on each other in the
 * network; died: only its post-mortem ring file is left. */
enum {
  WD_AZ_NOT_ENTERED = 0,
  WD_AZ_MISMATCH = 1,
  WD_AZ_NETWORK_STALL = 2,
  WD_AZ_MISSING = 3,
  WD_AZ_ARGS_MISMATCH = 4,
  WD_AZ_P2P_MISMATCH = 5,
  WD_AZ_DEAD_LINK = 6,
  WD_AZ_DIED = 7,
  WD_AZ_NREASONS
};

const char *wd_az_verdict_name(int verdict); /* "no_hang", "hang", "no_verdict" */
const char *wd_az_reason_name(int reason);   /* "not_entered", ... */

typedef struct wd_az_suspect {
  int rank, reason, culprit;
  const wd_az_crank *cr; /* NULL for a missing rank */
  const wd_az_op *op;    /* the operation it is in, when it is in one */
  const wd_az_hist *hist; /* mismatch found in completed history */
  int peer_is_suspect;    /* network_stall: the peer it waits on is itself a suspect */
  int link_peer, link_channel; /* dead_link: the other end and the channel, else -1 */
  char detail[512];       /* one sentence */
  char link[512];         /* dead_link found by the steps' states: the link, said once */
} wd_az_suspect;

typedef struct wd_az_func_row {
  wd_az_str func;
  int64_t enq_min, enq_max, done_min, done_max;
  int64_t first_div;      /* first seq some ranks enqueued and others did not, -1 when none */
  int64_t hist_div;       /* first seq whose parameters differ in the common history, -1 */
  int64_t hist_lo, hist_hi; /* common history window compared, -1 when none */
} wd_az_func_row;

/* A rank that keeps progressing but enters collectives later than the others. */
typedef struct wd_az_straggler {
  int rank;
  const wd_az_crank *cr;
  double lag_ms; /* mean delay behind the median rank over the operations compared */
  int nops;      /* operations compared */
} wd_az_straggler;

typedef struct wd_az_comm {
  uint64_t comm_id;
  wd_az_str name;
  int nranks;
  const wd_az_crank **by_rank; /* nranks entries, NULL when the rank left no dump */
  int *present, *missing;
  int npresent, nmissing;
  int verdict;
  /* the operation the job is stuck in */
  int stuck;
  wd_az_str stuck_type, stuck_func;
  int64_t stuck_seq;
  int *waiting; /* ranks in flight in it */
  int nwaiting;
  double stalled_ms;
  int ninflight; /* present ranks with any operation in flight */
  int nfuncs;
  wd_az_func_row funcs[WD_AZ_MAX_FUNCS];
  int nsus, cap_sus;
  wd_az_suspect *sus;
  int nstrag; /* slowest first */
  wd_az_straggler *strag;
  char summary[1024];
  char note[512]; /* why no verdict, or what a healthy communicator shows */
  /* The stuck operation is a replay of a launch captured into a CUDA graph (graph > 0): which
   * launch of which graph, and which replay the waiting ranks' GPUs are in. */
  int graph, graph_launch;
  int64_t graph_replay;
  int64_t graph_seq; /* the seq NCCL's events gave that replay's operation, -1 none */
  /* NCCL 2.31+ KernelPhase: the rank that arrived last at the recent collectives, when one does
   * consistently (its kernels wait least in initial_sync); empty otherwise. */
  char arrival[384];
  int arrival_rank; /* -1 when none */
  /* Fail-slow, from the plugin's telemetry in the dumps: the communicator's slowest link when it
   * runs at under half its peers' median, and the rank whose collectives wait least for the
   * others (the late one) when under a quarter of the median; empty otherwise. */
  char slow_link[512];
  int slow_rank, slow_peer, slow_channel, slow_send; /* -1 when none */
  double slow_ratio;
  char late[384];
  int late_rank; /* -1 when none */
} wd_az_comm;

typedef struct wd_az_opts {
  double stall_ms; /* > 0: an operation without progress this long counts as stuck */
  double straggler_ms; /* a rank entering this much later than the median is a straggler */
  int all_dumps;
} wd_az_opts;

typedef struct wd_az_result {
  const wd_az_set *set;
  wd_az_comm *comms; /* hung first, then no verdict, then healthy */
  size_t ncomms;
  size_t ndumps_read, ndumps_kept;
  char summary[1024]; /* the report's first line */
} wd_az_result;

int wd_az_analyze(const wd_az_set *set, const wd_az_opts *opts, wd_az_result *out);
void wd_az_result_free(wd_az_result *res);

/* Helpers shared with the reports. */
const wd_az_dump *wd_az_dump_of(const wd_az_set *set, const wd_az_crank *cr);
/* The job's global rank of communicator rank cr, -1 when it cannot be known. A process holding
 * one rank of each of its communicators: its RANK (else SLURM_PROCID). A process holding several
 * ranks of one communicator (JAX, TensorFlow, nccl-tests -g), or whose RANK another process of
 * the judged incarnation gives too (torchft): RANK names no rank, so the rank, on the same GPU,
 * in the process's world communicator (load.c, several_ranks); none otherwise. */
int wd_az_global_rank(const wd_az_set *set, const wd_az_crank *cr);
void wd_az_op_text(const wd_az_op *op, char *out, size_t len); /* "AllReduce seq 12 (stalled)" */
void wd_az_wait_text(const wd_az_wait *w, char *out, size_t len);
/* "global rank 451 on node-a17, GPU 3 (GPU-1a2b...), pid 7541": where a communicator rank runs. */
void wd_az_ident_text(const wd_az_set *set, const wd_az_crank *cr, char *out, size_t len);
/* "global rank 451 on host node-a17", else "host node-a17 pid 7541 GPU 3": the same, short (a
 * HANG line's culprits, the job chain's steps). */
void wd_az_where_text(const wd_az_set *set, const wd_az_crank *cr, char *out, size_t len);
void wd_az_frames_text(const wd_az_dump *d, int max, char *out, size_t len);
/* What a rank was doing: in-flight ops of its process, last records, main thread frames. */
void wd_az_doing_text(const wd_az_set *set, const wd_az_crank *cr, char *out, size_t len);
/* Where a running process whose ring file its node copied is (d->live_state set): its state and
 * how long its watchdog had been silent. */
void wd_az_live_text(const wd_az_dump *d, char *out, size_t len);
/* What a /proc state letter says of a process, for on-call ("stopped (state T: ...)"). */
const char *wd_az_proc_state_text(char st);
int64_t wd_az_enq(const wd_az_crank *cr, wd_az_str func);
/* A dump written or left as the process ended (sigabrt, term, abort, postmortem). */
int wd_az_is_teardown(const wd_az_dump *d);
int64_t wd_az_done(const wd_az_crank *cr, wd_az_str func);

#endif
