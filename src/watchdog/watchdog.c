/*
 * The watchdog thread. It sleeps in poll() on an eventfd that the signal handler and stop()
 * write to, and every NCCL_WATCHDOG_POLL it scans the live operations of every context. All
 * dumps are built and written here, never on NCCL's threads.
 */
#include "watchdog/watchdog.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "base/clock.h"
#include "base/host.h"
#include "base/log.h"
#include "dump/dumpfile.h"
#include "dump/render.h"
#include "dump/trigger.h"
#include "events/store.h"
#include "flightrec/ringfile.h"
#include "flightrec/strtab.h"
#include "stacks/backtrace.h"
#include "telemetry/otlp_http.h"
#include "watchdog/autoverdict.h"
#include "watchdog/collect.h"
#include "watchdog/fatal.h"
#include "watchdog/keep.h"
#include "watchdog/leftovers.h"
#include "watchdog/metrics.h"
#include "watchdog/signals.h"
#include "watchdog/stall.h"

#define WD_MAX_STALLS 64

static struct {
  pthread_t thread;
  int running;
  int wake_fd;
  _Atomic int stop;
  int dumps_ok;
  int bt_ok;
  char dir[WD_PATH_MAX + 72]; /* this host's subdirectory of the dump directory */
  char base[WD_PATH_MAX];     /* the job's dump directory (triggers live there) */
  char host[64];
  unsigned ndumps;        /* dumps written, for the file sequence number */
  pid_t ndumps_pid;       /* the process that counted them (a forked child counts anew) */
  /* Snapshots against NCCL_WATCHDOG_MAX_DUMPS on their own, so that a script sending the
   * snapshot signal cannot use up what a real hang needs; stall and peer dumps together within
   * the same number on disk (keep.h: a resumed episode's dump makes room for a new one). */
  unsigned nsignal_dumps;
  unsigned nremoved; /* dumps of resumed episodes removed to make room (the first is said) */
  char episode_path[WD_PATH_MAX + 64]; /* this process's stall dump of the current episode */
  int episode; /* a stall episode is in progress: one dump per episode */
  unsigned nepisodes; /* stall episodes so far (metrics) */
  uint64_t last_dump_ns; /* when this process last wrote a stall or peer dump */
  uint64_t peer_dump_ns; /* when it last answered a job episode (peer dump): its own stall soon
                            after is the same episode, already dumped */
  uint64_t peer_mark;    /* wd_progress_mark() then: unchanged, nothing completed since */
  uint64_t episode_began_ns; /* when the stalled operation of this process's episode last moved */
  uint64_t episode_comm;     /* its communicator */
  int episode_nccl;          /* NCCL's own events of the stalled op were open */
  uint64_t episode_records;  /* its communicator's proxy records then (wd_context_proxy_records) */
  int warned_max;
  unsigned warned_trigger; /* malformed triggers seen (the first is said) */
  /* Signal actions found replaced at a poll (the first of each kind is said, later ones counted). */
  unsigned snapsig_lost, fatal_lost;
  int sweeper;            /* the node's first local rank: sweeps leftovers (leftovers.h) */
  uint64_t next_sweep_ns;
  /* This process's stall was folded into episode fold_k, which another process opened (joined,
   * or answered just before): it stands for the stall while a verdict may still come, until
   * fold_deadline_ns. Without one by then (a trigger the job did not write, or its analyzer
   * failed) the stall opens an episode of its own (own_next: posted under a free number). */
  unsigned fold_k;
  uint64_t fold_deadline_ns;
  int own_next;
  wd_process_id proc; /* boot id and process start, read when the thread starts */
  wd_trigger_watch watch;
  const wd_config *cfg; /* the lifecycle's, alive while the thread runs */
  /* An abort dump asked for by a finalizing thread, done by this one. */
  pthread_mutex_t abort_lock;
  pthread_cond_t abort_cv;
  uint64_t abort_comm;   /* 0: none pending */
  uint32_t abort_inflight;
  int abort_state;       /* 0 idle, 1 asked, 2 done (written), 3 done (not written) */
} wd_wd = {.wake_fd = -1, .abort_lock = PTHREAD_MUTEX_INITIALIZER, .abort_cv = PTHREAD_COND_INITIALIZER};

/* summary: only the newest NCCL_WATCHDOG_PEER_RECORDS of each ring (every dump of a job's stall
 * episode but the one of the process that opened it). */
