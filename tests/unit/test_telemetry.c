/* Telemetry: the ring's incremental reader, the aggregates built from records as the plugin
 * writes them (record.h), and the OTLP request's wire format. */
#include <CUnit/Basic.h>
#include <stdlib.h>
#include <string.h>

#include "events/context.h"
#include "flightrec/ring.h"
#include "flightrec/strtab.h"
#include "telemetry/aggregate.h"
#include "telemetry/otlp.h"
#include "wd_test_util.h"

static void put(wd_ring *r, unsigned type, unsigned phase, uint32_t slot, uint32_t parent) {
  wd_record rec;
  memset(&rec, 0, sizeof rec);
  rec.type = (uint8_t)type;
  rec.phase = (uint8_t)phase;
  rec.slot = slot;
  rec.parent = parent;
  wd_ring_write(r, &rec);
}

static void test_read_since(void) {
  wd_ring r;
  CU_ASSERT_EQUAL_FATAL(wd_ring_init(&r, 16), 0);
  wd_record out[64];
  uint64_t cur = 0, missed = 99;
  CU_ASSERT_EQUAL(wd_ring_read_since(&r, &cur, out, 64, &missed), 0);
  CU_ASSERT_EQUAL(missed, 0);
  for (uint32_t i = 0; i < 10; i++) put(&r, WD_T_COLL, WD_PH_START, i, WD_SLOT_NONE);
  /* In chunks: 4, 4, 2, then nothing new. */
  CU_ASSERT_EQUAL(wd_ring_read_since(&r, &cur, out, 4, &missed), 4);
  CU_ASSERT_EQUAL(out[0].slot, 0);
  CU_ASSERT_EQUAL(wd_ring_read_since(&r, &cur, out, 4, &missed), 4);
  CU_ASSERT_EQUAL(out[0].slot, 4);
  CU_ASSERT_EQUAL(wd_ring_read_since(&r, &cur, out, 4, &missed), 2);
  CU_ASSERT_EQUAL(out[1].slot, 9);
  CU_ASSERT_EQUAL(cur, 10);
  CU_ASSERT_EQUAL(wd_ring_read_since(&r, &cur, out, 4, &missed), 0);
  /* 40 more into 16 places: 24 are gone, the newest 16 read. */
  for (uint32_t i = 10; i < 50; i++) put(&r, WD_T_COLL, WD_PH_START, i, WD_SLOT_NONE);
  CU_ASSERT_EQUAL(wd_ring_read_since(&r, &cur, out, 64, &missed), 16);
  CU_ASSERT_EQUAL(missed, 24);
  CU_ASSERT_EQUAL(out[0].slot, 34);
  CU_ASSERT_EQUAL(out[15].slot, 49);
  /* A cleared ring (a recycled context) starts the reader over. */
  wd_ring_clear(&r);
  put(&r, WD_T_COLL, WD_PH_START, 7, WD_SLOT_NONE);
  CU_ASSERT_EQUAL(wd_ring_read_since(&r, &cur, out, 64, &missed), 0);
  CU_ASSERT_EQUAL(cur, 1);
  wd_ring_destroy(&r);
}

static wd_context *new_ctx(uint64_t id, const char *name) {
  wd_context *c = wd_context_alloc(64, 1024, 1024, NULL, 0);
  CU_ASSERT_PTR_NOT_NULL_FATAL(c);
  wd_context_bind(c, 6, id, name, 1, 4, 0, 1, 0, 0);
  return c;
}

/* A collective as the plugin records it: its start (operation ring), then in the proxy ring
 * per link a ProxyOp span with `steps` step spans under it (each `step_ns` long, chunk bytes),
 * and one KernelCh span per channel. Returns the time of its last stop. */
