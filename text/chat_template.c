/* Chat rendering: a model's own template (loading, the choice among named
 * templates, bos/eos), the one builder of template variables, a conversation
 * rendered for training (ids and the spans the policy generates), and ChatML
 * as text and as token ids. */
#include "text/chat_template.h"

#include <stdlib.h>
#include <string.h>

#include "text/jinja.h"
#include "util/buf.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/json.h"

#define MAX_TEMPLATES 16

struct lt_chat_template {
  int n;
  char *name[MAX_TEMPLATES];
  char *src[MAX_TEMPLATES];
  lt_jinja_t *tpl[MAX_TEMPLATES];
  cJSON *bos, *eos; /* NULL: absent from the config */
};

/* A special token: a string, null, or an AddedToken object's "content". */
static cJSON *token_value(const cJSON *cfg, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
  if (!v) return NULL;
  if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
  if (cJSON_IsString(v)) return cJSON_CreateString(v->valuestring);
  return cJSON_CreateNull();
}

static int add(lt_chat_template_t *t, const char *path, const char *name, const char *src) {
  if (t->n == MAX_TEMPLATES)
    return lt_error_set(LT_EFORMAT, "%s: chat_template: more than %d named templates", path, MAX_TEMPLATES);
  int i = t->n;
  if (!(t->name[i] = strdup(name)) || !(t->src[i] = strdup(src))) {
    free(t->name[i]);
    return lt_error_set(LT_ENOMEM, "out of memory");
  }
  t->n++;
  int rc = lt_jinja_compile(src, strlen(src), &t->tpl[i]);
  if (rc < 0) return lt_error_wrap(rc, "%s: chat_template %s", path, name);
  return 0;
}