static int wd_dump(const char *reason, wd_dump_input *extra, int summary, unsigned episode, char *path,
                   size_t path_len) {
  int rc = -1; /* only the watchdog thread dumps */
  path[0] = '\0';
  if (!wd_wd.dumps_ok) goto out;
  int is_signal = strcmp(reason, "signal") == 0, is_peer = strcmp(reason, "peer") == 0;
  /* A process dumps once at its end whatever came before: its last word on the hang. */
  int teardown = strcmp(reason, "sigabrt") == 0 || strcmp(reason, "term") == 0;
  int kind = is_signal ? 1 : is_peer ? 2 : 0;
  int budget = !teardown && wd_wd.cfg->max_dumps > 0;
  char removed[256] = "";
  if (budget && (is_signal ? wd_wd.nsignal_dumps >= (unsigned)wd_wd.cfg->max_dumps
                           : !wd_keep_room(wd_wd.dir, wd_av_episode_resumed, removed, sizeof removed))) {
    if (!(wd_wd.warned_max & (1 << kind)))
      WD_WARN("NCCL_WATCHDOG_MAX_DUMPS=%d reached for %s dumps%s: no more from this process (said once)",
              wd_wd.cfg->max_dumps, is_signal ? "snapshot (signal)" : "stall and peer",
              is_signal ? "" : ", none of them of an episode that resumed");
    wd_wd.warned_max |= 1 << kind;
    goto out;
  }
  if (removed[0] && wd_wd.nremoved++ == 0)
    WD_WARN("NCCL_WATCHDOG_MAX_DUMPS=%d stall and peer dumps on disk: removed %s to make room for this %s dump; "
            "later such removals are logged at INFO", wd_wd.cfg->max_dumps, removed, reason);
  else if (removed[0])
    WD_INFO("NCCL_WATCHDOG_MAX_DUMPS=%d: removed %s to make room for this %s dump", wd_wd.cfg->max_dumps, removed, reason);
  if (is_signal) wd_wd.nsignal_dumps++;
  wd_dump_input in;
  /* Whole rings from the process that opened the job's episode and in snapshots; every other
   * dump of the episode is a summary (the newest records of each ring): what a 100,000-rank
   * round can afford. */
  uint32_t keep = summary ? wd_wd.cfg->peer_records : 0;
  if (wd_collect(&in, wd_wd.cfg, reason, wd_wd.cfg->backtrace && wd_wd.bt_ok, keep) != 0) {
    wd_collect_free(&in);
    goto out;
  }
  in.dump_seq = ++wd_wd.ndumps;
  in.summary = summary;
  in.proc = &wd_wd.proc;
  in.episodes = wd_wd.nepisodes;
  if (wd_wd.cfg->peer_dumps) {
    in.trig_on = 1;
    in.trig_next = wd_wd.watch.next;
    in.trig_poller = wd_wd.watch.poller;
    in.trig_shared = wd_wd.watch.shared_checks;
    in.trig_node = wd_wd.watch.node_checks;
  }
  if (extra) {
    in.nstalls = extra->nstalls;
    in.stalls = extra->stalls;
    in.signo = extra->signo;
    in.sender_pid = extra->sender_pid;
    in.peer_trigger = extra->peer_trigger;
    in.peer_trigger_json = extra->peer_trigger_json;
    in.abort_comm_id = extra->abort_comm_id;
    in.abort_inflight = extra->abort_inflight;
  }
  rc = wd_dump_write(&in, wd_wd.dir, path, path_len);
  if (rc == 0 && !is_signal) wd_wd.last_dump_ns = wd_now_ns();
  if (rc == 0 && !is_signal && !teardown) wd_keep_add(path, episode);
  if (rc != 0) WD_WARN("could not write a %s dump into %s: %s", reason, wd_wd.dir, strerror(errno));
  wd_collect_free(&in);
out:
  return rc;
}

/* The episode resumed (a slow phase, not a hang): its stall dump is evidence of its moment only,
 * and the first to go when the budget is spent (keep.h). */
static void wd_resumed_budget(void) {
  if (wd_wd.episode_path[0]) wd_keep_resumed(wd_wd.episode_path);
}

/* " seq N", or nothing where the operation has none (p2p, a captured launch's replay). */
static const char *wd_seq_text(int64_t seq, char *buf, size_t len) {
  if (seq < 0) buf[0] = '\0';
  else snprintf(buf, len, " seq %lld", (long long)seq);
  return buf;
}

/* Whether a communicator with this id is still profiled (not finalized); *records then gets its
 * proxy records so far. */
static int wd_comm_alive(uint64_t comm_id, uint64_t *records) {
  int alive = 0;
  pthread_mutex_lock(&wd_store.lock);
  for (wd_context *ctx = wd_store.contexts; ctx && !alive; ctx = ctx->next)
    if (ctx->comm_id == comm_id && !ctx->retired_ns) {
      alive = 1;
      *records = wd_context_proxy_records(ctx);
    }
  pthread_mutex_unlock(&wd_store.lock);
  return alive;
}

/* A trigger as the job's processes write them (wd_post_trigger): a JSON object with a "stalls"
 * array. Anything else in the triggers folder is ignored (said once), never answered. */
static int wd_trigger_wellformed(const char *content) {
  return content[0] == '{' && strstr(content, "\"stalls\":[") != NULL;
}

/* Opens the job's stall episode, or joins it: 1 this process posted it, 0 another process had
 * (the same episode), -1 not posted. */
