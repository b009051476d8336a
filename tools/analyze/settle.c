/* The automatic verdict's wait for the episode's answers (settle.h). */
#include "settle.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zlib.h>

#include "flightrec/ringfile.h"
#include "load.h"

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

/* A communicator an answer lists, its rank in it and its size. */
typedef struct {
  uint64_t comm;
  int32_t rank, nranks;
} sc_rank;

/* A dump's communicators and its rank in each, from its head's identity (up to max): how many. */
static int head_ranks(const char *head, sc_rank *out, int max) {
  const char *c = strstr(head, "\"identity\":");
  c = c ? strstr(c, "\"comms\":[") : NULL;
  const char *ce = c ? strchr(c, ']') : NULL;
  if (!ce || strncmp(ce, "],\"ranks\":[", 11) != 0) return 0; /* an older plugin's: no ranks */
  const char *r = ce + 11, *re = strchr(r, ']');
  if (!re) return 0; /* cut by the read */
  int n = 0;
  c += 9;
  while (c < ce && r < re && n < max) {
    const char *q = memchr(c, '"', (size_t)(ce - c)), *p = memchr(r, '"', (size_t)(re - r));
    const char *q2 = q ? memchr(q + 1, '"', (size_t)(ce - q - 1)) : NULL;
    const char *p2 = p ? memchr(p + 1, '"', (size_t)(re - p - 1)) : NULL;
    if (!q2 || !p2) break;
    char *end;
    uint64_t id = strtoull(q + 1, NULL, 16);
    long rank = strtol(p + 1, &end, 10), nranks = *end == '/' ? strtol(end + 1, NULL, 10) : 0;
    if (rank >= 0 && nranks > 0 && nranks <= (1L << 24)) out[n++] = (sc_rank){id, (int32_t)rank, (int32_t)nranks};
    c = q2 + 1;
    r = p2 + 1;
  }
  return n;
}

/* Communicators of the answers with ranks not answered yet (0 when it cannot tell). */
static int cl_missing(const closure *cl) {
  int n = 0;
  for (uint32_t c = 0; cl && !cl->full && c < CL_COMMS; c++) n += cl->comm[c] && cl->answered[c] < cl->nranks[c];
  return n;
}

/* What the settle learnt of each dump, kept from one pass to the next: a dump is written whole
 * and never changed (a temporary name, then a link), so a file of the same inode, size and time
 * as one judged already is that one, and its head is not read again. A pass then costs a
 * directory listing and a stat a file, not an open and a read (and an inflate) of every answer
 * of a 100,000-process job every half second. Bounded (SC_FILES files, SC_RANKS of their ranks,
 * about 13 MiB); past it, the other files are read each pass, as they were. */
#define SC_SLOTS (1u << 17)  /* open addressing, filled to half: 65,536 files */
#define SC_FILES (SC_SLOTS / 2)
#define SC_RANKS (1u << 19) /* communicator ranks of the files kept: 524,288 */
#define SC_HEAD_RANKS 256   /* ranks read from one head (a 4 KiB head lists fewer) */
typedef struct {
  uint64_t path; /* the file's directory and name, hashed; 0: a free slot */
  uint64_t ino;
  int64_t size, mtime_ns;
  uint32_t first;  /* its ranks: r[first .. first + nranks) */
  uint16_t nranks;
  uint8_t mine;    /* counted (the episode's answer, or a dump of a process's end) */
} sc_file;
typedef struct {
  sc_file f[SC_SLOTS];
  sc_rank r[SC_RANKS];
  uint32_t nfiles, nranks;
} settle_cache;

static uint64_t sc_path(const char *dir, const char *name, size_t len) {
  return cl_mix(wd_rf_fnv(dir, strlen(dir)) ^ cl_mix(wd_rf_fnv(name, len)));
}

/* The slot of path: the file itself when its inode, size and time are those kept (*hit = 1), else
 * where it goes (NULL: the table is full, or a file by that name was replaced: not kept). */
static sc_file *sc_find(settle_cache *sc, uint64_t path, const struct stat *st, int *hit) {
  *hit = 0;
  if (!sc) return NULL;
  uint32_t k = (uint32_t)path & (SC_SLOTS - 1);
  while (sc->f[k].path && sc->f[k].path != path) k = (k + 1) & (SC_SLOTS - 1);
  sc_file *f = &sc->f[k];
  if (!f->path) return sc->nfiles < SC_FILES ? f : NULL;
  int64_t mt = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
  *hit = f->ino == (uint64_t)st->st_ino && f->size == (int64_t)st->st_size && f->mtime_ns == mt;
  return *hit ? f : NULL;
}

