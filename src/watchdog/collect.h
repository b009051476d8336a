/* Gather everything a dump shows into plain structures (dump.h). */
#ifndef WD_COLLECT_H
#define WD_COLLECT_H

#include "../flightrec/dump.h"

/* Fill in (reason-specific fields are the caller's). Takes wd_proc.lock while copying. */
int wd_collect(wd_dump_input *in, const char *reason, int with_threads);
void wd_collect_free(wd_dump_input *in);

#endif
