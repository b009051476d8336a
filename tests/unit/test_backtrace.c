/*
 * All-thread backtraces. Every test installs a signal handler and starts threads, so each runs
 * in a forked child with a bounded wait; the child reports failed checks on stderr and through
 * its exit status.
 */
#include "stacks/backtrace.h"

#include <CUnit/Basic.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "wd_test_util.h"

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
#define WD_TEST_TSAN 1
#else
#define WD_TEST_TSAN 0
#endif

/* ---- child-side checks ---- */

#define CHECK(cond) WD_CHILD_CHECK(cond)

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int bt_signo(void) { return SIGRTMIN + 5; }

/* TSan defers a signal until the thread enters one of its interceptors or a blocking call it
 * knows about; read() on a pipe is neither, so under TSan park_c answers only once the read
 * returns. That is TSan's delivery model, not ours: expect no answer from it there. */
static int park_answers(int i) { return !(WD_TEST_TSAN && i == 2); }

/* ---- parked threads, each in a recognisable function ---- */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static atomic_int g_stop;
static atomic_int g_ready;
static int g_pipe[2];

/* Each park function keeps working after its blocking call so the call is not a tail call and
 * the function stays on the stack. */
__attribute__((noinline, visibility("default"))) int wd_test_park_a(void) {
  int rounds = 0;
  pthread_mutex_lock(&g_mu);
  atomic_fetch_add(&g_ready, 1);
  while (!atomic_load(&g_stop)) {
    pthread_cond_wait(&g_cv, &g_mu);
    rounds++;
  }
  pthread_mutex_unlock(&g_mu);
  return rounds;
}

/* Sleeps in rounds of ns until the test stops: the thread sits in nanosleep. */
static __attribute__((noinline)) int park_sleeping(long ns) {
  int rounds = 0;
  atomic_fetch_add(&g_ready, 1);
  while (!atomic_load(&g_stop)) {
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
    rounds++;
  }
  return rounds;
}

__attribute__((noinline, visibility("default"))) int wd_test_park_b(void) {
  int rounds = park_sleeping(2000000);
  __asm__ volatile("" ::: "memory"); /* not a tail call: this frame stays on the stack */
  return rounds;
}

__attribute__((noinline, visibility("default"))) int wd_test_park_c(void) {
  int rounds = 0;
  char c;
  atomic_fetch_add(&g_ready, 1);
  while (read(g_pipe[0], &c, 1) < 0 && errno == EINTR) rounds++;
  return rounds + c;
}

__attribute__((noinline, visibility("default"))) int wd_test_park_d(void) {
  int rounds = 0;
  atomic_fetch_add(&g_ready, 1);
  while (!atomic_load(&g_stop)) {
    poll(NULL, 0, 3);
    rounds++;
  }
  return rounds;
}

__attribute__((noinline, visibility("default"))) int wd_test_park_e(void) {
  int rounds = 0;
  atomic_fetch_add(&g_ready, 1);
  while (!atomic_load(&g_stop)) {
    sched_yield();
    rounds++;
  }
  return rounds;
}

/* Interrupted outside any call: frame 0 is an instruction of this function itself. */
__attribute__((noinline, visibility("default"))) int wd_test_park_f(void) {
  volatile unsigned x = 1;
  atomic_fetch_add(&g_ready, 1);
  while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) x = x * 1103515245u + 12345u;
  return (int)x;
}

/* The blocked thread sleeps long: its /proc state and its system call are read one after the
 * other, and a short sleep lets a loaded machine catch it runnable between two sleeps (state R
 * first, then already back in nanosleep). */
__attribute__((noinline, visibility("default"))) int wd_test_park_blocked(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, bt_signo());
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  return park_sleeping(250000000);
}

typedef int (*park_fn)(void);
static const struct {
  const char *name;
  park_fn fn;
} g_parks[] = {
    {"wd_test_park_a", wd_test_park_a}, {"wd_test_park_b", wd_test_park_b},
    {"wd_test_park_c", wd_test_park_c}, {"wd_test_park_d", wd_test_park_d},
    {"wd_test_park_e", wd_test_park_e}, {"wd_test_park_f", wd_test_park_f},
};
#define NPARK 6

