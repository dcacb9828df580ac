// The official `openai` npm SDK (pinned by tests/integ/agents/package-lock.json) against
// `longtail serve`:
//   node sdk.mjs MODEL_URL SCRIPTED_URL
// MODEL_URL serves the tiny builtin model, SCRIPTED_URL the scripted policy
// whose answers end in a get_weather tool call.  Prints one "ok: ..." line per
// check; the first failed check prints "FAIL: ..." and exits 1.
import { createRequire } from "node:module";
const require = createRequire(process.env.LT_NODE_PATH ? process.env.LT_NODE_PATH + "/" : import.meta.url);
const OpenAI = require("openai").default ?? require("openai");

const [modelUrl, scriptedUrl] = process.argv.slice(2);
const policy = new OpenAI({ baseURL: modelUrl + "/v1", apiKey: "unused", maxRetries: 0 });
const scripted = new OpenAI({ baseURL: scriptedUrl + "/v1", apiKey: "unused", maxRetries: 0 });

function check(cond, what) {
  if (!cond) {
    console.log("FAIL: " + what);
    process.exit(1);
  }
}
const ok = (what) => console.log("ok: " + what);
const user = (content) => ({ role: "user", content });

// /v1/models: the current policy, whatever id is asked for.
const models = await policy.models.list();
check(models.data.length === 1 && models.data[0].id === "m", "models.list: " + JSON.stringify(models.data));
const one = await policy.models.retrieve("gpt-4o");
check(one.id === "gpt-4o" && one.object === "model", "models.retrieve: " + JSON.stringify(one));
ok("models");

// A multi-call conversation under an arbitrary model name, list-of-parts content.
const msgs = [{ role: "system", content: "You are terse." }, { role: "user", content: [{ type: "text", text: "Hi" }, { type: "text", text: " there" }] }];
const c1 = await policy.chat.completions.create({ model: "gpt-4o", messages: msgs, max_tokens: 8, seed: 1 });
check(c1.choices[0].message.role === "assistant" && typeof c1.choices[0].message.content === "string", "call 1 message");
msgs.push({ role: "assistant", content: c1.choices[0].message.content }, user("And then?"));
const c2 = await policy.chat.completions.create({ model: "whatever", messages: msgs, max_tokens: 8, seed: 2 });
check(c2.usage.prompt_tokens > c1.usage.prompt_tokens + 9, `call 2 prompt ${c2.usage.prompt_tokens} after ${c1.usage.prompt_tokens}`);
check(c2.usage.completion_tokens >= 1 && c2.usage.completion_tokens <= 8, "call 2 usage");
ok(`multi-call chat (prompts of ${c1.usage.prompt_tokens} and ${c2.usage.prompt_tokens} tokens)`);

