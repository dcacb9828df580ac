#!/bin/bash
# Fault injection against real processes (docs/reliability.md): each scenario
# runs a training job, injects its fault for up to CHAOS_SECONDS, lets the run
# finish, then checks the buffer: every task done exactly once, nothing
# committed lost, nothing trained on an invented reward, integrity intact.
# One JSON line per scenario in build/chaos/results.jsonl, a table at the end;
# exit 1 if any invariant broke.
#   scripts/chaos.sh [SCENARIO...]     (default: all)
#   CHAOS_SECONDS=60 (fault window per scenario), LT_BIN=bin/longtail
set -u
cd "$(dirname "$0")/.."
BIN=${LT_BIN:-$PWD/bin/longtail}
SECS=${CHAOS_SECONDS:-60}
OUT=build/chaos
ALL="workers_sigkill worker_fault_points daemon_sigkill_resume sigint_resume second_daemon hostile_worker partition_heal reward_faults env_faults disk_full corrupt_buffer weights_fanout"
# A misspelt scenario fails before anything runs (it would otherwise be a missing command, and skipped).
for s in "$@"; do
  case " $ALL " in
  *" $s "*) ;;
  *) echo "chaos: unknown scenario '$s'; the scenarios are: $ALL" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
: > "$OUT/results.jsonl"
FAILED=0

