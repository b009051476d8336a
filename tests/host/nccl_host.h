/*
 * wdhost: a test host that plays NCCL's part towards a profiler plugin.
 *
 * It loads the plugin exactly as NCCL does (dlopen RTLD_NOW|RTLD_LOCAL, ncclProfiler_v6, then _v5,
 * then _v4), initialises and finalises communicators, and drives NCCL-like event sequences from
 * an "application" thread and a "proxy" thread (see NCCL-FACTS.md for the order of events). Every
 * callback's return value is checked: a non-ncclSuccess return is counted (wdh_failures()).
 *
 * The host is not a hot path itself but is cheap enough (no malloc per event) to drive benchmarks.
 * Not async-signal-safe. Thread-safe where stated.
 */
#ifndef WD_NCCL_HOST_H
#define WD_NCCL_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "plugin/profiler_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------- */

typedef struct wdh_plugin {
  void *dl;         /* dlopen handle */
  int version;      /* 7, 6, 5 or 4: the table in use */
  const char *name; /* the plugin's name string (valid while loaded) */
  ncclProfiler_v4_t *v4;
  ncclProfiler_v5_t *v5; /* v6 uses the same function table layout as v5 */
  ncclProfiler_v6_t *v6;
  ncclProfiler_v7_t *v7; /* NCCL 2.31+ */
} wdh_plugin;

/* dlopen(path, RTLD_NOW|RTLD_LOCAL) and look up ncclProfiler_v7 (only when max_version is 7:
 * NCCL 2.31+), _v6, _v5, _v4 in that order, skipping versions above max_version (0 = up to v6,
 * NCCL 2.27-2.30 as the scenarios play them). Returns 0, or -1 with a message on stderr. */
int wdh_load(wdh_plugin *p, const char *path, int max_version);
/* dlclose; the plugin must not leave anything behind (threads, handlers). */
void wdh_unload(wdh_plugin *p);

/* Plugin path from the environment variable WDH_PLUGIN (set by CMake for every scenario test),
 * or NULL. */
const char *wdh_plugin_path(void);

/* ---------------------------------------------------------------------------------------------
 * Process-wide state: activation mask, callback failures, logger
 * ------------------------------------------------------------------------------------------- */

/* The ONE process-wide activation mask; every init gets its address, as in NCCL. */
extern int wdh_activation_mask;
/* Mask with "a child bit turns on its parents" applied (what the host emits). */
int wdh_effective_mask(int mask);

/* Number of callbacks that returned something other than ncclSuccess since start / last reset.
 * Thread-safe. */
long wdh_failures(void);
void wdh_failures_reset(void);
/* Total callbacks issued (start + stop + state), thread-safe. */
long wdh_calls(void);

/* The logger passed to init records every line (formatted, bounded). Thread-safe. */
void wdh_logfn(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
               const char *fmt, ...);
int wdh_log_count(int level);                          /* lines at that level, -1 = all */
/* Lines at that level (-1 = any) containing substr. */
int wdh_log_contains(int level, const char *substr);
void wdh_log_clear(void);
void wdh_log_print(void);                              /* all recorded lines to stderr */
/* WDH_LOG_ECHO=1 in the environment echoes lines to stderr as they arrive; WDH_LOG_ECHO=warn
 * only the WARN lines, as NCCL's logger prints them ("NCCL WARN ..."). */

/* ---------------------------------------------------------------------------------------------
 * Communicators
 * ------------------------------------------------------------------------------------------- */

enum { WDH_FUNC_BROADCAST, WDH_FUNC_REDUCE, WDH_FUNC_ALLGATHER, WDH_FUNC_REDUCESCATTER,
       WDH_FUNC_ALLREDUCE, WDH_FUNC_COUNT };

typedef struct wdh_comm {
  wdh_plugin *plugin;
  void *ctx;           /* what init returned (may be NULL) */
  uint64_t comm_id;
  int rank, nranks, nnodes;
  char name[64];
  uint64_t seq[WDH_FUNC_COUNT]; /* next seqNumber per collective function (atomic access) */
  uint64_t ce_seq;              /* next CE collective number (ceSeqNum, counted apart) */
  void *stream;                 /* the stream its kernels go to (stand-in stream, or a token) */
  /* NCCL 2.31+: the Profiler Thread that delivers this communicator's KernelCh and KernelPhase
   * events (wdh_pthread_create); NULL = they come from the proxy part, as in 2.27-2.30. */
  struct wdh_pthread *pthread;
} wdh_comm;

