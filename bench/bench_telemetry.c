/*
 * The watchdog thread's cost, idle and busy, with telemetry off, on, and on with the OTLP
 * export to a local collector (an HTTP sink in this program that answers 200): CPU time of the
 * thread named "nccl-watchdog" (/proc/self/task/<tid>/schedstat) per second of wall time. Each
 * mode runs in its own process (the plugin loaded anew with its settings).
 *
 *   bench_telemetry PLUGIN.so [-c comms] [-i idle_seconds] [-b busy_seconds] [-p poll]
 *
 * Idle: `comms` communicators that carried traffic, then nothing (the job between steps, or
 * stuck). Busy: the main thread drives lean allreduce lifecycles (bench/lifecycle.h) on them
 * round-robin, so the watchdog reads every record they write. Prints per mode:
 *   telemetry mode=off|on|otlp idle_us_per_s=.. busy_us_per_s=.. busy_records_per_s=.. exports=..
 * Busy records are what the communicators write; the watchdog reads at most its rings' size of
 * them per communicator and poll (the rest are overwritten first), so its busy cost is bounded.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lifecycle.h"
#include "nccl_host.h"

static pid_t watchdog_tid(void) {
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  pid_t tid = 0;
  while (d && (e = readdir(d))) {
    char p[300], name[64] = "";
    snprintf(p, sizeof p, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(p, "r");
    if (f && fgets(name, sizeof name, f) && !strncmp(name, "nccl-watchdog", 13)) tid = atoi(e->d_name);
    if (f) fclose(f);
  }
  if (d) closedir(d);
  return tid;
}

static uint64_t cpu_ns(pid_t tid) {
  char p[128];
  unsigned long long ns = 0;
  snprintf(p, sizeof p, "/proc/self/task/%d/schedstat", (int)tid);
  FILE *f = fopen(p, "r");
  if (f) {
    if (fscanf(f, "%llu", &ns) != 1) ns = 0;
    fclose(f);
  }
  return ns;
}

/* The collector: accepts, reads one request (headers, then Content-Length bytes), answers 200. */
static int sink_fd;
static long sink_requests;
static void *sink(void *arg) {
  (void)arg;
  for (;;) {
    int c = accept(sink_fd, NULL, NULL);
    if (c < 0) return NULL;
    char buf[8192];
    size_t have = 0;
    long left = -1;
    ssize_t n;
    while (left != 0 && (n = read(c, buf + have, sizeof buf - 1 - have)) > 0) {
      if (left > 0) { /* body bytes: counted, dropped */
        left = left > n ? left - n : 0;
        continue;
      }
      have += (size_t)n;
      buf[have] = '\0';
      char *end = strstr(buf, "\r\n\r\n");
      if (end) {
        char *cl = strcasestr(buf, "content-length:");
        long body = cl ? atol(cl + 15) : 0, got = (long)(have - (size_t)(end + 4 - buf));
        left = body > got ? body - got : 0;
        have = 0;
      } else if (have == sizeof buf - 1) {
        break;
      }
    }
    static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    if (write(c, ok, sizeof ok - 1) < 0) {
    }
    close(c);
    __atomic_add_fetch(&sink_requests, 1, __ATOMIC_RELAXED);
  }
}

static int sink_start(void) {
  sink_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (sink_fd < 0 || bind(sink_fd, (struct sockaddr *)&a, sizeof a) || listen(sink_fd, 16) ||
      getsockname(sink_fd, (struct sockaddr *)&a, &len))
    return 0;
  pthread_t t;
  pthread_create(&t, NULL, sink, NULL);
  pthread_detach(t);
  return ntohs(a.sin_port);
}