typedef struct parked {
  park_fn fn;
  char name[16];
  atomic_int tid;
  pthread_t th;
} parked;

static void *park_main(void *arg) {
  parked *p = arg;
  pthread_setname_np(pthread_self(), p->name);
  atomic_store(&p->tid, (int)syscall(SYS_gettid));
  p->fn();
  return NULL;
}

static void start_parked(parked *p, park_fn fn, const char *name) {
  p->fn = fn;
  snprintf(p->name, sizeof(p->name), "%s", name);
  atomic_store(&p->tid, 0);
  CHECK(pthread_create(&p->th, NULL, park_main, p) == 0);
}

static void wait_ready(int n) {
  uint64_t end = now_ns() + 5000000000ull;
  while (atomic_load(&g_ready) < n && now_ns() < end) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  CHECK(atomic_load(&g_ready) >= n);
  /* Let each reach its blocking call. */
  struct timespec ts = {0, 20000000};
  nanosleep(&ts, NULL);
}

static void stop_parked(parked *ps, int n) {
  atomic_store(&g_stop, 1);
  pthread_mutex_lock(&g_mu);
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
  CHECK(write(g_pipe[1], "x", 1) == 1);
  for (int i = 0; i < n; i++) pthread_join(ps[i].th, NULL);
}

static const wd_bt_thread *find_thread(const wd_bt_result *r, int tid) {
  for (int i = 0; i < r->nthreads; i++)
    if (r->threads[i].tid == tid) return &r->threads[i];
  return NULL;
}

static const wd_bt_frame *find_frame(const wd_bt_thread *t, const char *sym) {
  for (int i = 0; i < t->nframes; i++)
    if (strcmp(t->frames[i].symbol, sym) == 0) return &t->frames[i];
  return NULL;
}

static void dump_thread(const wd_bt_thread *t) {
  fprintf(stderr, "  tid %d '%s' status %d state %c syscall '%s' frames %d\n", t->tid, t->name, t->status,
          t->kstate ? t->kstate : '-', t->syscall, t->nframes);
  for (int i = 0; i < t->nframes; i++)
    fprintf(stderr, "    #%d 0x%llx %s+0x%llx (%s+0x%llx)\n", i, (unsigned long long)t->frames[i].pc,
            t->frames[i].symbol, (unsigned long long)t->frames[i].symbol_offset, t->frames[i].module,
            (unsigned long long)t->frames[i].module_offset);
}

/* ---- tests ---- */

__attribute__((noinline, visibility("default"))) int wd_test_collector(wd_bt_result *r) {
  int rc = wd_bt_collect(r, 2000000000ull, 1);
  __asm__ volatile("" ::: "memory"); /* not a tail call */
  return rc;
}

