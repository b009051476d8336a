/* OTLP metrics in protobuf's wire format (otlp.h). Field numbers: opentelemetry-proto,
 * opentelemetry/proto/{collector/metrics,metrics,common,resource}/v1. */
#include "telemetry/otlp.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flightrec/strtab.h"

enum { PB_VARINT = 0, PB_I64 = 1, PB_LEN = 2 };
/* AggregationTemporality: CUMULATIVE. */
enum { OTLP_CUMULATIVE = 2 };

typedef struct pb {
  uint8_t *p;
  size_t len, cap;
  int err;
} pb;

static int pb_room(pb *b, size_t n) {
  if (b->err) return -1;
  if (b->len + n <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + n) cap *= 2;
  uint8_t *q = realloc(b->p, cap);
  if (!q) {
    b->err = 1;
    return -1;
  }
  b->p = q;
  b->cap = cap;
  return 0;
}

static void pb_varint(pb *b, uint64_t v) {
  if (pb_room(b, 10)) return;
  do {
    uint8_t c = v & 0x7f;
    v >>= 7;
    b->p[b->len++] = c | (v ? 0x80 : 0);
  } while (v);
}

static void pb_tag(pb *b, unsigned field, unsigned wire) { pb_varint(b, (uint64_t)field << 3 | wire); }

static void pb_fixed64(pb *b, unsigned field, uint64_t v) {
  pb_tag(b, field, PB_I64);
  if (pb_room(b, 8)) return;
  for (int i = 0; i < 8; i++) b->p[b->len++] = (uint8_t)(v >> (8 * i)); /* little-endian */
}

static void pb_double(pb *b, unsigned field, double d) {
  uint64_t v;
  memcpy(&v, &d, sizeof v);
  pb_fixed64(b, field, v);
}

static void pb_bytes(pb *b, unsigned field, const void *s, size_t n) {
  pb_tag(b, field, PB_LEN);
  pb_varint(b, n);
  if (pb_room(b, n)) return;
  memcpy(b->p + b->len, s, n);
  b->len += n;
}

static void pb_string(pb *b, unsigned field, const char *s) { pb_bytes(b, field, s ? s : "", s ? strlen(s) : 0); }

/* A submessage: its tag and a one-byte length now, the real length once it is written. */
static size_t pb_open(pb *b, unsigned field) {
  pb_tag(b, field, PB_LEN);
  if (pb_room(b, 1)) return 0;
  b->p[b->len++] = 0;
  return b->len;
}

static void pb_close(pb *b, size_t start) {
  if (b->err) return;
  size_t n = b->len - start;
  uint8_t v[10];
  size_t k = 0;
  uint64_t x = n;
  do {
    uint8_t c = x & 0x7f;
    x >>= 7;
    v[k++] = c | (x ? 0x80 : 0);
  } while (x);
  if (k > 1) {
    if (pb_room(b, k - 1)) return;
    memmove(b->p + start + k - 1, b->p + start, n);
    b->len += k - 1;
  }
  memcpy(b->p + start - 1, v, k);
}

/* KeyValue { key = 1; AnyValue value = 2 { string_value = 1 | int_value = 3 } }. */
static void kv_str(pb *b, unsigned field, const char *k, const char *v) {
  size_t kv = pb_open(b, field);
  pb_string(b, 1, k);
  size_t av = pb_open(b, 2);
  pb_string(b, 1, v);
  pb_close(b, av);
  pb_close(b, kv);
}

static void kv_int(pb *b, unsigned field, const char *k, int64_t v) {
  size_t kv = pb_open(b, field);
  pb_string(b, 1, k);
  size_t av = pb_open(b, 2);
  pb_tag(b, 3, PB_VARINT);
  pb_varint(b, (uint64_t)v);
  pb_close(b, av);
  pb_close(b, kv);
}

/* ---- the resource, read once -------------------------------------------------------------- */

#define WD_OTLP_RES_MAX 16
static struct {
  char keys[WD_OTLP_RES_MAX][64];
  char vals[WD_OTLP_RES_MAX][128];
  int n;
  int pid;
} res;

static void res_add(const char *k, size_t kn, const char *v, size_t vn) {
  if (res.n == WD_OTLP_RES_MAX || !kn || kn >= sizeof res.keys[0] || vn >= sizeof res.vals[0]) return;
  for (int i = 0; i < res.n; i++)
    if (strlen(res.keys[i]) == kn && !memcmp(res.keys[i], k, kn)) return; /* the first wins */
  memcpy(res.keys[res.n], k, kn);
  res.keys[res.n][kn] = '\0';
  memcpy(res.vals[res.n], v, vn);
  res.vals[res.n][vn] = '\0';
  res.n++;
}

