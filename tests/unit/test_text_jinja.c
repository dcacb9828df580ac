/* The Jinja engine and chat templates: every construct of
 * tests/ref/template/constructs.jsonl against what @huggingface/jinja 0.5.11
 * rendered for it (recorded in the file), limits on hostile templates, syntax
 * errors, tokenizer_config.json forms, and `longtail template`. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/chat_template.h"
#include "text/internal.h"
#include "text/jinja.h"
#include "text/tokenizer.h"
#include "tests/support/harness.h"
#include "util/error.h"
#include "util/json.h"

/* Renders src with vars (JSON text); returns 0 with *out, or the error code. */
static int render(const char *src, const char *vars, const lt_jinja_limits_t *lim, char **out) {
  lt_jinja_t *t;
  *out = NULL;
  int rc = lt_jinja_compile(src, strlen(src), &t);
  if (rc < 0) return rc;
  cJSON *v = vars ? cJSON_Parse(vars) : NULL;
  size_t len;
  rc = lt_jinja_render(t, v, lim, out, &len);
  cJSON_Delete(v);
  lt_jinja_free(t);
  return rc;
}

Test(jinja, constructs_match_huggingface_jinja) {
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/ref/template/constructs.jsonl", lt_test_root());
  lt_jsonl_t r;
  cr_assert_eq(lt_jsonl_open(&r, path), 0, "%s", lt_error_msg());
  cJSON *c;
  int n = 0, errors = 0;
  while (lt_jsonl_next(&r, &c) == 1) {
    const char *src;
    cr_assert_eq(lt_json_get_str(c, "template", &src), 0);
    const cJSON *vars = cJSON_GetObjectItem(c, "vars"), *exp = cJSON_GetObjectItem(c, "expect");
    const cJSON *text = cJSON_GetObjectItem(exp, "text"), *err = cJSON_GetObjectItem(exp, "error");
    lt_jinja_t *t;
    cr_assert_eq(lt_jinja_compile(src, strlen(src), &t), 0, "case %d: %s", n, lt_error_msg());
    char *out;
    size_t len;
    int rc = lt_jinja_render(t, vars, NULL, &out, &len);
    if (text) {
      cr_expect_eq(rc, 0, "case %d (%s): %s", n, src, lt_error_msg());
      if (rc == 0) cr_expect_str_eq(out, text->valuestring, "case %d: %s", n, src);
    } else {
      errors++;
      cr_expect_eq(rc, LT_EINVAL, "case %d should raise: %s", n, src);
      cr_expect_str_eq(lt_error_msg(), err->valuestring, "case %d: %s", n, src);
    }
    free(out);
    lt_jinja_free(t);
    cJSON_Delete(c);
    n++;
  }
  lt_jsonl_close(&r);
  cr_expect_geq(n, 60);
  cr_expect_geq(errors, 4);
}

/* Each row of the engine's filter, builtin and test tables has a case in the recorded corpus, so a row added
 * without checking it against @huggingface/jinja fails here. */
Test(jinja, every_filter_builtin_and_test_has_a_recorded_case) {
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/ref/template/constructs.jsonl", lt_test_root());
  FILE *f = fopen(path, "r");
  cr_assert(f, "%s", path);
  char *all = NULL;
  size_t cap = 0, len = 0, n;
  char chunk[65536];
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (len + n + 1 > cap) cr_assert((all = realloc(all, cap = 2 * (len + n + 1))));
    memcpy(all + len, chunk, n);
    len += n;
  }
  fclose(f);
  cr_assert(all);
  all[len] = 0;
  /* a test is also named as selectattr's argument: `selectattr("a", "eq", …)`, JSON-escaped in the file */
  static const char *const forms[3][2] = {{"|%s", "| %s"}, {"%s(", ".%s("}, {"is %s", ", \\\"%s\\\""}};
  int rows = 0;
  for (int kind = 0; kind < 3; kind++)
    for (int i = 0; lt__jinja_table_name(kind, i); i++, rows++) {
      const char *name = lt__jinja_table_name(kind, i);
      char a[80], b[80];
      snprintf(a, sizeof a, forms[kind][0], name);
      snprintf(b, sizeof b, forms[kind][1], name);
      cr_expect(strstr(all, a) || strstr(all, b), "no construct case uses %s (add one, with the reference's output)",
                a);
    }
  cr_expect_geq(rows, 60);
  free(all);
}

