/*
 * Scenario 9: fork during traffic. While an application thread and a proxy thread call into the
 * plugin, the main thread forks five times. Each child uses the plugin (events on the inherited
 * context, a new communicator) and exits; it must not deadlock on a lock a parent thread held
 * (bounded waitpid). The parent keeps working and can still dump.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_host.h"

static wdh_comm g_comm;
static wdh_plugin g_plugin;
static atomic_int g_stop;
static atomic_long g_ops;

static void *app_thread(void *arg) {
  (void)arg;
  wdh_proxy *px = wdh_proxy_create();
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  while (!atomic_load(&g_stop)) {
    wdh_run_ops(&g_comm, px, &cfg, 5);
    atomic_fetch_add(&g_ops, 5);
  }
  wdh_proxy_destroy(px);
  return NULL;
}

static void child(void) {
  alarm(20); /* last resort: never outlive the test */
  wdh_op_cfg cfg;
  wdh_op_cfg_default(&cfg);
  wdh_run_ops(&g_comm, NULL, &cfg, 20);
  wdh_comm c2;
  wdh_comm_init(&c2, &g_plugin, 0xc41dull, "child", 1, 1, 0);
  wdh_run_ops(&c2, NULL, &cfg, 20);
  wdh_comm_finalize(&c2);
  _exit(wdh_failures() == 0 ? 0 : 3);
}

/* 0: exited 0; otherwise a description code. Kills the child after ms. */
static int bounded_wait(pid_t pid, unsigned ms, int *status) {
  uint64_t end = wdh_now_ns() + ms * 1000000ull;
  while (wdh_now_ns() < end) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return 0;
    wdh_sleep_ms(5);
  }
  kill(pid, SIGKILL);
  waitpid(pid, status, 0);
  return -1;
}

int main(void) {
  const char *path = wdh_plugin_path();
  if (!path) return 77;
  char *dir = wdh_tempdir("fork");
  setenv("NCCL_WATCHDOG_DUMP_DIR", dir, 1);
  setenv("NCCL_WATCHDOG_TIMEOUT", "5s", 1);
  setenv("NCCL_WATCHDOG_POLL", "10ms", 1);
  if (wdh_load(&g_plugin, path, 0) != 0) return 1;
  wdh_comm_init(&g_comm, &g_plugin, 0xf0f0f0f0ull, "fork", 1, 2, 0);
  pthread_t t;
  pthread_create(&t, NULL, app_thread, NULL);
  wdh_sleep_ms(100);

  for (int i = 0; i < 5; i++) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) child();
    WDH_CHECK(pid > 0, "fork failed");
    int st = 0;
    int r = bounded_wait(pid, 10000, &st);
    WDH_CHECK(r == 0, "fork %d: child did not finish in 10 s (deadlock?)", i);
    WDH_CHECK(r != 0 || (WIFEXITED(st) && WEXITSTATUS(st) == 0),
              "fork %d: child status 0x%x (exit %d, signal %d)", i, st,
              WIFEXITED(st) ? WEXITSTATUS(st) : -1, WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    wdh_sleep_ms(30);
  }
  long before = atomic_load(&g_ops);
  wdh_sleep_ms(100);
  WDH_CHECK(atomic_load(&g_ops) > before, "parent traffic stopped after the forks");

  /* The parent's watchdog still answers. */
  kill(getpid(), SIGUSR1);
  WDH_CHECK(wdh_wait_dumps(dir, "signal", 1, 5000) >= 1, "parent cannot dump after fork");
  atomic_store(&g_stop, 1);
  pthread_join(t, NULL);
  WDH_CHECK(wdh_list_dumps(dir, "stall", NULL, 0) == 0, "stall dumps");
  wdh_comm_finalize(&g_comm);
  wdh_unload(&g_plugin);
  WDH_CHECK(wdh_failures() == 0, "%ld callbacks failed", wdh_failures());
  int rc = wdh_check_summary("scenario_fork");
  if (rc) {
    wdh_log_print();
    fprintf(stderr, "dumps kept in %s\n", dir);
  } else {
    wdh_rmtree(dir);
  }
  free(dir);
  return rc;
}
