/* nccl_e2e: end-to-end scenarios for nccl-watchdog against a real NCCL on one GPU.
 *
 * One launcher process forks N workers (re-executing this binary with --worker R). Each worker is
 * one NCCL rank; all of them share one GPU. Each worker gets its own NCCL_HOSTID, so NCCL believes
 * the ranks live on different hosts and connects them through the socket network transport over
 * loopback: that is what makes NCCL drive the profiler with real ProxyOp/ProxyStep traffic.
 *
 * Workers rendezvous through files in WORK/rdv: rank 0 writes the ncclUniqueId, the others read
 * it; "mark-NAME-R" files tell the launcher (and the other workers) where each rank is; "go-NAME"
 * files written by the launcher release the workers; an "abort" file asks every worker to
 * ncclCommAbort and leave. The launcher watches WORK/dumps (NCCL_WATCHDOG_DUMP_DIR), decides
 * PASS or FAIL for the structural part of a scenario, and writes WORK/manifest.json for the
 * content checks done by check_dumps.py.
 *
 * This is a C program: no kernels, only the CUDA runtime API and NCCL. --help, --dry-run and
 * --check-args never touch the GPU.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define E2E_PATH_MAX 1024
#define E2E_MAX_RANKS 8
#define E2E_MAX_COMMS 3

/* Worker exit codes; the launcher turns them into sentences. */
enum {
  EX_OK = 0,
  EX_CHECK = 1,    /* a result was wrong, or something that must not happen happened */
  EX_USAGE = 2,
  EX_ABORTED = 3,  /* left through ncclCommAbort because the launcher asked */
  EX_CUDA = 4,
  EX_NCCL = 5,
  EX_RDV = 6,      /* rendezvous or barrier timed out */
  EX_PLUGIN = 7,   /* NCCL did not load the profiler plugin */
  EX_NOGPU = 8,
};

typedef enum {
  SC_HEALTHY,
  SC_SKIP,
  SC_SIGNAL,
  SC_GRAPH,
  SC_TWOCOMMS,
  SC_BENCH,
  SC_PROBE,
  SC_COUNT
} e2e_scenario;

static const char *const sc_names[SC_COUNT] = {"healthy", "skip", "signal", "graph",
                                               "twocomms", "bench", "probe"};

typedef struct e2e_opts {
  int scenario;           /* -1 until given */
  int nranks;             /* --ranks */
  int skip_rank;          /* --skip-rank; -1 = last rank */
  int iters;              /* --iters; 0 = scenario default */
  int device;             /* --device */
  long timeout_ms;        /* --timeout: NCCL_WATCHDOG_TIMEOUT given to the workers */
  long poll_ms;           /* --poll: NCCL_WATCHDOG_POLL */
  long deadline_ms;       /* --deadline: the whole scenario */
  long min_bytes;         /* bench */
  long max_bytes;         /* bench */
  int plugin_given;
  char plugin[E2E_PATH_MAX];   /* --plugin PATH|NAME|none */
  char work_dir[E2E_PATH_MAX]; /* --work-dir */
  int dry_run;
  int check_args;
  int help;
  int verbose;
  int worker_rank;        /* --worker R (internal); -1 in the launcher */
} e2e_opts;

/* ---------------------------------------------------------------------------------------------
 * Argument handling. e2e_parse_args has no side effects so --check-args can run it on a table.
 * ------------------------------------------------------------------------------------------- */

static void opts_defaults(e2e_opts *o) {
  memset(o, 0, sizeof(*o));
  o->scenario = -1;
  o->nranks = 2;
  o->skip_rank = -1;
  o->device = 0;
  o->timeout_ms = 5000;
  o->poll_ms = 500;
  o->deadline_ms = 300000;
  o->min_bytes = 8;
  o->max_bytes = 1L << 20;
  o->worker_rank = -1;
}

static int parse_long(const char *s, long min, long max, long *out) {
  char *end;
  long v;
  if (!s || !*s) return -1;
  errno = 0;
  v = strtol(s, &end, 10);
  if (errno || *end || v < min || v > max) return -1;
  *out = v;
  return 0;
}

/* Seconds with an optional fraction ("5", "0.5"), returned in ms. */
static int parse_seconds_ms(const char *s, long min_ms, long max_ms, long *out_ms) {
  char *end;
  double v;
  if (!s || !*s) return -1;
  errno = 0;
  v = strtod(s, &end);
  if (errno || *end || !isfinite(v)) return -1;
  v *= 1000.0;
  if (v < (double)min_ms || v > (double)max_ms) return -1;
  *out_ms = (long)(v + 0.5);
  return 0;
}

static int scenario_from_name(const char *s) {
  for (int i = 0; i < SC_COUNT; i++)
    if (strcmp(s, sc_names[i]) == 0) return i;
  return -1;
}

#define ARG_ERR(...)                        \
  do {                                      \
    snprintf(err, errlen, __VA_ARGS__);     \
    return -1;                              \
  } while (0)

/* Returns 0 when o describes something to run, 1 for --help, -1 with err filled. */
static int e2e_parse_args(int argc, char *const argv[], e2e_opts *o, char *err, size_t errlen) {
  long v;
  int skip_given = 0;
  opts_defaults(o);
  err[0] = '\0';
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = NULL;
    int takes = 0;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      o->help = 1;
      continue;
    }
    if (strcmp(a, "--dry-run") == 0) { o->dry_run = 1; continue; }
    if (strcmp(a, "--check-args") == 0) { o->check_args = 1; continue; }
    if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) { o->verbose = 1; continue; }
    if (a[0] == '-' && a[1] == '-') {
      static const char *const with_value[] = {"--ranks", "--skip-rank", "--iters", "--device",
                                                "--timeout", "--poll", "--deadline",
                                                "--min-bytes", "--max-bytes", "--plugin",
                                                "--work-dir", "--worker", NULL};
      for (int k = 0; with_value[k]; k++)
        if (strcmp(a, with_value[k]) == 0) takes = 1;
      if (!takes) ARG_ERR("unknown option '%s'", a);
      if (i + 1 >= argc) ARG_ERR("option '%s' needs a value", a);
      val = argv[++i];
    } else if (a[0] == '-' && a[1] != '\0') {
      ARG_ERR("unknown option '%s'", a);
    } else {
      int sc = scenario_from_name(a);
      if (sc < 0) ARG_ERR("unknown scenario '%s' (one of healthy, skip, signal, graph, twocomms, bench, probe)", a);
      if (o->scenario >= 0) ARG_ERR("only one scenario per run ('%s' and '%s')", sc_names[o->scenario], a);
      o->scenario = sc;
      continue;
    }
    if (strcmp(a, "--ranks") == 0) {
      if (parse_long(val, 2, E2E_MAX_RANKS, &v)) ARG_ERR("--ranks must be an integer from 2 to %d, not '%s'", E2E_MAX_RANKS, val);
      o->nranks = (int)v;
    } else if (strcmp(a, "--skip-rank") == 0) {
      if (parse_long(val, 0, E2E_MAX_RANKS - 1, &v)) ARG_ERR("--skip-rank must be a rank number, not '%s'", val);
      o->skip_rank = (int)v;
      skip_given = 1;
    } else if (strcmp(a, "--iters") == 0) {
      if (parse_long(val, 1, 1000000, &v)) ARG_ERR("--iters must be an integer from 1 to 1000000, not '%s'", val);
      o->iters = (int)v;
    } else if (strcmp(a, "--device") == 0) {
      if (parse_long(val, 0, 63, &v)) ARG_ERR("--device must be a CUDA device number, not '%s'", val);
      o->device = (int)v;
    } else if (strcmp(a, "--timeout") == 0) {
      if (parse_seconds_ms(val, 100, 3600000, &o->timeout_ms)) ARG_ERR("--timeout must be seconds from 0.1 to 3600, not '%s'", val);
    } else if (strcmp(a, "--poll") == 0) {
      if (parse_seconds_ms(val, 10, 600000, &o->poll_ms)) ARG_ERR("--poll must be seconds from 0.01 to 600, not '%s'", val);
    } else if (strcmp(a, "--deadline") == 0) {
      if (parse_seconds_ms(val, 1000, 86400000, &o->deadline_ms)) ARG_ERR("--deadline must be seconds from 1 to 86400, not '%s'", val);
    } else if (strcmp(a, "--min-bytes") == 0) {
      if (parse_long(val, 4, 1L << 30, &o->min_bytes)) ARG_ERR("--min-bytes must be from 4 to 1073741824, not '%s'", val);
    } else if (strcmp(a, "--max-bytes") == 0) {
      if (parse_long(val, 4, 1L << 30, &o->max_bytes)) ARG_ERR("--max-bytes must be from 4 to 1073741824, not '%s'", val);
    } else if (strcmp(a, "--plugin") == 0) {
      if (!*val || strlen(val) >= sizeof(o->plugin)) ARG_ERR("--plugin needs a path, a name or 'none'");
      snprintf(o->plugin, sizeof(o->plugin), "%s", val);
      o->plugin_given = 1;
    } else if (strcmp(a, "--work-dir") == 0) {
      if (!*val || strlen(val) >= sizeof(o->work_dir) - 64) ARG_ERR("--work-dir needs a path shorter than %zu bytes", sizeof(o->work_dir) - 64);
      snprintf(o->work_dir, sizeof(o->work_dir), "%s", val);
    } else if (strcmp(a, "--worker") == 0) {
      if (parse_long(val, 0, E2E_MAX_RANKS - 1, &v)) ARG_ERR("--worker must be a rank number, not '%s'", val);
      o->worker_rank = (int)v;
    }
  }
  if (o->help) return 1;
  if (o->check_args) return 0;
  if (o->scenario < 0) ARG_ERR("no scenario given (one of healthy, skip, signal, graph, twocomms, bench, probe)");
  if (skip_given && o->scenario != SC_SKIP && o->scenario != SC_GRAPH)
    ARG_ERR("--skip-rank only applies to the skip and graph scenarios");
  if (o->skip_rank < 0) o->skip_rank = o->nranks - 1;
  if (o->skip_rank >= o->nranks) ARG_ERR("--skip-rank %d is not a rank of a %d-rank job", o->skip_rank, o->nranks);
  if (o->poll_ms >= o->timeout_ms) ARG_ERR("--poll (%.3g s) must be shorter than --timeout (%.3g s)", o->poll_ms / 1e3, o->timeout_ms / 1e3);
  if (o->min_bytes > o->max_bytes) ARG_ERR("--min-bytes (%ld) is larger than --max-bytes (%ld)", o->min_bytes, o->max_bytes);
  if (o->worker_rank >= 0) {
    if (o->worker_rank >= o->nranks) ARG_ERR("--worker %d is not a rank of a %d-rank job", o->worker_rank, o->nranks);
    if (!o->work_dir[0]) ARG_ERR("--worker needs --work-dir");
  }
  if (o->scenario != SC_BENCH && o->scenario != SC_PROBE && o->scenario != SC_HEALTHY &&
      o->plugin_given && strcmp(o->plugin, "none") == 0)
    ARG_ERR("scenario '%s' checks the plugin's dumps: it cannot run with --plugin none", sc_names[o->scenario]);
  return 0;
}