Test(jinja, whitespace_control_and_blocks) {
  char *out;
  /* trim_blocks and lstrip_blocks are on, as in transformers */
  cr_assert_eq(render("a\n  {% if true %}\nb\n  {% endif %}\nc", NULL, NULL, &out), 0);
  cr_expect_str_eq(out, "a\nb\nc");
  free(out);
  cr_assert_eq(render("a   {{- 'x' -}}   b", NULL, NULL, &out), 0);
  cr_expect_str_eq(out, "axb");
  free(out);
  /* {% generation %} markers disappear */
  cr_assert_eq(render("a {% generation %}b{% endgeneration %} c", NULL, NULL, &out), 0);
  cr_expect_str_eq(out, "a b c");
  free(out);
}

Test(jinja, raise_exception_message_is_its_argument) {
  char *out;
  cr_assert_eq(render("{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}",
                      "{\"messages\":[{\"role\":\"system\"}]}", NULL, &out),
               LT_EINVAL);
  cr_expect_str_eq(lt_error_msg(), "first must be user");
  cr_expect_null(out);
}

Test(jinja, syntax_errors_name_the_line) {
  char *out;
  cr_expect_eq(render("ok\n{% if x %}\nno end", NULL, NULL, &out), LT_EFORMAT);
  cr_expect(strstr(lt_error_msg(), "template:") && strstr(lt_error_msg(), "endif"), "%s", lt_error_msg());
  cr_expect_eq(render("line1\nline2 {{ 'unterminated }}", NULL, NULL, &out), LT_EFORMAT);
  cr_expect(strstr(lt_error_msg(), "template:2:"), "%s", lt_error_msg());
  cr_expect_eq(render("{% frobnicate %}", NULL, NULL, &out), LT_EFORMAT);
  cr_expect_eq(render("{{ 1 +* 2 }}", NULL, NULL, &out), LT_EFORMAT);
  cr_expect_eq(render("{{ \"\\q\" }}", NULL, NULL, &out), LT_EFORMAT);
}

Test(jinja, hostile_templates_end_with_errors) {
  char *out;
  lt_jinja_limits_t lim = {.max_memory = 8 << 20, .max_output = 1 << 20, .max_steps = 2000000};
  /* a loop that never ends in practice */
  char src[20000];
  size_t k = (size_t)snprintf(src, sizeof src, "{%% for i in range(100000) %%}{{ 1");
  for (int i = 0; i < 500; i++) k += (size_t)snprintf(src + k, sizeof src - k, "+1");
  snprintf(src + k, sizeof src - k, " }}{%% endfor %%}");
  cr_expect_eq(render(src, NULL, &lim, &out), LT_EINVAL);
  cr_expect(strstr(lt_error_msg(), "step limit"), "%s", lt_error_msg());
  /* quadratic memory */
  cr_expect_eq(
      render(
          "{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
          NULL, &lim, &out),
      LT_EINVAL);
  cr_expect(strstr(lt_error_msg(), "memory"), "%s", lt_error_msg());
  /* output */
  lt_jinja_limits_t roomy = {.max_memory = 256 << 20, .max_output = 1 << 20};
  cr_expect_eq(render("{% for i in range(100000) %}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}", NULL, &roomy, &out),
               LT_EINVAL);
  cr_expect(strstr(lt_error_msg(), "output"), "%s", lt_error_msg());
  /* unbounded recursion */
  cr_expect_eq(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &lim, &out), LT_EINVAL);
  cr_expect(strstr(lt_error_msg(), "deep"), "%s", lt_error_msg());
  /* deep nesting in the source */
  k = (size_t)snprintf(src + k, sizeof src - k, "{{ ");
  for (int i = 0; i < 5000; i++) src[k++] = '(';
  src[k++] = '1';
  for (int i = 0; i < 5000; i++) src[k++] = ')';
  snprintf(src + k, sizeof src - k, " }}");
  cr_expect_eq(render(src, NULL, &lim, &out), LT_EFORMAT);
  /* a long flat chain is deep for the evaluator, not the parser */
  k = (size_t)snprintf(src, sizeof src, "{{ 1");
  for (int i = 0; i < 3000; i++) k += (size_t)snprintf(src + k, sizeof src - k, "+1");
  snprintf(src + k, sizeof src - k, " }}");
  cr_expect_eq(render(src, NULL, &lim, &out), LT_EINVAL);
}

