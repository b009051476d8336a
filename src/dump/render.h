/* The dump document (docs/dump-format.md), rendered from a snapshot and written atomically. */
#ifndef WD_RENDER_H
#define WD_RENDER_H

#include <stddef.h>

#include "dump/snapshot.h"

/* Build the JSON document. Returns a malloc'd NUL-terminated string (caller frees), or NULL. */
char *wd_dump_render(const wd_dump_input *in);
/* Render and write into dir atomically; path_out receives the final path. 0, or -1. */
int wd_dump_write(const wd_dump_input *in, const char *dir, char *path_out, size_t path_len);

#endif