void wd_otlp_resource(const char *host, int pid) {
  memset(&res, 0, sizeof res);
  res.pid = pid;
  const char *svc = getenv("OTEL_SERVICE_NAME");
  if (!svc || !*svc) svc = "nccl-watchdog";
  res_add("service.name", 12, svc, strlen(svc));
  res_add("host.name", 9, host, strlen(host));
  const char *rank = getenv("RANK");
  if (rank && *rank) res_add("nccl.rank", 9, rank, strlen(rank));
  /* OTEL_RESOURCE_ATTRIBUTES: "key=value,key=value" (the SDKs' variable; after ours, so a
   * service.name given above wins). */
  const char *a = getenv("OTEL_RESOURCE_ATTRIBUTES");
  while (a && *a) {
    const char *end = strchr(a, ',');
    size_t n = end ? (size_t)(end - a) : strlen(a);
    const char *eq = memchr(a, '=', n);
    if (eq) res_add(a, (size_t)(eq - a), eq + 1, n - (size_t)(eq - a) - 1);
    a = end ? end + 1 : NULL;
  }
}

/* ---- metrics ------------------------------------------------------------------------------ */

typedef struct enc {
  pb *b;
  const wd_otlp_input *in;
} enc;

/* Metric { name = 1; description = 2; unit = 3; gauge = 5 | sum = 7 | histogram = 9 }: opens the
 * metric and its data message; returns both marks. */
typedef struct mark {
  size_t metric, data;
} mark;

enum { M_GAUGE = 5, M_SUM = 7, M_HIST = 9 };

static mark metric_open(enc *e, const char *name, const char *unit, const char *desc, unsigned kind) {
  mark m;
  m.metric = pb_open(e->b, 2); /* ScopeMetrics.metrics */
  pb_string(e->b, 1, name);
  pb_string(e->b, 2, desc);
  pb_string(e->b, 3, unit);
  m.data = pb_open(e->b, kind);
  return m;
}

static void metric_close(enc *e, mark m, unsigned kind) {
  /* Sum { aggregation_temporality = 2; is_monotonic = 3 }, Histogram { temporality = 2 }. */
  if (kind == M_SUM || kind == M_HIST) {
    pb_tag(e->b, 2, PB_VARINT);
    pb_varint(e->b, OTLP_CUMULATIVE);
  }
  if (kind == M_SUM) {
    pb_tag(e->b, 3, PB_VARINT);
    pb_varint(e->b, 1);
  }
  pb_close(e->b, m.data);
  pb_close(e->b, m.metric);
}

/* NumberDataPoint { start = 2; time = 3; as_double = 4; as_int = 6; attributes = 7 }. */
static size_t point_open(enc *e) {
  size_t p = pb_open(e->b, 1); /* data_points */
  pb_fixed64(e->b, 2, e->in->start_unix_ns);
  pb_fixed64(e->b, 3, e->in->now_unix_ns);
  return p;
}

static void point_double(enc *e, size_t p, double v) {
  pb_double(e->b, 4, v);
  pb_close(e->b, p);
}

static void point_int(enc *e, size_t p, int64_t v) {
  pb_fixed64(e->b, 6, (uint64_t)v);
  pb_close(e->b, p);
}

static void comm_attrs(enc *e, unsigned field, uint64_t id, const char *name, int rank, int nranks) {
  char hex[24];
  snprintf(hex, sizeof hex, "0x%016" PRIx64, id);
  kv_str(e->b, field, "nccl.comm.id", hex);
  kv_str(e->b, field, "nccl.comm.name", name);
  kv_int(e->b, field, "nccl.comm.rank", rank);
  kv_int(e->b, field, "nccl.comm.size", nranks);
}

static void link_attrs(enc *e, const wd_tm_link *l) {
  const wd_tm_comm *c = &e->in->tm->comms[l->comm];
  comm_attrs(e, 7, c->comm_id, c->name, c->rank, c->nranks);
  kv_int(e->b, 7, "nccl.peer", l->peer);
  kv_int(e->b, 7, "nccl.channel", l->channel);
  kv_str(e->b, 7, "network.io.direction", l->send ? "transmit" : "receive");
}

