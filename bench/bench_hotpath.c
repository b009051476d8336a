/*
 * Hot-path benchmark: nanoseconds per plugin callback over a realistic allreduce lifecycle
 * (bench/lifecycle.h), median of several timed runs after a warm-up.
 *
 *   bench_hotpath PLUGIN.so [-n lifecycles] [-r runs] [-w warmup] [-s steps] [-t 1|2]
 *
 * -t 1: one thread plays the application and the proxy thread on one communicator.
 * -t 2: an application thread enqueues on two communicators (alternately) and a proxy thread
 *       runs the proxy part of each operation concurrently, as in NCCL; the time per callback is
 *       the two threads' busy time (waits on the hand-off queue excluded) over all callbacks.
 * Prints one line:
 *   hotpath plugin=NAME threads=T lifecycles=N callbacks=C runs=R ns_per_cb=MEDIAN min=.. max=..
 * The timed loop is bench_timed_loop() (callgrind: --toggle-collect=bench_timed_loop).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"
#include "lifecycle.h"

typedef struct hp_opts {
  long n, warmup;
  int runs, steps, threads;
} hp_opts;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* ---- one thread ---------------------------------------------------------------------------- */

__attribute__((noinline)) void bench_timed_loop(bl_comm *c, long n) {
  for (long i = 0; i < n; i++) bl_proxy_part(c, bl_app_part(c));
}

static double run_1t(bl_comm *c, long n) {
  uint64_t t0 = bl_now_ns();
  bench_timed_loop(c, n);
  return (double)(bl_now_ns() - t0);
}

/* ---- application thread + proxy thread ----------------------------------------------------- */

#define Q_CAP 1024
typedef struct q_item {
  bl_comm *c;
  void *coll;
} q_item;

typedef struct hp_pipe {
  q_item items[Q_CAP];
  _Alignas(64) _Atomic long head; /* written by the application thread */
  _Alignas(64) _Atomic long tail; /* written by the proxy thread */
  _Alignas(64) long n;
  pthread_barrier_t start, done;
  int stop, counted;
  uint64_t proxy_busy_ns;
} hp_pipe;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

static void *proxy_main(void *arg) {
  hp_pipe *p = arg;
  for (;;) {
    pthread_barrier_wait(&p->start);
    if (p->stop) return NULL;
    if (p->counted) bl_window(1);
    uint64_t t0 = bl_now_ns(), waited = 0;
    long tail = atomic_load_explicit(&p->tail, memory_order_relaxed);
    long end = tail + p->n;
    while (tail < end) {
      long head = atomic_load_explicit(&p->head, memory_order_acquire);
      if (head == tail) {
        /* Wait for a batch (hysteresis keeps clock reads off the common path). */
        long want = tail + (end - tail < Q_CAP / 2 ? end - tail : Q_CAP / 2);
        uint64_t w0 = bl_now_ns();
        while ((head = atomic_load_explicit(&p->head, memory_order_acquire)) < want)
          cpu_relax();
        waited += bl_now_ns() - w0;
      }
      for (; tail < head; tail++) {
        q_item *it = &p->items[tail % Q_CAP];
        bl_proxy_part(it->c, it->coll);
        atomic_store_explicit(&p->tail, tail + 1, memory_order_release);
      }
    }
    p->proxy_busy_ns = bl_now_ns() - t0 - waited;
    if (p->counted) bl_window(0);
    pthread_barrier_wait(&p->done);
  }
}

/* counted: open the call-count window around this run (the barriers between runs make system
 * calls that belong to the driver, not to the plugin). */
static double run_2t(hp_pipe *p, bl_comm *cs, long n, int counted) {
  p->n = n;
  p->counted = counted;
  pthread_barrier_wait(&p->start);
  if (counted) bl_window(1);
  uint64_t t0 = bl_now_ns(), waited = 0;
  long head = atomic_load_explicit(&p->head, memory_order_relaxed);
  for (long i = 0; i < n; i++) {
    if (head - atomic_load_explicit(&p->tail, memory_order_acquire) >= Q_CAP) {
      uint64_t w0 = bl_now_ns();
      while (head - atomic_load_explicit(&p->tail, memory_order_acquire) > Q_CAP / 2)
        cpu_relax();
      waited += bl_now_ns() - w0;
    }
    bl_comm *c = &cs[i & 1];
    q_item *it = &p->items[head % Q_CAP];
    it->c = c;
    it->coll = bl_app_part(c);
    atomic_store_explicit(&p->head, ++head, memory_order_release);
  }
  uint64_t app_busy = bl_now_ns() - t0 - waited;
  if (counted) bl_window(0);
  pthread_barrier_wait(&p->done);
  return (double)(app_busy + p->proxy_busy_ns);
}

