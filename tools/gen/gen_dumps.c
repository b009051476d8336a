/*
 * gen_dumps: writes one synthetic dump per rank (docs/dump-format.md) for a job in a chosen
 * state, for the analyzer's tests and its scale benchmark.
 *
 *   gen_dumps OUTDIR --ranks N --scenario healthy|missing-rank|not-entered|mismatch|
 *             network-stall|wrapped [--ring R] [--comms C] [--victim K]
 *   gen_dumps OUTDIR --layout TPxPPxDP --scenario healthy|job-root|job-deadlock|p2p-mismatch|
 *             dead-link|dead-host|straggler|crashed|vanished [--ring R] [--victim G]
 *
 * One communicator per job (first form): rank r lives on host node<r/8> with pid 10000+r;
 * communicator 0 ("default_pg") carries the scenario, the others are healthy. The victim
 * (default 3, or N-1 when N <= 3) is the rank the scenario is about: it never entered AllReduce
 * seq 88412 (not-entered; missing-rank writes no dump for it), is in AllGather instead
 * (mismatch), or its receive from rank victim-1 on channel 1 stalled first (network-stall).
 * wrapped is a healthy job whose odd ranks have a ring half as large, with extra records per
 * operation, so their history starts later.
 *
 * A 3-D parallel job (second form, Megatron order): global rank g = (d*PP + p)*TP + t, eight
 * ranks per host; every rank is in a tensor- ("tp<p>_<d>"), a pipeline- ("pp<t>_<d>") and a
 * data-parallel ("dp<t>_<p>") communicator. The victim G (default: the first rank of the middle
 * pipeline stage) is the one the scenario is about (docs/analyzer.md, "Job verdicts"):
 *   job-root      G is stuck outside NCCL; its pipeline neighbours wait on it in Send/Recv, their
 *                 data-parallel groups and G's tensor group wait in AllReduce
 *   job-deadlock  G, its tp peer W, W's dp peer X and X's tp peer Y each wait in a
 *                 communicator the next one never entered: a cycle of four
 *   p2p-mismatch  in G's pipeline: stage p-1 sends to p, p receives from p+1, p+1 from p
 *   dead-link     in G's dp ring, the link from its predecessor to G carries nothing
 *   dead-host     every rank of G's host has a dead link from its dp predecessor
 *   straggler     healthy, but G enters every collective 2 s after the others
 *   crashed       job-root, but G left only a post-mortem dump; vanished: G left no dump
 *
 * Dead links by the steps' states (first form; a ring of N ranks, 8 per host, every rank stalled
 * within one poll of the others, so time tells nothing):
 *   link-tick     the link from rank K-1 to K (channel 1) is dead: K-1's send has steps 4-7
 *                 handed to the network (SendWait), K has received nothing for step 4
 *                 (RecvWait); every other rank waits on its own GPU (SendGPUWait) and for data
 *                 from upstream (RecvWait), as a ring does behind a dead link (transport/net.cc)
 *   pxn-link      the same with K on the next host and K-1's send going through PXN: the
 *                 proxy of rank K-2 (same host, another process) progresses it, so K-1's dump
 *                 has no send ProxyOp and K-2's dump holds it as a detached ProxyOp with
 *                 K-1's pid and originating rank (src/plugin/profiler.cc, ProxyOp descriptor)
 *   pxn-p2p       only ranks K-1 and K are stuck: K-1 in a Send to K through K-2's PXN proxy,
 *                 K in the matching Recv, nothing received
 * --same-pid gives every process pid 4242 (PID namespaces): only the originating rank tells
 * which process a PXN send belongs to.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum {
  SC_HEALTHY, SC_MISSING, SC_NOT_ENTERED, SC_MISMATCH, SC_NET_STALL, SC_WRAPPED,
  /* 3-D jobs only */
  SC_JOB_ROOT, SC_JOB_DEADLOCK, SC_P2P_MISMATCH, SC_DEAD_LINK, SC_DEAD_HOST, SC_STRAGGLER,
  SC_CRASHED, SC_VANISHED,
  /* one communicator again: dead links by state */
  SC_LINK_TICK, SC_PXN_LINK, SC_PXN_P2P, SC_COUNT
};
static int is_3d(int sc) { return sc >= SC_JOB_ROOT && sc <= SC_VANISHED; }
static int by_state(int sc) { return sc >= SC_LINK_TICK; }
static const char *const g_scenarios[SC_COUNT] = {
    "healthy",      "missing-rank", "not-entered", "mismatch",     "network-stall",
    "wrapped",      "job-root",     "job-deadlock", "p2p-mismatch", "dead-link",
    "dead-host",    "straggler",    "crashed",     "vanished",     "link-tick",
    "pxn-link",     "pxn-p2p"};

enum { T_GROUPAPI, T_COLLAPI, T_COLL, T_KERNELCH, T_PROXYOP, T_PROXYSTEP, T_P2PAPI, T_P2P };
static const char *const g_types[] = {"GroupApi", "CollApi",   "Coll",   "KernelCh",
                                      "ProxyOp",  "ProxyStep", "P2pApi", "P2p"};
static const char *const g_phases[] = {"start", "state", "stop", "span"};

#define SEQ_AR 88412 /* the AllReduce the hung scenarios are stuck in (comm 0) */
#define SEQ_AG 902   /* next AllGather */
#define COUNT 1048576
#define BASE_WALL_NS 1795316729123456789ull
#define BASE_MONO_NS 5000000000000ull
#define OP_NS 1000000 /* one collective per millisecond */

typedef struct opts {
  const char *out;
  int ranks, scenario, ring, comms, victim;
  int tp, pp, dp; /* 3-D layout, 0 when one communicator per job */
  int same_pid;   /* every process has pid 4242 (PID namespaces) */
} opts;

static int pid_of(const opts *o, int rank) { return o->same_pid ? 4242 : 10000 + rank; }

