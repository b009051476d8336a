/* Reading dump files (docs/dump-format.md) into the analyzer's model, one file at a time. */
#ifndef WD_AZ_LOAD_H
#define WD_AZ_LOAD_H

#include <stddef.h>

#include "model.h"

#define WD_AZ_MAX_FILE (1024L * 1024 * 1024) /* larger files are skipped */
/* A compressed dump inflating past this is skipped (a dump of 513 communicators is 8 MB). */
#define WD_AZ_MAX_INFLATED (256L * 1024 * 1024)
/* Communicators read from one dump; the rest are cut (and the report says so). */
#define WD_AZ_MAX_COMMS_PER_DUMP 4096

/* Whose files are read: the analyzing user's and this one's (the owner of the dump directory
 * named on the command line: the job's user). Files of anyone else are skipped, with the owner
 * in the reason. (uid_t)-1: none beside the analyzing user. */
void wd_az_trust_owner(unsigned owner);
/* openat(dfd, name, flags | O_NOFOLLOW), but a symbolic link is not even opened: it is seen with
 * fstatat first (-1, errno ELOOP), so nothing of the shared directory is opened through a link
 * (O_NOFOLLOW still closes the window between the two calls). */
int wd_az_open_nolink(int dfd, const char *name, int flags);

/* Parse one document. On success appends one dump (and its communicator ranks) to set and
 * returns 0; otherwise returns -1 and writes a one-line reason into why. Never keeps a pointer
 * into data. */
int wd_az_load_buffer(wd_az_set *set, const char *path, const char *data, size_t len, char *why,
                      size_t why_len);

/* Read and parse one file. A file that cannot be used is recorded in set->skips and, unless
 * quiet, reported on stderr as "skipped PATH: REASON". Returns 0 when a dump was added. */
int wd_az_load_file(wd_az_set *set, const char *path, int quiet);

/* A file, or a directory whose *.json dumps and *.ring files (trigger-*.trigger and hidden files
 * excluded) are loaded in name order; a ring file is decoded into a "postmortem" dump. Returns -1 when path cannot be opened at all, else 0. */
int wd_az_load_path(wd_az_set *set, const char *path, int quiet);

/* For a second reading (trace export): the tree of one file, allocated in the parse arena and
 * valid until wd_az_parse_free(). NULL when unreadable. */
struct cJSON *wd_az_parse_file(const char *path);
void wd_az_parse_free(void);

/* Free the parse arena kept between files. */
void wd_az_load_release(void);
/* Threads that read and parse the files of a directory (1: this thread alone; default 1). The
 * dumps are summarised in name order whatever the number: the result does not depend on it. */
void wd_az_set_jobs(int jobs);
/* The run's memory budget for parse trees, all threads together (0: none); a file whose tree
 * would pass it is cut ("bound:"), never read as "no hang". */
void wd_az_set_memory(size_t bytes);
/* Files not yet read at CLOCK_MONOTONIC time t (seconds; 0: none) are cut ("bound:", the run's
 * --deadline of deadline_s), never read as "no hang". */
void wd_az_set_read_until(double t, unsigned deadline_s);
/* CLOCK_MONOTONIC now, in seconds: the clock of the run's deadline and of the settle. */
double wd_az_now_s(void);

/* --episode: judge the dumps that answered the job's stall episode K only (a directory's
 * snapshots are then not even read); -1 when not asked. */
void wd_az_set_episode(int episode);
int wd_az_episode_wanted(void);
/* Whether a dump's reason says what a process left as it ended (postmortem, term, sigabrt,
 * abort): judged with any episode, as a process that died or was torn down answers no trigger. */
int wd_az_reason_is_final(const char *reason);
#endif
