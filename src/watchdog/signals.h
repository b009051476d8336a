/*
 * The snapshot signal (NCCL_WATCHDOG_SIGNAL, SIGUSR1 by default). The handler is
 * async-signal-safe: it counts the signal, writes to the watchdog's wake fd and chains to the
 * handler that was installed before (never to SIG_DFL, which would kill the job).
 */
#ifndef WD_SIGNALS_H
#define WD_SIGNALS_H

#include <stddef.h>

/* Install for signo; wake_fd is an eventfd (8-byte writes) or the write end of a pipe.
 * Returns 0, or -1 (logged by the caller). */
int wd_snapsig_install(int signo, int wake_fd);
/* Restore the previous action if ours is still installed. Idempotent. */
/* Without a watchdog (its thread or eventfd could not be made): the handler only chains, so the
 * snapshot signal the runbook tells people to send does not kill the job by its default action. */
int wd_snapsig_install_inert(int signo);
void wd_snapsig_restore(void);
/* Signals received since the last call (atomic exchange); *sender_pid gets the last sender, or 0. */
int wd_snapsig_take(int *sender_pid);

/* At each poll: whether the application replaced the snapshot signal's action (PyTorch
 * Lightning's SLURM requeue handler, or its teardown putting back SIG_DFL). Taken back, chaining
 * to what was found there (that handler still runs once per signal): 1, found describing it;
 * 0 when still ours; -1 when it could not be taken back (snapshots then only by trigger file). */
int wd_snapsig_check(char *found, size_t len);
int wd_snapsig_signo(void);

#endif
