/* Growable byte buffer and string builder (util/buf.h). */
#include "util/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"

int lt_buf_reserve(lt_buf_t *b, size_t extra) {
  if (b->oom) return LT_ENOMEM;
  if (b->len + extra + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256; /* most messages and rows fit without a second realloc */
  while (cap < b->len + extra + 1) {
    if (cap > ((size_t)-1) / 2) {
      b->oom = 1;
      return LT_ENOMEM;
    }
    cap *= 2;
  }
  char *p = realloc(b->data, cap);
  if (!p) {
    b->oom = 1;
    return LT_ENOMEM;
  }
  p[b->len] = 0; /* terminated even before the first append (lt_buf_take of a reserved buffer) */
  b->data = p;
  b->cap = cap;
  return 0;
}

void lt_buf_append(lt_buf_t *b, const void *p, size_t n) {
  if (lt_buf_reserve(b, n) < 0) return;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = 0;
}

void lt_buf_puts(lt_buf_t *b, const char *s) { lt_buf_append(b, s, strlen(s)); }

void lt_buf_putc(lt_buf_t *b, char c) {
  if (b->len + 2 > b->cap) { /* the JSON writers put a character at a time: no call chain when it fits */
    lt_buf_append(b, &c, 1);
    return;
  }
  b->data[b->len++] = c;
  b->data[b->len] = 0;
}

void lt_buf_vprintf(lt_buf_t *b, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0 || lt_buf_reserve(b, (size_t)n) < 0) return;
  vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
  b->len += (size_t)n;
}

void lt_buf_printf(lt_buf_t *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lt_buf_vprintf(b, fmt, ap);
  va_end(ap);
}

void lt_buf_reset(lt_buf_t *b) {
  b->len = 0;
  if (b->data) b->data[0] = 0;
}

void lt_buf_free(lt_buf_t *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
  b->oom = 0;
}

int lt_buf_ok(const lt_buf_t *b) { return b->oom ? LT_ENOMEM : 0; }

char *lt_buf_take(lt_buf_t *b) {
  if (b->oom) {
    lt_buf_free(b);
    return NULL;
  }
  if (!b->data) { /* never written: an empty string, terminated */
    if (lt_buf_reserve(b, 0) < 0) return NULL;
    b->data[0] = 0;
  }
  char *p = b->data;
  b->data = NULL;
  b->len = b->cap = 0;
  return p;
}
