/* libFuzzer target: a tokenizer.json (shipped with downloaded models) loads or
 * is refused; a loaded one encodes and decodes text without a sanitizer
 * report, and its ids stay within the vocabulary. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "text/tokenizer.h"
#include "tests/fuzz/memfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64];
  int fd = lt_fuzz_memfile(data, size, path, sizeof path);
  if (fd < 0) return 0;
  lt_tokenizer_t *t;
  if (lt_tokenizer_load(path, &t) == 0) {
    static const char text[] = "Hello, world! 12+34=46 \xe4\xbd\xa0\xe5\xa5\xbd <tool_call>x</tool_call>\n";
    int32_t *ids = NULL;
    int n = 0;
    if (lt_tokenizer_encode(t, text, sizeof text - 1, &ids, &n) == 0) {
      for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= lt_tokenizer_vocab(t)) abort();
      char *back = NULL;
      size_t blen = 0;
      lt_tokenizer_decode(t, ids, n, 0, &back, &blen);
      free(back);
    }
    free(ids);
    lt_tokenizer_free(t);
  }
  close(fd);
  return 0;
}
