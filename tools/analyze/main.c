/*
 * nccl-watchdog-analyze: reads the dumps of every rank and names the rank and collective that
 * hung the job. Usage and output formats: docs/analyzer.md.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include <time.h>

#include "base/host.h"
#include "flightrec/ringfile.h"
#include "job.h"
#include "incarnation.h"
#include "load.h"
#include "ringfile.h"
#include "report.h"
#include "settle.h"
#include "trace.h"
#include "verdict.h"

enum { EXIT_OK = 0, EXIT_OUTPUT = 1, EXIT_USAGE = 2, EXIT_NO_DUMP = 3 };

typedef struct args {
  int json, verbose, quiet, timings;
  int jobs; /* 0: one per CPU */
  const char *trace;
  const char *html;
  const char *salvage; /* directory: turn ring files into postmortem dumps there, then exit */
  const char *salvage_mark; /* with salvage: a file removed once the dumps are written */
  const char *out;     /* PREFIX: PREFIX.txt, .json and .html, written whole or not at all */
  const char *line;    /* FILE: the first line, published whole (an automatic verdict's) */
  long settle_n;       /* wait for this many dumps in the inputs first ... */
  double settle_s;     /* ... at most this long */
  long settle_since;   /* counting files modified since this time (epoch seconds), 0: all */
  long episode;        /* --episode: settle counts that episode's answers only; -1 none */
  int nsettle_comms;   /* --settle-comms: a dump of a process's end counts when it names one */
  uint64_t settle_comms[16];
  long deadline_s;     /* SIGALRM ends the run after this long (0: none; -1: DEFAULT_DEADLINE_S);
                          reading stops at 90 % of it, so the report says what was left */
  long max_memory_mib; /* parse trees of all threads together; -1: the default (default_memory) */
  wd_az_opts opts;
  int ninputs;
  char **inputs;
} args;

static void usage(FILE *f) {
  fprintf(f,
          "usage: nccl-watchdog-analyze [options] DUMP_DIR|DUMP_FILE|RING_FILE...\n"
          "  --json             machine-readable report on stdout (schema: docs/analyzer.md)\n"
          "  --trace=FILE       also write a Chrome/Perfetto trace of every rank's rings\n"
          "  --html=FILE        also write a self-contained HTML report (charts per rank)\n"
          "  --out=PREFIX       write the text, JSON and HTML reports to PREFIX.txt, .json and\n"
          "                     .html (each through a temporary file and a rename), and only the\n"
          "                     first line on stdout (the plugin's automatic verdict uses it)\n"
          "  --settle=N,SECONDS[,SINCE] wait until the inputs hold N dumps (modified since SINCE,\n"
          "                     epoch seconds), at most SECONDS, then analyze\n"
          "  --settle-comms=ID[,ID...] with --settle and --episode: a dump of a process's end counts\n"
          "                     only when its identity names one of these communicators (the\n"
          "                     episode's incarnation; the plugin's automatic verdict passes them)\n"
          "  --line=FILE        publish the first line as FILE (created whole, never replaced)\n"
          "                     and print it on stderr\n"
          "  --deadline=SECONDS bound the run's time: reading dumps stops at 90%% of it (files not\n"
          "                     read are cut, and a job with a cut dump gets no \"OK\"), SIGALRM\n"
          "                     ends the run at SECONDS (default 600; 0: no bound)\n"
          "  --max-memory=MIB   memory for parsed dumps, all threads together; a dump that would\n"
          "                     pass it is cut, and a job with a cut dump gets no \"OK\" (default:\n"
          "                     half the machine's memory, at most 8192; 0: no bound)\n"
          "  --salvage=DIR      write each ring file given (or found in a directory given) as a\n"
          "                     dump with reason \"postmortem\" into DIR, and stop there; the file\n"
          "                     of a process that still runs on this machine is written as its\n"
          "                     live state (reason \"live\"; with --episode=K, standing in for its\n"
          "                     answer to episode K)\n"
          "  --salvage-mark=FILE with --salvage: remove FILE once the dumps are written (the\n"
          "                     plugin's mark that a salvage is under way, which --settle waits for)\n"
          "  --all-dumps        use every dump, not only the newest per (host, pid, comm rank)\n"
          "  --incarnation=N    judge incarnation N of the job (0: the oldest in the directory;\n"
          "                     default the newest): an incarnation is the communicators made\n"
          "                     together and the processes that use them (a restart, in-process\n"
          "                     or by a launcher, makes a new one); --attempt=N is the same\n"
          "  --episode=K        judge the job's stall episode K: its dumps, and post-mortem and\n"
          "                     teardown dumps of processes that ended (no snapshot; --settle\n"
          "                     then counts these only, one per process)\n"
          "  --stall-ms=MS      an operation without progress for MS counts as stuck\n"
          "                     (default: the timeout recorded in each dump)\n"
          "  --straggler-ms=MS  a rank entering collectives MS later than the median rank is\n"
          "                     a straggler (default 500)\n"
          "  --timings          time of each phase (load, analyze, job verdict, report) on stderr\n"
          "  -j, --jobs=N       threads reading and parsing dumps (default: one per CPU, at most\n"
          "                     16; the report does not depend on it)\n"
          "  -v, --verbose      one line per rank in the report\n"
          "  -q, --quiet        do not list skipped files on stderr\n"
          "  -h, --help         this text;  -V, --version: the version\n"
          "examples:\n"
          "  nccl-watchdog-analyze /shared/dumps/$SLURM_JOB_ID\n"
          "  nccl-watchdog-analyze --json --trace=job.trace.json /shared/dumps/job42 > report.json\n"
          "  nccl-watchdog-analyze --salvage=/shared/dumps/job42 /dev/shm/nccl-watchdog-1000\n"
          "exit: 0 analyzed (hang or not), 1 output not written, 2 usage, 3 no readable dump\n");
}