int lt_chat_template_load(const char *path, lt_chat_template_t **out) {
  *out = NULL;
  char file[4096];
  if (lt_fs_is_dir(path)) {
    if (lt_path_join(file, sizeof file, path, "tokenizer_config.json") < 0)
      return lt_error_set(LT_ERANGE, "%s: path too long", path);
  } else if (strlen(path) >= sizeof file) {
    return lt_error_set(LT_ERANGE, "%s: path too long", path);
  } else {
    strcpy(file, path);
  }
  if (!lt_fs_exists(file)) return lt_error_set(LT_ENOENT, "%s: no such file", file);
  cJSON *cfg;
  int rc = lt_json_parse_file(file, &cfg);
  if (rc < 0) return rc;
  lt_chat_template_t *t = calloc(1, sizeof *t);
  if (!t) {
    cJSON_Delete(cfg);
    return lt_error_set(LT_ENOMEM, "out of memory");
  }
  const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
  if (!ct || cJSON_IsNull(ct)) {
    rc = lt_error_set(LT_ENOENT, "%s: no chat_template", file);
  } else if (cJSON_IsString(ct)) {
    rc = add(t, file, "default", ct->valuestring);
  } else if (cJSON_IsArray(ct)) {
    const cJSON *it;
    cJSON_ArrayForEach(it, ct) {
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name"),
                  *tp = cJSON_GetObjectItemCaseSensitive(it, "template");
      if (!cJSON_IsString(nm) || !cJSON_IsString(tp)) {
        rc = lt_error_set(LT_EFORMAT, "%s: chat_template: expected a list of {\"name\", \"template\"} strings", file);
        break;
      }
      if ((rc = add(t, file, nm->valuestring, tp->valuestring)) < 0) break;
    }
    if (rc == 0 && t->n == 0) rc = lt_error_set(LT_ENOENT, "%s: chat_template is an empty list", file);
  } else {
    rc = lt_error_set(LT_EFORMAT, "%s: chat_template: expected a string or a list of named templates", file);
  }
  if (rc == 0) {
    t->bos = token_value(cfg, "bos_token");
    t->eos = token_value(cfg, "eos_token");
  }
  cJSON_Delete(cfg);
  if (rc < 0) {
    lt_chat_template_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

void lt_chat_template_free(lt_chat_template_t *t) {
  if (!t) return;
  for (int i = 0; i < t->n; i++) {
    free(t->name[i]);
    free(t->src[i]);
    lt_jinja_free(t->tpl[i]);
  }
  cJSON_Delete(t->bos);
  cJSON_Delete(t->eos);
  free(t);
}

/* transformers' choice among named templates; -1 when none fits */
static int pick(const lt_chat_template_t *t, int with_tools) {
  if (t->n == 1 && strcmp(t->name[0], "default") == 0) return 0;
  int def = -1;
  for (int i = 0; i < t->n; i++) {
    if (with_tools && strcmp(t->name[i], "tool_use") == 0) return i;
    if (strcmp(t->name[i], "default") == 0) def = i;
  }
  return def;
}

const char *lt_chat_template_source(const lt_chat_template_t *t, int with_tools) {
  int i = pick(t, with_tools);
  return i < 0 ? NULL : t->src[i];
}

int lt_chat_template_render(const lt_chat_template_t *t, const cJSON *vars, char **text, size_t *len) {
  *text = NULL;
  if (vars && !cJSON_IsObject(vars)) return lt_error_set(LT_EINVAL, "template variables: expected a JSON object");
  const cJSON *tools = vars ? cJSON_GetObjectItemCaseSensitive(vars, "tools") : NULL;
  int i = pick(t, tools && !cJSON_IsNull(tools));
  if (i < 0) return lt_error_set(LT_EINVAL, "no chat template named \"default\" (or \"tool_use\" with tools)");
  /* bos/eos first, so the line's own keys come after them and override them */
  cJSON *all = cJSON_CreateObject();
  int rc = all ? 0 : lt_error_set(LT_ENOMEM, "out of memory");
  const cJSON *toks[2] = {t->bos, t->eos};
  const char *names[2] = {"bos_token", "eos_token"};
  for (int k = 0; k < 2 && rc == 0; k++) {
    if (!toks[k] || (vars && cJSON_GetObjectItemCaseSensitive(vars, names[k]))) continue;
    cJSON *d = cJSON_Duplicate(toks[k], 1);
    if (!d || !cJSON_AddItemToObject(all, names[k], d)) {
      cJSON_Delete(d);
      rc = lt_error_set(LT_ENOMEM, "out of memory");
    }
  }
  /* the line's values by reference: a conversation is not copied per render */
  for (cJSON *c = vars ? vars->child : NULL; c && rc == 0; c = c->next)
    if (!cJSON_AddItemReferenceToObject(all, c->string, c)) rc = lt_error_set(LT_ENOMEM, "out of memory");
  if (rc == 0) rc = lt_jinja_render(t->tpl[i], all, NULL, text, len);
  cJSON_Delete(all);
  return rc;
}

/* ---- one conversation, rendered ---- */

cJSON *lt_chat_vars(const cJSON *messages, const cJSON *tools, int gen) {
  cJSON *vars = cJSON_CreateObject();
  if (vars && cJSON_AddItemReferenceToObject(vars, "messages", (cJSON *)messages) &&
      (!cJSON_IsArray(tools) || !tools->child || cJSON_AddItemReferenceToObject(vars, "tools", (cJSON *)tools)) &&
      cJSON_AddBoolToObject(vars, "add_generation_prompt", gen))
    return vars;
  cJSON_Delete(vars);
  return NULL;
}

/* ---- ChatML: one writer, into text or into token ids ---- */

/* Where ChatML goes: text (out), or the ids of tokenizer tok, the markers by id (the byte tokenizer never reads
 * special-token text) and the text between them encoded piece by piece as written. */
typedef struct {
  lt_buf_t *out;
  const lt_tokenizer_t *tok;
  int32_t **ids;
  int *n, *cap;
} chatml_t;

static int put_text(chatml_t *c, const char *s) {
  if (!c->out) return lt_ids_text(c->tok, s, c->ids, c->n, c->cap);
  lt_buf_puts(c->out, s);
  return lt_buf_ok(c->out);
}

static int put_marker(chatml_t *c, const char *marker) {
  if (c->out) return put_text(c, marker);
  int32_t id = lt_tokenizer_special(c->tok, marker);
  if (id < 0) return lt_error_set(LT_EUNSUPP, "tokenizer has no %s token for the chat format", marker);
  return lt_ids_push(c->ids, c->n, c->cap, id);
}

/* "<|im_start|>ROLE\n" */
static int chatml_open(chatml_t *c, const char *role) {
  int rc = put_marker(c, LT_CHATML_START);
  if (rc == 0) rc = put_text(c, role);
  if (rc == 0) rc = put_text(c, "\n");
  return rc;
}

/* "<|im_end|>\n" */
static int chatml_close(chatml_t *c) {
  int rc = put_marker(c, LT_CHATML_END);
  return rc == 0 ? put_text(c, "\n") : rc;
}

/* One message: its content, then its calls (tool_calls, or NULL) in tool format fmt. */
static int chatml_message(chatml_t *c, const char *role, const char *content, lt_tool_format fmt,
                          const cJSON *tool_calls) {
  int rc = chatml_open(c, role);
  if (rc == 0) rc = put_text(c, content);
  if (rc == 0 && tool_calls) {
    lt_buf_t calls = {0};
    lt_toolcall_write(fmt, tool_calls, &calls);
    rc = lt_buf_ok(&calls);
    if (rc == 0 && calls.data) rc = put_text(c, calls.data);
    lt_buf_free(&calls);
  }
  return rc == 0 ? chatml_close(c) : rc;
}

/* A conversation: tools listed in a system message, earlier calls written in the policy's tool format. */
static int render_chatml(chatml_t *c, lt_tool_format fmt, const cJSON *msgs, const cJSON *tools, int gen) {
  int rc = 0;
  if (cJSON_IsArray(tools) && tools->child) {
    char *s = cJSON_PrintUnformatted(tools);
    rc = s ? chatml_open(c, "system") : lt_error_set(LT_ENOMEM, "out of memory");
    if (rc == 0) rc = put_text(c, "# Tools\n");
    if (rc == 0) rc = put_text(c, s);
    if (rc == 0) rc = chatml_close(c);
    free(s);
  }
  for (const cJSON *m = msgs ? msgs->child : NULL; m && rc == 0; m = m->next) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"),
                *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    rc = chatml_message(c, cJSON_IsString(role) ? role->valuestring : "",
                        cJSON_IsString(content) ? content->valuestring : "", fmt,
                        cJSON_GetObjectItemCaseSensitive(m, "tool_calls"));
  }
  if (rc == 0 && gen) rc = chatml_open(c, "assistant");
  return rc;
}

int lt_chat_render(const lt_chat_template_t *t, lt_tool_format fmt, const cJSON *messages, const cJSON *tools, int gen,
                   char **text, size_t *len) {
  *text = NULL;
  *len = 0;
  if (!t) {
    lt_buf_t b = {0};
    chatml_t c = {.out = &b};
    int rc = render_chatml(&c, fmt, messages, tools, gen);
    if (rc < 0) {
      lt_buf_free(&b);
      return rc;
    }
    *len = b.len;
    *text = lt_buf_take(&b);
    return 0;
  }
  cJSON *vars = lt_chat_vars(messages, tools, gen);
  int rc = vars ? lt_chat_template_render(t, vars, text, len) : lt_error_set(LT_ENOMEM, "out of memory");
  cJSON_Delete(vars);
  return rc;
}

/* ---- a conversation for training ---- */

static int is_assistant(const cJSON *m) {
  const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, "role");
  return cJSON_IsString(r) && !strcmp(r->valuestring, "assistant");
}

