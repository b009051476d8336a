/* Host identity for file names and dumps. */
#ifndef WD_HOST_H
#define WD_HOST_H

#include <stddef.h>
#include <stdint.h>

/* Short host name (up to the first dot), "unknown" when it cannot be read; the override when
 * one is set. */
void wd_hostname(char *out, size_t len);
/* NCCL_WATCHDOG_HOSTNAME: containers whose host name is a pod id, and tests that simulate
 * several hosts on one machine. Set at process start, before any thread reads it; "" clears. */
void wd_hostname_override(const char *name);

/* What tells this process apart from any other of the job, whatever the host name or pid (one
 * PID namespace per container, cloned images): the kernel's boot id (a machine), the process's
 * start on the wall clock (from /proc: its start tick after boot plus the boot time) and the
 * inode of its PID namespace (which process table its pid is of). Read once; "" and 0 when
 * unknown. */
typedef struct wd_process_id {
  char boot_id[40];
  uint64_t start_wall_ns;
  uint64_t pidns_ino;
} wd_process_id;
void wd_process_identity(wd_process_id *out);
/* What /proc of this machine says of process pid (0: this one): its state letter ('T' stopped,
 * 'Z' exited) in *state (may be NULL) and its start on the wall clock, as wd_process_identity
 * reads its own. 0, or -1 when /proc cannot tell (no such process). */
int wd_proc_start(int pid, char *state, uint64_t *start_wall_ns);
/* Whether process pid of this machine (and of the caller's PID namespace) is the one that
 * started at start_wall_ns, as wd_proc_start read it then: it exists, has not exited (a zombie
 * has), and started then (a pid reused since started at another time; two seconds of slack for
 * a wall clock stepped between two readings of the boot time). *state (may be NULL): its state
 * letter. */
int wd_proc_alive_since(int pid, uint64_t start_wall_ns, char *state);
/* 1 when /proc says for certain that the process pid which started at start_wall_ns has ended:
 * no such pid, a zombie, or another process under its pid; 0 when it runs or /proc cannot say
 * (hidden, unreadable). */
int wd_proc_gone(int pid, uint64_t start_wall_ns);
/* The job process pid (0: this one) belongs to, as the launcher named it in its environment at
 * exec (/proc/<pid>/environ): SLURM_JOB_ID, TORCHELASTIC_RUN_ID and NCCL_WATCHDOG_DUMP_DIR, each
 * possibly empty, into out; two processes with equal strings are of one job as far as anything
 * on the machine can tell. 0, or -1 when /proc cannot tell (another user's, no such process). */
int wd_proc_job(int pid, char *out, size_t len);
/* The state letter of process pid's (0: this one's) thread named name (the watchdog's:
 * "nccl-watchdog"), as /proc tells it: 0, or -1 when no such thread is found. */
int wd_proc_thread_state(int pid, const char *name, char *state);

/* The tightest limit on this process's memory, in bytes, and what it is ("cgroup memory.max",
 * "ulimit -v"); 0 when none is known. A cgroup's limit counts /dev/shm pages (the ring files). */
uint64_t wd_host_memory_limit(const char **what);

#endif