enum { COLL_SLOT = 5 };
static uint64_t coll(wd_context *c, uint64_t t0, int64_t seq, int nlinks, uint64_t step_ns, int steps) {
  wd_record r;
  memset(&r, 0, sizeof r);
  r.type = WD_T_COLL;
  r.phase = WD_PH_START;
  r.slot = COLL_SLOT;
  r.parent = WD_SLOT_NONE;
  r.a = (uint64_t)seq;
  r.count = 1 << 20;
  r.func = wd_str_id("AllReduce");
  r.dtype = wd_str_id("ncclFloat32");
  r.ts_ns = t0;
  wd_ring_write(&c->ring, &r);
  uint64_t end = t0;
  for (int l = 0; l < nlinks; l++) {
    uint32_t op = WD_SLOT_PROXY_BIT | (uint32_t)(10 + l);
    uint64_t t = t0 + 1000;
    for (int s = 0; s < steps; s++) {
      memset(&r, 0, sizeof r);
      r.type = WD_T_PROXYSTEP;
      r.phase = WD_PH_SPAN;
      r.slot = WD_SLOT_PROXY_BIT | (uint32_t)(100 + s);
      r.parent = op;
      r.raw = t;
      r.ts_ns = t + step_ns * (l == nlinks - 1 ? 10 : 1); /* the last link is slow */
      r.count = 131072;
      wd_ring_write(&c->proxy_ring, &r);
      t = r.ts_ns;
    }
    memset(&r, 0, sizeof r);
    r.type = WD_T_PROXYOP;
    r.phase = WD_PH_SPAN;
    r.flags = WD_F_SEND | WD_F_SPAN;
    r.slot = op;
    r.parent = COLL_SLOT;
    r.peer = 1 + l;
    r.channel = (uint8_t)l;
    r.raw = t0 + 500;
    r.ts_ns = t + 10;
    wd_ring_write(&c->proxy_ring, &r);
    if (r.ts_ns > end) end = r.ts_ns;
  }
  memset(&r, 0, sizeof r);
  r.type = WD_T_KERNELCH;
  r.phase = WD_PH_SPAN;
  r.slot = 200;
  r.parent = COLL_SLOT;
  r.raw = t0 + 200;
  r.ts_ns = end;
  r.a = 1000000;
  r.count = 1000000 + 3000; /* 3 us on the GPU's clock */
  wd_ring_write(&c->proxy_ring, &r);
  atomic_store(&c->seq_done[wd_str_id("AllReduce")], seq);
  return end;
}

static const wd_tm_link *find_link(const wd_tm_view *v, int peer) {
  for (uint32_t i = 0; i < v->nlinks; i++)
    if (v->links[i].peer == peer) return &v->links[i];
  return NULL;
}

static void test_aggregate(void) {
  CU_ASSERT_EQUAL_FATAL(wd_tm_open(64), 0);
  wd_context *c = new_ctx(0xabc, "agg");
  uint64_t end = coll(c, 1000000, 0, 3, 100000, 4);
  wd_tm_note(c);
  wd_tm_end_poll();
  wd_tm_interval();
  wd_tm_view v;
  wd_tm_get(&v);
  CU_ASSERT_EQUAL(v.ncomms, 1);
  CU_ASSERT_STRING_EQUAL(v.comms[0].name, "agg");
  CU_ASSERT_EQUAL(v.nlinks, 3);
  const wd_tm_link *fast = find_link(&v, 1), *slow = find_link(&v, 3);
  CU_ASSERT_PTR_NOT_NULL_FATAL(fast);
  CU_ASSERT_PTR_NOT_NULL_FATAL(slow);
  CU_ASSERT_EQUAL(fast->bytes, 4 * 131072);
  CU_ASSERT_EQUAL(fast->steps, 4);
  CU_ASSERT_DOUBLE_EQUAL(fast->step_s, 4 * 100000 / 1e9, 1e-12);
  CU_ASSERT_DOUBLE_EQUAL(slow->step_s, 4 * 1000000 / 1e9, 1e-12);
  CU_ASSERT_TRUE(fast->send);
  /* Throughput over busy time: ten times slower steps, ten times lower. */
  CU_ASSERT_DOUBLE_EQUAL(fast->rate / slow->rate, 10.0, 1e-9);
  /* One AllReduce of 4 MiB: enqueue to its last child's stop; the kernel's 3 us. */
  CU_ASSERT_EQUAL(v.nfuncs, 1);
  CU_ASSERT_STRING_EQUAL(wd_str(v.funcs[0].func), "AllReduce");
  CU_ASSERT_STRING_EQUAL(wd_tm_class_names[v.funcs[0].size_class], "1MiB-16MiB");
  CU_ASSERT_EQUAL(v.funcs[0].host.count, 1);
  CU_ASSERT_DOUBLE_EQUAL(v.funcs[0].host.sum, (double)(end - 1000000) / 1e9, 1e-12);
  CU_ASSERT_EQUAL(v.funcs[0].gpu.count, 1);
  CU_ASSERT_DOUBLE_EQUAL(v.funcs[0].gpu.sum, 3e-6, 1e-12);
  CU_ASSERT_EQUAL(v.comms[0].colls, 1);
  CU_ASSERT_EQUAL(v.records_missed, 0);

  /* A collective not yet completed by NCCL's counters waits for a later poll. */
  uint64_t t1 = end + 1000000;
  coll(c, t1, 1, 1, 100000, 2);
  atomic_store(&c->seq_done[wd_str_id("AllReduce")], 0);
  wd_tm_note(c);
  wd_tm_end_poll();
  wd_tm_get(&v);
  CU_ASSERT_EQUAL(v.funcs[0].host.count, 1);
  atomic_store(&c->seq_done[wd_str_id("AllReduce")], 1);
  wd_tm_note(c);
  wd_tm_end_poll();
  wd_tm_get(&v);
  CU_ASSERT_EQUAL(v.funcs[0].host.count, 2);

  /* Arrival: the mean wait of the last interval against the rank's own history. */
  wd_tm_interval();
  wd_tm_get(&v);
  CU_ASSERT_TRUE(v.comms[0].have_recent);

  /* A context the poll did not see was freed: its communicator and links go. */
  wd_tm_end_poll();
  wd_tm_get(&v);
  CU_ASSERT_EQUAL(v.ncomms, 0);
  CU_ASSERT_EQUAL(v.nlinks, 0);
  wd_context_free(c);
  wd_tm_close();
}

