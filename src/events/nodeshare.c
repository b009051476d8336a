/* The share of the ring directory's file system this process's ring files may take (nodeshare.h). */
#include "events/nodeshare.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <time.h>
#include <unistd.h>

#include "base/host.h"
#include "base/log.h"
#include "flightrec/ringfile.h"

static pthread_mutex_t ns_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t ns_mine;    /* bytes of ring files this process was admitted */
static char ns_note[320];   /* the first refusal, for every dump */

int wd_nodeshare_decide(uint64_t fs_total, uint64_t fs_avail, uint64_t node_files, uint64_t mine,
                        int local_ranks, uint64_t need, int memory_fs) {
  if (fs_total == 0) return 1; /* the file system does not say: the file's creation will */
  /* A ring directory on a disk (NCCL_WATCHDOG_RING_DIR set there) shares nothing with NCCL's
   * segments: only its last twentieth is left alone. */
  if (!memory_fs) return need <= fs_avail && fs_avail - need >= fs_total / 20;
  if (local_ranks < 1) local_ranks = 1;
  uint64_t node_part = fs_total / 8;
  /* NCCL's share: at least half of the file system stays free. */
  if (need > fs_avail || fs_avail - need < fs_total / 2) return 0;
  if (node_files + need > node_part) return 0;
  if (mine + need > node_part / (uint64_t)local_ranks) return 0;
  return 1;
}

static int env_int(const char *name) {
  const char *v = getenv(name);
  if (!v || !*v) return 0;
  char *end;
  long n = strtol(v, &end, 10);
  /* SLURM_NTASKS_PER_NODE may read "8(x2)": its leading number is this node's. */
  return end != v && n > 0 && n < 100000 ? (int)n : 0;
}

/* One ring file of the directory. */
typedef struct ns_file {
  char name[256];
  uint64_t bytes;
  time_t mtime;
} ns_file;

/* What one pass over the directory tells: the plugin's files on the node, the processes they are
 * of (this one included), and the files past their grace period whose process has ended for
 * certain (the same machine and PID namespace, and /proc says the pid which started then is
 * gone): the leftovers that may go. /proc is asked once per process, and only where it matters. */
typedef struct ns_scan {
  uint64_t files;
  int procs;
  ns_file *old;
  size_t nold;
} ns_scan;

static void ns_scan_dir(DIR *d, int count_procs, ns_scan *out) {
  memset(out, 0, sizeof(*out));
  out->procs = 1;
  wd_process_id me;
  wd_process_identity(&me);
  time_t now = time(NULL);
  int32_t pids[256];
  int np = 0;
  size_t cap = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.' || len <= 5 || strcmp(e->d_name + len - 5, ".ring") != 0) continue;
    int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st;
    wd_rf_header h;
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
             pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && memcmp(h.magic, WD_RF_MAGIC, 8) == 0;
    close(fd);
    if (!ok) continue;
    out->files += (uint64_t)st.st_blocks * 512u;
    /* /proc speaks for processes of this machine and PID namespace only; others count as live. */
    int here = h.where_sum == wd_rf_where_sum(&h) && wd_rf_of_place(&h, me.boot_id, me.pidns_ino);
    int old = now - st.st_mtime >= WD_NODESHARE_GRACE_S;
    int seen = h.pid <= 0 || h.pid == getpid();
    for (int i = 0; i < np && !seen; i++) seen = pids[i] == h.pid;
    if (!(count_procs && !seen) && !(here && old)) continue;
    int gone = here && h.pid > 0 && h.pid != getpid() && wd_proc_gone(h.pid, h.process_start_wall_ns);
    if (count_procs && !seen && np < 256) {
      pids[np++] = h.pid;
      out->procs += !gone;
    }
    if (!gone || !old) continue;
    if (out->nold == cap) {
      size_t c = cap ? cap * 2 : 16;
      ns_file *p = realloc(out->old, c * sizeof(*p));
      if (!p) continue;
      out->old = p, cap = c;
    }
    ns_file *f = &out->old[out->nold++];
    snprintf(f->name, sizeof f->name, "%s", e->d_name);
    f->bytes = (uint64_t)st.st_blocks * 512u;
    f->mtime = st.st_mtime;
  }
}

