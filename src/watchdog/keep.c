/* The stall and peer dumps this process keeps on disk, within NCCL_WATCHDOG_MAX_DUMPS (keep.h). */
#include "watchdog/keep.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Remembered dumps, oldest first; beyond WD_KEEP_TRACK they are counted, not remembered (their
 * files stay). */
#define WD_KEEP_TRACK 1024
#define WD_KEEP_NAME 160

typedef struct wd_kept {
  char name[WD_KEEP_NAME]; /* file name in the host folder */
  unsigned episode;
  int resumed;
} wd_kept;

static struct {
  int max;
  unsigned count; /* dumps on disk, remembered or not */
  wd_kept *list;
  unsigned n, cap;
} wd_keep;

int wd_keep_start(int max) {
  wd_keep_stop();
  wd_keep.max = max > 0 ? max : 0;
  if (!wd_keep.max) return 0;
  wd_keep.cap = (unsigned)wd_keep.max < WD_KEEP_TRACK ? (unsigned)wd_keep.max : WD_KEEP_TRACK;
  wd_keep.list = calloc(wd_keep.cap, sizeof(*wd_keep.list));
  return wd_keep.list ? 0 : -1;
}

void wd_keep_stop(void) {
  free(wd_keep.list);
  memset(&wd_keep, 0, sizeof(wd_keep));
}

static void wd_keep_drop(unsigned i) {
  memmove(&wd_keep.list[i], &wd_keep.list[i + 1], (wd_keep.n - i - 1) * sizeof(*wd_keep.list));
  wd_keep.n--;
}

int wd_keep_room(const char *dir, int (*resumed)(unsigned k), char *removed, size_t len) {
  if (removed && len) removed[0] = '\0';
  if (!wd_keep.max || wd_keep.count < (unsigned)wd_keep.max) return 1;
  for (unsigned i = 0; i < wd_keep.n; i++) {
    wd_kept *k = &wd_keep.list[i];
    if (!k->resumed && !(k->episode && resumed && resumed(k->episode))) continue;
    /* Our own file, by the name we gave it, in the host folder we write (never through a link:
     * unlinkat removes the entry itself). */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int gone = dfd >= 0 && unlinkat(dfd, k->name, 0) == 0;
    if (dfd >= 0) close(dfd);
    if (removed && len && gone) snprintf(removed, len, "%s (stall episode %u resumed)", k->name, k->episode);
    else if (removed && len) snprintf(removed, len, "%s (stall episode %u resumed; already gone)", k->name, k->episode);
    wd_keep_drop(i);
    wd_keep.count--;
    return 1;
  }
  return 0;
}

void wd_keep_add(const char *path, unsigned episode) {
  wd_keep.count++;
  if (!wd_keep.list) return;
  if (wd_keep.n == wd_keep.cap) wd_keep_drop(0);
  const char *base = strrchr(path, '/');
  wd_kept *k = &wd_keep.list[wd_keep.n++];
  snprintf(k->name, sizeof k->name, "%s", base ? base + 1 : path);
  k->episode = episode;
  k->resumed = 0;
}

void wd_keep_resumed(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  for (unsigned i = 0; i < wd_keep.n; i++)
    if (!strcmp(wd_keep.list[i].name, base)) wd_keep.list[i].resumed = 1;
}

