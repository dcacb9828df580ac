/* The Unicode the tokenizers need beside the pre-tokenizer's regexes (PCRE2):
 * NFC normalisation (utf8proc); UTF-8 itself is util/utf8.h. */
#ifndef LT_TEXT_UNICODE_H
#define LT_TEXT_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "util/utf8.h"

/* NFC of valid UTF-8 text (malloc'd, NUL-terminated); LT_EINVAL on invalid UTF-8. */
int lt_uni_nfc(const char *s, size_t n, char **out, size_t *outlen);

#endif
