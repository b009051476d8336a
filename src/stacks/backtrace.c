/*
 * Backtraces of every thread, collected from inside the process (the Redis/MongoDB scheme).
 *
 * The collector lists /proc/self/task, skips threads whose mask blocks the signal, publishes a
 * table of slots (one per thread) and tgkills each thread. Each handler finds its slot by tid,
 * unwinds itself with libunwind and stores raw program counters only; symbolisation (dladdr,
 * libunwind's ELF reader) happens afterwards on the collecting thread.
 *
 * Memory safety against late handlers: a handler announces itself in bt_inside before it reads
 * bt_table; the collector withdraws bt_table and then waits (bounded) for bt_inside to drop to
 * zero before it frees the slots. If it never drops, the slots are leaked, never freed under a
 * handler.
 */
#define UNW_LOCAL_ONLY
#include "stacks/backtrace.h"

#include "base/sigown.h"

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <libunwind.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

enum {
  WD_BT_IDLE = 0,    /* not asked (blocked, gone, self) */
  WD_BT_ARMED = 1,   /* signalled, handler not yet in */
  WD_BT_RUNNING = 2, /* handler unwinding */
  WD_BT_DONE = 3,    /* pcs valid */
};

/* Handler frames before the signal trampoline are dropped; bound the walk so a corrupt stack
 * cannot keep a handler looping. */
#define WD_BT_MAX_STEPS 256

typedef struct wd_bt_slot {
  _Atomic int state;
  int tid;
  int n;
  int exact0; /* pcs[0] is the interrupted instruction, not a return address */
  uint64_t pcs[WD_BT_MAX_FRAMES];
} wd_bt_slot;

typedef struct wd_bt_table {
  int n;
  pid_t pid;
  wd_bt_slot *slots;
} wd_bt_table;

static int bt_signo;
static int bt_installed;
static wd_sig_prev bt_old;
static _Atomic(wd_bt_table *) bt_table;
static atomic_int bt_inside;
/* Handlers anywhere in our code, chaining included: fini waits (bounded) for them to leave so
 * the plugin can be unloaded after it. */
static atomic_int bt_entered;
static pthread_mutex_t bt_collect_lock = PTHREAD_MUTEX_INITIALIZER;

static void wd_bt_handler(int sig, siginfo_t *si, void *uc);
static void wd_sleep_ns(long ns);

static int wd_gettid(void) { return (int)syscall(SYS_gettid); }

/* Walk the current thread's stack. With from_pc (the interrupted pc from the handler's
 * ucontext), the frames of the handler and the signal trampoline are discarded so frame 0 is
 * where the thread was interrupted. When from_pc is not on the stack (TSan runs handlers later
 * from its own runtime, with a saved context) only this function's caller (the handler) is
 * dropped. Async-signal-safe in the sense libunwind's local unwinder is: its cache lock is
 * taken with every signal blocked. */
static __attribute__((noinline)) int wd_bt_unwind(uint64_t *pcs, int max, uint64_t from_pc,
                                                  int *exact0) {
  unw_context_t ctx;
  unw_cursor_t cur;
  int n = 0, found = 0, total = 0;
  *exact0 = 0;
  if (unw_getcontext(&ctx) != 0 || unw_init_local(&cur, &ctx) != 0) return 0;
  /* Frame 0 is this function. */
  if (unw_step(&cur) <= 0) return 0;
  do {
    unw_word_t ip = 0;
    if (unw_get_reg(&cur, UNW_REG_IP, &ip) != 0 || ip == 0) break;
    if (from_pc && !found && ip == from_pc) {
      found = 1;
      n = 0;
      *exact0 = 1;
    }
    if (n < max) pcs[n++] = (uint64_t)ip;
    else if (found || !from_pc) break;
  } while (++total < WD_BT_MAX_STEPS && unw_step(&cur) > 0);
  if (from_pc && !found && n > 0) {
    memmove(pcs, pcs + 1, (size_t)(n - 1) * sizeof(*pcs));
    n--;
  }
  return n;
}

