/*
 * What ended processes and earlier jobs leave in the node's ring directory besides ring files
 * (those count against the node's share: flightrec/nodeshare.h): Prometheus files of processes
 * that ended, which a textfile collector would go on exporting as live series, and the relay's
 * triggers, poller heartbeats and verdict lines of jobs long over. A node that runs job after job
 * without an epilog keeps them for good otherwise. Swept by the node's trigger poller at start
 * and hourly; what was removed is said in the log.
 */
#ifndef WD_LEFTOVERS_H
#define WD_LEFTOVERS_H

#include <stdint.h>

/* Relay files (triggers, heartbeats, verdict lines) older than this are of a job long over. */
#define WD_LEFTOVERS_RELAY_S 21600L /* 6 h */
/* A metrics file not rewritten for this long whose process is gone is removed. */
#define WD_LEFTOVERS_METRICS_S 60L

/* Sweeps ring_dir (and metrics_dir, when another) of this host's leftovers. Returns the number
 * of files removed (said in the log when any). */
int wd_leftovers_sweep(const char *ring_dir, const char *metrics_dir, const char *host);

#endif
