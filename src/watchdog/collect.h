/* Gather everything a dump shows into plain structures (dump.h). */
#ifndef WD_COLLECT_H
#define WD_COLLECT_H

#include "base/config.h"
#include "dump/snapshot.h"

/* Fill in (reason-specific fields are the caller's). Takes wd_store.lock while copying. */
/* keep > 0: a summary, only the newest keep records of each ring (the rest count as lost). */
int wd_collect(wd_dump_input *in, const wd_config *cfg, const char *reason, int with_threads,
               uint32_t keep);
void wd_collect_free(wd_dump_input *in);

#endif
