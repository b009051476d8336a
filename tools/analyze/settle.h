/* --settle: the plugin's automatic verdict waits here, before reading, until the episode's
 * answers are in the dump directory (every process the plugin counted, every rank of every
 * communicator the answers name, and no salvage of a dead process under way), or its time is
 * up. It judges nothing: it only decides when reading may start, and says on stderr what it
 * counted and what it could not check. */
#ifndef WD_AZ_SETTLE_H
#define WD_AZ_SETTLE_H

#include <stdint.h>

typedef struct wd_az_settle_spec {
  char **inputs; /* the directories read afterwards */
  int ninputs;
  long want;      /* processes to wait for (the plugin's count) */
  double wait_s;  /* at most this long (a salvage under way: longer, see settle.c) */
  long since;     /* count files modified since this time (epoch seconds), 0: all */
  long episode;   /* count that episode's answers only (and dumps of a process's end); -1: all files */
  const uint64_t *comms; /* a dump of a process's end counts when it names one of these */
  int ncomms;
} wd_az_settle_spec;

/* Waits as above; read_until (monotonic seconds, 0 none) bounds it to leave time for reading. */
void wd_az_settle(const wd_az_settle_spec *s, double read_until);

#endif
