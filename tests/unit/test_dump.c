/* The dump document: built from a synthetic snapshot, parsed back, checked field by field. */
#include <CUnit/Basic.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dump/render.h"
#include "flightrec/strtab.h"
#include "wd_test_util.h"

#define MONO 1000000000000ull /* the dump's CLOCK_MONOTONIC */
#define MS 1000000ull

static const char weird_name[] = "pg \"0\"\n\ttab\\slash\x01\x1f end";
static const char weird_env[] = "a\"b\nc\x02\\d";

static uint8_t s_allreduce, s_f32, s_ring, s_simple, s_send, s_bcast;

typedef struct fixture {
  wd_config cfg;
  wd_dump_input in;
  wd_comm_snap comms[2];
  wd_ev_snap ev0[6];
  wd_record ring0[4], pring0[9], dring[1];
  wd_ev_snap det[1];
  wd_stall stall;
  wd_bt_result bt;
  wd_bt_thread threads[2];
  wd_bt_module modules[1];
} fixture;

/* A later record of the event whose start is r. */
static wd_record later(wd_record r, uint8_t phase, uint8_t state) {
  r.phase = phase;
  r.state = state;
  return r;
}

static wd_record rec(uint8_t type, uint8_t phase, uint32_t slot, uint32_t parent, uint64_t ago_ns) {
  wd_record r;
  memset(&r, 0, sizeof(r));
  r.type = type;
  r.phase = phase;
  r.slot = slot;
  r.parent = parent;
  r.ts_ns = MONO - ago_ns;
  r.tid = 4242;
  r.peer = -1;
  r.state = 0xff; /* none yet, as the plugin writes it */
  return r;
}

static wd_ev_snap ev(wd_record start, uint64_t last_ago_ns) {
  wd_ev_snap e;
  memset(&e, 0, sizeof(e));
  e.start = start;
  e.last_ns = MONO - last_ago_ns;
  e.last_state = 0xff;
  return e;
}

static void coll_fields(wd_record *r) {
  r->func = s_allreduce;
  r->a = 42;
  r->count = 1048576;
  r->dtype = s_f32;
  r->algo = s_ring;
  r->proto = s_simple;
  r->peer = 0;
  r->nChannels = 2;
  r->nWarps = 8;
}