/* init through the loaded table (argument order per version). Returns the plugin's result
 * (also counted as a failure when not ncclSuccess). */
int wdh_comm_init(wdh_comm *c, wdh_plugin *p, uint64_t comm_id, const char *name, int nnodes,
                  int nranks, int rank);
/* finalize; skipped when ctx is NULL (as NCCL does). */
int wdh_comm_finalize(wdh_comm *c);

int wdh_func_index(const char *func); /* "AllReduce" -> WDH_FUNC_ALLREDUCE, -1 otherwise */

/* ---------------------------------------------------------------------------------------------
 * The stand-in CUDA driver (tests/fakecuda, built as libcuda.so.1): the GPU the host drives by
 * hand, for the plugin's CUDA-event path. Without it loaded the plugin falls back to NCCL's
 * events, as on a machine whose driver it cannot use.
 * ------------------------------------------------------------------------------------------- */

/* dlopen the stand-in (path in WDH_FAKE_CUDA, set by CMake) RTLD_GLOBAL, before the plugin's
 * first init, as NCCL has the real driver loaded by then. Returns 0, or -1 with a message. */
int wdh_fake_cuda_load(void);
int wdh_fake_cuda_loaded(void);
/* A kernel on c's stream; returns its position (0 without the stand-in). */
uint64_t wdh_gpu_launch(wdh_comm *c);
/* The GPU finished every position of c's stream up to pos. */
void wdh_gpu_complete(wdh_comm *c, uint64_t pos);
void wdh_gpu_set_capturing(wdh_comm *c, int on);
void wdh_gpu_set_error(int err); /* every event query fails with err from now on (0 clears) */
long wdh_fake_events_live(void); /* events created and not destroyed */
long wdh_fake_records(void);     /* cuEventRecord calls */
/* Capture into a new graph of the stand-in (cuStreamBeginCapture); returns its id, 0 without. */
int wdh_gpu_capture_begin(wdh_comm *c);
void wdh_gpu_capture_end(wdh_comm *c);
void wdh_gpu_capture_kernel(wdh_comm *c); /* a kernel of the application captured meanwhile */
/* cuGraphLaunch: the position before the graph's first kernel (its k-th kernel is that + k). */
uint64_t wdh_gpu_graph_launch(wdh_comm *c, int graph);
/* A new graph captured on c's stream (torch.cuda.graph around n collectives): n AllReduces
 * (intra-node, no proxy work), a compute kernel of the application first when lead_kernel, and
 * one before the split-th AllReduce when split > 0. Its id (0 without the stand-in). */
int wdh_gpu_capture_allreduces(wdh_comm *c, int n, int lead_kernel, int split);
/* Another stream (cuStreamCreate; NULL without the stand-in), a graph launched on it
 * (PyTorch's CUDAGraph::replay launches on the current stream, whichever captured it), and its
 * GPU finishing up to pos. */
void *wdh_gpu_stream_new(void);
/* cudaSetDevice on the calling thread: the device the plugin reads at a communicator's init. */
void wdh_gpu_set_device(int dev);
uint64_t wdh_gpu_graph_launch_on(void *stream, int graph);
void wdh_gpu_complete_on(void *stream, uint64_t pos);
/* cuGraphDestroy and cuGraphExecDestroy of a graph: its user objects' destructors run. */
void wdh_gpu_graph_destroy(int graph);
/* User objects the stand-in driver holds (-1: an older stand-in). */
long wdh_gpu_user_objects(void);
void wdh_gpu_capture_ids(int on); /* cuStreamGetCaptureInfo answers (1) or fails (0) */
int wdh_gpu_graph_nodes(int graph, int kind); /* 0 all, 1 kernels, 2 event records, 3 host */
void wdh_gpu_refuse_nodes(int on);            /* cuLaunchHostFunc fails (out of memory) while on */