static int ns_ranks_env(void) {
  int n = env_int("LOCAL_WORLD_SIZE");
  if (!n) n = env_int("SLURM_NTASKS_PER_NODE");
  if (!n) n = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
  return n;
}

int wd_nodeshare_local_ranks(const char *dir) {
  int n = ns_ranks_env();
  if (n) return n;
  DIR *d = opendir(dir);
  if (!d) return 1;
  ns_scan sc;
  ns_scan_dir(d, 1, &sc);
  closedir(d);
  free(sc.old);
  return sc.procs;
}

static int cmp_mtime(const void *a, const void *b) {
  const ns_file *x = a, *y = b;
  return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

int wd_nodeshare_admit(const char *dir, uint64_t need, char *why, size_t why_len) {
  if (why && why_len) why[0] = '\0';
  struct statfs vfs;
  if (statfs(dir, &vfs) != 0) return 1; /* not made yet, or unreadable: the creation will tell */
  uint64_t total = (uint64_t)vfs.f_blocks * (uint64_t)vfs.f_bsize, avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_bsize;
  /* /dev/shm and other memory file systems: where NCCL's segments live. */
  int memory_fs = vfs.f_type == TMPFS_MAGIC || vfs.f_type == RAMFS_MAGIC;
  int ranks = ns_ranks_env();
  DIR *d = opendir(dir);
  ns_scan sc = {0, 1, NULL, 0};
  if (d) ns_scan_dir(d, !ranks, &sc);
  if (!ranks) ranks = sc.procs;
  uint64_t files = sc.files;
  ns_file *old = sc.old;
  size_t nold = sc.nold;
  pthread_mutex_lock(&ns_lock);
  int ok = wd_nodeshare_decide(total, avail, files, ns_mine, ranks, need, memory_fs);
  /* Leftovers past their grace period, oldest first, while they are what stands in the way. */
  size_t gone = 0;
  uint64_t gone_bytes = 0;
  if (!ok && nold && d) {
    qsort(old, nold, sizeof(*old), cmp_mtime);
    for (size_t i = 0; i < nold && !ok; i++) {
      if (unlinkat(dirfd(d), old[i].name, 0) != 0) continue;
      gone++, gone_bytes += old[i].bytes;
      files -= old[i].bytes < files ? old[i].bytes : files;
      avail += old[i].bytes;
      ok = wd_nodeshare_decide(total, avail, files, ns_mine, ranks, need, memory_fs);
    }
  }
  if (gone)
    WD_WARN("%s: removed %zu post-mortem ring file%s (%.1f MiB) of processes that ended over %d h ago, the "
            "oldest first, to make room within the plugin's part of it", dir, gone, gone == 1 ? "" : "s",
            (double)gone_bytes / 1048576.0, (int)(WD_NODESHARE_GRACE_S / 3600));
  if (ok) {
    ns_mine += need;
  } else if (why && why_len) {
    snprintf(why, why_len,
             "%s holds %.1f MiB (%.1f MiB free, the plugin's ring files %.1f MiB): a ring file of %.1f MiB would "
             "take more than the plugin's part (1/8 of it for the node's %d local rank%s: %.1f MiB each) or leave "
             "less than half free for NCCL's own shared memory",
             dir, (double)total / 1048576.0, (double)avail / 1048576.0, (double)files / 1048576.0,
             (double)need / 1048576.0, ranks, ranks == 1 ? "" : "s", (double)total / 8 / (double)ranks / 1048576.0);
    if (!ns_note[0]) snprintf(ns_note, sizeof ns_note, "%s", why);
  }
  pthread_mutex_unlock(&ns_lock);
  if (d) closedir(d);
  free(old);
  return ok;
}

void wd_nodeshare_release(uint64_t bytes) {
  pthread_mutex_lock(&ns_lock);
  ns_mine -= bytes < ns_mine ? bytes : ns_mine;
  pthread_mutex_unlock(&ns_lock);
}

void wd_nodeshare_note(char *out, size_t len) {
  pthread_mutex_lock(&ns_lock);
  snprintf(out, len, "%s", ns_note);
  pthread_mutex_unlock(&ns_lock);
}