static void build(fixture *f) {
  memset(f, 0, sizeof(*f));
  wd_config_defaults(&f->cfg);
  wd_dump_input *in = &f->in;
  in->reason = "stall";
  in->cfg = &f->cfg;
  in->dump_seq = 3;
  in->mono_ns = MONO;
  in->wall_sec = 1795000000;
  in->wall_nsec = 123456789;
  snprintf(in->host, sizeof(in->host), "node017");
  in->pid = 41233;
  in->abi = 5;

  /* comm 0: Coll 10 -> ProxyOp 11 -> ProxyStep 12, Coll 10 -> KernelCh 13; P2p 20 (older root);
   * CollApi 5 outside any tree. Listed out of order on purpose. */
  wd_comm_snap *c = &f->comms[0];
  c->comm_id = 0xdeadbeefcafef00dull;
  snprintf(c->name, sizeof(c->name), "%s", weird_name);
  c->rank = 3;
  c->nranks = 8;
  c->nnodes = 2;
  c->abi = 5;
  c->cuda_dev = 1;
  snprintf(c->gpu_uuid, sizeof(c->gpu_uuid), "GPU-1a2b3c");
  c->init_ns = MONO - 812345 * MS;
  c->last_progress_ns = MONO - 300 * MS;
  c->dropped = 7;
  c->stale = 1;
  c->nseq = 1;
  c->seq[0] = (wd_seq_snap){s_allreduce, 42, 41};
  c->p2p_enqueued = 120;
  c->p2p_completed = 118;

  wd_record step = rec(WD_T_PROXYSTEP, WD_PH_START, 12, 11, 300 * MS);
  step.n = 4;
  f->ev0[0] = ev(step, 300 * MS);
  f->ev0[0].last_state = 10; /* RecvWait */
  f->ev0[0].last_trans = 4096;

  wd_record coll = rec(WD_T_COLL, WD_PH_START, 10, WD_SLOT_NONE, 5000 * MS);
  coll_fields(&coll);
  coll.flags = WD_F_GRAPH;
  f->ev0[1] = ev(coll, 300 * MS);
  f->ev0[1].is_root = 1;
  f->ev0[1].status = WD_OP_STALLED;
  f->ev0[1].stopped = 1;
  f->ev0[1].kch_expected = 2;
  f->ev0[1].kch_done = 1;
  f->ev0[1].children_seen = 2;
  f->ev0[1].children_open = 2;

  wd_record kch = rec(WD_T_KERNELCH, WD_PH_START, 13, 10, 4000 * MS);
  kch.a = 0x1234;
  kch.channel = 1;
  f->ev0[2] = ev(kch, 4000 * MS);

  wd_record pop = rec(WD_T_PROXYOP, WD_PH_START, 11, 10, 4500 * MS);
  pop.n = 8;
  pop.count = 524288;
  pop.peer = 2;
  pop.pid = 41233;
  f->ev0[3] = ev(pop, 300 * MS);
  f->ev0[3].steps_done = 4;

  wd_record api = rec(WD_T_COLLAPI, WD_PH_START, 5, WD_SLOT_NONE, 6000 * MS);
  api.func = s_allreduce;
  api.count = 1048576;
  api.dtype = s_f32;
  api.peer = 0;
  f->ev0[4] = ev(api, 6000 * MS);

  wd_record p2p = rec(WD_T_P2P, WD_PH_START, 20, WD_SLOT_NONE, 9000 * MS);
  p2p.func = s_send;
  p2p.count = 77;
  p2p.dtype = s_f32;
  p2p.peer = 5;
  p2p.nChannels = 1;
  f->ev0[5] = ev(p2p, 9000 * MS);
  f->ev0[5].is_root = 1;
  f->ev0[5].status = WD_OP_ENQUEUED;
  f->ev0[5].stopped = 1;
  c->nevents = 6;
  c->events = f->ev0;

  /* Operation ring: CollApi start, Coll start, Coll stop, GroupApi start. */
  f->ring0[0] = api;
  f->ring0[0].ts_ns = MONO - 7000 * MS;
  f->ring0[1] = coll;
  f->ev0[4].start.func = s_bcast; /* a string that needs escaping, in a raw-formatted node */
  f->ring0[2] = coll;
  f->ring0[2].phase = WD_PH_STOP;
  f->ring0[2].flags = 0;
  f->ring0[2].ts_ns = MONO - 4900 * MS;
  f->ring0[3] = rec(WD_T_GROUPAPI, WD_PH_START, 6, WD_SLOT_NONE, 1 * MS);
  f->ring0[3].n = 1;
  c->ring = (wd_ring_snap){8192, 1203311, 2, 1195119, 4, f->ring0};

  /* Proxy ring: ProxyOp start, ProxyStep state, KernelCh state, ProxyCtrl state, NetPlugin,
   * an abandoned ProxyStep stop. */
  f->pring0[0] = pop;
  f->pring0[1] = later(step, WD_PH_STATE, 10); /* older builds' state records */
  f->pring0[1].a = 4096;
  f->pring0[2] = later(kch, WD_PH_STATE, 22);
  f->pring0[2].a = 0x5678;
  f->pring0[3] = rec(WD_T_PROXYCTRL, WD_PH_STATE, 30, WD_SLOT_NONE, 2 * MS);
  f->pring0[3].state = 17;
  f->pring0[3].n = 3;
  f->pring0[4] = rec(WD_T_NETPLUGIN, WD_PH_START, 31, 12, 2 * MS);
  f->pring0[4].a = 0xabcdef;
  f->pring0[5] = later(step, WD_PH_STOP, 0xff);
  f->pring0[5].flags = WD_F_ABANDONED;
  f->pring0[5].ts_ns = MONO;
  /* Stops: the last state and its value (no state records for these types). */
  f->pring0[6] = later(step, WD_PH_STOP, 10);
  f->pring0[6].count = 8192;
  f->pring0[7] = later(kch, WD_PH_STOP, 22);
  f->pring0[7].count = 0x9abc;
  /* A span: the whole life of a step under a live parent, written at its stop. */
  f->pring0[8] = later(step, WD_PH_SPAN, 12);
  f->pring0[8].flags = WD_F_SPAN;
  f->pring0[8].count = 1024;
  f->pring0[8].raw = MONO - 3 * MS;
  f->pring0[8].ts_ns = MONO - 1 * MS;
  c->proxy_ring = (wd_ring_snap){4096, 9, 0, 0, 9, f->pring0};

  /* comm 1: nothing in flight. */
  wd_comm_snap *c1 = &f->comms[1];
  c1->comm_id = 0x1;
  snprintf(c1->name, sizeof(c1->name), "second");
  c1->rank = 0;
  c1->nranks = 2;
  c1->nnodes = 1;
  c1->cuda_dev = -1;
  c1->p2p_enqueued = -1;
  c1->p2p_completed = -1;
  in->ncomms = 2;
  in->comms = f->comms;

  /* Detached PXN ProxyOp. */
  wd_record dop = rec(WD_T_PROXYOP, WD_PH_START, WD_SLOT_DETACHED_BIT | 1, WD_SLOT_FOREIGN, 10 * MS);
  dop.flags = WD_F_DETACHED | WD_F_SEND;
  dop.raw = 0xabc;
  dop.pid = 999;
  f->det[0] = ev(dop, 10 * MS);
  in->ndetached = 1;
  in->detached = f->det;
  f->dring[0] = dop;
  in->detached_ring = (wd_ring_snap){1024, 1, 0, 0, 1, f->dring};

  /* Stall. */
  f->stall.comm_id = c->comm_id;
  snprintf(f->stall.comm_name, sizeof(f->stall.comm_name), "%s", weird_name);
  f->stall.rank = 3;
  f->stall.nranks = 8;
  f->stall.type = WD_T_COLL;
  f->stall.func = s_allreduce;
  f->stall.seq = 42;
  f->stall.peer = -1;
  f->stall.slot = 10;
  f->stall.since_progress_ns = 300120300000ull;
  f->stall.age_ns = 301234100000ull;
  snprintf(f->stall.waiting_on, sizeof(f->stall.waiting_on),
           "ProxyStep 4 (recv from peer 2, channel 0) in RecvWait");
  in->nstalls = 1;
  in->stalls = &f->stall;

  /* Backtraces: one thread answered, one did not. */
  f->threads[0].tid = 41233;
  f->threads[0].status = WD_BT_OK;
  snprintf(f->threads[0].name, sizeof(f->threads[0].name), "python");
  f->threads[0].nframes = 3;
  f->threads[0].frames[0] = (wd_bt_frame){.pc = 0x7f3a12345678ull, .module_offset = 0x91234,
                                          .symbol_offset = 123, .module = "/lib/libc.so.6",
                                          .symbol = "pthread_cond_wait"};
  f->threads[0].frames[1] = (wd_bt_frame){.pc = 0x401000, .module_offset = 0x1000, .module = "/bin/app"};
  f->threads[0].frames[2] = (wd_bt_frame){.pc = 0x402000, .module_offset = 0x2000, .symbol_offset = 8,
                                          .module = "/bin/app", .symbol = "c10d::ProcessGroupNCCL::wait()",
                                          .mangled = "_ZN4c10d16ProcessGroupNCCL4waitEv"};
  f->threads[1].tid = 41240;
  f->threads[1].status = WD_BT_NO_ANSWER;
  snprintf(f->threads[1].name, sizeof(f->threads[1].name), "pt_main");
  f->modules[0] = (wd_bt_module){0x7f3a12200000ull, 0x7f3a12400000ull, 0x28000, "r-xp", "/lib/libc.so.6"};
  f->bt = (wd_bt_result){.nthreads = 2, .asked = 1, .answered = 1, .threads = f->threads, .nmodules = 1, .modules = f->modules};
  in->threads = &f->bt;
}

