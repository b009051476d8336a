/*
 * Dump files: where they go and how they are written (temporary file, fsync, rename without
 * replacing, fsync of the directory). Trigger files (trigger.c) are written the same way.
 */
#include "dump/dumpfile.h"

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

#include "base/log.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

#define WD_MAX_SEQ_TRIES 10000

/* Copy s keeping only [A-Za-z0-9._-] (others become '_'); "" becomes dflt. */
void wd_file_sanitize(char *out, size_t len, const char *s, const char *dflt) {
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
    wd_file_sanitize(safe, sizeof(safe), job, "local");
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

static int own_dir(const char *path) {
  struct stat st;
  if (mkdir(path, 0700) != 0 && errno != EEXIST) return 0;
  return lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid();
}

int wd_own_subdir(const char *base, const char *name, char *out, size_t len) {
  char p[WD_PATH_MAX + 96];
  snprintf(p, sizeof p, "%s/%s", base, name);
  for (unsigned k = 0; k < 8; k++) {
    if (k == 1) snprintf(p, sizeof p, "%s/%s~%u", base, name, (unsigned)geteuid());
    else if (k > 1) snprintf(p, sizeof p, "%s/%s~%u-%u", base, name, (unsigned)geteuid(), k);
    if (strlen(p) >= len || !own_dir(p)) continue;
    if (k) WD_WARN("nccl-watchdog: %s/%s is not a folder of this user (a link, or made by someone "
                   "else): its files go to %s", base, name, p);
    snprintf(out, len, "%s", p);
    return 0;
  }
  return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* Atomic write.                                                                               */

int wd_write_all(int fd, const char *data, size_t len) {
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

/*
 * Writes data under the first name name_fn(seq), name_fn(seq+1), ... that does not exist yet.
 * name_out receives the file name, *seq_out the sequence used.
 */
int wd_file_write_new(const char *dir, wd_name_fn name_fn, const void *arg, unsigned seq,
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
  if (wd_write_all(fd, data, len) != 0 || fsync(fd) != 0) {
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
  const char *ext;
} wd_dump_name;

static int dump_name(char *out, size_t len, const void *arg, unsigned seq) {
  const wd_dump_name *d = arg;
  int n = snprintf(out, len, "%s-%d-%04u-%s%s", d->host, d->pid, seq, d->reason, d->ext);
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
  return wd_dumpfile_write_ext(dir, host, pid, seq, reason, ".json", data, len, path_out, path_len);
}

int wd_dumpfile_write_ext(const char *dir, const char *host, int pid, unsigned seq,
                          const char *reason, const char *ext, const char *data, size_t len,
                          char *path_out, size_t path_len) {
  if (!dir || !*dir || (!data && len) || !ext) {
    errno = EINVAL;
    return -1;
  }
  wd_dump_name d;
  wd_file_sanitize(d.host, sizeof(d.host), host, "unknown");
  wd_file_sanitize(d.reason, sizeof(d.reason), reason, "dump");
  d.pid = pid;
  d.ext = ext;
  char name[256];
  if (wd_file_write_new(dir, dump_name, &d, seq, data ? data : "", len, name, sizeof(name)) != 0)
    return -1;
  if (join_path(path_out, path_len, dir, name) != 0) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