/* ---------------------------------------------------------------------------------------------
 * Raw calls, version independent. Return values are checked and counted.
 * ------------------------------------------------------------------------------------------- */

typedef struct wdh_descr {
  uint64_t type;
  void *parent;
  int rank;
  /* API events */
  bool graph_captured;
  int group_depth;
  void *stream;
  /* Coll / P2p / CollApi / P2pApi */
  const char *func;
  size_t count;
  const char *datatype;
  int root;
  uint64_t seq;
  const void *send_buff;
  void *recv_buff;
  uint8_t n_channels, n_warps;
  const char *algo, *proto;
  void *parent_group;
  int peer;
  /* ProxyOp / ProxyStep / KernelCh / NetPlugin */
  pid_t pid;
  uint8_t channel;
  int n_steps, chunk_size, is_send;
  int step;
  uint64_t ptimer;
  int64_t net_id;
  /* v7 */
  uint64_t user_tag;
  bool is_sym_coll;
  int phase_id;
  const char *phase_name;
} wdh_descr;

/* startEvent(ctx, &h, descr) translated to the loaded version's descriptor; returns h (NULL when
 * the plugin dropped the event). Any ctx may be passed (NULL, foreign pointers). The host poisons
 * *eHandle before the call and counts a failure if the plugin does not write it. */
void *wdh_start(wdh_plugin *p, void *ctx, const wdh_descr *d);
void wdh_stop(wdh_plugin *p, void *h);
void wdh_state(wdh_plugin *p, void *h, int state, uint64_t arg); /* arg: transSize / pTimer / ... */

/* ---------------------------------------------------------------------------------------------
 * NCCL-like operations
 * ------------------------------------------------------------------------------------------- */

enum {
  WDH_OP_COLL = 0,
  WDH_OP_SEND = 1, /* p2p send to peer */
  WDH_OP_RECV = 2, /* p2p recv from peer */
};

typedef struct wdh_op_cfg {
  int kind;             /* WDH_OP_COLL (default), WDH_OP_SEND, WDH_OP_RECV */
  const char *func;     /* collective name, default "AllReduce" */
  size_t count;         /* default 1048576 */
  const char *datatype; /* default "ncclFloat32" */
  int root;             /* default 0 (only meaningful for rooted collectives) */
  int peer;             /* p2p peer */
  int n_channels;       /* default 2 */
  int n_steps;          /* ProxySteps per ProxyOp, default 4; 0 = ProxyOps without steps */
  int no_proxy;         /* 1: no ProxyOps at all (intra-node op) */
  int graph_captured;   /* API events flagged graphCaptured (capture time) */
  int capture_emits_coll; /* with graph_captured: also emit Group/Coll (no children) at capture */
  int in_capture;       /* with graph_captured: into the capture wdh_gpu_capture_begin opened (its
                           kernel becomes a node of that graph) */
  int children_first;   /* run the proxy part before the Coll/Group/GroupApi stops */
  /* Hang: leave step hang_step of channel hang_channel's recv ProxyOp in RecvWait and stop there:
   * that ProxyOp and that channel's KernelCh never stop. hang_channel -1 (default) = no hang;
   * hang_step defaults to 0. P2p send ops hang on their send ProxyOp (state SendWait). */
  int hang_channel, hang_step;
  /* Microseconds slept before each ProxyStep state change / stop (slow but progressing op). */
  unsigned step_delay_us;
  /* Per-op override of the emitted mask (0 = read wdh_activation_mask at enqueue). */
  int mask;
  int collnet;        /* CollNet: the Coll announces nChannels 0, its ProxyOps never stop */
  int api_only;       /* Broadcast on the AllGatherV path, symmetric kernels: GroupApi + CollApi */
  int explicit_group; /* inside ncclGroupStart/End: GroupApi depth 2 */
  uint64_t user_tag;  /* v7: the call's userProfilerTag (API events, Coll, P2p) */
  uint64_t sync_ns;   /* v7 KernelPhase: initial_sync's length (waiting for the peers), 0 = 1 us */
  /* Which directions of channel hang_channel hang (WDH_HANG_*; 0: a collective's recv, a p2p
   * send's send), as a ring behind a dead link shows them (transport/net.cc). */
  int hang_dirs;
  /* PXN (transport/net.cc): its network sends are progressed by another local process's proxy
   * (wdh_pxn_send there): no send ProxyOp here; with a send hang the channel waits on it. */
  int pxn_send;
  /* A slow link: every ProxyStep of channel slow_channel (both directions) takes slow_us longer
   * to complete, as behind a degraded NIC or cable; -1 (default) = none. */
  int slow_channel;
  unsigned slow_us;
} wdh_op_cfg;