static cJSON *render_parse(const wd_dump_input *in) {
  char *s = wd_dump_render(in);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  cJSON *doc = cJSON_Parse(s);
  if (!doc) fprintf(stderr, "invalid JSON near: %.80s\n", cJSON_GetErrorPtr());
  free(s);
  CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
  return doc;
}

static cJSON *get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }
static const char *gets(const cJSON *o, const char *key) {
  const cJSON *it = get(o, key);
  return cJSON_IsString(it) ? it->valuestring : NULL;
}
static double getn(const cJSON *o, const char *key) {
  const cJSON *it = get(o, key);
  return cJSON_IsNumber(it) ? it->valuedouble : -12345.0;
}
static int streq(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }

static void test_top_level(void) {
  fixture f;
  build(&f);
  cJSON *d = render_parse(&f.in);
  CU_ASSERT(streq(gets(d, "format"), "nccl-watchdog-dump"));
  CU_ASSERT_EQUAL(getn(d, "version"), 1);
  CU_ASSERT(streq(gets(d, "reason"), "stall"));
  CU_ASSERT_EQUAL(getn(d, "dumpSeq"), 3);
  CU_ASSERT(streq(gets(d, "host"), "node017"));
  CU_ASSERT_EQUAL(getn(d, "pid"), 41233);
  cJSON *plugin = get(d, "plugin");
  CU_ASSERT(streq(gets(plugin, "name"), "nccl-watchdog"));
  CU_ASSERT_EQUAL(getn(plugin, "abi"), 5);
  cJSON *t = get(d, "time");
  CU_ASSERT(streq(gets(t, "mono_ns"), "0xe8d4a51000"));
  CU_ASSERT(streq(gets(t, "wall"), "2026-11-18T11:06:40.123456789Z"));
  char want[32];
  snprintf(want, sizeof(want), "0x%llx", 1795000000123456789ull);
  CU_ASSERT(streq(gets(t, "wall_ns"), want));

  cJSON *trig = get(d, "trigger");
  cJSON *st = cJSON_GetArrayItem(get(trig, "stalls"), 0);
  CU_ASSERT(streq(gets(st, "commId"), "0xdeadbeefcafef00d"));
  CU_ASSERT(streq(gets(st, "commName"), weird_name));
  CU_ASSERT(streq(gets(st, "type"), "Coll"));
  CU_ASSERT(streq(gets(st, "func"), "AllReduce"));
  CU_ASSERT_EQUAL(getn(st, "seq"), 42);
  CU_ASSERT_EQUAL(getn(st, "peer"), -1);
  CU_ASSERT_DOUBLE_EQUAL(getn(st, "sinceProgressMs"), 300120.3, 1e-6);
  CU_ASSERT(streq(gets(st, "waitingOn"), "ProxyStep 4 (recv from peer 2, channel 0) in RecvWait"));

  cJSON *cfg = get(d, "config");
  CU_ASSERT(cJSON_IsTrue(get(cfg, "enable")));
  CU_ASSERT_DOUBLE_EQUAL(getn(cfg, "timeoutMs"), (double)f.cfg.timeout_ns / 1e6, 1e-9);
  CU_ASSERT(streq(gets(cfg, "signal"), "SIGUSR1"));
  CU_ASSERT(streq(gets(cfg, "action"), "dump"));
  snprintf(want, sizeof(want), "0x%x", (unsigned)f.cfg.event_mask);
  CU_ASSERT(streq(gets(cfg, "eventMask"), want));
  CU_ASSERT_EQUAL(getn(cfg, "ringSize"), f.cfg.ring_size);

  cJSON *strs = get(d, "strings");
  CU_ASSERT_EQUAL(cJSON_GetArraySize(strs), (int)wd_str_count());
  CU_ASSERT(streq(cJSON_GetArrayItem(strs, 0)->valuestring, ""));
  CU_ASSERT(streq(cJSON_GetArrayItem(strs, s_allreduce)->valuestring, "AllReduce"));
  CU_ASSERT(streq(cJSON_GetArrayItem(strs, s_bcast)->valuestring, "Broad\"cast\n"));
  cJSON_Delete(d);
}

static void test_env(void) {
  fixture f;
  build(&f);
  setenv("NCCL_WD_TEST_WEIRD", weird_env, 1);
  setenv("RANK", "3", 1);
  setenv("MASTER_PORT", "29500", 1);
  setenv("REPLICA_GROUP_ID", "1", 1); /* torchft's examples */
  setenv("NOT_NCCL_VAR", "x", 1);
  setenv("NCCLX", "x", 1);
  cJSON *d = render_parse(&f.in);
  cJSON *env = get(d, "env");
  CU_ASSERT(streq(gets(env, "NCCL_WD_TEST_WEIRD"), weird_env));
  CU_ASSERT(streq(gets(env, "RANK"), "3"));
  CU_ASSERT(streq(gets(env, "MASTER_PORT"), "29500"));
  CU_ASSERT(streq(gets(env, "REPLICA_GROUP_ID"), "1"));
  CU_ASSERT_PTR_NULL(get(env, "NOT_NCCL_VAR"));
  CU_ASSERT_PTR_NULL(get(env, "NCCLX"));
  CU_ASSERT_PTR_NULL(get(env, "PATH"));
  unsetenv("NCCL_WD_TEST_WEIRD");
  unsetenv("REPLICA_GROUP_ID");
  unsetenv("NOT_NCCL_VAR");
  unsetenv("NCCLX");
  cJSON_Delete(d);
}

