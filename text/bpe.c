/* Hugging Face tokenizer.json byte-level BPE (GPT-2, Llama-3, Qwen2/3):
 * added tokens first, then NFC (when configured), the pre-tokenizer split,
 * the byte-level alphabet and BPE merges by rank.  docs/tokenizer.md lists
 * what is supported. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat_template.h"
#include "text/internal.h"
#include "text/unicode.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

typedef enum { PRE_GPT2, PRE_LLAMA3, PRE_QWEN2 } pre_kind;

/* The pre-tokenizer patterns longtail implements, verbatim as they appear in
 * tokenizer.json files. */
static const char *PAT_GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char *PAT_LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
                                "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *PAT_QWEN2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
                               "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct lt_bpe {
  char **tok;          /* id → raw bytes */
  uint32_t *toklen;
  int ntok;
  int32_t *vh;         /* open-addressing table of ids keyed by their bytes */
  size_t vcap;
  uint64_t *mkey;      /* merges: (left << 32 | right) → rank, result */
  int32_t *mrank, *mres;
  size_t mcap;
  int32_t byte_id[256];
  pre_kind pre;
  int nfc, ignore_merges, add_prefix_space;
} lt_bpe_t;

static uint64_t hash_bytes(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
  return h;
}

static int32_t vocab_find(const lt_bpe_t *b, const char *s, size_t n) {
  size_t i = hash_bytes(s, n) & (b->vcap - 1);
  while (b->vh[i] >= 0) {
    int32_t id = b->vh[i];
    if (b->toklen[id] == n && memcmp(b->tok[id], s, n) == 0) return id;
    i = (i + 1) & (b->vcap - 1);
  }
  return -1;
}

static void vocab_insert(lt_bpe_t *b, int32_t id) {
  size_t i = hash_bytes(b->tok[id], b->toklen[id]) & (b->vcap - 1);
  while (b->vh[i] >= 0) i = (i + 1) & (b->vcap - 1);
  b->vh[i] = id;
}

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

static int merge_find(const lt_bpe_t *b, int32_t l, int32_t r, int32_t *rank, int32_t *res) {
  uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
  size_t i = mix64(k) & (b->mcap - 1);
  while (b->mrank[i] >= 0) {
    if (b->mkey[i] == k) {
      *rank = b->mrank[i];
      *res = b->mres[i];
      return 1;
    }
    i = (i + 1) & (b->mcap - 1);
  }
  return 0;
}

static void merge_insert(lt_bpe_t *b, int32_t l, int32_t r, int32_t rank, int32_t res) {
  uint64_t k = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
  size_t i = mix64(k) & (b->mcap - 1);
  while (b->mrank[i] >= 0) {
    if (b->mkey[i] == k) return; /* the first (lowest-rank) occurrence wins */
    i = (i + 1) & (b->mcap - 1);
  }
  b->mkey[i] = k;
  b->mrank[i] = rank;
  b->mres[i] = res;
}

/* GPT-2's byte ↔ printable-character alphabet. */
static void byte_alphabet(uint32_t map[256]) {
  int n = 0;
  for (int c = 0; c < 256; c++) {
    int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    map[c] = printable ? (uint32_t)c : (uint32_t)(256 + n++);
  }
}

/* Converts a vocabulary string in the byte alphabet to raw bytes; 0 if it
 * holds a character outside the alphabet. */
static int unalphabet(const char *s, size_t n, const uint32_t inv_max, const int16_t *inv, char *out, size_t *outlen) {
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    int l = lt_utf8_decode(s + i, n - i, &cp);
    if (!l || cp >= inv_max || inv[cp] < 0) return 0;
    out[k++] = (char)inv[cp];
    i += (size_t)l;
  }
  *outlen = k;
  return 1;
}

void lt__bpe_free(lt_tokenizer_t *t) {
  lt_bpe_t *b = t->bpe;
  if (!b) return;
  for (int i = 0; i < b->ntok; i++) free(b->tok[i]);
  free(b->tok);
  free(b->toklen);
  free(b->vh);
  free(b->mkey);
  free(b->mrank);
  free(b->mres);
  free(b);
  t->bpe = NULL;
}

