/* NFC through utf8proc. */
#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "util/error.h"
#include "util/utf8.h"

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
  utf8proc_ssize_t k =
      utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &o, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
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