enum {
  WDH_HANG_RECV = 1,     /* the recv step stays in RecvWait: nothing arrives */
  WDH_HANG_SEND_NET = 2, /* the send step reaches SendWait (handed to the network), never ends */
  WDH_HANG_SEND_GPU = 4, /* the send step stays in SendGPUWait: its kernel never fills it */
};

#define WDH_MAX_CH 16
#define WDH_STEPS_OPEN 8 /* NCCL_STEPS: ProxySteps open at once per ProxyOp */

/* Defaults as documented above (kind COLL, AllReduce, 2 channels, 4 steps, no hang). */
void wdh_op_cfg_default(wdh_op_cfg *cfg);

/* Handles of one operation. Copyable by value (the proxy part only reads it). */
typedef struct wdh_op {
  wdh_comm *comm;
  wdh_op_cfg cfg;
  int mask;        /* effective mask snapshot taken at enqueue */
  uint64_t seq;    /* seqNumber given to the Coll (p2p: 0) */
  void *group_api, *coll_api, *kernel_launch, *group, *coll;
  int enqueued_open; /* 1 while Coll/Group/GroupApi stops are still pending (children_first) */
  /* Filled by the proxy part when the op hangs. */
  void *hung_proxyop, *hung_step, *hung_kernelch;
  int hung_ch, hung_is_send;
  uint64_t gpu_pos; /* position of its kernel on the stand-in stream, 0 none */
  int posted;       /* wdh_op_post ran */
  void *pop[WDH_MAX_CH][2];                  /* ProxyOps by channel and is_send */
  void *step[WDH_MAX_CH][2][WDH_STEPS_OPEN]; /* open ProxySteps, by step % NCCL_STEPS */
  int next_step[WDH_MAX_CH][2];              /* next step the proxy will post */
  int kslot[WDH_MAX_CH]; /* 2.31: its KernelCh work ops on the Profiler Thread (index + 1; 0 none) */
} wdh_op;

/* A send or recv whose peer is the rank itself (every AlltoAll has one). */
static inline int wdh_op_is_self(const wdh_op *op) {
  return op->cfg.kind != WDH_OP_COLL && op->cfg.peer == op->comm->rank;
}

/* Application thread part: GroupApi start -> GroupStartApiStop -> CollApi (or P2pApi) start/stop
 * -> KernelLaunch start/stop -> GroupEndApiStart -> Group start -> Coll (P2p) start -> Coll stop ->
 * Group stop -> GroupApi stop, each only when its bit is in the effective mask. v4: no API events,
 * the Coll's parent is the Group. Takes the next seqNumber of the function. With
 * cfg->children_first the three stops are deferred to wdh_op_finish(). */
void wdh_op_enqueue(wdh_comm *c, const wdh_op_cfg *cfg, wdh_op *op);
/* Proxy thread, when it picks the op up (proxy.cc, ncclProxyOpToArgs, before the GPU gets
 * there): per channel and direction a ProxyOp (parent = Coll/P2p, pid = getpid()), state
 * ProxyOpInProgress_v4, and its first NCCL_STEPS ProxySteps posted (send: SendGPUWait, recv:
 * RecvWait). Idempotent. */
void wdh_op_post(wdh_op *op);
/* The GPU reaches the op (posting it first if needed): the stand-in stream completes up to it;
 * per channel the KernelCh starts, steps progress (send: SendPeerWait_v4, SendWait, stop; recv:
 * RecvFlushWait, RecvGPUWait, stop; later steps posted as slots free), the KernelCh stops, then
 * the ProxyOps stop (CollNet ProxyOps never do); the kernel completes on the stream. Stops at
 * the hang point if configured (returns 1 then, else 0). */
