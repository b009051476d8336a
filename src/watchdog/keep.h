/*
 * The stall and peer dumps this process keeps on disk: NCCL_WATCHDOG_MAX_DUMPS at most at any
 * time (snapshots are counted apart, teardown dumps not at all). Episodes that resumed (a long
 * checkpoint barrier: "slow, not hung") must not use up the evidence a real hang needs, and a
 * job that runs for weeks must not fill the directory: when the budget is spent, the oldest dump
 * of an episode that resumed makes room (removed, and said in the log); when none resumed, the
 * budget holds and the new dump is not written (said once).
 */
#ifndef WD_KEEP_H
#define WD_KEEP_H

#include <stddef.h>

/* max 0: no budget. Returns 0, or -1 (out of memory: dumps are then counted, none removed). */
int wd_keep_start(int max);
void wd_keep_stop(void);
/* Before a stall or peer dump. resumed(k) says whether the job marked episode k resumed (the
 * opener's verdict-<k>.resumed). Returns 1 when there is room (removed then names a dump that
 * was removed to make it, else ""), 0 when the budget is spent. */
int wd_keep_room(const char *dir, int (*resumed)(unsigned k), char *removed, size_t len);
/* A dump written: its file name in dir, the episode it answered (0: none known). */
void wd_keep_add(const char *path, unsigned episode);
/* This process's own stall episode resumed: its dump (path) may go first. */
void wd_keep_resumed(const char *path);

#endif