static void test_comm_and_trees(void) {
  fixture f;
  build(&f);
  cJSON *d = render_parse(&f.in);
  cJSON *comms = get(d, "comms");
  CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(comms), 2);
  cJSON *c = cJSON_GetArrayItem(comms, 0);
  CU_ASSERT(streq(gets(c, "commId"), "0xdeadbeefcafef00d"));
  CU_ASSERT(streq(gets(c, "commName"), weird_name));
  CU_ASSERT_EQUAL(getn(c, "rank"), 3);
  CU_ASSERT_EQUAL(getn(c, "nranks"), 8);
  CU_ASSERT_EQUAL(getn(c, "nNodes"), 2);
  CU_ASSERT_EQUAL(getn(c, "cudaDev"), 1);
  CU_ASSERT(streq(gets(c, "gpuUuid"), "GPU-1a2b3c"));
  CU_ASSERT_DOUBLE_EQUAL(getn(c, "initAgoMs"), 812345.0, 1e-6);
  CU_ASSERT_DOUBLE_EQUAL(getn(c, "sinceProgressMs"), 300.0, 1e-6);
  CU_ASSERT_EQUAL(getn(c, "droppedEvents"), 7);
  CU_ASSERT_EQUAL(getn(c, "staleHandles"), 1);
  /* identity: each communicator beside this process's rank in it and its size (the settle's). */
  cJSON *ids = get(get(d, "identity"), "comms"), *ranks = get(get(d, "identity"), "ranks");
  CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(ids), 2);
  CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(ranks), 2);
  CU_ASSERT(streq(cJSON_GetArrayItem(ids, 0)->valuestring, "0xdeadbeefcafef00d"));
  CU_ASSERT(streq(cJSON_GetArrayItem(ranks, 0)->valuestring, "3/8"));
  char want_rank[32];
  cJSON *second = cJSON_GetArrayItem(comms, 1);
  snprintf(want_rank, sizeof want_rank, "%d/%d", (int)getn(second, "rank"), (int)getn(second, "nranks"));
  CU_ASSERT(streq(cJSON_GetArrayItem(ranks, 1)->valuestring, want_rank));
  cJSON *seq = cJSON_GetArrayItem(get(c, "seq"), 0);
  CU_ASSERT(streq(gets(seq, "func"), "AllReduce"));
  CU_ASSERT_EQUAL(getn(seq, "lastEnqueued"), 42);
  CU_ASSERT_EQUAL(getn(seq, "lastCompleted"), 41);
  CU_ASSERT_EQUAL(getn(get(c, "p2p"), "enqueued"), 120);
  CU_ASSERT_EQUAL(getn(get(c, "p2p"), "completed"), 118);

  /* Two roots, oldest first: the P2p, then the Coll with its tree. */
  cJSON *inflight = get(c, "inflight");
  CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(inflight), 2);
  cJSON *p2p = cJSON_GetArrayItem(inflight, 0);
  CU_ASSERT_EQUAL(getn(p2p, "slot"), 20);
  CU_ASSERT(streq(gets(p2p, "type"), "P2p"));
  CU_ASSERT(streq(gets(p2p, "status"), "enqueued"));
  CU_ASSERT(streq(gets(p2p, "func"), "Send"));
  CU_ASSERT_EQUAL(getn(p2p, "peer"), 5);
  CU_ASSERT(cJSON_IsFalse(get(p2p, "graphCaptured")));
  CU_ASSERT_EQUAL(cJSON_GetArraySize(get(p2p, "children")), 0);

  cJSON *coll = cJSON_GetArrayItem(inflight, 1);
  CU_ASSERT_EQUAL(getn(coll, "slot"), 10);
  CU_ASSERT(streq(gets(coll, "type"), "Coll"));
  CU_ASSERT(cJSON_IsNull(get(coll, "parentSlot")));
  CU_ASSERT(streq(gets(coll, "status"), "stalled"));
  CU_ASSERT(cJSON_IsTrue(get(coll, "stopped")));
  CU_ASSERT(cJSON_IsTrue(get(coll, "graphCaptured")));
  CU_ASSERT(cJSON_IsNull(get(coll, "state")));
  CU_ASSERT_DOUBLE_EQUAL(getn(coll, "ageMs"), 5000.0, 1e-9);
  CU_ASSERT_DOUBLE_EQUAL(getn(coll, "sinceProgressMs"), 300.0, 1e-9);
  CU_ASSERT(streq(gets(coll, "func"), "AllReduce"));
  CU_ASSERT_EQUAL(getn(coll, "seq"), 42);
  CU_ASSERT_EQUAL(getn(coll, "count"), 1048576);
  CU_ASSERT(streq(gets(coll, "datatype"), "ncclFloat32"));
  CU_ASSERT(streq(gets(coll, "algo"), "Ring"));
  CU_ASSERT(streq(gets(coll, "proto"), "Simple"));
  CU_ASSERT_EQUAL(getn(coll, "root"), 0);
  CU_ASSERT_EQUAL(getn(coll, "nChannels"), 2);
  CU_ASSERT_EQUAL(getn(coll, "nWarps"), 8);
  CU_ASSERT_EQUAL(getn(get(coll, "kernelChannels"), "expected"), 2);
  CU_ASSERT_EQUAL(getn(get(coll, "kernelChannels"), "done"), 1);

  cJSON *kids = get(coll, "children");
  CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(kids), 2);
  cJSON *pop = cJSON_GetArrayItem(kids, 0); /* started before the KernelCh */
  CU_ASSERT_EQUAL(getn(pop, "slot"), 11);
  CU_ASSERT(streq(gets(pop, "type"), "ProxyOp"));
  CU_ASSERT_EQUAL(getn(pop, "parentSlot"), 10);
  CU_ASSERT_PTR_NULL(get(pop, "status"));
  CU_ASSERT_EQUAL(getn(pop, "nSteps"), 8);
  CU_ASSERT_EQUAL(getn(pop, "stepsDone"), 4);
  CU_ASSERT_EQUAL(getn(pop, "peer"), 2);
  CU_ASSERT_EQUAL(getn(pop, "chunkSize"), 524288);
  CU_ASSERT(cJSON_IsFalse(get(pop, "isSend")));
  CU_ASSERT_EQUAL(getn(pop, "pid"), 41233);
  cJSON *step = cJSON_GetArrayItem(get(pop, "children"), 0);
  CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(get(pop, "children")), 1);
  CU_ASSERT_EQUAL(getn(step, "slot"), 12);
  CU_ASSERT(streq(gets(step, "type"), "ProxyStep"));
  CU_ASSERT_EQUAL(getn(step, "step"), 4);
  CU_ASSERT(streq(gets(step, "state"), "RecvWait"));
  CU_ASSERT_EQUAL(getn(step, "transSize"), 4096);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(get(step, "children")), 0);
  cJSON *kch = cJSON_GetArrayItem(kids, 1);
  CU_ASSERT_EQUAL(getn(kch, "slot"), 13);
  CU_ASSERT(streq(gets(kch, "type"), "KernelCh"));
  CU_ASSERT(streq(gets(kch, "pTimer"), "0x1234"));
  CU_ASSERT_EQUAL(getn(kch, "channel"), 1);

  /* The CollApi is outside every tree. */
  cJSON *open = get(c, "open");
  CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(open), 1);
  cJSON *api = cJSON_GetArrayItem(open, 0);
  CU_ASSERT_EQUAL(getn(api, "slot"), 5);
  CU_ASSERT(streq(gets(api, "type"), "CollApi"));
  CU_ASSERT(cJSON_IsNull(get(api, "parentSlot")));
  CU_ASSERT_EQUAL(getn(api, "root"), 0);
  CU_ASSERT(streq(gets(api, "func"), "Broad\"cast\n"));

  cJSON *c1 = cJSON_GetArrayItem(comms, 1);
  CU_ASSERT(streq(gets(c1, "commId"), "0x1"));
  CU_ASSERT_EQUAL(cJSON_GetArraySize(get(c1, "inflight")), 0);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(get(c1, "open")), 0);
  CU_ASSERT(cJSON_IsNull(get(c1, "initAgoMs")));
  CU_ASSERT_EQUAL(cJSON_GetArraySize(get(get(c1, "ring"), "records")), 0);
  cJSON_Delete(d);
}

