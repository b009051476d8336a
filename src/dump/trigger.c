/*
 * Trigger episodes (trigger.h): one file per stall episode of the whole job, created with O_EXCL
 * semantics; each process stats one name, the next episode's; a node's poller relays episodes to
 * node-local memory.
 */
#include "dump/trigger.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "dump/dumpfile.h"

#define WD_EPISODE_MAX 1000000 /* a job dump directory never holds more episodes than this */

static int episode_path(char *out, size_t len, const char *dir, unsigned k) {
  int n = snprintf(out, len, "%s/episode-%u.trigger", dir, k);
  return n > 0 && (size_t)n < len ? 0 : -1;
}

static int relay_path(char *out, size_t len, const wd_trigger_watch *w, unsigned k) {
  int n = snprintf(out, len, "%s/trigger-%s-%u.trigger", w->relay_dir, w->job, k);
  return n > 0 && (size_t)n < len ? 0 : -1;
}

/* FNV-1a of the dump directory: every rank of a job names it the same way. */
static void job_key(const char *dir, char *out, size_t len) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char *p = (const unsigned char *)dir; *p; p++) h = (h ^ *p) * 1099511628211ull;
  snprintf(out, len, "%016llx", (unsigned long long)h);
}

/* Whole file (at most len-1 bytes, NUL-terminated); 0, or -1 when it cannot be opened or was
 * modified before not_before (when given). */
static int read_file_since(const char *path, char *buf, size_t len, const wd_trigger_watch *not_before) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  /* Triggers and verdict lines count only as the job wrote them: regular files of its user.
   * Anything else another member of a shared directory planted is ignored, said once. */
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    static atomic_int warned;
    if (!atomic_exchange(&warned, 1))
      WD_WARN("nccl-watchdog: ignoring %s: not a regular file of this job's user (uid %u): planted?",
              path, (unsigned)st.st_uid);
    close(fd);
    return -1;
  }
  if (not_before && (st.st_mtim.tv_sec < not_before->start_sec ||
                     (st.st_mtim.tv_sec == not_before->start_sec &&
                      st.st_mtim.tv_nsec < not_before->start_nsec))) {
    close(fd);
    return -1;
  }
  size_t n = 0;
  while (buf && n + 1 < len) {
    ssize_t r = read(fd, buf + n, len - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
  }
  if (buf && len) buf[n] = '\0';
  close(fd);
  return 0;
}

static int read_file(const char *path, char *buf, size_t len) { return read_file_since(path, buf, len, NULL); }

/* Creates path with data, atomically and only if it does not exist: the content goes to a
 * private temporary first, then link() publishes it (EEXIST: someone else was first). */
static int create_exclusive(const char *path, const char *data) {
  char tmp[WD_PATH_MAX + 96];
  const char *slash = strrchr(path, '/');
  int dl = slash ? (int)(slash - path) : 0;
  snprintf(tmp, sizeof tmp, "%.*s/.%s.%d.tmp", dl, path, slash ? slash + 1 : path, (int)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return -1;
  int ok = wd_write_all(fd, data, strlen(data)) == 0 && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  int rc = ok ? link(tmp, path) : -1;
  int err = ok ? errno : EIO;
  unlink(tmp);
  errno = err;
  return rc;
}

/* Tell the node's other processes (best effort: they still see it on their own stall). */
static void relay(wd_trigger_watch *w, unsigned k, const char *content) {
  char path[WD_PATH_MAX + 96];
  const char *data = content ? content : "{}";
  if (!w->relay_dir[0] || relay_path(path, sizeof path, w, k) != 0) return;
  if (create_exclusive(path, data) == 0) return;
  if (errno == ENOENT && mkdir(w->relay_dir, 0700) == 0) {
    create_exclusive(path, data);
    return;
  }
  /* A stale file of an earlier incarnation under this name: replace it. */
  struct stat st;
  if (errno == EEXIST && lstat(path, &st) == 0 &&
      (st.st_mtim.tv_sec < w->start_sec ||
       (st.st_mtim.tv_sec == w->start_sec && st.st_mtim.tv_nsec < w->start_nsec)) &&
      unlink(path) == 0)
    create_exclusive(path, data);
}

static int heartbeat_path(char *out, size_t len, const wd_trigger_watch *w) {
  int n = snprintf(out, len, "%s/poller-%s.alive", w->relay_dir, w->poller_key);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* The poller's election: a write lock on the heartbeat file, held open for the watch's life.
 * A record lock (fcntl), not flock: it belongs to the process, so a forked child (a data loader)
 * never keeps it after the poller died, and the kernel frees it with the process. 1: this
 * process holds it; 0: another process does; -1: no lock to be had here (then the launcher's
 * LOCAL_RANK decides alone, as before). The poller never opens the file again (closing any
 * descriptor of it would let the lock go). */
static int poller_claim(wd_trigger_watch *w) {
  char path[WD_PATH_MAX + 96];
  if (w->lock_held) return 1;
  if (heartbeat_path(path, sizeof path, w) != 0) return -1;
  int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0 && errno == ENOENT && mkdir(w->relay_dir, 0700) == 0)
    fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  struct stat st;
  if (fd < 0) return -1;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    close(fd);
    return -1;
  }
  struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
  if (fcntl(fd, F_SETLK, &fl) == 0) {
    w->lock_fd = fd;
    w->lock_held = 1;
    futimens(fd, NULL);
    return 1;
  }
  int held = errno == EAGAIN || errno == EACCES;
  close(fd);
  return held ? 0 : -1;
}

