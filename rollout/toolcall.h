/* The XML tool-call format the policy writes (Step 3.5 Flash §5.4):
 *   <tool_call><name>NAME</name><arg name="KEY">VALUE</arg>…</tool_call>
 * Parsing is strict and bounded: it is fed model output and, through the
 * fuzzer, arbitrary bytes. */
#ifndef LT_ROLLOUT_TOOLCALL_H
#define LT_ROLLOUT_TOOLCALL_H

#include <stddef.h>

#include "envs/env.h"

#define LT_TOOLCALL_MAX_CALLS 16
#define LT_TOOLCALL_MAX_ARGS 32
#define LT_TOOLCALL_MAX_NAME 128
#define LT_TOOLCALL_MAX_VALUE 65536

typedef struct {
  lt_tool_call_t calls[LT_TOOLCALL_MAX_CALLS];
  int ncalls;
  int malformed; /* <tool_call> blocks that did not parse (format penalty) */
} lt_toolcalls_t;

/* Parses every <tool_call> block of text[0..len).  Values decode the XML
 * entities &lt; &gt; &amp; &quot; &apos;.  Returns 0 (malformed blocks are
 * counted, not errors) or LT_ENOMEM. */
int lt_toolcall_parse(const char *text, size_t len, lt_toolcalls_t *out);
void lt_toolcalls_free(lt_toolcalls_t *tc);

#endif
