/* Live health metrics in Prometheus text format (metrics.h). */
#include "watchdog/metrics.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "dump/dumpfile.h"
#include "flightrec/strtab.h"
#include "telemetry/aggregate.h"
#include "telemetry/otlp.h"
#include "telemetry/otlp_http.h"
#include "watchdog/autoverdict.h"

#define WD_M_FUNCS 32 /* functions kept per communicator in one file */

typedef struct wd_m_func {
  uint8_t func;
  int64_t enq, done;
} wd_m_func;

/* One communicator's counters, copied under the store lock. */
typedef struct wd_m_row {
  uint64_t comm_id;
  char name[128];
  int rank, nranks;
  int64_t inflight;
  uint64_t since_ns, dropped;
  int mask_set, mask_now; /* the mask we set at init, and the one NCCL uses now (RAS may change it) */
  int64_t p2p_enq, p2p_done;
  int nfuncs;
  wd_m_func funcs[WD_M_FUNCS];
} wd_m_row;

static struct {
  int on;      /* rows are gathered: for the file, the OTLP export, or both */
  int file_on; /* the Prometheus file */
  int tm_due;  /* which export closes telemetry's intervals (WD_M_DUE_*) */
  uint64_t interval_ns, next_ns;
  uint64_t start_unix_ns;
  char dir[WD_PATH_MAX];
  char path[WD_PATH_MAX + 96];
  char labels[256]; /* host="..",pid="..",rank=".." */
  wd_m_row *rows;
  size_t nrows, cap;
  int warned;
} wd_m;

/* Prometheus label values escape backslash, double quote and newline. */
static void label_value(char *out, size_t len, const char *s) {
  size_t o = 0;
  for (; s && *s && o + 3 < len; s++) {
    if (*s == '\\' || *s == '"') out[o++] = '\\', out[o++] = *s;
    else if (*s == '\n') out[o++] = '\\', out[o++] = 'n';
    else out[o++] = *s;
  }
  out[o] = '\0';
}

static uint64_t unix_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

void wd_metrics_open(const wd_config *cfg, const char *host, int pid) {
  memset(&wd_m, 0, sizeof wd_m);
  wd_m.start_unix_ns = unix_ns();
  const char *dir = cfg->metrics_dir[0] ? cfg->metrics_dir : cfg->ring_dir;
  int otlp = wd_otlp_http_open(cfg) == 0;
  if (otlp) wd_otlp_resource(host, pid);
  int file = cfg->metrics_ns && dir[0];
  if ((file || otlp) && cfg->telemetry && wd_tm_open(cfg->telemetry_links) != 0)
    WD_WARN("telemetry off: out of memory");
  wd_m.on = file || otlp;
  wd_m.tm_due = file ? WD_M_DUE_FILE : WD_M_DUE_OTLP;
  if (!file) return;
  snprintf(wd_m.dir, sizeof wd_m.dir, "%s", dir);
  snprintf(wd_m.path, sizeof wd_m.path, "%s/nccl-watchdog-%s-%d.prom", dir, host, pid);
  char h[160], r[32];
  label_value(h, sizeof h, host);
  /* The job's global rank, when the launcher says (torchrun, SLURM via the framework). */
  const char *g = getenv("RANK");
  label_value(r, sizeof r, g && *g ? g : "");
  snprintf(wd_m.labels, sizeof wd_m.labels, "host=\"%s\",pid=\"%d\",rank=\"%s\"", h, pid, r);
  wd_m.interval_ns = cfg->metrics_ns;
  wd_m.file_on = 1;
}

int wd_metrics_due(uint64_t now) {
  if (!wd_m.on) return 0;
  int due = 0;
  if (wd_m.file_on && now >= wd_m.next_ns) {
    wd_m.next_ns = now + wd_m.interval_ns;
    due |= WD_M_DUE_FILE;
  }
  if (wd_otlp_http_due(now)) due |= WD_M_DUE_OTLP;
  if (due) wd_m.nrows = 0;
  return due;
}

