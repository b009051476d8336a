/*
 * An event slot: what a handle given to NCCL points at. Slots live in chunks of the slot arena
 * (arena.h), so a stale handle always points at readable memory; the low bits of a handle
 * carry the slot's incarnation tag so a stale handle is recognised instead of trusted.
 *
 * Reference counting keeps a parent slot from being reused while children point at it: refs is
 * 1 (the event itself, until stopped) + live children + a "hold" while kernel channels are
 * expected. The slot returns to its pool when refs reaches zero. For Coll/P2p this moment is
 * also the operation's completion.
 */
#ifndef WD_EVENT_H
#define WD_EVENT_H

#include <stdatomic.h>
#include <stdint.h>

#include "events/arena.h"
#include "flightrec/record.h"
#include "flightrec/ring.h"

struct wd_context;
struct wd_pool;

#define WD_TAG_MASK 63u
#define WD_OPEN(tag) (1u | (((tag) & WD_TAG_MASK) << 1))
#define WD_EVENT_ALIGN 64

enum { WD_KIND_CHILD = 0, WD_KIND_ROOT = 1 };

/* How far a root op's kernel channels can be believed on NCCL 2.29/2.30, whose per-channel work
 * counters some works leave out of step (transport/profiler.cc profilerProxyProgress, proxy.cc
 * incWorkCounter): */
enum {
  WD_KCH_TRUSTED = 0,
  /* (A graph replay after eager work keeps a stale counter, proxy.cc, so its KernelCh fire at
   * upload; its Group and Coll come from a host node the stream reached, enqueue.cc
   * hostStreamPlanCallback, so it is reached then, and its completion cannot be told from a
   * replay that completed at once: it is left trusted, docs/architecture.md.) */
  /* The communicator ran a Broadcast group of several roots (the AllGatherV path: its first
   * work never writes its slot, scheduler/allgatherv_sched.cc): channels it used give no KernelCh
   * for about 64 works; the channels that started tell. */
  WD_KCH_STARTED_ONLY = 1,
};

/* What the watchdog learnt about a root op's kernel (wd_gpu). */
enum {
  WD_GPU_KNOWN = 1,     /* CUDA events describe its launch */
  WD_GPU_DONE = 4,      /* ground truth, or kernel channels NCCL reported with nothing left */
  WD_GPU_ERROR = 8,     /* the driver reported an error for its events */
  WD_GPU_PROXY_GONE = 16, /* the thread that drove its proxy part has exited, and nothing tells
                             whether its kernel ended (revoke) or still waits (network error) */
  WD_GPU_NET_ERROR = 32,  /* that thread exited while the CUDA end event says the kernel still
                             waits: a network error ended NCCL's proxy loop (judge.h) */
  WD_GPU_MOVED_ON = 64,   /* with PROXY_GONE: the application made a communicator since the op
                             started and carries on with it (a revoke or shrink it recovered
                             from), so it is abandoned; kept once seen */
};

typedef struct wd_event {
  /* Seqlock word for readers on the watchdog thread: odd while the slot is (re)initialised. */
  _Atomic uint64_t seq;
  /* The start record, written word by word with relaxed atomics before seq turns even. */
  union {
    wd_record start;
    uint64_t startw[WD_RECORD_WORDS];
  };
  _Atomic uint64_t last_ns;    /* last progress at or under this event */
  _Atomic uint64_t last_trans; /* ProxyStep transSize / KernelCh stop time */
  _Atomic uint64_t order;      /* root ops: enqueue order within the context */
  /* The reference count (low half) and, in the high half, non-zero until stopped by NCCL or
   * abandoned by the watchdog: WD_OPEN(tag), so a stop with a stale handle racing with the slot's
   * reuse cannot close the new incarnation. One word, so that a stop that holds the last
   * reference claims the event and drops it with one atomic operation (wd_track_stop). */
  _Atomic uint64_t life;
  _Atomic uint32_t hold;     /* root ops: 1 while expected kernel channels are outstanding */
  _Atomic uint32_t live;     /* 1 while allocated */
  _Atomic uint32_t children_seen; /* approximate (no lock prefix): only "any" matters */
  _Atomic uint32_t steps_done;    /* approximate likewise: for display */
  /* Root ops only from here to wd_proxy_tid, kch_* and reached_ns, order and grouped: set when a
   * root starts, left as they were for a child (readers look at them only for roots; view.c). */
  _Atomic uint32_t kch_done;
  _Atomic uint32_t kch_expected;
  _Atomic uint32_t tag;      /* incarnation, low 6 bits go into the handle */
  _Atomic uint8_t state;     /* last NCCL state id, 0xff none */
  _Atomic uint8_t kind;      /* WD_KIND_* */
  _Atomic uint8_t grouped;   /* root op whose order came from its Group event */
  _Atomic uint8_t kch_trust; /* root ops: WD_KCH_* (how far its kernel channels can be believed) */
  _Atomic uint32_t kch_seen;  /* root ops: kernel channels started */
  _Atomic uint8_t type;       /* the start record's type, where stop and state look first */
  _Atomic uint64_t reached_ns; /* root ops: first sign from NCCL that the GPU got there, 0 none;
                                  ProxyStep: when it entered SendWait (its network part) */
  /* CollApi/P2pApi: the GroupApi handle it was issued under (its launches' key); Coll/P2p: the
   * token of its plan's launch; KernelLaunch and CeColl: the token of the CUDA events recorded
   * around it (launch.h). */
  _Atomic uint64_t gpu_key;
  /* The watchdog's own, per root op, refreshed by each scan (stall.c). */
  _Atomic uint32_t wd_gpu_wait;  /* open ProxySteps the kernel still needs (data to post/take) */
  _Atomic uint32_t wd_gpu;       /* WD_GPU_* bits */
  _Atomic uint64_t wd_reached_ns; /* ground truth: when the start event was first seen complete */
  _Atomic int32_t wd_proxy_tid;  /* thread that last drove its proxy-level children */
  /* Any event: its state and value as the last scan saw them (a start resets it): a state that
   * stays in the slot is dated by the scan that first sees it (stall.c, track.h). */
  _Atomic uint64_t wd_seen;
  _Atomic(struct wd_event *) root;   /* root operation this event progresses, NULL if none */
  struct wd_event *parent;            /* parent slot we hold a reference on, NULL if none */
  struct wd_context *ctx;             /* owning context; NULL for detached events */
  /* Where its records go (set at start); atomic because a stale handle's state may read it
   * while the slot is restarted. */
  _Atomic(struct wd_ring *) ring;
  struct wd_pool *pool;               /* immutable */
  uint32_t slot_id;                   /* immutable */
} __attribute__((aligned(WD_EVENT_ALIGN))) wd_event;