/* Appends the encoding of text[0, len). */
static int encode_more(const lt_tokenizer_t *tok, const char *text, size_t len, int32_t **ids, int *n, int *cap) {
  int32_t *tmp = NULL;
  int m = 0, rc = lt_tokenizer_encode(tok, text, len, &tmp, &m);
  for (int i = 0; i < m && rc == 0; i++) rc = lt_ids_push(ids, n, cap, tmp[i]);
  free(tmp);
  return rc;
}

/* Where each trained turn starts in full (the length of the render before it, with the generation prompt). */
static int turn_starts(const lt_chat_template_t *t, lt_tool_format fmt, const cJSON *messages, int all_turns,
                       const char *full, size_t flen, size_t *at, int *nturn) {
  cJSON *before = cJSON_CreateArray();
  int rc = before ? 0 : lt_error_set(LT_ENOMEM, "out of memory"), k = 0;
  *nturn = 0;
  for (const cJSON *m = messages->child; m && rc == 0; m = m->next, k++) {
    if (is_assistant(m) && (all_turns || !m->next)) {
      char *pre = NULL;
      size_t plen = 0;
      rc = lt_chat_render(t, fmt, before, NULL, 1, &pre, &plen);
      if (rc == 0 && (plen > flen || memcmp(pre, full, plen)))
        rc = lt_error_set(LT_EINVAL, "chat template: the messages before message %d render differently once it follows",
                          k + 1);
      if (rc == 0) at[(*nturn)++] = plen;
      free(pre);
    }
    if (rc == 0 && !cJSON_AddItemReferenceToArray(before, (cJSON *)m)) rc = lt_error_set(LT_ENOMEM, "out of memory");
  }
  cJSON_Delete(before);
  return rc;
}

