// Reference renderings from Hugging Face's @huggingface/jinja, for
// cross-checking `longtail template`:
//   node tests/ref/template-ref.mjs tokenizer_config.json < lines.jsonl
// Each line's keys are the template's variables, after bos_token and
// eos_token from the config; it prints {"text"} or {"error"} per line.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
const require = createRequire(process.env.LT_NODE_PATH ? process.env.LT_NODE_PATH + "/" : import.meta.url);
const { Template } = require("@huggingface/jinja");
const cfg = JSON.parse(readFileSync(process.argv[2], "utf8"));
const token = (v) => (v && typeof v === "object" ? v.content ?? null : v);
let templates = cfg.chat_template;
if (typeof templates === "string") templates = [{ name: "default", template: templates }];
const compiled = new Map(templates.map((t) => [t.name, new Template(t.template)]));
const base = {};
if ("bos_token" in cfg) base.bos_token = token(cfg.bos_token);
if ("eos_token" in cfg) base.eos_token = token(cfg.eos_token);
const input = readFileSync(0, "utf8").split("\n").filter((l) => l.trim());
for (const line of input) {
  const vars = JSON.parse(line);
  const name = vars.tools != null && compiled.has("tool_use") ? "tool_use" : "default";
  let out;
  try {
    out = { text: compiled.get(name).render({ ...base, ...vars }) };
  } catch (e) {
    out = { error: e.message };
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
