/*
 * A container's /dev/shm: Docker's default (and a Kubernetes pod's without a memory emptyDir) is
 * a 64 MiB tmpfs, shared by NCCL's segments and the plugin's ring files. Played in a mount
 * namespace of its own (needs root; skipped otherwise) with a private 64 MiB tmpfs on /dev/shm:
 * 8 local ranks (LOCAL_WORLD_SIZE=8, as torchrun sets it), 4 communicators each with traffic
 * (their ring files grow to full rings one poll after), then each rank allocates "NCCL's
 * segments" the way NCCL does after init (src/misc/shmutils.cc ncclShmOpen ->
 * src/os/linux.cc ncclOsShmOpen: a /dev/shm/nccl-XXXXXX file, fallocate'd: "failed to extend
 * ... to N bytes" ends the job). 5 MiB per rank stands for its proxy pool and SHM buffers
 * (src/proxy.cc proxyProgressInit; src/init.cc computeBuffSizes); 40 MiB in all fits alone.
 *   empty  the empty plugin (the twin): every rank's segments fit.
 *   plugin the plugin: every rank's segments fit too (before: its ring files took about 41 MiB
 *          first and ranks failed), its ring files stay within 1/8 of the file system, every
 *          process says once that it kept its rings in memory, and a snapshot says so too.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nccl_host.h"

#define NRANKS 8
#define NCOMMS 4
#define SEGMENT (5ull << 20)

static const char *g_plugin;
static const char *g_dir;

static void rank_main(int rank, int fd) {
  wdh_plugin p;
  if (wdh_load(&p, g_plugin, 0) != 0) _exit(1);
  wdh_comm c[NCOMMS];
  for (int i = 0; i < NCOMMS; i++) {
    char name[16];
    snprintf(name, sizeof name, "c%d", i);
    wdh_comm_init(&c[i], &p, 0xb0d9e700ull + (uint64_t)i, name, 1, NRANKS, rank);
  }
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  for (int i = 0; i < NCOMMS; i++) wdh_run_ops(&c[i], NULL, &cfg, 20);
  usleep(300 * 1000); /* a few polls: ring files of communicators with traffic grow whole */
  /* Every rank's plugin has taken what it takes before NCCL's segments are made. */
  wdh_barrier(g_dir, "plugin-ready", rank, NRANKS, 20000);
  char path[64];
  snprintf(path, sizeof path, "/dev/shm/nccl-%06d", rank);
  int sfd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
  int ok = sfd >= 0 && fallocate(sfd, 0, 0, (off_t)SEGMENT) == 0;
  int err = errno;
  if (sfd >= 0) close(sfd);
  char res[256], rp[4200];
  snprintf(res, sizeof res, "%s %d warned=%d\n", ok ? "ok" : "fail", ok ? 0 : err,
           wdh_log_contains(NCCL_LOG_WARN, "kept in memory"));
  snprintf(rp, sizeof rp, "%s/result-%d", g_dir, rank);
  FILE *f = fopen(rp, "w");
  if (f) fputs(res, f), fclose(f);
  char b = 1;
  if (write(fd, &b, 1) != 1) _exit(1);
  for (;;) pause();
}

static uint64_t tree_bytes(const char *dir) {
  DIR *d = opendir(dir);
  uint64_t n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    struct stat st;
    if (e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      n += (uint64_t)st.st_blocks * 512u;
  }
  if (d) closedir(d);
  return n;
}

static void clear_shm(void) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf /dev/shm/nccl-* /dev/shm/nccl-watchdog-*");
  if (system(cmd) != 0) fprintf(stderr, "shmbudget: could not clear /dev/shm\n");
}

/* One job; returns how many ranks' segments failed, *warned how many ranks said it kept rings in
 * memory, *plugin_bytes what the plugin's ring directory held. */
