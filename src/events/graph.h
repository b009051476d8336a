/*
 * Captured launches: GPU-side ground truth for NCCL kernels recorded into a CUDA graph, where
 * NCCL itself may fire nothing at a replay (a plan without proxy work and without KernelCh:
 * enqueue.cc, ncclLaunchPrepare adds no host node) and PyTorch's watchdog never looks
 * (ProcessGroupNCCL keeps captured work out of its queue).
 *
 * At the launch's KernelLaunch start on a capturing stream the plugin adds, in stream order, a
 * host node that counts the graph's replays (cuLaunchHostFunc: "Captured, it runs at every
 * launch"), then an external event record (cuEventRecordWithFlags, CU_EVENT_RECORD_EXTERNAL:
 * recorded at every launch and queryable from the host, where a plainly recorded event is not);
 * at the KernelLaunch stop a second external record. The technique is NCCLX's (seed
 * graph-timeout.md). One host node per graph where the driver names captures
 * (cuStreamGetCaptureInfo), else one per captured launch.
 *
 * Per replay the watchdog then tells, for each captured launch: not reached (both events
 * pending), in it (start complete, end pending), passed (end complete), and which replay (the
 * counter). Slots are handed out in capture order. A graph keeps its event nodes for as long
 * as it exists, and a reused event would mix two graphs' replays, so a slot is given back only
 * when its graph is gone: at its first captured launch the graph takes a CUDA user object
 * (cuUserObjectCreate, moved into the graph by cuGraphRetainUserObject) whose destructor the
 * driver runs once the graph and every executable graph made from it are destroyed; the
 * destructor marks the graph's replay counter gone, and the watchdog's next poll frees its
 * slots and counter for the next capture. Without user objects or capture ids, slots stay
 * taken while the communicator lives. Past NCCL_WATCHDOG_GRAPH_LAUNCHES slots held by live
 * graphs, a captured launch is not followed: counted, said once in the log, and in every dump.
 */
#ifndef WD_GRAPH_H
#define WD_GRAPH_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/gpu.h"

/* Replay counters for the whole process: a host node's argument is an index here, never a
 * pointer into a context (a context may be recycled while a graph still names it). */
#define WD_REPLAY_COUNTERS 16384u

enum { WD_GL_IDLE = 0, WD_GL_WAIT = 1, WD_GL_IN = 2, WD_GL_PASSED = 3 };
/* A slot's armed word beyond 1 and 2: given back (its graph destroyed), or being filled again. */
enum { WD_SLOT_FREE = 3, WD_SLOT_CLAIMED = 4, WD_SLOT_GONE = 5 /* given back, its API events still pinned */ };

typedef struct wd_glaunch {
  void *start, *end;         /* CUevents, created at the capture that takes the slot */
  void *stream;              /* the capturing stream */
  _Atomic uint32_t armed;    /* 1: start recorded into the graph; 2: end too; WD_SLOT_* */
  uint32_t counter;          /* replay counter index (its graph's) */
  uint32_t graph, pos;       /* graph number in this communicator (1-based), launch in it (1-based) */
  uint8_t func, dtype;       /* the captured call's string ids (the last one of its group) */
  uint16_t ncalls;           /* captured calls in the launch's group */
  int32_t root;
  uint64_t count;
  uint64_t gkey;             /* the GroupApi handle it was launched under */
  /* The watchdog's own. */
  uint64_t w_replay;         /* counter at the last poll */
  uint64_t w_since_ns;       /* when w_state began, in this replay */
  uint8_t w_state;           /* WD_GL_* */
  uint8_t w_error;           /* a query failed with something other than not-ready */
  uint64_t w_reported;       /* replay already reported as stalled (+1), 0 none */
} wd_glaunch;

typedef struct wd_graphs {
  int on;
  const wd_cuda *cu;
  void *cu_ctx;
  uint32_t cap;                /* slots: NCCL_WATCHDOG_GRAPH_LAUNCHES */
  _Atomic uint32_t used;       /* slots handed out (published after they are filled) */
  _Atomic uint32_t unfollowed; /* captured launches not followed (slots or counters full, error) */
  _Atomic uint32_t nfree;      /* slots given back by destroyed graphs, not yet taken again */
  _Atomic int full;            /* a launch found every slot held (the watchdog says so once) */
  int full_said;               /* the watchdog's own */
  uint64_t given_back;         /* slots given back so far (the watchdog's own) */
  _Atomic uint32_t tied;       /* graphs whose destruction gives their slots back */
  /* Capture grouping, on the launching thread. */
  unsigned long long cap_id;
  void *cap_stream;
  uint32_t cap_graph, cap_pos, cap_counter;
  uint32_t ngraphs;
  /* The captured API calls of the group being launched (CollApi / P2pApi with graphCaptured). */
  uint64_t api_group;
  uint8_t api_func, api_dtype;
  uint16_t api_calls;
  int32_t api_root;
  uint64_t api_count;
  wd_glaunch *slot; /* cap entries, allocated with the context */
} wd_graphs;

