#!/bin/bash
# The longer retrain check (docs/replay.md): the default job (configs/default.json, `make run`'s: SFT warm start,
# 30 learner steps, eval) into build/retrain-check/run, then `longtail retrain` of it into
# build/retrain-check/again, which must report every step bit-identical.  RETRAIN_RUN=DIR retrains an existing
# run instead.  Prints retrain's learner time against the live run's; build/retrain-check/result.json holds both.
set -u
cd "$(dirname "$0")/.."
BIN=${LT_BIN:-$PWD/bin/longtail}
OUT=build/retrain-check
RUN=${RETRAIN_RUN:-}
if [ -z "$RUN" ]; then
  rm -rf "$OUT"; mkdir -p "$OUT"
  RUN=$OUT/run
  t0=$(date +%s.%N)
  "$BIN" train configs/default.json --run-dir "$RUN" --set monitor.progress=off --set monitor.plot=false \
    > "$OUT/train.log" 2>&1 || { echo "retrain-check: the run failed (see $OUT/train.log)" >&2; exit 1; }
  echo "retrain-check: the run took $(echo "$(date +%s.%N) - $t0" | bc) s" >&2
else
  mkdir -p "$OUT"
fi
rm -rf "$OUT/again"
t0=$(date +%s.%N)
"$BIN" retrain "$RUN" --out "$OUT/again" | tee "$OUT/retrain.log"
rc=${PIPESTATUS[0]}
echo "retrain-check: retrain took $(echo "$(date +%s.%N) - $t0" | bc) s (exit $rc)" >&2
cp "$OUT/again/summary.json" "$OUT/result.json" 2>/dev/null
exit "$rc"