/* -------------------------------------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr, "usage: bench_hotpath PLUGIN.so [-n lifecycles] [-r runs] [-w warmup] "
                  "[-s steps] [-t 1|2]\n");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') usage();
  const char *path = argv[1];
  hp_opts o = {.n = 100000, .warmup = 20000, .runs = 7, .steps = 4, .threads = 1};
  int opt;
  optind = 2;
  while ((opt = getopt(argc, argv, "n:r:w:s:t:")) != -1) {
    switch (opt) {
    case 'n': o.n = atol(optarg); break;
    case 'r': o.runs = atoi(optarg); break;
    case 'w': o.warmup = atol(optarg); break;
    case 's': o.steps = atoi(optarg); break;
    case 't': o.threads = atoi(optarg); break;
    default: usage();
    }
  }
  if (o.n < 1 || o.runs < 1 || o.runs > 99 || o.warmup < 0 || o.steps < 1 ||
      (o.threads != 1 && o.threads != 2))
    usage();

  wdh_plugin plugin;
  if (wdh_load(&plugin, path, 0) != 0) return 1;
  if (!plugin.v6) {
    fprintf(stderr, "bench_hotpath: %s has no ncclProfiler_v6\n", path);
    return 1;
  }
  wdh_comm comms[2];
  bl_comm cs[2];
  for (int i = 0; i < o.threads; i++) {
    char name[32];
    snprintf(name, sizeof(name), "bench%d", i);
    wdh_comm_init(&comms[i], &plugin, 0x1000 + i, name, 2, 2, 0);
    cs[i] = (bl_comm){.t = plugin.v6, .ctx = comms[i].ctx, .pid = getpid(), .rank = 0,
                      .steps = o.steps};
  }

  /* nccl-watchdog allocates a communicator's ring file whole at the watchdog's first poll after
   * it carries traffic (before that, records past the first few are not kept): one lifecycle,
   * then more than a poll (1 s by default) before the warm-up, so every run measures whole
   * rings. The other plugins just wait. */
  for (int i = 0; i < o.threads; i++) bl_proxy_part(&cs[i], bl_app_part(&cs[i]));
  wdh_sleep_ms(1500);

  double per_cb[99];
  long cbs = o.n * bl_callbacks(o.steps);
  if (o.threads == 1) {
    bench_timed_loop(&cs[0], o.warmup);
    bl_window(1);
    for (int r = 0; r < o.runs; r++) per_cb[r] = run_1t(&cs[0], o.n) / cbs;
    bl_window(0);
  } else {
    /* The second communicator gets the same warm-up; alternate so both are warm. */
    cs[1].ctx = comms[1].ctx;
    static hp_pipe p;
    pthread_barrier_init(&p.start, NULL, 2);
    pthread_barrier_init(&p.done, NULL, 2);
    pthread_t th;
    if (pthread_create(&th, NULL, proxy_main, &p) != 0) return 1;
    if (o.warmup) run_2t(&p, cs, o.warmup, 0);
    for (int r = 0; r < o.runs; r++) per_cb[r] = run_2t(&p, cs, o.n, 1) / cbs;
    p.stop = 1;
    pthread_barrier_wait(&p.start);
    pthread_join(th, NULL);
  }

  for (int i = 0; i < o.threads; i++) wdh_comm_finalize(&comms[i]);
  const char *name = plugin.name ? plugin.name : "?";
  char name_copy[64];
  snprintf(name_copy, sizeof(name_copy), "%s", name);
  wdh_unload(&plugin);

  qsort(per_cb, o.runs, sizeof(double), cmp_double);
  printf("hotpath plugin=%s threads=%d lifecycles=%ld callbacks=%d runs=%d ns_per_cb=%.2f "
         "min=%.2f max=%.2f\n",
         name_copy, o.threads, o.n, bl_callbacks(o.steps), o.runs, per_cb[o.runs / 2], per_cb[0],
         per_cb[o.runs - 1]);
  return wdh_failures() ? 1 : 0;
}
