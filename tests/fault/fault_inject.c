/*
 * Fault injection: every allocation and file-system call the plugin makes (and cJSON and zlib
 * make for it) is made to fail, one call site at a time, while a process plays NCCL's part:
 * three communicators initialised, traffic, a snapshot dump, a stall dump with ring files,
 * the hang resumed, every communicator finalized, the plugin unloaded. At every site the
 * process must end normally: no crash, no hang, and (in the ASan build) no leak.
 *
 * This executable defines malloc, calloc, realloc, aligned_alloc, free, mmap, open, openat,
 * fopen, opendir, ftruncate, posix_fallocate, mkdir, link, linkat, rename, pthread_create, dlopen
 * eventfd and fcntl; each forwards to the next definition (libc, or the sanitizer's interceptor) and
 * counts the call when it comes from the plugin's, cJSON's or zlib's code. Modes (FI_MODE):
 *   count   list the call sites reached (FI_SITES: "kind module+offset" per line)
 *   site    fail the first call at site FI_SITE
 *   from    fail every counted call from the FI_N-th on (memory that never comes back)
 * Without FI_MODE it is the driver: one counting run, then one run per site, then "from" runs,
 * each in a child process, two at a time. Arguments: the plugin path.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "nccl_host.h"

/* ---- the interposed calls ---- */

enum { K_MALLOC, K_CALLOC, K_REALLOC, K_ALIGNED, K_MMAP, K_OPEN, K_OPENAT, K_FOPEN, K_OPENDIR,
       K_FTRUNCATE, K_FALLOCATE, K_MKDIR, K_LINK, K_LINKAT, K_RENAME, K_PTHREAD, K_DLOPEN,
       K_EVENTFD, K_FCNTL, K_N };
static const char *const kind_name[K_N] = {
    "malloc", "calloc", "realloc", "aligned_alloc", "mmap", "open", "openat", "fopen", "opendir",
    "ftruncate", "posix_fallocate", "mkdir", "link", "linkat", "rename", "pthread_create",
    "dlopen", "eventfd", "fcntl"};

static int fi_mode; /* 0 off, 1 count, 2 site, 3 from */
static _Atomic long fi_calls;
static long fi_from;
static int fi_site_kind = -1;
static char fi_site_mod[256];
static uintptr_t fi_site_off;
static _Atomic int fi_site_done;
static _Atomic long fi_failed;

/* Modules whose calls count, by address range (filled once the plugin is loaded). */
#define MAX_RANGES 32
static struct {
  uintptr_t lo, hi;
  char name[64];
} ranges[MAX_RANGES];
static _Atomic int nranges;

#define MAX_SITES 4096
static struct {
  int kind;
  int mod;
  uintptr_t off;
} sites[MAX_SITES];
static _Atomic int nsites;
static pthread_mutex_t sites_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int in_hook;

/* Bootstrap memory for the calls dlsym itself makes before the real functions are known. */
static char boot[1 << 16];
static size_t boot_used;
static void *boot_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (boot_used + n > sizeof boot) return NULL;
  void *p = boot + boot_used;
  boot_used += n;
  return p;
}
static int is_boot(const void *p) { return (const char *)p >= boot && (const char *)p < boot + sizeof boot; }

static void *(*r_malloc)(size_t);
static void *(*r_calloc)(size_t, size_t);
static void *(*r_realloc)(void *, size_t);
static void *(*r_aligned)(size_t, size_t);
static void (*r_free)(void *);
static int resolving;

static void resolve(void) {
  if (r_malloc || resolving) return;
  resolving = 1;
  r_calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  r_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  r_realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
  r_aligned = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "aligned_alloc");
  r_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  resolving = 0;
}

static int mod_of(uintptr_t a) {
  int n = atomic_load(&nranges);
  for (int i = 0; i < n; i++)
    if (a >= ranges[i].lo && a < ranges[i].hi) return i;
  return -1;
}