static int scenario_default_iters(int sc) {
  switch (sc) {
    case SC_HEALTHY: return 200;
    case SC_SKIP: return 20;
    case SC_SIGNAL: return 100;
    case SC_GRAPH: return 300;
    case SC_TWOCOMMS: return 50;
    case SC_BENCH: return 100;
    default: return 1;
  }
}

static void usage(FILE *f) {
  fprintf(f,
"usage: nccl_e2e [options] SCENARIO\n"
"\n"
"Runs N NCCL ranks as N processes on one GPU (each with its own NCCL_HOSTID, so NCCL uses the\n"
"socket network transport over loopback) with the nccl-watchdog profiler plugin loaded, and\n"
"checks what the plugin dumps. Exit status: 0 pass, 1 fail, 2 usage error.\n"
"\n"
"scenarios:\n"
"  healthy   allreduce/allgather/sendrecv loop longer than the timeout, then an idle period:\n"
"            no dump may appear\n"
"  skip      one rank skips an allreduce: stall dumps from the others within timeout + poll,\n"
"            a peer dump from the skipping rank\n"
"  signal    SIGUSR1 to every rank during traffic: one signal dump each, traffic goes on\n"
"  graph     a CUDA-graph-captured allreduce replayed many times (no dump), then one rank\n"
"            does not replay: stall dumps\n"
"  twocomms  two communicators per process, SIGUSR1 dump naming both, finalize one, then the\n"
"            other, then a new communicator (plugin reloaded) and another SIGUSR1 dump\n"
"  bench     allreduce latency from --min-bytes to --max-bytes (rank 0 prints 'LAT bytes us')\n"
"  probe     print the CUDA/NCCL versions and the visible GPUs; exit 0 when one is usable\n"
"\n"
"options:\n"
"  --ranks N         number of ranks/processes, 2..%d (default 2)\n"
"  --skip-rank R     rank that skips (skip, graph; default the last rank)\n"
"  --iters N         iterations (default per scenario: healthy 200, skip 20, signal 100,\n"
"                    graph 300 replays, twocomms 50, bench 100 per timed block)\n"
"  --plugin P        NCCL_PROFILER_PLUGIN for the workers: a path, a name, or 'none'\n"
"                    (default: $NCCL_PROFILER_PLUGIN, else none)\n"
"  --timeout S       NCCL_WATCHDOG_TIMEOUT in seconds (default 5)\n"
"  --poll S          NCCL_WATCHDOG_POLL in seconds (default 0.5)\n"
"  --deadline S      give up on the whole scenario after S seconds (default 300)\n"
"  --device D        CUDA device every rank uses (default 0)\n"
"  --min-bytes B     smallest bench message (default 8)\n"
"  --max-bytes B     largest bench message (default 1048576)\n"
"  --work-dir DIR    rendezvous files, dumps (DIR/dumps), NCCL logs (DIR/logs) and\n"
"                    DIR/manifest.json; must be new, empty or an earlier nccl_e2e work dir\n"
"                    (default: a new directory under $TMPDIR)\n"
"  --dry-run         print the plan and each rank's environment; touch no GPU\n"
"  --check-args      run the argument parser's self-test; touch no GPU\n"
"  --verbose, -v     say more\n"
"  --help, -h        this text\n",
          E2E_MAX_RANKS);
}

/* The self-test behind --check-args: argument vectors and what the parser must make of them. */
typedef struct arg_case {
  const char *argv[10];
  int want;             /* return value of e2e_parse_args */
  const char *err_has;  /* substring of the error, or NULL */
  int ranks, skip;      /* checked when want == 0 and ranks > 0 */
  long timeout_ms;      /* checked when > 0 */
} arg_case;

static int run_check_args(void) {
  static const arg_case cases[] = {
    {{"x", "healthy"}, 0, NULL, 2, 1, 5000},
    {{"x", "--ranks", "4", "skip"}, 0, NULL, 4, 3, 0},
    {{"x", "skip", "--ranks", "3", "--skip-rank", "0"}, 0, NULL, 3, 0, 0},
    {{"x", "graph", "--timeout", "2.5", "--poll", "0.25"}, 0, NULL, 2, 1, 2500},
    {{"x", "--help"}, 1, NULL, 0, 0, 0},
    {{"x", "bogus", "--help"}, -1, "unknown scenario", 0, 0, 0},
    {{"x", "-h"}, 1, NULL, 0, 0, 0},
    {{"x"}, -1, "no scenario", 0, 0, 0},
    {{"x", "bogus"}, -1, "unknown scenario 'bogus'", 0, 0, 0},
    {{"x", "healthy", "skip"}, -1, "only one scenario", 0, 0, 0},
    {{"x", "--ranks", "1", "healthy"}, -1, "--ranks must be", 0, 0, 0},
    {{"x", "--ranks", "9", "healthy"}, -1, "--ranks must be", 0, 0, 0},
    {{"x", "--ranks", "2x", "healthy"}, -1, "--ranks must be", 0, 0, 0},
    {{"x", "healthy", "--ranks"}, -1, "needs a value", 0, 0, 0},
    {{"x", "--frobnicate", "healthy"}, -1, "unknown option '--frobnicate'", 0, 0, 0},
    {{"x", "-q", "healthy"}, -1, "unknown option '-q'", 0, 0, 0},
    {{"x", "skip", "--skip-rank", "2"}, -1, "not a rank of a 2-rank job", 0, 0, 0},
    {{"x", "healthy", "--skip-rank", "0"}, -1, "only applies", 0, 0, 0},
    {{"x", "skip", "--timeout", "1", "--poll", "1"}, -1, "must be shorter", 0, 0, 0},
    {{"x", "skip", "--timeout", "nan"}, -1, "--timeout must be", 0, 0, 0},
    {{"x", "skip", "--timeout", "0"}, -1, "--timeout must be", 0, 0, 0},
    {{"x", "bench", "--min-bytes", "4096", "--max-bytes", "8"}, -1, "larger than", 0, 0, 0},
    {{"x", "skip", "--plugin", "none"}, -1, "cannot run with --plugin none", 0, 0, 0},
    {{"x", "bench", "--plugin", "none"}, 0, NULL, 2, 1, 0},
    {{"x", "healthy", "--worker", "0"}, -1, "needs --work-dir", 0, 0, 0},
    {{"x", "healthy", "--worker", "5", "--work-dir", "w"}, -1, "not a rank", 0, 0, 0},
    {{"x", "--check-args"}, 0, NULL, 0, 0, 0},
  };
  int failed = 0, n = (int)(sizeof(cases) / sizeof(cases[0]));
  for (int c = 0; c < n; c++) {
    const arg_case *t = &cases[c];
    e2e_opts o;
    char err[256];
    int argc = 0;
    while (argc < 10 && t->argv[argc]) argc++;
    int got = e2e_parse_args(argc, (char *const *)t->argv, &o, err, sizeof(err));
    const char *bad = NULL;
    if (got != t->want) bad = "wrong return value";
    else if (t->err_has && !strstr(err, t->err_has)) bad = "error text does not say why";
    else if (got == 0 && t->ranks > 0 && !o.check_args && (o.nranks != t->ranks || o.skip_rank != t->skip))
      bad = "wrong ranks or skip rank";
    else if (got == 0 && t->timeout_ms > 0 && o.timeout_ms != t->timeout_ms) bad = "wrong timeout";
    if (bad) {
      failed++;
      fprintf(stderr, "check-args: case %d (", c);
      for (int k = 1; k < argc; k++) fprintf(stderr, "%s%s", k > 1 ? " " : "", t->argv[k]);
      fprintf(stderr, "): %s (returned %d, error '%s')\n", bad, got, err);
    }
  }
  printf("check-args: %d of %d cases passed\n", n - failed, n);
  return failed ? 1 : 0;
}

/* ---------------------------------------------------------------------------------------------
 * Small helpers shared by launcher and workers.
 * ------------------------------------------------------------------------------------------- */

static int64_t now_ns(clockid_t clk) {
  struct timespec ts;
  clock_gettime(clk, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static int64_t mono_ms(void) { return now_ns(CLOCK_MONOTONIC) / 1000000; }

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Write atomically: readers polling for the name never see a partial file. */
static int write_file_atomic(const char *path, const void *data, size_t len) {
  char tmp[E2E_PATH_MAX + 32];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  const char *p = data;
  size_t left = len;
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      close(fd);
      unlink(tmp);
      return -1;
    }
    p += w;
    left -= (size_t)w;
  }
  if (close(fd) != 0 || rename(tmp, path) != 0) {
    unlink(tmp);
    return -1;
  }
  return 0;
}

static int mkdir_p1(const char *path) {
  if (mkdir(path, 0700) == 0 || errno == EEXIST) return 0;
  return -1;
}

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
    else if (c < 0x20) fprintf(f, "\\u%04x", c);
    else fputc(c, f);
  }
  fputc('"', f);
}

/* ---------------------------------------------------------------------------------------------
 * Worker side.
 * ------------------------------------------------------------------------------------------- */

typedef struct worker {
  const e2e_opts *o;
  int rank, n;
  char rdv[E2E_PATH_MAX + 16];
  ncclComm_t comms[E2E_MAX_COMMS];
  cudaStream_t stream;
} worker;

static worker *g_w; /* for the failure paths of the check macros */

static void wlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void wlog(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  fprintf(stderr, "[nccl_e2e rank %d pid %d] %s\n", g_w ? g_w->rank : -1, (int)getpid(), buf);
}

