/*
 * The flight-recorder record: fixed size, no pointers, decodable by a program that was never
 * attached to the process (strings are ids into the string table, events are slot ids).
 */
#ifndef WD_RECORD_H
#define WD_RECORD_H

#include <stddef.h>
#include <stdint.h>

/* Event types: the bit index of NCCL's type bit, so type = ctz(bit). */
enum {
  WD_T_GROUP = 0,
  WD_T_COLL = 1,
  WD_T_P2P = 2,
  WD_T_PROXYOP = 3,
  WD_T_PROXYSTEP = 4,
  WD_T_PROXYCTRL = 5,
  WD_T_KERNELCH = 6,
  WD_T_NETPLUGIN = 7,
  WD_T_GROUPAPI = 8,
  WD_T_COLLAPI = 9,
  WD_T_P2PAPI = 10,
  WD_T_KERNELLAUNCH = 11,
  WD_T_CECOLL = 12,
  WD_T_CESYNC = 13,
  WD_T_CEBATCH = 14,
  WD_T_KERNELPHASE = 15, /* v7: a kernel channel's phase (initial_sync, compute, final_sync) */
  WD_T_COUNT = 16,
  WD_T_UNKNOWN = 255
};

/* A span is a child's whole life in one record, written at its stop: ts is the stop, raw the
 * start (WD_F_SPAN events, whose start record stays in their slot). */
enum { WD_PH_START = 0, WD_PH_STATE = 1, WD_PH_STOP = 2, WD_PH_SPAN = 3 };

/* NCCL's ProxyStep state ids the watchdog reasons about (v4-v6 share them). */
enum {
  WD_ST_SEND_GPU_WAIT = 8,   /* buffer offered to the kernel, waiting for its data */
  WD_ST_SEND_WAIT = 9,       /* isend posted */
  WD_ST_RECV_WAIT = 10,      /* irecv posted, waiting for the peer's data */
  WD_ST_RECV_FLUSH_WAIT = 11,
  WD_ST_RECV_GPU_WAIT = 12,  /* data handed to the kernel, waiting for it to be consumed */
  WD_ST_SEND_PEER_WAIT = 20, /* the kernel's data is ready, waiting for the peer (v4+) */
};

enum {
  WD_F_SEND = 1 << 0,          /* ProxyOp isSend */
  WD_F_GRAPH = 1 << 1,         /* graph captured (API events; Coll/P2p when the API parent said so) */
  WD_F_DETACHED = 1 << 2,      /* PXN: context or pid not ours */
  WD_F_ORPHAN = 1 << 3,        /* parent handle was stale or unknown */
  WD_F_ABANDONED = 1 << 4,     /* stop record written by the watchdog, not NCCL */
  WD_F_SPAN = 1 << 5,          /* its start is not in the ring: its stop writes a span */
  WD_F_TAGGED = 1 << 6,        /* v7: raw holds the call's userTag (API, Coll, P2p, CeColl) */
  WD_F_SYMCOLL = 1 << 7,       /* v7: Coll of a symmetric-memory kernel (isSymColl) */
};

#define WD_SLOT_NONE 0xffffffffu    /* no parent */
#define WD_SLOT_FOREIGN 0xfffffffeu /* parent lives in another process or is not ours */
/* Bits of a slot id: which pool the slot belongs to. */
#define WD_SLOT_DETACHED_BIT 0x80000000u /* the process-wide detach pool */
#define WD_SLOT_PROXY_BIT 0x40000000u    /* a context's proxy-level pool */

/*
 * Field use per type (a = `a`, c = `count`, p = `peer`, n = `n`):
 *   Coll/CeColl: a=seqNumber c=count p=root; func dtype algo proto nChannels nWarps
 *   P2p:         c=count p=peer; func dtype nChannels
 *   CollApi:     c=count p=root; func dtype      P2pApi: c=count; func dtype
 *   GroupApi:    n=groupDepth
 *   ProxyOp:     pid n=nSteps c=chunkSize p=peer channel; flags SEND
 *   ProxyStep:   n=step; stop: c=last transSize, state=last state (no state records: track.h),
 *                a=when it entered SendWait (0 or outside the span: never; a send's network part)
 *   KernelCh:    a=pTimer channel (GPU start time); stop: c=GPU stop time from KernelChStop
 *   ProxyCtrl:   state records: n=appendedProxyOps
 *   NetPlugin:   a=id
 *   CeSync:      n=nRanks     CeBatch: n=numOps c=totalBytes
 *   detached:    raw = parentObj value as NCCL passed it (for correlation across processes)
 *   span:        raw = start time (ProxyStep, KernelCh, ProxyOp under a live parent)
 */
typedef struct wd_record {
  uint64_t turn;  /* publication word: 2*ticket+1 while written, 2*ticket+2 once complete */
  uint64_t ts_ns; /* CLOCK_MONOTONIC */
  uint64_t a;
  uint64_t count;
  uint64_t raw;
  uint32_t slot;   /* event slot id */
  uint32_t parent; /* parent slot id, WD_SLOT_NONE or WD_SLOT_FOREIGN */
  int32_t tid;
  int32_t peer;
  int32_t n;
  int32_t pid;
  uint8_t phase;
  uint8_t type;
  uint8_t state; /* NCCL state id for WD_PH_STATE, last state otherwise */
  uint8_t flags;
  uint8_t func; /* string table ids */
  uint8_t dtype;
  uint8_t algo;
  uint8_t proto;
  uint8_t channel;
  uint8_t nChannels;
  uint8_t nWarps;
  uint8_t rsv0;
  uint32_t check; /* set by the ring: hash of the rest, so a reader can tell a record two writers
                     of different laps wrote at once (a writer preempted for a whole lap) */
} wd_record;

