/* Leftovers of ended processes and earlier jobs in the node's ring directory (leftovers.h). */
#include "watchdog/leftovers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

static int has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int has_prefix(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* nccl-watchdog-<host>-<pid>.prom of this host whose pid is gone and which was not rewritten
 * for a while (a pid reused since only keeps a stale file a little longer). */
static int metrics_stale(const char *name, const char *host, const struct stat *st, time_t now) {
  char prefix[128];
  snprintf(prefix, sizeof prefix, "nccl-watchdog-%s-", host);
  if (!has_prefix(name, prefix) || !has_suffix(name, ".prom")) return 0;
  char *end;
  long pid = strtol(name + strlen(prefix), &end, 10);
  if (end == name + strlen(prefix) || strcmp(end, ".prom") != 0 || pid <= 0 || pid == (long)getpid()) return 0;
  if (now - st->st_mtime < WD_LEFTOVERS_METRICS_S) return 0;
  return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

static int relay_old(const char *name, const struct stat *st, time_t now) {
  int relay = (has_prefix(name, "trigger-") && has_suffix(name, ".trigger")) ||
              (has_prefix(name, "poller-") && has_suffix(name, ".alive")) ||
              (has_prefix(name, "verdict-") && has_suffix(name, ".line"));
  return relay && now - st->st_mtime >= WD_LEFTOVERS_RELAY_S;
}

static void sweep_dir(const char *dir, const char *host, int *metrics, int *relay) {
  DIR *d = opendir(dir);
  if (!d) return;
  time_t now = time(NULL);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    struct stat st;
    /* Only this user's regular files (the directory is 0700, but never through a link). */
    if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode) || st.st_uid != geteuid())
      continue;
    int m = metrics_stale(e->d_name, host, &st, now), r = !m && relay_old(e->d_name, &st, now);
    if ((m || r) && unlinkat(dirfd(d), e->d_name, 0) == 0) {
      *metrics += m;
      *relay += r;
    }
  }
  closedir(d);
}

int wd_leftovers_sweep(const char *ring_dir, const char *metrics_dir, const char *host) {
  int metrics = 0, relay = 0;
  if (ring_dir && ring_dir[0]) sweep_dir(ring_dir, host, &metrics, &relay);
  if (metrics_dir && metrics_dir[0] && (!ring_dir || strcmp(metrics_dir, ring_dir) != 0))
    sweep_dir(metrics_dir, host, &metrics, &relay);
  if (metrics || relay)
    WD_WARN("removed from this node's ring directory %d metrics file%s of ended processes (no longer "
            "exported as live) and %d relay file%s (triggers, heartbeats, verdict lines) over %d h old",
            metrics, metrics == 1 ? "" : "s", relay, relay == 1 ? "" : "s", (int)(WD_LEFTOVERS_RELAY_S / 3600));
  return metrics + relay;
}
