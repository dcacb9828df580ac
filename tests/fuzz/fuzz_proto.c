/* libFuzzer target: the wire decoder must refuse or accept any input without
 * crashing, leaking or tripping a sanitizer, and whatever it accepts must
 * encode and decode again to the same message type. */
#include <stdlib.h>

#include "proto/proto.h"
#include "tests/fuzz/framing.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lt_frame_t fr[LT_PROTO_MAX_FRAMES];
  int n = lt_fuzz_split(data, size, fr);
  if (n == 0) return 0;
  lt_msg_t m;
  if (lt_proto_decode(fr, n, &m) == 0) {
    lt_frames_t enc;
    if (lt_proto_encode(&m, &enc) == 0) {
      lt_msg_t again;
      if (lt_proto_decode(enc.f, enc.n, &again) != 0 || again.type != m.type) abort();
      lt_msg_free(&again);
      lt_frames_free(&enc);
    }
    lt_msg_free(&m);
  }
  lt_fuzz_free(fr, n);
  return 0;
}
