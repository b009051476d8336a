/*
 * Chrome/Perfetto trace export of every used dump's rings (docs/analyzer.md, "Trace"). The
 * dumps are read a second time, one at a time, and events are streamed to the file, so memory
 * does not grow with the number of ranks.
 */
#ifndef WD_AZ_TRACE_H
#define WD_AZ_TRACE_H

#include "model.h"

/* Write the trace of the dumps marked kept in set. Returns 0, or -1 (nothing usable written). */
int wd_az_trace_write(const wd_az_set *set, const char *path);

#endif
