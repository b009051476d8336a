/* The root cause across communicators (job.h). */
#include "job.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* For each GPU of each process: the hung communicator it waits in, and its rank there. A process
 * may hold several GPUs, each a rank of its communicators (JAX, TensorFlow, nccl-tests -g), so a
 * chain follows a rank to what its own GPU waits in. A process may leave several dumps (a stall
 * dump, then an abort dump at finalize holding fewer communicators), so dumps are folded to
 * their process, (host, pid), first. Built once, looked up by binary search. */
typedef struct gpu_wait {
  uint32_t proc;
  int dev, order;
  const wd_az_comm *comm;
  const wd_az_crank *who;
} gpu_wait;

typedef struct wait_index {
  uint32_t *proc; /* dump index -> the first dump index of the same process */
  gpu_wait *w;
  size_t nw;
} wait_index;

static const wd_az_set *g_sort_set;

/* One process: its host name and pid, and, where the dump says, its machine's boot and its start
 * (two containers or cloned nodes with one host name run processes with one pid: not one). */
static int cmp_proc(const wd_az_dump *x, const wd_az_dump *y) {
  if (x->host != y->host) return x->host < y->host ? -1 : 1;
  if (x->pid != y->pid) return x->pid < y->pid ? -1 : 1;
  if (x->boot_id != y->boot_id) return x->boot_id < y->boot_id ? -1 : 1;
  if (x->proc_start_ns != y->proc_start_ns) return x->proc_start_ns < y->proc_start_ns ? -1 : 1;
  return 0;
}

