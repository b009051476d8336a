/*
 * A communicator's flight recorder in a file mapped MAP_SHARED (node-local, /dev/shm by default):
 * the kernel keeps the pages when the process dies, whatever killed it, so a decoder that needs
 * nothing from the dead process can read the rings afterwards (nccl-watchdog-analyze).
 *
 * Layout (little-endian, as written by the machine): a 4 KiB header, the string table copy
 * (WD_RF_STRINGS x WD_RF_STRLEN bytes, filled when the file is created and whenever the process
 * interns a string), the operation ring, the proxy ring (records of
 * record.h, each checked by its own turn word and wd_record_check). The header's identity part
 * is written once, at communicator init, and protected by ident_sum; its live part (sequence
 * counters, the time of the last refresh) is rewritten by the watchdog each poll under a
 * generation word and protected by live_sum. A decoder trusts nothing it cannot check.
 *
 * This header is also the file format's definition for the decoder (tools/analyze).
 */
#ifndef WD_RINGFILE_H
#define WD_RINGFILE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "flightrec/record.h"

#define WD_RF_MAGIC "NCCLWDRF"
/* 2: the record check became a sum (record.h); 3: the header lists the proxy-level events open
 * at the last refresh (their starts are in no ring: record.h, spans). A decoder reads both. */
#define WD_RF_VERSION 3u
#define WD_RF_HEADER_BYTES 4096u
#define WD_RF_STRINGS 256u
#define WD_RF_STRLEN 32u
#define WD_RF_SEQS 32u
#define WD_RF_DONE_WORDS 48u /* completion words (done[]): functions that fit, probed from their id */
#define WD_RF_DONE_MAGIC 0x454e4f4444465257ull /* "WRFDDONE" */

typedef struct wd_rf_seq {
  uint8_t func; /* index into the file's string table */
  uint8_t ce;   /* 1: a CE collective counter (numbered apart) */
  uint8_t rsv[6];
  int64_t enqueued, completed;
} wd_rf_seq;

#define WD_RF_FATAL_FRAMES 48
typedef struct wd_rf_fatal {
  int32_t signo, code, tid, nframes;
  uint64_t addr;            /* si_addr */
  uint64_t wall_ns, mono_ns;
  uint64_t frames[WD_RF_FATAL_FRAMES]; /* return addresses, frame 0 where it happened */
} wd_rf_fatal;

/* A proxy-level event open at the last refresh (ProxyOp, ProxyStep, KernelCh): its start record's
 * fields and where it was. */
#define WD_RF_OPEN_EVENTS 24u
typedef struct wd_rf_open_ev {
  uint8_t type, state, channel, flags;
  uint32_t slot, parent;
  int32_t n, peer, pid, tid; /* n: a ProxyStep's step, a ProxyOp's nSteps */
  uint32_t steps_done;       /* ProxyOp */
  uint64_t a, count, trans;  /* a: KernelCh pTimer; count: ProxyOp chunkSize; trans: last value */
  uint64_t start_ns, last_ns;
} wd_rf_open_ev;