static int wd_post_trigger(const wd_stall *st, uint32_t n) {
  cJSON *root = cJSON_CreateObject();
  if (root == NULL) return -1;
  cJSON_AddStringToObject(root, "host", wd_wd.host);
  cJSON_AddNumberToObject(root, "pid", (double)getpid());
  /* After an episode without a verdict: processes of the job that fall back for the same
   * communicator meet in one episode (wd_trigger_post_fresh). */
  char join[64] = "";
  if (wd_wd.own_next && n) {
    char id[32];
    snprintf(id, sizeof id, "0x%llx", (unsigned long long)st[0].comm_id);
    cJSON_AddStringToObject(root, "fallback", id);
    snprintf(join, sizeof join, "\"fallback\":\"%s\"", id);
  }
  cJSON *arr = cJSON_AddArrayToObject(root, "stalls");
  for (uint32_t i = 0; arr && i < n; i++) {
    cJSON *s = cJSON_CreateObject();
    if (s == NULL) break;
    cJSON_AddItemToArray(arr, s);
    char id[32];
    snprintf(id, sizeof(id), "0x%llx", (unsigned long long)st[i].comm_id);
    cJSON_AddStringToObject(s, "commId", id);
    cJSON_AddStringToObject(s, "commName", st[i].comm_name);
    cJSON_AddNumberToObject(s, "rank", st[i].rank);
    cJSON_AddNumberToObject(s, "nranks", st[i].nranks);
    cJSON_AddStringToObject(s, "type", wd_type_name(st[i].type));
    cJSON_AddStringToObject(s, "func", wd_str(st[i].func));
    cJSON_AddNumberToObject(s, "seq", (double)st[i].seq);
    cJSON_AddNumberToObject(s, "sinceProgressMs", (double)st[i].since_progress_ns / 1e6);
    cJSON_AddStringToObject(s, "waitingOn", st[i].waiting_on);
  }
  char *text = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (text == NULL) return -1;
  char name[64], other[1024];
  /* Normally an episode someone else posted first is the same one. After an episode that never
   * got a verdict (wd_wd.own_next), this process posts one of its own: the next free number. */
  int rc = wd_wd.own_next ? wd_trigger_post_fresh(&wd_wd.watch, text, join, name, sizeof(name))
                          : wd_trigger_post(&wd_wd.watch, text, name, sizeof(name), other, sizeof(other));
  wd_wd.own_next = 0;
  if (rc == 1) WD_INFO("posted %s: every process of the job dumps for this episode", name);
  else if (rc == 0) WD_INFO("%s was posted by another process first: same episode, dumped once", name);
  else WD_WARN("could not post a trigger in %s: %s", wd_wd.watch.dir, strerror(errno));
  free(text);
  return rc;
}

/* A number that grows whenever an operation of this process completes (sequence numbers and
 * counts of completed operations, all communicators). Off the hot path: read twice an episode. */
static uint64_t wd_progress_mark(void) {
  uint64_t m = 0;
  pthread_mutex_lock(&wd_store.lock);
  for (wd_context *ctx = wd_store.contexts; ctx; ctx = ctx->next) {
    m += atomic_load_explicit(&ctx->completed_order, memory_order_relaxed) +
         (uint64_t)atomic_load_explicit(&ctx->p2p_done, memory_order_relaxed);
    for (int f = 0; f < WD_NSTR; f++)
      m += (uint64_t)(atomic_load_explicit(&ctx->seq_done[f], memory_order_relaxed) + 1) +
           (uint64_t)(atomic_load_explicit(&ctx->ce_seq_done[f], memory_order_relaxed) + 1);
  }
  pthread_mutex_unlock(&wd_store.lock);
  return m;
}

/* Events dropped because a pool could not grow: the warning names what stopped it. */
static void wd_warn_dropped(const wd_context *ctx, uint64_t dropped) {
  int why = atomic_load_explicit(&ctx->pool.short_why, memory_order_relaxed);
  int pwhy = atomic_load_explicit(&ctx->proxy_pool.short_why, memory_order_relaxed);
  if (pwhy > why) why = pwhy;
  char cause[160];
  if (why == WD_SHORT_BUDGET)
    snprintf(cause, sizeof cause, "the process's memory budget is used up (NCCL_WATCHDOG_MEMORY_BUDGET=%u MiB, "
             "rings and event slots of every communicator): raise the budget", wd_wd.cfg->memory_budget_mib);
  else if (why == WD_SHORT_ADDRESS)
    snprintf(cause, sizeof cause, "no address space or memory was left for more event slots (an "
             "address-space limit such as ulimit -v, or the system's memory)");
  else
    snprintf(cause, sizeof cause, "its event pool is full (NCCL_WATCHDOG_MAX_EVENTS=%u): raise it",
             wd_wd.cfg->max_events);
  WD_WARN("comm 0x%llx \"%s\" rank %d: %llu events dropped so far: %s", (unsigned long long)ctx->comm_id,
          ctx->name, ctx->rank, (unsigned long long)dropped, cause);
}

/* NCCL re-applies a mask set through its RAS (ncclras CONTROL PROFILER_MASK) after every init,
 * over ours, and 0 stops every callback: a watchdog blinded that way says so, once per change. */
static void wd_watch_mask(wd_context *ctx) {
  if (ctx->mask_ptr == NULL) return;
  int now = wd_mask_now(ctx);
  if (now == ctx->mask_seen) return;
  ctx->mask_seen = now;
  int lost = ctx->mask_set & ~now;
  if (!lost) return;
  char names[256] = "";
  size_t pos = 0;
  for (unsigned t = 0; t < WD_T_COUNT && pos + 1 < sizeof names; t++)
    if (lost & (1 << t)) {
      int n = snprintf(names + pos, sizeof names - pos, "%s%s", pos ? ", " : "", wd_type_name(t));
      if (n < 0) break;
      pos += (size_t)n;
    }
  WD_WARN("comm 0x%llx \"%s\" rank %d: NCCL's event mask changed under the plugin (0x%x set, now "
          "0x%x: NCCL RAS PROFILER_MASK?): it no longer sees %s; a hang of this communicator may "
          "go unseen, dumps list it in config.blindSpots",
          (unsigned long long)ctx->comm_id, ctx->name, ctx->rank, (unsigned)ctx->mask_set,
          (unsigned)now, names);
  ctx->mask_warned++;
}

static void wd_fold(unsigned k, uint64_t now) {
  if (!wd_wd.cfg->verdict || !k) return; /* no verdicts to wait for: the dumps are the answer */
  wd_wd.fold_k = k;
  wd_wd.fold_deadline_ns = now + wd_wd.cfg->verdict_wait_ns + wd_wd.cfg->verdict_limit_ns +
                           2 * wd_wd.watch.shared_every_ns + 2000000000ull;
}

/* 1 when the episode this process's stall was folded into got no verdict in time: the stall is
 * then an episode of its own (a flood of triggers the job did not write never starves it). */
