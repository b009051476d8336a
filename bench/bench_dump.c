/*
 * Render + write time of a worst-case dump: 8 communicators with full rings (8192 operation and
 * 8192 proxy records each, 131,072 records), 256 live events per communicator, 64 threads x 30
 * frames. Prints "dump_ms <median of 5>" (plus details on stderr).
 *
 *   bench_dump [-n runs] [-d dir] [-k]
 *     dir defaults to a fresh directory under $TMPDIR or /tmp (removed afterwards);
 *     -k keeps the last dump and prints its path on stderr (e.g. to validate it).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dump/render.h"
#include "flightrec/strtab.h"

#define NCOMMS 8
#define RING 8192
#define NLIVE 256
#define NTHREADS 64
#define NFRAMES 30

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static uint8_t s_func[4], s_dtype, s_algo, s_proto;

/* Operation ring: GroupApi, CollApi, Coll start, Coll stop, ... as a training step emits them. */
static void fill_ring(wd_record *r, uint64_t mono, uint32_t base) {
  for (uint32_t i = 0; i < RING; i++) {
    wd_record *x = &r[i];
    memset(x, 0, sizeof(*x));
    x->ts_ns = mono - (uint64_t)(RING - i) * 20000;
    x->tid = 41000 + (int)(i % 3);
    x->slot = base + i / 4;
    x->parent = WD_SLOT_NONE;
    x->peer = -1;
    switch (i % 4) {
    case 0:
      x->type = WD_T_GROUPAPI;
      x->n = 1;
      break;
    case 1:
      x->type = WD_T_COLLAPI;
      x->func = s_func[i % 4];
      x->count = 1u << 20;
      x->dtype = s_dtype;
      x->peer = 0;
      break;
    default:
      x->type = WD_T_COLL;
      x->phase = (i % 4 == 2) ? WD_PH_START : WD_PH_STOP;
      x->a = 100000 + i / 4;
      x->func = s_func[(i / 4) % 4];
      x->count = 1u << 20;
      x->dtype = s_dtype;
      x->algo = s_algo;
      x->proto = s_proto;
      x->peer = 0;
      x->nChannels = 16;
      x->nWarps = 16;
      x->parent = base + i / 4 - 1;
      break;
    }
  }
}

/* Proxy ring: mostly ProxyStep state transitions, some ProxyOp and KernelCh records. */
static void fill_proxy_ring(wd_record *r, uint64_t mono, uint32_t base) {
  for (uint32_t i = 0; i < RING; i++) {
    wd_record *x = &r[i];
    memset(x, 0, sizeof(*x));
    x->ts_ns = mono - (uint64_t)(RING - i) * 5000;
    x->tid = 41100;
    x->slot = base + i;
    x->parent = base + (i & ~15u);
    switch (i % 16) {
    case 0:
      x->type = WD_T_PROXYOP;
      x->pid = 41233;
      x->n = 8;
      x->count = 524288;
      x->peer = (int)(i % 7);
      x->channel = (uint8_t)(i % 16);
      x->flags = (i & 16) ? WD_F_SEND : 0;
      break;
    case 1:
      x->type = WD_T_KERNELCH;
      x->phase = WD_PH_STATE;
      x->state = 22;
      x->a = 0x17a3b2c1d0e0f00ull + i;
      x->channel = (uint8_t)(i % 16);
      break;
    default:
      x->type = WD_T_PROXYSTEP;
      x->phase = WD_PH_STATE;
      x->state = (uint8_t)(i % 13);
      x->n = (int)(i % 8);
      x->a = 524288;
      break;
    }
  }
}