enum { L_BYTES, L_STEPS, L_STEP_S, L_BUSY_S, L_RATE, L_NET_S, L_NET_RATE };

static void link_metric(enc *e, const char *name, const char *unit, const char *desc, int which) {
  const wd_tm_view *t = e->in->tm;
  if (!t->nlinks) return;
  unsigned kind = which == L_RATE || which == L_NET_RATE ? M_GAUGE : M_SUM;
  mark m = metric_open(e, name, unit, desc, kind);
  for (uint32_t i = 0; i < t->nlinks; i++) {
    const wd_tm_link *l = &t->links[i];
    if (which >= L_NET_S && !l->send) continue; /* a receive has no network part of its own */
    size_t p = point_open(e);
    link_attrs(e, l);
    if (which == L_BYTES) point_int(e, p, (int64_t)l->bytes);
    else if (which == L_STEPS) point_int(e, p, (int64_t)l->steps);
    else point_double(e, p, which == L_STEP_S ? l->step_s : which == L_BUSY_S ? l->busy_s
                            : which == L_RATE ? l->rate : which == L_NET_S ? l->net_s : l->net_rate);
  }
  metric_close(e, m, kind);
}

/* HistogramDataPoint { start = 2; time = 3; count = 4; sum = 5; bucket_counts = 6 (packed);
 * explicit_bounds = 7 (packed); attributes = 9 }. */
static void hist_metric(enc *e, const char *name, const char *desc, int gpu) {
  const wd_tm_view *t = e->in->tm;
  int any = 0;
  for (uint32_t i = 0; i < t->nfuncs; i++) any |= (gpu ? t->funcs[i].gpu.count : t->funcs[i].host.count) > 0;
  if (!any) return;
  mark m = metric_open(e, name, "s", desc, M_HIST);
  for (uint32_t i = 0; i < t->nfuncs; i++) {
    const wd_tm_hist *h = gpu ? &t->funcs[i].gpu : &t->funcs[i].host;
    if (!h->count) continue;
    size_t p = pb_open(e->b, 1);
    pb_fixed64(e->b, 2, e->in->start_unix_ns);
    pb_fixed64(e->b, 3, e->in->now_unix_ns);
    pb_fixed64(e->b, 4, h->count);
    pb_double(e->b, 5, h->sum);
    size_t bc = pb_open(e->b, 6);
    for (int k = 0; k <= WD_TM_NBOUNDS; k++) {
      if (pb_room(e->b, 8)) break;
      for (int j = 0; j < 8; j++) e->b->p[e->b->len++] = (uint8_t)(h->buckets[k] >> (8 * j));
    }
    pb_close(e->b, bc);
    size_t eb = pb_open(e->b, 7);
    for (int k = 0; k < WD_TM_NBOUNDS; k++) {
      uint64_t v;
      memcpy(&v, &wd_tm_bounds[k], sizeof v);
      if (pb_room(e->b, 8)) break;
      for (int j = 0; j < 8; j++) e->b->p[e->b->len++] = (uint8_t)(v >> (8 * j));
    }
    pb_close(e->b, eb);
    kv_str(e->b, 9, "nccl.collective.name", wd_str(t->funcs[i].func));
    kv_str(e->b, 9, "nccl.collective.size_class", wd_tm_class_names[t->funcs[i].size_class]);
    pb_close(e->b, p);
  }
  metric_close(e, m, M_HIST);
}

static void arrival_metric(enc *e, const char *name, const char *desc, int lag) {
  const wd_tm_view *t = e->in->tm;
  int any = 0;
  for (uint32_t i = 0; i < t->ncomms; i++) any |= t->comms[i].have_recent;
  if (!any) return;
  mark m = metric_open(e, name, "s", desc, M_GAUGE);
  for (uint32_t i = 0; i < t->ncomms; i++) {
    const wd_tm_comm *c = &t->comms[i];
    if (!c->have_recent) continue;
    size_t p = point_open(e);
    comm_attrs(e, 7, c->comm_id, c->name, c->rank, c->nranks);
    kv_str(e->b, 7, "nccl.arrival.measure", c->sync_based ? "initial_sync" : "enqueue_to_completion");
    point_double(e, p, lag ? c->lag_s : c->recent_s);
  }
  metric_close(e, m, M_GAUGE);
}