Test(jinja, variables_cannot_shadow_globals) {
  char *out;
  cr_expect_eq(render("{{ 1 }}", "{\"true\": 5}", NULL, &out), LT_EINVAL);
  cr_expect_str_eq(lt_error_msg(), "Variable already declared: true");
}

static char *write_config(const char *dir, const char *json) {
  char *p = malloc(4096);
  snprintf(p, 4096, "%s/tokenizer_config.json", dir);
  cr_assert_eq(lt_test_write(p, json), 0);
  return p;
}

Test(chat_template, string_and_named_forms_with_added_token_bos) {
  char *dir = lt_test_tmpdir("chat_template");
  free(write_config(
      dir,
      "{\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<B>\"}, \"eos_token\": \"<E>\","
      " \"chat_template\": \"{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}\"}"));
  lt_chat_template_t *t;
  cr_assert_eq(lt_chat_template_load(dir, &t), 0, "%s", lt_error_msg());
  cJSON *v = cJSON_Parse("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}");
  char *text;
  size_t len;
  cr_assert_eq(lt_chat_template_render(t, v, &text, &len), 0, "%s", lt_error_msg());
  cr_expect_str_eq(text, "<B>hi<E>");
  free(text);
  /* the line's own bos_token wins */
  cJSON_AddStringToObject(v, "bos_token", "<mine>");
  cr_assert_eq(lt_chat_template_render(t, v, &text, &len), 0);
  cr_expect_str_eq(text, "<mine>hi<E>");
  free(text);
  lt_chat_template_free(t);

  free(write_config(dir,
                    "{\"chat_template\": [{\"name\": \"default\", \"template\": \"plain\"},"
                    " {\"name\": \"tool_use\", \"template\": \"tools:{{ tools | length }}\"}]}"));
  cr_assert_eq(lt_chat_template_load(dir, &t), 0, "%s", lt_error_msg());
  cr_assert_eq(lt_chat_template_render(t, v, &text, &len), 0);
  cr_expect_str_eq(text, "plain");
  free(text);
  cJSON_AddItemToObject(v, "tools", cJSON_Parse("[{\"type\": \"function\"}]"));
  cr_assert_eq(lt_chat_template_render(t, v, &text, &len), 0);
  cr_expect_str_eq(text, "tools:1");
  free(text);
  cr_expect(strstr(lt_chat_template_source(t, 1), "tools:"));
  lt_chat_template_free(t);
  cJSON_Delete(v);

  free(write_config(dir, "{\"eos_token\": \"x\"}"));
  cr_expect_eq(lt_chat_template_load(dir, &t), LT_ENOENT);
  free(write_config(dir, "{\"chat_template\": \"{% if %}\"}"));
  cr_expect_eq(lt_chat_template_load(dir, &t), LT_EFORMAT);
  cr_expect(strstr(lt_error_msg(), "tokenizer_config.json"), "%s", lt_error_msg());
  free(write_config(dir, "{\"chat_template\": 5}"));
  cr_expect_eq(lt_chat_template_load(dir, &t), LT_EFORMAT);
  lt_test_rmdir(dir);
}

