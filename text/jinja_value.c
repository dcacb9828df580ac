/* The Jinja engine's arena and the JavaScript-compatible printing of numbers
 * and strings that parity with @huggingface/jinja needs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/internal.h"
#include "util/utf8.h"

struct lt__jarena_chunk {
  lt__jarena_chunk_t *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

#define CHUNK 65536

void *lt__jarena_alloc(lt__jarena_t *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n == 0) n = 16;
  if (a->cap && (a->used + n > a->cap || n > a->cap)) {
    a->over = 1;
    return NULL;
  }
  lt__jarena_chunk_t *c = a->head;
  if (!c || c->cap - c->used < n) {
    size_t cap = n > CHUNK / 2 ? n : CHUNK;
    lt__jarena_chunk_t *nc = malloc(sizeof *nc + cap);
    if (!nc) return NULL;
    nc->used = 0;
    nc->cap = cap;
    if (cap == CHUNK || !c) {
      nc->next = c;
      a->head = nc;
    } else { /* a big block goes behind the current chunk, which keeps filling */
      nc->next = c->next;
      c->next = nc;
    }
    c = nc;
  }
  void *p = c->data + c->used;
  c->used += n;
  a->used += n;
  memset(p, 0, n);
  return p;
}

char *lt__jarena_strdup(lt__jarena_t *a, const char *s, size_t n) {
  char *p = lt__jarena_alloc(a, n + 1);
  if (p && n) memcpy(p, s, n);
  return p;
}

void lt__jarena_free(lt__jarena_t *a) {
  for (lt__jarena_chunk_t *c = a->head, *nx; c; c = nx) {
    nx = c->next;
    free(c);
  }
  a->head = NULL;
  a->used = 0;
}

int lt__jinja_space(const char *p, const char *end) {
  unsigned char c = (unsigned char)*p;
  if (c == ' ' || (c >= 9 && c <= 13)) return 1;
  uint32_t cp;
  int n = c < 0x80 ? 0 : lt_utf8_decode(p, (size_t)(end - p), &cp);
  if (n && (cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
            cp == 0x202f || cp == 0x205f || cp == 0x3000 || cp == 0xfeff))
    return n;
  return 0;
}

size_t lt__jinja_u16len(const char *s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if ((c & 0xc0) != 0x80) k += c >= 0xf0 ? 2 : 1;
  }
  return k;
}

void lt__jinja_num(lt_buf_t *b, double v) {
  if (isnan(v)) {
    lt_buf_puts(b, "NaN");
    return;
  }
  if (isinf(v)) {
    lt_buf_puts(b, v < 0 ? "-Infinity" : "Infinity");
    return;
  }
  if (v == 0) {
    lt_buf_putc(b, '0');
    return;
  }
  if (v < 0) {
    lt_buf_putc(b, '-');
    v = -v;
  }
  /* The shortest digits that read back as v (ECMA-262 Number::toString). */
  char tmp[40];
  int prec = 1;
  for (; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
    if (strtod(tmp, NULL) == v) break;
  }
  char digits[20];
  int k = 0;
  for (const char *q = tmp; *q && *q != 'e'; q++)
    if (*q >= '0' && *q <= '9') digits[k++] = *q;
  while (k > 1 && digits[k - 1] == '0') k--;
  int n = atoi(strchr(tmp, 'e') + 1) + 1; /* v = 0.d1d2… × 10^n */
  if (k <= n && n <= 21) {
    lt_buf_append(b, digits, (size_t)k);
    for (int i = k; i < n; i++) lt_buf_putc(b, '0');
  } else if (0 < n && n <= 21) {
    lt_buf_append(b, digits, (size_t)n);
    lt_buf_putc(b, '.');
    lt_buf_append(b, digits + n, (size_t)(k - n));
  } else if (-6 < n && n <= 0) {
    lt_buf_puts(b, "0.");
    for (int i = 0; i < -n; i++) lt_buf_putc(b, '0');
    lt_buf_append(b, digits, (size_t)k);
  } else {
    lt_buf_putc(b, digits[0]);
    if (k > 1) {
      lt_buf_putc(b, '.');
      lt_buf_append(b, digits + 1, (size_t)(k - 1));
    }
    lt_buf_printf(b, "e%c%d", n - 1 < 0 ? '-' : '+', abs(n - 1));
  }
}

void lt__jinja_quote(lt_buf_t *b, const char *s, size_t n, int ensure_ascii) {
  lt_buf_putc(b, '"');
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    switch (c) {
    case '"':
      lt_buf_puts(b, "\\\"");
      i++;
      continue;
    case '\\':
      lt_buf_puts(b, "\\\\");
      i++;
      continue;
    case '\b':
      lt_buf_puts(b, "\\b");
      i++;
      continue;
    case '\f':
      lt_buf_puts(b, "\\f");
      i++;
      continue;
    case '\n':
      lt_buf_puts(b, "\\n");
      i++;
      continue;
    case '\r':
      lt_buf_puts(b, "\\r");
      i++;
      continue;
    case '\t':
      lt_buf_puts(b, "\\t");
      i++;
      continue;
    default: break;
    }
    if (c < 0x20) {
      lt_buf_printf(b, "\\u%04x", c);
      i++;
    } else if (c < 0x7f || !ensure_ascii) {
      lt_buf_putc(b, (char)c);
      i++;
    } else if (c == 0x7f) {
      lt_buf_puts(b, "\\u007f");
      i++;
    } else {
      /* Decode one UTF-8 character; a stray byte is printed as U+FFFD. */
      unsigned cp = 0xfffd;
      size_t len = 1;
      if (c >= 0xc2 && c < 0xe0 && i + 1 < n) {
        cp = ((c & 0x1fu) << 6) | ((unsigned char)s[i + 1] & 0x3fu);
        len = 2;
      } else if (c >= 0xe0 && c < 0xf0 && i + 2 < n) {
        cp = ((c & 0x0fu) << 12) | (((unsigned char)s[i + 1] & 0x3fu) << 6) | ((unsigned char)s[i + 2] & 0x3fu);
        len = 3;
      } else if (c >= 0xf0 && c < 0xf5 && i + 3 < n) {
        cp = ((c & 0x07u) << 18) | (((unsigned char)s[i + 1] & 0x3fu) << 12) |
             (((unsigned char)s[i + 2] & 0x3fu) << 6) | ((unsigned char)s[i + 3] & 0x3fu);
        len = 4;
      }
      if (cp >= 0x10000) {
        cp -= 0x10000;
        lt_buf_printf(b, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
      } else {
        lt_buf_printf(b, "\\u%04x", cp);
      }
      i += len;
    }
  }
  lt_buf_putc(b, '"');
}
