// An agent program written against the official `@anthropic-ai/sdk` npm SDK (pinned in
// tests/integ/agents/package.json), speaking Anthropic's Messages API to the agent gateway as Claude Code does:
// the agent gateway's test (tests/integ/test_agent_gateway.c).  node anthropic_sdk_agent.mjs LOGFILE
//
// Finds the gateway from ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY, or from the OpenAI variables (the episode's base
// URL less its /v1).  Reads its task from LONGTAIL_TASK, then, over one growing conversation: a beta call
// (/v1/messages?beta=true) with Claude Code's shape (system text blocks with cache_control, a system entry inside
// messages, thinking, context_management, metadata) and a tool; the tool's result, streamed through the SDK's
// MessageStream; the next result, streamed as raw events.  It checks count_tokens against the first call's
// input_tokens (exit 3 when they differ) and asks an unknown route once (logged as {key, route404}).  Appends one
// JSON line per answered call to LOGFILE ({key, prompt, content, completion_tokens, tool_calls, streamed}) and
// prints no reward: the domain's reward judges the final message.
import fs from "node:fs";
import Anthropic from "@anthropic-ai/sdk";

const log = (rec) => fs.appendFileSync(process.argv[2], JSON.stringify(rec) + "\n");
const base = process.env.ANTHROPIC_BASE_URL ?? process.env.OPENAI_BASE_URL.replace(/\/v1$/, "");
const key = process.env.ANTHROPIC_API_KEY ?? process.env.OPENAI_API_KEY;
const client = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });
const row = JSON.parse(process.env.LONGTAIL_TASK);
const prompt = row.messages[row.messages.length - 1].content;
const tools = [{ name: "add", description: "Adds two numbers",
  input_schema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] } }];
const system = [{ type: "text", text: "You add numbers.", cache_control: { type: "ephemeral" } }];
const text = (content) => content.filter((b) => b.type === "text").map((b) => b.text).join("");
const calls = (content) => content.filter((b) => b.type === "tool_use");
const answered = (content, usage, streamed) =>
  log({ key, prompt, content: text(content), completion_tokens: usage.output_tokens, tool_calls: calls(content), streamed });
// The tool's answer to every call of an assistant turn, then a word from the user.
const results = (content) => [...calls(content).map((c) => ({ type: "tool_result", tool_use_id: c.id, content: "3" })),
  { type: "text", text: "Go on." }];

const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: [{ type: "text", text: prompt }] }];
const first = await client.beta.messages.create({ model: "claude-policy", max_tokens: 8192, system, messages, tools,
  thinking: { type: "adaptive" }, context_management: { edits: [] }, metadata: { user_id: "test" },
  betas: ["context-management-2025-06-27"] });
answered(first.content, first.usage, false);
const counted = await client.messages.countTokens({ model: "claude-policy", system, messages, tools, thinking: { type: "adaptive" } });
if (counted.input_tokens !== first.usage.input_tokens) {
  console.error(`count_tokens ${counted.input_tokens} != input_tokens ${first.usage.input_tokens}`);
  process.exit(3);
}
const nope = await fetch(base + "/v1/nope", { method: "POST", headers: { "x-api-key": key }, body: "{}" });
log({ key, route404: { status: nope.status, body: await nope.text() } });

messages.push({ role: "assistant", content: first.content }, { role: "user", content: results(first.content) });
const stream = client.messages.stream({ model: "claude-policy", max_tokens: 32000, system, messages, tools });
const second = await stream.finalMessage();
answered(second.content, second.usage, true);

messages.push({ role: "assistant", content: second.content }, { role: "user", content: results(second.content) });
const events = await client.messages.create({ model: "claude-policy", max_tokens: 32000, system, messages, tools,
  stream: true });
const blocks = [];
let usage = null;
for await (const e of events) {
  if (e.type === "content_block_start") blocks[e.index] = { ...e.content_block, json: "" };
  else if (e.type === "content_block_delta" && e.delta.type === "text_delta") blocks[e.index].text += e.delta.text;
  else if (e.type === "content_block_delta" && e.delta.type === "input_json_delta") blocks[e.index].json += e.delta.partial_json;
  else if (e.type === "content_block_stop" && blocks[e.index].type === "tool_use") blocks[e.index].input = JSON.parse(blocks[e.index].json);
  else if (e.type === "message_delta") usage = e.usage;
}
if (!usage) throw new Error("no message_delta in the stream");
answered(blocks.map(({ json, ...b }) => b), usage, true);
