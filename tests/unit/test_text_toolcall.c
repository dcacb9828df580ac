/* Tool-call formats: xml (seed 001), qwen (<tool_call>{json}</tool_call>) and
 * DeepSeek's V3 and V3.1 markers, malformed blocks counted, the format a
 * chat template teaches, and writing calls back in each format. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "text/toolcall.h"
#include "util/error.h"

static void parse(lt_tool_format f, const char *text, lt_toolcalls_t *tc) {
  cr_assert_eq(lt_toolcall_parse_as(f, text, strlen(text), tc), 0, "%s", lt_error_msg());
}

Test(toolcall, xml_values_are_entity_decoded) {
  lt_toolcalls_t tc;
  parse(LT_TOOLFMT_XML,
        "x <tool_call><name>run</name><arg name=\"cmd\">a &lt; b</arg></tool_call> <tool_call>oops</tool_call>", &tc);
  cr_assert_eq(tc.ncalls, 1);
  cr_expect_eq(tc.malformed, 1);
  cr_expect_str_eq(tc.calls[0].name, "run");
  cr_expect_str_eq(tc.calls[0].args[0].value, "a < b");
  cr_expect_null(tc.arguments[0]);
  lt_toolcalls_free(&tc);
}

Test(toolcall, qwen_json_calls_keep_argument_types) {
  lt_toolcalls_t tc;
  parse(
      LT_TOOLFMT_QWEN,
      "<think>hm</think>Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3, "
      "\"opts\": {\"unit\": \"c\"}}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": \"{\\\"q\\\": \\\"x\\\"}\"}\n"
      "</tool_call><tool_call>{\"name\": \"bad\", \"arguments\": {</tool_call><tool_call>{\"arguments\": {}}</tool_call>"
      "<tool_call>{\"name\": \"noargs\"}</tool_call><tool_call>{\"name\": \"unterminated\"",
      &tc);
  cr_assert_eq(tc.ncalls, 3);
  cr_expect_eq(tc.malformed, 3); /* broken JSON, no name, no closing tag */
  cr_expect_str_eq(tc.calls[0].name, "get_weather");
  cr_expect_str_eq(tc.arguments[0], "{\"city\":\"Paris\",\"days\":3,\"opts\":{\"unit\":\"c\"}}");
  cr_assert_eq(tc.calls[0].nargs, 3);
  cr_expect_str_eq(tc.calls[0].args[0].value, "Paris");
  cr_expect_str_eq(tc.calls[0].args[1].value, "3");
  cr_expect_str_eq(tc.calls[0].args[2].value, "{\"unit\":\"c\"}");
  cr_expect_str_eq(tc.calls[1].name, "search"); /* arguments given as a JSON string */
  cr_expect_str_eq(tc.arguments[1], "{\"q\":\"x\"}");
  cr_expect_str_eq(tc.calls[2].name, "noargs");
  cr_expect_str_eq(tc.arguments[2], "{}");
  lt_toolcalls_free(&tc);
}