typedef struct rec {
  int64_t t;
  int ph, type, slot, parent, tid;
  int func; /* 0 AllReduce, 1 AllGather, 2 Send, 3 Recv */
  int64_t seq;
  int peer, channel, is_send, step;
  const char *state; /* a state record's state, a span's last state */
  int64_t dur;       /* a span's */
} rec;

typedef struct recbuf {
  rec *r;
  size_t n, cap;
} recbuf;

/* What one rank shows for one communicator. */
typedef struct rank_view {
  int rank, comm;     /* communicator rank, communicator index in the dump */
  int grank;          /* global rank: host, pid */
  int nranks;
  uint64_t id;
  char name[32];
  int stuck;          /* in flight in the stalled operation */
  int stuck_func;     /* 0 AllReduce, 1 AllGather */
  int64_t stuck_seq;
  int p2p;            /* the stuck operation is a Send (p2p 1) or Recv (p2p 2) with p2p_peer */
  int p2p_peer;
  int64_t ar_done, ag_done; /* last completed seqs */
  double since_ms;    /* since progress of the stuck operation */
  int wait_peer, wait_channel, wait_step, wait_send;
  int64_t t_end;      /* time of the last completed operation, relative to the dump */
  int64_t lag_ns;     /* straggler: it enters every operation this much later */
  int ring_cap, extra_records;
  /* dead links by state: the stuck op's send (to the next rank) and recv (from the previous)
   * on channel 1, by their open steps' states; no_send: its send goes through PXN */
  int by_state, no_send;
  const char *send_state, *recv_state;
  int send_lo, send_hi, recv_step;
  int pid;
} rank_view;

static const char *func_name(int f) {
  static const char *const names[] = {"AllReduce", "AllGather", "Send", "Recv"};
  return names[f & 3];
}

static void push(recbuf *b, rec r) {
  if (b->n == b->cap) {
    b->cap = b->cap ? b->cap * 2 : 4096;
    b->r = realloc(b->r, b->cap * sizeof(*b->r));
    if (!b->r) {
      perror("gen_dumps");
      exit(1);
    }
  }
  b->r[b->n++] = r;
}

/* ---- records ---- */

static void print_rec(FILE *f, const rec *r) {
  fprintf(f, "{\"t\":%" PRId64 ",\"ph\":\"%s\",\"type\":\"%s\",\"slot\":%d,", r->t, g_phases[r->ph],
          g_types[r->type], r->slot);
  if (r->parent < 0) fprintf(f, "\"parent\":null,");
  else fprintf(f, "\"parent\":%d,", r->parent);
  fprintf(f, "\"tid\":%d", r->tid);
  if (r->ph == 1) fprintf(f, ",\"state\":\"%s\"", r->state);
  if (r->ph == 3) {
    fprintf(f, ",\"dur\":%" PRId64, r->dur);
    if (r->state) fprintf(f, ",\"lastState\":\"%s\"", r->state);
  }
  {
    switch (r->type) {
    case T_GROUPAPI: fprintf(f, ",\"groupDepth\":1"); break;
    case T_COLLAPI:
      fprintf(f, ",\"func\":\"%s\",\"count\":%d,\"datatype\":\"ncclFloat32\",\"root\":0",
              func_name(r->func), COUNT);
      break;
    case T_COLL:
      fprintf(f,
              ",\"func\":\"%s\",\"seq\":%" PRId64 ",\"count\":%d,\"datatype\":\"ncclFloat32\","
              "\"algo\":\"Ring\",\"proto\":\"Simple\",\"root\":0,\"nChannels\":2,\"nWarps\":8",
              func_name(r->func), r->seq, COUNT);
      break;
    case T_P2PAPI:
      fprintf(f, ",\"func\":\"%s\",\"count\":%d,\"datatype\":\"ncclFloat32\"", func_name(r->func),
              COUNT);
      break;
    case T_P2P:
      fprintf(f, ",\"func\":\"%s\",\"count\":%d,\"datatype\":\"ncclFloat32\",\"peer\":%d,"
              "\"nChannels\":1", func_name(r->func), COUNT, r->peer);
      break;
    case T_KERNELCH: fprintf(f, ",\"channel\":%d,\"pTimer\":\"0x1000\"", r->channel); break;
    case T_PROXYOP:
      fprintf(f,
              ",\"pid\":%d,\"channel\":%d,\"peer\":%d,\"nSteps\":8,\"chunkSize\":524288,"
              "\"isSend\":%s",
              r->tid - 7, r->channel, r->peer, r->is_send ? "true" : "false");
      break;
    case T_PROXYSTEP: fprintf(f, ",\"step\":%d", r->step); break;
    }
  }
  if ((r->ph == 1 || (r->ph == 3 && r->state)) && r->type == T_PROXYSTEP) fprintf(f, ",\"transSize\":524288");
  fputc('}', f);
}

static void print_ring(FILE *f, const recbuf *b, int cap, uint64_t written) {
  size_t first = b->n > (size_t)cap ? b->n - (size_t)cap : 0;
  uint64_t lost = written > (uint64_t)cap ? written - (uint64_t)cap : 0;
  fprintf(f, "{\"capacity\":%d,\"written\":%" PRIu64 ",\"torn\":0,\"lost\":%" PRIu64
             ",\"records\":[",
          cap, written, lost);
  for (size_t i = first; i < b->n; i++) {
    if (i > first) fputc(',', f);
    print_rec(f, &b->r[i]);
  }
  fputs("]}", f);
}