void wd_trigger_watch_close(wd_trigger_watch *w) {
  if (w->lock_held) close(w->lock_fd);
  w->lock_held = 0;
}

void wd_trigger_watch_init(wd_trigger_watch *w, const char *dump_dir, const char *relay_dir,
                           const char *host, int poller, uint64_t shared_every_ns) {
  memset(w, 0, sizeof(*w));
  snprintf(w->dir, sizeof w->dir, "%s/triggers", dump_dir ? dump_dir : "");
  snprintf(w->relay_dir, sizeof w->relay_dir, "%s", relay_dir ? relay_dir : "");
  job_key(dump_dir ? dump_dir : "", w->job, sizeof w->job);
  /* The poller's election is the job's on this node: the dump directory, and the Slurm job
   * where there is one (another job of the user that reuses the dump directory on this node,
   * stopped, would hold the lock for ever). Not the torchrun's id: replica groups differ there.
   * And the host name the dumps carry: the poller salvages its own host's ring files only, so
   * processes that share one ring directory under several host names (NCCL_WATCHDOG_HOSTNAME)
   * each need theirs. */
  {
    const char *sj = getenv("SLURM_JOB_ID");
    char both[WD_PATH_MAX + 192];
    snprintf(both, sizeof both, "%s\n%s\n%s", dump_dir ? dump_dir : "", sj ? sj : "", host ? host : "");
    job_key(both, w->poller_key, sizeof w->poller_key);
  }
  w->poller = !w->relay_dir[0] || (poller && poller_claim(w) != 0);
  if (poller && !w->poller)
    WD_INFO("another process of this job on this node polls the shared directory (it holds the "
            "lock of %s/poller-%s.alive): this one reads the node's relay", w->relay_dir, w->poller_key);
  /* Relay files live in node memory across jobs that reuse a dump directory: one written before
   * this watch started belongs to an earlier incarnation, whatever its episode number. */
  struct timespec now;
  clock_gettime(CLOCK_REALTIME_COARSE, &now); /* the clock file times come from */
  w->start_sec = now.tv_sec - 1; /* one second of slack for a file system's coarser stamps */
  w->start_nsec = now.tv_nsec;
  w->shared_every_ns = shared_every_ns;
  /* Never a triggers folder someone else made (a link, or another user's folder in a shared
   * directory): every process of the job runs as one user and picks the same fresh name. When
   * the dump directory is not there yet, the plain name (posted to later; it may appear). */
  if (dump_dir && dump_dir[0]) {
    char own[sizeof w->dir];
    if (wd_own_subdir(dump_dir, "triggers", own, sizeof own) == 0) snprintf(w->dir, sizeof w->dir, "%s", own);
  }
  /* Episodes of an earlier incarnation of the job are history: start after them. One stat per
   * past episode, once. */
  char path[WD_PATH_MAX + 64];
  struct stat st;
  unsigned k = 1;
  while (k < WD_EPISODE_MAX && episode_path(path, sizeof path, w->dir, k) == 0 &&
         stat(path, &st) == 0)
    k++;
  w->shared_checks += k;
  w->next = k;
}

