/* JSON string escaping (jsonstr.h). */
#include "dump/jsonstr.h"

#include <stdlib.h>
#include <string.h>

size_t wd_utf8_seq(const unsigned char *s, size_t n) {
  unsigned c = s[0];
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return (n >= 2 && (s[1] & 0xc0) == 0x80) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80) return 0;
    if (c == 0xe0 && s[1] < 0xa0) return 0; /* overlong */
    if (c == 0xed && s[1] >= 0xa0) return 0; /* surrogate */
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (n < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80) return 0;
    if (c == 0xf0 && s[1] < 0x90) return 0;
    if (c == 0xf4 && s[1] >= 0x90) return 0;
    return 4;
  }
  return 0;
}

void wd_sb_str(wd_sb *b, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *u = (const unsigned char *)s;
  wd_sb_ch(b, '"');
  size_t i = 0;
  while (i < n) {
    unsigned c = u[i];
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      wd_sb_ch(b, (char)c);
      i++;
      continue;
    }
    if (c < 0x80) {
      wd_sb_ch(b, '\\');
      switch (c) {
      case '"': wd_sb_ch(b, '"'); break;
      case '\\': wd_sb_ch(b, '\\'); break;
      case '\n': wd_sb_ch(b, 'n'); break;
      case '\r': wd_sb_ch(b, 'r'); break;
      case '\t': wd_sb_ch(b, 't'); break;
      case '\b': wd_sb_ch(b, 'b'); break;
      case '\f': wd_sb_ch(b, 'f'); break;
      default:
        WD_SB_LIT(b, "u00");
        wd_sb_ch(b, hex[c >> 4]);
        wd_sb_ch(b, hex[c & 15]);
      }
      i++;
      continue;
    }
    size_t k = wd_utf8_seq(u + i, n - i);
    if (k == 0) {
      WD_SB_LIT(b, "\\ufffd");
      i++;
    } else {
      wd_sb_mem(b, s + i, k);
      i += k;
    }
  }
  wd_sb_ch(b, '"');
}

char *wd_utf8_clean(const char *s) {
  size_t n = strlen(s);
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    size_t k = wd_utf8_seq(u + i, n - i);
    if (!k) break;
    i += k;
  }
  char *out = malloc(i == n ? n + 1 : n * 3 + 1);
  if (!out) return NULL;
  if (i == n) {
    memcpy(out, s, n + 1);
    return out;
  }
  size_t o = 0;
  i = 0;
  while (i < n) {
    size_t k = wd_utf8_seq(u + i, n - i);
    if (!k) {
      memcpy(out + o, "\xef\xbf\xbd", 3);
      o += 3;
      i++;
    } else {
      memcpy(out + o, s + i, k);
      o += k;
      i += k;
    }
  }
  out[o] = 0;
  return out;
}

