/* The Unicode the tokenizers need beside the pre-tokenizer's regexes (PCRE2):
 * UTF-8 decoding and encoding, and NFC normalisation (utf8proc). */
#ifndef LT_TEXT_UNICODE_H
#define LT_TEXT_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* Decodes one UTF-8 character at s (n bytes available); returns its length, or
 * 0 if the bytes are not valid UTF-8. */
int lt_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Encodes cp; returns the byte count (1..4). */
int lt_utf8_encode(uint32_t cp, char *out);

/* NFC of valid UTF-8 text (malloc'd, NUL-terminated); LT_EINVAL on invalid UTF-8. */
int lt_uni_nfc(const char *s, size_t n, char **out, size_t *outlen);

#endif