#define CUDA_OK(call)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      wlog("%s failed: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
      exit(e_ == cudaErrorNoDevice || e_ == cudaErrorInsufficientDriver ? EX_NOGPU : EX_CUDA); \
    }                                                                                   \
  } while (0)

#define NCCL_OK(call)                                                                   \
  do {                                                                                  \
    ncclResult_t r_ = (call);                                                           \
    if (r_ != ncclSuccess) {                                                            \
      wlog("%s failed: %s (%s:%d)", #call, ncclGetErrorString(r_), __FILE__, __LINE__); \
      exit(EX_NCCL);                                                                    \
    }                                                                                   \
  } while (0)

static void w_path(const worker *w, char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void w_path(const worker *w, char *out, size_t len, const char *fmt, ...) {
  char name[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof(name), fmt, ap);
  va_end(ap);
  snprintf(out, len, "%s/%s", w->rdv, name);
}

static int w_abort_requested(const worker *w) {
  char p[2 * E2E_PATH_MAX];
  w_path(w, p, sizeof(p), "abort");
  return file_exists(p);
}

/* Leave as the launcher asked: abort every live communicator (operations may be stuck on the
 * GPU, so a normal destroy could wait forever) and exit. */
static void w_abort_exit(worker *w) {
  for (int c = 0; c < E2E_MAX_COMMS; c++)
    if (w->comms[c]) {
      ncclResult_t r = ncclCommAbort(w->comms[c]);
      if (r != ncclSuccess) wlog("ncclCommAbort: %s", ncclGetErrorString(r));
      w->comms[c] = NULL;
    }
  if (w->o->verbose) wlog("aborted as asked");
  exit(EX_ABORTED);
}

static void w_mark(const worker *w, const char *name) {
  char p[2 * E2E_PATH_MAX], body[64];
  w_path(w, p, sizeof(p), "mark-%s-%d", name, w->rank);
  int len = snprintf(body, sizeof(body), "%d %lld\n", (int)getpid(), (long long)now_ns(CLOCK_REALTIME));
  if (write_file_atomic(p, body, (size_t)len) != 0) {
    wlog("cannot write %s: %s", p, strerror(errno));
    exit(EX_RDV);
  }
}

/* Wait until path exists; honour the abort file meanwhile. */
static void w_wait_file(worker *w, const char *path, long timeout_ms) {
  int64_t end = mono_ms() + timeout_ms;
  while (!file_exists(path)) {
    if (w_abort_requested(w)) w_abort_exit(w);
    if (mono_ms() > end) {
      wlog("timed out after %ld ms waiting for %s", timeout_ms, path);
      exit(EX_RDV);
    }
    sleep_us(2000);
  }
}

static void w_wait_go(worker *w, const char *name) {
  char p[2 * E2E_PATH_MAX];
  w_path(w, p, sizeof(p), "go-%s", name);
  w_wait_file(w, p, w->o->deadline_ms);
}

static int w_go_seen(const worker *w, const char *name) {
  char p[2 * E2E_PATH_MAX];
  w_path(w, p, sizeof(p), "go-%s", name);
  return file_exists(p);
}

static void w_barrier(worker *w, const char *name) {
  char p[2 * E2E_PATH_MAX];
  w_mark(w, name);
  for (int r = 0; r < w->n; r++) {
    w_path(w, p, sizeof(p), "mark-%s-%d", name, r);
    w_wait_file(w, p, 120000);
  }
}

static ncclComm_t w_comm_init(worker *w, const char *tag) {
  char p[2 * E2E_PATH_MAX];
  ncclUniqueId id;
  ncclComm_t comm;
  w_path(w, p, sizeof(p), "id-%s", tag);
  if (w->rank == 0) {
    NCCL_OK(ncclGetUniqueId(&id));
    if (write_file_atomic(p, &id, sizeof(id)) != 0) {
      wlog("cannot write %s: %s", p, strerror(errno));
      exit(EX_RDV);
    }
  } else {
    w_wait_file(w, p, 120000);
    FILE *f = fopen(p, "rb");
    if (!f || fread(&id, 1, sizeof(id), f) != sizeof(id)) {
      wlog("cannot read the unique id from %s", p);
      exit(EX_RDV);
    }
    fclose(f);
  }
  NCCL_OK(ncclCommInitRank(&comm, w->n, id, w->rank));
  return comm;
}

/* NCCL loads the profiler during communicator init: if the plugin is not mapped now, NCCL
 * skipped it (too old, missing shared library, no ncclProfiler_v4+ symbol...). */
static void w_check_plugin_loaded(const worker *w) {
  const char *p = w->o->plugin;
  char want[PATH_MAX], line[PATH_MAX + 256];
  if (!strchr(p, '/')) return; /* a name: NCCL resolves it, we cannot tell which file */
  if (!realpath(p, want)) snprintf(want, sizeof(want), "%s", p);
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return;
  int found = 0;
  while (!found && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    const char *path = strchr(line, '/');
    if (path && strcmp(path, want) == 0) found = 1;
  }
  fclose(f);
  if (!found) {
    wlog("NCCL did not load the profiler plugin %s (see the NCCL log in the logs directory; "
         "NCCL >= 2.27 is needed and every library the plugin links must be loadable)", want);
    exit(EX_PLUGIN);
  }
}

enum { WAIT_OK = 0, WAIT_ABORT = 1 };

/* Wait for the stream while watching the abort file and NCCL's asynchronous errors: a stuck
 * collective is the point of some scenarios, so never block in cudaStreamSynchronize there. */
static int w_wait_stream(worker *w, long timeout_ms) {
  int64_t end = mono_ms() + timeout_ms;
  int n = 0;
  for (;;) {
    cudaError_t e = cudaStreamQuery(w->stream);
    if (e == cudaSuccess) return WAIT_OK;
    if (e != cudaErrorNotReady) {
      wlog("cudaStreamQuery: %s", cudaGetErrorString(e));
      exit(EX_CUDA);
    }
    for (int c = 0; c < E2E_MAX_COMMS; c++) {
      ncclResult_t ae;
      if (w->comms[c] && ncclCommGetAsyncError(w->comms[c], &ae) == ncclSuccess && ae != ncclSuccess) {
        /* A peer that already aborted as asked breaks our connections: not an error then. */
        if (w_abort_requested(w)) return WAIT_ABORT;
        wlog("NCCL reported an asynchronous error on communicator %d: %s", c, ncclGetErrorString(ae));
        exit(EX_NCCL);
      }
    }
    if ((++n & 63) == 0) {
      if (w_abort_requested(w)) return WAIT_ABORT;
      if (mono_ms() > end) {
        wlog("an operation did not complete within %ld ms", timeout_ms);
        exit(EX_CHECK);
      }
    }
    sleep_us(100);
  }
}

static void w_sync(worker *w) {
  if (w_wait_stream(w, 60000) == WAIT_ABORT) w_abort_exit(w);
}

typedef struct bufs {
  float *send, *recv, *ag_recv, *p2p_send, *p2p_recv;
  size_t count, ag_count, p2p_count;
  float *host;
} bufs;

static void fill(float *dev, size_t count, float value, float *host) {
  for (size_t i = 0; i < count; i++) host[i] = value;
  CUDA_OK(cudaMemcpy(dev, host, count * sizeof(float), cudaMemcpyHostToDevice));
}

static void expect(const char *what, const float *dev, size_t count, size_t block, float base,
                   float step, float *host) {
  CUDA_OK(cudaMemcpy(host, dev, count * sizeof(float), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < count; i++) {
    size_t blk = i / block; /* which rank's block */
    float want = base + step * (float)blk;
    if (host[i] != want) {
      wlog("%s: element %zu is %g, expected %g", what, i, (double)host[i], (double)want);
      exit(EX_CHECK);
    }
  }
}

static void bufs_alloc(worker *w, bufs *b) {
  b->count = 1 << 16;
  b->ag_count = 1 << 14;
  b->p2p_count = 1 << 14;
  CUDA_OK(cudaMalloc((void **)&b->send, b->count * sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&b->recv, b->count * sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&b->ag_recv, b->ag_count * w->n * sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&b->p2p_send, b->p2p_count * sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&b->p2p_recv, b->p2p_count * sizeof(float)));
  b->host = malloc(b->ag_count * w->n * sizeof(float) > b->count * sizeof(float)
                       ? b->ag_count * w->n * sizeof(float)
                       : b->count * sizeof(float));
  if (!b->host) exit(EX_CHECK);
  fill(b->send, b->count, (float)(w->rank + 1), b->host);
  fill(b->p2p_send, b->p2p_count, (float)(w->rank + 1), b->host);
}

static void bufs_free(bufs *b) {
  cudaFree(b->send);
  cudaFree(b->recv);
  cudaFree(b->ag_recv);
  cudaFree(b->p2p_send);
  cudaFree(b->p2p_recv);
  free(b->host);
}

static float sum_ranks(int n) {
  int sum = n * (n + 1) / 2; /* each rank contributes rank + 1 */
  return (float)sum;
}

/* One healthy iteration: allreduce, allgather and a ring sendrecv, results cleared first so a
 * stale buffer cannot pass the check. */
static void w_traffic_iter(worker *w, ncclComm_t comm, bufs *b, int check) {
  int n = w->n, next = (w->rank + 1) % n, prev = (w->rank + n - 1) % n;
  CUDA_OK(cudaMemsetAsync(b->recv, 0, b->count * sizeof(float), w->stream));
  CUDA_OK(cudaMemsetAsync(b->ag_recv, 0, b->ag_count * n * sizeof(float), w->stream));
  CUDA_OK(cudaMemsetAsync(b->p2p_recv, 0, b->p2p_count * sizeof(float), w->stream));
  NCCL_OK(ncclAllReduce(b->send, b->recv, b->count, ncclFloat, ncclSum, comm, w->stream));
  NCCL_OK(ncclAllGather(b->send, b->ag_recv, b->ag_count, ncclFloat, comm, w->stream));
  NCCL_OK(ncclGroupStart());
  NCCL_OK(ncclSend(b->p2p_send, b->p2p_count, ncclFloat, next, comm, w->stream));
  NCCL_OK(ncclRecv(b->p2p_recv, b->p2p_count, ncclFloat, prev, comm, w->stream));
  NCCL_OK(ncclGroupEnd());
  w_sync(w);
  if (check) {
    expect("allreduce", b->recv, b->count, b->count, sum_ranks(n), 0, b->host);
    expect("allgather", b->ag_recv, b->ag_count * n, b->ag_count, 1, 1, b->host);
    expect("sendrecv", b->p2p_recv, b->p2p_count, b->p2p_count, (float)(prev + 1), 0, b->host);
  }
}

static void w_allreduce(worker *w, ncclComm_t comm, bufs *b, int check) {
  CUDA_OK(cudaMemsetAsync(b->recv, 0, b->count * sizeof(float), w->stream));
  NCCL_OK(ncclAllReduce(b->send, b->recv, b->count, ncclFloat, ncclSum, comm, w->stream));
  w_sync(w);
  if (check) expect("allreduce", b->recv, b->count, b->count, sum_ranks(w->n), 0, b->host);
}

static void w_allgather(worker *w, ncclComm_t comm, bufs *b, int check) {
  CUDA_OK(cudaMemsetAsync(b->ag_recv, 0, b->ag_count * w->n * sizeof(float), w->stream));
  NCCL_OK(ncclAllGather(b->send, b->ag_recv, b->ag_count, ncclFloat, comm, w->stream));
  w_sync(w);
  if (check) expect("allgather", b->ag_recv, b->ag_count * w->n, b->ag_count, 1, 1, b->host);
}

/* The collective a rank enters while another rank skips it: wait for the launcher's abort. */
static void w_stuck_until_abort(worker *w) {
  if (w_wait_stream(w, w->o->deadline_ms) == WAIT_ABORT) w_abort_exit(w);
  wlog("the collective that another rank skipped completed: NCCL did not hang as expected");
  exit(EX_CHECK);
}

static void w_skipper_until_abort(worker *w) {
  char p[2 * E2E_PATH_MAX];
  w_path(w, p, sizeof(p), "abort");
  w_wait_file(w, p, w->o->deadline_ms); /* exits through w_abort_exit */
  w_abort_exit(w);
}

static void w_destroy(worker *w, int c) {
  NCCL_OK(ncclCommDestroy(w->comms[c]));
  w->comms[c] = NULL;
}

/* Every rank must run the same number of collectives, but when a loop ends depends on time or on
 * the launcher. Rank 0 alone decides, and publishes the last iteration a few iterations ahead;
 * the others are never more than one iteration apart from it (each iteration waits for a
 * collective all ranks joined), so they read the decision in time. */
enum { LOOP_MARGIN = 8 };

typedef struct w_loop {
  const char *name;
  long end; /* first iteration not to run; -1 while undecided */
} w_loop;

/* Whether iteration `it` runs; `done` is rank 0's own stop condition (ignored on other ranks). */
static int w_loop_next(worker *w, w_loop *lp, long it, int done) {
  char p[2 * E2E_PATH_MAX];
  if (lp->end >= 0) return it < lp->end;
  w_path(w, p, sizeof(p), "stop-%s", lp->name);
  if (w->rank == 0) {
    if (done) {
      char body[32];
      int len = snprintf(body, sizeof(body), "%ld\n", it + LOOP_MARGIN);
      if (write_file_atomic(p, body, (size_t)len) != 0) {
        wlog("cannot write %s: %s", p, strerror(errno));
        exit(EX_RDV);
      }
      lp->end = it + LOOP_MARGIN;
    }
  } else if (file_exists(p)) {
    char body[32] = "";
    FILE *f = fopen(p, "r");
    char *end = NULL;
    if (f) {
      if (!fgets(body, sizeof(body), f)) body[0] = '\0';
      fclose(f);
    }
    lp->end = strtol(body, &end, 10);
    if (end == body || lp->end < it) {
      wlog("bad loop end in %s at iteration %ld", p, it);
      exit(EX_RDV);
    }
  }
  return lp->end < 0 || it < lp->end;
}

static void sc_healthy(worker *w, bufs *b) {
  int iters = w->o->iters ? w->o->iters : scenario_default_iters(SC_HEALTHY);
  /* Run past the timeout: completed operations must never count as stalled. */
  int64_t min_end = mono_ms() + w->o->timeout_ms + 2 * w->o->poll_ms;
  w_loop lp = {"healthy", -1};
  long it = 0;
  for (; w_loop_next(w, &lp, it, it >= iters && mono_ms() >= min_end); it++)
    w_traffic_iter(w, w->comms[0], b, it % 25 == 0);
  w_traffic_iter(w, w->comms[0], b, 1);
  w_barrier(w, "traffic-done");
  /* Idle with the communicator alive: nothing in flight, nothing may be reported. */
  sleep_us((w->o->timeout_ms + 3 * w->o->poll_ms) * 1000);
  w_mark(w, "quiet-done");
  w_wait_go(w, "finish");
  w_traffic_iter(w, w->comms[0], b, 1);
  w_destroy(w, 0);
  if (w->o->verbose) wlog("healthy: %ld iterations", it + 2);
}

static void sc_skip(worker *w, bufs *b) {
  int iters = w->o->iters ? w->o->iters : scenario_default_iters(SC_SKIP);
  for (int it = 0; it < iters; it++) w_allreduce(w, w->comms[0], b, it == iters - 1);
  w_barrier(w, "warm");
  if (w->rank == w->o->skip_rank) {
    w_mark(w, "skipped");
    w_skipper_until_abort(w);
  }
  w_mark(w, "entered");
  NCCL_OK(ncclAllReduce(b->send, b->recv, b->count, ncclFloat, ncclSum, w->comms[0], w->stream));
  w_stuck_until_abort(w);
}

static void sc_signal(worker *w, bufs *b) {
  int iters = w->o->iters ? w->o->iters : scenario_default_iters(SC_SIGNAL);
  long it = 0, after = 0;
  w_loop lp = {"signal", -1};
  for (; it < 10; it++) w_traffic_iter(w, w->comms[0], b, it == 0);
  w_mark(w, "traffic");
  /* Keep going until the launcher saw the dumps, then prove the job still works. */
  for (; w_loop_next(w, &lp, it, after >= iters); it++) {
    w_traffic_iter(w, w->comms[0], b, it % 25 == 0);
    if (w->rank == 0 && (after || w_go_seen(w, "signalled"))) after++;
    if (w_abort_requested(w)) w_abort_exit(w);
  }
  w_traffic_iter(w, w->comms[0], b, 1);
  w_barrier(w, "done");
  w_destroy(w, 0);
  if (w->o->verbose) wlog("signal: %ld iterations", it + 1);
}

static void sc_graph(worker *w, bufs *b) {
  int replays = w->o->iters ? w->o->iters : scenario_default_iters(SC_GRAPH);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  w_loop lp = {"graph", -1};
  for (int it = 0; it < 5; it++) w_allreduce(w, w->comms[0], b, it == 4);
  CUDA_OK(cudaStreamBeginCapture(w->stream, cudaStreamCaptureModeThreadLocal));
  NCCL_OK(ncclAllReduce(b->send, b->recv, b->count, ncclFloat, ncclSum, w->comms[0], w->stream));
  CUDA_OK(cudaStreamEndCapture(w->stream, &graph));
  CUDA_OK(cudaGraphInstantiateWithFlags(&exec, graph, 0));
  w_barrier(w, "captured");
  /* Replays for longer than the timeout: each replay is a new operation, never one long one. */
  int64_t min_end = mono_ms() + 2 * w->o->timeout_ms;
  long r = 0;
  for (; w_loop_next(w, &lp, r, r >= replays && mono_ms() >= min_end); r++) {
    int check = r % 50 == 0;
    if (check) CUDA_OK(cudaMemsetAsync(b->recv, 0, b->count * sizeof(float), w->stream));
    CUDA_OK(cudaGraphLaunch(exec, w->stream));
    w_sync(w);
    if (check) expect("graph allreduce", b->recv, b->count, b->count, sum_ranks(w->n), 0, b->host);
  }
  if (w->o->verbose) wlog("graph: %ld replays", r);
  w_barrier(w, "replayed");
  /* A captured operation that is not replayed is not hung. */
  sleep_us((w->o->timeout_ms + 3 * w->o->poll_ms) * 1000);
  w_mark(w, "quiet-done");
  w_wait_go(w, "stall");
  if (w->rank == w->o->skip_rank) {
    w_mark(w, "skipped");
    w_skipper_until_abort(w);
  }
  w_mark(w, "entered");
  CUDA_OK(cudaGraphLaunch(exec, w->stream));
  w_stuck_until_abort(w);
}

static void sc_twocomms(worker *w, bufs *b) {
  int iters = w->o->iters ? w->o->iters : scenario_default_iters(SC_TWOCOMMS);
  w_loop lp1 = {"twocomms-1", -1}, lp2 = {"twocomms-2", -1};
  long it, after = 0;
  w->comms[1] = w_comm_init(w, "B");
  for (it = 0; it < 10; it++) {
    w_allreduce(w, w->comms[0], b, it == 0);
    w_allgather(w, w->comms[1], b, it == 0);
  }
  w_mark(w, "traffic");
  for (; w_loop_next(w, &lp1, it, after >= iters); it++) {
    w_allreduce(w, w->comms[0], b, 0);
    w_allgather(w, w->comms[1], b, 0);
    if (w->rank == 0 && (after || w_go_seen(w, "signalled"))) after++;
    if (w_abort_requested(w)) w_abort_exit(w);
  }
  w_allreduce(w, w->comms[0], b, 1);
  w_allgather(w, w->comms[1], b, 1);
  /* Finalize one communicator while the other keeps the plugin loaded and busy. */
  w_barrier(w, "before-destroy-A");
  w_destroy(w, 0);
  for (it = 0; it < iters; it++) w_allgather(w, w->comms[1], b, it == iters - 1);
  w_barrier(w, "before-destroy-B");
  w_destroy(w, 1);
  /* The last finalize unloads the plugin; a new communicator loads and initializes it again. */
  w->comms[2] = w_comm_init(w, "C");
  for (it = 0; it < 10; it++) w_allreduce(w, w->comms[2], b, it == 9);
  w_mark(w, "reloaded");
  after = 0;
  for (; w_loop_next(w, &lp2, it, after >= 10); it++) {
    w_allreduce(w, w->comms[2], b, 0);
    if (w->rank == 0 && (after || w_go_seen(w, "signalled-again"))) after++;
    if (w_abort_requested(w)) w_abort_exit(w);
  }
  w_allreduce(w, w->comms[2], b, 1);
  w_barrier(w, "done");
  w_destroy(w, 2);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void sc_bench(worker *w) {
  int iters = w->o->iters ? w->o->iters : scenario_default_iters(SC_BENCH);
  enum { BLOCKS = 7 };
  size_t maxc = (size_t)w->o->max_bytes / sizeof(float);
  float *send, *recv;
  CUDA_OK(cudaMalloc((void **)&send, maxc * sizeof(float)));
  CUDA_OK(cudaMalloc((void **)&recv, maxc * sizeof(float)));
  CUDA_OK(cudaMemset(send, 0, maxc * sizeof(float)));
  if (w->rank == 0) {
    int v = 0;
    struct cudaDeviceProp prop;
    ncclGetVersion(&v);
    CUDA_OK(cudaGetDeviceProperties(&prop, w->o->device));
    printf("BENCH nccl=%d ranks=%d device=\"%s\" plugin=%s iters=%d blocks=%d\n", v, w->n,
           prop.name, w->o->plugin, iters, BLOCKS);
    fflush(stdout);
  }
  for (long bytes = w->o->min_bytes; bytes <= w->o->max_bytes; bytes *= 2) {
    size_t count = (size_t)bytes / sizeof(float);
    double us[BLOCKS];
    for (int i = 0; i < 20; i++)
      NCCL_OK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, w->comms[0], w->stream));
    CUDA_OK(cudaStreamSynchronize(w->stream));
    for (int blk = 0; blk < BLOCKS; blk++) {
      int64_t t0 = now_ns(CLOCK_MONOTONIC);
      for (int i = 0; i < iters; i++)
        NCCL_OK(ncclAllReduce(send, recv, count, ncclFloat, ncclSum, w->comms[0], w->stream));
      CUDA_OK(cudaStreamSynchronize(w->stream));
      us[blk] = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e3 / iters;
    }
    qsort(us, BLOCKS, sizeof(us[0]), cmp_double);
    if (w->rank == 0) {
      printf("LAT %ld %.3f %.3f %.3f\n", bytes, us[BLOCKS / 2], us[0], us[BLOCKS - 1]);
      fflush(stdout);
    }
    if (bytes > LONG_MAX / 2) break;
  }
  cudaFree(send);
  cudaFree(recv);
  w_destroy(w, 0);
}

static int worker_main(const e2e_opts *o) {
  static worker w;
  bufs b;
  memset(&w, 0, sizeof(w));
  memset(&b, 0, sizeof(b));
  g_w = &w;
  w.o = o;
  w.rank = o->worker_rank;
  w.n = o->nranks;
  snprintf(w.rdv, sizeof(w.rdv), "%s/rdv", o->work_dir);
  CUDA_OK(cudaSetDevice(o->device));
  CUDA_OK(cudaStreamCreateWithFlags(&w.stream, cudaStreamNonBlocking));
  w.comms[0] = w_comm_init(&w, "A");
  if (strcmp(o->plugin, "none") != 0) w_check_plugin_loaded(&w);
  w_mark(&w, "init");
  if (o->scenario == SC_BENCH) {
    sc_bench(&w);
  } else {
    bufs_alloc(&w, &b);
    switch (o->scenario) {
      case SC_HEALTHY: sc_healthy(&w, &b); break;
      case SC_SKIP: sc_skip(&w, &b); break;
      case SC_SIGNAL: sc_signal(&w, &b); break;
      case SC_GRAPH: sc_graph(&w, &b); break;
      case SC_TWOCOMMS: sc_twocomms(&w, &b); break;
      default: break;
    }
    bufs_free(&b);
  }
  cudaStreamDestroy(w.stream);
  w_mark(&w, "exit");
  return EX_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Launcher side.
 * ------------------------------------------------------------------------------------------- */

enum { R_STALL, R_SIGNAL, R_PEER, R_ABORT, R_OTHER, R_COUNT };
static const char *const reason_names[R_COUNT] = {"stall", "signal", "peer", "abort", "other"};

typedef struct launcher {
  e2e_opts *o;
  char **argv;
  int argc;
  char work[E2E_PATH_MAX];
  char rdv[E2E_PATH_MAX + 16], dumps[E2E_PATH_MAX + 16], logs[E2E_PATH_MAX + 16];
  int nccl_version;
  int multi_rank_gpu;
  pid_t pid[E2E_MAX_RANKS];
  int status[E2E_MAX_RANKS];
  int exited[E2E_MAX_RANKS];
  int expect_exit;          /* workers may exit now */
  int allow_clean_exit;     /* workers may exit 0 now (they finish on their own) */
  int64_t start_ms;
  /* dump census, by rank and reason */
  int ndumps[E2E_MAX_RANKS][R_COUNT];
  int64_t first_dump_ns[E2E_MAX_RANKS][R_COUNT]; /* file mtime, CLOCK_REALTIME */
  int foreign_dumps, trigger_files;
  /* scenario facts for the manifest */
  int dumps_before_stall;
  char first_unexpected[256];
  int64_t entered_ns;
  long stall_latency_ms[E2E_MAX_RANKS];
  long peer_latency_ms[E2E_MAX_RANKS];
  int skip_seq;
  char why[1024];
  int abort_killed;
} launcher;

static void l_fail(launcher *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void l_fail(launcher *l, const char *fmt, ...) {
  if (l->why[0]) return; /* the first reason is the one that matters */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(l->why, sizeof(l->why), fmt, ap);
  va_end(ap);
}

static void describe_status(int st, char *buf, size_t len) {
  if (WIFEXITED(st)) {
    static const char *const what[] = {"ok", "a wrong result", "usage error", "aborted as asked",
                                       "CUDA error", "NCCL error", "rendezvous timeout",
                                       "profiler plugin not loaded", "no usable GPU"};
    int c = WEXITSTATUS(st);
    snprintf(buf, len, "exit %d (%s)", c, c < (int)(sizeof(what) / sizeof(what[0])) ? what[c] : "?");
  } else if (WIFSIGNALED(st)) {
    snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
  } else {
    snprintf(buf, len, "status 0x%x", st);
  }
}

/* Collect exits; an exit before the scenario allows it is a failure. */
static void l_reap(launcher *l) {
  for (int r = 0; r < l->o->nranks; r++) {
    int st;
    if (l->exited[r] || l->pid[r] <= 0) continue;
    pid_t p = waitpid(l->pid[r], &st, WNOHANG);
    if (p == l->pid[r]) {
      l->exited[r] = 1;
      l->status[r] = st;
      if (!l->expect_exit && !(l->allow_clean_exit && WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        char d[128];
        describe_status(st, d, sizeof(d));
        l_fail(l, "rank %d (pid %d) ended early: %s", r, (int)l->pid[r], d);
      }
    }
  }
}

static int rank_of_pid(const launcher *l, long pid) {
  for (int r = 0; r < l->o->nranks; r++)
    if (l->pid[r] == pid) return r;
  return -1;
}

/* Dump names are <host>-<pid>-<NNNN>-<reason>.json, or .json.gz (peer dumps and the stall dumps
 * of every process but the episode's first are compressed); the host may contain dashes, so parse
 * from the right. Temporary files and trigger files are not dumps. */
static int parse_dump_name(const char *name, long *pid, int *reason) {
  size_t len = strlen(name);
  char buf[512];
  if (len > 8 && strcmp(name + len - 3, ".gz") == 0) len -= 3;
  if (len < 6 || len >= sizeof(buf) || strncmp(name + len - 5, ".json", 5) != 0) return -1;
  if (name[0] == '.' || strncmp(name, "trigger-", 8) == 0) return -1;
  memcpy(buf, name, len - 5);
  buf[len - 5] = '\0';
  char *dash = strrchr(buf, '-');
  if (!dash) return -1;
  *reason = R_OTHER;
  for (int i = 0; i < R_OTHER; i++)
    if (strcmp(dash + 1, reason_names[i]) == 0) *reason = i;
  *dash = '\0';
  dash = strrchr(buf, '-'); /* sequence number */
  if (!dash) return -1;
  *dash = '\0';
  dash = strrchr(buf, '-'); /* pid */
  if (!dash) return -1;
  char *end;
  *pid = strtol(dash + 1, &end, 10);
  if (*end || *pid <= 0) return -1;
  return 0;
}

/* Dumps of one directory (the dump directory's host subdirectories hold them). */
static void l_census_dir(launcher *l, const char *dir, int depth);

static void l_census(launcher *l) {
  memset(l->ndumps, 0, sizeof(l->ndumps));
  memset(l->first_dump_ns, 0, sizeof(l->first_dump_ns));
  l->foreign_dumps = l->trigger_files = 0;
  l_census_dir(l, l->dumps, 1);
}

static void l_census_dir(launcher *l, const char *dir, int depth) {
  DIR *d = opendir(dir);
  struct dirent *e;
  if (!d) return;
  while ((e = readdir(d)) != NULL) {
    long pid;
    int reason;
    char p[2 * E2E_PATH_MAX];
    if (e->d_name[0] == '.' || snprintf(p, sizeof(p), "%s/%s", dir, e->d_name) >= (int)sizeof(p))
      continue;
    if (!strcmp(e->d_name, "triggers")) { /* episode-<k>.trigger, one per episode */
      DIR *td = opendir(p);
      struct dirent *te;
      while (td && (te = readdir(td)) != NULL) l->trigger_files += strstr(te->d_name, ".trigger") != NULL && te->d_name[0] != '.';
      if (td) closedir(td);
      continue;
    }
    if (parse_dump_name(e->d_name, &pid, &reason) != 0) {
      if (depth > 0) l_census_dir(l, p, depth - 1);
      continue;
    }
    int r = rank_of_pid(l, pid);
    if (r < 0) {
      l->foreign_dumps++;
      continue;
    }
    struct stat st;
    if (stat(p, &st) != 0) continue;
    int64_t t = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    if (!l->ndumps[r][reason] || t < l->first_dump_ns[r][reason]) l->first_dump_ns[r][reason] = t;
    l->ndumps[r][reason]++;
  }
  closedir(d);
}

static int l_total_dumps(const launcher *l) {
  int n = 0;
  for (int r = 0; r < l->o->nranks; r++)
    for (int k = 0; k < R_COUNT; k++) n += l->ndumps[r][k];
  return n + l->foreign_dumps;
}

static void l_first_dump_name(launcher *l, char *out, size_t len) {
  DIR *d = opendir(l->dumps);
  struct dirent *e;
  out[0] = '\0';
  if (!d) return;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') {
      snprintf(out, len, "%s", e->d_name);
      break;
    }
  closedir(d);
}

typedef int (*l_cond)(launcher *l, void *arg);

/* Poll until cond holds, a worker fails, or timeout. Returns 1 when cond held. */
static int l_wait(launcher *l, l_cond cond, void *arg, long timeout_ms) {
  int64_t end = mono_ms() + timeout_ms;
  int64_t hard = l->start_ms + l->o->deadline_ms;
  for (;;) {
    l_reap(l);
    if (l->why[0]) return 0;
    if (cond(l, arg)) return 1;
    int64_t t = mono_ms();
    if (t > end) return 0;
    if (t > hard) {
      l_fail(l, "the scenario ran past --deadline (%ld s)", l->o->deadline_ms / 1000);
      return 0;
    }
    sleep_us(10000);
  }
}

static int l_mark_path(launcher *l, const char *name, int r, char *p, size_t len) {
  return snprintf(p, len, "%s/mark-%s-%d", l->rdv, name, r);
}

typedef struct marks_arg {
  const char *name;
  int except; /* rank not expected, or -1 */
} marks_arg;

static int cond_marks(launcher *l, void *arg) {
  marks_arg *m = arg;
  char p[2 * E2E_PATH_MAX];
  for (int r = 0; r < l->o->nranks; r++) {
    if (r == m->except) continue;
    l_mark_path(l, m->name, r, p, sizeof(p));
    if (!file_exists(p)) return 0;
  }
  return 1;
}

static int l_wait_marks(launcher *l, const char *name, int except, long timeout_ms) {
  marks_arg m = {name, except};
  if (l_wait(l, cond_marks, &m, timeout_ms)) return 1;
  if (!l->why[0]) {
    char p[2 * E2E_PATH_MAX], missing[128] = "";
    for (int r = 0; r < l->o->nranks; r++) {
      l_mark_path(l, name, r, p, sizeof(p));
      if (r != except && !file_exists(p))
        snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing), " %d", r);
    }
    l_fail(l, "ranks%s did not reach '%s' within %ld s", missing, name, timeout_ms / 1000);
  }
  return 0;
}

static int64_t l_mark_time_ns(launcher *l, const char *name, int r) {
  char p[2 * E2E_PATH_MAX];
  char body[64] = "", *field, *end;
  l_mark_path(l, name, r, p, sizeof(p));
  FILE *f = fopen(p, "r");
  if (!f) return 0;
  if (!fgets(body, sizeof(body), f)) body[0] = '\0';
  fclose(f);
  field = strchr(body, ' '); /* "<pid> <realtime ns>" */
  if (!field) return 0;
  long long t = strtoll(field + 1, &end, 10);
  return end == field + 1 ? 0 : t;
}

static void l_go(launcher *l, const char *name) {
  char p[2 * E2E_PATH_MAX];
  snprintf(p, sizeof(p), "%s/go-%s", l->rdv, name);
  if (write_file_atomic(p, "go\n", 3) != 0) l_fail(l, "cannot write %s: %s", p, strerror(errno));
}

typedef struct dumps_arg {
  int need[E2E_MAX_RANKS][R_COUNT];
  /* Ranks waiting in the hung op: each writes a stall dump, or a peer dump when another waiting
   * rank's trigger came first (the plugin dumps once per process per episode); at least one of
   * them a stall dump. */
  int waiting[E2E_MAX_RANKS];
} dumps_arg;

static int waiting_dumps(const launcher *l, const dumps_arg *d, int *stalls) {
  int ok = 1;
  *stalls = 0;
  for (int r = 0; r < l->o->nranks; r++) {
    if (!d->waiting[r]) continue;
    *stalls += l->ndumps[r][R_STALL] > 0;
    ok &= l->ndumps[r][R_STALL] + l->ndumps[r][R_PEER] > 0;
  }
  return ok;
}

static int cond_dumps(launcher *l, void *arg) {
  dumps_arg *d = arg;
  l_census(l);
  for (int r = 0; r < l->o->nranks; r++)
    for (int k = 0; k < R_COUNT; k++)
      if (l->ndumps[r][k] < d->need[r][k]) return 0;
  int stalls, any = 0;
  for (int r = 0; r < l->o->nranks; r++) any |= d->waiting[r];
  return !any || (waiting_dumps(l, d, &stalls) && stalls > 0);
}

static int l_wait_dumps(launcher *l, dumps_arg *d, long timeout_ms, const char *what) {
  if (l_wait(l, cond_dumps, d, timeout_ms)) return 1;
  if (!l->why[0]) {
    char missing[512] = "";
    for (int r = 0; r < l->o->nranks; r++)
      for (int k = 0; k < R_COUNT; k++)
        if (l->ndumps[r][k] < d->need[r][k])
          snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing),
                   "%s%s dump from rank %d (pid %d)", missing[0] ? ", " : "", reason_names[k], r,
                   (int)l->pid[r]);
    for (int r = 0; r < l->o->nranks; r++)
      if (d->waiting[r] && l->ndumps[r][R_STALL] + l->ndumps[r][R_PEER] == 0)
        snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing),
                 "%sstall or peer dump from waiting rank %d (pid %d)", missing[0] ? ", " : "", r,
                 (int)l->pid[r]);
    int stalls = 0;
    waiting_dumps(l, d, &stalls);
    if (!stalls)
      snprintf(missing + strlen(missing), sizeof(missing) - strlen(missing),
               "%sstall dump from any waiting rank", missing[0] ? ", " : "");
    l_fail(l, "%s: no %s within %.1f s (%d dump files, %d trigger files in %s)", what, missing,
           timeout_ms / 1e3, l_total_dumps(l), l->trigger_files, l->dumps);
  }
  return 0;
}

