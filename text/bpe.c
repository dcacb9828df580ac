/* Hugging Face tokenizer.json byte-level BPE (GPT-2, Llama-3, Qwen2/3):
 * added tokens first, then NFC (when configured), the pre-tokenizer split,
 * the byte-level alphabet and BPE merges by rank.  docs/tokenizer.md lists
 * what is supported. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
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

/* ByteLevel's own split (use_regex), the GPT-2 pattern. */
static const char *PAT_GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* What a Split does with its matches (Hugging Face's SplitDelimiterBehavior). */
typedef enum { SPLIT_ISOLATED, SPLIT_REMOVED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } split_behavior;

#define MAX_STAGES 8

/* One splitting stage of the pre-tokenizer: each piece of the previous stage
 * is cut at the matches of `re` (PCRE2, UTF + Unicode properties, JIT). */
typedef struct {
  pcre2_code *re;
  split_behavior behavior;
  int invert;
  int jit; /* compiled: pcre2_jit_match, which skips pcre2_match's checks */
} stage_t;

typedef struct lt_bpe {
  char **tok; /* id → raw bytes */
  uint32_t *toklen;
  int ntok;
  int32_t *vh; /* open-addressing table of ids keyed by their bytes */
  size_t vcap;
  uint64_t *mkey; /* merges: (left << 32 | right) → rank, result */
  int32_t *mrank, *mres;
  size_t mcap;
  int32_t byte_id[256];
  stage_t stage[MAX_STAGES];
  int nstages;
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
  for (int i = 0; i < b->nstages; i++) pcre2_code_free(b->stage[i].re);
  free(b);
  t->bpe = NULL;
}

static int unsupported(const char *path, const char *what) {
  return lt_error_set(LT_EUNSUPP, "%s: %s is not supported (docs/tokenizer.md)", path, what);
}

/* The White_Space property, what \s means to Hugging Face's regex engines;
 * PCRE2's own \s also takes U+180E. */
#define WHITE_SPACE \
  "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* pat with \s and \S spelled as White_Space classes (inside a class, \s
 * as its members); NULL when out of memory. */
static char *spell_spaces(const char *pat) {
  lt_buf_t o = {0};
  int in_class = 0;
  for (const char *p = pat; *p; p++) {
    if (p[0] == '\\' && p[1]) {
      if (p[1] == 's') lt_buf_puts(&o, in_class ? WHITE_SPACE : "[" WHITE_SPACE "]");
      else if (p[1] == 'S' && !in_class) lt_buf_puts(&o, "[^" WHITE_SPACE "]");
      else lt_buf_append(&o, p, 2);
      p++;
      continue;
    }
    if (!in_class && p[0] == '[') {
      in_class = 1;
      lt_buf_append(&o, p, 1);
      if (p[1] == '^') lt_buf_append(&o, ++p, 1);
      if (p[1] == ']') lt_buf_append(&o, ++p, 1); /* a leading ] is a member */
      continue;
    }
    if (in_class && p[0] == ']') in_class = 0;
    lt_buf_append(&o, p, 1);
  }
  lt_buf_append(&o, "", 1);
  if (lt_buf_ok(&o) < 0) {
    lt_buf_free(&o);
    return NULL;
  }
  return lt_buf_take(&o);
}

/* A stage matching `pat` (a regex, or a literal string). */
static int add_stage(lt_bpe_t *b, const char *path, const char *pat, int literal, split_behavior behavior, int invert) {
  if (b->nstages == MAX_STAGES) return unsupported(path, "a pre_tokenizer of more than 8 splits");
  char *spelled = literal ? strdup(pat) : spell_spaces(pat);
  if (!spelled) return lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
  int err;
  PCRE2_SIZE at;
  pcre2_code *re = pcre2_compile((PCRE2_SPTR)spelled, PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &err, &at, NULL);
  free(spelled);
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    return lt_error_set(LT_EUNSUPP, "%s: pre-tokenizer pattern %.80s: %s at offset %zu", path, pat, (const char *)msg,
                        (size_t)at);
  }
  /* Without JIT (no executable memory) pcre2_match interprets: slower, same pieces. */
  int jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
  b->stage[b->nstages++] = (stage_t){re, behavior, invert, jit};
  return 0;
}

