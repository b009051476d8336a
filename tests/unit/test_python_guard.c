/*
 * The Python stack collector survives a fault inside the interpreter's traceback dumper (it reads
 * frames other threads change, and can fault on a busy process): the fatal-signal handler jumps
 * back into the collector, that dump goes without Python stacks, and the process lives on. This
 * executable stands in for CPython: it exports Py_IsInitialized and _Py_DumpTracebackThreads,
 * which the collector finds with dlsym as it finds the real ones.
 */
#include <CUnit/Basic.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "stacks/python.h"
#include "watchdog/fatal.h"
#include "wd_test_util.h"

#define CHECK(cond) WD_CHILD_CHECK(cond)

static volatile int g_fault; /* the next dump faults */
/* An address nothing maps (a frame pointer gone stale), out of the compiler's sight. */
static int *volatile g_bad = (int *)(uintptr_t)16;
static volatile int g_dumps;

__attribute__((visibility("default"))) int Py_IsInitialized(void) { return 1; }

__attribute__((visibility("default"))) const char *_Py_DumpTracebackThreads(int fd, void *interp,
                                                                            void *tstate) {
  (void)interp, (void)tstate;
  g_dumps++;
  if (g_fault) {
    *g_bad = 1;
  }
  static const char text[] = "Current thread 0x00007f0000000001 (most recent call first):\n"
                             "  File \"train.py\", line 42 in step\n";
  if (write(fd, text, sizeof text - 1) < 0) return "write";
  return NULL;
}

static void guard_child(void) {
  CHECK(wd_fatal_install(0, -1, NULL) == 0);
  wd_py_result r;
  CHECK(wd_py_collect(&r) == 0 && r.nthreads == 1 && r.threads[0].nframes == 1 &&
        strcmp(r.threads[0].frames[0].func, "step") == 0 && r.threads[0].frames[0].line == 42);
  wd_py_free(&r);
  /* The dumper faults: no stacks, a note that says why, and the process is still here. */
  g_fault = 1;
  CHECK(wd_py_collect(&r) == -1);
  CHECK(strstr(r.note, "faulted") != NULL);
  CHECK(r.nthreads == 0);
  wd_py_free(&r);
  /* Twice: the guard is re-armed, and the fault handler still installed. */
  CHECK(wd_py_collect(&r) == -1 && strstr(r.note, "faulted") != NULL);
  wd_py_free(&r);
  g_fault = 0;
  CHECK(wd_py_collect(&r) == 0 && r.nthreads == 1);
  wd_py_free(&r);
  CHECK(g_dumps == 4);
  /* Outside the collector a fault is the application's: the handler chains to the default
   * action (the process dies by SIGSEGV), the guard does not swallow it. */
  wd_py_guard_jump(); /* no guard armed: returns */
  wd_fatal_restore();
}

static void test_guard(void) { CU_ASSERT_EQUAL(wd_test_isolated(guard_child, 30), 0); }

/* The same on a thread set up as the watchdog's: started with every signal blocked (watchdog.c),
 * then wd_fatal_thread_init. Before that unblocked the faults, the kernel killed the process at
 * the dumper's fault without running any handler (a silent SIGSEGV of python.stacks in CI). */
static void *watchdog_like(void *arg) {
  (void)arg;
  wd_fatal_thread_init();
  g_fault = 1;
  wd_py_result r;
  CHECK(wd_py_collect(&r) == -1 && strstr(r.note, "faulted") != NULL);
  wd_py_free(&r);
  g_fault = 0;
  CHECK(wd_py_collect(&r) == 0 && r.nthreads == 1);
  wd_py_free(&r);
  wd_fatal_altstack_free();
  return NULL;
}

static void watchdog_thread_child(void) {
  CHECK(wd_fatal_install(0, -1, NULL) == 0);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  int rc = pthread_create(&t, NULL, watchdog_like, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  CHECK(rc == 0);
  if (rc == 0) pthread_join(t, NULL);
  wd_fatal_restore();
}

static void test_guard_on_watchdog_thread(void) {
  CU_ASSERT_EQUAL(wd_test_isolated(watchdog_thread_child, 30), 0);
}

static int fault_outside(void *arg) {
  (void)arg;
  wd_fatal_install(0, -1, NULL);
  *g_bad = 1;
  return 0;
}

/* The child dies: by SIGSEGV, or through a sanitizer's own report (an exit status, or abort). */
static void test_fault_elsewhere(void) {
  int rc = wd_test_in_child(fault_outside, NULL, 30);
  CU_ASSERT(rc != 0 && rc != -1);
}

int main(void) {
  if (CU_initialize_registry() != CUE_SUCCESS) return 1;
  CU_pSuite s = CU_add_suite("python_guard", NULL, NULL);
  CU_add_test(s, "a fault in the traceback dumper ends that collection, not the process", test_guard);
  CU_add_test(s, "the same on a thread started as the watchdog's, every signal blocked",
              test_guard_on_watchdog_thread);
  CU_add_test(s, "a fault anywhere else is still fatal", test_fault_elsewhere);
  return wd_test_run();
}
