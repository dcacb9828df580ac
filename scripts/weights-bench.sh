#!/bin/bash
# make weights-bench (docs/benchmarks.md, "Weight propagation"): how long a published version takes to reach the
# last worker and how many bytes leave the daemon for it, with weights sent four ways:
#   fp32              whole fp32 model.safetensors from the daemon (before issue 36)
#   bf16              whole bf16 files from the daemon (checkpoint.publish_dtype bf16, publish_deltas false)
#   bf16_delta        bf16 + delta.zst against the version before (publish_deltas true)
#   bf16_delta_cache  the same through an nginx proxy_cache as the workers' mirror (transport.weights_mirrors)
#   lora_delta        learner.lora (rank WB_LORA_RANK, all-linear) on the frozen base, each version the merged model
#                     as bf16 + delta.zst (checkpoint.lora_publish merged: the weights server carries whole models,
#                     not adapters); skipped by a build without learner.lora
# Topology, all inside this machine: a bridge in the root namespace; the daemon, the cache and each worker in a
# network namespace of their own with a veth link to it, addresses in 10.241.0.0/24 (which only these namespaces
# hold). Shaped with tc: the daemon's outgoing link and each worker's incoming link at WB_RATE (its one NIC), the
# cache's outgoing link at WB_CACHE_RATE (a rack cache's). Workers are `--backend scripted` (no inference engine,
# so many fit in memory), which still downloads and hash-checks every version the daemon announces.
# The daemon trains the real learner on WB_MODEL and publishes a version per step; its steps are paced by
# the scripted rollouts (about WB_GAP_S seconds per batch). Each mode runs until WB_VERSIONS versions after v0
# have reached every worker (the daemon's weights/propagation_s), then stops the daemon.
# Needs root (ip netns, tc); one JSON line per mode in build/weights-bench/results.jsonl, a table at the end.
#   WB_WORKERS=64 WB_VERSIONS=10 WB_MODEL=configs/models/moe-100m.json WB_RATE=1gbit WB_CACHE_RATE=10gbit
#   WB_DELAY=0.5ms (needs sch_netem; skipped when the kernel lacks it) WB_GAP_S=5 WB_MODES="fp32 bf16 ..."
#   WB_TIMEOUT_S=900 (per mode), WB_LORA_RANK=8, LT_BIN=bin/longtail
set -u
cd "$(dirname "$0")/.."
BIN=${LT_BIN:-$PWD/bin/longtail}
W=${WB_WORKERS:-64}
V=${WB_VERSIONS:-10}
MODEL=${WB_MODEL:-configs/models/moe-100m.json}
RATE=${WB_RATE:-1gbit}
CACHE_RATE=${WB_CACHE_RATE:-10gbit}
DELAY=${WB_DELAY:-0.5ms}
GAP=${WB_GAP_S:-5}
MODES=${WB_MODES:-fp32 bf16 bf16_delta bf16_delta_cache lora_delta}
LORA_RANK=${WB_LORA_RANK:-8}
TIMEOUT=${WB_TIMEOUT_S:-900}
OUT=$PWD/build/weights-bench
NET=10.241.0
TAG=wb$$ # names of this run's namespaces and links (interface names stay under 16 characters)
BR=${TAG}br

[ "$(id -u)" = 0 ] || { echo "weights-bench: needs root (ip netns, tc)" >&2; exit 2; }
[ "$W" -ge 1 ] && [ "$W" -le 200 ] || { echo "weights-bench: WB_WORKERS must be 1..200 (one /24)" >&2; exit 2; }
[ "$V" -ge 2 ] || { echo "weights-bench: WB_VERSIONS must be at least 2" >&2; exit 2; }
if ip -4 addr show | grep -q "inet $NET\."; then
  echo "weights-bench: $NET.0/24 is already in use on this machine (another run?)" >&2; exit 2
fi
mkdir -p "$OUT"
: > "$OUT/results.jsonl"

PIDS=()
NSS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  for ns in "${NSS[@]}"; do ip netns del "$ns" 2>/dev/null; done
  ip link del "$BR" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
wait_exit() { # PID SECONDS: SIGKILL after that long
  local pid=$1 i=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.2; i=$((i + 1))
    [ $i -gt $(($2 * 5)) ] && { kill -9 "$pid" 2>/dev/null; break; }
  done
  wait "$pid" 2>/dev/null
}

