/* The JSON protocol of the environments that live outside longtail: `external`
 * (a program in the sandbox, one line per call) and `http` (an endpoint, one
 * POST per call) carry the same requests and answers (docs/envs.md). */
#include <stdlib.h>
#include <string.h>

#include "envs/internal.h"
#include "util/error.h"

/* Problems are the environment's: the spec only says which one. */
int lt__envproto_sample(void *state, uint64_t index, int eval, cJSON **spec) {
  *spec = cJSON_CreateObject();
  if (!*spec) return lt_error_set(LT_ENOMEM, "out of memory");
  cJSON_AddNumberToObject(*spec, "index", (double)index);
  cJSON_AddBoolToObject(*spec, "eval", eval);
  return 0;
}

cJSON *lt__envproto_reset(const cJSON *spec, uint64_t seed) {
  cJSON *req = cJSON_CreateObject();
  cJSON_AddStringToObject(req, "op", "reset");
  cJSON_AddItemToObject(req, "index", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(spec, "index"), 1));
  cJSON_AddItemToObject(req, "eval", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(spec, "eval"), 1));
  cJSON_AddNumberToObject(req, "seed", (double)(seed & ((1ull << 53) - 1)));
  return req;
}

cJSON *lt__envproto_step(const lt_episode_t *ep, const char *text, const lt_tool_call_t *calls, int ncalls) {
  cJSON *req = cJSON_CreateObject(), *tc = cJSON_CreateArray();
  cJSON_AddStringToObject(req, "op", "step");
  cJSON_AddItemToObject(req, "state", cJSON_Duplicate(ep->data, 1));
  cJSON_AddStringToObject(req, "text", text);
  for (int i = 0; i < ncalls; i++) {
    cJSON *c = cJSON_CreateObject(), *args = cJSON_AddObjectToObject(c, "args");
    cJSON_AddStringToObject(c, "name", calls[i].name);
    for (int k = 0; k < calls[i].nargs; k++)
      cJSON_AddStringToObject(args, calls[i].args[k].name, calls[i].args[k].value);
    cJSON_AddItemToArray(tc, c);
  }
  cJSON_AddItemToObject(req, "tool_calls", tc);
  return req;
}

int lt__envproto_parse(const char *domain, const char *text, size_t len, cJSON **answer) {
  *answer = cJSON_ParseWithLength(text, len);
  const cJSON *err = cJSON_GetObjectItemCaseSensitive(*answer, "error");
  int rc = 0;
  if (!cJSON_IsObject(*answer))
    rc = lt_error_set(LT_EPROTO, "envs.%s: the answer is not a JSON object: %.200s", domain, text);
  else if (err) rc = lt_error_set(LT_EREMOTE, "envs.%s: %s", domain, cJSON_IsString(err) ? err->valuestring : "error");
  if (rc < 0) {
    cJSON_Delete(*answer);
    *answer = NULL;
  }
  return rc;
}

static void merge_reference(lt_episode_t *ep, const cJSON *ref) {
  if (!cJSON_IsObject(ref)) return;
  for (const cJSON *k = ref->child; k; k = k->next) {
    cJSON_DeleteItemFromObjectCaseSensitive(ep->reference, k->string);
    cJSON_AddItemToObject(ep->reference, k->string, cJSON_Duplicate(k, 1));
  }
}

static void keep_state(lt_episode_t *ep, cJSON *answer) {
  cJSON_Delete(ep->data);
  cJSON *st = cJSON_DetachItemFromObjectCaseSensitive(answer, "state");
  ep->data = st ? st : cJSON_CreateNull();
}

int lt__envproto_opened(lt_episode_t *ep, const char *domain, cJSON *answer, cJSON **messages) {
  cJSON *msgs = cJSON_DetachItemFromObjectCaseSensitive(answer, "messages");
  if (!cJSON_IsArray(msgs) || !msgs->child) {
    cJSON_Delete(msgs);
    return lt_error_set(LT_EPROTO, "envs.%s: reset must answer \"messages\": [{\"role\", \"content\"}, ...]", domain);
  }
  if (!ep->reference) ep->reference = cJSON_CreateObject();
  merge_reference(ep, cJSON_GetObjectItemCaseSensitive(answer, "reference"));
  keep_state(ep, answer);
  *messages = msgs;
  return 0;
}

void lt__envproto_stepped(lt_episode_t *ep, cJSON *answer, int ncalls, lt_env_step_t *res) {
  if (!res->observations) res->observations = cJSON_CreateArray();
  const cJSON *obs = cJSON_GetObjectItemCaseSensitive(answer, "observations");
  const cJSON *tr = cJSON_GetObjectItemCaseSensitive(answer, "truncated");
  for (const cJSON *o = cJSON_IsArray(obs) ? obs->child : NULL; o; o = o->next) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name"),
                *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(o, "role");
    if (!cJSON_IsString(content)) continue;
    cJSON *m = cJSON_CreateObject();
    /* "user": a simulated user speaks (multi-party environments); anything else is a tool result. */
    cJSON_AddStringToObject(m, "role", cJSON_IsString(role) && !strcmp(role->valuestring, "user") ? "user" : "tool");
    cJSON_AddStringToObject(m, "name", cJSON_IsString(name) ? name->valuestring : "");
    cJSON_AddStringToObject(m, "content", content->valuestring);
    cJSON_AddItemToArray(res->observations, m);
  }
  /* A reply without tool calls is final, whatever the environment says. */
  res->done = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(answer, "done")) || ncalls == 0;
  if (cJSON_IsString(tr) && strcmp(tr->valuestring, "tool_timeout") == 0) res->timeout = "tool_timeout", res->done = 1;
  merge_reference(ep, cJSON_GetObjectItemCaseSensitive(answer, "reference"));
  keep_state(ep, answer);
}

void lt__envproto_close(lt_episode_t *ep) {
  cJSON_Delete(ep->data);
  ep->data = NULL;
}