now() { date +%s.%N; }
stat_of() { "$BIN" stats "$1" --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(d$2)" 2>/dev/null; }
sql() { sqlite3 -cmd ".timeout 5000" "$1/buffer.db" "$2" 2>/dev/null; }

# A training config: scripted workers with a long tail, the real learner, checkpoints every step.
config() { # FILE ENDPOINT SPAWN TASKS [EXTRA_JSON_MERGE]
  python3 - "$@" <<'EOF'
import json, sys
path, ep, spawn, tasks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
c = {"run": {"seed": 11}, "model": {"init": "configs/models/tiny-moe.json"},
     "envs": {"arith": {"type": "arith", "params": {"digits_min": 1, "digits_max": 2, "ops": ["+"]}}},
     "learner": {"batch": {"trajectories": 16}, "threads": 1, "actor_minibatches": 1, "critic_minibatches": 1},
     "scheduler": {"group_size": 4, "max_tasks": tasks, "dynamic_filter": False, "task_timeout_s": 20},
     "rollout": {"max_new_tokens": 24, "max_turns": 1},
     "workers": {"spawn_local": spawn, "slots": 4, "backend": "scripted", "daemon_gone_s": 60,
                 "scripted": {"mean_tokens": 16, "tail_fraction": 0.05, "tail_factor": 16, "token_us": 4000}},
     "transport": {"endpoint": ep, "heartbeat_ms": 200, "liveness": 5},
     "checkpoint": {"every": 1}, "eval": {"every": 0}, "monitor": {"progress": "off", "plot": False}}
def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict): merge(a[k], v)
        else: a[k] = v
if len(sys.argv) > 5: merge(c, json.loads(sys.argv[5]))
json.dump(c, open(path, "w"), indent=1)
EOF
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The invariants, then one result line.  check RUN_DIR TASKS SCENARIO FAULTS RECOVERY_S EXTRA_OK DETAIL
check() {
  local rd=$1 tasks=$2 name=$3 faults=$4 rec=$5 extra=$6 detail=$7
  local done integ stored_dups rejected untrained
  done=$(sql "$rd" "SELECT count(*) FROM tasks WHERE status='done' AND eval=0")
  integ=$(sql "$rd" "PRAGMA integrity_check")
  stored_dups=$(sql "$rd" "SELECT count(*) - count(DISTINCT task_id) FROM trajectories")
  rejected=$(stat_of "$rd" '["trajectories"]["duplicates_rejected"]')
  # a trajectory without a reward (failed reward, environment error) is never trained on
  untrained=$(sql "$rd" "SELECT count(*) FROM trajectories WHERE reward IS NULL AND consumed_step IS NOT NULL")
  local lost=$((tasks - ${done:-0}))
  local ok=true
  [ "$lost" = 0 ] && [ "$integ" = ok ] && [ "${stored_dups:-1}" = 0 ] && [ "${untrained:-1}" = 0 ] && [ "$extra" = 1 ] || ok=false
  [ $ok = true ] || FAILED=1
  printf '{"scenario": "%s", "ok": %s, "faults": %s, "tasks": %s, "done": %s, "lost": %s, "duplicates_stored": %s, "duplicates_rejected": %s, "trained_without_reward": %s, "integrity": "%s", "recovery_s": %s, "detail": "%s"}\n' \
    "$name" $ok "$faults" "$tasks" "${done:-0}" "$lost" "${stored_dups:-null}" "${rejected:-null}" "${untrained:-null}" "$integ" "$rec" "$detail" \
    | tee -a "$OUT/results.jsonl"
}

wait_exit() { # PID SECONDS -> exit status (124 on timeout)
  local pid=$1 t=$2 i=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.2; i=$((i + 1))
    if [ $i -gt $((t * 5)) ]; then kill -9 "$pid" 2>/dev/null; return 124; fi
  done
  wait "$pid" 2>/dev/null
}

# Seconds until tasks.done passes `since` (progress resumed), at most 60; 0 when every task was already done
# (nothing left to make progress on).
until_progress() {
  local rd=$1 since=$2 total=$3 t0; t0=$(now)
  [ "$since" -ge "$total" ] && { echo 0; return; }
  for _ in $(seq 300); do
    local d; d=$(stat_of "$rd" '["tasks"]["done"]')
    [ -n "$d" ] && [ "${d%.*}" -gt "$since" ] && break
    sleep 0.2
  done
  python3 -c "print(round($(now) - $t0, 2))"
}

scenario_workers_sigkill() {
  local dir=$OUT/workers_sigkill; rm -rf "$dir"; mkdir -p "$dir"
  local tasks=960 port; port=$(free_port)
  config "$dir/cfg.json" "tcp://127.0.0.1:$port" 3 $tasks
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level warn > "$dir/daemon.out" 2> "$dir/daemon.err" &
  local d=$! kills=0 worst=0 t_end; t_end=$(python3 -c "print($(now) + $SECS)")
  sleep 3
  while kill -0 $d 2>/dev/null && python3 -c "import sys; sys.exit(0 if $(now) < $t_end else 1)"; do
    local victim; victim=$(pgrep -f "worker --connect tcp://127.0.0.1:$port" | shuf -n 1)
    if [ -n "$victim" ]; then
      local before; before=$(stat_of "$dir/run" '["tasks"]["done"]'); before=${before%.*}
      kill -9 "$victim" 2>/dev/null && kills=$((kills + 1))
      local r; r=$(until_progress "$dir/run" "${before:-0}" $tasks)
      worst=$(python3 -c "print(max($worst, $r))")
    fi
    sleep "$(python3 -c 'import random; print(round(random.uniform(0.5, 2.0), 2))')"
  done
  wait_exit $d 300; local st=$?
  check "$dir/run" $tasks workers_sigkill $kills "$worst" $([ $st = 0 ] && echo 1 || echo 0) "SIGKILL of a random local worker every 0.5-2 s; daemon exit $st"
}

# Precise kill points in a worker (LT_FAULT): right after a TRAJ is sent (before its ACK), and while a tool call
# runs; the worker is restarted with the same name and spool each time, as a supervisor would.
scenario_worker_fault_points() {
  local dir=$OUT/fault_points; rm -rf "$dir"; mkdir -p "$dir"
  local tasks=240 port; port=$(free_port)
  config "$dir/cfg.json" "tcp://127.0.0.1:$port" 1 $tasks "{\"envs\": {\"bank\": {\"type\": \"tools\", \"params\": {\"spec\": \"$PWD/configs/envs/bank.json\"}}}, \"rewards\": {\"type\": \"env\"}, \"rollout\": {\"max_turns\": 3, \"max_new_tokens\": 128, \"max_context\": 4096}, \"workers\": {\"scripted\": {\"answer\": \"<tool_call><name>list_accounts</name><arg name=\\\"customer\\\">C1</arg></tool_call>\"}}}"
  python3 - "$dir/cfg.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); c["envs"].pop("arith", None)
# The only worker is killed ~10 times and every requeue costs an attempt (BYE, death, reconnect alike): a task
# caught by three kills would be failed by policy (scheduler.max_attempts), which is not what this scenario checks.
c.setdefault("scheduler", {})["max_attempts"] = 50
json.dump(c, open(sys.argv[1], "w"), indent=1)
PYEOF
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level warn > "$dir/daemon.out" 2> "$dir/daemon.err" &
  local d=$! kills=0 i=0 t_end; t_end=$(python3 -c "print($(now) + $SECS)")
  sleep 1
  while kill -0 $d 2>/dev/null; do
    local fault="kill_after_traj=$((RANDOM % 8 + 1))"
    [ $((i % 2)) = 1 ] && fault="kill_in_step=$((RANDOM % 12 + 1))"
    python3 -c "import sys; sys.exit(0 if $(now) < $t_end else 1)" || fault=none
    # (a subshell, so that bash's "Killed" notice goes to the log, not the terminal)
    ( LT_FAULT=$fault exec "$BIN" worker --connect "tcp://127.0.0.1:$port" --name chaos-w --slots 4 --backend scripted \
      --spool "$dir/spool-chaos" --daemon-gone 10 >> "$dir/chaos-w.out" 2>> "$dir/chaos-w.err" ) 2>> "$dir/chaos-w.err"
    [ $? = 137 ] && kills=$((kills + 1))
    i=$((i + 1))
  done
  wait_exit $d 300; local st=$?
  local after; after=$(grep -c "after sending a trajectory" "$dir/chaos-w.err")
  check "$dir/run" $tasks worker_fault_points $kills null $([ $st = 0 ] && [ $kills -gt 0 ] && echo 1 || echo 0) \
    "a worker restarted under LT_FAULT: $after kills right after sending a TRAJ (before its ACK), $((kills - after)) in the middle of a tool call; daemon exit $st"
}

scenario_daemon_sigkill_resume() {
  local dir=$OUT/daemon_sigkill; rm -rf "$dir"; mkdir -p "$dir"
  local tasks=640 port; port=$(free_port)
  config "$dir/cfg.json" "tcp://127.0.0.1:$port" 2 $tasks '{"workers": {"scripted": {"token_us": 12000}}}'
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level warn > "$dir/daemon.out" 2>> "$dir/daemon.err" &
  local d=$! kills=0 worst=0 t_end; t_end=$(python3 -c "print($(now) + $SECS)")
  while kill -0 $d 2>/dev/null && [ $kills -lt 3 ] && python3 -c "import sys; sys.exit(0 if $(now) < $t_end else 1)"; do
    sleep "$(python3 -c 'import random; print(round(random.uniform(2, 4), 2))')"
    kill -0 $d 2>/dev/null || break
    local before; before=$(stat_of "$dir/run" '["tasks"]["done"]'); before=${before%.*}
    kill -9 $d; wait $d 2>/dev/null; kills=$((kills + 1))
    "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --resume --log-level warn >> "$dir/daemon.out" 2>> "$dir/daemon.err" &
    d=$!
    local r; r=$(until_progress "$dir/run" "${before:-0}" $tasks)
    worst=$(python3 -c "print(max($worst, $r))")
  done
  wait_exit $d 300; local st=$?
  pkill -f "worker --connect tcp://127.0.0.1:$port" 2>/dev/null
  check "$dir/run" $tasks daemon_sigkill_resume $kills "$worst" $([ $st = 0 ] && echo 1 || echo 0) "SIGKILL of the daemon every 2-4 s, each time restarted with --resume; final exit $st"
}

# SIGINT (a clean stop) after ~120 trajectories, then --resume: the resumed workers generate under the resumed
# version, so nothing after the resume is stale, and the run ends as an uninterrupted one would: every task done,
# one learner step per batch.
scenario_sigint_resume() {
  local dir=$OUT/sigint_resume; rm -rf "$dir"; mkdir -p "$dir"
  local tasks=400 port; port=$(free_port)
  config "$dir/cfg.json" "tcp://127.0.0.1:$port" 2 $tasks '{"scheduler": {"max_staleness": 1}}'
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level warn > "$dir/daemon.out" 2> "$dir/daemon.err" &
  local d=$!
  for _ in $(seq 600); do
    local n; n=$(sql "$dir/run" "SELECT count(*) FROM trajectories")
    [ "${n:-0}" -ge 120 ] && break
    kill -0 $d 2>/dev/null || break
    sleep 0.1
  done
  kill -INT $d; wait_exit $d 120; local st1=$?
  local at_stop; at_stop=$(sql "$dir/run" "SELECT count(*) FROM trajectories")
  local t0; t0=$(now)
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --resume --log-level warn >> "$dir/daemon.out" 2>> "$dir/daemon.err" &
  d=$!
  local r; r=$(until_progress "$dir/run" "$(stat_of "$dir/run" '["tasks"]["done"]' | cut -d. -f1)" $tasks)
  wait_exit $d 300; local st=$?
  local stale steps; stale=$(stat_of "$dir/run" '["trajectories"]["stale"]'); steps=$(stat_of "$dir/run" '["learner_step"]')
  check "$dir/run" $tasks sigint_resume 1 "$r" $([ $st1 = 0 ] && [ $st = 0 ] && [ "${stale%.*}" = 0 ] && [ "${steps%.*}" = $((tasks / 16)) ] && echo 1 || echo 0) \
    "SIGINT after $at_stop of $tasks trajectories, then --resume: $stale stale, $steps learner steps (uninterrupted: $((tasks / 16))); exits $st1, $st"
}

# A second daemon on a live run directory is refused at once, naming the holder; the first one completes.
scenario_second_daemon() {
  local dir=$OUT/second_daemon; rm -rf "$dir"; mkdir -p "$dir"
  local tasks=240 port; port=$(free_port)
  config "$dir/cfg.json" "tcp://127.0.0.1:$port" 2 $tasks
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level warn > "$dir/daemon.out" 2> "$dir/daemon.err" &
  local d=$!
  for _ in $(seq 300); do [ "$(stat_of "$dir/run" '["tasks"]["done"]' | cut -d. -f1)" -gt 16 ] 2>/dev/null && break; sleep 0.1; done
  local t0; t0=$(now)
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --resume > "$dir/second.out" 2> "$dir/second.err"
  local st2=$? took; took=$(python3 -c "print(round($(now) - $t0, 2))")
  local named=0; grep -q "in use by another daemon (pid $d)" "$dir/second.err" && named=1
  wait_exit $d 300; local st=$?
  check "$dir/run" $tasks second_daemon 1 null $([ $st2 != 0 ] && [ $named = 1 ] && [ $st = 0 ] && echo 1 || echo 0) \
    "second train --resume on the live run: exit $st2 after ${took} s, holder named: $named; first daemon exit $st"
}

# Third-party workers (scripts/pyworker.py, written from docs/protocol.md) that answer every task with an
# out-of-vocabulary token, or with a reward of 5 (the rule reward's range is [0, 1]), next to two honest local
# workers: every such result is refused before the commit, its task runs again at once, the run completes, and a
# --resume of the finished run works.
scenario_hostile_worker() {
  local dir=$OUT/hostile_worker; rm -rf "$dir"; mkdir -p "$dir"
  local py; py=$(for p in python3 /usr/bin/python3; do "$p" -c "import zmq" 2>/dev/null && { echo "$p"; break; }; done)
  if [ -z "$py" ]; then
    printf '{"scenario": "hostile_worker", "ok": null, "skipped": "python3-zmq is not installed"}\n' | tee -a "$OUT/results.jsonl"
    return
  fi
  local tasks=320 port; port=$(free_port)
  config "$dir/cfg.json" "tcp://127.0.0.1:$port" 2 $tasks
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level warn > "$dir/daemon.out" 2> "$dir/daemon.err" &
  local d=$!
  "$py" scripts/pyworker.py --connect "tcp://127.0.0.1:$port" --name hostile --token 1264 \
    > "$dir/hostile.out" 2> "$dir/hostile.err" &
  local h=$!
  "$py" scripts/pyworker.py --connect "tcp://127.0.0.1:$port" --name hostile-reward --reward 5 \
    > "$dir/hostile-reward.out" 2> "$dir/hostile-reward.err" &
  local h2=$!
  wait_exit $d 300; local st=$?
  kill $h $h2 2>/dev/null; wait $h $h2 2>/dev/null
  local refused; refused=$(grep -c "refused a trajectory" "$dir/daemon.err")
  local by_reward; by_reward=$(grep -c "refused a trajectory.*hostile-reward: reward 5 outside" "$dir/daemon.err")
  local stored; stored=$(sql "$dir/run" "SELECT count(*) FROM trajectories WHERE worker LIKE 'hostile%'")
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --resume --log-level warn >> "$dir/daemon.out" 2>> "$dir/daemon.err"
  local st2=$?
  check "$dir/run" $tasks hostile_worker "$refused" null $([ $st = 0 ] && [ $st2 = 0 ] && [ "$by_reward" -gt 0 ] && [ "$refused" -gt "$by_reward" ] && [ "${stored:-1}" = 0 ] && echo 1 || echo 0) \
    "workers sending token id 1264 (vocabulary 264) or reward 5 (range [0, 1]) in every result: $refused refused ($by_reward for the reward), $stored stored; daemon exit $st, --resume afterwards exit $st2"
}

scenario_partition_heal() {
  local dir=$OUT/partition; rm -rf "$dir"; mkdir -p "$dir"
  if ! ip netns add ltc-$$ 2>/dev/null; then
    printf '{"scenario": "partition_heal", "ok": null, "skipped": "ip netns needs root and iproute2"}\n' | tee -a "$OUT/results.jsonl"
    return
  fi
  local a=ltca$$ b=ltcb$$ net=10.231.$(( $$ % 200 )) tasks=640 port; port=$(free_port)
  if ! { ip link add $a type veth peer name $b && ip link set $b netns ltc-$$ &&
         ip addr add $net.1/24 dev $a && ip link set $a up &&
         ip netns exec ltc-$$ ip addr add $net.2/24 dev $b && ip netns exec ltc-$$ ip link set $b up &&
         ip netns exec ltc-$$ ip link set lo up; } 2>/dev/null; then
    ip link del $a 2>/dev/null; ip netns del ltc-$$ 2>/dev/null
    printf '{"scenario": "partition_heal", "ok": null, "skipped": "this host refused a veth pair into a network namespace"}\n' | tee -a "$OUT/results.jsonl"
    return
  fi
  config "$dir/cfg.json" "tcp://$net.1:$port" 1 $tasks '{"transport": {"allow_insecure_remote": true}, "workers": {"scripted": {"token_us": 12000}}}'
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level warn > "$dir/daemon.out" 2> "$dir/daemon.err" &
  local d=$!
  sleep 2
  ip netns exec ltc-$$ "$BIN" worker --connect "tcp://$net.1:$port" --name remote --slots 4 --backend scripted \
    --daemon-gone 120 --spool "$dir/spool-remote" > "$dir/remote.out" 2> "$dir/remote.err" &
  local w=$!
  for _ in $(seq 100); do [ "$(sql "$dir/run" "SELECT count(*) FROM trajectories WHERE worker='remote'")" -gt 5 ] 2>/dev/null && break; sleep 0.2; done
  ip link set $a down                          # the partition: the daemon and the remote worker lose each other
  sleep "$(python3 -c "print(min($SECS, 4))")"  # past liveness (5 x 200 ms): its tasks are requeued
  ip link set $a up
  local t_heal; t_heal=$(now)
  local rec=null
  for _ in $(seq 300); do
    local last; last=$(sql "$dir/run" "SELECT max(time_ms) FROM trajectories WHERE worker='remote'")
    if [ -n "$last" ] && python3 -c "import sys; sys.exit(0 if $last/1000 > $t_heal else 1)"; then rec=$(python3 -c "print(round($(now) - $t_heal, 2))"); break; fi
    kill -0 $d 2>/dev/null || break
    sleep 0.2
  done
  wait_exit $d 300; local st=$?
  kill $w 2>/dev/null; wait_exit $w 30 >/dev/null
  local dead; dead=$(sql "$dir/run" "SELECT count(*) FROM events WHERE kind='worker_dead'")
  ip link del $a 2>/dev/null; ip netns del ltc-$$ 2>/dev/null
  check "$dir/run" $tasks partition_heal 1 "$rec" $([ $st = 0 ] && [ "${dead:-0}" -ge 1 ] && echo 1 || echo 0) \
    "remote worker in its own netns cut off for 4 s then healed: $dead worker_dead, its tasks redone elsewhere (its late results are the rejected duplicates); daemon exit $st"
}

scenario_reward_faults() {
  local dir=$OUT/reward_faults; rm -rf "$dir"; mkdir -p "$dir"
  local jport; jport=$(free_port)
  python3 - "$jport" > "$dir/judge.log" 2>&1 <<'EOF' &
import http.server, json, random, sys, time
random.seed(5)
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        r = random.random()
        if r < 0.15: self.send_response(500); self.end_headers(); self.wfile.write(b"boom"); return
        if r < 0.25: time.sleep(1.5)                 # past the client's timeout
        body = b"<html>" if r < 0.35 else json.dumps({"choices": [{"message": {"role": "assistant",
               "content": "<confidence>%d</confidence>" % random.randint(0, 10)}}]}).encode()
        self.send_response(200); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
  local j=$! tasks=160 port; port=$(free_port)
  sleep 0.5
  config "$dir/cfg.json" "tcp://127.0.0.1:$port" 2 $tasks \
    "{\"rewards\": {\"type\": \"genrm\", \"genrm\": {\"endpoint\": \"http://127.0.0.1:$jport\", \"timeout_ms\": 500, \"retries\": 1, \"backoff_ms\": 10}}}"
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level warn > "$dir/daemon.out" 2> "$dir/daemon.err" &
  local d=$!
  wait_exit $d 300; local st=$?
  kill $j 2>/dev/null
  local failed; failed=$(sql "$dir/run" "SELECT count(*) FROM trajectories WHERE traj_status='reward_failed'")
  local invented; invented=$(sql "$dir/run" "SELECT count(*) FROM trajectories WHERE traj_status='reward_failed' AND reward IS NOT NULL")
  check "$dir/run" $tasks reward_faults "${failed:-0}" null $([ $st = 0 ] && [ "${failed:-0}" -gt 0 ] && [ "${invented:-1}" = 0 ] && echo 1 || echo 0) \
    "GenRM endpoint failing 35% (5xx, timeouts, garbage), 1 retry: $failed rewards failed, none given a value; daemon exit $st"
}

scenario_env_faults() {
  local dir=$OUT/env_faults; rm -rf "$dir"; mkdir -p "$dir/env"
  if ! "$BIN" --version | grep -q "userns=yes"; then
    printf '{"scenario": "env_faults", "ok": null, "skipped": "no user namespaces: the sandbox cannot run here"}\n' | tee -a "$OUT/results.jsonl"
    return
  fi
  cat > "$dir/env/env.py" <<'EOF'
import json, random, sys, time
req = json.loads(sys.stdin.readline())
seed = req["seed"] if req["op"] == "reset" else req["state"]
r = random.Random(seed * 7 + (1 if req["op"] == "step" else 0)).random()
if r < 0.1: sys.exit(3)                      # a crash
if r < 0.15: time.sleep(30)                  # a hang (the call's deadline is 2 s)
if req["op"] == "reset":
    print(json.dumps({"messages": [{"role": "user", "content": "Say anything."}], "state": seed}))
else:
    print(json.dumps({"observations": [], "done": True, "state": seed, "reference": {"score": 1.0}}))
EOF
  local tasks=96 port; port=$(free_port)
  config "$dir/cfg.json" "tcp://127.0.0.1:$port" 2 $tasks \
    "{\"envs\": {\"ext\": {\"type\": \"external\", \"params\": {\"command\": [\"python3\", \"env.py\"], \"dir\": \"$PWD/$dir/env\", \"timeout_s\": 2}}}, \"rewards\": {\"type\": \"env\"}}"
  python3 - "$dir/cfg.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); c["envs"].pop("arith", None); json.dump(c, open(sys.argv[1], "w"), indent=1)
EOF
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level warn > "$dir/daemon.out" 2> "$dir/daemon.err" &
  local d=$!
  wait_exit $d 300; local st=$?
  local errs; errs=$(sql "$dir/run" "SELECT count(*) FROM trajectories WHERE traj_status='env_error'")
  local timeouts; timeouts=$(sql "$dir/run" "SELECT count(*) FROM trajectories WHERE reason='sandbox_timeout'")
  check "$dir/run" $tasks env_faults "$((${errs:-0} + ${timeouts:-0}))" null $([ $st = 0 ] && [ "${errs:-0}" -gt 0 ] && echo 1 || echo 0) \
    "external env program crashing 10% and hanging 5% of calls: $errs env_error, $timeouts timeouts (sandbox_timeout, trained as failures); daemon exit $st"
}

scenario_disk_full() {
  local dir=$OUT/disk_full; rm -rf "$dir"; mkdir -p "$dir/run"
  if ! mount -t tmpfs -o size=9m ltchaos "$dir/run" 2>/dev/null; then
    printf '{"scenario": "disk_full", "ok": null, "skipped": "mounting a tmpfs needs root"}\n' | tee -a "$OUT/results.jsonl"
    return
  fi
  # The first checkpoint takes 7 MB; trajectories of ~300 tokens fill the rest.
  local tasks=1500 port; port=$(free_port)
  config "$dir/cfg.json" "tcp://127.0.0.1:$port" 2 $tasks '{"checkpoint": {"every": 0}, "learner": {"enabled": false}, "rollout": {"max_new_tokens": 400}, "workers": {"scripted": {"mean_tokens": 300, "token_us": 0}}}'
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level warn > "$dir/daemon.out" 2> "$dir/daemon.err" &
  local d=$! full=0 t_ok rec=null
  for _ in $(seq 600); do
    grep -q "disk full" "$dir/daemon.err" && { full=1; break; }
    kill -0 $d 2>/dev/null || break
    sleep 0.2
  done
  if [ $full = 1 ]; then
    sleep 2
    mount -o remount,size=256m "$dir/run"; t_ok=$(now)
    for _ in $(seq 300); do
      [ "$(sql "$dir/run" "SELECT count(*) FROM events WHERE kind='disk_ok'")" -gt 0 ] 2>/dev/null && { rec=$(python3 -c "print(round($(now) - $t_ok, 2))"); break; }
      sleep 0.2
    done
  fi
  wait_exit $d 300; local st=$?
  pkill -f "worker --connect tcp://127.0.0.1:$port" 2>/dev/null
  check "$dir/run" $tasks disk_full $full "$rec" $([ $st = 0 ] && [ $full = 1 ] && echo 1 || echo 0) \
    "run directory on a 9 MB tmpfs until the daemon stops accepting, then grown to 256 MB; daemon exit $st"
  cp "$dir/run/buffer.db" "$dir/buffer-after.db" 2>/dev/null
  sleep 0.5; umount "$dir/run" 2>/dev/null
}

scenario_corrupt_buffer() {
  local dir=$OUT/corrupt; rm -rf "$dir"; mkdir -p "$dir"
  local tasks=48 port; port=$(free_port)
  config "$dir/cfg.json" "tcp://127.0.0.1:$port" 1 $tasks
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level warn > "$dir/daemon.out" 2> "$dir/daemon.err"
  # Scribble over the second page (a table's b-tree root), as a torn or bit-rotted write would.
  python3 -c "
import os; f = open('$dir/run/buffer.db', 'r+b'); f.seek(4096 + 8); f.write(os.urandom(2000)); f.close()"
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --resume > "$dir/resume.out" 2> "$dir/resume.err"
  local st=$?
  local said; said=$(grep -c -i "integrity\|malformed\|corrupt" "$dir/resume.err")
  local ok=true
  [ $st = 6 ] && [ "$said" -ge 1 ] || { ok=false; FAILED=1; }
  printf '{"scenario": "corrupt_buffer", "ok": %s, "faults": 1, "exit_code": %s, "detail": "2000 random bytes written over the b-tree page 2 of buffer.db; --resume must refuse with exit 6: %s"}\n' \
    $ok $st "$(head -c 200 "$dir/resume.err" | tr '\n"' ' \047')" | tee -a "$OUT/results.jsonl"
}

# Weights fanned out through a cache (issue 36): three remote-style workers take bf16 versions and their deltas
# from a mirror (a byte-flipping proxy in front of Debian's nginx proxy_cache in front of the daemon's weights
# server). nginx is SIGKILLed in the middle of the workers' first (whole-file) download and restarted on the same
# cache; the proxy flips one byte in a quarter of the model and delta responses; one worker is SIGSTOPped across
# two publishes. Every worker must still reach the newest version, its model.safetensors with that version's hash.
scenario_weights_fanout() {
  local dir=$OUT/weights_fanout; rm -rf "$dir"; mkdir -p "$dir/nginx/cache" "$dir/nginx/tmp"
  if [ ! -x /usr/sbin/nginx ]; then
    printf '{"scenario": "weights_fanout", "ok": null, "skipped": "nginx is not installed (scripts/deps.sh)"}\n' | tee -a "$OUT/results.jsonl"
    return
  fi
  local port wport nport pport; port=$(free_port); wport=$(free_port); nport=$(free_port); pport=$(free_port)
  # limit_rate: the first download of the 3.6 MB bf16 model lasts seconds, so the kill lands inside it
  cat > "$dir/nginx/nginx.conf" <<EOF
$([ "$(id -u)" = 0 ] && echo "user root;")
worker_processes 1;
error_log $PWD/$dir/nginx/error.log;
pid $PWD/$dir/nginx/nginx.pid;
events { worker_connections 256; }
http {
  log_format cache '\$uri \$upstream_cache_status \$status \$body_bytes_sent';
  access_log $PWD/$dir/nginx/access.log cache;
  proxy_cache_path $PWD/$dir/nginx/cache levels=1:2 keys_zone=weights:10m max_size=1g inactive=7d use_temp_path=off;
  client_body_temp_path $PWD/$dir/nginx/tmp; proxy_temp_path $PWD/$dir/nginx/tmp; fastcgi_temp_path $PWD/$dir/nginx/tmp;
  uwsgi_temp_path $PWD/$dir/nginx/tmp; scgi_temp_path $PWD/$dir/nginx/tmp;
  server {
    listen 127.0.0.1:$nport;
    location /weights/sha256/ {
      proxy_pass http://127.0.0.1:$wport;
      proxy_cache weights;
      proxy_cache_valid 200 7d;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 600s;
      proxy_cache_revalidate on;
      limit_rate 1m;
    }
  }
}
EOF
  start_nginx() { /usr/sbin/nginx -p "$PWD/$dir/nginx" -c "$PWD/$dir/nginx/nginx.conf" -g 'daemon off;' >> "$dir/nginx/nginx.out" 2>&1 & echo $!; }
  local ng; ng=$(start_nginx)
  # The mirror the workers are given: passes everything through to nginx, flipping one byte in 1 of 4 model or
  # delta bodies (each one counted in proxy.log); an upstream that dies mid-body cuts the client off likewise.
  cat > "$dir/proxy.py" <<'EOF'
import http.client, http.server, random, sys, threading
up, log = int(sys.argv[2]), open(sys.argv[3], "a", buffering=1)
rng, lock = random.Random(36), threading.Lock()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", up, timeout=60)
            c.request("GET", self.path, headers={k: v for k, v in self.headers.items() if k.lower() in ("range", "if-none-match")})
            r = c.getresponse()
        except OSError as e:
            log.write("upstream_down %s %s\n" % (self.path, e)); self.send_error(502); return
        body_file = self.path.endswith(("/model.safetensors", "/delta.zst"))
        with lock: flip = body_file and r.status in (200, 206) and rng.random() < 0.25
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "transfer-encoding"): self.send_header(k, v)
        self.send_header("Connection", "close"); self.end_headers()
        n, at = 0, int(r.getheader("Content-Length") or 0) // 2
        try:
            while True:
                b = r.read(65536)
                if not b: break
                if flip and n <= at < n + len(b):
                    b = bytearray(b); b[at - n] ^= 0x40; b = bytes(b)
                    log.write("flipped %s byte %d\n" % (self.path, at))
                self.wfile.write(b); n += len(b)
        except OSError as e:
            log.write("cut %s after %d bytes: %s\n" % (self.path, n, e)); self.close_connection = True; return
        if r.getheader("Content-Length") and n < int(r.getheader("Content-Length")):
            log.write("cut %s after %d bytes: upstream closed\n" % (self.path, n))
        self.close_connection = True
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
  python3 "$dir/proxy.py" "$pport" "$nport" "$dir/proxy.log" 2> "$dir/proxy.err" &
  local px=$!
  config "$dir/cfg.json" "tcp://127.0.0.1:$port" 0 0 "{\"transport\": {\"weights_port\": $wport, \"weights_host\": \"127.0.0.1\", \"weights_serve\": \"all\", \"weights_mirrors\": [\"http://127.0.0.1:$pport/weights\"]}, \"checkpoint\": {\"publish_dtype\": \"bf16\"}, \"workers\": {\"scripted\": {\"token_us\": 80000}}}"
  "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level warn > "$dir/daemon.out" 2> "$dir/daemon.err" &
  local d=$! k ws=()
  sleep 1
  for k in 1 2 3; do
    "$BIN" worker --connect "tcp://127.0.0.1:$port" --name "wf$k" --slots 4 --backend scripted --spool "$dir/spool-wf$k" \
      --daemon-gone 60 > /dev/null 2> "$dir/wf$k.err" &
    ws+=($!)
  done
  version() { sql "$dir/run" "SELECT coalesce(max(version), 0) FROM checkpoints WHERE kind='weights'"; }
  held() { grep -o "weights version [0-9]* from" "$dir/wf$1.err" 2>/dev/null | awk '{print $3}' | sort -n | tail -1; }
  # 1. nginx killed while it streams v0 to the workers, then restarted on the same cache 3 s later
  local killed_mid=0
  for _ in $(seq 300); do [ -n "$(find "$dir/nginx/cache" -type f 2>/dev/null)" ] && break; sleep 0.1; done # nginx has v0
  sleep 1
  [ -z "$(held 1)$(held 2)$(held 3)" ] && killed_mid=1  # nobody holds v0 yet: the download is under way
  pkill -9 -P "$ng" 2>/dev/null; kill -9 "$ng" 2>/dev/null; wait "$ng" 2>/dev/null
  sleep 3
  ng=$(start_nginx)
  # 2. a worker stopped across two publishes
  for _ in $(seq 600); do [ "$(version)" -ge 3 ] 2>/dev/null && break; kill -0 $d 2>/dev/null || break; sleep 0.2; done
  local v_stop; v_stop=$(version)
  kill -STOP "${ws[2]}"
  for _ in $(seq 600); do [ "$(version)" -ge $((v_stop + 2)) ] 2>/dev/null && break; kill -0 $d 2>/dev/null || break; sleep 0.2; done
  local v_cont; v_cont=$(version)
  kill -CONT "${ws[2]}"
  # 3. run on to v10 at least, until every worker holds the newest version at once (at most 120 s more)
  for _ in $(seq 600); do [ "$(version)" -ge 10 ] 2>/dev/null && break; kill -0 $d 2>/dev/null || break; sleep 0.2; done
  local conv=0 t0 vnew rec=null; t0=$(now)
  for _ in $(seq 600); do
    kill -0 $d 2>/dev/null || break
    vnew=$(version)
    [ "$(held 1)" = "$vnew" ] && [ "$(held 2)" = "$vnew" ] && [ "$(held 3)" = "$vnew" ] && { conv=1; break; }
    sleep 0.2
  done
  [ $conv = 1 ] && rec=$(python3 -c "print(round($(now) - $t0, 2))")
  kill -INT $d; wait_exit $d 60; local st=$?
  for k in "${ws[@]}"; do kill "$k" 2>/dev/null; wait_exit "$k" 10 >/dev/null; done
  pkill -9 -P "$ng" 2>/dev/null; kill -9 "$ng" $px 2>/dev/null; wait "$ng" $px 2>/dev/null
  # every worker's copy of the newest version it took has that version's published hash
  local right=0 h want got
  for k in 1 2 3; do
    h=$(held $k); [ -n "$h" ] || continue
    want=$(sql "$dir/run" "SELECT sha256 FROM checkpoints WHERE kind='weights' AND version=$h")
    got=$(sha256sum "$dir/spool-wf$k.weights/v$h/model.safetensors" 2>/dev/null | cut -d' ' -f1)
    [ -n "$want" ] && [ "$want" = "$got" ] && right=$((right + 1))
  done
  local flipped cut refused fellback skipped
  flipped=$(grep -c "^flipped" "$dir/proxy.log" 2>/dev/null); cut=$(grep -c "^cut\|^upstream_down" "$dir/proxy.log" 2>/dev/null)
  refused=$(cat "$dir"/wf*.err | grep -c "sha256 .*announced\|delta.zst: .*fetching the whole")
  fellback=$(cat "$dir"/wf*.err | grep -c "trying http://127.0.0.1:$wport")
  # versions the stopped worker never took (it went from what it held to the newest announced)
  skipped=$(python3 -c "
import re; vs = sorted({int(m) for m in re.findall(r'weights version (\d+) from', open('$dir/wf3.err').read())})
print(sum(b - a - 1 for a, b in zip(vs, vs[1:])))")
  local ok=true
  [ $conv = 1 ] && [ $right = 3 ] && [ $killed_mid = 1 ] && [ "${flipped:-0}" -ge 1 ] && [ "${refused:-0}" -ge 1 ] && [ "${skipped:-0}" -ge 1 ] || { ok=false; FAILED=1; }
  printf '{"scenario": "weights_fanout", "ok": %s, "faults": %s, "cache_killed_mid_transfer": %s, "corrupted_bytes_served": %s, "corrupt_copies_refused": %s, "transfers_cut": %s, "fell_back_to_daemon": %s, "versions_skipped": %s, "worker_stopped_v": "%s-%s", "newest_version": %s, "workers_on_newest_with_right_hash": %s, "recovery_s": %s, "daemon_exit": %s, "detail": "3 scripted workers, bf16 + deltas of tiny-moe through a byte-flipping proxy -> nginx proxy_cache -> the daemon; nginx SIGKILLed during the first download and restarted, 1 in 4 model/delta bodies with a flipped byte, wf3 SIGSTOPped across publishes; recovery_s: from v10 until all 3 held the newest version"}\n' \
    $ok $((1 + ${flipped:-0} + 1)) $killed_mid "${flipped:-0}" "${refused:-0}" "${cut:-0}" "${fellback:-0}" "${skipped:-0}" "$v_stop" "$v_cont" "${vnew:-null}" $right "$rec" $st \
    | tee -a "$OUT/results.jsonl"
}

for s in ${@:-$ALL}; do
  echo "chaos: $s (fault window ${SECS}s)" >&2
  "scenario_$s"
done
python3 - "$OUT/results.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| scenario | ok | faults injected | lost | duplicates stored | rejected duplicates | trained without reward | recovery s |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    g = lambda k: "—" if r.get(k) is None else r[k]
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (r["scenario"], "skipped: " + r["skipped"] if "skipped" in r else g("ok"),
          g("faults"), g("lost"), g("duplicates_stored"), g("duplicates_rejected"), g("trained_without_reward"), g("recovery_s")))
EOF
exit $FAILED
