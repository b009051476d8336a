/* Host identity for file names and dumps. */
#include "base/host.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char host_override[64];

void wd_hostname_override(const char *name) {
  snprintf(host_override, sizeof host_override, "%s", name ? name : "");
}

void wd_hostname(char *out, size_t len) {
  if (!out || !len) return;
  if (host_override[0]) {
    snprintf(out, len, "%s", host_override);
    return;
  }
  char buf[256];
  if (gethostname(buf, sizeof(buf)) != 0) buf[0] = 0;
  buf[sizeof(buf) - 1] = 0;
  char *dot = strchr(buf, '.');
  if (dot) *dot = 0;
  snprintf(out, len, "%s", buf[0] ? buf : "unknown");
}

/* A /proc stat file (a process's or a thread's) into buf: the text after the command name's
 * closing parenthesis (the name may hold anything), whose third character is the state letter;
 * NULL when it cannot be read. */
static char *wd_stat_after_name(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "re");
  if (!f) return NULL;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  return p && p[1] == ' ' && p[2] ? p : NULL;
}

int wd_proc_start(int pid, char *state, uint64_t *start_wall_ns) {
  /* Field 22 of /proc/<pid>/stat, after the state (field 3): start time in clock ticks after
   * boot; /proc/stat's btime: the boot on the wall clock. */
  char path[64], buf[1024];
  if (pid > 0) snprintf(path, sizeof path, "/proc/%d/stat", pid);
  else snprintf(path, sizeof path, "/proc/self/stat");
  char *p = wd_stat_after_name(path, buf, sizeof buf);
  if (!p) return -1;
  if (state) *state = p[2];
  int field = 2;
  for (; *p && field < 22; p++)
    if (*p == ' ') field++;
  if (field != 22) return -1;
  unsigned long long start = strtoull(p, NULL, 10), btime = 0;
  FILE *f = fopen("/proc/stat", "re");
  while (f && fgets(buf, sizeof buf, f))
    if (!strncmp(buf, "btime ", 6)) btime = strtoull(buf + 6, NULL, 10);
  if (f) fclose(f);
  long hz = sysconf(_SC_CLK_TCK);
  if (!btime || hz <= 0) return -1;
  *start_wall_ns = btime * 1000000000ull + start * (1000000000ull / (unsigned long long)hz);
  return 0;
}

int wd_proc_alive_since(int pid, uint64_t start_wall_ns, char *state) {
  uint64_t started;
  char st = '?';
  if (pid <= 0 || start_wall_ns == 0 || wd_proc_start(pid, &st, &started) != 0) return 0;
  if (state) *state = st;
  if (st == 'Z' || st == 'X' || st == 'x') return 0;
  uint64_t gap = started > start_wall_ns ? started - start_wall_ns : start_wall_ns - started;
  return gap <= 2000000000ull;
}

int wd_proc_gone(int pid, uint64_t start_wall_ns) {
  uint64_t started;
  char st = '?';
  if (pid <= 0 || start_wall_ns == 0) return 0;
  errno = 0;
  if (wd_proc_start(pid, &st, &started) != 0) return errno == ENOENT || errno == ESRCH;
  return !wd_proc_alive_since(pid, start_wall_ns, NULL);
}

int wd_proc_job(int pid, char *out, size_t len) {
  static const char *const keys[] = {"SLURM_JOB_ID=", "TORCHELASTIC_RUN_ID=", "NCCL_WATCHDOG_DUMP_DIR="};
  enum { NKEYS = 3, VAL = 256 };
  char path[64], vals[NKEYS][VAL] = {{0}}, entry[VAL + 32];
  if (!out || !len) return -1;
  if (pid > 0) snprintf(path, sizeof path, "/proc/%d/environ", pid);
  else snprintf(path, sizeof path, "/proc/self/environ");
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  /* Entries end with a NUL; only each one's start is kept (a key and its value's first bytes),
   * and at most 4 MiB are read (the kernel's limit on an environment is larger). */
  size_t el = 0, total = 0;
  int c;
  while ((c = getc(f)) != EOF && total++ < (4u << 20)) {
    if (c != 0) {
      if (el < sizeof entry - 1) entry[el++] = (char)c;
      continue;
    }
    entry[el] = 0;
    for (int k = 0; k < NKEYS; k++) {
      size_t kl = strlen(keys[k]);
      if (el < kl || strncmp(entry, keys[k], kl) != 0) continue;
      size_t vl = el - kl < VAL - 1 ? el - kl : VAL - 1; /* its first bytes tell jobs apart */
      memcpy(vals[k], entry + kl, vl);
      vals[k][vl] = 0;
    }
    el = 0;
  }
  int err = ferror(f);
  fclose(f);
  if (err) return -1;
  snprintf(out, len, "%s\n%s\n%s", vals[0], vals[1], vals[2]);
  return 0;
}

int wd_proc_thread_state(int pid, const char *name, char *state) {
  char path[96], buf[512];
  if (pid > 0) snprintf(path, sizeof path, "/proc/%d/task", pid);
  else snprintf(path, sizeof path, "/proc/self/task");
  DIR *d = opendir(path);
  if (!d) return -1;
  int found = -1;
  struct dirent *e;
  while (found != 0 && (e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char p[sizeof path + sizeof e->d_name + 8];
    snprintf(p, sizeof p, "%s/%s/comm", path, e->d_name);
    FILE *f = fopen(p, "re");
    if (!f) continue;
    int ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    buf[strcspn(buf, "\n")] = 0;
    if (!ok || strcmp(buf, name) != 0) continue;
    snprintf(p, sizeof p, "%s/%s/stat", path, e->d_name);
    const char *c = wd_stat_after_name(p, buf, sizeof buf);
    if (c) {
      *state = c[2];
      found = 0;
    }
  }
  closedir(d);
  return found;
}

void wd_process_identity(wd_process_id *out) {
  memset(out, 0, sizeof(*out));
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
  if (f) {
    if (fgets(out->boot_id, sizeof out->boot_id, f)) out->boot_id[strcspn(out->boot_id, "\n")] = 0;
    fclose(f);
  }
  if (wd_proc_start(0, NULL, &out->start_wall_ns) != 0) out->start_wall_ns = 0;
  struct stat ns;
  if (stat("/proc/self/ns/pid", &ns) == 0) out->pidns_ino = (uint64_t)ns.st_ino;
}

/* A number of bytes from a one-line file ("max" or absent: none). */
static uint64_t wd_read_limit(const char *path) {
  FILE *f = fopen(path, "re");
  if (f == NULL) return 0;
  char line[64] = "";
  char *ok = fgets(line, sizeof line, f);
  fclose(f);
  if (!ok || line[0] < '0' || line[0] > '9') return 0;
  unsigned long long v = strtoull(line, NULL, 10);
  /* cgroup v1 writes a huge number for "no limit". */
  return v >= (1ull << 60) ? 0 : (uint64_t)v;
}

uint64_t wd_host_memory_limit(const char **what) {
  uint64_t best = 0;
  *what = "";
  uint64_t cg = wd_read_limit("/sys/fs/cgroup/memory.max");
  if (!cg) cg = wd_read_limit("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  if (cg) {
    best = cg;
    *what = "the cgroup's memory limit";
  }
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      (best == 0 || (uint64_t)rl.rlim_cur < best)) {
    best = (uint64_t)rl.rlim_cur;
    *what = "the address-space limit (ulimit -v)";
  }
  return best;
}