/* Context allocation: cap slots (0: the watch is off). Returns -1 when out of memory. */
int wd_graphs_alloc(wd_graphs *g, uint32_t cap);
/* At communicator init, the current CUDA context's driver table (needs the optional entry
 * points); 0 leaves it off. */
int wd_graphs_open(wd_graphs *g);
/* Destroy the events (finalize); the slots stay until wd_graphs_free. */
void wd_graphs_close(wd_graphs *g);
void wd_graphs_free(wd_graphs *g);

/* Application thread, a CollApi / P2pApi start with graphCaptured, under GroupApi `group`. */
void wd_graph_note_api(wd_graphs *g, uint64_t group, uint8_t func, uint8_t dtype, uint64_t count,
                       int32_t root);
/* KernelLaunch start on a capturing stream: the host node and the start record. Returns a
 * token (slot + 1), 0 when the launch is not followed. */
uint64_t wd_graph_capture_begin(wd_graphs *g, void *stream, uint64_t group);
/* KernelLaunch stop: the end record. */
void wd_graph_capture_end(wd_graphs *g, uint64_t token);
/* An eager launch of the communicator: without capture ids, the next captured one begins a graph. */
static inline void wd_graph_note_eager(wd_graphs *g) { g->cap_stream = NULL; }
/* The slot a launch under GroupApi `group` took, -1 when none (the latest such launch). */
int wd_graph_lookup(const wd_graphs *g, uint64_t group);

/* What the GPU says about replay r of slot i (a replay that NCCL's events also describe). */
typedef struct wd_graph_truth {
  uint8_t known, reached, done;
} wd_graph_truth;
void wd_graph_truth_of(wd_graphs *g, uint32_t i, uint64_t r, wd_graph_truth *t);

/* Watchdog thread, once per poll: query every armed slot and move its state; a destroyed
 * graph's slots become WD_SLOT_GONE and its counter free. Returns how many slots are to settle
 * (0 while a destructor keeps overtaking the pass: they settle at a later poll). */
uint32_t wd_graphs_poll(wd_graphs *g, uint64_t now);
/* Then (after wd_unpin_gone): those slots are free for the next capture. */
void wd_graphs_settle(wd_graphs *g);

/* A Coll/P2p's or KernelLaunch's gpu_key naming a captured launch (slot) and, for a replay's
 * operation, the replay (launch.h's tokens never reach bit 63). */
#define WD_GKEY_GRAPH (1ull << 63)
static inline uint64_t wd_graph_key(uint32_t slot, uint64_t replay) {
  return WD_GKEY_GRAPH | ((uint64_t)(slot & 0xfffffu) << 40) | (replay & ((1ull << 40) - 1));
}
static inline int wd_is_graph_key(uint64_t key) { return (key & WD_GKEY_GRAPH) != 0; }
static inline uint32_t wd_graph_key_slot(uint64_t key) { return (uint32_t)(key >> 40) & 0xfffffu; }
static inline uint64_t wd_graph_key_replay(uint64_t key) { return key & ((1ull << 40) - 1); }
/* wd_graph_capture_begin as a KernelLaunch's key (0 when not followed). */
static inline uint64_t wd_graph_capture_key(wd_graphs *g, void *stream, uint64_t group) {
  uint64_t token = wd_graph_capture_begin(g, stream, group);
  return token ? wd_graph_key((uint32_t)(token - 1), 0) : 0;
}

/* User objects whose destructor has not run (graphs still alive that hold one): while any
 * is, the library must stay mapped (the driver will call into it), whatever NCCL's dlclose. */
long wd_graphs_pending(void);
/* At the plugin's stop: keeps the library mapped for good when some are (dlopen RTLD_NODELETE),
 * and returns how many. */
long wd_graphs_pin_if_pending(void);

/* Tests: the process-wide counter of slot i's graph (what its host node bumps). */
uint64_t wd_graph_counter(uint32_t index);

#endif