int wdh_op_gpu(wdh_op *op);
/* wdh_op_post then wdh_op_gpu. */
int wdh_op_proxy(wdh_op *op);
/* Deferred stops of a children_first op (no-op otherwise). */
void wdh_op_finish(wdh_op *op);
/* Everything on the calling thread: enqueue, proxy, finish. Returns wdh_op_proxy's result. */
int wdh_op_run(wdh_comm *c, const wdh_op_cfg *cfg, wdh_op *op);
/* Let a hung op continue: RecvFlushWait/RecvGPUWait/stop of the hung step, remaining steps, the
 * ProxyOp stop, the KernelCh stop (the other channels already finished). */
void wdh_op_resume(wdh_op *op);
/* The next AllReduce of c, whose data never comes: enqueued with hang_channel 0 and its proxy
 * part run up to the step that waits (RecvWait); wdh_op_resume lets it go on. */
void wdh_op_hang(wdh_comm *c, wdh_op *op);

/* Graph replay of a captured op: Group start (parent = captured GroupApi handle on v5/v6) ->
 * Coll start with parentObj = the capture-time CollApi handle (long stopped) and a new
 * seqNumber -> Coll stop -> Group stop, then the proxy part. Call it from any thread (NCCL does
 * it from a CUDA callback thread). `out` receives the replay's handles. */
int wdh_op_replay(const wdh_op *captured, wdh_op *out);

/* A v6 CE collective (ce_coll.cc, ncclLaunchCeColl), all on the calling thread: GroupApi,
 * CollApi, then CeColl (ceSeqNum, the stream) with CeSync/CeBatch children around the copies it
 * enqueues on the stand-in stream, CeColl stop, GroupApi stop. NCCL reports nothing when the
 * copies finish: complete out->gpu_pos on the stream for that (or never, for a hang). Returns
 * out->gpu_pos (0 without the stand-in or before v6). */
uint64_t wdh_ce_coll(wdh_comm *c, const char *func, wdh_op *out);

/* PXN: a ProxyOp started with a foreign context pointer (never created by this process), a
 * foreign parent and another pid, then n_steps ProxySteps under it (no pid), states, stops.
 * leave_open = 1 keeps the ProxyOp and its last step open. Returns the ProxyOp handle. */
void *wdh_pxn_op(wdh_plugin *p, void *foreign_ctx, void *foreign_parent, pid_t pid, int channel,
                 int peer, int is_send, int n_steps, int leave_open);
/* A PXN send this process's proxy progresses for local rank origin_rank of process origin_pid
 * (transport/net.cc; the descriptor carries the originating rank and pid, plugin/profiler.cc):
 * a ProxyOp with the foreign context and parent, steps 0..posted-1 moved through SendGPUWait,
 * SendPeerWait and SendWait and left open (the network never completes them). Returns it. */
void *wdh_pxn_send(wdh_plugin *p, void *foreign_ctx, void *foreign_parent, pid_t origin_pid,
                   int origin_rank, int channel, int peer, int n_steps, int posted);

/* ---------------------------------------------------------------------------------------------
 * Proxy thread: a worker that runs wdh_op_proxy() on submitted ops in FIFO order.
 * ------------------------------------------------------------------------------------------- */

typedef struct wdh_proxy wdh_proxy;
wdh_proxy *wdh_proxy_create(void);       /* thread named "wdh-proxy" */
void wdh_proxy_submit(wdh_proxy *px, const wdh_op *op); /* copies op; blocks when queue full */
void wdh_proxy_drain(wdh_proxy *px);     /* wait until every submitted op was processed */
void wdh_proxy_destroy(wdh_proxy *px);   /* drain, stop, join */
long wdh_proxy_done(wdh_proxy *px);      /* ops processed so far */

/* n ops: enqueue on the calling thread, proxy part on px (or inline when px is NULL), drain. */
void wdh_run_ops(wdh_comm *c, wdh_proxy *px, const wdh_op_cfg *cfg, int n);

