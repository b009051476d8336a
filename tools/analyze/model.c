#include "model.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Interning: an open-addressing hash of ids into one array of strings. The analyzer is single
 * threaded, so no locking. */
static char **g_strs;
static uint32_t g_nstrs, g_cap_strs;
static uint32_t *g_hash; /* id+1, 0 = empty */
static uint32_t g_hcap;

static uint32_t str_hash(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static int hash_grow(void) {
  uint32_t ncap = g_hcap ? g_hcap * 2 : 1024;
  uint32_t *nh = calloc(ncap, sizeof(*nh));
  if (!nh) return -1;
  for (uint32_t i = 1; i < g_nstrs; i++) {
    uint32_t h = str_hash(g_strs[i]) & (ncap - 1);
    while (nh[h]) h = (h + 1) & (ncap - 1);
    nh[h] = i + 1;
  }
  free(g_hash);
  g_hash = nh;
  g_hcap = ncap;
  return 0;
}

static wd_az_str str_append(const char *s) {
  if (g_nstrs == g_cap_strs) {
    uint32_t ncap = g_cap_strs ? g_cap_strs * 2 : 256;
    char **n = realloc(g_strs, ncap * sizeof(*n));
    if (!n) return 0;
    g_strs = n;
    g_cap_strs = ncap;
  }
  char *copy = strdup(s);
  if (!copy) return 0;
  g_strs[g_nstrs] = copy;
  return g_nstrs++;
}

/* Whether s is valid UTF-8 (RFC 3629: no overlong forms, no surrogates, at most U+10FFFF). */
static int utf8_valid(const unsigned char *s) {
  while (*s) {
    unsigned c = *s, n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 9;
    if (n == 9) return 0;
    uint32_t cp = n == 0 ? c : c & (0x3fu >> n);
    for (unsigned i = 1; i <= n; i++) {
      if ((s[i] & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (s[i] & 0x3fu);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return 0;
    s += n + 1;
  }
  return 1;
}

char *wd_az_utf8_dup(const char *s) {
  if (!s) return NULL;
  char *c = strdup(s);
  if (!c || utf8_valid((const unsigned char *)c)) return c;
  /* Whatever a planted file holds, the reports stay valid UTF-8: bytes outside ASCII become '?'. */
  for (unsigned char *p = (unsigned char *)c; *p; p++)
    if (*p >= 0x80) *p = '?';
  return c;
}

wd_az_str wd_az_intern(const char *s) {
  if (!s || !*s) return 0;
  if (!utf8_valid((const unsigned char *)s)) {
    char *c = wd_az_utf8_dup(s);
    wd_az_str id = c ? wd_az_intern(c) : 0;
    free(c);
    return id;
  }
  if (g_nstrs == 0 && str_append("") != 0) return 0;
  if ((g_nstrs + 1) * 2 > g_hcap && hash_grow() != 0) return 0;
  uint32_t h = str_hash(s) & (g_hcap - 1);
  while (g_hash[h]) {
    if (strcmp(g_strs[g_hash[h] - 1], s) == 0) return g_hash[h] - 1;
    h = (h + 1) & (g_hcap - 1);
  }
  wd_az_str id = str_append(s);
  if (id) g_hash[h] = id + 1;
  return id;
}

const char *wd_az_s(wd_az_str id) {
  return id < g_nstrs ? g_strs[id] : "";
}

void wd_az_strings_free(void) {
  for (uint32_t i = 0; i < g_nstrs; i++) free(g_strs[i]);
  free(g_strs);
  free(g_hash);
  g_strs = NULL;
  g_hash = NULL;
  g_nstrs = g_cap_strs = g_hcap = 0;
}

static void *grow(void *arr, size_t *cap, size_t n, size_t elem) {
  if (n < *cap) return arr;
  size_t ncap = *cap ? *cap * 2 : 64;
  void *p = realloc(arr, ncap * elem);
  if (p) *cap = ncap;
  return p;
}

wd_az_dump *wd_az_add_dump(wd_az_set *set) {
  wd_az_dump *p = grow(set->dumps, &set->cap_dumps, set->ndumps, sizeof(*p));
  if (!p) return NULL;
  set->dumps = p;
  memset(&p[set->ndumps], 0, sizeof(*p));
  return &p[set->ndumps++];
}

wd_az_crank *wd_az_add_crank(wd_az_set *set) {
  wd_az_crank *p = grow(set->cranks, &set->cap_cranks, set->ncranks, sizeof(*p));
  if (!p) return NULL;
  set->cranks = p;
  memset(&p[set->ncranks], 0, sizeof(*p));
  return &p[set->ncranks++];
}

int wd_az_add_skip(wd_az_set *set, const char *path, const char *why) {
  wd_az_skip *p = grow(set->skips, &set->cap_skips, set->nskips, sizeof(*p));
  if (!p) return -1;
  set->skips = p;
  p[set->nskips].path = wd_az_utf8_dup(path);
  p[set->nskips].why = wd_az_utf8_dup(why);
  set->nskips++;
  return 0;
}

void wd_az_set_free(wd_az_set *set) {
  for (size_t i = 0; i < set->ndumps; i++) free(set->dumps[i].path);
  for (size_t i = 0; i < set->nskips; i++) {
    free(set->skips[i].path);
    free(set->skips[i].why);
  }
  free(set->dumps);
  free(set->cranks);
  free(set->skips);
  memset(set, 0, sizeof(*set));
}

static size_t put_range(char *out, size_t len, size_t pos, int lo, int hi, int first) {
  char buf[48];
  if (lo == hi) snprintf(buf, sizeof(buf), "%s%d", first ? "" : ",", lo);
  else snprintf(buf, sizeof(buf), "%s%d-%d", first ? "" : ",", lo, hi);
  size_t n = strlen(buf);
  if (pos + n + 4 >= len) {
    if (pos + 4 < len) memcpy(out + pos, "...", 4);
    return len;
  }
  memcpy(out + pos, buf, n + 1);
  return pos + n;
}

void wd_az_ranges(const int *ranks, size_t n, char *out, size_t len) {
  if (!len) return;
  out[0] = '\0';
  size_t pos = 0, i = 0;
  int first = 1;
  while (i < n && pos < len) {
    int lo = ranks[i], hi = lo;
    while (i + 1 < n && (ranks[i + 1] == hi || ranks[i + 1] == hi + 1)) hi = ranks[++i];
    pos = put_range(out, len, pos, lo, hi, first);
    first = 0;
    i++;
  }
}

const char *wd_az_secs(double ms, char *buf, size_t len) {
  snprintf(buf, len, "%.1f", ms / 1000.0);
  return buf;
}

void wd_az_fmt(char *out, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out, len, fmt, ap);
  va_end(ap);
}