static void l_signal_all(launcher *l, int sig) {
  for (int r = 0; r < l->o->nranks; r++)
    if (!l->exited[r] && kill(l->pid[r], sig) != 0)
      l_fail(l, "kill(%d, %d): %s", (int)l->pid[r], sig, strerror(errno));
}

/* Let the workers go (abort file or normal end) and collect them, SIGKILL after a bound. */
static void l_finish(launcher *l, int ask_abort, long grace_ms) {
  l->expect_exit = 1;
  if (ask_abort) {
    char p[2 * E2E_PATH_MAX];
    snprintf(p, sizeof(p), "%s/abort", l->rdv);
    write_file_atomic(p, "abort\n", 6);
  }
  int64_t end = mono_ms() + grace_ms;
  for (;;) {
    int left = 0;
    l_reap(l);
    for (int r = 0; r < l->o->nranks; r++) left += !l->exited[r];
    if (!left) break;
    if (mono_ms() > end) {
      for (int r = 0; r < l->o->nranks; r++)
        if (!l->exited[r]) {
          kill(l->pid[r], SIGKILL);
          l->abort_killed++;
        }
      for (int r = 0; r < l->o->nranks; r++)
        if (!l->exited[r]) {
          waitpid(l->pid[r], &l->status[r], 0);
          l->exited[r] = 1;
        }
      break;
    }
    sleep_us(10000);
  }
}