static int wd_fold_expired(uint64_t now) {
  if (!wd_wd.fold_k || now < wd_wd.fold_deadline_ns) return 0;
  unsigned k = wd_wd.fold_k;
  wd_wd.fold_k = 0;
  if (wd_trigger_verdict_posted(&wd_wd.watch, k)) return 0;
  WD_WARN("stall episode %u, which this process's stall joined, got no verdict in time (a trigger "
          "the job did not write, or its analyzer failed): the stall opens an episode of its own", k);
  wd_wd.peer_dump_ns = 0;
  wd_wd.own_next = 1;
  return 1;
}

/* Whom an episode's verdict waits for (autoverdict.h): the communicators (the stalled ones, or
 * all of this process's at a teardown) and how many processes hold their ranks. A communicator
 * of N ranks of which this process holds k (JAX, TensorFlow and `nccl-tests -g` drive several
 * GPUs from one process) has N/k processes, rounded up: the ranks are spread alike, as those
 * launchers do. WORLD_SIZE, when the launcher set it, counts the processes of the job when it is
 * more (torchrun, the frameworks' Slurm paths: a stall in a small communicator still waits for
 * every process, the root may be elsewhere); it is less under torchft, whose replica groups each
 * run a torchrun of their own (WORLD_SIZE 1 with one process a group), while the quorum's
 * communicator spans the groups. */
static void wd_who(const wd_stall *st, uint32_t n, wd_av_who *who) {
  memset(who, 0, sizeof *who);
  const char *ws = getenv("WORLD_SIZE");
  long world = ws ? strtol(ws, NULL, 10) : 0;
  int procs = 1;
  pthread_mutex_lock(&wd_store.lock);
  for (uint32_t i = 0; i < n && who->ncomms < WD_AV_COMMS; i++) {
    int seen = 0;
    for (uint32_t j = 0; j < who->ncomms && !seen; j++) seen = who->comms[j] == st[i].comm_id;
    if (!seen) who->comms[who->ncomms++] = st[i].comm_id;
  }
  for (wd_context *ctx = wd_store.contexts; !n && ctx && who->ncomms < WD_AV_COMMS; ctx = ctx->next) {
    int seen = 0;
    for (uint32_t j = 0; j < who->ncomms && !seen; j++) seen = who->comms[j] == ctx->comm_id;
    if (!seen) who->comms[who->ncomms++] = ctx->comm_id;
  }
  for (uint32_t j = 0; j < who->ncomms; j++) {
    int local = 0, nranks = 0;
    for (wd_context *ctx = wd_store.contexts; ctx; ctx = ctx->next)
      if (ctx->comm_id == who->comms[j]) local++, nranks = ctx->nranks;
    for (uint32_t i = 0; !local && i < n; i++)
      if (st[i].comm_id == who->comms[j]) local = 1, nranks = st[i].nranks;
    int p = local ? (nranks + local - 1) / local : 1;
    if (p > procs) procs = p;
  }
  pthread_mutex_unlock(&wd_store.lock);
  who->processes = world > procs && world < (1L << 24) ? (int)world : procs;
}

