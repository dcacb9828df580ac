// An agent program written against the official `openai` npm SDK (pinned in
// tests/integ/agents/package.json): the agent gateway's test
// (tests/integ/test_agent_gateway.c).  node openai_sdk_agent.mjs LOGFILE [concurrent]
//
// Reads its task from LONGTAIL_TASK, then: a plain call; a streamed call with
// usage (stream_options.include_usage) and a tool; when the policy called the
// tool, the tool's answer and a last call.  Appends one JSON line per answered
// call to LOGFILE ({key, prompt, content, completion_tokens}) and prints no
// reward: the domain's reward judges the final message.  `concurrent` makes the
// plain call as agent CLIs do (opencode): at once with a call asking for a
// session title, both logged with when they were sent and answered (start, end).
import fs from "node:fs";
import OpenAI from "openai";

const log = (rec) => fs.appendFileSync(process.argv[2], JSON.stringify(rec) + "\n");
const client = new OpenAI(); // OPENAI_BASE_URL and OPENAI_API_KEY from the environment
const row = JSON.parse(process.env.LONGTAIL_TASK);
const prompt = row.messages[row.messages.length - 1].content;
const key = process.env.OPENAI_API_KEY;
const tools = [{type: "function", function: {name: "add", description: "Adds two numbers",
  parameters: {type: "object", properties: {a: {type: "number"}, b: {type: "number"}}, required: ["a", "b"]}}}];

const messages = [...row.messages];
const timed = async (body) => {
  const start = Date.now();
  const r = await client.chat.completions.create(body);
  return {r, start, end: Date.now()};
};
const main = timed({model: "gpt-4o", messages, max_tokens: 32000});
if (process.argv[3] === "concurrent") {
  const title = await timed({model: "gpt-4o-mini", max_tokens: 50, messages: [
    {role: "system", content: "Generate a short title for the conversation that starts with the user's message."},
    {role: "user", content: prompt}]});
  const t = title.r;
  log({key, prompt, content: t.choices[0].message.content ?? "", completion_tokens: t.usage.completion_tokens,
       title: true, start: title.start, end: title.end});
}
const {r: first, start, end} = await main;
const m1 = first.choices[0].message;
log({key, prompt, content: m1.content ?? "", completion_tokens: first.usage.completion_tokens, tool_calls: m1.tool_calls ?? [],
     start, end});
messages.push({role: "assistant", content: m1.content ?? "", ...(m1.tool_calls ? {tool_calls: m1.tool_calls} : {})});
for (const c of m1.tool_calls ?? []) messages.push({role: "tool", tool_call_id: c.id, content: "3"});
if (!m1.tool_calls) messages.push({role: "user", content: "Use the add tool if it helps."});

const stream = await client.chat.completions.create({model: "gpt-4o", messages, tools, stream: true,
  stream_options: {include_usage: true}});
let content = "", usage = null;
const calls = [];
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  const d = chunk.choices[0]?.delta;
  if (d?.content) content += d.content;
  for (const t of d?.tool_calls ?? []) {
    calls[t.index] ??= {id: "", type: "function", function: {name: "", arguments: ""}};
    if (t.id) calls[t.index].id = t.id;
    if (t.function?.name) calls[t.index].function.name += t.function.name;
    if (t.function?.arguments) calls[t.index].function.arguments += t.function.arguments;
  }
}
if (!usage) throw new Error("no usage chunk in the stream");
log({key, prompt, content, completion_tokens: usage.completion_tokens, tool_calls: calls, streamed: true});
if (calls.length) {
  messages.push({role: "assistant", content, tool_calls: calls});
  for (const c of calls) messages.push({role: "tool", tool_call_id: c.id, content: "3"});
  const last = await client.chat.completions.create({model: "gpt-4o", messages, tools});
  const m3 = last.choices[0].message;
  log({key, prompt, content: m3.content ?? "", completion_tokens: last.usage.completion_tokens, tool_calls: m3.tool_calls ?? []});
}