static int add_split(lt_bpe_t *b, const cJSON *split, const char *path) {
  static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
  const cJSON *pat = cJSON_GetObjectItemCaseSensitive(split, "pattern");
  const cJSON *rx = cJSON_GetObjectItemCaseSensitive(pat, "Regex"),
              *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
  const cJSON *beh = cJSON_GetObjectItemCaseSensitive(split, "behavior");
  int k = 0;
  while (cJSON_IsString(beh) && k < 5 && strcmp(beh->valuestring, names[k])) k++;
  if ((!cJSON_IsString(rx) && !cJSON_IsString(str)) || !cJSON_IsString(beh) || k == 5)
    return unsupported(path, "this Split pre-tokenizer");
  return add_stage(b, path, cJSON_IsString(rx) ? rx->valuestring : str->valuestring, !cJSON_IsString(rx),
                   (split_behavior)k, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(split, "invert")));
}

/* ByteLevel: its regex split (use_regex, the default) and its byte alphabet; last. */
static int add_byte_level(lt_bpe_t *b, const cJSON *bl, const char *path) {
  b->add_prefix_space = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(bl, "add_prefix_space"));
  return cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(bl, "use_regex"))
             ? 0
             : add_stage(b, path, PAT_GPT2, 0, SPLIT_ISOLATED, 0);
}

