/*
 * Scenario 8: init/finalize/dlclose/reload three times, as NCCL does when the last communicator
 * goes away and a new one comes. The application's own SIGUSR1 handler, installed before the
 * first load, must run for every signal (chained while loaded, restored while unloaded), the
 * plugin must leave no thread behind after dlclose nor a file descriptor more per cycle, and the
 * process must survive signals sent while the plugin is unloaded.
 */
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_host.h"

static volatile sig_atomic_t g_app_handled;

static void app_handler(int sig) {
  (void)sig;
  g_app_handled++;
}

static void *nop_thread(void *arg) { return arg; }

/* Entries of a /proc/self directory: threads (task) or open descriptors (fd). */
static int entry_count(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  if (d) closedir(d);
  return n;
}
static int thread_count(void) { return entry_count("/proc/self/task"); }
static int fd_count(void) { return entry_count("/proc/self/fd") - 1; /* the one opendir holds */ }


static int wait_handled(int want, unsigned ms) {
  uint64_t end = wdh_now_ns() + ms * 1000000ull;
  while (g_app_handled < want && wdh_now_ns() < end) wdh_sleep_ms(5);
  return g_app_handled;
}

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_scenario_dir("reload", "5s", "50ms");

  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = app_handler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, NULL);
  /* Baseline after one thread came and went: runtimes (TSan) start helpers lazily. */
  pthread_t warm;
  pthread_create(&warm, NULL, nop_thread, NULL);
  pthread_join(warm, NULL);
  int base_threads = thread_count();

  int handled = 0, fds_after_first = -1;
  for (int cycle = 0; cycle < 3; cycle++) {
    wdh_plugin p;
    if (wdh_load(&p, path, 0) != 0) return 1;
    wdh_comm a, b;
    wdh_comm_init(&a, &p, 0x1000 + cycle, "reload-a", 1, 2, 0);
    wdh_comm_init(&b, &p, 0x2000 + cycle, "reload-b", 1, 2, 1);
    wdh_proxy *px = wdh_proxy_create();
    wdh_op_cfg cfg;
    wdh_op_cfg_default(&cfg);
    wdh_run_ops(&a, px, &cfg, 100);
    wdh_run_ops(&b, px, &cfg, 100);
    wdh_proxy_destroy(px);

    /* Loaded: one dump, and the application's handler still runs (chained). */
    int dumps = wdh_list_dumps(dir, "signal", NULL, 0);
    kill(getpid(), SIGUSR1);
    handled = wait_handled(handled + 1, 3000);
    WDH_CHECK(handled == 2 * cycle + 1, "cycle %d: app handler ran %d times while loaded",
              cycle, handled);
    WDH_CHECK(wdh_wait_dumps(dir, "signal", dumps + 1, 5000) == dumps + 1,
              "cycle %d: no signal dump", cycle);

    /* An op in flight at finalize (abort path): must not leak or crash. */
    cfg.hang_channel = 0;
    wdh_op stuck;
    wdh_op_enqueue(&a, &cfg, &stuck);
    wdh_op_proxy(&stuck);
    wdh_comm_finalize(&b);
    wdh_comm_finalize(&a);
    wdh_unload(&p);
    wdh_sleep_ms(50);
    WDH_CHECK(thread_count() == base_threads, "cycle %d: %d threads after dlclose, %d before",
              cycle, thread_count(), base_threads);
    /* The first cycle may leave what a library keeps for the process (libunwind's pipe, held
     * once); a later cycle must not add to it. */
    if (cycle == 0) fds_after_first = fd_count();
    WDH_CHECK(fd_count() == fds_after_first, "cycle %d: %d descriptors open after dlclose, %d after the first",
              cycle, fd_count(), fds_after_first);

    /* Unloaded: the signal goes to the application's handler, the process survives. */
    kill(getpid(), SIGUSR1);
    handled = wait_handled(handled + 1, 3000);
    WDH_CHECK(handled == 2 * cycle + 2, "cycle %d: app handler ran %d times while unloaded",
              cycle, handled);
    struct sigaction cur;
    sigaction(SIGUSR1, NULL, &cur);
    WDH_CHECK(cur.sa_handler == app_handler, "cycle %d: SIGUSR1 handler not restored", cycle);
  }
  WDH_CHECK(wdh_list_dumps(dir, "signal", NULL, 0) == 3, "%d signal dumps over 3 cycles",
            wdh_list_dumps(dir, "signal", NULL, 0));
  /* SIG_DFL before load: a signal for the plugin must not kill the process either. */
  signal(SIGUSR1, SIG_DFL);
  wdh_plugin p;
  if (wdh_load(&p, path, 0) == 0) {
    wdh_comm c;
    wdh_comm_init(&c, &p, 0x3000, "dfl", 1, 1, 0);
    int dumps = wdh_list_dumps(dir, "signal", NULL, 0);
    kill(getpid(), SIGUSR1);
    WDH_CHECK(wdh_wait_dumps(dir, "signal", dumps + 1, 5000) == dumps + 1,
              "no dump with SIG_DFL underneath");
    wdh_comm_finalize(&c);
    wdh_unload(&p);
  }
  return wdh_scenario_end("scenario_reload", dir);
}