static void test_records(void) {
  fixture f;
  build(&f);
  cJSON *d = render_parse(&f.in);
  cJSON *c = cJSON_GetArrayItem(get(d, "comms"), 0);
  cJSON *ring = get(c, "ring");
  CU_ASSERT_EQUAL(getn(ring, "capacity"), 8192);
  CU_ASSERT_EQUAL(getn(ring, "written"), 1203311);
  CU_ASSERT_EQUAL(getn(ring, "torn"), 2);
  CU_ASSERT_EQUAL(getn(ring, "lost"), 1195119);
  cJSON *recs = get(ring, "records");
  CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(recs), 4);

  cJSON *r0 = cJSON_GetArrayItem(recs, 0);
  CU_ASSERT_EQUAL(getn(r0, "t"), -7000.0 * 1e6);
  CU_ASSERT(streq(gets(r0, "ph"), "start"));
  CU_ASSERT(streq(gets(r0, "type"), "CollApi"));
  CU_ASSERT_EQUAL(getn(r0, "slot"), 5);
  CU_ASSERT(cJSON_IsNull(get(r0, "parent")));
  CU_ASSERT_EQUAL(getn(r0, "tid"), 4242);
  CU_ASSERT(streq(gets(r0, "func"), "AllReduce"));
  CU_ASSERT_PTR_NULL(get(r0, "seq")); /* not a CollApi field */
  CU_ASSERT_PTR_NULL(get(r0, "state"));
  CU_ASSERT_PTR_NULL(get(r0, "graphCaptured"));

  cJSON *r1 = cJSON_GetArrayItem(recs, 1);
  CU_ASSERT(streq(gets(r1, "type"), "Coll"));
  CU_ASSERT_EQUAL(getn(r1, "seq"), 42);
  CU_ASSERT(streq(gets(r1, "algo"), "Ring"));
  CU_ASSERT_EQUAL(getn(r1, "nWarps"), 8);
  CU_ASSERT(cJSON_IsTrue(get(r1, "graphCaptured")));
  cJSON *r2 = cJSON_GetArrayItem(recs, 2);
  CU_ASSERT(streq(gets(r2, "ph"), "stop"));
  CU_ASSERT_PTR_NULL(get(r2, "graphCaptured")); /* flags only when set */
  CU_ASSERT_EQUAL(getn(r2, "t"), -4900.0 * 1e6);
  cJSON *r3 = cJSON_GetArrayItem(recs, 3);
  CU_ASSERT(streq(gets(r3, "type"), "GroupApi"));
  CU_ASSERT_EQUAL(getn(r3, "groupDepth"), 1);

  cJSON *prec = get(get(c, "proxyRing"), "records");
  CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(prec), 9);
  cJSON *p0 = cJSON_GetArrayItem(prec, 0);
  CU_ASSERT(streq(gets(p0, "type"), "ProxyOp"));
  CU_ASSERT_EQUAL(getn(p0, "parent"), 10);
  CU_ASSERT_EQUAL(getn(p0, "nSteps"), 8);
  CU_ASSERT(cJSON_IsFalse(get(p0, "isSend")));
  cJSON *p1 = cJSON_GetArrayItem(prec, 1);
  CU_ASSERT(streq(gets(p1, "ph"), "state"));
  CU_ASSERT(streq(gets(p1, "state"), "RecvWait"));
  CU_ASSERT_EQUAL(getn(p1, "transSize"), 4096);
  CU_ASSERT_EQUAL(getn(p1, "step"), 4);
  cJSON *p2 = cJSON_GetArrayItem(prec, 2);
  CU_ASSERT(streq(gets(p2, "state"), "KernelChStop"));
  CU_ASSERT(streq(gets(p2, "pTimer"), "0x5678"));
  cJSON *p3 = cJSON_GetArrayItem(prec, 3);
  CU_ASSERT(streq(gets(p3, "type"), "ProxyCtrl"));
  CU_ASSERT(streq(gets(p3, "state"), "Append"));
  CU_ASSERT_EQUAL(getn(p3, "appendedProxyOps"), 3);
  cJSON *p4 = cJSON_GetArrayItem(prec, 4);
  CU_ASSERT(streq(gets(p4, "type"), "NetPlugin"));
  CU_ASSERT(streq(gets(p4, "id"), "0xabcdef"));
  cJSON *p5 = cJSON_GetArrayItem(prec, 5);
  CU_ASSERT(streq(gets(p5, "ph"), "stop"));
  CU_ASSERT(cJSON_IsTrue(get(p5, "abandoned")));
  CU_ASSERT_PTR_NULL(get(p5, "transSize")); /* a stop without a state has none */
  CU_ASSERT_PTR_NULL(get(p5, "lastState"));
  cJSON *p6 = cJSON_GetArrayItem(prec, 6);
  CU_ASSERT(streq(gets(p6, "ph"), "stop"));
  CU_ASSERT(streq(gets(p6, "lastState"), "RecvWait"));
  CU_ASSERT_EQUAL(getn(p6, "transSize"), 8192);
  CU_ASSERT_PTR_NULL(get(p6, "state"));
  cJSON *p7 = cJSON_GetArrayItem(prec, 7);
  CU_ASSERT(streq(gets(p7, "lastState"), "KernelChStop"));
  CU_ASSERT(streq(gets(p7, "pTimer"), "0x1234"));
  CU_ASSERT(streq(gets(p7, "pTimerStop"), "0x9abc"));
  cJSON *p8 = cJSON_GetArrayItem(prec, 8);
  CU_ASSERT(streq(gets(p8, "ph"), "span"));
  CU_ASSERT_EQUAL(getn(p8, "t"), -1.0 * 1e6);
  CU_ASSERT_EQUAL(getn(p8, "dur"), 2.0 * 1e6);
  CU_ASSERT(streq(gets(p8, "lastState"), "RecvGPUWait"));
  CU_ASSERT_EQUAL(getn(p8, "transSize"), 1024);
  CU_ASSERT_EQUAL(getn(p8, "step"), 4);
  CU_ASSERT_PTR_NULL(get(p8, "raw")); /* not a detached event's */
  CU_ASSERT_EQUAL(getn(p5, "t"), 0);
  cJSON_Delete(d);
}