/* Exit statuses once the workers are gone: `want` is the normal exit code. */
static void l_check_exits(launcher *l, int want, int also_ok) {
  for (int r = 0; r < l->o->nranks; r++) {
    int st = l->status[r];
    char d[128];
    if (WIFEXITED(st) && (WEXITSTATUS(st) == want || WEXITSTATUS(st) == also_ok)) continue;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && l->abort_killed) continue; /* noted apart */
    describe_status(st, d, sizeof(d));
    l_fail(l, "rank %d (pid %d): %s", r, (int)l->pid[r], d);
  }
}

static void l_need_stall_and_peer(launcher *l, dumps_arg *d) {
  memset(d, 0, sizeof(*d));
  for (int r = 0; r < l->o->nranks; r++) {
    if (r == l->o->skip_rank) d->need[r][R_PEER] = 1;
    else d->waiting[r] = 1;
  }
}

/* Shared tail of skip and graph: ranks entered, the skipping rank did not; wait for the stall
 * dumps of the others and the peer dump of the skipping rank. */
static void l_expect_stall(launcher *l) {
  dumps_arg d;
  if (!l_wait_marks(l, "entered", l->o->skip_rank, 120000)) return;
  l->entered_ns = 0;
  for (int r = 0; r < l->o->nranks; r++) {
    if (r == l->o->skip_rank) continue;
    int64_t t = l_mark_time_ns(l, "entered", r);
    if (t > l->entered_ns) l->entered_ns = t;
  }
  /* The watchdog fires timeout after the last progress, checked every poll; allow NCCL some time
   * to reach the network and the dump some time to be written. */
  long budget = l->o->timeout_ms + 2 * l->o->poll_ms + 10000;
  l_need_stall_and_peer(l, &d);
  if (!l_wait_dumps(l, &d, budget, "after one rank skipped the collective")) return;
  for (int r = 0; r < l->o->nranks; r++) {
    if (r == l->o->skip_rank) {
      l->peer_latency_ms[r] = (long)((l->first_dump_ns[r][R_PEER] - l->entered_ns) / 1000000);
      continue;
    }
    /* Its stall dump, or its answer to the first waiting rank's trigger: neither before the
     * timeout. */
    int k = l->ndumps[r][R_STALL] ? R_STALL : R_PEER;
    long lat = (long)((l->first_dump_ns[r][k] - l->entered_ns) / 1000000);
    l->stall_latency_ms[r] = lat;
    if (lat < l->o->timeout_ms - 2 * l->o->poll_ms)
      l_fail(l, "rank %d dumped a stall %ld ms after entering the collective, before the %ld ms "
                "timeout could expire", r, lat, l->o->timeout_ms);
    else if (lat > l->o->timeout_ms + 2 * l->o->poll_ms + 5000)
      l_fail(l, "rank %d dumped its stall only %ld ms after entering the collective "
                "(timeout %ld ms, poll %ld ms)", r, lat, l->o->timeout_ms, l->o->poll_ms);
  }
}

