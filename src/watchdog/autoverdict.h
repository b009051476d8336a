/*
 * The verdict without a human (docs/operations.md, "The verdict in the job's log"). The process
 * that opened a stall episode (posted its trigger) runs the analyzer out of process (low
 * priority, bounded memory and time, no shell), which waits for the episode's dumps (--settle)
 * and publishes the first line next to the trigger; every process that dumped for the episode logs that line
 * at WARN through NCCL's logger. The verdict's files are <dump dir>/verdict-<k>.txt, .json and
 * .html; NCCL_WATCHDOG_ON_VERDICT runs after it with their paths in its environment.
 *
 * Everything here runs on the watchdog thread, a step per poll: it never blocks (children are
 * reaped with WNOHANG and killed at their deadline).
 */
#ifndef WD_AUTOVERDICT_H
#define WD_AUTOVERDICT_H

#include <stdint.h>

#include "base/config.h"
#include "dump/trigger.h"
#include "watchdog/stall.h"

/* base: the job's dump directory; dir: this process's own dump folder in it (a host folder of
 * this user's: the salvages write there, never into a folder someone else made); host: this
 * host's name. The analyzer is looked up here (one WARN when it cannot be found: no automatic
 * verdict, nothing else changes). */
void wd_av_start(const wd_config *cfg, wd_trigger_watch *watch, const char *base, const char *dir,
                 const char *host);
/* Kills the hook if it still runs; an analyzer or a salvage under way is left to finish (each
 * has its own deadline); forgets everything. */
void wd_av_stop(void);

/* Whom an episode's verdict waits for: how many processes, and the communicators whose
 * processes those are (the stalled ones; at a teardown, this process's). A process's dump of its
 * end counts toward the episode only when it names one of them: the incarnation is the
 * communicators made together, whatever the launcher's counters say (a restarted job writes
 * into the same directory). */
#define WD_AV_COMMS 16
typedef struct wd_av_who {
  int processes;
  uint32_t ncomms;
  uint64_t comms[WD_AV_COMMS];
} wd_av_who;

/* This process opened episode k (its trigger won): it makes the episode's verdict. */
void wd_av_opened(unsigned k, uint64_t now, const wd_av_who *who);
/* This process answers episode k (before its dump, which may take seconds on a loaded node): a
 * node's poller starts the salvage of its dead processes' ring files now, and says in the dump
 * directory that one is under way, so that the verdict waits for it. */
void wd_av_answering(unsigned k, uint64_t now);
/* This process dumped for episode k (its own stall or a peer dump): it logs the verdict line. */
void wd_av_dumped(unsigned k, uint64_t now, int own); /* own: its own stall dumped for k */
/* The stall this process saw is over: "resumed after X s" goes to the log, to the episode's
 * verdict files (as verdict-<k>.resumed) when this process opened it, and to the metrics. */
void wd_av_resumed(uint64_t now, uint64_t began_ns);
/* This process's stall episode ended without a resume (an abort, a finalize), or its stall joined
 * another process's episode: no resume of an episode it opened is to be marked. */
void wd_av_unmark(void);
/* Whether the job said episode k resumed (its verdict-<k>.resumed: a regular file of this user,
 * not followed through a link). One lstat on the dump directory. */
int wd_av_episode_resumed(unsigned k);
/* This process is ending on SIGABRT (PyTorch's watchdog fired first, NCCL-FACTS "How PyTorch
 * ends a hung job"): nobody may live long enough to make the verdict, so the first such process
 * of the job posts the episode (the job's live processes answer with peer dumps: the rank that
 * never entered, before torchrun's SIGTERM reaches it) and leaves a detached analyzer behind
 * (its own session, its own settle wait and deadline), which publishes the line and prints it on
 * this process's stderr, the job's log. */
void wd_av_teardown(uint64_t now, const wd_av_who *who);
/* One step: settle, spawn, reap or kill, publish, hook, log. */
void wd_av_poll(uint64_t now);

/* For the metrics file: the episode in progress (0 none), verdicts made, resumed episodes, and
 * the latest verdict: seconds from the episode's opening, and its first line's verdict word,
 * culprit rank and host ("" when unknown). */
typedef struct wd_av_stats {
  unsigned open_episode;
  unsigned verdicts, resumed;
  double last_seconds;
  char last_kind[16], last_rank[16], last_host[64];
} wd_av_stats;
void wd_av_get_stats(wd_av_stats *out);

#endif
