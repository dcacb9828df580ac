// An agent program written against the official `openai` npm SDK's Responses API (pinned in
// tests/integ/agents/package.json), speaking to the agent gateway as Codex CLI does: stateless (store: false), its
// whole history in `input` each call.  The agent gateway's test (tests/integ/test_agent_gateway.c).
//   node responses_sdk_agent.mjs LOGFILE
//
// Reads its task from LONGTAIL_TASK, then, over one growing input: a call with Codex's shape (instructions, a
// developer message of input_text parts, a function tool beside a web_search tool, reasoning, include,
// prompt_cache_key, parallel_tool_calls false); the function_call's output, streamed through the SDK's
// ResponseStream (the events' sequence numbers checked: exit 3 when they do not count up from 0); the next output,
// streamed as raw events.  Appends one JSON line per answered call to LOGFILE ({key, prompt, content,
// completion_tokens, tool_calls, streamed}) and prints no reward: the domain's reward judges the final message.
import fs from "node:fs";
import OpenAI from "openai";

const log = (rec) => fs.appendFileSync(process.argv[2], JSON.stringify(rec) + "\n");
const client = new OpenAI({ maxRetries: 0 }); // OPENAI_BASE_URL and OPENAI_API_KEY from the environment
const key = process.env.OPENAI_API_KEY;
const row = JSON.parse(process.env.LONGTAIL_TASK);
const prompt = row.messages[row.messages.length - 1].content;
const tools = [{ type: "function", name: "add", description: "Adds two numbers", strict: false,
  parameters: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] } },
  { type: "web_search" }];
const request = { model: "gpt-5-codex", instructions: "You add numbers.", tools, tool_choice: "auto",
  parallel_tool_calls: false, reasoning: { summary: "auto" }, store: false, include: ["reasoning.encrypted_content"],
  prompt_cache_key: key, max_output_tokens: 32000 };
const text = (output) => output.filter((o) => o.type === "message").flatMap((o) => o.content).map((p) => p.text).join("");
const calls = (output) => output.filter((o) => o.type === "function_call");
const answered = (output, usage, streamed) =>
  log({ key, prompt, content: text(output), completion_tokens: usage.output_tokens, tool_calls: calls(output), streamed });
const outputs = (output) => calls(output).map((c) => ({ type: "function_call_output", call_id: c.call_id, output: "3" }));

const input = [{ type: "message", role: "developer", content: [{ type: "input_text", text: "Be brief." }] },
  { type: "message", role: "user", content: [{ type: "input_text", text: prompt }] }];
const first = await client.responses.create({ ...request, input });
answered(first.output, first.usage, false);

input.push(...first.output, ...outputs(first.output));
const stream = client.responses.stream({ ...request, input });
let seq = 0;
for await (const e of stream) {
  if (e.sequence_number !== seq++) {
    console.error(`event ${e.type}: sequence_number ${e.sequence_number}, expected ${seq - 1}`);
    process.exit(3);
  }
}
const second = await stream.finalResponse();
answered(second.output, second.usage, true);

input.push(...second.output, ...outputs(second.output));
const events = await client.responses.create({ ...request, input, stream: true });
const done = [];
let usage = null;
for await (const e of events) {
  if (e.type === "response.output_item.done") done[e.output_index] = e.item;
  else if (e.type === "response.completed") usage = e.response.usage;
}
if (!usage) throw new Error("no response.completed in the stream");
answered(done, usage, true);
