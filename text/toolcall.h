/* The tool-call formats policies write, parsed into calls and written from
 * them (the one place that knows them):
 *   xml       <tool_call><name>NAME</name><arg name="KEY">VALUE</arg>…</tool_call>
 *             (Step 3.5 Flash §5.4; the builtin models' format)
 *   qwen      <tool_call>{"name": NAME, "arguments": {…}}</tool_call> (Qwen2.5/3, Hermes)
 *   deepseek  <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>
 *             (DeepSeek-V3; V3.1's NAME<｜tool▁sep｜>{…} too)
 * Parsing is strict and bounded: it is fed model output and, through the
 * fuzzer, arbitrary bytes. */
#ifndef LT_TEXT_TOOLCALL_H
#define LT_TEXT_TOOLCALL_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "util/buf.h"

#define LT_TOOLCALL_MAX_CALLS 16
#define LT_TOOLCALL_MAX_ARGS 32
#define LT_TOOLCALL_MAX_NAME 128
#define LT_TOOLCALL_MAX_VALUE 65536

/* A tool call parsed from the policy's text: its name and its arguments
 * (envs/ steps episodes with these). */
typedef struct {
  char *name;
  char *value;
} lt_tool_arg_t;

typedef struct {
  char *name;
  lt_tool_arg_t *args;
  int nargs;
} lt_tool_call_t;

typedef enum { LT_TOOLFMT_XML, LT_TOOLFMT_QWEN, LT_TOOLFMT_DEEPSEEK } lt_tool_format;

typedef struct {
  lt_tool_call_t calls[LT_TOOLCALL_MAX_CALLS];
  /* JSON formats: each call's arguments object as JSON text (NULL for xml);
   * calls[i].args hold its top-level values (strings as they are, anything
   * else as compact JSON). */
  char *arguments[LT_TOOLCALL_MAX_CALLS];
  int ncalls;
  int malformed; /* tool-call blocks that did not parse (format penalty) */
} lt_toolcalls_t;

/* Parses every xml <tool_call> block of text[0..len).  Values decode the XML
 * entities &lt; &gt; &amp; &quot; &apos;.  Returns 0 (malformed blocks are
 * counted, not errors) or LT_ENOMEM. */
int lt_toolcall_parse(const char *text, size_t len, lt_toolcalls_t *out);
/* The same for any format. */
int lt_toolcall_parse_as(lt_tool_format f, const char *text, size_t len, lt_toolcalls_t *out);
void lt_toolcalls_free(lt_toolcalls_t *tc);

/* Writes the calls of an assistant message (OpenAI's tool_calls list: each
 * {"function": {"name", "arguments"}}, arguments as JSON text or an object)
 * as the policy writes them in format f, so that lt_toolcall_parse_as reads
 * them back: xml values as they are (strings) or compact JSON; qwen and
 * deepseek arguments as compact JSON.  Calls without a string name are
 * skipped; failures show in out's error state. */
void lt_toolcall_write(lt_tool_format f, const cJSON *tool_calls, lt_buf_t *out);

/* "xml" | "qwen" | "deepseek" (LT_EINVAL otherwise; "auto" is the caller's). */
int lt_toolcall_format_parse(const char *name, lt_tool_format *out);
const char *lt_toolcall_format_name(lt_tool_format f);
/* The format a chat template teaches (rollout.tool_format "auto"): DeepSeek's
 * markers, else <tool_call> with JSON (qwen), else xml; NULL template: xml. */
lt_tool_format lt_toolcall_format_detect(const char *template_src);

#endif
