/* SHA-256 (FIPS 180-4), for checkpoint and weight-file checksums. */
#ifndef LT_UTIL_SHA256_H
#define LT_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t h[8];
  uint64_t bits;
  uint8_t block[64];
  size_t fill;
} lt_sha256_t;

void lt_sha256_init(lt_sha256_t *c);
void lt_sha256_update(lt_sha256_t *c, const void *data, size_t n);
void lt_sha256_final(lt_sha256_t *c, uint8_t out[32]);
/* Lower-case hex, 64 characters plus NUL. */
void lt_sha256_hex(const uint8_t digest[32], char out[65]);
void lt_sha256_buf(const void *data, size_t n, char out[65]);
int lt_sha256_file(const char *path, char out[65]);

#endif
