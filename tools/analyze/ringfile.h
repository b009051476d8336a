/* Ring files a dead process left behind (src/flightrec/ringfile.h), decoded into dumps. */
#ifndef WD_AZ_RINGFILE_H
#define WD_AZ_RINGFILE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* Whether data starts like a ring file. */
int wd_az_is_ringfile(const char *data, size_t len);
/* The file as an ordinary dump document (reason "postmortem", one communicator, its rings, the
 * sequence counters), built with cJSON's current allocator; NULL with a one-line reason when the
 * file is not a ring file, of another version, torn in its header or truncated. Records that fail
 * their check are counted (postmortem.tornRecords, ring.torn), never trusted. */
cJSON *wd_az_ringfile_decode(const char *data, size_t len, const char *path, char *why,
                             size_t why_len);
/* The same, its times relative to ref_at_least (CLOCK_MONOTONIC of the file's machine) where that
 * is later than the file's own reference instant: the files of one process, decoded with the
 * latest of their instants, make one dump whose times agree. */
cJSON *wd_az_ringfile_decode_at(const char *data, size_t len, const char *path, uint64_t ref_at_least,
                                char *why, size_t why_len);

#endif
