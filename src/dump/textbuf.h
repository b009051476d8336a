/*
 * A growing text buffer for documents of tens of megabytes. Writers reserve a bound first, then
 * append without further checks.
 */
#ifndef WD_TEXTBUF_H
#define WD_TEXTBUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>


typedef struct wd_sb {
  char *p;
  size_t len, cap;
  int oom;
  int mapped; /* p comes from map_big(), not malloc */
} wd_sb;

/* Room for n more bytes (and a NUL). 0, or -1 when out of memory (sticky: b->oom). */
int wd_sb_reserve(wd_sb *b, size_t n);
void wd_sb_free(wd_sb *b);
/* A 2 MB-aligned anonymous mapping of len bytes (len a multiple of 2 MB), or NULL. */
char *wd_map_big(size_t len);

/* The unchecked appends below rely on an earlier wd_sb_reserve. */
static inline void wd_sb_mem(wd_sb *b, const char *s, size_t n) {
  memcpy(b->p + b->len, s, n);
  b->len += n;
}
/* lit must be a string literal: "" lit "" rejects anything else at compile time. */
#define WD_SB_LIT(b, lit) wd_sb_mem((b), "" lit "", sizeof(lit) - 1)
static inline void wd_sb_ch(wd_sb *b, char c) { b->p[b->len++] = c; }
static inline void wd_sb_bool(wd_sb *b, const char *key, int v) {
  wd_sb_mem(b, key, strlen(key));
  if (v)
    WD_SB_LIT(b, "true");
  else
    WD_SB_LIT(b, "false");
}

static inline void wd_sb_u64(wd_sb *b, uint64_t v) {
  char tmp[20];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n) b->p[b->len++] = tmp[--n];
}

static inline void wd_sb_i64(wd_sb *b, int64_t v) {
  if (v < 0) {
    wd_sb_ch(b, '-');
    wd_sb_u64(b, (uint64_t)0 - (uint64_t)v);
  } else {
    wd_sb_u64(b, (uint64_t)v);
  }
}

static inline void wd_sb_hex(wd_sb *b, uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  char tmp[16];
  int n = 0;
  do {
    tmp[n++] = digits[v & 15];
    v >>= 4;
  } while (v);
  WD_SB_LIT(b, "\"0x");
  while (n) b->p[b->len++] = tmp[--n];
  wd_sb_ch(b, '"');
}

/* A duration in ns as milliseconds with microsecond resolution ("300120.300"). */
static inline void wd_sb_ms(wd_sb *b, uint64_t ns) {
  uint64_t us = ns / 1000;
  wd_sb_u64(b, us / 1000);
  unsigned frac = (unsigned)(us % 1000);
  wd_sb_ch(b, '.');
  wd_sb_ch(b, (char)('0' + frac / 100));
  wd_sb_ch(b, (char)('0' + frac / 10 % 10));
  wd_sb_ch(b, (char)('0' + frac % 10));
}

#endif
