/* One verdict for the whole job: the root cause across communicators (docs/analyzer.md). */
#ifndef WD_AZ_JOB_H
#define WD_AZ_JOB_H

#include <stddef.h>

#include "verdict.h"

#define WD_AZ_CHAIN 16

typedef struct wd_az_link {
  const wd_az_comm *comm;  /* the hung communicator this step is about */
  const wd_az_crank *who;  /* a rank of it that is waiting (NULL: the first step's group) */
  const wd_az_suspect *on; /* the suspect it waits on */
} wd_az_link;

typedef struct wd_az_job {
  int found;    /* a chain was followed (at least one hung communicator) */
  int deadlock; /* the chain came back to a process already on it */
  int nlinks;
  wd_az_link links[WD_AZ_CHAIN];
  const wd_az_suspect *root; /* the last suspect: waits on nothing (NULL on a deadlock) */
  char line[2048];           /* the report's first line */
  wd_az_str host;            /* a host whose processes wait on the network, 0 when none */
  int host_nprocs;
  char host_line[512];
} wd_az_job;

/* Follow "waits on" from the first hung communicator through the processes its suspects are
 * in: a suspect whose process is itself waiting in another hung communicator passes the edge on.
 */
void wd_az_job_verdict(const wd_az_result *res, wd_az_job *job);

#endif
