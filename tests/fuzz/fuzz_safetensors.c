/* libFuzzer target: a safetensors file from anywhere (a worker fetches them
 * over HTTP) opens or is refused; every tensor it lists reads within bounds. */
#include <stdlib.h>
#include <unistd.h>

#include "learner/safetensors.h"
#include "tests/fuzz/memfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = lt_fuzz_memfile(data, size, path, sizeof path);
  if (fd < 0) return 0;
  lt_st_file_t *f;
  if (lt_st_open(path, &f) == 0) {
    for (int i = 0; i < f->n; i++) {
      int64_t n = lt_st_numel(&f->entries[i]);
      if (n < 0) abort();
      if (n > (1 << 20)) continue; /* a claim that large cannot fit in a fuzz input; open must have checked it */
      float *dst = malloc(sizeof *dst * (size_t)(n ? n : 1));
      if (dst) lt_st_read_f32(f, &f->entries[i], dst);
      free(dst);
    }
    lt_st_meta(f, "format");
    lt_st_close(f);
  }
  close(fd);
  return 0;
}