static void child_all_threads(void) {
  CHECK(pipe(g_pipe) == 0);
  CHECK(wd_bt_init(bt_signo()) == 0);
  parked ps[NPARK + 1];
  char name[16];
  for (int i = 0; i < NPARK; i++) {
    snprintf(name, sizeof(name), "wdpark-%c", 'a' + i);
    start_parked(&ps[i], g_parks[i].fn, name);
  }
  start_parked(&ps[NPARK], wd_test_park_blocked, "wdpark-blk");
  wait_ready(NPARK + 1);

  wd_bt_result r;
  CHECK(wd_test_collector(&r) == 0);
  int self = (int)syscall(SYS_gettid);
  CHECK(r.nthreads >= NPARK + 2);
  /* Asked: every thread but this one and the blocked ones (sanitizer runtimes may add
   * threads of their own; they are counted wherever their mask puts them). */
  int nblocked = 0, nself = 0, nok = 0;
  for (int i = 0; i < r.nthreads; i++) {
    nblocked += r.threads[i].status == WD_BT_BLOCKED;
    nself += r.threads[i].status == WD_BT_SELF;
    nok += r.threads[i].status == WD_BT_OK;
  }
  CHECK(nself == 1 && nblocked >= 1);
  CHECK(r.asked == r.nthreads - nself - nblocked);
  CHECK(r.asked >= NPARK);
  CHECK(nok == r.answered);
  CHECK(r.answered == r.asked - (WD_TEST_TSAN ? 1 : 0));
  for (int i = 0; i < NPARK; i++) {
    const wd_bt_thread *t = find_thread(&r, atomic_load(&ps[i].tid));
    CHECK(t != NULL);
    if (!t) continue;
    if (!park_answers(i)) {
      fprintf(stderr, "TSan: not expecting an answer from %s (signal deferred in read)\n",
              g_parks[i].name);
      /* No stack: where the kernel has it (in read), its call site at most. */
      CHECK(t->status == WD_BT_NO_ANSWER && t->nframes <= 1 && t->kstate != 0);
      continue;
    }
    CHECK(t->status == WD_BT_OK);
    CHECK(strcmp(t->name, ps[i].name) == 0);
    CHECK(t->nframes > 1);
    const wd_bt_frame *f = find_frame(t, g_parks[i].name);
    CHECK(f != NULL);
    if (f) {
      /* The frame's pc lies inside the function, at the offset the symboliser reports. */
      uint64_t start = (uint64_t)(uintptr_t)g_parks[i].fn;
      CHECK(f->pc > start && f->pc - start == f->symbol_offset);
      CHECK(f->module[0] == '/');
      CHECK(f->module_offset > 0 && f->module_offset < f->pc);
    }
    /* The thread's start routine is further up than the park function. */
    CHECK(find_frame(t, "park_main") != NULL);
    if (!f || t->status != WD_BT_OK) dump_thread(t);
  }
  /* The spinning thread was interrupted inside its own function: frame 0 is in it. */
  const wd_bt_thread *spin = find_thread(&r, atomic_load(&ps[5].tid));
  /* Under TSan the handler runs later from its runtime, not at the interrupted instruction. */
  if (spin && !WD_TEST_TSAN) {
    CHECK(spin->nframes > 0 && strcmp(spin->frames[0].symbol, "wd_test_park_f") == 0);
    if (spin->nframes == 0 || strcmp(spin->frames[0].symbol, "wd_test_park_f") != 0)
      dump_thread(spin);
  }

  const wd_bt_thread *blk = find_thread(&r, atomic_load(&ps[NPARK].tid));
  CHECK(blk && blk->status == WD_BT_BLOCKED && blk->nframes <= 1);
  /* Not asked, but placed by the kernel: asleep in nanosleep (parked in wd_test_park_blocked),
   * frame 0 its call site; a thread caught between two sleeps shows no call. */
  CHECK(blk && blk->kstate != 0);
  if (blk && blk->syscall[0]) {
    CHECK(strstr(blk->syscall, "nanosleep") && blk->kstate == 'S' && blk->nframes == 1);
    if (!strstr(blk->syscall, "nanosleep") || blk->nframes != 1) dump_thread(blk);
  }
  CHECK(blk && strcmp(blk->name, "wdpark-blk") == 0);

  const wd_bt_thread *me = find_thread(&r, self);
  CHECK(me && me->status == WD_BT_SELF);
  CHECK(me && find_frame(me, "wd_test_collector") != NULL);
  CHECK(me && find_frame(me, "child_all_threads") != NULL);
  if (me && !find_frame(me, "wd_test_collector")) dump_thread(me);

  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  CHECK(n > 0);
  exe[n > 0 ? n : 0] = '\0';
  int has_exe = 0;
  CHECK(r.nmodules > 0);
  for (int i = 0; i < r.nmodules; i++) {
    CHECK(r.modules[i].start < r.modules[i].end);
    CHECK(strchr(r.modules[i].perms, 'x') != NULL);
    if (strcmp(r.modules[i].path, exe) == 0) has_exe = 1;
  }
  CHECK(has_exe);
  wd_bt_free(&r);
  CHECK(r.threads == NULL && r.modules == NULL && r.nthreads == 0);

  stop_parked(ps, NPARK + 1);
  wd_bt_fini();
  close(g_pipe[0]);
  close(g_pipe[1]);
}

