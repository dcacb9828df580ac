/* Growable byte buffer and string builder.
 *
 * Appends never fail loudly: on allocation failure the buffer sets `oom` and
 * ignores further appends, so a caller builds a whole string and checks once
 * with lt_buf_ok().  data is always NUL-terminated when non-NULL. */
#ifndef LT_UTIL_BUF_H
#define LT_UTIL_BUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct {
  char *data;
  size_t len;
  size_t cap;
  int oom;
} lt_buf_t;

int lt_buf_reserve(lt_buf_t *b, size_t extra);
void lt_buf_append(lt_buf_t *b, const void *p, size_t n);
void lt_buf_puts(lt_buf_t *b, const char *s);
void lt_buf_putc(lt_buf_t *b, char c);
void lt_buf_printf(lt_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void lt_buf_vprintf(lt_buf_t *b, const char *fmt, va_list ap);
void lt_buf_reset(lt_buf_t *b); /* len = 0, keeps memory */
void lt_buf_free(lt_buf_t *b);
/* 0 if every append succeeded, LT_ENOMEM otherwise. */
int lt_buf_ok(const lt_buf_t *b);
/* Transfers ownership of the data (NUL-terminated, never NULL unless oom). */
char *lt_buf_take(lt_buf_t *b);

#endif
