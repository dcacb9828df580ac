/* SHA-256 of a buffer or a file as lower-case hex, for checkpoint and weight-file checksums (libsodium's
 * crypto_hash_sha256, the library CURVE already links). */
#ifndef LT_UTIL_SHA256_H
#define LT_UTIL_SHA256_H

#include <stddef.h>

void lt_sha256_buf(const void *data, size_t n, char out[65]);
int lt_sha256_file(const char *path, char out[65]);

#endif