int main(int argc, char **argv) {
  int runs = 5;
  const char *dir_arg = NULL;
  int keep = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-n") && i + 1 < argc)
      runs = atoi(argv[++i]);
    else if (!strcmp(argv[i], "-d") && i + 1 < argc)
      dir_arg = argv[++i];
    else if (!strcmp(argv[i], "-k"))
      keep = 1;
    else {
      fprintf(stderr, "usage: %s [-n runs] [-d dir] [-k]\n", argv[0]);
      return 2;
    }
  }
  if (runs < 1) runs = 1;
  if (runs > 100) runs = 100;

  s_func[0] = wd_str_id("AllReduce");
  s_func[1] = wd_str_id("AllGather");
  s_func[2] = wd_str_id("ReduceScatter");
  s_func[3] = wd_str_id("Broadcast");
  s_dtype = wd_str_id("ncclBfloat16");
  s_algo = wd_str_id("Ring");
  s_proto = wd_str_id("LL128");

  wd_config cfg;
  wd_config_defaults(&cfg);
  wd_dump_input in;
  memset(&in, 0, sizeof(in));
  in.reason = "signal";
  in.cfg = &cfg;
  in.mono_ns = now_ns();
  in.wall_sec = time(NULL);
  snprintf(in.host, sizeof(in.host), "benchhost");
  in.pid = (int)getpid();
  in.abi = 5;
  in.signo = 10;

  static wd_comm_snap comms[NCOMMS];
  wd_record *recs = calloc((size_t)NCOMMS * 2 * RING, sizeof(wd_record));
  wd_ev_snap *evs = calloc((size_t)NCOMMS * NLIVE, sizeof(wd_ev_snap));
  if (!recs || !evs) return 1;
  for (int c = 0; c < NCOMMS; c++) {
    wd_comm_snap *cs = &comms[c];
    cs->comm_id = 0x6b8b4567327b23c6ull + (uint64_t)c;
    snprintf(cs->name, sizeof(cs->name), "pg_%d", c);
    cs->rank = 3;
    cs->nranks = 64;
    cs->nnodes = 8;
    cs->abi = 5;
    cs->cuda_dev = c;
    snprintf(cs->gpu_uuid, sizeof(cs->gpu_uuid), "GPU-%08x-1a2b-3c4d-5e6f-00000000000%d", c, c);
    cs->init_ns = in.mono_ns - 600000000000ull;
    cs->last_progress_ns = in.mono_ns - 1000000;
    cs->nseq = 4;
    for (int k = 0; k < 4; k++) cs->seq[k] = (wd_seq_snap){s_func[k], 100000 + k, 99999 + k};
    wd_record *op = recs + (size_t)c * 2 * RING, *px = op + RING;
    fill_ring(op, in.mono_ns, 1000);
    fill_proxy_ring(px, in.mono_ns, 100000);
    cs->ring = (wd_ring_snap){RING, 1u << 24, 0, (1u << 24) - RING, RING, op};
    cs->proxy_ring = (wd_ring_snap){RING, 1u << 26, 0, (1u << 26) - RING, RING, px};
    /* Live events: 16 Coll roots, each with a ProxyOp holding ProxySteps, plus KernelCh. */
    wd_ev_snap *e = evs + (size_t)c * NLIVE;
    for (int k = 0; k < NLIVE; k++) {
      wd_ev_snap *x = &e[k];
      x->last_state = 0xff;
      x->start.slot = (uint32_t)k;
      x->start.ts_ns = in.mono_ns - (uint64_t)(NLIVE - k) * 100000;
      x->last_ns = in.mono_ns - 1000000;
      x->start.tid = 41000;
      int r = k / 16 * 16;
      if (k % 16 == 0) {
        x->start.type = WD_T_COLL;
        x->start.parent = WD_SLOT_NONE;
        x->start.func = s_func[0];
        x->start.a = (uint64_t)(100000 + k);
        x->is_root = 1;
        x->status = WD_OP_REACHED;
      } else if (k % 16 == 1) {
        x->start.type = WD_T_PROXYOP;
        x->start.parent = (uint32_t)r;
        x->start.n = 8;
      } else if (k % 16 < 14) {
        x->start.type = WD_T_PROXYSTEP;
        x->start.parent = (uint32_t)(r + 1);
        x->last_state = 10;
      } else {
        x->start.type = WD_T_KERNELCH;
        x->start.parent = (uint32_t)r;
      }
    }
    cs->nevents = NLIVE;
    cs->events = e;
  }
  in.ncomms = NCOMMS;
  in.comms = comms;

  wd_bt_result bt;
  memset(&bt, 0, sizeof(bt));
  bt.threads = calloc(NTHREADS, sizeof(wd_bt_thread));
  bt.modules = calloc(64, sizeof(wd_bt_module));
  if (!bt.threads || !bt.modules) return 1;
  bt.nthreads = bt.asked = bt.answered = NTHREADS;
  for (int t = 0; t < NTHREADS; t++) {
    wd_bt_thread *th = &bt.threads[t];
    th->tid = 41000 + t;
    th->status = WD_BT_OK;
    snprintf(th->name, sizeof(th->name), "worker-%d", t);
    th->nframes = NFRAMES;
    for (int f = 0; f < NFRAMES; f++) {
      wd_bt_frame *fr = &th->frames[f];
      fr->pc = 0x7f3a12345678ull + (uint64_t)f * 0x1000;
      fr->module_offset = 0x91234 + (uint64_t)f;
      fr->symbol_offset = 123;
      snprintf(fr->module, sizeof(fr->module), "/usr/lib/x86_64-linux-gnu/libnccl.so.2.%d", f % 5);
      snprintf(fr->symbol, sizeof(fr->symbol), "ncclProxyProgress_%d", f);
    }
  }
  bt.nmodules = 64;
  for (int m = 0; m < 64; m++)
    bt.modules[m] = (wd_bt_module){0x7f0000000000ull + (uint64_t)m * 0x1000000,
                                   0x7f0000800000ull + (uint64_t)m * 0x1000000, 0x1000, "r-xp",
                                   "/usr/lib/x86_64-linux-gnu/libsomething.so"};
  in.threads = &bt;

  char dir[PATH_MAX];
  int made = 0;
  if (dir_arg) {
    snprintf(dir, sizeof(dir), "%s", dir_arg);
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/wd-bench-dump-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
      perror("mkdtemp");
      return 1;
    }
    made = 1;
  }

  double ms[100], render_ms[100];
  size_t bytes = 0;
  for (int i = 0; i < runs; i++) {
    in.dump_seq = (unsigned)i + 1;
    uint64_t t0 = now_ns();
    char *doc = wd_dump_render(&in);
    uint64_t t1 = now_ns();
    if (!doc) {
      fprintf(stderr, "render failed\n");
      return 1;
    }
    bytes = strlen(doc);
    free(doc);
    render_ms[i] = (double)(t1 - t0) / 1e6;

    char path[PATH_MAX + 128];
    t0 = now_ns();
    if (wd_dump_write(&in, dir, path, sizeof(path)) != 0) {
      perror("wd_dump_write");
      return 1;
    }
    t1 = now_ns();
    ms[i] = (double)(t1 - t0) / 1e6;
    if (keep && i == runs - 1)
      fprintf(stderr, "bench_dump: kept %s\n", path);
    else
      unlink(path);
  }
  if (made && !keep) rmdir(dir);
  qsort(ms, (size_t)runs, sizeof(double), cmp_d);
  qsort(render_ms, (size_t)runs, sizeof(double), cmp_d);
  fprintf(stderr, "bench_dump: %d comms x %d+%d records, %d live events each, %d threads x %d frames; "
                  "%.1f MB; render only %.1f ms, render+write min %.1f max %.1f ms (median of %d)\n",
          NCOMMS, RING, RING, NLIVE, NTHREADS, NFRAMES, (double)bytes / 1e6, render_ms[runs / 2],
          ms[0], ms[runs - 1], runs);
  printf("dump_ms %.1f\n", ms[runs / 2]);
  free(recs);
  free(evs);
  free(bt.threads);
  free(bt.modules);
  return 0;
}