static int bad(const char *opt, const char *val, const char *why) {
  fprintf(stderr, "nccl-watchdog-analyze: %s%s%s: %s\n", opt, val ? "=" : "", val ? val : "", why);
  return -1;
}

static int parse_ms(const char *opt, const char *val, double *out) {
  char *end;
  errno = 0;
  *out = strtod(val, &end);
  if (errno || end == val || *end || !(*out > 0)) return bad(opt, val, "expected milliseconds > 0");
  return 0;
}

/* 0: run; 1: help or version printed; -1: usage error (already named on stderr). */
static int parse_args(int argc, char **argv, args *a) {
  enum { O_JSON = 256, O_TRACE, O_SALVAGE, O_ALL, O_STALL, O_STRAG, O_TIMINGS, O_HTML, O_OUT,
         O_SETTLE, O_SETTLE_COMMS, O_LINE, O_DEADLINE, O_ATTEMPT, O_EPISODE, O_MAXMEM, O_SALVAGE_MARK };
  static const struct option longopts[] = {
      {"json", no_argument, NULL, O_JSON},          {"trace", required_argument, NULL, O_TRACE},
      {"salvage", required_argument, NULL, O_SALVAGE}, {"all-dumps", no_argument, NULL, O_ALL},
      {"salvage-mark", required_argument, NULL, O_SALVAGE_MARK},
      {"attempt", required_argument, NULL, O_ATTEMPT}, {"incarnation", required_argument, NULL, O_ATTEMPT}, {"episode", required_argument, NULL, O_EPISODE},
      {"stall-ms", required_argument, NULL, O_STALL},
      {"straggler-ms", required_argument, NULL, O_STRAG},
      {"timings", no_argument, NULL, O_TIMINGS},
      {"html", required_argument, NULL, O_HTML},
      {"out", required_argument, NULL, O_OUT},
      {"settle", required_argument, NULL, O_SETTLE},
      {"settle-comms", required_argument, NULL, O_SETTLE_COMMS},
      {"line", required_argument, NULL, O_LINE},
      {"deadline", required_argument, NULL, O_DEADLINE},
      {"max-memory", required_argument, NULL, O_MAXMEM},
      {"jobs", required_argument, NULL, 'j'},
      {"verbose", no_argument, NULL, 'v'},          {"quiet", no_argument, NULL, 'q'},
      {"help", no_argument, NULL, 'h'},             {"version", no_argument, NULL, 'V'},
      {NULL, 0, NULL, 0}};
  memset(a, 0, sizeof(*a));
  a->max_memory_mib = -1;
  a->deadline_s = -1;
  a->episode = -1;
  opterr = 0; /* our own messages: they name the option and say what is wrong */
  int c;
  while ((c = getopt_long(argc, argv, ":vqhVj:", longopts, NULL)) != -1) {
    switch (c) {
    case O_JSON: a->json = 1; break;
    case O_TRACE: a->trace = optarg; break;
    case O_HTML: a->html = optarg; break;
    case O_OUT: a->out = optarg; break;
    case O_LINE: a->line = optarg; break;
    case O_SETTLE: {
      char *end;
      errno = 0;
      a->settle_n = strtol(optarg, &end, 10);
      if (errno || end == optarg || *end != ',' || a->settle_n < 1) return bad("--settle", optarg, "expected N,SECONDS");
      a->settle_s = strtod(end + 1, &end);
      if (*end == ',') a->settle_since = strtol(end + 1, &end, 10);
      if (*end || !(a->settle_s >= 0) || a->settle_s > 86400 || a->settle_since < 0)
        return bad("--settle", optarg, "expected N,SECONDS[,SINCE]");
      break;
    }
    case O_DEADLINE: {
      char *end;
      errno = 0;
      long d = strtol(optarg, &end, 10);
      if (errno || end == optarg || *end || d < 0 || d > 86400) return bad("--deadline", optarg, "expected seconds, 0 to 86400");
      a->deadline_s = d;
      break;
    }
    case O_MAXMEM: {
      char *end;
      errno = 0;
      long m = strtol(optarg, &end, 10);
      if (errno || end == optarg || *end || m < 0 || m > (1L << 30)) return bad("--max-memory", optarg, "expected MiB, 0 for no bound");
      a->max_memory_mib = m;
      break;
    }
    case O_SETTLE_COMMS: {
      a->nsettle_comms = 0;
      for (const char *p = optarg; *p;) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 16);
        if (errno || end == p || (*end && *end != ',') || a->nsettle_comms == 16)
          return bad("--settle-comms", optarg, "expected up to 16 hex communicator ids, comma-separated");
        a->settle_comms[a->nsettle_comms++] = (uint64_t)v;
        p = *end ? end + 1 : end;
      }
      break;
    }
    case O_SALVAGE: a->salvage = optarg; break;
    case O_SALVAGE_MARK: a->salvage_mark = optarg; break;
    case O_ALL: a->opts.all_dumps = 1; break;
    case O_ATTEMPT:
    case O_EPISODE: {
      char *end;
      long v = strtol(optarg, &end, 10);
      if (*end || v < 0 || v > 1000000) {
        fprintf(stderr, "nccl-watchdog-analyze: --%s wants a number\n", c == O_ATTEMPT ? "incarnation" : "episode");
        return -1;
      }
      if (c == O_ATTEMPT) wd_az_set_attempt((int)v);
      else wd_az_set_episode((int)(a->episode = v));
      break;
    }
    case O_TIMINGS: a->timings = 1; break;
    case O_STALL:
      if (parse_ms("--stall-ms", optarg, &a->opts.stall_ms) != 0) return -1;
      break;
    case O_STRAG:
      if (parse_ms("--straggler-ms", optarg, &a->opts.straggler_ms) != 0) return -1;
      break;
    case 'j': {
      char *end;
      errno = 0;
      long j = strtol(optarg, &end, 10);
      if (errno || end == optarg || *end || j < 1 || j > 64) return bad("--jobs", optarg, "expected 1 to 64");
      a->jobs = (int)j;
      break;
    }
    case 'v': a->verbose = 1; break;
    case 'q': a->quiet = 1; break;
    case 'h': usage(stdout); return 1;
    case 'V': printf("nccl-watchdog-analyze %s\n", WD_VERSION); return 1;
    case ':': return bad(argv[optind - 1], NULL, "needs a value");
    default: {
      char opt[8] = "-?";
      if (optopt) opt[1] = (char)optopt;
      return bad(optopt ? opt : argv[optind - 1], NULL, "unknown option");
    }
    }
  }
  a->inputs = argv + optind;
  a->ninputs = argc - optind;
  if (!a->ninputs) {
    fprintf(stderr, "nccl-watchdog-analyze: no dump directory or file given\n");
    return -1;
  }
  return 0;
}