int lt_chat_render_ids(const lt_chat_template_t *t, lt_tool_format fmt, const lt_tokenizer_t *tok,
                       const cJSON *messages, int all_turns, int32_t **ids, uint8_t **gen, int *n) {
  *ids = NULL, *gen = NULL, *n = 0;
  int nmsg = cJSON_GetArraySize(messages), cap = 0, nturn = 0;
  const cJSON *last = nmsg ? cJSON_GetArrayItem(messages, nmsg - 1) : NULL;
  if (!last || !is_assistant(last))
    return lt_error_set(LT_EINVAL, "the conversation does not end with the assistant's turn");
  char *full = NULL;
  size_t flen = 0, *at = malloc(sizeof *at * (size_t)nmsg);
  int *span = malloc(sizeof *span * 2 * (size_t)nmsg); /* each turn's generated ids: [span[2k], span[2k + 1]) */
  int rc =
      at && span ? lt_chat_render(t, fmt, messages, NULL, 0, &full, &flen) : lt_error_set(LT_ENOMEM, "out of memory");
  if (rc == 0) rc = turn_starts(t, fmt, messages, all_turns, full, flen, at, &nturn);
  /* Tokenized piece by piece at the turns' boundaries, which follow a template's markup (a newline, a special
   * token), so the ids are those of the whole render. */
  int32_t eos = t && cJSON_IsString(t->eos) ? lt_tokenizer_special(tok, t->eos->valuestring) : -1;
  if (rc == 0) rc = encode_more(tok, full, at[0], ids, n, &cap);
  for (int k = 0; k < nturn && rc == 0; k++) {
    size_t end = k + 1 < nturn ? at[k + 1] : flen;
    span[2 * k] = *n;
    rc = encode_more(tok, full + at[k], end - at[k], ids, n, &cap);
    int stop = span[2 * k];
    while (rc == 0 && stop < *n && !lt_tokenizer_is_stop(tok, (*ids)[stop]) && (*ids)[stop] != eos) stop++;
    if (rc == 0 && stop == *n && k + 1 < nturn)
      rc = lt_error_set(LT_EINVAL, "chat template: no stop token ends trained assistant turn %d", k + 1);
    span[2 * k + 1] = stop < *n ? stop + 1 : *n;
  }
  if (rc == 0 && !(*gen = calloc((size_t)*n + 1, 1))) rc = lt_error_set(LT_ENOMEM, "out of memory");
  for (int k = 0; k < nturn && rc == 0; k++) memset(*gen + span[2 * k], 1, (size_t)(span[2 * k + 1] - span[2 * k]));
  free(full), free(at), free(span);
  if (rc < 0) {
    free(*ids), free(*gen);
    *ids = NULL, *gen = NULL, *n = 0;
  }
  return rc;
}

/* ---- ChatML as token ids (lt_chat_open/close/message) ---- */

static const char *role_name(lt_role r) {
  switch (r) {
  case LT_ROLE_SYSTEM: return "system";
  case LT_ROLE_USER: return "user";
  case LT_ROLE_ASSISTANT: return "assistant";
  default: return "tool";
  }
}

int lt_chat_open(const lt_tokenizer_t *t, lt_role role, int32_t **ids, int *n, int *cap) {
  chatml_t c = {.tok = t, .ids = ids, .n = n, .cap = cap};
  return chatml_open(&c, role_name(role));
}

int lt_chat_close(const lt_tokenizer_t *t, int32_t **ids, int *n, int *cap) {
  chatml_t c = {.tok = t, .ids = ids, .n = n, .cap = cap};
  return chatml_close(&c);
}

int lt_chat_message(const lt_tokenizer_t *t, lt_role role, const char *content, int32_t **ids, int *n, int *cap) {
  chatml_t c = {.tok = t, .ids = ids, .n = n, .cap = cap};
  return chatml_message(&c, role_name(role), content, LT_TOOLFMT_XML, NULL);
}

lt_role lt_role_parse(const char *r) {
  return !strcmp(r, "system")      ? LT_ROLE_SYSTEM
         : !strcmp(r, "user")      ? LT_ROLE_USER
         : !strcmp(r, "assistant") ? LT_ROLE_ASSISTANT
                                   : LT_ROLE_TOOL;
}