int wd_trigger_post(wd_trigger_watch *w, const char *json, char *name_out, size_t name_len,
                    char *content, size_t content_len) {
  char path[WD_PATH_MAX + 64];
  if (episode_path(path, sizeof path, w->dir, w->next) != 0) return -1;
  int rc = create_exclusive(path, json ? json : "{}");
  if (rc != 0 && errno == ENOENT && mkdir(w->dir, 0700) == 0) rc = create_exclusive(path, json ? json : "{}");
  w->shared_checks++;
  int mine = rc == 0;
  if (!mine && errno != EEXIST) return -1;
  /* Someone else posted this episode first: the same episode, already dumped by us. */
  if (!mine && content && content_len) read_file(path, content, content_len);
  if (name_out && name_len) snprintf(name_out, name_len, "episode-%u.trigger", w->next);
  relay(w, w->next, mine ? json : content);
  w->next++;
  return mine;
}

int wd_trigger_post_fresh(wd_trigger_watch *w, const char *json, const char *join, char *name_out,
                          size_t name_len) {
  char path[WD_PATH_MAX + 64], other[512];
  struct stat st;
  unsigned k = w->next;
  /* Bounded: a few creates, and stats over at most 4,096 taken numbers (a flood's backlog). */
  for (int creates = 0, looks = 0; creates < 8 && looks < 4096 && k < WD_EPISODE_MAX; k++, looks++) {
    if (episode_path(path, sizeof path, w->dir, k) != 0) return -1;
    w->shared_checks++;
    if (lstat(path, &st) == 0) {
      if (join && read_file(path, other, sizeof other) == 0 && strstr(other, join)) {
        if (name_out && name_len) snprintf(name_out, name_len, "episode-%u.trigger", k);
        w->next = k + 1;
        return 0; /* another process of the job fell back the same way first: its episode */
      }
      continue;
    }
    creates++;
    if (create_exclusive(path, json ? json : "{}") != 0) {
      if (errno == EEXIST) continue;
      return -1;
    }
    if (name_out && name_len) snprintf(name_out, name_len, "episode-%u.trigger", k);
    relay(w, k, json);
    w->next = k + 1;
    return 1;
  }
  return -1;
}

/* The poller: one node-local touch per shared look. Another process: one node-local stat per
 * shared interval; a heartbeat older than three intervals (or none, once the poller had time to
 * write one) means no process of this node watches the shared directory any more. */