static int cond_mark_skip(launcher *l, void *arg) {
  char p[2 * E2E_PATH_MAX];
  (void)arg;
  l_mark_path(l, "skipped", l->o->skip_rank, p, sizeof(p));
  return file_exists(p);
}

static void l_expect_no_dumps(launcher *l, const char *when) {
  l_census(l);
  l->dumps_before_stall = l_total_dumps(l);
  if (l->dumps_before_stall || l->trigger_files) {
    l_first_dump_name(l, l->first_unexpected, sizeof(l->first_unexpected));
    l_fail(l, "%s: %d dump(s) and %d trigger file(s) appeared although nothing hung (first: %s)",
           when, l->dumps_before_stall, l->trigger_files, l->first_unexpected);
  }
}

static void run_healthy(launcher *l) {
  if (!l_wait_marks(l, "quiet-done", -1, l->o->deadline_ms)) return;
  l_expect_no_dumps(l, "healthy traffic and idle period");
  l_go(l, "finish");
  l_finish(l, 0, 120000);
  l_check_exits(l, EX_OK, EX_OK);
  l_census(l);
  if (!l->why[0] && l_total_dumps(l))
    l_fail(l, "a dump appeared while the ranks finalized (%d files)", l_total_dumps(l));
}

static void run_skip_like(launcher *l) {
  if (!l_wait(l, cond_mark_skip, NULL, l->o->deadline_ms)) {
    l_fail(l, "rank %d never reached the collective it skips", l->o->skip_rank);
  } else {
    l_expect_stall(l);
  }
  l_finish(l, 1, 30000);
  l_check_exits(l, EX_ABORTED, EX_ABORTED);
}