/* The interrupted instruction in a handler's ucontext, 0 when unknown. */
static uint64_t wd_bt_uc_pc(const void *uc) {
  if (!uc) return 0;
#if defined(__x86_64__)
  return (uint64_t)((const ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
  return (uint64_t)((const ucontext_t *)uc)->uc_mcontext.pc;
#else
  return 0;
#endif
}

int wd_bt_unwind_signal(uint64_t *pcs, int max, const void *uc) {
  uint64_t from = wd_bt_uc_pc(uc);
  if (max <= 0) return 0;
  if (!bt_installed) {
    pcs[0] = from;
    return from ? 1 : 0;
  }
  uint64_t tmp[WD_BT_MAX_FRAMES];
  int exact;
  int n = wd_bt_unwind(tmp, WD_BT_MAX_FRAMES, from ? from : 1, &exact);
  if (n > max) n = max;
  memcpy(pcs, tmp, (size_t)n * sizeof(*pcs));
  return n;
}

/* SIG_DFL would kill the process (real-time signals terminate): never chained to. */
static void wd_bt_chain(int sig, siginfo_t *si, void *uc) { wd_sig_prev_chain(&bt_old, wd_bt_handler, sig, si, uc); }

static void wd_bt_handler(int sig, siginfo_t *si, void *uc) {
  int saved_errno = errno;
  wd_bt_slot *slot = NULL;
  atomic_fetch_add(&bt_entered, 1);
  /* seq_cst increment before the load of bt_table: pairs with the collector's store of NULL
   * followed by its load of bt_inside (see wd_bt_withdraw). */
  atomic_fetch_add(&bt_inside, 1);
  wd_bt_table *t = atomic_load(&bt_table);
  if (t && si && si->si_code == SI_TKILL && si->si_pid == t->pid) {
    int tid = wd_gettid();
    for (int i = 0; i < t->n; i++) {
      if (t->slots[i].tid == tid) {
        slot = &t->slots[i];
        break;
      }
    }
  }
  if (slot) {
    /* ARMED -> RUNNING admits one unwind per slot: a second or late signal returns at once. */
    int expect = WD_BT_ARMED;
    if (atomic_compare_exchange_strong(&slot->state, &expect, WD_BT_RUNNING)) {
      uint64_t from = wd_bt_uc_pc(uc);
      slot->n = wd_bt_unwind(slot->pcs, WD_BT_MAX_FRAMES, from ? from : 1, &slot->exact0);
      /* Release: the collector's acquire load of DONE sees n and pcs. */
      atomic_store_explicit(&slot->state, WD_BT_DONE, memory_order_release);
    }
  }
  atomic_fetch_sub(&bt_inside, 1);
  if (!slot) wd_bt_chain(sig, si, uc);
  errno = saved_errno;
  atomic_fetch_sub(&bt_entered, 1);
}

/* libunwind opens a pipe (to validate memory) the first time it initialises and never closes it.
 * Unloaded with the plugin and loaded again, it would open two more descriptors each cycle; kept
 * loaded, it initialises once per process and the reloaded plugin finds it ready. */
static void pin_unwinder(void) {
  static int pinned;
  Dl_info info;
  if (pinned || !dladdr((void *)&unw_set_caching_policy, &info) || !info.dli_fname) return;
  Dl_info self;
  if (dladdr((void *)&pin_unwinder, &self) && self.dli_fname && strcmp(self.dli_fname, info.dli_fname) == 0)
    return; /* linked in statically: nothing to keep */
  if (dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE)) pinned = 1;
}

int wd_bt_init(int signo) {
  if (bt_installed) return bt_signo == signo ? 0 : -1;
  if (signo <= 0 || signo >= NSIG) return -1;
  pin_unwinder();
  /* This libunwind maps UNW_CACHE_PER_THREAD to GLOBAL when built without __thread; GLOBAL is
   * what we ask for explicitly: its lock is taken with every signal blocked, so a handler can
   * wait for another thread's unwind but can never interrupt the holder on its own thread. */
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_GLOBAL);
  /* Warm up: the first unwind initialises libunwind under a lock and walks the loaded objects;
   * do it here, outside any handler. */
  uint64_t pcs[WD_BT_MAX_FRAMES];
  int exact0;
  if (wd_bt_unwind(pcs, WD_BT_MAX_FRAMES, 0, &exact0) <= 0) return -1;

  if (wd_sig_install(signo, wd_bt_handler, SA_RESTART, &bt_old) != 0) return -1;
  bt_signo = signo;
  bt_installed = 1;
  return 0;
}