void wd_metrics_note(wd_context *ctx, uint64_t now, int due) {
  if (!wd_m.on) return;
  wd_tm_note(ctx);
  /* New ring records since the last poll: the communicator made progress. */
  uint64_t t = atomic_load_explicit(&ctx->ring.head, memory_order_relaxed) +
               atomic_load_explicit(&ctx->proxy_ring.head, memory_order_relaxed);
  if (t != ctx->seen_tickets || !ctx->active_ns) ctx->active_ns = now;
  ctx->seen_tickets = t;
  if (!due || ctx->retired_ns) return;
  if (wd_m.nrows == wd_m.cap) {
    size_t cap = wd_m.cap ? 2 * wd_m.cap : 16;
    wd_m_row *r = realloc(wd_m.rows, cap * sizeof(*r));
    if (!r) return;
    wd_m.rows = r;
    wd_m.cap = cap;
  }
  wd_m_row *row = &wd_m.rows[wd_m.nrows++];
  memset(row, 0, sizeof(*row));
  row->comm_id = ctx->comm_id;
  snprintf(row->name, sizeof row->name, "%s", ctx->name);
  row->rank = ctx->rank;
  row->nranks = ctx->nranks;
  row->since_ns = now - ctx->active_ns;
  row->dropped = atomic_load_explicit(&ctx->dropped, memory_order_relaxed);
  row->mask_set = ctx->mask_set;
  row->mask_now = ctx->mask_seen; /* read this poll (watchdog.c, wd_watch_mask) */
  row->p2p_enq = atomic_load_explicit(&ctx->p2p_enq, memory_order_relaxed);
  row->p2p_done = atomic_load_explicit(&ctx->p2p_done, memory_order_relaxed);
  if (row->p2p_enq > row->p2p_done) row->inflight += row->p2p_enq - row->p2p_done;
  for (int f = 0; f < WD_NSTR; f++) {
    int64_t e = atomic_load_explicit(&ctx->seq_enq[f], memory_order_relaxed);
    if (e < 0) continue;
    int64_t d = atomic_load_explicit(&ctx->seq_done[f], memory_order_relaxed);
    if (e > d) row->inflight += e - d;
    if (row->nfuncs < WD_M_FUNCS) row->funcs[row->nfuncs++] = (wd_m_func){(uint8_t)f, e, d};
  }
}

/* `name{labels,comm labels` for one communicator (the caller closes the brace). */
static void comm_labels(FILE *b, const char *name, uint64_t id, const char *cname, int rank, int nranks) {
  char n[300];
  label_value(n, sizeof n, cname);
  fprintf(b, "%s{%s,comm=\"0x%016" PRIx64 "\",comm_name=\"%s\",comm_rank=\"%d\",nranks=\"%d\"", name,
          wd_m.labels, id, n, rank, nranks);
}

static void comm_sample(FILE *b, const char *name, const wd_m_row *r) {
  comm_labels(b, name, r->comm_id, r->name, r->rank, r->nranks);
}

