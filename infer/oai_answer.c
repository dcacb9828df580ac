/* The OpenAI layer's answers, whatever the API shape: tokens as the engine reports them, stop strings on the
 * decoded text, tool calls parsed back, the text released to a stream as it becomes final; the shape's writer
 * (lt__oai_dialect_t) puts them in its JSON or its server-sent events. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer/internal.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/grow.h"
#include "util/json.h"

void lt__oai_gen_release(lt_oai_gen_t *g) {
  free(g->tokens), free(g->logprobs), free(g->ntop), free(g->top_ids), free(g->top_lps), free(g->text);
  cJSON_Delete(g->tool_calls);
  g->tokens = NULL, g->logprobs = NULL, g->ntop = NULL, g->top_ids = NULL, g->top_lps = NULL, g->text = NULL;
  g->tool_calls = NULL;
}

static int push(lt_oai_gen_t *g, const lt_oai_token_t *t, int K) {
  lt_grow_t arr[] = {LT_GROW(g->tokens), LT_GROW(g->logprobs), LT_GROW_K(g->ntop, K ? 1 : 0), LT_GROW_K(g->top_ids, K),
                     LT_GROW_K(g->top_lps, K)};
  if (lt_grow(&g->cap, (size_t)g->n + 1, 64, arr, sizeof arr / sizeof *arr) < 0) return LT_ENOMEM;
  g->tokens[g->n] = t->token;
  g->logprobs[g->n] = t->logprob;
  if (K) {
    int m = t->ntop < K ? t->ntop : K;
    g->ntop[g->n] = m > 0 ? m : 0;
    if (m > 0) {
      memcpy(g->top_ids + (size_t)g->n * K, t->top_ids, sizeof *g->top_ids * (size_t)m);
      memcpy(g->top_lps + (size_t)g->n * K, t->top_logprobs, sizeof *g->top_lps * (size_t)m);
    }
  }
  g->n++;
  return 0;
}

static int append_text(lt_oai_gen_t *g, const char *s, size_t n) {
  if (g->tlen + n + 1 > g->tcap) {
    size_t cap = g->tcap ? 2 * g->tcap : 256;
    while (cap < g->tlen + n + 1) cap *= 2;
    char *t = realloc(g->text, cap);
    if (!t) return LT_ENOMEM;
    g->text = t, g->tcap = cap;
  }
  memcpy(g->text + g->tlen, s, n);
  g->tlen += n;
  g->text[g->tlen] = 0;
  return 0;
}

/* Cuts the text at the earliest stop string that the new bytes completed. */
static int match_stop(lt__oai_call_t *k, lt_oai_gen_t *g, size_t before) {
  size_t best = (size_t)-1;
  for (int i = 0; i < k->nstops; i++) {
    size_t sl = strlen(k->stops[i]), from = before + 1 > sl ? before + 1 - sl : 0;
    const char *p = g->tlen >= sl ? memmem(g->text + from, g->tlen - from, k->stops[i], sl) : NULL;
    if (p && (size_t)(p - g->text) < best) best = (size_t)(p - g->text), g->stop_index = i;
  }
  if (best == (size_t)-1) return 0;
  g->tlen = best;
  g->text[best] = 0;
  g->cut = 1;
  return 1;
}

/* ---- streaming ---- */

int lt__oai_send_event(lt__oai_call_t *k, const char *name, cJSON *o) {
  if (!o) return LT_ENOMEM;
  lt_buf_t b = {0};
  if (name) lt_buf_printf(&b, "event: %s\n", name);
  lt_buf_puts(&b, "data: ");
  lt_json_write(&b, o); /* valid UTF-8 whatever the policy generated (lt__oai_send_json) */
  lt_buf_puts(&b, "\n\n");
  cJSON_Delete(o);
  int rc = lt_buf_ok(&b) < 0 ? LT_ENOMEM : lt_http_stream_write(k->conn, b.data, b.len);
  lt_buf_free(&b);
  return rc;
}

int lt__oai_stream_begin(lt__oai_call_t *k) {
  int rc = lt_http_stream_begin(k->conn, 200, "text/event-stream");
  if (rc < 0) return rc;
  k->streaming = 1;
  rc = k->d->stream_begin(k);
  return rc == LT_ECANCELED ? 0 : rc; /* a client that left is noticed by the tokens */
}

/* How much of the text may go out now: not what could still become a stop
 * string, not half a UTF-8 character; nothing while tool calls may follow
 * (they are parsed from the whole text at the end). */
static size_t releasable(const lt__oai_call_t *k, const lt_oai_gen_t *g) {
  if (k->parse_tools) return g->sent;
  size_t hold = 0;
  for (int i = 0; i < k->nstops; i++) {
    size_t sl = strlen(k->stops[i]);
    if (sl - 1 > hold) hold = sl - 1;
  }
  size_t end = g->tlen > hold ? g->tlen - hold : 0;
  const unsigned char *t = (const unsigned char *)g->text;
  for (size_t back = 0; back < 4 && end > g->sent + back; back++) {
    unsigned char c = t[end - 1 - back];
    if ((c & 0xC0) == 0x80) continue;
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (need > back + 1) end -= back + 1;
    break;
  }
  return end > g->sent ? end : g->sent;
}

