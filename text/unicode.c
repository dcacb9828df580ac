/* UTF-8 decoding and encoding, and NFC through utf8proc. */
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "util/error.h"

int lt_utf8_decode(const char *s, size_t n, uint32_t *cp) {
  const unsigned char *p = (const unsigned char *)s;
  if (n == 0) return 0;
  unsigned c = p[0];
  int len;
  uint32_t v, min;
  if (c < 0x80) {
    *cp = c;
    return 1;
  } else if ((c & 0xE0) == 0xC0) {
    len = 2, v = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, v = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, v = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if ((size_t)len > n) return 0;
  for (int i = 1; i < len; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    v = (v << 6) | (p[i] & 0x3F);
  }
  if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  *cp = v;
  return len;
}

int lt_utf8_encode(uint32_t cp, char *o) {
  if (cp < 0x80) {
    o[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    o[0] = (char)(0xC0 | (cp >> 6));
    o[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (cp >> 18));
  o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  o[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

int lt_uni_nfc(const char *s, size_t n, char **out, size_t *outlen) {
  *out = NULL;
  int fast = 1; /* every code point below U+0300 is already NFC, and so is a text of only those */
  for (size_t i = 0; i < n && fast; i++)
    if ((unsigned char)s[i] >= 0xCC) fast = 0;
  if (fast) {
    char *o = malloc(n + 1);
    if (!o) return lt_error_set(LT_ENOMEM, "NFC: out of memory");
    memcpy(o, s, n);
    o[n] = 0;
    *out = o;
    *outlen = n;
    return 0;
  }
  utf8proc_uint8_t *o = NULL;
  utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &o, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
  if (k < 0) {
    if (k == UTF8PROC_ERROR_NOMEM) return lt_error_set(LT_ENOMEM, "NFC: out of memory");
    size_t at = 0; /* where the text stops being UTF-8, for the message */
    for (uint32_t cp; at < n;) {
      int l = lt_utf8_decode(s + at, n - at, &cp);
      if (!l) break;
      at += (size_t)l;
    }
    return lt_error_set(LT_EINVAL, "invalid UTF-8 at byte %zu", at);
  }
  *out = (char *)o;
  *outlen = (size_t)k;
  return 0;
}