static int unsupported(const char *path, const char *what) {
  return lt_error_set(LT_EUNSUPP, "%s: %s is not supported (docs/tokenizer.md)", path, what);
}

static int parse_pipeline(lt_bpe_t *b, const cJSON *root, const char *path) {
  const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  if (norm && !cJSON_IsNull(norm)) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(norm, "type");
    if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "NFC") != 0) return unsupported(path, "normalizer other than NFC");
    b->nfc = 1;
  }
  const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(pre, "type");
  if (!cJSON_IsString(ty)) return unsupported(path, "a tokenizer without pre_tokenizer");
  const cJSON *bl = NULL, *split = NULL;
  if (strcmp(ty->valuestring, "ByteLevel") == 0) {
    bl = pre;
  } else if (strcmp(ty->valuestring, "Sequence") == 0) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    if (cJSON_GetArraySize(list) != 2) return unsupported(path, "this pre_tokenizer sequence");
    split = list->child;
    bl = list->child->next;
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(split, "type");
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(bl, "type");
    if (!cJSON_IsString(st) || strcmp(st->valuestring, "Split") || !cJSON_IsString(bt) || strcmp(bt->valuestring, "ByteLevel"))
      return unsupported(path, "a pre_tokenizer sequence other than Split + ByteLevel");
  } else {
    return unsupported(path, "this pre_tokenizer type");
  }
  const cJSON *ur = cJSON_GetObjectItemCaseSensitive(bl, "use_regex");
  const cJSON *aps = cJSON_GetObjectItemCaseSensitive(bl, "add_prefix_space");
  b->add_prefix_space = cJSON_IsTrue(aps);
  if (!split) {
    if (cJSON_IsFalse(ur)) return unsupported(path, "ByteLevel without its regex and without a Split");
    b->pre = PRE_GPT2;
    return 0;
  }
  if (cJSON_IsTrue(ur)) return unsupported(path, "a Split followed by ByteLevel with use_regex");
  const cJSON *pat = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(split, "pattern"), "Regex");
  const cJSON *beh = cJSON_GetObjectItemCaseSensitive(split, "behavior");
  const cJSON *inv = cJSON_GetObjectItemCaseSensitive(split, "invert");
  if (!cJSON_IsString(pat) || !cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") || cJSON_IsTrue(inv))
    return unsupported(path, "this Split pre-tokenizer");
  if (strcmp(pat->valuestring, PAT_QWEN2) == 0)
    b->pre = PRE_QWEN2;
  else if (strcmp(pat->valuestring, PAT_LLAMA3) == 0)
    b->pre = PRE_LLAMA3;
  else if (strcmp(pat->valuestring, PAT_GPT2) == 0)
    b->pre = PRE_GPT2;
  else
    return lt_error_set(LT_EUNSUPP, "%s: pre-tokenizer pattern %.80s… is not one of GPT-2, Llama-3, Qwen2 (docs/tokenizer.md)",
                        path, pat->valuestring);
  return 0;
}

