#!/bin/sh
# Runs each libFuzzer target for SECONDS on a scratch copy of its seed corpus
# (tests/fuzz/<name>/).  Fails on the first crash, leak or sanitizer report;
# reproducers land in build/fuzz/artifacts/.
#   scripts/fuzz.sh SECONDS TARGET...
set -eu
secs=$1; shift
mkdir -p build/fuzz/artifacts
for t in "$@"; do
  name=$(basename "$t")
  seeds=tests/fuzz/${name#fuzz_}
  work=build/fuzz/corpus/$name
  rm -rf "$work"; mkdir -p "$work"
  [ -d "$seeds" ] && cp "$seeds"/* "$work"/ 2>/dev/null || true
  echo "fuzz: $name for ${secs}s (seeds: $(ls "$work" | wc -l))"
  "$t" -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix=build/fuzz/artifacts/"$name"- "$work" 2>build/fuzz/"$name".log \
    || { tail -n 60 build/fuzz/"$name".log; echo "fuzz: $name FAILED"; exit 1; }
  grep -E '^stat::number_of_executed_units' build/fuzz/"$name".log | sed "s/^/fuzz: $name /"
done
echo "fuzz: all targets clean"
