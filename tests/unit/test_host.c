/* What /proc tells of a process of this machine (base/host.h): its start and its job. */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/host.h"
#include "wd_test_util.h"

/* A child that sleeps after exec with env as its whole environment; its pid. */
static pid_t spawn_env(char *const env[]) {
  pid_t pid = fork();
  if (pid == 0) {
    char *const argv[] = {"sleep", "30", NULL};
    execve("/bin/sleep", argv, env);
    _exit(127);
  }
  return pid;
}

static void reap(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

/* The job is the launcher's names as exec gave them: equal for two processes of one job, not
 * for another job's (another SLURM_JOB_ID, another run id, another dump folder), and the
 * variables are read whole (a key is a prefix of no other). */
static void test_job(void) {
  char a[800], b[800], c[800], d[800], e[800];
  char *const job1[] = {"PATH=/bin", "SLURM_JOB_ID=4242", "TORCHELASTIC_RUN_ID=r1", "X=1", NULL};
  char *const job1b[] = {"SLURM_JOB_ID=4242", "TORCHELASTIC_RUN_ID=r1", "HOME=/", NULL};
  char *const job2[] = {"SLURM_JOB_ID=4243", "TORCHELASTIC_RUN_ID=r1", NULL};
  char *const job3[] = {"SLURM_JOB_ID=4242", "TORCHELASTIC_RUN_ID=r1", "NCCL_WATCHDOG_DUMP_DIR=/x", NULL};
  char *const none[] = {"SLURM_JOB_ID_X=4242", NULL};
  pid_t p1 = spawn_env(job1), p1b = spawn_env(job1b), p2 = spawn_env(job2), p3 = spawn_env(job3),
        pn = spawn_env(none);
  CU_ASSERT_FATAL(p1 > 0 && p1b > 0 && p2 > 0 && p3 > 0 && pn > 0);
  usleep(200000); /* exec done */
  CU_ASSERT_EQUAL(wd_proc_job(p1, a, sizeof a), 0);
  CU_ASSERT_EQUAL(wd_proc_job(p1b, b, sizeof b), 0);
  CU_ASSERT_EQUAL(wd_proc_job(p2, c, sizeof c), 0);
  CU_ASSERT_EQUAL(wd_proc_job(p3, d, sizeof d), 0);
  CU_ASSERT_EQUAL(wd_proc_job(pn, e, sizeof e), 0);
  CU_ASSERT_STRING_EQUAL(a, b);
  CU_ASSERT_STRING_NOT_EQUAL(a, c);
  CU_ASSERT_STRING_NOT_EQUAL(a, d);
  CU_ASSERT_STRING_EQUAL(e, "\n\n");
  CU_ASSERT_TRUE(strstr(a, "4242") != NULL);
  reap(p1), reap(p1b), reap(p2), reap(p3), reap(pn);
  /* Gone: /proc cannot tell. */
  CU_ASSERT_EQUAL(wd_proc_job(p1, a, sizeof a), -1);
  /* This process reads its own. */
  CU_ASSERT_EQUAL(wd_proc_job(0, a, sizeof a), 0);
}

/* A process's start as /proc tells it: this one's equals what its identity says; a child
 * started later; a gone one cannot be told. */
static void test_start(void) {
  wd_process_id me;
  wd_process_identity(&me);
  uint64_t s0 = 0, s1 = 0;
  char st = 0;
  CU_ASSERT_EQUAL(wd_proc_start(0, &st, &s0), 0);
  CU_ASSERT_EQUAL(s0, me.start_wall_ns);
  CU_ASSERT_EQUAL(st, 'R');
  char *const env[] = {NULL};
  sleep(1);
  pid_t p = spawn_env(env);
  CU_ASSERT_FATAL(p > 0);
  usleep(100000);
  CU_ASSERT_EQUAL(wd_proc_start(p, &st, &s1), 0);
  CU_ASSERT_TRUE(s1 > s0);
  reap(p);
  CU_ASSERT_EQUAL(wd_proc_start(p, &st, &s1), -1);
}

/* Ended for certain: reaped (no such pid), a zombie, or another start under the pid; never for a
 * running process or where nothing names one. */
static void test_gone(void) {
  wd_process_id me;
  wd_process_identity(&me);
  CU_ASSERT_EQUAL(wd_proc_gone(getpid(), me.start_wall_ns), 0);
  CU_ASSERT_EQUAL(wd_proc_gone(getpid(), me.start_wall_ns + 60ull * 1000000000ull), 1); /* pid reused */
  CU_ASSERT_EQUAL(wd_proc_gone(0, me.start_wall_ns), 0);
  CU_ASSERT_EQUAL(wd_proc_gone(getpid(), 0), 0);
  char *const env[] = {NULL};
  pid_t p = spawn_env(env);
  CU_ASSERT_FATAL(p > 0);
  usleep(100000);
  uint64_t s = 0;
  CU_ASSERT_EQUAL_FATAL(wd_proc_start(p, NULL, &s), 0);
  CU_ASSERT_EQUAL(wd_proc_gone(p, s), 0);
  kill(p, SIGKILL);
  for (int i = 0; i < 100 && !wd_proc_gone(p, s); i++) usleep(10000); /* a zombie until reaped */
  CU_ASSERT_EQUAL(wd_proc_gone(p, s), 1);
  waitpid(p, NULL, 0);
  CU_ASSERT_EQUAL(wd_proc_gone(p, s), 1);
}

static void *sleeper(void *arg) {
  (void)arg;
  sleep(30);
  return NULL;
}

/* A thread found by its name, and its state: one asleep in a sleep is 'S'; no such name, -1. */
static void test_thread_state(void) {
  pthread_t t;
  CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, sleeper, NULL), 0);
  pthread_setname_np(t, "nccl-watchdog");
  usleep(100000);
  char st = 0;
  CU_ASSERT_EQUAL(wd_proc_thread_state(0, "nccl-watchdog", &st), 0);
  CU_ASSERT_EQUAL(st, 'S');
  CU_ASSERT_EQUAL(wd_proc_thread_state(getpid(), "nccl-watchdog", &st), 0);
  CU_ASSERT_EQUAL(wd_proc_thread_state(0, "no-such-thread", &st), -1);
  CU_ASSERT_EQUAL(wd_proc_thread_state(999999999, "nccl-watchdog", &st), -1);
  pthread_cancel(t);
  pthread_join(t, NULL);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 2;
  CU_pSuite s = CU_add_suite("host", NULL, NULL);
  CU_add_test(s, "a process's job from its environment", test_job);
  CU_add_test(s, "a process's start", test_start);
  CU_add_test(s, "a process that ended", test_gone);
  CU_add_test(s, "a thread's state by its name", test_thread_state);
  return wd_test_run();
}