static char *chat(const lt_chat_template_t *t, lt_tool_format fmt, const cJSON *msgs, const cJSON *tools, int gen) {
  char *text;
  size_t len;
  cr_assert_eq(lt_chat_render(t, fmt, msgs, tools, gen, &text, &len), 0, "%s", lt_error_msg());
  cr_expect_eq(strlen(text), len);
  return text;
}

/* One builder of template variables: an empty tools list renders as no
 * tools (the agent loop passed it, the OpenAI layer did not). */
Test(chat_template, empty_tools_render_as_none) {
  char *dir = lt_test_tmpdir("chat_vars");
  free(write_config(dir,
                    "{\"chat_template\": \"{% if tools is defined %}T{{ tools | length }}|{% endif %}"
                    "{% for m in messages %}{{ m.content }}{% endfor %}{{ add_generation_prompt }}\"}"));
  lt_chat_template_t *t;
  cr_assert_eq(lt_chat_template_load(dir, &t), 0, "%s", lt_error_msg());
  cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"hi\"}]"), *none = cJSON_Parse("[]"),
        *one = cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]");
  char *a = chat(t, LT_TOOLFMT_XML, msgs, none, 1), *b = chat(t, LT_TOOLFMT_XML, msgs, NULL, 1),
       *c = chat(t, LT_TOOLFMT_XML, msgs, one, 0);
  cr_expect_str_eq(a, "hitrue");
  cr_expect_str_eq(b, "hitrue");
  cr_expect_str_eq(c, "T1|hifalse");
  free(a), free(b), free(c);
  cJSON_Delete(msgs), cJSON_Delete(none), cJSON_Delete(one);
  lt_chat_template_free(t);
  lt_test_rmdir(dir);
}

/* msgs as ChatML ids, then the assistant's turn opened (the agent loop's prompt without a template). */
static int32_t *chatml_ids(const lt_tokenizer_t *tok, const cJSON *msgs, int *n) {
  int32_t *ids = NULL;
  int cap = 0;
  *n = 0;
  for (const cJSON *m = msgs->child; m; m = m->next)
    cr_assert_eq(lt_chat_message(tok, lt_role_parse(cJSON_GetObjectItem(m, "role")->valuestring),
                                 cJSON_GetObjectItem(m, "content")->valuestring, &ids, n, &cap),
                 0);
  cr_assert_eq(lt_chat_open(tok, LT_ROLE_ASSISTANT, &ids, n, &cap), 0);
  return ids;
}

/* ChatML has one writer (text/chat_template.c), into text and into token ids,
 * and the Jinja source written into checkpoints renders the same text; the
 * ids are those of the text itself, special tokens by id for the byte
 * tokenizer and, for a tokenizer.json one, exactly its encoding of the text. */