static void test_detached_threads(void) {
  fixture f;
  build(&f);
  cJSON *d = render_parse(&f.in);
  cJSON *det = get(d, "detached");
  cJSON *o = cJSON_GetArrayItem(get(det, "open"), 0);
  CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(get(det, "open")), 1);
  CU_ASSERT_EQUAL(getn(o, "slot"), (double)(WD_SLOT_DETACHED_BIT | 1));
  CU_ASSERT(streq(gets(o, "parentSlot"), "foreign"));
  CU_ASSERT(streq(gets(o, "raw"), "0xabc"));
  CU_ASSERT(cJSON_IsTrue(get(o, "detached")));
  CU_ASSERT(cJSON_IsTrue(get(o, "isSend")));
  cJSON *dr = cJSON_GetArrayItem(get(get(det, "ring"), "records"), 0);
  CU_ASSERT(streq(gets(dr, "raw"), "0xabc"));
  CU_ASSERT(streq(gets(dr, "parent"), "foreign"));
  CU_ASSERT_EQUAL(getn(dr, "pid"), 999);

  cJSON *th = get(d, "threads");
  CU_ASSERT_EQUAL(getn(th, "asked"), 1);
  CU_ASSERT_EQUAL(getn(th, "answered"), 1);
  cJSON *list = get(th, "list");
  CU_ASSERT_EQUAL_FATAL(cJSON_GetArraySize(list), 2);
  cJSON *t0 = cJSON_GetArrayItem(list, 0);
  CU_ASSERT_EQUAL(getn(t0, "tid"), 41233);
  CU_ASSERT(streq(gets(t0, "name"), "python"));
  CU_ASSERT(streq(gets(t0, "status"), "ok"));
  cJSON *fr0 = cJSON_GetArrayItem(get(t0, "frames"), 0);
  CU_ASSERT(streq(gets(fr0, "pc"), "0x7f3a12345678"));
  CU_ASSERT(streq(gets(fr0, "module"), "/lib/libc.so.6"));
  CU_ASSERT(streq(gets(fr0, "moduleOffset"), "0x91234"));
  CU_ASSERT(streq(gets(fr0, "symbol"), "pthread_cond_wait"));
  CU_ASSERT_EQUAL(getn(fr0, "symbolOffset"), 123);
  /* A demangled C++ frame keeps its raw name beside. */
  cJSON *fr2 = cJSON_GetArrayItem(get(t0, "frames"), 2);
  CU_ASSERT(streq(gets(fr2, "symbol"), "c10d::ProcessGroupNCCL::wait()"));
  CU_ASSERT(streq(gets(fr2, "mangled"), "_ZN4c10d16ProcessGroupNCCL4waitEv"));
  CU_ASSERT_PTR_NULL(get(fr0, "mangled"));
  cJSON *fr1 = cJSON_GetArrayItem(get(t0, "frames"), 1);
  CU_ASSERT_PTR_NULL(get(fr1, "symbol"));
  CU_ASSERT_PTR_NULL(get(fr1, "symbolOffset"));
  cJSON *t1 = cJSON_GetArrayItem(list, 1);
  CU_ASSERT(streq(gets(t1, "status"), "no_answer"));
  CU_ASSERT_EQUAL(cJSON_GetArraySize(get(t1, "frames")), 0);
  cJSON *m = cJSON_GetArrayItem(get(d, "modules"), 0);
  CU_ASSERT(streq(gets(m, "path"), "/lib/libc.so.6"));
  CU_ASSERT(streq(gets(m, "start"), "0x7f3a12200000"));
  CU_ASSERT(streq(gets(m, "end"), "0x7f3a12400000"));
  CU_ASSERT(streq(gets(m, "offset"), "0x28000"));
  cJSON_Delete(d);

  f.in.threads = NULL;
  d = render_parse(&f.in);
  CU_ASSERT(cJSON_IsTrue(get(get(d, "threads"), "disabled")));
  CU_ASSERT_EQUAL(cJSON_GetArraySize(get(d, "modules")), 0);
  cJSON_Delete(d);
}

