/*
 * Python stacks of every Python thread, when the process runs CPython. The interpreter's own
 * traceback dumper (_Py_DumpTracebackThreads, what faulthandler calls from its signal handlers
 * and its dump_traceback_later thread) writes them to a file descriptor without taking the GIL;
 * we give it a memfd, read the text back and parse it. Nothing is loaded or linked: the symbols
 * are looked up in the process (RTLD_DEFAULT); a process without Python gets "not available".
 * Each Python thread is matched to its native thread id through glibc's thread descriptor
 * (read with process_vm_readv, which fails instead of faulting on a stale pointer).
 */
#ifndef WD_PYTHON_H
#define WD_PYTHON_H

#include <stdint.h>

#define WD_PY_MAX_THREADS 128
#define WD_PY_MAX_FRAMES 48

typedef struct wd_py_frame {
  char file[160];
  char func[80];
  int line;
} wd_py_frame;

typedef struct wd_py_thread {
  uint64_t ident; /* threading.get_ident(): the thread's pthread_t */
  int tid;        /* native thread id, 0 when it could not be matched */
  int nframes;    /* innermost first */
  int truncated;  /* more frames than kept */
  wd_py_frame frames[WD_PY_MAX_FRAMES];
} wd_py_thread;

typedef struct wd_py_result {
  int available;  /* CPython is running in this process */
  char note[96];  /* why nothing was collected, or "" */
  int nthreads;
  wd_py_thread *threads;
} wd_py_result;

/* Collect (watchdog thread; allocates). Returns 0, -1 with res->note set. */
int wd_py_collect(wd_py_result *res);
/* The interpreter's dumper reads frames other threads may be changing, and can fault on a busy
 * process. The fatal-signal handler calls this first: on the thread inside wd_py_collect it
 * jumps back there (that dump goes without Python stacks, the process lives on); anywhere else
 * it returns. Async-signal-safe. */
void wd_py_guard_jump(void);
void wd_py_free(wd_py_result *res);

#endif
