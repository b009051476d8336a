/*
 * Dump files: where they go, how they are written (temporary file, fsync, rename without
 * replacing, fsync of the directory), and the trigger files through which one rank's stall makes
 * every rank of the job dump.
 */
#include "dumpfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../plugin/log.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

#define WD_TRIGGER_PREFIX "trigger-"
#define WD_MAX_SEQ_TRIES 10000

/* Copy s keeping only [A-Za-z0-9._-] (others become '_'); "" becomes dflt. */
static void sanitize(char *out, size_t len, const char *s, const char *dflt) {
  size_t o = 0;
  for (; s && *s && o + 1 < len; s++) {
    char ch = *s;
    int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
             ch == '.' || ch == '_' || ch == '-';
    out[o++] = ok ? ch : '_';
  }
  out[o] = 0;
  if (!o) snprintf(out, len, "%s", dflt);
}

void wd_hostname(char *out, size_t len) {
  if (!out || !len) return;
  char buf[256];
  if (gethostname(buf, sizeof(buf)) != 0) buf[0] = 0;
  buf[sizeof(buf) - 1] = 0;
  char *dot = strchr(buf, '.');
  if (dot) *dot = 0;
  snprintf(out, len, "%s", buf[0] ? buf : "unknown");
}

/* ------------------------------------------------------------------------------------------ */
/* Directory.                                                                                  */

static int usable_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && access(path, W_OK | X_OK) == 0;
}

/* mkdir -p with mode 0700 for the components that are missing. */
static int make_dirs(const char *path) {
  char buf[WD_PATH_MAX];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof(buf)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  memcpy(buf, path, n + 1);
  while (n > 1 && buf[n - 1] == '/') buf[--n] = 0;
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
  return usable_dir(buf) ? 0 : -1;
}

static atomic_int wd_dir_warned;

int wd_dumpdir_resolve(const wd_config *cfg, char *out, size_t len) {
  if (!out || !len) return -1;
  char want[WD_PATH_MAX];
  if (cfg && cfg->dump_dir[0]) {
    snprintf(want, sizeof(want), "%.*s", (int)sizeof(want) - 1, cfg->dump_dir);
  } else {
    const char *job = getenv("SLURM_JOB_ID");
    if (!job || !*job) job = getenv("TORCHELASTIC_RUN_ID");
    if (!job || !*job) job = "local";
    char safe[128];
    sanitize(safe, sizeof(safe), job, "local");
    /* Absolute, so the path in logs and trigger files does not depend on a later chdir. */
    char cwd[WD_PATH_MAX - 160];
    if (getcwd(cwd, sizeof(cwd)) && strcmp(cwd, "/") != 0)
      snprintf(want, sizeof(want), "%s/nccl-watchdog-%s", cwd, safe);
    else if (getcwd(cwd, sizeof(cwd)))
      snprintf(want, sizeof(want), "/nccl-watchdog-%s", safe);
    else
      snprintf(want, sizeof(want), "nccl-watchdog-%s", safe);
  }
  if (make_dirs(want) == 0 && strlen(want) < len) {
    snprintf(out, len, "%s", want);
    return 0;
  }
  int err = errno;
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp || !usable_dir(tmp)) tmp = "/tmp";
  if (!usable_dir(tmp) || strlen(tmp) >= len) {
    if (!atomic_exchange(&wd_dir_warned, 1))
      WD_WARN("nccl-watchdog: cannot use dump directory %s (%s) nor %s; dumps are disabled", want,
              strerror(err), tmp);
    return -1;
  }
  if (!atomic_exchange(&wd_dir_warned, 1))
    WD_WARN("nccl-watchdog: cannot use dump directory %s (%s); writing dumps to %s instead", want,
            strerror(err), tmp);
  snprintf(out, len, "%s", tmp);
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Atomic write.                                                                               */

