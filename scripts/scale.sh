#!/bin/bash
# Scale: many sessions on one daemon (issue 22, seed 004 §3.2's 32,000 environments).
# SCALE_WORKERS `longtail worker --backend scripted --slots SCALE_SLOTS` processes on
# loopback; the scripted policy takes token_us per token, delivered a turn at a time
# (as an OpenAI-compatible server answers), so the sessions produce a known rate:
#   sessions / (mean turn tokens x token_us)
# The learner is off.  After SCALE_SECONDS the daemon is stopped (abort: in-flight
# sessions are handed back) and the script prints what the steady window
# [SCALE_WINDOW_FROM, SCALE_SECONDS] measured: trajectories committed per second
# against the produced rate, p99 dispatch overhead, daemon RSS growth, daemon and
# worker CPU per trajectory (all threads, from /proc), lost and duplicated results.
# Writes build/scale/result.json; the last line is a one-line summary for
# docs/benchmarks.md.  Exit 1 when a goal is missed (ratio < 0.8, p99 > 100 ms,
# RSS growth > 15%, anything lost or duplicated).
#   SCALE_WORKERS=40 SCALE_SLOTS=800 (32k sessions), 80 x 800 (64k), 160 x 800 (128k).
# SCALE_KILL=1: kill -9 one worker 10 s into the window and check liveness: that
# worker, and only it, is declared dead within the liveness window (heartbeat_ms x
# liveness) with its sessions requeued.
set -u
cd "$(dirname "$0")/.."
BIN=${LT_BIN:-$PWD/bin/longtail}
N=${SCALE_WORKERS:-40}
SLOTS=${SCALE_SLOTS:-800}
SECS=${SCALE_SECONDS:-150}
FROM=${SCALE_WINDOW_FROM:-60}
TOKEN_US=${SCALE_TOKEN_US:-1000000}
MEAN=${SCALE_MEAN_TOKENS:-24}
KILL=${SCALE_KILL:-0}
OUT=build/scale
[ "$FROM" -lt "$SECS" ] || { echo "scale: SCALE_WINDOW_FROM ($FROM) must be below SCALE_SECONDS ($SECS)" >&2; exit 2; }
ulimit -n 65536 2>/dev/null || true
rm -rf "$OUT"; mkdir -p "$OUT"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$OUT/cfg.json" <<EOF
{"run": {"seed": 7}, "model": {"init": "configs/models/tiny-moe.json"},
 "envs": {"arith": {"type": "arith", "params": {"digits_min": 1, "digits_max": 3}}},
 "learner": {"enabled": false},
 "scheduler": {"group_size": 4, "max_tasks": 0, "dynamic_filter": false, "queue_depth": 80000,
               "task_timeout_s": 900, "on_shutdown": "abort", "drain_s": 30},
 "rollout": {"max_new_tokens": 512, "max_turns": 1},
 "workers": {"spawn_local": 0, "backend": "scripted", "slots": $SLOTS,
             "scripted": {"mean_tokens": $MEAN, "tail_fraction": 0, "token_us": $TOKEN_US}},
 "transport": {"endpoint": "tcp://127.0.0.1:$port", "heartbeat_ms": 1000, "liveness": 5},
 "checkpoint": {"every": 0}, "eval": {"every": 0}, "monitor": {"progress": "off", "plot": false}}