/* Whether this call (from return address ra) fails. */
static int fi_fail(int kind, void *ra) {
  if (!fi_mode || in_hook) return 0;
  int m = mod_of((uintptr_t)ra);
  if (m < 0) return 0;
  in_hook = 1;
  uintptr_t off = (uintptr_t)ra - ranges[m].lo;
  long n = atomic_fetch_add(&fi_calls, 1) + 1;
  int fail = 0;
  if (fi_mode == 1) {
    pthread_mutex_lock(&sites_lock);
    int k = atomic_load(&nsites), seen = 0;
    for (int i = 0; i < k && !seen; i++) seen = sites[i].kind == kind && sites[i].mod == m && sites[i].off == off;
    if (!seen && k < MAX_SITES) {
      sites[k].kind = kind;
      sites[k].mod = m;
      sites[k].off = off;
      atomic_store(&nsites, k + 1);
    }
    pthread_mutex_unlock(&sites_lock);
  } else if (fi_mode == 2) {
    fail = kind == fi_site_kind && off == fi_site_off && strcmp(ranges[m].name, fi_site_mod) == 0 &&
           !atomic_exchange(&fi_site_done, 1);
  } else if (fi_mode == 3) {
    fail = n >= fi_from;
  }
  if (fail) atomic_fetch_add(&fi_failed, 1);
  in_hook = 0;
  return fail;
}

#define RA __builtin_return_address(0)

void *malloc(size_t n) {
  resolve();
  if (!r_malloc) return boot_alloc(n);
  if (fi_fail(K_MALLOC, RA)) return errno = ENOMEM, NULL;
  return r_malloc(n);
}
void *calloc(size_t a, size_t b) {
  resolve();
  if (!r_calloc) return boot_alloc(a * b); /* boot memory is zero */
  if (fi_fail(K_CALLOC, RA)) return errno = ENOMEM, NULL;
  return r_calloc(a, b);
}
void *realloc(void *p, size_t n) {
  resolve();
  if (fi_fail(K_REALLOC, RA)) return errno = ENOMEM, NULL;
  if (is_boot(p)) {
    void *q = malloc(n);
    if (q) memcpy(q, p, n); /* the boot area is larger than anything dlsym asks */
    return q;
  }
  return r_realloc(p, n);
}
void *aligned_alloc(size_t al, size_t n) {
  resolve();
  if (fi_fail(K_ALIGNED, RA)) return errno = ENOMEM, NULL;
  return r_aligned(al, n);
}
void free(void *p) {
  if (!p || is_boot(p)) return;
  resolve();
  r_free(p);
}

