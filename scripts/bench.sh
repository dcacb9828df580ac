#!/bin/sh
# Runs each benchmark program, collects the JSON object each prints on its last
# stdout line into bench/results.json (with commit, machine and date), and prints
# the table.  Benchmarks never fail the build: a failing program is reported and
# skipped.
#   scripts/bench.sh PROGRAM...
set -u
mkdir -p bench/out
parts=""
for b in "$@"; do
  name=$(basename "$b")
  echo "bench: $name" >&2
  if "$b" > bench/out/"$name".out 2> bench/out/"$name".err; then
    last=$(tail -n 1 bench/out/"$name".out)
    parts="$parts$last
"
  else
    echo "bench: $name FAILED (see bench/out/$name.err)" >&2
  fi
done
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
printf '%s' "$parts" | python3 -c '
import json, sys, datetime
merged = {}
for line in sys.stdin:
    line = line.strip()
    if line:
        merged.update(json.loads(line))
meta = {"commit": sys.argv[1], "machine": sys.argv[2], "cores": int(sys.argv[3]),
        "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ")}
out = {"meta": meta, "results": merged}
json.dump(out, open("bench/results.json", "w"), indent=2)
w = max([len(k) for k in merged] + [10])
print("%-*s  %s" % (w, "metric", "value"))
for k in sorted(merged):
    v = merged[k]
    print("%-*s  %s" % (w, k, ("%.6g" % v) if isinstance(v, float) else json.dumps(v)))
' "$commit" "$cpu" "$(nproc)"