EOF
. scripts/load.sh
start_load "$port" "$N" "$SLOTS" scale 20
echo "scale: $N workers x $SLOTS slots = $((N * SLOTS)) sessions, ${SECS}s (window ${FROM}-${SECS}s), daemon pid $d" >&2
# CPU ticks (utime + stime, all threads) of a list of pids.
ticks() { cat "${@/#//proc/}" 2>/dev/null | awk '{ s += $14 + $15 } END { print s + 0 }'; }
stat_files=("${pids[@]/%//stat}")
: > "$OUT/samples.tsv"
t0=$(date +%s)
mark=0
while [ $(( $(date +%s) - t0 )) -lt "$SECS" ] && kill -0 $d 2>/dev/null; do
  t=$(( $(date +%s) - t0 ))
  if [ $mark = 0 ] && [ $t -ge "$FROM" ]; then
    mark=1
    echo -e "window_start\t$(date +%s%3N)\t$(ticks $d/stat)\t$(ticks "${stat_files[@]}")" >> "$OUT/samples.tsv"
  fi
  if [ "$KILL" = 1 ] && [ $mark = 1 ] && [ $t -ge $((FROM + 10)) ]; then
    mark=2
    kill -KILL "${pids[0]}"
    echo -e "killed\t$(date +%s%3N)\tscale-1" >> "$OUT/samples.tsv"
  fi
  rss=$(awk '/VmRSS/ {print $2}' /proc/$d/status 2>/dev/null)
  echo -e "rss\t$t\t${rss:-0}" >> "$OUT/samples.tsv"
  sleep 2
done
echo -e "window_end\t$(date +%s%3N)\t$(ticks $d/stat)\t$(ticks "${stat_files[@]}")" >> "$OUT/samples.tsv"
echo -e "worker_rss_kb\t$(for p in "${pids[@]}"; do cat /proc/$p/status; done 2>/dev/null | awk '/VmRSS/ { s += $2 } END { print s + 0 }')" >> "$OUT/samples.tsv"
kill -TERM $d 2>/dev/null
for _ in $(seq 600); do kill -0 $d 2>/dev/null || break; sleep 0.2; done
wait $d; st=$?
kill -TERM "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
python3 - "$OUT/run/buffer.db" "$OUT/samples.tsv" "$st" "$N" "$SLOTS" "$TOKEN_US" "$MEAN" "$(getconf CLK_TCK)" \
  "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$OUT/result.json" <<'EOF'
import json, sqlite3, sys
db, samples, st, n, slots, token_us, mean, hz, commit, out = sys.argv[1:11]
st, n, slots, token_us, mean, hz = int(st), int(n), int(slots), int(token_us), int(mean), int(hz)
c = sqlite3.connect(db)
q = lambda s, *a: c.execute(s, a).fetchone()[0]
rows = [l.rstrip("\n").split("\t") for l in open(samples)]
w0 = next(r for r in rows if r[0] == "window_start")
w1 = next(r for r in rows if r[0] == "window_end")
t_from, t_to = int(w0[1]), int(w1[1])
secs = (t_to - t_from) / 1000
committed = q("SELECT count(*) FROM trajectories WHERE time_ms >= ? AND time_ms < ?", t_from, t_to)
# A scripted turn: floor(Exp(mean)) drawn tokens, then " #### 0" and the end (scripted backend).
turn_tokens = mean - 0.5 + len(" #### 0") + 2
sessions = n * slots
produced = sessions / (turn_tokens * token_us / 1e6)
killed = next((r for r in rows if r[0] == "killed"), None)
kill = None
if killed:  # one worker fewer after the kill; its death must be seen within the liveness window
    t_kill = int(killed[1])
    produced *= 1 - (t_to - t_kill) / (t_to - t_from) / n
    deaths = c.execute("SELECT time_ms, detail FROM events WHERE kind='worker_dead'").fetchall()
    mine = [(t, dt) for t, dt in deaths if dt.startswith(killed[2] + " ")]
    requeued = int(mine[0][1].split("; ")[1].split()[0]) if mine else 0
    window_ms = 1000 * 5  # transport.heartbeat_ms x transport.liveness in cfg.json
    kill = {"worker": killed[2], "detected_after_ms": mine[0][0] - t_kill if mine else None, "requeued": requeued,
            "other_deaths": len(deaths) - len(mine), "timeouts": q("SELECT count(*) FROM events WHERE kind='task_timeout'")}
    # The last heartbeat came up to one interval (1 s) before the kill; the check runs on a 100 ms tick.
    kill["ok"] = (len(mine) == 1 and kill["detected_after_ms"] <= window_ms + 1000 + 500 and 0 < requeued <= slots
                  and kill["other_deaths"] == 0 and kill["timeouts"] == 0)