/* Steps older than their ProxyOp belong to an earlier op on the same slot whose own span was
 * lost: they are not counted for the new one. */
static void test_stale_steps(void) {
  CU_ASSERT_EQUAL_FATAL(wd_tm_open(64), 0);
  wd_context *c = new_ctx(0xdef, "stale");
  wd_record r;
  memset(&r, 0, sizeof r);
  r.type = WD_T_PROXYSTEP;
  r.phase = WD_PH_SPAN;
  r.parent = WD_SLOT_PROXY_BIT | 3;
  r.raw = 100;
  r.ts_ns = 200;
  r.count = 999;
  wd_ring_write(&c->proxy_ring, &r);
  memset(&r, 0, sizeof r);
  r.type = WD_T_PROXYOP;
  r.phase = WD_PH_SPAN;
  r.slot = WD_SLOT_PROXY_BIT | 3;
  r.parent = WD_SLOT_NONE;
  r.peer = 1;
  r.raw = 5000; /* started after that step */
  r.ts_ns = 6000;
  wd_ring_write(&c->proxy_ring, &r);
  wd_tm_note(c);
  wd_tm_view v;
  wd_tm_get(&v);
  CU_ASSERT_EQUAL(v.nlinks, 0);
  wd_context_free(c);
  wd_tm_close();
}

/* Thousands of peers (AlltoAll), 16 link rows allowed: one folded row per communicator holds
 * the rest, counted; memory stays what wd_tm_open sized. */
static void test_fold(void) {
  enum { PEERS = 5000, BATCH = 400 };
  CU_ASSERT_EQUAL_FATAL(wd_tm_open(16), 0);
  wd_context *c = new_ctx(0x123, "fold");
  for (int peer = 0; peer < PEERS; peer++) {
    wd_record r;
    memset(&r, 0, sizeof r);
    r.type = WD_T_PROXYSTEP;
    r.phase = WD_PH_SPAN;
    r.parent = WD_SLOT_PROXY_BIT | (uint32_t)(peer % 200);
    r.raw = 100;
    r.ts_ns = 200;
    r.count = 10;
    wd_ring_write(&c->proxy_ring, &r);
    memset(&r, 0, sizeof r);
    r.type = WD_T_PROXYOP;
    r.phase = WD_PH_SPAN;
    r.slot = WD_SLOT_PROXY_BIT | (uint32_t)(peer % 200);
    r.parent = WD_SLOT_NONE;
    r.peer = peer;
    r.raw = 50;
    r.ts_ns = 300;
    wd_ring_write(&c->proxy_ring, &r);
    if (peer % BATCH == BATCH - 1) wd_tm_note(c); /* a poll: the ring holds 1,024 */
  }
  wd_tm_note(c);
  wd_tm_view v;
  wd_tm_get(&v);
  CU_ASSERT_EQUAL(v.nlinks, 16);
  CU_ASSERT_EQUAL(v.records_missed, 0);
  const wd_tm_link *other = find_link(&v, -1);
  CU_ASSERT_PTR_NOT_NULL_FATAL(other);
  CU_ASSERT_EQUAL(v.links_folded, PEERS - 15);
  CU_ASSERT_EQUAL(other->bytes, (uint64_t)(PEERS - 15) * 10);
  wd_context_free(c);
  wd_tm_close();
}

