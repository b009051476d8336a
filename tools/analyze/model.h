/*
 * What the analyzer keeps of each dump. A dump is parsed, summarised into these fixed-size
 * structures and its JSON tree freed at once, so memory grows with the number of communicator
 * ranks, not with the size of the rings.
 */
#ifndef WD_AZ_MODEL_H
#define WD_AZ_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define WD_AZ_MAX_FUNCS 16  /* seq table entries kept per communicator rank */
#define WD_AZ_MAX_OPS 8     /* in-flight root operations kept (oldest first) */
#define WD_AZ_LAST_RECS 8   /* last operation-level ring records kept */
#define WD_AZ_HIST 64       /* last Coll start records kept for cross-rank comparison */
#define WD_AZ_FRAMES 6      /* top frames kept for the main thread */
#define WD_AZ_THREADS 16    /* threads whose top frame is kept */
#define WD_AZ_PHASES 8      /* last collectives whose kernels reported phases (ABI v7 KernelPhase) */

/* Strings are interned once (function and type names, hosts, frames): records hold small ids. */
typedef uint32_t wd_az_str;
wd_az_str wd_az_intern(const char *s); /* 0 is "" (also for NULL); invalid UTF-8 made valid */
char *wd_az_utf8_dup(const char *s);    /* a copy, bytes of invalid UTF-8 outside ASCII as '?' */
const char *wd_az_s(wd_az_str id);
void wd_az_strings_free(void);

typedef struct wd_az_seq {
  wd_az_str func;
  int64_t enq, done; /* lastEnqueued / lastCompleted, -1 when none */
} wd_az_seq;

/* Where an in-flight operation waits, taken from the open ProxyOp/ProxyStep of its tree that
 * has gone longest without progress. */
typedef struct wd_az_wait {
  int valid;
  wd_az_str type;  /* "ProxyStep", "ProxyOp" or "KernelCh" */
  wd_az_str state; /* last state name, 0 when none */
  int peer, channel, step, is_send;
  int steps_done, nsteps;
  double since_ms;
} wd_az_wait;

/* Where one open proxy operation of a stuck op stands, by its open steps' states
 * (transport/net.cc: sendProxyProgress, recvProxyProgress). */
enum {
  WD_AZ_CONN_SEND_POSTED = 1, /* a send step in SendPeerWait or SendWait: handed to the network */
  WD_AZ_CONN_SEND_GPU = 2,    /* send steps only in SendGPUWait: waiting on its own kernel */
  WD_AZ_CONN_RECV_EMPTY = 3,  /* the oldest open recv step in RecvWait: nothing arrived for it */
  WD_AZ_CONN_RECV_GOT = 4,    /* the oldest open recv step got its data (flush or GPU wait) */
};
#define WD_AZ_CONNS 4 /* open proxy operations kept per stuck op, the telling ones first */

typedef struct wd_az_conn {
  int32_t peer;
  int16_t channel;
  uint8_t kind;  /* WD_AZ_CONN_* */
  uint8_t pxn;   /* learnt from another process's detached (PXN) send */
  int32_t step_lo, step_hi; /* posted send steps; a recv's oldest open step (both) */
  float since_ms;
} wd_az_conn;

/* A PXN send another local process progressed for this one's rank (its detached ProxyOp). */
typedef struct wd_az_pxn {
  int origin_pid, origin_rank;
  wd_az_conn conn;
} wd_az_pxn;
#define WD_AZ_PXN 8 /* kept per dump */

typedef struct wd_az_op {
  wd_az_str type;   /* "Coll", "P2p", "ProxyOp" ... */
  wd_az_str func;
  wd_az_str dtype;
  wd_az_str status; /* posting/enqueued/reached/gpu_done/stalled */
  int64_t seq;      /* -1 for p2p */
  int64_t replay;   /* the CUDA graph replay it belongs to, -1 when not a replay */
  int64_t count;
  int root, peer;   /* -1 when absent */
  double age_ms, since_ms;
  int kch_expected, kch_done, nproxy_open;
  uint64_t user_tag; /* v7: the call's userTag (which phase or step of training), 0 none */
  int cuda_evidence; /* its status comes from its CUDA events (evidence "cudaEvents") */
  int proxy_gone;   /* proxyThread: 2 exited with the kernel known to wait (network error), 1
                       exited and nothing tells (revoke or network error), 0 running */
  wd_az_wait wait;
  int nconn;
  wd_az_conn conn[WD_AZ_CONNS];
} wd_az_op;

/* An operation-level ring record, reduced to what a report says about it. */
typedef struct wd_az_rec {
  int64_t t;
  uint8_t ph; /* 0 start, 1 state, 2 stop */
  wd_az_str type, func, dtype;
  int64_t seq, count;
  int peer; /* root for colls, peer for p2p, -1 */
} wd_az_rec;

