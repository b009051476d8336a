/*
 * Trigger files: one rank's stall makes every rank of the job dump. A trigger is written like a
 * dump (dumpfile.c); watchers stat the directory once a poll and read a trigger they have not
 * answered yet.
 */
#include "dump/trigger.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dump/dumpfile.h"

#define WD_TRIGGER_PREFIX "trigger-"
/* Not ".json": the dump directory's *.json files are dumps only (tools that glob them, schema
 * validators). The content is still JSON. */
#define WD_TRIGGER_SUFFIX ".trigger"


typedef struct wd_trig_name {
  char host[64];
  int pid;
} wd_trig_name;

static int trigger_name(char *out, size_t len, const void *arg, unsigned seq) {
  const wd_trig_name *t = arg;
  int n = snprintf(out, len, WD_TRIGGER_PREFIX "%s-%d-%u" WD_TRIGGER_SUFFIX, t->host, t->pid, seq);
  return n > 0 && (size_t)n < len ? 0 : -1;
}

static atomic_uint wd_trigger_seq;

int wd_trigger_post(const char *dir, const char *host, int pid, const char *json, char *name_out,
                    size_t name_len) {
  if (!dir || !*dir) {
    errno = EINVAL;
    return -1;
  }
  wd_trig_name t;
  wd_file_sanitize(t.host, sizeof(t.host), host, "unknown");
  t.pid = pid;
  unsigned seq = atomic_fetch_add(&wd_trigger_seq, 1) + 1;
  const char *data = json ? json : "{}";
  return wd_file_write_new(dir, trigger_name, &t, seq, data, strlen(data), name_out, name_len);
}

static int is_trigger(const wd_trigger_watch *w, const char *name) {
  size_t n = strlen(name);
  size_t sfx = sizeof(WD_TRIGGER_SUFFIX) - 1;
  if (n >= sizeof(w->seen[0]) || n <= sizeof(WD_TRIGGER_PREFIX) - 1 + sfx) return 0;
  if (strncmp(name, WD_TRIGGER_PREFIX, sizeof(WD_TRIGGER_PREFIX) - 1) != 0) return 0;
  if (strcmp(name + n - sfx, WD_TRIGGER_SUFFIX) != 0) return 0;
  return strncmp(name, w->self_prefix, strlen(w->self_prefix)) != 0;
}

static int seen(const wd_trigger_watch *w, const char *name) {
  unsigned n = w->nseen < WD_TRIGGER_SEEN ? w->nseen : WD_TRIGGER_SEEN;
  for (unsigned i = 0; i < n; i++)
    if (strcmp(w->seen[i], name) == 0) return 1;
  return 0;
}

static void remember(wd_trigger_watch *w, const char *name) {
  char *slot = w->seen[w->nseen % WD_TRIGGER_SEEN];
  size_t n = strnlen(name, sizeof(w->seen[0]) - 1); /* is_trigger() admits shorter names only */
  memcpy(slot, name, n);
  slot[n] = 0;
  w->nseen++;
}

/* Directory mtime, or -1 when it cannot be read. */
static int dir_mtime(const char *dir, int64_t *sec, int64_t *nsec) {
  struct stat st;
  if (stat(dir, &st) != 0) return -1;
  *sec = st.st_mtim.tv_sec;
  *nsec = st.st_mtim.tv_nsec;
  return 0;
}

/* First trigger in dir not answered yet (copied to name), 1; 0 when none. */
/*
 * A directory whose mtime is this recent is scanned again on the next poll even when its mtime
 * did not move: on file systems with coarse timestamps a second trigger can land within the same
 * tick as the first.
 */
#define WD_MTIME_SLACK_SEC 2

static int scan(wd_trigger_watch *w, char *name, size_t len) {
  DIR *d = opendir(w->dir);
  if (!d) return 0;
  int found = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (!is_trigger(w, de->d_name) || seen(w, de->d_name)) continue;
    /* A trigger older than the watch, or older than the newest one taken by more than the
     * slack, is history (a previous incarnation of the job, or a burst already answered): never
     * answer it, even once its name has left the ring of seen names. */
    struct stat st;
    if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (st.st_mtim.tv_sec < w->floor_sec ||
        (st.st_mtim.tv_sec == w->floor_sec && st.st_mtim.tv_nsec < w->floor_nsec))
      continue; /* not remembered by name: that would push recent names out of the ring */
    /* Triggers of the same burst (within the slack of the newest taken) are still returned:
     * readdir order is not age order. */
    if (st.st_mtim.tv_sec - WD_MTIME_SLACK_SEC > w->floor_sec) {
      w->floor_sec = st.st_mtim.tv_sec - WD_MTIME_SLACK_SEC;
      w->floor_nsec = st.st_mtim.tv_nsec;
    }
    snprintf(name, len, "%s", de->d_name);
    found = 1;
    break;
  }
  closedir(d);
  return found;
}

void wd_trigger_watch_init(wd_trigger_watch *w, const char *dir, const char *host, int pid) {
  memset(w, 0, sizeof(*w));
  snprintf(w->dir, sizeof(w->dir), "%s", dir ? dir : "");
  char h[64];
  wd_file_sanitize(h, sizeof(h), host, "unknown");
  snprintf(w->self_prefix, sizeof(w->self_prefix), WD_TRIGGER_PREFIX "%s-%d-", h, pid);
  if (dir_mtime(w->dir, &w->mtime_sec, &w->mtime_nsec) != 0) {
    w->mtime_sec = -1;
    return;
  }
  /* The directory's own mtime, not this host's clock: on a shared file system the server stamps
   * both, so skew between nodes cannot hide a new trigger. */
  w->floor_sec = w->mtime_sec;
  w->floor_nsec = w->mtime_nsec;
  DIR *d = opendir(w->dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d)) != NULL)
    if (is_trigger(w, de->d_name) && !seen(w, de->d_name)) remember(w, de->d_name);
  closedir(d);
}


int wd_trigger_poll(wd_trigger_watch *w, char *name_out, size_t name_len, char *content,
                    size_t content_len) {
  if (!w || !w->dir[0]) return 0;
  int64_t sec, nsec;
  if (dir_mtime(w->dir, &sec, &nsec) != 0) return 0;
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  int changed = sec != w->mtime_sec || nsec != w->mtime_nsec;
  int64_t age = (int64_t)now.tv_sec - sec; /* a server clock far ahead must not mean "always" */
  int recent = age >= -WD_MTIME_SLACK_SEC && age <= WD_MTIME_SLACK_SEC;
  if (!changed && !recent) return 0;
  char name[256];
  if (!scan(w, name, sizeof(name))) {
    w->mtime_sec = sec;
    w->mtime_nsec = nsec;
    return 0;
  }
  /* Leave the stored mtime alone: the caller polls again for further triggers. */
  remember(w, name);
  if (name_out && name_len) snprintf(name_out, name_len, "%s", name);
  if (content && content_len) {
    size_t got = 0;
    int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int fd = dfd >= 0 ? openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    while (fd >= 0 && got + 1 < content_len) {
      ssize_t r = read(fd, content + got, content_len - 1 - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += (size_t)r;
    }
    content[got] = 0;
    if (fd >= 0) close(fd);
    if (dfd >= 0) close(dfd);
  }
  return 1;
}
