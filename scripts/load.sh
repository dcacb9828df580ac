# Sourced by soak.sh and scale.sh: one daemon on $OUT/cfg.json and scripted workers on loopback.
# start_load PORT N SLOTS PREFIX [BATCH]: starts the daemon (pid in $d) and N workers named PREFIX-i
# (pids in the array pids), BATCH at a time 0.5 s apart when BATCH > 0 (a cluster's workers come up
# over seconds, not all in one instant).  Needs BIN and OUT.
start_load() {
  local port=$1 n=$2 slots=$3 prefix=$4 batch=${5:-0} i
  "$BIN" train "$OUT/cfg.json" --run-dir "$OUT/run" --log-level warn > "$OUT/daemon.out" 2> "$OUT/daemon.err" &
  d=$!
  sleep 1
  pids=()
  for i in $(seq "$n"); do
    "$BIN" worker --connect "tcp://127.0.0.1:$port" --name "$prefix-$i" --slots "$slots" --backend scripted \
      --spool "$OUT/spool/$prefix-$i" --daemon-gone 120 > /dev/null 2> "$OUT/worker-$i.err" &
    pids+=($!)
    if [ "$batch" -gt 0 ] && [ $((i % batch)) = 0 ]; then sleep 0.5; fi
  done
}