static void wd_check_stalls(uint64_t now) {
  wd_stall stalls[WD_MAX_STALLS];
  uint32_t n = 0;
  int metrics_due = wd_metrics_due(now);
  pthread_mutex_lock(&wd_store.lock);
  for (wd_context *ctx = wd_store.contexts; ctx; ctx = ctx->next) wd_note_calls(ctx, now);
  for (wd_context *ctx = wd_store.contexts; ctx; ctx = ctx->next) {
    wd_watch_mask(ctx);
    n += wd_scan_context(ctx, now, wd_wd.cfg, stalls + n, WD_MAX_STALLS - n);
    wd_metrics_note(ctx, now, metrics_due);
    /* What a decoder needs besides the records, should the process die before the next poll. */
    wd_context_refresh_file(ctx);
    /* Keep a quarter of the pool free so the hot path does not have to grow it. */
    for (int i = 0; i < WD_CTX_NPOOLS; i++)
      wd_pool_reserve(wd_ctx_pool(ctx, i), wd_pool_nslots(wd_ctx_pool(ctx, i)) / 4);
    /* Drops are counted on the hot path and reported here, at most once a poll. */
    uint64_t dropped = atomic_load_explicit(&ctx->dropped, memory_order_relaxed);
    if (dropped > ctx->dropped_logged) {
      wd_warn_dropped(ctx, dropped);
      ctx->dropped_logged = dropped;
    }
  }
  wd_pool_reserve(&wd_store.detached, wd_pool_nslots(&wd_store.detached) / 4);
  wd_metrics_end_poll();
  pthread_mutex_unlock(&wd_store.lock);
  /* Counted before this poll's dump: the next file shows it (within one interval). */
  if (metrics_due) {
    wd_av_stats av;
    wd_av_get_stats(&av);
    wd_metrics_flush(metrics_due, wd_wd.nepisodes + (n && !wd_wd.episode), wd_wd.ndumps, &av);
  }
  if (n == 0) {
    /* Over: its operation completed after all (a slow rank), or its communicator was finalized
     * (an abort): only the first is a resumed episode. Where NCCL's own work of the op was open,
     * only NCCL can say it completed: an abort's flag ends the kernel (the CUDA end event
     * completes) while the proxy's loop ends with every step left open (init.cc commReclaim,
     * proxy.cc), and the finalize comes after. */
    uint64_t records = 0;
    int alive = wd_wd.episode && wd_comm_alive(wd_wd.episode_comm, &records);
    if (alive && wd_wd.episode_nccl && records == wd_wd.episode_records) {
      WD_WARN("stall on comm 0x%llx ended on the GPU, but NCCL reported no progress of its "
              "transfers since: its kernel was ended (an abort, or a revoke), the operation did not "
              "complete; the stall episode stands",
              (unsigned long long)wd_wd.episode_comm);
    } else if (alive) {
      wd_av_resumed(now, wd_wd.episode_began_ns);
      wd_resumed_budget();
    } else if (wd_wd.episode) {
      WD_INFO("stall episode over: the stalled communicator was finalized");
    }
    wd_av_unmark(); /* a resume above has marked its episode already */
    wd_wd.episode = 0;
    wd_wd.episode_path[0] = '\0';
    wd_wd.fold_k = 0;
    return;
  }
  if (wd_wd.episode && !wd_fold_expired(now)) return;
  wd_wd.episode = 1;
  wd_wd.nepisodes++;
  /* Most stalled first. */
  for (uint32_t i = 1; i < n; i++)
    for (uint32_t j = i; j > 0 && stalls[j].since_progress_ns > stalls[j - 1].since_progress_ns; j--) {
      wd_stall t = stalls[j];
      stalls[j] = stalls[j - 1];
      stalls[j - 1] = t;
    }
  wd_wd.episode_began_ns = now - stalls[0].since_progress_ns;
  wd_wd.episode_comm = stalls[0].comm_id;
  wd_wd.episode_nccl = stalls[0].nccl_open;
  if (!wd_comm_alive(wd_wd.episode_comm, &wd_wd.episode_records)) wd_wd.episode_nccl = 0;
  /* This process answered the job's episode (a peer dump): its own stall is part of the same
   * episode, and the analyzer has its state already, when the dump was moments ago or nothing of
   * this process completed since (a rank that reached the hang soon after it answered: a loaded
   * node, a late start). One dump per process per episode. Not when the stalled operation began
   * more than a timeout after that answer: the process was outside NCCL for longer than the job
   * tolerates a wait (a data loader, a checkpoint), then came to a collective that hangs all the
   * same. Its answer no longer says where it is, and a verdict from it names it as never
   * entering: its stall opens the next episode, and every process dumps again for it. */
  int entered_late = stalls[0].age_ns < now &&
                     now - stalls[0].age_ns > wd_wd.peer_dump_ns + wd_wd.cfg->timeout_ns;
  if (wd_wd.peer_dump_ns && !entered_late &&
      (now - wd_wd.peer_dump_ns < wd_wd.cfg->timeout_ns + wd_wd.watch.shared_every_ns ||
       wd_progress_mark() == wd_wd.peer_mark)) {
    char seq[32];
    WD_WARN("stall on comm 0x%llx \"%s\" rank %d: %s%s made no progress for %.1f s; "
            "already dumped for the job's stall episode %.1f s ago, not dumping again",
            (unsigned long long)stalls[0].comm_id, stalls[0].comm_name, stalls[0].rank,
            wd_str(stalls[0].func), wd_seq_text(stalls[0].seq, seq, sizeof seq),
            (double)stalls[0].since_progress_ns / 1e9, (double)(now - wd_wd.peer_dump_ns) / 1e9);
    wd_fold(wd_wd.watch.next - 1, now);
    return;
  }
  /* The episode first: the process that opens it dumps whole rings, the others of the same
   * episode a summary. */
  int posted = wd_wd.cfg->peer_dumps && wd_wd.dumps_ok ? wd_post_trigger(stalls, n) : -1;
  int joined = posted == 0;
  unsigned k = wd_wd.watch.next - 1; /* the episode posted or joined */
  if (posted == 1) {
    wd_av_who who;
    wd_who(stalls, n, &who);
    wd_av_opened(k, now, &who);
  }
  else wd_av_unmark();
  if (posted == 0) wd_fold(k, now);
  if (posted >= 0) {
    wd_ringfile_note_answer(k);
    wd_av_answering(k, now);
  }
  wd_dump_input extra = {.nstalls = n, .stalls = stalls};
  char path[WD_PATH_MAX + 64];
  int rc = wd_dump("stall", &extra, joined, posted >= 0 ? k : 0, path, sizeof(path));
  if (rc == 0) snprintf(wd_wd.episode_path, sizeof wd_wd.episode_path, "%s", path);
  if (posted >= 0 && rc == 0) wd_av_dumped(k, now, 1);
  for (uint32_t i = 0; i < n && i < 4; i++) {
    const wd_stall *s = &stalls[i];
    char seq[32];
    WD_WARN("stall on comm 0x%llx \"%s\" rank %d/%d: %s %s%s made no progress for %.1f s; "
            "waiting on %s; dump: %s",
            (unsigned long long)s->comm_id, s->comm_name, s->rank, s->nranks, wd_type_name(s->type),
            wd_str(s->func), wd_seq_text(s->seq, seq, sizeof seq), (double)s->since_progress_ns / 1e9, s->waiting_on,
            rc == 0 ? path : "(not written)");
  }
  if (wd_wd.cfg->action == WD_ACTION_ABORT) {
    WD_WARN("NCCL_WATCHDOG_ACTION=abort: aborting the process after the stall dump");
    abort();
  }
}

static void wd_check_signal(void) {
  int sender = 0;
  if (wd_snapsig_take(&sender) <= 0) return;
  wd_dump_input extra = {.signo = wd_wd.cfg->signal, .sender_pid = sender};
  char path[WD_PATH_MAX + 64];
  if (wd_dump("signal", &extra, 0, 0, path, sizeof(path)) == 0)
    WD_INFO("snapshot dump (signal from pid %d): %s", sender, path);
}