static void family(FILE *b, const char *name, const char *type, const char *help) {
  fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void tm_comm_sample(FILE *b, const char *name, const wd_tm_comm *c) {
  comm_labels(b, name, c->comm_id, c->name, c->rank, c->nranks);
}

static void link_sample(FILE *b, const char *name, const wd_tm_view *t, const wd_tm_link *l) {
  tm_comm_sample(b, name, &t->comms[l->comm]);
  if (l->peer < 0) fprintf(b, ",peer=\"other\",channel=\"\",direction=\"\"} ");
  else fprintf(b, ",peer=\"%d\",channel=\"%u\",direction=\"%s\"} ", l->peer, l->channel, l->send ? "transmit" : "receive");
}

static void tm_histogram(FILE *b, const char *name, const wd_tm_view *t, int gpu) {
  char n[128];
  for (uint32_t i = 0; i < t->nfuncs; i++) {
    const wd_tm_hist *h = gpu ? &t->funcs[i].gpu : &t->funcs[i].host;
    if (!h->count) continue;
    char fl[96];
    snprintf(fl, sizeof fl, "func=\"%s\",size_class=\"%s\"", wd_str(t->funcs[i].func),
             wd_tm_class_names[t->funcs[i].size_class]);
    uint64_t cum = 0;
    snprintf(n, sizeof n, "%s_bucket", name);
    for (int k = 0; k <= WD_TM_NBOUNDS; k++) {
      cum += h->buckets[k];
      if (k < WD_TM_NBOUNDS) fprintf(b, "%s{%s,%s,le=\"%g\"} %" PRIu64 "\n", n, wd_m.labels, fl, wd_tm_bounds[k], cum);
      else fprintf(b, "%s{%s,%s,le=\"+Inf\"} %" PRIu64 "\n", n, wd_m.labels, fl, cum);
    }
    fprintf(b, "%s_sum{%s,%s} %.9g\n%s_count{%s,%s} %" PRIu64 "\n", name, wd_m.labels, fl, h->sum, name,
            wd_m.labels, fl, h->count);
  }
}

/* One arrival gauge per communicator that completed collectives: the wait, or its lag. */
static void arrival_family(FILE *b, const char *name, const char *help, const wd_tm_view *t, int lag) {
  family(b, name, "gauge", help);
  for (uint32_t i = 0; i < t->ncomms; i++) {
    const wd_tm_comm *c = &t->comms[i];
    if (!c->have_recent) continue;
    tm_comm_sample(b, name, c);
    fprintf(b, ",measure=\"%s\"} %.9g\n", c->sync_based ? "initial_sync" : "enqueue_to_completion",
            lag ? c->lag_s : c->recent_s);
  }
}

/* The fail-slow series (telemetry/aggregate.h). */
static void render_telemetry(FILE *b) {
  wd_tm_view t;
  wd_tm_get(&t);
  if (!t.funcs) return;
  static const struct {
    const char *name, *type, *help;
  } lf[] = {
      {"nccl_watchdog_link_bytes_total", "counter", "Bytes moved over a link (peer, channel, direction)."},
      {"nccl_watchdog_link_steps_total", "counter", "Proxy steps completed over a link."},
      {"nccl_watchdog_link_step_seconds_total", "counter", "Time the link's steps took, summed."},
      {"nccl_watchdog_link_busy_seconds_total", "counter", "Time the link was moving an operation's data."},
      {"nccl_watchdog_link_throughput_bytes_per_second", "gauge",
       "Bytes per second of busy time over the last interval: a slow link is the low one among its peers."},
      {"nccl_watchdog_link_network_seconds_total", "counter",
       "Sends: time the network held the link's steps (isend posted to done), summed."},
      {"nccl_watchdog_link_network_throughput_bytes_per_second", "gauge",
       "Sends: bytes per second of network time over the last interval: in a pipelined ring, where "
       "every link's step time follows the slowest, the slow link is the low one here."},
  };
  for (int f = 0; f < 7; f++) {
    family(b, lf[f].name, lf[f].type, lf[f].help);
    for (uint32_t i = 0; i < t.nlinks; i++) {
      const wd_tm_link *l = &t.links[i];
      if (f >= 5 && !l->send) continue; /* a receive has no network part of its own */
      link_sample(b, lf[f].name, &t, l);
      if (f == 0) fprintf(b, "%" PRIu64 "\n", l->bytes);
      else if (f == 1) fprintf(b, "%" PRIu64 "\n", l->steps);
      else fprintf(b, "%.9g\n", f == 2 ? l->step_s : f == 3 ? l->busy_s : f == 4 ? l->rate
                                  : f == 5 ? l->net_s : l->net_rate);
    }
  }
  family(b, "nccl_watchdog_collective_duration_seconds", "histogram",
         "Collectives from enqueue to completion, host clock, by function and size class.");
  tm_histogram(b, "nccl_watchdog_collective_duration_seconds", &t, 0);
  family(b, "nccl_watchdog_collective_gpu_duration_seconds", "histogram",
         "Collectives' kernels, first channel start to last channel stop, GPU clock (KernelCh).");
  tm_histogram(b, "nccl_watchdog_collective_gpu_duration_seconds", &t, 1);
  arrival_family(b, "nccl_watchdog_arrival_wait_seconds",
                 "Mean wait of this rank's collectives for their peers over the last interval (a late rank waits least).",
                 &t, 0);
  arrival_family(b, "nccl_watchdog_arrival_lag_seconds",
                 "The rank's own arrival-wait baseline minus its last interval's (> 0: it arrives later than it did).",
                 &t, 1);
  family(b, "nccl_watchdog_telemetry_records_missed_total", "counter",
         "Ring records overwritten before telemetry read them (the histograms are a sample).");
  fprintf(b, "nccl_watchdog_telemetry_records_missed_total{%s} %" PRIu64 "\n", wd_m.labels, t.records_missed);
  family(b, "nccl_watchdog_telemetry_links_folded_total", "counter",
         "Link observations folded into peer=\"other\" (more links than NCCL_WATCHDOG_TELEMETRY_LINKS).");
  fprintf(b, "nccl_watchdog_telemetry_links_folded_total{%s} %" PRIu64 "\n", wd_m.labels, t.links_folded);
}

static void render(FILE *b, unsigned stalls, unsigned dumps, const wd_av_stats *av) {
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME, &wall);
  family(b, "nccl_watchdog_info", "gauge", "The plugin is loaded in this process (value 1).");
  fprintf(b, "nccl_watchdog_info{%s,version=\"%s\"} 1\n", wd_m.labels, WD_VERSION);
  family(b, "nccl_watchdog_last_update_timestamp_seconds", "gauge",
         "When this file was written (a stale file is a process that stopped writing).");
  fprintf(b, "nccl_watchdog_last_update_timestamp_seconds{%s} %lld.%03ld\n", wd_m.labels,
               (long long)wall.tv_sec, wall.tv_nsec / 1000000);
  family(b, "nccl_watchdog_metrics_interval_seconds", "gauge", "How often this file is rewritten.");
  fprintf(b, "nccl_watchdog_metrics_interval_seconds{%s} %.3f\n", wd_m.labels,
               (double)wd_m.interval_ns / 1e9);
  family(b, "nccl_watchdog_stalls_detected_total", "counter", "Stall episodes this process detected.");
  fprintf(b, "nccl_watchdog_stalls_detected_total{%s} %u\n", wd_m.labels, stalls);
  family(b, "nccl_watchdog_dumps_written_total", "counter", "Dumps this process wrote (any reason).");
  fprintf(b, "nccl_watchdog_dumps_written_total{%s} %u\n", wd_m.labels, dumps);
  if (av) {
    family(b, "nccl_watchdog_episode_open", "gauge",
           "The job's stall episode this process is part of, 0 when none.");
    fprintf(b, "nccl_watchdog_episode_open{%s} %u\n", wd_m.labels, av->open_episode);
    family(b, "nccl_watchdog_episodes_resumed_total", "counter",
           "Stall episodes of this process that ended with progress (slow, not hung).");
    fprintf(b, "nccl_watchdog_episodes_resumed_total{%s} %u\n", wd_m.labels, av->resumed);
    if (av->last_kind[0]) {
      char k[48], r[32], h[160];
      label_value(k, sizeof k, av->last_kind);
      label_value(r, sizeof r, av->last_rank);
      label_value(h, sizeof h, av->last_host);
      family(b, "nccl_watchdog_verdict_seconds", "gauge",
             "The latest automatic verdict: seconds from the episode's opening; labels: its first "
             "line's verdict, culprit rank and host.");
      fprintf(b, "nccl_watchdog_verdict_seconds{%s,verdict=\"%s\",culprit_rank=\"%s\",culprit_host=\"%s\"} %.3f\n",
              wd_m.labels, k, r, h, av->last_seconds);
    }
  }

  family(b, "nccl_watchdog_ops_enqueued_total", "counter",
         "Operations enqueued per communicator and function (p2p: Send and Recv together).");
  for (size_t i = 0; i < wd_m.nrows; i++) {
    const wd_m_row *r = &wd_m.rows[i];
    for (int k = 0; k < r->nfuncs; k++) {
      comm_sample(b, "nccl_watchdog_ops_enqueued_total", r);
      fprintf(b, ",func=\"%s\"} %" PRId64 "\n", wd_str(r->funcs[k].func), r->funcs[k].enq + 1);
    }
    comm_sample(b, "nccl_watchdog_ops_enqueued_total", r);
    fprintf(b, ",func=\"p2p\"} %" PRId64 "\n", r->p2p_enq > 0 ? r->p2p_enq : 0);
  }
  family(b, "nccl_watchdog_ops_completed_total", "counter",
         "Operations completed per communicator and function.");
  for (size_t i = 0; i < wd_m.nrows; i++) {
    const wd_m_row *r = &wd_m.rows[i];
    for (int k = 0; k < r->nfuncs; k++) {
      comm_sample(b, "nccl_watchdog_ops_completed_total", r);
      fprintf(b, ",func=\"%s\"} %" PRId64 "\n", wd_str(r->funcs[k].func), r->funcs[k].done + 1);
    }
    comm_sample(b, "nccl_watchdog_ops_completed_total", r);
    fprintf(b, ",func=\"p2p\"} %" PRId64 "\n", r->p2p_done > 0 ? r->p2p_done : 0);
  }
  family(b, "nccl_watchdog_ops_inflight", "gauge", "Operations enqueued and not completed.");
  for (size_t i = 0; i < wd_m.nrows; i++) {
    comm_sample(b, "nccl_watchdog_ops_inflight", &wd_m.rows[i]);
    fprintf(b, "} %" PRId64 "\n", wd_m.rows[i].inflight);
  }
  family(b, "nccl_watchdog_seconds_since_progress", "gauge",
         "Seconds since the communicator last recorded an event (poll resolution).");
  for (size_t i = 0; i < wd_m.nrows; i++) {
    comm_sample(b, "nccl_watchdog_seconds_since_progress", &wd_m.rows[i]);
    fprintf(b, "} %.3f\n", (double)wd_m.rows[i].since_ns / 1e9);
  }
  family(b, "nccl_watchdog_events_dropped_total", "counter",
         "Events not recorded because the communicator's event pool was full.");
  for (size_t i = 0; i < wd_m.nrows; i++) {
    comm_sample(b, "nccl_watchdog_events_dropped_total", &wd_m.rows[i]);
    fprintf(b, "} %" PRIu64 "\n", wd_m.rows[i].dropped);
  }
  /* An alert on > 0 catches a watchdog blinded job-wide (NCCL RAS PROFILER_MASK; 0 = every type). */
  family(b, "nccl_watchdog_event_types_lost", "gauge",
         "Event types the plugin asked NCCL for that NCCL's current mask no longer delivers.");
  for (size_t i = 0; i < wd_m.nrows; i++) {
    comm_sample(b, "nccl_watchdog_event_types_lost", &wd_m.rows[i]);
    fprintf(b, ",mask=\"0x%x\"} %d\n", (unsigned)wd_m.rows[i].mask_now,
            __builtin_popcount((unsigned)(wd_m.rows[i].mask_set & ~wd_m.rows[i].mask_now)));
  }
  if (wd_otlp_http_on()) {
    wd_otlp_stats os;
    wd_otlp_http_stats(&os);
    family(b, "nccl_watchdog_otlp_exports_total", "counter",
           "OTLP exports by result: ok (2xx), failed, skipped (the previous one still in flight).");
    fprintf(b, "nccl_watchdog_otlp_exports_total{%s,result=\"ok\"} %" PRIu64 "\n", wd_m.labels, os.ok);
    fprintf(b, "nccl_watchdog_otlp_exports_total{%s,result=\"failed\"} %" PRIu64 "\n", wd_m.labels, os.failed);
    fprintf(b, "nccl_watchdog_otlp_exports_total{%s,result=\"skipped\"} %" PRIu64 "\n", wd_m.labels, os.skipped);
  }
  render_telemetry(b);
}