#define NEXT(name)                                                                               \
  static __typeof__(&name) r_##name;                                                              \
  if (!r_##name) r_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

void *mmap(void *a, size_t n, int prot, int fl, int fd, off_t off) {
  NEXT(mmap);
  if (fi_fail(K_MMAP, RA)) return errno = ENOMEM, MAP_FAILED;
  return r_mmap(a, n, prot, fl, fd, off);
}
int open(const char *path, int fl, ...) {
  NEXT(open);
  va_list ap;
  va_start(ap, fl);
  mode_t mode = (fl & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
  va_end(ap);
  if (fi_fail(K_OPEN, RA)) return errno = EMFILE, -1;
  return r_open(path, fl, mode);
}
int open64(const char *path, int fl, ...) __attribute__((alias("open")));
int openat(int dir, const char *path, int fl, ...) {
  NEXT(openat);
  va_list ap;
  va_start(ap, fl);
  mode_t mode = (fl & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(ap, int) : 0;
  va_end(ap);
  if (fi_fail(K_OPENAT, RA)) return errno = EMFILE, -1;
  return r_openat(dir, path, fl, mode);
}
FILE *fopen(const char *path, const char *m) {
  NEXT(fopen);
  if (fi_fail(K_FOPEN, RA)) return errno = EMFILE, NULL;
  return r_fopen(path, m);
}
FILE *fopen64(const char *path, const char *m) __attribute__((alias("fopen")));
DIR *opendir(const char *path) {
  NEXT(opendir);
  if (fi_fail(K_OPENDIR, RA)) return errno = EMFILE, NULL;
  return r_opendir(path);
}
int ftruncate(int fd, off_t n) {
  NEXT(ftruncate);
  if (fi_fail(K_FTRUNCATE, RA)) return errno = ENOSPC, -1;
  return r_ftruncate(fd, n);
}
int ftruncate64(int fd, off_t n) __attribute__((alias("ftruncate")));
int posix_fallocate(int fd, off_t off, off_t n) {
  NEXT(posix_fallocate);
  if (fi_fail(K_FALLOCATE, RA)) return ENOSPC;
  return r_posix_fallocate(fd, off, n);
}
int posix_fallocate64(int fd, off_t off, off_t n) __attribute__((alias("posix_fallocate")));
int mkdir(const char *path, mode_t m) {
  NEXT(mkdir);
  if (fi_fail(K_MKDIR, RA)) return errno = ENOSPC, -1;
  return r_mkdir(path, m);
}
int link(const char *a, const char *b) {
  NEXT(link);
  if (fi_fail(K_LINK, RA)) return errno = ENOSPC, -1;
  return r_link(a, b);
}
int linkat(int da, const char *a, int db, const char *b, int fl) {
  NEXT(linkat);
  if (fi_fail(K_LINKAT, RA)) return errno = ENOSPC, -1;
  return r_linkat(da, a, db, b, fl);
}
int rename(const char *a, const char *b) {
  NEXT(rename);
  if (fi_fail(K_RENAME, RA)) return errno = ENOSPC, -1;
  return r_rename(a, b);
}
int pthread_create(pthread_t *t, const pthread_attr_t *at, void *(*fn)(void *), void *arg) {
  NEXT(pthread_create);
  if (fi_fail(K_PTHREAD, RA)) return EAGAIN;
  return r_pthread_create(t, at, fn, arg);
}
void *dlopen(const char *path, int fl) {
  NEXT(dlopen);
  if (fi_fail(K_DLOPEN, RA)) return NULL;
  return r_dlopen(path, fl);
}
int eventfd(unsigned v, int fl) {
  NEXT(eventfd);
  if (fi_fail(K_EVENTFD, RA)) return errno = EMFILE, -1;
  return r_eventfd(v, fl);
}
/* The poller's lock (trigger.c): refused as a file system without locks would. The third
 * argument is an int or a pointer; passed on as a pointer, as the C library reads it. */
int fcntl(int fd, int cmd, ...) {
  NEXT(fcntl);
  va_list ap;
  va_start(ap, cmd);
  void *arg = va_arg(ap, void *);
  va_end(ap);
  if (fi_fail(K_FCNTL, RA)) return errno = ENOLCK, -1;
  return r_fcntl(fd, cmd, arg);
}
int fcntl64(int fd, int cmd, ...) __attribute__((alias("fcntl")));

/* ---- the process that plays NCCL ---- */

static int add_range_cb(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  (void)data;
  const char *n = info->dlpi_name ? info->dlpi_name : "";
  const char *want[] = {"libnccl-profiler-watchdog", "libcjson", "libz.so", "libunwind"};
  const char *hit = NULL;
  for (size_t i = 0; i < sizeof want / sizeof want[0] && !hit; i++)
    if (strstr(n, want[i])) hit = want[i];
  if (!hit) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    int k = atomic_load(&nranges);
    if (k >= MAX_RANGES) return 0;
    /* Offsets from the module's base, so they mean the same in every child. */
    ranges[k].lo = info->dlpi_addr;
    ranges[k].hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
    snprintf(ranges[k].name, sizeof ranges[k].name, "%s", hit);
    atomic_store(&nranges, k + 1);
  }
  return 0;
}

static void workload(const char *plugin, const char *dir) {
  wdh_plugin p;
  /* The plugin's own loading is NCCL's, not the plugin's: counted from here on. */
  void *pre = dlopen(plugin, RTLD_NOW | RTLD_LOCAL); /* map it to learn its range */
  if (!pre) _exit(3);
  dl_iterate_phdr(add_range_cb, NULL);
  if (wdh_load(&p, plugin, 0) != 0) _exit(4);
  dlclose(pre);
  const char *mode = getenv("FI_MODE");
  fi_mode = !strcmp(mode, "count") ? 1 : !strcmp(mode, "site") ? 2 : 3;
  wdh_comm c[3];
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  for (int i = 0; i < 3; i++) wdh_comm_init(&c[i], &p, 0xfa017000ull + (uint64_t)i, "fault", 1, 2, 0);
  for (int i = 0; i < 3; i++)
    if (c[i].ctx) wdh_run_ops(&c[i], NULL, &cfg, 40);
  wdh_op_cfg pc = cfg;
  pc.kind = WDH_OP_SEND;
  pc.peer = 1;
  if (c[0].ctx) wdh_run_ops(&c[0], NULL, &pc, 4);
  kill(getpid(), SIGUSR1);
  wdh_wait_dumps(dir, "signal", 1, 1500);
  wdh_op hung;
  cfg.hang_channel = 0;
  if (c[2].ctx) {
    wdh_op_enqueue(&c[2], &cfg, &hung);
    wdh_op_proxy(&hung);
    wdh_wait_dumps(dir, "stall", 1, 1500);
    wdh_op_resume(&hung);
  }
  for (int i = 0; i < 3; i++) wdh_comm_finalize(&c[i]);
  fi_mode = 0;
  wdh_unload(&p);
}

/* A run's dump directory, its host subdirectories first; dir is freed. */
static void rm_dump_dir(char *dir) {
  char host[512];
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d)))
    if (e->d_name[0] != '.') {
      snprintf(host, sizeof host, "%s/%s", dir, e->d_name);
      wdh_rmtree(host);
    }
  if (d) closedir(d);
  wdh_rmtree(dir);
  free(dir);
}

