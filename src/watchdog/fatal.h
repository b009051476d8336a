/*
 * Signals that end the process. SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT: the handler writes
 * the faulting thread's raw stack and the signal facts into every ring file (async-signal-safe
 * code only), puts the previous action back and lets it run (re-executing the faulting
 * instruction, or raising again), so the application's own handler and the core dump still
 * happen. SIGTERM (NCCL_WATCHDOG_TERM_DUMP): the handler wakes the watchdog thread, which writes
 * a "term" dump and then hands the signal to the previous disposition, so the process still ends
 * as the scheduler meant; a second SIGTERM before that goes through at once. SIGABRT (PyTorch's
 * watchdog calls abort() on a collective timeout, with no ncclCommAbort and no finalize): after
 * the ring-file record, the aborting thread wakes the watchdog thread and waits, at most
 * WD_FATAL_ABRT_WAIT_MS, for its "sigabrt" dump, then the signal goes on as before.
 */
#ifndef WD_FATAL_H
#define WD_FATAL_H

#include <stddef.h>

#define WD_FATAL_ABRT_WAIT_MS 5000 /* longest an aborting thread waits for its dump */
#define WD_FATAL_MSG 600

/* Install (first init). wake_fd as for the snapshot signal; term_dump turns on the teardown
 * dumps (SIGTERM, SIGABRT); ring_dir is named by the line a SIGABRT without dump writes.
 * Returns 0, or -1. */
int wd_fatal_install(int term_dump, int wake_fd, const char *ring_dir);
/* Put every previous action back where ours is still installed. Idempotent. */
void wd_fatal_restore(void);
/* At each poll: the fatal signals whose action someone replaced since (a framework putting back
 * "the original handlers") are taken back, chaining to what was found; one left ignored stays
 * so. Returns how many were found replaced; what names them ("Segmentation fault (SIG_DFL), ...").*/
int wd_fatal_check(char *what, size_t len);
/* Watchdog thread: 1 when a SIGTERM waits for its dump. */
int wd_fatal_term_pending(void);
/* Watchdog thread, after the dump (or the attempt): the previous SIGTERM action back, and the
 * signal raised again for it. */
void wd_fatal_term_chain(void);
/* Watchdog thread: 1 when an aborting thread waits for its dump; then, after the dump (or the
 * attempt), wd_fatal_abrt_done lets it go on. */
int wd_fatal_abrt_pending(void);
void wd_fatal_abrt_done(void);
/* Last stop: the descriptor the aborting thread waits on, closed. */
void wd_fatal_close(void);
/* The watchdog thread's own signal set-up, first thing: the faults it may cause itself
 * (SIGSEGV, SIGBUS, SIGILL, SIGFPE) unblocked, and an alternate signal stack. */
void wd_fatal_thread_init(void);
/* Its alternate signal stack released, at the thread's exit. */
void wd_fatal_altstack_free(void);

#endif