/* A Coll start record, for comparing ranks' histories. */
typedef struct wd_az_hist {
  wd_az_str func, dtype;
  int64_t seq, count;
  int root;
  int64_t t;      /* start time, ns relative to the dump (<= 0): when this rank entered it */
  int64_t replay; /* the CUDA graph replay it belongs to, -1 when not a replay */
} wd_az_hist;

/* How long one collective's kernel spent in its first phase on this rank (NCCL 2.31+ KernelPhase,
 * from the ring: phases are reported once a channel completes). initial_sync waits for the
 * peers to arrive: the rank that waits least there arrived last. */
typedef struct wd_az_phase {
  wd_az_str func;
  int64_t seq;
  double sync_ms;    /* initial_sync, mean over the channels that reported it */
  double compute_ms; /* compute, likewise */
} wd_az_phase;

/* One communicator rank as one dump shows it. */
/* A link's fail-slow telemetry from the dump (the plugin's aggregates at dump time). */
typedef struct wd_az_tlink {
  int32_t peer;
  int16_t channel;
  uint8_t send;
  double bytes, rate, step_ms; /* bytes moved; bytes per busy second; mean step time */
} wd_az_tlink;
#define WD_AZ_TLINKS 64 /* kept per communicator rank, the slowest first */

/* A launch captured into a CUDA graph and where this rank's GPU stands in its replays
 * (comms[].graphLaunches). */
enum { WD_AZ_GL_IDLE = 0, WD_AZ_GL_WAIT = 1, WD_AZ_GL_IN = 2, WD_AZ_GL_PASSED = 3 };
typedef struct wd_az_glaunch {
  int graph, launch;
  wd_az_str func;
  int64_t replays; /* replays its GPU began */
  int state;       /* WD_AZ_GL_* */
  double for_ms;   /* in that state for */
  /* A launch the GPU is inside: how many launches of its function the graph holds before it and
   * in all (the k-th Coll of that function in a replay is its), -1 for the others. */
  int fn_before, fn_total;
} wd_az_glaunch;
/* Kept per communicator rank: the launches its GPU is inside, then the first one it waits for in
 * each graph (those behind it say nothing more), then the rest; what the first two lose to the
 * bound is counted (glaunch_cut) and said. */
#define WD_AZ_GLAUNCH 32

typedef struct wd_az_crank {
  uint64_t comm_id;
  wd_az_str name;
  int rank, nranks;
  int cuda_dev;       /* -1 when unknown */
  wd_az_str gpu_uuid; /* 0 when unknown */
  uint32_t dump;  /* index into the dump list */
  int kept;       /* used by the analysis (newest for its key, or --all-dumps) */
  int aside;      /* of another attempt than the one judged (wd_az_select) */
  double since_ms;
  int nseq;
  wd_az_seq seq[WD_AZ_MAX_FUNCS];
  int64_t p2p_enq, p2p_done;
  int nops, ops_total;
  wd_az_op ops[WD_AZ_MAX_OPS];
  /* Proxy-level events listed outside the open trees (a post-mortem dump's, from the ring file's
   * last refresh): where its proxy thread waited. */
  wd_az_wait open_wait;
  int nlast;
  wd_az_rec last[WD_AZ_LAST_RECS]; /* oldest first */
  int nhist;
  wd_az_hist hist[WD_AZ_HIST]; /* oldest first */
  uint64_t ring_written, ring_lost;
  int nphase;
  wd_az_phase phase[WD_AZ_PHASES]; /* newest first */
  int ntlinks;
  wd_az_tlink tlinks[WD_AZ_TLINKS];
  int nglaunch, glaunch_cut;
  int64_t glaunch_unfollowed; /* captured launches the plugin could not follow (graphLaunchesUnfollowed) */
  wd_az_glaunch glaunch[WD_AZ_GLAUNCH];
  int t_arrival;       /* the dump had an arrival wait */
  double t_wait_ms;    /* its collectives' mean wait for the peers (telemetry.arrival.waitS) */
  wd_az_str t_measure; /* "initial_sync" or "enqueue_to_completion" */
} wd_az_crank;

typedef struct wd_az_thread {
  int tid;
  wd_az_str name, status, top; /* top: first frame, 0 when none */
} wd_az_thread;

