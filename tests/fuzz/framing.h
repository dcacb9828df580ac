/* How fuzz inputs become frames (shared by the fuzz target and the test that
 * checks the seed corpus still decodes).  Byte 0 = number of frames − 1 (mod
 * 16), then a 2-byte little-endian length for each frame but the last; the
 * rest is split in that order, the last frame taking what remains.  Each
 * frame is a separate allocation so reads past its end are caught by ASan. */
#ifndef LT_TESTS_FUZZ_FRAMING_H
#define LT_TESTS_FUZZ_FRAMING_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

/* Returns the number of frames, or 0 if the input is too short. */
static inline int lt_fuzz_split(const uint8_t *data, size_t size, lt_frame_t *fr) {
  if (size < 1) return 0;
  int n = data[0] % LT_PROTO_MAX_FRAMES + 1;
  size_t pos = 1, lens[LT_PROTO_MAX_FRAMES];
  for (int i = 0; i < n - 1; i++) {
    if (pos + 2 > size) return 0;
    lens[i] = (size_t)data[pos] | (size_t)data[pos + 1] << 8;
    pos += 2;
  }
  for (int i = 0; i < n; i++) {
    size_t len = i < n - 1 ? lens[i] : size - pos;
    if (pos + len > size) {
      for (int k = 0; k < i; k++) free(fr[k].data);
      return 0;
    }
    fr[i].data = malloc(len ? len : 1);
    if (len) memcpy(fr[i].data, data + pos, len);
    fr[i].len = len;
    fr[i].owned = 1;
    pos += len;
  }
  return n;
}

static inline void lt_fuzz_free(lt_frame_t *fr, int n) {
  for (int i = 0; i < n; i++) free(fr[i].data);
}

#endif