static int load_model(lt_tokenizer_t *t, lt_bpe_t *b, const cJSON *root, const char *path) {
  const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(model, "type");
  if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "BPE")) return unsupported(path, "a model other than BPE");
  if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"))) return unsupported(path, "byte_fallback");
  const cJSON *pre = cJSON_GetObjectItemCaseSensitive(model, "continuing_subword_prefix");
  const cJSON *suf = cJSON_GetObjectItemCaseSensitive(model, "end_of_word_suffix");
  if ((cJSON_IsString(pre) && pre->valuestring[0]) || (cJSON_IsString(suf) && suf->valuestring[0]))
    return unsupported(path, "continuing_subword_prefix / end_of_word_suffix");
  b->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
  const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
  if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) return lt_error_set(LT_EFORMAT, "%s: model.vocab / model.merges missing", path);
  int maxid = -1;
  size_t maxlen = 0; /* longest vocabulary string: bounds every conversion buffer below */
  for (const cJSON *e = vocab->child; e; e = e->next) {
    size_t l = strlen(e->string);
    if (l > maxlen) maxlen = l;
    if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > 1e8)
      return lt_error_set(LT_EFORMAT, "%s: model.vocab.%.40s: expected a token id", path, e->string);
    if ((int)e->valuedouble > maxid) maxid = (int)e->valuedouble;
  }
  const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
  for (const cJSON *e = cJSON_IsArray(added) ? added->child : NULL; e; e = e->next) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
    if (cJSON_IsNumber(id) && id->valuedouble > maxid && id->valuedouble < 1e8) maxid = (int)id->valuedouble;
  }
  b->ntok = maxid + 1;
  b->tok = calloc((size_t)b->ntok, sizeof *b->tok);
  b->toklen = calloc((size_t)b->ntok, sizeof *b->toklen);
  for (b->vcap = 1; b->vcap < 2 * (size_t)b->ntok + 16; b->vcap *= 2) {
  }
  b->vh = malloc(sizeof *b->vh * b->vcap);
  if (!b->tok || !b->toklen || !b->vh) return lt_error_set(LT_ENOMEM, "%s: out of memory", path);
  memset(b->vh, 0xff, sizeof *b->vh * b->vcap);
  uint32_t map[256];
  int16_t inv[512];
  byte_alphabet(map);
  memset(inv, 0xff, sizeof inv);
  for (int c = 0; c < 256; c++) inv[map[c]] = (int16_t)c;
  char *buf = malloc(4 * maxlen + 16);
  if (!buf) return lt_error_set(LT_ENOMEM, "%s: out of memory", path);
  int rc = 0;
  for (const cJSON *e = vocab->child; e && rc == 0; e = e->next) {
    int id = (int)e->valuedouble;
    size_t n = strlen(e->string), len;
    if (b->tok[id]) {
      rc = lt_error_set(LT_EFORMAT, "%s: token id %d appears twice in model.vocab", path, id);
      break;
    }
    /* Strings outside the byte alphabet stay as UTF-8 text (they are only reachable as whole tokens). */
    const char *src = e->string;
    if (unalphabet(e->string, n, 512, inv, buf, &len))
      src = buf;
    else
      len = n;
    if (!(b->tok[id] = malloc(len + 1))) {
      rc = lt_error_set(LT_ENOMEM, "%s: out of memory", path);
      break;
    }
    memcpy(b->tok[id], src, len);
    b->tok[id][len] = 0;
    b->toklen[id] = (uint32_t)len;
    vocab_insert(b, id);
  }
  if (rc < 0) {
    free(buf);
    return rc;
  }
  for (int c = 0; c < 256; c++) {
    char ch = (char)c;
    b->byte_id[c] = vocab_find(b, &ch, 1);
  }
  size_t nm = (size_t)cJSON_GetArraySize(merges);
  for (b->mcap = 1; b->mcap < 2 * nm + 16; b->mcap *= 2) {
  }
  b->mkey = malloc(sizeof *b->mkey * b->mcap);
  b->mrank = malloc(sizeof *b->mrank * b->mcap);
  b->mres = malloc(sizeof *b->mres * b->mcap);
  char *lb = malloc(2 * maxlen + 16), *rb = malloc(2 * maxlen + 16);
  if (!b->mkey || !b->mrank || !b->mres || !lb || !rb) {
    free(buf), free(lb), free(rb);
    return lt_error_set(LT_ENOMEM, "%s: out of memory", path);
  }
  memset(b->mrank, 0xff, sizeof *b->mrank * b->mcap);
  int rank = 0;
  for (const cJSON *e = merges->child; e && rc == 0; e = e->next, rank++) {
    const char *l, *r;
    size_t ll, rl;
    const char *sp;
    if (cJSON_IsString(e) && (sp = strchr(e->valuestring, ' '))) { /* "left right" */
      l = e->valuestring;
      ll = (size_t)(sp - l);
      r = sp + 1;
      rl = strlen(r);
    } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) && cJSON_IsString(e->child->next)) {
      l = e->child->valuestring; /* ["left", "right"] */
      ll = strlen(l);
      r = e->child->next->valuestring;
      rl = strlen(r);
    } else {
      rc = lt_error_set(LT_EFORMAT, "%s: model.merges[%d]: expected \"left right\" or [left, right]", path, rank);
      break;
    }
    size_t lbl, rbl;
    if (ll > maxlen || rl > maxlen || !unalphabet(l, ll, 512, inv, lb, &lbl) || !unalphabet(r, rl, 512, inv, rb, &rbl)) {
      rc = lt_error_set(LT_EFORMAT, "%s: model.merges[%d]: not in the byte-level alphabet", path, rank);
      break;
    }
    memcpy(buf, lb, lbl);
    memcpy(buf + lbl, rb, rbl);
    int32_t li = vocab_find(b, lb, lbl), ri = vocab_find(b, rb, rbl), res = vocab_find(b, buf, lbl + rbl);
    if (li < 0 || ri < 0 || res < 0) {
      rc = lt_error_set(LT_EFORMAT, "%s: model.merges[%d]: a part or the result is not in model.vocab", path, rank);
      break;
    }
    merge_insert(b, li, ri, rank, res);
  }
  free(buf);
  free(lb);
  free(rb);
  if (rc < 0) return rc;
  for (const cJSON *e = cJSON_IsArray(added) ? added->child : NULL; e; e = e->next) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"), *content = cJSON_GetObjectItemCaseSensitive(e, "content");
    if (!cJSON_IsNumber(id) || !cJSON_IsString(content) || !content->valuestring[0])
      return lt_error_set(LT_EFORMAT, "%s: added_tokens: each needs an id and a non-empty content", path);
    if ((rc = lt__tok_add_special(t, content->valuestring, (int32_t)id->valuedouble)) < 0) return rc;
    int i = (int)id->valuedouble;
    if (!b->tok[i]) {
      size_t n = strlen(content->valuestring);
      if (!(b->tok[i] = malloc(n + 1))) return lt_error_set(LT_ENOMEM, "%s: out of memory", path);
      memcpy(b->tok[i], content->valuestring, n + 1);
      b->toklen[i] = (uint32_t)n;
    }
  }
  return 0;
}