static int run_mode(const char *plugin, const char *mode, int ncomms, int idle_s, int busy_s) {
  if (!strcmp(mode, "off")) setenv("NCCL_WATCHDOG_TELEMETRY", "0", 1);
  if (!strcmp(mode, "otlp")) {
    int port = sink_start();
    if (!port) return 1;
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", port);
    setenv("NCCL_WATCHDOG_OTLP_ENDPOINT", url, 1);
  }
  wdh_plugin p;
  if (wdh_load(&p, plugin, 0) != 0 || !p.v6) return 1;
  wdh_comm comms[64];
  bl_comm cs[64];
  for (int i = 0; i < ncomms; i++) {
    char name[32];
    snprintf(name, sizeof name, "tel%d", i);
    wdh_comm_init(&comms[i], &p, 0x7e00 + (uint64_t)i, name, 2, 4, 0);
    cs[i] = (bl_comm){.t = p.v6, .ctx = comms[i].ctx, .pid = getpid(), .steps = 4};
    for (int k = 0; k < 100; k++) bl_proxy_part(&cs[i], bl_app_part(&cs[i]));
  }
  wdh_sleep_ms(2500); /* ring files allocated, the first records read */
  pid_t tid = watchdog_tid();
  if (!tid) return 1;
  uint64_t c0 = cpu_ns(tid), t0 = bl_now_ns();
  wdh_sleep_ms((unsigned)idle_s * 1000);
  uint64_t c1 = cpu_ns(tid), t1 = bl_now_ns();
  double idle = (double)(c1 - c0) / 1e3 / ((double)(t1 - t0) / 1e9);
  long ops = 0;
  uint64_t end = t1 + (uint64_t)busy_s * 1000000000ull;
  while (bl_now_ns() < end) {
    for (int i = 0; i < ncomms; i++) bl_proxy_part(&cs[i], bl_app_part(&cs[i]));
    ops += ncomms;
  }
  uint64_t c2 = cpu_ns(tid), t2 = bl_now_ns();
  double secs = (double)(t2 - t1) / 1e9;
  /* Records per lifecycle: 4 operation-level (GroupApi, CollApi, Group, Coll starts; stops
   * rewrite them in place or add one), and proxy spans: 4 ProxyOps, 16 steps, 2 KernelCh. */
  double recs = (double)ops * (BL_CB_APP / 2.0 + BL_OPS + BL_OPS * 4 + BL_CHANNELS) / secs;
  double busy = (double)(c2 - c1) / 1e3 / secs;
  printf("telemetry mode=%s idle_us_per_s=%.1f busy_us_per_s=%.0f busy_records_per_s=%.0f "
         "exports=%ld comms=%d\n",
         mode, idle, busy, recs, __atomic_load_n(&sink_requests, __ATOMIC_RELAXED), ncomms);
  fflush(stdout);
  for (int i = 0; i < ncomms; i++) wdh_comm_finalize(&comms[i]);
  wdh_unload(&p);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: bench_telemetry PLUGIN.so [-c comms] [-i idle_s] [-b busy_s] [-p poll]\n");
    return 2;
  }
  int ncomms = 16, idle_s = 10, busy_s = 5, opt;
  optind = 2;
  while ((opt = getopt(argc, argv, "c:i:b:p:")) != -1) {
    if (opt == 'c') ncomms = atoi(optarg);
    else if (opt == 'i') idle_s = atoi(optarg);
    else if (opt == 'b') busy_s = atoi(optarg);
    else if (opt == 'p') setenv("NCCL_WATCHDOG_POLL", optarg, 1);
    else return 2;
  }
  if (ncomms < 1 || ncomms > 64 || idle_s < 1 || busy_s < 1) return 2;
  char *dir = wdh_tempdir("bench-telemetry");
  if (!dir) return 1;
  setenv("NCCL_WATCHDOG_DUMP_DIR", dir, 1);
  setenv("NCCL_WATCHDOG_RING_DIR", dir, 1);
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);
  const char *interval = getenv("NCCL_WATCHDOG_METRICS"); /* the export at the file's pace */
  setenv("NCCL_WATCHDOG_OTLP_INTERVAL", interval ? interval : "10s", 1);
  static const char *const modes[] = {"off", "on", "otlp"};
  int rc = 0;
  for (int m = 0; m < 3; m++) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(run_mode(argv[1], modes[m], ncomms, idle_s, busy_s));
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
      fprintf(stderr, "bench_telemetry: mode %s failed\n", modes[m]);
      rc = 1;
    }
  }
  wdh_rmtree(dir);
  free(dir);
  return rc;
}