/* The normalizer (none or NFC) and the pre-tokenizer: Split stages, then ByteLevel. */
static int parse_pipeline(lt_bpe_t *b, const cJSON *root, const char *path) {
  const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
  const cJSON *nty = cJSON_GetObjectItemCaseSensitive(norm, "type");
  const cJSON *nlist = cJSON_IsString(nty) && strcmp(nty->valuestring, "Sequence") == 0
                           ? cJSON_GetObjectItemCaseSensitive(norm, "normalizers")
                           : NULL; /* a Sequence of NFCs (or of nothing: DeepSeek-V3's) */
  if (nlist && !cJSON_IsArray(nlist)) return unsupported(path, "this normalizer sequence");
  for (const cJSON *n = nlist                         ? nlist->child
                        : norm && !cJSON_IsNull(norm) ? norm
                                                      : NULL;
       n; n = nlist ? n->next : NULL) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(n, "type");
    if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "NFC") != 0)
      return unsupported(path, "normalizer other than NFC");
    b->nfc = 1;
  }
  const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
  const cJSON *ty = cJSON_GetObjectItemCaseSensitive(pre, "type");
  if (!cJSON_IsString(ty)) return unsupported(path, "a tokenizer without pre_tokenizer");
  if (strcmp(ty->valuestring, "ByteLevel") == 0) return add_byte_level(b, pre, path);
  if (strcmp(ty->valuestring, "Sequence") != 0) return unsupported(path, "this pre_tokenizer type");
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
  int rc = 0, byte_level = 0;
  for (const cJSON *p = cJSON_IsArray(list) ? list->child : NULL; p && rc == 0; p = p->next) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(p, "type");
    if (byte_level || !cJSON_IsString(st))
      return unsupported(path, "a pre_tokenizer sequence other than Splits then ByteLevel");
    if (strcmp(st->valuestring, "Split") == 0) {
      rc = add_split(b, p, path);
    } else if (strcmp(st->valuestring, "ByteLevel") == 0) {
      byte_level = 1;
      rc = add_byte_level(b, p, path);
    } else {
      return unsupported(path, "a pre_tokenizer sequence other than Splits then ByteLevel");
    }
  }
  return rc == 0 && !byte_level ? unsupported(path, "a pre_tokenizer sequence without ByteLevel") : rc;
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
  if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
    return lt_error_set(LT_EFORMAT, "%s: model.vocab / model.merges missing", path);
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
  for (b->vcap = 1; b->vcap < 2 * (size_t)b->ntok + 16; b->vcap *= 2) {}
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
    if (unalphabet(e->string, n, 512, inv, buf, &len)) src = buf;
    else len = n;
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
  for (b->mcap = 1; b->mcap < 2 * nm + 16; b->mcap *= 2) {}
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
    } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
               cJSON_IsString(e->child->next)) {
      l = e->child->valuestring; /* ["left", "right"] */
      ll = strlen(l);
      r = e->child->next->valuestring;
      rl = strlen(r);
    } else {
      rc = lt_error_set(LT_EFORMAT, "%s: model.merges[%d]: expected \"left right\" or [left, right]", path, rank);
      break;
    }
    size_t lbl, rbl;
    if (ll > maxlen || rl > maxlen || !unalphabet(l, ll, 512, inv, lb, &lbl) ||
        !unalphabet(r, rl, 512, inv, rb, &rbl)) {
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
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id"),
                *content = cJSON_GetObjectItemCaseSensitive(e, "content");
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

/* Pieces of one stage, streamed: the text is cut into segments (matches and
 * the gaps between them), which the behaviour keeps, drops or joins as
 * Hugging Face's Split does; each piece goes to the next stage, and after the
 * last one to the BPE. */
typedef struct {
  const lt_bpe_t *b;
  const char *s;
  pcre2_match_data *md[MAX_STAGES];
  int32_t **ids;
  int *nids, *cap;
} pre_t;

static int bpe_word(const lt_bpe_t *b, const char *w, size_t n, int32_t **ids, int *nids, int *cap);
static int split(pre_t *p, int k, size_t start, size_t end);

typedef struct {
  size_t start, end; /* the pending piece; start == end: none */
  int last_match;    /* its last segment was a match */
} pending_t;

static int flush(pre_t *p, int k, pending_t *q) {
  int rc = q->end > q->start ? split(p, k + 1, q->start, q->end) : 0;
  q->start = q->end;
  return rc;
}

static int segment(pre_t *p, int k, pending_t *q, size_t start, size_t end, int match) {
  const stage_t *st = &p->b->stage[k];
  if (st->invert) match = !match;
  int join;
  switch (st->behavior) {
  case SPLIT_REMOVED:
    if (match) return 0;
    join = 0;
    break;
  case SPLIT_MERGED_PREV: join = match && !q->last_match; break; /* a match ends the piece before it */
  case SPLIT_MERGED_NEXT:
    join = !match && q->last_match && q->end > q->start;
    break; /* a match starts the piece after it */
  case SPLIT_CONTIGUOUS: join = match == q->last_match; break;
  default: join = 0;
  }
  int rc = 0;
  if (!join || q->end == q->start) {
    rc = flush(p, k, q);
    q->start = start;
  }
  q->end = end;
  q->last_match = st->behavior == SPLIT_MERGED_NEXT && join ? 0 : match;
  return rc;
}

/* Cuts s[start, end) at stage k's matches (past the last stage: one word). */
static int split(pre_t *p, int k, size_t start, size_t end) {
  if (k == p->b->nstages) return bpe_word(p->b, p->s + start, end - start, p->ids, p->nids, p->cap);
  pending_t q = {start, start, 0};
  size_t at = start, gap = start;
  int rc = 0;
  while (at < end && rc == 0) {
    /* the piece alone is the subject: lookarounds and anchors see its ends, as in Hugging Face's */
    const stage_t *st = &p->b->stage[k];
    int m = (st->jit ? pcre2_jit_match : pcre2_match)(st->re, (PCRE2_SPTR)(p->s + start), end - start, at - start,
                                                      PCRE2_NO_UTF_CHECK, p->md[k], NULL);
    if (m == PCRE2_ERROR_NOMATCH) break;
    if (m < 0) return lt_error_set(LT_EINVAL, "tokenizer: pre-tokenizer regex failed (PCRE2 error %d)", m);
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md[k]);
    size_t ms = start + ov[0], me = start + ov[1];
    if (me == ms) { /* an empty match cuts nothing: look again one character on */
      at = ms + 1;
      while (at < end && ((unsigned char)p->s[at] & 0xC0) == 0x80) at++;
      continue;
    }
    if (ms > gap) rc = segment(p, k, &q, gap, ms, 0);
    if (rc == 0) rc = segment(p, k, &q, ms, me, 1);
    at = gap = me;
  }
  if (rc == 0 && gap < end) rc = segment(p, k, &q, gap, end, 0);
  return rc == 0 ? flush(p, k, &q) : rc;
}

