/*
 * Detection and dump latency through the real plugin and its watchdog thread.
 *
 *   bench_detect PLUGIN.so stall  [-r reps]
 *     NCCL_WATCHDOG_TIMEOUT=1s and NCCL_WATCHDOG_POLL=100ms unless set. Each repetition leaves a
 *     ProxyStep in RecvWait (the last progress), waits for the stall dump to appear in the dump
 *     directory (inotify, rename into place) and reports that time minus the timeout; then
 *     resumes the operation so the next episode can be detected.
 *     Prints: detect stall latency_ms=MEDIAN min=.. max=.. timeout_ms=T poll_ms=P reps=R
 *     and, split at the dump's time.mono_ns (when the watchdog began collecting):
 *             detect stall-detection detect_ms=.. (beyond the timeout)
 *             detect stall-dump write_ms=.. (collect, render, write, rename)
 *
 *   bench_detect PLUGIN.so signal [-r reps] [-c comms] [-T threads]
 *     8 communicators with full rings and one operation in flight each, 64 idle threads; each
 *     repetition sends SIGUSR1 to the process and times until the dump file appears.
 *     Prints: detect signal dump_ms=MEDIAN min=.. max=.. comms=C threads=T reps=R bytes=..
 *
 *   bench_detect PLUGIN.so peer [-c comms] [-T threads]
 *     The same process, answering a job-wide trigger another rank posted (an episode file in the
 *     dump directory's triggers/): the peer dump is a summary. Reports its size, the figure a
 *     job's dump round is made of (gzip-compressed by default; NCCL_WATCHDOG_COMPRESS=off in the
 *     environment measures the plain one).
 *     Prints: detect peer dump_ms=.. comms=C threads=T reps=1 bytes=..
 *
 * The dump directory is a fresh temporary directory, removed at the end (BENCH_KEEP=1 keeps it).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nccl_host.h"
#include "lifecycle.h"
#include "base/config.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Block until a file whose name ends with suffix is renamed or written into the watched
 * directory; returns the time it was seen (0 on timeout) and its name in name_out. */
static uint64_t wait_file(int ifd, const char *suffix, unsigned timeout_ms, char *name_out,
                          size_t name_len) {
  uint64_t deadline = wdh_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    uint64_t now = wdh_now_ns();
    if (now >= deadline) return 0;
    struct pollfd pfd = {.fd = ifd, .events = POLLIN};
    int rc = poll(&pfd, 1, (int)((deadline - now) / 1000000ull) + 1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    ssize_t len = read(ifd, buf, sizeof(buf));
    uint64_t seen = wdh_now_ns();
    for (char *p = buf; len > 0 && p < buf + len;) {
      struct inotify_event *ev = (struct inotify_event *)p;
      /* Plain, or compressed (peer summaries by default, any dump with NCCL_WATCHDOG_COMPRESS). */
      char gz[64];
      snprintf(gz, sizeof gz, "%s.gz", suffix);
      if (ev->len && (ends_with(ev->name, suffix) || ends_with(ev->name, gz)) && ev->name[0] != '.') {
        snprintf(name_out, name_len, "%s", ev->name);
        return seen;
      }
      p += sizeof(*ev) + ev->len;
    }
  }
}

static void print_stats(const char *head, const char *what, double *v, int n, const char *tail) {
  qsort(v, n, sizeof(double), cmp_double);
  printf("%s %s=%.1f min=%.1f max=%.1f%s\n", head, what, v[n / 2], v[0], v[n - 1], tail);
}

static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;
static int idle_stop;

static void *idle_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&idle_lock);
  while (!idle_stop) pthread_cond_wait(&idle_cond, &idle_lock);
  pthread_mutex_unlock(&idle_lock);
  return NULL;
}

/* time.mono_ns of a dump (a hex string), 0 when absent. */
static uint64_t dump_mono_ns(const char *path) {
  cJSON *doc = wdh_json_load(path);
  uint64_t v = 0;
  cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "time"),
                                              "mono_ns");
  if (cJSON_IsString(t)) v = strtoull(t->valuestring, NULL, 16);
  wdh_json_free(doc);
  return v;
}