static void child_repeat(void) {
  CHECK(pipe(g_pipe) == 0);
  CHECK(wd_bt_init(bt_signo()) == 0);
  parked ps[NPARK];
  int np = 0;
  for (int i = 0; i < NPARK; i++)
    if (park_answers(i)) start_parked(&ps[np++], g_parks[i].fn, "wdrep");
  wait_ready(np);
  for (int k = 0; k < 20; k++) {
    wd_bt_result r;
    CHECK(wd_bt_collect(&r, 2000000000ull, 1) == 0);
    CHECK(r.asked >= np && r.answered == r.asked);
    for (int i = 0, j = 0; i < NPARK; i++) {
      if (!park_answers(i)) continue;
      const wd_bt_thread *t = find_thread(&r, atomic_load(&ps[j++].tid));
      CHECK(t && t->status == WD_BT_OK && find_frame(t, g_parks[i].name));
    }
    wd_bt_free(&r);
  }
  stop_parked(ps, np);
  wd_bt_fini();
  close(g_pipe[0]);
  close(g_pipe[1]);
}

/* Threads come and go while collections run: each may be listed and then exit before or after
 * it is signalled. Collection must neither crash nor wait the full bound for them. */
static void *short_lived(void *arg) {
  (void)arg;
  volatile int x = 0;
  for (int i = 0; i < 1000; i++) x += i;
  return NULL;
}

static void *churn_main(void *arg) {
  (void)arg;
  while (!atomic_load(&g_stop)) {
    pthread_t th[8];
    int k = 0;
    for (; k < 8; k++)
      if (pthread_create(&th[k], NULL, short_lived, NULL) != 0) break;
    for (int i = 0; i < k; i++) pthread_join(th[i], NULL);
  }
  return NULL;
}

static void child_churn(void) {
  CHECK(pipe(g_pipe) == 0);
  CHECK(wd_bt_init(bt_signo()) == 0);
  parked p;
  start_parked(&p, wd_test_park_b, "wdstable");
  wait_ready(1);
  pthread_t churn;
  CHECK(pthread_create(&churn, NULL, churn_main, NULL) == 0);
  int gone = 0, slow = 0;
  for (int k = 0; k < 20; k++) {
    wd_bt_result r;
    uint64_t t0 = now_ns();
    CHECK(wd_bt_collect(&r, 5000000000ull, 1) == 0);
    /* Exited threads are noticed within a few polls, not after the 5 s bound. */
    if (now_ns() - t0 > 2500000000ull) slow++;
    const wd_bt_thread *t = find_thread(&r, atomic_load(&p.tid));
    CHECK(t && t->status == WD_BT_OK && find_frame(t, "wd_test_park_b"));
    int ok = 0;
    for (int i = 0; i < r.nthreads; i++) {
      int st = r.threads[i].status;
      CHECK(st >= WD_BT_OK && st <= WD_BT_GONE);
      if (st == WD_BT_GONE) gone++;
      if (st == WD_BT_OK) ok++;
      /* No stack but, for one that gave none, its call site where the kernel tells it. */
      if (st != WD_BT_OK && st != WD_BT_SELF) CHECK(r.threads[i].nframes <= (st == WD_BT_GONE ? 0 : 1));
    }
    CHECK(ok == r.answered);
    wd_bt_free(&r);
  }
  CHECK(slow == 0);
  fprintf(stderr, "churn: %d threads reported gone over 20 collections\n", gone);
  atomic_store(&g_stop, 1);
  pthread_join(churn, NULL);
  pthread_join(p.th, NULL);
  wd_bt_fini();
  close(g_pipe[0]);
  close(g_pipe[1]);
}