/* The signals the plugin installed, still its own? A framework may have put back what it took
 * for "the original handlers" (PyTorch Lightning at the end of every fit: SIG_DFL, as CPython
 * reports for a handler installed from C), or installed its own over ours (Lightning's SLURM
 * requeue on SIGUSR1). Taken back, chaining to what is there, so that handler still runs once
 * per signal. Once per poll: two sigaction reads per signal on this thread. */
static void wd_check_owned(void) {
  char found[48] = "";
  int r = wd_snapsig_check(found, sizeof found);
  if (r != 0 && wd_wd.snapsig_lost++ == 0) {
    if (r > 0)
      WD_WARN("the snapshot signal %d had been replaced (now %s): taken back, chaining to it (that handler "
              "still runs once per signal); said once, later replacements are taken back silently",
              wd_snapsig_signo(), found);
    else
      WD_WARN("the snapshot signal %d is no longer the plugin's (now %s) and could not be taken back: "
              "snapshots by that signal stop; stall dumps and peer dumps go on (NCCL_WATCHDOG_SIGNAL picks "
              "another signal)", wd_snapsig_signo(), found);
  }
  char what[256];
  if (wd_fatal_check(what, sizeof what) > 0 && wd_wd.fatal_lost++ == 0)
    WD_WARN("fatal-signal handlers had been replaced: %s; taken back, chaining to what was there, so a crash "
            "still leaves its record in the ring files; said once", what);
}

/* In a large job many ranks stall at once and each posts a trigger: a process answers the
 * first and lets the others of the same burst go (one dump per process per episode is what the
 * analyzer needs), so 1,000 stalled ranks do not make every rank write 1,000 dumps. */
static void wd_check_triggers(uint64_t now) {
  char name[64], content[8192];
  if (wd_trigger_poll(&wd_wd.watch, now, name, sizeof(name), content, sizeof(content)) != 1) return;
  if (!wd_trigger_wellformed(content)) {
    if (!wd_wd.warned_trigger++)
      WD_WARN("ignoring %s: not a trigger the job's processes write (no stalls in it); further "
              "ones are ignored quietly", name);
    return;
  }
  /* Before the dump, which can take seconds on a loaded node: the poller, which copies the
   * state of processes whose watchdog is silent, must not take this one for silent. */
  wd_ringfile_note_answer(wd_wd.watch.next - 1);
  wd_av_answering(wd_wd.watch.next - 1, now);
  if (wd_wd.last_dump_ns && now - wd_wd.last_dump_ns < wd_wd.cfg->timeout_ns) {
    WD_INFO("trigger %s: this process dumped %.1f s ago, not dumping again", name,
            (double)(now - wd_wd.last_dump_ns) / 1e9);
    wd_wd.peer_dump_ns = now;
    wd_wd.peer_mark = wd_progress_mark();
    wd_av_dumped(wd_wd.watch.next - 1, now, 0);
    return;
  }
  wd_dump_input extra = {.peer_trigger = name, .peer_trigger_json = content};
  char path[WD_PATH_MAX + 64];
  if (wd_dump("peer", &extra, 1, wd_wd.watch.next - 1, path, sizeof(path)) == 0) {
    wd_wd.peer_dump_ns = now;
    wd_wd.peer_mark = wd_progress_mark();
    WD_WARN("another process reported a stall (%s): dump %s", name, path);
    wd_av_dumped(wd_wd.watch.next - 1, now, 0);
  }
}

static void wd_check_abort(void) {
  pthread_mutex_lock(&wd_wd.abort_lock);
  int asked = wd_wd.abort_state == 1;
  wd_dump_input extra = {.abort_comm_id = wd_wd.abort_comm, .abort_inflight = wd_wd.abort_inflight};
  pthread_mutex_unlock(&wd_wd.abort_lock);
  if (!asked) return;
  char path[WD_PATH_MAX + 64];
  int rc = wd_dump("abort", &extra, 0, 0, path, sizeof(path));
  if (rc == 0)
    WD_WARN("comm 0x%llx finalized with %u operation(s) in flight (abort): dump %s",
            (unsigned long long)extra.abort_comm_id, extra.abort_inflight, path);
  pthread_mutex_lock(&wd_wd.abort_lock);
  wd_wd.abort_state = rc == 0 ? 2 : 3;
  pthread_cond_broadcast(&wd_wd.abort_cv);
  pthread_mutex_unlock(&wd_wd.abort_lock);
}

int wd_watchdog_finalizing(struct wd_context *ctx) {
  if (!wd_wd.running || !wd_wd.dumps_ok || ctx == NULL) return 0;
  pthread_mutex_lock(&wd_store.lock);
  uint32_t n = wd_context_inflight(ctx, wd_now_ns(), wd_wd.cfg);
  pthread_mutex_unlock(&wd_store.lock);
  if (n == 0) return 0;
  pthread_mutex_lock(&wd_wd.abort_lock);
  wd_wd.abort_comm = ctx->comm_id;
  wd_wd.abort_inflight = n;
  wd_wd.abort_state = 1;
  pthread_mutex_unlock(&wd_wd.abort_lock);
  uint64_t one = 1;
  if (write(wd_wd.wake_fd, &one, sizeof(one)) < 0) { /* the poll timeout picks it up anyway */
  }
  /* Bounded: an abort path must not hang on us (the dump waits at most backtrace_wait). */
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 5;
  pthread_mutex_lock(&wd_wd.abort_lock);
  while (wd_wd.abort_state == 1 &&
         pthread_cond_timedwait(&wd_wd.abort_cv, &wd_wd.abort_lock, &until) == 0) {
  }
  int written = wd_wd.abort_state == 2;
  wd_wd.abort_state = 0;
  wd_wd.abort_comm = 0;
  pthread_mutex_unlock(&wd_wd.abort_lock);
  return written;
}

