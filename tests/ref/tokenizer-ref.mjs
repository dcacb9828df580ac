// Reference encodings from Hugging Face's tokenizers.js, for cross-checking
// longtail's BPE:  node tests/ref/tokenizer-ref.mjs TOKENIZER.json < lines.jsonl
// Each input line {"text": ...} becomes {"ids": [...]} (no special tokens added).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
const require = createRequire(process.env.LT_NODE_PATH ? process.env.LT_NODE_PATH + "/" : import.meta.url);
const { Tokenizer } = require("@huggingface/tokenizers");
const json = JSON.parse(readFileSync(process.argv[2], "utf8"));
const tok = new Tokenizer(json, {});
const input = readFileSync(0, "utf8").split("\n").filter((l) => l.trim());
for (const line of input) {
  const { text } = JSON.parse(line);
  const enc = tok.encode(text, { add_special_tokens: false });
  process.stdout.write(JSON.stringify({ ids: enc.ids }) + "\n");
}