static void poller_liveness(wd_trigger_watch *w, uint64_t now) {
  char path[WD_PATH_MAX + 96];
  if (!w->relay_dir[0] || now < w->next_heartbeat_ns || heartbeat_path(path, sizeof path, w) != 0) return;
  w->next_heartbeat_ns = now + w->shared_every_ns;
  w->node_checks++;
  if (w->poller) {
    struct stat st;
    /* The file unlinked under us (a hand cleaning /dev/shm): the lock on it elects nobody, so
     * this process claims the name again, and steps down if another one holds it first. */
    if (w->lock_held && (fstat(w->lock_fd, &st) != 0 || st.st_nlink == 0)) {
      wd_trigger_watch_close(w);
      if (poller_claim(w) == 0) {
        w->poller = 0;
        w->started_ns = 0;
        WD_INFO("another process of this job on this node polls the shared directory now: this one "
                "reads the node's relay");
        return;
      }
    }
    if (w->lock_held) {
      futimens(w->lock_fd, NULL);
      return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
    if (fd >= 0) {
      futimens(fd, NULL);
      close(fd);
    } else if (errno == ENOENT && mkdir(w->relay_dir, 0700) == 0) {
      w->next_heartbeat_ns = now; /* the directory is there now */
    }
    return;
  }
  if (!w->started_ns) w->started_ns = now;
  uint64_t stale_ns = 3 * w->shared_every_ns;
  if (now - w->started_ns < stale_ns + w->shared_every_ns) return; /* the poller's first beat */
  struct stat st;
  struct timespec wall;
  clock_gettime(CLOCK_REALTIME_COARSE, &wall); /* the clock file times come from */
  int64_t stale_s = (int64_t)(stale_ns / 1000000000ull) + 1;
  int there = lstat(path, &st) == 0 && S_ISREG(st.st_mode);
  int64_t age = there ? (int64_t)wall.tv_sec - (int64_t)st.st_mtim.tv_sec : INT64_MAX;
  /* Stale: the lock is free (the poller died) and this process took it, or the poller that
   * still holds it gave no sign for twice as long (its watchdog is stuck: then every process
   * that finds it so polls, as before there was a lock). */
  int stale = age > stale_s && (poller_claim(w) != 0 || age > 2 * stale_s);
  if (stale) {
    w->poller = 1;
    w->took_over = 1;
    WD_INFO("this node's trigger poller is gone (no heartbeat in %s): this process polls the shared "
            "directory now", path);
    /* Its own heartbeat at once: the node's other processes then see a live poller again. */
    w->next_heartbeat_ns = now;
    poller_liveness(w, now);
  }
}

int wd_trigger_poll(wd_trigger_watch *w, uint64_t now, char *name_out, size_t name_len,
                    char *content, size_t content_len) {
  char path[WD_PATH_MAX + 96];
  int found = 0;
  poller_liveness(w, now);
  if (w->relay_dir[0] && relay_path(path, sizeof path, w, w->next) == 0) {
    w->node_checks++;
    found = read_file_since(path, content, content_len, w) == 0;
  }
  if (!found && w->poller && now >= w->next_shared_ns) {
    w->next_shared_ns = now + w->shared_every_ns;
    if (episode_path(path, sizeof path, w->dir, w->next) == 0) {
      w->shared_checks++;
      found = read_file(path, content, content_len) == 0;
      if (found) relay(w, w->next, content);
    }
  }
  if (!found) return 0;
  if (name_out && name_len) snprintf(name_out, name_len, "episode-%u.trigger", w->next);
  w->next++;
  return 1;
}

/* ---- verdict lines ---- */

static int verdict_path(char *out, size_t len, const char *dir, unsigned k) {
  int n = snprintf(out, len, "%s/verdict-%u.line", dir, k);
  return n > 0 && (size_t)n < len ? 0 : -1;
}

static int verdict_relay_path(char *out, size_t len, const wd_trigger_watch *w, unsigned k) {
  int n = snprintf(out, len, "%s/verdict-%s-%u.line", w->relay_dir, w->job, k);
  return n > 0 && (size_t)n < len ? 0 : -1;
}

static void relay_verdict(wd_trigger_watch *w, unsigned k, const char *line) {
  char path[WD_PATH_MAX + 96];
  if (!w->relay_dir[0] || verdict_relay_path(path, sizeof path, w, k) != 0) return;
  if (create_exclusive(path, line) != 0 && errno == ENOENT && mkdir(w->relay_dir, 0700) == 0)
    create_exclusive(path, line);
}

int wd_trigger_post_verdict(wd_trigger_watch *w, unsigned k, const char *line) {
  char path[WD_PATH_MAX + 64];
  if (verdict_path(path, sizeof path, w->dir, k) != 0) return -1;
  w->shared_checks++;
  int rc = create_exclusive(path, line);
  int err = errno;
  /* Published already (the analyzer does it itself): this node is told either way. */
  if (rc == 0 || err == EEXIST) relay_verdict(w, k, line);
  errno = err;
  return rc;
}

int wd_trigger_verdict_posted(wd_trigger_watch *w, unsigned k) {
  char path[WD_PATH_MAX + 64], line[64];
  if (verdict_path(path, sizeof path, w->dir, k) != 0) return 0;
  w->shared_checks++;
  return read_file(path, line, sizeof line) == 0 && line[0];
}

static void chomp(char *s) {
  char *nl = strchr(s, '\n');
  if (nl) *nl = '\0';
}

int wd_trigger_verdict_poll(wd_trigger_watch *w, unsigned k, uint64_t now, char *line, size_t len) {
  char path[WD_PATH_MAX + 96];
  if (w->relay_dir[0] && verdict_relay_path(path, sizeof path, w, k) == 0) {
    w->node_checks++;
    if (read_file_since(path, line, len, w) == 0 && line[0]) {
      chomp(line);
      return 1;
    }
  }
  if (!w->poller || now < w->next_verdict_ns) return 0;
  w->next_verdict_ns = now + w->shared_every_ns;
  if (verdict_path(path, sizeof path, w->dir, k) != 0) return 0;
  w->shared_checks++;
  if (read_file(path, line, len) != 0 || !line[0]) return 0;
  relay_verdict(w, k, line);
  chomp(line);
  return 1;
}
