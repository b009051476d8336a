/*
 * The share of the ring directory's file system (by default /dev/shm) that this process's ring
 * files may take. NCCL puts its own shared segments there after the plugin's init, sized from
 * its buffers (src/init.cc computeBuffSizes: NCCL_BUFFSIZE 4 MiB for Simple, about 4.6 MiB for
 * LL128, 512 KiB for LL, per channel and connection of the SHM transport, src/transport/shm.cc)
 * and its proxy's operation pools (src/proxy.cc proxyProgressInit, ncclShmOpen: fallocate'd,
 * "failed to extend ... to N bytes" when they do not fit). Its need cannot be known at the
 * plugin's init, so the plugin takes a small fixed part and leaves the rest:
 *   - all ring files of the plugin on the node together at most 1/8 of the file system's size,
 *     this process its part of that (1/8 divided by the node's local ranks);
 *   - never a ring file that would leave less than half of the file system free.
 * A Docker container's default 64 MiB /dev/shm with 8 local ranks gives 1 MiB per process: too
 * little for a communicator's full rings (about 1.3 MiB), which then stay in memory. These rules
 * hold on memory file systems (tmpfs, ramfs: where NCCL's segments are); a ring directory on a
 * disk only leaves its last twentieth alone.
 * Leftovers of processes that ended count against the node's part; after a grace period
 * (WD_NODESHARE_GRACE_S, for an epilog or an on-call to collect them) the oldest go first.
 */
#ifndef WD_NODESHARE_H
#define WD_NODESHARE_H

#include <stddef.h>
#include <stdint.h>

#define WD_NODESHARE_GRACE_S 21600L /* 6 h */

/* Whether a ring file of need bytes may be made in dir now. 1: yes (counted as this process's
 * until wd_nodeshare_release); 0: no, why says so in a sentence for the job's log. Leftover
 * ring files of ended processes older than the grace period are removed, oldest first, while
 * they are what stands in the way (said in the log). */
int wd_nodeshare_admit(const char *dir, uint64_t need, char *why, size_t why_len);
void wd_nodeshare_release(uint64_t bytes);
/* The first refusal's sentence into out, "" when none: every dump says it. */
void wd_nodeshare_note(char *out, size_t len);
/* Local ranks sharing the node: LOCAL_WORLD_SIZE (torchrun), SLURM_NTASKS_PER_NODE,
 * OMPI_COMM_WORLD_LOCAL_SIZE, else the processes whose ring files are in dir, this one
 * included. */
int wd_nodeshare_local_ranks(const char *dir);

/* For tests: the decision alone, from the numbers. */
int wd_nodeshare_decide(uint64_t fs_total, uint64_t fs_avail, uint64_t node_files, uint64_t mine,
                        int local_ranks, uint64_t need, int memory_fs);

#endif