/* One completed collective: its op-level and proxy-level records. */
static void gen_op(const rank_view *v, recbuf *ops, recbuf *px, int64_t tb,
                   int func, int64_t seq, int k) {
  int pid = 10000 + v->grank, main = pid, prog = pid + 7;
  int api = 20 + k % 40, coll = 100 + k % 40, sop = 200 + (k % 40) * 2, rop = sop + 1;
  int step = 400 + k % 40, kch = 500 + k % 40;
  int next = (v->rank + 1) % v->nranks, prev = (v->rank + v->nranks - 1) % v->nranks;
  tb += v->lag_ns;
  for (int e = 0; e < v->extra_records; e++)
    push(ops, (rec){tb - 3000 + e, e & 1 ? 2 : 0, T_GROUPAPI, 5, -1, main, 0, 0, 0, 0, 0, 0, 0, 0});
  push(ops, (rec){tb, 0, T_COLLAPI, api, -1, main, func, seq, 0, 0, 0, 0, 0, 0});
  push(ops, (rec){tb + 5000, 2, T_COLLAPI, api, -1, main, func, seq, 0, 0, 0, 0, 0, 0});
  push(ops, (rec){tb + 10000, 0, T_COLL, coll, api, main, func, seq, 0, 0, 0, 0, 0, 0});
  push(ops, (rec){tb + 12000, 2, T_COLL, coll, api, main, func, seq, 0, 0, 0, 0, 0, 0});
  /* Proxy-level events under a live parent: one span each, written at their stop. */
  push(px, (rec){tb + 600000, 3, T_PROXYSTEP, step, rop, prog, 0, 0, 0, 0, 0, 0, "RecvWait", 560000});
  push(px, (rec){tb + 701000, 3, T_KERNELCH, kch, coll, prog, 0, 0, 0, 0, 0, 0, "KernelChStop", 681000});
  push(px, (rec){tb + 750000, 3, T_PROXYOP, sop, coll, prog, 0, 0, next, 0, 1, 0, 0, 720000});
  push(px, (rec){tb + 751000, 3, T_PROXYOP, rop, coll, prog, 0, 0, prev, 0, 0, 0, 0, 720000});
}

/* The stalled operation's records: started, reached the network, never finished. */
static void gen_stuck(const rank_view *v, recbuf *ops, recbuf *px, int64_t tb) {
  int pid = 10000 + v->grank, main = pid;
  int f = v->p2p ? 1 + v->p2p : v->stuck_func;
  int64_t s = v->p2p ? 0 : v->stuck_seq;
  int top = v->p2p ? T_P2P : T_COLL;
  push(ops, (rec){tb, 0, v->p2p ? T_P2PAPI : T_COLLAPI, 60, -1, main, f, s, v->p2p_peer, 0, 0, 0, 0, 0});
  push(ops, (rec){tb + 5000, 2, v->p2p ? T_P2PAPI : T_COLLAPI, 60, -1, main, f, s, 0, 0, 0, 0, 0, 0});
  push(ops, (rec){tb + 10000, 0, top, 150, 60, main, f, s, v->p2p_peer, 0, 0, 0, 0, 0});
  push(ops, (rec){tb + 12000, 2, top, 150, 60, main, f, s, 0, 0, 0, 0, 0, 0});
  /* Its proxy-level events are open: in the open tree, not in the ring (print_inflight). */
  (void)px;
}

/* ---- the open tree of the stalled operation ---- */

/* One ProxyOp of the open tree; the one the rank waits in holds the open step. */
static void print_proxyop(FILE *f, const rank_view *v, int slot, int is_send, int peer, int channel,
                          int waiting, double age, double s) {
  int pid = v->pid ? v->pid : 10000 + v->grank;
  fprintf(f,
          "{\"slot\":%d,\"type\":\"ProxyOp\",\"parentSlot\":150,\"channel\":%d,\"peer\":%d,"
          "\"isSend\":%s,\"nSteps\":8,\"stepsDone\":%d,\"chunkSize\":524288,\"pid\":%d,"
          "\"stopped\":false,\"ageMs\":%.1f,\"sinceProgressMs\":%.1f,\"state\":null,\"children\":[",
          slot, channel, peer, is_send ? "true" : "false", waiting ? v->wait_step : 8, pid, age,
          waiting ? s : s - 1.0);
  if (waiting)
    fprintf(f,
            "{\"slot\":450,\"type\":\"ProxyStep\",\"parentSlot\":%d,\"step\":%d,"
            "\"state\":\"%s\",\"transSize\":0,\"stopped\":false,\"ageMs\":%.1f,"
            "\"sinceProgressMs\":%.1f,\"children\":[]}",
            slot, v->wait_step, is_send ? "SendWait" : "RecvWait", s, s);
  fputs("]},", f);
}

/* A ProxyOp on channel 1 with steps lo..hi open in one state (dead links by state). */
static void print_state_op(FILE *f, int slot, const char *parent, int pid, int origin, int is_send,
                           int peer, int lo, int hi, const char *state, double age, double s) {
  fprintf(f,
          "{\"slot\":%d,\"type\":\"ProxyOp\",\"parentSlot\":%s,\"channel\":1,\"peer\":%d,"
          "\"isSend\":%s,\"nSteps\":8,\"stepsDone\":%d,\"chunkSize\":524288,\"pid\":%d,",
          slot, parent, peer, is_send ? "true" : "false", lo, pid);
  if (origin >= 0) fprintf(f, "\"originRank\":%d,\"detached\":true,\"raw\":\"0x7f00deadbe00\",", origin);
  fprintf(f, "\"stopped\":false,\"ageMs\":%.1f,\"sinceProgressMs\":%.1f,\"state\":null,\"children\":[",
          age, s);
  for (int k = lo; k <= hi; k++)
    fprintf(f,
            "%s{\"slot\":%d,\"type\":\"ProxyStep\",\"parentSlot\":%d,\"step\":%d,\"state\":\"%s\","
            "\"transSize\":0,\"stopped\":false,\"ageMs\":%.1f,\"sinceProgressMs\":%.1f,"
            "\"children\":[]}",
            k > lo ? "," : "", slot + 100 + k, slot, k, state, s, s);
  fputs("]}", f);
}

/* The stuck root's head, up to its children: a P2p with its peer or a Coll with its seq; kch
 * kernel channels announced per channel count, done of them stopped. */
