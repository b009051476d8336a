/* Trigger files: how one rank's stall makes every rank of the job dump. */
#ifndef WD_TRIGGER_H
#define WD_TRIGGER_H

#include <stddef.h>
#include <stdint.h>

#include "base/config.h"

/* Trigger files let one rank's stall make every rank dump. Posted as
 * <dir>/trigger-<host>-<pid>-<n>.trigger (written atomically, like a dump). */
int wd_trigger_post(const char *dir, const char *host, int pid, const char *json, char *name_out,
                    size_t name_len);

#define WD_TRIGGER_SEEN 256

typedef struct wd_trigger_watch {
  char dir[WD_PATH_MAX];
  char self_prefix[128]; /* "trigger-<host>-<pid>-": our own triggers are ignored */
  int64_t mtime_sec, mtime_nsec;
  int64_t floor_sec, floor_nsec; /* triggers older than this are history: the watch's start,
                                    then the newest trigger taken minus a slack */
  unsigned nseen;
  char seen[WD_TRIGGER_SEEN][128]; /* ring of names already answered */
} wd_trigger_watch;

/* Start watching dir; triggers already present are treated as seen. */
void wd_trigger_watch_init(wd_trigger_watch *w, const char *dir, const char *host, int pid);
/* One cheap stat of the directory; when it changed, look for a trigger not seen yet. Returns 1
 * and its name (and its content, up to content_len-1 bytes, NUL-terminated) when one is found,
 * 0 otherwise. Each trigger is returned once; call again until it returns 0. */
int wd_trigger_poll(wd_trigger_watch *w, char *name_out, size_t name_len, char *content,
                    size_t content_len);

#endif
