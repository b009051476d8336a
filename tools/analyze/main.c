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
#include <zlib.h>

#include <time.h>

#include "base/host.h"
#include "flightrec/ringfile.h"
#include "job.h"
#include "incarnation.h"
#include "load.h"
#include "ringfile.h"
#include "report.h"
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

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
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

static int ends_with(const char *s, size_t len, const char *tail) {
  size_t n = strlen(tail);
  return len >= n && !strcmp(s + len - n, tail);
}

/* A dump's first few KiB (render.c writes identity near the top), read through zlib for a
 * .json.gz: what the settle reads of each file, once a pass. 0 when it cannot be read. */
static int dump_head(int dfd, const char *name, size_t len, char *buf, size_t cap) {
  int fd = wd_az_open_nolink(dfd, name, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return 0;
  int n;
  if (ends_with(name, len, ".gz")) {
    gzFile z = gzdopen(fd, "rb"); /* closes fd */
    if (!z) {
      close(fd);
      return 0;
    }
    n = gzread(z, buf, (unsigned)cap - 1);
    gzclose(z);
  } else {
    n = (int)read(fd, buf, cap - 1);
    close(fd);
  }
  if (n <= 0) return 0;
  buf[n] = '\0';
  return n;
}

/* Whether a stall or peer dump (its head) answers episode k: its identity's jobEpisode. */
static int answers_episode(const char *head, long k) {
  const char *e = strstr(head, "\"jobEpisode\":");
  if (!e) return 0;
  char *end;
  long v = strtol(e + 13, &end, 10);
  return end != e + 13 && v == k;
}

/* Whether a dump of a process's end belongs to the episode's incarnation: its identity names
 * one of the episode's communicators (render.c writes identity.comms in the first KiB). A dump
 * that names none (an older plugin's) is counted, as before. */
static int of_incarnation(const char *head, int have, const uint64_t *ids, int nids) {
  if (!nids) return 1;
  if (!have) return 0;
  const char *c = strstr(head, "\"identity\":");
  c = c ? strstr(c, "\"comms\":[") : NULL;
  if (!c) return 1;
  for (c += 9; *c && *c != ']';) {
    const char *q = strchr(c, '"');
    if (!q) break;
    char *end;
    unsigned long long v = strtoull(q + 1, &end, 16);
    for (int i = 0; i < nids; i++)
      if (ids[i] == (uint64_t)v) return 1;
    c = strchr(end, '"');
    if (!c) break;
    c++;
  }
  return 0;
}

/* Whether a node's copy of a running process's ring files (<host>-<pid>-e<K>-live.json, kind at
 * name[dash]) stands in for a process's answer to episode k. */
static int copy_answers_episode(const char *name, size_t dash, long k) {
  size_t at = dash > 1 ? dash - 2 : 0; /* back from "-live" to the "-e" before it */
  while (at > 0 && name[at] != '-') at--;
  if (name[at] != '-' || name[at + 1] != 'e') return 0;
  char *end;
  long v = strtol(name + at + 2, &end, 10);
  return end == name + dash - 1 && v == k;
}

/* The pid in name's component that ends at name[end] (a '-'), -1 when it is not a number. */
static long pid_before(const char *name, size_t end) {
  size_t at = end;
  while (at > 0 && name[at - 1] != '-') at--;
  if (at == 0 || at == end) return -1;
  char *stop;
  long v = strtol(name + at, &stop, 10);
  return stop == name + end ? v : -1;
}

#define COUNT_PIDS 1024 /* processes of one host folder told apart (more: counted as files) */

/* Processes (<host>-<pid>, hashed) whose salvage is under way: their files count once it is done. */
typedef struct {
  uint64_t key[64];
  int n, cut; /* cut: more were listed, counted as they come (the settle's line says so) */
} held_set;

static int held(const held_set *h, uint64_t key) {
  for (int i = 0; h && i < h->n; i++)
    if (h->key[i] == key) return 1;
  return 0;
}

/* The ranks the episode's answers name (--settle --episode): each communicator an answer's
 * identity lists (comms, and ranks beside them: "rank/nranks", render.c put_identity), its size,
 * and how many of its ranks answered, each (process, communicator, rank) once. The launcher's
 * WORLD_SIZE may count fewer processes than the job has (torchft: a torchrun per replica group,
 * the quorum's communicator across them); a communicator with ranks unanswered keeps the settle
 * waiting, within its time. Bounded: past a quarter of its tables (a huge job) it says nothing
 * and the count alone decides, as before. */
#define CL_COMMS (1u << 16) /* communicator slots (open addressing): 16,384 communicators */
#define CL_SEEN (1u << 20)  /* (process, communicator, rank) slots: 262,144, a 65,536-process job's */
typedef struct {
  uint64_t comm[CL_COMMS];
  uint32_t nranks[CL_COMMS], answered[CL_COMMS];
  uint64_t seen[CL_SEEN];
  uint32_t ncomms, nseen;
  int full;
} closure;

static uint64_t cl_mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h ? h : 1;
}