static int bench_stall(wdh_plugin *pl, int ifd, const char *dir, int reps, double timeout_ms,
                       double poll_ms) {
  wdh_comm comm;
  wdh_comm_init(&comm, pl, 0x3000, "detect", 2, 2, 0);
  double lat[64], det[64], wr[64];
  int got = 0, ndet = 0;
  unsigned seed = (unsigned)wdh_now_ns();
  for (int r = 0; r < reps; r++) {
    /* A random phase against the watchdog's poll grid, or every repetition would see the same
     * delay. */
    wdh_sleep_ms((unsigned)(rand_r(&seed) % (unsigned)(poll_ms > 1 ? poll_ms : 1)));
    wdh_op_cfg cfg;
    wdh_op_cfg_default(&cfg);
    cfg.hang_channel = 0;
    cfg.hang_step = 1;
    wdh_op op;
    if (wdh_op_run(&comm, &cfg, &op) != 1) {
      fprintf(stderr, "bench_detect: the host did not leave the operation hung\n");
      return 1;
    }
    uint64_t last = wdh_now_ns(); /* right after the RecvWait state: the last progress */
    char name[NAME_MAX + 1];
    uint64_t seen = wait_file(ifd, "-stall.json", (unsigned)(timeout_ms * 10 + 5000), name,
                              sizeof(name));
    if (!seen) {
      fprintf(stderr, "bench_detect: no stall dump within %.0f ms\n", timeout_ms * 10 + 5000);
      return 1;
    }
    lat[got++] = (double)(seen - last) / 1e6 - timeout_ms;
    /* The dump's time.mono_ns is when the watchdog started collecting it: the detection. */
    char path[PATH_MAX + 512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    uint64_t mono = dump_mono_ns(path);
    if (mono > last && mono < seen) {
      det[ndet] = (double)(mono - last) / 1e6 - timeout_ms;
      wr[ndet++] = (double)(seen - mono) / 1e6;
    }
    wdh_op_resume(&op);
    wdh_sleep_ms((unsigned)(3 * poll_ms)); /* progress seen, episode re-armed */
  }
  wdh_comm_finalize(&comm);
  char tail[64];
  snprintf(tail, sizeof(tail), " timeout_ms=%.0f poll_ms=%.0f reps=%d", timeout_ms, poll_ms, got);
  print_stats("detect stall", "latency_ms", lat, got, tail);
  if (ndet) {
    print_stats("detect stall-detection", "detect_ms", det, ndet, "");
    print_stats("detect stall-dump", "write_ms", wr, ndet, "");
  }
  return 0;
}

static int bench_signal(wdh_plugin *pl, int ifd, const char *dir, int reps, int ncomms,
                        int nthreads, const char *trigger_dir) {
  wdh_comm comms[64];
  wdh_op ops[64];
  bl_comm bc[64];
  for (int i = 0; i < ncomms; i++) {
    char name[32];
    snprintf(name, sizeof(name), "dump%d", i);
    wdh_comm_init(&comms[i], pl, 0x4000 + i, name, 2, 16, i);
    bc[i] = (bl_comm){.t = pl->v6, .ctx = comms[i].ctx, .pid = getpid(), .rank = i, .steps = 4};
    bl_proxy_part(&bc[i], bl_app_part(&bc[i]));
  }
  /* Ring files are allocated whole at the watchdog's first poll after traffic (1 s default). */
  wdh_sleep_ms(1500);
  for (int i = 0; i < ncomms; i++) {
    for (int k = 0; k < 20000; k++) bl_proxy_part(&bc[i], bl_app_part(&bc[i])); /* rings full */
    wdh_op_cfg cfg;
    wdh_op_cfg_default(&cfg);
    cfg.hang_channel = 1;
    wdh_op_run(&comms[i], &cfg, &ops[i]); /* one open tree per communicator */
  }
  pthread_t th[256];
  int started = 0;
  for (; started < nthreads; started++)
    if (pthread_create(&th[started], NULL, idle_main, NULL) != 0) break;

  double lat[64];
  int got = 0;
  long bytes = 0;
  for (int r = 0; r < reps; r++) {
    uint64_t t0 = wdh_now_ns();
    const char *suffix = trigger_dir ? "-peer.json" : "-signal.json";
    if (trigger_dir) {
      /* Another rank's stall opened episode 1 of the job. */
      char tpath[PATH_MAX + 64];
      snprintf(tpath, sizeof(tpath), "%s/episode-%d.trigger", trigger_dir, r + 1);
      FILE *f = fopen(tpath, "w");
      if (f) fclose(f);
    } else {
      kill(getpid(), SIGUSR1);
    }
    char name[NAME_MAX + 1];
    uint64_t seen = wait_file(ifd, suffix, 20000, name, sizeof(name));
    if (!seen) {
      fprintf(stderr, "bench_detect: no %s dump within 20 s\n", suffix);
      break;
    }
    lat[got++] = (double)(seen - t0) / 1e6;
    char path[PATH_MAX + 512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    struct stat st;
    if (stat(path, &st) == 0) bytes = (long)st.st_size;
    wdh_sleep_ms(100);
  }
  pthread_mutex_lock(&idle_lock);
  idle_stop = 1;
  pthread_cond_broadcast(&idle_cond);
  pthread_mutex_unlock(&idle_lock);
  for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < ncomms; i++) wdh_op_resume(&ops[i]);
  for (int i = 0; i < ncomms; i++) wdh_comm_finalize(&comms[i]);
  if (!got) return 1;
  char tail[96];
  snprintf(tail, sizeof(tail), " comms=%d threads=%d reps=%d bytes=%ld", ncomms, started, got,
           bytes);
  print_stats(trigger_dir ? "detect peer" : "detect signal", "dump_ms", lat, got, tail);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3 || (strcmp(argv[2], "stall") && strcmp(argv[2], "signal") && strcmp(argv[2], "peer"))) {
    fprintf(stderr, "usage: bench_detect PLUGIN.so stall|signal|peer [-r reps] [-c comms] "
                    "[-T threads]\n");
    return 2;
  }
  int stall = !strcmp(argv[2], "stall"), peer = !strcmp(argv[2], "peer");
  int reps = 5, ncomms = 8, nthreads = 64, opt;
  optind = 3;
  while ((opt = getopt(argc, argv, "r:c:T:")) != -1) {
    if (opt == 'r') reps = atoi(optarg);
    else if (opt == 'c') ncomms = atoi(optarg);
    else if (opt == 'T') nthreads = atoi(optarg);
    else return 2;
  }
  if (reps < 1 || reps > 64 || ncomms < 1 || ncomms > 64 || nthreads < 0 || nthreads > 256)
    return 2;

  char *dir = wdh_tempdir("bench-detect");
  if (!dir) return 1;
  setenv("NCCL_WATCHDOG_DUMP_DIR", dir, 1);
  if (stall) {
    setenv("NCCL_WATCHDOG_TIMEOUT", "1s", 0);
    setenv("NCCL_WATCHDOG_POLL", "100ms", 0);
  }
  /* What the plugin will use, read with its own parser. */
  double timeout_ms = 0, poll_ms = 0;
  uint64_t ns;
  if (stall && wd_parse_duration_ns(getenv("NCCL_WATCHDOG_TIMEOUT"), &ns) == 0)
    timeout_ms = ns / 1e6;
  if (stall && wd_parse_duration_ns(getenv("NCCL_WATCHDOG_POLL"), &ns) == 0) poll_ms = ns / 1e6;
  if (stall && (timeout_ms <= 0 || poll_ms <= 0)) {
    fprintf(stderr, "bench_detect: bad NCCL_WATCHDOG_TIMEOUT or NCCL_WATCHDOG_POLL\n");
    return 2;
  }

  /* Dumps land in the host's subdirectory of the dump directory: watch that one. */
  setenv("NCCL_WATCHDOG_HOSTNAME", "bench", 1);
  char hostdir[PATH_MAX - 300];
  snprintf(hostdir, sizeof hostdir, "%s/bench", dir);
  mkdir(hostdir, 0700);
  int ifd = inotify_init1(IN_CLOEXEC);
  if (ifd < 0 || inotify_add_watch(ifd, hostdir, IN_MOVED_TO | IN_CLOSE_WRITE) < 0) {
    perror("bench_detect: inotify");
    return 1;
  }
  wdh_plugin pl;
  if (wdh_load(&pl, argv[1], 0) != 0 || !pl.v6) return 1;
  char trigdir[PATH_MAX];
  snprintf(trigdir, sizeof trigdir, "%.*s/triggers", PATH_MAX - 16, dir);
  if (peer) {
    /* One process is its node's poller: it reads the shared directory at this interval. */
    setenv("NCCL_WATCHDOG_TRIGGER_POLL", "1", 0);
    setenv("NCCL_WATCHDOG_POLL", "100ms", 0);
    mkdir(trigdir, 0700);
    reps = 1;
  }
  int rc = stall ? bench_stall(&pl, ifd, hostdir, reps, timeout_ms, poll_ms)
                 : bench_signal(&pl, ifd, hostdir, reps, ncomms, nthreads, peer ? trigdir : NULL);
  wdh_unload(&pl);
  close(ifd);
  const char *keep = getenv("BENCH_KEEP");
  if (keep && *keep == '1') fprintf(stderr, "bench_detect: dumps kept in %s\n", dir);
  else wdh_rmtree(dir);
  free(dir);
  return rc;
}
