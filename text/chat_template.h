/* Chat rendering, one producer per rendering: a model's own chat template
 * (the `chat_template` of its tokenizer_config.json, a string or a list of
 * named templates, rendered by text/jinja with the config's bos_token and
 * eos_token), and ChatML for models without one, written by one writer into
 * text (lt_chat_render) or token ids (lt_chat_open/close/message), and the
 * Jinja source of the same ChatML written into checkpoints
 * (LT_CHATML_TEMPLATE, which a test renders against the writer's text).  The
 * agent loop, the OpenAI layer (gateway and `serve`) and SFT all render
 * through here. */
#ifndef LT_TEXT_CHAT_TEMPLATE_H
#define LT_TEXT_CHAT_TEMPLATE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"
#include "text/toolcall.h"

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

/* The template variables of a conversation, built in one place for every
 * caller: messages, tools (left out when NULL or an empty list: a request
 * with no tools renders as one without the field) and add_generation_prompt.
 * messages and tools are referenced, not copied.  NULL when out of memory. */
cJSON *lt_chat_vars(const cJSON *messages, const cJSON *tools, int add_generation_prompt);

/* Renders a conversation (messages with string content, assistant
 * tool_calls in OpenAI's shape) through t, or as ChatML when t is NULL:
 * tools listed in a system message, earlier calls written in tool format
 * fmt (lt_toolcall_write).  *text is malloc'd. */
int lt_chat_render(const lt_chat_template_t *t, lt_tool_format fmt, const cJSON *messages, const cJSON *tools,
                   int add_generation_prompt, char **text, size_t *len);

/* A conversation rendered for training through t (as lt_chat_render, without tools): the ids of its whole
 * render (without the generation prompt), and gen[i] = 1 where the policy would have generated ids[i]: each
 * trained assistant turn from the end of the generation prompt that opens it (the render of the messages
 * before it with add_generation_prompt) through its first stop token (lt_tokenizer_is_stop, or the config's
 * eos_token; the last turn to the end of the render when it has none).  The last message is trained and must be the assistant's; with
 * all_turns every assistant message is.  A template that renders a trained turn's earlier messages
 * differently once the turn follows is LT_EINVAL.  *ids and *gen are malloc'd. */
int lt_chat_render_ids(const lt_chat_template_t *t, lt_tool_format fmt, const lt_tokenizer_t *tok,
                       const cJSON *messages, int all_turns, int32_t **ids, uint8_t **gen, int *n);

/* ---- ChatML ----
 *   <|im_start|>ROLE\nCONTENT<|im_end|>\n
 * for both the byte tokenizer (whose special ids follow the 256 bytes) and
 * Qwen-family tokenizer.json files (which define these tokens). */
#define LT_CHATML_START "<|im_start|>"
#define LT_CHATML_END "<|im_end|>"
/* ChatML as a chat template (for checkpoints without one of their own);
 * renders tool-less conversations as lt_chat_render(NULL, ...) does. */
#define LT_CHATML_TEMPLATE                                             \
  "{% for message in messages %}{{ '" LT_CHATML_START                  \
  "' + message['role'] + '\\n' + message['content'] + '" LT_CHATML_END \
  "' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '" LT_CHATML_START "assistant\\n' }}{% endif %}"

typedef enum { LT_ROLE_SYSTEM, LT_ROLE_USER, LT_ROLE_ASSISTANT, LT_ROLE_TOOL } lt_role;

/* "system" | "user" | "assistant" | anything else: tool. */
lt_role lt_role_parse(const char *s);
/* ChatML as token ids, written as lt_chat_render writes its text, the special
 * tokens by id (the byte tokenizer never reads them from text): a message
 * header "<|im_start|>ROLE\n", a trailer "<|im_end|>\n", or a whole message
 * (header, content, trailer), appended to a growable array. */
int lt_chat_open(const lt_tokenizer_t *t, lt_role role, int32_t **ids, int *n, int *cap);
int lt_chat_close(const lt_tokenizer_t *t, int32_t **ids, int *n, int *cap);
int lt_chat_message(const lt_tokenizer_t *t, lt_role role, const char *content, int32_t **ids, int *n, int *cap);

#endif