typedef struct wd_rf_header {
  /* Fixed at creation. */
  char magic[8];
  uint32_t version, header_bytes;
  uint32_t record_bytes, ring_cap, proxy_ring_cap;
  /* Version 3: records of each ring backed at creation (WD_RF_INITIAL_RECORDS), within which its
   * records wrap until the watchdog allocates it whole (ring.h). 0 in version 2. */
  uint32_t wrap_records;
  uint64_t file_bytes, strtab_off, ring_off, proxy_ring_off;
  /* Identity, at communicator init. */
  int32_t pid, rank, nranks, nnodes, abi, cuda_dev;
  int32_t global_rank; /* the job's RANK (environment), -1 when unset */
  /* How often its watchdog rewrites the live part (NCCL_WATCHDOG_POLL), 0 where unknown (files
   * written before it was recorded): how long a reader waits before it calls the file dead. */
  uint32_t poll_ms;
  uint64_t comm_id;
  /* Names the process incarnation with the pid: its start by the kernel's account (boot time
   * plus its start tick, as /proc tells anyone on the machine) where it was set, else the
   * first ring file's creation. */
  uint64_t process_start_wall_ns;
  uint64_t bind_wall_ns, bind_mono_ns; /* record stamps are CLOCK_MONOTONIC: their wall time */
  char host[64];
  char comm_name[128];
  char gpu_uuid[48];
  uint64_t ident_sum; /* FNV-1a 64 of every byte above */
  /* Live, refreshed by the watchdog. */
  uint64_t live_gen;  /* odd while being rewritten */
  uint64_t live_mono_ns, live_wall_ns;
  int64_t p2p_enqueued, p2p_completed;
  uint32_t nseq, finalized;
  wd_rf_seq seq[WD_RF_SEQS];
  uint64_t live_sum; /* FNV-1a 64 of live_mono_ns .. seq[] */
  /* Written once by a fatal-signal handler (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT). */
  wd_rf_fatal fatal;
  uint64_t fatal_sum; /* FNV-1a 64 of fatal */
  /* Version 3, refreshed with the live part (under live_gen): the open proxy-level events, the
   * longest without progress first when there are more than fit. */
  uint32_t nopen, open_total;
  wd_rf_open_ev open[WD_RF_OPEN_EVENTS];
  uint64_t open_sum; /* FNV-1a 64 of nopen .. open[] */
  /* Written at creation (zero in files of earlier plugins): the machine's boot and the PID
   * namespace pid belongs to, so that a reader asks /proc about pid only where it names the same
   * process table (containers on one machine each number their processes from 1). */
  char boot_id[40];
  uint64_t pidns_ino; /* inode of /proc/self/ns/pid */
  uint64_t where_sum; /* FNV-1a 64 of boot_id .. pidns_ino */
  /* Set at creation (zero in files of earlier plugins): WD_RF_DONE_MAGIC where done[] is kept. */
  uint64_t done_magic;
  /* Kept by whichever thread completes an operation, as it completes: the live part is rewritten
   * once a watchdog poll, so a process killed between two polls would read several operations
   * behind. One word per function (wd_rf_done_put): its string id, CeColl or not, and the
   * newest completed seqNumber; the last word counts completed P2p operations. Each word is
   * stored whole; no checksum. */
  uint64_t done[WD_RF_DONE_WORDS];
  uint64_t p2p_done;
  /* The newest job stall episode its watchdog began to answer (wd_ringfile_note_answer), stored
   * before that dump is written, which can take seconds on a loaded node with no refresh of the
   * live part meanwhile: the node's poller then knows the watchdog is not silent. 0: none yet
   * (and in files of earlier plugins). */
  uint32_t answered_k, answered_rsv;
} wd_rf_header;

_Static_assert(sizeof(wd_rf_header) <= WD_RF_HEADER_BYTES, "ring file header fits its page");

static inline uint64_t wd_rf_fnv(const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}
static inline uint64_t wd_rf_ident_sum(const wd_rf_header *h) {
  return wd_rf_fnv(h, offsetof(wd_rf_header, ident_sum));
}
static inline uint64_t wd_rf_live_sum(const wd_rf_header *h) {
  return wd_rf_fnv(&h->live_mono_ns, offsetof(wd_rf_header, live_sum) - offsetof(wd_rf_header, live_mono_ns));
}
static inline uint64_t wd_rf_open_sum(const wd_rf_header *h) {
  return wd_rf_fnv(&h->nopen, offsetof(wd_rf_header, open_sum) - offsetof(wd_rf_header, nopen));
}
static inline uint64_t wd_rf_where_sum(const wd_rf_header *h) {
  return wd_rf_fnv(h->boot_id, offsetof(wd_rf_header, where_sum) - offsetof(wd_rf_header, boot_id));
}
/* Whether a file's header names the machine boot and PID namespace given (a reader's own): its
 * pid then names a process of the reader's /proc, whatever host name it took. Never for a file
 * that does not say (an older plugin's) or whose where_sum fails. */
static inline int wd_rf_of_place(const wd_rf_header *h, const char *boot_id, uint64_t pidns_ino) {
  return boot_id[0] && pidns_ino && h->where_sum == wd_rf_where_sum(h) && h->boot_id[0] &&
         strncmp(h->boot_id, boot_id, sizeof h->boot_id) == 0 && h->pidns_ino == pidns_ino;
}
/* A done[] word: bits 63-56 the function's string id (never 0), bit 55 CeColl, bits 54-0 the
 * newest completed seqNumber plus one. */
#define WD_RF_DONE_SEQ_MASK ((1ull << 55) - 1)
static inline uint64_t wd_rf_done_key(unsigned func, int ce) {
  return ((uint64_t)(func & 0xffu) << 56) | ((uint64_t)(ce != 0) << 55);
}
/* Record that seq of func completed (never lowers a word; lock-free, any thread). A function
 * whose probe finds 4 other functions' words is not kept: readers fall back on the live part. */