static int run_child(const char *plugin, const char *mode, const char *arg, const char *sites_out,
                     int *status) {
  static char *dir; /* static: still reachable when the child exits (LeakSanitizer) */
  dir = wdh_tempdir("fault");
  if (!dir) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    setenv("NCCL_WATCHDOG_DUMP_DIR", dir, 1);
    setenv("NCCL_WATCHDOG_RING_DIR", dir, 1);
    setenv("NCCL_WATCHDOG_TIMEOUT", "200ms", 1);
    setenv("NCCL_WATCHDOG_POLL", "40ms", 1);
    setenv("NCCL_WATCHDOG_BACKTRACE_WAIT", "100ms", 1);
    /* Telemetry and its OTLP exporter (libcurl loaded, a collector that is down) are in play. */
    setenv("NCCL_WATCHDOG_METRICS", "100ms", 1);
    setenv("NCCL_WATCHDOG_OTLP_ENDPOINT", "http://127.0.0.1:1", 1);
    setenv("NCCL_WATCHDOG_OTLP_INTERVAL", "100ms", 1);
    setenv("FI_MODE", mode, 1);
    if (!strcmp(mode, "site")) {
      char kind[32];
      unsigned long off = 0;
      if (sscanf(arg, "%31s %255[^+]+%lx", kind, fi_site_mod, &off) != 3) _exit(5);
      for (int k = 0; k < K_N; k++)
        if (!strcmp(kind, kind_name[k])) fi_site_kind = k;
      fi_site_off = off;
    } else if (!strcmp(mode, "from")) {
      fi_from = atol(arg);
    }
    workload(plugin, dir);
    if (sites_out) {
      FILE *f = fopen(sites_out, "w");
      for (int i = 0; f && i < atomic_load(&nsites); i++)
        fprintf(f, "%s %s+%lx\n", kind_name[sites[i].kind], ranges[sites[i].mod].name,
                (unsigned long)sites[i].off);
      if (f) fprintf(f, "# calls %ld\n", atomic_load(&fi_calls));
      if (f) fclose(f);
    }
    exit(atomic_load(&fi_failed) > 0 || !strcmp(mode, "count") ? 0 : 7); /* exit: LeakSanitizer runs */
  }
  int st = 0;
  int ended = wdh_wait_child(pid, 60000, &st);
  *status = ended ? st : -1;
  rm_dump_dir(dir);
  return 0;
}

/* The operator's case: an address-space limit (ulimit -v 8000000) with rings and an event bound
 * far too large for it, 16 communicators. The process must run clean, and say why its rings are
 * smaller. (Not in sanitizer builds: their shadow memory alone is over any such limit.) */
static void limits_case(const char *plugin) {
#ifndef WD_SANITIZER_BUILD
  static char *dir;
  dir = wdh_tempdir("fault-limit");
  pid_t pid = fork();
  if (pid == 0) {
    setenv("NCCL_WATCHDOG_DUMP_DIR", dir, 1);
    setenv("NCCL_WATCHDOG_RING_DIR", dir, 1);
    setenv("NCCL_WATCHDOG_RING_SIZE", "1048576", 1);
    setenv("NCCL_WATCHDOG_PROXY_RING_SIZE", "1048576", 1);
    setenv("NCCL_WATCHDOG_MAX_EVENTS", "16777216", 1);
    struct rlimit rl = {8000000ull * 1024, 8000000ull * 1024};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(9);
    wdh_plugin p;
    if (wdh_load(&p, plugin, 0) != 0) _exit(4);
    wdh_comm c[16];
    wdh_op_cfg cfg;
    wdh_op_cfg_default(&cfg);
    int profiled = 0;
    for (int i = 0; i < 16; i++) {
      wdh_comm_init(&c[i], &p, 0xa5000ull + (uint64_t)i, "limit", 1, 2, 0);
      profiled += c[i].ctx != NULL;
      if (c[i].ctx) wdh_run_ops(&c[i], NULL, &cfg, 20);
    }
    /* What is left of the limit is the job's, and a dump's rendering: the event arena once
     * reserved half of it and the snapshot failed (ENOMEM). */
    void *snap = wdh_signal_snapshot(dir);
    cJSON *comms = snap ? wdh_jpath(snap, "comms") : NULL;
    int listed = cJSON_IsArray(comms) ? cJSON_GetArraySize(comms) : -1;
    wdh_json_free(snap);
    for (int i = 0; i < 16; i++) wdh_comm_finalize(&c[i]);
    int said = wdh_log_contains(NCCL_LOG_WARN, "address-space limit (ulimit -v)") > 0 &&
               wdh_log_contains(NCCL_LOG_WARN, "smaller rings") > 0;
    if (!said || listed != 16) wdh_log_print();
    wdh_unload(&p);
    _exit(listed != 16 ? 10 : profiled == 16 && said ? 0 : 8);
  }
  int st = 0;
  wdh_wait_child(pid, 60000, &st);
  WDH_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "16 communicators under ulimit -v with huge rings: status 0x%x (8: not all profiled, or "
            "no line naming the address-space limit; 10: no snapshot listing the 16)", st);
  rm_dump_dir(dir);