void wd_bt_fini(void) {
  if (!bt_installed) return;
  wd_sig_restore(bt_signo, wd_bt_handler, &bt_old);
  bt_installed = 0;
  for (int i = 0; i < 100 && atomic_load(&bt_entered) > 0; i++) wd_sleep_ns(1000000);
}

static void wd_sleep_ns(long ns) {
  struct timespec ts = {0, ns};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Bounded copy that always terminates (and, unlike snprintf, draws no truncation warning). */
static void wd_copy(char *dst, size_t len, const char *src) {
  size_t n = strnlen(src, len - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static uint64_t wd_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Reads a small /proc file into buf (NUL-terminated). Returns bytes read or -1. */
static ssize_t wd_read_small(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  size_t n = fread(buf, 1, len - 1, f);
  fclose(f);
  buf[n] = '\0';
  return (ssize_t)n;
}

static uint64_t wd_status_mask(const char *status, const char *key) {
  const char *p = strstr(status, key);
  if (!p) return 0;
  return strtoull(p + strlen(key), NULL, 16);
}

/* System calls named in a dump. norestart: one a signal handler makes fail with EINTR whatever
 * SA_RESTART says (signal(7), "never restarted"): a thread blocked in it is sleeping on purpose,
 * and interrupting it costs the application an EINTR it may not expect. The others are where a
 * thread that gives no stack is often found: a driver's ioctl, a lock, a read from a file system
 * or a socket, a child it waits for (calls not listed are named by their number). */
typedef struct wd_bt_call {
  long nr;
  const char *name;
  int norestart;
} wd_bt_call;
static const wd_bt_call wd_bt_calls[] = {
#ifdef SYS_nanosleep
    {SYS_nanosleep, "nanosleep", 1},
#endif
#ifdef SYS_clock_nanosleep
    {SYS_clock_nanosleep, "clock_nanosleep", 1},
#endif
#ifdef SYS_poll
    {SYS_poll, "poll", 1},
#endif
#ifdef SYS_ppoll
    {SYS_ppoll, "ppoll", 1},
#endif
#ifdef SYS_select
    {SYS_select, "select", 1},
#endif
#ifdef SYS_pselect6
    {SYS_pselect6, "pselect6", 1},
#endif
#ifdef SYS_epoll_wait
    {SYS_epoll_wait, "epoll_wait", 1},
#endif
#ifdef SYS_epoll_pwait
    {SYS_epoll_pwait, "epoll_pwait", 1},
#endif
#ifdef SYS_epoll_pwait2
    {SYS_epoll_pwait2, "epoll_pwait2", 1},
#endif
#ifdef SYS_rt_sigtimedwait
    {SYS_rt_sigtimedwait, "rt_sigtimedwait", 1},
#endif
#ifdef SYS_rt_sigsuspend
    {SYS_rt_sigsuspend, "rt_sigsuspend", 1},
#endif
#ifdef SYS_pause
    {SYS_pause, "pause", 1},
#endif
#ifdef SYS_io_getevents
    {SYS_io_getevents, "io_getevents", 1},
#endif
#ifdef SYS_semtimedop
    {SYS_semtimedop, "semtimedop", 1},
#endif
#ifdef SYS_msgrcv
    {SYS_msgrcv, "msgrcv", 1},
#endif
#ifdef SYS_ioctl
    {SYS_ioctl, "ioctl", 0},
#endif
#ifdef SYS_futex
    {SYS_futex, "futex", 0},
#endif
#ifdef SYS_read
    {SYS_read, "read", 0},
#endif
#ifdef SYS_write
    {SYS_write, "write", 0},
#endif
#ifdef SYS_pread64
    {SYS_pread64, "pread64", 0},
#endif
#ifdef SYS_pwrite64
    {SYS_pwrite64, "pwrite64", 0},
#endif
#ifdef SYS_openat
    {SYS_openat, "openat", 0},
#endif
#ifdef SYS_fsync
    {SYS_fsync, "fsync", 0},
#endif
#ifdef SYS_fdatasync
    {SYS_fdatasync, "fdatasync", 0},
#endif
#ifdef SYS_wait4
    {SYS_wait4, "wait4", 0},
#endif
#ifdef SYS_waitid
    {SYS_waitid, "waitid", 0},
#endif
#ifdef SYS_vfork
    {SYS_vfork, "vfork", 0},
#endif
#ifdef SYS_clone
    {SYS_clone, "clone", 0},
#endif
#ifdef SYS_mmap
    {SYS_mmap, "mmap", 0},
#endif
#ifdef SYS_munmap
    {SYS_munmap, "munmap", 0},
#endif
#ifdef SYS_recvfrom
    {SYS_recvfrom, "recvfrom", 0},
#endif
#ifdef SYS_recvmsg
    {SYS_recvmsg, "recvmsg", 0},
#endif
#ifdef SYS_sendmsg
    {SYS_sendmsg, "sendmsg", 0},
#endif
#ifdef SYS_connect
    {SYS_connect, "connect", 0},
#endif
#ifdef SYS_accept4
    {SYS_accept4, "accept4", 0},
#endif
#ifdef SYS_flock
    {SYS_flock, "flock", 0},
#endif
#ifdef SYS_fcntl
    {SYS_fcntl, "fcntl", 0},
#endif
};

/* The system call thread tid is in (/proc/<tid>/syscall: number, six arguments, stack pointer,
 * pc): 1 with its number, its entry in wd_bt_calls (NULL when not listed) and the user-space
 * address the call was made from; 0 when it is in none ("running", or -1). */
static int wd_bt_syscall(int tid, long *nr, const wd_bt_call **call, uint64_t *pc) {
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
  if (wd_read_small(path, buf, sizeof(buf)) <= 0) return 0;
  char *e;
  *nr = strtol(buf, &e, 10);
  if (e == buf || *nr < 0) return 0;
  *call = NULL;
  for (size_t i = 0; i < sizeof(wd_bt_calls) / sizeof(wd_bt_calls[0]); i++)
    if (wd_bt_calls[i].nr == *nr) *call = &wd_bt_calls[i];
  const char *last = strrchr(buf, ' ');
  *pc = last ? strtoull(last + 1, NULL, 16) : 0;
  return 1;
}

/* A thread that gave no stack: its state letter (/proc/<tid>/stat, after the name's closing
 * parenthesis) and the system call it is in, with its call site. */
static void wd_bt_kernel_state(wd_bt_thread *th, uint64_t *pc) {
  *pc = 0; /* not a call site read when it was first looked at */
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/self/task/%d/stat", th->tid);
  ssize_t n = wd_read_small(path, buf, sizeof(buf));
  const char *paren = n > 0 ? strrchr(buf, ')') : NULL;
  if (paren && paren[1] == ' ' && paren[2] >= 'A' && paren[2] <= 'z') th->kstate = paren[2];
  long nr;
  const wd_bt_call *call;
  if (!wd_bt_syscall(th->tid, &nr, &call, pc)) return;
  if (call) wd_copy(th->syscall, sizeof(th->syscall), call->name);
  else snprintf(th->syscall, sizeof(th->syscall), "syscall %d", (int)nr);
}

/* When the thread is blocked in a never-restarted call, its name and its call site. */
static const char *wd_bt_norestart_call(int tid, uint64_t *pc) {
  long nr;
  const wd_bt_call *call;
  return wd_bt_syscall(tid, &nr, &call, pc) && call && call->norestart ? call->name : NULL;
}

/* Fills name and tells whether the thread can answer signo: 1 yes, 0 blocked/ignored, -1 gone. */
static int wd_bt_probe(int tid, int signo, char *name, size_t name_len) {
  char path[64], buf[2048];
  snprintf(path, sizeof(path), "/proc/self/task/%d/comm", tid);
  ssize_t n = wd_read_small(path, buf, sizeof(buf));
  if (n < 0) return -1;
  if (n > 0 && buf[n - 1] == '\n') buf[n - 1] = '\0';
  wd_copy(name, name_len, buf);
  snprintf(path, sizeof(path), "/proc/self/task/%d/status", tid);
  if (wd_read_small(path, buf, sizeof(buf)) < 0) return -1;
  uint64_t bit = 1ull << (signo - 1);
  if ((wd_status_mask(buf, "SigBlk:") & bit) || (wd_status_mask(buf, "SigIgn:") & bit)) return 0;
  return 1;
}

static int wd_bt_list_tids(int *tids, int max) {
  DIR *d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < max) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    tids[n++] = (int)strtol(e->d_name, NULL, 10);
  }
  closedir(d);
  return n;
}

static int wd_bt_read_modules(wd_bt_result *res) {
  FILE *f = fopen("/proc/self/maps", "re");
  if (!f) return -1;
  char *line = NULL;
  size_t cap = 0;
  int n = 0, max = 0;
  wd_bt_module *mods = NULL;
  while (getline(&line, &cap, f) > 0) {
    /* start-end perms offset dev inode [path] */
    char *e;
    uint64_t start = strtoull(line, &e, 16);
    if (*e != '-') continue;
    uint64_t end = strtoull(e + 1, &e, 16);
    while (*e == ' ') e++;
    char perms[8];
    size_t pl = strcspn(e, " ");
    if (pl == 0 || pl >= sizeof(perms)) continue;
    memcpy(perms, e, pl);
    perms[pl] = '\0';
    uint64_t off = strtoull(e + pl, &e, 16);
    for (int field = 0; field < 2; field++) { /* dev, inode */
      while (*e == ' ') e++;
      e += strcspn(e, " \n");
    }
    while (*e == ' ') e++;
    int pathpos = *e && *e != '\n' ? (int)(e - line) : 0;
    if (!strchr(perms, 'x')) continue;
    if (n == max) {
      int nmax = max ? max * 2 : 64;
      wd_bt_module *m = realloc(mods, (size_t)nmax * sizeof(*m));
      if (!m) break;
      mods = m;
      max = nmax;
    }
    wd_bt_module *m = &mods[n++];
    memset(m, 0, sizeof(*m));
    m->start = start;
    m->end = end;
    m->offset = off;
    wd_copy(m->perms, sizeof(m->perms), perms);
    if (pathpos > 0) {
      char *path = line + pathpos;
      path[strcspn(path, "\n")] = '\0';
      wd_copy(m->path, sizeof(m->path), path);
    }
  }
  free(line);
  fclose(f);
  res->modules = mods;
  res->nmodules = n;
  return 0;
}

static const wd_bt_module *wd_bt_find_module(const wd_bt_result *res, uint64_t pc) {
  int lo = 0, hi = res->nmodules - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    const wd_bt_module *m = &res->modules[mid];
    if (pc < m->start) hi = mid - 1;
    else if (pc >= m->end) lo = mid + 1;
    else return m;
  }
  return NULL;
}