static void print_stuck_head(FILE *f, const rank_view *v, double age, double s, int nch, int done) {
  if (v->p2p)
    fprintf(f,
            "[{\"slot\":150,\"type\":\"P2p\",\"parentSlot\":60,\"status\":\"stalled\","
            "\"stopped\":true,\"ageMs\":%.1f,\"sinceProgressMs\":%.1f,\"state\":null,"
            "\"func\":\"%s\",\"count\":%d,\"datatype\":\"ncclFloat32\",\"peer\":%d,"
            "\"nChannels\":%d,\"graphCaptured\":false,\"kernelChannels\":{\"expected\":%d,"
            "\"done\":%d},\"children\":[",
            age, s, func_name(1 + v->p2p), COUNT, v->p2p_peer, nch, nch, done);
  else
    fprintf(f,
            "[{\"slot\":150,\"type\":\"Coll\",\"parentSlot\":60,\"status\":\"stalled\","
            "\"stopped\":true,\"ageMs\":%.1f,\"sinceProgressMs\":%.1f,\"state\":null,"
            "\"func\":\"%s\",\"seq\":%" PRId64 ",\"count\":%d,\"datatype\":\"ncclFloat32\","
            "\"algo\":\"Ring\",\"proto\":\"Simple\",\"root\":0,\"nChannels\":2,\"nWarps\":8,"
            "\"graphCaptured\":false,\"kernelChannels\":{\"expected\":2,\"done\":%d},\"children\":[",
            age, s, func_name(v->stuck_func), v->stuck_seq, COUNT, done);
}

static void print_inflight(FILE *f, const rank_view *v) {
  int next = (v->rank + 1) % v->nranks, prev = (v->rank + v->nranks - 1) % v->nranks;
  double age = v->since_ms + 0.8, s = v->since_ms;
  if (v->by_state) {
    print_stuck_head(f, v, age, s, 2, 1);
    if (v->p2p == 2) {
      print_state_op(f, 301, "150", v->pid, -1, 0, v->p2p_peer, 4, 7, v->recv_state, age, s);
      fputc(',', f);
    } else if (!v->p2p) {
      if (!v->no_send) {
        print_state_op(f, 300, "150", v->pid, -1, 1, next, v->send_lo, v->send_hi, v->send_state, age, s);
        fputc(',', f);
      }
      print_state_op(f, 301, "150", v->pid, -1, 0, prev, v->recv_step, v->recv_step + 3, v->recv_state, age, s);
      fputc(',', f);
    }
    fprintf(f,
            "{\"slot\":550,\"type\":\"KernelCh\",\"parentSlot\":150,\"channel\":1,"
            "\"pTimer\":\"0x1000\",\"state\":null,\"stopped\":false,\"ageMs\":%.1f,"
            "\"sinceProgressMs\":%.1f,\"children\":[]}]}]",
            age, s);
    return;
  }
  print_stuck_head(f, v, age, s, v->p2p ? 1 : 2, 0);
  if (v->p2p == 1) {
    print_proxyop(f, v, 300, 1, v->p2p_peer, 0, 1, age, s);
  } else if (v->p2p == 2) {
    print_proxyop(f, v, 301, 0, v->p2p_peer, 0, 1, age, s);
  } else {
    print_proxyop(f, v, 300, 1, v->wait_send ? v->wait_peer : next,
                  v->wait_send ? v->wait_channel : 0, v->wait_send, age, s);
    print_proxyop(f, v, 301, 0, v->wait_send ? prev : v->wait_peer,
                  v->wait_send ? 0 : v->wait_channel, !v->wait_send, age, s);
  }
  fprintf(f,
          "{\"slot\":550,\"type\":\"KernelCh\",\"parentSlot\":150,\"channel\":0,"
          "\"pTimer\":\"0x1000\",\"state\":null,\"stopped\":false,\"ageMs\":%.1f,"
          "\"sinceProgressMs\":%.1f,\"children\":[]}]}]",
          age, s);
}

/* ---- one communicator ---- */

static void gen_history(const rank_view *v, recbuf *ops, recbuf *px) {
  int per_op = 4 + v->extra_records;
  int nops = v->ring_cap / per_op + 2;
  if (nops < v->ring_cap / 10 + 2) nops = v->ring_cap / 10 + 2;
  int64_t ar = v->ar_done, ag = v->ag_done;
  int64_t *seqs = malloc((size_t)nops * sizeof(*seqs));
  int *funcs = malloc((size_t)nops * sizeof(*funcs));
  for (int j = 0; j < nops; j++) { /* newest first */
    funcs[j] = (j % 10 == 5) && ag >= 0;
    seqs[j] = funcs[j] ? ag-- : ar--;
  }
  for (int j = nops - 1; j >= 0; j--) {
    if (seqs[j] < 0) continue;
    int64_t tb = v->t_end - (int64_t)(j + 1) * OP_NS;
    gen_op(v, ops, px, tb, funcs[j], seqs[j], j);
  }
  free(seqs);
  free(funcs);
}

static void print_comm(FILE *f, const opts *o, const rank_view *v) {
  recbuf ops = {0}, px = {0};
  gen_history(v, &ops, &px);
  if (v->stuck) gen_stuck(v, &ops, &px, -(int64_t)(v->since_ms * 1e6) - 50000);
  int64_t ar_enq = v->ar_done, ag_enq = v->ag_done;
  if (v->stuck && !v->p2p && v->stuck_func == 0) ar_enq = v->stuck_seq;
  if (v->stuck && !v->p2p && v->stuck_func == 1) ag_enq = v->stuck_seq;
  int total = o->tp ? o->tp * o->pp * o->dp : o->ranks;
  fprintf(f,
          "{\"commId\":\"0x%016" PRIx64 "\",\"commName\":\"%s\",\"rank\":%d,\"nranks\":%d,"
          "\"nNodes\":%d,\"abi\":5,\"cudaDev\":%d,\"gpuUuid\":\"GPU-%08x\",\"initAgoMs\":812345.2,"
          "\"sinceProgressMs\":%.1f,\"droppedEvents\":0,\"staleHandles\":0,"
          "\"seq\":[{\"func\":\"AllReduce\",\"lastEnqueued\":%" PRId64 ",\"lastCompleted\":%" PRId64
          "},{\"func\":\"AllGather\",\"lastEnqueued\":%" PRId64 ",\"lastCompleted\":%" PRId64
          "}],\"p2p\":{\"enqueued\":%d,\"completed\":0},\"inflight\":",
          v->id, v->name, v->rank, v->nranks, (total + 7) / 8, v->grank % 8, (unsigned)v->grank,
          v->stuck ? v->since_ms : -(double)v->t_end / 1e6, ar_enq, v->ar_done, ag_enq,
          v->ag_done, v->stuck && v->p2p ? 1 : 0);
  if (v->stuck) print_inflight(f, v);
  else fputs("[]", f);
  fputs(",\"open\":[],\"ring\":", f);
  print_ring(f, &ops, v->ring_cap, (uint64_t)ops.n + 4000000);
  fputs(",\"proxyRing\":", f);
  print_ring(f, &px, v->ring_cap, (uint64_t)px.n + 9000000);
  fputc('}', f);
  free(ops.r);
  free(px.r);
}