static void sc_keep(settle_cache *sc, sc_file *f, uint64_t path, const struct stat *st, int mine,
                    const sc_rank *r, int nr) {
  if (!sc || !f || sc->nranks + (uint32_t)nr > SC_RANKS) return;
  f->path = path;
  f->ino = (uint64_t)st->st_ino;
  f->size = (int64_t)st->st_size;
  f->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
  f->mine = (uint8_t)mine;
  f->first = sc->nranks;
  f->nranks = (uint16_t)nr;
  memcpy(&sc->r[sc->nranks], r, (size_t)nr * sizeof *r);
  sc->nranks += (uint32_t)nr;
  sc->nfiles++;
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
                        const held_set *hold, closure *cl, settle_cache *sc) {
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
               strncmp(e->d_name, "verdict-", 8) != 0 && strncmp(e->d_name, "trigger-", 8) != 0;
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
        /* Its head, read once (once a settle, where it is kept): the episode it answers, its
         * communicators, its ranks in them. */
        uint64_t path = sc_path(dir, e->d_name, len);
        int hit = 0;
        sc_file *f = answer || live || final ? sc_find(sc, path, &st, &hit) : NULL;
        sc_rank own[SC_HEAD_RANKS];
        const sc_rank *ranks = own;
        int nranks = 0;
        if (f && hit) {
          mine = f->mine;
          ranks = &sc->r[f->first];
          nranks = f->nranks;
        } else {
          char head[4096] = "";
          int have = answer || live || final ? dump_head(dirfd(d), e->d_name, len, head, sizeof head) : 0;
          if (answer) mine = answers_episode(head, episode);
          else if (live) mine = copy_answers_episode(e->d_name, dash, episode);
          else mine = final && of_incarnation(head, have, ids, nids);
          nranks = have ? head_ranks(head, own, SC_HEAD_RANKS) : 0;
          /* An unreadable head is read again next pass (a file that went, or a full disk's). */
          if (have) sc_keep(sc, f, path, &st, mine, own, nranks);
        }
        /* The process: its host and the pid, the component before the one before the kind (a
         * folder may hold several hosts' dumps, whose pids may be alike). */
        size_t at = dash > 1 ? dash - 2 : 0;
        while (at > 0 && e->d_name[at] != '-') at--;
        if (mine && at && pid_before(e->d_name, at) > 0 && pids && npids < COUNT_PIDS) {
          uint64_t key = wd_rf_fnv(e->d_name, at);
          if (held(hold, key)) continue;
          for (int r = 0; r < nranks; r++) cl_add(cl, key, ranks[r].comm, ranks[r].rank, ranks[r].nranks);
          size_t k = 0;
          while (k < npids && pids[k] != key) k++;
          if (k == npids) pids[npids++] = key;
          mine = 0; /* counted once, below */
        }
      }
      n += mine;
    } else if (depth < 1 && ok && S_ISDIR(st.st_mode) && strcmp(e->d_name, "triggers") != 0) {
      char sub[4096];
      snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
      n += count_dumps(sub, depth + 1, since, episode, ids, nids, hold, cl, sc);
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
static int salvage_pending(const wd_az_settle_spec *a, held_set *hold) {
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
void wd_az_settle(const wd_az_settle_spec *a, double read_until) {
  double start = wd_az_now_s(), until = start + a->wait_s;
  if (read_until > 0 && read_until < until) until = read_until; /* the rest is for reading */
  /* While processes are missing, a salvage under way is waited for past the settle, by as long
   * again (at least 10 s), within half the time left for reading: a mark whose salvage and
   * poller both died (a node's teardown) delays the verdict, never stops it. */
  double hard = until + (a->wait_s > 10 ? a->wait_s : 10);
  if (read_until > 0 && hard > start + (read_until - start) / 2) hard = start + (read_until - start) / 2;
  if (hard < until) hard = until;
  closure *cl = a->episode >= 0 ? malloc(sizeof *cl) : NULL;
  settle_cache *sc = a->episode >= 0 ? calloc(1, sizeof *sc) : NULL; /* pages touched as filled */
  for (;;) {
    held_set hold;
    int marks = salvage_pending(a, &hold);
    long n = 0;
    if (cl) memset(cl, 0, sizeof *cl);
    for (int i = 0; i < a->ninputs; i++)
      n += count_dumps(a->inputs[i], 0, a->since, a->episode, a->comms, a->ncomms, &hold, cl, sc);
    int unanswered = cl_missing(cl);
    double t = wd_az_now_s();
    /* Every process in: what a salvage writes would be one of them. */
    int in = n >= a->want && !unanswered;
    int pending = !in && t >= until && t < hard ? marks : 0;
    if (in || (t >= until && !pending)) {
      fprintf(stderr, "nccl-watchdog-analyze: %ld of %ld dumps", n, a->want);
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
      free(sc);
      return;
    }
    double left = (pending ? hard : until) - t, step = left < 0.5 ? left : 0.5;
    struct timespec ts = {0, step > 0 ? (long)(step * 1e9) : 0};
    nanosleep(&ts, NULL);
  }
}