/* Symbol of an address in a hidden (non-dynamic) symbol: libunwind reads the object's .symtab.
 * This libunwind has no by-ip lookup, so point a local cursor at the address. */
static int wd_bt_unw_name(uint64_t addr, char *buf, size_t len, uint64_t *off) {
  unw_context_t ctx;
  unw_cursor_t cur;
  unw_word_t o = 0;
  if (unw_getcontext(&ctx) != 0 || unw_init_local(&cur, &ctx) != 0) return -1;
  if (unw_set_reg(&cur, UNW_REG_IP, (unw_word_t)addr) != 0) return -1;
  if (unw_get_proc_name(&cur, buf, len, &o) != 0 || buf[0] == '\0') return -1;
  /* libunwind names the nearest preceding symbol, whatever its size: in a stripped object that
   * is some unrelated exported function. Keep the name only when it starts where the unwind
   * info says the function containing addr starts. */
  unw_proc_info_t pi;
  if (unw_get_proc_info(&cur, &pi) != 0 || pi.start_ip != (unw_word_t)addr - o) {
    buf[0] = '\0';
    return -1;
  }
  *off = o;
  return 0;
}

/* Symbolisation state for one collection. Threads share most return addresses (the same
 * waits, the same thread entry points), and dladdr scans a module's whole dynamic symbol table
 * per call, so results are memoised by pc. */