static int write_file(const char *data, size_t len) {
  char tmp[sizeof wd_m.path + 8];
  snprintf(tmp, sizeof tmp, "%s.tmp", wd_m.path);
  /* World-readable: node_exporter runs as another user; nothing here is private. */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENOENT && mkdir(wd_m.dir, 0700) == 0)
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  int ok = wd_write_all(fd, data, len) == 0;
  ok = close(fd) == 0 && ok;
  if (ok && rename(tmp, wd_m.path) == 0) return 0; /* readers see the old file or the new one */
  unlink(tmp);
  return -1;
}

/* The same rows and aggregates, as one OTLP request. */
static void export_otlp(unsigned stalls, unsigned dumps) {
  wd_otlp_comm *c = calloc(wd_m.nrows ? wd_m.nrows : 1, sizeof *c);
  if (!c) return;
  for (size_t i = 0; i < wd_m.nrows; i++) {
    const wd_m_row *r = &wd_m.rows[i];
    c[i] = (wd_otlp_comm){r->comm_id, r->name, r->rank, r->nranks, r->inflight, (double)r->since_ns / 1e9};
  }
  wd_tm_view t;
  wd_tm_get(&t);
  wd_otlp_input in = {&t, c, wd_m.nrows, stalls, dumps, wd_m.start_unix_ns, unix_ns()};
  uint8_t *body = NULL;
  size_t len = 0;
  if (wd_otlp_encode(&in, &body, &len) == 0) wd_otlp_http_send(body, len);
  free(c);
}

void wd_metrics_flush(int due, unsigned stall_episodes, unsigned dumps, const wd_av_stats *av) {
  if (!wd_m.on || !due) return;
  if (due & wd_m.tm_due) wd_tm_interval();
  if (due & WD_M_DUE_OTLP) export_otlp(stall_episodes, dumps);
  if (!(due & WD_M_DUE_FILE)) return;
  char *text = NULL;
  size_t len = 0;
  FILE *b = open_memstream(&text, &len);
  if (b) {
    render(b, stall_episodes, dumps, av);
    if (fclose(b) != 0) len = 0;
  }
  if (!text || !len || write_file(text, len) != 0) {
    if (!wd_m.warned) WD_WARN("cannot write the metrics file %s: %s", wd_m.path, strerror(errno));
    wd_m.warned = 1;
  }
  free(text);
}

void wd_metrics_close(void) {
  if (wd_m.file_on) unlink(wd_m.path);
  wd_otlp_http_close();
  wd_tm_close();
  free(wd_m.rows);
  memset(&wd_m, 0, sizeof wd_m);
}

void wd_metrics_end_poll(void) { wd_tm_end_poll(); }