static void test_classes(void) {
  CU_ASSERT_EQUAL(wd_tm_dtype_size("ncclFloat32"), 4);
  CU_ASSERT_EQUAL(wd_tm_dtype_size("ncclBfloat16"), 2);
  CU_ASSERT_EQUAL(wd_tm_dtype_size("ncclFloat8e4m3"), 1);
  CU_ASSERT_EQUAL(wd_tm_dtype_size("ncclUint64"), 8);
  CU_ASSERT_EQUAL(wd_tm_dtype_size(NULL), 0);
  CU_ASSERT_EQUAL(wd_tm_size_class(0), 0);
  CU_ASSERT_EQUAL(wd_tm_size_class(65535), 0);
  CU_ASSERT_EQUAL(wd_tm_size_class(65536), 1);
  CU_ASSERT_EQUAL(wd_tm_size_class(4u << 20), 2);
  CU_ASSERT_EQUAL(wd_tm_size_class(16u << 20), 3);
  CU_ASSERT_EQUAL(wd_tm_size_class(1ull << 40), 4);
  wd_tm_hist h;
  memset(&h, 0, sizeof h);
  wd_tm_observe(&h, 1e-5); /* on a bound: that bucket (le) */
  wd_tm_observe(&h, 1000);  /* beyond the last: +Inf */
  CU_ASSERT_EQUAL(h.buckets[0], 1);
  CU_ASSERT_EQUAL(h.buckets[WD_TM_NBOUNDS], 1);
  CU_ASSERT_EQUAL(h.count, 2);
}

/* ---- OTLP: walk the protobuf as a decoder would --------------------------------------- */

static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (int s = 0; s < 64 && *p < end; s += 7) {
    uint8_t c = *(*p)++;
    *v |= (uint64_t)(c & 0x7f) << s;
    if (!(c & 0x80)) return 0;
  }
  return -1;
}

/* Calls fn for each field of the message in [p, end); -1 when the bytes do not parse. */
typedef int (*field_fn)(unsigned field, unsigned wire, const uint8_t *v, size_t n, void *arg);
static int walk(const uint8_t *p, const uint8_t *end, field_fn fn, void *arg) {
  while (p < end) {
    uint64_t key, n = 0;
    if (varint(&p, end, &key)) return -1;
    unsigned wire = key & 7, field = (unsigned)(key >> 3);
    const uint8_t *v = p;
    if (wire == 0) {
      if (varint(&p, end, &n)) return -1;
    } else if (wire == 1) {
      if (end - p < 8) return -1;
      p += 8;
    } else if (wire == 2) {
      if (varint(&p, end, &n) || (uint64_t)(end - p) < n) return -1;
      v = p;
      p += n;
    } else {
      return -1;
    }
    if (fn && fn(field, wire, v, (size_t)(wire == 2 ? n : 0), arg)) return -1;
  }
  return 0;
}

typedef struct found {
  int metrics;
  int link_io, long_name;
  char names[32][64];
} found;

static int on_string(unsigned field, unsigned wire, const uint8_t *v, size_t n, void *arg);

/* Every length-delimited field that parses as a message is walked too (strings that happen to
 * parse are harmless): a wrong length anywhere makes the walk fail. */
static int deep(unsigned field, unsigned wire, const uint8_t *v, size_t n, void *arg) {
  (void)field;
  if (wire != 2) return 0;
  on_string(field, wire, v, n, arg);
  walk(v, v + n, deep, arg);
  return 0;
}