/* SIGTERM: the scheduler is ending the job. Dump what is in flight, then let the signal do what
 * it was going to do. */
static void wd_check_term(void) {
  if (!wd_fatal_term_pending()) return;
  char path[WD_PATH_MAX + 64];
  wd_dump_input extra = {.signo = SIGTERM};
  if (wd_dump("term", &extra, 0, 0, path, sizeof(path)) == 0) WD_WARN("SIGTERM: dump %s", path);
  wd_fatal_term_chain();
}

/* The job's processes: WORLD_SIZE when the launcher says, else the largest communicator here. */
/* SIGABRT: PyTorch's watchdog (nccl2 backend: ::abort(); legacy: std::terminate) ends the ranks
 * waiting in a hung collective, usually well before our timeout and with no finalize. What they
 * were waiting in is the evidence the analyzer needs: dump it now, whatever the timeout. */
static void wd_check_abrt(void) {
  if (!wd_fatal_abrt_pending()) return;
  char path[WD_PATH_MAX + 64];
  wd_dump_input extra = {.signo = SIGABRT};
  if (wd_dump("sigabrt", &extra, 0, 0, path, sizeof(path)) == 0) {
    WD_WARN("SIGABRT: the process is ending; what it had in flight: dump %s", path);
    /* PyTorch's watchdog fired before ours: the verdict is left to a detached analyzer. */
    if (wd_wd.cfg->peer_dumps) {
      wd_av_who who;
      wd_who(NULL, 0, &who);
      wd_av_teardown(wd_now_ns(), &who);
    }
  } else {
    WD_WARN("SIGABRT: the process is ending; no dump written, its ring files are in %s",
            wd_wd.cfg->ring_dir[0] ? wd_wd.cfg->ring_dir : "(no ring directory)");
  }
  wd_fatal_abrt_done();
}

static void *wd_main(void *arg) {
  (void)arg;
  wd_fatal_thread_init();
  /* This thread queries CUDA events: relaxed capture mode, so a query never invalidates a graph
   * an application thread is capturing. */
  if (wd_wd.cfg->gpu_events) wd_launch_query_thread_init();
  uint64_t poll_ns = wd_wd.cfg->poll_ns;
  uint64_t next = wd_now_ns() + poll_ns;
  while (!atomic_load_explicit(&wd_wd.stop, memory_order_acquire)) {
    uint64_t now = wd_now_ns();
    int wait_ms = now >= next ? 0 : (int)((next - now + 999999) / 1000000);
    /* An OTLP export in flight moves along between polls, never blocking one. */
    int otlp_ms = wd_otlp_http_wait_ms();
    if (otlp_ms >= 0 && otlp_ms < wait_ms) wait_ms = otlp_ms;
    struct pollfd pfd = {.fd = wd_wd.wake_fd, .events = POLLIN};
    if (poll(&pfd, 1, wait_ms) > 0) {
      uint64_t v;
      while (read(wd_wd.wake_fd, &v, sizeof(v)) > 0) {
      }
    }
    if (atomic_load_explicit(&wd_wd.stop, memory_order_acquire)) break;
    wd_check_signal();
    wd_check_abort();
    wd_check_abrt();
    wd_check_term();
    wd_otlp_http_progress();
    now = wd_now_ns();
    if (now >= next) {
      next = now + poll_ns;
      wd_check_owned();
      if (wd_wd.sweeper && now >= wd_wd.next_sweep_ns) {
        wd_wd.next_sweep_ns = now + 3600ull * 1000000000ull;
        wd_leftovers_sweep(wd_wd.cfg->ring_dir, wd_wd.cfg->metrics_dir, wd_wd.host);
      }
      if (wd_wd.cfg->peer_dumps && wd_wd.dumps_ok) wd_check_triggers(now);
      wd_check_stalls(now);
      wd_av_poll(now);
    }
  }
  wd_av_stop();
  wd_fatal_altstack_free();
  return NULL;
}

