/* UTF-8, decoded and encoded in one place: the tokenizers, the template engine, the JSON writer and the
 * rewards all read text through these two. */
#ifndef LT_UTIL_UTF8_H
#define LT_UTIL_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one UTF-8 character at s (n bytes available); returns its length, or 0 if the bytes are not valid
 * UTF-8 (overlong forms, surrogates and code points past U+10FFFF included). */
int lt_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Encodes cp; returns the byte count (1..4). */
int lt_utf8_encode(uint32_t cp, char *out);

#endif
