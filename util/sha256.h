/* SHA-256 of a buffer or a file as lower-case hex, for checkpoint and weight-file checksums (libsodium's
 * crypto_hash_sha256, the library CURVE already links). */
#ifndef LT_UTIL_SHA256_H
#define LT_UTIL_SHA256_H

#include <stddef.h>
#include <stdint.h>

void lt_sha256_buf(const void *data, size_t n, char out[65]);
int lt_sha256_file(const char *path, char out[65]);

/* Incremental: init, any number of updates, final (hex). */
typedef struct {
  _Alignas(16) uint8_t state[128]; /* libsodium's crypto_hash_sha256_state (104 bytes), kept opaque here */
} lt_sha256_t;
void lt_sha256_init(lt_sha256_t *h);
void lt_sha256_update(lt_sha256_t *h, const void *data, size_t n);
void lt_sha256_final(lt_sha256_t *h, char out[65]);

#endif
