/* Where dumps go and how they are written: atomically, privately, never over another dump. */
#ifndef WD_DUMPFILE_H
#define WD_DUMPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "../plugin/config.h"

/* The directory dumps go to: cfg->dump_dir, else ./nccl-watchdog-<job> where <job> is
 * SLURM_JOB_ID, else TORCHELASTIC_RUN_ID, else "local". Created with mode 0700 when missing;
 * when it cannot be created, $TMPDIR or /tmp is used with one WARN. Returns 0, -1 if none. */
int wd_dumpdir_resolve(const wd_config *cfg, char *out, size_t len);

/* Write data to <dir>/<host>-<pid>-<seq>-<reason>.json through a temporary file in the same
 * directory (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600), fsync, rename, fsync of the directory. seq
 * is zero-padded so names sort; an existing name is never replaced (the next seq is taken).
 * path_out receives the final path. Returns 0, or -1 with errno set. */
int wd_dumpfile_write(const char *dir, const char *host, int pid, unsigned seq, const char *reason,
                      const char *data, size_t len, char *path_out, size_t path_len);

/* Trigger files let one rank's stall make every rank dump. Posted as
 * <dir>/trigger-<host>-<pid>-<n>.json (written atomically as above). */
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

/* Short host name (up to the first dot), "unknown" when it cannot be read. */
void wd_hostname(char *out, size_t len);

#endif