Test(toolcall, deepseek_v3_and_v31_markers) {
  lt_toolcalls_t tc;
  parse(
      LT_TOOLFMT_DEEPSEEK,
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Oslo\"}\n```"
      "<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>search<｜tool▁sep｜>{\"q\": \"news\", \"k\": 5}<｜tool▁call▁end｜>"
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>broken\n```json\n{nope\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      &tc);
  cr_assert_eq(tc.ncalls, 2);
  cr_expect_eq(tc.malformed, 1);
  cr_expect_str_eq(tc.calls[0].name, "get_weather");
  cr_expect_str_eq(tc.arguments[0], "{\"city\":\"Oslo\"}");
  cr_expect_str_eq(tc.calls[1].name, "search");
  cr_expect_str_eq(tc.arguments[1], "{\"q\":\"news\",\"k\":5}");
  cr_expect_str_eq(tc.calls[1].args[1].value, "5");
  lt_toolcalls_free(&tc);
}

Test(toolcall, bounds_hold) {
  /* more calls than fit are counted malformed, never stored */
  char text[8192] = "";
  for (int i = 0; i < LT_TOOLCALL_MAX_CALLS + 3; i++)
    strcat(text, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
  lt_toolcalls_t tc;
  parse(LT_TOOLFMT_QWEN, text, &tc);
  cr_expect_eq(tc.ncalls, LT_TOOLCALL_MAX_CALLS);
  cr_expect_eq(tc.malformed, 3);
  lt_toolcalls_free(&tc);
  /* a name that is not an identifier */
  parse(LT_TOOLFMT_QWEN, "<tool_call>{\"name\": \"rm -rf /\", \"arguments\": {}}</tool_call>", &tc);
  cr_expect_eq(tc.ncalls, 0);
  cr_expect_eq(tc.malformed, 1);
  lt_toolcalls_free(&tc);
}

Test(toolcall, formats_by_name_and_from_templates) {
  lt_tool_format f;
  cr_expect_eq(lt_toolcall_format_parse("qwen", &f), 0);
  cr_expect_eq(f, LT_TOOLFMT_QWEN);
  cr_expect_eq(lt_toolcall_format_parse("deepseek", &f), 0);
  cr_expect_eq(f, LT_TOOLFMT_DEEPSEEK);
  cr_expect_eq(lt_toolcall_format_parse("hermes", &f), LT_EINVAL);
  cr_expect_str_eq(lt_toolcall_format_name(LT_TOOLFMT_XML), "xml");
  cr_expect_eq(lt_toolcall_format_detect(NULL), LT_TOOLFMT_XML);
  cr_expect_eq(lt_toolcall_format_detect("{{- '<tool_call>\\n{\"name\": \"' }}{{ tool_call.name }}"), LT_TOOLFMT_QWEN);
  cr_expect_eq(
      lt_toolcall_format_detect("{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type']}}"),
      LT_TOOLFMT_DEEPSEEK);
  cr_expect_eq(lt_toolcall_format_detect("{% for m in messages %}{{ m.content }}{% endfor %}"), LT_TOOLFMT_XML);
}

/* What lt_toolcall_write writes, lt_toolcall_parse_as reads back, in every format. */
Test(toolcall, written_calls_parse_back_in_every_format) {
  cJSON *calls = cJSON_Parse(
      "[{\"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 3}\"}},"
      " {\"function\": {\"name\": \"search\", \"arguments\": {\"q\": \"x y\"}}}]");
  cr_assert_not_null(calls);
  for (int f = LT_TOOLFMT_XML; f <= LT_TOOLFMT_DEEPSEEK; f++) {
    lt_buf_t b = {0};
    lt_toolcall_write((lt_tool_format)f, calls, &b);
    cr_assert_eq(lt_buf_ok(&b), 0);
    lt_toolcalls_t tc;
    parse((lt_tool_format)f, b.data, &tc);
    cr_assert_eq(tc.ncalls, 2, "%s: %s", lt_toolcall_format_name((lt_tool_format)f), b.data);
    cr_expect_eq(tc.malformed, 0);
    cr_expect_str_eq(tc.calls[0].name, "get_weather");
    cr_assert_eq(tc.calls[0].nargs, 2);
    cr_expect_str_eq(tc.calls[0].args[0].name, "city");
    cr_expect_str_eq(tc.calls[0].args[0].value, "Paris");
    cr_expect_str_eq(tc.calls[0].args[1].value, "3");
    cr_expect_str_eq(tc.calls[1].name, "search");
    cr_expect_str_eq(tc.calls[1].args[0].value, "x y");
    if (f != LT_TOOLFMT_XML) cr_expect_str_eq(tc.arguments[0], "{\"city\":\"Paris\",\"days\":3}");
    if (f == LT_TOOLFMT_DEEPSEEK)
      cr_expect_str_eq(b.data,
                       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                       "{\"city\":\"Paris\",\"days\":3}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
                       "<｜tool▁sep｜>search\n```json\n{\"q\":\"x y\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
    lt_toolcalls_free(&tc);
    lt_buf_free(&b);
  }
  cJSON_Delete(calls);
}