static void stream_progress(lt__oai_call_t *k, lt_oai_gen_t *g) {
  if (!k->parse_tools) k->d->stream_text(k, g, releasable(k, g));
}

/* ---- tokens ---- */

int lt_oai_gen_token(lt_oai_gen_t *g, const lt_oai_token_t *t) {
  lt__oai_call_t *k = g->call;
  if (!g->live) return 1;
  if (push(g, t, k->plan.top_logprobs) < 0) return 1; /* ends the choice short; the answer says "length" */
  int stop = 0;
  if (!g->cut && !lt_tokenizer_is_stop(k->a->o.tok, t->token)) {
    char *s = NULL;
    size_t n = 0, before = g->tlen;
    if (lt_tokenizer_decode(k->a->o.tok, &t->token, 1, k->skip_special, &s, &n) == 0 && append_text(g, s, n) == 0)
      stop = match_stop(k, g, before);
    free(s);
  }
  if (k->streaming) stream_progress(k, g);
  return stop || !lt_http_conn_alive(k->conn);
}

static const char *call_marker(lt_tool_format f) {
  return f == LT_TOOLFMT_DEEPSEEK ? "<\xef\xbd\x9c"
                                    "tool\xe2\x96\x81"
                                    "call"
                                  : "<tool_call>";
}

/* Tool calls in the text → OpenAI's tool_calls (arguments as JSON text). */
static int parse_calls(lt__oai_call_t *k, lt_oai_gen_t *g) {
  g->content_len = g->tlen;
  if (!k->parse_tools) return 0;
  lt_toolcalls_t tc;
  int rc = lt_toolcall_parse_as(k->a->o.tool_format, g->text ? g->text : "", g->tlen, &tc);
  if (rc < 0) return rc;
  if (tc.ncalls) {
    const char *m = g->text ? strstr(g->text, call_marker(k->a->o.tool_format)) : NULL;
    if (m) g->content_len = (size_t)(m - g->text);
    g->tool_calls = cJSON_CreateArray();
    for (int i = 0; i < tc.ncalls && g->tool_calls; i++) {
      cJSON *c = cJSON_CreateObject(), *fn;
      char id[96];
      snprintf(id, sizeof id, "%s_%s_%d_%d", k->d->call_prefix, k->id, g->index, i);
      cJSON_AddNumberToObject(c, "index", i);
      cJSON_AddStringToObject(c, "id", id);
      cJSON_AddStringToObject(c, "type", "function");
      fn = cJSON_AddObjectToObject(c, "function");
      cJSON_AddStringToObject(fn, "name", tc.calls[i].name);
      if (tc.arguments[i]) {
        cJSON_AddStringToObject(fn, "arguments", tc.arguments[i]);
      } else { /* xml: every value a string */
        cJSON *args = cJSON_CreateObject();
        for (int j = 0; j < tc.calls[i].nargs; j++)
          cJSON_AddStringToObject(args, tc.calls[i].args[j].name, tc.calls[i].args[j].value);
        char *s = cJSON_PrintUnformatted(args);
        cJSON_AddStringToObject(fn, "arguments", s ? s : "{}");
        free(s);
        cJSON_Delete(args);
      }
      cJSON_AddItemToArray(g->tool_calls, c);
    }
    g->finish = "tool_calls";
  }
  lt_toolcalls_free(&tc);
  return 0;
}

int lt__oai_blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\n' && s[i] != '\t' && s[i] != '\r') return 0;
  return 1;
}

static void complete(lt__oai_call_t *k) {
  lt_oai_t *a = k->a;
  int alive = lt_http_conn_alive(k->conn);
  k->d->answer(k);
  if (k->streaming) lt_http_stream_end(k->conn);
  if (alive && a->o.hooks.answered) {
    lt_oai_choice_t ch[LT_OAI_MAX_N];
    char *texts[LT_OAI_MAX_N] = {0};
    for (int i = 0; i < k->plan.n; i++) {
      lt_oai_gen_t *g = &k->gens[i];
      texts[i] = strndup(g->text ? g->text : "", g->content_len);
      ch[i] = (lt_oai_choice_t){.tokens = g->tokens,
                                .logprobs = g->logprobs,
                                .n = g->n,
                                .finish_reason = g->finish,
                                .text = texts[i] ? texts[i] : ""};
    }
    lt_oai_result_t r = {.plan = &k->plan, .nchoices = k->plan.n, .choices = ch};
    a->o.hooks.answered(a->o.hooks.ud, &r);
    for (int i = 0; i < k->plan.n; i++) free(texts[i]);
  }
  lt__oai_call_done(k);
}

void lt_oai_gen_end(lt_oai_gen_t *g, int rc, int eos, const char *msg) {
  lt__oai_call_t *k = g->call;
  g->live = 0;
  k->pending--;
  if (rc == LT_ERANGE) {
    lt__oai_context_full(k, k->plan.nprompt + g->n);
    return;
  }
  if (rc == 0 && (rc = parse_calls(k, g)) < 0) msg = lt_error_msg();
  if (rc < 0) {
    lt__oai_call_fail(k, 500, NULL, NULL, msg ? msg : lt_strerror(rc));
    return;
  }
  if (!g->finish) g->finish = g->cut || eos ? "stop" : "length";
  if (k->streaming) k->d->stream_choice_end(k, g);
  if (k->pending == 0) complete(k);
}
