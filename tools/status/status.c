/*
 * nccl-watchdog-status: one line per rank of this node, from the live metrics files the plugin
 * rewrites every NCCL_WATCHDOG_METRICS interval (docs/operations.md): what each rank is in and
 * how long since its communicators progressed. For a health check, a scheduler's probe, or
 * on-call's first look before any dump exists.
 */
#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define MAX_COMMS 64

typedef struct comm {
  char id[24], name[64];
  int rank, nranks;
  double inflight, since;
} comm;

typedef struct proc {
  char host[64], file[1024];
  int pid, rank;
  double updated, interval, stalls, dumps;
  int ncomms;
  comm comms[MAX_COMMS];
} proc;

/* The value of label key in a "{a=\"x\",b=\"y\"}" string (unescaped), "" when absent. */
static void label(const char *labels, const char *key, char *out, size_t len) {
  char pat[64];
  snprintf(pat, sizeof pat, "%s=\"", key);
  out[0] = '\0';
  for (const char *p = labels; (p = strstr(p, pat)) != NULL; p++) {
    if (p != labels && p[-1] != '{' && p[-1] != ',') continue;
    p += strlen(pat);
    size_t o = 0;
    for (; *p && *p != '"' && o + 1 < len; p++) {
      if (*p == '\\' && p[1]) p++;
      out[o++] = *p;
    }
    out[o] = '\0';
    return;
  }
}

static comm *comm_of(proc *pr, const char *labels) {
  char id[24];
  label(labels, "comm", id, sizeof id);
  if (!id[0]) return NULL;
  for (int i = 0; i < pr->ncomms; i++)
    if (!strcmp(pr->comms[i].id, id)) return &pr->comms[i];
  if (pr->ncomms == MAX_COMMS) return NULL;
  comm *c = &pr->comms[pr->ncomms++];
  memset(c, 0, sizeof *c);
  snprintf(c->id, sizeof c->id, "%s", id);
  label(labels, "comm_name", c->name, sizeof c->name);
  char v[16];
  label(labels, "comm_rank", v, sizeof v);
  c->rank = atoi(v);
  label(labels, "nranks", v, sizeof v);
  c->nranks = atoi(v);
  return c;
}

static int load(const char *path, proc *pr) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  memset(pr, 0, sizeof *pr);
  pr->rank = -1;
  snprintf(pr->file, sizeof pr->file, "%s", path);
  char line[2048];
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    char *open = strchr(line, '{'), *close = open ? strrchr(line, '}') : NULL;
    if (!open || !close) continue;
    *open = '\0';
    *close = '\0';
    const char *name = line, *labels = open + 1;
    double v = strtod(close + 1, NULL);
    if (!pr->host[0]) {
      char tmp[16];
      label(labels, "host", pr->host, sizeof pr->host);
      label(labels, "pid", tmp, sizeof tmp);
      pr->pid = atoi(tmp);
      label(labels, "rank", tmp, sizeof tmp);
      pr->rank = tmp[0] ? atoi(tmp) : -1;
    }
    comm *c;
    if (!strcmp(name, "nccl_watchdog_last_update_timestamp_seconds")) pr->updated = v;
    else if (!strcmp(name, "nccl_watchdog_metrics_interval_seconds")) pr->interval = v;
    else if (!strcmp(name, "nccl_watchdog_stalls_detected_total")) pr->stalls = v;
    else if (!strcmp(name, "nccl_watchdog_dumps_written_total")) pr->dumps = v;
    else if (!strcmp(name, "nccl_watchdog_ops_inflight") && (c = comm_of(pr, labels))) c->inflight = v;
    else if (!strcmp(name, "nccl_watchdog_seconds_since_progress") && (c = comm_of(pr, labels)))
      c->since = v;
  }
  fclose(f);
  return pr->host[0] ? 0 : -1;
}

static int cmp_proc(const void *a, const void *b) {
  const proc *x = a, *y = b;
  if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
  return x->pid - y->pid;
}

