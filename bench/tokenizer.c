/* Benchmark: tokenizer.json encoding throughput (MB of UTF-8 text per second
 * of the process's CPU time: encoding is one thread, and CPU time holds on a
 * shared machine where wall time does not)
 * on a fixed mixed-script corpus in message-sized pieces, for the GPT-2
 * (ByteLevel regex) and Qwen2 (Split regex, NFC) pre-tokenizers of the test
 * tokenizers in tests/ref/tokenizer/ (small vocabularies: the pre-tokenizer
 * and the merges loop dominate).  The median of REPS runs.  Prints one JSON
 * object last. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/tokenizer.h"
#include "util/error.h"

#define REPS 5
#define PIECE 2048
#define CORPUS (4u << 20)

/* Words of several scripts, numbers, punctuation, runs of spaces and newlines. */
static char *corpus(size_t *len) {
  static const char *words[] = {
      "the",    "Tokenizer",  "it's",  "we'll", "don't",  "hello", "world",    "1234567", "3.14", "x=y+z;",
      "(a, b)", "\"quoted\"", "naïve", "café",  "Привет", "мир",   "中文字符", "你好",    "عربي", "١٢٣",
      "😀",      "👍🏽",   "  ",    "\n",    "\n\n",   "\t",    "ＡＢＣ",   "résumé",  "---",  "e\u0301"};
  char *s = malloc(CORPUS + 64);
  if (!s) return NULL;
  size_t n = 0;
  uint64_t x = 42;
  while (n < CORPUS) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const char *w = words[(x >> 33) % (sizeof words / sizeof *words)];
    size_t l = strlen(w);
    memcpy(s + n, w, l);
    n += l;
    if ((x >> 20) % 4) s[n++] = ' ';
  }
  *len = n;
  return s;
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double mb_per_s(const lt_tokenizer_t *t, const char *s, size_t len) {
  double best[REPS];
  for (int r = 0; r < REPS; r++) {
    double t0 = cpu_s();
    for (size_t i = 0; i < len;) {
      size_t n = len - i < PIECE ? len - i : PIECE;
      while (i + n < len && ((unsigned char)s[i + n] & 0xC0) == 0x80) n++; /* whole characters */
      int32_t *ids;
      int nids;
      if (lt_tokenizer_encode(t, s + i, n, &ids, &nids) < 0) {
        fprintf(stderr, "encode: %s\n", lt_error_msg());
        return -1;
      }
      free(ids);
      i += n;
    }
    best[r] = (double)len / 1e6 / (cpu_s() - t0);
  }
  for (int i = 1; i < REPS; i++) /* median: sort the few runs */
    for (int j = i; j > 0 && best[j - 1] > best[j]; j--) {
      double tmp = best[j];
      best[j] = best[j - 1];
      best[j - 1] = tmp;
    }
  return best[REPS / 2];
}

int main(void) {
  const char *root = getenv("LT_ROOT") ? getenv("LT_ROOT") : ".";
  static const char *names[] = {"gpt2", "qwen2"};
  double v[2];
  size_t len;
  char *s = corpus(&len);
  if (!s) return 1;
  for (int k = 0; k < 2; k++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/ref/tokenizer/%s-small.json", root, names[k]);
    lt_tokenizer_t *t;
    if (lt_tokenizer_load(path, &t) < 0) {
      fprintf(stderr, "%s\n", lt_error_msg());
      return 1;
    }
    v[k] = mb_per_s(t, s, len);
    lt_tokenizer_free(t);
    if (v[k] < 0) return 1;
    fprintf(stderr, "tokenizer %s: %.2f MB/s\n", names[k], v[k]);
  }
  free(s);
  printf("{\"tokenizer_gpt2_encode_mb_s\": %.4g, \"tokenizer_qwen2_encode_mb_s\": %.4g}\n", v[0], v[1]);
  return 0;
}
