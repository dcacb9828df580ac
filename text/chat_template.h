/* A model's own chat template: the `chat_template` of its
 * tokenizer_config.json (a string, or a list of named templates), rendered by
 * text/jinja with the config's bos_token and eos_token. */
#ifndef LT_TEXT_CHAT_TEMPLATE_H
#define LT_TEXT_CHAT_TEMPLATE_H

#include <cjson/cJSON.h>
#include <stddef.h>

typedef struct lt_chat_template lt_chat_template_t;

/* PATH: a model directory or its tokenizer_config.json.  LT_ENOENT when there
 * is no such file or it has no chat_template; LT_EFORMAT for a malformed file
 * or a template that does not parse (the message names the file and line). */
int lt_chat_template_load(const char *path, lt_chat_template_t **out);
void lt_chat_template_free(lt_chat_template_t *t);

/* Renders `vars` (a JSON object: messages, tools, add_generation_prompt, any
 * other template variable); bos_token and eos_token come from the config
 * unless vars sets them.  With a list of named templates, "tool_use" serves
 * vars with non-null tools when present, else "default".  A template that
 * raises returns LT_EINVAL with its message in lt_error_msg(). */
int lt_chat_template_render(const lt_chat_template_t *t, const cJSON *vars, char **text, size_t *len);

/* The source of the template render would use (for tool-format detection). */
const char *lt_chat_template_source(const lt_chat_template_t *t, int with_tools);

#endif