static int on_string(unsigned field, unsigned wire, const uint8_t *v, size_t n, void *arg) {
  found *f = arg;
  (void)field, (void)wire;
  if (n == strlen("nccl.watchdog.link.io") && !memcmp(v, "nccl.watchdog.link.io", n)) f->link_io++;
  if (n == 300) {
    int all = 1;
    for (size_t i = 0; i < n; i++) all &= v[i] == 'x';
    f->long_name += all;
  }
  return 0;
}

static int on_scope(unsigned field, unsigned wire, const uint8_t *v, size_t n, void *arg) {
  found *f = arg;
  if (field == 2 && wire == 2) { /* ScopeMetrics.metrics: Metric { name = 1 } */
    const uint8_t *p = v, *end = v + n;
    uint64_t key, len;
    if (varint(&p, end, &key) || key != (1 << 3 | 2) || varint(&p, end, &len) || len >= 64) return -1;
    if (f->metrics < 32) memcpy(f->names[f->metrics], p, len), f->names[f->metrics][len] = '\0';
    f->metrics++;
  }
  return 0;
}

static int on_rm(unsigned field, unsigned wire, const uint8_t *v, size_t n, void *arg) {
  return field == 2 && wire == 2 ? walk(v, v + n, on_scope, arg) : 0;
}

static int on_req(unsigned field, unsigned wire, const uint8_t *v, size_t n, void *arg) {
  return field == 1 && wire == 2 ? walk(v, v + n, on_rm, arg) : -1;
}

static void test_otlp(void) {
  wd_tm_comm comm;
  memset(&comm, 0, sizeof comm);
  memset(comm.name, 'x', 127);
  comm.comm_id = 0x42;
  comm.have_recent = 1;
  wd_tm_link links[200];
  memset(links, 0, sizeof links);
  for (int i = 0; i < 200; i++) links[i] = (wd_tm_link){.comm = 0, .peer = i, .bytes = 1000u * (unsigned)i, .steps = 1, .rate = 1e9};
  wd_tm_func fn;
  memset(&fn, 0, sizeof fn);
  fn.func = wd_str_id("AllReduce");
  wd_tm_observe(&fn.host, 0.001);
  wd_tm_view v = {.funcs = &fn, .nfuncs = 1, .comms = &comm, .ncomms = 1, .links = links, .nlinks = 200};
  /* A 300-byte communicator name: submessages whose lengths take two and three bytes. */
  char longname[301];
  memset(longname, 'x', 300);
  longname[300] = '\0';
  wd_otlp_comm health = {0x42, longname, 0, 4, 2, 1.5};
  wd_otlp_resource("host-a", 1234);
  wd_otlp_input in = {&v, &health, 1, 3, 4, 1000, 2000};
  uint8_t *body = NULL;
  size_t len = 0;
  CU_ASSERT_EQUAL_FATAL(wd_otlp_encode(&in, &body, &len), 0);
  CU_ASSERT_TRUE(len > 16384); /* the scope's length takes three bytes */
  found f;
  memset(&f, 0, sizeof f);
  CU_ASSERT_EQUAL(walk(body, body + len, on_req, &f), 0);
  CU_ASSERT_TRUE(f.metrics >= 10);
  int have_hist = 0, have_rate = 0;
  for (int i = 0; i < f.metrics && i < 32; i++) {
    have_hist |= !strcmp(f.names[i], "nccl.watchdog.collective.duration");
    have_rate |= !strcmp(f.names[i], "nccl.watchdog.link.throughput");
  }
  CU_ASSERT_TRUE(have_hist);
  CU_ASSERT_TRUE(have_rate);
  CU_ASSERT_EQUAL(walk(body, body + len, deep, &f), 0);
  CU_ASSERT_EQUAL(f.link_io, 1);
  CU_ASSERT_EQUAL(f.long_name, 2); /* in both health metrics */
  free(body);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("telemetry", NULL, NULL);
  CU_add_test(s, "the ring read from poll to poll", test_read_since);
  CU_add_test(s, "links, collectives and kernels from the records", test_aggregate);
  CU_add_test(s, "steps of an earlier op on the slot are not counted", test_stale_steps);
  CU_add_test(s, "5,000 peers, 16 link rows: the rest fold", test_fold);
  CU_add_test(s, "size classes, datatypes, buckets", test_classes);
  CU_add_test(s, "the OTLP request parses at every length", test_otlp);
  return wd_test_run();
}