#define WD_BT_SYMCACHE 4096 /* power of two */
typedef struct wd_bt_sym {
  const wd_bt_result *res;
  signed char *symtab; /* per module: 0 unknown, 1 has .symtab, -1 has none */
  struct {
    const wd_bt_frame *f;
    int exact;
  } cache[WD_BT_SYMCACHE];
} wd_bt_sym;

/* Whether an ELF file has a .symtab (local symbols: hidden functions, statics). Without one,
 * libunwind's name lookup could only offer the nearest exported symbol, which dladdr already
 * rejected, and it maps the whole file per call. */
static int wd_elf_has_symtab(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  int found = 0;
  Elf64_Ehdr eh;
  if (pread(fd, &eh, sizeof(eh), 0) == (ssize_t)sizeof(eh) &&
      memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0 && eh.e_ident[EI_CLASS] == ELFCLASS64 &&
      eh.e_shentsize == sizeof(Elf64_Shdr) && eh.e_shnum > 0 && eh.e_shnum < 65000) {
    size_t len = (size_t)eh.e_shnum * sizeof(Elf64_Shdr);
    Elf64_Shdr *sh = malloc(len);
    if (sh && pread(fd, sh, len, (off_t)eh.e_shoff) == (ssize_t)len) {
      for (int i = 0; i < eh.e_shnum && !found; i++) found = sh[i].sh_type == SHT_SYMTAB;
    }
    free(sh);
  }
  close(fd);
  return found;
}