/* ---- what each rank does in each scenario ---- */

static double stall_ms(const opts *o, int rank) {
  if (o->scenario == SC_NET_STALL && rank == o->victim) return 305000.0;
  return 300100.0 + (rank * 7919 % 50);
}

static rank_view view_of(const opts *o, int rank, int comm) {
  rank_view v;
  memset(&v, 0, sizeof(v));
  v.rank = v.grank = rank;
  v.comm = comm;
  v.nranks = o->ranks;
  v.id = 0x6b8b4567327b23c6ull ^ ((uint64_t)comm * 0x9e3779b97f4a7c15ull);
  if (comm == 0) snprintf(v.name, sizeof(v.name), "default_pg");
  else snprintf(v.name, sizeof(v.name), "pg_%d", comm);
  v.ar_done = comm == 0 ? SEQ_AR - 1 : 5000 + comm;
  v.ag_done = comm == 0 ? SEQ_AG - 1 : 40;
  v.ring_cap = o->ring;
  v.t_end = -5 * OP_NS;
  if (o->scenario == SC_WRAPPED && rank % 2 == 1) {
    v.ring_cap = o->ring / 2;
    v.extra_records = 2;
  }
  v.pid = pid_of(o, rank);
  int hung = o->scenario != SC_HEALTHY && o->scenario != SC_WRAPPED;
  if (comm != 0 || !hung) return v;
  v.since_ms = stall_ms(o, rank);
  if (by_state(o->scenario)) {
    int to = o->victim, from = (o->victim + o->ranks - 1) % o->ranks;
    v.t_end = -(int64_t)(v.since_ms * 1e6) - 2 * OP_NS;
    if (o->scenario == SC_PXN_P2P) {
      if (rank != from && rank != to) return v;
      v.stuck = 1;
      v.p2p = rank == from ? 1 : 2;
      v.p2p_peer = v.wait_peer = rank == from ? to : from;
      v.by_state = 1;
      v.no_send = rank == from;
      v.recv_state = "RecvWait";
      v.recv_step = 4;
      v.wait_channel = 1;
      return v;
    }
    v.stuck = 1;
    v.stuck_seq = SEQ_AR;
    v.by_state = 1;
    v.wait_channel = 1;
    v.send_state = rank == from ? "SendWait" : "SendGPUWait";
    v.send_lo = 4;
    v.send_hi = rank == from ? 7 : 4;
    v.recv_state = rank == from ? "RecvGPUWait" : "RecvWait";
    v.recv_step = 4;
    v.no_send = rank == from && o->scenario == SC_PXN_LINK;
    v.wait_peer = rank == to ? from : (rank + o->ranks - 1) % o->ranks;
    return v;
  }
  v.t_end = -(int64_t)(v.since_ms * 1e6) - 2 * OP_NS;
  int victim = rank == o->victim;
  if (victim && (o->scenario == SC_NOT_ENTERED || o->scenario == SC_MISSING)) return v;
  v.stuck = 1;
  v.stuck_func = victim && o->scenario == SC_MISMATCH;
  v.stuck_seq = v.stuck_func ? SEQ_AG : SEQ_AR;
  v.wait_peer = (rank + o->ranks - 1) % o->ranks;
  v.wait_channel = victim && o->scenario == SC_NET_STALL ? 1 : 0;
  v.wait_step = victim && o->scenario == SC_NET_STALL ? 4 : 6;
  return v;
}

/* ---- 3-D parallel jobs ---- */

enum { K_TP, K_PP, K_DP };

static int world(const opts *o) { return o->tp ? o->tp * o->pp * o->dp : o->ranks; }

static void coords(const opts *o, int g, int *t, int *p, int *d) {
  *t = g % o->tp;
  *p = (g / o->tp) % o->pp;
  *d = g / (o->tp * o->pp);
}

static int grank(const opts *o, int t, int p, int d) { return (d * o->pp + p) * o->tp + t; }

static void coll_wait(rank_view *v, double since) {
  v->stuck = 1;
  v->stuck_seq = v->ar_done + 1;
  v->wait_peer = (v->rank + v->nranks - 1) % v->nranks;
  v->wait_step = 6;
  v->since_ms = since;
}

static void p2p_wait(rank_view *v, int dir, int peer, double since) {
  v->stuck = 1;
  v->p2p = dir; /* 1 Send, 2 Recv */
  v->p2p_peer = v->wait_peer = peer;
  v->wait_send = dir == 1;
  v->since_ms = since;
}

/* The dead link from comm rank `from` to `to` of a ring, seen from rank v. */
static void link_end(rank_view *v, int from, int to) {
  coll_wait(v, 305000.0);
  v->wait_channel = 1;
  v->wait_step = 4;
  v->wait_send = v->rank == from;
  v->wait_peer = v->rank == from ? to : from;
}

static int in_dead_host(const opts *o, int g) { return g / 8 == o->victim / 8; }