static int run_job(const char *plugin, int *warned, uint64_t *plugin_bytes) {
  g_plugin = plugin;
  clear_shm();
  char rdir[64];
  snprintf(rdir, sizeof rdir, "/dev/shm/nccl-watchdog-%u", (unsigned)geteuid());
  pid_t pids[NRANKS];
  int ready = wdh_fork_ranks(NRANKS, rank_main, pids);
  WDH_CHECK(ready == NRANKS, "%d of %d ranks ready", ready, NRANKS);
  *plugin_bytes = tree_bytes(rdir);
  int failed = 0;
  *warned = 0;
  for (int r = 0; r < NRANKS; r++) {
    char rp[4200], line[256] = "";
    snprintf(rp, sizeof rp, "%s/result-%d", g_dir, r);
    FILE *f = fopen(rp, "r");
    if (f && fgets(line, sizeof line, f)) failed += strncmp(line, "ok", 2) != 0;
    else failed++;
    if (f) fclose(f);
    *warned += strstr(line, "warned=1") != NULL;
    unlink(rp);
    fprintf(stderr, "shmbudget: rank %d: %s", r, line[0] ? line : "(no result)\n");
  }
  /* What every dump says: a snapshot of rank 0. */
  if (strstr(plugin, "watchdog")) {
    kill(pids[0], SIGUSR1);
    char *paths[4];
    int n = 0;
    for (int i = 0; i < 100 && (n = wdh_list_dumps(g_dir, "signal", NULL, 0)) < 1; i++) usleep(50 * 1000);
    n = wdh_list_dumps(g_dir, "signal", paths, 4);
    WDH_CHECK(n == 1, "%d snapshot dumps of rank 0", n);
    void *j = n >= 1 ? wdh_json_load(paths[0]) : NULL;
    const char *note = j ? wdh_jstr(j, "memory.ringFilesRefused") : NULL;
    WDH_CHECK(note && strstr(note, "/dev/shm") && strstr(note, "8 local ranks"),
              "the snapshot does not say why its rings are in memory: %s", note ? note : "(none)");
    if (j) wdh_json_free(j);
    wdh_free_paths(paths, n);
  }
  wdh_kill_ranks(pids, NRANKS);
  clear_shm();
  return failed;
}

int main(void) {
  const char *plugin = wdh_plugin_path();
  const char *empty = getenv("WDH_EMPTY_PLUGIN");
  if (!plugin || !empty) return 77;
  if (geteuid() != 0 || unshare(CLONE_NEWNS) != 0 ||
      mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
      mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777") != 0) {
    fprintf(stderr, "shmbudget: SKIP: needs root and a mount namespace of its own (%s)\n", strerror(errno));
    return 77;
  }
  char *dir = wdh_scenario_dir("shmbudget", "10s", "50ms");
  g_dir = dir;
  unsetenv("NCCL_WATCHDOG_RING_DIR"); /* the default: /dev/shm/nccl-watchdog-<uid> */
  setenv("LOCAL_WORLD_SIZE", "8", 1);
  setenv("NCCL_WATCHDOG_BACKTRACE", "0", 1);

  int warned;
  uint64_t bytes;
  int failed = run_job(empty, &warned, &bytes);
  WDH_CHECK(failed == 0, "the twin: %d of %d ranks could not allocate NCCL's segments without the plugin", failed,
            NRANKS);
  failed = run_job(plugin, &warned, &bytes);
  fprintf(stderr, "shmbudget: with the plugin: %d ranks failed, ring files %.1f MiB, %d ranks said rings in memory\n",
          failed, (double)bytes / 1048576.0, warned);
  WDH_CHECK(failed == 0, "with the plugin %d of %d ranks could not allocate NCCL's segments", failed, NRANKS);
  WDH_CHECK(bytes <= (8ull << 20), "the plugin's ring files took %.1f MiB of a 64 MiB /dev/shm (its part: 8)",
            (double)bytes / 1048576.0);
  WDH_CHECK(warned == NRANKS, "%d of %d ranks said they kept rings in memory", warned, NRANKS);
  umount2("/dev/shm", MNT_DETACH);
  return wdh_scenario_end("shmbudget", dir);
}