typedef enum { R_TEXT, R_JSON, R_HTML } report_kind;

/* PREFIX.<ext>: written to a temporary name, synced and renamed, so a reader sees the whole
 * report or none. 0 or -1 (errno). */
static int write_report(const char *prefix, const char *ext, report_kind kind, const wd_az_result *res) {
  char path[4096], tmp[4120];
  snprintf(path, sizeof path, "%s.%s", prefix, ext);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    if (fd >= 0) close(fd);
    return -1;
  }
  int bad = 0;
  if (kind == R_TEXT) wd_az_report_text(f, res, 0);
  else if (kind == R_JSON) bad = wd_az_report_json(f, res) != 0;
  else bad = wd_az_report_html(f, res) != 0;
  if (fflush(f) != 0 || fsync(fileno(f)) != 0) bad = 1;
  if (fclose(f) != 0) bad = 1;
  if (bad || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    errno = e;
    return -1;
  }
  return 0;
}

/* The text report's first line. */
static void first_line(const wd_az_result *res, char *out, size_t len) {
  char *text = NULL;
  size_t n = 0;
  FILE *m = open_memstream(&text, &n);
  snprintf(out, len, "%s", res->summary);
  if (!m) return;
  wd_az_report_text(m, res, 0);
  if (fclose(m) == 0 && text) {
    char *nl = strchr(text, '\n');
    if (nl) *nl = '\0';
    if (text[0]) snprintf(out, len, "%s", text);
  }
  free(text);
}