static rank_view view3d(const opts *o, int g, int kind) {
  int t, p, d, tv, pv, dv;
  coords(o, g, &t, &p, &d);
  coords(o, o->victim, &tv, &pv, &dv);
  rank_view v;
  memset(&v, 0, sizeof(v));
  v.grank = g;
  v.comm = kind;
  v.ring_cap = o->ring;
  static const char *const kname[] = {"tp", "pp", "dp"};
  int a = kind == K_TP ? p : t, b = kind == K_DP ? p : d;
  v.rank = kind == K_TP ? t : kind == K_PP ? p : d;
  v.nranks = kind == K_TP ? o->tp : kind == K_PP ? o->pp : o->dp;
  snprintf(v.name, sizeof(v.name), "%s_%c%d_%c%d", kname[kind], kind == K_TP ? 'p' : 't', a,
           kind == K_DP ? 'p' : 'd', b);
  v.id = 0x3d00000000000000ull | ((uint64_t)kind << 40) | ((uint64_t)a << 20) | (uint64_t)b;
  v.ar_done = 5000 + 100 * kind;
  v.ag_done = 40;
  int hung = o->scenario != SC_HEALTHY && o->scenario != SC_STRAGGLER;
  v.t_end = hung ? -(int64_t)(300100.0 * 1e6) - 2 * OP_NS : -5000 * (int64_t)OP_NS;
  if (o->scenario == SC_STRAGGLER && g == o->victim) v.lag_ns = 2000 * (int64_t)OP_NS;
  int W = (tv + 1) % o->tp, D2 = (dv + 1) % o->dp;
  switch (o->scenario) {
  case SC_JOB_ROOT:
  case SC_CRASHED:
  case SC_VANISHED:
    if (kind == K_PP && t == tv && d == dv && p == pv + 1) p2p_wait(&v, 2, pv, 300100.0);
    if (kind == K_PP && t == tv && d == dv && p == pv - 1) p2p_wait(&v, 1, pv, 300100.0);
    if (kind == K_DP && t == tv && (p == pv + 1 || p == pv - 1) && d != dv) coll_wait(&v, 300200.0);
    if (kind == K_TP && p == pv && d == dv && t != tv) coll_wait(&v, 300150.0);
    break;
  case SC_JOB_DEADLOCK: /* V waits in tp on W, W in dp on X, X in tp on Y, Y in dp on V */
    if (kind == K_TP && p == pv && d == dv && t != W) coll_wait(&v, 300100.0);
    if (kind == K_DP && t == W && p == pv && d != D2) coll_wait(&v, 300100.0);
    if (kind == K_TP && p == pv && d == D2 && t != tv) coll_wait(&v, 300100.0);
    if (kind == K_DP && t == tv && p == pv && d != dv) coll_wait(&v, 300100.0);
    break;
  case SC_P2P_MISMATCH: /* stage pv-1 sends to pv; pv receives from pv+1; pv+1 from pv */
    if (kind == K_PP && t == tv && d == dv && p == pv - 1) p2p_wait(&v, 1, pv, 300100.0);
    if (kind == K_PP && t == tv && d == dv && p == pv) p2p_wait(&v, 2, pv + 1, 300100.0);
    if (kind == K_PP && t == tv && d == dv && p == pv + 1) p2p_wait(&v, 2, pv, 300100.0);
    break;
  case SC_DEAD_LINK:
    if (kind == K_DP && t == tv && p == pv) {
      int from = (dv + o->dp - 1) % o->dp;
      if (d == dv || d == from) link_end(&v, from, dv);
      else coll_wait(&v, 300100.0);
    }
    break;
  case SC_DEAD_HOST: /* every dp ring through the victim's host has a dead link at it */
    if (kind == K_DP) {
      int hd = -1; /* the ring position of this ring's rank on the victim's host */
      for (int k = 0; k < o->dp; k++)
        if (in_dead_host(o, grank(o, t, p, k))) hd = k;
      if (hd < 0) break;
      /* Half of the rings break before the host, half after it: only the host is common. */
      int before = (t + p) % 2 == 0;
      int from = before ? (hd + o->dp - 1) % o->dp : hd, to = before ? hd : (hd + 1) % o->dp;
      if (d == from || d == to) link_end(&v, from, to);
      else coll_wait(&v, 300100.0);
    }
    break;
  default: break;
  }
  return v;
}

static int stuck3d(const opts *o, int g) {
  for (int k = K_TP; k <= K_DP; k++)
    if (view3d(o, g, k).stuck) return 1;
  return 0;
}

static const char *reason_of(const opts *o, int rank) {
  if (o->scenario == SC_HEALTHY || o->scenario == SC_WRAPPED || o->scenario == SC_STRAGGLER)
    return "signal";
  if (o->tp) {
    if (o->scenario == SC_CRASHED && rank == o->victim) return "postmortem";
    return stuck3d(o, rank) ? "stall" : "peer";
  }
  int first = o->scenario == SC_NET_STALL ? o->victim
              : o->scenario == SC_PXN_P2P  ? (o->victim + o->ranks - 1) % o->ranks
                                           : (o->victim + 1) % o->ranks;
  return rank == first ? "stall" : "peer";
}

/* ---- one dump ---- */

static void print_frames(FILE *f, const char *const *syms, int n) {
  fputs("\"frames\":[", f);
  for (int i = 0; i < n; i++)
    fprintf(f,
            "%s{\"pc\":\"0x%llx\",\"module\":\"/usr/lib/libtrain.so\",\"moduleOffset\":\"0x%x\","
            "\"symbol\":\"%s\",\"symbolOffset\":%d}",
            i ? "," : "", 0x7f0000001000ull + (unsigned)i * 0x40, 0x1000 + i * 0x40, syms[i],
            16 + i);
  fputc(']', f);
}