_Static_assert(sizeof(wd_record) == 80, "ring record is 80 bytes");
/* Word positions for code that reads a record word by word with atomics (a live event's start
 * record): the word holding raw, and the word holding phase, type, state and flags. */
#define WD_RECW_RAW (offsetof(wd_record, raw) / sizeof(uint64_t))
#define WD_RECW_TAGS (offsetof(wd_record, phase) / sizeof(uint64_t))
_Static_assert(offsetof(wd_record, raw) % 8 == 0 && offsetof(wd_record, phase) % 8 == 0 &&
                   offsetof(wd_record, type) == offsetof(wd_record, phase) + 1 &&
                   offsetof(wd_record, flags) == offsetof(wd_record, phase) + 3,
               "phase/type/flags are bytes 0, 1 and 3 of one word");
#define WD_RECORD_WORDS (sizeof(wd_record) / sizeof(uint64_t))
/* The words the hot path rewrites when it turns a start record into a state or stop record. */
#define WD_RECW_TS (offsetof(wd_record, ts_ns) / sizeof(uint64_t))
#define WD_RECW_A (offsetof(wd_record, a) / sizeof(uint64_t))
#define WD_RECW_COUNT (offsetof(wd_record, count) / sizeof(uint64_t))
#define WD_RECW_TID (offsetof(wd_record, tid) / sizeof(uint64_t)) /* tid: its low half */
#define WD_RECW_N (offsetof(wd_record, n) / sizeof(uint64_t))     /* n: its low half */
_Static_assert(offsetof(wd_record, tid) % 8 == 0 && offsetof(wd_record, n) % 8 == 0 &&
                   offsetof(wd_record, state) == offsetof(wd_record, phase) + 2,
               "tid and n open their words; state is byte 2 of the tags word");
/* The tags word with a new phase and state (bytes 0 and 2). */
static inline uint64_t wd_recw_retag(uint64_t tags, unsigned phase, unsigned state) {
  return (tags & ~(uint64_t)0xff00ff) | phase | ((uint64_t)(state & 0xffu) << 16);
}
static inline uint64_t wd_recw_low32(uint64_t w, uint32_t v) { return (w & ~(uint64_t)0xffffffff) | v; }

/* Words of a record built in registers: two 32-bit fields in one word (low, high), and the
 * tags word from its bytes. */
#define WD_RECW_SLOT (offsetof(wd_record, slot) / sizeof(uint64_t))
#define WD_RECW_CHAN (offsetof(wd_record, channel) / sizeof(uint64_t))
_Static_assert(offsetof(wd_record, slot) % 8 == 0 && offsetof(wd_record, parent) == offsetof(wd_record, slot) + 4 &&
                   offsetof(wd_record, peer) == offsetof(wd_record, tid) + 4 &&
                   offsetof(wd_record, pid) == offsetof(wd_record, n) + 4 &&
                   offsetof(wd_record, channel) % 8 == 0,
               "slot/parent, tid/peer and n/pid share a word; channel opens the last one");
static inline uint64_t wd_recw_pair(uint32_t lo, uint32_t hi) { return lo | ((uint64_t)hi << 32); }
static inline uint64_t wd_recw_tags(unsigned phase, unsigned type, unsigned state, unsigned flags) {
  return phase | (type << 8) | ((uint64_t)state << 16) | ((uint64_t)flags << 24);
}

/* A record seen as the words the ring stores (union punning is defined in C). */
typedef union wd_recw {
  wd_record r;
  uint64_t w[WD_RECORD_WORDS];
} wd_recw;

/* The last word's high half is the record's check: the ticket plus the other payload words,
 * spread by one multiply. Two writers a whole lap apart (one preempted between taking its ticket
 * and finishing) can be inside one slot at once and leave a mix of both records behind a
 * complete-looking turn; the check tells the reader (and a decoder of a ring file left by a dead
 * process tells torn records the same way). A sum, not a chain of rotations: one add per word the
 * writer already holds in a register, and one changed word always changes it. */
static inline uint32_t wd_record_check_of(uint64_t sum) {
  return (uint32_t)((sum * 0x9e3779b97f4a7c15ull) >> 32);
}
static inline uint32_t wd_record_check(uint64_t ticket, const uint64_t *w) {
  uint64_t h = ticket;
#pragma GCC unroll 16
  for (unsigned i = 1; i < WD_RECORD_WORDS - 1; i++) h += w[i];
  return wd_record_check_of(h + (uint32_t)w[WD_RECORD_WORDS - 1]);
}

/* Fields of the WD_RECW_TAGS word (little-endian, as the record layout above). */
static inline unsigned wd_recw_type(uint64_t tags) { return (unsigned)(tags >> 8) & 0xffu; }
static inline unsigned wd_recw_flags(uint64_t tags) { return (unsigned)(tags >> 24) & 0xffu; }

const char *wd_type_name(unsigned type);   /* "Coll", "ProxyStep", ... "Unknown" */
const char *wd_state_name(unsigned state); /* "RecvWait", "KernelChStop", ... "State<n>" */
const char *wd_phase_name(unsigned phase); /* "start", "state", "stop", "span" */

#endif