/* --line: FILE created whole (temporary, then link: never replaces one). */
static int publish_line(const char *file, const char *line) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", file, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  size_t len = strlen(line);
  int ok = write(fd, line, len) == (ssize_t)len && write(fd, "\n", 1) == 1 && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  int rc = ok ? link(tmp, file) : -1;
  unlink(tmp);
  return rc;
}

/* The job's user: the owner of the first dump directory named (the job made it; a shared
 * directory's other members are not trusted: docs/operations.md, "What the analyzer trusts"). */
static void trust_job_owner(const args *a) {
  struct stat st;
  for (int i = 0; i < a->ninputs; i++)
    if (lstat(a->inputs[i], &st) == 0 && S_ISDIR(st.st_mode)) {
      wd_az_trust_owner((unsigned)st.st_uid);
      return;
    }
}

/* The job's own verdict-<episode>.resumed in an input directory (the plugin writes it when
 * progress came back after the episode's verdict: autoverdict.c, wd_av_resumed): its first line
 * into set->resumed_note. Only a regular file of the directory's owner, read without following
 * a link: the directory is shared. */
static void find_resumed(const args *a, wd_az_set *set) {
  if (set->episode < 1) return;
  for (int i = 0; i < a->ninputs; i++) {
    struct stat ds, st;
    if (lstat(a->inputs[i], &ds) != 0 || !S_ISDIR(ds.st_mode)) continue;
    char path[4200];
    snprintf(path, sizeof path, "%s/verdict-%d.resumed", a->inputs[i], set->episode);
    int fd = wd_az_open_nolink(AT_FDCWD, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[sizeof set->resumed_note];
    ssize_t n = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ds.st_uid) n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
    if (buf[0]) {
      snprintf(set->resumed_note, sizeof set->resumed_note, "%s", buf);
      return;
    }
  }
}

/* Half the machine's memory, at most 8 GiB: a run beside a live job (the automatic verdict runs
 * on the job's own nodes) must leave it room. */
static size_t default_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  size_t half = pages > 0 && psz > 0 ? (size_t)pages * (size_t)psz / 2 : (size_t)1 << 30;
  size_t cap = (size_t)8 << 30;
  return half < cap ? half : cap;
}

#define DEFAULT_DEADLINE_S 600 /* a verdict is wanted in minutes; 100,000 dumps load well within it */