static void print_threads(FILE *f, const opts *o, int rank) {
  static const char *const waiting[] = {"__futex_abstimed_wait_common", "cudaStreamSynchronize",
                                        "c10d_wait", "train_step", "main"};
  static const char *const busy[] = {"__poll", "recv_batch", "DataLoader_next", "train_step",
                                     "main"};
  static const char *const progress[] = {"epoll_wait", "ncclProxyProgress", "start_thread"};
  static const char *const wd[] = {"wd_bt_collect", "wd_watchdog_main", "start_thread"};
  int pid = 10000 + rank;
  int is_busy = rank == o->victim && (o->scenario == SC_NOT_ENTERED || o->scenario == SC_JOB_ROOT);
  fprintf(f, "{\"asked\":3,\"answered\":3,\"list\":[{\"tid\":%d,\"name\":\"python\","
             "\"status\":\"ok\",",
          pid);
  print_frames(f, is_busy ? busy : waiting, 5);
  fprintf(f, "},{\"tid\":%d,\"name\":\"NCCL Progress 2\",\"status\":\"ok\",", pid + 7);
  print_frames(f, progress, 3);
  fprintf(f, "},{\"tid\":%d,\"name\":\"nccl-watchdog\",\"status\":\"self\",", pid + 9);
  print_frames(f, wd, 3);
  fputs("}]}", f);
}

static void print_header(FILE *f, const opts *o, int rank, uint64_t wall, uint64_t mono) {
  const char *reason = reason_of(o, rank);
  fprintf(f,
          "{\"format\":\"nccl-watchdog-dump\",\"version\":1,\"reason\":\"%s\",\"dumpSeq\":1,"
          "\"host\":\"node%03d\",\"pid\":%d,\"plugin\":{\"name\":\"nccl-watchdog\","
          "\"version\":\"0.1.0\",\"abi\":5},\"time\":{\"wall\":\"2026-11-22T03:12:09.123456789Z\","
          "\"wall_ns\":\"0x%" PRIx64 "\",\"mono_ns\":\"0x%" PRIx64 "\"},",
          reason, rank / 8, pid_of(o, rank), wall, mono);
  if (strcmp(reason, "signal") == 0)
    fputs("\"trigger\":{\"signal\":\"SIGUSR1\",\"senderPid\":0},", f);
  else if (strcmp(reason, "peer") == 0)
    fputs("\"trigger\":{\"file\":\"trigger-node000-10000-1.trigger\",\"origin\":{}},", f);
  else
    fprintf(f, "\"trigger\":{\"stalls\":[{\"commId\":\"0x6b8b4567327b23c6\",\"commName\":\"%s\","
               "\"rank\":%d,\"nranks\":%d,\"type\":\"Coll\",\"func\":\"AllReduce\",\"seq\":%d,"
               "\"sinceProgressMs\":300100.0,\"waitingOn\":\"ProxyStep 6 of 8 in RecvWait\"}]},",
            o->tp ? "dp" : "default_pg", rank, o->ranks, SEQ_AR);
  fprintf(f,
          "\"config\":{\"enable\":true,\"timeoutMs\":300000,\"pollMs\":1000,"
          "\"unreachedTimeoutMs\":0,\"dumpDir\":\"dumps\",\"ringSize\":%d,\"proxyRingSize\":%d,"
          "\"maxEvents\":65536,\"signal\":\"SIGUSR1\",\"backtraceSignal\":\"SIGRTMIN+3\","
          "\"action\":\"dump\",\"eventMask\":\"0x65f\",\"backtrace\":true,\"peerDumps\":true,"
          "\"maxDumps\":32},\"env\":{\"RANK\":\"%d\",\"LOCAL_RANK\":\"%d\",\"WORLD_SIZE\":\"%d\"},"
          "\"strings\":[\"\",\"AllReduce\",\"AllGather\",\"ncclFloat32\",\"Ring\",\"Simple\"],",
          o->ring, o->ring, rank, rank % 8, world(o));
}

static int write_rank(const opts *o, int rank) {
  uint64_t wall = BASE_WALL_NS + (uint64_t)rank * 100000ull;
  if (strcmp(reason_of(o, rank), "peer") == 0) wall += 200000000ull;
  /* A crashed process's ring file stops at its death, before the others entered the collective
   * they then hang in (the analyzer tells such a rank from one killed after the others waited). */
  if (strcmp(reason_of(o, rank), "postmortem") == 0) wall -= 310000000000ull;
  uint64_t mono = BASE_MONO_NS + (wall - BASE_WALL_NS);
  char path[4096];
  snprintf(path, sizeof(path), "%s/node%03d-%d-0001-%s.json", o->out, rank / 8, 10000 + rank,
           reason_of(o, rank));
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "gen_dumps: %s: %s\n", path, strerror(errno));
    return -1;
  }
  static char buf[1 << 20];
  setvbuf(f, buf, _IOFBF, sizeof(buf));
  print_header(f, o, rank, wall, mono);
  fputs("\"comms\":[", f);
  for (int c = 0; c < (o->tp ? 3 : o->comms); c++) {
    if (c) fputc(',', f);
    rank_view v = o->tp ? view3d(o, rank, c) : view_of(o, rank, c);
    print_comm(f, o, &v);
  }
  fputs("],\"detached\":{\"open\":[", f);
  /* The PXN proxy (rank K-2, same host as K-1) progresses K-1's send to K: a detached ProxyOp
   * with K-1's pid and originating rank, steps 4-7 handed to the network. */
  int from = (o->victim + o->ranks - 1) % o->ranks, proxy = (o->victim + o->ranks - 2) % o->ranks;
  if ((o->scenario == SC_PXN_LINK || o->scenario == SC_PXN_P2P) && rank == proxy)
    print_state_op(f, 0x40000300, "\"foreign\"", pid_of(o, from), from, 1, o->victim, 4, 7,
                   "SendWait", 300100.8, 300100.0);
  fputs("],\"ring\":{\"capacity\":0,\"written\":0,\"torn\":0,\"lost\":0,\"records\":[]}}", f);
  if (strcmp(reason_of(o, rank), "postmortem") != 0) { /* a ring file holds no stacks */
    fputs(",\"threads\":", f);
    print_threads(f, o, rank);
  }
  fputs(",\"modules\":[{\"path\":\"/usr/lib/libtrain.so\",\"start\":\"0x7f0000000000\","
        "\"end\":\"0x7f0000100000\",\"offset\":\"0x0\"}]}\n",
        f);
  return fclose(f) == 0 ? 0 : -1;
}