/* A thread suspended by vfork (until its child exits) has the signal unblocked but cannot run
 * a handler: the honest way to get a thread that is asked and never answers in time. The raw
 * clone keeps sanitizers from turning vfork into fork. */
__attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize_undefined)) static int
vfork_child(void *arg) {
  (void)arg;
  static const struct timespec ts = {1, 500000000};
  syscall(SYS_nanosleep, &ts, NULL);
  return 0;
}

static atomic_int g_vfork_tid;
static atomic_int g_vfork_in;

static void *vfork_main(void *arg) {
  (void)arg;
  static char stack[64 * 1024] __attribute__((aligned(16)));
  atomic_store(&g_vfork_tid, (int)syscall(SYS_gettid));
  atomic_store(&g_vfork_in, 1);
  pid_t pid = clone(vfork_child, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, NULL);
  if (pid > 0) waitpid(pid, NULL, 0);
  return NULL;
}

static void child_no_answer(void) {
  CHECK(wd_bt_init(bt_signo()) == 0);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, vfork_main, NULL) == 0);
  while (!atomic_load(&g_vfork_in)) sched_yield();
  struct timespec ts = {0, 100000000};
  nanosleep(&ts, NULL); /* inside the vfork wait by now */
  wd_bt_result r;
  uint64_t t0 = now_ns();
  CHECK(wd_bt_collect(&r, 200000000ull, 1) == 0);
  uint64_t took = now_ns() - t0;
  const wd_bt_thread *t = find_thread(&r, atomic_load(&g_vfork_tid));
  CHECK(t && t->status == WD_BT_NO_ANSWER && t->nframes <= 1);
  /* No stack, but the kernel's word on it: in the clone that waits for its vfork child,
   * uninterruptible; frame 0 the call site. */
  CHECK(t && t->kstate == 'D' && strcmp(t->syscall, "clone") == 0 && t->nframes == 1);
  if (t && (t->kstate != 'D' || strcmp(t->syscall, "clone") != 0)) dump_thread(t);
  CHECK(r.answered == r.asked - 1);
  CHECK(took >= 200000000ull);
  CHECK(took < 200000000ull + 1000000000ull);
  fprintf(stderr, "no_answer: collect with a 200 ms bound took %.1f ms\n", (double)took / 1e6);
  wd_bt_free(&r);
  /* The late signal lands after the table is withdrawn: it must find nothing and do nothing. */
  pthread_join(th, NULL);
  CHECK(wd_bt_collect(&r, 1000000000ull, 1) == 0);
  CHECK(r.answered == r.asked);
  wd_bt_free(&r);
  wd_bt_fini();
}

static atomic_int g_app_calls;
static void app_handler(int sig) {
  (void)sig;
  atomic_fetch_add(&g_app_calls, 1);
}

/* A signal that is not part of a collection goes to the application's handler; fini puts that
 * handler back; without a previous function handler it is swallowed, never fatal. */
static void child_chain_and_fini(void) {
  int sig = bt_signo();
  struct sigaction sa, cur;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = app_handler;
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(sig, &sa, NULL) == 0);
  CHECK(wd_bt_init(sig) == 0);
  CHECK(wd_bt_init(sig) == 0);       /* idempotent */
  CHECK(wd_bt_init(sig + 1) == -1);  /* one signal at a time */
  CHECK(kill(getpid(), sig) == 0);
  CHECK(atomic_load(&g_app_calls) == 1);
  wd_bt_fini();
  CHECK(sigaction(sig, NULL, &cur) == 0 && cur.sa_handler == app_handler);
  wd_bt_fini(); /* idempotent */

  signal(sig, SIG_DFL);
  CHECK(wd_bt_init(sig) == 0);
  CHECK(kill(getpid(), sig) == 0); /* would kill us if chained to SIG_DFL */
  /* Someone replaces our handler: fini leaves theirs. */
  CHECK(sigaction(sig, &sa, NULL) == 0);
  wd_bt_fini();
  CHECK(sigaction(sig, NULL, &cur) == 0 && cur.sa_handler == app_handler);
  wd_bt_result r;
  CHECK(wd_bt_collect(&r, 1000000, 1) == -1); /* not initialised */
  CHECK(r.nthreads == 0 && r.threads == NULL);
}

