/* A Jinja subset for chat templates, matching Hugging Face's renderer
 * (@huggingface/jinja 0.5.11, the one transformers.js uses) on the templates
 * of current open models: statements (if/elif/else, for with loop.* and else,
 * set incl. block set and tuples, macro, call, filter, break/continue),
 * expressions (arithmetic, comparisons, in, ~, ternaries, slicing, literals),
 * filters, tests, string and mapping methods, namespace(), range(),
 * raise_exception(), and whitespace control with trim_blocks/lstrip_blocks on.
 * docs/chat-templates.md lists what is supported and where it differs.
 *
 * Rendering is bounded (memory, output, steps, nesting), so a hostile
 * template or input ends with an error, never a crash or a stall. */
#ifndef LT_TEXT_JINJA_H
#define LT_TEXT_JINJA_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lt_jinja lt_jinja_t;

typedef struct {
  size_t max_memory;  /* bytes the evaluator may allocate (0: 256 MiB) */
  size_t max_output;  /* bytes of rendered text (0: 64 MiB) */
  uint64_t max_steps; /* evaluation steps (0: 100 million) */
} lt_jinja_limits_t;

/* Parses a template.  A syntax error is LT_EFORMAT with "template:LINE: what". */
int lt_jinja_compile(const char *src, size_t len, lt_jinja_t **out);
void lt_jinja_free(lt_jinja_t *t);

/* Renders with the members of the JSON object `vars` as variables (NULL: none).
 * *out is malloc'd and NUL-terminated.  A template that raises (raise_exception,
 * a type error, a limit) returns LT_EINVAL with its message in lt_error_msg();
 * the message of raise_exception("...") is exactly its argument. */
int lt_jinja_render(const lt_jinja_t *t, const cJSON *vars, const lt_jinja_limits_t *limits, char **out, size_t *len);

#endif
