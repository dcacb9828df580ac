/* Tokenizers: fixtures whose expected ids come from Hugging Face's
 * tokenizers.js (tests/ref/), round trips, the byte tokenizer, errors. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "tests/support/harness.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/json.h"

static void check_fixture(const char *name, int nfc) {
  char tp[4096], cp[4096], ep[4096];
  snprintf(tp, sizeof tp, "%s/tests/ref/tokenizer/%s.json", lt_test_root(), name);
  snprintf(cp, sizeof cp, "%s/tests/ref/tokenizer/cases.jsonl", lt_test_root());
  snprintf(ep, sizeof ep, "%s/tests/ref/tokenizer/%s.expected.jsonl", lt_test_root(), name);
  lt_tokenizer_t *t;
  cr_assert_eq(lt_tokenizer_load(tp, &t), 0, "%s", lt_error_msg());
  lt_jsonl_t cases, exp;
  cr_assert_eq(lt_jsonl_open(&cases, cp), 0);
  cr_assert_eq(lt_jsonl_open(&exp, ep), 0);
  cJSON *c, *e;
  int n = 0;
  while (lt_jsonl_next(&cases, &c) == 1) {
    cr_assert_eq(lt_jsonl_next(&exp, &e), 1);
    const char *text;
    cr_assert_eq(lt_json_get_str(c, "text", &text), 0);
    int32_t *want, *got;
    int nw, ng;
    cr_assert_eq(lt_json_get_i32_array(e, "ids", &want, &nw), 0);
    cr_assert_eq(lt_tokenizer_encode(t, text, strlen(text), &got, &ng), 0);
    cr_expect(ng == nw && memcmp(got, want, sizeof(int32_t) * (size_t)ng) == 0, "%s: case %d differs: %s", name, n,
              text);
    /* Decoding gives back the (normalised) text. */
    char *dec, *norm;
    size_t dl, nl;
    cr_assert_eq(lt_tokenizer_decode(t, got, ng, 0, &dec, &dl), 0);
    if (nfc) {
      cr_assert_eq(lt_uni_nfc(text, strlen(text), &norm, &nl), 0);
    } else {
      norm = strdup(text);
      nl = strlen(text);
    }
    cr_expect(dl == nl && memcmp(dec, norm, nl) == 0, "%s: case %d does not round-trip", name, n);
    free(dec), free(norm), free(want), free(got);
    cJSON_Delete(c);
    cJSON_Delete(e);
    n++;
  }
  cr_expect_gt(n, 100);
  lt_jsonl_close(&cases);
  lt_jsonl_close(&exp);
  lt_tokenizer_free(t);
}

Test(tokenizer, qwen2_pipeline_matches_reference) { check_fixture("qwen2-small", 1); }
Test(tokenizer, gpt2_pipeline_matches_reference) { check_fixture("gpt2-small", 0); }

Test(tokenizer, byte_tokenizer_and_chat_format) {
  lt_tokenizer_t *t;
  cr_assert_eq(lt_tokenizer_byte(264, &t), 0);
  const char *s = "héllo <|im_end|>";
  int32_t *ids;
  int n;
  cr_assert_eq(lt_tokenizer_encode(t, s, strlen(s), &ids, &n), 0);
  cr_expect_eq(n, (int)strlen(s), "special-token text stays bytes");
  char *d;
  size_t dl;
  cr_assert_eq(lt_tokenizer_decode(t, ids, n, 0, &d, &dl), 0);
  cr_expect_str_eq(d, s);
  free(d);
  free(ids);
  int32_t *c = NULL;
  int nc = 0, cap = 0;
  cr_assert_eq(lt_chat_open(t, LT_ROLE_USER, &c, &nc, &cap), 0);
  cr_assert_eq(lt_chat_close(t, &c, &nc, &cap), 0);
  cr_assert_eq(lt_tokenizer_decode(t, c, nc, 0, &d, &dl), 0);
  cr_expect_str_eq(d, "<|im_start|>user\n<|im_end|>\n");
  cr_expect(lt_tokenizer_is_stop(t, lt_tokenizer_special(t, "<|im_end|>")));
  cr_expect(!lt_tokenizer_is_stop(t, 'a'));
  free(d);
  free(c);
  int32_t bad = 300;
  cr_expect_eq(lt_tokenizer_decode(t, &bad, 1, 0, &d, &dl), LT_ERANGE);
  lt_tokenizer_free(t);
}