/* ---- EINTR: sleepers in never-restarted calls ---- */

static atomic_int g_eintr_sleep, g_eintr_wait, g_sleepers_up;

__attribute__((noinline, visibility("default"))) int wd_test_sleeper(void) {
  atomic_fetch_add(&g_sleepers_up, 1);
  while (!atomic_load(&g_stop)) {
    struct timespec ts = {0, 300000000};
    if (nanosleep(&ts, NULL) != 0 && errno == EINTR) atomic_fetch_add(&g_eintr_sleep, 1);
  }
  return 0;
}

__attribute__((noinline, visibility("default"))) int wd_test_waiter(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  atomic_fetch_add(&g_sleepers_up, 1);
  while (!atomic_load(&g_stop)) {
    struct timespec ts = {0, 300000000};
    if (sigtimedwait(&set, NULL, &ts) < 0 && errno == EINTR) atomic_fetch_add(&g_eintr_wait, 1);
  }
  return 0;
}

static void *sleeper_main(void *arg) {
  if (arg) wd_test_waiter();
  else wd_test_sleeper();
  return NULL;
}

/* Waits until both sleepers are up, then a little for them to enter their call. */
static void wait_in_call(void) {
  uint64_t end = now_ns() + 5000000000ull;
  while (atomic_load(&g_sleepers_up) < 2 && now_ns() < end) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  struct timespec ts = {0, 50000000};
  nanosleep(&ts, NULL);
}

static void child_eintr(void) {
  CHECK(wd_bt_init(bt_signo()) == 0);
  pthread_t th[2];
  atomic_store(&g_stop, 0);
  CHECK(pthread_create(&th[0], NULL, sleeper_main, NULL) == 0);
  static int waiter = 1;
  CHECK(pthread_create(&th[1], NULL, sleeper_main, &waiter) == 0);
  wait_in_call();

  /* The default: neither sleeper is interrupted, both are named with their call. */
  int left = 0, named_sleep = 0, named_wait = 0, in_libc = 0;
  for (int k = 0; k < 5; k++) {
    wd_bt_result r;
    CHECK(wd_bt_collect(&r, 1000000000ull, 0) == 0);
    for (int i = 0; i < r.nthreads; i++) {
      const wd_bt_thread *t = &r.threads[i];
      if (t->status != WD_BT_LEFT_ALONE) continue;
      left++;
      named_sleep += strstr(t->syscall, "nanosleep") != NULL;
      named_wait += strcmp(t->syscall, "rt_sigtimedwait") == 0;
      in_libc += t->nframes == 1 && strstr(t->frames[0].module, "libc") != NULL;
    }
    wd_bt_free(&r);
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
  }
  fprintf(stderr, "EINTR, default: %d left alone (%d nanosleep, %d sigtimedwait, %d in libc), "
          "%d+%d EINTR\n", left, named_sleep, named_wait, in_libc,
          atomic_load(&g_eintr_sleep), atomic_load(&g_eintr_wait));
  CHECK(atomic_load(&g_eintr_sleep) == 0 && atomic_load(&g_eintr_wait) == 0);
  /* Between two 300 ms calls a sleeper is briefly running: most rounds still catch it inside. */
  CHECK(named_sleep >= 3 && named_wait >= 3);
  CHECK(in_libc == left);

  /* interrupt_all: the same collection costs each sleeper an EINTR. */
  wd_bt_result r;
  CHECK(wd_bt_collect(&r, 1000000000ull, 1) == 0);
  int ok = 0;
  for (int i = 0; i < r.nthreads; i++) {
    CHECK(r.threads[i].status != WD_BT_LEFT_ALONE);
    ok += r.threads[i].status == WD_BT_OK;
  }
  wd_bt_free(&r);
  struct timespec ts = {0, 50000000};
  nanosleep(&ts, NULL);
  fprintf(stderr, "EINTR, interrupt all: %d answered, %d+%d EINTR\n", ok,
          atomic_load(&g_eintr_sleep), atomic_load(&g_eintr_wait));
  CHECK(ok >= 2);
  if (!WD_TEST_TSAN) CHECK(atomic_load(&g_eintr_sleep) + atomic_load(&g_eintr_wait) >= 1);

  atomic_store(&g_stop, 1);
  pthread_join(th[0], NULL);
  pthread_join(th[1], NULL);
  wd_bt_fini();
}

