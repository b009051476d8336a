/* Where dumps go and how they are written: atomically, privately, never over another dump. */
#ifndef WD_DUMPFILE_H
#define WD_DUMPFILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/config.h"

/* The directory dumps go to: cfg->dump_dir, else ./nccl-watchdog-<job> where <job> is
 * SLURM_JOB_ID, else TORCHELASTIC_RUN_ID, else "local". Created with mode 0700 when missing;
 * when it cannot be created, $TMPDIR or /tmp is used with one WARN. Returns 0, -1 if none. */
int wd_dumpdir_resolve(const wd_config *cfg, char *out, size_t len);

/* <base>/<name> as a folder this process owns: made with mode 0700, or found as a real directory
 * (not a link) of this user. When the name is taken (a link, another user's folder: the dump
 * directory is shared), <name>~<uid>, then <name>~<uid>-<k>, with one WARN. Returns 0 with the
 * path in out, -1 when none could be had. */
int wd_own_subdir(const char *base, const char *name, char *out, size_t len);

/* Write data to <dir>/<host>-<pid>-<seq>-<reason>.json through a temporary file in the same
 * directory (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600), fsync, rename, fsync of the directory. seq
 * is zero-padded so names sort; an existing name is never replaced (the next seq is taken).
 * path_out receives the final path. Returns 0, or -1 with errno set. */
int wd_dumpfile_write(const char *dir, const char *host, int pid, unsigned seq, const char *reason,
                      const char *data, size_t len, char *path_out, size_t path_len);

/* The same with another extension than ".json" (".json.gz" for a compressed dump). */
int wd_dumpfile_write_ext(const char *dir, const char *host, int pid, unsigned seq,
                          const char *reason, const char *ext, const char *data, size_t len,
                          char *path_out, size_t path_len);
/* write() until all of data is written (EINTR retried); 0, or -1 with errno. */
int wd_write_all(int fd, const char *data, size_t len);
/* Copy s keeping only [A-Za-z0-9._-] (others become '_'); "" becomes dflt. */
void wd_file_sanitize(char *out, size_t len, const char *s, const char *dflt);

/* Names a file for sequence number seq: 0, or -1 when it does not fit. */
typedef int (*wd_name_fn)(char *out, size_t len, const void *arg, unsigned seq);
/* Writes data atomically (as above) under the first name name_fn(seq), name_fn(seq+1), ... that
 * does not exist yet; name_out receives the file name. 0, or -1 with errno set. */
int wd_file_write_new(const char *dir, wd_name_fn name_fn, const void *arg, unsigned seq,
                      const char *data, size_t len, char *name_out, size_t name_len);

#endif