/* Application traffic on its own thread (named thread_name when not NULL): batches of `batch`
 * default ops on c, their proxy part on a wdh_proxy of its own, until stopped. */
typedef struct wdh_traffic wdh_traffic;
wdh_traffic *wdh_traffic_start(wdh_comm *c, int batch, const char *thread_name);
long wdh_traffic_ops(wdh_traffic *t);  /* ops finished so far, thread-safe */
long wdh_traffic_stop(wdh_traffic *t); /* stop, join, free; returns the ops finished */

/* ---------------------------------------------------------------------------------------------
 * NCCL 2.31's Profiler Thread (src/plugin/profiler.cc, ncclProfilerThreadFunc): one per
 * communicator (shared by split children that share resources). The host posts a KernelCh work op
 * per channel of every Coll, and per channel of each half of a send/recv pair (the self pair too),
 * when the plan's task events start (ncclProfilerPostPlanWork); the GPU (wdh_op_gpu) marks a
 * channel started and completed; the thread polls its ops (profilerProgressOps): KernelCh start
 * once the channel started, then its KernelPhases and the KernelCh stop once it completed. So
 * KernelCh comes from a third thread, at its own pace, possibly after the op's ProxyOps stopped.
 * ------------------------------------------------------------------------------------------- */

typedef struct wdh_pthread wdh_pthread;
wdh_pthread *wdh_pthread_create(void); /* thread named "wdh-profiler" */
/* Attach pt to c (several communicators may share one); c's ops posted from now on use it. */
void wdh_pthread_attach(wdh_pthread *pt, wdh_comm *c);
/* Wait until every posted op whose channel completed has been delivered. */
void wdh_pthread_settle(wdh_pthread *pt);
/* ncclProfilerThreadDestroy: drain = 1 (abort: cleanupAndStop with drainStuck) drops ops whose
 * kernels will never finish without stopping their KernelCh; drain = 0 waits for all of them.
 * Then joins the thread and frees it; detach it from its communicators first (c->pthread = NULL). */
void wdh_pthread_destroy(wdh_pthread *pt, int drain);
long wdh_pthread_kch_started(wdh_pthread *pt); /* KernelCh starts delivered */
long wdh_pthread_kch_stopped(wdh_pthread *pt); /* KernelCh stops delivered */

/* ---------------------------------------------------------------------------------------------
 * Helpers for scenario tests
 * ------------------------------------------------------------------------------------------- */

uint64_t wdh_now_ns(void); /* CLOCK_MONOTONIC */
void wdh_sleep_ms(unsigned ms);
long wdh_rss_kib(void); /* this process's resident memory (/proc/self/statm), KiB */

/* mkdtemp under $TMPDIR or /tmp; returns a malloc'ed path. */
char *wdh_tempdir(const char *tag);
void wdh_rmtree(const char *dir); /* removes files in dir and dir (one level) */
/* Ranks of one process tree meet: rank creates dir/name.rank and waits until n such files are
 * there (at most timeout_ms). NCCL completes a collective on no rank before every rank entered
 * it (transport/net.cc recvProxyProgress: a receive step ends only when the peer's data came;
 * the kernel's primitives wait on the same), so ranks played by this host leave a collective
 * together this way. 0, or -1 on timeout. */
int wdh_barrier(const char *dir, const char *name, int rank, int n, unsigned timeout_ms);

/* Dumps in dir and its host subdirectories whose name ends with "-<reason>.json" or
 * "-<reason>.json.gz" (reason NULL = any dump, not trigger files or temporaries). Fills up to max
 * malloc'ed paths (sorted by path) if paths is not NULL. Returns the count. */
int wdh_list_dumps(const char *dir, const char *reason, char **paths, int max);
void wdh_free_paths(char **paths, int n);
/* Wait up to timeout_ms until at least `want` dumps with that reason exist. Returns the count. */
int wdh_wait_dumps(const char *dir, const char *reason, int want, unsigned timeout_ms);

