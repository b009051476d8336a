/*
 * Job-wide dumps without a trigger storm: one trigger per stall episode for the whole job, O(1)
 * metadata operations per process (docs/architecture.md, "Trigger episodes").
 *
 * Episode k of a job is the file <dump dir>/triggers/episode-<k>.trigger, created with its full
 * content by link() (fails with EEXIST when it exists: O_EXCL semantics), so only the first
 * stalled rank posts it. A process watches only for the next episode it has not answered: one
 * stat of one name, no directory listing. Only one process per node (the poller: the one of
 * LOCAL_RANK 0 or unset that holds the heartbeat's lock, or any process that has no node-local
 * relay directory) stats the shared file system, at its own longer interval, and relays what it
 * finds to the node-local relay directory (memory), where the node's other processes stat it
 * every poll.
 */
#ifndef WD_TRIGGER_H
#define WD_TRIGGER_H

#include <stddef.h>
#include <stdint.h>

#include "base/config.h"

typedef struct wd_trigger_watch {
  char dir[WD_PATH_MAX];       /* <dump dir>/triggers */
  char relay_dir[WD_PATH_MAX]; /* node-local (ring directory), "" = none */
  char job[20];                /* hash of the dump directory: names this job's relay files */
  char poller_key[20];         /* ... of SLURM_JOB_ID and the host: the poller's heartbeat */
  int poller;                  /* stats the shared directory */
  uint64_t shared_every_ns, next_shared_ns;
  unsigned next;               /* the next episode, the first not answered yet */
  int64_t start_sec, start_nsec; /* when the watch started: older relay files are stale */
  uint64_t shared_checks;      /* metadata operations on the shared file system */
  uint64_t node_checks;        /* ... and on the node-local relay */
  uint64_t next_verdict_ns;    /* the poller's next look for a verdict line on the shared FS */
  /* The node's poller leaves a heartbeat in the relay directory at each of its looks; a process
   * that finds it stale (the poller died: SIGKILL, OOM) polls the shared directory itself, so
   * the node's other ranks still answer episodes and log the verdict. */
  uint64_t started_ns, next_heartbeat_ns;
  int took_over;
  /* The heartbeat file, held open with a write lock by the poller: the node's processes that
   * could poll (LOCAL_RANK 0 or unset, which several replica groups under their own launchers
   * all are) elect one by it, and the kernel frees it when that process dies. */
  int lock_held, lock_fd;
} wd_trigger_watch;

/* Start watching: episodes already in the directory are history (never answered); the first
 * missing one is the next. poller: this process may poll the shared directory; it does when no
 * other process of the job on this node holds the heartbeat's lock (else only the relay, when
 * relay_dir is set). host: the name this process's dumps carry; each host name elects its own
 * poller, since a poller salvages only the ring files of its own host. */
void wd_trigger_watch_init(wd_trigger_watch *w, const char *dump_dir, const char *relay_dir,
                           const char *host, int poller, uint64_t shared_every_ns);

/* Lets the heartbeat's lock go (the watchdog stops; NCCL may load the plugin again). */
void wd_trigger_watch_close(wd_trigger_watch *w);

/* This process stalled: post episode w->next with json as its content. Returns 1 when this
 * process posted it, 0 when another process had (its content copied to content), -1 on error.
 * Either way the episode counts as answered (w->next moves on) and is relayed on this node. */
int wd_trigger_post(wd_trigger_watch *w, const char *json, char *name_out, size_t name_len,
                    char *content, size_t content_len);

/* One check for episode w->next (relay every call; the shared directory when this process is
 * the poller and its interval has passed). Returns 1 with the episode's name and content (up to
 * content_len-1 bytes, NUL-terminated) when it exists (w->next moves on), else 0. */
int wd_trigger_poll(wd_trigger_watch *w, uint64_t now, char *name_out, size_t name_len,
                    char *content, size_t content_len);

/* Posts json as an episode of this process's own under the first free number from the cursor
 * on (a stat per taken number, at most 4,096, and a few creates), and moves the cursor past it: for a stall
 * whose joined episode never got a verdict. An episode on the way whose trigger holds join
 * (another process of the job that fell back for the same communicator) is joined instead.
 * 1 posted, 0 joined, -1 neither. */
int wd_trigger_post_fresh(wd_trigger_watch *w, const char *json, const char *join, char *name_out,
                          size_t name_len);

/* The automatic verdict of episode k (watchdog/autoverdict.h): its first line, published by the
 * episode's opener as <dump dir>/triggers/verdict-<k>.line (whole or not at all) and relayed to
 * its node. 0, or -1 (errno). */
int wd_trigger_post_verdict(wd_trigger_watch *w, unsigned k, const char *line);

/* Whether episode k's verdict line was published in the shared folder (one shared read). */
int wd_trigger_verdict_posted(wd_trigger_watch *w, unsigned k);

/* One look for episode k's verdict line, as for episodes: the node-local relay every call, the
 * shared directory when this process is the poller and its interval has passed (then relayed).
 * Returns 1 with the line (NUL-terminated, no newline), else 0. */
int wd_trigger_verdict_poll(wd_trigger_watch *w, unsigned k, uint64_t now, char *line, size_t len);

#endif