/* C++ names through the C++ runtime's own demangler, when the process has it loaded (PyTorch
 * and NCCL always do); the raw name is kept beside. Never loads anything. */
typedef char *(*wd_cxa_demangle_fn)(const char *, char *, size_t *, int *);

static void wd_bt_demangle(wd_bt_frame *f) {
  if (strncmp(f->symbol, "_Z", 2) != 0) return;
  static void *sym;
  static int looked;
  if (!looked) {
    sym = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    looked = 1;
  }
  if (!sym) return;
  wd_cxa_demangle_fn fn;
  *(void **)&fn = sym;
  int status = -1;
  char *d = fn(f->symbol, NULL, NULL, &status);
  if (status == 0 && d) {
    wd_copy(f->mangled, sizeof(f->mangled), f->symbol);
    wd_copy(f->symbol, sizeof(f->symbol), d);
  }
  free(d);
}

static void wd_bt_symbolise(wd_bt_sym *sc, wd_bt_frame *f, int exact) {
  const wd_bt_result *res = sc->res;
  size_t h = (size_t)((f->pc * 0x9e3779b97f4a7c15ull) >> 52) & (WD_BT_SYMCACHE - 1);
  for (size_t k = 0; k < 8; k++) {
    size_t j = (h + k) & (WD_BT_SYMCACHE - 1);
    const wd_bt_frame *c = sc->cache[j].f;
    if (!c) {
      sc->cache[j].f = f;
      sc->cache[j].exact = exact;
      break;
    }
    if (c->pc == f->pc && sc->cache[j].exact == exact) {
      *f = *c;
      return;
    }
  }
  /* A return address points after the call; look up the call itself. */
  uint64_t addr = exact ? f->pc : f->pc - 1;
  const wd_bt_module *m = wd_bt_find_module(res, f->pc);
  Dl_info info;
  struct link_map *lm = NULL;
  memset(&info, 0, sizeof(info));
  int ok = dladdr1((void *)(uintptr_t)addr, &info, (void **)&lm, RTLD_DL_LINKMAP) != 0;
  if (m && m->path[0]) wd_copy(f->module, sizeof(f->module), m->path);
  else if (ok && info.dli_fname) wd_copy(f->module, sizeof(f->module), info.dli_fname);
  /* l_addr is the load bias: pc - l_addr is the address addr2line expects, for PIE and
   * non-PIE objects alike. Without the loader's view, derive it from the mapping. */
  if (ok && lm) f->module_offset = f->pc - (uint64_t)lm->l_addr;
  else if (ok) f->module_offset = f->pc - (uint64_t)(uintptr_t)info.dli_fbase;
  else if (m) f->module_offset = f->pc - m->start + m->offset;
  if (ok && info.dli_sname && info.dli_saddr) {
    wd_copy(f->symbol, sizeof(f->symbol), info.dli_sname);
    f->symbol_offset = f->pc - (uint64_t)(uintptr_t)info.dli_saddr;
    wd_bt_demangle(f);
    return;
  }
  f->symbol[0] = '\0';
  if (!m || m->path[0] != '/' || !sc->symtab) return;
  signed char *st = &sc->symtab[m - res->modules];
  if (*st == 0) *st = wd_elf_has_symtab(m->path) ? 1 : -1;
  uint64_t off = 0;
  if (*st > 0 && wd_bt_unw_name(addr, f->symbol, sizeof(f->symbol), &off) == 0) {
    f->symbol_offset = off + (f->pc - addr);
    wd_bt_demangle(f);
  }
}

