#include "text/unicode.h"

#include <stdlib.h>
#include <string.h>

#include "util/error.h"

#include "text/unicode_data.inc"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

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

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < r[mid][0])
      hi = mid;
    else if (cp > r[mid][1])
      lo = mid + 1;
    else
      return 1;
  }
  return 0;
}

int lt_uni_is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(letter_ranges, COUNT(letter_ranges), cp);
}

int lt_uni_is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(number_ranges, COUNT(number_ranges), cp);
}

int lt_uni_is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

/* ---- NFC ---- */

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7, LCOUNT = 19, VCOUNT = 21, TCOUNT = 28 };
enum { NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

static int ccc(uint32_t cp) {
  size_t lo = 0, hi = COUNT(ccc_ranges);
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < ccc_ranges[mid][0])
      hi = mid;
    else if (cp > ccc_ranges[mid][1])
      lo = mid + 1;
    else
      return (int)ccc_ranges[mid][2];
  }
  return 0;
}

static const uint32_t *decomp_of(uint32_t cp) {
  size_t lo = 0, hi = COUNT(decomp_table);
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (cp < decomp_table[mid][0])
      hi = mid;
    else if (cp > decomp_table[mid][0])
      lo = mid + 1;
    else
      return decomp_table[mid];
  }
  return NULL;
}

static uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
    return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
  if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE && b < TBASE + TCOUNT)
    return a + (b - TBASE);
  size_t lo = 0, hi = COUNT(compose_table);
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    const uint32_t *e = compose_table[mid];
    if (a < e[0] || (a == e[0] && b < e[1]))
      hi = mid;
    else if (a > e[0] || (a == e[0] && b > e[1]))
      lo = mid + 1;
    else
      return e[2];
  }
  return 0;
}

typedef struct {
  uint32_t *v;
  size_t n, cap;
} cps_t;

static int push(cps_t *c, uint32_t cp) {
  if (c->n == c->cap) {
    size_t cap = c->cap ? 2 * c->cap : 64;
    uint32_t *p = realloc(c->v, sizeof *p * cap);
    if (!p) return -1;
    c->v = p;
    c->cap = cap;
  }
  c->v[c->n++] = cp;
  return 0;
}

static int decompose(cps_t *c, uint32_t cp) {
  if (cp >= SBASE && cp < SBASE + SCOUNT) {
    uint32_t s = cp - SBASE, t = s % TCOUNT;
    if (push(c, LBASE + s / NCOUNT) || push(c, VBASE + (s % NCOUNT) / TCOUNT)) return -1;
    return t ? push(c, TBASE + t) : 0;
  }
  const uint32_t *d = decomp_of(cp);
  if (!d) return push(c, cp);
  if (decompose(c, d[1])) return -1;
  return d[2] ? decompose(c, d[2]) : 0;
}

int lt_uni_nfc(const char *s, size_t n, char **out, size_t *outlen) {
  *out = NULL;
  int fast = 1;
  for (size_t i = 0; i < n && fast; i++)
    if ((unsigned char)s[i] >= 0xCC) fast = 0; /* every code point below U+0300 is already NFC */
  cps_t c = {0};
  int rc = 0;
  for (size_t i = 0; i < n && !fast;) {
    uint32_t cp;
    int l = lt_utf8_decode(s + i, n - i, &cp);
    if (!l) {
      free(c.v);
      return lt_error_set(LT_EINVAL, "invalid UTF-8 at byte %zu", i);
    }
    if (decompose(&c, cp)) {
      rc = lt_error_set(LT_ENOMEM, "NFC: out of memory");
      break;
    }
    i += (size_t)l;
  }
  if (rc) {
    free(c.v);
    return rc;
  }
  if (fast) {
    char *o = malloc(n + 1);
    if (!o) return lt_error_set(LT_ENOMEM, "NFC: out of memory");
    memcpy(o, s, n);
    o[n] = 0;
    *out = o;
    *outlen = n;
    return 0;
  }
  /* Canonical ordering: stable insertion sort of each run of non-starters. */
  for (size_t i = 1; i < c.n; i++) {
    int ci = ccc(c.v[i]);
    if (!ci) continue;
    size_t j = i;
    uint32_t x = c.v[i];
    while (j > 0 && ccc(c.v[j - 1]) > ci) {
      c.v[j] = c.v[j - 1];
      j--;
    }
    c.v[j] = x;
  }
  /* Canonical composition (UAX #15): a character joins the last starter
   * unless something between them blocks it. */
  size_t w = c.n ? 1 : 0, starter = 0;
  int last = c.n && ccc(c.v[0]) ? 256 : 0;
  for (size_t i = 1; i < c.n; i++) {
    uint32_t cp = c.v[i];
    int cc = ccc(cp);
    uint32_t comp = compose_pair(c.v[starter], cp);
    if (comp && (last < cc || last == 0)) {
      c.v[starter] = comp;
      continue;
    }
    if (cc == 0) starter = w;
    last = cc;
    c.v[w++] = cp;
  }
  char *o = malloc(w * 4 + 1);
  if (!o) {
    free(c.v);
    return lt_error_set(LT_ENOMEM, "NFC: out of memory");
  }
  size_t k = 0;
  for (size_t i = 0; i < w; i++) k += (size_t)lt_utf8_encode(c.v[i], o + k);
  o[k] = 0;
  free(c.v);
  *out = o;
  *outlen = k;
  return 0;
}