typedef struct wd_az_dump {
  char *path;
  wd_az_str host, reason;
  int pid, dump_seq;
  uint64_t wall_ns, mono_ns;
  double timeout_ms;   /* config.timeoutMs, 0 when absent */
  double poll_ms;      /* config.pollMs, 0 when absent */
  int fatal_signal;    /* postmortem.fatal.signal: what ended a dead process, 0 unknown */
  /* A running process's ring file copied by its node (reason "live", live.*): its state letter
   * ('T' stopped, 'D' in the kernel; 0 when not such a copy) and how long its watchdog had
   * written nothing, -1 unknown. */
  char live_state;
  char wd_thread_state; /* its watchdog thread's state letter, 0 unknown */
  double silent_ms;
  int answered_episode; /* live: the episode its watchdog last began to answer, 0 none */
  int threads_disabled;
  int main_tid;        /* -1 when no thread list */
  wd_az_str main_name;
  /* When the main thread gave no stack (it did not answer the signal, or blocks it): its state
   * letter in /proc ('D': in the kernel, uninterruptible) and the system call it is in. */
  wd_az_str main_status, main_syscall;
  char main_kstate;
  int nframes;
  wd_az_str frames[WD_AZ_FRAMES]; /* main thread, innermost first */
  int npy;
  wd_az_str py[WD_AZ_FRAMES]; /* main thread's Python frames "file:line in f", innermost first */
  int global_rank;             /* the job's RANK from its environment, -1 when unknown */
  /* torchft (env REPLICA_GROUP_ID, WORLD_SIZE of its group's torchrun): -1 when not set. */
  int replica_group, group_size;
  /* Its attempt: Slurm's and torchelastic's restart counts (-1: not set), -2 for both when the
   * dump carries no identity at all (an older format); the machine and the process start. */
  int slurm_restart, te_restart;
  uint64_t mtime_ns;   /* the file's modification time (the file system's clock), 0 unknown */
  uint64_t activity_ns; /* a post-mortem's newest record or fatal signal, wall clock; 0 unknown */
  int job_episode;     /* the job's stall episode a stall or peer dump answers, -1 unknown */
  int64_t clock_fix_ns; /* subtracted from wall_ns: its host's offset from the others' (wd_az_clock_offsets) */
  wd_az_str boot_id;
  uint64_t proc_start_ns; /* identity.processStartNs mixed with identity.pidNs: compared only, a process's token */
  uint64_t pid_ns;        /* identity.pidNs, 0 when the dump does not say */
  int nthreads, threads_total;
  wd_az_thread threads[WD_AZ_THREADS];
  int64_t min_t;       /* earliest record time (ns, <= 0) of any ring */
  size_t crank0, ncranks; /* its communicator ranks: cranks[crank0 .. crank0+ncranks) */
  int multi_rank;       /* it holds several ranks of one communicator */
  /* Its RANK is another process's too in the judged incarnation (torchft: a torchrun per replica
   * group, RANK 0 in each): RANK names no rank of the job (wd_az_select). */
  int rank_shared;
  uint64_t world_comm;  /* its largest communicator spanning other processes, 0 none */
  int kept;
  int aside; /* of another incarnation, episode or superseded communicator than the judged */
  int finalized; /* a ring file whose communicator was finalized or aborted (history) */
  /* A stall dump's first stall (trigger.stalls[0]): what the plugin saw stuck, in words; 0 when
   * none. A judged episode with one never reads "no hang". */
  wd_az_str stall_what;
  int npxn;
  wd_az_pxn pxn[WD_AZ_PXN]; /* open PXN sends of other processes it progressed */
} wd_az_dump;

typedef struct wd_az_skip {
  char *path;
  char *why;
} wd_az_skip;

/* Everything loaded. */
typedef struct wd_az_set {
  wd_az_dump *dumps;
  size_t ndumps, cap_dumps;
  wd_az_crank *cranks;
  size_t ncranks, cap_cranks;
  wd_az_skip *skips;
  size_t nskips, cap_skips;
  size_t snapshots_unread; /* with --episode: snapshot-named files of a directory, not read */
  size_t ncut; /* evidence of the job's own cut by a bound (a file, or communicators of one) */
  /* The attempt judged (wd_az_select) and what was set aside: "" when a single attempt. */
  char attempt_note[512];
  /* Hosts whose wall clock was corrected (wd_az_clock_offsets): "" when none. */
  char clock_note[512];
  /* The stall episode judged (wd_az_select: the latest, or --episode's), -1 none; and what the
   * job's own verdict-<episode>.resumed says, "" when there is none: progress came back after
   * that moment, so the verdict describes it, not now (main.c). */
  int episode;
  char resumed_note[256];
} wd_az_set;

void wd_az_set_free(wd_az_set *set);
/* Grow helpers: return a zeroed new element, or NULL when out of memory. */
wd_az_dump *wd_az_add_dump(wd_az_set *set);
wd_az_crank *wd_az_add_crank(wd_az_set *set);
int wd_az_add_skip(wd_az_set *set, const char *path, const char *why);

/* "0-2,4-7" from a sorted list of ranks (duplicates ignored); truncated with "..." to fit. */
void wd_az_ranges(const int *ranks, size_t n, char *out, size_t len);
/* snprintf that truncates silently: report lines are bounded on purpose. */
void wd_az_fmt(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Seconds with one decimal from milliseconds: "300.1". */
const char *wd_az_secs(double ms, char *buf, size_t len);

#endif
