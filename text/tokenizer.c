/* Tokenizer common parts: special tokens, the byte tokenizer, id arrays.
 * The Hugging Face BPE model lives in text/bpe.c. */
#include <stdlib.h>
#include <string.h>

#include "text/internal.h"
#include "util/error.h"
#include "util/fs.h"

static const char *byte_specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

int lt__tok_add_special(lt_tokenizer_t *t, const char *text, int32_t id) {
  if (t->nspecial == t->capspecial) {
    int cap = t->capspecial ? 2 * t->capspecial : 16;
    lt_special_t *ns = realloc(t->special, sizeof *ns * (size_t)cap);
    if (!ns) return lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
    t->special = ns;
    t->capspecial = cap;
  }
  char *s = strdup(text);
  if (!s) return lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
  t->special[t->nspecial].text = s;
  t->special[t->nspecial].len = strlen(s);
  t->special[t->nspecial].id = id;
  t->special_first[(unsigned char)s[0]] = 1;
  t->nspecial++;
  return 0;
}

int lt_tokenizer_byte(int vocab_size, lt_tokenizer_t **out) {
  *out = NULL;
  if (vocab_size < 259)
    return lt_error_set(LT_EINVAL, "byte tokenizer: vocab_size %d < 259 (256 bytes + 3 specials)", vocab_size);
  lt_tokenizer_t *t = calloc(1, sizeof *t);
  if (!t) return lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
  t->kind = LT_TOK_BYTE;
  t->vocab = vocab_size;
  for (int i = 0; i < 3; i++) {
    int rc = lt__tok_add_special(t, byte_specials[i], 256 + i);
    if (rc < 0) {
      lt_tokenizer_free(t);
      return rc;
    }
  }
  *out = t;
  return 0;
}

void lt_tokenizer_free(lt_tokenizer_t *t) {
  if (!t) return;
  for (int i = 0; i < t->nspecial; i++) free(t->special[i].text);
  free(t->special);
  lt__bpe_free(t);
  free(t);
}

int lt_tokenizer_vocab(const lt_tokenizer_t *t) { return t->vocab; }

int32_t lt_tokenizer_special(const lt_tokenizer_t *t, const char *text) {
  for (int i = 0; i < t->nspecial; i++)
    if (strcmp(t->special[i].text, text) == 0) return t->special[i].id;
  return -1;
}

const char *lt__tok_special_text(const lt_tokenizer_t *t, int32_t id) {
  for (int i = 0; i < t->nspecial; i++)
    if (t->special[i].id == id) return t->special[i].text;
  return NULL;
}

int lt_tokenizer_is_stop(const lt_tokenizer_t *t, int32_t id) {
  const char *s = lt__tok_special_text(t, id);
  return s && (strcmp(s, "<|im_end|>") == 0 || strcmp(s, "<|endoftext|>") == 0 || strcmp(s, "<|eot_id|>") == 0 ||
               strcmp(s, "<|end_of_text|>") == 0);
}

int lt_ids_push(int32_t **ids, int *n, int *cap, int32_t id) {
  if (*n == *cap) {
    int c = *cap ? 2 * *cap : 64;
    int32_t *p = realloc(*ids, sizeof *p * (size_t)c);
    if (!p) return lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
    *ids = p;
    *cap = c;
  }
  (*ids)[(*n)++] = id;
  return 0;
}

int lt_tokenizer_encode(const lt_tokenizer_t *t, const char *text, size_t len, int32_t **ids, int *n) {
  *ids = NULL;
  *n = 0;
  if (t->kind == LT_TOK_BPE) return lt__bpe_encode(t, text, len, ids, n);
  int cap = 0;
  for (size_t i = 0; i < len; i++) {
    int rc = lt_ids_push(ids, n, &cap, (unsigned char)text[i]);
    if (rc < 0) {
      free(*ids);
      *ids = NULL;
      return rc;
    }
  }
  if (!*ids) *ids = malloc(sizeof(int32_t)); /* callers may free a zero-length result */
  return *ids ? 0 : lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
}

int lt_tokenizer_decode(const lt_tokenizer_t *t, const int32_t *ids, int n, int skip_special, char **text,
                        size_t *len) {
  if (t->kind == LT_TOK_BPE) return lt__bpe_decode(t, ids, n, skip_special, text, len);
  char *s = malloc((size_t)n * 16 + 1);
  if (!s) return lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
  size_t k = 0;
  for (int i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= t->vocab) {
      free(s);
      return lt_error_set(LT_ERANGE, "token id %d at index %d is outside [0, %d)", ids[i], i, t->vocab);
    }
    if (ids[i] < 256) {
      s[k++] = (char)ids[i];
      continue;
    }
    const char *sp = lt__tok_special_text(t, ids[i]);
    if (sp && !skip_special) {
      size_t l = strlen(sp);
      memcpy(s + k, sp, l);
      k += l;
    }
  }
  s[k] = 0;
  *text = s;
  *len = k;
  return 0;
}

int lt_ids_text(const lt_tokenizer_t *t, const char *s, int32_t **ids, int *n, int *cap) {
  int32_t *tmp;
  int m;
  int rc = lt_tokenizer_encode(t, s, strlen(s), &tmp, &m);
  if (rc < 0) return rc;
  for (int i = 0; i < m && rc == 0; i++) rc = lt_ids_push(ids, n, cap, tmp[i]);
  free(tmp);
  return rc;
}

int lt_tokenizer_for_model(const char *dir, int vocab, lt_tokenizer_t **out) {
  char tp[4096];
  int rc = lt_path_join(tp, sizeof tp, dir, "tokenizer.json");
  if (rc < 0) return rc;
  return lt_fs_exists(tp) ? lt_tokenizer_load(tp, out) : lt_tokenizer_byte(vocab, out);
}

int lt_tokenizer_copy_files(const char *src, const char *dst) {
  static const char *names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                                "merges.txt",     "generation_config.json"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char a[4096], b[4096];
    int rc = lt_path_join(a, sizeof a, src, names[i]);
    if (rc == 0) rc = lt_path_join(b, sizeof b, dst, names[i]);
    if (rc < 0) return rc;
    if (!lt_fs_exists(a)) continue;
    char *data;
    size_t len;
    if ((rc = lt_fs_read_file(a, (size_t)1 << 30, &data, &len)) < 0) return rc;
    rc = lt_fs_write_atomic(b, data, len);
    free(data);
    if (rc < 0) return rc;
  }
  return 0;
}
