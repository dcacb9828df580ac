/* SHA-256 of a buffer or a file as hex (util/sha256.h), through libsodium. */
#include "util/sha256.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "util/error.h"

static void hex(const unsigned char d[crypto_hash_sha256_BYTES], char out[65]) {
  sodium_bin2hex(out, 65, d, crypto_hash_sha256_BYTES);
}

void lt_sha256_buf(const void *data, size_t n, char out[65]) {
  unsigned char d[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(d, data, n);
  hex(d, out);
}

int lt_sha256_file(const char *path, char out[65]) {
  FILE *f = fopen(path, "rb");
  if (!f) return lt_error_set(lt_error_from_errno(errno), "cannot open %s: %s", path, strerror(errno));
  crypto_hash_sha256_state c;
  crypto_hash_sha256_init(&c);
  static _Thread_local unsigned char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) crypto_hash_sha256_update(&c, buf, n);
  int err = ferror(f);
  fclose(f);
  if (err) return lt_error_set(LT_EIO, "cannot read %s", path);
  unsigned char d[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&c, d);
  hex(d, out);
  return 0;
}

_Static_assert(sizeof(crypto_hash_sha256_state) <= sizeof(((lt_sha256_t *)0)->state), "lt_sha256_t too small");

void lt_sha256_init(lt_sha256_t *h) { crypto_hash_sha256_init((crypto_hash_sha256_state *)h->state); }

void lt_sha256_update(lt_sha256_t *h, const void *data, size_t n) {
  crypto_hash_sha256_update((crypto_hash_sha256_state *)h->state, data, n);
}

void lt_sha256_final(lt_sha256_t *h, char out[65]) {
  unsigned char d[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final((crypto_hash_sha256_state *)h->state, d);
  hex(d, out);
}