static int run(const args *a) {
  long deadline = a->deadline_s < 0 ? DEFAULT_DEADLINE_S : a->deadline_s;
  double read_until = 0;
  if (deadline) {
    alarm((unsigned)deadline);
    read_until = wd_az_now_s() + 0.9 * (double)deadline;
    wd_az_set_read_until(read_until, (unsigned)deadline);
  }
  wd_az_set_memory(a->max_memory_mib < 0 ? default_memory() : (size_t)a->max_memory_mib << 20);
  if (a->settle_n) {
    wd_az_settle_spec spec = {a->inputs, a->ninputs, a->settle_n, a->settle_s, a->settle_since, a->episode,
                              a->settle_comms, a->nsettle_comms};
    wd_az_settle(&spec, read_until);
  }
  wd_az_set set;
  memset(&set, 0, sizeof(set));
  double t0 = wd_az_now_s();
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  wd_az_set_jobs(a->jobs ? a->jobs : (int)(cpus < 1 ? 1 : cpus > 16 ? 16 : cpus));
  trust_job_owner(a);
  for (int i = 0; i < a->ninputs; i++) wd_az_load_path(&set, a->inputs[i], a->quiet);
  wd_az_load_release();
  int rc = EXIT_OK;
  if (set.ndumps == 0) {
    fprintf(stderr, "nccl-watchdog-analyze: no readable dump (%zu file%s skipped)\n", set.nskips,
            set.nskips == 1 ? "" : "s");
    rc = EXIT_NO_DUMP;
    goto out;
  }
  double t1 = wd_az_now_s();
  wd_az_select(&set, a->opts.all_dumps);
  find_resumed(a, &set);
  wd_az_clock_offsets(&set);
  size_t kept = 0;
  for (size_t i = 0; i < set.ndumps; i++) kept += set.dumps[i].kept;
  if (kept == 0) { /* --attempt or --episode chose nothing: no evidence is not "no hang" */
    fprintf(stderr, "nccl-watchdog-analyze: no dump of the chosen attempt or episode (%s)\n", set.attempt_note);
    rc = EXIT_NO_DUMP;
    goto out;
  }
  wd_az_result res;
  if (wd_az_analyze(&set, &a->opts, &res) != 0) {
    fprintf(stderr, "nccl-watchdog-analyze: out of memory\n");
    rc = EXIT_OUTPUT;
    goto out;
  }
  double t2 = wd_az_now_s(), t3 = t2;
  if (a->timings) { /* the reports compute it again: once more here, to time it alone */
    wd_az_job job;
    wd_az_job_verdict(&res, &job);
    t3 = wd_az_now_s();
  }
  if (a->out) {
    static const char *const ext[] = {"txt", "json", "html"};
    for (int k = R_TEXT; k <= R_HTML; k++)
      if (write_report(a->out, ext[k], (report_kind)k, &res) != 0) {
        fprintf(stderr, "nccl-watchdog-analyze: could not write %s.%s: %s\n", a->out, ext[k],
                strerror(errno));
        rc = EXIT_OUTPUT;
      }
    char first[4096];
    first_line(&res, first, sizeof first);
    printf("%s\n", first);
  } else if (a->json) {
    rc = wd_az_report_json(stdout, &res) == 0 ? EXIT_OK : EXIT_OUTPUT;
  } else {
    wd_az_report_text(stdout, &res, a->verbose);
  }
  if (a->html) {
    FILE *hf = fopen(a->html, "w");
    int bad = !hf || wd_az_report_html(hf, &res) != 0;
    if (hf && fclose(hf) != 0) bad = 1;
    if (bad) {
      fprintf(stderr, "nccl-watchdog-analyze: could not write %s: %s\n", a->html, strerror(errno));
      rc = EXIT_OUTPUT;
    }
  }
  errno = 0;
  if (a->trace && wd_az_trace_write(&set, a->trace) != 0) {
    fprintf(stderr, "nccl-watchdog-analyze: could not write trace %s: %s\n", a->trace,
            errno ? strerror(errno) : "out of memory");
    rc = EXIT_OUTPUT;
  }
  if (a->line) {
    /* The text report's first line (the job's verdict where there is one), as the reader of
     * PREFIX.txt sees it. */
    char first[4096];
    first_line(&res, first, sizeof first);
    if (publish_line(a->line, first) != 0 && errno != EEXIST) {
      fprintf(stderr, "nccl-watchdog-analyze: could not write %s: %s\n", a->line, strerror(errno));
      rc = EXIT_OUTPUT;
    }
    /* The job's log, where on-call looks first: this stderr is a dying rank's. */
    fprintf(stderr, "nccl-watchdog: verdict: %s\n", first);
  }
  if (fflush(stdout) != 0) rc = EXIT_OUTPUT;
  if (a->timings)
    fprintf(stderr, "timings: load %.3f s, analyze %.3f s, job verdict %.3f s, report %.3f s "
                    "(%zu dumps, %zu communicators)\n",
            t1 - t0, t2 - t1, t3 - t2, wd_az_now_s() - t3, set.ndumps, res.ncomms);
  wd_az_result_free(&res);
out:
  wd_az_set_free(&set);
  wd_az_strings_free();
  return rc;
}