static void usage(FILE *f) {
  fprintf(f, "usage: nccl-watchdog-status [--slow=SECONDS] [DIR...]\n"
             "  one line per process of this node from the plugin's live metrics files\n"
             "  (*.prom in DIR, default /dev/shm/nccl-watchdog-<uid>, the default\n"
             "  NCCL_WATCHDOG_METRICS_DIR)\n"
             "  --slow=SECONDS  an operation in flight this long without progress is 'waiting'\n"
             "                  (default 10)\n"
             "  -h, --help; -V, --version\n"
             "exit: 0 every process healthy, 1 some waiting or stale, 2 usage, 3 nothing found\n");
}

int main(int argc, char **argv) {
  static const struct option longopts[] = {{"slow", required_argument, NULL, 's'},
                                           {"help", no_argument, NULL, 'h'},
                                           {"version", no_argument, NULL, 'V'},
                                           {NULL, 0, NULL, 0}};
  double slow = 10;
  int c;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
    char *end;
    switch (c) {
    case 's':
      slow = strtod(optarg, &end);
      if (*end || end == optarg || slow < 0) {
        fprintf(stderr, "nccl-watchdog-status: --slow=%s: expected seconds\n", optarg);
        return 2;
      }
      break;
    case 'h': usage(stdout); return 0;
    case 'V': printf("nccl-watchdog-status %s\n", WD_VERSION); return 0;
    default:
      fprintf(stderr, "nccl-watchdog-status: %s: unknown option or missing value\n", argv[optind - 1]);
      usage(stderr);
      return 2;
    }
  }
  char defdir[64];
  snprintf(defdir, sizeof defdir, "/dev/shm/nccl-watchdog-%u", (unsigned)geteuid());
  proc *procs = NULL;
  size_t n = 0, cap = 0;
  for (int i = optind; i < argc || (i == optind && optind == argc); i++) {
    const char *dir = i < argc ? argv[i] : defdir;
    DIR *d = opendir(dir);
    if (!d) {
      perror(dir);
      continue;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
      size_t l = strlen(e->d_name);
      if (l < 6 || strcmp(e->d_name + l - 5, ".prom") != 0) continue;
      if (n == cap) {
        cap = cap ? 2 * cap : 16;
        proc *np = realloc(procs, cap * sizeof(*np));
        if (!np) break;
        procs = np;
      }
      char path[1024];
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      if (load(path, &procs[n]) == 0) n++;
    }
    closedir(d);
    if (i >= argc) break;
  }
  if (!n) {
    fprintf(stderr, "nccl-watchdog-status: no metrics file found\n");
    free(procs);
    return 3;
  }
  qsort(procs, n, sizeof(*procs), cmp_proc);
  struct timeval tv;
  gettimeofday(&tv, NULL);
  double now = (double)tv.tv_sec + tv.tv_usec / 1e6;
  int bad = 0;
  printf("%-6s %-16s %-8s %-9s %-8s %s\n", "RANK", "HOST", "PID", "UPDATED", "STATE", "COMMUNICATORS");
  for (size_t i = 0; i < n; i++) {
    const proc *p = &procs[i];
    double age = now - p->updated;
    const char *state = "idle";
    for (int k = 0; k < p->ncomms; k++)
      if (p->comms[k].inflight > 0) state = p->comms[k].since >= slow ? "waiting" : "busy";
    if (p->interval > 0 && age > 3 * p->interval) state = "stale";
    bad |= !strcmp(state, "waiting") || !strcmp(state, "stale");
    char r[16], up[16];
    snprintf(r, sizeof r, p->rank >= 0 ? "%d" : "-", p->rank);
    snprintf(up, sizeof up, "%.1fs ago", age < 0 ? 0 : age);
    printf("%-6s %-16s %-8d %-9s %-8s", r, p->host, p->pid, up, state);
    for (int k = 0; k < p->ncomms; k++) {
      const comm *m = &p->comms[k];
      if (m->inflight > 0)
        printf("%s %s (rank %d/%d): %.0f in flight, %.1f s without progress", k ? ";" : "",
               m->name[0] ? m->name : m->id, m->rank, m->nranks, m->inflight, m->since);
      else
        printf("%s %s (rank %d/%d): idle %.1f s", k ? ";" : "", m->name[0] ? m->name : m->id,
               m->rank, m->nranks, m->since);
    }
    if (p->stalls > 0) printf("; %.0f stall(s), %.0f dump(s)", p->stalls, p->dumps);
    putchar('\n');
  }
  free(procs);
  return bad ? 1 : 0;
}