/* Four slots per 1 KiB: the handle check's modulo is a mask. */
_Static_assert(sizeof(wd_event) == 256, "an event slot is 256 bytes");

#define WD_LIFE(refs, open) ((uint64_t)(uint32_t)(refs) | ((uint64_t)(uint32_t)(open) << 32))
static inline uint32_t wd_life_refs(uint64_t life) { return (uint32_t)life; }
static inline uint32_t wd_life_open(uint64_t life) { return (uint32_t)(life >> 32); }
static inline uint32_t wd_event_refs(const wd_event *ev) {
  return wd_life_refs(atomic_load_explicit(&ev->life, memory_order_relaxed));
}
static inline uint32_t wd_event_open(const wd_event *ev) {
  return wd_life_open(atomic_load_explicit(&ev->life, memory_order_relaxed));
}

/* Live tracked children, derived from the reference count (self while open, the hold, the
 * children): keeping a separate counter would cost two more atomic operations per child. */
static inline uint32_t wd_event_children_live(wd_event *ev) {
  uint64_t life = atomic_load_explicit(&ev->life, memory_order_relaxed);
  uint32_t refs = wd_life_refs(life);
  uint32_t own = (wd_life_open(life) != 0) + atomic_load_explicit(&ev->hold, memory_order_relaxed);
  return refs > own ? refs - own : 0;
}

/* Fields of the start record of a live slot, read with one atomic load (the slot may be reused
 * meanwhile: callers validate with the seq word or the handle's tag). */
static inline unsigned wd_event_type(const wd_event *ev) {
  return wd_recw_type(__atomic_load_n(&ev->startw[WD_RECW_TAGS], __ATOMIC_RELAXED));
}
static inline unsigned wd_event_flags(const wd_event *ev) {
  return wd_recw_flags(__atomic_load_n(&ev->startw[WD_RECW_TAGS], __ATOMIC_RELAXED));
}
static inline uint64_t wd_event_raw(const wd_event *ev) {
  return __atomic_load_n(&ev->startw[WD_RECW_RAW], __ATOMIC_RELAXED);
}

static inline void *wd_event_handle(wd_event *ev) {
  return (void *)((uintptr_t)ev | (atomic_load_explicit(&ev->tag, memory_order_relaxed) & WD_TAG_MASK));
}

/* The slot a value NCCL handed back (a handle, a parentObj) points at, whatever its tag, or NULL
 * when it is not a slot of ours: nothing else is ever dereferenced. */
static inline wd_event *wd_event_slot_of(const void *h) {
  return (wd_event *)wd_arena_slot_at((uintptr_t)h & ~(uintptr_t)WD_TAG_MASK, sizeof(wd_event));
}

/* Whether slot ev (ours, from wd_event_slot_of) is in the incarnation handle h names. The tag
 * alone decides: it moves on when a slot is freed or retired, so a handle NCCL was given stops
 * matching then. What it does not catch (a free slot named by a forged handle, or one from 64
 * incarnations ago) is harmless: a stop or a reference needs open or refs set, which a free slot
 * has not, and a state stored there is overwritten when the slot is next allocated. */
static inline int wd_event_matches(const wd_event *ev, const void *h) {
  uint32_t tag = (uint32_t)((uintptr_t)h & WD_TAG_MASK);
  return (atomic_load_explicit(&ev->tag, memory_order_acquire) & WD_TAG_MASK) == tag;
}

/* Whether h names a slot of ours in its current incarnation; *ev receives that slot. A flag and
 * an out-pointer rather than a pointer or NULL: the hot path's callers then branch once, on the
 * checks themselves, not again on the result. */
static inline int wd_event_lookup(const void *h, wd_event **ev) {
  uintptr_t a = (uintptr_t)h & ~(uintptr_t)WD_TAG_MASK;
  if (!wd_arena_holds(a, sizeof(wd_event))) return 0;
  *ev = (wd_event *)a;
  return wd_event_matches(*ev, h);
}

/* The slot a handle names, or NULL when the handle is NULL, not ours, or stale. */
static inline wd_event *wd_event_from_handle(void *h) {
  wd_event *ev = wd_event_slot_of(h);
  return ev && wd_event_matches(ev, h) ? ev : NULL;
}

#endif