static int cmp_dump_proc(const void *a, const void *b) {
  int c = cmp_proc(&g_sort_set->dumps[*(const uint32_t *)a], &g_sort_set->dumps[*(const uint32_t *)b]);
  if (c) return c;
  return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

static int cmp_gpu_wait(const void *a, const void *b) {
  const gpu_wait *x = a, *y = b;
  if (x->proc != y->proc) return x->proc < y->proc ? -1 : 1;
  if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
  return x->order - y->order;
}

static int index_build(const wd_az_result *res, wait_index *ix) {
  size_t n = res->set->ndumps + 1, nw = 1;
  for (size_t i = 0; i < res->ncomms; i++)
    if (res->comms[i].verdict == WD_AZ_HANG) nw += (size_t)res->comms[i].nwaiting;
  ix->proc = calloc(n, sizeof(*ix->proc));
  ix->w = calloc(nw, sizeof(*ix->w));
  ix->nw = 0;
  uint32_t *order = calloc(n, sizeof(*order));
  if (!ix->proc || !ix->w || !order) {
    free(order);
    return -1;
  }
  for (uint32_t d = 0; d < res->set->ndumps; d++) order[d] = d;
  g_sort_set = res->set;
  qsort(order, res->set->ndumps, sizeof(*order), cmp_dump_proc);
  for (size_t i = 0; i < res->set->ndumps; i++) {
    const wd_az_dump *x = &res->set->dumps[order[i]];
    const wd_az_dump *y = i ? &res->set->dumps[order[i - 1]] : NULL;
    ix->proc[order[i]] = y && !cmp_proc(x, y) ? ix->proc[order[i - 1]] : order[i];
  }
  free(order);
  for (size_t i = 0; i < res->ncomms; i++) {
    const wd_az_comm *c = &res->comms[i];
    if (c->verdict != WD_AZ_HANG) continue;
    for (int k = 0; k < c->nwaiting; k++) {
      int r = c->waiting[k];
      const wd_az_crank *cr = r >= 0 && r < c->nranks ? c->by_rank[r] : NULL;
      if (!cr || cr->dump >= res->set->ndumps) continue;
      ix->w[ix->nw] = (gpu_wait){ix->proc[cr->dump], cr->cuda_dev, (int)ix->nw, c, cr};
      ix->nw++;
    }
  }
  /* The first hung communicator (in the comms' order) a GPU waits in is the one kept. */
  qsort(ix->w, ix->nw, sizeof(*ix->w), cmp_gpu_wait);
  size_t k = 0;
  for (size_t i = 0; i < ix->nw; i++)
    if (!k || ix->w[i].proc != ix->w[k - 1].proc || ix->w[i].dev != ix->w[k - 1].dev) ix->w[k++] = ix->w[i];
  ix->nw = k;
  return 0;
}

static void index_free(wait_index *ix) {
  free(ix->proc);
  free(ix->w);
}

/* The hung communicator rank cr's GPU (its process's, same device) waits in, NULL when none. */
static const wd_az_comm *waiting_in(const wait_index *ix, const wd_az_crank *cr, const wd_az_crank **who) {
  gpu_wait key = {ix->proc[cr->dump], cr->cuda_dev, -1, NULL, NULL};
  size_t lo = 0, hi = ix->nw;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = cmp_gpu_wait(&ix->w[mid], &key);
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  *who = NULL;
  if (lo >= ix->nw || ix->w[lo].proc != key.proc || ix->w[lo].dev != key.dev) return NULL;
  *who = ix->w[lo].who;
  return ix->w[lo].comm;
}

/* A GPU of a process, for telling a cycle from a chain through one process's GPUs. */
static uint64_t gpu_key(const wait_index *ix, const wd_az_crank *cr) {
  return (uint64_t)ix->proc[cr->dump] << 16 | (uint16_t)(cr->cuda_dev + 1);
}

/* The culprit to follow: one that is itself waiting in another hung communicator explains the
 * others (it leads on to the root), else the first culprit. */
static const wd_az_suspect *next_culprit(const wait_index *ix, const wd_az_comm *c) {
  const wd_az_suspect *first = NULL;
  for (int i = 0; i < c->nsus; i++) {
    const wd_az_suspect *s = &c->sus[i];
    if (!s->culprit) continue;
    if (!first) first = s;
    const wd_az_crank *who;
    const wd_az_comm *other = s->cr ? waiting_in(ix, s->cr, &who) : NULL;
    if (other && other != c) return s;
  }
  return first ? first : c->nsus ? &c->sus[0] : NULL;
}

static void who_text(const wd_az_result *res, const wd_az_comm *c, const wd_az_suspect *s,
                     char *out, size_t len) {
  const char *name = wd_az_s(c->name) && *wd_az_s(c->name) ? wd_az_s(c->name) : "?";
  if (!s->cr) {
    wd_az_fmt(out, len, "rank %d of %s (no dump)", s->rank, name);
    return;
  }
  char id[256];
  wd_az_ident_text(res->set, s->cr, id, sizeof id);
  wd_az_fmt(out, len, "rank %d of %s (%s)", s->rank, name, id);
}

/* Several processes of one host waiting on the network (dead links, network stalls) in hung
 * communicators: that host's network is the likelier cause than any one rank. */
static void follow(const wd_az_result *res, const wait_index *ix, wd_az_job *job);

/* A machine is its host name and its boot (two machines may share a name). */
typedef struct host_pid {
  wd_az_str host, boot;
  int pid;
} host_pid;

static int cmp_host_pid(const void *a, const void *b) {
  const host_pid *x = a, *y = b;
  if (x->host != y->host) return x->host < y->host ? -1 : 1;
  if (x->boot != y->boot) return x->boot < y->boot ? -1 : 1;
  return (x->pid > y->pid) - (x->pid < y->pid);
}

static int network_culprit(const wd_az_suspect *s) {
  return s->culprit && s->cr && (s->reason == WD_AZ_DEAD_LINK || s->reason == WD_AZ_NETWORK_STALL);
}

static void host_verdict(const wd_az_result *res, wd_az_job *job) {
  size_t n = 0;
  for (size_t i = 0; i < res->ncomms; i++)
    for (int k = 0; res->comms[i].verdict == WD_AZ_HANG && k < res->comms[i].nsus; k++)
      n += network_culprit(&res->comms[i].sus[k]);
  if (n < 2) return;
  host_pid *v = malloc(n * sizeof(*v));
  if (!v) return;
  n = 0;
  for (size_t i = 0; i < res->ncomms; i++)
    for (int k = 0; res->comms[i].verdict == WD_AZ_HANG && k < res->comms[i].nsus; k++) {
      const wd_az_suspect *s = &res->comms[i].sus[k];
      if (!network_culprit(s)) continue;
      const wd_az_dump *d = wd_az_dump_of(res->set, s->cr);
      v[n++] = (host_pid){d->host, d->boot_id, d->pid};
    }
  qsort(v, n, sizeof(*v), cmp_host_pid);
  wd_az_str best = 0;
  int best_n = 0;
  for (size_t i = 0; i < n;) { /* distinct processes per host */
    size_t j = i;
    int procs = 0;
    for (; j < n && v[j].host == v[i].host && v[j].boot == v[i].boot; j++) procs += j == i || v[j].pid != v[j - 1].pid;
    if (procs > best_n) best = v[i].host, best_n = procs;
    i = j;
  }
  free(v);
  if (best_n < 2) return;
  job->host = best;
  job->host_nprocs = best_n;
  snprintf(job->host_line, sizeof job->host_line,
           "HOST: %d processes of host %s wait on the network (dead links or network stalls): "
           "suspect that host's network (NICs, cables, switch ports) before any one rank",
           best_n, wd_az_s(best));
}

/* What the communicator's rank `who` waits in: "Send to rank 2", "AllReduce seq 5201". */
static void op_text(const wd_az_comm *c, const wd_az_crank *who, char *out, size_t len) {
  const char *f = wd_az_s(c->stuck_func) && *wd_az_s(c->stuck_func) ? wd_az_s(c->stuck_func) : "?";
  for (int i = 0; who && i < who->nops; i++) {
    const wd_az_op *op = &who->ops[i];
    if (strcmp(wd_az_s(op->type), "P2p") == 0) {
      int send = strcmp(wd_az_s(op->func), "Send") == 0;
      wd_az_fmt(out, len, "%s %s rank %d", wd_az_s(op->func), send ? "to" : "from", op->peer);
      return;
    }
    if (op->seq >= 0 && op->func == c->stuck_func) break;
  }
  if (c->graph && c->stuck_seq < 0)
    wd_az_fmt(out, len, "%s (replay %lld of CUDA graph %d, launch %d)", f, (long long)c->graph_replay, c->graph,
              c->graph_launch);
  else if (c->graph)
    wd_az_fmt(out, len, "%s seq %lld (replay %lld of CUDA graph %d)", f, (long long)c->stuck_seq,
              (long long)c->graph_replay, c->graph);
  else if (c->stuck_seq < 0) wd_az_fmt(out, len, "point-to-point operations");
  else wd_az_fmt(out, len, "%s seq %lld", f, (long long)c->stuck_seq);
}

/* "(global rank 18 on host node002)", or "(no dump)". */
static void short_who(const wd_az_result *res, const wd_az_suspect *s, char *out, size_t len) {
  char where[160] = "no dump";
  if (s->cr) wd_az_where_text(res->set, s->cr, where, sizeof where);
  wd_az_fmt(out, len, "(%s)", where);
}

/* Where the root's process is now: its Python line, else its main thread's top frames. */
static void now_text(const wd_az_result *res, const wd_az_crank *cr, char *out, size_t len) {
  const wd_az_dump *d = wd_az_dump_of(res->set, cr);
  const char *st = wd_az_s(d->main_status);
  if (!d->npy && st && (!strcmp(st, "no_answer") || !strcmp(st, "blocked") || !strcmp(st, "not_asked"))) {
    /* No stack: where the kernel says it is (a driver call stuck in state D is a classic). */
    const char *sc = wd_az_s(d->main_syscall);
    char f[400] = "";
    if (d->nframes) wd_az_frames_text(d, 1, f, sizeof f);
    wd_az_fmt(out, len, "main thread gave no stack (%s)%s%s%s%s%s%s",
              !strcmp(st, "blocked") ? "it blocks the stack signal" :
              !strcmp(st, "not_asked") ? "the stack signal was no longer the plugin's" : "it did not answer the stack signal",
              d->main_kstate ? ", " : "", d->main_kstate ? wd_az_proc_state_text(d->main_kstate) : "",
              sc && *sc ? ", in system call " : "", sc && *sc ? sc : "", *f ? " called from " : "", f);
  } else if (d->npy) {
    wd_az_fmt(out, len, "in Python %s", wd_az_s(d->py[0]));
  } else if (d->nframes) {
    char f[400];
    wd_az_frames_text(d, 3, f, sizeof f);
    wd_az_fmt(out, len, "main thread in %s", f);
  } else if (strcmp(wd_az_s(d->reason), "postmortem") == 0) {
    wd_az_fmt(out, len, "gone (the process died)");
  } else if (d->live_state) {
    wd_az_live_text(d, out, len);
  } else {
    wd_az_fmt(out, len, "no stack in its dump");
  }
}

void wd_az_job_verdict(const wd_az_result *res, wd_az_job *job) {
  memset(job, 0, sizeof(*job));
  host_verdict(res, job);
  wait_index ix;
  if (index_build(res, &ix) != 0) {
    index_free(&ix);
    return;
  }
  follow(res, &ix, job);
  index_free(&ix);
}

/* The chain from communicator c: its culprit, the communicator that culprit waits in, ... */
static void chain_from(const wait_index *ix, const wd_az_comm *c, wd_az_job *job) {
  uint64_t seen[WD_AZ_CHAIN];
  int nseen = 0;
  const wd_az_crank *who = NULL;
  job->nlinks = 0;
  job->deadlock = 0;
  job->root = NULL;
  while (c && job->nlinks < WD_AZ_CHAIN) {
    const wd_az_suspect *s = next_culprit(ix, c);
    /* The rank that led here is itself a culprit of c (an end of a dead link): the root. */
    for (int i = 0; who && i < c->nsus; i++)
      if (c->sus[i].culprit && c->sus[i].cr == who) s = &c->sus[i];
    if (!s) break;
    job->links[job->nlinks++] = (wd_az_link){c, who, s};
    job->root = s;
    if (!s->cr || s->cr == who) break; /* no dump, or the root itself */
    for (int i = 0; i < nseen; i++)
      if (seen[i] == gpu_key(ix, s->cr)) {
        job->deadlock = 1;
        job->root = NULL;
        break;
      }
    if (job->deadlock) break;
    seen[nseen++] = gpu_key(ix, s->cr);
    who = NULL;
    const wd_az_comm *next = waiting_in(ix, s->cr, &who);
    /* A culprit waiting in its own communicator (a dead link, a p2p mismatch) is the root. */
    c = next == c ? NULL : next;
  }
}

static void follow(const wd_az_result *res, const wait_index *ix, wd_az_job *job) {
  /* The longest chain explains the most: start from every hung communicator (the symptom
   * on-call sees first, dp waiting on pp, is where the longest one starts); on a tie, the one
   * where most ranks wait. */
  wd_az_job *try = malloc(sizeof(*try));
  if (!try) return;
  for (size_t i = 0; i < res->ncomms; i++) {
    const wd_az_comm *c = &res->comms[i];
    if (c->verdict != WD_AZ_HANG || !next_culprit(ix, c)) continue;
    chain_from(ix, c, try);
    if (!job->found || try->nlinks > job->nlinks ||
        (try->nlinks == job->nlinks && c->nwaiting > job->links[0].comm->nwaiting)) {
      job->found = 1;
      job->nlinks = try->nlinks;
      job->deadlock = try->deadlock;
      job->root = try->root;
      memcpy(job->links, try->links, sizeof(job->links));
    }
  }
  free(try);
  if (!job->found) return;
  /* "JOB: root cause R: reason detail; now: frames. Chain: ranks W of A wait in OP for rank x
   * (global rank ..) -> which waits in B OP for rank y (..)." */
  char *p = job->line;
  size_t left = sizeof(job->line);
  int n;
#define PUT(...)                                                                                  \
  do {                                                                                          \
    n = snprintf(p, left, __VA_ARGS__);                                                         \
    if (n < 0 || (size_t)n >= left) return;                                                     \
    p += n;                                                                                     \
    left -= (size_t)n;                                                                          \
  } while (0)
  char w[512];
  if (job->deadlock) {
    int ncomm = 0;
    for (int i = 0; i < job->nlinks; i++) {
      int dup = 0;
      for (int k = 0; k < i; k++) dup |= job->links[k].comm == job->links[i].comm;
      ncomm += !dup;
    }
    PUT("JOB: deadlock across %d communicators (ranks entered them in different orders):", ncomm);
  } else {
    const wd_az_link *last = &job->links[job->nlinks - 1];
    who_text(res, last->comm, last->on, w, sizeof w);
    PUT("JOB: root cause %s: %s: %s", w, wd_az_reason_name(last->on->reason), last->on->detail);
    if (last->on->cr) {
      now_text(res, last->on->cr, w, sizeof w);
      PUT("; now %s", w);
    }
    if (job->nlinks < 2) return;
    PUT(". Chain:");
  }
  for (int i = 0; i < job->nlinks; i++) {
    const wd_az_link *l = &job->links[i];
    const char *cn = wd_az_s(l->comm->name) && *wd_az_s(l->comm->name) ? wd_az_s(l->comm->name) : "?";
    char op[160];
    if (i == 0) {
      char r[256];
      wd_az_ranges(l->comm->waiting, (size_t)l->comm->nwaiting, r, sizeof r);
      op_text(l->comm, NULL, op, sizeof op);
      PUT(" rank%s %s of %s wait%s in %s", l->comm->nwaiting == 1 ? "" : "s", r, cn,
          l->comm->nwaiting == 1 ? "s" : "", op);
    } else {
      op_text(l->comm, l->who, op, sizeof op);
      PUT(" -> which waits in %s %s", cn, op);
      if (l->who && l->on->cr == l->who) { /* itself the culprit there (a dead link, say) */
        PUT(": %s", wd_az_reason_name(l->on->reason));
        continue;
      }
    }
    short_who(res, l->on, w, sizeof w);
    PUT(" for rank %d %s", l->on->rank, w);
  }
  PUT("%s", job->deadlock ? ", which is already on this chain" : ".");
#undef PUT
}