static void run_skip(launcher *l) {
  int iters = l->o->iters ? l->o->iters : scenario_default_iters(SC_SKIP);
  l->skip_seq = iters; /* seqNumber is 0-based: the skipped allreduce is number `iters` */
  run_skip_like(l);
}

static void run_graph(launcher *l) {
  l->skip_seq = -1; /* replays do not advance seqNumber in every NCCL version: not checked */
  if (!l_wait_marks(l, "quiet-done", -1, l->o->deadline_ms)) {
    l_finish(l, 1, 30000);
    return;
  }
  l_expect_no_dumps(l, "graph replays and idle period");
  if (l->why[0]) {
    l_finish(l, 1, 30000);
    return;
  }
  l_go(l, "stall");
  run_skip_like(l);
}

static void l_expect_signal_dumps(launcher *l, int each, const char *when) {
  dumps_arg d;
  memset(&d, 0, sizeof(d));
  for (int r = 0; r < l->o->nranks; r++) d.need[r][R_SIGNAL] = each;
  l_wait_dumps(l, &d, 20000 + 4 * l->o->poll_ms, when);
}

static void l_no_stall_dumps(launcher *l) {
  l_census(l);
  for (int r = 0; r < l->o->nranks; r++)
    if (l->ndumps[r][R_STALL] || l->ndumps[r][R_PEER])
      l_fail(l, "rank %d wrote %d stall and %d peer dump(s) in a healthy job", r,
             l->ndumps[r][R_STALL], l->ndumps[r][R_PEER]);
}

static void run_signal(launcher *l) {
  if (l_wait_marks(l, "traffic", -1, l->o->deadline_ms)) {
    l_signal_all(l, SIGUSR1);
    l_expect_signal_dumps(l, 1, "after SIGUSR1 during traffic");
    l_go(l, "signalled");
    l->allow_clean_exit = 1; /* past the "done" barrier a rank finalizes and leaves */
    l_wait_marks(l, "done", -1, l->o->deadline_ms);
  }
  l_finish(l, l->why[0] != 0, 60000);
  l_check_exits(l, EX_OK, EX_OK);
  l_census(l);
  for (int r = 0; r < l->o->nranks && !l->why[0]; r++)
    if (l->ndumps[r][R_SIGNAL] != 1)
      l_fail(l, "rank %d wrote %d signal dumps for one SIGUSR1", r, l->ndumps[r][R_SIGNAL]);
  l_no_stall_dumps(l);
}

static void run_twocomms(launcher *l) {
  if (l_wait_marks(l, "traffic", -1, l->o->deadline_ms)) {
    l_signal_all(l, SIGUSR1);
    l_expect_signal_dumps(l, 1, "after SIGUSR1 with two communicators");
    l_go(l, "signalled");
  }
  if (!l->why[0] && l_wait_marks(l, "reloaded", -1, l->o->deadline_ms)) {
    l_signal_all(l, SIGUSR1);
    l_expect_signal_dumps(l, 2, "after SIGUSR1 once the plugin was reloaded");
    l_go(l, "signalled-again");
    l->allow_clean_exit = 1;
    l_wait_marks(l, "done", -1, l->o->deadline_ms);
  }
  l_finish(l, l->why[0] != 0, 60000);
  l_check_exits(l, EX_OK, EX_OK);
  l_no_stall_dumps(l);
}

static void run_bench(launcher *l) {
  l->expect_exit = 1;
  l_finish(l, 0, l->o->deadline_ms);
  l_check_exits(l, EX_OK, EX_OK);
}

static void l_write_manifest(launcher *l, int pass) {
  char p[2 * E2E_PATH_MAX];
  snprintf(p, sizeof(p), "%s/manifest.json", l->work);
  FILE *f = fopen(p, "w");
  if (!f) {
    fprintf(stderr, "nccl_e2e: cannot write %s: %s\n", p, strerror(errno));
    return;
  }
  l_census(l);
  fprintf(f, "{\n  \"scenario\": \"%s\",\n  \"result\": \"%s\",\n  \"why\": ",
          sc_names[l->o->scenario], pass ? "PASS" : "FAIL");
  json_str(f, l->why);
  fprintf(f, ",\n  \"nranks\": %d,\n  \"skipRank\": %d,\n  \"skipSeq\": %d,\n", l->o->nranks,
          (l->o->scenario == SC_SKIP || l->o->scenario == SC_GRAPH) ? l->o->skip_rank : -1,
          l->skip_seq);
  fprintf(f, "  \"launcherPid\": %d,\n", (int)getpid());
  fprintf(f, "  \"iters\": %d,\n  \"ncclVersion\": %d,\n  \"multiRankGpu\": %s,\n",
          l->o->iters ? l->o->iters : scenario_default_iters(l->o->scenario), l->nccl_version,
          l->multi_rank_gpu ? "true" : "false");
  fprintf(f, "  \"timeoutMs\": %ld,\n  \"pollMs\": %ld,\n  \"plugin\": ", l->o->timeout_ms,
          l->o->poll_ms);
  json_str(f, l->o->plugin);
  fprintf(f, ",\n  \"dumpDir\": ");
  json_str(f, l->dumps);
  fprintf(f, ",\n  \"dumpsBeforeStall\": %d,\n  \"killedAfterAbort\": %d,\n  \"ranks\": [\n",
          l->dumps_before_stall, l->abort_killed);
  for (int r = 0; r < l->o->nranks; r++) {
    int st = l->status[r];
    fprintf(f, "    {\"rank\": %d, \"pid\": %d, \"exit\": %d, \"signal\": %d, "
               "\"stallLatencyMs\": %ld, \"peerLatencyMs\": %ld, \"dumps\": {",
            r, (int)l->pid[r], WIFEXITED(st) ? WEXITSTATUS(st) : -1,
            WIFSIGNALED(st) ? WTERMSIG(st) : 0, l->stall_latency_ms[r], l->peer_latency_ms[r]);
    for (int k = 0; k < R_COUNT; k++)
      fprintf(f, "%s\"%s\": %d", k ? ", " : "", reason_names[k], l->ndumps[r][k]);
    fprintf(f, "}}%s\n", r + 1 < l->o->nranks ? "," : "");
  }
  fprintf(f, "  ]\n}\n");
  fclose(f);
}

/* The work dir must be ours: new, empty, or marked by an earlier run (then its files go). */
static int l_prepare_work(launcher *l, char *err, size_t errlen) {
  char p[2 * E2E_PATH_MAX];
  if (l->o->work_dir[0]) {
    snprintf(l->work, sizeof(l->work), "%s", l->o->work_dir);
    if (mkdir_p1(l->work) != 0) {
      snprintf(err, errlen, "cannot create %s: %s", l->work, strerror(errno));
      return -1;
    }
    snprintf(p, sizeof(p), "%s/.nccl-e2e", l->work);
    if (!file_exists(p)) {
      DIR *d = opendir(l->work);
      struct dirent *e;
      int entries = 0;
      while (d && (e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) entries++;
      if (d) closedir(d);
      if (entries) {
        snprintf(err, errlen, "%s is not empty and was not made by nccl_e2e: refusing to use it", l->work);
        return -1;
      }
    }
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(l->work, sizeof(l->work), "%s/nccl-e2e-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(l->work)) {
      snprintf(err, errlen, "mkdtemp %s: %s", l->work, strerror(errno));
      return -1;
    }
  }
  snprintf(p, sizeof(p), "%s/.nccl-e2e", l->work);
  write_file_atomic(p, "nccl_e2e work dir\n", 18);
  snprintf(l->rdv, sizeof(l->rdv), "%s/rdv", l->work);
  snprintf(l->dumps, sizeof(l->dumps), "%s/dumps", l->work);
  snprintf(l->logs, sizeof(l->logs), "%s/logs", l->work);
  const char *dirs[3] = {l->rdv, l->dumps, l->logs};
  for (int i = 0; i < 3; i++) {
    if (mkdir_p1(dirs[i]) != 0) {
      snprintf(err, errlen, "cannot create %s: %s", dirs[i], strerror(errno));
      return -1;
    }
    DIR *d = opendir(dirs[i]);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
      if (e->d_type != DT_REG) continue;
      snprintf(p, sizeof(p), "%s/%s", dirs[i], e->d_name);
      unlink(p);
    }
    if (d) closedir(d);
  }
  snprintf(p, sizeof(p), "%s/manifest.json", l->work);
  unlink(p);
  return 0;
}

typedef struct env_kv {
  char name[64];
  char value[E2E_PATH_MAX + 64];
} env_kv;

