#!/bin/bash
# The objective ablation of docs/ablation.md: configs/ablation-<o>.json for each objective o and each seed, one
# run after another, then the tables of that page from each run's metrics (RUN/buffer.db).  A run whose
# summary.json exists is not run again, so an interrupted ablation goes on where it stopped.
#   scripts/ablation.sh [OUT]          (OUT: /tmp/abl)
#   ABL_SEEDS="1 2 3" ABL_OBJECTIVES="mispo tis ppo grpo gspo gspo-group" scripts/ablation.sh
#   ABL_SUMMARY_ONLY=1 scripts/ablation.sh OUT      (only the tables)
set -u
cd "$(dirname "$0")/.."
BIN=${LT_BIN:-$PWD/bin/longtail}
OUT=${1:-/tmp/abl}
SEEDS=${ABL_SEEDS:-1 2 3}
OBJS=${ABL_OBJECTIVES:-mispo tis ppo grpo gspo gspo-group}
mkdir -p "$OUT"
if [ -z "${ABL_SUMMARY_ONLY:-}" ]; then
  for s in $SEEDS; do
    for o in $OBJS; do
      run="$OUT/$o-s$s"
      [ -f "$run/summary.json" ] && continue
      rm -rf "$run"
      echo "ablation: $o seed $s -> $run ($(date -u +%H:%M:%S))" >&2
      start=$(date +%s)
      if ! nice -n 10 "$BIN" train "configs/ablation-$o.json" --run-dir "$run" --set run.seed="$s" --set monitor.progress=off \
          >"$OUT/$o-s$s.log" 2>&1; then
        echo "ablation: $o seed $s failed, see $OUT/$o-s$s.log" >&2
        exit 1
      fi
      echo "ablation: $o seed $s took $(( $(date +%s) - start )) s" >&2
    done
  done
fi
exec python3 - "$OUT" "$SEEDS" "$OBJS" <<'EOF'
import math, os, sqlite3, sys
out, seeds, objs = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()

def series(db, name):
    return dict(db.execute("SELECT step, value FROM metrics WHERE name = ? ORDER BY step", (name,)).fetchall())

def mean(v): return sum(v) / len(v) if v else float("nan")

def window(d, a, b): return mean([v for k, v in d.items() if a <= k <= b])

rows, per = [], {}
for o in objs:
    for s in seeds:
        path = os.path.join(out, f"{o}-s{s}", "buffer.db")
        if not os.path.exists(path):
            continue
        db = sqlite3.connect(path)
        acc, rew, gn = series(db, "eval/accuracy"), series(db, "reward/mean"), series(db, "actor/grad_norm")
        kept, clip = series(db, "mis/kept_fraction"), series(db, "actor/clip_frac")
        g = list(gn.values())
        m = mean(g)
        var = mean([(x - m) ** 2 for x in g]) if g else float("nan")  # population variance over the steps
        cv = math.sqrt(var) / m if g and m > 0 else float("nan")
        r = dict(o=o, s=s, acc=[acc.get(k, float("nan")) * 100 for k in (0, 10, 20, 30)],
                 rew=[window(rew, 1, 10), window(rew, 11, 20), window(rew, 21, 30)], gn=m, var=var, cv=cv,
                 kept=mean(list(kept.values())), clip=mean(list(clip.values())))
        rows.append(r)
        per.setdefault(o, []).append(r)

def mmm(v, f):
    return f"{f(mean(v))} ({f(min(v))}–{f(max(v))})"

p1, p3, p4 = (lambda x: f"{x:.1f}"), (lambda x: f"{x:.3f}"), (lambda x: f"{x:.4f}")
print("| objective | seeds | pass@1 step 10 | step 20 | step 30 | reward 21–30 | grad-norm CV | grad-norm variance | kept fraction |")
print("|---|---|---|---|---|---|---|---|---|")
for o, rs in per.items():
    print(f"| {o} | {len(rs)} | {mmm([r['acc'][1] for r in rs], p1)} | {mmm([r['acc'][2] for r in rs], p1)} | "
          f"{mmm([r['acc'][3] for r in rs], p1)} | {mmm([r['rew'][2] for r in rs], p3)} | {mmm([r['cv'] for r in rs], p3)} | "
          f"{mmm([r['var'] for r in rs], p4)} | {mmm([r['kept'] for r in rs], p3)} |")
print()
print("| objective | seed | held-out pass@1 at steps 0 / 10 / 20 / 30 (%) | training reward 1–10 / 11–20 / 21–30 | "
      "actor grad-norm mean, variance, CV | kept fraction | clip fraction |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['o']} | {r['s']} | {' / '.join(p1(x) for x in r['acc'])} | {' / '.join(p3(x) for x in r['rew'])} | "
          f"{r['gn']:.3f}, {r['var']:.4f}, {r['cv']:.2f} | {r['kept']:.3f} | {r['clip']:.3f} |")
EOF