static void test_triggers(void) {
  fixture f;
  build(&f);
  f.in.reason = "signal";
  f.in.nstalls = 0;
  f.in.signo = SIGUSR1;
  f.in.sender_pid = 7781;
  cJSON *d = render_parse(&f.in);
  cJSON *t = get(d, "trigger");
  CU_ASSERT(streq(gets(t, "signal"), "SIGUSR1"));
  CU_ASSERT_EQUAL(getn(t, "senderPid"), 7781);
  CU_ASSERT_PTR_NULL(get(t, "stalls"));
  cJSON_Delete(d);

  f.in.reason = "peer";
  f.in.signo = 0;
  f.in.peer_trigger = "trigger-node003-4567-1.trigger";
  f.in.peer_trigger_json = "{\"host\":\"node003\",\"pid\":4567,\"stalls\":[],\"dump\":\"x.json\"}";
  d = render_parse(&f.in);
  t = get(d, "trigger");
  CU_ASSERT(streq(gets(t, "file"), "trigger-node003-4567-1.trigger"));
  CU_ASSERT(streq(gets(get(t, "origin"), "host"), "node003"));
  CU_ASSERT_EQUAL(getn(get(t, "origin"), "pid"), 4567);
  cJSON_Delete(d);

  f.in.peer_trigger_json = "not json {";
  d = render_parse(&f.in);
  CU_ASSERT(cJSON_IsNull(get(get(d, "trigger"), "origin")));
  cJSON_Delete(d);
}

/* Bytes that are not UTF-8 must not make the document unparsable for strict readers. */
static void test_invalid_utf8(void) {
  fixture f;
  build(&f);
  snprintf(f.comms[0].name, sizeof(f.comms[0].name), "bad\xff\xfe\xc3(end");
  snprintf(f.threads[0].name, sizeof(f.threads[0].name), "t\x80x");
  char *s = wd_dump_render(&f.in);
  CU_ASSERT_PTR_NOT_NULL_FATAL(s);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) CU_ASSERT_FATAL(*p != 0xff && *p != 0x80);
  cJSON *d = cJSON_Parse(s);
  free(s);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  const char *name = gets(cJSON_GetArrayItem(get(d, "comms"), 0), "commName");
  CU_ASSERT(streq(name, "bad\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd(end"));
  cJSON_Delete(d);
}

static int count_nodes(const cJSON *arr, int *max_depth, int depth) {
  int n = 0;
  if (depth > *max_depth) *max_depth = depth;
  const cJSON *it;
  cJSON_ArrayForEach(it, arr) n += 1 + count_nodes(get(it, "children"), max_depth, depth + 1);
  return n;
}

/* 50,000 live events: every one appears exactly once, nested under its parent. */
static void test_big_forest(void) {
  fixture f;
  build(&f);
  /* Per root: the root, 2 x (ProxyOp + 10 ProxySteps + KernelCh) under it, and one GroupApi
   * outside the tree: 26 events, 52,000 in all. */
  enum { NROOT = 2000, TREE = 25, PER = 26 };
  uint32_t n = NROOT * PER;
  wd_ev_snap *evs = calloc(n, sizeof(*evs));
  CU_ASSERT_PTR_NOT_NULL_FATAL(evs);
  uint32_t k = 0, slot = 0;
  for (uint32_t r = 0; r < NROOT; r++) {
    uint32_t rs = slot++;
    wd_record root = rec(WD_T_COLL, WD_PH_START, rs, WD_SLOT_NONE, (uint64_t)(NROOT - r) * MS);
    coll_fields(&root);
    evs[k] = ev(root, 1);
    evs[k].is_root = 1;
    evs[k++].status = WD_OP_REACHED;
    for (int p = 0; p < 2; p++) {
      uint32_t ps = slot++;
      evs[k++] = ev(rec(WD_T_PROXYOP, WD_PH_START, ps, rs, 1000), 1);
      for (int s = 0; s < 10; s++) evs[k++] = ev(rec(WD_T_PROXYSTEP, WD_PH_START, slot++, ps, 500), 1);
      evs[k++] = ev(rec(WD_T_KERNELCH, WD_PH_START, slot++, rs, 900), 1);
    }
    evs[k++] = ev(rec(WD_T_GROUPAPI, WD_PH_START, slot++, WD_SLOT_NONE, 100), 1); /* open */
  }
  CU_ASSERT_EQUAL_FATAL(k, n);
  /* Shuffle deterministically so nothing depends on input order. */
  srand(7);
  for (uint32_t i = n - 1; i > 0; i--) {
    uint32_t j = (uint32_t)rand() % (i + 1);
    wd_ev_snap t = evs[i];
    evs[i] = evs[j];
    evs[j] = t;
  }
  f.comms[0].events = evs;
  f.comms[0].nevents = n;
  cJSON *d = render_parse(&f.in);
  cJSON *c = cJSON_GetArrayItem(get(d, "comms"), 0);
  int depth = 0;
  cJSON *inflight = get(c, "inflight");
  CU_ASSERT_EQUAL(cJSON_GetArraySize(inflight), NROOT);
  CU_ASSERT_EQUAL(count_nodes(inflight, &depth, 0), NROOT * TREE);
  CU_ASSERT_EQUAL(depth, 3);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(get(c, "open")), NROOT);
  /* Oldest first. */
  CU_ASSERT_EQUAL(getn(cJSON_GetArrayItem(inflight, 0), "slot"), 0);
  CU_ASSERT_DOUBLE_EQUAL(getn(cJSON_GetArrayItem(inflight, 0), "ageMs"), NROOT, 1e-9);
  cJSON_Delete(d);
  free(evs);
}