int wd_watchdog_start(const wd_config *cfg) {
  wd_wd.cfg = cfg;
  atomic_store(&wd_wd.stop, 0);
  /* Dumps are numbered per process: a restart of the watchdog in the same process (its last
   * communicator aborted, a new one made: an in-process restart) goes on counting. */
  if (wd_wd.ndumps_pid != getpid()) wd_wd.ndumps = 0;
  wd_wd.ndumps_pid = getpid();
  wd_wd.nsignal_dumps = 0;
  wd_wd.nremoved = 0;
  if (wd_keep_start(cfg->max_dumps) != 0)
    WD_WARN("out of memory for the list of kept dumps: NCCL_WATCHDOG_MAX_DUMPS holds, but no dump of a "
            "resumed episode can make room");
  wd_wd.episode_path[0] = '\0';
  wd_wd.episode = 0;
  wd_wd.warned_max = 0;
  wd_wd.warned_trigger = 0;
  wd_wd.snapsig_lost = 0;
  wd_wd.fatal_lost = 0;
  {
    const char *lr = getenv("LOCAL_RANK");
    wd_wd.sweeper = !lr || !*lr || strtol(lr, NULL, 10) == 0;
    wd_wd.next_sweep_ns = 0;
  }
  wd_wd.fold_k = 0;
  wd_wd.own_next = 0;
  wd_wd.last_dump_ns = 0;
  wd_wd.nepisodes = 0;
  wd_hostname(wd_wd.host, sizeof(wd_wd.host));
  wd_process_identity(&wd_wd.proc);
  wd_metrics_open(cfg, wd_wd.host, (int)getpid());
  wd_wd.dumps_ok = wd_dumpdir_resolve(wd_wd.cfg, wd_wd.base, sizeof(wd_wd.base)) == 0;
  if (!wd_wd.dumps_ok) WD_WARN("no usable dump directory: stalls are logged but not dumped");
  /* One subdirectory per host: no directory of a 100,000-rank job holds 100,000 entries. */
  snprintf(wd_wd.dir, sizeof(wd_wd.dir), "%s", wd_wd.base);
  if (wd_wd.dumps_ok) {
    char h[64], sub[sizeof(wd_wd.dir)];
    wd_file_sanitize(h, sizeof(h), wd_wd.host, "unknown");
    /* Never a host folder someone else planted (a link to their directory). */
    if (wd_own_subdir(wd_wd.base, h, sub, sizeof(sub)) == 0) snprintf(wd_wd.dir, sizeof(wd_wd.dir), "%s", sub);
  }
  wd_wd.peer_dump_ns = 0;
  if (wd_wd.dumps_ok && wd_wd.cfg->peer_dumps) {
    /* One process per node polls the shared directory: of those that may (LOCAL_RANK 0, or
     * unset), the one the heartbeat's lock elects (trigger.c); the others read the node-local
     * relay in the ring directory. */
    const char *lr = getenv("LOCAL_RANK");
    int poller = !lr || !*lr || strtol(lr, NULL, 10) == 0;
    uint64_t every = cfg->trigger_poll_ns ? cfg->trigger_poll_ns : 5 * cfg->poll_ns;
    wd_trigger_watch_init(&wd_wd.watch, wd_wd.base, cfg->ring_dir, wd_wd.host, poller, every);
    wd_av_start(cfg, &wd_wd.watch, wd_wd.base, wd_wd.dir, wd_wd.host);
  }
  wd_wd.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wd_wd.wake_fd < 0) {
    WD_WARN("eventfd failed: %s", strerror(errno));
    if (cfg->signal) wd_snapsig_install_inert(cfg->signal);
    wd_metrics_close();
    wd_trigger_watch_close(&wd_wd.watch);
    return -1;
  }
  wd_wd.bt_ok = 0;
  if (wd_wd.cfg->backtrace) {
    wd_wd.bt_ok = wd_bt_init(wd_wd.cfg->bt_signal) == 0;
    if (!wd_wd.bt_ok) WD_WARN("backtraces disabled: could not install the backtrace signal handler");
  }
  if (wd_wd.cfg->signal && wd_snapsig_install(wd_wd.cfg->signal, wd_wd.wake_fd) != 0)
    WD_WARN("could not install the snapshot signal handler (signal %d)", wd_wd.cfg->signal);
  if (wd_fatal_install(wd_wd.cfg->term_dump && wd_wd.dumps_ok, wd_wd.wake_fd, cfg->ring_dir) != 0)
    WD_WARN("could not install every fatal-signal handler: some crashes will not be recorded");

  /* The thread starts with every signal blocked, so process-directed signals land elsewhere. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&wd_wd.thread, NULL, wd_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    WD_WARN("cannot start the watchdog thread: %s", strerror(rc));
    if (cfg->signal) wd_snapsig_install_inert(cfg->signal);
    wd_metrics_close();
    wd_fatal_restore();
    wd_fatal_close();
    if (wd_wd.bt_ok) wd_bt_fini();
    close(wd_wd.wake_fd);
    wd_wd.wake_fd = -1;
    wd_trigger_watch_close(&wd_wd.watch);
    return -1;
  }
  pthread_setname_np(wd_wd.thread, "nccl-watchdog");
  wd_wd.running = 1;
  return 0;
}

/* If the thread cannot be joined, the library must never be unmapped under it. */
static void wd_pin_library(void) {
  Dl_info info;
  if (dladdr((void *)wd_pin_library, &info) && info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

void wd_watchdog_stop(void) {
  /* The snapshot handler first: once it is gone nothing writes the eventfd we close below. The
   * backtrace handler only after the thread is joined: a dump in progress still signals threads
   * with it, and the previous (default) action of that signal would kill the process. */
  wd_snapsig_restore();
  wd_fatal_restore();
  if (wd_wd.running) {
    atomic_store_explicit(&wd_wd.stop, 1, memory_order_release);
    uint64_t one = 1;
    if (write(wd_wd.wake_fd, &one, sizeof(one)) < 0) { /* the flag is enough */
    }
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    if (pthread_timedjoin_np(wd_wd.thread, NULL, &deadline) != 0) {
      WD_WARN("watchdog thread did not stop within 10 s; keeping the plugin loaded");
      pthread_detach(wd_wd.thread);
      wd_pin_library();
    } else {
      wd_metrics_close(); /* the thread is gone: nothing writes the file any more */
      wd_keep_stop();
      wd_trigger_watch_close(&wd_wd.watch); /* the node's next process may poll now */
    }
    wd_wd.running = 0;
  } else {
    wd_keep_stop();
  }
  if (wd_wd.bt_ok) wd_bt_fini();
  wd_wd.bt_ok = 0;
  if (wd_wd.wake_fd >= 0) close(wd_wd.wake_fd);
  wd_wd.wake_fd = -1;
  wd_fatal_close();
}