/* The environment of one rank. Variables the user already set win where noted. */
static int rank_env(const launcher *l, int rank, env_kv *kv, int max) {
  int n = 0;
#define KV(k, ...)                                                   \
  do {                                                               \
    if (n < max) {                                                   \
      snprintf(kv[n].name, sizeof(kv[n].name), "%s", k);             \
      snprintf(kv[n].value, sizeof(kv[n].value), __VA_ARGS__);       \
      n++;                                                           \
    }                                                                \
  } while (0)
  KV("NCCL_HOSTID", "nccl-e2e-%d-rank%d", (int)getpid(), rank);
  KV("NCCL_NET", "Socket");
  KV("NCCL_SOCKET_IFNAME", "lo");
  KV("NCCL_IB_DISABLE", "1");
  KV("NCCL_COLLNET_ENABLE", "0");
  KV("NCCL_MNNVL_ENABLE", "0");
  if (l->multi_rank_gpu) KV("NCCL_MULTI_RANK_GPU_ENABLE", "1");
  KV("NCCL_PROFILER_PLUGIN", "%s", l->o->plugin);
  KV("NCCL_WATCHDOG_DUMP_DIR", "%s", l->dumps);
  KV("NCCL_WATCHDOG_TIMEOUT", "%ldms", l->o->timeout_ms);
  KV("NCCL_WATCHDOG_POLL", "%ldms", l->o->poll_ms);
  if (!getenv("NCCL_DEBUG")) KV("NCCL_DEBUG", l->o->scenario == SC_BENCH ? "WARN" : "INFO");
  if (!getenv("NCCL_DEBUG_SUBSYS") && !getenv("NCCL_DEBUG")) KV("NCCL_DEBUG_SUBSYS", "INIT,NET,ENV,PROFILE");
  if (!getenv("NCCL_DEBUG_FILE")) KV("NCCL_DEBUG_FILE", "%s/nccl-rank%d.%%h.%%p.log", l->logs, rank);
  KV("RANK", "%d", rank);
  KV("LOCAL_RANK", "%d", rank);
  KV("WORLD_SIZE", "%d", l->o->nranks);
#undef KV
  return n;
}

static int l_spawn(launcher *l) {
  char rank_s[16];
  char **args = calloc((size_t)l->argc + 8, sizeof(char *));
  if (!args) return -1;
  fflush(NULL);
  for (int r = 0; r < l->o->nranks; r++) {
    pid_t p = fork();
    if (p < 0) {
      l_fail(l, "fork: %s", strerror(errno));
      free(args);
      return -1;
    }
    if (p == 0) {
      env_kv kv[32];
      int n = rank_env(l, r, kv, 32), a = 0;
      /* A worker must never outlive its launcher: a stuck NCCL rank would hold the GPU. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      for (int i = 0; i < n; i++) setenv(kv[i].name, kv[i].value, 1);
      snprintf(rank_s, sizeof(rank_s), "%d", r);
      /* The original arguments first: the parser keeps the last value of an option. */
      for (int i = 0; i < l->argc; i++) args[a++] = l->argv[i];
      args[a++] = "--worker";
      args[a++] = rank_s;
      args[a++] = "--work-dir";
      args[a++] = l->work;
      args[a++] = "--plugin";
      args[a++] = l->o->plugin;
      args[a] = NULL;
      execv("/proc/self/exe", args);
      fprintf(stderr, "nccl_e2e: exec /proc/self/exe: %s\n", strerror(errno));
      _exit(127);
    }
    l->pid[r] = p;
  }
  free(args);
  return 0;
}

/* The plugin must load where NCCL will load it: say why not before starting any rank. */
static int l_check_plugin(launcher *l, char *err, size_t errlen) {
  const char *p = l->o->plugin;
  if (strcmp(p, "none") == 0) return 0;
  if (strchr(p, '/')) {
    if (!file_exists(p)) {
      snprintf(err, errlen, "profiler plugin %s does not exist (build the nccl-profiler-watchdog target)", p);
      return -1;
    }
    void *h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char *e = dlerror();
      snprintf(err, errlen, "profiler plugin cannot be loaded: %s%s", e ? e : "?",
               e && strstr(e, "cannot open shared object") ? " (a shared library it needs is missing on "
               "this machine: run tests/gpu/bundle.sh on the build machine and use its output)" : "");
      return -1;
    }
    if (!dlsym(h, "ncclProfiler_v4") && !dlsym(h, "ncclProfiler_v5") && !dlsym(h, "ncclProfiler_v6")) {
      dlclose(h);
      snprintf(err, errlen, "%s exports no ncclProfiler_v4/v5/v6 symbol", p);
      return -1;
    }
    dlclose(h);
  }
  if (l->nccl_version < 22700) {
    snprintf(err, errlen, "NCCL %d only has profiler ABI v3 or older; nccl-watchdog needs NCCL >= 2.27",
             l->nccl_version);
    return -1;
  }
  return 0;
}

static void print_plan(launcher *l) {
  env_kv kv[32];
  printf("scenario: %s\nranks: %d\n", sc_names[l->o->scenario], l->o->nranks);
  if (l->o->scenario == SC_SKIP || l->o->scenario == SC_GRAPH) printf("skip rank: %d\n", l->o->skip_rank);
  printf("iterations: %d\n", l->o->iters ? l->o->iters : scenario_default_iters(l->o->scenario));
  printf("watchdog timeout: %ld ms, poll: %ld ms, deadline: %ld s\n", l->o->timeout_ms,
         l->o->poll_ms, l->o->deadline_ms / 1000);
  printf("plugin: %s\n", l->o->plugin);
  printf("nccl version: %d%s\n", l->nccl_version,
         l->multi_rank_gpu ? " (NCCL_MULTI_RANK_GPU_ENABLE=1)" : "");
  printf("work dir: %s\n", l->o->work_dir[0] ? l->o->work_dir : "(new directory under $TMPDIR)");
  if (!l->o->work_dir[0]) {
    snprintf(l->dumps, sizeof(l->dumps), "WORK/dumps");
    snprintf(l->logs, sizeof(l->logs), "WORK/logs");
  }
  for (int r = 0; r < l->o->nranks; r++) {
    int n = rank_env(l, r, kv, 32);
    printf("rank %d env:", r);
    for (int i = 0; i < n; i++) printf(" %s=%s", kv[i].name, kv[i].value);
    printf("\n");
  }
}

static int probe(const e2e_opts *o) {
  int rt = 0, drv = 0, nv = 0, ndev = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  ncclGetVersion(&nv);
  printf("cuda runtime %d, driver supports %d, nccl %d\n", rt, drv, nv);
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess) {
    printf("no usable GPU: cudaGetDeviceCount: %s\n", cudaGetErrorString(e));
    return 1;
  }
  for (int d = 0; d < ndev; d++) {
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, d) == cudaSuccess)
      printf("device %d: %s, %.1f GiB\n", d, prop.name, prop.totalGlobalMem / 1073741824.0);
  }
  if (o->device >= ndev) {
    printf("no usable GPU: device %d requested, %d visible\n", o->device, ndev);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  static e2e_opts o;
  static launcher l;
  char err[4 * E2E_PATH_MAX];
  int rc = e2e_parse_args(argc, argv, &o, err, sizeof(err));
  if (rc == 1) {
    usage(stdout);
    return 0;
  }
  if (rc < 0) {
    fprintf(stderr, "nccl_e2e: %s\n(run 'nccl_e2e --help' for usage)\n", err);
    return EX_USAGE;
  }
  if (o.check_args) return run_check_args();
  if (!o.plugin_given) {
    const char *env = getenv("NCCL_PROFILER_PLUGIN");
    snprintf(o.plugin, sizeof(o.plugin), "%s", env && *env ? env : "none");
  }
  if (o.worker_rank >= 0) return worker_main(&o);
  if (o.scenario == SC_PROBE) return probe(&o);
  if (o.scenario != SC_BENCH && o.scenario != SC_HEALTHY && strcmp(o.plugin, "none") == 0) {
    fprintf(stderr, "nccl_e2e: scenario '%s' checks the plugin's dumps: pass --plugin PATH or set "
                    "NCCL_PROFILER_PLUGIN\n", sc_names[o.scenario]);
    return EX_USAGE;
  }

  l.o = &o;
  l.skip_seq = -1;
  l.argc = argc;
  l.argv = argv;
  /* ncclGetVersion touches no GPU; it tells which NCCL the dynamic linker picked. */
  ncclGetVersion(&l.nccl_version);
  l.multi_rank_gpu = l.nccl_version >= 23000;
  if (o.dry_run) {
    if (o.work_dir[0]) {
      snprintf(l.dumps, sizeof(l.dumps), "%s/dumps", o.work_dir);
      snprintf(l.logs, sizeof(l.logs), "%s/logs", o.work_dir);
    }
    print_plan(&l);
    return 0;
  }
  if (l_check_plugin(&l, err, sizeof(err)) != 0 || l_prepare_work(&l, err, sizeof(err)) != 0) {
    fprintf(stderr, "nccl_e2e: %s: FAIL: %s\n", sc_names[o.scenario], err);
    return 1;
  }
  if (o.verbose) printf("nccl_e2e: %s: work dir %s, nccl %d\n", sc_names[o.scenario], l.work, l.nccl_version);
  l.start_ms = mono_ms();
  if (l_spawn(&l) == 0 && l_wait_marks(&l, "init", -1, 180000)) {
    switch (o.scenario) {
      case SC_HEALTHY: run_healthy(&l); break;
      case SC_SKIP: run_skip(&l); break;
      case SC_SIGNAL: run_signal(&l); break;
      case SC_GRAPH: run_graph(&l); break;
      case SC_TWOCOMMS: run_twocomms(&l); break;
      case SC_BENCH: run_bench(&l); break;
      default: break;
    }
  }
  l_finish(&l, 1, 30000);
  int pass = l.why[0] == '\0';
  l_write_manifest(&l, pass);
  if (pass) {
    printf("nccl_e2e: %s: PASS (%d ranks, nccl %d, %.1f s", sc_names[o.scenario], o.nranks,
           l.nccl_version, (mono_ms() - l.start_ms) / 1e3);
    if (o.scenario == SC_SKIP || o.scenario == SC_GRAPH) {
      printf("; stall dump after");
      for (int r = 0; r < o.nranks; r++)
        if (r != o.skip_rank) printf(" %.2f s (rank %d)", l.stall_latency_ms[r] / 1e3, r);
      printf(", peer dump from rank %d after %.2f s", o.skip_rank, l.peer_latency_ms[o.skip_rank] / 1e3);
    }
    if (l.abort_killed) printf("; %d rank(s) needed SIGKILL after ncclCommAbort", l.abort_killed);
    printf(")\nnccl_e2e: work dir %s\n", l.work);
  } else {
    printf("nccl_e2e: %s: FAIL: %s\nnccl_e2e: work dir %s (NCCL logs in %s)\n", sc_names[o.scenario],
           l.why, l.work, l.logs);
  }
  return pass ? 0 : 1;
}