int lt_tokenizer_load(const char *path, lt_tokenizer_t **out) {
  *out = NULL;
  char file[4096];
  int rc;
  if (lt_fs_is_dir(path)) {
    if ((rc = lt_path_join(file, sizeof file, path, "tokenizer.json")) < 0) return rc;
  } else {
    snprintf(file, sizeof file, "%s", path);
  }
  cJSON *root;
  if ((rc = lt_json_parse_file(file, &root)) < 0) return rc;
  lt_tokenizer_t *t = calloc(1, sizeof *t);
  lt_bpe_t *b = calloc(1, sizeof *b);
  if (!t || !b) {
    free(t);
    free(b);
    cJSON_Delete(root);
    return lt_error_set(LT_ENOMEM, "%s: out of memory", file);
  }
  t->kind = LT_TOK_BPE;
  t->bpe = b;
  rc = parse_pipeline(b, root, file);
  if (rc == 0) rc = load_model(t, b, root, file);
  cJSON_Delete(root);
  if (rc < 0) {
    lt_tokenizer_free(t);
    return rc;
  }
  t->vocab = b->ntok;
  *out = t;
  return 0;
}

/* ---- pre-tokenizer ---- */

static int is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }
static int is_other(uint32_t c) { return !lt_uni_is_space(c) && !lt_uni_is_letter(c) && !lt_uni_is_number(c); }
static uint32_t fold(uint32_t c) { return c == 0x17F ? 's' : (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* Length of the contraction at c[i] ('s 't 're 've 'm 'll 'd), 0 if none. */
static size_t contraction(const uint32_t *c, size_t n, size_t i, int ci) {
  if (c[i] != '\'' || i + 1 >= n) return 0;
  uint32_t x = ci ? fold(c[i + 1]) : c[i + 1];
  if (x == 's' || x == 't' || x == 'm' || x == 'd') return 2;
  if (i + 2 >= n) return 0;
  uint32_t y = ci ? fold(c[i + 2]) : c[i + 2];
  if ((x == 'r' && y == 'e') || (x == 'v' && y == 'e') || (x == 'l' && y == 'l')) return 3;
  return 0;
}

/* End of the whitespace alternatives at i (c[i] is whitespace). */
static size_t whitespace(const uint32_t *c, size_t n, size_t i, int newline_rule) {
  size_t m = i;
  while (m < n && lt_uni_is_space(c[m])) m++;
  if (newline_rule) { /* \s*[\r\n]+ : up to the run's last line break */
    for (size_t k = m; k > i; k--)
      if (is_crlf(c[k - 1])) return k;
  }
  if (m == n) return m;       /* \s+(?!\S) at the end of the text */
  if (m - 1 > i) return m - 1; /* leave the last space to the next piece */
  return m;                   /* \s+ */
}

static size_t next_piece(pre_kind kind, const uint32_t *c, size_t n, size_t i) {
  size_t k;
  if (kind == PRE_GPT2) {
    if ((k = contraction(c, n, i, 0))) return i + k;
    size_t j = i + (c[i] == ' ' && i + 1 < n);
    if (lt_uni_is_letter(c[j])) {
      while (j < n && lt_uni_is_letter(c[j])) j++;
      return j;
    }
    if (lt_uni_is_number(c[j])) {
      while (j < n && lt_uni_is_number(c[j])) j++;
      return j;
    }
    if (is_other(c[j])) {
      while (j < n && is_other(c[j])) j++;
      return j;
    }
    return whitespace(c, n, i, 0);
  }
  if ((k = contraction(c, n, i, 1))) return i + k;
  if (lt_uni_is_letter(c[i]) || (!is_crlf(c[i]) && !lt_uni_is_number(c[i]) && i + 1 < n && lt_uni_is_letter(c[i + 1]))) {
    size_t j = i + !lt_uni_is_letter(c[i]);
    while (j < n && lt_uni_is_letter(c[j])) j++;
    return j;
  }
  if (lt_uni_is_number(c[i])) {
    size_t j = i + 1, lim = kind == PRE_LLAMA3 ? 3 : 1;
    while (j < n && j - i < lim && lt_uni_is_number(c[j])) j++;
    return j;
  }
  size_t j = i + (c[i] == ' ' && i + 1 < n && is_other(c[i + 1]));
  if (is_other(c[j])) {
    while (j < n && is_other(c[j])) j++;
    while (j < n && is_crlf(c[j])) j++;
    return j;
  }
  return whitespace(c, n, i, 1);
}

/* ---- BPE ---- */

typedef struct {
  int32_t rank, pos, left, right;
} cand_t;

typedef struct {
  cand_t *h;
  int n, cap;
} heap_t;

static int cand_less(const cand_t *a, const cand_t *b) { return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos); }

static int heap_push(heap_t *q, cand_t c) {
  if (q->n == q->cap) {
    int cap = q->cap ? 2 * q->cap : 64;
    cand_t *p = realloc(q->h, sizeof *p * (size_t)cap);
    if (!p) return -1;
    q->h = p;
    q->cap = cap;
  }
  int i = q->n++;
  q->h[i] = c;
  while (i && cand_less(&q->h[i], &q->h[(i - 1) / 2])) {
    cand_t t = q->h[i];
    q->h[i] = q->h[(i - 1) / 2];
    q->h[(i - 1) / 2] = t;
    i = (i - 1) / 2;
  }
  return 0;
}

static cand_t heap_pop(heap_t *q) {
  cand_t top = q->h[0];
  q->h[0] = q->h[--q->n];
  int i = 0;
  for (;;) {
    int l = 2 * i + 1, r = l + 1, m = i;
    if (l < q->n && cand_less(&q->h[l], &q->h[m])) m = l;
    if (r < q->n && cand_less(&q->h[r], &q->h[m])) m = r;
    if (m == i) break;
    cand_t t = q->h[i];
    q->h[i] = q->h[m];
    q->h[m] = t;
    i = m;
  }
  return top;
}

static int bpe_word(const lt_bpe_t *b, const char *w, size_t n, int32_t **ids, int *nids, int *cap) {
  if (b->ignore_merges) {
    int32_t whole = vocab_find(b, w, n);
    if (whole >= 0) return lt_ids_push(ids, nids, cap, whole);
  }
  int32_t *sym = malloc(sizeof *sym * n), *prev = malloc(sizeof *prev * n), *next = malloc(sizeof *next * n);
  heap_t q = {0};
  int rc = 0;
  if (!sym || !prev || !next) {
    rc = lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
    goto out;
  }
  for (size_t i = 0; i < n; i++) {
    sym[i] = b->byte_id[(unsigned char)w[i]];
    if (sym[i] < 0) {
      rc = lt_error_set(LT_EFORMAT, "tokenizer: byte 0x%02x has no token", (unsigned char)w[i]);
      goto out;
    }
    prev[i] = (int32_t)i - 1;
    next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
  }
  for (size_t i = 0; i + 1 < n; i++) {
    int32_t rank, res;
    if (merge_find(b, sym[i], sym[i + 1], &rank, &res) &&
        heap_push(&q, (cand_t){rank, (int32_t)i, sym[i], sym[i + 1]}) < 0) {
      rc = lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
      goto out;
    }
  }
  while (q.n) {
    cand_t c = heap_pop(&q);
    int32_t r = next[c.pos];
    /* Stale candidates: a neighbour merged since this one was queued. */
    if (sym[c.pos] != c.left || r < 0 || sym[r] != c.right) continue;
    int32_t rank, res;
    merge_find(b, c.left, c.right, &rank, &res);
    sym[c.pos] = res;
    sym[r] = -1;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    int32_t p = prev[c.pos], nx = next[c.pos];
    if (p >= 0 && merge_find(b, sym[p], sym[c.pos], &rank, &res) &&
        heap_push(&q, (cand_t){rank, p, sym[p], sym[c.pos]}) < 0) {
      rc = lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
      goto out;
    }
    if (nx >= 0 && merge_find(b, sym[c.pos], sym[nx], &rank, &res) &&
        heap_push(&q, (cand_t){rank, c.pos, sym[c.pos], sym[nx]}) < 0) {
      rc = lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
      goto out;
    }
  }
  for (int32_t i = 0; i >= 0 && rc == 0; i = next[i]) rc = lt_ids_push(ids, nids, cap, sym[i]);
out:
  free(sym);
  free(prev);
  free(next);
  free(q.h);
  return rc;
}

/* Encodes a stretch of text that contains no added token. */
static int encode_plain(const lt_tokenizer_t *t, const char *s, size_t n, int32_t **ids, int *nids, int *cap) {
  const lt_bpe_t *b = t->bpe;
  char *norm = NULL;
  size_t len = n;
  int rc = 0;
  if (b->nfc) {
    if ((rc = lt_uni_nfc(s, n, &norm, &len)) < 0) return rc;
    s = norm;
  }
  char *pre = NULL;
  if (b->add_prefix_space && len && s[0] != ' ') {
    if (!(pre = malloc(len + 2))) {
      free(norm);
      return lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
    }
    pre[0] = ' ';
    memcpy(pre + 1, s, len);
    s = pre;
    len++;
  }
  /* Code points with their byte offsets. */
  uint32_t *cp = malloc(sizeof *cp * (len + 1));
  size_t *off = malloc(sizeof *off * (len + 1));
  size_t nc = 0;
  if (!cp || !off) rc = lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
  for (size_t i = 0; i < len && rc == 0;) {
    int l = lt_utf8_decode(s + i, len - i, &cp[nc]);
    if (!l) {
      rc = lt_error_set(LT_EINVAL, "tokenizer: invalid UTF-8 at byte %zu", i);
      break;
    }
    off[nc++] = i;
    i += (size_t)l;
  }
  if (rc == 0) off[nc] = len;
  for (size_t i = 0; i < nc && rc == 0;) {
    size_t j = next_piece(b->pre, cp, nc, i);
    if (j <= i) j = i + 1;
    rc = bpe_word(b, s + off[i], off[j] - off[i], ids, nids, cap);
    i = j;
  }
  free(cp);
  free(off);
  free(pre);
  free(norm);
  return rc;
}

int lt__bpe_encode(const lt_tokenizer_t *t, const char *text, size_t len, int32_t **ids, int *n) {
  int cap = 0, rc = 0;
  size_t start = 0, i = 0;
  while (i < len && rc == 0) {
    /* Added tokens are matched first, longest at each position. */
    int best = -1;
    size_t bl = 0;
    for (int k = 0; k < t->nspecial && t->special_first[(unsigned char)text[i]]; k++) {
      const lt_special_t *sp = &t->special[k];
      if (sp->len > bl && sp->len <= len - i && memcmp(text + i, sp->text, sp->len) == 0) {
        best = k;
        bl = sp->len;
      }
    }
    if (best < 0) {
      i++;
      continue;
    }
    if (i > start) rc = encode_plain(t, text + start, i - start, ids, n, &cap);
    if (rc == 0) rc = lt_ids_push(ids, n, &cap, t->special[best].id);
    i += bl;
    start = i;
  }
  if (rc == 0 && start < len) rc = encode_plain(t, text + start, len - start, ids, n, &cap);
  if (rc == 0 && !*ids && !(*ids = malloc(sizeof(int32_t)))) rc = lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
  if (rc < 0) {
    free(*ids);
    *ids = NULL;
    *n = 0;
  }
  return rc;
}

int lt__bpe_decode(const lt_tokenizer_t *t, const int32_t *ids, int n, int skip_special, char **text, size_t *len) {
  const lt_bpe_t *b = t->bpe;
  size_t total = 1;
  for (int i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= b->ntok || !b->tok[ids[i]])
      return lt_error_set(LT_ERANGE, "token id %d at index %d is not in the vocabulary", ids[i], i);
    total += b->toklen[ids[i]];
  }
  char *s = malloc(total);
  if (!s) return lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
  size_t k = 0;
  for (int i = 0; i < n; i++) {
    if (skip_special && lt__tok_special_text(t, ids[i])) continue;
    memcpy(s + k, b->tok[ids[i]], b->toklen[ids[i]]);
    k += b->toklen[ids[i]];
  }
  s[k] = 0;
  *text = s;
  *len = k;
  return 0;
}

/* The byte tokenizer as Hugging Face files: a byte-level BPE without merges
 * (each byte its own token, id = byte value), the three specials and reserved
 * tokens up to vocab_size, and a ChatML chat template, the format longtail
 * renders the byte tokenizer's chats in. */
int lt_tokenizer_byte_write(int vocab_size, const char *dir) {
  static const char *const specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  if (vocab_size < 259) return lt_error_set(LT_EINVAL, "byte tokenizer: vocab_size %d < 259 (256 bytes + 3 specials)", vocab_size);
  uint32_t map[256];
  byte_alphabet(map);
  lt_buf_t b = {0}, c = {0};
  lt_buf_puts(&b, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [");
  for (int id = 256; id < vocab_size; id++) {
    char name[32];
    if (id < 259) snprintf(name, sizeof name, "%s", specials[id - 256]);
    else snprintf(name, sizeof name, "<|reserved_%d|>", id - 259);
    lt_buf_printf(&b, "%s\n  {\"id\": %d, \"content\": \"%s\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                  "\"normalized\": false, \"special\": true}", id > 256 ? "," : "", id, name);
  }
  lt_buf_puts(&b, "],\n \"normalizer\": null,\n \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                  "\"trim_offsets\": true, \"use_regex\": true},\n \"post_processor\": null,\n \"decoder\": {\"type\": "
                  "\"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n \"model\": "
                  "{\"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null, "
                  "\"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false, "
                  "\"vocab\": {");
  for (int i = 0; i < 256; i++) {
    char ch[8];
    ch[lt_utf8_encode(map[i], ch)] = 0;
    lt_buf_puts(&b, i ? ", " : "");
    lt_json_quote(&b, ch);
    lt_buf_printf(&b, ": %d", i);
  }
  lt_buf_puts(&b, "}, \"merges\": []}}\n");
  lt_buf_puts(&c, "{\"bos_token\": null, \"eos_token\": \"<|im_end|>\", \"pad_token\": \"<|endoftext|>\", \"unk_token\": null, "
                  "\"clean_up_tokenization_spaces\": false, \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n \"chat_template\": ");
  lt_json_quote(&c, LT_CHATML_TEMPLATE);
  lt_buf_puts(&c, "}\n");
  char path[4096];
  int rc = lt_buf_ok(&b) < 0 || lt_buf_ok(&c) < 0 ? lt_error_set(LT_ENOMEM, "out of memory") : 0;
  if (rc == 0 && (rc = lt_path_join(path, sizeof path, dir, "tokenizer.json")) == 0) rc = lt_fs_write_atomic(path, b.data, b.len);
  if (rc == 0 && (rc = lt_path_join(path, sizeof path, dir, "tokenizer_config.json")) == 0)
    rc = lt_fs_write_atomic(path, c.data, c.len);
  lt_buf_free(&b);
  lt_buf_free(&c);
  return rc;
}
