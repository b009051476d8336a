/* JSON string escaping for the dump document: every string a dump emits goes through here. */
#ifndef WD_JSONSTR_H
#define WD_JSONSTR_H

#include <stddef.h>

#include "dump/textbuf.h"

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid. */
size_t wd_utf8_seq(const unsigned char *s, size_t n);

/* Worst case output of wd_sb_str for n input bytes: every byte as a 6-byte escape, plus quotes. */
#define WD_SB_STR_BOUND(n) ((n) * 6 + 2)

/* Append s (n bytes) as a JSON string: quotes, backslashes and control characters escaped; bytes
 * that are not valid UTF-8 become U+FFFD so a strict parser accepts the document. The caller
 * reserved WD_SB_STR_BOUND(n). */
void wd_sb_str(wd_sb *b, const char *s, size_t n);

/* A copy of s that is valid UTF-8 (invalid bytes become U+FFFD), for strings handed to cJSON,
 * which escapes quotes and control characters but passes other bytes through. NULL on OOM. */
char *wd_utf8_clean(const char *s);

#endif