Test(tokenizer, nfc) {
  struct {
    const char *in, *out;
  } cases[] = {
      {"e\xcc\x81", "\xc3\xa9"},                                /* e + acute → é */
      {"\xe2\x84\xab", "\xc3\x85"},                             /* Angstrom sign → Å (singleton) */
      {"\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81"}, /* Hangul jamo → syllable */
      {"a\xcc\xa3\xcc\x87", "\xe1\xba\xa1\xcc\x87"},            /* reordering: dot below before dot above */
      {"plain ascii", "plain ascii"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *o;
    size_t l;
    cr_assert_eq(lt_uni_nfc(cases[i].in, strlen(cases[i].in), &o, &l), 0);
    cr_expect_str_eq(o, cases[i].out, "case %zu", i);
    free(o);
  }
  char *o;
  size_t l;
  cr_expect_eq(lt_uni_nfc("\xff\xfe", 2, &o, &l), LT_EINVAL);
}

Test(tokenizer, refuses_what_it_cannot_honour) {
  char *dir = lt_test_tmpdir("tok");
  char p[4096];
  snprintf(p, sizeof p, "%s/tokenizer.json", dir);
  lt_test_write(p,
                "{\"normalizer\": {\"type\": \"NFKC\"}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {}}");
  lt_tokenizer_t *t;
  cr_expect_eq(lt_tokenizer_load(dir, &t), LT_EUNSUPP);
  cr_expect(strstr(lt_error_msg(), "normalizer"), "%s", lt_error_msg());
  lt_test_write(p, "{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {}}");
  cr_expect_eq(lt_tokenizer_load(p, &t), LT_EUNSUPP);
  lt_test_write(p, "{\"pre_tokenizer\": ");
  cr_expect_eq(lt_tokenizer_load(p, &t), LT_EFORMAT);
  cr_expect_eq(lt_tokenizer_load("/nonexistent/tokenizer.json", &t), LT_ENOENT);
  lt_test_rmdir(dir);
}

/* The byte tokenizer written as Hugging Face files encodes and decodes as the
 * byte tokenizer does (text without special-token strings) and carries a
 * ChatML chat template. */
Test(tokenizer, byte_tokenizer_as_hugging_face_files_matches_the_byte_tokenizer) {
  char *dir = lt_test_tmpdir("bytetok");
  cr_assert_eq(lt_tokenizer_byte_write(264, dir), 0, "%s", lt_error_msg());
  lt_tokenizer_t *hf, *byte;
  cr_assert_eq(lt_tokenizer_load(dir, &hf), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_tokenizer_byte(264, &byte), 0);
  static const char *const sp[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int i = 0; i < 3; i++)
    cr_expect_eq(lt_tokenizer_special(hf, sp[i]), lt_tokenizer_special(byte, sp[i]), "%s", sp[i]);
  char cp[4096];
  snprintf(cp, sizeof cp, "%s/tests/ref/tokenizer/cases.jsonl", lt_test_root());
  lt_jsonl_t cases;
  cr_assert_eq(lt_jsonl_open(&cases, cp), 0);
  cJSON *c;
  int n = 0;
  while (lt_jsonl_next(&cases, &c) == 1) {
    const char *text;
    cr_assert_eq(lt_json_get_str(c, "text", &text), 0);
    if (!strstr(text, "<|")) {
      int32_t *a, *b;
      int na, nb;
      cr_assert_eq(lt_tokenizer_encode(hf, text, strlen(text), &a, &na), 0);
      cr_assert_eq(lt_tokenizer_encode(byte, text, strlen(text), &b, &nb), 0);
      cr_expect(na == nb && !memcmp(a, b, sizeof *a * (size_t)na), "case %d differs: %s", n, text);
      char *da;
      size_t la;
      cr_assert_eq(lt_tokenizer_decode(hf, a, na, 0, &da, &la), 0);
      cr_expect(la == strlen(text) && !memcmp(da, text, la), "case %d does not decode back", n);
      free(a), free(b), free(da);
      n++;
    }
    cJSON_Delete(c);
  }
  lt_jsonl_close(&cases);
  cr_expect_gt(n, 40);
  char p[4200];
  snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
  cJSON *cfg;
  cr_assert_eq(lt_json_parse_file(p, &cfg), 0, "%s", lt_error_msg());
  const cJSON *tpl = cJSON_GetObjectItem(cfg, "chat_template");
  cr_expect(cJSON_IsString(tpl) && strstr(tpl->valuestring, "<|im_start|>") &&
            strstr(tpl->valuestring, "add_generation_prompt"));
  cr_expect_str_eq(cJSON_GetObjectItem(cfg, "eos_token")->valuestring, "<|im_end|>");
  cJSON_Delete(cfg);
  cr_expect_lt(lt_tokenizer_byte_write(200, dir), 0);
  lt_tokenizer_free(hf);
  lt_tokenizer_free(byte);
  lt_test_rmdir(dir);
}

/* Encodes text with a tokenizer whose pre-tokenizer is `split` (a Split
 * object's JSON) then ByteLevel, and whose vocabulary is the letters, '-', '1'
 * to '4' and ' ' plus the words of `pieces` (ignore_merges: a piece in the
 * vocabulary is one id), and returns the pieces the ids spell, '|'-joined. */
static char *pieces_of(const char *split, const char *words, const char *text) {
  char *dir = lt_test_tmpdir("split");
  char p[4096], *json = NULL;
  snprintf(p, sizeof p, "%s/tokenizer.json", dir);
  lt_buf_t v = {0};
  int id = 0;
  for (const char *c = "abcdefghijklmnopqrstuvwxyz-1234"; *c; c++)
    lt_buf_printf(&v, "%s\"%c\": %d", id ? ", " : "", *c, id), id++;
  lt_buf_printf(&v, ", \"\\u0120\": %d", id++); /* ' ' in the byte-level alphabet */
  char w[64];
  for (const char *s = words; sscanf(s, "%63s", w) == 1; s = strstr(s, w) + strlen(w))
    lt_buf_printf(&v, ", \"%s\": %d", w, id++);
  cr_assert_eq(lt_buf_ok(&v), 0);
  cr_assert(
      asprintf(
          &json,
          "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": []}, \"pre_tokenizer\": {\"type\": \"Sequence\", "
          "\"pretokenizers\": [%s, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": false}]}, "
          "\"model\": {\"type\": \"BPE\", \"ignore_merges\": true, \"vocab\": {%s}, \"merges\": []}}",
          split, v.data) > 0);
  lt_test_write(p, json);
  lt_tokenizer_t *t;
  cr_assert_eq(lt_tokenizer_load(p, &t), 0, "%s", lt_error_msg());
  int32_t *ids;
  int n;
  cr_assert_eq(lt_tokenizer_encode(t, text, strlen(text), &ids, &n), 0, "%s", lt_error_msg());
  lt_buf_t out = {0};
  for (int i = 0; i < n; i++) {
    char *d;
    size_t dl;
    cr_assert_eq(lt_tokenizer_decode(t, &ids[i], 1, 0, &d, &dl), 0);
    lt_buf_printf(&out, "%s%s", i ? "|" : "", d);
    free(d);
  }
  lt_buf_append(&out, "", 1);
  free(ids), free(json);
  lt_buf_free(&v);
  lt_tokenizer_free(t);
  lt_test_rmdir(dir);
  return lt_buf_take(&out);
}

