// The official `@anthropic-ai/sdk` (Messages API) and `openai` (Responses API) npm SDKs, pinned by
// tests/integ/agents/package-lock.json, against `longtail serve`:
//   node agent_apis.mjs MODEL_URL SCRIPTED_URL
// MODEL_URL serves the tiny builtin model (greedy at temperature 0, so a call and its stream must agree; its text
// is white space),
// SCRIPTED_URL the scripted policy whose answers end in a get_weather tool call.  The streams are parsed by the
// SDKs' own stream helpers.  Prints one "ok: ..." line per check; the first failed check prints "FAIL: ..." and
// exits 1.
import { createRequire } from "node:module";
const require = createRequire(process.env.LT_NODE_PATH ? process.env.LT_NODE_PATH + "/" : import.meta.url);
const Anthropic = require("@anthropic-ai/sdk").default ?? require("@anthropic-ai/sdk");
const OpenAI = require("openai").default ?? require("openai");

const [modelUrl, scriptedUrl] = process.argv.slice(2);
const claude = new Anthropic({ baseURL: modelUrl, apiKey: "unused", maxRetries: 0 });
const claudeTools = new Anthropic({ baseURL: scriptedUrl, apiKey: "unused", maxRetries: 0 });
const gpt = new OpenAI({ baseURL: modelUrl + "/v1", apiKey: "unused", maxRetries: 0 });
const gptTools = new OpenAI({ baseURL: scriptedUrl + "/v1", apiKey: "unused", maxRetries: 0 });

function check(cond, what) {
  if (!cond) {
    console.log("FAIL: " + what);
    process.exit(1);
  }
}
const ok = (what) => console.log("ok: " + what);
const json = JSON.stringify;
const refused = async (promise) => {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  return null;
};

// ---- Anthropic's Messages API ----

const text = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
const ask = { model: "claude-policy", system: "You are terse.", messages: [{ role: "user", content: "Tell me a story" }] };
const plain = await claude.messages.create({ ...ask, max_tokens: 24, temperature: 0 });
check(plain.type === "message" && plain.role === "assistant" && plain.content.length === 1 && plain.content[0].type === "text",
      "message shape " + json(plain));
check(["end_turn", "max_tokens"].includes(plain.stop_reason) && plain.usage.output_tokens >= 1, "stop_reason/usage " + json(plain));
const stream = claude.messages.stream({ ...ask, max_tokens: 24, temperature: 0 });
let pieces = 0;
stream.on("text", () => pieces++);
const streamed = await stream.finalMessage();
check(text(streamed) === text(plain), `streamed ${json(text(streamed))} != ${json(text(plain))}`);
check(streamed.usage.output_tokens === plain.usage.output_tokens && streamed.usage.input_tokens === plain.usage.input_tokens &&
      streamed.stop_reason === plain.stop_reason, "stream usage/stop " + json(streamed) + " vs " + json(plain));
check(pieces > 3, `only ${pieces} text events`);
ok(`messages: a call and its stream agree (${pieces} text events, ${plain.usage.output_tokens} tokens, ${plain.stop_reason})`);

const counted = await claude.messages.countTokens(ask);
check(counted.input_tokens === plain.usage.input_tokens, `count_tokens ${counted.input_tokens} != ${plain.usage.input_tokens}`);
const think = async (type) => (await claude.messages.countTokens({ ...ask, thinking: { type, budget_tokens: 1024 } })).input_tokens;
const on = await think("enabled"), off = await think("disabled");
check(on === counted.input_tokens && off === on + "<think>\n\n</think>\n\n".length,
      `thinking: enabled ${on}, disabled ${off}, absent ${counted.input_tokens} (the template's enable_thinking)`);
ok(`messages: count_tokens ${counted.input_tokens}; thinking disabled adds the template's empty think block`);

// The scripted policy's text ends in its tool call: a stop sequence inside it cuts there, streamed or not.
const scripted = { model: "m", max_tokens: 400, messages: [{ role: "user", content: "Weather?" }], stop_sequences: ["get_weather"] };
for (const cut of [await claudeTools.messages.create(scripted), await claudeTools.messages.stream(scripted).finalMessage()])
  check(cut.stop_reason === "stop_sequence" && cut.stop_sequence === "get_weather" && text(cut).endsWith('<tool_call>{"name": "') &&
        !text(cut).includes("get_weather"), "stop_sequences: " + json(cut));
ok("messages: stop_sequences end the text before the match, streamed or not");
const short = await claude.messages.create({ ...ask, max_tokens: 3, temperature: 0 });
check(short.stop_reason === "max_tokens" && short.usage.output_tokens === 3, "max_tokens 3: " + json(short));
ok("messages: max_tokens");

