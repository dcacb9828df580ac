#!/bin/bash
# Soak: SOAK_WORKERS worker processes x 8 slots on loopback against one daemon
# for SOAK_SECONDS.  The workers run the scripted policy (long-tailed turn
# lengths, simulated token time) instead of the builtin engine, so that the
# daemon, not inference, is what is soaked; the learner is off.  Then SIGTERM
# (drain) and checks: every result stored once, the buffer intact, the
# daemon's resident memory flat after warm-up, the pipeline overhead's p99.
# Writes build/soak/result.json; exit 1 if an invariant broke.
set -u
cd "$(dirname "$0")/.."
BIN=${LT_BIN:-$PWD/bin/longtail}
SECS=${SOAK_SECONDS:-600}
N=${SOAK_WORKERS:-64}
OUT=build/soak
rm -rf "$OUT"; mkdir -p "$OUT"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$OUT/cfg.json" <<EOF
{"run": {"seed": 5}, "model": {"init": "configs/models/tiny-moe.json"},
 "envs": {"arith": {"type": "arith", "params": {"digits_min": 1, "digits_max": 3}}},
 "learner": {"enabled": false},
 "scheduler": {"group_size": 4, "max_tasks": 0, "dynamic_filter": false, "task_timeout_s": 60, "on_shutdown": "drain", "drain_s": 60},
 "rollout": {"max_new_tokens": 64, "max_turns": 1},
 "workers": {"spawn_local": 0, "backend": "scripted", "slots": 8,
             "scripted": {"mean_tokens": 24, "tail_fraction": 0.05, "tail_factor": 16, "token_us": 20000}},
 "transport": {"endpoint": "tcp://127.0.0.1:$port", "heartbeat_ms": 1000, "liveness": 5},
 "checkpoint": {"every": 0}, "eval": {"every": 0}, "monitor": {"progress": "off", "plot": false}}
EOF
. scripts/load.sh
start_load "$port" "$N" 8 soak
echo "soak: $N workers x 8 slots, ${SECS}s, daemon pid $d" >&2
: > "$OUT/rss.tsv"
t0=$(date +%s)
while [ $(( $(date +%s) - t0 )) -lt "$SECS" ] && kill -0 $d 2>/dev/null; do
  rss=$(awk '/VmRSS/ {print $2}' /proc/$d/status 2>/dev/null)
  echo -e "$(( $(date +%s) - t0 ))\t${rss:-0}" >> "$OUT/rss.tsv"
  sleep 5
done
kill -TERM $d 2>/dev/null
for _ in $(seq 600); do kill -0 $d 2>/dev/null || break; sleep 0.2; done
wait $d; st=$?
kill -TERM "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
db=$OUT/run/buffer.db
python3 - "$db" "$OUT/rss.tsv" "$st" "$N" "$SECS" <<'EOF' | tee "$OUT/result.json"
import json, sqlite3, sys
db, rss_path, st, n, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
c = sqlite3.connect(db)
q = lambda s: c.execute(s).fetchone()[0]
done = q("SELECT count(*) FROM tasks WHERE status='done'")
stored = q("SELECT count(DISTINCT task_id) FROM trajectories")
dups_stored = q("SELECT count(*) - count(DISTINCT task_id) FROM trajectories")
open_tasks = q("SELECT count(*) FROM tasks WHERE status = 'dispatched'")  # queued ones wait for a resume
integrity = q("PRAGMA integrity_check")
p99 = [r[0] for r in c.execute("SELECT value FROM metrics WHERE name='dispatch/overhead_p99_ms' ORDER BY time_ms")]
p50 = [r[0] for r in c.execute("SELECT value FROM metrics WHERE name='dispatch/overhead_p50_ms' ORDER BY time_ms")]
rss = [(int(a), int(b) / 1024) for a, b in (l.split() for l in open(rss_path)) if int(b) > 0]
warm = [m for t, m in rss if t >= secs * 0.2]
growth = (warm[-1] - warm[0]) / warm[0] if len(warm) > 1 else None
srt = sorted(p99)
res = {"workers": n, "slots_per_worker": 8, "seconds": secs, "policy": "scripted (not the builtin engine)",
       "daemon_exit": st, "tasks_done": done, "trajectories_stored": stored, "trajectories_per_s": round(stored / secs, 1),
       "duplicates_stored": dups_stored, "dispatched_after_drain": open_tasks, "integrity": integrity,
       "rss_mb_after_warmup": round(warm[0], 1) if warm else None, "rss_mb_end": round(warm[-1], 1) if warm else None,
       "rss_growth_after_warmup": round(growth, 3) if growth is not None else None,
       "overhead_p50_ms_median": round(sorted(p50)[len(p50) // 2], 2) if p50 else None,
       "overhead_p99_ms_median": round(srt[len(srt) // 2], 2) if srt else None,
       "overhead_p99_ms_max": round(srt[-1], 2) if srt else None}
res["ok"] = (st == 0 and done == stored and dups_stored == 0 and open_tasks == 0 and integrity == "ok"
             and (growth is None or growth < 0.25))
print(json.dumps(res))
sys.exit(0 if res["ok"] else 1)
EOF