#else
  (void)plugin;
#endif
}

static int ok_status(int st) { return st != -1 && WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 7); }

int main(int argc, char **argv) {
  const char *plugin = argc > 1 ? argv[1] : wdh_plugin_path();
  if (!plugin) return 77;
  char sites_file[] = "/tmp/wd-fault-sites-XXXXXX";
  int fd = mkstemp(sites_file);
  if (fd < 0) return 1;
  close(fd);
  int st;
  run_child(plugin, "count", NULL, sites_file, &st);
  WDH_CHECK(ok_status(st), "the counting run did not end normally (status 0x%x)", st);
  FILE *f = fopen(sites_file, "r");
  char line[512];
  char(*list)[512] = calloc(MAX_SITES, 512);
  int n = 0;
  long calls = 0;
  int by_kind[K_N] = {0};
  while (f && list && fgets(line, sizeof line, f) && n < MAX_SITES) {
    if (line[0] == '#') {
      sscanf(line, "# calls %ld", &calls);
      continue;
    }
    line[strcspn(line, "\n")] = '\0';
    snprintf(list[n++], 512, "%s", line);
    for (int k = 0; k < K_N; k++)
      if (!strncmp(line, kind_name[k], strlen(kind_name[k])) && line[strlen(kind_name[k])] == ' ') by_kind[k]++;
  }
  if (f) fclose(f);
  unlink(sites_file);
  fprintf(stderr, "fault: %ld calls from %d sites reached:", calls, n);
  for (int k = 0; k < K_N; k++)
    if (by_kind[k]) fprintf(stderr, " %s %d", kind_name[k], by_kind[k]);
  fprintf(stderr, "\n");
  WDH_CHECK(n >= 20, "only %d call sites reached", n);
  WDH_CHECK(by_kind[K_MALLOC] + by_kind[K_CALLOC] > 5 && by_kind[K_OPEN] + by_kind[K_OPENAT] > 0 &&
                by_kind[K_MMAP] > 0 && by_kind[K_PTHREAD] > 0 && by_kind[K_EVENTFD] > 0,
            "a kind of call was never reached");
  int runs = 0, bad = 0;
  for (int i = 0; i < n; i++) {
    run_child(plugin, "site", list[i], NULL, &st);
    runs++;
    if (!ok_status(st)) {
      bad++;
      WDH_CHECK(0, "failing %s: status 0x%x (%s)", list[i], st,
                st == -1 ? "hung" : WIFSIGNALED(st) ? strsignal(WTERMSIG(st)) : "exit code");
    }
  }
  /* Memory that never comes back, from several points of the run on. */
  for (int q = 1; q <= 8 && calls > 0; q++) {
    char arg[32];
    snprintf(arg, sizeof arg, "%ld", calls * q / 9 + 1);
    run_child(plugin, "from", arg, NULL, &st);
    runs++;
    if (!ok_status(st)) {
      bad++;
      WDH_CHECK(0, "failing every call from %s on: status 0x%x", arg, st);
    }
  }
  fprintf(stderr, "fault: %d runs, %d sites, %d ended abnormally\n", runs, n, bad);
  limits_case(plugin);
  free(list);
  return wdh_check_summary("fault.inject");
}