/* ---- BPE ---- */

typedef struct {
  int32_t rank, pos, left, right;
} cand_t;

typedef struct {
  cand_t *h;
  int n, cap;
} heap_t;

static int cand_less(const cand_t *a, const cand_t *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

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

/* Words up to this many bytes (nearly all) merge in stack arrays: a word
 * queues at most 3 candidates per byte, so its heap never grows. */
#define SMALL_WORD 32

static int bpe_word(const lt_bpe_t *b, const char *w, size_t n, int32_t **ids, int *nids, int *cap) {
  if (b->ignore_merges) {
    int32_t whole = vocab_find(b, w, n);
    if (whole >= 0) return lt_ids_push(ids, nids, cap, whole);
  }
  int32_t small[3][SMALL_WORD];
  cand_t small_heap[3 * SMALL_WORD];
  int big = n > SMALL_WORD;
  int32_t *sym = big ? malloc(sizeof *sym * n) : small[0], *prev = big ? malloc(sizeof *prev * n) : small[1],
          *next = big ? malloc(sizeof *next * n) : small[2];
  heap_t q = {big ? NULL : small_heap, 0, big ? 0 : 3 * SMALL_WORD};
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
  if (big) {
    free(sym);
    free(prev);
    free(next);
    free(q.h);
  }
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
  for (size_t i = 0; i < len && rc == 0;) { /* the regexes then skip PCRE2's own check */
    uint32_t cp;
    int l = lt_utf8_decode(s + i, len - i, &cp);
    if (!l) rc = lt_error_set(LT_EINVAL, "tokenizer: invalid UTF-8 at byte %zu", i);
    i += (size_t)l;
  }
  pre_t p = {.b = b, .s = s, .ids = ids, .nids = nids, .cap = cap};
  for (int k = 0; k < b->nstages && rc == 0; k++)
    if (!(p.md[k] = pcre2_match_data_create_from_pattern(b->stage[k].re, NULL)))
      rc = lt_error_set(LT_ENOMEM, "tokenizer: out of memory");
  if (rc == 0 && len) rc = split(&p, 0, 0, len);
  for (int k = 0; k < b->nstages; k++) pcre2_match_data_free(p.md[k]);
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
  if (vocab_size < 259)
    return lt_error_set(LT_EINVAL, "byte tokenizer: vocab_size %d < 259 (256 bytes + 3 specials)", vocab_size);
  uint32_t map[256];
  byte_alphabet(map);
  lt_buf_t b = {0}, c = {0};
  lt_buf_puts(&b, "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [");
  for (int id = 256; id < vocab_size; id++) {
    char name[32];
    if (id < 259) snprintf(name, sizeof name, "%s", specials[id - 256]);
    else snprintf(name, sizeof name, "<|reserved_%d|>", id - 259);
    lt_buf_printf(
        &b,
        "%s\n  {\"id\": %d, \"content\": \"%s\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
        "\"normalized\": false, \"special\": true}",
        id > 256 ? "," : "", id, name);
  }
  lt_buf_puts(&b,
              "],\n \"normalizer\": null,\n \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
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
  lt_buf_puts(
      &c,
      "{\"bos_token\": null, \"eos_token\": \"<|im_end|>\", \"pad_token\": \"<|endoftext|>\", \"unk_token\": null, "
      "\"clean_up_tokenization_spaces\": false, \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n \"chat_template\": ");
  lt_json_quote(&c, LT_CHATML_TEMPLATE);
  lt_buf_puts(&c, "}\n");
  char path[4096];
  int rc = lt_buf_ok(&b) < 0 || lt_buf_ok(&c) < 0 ? lt_error_set(LT_ENOMEM, "out of memory") : 0;
  if (rc == 0 && (rc = lt_path_join(path, sizeof path, dir, "tokenizer.json")) == 0)
    rc = lt_fs_write_atomic(path, b.data, b.len);
  if (rc == 0 && (rc = lt_path_join(path, sizeof path, dir, "tokenizer_config.json")) == 0)
    rc = lt_fs_write_atomic(path, c.data, c.len);
  lt_buf_free(&b);
  lt_buf_free(&c);
  return rc;
}