/* A ring file of a process that still runs here becomes its live state (reason "live"), not a
 * post-mortem: where it is stopped, what its watchdog last wrote and when, and, for the
 * automatic verdict (episode >= 0), the episode it stands in for (its watchdog did not answer). */
static void mark_live(cJSON *doc, const wd_rf_header *h, char state, long episode) {
  cJSON_ReplaceItemInObject(doc, "reason", cJSON_CreateString("live"));
  cJSON *lv = cJSON_DetachItemFromObject(doc, "postmortem");
  if (!lv) lv = cJSON_CreateObject();
  if (!lv) return;
  char st[2] = {state, '\0'};
  cJSON_AddStringToObject(lv, "state", st);
  cJSON_AddStringToObject(lv, "stateText", wd_az_proc_state_text(state));
  /* Its watchdog thread's own state: blocked in the kernel (D) while the process sleeps tells a
   * hung file system (the dump it could not write), which the process's state does not. */
  char wst;
  if (wd_proc_thread_state(h->pid, "nccl-watchdog", &wst) == 0) {
    char w[2] = {wst, '\0'};
    cJSON_AddStringToObject(lv, "watchdogThreadState", w);
  }
  cJSON_AddNumberToObject(lv, "pollMs", h->poll_ms);
  /* This machine's wall clock against what its watchdog stamped on the same machine. */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  if (h->live_gen && h->live_wall_ns && now > h->live_wall_ns)
    cJSON_AddNumberToObject(lv, "watchdogSilentMs", (double)((now - h->live_wall_ns) / 1000000ull));
  cJSON_AddItemToObject(doc, "live", lv);
  cJSON *ident = cJSON_GetObjectItem(doc, "identity");
  if (!ident) ident = cJSON_AddObjectToObject(doc, "identity");
  if (!ident) return;
  if (episode >= 0) cJSON_AddNumberToObject(ident, "jobEpisode", (double)episode);
}

/* A salvaged dump to DIR/<host>-<pid>-<what>.json, as the plugin writes its own: whole or not at
 * all (a temporary name a reader skips, synced, then linked to its name, which never replaces
 * one that is there). */
static int write_salvaged(cJSON *doc, const char *dir, const char *what, const char *from) {
  const char *host = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "host"));
  char out[1024], tmp[1100];
  snprintf(out, sizeof out, "%s/%s-%d-%s.json", dir, host && *host ? host : "host",
           (int)cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "pid")), what);
  const char *slash = strrchr(out, '/');
  snprintf(tmp, sizeof tmp, "%.*s/.%s.tmp.%d", (int)(slash - out), out, slash + 1, (int)getpid());
  char *text = cJSON_PrintUnformatted(doc);
  int fd = text ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600) : -1;
  int ok = fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text) && fsync(fd) == 0;
  if (fd >= 0) ok = close(fd) == 0 && ok;
  ok = ok && link(tmp, out) == 0;
  int e = errno;
  if (fd >= 0) unlink(tmp);
  free(text);
  if (!ok) {
    fprintf(stderr, "nccl-watchdog-analyze: cannot write %s: %s\n", out, strerror(e));
    return -1;
  }
  printf("%s -> %s\n", from, out);
  return 0;
}