# tc: netem for the delay when the kernel has it, then a token bucket at the rate.
shape() { # NETNS("" for the root) DEV RATE
  local ex=() burst
  [ -n "$1" ] && ex=(ip netns exec "$1")
  burst=$(python3 -c "
import re, sys
m = re.fullmatch(r'([0-9.]+)([kmg]?)bit', sys.argv[1].lower()) or sys.exit('WB rates look like 1gbit, 100mbit')
bps = float(m[1]) * {'': 1, 'k': 1e3, 'm': 1e6, 'g': 1e9}[m[2]]
print(max(32768, int(bps / 8 / 100)))  # 10 ms of traffic: tbf needs at least a timer tick's worth" "$3") || exit 2
  if [ -n "$DELAY" ] && "${ex[@]}" tc qdisc add dev "$2" root handle 1: netem delay "$DELAY" 2>/dev/null; then
    "${ex[@]}" tc qdisc add dev "$2" parent 1: handle 2: tbf rate "$3" burst "$burst" latency 100ms
  else
    "${ex[@]}" tc qdisc add dev "$2" root tbf rate "$3" burst "$burst" latency 100ms
  fi
}
DELAY_USED=none

# A namespace NAME at IP on the bridge; OUT: shape what leaves it (daemon, cache), IN: what enters it (a worker).
mkns() { # NAME IP in|out RATE
  local ns=$TAG-$1 h=${TAG}h$1 p=${TAG}p$1
  ip netns add "$ns" && NSS+=("$ns") &&
  ip link add "$h" type veth peer name "$p" && ip link set "$p" netns "$ns" &&
  ip link set "$h" master "$BR" && ip link set "$h" up &&
  ip netns exec "$ns" ip addr add "$2/24" dev "$p" && ip netns exec "$ns" ip link set "$p" up &&
  ip netns exec "$ns" ip link set lo up || return 1
  if [ "$3" = out ]; then shape "$ns" "$p" "$4"; else shape "" "$h" "$4"; fi
}

setup_net() {
  ip link add "$BR" type bridge && ip addr add "$NET.1/24" dev "$BR" && ip link set "$BR" up || return 1
  mkns d "$NET.2" out "$RATE" || return 1
  mkns c "$NET.3" out "$CACHE_RATE" || return 1
  for k in $(seq 1 "$W"); do mkns "w$k" "$NET.$((10 + k))" in "$RATE" || return 1; done
  if tc qdisc show dev "${TAG}hw1" | grep -q netem; then DELAY_USED=$DELAY; fi
}

# Bytes that left the daemon's namespace so far (its veth's counter: weights, and the small ZeroMQ messages).
daemon_bytes() { ip netns exec "$TAG-d" cat "/sys/class/net/${TAG}pd/statistics/tx_bytes"; }

config() { # FILE MODE
  python3 - "$@" "$MODEL" "$W" "$GAP" "$NET" "$LORA_RANK" <<'EOF'
import json, sys
path, mode, model, w, gap, net = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
lora_rank = int(sys.argv[7])
batch = max(4, (w + 3) // 4 * 4)  # one trajectory per worker per step, whole groups of 4
c = {"run": {"seed": 3}, "model": {"init": model},
     "envs": {"arith": {"type": "arith", "params": {"digits_min": 1, "digits_max": 2, "ops": ["+"]}}},
     # the default actor-critic objective: its critic gives the scripted answers (all wrong, the same reward)
     # non-zero advantages, so every step changes the weights as a real one does (GRPO's would all be zero)
     "learner": {"batch": {"trajectories": batch}, "lr": 1e-4, "warmup_steps": 0, "threads": 1,
                 "actor_minibatches": 1, "critic_minibatches": 1},
     "scheduler": {"group_size": 4, "max_tasks": 0, "dynamic_filter": False, "max_staleness": 1000},
     "rollout": {"max_new_tokens": 64, "max_turns": 1},
     # one trajectory at a time per worker, lasting about WB_GAP_S: the pace of the versions
     "workers": {"spawn_local": 0, "slots": 1, "backend": "scripted", "daemon_gone_s": 60,
                 "scripted": {"mean_tokens": 16, "tail_fraction": 0, "token_us": int(gap * 1e6 / 16)}},
     "transport": {"endpoint": "tcp://%s.2:5555" % net, "allow_insecure_remote": True,
                   # propagation is seen at the heartbeats (its resolution); liveness 5 s on a loaded machine
                   "heartbeat_ms": 200, "liveness": 25,
                   "weights_port": 8080, "weights_bind": net + ".2", "weights_host": net + ".2",
                   "weights_serve": "all"},
     "checkpoint": {"every": 0, "publish_dtype": "fp32" if mode == "fp32" else "bf16",
                    "publish_deltas": "delta" in mode},
     "eval": {"every": 0}, "monitor": {"progress": "off", "plot": False}}
if mode == "bf16_delta_cache":
    c["transport"]["weights_mirrors"] = ["http://%s.3:8080/weights" % net]
if mode == "lora_delta":
    c["learner"]["lora"] = {"rank": lora_rank, "alpha": 32, "targets": ["all-linear"]}
    c["checkpoint"]["lora_publish"] = "merged"
json.dump(c, open(path, "w"), indent=1)
EOF
}

# nginx as the rack cache: the configuration docs/operations.md gives.
start_nginx() { # DIR
  mkdir -p "$1/cache" "$1/tmp"
  cat > "$1/nginx.conf" <<EOF
user root;
worker_processes 2;
error_log $1/error.log;
pid $1/nginx.pid;
events { worker_connections 1024; }
http {
  log_format cache '\$msec \$uri \$upstream_cache_status \$status \$body_bytes_sent';
  access_log $1/access.log cache;
  proxy_cache_path $1/cache levels=1:2 keys_zone=weights:10m max_size=20g inactive=7d use_temp_path=off;
  client_body_temp_path $1/tmp; proxy_temp_path $1/tmp; fastcgi_temp_path $1/tmp; uwsgi_temp_path $1/tmp; scgi_temp_path $1/tmp;
  server {
    listen $NET.3:8080;
    location /weights/sha256/ {
      proxy_pass http://$NET.2:8080;
      proxy_cache weights;
      proxy_cache_valid 200 7d;
      proxy_cache_lock on;
      proxy_cache_lock_timeout 600s;
      proxy_cache_revalidate on;
      add_header X-Cache-Status \$upstream_cache_status;
    }
  }
}
EOF
  ip netns exec "$TAG-c" /usr/sbin/nginx -p "$1" -c "$1/nginx.conf" -g 'daemon off;' > "$1/nginx.out" 2>&1 &
  PIDS+=($!)
}

# weights/propagation_s records so far
propagated() { local n; n=$(grep -c '"name": "weights/propagation_s"' "$1/metrics.jsonl" 2>/dev/null); echo "${n:-0}"; }

run_mode() { # MODE
  local mode=$1 dir=$OUT/$1
  rm -rf "$dir"; mkdir -p "$dir"
  config "$dir/cfg.json" "$mode"
  if [ "$mode" = lora_delta ] && ! "$BIN" config --set learner.lora.rank=8 > /dev/null 2>&1; then
    printf '{"mode": "%s", "skipped": "this build has no learner.lora (issue 43)"}\n' "$mode" | tee -a "$OUT/results.jsonl"; return
  fi
  if [ "$mode" = bf16_delta_cache ]; then
    [ -x /usr/sbin/nginx ] || { printf '{"mode": "%s", "skipped": "nginx is not installed (scripts/deps.sh)"}\n' "$mode" | tee -a "$OUT/results.jsonl"; return; }
    start_nginx "$dir/nginx"
  fi
  local b0; b0=$(daemon_bytes)
  ip netns exec "$TAG-d" "$BIN" train "$dir/cfg.json" --run-dir "$dir/run" --log-level info > "$dir/daemon.out" 2> "$dir/daemon.err" &
  local d=$!; PIDS+=($d)
  local wpids=() k
  for k in $(seq 1 "$W"); do
    ip netns exec "$TAG-w$k" "$BIN" worker --connect "tcp://$NET.2:5555" --name "w$k" --slots 1 --backend scripted \
      --spool "$dir/spool-w$k" --daemon-gone 60 > /dev/null 2> "$dir/w$k.err" &
    wpids+=($!); PIDS+=($!)
  done
  local t0 st=done; t0=$(now)
  while [ "$(propagated "$dir/run")" -lt "$V" ]; do
    kill -0 $d 2>/dev/null || { wait $d; st="daemon exited with status $?"; break; }
    python3 -c "import sys; sys.exit(0 if $(now) - $t0 < $TIMEOUT else 1)" || { st="timed out after ${TIMEOUT}s"; break; }
    sleep 1
  done
  local wall; wall=$(python3 -c "print(round($(now) - $t0, 1))")
  local b1; b1=$(daemon_bytes)
  kill -INT $d 2>/dev/null; wait_exit $d 60
  for k in "${wpids[@]}"; do kill "$k" 2>/dev/null; done
  for k in "${wpids[@]}"; do wait_exit "$k" 10; done
  [ "$mode" = bf16_delta_cache ] && { kill "$(cat "$dir/nginx/nginx.pid" 2>/dev/null)" 2>/dev/null; sleep 0.5; }
  python3 - "$dir" "$mode" "$V" "$W" "$st" "$wall" "$((b1 - b0))" <<'EOF' | tee -a "$OUT/results.jsonl"
import glob, json, os, re, statistics, sys
d, mode, V, W, status, wall, tx = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], float(sys.argv[6]), int(sys.argv[7])
m = {}
for line in open(d + "/run/metrics.jsonl"):
    r = json.loads(line)
    m.setdefault(r["name"], []).append(r["value"])
prop = m.get("weights/propagation_s", [])[:V]
# bytes_sent_per_version is written for version N-1 when N is published: [0] is v0 (every worker's first download)
sent = m.get("weights/bytes_sent_per_version", [])[1:V]
full = delta = 0
for f in glob.glob(d + "/w*.err"):
    for line in open(f):
        if re.search(r"weights version [1-9][0-9]* from ", line):
            if "(a delta against the version before)" in line: delta += 1
            else: full += 1
# what a worker loads (older versions are pruned: any one kept)
size = max([os.path.getsize(f) for f in glob.glob(d + "/run/checkpoints/v*/model.safetensors")] or [0])
ok = status == "done" and len(prop) == V
print(json.dumps({"mode": mode, "ok": ok, "status": status, "workers": W, "versions": len(prop),
                  "model_bytes": size,
                  "propagation_p50_s": round(statistics.median(prop), 3) if prop else None,
                  "propagation_max_s": round(max(prop), 3) if prop else None,
                  "daemon_bytes_per_version_p50": int(statistics.median(sent)) if sent else None,
                  "daemon_bytes_per_version_mean": int(statistics.mean(sent)) if sent else None,
                  "daemon_link_tx_bytes": tx, "worker_downloads_full": full, "worker_downloads_delta": delta,
                  "wall_s": wall}))
EOF
}

setup_net || { echo "weights-bench: could not build the namespaces and links (root, iproute2, tc's tbf)" >&2; exit 2; }
echo "weights-bench: $W workers, $V versions of $MODEL, links $RATE (cache $CACHE_RATE), delay $DELAY_USED" >&2
for mode in $MODES; do
  echo "weights-bench: $mode" >&2
  run_mode "$mode"
done
python3 - "$OUT/results.jsonl" "$DELAY_USED" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
base = next((r for r in rows if r["mode"] == "fp32" and r.get("ok")), None)
print("| mode | publish → last worker p50 s | max s | daemon bytes per version (p50) | vs fp32: time | vs fp32: bytes | worker downloads full / delta |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    if "skipped" in r:
        print("| %s | skipped: %s |||||" % (r["mode"], r["skipped"])); continue
    rt = rb = "—"
    if base and r.get("propagation_p50_s") and r.get("daemon_bytes_per_version_p50"):
        rt = "%.1f×" % (base["propagation_p50_s"] / r["propagation_p50_s"])
        rb = "%.1f×" % (base["daemon_bytes_per_version_p50"] / r["daemon_bytes_per_version_p50"])
    print("| %s%s | %s | %s | %s | %s | %s | %s / %s |" % (r["mode"], "" if r["ok"] else " (" + r["status"] + ")",
          r["propagation_p50_s"], r["propagation_max_s"], r["daemon_bytes_per_version_p50"], rt, rb,
          r["worker_downloads_full"], r["worker_downloads_delta"]))
EOF
! grep -q '"ok": false' "$OUT/results.jsonl"