// Streaming with include_usage: the same text and usage as the plain call with the same seed.
const req = { model: "m", messages: [user("Tell me a story")], max_tokens: 24, seed: 7, logprobs: true };
const plain = await policy.chat.completions.create(req);
const stream = await policy.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
let text = "", usage = null, finish = null, ntok = 0, chunks = 0;
for await (const ch of stream) {
  chunks++;
  if (ch.usage) usage = ch.usage;
  for (const c of ch.choices) {
    text += c.delta.content ?? "";
    ntok += c.logprobs?.content?.length ?? 0;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
check(text === plain.choices[0].message.content, `streamed text ${JSON.stringify(text)} != ${JSON.stringify(plain.choices[0].message.content)}`);
check(usage && usage.completion_tokens === plain.usage.completion_tokens && usage.prompt_tokens === plain.usage.prompt_tokens,
      "stream usage " + JSON.stringify(usage) + " vs " + JSON.stringify(plain.usage));
check(ntok === usage.completion_tokens && finish === plain.choices[0].finish_reason, `stream tokens ${ntok}, finish ${finish}`);
check(chunks > 3, `only ${chunks} chunks`);
ok(`stream with include_usage (${chunks} chunks, ${usage.completion_tokens} tokens, same text as the plain call)`);

// stop: the text up to the stop string's first occurrence, the stop string not returned,
// the tokens counted up to the one that completed it (compared as bytes: the
// untrained model writes invalid UTF-8 too).
const sreq = { model: "m", messages: [user("Once upon a time")], max_tokens: 48, seed: 3, logprobs: true };
const full = await policy.chat.completions.create(sreq);
const ents = full.choices[0].logprobs.content;
const starts = [], bytes = [];
for (const e of ents) starts.push(bytes.length), bytes.push(...e.bytes);
const limit = full.choices[0].finish_reason === "stop" ? starts[starts.length - 1] : bytes.length; // not in the stop token
let at = -1;
for (let i = 3; i < limit && at < 0; i++) if (bytes[i] > 0x20 && bytes[i] < 0x7f && bytes[i] !== 0x3c) at = i;
check(at >= 0, "no stop candidate in " + JSON.stringify(bytes));
const stopStr = String.fromCharCode(bytes[at]);
at = bytes.indexOf(bytes[at]);
const cut = await policy.chat.completions.create({ ...sreq, stop: [stopStr, "never-there"] });
const expect = Buffer.from(bytes.slice(0, at)).toString();
check(cut.choices[0].message.content === expect, `stop ${JSON.stringify(stopStr)}: ${JSON.stringify(cut.choices[0].message.content)} vs ${JSON.stringify(expect)}`);
check(cut.choices[0].finish_reason === "stop", "stop finish_reason " + cut.choices[0].finish_reason);
const want = starts.filter((o) => o <= at).length;
check(cut.usage.completion_tokens === want && cut.choices[0].logprobs.content.length === want,
      `stop usage ${cut.usage.completion_tokens}, want ${want}`);
ok(`stop ${JSON.stringify(stopStr)} (${want} of ${full.usage.completion_tokens} tokens kept)`);

// n = 2: two choices, usage counts both.
const two = await policy.chat.completions.create({ model: "m", messages: [user("Pick")], n: 2, max_tokens: 6, seed: 5, logprobs: true });
check(two.choices.length === 2 && two.choices[0].index === 0 && two.choices[1].index === 1, "n=2 choices");
const both = two.choices[0].logprobs.content.length + two.choices[1].logprobs.content.length;
check(two.usage.completion_tokens === both, `n=2 usage ${two.usage.completion_tokens} vs ${both}`);
ok("n=2");

// top_logprobs: real alternatives, most likely first, the sampled token's logprob consistent with them.
const tl = await policy.chat.completions.create({ model: "m", messages: [user("Hi")], max_tokens: 6, seed: 9, logprobs: true, top_logprobs: 3 });
for (const e of tl.choices[0].logprobs.content) {
  check(e.top_logprobs.length === 3, "3 alternatives");
  const lps = e.top_logprobs.map((t) => t.logprob);
  check(lps[0] >= lps[1] && lps[1] >= lps[2] && lps[0] >= e.logprob - 1e-5, "sorted alternatives " + JSON.stringify(lps));
  check(lps.reduce((a, b) => a + Math.exp(b), 0) < 1 + 1e-5, "alternatives are probabilities");
  const same = e.top_logprobs.find((t) => t.token === e.token && t.bytes.join() === e.bytes.join());
  check(!same || Math.abs(same.logprob - e.logprob) < 1e-5, "the sampled token among its alternatives has its own logprob");
}
ok("top_logprobs");

// An unsupported field is a 400 naming it.
try {
  await policy.chat.completions.create({ model: "m", messages: [user("Hi")], response_format: { type: "json_object" } });
  check(false, "response_format accepted");
} catch (e) {
  check(e.status === 400 && e.error?.param === "response_format", "400 for response_format: " + e.status + " " + JSON.stringify(e.error));
}
ok("400 names an unsupported field");

// Tools: the policy's call parsed into message.tool_calls, then the result sent back.
const tools = [{ type: "function", function: { name: "get_weather", description: "Weather of a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
const conv = [user("Weather in Paris?")];
const t1 = await scripted.chat.completions.create({ model: "agent", messages: conv, tools, max_tokens: 200, seed: 1 });
const m1 = t1.choices[0].message;
check(t1.choices[0].finish_reason === "tool_calls" && m1.tool_calls?.length === 1, "tool call: " + JSON.stringify(t1.choices[0]));
check(m1.tool_calls[0].type === "function" && m1.tool_calls[0].function.name === "get_weather" &&
      JSON.parse(m1.tool_calls[0].function.arguments).city === "Paris" && m1.tool_calls[0].id, "tool call shape");
check(!(m1.content ?? "").includes("<tool_call>"), "the call's markup is not in the content");
conv.push(m1, { role: "tool", tool_call_id: m1.tool_calls[0].id, content: "18 C, sunny" });
const t2 = await scripted.chat.completions.create({ model: "agent", messages: conv, tools, max_tokens: 200, seed: 2 });
check(t2.usage.prompt_tokens > t1.usage.prompt_tokens + "18 C, sunny".length, "tool result rendered into the prompt");
const ts = await scripted.chat.completions.create({ model: "agent", messages: conv, tools, max_tokens: 200, seed: 2, stream: true });
let calls = [], tfin = null;
for await (const ch of ts)
  for (const c of ch.choices) {
    for (const tc of c.delta.tool_calls ?? []) calls.push(tc);
    if (c.finish_reason) tfin = c.finish_reason;
  }
check(tfin === "tool_calls" && calls.length === 1 && calls[0].index === 0 && calls[0].function.name === "get_weather",
      "streamed tool call " + JSON.stringify(calls));
ok("tools round trip (plain and streamed)");