Test(chat_template, chatml_text_tokens_and_template_agree) {
  cJSON *msgs = cJSON_Parse(
      "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"hi\"},"
      " {\"role\": \"assistant\", \"content\": \"yo\"}]");
  char *text = chat(NULL, LT_TOOLFMT_XML, msgs, NULL, 1);
  cr_expect_str_eq(text,
                   "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                   "<|im_start|>assistant\nyo<|im_end|>\n<|im_start|>assistant\n");
  char *jin;
  cr_assert_eq(
      render(
          LT_CHATML_TEMPLATE,
          "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": "
          "\"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}], \"add_generation_prompt\": true}",
          NULL, &jin),
      0, "%s", lt_error_msg());
  cr_expect_str_eq(jin, text);
  lt_tokenizer_t *tok;
  cr_assert_eq(lt_tokenizer_byte(264, &tok), 0);
  int n;
  int32_t *ids = chatml_ids(tok, msgs, &n);
  char *dec;
  size_t dl;
  cr_assert_eq(lt_tokenizer_decode(tok, ids, n, 0, &dec, &dl), 0);
  cr_expect_str_eq(dec, text);
  cr_expect_eq(ids[0], lt_tokenizer_special(tok, LT_CHATML_START));
  free(dec), free(ids), free(jin);
  lt_tokenizer_free(tok);
  char small[4096];
  snprintf(small, sizeof small, "%s/tests/ref/tokenizer/qwen2-small.json", lt_test_root());
  cr_assert_eq(lt_tokenizer_load(small, &tok), 0, "%s", lt_error_msg());
  ids = chatml_ids(tok, msgs, &n);
  int32_t *whole;
  int nwhole;
  cr_assert_eq(lt_tokenizer_encode(tok, text, strlen(text), &whole, &nwhole), 0);
  cr_expect(n == nwhole && !memcmp(ids, whole, sizeof *ids * (size_t)n), "the ids are not the text's encoding");
  free(ids), free(whole), free(text);
  lt_tokenizer_free(tok);
  /* tools in a system message, earlier calls in the policy's format */
  cJSON *tools = cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]");
  cJSON_AddItemToObject(cJSON_GetArrayItem(msgs, 2), "tool_calls",
                        cJSON_Parse("[{\"function\": {\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}}]"));
  text = chat(NULL, LT_TOOLFMT_QWEN, msgs, tools, 0);
  cr_expect(
      strstr(text, "<|im_start|>system\n# Tools\n[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]<|im_end|>\n"),
      "%s", text);
  cr_expect(
      strstr(text,
             "<|im_start|>assistant\nyo<tool_call>{\"name\": \"f\", \"arguments\": {\"x\":1}}</tool_call><|im_end|>\n"),
      "%s", text);
  free(text);
  cJSON_Delete(tools), cJSON_Delete(msgs);
}

Test(chat_template, cli_renders_lines_and_reports_raises) {
  char *dir = lt_test_tmpdir("template_cli");
  free(write_config(dir,
                    "{\"eos_token\": \"</s>\", \"chat_template\": \"{% for m in messages %}{% if m.role == 'bad' %}"
                    "{{ raise_exception('bad role at ' ~ loop.index0) }}{% endif %}[{{ m.role }}] {{ m.content }}"
                    "{{ eos_token }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}\"}"));
  char in[4096];
  snprintf(in, sizeof in, "%s/in.jsonl", dir);
  cr_assert_eq(
      lt_test_write(
          in,
          "{\"messages\": [{\"role\": \"user\", \"content\": \"hi \\\"there\\\"\"}], \"add_generation_prompt\": true}\n"
          "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"bad\", \"content\": \"b\"}]}\n"),
      0);
  lt_run_t r;
  const char *argv[] = {"longtail", "template", "--tokenizer", dir, "--input", in, NULL};
  cr_assert_eq(lt_test_run(&r, NULL, 30, argv), 0);
  cr_expect_eq(r.status, 0, "%s", r.err);
  cr_expect_str_eq(r.out, "{\"text\":\"[user] hi \\\"there\\\"</s>[assistant]\"}\n{\"error\":\"bad role at 1\"}\n");
  lt_run_free(&r);
  /* a malformed line is an input error naming file:line */
  cr_assert_eq(lt_test_write(in, "{\"messages\": []}\n[1, 2]\n"), 0);
  cr_assert_eq(lt_test_run(&r, NULL, 30, argv), 0);
  cr_expect_eq(r.status, 2);
  cr_expect(strstr(r.err, "in.jsonl:2"), "%s", r.err);
  lt_run_free(&r);
  /* no chat_template */
  free(write_config(dir, "{}"));
  cr_assert_eq(lt_test_run(&r, NULL, 30, argv), 0);
  cr_expect_neq(r.status, 0);
  cr_expect(strstr(r.err, "no chat_template"), "%s", r.err);
  lt_run_free(&r);
  lt_test_rmdir(dir);
}