/* ---- a C++ frame, demangled ---- */

/* A C function under a C++ name ("wd::test::park_cpp()"), so the test needs no C++ compiler. */
__attribute__((noinline, visibility("default"))) int wd_test_park_cpp(void) __asm__("_ZN2wd4test8park_cppEv");
__attribute__((noinline, visibility("default"))) int wd_test_park_cpp(void) {
  atomic_fetch_add(&g_ready, 1);
  int rounds = 0;
  while (!atomic_load(&g_stop)) {
    sched_yield();
    rounds++;
  }
  return rounds;
}

static void *cpp_main(void *arg) {
  (void)arg;
  wd_test_park_cpp();
  return NULL;
}

static void child_demangle(void) {
  /* The C++ runtime, as PyTorch or NCCL would have it loaded. */
  void *cxx = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL);
  if (!cxx) {
    fprintf(stderr, "libstdc++.so.6 not found: demangling not tested\n");
    return;
  }
  CHECK(wd_bt_init(bt_signo()) == 0);
  atomic_store(&g_stop, 0);
  atomic_store(&g_ready, 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, cpp_main, NULL) == 0);
  wait_ready(1);
  wd_bt_result r;
  CHECK(wd_bt_collect(&r, 2000000000ull, 1) == 0);
  int found = 0;
  for (int i = 0; i < r.nthreads; i++)
    for (int k = 0; k < r.threads[i].nframes; k++) {
      const wd_bt_frame *f = &r.threads[i].frames[k];
      if (strcmp(f->symbol, "wd::test::park_cpp()") == 0) {
        found = 1;
        CHECK(strcmp(f->mangled, "_ZN2wd4test8park_cppEv") == 0);
      }
    }
  CHECK(found);
  wd_bt_free(&r);
  atomic_store(&g_stop, 1);
  pthread_join(t, NULL);
  wd_bt_fini();
}

/* ---- CUnit wrappers ---- */

static void test_all_threads(void) { CU_ASSERT_EQUAL(wd_test_isolated(child_all_threads, 60), 0); }
static void test_repeat(void) { CU_ASSERT_EQUAL(wd_test_isolated(child_repeat, 90), 0); }
static void test_churn(void) { CU_ASSERT_EQUAL(wd_test_isolated(child_churn, 90), 0); }
static void test_no_answer(void) { CU_ASSERT_EQUAL(wd_test_isolated(child_no_answer, 30), 0); }
static void test_demangle(void) { CU_ASSERT_EQUAL(wd_test_isolated(child_demangle, 60), 0); }
static void test_eintr(void) { CU_ASSERT_EQUAL(wd_test_isolated(child_eintr, 60), 0); }
static void test_chain_and_fini(void) {
  CU_ASSERT_EQUAL(wd_test_isolated(child_chain_and_fini, 30), 0);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("backtrace", NULL, NULL);
  if (!s) return 1;
  CU_add_test(s, "all threads: parked ok, blocked, self, modules", test_all_threads);
  CU_add_test(s, "20 collections in a row", test_repeat);
  CU_add_test(s, "threads exiting during collection", test_churn);
  CU_add_test(s, "wait bound with a thread that cannot answer", test_no_answer);
  CU_add_test(s, "chaining to the application's handler, fini", test_chain_and_fini);
  CU_add_test(s, "EINTR: sleepers in never-restarted calls are left alone", test_eintr);
  CU_add_test(s, "a C++ frame is demangled, its raw name kept", test_demangle);
  return wd_test_run();
}