rate = committed / secs
p99 = [r[0] for r in c.execute("SELECT value FROM metrics WHERE name='dispatch/overhead_p99_ms' AND time_ms >= ? AND time_ms < ?",
                               (t_from, t_to + 5000))]
rss = [int(r[2]) / 1024 for r in rows if r[0] == "rss" and r[2] != "0"]
from_s = next(i for i, r in enumerate(rows) if r[0] == "window_start")
win = [int(r[2]) / 1024 for r in rows[from_s:] if r[0] == "rss" and r[2] != "0"]
growth = (win[-1] - win[0]) / win[0] if len(win) > 1 else None
d_cpu = (int(w1[2]) - int(w0[2])) / hz
w_cpu = (int(w1[3]) - int(w0[3])) / hz
w_rss_kb = int(next(r for r in rows if r[0] == "worker_rss_kb")[1])
done = q("SELECT count(*) FROM tasks WHERE status='done'")
stored = q("SELECT count(DISTINCT task_id) FROM trajectories")
dups = q("SELECT count(*) - count(DISTINCT task_id) FROM trajectories")
# Stopped with abort: sessions still running stay dispatched (a resume requeues them), not lost.
in_flight = q("SELECT count(*) FROM tasks WHERE status='dispatched'")
lost = abs(done - stored)
res = {"commit": commit, "workers": n, "slots": slots, "sessions": sessions, "token_us": token_us, "mean_tokens": mean,
       "window_s": round(secs, 1), "committed_per_s": round(rate, 1), "produced_per_s": round(produced, 1),
       "ratio": round(rate / produced, 3), "overhead_p99_ms_max": round(max(p99), 1) if p99 else None,
       "rss_mb_start": round(win[0], 1) if win else None, "rss_mb_end": round(win[-1], 1) if win else None,
       "rss_growth": round(growth, 3) if growth is not None else None, "rss_mb_max": round(max(rss), 1) if rss else None,
       "daemon_cpu_us_per_traj": round(1e6 * d_cpu / committed, 1) if committed else None,
       "worker_cpu_us_per_traj": round(1e6 * w_cpu / committed, 1) if committed else None,
       "daemon_cpu_frac": round(d_cpu / secs, 3), "workers_cpu_frac": round(w_cpu / secs, 3),
       # What a session costs a worker: resident memory, and CPU per second of its life (mostly waiting).
       "worker_kb_per_session": round(w_rss_kb / sessions, 1), "worker_cpu_us_per_session_s": round(1e6 * w_cpu / secs / sessions, 2),
       "kill": kill, "lost": lost, "duplicated": dups, "in_flight_at_stop": in_flight, "daemon_exit": st}
res["ok"] = (st == 0 and res["ratio"] >= 0.8 and (not p99 or max(p99) <= 100) and (growth is None or growth <= 0.15)
             and lost == 0 and dups == 0 and (kill is None or kill["ok"]))
json.dump(res, open(out, "w"))
print(json.dumps(res))
kill_txt = (f"; killed {kill['worker']}: dead after {kill['detected_after_ms']} ms, {kill['requeued']} requeued, "
            f"{kill['other_deaths']} other deaths" if kill else "")
print(f"scale {commit}: {sessions} sessions ({n}x{slots}), window {secs:.0f}s: {rate:.0f}/s committed of {produced:.0f}/s "
      f"produced ({rate / produced:.2f}x), p99 overhead {res['overhead_p99_ms_max']} ms, daemon RSS "
      f"{res['rss_mb_start']}->{res['rss_mb_end']} MB ({100 * (growth or 0):+.1f}%), CPU/traj daemon "
      f"{res['daemon_cpu_us_per_traj']} us, workers {res['worker_cpu_us_per_traj']} us; per session {res['worker_kb_per_session']} KB, "
      f"{res['worker_cpu_us_per_session_s']} us CPU/s; lost {lost}, duplicated {dups}{kill_txt} -> {'ok' if res['ok'] else 'MISSED'}")
sys.exit(0 if res["ok"] else 1)
EOF