static void process_sum(enc *e, const char *name, const char *unit, const char *desc, int64_t v) {
  mark m = metric_open(e, name, unit, desc, M_SUM);
  point_int(e, point_open(e), v);
  metric_close(e, m, M_SUM);
}

int wd_otlp_encode(const wd_otlp_input *in, uint8_t **out, size_t *len) {
  pb b = {0};
  enc e = {&b, in};
  size_t rm = pb_open(&b, 1); /* ExportMetricsServiceRequest.resource_metrics */
  size_t r = pb_open(&b, 1);  /* ResourceMetrics.resource */
  for (int i = 0; i < res.n; i++) kv_str(&b, 1, res.keys[i], res.vals[i]);
  kv_int(&b, 1, "process.pid", res.pid);
  pb_close(&b, r);
  size_t sm = pb_open(&b, 2); /* ResourceMetrics.scope_metrics */
  size_t sc = pb_open(&b, 1); /* InstrumentationScope { name = 1; version = 2 } */
  pb_string(&b, 1, "nccl-watchdog");
  pb_string(&b, 2, WD_VERSION);
  pb_close(&b, sc);

  process_sum(&e, "nccl.watchdog.stalls", "{episode}", "Stall episodes this process detected.", in->stalls);
  process_sum(&e, "nccl.watchdog.dumps", "{dump}", "Dumps this process wrote.", in->dumps);
  if (in->ncomms) {
    mark m = metric_open(&e, "nccl.watchdog.operations.inflight", "{operation}",
                         "Operations enqueued and not completed, per communicator.", M_GAUGE);
    for (size_t i = 0; i < in->ncomms; i++) {
      size_t p = point_open(&e);
      comm_attrs(&e, 7, in->comms[i].comm_id, in->comms[i].name, in->comms[i].rank, in->comms[i].nranks);
      point_int(&e, p, in->comms[i].inflight);
    }
    metric_close(&e, m, M_GAUGE);
    m = metric_open(&e, "nccl.watchdog.progress.age", "s",
                    "Seconds since the communicator last recorded an event.", M_GAUGE);
    for (size_t i = 0; i < in->ncomms; i++) {
      size_t p = point_open(&e);
      comm_attrs(&e, 7, in->comms[i].comm_id, in->comms[i].name, in->comms[i].rank, in->comms[i].nranks);
      point_double(&e, p, in->comms[i].since_s);
    }
    metric_close(&e, m, M_GAUGE);
  }
  if (in->tm && in->tm->funcs) {
    link_metric(&e, "nccl.watchdog.link.io", "By", "Bytes moved over a link (peer, channel, direction).", L_BYTES);
    link_metric(&e, "nccl.watchdog.link.steps", "{step}", "Proxy steps completed over a link.", L_STEPS);
    link_metric(&e, "nccl.watchdog.link.step.time", "s", "Time the link's steps took, summed.", L_STEP_S);
    link_metric(&e, "nccl.watchdog.link.busy.time", "s", "Time the link was moving an operation's data.", L_BUSY_S);
    link_metric(&e, "nccl.watchdog.link.throughput", "By/s",
                "Bytes per second of busy time over the last interval.", L_RATE);
    link_metric(&e, "nccl.watchdog.link.network.time", "s",
                "Sends: time the network held the link's steps (isend posted to done), summed.", L_NET_S);
    link_metric(&e, "nccl.watchdog.link.network.throughput", "By/s",
                "Sends: bytes per second of network time over the last interval.", L_NET_RATE);
    hist_metric(&e, "nccl.watchdog.collective.duration",
                "Collectives from enqueue to completion (host clock).", 0);
    hist_metric(&e, "nccl.watchdog.collective.gpu.duration",
                "Collectives' kernels, first channel start to last channel stop (GPU clock).", 1);
    arrival_metric(&e, "nccl.watchdog.arrival.wait",
                   "Mean wait of this rank's collectives for their peers over the last interval.", 0);
    arrival_metric(&e, "nccl.watchdog.arrival.lag",
                   "The rank's arrival wait baseline minus its last interval's (> 0: arrives later than it did).", 1);
    process_sum(&e, "nccl.watchdog.telemetry.records.missed", "{record}",
                "Ring records overwritten before telemetry read them.", (int64_t)in->tm->records_missed);
  }
  pb_close(&b, sm);
  pb_close(&b, rm);
  if (b.err) {
    free(b.p);
    return -1;
  }
  *out = b.p;
  *len = b.len;
  return 0;
}