static void cl_add(closure *cl, uint64_t proc, uint64_t comm, long rank, long nranks) {
  if (!cl || cl->full || !comm || nranks <= 0 || nranks > (1L << 24) || rank < 0 || rank >= nranks) return;
  if (cl->ncomms >= CL_COMMS / 4 || cl->nseen >= CL_SEEN / 4) {
    cl->full = 1;
    return;
  }
  uint32_t c = (uint32_t)cl_mix(comm) & (CL_COMMS - 1);
  while (cl->comm[c] && cl->comm[c] != comm) c = (c + 1) & (CL_COMMS - 1);
  if (!cl->comm[c]) {
    cl->comm[c] = comm;
    cl->nranks[c] = (uint32_t)nranks;
    cl->ncomms++;
  }
  uint64_t key = cl_mix(proc ^ cl_mix(comm ^ cl_mix((uint64_t)rank)));
  uint32_t k = (uint32_t)key & (CL_SEEN - 1);
  while (cl->seen[k] && cl->seen[k] != key) k = (k + 1) & (CL_SEEN - 1);
  if (cl->seen[k]) return;
  cl->seen[k] = key;
  cl->nseen++;
  cl->answered[c]++;
}

/* A counted answer's identity: its communicators and its rank in each, from the file's head. */
static void cl_note(closure *cl, uint64_t proc, const char *head) {
  if (!cl || cl->full) return;
  const char *c = strstr(head, "\"identity\":");
  c = c ? strstr(c, "\"comms\":[") : NULL;
  const char *ce = c ? strchr(c, ']') : NULL;
  if (!ce || strncmp(ce, "],\"ranks\":[", 11) != 0) return; /* an older plugin's: no ranks */
  const char *r = ce + 11, *re = strchr(r, ']');
  if (!re) return; /* cut by the read */
  c += 9;
  while (c < ce && r < re) {
    const char *q = memchr(c, '"', (size_t)(ce - c)), *p = memchr(r, '"', (size_t)(re - r));
    const char *q2 = q ? memchr(q + 1, '"', (size_t)(ce - q - 1)) : NULL;
    const char *p2 = p ? memchr(p + 1, '"', (size_t)(re - p - 1)) : NULL;
    if (!q2 || !p2) return;
    char *end;
    uint64_t id = strtoull(q + 1, NULL, 16);
    long rank = strtol(p + 1, &end, 10), nranks = *end == '/' ? strtol(end + 1, NULL, 10) : 0;
    cl_add(cl, proc, id, rank, nranks);
    c = q2 + 1;
    r = p2 + 1;
  }
}

/* Communicators of the answers with ranks not answered yet (0 when it cannot tell). */
static int cl_missing(const closure *cl) {
  int n = 0;
  for (uint32_t c = 0; cl && !cl->full && c < CL_COMMS; c++) n += cl->comm[c] && cl->answered[c] < cl->nranks[c];
  return n;
}

/* Dump files under a directory and its host subdirectories (<dir>/<host>/<file>). episode >= 0:
 * only that episode's answers (its stall and peer dumps, a node's copy of a silent process's ring
 * files made for it) and dumps of a process's end (postmortem, term, sigabrt, abort); never a
 * snapshot or another episode's dump. Those are counted by process, not by file: every name
 * is <host>-<pid>-<seq, commId or e<K>>-<kind>, and a process that answered and then died, or
 * died with several communicators (a post-mortem dump each), or was copied by its node while its
 * watchdog was merely late, is one of the processes the verdict waits for, not several. A process
 * in hold is not counted yet: its salvage writes a dump per communicator, and the first of them
 * must not end the settle before the others are there. */