static void wd_bt_fill(wd_bt_sym *sc, wd_bt_thread *th, const uint64_t *pcs, int n, int exact0) {
  th->nframes = n;
  for (int i = 0; i < n; i++) {
    wd_bt_frame *f = &th->frames[i];
    memset(f, 0, sizeof(*f));
    f->pc = pcs[i];
    wd_bt_symbolise(sc, f, i == 0 && exact0);
  }
}

/* Withdraw the table from handlers; returns 1 when no handler can still be touching it. */
static int wd_bt_withdraw(void) {
  atomic_store(&bt_table, NULL);
  for (int i = 0; i < 1000; i++) {
    if (atomic_load(&bt_inside) == 0) return 1;
    wd_sleep_ns(1000000);
  }
  return 0;
}

int wd_bt_collect(wd_bt_result *res, uint64_t wait_ns, int interrupt_all) {
  if (!res) return -1;
  memset(res, 0, sizeof(*res));
  if (!bt_installed) return -1;
  /* One collection at a time; trylock so a forked child whose parent was collecting fails
   * instead of deadlocking. */
  if (pthread_mutex_trylock(&bt_collect_lock) != 0) return -1;

  int rc = -1;
  int *tids = malloc(WD_BT_MAX_THREADS * sizeof(int));
  uint64_t *site = NULL; /* call sites of threads left alone */
  wd_bt_table *t = calloc(1, sizeof(*t));
  int n = tids ? wd_bt_list_tids(tids, WD_BT_MAX_THREADS) : -1;
  if (n <= 0 || !t) goto out;
  t->slots = calloc((size_t)n, sizeof(*t->slots));
  res->threads = calloc((size_t)n, sizeof(*res->threads));
  site = calloc((size_t)n, sizeof(*site));
  if (!t->slots || !res->threads || !site) goto out;
  t->n = n;
  t->pid = getpid();
  res->nthreads = n;

  int self = wd_gettid();
  int selfidx = -1;
  for (int i = 0; i < n; i++) {
    wd_bt_thread *th = &res->threads[i];
    th->tid = tids[i];
    t->slots[i].tid = tids[i];
    int p = wd_bt_probe(tids[i], bt_signo, th->name, sizeof(th->name));
    const char *call = NULL;
    if (tids[i] == self) {
      th->status = WD_BT_SELF;
      selfidx = i;
    } else if (p < 0) {
      th->status = WD_BT_GONE;
    } else if (p == 0) {
      th->status = WD_BT_BLOCKED;
    } else if (!interrupt_all && (call = wd_bt_norestart_call(tids[i], &site[i])) != NULL) {
      th->status = WD_BT_LEFT_ALONE;
      wd_copy(th->syscall, sizeof(th->syscall), call);
    } else {
      th->status = WD_BT_NO_ANSWER;
      atomic_store_explicit(&t->slots[i].state, WD_BT_ARMED, memory_order_relaxed);
    }
  }
  /* The signal's action is checked where it is relied on: a framework may have put back what it
   * took for "the original handler" (SIG_DFL: the signal would end the process). Taken back,
   * chaining to what is there; if that fails, nobody is asked. */
  struct sigaction found;
  int own = wd_sig_reclaim(bt_signo, wd_bt_handler, SA_RESTART, &bt_old, &found);
  if (own != 0) {
    res->signal_taken_back = own;
    wd_sig_describe(&found, res->signal_found, sizeof(res->signal_found));
  }
  /* Publish (seq_cst) before the first signal, so every handler finds its armed slot. */
  atomic_store(&bt_table, t);
  pid_t pid = getpid();
  int pending = 0;
  for (int i = 0; i < n; i++) {
    if (res->threads[i].status != WD_BT_NO_ANSWER) continue;
    /* Still ours right before each signal (the application may reset it meanwhile). */
    if (own < 0 || wd_sig_is_ours(bt_signo, wd_bt_handler) != 1) {
      own = -1;
      res->signal_taken_back = -1;
      int expect = WD_BT_ARMED;
      atomic_compare_exchange_strong(&t->slots[i].state, &expect, WD_BT_IDLE);
      res->threads[i].status = WD_BT_NOT_ASKED;
      continue;
    }
    if (syscall(SYS_tgkill, pid, tids[i], bt_signo) != 0) {
      int expect = WD_BT_ARMED;
      atomic_compare_exchange_strong(&t->slots[i].state, &expect, WD_BT_IDLE);
      res->threads[i].status = WD_BT_GONE;
      continue;
    }
    res->asked++;
    pending++;
  }

  /* The collecting thread goes last, while the others unwind. */
  uint64_t self_pcs[WD_BT_MAX_FRAMES];
  int self_n = 0, self_exact0 = 0;
  if (selfidx >= 0) self_n = wd_bt_unwind(self_pcs, WD_BT_MAX_FRAMES, 0, &self_exact0);

  uint64_t deadline = wd_now_ns() + wait_ns;
  for (int round = 1;; round++) {
    int done = 0;
    for (int i = 0; i < n; i++)
      if (atomic_load_explicit(&t->slots[i].state, memory_order_acquire) == WD_BT_DONE) done++;
    if (done >= pending || wd_now_ns() >= deadline) break;
    if (round % 10 == 0) {
      /* A thread that exited after it was signalled will never answer: stop waiting for it. */
      for (int i = 0; i < n; i++) {
        int expect = WD_BT_ARMED;
        if (res->threads[i].status == WD_BT_NO_ANSWER &&
            atomic_load(&t->slots[i].state) == WD_BT_ARMED &&
            syscall(SYS_tgkill, pid, tids[i], 0) != 0 && errno == ESRCH &&
            atomic_compare_exchange_strong(&t->slots[i].state, &expect, WD_BT_IDLE)) {
          res->threads[i].status = WD_BT_GONE;
          pending--;
        }
      }
    }
    wd_sleep_ns(1000000);
  }
  for (int i = 0; i < n; i++) {
    wd_bt_slot *s = &t->slots[i];
    if (res->threads[i].status != WD_BT_NO_ANSWER) continue;
    /* ARMED -> IDLE: a handler that comes in later leaves the slot alone. */
    int expect = WD_BT_ARMED;
    if (atomic_compare_exchange_strong(&s->state, &expect, WD_BT_IDLE)) continue;
    if (expect != WD_BT_DONE) continue; /* still unwinding: reported as no answer */
    atomic_thread_fence(memory_order_acquire);
    res->threads[i].status = WD_BT_OK;
    res->answered++;
  }
  /* Where the threads that gave no stack are, as the kernel tells it. */
  for (int i = 0; i < n; i++)
    if (res->threads[i].status == WD_BT_NO_ANSWER || res->threads[i].status == WD_BT_BLOCKED ||
        res->threads[i].status == WD_BT_NOT_ASKED)
      wd_bt_kernel_state(&res->threads[i], &site[i]);
  int can_free = wd_bt_withdraw();
  /* Symbolise after withdrawal: dladdr and the ELF reader take locks a handler may need. */
  wd_bt_read_modules(res);
  wd_bt_sym *sc = calloc(1, sizeof(*sc));
  if (sc) {
    sc->res = res;
    sc->symtab = res->nmodules ? calloc((size_t)res->nmodules, 1) : NULL;
    if (selfidx >= 0) wd_bt_fill(sc, &res->threads[selfidx], self_pcs, self_n, self_exact0);
    for (int i = 0; i < n; i++) {
      if (res->threads[i].status == WD_BT_OK)
        wd_bt_fill(sc, &res->threads[i], t->slots[i].pcs, t->slots[i].n, t->slots[i].exact0);
      /* The pc is after the system call instruction: a return address, not exact. */
      else if (res->threads[i].status != WD_BT_GONE && res->threads[i].status != WD_BT_SELF && site[i])
        wd_bt_fill(sc, &res->threads[i], &site[i], 1, 0);
    }
    free(sc->symtab);
    free(sc);
  }
  if (can_free) {
    free(t->slots);
    free(t);
  } /* else: a handler is stuck inside; leaking the table is the only safe choice. */
  t = NULL;
  rc = 0;

out:
  if (t) {
    free(t->slots);
    free(t);
  }
  free(tids);
  free(site);
  if (rc != 0) wd_bt_free(res);
  pthread_mutex_unlock(&bt_collect_lock);
  return rc;
}

void wd_bt_free(wd_bt_result *res) {
  if (!res) return;
  free(res->threads);
  free(res->modules);
  memset(res, 0, sizeof(*res));
}
