/* Which dumps belong together, between reading (load.h) and judging (verdict.h): the
 * incarnation of the job a verdict is about, its stall episode, and the hosts' clocks. One place
 * says why each dump was used or set aside (set->attempt_note, set->clock_note).
 *
 * An incarnation is what the job shows: the communicators that were made together and the
 * processes that use them. Dumps are joined through the communicators they list (every dump of
 * a moment lists the process's live communicators), so a restart, in-process or through a
 * launcher, makes a new incarnation the moment it makes new communicators, whatever the
 * launcher's counters say; those counters, boot ids and host names only label it. */
#ifndef WD_AZ_INCARNATION_H
#define WD_AZ_INCARNATION_H

#include "model.h"

/* Mark what the analysis uses: the judged incarnation's dumps (the newest by default, or
 * --incarnation's), of its latest stall episode (or --episode's), and of those the newest per
 * (host, pid, commId, rank); or everything when all_dumps. */
void wd_az_select(wd_az_set *set, int all_dumps);
/* Correct the wall clock of hosts whose dumps' times disagree with the file system's stamps of
 * them by more than write delays explain (after wd_az_select). */
void wd_az_clock_offsets(wd_az_set *set);
/* --incarnation (and its older name --attempt): judge incarnation N (0 the oldest in the
 * directory) instead of the newest. */
void wd_az_set_attempt(int attempt);
/* Whether the process that wrote the ring file starting with data (len bytes: its header) runs
 * now on this machine, in this PID namespace, as /proc tells (never another host's): 1 with its
 * state letter in *state ('T' stopped, 'D' in the kernel, 'S' asleep, 'R' running). */
int wd_az_ring_alive_here(const void *data, size_t len, char *state);

#endif