static long count_dumps(const char *dir, int depth, long since, long episode, const uint64_t *ids, int nids,
                        const held_set *hold, closure *cl) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  long n = 0;
  uint64_t *pids = episode >= 0 ? malloc(COUNT_PIDS * sizeof(uint64_t)) : NULL;
  size_t npids = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    size_t len = strlen(e->d_name);
    /* Dumps the processes wrote (not ring files: those of live processes are there too). */
    int dump = ((len > 5 && !strcmp(e->d_name + len - 5, ".json")) ||
                (len > 8 && !strcmp(e->d_name + len - 8, ".json.gz"))) &&
               strncmp(e->d_name, "verdict-", 8) && strncmp(e->d_name, "trigger-", 8);
    struct stat st;
    int ok = fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (dump) {
      /* Only the job's own: regular files of the analyzing user (the job's, for the automatic
       * verdict), never links, FIFOs or another member's planted files. */
      int mine = ok && S_ISREG(st.st_mode) && st.st_uid == geteuid() && (!since || st.st_mtime >= since);
      if (mine && episode >= 0) {
        size_t base = len - (ends_with(e->d_name, len, ".gz") ? 8 : 5); /* without .json[.gz] */
        char kind[16] = "";
        size_t dash = base;
        while (dash > 0 && e->d_name[dash - 1] != '-') dash--;
        if (dash > 0 && base - dash < sizeof kind) memcpy(kind, e->d_name + dash, base - dash);
        int answer = !strcmp(kind, "stall") || !strcmp(kind, "peer");
        int live = !strcmp(kind, "live"); /* a node's copy of a silent process's ring files */
        int final = !answer && !live && wd_az_reason_is_final(kind);
        /* Its head, read once: the episode it answers, its communicators, its ranks in them. */
        char head[4096] = "";
        int have = answer || live || final ? dump_head(dirfd(d), e->d_name, len, head, sizeof head) : 0;
        if (answer) mine = answers_episode(head, episode);
        else if (live) mine = copy_answers_episode(e->d_name, dash, episode);
        else mine = final && of_incarnation(head, have, ids, nids);
        /* The process: its host and the pid, the component before the one before the kind (a
         * folder may hold several hosts' dumps, whose pids may be alike). */
        size_t at = dash > 1 ? dash - 2 : 0;
        while (at > 0 && e->d_name[at] != '-') at--;
        if (mine && at && pid_before(e->d_name, at) > 0 && pids && npids < COUNT_PIDS) {
          uint64_t key = wd_rf_fnv(e->d_name, at);
          if (held(hold, key)) continue;
          cl_note(cl, key, head);
          size_t k = 0;
          while (k < npids && pids[k] != key) k++;
          if (k == npids) pids[npids++] = key;
          mine = 0; /* counted once, below */
        }
      }
      n += mine;
    } else if (depth < 1 && ok && S_ISDIR(st.st_mode) && strcmp(e->d_name, "triggers")) {
      char sub[4096];
      snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
      n += count_dumps(sub, depth + 1, since, episode, ids, nids, hold, cl);
    }
  }
  closedir(d);
  free(pids);
  return n + (long)npids;
}

/* Salvages of dead processes' ring files under way for the episode: salvage-<k>-<host>-<pid>.pending
 * in an input directory (autoverdict.c, av_salvage), regular files of this user, from the last
 * ten minutes. A node's poller makes one before its salvage starts and removes it once the
 * post-mortems are written: a rank SIGKILLed on a loaded node is then judged by its ring file,
 * not taken for one that left nothing. Each mark lists the processes it salvages, one
 * <host>-<pid> a line (read: 4 KiB at most, the first 64 processes of all marks): held, they are
 * not counted until their mark is gone. */