/* A ring file, whole (at most WD_AZ_MAX_FILE): malloc'ed, NULL when it cannot be read. A link or
 * anything but a regular file is not read (the ring folder may be shared with other users). */
static char *read_ring(const char *path, size_t *len) {
  int fd = wd_az_open_nolink(AT_FDCWD, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  struct stat st;
  if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
    close(fd);
    fd = -1;
  }
  FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
  if (!f && fd >= 0) close(fd);
  char *buf = NULL;
  long n = -1;
  if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n <= WD_AZ_MAX_FILE &&
      fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL)
    n = (long)fread(buf, 1, (size_t)n, f);
  if (f) fclose(f);
  *len = buf && n >= 0 ? (size_t)n : 0;
  return buf;
}

/* A decoded ring file's reference instant (time.mono_ns). */
static uint64_t doc_mono(const cJSON *doc) {
  const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "time"), "mono_ns"));
  return m ? strtoull(m, NULL, 16) : 0;
}

/* The salvage runs on the node whose memory holds the file (the poller's, or a user's there),
 * and a file refreshed in this boot's /dev/shm is of this boot: its machine is this one, which
 * tells it from a node of the same host name (cloned images, containers). */
static void add_boot(cJSON *doc) {
  wd_process_id here;
  wd_process_identity(&here);
  cJSON *ident = cJSON_GetObjectItem(doc, "identity");
  if (!ident) ident = cJSON_AddObjectToObject(doc, "identity");
  if (ident && here.boot_id[0] && !cJSON_GetObjectItem(ident, "bootId")) cJSON_AddStringToObject(ident, "bootId", here.boot_id);
}

/* One ring file to DIR/<host>-<pid>-<commId>-postmortem.json. When its process still runs on
 * this machine, it is noted in live ({path, pid, mono}) and written with the process's other
 * files by salvage_live. 0, or -1 when it cannot be read or written. */
static int salvage_file(const char *path, const char *dir, int quiet, cJSON *live) {
  char why[256] = "cannot open";
  size_t len;
  char *buf = read_ring(path, &len);
  char state = '?';
  int alive = buf && wd_az_ring_alive_here(buf, len, &state);
  int32_t pid = 0;
  if (alive) memcpy(&pid, buf + offsetof(wd_rf_header, pid), sizeof pid);
  cJSON *doc = buf ? wd_az_ringfile_decode(buf, len, path, why, sizeof why) : NULL;
  free(buf);
  if (!doc) {
    if (!quiet) fprintf(stderr, "nccl-watchdog-analyze: skipped %s: %s\n", path, why);
    return -1;
  }
  if (alive) {
    cJSON *e = cJSON_CreateObject();
    char m[24];
    snprintf(m, sizeof m, "%llx", (unsigned long long)doc_mono(doc));
    cJSON_Delete(doc);
    if (!e || !cJSON_AddStringToObject(e, "path", path) || !cJSON_AddNumberToObject(e, "pid", pid) ||
        !cJSON_AddStringToObject(e, "mono", m)) {
      cJSON_Delete(e);
      return -1;
    }
    cJSON_AddItemToArray(live, e);
    return 0;
  }
  add_boot(doc);
  const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "comms"), 0);
  const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(c, "commId"));
  char what[64];
  snprintf(what, sizeof what, "%s-postmortem", id ? id : "0x0");
  int rc = write_salvaged(doc, dir, what, path);
  cJSON_Delete(doc);
  return rc;
}

/* The running processes' files noted in live, one dump per process (its communicators together,
 * as the process's own dumps are: a verdict waiting for one dump per process must not start
 * with half of one), decoded against the latest reference instant among them so that their
 * times agree: <host>-<pid>[-e<K>]-live.json. Returns how many could not be written. */