static int write_all(int fd, const char *data, size_t len) {
  while (len) {
    ssize_t w = write(fd, data, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (w == 0) {
      errno = EIO;
      return -1;
    }
    data += w;
    len -= (size_t)w;
  }
  return 0;
}

/* Rename without replacing: renameat2(RENAME_NOREPLACE) where the kernel and the file system
 * have it, else link() + unlink(), which fails with EEXIST just the same. */
static int rename_noreplace(int dfd, const char *from, const char *to) {
#ifdef SYS_renameat2
  static atomic_int unsupported;
  if (!atomic_load_explicit(&unsupported, memory_order_relaxed)) {
    if (syscall(SYS_renameat2, dfd, from, dfd, to, RENAME_NOREPLACE) == 0) return 0;
    if (errno != ENOSYS && errno != EINVAL) return -1;
    atomic_store_explicit(&unsupported, 1, memory_order_relaxed);
  }
#endif
  if (linkat(dfd, from, dfd, to, 0) != 0) return -1;
  unlinkat(dfd, from, 0);
  return 0;
}

typedef int (*wd_name_fn)(char *out, size_t len, const void *arg, unsigned seq);

/*
 * Writes data under the first name name_fn(seq), name_fn(seq+1), ... that does not exist yet.
 * name_out receives the file name, *seq_out the sequence used.
 */
static int atomic_write(const char *dir, wd_name_fn name_fn, const void *arg, unsigned seq,
                        const char *data, size_t len, char *name_out, size_t name_len) {
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return -1;
  char name[256], tmp[300];
  int fd = -1, err = 0;
  unsigned tries = 0;
  /* The temporary name follows the final one, so two writers never share it. */
  for (;; seq++) {
    if (++tries > WD_MAX_SEQ_TRIES) {
      err = EEXIST;
      goto fail;
    }
    if (name_fn(name, sizeof(name), arg, seq) != 0) {
      err = ENAMETOOLONG;
      goto fail;
    }
    snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
    if (faccessat(dfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0) continue;
    fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) break;
    if (errno != EEXIST) {
      err = errno;
      goto fail;
    }
  }
  if (write_all(fd, data, len) != 0 || fsync(fd) != 0) {
    err = errno;
    goto fail_tmp;
  }
  if (close(fd) != 0) {
    fd = -1;
    err = errno;
    goto fail_tmp;
  }
  fd = -1;
  /* Another writer may take the name between our check and the rename: then take the next. */
  while (rename_noreplace(dfd, tmp, name) != 0) {
    if (errno != EEXIST || ++tries > WD_MAX_SEQ_TRIES) {
      err = errno;
      goto fail_tmp;
    }
    seq++;
    if (name_fn(name, sizeof(name), arg, seq) != 0) {
      err = ENAMETOOLONG;
      goto fail_tmp;
    }
  }
  fsync(dfd); /* the new entry itself must survive a crash; failure here is not fatal */
  close(dfd);
  if (name_out && name_len) snprintf(name_out, name_len, "%s", name);
  return 0;
fail_tmp:
  if (fd >= 0) close(fd);
  unlinkat(dfd, tmp, 0);
fail:
  close(dfd);
  errno = err;
  return -1;
}

typedef struct wd_dump_name {
  char host[64];
  int pid;
  char reason[32];
} wd_dump_name;

static int dump_name(char *out, size_t len, const void *arg, unsigned seq) {
  const wd_dump_name *d = arg;
  int n = snprintf(out, len, "%s-%d-%04u-%s.json", d->host, d->pid, seq, d->reason);
  return n > 0 && (size_t)n < len ? 0 : -1;
}

static int join_path(char *out, size_t len, const char *dir, const char *name) {
  if (!out || !len) return 0;
  size_t dl = strlen(dir);
  int n = snprintf(out, len, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", name);
  return n > 0 && (size_t)n < len ? 0 : -1;
}

int wd_dumpfile_write(const char *dir, const char *host, int pid, unsigned seq, const char *reason,
                      const char *data, size_t len, char *path_out, size_t path_len) {
  if (!dir || !*dir || (!data && len)) {
    errno = EINVAL;
    return -1;
  }
  wd_dump_name d;
  sanitize(d.host, sizeof(d.host), host, "unknown");
  sanitize(d.reason, sizeof(d.reason), reason, "dump");
  d.pid = pid;
  char name[256];
  if (atomic_write(dir, dump_name, &d, seq, data ? data : "", len, name, sizeof(name)) != 0)
    return -1;
  if (join_path(path_out, path_len, dir, name) != 0) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Trigger files.                                                                              */

typedef struct wd_trig_name {
  char host[64];
  int pid;
} wd_trig_name;

static int trigger_name(char *out, size_t len, const void *arg, unsigned seq) {
  const wd_trig_name *t = arg;
  int n = snprintf(out, len, WD_TRIGGER_PREFIX "%s-%d-%u.json", t->host, t->pid, seq);
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
  sanitize(t.host, sizeof(t.host), host, "unknown");
  t.pid = pid;
  unsigned seq = atomic_fetch_add(&wd_trigger_seq, 1) + 1;
  const char *data = json ? json : "{}";
  return atomic_write(dir, trigger_name, &t, seq, data, strlen(data), name_out, name_len);
}

static int is_trigger(const wd_trigger_watch *w, const char *name) {
  size_t n = strlen(name);
  if (n >= sizeof(w->seen[0]) || n <= sizeof(WD_TRIGGER_PREFIX) - 1 + 5) return 0;
  if (strncmp(name, WD_TRIGGER_PREFIX, sizeof(WD_TRIGGER_PREFIX) - 1) != 0) return 0;
  if (strcmp(name + n - 5, ".json") != 0) return 0;
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
  sanitize(h, sizeof(h), host, "unknown");
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