/* The automatic verdict of episode k: the first line of dir/verdict-<k>.txt (the line every
 * process of the episode logs), once the file is there, waiting up to timeout_ms. 1 when found. */
int wdh_verdict_line(const char *dir, unsigned k, unsigned timeout_ms, char *out, size_t len);

/* What torchrun tells each worker (torch/distributed/elastic/agent/server/local_elastic_agent.py,
 * _start_workers): RANK, LOCAL_RANK (left alone when local_rank < 0) and WORLD_SIZE. */
void wdh_launcher_env(int rank, int local_rank, int world_size);

/* A job of n rank processes: fork n children, each running fn(rank, ready_fd) (fn writes one
 * byte to ready_fd when it is set up, and never returns); returns once every rank is ready, with
 * their pids in pids. Returns the number that said ready. */
int wdh_fork_ranks(int n, void (*fn)(int rank, int ready_fd), pid_t *pids);
/* SIGKILL and reap every rank whose pid is not 0. */
void wdh_kill_ranks(pid_t *pids, int n);

/* Waits up to timeout_ms for the child pid, then kills (SIGKILL) and reaps it. Returns 1 when it
 * ended by itself, 0 when it had to be killed; *status gets the wait status either way. */
int wdh_wait_child(pid_t pid, unsigned timeout_ms, int *status);

/* Read and parse a JSON file (cJSON *, declared void * to keep cJSON out of this header). */
/* A file's content, NUL-terminated, gunzipped when it is compressed (*.json.gz dumps); NULL when
 * it cannot be read. Free it. */
char *wdh_read_file(const char *path, size_t *len);
/* A dump (plain or compressed) parsed with cJSON, or NULL. */
void *wdh_json_load(const char *path);
void wdh_json_free(void *json);
/* Runs "python3 tests/tools/validate_dump.py FILE" when the script exists (source dir from
 * WDH_SOURCE_DIR). Returns 0 when valid or when the validator is absent, 1 when invalid. */
int wdh_validate_dump(const char *path);

/* Dotted path lookup in a parsed JSON document: "trigger.stalls.0.commId" (numbers index
 * arrays). Returns the cJSON node or NULL. */
void *wdh_jpath(void *json, const char *path);
const char *wdh_jstr(void *json, const char *path);             /* NULL unless a string */
double wdh_jnum(void *json, const char *path, double fallback); /* fallback unless a number */

/* Assertions for scenario programs: a failed check prints file:line, the expression and a
 * message, and is counted; the program returns wdh_check_summary() from main. */
void wdh_check_fail(const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int wdh_check_failures(void);
/* Prints a PASS/FAIL line with the name and returns the exit code (0 or 1). */
int wdh_check_summary(const char *name);
/* The common start of a scenario program: a fresh dump directory (wdh_tempdir(tag)) exported as
 * NCCL_WATCHDOG_DUMP_DIR, and NCCL_WATCHDOG_TIMEOUT / NCCL_WATCHDOG_POLL set;
 * NCCL_WATCHDOG_VERDICT=0 unless the environment already says. Returns the
 * malloc'ed directory, for wdh_scenario_end(). */
char *wdh_scenario_dir(const char *tag, const char *timeout, const char *poll);
/* The common end: checks that no callback failed, prints the PASS/FAIL line; on failure prints
 * the recorded log and keeps dir (saying where), else removes it. Frees dir, returns the exit
 * code. */
int wdh_scenario_end(const char *name, char *dir);
/* SIGUSR1 to this process, then its `signal` dump in dir (none there before): checks that exactly
 * one appears within 5 s, that it validates and parses. Returns the parsed dump (wdh_json_free)
 * or NULL after a failed check. */
void *wdh_signal_snapshot(const char *dir);
/* The analyzer (WDH_ANALYZER) run on dir with extra arguments (may be ""): its first line into
 * out, every line echoed on stderr. Returns 0 when the analyzer is not built (out empty). */
int wdh_analyzer_first_line(const char *dir, const char *extra, char *out, size_t len);
#define WDH_CHECK(cond, ...)                                                                     \
  do {                                                                                           \
    if (!(cond)) wdh_check_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                         \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif /* WD_NCCL_HOST_H */