static inline void wd_rf_done_put(uint64_t *done, unsigned func, int ce, int64_t seq) {
  if (!done || !func || seq < 0) return;
  uint64_t key = wd_rf_done_key(func, ce), val = key | (((uint64_t)seq + 1) & WD_RF_DONE_SEQ_MASK);
  unsigned at = (func * 2u + (ce != 0)) % WD_RF_DONE_WORDS;
  for (unsigned i = 0; i < 4; i++, at = (at + 1) % WD_RF_DONE_WORDS) {
    uint64_t w = __atomic_load_n(&done[at], __ATOMIC_RELAXED);
    while (w == 0 || (w & ~WD_RF_DONE_SEQ_MASK) == key) {
      if (w >= val) return;
      if (__atomic_compare_exchange_n(&done[at], &w, val, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return;
    }
  }
}
/* Record that n P2p operations have completed (never lowers the count; any thread). */
static inline void wd_rf_done_p2p(uint64_t *count, uint64_t n) {
  uint64_t w = __atomic_load_n(count, __ATOMIC_RELAXED);
  while (w < n && !__atomic_compare_exchange_n(count, &w, n, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}
/* The newest completed seq of func in a file's done[] (-1 when not kept there). */
static inline int64_t wd_rf_done_get(const uint64_t *done, unsigned func, int ce) {
  uint64_t key = wd_rf_done_key(func, ce);
  unsigned at = (func * 2u + (ce != 0)) % WD_RF_DONE_WORDS;
  for (unsigned i = 0; i < 4; i++, at = (at + 1) % WD_RF_DONE_WORDS) {
    uint64_t w = done[at];
    if (w == 0) return -1;
    if ((w & ~WD_RF_DONE_SEQ_MASK) == key) return (int64_t)(w & WD_RF_DONE_SEQ_MASK) - 1;
  }
  return -1;
}
static inline uint64_t wd_rf_file_bytes(uint32_t ring_cap, uint32_t proxy_ring_cap) {
  return WD_RF_HEADER_BYTES + (uint64_t)WD_RF_STRINGS * WD_RF_STRLEN +
         ((uint64_t)ring_cap + proxy_ring_cap) * sizeof(wd_record);
}

/* ---- the writer's side (the plugin) ---- */

typedef struct wd_ringfile {
  void *base; /* the mapping, NULL when none */
  uint64_t bytes;
  char path[512];
} wd_ringfile;

/* The process's start on the wall clock by the kernel's account (base/host.h,
 * wd_process_identity), the machine's boot id and the inode of the process's PID namespace,
 * written into every ring file's header: a reader on the same machine, in the same namespace,
 * can then tell the process that wrote a file from another with its pid (0 or "": not known).
 * Set before the first ring file. */
void wd_ringfile_set_process(uint64_t start_wall_ns, const char *boot_id, uint64_t pidns_ino);
/* Create dir (0700, also its parent) and a new file in it named
 * <host>-<pid>-<process start s>-<n>.ring (O_CREAT|O_EXCL|O_NOFOLLOW, 0600), sized for the two
 * rings and mapped MAP_SHARED. The rings' records live in it. Returns 0, or -1 (errno) with f
 * empty: the caller keeps its rings in memory instead. */
int wd_ringfile_create(wd_ringfile *f, const char *dir, const char *host, uint32_t ring_cap,
                       uint32_t proxy_ring_cap);
wd_record *wd_ringfile_ring(const wd_ringfile *f, int proxy);
/* Records of each ring allocated at creation: a communicator that never carries traffic costs
 * its header, string table and these (about 32 KiB of node memory), not its whole rings. */
#define WD_RF_INITIAL_RECORDS 128u
/* Allocate the file's blocks for records [0, upto) of one ring (posix_fallocate, so a full
 * /dev/shm fails here and not with SIGBUS on the hot path). 0, or -1 (errno). */
int wd_ringfile_reserve(const wd_ringfile *f, int proxy, uint32_t upto);
wd_rf_header *wd_ringfile_header(const wd_ringfile *f);
/* Clears the file's completion words (done[], p2p_done) for a new communicator and marks them
 * kept; returns its header, NULL when there is no file. */
wd_rf_header *wd_ringfile_done_reset(wd_ringfile *f);
/* Identity fields are set by the caller, then sealed (checksum). */
void wd_ringfile_seal_identity(wd_ringfile *f);
/* Begin / end a rewrite of the live part. */
void wd_ringfile_live_begin(wd_ringfile *f);
void wd_ringfile_live_end(wd_ringfile *f);
/* A string the process just interned (strtab.c): written into every open ring file at once, so
 * a process killed before the watchdog's next refresh still names its functions. */
void wd_ringfile_note_string(unsigned id, const char *text);
/* From a fatal-signal handler: copy f into the header of every open ring file and seal it.
 * Async-signal-safe (no lock, no allocation). */
void wd_ringfile_note_fatal(const wd_rf_fatal *f);
/* The watchdog begins to answer job stall episode k: noted in every open ring file. */
void wd_ringfile_note_answer(unsigned k);
/* Unmap; unlink unless keep. Safe on an empty f. */
void wd_ringfile_close(wd_ringfile *f, int keep);

#endif