/* Any Split loads (PCRE2): its behaviours as Hugging Face documents them for
 * "-" on "the-final--countdown", invert, and a regex of none of the known
 * families.  A piece missing from the vocabulary would come out as letters. */
Test(tokenizer, split_pre_tokenizers_of_every_behaviour) {
  static const struct {
    const char *behavior, *words, *want;
  } cases[] = {
      {"Removed", "the final countdown", "the|final|countdown"},
      {"Isolated", "the final countdown", "the|-|final|-|-|countdown"},
      {"MergedWithPrevious", "the- final- countdown", "the-|final-|-|countdown"},
      {"MergedWithNext", "the -final -countdown", "the|-final|-|-countdown"},
      {"Contiguous", "the final -- countdown", "the|-|final|--|countdown"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char split[256];
    snprintf(split, sizeof split,
             "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"%s\", \"invert\": false}",
             cases[i].behavior);
    char *got = pieces_of(split, cases[i].words, "the-final--countdown");
    cr_expect_str_eq(got, cases[i].want, "%s", cases[i].behavior);
    free(got);
  }
  /* invert: the matches are the pieces kept */
  char *got = pieces_of(
      "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"[a-z]+\"}, \"behavior\": \"Removed\", \"invert\": true}",
      "the final countdown", "the-final--countdown");
  cr_expect_str_eq(got, "the|final|countdown");
  free(got);
  /* a pattern of no known family: digits in pairs, lookahead, \s */
  got = pieces_of(
      "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\d{1,2}|[a-z]+(?=\\\\s)|\\\\s\"}, \"behavior\": \"Isolated\"}",
      "12 34 ab", "1234ab cd");
  cr_expect_str_eq(got, "12|34|ab| |c|d");
  free(got);
}
