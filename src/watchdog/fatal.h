/*
 * Signals that end the process. SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT: the handler writes
 * the faulting thread's raw stack and the signal facts into every ring file (async-signal-safe
 * code only), puts the previous action back and lets it run (re-executing the faulting
 * instruction, or raising again), so the application's own handler and the core dump still
 * happen. SIGTERM (NCCL_WATCHDOG_TERM_DUMP): the handler wakes the watchdog thread, which writes
 * a "term" dump and then hands the signal to the previous disposition, so the process still ends
 * as the scheduler meant; a second SIGTERM before that goes through at once.
 */
#ifndef WD_FATAL_H
#define WD_FATAL_H

/* Install (first init). wake_fd as for the snapshot signal. Returns 0, or -1. */
int wd_fatal_install(int term_dump, int wake_fd);
/* Put every previous action back where ours is still installed. Idempotent. */
void wd_fatal_restore(void);
/* Watchdog thread: 1 when a SIGTERM waits for its dump. */
int wd_fatal_term_pending(void);
/* Watchdog thread, after the dump (or the attempt): the previous SIGTERM action back, and the
 * signal raised again for it. */
void wd_fatal_term_chain(void);
/* The watchdog thread's own signal set-up, first thing: the faults it may cause itself
 * (SIGSEGV, SIGBUS, SIGILL, SIGFPE) unblocked, and an alternate signal stack. */
void wd_fatal_thread_init(void);
/* Its alternate signal stack released, at the thread's exit. */
void wd_fatal_altstack_free(void);

#endif
