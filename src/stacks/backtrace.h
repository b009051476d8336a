/*
 * Backtraces of every thread of the process. The collecting thread signals each thread with a
 * dedicated real-time signal; each handler stores raw return addresses into a preallocated slot;
 * symbolisation happens afterwards on the collecting thread.
 */
#ifndef WD_BACKTRACE_H
#define WD_BACKTRACE_H

#include <stdint.h>

#define WD_BT_MAX_FRAMES 64
#define WD_BT_MAX_THREADS 1024

enum {
  WD_BT_OK = 0,        /* answered; frames valid */
  WD_BT_SELF = 1,      /* the collecting thread itself */
  WD_BT_NO_ANSWER = 2, /* signalled, did not answer within the wait */
  WD_BT_BLOCKED = 3,   /* its mask blocks or ignores the signal: not asked */
  WD_BT_GONE = 4,      /* exited before it could be asked */
  WD_BT_LEFT_ALONE = 5, /* blocked in a call the kernel never restarts: not interrupted */
  WD_BT_NOT_ASKED = 6, /* the stack signal's action was not ours and could not be taken back */
};

typedef struct wd_bt_frame {
  uint64_t pc;
  uint64_t module_offset; /* pc - load base of module */
  uint64_t symbol_offset; /* pc - symbol start, when symbol is known */
  char module[256];       /* path of the object, "" when unknown */
  char symbol[256];       /* "" when unknown; C++ names demangled */
  char mangled[128];      /* the raw C++ name when symbol was demangled, else "" */
} wd_bt_frame;

typedef struct wd_bt_thread {
  int tid;
  int status;    /* WD_BT_* */
  char name[32]; /* /proc/self/task/<tid>/comm */
  /* WD_BT_LEFT_ALONE, and a thread that gave no stack (NO_ANSWER, BLOCKED): the system call it
   * is in ("" when none or unknown; "syscall 58" when the name is not known here); frame 0 is
   * then its call site. */
  char syscall[24];
  char kstate; /* NO_ANSWER, BLOCKED: its state letter in /proc (D: in the kernel, uninterruptible) */
  int nframes;
  wd_bt_frame frames[WD_BT_MAX_FRAMES];
} wd_bt_thread;

typedef struct wd_bt_module {
  uint64_t start, end, offset; /* mapping range and file offset */
  char perms[8];
  char path[256];
} wd_bt_module;

typedef struct wd_bt_result {
  int nthreads;
  int asked;    /* threads signalled */
  int answered; /* threads that stored a stack */
  wd_bt_thread *threads;
  int nmodules;
  wd_bt_module *modules; /* executable mappings, from /proc/self/maps */
  /* The stack signal's action as found before asking (someone had replaced ours: a framework
   * putting back "the original handlers"): 1 taken back, chaining to what was there; -1 not
   * ours and not taken back, so no thread was asked (never a signal whose action would end the
   * process); 0 ours. signal_found says what was there. */
  int signal_taken_back;
  char signal_found[48];
} wd_bt_result;

/* Install the handler for signo (saving the previous action) and warm libunwind up so the first
 * use inside a handler takes no lock. Returns 0, or -1 (backtraces then report "disabled"). */
int wd_bt_init(int signo);
/* Restore the previous action of the signal. Safe to call when init failed or was not called. */
void wd_bt_fini(void);
/* Collect every thread's stack (this thread's too), waiting at most wait_ns for the others.
 * A signal makes nanosleep, poll, epoll_wait, sigtimedwait and the like fail with EINTR even
 * under SA_RESTART; unless interrupt_all, a thread blocked in one is left alone and reported
 * with that call and its call site only. Allocates; call from the dumping thread only.
 * Returns 0, or -1 with res empty. */
int wd_bt_collect(wd_bt_result *res, uint64_t wait_ns, int interrupt_all);
void wd_bt_free(wd_bt_result *res);
/* From a signal handler: the interrupted thread's return addresses, frame 0 the instruction in
 * uc (the handler's ucontext). Only that frame when the unwinder was never initialised. Returns
 * the number stored. */
int wd_bt_unwind_signal(uint64_t *pcs, int max, const void *uc);

#endif