/* Parent cycles and self-parents cannot hang or duplicate anything. */
static void test_cycles(void) {
  fixture f;
  build(&f);
  wd_ev_snap evs[4];
  evs[0] = ev(rec(WD_T_PROXYOP, WD_PH_START, 1, 2, 10), 1);
  evs[1] = ev(rec(WD_T_PROXYOP, WD_PH_START, 2, 1, 20), 1);
  evs[2] = ev(rec(WD_T_PROXYSTEP, WD_PH_START, 3, 3, 30), 1);
  evs[3] = ev(rec(WD_T_PROXYSTEP, WD_PH_START, 4, 1, 40), 1);
  f.comms[0].events = evs;
  f.comms[0].nevents = 4;
  f.in.detached = evs;
  f.in.ndetached = 4;
  cJSON *d = render_parse(&f.in);
  int depth = 0;
  cJSON *c = cJSON_GetArrayItem(get(d, "comms"), 0);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(get(c, "inflight")), 0);
  CU_ASSERT_EQUAL(cJSON_GetArraySize(get(c, "open")), 4);
  CU_ASSERT_EQUAL(count_nodes(get(get(d, "detached"), "open"), &depth, 0), 4);
  cJSON_Delete(d);
}

/* wd_dump_write: the file holds the document; then the schema validator accepts it. */
static void test_write_and_validate(void) {
  fixture f;
  build(&f);
  char dir[PATH_MAX];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof(dir), "%s/wd-test-dump-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
  char path[4096];
  CU_ASSERT_EQUAL_FATAL(wd_dump_write(&f.in, dir, path, sizeof(path)), 0);
  char want[PATH_MAX + 64];
  snprintf(want, sizeof(want), "%s/node017-41233-0003-stall.json", dir);
  CU_ASSERT(streq(path, want));
  FILE *fp = fopen(path, "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
  fseek(fp, 0, SEEK_END);
  long len = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  char *buf = malloc((size_t)len + 1);
  CU_ASSERT_EQUAL(fread(buf, 1, (size_t)len, fp), (size_t)len);
  buf[len] = 0;
  fclose(fp);
  cJSON *d = cJSON_Parse(buf);
  free(buf);
  CU_ASSERT_PTR_NOT_NULL_FATAL(d);
  CU_ASSERT(streq(gets(d, "reason"), "stall"));
  cJSON_Delete(d);

  /* The validator lives next to this file's directory: tests/tools/validate_dump.py. */
  char src[PATH_MAX];
  snprintf(src, sizeof(src), "%s", __FILE__);
  char *slash = strrchr(src, '/');
  if (slash) *slash = 0; else snprintf(src, sizeof(src), ".");
  char validator[PATH_MAX + 64];
  snprintf(validator, sizeof(validator), "%s/../tools/validate_dump.py", src);
  if (access(validator, R_OK) != 0) {
    printf("\n  [skip] validator not found at %s\n", validator);
  } else if (system("python3 -c 'import jsonschema' >/dev/null 2>&1") != 0) {
    printf("\n  [skip] python3 or its jsonschema module is missing: schema validation not run\n");
  } else {
    /* Other shapes: a signal dump without backtraces, a peer dump. */
    char path2[4096], path3[4096];
    f.in.reason = "signal";
    f.in.nstalls = 0;
    f.in.signo = SIGUSR1;
    f.in.threads = NULL;
    CU_ASSERT_EQUAL_FATAL(wd_dump_write(&f.in, dir, path2, sizeof(path2)), 0);
    f.in.reason = "peer";
    f.in.signo = 0;
    f.in.peer_trigger = "trigger-node003-4567-1.trigger";
    f.in.peer_trigger_json = "{\"host\":\"node003\",\"pid\":4567,\"stalls\":[]}";
    CU_ASSERT_EQUAL_FATAL(wd_dump_write(&f.in, dir, path3, sizeof(path3)), 0);
    char cmd[6 * PATH_MAX + 64];
    snprintf(cmd, sizeof(cmd), "python3 '%s' '%s' '%s' '%s'", validator, path, path2, path3);
    CU_ASSERT_EQUAL(system(cmd), 0);
    unlink(path2);
    unlink(path3);
    /* The validator must also reject a broken dump. */
    snprintf(want, sizeof(want), "%s/broken.json", dir);
    fp = fopen(want, "w");
    fputs("{\"format\": \"nccl-watchdog-dump\", \"version\": 2}", fp);
    fclose(fp);
    snprintf(cmd, sizeof(cmd), "python3 '%s' '%s' 2>/dev/null", validator, want);
    CU_ASSERT_NOT_EQUAL(system(cmd), 0);
    unlink(want);
  }
  unlink(path);
  rmdir(dir);
}

int main(void) {
  s_allreduce = wd_str_id("AllReduce");
  s_f32 = wd_str_id("ncclFloat32");
  s_ring = wd_str_id("Ring");
  s_simple = wd_str_id("Simple");
  s_send = wd_str_id("Send");
  s_bcast = wd_str_id("Broad\"cast\n");
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("dump", NULL, NULL);
  CU_add_test(s, "top level, trigger, config, strings", test_top_level);
  CU_add_test(s, "env: NCCL_* and job variables, escaped", test_env);
  CU_add_test(s, "comms: fields and open trees", test_comm_and_trees);
  CU_add_test(s, "ring records", test_records);
  CU_add_test(s, "detached events and threads", test_detached_threads);
  CU_add_test(s, "signal and peer triggers", test_triggers);
  CU_add_test(s, "invalid UTF-8 is replaced", test_invalid_utf8);
  CU_add_test(s, "50,000 live events", test_big_forest);
  CU_add_test(s, "parent cycles", test_cycles);
  CU_add_test(s, "write and validate against the schema", test_write_and_validate);
  return wd_test_run();
}