static int salvage_pending(const args *a, held_set *hold) {
  hold->n = hold->cut = 0;
  if (a->episode < 0) return 0;
  char prefix[40];
  int plen = snprintf(prefix, sizeof prefix, "salvage-%ld-", a->episode);
  time_t oldest = time(NULL) - 600;
  int n = 0;
  for (int i = 0; i < a->ninputs; i++) {
    DIR *d = opendir(a->inputs[i]);
    if (!d) continue;
    struct dirent *e;
    struct stat st;
    while ((e = readdir(d)) != NULL) {
      if (strncmp(e->d_name, prefix, (size_t)plen) != 0 || !ends_with(e->d_name, strlen(e->d_name), ".pending"))
        continue;
      int fd = wd_az_open_nolink(dirfd(d), e->d_name, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
      if (fd < 0) continue;
      char text[4097];
      ssize_t got = -1;
      if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && st.st_mtime >= oldest) {
        n++;
        got = read(fd, text, sizeof text - 1);
      }
      close(fd);
      text[got > 0 ? got : 0] = '\0';
      for (char *line = text, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) break; /* a line cut by the read: not a process */
        uint64_t key = nl > line ? wd_rf_fnv(line, (size_t)(nl - line)) : 0;
        if (!key || held(hold, key)) continue; /* a process is listed once per ring file */
        if (hold->n < (int)(sizeof hold->key / sizeof hold->key[0])) hold->key[hold->n++] = key;
        else hold->cut = 1;
      }
    }
    closedir(d);
  }
  return n;
}

/* --settle: the plugin's automatic verdict waits here for the episode's dumps, out of the job's
 * processes (which may be ending: PyTorch's teardown), and for the salvages under way. */
static void settle(const args *a, double read_until) {
  double start = now_s(), until = start + a->settle_s;
  if (read_until > 0 && read_until < until) until = read_until; /* the rest is for reading */
  /* While processes are missing, a salvage under way is waited for past the settle, by as long
   * again (at least 10 s), within half the time left for reading: a mark whose salvage and
   * poller both died (a node's teardown) delays the verdict, never stops it. */
  double hard = until + (a->settle_s > 10 ? a->settle_s : 10);
  if (read_until > 0 && hard > start + (read_until - start) / 2) hard = start + (read_until - start) / 2;
  if (hard < until) hard = until;
  closure *cl = a->episode >= 0 ? malloc(sizeof *cl) : NULL;
  for (;;) {
    held_set hold;
    int marks = salvage_pending(a, &hold);
    long n = 0;
    if (cl) memset(cl, 0, sizeof *cl);
    for (int i = 0; i < a->ninputs; i++)
      n += count_dumps(a->inputs[i], 0, a->settle_since, a->episode, a->settle_comms, a->nsettle_comms, &hold, cl);
    int unanswered = cl_missing(cl);
    double t = now_s();
    /* Every process in: what a salvage writes would be one of them. */
    int in = n >= a->settle_n && !unanswered;
    int pending = !in && t >= until && t < hard ? marks : 0;
    if (in || (t >= until && !pending)) {
      fprintf(stderr, "nccl-watchdog-analyze: %ld of %ld dumps", n, a->settle_n);
      if (unanswered)
        fprintf(stderr, "; %d communicator(s) the answers name with ranks that did not answer", unanswered);
      if (a->episode >= 0 && (!cl || cl->full))
        fprintf(stderr, "; more than the settle checks rank by rank (%u communicators, %u ranks): the count "
                "alone decided", CL_COMMS / 4, CL_SEEN / 4);
      if (hold.cut)
        fprintf(stderr, "; over %zu processes under salvage: the others counted as their dumps came",
                sizeof hold.key / sizeof hold.key[0]);
      fputc('\n', stderr);
      free(cl);
      return;
    }
    double left = (pending ? hard : until) - t, step = left < 0.5 ? left : 0.5;
    struct timespec ts = {0, step > 0 ? (long)(step * 1e9) : 0};
    nanosleep(&ts, NULL);
  }
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
    read_until = now_s() + 0.9 * (double)deadline;
    wd_az_set_read_until(read_until, (unsigned)deadline);
  }
  wd_az_set_memory(a->max_memory_mib < 0 ? default_memory() : (size_t)a->max_memory_mib << 20);
  if (a->settle_n) settle(a, read_until);
  wd_az_set set;
  memset(&set, 0, sizeof(set));
  double t0 = now_s();
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
  double t1 = now_s();
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
  double t2 = now_s(), t3 = t2;
  if (a->timings) { /* the reports compute it again: once more here, to time it alone */
    wd_az_job job;
    wd_az_job_verdict(&res, &job);
    t3 = now_s();
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
            t1 - t0, t2 - t1, t3 - t2, now_s() - t3, set.ndumps, res.ncomms);
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