static int salvage_live(cJSON *live, const char *dir, long episode, int quiet) {
  int failed = 0;
  cJSON *e;
  cJSON_ArrayForEach(e, live) {
    int pid = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "pid"));
    if (pid <= 0) continue; /* written with an earlier one of its process */
    uint64_t ref = 0;
    for (cJSON *o = e; o; o = o->next) {
      if ((int)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "pid")) != pid) continue;
      uint64_t m = strtoull(cJSON_GetStringValue(cJSON_GetObjectItem(o, "mono")), NULL, 16);
      if (m > ref) ref = m;
    }
    cJSON *doc = NULL;
    for (cJSON *o = e; o; o = o->next) {
      if ((int)cJSON_GetNumberValue(cJSON_GetObjectItem(o, "pid")) != pid) continue;
      cJSON_SetNumberValue(cJSON_GetObjectItem(o, "pid"), 0);
      const char *path = cJSON_GetStringValue(cJSON_GetObjectItem(o, "path"));
      char why[256] = "cannot open", state = '?';
      size_t len;
      char *buf = read_ring(path, &len);
      /* Still its process's (it may have ended since it was read). */
      int alive = buf && wd_az_ring_alive_here(buf, len, &state);
      wd_rf_header h;
      memset(&h, 0, sizeof h);
      if (buf && len >= sizeof h) memcpy(&h, buf, sizeof h);
      cJSON *one = alive ? wd_az_ringfile_decode_at(buf, len, path, ref, why, sizeof why) : NULL;
      free(buf);
      if (!one) {
        if (!quiet) fprintf(stderr, "nccl-watchdog-analyze: skipped %s: %s\n", path, alive ? why : "its process ended");
        continue;
      }
      printf("%s: its process (pid %d) runs: its live state\n", path, pid);
      if (!doc) {
        doc = one;
        add_boot(doc);
        mark_live(doc, &h, state, episode);
        continue;
      }
      /* Its communicators together, in comms[] and in identity (comms, ranks: the settle's). */
      const char *lists[][2] = {{"comms", NULL}, {"identity", "comms"}, {"identity", "ranks"}};
      for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++) {
        cJSON *from = cJSON_GetObjectItem(one, lists[l][0]), *to = cJSON_GetObjectItem(doc, lists[l][0]);
        if (lists[l][1]) {
          from = cJSON_GetObjectItem(from, lists[l][1]);
          to = cJSON_GetObjectItem(to, lists[l][1]);
        }
        cJSON *c = from ? cJSON_DetachItemFromArray(from, 0) : NULL;
        if (c && to) cJSON_AddItemToArray(to, c);
        else cJSON_Delete(c);
      }
      cJSON_Delete(one);
    }
    if (!doc) continue;
    char what[48] = "live";
    if (episode >= 0) snprintf(what, sizeof what, "e%ld-live", episode);
    if (write_salvaged(doc, dir, what, "(its communicators' ring files)") != 0) failed++;
    cJSON_Delete(doc);
  }
  return failed;
}

static int salvage(const args *a) {
  int written = 0, failed = 0;
  cJSON *live = cJSON_CreateArray();
  if (!live) return EXIT_OUTPUT;
  for (int i = 0; i < a->ninputs; i++) {
    struct stat st;
    if (stat(a->inputs[i], &st) == 0 && S_ISDIR(st.st_mode)) {
      DIR *d = opendir(a->inputs[i]);
      struct dirent *e;
      while (d && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".ring") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", a->inputs[i], e->d_name);
        salvage_file(path, a->salvage, a->quiet, live) == 0 ? written++ : failed++;
      }
      if (d) closedir(d);
    } else {
      salvage_file(a->inputs[i], a->salvage, a->quiet, live) == 0 ? written++ : failed++;
    }
  }
  failed += salvage_live(live, a->salvage, a->episode, a->quiet);
  cJSON_Delete(live);
  if (written == 0) return EXIT_NO_DUMP;
  return failed ? EXIT_OUTPUT : EXIT_OK;
}

int main(int argc, char **argv) {
  args a;
  int p = parse_args(argc, argv, &a);
  if (p > 0) return EXIT_OK;
  if (p < 0) {
    fprintf(stderr, "try 'nccl-watchdog-analyze --help'\n");
    return EXIT_USAGE;
  }
  if (!a.salvage) return run(&a);
  int rc = salvage(&a);
  /* The plugin's mark that this salvage is under way (autoverdict.c, av_salvage): the verdict
   * waiting for it may go on. */
  if (a.salvage_mark) unlink(a.salvage_mark);
  return rc;
}