static void write_trigger(const opts *o) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/trigger-node000-10000-1.trigger", o->out);
  FILE *f = fopen(path, "w");
  if (!f) return;
  fputs("{\"host\":\"node000\",\"pid\":10000,\"stalls\":[],\"dump\":\"x.json\"}\n", f);
  fclose(f);
}

/* ---- command line ---- */

static int usage(void) {
  fprintf(stderr, "usage: gen_dumps OUTDIR --ranks=N --scenario=healthy|missing-rank|"
                  "not-entered|mismatch|network-stall|wrapped|link-tick|pxn-link|pxn-p2p "
                  "[--ring=R] [--comms=C] [--victim=K] [--same-pid]\n"
                  "       gen_dumps OUTDIR --layout=TPxPPxDP --scenario=healthy|job-root|"
                  "job-deadlock|p2p-mismatch|dead-link|dead-host|straggler|crashed|vanished "
                  "[--ring=R] [--victim=G]\n");
  return 2;
}

static int parse_scenario(const char *s) {
  for (int i = 0; i < SC_COUNT; i++)
    if (strcmp(s, g_scenarios[i]) == 0) return i;
  return -1;
}

static int parse_int(const char *opt, const char *v, int *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (end == v || *end || x < 0 || x > 1 << 24) {
    fprintf(stderr, "gen_dumps: --%s=%s: expected a count\n", opt, v);
    return -1;
  }
  *out = (int)x;
  return 0;
}

static int parse_args(int argc, char **argv, opts *o) {
  static const struct option longopts[] = {
      {"ranks", required_argument, NULL, 'n'},  {"scenario", required_argument, NULL, 's'},
      {"ring", required_argument, NULL, 'r'},   {"comms", required_argument, NULL, 'c'},
      {"victim", required_argument, NULL, 'v'}, {"layout", required_argument, NULL, 'l'},
      {"version", no_argument, NULL, 'V'},      {"same-pid", no_argument, NULL, 'P'},
      {NULL, 0, NULL, 0}};
  o->ranks = 0;
  o->scenario = -1;
  o->ring = 2000;
  o->comms = 1;
  o->victim = -1;
  int c, idx;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", longopts, &idx)) != -1) {
    int rc = 0;
    switch (c) {
    case 'V': printf("gen_dumps %s\n", WD_VERSION); exit(0);
    case 'P': o->same_pid = 1; break;
    case 'n': rc = parse_int("ranks", optarg, &o->ranks); break;
    case 'r': rc = parse_int("ring", optarg, &o->ring); break;
    case 'c': rc = parse_int("comms", optarg, &o->comms); break;
    case 'v': rc = parse_int("victim", optarg, &o->victim); break;
    case 's':
      if ((o->scenario = parse_scenario(optarg)) < 0) {
        fprintf(stderr, "gen_dumps: --scenario=%s: unknown scenario\n", optarg);
        rc = -1;
      }
      break;
    case 'l':
      if (sscanf(optarg, "%dx%dx%d", &o->tp, &o->pp, &o->dp) != 3 || o->tp < 1 || o->pp < 1 ||
          o->dp < 1 || o->tp * o->pp * o->dp > 1 << 20) {
        fprintf(stderr, "gen_dumps: --layout=%s: expected TPxPPxDP, e.g. 2x4x4\n", optarg);
        rc = -1;
      }
      break;
    default:
      fprintf(stderr, "gen_dumps: %s: unknown option or missing value\n", argv[optind - 1]);
      rc = -1;
    }
    if (rc) return -1;
  }
  if (optind == argc - 1) o->out = argv[optind];
  if (o->tp) {
    o->ranks = world(o);
    int three_d = o->scenario == SC_HEALTHY || is_3d(o->scenario);
    if (!three_d || o->tp < 2 || o->pp < 3 || o->dp < 3) {
      fprintf(stderr, "gen_dumps: --layout needs a 3-D scenario and TP >= 2, PP >= 3, DP >= 3\n");
      return -1;
    }
    if (o->victim < 0) o->victim = grank(o, 0, o->pp / 2, o->dp / 2);
    int t, p, d;
    if (o->victim < o->ranks) coords(o, o->victim, &t, &p, &d);
    if (o->victim >= o->ranks || p == 0 || p == o->pp - 1) {
      fprintf(stderr, "gen_dumps: --victim must be a rank of an inner pipeline stage\n");
      return -1;
    }
  } else if (is_3d(o->scenario)) {
    fprintf(stderr, "gen_dumps: --scenario=%s needs --layout\n", g_scenarios[o->scenario]);
    return -1;
  }
  if (!o->out || o->ranks < 2 || o->scenario < 0 || o->ring < 16 || o->comms < 1) return -1;
  if (o->victim < 0) o->victim = o->ranks > 3 ? 3 : o->ranks - 1;
  if ((o->scenario == SC_PXN_LINK || o->scenario == SC_PXN_P2P) &&
      (o->victim < 2 || (o->victim - 2) / 8 != (o->victim - 1) / 8)) {
    fprintf(stderr, "gen_dumps: --scenario=%s needs ranks K-2 and K-1 on one host (e.g. --victim=8)\n",
            g_scenarios[o->scenario]);
    return -1;
  }
  return o->victim < o->ranks ? 0 : -1;
}

int main(int argc, char **argv) {
  opts o;
  memset(&o, 0, sizeof(o));
  if (parse_args(argc, argv, &o) != 0) return usage();
  if (mkdir(o.out, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "gen_dumps: %s: %s\n", o.out, strerror(errno));
    return 1;
  }
  for (int r = 0; r < o.ranks; r++) {
    if ((o.scenario == SC_MISSING || o.scenario == SC_VANISHED) && r == o.victim) continue;
    if (write_rank(&o, r) != 0) return 1;
  }
  if (o.scenario != SC_HEALTHY && o.scenario != SC_WRAPPED && o.scenario != SC_STRAGGLER)
    write_trigger(&o);
  return 0;
}