let e = await refused(claude.messages.create({ model: "m", max_tokens: 8, messages: [{ role: "user", content: [
  { type: "text", text: "What is this?" }, { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0K" } }] }] }));
check(e && e.status === 400 && e.error?.type === "error" && e.error?.error?.type === "invalid_request_error" &&
      /messages\[0\]\.content\[1\]\.type/.test(e.message) && /image/.test(e.message), "image block: " + (e && e.message));
e = await refused(claude.messages.create({ ...ask, max_tokens: 8, frobnicate: 1 }));
check(e && e.status === 400 && /frobnicate/.test(e.message), "unknown field: " + (e && e.message));
e = await refused(claude.messages.create({ model: "m", messages: ask.messages }));
check(e && e.status === 400 && /max_tokens/.test(e.message), "no max_tokens: " + (e && e.message));
ok("messages: image blocks, unknown fields and a missing max_tokens are 400s in Anthropic's error shape");

const weather = [{ name: "get_weather", description: "Weather for a city",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
  { type: "web_search_20250305", name: "web_search", max_uses: 3 }];
const msgs = [{ role: "user", content: "Weather in Paris?" }];
const t1 = await claudeTools.messages.create({ model: "m", max_tokens: 400, messages: msgs, tools: weather });
const use = t1.content.find((b) => b.type === "tool_use");
check(t1.stop_reason === "tool_use" && use && use.name === "get_weather" && json(use.input) === json({ city: "Paris" }) &&
      /^toolu_/.test(use.id), "tool_use " + json(t1));
msgs.push({ role: "assistant", content: t1.content },
          { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: [{ type: "text", text: "21 C" }] }] });
const t2 = await claudeTools.messages.stream({ model: "m", max_tokens: 400, messages: msgs, tools: weather }).finalMessage();
const use2 = t2.content.find((b) => b.type === "tool_use");
check(t2.stop_reason === "tool_use" && use2 && json(use2.input) === json({ city: "Paris" }) &&
      t2.usage.input_tokens > t1.usage.input_tokens, "streamed tool_use after a tool_result " + json(t2));
ok("messages: tool_use blocks, a tool_result round trip, input_json_delta parsed by the SDK");

// ---- OpenAI's Responses API ----

const req = { model: "gpt-policy", instructions: "You are terse.", input: "Tell me a story", max_output_tokens: 24, temperature: 0 };
const r = await gpt.responses.create(req);
check(r.object === "response" && r.status === (r.usage.output_tokens < 24 ? "completed" : "incomplete") && r.output.length === 1 && r.output[0].type === "message" &&
      r.output[0].content[0].type === "output_text" && r.output_text === r.output[0].content[0].text, "response shape " + json(r));
check(r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens, "usage " + json(r.usage));
const rs = gpt.responses.stream(req);
const types = [];
let seq = 0, deltas = "", final = null;
for await (const ev of rs) {
  check(ev.sequence_number === seq++, `sequence_number ${ev.sequence_number} of ${ev.type}`);
  if (types[types.length - 1] !== ev.type) types.push(ev.type);
  if (ev.type === "response.output_text.delta") deltas += ev.delta;
  if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
}
check(deltas === r.output_text && final.output[0].content[0].text === r.output_text && final.status === r.status &&
      final.usage.output_tokens === r.usage.output_tokens, `streamed ${json(deltas)} != ${json(r.output_text)}`);
check(json(types) === json(["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
  "response.output_text.delta", "response.output_text.done", "response.content_part.done", "response.output_item.done",
  r.status === "completed" ? "response.completed" : "response.incomplete"]), "event order " + json(types));
ok(`responses: a call and its stream agree (${seq} events, ${r.usage.output_tokens} tokens, ${r.status})`);

const rshort = await gpt.responses.create({ ...req, max_output_tokens: 3 });
check(rshort.status === "incomplete" && rshort.incomplete_details?.reason === "max_output_tokens" && rshort.usage.output_tokens === 3,
      "max_output_tokens 3: " + json(rshort));
const last = [];
for await (const ev of await gpt.responses.create({ ...req, max_output_tokens: 3, stream: true })) last.push(ev.type);
check(last[last.length - 1] === "response.incomplete", "streamed incomplete: " + json(last));
ok("responses: max_output_tokens makes an incomplete response");

e = await refused(gpt.responses.create({ ...req, previous_response_id: r.id }));
check(e && e.status === 400 && e.param === "previous_response_id", "previous_response_id: " + (e && e.message));
e = await refused(gpt.responses.create({ ...req, input: [{ role: "user", content: [{ type: "input_image", image_url: "data:," }] }] }));
check(e && e.status === 400 && e.param === "input[0].content[0].type", "input_image: " + (e && e.message));
ok("responses: previous_response_id and image input are 400s naming them");

const fn = [{ type: "function", name: "get_weather", description: "Weather for a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }, { type: "web_search" }];
const input = [{ role: "developer", content: "Answer with tools." }, { role: "user", content: [{ type: "input_text", text: "Weather in Paris?" }] }];
const c1 = await gptTools.responses.create({ model: "m", input, tools: fn, store: false, parallel_tool_calls: false });
const call = c1.output.find((o) => o.type === "function_call");
check(call && call.name === "get_weather" && json(JSON.parse(call.arguments)) === json({ city: "Paris" }) && call.call_id,
      "function_call " + json(c1.output));
input.push(...c1.output, { type: "function_call_output", call_id: call.call_id, output: "21 C" });
const cs = gptTools.responses.stream({ model: "m", input, tools: fn, store: false });
let argDeltas = 0;
for await (const ev of cs) argDeltas += ev.type === "response.function_call_arguments.delta";
const c2 = await cs.finalResponse();
const call2 = c2.output.find((o) => o.type === "function_call");
check(call2 && json(JSON.parse(call2.arguments)) === json({ city: "Paris" }) && argDeltas === 1 &&
      c2.usage.input_tokens > c1.usage.input_tokens, "streamed function_call after its output " + json(c2.output));
ok("responses: function_call items, a function_call_output round trip, streamed arguments");

const nope = await fetch(modelUrl + "/v1/nope");
const body = await nope.text();
check(nope.status === 404 && /POST \/v1\/messages,/.test(body) && /POST \/v1\/responses/.test(body) && /GET \/health/.test(body),
      "404 " + nope.status + " " + body);
ok("an unknown route's 404 names the routes");
